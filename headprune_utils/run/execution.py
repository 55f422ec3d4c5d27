"""Running a study's cells: one scheduler, thin executors (in-process, a process pool, or Ray), one writer.

``run_study(study, cfg, profile)`` is what every notebook calls:

1. the study plans its cells (:meth:`Study.plan`); the plan is checked (unique keys, requirements that exist,
   no cycles);
2. the result store is opened, refusing results made with other parameters; finished cells are reused;
3. the missing cells are grouped into batches (a batch = the ready cells of one ``group``, or one cell) and
   handed to an executor in plan order, each batch once all the cells it requires are stored. The required
   cells' results travel with the batch (``inputs``), so workers need no shared file system for results;
4. ONLY this driver writes results, each as soon as it arrives (atomic; an interrupted run resumes);
5. a batch that fails is reported with its cells' keys; the cells that require them are not run and are named;
   the other cells still run. Then :class:`CellsFailed` is raised naming them all;
6. the run's metadata (parameters, seeds, device, versions, git revision, durations, executor) is written.

Executors (Hydra's launcher shape): ``LocalExecutor`` runs batches in this process, one at a time;
``ProcessExecutor`` runs each batch as a job in a pool of worker processes on this machine (spawned, not forked);
``RayExecutor`` runs each batch as a Ray task (``ray.remote``, a GPU requested when the cluster has GPUs). The
pool and Ray run the same worker function: the study resolved BY NAME on the worker, the parameters rebuilt from
plain data (no closures travel), one torch thread per worker; the first batch to finish comes back first, not
submission order. A worker that dies is retried (``max_retries``); a batch that still fails is reported like any
failure.

Caches shared across cells and studies (fine-tuned models, trained translation models) are files under the
outputs root, filled under file locks. On a multi-node Ray cluster either point ``HEADPRUNE_OUTPUT_DIR`` at
shared storage on every node (each model is then trained once), or leave it local: a worker that lacks a
cached model trains it itself (deterministically: the same parameters, seed and device type give the same
model), which costs time but not correctness.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import multiprocessing
import os
import socket
import sys
import tempfile
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import torch
from tqdm import tqdm

from headprune_utils.model import models
from headprune_utils.run.profiles import (TimeLeft, calibrated_gflops, duration_text, model_slice, selected_cells,
                                          selector, unknown_profile)
from headprune_utils.tasks.metrics import verdict_scores
from headprune_utils.store.paths import INTERIM_FILE, PLAIN_NAME, STAGED_ENV, StudyPaths, outputs_root
from headprune_utils.store.results import (MACHINE_FIELD, ResultStore, StaleResultsError, atomic_write_json,
                                           ISA_VARIABLES, cell_key, held_hint, isa_restriction, machine_kind,
                                           portable, run_metadata)
from headprune_utils.studies import NAMES, get_study
from headprune_utils.studies.base import Cell, Study
from headprune_utils.studies.config import ParameterError, as_dict, check_fields, parameter_sources, validate
from headprune_utils.train import phases

EXECUTORS = ("local", "process", "ray")

# Variables of this process a worker needs for the same outputs, data and quiet, offline libraries.
_WORKER_ENV = ("HEADPRUNE_DATA_DIR", "HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
               "TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS", "PYTHONPATH",
               *ISA_VARIABLES)  # a worker held as the driver is (a worker whose torch already chose is refused)


class PlanError(ValueError):
    """A study's plan is inconsistent (a repeated key, a requirement that is not planned, a cycle)."""


class CellsFailed(RuntimeError):
    """Cells failed, or were not run because a cell they require failed. ``failed``: {key: error};
    ``skipped``: {key: the failed requirement}."""

    def __init__(self, study: str, failed: dict[str, str], skipped: dict[str, str]):
        self.study, self.failed, self.skipped = study, failed, skipped
        lines = [f"study {study!r}: {len(failed)} cell(s) failed, {len(skipped)} not run because a cell they require failed"]
        for key, err in failed.items():
            last = err.strip().splitlines()[-1] if err.strip() else "?"
            lines.append(f"  failed: {key}: {last}")
        for key, why in skipped.items():
            lines.append(f"  not run: {key} (requires {why}, which failed)")
        lines.append("the cells that finished are stored; rerun to retry the rest")
        super().__init__("\n".join(lines))


@dataclass
class Batch:
    """Cells computed together, and the stored results of the cells they require."""

    cells: list[Cell]
    inputs: dict[str, dict] = field(default_factory=dict)

    @property
    def keys(self) -> list[str]:
        return [c.key for c in self.cells]


@dataclass
class Outcome:
    """What came back for one cell: ``status`` "done" with ``result``, or "failed" with ``error``."""

    key: str
    status: Literal["done", "failed"]
    result: dict | None = None
    error: str | None = None


# ------------------------------------------------------------------------------------------------ the plan

def check_plan(cells: list[Cell]) -> dict[str, Cell]:
    """``{key: cell}`` of a consistent plan (raises PlanError naming the offending key)."""
    by_key: dict[str, Cell] = {}
    for c in cells:
        if c.key in by_key:
            raise PlanError(f"cell {c.key} is planned twice")
        try:
            hash(c.group)
        except TypeError:
            raise PlanError(f"cell {c.key}: its group {c.group!r} must be a label (a string, a number or a tuple of "
                            "them), not a mutable collection") from None
        by_key[c.key] = c
    for c in cells:
        for r in c.requires:
            if r not in by_key:
                raise PlanError(f"cell {c.key} requires {r}, which is not in the plan")
    # cycles: depth-first over requirements
    state: dict[str, int] = {}

    def visit(key: str, trail: tuple[str, ...]) -> None:
        if state.get(key) == 2:
            return
        if state.get(key) == 1:
            raise PlanError("cells require each other in a cycle: " + " -> ".join((*trail, key)))
        state[key] = 1
        for r in by_key[key].requires:
            visit(r, (*trail, key))
        state[key] = 2

    for key in by_key:
        visit(key, ())
    return by_key


def batches_of(ready: list[Cell]) -> list[list[Cell]]:
    """Ready cells as batches, in plan order: the cells of one group together (at the place of its first
    cell), each ungrouped cell alone."""
    out: list[list[Cell]] = []
    groups: dict[Any, list[Cell]] = {}
    for c in ready:
        if c.group is None:
            out.append([c])
        elif c.group in groups:
            groups[c.group].append(c)
        else:
            groups[c.group] = [c]
            out.append(groups[c.group])
    return out


