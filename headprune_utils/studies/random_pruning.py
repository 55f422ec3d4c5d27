"""Study 1: random head pruning (Budhraja et al. 2020, claim 1; Michel et al. 2019's regime).

Cells: task x regime x fraction x seed, each independent (a cluster engine can run them anywhere):

- ``mask_then_finetune`` (Budhraja et al.): prune a random ``fraction`` of all heads of the
  pre-trained model, then fine-tune with the mask fixed.
- ``finetune_then_mask`` (Michel et al.): fine-tune the full model (seed ``s``), then prune a random
  ``fraction`` of its heads and evaluate without retraining.

Masks of seed ``s`` are nested across fractions and shared by both regimes and all tasks (paired
comparisons). The fine-tuned full model of (task, seed) is the ``fraction = 0`` cell of the first
regime; its checkpoint is cached (``glue_workbench.Workbench``) so the second regime, and other studies, reuse it.
Mask-then-fine-tune runs at ``finetune_fractions`` (None: every fraction), each fine-tuning through the cache
studies 2 and 5 share (``Workbench.masked_scores``): their random masks at the same budget and seed are these.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import pandas as pd
import torch

from .. import glue_workbench, masks, training
from ..config import ParameterError
from ..metrics import main_score
from ..paths import StudyPaths
from ..pruning_curves import REGIMES, paired_drop, prunable_fraction, regime_difference, summarise  # noqa: F401 (the notebook's analysis)
from ..results import fingerprint
from .base import Cell, Claim, Cost, Study

NAME = "random_pruning"
EVAL_BATCH = glue_workbench.EVAL_BATCH
Regime = Literal["mask_then_finetune", "finetune_then_mask"]
# Bump when a code change alters this study's results: old cells then no longer match.
RESULTS_VERSION = 2


@dataclass(frozen=True)
class RandomPruningConfig(glue_workbench.GlueStudyConfig):
    """Parameters of the study (the shared ones in ``glue_workbench.GlueStudyConfig``); defaults = the quick profile."""

    fractions: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75])  # share of ALL heads pruned, in [0, 1]
    finetune_fractions: list[float] | None = field(default_factory=lambda: [0.5, 0.75])  # of those, the ones of the mask-then-fine-tune regime (one fine-tuning each; None: all)
    regimes: list[Regime] = field(default_factory=lambda: list(REGIMES))
    tolerance: float = 0.02                     # analysis only: a drop up to this (score units) counts as "limited"

    def check(self) -> None:
        bad = [r for r in self.regimes if r not in REGIMES]
        if bad or not self.regimes:
            raise ParameterError(f"regimes must be a non-empty list of {REGIMES}, got {self.regimes}")
        super().check()
        self.check_fractions("fractions", self.fractions)
        self.check_finetune_fractions()


def plan_cells(cfg: RandomPruningConfig) -> list[Cell]:
    """Every cell of the study, ordered so that shared work (the full fine-tuned model) is reused. The
    evaluation-only cells of one fine-tuned model form a group (one worker loads that model once)."""
    tasks = glue_workbench.resolve_tasks(cfg)[0]
    cells = []
    for task in tasks:
        for seed in cfg.seeds:
            for regime in REGIMES:
                if regime not in cfg.regimes:
                    continue
                for f in sorted(cfg.fractions):
                    if regime == "mask_then_finetune" and f != 0 and not glue_workbench.fine_tuned_at(cfg, f):
                        continue  # 0: the fine-tuned full model, shared by both regimes, always there
                    axes = {"task": task, "regime": regime, "fraction": float(f), "seed": int(seed)}
                    if regime == "mask_then_finetune":
                        cost = glue_workbench.finetune_cost(cfg, task, 1.0 - f)
                        cells.append(Cell(axes, cost=Cost(cost)))
                    else:
                        cost = glue_workbench.eval_cost(cfg, task)
                        cells.append(Cell(axes, group=(task, int(seed), "evaluate"), cost=Cost(cost)))
    return cells


def study_fingerprint(cfg: RandomPruningConfig, device: torch.device) -> str:
    return fingerprint(glue_workbench.result_params(cfg, device, RESULTS_VERSION, drop=("fractions", "finetune_fractions", "regimes", "tolerance")))


def cell_mask(shape: tuple[int, int], fraction: float, seed: int) -> torch.Tensor:
    n_layers, n_heads = shape
    return masks.random_mask(n_layers, n_heads, masks.n_pruned_for_fraction(fraction, n_layers, n_heads), seed)


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


def run_cell(ctx: glue_workbench.Workbench, cell: dict) -> dict:
    """Compute one cell's result (pure of the store; the caller saves it)."""
    cfg = ctx.cfg
    task, regime, fraction, seed = cell["task"], cell["regime"], cell["fraction"], cell["seed"]
    spec, tr, dv, *_ = ctx.task_data(task)
    mask = cell_mask(ctx.shape, fraction, seed)
    t0 = time.perf_counter()
    if regime == "mask_then_finetune":
        if fraction == 0:
            model, history, _ = ctx.full_model(task, seed)
            metrics = training.evaluate(model, dv, task, EVAL_BATCH, ablation=cfg.ablation)
        else:
            # shared with the other studies: a (task, seed, mask) fine-tuned there (e.g. study 2's and 5's
            # random masks at the same budget, which are this study's masks) is read back, not trained again
            metrics, history = ctx.masked_scores(task, seed, mask, f"{task} s{seed} f{fraction:g}")
    else:
        model, _, _ = ctx.full_model(task, seed)
        means = ctx.full_means(task, seed) if cfg.ablation == "mean" else None
        metrics = training.evaluate(model, dv, task, EVAL_BATCH, gates=mask.to(ctx.device), ablation=cfg.ablation, means=means)
        history = []
    metrics = {**metrics, "score": main_score(task, metrics), "chance": glue_workbench.chance_score(task, tr, dv)}
    return _row(task, spec, history, metrics, mask, time.perf_counter() - t0)


