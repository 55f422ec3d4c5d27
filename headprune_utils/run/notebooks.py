"""Executing one study's notebook with papermill, so that a failed run never costs the earlier results.

The notebook runs in a kernel of its own (the project's kernel when installed, talking over IPC sockets) from the
project root, with the profile's parameters injected. It writes its figures, tables, metrics and metadata into the
study's staging folder; only when the whole notebook succeeded are they and the executed notebook, with the study's
findings after its title, swapped into the study's folder (:func:`swap_in`), journalled: a run killed during the
swap is completed by the next start (:func:`recover_swap`) and named by ``--check`` (:func:`half_swap`). A failing
notebook raises :class:`StudyFailed` naming the notebook and the cell (or the cause: a kernel killed, a full disk,
a file-size limit), and keeps the executed notebook with its traceback beside the earlier one.

The runner holds a study's run lock (:func:`run_lock`) for as long as it changes the study's folder, and the study
lock (``ResultStore.lock``, the one a kernel takes while it computes cells) for each change it makes itself.
"""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator

import nbformat
import papermill as pm
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import DeadKernelError
from papermill.exceptions import PapermillExecutionError
from tqdm import tqdm

from headprune_utils.run import execution
from headprune_utils.run.stable import stable_styler_ids
from headprune_utils.run.summary import FINDINGS_TAG, inject_findings, study_findings_markdown
from headprune_utils.store.paths import RUN_OUTPUTS, STAGED_ENV, StudyPaths, notebooks_dir, project_root
from headprune_utils.store.results import ResultStore, StudyBusyError, atomic_write_json, atomic_write_text
from headprune_utils.studies import STUDIES
from headprune_utils.studies.config import validate

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: the runner's lock is a no-op there, as the study lock is
    fcntl = None

KERNEL = "headprune"


class StudyFailed(RuntimeError):
    pass


def relative(path: Path) -> str:
    """``path`` as the runner prints it: relative to the project root."""
    return os.path.relpath(path, project_root())


class CellProgress:
    """A terminal progress bar over the result cells a study has written (polled in a thread), with what the kernel
    runs now (loading, a model's training with epoch and step, the cell and the time left from the plan's costs:
    ``status_file``, written by the kernel's cells bar) in place of tqdm's count-based estimate."""

    def __init__(self, cells_dir: Path, total: int, desc: str, interval: float = 2.0, status_file: Path | None = None):
        self.cells_dir, self.total, self.desc, self.interval = cells_dir, total, desc, interval
        self.status_file = status_file
        self._stop = threading.Event()

    def _count(self) -> int:
        return sum(1 for p in self.cells_dir.glob("*.json") if not p.name.startswith(".")) if self.cells_dir.exists() else 0

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            if self.status_file is not None:
                self.bar.set_postfix_str(execution.read_status(self.status_file) or "", refresh=False)
            self.bar.update(min(self._count(), self.total) - self.bar.n)

    def __enter__(self):
        self.bar = tqdm(total=self.total, initial=min(self._count(), self.total), desc=self.desc, unit="cell",
                        bar_format="{desc}: {n_fmt}/{total_fmt} [{elapsed}{postfix}]")
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.bar.update(min(self._count(), self.total) - self.bar.n)
        self.bar.close()
        return False


def _failed_cell_first_line(notebook: Path) -> str:
    """First source line of the cell whose output holds the error (papermill also adds a banner cell)."""
    try:
        for cell in nbformat.read(notebook, as_version=4).cells:
            if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                return cell.source.splitlines()[0][:80]
    except Exception:  # the message must not fail over a detail
        pass
    return "?"


def notebook_problem(name: str, notebook: str) -> str | None:
    """What stops papermill from running study ``name``'s notebook (``notebook``: its file name in notebooks/) with a
    profile's values, found before any work,
    or None: the notebook unreadable, or no cell tagged ``parameters`` (papermill would inject the
    values at the top, the notebook's defaults would then override them: the kernel refuses it only after it
    started, a dozen lines of warnings in)."""
    src = notebooks_dir() / notebook
    if not src.is_file():  # papermill names it (and tests' fake studies have none)
        return None
    try:
        nb = nbformat.read(src, as_version=4)
    except Exception as exc:  # nbformat raises several kinds for a broken file
        return f"{name}: its notebook {relative(src)} cannot be read ({type(exc).__name__}: {exc})"
    if not any("parameters" in c.get("metadata", {}).get("tags", []) for c in nb.cells):
        return (f"{name}: {relative(src)} has no cell tagged 'parameters', so a profile's values cannot reach it: "
                "tag the cell that declares its parameters 'parameters' again (JupyterLab: the property inspector, "
                f"Cell Tags) or restore the file (git checkout -- {relative(src)})")
    return None


