"""A profile's studies, validated and planned, and how much of each plan is already stored; runs nothing.

``params/<profile>.yaml`` holds one section of parameters per study. :func:`validate_profile` checks every
selected study's section at once (so one run reports every mistake); :func:`planned` is the one way the runner
turns a study's section into its config, its planned cells and the read-only store of the cells of those
parameters. On top of it: ``--plan``'s listing of cells, costs and measured time (:func:`print_plan`),
``--from-cells``' check for cells not stored (:func:`missing_cells`), and ``--plan-slices``' listing of a long
run's slices, one trained model each (:func:`slice_counts`), with the ``--where`` that selects each
(:func:`parse_where`, :func:`selector`).
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from itertools import takewhile
from typing import Any, NamedTuple

from headprune_utils.measure import costs
from headprune_utils.model import models
from headprune_utils.store.hashes import read_manifest
from headprune_utils.store.paths import StudyPaths, profile_name_problem, shown_path
from headprune_utils.store.results import (MACHINE_FIELD, CorruptCellError, ResultStore, held_command,
                                           held_relation)
from headprune_utils.studies import STUDIES
from headprune_utils.studies.base import Cell, Study
from headprune_utils.studies.config import ParameterError, load_profile, profile_lines, profile_path, validate


# What the cells of each study sustained, in GFLOP/s of one torch thread on the 2-core CPU: the planned FLOPs of the
# committed standard cells (outputs/<study>/standard/cells) over the seconds they recorded, the training of a
# model inside the cell that first needed it included (tests/data/test_plan_calibration.py recomputes them). The
# studies differ (evaluation-heavy ones run more FLOP/s than fine-tuning ones), so one speed per study.
# Their error on the committed profiles, the estimate against the cells' recorded seconds: standard 0% (the
# calibration itself); quick (held out) -32% in total (1.13 against 1.66 single-thread hours; per study from -58% to
# +15%); the quick profile's recorded seconds include waits for a model another study side by side was training, and
# those of studies 4, 5 and 7 come from their recomputation on a 2-core AMD EPYC shared with two other jobs
# (2026-12-06: study 4's cells again that day, for its random probe halves; study 6's on the same machine,
# 2026-12-05; the others' from an Intel Xeon run): the -58% is study 4's, whose seconds that sharing inflated.
CALIBRATED_GFLOPS: dict[str, float] = {
    "random_pruning": 83.9, "layer_strategies": 163.9, "compensation": 90.2, "redundancy_patterns": 143.3,
    "zero_shot_pruning": 147.6, "specialized_heads_l0": 219.3, "nmt_heads": 72.1,
}
CALIBRATED_GFLOPS_ANY = 128.8  # every committed standard cell together: the speed of a study not in the table


def calibrated_gflops(study: str) -> float:
    """The sustained GFLOP/s one thread of the 2-core CPU gave ``study``'s cells (:data:`CALIBRATED_GFLOPS`; a study
    without committed cells, e.g. a user's own: every committed cell's)."""
    return CALIBRATED_GFLOPS.get(study, CALIBRATED_GFLOPS_ANY)


class TimeLeft:
    """The time a run's cells still need: their planned costs (FLOPs) times a rate in seconds per FLOP, the rate
    calibrated by the cells finished in this run.

    ``costs``: ``{key: planned FLOPs}`` of the cells to compute. ``prior``: seconds per FLOP before any cell is
    measured (the study's calibrated speed, :func:`calibrated_gflops`), or None (no estimate before the first cell).
    ``prior_weight``: how many seconds of measurement the prior counts as: the rate is (measured seconds +
    ``prior_weight``) / (their cells' FLOPs + ``prior_weight`` / ``prior``), the prior at the start and this run's
    own rate once its cells outweigh it, so one quick (or slow) first cell does not swing the estimate. Where the
    plan gives no cost (some cell's is 0), every cell counts as one unit and the prior is not used.
    :meth:`done` takes the wall seconds since the previous cell finished (side by side, cells' times overlap; the
    gaps add up to the time the run took)."""

    def __init__(self, costs: Mapping[str, float], prior: float | None, prior_weight: float = 120.0):
        for key, c in costs.items():
            if not (isinstance(c, (int, float)) and math.isfinite(c) and c >= 0):
                raise ValueError(f"TimeLeft: cell {key}'s planned cost must be a finite number >= 0, got {c!r}")
        if prior is not None and not (math.isfinite(prior) and prior > 0):
            raise ValueError(f"TimeLeft: prior must be a positive number of seconds per FLOP, got {prior!r}")
        if not (math.isfinite(prior_weight) and prior_weight >= 0):
            raise ValueError(f"TimeLeft: prior_weight must be a finite number >= 0, got {prior_weight!r}")
        self.by_cost = bool(costs) and all(c > 0 for c in costs.values())
        self.units = {k: (float(c) if self.by_cost else 1.0) for k, c in costs.items()}
        self.prior = prior if self.by_cost else None
        self.prior_weight = prior_weight
        self.left = dict(self.units)
        self.measured_seconds = self.measured_units = 0.0

    def done(self, key: str, seconds: float) -> None:
        """Cell ``key`` finished ``seconds`` after the previous one (or the start)."""
        if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"TimeLeft.done: {key}'s seconds must be a finite number >= 0, got {seconds!r}")
        units = self.left.pop(key, None)
        if units is not None:
            self.measured_seconds += seconds
            self.measured_units += units

    def rate(self) -> float | None:
        """Seconds per unit (FLOP) now, or None when there is neither a measurement nor a prior."""
        if self.prior is not None and self.prior_weight > 0:
            return (self.measured_seconds + self.prior_weight) / (self.measured_units + self.prior_weight / self.prior)
        if self.measured_units > 0:
            return self.measured_seconds / self.measured_units
        return self.prior

    def seconds_left(self, running_for: float = 0.0) -> float | None:
        """Seconds the cells not yet done need, or None (no estimate yet). ``running_for``: seconds since the last
        cell finished, spent on the next; they shorten the estimate by at most one cell's share."""
        rate = self.rate()
        if rate is None:
            return None
        left = rate * sum(self.left.values())
        if not self.left:
            return 0.0
        floor = rate * (sum(self.left.values()) - max(self.left.values()))
        return max(left - max(running_for, 0.0), floor)

    def overrun(self, running_for: float) -> float:
        """Seconds by which the cell running for ``running_for`` seconds has outlasted the estimate of the largest
        cell left (0 while it has not): :meth:`seconds_left` then stops counting down (only the cells after it are
        left), and the progress says the cell runs past its estimate rather than "under a minute left" (a
        fine-tuning to its plateau can take longer than its planned epochs)."""
        rate = self.rate()
        if rate is None or not self.left:
            return 0.0
        return max(0.0, running_for - rate * max(self.left.values()))


def duration_text(seconds: float) -> str:
    """``"about 12 min"``, ``"about 1 h 05 min"``, ``"under a minute"``."""
    if seconds < 60:
        return "under a minute"
    minutes = int(round(seconds / 60))
    return f"about {minutes} min" if minutes < 60 else f"about {minutes // 60} h {minutes % 60:02d} min"


def unknown_profile(profile: str, notebook: bool = False) -> str | None:
    """Why ``profile`` names no profile (there is no ``params/<profile>.yaml``), naming the profiles there are and
    how to make one; None when it is one, and for a name that is not a plain profile name (the profile's loading
    says why). ``notebook``: for a notebook's ``profile`` parameter, which says where its outputs go (its
    parameters are the notebook's own)."""
    if not isinstance(profile, str) or profile_name_problem(profile):
        return None
    path = profile_path(profile)
    if path.exists():
        return None
    known = sorted(p.stem for p in path.parent.glob("*.yaml"))
    how = (f"to make one, copy a profile and edit its sections (cp params/{'quick' if 'quick' in known else known[0]}"
           f".yaml params/{profile}.yaml)" if known else f"to make one, write params/{profile}.yaml")
    if notebook:
        how += (", or run the notebook with a profile and your own parameters (-p profile quick -p NAME VALUE): "
                "parameters other than the profile's go to outputs/<study>/custom-<hash>/, never into a profile's "
                "folder; nothing was computed")
    return (f"unknown profile {profile!r}: there is no params/{profile}.yaml (the profiles: "
            f"{', '.join(known) or 'none'}); {how}")


def validate_profile(profile: str, only: list[str] | None = None) -> dict[str, dict]:
    """``{study: overrides}`` for the selected studies, all validated (raises ParameterError)."""
    sections = load_profile(profile)
    unknown = sorted(set(sections) - set(STUDIES))
    if unknown:
        raise ParameterError(f"params/{profile}.yaml: unknown stud(y/ies) {unknown}; known: {sorted(STUDIES)}")
    selected = list(dict.fromkeys(only)) if only else list(STUDIES)  # a study named twice runs once
    for name in selected:
        if name not in STUDIES:
            raise ParameterError(f"--only {name!r}: unknown study; known: {sorted(STUDIES)}")
    lines = profile_lines(profile)
    out, errors = {}, []
    absent = [n for n in selected if n not in sections]
    if absent:  # a study the file does not mention ran at the notebook defaults (the quick profile's), unasked
        errors.append(f"params/{profile}.yaml has no section for {', '.join(absent)}: add '{absent[0]}: {{}}' to run "
                      "it with its defaults (the quick profile's), or choose the studies to run with --only")
    for name in selected:
        overrides = sections.get(name, {})
        try:  # every study is checked, so one run reports every mistake
            validate(STUDIES[name].Config, overrides, where=f"params/{profile}.yaml [{name}]",
                     lines={k: ln for (s, k), ln in lines.items() if s == name})
        except ParameterError as exc:
            errors.append(str(exc))
        out[name] = overrides
    if errors:
        raise ParameterError("\nerror: ".join(errors))
    return out


def study_config(name: str, overrides: dict, profile: str) -> tuple[Study, Any]:
    """The study ``name`` and its config from ``overrides``, its section of the profile; a bad value is named
    with the profile file and the study."""
    study = STUDIES[name]
    return study, validate(study.Config, overrides, where=f"params/{profile}.yaml [{name}]")


class Planned(NamedTuple):
    study: Study
    cfg: Any
    cells: list[Cell]
    store: ResultStore  # read only: the stored cells of these parameters (a corrupt one raises, nothing moves)


def planned(name: str, overrides: dict, profile: str) -> Planned:
    """The study, its config, its planned cells and the store of its cells of these parameters. Planned the way
    ``--plan`` plans (:func:`models.planning`): hub models' shapes from a table, task data not required."""
    with models.planning():
        study, cfg = study_config(name, overrides, profile)
        cells = study.plan(cfg)
        fingerprint = study.fingerprint(cfg, models.resolve_device(cfg.device))
    return Planned(study, cfg, cells, ResultStore(StudyPaths(name, profile, staged=False).cells, fingerprint,
                                                  quarantine=False, check=getattr(study, "check_record", None)))


def print_plan(plan: dict[str, dict], profile: str, gpu_tflops: float, cpu_gflops: float | None = None,
               cells: bool = True) -> None:
    """Every selected study's cells (key, group, requirements, estimated cost) and totals; runs nothing. The totals
    in hours: GPU-hours at ``gpu_tflops``; CPU-hours at ``cpu_gflops`` when given; and "calibrated": single-thread
    hours at each study's speed measured on its committed cells (:data:`CALIBRATED_GFLOPS`). Where cells of the
    current parameters are stored, also what they took (their recorded seconds) and the projected total: the FLOP
    estimate of every planned cell scaled by the study's measured seconds per estimated FLOP."""
    rows = []
    for name, overrides in plan.items():
        p = planned(name, overrides, profile)
        flops = sum(c.cost.flops for c in p.cells)
        groups = {c.group for c in p.cells if c.group is not None}
        n_req = sum(1 for c in p.cells if c.requires)
        n_done, done_seconds, done_flops = stored_seconds(p)
        projected = flops * done_seconds / done_flops / 3600 if done_flops > 0 else None
        rows.append((name, len(p.cells), len(groups), n_req, flops, n_done, done_seconds / 3600, projected,
                     flops / (calibrated_gflops(name) * 1e9) / 3600))
        print(f"== {name} ({profile}): {len(p.cells)} cells, {len(groups)} groups, {n_req} with requirements, "
              f"{costs.fmt_flops(flops)}")
        if cells:
            for c in p.cells:
                extra = f"  group={c.group}" if c.group is not None else ""
                extra += f"  requires={','.join(c.requires)}" if c.requires else ""
                print(f"  {c.key}  {costs.fmt_flops(c.cost.flops)}{extra}")
    total = sum(r[4] for r in rows)
    measured = any(r[5] for r in rows)
    head = f"\n{'study':<22}{'cells':>7}{'groups':>8}{'req.':>6}{'estimated':>14}{'GPU-hours':>11}"
    head += (f"{'CPU-hours':>11}" if cpu_gflops else "") + f"{'calibrated':>12}"
    print(head + (f"{'stored':>8}{'took (h)':>10}{'projected':>11}" if measured else ""))
    proj_total = sum(r[7] if r[7] is not None else r[8] for r in rows)
    for r in rows + [("total", sum(r[1] for r in rows), sum(r[2] for r in rows), sum(r[3] for r in rows), total,
                      sum(r[5] for r in rows), sum(r[6] for r in rows), proj_total, sum(r[8] for r in rows))]:
        name, n, g, q, f, n_done, took, proj, calibrated = r
        line = f"{name:<22}{n:>7}{g:>8}{q:>6}{costs.fmt_flops(f):>14}{f / (gpu_tflops * 1e12) / 3600:>11.2f}"
        line += (f"{f / (cpu_gflops * 1e9) / 3600:>11.2f}" if cpu_gflops else "") + f"{calibrated:>12.2f}"
        if measured:
            line += f"{n_done:>8}{took:>10.2f}" + (f"{proj:>11.2f}" if proj is not None else f"{'-':>11}")
        print(line)
    cpu = (f", CPU-hours at {cpu_gflops:g} GFLOP/s (--cpu-gflops)" if cpu_gflops else "")
    print(f"GPU-hours at a sustained {gpu_tflops:g} TFLOP/s (--gpu-tflops){cpu}. FLOPs estimated from the model's shape "
          f"and the data's token counts (headprune_utils/measure/costs.py). calibrated: single-thread hours at each "
          f"study's speed measured on its committed standard cells (run/profiles.py CALIBRATED_GFLOPS; a study without "
          f"any: {CALIBRATED_GFLOPS_ANY:g} GFLOP/s); divide by the cores used (--jobs studies side by side, one "
          f"thread each) for the wall time. Their error on the committed quick profile: -32% in total, per study "
          f"-58% to +15%.")
    if measured:
        print("stored / took: the cells of these parameters already stored and the seconds they recorded (one "
              "thread each; shared models trained once are not in them); projected: every planned cell's estimate "
              "scaled by its study's measured seconds per estimated FLOP (the total takes the calibrated estimate "
              "where a study has no stored cell), in single-thread hours.")


def stored_seconds(p: Planned) -> tuple[int, float, float]:
    """``(cells, seconds, planned FLOPs)`` of the stored cells of ``p`` that recorded their seconds."""
    n_done, done_seconds, done_flops = 0, 0.0, 0.0
    for c in p.cells:
        try:
            rec = p.store.get(dict(c.axes))["result"] if p.store.has(dict(c.axes)) else None
        except Exception:  # noqa: BLE001 - a plan never fails over a stored cell (stale, corrupt)
            rec = None
        if rec is not None and isinstance(rec.get("seconds"), (int, float)) and math.isfinite(rec["seconds"]):
            n_done += 1
            done_seconds += float(rec["seconds"])
            done_flops += c.cost.flops
    return n_done, done_seconds, done_flops


def missing_cells(plan: dict[str, dict], profile: str,
                  where: dict[str, set[str]] | None = None) -> dict[str, tuple[int, int, str]]:
    """``{study: (missing, planned, an example key)}`` for the studies of ``plan`` whose planned cells are not all
    stored (of the current parameters); complete studies are left out. With ``where`` (an interim render), the
    cells it selects and what they require, and ``planned`` counts those. Reads only the cell files.
    ``CorruptCellError`` (naming one) for a stored cell the render would read that is corrupt, or that cannot be
    verified (no line in its folder's manifest, a damaged line, no manifest): a render certifies what it reads, so
    such cells are recorded first (``python -m headprune_utils.store.manifest``, after checking them)."""
    gaps, unverifiable = {}, []
    for name, overrides in plan.items():
        p = planned(name, overrides, profile)
        cells = selected_cells(p.cells, selector(where)) if where else p.cells
        missing = [c for c in cells if not p.store.has(dict(c.axes))]
        if missing:
            gaps[name] = (len(missing), len(cells), missing[0].key)
        unlisted = set(p.store.unlisted)
        unverified = [c.key for c in cells if p.store.path(dict(c.axes)).name in unlisted]
        if unverified:
            _, damaged = read_manifest(p.store.dir)
            what = (f"its manifest is damaged ({damaged[0]}): check the folder and record it anew (move "
                    f"{p.store.manifest_file.name} away first)" if damaged else "after checking them, record them")
            unverifiable.append(f"{name}: {len(unverified)} of the cells the render reads cannot be verified (no line "
                                f"in {shown_path(p.store.manifest_file)}, or no manifest), e.g. {unverified[0]}; "
                                f"{what}: python -m headprune_utils.store.manifest {shown_path(p.store.dir)}")
    if unverifiable:  # a render certifies what it reads
        raise CorruptCellError("\n".join(unverifiable))
    return gaps


def selected_cells(cells: list[Cell], select) -> list[Cell]:
    """The cells ``select(axes)`` accepts (e.g. :func:`selector`'s) and, transitively, what they require, in plan
    order."""
    by_key = {c.key: c for c in cells}
    keep, stack = set(), [c.key for c in cells if select(dict(c.axes))]
    while stack:
        k = stack.pop()
        if k not in keep:
            keep.add(k)
            stack.extend(by_key[k].requires)
    return [c for c in cells if c.key in keep]


def model_slice(axes: Mapping[str, Any], model_axes: tuple[str, ...]) -> str:
    """The ``--where`` arguments of the slice (one trained model) a cell with ``axes`` belongs to: the study's
    ``model_axes`` the cell has, from the first (``"task=SST-2 seed=0"``; ``"task=pretrained"`` for a cell of the
    pre-trained encoder, which has no seed); ``""`` when it has none (the whole study is one slice)."""
    return " ".join(f"{k}={axes[k]}" for k in takewhile(lambda k: k in axes, model_axes))


def slice_counts(plan: dict[str, dict], profile: str) -> list[tuple[str, str, int, int]]:
    """``[(study, where, stored, planned)]``: every study's cells grouped by the trained model they belong to (the
    study's ``model_axes``: task and seed for the GLUE studies, ``model_seed`` for the translation study; the
    whole study when it declares none), with the ``--where`` arguments that select that slice. Reads only the
    cell files."""
    out = []
    for name, overrides in plan.items():
        p = planned(name, overrides, profile)
        counts: dict[str, list[int]] = {}
        for c in p.cells:
            axes = dict(c.axes)
            n = counts.setdefault(model_slice(axes, p.study.model_axes), [0, 0])
            n[0] += int(p.store.has(axes))
            n[1] += 1
        out += [(name, where, done, total) for where, (done, total) in counts.items()]
    return out


def begun_on(plan: dict[str, dict], profile: str) -> dict[tuple[str, str], list[str]]:
    """``{(study, where): machine kinds}`` of the slices begun but not complete: the kinds their stored cells
    record (``results.MACHINE_FIELD``, sorted; empty when none records one: cells stored before the field
    existed). Where a slice may be resumed: on a machine of that kind (``execution.refuse_other_machine``). Reads
    only the cell files of those slices."""
    out = {}
    for name, overrides in plan.items():
        p = planned(name, overrides, profile)
        by_slice: dict[str, list[dict]] = {}
        for c in p.cells:
            by_slice.setdefault(model_slice(dict(c.axes), p.study.model_axes), []).append(dict(c.axes))
        for where, cells in by_slice.items():
            stored = [a for a in cells if p.store.has(a)]
            if stored and len(stored) < len(cells):
                kinds = {p.store.get(a)["result"].get(MACHINE_FIELD) for a in stored}
                out[(name, where)] = sorted(k for k in kinds if k)
    return out


def print_slices(plan: dict[str, dict], profile: str, here: Callable[[Any], str] | None = None) -> None:
    """The incomplete slices of every study (:func:`slice_counts`), one line each with the command's ``--only``
    and ``--where`` arguments, and the complete ones counted. A slice begun shows the machine kind its stored cells
    record (:func:`begun_on`) and, when it is not this machine's kind for the study (``here(device)``, the device
    the study's parameters name, as its runs judge it: a profile pinned to ``cpu`` on a GPU machine is judged by
    the CPU), that it is to be resumed on a machine of that kind."""
    rows = slice_counts(plan, profile)
    begun = begun_on(plan, profile)
    for name, overrides in plan.items():
        kind_here = None
        if here is not None:
            with models.planning():
                _, cfg = study_config(name, overrides, profile)
                kind_here = here(models.resolve_device(cfg.device))
        mine = [r for r in rows if r[0] == name]
        done = [r for r in mine if r[2] == r[3]]
        print(f"== {name} ({profile}): {len(done)} of {len(mine)} slices complete, "
              f"{sum(r[2] for r in mine)} of {sum(r[3] for r in mine)} cells stored")
        for _, where, stored, total in mine:
            if stored < total:
                arg = f" --where {where}" if where else ""
                note = ""
                kinds = begun.get((name, where))
                if kinds == []:
                    note = "   begun on a machine its cells do not record"
                elif kinds:
                    note = f"   begun on {'; '.join(kinds)}"
                    if kind_here is not None and kinds != [kind_here]:
                        note += f"; this machine is {kind_here}"
                        if STUDIES[name].model_axes:  # the runner refuses another kind in a model's slice
                            note += (": resume on the kind that began it, or compute it again here (--cells-only "
                                     "--fresh with this --where)")
                            relations = {held_relation(k, kind_here) for k in kinds}
                            if "hold" in relations:
                                note += f"; or resume it here held to AVX2 ({held_command()} before the command)"
                            elif "unhold" in relations:
                                note += "; or unset the AVX2 hold here (it began unheld)"
                print(f"  {stored:>5}/{total:<5} --only {name}{arg}{note}")


def parse_where(items: list[str] | None) -> dict[str, set[str]]:
    """``["task=SST-2", "seed=0", "seed=1"]`` -> ``{"task": {"SST-2"}, "seed": {"0", "1"}}`` (``--where``)."""
    out: dict[str, set[str]] = {}
    for item in items or []:
        axis, sep, value = item.partition("=")
        if not sep or not axis or not value:
            raise ValueError(f"--where takes AXIS=VALUE (e.g. task=SST-2 seed=0), got {item!r}")
        out.setdefault(axis, set()).add(value)
    return out


def where_problems(plan: dict[str, dict], profile: str, where: dict[str, set[str]]) -> list[str]:
    """What is wrong with ``--where`` for the studies of ``plan`` (empty: nothing), found by planning them: an axis
    none of a study's planned cells has (it would filter nothing there: a typo, or a study that has no such axis),
    and a study whose planned cells none match (it would store nothing and exit 0). Each problem names the study,
    the filter and the values the axis takes."""
    if not where:
        return []
    out = []
    for name, overrides in plan.items():
        cells = planned(name, overrides, profile).cells
        values: dict[str, set[str]] = {}
        for c in cells:
            for k, v in dict(c.axes).items():
                values.setdefault(k, set()).add(axis_text(v))
        unknown = sorted(set(where) - set(values))
        if unknown:
            out.append(f"--where {', '.join(unknown)}: no planned cell of {name} ({profile}) has the axis "
                       f"{', '.join(repr(a) for a in unknown)}; its axes: {', '.join(sorted(values))}")
            continue
        select = selector(where)
        if not any(select(dict(c.axes)) for c in cells):
            told = where_text(where)
            takes = "; ".join(f"{k} takes {', '.join(sorted(values[k]))}" for k in sorted(where))
            out.append(f"--where {told}: no planned cell of {name} ({profile}) matches ({takes})")
    return out


def where_text(where: dict[str, set[str]]) -> str:
    """A parsed ``--where`` as the user writes it, sorted: ``{"seed": {"1", "0"}, "task": {"SST-2"}}`` -> ``"seed=0
    seed=1 task=SST-2"``."""
    return " ".join(f"{k}={v}" for k in sorted(where) for v in sorted(where[k]))


def selector(where: dict[str, set[str]]):
    """``select(axes)`` for ``run_study``: a cell matches when every ``where`` axis it has holds one of the given
    values, numbers compared as numbers (``fraction=0.50`` and ``fraction=0.5`` select 0.5, ``fraction=0.0`` the
    unpruned cells, ``seed=1.0`` seed 1); axes a cell does not have do not filter it."""
    if not where:
        return None
    wanted = {k: ({_number_text(v) for v in vals} - {None}, set(vals)) for k, vals in where.items()}

    def select(axes) -> bool:
        for k, (values, texts) in wanted.items():
            if k not in axes:
                continue
            v = axes[k]
            number = isinstance(v, numbers.Real) and not isinstance(v, bool)
            if (_number_text(v) not in values) if number else (axis_text(v) not in texts):
                return False
        return True
    return select


def _number_text(value) -> str | None:
    """A number (or text that reads as one) to 15 significant digits, so that "0.50", "0.5" and 0.5 agree and 1000001
    stays apart from 1000000; None when ``value`` is not a finite number. Only numeric axes are compared this way:
    a text axis (a task, a strategy) is compared as written."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return f"{x:.15g}" if math.isfinite(x) else None


def axis_text(value) -> str:
    """An axis value as ``--where`` writes it (floats as ``%g``: ``fraction=0.5``)."""
    return f"{value:g}" if isinstance(value, float) else str(value)
