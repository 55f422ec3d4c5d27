"""Study 1: random head pruning (Budhraja et al. 2020, claim 1; Michel et al. 2019's regime).

Cells: task x regime x ablation x fraction x seed, each independent (a cluster engine can run them anywhere);
``ablation`` is the semantics of the masked heads (:mod:`headprune_utils.studies.semantics`): ``ablations`` for the
evaluation-only regime (all three by default, cheap), ``finetune_ablations`` for mask-then-fine-tune (Budhraja
et al.'s ``uniform``, and ``zero`` as the sensitivity semantics):

- ``mask_then_finetune`` (Budhraja et al.): prune a random ``fraction`` of all heads of the
  pre-trained model, then fine-tune with the mask fixed.
- ``finetune_then_mask`` (Michel et al.): fine-tune the full model (seed ``s``), then prune a random
  ``fraction`` of its heads and evaluate without retraining.

Masks of seed ``s`` are nested across fractions and shared by both regimes and all tasks (paired
comparisons). The evaluation-only regime may draw ``mask_draws`` random masks per model (axis ``draw``; draw 0 is
the shared mask); the analysis averages the draws within the model first (the model is the unit). The fine-tuned full model of (task, seed) is the ``fraction = 0`` cell of the first
regime; its checkpoint is cached (``glue_workbench.GlueContext``) so the second regime, and other studies, reuse it.
Mask-then-fine-tune runs at ``finetune_fractions`` (None: every fraction), each fine-tuning through the cache
studies 2 and 5 share (``GlueContext.masked_scores``): their random masks at the same budget and seed are these.

The claims are declared once, as data, in :mod:`.random_pruning_claims` (``claims = CLAIMS``). The analysis
(pure functions over the cells' table: curves, paired drops, the claims' measurements and verdicts, findings) is in
:mod:`.random_pruning_analysis`, re-exported here so the notebook needs one module; :func:`verdicts` decides the
study's ``claims`` with it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import pandas as pd
import torch

from headprune_utils.studies import glue_workbench
from headprune_utils.model import masks
from headprune_utils.model.ablations import as_ablation
from headprune_utils.train import training
from headprune_utils.studies.config import ParameterError, check_fields
from headprune_utils.tasks.metrics import main_score
from headprune_utils.store.paths import StudyPaths
from headprune_utils.analysis.pruning_curves import REGIMES
from headprune_utils.store.results import fingerprint
from headprune_utils.studies.base import (GLUE_METRIC_RANGES, Cell, Cost, Study, mask_count_problem,
                                            metric_score_problem)
from headprune_utils.studies.random_pruning_analysis import ( # the analysis: pure functions over the table, re-exported for the notebook
    MEASURES, REGIME_NAMES, claim_verdicts, findings, held_out_curves, mask_spread, paired_drop, per_model,
    prunable_fraction, regime_difference, summarise,
)
from headprune_utils.studies.random_pruning_claims import CLAIMS

__all__ = [
    "NAME", "STUDY", "RandomPruning", "RandomPruningConfig", "REGIMES", "Regime", "plan_cells", "study_fingerprint",
    "cell_mask", "mask_seed", "run_cell",
    # the analysis (random_pruning_analysis), re-exported so the notebook needs one module
    "REGIME_NAMES", "MEASURES", "CLAIMS", "per_model", "mask_spread", "summarise", "paired_drop", "prunable_fraction",
    "regime_difference", "held_out_curves", "claim_verdicts", "verdicts", "findings",
]

NAME = "random_pruning"
EVAL_BATCH = glue_workbench.EVAL_BATCH
Regime = Literal["mask_then_finetune", "finetune_then_mask"]
# Bump when a code change alters this study's results: old cells then no longer match.
RESULTS_VERSION = 2


@dataclass(frozen=True)
class RandomPruningConfig(glue_workbench.MaskingStudyConfig):
    """Parameters of the study (the shared ones in ``glue_workbench.MaskingStudyConfig``); defaults = the quick profile."""

    finetune_ablations: list[glue_workbench.Ablation] = field(default_factory=lambda: ["uniform", "zero"])  # mask-then-fine-tune semantics: Budhraja et al.'s BERT (uniform), then zero (sensitivity)

    fractions: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75])  # share of ALL heads pruned, in [0, 1]
    finetune_fractions: list[float] | None = field(default_factory=lambda: [0.5, 0.75])  # of those, the ones of the mask-then-fine-tune regime (one fine-tuning each; None: all)
    regimes: list[Regime] = field(default_factory=lambda: list(REGIMES))
    mask_draws: int = 1                         # random masks per fine-tuned model in the evaluation-only regime (draw 0: the mask-then-fine-tune regime's)
    tolerance: float = 0.02                     # analysis only: a drop up to this (score units) counts as "limited" (descriptive table)
    # the verdicts' margins are not a parameter: margins.TASK_SCORE, 0.1 x (full - chance) per task (headprune_utils.analysis.margins)

    def check(self) -> None:
        check_fields(self)
        bad = [r for r in self.regimes if r not in REGIMES]
        if bad or not self.regimes:
            raise ParameterError(f"regimes must be a non-empty list of {REGIMES}, got {self.regimes}")
        if isinstance(self.mask_draws, bool) or not isinstance(self.mask_draws, int) or self.mask_draws < 1:
            raise ParameterError(f"mask_draws must be an integer >= 1 (random masks per model), got {self.mask_draws!r}")
        if not self.tolerance >= 0 or self.tolerance == float("inf"):
            raise ParameterError(f"tolerance must be a finite number >= 0 (the score drop that counts as limited), got "
                                 f"{self.tolerance!r}")
        super().check()
        self.check_fractions("fractions", self.fractions)
        self.check_pruned_heads("fractions", [f for f in self.fractions if f != 0])  # 0: the unpruned model
        self.check_finetune_fractions()


def plan_cells(cfg: RandomPruningConfig) -> list[Cell]:
    """Every cell of the study, ordered so that shared work (the full fine-tuned model) is reused. The
    evaluation-only cells of one fine-tuned model form a group (one worker loads that model once)."""
    tasks = glue_workbench.resolve_tasks(cfg)[0]
    cells = []
    for task in tasks:
        for seed in cfg.seeds:
            for regime in REGIMES:
                if regime not in cfg.regimes or (regime == "mask_then_finetune" and not cfg.finetunes(task)):
                    continue
                for ablation in (cfg.finetune_ablations if regime == "mask_then_finetune" else cfg.ablations):
                    for f in sorted(cfg.fractions):
                        if regime == "mask_then_finetune" and f != 0 and not glue_workbench.fine_tuned_at(cfg, f):
                            continue  # 0: the fine-tuned full model, shared by both regimes, always there
                        axes = {"task": task, "regime": regime, "ablation": ablation, "fraction": float(f),
                                "seed": int(seed), "draw": 0}
                        if regime == "mask_then_finetune" and f != 0:
                            cost = glue_workbench.finetune_cost(cfg, task, 1.0 - f, ablation)
                            cells.append(Cell(axes, cost=Cost(cost)))
                            continue
                        cost = glue_workbench.eval_cost(cfg, task)  # the cached full model, evaluated (masked)
                        draws = range(cfg.mask_draws) if regime == "finetune_then_mask" and f != 0 else range(1)
                        for d in draws:
                            cells.append(Cell({**axes, "draw": d}, group=(task, int(seed), "evaluate"), cost=Cost(cost)))
    return cells


def study_fingerprint(cfg: RandomPruningConfig, device: torch.device) -> str:
    return fingerprint(glue_workbench.result_params(
        cfg, device, RESULTS_VERSION, drop=("fractions", "finetune_fractions", "regimes", "mask_draws", "tolerance")))


def mask_seed(seed: int, draw: int = 0) -> int:
    """The random-mask seed of draw ``draw`` of model ``seed``: ``seed`` itself for draw 0 (the mask shared with the
    mask-then-fine-tune regime and studies 2 and 5), ``1_000_000 * draw + seed`` for the extra draws."""
    return int(seed) if draw == 0 else 1_000_000 * int(draw) + int(seed)


def cell_mask(shape: tuple[int, int], fraction: float, seed: int, draw: int = 0) -> torch.Tensor:
    n_layers, n_heads = shape
    return masks.random_mask(n_layers, n_heads, masks.n_pruned_for_fraction(fraction, n_layers, n_heads),
                             mask_seed(seed, draw))


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


def run_cell(ctx: glue_workbench.GlueContext, cell: dict) -> dict:
    """Compute one cell's result (pure of the store; the caller saves it)."""
    task, regime, fraction, seed, ablation = cell["task"], cell["regime"], cell["fraction"], cell["seed"], cell["ablation"]
    spec, tr, dv, *_ = ctx.task_data(task)
    mask = cell_mask(ctx.shape, fraction, seed, cell.get("draw", 0))
    t0 = time.perf_counter()
    if regime == "mask_then_finetune":
        if fraction == 0:
            model, history, _ = ctx.full_model(task, seed)
            metrics = training.evaluate(model, dv, task, EVAL_BATCH)
        else:
            # shared with the other studies: a (task, seed, mask, semantics) fine-tuned there (e.g. study 2's and
            # 5's random masks at the same budget, which are this study's masks) is read back, not trained again
            metrics, history = ctx.masked_scores(task, seed, mask, f"{task} s{seed} f{fraction:g} {ablation}", ablation)
    else:
        model, full_history, _ = ctx.full_model(task, seed)
        means = ctx.full_means(task, seed) if as_ablation(ablation).needs_means else None
        metrics = training.evaluate(model, dv, task, EVAL_BATCH, gates=mask.to(ctx.device), ablation=ablation, means=means)
        history = []
    metrics = {**metrics, "score": main_score(task, metrics), "chance": glue_workbench.chance_score(task, tr, dv)}
    row = _row(task, spec, history, metrics, mask, time.perf_counter() - t0)
    if regime != "mask_then_finetune":  # the curve of the full model it masks (its convergence, for a task with no
        row["full_model_history"] = glue_workbench.recorded_curve(full_history)  # mask-then-fine-tune cell)
    return row