def execute_study(name: str, profile: str, overrides: dict, progress: bool = True) -> float:
    """Run one study notebook with papermill; returns seconds. Raises StudyFailed naming the cell, or the cause
    when the kernel died or a write failed (disk full, file-size limit), and StudyBusyError when another runner
    holds the study."""
    study = STUDIES[name]
    paths = StudyPaths(name, profile, staged=True)
    root = project_root()
    src = notebooks_dir() / study.notebook
    # executed into a side file, renamed over the earlier notebook only on success: a failed or refused
    # run never replaces earlier results
    running = paths.notebook.with_suffix(".running.ipynb")
    failed = paths.notebook.with_suffix(".failed.ipynb")
    t0 = time.perf_counter()
    # the notebook itself stays free of bars (they would only land in its outputs); the runner shows
    # progress from the finished result cells
    parameters = {**overrides, "profile": profile, "progress": False}
    watcher = contextlib.nullcontext()
    if progress and not os.environ.get(execution.SELECT_ENV):  # an interim render computes nothing: no cell count
        cfg = validate(study.Config, overrides, where=name)
        watcher = CellProgress(paths.cells, study.n_cells(cfg), desc=f"{name} cells",
                               status_file=paths.staging / execution.STATUS_FILE)
    with run_lock(name, profile):
        paths.dir.mkdir(parents=True, exist_ok=True)
        if (paths.dir / JOURNAL).exists():  # an earlier run's swap, interrupted: completed first
            with study_lock(paths, "completing an interrupted swap"):
                done = recover_swap(paths)
            if done:
                print(done, flush=True)
        # the notebook writes its figures, tables, metrics and metadata into the staging folder (the runner's,
        # under its run lock); they replace the earlier ones only when the whole notebook succeeded (a failed run
        # leaves the earlier outputs untouched)
        shutil.rmtree(paths.staging, ignore_errors=True)
        manager, kernels = recording_kernel_manager()
        cwd = os.getcwd()
        os.chdir(root)  # relative paths, run from the project root: nothing machine-specific in the notebook
        try:
            with watcher, staged_kernels(), _quiet_kernel_death():
                pm.execute_notebook(
                    relative(src), relative(running), parameters=parameters,
                    kernel_name=kernel_name(), cwd=".", progress_bar=False, log_output=False,
                    kernel_manager_class=manager,
                )
        except PapermillExecutionError as exc:
            running.replace(failed)
            first_line = _failed_cell_first_line(failed)
            where = (f"study {name!r} failed in notebook {relative(src)}, cell {exc.cell_index} (0-based, the "
                     f"injected-parameters cell included; the cell starts {first_line!r})")
            cause = resource_cause(exc.evalue)
            if cause:  # disk full, file-size limit: the partial outputs only take room
                shutil.rmtree(paths.staging, ignore_errors=True)
                raise StudyFailed(f"{where}: {cause}\nthe executed notebook with the traceback: {relative(failed)}; "
                                  f"its partial outputs were removed; the earlier outputs in {relative(paths.dir)} "
                                  "are untouched") from None
            raise StudyFailed(
                f"{where}: {exc.ename}: {exc.evalue}\n"
                f"the executed notebook with the traceback: {relative(failed)}; its partial outputs: "
                f"{relative(paths.staging)}; the earlier outputs in {relative(paths.dir)} are untouched"
            ) from None
        except DeadKernelError:
            kept = running.exists()
            if kept:
                running.replace(failed)
            raise StudyFailed(
                f"study {name!r}: the notebook's kernel died{_death(kernels)} in cell "
                f"{_dying_cell(failed) if kept else '?'} of "
                f"{relative(src)}\n"
                + (f"the executed notebook up to that cell: {relative(failed)}; " if kept else "")
                + f"its partial outputs: {relative(paths.staging)}; the earlier outputs in {relative(paths.dir)} "
                "are untouched") from None
        except OSError as exc:  # this process's own writes (the executed notebook): the disk, a file-size limit
            cause = resource_cause(exc) or f"{type(exc).__name__}: {exc}"
            shutil.rmtree(paths.staging, ignore_errors=True)
            running.unlink(missing_ok=True)
            raise StudyFailed(f"study {name!r} stopped: {cause}\nits partial outputs and executed notebook were "
                              f"removed; the earlier outputs in {relative(paths.dir)} are untouched") from None
        finally:
            os.chdir(cwd)
        try:
            with study_lock(paths, "swapping in a run's outputs"):
                if not swap_in(paths, running):
                    print(f"{name} ({profile}): every output reproduced byte for byte; nothing written (its "
                          f"run_meta.json still records the run that made them)", flush=True)
        except OSError as exc:
            raise StudyFailed(
                f"study {name!r}: swapping its new outputs in stopped: {resource_cause(exc) or exc}\n"
                f"the swap is journalled in {relative(paths.dir / JOURNAL)}: the next run of this study completes it "
                "(--check names it until then)") from None
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


