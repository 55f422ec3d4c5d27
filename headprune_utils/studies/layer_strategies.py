"""Study 2: where to prune — layer-location strategies at the same head budget (Budhraja et al. 2020, claim 3).

Claim under test: for BERT there is no preference between pruning top or bottom layers, but strategies
that AVOID the middle layers, and that avoid CONSECUTIVE layers, do better. Plus the strategies earlier
studies motivate: pruning the layers that probing work calls important (the middle, syntactic layers:
Jawahar et al. 2019, Hewitt and Manning 2019), and pruning by measured importance (Michel et al.'s
gradient importance of the fine-tuned model: least or most important heads first) — the "weak link
between importance and prunability".

Cells: task x regime x strategy x budget x seed, each independent. ``budget`` is the share of ALL heads
pruned; every strategy prunes exactly the same number of heads (``strategies.py`` says how a budget
that does not fill whole layers is spread). Reference cells (strategy ``"none"``, budget 0) hold the
fine-tuned full model. Regimes as in study 1: ``finetune_then_mask`` (evaluation only: many masks of
one fine-tuned model, evaluated together with shared work, ``mask_sweep``) and ``mask_then_finetune``
(one fine-tuning per cell, at ``finetune_budgets``).
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
import torch
from scipy import stats as sps

from .. import importance, mask_sweep, masks, stats, strategies, training
from ..config import ParameterError
from ..metrics import main_score
from ..paths import StudyPaths
from ..results import fingerprint
from .. import glue_workbench

STUDY = "layer_strategies"
RESULTS_VERSION = 1
Regime = Literal["mask_then_finetune", "finetune_then_mask"]
REGIMES: tuple[str, ...] = ("mask_then_finetune", "finetune_then_mask")
ALL_STRATEGIES: tuple[str, ...] = strategies.STRATEGIES + strategies.IMPORTANCE_STRATEGIES


@dataclass(frozen=True)
class LayerStrategiesConfig(glue_workbench.GlueStudyConfig):
    """Parameters of the study (the shared ones in ``glue_workbench.GlueStudyConfig``); defaults = the quick profile."""

    strategies: list[str] = field(default_factory=lambda: list(ALL_STRATEGIES))  # see strategies.py
    budgets: list[float] = field(default_factory=lambda: [0.25, 0.5, 0.75])  # share of ALL heads pruned (evaluation-only regime)
    finetune_budgets: list[float] = field(default_factory=lambda: [0.5])  # budgets of the mask-then-fine-tune regime (one fine-tuning per cell)
    regimes: list[Regime] = field(default_factory=lambda: list(REGIMES))
    importance_size: int | None = 1000          # training examples for the gradient importance of the importance strategies (None: all)
    shared_evaluation: bool = True              # evaluate a model's masks together, reusing shared work (False: one full forward per mask)
    equivalence_margin: float = 0.02            # analysis only: a difference within +-margin (score units) counts as "no preference"

    def check(self) -> None:
        bad = [r for r in self.regimes if r not in REGIMES]
        if bad or not self.regimes:
            raise ParameterError(f"regimes must be a non-empty list of {REGIMES}, got {self.regimes}")
        unknown = [s for s in self.strategies if s not in ALL_STRATEGIES]
        if unknown or not self.strategies:
            raise ParameterError(f"strategies must be a non-empty list of {ALL_STRATEGIES}, got {self.strategies}")
        if len(set(self.strategies)) != len(self.strategies):
            raise ParameterError("strategies must not repeat")
        if self.importance_size is not None and self.importance_size < 1:
            raise ParameterError(f"importance_size must be a positive integer or None, got {self.importance_size}")
        if not self.equivalence_margin >= 0:
            raise ParameterError(f"equivalence_margin must be >= 0, got {self.equivalence_margin}")
        super().check()
        for name in ("budgets", "finetune_budgets"):
            values = getattr(self, name)
            if "mask_then_finetune" not in self.regimes and name == "finetune_budgets":
                continue
            self.check_fractions(name, values)
            if any(b == 0 for b in values):
                raise ParameterError(f"{name}: 0 is the reference (the full model), always included; list budgets > 0")


def plan_cells(cfg: LayerStrategiesConfig, tasks: list[str]) -> list[dict]:
    """Every cell, grouped by (task, seed) so each fine-tuned full model is loaded once."""
    cells = []
    for task in tasks:
        for seed in cfg.seeds:
            for regime in REGIMES:
                if regime not in cfg.regimes:
                    continue
                budgets = cfg.budgets if regime == "finetune_then_mask" else cfg.finetune_budgets
                cells.append({"task": task, "regime": regime, "strategy": "none", "budget": 0.0, "seed": int(seed)})
                for b in sorted(budgets):
                    for s in cfg.strategies:
                        cells.append({"task": task, "regime": regime, "strategy": s, "budget": float(b), "seed": int(seed)})
    return cells


def n_cells(cfg: LayerStrategiesConfig) -> int:
    return len(plan_cells(cfg, glue_workbench.resolve_tasks(cfg)[0]))


def study_fingerprint(cfg: LayerStrategiesConfig, device: torch.device) -> str:
    drop = ("strategies", "budgets", "finetune_budgets", "regimes", "shared_evaluation", "equivalence_margin")
    # importance_size stays: it changes the importance strategies' masks
    return fingerprint(glue_workbench.result_params(cfg, device, RESULTS_VERSION, drop=drop))


class Context(glue_workbench.Workbench):
    """The shared workbench plus each full model's head importance (for the importance strategies)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._importance: dict = {}

    def importance(self, task: str, seed: int) -> torch.Tensor:
        """Gradient importance (Michel et al.; normalised per layer) of the fine-tuned full model on the
        task's TRAINING subset (never the dev set the strategies are scored on)."""
        if (task, seed) not in self._importance:
            model = self.full_model(task, seed)[0]
            batches = glue_workbench.batches(self.task_data(task)[1], self.device, self.cfg.importance_size)
            self._importance = {(task, seed): importance.head_importance(model, batches).cpu()}
        return self._importance[(task, seed)]

    def cell_mask(self, cell: dict) -> torch.Tensor:
        """The cell's mask (studies built on this one add strategies by overriding this method)."""
        return cell_mask(self, cell)


