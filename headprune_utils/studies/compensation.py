"""Study 3: who compensates for the pruned heads during fine-tuning (Budhraja et al. 2020, claim 4).

Claim under test: the compensation for pruned heads is spread roughly EQUALLY across the kept heads.

Cells: task x seed x ablation x (strategy, budget), plus a reference cell per (task, seed, ablation) — strategy
``"none"``, budget 0: the same fine-tuning without pruning (the fine-tuned full model, shared with studies 1 and 2).
``ablation`` is the semantics of the masked heads (:mod:`headprune_utils.studies.semantics`), one of
``finetune_ablations``: every cell of this study masks before fine-tuning, so ``uniform`` (Budhraja et al.'s BERT
code: the mask is fixed during fine-tuning, the masked heads attend uniformly and their value and output
projections train; the primary semantics) and ``zero`` (the heads removed from the weights; sensitivity) by
default. The reference cell is not shared across semantics: its model is, but its gradient importance (the
derivative with respect to a gate, whose 0 means what the semantics says) is not. Each cell fine-tunes (mask,
then fine-tune) and records, per head (``[n_layers, n_heads]``, NaN for pruned heads):

- ``weight_change``: relative change of the head's query/key/value rows and output-projection columns
  during fine-tuning, ``||theta_after - theta_before|| / ||theta_before||`` (``head_weights``);
- ``importance``: Michel et al.'s gradient importance E|dL/dg_h| of the fine-tuned model on the training
  subset under the cell's semantics (raw; the analysis normalises per layer over the heads kept in both runs
  compared); under ``mean`` the gates' means are those the model was fine-tuned with (the pre-trained model's,
  for a pruned cell) or, for the unpruned reference, the fine-tuned full model's;
- ``attention_change``: Jensen-Shannon divergence (nats) between the head's attention maps before and after
  fine-tuning on the same dev sentences ("before" = the pre-trained model with the same heads pruned).

The claims are declared once, as data, in :mod:`.compensation_claims` (``claims = CLAIMS``). The analysis (pure
functions over the cells' table, in :mod:`.compensation_analysis`, re-exported here so the notebook needs one
module; :func:`verdicts` decides the study's ``claims`` with it) compares each kept head's change in a pruned run with the same head's change in an
unpruned run of ANOTHER seed and the same semantics, against seed-to-seed noise: is the extra change spread
equally over the kept heads (within the Gini's declared margin, :mod:`headprune_utils.analysis.margins`), and is it larger
near the pruned heads? Every table is per semantics, and the claims
are decided under each (:func:`headprune_utils.studies.semantics.verdicts_by_semantics`). Every claim is about models
fine-tuned with their heads masked: a row is testable only when every fine-tuning behind it (the masked models and the
unpruned ones they are compared with) reached the plateau of its held-out score (the convergence gate, read from the
``history`` each cell stores; no validation split, no curve: not testable).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from headprune_utils.model import attention, head_weights, masks, strategies
from headprune_utils.studies import glue_workbench
from headprune_utils.measure import importance
from headprune_utils.train import training
from headprune_utils.studies.config import ParameterError, check_fields
from headprune_utils.model.gates import as_ablation, head_gates
from headprune_utils.tasks.metrics import main_score
from headprune_utils.store.paths import StudyPaths
from headprune_utils.model.pruning import prune_heads
from headprune_utils.store.results import fingerprint
from headprune_utils.studies.base import (GLUE_METRIC_RANGES, NON_NEGATIVE, Cell, Cost, Study,
                                            mask_count_problem, metric_score_problem)
from headprune_utils.studies.compensation_analysis import ( # the analysis: pure functions over the table, re-exported for the notebook
    MEASURE_NAMES, MEASUREMENTS, MEASURES, claim_verdicts, convergence_evidence, heatmap_data, layer_confounded,
    locality_measurements, next_seeds, per_head, pooled, scale_text, shared_runs, shift_measurements,
    spread_measurements, spread_tests,
)
from headprune_utils.studies.compensation_claims import (
    BEYOND_LAYER, CLAIMS, CONVERGED, DISPERSION_MARGINS, INDEPENDENT_RUNS, LAYER_MODEL_SHARED, NO_MARGIN,
    OWN_LAYER_MODEL, DispersionMargin,
)

__all__ = [
    "NAME", "STUDY", "Compensation", "CompensationConfig", "plan_cells", "cell_cost", "study_fingerprint",
    "cell_mask", "run_cell", "verdicts",
    # the analysis (compensation_analysis) and the claims (compensation_claims), re-exported so the notebook needs
    # one module
    "MEASURES", "MEASURE_NAMES", "MEASUREMENTS", "next_seeds", "shared_runs", "per_head", "spread_tests", "pooled",
    "spread_measurements", "shift_measurements", "locality_measurements", "layer_confounded", "convergence_evidence",
    "claim_verdicts", "heatmap_data", "scale_text", "CLAIMS", "CONVERGED", "BEYOND_LAYER", "DispersionMargin",
    "DISPERSION_MARGINS", "NO_MARGIN", "INDEPENDENT_RUNS", "OWN_LAYER_MODEL", "LAYER_MODEL_SHARED",
]

NAME = "compensation"
# Bump when a code change alters this study's results: old cells then no longer match.
RESULTS_VERSION = 2  # 2: cells keyed by their ablation semantics; mean ablation of the reference cell


@dataclass(frozen=True)
class CompensationConfig(glue_workbench.MaskingStudyConfig):
    """Parameters of the study (the shared ones in ``glue_workbench.MaskingStudyConfig``); defaults = the quick profile.

    Every cell masks the heads, then fine-tunes: the semantics are ``finetune_ablations`` (``uniform``, Budhraja
    et al.'s BERT code, primary; ``zero``, sensitivity). ``ablations`` (the semantics of evaluation-only cells,
    fine-tune then mask) does not apply to this study: it has no such cells, and the field is ignored (as is the
    shared config's single ``ablation``)."""

    finetune_ablations: list[glue_workbench.Ablation] = field(default_factory=lambda: ["uniform", "zero"])  # semantics of every cell: Budhraja et al.'s BERT (uniform), then zero (sensitivity)

    strategies: list[str] = field(default_factory=lambda: ["random", "middle"])  # how heads are chosen (strategies.py)
    budgets: list[float] = field(default_factory=lambda: [0.5])  # share of ALL heads pruned, each in (0, 1)
    probe_size: int = 64                        # dev sentences on which attention maps are compared
    importance_size: int | None = 1000          # training examples for gradient importance (None: the whole training subset)
    n_resamples: int = 2000                     # analysis: resamples of each bootstrap and permutation test
    baseline_seeds: list[int] | None = None     # unpruned fine-tunings that serve only as the comparison run ("other"), one per seed, disjoint from seeds: seed i's runs are compared with baseline_seeds[i]'s, so no two units share a run (None: each seed with the next, a ring whose neighbouring units share a run: the spread and locality claims are then not testable)

    def check(self) -> None:
        check_fields(self)
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
        if self.baseline_seeds is not None:
            b = list(self.baseline_seeds)
            problem = ("not all non-negative integers" if any(isinstance(x, bool) or not isinstance(x, int) or x < 0
                                                              for x in b)
                       else f"{len(b)} of them for {len(self.seeds)} seeds" if len(b) != len(self.seeds)
                       else "a seed repeats" if len(set(b)) != len(b)
                       else f"{sorted(set(b) & set(self.seeds))} also in seeds" if set(b) & set(self.seeds) else "")
            if problem:
                raise ParameterError(f"baseline_seeds must give each seed of seeds {list(self.seeds)} a comparison run "
                                     f"of its own (one distinct non-negative integer per seed, none of them in seeds); "
                                     f"got {b}: {problem}")
        self.check_fractions("budgets", self.budgets)
        if any(not 0 < b < 1 for b in self.budgets):
            raise ParameterError(f"budgets must be in (0, 1): some heads pruned, some kept; got {self.budgets}")
        self.check_pruned_heads("budgets", self.budgets, some_kept=True)


def plan_cells(cfg: CompensationConfig) -> list[Cell]:
    """Every cell of the study: per task, seed and semantics (``finetune_ablations``), the unpruned reference, then
    each budget x strategy.

    No cell reads another's result (the analysis pairs them afterwards; the unpruned model comes from the
    fine-tuning cache shared with studies 1 and 2) and no two share a loaded model (each fine-tunes its own),
    so cells neither require one another nor form groups. The semantics loop is inside the seed's so that the
    reference cells of one (task, seed) follow one another (the full model stays in memory).
    """
    tasks = glue_workbench.resolve_tasks(cfg)[0]
    cells = []
    for task in (t for t in tasks if cfg.finetunes(t)):  # every cell fine-tunes: finetune_tasks limits them
        for seed in cfg.seeds:
            for ablation in cfg.finetune_ablations:
                cells.append(Cell({"task": task, "ablation": ablation, "strategy": "none", "budget": 0.0,
                                   "seed": int(seed)}, cost=Cost(cell_cost(cfg, task, 0.0, ablation))))
                for b in sorted(cfg.budgets):
                    for s in cfg.strategies:
                        cells.append(Cell({"task": task, "ablation": ablation, "strategy": s, "budget": float(b),
                                           "seed": int(seed)}, cost=Cost(cell_cost(cfg, task, float(b), ablation))))
        for seed in cfg.baseline_seeds or ():  # the comparison runs: unpruned only
            for ablation in cfg.finetune_ablations:
                cells.append(Cell({"task": task, "ablation": ablation, "strategy": "none", "budget": 0.0,
                                   "seed": int(seed)}, cost=Cost(cell_cost(cfg, task, 0.0, ablation))))
    return cells


def cell_cost(cfg: CompensationConfig, task: str, budget: float, ablation: str) -> float:
    """Estimated FLOPs of one cell: one fine-tuning with ``1 - budget`` of the heads kept under ``ablation``
    (only ``zero`` removes them from the computation), scored on the dev subset (the unpruned cell's fine-tuning
    is shared through the cache, counted as if trained here), the gradient importance (forward and backward: 3
    forwards over ``importance_size`` training examples) and the attention maps before and after fine-tuning (2
    forwards over ``probe_size`` dev examples), with the same heads kept."""
    kept = 1.0 - budget
    share = kept if as_ablation(ablation).equals_removal else 1.0  # gated heads are computed, then replaced
    n_imp = cfg.importance_size if cfg.train_size is None else (
        cfg.train_size if cfg.importance_size is None else min(cfg.train_size, cfg.importance_size))
    n_probe = cfg.probe_size if cfg.dev_size is None else min(cfg.dev_size, cfg.probe_size)
    return (glue_workbench.finetune_cost(cfg, task, kept, ablation)
            + 3 * glue_workbench.eval_cost(cfg, task, share, split="train", size=n_imp)
            + 2 * glue_workbench.eval_cost(cfg, task, share, size=n_probe))


def study_fingerprint(cfg: CompensationConfig, device: torch.device) -> str:
    return fingerprint(glue_workbench.result_params(cfg, device, RESULTS_VERSION,
                                                    drop=("strategies", "budgets", "n_resamples", "baseline_seeds")))


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


def run_cell(ctx: glue_workbench.GlueContext, cell: dict) -> dict:
    """Fine-tune (or take the cached unpruned model) under the cell's semantics and measure every kept head's change."""
    cfg = ctx.cfg
    task, seed, ablation = cell["task"], cell["seed"], cell["ablation"]
    spec, tr, dv, *_ = ctx.task_data(task)
    mask = cell_mask(ctx.shape, cell)
    t0 = time.perf_counter()
    if cell["strategy"] == "none":
        after, history, _ = ctx.full_model(task, seed)  # no head masked: the same model under every semantics
        gates = None
        # what a gate of 0 means under "mean" (the importance is a derivative at the gates): the model's own means
        means = ctx.full_means(task, seed) if as_ablation(ablation).needs_means else None
    else:
        after, history, gates, means = ctx.finetune_masked(
            task, seed, mask, f"{task} s{seed} {cell['strategy']} {cell['budget']:g} {ablation}", ablation)
    metrics = training.evaluate(after, dv, task, glue_workbench.EVAL_BATCH, gates=gates, ablation=ablation, means=means)
    # "before": the pre-trained model with the same heads removed (its classifier is the seed's fresh one)
    before = ctx.fresh_model(task, seed).eval()
    before_means = None
    if gates is None and bool((mask < 1).any()):
        prune_heads(before, mask)
    elif gates is not None and as_ablation(ablation).needs_means:
        before_means = ctx.means(before, tr)
    change = head_weights.relative_change(before, after)
    imp = importance.head_importance(after, glue_workbench.batches(tr, ctx.device, cfg.importance_size),
                                     mask=mask.to(ctx.device), ablation=ablation, means=means, normalize_layers=False)
    probe = glue_workbench.batches(dv, ctx.device, cfg.probe_size)
    js = _attention_change(before, after, probe, gates, ablation, (before_means, means) if gates is not None and means is not None else None)
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


def verdicts(tests, table, cfg: CompensationConfig):
    """The study's verdict table (``claims.COLUMNS``): its declared claims decided on the per-run table ``tests``
    (:func:`.compensation_analysis.spread_tests`), gated on the held-out curves of the fine-tunings behind each row
    stored in the cells' ``table`` (:func:`.compensation_analysis.claim_verdicts`)."""
    return claim_verdicts(tests, table, cfg, Compensation.claims)


class Compensation(glue_workbench.GlueStudy):
    """Study 3 (see the module docstring)."""

    name = NAME
    notebook = "03_compensation.ipynb"
    Config = CompensationConfig
    claims = CLAIMS  # declared in compensation_claims
    # a stored result: the GLUE metrics in their ranges, ``score`` the value of its ``metric``, the mask agreeing
    # with its heads pruned, and per head the relative weight change and the attention maps' Jensen-Shannon
    # divergence (nats) not negative (checked on every read of a cell)
    metric_ranges = {**Study.metric_ranges, **GLUE_METRIC_RANGES, "attention_change": NON_NEGATIVE,
                     "weight_change": NON_NEGATIVE, "weight_change_query": NON_NEGATIVE,
                     "weight_change_key": NON_NEGATIVE, "weight_change_value": NON_NEGATIVE,
                     "weight_change_output": NON_NEGATIVE}

    def consistency_problem(self, cell, result):
        return metric_score_problem(result) or mask_count_problem(result)

    def plan(self, cfg: CompensationConfig) -> list[Cell]:
        return plan_cells(cfg)

    def fingerprint(self, cfg: CompensationConfig, device) -> str:
        return study_fingerprint(cfg, device)

    def provenance(self, ctx, cell) -> dict:
        return glue_workbench.provenance(ctx, cell)

    def context(self, cfg: CompensationConfig, device, paths: StudyPaths) -> glue_workbench.GlueContext:
        return glue_workbench.GlueContext(cfg, device, paths.finetuned_cache)

    def run(self, ctx: glue_workbench.GlueContext, cells: list[Cell], inputs):
        for cell in cells:
            yield cell, run_cell(ctx, dict(cell.axes))


STUDY = Compensation()
