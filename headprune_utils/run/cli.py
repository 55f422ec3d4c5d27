"""Batch runner: execute the study notebooks through papermill into ``outputs/<study>/<profile>/``.

    python -m headprune_utils.run --profile quick              # every study
    python -m headprune_utils.run --profile smoke --only random_pruning
    python -m headprune_utils.run --profile quick --check      # validate parameters only
    python -m headprune_utils.run --profile paper --plan       # every cell, its requirements and cost; runs nothing
    python -m headprune_utils.run --profile standard --plan --plan-slices   # the slices of a long run still to compute
    python -m headprune_utils.run --profile paper --executor ray --address auto   # cells on a Ray cluster

Every study's parameters (``params/<profile>.yaml`` over the notebook defaults) are validated before
any notebook starts: an unknown key, a wrong type, an unknown task/model or an impossible budget stops
the run at once. Studies resume: finished result cells are reused. ``--fresh`` first moves earlier
results aside (``<profile>.bak-<time>``), never deleting them. A failing notebook stops the run with a
non-zero exit naming the notebook and the cell; the executed notebook (with the traceback) is kept.

``--executor ray`` first computes every planned cell of the selected studies as Ray tasks (this process is the
driver and the only writer of results; see :mod:`headprune_utils.run.execution`), then renders the notebooks, which
find every cell stored (``--cells-only`` stops after the cells).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import threading
import sys
import time
from pathlib import Path

from headprune_utils.studies.config import PROFILES, ParameterError, load_profile, validate
from headprune_utils.store.paths import RUN_OUTPUTS, STAGED_ENV, StudyPaths, notebooks_dir, project_root
from headprune_utils.studies import STUDIES

QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
}


KERNEL = "headprune"


class CellProgress:
    """A terminal progress bar over the result cells a study has written (polled in a thread)."""

    def __init__(self, cells_dir: Path, total: int, desc: str, interval: float = 2.0):
        self.cells_dir, self.total, self.desc, self.interval = cells_dir, total, desc, interval
        self._stop = threading.Event()

    def _count(self) -> int:
        return len(list(self.cells_dir.glob("*.json"))) if self.cells_dir.exists() else 0

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.bar.update(min(self._count(), self.total) - self.bar.n)

    def __enter__(self):
        from tqdm import tqdm

        self.bar = tqdm(total=self.total, initial=min(self._count(), self.total), desc=self.desc, unit="cell")
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.bar.update(min(self._count(), self.total) - self.bar.n)
        self.bar.close()
        return False


class StudyFailed(RuntimeError):
    pass


def validate_profile(profile: str, only: list[str] | None = None) -> dict[str, dict]:
    """``{study: overrides}`` for the selected studies, all validated (raises ParameterError)."""
    sections = load_profile(profile)
    unknown = sorted(set(sections) - set(STUDIES))
    if unknown:
        raise ParameterError(f"params/{profile}.yaml: unknown stud(y/ies) {unknown}; known: {sorted(STUDIES)}")
    selected = only or list(STUDIES)
    for name in selected:
        if name not in STUDIES:
            raise ParameterError(f"--only {name!r}: unknown study; known: {sorted(STUDIES)}")
    from headprune_utils.studies.config import profile_lines

    lines = profile_lines(profile)
    out, errors = {}, []
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


def _relative(path: Path) -> str:
    return os.path.relpath(path, project_root())


def move_aside(paths: StudyPaths) -> Path | None:
    if not paths.dir.exists():
        return None
    backup = paths.dir.with_name(f"{paths.dir.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}")
    paths.dir.rename(backup)
    return backup


def _failed_cell_first_line(notebook: Path) -> str:
    """First source line of the cell whose output holds the error (papermill also adds a banner cell)."""
    import nbformat

    try:
        for cell in nbformat.read(notebook, as_version=4).cells:
            if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                return cell.source.splitlines()[0][:80]
    except Exception:  # the message must not fail over a detail
        pass
    return "?"


def execute_study(name: str, profile: str, overrides: dict, progress: bool = True) -> float:
    """Run one study notebook with papermill; returns seconds. Raises StudyFailed naming the cell."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    study = STUDIES[name]
    paths = StudyPaths(name, profile, staged=True)
    paths.dir.mkdir(parents=True, exist_ok=True)
    # the notebook writes its figures, tables, metrics and metadata into the staging folder; they replace the
    # earlier ones only when the whole notebook succeeded (a failed run leaves the earlier outputs untouched)
    shutil.rmtree(paths.staging, ignore_errors=True)
    root = project_root()
    src = notebooks_dir() / study.notebook
    # executed into a side file, renamed over the earlier notebook only on success: a failed or refused
    # run never replaces earlier results
    running = paths.notebook.with_suffix(".running.ipynb")
    failed = paths.notebook.with_suffix(".failed.ipynb")
    t0 = time.perf_counter()
    cwd = os.getcwd()
    os.chdir(root)  # relative paths, run from the project root: nothing machine-specific in the notebook
    # the notebook itself stays free of bars (they would only land in its outputs); the runner shows
    # progress from the finished result cells
    parameters = {**overrides, "profile": profile, "progress": False}
    watcher = contextlib.nullcontext()
    if progress:
        cfg = validate(study.Config, overrides, where=name)
        watcher = CellProgress(paths.cells, study.n_cells(cfg), desc=f"{name} cells")
    try:
        with watcher, staged_kernels():
            pm.execute_notebook(
                _relative(src), _relative(running), parameters=parameters,
                kernel_name=kernel_name(), cwd=".", progress_bar=False, log_output=False,
                kernel_manager_class=ipc_kernel_manager(),
            )
    except PapermillExecutionError as exc:
        running.replace(failed)
        first_line = _failed_cell_first_line(failed)
        raise StudyFailed(
            f"study {name!r} failed in notebook {_relative(src)}, cell {exc.cell_index} "
            f"(0-based, the injected-parameters cell included; the cell starts {first_line!r}): "
            f"{exc.ename}: {exc.evalue}\n"
            f"the executed notebook with the traceback: {_relative(failed)}; its partial outputs: "
            f"{_relative(paths.staging)}; the earlier outputs in {_relative(paths.dir)} are untouched"
        ) from None
    finally:
        os.chdir(cwd)
    promote(paths)
    _finalise(running, paths.notebook, name, profile)
    failed.unlink(missing_ok=True)
    return time.perf_counter() - t0


