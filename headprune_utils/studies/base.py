"""The study protocol: what every study declares, so that the runner, the executors (local, Ray), ``--plan`` and
the tests treat all studies alike.

A study is one object (a subclass of :class:`Study`, one instance in the registry ``studies.STUDIES``):

- ``name`` (= its outputs folder, notebook stem and module name), ``notebook``, ``Config`` (a frozen dataclass
  with ``check()``; the notebook's ``parameters`` cell equals its defaults) and ``claims`` (data: the
  ``claims.Claim`` s declared in ``studies/<study>_claims.py``, its ``CLAIMS``);
- ``model_axes``: the cell axes that select one trained model (the slices of a long run, and the cells that must
  share one training of their model);
- ``plan(cfg) -> [Cell]``: every result cell, pure and cheap (no model, no data loaded beyond checking which
  tasks exist). Each :class:`Cell` has its key (``axes``: exactly the dict stored results are keyed by), the
  keys of the cells of THIS study it requires, a group key for work best done together in one process, and an
  estimated cost;
- ``fingerprint(cfg, device)``: the hash of everything a cell's result depends on besides its axes;
- ``context(cfg, device, paths)``: what a worker builds once (data, models, caches), lazily;
- ``run(ctx, cells, inputs)``: computes ``cells`` (one batch: a group, or one cell), yielding
  ``(cell, result)`` as each finishes. ``inputs`` maps the key of every required cell to its stored result.
  It never writes results: the driver stores them (:mod:`headprune_utils.run.execution`);
- ``metric_ranges`` and ``check_record(cell, result)``: what a stored result of the study must satisfy (its
  scores within their metric's range, its masks agreeing with its counts), checked on every read of a cell (the
  store is given ``check=study.check_record``), so a hand-edited or damaged cell is named instead of entering
  the tables.

Cross-study reuse (a fine-tuned model needed by several studies) goes through fingerprinted library caches
(``glue_workbench``), never through ``requires``: a study's cells require only cells of the same study.
Studies never import each other; what two studies share lives in a library module named for what it does.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from headprune_utils.analysis.claims import Claim
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import cell_key, range_problem

Scalar = str | int | float | bool | None

# Ranges of the numbers results hold, ``(low, high)``, for ``Study.metric_ranges``.
UNIT = (0.0, 1.0)                    # accuracy, F1, a probability
CORRELATION = (-1.0, 1.0)            # Matthews, Pearson, Spearman, and a score that may be any of them
NON_NEGATIVE = (0.0, math.inf)       # a loss, a duration
PERCENT = (0.0, 100.0)               # BLEU, chrF
# The GLUE metrics (``tasks.metrics``) and the fields every GLUE study's cell carries: ``score`` is the task's
# main metric, ``chance`` that metric of the majority class.
GLUE_METRIC_RANGES = {"accuracy": UNIT, "f1": UNIT, "matthews": CORRELATION, "pearson": CORRELATION,
                      "spearman": CORRELATION, "score": CORRELATION, "chance": CORRELATION}


def mask_problem(mask, name: str = "mask") -> str | None:
    """Why ``mask`` is not a head mask as results store it (layers of ``0`` pruned / ``1`` kept, joined by
    ``/``, every layer as long), or None."""
    if not isinstance(mask, str) or not mask or set(mask) - set("01/"):
        return f"{name} = {str(mask)[:40]!r} is not a head mask ('0'/'1' per head, layers joined by '/')"
    if len({len(row) for row in mask.split("/")}) != 1:
        return f"{name} = {mask[:40]!r}...: its layers have different numbers of heads"
    return None


def mask_count_problem(result: Mapping, mask: str = "mask", pruned: str | None = "n_heads_pruned",
                       total: str | None = "n_heads_total", kept: str | None = "n_kept") -> str | None:
    """Why the head mask ``result[mask]`` contradicts the counts stored beside it (heads pruned = its ``0`` s,
    heads in all = its length, heads kept = its ``1`` s; each only when the result has that field), or None
    (also when it has no mask)."""
    if mask not in result:
        return None
    m = result[mask]
    if (why := mask_problem(m, mask)):
        return why
    counts = {pruned: m.count("0"), total: m.count("0") + m.count("1"), kept: m.count("1")}
    for field_name, n in counts.items():
        if field_name is not None and field_name in result and result[field_name] != n:
            return (f"{mask} keeps {m.count('1')} of {m.count('0') + m.count('1')} heads, but {field_name} = "
                    f"{result[field_name]!r} (it should be {n}): the mask and its counts disagree")
    return None


def layers_touched_problem(result: Mapping, mask: str = "mask") -> str | None:
    """Why ``n_layers_touched`` / ``first_pruned_layer`` contradict the mask (the layers with a pruned head, the
    first of them; None when none is pruned), or None."""
    if not isinstance(result.get(mask), str):
        return None
    touched = [i for i, row in enumerate(result[mask].split("/")) if "0" in row]
    expected = {"n_layers_touched": len(touched), "first_pruned_layer": touched[0] if touched else None}
    for name, n in expected.items():
        if name in result and result[name] != n:
            return (f"{mask} prunes heads in layers {touched}, but {name} = {result[name]!r} (it should be {n!r}): "
                    "the mask and its counts disagree")
    return None


def metric_score_problem(result: Mapping) -> str | None:
    """Why ``result["score"]`` is not the value of the metric ``result["metric"]`` names (when both exist)."""
    if "metric" not in result or "score" not in result:
        return None
    name = result["metric"]
    if name not in result:
        return f"metric = {name!r} but the result has no {name!r}"
    if result[name] != result["score"]:
        return f"score = {result['score']!r} but {name} = {result[name]!r}: the score is its metric's value"
    return None


@dataclass(frozen=True)
class Cost:
    """Estimated work of one cell, for ``--plan`` and the executors' resource requests.

    ``flops``: floating-point operations (forward and backward passes of the model, from its shape and the
    data's token counts; see :mod:`headprune_utils.measure.costs`). ``gpu``: whether the cell gains from a GPU (the Ray
    executor asks for one when the cluster has GPUs).
    """

    flops: float = 0.0
    gpu: bool = True


@dataclass(frozen=True, eq=False)
class Cell:
    """One result cell: ``axes`` is its key (stored results are keyed by it, so it must never change shape)."""

    axes: Mapping[str, Scalar]
    requires: tuple[str, ...] = ()      # keys of cells of THIS study whose results ``run`` reads (``inputs``)
    group: Hashable | None = None       # cells with the same group are best computed together in one batch
    cost: Cost = field(default_factory=Cost)

    @property
    def key(self) -> str:
        return cell_key(dict(self.axes))

    def __getitem__(self, name: str) -> Scalar:
        return self.axes[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.axes.get(name, default)


class Study(ABC):
    """The protocol every study follows (see the module docstring)."""

    name: ClassVar[str]
    notebook: ClassVar[str]
    Config: ClassVar[type]
    claims: ClassVar[tuple[Claim, ...]] = ()
    # The cell axes that select one trained model, coarsest first: a GLUE study's ("task", "seed"), the translation
    # study's ("model_seed",). A long run is computed slice by slice, one trained model each (``--plan-slices``
    # lists them, a cell belonging to the slice of the leading model axes it has), and the cells of one model must
    # all come from one training of it (``execution.check_one_model``). () (the default): the study's cells are
    # not split by model; the whole study is one slice.
    model_axes: ClassVar[tuple[str, ...]] = ()
    # The range of every number a cell's result holds that has one, ``{field: (low, high)}`` (``UNIT``,
    # ``CORRELATION``, ...): a stored value outside it is an error naming the cell file. A field's list of numbers
    # and the same field inside a dict of the result are checked too. Every study declares its own (a subclass
    # extends this one).
    metric_ranges: ClassVar[Mapping[str, tuple[float, float]]] = {"seconds": NON_NEGATIVE}

    @abstractmethod
    def plan(self, cfg) -> list[Cell]:
        """Every cell of a run with ``cfg``, in the order a single process best computes them."""

    @abstractmethod
    def fingerprint(self, cfg, device) -> str:
        """Hash of what results depend on besides the cell axes (parameters, device type, code versions)."""

    @abstractmethod
    def context(self, cfg, device, paths: StudyPaths) -> Any:
        """What computing cells needs, built once per process (lazily: loading happens on first use)."""

    @abstractmethod
    def run(self, ctx: Any, cells: list[Cell], inputs: Mapping[str, dict]) -> Iterator[tuple[Cell, dict]]:
        """Compute ``cells`` (one batch), yielding ``(cell, result)`` as each finishes; never writes results."""

    def provenance(self, ctx, cell: Cell) -> dict:
        """Fields added to every result of ``cell`` by the executor, saying what it was computed from (default:
        none). The GLUE studies add ``full_model_sha`` (``glue_workbench.provenance``), which
        ``execution.check_one_model`` keeps from mixing two trainings of one model."""
        return {}

    def scored(self, table):
        """The stored cells' table as the analysis reads it, each task in the metric its claims are decided on, after
        ``tasks.metrics.verdict_scores`` (which rewrites a ``score`` column): default unchanged. Study 6 keeps a score
        per mask (``specialized_heads_l0_analysis.in_verdict_metric``)."""
        return table

    def run_params(self, cfg) -> dict:
        """Recorded in ``run_meta.json`` beside the parameters (default: none; a GLUE study's tasks run and the ones
        unavailable, ``glue_workbench.GlueStudy``)."""
        return {}

    def data_fingerprints(self, cfg) -> dict:
        """``{name: content hash}`` of the data files the run reads (recorded in ``run_meta.json``; the same hashes
        are part of :meth:`fingerprint`). Default: none; the GLUE task splits of a GLUE study
        (``glue_workbench.GlueStudy``)."""
        return {}

    def check_record(self, cell: Mapping[str, Scalar], result: Mapping[str, Any]) -> str | None:
        """Why a stored result of ``cell`` cannot be a result of this study, or None: a number outside its
        ``metric_ranges``, then :meth:`consistency_problem`. Given to the store (``ResultStore(check=...)``), which
        runs it on every read, after its own checks (file name, plain finite values)."""
        return range_problem(dict(result), dict(self.metric_ranges)) or self.consistency_problem(cell, result)

    def consistency_problem(self, cell: Mapping[str, Scalar], result: Mapping[str, Any]) -> str | None:
        """Why the fields of a result contradict each other (e.g. a mask and its counts), or None (the default:
        nothing to compare)."""
        return None

    def n_cells(self, cfg) -> int:
        return len(self.plan(cfg))

    def __repr__(self) -> str:
        return f"<study {self.name}>"
