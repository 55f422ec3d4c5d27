"""The checks before any heavy work, so that a run that cannot finish stops at once instead of hours in.

Outputs that cannot be written (every folder the run writes: each study's folder and its parts, the folder beside
it that holds the staging folder, run lock and backups, the shared model caches, the cross-study summary's and the
report's folders; a file in the way, or permissions), a study folder left half swapped (a run killed while swapping its outputs in),
stored cells of other parameters (which a run would refuse to mix with new ones; the message names the parameters
that changed), a study notebook that papermill cannot give the profile's values (missing, unreadable, no cell
tagged ``parameters``) and, for ``--check``, task data that is missing or unreadable. Nothing is trained, loaded or moved.
"""
from __future__ import annotations

import os
from pathlib import Path

from headprune_utils.model import models
from headprune_utils.run.execution import changed_parameters
from headprune_utils.run.notebooks import half_swap, notebook_problem, relative
from headprune_utils.run.profiles import study_config
from headprune_utils.store.paths import StudyPaths, folder_problem, outputs_root, report_dir
from headprune_utils.store.results import CorruptCellError, ResultStore, StaleResultsError
from headprune_utils.tasks import data


def writable(path: Path) -> bool:
    """Whether ``path`` (or, where it does not exist yet, its nearest existing parent) can be written to."""
    return folder_problem(path) is None


WRITES = ("all", "cells", "render")


def written_folders(plan: dict[str, dict], profile: str, writes: str = "all") -> list[tuple[Path, str]]:
    """``[(folder, what it holds)]``: every folder a run of ``plan`` writes. ``writes``: "all" (a run: cells,
    notebooks, the cross-study summary and the report), "cells" (``--cells-only``: no summary, no report) or
    "render" (``--from-cells``: no model is trained, so not the model caches)."""
    if writes not in WRITES:
        raise ValueError(f"writes must be one of {WRITES}, got {writes!r}")
    out: list[tuple[Path, str]] = []
    for name in plan:
        paths = StudyPaths(name, profile, staged=False)
        out.append((paths.dir.parent, f"{name}: its staging folder and run lock"))
        out.append((paths.dir, f"{name}: its outputs"))
        # the parts a run writes into or swaps (the new ones are made in the study's folder, checked above)
        for part in (paths.cells, paths.cache, paths.figures, paths.tables, paths.dir / "quarantine"):
            if part.exists() or part.is_symlink():
                out.append((part, f"{name}: its {part.name}/"))
    if writes != "render":
        any_study = StudyPaths("any", profile, staged=False)
        out.append((any_study.finetuned_cache, "the shared fine-tuned models"))
        out.append((any_study.nmt_cache, "the shared translation models"))
    if writes != "cells":
        out.append((outputs_root(), "the cross-study summary"))
        out.append((report_dir(), "the report"))
        out.append((report_dir() / profile, "the report"))
    return out


def unwritable(plan: dict[str, dict], profile: str, writes: str = "all") -> list[str]:
    """One problem per folder in the way (:func:`folder_problem`), with what the run would have written there: a
    read-only report folder is found here, before any cell is computed, not after the whole run."""
    found: dict[str, list[str]] = {}
    for folder, what in written_folders(plan, profile, writes):
        problem = folder_problem(folder)
        if problem is not None and what not in found.setdefault(problem, []):
            found[problem].append(what)
    return [f"{problem} (needed for {'; '.join(whats[:2])}" + (f"; and {len(whats) - 2} more" if len(whats) > 2 else "")
            + ")" for problem, whats in found.items()]


def preflight(plan: dict[str, dict], profile: str, read_data: bool = False, stale: bool = True,
              notes: list[str] | None = None, strict: bool | None = None, writes: str = "all") -> list[str]:
    """Problems found without heavy work: folders the run writes that cannot be written (:func:`unwritable`;
    ``writes`` says which the run writes), stored cells of other parameters
    (naming the parameters that changed), and with ``read_data`` task data that is missing or unreadable. Corrupt
    cell files are not problems: a run moves them to ``quarantine/`` and recomputes them (as the README says);
    they are named in ``notes`` when given. A study folder an interrupted swap left half of one run and half of
    another is a problem for ``--check`` (``strict``, by default ``read_data``: the outputs are not valid as
    they are) and a note for a run (which completes the swap first)."""
    problems = unwritable(plan, profile, writes)
    strict = read_data if strict is None else strict
    for name, overrides in plan.items():
        study, cfg = study_config(name, overrides, profile)
        paths = StudyPaths(name, profile, staged=False)
        if writes != "cells" and isinstance(getattr(study, "notebook", None), str):  # the notebook runs
            problem = notebook_problem(name, study.notebook)
            if problem:
                problems.append(problem)
        half = half_swap(paths)
        if half and strict:
            problems.append(f"{name}: {half}")
        elif half and notes is not None:
            notes.append(f"{name}: {half}")
        if not hasattr(study, "fingerprint"):  # not a study of the protocol (a bare notebook): nothing to check
            continue
        device = models.resolve_device(getattr(cfg, "device", "cpu"))
        try:
            if stale and paths.cells.exists():  # read only: a check moves nothing (no quarantine)
                corrupt = ResultStore(paths.cells, study.fingerprint(cfg, device), quarantine=False,
                                      check=getattr(study, "check_record", None)).check_compatible()
                if corrupt and notes is not None:
                    notes.append(f"{name}: {len(corrupt)} corrupt cell file(s) (e.g. {relative(corrupt[0][0])}: "
                                 f"{corrupt[0][1]}): the run moves them to {relative(paths.dir / 'quarantine')}/ and "
                                 "recomputes those that are cells of the plan (any other file is only moved)")
        except StaleResultsError as exc:
            why = "" if getattr(exc, "copied_in", False) else changed_parameters(paths, cfg, study)
            problems.append(f"{name}: {exc}{why}")
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
