"""Study 2: where to prune — layer-location strategies at the same head budget (Budhraja et al. 2020, claim 3).

Claim under test: for BERT there is no preference between pruning top or bottom layers, but strategies
that AVOID the middle layers, and that avoid CONSECUTIVE layers, do better. Plus the strategies earlier
studies motivate: pruning the layers that probing work calls important (the middle, syntactic layers:
Jawahar et al. 2019, Hewitt and Manning 2019), and pruning by measured importance (Michel et al.'s
gradient importance of the fine-tuned model: least or most important heads first) — the "weak link
between importance and prunability".

Cells: task x regime x ablation x strategy x budget x seed (the sweep of :mod:`headprune_utils.studies.strategy_sweep`).
``ablation`` is the semantics of the masked heads (:mod:`headprune_utils.studies.semantics`): ``ablations`` for the
evaluation-only regime (all three by default, cheap), ``finetune_ablations`` for mask-then-fine-tune (Budhraja et
al.'s ``uniform``, the semantics of their BERT code); the Budhraja claims are decided under ``uniform`` (primary),
Michel et al.'s least-important-first under ``zero``, every other semantics measured re-tests them (sensitivity).
``budget`` is the share of ALL heads pruned; every strategy prunes exactly the same number of heads (``strategies.py`` says
how a budget that does not fill whole layers is spread). Reference cells (strategy ``"none"``, budget 0) hold the
fine-tuned full model (one per regime and semantics: the cached model, evaluated). Regimes as in study 1: ``finetune_then_mask`` (evaluation only: the masks of one fine-tuned
model form a group, evaluated together with shared work, ``mask_sweep``) and ``mask_then_finetune`` (one
fine-tuning per cell, at ``finetune_budgets``; shared with studies 1 and 5 through the fine-tuning cache).
The claims are paired contrasts (:mod:`headprune_utils.analysis.paired_contrasts`), declared once, as data, in
:mod:`.layer_strategies_claims` (``claims = CLAIMS``) and decided by the claims model (:mod:`headprune_utils.analysis.claims`;
the unit is the fine-tuned model, task x seed: see the analysis module).

The analysis (pure functions over the cells' table: means, example masks, contrasts, verdicts) is in
:mod:`.layer_strategies_analysis`, re-exported here so the notebook needs one module.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from headprune_utils.studies import glue_workbench
from headprune_utils.studies.config import ParameterError, check_fields
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import fingerprint
from headprune_utils.studies.strategy_sweep import (
    ALL_STRATEGIES, KNOWN_STRATEGIES, REGIMES, Context, Regime, sweep_batch, run_cell, run_cells,
)
from headprune_utils.studies.base import (GLUE_METRIC_RANGES, Cell, Cost, Study, layers_touched_problem,
                                            mask_count_problem,
                                            metric_score_problem)
from headprune_utils.studies.layer_strategies_analysis import ( # the analysis: pure functions over the table, re-exported for the notebook
    CONTRASTS, MICHEL_PRUNABLE, REGIME_NAMES, Contrast, convergence_evidence, contrasts, example_masks,
    identical_masks, measurements, michel_prunable, scale, summarise,
)
from headprune_utils.studies.layer_strategies_analysis import verdicts as claim_verdicts
from headprune_utils.studies.layer_strategies_claims import CLAIMS

__all__ = [
    "NAME", "STUDY", "LayerStrategiesConfig", "LayerStrategies", "plan_cells", "study_fingerprint", "run_cells",
    "run_cell", "ALL_STRATEGIES", "KNOWN_STRATEGIES", "REGIMES", "Regime", "Context",
    # the analysis (layer_strategies_analysis), re-exported so the notebook needs one module
    "MICHEL_PRUNABLE", "michel_prunable", "CONTRASTS", "Contrast", "REGIME_NAMES", "summarise",
    "example_masks", "CLAIMS", "contrasts", "identical_masks", "convergence_evidence", "measurements", "scale", "verdicts",
]

NAME = "layer_strategies"
RESULTS_VERSION = 1


@dataclass(frozen=True)
class LayerStrategiesConfig(glue_workbench.MaskingStudyConfig):
    """Parameters of the study (the shared ones in ``glue_workbench.MaskingStudyConfig``); defaults = the quick profile."""

    finetune_ablations: list[glue_workbench.Ablation] = field(default_factory=lambda: ["uniform"])  # mask-then-fine-tune semantics: Budhraja et al.'s BERT (uniform)

    strategies: list[str] = field(default_factory=lambda: list(ALL_STRATEGIES))  # see strategies.py (also "iterative_importance": Michel et al.'s)
    finetune_strategies: list[str] | None = None  # of those, the ones of the mask-then-fine-tune regime (None: all)
    budgets: list[float] = field(default_factory=lambda: [0.25, 0.5, 0.75])  # share of ALL heads pruned (evaluation-only regime)
    finetune_budgets: list[float] = field(default_factory=lambda: [0.5])  # budgets of the mask-then-fine-tune regime (one fine-tuning per cell)
    iterative_budgets: list[float] = field(default_factory=list)  # more budgets for iterative_importance alone (evaluation only): Michel et al.'s curve, e.g. at every 10%
    regimes: list[Regime] = field(default_factory=lambda: list(REGIMES))
    importance_size: int | None = 1000          # training examples for the gradient importance of the importance strategies (None: all)
    shared_evaluation: bool = True              # evaluate a model's masks together, reusing shared work (False: one full forward per mask)

    def check(self) -> None:
        check_fields(self)
        bad = [r for r in self.regimes if r not in REGIMES]
        if bad or not self.regimes:
            raise ParameterError(f"regimes must be a non-empty list of {REGIMES}, got {self.regimes}")
        unknown = [s for s in self.strategies if s not in KNOWN_STRATEGIES]
        if unknown or not self.strategies:
            raise ParameterError(f"strategies must be a non-empty list of {KNOWN_STRATEGIES}, got {self.strategies}")
        if len(set(self.strategies)) != len(self.strategies):
            raise ParameterError("strategies must not repeat")
        if self.finetune_strategies is not None:
            extra = [s for s in self.finetune_strategies if s not in self.strategies]
            if extra or not self.finetune_strategies or len(set(self.finetune_strategies)) != len(self.finetune_strategies):
                raise ParameterError(f"finetune_strategies must be distinct names out of strategies {self.strategies} "
                                     f"(or None: all), got {self.finetune_strategies}")
        if self.importance_size is not None and self.importance_size < 1:
            raise ParameterError(f"importance_size must be a positive integer or None, got {self.importance_size}")
        super().check()
        for name in ("budgets", "finetune_budgets"):
            values = getattr(self, name)
            if "mask_then_finetune" not in self.regimes and name == "finetune_budgets":
                continue
            self.check_fractions(name, values)
            if any(b == 0 for b in values):
                raise ParameterError(f"{name}: 0 is the reference (the full model), always included; list budgets > 0")
            self.check_pruned_heads(name, values)
        if self.iterative_budgets:
            if "iterative_importance" not in self.strategies or "finetune_then_mask" not in self.regimes:
                raise ParameterError("iterative_budgets needs the strategy 'iterative_importance' and the regime "
                                     f"'finetune_then_mask'; got strategies {self.strategies}, regimes {self.regimes}")
            self.check_fractions("iterative_budgets", self.iterative_budgets)
            if any(b == 0 for b in self.iterative_budgets):
                raise ParameterError("iterative_budgets: 0 is the reference (the full model), always included; "
                                     "list budgets > 0")
            self.check_pruned_heads("iterative_budgets", self.iterative_budgets)


def plan_cells(cfg: LayerStrategiesConfig) -> list[Cell]:
    """Every cell, (task, seed) by (task, seed), each regime under each of its semantics (``cfg.ablations`` for
    the evaluation-only regime, ``cfg.finetune_ablations`` for mask-then-fine-tune). The evaluation-only cells of
    one fine-tuned model form a group (evaluated together, the model loaded once), and so do the reference cells
    (the cached full model, evaluated); each fine-tuning cell is a batch of its own."""
    tasks = glue_workbench.resolve_tasks(cfg)[0]
    cells = []
    for task in tasks:
        finetune_cost: dict[tuple, float] = {}  # (budget, semantics) -> FLOPs of fine-tuning with that share pruned
        eval_cost = glue_workbench.eval_cost(cfg, task)
        for seed in cfg.seeds:
            for regime in REGIMES:
                if regime not in cfg.regimes or (regime == "mask_then_finetune" and not cfg.finetunes(task)):
                    continue
                budgets = cfg.budgets if regime == "finetune_then_mask" else cfg.finetune_budgets
                for ablation in (cfg.finetune_ablations if regime == "mask_then_finetune" else cfg.ablations):
                    head = {"task": task, "regime": regime, "ablation": ablation}
                    axes = [{**head, "strategy": "none", "budget": 0.0, "seed": int(seed)}]
                    names = cfg.strategies if regime == "finetune_then_mask" or cfg.finetune_strategies is None \
                        else cfg.finetune_strategies
                    for b in sorted(budgets):
                        for s in names:
                            axes.append({**head, "strategy": s, "budget": float(b), "seed": int(seed)})
                    if regime == "finetune_then_mask":  # Michel et al.'s curve at more budgets than the others
                        axes += [{**head, "strategy": "iterative_importance", "budget": float(b), "seed": int(seed)}
                                 for b in sorted(set(cfg.iterative_budgets) - set(budgets))]
                    for a in axes:
                        if regime == "mask_then_finetune" and a["strategy"] != "none":
                            k = (a["budget"], ablation)
                            if k not in finetune_cost:
                                finetune_cost[k] = glue_workbench.finetune_cost(cfg, task, 1.0 - a["budget"], ablation)
                            cells.append(Cell(a, cost=Cost(finetune_cost[k])))
                        else:  # evaluation only, or the reference: the cached full model, evaluated
                            cells.append(Cell(a, group=(task, int(seed), "evaluate"), cost=Cost(eval_cost)))
    return cells


def study_fingerprint(cfg: LayerStrategiesConfig, device: torch.device) -> str:
    drop = ("strategies", "finetune_strategies", "budgets", "finetune_budgets", "iterative_budgets", "regimes",
            "shared_evaluation")
    # importance_size stays: it changes the importance strategies' masks
    return fingerprint(glue_workbench.result_params(cfg, device, RESULTS_VERSION, drop=drop))


class LayerStrategies(glue_workbench.GlueStudy):
    """Study 2 (see the module docstring)."""

    name = NAME
    notebook = "02_layer_strategies.ipynb"
    Config = LayerStrategiesConfig
    claims = CLAIMS  # declared in layer_strategies_claims
    # a stored result: the GLUE metrics in their ranges, ``score`` the value of its ``metric``, the mask agreeing
    # with its counts, the layers it touches and the first of them (checked on every read of a cell)
    metric_ranges = {**Study.metric_ranges, **GLUE_METRIC_RANGES}

    def consistency_problem(self, cell, result):
        return metric_score_problem(result) or mask_count_problem(result) or layers_touched_problem(result)

    def plan(self, cfg: LayerStrategiesConfig) -> list[Cell]:
        return plan_cells(cfg)

    def fingerprint(self, cfg: LayerStrategiesConfig, device) -> str:
        return study_fingerprint(cfg, device)

    def provenance(self, ctx, cell) -> dict:
        return glue_workbench.provenance(ctx, cell)

    def context(self, cfg: LayerStrategiesConfig, device, paths: StudyPaths) -> Context:
        return Context(cfg, device, paths.finetuned_cache)

    def run(self, ctx: Context, cells: list[Cell], inputs):
        # module functions looked up at call time (tests replace them)
        shared = ctx.cfg.shared_evaluation
        yield from sweep_batch(cells, lambda axes: run_cells(ctx, axes, shared=shared), lambda axes: run_cell(ctx, axes))


def verdicts(table, cfg: LayerStrategiesConfig, alpha: float = 0.05):
    """The verdict table of the study's claims (``claims.COLUMNS``) from the cells' table, every rule at ``alpha``:
    see :func:`.layer_strategies_analysis.verdicts`."""
    return claim_verdicts(table, cfg, LayerStrategies.claims, alpha)


STUDY = LayerStrategies()
