"""What the GLUE fine-tuning studies share: their common parameters, task resolution, data, fresh and
fine-tuned models (one checkpoint cache for all studies), fine-tuning under a fixed mask.

A study's parameters dataclass subclasses :class:`GlueStudyConfig` and adds its own axes (fractions,
strategies, budgets, ...); its ``check()`` calls ``super().check()`` first.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from headprune_utils.measure import costs
from headprune_utils.model import masks, models
from headprune_utils.model.architecture import head_shape
from headprune_utils.model.gates import ABLATION_VERSION, Ablation, as_ablation, head_means
from headprune_utils.model.precision import training_key
from headprune_utils.model.pruning import prune_heads
from headprune_utils.store import paths
from headprune_utils.store.caches import KEY_FIELD, cached, check_entry_key
from headprune_utils.store.results import atomic_write_json, fingerprint, machine_kind
from headprune_utils.studies import semantics
from headprune_utils.studies.base import Study
from headprune_utils.studies.config import ParameterError, as_dict
from headprune_utils.tasks import batching, data
from headprune_utils.tasks.metrics import compute_metrics, main_score
from headprune_utils.train import phases, training

EVAL_BATCH = 32  # forward-only batches; on a CPU larger ones are no faster
# Bump when a code change alters what fine-tuning produces (optimizer, label handling, data order):
# cached fine-tuned models and every study's result cells then no longer match.
TRAINING_VERSION = 2


def check_device(device: str) -> None:
    """``device`` is "auto", "cpu" or "cuda[:N]", and usable here (raises ParameterError)."""
    if device not in ("auto", "cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise ParameterError(f"device must be 'auto', 'cpu' or 'cuda[:N]' (N a GPU number), got {device!r}")
    try:
        models.resolve_device(device)
    except (ValueError, RuntimeError) as exc:
        raise ParameterError(f"device: {exc}") from None


@dataclass(frozen=True)
class GlueStudyConfig:
    """Parameters every GLUE fine-tuning study has; the defaults are the quick CPU profile."""

    model: str = "minilm"                       # "minilm" (embedded), a local folder, or a hub id (bert-base-uncased)
    tasks: list[str] = field(default_factory=lambda: ["SST-2", "STS-B"])  # GLUE names, or ["all"] = every available task
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # seed s: mask, classifier init, data order
    train_size: int | None = 300                # training examples per task (None: all)
    dev_size: int | None = 300                  # dev examples per task (None: all)
    subset_seed: int = 0                        # which examples form the subsets (fixed across seeds)
    epochs: int = 3                             # (with validation_size: the most epochs; the best one is kept)
    validation_size: int | None = None          # training examples held out to choose each model's epoch on (None: none; train all epochs)
    patience: int | None = None                 # with validation_size: stop once the held-out score has not improved for this many epochs (epochs: the cap); None: train every epoch
    batch_size: int = 16
    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float | None = 1.0           # gradient clipping norm (> 0), or None: no clipping
    max_length: int = 128                       # truncation only; batches are padded to their own longest
    freeze_word_embeddings: bool = True         # quick profile: fewer trainable parameters, faster on a CPU
    lean_training: bool = False                 # lean_loss: no work on padding nor on the last layer's other tokens (the same function, other dropout draws)
    eval_every_epoch: bool = False              # dev scores after every epoch (history); the final score is always measured
    device: str = "auto"                        # "auto" (CUDA when present), "cpu", "cuda"
    data_dir: str | None = None                 # GLUE root; None: $HEADPRUNE_DATA_DIR, else ../shared/data beside the checkout, else the hub
    allow_hub: bool = True                      # fall back to the Hugging Face hub for missing tasks
    progress: bool = True

    # parameters that change no number of a cell (display, where data comes from, the cell axes of the base)
    _NOT_RESULTS = ("tasks", "seeds", "progress", "device", "data_dir", "allow_hub")

    def check(self) -> None:
        """Cheap checks of names and sizes (loads the model's config only)."""
        if not self.seeds:
            raise ParameterError("seeds must not be empty")
        if len(set(self.seeds)) != len(self.seeds):
            raise ParameterError("seeds must not repeat")
        for name in ("train_size", "dev_size", "validation_size"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ParameterError(f"{name} must be a positive integer or None, got {v}")
        if self.validation_size is not None and self.train_size is not None and self.validation_size >= self.train_size:
            raise ParameterError(f"validation_size ({self.validation_size}) must be smaller than train_size "
                                 f"({self.train_size}): it is carved out of the training examples")
        if self.patience is not None:
            if self.validation_size is None:
                raise ParameterError(f"patience={self.patience} needs validation_size: the plateau is judged on the "
                                     "held-out training examples, never on the reported dev set")
            if not 1 <= self.patience < self.epochs:
                raise ParameterError(f"patience must be >= 1 and below epochs (the cap, {self.epochs}), got "
                                     f"{self.patience}")
        for name in ("epochs", "batch_size", "max_length"):
            if getattr(self, name) < 1:
                raise ParameterError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ParameterError(f"lr must be > 0, got {self.lr}")
        if not 0 <= self.warmup_ratio <= 1:
            raise ParameterError(f"warmup_ratio must be in [0, 1] (a share of the training steps), got {self.warmup_ratio}")
        if not self.weight_decay >= 0:
            raise ParameterError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ParameterError(f"max_grad_norm must be > 0, or None to switch clipping off, got {self.max_grad_norm}")
        for name in ("seeds",):
            negative = [s for s in getattr(self, name) if s < 0]
            if negative:
                raise ParameterError(f"{name} must be >= 0 (numpy seeds are unsigned), got {negative}")
        if self.subset_seed < 0:
            raise ParameterError(f"subset_seed must be >= 0, got {self.subset_seed}")
        if not self.tasks:
            raise ParameterError("tasks must not be empty")
        if self.tasks != ["all"]:
            for t in self.tasks:
                try:
                    data.get_task(t)
                except ValueError as exc:
                    raise ParameterError(f"tasks: {exc}") from None
            names = [data.get_task(t).name for t in self.tasks]
            if len(set(names)) != len(names):
                raise ParameterError(f"tasks name the same task twice: {self.tasks}")
        try:
            data.resolve_data_dir(self.data_dir)  # a named but missing folder is an error now, not later
        except data.DataUnavailableError as exc:
            raise ParameterError(f"data_dir: {exc}") from None
        check_device(self.device)

    def check_available(self) -> None:
        """The tasks' data can be had: locally, or from the hub when it is allowed and reachable (run by
        ``config.validate`` after every other check, so a wrong value is reported before missing data)."""
        if self.tasks == ["all"]:
            return
        avail = data.task_availability([data.get_task(t).name for t in self.tasks], self.data_dir)
        gone = [(t, s) for t, v in avail.items() for s, ok in v.items() if not ok]
        if not gone:
            return
        looked = [data.local_split_path(t, s, self.data_dir) for t, s in gone]
        what = ", ".join(f"{t} {s}" for t, s in gone) + (
            " (looked for " + ", ".join(str(p) for p in looked[:3]) + (", ..." if len(looked) > 3 else "") + ")"
            if looked[0] is not None else " (no local data folder: data_dir, HEADPRUNE_DATA_DIR and ../shared/data "
            "beside the checkout are all unset or absent)")
        if not self.allow_hub:
            raise ParameterError(f"tasks: no local data for {what} and allow_hub is false")
        blocked = data.hub_blocked() if not models.is_planning() else None
        if blocked:
            root = data.resolve_data_dir(self.data_dir)
            fix = (f"Put glue/<TASK>/ under {root}, or point HEADPRUNE_DATA_DIR (or data_dir) at a folder holding it"
                   if root is not None else "Set HEADPRUNE_DATA_DIR (or data_dir) to a folder holding glue/<TASK>/")
            raise ParameterError(f"tasks: no local data for {what}, and the hub cannot be used: {blocked}. "
                                 f"{fix}, or go online")

    def head_shape(self) -> tuple[int, int]:
        """``(n_layers, n_heads)`` of the model (reads its config only)."""
        return head_shape(models.load_config(self.model))

    def check_fractions(self, name: str, fractions: list[float]) -> None:
        """Every fraction is a possible budget for this model."""
        if not fractions:
            raise ParameterError(f"{name} must not be empty")
        if len(set(fractions)) != len(fractions):
            raise ParameterError(f"{name} must not repeat")
        n_layers, n_heads = self.head_shape()
        for f in fractions:
            try:
                masks.n_pruned_for_fraction(f, n_layers, n_heads)
            except masks.BudgetError as exc:
                raise ParameterError(f"{name}: {exc}") from None

    def check_pruned_heads(self, name: str, fractions: list[float], some_kept: bool = False) -> None:
        """Every fraction prunes at least one head once rounded (and, with ``some_kept``, keeps at least one), and no
        two prune the same number: a budget that rounds to 0 heads would silently repeat the unpruned reference, two
        that round to one count one mask under two labels."""
        n_layers, n_heads = self.head_shape()
        total = n_layers * n_heads
        counts: dict[int, float] = {}
        for f in fractions:
            n = masks.n_pruned_for_fraction(f, n_layers, n_heads)
            if n in counts:
                raise ParameterError(f"{name}: {counts[n]:g} and {f:g} both prune {n} of {total} heads once rounded "
                                     "(one mask under two labels); give budgets at least "
                                     f"{1 / total:.4g} apart")
            counts[n] = f
            if n == 0:
                raise ParameterError(f"{name}: {f:g} prunes no head of {total} once rounded (0 is the unpruned "
                                     f"reference, always included); the smallest budget is {1 / total:.4g}")
            if some_kept and n == total:
                raise ParameterError(f"{name}: {f:g} prunes all {total} heads once rounded; some must be kept")

    def check_finetune_fractions(self) -> None:
        """``finetune_fractions`` (None: all) pick the mask-then-fine-tune regime's fractions out of ``fractions``."""
        if self.finetune_fractions is None:
            return
        self.check_fractions("finetune_fractions", self.finetune_fractions)
        extra = sorted(set(self.finetune_fractions) - set(self.fractions))
        if extra:
            raise ParameterError(f"finetune_fractions {extra} are not in fractions {self.fractions}")


@dataclass(frozen=True)
class MaskingStudyConfig(GlueStudyConfig):
    """The parameters of a GLUE study that masks heads under named ablation semantics (``semantics.py``): every
    cell carries its semantics in its key (``ablation``), so results of different semantics never mix.

    ``ablations``: the semantics of the evaluation-only cells (fine-tune, then mask: cheap, every one is run);
    ``finetune_ablations``: the semantics of the mask-then-fine-tune cells (one fine-tuning each). A study's
    claims are decided under their own paper's semantics (primary) and re-tested under the others measured
    (sensitivity); the defaults (the quick profile) run ``uniform`` and ``zero`` without fine-tuning (``mean`` too in
    the standard profile) and Budhraja et al.'s ``uniform`` with it."""

    ablations: list[Ablation] = field(default_factory=lambda: ["uniform", "zero"])  # semantics of the evaluation-only cells (fine-tune, then mask; "mean" too where affordable)
    finetune_ablations: list[Ablation] = field(default_factory=lambda: ["uniform"])  # semantics of the mask-then-fine-tune cells (one fine-tuning each)
    finetune_tasks: list[str] | None = None     # tasks of the mask-then-fine-tune regime (None: every task); the others are evaluation-only

    def check(self) -> None:
        semantics.check_ablations("ablations", self.ablations)
        semantics.check_ablations("finetune_ablations", self.finetune_ablations)
        super().check()
        if self.finetune_tasks is not None:
            if not self.finetune_tasks:
                raise ParameterError("finetune_tasks must not be empty (None: every task)")
            try:
                names = [data.get_task(t).name for t in self.finetune_tasks]
            except ValueError as exc:
                raise ParameterError(f"finetune_tasks: {exc}") from None
            if self.tasks != ["all"]:
                extra = sorted(set(names) - {data.get_task(t).name for t in self.tasks})
                if extra:
                    raise ParameterError(f"finetune_tasks {extra} are not in tasks {self.tasks}")

    def finetunes(self, task: str) -> bool:
        """Whether the mask-then-fine-tune regime runs on ``task`` (``finetune_tasks``; None: every task)."""
        return self.finetune_tasks is None or data.get_task(task).name in {data.get_task(t).name for t in self.finetune_tasks}


def fine_tuned_at(cfg, fraction: float) -> bool:
    """Whether the mask-then-fine-tune regime runs at ``fraction`` (``cfg.finetune_fractions``; None: all)."""
    return cfg.finetune_fractions is None or fraction in cfg.finetune_fractions


def resolve_tasks(cfg: GlueStudyConfig) -> tuple[list[str], dict[str, str]]:
    """(tasks to run, {task: why unavailable}). ``["all"]`` means every task with train and dev data."""
    names = list(data.TASKS) if cfg.tasks == ["all"] else [data.get_task(t).name for t in cfg.tasks]
    avail = data.task_availability(names, cfg.data_dir, allow_hub=False)
    runnable, missing = [], {}
    for t in names:
        if avail[t]["train"] and avail[t]["dev"]:
            runnable.append(t)
        elif cfg.allow_hub and cfg.tasks != ["all"]:
            runnable.append(t)  # explicitly asked for: try the hub, fail loudly if that fails
        else:
            missing[t] = "no local " + " and ".join(s for s in ("train", "dev") if not avail[t][s]) + " split"
    if not runnable:
        raise data.DataUnavailableError(f"none of the tasks {names} has data: {missing}")
    return runnable, missing


def result_params(cfg: GlueStudyConfig, device: torch.device, version: int, drop: tuple[str, ...] = ()) -> dict:
    """What a cell's result depends on besides the cell itself (fingerprinted).

    The parameters minus the cell axes (``drop``) and display options; plus the device type (CPU and CUDA
    draw different dropout streams), what the data are (the content hash of every task split the run reads, or
    "hub"), and the code's versions (``version``: the study's; TRAINING_VERSION: fine-tuning's). A data file
    that changes (a corrupt copy replaced by a good one) therefore never reuses the cells made from the other.
    """
    d = as_dict(cfg)
    for k in (*GlueStudyConfig._NOT_RESULTS, *drop):
        d.pop(k, None)
    if d.get("validation_size", 0) is None:  # as in training_fingerprint
        d.pop("validation_size")
    if not d.get("lean_training", False):  # as in training_fingerprint
        d.pop("lean_training", None)
    if d.get("patience", 0) is None:  # as in training_fingerprint
        d.pop("patience")
    d["device_type"] = torch.device(device).type
    d.update(training_key(device))  # bf16 training on CUDA; nothing on the CPU
    d["data_source"] = "local" if data.resolve_data_dir(cfg.data_dir) is not None else "hub"
    d["data"] = data_fingerprints(cfg)
    d["results_version"] = version
    d["training_version"] = TRAINING_VERSION
    if isinstance(cfg, MaskingStudyConfig):
        for k in ("ablations", "finetune_ablations", "finetune_tasks", "ablation"):  # cell axes: in the keys
            d.pop(k, None)
        d["ablation_version"] = ABLATION_VERSION  # what each semantics computes
    return d


def data_fingerprints(cfg: GlueStudyConfig, tasks: list[str] | None = None) -> dict[str, str]:
    """``{"<task>/<split>": content hash (or "hub")}`` of every split of the run's tasks (``tasks``: these only)."""
    names = resolve_tasks(cfg)[0] if tasks is None else tasks
    return {f"{t}/{s}": data.split_fingerprint(t, s, cfg.data_dir) for t in names for s in data.SPLITS}


def training_fingerprint(cfg: GlueStudyConfig, device: torch.device, task: str | None = None) -> str:
    """What a fine-tuned UNPRUNED model depends on: the key of the checkpoint cache shared by all studies
    (with ``task``: that task's training data too)."""
    keys = ("model", "train_size", "subset_seed", "epochs", "batch_size", "lr", "weight_decay", "warmup_ratio",
            "max_grad_norm", "max_length", "freeze_word_embeddings")
    d = {k: getattr(cfg, k) for k in keys}
    if cfg.validation_size is not None:  # absent when None: the models cached before it existed stay valid
        d["validation_size"] = cfg.validation_size
    if cfg.lean_training:  # absent when off (the same reason): lean runs draw other dropout masks
        d["lean_training"] = True
    if cfg.patience is not None:  # absent when None (the same reason)
        d["patience"] = cfg.patience
    d["device_type"] = torch.device(device).type
    d.update(training_key(device))  # bf16 training on CUDA; nothing on the CPU
    d["data_source"] = "local" if data.resolve_data_dir(cfg.data_dir) is not None else "hub"
    if task is not None:
        d["train_data"] = data.split_fingerprint(task, "train", cfg.data_dir)
    d["training_version"] = TRAINING_VERSION
    return fingerprint(d)


def train_config(cfg: GlueStudyConfig) -> training.TrainConfig:
    return training.TrainConfig(epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                                weight_decay=cfg.weight_decay, warmup_ratio=cfg.warmup_ratio,
                                max_grad_norm=cfg.max_grad_norm, lean=cfg.lean_training, patience=cfg.patience)


class GlueContext:
    """Data, tokenizer and fine-tuned models shared by the cells of one process.

    Fine-tuned unpruned models are cached on disk in ``cache_dir`` (``StudyPaths.finetuned_cache``: one
    folder per profile) keyed by :func:`training_fingerprint`, so every study of a batch run reuses the
    same (task, seed) model.
    """

    def __init__(self, cfg: GlueStudyConfig, device: torch.device, cache_dir: Path):
        self.cfg, self.device = cfg, device
        self.cache_dir = Path(cache_dir)
        phases.report(f"loading the tokenizer of {cfg.model}")
        self.tokenizer = models.load_tokenizer(cfg.model)
        self._data: dict[str, tuple] = {}
        self.shape = cfg.head_shape()
        self._last_full: tuple | None = None  # ((task, seed), model, history) most recently used
        self._means: dict = {}  # (task, seed) -> mean-ablation values of the full model (last one only)
        self.full_model_sha: dict[tuple[str, int], str] = {}  # (task, seed) -> hash of the weights used here

    def task_data(self, task: str):
        """``(spec, train Encoded, dev Encoded, train source, dev source, validation Encoded or None)`` of the
        task's subsets. With ``validation_size``, that many examples of the training subset (a seeded random choice,
        ``subset_seed + 1``) are held out as the validation split each model's epoch is chosen on; the training
        Encoded is the rest. The reported dev set is never used for any choice."""
        if task not in self._data:
            phases.report(f"{task}: loading and tokenizing the data")
            spec = data.get_task(task)
            tr = data.subset(data.load_task(task, "train", self.cfg.data_dir, allow_hub=self.cfg.allow_hub),
                             self.cfg.train_size, self.cfg.subset_seed)
            dv = data.subset(data.load_task(task, "dev", self.cfg.data_dir, allow_hub=self.cfg.allow_hub),
                             self.cfg.dev_size, self.cfg.subset_seed)
            val = None
            if self.cfg.validation_size is not None:
                tr, val = data.hold_out(tr, self.cfg.validation_size, self.cfg.subset_seed + 1)
            mx = self.cfg.max_length
            etr, edv = batching.encode(self.tokenizer, tr, mx), batching.encode(self.tokenizer, dv, mx)
            evl = batching.encode(self.tokenizer, val, mx) if val is not None else None
            if spec.is_regression:
                batching.standardize_labels(etr, edv, *([evl] if evl is not None else []))
            self._data[task] = (spec, etr, edv, tr.source, dv.source, evl)
        return self._data[task]

    def fresh_model(self, task: str, seed: int):
        """The pre-trained model with a new classifier head (initialised by ``seed``)."""
        spec = self.task_data(task)[0]
        phases.report(f"{task} s{seed}: loading the pre-trained model {self.cfg.model}")
        model = models.load_classifier(self.cfg.model, spec.num_labels, device=self.device, seed=seed)
        if self.cfg.freeze_word_embeddings:
            model.get_input_embeddings().weight.requires_grad_(False)
        return model

    def checkpoint_path(self, task: str, seed: int) -> Path:
        return paths.finetuned_model(self.cache_dir, task, seed, training_fingerprint(self.cfg, self.device, task))

    def finetune_masked(self, task: str, seed: int, mask: torch.Tensor, desc: str, ablation: Ablation,
                        checkpoint: Path | None = None):
        """A fresh model, pruned by ``mask`` under ``ablation`` (physically for "zero", else gated: the mask is
        fixed and the masked heads' value and output projections keep training), fine-tuned.

        Returns (model, history, gates, means): evaluate with the same ``gates``/``means`` (None when the
        heads were removed physically). ``checkpoint``: where the fine-tuning keeps its state after every epoch and
        resumes from (``training.finetune``; on this machine kind only); the caller removes it once the result is
        stored.
        """
        cfg = self.cfg
        spec, tr, dv, *_, val = self.task_data(task)
        model = self.fresh_model(task, seed)
        gates, means = None, None
        if bool((mask < 1).any()):
            if as_ablation(ablation).equals_removal:
                prune_heads(model, mask)  # same outputs as zero gates, and faster
            else:
                gates = mask.to(self.device)
                if as_ablation(ablation).needs_means:
                    means = self.means(model, tr)
        resume = {"checkpoint": checkpoint, "machine": machine_kind(self.device)}
        if val is not None:  # each model's epoch chosen on the held-out validation split
            history = training.finetune(model, tr, task, train_config(cfg), seed, dev=val, gates=gates,
                                        ablation=ablation, means=means, progress=cfg.progress, desc=desc,
                                        keep_best=True, dev_name="val", **resume)
        else:
            history = training.finetune(model, tr, task, train_config(cfg), seed,
                                        dev=dv if cfg.eval_every_epoch else None, gates=gates,
                                        ablation=ablation, means=means, progress=cfg.progress, desc=desc, **resume)
        return model, history, gates, means

    def masked_scores_path(self, task: str, seed: int, mask: torch.Tensor, ablation: Ablation) -> Path:
        cfg = self.cfg
        key = fingerprint({"training": training_fingerprint(cfg, self.device, task), "task": task, "seed": int(seed),
                           "dev_data": data.split_fingerprint(task, "dev", cfg.data_dir),
                           "mask": masks.mask_to_string(mask), "ablation": ablation, "dev_size": cfg.dev_size,
                           "max_length": cfg.max_length, "eval_every_epoch": cfg.eval_every_epoch,
                           "training_version": TRAINING_VERSION})
        return paths.masked_scores(self.cache_dir, task, seed, key)

    def masked_scores(self, task: str, seed: int, mask: torch.Tensor, desc: str,
                      ablation: Ablation) -> tuple[dict, list[dict]]:
        """(dev metrics, history) of the pre-trained model pruned by ``mask`` and fine-tuned (mask, then
        fine-tune), cached on disk beside the fine-tuned full models: keyed by everything the numbers depend
        on (training parameters, task, seed, mask, ablation, dev subset), so studies that fine-tune the same
        mask share one run."""
        def build(tmp: Path) -> None:  # a fine-tuning cut short resumes from its last epoch (its checkpoint)
            model, history, gates, means = self.finetune_masked(task, seed, mask, desc, ablation,
                                                                checkpoint=training.checkpoint_beside(where))
            metrics = training.evaluate(model, self.task_data(task)[2], task, EVAL_BATCH, gates=gates,
                                        ablation=ablation, means=means)
            atomic_write_json(tmp, {"metrics": metrics, "history": history, KEY_FIELD: where.name})

        def load(path: Path) -> dict:
            saved = json.loads(path.read_text())
            check_entry_key(path, saved.get(KEY_FIELD))
            return saved

        phases.report(f"{desc}: the masked fine-tuning (cached, being trained by another study, or trained now)")
        where = self.masked_scores_path(task, seed, mask, ablation)
        saved = cached(where, build, load)
        training.remove_checkpoint(training.checkpoint_beside(where))  # the result is stored: no longer needed
        return saved["metrics"], saved["history"]

    def means(self, model, enc) -> torch.Tensor:
        """Mean-ablation values: each head's mean output over ``enc`` (the task's training subset)."""
        return head_means(model, (b for _, b in batching.iterate(enc, batching.eval_batches(enc.lengths, 64), self.device)))

    def full_means(self, task: str, seed: int) -> torch.Tensor:
        """The fine-tuned full model's mean-ablation values, computed once per (task, seed)."""
        if (task, seed) not in self._means:
            self._means = {(task, seed): self.means(self.full_model(task, seed)[0], self.task_data(task)[1])}
        return self._means[(task, seed)]

    def full_model(self, task: str, seed: int):
        """(model, history, trained_now) of the fine-tuned unpruned model of (task, seed).

        From memory, the disk cache, or trained now and cached. Gates never modify it; callers must not
        change its weights (copy it first).
        """
        if self._last_full is not None and self._last_full[0] == (task, seed):
            return self._last_full[1], self._last_full[2], False
        trained_now = False

        def build(tmp: Path) -> None:  # studies side by side train each model once (caches.cached)
            nonlocal trained_now
            n_layers, n_heads = self.shape
            model, history, _, _ = self.finetune_masked(task, seed, torch.ones(n_layers, n_heads), f"{task} s{seed} full",
                                                        "zero",  # no head masked: every semantics is the same model
                                                        checkpoint=training.checkpoint_beside(where))
            torch.save({"state_dict": model.state_dict(), "history": history, KEY_FIELD: where.name}, tmp)
            trained_now = True

        def load(path: Path):
            model = self.fresh_model(task, seed)
            saved = torch.load(path, map_location=self.device, weights_only=True)
            check_entry_key(path, saved.get(KEY_FIELD))  # another (task, seed)'s model swapped in is never used
            model.load_state_dict(saved["state_dict"])
            model.eval()
            return model, saved.get("history", [])

        # the cached model, or (while another study side by side trains it) a wait for it, or its training now
        phases.report(f"{task} s{seed}: the fine-tuned full model (cached, being trained by another study, or "
                      "trained now)")
        where = self.checkpoint_path(task, seed)
        model, history = cached(where, build, load)
        training.remove_checkpoint(training.checkpoint_beside(where))  # the model is stored: no longer needed
        self.full_model_sha[(task, int(seed))] = models.weights_sha(model)
        self._last_full = ((task, seed), model, history)
        return model, history, trained_now


def provenance(ctx: "GlueContext", cell) -> dict:
    """``{"full_model_sha": ...}`` when this process used the fine-tuned full model of the cell's (task, seed)
    (``Study.provenance`` of the GLUE studies): the check that one training underlies all cells of a model."""
    axes = cell.axes
    pruned = axes.get("fraction", axes.get("budget", 0)) or 0
    if axes.get("regime", "mask_then_finetune") == "mask_then_finetune" and pruned > 0:
        return {}  # a masked model fine-tuned from the pre-trained one: the full model was not used
    sha = ctx.full_model_sha.get((axes.get("task"), axes.get("seed"))) if hasattr(ctx, "full_model_sha") else None
    return {"full_model_sha": sha} if sha else {}


def recorded_curve(history) -> list[dict]:
    """The held-out curve of a full model as a cell that masks it records it (``full_model_history``): every entry
    of the fine-tuning's history without its clock readings (keys ending in ``seconds``), so that the cell is the
    same however often, and wherever, it is computed."""
    return [{k: v for k, v in entry.items() if not str(k).endswith("seconds")} for entry in (history or [])]


def batches(enc: batching.Encoded, device: torch.device, limit: int | None = None) -> list[dict]:
    """Length-sorted batches (with labels, on ``device``) of the first ``limit`` examples of ``enc`` (all when None)."""
    if limit is not None and limit < len(enc):
        enc = batching.Encoded(enc.input_ids[:limit], enc.token_type_ids[:limit] if enc.token_type_ids else None,
                               enc.labels[:limit], enc.pad_id)
    return [b for _, b in batching.iterate(enc, batching.eval_batches(enc.lengths, EVAL_BATCH), device)]


def chance_score(task: str, train, dev) -> float:
    """The score of a constant predictor: the training subset's majority class (0 for a regression's correlation)."""
    if data.get_task(task).is_regression:
        return 0.0
    values, counts = np.unique(train.labels, return_counts=True)
    preds = np.full(len(dev.labels), values[np.argmax(counts)])
    return float(main_score(task, compute_metrics(task, preds, np.asarray(dev.labels))))



def epochs_text(cfg) -> str:
    """A fine-tuning's length in words for a run's scale: ``"3 epochs"``, or with ``patience`` (trained to the
    plateau of the held-out score, ``epochs`` the cap) ``"up to 10 epochs (to the plateau of the held-out score,
    patience 2)"``."""
    patience = getattr(cfg, "patience", None)
    return (f"{cfg.epochs} epochs" if patience is None
            else f"up to {cfg.epochs} epochs (to the plateau of the held-out score, patience {patience})")


def scale_text(cfg: GlueStudyConfig, table: pd.DataFrame) -> str:
    """A GLUE study run's scale in words (the ``scale`` column of its verdicts), from ``cfg`` and the heads of
    the table's masks."""
    shape = masks.mask_from_string(str(table["mask"].iloc[0])).shape if len(table) and "mask" in table else None
    heads = f"{shape[0]} x {shape[1]} heads" if shape is not None else "heads n/a (no cells)"
    train = "full training sets" if cfg.train_size is None else f"{cfg.train_size} training examples"
    dev = "full dev sets" if cfg.dev_size is None else f"{cfg.dev_size} dev examples"
    text = f"{cfg.model} ({heads}); {train} x {epochs_text(cfg)}, {dev}; {len(cfg.seeds)} seeds per task"
    return scale_note(text, is_paper_setup(cfg))


# The GLUE papers' set-up (Budhraja et al. and Bian et al. fine-tune BERT-base on whole GLUE training sets, score
# whole dev sets, 3 epochs, batch 32, lr 2e-5): the one rule by which every GLUE study says whether a run is it.
PAPER_SETUP = {"model": "bert-base-uncased", "train_size": None, "dev_size": None, "epochs": 3, "batch_size": 32,
               "lr": 2e-5}
SMALL_SCALE = "; a small-scale test, not the paper's set-up"


def is_paper_setup(cfg) -> bool:
    """Whether ``cfg`` is the GLUE papers' set-up (:data:`PAPER_SETUP`: every field equal)."""
    return all(getattr(cfg, k) == v for k, v in PAPER_SETUP.items())


def scale_note(text: str, paper: bool) -> str:
    """``text`` (a run's scale in words), saying it is a small-scale test unless ``paper``."""
    return text if paper else text + SMALL_SCALE


# ---------------------------------------------------------------------------------------------- planned cost

def finetune_cost(cfg: GlueStudyConfig, task: str, kept_share: float = 1.0, ablation: str = "zero") -> float:
    """Estimated FLOPs of fine-tuning on the task's training subset for ``cfg.epochs`` epochs and scoring the dev
    subset, with ``kept_share`` of the heads (pruned heads cost nothing only when removed: ``ablation="zero"``)."""
    share = kept_share if as_ablation(ablation).equals_removal else 1.0
    shape = costs.Shape.of(cfg.model)
    n_tr, len_tr = costs.split_tokens(task, "train", cfg.train_size, cfg.data_dir)
    val = cfg.epochs * eval_cost(cfg, task, share, split="train", size=cfg.validation_size) if cfg.validation_size else 0.0
    return (costs.train_flops(shape, cfg.epochs * n_tr * len_tr, len_tr, share)
            + eval_cost(cfg, task, share) + val)


def eval_cost(cfg: GlueStudyConfig, task: str, kept_share: float = 1.0, split: str = "dev",
              size: int | None | str = "cfg") -> float:
    """Estimated FLOPs of one forward pass over the task's dev subset (or ``split`` of ``size`` examples)."""
    shape = costs.Shape.of(cfg.model)
    n = (cfg.dev_size if split == "dev" else cfg.train_size) if size == "cfg" else size
    n_ex, length = costs.split_tokens(task, split, n, cfg.data_dir)
    return costs.forward_flops(shape, n_ex * length, length, kept_share)


class GlueStudy(Study):
    """What every GLUE study shares beyond the protocol (:class:`~headprune_utils.studies.base.Study`): its
    ``run_meta.json`` records the tasks run and the ones unavailable (with why) and the content hashes of the task
    splits it reads. A cell's model is the fine-tuned model of its task and seed (a cell of the pre-trained encoder,
    task ``"pretrained"`` and no seed, is a slice of its own)."""

    model_axes = ("task", "seed")

    def run_params(self, cfg) -> dict:
        tasks, missing = resolve_tasks(cfg)
        return {"tasks_run": tasks, "tasks_unavailable": missing}

    def data_fingerprints(self, cfg) -> dict:
        return data_fingerprints(cfg)
