"""Study 1: random head pruning (Budhraja et al. 2020, claim 1; Michel et al. 2019's regime).

Cells: task x regime x fraction x seed, each independent (a cluster engine can run them anywhere):

- ``mask_then_finetune`` (Budhraja et al.): prune a random ``fraction`` of all heads of the
  pre-trained model, then fine-tune with the mask fixed.
- ``finetune_then_mask`` (Michel et al.): fine-tune the full model (seed ``s``), then prune a random
  ``fraction`` of its heads and evaluate without retraining.

Masks of seed ``s`` are nested across fractions and shared by both regimes and all tasks (paired
comparisons). The fine-tuned full model of (task, seed) is the ``fraction = 0`` cell of the first
regime; its checkpoint is cached under ``cache/`` so the second regime reuses it.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from .. import batching, data, masks, models, training
from ..architecture import head_shape
from ..config import ParameterError, as_dict
from ..gates import head_means
from ..metrics import compute_metrics, main_score
from ..paths import StudyPaths
from ..pruning import prune_heads
from ..results import ResultStore, atomic_write_json, fingerprint, run_metadata

STUDY = "random_pruning"
EVAL_BATCH = 32  # forward-only batches; on a CPU larger ones are no faster
Regime = Literal["mask_then_finetune", "finetune_then_mask"]
REGIMES: tuple[str, ...] = ("mask_then_finetune", "finetune_then_mask")


@dataclass(frozen=True)
class RandomPruningConfig:
    """Parameters of the study; the defaults are the quick CPU profile (MiniLM, data subsets)."""

    model: str = "minilm"                       # "minilm" (embedded), a local folder, or a hub id (bert-base-uncased)
    tasks: list[str] = field(default_factory=lambda: ["SST-2", "STS-B"])  # GLUE names, or ["all"] = every available task
    fractions: list[float] = field(default_factory=lambda: [0.0, 0.3, 0.6, 0.9])  # share of ALL heads pruned, in [0, 1]
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # seed s: mask, classifier init, data order
    regimes: list[Regime] = field(default_factory=lambda: list(REGIMES))
    ablation: Literal["zero", "uniform", "mean"] = "zero"  # what a pruned head outputs (see gates.py)
    train_size: int | None = 300                # training examples per task (None: all)
    dev_size: int | None = 300                  # dev examples per task (None: all)
    subset_seed: int = 0                        # which examples form the subsets (fixed across seeds)
    epochs: int = 3
    batch_size: int = 16
    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    max_length: int = 128                       # truncation only; batches are padded to their own longest
    freeze_word_embeddings: bool = True         # quick profile: fewer trainable parameters, faster on a CPU
    eval_every_epoch: bool = False              # dev scores after every epoch (history); the final score is always measured
    device: str = "auto"                        # "auto" (CUDA when present), "cpu", "cuda"
    data_dir: str | None = None                 # GLUE root; None: $HEADPRUNE_DATA_DIR, else the hub
    allow_hub: bool = True                      # fall back to the Hugging Face hub for missing tasks
    tolerance: float = 0.02                     # analysis only: a drop up to this (score units) counts as "limited"
    progress: bool = True

    def check(self) -> None:
        """Cheap checks of names and budgets (loads the model's config only)."""
        bad = [r for r in self.regimes if r not in REGIMES]
        if bad or not self.regimes:
            raise ParameterError(f"regimes must be a non-empty list of {REGIMES}, got {self.regimes}")
        if not self.seeds:
            raise ParameterError("seeds must not be empty")
        if not self.fractions:
            raise ParameterError("fractions must not be empty")
        if len(set(self.fractions)) != len(self.fractions) or len(set(self.seeds)) != len(self.seeds):
            raise ParameterError("fractions and seeds must not repeat")
        for name in ("train_size", "dev_size"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ParameterError(f"{name} must be a positive integer or None, got {v}")
        for name in ("epochs", "batch_size", "max_length"):
            if getattr(self, name) < 1:
                raise ParameterError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ParameterError(f"lr must be > 0, got {self.lr}")
        if not self.tasks:
            raise ParameterError("tasks must not be empty")
        if self.tasks != ["all"]:
            for t in self.tasks:
                try:
                    data.get_task(t)
                except ValueError as exc:
                    raise ParameterError(str(exc)) from None
        try:
            data.resolve_data_dir(self.data_dir)  # a named but missing folder is an error now, not later
        except data.DataUnavailableError as exc:
            raise ParameterError(f"data_dir: {exc}") from None
        if self.tasks != ["all"] and not self.allow_hub:
            avail = data.task_availability([data.get_task(t).name for t in self.tasks], self.data_dir)
            gone = [f"{t} {s}" for t, v in avail.items() for s, ok in v.items() if not ok]
            if gone:
                raise ParameterError(f"tasks: no local data for {', '.join(gone)} and allow_hub is false")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ParameterError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        try:
            models.resolve_device(self.device)
        except ValueError as exc:
            raise ParameterError(f"device: {exc}") from None
        if self.tasks != ["all"]:
            names = [data.get_task(t).name for t in self.tasks]
            if len(set(names)) != len(names):
                raise ParameterError(f"tasks name the same task twice: {self.tasks}")
        n_layers, n_heads = head_shape(models.load_config(self.model))
        for f in self.fractions:
            try:
                masks.n_pruned_for_fraction(f, n_layers, n_heads)
            except masks.BudgetError as exc:
                raise ParameterError(f"fractions: {exc}") from None


def resolve_tasks(cfg: RandomPruningConfig) -> tuple[list[str], dict[str, str]]:
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


def plan_cells(cfg: RandomPruningConfig, tasks: list[str]) -> list[dict]:
    """Every cell of the study, ordered so that shared work (the full fine-tuned model) is reused."""
    cells = []
    for task in tasks:
        for seed in cfg.seeds:
            for regime in REGIMES:
                if regime not in cfg.regimes:
                    continue
                for f in sorted(cfg.fractions):
                    cells.append({"task": task, "regime": regime, "fraction": float(f), "seed": int(seed)})
    return cells


# Bump when a code change alters results (e.g. the optimizer, label handling): old cells then no longer match.
RESULTS_VERSION = 2


def n_cells(cfg: RandomPruningConfig) -> int:
    return len(plan_cells(cfg, resolve_tasks(cfg)[0]))


def result_params(cfg: RandomPruningConfig, device: torch.device) -> dict:
    """What a cell's result depends on besides the cell itself (fingerprinted).

    The parameters minus the cell axes and display options; plus the device type (CPU and CUDA draw
    different dropout streams), where the data comes from (a local root or the hub may differ), and the
    code's RESULTS_VERSION.
    """
    d = as_dict(cfg)
    for k in ("tasks", "fractions", "seeds", "regimes", "progress", "device", "data_dir", "allow_hub", "tolerance"):
        d.pop(k)
    d["device_type"] = torch.device(device).type
    d["data_source"] = "local" if data.resolve_data_dir(cfg.data_dir) is not None else "hub"
    d["results_version"] = RESULTS_VERSION
    return d


def study_fingerprint(cfg: RandomPruningConfig, device: torch.device) -> str:
    return fingerprint(result_params(cfg, device))


class StudyContext:
    """Data, tokenizer and cached checkpoints shared by the cells of one process."""

    def __init__(self, cfg: RandomPruningConfig, paths: StudyPaths, device: torch.device):
        self.cfg, self.paths, self.device = cfg, paths, device
        self.tokenizer = models.load_tokenizer(cfg.model)
        self._data: dict[str, tuple] = {}
        self.shape = head_shape(models.load_config(cfg.model))
        self.last_full: tuple | None = None  # ((task, seed), the fine-tuned full model) most recently used
        self.full_means: tuple | None = None  # ((task, seed), its mean-ablation values)

    def task_data(self, task: str):
        if task not in self._data:
            spec = data.get_task(task)
            tr = data.subset(data.load_task(task, "train", self.cfg.data_dir, allow_hub=self.cfg.allow_hub),
                             self.cfg.train_size, self.cfg.subset_seed)
            dv = data.subset(data.load_task(task, "dev", self.cfg.data_dir, allow_hub=self.cfg.allow_hub),
                             self.cfg.dev_size, self.cfg.subset_seed)
            mx = self.cfg.max_length
            etr, edv = batching.encode(self.tokenizer, tr, mx), batching.encode(self.tokenizer, dv, mx)
            if spec.is_regression:
                batching.standardize_labels(etr, edv)
            self._data[task] = (spec, etr, edv, tr.source, dv.source)
        return self._data[task]

    def fresh_model(self, task: str, seed: int):
        spec = self.task_data(task)[0]
        model = models.load_classifier(self.cfg.model, spec.num_labels, device=self.device, seed=seed)
        if self.cfg.freeze_word_embeddings:
            model.get_input_embeddings().weight.requires_grad_(False)
        return model

    def checkpoint_path(self, task: str, seed: int):
        return self.paths.cache / f"finetuned__task={task}__seed={seed}__{study_fingerprint(self.cfg, self.device)}.pt"


def _train_config(cfg: RandomPruningConfig) -> training.TrainConfig:
    return training.TrainConfig(epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                                weight_decay=cfg.weight_decay, warmup_ratio=cfg.warmup_ratio,
                                max_grad_norm=cfg.max_grad_norm)


def cell_mask(shape: tuple[int, int], fraction: float, seed: int) -> torch.Tensor:
    n_layers, n_heads = shape
    return masks.random_mask(n_layers, n_heads, masks.n_pruned_for_fraction(fraction, n_layers, n_heads), seed)


def _finetune_masked(ctx: StudyContext, task: str, seed: int, mask: torch.Tensor, desc: str):
    """A fresh model, pruned by ``mask`` (physically for "zero", else gated), fine-tuned.

    Returns (model, history, gates, means): evaluate with the same ``gates``/``means`` (None when the heads
    were removed physically).
    """
    cfg = ctx.cfg
    spec, tr, dv, *_ = ctx.task_data(task)
    model = ctx.fresh_model(task, seed)
    gates, means = None, None
    if bool((mask < 1).any()):
        if cfg.ablation == "zero":
            prune_heads(model, mask)  # same outputs as zero gates, and faster
        else:
            gates = mask.to(ctx.device)
            if cfg.ablation == "mean":
                means = _means(ctx, model, tr)
    history = training.finetune(model, tr, task, _train_config(cfg), seed,
                                dev=dv if cfg.eval_every_epoch else None, gates=gates,
                                ablation=cfg.ablation, means=means, progress=cfg.progress, desc=desc)
    return model, history, gates, means


def _means(ctx: StudyContext, model, enc) -> torch.Tensor:
    """Mean-ablation values: each head's mean output over the task's training subset."""
    return head_means(model, (b for _, b in batching.iterate(enc, batching.eval_batches(enc.lengths, 64), ctx.device)))


def _full_model(ctx: StudyContext, task: str, seed: int):
    """The fine-tuned unpruned model of (task, seed), from the cache or trained now (and cached)."""
    if ctx.last_full is not None and ctx.last_full[0] == (task, seed):
        return ctx.last_full[1], None  # consecutive cells of one (task, seed) share it; gates never modify it
    path = ctx.checkpoint_path(task, seed)
    history = None
    if path.exists():
        model = ctx.fresh_model(task, seed)
        model.load_state_dict(torch.load(path, map_location=ctx.device, weights_only=True))
        model.eval()
    else:
        n_layers, n_heads = ctx.shape
        model, history, _, _ = _finetune_masked(ctx, task, seed, torch.ones(n_layers, n_heads), f"{task} s{seed} full")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(model.state_dict(), tmp)
        tmp.replace(path)
    ctx.last_full = ((task, seed), model)
    return model, history


def _row(task, spec, history, metrics, mask, seconds) -> dict:
    return {
        "score": metrics["score"],
        **{k: v for k, v in metrics.items() if k != "score"},
        "metric": spec.main_metric,
        "n_heads_pruned": int((mask == 0).sum()),
        "n_heads_total": int(mask.numel()),
        "mask": masks.mask_to_string(mask),
        "history": history,
        "seconds": seconds,
    }


def chance_score(task: str, train, dev) -> float:
    """The score of a constant predictor: the training subset's majority class (0 for a regression's correlation)."""
    if data.get_task(task).is_regression:
        return 0.0
    values, counts = np.unique(train.labels, return_counts=True)
    preds = np.full(len(dev.labels), values[np.argmax(counts)])
    return float(main_score(task, compute_metrics(task, preds, np.asarray(dev.labels))))


def run_cell(ctx: StudyContext, cell: dict) -> dict:
    """Compute one cell's result (pure of the store; the caller saves it)."""
    cfg = ctx.cfg
    task, regime, fraction, seed = cell["task"], cell["regime"], cell["fraction"], cell["seed"]
    spec, tr, dv, *_ = ctx.task_data(task)
    mask = cell_mask(ctx.shape, fraction, seed)
    t0 = time.perf_counter()
    if regime == "mask_then_finetune":
        gates = means = None
        if fraction == 0:
            model, history = _full_model(ctx, task, seed)
            history = history or []  # from the cache: the score is re-measured, the history is not kept
        else:
            model, history, gates, means = _finetune_masked(ctx, task, seed, mask, f"{task} s{seed} f{fraction:g}")
        metrics = training.evaluate(model, dv, task, EVAL_BATCH, gates=gates, ablation=cfg.ablation, means=means)
    else:
        model, _ = _full_model(ctx, task, seed)
        means = None
        if cfg.ablation == "mean":  # the full model's means, computed once per (task, seed)
            if ctx.full_means is None or ctx.full_means[0] != (task, seed):
                ctx.full_means = ((task, seed), _means(ctx, model, tr))
            means = ctx.full_means[1]
        metrics = training.evaluate(model, dv, task, EVAL_BATCH, gates=mask.to(ctx.device), ablation=cfg.ablation, means=means)
        history = []
    metrics = {**metrics, "score": main_score(task, metrics), "chance": chance_score(task, tr, dv)}
    return _row(task, spec, history, metrics, mask, time.perf_counter() - t0)


def run_study(cfg: RandomPruningConfig, profile: str, paths: StudyPaths | None = None) -> pd.DataFrame:
    """Run every cell not yet done (resuming), write tables and metadata; returns the tidy results."""
    paths = (paths or StudyPaths(STUDY, profile)).ensure()
    device = models.resolve_device(cfg.device)
    tasks, missing = resolve_tasks(cfg)
    store = ResultStore(paths.cells, study_fingerprint(cfg, device))
    store.check_compatible()
    cells = plan_cells(cfg, tasks)
    todo = [c for c in cells if not store.has(c)]
    t0 = time.perf_counter()
    if todo:
        ctx = StudyContext(cfg, paths, device)
        for cell in tqdm(todo, desc=f"{STUDY} cells", disable=not cfg.progress, mininterval=30):
            store.put(cell, run_cell(ctx, cell))
    table = store.table(cells)
    durations = {"this_run": time.perf_counter() - t0, "cells_total": float(table["seconds"].sum()),
                 "cells_computed_now": len(todo), "cells_reused": len(cells) - len(todo)}
    seeds = list(cfg.seeds)
    meta = run_metadata(STUDY, profile, {**as_dict(cfg), "tasks_run": tasks, "tasks_unavailable": missing},
                        seeds, device, durations, store.fingerprint)
    atomic_write_json(paths.meta, meta)
    return table


def summarise(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Mean score per task x regime x fraction, with a t-interval over seeds and the drop from fraction 0."""
    from scipy import stats

    rows = []
    for (task, regime, fraction), g in table.groupby(["task", "regime", "fraction"]):
        s = g["score"].to_numpy(dtype=float)
        n = len(s)
        mean = float(np.mean(s))
        half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * stats.sem(s)) if n > 1 else float("nan")
        rows.append({"task": task, "regime": regime, "fraction": fraction, "metric": g["metric"].iloc[0],
                     "n_seeds": n, "mean": mean, "ci_low": mean - half, "ci_high": mean + half,
                     "n_heads_pruned": int(g["n_heads_pruned"].iloc[0]), "chance": float(g["chance"].iloc[0])})
    out = pd.DataFrame(rows)
    base = out[out["fraction"] == 0].set_index(["task", "regime"])["mean"]
    out["drop_from_full"] = [base.get((t, r), np.nan) - m for t, r, m in zip(out["task"], out["regime"], out["mean"])]
    return out.sort_values(["task", "regime", "fraction"]).reset_index(drop=True)


def _bootstrap_ci(d: np.ndarray, rng: np.random.Generator, n_boot: int, confidence: float) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of the paired differences ``d``."""
    boots = rng.choice(d, size=(n_boot, len(d)), replace=True).mean(axis=1)
    lo, hi = np.quantile(boots, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def paired_drop(table: pd.DataFrame, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per task x regime x fraction: the drop from the full model paired by seed, with a bootstrap CI."""
    rng = np.random.default_rng(seed)
    rows = []
    for (task, regime), g in table.groupby(["task", "regime"]):
        full = g[g["fraction"] == 0].set_index("seed")["score"]
        for fraction, gf in g[g["fraction"] > 0].groupby("fraction"):
            d = (full - gf.set_index("seed")["score"]).dropna().to_numpy(dtype=float)
            if len(d) == 0:
                continue
            lo, hi = _bootstrap_ci(d, rng, n_boot, confidence)
            rows.append({"task": task, "regime": regime, "fraction": fraction, "n_seeds": len(d),
                         "mean_drop": float(d.mean()), "boot_ci_low": float(lo), "boot_ci_high": float(hi)})
    return pd.DataFrame(rows)


def prunable_fraction(drops: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """Per task x regime: the largest fraction whose mean drop (and every smaller one's) is <= tolerance."""
    rows = []
    for (task, regime), g in drops.groupby(["task", "regime"]):
        best = 0.0
        for _, r in g.sort_values("fraction").iterrows():
            if r["mean_drop"] <= tolerance:
                best = float(r["fraction"])
            else:
                break
        rows.append({"task": task, "regime": regime, "max_fraction_within_tolerance": best, "tolerance": tolerance})
    return pd.DataFrame(rows)


def regime_difference(table: pd.DataFrame, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per task x fraction > 0: score(mask, then fine-tune) - score(fine-tune, then mask), paired by seed."""
    rng = np.random.default_rng(seed)
    rows = []
    for (task, fraction), g in table[table["fraction"] > 0].groupby(["task", "fraction"]):
        p = g.pivot(index="seed", columns="regime", values="score")
        if not set(REGIMES) <= set(p.columns):
            continue
        d = (p["mask_then_finetune"] - p["finetune_then_mask"]).dropna().to_numpy(dtype=float)
        lo, hi = _bootstrap_ci(d, rng, n_boot, confidence)
        rows.append({"task": task, "fraction": fraction, "n_seeds": len(d), "mean_gain_of_retraining": float(d.mean()),
                     "boot_ci_low": float(lo), "boot_ci_high": float(hi)})
    return pd.DataFrame(rows)


def verdicts(drops: pd.DataFrame, gains: pd.DataFrame, cfg: RandomPruningConfig) -> pd.DataFrame:
    """The table "claim - our result - verdict", every number from this run."""
    rows = []
    prunable = prunable_fraction(drops, cfg.tolerance)
    a = prunable[prunable["regime"] == "mask_then_finetune"]
    if len(a):
        best = a["max_fraction_within_tolerance"]
        worst = drops[(drops["regime"] == "mask_then_finetune")].sort_values("fraction")
        at_half = worst[worst["fraction"] >= 0.5].groupby("task").first()
        result = "; ".join(
            f"{t}: largest fraction with mean drop <= {cfg.tolerance:g} is {100 * f:.0f}%"
            + (f", drop at {100 * at_half.loc[t, 'fraction']:.0f}% = {at_half.loc[t, 'mean_drop']:.3f} "
               f"[{at_half.loc[t, 'boot_ci_low']:.3f}, {at_half.loc[t, 'boot_ci_high']:.3f}]" if t in at_half.index else "")
            for t, f in zip(a["task"], best))
        verdict = ("supported" if (best >= 0.5).all() else "partly supported" if (best >= 0.5).any() else "not supported")
        rows.append({"claim": "Budhraja et al. claim 1: a large fraction (>= 50%) of heads can be pruned at random "
                              "with limited effect when fine-tuning follows the masking",
                     "our result": result, "verdict": f"{verdict} at this scale"})
    if len(gains):
        g = gains.sort_values(["task", "fraction"])
        result = "; ".join(f"{r.task} {100 * r.fraction:.0f}%: {r.mean_gain_of_retraining:+.3f} "
                           f"[{r.boot_ci_low:+.3f}, {r.boot_ci_high:+.3f}]" for r in g.itertuples())
        positive = (g["boot_ci_low"] > 0).sum()
        negative = (g["boot_ci_high"] < 0).sum()
        verdict = (f"retraining helps in {positive} of {len(g)} task x fraction settings (CI above 0), "
                   f"hurts in {negative}")
        rows.append({"claim": "Fine-tuning after masking recovers more than masking a fine-tuned model "
                              "(the premise of Budhraja et al.'s regime vs Michel et al.'s)",
                     "our result": result, "verdict": verdict})
    return pd.DataFrame(rows)


def findings(summary: pd.DataFrame, drops: pd.DataFrame, cfg: RandomPruningConfig) -> str:
    """The run's findings per task as Markdown, every number computed from the tables."""
    lines = []
    prunable = prunable_fraction(drops, cfg.tolerance)
    for task, g in summary.groupby("task"):
        metric = g["metric"].iloc[0]
        lines.append(f"**{task}** ({metric}; dev subset of {cfg.dev_size or 'all'} examples; {g['n_seeds'].max()} seeds; "
                     f"a constant predictor scores {g['chance'].iloc[0]:.3f}):")
        for regime, gr in g.groupby("regime"):
            full = gr[gr["fraction"] == 0]["mean"]
            parts = []
            for _, r in gr[gr["fraction"] > 0].sort_values("fraction").iterrows():
                d = drops[(drops["task"] == task) & (drops["regime"] == regime) & (drops["fraction"] == r["fraction"])]
                ci = f" (paired drop {d['mean_drop'].iloc[0]:+.3f}, bootstrap 95% CI [{d['boot_ci_low'].iloc[0]:+.3f}, {d['boot_ci_high'].iloc[0]:+.3f}])" if len(d) else ""
                parts.append(f"{100 * r['fraction']:.0f}% pruned ({r['n_heads_pruned']} heads): {r['mean']:.3f}{ci}")
            p = prunable[(prunable["task"] == task) & (prunable["regime"] == regime)]
            within = f"{100 * p['max_fraction_within_tolerance'].iloc[0]:.0f}%" if len(p) else "n/a"
            base = f"{full.iloc[0]:.3f}" if len(full) else "n/a"
            lines.append(f"- {REGIME_NAMES[regime]}: full model {base}; " + "; ".join(parts)
                         + f". Largest fraction tested with a mean drop <= {cfg.tolerance:g}: **{within}**.")
        lines.append("")
    return "\n".join(lines)


REGIME_NAMES = {
    "mask_then_finetune": "mask, then fine-tune",
    "finetune_then_mask": "fine-tune, then mask (no retraining)",
}