def cell_mask(ctx: Context, cell: dict) -> torch.Tensor:
    """The cell's ``[n_layers, n_heads]`` mask (1 = kept)."""
    n_layers, n_heads = ctx.shape
    if cell["strategy"] == "none":
        return torch.ones(n_layers, n_heads)
    n_prune = masks.n_pruned_for_fraction(cell["budget"], n_layers, n_heads)
    if cell["strategy"] in strategies.IMPORTANCE_STRATEGIES:
        return strategies.importance_mask(ctx.importance(cell["task"], cell["seed"]), n_prune, cell["strategy"])
    return strategies.strategy_mask(cell["strategy"], n_layers, n_heads, n_prune, cell["seed"])


def _row(ctx: Context, cell: dict, metrics: dict, mask: torch.Tensor, history: list, seconds: float) -> dict:
    spec, tr, dv, *_ = ctx.task_data(cell["task"])
    pruned_layers = [int(l) for l in torch.nonzero((mask < 1).any(dim=1)).flatten()]
    return {
        "score": main_score(cell["task"], metrics),
        **metrics,
        "metric": spec.main_metric,
        "chance": glue_workbench.chance_score(cell["task"], tr, dv),
        "n_heads_pruned": int((mask == 0).sum()),
        "n_heads_total": int(mask.numel()),
        "first_pruned_layer": pruned_layers[0] if pruned_layers else None,
        "n_layers_touched": len(pruned_layers),
        "mask": masks.mask_to_string(mask),
        "history": history,
        "seconds": seconds,
    }


def run_cell(ctx: Context, cell: dict) -> dict:
    """One cell on its own (the unit a cluster engine may run anywhere)."""
    return run_cells(ctx, [cell], shared=False)[0]


