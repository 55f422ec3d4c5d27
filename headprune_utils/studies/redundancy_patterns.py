"""Study 4: attention redundancy patterns (Bian et al. 2021), the Five Ws and How.

A redundancy matrix holds the distance between every pair of heads' attention maps on a probe (a set of
inputs), averaged over its sentences (``redundancy.py`` defines the six distances; ``clustering.py``
clusters heads and compares matrices). Cells are (model, probe) pairs; each stores the matrices of every
distance on the two halves of its probe (so the split-half agreement, the probe-noise ceiling of every
comparison, comes for free; the full matrix is the sentence-weighted mean of the halves):

- What/How: the pre-trained model on generic text (``generic``: single sentences pooled from the probe tasks'
  dev splits), every distance; how the distances agree.
- Where: the clusters of the pre-trained model's matrix (``cluster_metric``).
- When: the pre-trained vs the fine-tuned model (``tasks`` x ``seeds``, fine-tuned by the recipe of studies 1-3
  and taken from the same model cache: the same weights where they were trained on the same kind of machine, other
  trainings otherwise; each cell records its model's hash, ``full_model_sha``) on the same task inputs
  (``task-<T>`` probes): phase independence.
- Who: the pre-trained model on every probe task's dev inputs and on random token sequences
  (``random-<r>``): task independence.
- Why: the pre-trained model after brief continued masked-LM training with dropout ``p`` (``mlm.py`` says what
  this is and is not), on the generic probe, against seed-to-seed variation at the same ``p``.
- The negative control (``random_init_control``): the pre-trained model's architecture with randomly initialised
  weights (``AutoModel.from_config``, seed :data:`CONTROL_SEED`; nothing from the hub) on every probe of the
  pre-trained model. What it shares with the pre-trained model is not evidence of learned redundancy.

The claims are declared once, as data, in :mod:`.redundancy_patterns_claims` (``claims = CLAIMS``). The analysis
(pure functions over the cells' table: the matrices back, the Five Ws, the negative control, the claims'
measurements and verdicts) is in :mod:`.redundancy_patterns_analysis`; both are re-exported here so the notebook
needs one module, and :func:`verdicts` decides the study's ``claims`` with the analysis.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from headprune_utils.tasks import batching, data, probes
from headprune_utils.measure import clustering, costs, redundancy
from headprune_utils.studies import glue_workbench
from headprune_utils.train import mlm
from headprune_utils.model import models
from headprune_utils.studies.config import ParameterError, check_fields
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import fingerprint, pack_floats
from headprune_utils.studies.base import NON_NEGATIVE, Cell, Cost, Study
from headprune_utils.studies.redundancy_patterns_analysis import ( # the analysis: pure functions over the table, re-exported for the notebook
    CONTROL, CONTROL_SEED, MEASUREMENTS, NO_RANDOM_INIT, PRETRAINED_TASK, Matrices, claim_verdicts, control_failures,
    control_measured,
    group_labels, metric_agreement, mlm_losses, negative_control, sameness, scale_text, summary_stats, when, where,
    who, why,
)
from headprune_utils.studies.redundancy_patterns_claims import (CLAIMS, CONVERGED, MLM_TRAINED, ONE_MODEL, PAIR_CONVERGED,
                                                             ControlGate, MlmTrained)

__all__ = [
    "NAME", "STUDY", "RedundancyPatterns", "RedundancyPatternsConfig", "Context", "resolve_probe_tasks",
    "text_tasks", "finetuned_tasks", "probe_names", "plan_cells", "study_fingerprint", "random_init_model",
    "probe_matrices", "run_cell",
    # the analysis (redundancy_patterns_analysis) and the claims (_claims), re-exported so the notebook needs one module
    "Matrices", "metric_agreement", "summary_stats", "where", "group_labels", "when", "who", "why", "sameness",
    "negative_control", "CONTROL", "CONTROL_SEED", "MEASUREMENTS", "claim_verdicts", "verdicts", "scale_text",
    "mlm_losses", "control_failures", "control_measured", "NO_RANDOM_INIT", "PRETRAINED_TASK",
    "CLAIMS", "MLM_TRAINED", "ONE_MODEL", "ControlGate", "MlmTrained", "CONVERGED", "PAIR_CONVERGED",
]

NAME = "redundancy_patterns"
# Bump when a code change alters this study's results: old cells then no longer match.
# 2: the matrices are stored packed (float32, base64; results.pack_floats), about a quarter of the size of version 1's
#    indented lists of 7-decimal numbers, so that the standard profile's cells can be committed.
RESULTS_VERSION = 2
PROBE_SPLITS = ("random", "file_order")  # how a probe is halved (RedundancyPatternsConfig.probe_split, _halves)


@dataclass(frozen=True)
class RedundancyPatternsConfig(glue_workbench.GlueStudyConfig):
    """Parameters of the study (the shared ones, used for the fine-tuned models, in ``glue_workbench.GlueStudyConfig``)."""

    metrics: list[str] = field(default_factory=lambda: list(redundancy.METRICS))  # distances (redundancy.METRICS)
    probe_size: int = 48                        # sentences per probe (two halves: their split-half r)
    probe_split: str = "random"                 # a probe's two halves: "random" (seeded by subset_seed) or "file_order" (first and second half in the data file's order: the cells made before 2026-12-06; halves differ in content where the file is ordered, e.g. STS-B by genre)
    probe_max_length: int = 48                  # probe inputs truncated to this many tokens (sentence distances cost ~n^3)
    probe_tasks: list[str] = field(default_factory=lambda: ["all"])  # "Who": tasks whose dev inputs probe the model; ["all"]: every task with local dev data
    random_probes: int = 2                      # probes of random token sequences (seeds 0, 1, ...)
    cluster_metric: str = "js"                  # the distance clustered and drawn in detail
    k_min: int = 2                              # clusters tried (silhouette criterion): k_min..k_max
    k_max: int = 16
    dropouts: list[float] = field(default_factory=lambda: [0.0, 0.1, 0.3])  # "Why": dropout of continued MLM training
    mlm_seeds: list[int] = field(default_factory=lambda: [0, 1])  # MLM runs per dropout (seed-to-seed variation)
    mlm_steps: int = 50                         # encoder steps of continued MLM training
    mlm_head_steps: int = 100                   # steps training a new MLM head alone first (0: the checkpoint has one)
    mlm_lr: float = 1e-4
    mlm_batch_size: int = 16
    mlm_text_size: int = 4000                   # training sentences (pooled GLUE train text, labels unused)
    n_permutations: int = 999                   # Mantel test permutations
    n_null: int = 99                            # shuffled matrices for the silhouette null (cluster structure)
    min_cluster_size: int = 3                   # smaller clusters hold "unique" heads, not structure (see clustering.core_silhouette)
    random_init_control: bool = True            # negative control: the same architecture, randomly initialised, on every probe

    def check(self) -> None:
        check_fields(self)
        unknown = [m for m in self.metrics if m not in redundancy.METRICS]
        if unknown or not self.metrics or len(set(self.metrics)) != len(self.metrics):
            raise ParameterError(f"metrics must be distinct names from {list(redundancy.METRICS)}, got {self.metrics}")
        if self.cluster_metric not in self.metrics:
            raise ParameterError(f"cluster_metric {self.cluster_metric!r} must be one of metrics {self.metrics}")
        if not isinstance(self.random_init_control, bool):
            raise ParameterError(f"random_init_control must be true or false, got {self.random_init_control!r}")
        if self.probe_max_length < 4:
            raise ParameterError(f"probe_max_length must be >= 4, got {self.probe_max_length}")
        if self.probe_split not in PROBE_SPLITS:
            raise ParameterError(f"probe_split must be one of {list(PROBE_SPLITS)}, got {self.probe_split!r}")
        if self.probe_size < 4:
            raise ParameterError(f"probe_size must be >= 4 (two halves of >= 2 sentences), got {self.probe_size}")
        if self.random_probes < 0:
            raise ParameterError(f"random_probes must be >= 0, got {self.random_probes}")
        if self.min_cluster_size < 1:
            raise ParameterError(f"min_cluster_size must be >= 1, got {self.min_cluster_size}")
        if not 2 <= self.k_min <= self.k_max:
            raise ParameterError(f"need 2 <= k_min <= k_max, got {self.k_min}, {self.k_max}")
        if any(not 0.0 <= p < 1.0 for p in self.dropouts) or len(set(self.dropouts)) != len(self.dropouts):
            raise ParameterError(f"dropouts must be distinct values in [0, 1), got {self.dropouts}")
        if self.dropouts and (not self.mlm_seeds or len(set(self.mlm_seeds)) != len(self.mlm_seeds)):
            raise ParameterError("mlm_seeds must be a non-empty list of distinct seeds when dropouts are given")
        for name in ("mlm_steps", "mlm_batch_size", "mlm_text_size"):
            if getattr(self, name) < 1:
                raise ParameterError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.mlm_head_steps < 0 or not self.mlm_lr > 0:
            raise ParameterError("mlm_head_steps must be >= 0 and mlm_lr > 0")
        if self.n_permutations < 99 or self.n_null < 19:
            raise ParameterError(f"n_permutations must be >= 99 and n_null >= 19, got {self.n_permutations}, {self.n_null}")
        if self.probe_tasks != ["all"]:
            for t in self.probe_tasks:
                try:
                    data.get_task(t)
                except ValueError as exc:
                    raise ParameterError(f"probe_tasks: {exc}") from None
        super().check()
        if self.probe_tasks != ["all"]:
            avail = data.task_availability([data.get_task(t).name for t in self.probe_tasks], self.data_dir)
            gone = [t for t, v in avail.items() if not v["dev"]]
            blocked = data.hub_blocked() if gone and self.allow_hub else None
            if gone and (not self.allow_hub or blocked):
                why = "allow_hub is false" if not self.allow_hub else blocked
                raise ParameterError(f"probe_tasks: no local dev data for {', '.join(gone)} and {why}")
        n_layers, n_heads = self.head_shape()
        if self.k_max > n_layers * n_heads - 1:
            raise ParameterError(f"k_max must be < the number of heads ({n_layers * n_heads}), got {self.k_max}")


# ------------------------------------------------------------------------------------------------ cells

def resolve_probe_tasks(cfg: RedundancyPatternsConfig) -> list[str]:
    """Tasks whose dev inputs probe the model: ``probe_tasks`` (``["all"]``: every task with local dev data,
    else every task from the hub) plus the fine-tuning tasks (their pre-trained matrices anchor "When")."""
    if cfg.probe_tasks == ["all"]:
        avail = data.task_availability(list(data.TASKS), cfg.data_dir, allow_hub=False)
        names = [t for t in data.TASKS if avail[t]["dev"]]
        if not names and cfg.allow_hub:
            names = list(data.TASKS)
    else:
        names = [data.get_task(t).name for t in cfg.probe_tasks]
    fine = finetuned_tasks(cfg)
    return names + [t for t in fine if t not in names]


def text_tasks(cfg: RedundancyPatternsConfig, split: str) -> list[str]:
    """The probe tasks that have ``split`` locally (QNLI has no local train split); all of them when none
    has it and the hub is allowed."""
    names = resolve_probe_tasks(cfg)
    avail = data.task_availability(names, cfg.data_dir, allow_hub=False)
    local = [t for t in names if avail[t][split]]
    if local:
        return local
    if cfg.allow_hub:
        return names
    raise data.DataUnavailableError(f"no probe task has a local {split} split: {names}")


def finetuned_tasks(cfg: RedundancyPatternsConfig) -> list[str]:
    """The tasks of the fine-tuned models ("When"): ``tasks``, resolved (those without data left out)."""
    return glue_workbench.resolve_tasks(cfg)[0]


def probe_names(cfg: RedundancyPatternsConfig) -> list[str]:
    """Every probe of the pre-trained model, in plan order: generic text, the random token sequences, the dev
    inputs of every probe task."""
    return (["generic"] + [f"random-{r}" for r in range(cfg.random_probes)]
            + [f"task-{t}" for t in resolve_probe_tasks(cfg)])


def plan_cells(cfg: RedundancyPatternsConfig) -> list[Cell]:
    """Every cell of the study: the pre-trained model on every probe, each fine-tuned model on its task's inputs,
    then the MLM-trained models (seed by seed, every dropout) on generic text, then (``random_init_control``) the
    negative control, the randomly initialised model (:data:`CONTROL`), on every probe of the pre-trained model.

    No cell reads another's result (the analysis compares the matrices afterwards; the fine-tuned models come
    from the model cache studies 1-3 use too), so none requires another. Groups: the pre-trained model's cells
    share one loaded model (and the generic probe, whose lengths the random probes copy); the MLM cells of one
    seed share the prepared MLM model (its new head trained once per seed); the control's cells share the one
    initialised model (and the probes). A fine-tuned model's cell is alone. The control's cells come last, so the
    other cells' keys and order are those of a plan without them.
    """
    estimate = _CostModel(cfg)
    cells = [Cell({"model": "pretrained", "probe": name}, group=("pretrained",), cost=Cost(estimate.matrices(name)))
             for name in probe_names(cfg)]
    for t in finetuned_tasks(cfg):
        cells += [Cell({"model": f"finetuned-{t}-s{s}", "probe": f"task-{t}"},
                       cost=Cost(glue_workbench.finetune_cost(cfg, t) + estimate.matrices(f"task-{t}")))
                  for s in cfg.seeds]
    for s in cfg.mlm_seeds if cfg.dropouts else []:
        cells += [Cell({"model": f"mlm-p{p:g}-s{s}", "probe": "generic"}, group=("mlm", int(s)),
                       cost=Cost(estimate.mlm(prepare=i == 0) + estimate.matrices("generic")))
                  for i, p in enumerate(cfg.dropouts)]
    if cfg.random_init_control:
        cells += [Cell({"model": CONTROL, "probe": name}, group=("random-init", CONTROL_SEED),
                       cost=Cost(estimate.matrices(name)))
                  for name in probe_names(cfg)]
    return cells


class _CostModel:
    """Estimated FLOPs of the cells (rough, for ``--plan`` and the executors; see :mod:`headprune_utils.measure.costs`).

    A cell's matrices (the control's cells: nothing else; initialising the model is negligible): the model's
    forward pass over the probe (``probe_size`` sentences at their mean length,
    at most ``probe_max_length`` tokens) plus the distances of every head pair per sentence of ``n`` tokens:
    about 4 n^2 per token-based distance, 2 n^2 per pair and 3 n^3 per head for "dcor", 5 n^3 per pair for
    "procrustes" (a product and its singular values). A fine-tuned model's cell adds its fine-tuning (shared
    through the cache, counted as if trained here). An MLM cell adds ``mlm_steps`` training steps (the encoder,
    and the MLM head at the 15% masked tokens), the first cell of a seed also the ``mlm_head_steps`` steps that
    train the new head (the encoder forward only). Generic text and the MLM text are single sentences of the
    probe tasks (their length estimated on the dev splits).
    """

    MASKED = 0.15  # share of the tokens the MLM loss (and so the vocabulary projection) sees

    def __init__(self, cfg: RedundancyPatternsConfig):
        self.cfg = cfg
        self.shape = costs.Shape.of(cfg.model)
        self.vocab = int(models.load_config(cfg.model).vocab_size)
        self.sentence = float(np.mean([self._sentence_length(t) for t in resolve_probe_tasks(cfg)]))

    def _sentence_length(self, task: str) -> float:
        """Mean word pieces of ONE sentence of the task's dev split (a pair counts as two), specials included."""
        _, length = costs.split_tokens(task, "dev", None, self.cfg.data_dir)
        return (length - 3) / 2 + 2 if data.get_task(task).hub_text_b is not None else length

    def matrices(self, probe: str) -> float:
        cfg = self.cfg
        if probe.startswith("task-"):  # the task's own inputs, pairs as pairs
            n_sent, length = costs.split_tokens(probe[len("task-"):], "dev", cfg.probe_size, cfg.data_dir)
        else:  # generic text, and random sequences of its lengths
            n_sent, length = cfg.probe_size, self.sentence
        n = min(length, cfg.probe_max_length)
        heads = self.shape.n_layers * self.shape.n_heads
        pairs = heads * (heads - 1) / 2
        per_sentence = 0.0
        for m in cfg.metrics:
            if m in redundancy.TOKEN_METRICS:
                per_sentence += 4 * n ** 2 * pairs
            elif m == "dcor":
                per_sentence += 2 * n ** 2 * pairs + 3 * n ** 3 * heads
            else:  # procrustes
                per_sentence += 5 * n ** 3 * pairs
        return costs.forward_flops(self.shape, n_sent * n, n) + n_sent * per_sentence

    def mlm(self, prepare: bool) -> float:
        cfg = self.cfg
        length = min(self.sentence, cfg.max_length, 64)
        d = self.shape.d_model
        head = 2 * d * (d + self.vocab) * self.MASKED  # per token: the MLM head's transform and vocabulary projection
        tokens = cfg.mlm_steps * cfg.mlm_batch_size * length
        flops = costs.train_flops(self.shape, tokens, length) + 3 * head * tokens
        if prepare:
            tokens = cfg.mlm_head_steps * cfg.mlm_batch_size * length
            flops += costs.forward_flops(self.shape, tokens, length) + 3 * head * tokens
        return flops