def schedule(cells: list[Cell], done: set[str], submit: Callable[[Batch], Any],
             wait: Callable[[list[Any]], list[tuple[Any, Iterable[Outcome]]]], read: Callable[[str], dict],
             on_outcome: Callable[[Outcome], None], max_in_flight: int = 1) -> tuple[dict[str, str], dict[str, str]]:
    """Run the cells not in ``done``, honouring requirements; returns (failed {key: error}, skipped {key: why}).

    ``submit(batch) -> handle``; ``wait(handles) -> [(handle, outcomes)]`` for at least one finished handle;
    ``read(key)`` is a stored result (for ``inputs``); ``on_outcome`` stores each outcome as it arrives.
    At most ``max_in_flight`` batches are submitted at once.
    """
    by_key = check_plan(cells)
    done = set(done) & set(by_key)
    pending = [c for c in cells if c.key not in done]
    failed: dict[str, str] = {}
    skipped: dict[str, str] = {}
    in_flight: dict[Any, Batch] = {}
    running: set[str] = set()

    def blocked_by(c: Cell) -> str | None:
        for r in c.requires:
            if r in failed or r in skipped:
                return r if r in failed else skipped[r]
        return None

    while pending or in_flight:
        still = []
        for c in pending:
            why = blocked_by(c)
            if why is not None:
                skipped[c.key] = why
            else:
                still.append(c)
        pending = still
        ready = [c for c in pending if c.key not in running and all(r in done for r in c.requires)]
        for cells_ in batches_of(ready):
            if len(in_flight) >= max_in_flight:
                break
            batch = Batch(cells_, {r: read(r) for c in cells_ for r in c.requires})
            in_flight[submit(batch)] = batch
            running.update(batch.keys)
        if not in_flight:
            if pending:  # nothing runnable and nothing running: cannot happen with a checked plan
                raise PlanError(f"cells cannot start: {[c.key for c in pending][:5]}")
            break
        for handle, outcomes in wait(list(in_flight)):
            batch = in_flight.pop(handle)
            seen = set()
            for o in outcomes:
                seen.add(o.key)
                on_outcome(o)
                if o.status == "done":
                    done.add(o.key)
                else:
                    failed[o.key] = o.error or "failed"
            for key in batch.keys:  # a batch that ended early: its remaining cells count as failed
                if key not in seen:
                    failed[key] = "the batch ended before this cell ran"
            running.difference_update(batch.keys)
            pending = [c for c in pending if c.key not in seen and c.key not in failed]
    return failed, skipped


# ------------------------------------------------------------------------------------------- the batch body

_CONTEXTS: dict[tuple, Any] = {}


def iter_batch(study: Study, cfg, device, paths: StudyPaths, batch: Batch, ctx=None) -> Iterator[Outcome]:
    """The one job body every executor runs: compute a batch, yielding each cell's outcome as it finishes; an
    error ends the batch and every cell not yet done is returned failed, with the traceback (never raised).
    ``ctx``: the study's context when the executor keeps one across batches (else built here, inside the
    error handling)."""
    left = list(batch.keys)
    axes = {c.key: c.axes for c in batch.cells}
    try:
        if ctx is None:
            phases.report(f"{study.name}: loading what the cells need (model, data)")
            ctx = study.context(cfg, device, paths)
        phases.report(f"computing {axes_text(axes[left[0]])}")
        for cell, result in study.run(ctx, batch.cells, batch.inputs):
            problem = None
            if cell.key not in axes:
                problem = (f"study {study.name!r} returned a result for cell {cell.key}, which is not among the "
                           f"{len(axes)} cell(s) it was given ({', '.join(list(axes)[:3])}"
                           f"{', ...' if len(axes) > 3 else ''}); nothing of it is stored")
            elif cell.key not in left:
                problem = (f"study {study.name!r} returned cell {cell.key} a second time; the first result is kept, "
                           "the second is not stored")
            if problem is not None:  # a fault of the study's run(): reported by the cell, and the batch ends
                yield Outcome(cell.key, "failed", error=problem)
                raise PlanError(problem)
            left.remove(cell.key)
            yield Outcome(cell.key, "done",
                          result={**result, **study.provenance(ctx, cell), MACHINE_FIELD: machine_kind(device)})
            if left:  # resumed: the study computes the next cell now
                phases.report(f"computing {axes_text(axes[left[0]])}")
    except Exception:
        err = traceback.format_exc()
        for k in left:
            yield Outcome(k, "failed", error=err)


def axes_text(axes) -> str:
    """A cell's axes as the progress display names it: ``"task=SST-2 regime=finetune_then_mask fraction=0.5"``."""
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in dict(axes).items())


def run_batch(study: Study, cfg, device, paths: StudyPaths, batch: Batch, ctx=None) -> list[Outcome]:
    """:func:`iter_batch` to its end (an executor that returns a batch's outcomes together, e.g. a Ray task)."""
    return list(iter_batch(study, cfg, device, paths, batch, ctx))


def _main_spec() -> None:
    """Give a ``__main__`` made without ``__spec__`` (an embedding shell, a notebook kernel's user module) the value a
    script's has (None): spawn reads it whenever the pool starts a worker, which happens on a submit."""
    main = sys.modules.get("__main__")
    if main is not None and not hasattr(main, "__spec__"):
        main.__spec__ = None


class LocalExecutor:
    """Batches run in this process, one at a time, each cell's outcome handed on (and stored) as it finishes.

    The executor interface (every executor has it; :func:`_run_locked` drives them alike): ``name``,
    ``max_in_flight``, ``start(study=, cfg=, device=, paths=, profile=)``, ``submit(batch) -> handle``,
    ``wait(handles) -> [(handle, outcomes)]`` for at least one finished batch, ``close()``; the job body is
    :func:`iter_batch` in every executor."""

    name = "local"
    max_in_flight = 1

    def start(self, *, study: Study, cfg, device, paths: StudyPaths, profile: str = "") -> None:
        self.study, self.cfg, self.device, self.paths = study, cfg, device, paths
        self._ctx = None
        self._queue: dict[int, Batch] = {}
        self._next = 0

    def submit(self, batch: Batch) -> int:
        self._next += 1
        self._queue[self._next] = batch
        return self._next

    def wait(self, handles: list[int]) -> list[tuple[int, Iterator[Outcome]]]:
        """The first submitted batch, run now: its outcomes stream out cell by cell (the context is built once, on
        the first batch, and kept for the next: a failure to build it is raised, not returned)."""
        handle = handles[0]
        batch = self._queue.pop(handle)
        if self._ctx is None:
            phases.report(f"{self.study.name}: loading what the cells need (model, data)")
            self._ctx = self.study.context(self.cfg, self.device, self.paths)
        return [(handle, iter_batch(self.study, self.cfg, self.device, self.paths, batch, self._ctx))]

    def close(self) -> None:
        self._ctx = None