def run_cells(ctx: Context, cells: list[dict], shared: bool = True) -> list[dict]:
    """Results of ``cells`` of ONE (task, seed), in order. Evaluation-only cells are evaluated together
    (``mask_sweep``: work shared between masks) when ``shared``; the outputs equal the plain way's."""
    if len({(c["task"], c["seed"]) for c in cells}) > 1:
        raise ValueError("run_cells takes the cells of one (task, seed)")
    cfg = ctx.cfg
    out: dict[int, dict] = {}
    evals = [i for i, c in enumerate(cells) if c["regime"] == "finetune_then_mask"]
    if evals:
        task, seed = cells[evals[0]]["task"], cells[evals[0]]["seed"]
        model = ctx.full_model(task, seed)[0]
        dv = ctx.task_data(task)[2]
        means = ctx.full_means(task, seed) if cfg.ablation == "mean" else None
        cell_masks = {i: ctx.cell_mask(cells[i]) for i in evals}
        t0 = time.perf_counter()
        if shared and len(evals) > 1:
            metrics = mask_sweep.evaluate_masks(model, dv, task, cell_masks, glue_workbench.EVAL_BATCH,
                                                ablation=cfg.ablation, means=means)
        else:
            metrics = {i: training.evaluate(model, dv, task, glue_workbench.EVAL_BATCH, gates=m.to(ctx.device),
                                            ablation=cfg.ablation, means=means) for i, m in cell_masks.items()}
        each = (time.perf_counter() - t0) / len(evals)
        for i in evals:
            out[i] = _row(ctx, cells[i], metrics[i], cell_masks[i], [], each)
    for i, cell in enumerate(cells):
        if cell["regime"] != "mask_then_finetune":
            continue
        t0 = time.perf_counter()
        mask = ctx.cell_mask(cell)
        task, seed = cell["task"], cell["seed"]
        dv = ctx.task_data(task)[2]
        gates = means = None
        if cell["strategy"] == "none":
            model, history, _ = ctx.full_model(task, seed)
            metrics = training.evaluate(model, dv, task, glue_workbench.EVAL_BATCH, gates=gates, ablation=cfg.ablation, means=means)
        else:
            # the same (task, seed, mask) fine-tuned in another study (5 shares study 2's random and importance
            # masks) is read back, not trained again
            metrics, history = ctx.masked_scores(task, seed, mask, f"{task} s{seed} {cell['strategy']} {cell['budget']:g}")
        out[i] = _row(ctx, cell, metrics, mask, history, time.perf_counter() - t0)
    return [out[i] for i in range(len(cells))]


def run_study(cfg: LayerStrategiesConfig, profile: str, paths: StudyPaths | None = None) -> pd.DataFrame:
    """Run every cell not yet done (resuming), write the metadata; returns the tidy results."""
    return run_strategy_study(cfg, profile, paths, STUDY, plan_cells, study_fingerprint, Context)


def run_strategy_study(cfg, profile: str, paths: StudyPaths | None, study: str, plan, fingerprint_of,
                       context_cls) -> pd.DataFrame:
    """The run of a study made of this study's cells (task x regime x strategy x budget x seed): each (task,
    seed)'s evaluation-only cells are evaluated together, the others fine-tuned one by one (each stored when
    done). ``plan(cfg, tasks)`` lists the cells, ``fingerprint_of(cfg, device)`` keys the results,
    ``context_cls(cfg, device, cache_dir)`` makes the masks (zero_shot.py runs its own strategies through here)."""
    tasks, missing = glue_workbench.resolve_tasks(cfg)

    def run_todo(ctx, store, todo, bar):
        groups: dict[tuple, list[dict]] = defaultdict(list)
        for c in todo:
            groups[(c["task"], c["seed"])].append(c)
        for group in groups.values():
            evals = [c for c in group if c["regime"] == "finetune_then_mask"]
            for cell, row in zip(evals, run_cells(ctx, evals, shared=cfg.shared_evaluation)):
                store.put(cell, row)
            bar.update(len(evals))
            for cell in (c for c in group if c["regime"] == "mask_then_finetune"):
                store.put(cell, run_cell(ctx, cell))  # saved one by one: an interrupted run resumes here
                bar.update(1)

    return glue_workbench.run_study_cells(study, cfg, profile, paths, plan(cfg, tasks), fingerprint_of, context_cls,
                                  run_todo=run_todo, extra_params={"tasks_run": tasks, "tasks_unavailable": missing})


# ---------------------------------------------------------------------------------------------- analysis