def study_fingerprint(cfg: RedundancyPatternsConfig, device: torch.device) -> str:
    d = glue_workbench.result_params(cfg, device, RESULTS_VERSION,
                                     drop=("probe_tasks", "random_probes", "dropouts", "mlm_seeds",
                                           "cluster_metric", "k_min", "k_max", "n_permutations", "n_null",
                                           "min_cluster_size", "probe_split",
                                           # it only adds cells (keyed by their model name): the others' results
                                           # do not depend on it
                                           "random_init_control"))
    d["probe_data"] = glue_workbench.data_fingerprints(cfg, resolve_probe_tasks(cfg))  # the probes' texts
    if cfg.probe_split != "file_order":  # the halves the cells hold (file order: the cells made before it existed)
        d["probe_split"] = cfg.probe_split
    return fingerprint(d)


class Context(glue_workbench.GlueContext):
    """The GlueContext plus the probes and the prepared MLM models of one process."""

    def __init__(self, cfg: RedundancyPatternsConfig, device: torch.device, cache_dir):
        super().__init__(cfg, device, cache_dir)
        self._probes: dict[str, batching.Encoded] = {}
        self._pretrained = None
        self._random_init: tuple[int, torch.nn.Module] | None = None
        self._mlm_base: tuple[int, torch.nn.Module] | None = None

    def probe(self, name: str) -> batching.Encoded:
        cfg = self.cfg
        if name not in self._probes:
            if name == "generic":
                enc = probes.glue_text(self.tokenizer, text_tasks(cfg, "dev"), "dev", cfg.probe_size, cfg.subset_seed,
                                       cfg.probe_max_length, cfg.data_dir, cfg.allow_hub)
            elif name.startswith("random-"):
                enc = probes.random_tokens(self.tokenizer, self.probe("generic").lengths, int(name.split("-", 1)[1]))
            elif name.startswith("task-"):
                enc = probes.task_text(self.tokenizer, name.split("-", 1)[1], "dev", cfg.probe_size, cfg.subset_seed,
                                       cfg.probe_max_length, cfg.data_dir, cfg.allow_hub)
            else:
                raise ValueError(f"unknown probe {name!r}")
            self._probes[name] = enc
        return self._probes[name]

    def pretrained(self):
        if self._pretrained is None:
            self._pretrained = models.load_classifier(self.cfg.model, 2, device=self.device, seed=0).eval()
        return self._pretrained

    def random_init(self, seed: int):
        """The negative control of ``seed`` (:func:`random_init_model`), built once per process."""
        if self._random_init is None or self._random_init[0] != seed:
            self._random_init = (seed, random_init_model(self.cfg.model, seed, self.device))
        return self._random_init[1]

    def mlm_model(self, dropout: float, seed: int):
        """The MLM-trained encoder of (dropout, seed) and its training record."""
        cfg = self.cfg
        text = probes.glue_text(self.tokenizer, text_tasks(cfg, "train"), "train", cfg.mlm_text_size, cfg.subset_seed,
                                min(cfg.max_length, 64), cfg.data_dir, cfg.allow_hub) if "mlm_text" not in self._probes \
            else self._probes["mlm_text"]
        self._probes["mlm_text"] = text
        if self._mlm_base is None or self._mlm_base[0] != seed:
            base, head_hist = mlm.prepare_mlm(cfg.model, text, self.tokenizer, seed, cfg.mlm_head_steps,
                                              cfg.mlm_batch_size, device=self.device, progress=cfg.progress)
            self._mlm_base = (seed, base, head_hist)
        model = copy.deepcopy(self._mlm_base[1])
        hist = mlm.continue_mlm(model, text, self.tokenizer, dropout, cfg.mlm_steps, seed, cfg.mlm_batch_size,
                                cfg.mlm_lr, progress=cfg.progress)
        return model.base_model, {**self._mlm_base[2], **{k: v for k, v in hist.items() if k != "loss"}}