_STAGED_LOCK = threading.Lock()
_STAGED_USERS = [0, None]  # kernels being started or running with staged outputs; the variable's earlier value


@contextlib.contextmanager
def staged_kernels():
    """``HEADPRUNE_STAGED_OUTPUTS=1`` in this process's environment while notebooks execute (their kernels inherit
    it, so they write into the staging folder), restored when the last of several side-by-side runs ends."""
    with _STAGED_LOCK:
        if _STAGED_USERS[0] == 0:
            _STAGED_USERS[1] = os.environ.get(STAGED_ENV)
            os.environ[STAGED_ENV] = "1"
        _STAGED_USERS[0] += 1
    try:
        yield
    finally:
        with _STAGED_LOCK:
            _STAGED_USERS[0] -= 1
            if _STAGED_USERS[0] == 0:
                if _STAGED_USERS[1] is None:
                    os.environ.pop(STAGED_ENV, None)
                else:
                    os.environ[STAGED_ENV] = _STAGED_USERS[1]


def promote(paths: StudyPaths) -> None:
    """Swap a successful run's staged outputs into the study's folder: each of figures/, tables/, metrics.json,
    run_meta.json the run wrote replaces the earlier one whole (no stale figure survives); cells stay."""
    trash = paths.dir / f".replaced-{os.getpid()}"
    shutil.rmtree(trash, ignore_errors=True)
    for item in RUN_OUTPUTS:
        new = paths.staging / item
        if not (new.exists() or new.is_symlink()):
            continue
        old = paths.dir / item
        if old.exists():
            trash.mkdir(exist_ok=True)
            old.rename(trash / item)
        new.rename(old)
    shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(paths.staging, ignore_errors=True)


