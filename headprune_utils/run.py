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
import os
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
    # relative paths, run from the project root: nothing machine-specific lands in the executed notebook
    t0 = time.perf_counter()
    cwd = os.getcwd()
    os.chdir(root)
    try:
        pm.execute_notebook(
            _relative(src), _relative(paths.notebook),
            parameters={**overrides, "profile": profile},
            kernel_name="python3", progress_bar=progress, log_output=False, cwd=".",
        )
    except PapermillExecutionError as exc:
        first_line = _failed_cell_first_line(paths.notebook)
        raise StudyFailed(
            f"study {name!r} failed in notebook {_relative(src)}, cell {exc.cell_index} "
            f"(0-based, the injected-parameters cell included; the cell starts {first_line!r}): "
            f"{exc.ename}: {exc.evalue}\n"
            f"the executed notebook with the traceback: {_relative(paths.notebook)}"
        ) from None
    finally:
        os.chdir(cwd)
    return time.perf_counter() - t0


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
    except (ParameterError, Exception) as exc:  # every validation failure is a clear, early stop
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
