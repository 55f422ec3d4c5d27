"""Study 5: zero-shot pruning from redundancy clusters (Bian et al. 2021).

Heads are chosen with NO task data: the pre-trained model's redundancy matrix (distance ``metric`` on a probe
of random token sequences, or of generic text) is clustered with ``linkage`` into as many clusters as heads are
kept, and each cluster's medoid is kept (``clustering.zero_shot_mask``). The mask is the same for every task and
seed. Baselines at the same budgets: ``random`` (the seed's random heads) and ``least_important`` (Michel et
al.'s gradient importance of the task's fine-tuned model on its training subset: it DOES use task data).

Cells are those of the strategy sweep (:mod:`headprune_utils.studies.strategy_sweep`, as in study 2: task x regime x
ablation x strategy x budget x seed, with the full model as the reference cell), with the strategy ``zero_shot``
added. ``ablation`` is the semantics of the masked heads (:mod:`headprune_utils.studies.semantics`): ``ablations`` for the
evaluation-only regime (all three by default), ``finetune_ablations`` for mask-then-fine-tune (``zero``, Bian et
al.'s, then ``uniform``, Budhraja et al.'s). Bian et al. released no code; in 2021 "pruning" a BERT head meant the
Hugging Face ``prune_heads``/``head_mask``, both of which remove the head's output: their claims are decided under
``zero`` (primary, our reading), the Budhraja reference claim under ``uniform``; the other semantics measured
re-test them (sensitivity). The
regimes are "mask, then fine-tune" (the paper's protocol: the mask is fixed during fine-tuning; one fine-tuning per
cell, shared with studies 1 and 2 through the fine-tuning cache) and, cheaply, "fine-tune, then mask" (the masks of
one fine-tuned model form a group, evaluated together).

The claims are declared as data in :mod:`.zero_shot_pruning_claims` (``CLAIMS``, this study's ``claims``): paired
contrasts per (task, seed) model against the full model, random pruning (each model's own random mask: the rule
for a fixed mask against random masks) and gradient importance; the zero-shot mask being ONE mask (n = 1), every
verdict speaks of this mask on the one pre-trained model. The analysis (pure
functions over the cells' table: means, example masks, contrasts, the measurements and verdicts, mask overlap) is
in :mod:`.zero_shot_pruning_analysis`, re-exported here so the notebook needs one module; :func:`verdicts` decides
this study's declared ``claims`` with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
import torch

from headprune_utils.measure import clustering, costs, redundancy
from headprune_utils.studies import glue_workbench, strategy_sweep
from headprune_utils.model import masks, models
from headprune_utils.tasks import probes
from headprune_utils.studies.config import ParameterError, check_fields
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import fingerprint
from headprune_utils.studies.strategy_sweep import REGIMES, Regime, sweep_batch, run_cell, run_cells
from headprune_utils.studies.base import (GLUE_METRIC_RANGES, Cell, Cost, Study, layers_touched_problem,
                                            mask_count_problem,
                                            metric_score_problem)
from headprune_utils.studies.zero_shot_pruning_analysis import ( # the analysis: pure functions over the table, re-exported for the notebook
    CONTRASTS, METHODS, REGIME_NAMES, claim_verdicts, contrasts, example_masks, mask_overlap, paired, summarise,
    zero_shot_masks,
)
from headprune_utils.studies.zero_shot_pruning_analysis import verdict_masks as claim_masks
from headprune_utils.studies.zero_shot_pruning_claims import CLAIMS

__all__ = [
    "NAME", "STUDY", "ZeroShotPruningConfig", "ZeroShotPruning", "REGIMES", "Regime", "probe_cost", "plan_cells",
    "study_fingerprint", "zero_shot_matrix", "Context", "run_cells", "run_cell",
    # the analysis (zero_shot_pruning_analysis), re-exported so the notebook needs one module
    "METHODS", "CONTRASTS", "REGIME_NAMES", "summarise", "example_masks", "paired", "contrasts",
    "claim_verdicts", "verdicts", "zero_shot_masks", "verdict_masks", "mask_overlap",
    # the claims (zero_shot_pruning_claims)
    "CLAIMS",
]

NAME = "zero_shot_pruning"
RESULTS_VERSION = 1


@dataclass(frozen=True)
class ZeroShotPruningConfig(glue_workbench.MaskingStudyConfig):
    """Parameters of the study (the shared ones in ``glue_workbench.MaskingStudyConfig``); defaults = the quick profile."""

    finetune_ablations: list[glue_workbench.Ablation] = field(default_factory=lambda: ["zero", "uniform"])  # mask-then-fine-tune semantics: Bian et al.'s (zero, our reading), Budhraja et al.'s BERT (uniform)

    fractions: list[float] = field(default_factory=lambda: [0.5, 0.75])  # share of ALL heads pruned
    finetune_fractions: list[float] | None = field(default_factory=lambda: [0.5])  # of those, the ones of the mask-then-fine-tune regime (None: all)
    methods: list[str] = field(default_factory=lambda: list(METHODS))  # zero_shot, random, least_important
    regimes: list[Regime] = field(default_factory=lambda: list(REGIMES))  # mask_then_finetune (the paper's), finetune_then_mask
    probe: Literal["random", "generic"] = "random"  # what the zero-shot matrix is read on: random token sequences, or GLUE text
    probe_size: int = 64                        # sequences in the probe
    probe_max_length: int = 64                  # probe sequences truncated to this many tokens
    probe_seed: int = 0                         # which random sequences / sentences
    metric: str = "js"                          # the distance clustered (redundancy.METRICS)
    linkage: Literal["average", "complete", "single", "weighted"] = "average"
    importance_size: int | None = 1000          # training examples for the gradient importance baseline (None: all)
    shared_evaluation: bool = True              # evaluation-only masks of one model evaluated together (mask_sweep)
    # the verdicts' margins are not a parameter: margins.TASK_SCORE, 0.1 x (full - chance), declared with the claims

    def check(self) -> None:
        check_fields(self)
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods or len(set(self.methods)) != len(self.methods):
            raise ParameterError(f"methods must be distinct names from {METHODS}, got {self.methods}")
        bad = [r for r in self.regimes if r not in REGIMES]
        if bad or not self.regimes:
            raise ParameterError(f"regimes must be a non-empty list of {REGIMES}, got {self.regimes}")
        if self.metric not in redundancy.METRICS:
            raise ParameterError(f"metric must be one of {redundancy.METRICS}, got {self.metric!r}")
        if self.probe not in ("random", "generic"):
            raise ParameterError(f"probe must be 'random' or 'generic', got {self.probe!r}")
        if self.probe_max_length < 4:
            raise ParameterError(f"probe_max_length must be >= 4, got {self.probe_max_length}")
        if self.probe_size < 2:
            raise ParameterError(f"probe_size must be >= 2, got {self.probe_size}")
        if self.importance_size is not None and self.importance_size < 1:
            raise ParameterError(f"importance_size must be a positive integer or None, got {self.importance_size}")
        super().check()
        self.check_fractions("fractions", self.fractions)
        if any(not 0 < f < 1 for f in self.fractions):
            raise ParameterError(f"fractions must be in (0, 1) (0 is the reference, always run), got {self.fractions}")
        self.check_pruned_heads("fractions", self.fractions, some_kept=True)
        self.check_finetune_fractions()


def probe_cost(cfg: ZeroShotPruningConfig) -> float:
    """Estimated FLOPs of the zero-shot matrix: one forward pass of the pre-trained model over the probe (every
    sequence counted at ``probe_max_length`` tokens, an upper bound; the pairwise distances are left out)."""
    shape = costs.Shape.of(cfg.model)
    return costs.forward_flops(shape, cfg.probe_size * cfg.probe_max_length, cfg.probe_max_length)


def plan_cells(cfg: ZeroShotPruningConfig) -> list[Cell]:
    """Every cell, (task, seed) by (task, seed), each regime under each of its semantics (``cfg.ablations`` for
    the evaluation-only regime, ``cfg.finetune_ablations`` for mask-then-fine-tune). The evaluation-only cells of
    one fine-tuned model form a group (evaluated together, the model loaded once), and so do the reference cells
    (the cached full model, evaluated); each fine-tuning cell is a batch of its own. A zero-shot cell also costs
    the probe its mask is read from."""
    tasks = glue_workbench.resolve_tasks(cfg)[0]
    probe = probe_cost(cfg) if "zero_shot" in cfg.methods else 0.0
    cells = []
    for task in tasks:
        finetune_cost: dict[tuple, float] = {}  # (budget, semantics) -> FLOPs of fine-tuning with that share pruned
        eval_cost = glue_workbench.eval_cost(cfg, task)
        for seed in cfg.seeds:
            for regime in REGIMES:
                if regime not in cfg.regimes or (regime == "mask_then_finetune" and not cfg.finetunes(task)):
                    continue
                for ablation in (cfg.finetune_ablations if regime == "mask_then_finetune" else cfg.ablations):
                    head = {"task": task, "regime": regime, "ablation": ablation}
                    axes = [{**head, "strategy": "none", "budget": 0.0, "seed": int(seed)}]
                    for f in sorted(cfg.fractions):
                        if regime == "mask_then_finetune" and not glue_workbench.fine_tuned_at(cfg, f):
                            continue
                        for m in cfg.methods:
                            axes.append({**head, "strategy": m, "budget": float(f), "seed": int(seed)})
                    for a in axes:
                        extra = probe if a["strategy"] == "zero_shot" else 0.0
                        if regime == "mask_then_finetune" and a["strategy"] != "none":
                            k = (a["budget"], ablation)
                            if k not in finetune_cost:
                                finetune_cost[k] = glue_workbench.finetune_cost(cfg, task, 1.0 - a["budget"], ablation)
                            cells.append(Cell(a, cost=Cost(finetune_cost[k] + extra)))
                        else:  # evaluation only, or the reference: the cached full model, evaluated
                            cells.append(Cell(a, group=(task, int(seed), "evaluate"), cost=Cost(eval_cost + extra)))
    return cells


def study_fingerprint(cfg: ZeroShotPruningConfig, device: torch.device) -> str:
    return fingerprint(glue_workbench.result_params(cfg, device, RESULTS_VERSION,
                                            drop=("fractions", "finetune_fractions", "methods", "regimes", "shared_evaluation")))


def zero_shot_matrix(cfg: ZeroShotPruningConfig, model, tokenizer, device) -> np.ndarray:
    """The pre-trained model's ``[N, N]`` redundancy matrix (``cfg.metric``) on the task-free probe."""
    if cfg.probe == "random":
        # lengths of real sentences (GLUE text), so only the tokens are random; fallback: a fixed spread
        try:
            ref = probes.glue_text(tokenizer, ["SST-2", "CoLA", "MRPC", "RTE", "STS-B"], "dev", cfg.probe_size,
                                   cfg.probe_seed, cfg.probe_max_length, cfg.data_dir, allow_hub=cfg.allow_hub)
            lengths = ref.lengths
        except Exception:  # no text anywhere: lengths 8..48, the typical GLUE range
            lengths = np.random.default_rng(cfg.probe_seed).integers(8, 49, cfg.probe_size)
        enc = probes.random_tokens(tokenizer, lengths, cfg.probe_seed)
    else:
        enc = probes.glue_text(tokenizer, ["SST-2", "CoLA", "MRPC", "RTE", "STS-B"], "dev", cfg.probe_size,
                               cfg.probe_seed, cfg.probe_max_length, cfg.data_dir, allow_hub=cfg.allow_hub)
    return redundancy.redundancy_matrices(model, glue_workbench.batches(enc, device), [cfg.metric])[cfg.metric]


