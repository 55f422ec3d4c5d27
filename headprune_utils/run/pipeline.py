"""One run of a profile's studies, end to end, after the checks passed.

First the run lock of every study of the plan (another run of one of them refuses this one, naming it), and a
swap of outputs an earlier run left half done is completed. Then, in order: with ``--fresh`` the studies' earlier
results and with ``--fresh-caches`` the profile's shared model caches are moved aside (kept as a backup, never
deleted); with ``--executor ray`` or ``--cells-only`` every planned cell not yet stored is computed first through
the executor (this process is the driver and the only writer of results; a study with nothing to compute is left
untouched); then the notebooks run (:mod:`headprune_utils.run.schedule`), which find their cells stored or compute
them; finally the verdict counts, the cross-study summary and the HTML report (a run never writes the README).
``--from-cells --where`` is an interim render: the kernels get the selection (``execution.SELECT_ENV``) and analyse
only its stored cells, computing nothing; each study's tables carry it (``tables/interim.json``, and run_meta.json
records it), and the findings, the summary and the report say so on every page.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from headprune_utils.model import models
from headprune_utils.run import execution, profiles
from headprune_utils.run.execution import (SELECT_ENV, CellsFailed, ExecutorUnavailable, MixedModelsError, connect_ray,
                                           make_executor, parameter_origins, run_study)
from headprune_utils.run.notebooks import (JOURNAL, recover_swap, relative, resource_cause, run_lock,
                                           study_lock)
from headprune_utils.run.profiles import planned, selector, study_config
from headprune_utils.run.report import build_report
from headprune_utils.run.schedule import longest_first, run_notebooks
from headprune_utils.run.summary import interim_note, read_verdicts, write_summary
from headprune_utils.store.hashes import read_manifest
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import MACHINE_FIELD, StaleResultsError, StudyBusyError


def run_profile(plan: dict[str, dict], profile: str, *, jobs: int = 1, fresh: bool = False,
                fresh_caches: bool = False, executor: str = "local", address: str | None = None,
                cells_only: bool = False, where: dict[str, set[str]] | None = None, progress: bool = True,
                from_cells: bool = False) -> int:
    """Run the studies of ``plan`` (validated and checked); returns the exit status: 0 when all succeeded, 1 when
    a cell or a notebook failed, or a write failed for want of room, 2 when another run holds one of the studies
    (refused before any work, naming it) or the executor cannot start (Ray: no cluster to join at ``address``;
    before any cell is computed). ``from_cells`` with ``where``: an interim render of that selection (nothing
    computed; the caller checked its cells are stored)."""
    total = time.perf_counter()
    with contextlib.ExitStack() as held:
        # every study's run lock first: another run of one of them stops this one before any work; moving the
        # profile's shared model caches aside changes what every study of the profile reads: all of them
        locked = list(profiles.STUDIES) if fresh_caches else list(plan)
        try:
            for name in locked:
                held.enter_context(run_lock(name, profile))
        except StudyBusyError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        try:
            interim = where if from_cells and where and not cells_only else None
            with interim_kernels(interim):
                return _run_held(plan, profile, total, jobs=jobs, fresh=fresh, fresh_caches=fresh_caches,
                                 executor=executor, address=address, cells_only=cells_only, where=where,
                                 progress=progress)
        except StudyBusyError as exc:  # the study lock, held by a process outside the runner (a notebook's kernel)
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except ExecutorUnavailable as exc:  # Ray cannot start or join the cluster: before any cell was computed
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except MixedModelsError as exc:  # cells of one model from two kinds of machine or two trainings: refused
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            cause = resource_cause(exc)
            if cause is None:
                raise
            print(f"error: the run stopped: {cause}", file=sys.stderr)
            return 1


@contextlib.contextmanager
def interim_kernels(where: dict[str, set[str]] | None):
    """``execution.SELECT_ENV`` set to ``where`` (JSON) in this process's environment, which the notebooks' kernels
    inherit, while the run lasts, and unset when ``where`` is None (a value left in the user's shell never turns a
    run into an interim render); the earlier value restored after."""
    before = os.environ.get(SELECT_ENV)
    if where:
        os.environ[SELECT_ENV] = json.dumps({k: sorted(v) for k, v in sorted(where.items())})
    else:
        os.environ.pop(SELECT_ENV, None)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SELECT_ENV, None)
        else:
            os.environ[SELECT_ENV] = before


def _run_held(plan: dict[str, dict], profile: str, total: float, *, jobs: int, fresh: bool, fresh_caches: bool,
              executor: str, address: str | None, cells_only: bool, where: dict[str, set[str]] | None,
              progress: bool) -> int:
    if jobs > 1:
        plan = longest_first(plan, profile)  # before --fresh moves the last run's records aside
    for name in plan:  # a swap an earlier run left half done is completed (or undone) first
        paths = StudyPaths(name, profile, staged=False)
        if (paths.dir / JOURNAL).exists():
            with study_lock(paths, "completing an interrupted swap"):
                done = recover_swap(paths)
            if done:
                print(done, flush=True)
    if fresh and where:
        if executor == "ray":  # Ray started (or the cluster joined) before a cell moves: a failure moves nothing
            connect_ray(address)
        # this machine's kind, as the run's own check judges it (execution.refuse_other_machine), where this machine
        # computes the cells (Ray's workers record their own)
        here = None if executor == "ray" else (lambda device: execution.machine_kind(device))
        try:
            move_selections_aside(plan, profile, where, here=here)
        except SelectionNotMovable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    elif fresh:
        for name in plan:
            backup = move_aside(StudyPaths(name, profile, staged=False))
            if backup:
                print(f"moved earlier results to {relative(backup)}")
    if fresh_caches:
        move_caches_aside(profile)
    if executor != "local" or cells_only:
        ok, computed = compute_cells(plan, profile, executor, address, where)
        if not ok:
            return 1
        if cells_only:
            if not computed:
                print(f"nothing to compute: every selected cell of the {len(plan)} studies is stored; no file was "
                      "written")
            else:
                print(f"cells of {len(plan)} studies done in {time.perf_counter() - total:.0f} s")
            return 0
    if not run_notebooks(plan, profile, jobs, progress):
        return 1
    print(f"all {len(plan)} studies done in {time.perf_counter() - total:.0f} s")
    print(verdict_summary(plan, profile))
    return 0 if write_overviews(profile, list(plan)) else 1


def backup_path(path: Path) -> Path:
    """``<name>.bak-<time>`` beside ``path``, with ``-2``, ``-3``... when a run of the same second made that one
    (a retry right after a quick failure): a backup never lands in another's folder."""
    base = path.with_name(f"{path.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}")
    backup, n = base, 1
    while backup.exists() or backup.is_symlink():
        n += 1
        backup = base.with_name(f"{base.name}-{n}")
    return backup


