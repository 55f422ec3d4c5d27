"""One run of a profile's studies, end to end, after the checks passed.

In order: with ``--fresh`` the studies' earlier results and with ``--fresh-caches`` the profile's shared model
caches are moved aside (kept as a backup, never deleted); with ``--executor ray`` or ``--cells-only`` every
planned cell is computed first through the executor (this process is the driver and the only writer of
results); then the notebooks run (:mod:`headprune_utils.run.schedule`), which find their cells stored or compute
them; finally the verdict counts, the cross-study summary, the README's findings table (quick and standard) and
the HTML report.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

from headprune_utils.run.execution import CellsFailed, make_executor, run_study
from headprune_utils.run.notebooks import relative
from headprune_utils.run.profiles import selector, study_config
from headprune_utils.run.report import build_report
from headprune_utils.run.schedule import longest_first, run_notebooks
from headprune_utils.run.summary import update_readme, write_summary
from headprune_utils.store.paths import StudyPaths


def run_profile(plan: dict[str, dict], profile: str, *, jobs: int = 1, fresh: bool = False,
                fresh_caches: bool = False, executor: str = "local", address: str | None = None,
                cells_only: bool = False, where: dict[str, set[str]] | None = None, progress: bool = True) -> int:
    """Run the studies of ``plan`` (validated and checked); returns the exit status: 0 when all succeeded, 1 when
    a cell or a notebook failed."""
    total = time.perf_counter()
    if jobs > 1:
        plan = longest_first(plan, profile)  # before --fresh moves the last run's records aside
    if fresh:
        for name in plan:
            backup = move_aside(StudyPaths(name, profile))
            if backup:
                print(f"moved earlier results to {relative(backup)}")
    if fresh_caches:
        move_caches_aside(profile)
    if executor != "local" or cells_only:
        if not compute_cells(plan, profile, executor, address, where):
            return 1
        if cells_only:
            print(f"cells of {len(plan)} studies done in {time.perf_counter() - total:.0f} s")
            return 0
    if not run_notebooks(plan, profile, jobs, progress):
        return 1
    print(f"all {len(plan)} studies done in {time.perf_counter() - total:.0f} s")
    print(verdict_summary(plan, profile))
    write_overviews(profile)
    return 0


def move_aside(paths: StudyPaths) -> Path | None:
    """Rename the study's folder to ``<profile>.bak-<time>`` (``--fresh``); returns the backup, or None when there
    was nothing to move."""
    if not paths.dir.exists():
        return None
    backup = paths.dir.with_name(f"{paths.dir.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}")
    paths.dir.rename(backup)
    return backup


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
                  where: dict[str, set[str]] | None = None) -> bool:
    """Every planned cell of the studies in ``plan`` (only those matching ``where``: :func:`selector`) through
    ``executor`` (one instance for all); True when all succeeded. A failed study is reported and the next one
    still runs (its cells are independent)."""
    ex = make_executor(executor, address)
    ok = True
    for name, overrides in plan.items():
        study, cfg = study_config(name, {**overrides, "progress": False}, profile)
        t0 = time.perf_counter()
        print(f"cells of {name} ({profile}) on {executor}", flush=True)
        try:
            table = run_study(study, cfg, profile, executor=ex, progress=True, select=selector(where or {}))
            print(f"cells of {name}: {len(table)} stored in {time.perf_counter() - t0:.0f} s", flush=True)
        except CellsFailed as exc:
            ok = False
            print(f"error: {exc}", file=sys.stderr, flush=True)
    return ok


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
        lines.append(f"  {name}: {counts or 'none'} -> {relative(paths.dir)}/")
    return "\n".join(lines)


def write_overviews(profile: str) -> None:
    """The views over every study of ``profile``: the cross-study summary, the README's generated findings table
    (quick and standard) and the HTML report. A README or report that cannot be written is a warning: they only
    show the results, which are written."""
    print(f"cross-study summary: {relative(write_summary(profile))}")
    if profile in ("quick", "standard"):
        try:
            if update_readme():
                print("README.md: the generated findings table is updated")
        except (OSError, ValueError) as exc:  # an installed package without the checkout's README
            print(f"README.md not updated: {exc}")
    try:
        build_report([profile])  # prints where the report is
    except ValueError as exc:  # the report is a view of the results, which are written: warn, do not fail the run
        print(f"warning: the report was not built: {exc}", file=sys.stderr)