def random_init_model(name: str, seed: int, device) -> torch.nn.Module:
    """The negative control: the encoder of ``name``'s architecture (its config only: ``models.load_config``;
    weights never loaded) with every weight drawn by the architecture's own initialiser
    (``transformers.AutoModel.from_config``) after ``torch.manual_seed(seed)``, on the CPU so the draw is the same
    on every machine, then moved to ``device``; eval mode (no dropout). The same seed gives the same weights."""
    from transformers import AutoModel

    config = models.load_config(name)
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = AutoModel.from_config(config, attn_implementation="sdpa")
    finally:
        torch.random.set_rng_state(state)  # the caller's random stream is left as it was
    return model.to(device).eval()


def _halves(enc: batching.Encoded, split: str, seed: int) -> tuple[batching.Encoded, batching.Encoded]:
    """The probe's two halves (``len // 2`` and the rest): ``"file_order"`` its first and second half as the data
    file orders them; ``"random"`` a random half drawn with ``seed`` (each half keeps the file's order within it), so
    the halves are exchangeable samples of the probe, as a split-half reliability needs, also where the file is
    ordered by content (STS-B's dev file is ordered by genre)."""
    n = len(enc) // 2
    if split == "file_order":
        idx = np.arange(len(enc))
    elif split == "random":
        idx = np.random.default_rng([seed, 1]).permutation(len(enc))  # a stream of its own, not the subset's
    else:
        raise ValueError(f"split must be one of {list(PROBE_SPLITS)}, got {split!r}")

    def part(rows):
        rows = sorted(int(i) for i in rows)
        return batching.Encoded([enc.input_ids[i] for i in rows],
                                [enc.token_type_ids[i] for i in rows] if enc.token_type_ids else None,
                                np.asarray(enc.labels)[rows], enc.pad_id)

    return part(idx[:n]), part(idx[n:])