class ProcessExecutor:
    """Each batch a job in a pool of ``workers`` processes on this machine (default: one per CPU). The executor
    interface of :class:`LocalExecutor` and the worker function of :class:`RayExecutor` (:func:`_remote_batch`):
    the study resolved by name on the worker, the parameters shipped as plain data, one torch thread per worker
    whatever ``OMP_NUM_THREADS`` it inherited (the trained weights depend on the thread count, so a model trained
    by a worker is the one a one-thread local run trains, and no worker oversubscribes its CPU). Every job carries
    this run's outputs root and data settings (``HEADPRUNE_OUTPUT_DIR``, ``HEADPRUNE_DATA_DIR``, ...), since the
    workers outlive a run. On a GPU every worker uses the one device: choose ``workers`` its memory holds.

    Workers are spawned, never forked: a fork of a process that has started torch's thread pools (or CUDA)
    inherits their locks in whatever state they were and can deadlock.

    A worker that dies (killed, out of memory, ``os._exit``) breaks the whole pool: every job in it fails at once,
    and which job killed it is unknown. The pool is then rebuilt and the jobs lost rerun one at a time, alone, so
    that a death is charged to the job that caused it; a job whose worker died ``max_retries + 1`` times alone
    returns its cells failed, naming the death, while the other batches run on. A job that raises returns its cells
    failed with the traceback. Either way nothing hangs and no cell is lost silently.

    The workers stay from one run (``start`` ... ``close``) to the next of this executor, since each start-up
    imports torch and the studies (seconds); they end with :meth:`shutdown`, or when the executor is
    garbage-collected (an executor made by ``run_study(executor="process")`` lives for that run only).
    """

    name = "process"
    threads = 1  # torch threads per worker: one CPU each

    def __init__(self, workers: int | None = None, max_retries: int = 2):
        self.workers = (os.cpu_count() or 1) if workers is None else workers
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.max_in_flight = self.workers
        self.max_retries = max_retries
        self._pool: ProcessPoolExecutor | None = None
        self._finalizer: weakref.finalize | None = None
        self._reset()

    def start(self, *, study: Study, cfg, device, paths: StudyPaths, profile: str = "") -> None:
        if self._pool is None:
            self._new_pool()
        self._reset()
        self._job = {"study": study_ref(study), "cfg": as_dict(cfg), "profile": profile, "device": str(device),
                     "faults": os.environ.get("HEADPRUNE_TEST_FAULTS"), "threads": self.threads,
                     "env": _worker_env(paths.root), "where": "process-pool job"}

    def submit(self, batch: Batch) -> int:
        self._next += 1
        self._batches[self._next] = batch
        self._queue.append(self._next)
        self._dispatch()
        return self._next

    def wait(self, handles: list[int]) -> list[tuple[int, list[Outcome]]]:
        """The batches finished first (at least one): their outcomes, or their cells failed with the job's error.
        A worker's death is dealt with here (the pool rebuilt, the jobs lost queued again), so a batch comes back
        only with its final answer."""
        while True:
            self._dispatch()
            if not self._running:
                raise RuntimeError("wait: no batch was submitted")
            done, _ = wait_futures([fut for fut, _ in self._running.values()], return_when=FIRST_COMPLETED)
            out, broken = [], []
            for handle, (fut, pool) in list(self._running.items()):
                if fut not in done:
                    continue
                if isinstance(fut.exception(), BrokenProcessPool):
                    if pool not in broken:
                        broken.append(pool)
                else:
                    out.append(self._finish(handle))
            for pool in broken:
                out += self._after_death(pool)
            if out:
                return out

    def close(self) -> None:
        """Ends a run. Jobs still out (an interrupted run) would hold workers the next run needs, so the pool is then
        ended (they finish or die with it) and the next run starts a fresh one."""
        if self._running or self._queue:
            self._end_pool(wait=False)
        self._reset()

    def shutdown(self) -> None:
        """Ends the workers (waiting for them to exit); a later ``start`` spawns new ones."""
        self._end_pool(wait=True)

    # -- the pool

    def _reset(self) -> None:
        self._batches: dict[int, Batch] = {}
        self._queue: deque[int] = deque()  # submitted, not yet in the pool; suspects first
        self._running: dict[int, tuple[Future, ProcessPoolExecutor]] = {}  # in the pool they were submitted to
        self._suspects: set[int] = set()  # lost together with others when a worker died: rerun alone
        self._deaths: dict[int, int] = {}  # deaths while running alone
        self._next = 0

    def _new_pool(self) -> None:
        self._end_pool(wait=False)
        self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        self._finalizer = weakref.finalize(self, self._pool.shutdown, wait=False, cancel_futures=True)

    def _end_pool(self, wait: bool) -> None:
        if self._pool is not None:
            self._finalizer.detach()
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None

    def _dispatch(self) -> None:
        """Queued batches into the pool, all of them, except while suspects wait: then one at a time, alone."""
        while self._queue and not (self._suspects and self._running):
            handle = self._queue[0]
            batch = self._batches[handle]
            try:
                _main_spec()
                fut = self._pool.submit(_remote_batch, self._job, [dict(c.axes) for c in batch.cells], batch.inputs)
            except BrokenProcessPool:  # a worker died since the last wait: its jobs are collected there
                self._new_pool()
                continue
            self._queue.popleft()
            self._running[handle] = (fut, self._pool)

    def _finish(self, handle: int) -> tuple[int, list[Outcome]]:
        fut, _ = self._running.pop(handle)
        batch = self._batches.pop(handle)
        self._suspects.discard(handle)
        self._deaths.pop(handle, None)
        exc = fut.exception()
        if exc is None:
            return handle, [Outcome(**o) for o in fut.result()]
        err = "".join(traceback.format_exception(exc))  # with the worker's traceback (the exception's cause)
        return handle, [Outcome(k, "failed", error=err) for k in batch.keys]

    def _after_death(self, pool: ProcessPoolExecutor) -> list[tuple[int, list[Outcome]]]:
        """A worker of ``pool`` died, and the pool failed every job it still held. The jobs that had finished keep
        their outcomes; a job lost alone caused the death (it is charged one); jobs lost together become suspects,
        queued first to rerun one at a time."""
        mine = {h: fut for h, (fut, p) in self._running.items() if p is pool}
        wait_futures(list(mine.values()), timeout=60)  # a broken pool fails its jobs in one sweep
        out, lost = [], []
        for handle, fut in mine.items():
            if fut.done() and not isinstance(fut.exception(), BrokenProcessPool):
                out.append(self._finish(handle))
            else:
                lost.append(handle)
                self._running.pop(handle)
        if pool is self._pool:
            self._new_pool()
        if len(lost) == 1:
            handle = lost[0]
            self._deaths[handle] = self._deaths.get(handle, 0) + 1
            if self._deaths[handle] > self.max_retries:
                n = self._deaths.pop(handle)
                self._suspects.discard(handle)
                err = (f"BrokenProcessPool: the worker process died while computing this batch, {n} time(s) alone "
                       f"in the pool (killed, out of memory, or it exited)")
                return out + [(handle, [Outcome(k, "failed", error=err) for k in self._batches.pop(handle).keys])]
        self._suspects.update(lost)
        self._queue.extendleft(reversed(lost))
        return out


RAY_CONNECT_TIMEOUT = 10.0  # seconds to reach a Ray cluster's address before giving up with a clear message


class ExecutorUnavailable(RuntimeError):
    """The executor cannot start (Ray is not installed, or no Ray cluster can be joined at the address): raised
    before any cell is computed, its message one line naming the option and the address."""


def _address_text(address: str | None) -> str:
    return f"--executor ray --address {address!r} (a notebook's ray_address)" if address else "--executor ray"