# ----------------------------------------------------------------------------------------- stops and their cause

RESOURCE_ERRORS = {errno.ENOSPC: "the disk is full (ENOSPC: no space left on device)",
                   errno.EFBIG: "a file reached the file-size limit (EFBIG: ulimit -f / RLIMIT_FSIZE)",
                   errno.EDQUOT: "the disk quota is exceeded (EDQUOT)"}


def resource_cause(error: BaseException | str) -> str | None:
    """One line naming a stop for want of room (full disk, file-size limit, quota), or None: for an ``OSError``
    of this process, or the text of one raised in a notebook's kernel (``"[Errno 28] No space left ..."``)."""
    if isinstance(error, OSError):
        name = error.filename
        code, where = error.errno, f" writing {relative(Path(os.fsdecode(name)))}" if isinstance(name, (str, bytes)) else ""
    else:
        m = re.search(r"\[Errno (\d+)\]", str(error))
        code, where = (int(m.group(1)) if m else None), ""
        f = re.search(r": '([^']+)'\s*$", str(error))
        where = f" writing {f.group(1)}" if f else ""
    return RESOURCE_ERRORS[code] + where if code in RESOURCE_ERRORS else None


@contextlib.contextmanager
def _quiet_kernel_death():
    """Without papermill's own log line for a dead kernel: the runner's error names it, with its cause."""
    drop = lambda record: "Kernel died" not in record.getMessage()  # noqa: E731
    log = logging.getLogger("papermill")
    log.addFilter(drop)
    try:
        yield
    finally:
        log.removeFilter(drop)


def _death(kernels: list) -> str:
    """How the kernel process ended, from its exit status: killed by a signal (SIGKILL: most often the kernel's
    out-of-memory killer) or an exit code; "" when unknown."""
    codes = [p.poll() for p in kernels if p is not None]
    code = next((c for c in reversed(codes) if c is not None), None)
    if code is None:
        return ""
    if code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = f"signal {-code}"
        why = ": most often the out-of-memory killer; see `dmesg` or the system journal" if -code == signal.SIGKILL else ""
        return f" (killed by {sig}{why})"
    return f" (exit status {code})"


def _dying_cell(notebook: Path) -> str:
    """The index (0-based) and first line of the last cell the kernel started, from papermill's record; '?'."""
    try:
        cells = nbformat.read(notebook, as_version=4).cells
        started = [i for i, c in enumerate(cells) if c.get("metadata", {}).get("papermill", {}).get("start_time")]
        i = started[-1]
        return f"{i} (0-based; it starts {cells[i].source.splitlines()[0][:80]!r})"
    except Exception:  # the message must not fail over a detail
        return "?"


# ----------------------------------------------------------------------------------------------------- locks

_RUN_LOCKS: dict[Path, list] = {}  # this process's run locks: path -> [open file, holders]
_RUN_LOCKS_GUARD = threading.Lock()


def run_lock_path(name: str, profile: str) -> Path:
    """The runner's lock of one study and profile: beside its folder (``outputs/<study>/.<profile>.run.lock``), so
    that it stays put when ``--fresh`` moves the folder away."""
    d = StudyPaths(name, profile, staged=False).dir
    return d.with_name(f".{profile}.run.lock")