def _finalise(running: Path, final: Path, name: str, profile: str) -> None:
    """Record the final name in papermill's metadata, put "What this study found" (from the verdict table just
    promoted) after the notebook's title, and move the notebook into place atomically."""
    import nbformat

    from headprune_utils.run.summary import inject_findings, study_findings_markdown

    nb = nbformat.read(running, as_version=4)
    nb.metadata.setdefault("papermill", {})["output_path"] = _relative(final)
    inject_findings(nb, study_findings_markdown(name, profile))
    nbformat.write(nb, running)
    running.replace(final)


def kernel_name() -> str:
    """The project's own kernel (``make env`` installs it into the venv) when present, else ``python3``."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        if KERNEL in KernelSpecManager().find_kernel_specs():
            return KERNEL
    except Exception:  # no kernelspec machinery: papermill will say what is missing
        pass
    return "python3"


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


def ipc_kernel_manager():
    """A kernel manager talking to its kernel over IPC sockets in the temporary folder, not TCP: no "running over
    TCP without encryption" warning from every kernel in the terminal (nor an open local port)."""
    import tempfile
    import uuid

    from jupyter_client.manager import AsyncKernelManager

    class IPCKernelManager(AsyncKernelManager):
        transport = "ipc"

        def _ip_default(self):  # the socket files' prefix: under the temporary folder, never the checkout
            return os.path.join(tempfile.gettempdir(), f"headprune-kernel-{uuid.uuid4().hex[:12]}")

    return IPCKernelManager


PROGRESS_SECONDS = 60.0  # between progress lines of the studies running side by side


def progress_line(name: str, profile: str, overrides: dict, elapsed: float) -> str:
    """``"  random_pruning: 40/84 cells stored, 3 min 10 s elapsed, about 4 min left"`` (the rate of this run's
    newly stored cells; no estimate before the first one). The planned cells are counted once per study."""
    from headprune_utils.store.results import cell_key

    if name not in _PLANNED:
        from headprune_utils.studies.config import validate

        study = STUDIES[name]
        cfg = validate(study.Config, {**overrides, "progress": False})
        cells_dir = StudyPaths(name, profile, staged=False).cells
        keys = {cell_key(dict(c.axes)) for c in study.plan(cfg)}
        _PLANNED[name] = (keys, cells_dir, sum((cells_dir / f"{k}.json").exists() for k in keys))
    keys, cells_dir, at_start = _PLANNED[name]
    stored = sum((cells_dir / f"{k}.json").exists() for k in keys)
    new, left = stored - at_start, len(keys) - stored
    mins = lambda t: f"{int(t // 60)} min {int(t % 60):02d} s"  # noqa: E731
    eta = f", about {mins(left * elapsed / new)} left" if new > 0 and left > 0 else ""
    return f"  {name}: {stored}/{len(keys)} cells stored, {mins(elapsed)} elapsed{eta}"


_PLANNED: dict[str, tuple[set, Path, int]] = {}


def verdict_summary(plan: dict[str, dict], profile: str) -> str:
    """Where each study's executed notebook and verdicts are, and how many verdicts of each word it holds."""
    import pandas as pd

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
        lines.append(f"  {name}: {counts or 'none'} -> {_relative(paths.dir)}/")
    return "\n".join(lines)


def run_side_by_side(plan: dict[str, dict], profile: str, jobs: int) -> bool:
    """Run the studies of ``plan`` in up to ``jobs`` kernels at once, in plan order; True when all succeed.

    Each kernel gets ``threads_per_job`` torch threads (``OMP_NUM_THREADS``, unless already set): on a small
    CPU one thread per study side by side does more work per second than one study on every core, and a
    thread pool shared with another busy process stalls. The caches the studies share (fine-tuned models,
    masked fine-tunings) are filled under file locks, so a model needed by two studies is trained once.
    After a failure no further study starts; those running finish. Progress: a line per start and end, and every
    ``PROGRESS_SECONDS`` one line per running study (:func:`progress_line`).
    """
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

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
                    print(f"start {name} ({profile}) -> {_relative(StudyPaths(name, profile).dir)}", flush=True)
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