def check_ray_address(address: str | None, timeout: float = RAY_CONNECT_TIMEOUT) -> None:
    """Raise :class:`ExecutorUnavailable` naming ``address`` when nothing answers there within ``timeout`` seconds
    (Ray itself retries for minutes, saying little). ``None`` and ``"auto"`` (a local instance, or the one ``ray
    start`` left address files for) are Ray's own to resolve. Something answering is not yet a Ray cluster:
    :func:`connect_ray` says so when Ray cannot join it."""
    if address in (None, "", "auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise ExecutorUnavailable(f"--address {address!r}: expected host:port, ray://host:port or auto")
    try:
        socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ExecutorUnavailable(f"--address {address!r}: no Ray cluster answers at {host}:{port} within "
                                  f"{timeout:g} s ({exc.__class__.__name__}: {exc}); start it with `ray start --head` "
                                  "there, or leave --address out to start a local instance") from None


def connect_ray(address: str | None = None, num_cpus: int | None = None, root: Path | None = None):
    """Ray, joined to the cluster at ``address`` (None: a local instance started in this process) unless this
    process already is; returns the ``ray`` module. Workers get the outputs root ``root`` (default: this run's)
    and the data root and settings of this process (:func:`_worker_env`). Raises :class:`ExecutorUnavailable`, one
    line naming the option and the address, when Ray is not installed or cannot start or join there (Ray's own
    error, first line, in it): the batch runner calls it before any work when ``--address`` is given."""
    try:
        import ray
    except ImportError:
        raise ExecutorUnavailable("--executor ray needs Ray: pip install -e '.[ray]'") from None
    if ray.is_initialized():
        return ray
    check_ray_address(address)
    env = {var: value for var, value in _worker_env(root).items() if value}
    kwargs = dict(address=address, ignore_reinit_error=True, include_dashboard=False, log_to_driver=False,
                  runtime_env={"env_vars": env})
    if address is None and num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    try:
        # joining a cluster, Ray's core prints a line a second while it retries: shown only on success (not when
        # starting a local instance: its daemons, started now, would inherit the held stderr)
        with _held_stderr() if address else contextlib.nullcontext(_Held()) as held:
            ray.init(**kwargs)
        if held.text:
            sys.stderr.write(held.text)
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, TimeoutError, RuntimeError, ValueError...
        said = (str(exc).strip().splitlines() or [""])[0][:300]
        what = (f"no Ray cluster could be joined at {address!r}" if address
                else "a local Ray instance could not be started")
        raise ExecutorUnavailable(f"{_address_text(address)}: {what} ({type(exc).__name__}: {said}); nothing was "
                                  "computed" + ("; start the cluster with `ray start --head` there, or leave "
                                                "--address out to start a local instance" if address else "")) from None
    return ray


class _Held:
    text = ""


@contextlib.contextmanager
def _held_stderr():
    """File descriptor 2 (this process's and its libraries' C code's stderr) into a temporary file, and Python's
    ``sys.stderr`` into memory, while the block runs; what was written there is in ``.text`` afterwards (nothing is
    shown)."""
    held = _Held()
    sys.stderr.flush()
    saved = os.dup(2)
    python_side = io.StringIO()  # sys.stderr where it is not file descriptor 2 (a notebook's, a test's)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            with contextlib.redirect_stderr(python_side):
                yield held
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            held.text = tmp.read().decode("utf-8", "replace") + python_side.getvalue()


class RayExecutor:
    """Each batch a Ray task; the study resolved by name on the worker, parameters shipped as plain data. The
    executor interface of :class:`LocalExecutor`; the task is :func:`_remote_batch`, as in :class:`ProcessExecutor`.

    ``address``: None starts (or joins, in this process) a local Ray instance; "auto" or "ray://host:port"
    joins a cluster. ``num_cpus`` caps a local instance. Workers get the outputs and data roots of this
    process (``HEADPRUNE_OUTPUT_DIR``, ``HEADPRUNE_DATA_DIR``) unless already set on the cluster. Each task
    reserves one CPU and computes with one torch thread, whatever ``OMP_NUM_THREADS`` the workers inherited: the
    trained weights depend on the thread count, so a model trained by a Ray task is the one a one-thread local
    run trains (and no task oversubscribes its CPU).
    """

    threads = 1  # torch threads per task: the one CPU each task reserves

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None, max_retries: int = 2,
                 max_in_flight: int | None = None):
        self.address, self.num_cpus, self.max_retries = address, num_cpus, max_retries
        self._max_in_flight = max_in_flight

    def start(self, *, study: Study, cfg, device, paths: StudyPaths, profile: str) -> None:
        self.ray = ray = connect_ray(self.address, self.num_cpus, paths.root)
        gpus = ray.cluster_resources().get("GPU", 0)
        self._gpu = gpus > 0
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.max_in_flight = self._max_in_flight or max(1, int(gpus) if gpus else cpus)
        self._remote = ray.remote(_remote_batch).options(num_gpus=1 if self._gpu else 0, num_cpus=1,
                                                         max_retries=self.max_retries, retry_exceptions=False)
        self._job = {"study": study_ref(study), "cfg": as_dict(cfg), "profile": profile,
                     "device": "cuda" if self._gpu else str(device),
                     "faults": os.environ.get("HEADPRUNE_TEST_FAULTS"), "threads": self.threads,
                     "where": "Ray task"}
        self._keys: dict[Any, list[str]] = {}

    def submit(self, batch: Batch):
        ref = self._remote.remote(self._job, [dict(c.axes) for c in batch.cells], batch.inputs)
        self._keys[ref] = batch.keys
        return ref

    def wait(self, handles: list) -> list[tuple[Any, list[Outcome]]]:
        ready, _ = self.ray.wait(handles, num_returns=1)
        out = []
        for ref in ready:
            keys = self._keys.pop(ref)
            try:
                outcomes = [Outcome(**o) for o in self.ray.get(ref)]
            except Exception as exc:  # the worker died (after Ray's retries) or the task could not run
                err = f"{type(exc).__name__}: {exc}"
                outcomes = [Outcome(k, "failed", error=err) for k in keys]
            out.append((ref, outcomes))
        return out

    def close(self) -> None:
        pass  # the Ray instance stays up for the next study of the run; ray.shutdown() at exit


def _worker_env(root: Path | None = None) -> dict[str, str | None]:
    """What a worker needs of this process's environment: this run's outputs root (``root``, default the outputs
    root: ``HEADPRUNE_OUTPUT_DIR``, so that workers fill and reuse the driver's model caches), the data root and
    the settings that keep the libraries offline and quiet; None for a variable unset here."""
    return {"HEADPRUNE_OUTPUT_DIR": str(root or outputs_root()),
            **{var: os.environ.get(var) or None for var in _WORKER_ENV}}


