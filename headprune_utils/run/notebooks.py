"""Executing one study's notebook with papermill, so that a failed run never costs the earlier results.

The notebook runs in a kernel of its own (the project's kernel when installed, talking over IPC sockets) from the
project root, with the profile's parameters injected. It writes its figures, tables, metrics and metadata into the
study's staging folder; only when the whole notebook succeeded are they swapped into the study's folder
(:func:`promote`) and the executed notebook, with the study's findings after its title, put in place
(:func:`finalise`). A failing notebook raises :class:`StudyFailed` naming the notebook and the cell, and keeps the
executed notebook with its traceback beside the earlier one.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

import nbformat
import papermill as pm
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from papermill.exceptions import PapermillExecutionError
from tqdm import tqdm

from headprune_utils.run.summary import inject_findings, study_findings_markdown
from headprune_utils.store.paths import RUN_OUTPUTS, STAGED_ENV, StudyPaths, notebooks_dir, project_root
from headprune_utils.studies import STUDIES
from headprune_utils.studies.config import validate

KERNEL = "headprune"


class StudyFailed(RuntimeError):
    pass


def relative(path: Path) -> str:
    """``path`` as the runner prints it: relative to the project root."""
    return os.path.relpath(path, project_root())


class CellProgress:
    """A terminal progress bar over the result cells a study has written (polled in a thread)."""

    def __init__(self, cells_dir: Path, total: int, desc: str, interval: float = 2.0):
        self.cells_dir, self.total, self.desc, self.interval = cells_dir, total, desc, interval
        self._stop = threading.Event()

    def _count(self) -> int:
        return sum(1 for p in self.cells_dir.glob("*.json") if not p.name.startswith(".")) if self.cells_dir.exists() else 0

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.bar.update(min(self._count(), self.total) - self.bar.n)

    def __enter__(self):
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


def _failed_cell_first_line(notebook: Path) -> str:
    """First source line of the cell whose output holds the error (papermill also adds a banner cell)."""
    try:
        for cell in nbformat.read(notebook, as_version=4).cells:
            if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                return cell.source.splitlines()[0][:80]
    except Exception:  # the message must not fail over a detail
        pass
    return "?"


def execute_study(name: str, profile: str, overrides: dict, progress: bool = True) -> float:
    """Run one study notebook with papermill; returns seconds. Raises StudyFailed naming the cell."""
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
                relative(src), relative(running), parameters=parameters,
                kernel_name=kernel_name(), cwd=".", progress_bar=False, log_output=False,
                kernel_manager_class=ipc_kernel_manager(),
            )
    except PapermillExecutionError as exc:
        running.replace(failed)
        first_line = _failed_cell_first_line(failed)
        raise StudyFailed(
            f"study {name!r} failed in notebook {relative(src)}, cell {exc.cell_index} "
            f"(0-based, the injected-parameters cell included; the cell starts {first_line!r}): "
            f"{exc.ename}: {exc.evalue}\n"
            f"the executed notebook with the traceback: {relative(failed)}; its partial outputs: "
            f"{relative(paths.staging)}; the earlier outputs in {relative(paths.dir)} are untouched"
        ) from None
    finally:
        os.chdir(cwd)
    promote(paths)
    finalise(running, paths.notebook, name, profile)
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


def finalise(running: Path, final: Path, name: str, profile: str) -> None:
    """Record the final name in papermill's metadata, put "What this study found" (from the verdict table just
    promoted) after the notebook's title, and move the notebook into place atomically."""
    nb = nbformat.read(running, as_version=4)
    nb.metadata.setdefault("papermill", {})["output_path"] = relative(final)
    inject_findings(nb, study_findings_markdown(name, profile))
    nbformat.write(nb, running)
    running.replace(final)


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