def _writable(path: Path) -> bool:
    """Whether ``path`` (or, where it does not exist yet, its nearest existing parent) can be written to."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return os.access(p, os.W_OK | os.X_OK)


def preflight(plan: dict[str, dict], profile: str, read_data: bool = False, stale: bool = True) -> list[str]:
    """Problems found without heavy work: outputs that cannot be written, stored cells of other parameters
    (naming the parameters that changed), and with ``read_data`` task data that is missing or unreadable."""
    from headprune_utils.tasks import data
    from headprune_utils.model import models
    from headprune_utils.studies.config import validate
    from headprune_utils.run.execution import changed_parameters
    from headprune_utils.store.results import CorruptCellError, ResultStore, StaleResultsError

    problems = []
    for name, overrides in plan.items():
        study = STUDIES[name]
        cfg = validate(study.Config, overrides, where=f"params/{profile}.yaml [{name}]")
        paths = StudyPaths(name, profile, staged=False)
        if not _writable(paths.dir) or (paths.dir.exists() and not _writable(paths.dir.parent)):
            problems.append(f"{name}: the outputs folder {_relative(paths.dir)} cannot be written (permissions)")
            continue
        if not hasattr(study, "fingerprint"):  # not a study of the protocol (a bare notebook): nothing to check
            continue
        device = models.resolve_device(getattr(cfg, "device", "cpu"))
        try:
            if stale and paths.cells.exists():  # read only: a check moves nothing (no quarantine)
                ResultStore(paths.cells, study.fingerprint(cfg, device), quarantine=False).check_compatible()
        except StaleResultsError as exc:
            problems.append(f"{name}: {exc}{changed_parameters(paths, cfg, study)}")
        except (data.DataFormatError, CorruptCellError) as exc:
            problems.append(f"{name}: {exc}")
        if read_data:
            for key, digest in study.data_fingerprints(cfg).items():
                if "/" not in key or digest == "hub":
                    continue
                task, split = key.split("/", 1)
                try:
                    data.load_task(task, split, cfg.data_dir, allow_hub=False)
                except (data.DataFormatError, data.DataUnavailableError, OSError) as exc:
                    problems.append(f"{name}: task data {key}: {exc}")
    return problems


def print_plan(plan: dict[str, dict], profile: str, gpu_tflops: float, cpu_gflops: float, cells: bool = True) -> None:
    """Every selected study's cells (key, group, requirements, estimated cost) and totals; runs nothing. Where
    cells of the current parameters are stored, also what they took (their recorded seconds) and the projected
    total: the FLOP estimate of every planned cell scaled by the study's measured seconds per estimated FLOP."""
    from headprune_utils.measure import costs
    from headprune_utils.model import models
    from headprune_utils.studies.config import validate
    from headprune_utils.store.results import ResultStore

    rows = []
    with models.planning():
        for name, overrides in plan.items():
            study = STUDIES[name]
            cfg = validate(study.Config, overrides, where=f"params/{profile}.yaml [{name}]")
            planned = study.plan(cfg)
            flops = sum(c.cost.flops for c in planned)
            groups = {c.group for c in planned if c.group is not None}
            n_req = sum(1 for c in planned if c.requires)
            store = ResultStore(StudyPaths(name, profile, staged=False).cells,
                                study.fingerprint(cfg, models.resolve_device(cfg.device)), quarantine=False)
            done_flops = done_seconds = 0.0
            n_done = 0
            for c in planned:
                try:
                    rec = store.get(dict(c.axes))["result"] if store.has(dict(c.axes)) else None
                except Exception:  # noqa: BLE001 - a plan never fails over a stored cell (stale, corrupt)
                    rec = None
                if rec is not None and isinstance(rec.get("seconds"), (int, float)):
                    n_done += 1
                    done_seconds += float(rec["seconds"])
                    done_flops += c.cost.flops
            projected = flops * done_seconds / done_flops / 3600 if done_flops > 0 else None
            rows.append((name, len(planned), len(groups), n_req, flops, n_done, done_seconds / 3600, projected))
            print(f"== {name} ({profile}): {len(planned)} cells, {len(groups)} groups, {n_req} with requirements, "
                  f"{costs.fmt_flops(flops)}")
            if cells:
                for c in planned:
                    extra = f"  group={c.group}" if c.group is not None else ""
                    extra += f"  requires={','.join(c.requires)}" if c.requires else ""
                    print(f"  {c.key}  {costs.fmt_flops(c.cost.flops)}{extra}")
    total = sum(r[4] for r in rows)
    measured = any(r[5] for r in rows)
    head = f"\n{'study':<22}{'cells':>7}{'groups':>8}{'req.':>6}{'estimated':>14}{'GPU-hours':>11}{'CPU-hours':>11}"
    print(head + (f"{'stored':>8}{'took (h)':>10}{'projected':>11}" if measured else ""))
    proj_total = sum(r[7] if r[7] is not None else r[4] / (cpu_gflops * 1e9) / 3600 for r in rows)
    for r in rows + [("total", sum(r[1] for r in rows), sum(r[2] for r in rows), sum(r[3] for r in rows), total,
                      sum(r[5] for r in rows), sum(r[6] for r in rows), proj_total)]:
        name, n, g, q, f, n_done, took, proj = r
        line = (f"{name:<22}{n:>7}{g:>8}{q:>6}{costs.fmt_flops(f):>14}{f / (gpu_tflops * 1e12) / 3600:>11.2f}"
                f"{f / (cpu_gflops * 1e9) / 3600:>11.2f}")
        if measured:
            line += f"{n_done:>8}{took:>10.2f}" + (f"{proj:>11.2f}" if proj is not None else f"{'-':>11}")
        print(line)
    print(f"GPU-hours at a sustained {gpu_tflops:g} TFLOP/s (--gpu-tflops), CPU-hours at {cpu_gflops:g} GFLOP/s "
          f"(--cpu-gflops; about what MiniLM fine-tuning sustains on the 2-core CPU, benchmarks/README.md). "
          f"Estimates from the model's shape and the data's token counts (headprune_utils/measure/costs.py), not measurements.")
    if measured:
        print("stored / took: the cells of these parameters already stored and the seconds they recorded (one "
              "thread each; shared models trained once are not in them); projected: every planned cell's estimate "
              "scaled by its study's measured seconds per estimated FLOP (the total takes the plain estimate where "
              "a study has no stored cell), in single-thread hours.")