def move_aside(paths: StudyPaths) -> Path | None:
    """Rename the study's folder to ``<profile>.bak-<time>`` (``--fresh``) holding the study lock (never while a
    kernel computes into it: StudyBusyError naming it); returns the backup, or None when there was nothing to
    move."""
    if not paths.dir.exists():
        return None
    backup = backup_path(paths.dir)
    with study_lock(paths, "--fresh: moving the folder aside"):
        paths.dir.rename(backup)
    return backup


class SelectionNotMovable(RuntimeError):
    """``--fresh --where`` would leave the study inconsistent (a stored cell outside the selection requires one it
    would move) or cannot move the cells faithfully (the cells' manifest is damaged): refused before anything
    moves."""


def selection_to_move(name: str, overrides: dict, profile: str, where: dict[str, set[str]],
                      here: Callable[[Any], str] | None = None):
    """``(planned study, [axes of its stored cells to move])`` for ``--fresh --where``: the stored cells that have
    every selected axis and match it. A cell without one of the axes is not the user's choice (the pre-trained
    encoder's cell, a translation model's cell under ``--where seed=1``) and stays, and so do the cells the
    selected ones require. :class:`SelectionNotMovable` when a stored cell outside the selection requires one of
    them (it would stay, computed from a cell computed again: select it too), when ``here(device)`` (this machine's
    kind for the study's device; None: not checked, Ray's workers record their own) is not the kind another stored
    cell of a touched model's slice records (the recomputed cells would mix two kinds in it:
    ``execution.refuse_other_machine`` would stop the run after the move), or the cells' manifest is damaged."""
    p = planned(name, overrides, profile)
    select = selector(where)
    chosen = [c for c in p.cells if set(where) <= set(dict(c.axes)) and select(dict(c.axes))
              and p.store.path(dict(c.axes)).exists()]
    keys = {c.key for c in chosen}
    told = profiles.where_text(where)
    for c in p.cells:
        if c.key not in keys and keys.intersection(c.requires) and p.store.path(dict(c.axes)).exists():
            needed = next(k for k in c.requires if k in keys)
            its = profiles.model_slice(dict(c.axes), p.study.model_axes)
            its = f"its model's slice: --where {its}" if its else "--where " + " ".join(
                f"{k}={profiles.axis_text(v)}" for k, v in dict(c.axes).items())
            raise SelectionNotMovable(
                f"{name}: --fresh --where {told} would move {needed}, which the stored cell {c.key} requires and "
                f"which is outside the selection: it would stay, computed from a cell computed again. Select it too "
                f"({its}); nothing was moved")
    model_axes = tuple(p.study.model_axes)
    if here is not None and model_axes and chosen:
        kind = here(models.resolve_device(p.cfg.device))
        touched = {profiles.model_slice(dict(c.axes), model_axes) for c in chosen}
        for c in p.cells:
            axes = dict(c.axes)
            if (c.key in keys or profiles.model_slice(axes, model_axes) not in touched
                    or not p.store.path(axes).exists()):
                continue
            other = p.store.get(axes)["result"].get(MACHINE_FIELD)
            if other and other != kind:
                its = profiles.model_slice(axes, model_axes)
                raise SelectionNotMovable(
                    f"{name}: --fresh --where {told} would compute again part of the slice {its}, whose other stored "
                    f"cells (e.g. {c.key}) were computed on another kind ({other}); this machine is {kind}, and one "
                    f"slice's cells come from one kind. Select the whole slice (--where {its}) or run on a machine of "
                    "that kind; nothing was moved")
    _, damaged = read_manifest(p.store.dir)
    if chosen and damaged:
        raise SelectionNotMovable(f"{name}: the manifest of {relative(p.store.dir)} is damaged ({damaged[0]}): the "
                                  "moved cells could not keep their lines. Check the folder and record it anew "
                                  "(python -m headprune_utils.store.manifest); nothing was moved")
    return p, [dict(c.axes) for c in chosen]