def _remote_batch(job: dict, axes: list[dict], inputs: dict) -> list[dict]:
    """One batch on a worker process, the job of both the process pool and Ray: apply the environment the job
    carries (a pool's workers serve run after run, so a variable unset in this run is removed), compute with
    ``job["threads"]`` torch threads whatever ``OMP_NUM_THREADS`` the worker inherited (the trained weights depend
    on the thread count), rebuild the study, parameters and context (the context kept per worker process for the
    next batch of the same run), run :func:`run_batch`, return plain outcomes."""
    for var, value in job.get("env", {}).items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    torch.set_num_threads(job.get("threads", 1))
    study = get_study(job["study"])
    cfg = validate(study.Config, job["cfg"], where=f"{job.get('where', 'worker job')} of {study.name}")
    device = models.resolve_device(job["device"] if job["device"] != "cuda" or torch.cuda.is_available() else "cpu")
    paths = StudyPaths(study.name, job["profile"])
    planned = {c.key: c for c in study.plan(cfg)}
    cells = [planned[cell_key(a)] for a in axes]
    _maybe_fault(job.get("faults"), cells)
    # a context for exactly these parameters, device and outputs: the fingerprint leaves out parameters that change
    # no result, yet a context may hold them, and a worker may serve another run of the same study next
    token = (job["study"], json.dumps(job["cfg"], sort_keys=True, default=str), str(device), job["profile"],
             str(outputs_root()))
    if token not in _CONTEXTS:
        _CONTEXTS.clear()
        _CONTEXTS[token] = study.context(cfg, device, paths)
    outcomes = run_batch(study, cfg, device, paths, Batch(cells, inputs), ctx=_CONTEXTS[token])
    return [o.__dict__ for o in outcomes]


def study_ref(study: Study) -> str:
    """How a worker finds ``study``: its registry name, or ``module:Class`` for a study outside the registry
    (a user's own study; the class is instantiated without arguments on the worker)."""
    if study.name in NAMES and type(study).__module__.startswith("headprune_utils.studies."):
        return study.name
    return f"{type(study).__module__}:{type(study).__qualname__}"


def _maybe_fault(spec: str | None, cells: list[Cell]) -> None:
    """Fault injection for the executor's tests only: the driver's ``HEADPRUNE_TEST_FAULTS=<kind>:<key>:<marker
    file>`` makes the worker that starts the cell ``key`` die (``kind`` = "die-once": only while the marker file
    does not exist yet, which it then creates; "die": always). Unset in every real run."""
    if not spec:
        return
    kind, key, marker = spec.split(":", 2)
    if key not in {c.key for c in cells}:
        return
    if kind == "die" or (kind == "die-once" and not os.path.exists(marker)):
        open(marker, "a").close()
        os._exit(17)


Executor = LocalExecutor | ProcessExecutor | RayExecutor


def make_executor(executor: str | Executor = "local", address: str | None = None) -> Executor:
    """The executor named ``executor`` (one of :data:`EXECUTORS`; ``address`` is Ray's), or ``executor`` itself
    when it is one already."""
    if not isinstance(executor, str):
        return executor
    if executor == "local":
        return LocalExecutor()
    if executor == "process":
        return ProcessExecutor()
    if executor == "ray":
        return RayExecutor(address=address)
    raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")


# ---------------------------------------------------------------------------------------------- progress

STATUS_FILE = "status.json"  # in the staging folder of a notebook the batch runner executes (never in the outputs)
PROGRESS_INTERVAL = 2.0  # seconds between refreshes of the bar and the status file while a phase goes on


class Progress:
    """What the driver shows while cells run: the cells stored of those to compute, what runs now (the phase reported
    last, :mod:`headprune_utils.train.phases`: loading, a cell, a model's training with its epoch and step) and the
    time left, from the planned costs calibrated by this run's finished cells (:class:`~.profiles.TimeLeft`).

    Shown on a tqdm bar when ``show`` (refreshed at most every ``interval`` seconds, default :data:`PROGRESS_INTERVAL`), and written to
    ``status_file`` when given (atomically, at most every ``interval`` seconds and at each stored cell): the batch
    runner passes its notebooks ``show=False`` (a bar would land in the executed notebook) and reads the file
    instead (:func:`read_status`). Neither goes into a notebook's outputs."""

    def __init__(self, study: str, todo: list[Cell], show: bool, status_file: Path | None = None,
                 interval: float | None = None, clock: Callable[[], float] = time.perf_counter):
        self.study, self.total, self.status_file, self.clock = study, len(todo), status_file, clock
        self.interval = PROGRESS_INTERVAL if interval is None else interval
        self.time_left = TimeLeft({c.key: c.cost.flops for c in todo}, 1e-9 / calibrated_gflops(study))
        self.stored = 0
        self.phase = ""
        self.started = self.last_cell = self.last_shown = self.last_written = clock()
        self.bar = tqdm(total=self.total, desc=f"{study} cells", disable=not show, mininterval=30,
                        bar_format="{desc}: {percentage:3.0f}%|{bar:20}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]")

    def text(self) -> str:
        """``"training SST-2 s0 full: fine-tuning, epoch 1/3, step 40/57; about 12 min left"``."""
        now = self.clock()
        left = self.time_left.seconds_left(now - self.last_cell)
        over = self.time_left.overrun(now - self.last_cell)
        parts = [self.phase] if self.phase else []
        if left is None:
            parts.append("time left: after the first cell")
        elif over >= 60:  # the running cell outlasts its estimate: no count-down to "under a minute" that stays
            after = len(self.time_left.left) > 1
            parts.append(f"past its estimate by {duration_text(over).removeprefix('about ')}"
                         + (f"; then {duration_text(left)} left" if after else ""))
        else:
            parts.append(f"{duration_text(left)} left")
        return "; ".join(parts)

    def on_phase(self, text: str) -> None:
        """A phase reported (:func:`phases.report`): shown at once when it is the first since a cell was stored,
        else at most every ``interval`` seconds (training reports every step)."""
        first, self.phase = not self.phase, text
        self._show(force=first)

    def on_cell(self, key: str) -> None:
        """A cell's outcome arrived (stored, or failed)."""
        now = self.clock()
        self.time_left.done(key, max(0.0, now - self.last_cell))
        self.last_cell = now
        self.stored += 1
        self.phase = ""  # what ran is done; the next phase follows
        self.bar.update(1)
        self._show(force=False)

    def _show(self, force: bool) -> None:
        now = self.clock()
        if not self.bar.disable and (force or now - self.last_shown >= self.interval):
            self.bar.set_postfix_str(self.text(), refresh=False)
            self.bar.refresh()
            self.last_shown = now
        if self.status_file is not None and (force or now - self.last_written >= self.interval):
            self.write()
            self.last_written = now

    def write(self) -> None:
        """The status file: ``{"study", "stored", "total", "phase", "seconds_left", "text"}``."""
        left = self.time_left.seconds_left(self.clock() - self.last_cell)
        self.status_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.status_file, {
            "study": self.study, "stored": self.stored, "total": self.total, "phase": self.phase,
            "seconds_left": left, "text": f"{self.stored}/{self.total} cells computed now; {self.text()}"})

    def close(self) -> None:
        if self.status_file is not None:
            self.write()
        self.bar.set_postfix_str("", refresh=False)
        self.bar.close()


