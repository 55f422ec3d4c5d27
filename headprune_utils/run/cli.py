"""Batch runner: execute the study notebooks through papermill into ``outputs/<study>/<profile>/``.

    python -m headprune_utils.run --profile quick              # every study
    python -m headprune_utils.run --profile smoke --only random_pruning
    python -m headprune_utils.run --profile quick --check      # validate parameters only
    python -m headprune_utils.run --profile paper --plan       # every cell, its requirements and cost; runs nothing
    python -m headprune_utils.run --profile standard --plan --plan-slices   # the slices of a long run still to compute
    python -m headprune_utils.run --profile standard-next --from-cells --where task=SST-2   # an interim render
    python -m headprune_utils.run --profile paper --executor ray --address auto   # cells on a Ray cluster

Every study's parameters (``params/<profile>.yaml`` over the notebook defaults) are validated before
any notebook starts: an unknown key, a wrong type, an unknown task/model or an impossible budget stops
the run at once. Studies resume: finished result cells are reused. ``--fresh`` first moves earlier
results aside (``<profile>.bak-<time>``), never deleting them; with ``--where``, only the stored cells the
selection matches (one slice computed again). A failing notebook stops the run with a
non-zero exit naming the notebook and the cell; the executed notebook (with the traceback) is kept.

``--executor ray`` first computes every planned cell of the selected studies as Ray tasks (this process is the
driver and the only writer of results; see :mod:`headprune_utils.run.execution`), then renders the notebooks, which
find every cell stored (``--cells-only`` stops after the cells).

This module is the command line only: the arguments, their combinations, and one call per mode. What the modes
do lives beside it: :mod:`~headprune_utils.run.profiles` (validating and planning a profile, ``--plan``),
:mod:`~headprune_utils.run.preflight` (the checks before heavy work), :mod:`~headprune_utils.run.pipeline` (a run,
end to end), :mod:`~headprune_utils.run.schedule` and :mod:`~headprune_utils.run.notebooks` (executing notebooks).
Exit status: 0 done, 1 a cell or notebook failed, 2 refused before any work (flags, parameters, checks).
"""
from __future__ import annotations

import argparse
import os
import sys

from headprune_utils.model import models
from headprune_utils.run.execution import ExecutorUnavailable, connect_ray
from headprune_utils.run.options import Once, Parser
from headprune_utils.run.pipeline import run_profile
from headprune_utils.run.preflight import preflight
from headprune_utils.run.profiles import (missing_cells, parse_where, print_plan, print_slices, unknown_profile,
                                          validate_profile, where_problems)
from headprune_utils.store.results import CorruptCellError, IsaRestrictionError, isa_restriction, machine_kind
from headprune_utils.studies import STUDIES
from headprune_utils.studies.config import PROFILES

QUIET_ENV = {
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
}