class RandomPruning(glue_workbench.GlueStudy):
    """Study 1 (see the module docstring)."""

    name = NAME
    notebook = "01_random_pruning.ipynb"
    Config = RandomPruningConfig
    claims = CLAIMS  # declared in random_pruning_claims
    # a stored result: the GLUE metrics in their ranges, ``score`` the value of its ``metric``, the mask agreeing
    # with its counts (checked on every read of a cell)
    metric_ranges = {**Study.metric_ranges, **GLUE_METRIC_RANGES}

    def consistency_problem(self, cell, result):
        return metric_score_problem(result) or mask_count_problem(result)

    def plan(self, cfg: RandomPruningConfig) -> list[Cell]:
        return plan_cells(cfg)

    def fingerprint(self, cfg: RandomPruningConfig, device) -> str:
        return study_fingerprint(cfg, device)

    def provenance(self, ctx, cell) -> dict:
        return glue_workbench.provenance(ctx, cell)

    def context(self, cfg: RandomPruningConfig, device, paths: StudyPaths) -> glue_workbench.GlueContext:
        return glue_workbench.GlueContext(cfg, device, paths.finetuned_cache)

    def run(self, ctx: glue_workbench.GlueContext, cells: list[Cell], inputs):
        for cell in cells:
            yield cell, run_cell(ctx, dict(cell.axes))


STUDY = RandomPruning()


def verdicts(table: pd.DataFrame, cfg: RandomPruningConfig) -> pd.DataFrame:
    """The study's verdict table (``claims.COLUMNS``): its declared claims decided on the cells' ``table``
    (:func:`.random_pruning_analysis.claim_verdicts`)."""
    return claim_verdicts(table, cfg, RandomPruning.claims)