def read_status(path: Path) -> str | None:
    """The text of a status file a run writes (:class:`Progress`): ``"3/84 cells computed now; training ...;
    about 12 min left"``; None when there is none (yet) or it cannot be read."""
    try:
        return str(json.loads(Path(path).read_text())["text"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# ------------------------------------------------------------------------------------------------ the driver

class MixedModelsError(RuntimeError):
    """Cells that say they used one trained model (the same task and seed) were made from different weights."""


def check_one_model(table: pd.DataFrame, study: str, axes: Iterable[str], profile: str | None = None) -> None:
    """Raise :class:`MixedModelsError` when cells of one model carry different ``full_model_sha`` (the hash of the
    trained full model's weights a cell was computed with, ``Study.provenance``): a run resumed on another machine
    retrains a model whose cache was lost, and training need not give the same weights on another CPU or with
    another number of torch threads (measured: the test suite's tiny model trained with 1 and 2 threads differs in
    its weights' bytes), so results of the two trainings must never be mixed in one analysis. ``axes``: the cell
    axes that select one model, the study's ``model_axes`` (a (task, seed) of the GLUE studies, a ``model_seed`` of
    the translation study); none, or a table without them, checks nothing. First, the cells of one model that
    record their machine (:data:`MACHINE_FIELD`) must name one kind (:func:`_one_machine_kind`); a run on this
    machine (local or process executor) refuses before computing to add to a slice another kind began
    (:func:`refuse_other_machine`). On a Ray cluster every node must be of one kind: its workers record their
    own, checked after the cells are stored. ``profile`` (when known) goes into the command a message names."""
    keys = list(axes)
    if not keys or not set(keys) <= set(table.columns):
        return
    _one_machine_kind(table, study, keys, profile)
    if "full_model_sha" not in table.columns:
        return
    t = table[table["full_model_sha"].notna()]
    n = t.groupby(keys)["full_model_sha"].nunique()
    bad = n[n > 1]
    if len(bad):
        first, which = _rows_of(t, keys, bad.index[0])
        shas = sorted(which["full_model_sha"].unique())
        name = _model_name(keys, first)
        raise MixedModelsError(
            f"{study}: the cells of {name} were computed with {len(shas)} different trainings of that "
            f"model (weights {', '.join(shas)}): a resumed run retrained it (its cache was gone, and another machine "
            f"or another number of torch threads (OMP_NUM_THREADS, --jobs) trained it differently), or cells were "
            f"copied in from another run of the same parameters. Recompute those "
            f"cells (move them away, or --fresh) so that one training underlies them all; {len(bad)} model(s) "
            f"affected.")


def _rows_of(t: pd.DataFrame, keys: list[str], values) -> tuple[tuple, pd.DataFrame]:
    """``(values as a tuple, the rows of t whose ``keys`` equal them)``: one model's cells (``values``: a group index
    of ``t.groupby(keys)``, a scalar when there is one key)."""
    values = tuple(values) if len(keys) > 1 else (values,)
    return values, t[(t[keys] == pd.Series(dict(zip(keys, values)))).all(axis=1)]


def _model_name(keys: list[str], values: tuple) -> str:
    """One model's slice in words ("SST-2 seed 0", "model seed 1"); integral floats (a column with a gap reads as
    floats) as integers."""
    values = tuple(int(v) if isinstance(v, float) and v.is_integer() else v for v in values)
    if keys == ["task", "seed"]:
        return f"{values[0]} seed {values[1]}"
    if keys == ["model_seed"]:
        return f"model seed {values[0]}"
    return "model " + " ".join(f"{k}={v}" for k, v in zip(keys, values))


def _again_command(study: str, profile: str | None, keys: list[str], values: tuple) -> str:
    """The runner's command that computes one model's slice again on this machine, its stored cells moved aside
    (``--fresh --where``): the slice as ``--plan-slices`` writes it (a seed read as 1.0 as 1; the pre-trained
    encoder's cells, whose seed is empty, as ``task=pretrained``)."""
    axes = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in zip(keys, values)
            if not (v is None or isinstance(v, float) and math.isnan(v))}
    return (f"python -m headprune_utils.run{f' --profile {profile}' if profile else ''} --only {study} --cells-only "
            f"--fresh --where {model_slice(axes, tuple(keys))}")


def refuse_other_machine(study: Study, store: ResultStore, cells: list, done: set[str], todo: list,
                         here: str, profile: str | None = None) -> None:
    """:class:`MixedModelsError` before any work when this machine (of kind ``here``) would add ``todo`` cells to a
    model's slice whose stored cells record another kind (:data:`MACHINE_FIELD`; cells without a record say
    nothing). Reads only the stored cells of the slices ``todo`` touches."""
    keys = list(study.model_axes)
    if not keys:
        return
    slice_of = lambda c: tuple(dict(c.axes).get(k) for k in keys)  # noqa: E731
    slices = {slice_of(c) for c in todo}
    stored = store.table([dict(c.axes) for c in cells if c.key in done and slice_of(c) in slices])
    if MACHINE_FIELD not in stored.columns or not set(keys) <= set(stored.columns):
        return
    other = stored[stored[MACHINE_FIELD].notna() & (stored[MACHINE_FIELD] != here)]
    if other.empty:
        return
    first, which = _rows_of(other, keys, other.iloc[0][keys].tolist() if len(keys) > 1 else other.iloc[0][keys[0]])
    kinds = which.groupby(MACHINE_FIELD).size().sort_index()
    n_models = other.groupby(keys).ngroups
    again = _again_command(study.name, profile, keys, first)
    raise MixedModelsError(
        f"{study.name}: this machine ({here}) would add cells to the slice of {_model_name(keys, first)}, whose "
        f"stored cells were computed on another kind ("
        + "; ".join(f"{n} cell(s) on {k}" for k, n in kinds.items())
        + "): numbers differ across CPU kinds, so a slice is finished on machines of the kind that began it. "
        f"Resume it on such a machine, or compute the whole slice again here ({again} moves its stored cells aside, "
        f"kept); {n_models} model(s) affected. Nothing was computed."
        + "".join(dict.fromkeys(held_hint(k, here) for k in kinds.index)))


def _one_machine_kind(table: pd.DataFrame, study: str, keys: list[str], profile: str | None = None) -> None:
    """:class:`MixedModelsError` when the cells of one model's slice that record their machine
    (:data:`MACHINE_FIELD`) name more than one kind: a slice is finished on machines of the kind that began it.
    Cells stored before the field existed record none and are not checked."""
    if MACHINE_FIELD not in table.columns:
        return
    t = table[table[MACHINE_FIELD].notna()]
    n = t.groupby(keys)[MACHINE_FIELD].nunique()
    bad = n[n > 1]
    if not len(bad):
        return
    first, which = _rows_of(t, keys, bad.index[0])
    kinds = which.groupby(MACHINE_FIELD).size().sort_index()
    raise MixedModelsError(
        f"{study}: the cells of {_model_name(keys, first)} were computed on {len(kinds)} kinds of machine ("
        + "; ".join(f"{n} cell(s) on {k}" for k, n in kinds.items())
        + "): numbers differ across CPU kinds, so one model's cells come from one kind. Recompute the cells of the "
        f"other kind on a machine of the first, or compute the whole slice again on one kind ("
        f"{_again_command(study, profile, keys, first)} moves its stored cells aside, kept); {len(bad)} model(s) "
        "affected.")


# ``--from-cells --where``: an interim render. The batch runner sets this in its notebooks' kernels to the
# selection as JSON (``{"task": ["SST-2"]}``); :func:`run_study` then computes nothing, analyses only the stored
# cells the selection matches (and what they require), and records the selection beside the tables it makes
# (``tables/interim.json``, :data:`INTERIM_FILE`: it goes with them, a later full render's tables have none) and in
# run_meta.json ("interim"). A selection of every planned cell is a full render.
SELECT_ENV = "HEADPRUNE_SELECT"


class InterimIncomplete(RuntimeError):
    """An interim render (:data:`SELECT_ENV`) whose selected cells are not all stored."""


def interim_selection() -> dict[str, set[str]] | None:
    """The selection of an interim render (:data:`SELECT_ENV`), or None. Raises ValueError naming the variable
    when it is not a JSON object of axis -> list of values."""
    raw = os.environ.get(SELECT_ENV)
    if not raw:
        return None
    try:
        where = json.loads(raw)
        if not (isinstance(where, dict) and where and all(
                isinstance(k, str) and isinstance(v, list) and v and all(isinstance(x, str) for x in v)
                for k, v in where.items())):
            raise ValueError
    except ValueError:
        raise ValueError(f"{SELECT_ENV}={raw!r}: expected a JSON object of axis -> list of values, e.g. "
                         '{"task": ["SST-2"]} (the batch runner sets it for --from-cells --where)') from None
    return {k: set(v) for k, v in where.items()}


def selection_text(where: dict[str, set[str]] | dict[str, list[str]]) -> str:
    """``{"task": {"SST-2"}, "seed": {"0", "1"}}`` -> ``"seed = 0, 1; task = SST-2"``."""
    return "; ".join(f"{k} = {', '.join(sorted(where[k]))}" for k in sorted(where))


def check_arguments(study: Study, cfg, executor, address) -> None:
    """What :func:`run_study` refuses before anything is written (ParameterError naming it): a study name that is
    not a plain folder name (its results go to ``outputs/<name>/``), parameters that are not the study's
    ``Config`` or fail its checks (types, finiteness, ``check()``), an ``address`` without the Ray executor."""
    name = getattr(study, "name", None)
    if not isinstance(name, str) or not PLAIN_NAME.fullmatch(name):
        raise ParameterError(f"study name {name!r} must be a plain folder name (letters, digits, '_', '.', '-', starting with a letter or digit): "
                             "its results go to outputs/<name>/<profile>/")
    config = getattr(study, "Config", None)
    if isinstance(config, type) and not isinstance(cfg, config):
        raise ParameterError(f"study {name!r} takes parameters of type {config.__name__}, got "
                             f"{type(cfg).__name__}")
    if dataclasses.is_dataclass(cfg):
        check_fields(cfg)
    check = getattr(cfg, "check", None)
    if callable(check):
        check()
    if address is not None and not isinstance(executor, RayExecutor) and executor != "ray":
        raise ParameterError(f"address {address!r} is a Ray cluster's; it goes with executor='ray', not "
                             f"{getattr(executor, 'name', executor)!r}")


def run_study(study: Study | str, cfg, profile: str, paths: StudyPaths | None = None, *,
              executor: str | Executor = "local", address: str | None = None,
              progress: bool | None = None, select: Callable[[dict], bool] | None = None,
              sources: dict[str, str] | None = None) -> pd.DataFrame:
    """Compute every cell of ``study`` not yet stored (resuming), write the run's metadata; returns one row
    per planned cell stored (its axes and result). ``select(axes) -> bool``: compute only the cells it accepts
    (and the cells they require), e.g. one slice of a long run; the others are left for later. ``sources``: where
    each parameter's value came from, recorded in run_meta.json (default: found out, :func:`parameter_origins`).
    In an interim render (:data:`SELECT_ENV` set, ``select`` not given) nothing is computed: the rows are the
    stored cells the selection matches and what they require, and InterimIncomplete names the first not stored.
    Raises CellsFailed when cells failed (the others are stored),
    StaleResultsError (naming the parameters that changed) when the stored cells were made with other parameters,
    StudyBusyError when another process is computing the same study and profile. Before anything is written:
    ParameterError when a registered study's run into the outputs root names a profile without a
    ``params/<profile>.yaml`` (a notebook's ``-p profile myexp``), OutputsUnwritable when its folders cannot be
    written, ExecutorUnavailable when the Ray cluster at ``address`` cannot be joined."""
    isa_restriction()  # torch's CPU libraries held to an instruction set in part: refused before any work
    study = get_study(study) if isinstance(study, str) else study
    check_arguments(study, cfg, executor, address)
    interim = interim_selection() if select is None else None
    if interim is not None:
        select = selector(interim)
    if paths is None or paths.root is None:  # into the outputs root, as a notebook's run: a profile's folder
        unknown = unknown_profile(profile, notebook=True) if study_ref(study) == study.name and \
            not profile.startswith("custom-") else None
        if unknown:  # a folder of no profile, which git does not ignore, computed with the notebook's defaults
            raise ParameterError(unknown)
    ray_address = executor.address if isinstance(executor, RayExecutor) else address if executor == "ray" else None
    if ray_address:  # a cluster: joined before anything is written, so a wrong address leaves nothing behind
        connect_ray(ray_address, root=paths.root if paths is not None else None)
    paths = (paths or StudyPaths(study.name, profile)).ensure()
    device = models.resolve_device(cfg.device)
    store = ResultStore(paths.cells, study.fingerprint(cfg, device), check=getattr(study, "check_record", None))
    with store.lock(owner=f"study {study.name}, profile {profile}"):
        store.remove_temporary()  # a killed run's unfinished writes (never under a cell's name)
        try:
            store.check_compatible()
        except StaleResultsError as exc:
            why = "" if getattr(exc, "copied_in", False) else changed_parameters(paths, cfg, study)
            raise StaleResultsError(f"study {study.name!r}, profile {profile!r}: {exc}{why}") from None
        return _run_locked(study, cfg, profile, paths, device, store, executor, address, progress, select,
                           sources, interim)


# Where a parameter's value came from, as run_meta.json's "param_sources" records it (explicit values win over a
# profile file's or a -f file's section, which win over the notebook's parameters cell).
SOURCE_PROFILE = "profile file params/{profile}.yaml"  # the batch runner's notebooks and cells: the profile's section
SOURCE_EXPLICIT = "explicit (papermill -p / -y, a top-level key of a -f file)"
SOURCE_SECTION = "the study's section of a papermill -f file"
SOURCE_NOTEBOOK = "notebook default (its parameters cell)"
SOURCE_DEFAULT = "default (the study's Config)"
SOURCE_CALLER = "set by the calling code"
SOURCE_RUNNER = "the batch runner (display only)"


def _notebook_namespace() -> dict | None:
    """The namespace of the study notebook this process runs as a kernel (its plumbing cells' variables present),
    else None."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    ns = getattr(shell, "user_ns", None)
    if isinstance(ns, dict) and isinstance(ns.get("_namespace"), dict) \
            and isinstance(ns.get("_globals_before_parameters"), set):
        return ns
    return None


def parameter_origins(study: Study, cfg, profile: str, overrides: dict | None = None,
                      runner: tuple[str, ...] = ()) -> dict[str, str]:
    """``{parameter: where its value came from}`` for every field of ``cfg`` (the ``SOURCE_*`` texts).

    ``overrides``: the profile's section the batch runner's driver built ``cfg`` from (``runner``: the keys it set
    itself). Otherwise, in a study notebook's kernel, what the notebook received (the injected cell, a ``-f``
    file's section, the parameters cell: :func:`~headprune_utils.studies.config.parameter_sources`); in the batch
    runner's kernels (staged outputs) the injected values are the profile file's. Elsewhere (a library call), a
    value equal to the study's default is the default, any other the caller's. A value that differs from what the
    notebook received was set by the notebook's own code."""
    values = as_dict(cfg)
    profile_file = SOURCE_PROFILE.format(profile=profile)
    if overrides is not None:
        return {k: SOURCE_RUNNER if k in runner else profile_file if k in overrides else SOURCE_DEFAULT
                for k in values}
    ns = _notebook_namespace()
    if ns is not None:
        try:
            received, found, _ = parameter_sources(ns["_namespace"], ns["_globals_before_parameters"], study=study.name)
        except Exception:  # noqa: BLE001 - the notebook already refused its parameters, or they are not its study's
            received, found = None, {}
        if received is not None:
            staged = os.environ.get(STAGED_ENV) == "1"
            out = {}
            for k, v in values.items():
                if k in received and received[k] != v:
                    out[k] = SOURCE_CALLER
                elif found.get(k) == "explicit":
                    out[k] = (SOURCE_RUNNER if k in _RUNNER_SET else profile_file) if staged else SOURCE_EXPLICIT
                elif found.get(k) == "section":
                    out[k] = SOURCE_SECTION
                elif k in received:
                    out[k] = SOURCE_NOTEBOOK
                else:  # not in the parameters cell: the study's own default
                    out[k] = SOURCE_DEFAULT
            return out
    defaults = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
                for f in dataclasses.fields(cfg)}
    return {k: SOURCE_DEFAULT if k in defaults and defaults[k] == v else SOURCE_CALLER for k, v in values.items()}