def program_name(argv0: str | None = None) -> str:
    """How the runner was started, for its usage line: ``headprune`` (the console script) or ``python -m
    headprune_utils.run``."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    return "headprune" if os.path.basename(argv0) in ("headprune", "headprune.exe") else "python -m headprune_utils.run"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=program_name(), description=__doc__.split("\n")[0])
    parser.add_argument("--profile", action=Once, default="quick", help=f"parameter profile: one of {PROFILES} or another params/*.yaml")
    parser.add_argument("--only", nargs="+", action="extend", metavar="STUDY", help=f"run only these studies: {', '.join(STUDIES)}")
    parser.add_argument("--fresh", action="store_true",
                        help="move earlier results of these studies aside first (kept as a backup); with --where, "
                             "only the stored cells the selection matches (e.g. one slice to compute again)")
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
    parser.add_argument("--gpu-tflops", action=Once, type=float, default=None, help="--plan: sustained GPU throughput for GPU-hours (default 100)")
    parser.add_argument("--cpu-gflops", action=Once, type=float, default=None, help="--plan: sustained CPU throughput for CPU-hours (default 58)")
    parser.add_argument("--executor", action=Once, choices=("local", "process", "ray"), default="local",
                        help="where cells run: in each notebook's kernel (local, default), or before the notebooks in "
                             "a pool of local worker processes (process: one per core, one torch thread each) or "
                             "as Ray tasks (ray)")
    parser.add_argument("--address", action=Once, default=None,
                        help="--executor ray: a Ray cluster to join ('auto', 'ray://host:10001'); default: a local Ray instance")
    parser.add_argument("--cells-only", action="store_true", help="compute the cells and stop (no notebooks)")
    parser.add_argument("--where", nargs="+", action="extend", metavar="AXIS=VALUE",
                        help="with --cells-only (or --from-cells: an interim render): only the cells whose axes match (e.g. task=SST-2 seed=0 "
                             "regime=mask_then_finetune; repeat an axis for several values), and what they require: "
                             "a slice of a long run, e.g. every cell of one fine-tuned model in one session")
    parser.add_argument("--from-cells", action="store_true",
                        help="render the notebooks from the stored cells only: stop before any work, naming what is "
                             "missing, if a planned cell is not stored (e.g. the committed standard cells on a fresh "
                             "clone: minutes, no training); with --where, an interim render of that slice alone "
                             "(e.g. task=SST-2 while the other tasks compute), labelled so on every page")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--jobs", action=Once, type=int, default=1,
                        help="studies run side by side (default 1); each kernel then gets cores/jobs torch threads")
    return parser


def flags_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags themselves (before any file is read), or None."""
    if args.jobs < 1:
        return f"--jobs must be >= 1, got {args.jobs}"
    if args.address and args.executor != "ray":
        return "--address is for --executor ray"
    for flag in ("plan_summary", "plan_slices"):
        if getattr(args, flag) and not args.plan:
            return f"--{flag.replace('_', '-')} is for --plan"
    if args.where and not (args.cells_only or args.from_cells):
        return ("--where is for --cells-only (compute a slice) or --from-cells (an interim render of a complete "
                "slice); a full run's notebook analyses every cell of its study")
    if args.from_cells and (args.cells_only or args.fresh or args.fresh_caches or args.executor != "local"):
        return ("--from-cells renders stored cells (no model is trained or read); it does not go with --cells-only, "
                "--fresh, --fresh-caches or --executor")
    if args.plan and args.where:
        return ("--plan sizes every planned cell of the studies; it does not go with --where (--plan --plan-slices "
                "lists each slice not yet complete with the --where that computes it)")
    try:
        parse_where(args.where)
    except ValueError as exc:
        return str(exc)
    for flag, default in (("gpu_tflops", 100.0), ("cpu_gflops", 58.0)):
        value = getattr(args, flag)
        if value is None:
            setattr(args, flag, default)
            continue
        if not args.plan:
            return f"--{flag.replace('_', '-')} is for --plan (the throughput its GPU- and CPU-hours assume)"
        if not (value > 0 and value != float("inf")):
            return f"--{flag.replace('_', '-')} must be a positive number, got {value}"
    return None


PATH_ENV = ("HEADPRUNE_OUTPUT_DIR", "HEADPRUNE_DATA_DIR")


def resolve_env_paths() -> None:
    """Make relative ``HEADPRUNE_OUTPUT_DIR`` / ``HEADPRUNE_DATA_DIR`` absolute once, at start: the notebook kernels,
    worker processes and Ray tasks this run starts inherit them but need not share its working directory (a
    relative outputs root failed after the whole render)."""
    for var in PATH_ENV:
        value = os.environ.get(var)
        if value and not os.path.isabs(value):
            os.environ[var] = os.path.abspath(value)
            print(f"note: {var}={value} is relative: using {os.environ[var]}", file=sys.stderr)


def env_problems() -> list[str]:
    """``HEADPRUNE_OUTPUT_DIR`` / ``HEADPRUNE_DATA_DIR`` that name something other than a folder (a file, say), and
    the CPU instruction-set variables set in part (:func:`~headprune_utils.store.results.isa_restriction`): one
    line each naming the variable, before anything is read or written."""
    out = []
    for var in PATH_ENV:
        value = os.environ.get(var)
        if value and os.path.lexists(value) and not os.path.isdir(value):
            what = "a link to nothing" if not os.path.exists(value) else "a file, not a folder"
            out.append(f"{var}={value} is {what}: set it to a folder"
                       + (" (created if it does not exist)" if var == "HEADPRUNE_OUTPUT_DIR" else
                          " holding glue/... (the task data)"))
    try:  # torch's CPU libraries held to an instruction set in part: numbers of no machine kind (store.results)
        isa_restriction()
    except IsaRestrictionError as exc:
        out.append(str(exc))
    return out