def missing_cells(plan: dict[str, dict], profile: str) -> dict[str, tuple[int, int, str]]:
    """``{study: (missing, planned, an example key)}`` for the studies of ``plan`` whose planned cells are not all
    stored (of the current parameters); complete studies are left out. Reads only the cell files."""
    from headprune_utils.model import models
    from headprune_utils.store.results import ResultStore

    gaps = {}
    for name, overrides in plan.items():
        study = STUDIES[name]
        cfg = validate(study.Config, {**overrides, "progress": False}, where=f"params/{profile}.yaml [{name}]")
        with models.planning():
            cells = study.plan(cfg)
        store = ResultStore(StudyPaths(name, profile, staged=False).cells,
                            study.fingerprint(cfg, models.resolve_device(cfg.device)), quarantine=False)
        missing = [c for c in cells if not store.has(dict(c.axes))]
        if missing:
            gaps[name] = (len(missing), len(cells), missing[0].key)
    return gaps


SLICE_AXES = (("task", "seed"), ("model_seed",), ("task",))  # what selects one trained model: GLUE, translation, a task


def slice_counts(plan: dict[str, dict], profile: str) -> list[tuple[str, str, int, int]]:
    """``[(study, where, stored, planned)]``: every study's cells grouped by the model they belong to (task and
    seed for the GLUE studies, ``model_seed`` for the translation study; the whole study when its cells have
    neither), with the ``--where`` arguments that select that slice. Reads only the cell files."""
    from headprune_utils.model import models
    from headprune_utils.store.results import ResultStore

    out = []
    for name, overrides in plan.items():
        study = STUDIES[name]
        cfg = validate(study.Config, {**overrides, "progress": False}, where=f"params/{profile}.yaml [{name}]")
        with models.planning():
            cells = study.plan(cfg)
        store = ResultStore(StudyPaths(name, profile, staged=False).cells,
                            study.fingerprint(cfg, models.resolve_device(cfg.device)), quarantine=False)
        counts: dict[str, list[int]] = {}
        for c in cells:
            axes = dict(c.axes)
            keys = next((k for k in SLICE_AXES if set(k) <= set(axes)), ())
            where = " ".join(f"{k}={axes[k]}" for k in keys)
            n = counts.setdefault(where, [0, 0])
            n[0] += int(store.has(axes))
            n[1] += 1
        out += [(name, where, done, total) for where, (done, total) in counts.items()]
    return out