_RUNNER_SET = ("progress",)  # what the batch runner injects into its notebooks besides the profile's section


def changed_parameters(paths: StudyPaths, cfg, study: Study) -> str:
    """Which parameters differ from the stored run's (its run_meta.json), by name; '' when unknown."""
    try:  # the last COMPLETE run's record (not a staging folder's)
        meta = json.loads((paths.dir / "run_meta.json").read_text())
        before = {**meta["params"], **{f"data {k}": v for k, v in meta.get("data_fingerprints", {}).items()}}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""
    now = portable({**as_dict(cfg), **study.run_params(cfg),
                    **{f"data {k}": v for k, v in study.data_fingerprints(cfg).items()}})
    show = lambda v: "(not recorded)" if v is None else repr(v)  # noqa: E731
    diff = [f"{k}: {show(before.get(k))} -> {show(now.get(k))}" for k in sorted(set(before) | set(now))
            if before.get(k) != now.get(k) and k not in ("progress",)]
    if not diff:
        return (" No parameter or data file differs from the stored run (run_meta.json): the code that computes "
                "the cells changed (a results or training version).")
    return " Parameters that differ from the stored run (run_meta.json): " + "; ".join(diff) + "."


def _run_locked(study: Study, cfg, profile: str, paths: StudyPaths, device, store: ResultStore, executor, address,
                progress, select=None, sources: dict[str, str] | None = None,
                interim: dict[str, set[str]] | None = None) -> pd.DataFrame:
    cells = study.plan(cfg)
    check_plan(cells)
    planned_total = len(cells)
    done = {c.key for c in cells if store.has(c.axes)}
    by_key = {c.key: c for c in cells}
    if select is not None:  # the selected cells and, transitively, what they require
        keep = {c.key for c in selected_cells(cells, select)}
        if interim is not None:  # an interim render: the selection alone, every cell of it stored
            missing = [c.key for c in cells if c.key in keep and c.key not in done]
            if not keep or missing:
                raise InterimIncomplete(
                    f"{study.name} ({profile}): an interim render over {selection_text(interim)} needs every "
                    f"selected cell stored; " + (f"{len(missing)} of {len(keep)} are not (e.g. {missing[0]}): "
                                                 "compute them first (--cells-only --where ...)" if missing else
                                                 "no planned cell matches the selection"))
            if len(keep) == len(cells):  # the selection is the whole plan: a full render, nothing to label
                interim = None
            cells = [c for c in cells if c.key in keep]
        else:
            cells = [c for c in cells if c.key in keep or c.key in done]
    todo = [c for c in cells if c.key not in done]
    ex = make_executor(executor, address)
    if todo and ex.name in ("local", "process"):  # this machine computes them: refused before any work if another
        refuse_other_machine(study, store, cells, done, todo, machine_kind(device), profile)  # kind began the slice
    t0 = time.perf_counter()
    failed: dict[str, str] = {}
    skipped: dict[str, str] = {}
    show = cfg.progress if progress is None else progress
    if todo:
        # the batch runner's notebooks (staged) tell it their progress through a file in their staging folder
        status_file = paths.staging / STATUS_FILE if paths.staged else None
        shown = Progress(study.name, todo, show, status_file)

        counted: set[str] = set()

        def store_outcome(o: Outcome) -> None:
            if o.status == "done":
                store.put(dict(by_key[o.key].axes), o.result)
            if o.key in by_key and o.key not in counted:  # a study's stray or repeated result moves no count
                counted.add(o.key)
                shown.on_cell(o.key)

        try:
            read = lambda k: store.get(dict(by_key[k].axes))["result"]  # noqa: E731
            with phases.listening(shown.on_phase):
                ex.start(study=study, cfg=cfg, device=device, paths=paths, profile=profile)
                # every executor alike: outcomes are stored the moment they arrive (the local one's cell by cell)
                failed, skipped = schedule(cells, done, ex.submit, ex.wait, read, store_outcome,
                                           max_in_flight=ex.max_in_flight)
        finally:
            shown.close()
            ex.close()
    stored = [c for c in cells if store.has(c.axes)]
    table = store.table([dict(c.axes) for c in stored])
    check_one_model(table, study.name, study.model_axes, profile)
    durations = {"this_run": time.perf_counter() - t0,
                 "cells_total": float(table["seconds"].sum()) if "seconds" in table else 0.0,
                 "cells_computed_now": len(todo) - len(failed) - len(skipped), "cells_reused": len(done)}
    params = {**as_dict(cfg), **study.run_params(cfg)}
    meta = run_metadata(study.name, profile, params, list(getattr(cfg, "seeds", [])), device, durations, store.fingerprint)
    meta["executor"] = ex.name
    meta["param_sources"] = sources or parameter_origins(study, cfg, profile)
    meta["data_fingerprints"] = study.data_fingerprints(cfg)
    if interim is not None:  # what the summary, the report and the notebook's findings say of an interim render
        meta["interim"] = {"where": {k: sorted(v) for k, v in sorted(interim.items())}, "cells": len(stored),
                           "planned": planned_total}
        paths.tables.mkdir(parents=True, exist_ok=True)
        atomic_write_json(paths.tables / INTERIM_FILE, meta["interim"])
    atomic_write_json(paths.meta, meta)
    if failed or skipped:
        raise CellsFailed(study.name, failed, skipped)
    # every GLUE task in the metric its claims are decided on (MRPC: accuracy)
    return study.scored(verdict_scores(table))

