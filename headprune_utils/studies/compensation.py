"""Study 3: who compensates for the pruned heads during fine-tuning (Budhraja et al. 2020, claim 4).

Claim under test: the compensation for pruned heads is spread roughly EQUALLY across the kept heads.

Cells: task x seed x (strategy, budget), plus a reference cell per (task, seed) — strategy ``"none"``,
budget 0: the same fine-tuning without pruning (shared with studies 1 and 2). Each cell fine-tunes (mask,
then fine-tune) and records, per head (``[n_layers, n_heads]``, NaN for pruned heads):

- ``weight_change``: relative change of the head's query/key/value rows and output-projection columns
  during fine-tuning, ``||theta_after - theta_before|| / ||theta_before||`` (``head_weights``);
- ``importance``: Michel et al.'s gradient importance E|dL/dg_h| of the fine-tuned model on the training
  subset (raw; the analysis normalises per layer over the heads kept in both runs compared);
- ``attention_change``: Jensen-Shannon divergence (nats) between the head's attention maps before and after
  fine-tuning on the same dev sentences ("before" = the pre-trained model with the same heads pruned).

The analysis (pure functions below) compares each kept head's change in a pruned run with the same head's
change in an unpruned run of ANOTHER seed, and, as the noise baseline, the unpruned run of this seed with
that same other run (so both sides carry seed-to-seed noise): the EXTRA change of head h is
``x_h = log(c_pruned(h) / c_other(h))`` (a difference of per-layer-normalised scores for importance), the
noise ``x'_h = log(c_full(h) / c_other(h))``.

- Equal spread: Gini coefficient of the ratios ``c_pruned / c_other`` (importance: standard deviation of the
  differences) against the noise baseline's, with a permutation baseline that swaps, head by head, the pruned
  and the unpruned run; combined over runs (Fisher's method; bootstrap CI of the mean excess).
- Locality: Spearman correlation of ``x_h`` with the number of pruned heads in the head's own layer and in
  the adjacent layers, with a permutation null (``x`` shuffled over the kept heads).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from scipy import stats as sps

from .. import attention, glue_workbench, head_weights, importance, masks, stats, strategies, training
from ..config import ParameterError
from ..gates import head_gates
from ..metrics import main_score
from ..paths import StudyPaths
from ..pruning import prune_heads
from ..results import fingerprint
from .base import Cell, Claim, Cost, Study

NAME = "compensation"
# Bump when a code change alters this study's results: old cells then no longer match.
RESULTS_VERSION = 1
MEASURES: tuple[str, ...] = ("weight_change", "importance", "attention_change")


@dataclass(frozen=True)
class CompensationConfig(glue_workbench.GlueStudyConfig):
    """Parameters of the study (the shared ones in ``glue_workbench.GlueStudyConfig``); defaults = the quick profile."""

    strategies: list[str] = field(default_factory=lambda: ["random", "middle"])  # how heads are chosen (strategies.py)
    budgets: list[float] = field(default_factory=lambda: [0.5])  # share of ALL heads pruned, each in (0, 1)
    probe_size: int = 64                        # dev sentences on which attention maps are compared
    importance_size: int | None = 1000          # training examples for gradient importance (None: the whole training subset)
    n_resamples: int = 2000                     # analysis: resamples of each bootstrap and permutation test

    def check(self) -> None:
        unknown = [s for s in self.strategies if s not in strategies.STRATEGIES]
        if unknown or not self.strategies:
            raise ParameterError(f"strategies must be a non-empty list of {strategies.STRATEGIES}, got {self.strategies}")
        if len(set(self.strategies)) != len(self.strategies):
            raise ParameterError("strategies must not repeat")
        if self.probe_size < 1 or self.n_resamples < 100:
            raise ParameterError("probe_size must be >= 1 and n_resamples >= 100")
        if self.importance_size is not None and self.importance_size < 1:
            raise ParameterError(f"importance_size must be a positive integer or None, got {self.importance_size}")
        super().check()
        if len(self.seeds) < 2:
            raise ParameterError("the analysis compares runs of different seeds: give at least 2 seeds")
        self.check_fractions("budgets", self.budgets)
        if any(not 0 < b < 1 for b in self.budgets):
            raise ParameterError(f"budgets must be in (0, 1): some heads pruned, some kept; got {self.budgets}")


def plan_cells(cfg: CompensationConfig) -> list[Cell]:
    """Every cell of the study: per task and seed, the unpruned reference, then each budget x strategy.

    No cell reads another's result (the analysis pairs them afterwards; the unpruned model comes from the
    fine-tuning cache shared with studies 1 and 2) and no two share a loaded model (each fine-tunes its own),
    so cells neither require one another nor form groups.
    """
    tasks = glue_workbench.resolve_tasks(cfg)[0]
    cells = []
    for task in tasks:
        for seed in cfg.seeds:
            cells.append(Cell({"task": task, "strategy": "none", "budget": 0.0, "seed": int(seed)},
                              cost=Cost(cell_cost(cfg, task, 0.0))))
            for b in sorted(cfg.budgets):
                for s in cfg.strategies:
                    cells.append(Cell({"task": task, "strategy": s, "budget": float(b), "seed": int(seed)},
                                      cost=Cost(cell_cost(cfg, task, float(b)))))
    return cells


def cell_cost(cfg: CompensationConfig, task: str, budget: float) -> float:
    """Estimated FLOPs of one cell: one fine-tuning with ``1 - budget`` of the heads kept, scored on the dev subset
    (the unpruned cell's fine-tuning is shared through the cache, counted as if trained here), the gradient
    importance (forward and backward: 3 forwards over ``importance_size`` training examples) and the attention
    maps before and after fine-tuning (2 forwards over ``probe_size`` dev examples), with the same heads kept."""
    kept = 1.0 - budget
    share = kept if cfg.ablation == "zero" else 1.0  # gated heads are computed, then zeroed
    n_imp = cfg.importance_size if cfg.train_size is None else (
        cfg.train_size if cfg.importance_size is None else min(cfg.train_size, cfg.importance_size))
    n_probe = cfg.probe_size if cfg.dev_size is None else min(cfg.dev_size, cfg.probe_size)
    return (glue_workbench.finetune_cost(cfg, task, kept)
            + 3 * glue_workbench.eval_cost(cfg, task, share, split="train", size=n_imp)
            + 2 * glue_workbench.eval_cost(cfg, task, share, size=n_probe))


def study_fingerprint(cfg: CompensationConfig, device: torch.device) -> str:
    return fingerprint(glue_workbench.result_params(cfg, device, RESULTS_VERSION, drop=("strategies", "budgets", "n_resamples")))


def cell_mask(shape: tuple[int, int], cell: dict) -> torch.Tensor:
    n_layers, n_heads = shape
    if cell["strategy"] == "none":
        return torch.ones(n_layers, n_heads)
    n_prune = masks.n_pruned_for_fraction(cell["budget"], n_layers, n_heads)
    return strategies.strategy_mask(cell["strategy"], n_layers, n_heads, n_prune, cell["seed"])


def _attention_change(before, after, probe, gates, ablation, means) -> torch.Tensor:
    """Mean JS (nats) per head between ``before`` and ``after`` maps over the probe batches, token-weighted."""
    total, weight = None, 0.0
    for batch in probe:
        if gates is None:
            a, b = attention.attention_maps(before, batch), attention.attention_maps(after, batch)
        else:  # gated (not physically pruned) heads: both models under the same gates
            with head_gates(before, gates, ablation=ablation, means=means[0] if means else None):
                a = attention.attention_maps(before, batch)
            with head_gates(after, gates, ablation=ablation, means=means[1] if means else None):
                b = attention.attention_maps(after, batch)
        js = attention.head_js(a, b, batch["attention_mask"]).double().cpu()
        w = float(batch["attention_mask"].sum())
        total = js * w if total is None else total + js * w
        weight += w
    return total / weight


def run_cell(ctx: glue_workbench.Workbench, cell: dict) -> dict:
    """Fine-tune (or take the cached unpruned model) and measure every kept head's change."""
    cfg = ctx.cfg
    task, seed = cell["task"], cell["seed"]
    spec, tr, dv, *_ = ctx.task_data(task)
    mask = cell_mask(ctx.shape, cell)
    t0 = time.perf_counter()
    if cell["strategy"] == "none":
        after, history, _ = ctx.full_model(task, seed)
        gates = means = None
    else:
        after, history, gates, means = ctx.finetune_masked(task, seed, mask, f"{task} s{seed} {cell['strategy']} {cell['budget']:g}")
    metrics = training.evaluate(after, dv, task, glue_workbench.EVAL_BATCH, gates=gates, ablation=cfg.ablation, means=means)
    # "before": the pre-trained model with the same heads removed (its classifier is the seed's fresh one)
    before = ctx.fresh_model(task, seed).eval()
    before_means = None
    if gates is None and bool((mask < 1).any()):
        prune_heads(before, mask)
    elif gates is not None and cfg.ablation == "mean":
        before_means = ctx.means(before, tr)
    change = head_weights.relative_change(before, after)
    imp = importance.head_importance(after, glue_workbench.batches(tr, ctx.device, cfg.importance_size), mask=mask.to(ctx.device), ablation=cfg.ablation,
                                     means=means, normalize_layers=False)
    probe = glue_workbench.batches(dv, ctx.device, cfg.probe_size)
    js = _attention_change(before, after, probe, gates, cfg.ablation, (before_means, means) if means is not None else None)
    keep = mask.bool()
    grid = lambda t: [[float(v) if k else None for v, k in zip(row, krow)] for row, krow in zip(t.tolist(), keep.tolist())]
    return {
        "score": main_score(task, metrics), **metrics, "metric": spec.main_metric,
        "n_heads_pruned": int((mask == 0).sum()), "mask": masks.mask_to_string(mask),
        "weight_change": grid(change["all"]),
        **{f"weight_change_{p}": grid(change[p]) for p in head_weights.PARTS},
        "importance": grid(imp.double()),
        "attention_change": grid(js),
        "history": history, "seconds": time.perf_counter() - t0,
    }


class Compensation(Study):
    """Study 3 (see the module docstring)."""

    name = NAME
    notebook = "03_compensation.ipynb"
    Config = CompensationConfig
    claims = (
        Claim("budhraja.compensation_spread", "Budhraja et al. 2020 (claim 4)",
              "The compensation for pruned heads is spread roughly equally over the kept heads during fine-tuning.",
              quantity="excess dispersion (Gini of c_pruned / c_other; importance: sd of differences) of the kept "
                       "heads' extra change over the seed-noise baseline, per strategy x budget x measure, "
                       "pooled over tasks and seeds",
              precondition="at least 2 seeds (the noise baseline compares unpruned runs of different seeds)"),
        Claim("budhraja.compensation_local", "Budhraja et al. 2020 (claim 4, converse)",
              "Heads near the pruned ones (same layer, adjacent layers) compensate more.",
              quantity="Spearman correlation of a kept head's extra change with the number of pruned heads in its "
                       "own and in the adjacent layers, pooled over tasks and seeds",
              precondition="the number of pruned heads near a kept head varies over the kept heads"),
    )

    def plan(self, cfg: CompensationConfig) -> list[Cell]:
        return plan_cells(cfg)

    def fingerprint(self, cfg: CompensationConfig, device) -> str:
        return study_fingerprint(cfg, device)

    def context(self, cfg: CompensationConfig, device, paths: StudyPaths) -> glue_workbench.Workbench:
        return glue_workbench.Workbench(cfg, device, paths.finetuned_cache)

    def run(self, ctx: glue_workbench.Workbench, cells: list[Cell], inputs):
        for cell in cells:
            yield cell, run_cell(ctx, dict(cell.axes))

    def run_params(self, cfg: CompensationConfig) -> dict:
        tasks, missing = glue_workbench.resolve_tasks(cfg)
        return {"tasks_run": tasks, "tasks_unavailable": missing}


STUDY = Compensation()


# ---------------------------------------------------------------------------------------------- analysis

def _grid(value) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in row] for row in value], dtype=float)