def move_selections_aside(plan: dict[str, dict], profile: str, where: dict[str, set[str]],
                          here: Callable[[Any], str] | None = None) -> None:
    """``--fresh --where``: for every study of ``plan``, the stored cells :func:`selection_to_move` picks moved into
    ``<profile>.bak-<time>/cells/`` beside the study's folder, with the manifest lines they had, holding the study
    lock; the rest of the study stays. So one slice is computed again (on a machine of another kind, say:
    ``execution.refuse_other_machine``) without moving the other slices away. Every study is checked before any
    cell moves (:class:`SelectionNotMovable`; ``here``: this machine's kind, see :func:`selection_to_move`)."""
    told = profiles.where_text(where)
    moves = [(name, *selection_to_move(name, overrides, profile, where, here)) for name, overrides in plan.items()]
    for name, p, cells in moves:
        if not cells:
            print(f"{name}: no stored cell matches --where {told}; nothing moved")
            continue
        paths = StudyPaths(name, profile, staged=False)
        with study_lock(paths, "--fresh --where: moving the selected cells aside"):
            backup = backup_path(paths.dir)
            moved = p.store.move_out(cells, backup / "cells")
        print(f"{name}: moved the {len(moved)} stored cell(s) that --where {told} selects to {relative(backup)}/cells "
              "(the study's other cells stay)")


def move_caches_aside(profile: str) -> None:
    """Rename the profile's shared model caches (fine-tuned GLUE models, translation models) to
    ``<name>.bak-<time>`` (``--fresh-caches``): every model is trained again."""
    p = StudyPaths("any", profile, staged=False)
    for cache in (p.finetuned_cache, p.nmt_cache):
        if cache.exists():
            backup = cache.with_name(f"{cache.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}")
            cache.rename(backup)
            print(f"moved the model cache {relative(cache)} to {relative(backup)}")