def probe_matrices(model, enc: batching.Encoded, metrics: list[str], device, *, split: str, seed: int) -> dict:
    """{metric: {"a": upper triangle on the first half, "b": on the second}, "n_a", "n_b"} (the halves of
    :func:`_halves` with ``split`` and ``seed``); each triangle packed (float32,
    :func:`headprune_utils.store.results.pack_floats`)."""
    out: dict = {}
    for half_name, half in zip(("a", "b"), _halves(enc, split, seed)):
        mats = redundancy.redundancy_matrices(model, glue_workbench.batches(half, device), metrics)
        for m in metrics:
            out.setdefault(m, {})[half_name] = pack_floats(clustering.upper(mats[m]))
        out[f"n_{half_name}"] = len(half)
    return out


def run_cell(ctx: Context, cell: dict) -> dict:
    t0 = time.perf_counter()
    name, extra = cell["model"], {}
    if name == "pretrained":
        model = ctx.pretrained()
    elif name.startswith("finetuned-"):
        task, s = name[len("finetuned-"):].rsplit("-s", 1)
        model, history, _ = ctx.full_model(task, int(s))
        # its held-out curve (one record per epoch, the kept one "selected"): whether it reached the plateau is
        # judged from the cells alone (studies.convergence); and the hash of its weights, the same field as the
        # other GLUE studies' cells of that (task, seed): the check that they probed one and the same training
        extra = {"full_model_history": glue_workbench.recorded_curve(history),
                 "full_model_sha": ctx.full_model_sha[(task, int(s))]}
    elif name.startswith("mlm-"):
        p, s = name[len("mlm-p"):].rsplit("-s", 1)
        model, extra = ctx.mlm_model(float(p), int(s))
    elif name.startswith("random-init-s"):
        model = ctx.random_init(int(name[len("random-init-s"):]))
    else:
        raise ValueError(f"unknown model {name!r}")
    mats = probe_matrices(model, ctx.probe(cell["probe"]), list(ctx.cfg.metrics), ctx.device,
                          split=ctx.cfg.probe_split, seed=ctx.cfg.subset_seed)
    return {"matrices": mats, **extra, "seconds": time.perf_counter() - t0}


