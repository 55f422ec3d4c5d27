"""The checks before any heavy work, so that a run that cannot finish stops at once instead of hours in.

Outputs that cannot be written, a study folder left half swapped (a run killed while swapping its outputs in),
stored cells of other parameters (which a run would refuse to mix with new ones; the message names the parameters
that changed) and, for ``--check``, task data that is missing or unreadable. Nothing is trained, loaded or moved.
"""
from __future__ import annotations

import os
from pathlib import Path

from headprune_utils.model import models
from headprune_utils.run.execution import changed_parameters
from headprune_utils.run.notebooks import half_swap, relative
from headprune_utils.run.profiles import study_config
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import CorruptCellError, ResultStore, StaleResultsError
from headprune_utils.tasks import data


def writable(path: Path) -> bool:
    """Whether ``path`` (or, where it does not exist yet, its nearest existing parent) can be written to."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return os.access(p, os.W_OK | os.X_OK)


def preflight(plan: dict[str, dict], profile: str, read_data: bool = False, stale: bool = True,
              notes: list[str] | None = None, strict: bool | None = None) -> list[str]:
    """Problems found without heavy work: outputs that cannot be written, stored cells of other parameters
    (naming the parameters that changed), and with ``read_data`` task data that is missing or unreadable. Corrupt
    cell files are not problems: a run moves them to ``quarantine/`` and recomputes them (as the README says);
    they are named in ``notes`` when given. A study folder an interrupted swap left half of one run and half of
    another is a problem for ``--check`` (``strict``, by default ``read_data``: the outputs are not valid as
    they are) and a note for a run (which completes the swap first)."""
    problems = []
    strict = read_data if strict is None else strict
    for name, overrides in plan.items():
        study, cfg = study_config(name, overrides, profile)
        paths = StudyPaths(name, profile, staged=False)
        if not writable(paths.dir) or (paths.dir.exists() and not writable(paths.dir.parent)):
            problems.append(f"{name}: the outputs folder {relative(paths.dir)} cannot be written (permissions)")
            continue
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
                                 "recomputes them")
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