def _command() -> str:
    """This process's command as a user typed it (``headprune --profile ...``), for a refused runner to read."""
    if not sys.argv:
        return "python"
    first = Path(sys.argv[0])
    prog = "headprune" if "headprune" in first.name or "headprune_utils" in first.parts else first.name
    return " ".join([prog, *sys.argv[1:]])


@contextlib.contextmanager
def run_lock(name: str, profile: str) -> Iterator[None]:
    """Hold the runner's lock of a study and profile while the block runs: for the whole of a command that
    changes the study's folder (``--fresh``, computing cells, executing the notebook, swapping its outputs in),
    also while the notebook's kernel (which takes the study lock itself while it computes) runs. A second
    runner stops at once with :class:`StudyBusyError` naming the holder (pid, host, start, command). Re-entrant
    within a process. The holder removes the file before it lets go (nothing is left in ``outputs/``); a runner
    that locked a file no longer at the path tries again."""
    if fcntl is None:  # pragma: no cover - not on Linux/macOS
        yield
        return
    path = run_lock_path(name, profile)
    with _RUN_LOCKS_GUARD:
        held = _RUN_LOCKS.get(path)
        if held is not None:
            held[1] += 1
        else:
            made = not path.parent.exists()  # the study's first run: its folder is removed again if left empty
            _RUN_LOCKS[path] = [_acquire(path, f"study {name}, profile {profile}"), 1, made]
    try:
        yield
    finally:
        with _RUN_LOCKS_GUARD:
            held = _RUN_LOCKS[path]
            held[1] -= 1
            if held[1] == 0:
                del _RUN_LOCKS[path]
                fh = held[0]
                with contextlib.suppress(OSError):  # removed while still locked: a waiting runner locks anew
                    if os.stat(path).st_ino == os.fstat(fh.fileno()).st_ino:
                        path.unlink()
                fcntl.flock(fh, fcntl.LOCK_UN)
                fh.close()
                if held[2]:
                    with contextlib.suppress(OSError):
                        path.parent.rmdir()