class RandomPruning(Study):
    """Study 1 (see the module docstring)."""

    name = NAME
    notebook = "01_random_pruning.ipynb"
    Config = RandomPruningConfig
    claims = (
        Claim("budhraja.random_prunable", "Budhraja et al. 2020",
              "A large fraction (>= 50%) of heads can be pruned at random with limited effect when fine-tuning "
              "follows the masking.",
              quantity="paired drop in the task score from the full model, per task and fraction",
              precondition="fine-tuning adapts to the mask: at 50% mask-then-fine-tune beats fine-tune-then-mask"),
        Claim("budhraja.retraining_recovers", "Budhraja et al. 2020 vs Michel et al. 2019",
              "Fine-tuning after masking recovers more than masking a fine-tuned model.",
              quantity="score(mask, then fine-tune) - score(fine-tune, then mask), paired by seed",
              precondition="the full model scores above chance"),
    )

    def plan(self, cfg: RandomPruningConfig) -> list[Cell]:
        return plan_cells(cfg)

    def fingerprint(self, cfg: RandomPruningConfig, device) -> str:
        return study_fingerprint(cfg, device)

    def context(self, cfg: RandomPruningConfig, device, paths: StudyPaths) -> glue_workbench.Workbench:
        return glue_workbench.Workbench(cfg, device, paths.finetuned_cache)

    def run(self, ctx: glue_workbench.Workbench, cells: list[Cell], inputs):
        for cell in cells:
            yield cell, run_cell(ctx, dict(cell.axes))

    def run_params(self, cfg: RandomPruningConfig) -> dict:
        tasks, missing = glue_workbench.resolve_tasks(cfg)
        return {"tasks_run": tasks, "tasks_unavailable": missing}


STUDY = RandomPruning()


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