def compute_cells(plan: dict[str, dict], profile: str, executor: str, address: str | None,
                  where: dict[str, set[str]] | None = None) -> tuple[bool, int]:
    """Every planned cell of the studies in ``plan`` (only those matching ``where``: :func:`selector`) through
    ``executor`` (one instance for all); returns whether all succeeded and how many studies had cells to compute.
    A failed study is reported and the next one still runs (its cells are independent). A study whose selected
    cells are all stored is left alone: nothing is computed and nothing written (not even its run record)."""
    ex = None
    ok, computed = True, 0
    for name, overrides in plan.items():
        select = selector(where or {})
        todo = cells_to_compute(name, overrides, profile, select)
        if todo == 0:
            print(f"cells of {name} ({profile}): every selected cell is stored; nothing computed, nothing written",
                  flush=True)
            continue
        computed += 1
        if executor == "ray" and ex is None:  # Ray started (or the cluster joined) before anything is written
            connect_ray(address)
        ex = ex or make_executor(executor, address)
        study, cfg = study_config(name, {**overrides, "progress": False}, profile)
        t0 = time.perf_counter()
        print(f"cells of {name} ({profile}) on {executor}", flush=True)
        try:  # a selection always (every cell without --where): the runner's own run is never an interim render
            table = run_study(study, cfg, profile, executor=ex, progress=True, select=select or (lambda axes: True),
                              sources=parameter_origins(study, cfg, profile, overrides, runner=("progress",)))
            print(f"cells of {name}: {len(table)} stored in {time.perf_counter() - t0:.0f} s", flush=True)
        except CellsFailed as exc:
            ok = False
            print(f"error: {exc}", file=sys.stderr, flush=True)
    return ok, computed


def cells_to_compute(name: str, overrides: dict, profile: str, select=None) -> int | None:
    """How many of the study's planned cells (those ``select`` accepts, and the cells they require) are not stored
    yet, reading only the cell files; None when that cannot be told without the run (stored cells of other
    parameters, which the run itself refuses naming them)."""
    try:
        p = planned(name, overrides, profile)
        p.store.corrupt = []  # a corrupt cell counts as not stored (the run moves it aside and recomputes it)
        by_key = {c.key: c for c in p.cells}
        stack = [c.key for c in p.cells if select is None or select(dict(c.axes))]
        keep: set[str] = set()
        while stack:
            k = stack.pop()
            if k not in keep:
                keep.add(k)
                stack.extend(by_key[k].requires)
        return sum(not p.store.has(dict(by_key[k].axes)) for k in keep)
    except StaleResultsError:
        return None


def verdict_summary(plan: dict[str, dict], profile: str) -> str:
    """Where each study's executed notebook and verdicts are, and how many verdicts of each word it holds."""
    lines = ["verdicts (primary analysis; tables/verdicts.csv of each study):"]
    for name in plan:
        paths = StudyPaths(name, profile, staged=False)
        f = paths.tables / "verdicts.csv"
        if not f.exists():
            lines.append(f"  {name}: no verdict table")
            continue
        v = pd.read_csv(f)
        if "analysis" in v.columns:
            v = v[v["analysis"] == "primary"]
        counts = ", ".join(f"{n} {w}" for w, n in v["verdict"].value_counts().items())
        interim = interim_note(name, profile)
        lines.append(f"  {name}: {counts or 'none'} -> {relative(paths.dir)}/"
                     + (f" ({interim.split(';')[0]})" if interim else ""))
    return "\n".join(lines)


def write_overviews(profile: str, studies: list[str] = ()) -> bool:
    """The views over every study of ``profile``: the cross-study summary and the HTML report (the README is
    never written by a run). First, the verdict tables this run wrote (``studies``) are read as the views read
    them (:func:`summary.read_verdicts`): one that cannot be a finding (a decided row without its effect, an
    unknown word, ...) is an error of this run. Otherwise a summary or report that cannot be built from the results
    (another study's outputs damaged, a study outside the registry) is a warning: they only show the results, which
    are written. A view that cannot be written (a read-only or full disk) is one line naming it and the cause;
    returns False on any error (the run's exit status says so)."""
    ok = True
    for name in studies:
        try:
            read_verdicts(name, profile)
        except ValueError as exc:
            print(f"error: {name}: the verdict table this run wrote cannot be read as findings: {exc}", file=sys.stderr)
            ok = False
    try:
        print(f"cross-study summary: {relative(write_summary(profile))}")
    except ValueError as exc:  # a view of the results, which are written (e.g. a study added outside the registry)
        print(f"warning: the cross-study summary was not written (an earlier one, if any, is as it was): {exc}",
              file=sys.stderr)
    except OSError as exc:
        print(f"error: the cross-study summary was not written: {resource_cause(exc) or exc}", file=sys.stderr)
        ok = False
    try:
        build_report([profile])  # prints where the report is
    except ValueError as exc:  # the report is a view of the results, which are written: warn, do not fail the run
        print(f"warning: the report was not built: {exc}", file=sys.stderr)
    except OSError as exc:
        print(f"error: the report was not written (the studies' outputs are): {resource_cause(exc) or exc}",
              file=sys.stderr)
        ok = False
    return ok