def verdicts(mats: Matrices, cfg: RedundancyPatternsConfig, when_t, why_runs, tasks: list[str],
             vocab_size: int | None = None):
    """The study's verdict table (``claims.COLUMNS``): its declared claims decided on the cells' matrices and the
    :func:`when` / :func:`why` tables (:func:`.redundancy_patterns_analysis.claim_verdicts`)."""
    return claim_verdicts(mats, cfg, when_t, why_runs, tasks, RedundancyPatterns.claims, vocab_size=vocab_size)


class RedundancyPatterns(glue_workbench.GlueStudy):
    """Study 4 (see the module docstring)."""

    name = NAME
    notebook = "04_redundancy_patterns.ipynb"
    Config = RedundancyPatternsConfig
    claims = CLAIMS  # declared in redundancy_patterns_claims
    # a stored result: the probes' losses (cross-entropy) not negative (checked on every read of a cell)
    metric_ranges = {**Study.metric_ranges, "loss_first": NON_NEGATIVE, "loss_last": NON_NEGATIVE,
                     "head_loss_first": NON_NEGATIVE, "head_loss_last": NON_NEGATIVE}
    # not split by model: a cell's ``model`` axis names the encoder it probes (the pre-trained one, a fine-tuned or
    # MLM-trained one, the random control), every cell is its own model's only cell (a fine-tuned model's cell
    # records the hash of its weights, ``full_model_sha``), and the study is one slice
    model_axes = ()

    def plan(self, cfg: RedundancyPatternsConfig) -> list[Cell]:
        return plan_cells(cfg)

    def fingerprint(self, cfg: RedundancyPatternsConfig, device) -> str:
        return study_fingerprint(cfg, device)

    def context(self, cfg: RedundancyPatternsConfig, device, paths: StudyPaths) -> Context:
        return Context(cfg, device, paths.finetuned_cache)

    def run(self, ctx: Context, cells: list[Cell], inputs):
        for cell in cells:
            yield cell, run_cell(ctx, dict(cell.axes))

    def run_params(self, cfg: RedundancyPatternsConfig) -> dict:
        return {"tasks_run": finetuned_tasks(cfg), "probe_tasks_run": resolve_probe_tasks(cfg)}


STUDY = RedundancyPatterns()