def _normalise_rows(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Per-layer L2 normalisation over the heads in ``keep`` (Michel et al.); others NaN."""
    y = np.where(keep, x, np.nan)
    norm = np.sqrt(np.nansum(y ** 2, axis=1, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, y / norm, np.nan)


def per_head(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, seed, strategy, budget, measure, kept head): the head's change in the pruned run
    (``pruned``), in the unpruned run of the same seed (``full``) and of the next seed (``other``), the
    extra change ``x = log(pruned / other)`` and the noise ``x_noise = log(full / other)`` (importance:
    differences of per-layer-normalised scores), and where the pruned heads are."""
    seeds = sorted(table["seed"].unique())
    nxt = {s: seeds[(i + 1) % len(seeds)] for i, s in enumerate(seeds)}
    full = {(r.task, r.seed): r for r in table[table["strategy"] == "none"].itertuples()}
    rows = []
    for r in table[table["strategy"] != "none"].itertuples():
        f, o = full.get((r.task, r.seed)), full.get((r.task, nxt[r.seed]))
        if f is None or o is None or nxt[r.seed] == r.seed:
            continue
        m = masks.mask_from_string(r.mask).numpy().astype(bool)
        n_layers, n_heads = m.shape
        pruned_in_layer = (~m).sum(axis=1)
        adjacent = np.array([pruned_in_layer[max(0, l - 1)] * (l > 0) + (pruned_in_layer[l + 1] if l + 1 < n_layers else 0)
                             for l in range(n_layers)])
        for measure in MEASURES:
            p, fu, ot = _grid(getattr(r, measure)), _grid(getattr(f, measure)), _grid(getattr(o, measure))
            if measure == "importance":
                p, fu, ot = (_normalise_rows(a, m) for a in (p, fu, ot))
                x, x0 = p - ot, fu - ot
            else:
                with np.errstate(invalid="ignore", divide="ignore"):
                    x, x0 = np.log(p / ot), np.log(fu / ot)
            for l in range(n_layers):
                for h in range(n_heads):
                    if m[l, h] and np.isfinite(x[l, h]) and np.isfinite(x0[l, h]):
                        rows.append({"task": r.task, "seed": r.seed, "strategy": r.strategy, "budget": r.budget,
                                     "measure": measure, "layer": l, "head": h, "pruned": p[l, h], "full": fu[l, h],
                                     "other": ot[l, h], "x": x[l, h], "x_noise": x0[l, h],
                                     "pruned_in_layer": int(pruned_in_layer[l]), "pruned_adjacent": int(adjacent[l])})
    return pd.DataFrame(rows)


def _dispersion(measure: str, x: np.ndarray) -> float:
    """How unequal the extra changes ``x`` of one run's kept heads are: the Gini coefficient of the ratios
    ``exp(x)`` (positive measures; scale-free) or the standard deviation of ``x`` (importance differences)."""
    return float(np.std(x)) if measure == "importance" else stats.gini(np.exp(x))


def spread_tests(heads: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per pruned run and measure:

    - ``dispersion`` of the kept heads' extra change ``x`` and ``dispersion_noise`` of the same heads' noise
      ``x_noise``; ``excess_p``: one-sided permutation p of ``dispersion - dispersion_noise``, swapping the
      pruned and the unpruned run head by head (``n_boot`` swaps; exchangeable when pruning changes nothing
      about how the change is spread). Exact and calibrated, but weak against a change concentrated on ONE
      head (a swap moves it to the other side): the pooled CI of the excess covers that case.
    - ``rho_*``: Spearman correlation of ``x`` with the number of pruned heads in the head's own layer and
      in the adjacent layers; ``p_*``: two-sided permutation p (``x`` shuffled over the kept heads).
    """
    rng = np.random.default_rng(seed)
    rows = []
    for (task, s, strategy, budget, measure), g in heads.groupby(["task", "seed", "strategy", "budget", "measure"]):
        x, x0 = g["x"].to_numpy(dtype=float), g["x_noise"].to_numpy(dtype=float)
        d_obs, d_noise = _dispersion(measure, x), _dispersion(measure, x0)
        excess = d_obs - d_noise
        swaps = rng.random((n_boot, len(x))) < 0.5
        null = np.array([_dispersion(measure, np.where(w, x0, x)) - _dispersion(measure, np.where(w, x, x0)) for w in swaps])
        row = {"task": task, "seed": s, "strategy": strategy, "budget": budget, "measure": measure, "n_heads": len(g),
               "dispersion_kind": "sd of differences" if measure == "importance" else "Gini of ratios",
               "dispersion": d_obs, "dispersion_noise": d_noise, "excess_dispersion": excess,
               "excess_p": float((1 + np.sum(null >= excess - 1e-12)) / (1 + n_boot))}
        for feat in ("pruned_in_layer", "pruned_adjacent"):
            z = g[feat].to_numpy(dtype=float)
            if np.ptp(z) == 0 or np.ptp(x) == 0:
                row[f"rho_{feat}"], row[f"p_{feat}"] = np.nan, np.nan
                continue
            rho = float(sps.spearmanr(x, z).statistic)
            perm = np.array([sps.spearmanr(rng.permutation(x), z).statistic for _ in range(min(n_boot, 1000))])
            row[f"rho_{feat}"] = rho
            row[f"p_{feat}"] = float((1 + np.sum(np.abs(perm) >= abs(rho) - 1e-12)) / (len(perm) + 1))
        rows.append(row)
    return pd.DataFrame(rows)


def pooled(tests: pd.DataFrame, confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Per strategy x budget x measure, over tasks and seeds (the runs are the units): mean excess dispersion
    and mean correlations with a bootstrap CI and a sign-flip p; the runs' ``excess_p`` combined by Fisher's
    method (``excess_fisher_p``: small when the runs are, together, more unequal than noise)."""
    rows = []
    for (strategy, budget, measure), g in tests.groupby(["strategy", "budget", "measure"]):
        row = {"strategy": strategy, "budget": budget, "measure": measure, "n_runs": len(g),
               "dispersion_kind": g["dispersion_kind"].iloc[0], "mean_dispersion": float(g["dispersion"].mean()),
               "mean_dispersion_noise": float(g["dispersion_noise"].mean()),
               "excess_fisher_p": float(sps.combine_pvalues(g["excess_p"].to_numpy(dtype=float), method="fisher").pvalue)}
        for col in ("excess_dispersion", "rho_pruned_in_layer", "rho_pruned_adjacent"):
            v = g[col].dropna().to_numpy(dtype=float)
            lo, hi = stats.bootstrap_ci(v, confidence, seed=seed) if len(v) > 1 else (np.nan, np.nan)
            row.update({col: float(v.mean()) if len(v) else np.nan, f"{col}_ci_low": lo, f"{col}_ci_high": hi,
                        f"{col}_p": stats.sign_flip_test(v, seed=seed) if len(v) else np.nan})
        rows.append(row)
    return pd.DataFrame(rows)


MEASURE_NAMES = {"weight_change": "weight change", "importance": "gradient importance",
                 "attention_change": "attention-pattern change (JS)"}


def verdicts(pool: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """"claim - our result - verdict" rows: equal spread, and locality, per strategy x budget x measure."""
    rows = []
    for r in pool.itertuples():
        setting = f"{r.strategy} {100 * r.budget:.0f}%, {MEASURE_NAMES[r.measure]}"
        res = (f"{r.dispersion_kind}: pruned runs {r.mean_dispersion:.3f} vs noise {r.mean_dispersion_noise:.3f}; "
               f"excess {r.excess_dispersion:+.3f} [{r.excess_dispersion_ci_low:+.3f}, {r.excess_dispersion_ci_high:+.3f}]; "
               f"more unequal than noise: Fisher-combined p = {r.excess_fisher_p:.3g} over {r.n_runs} runs")
        if r.excess_fisher_p < alpha or r.excess_dispersion_ci_low > 0:
            v = "not supported: the extra change is more concentrated than seed-to-seed noise"
        else:
            v = "supported: no more concentrated than seed-to-seed noise"
        rows.append({"claim": "Budhraja et al. claim 4: the compensation is spread roughly equally over the kept heads",
                     "setting": setting, "our result": res, "verdict": v + " at this scale"})
        loc = []
        sig = False
        for feat, name in (("pruned_in_layer", "same layer"), ("pruned_adjacent", "adjacent layers")):
            m, lo, hi, p = (getattr(r, f"rho_{feat}{s}") for s in ("", "_ci_low", "_ci_high", "_p"))
            if np.isnan(m):
                loc.append(f"{name}: not testable (the count does not vary over kept heads)")
                continue
            loc.append(f"{name}: mean Spearman rho {m:+.3f} [{lo:+.3f}, {hi:+.3f}], sign-flip p = {p:.3g}")
            sig = sig or (m > 0 and p < alpha)
        rows.append({"claim": "Heads near the pruned ones (same layer, adjacent layers) compensate more",
                     "setting": setting, "our result": "; ".join(loc),
                     "verdict": ("supported" if sig else "not supported (no significant positive correlation)")
                     + " at this scale"})
    return pd.DataFrame(rows)


def heatmap_data(heads: pd.DataFrame) -> pd.DataFrame:
    """Mean extra change per (strategy, budget, measure, layer, head) over tasks and seeds."""
    keys = ["strategy", "budget", "measure", "layer", "head"]
    return heads.groupby(keys, as_index=False).agg(x=("x", "mean"), x_noise=("x_noise", "mean"), n=("x", "size"))