def _acquire(path: Path, what: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fh = open(path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise StudyBusyError(
                f"{relative(path.parent / path.name[1:].removesuffix('.run.lock'))} is in use by another run: "
                f"{holder}. Two runs of one study and profile would write into one folder (--fresh would move it "
                "from under the other); wait for it to finish, or stop it") from None
        try:  # the file we locked is still the one at the path (not removed or replaced meanwhile)
            if os.fstat(fh.fileno()).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        fh.close()
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()} on {platform.node()} since {time.strftime('%Y-%m-%d %H:%M:%S')} ({what}: "
             f"{_command()})")
    fh.flush()
    return fh


def study_lock(paths: StudyPaths, doing: str):
    """The study lock (:meth:`ResultStore.lock`, the one a kernel holds while it computes cells), for a change of
    the study's folder made by the runner itself."""
    return ResultStore(paths.cells, "").lock(owner=f"study {paths.study}, profile {paths.profile}: {doing}")


# ------------------------------------------------------------------------------------- the journalled swap

JOURNAL = ".swap-journal.json"
_SWAP_STEP = None  # tests only: called with the name of each step of a swap just done (a fault injected there)


def _step(what: str) -> None:
    if _SWAP_STEP is not None:
        _SWAP_STEP(what)


def _exists(p: Path) -> bool:
    return p.exists() or p.is_symlink()


def _same_tree(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` (files or folders) hold the same files with the same bytes."""
    if a.is_file() or b.is_file():
        return a.is_file() and b.is_file() and a.read_bytes() == b.read_bytes()
    if not (a.is_dir() and b.is_dir()):
        return False
    files = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    if files != {p.relative_to(b) for p in b.rglob("*") if p.is_file()}:
        return False
    return all((a / f).read_bytes() == (b / f).read_bytes() for f in files)


def unchanged(paths: StudyPaths, running: Path) -> bool:
    """Whether a successful run reproduced the study's outputs byte for byte: every output it staged but its
    record (figures/, tables/, metrics.json) equals the one in place, and its executed notebook, finalised, equals
    the notebook in place (the findings come from the tables, equal then). A render of unchanged results."""
    items = [item for item in RUN_OUTPUTS if item != "run_meta.json" and _exists(paths.staging / item)]
    if not (paths.notebook.is_file() and (paths.dir / "run_meta.json").is_file() and running.is_file()):
        return False
    if not all(_same_tree(paths.staging / item, paths.dir / item) for item in items):
        return False
    return _final_text(running, paths.notebook, paths.study, paths.profile).encode() == paths.notebook.read_bytes()


def swap_in(paths: StudyPaths, running: Path) -> bool:
    """Swap a successful run's staged outputs and its executed notebook into the study's folder, journalled: the
    journal (``.swap-journal.json``: what is swapped, where the replaced items go) is written first, then each
    of figures/, tables/, metrics.json, run_meta.json the run wrote replaces the earlier one whole (no stale
    figure survives; cells stay), then the notebook is finalised into place, then the replaced items and the
    staging folder are removed and last the journal. Killed at any step, the next start completes the swap
    (:func:`recover_swap`) and ``--check`` names it until then. Call holding the study lock.

    A run that reproduced every output byte for byte (:func:`unchanged`) changes nothing: the outputs in place
    keep the record of the run that made them (their run_meta.json), its staging folder and executed notebook are
    removed, and it returns False (True when it swapped). A render of unchanged results leaves git clean."""
    if unchanged(paths, running):
        shutil.rmtree(paths.staging, ignore_errors=True)
        running.unlink()
        paths.notebook.with_suffix(".failed.ipynb").unlink(missing_ok=True)
        return False
    items = [item for item in RUN_OUTPUTS if _exists(paths.staging / item)]
    journal = {"items": items, "replaced": [item for item in items if _exists(paths.dir / item)],
               "trash": f".replaced-{os.getpid()}", "notebook": running.name, "pid": os.getpid(),
               "started_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    shutil.rmtree(paths.dir / journal["trash"], ignore_errors=True)
    atomic_write_json(paths.dir / JOURNAL, journal)
    _step("journal")
    _complete(paths, journal)
    return True


def _complete(paths: StudyPaths, journal: dict) -> None:
    trash = paths.dir / journal["trash"]
    for item in journal["items"]:
        new, old, gone = paths.staging / item, paths.dir / item, trash / item
        if not _exists(new):  # swapped in already
            continue
        if _exists(old):
            if _exists(gone):  # an earlier item of a previous attempt already set aside: this one is a copy
                _remove(old)
            else:
                trash.mkdir(exist_ok=True)
                old.rename(gone)
            _step(f"set aside {item}")
        new.rename(old)
        _step(f"swap in {item}")
    running = paths.dir / journal["notebook"]
    if running.exists():
        finalise(running, paths.notebook, paths.study, paths.profile)
        _step("notebook")
    paths.notebook.with_suffix(".failed.ipynb").unlink(missing_ok=True)
    shutil.rmtree(trash, ignore_errors=True)
    for stale in paths.dir.glob(".replaced-*"):  # an unjournalled swap's, killed: every output is new now
        shutil.rmtree(stale, ignore_errors=True)
    _step("remove the replaced outputs")
    shutil.rmtree(paths.staging, ignore_errors=True)
    _step("remove the staging folder")
    (paths.dir / JOURNAL).unlink()
    _step("remove the journal")


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    else:
        p.unlink()


def _read_journal(paths: StudyPaths) -> dict | None:
    f = paths.dir / JOURNAL
    if not f.exists():
        return None
    try:
        journal = json.loads(f.read_text(encoding="utf-8"))
        if not (isinstance(journal, dict) and isinstance(journal.get("items"), list)
                and all(i in RUN_OUTPUTS for i in journal["items"] + journal.get("replaced", []))
                and isinstance(journal.get("trash"), str)
                and journal["trash"].startswith(".replaced-") and "/" not in journal["trash"]
                and isinstance(journal.get("notebook"), str) and "/" not in journal["notebook"]):
            raise ValueError("not a swap journal")
    except ValueError as exc:
        return {"unreadable": str(exc)}
    return journal


def _swapped_in(paths: StudyPaths, journal: dict, item: str) -> bool:
    """Whether the new ``item`` is in the study's folder: it is there, and the earlier one it replaces (if any) is
    set aside (else what is there is still the earlier one, its new one lost with the staging folder)."""
    return _exists(paths.dir / item) and (item not in journal.get("replaced", journal["items"])
                                          or _exists(paths.dir / journal["trash"] / item))


def half_swap(paths: StudyPaths) -> str | None:
    """What an interrupted swap left in the study's folder (read only), or None: a journal (which items are
    already the new run's, which still the earlier run's) or, without one, set-aside outputs (``.replaced-*``)
    of an unjournalled swap."""
    journal = _read_journal(paths)
    where = relative(paths.dir)
    if journal is None:
        leftovers = sorted(p.name for p in paths.dir.glob(".replaced-*")) if paths.dir.is_dir() else []
        if leftovers:
            return (f"{where} holds the set-aside outputs of an interrupted swap ({', '.join(leftovers)}) without a "
                    "journal: its figures, tables and metrics may be of two runs; rerun the study to render them again")
        return None
    if "unreadable" in journal:
        return f"{where}: the swap journal {JOURNAL} cannot be read ({journal['unreadable']}); rerun the study"
    notebook_in = not (paths.dir / journal["notebook"]).exists()
    new = [i for i in journal["items"] if notebook_in or (_swapped_in(paths, journal, i)
                                                          and not _exists(paths.staging / i))]
    aside = [i for i in journal["items"] if i not in new and not _exists(paths.dir / i)
             and _exists(paths.dir / journal["trash"] / i)]  # the earlier one moved out, the new one not yet in
    old = [i for i in journal["items"] if i not in new and i not in aside]
    state = (f"new: {', '.join(new + ([paths.notebook.name] if notebook_in else [])) or 'nothing yet'}; still the "
             f"earlier run's: {', '.join(old + ([] if notebook_in else [paths.notebook.name])) or 'nothing'}"
             + (f"; set aside in {journal['trash']}/, not yet replaced: {', '.join(aside)}" if aside else ""))
    return (f"{where}: the swap of a run's outputs into the folder was interrupted (pid {journal.get('pid', '?')}, "
            f"{journal.get('started_at_utc', '?')}; {state}); the next run of this study completes it")


def recover_swap(paths: StudyPaths) -> str | None:
    """Finish or undo a swap that was interrupted (its journal is there); returns what was done, or None when
    there was nothing to do. Completed when every new item is still in the staging folder or already swapped in;
    otherwise (the staging folder lost) rolled back: the earlier items put back. Call holding the study lock."""
    journal = _read_journal(paths)
    if journal is None or not paths.dir.is_dir():
        return None
    where = relative(paths.dir)
    if "unreadable" in journal:
        (paths.dir / JOURNAL).unlink()
        return f"note: {where}: an unreadable swap journal was removed ({journal['unreadable']})"
    # the notebook goes in after every item: once it is in, only the cleaning up is left
    if not (paths.dir / journal["notebook"]).exists() or all(
            _exists(paths.staging / i) or _swapped_in(paths, journal, i) for i in journal["items"]):
        _complete(paths, journal)
        return f"note: {where}: completed the interrupted swap of an earlier run's outputs (pid {journal.get('pid', '?')})"
    trash = paths.dir / journal["trash"]
    for item in journal["items"]:
        if _exists(trash / item):
            if _exists(paths.dir / item):
                _remove(paths.dir / item)
            (trash / item).rename(paths.dir / item)
    shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(paths.staging, ignore_errors=True)
    (paths.dir / journal["notebook"]).unlink(missing_ok=True)
    (paths.dir / JOURNAL).unlink()
    return (f"note: {where}: rolled back the interrupted swap of an earlier run's outputs (its staged outputs were "
            "gone): the outputs before it are back")


# ------------------------------------------------------------------------------------ the executed notebook

_INJECTED_TAGS = ("injected-parameters", FINDINGS_TAG, "papermill-error-cell-tag")
_VOLATILE = ("start_time", "end_time", "duration")  # papermill's clock readings


def normalise(nb) -> None:
    """Make an executed notebook a function of its inputs and results, so that rendering unchanged results leaves
    its file unchanged: the cells the run adds (papermill's parameters, the findings) get ids from their tag
    instead of random ones, the clock readings (papermill's start, end and duration of the notebook and each
    cell, the kernel's execution timestamps) are dropped, and consecutive pieces of one stream (a cell's printed
    text, which the kernel sends in pieces cut by timing) are joined, as Jupyter shows them, and the random ids of
    pandas Styler tables in HTML outputs are numbered per cell (:func:`stable_styler_ids`) and the memory
    addresses of default reprs (``<... at 0x7f...>``) dropped from plain-text outputs."""
    pm_meta = nb.metadata.get("papermill", {})
    for key in _VOLATILE:
        pm_meta.pop(key, None)
    seen: set[str] = set()
    for i, cell in enumerate(nb.cells):
        meta = cell.setdefault("metadata", {})
        meta.pop("execution", None)
        for key in _VOLATILE:
            meta.get("papermill", {}).pop(key, None)
        if cell.get("outputs"):
            cell["outputs"] = _joined_streams(cell["outputs"])
            _stable_outputs(cell["outputs"], f"nb{i}")
        tag = next((t for t in meta.get("tags", []) if t in _INJECTED_TAGS), None)
        if tag is not None or ("id" in cell and cell["id"] in seen):
            cell["id"] = tag if tag is not None and tag not in seen else f"cell-{i}"
        if "id" in cell:
            seen.add(cell["id"])


_ADDRESS = re.compile(r"(<[\w.]+(?: object)?) at 0x[0-9a-fA-F]+>")


def _stable_outputs(outputs: list, prefix: str) -> None:
    """Number the Styler ids of a cell's HTML outputs, ``T_<prefix>_<output>_<n>`` (``prefix``: the cell's position,
    not hex, so the report's own numbering leaves them alone), and drop the address from default reprs in its
    plain-text outputs (``<pandas.io.formats.style.Styler at 0x7f6e88064590>``: a new one at every execution)."""
    for j, o in enumerate(outputs):
        data = o.get("data") or {}
        if "text/html" in data:
            data["text/html"] = stable_styler_ids(_text(data["text/html"]), f"{prefix}_{j}")
        if "text/plain" in data:
            data["text/plain"] = _ADDRESS.sub(r"\1>", _text(data["text/plain"]))


def _joined_streams(outputs: list) -> list:
    out: list = []
    for o in outputs:
        if (o.get("output_type") == "stream" and out and out[-1].get("output_type") == "stream"
                and out[-1].get("name") == o.get("name")):
            out[-1]["text"] = "".join(_text(t) for t in (out[-1]["text"], o["text"]))
        else:
            out.append(o)
    return out


def _text(text) -> str:
    return "".join(text) if isinstance(text, list) else text


def finalise(running: Path, final: Path, name: str, profile: str) -> None:
    """Record the final name in papermill's metadata, put "What this study found" (from the verdict table just
    swapped in) after the notebook's title, make the notebook stable (:func:`normalise`) and write it into place
    atomically (the side file goes last: until then a rerun of this step finds it)."""
    atomic_write_text(final, _final_text(running, final, name, profile))
    running.unlink()


def _final_text(running: Path, final: Path, name: str, profile: str) -> str:
    """The text :func:`finalise` writes."""
    nb = nbformat.read(running, as_version=4)
    nb.metadata.setdefault("papermill", {})["output_path"] = relative(final)
    inject_findings(nb, study_findings_markdown(name, profile))
    normalise(nb)
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"  # as nbformat.write writes it


def kernel_name() -> str:
    """The project's own kernel (``make env`` installs it into the venv) when present, else ``python3``."""
    try:
        if KERNEL in KernelSpecManager().find_kernel_specs():
            return KERNEL
    except Exception:  # no kernelspec machinery: papermill will say what is missing
        pass
    return "python3"


def ipc_kernel_manager():
    """A kernel manager talking to its kernel over IPC sockets in the temporary folder, not TCP: no "running over
    TCP without encryption" warning from every kernel in the terminal (nor an open local port)."""

    class IPCKernelManager(AsyncKernelManager):
        transport = "ipc"

        def _ip_default(self):  # the socket files' prefix: under the temporary folder, never the checkout
            return os.path.join(tempfile.gettempdir(), f"headprune-kernel-{uuid.uuid4().hex[:12]}")

    return IPCKernelManager


def recording_kernel_manager():
    """An :func:`ipc_kernel_manager` class that records the process of each kernel it starts, and that list: how a
    dead kernel ended (its exit status, e.g. -9 for SIGKILL) is read from it."""
    processes: list = []

    class RecordingKernelManager(ipc_kernel_manager()):
        async def _async_post_start_kernel(self, **kw):
            processes.append(getattr(self.provisioner, "process", None))
            return await super()._async_post_start_kernel(**kw)

    return RecordingKernelManager, processes