def refuse(message: object) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def show_plan(args: argparse.Namespace) -> int:
    """``--plan``: every selected study's cells and costs, or (``--plan-slices``) its slices still to compute."""
    try:
        with models.planning():
            plan = validate_profile(args.profile, args.only)
        if args.plan_slices:
            # each study judged by the device its parameters name (machine_kind looked up at the call: tests swap it)
            print_slices(plan, args.profile, here=lambda device: machine_kind(device))
        else:
            print_plan(plan, args.profile, args.gpu_tflops, args.cpu_gflops, cells=not args.plan_summary)
    except Exception as exc:  # every validation failure (parameters, model, data) is a clear, early stop
        return refuse(exc)
    return 0


def blocked(plan: dict[str, dict], args: argparse.Namespace) -> bool:
    """Report what stops the run before any work (True): the :func:`preflight` problems and, with
    ``--from-cells``, the studies whose planned cells are not all stored."""
    notes: list[str] = []
    try:
        problems = where_problems(plan, args.profile, parse_where(args.where))
        writes = "cells" if args.cells_only else "render" if args.from_cells else "all"
        problems += preflight(plan, args.profile, read_data=args.check, stale=not args.fresh or bool(args.where),
                              notes=notes, writes=writes)
    except Exception as exc:  # a data file that cannot even be hashed, say
        problems = [str(exc)]
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if problems:
        print("error: " + "\nerror: ".join(problems), file=sys.stderr)
        if any("other parameters" in p for p in problems):
            print("(--fresh" + (" without --where" if args.where else "") + " moves the earlier results aside, "
                  "keeping them)", file=sys.stderr)
        return True
    try:
        gaps = missing_cells(plan, args.profile, parse_where(args.where)) if args.from_cells else {}
    except CorruptCellError as exc:  # an edited, swapped or out-of-range cell: a render never certifies it
        print(f"error: --from-cells: {exc} (stopped before any work)", file=sys.stderr)
        return True
    if gaps:
        where = " ".join(args.where or [])
        print("error: --from-cells: cells are missing, so these studies would compute (stopped before any work):\n"
              + "\n".join(f"  {name}: {n} of {total} {'selected' if where else 'planned'} cells not stored "
                          f"(e.g. {example})" for name, (n, total, example) in gaps.items())
              + f"\ncompute them first (e.g. headprune --profile {args.profile} --cells-only --only "
              f"{' '.join(gaps)}{' --where ' + where if where else ''}), or render only the complete studies with "
              "--only" + ("" if where else ", or an interim render of a complete slice with --where"),
              file=sys.stderr)
    return bool(gaps)


def ray_installed() -> bool:
    try:
        import ray  # noqa: F401 - an optional extra (pip install -e '.[ray]')
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    error = flags_error(args)
    if error:
        return refuse(error)
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)
    resolve_env_paths()
    problems = env_problems()
    if problems:
        return refuse("\nerror: ".join(problems))
    unknown = unknown_profile(args.profile)
    if unknown:
        return refuse(unknown)
    if args.plan:
        return show_plan(args)
    try:
        plan = validate_profile(args.profile, args.only)
    except Exception as exc:  # every validation failure (parameters, model, data) is a clear, early stop
        return refuse(exc)
    if blocked(plan, args):
        return 2
    if args.executor == "ray":
        if not ray_installed():
            return refuse("--executor ray needs Ray: pip install -e '.[ray]'")
        if args.address:  # a cluster: joined now, so that a wrong address stops the run before any work
            try:
                connect_ray(args.address)
            except ExecutorUnavailable as exc:
                return refuse(exc)
    if args.check:
        print(f"parameters of profile {args.profile!r} are valid for: {', '.join(plan)}; outputs writable, "
              "no stored results of other parameters, task data readable"
              + (f"; the Ray cluster at {args.address} joined" if args.executor == "ray" and args.address else ""))
        return 0
    return run_profile(plan, args.profile, jobs=args.jobs, fresh=args.fresh, fresh_caches=args.fresh_caches,
                       executor=args.executor, address=args.address, cells_only=args.cells_only,
                       where=parse_where(args.where), progress=not args.no_progress, from_cells=args.from_cells)


if __name__ == "__main__":
    sys.exit(main())
