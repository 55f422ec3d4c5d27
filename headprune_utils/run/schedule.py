"""Executing several studies' notebooks: one after the other, or side by side in up to ``--jobs`` kernels.

Side by side, the cores are shared out among the kernels (torch threads per kernel), the studies that took
longest last time start first (so the last to start is a short one), no study starts after a failure, and every
running study reports its stored cells and an estimate of the time left now and then.
"""
from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from headprune_utils.run.notebooks import StudyFailed, execute_study, relative
from headprune_utils.run.profiles import study_config
from headprune_utils.store.paths import StudyPaths, project_root
from headprune_utils.store.results import cell_key

PROGRESS_SECONDS = 60.0  # between progress lines of the studies running side by side


def run_notebooks(plan: dict[str, dict], profile: str, jobs: int, progress: bool = True) -> bool:
    """Execute the notebooks of ``plan``: one by one (``jobs`` 1, with a progress bar each unless ``progress`` is
    False) or side by side; True when all succeed."""
    if jobs == 1:
        return run_in_turn(plan, profile, progress)
    return run_side_by_side(plan, profile, jobs)


def run_in_turn(plan: dict[str, dict], profile: str, progress: bool = True) -> bool:
    """Execute the notebooks of ``plan`` one after the other, in plan order; the first failure is reported and
    stops the run (False)."""
    for i, (name, overrides) in enumerate(plan.items(), 1):
        print(f"[{i}/{len(plan)}] {name} ({profile}) -> {relative(StudyPaths(name, profile).dir)}", flush=True)
        try:
            seconds = execute_study(name, profile, overrides, progress=progress)
        except StudyFailed as exc:
            print(f"error: {exc}", file=sys.stderr)
            return False
        print(f"[{i}/{len(plan)}] {name} done in {seconds:.0f} s", flush=True)
    return True


def threads_per_job(jobs: int, cores: int | None = None) -> int:
    """Torch threads for each of ``jobs`` kernels side by side: the cores shared out, at least one."""
    return max(1, (cores or os.cpu_count() or 1) // jobs)


def recorded_seconds(name: str, profile: str) -> float | None:
    """The compute the study's last run recorded (its cells' seconds, reused ones included), or None."""
    path = StudyPaths(name, profile, staged=False).meta
    try:
        d = json.loads(path.read_text())["durations_seconds"]
        return max(float(d.get("cells_total", 0.0)), float(d.get("this_run", 0.0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def longest_first(plan: dict[str, dict], profile: str) -> dict[str, dict]:
    """``plan`` reordered for side-by-side runs: the studies that took longest last time first (a study never
    run before counts as longest), so that the last one to start is a short one. Sequential runs keep the
    plan's order."""
    cost = {name: recorded_seconds(name, profile) for name in plan}
    order = sorted(plan, key=lambda n: (cost[n] is not None, -(cost[n] or 0.0)))
    return {name: plan[name] for name in order}


def progress_line(name: str, profile: str, overrides: dict, elapsed: float) -> str:
    """``"  random_pruning: 40/84 cells stored, 3 min 10 s elapsed, about 4 min left"``. The estimate weighs the
    cells by their planned cost (``Cell.cost.flops``: a fine-tuning cell counts for more than an evaluation): the
    time this run took for the cost it stored, times the cost still missing (by count where the plan gives no costs);
    none before the first new cell. The planned cells are counted once per study."""
    if name not in _PLANNED:
        study, cfg = study_config(name, {**overrides, "progress": False}, profile)
        cells_dir = StudyPaths(name, profile, staged=False).cells
        costs = {cell_key(dict(c.axes)): float(c.cost.flops) for c in study.plan(cfg)}
        if not sum(costs.values()) > 0:
            costs = dict.fromkeys(costs, 1.0)
        _PLANNED[name] = (costs, cells_dir, {k for k in costs if (cells_dir / f"{k}.json").exists()})
    costs, cells_dir, at_start = _PLANNED[name]
    done = {k for k in costs if (cells_dir / f"{k}.json").exists()}
    new_cost = sum(costs[k] for k in done - at_start)
    left_cost = sum(costs[k] for k in costs if k not in done)
    mins = lambda t: f"{int(t // 60)} min {int(t % 60):02d} s"  # noqa: E731
    eta = f", about {mins(left_cost * elapsed / new_cost)} left" if new_cost > 0 and left_cost > 0 else ""
    return f"  {name}: {len(done)}/{len(costs)} cells stored, {mins(elapsed)} elapsed{eta}"


_PLANNED: dict[str, tuple[set, Path, int]] = {}


def run_side_by_side(plan: dict[str, dict], profile: str, jobs: int) -> bool:
    """Run the studies of ``plan`` in up to ``jobs`` kernels at once, in plan order; True when all succeed.

    Each kernel gets ``threads_per_job`` torch threads (``OMP_NUM_THREADS``, unless already set): on a small
    CPU one thread per study side by side does more work per second than one study on every core, and a
    thread pool shared with another busy process stalls. The caches the studies share (fine-tuned models,
    masked fine-tunings) are filled under file locks, so a model needed by two studies is trained once.
    After a failure no further study starts; those running finish. Progress: a line per start and end, and every
    ``PROGRESS_SECONDS`` one line per running study (:func:`progress_line`).
    """
    threads = str(threads_per_job(jobs))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, threads)
    print(f"{len(plan)} studies, {jobs} at a time, {os.environ['OMP_NUM_THREADS']} torch thread(s) each", flush=True)
    cwd = os.getcwd()
    os.chdir(project_root())  # once for all: execute_study's own chdir is then the same for every thread
    queue = list(plan.items())
    running: dict = {}
    started: dict[str, float] = {}
    failed = False
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            while queue or running:
                while queue and not failed and len(running) < jobs:
                    name, overrides = queue.pop(0)
                    print(f"start {name} ({profile}) -> {relative(StudyPaths(name, profile).dir)}", flush=True)
                    running[pool.submit(execute_study, name, profile, overrides, False)] = name
                    started[name] = time.perf_counter()
                if not running:
                    break
                done, _ = wait(running, timeout=PROGRESS_SECONDS, return_when=FIRST_COMPLETED)
                if not done:
                    for name in running.values():
                        print(progress_line(name, profile, plan[name], time.perf_counter() - started[name]), flush=True)
                for future in done:
                    name = running.pop(future)
                    try:
                        print(f"done {name} in {future.result():.0f} s", flush=True)
                    except StudyFailed as exc:
                        failed = True
                        print(f"error: {exc}", file=sys.stderr, flush=True)
    finally:
        os.chdir(cwd)
    if failed and queue:
        print(f"not started after the failure: {', '.join(name for name, _ in queue)}", file=sys.stderr)
    return not failed