def summarise(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Mean score per task x regime x strategy x budget with a t-interval over seeds."""
    rows = []
    for (task, regime, strategy, budget), g in table.groupby(["task", "regime", "strategy", "budget"]):
        mean, lo, hi = stats.t_interval(g["score"].to_numpy(dtype=float), confidence)
        rows.append({"task": task, "regime": regime, "strategy": strategy, "budget": budget,
                     "metric": g["metric"].iloc[0], "n_seeds": len(g), "mean": mean, "ci_low": lo, "ci_high": hi,
                     "n_heads_pruned": int(g["n_heads_pruned"].iloc[0]), "chance": float(g["chance"].iloc[0])})
    return pd.DataFrame(rows).sort_values(["task", "regime", "budget", "strategy"]).reset_index(drop=True)


@dataclass(frozen=True)
class Contrast:
    """``a - b`` paired by (task, budget, seed) (study 5: ``b = "none"`` is the full model of the same task and
    seed); ``expect``: what the claim predicts of the difference."""

    name: str
    claim: str
    a: str
    b: str
    expect: Literal["equal", "greater", "not_worse"]


CONTRASTS: tuple[Contrast, ...] = (
    Contrast("top vs bottom", "Budhraja et al. claim 3a: no preference between pruning the top or the bottom layers",
             "top", "bottom", "equal"),
    Contrast("avoid the middle", "Budhraja et al. claim 3b: pruning that avoids the middle layers (top + bottom) "
             "beats pruning the middle layers", "top_bottom", "middle", "greater"),
    Contrast("avoid consecutive layers", "Budhraja et al. claim 3c: pruning layers spread apart beats pruning "
             "the same number of consecutive layers", "spread", "consecutive", "greater"),
    Contrast("important-by-location vs random", "Budhraja et al. claim 2 (for BERT): pruning the layers earlier "
             "studies call important (the middle) is no worse than random", "middle", "random", "not_worse"),
    Contrast("most important vs random", "Weak link between importance and prunability: pruning the MOST important "
             "heads (gradient importance) is no worse than random", "most_important", "random", "not_worse"),
    Contrast("least important vs random", "Michel et al.: pruning the LEAST important heads first beats random",
             "least_important", "random", "greater"),
)


def _paired(table: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """Rows (task, regime, budget, seed, diff = score_a - score_b) where both strategies ran."""
    t = table[table["strategy"].isin([a, b])]
    p = t.pivot_table(index=["task", "regime", "budget", "seed"], columns="strategy", values="score")
    if a not in p or b not in p:
        return pd.DataFrame(columns=["task", "regime", "budget", "seed", "diff"])
    p = p.dropna(subset=[a, b])
    return (p[a] - p[b]).rename("diff").reset_index()


def contrasts(table: pd.DataFrame, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Every contrast per task x regime x budget (paired over seeds), and pooled per regime ("all" tasks
    and budgets: paired over task x budget x seed). Mean difference, percentile-bootstrap CI, paired t-test
    p and sign-flip permutation p."""
    return contrast_table(CONTRASTS, lambda a, b: _paired(table, a, b), confidence, n_boot, seed)


def contrast_table(contrast_list, pair, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0,
                   pool_per_budget: bool = False) -> pd.DataFrame:
    """The statistics of paired contrasts. ``pair(a, b)`` gives rows (task, regime, budget, seed, diff); each
    contrast is summarised per task x regime x budget, pooled over tasks per regime x budget when
    ``pool_per_budget`` (``task="all"``), and pooled over everything per regime (``task="all", budget="all"``)."""
    rows = []
    for c in contrast_list:
        d = pair(c.a, c.b)
        if d.empty:
            continue
        groups = [((t, r, b), g) for (t, r, b), g in d.groupby(["task", "regime", "budget"])]
        if pool_per_budget:
            groups += [(("all", r, b), g) for (r, b), g in d.groupby(["regime", "budget"])]
        groups += [(("all", r, "all"), g) for r, g in d.groupby("regime")]
        for (task, regime, budget), g in groups:
            x = g["diff"].to_numpy(dtype=float)
            lo, hi = stats.bootstrap_ci(x, confidence, n_boot, seed) if len(x) > 1 else (np.nan, np.nan)
            t_p = float(sps.ttest_1samp(x, 0.0).pvalue) if len(x) > 1 and np.std(x) > 1e-12 else np.nan
            rows.append({"contrast": c.name, "a": c.a, "b": c.b, "expect": c.expect, "task": task, "regime": regime,
                         "budget": budget, "n_pairs": len(x), "mean_diff": float(x.mean()), "boot_ci_low": lo,
                         "boot_ci_high": hi, "t_test_p": t_p, "sign_flip_p": stats.sign_flip_test(x, seed=seed)})
    return pd.DataFrame(rows)


def _verdict(expect: str, r, margin: float, alpha: float) -> str:
    significant = r.sign_flip_p < alpha
    if expect == "greater":
        if r.mean_diff > 0 and significant:
            return "supported"
        if r.mean_diff < 0 and significant:
            return "contradicted (the opposite is significant)"
        return "not supported (no significant difference)"
    if expect == "equal":
        if r.boot_ci_low >= -margin and r.boot_ci_high <= margin:
            return f"supported (CI within +-{margin:g})"
        if significant:
            return "contradicted (a significant difference)"
        return f"inconclusive (no significant difference, CI wider than +-{margin:g})"
    # not_worse
    if r.boot_ci_low >= -margin:
        return f"supported (CI above -{margin:g})"
    if r.mean_diff < 0 and significant:
        return "contradicted (significantly worse)"
    return f"inconclusive (CI reaches below -{margin:g})"


def verdicts(contr: pd.DataFrame, cfg: LayerStrategiesConfig, alpha: float = 0.05) -> pd.DataFrame:
    """The table "claim - our result - verdict" per regime, from the pooled contrasts; every number from this run."""
    rows = []
    pooled = contr[contr["task"] == "all"]
    for c in CONTRASTS:
        for _, r in pooled[pooled["contrast"] == c.name].iterrows():
            per = contr[(contr["contrast"] == c.name) & (contr["regime"] == r.regime) & (contr["task"] != "all")]
            detail = "; ".join(f"{p.task} {100 * p.budget:.0f}%: {p.mean_diff:+.3f} [{p.boot_ci_low:+.3f}, {p.boot_ci_high:+.3f}]"
                               for p in per.itertuples())
            result = (f"{c.a} - {c.b} = {r.mean_diff:+.3f}, 95% CI [{r.boot_ci_low:+.3f}, {r.boot_ci_high:+.3f}], "
                      f"sign-flip p = {r.sign_flip_p:.3g} over {r.n_pairs} pairs (task x budget x seed). Per setting: {detail}")
            rows.append({"claim": c.claim, "regime": REGIME_NAMES[r.regime], "our result": result,
                         "verdict": _verdict(c.expect, r, cfg.equivalence_margin, alpha) + " at this scale"})
    return pd.DataFrame(rows)


def example_masks(table: pd.DataFrame, seed: int | None = None, order: tuple[str, ...] = ALL_STRATEGIES) -> pd.DataFrame:
    """One mask per strategy x budget (of ``seed``, default the smallest; evaluation-only regime, first task)
    as rows (strategy, budget, layer, head, kept) for the mask picture."""
    t = table[(table["strategy"] != "none")]
    if t.empty:
        return pd.DataFrame(columns=["strategy", "budget", "layer", "head", "kept"])
    seed = int(t["seed"].min()) if seed is None else seed
    t = t[(t["seed"] == seed) & (t["task"] == t["task"].iloc[0])]
    t = t[t["regime"] == ("finetune_then_mask" if (t["regime"] == "finetune_then_mask").any() else "mask_then_finetune")]
    rows = []
    order = {s: i for i, s in enumerate(order)}
    for (strategy, budget), g in sorted(t.groupby(["strategy", "budget"]), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        m = masks.mask_from_string(g["mask"].iloc[0])
        for layer in range(m.shape[0]):
            for head in range(m.shape[1]):
                rows.append({"strategy": strategy, "budget": budget, "layer": layer, "head": head,
                             "kept": int(m[layer, head])})
    return pd.DataFrame(rows)


REGIME_NAMES = {
    "mask_then_finetune": "mask, then fine-tune",
    "finetune_then_mask": "fine-tune, then mask (no retraining)",
}