def print_slices(plan: dict[str, dict], profile: str) -> None:
    """The incomplete slices of every study (:func:`slice_counts`), one line each with the command's ``--only``
    and ``--where`` arguments, and the complete ones counted."""
    rows = slice_counts(plan, profile)
    for name in plan:
        mine = [r for r in rows if r[0] == name]
        done = [r for r in mine if r[2] == r[3]]
        print(f"== {name} ({profile}): {len(done)} of {len(mine)} slices complete, "
              f"{sum(r[2] for r in mine)} of {sum(r[3] for r in mine)} cells stored")
        for _, where, stored, planned in mine:
            if stored < planned:
                arg = f" --where {where}" if where else ""
                print(f"  {stored:>5}/{planned:<5} --only {name}{arg}")


def parse_where(items: list[str] | None) -> dict[str, set[str]]:
    """``["task=SST-2", "seed=0", "seed=1"]`` -> ``{"task": {"SST-2"}, "seed": {"0", "1"}}`` (``--where``)."""
    out: dict[str, set[str]] = {}
    for item in items or []:
        axis, sep, value = item.partition("=")
        if not sep or not axis or not value:
            raise ValueError(f"--where takes AXIS=VALUE (e.g. task=SST-2 seed=0), got {item!r}")
        out.setdefault(axis, set()).add(value)
    return out


def selector(where: dict[str, set[str]]):
    """``select(axes)`` for ``run_study``: a cell matches when every ``where`` axis it has holds one of the given
    values (floats compared as ``%g``: ``fraction=0.5``); axes a cell does not have do not filter it."""
    if not where:
        return None
    fmt = lambda v: f"{v:g}" if isinstance(v, float) else str(v)  # noqa: E731
    return lambda axes: all(fmt(axes[k]) in vals for k, vals in where.items() if k in axes)


