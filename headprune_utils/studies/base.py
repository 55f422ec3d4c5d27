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
  It never writes results: the driver stores them (:mod:`headprune_utils.run.execution`).

Cross-study reuse (a fine-tuned model needed by several studies) goes through fingerprinted library caches
(``glue_workbench``), never through ``requires``: a study's cells require only cells of the same study.
Studies never import each other; what two studies share lives in a library module named for what it does.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from headprune_utils.analysis.claims import Claim
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import cell_key

Scalar = str | int | float | bool | None


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

    def run_params(self, cfg) -> dict:
        """Recorded in ``run_meta.json`` beside the parameters (default: none; a GLUE study's tasks run and the ones
        unavailable, ``glue_workbench.GlueStudy``)."""
        return {}

    def data_fingerprints(self, cfg) -> dict:
        """``{name: content hash}`` of the data files the run reads (recorded in ``run_meta.json``; the same hashes
        are part of :meth:`fingerprint`). Default: none; the GLUE task splits of a GLUE study
        (``glue_workbench.GlueStudy``)."""
        return {}

    def n_cells(self, cfg) -> int:
        return len(self.plan(cfg))

    def __repr__(self) -> str:
        return f"<study {self.name}>"
