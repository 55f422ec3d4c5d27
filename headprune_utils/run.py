"""Batch runner: execute the study notebooks through papermill into ``outputs/<study>/<profile>/``.

    python -m headprune_utils.run --profile quick              # every study
    python -m headprune_utils.run --profile smoke --only random_pruning
    python -m headprune_utils.run --profile quick --check      # validate parameters only

Every study's parameters (``params/<profile>.yaml`` over the notebook defaults) are validated before
any notebook starts: an unknown key, a wrong type, an unknown task/model or an impossible budget stops
the run at once. Studies resume: finished result cells are reused. ``--fresh`` first moves earlier
results aside (``<profile>.bak-<time>``), never deleting them. A failing notebook stops the run with a
non-zero exit naming the notebook and the cell; the executed notebook (with the traceback) is kept.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import threading
import sys
import time
from pathlib import Path

from .config import PROFILES, ParameterError, load_profile, validate
from .paths import StudyPaths, notebooks_dir, project_root
from .studies import STUDIES

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
    out = {}
    for name in selected:
        overrides = sections.get(name, {})
        validate(STUDIES[name].config_class(), overrides, where=f"params/{profile}.yaml [{name}]")
        out[name] = overrides
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
    paths = StudyPaths(name, profile)
    paths.dir.mkdir(parents=True, exist_ok=True)
    root = project_root()
    src = notebooks_dir() / study.notebook
    # executed into a side file, renamed over the earlier notebook only on success: a failed or refused
    # run never replaces earlier results
    running = paths.notebook.with_suffix(".running.ipynb")
    failed = paths.notebook.with_suffix(".failed.ipynb")
    t0 = time.perf_counter()
    cwd = os.getcwd()
    os.chdir(root)  # relative paths, run from the project root: nothing machine-specific in the notebook
    parameters = {**overrides, "profile": profile}
    watcher = contextlib.nullcontext()
    if progress:
        # the runner shows progress from the finished result cells; the notebook itself stays free of bars
        parameters["progress"] = False
        cfg = validate(study.config_class(), overrides, where=name)
        watcher = CellProgress(paths.cells, study.n_cells(cfg), desc=f"{name} cells")
    try:
        with watcher:
            pm.execute_notebook(
                _relative(src), _relative(running), parameters=parameters,
                kernel_name=kernel_name(), cwd=".", progress_bar=False, log_output=False,
            )
    except PapermillExecutionError as exc:
        running.replace(failed)
        first_line = _failed_cell_first_line(failed)
        raise StudyFailed(
            f"study {name!r} failed in notebook {_relative(src)}, cell {exc.cell_index} "
            f"(0-based, the injected-parameters cell included; the cell starts {first_line!r}): "
            f"{exc.ename}: {exc.evalue}\n"
            f"the executed notebook with the traceback: {_relative(failed)}"
        ) from None
    finally:
        os.chdir(cwd)
    _finalise(running, paths.notebook)
    failed.unlink(missing_ok=True)
    return time.perf_counter() - t0


def _finalise(running: Path, final: Path) -> None:
    """Record the final name in papermill's metadata and move the notebook into place atomically."""
    import nbformat

    nb = nbformat.read(running, as_version=4)
    nb.metadata.setdefault("papermill", {})["output_path"] = _relative(final)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headprune_utils.run", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="quick", help=f"parameter profile: one of {PROFILES} or another params/*.yaml")
    parser.add_argument("--only", nargs="+", metavar="STUDY", help=f"run only these studies: {', '.join(STUDIES)}")
    parser.add_argument("--fresh", action="store_true", help="move earlier results of these studies aside first (kept as a backup)")
    parser.add_argument("--check", action="store_true", help="validate the parameters and stop")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)

    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)
    try:
        plan = validate_profile(args.profile, args.only)
    except Exception as exc:  # every validation failure (parameters, model, data) is a clear, early stop
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(f"parameters of profile {args.profile!r} are valid for: {', '.join(plan)}")
        return 0
    total = time.perf_counter()
    for i, (name, overrides) in enumerate(plan.items(), 1):
        paths = StudyPaths(name, args.profile)
        if args.fresh:
            backup = move_aside(paths)
            if backup:
                print(f"moved earlier results to {_relative(backup)}")
        print(f"[{i}/{len(plan)}] {name} ({args.profile}) -> {_relative(paths.dir)}", flush=True)
        try:
            seconds = execute_study(name, args.profile, overrides, progress=not args.no_progress)
        except StudyFailed as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"[{i}/{len(plan)}] {name} done in {seconds:.0f} s", flush=True)
    print(f"all {len(plan)} studies done in {time.perf_counter() - total:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