class Context(strategy_sweep.Context):
    """The strategy sweep's context plus the zero-shot masks (one matrix per process, computed on first use)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._matrix: np.ndarray | None = None

    def matrix(self) -> np.ndarray:
        if self._matrix is None:
            model = models.load_classifier(self.cfg.model, 2, device=self.device, seed=0)
            self._matrix = zero_shot_matrix(self.cfg, model, self.tokenizer, self.device)
        return self._matrix

    def cell_mask(self, cell: dict) -> torch.Tensor:
        if cell["strategy"] != "zero_shot":
            return super().cell_mask(cell)
        n_layers, n_heads = self.shape
        n_keep = n_layers * n_heads - masks.n_pruned_for_fraction(cell["budget"], n_layers, n_heads)
        return clustering.zero_shot_mask(self.matrix(), n_keep, self.shape, self.cfg.linkage)


class ZeroShotPruning(glue_workbench.GlueStudy):
    """Study 5 (see the module docstring)."""

    name = NAME
    notebook = "05_zero_shot_pruning.ipynb"
    Config = ZeroShotPruningConfig
    claims = CLAIMS  # declared as data in zero_shot_pruning_claims
    # a stored result: the GLUE metrics in their ranges, ``score`` the value of its ``metric``, the mask agreeing
    # with its counts, the layers it touches and the first of them (checked on every read of a cell)
    metric_ranges = {**Study.metric_ranges, **GLUE_METRIC_RANGES}

    def consistency_problem(self, cell, result):
        return metric_score_problem(result) or mask_count_problem(result) or layers_touched_problem(result)

    def plan(self, cfg: ZeroShotPruningConfig) -> list[Cell]:
        return plan_cells(cfg)

    def fingerprint(self, cfg: ZeroShotPruningConfig, device) -> str:
        return study_fingerprint(cfg, device)

    def provenance(self, ctx, cell) -> dict:
        return glue_workbench.provenance(ctx, cell)

    def context(self, cfg: ZeroShotPruningConfig, device, paths: StudyPaths) -> Context:
        return Context(cfg, device, paths.finetuned_cache)

    def run(self, ctx: Context, cells: list[Cell], inputs):
        # module functions looked up at call time (tests replace them)
        shared = ctx.cfg.shared_evaluation
        yield from sweep_batch(cells, lambda axes: run_cells(ctx, axes, shared=shared), lambda axes: run_cell(ctx, axes))


STUDY = ZeroShotPruning()


def verdicts(table: pd.DataFrame, cfg: ZeroShotPruningConfig) -> pd.DataFrame:
    """The study's verdict table (``claims.COLUMNS``): its declared claims decided on the cells' ``table``
    (:func:`.zero_shot_pruning_analysis.claim_verdicts`)."""
    return claim_verdicts(table, cfg, ZeroShotPruning.claims)


def verdict_masks(verdict: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The zero-shot claims' verdicts beside the zero-shot mask each was measured with
    (:func:`.zero_shot_pruning_analysis.verdict_masks` with this study's declared ``claims``)."""
    return claim_masks(verdict, table, ZeroShotPruning.claims)