def compute_cells(plan: dict[str, dict], profile: str, executor: str, address: str | None,
                  where: dict[str, set[str]] | None = None) -> bool:
    """Every planned cell of the studies in ``plan`` (only those matching ``where``: :func:`selector`) through
    ``executor`` (one instance for all); True when all succeeded. A failed study is reported and the next one
    still runs (its cells are independent)."""
    from headprune_utils.studies.config import validate
    from headprune_utils.run.execution import CellsFailed, make_executor, run_study

    ex = make_executor(executor, address)
    ok = True
    for name, overrides in plan.items():
        study = STUDIES[name]
        cfg = validate(study.Config, {**overrides, "progress": False}, where=f"params/{profile}.yaml [{name}]")
        t0 = time.perf_counter()
        print(f"cells of {name} ({profile}) on {executor}", flush=True)
        try:
            table = run_study(study, cfg, profile, executor=ex, progress=True, select=selector(where or {}))
            print(f"cells of {name}: {len(table)} stored in {time.perf_counter() - t0:.0f} s", flush=True)
        except CellsFailed as exc:
            ok = False
            print(f"error: {exc}", file=sys.stderr, flush=True)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headprune_utils.run", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="quick", help=f"parameter profile: one of {PROFILES} or another params/*.yaml")
    parser.add_argument("--only", nargs="+", metavar="STUDY", help=f"run only these studies: {', '.join(STUDIES)}")
    parser.add_argument("--fresh", action="store_true", help="move earlier results of these studies aside first (kept as a backup)")
    parser.add_argument("--fresh-caches", action="store_true",
                        help="move the profile's shared model caches aside first (outputs/_finetuned/<profile>, "
                             "outputs/_nmt/<profile>; kept as a backup): every model is trained again")
    parser.add_argument("--check", action="store_true", help="validate the parameters and stop")
    parser.add_argument("--plan", action="store_true",
                        help="print every cell, its requirements and estimated cost, and the totals; run nothing")
    parser.add_argument("--plan-summary", action="store_true", help="with --plan: the totals only, not every cell")
    parser.add_argument("--plan-slices", action="store_true",
                        help="with --plan: per study, the slices (one trained model each) not yet complete, with "
                             "their stored / planned cells and the --where that computes each; run nothing")
    parser.add_argument("--gpu-tflops", type=float, default=100.0, help="--plan: sustained GPU throughput for GPU-hours (default 100)")
    parser.add_argument("--cpu-gflops", type=float, default=58.0, help="--plan: sustained CPU throughput for CPU-hours (default 58)")
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="where cells run: in each notebook's kernel (local, default) or as Ray tasks, before the notebooks")
    parser.add_argument("--address", default=None,
                        help="--executor ray: a Ray cluster to join ('auto', 'ray://host:10001'); default: a local Ray instance")
    parser.add_argument("--cells-only", action="store_true", help="compute the cells and stop (no notebooks)")
    parser.add_argument("--where", nargs="+", metavar="AXIS=VALUE",
                        help="with --cells-only: only the cells whose axes match (e.g. task=SST-2 seed=0 "
                             "regime=mask_then_finetune; repeat an axis for several values), and what they require: "
                             "a slice of a long run, e.g. every cell of one fine-tuned model in one session")
    parser.add_argument("--from-cells", action="store_true",
                        help="render the notebooks from the stored cells only: stop before any work, naming what is "
                             "missing, if a planned cell is not stored (e.g. the committed standard cells on a fresh "
                             "clone: minutes, no training)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--jobs", type=int, default=1,
                        help="studies run side by side (default 1); each kernel then gets cores/jobs torch threads")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        print(f"error: --jobs must be >= 1, got {args.jobs}", file=sys.stderr)
        return 2
    if args.address and args.executor != "ray":
        print("error: --address is for --executor ray", file=sys.stderr)
        return 2
    for flag in ("plan_summary", "plan_slices"):
        if getattr(args, flag) and not args.plan:
            print(f"error: --{flag.replace('_', '-')} is for --plan", file=sys.stderr)
            return 2
    if args.where and not args.cells_only:
        print("error: --where is for --cells-only (a notebook analyses every cell of its study)", file=sys.stderr)
        return 2
    if args.from_cells and (args.cells_only or args.fresh or args.executor != "local"):
        print("error: --from-cells renders stored cells; it does not go with --cells-only, --fresh or --executor",
              file=sys.stderr)
        return 2
    try:
        where = parse_where(args.where)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for flag in ("gpu_tflops", "cpu_gflops"):
        value = getattr(args, flag)
        if not (value > 0 and value != float("inf")):
            print(f"error: --{flag.replace('_', '-')} must be a positive number, got {value}", file=sys.stderr)
            return 2

    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)
    try:
        if args.plan:
            from headprune_utils.model import models

            with models.planning():
                plan = validate_profile(args.profile, args.only)
            if args.plan_slices:
                print_slices(plan, args.profile)
            else:
                print_plan(plan, args.profile, args.gpu_tflops, args.cpu_gflops, cells=not args.plan_summary)
            return 0
        plan = validate_profile(args.profile, args.only)
    except Exception as exc:  # every validation failure (parameters, model, data) is a clear, early stop
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        problems = preflight(plan, args.profile, read_data=args.check, stale=not args.fresh)
    except Exception as exc:  # a data file that cannot even be hashed, say
        problems = [str(exc)]
    if problems:
        print("error: " + "\nerror: ".join(problems), file=sys.stderr)
        if any("other parameters" in p for p in problems):
            print("(--fresh moves the earlier results aside, keeping them)", file=sys.stderr)
        return 2
    if args.from_cells:
        gaps = missing_cells(plan, args.profile)
        if gaps:
            print("error: --from-cells: cells are missing, so these studies would compute (stopped before any work):\n"
                  + "\n".join(f"  {name}: {n} of {total} planned cells not stored (e.g. {example})"
                               for name, (n, total, example) in gaps.items())
                  + f"\ncompute them first (e.g. headprune --profile {args.profile} --cells-only --only "
                  f"{' '.join(gaps)}), or render only the complete studies with --only", file=sys.stderr)
            return 2
    if args.check:
        print(f"parameters of profile {args.profile!r} are valid for: {', '.join(plan)}; outputs writable, "
              "no stored results of other parameters, task data readable")
        return 0
    if args.executor == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            print("error: --executor ray needs Ray: pip install -e '.[ray]'", file=sys.stderr)
            return 2
    total = time.perf_counter()
    if args.jobs > 1:
        plan = longest_first(plan, args.profile)  # before --fresh moves the last run's records aside
    if args.fresh:
        for name in plan:
            backup = move_aside(StudyPaths(name, args.profile))
            if backup:
                print(f"moved earlier results to {_relative(backup)}")
    if args.fresh_caches:
        p = StudyPaths("any", args.profile, staged=False)
        for cache in (p.finetuned_cache, p.nmt_cache):
            if cache.exists():
                backup = cache.with_name(f"{cache.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}")
                cache.rename(backup)
                print(f"moved the model cache {_relative(cache)} to {_relative(backup)}")
    if args.executor != "local" or args.cells_only:
        if not compute_cells(plan, args.profile, args.executor, args.address, where):
            return 1
        if args.cells_only:
            print(f"cells of {len(plan)} studies done in {time.perf_counter() - total:.0f} s")
            return 0
    if args.jobs == 1:
        for i, (name, overrides) in enumerate(plan.items(), 1):
            print(f"[{i}/{len(plan)}] {name} ({args.profile}) -> {_relative(StudyPaths(name, args.profile).dir)}", flush=True)
            try:
                seconds = execute_study(name, args.profile, overrides, progress=not args.no_progress)
            except StudyFailed as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
            print(f"[{i}/{len(plan)}] {name} done in {seconds:.0f} s", flush=True)
    elif not run_side_by_side(plan, args.profile, args.jobs):
        return 1
    print(f"all {len(plan)} studies done in {time.perf_counter() - total:.0f} s")
    print(verdict_summary(plan, args.profile))
    from headprune_utils.run.report import build_report
    from headprune_utils.run.summary import write_summary

    print(f"cross-study summary: {_relative(write_summary(args.profile))}")
    if args.profile in ("quick", "standard"):
        from headprune_utils.run.summary import update_readme

        try:
            if update_readme():
                print("README.md: the generated findings table is updated")
        except (OSError, ValueError) as exc:  # an installed package without the checkout's README
            print(f"README.md not updated: {exc}")
    try:
        build_report([args.profile])  # prints where the report is
    except ValueError as exc:  # the report is a view of the results, which are written: warn, do not fail the run
        print(f"warning: the report was not built: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
