"""One rule for every on-disk cache that cells and studies share (fine-tuned models, masked fine-tunings'
scores, trained translation models, cached evaluations):

    value = cached(path, build, load)

Under an exclusive lock on ``<path>.lock`` (processes side by side, or Ray workers on one machine, build each
entry once): if ``path`` exists, ``load(path)``; otherwise ``build(tmp)`` writes the entry to a temporary
sibling (a file or a folder), which is renamed to ``path`` only when complete (a crash never leaves half an
entry under the real name), then ``load(path)``. Entries are keyed by what they depend on (the caller puts a
fingerprint in the name: see :mod:`headprune_utils.store.paths`), so an entry is never stale, only absent. An entry
that exists but cannot be loaded (truncated, corrupt) is moved to ``quarantine/`` beside it with a warning
naming it, and built again. Each entry records the name it was built under (:data:`KEY_FIELD`, written by the
caller's ``build``, checked by its ``load`` with :func:`check_entry_key`): an entry found under another name (a
cache file copied, swapped or restored to the wrong place) is quarantined and built again like a corrupt one.
"""
from __future__ import annotations

import os
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from headprune_utils.store.paths import relative_to_project
from headprune_utils.store.results import file_lock

T = TypeVar("T")


class CorruptCacheWarning(UserWarning):
    """A cache entry could not be loaded; it was quarantined and is built again."""


def cached(path: str | os.PathLike, build: Callable[[Path], None], load: Callable[[Path], T]) -> T:
    """``load(path)``, building the entry first (``build(tmp)``, then an atomic rename) when it is absent."""
    path = Path(path)
    with file_lock(path):
        if path.exists():
            try:
                return load(path)
            except Exception as exc:  # a corrupt entry: never silently used, never silently kept
                quarantine(path, f"{type(exc).__name__}: {exc}")
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            _remove(tmp)
            try:
                build(tmp)
                if not tmp.exists():
                    raise RuntimeError(f"building the cache entry {path.name} wrote nothing")
                os.replace(tmp, path)
            finally:
                _remove(tmp)
        return load(path)


KEY_FIELD = "cache_key"  # where an entry records the name it was built under (its key: the name holds the fingerprint)


def check_entry_key(path: Path, recorded: str | None) -> None:
    """Refuse an entry whose recorded key (``recorded``, the name it was built under) is not ``path``'s name: the
    entry of another model or mask, copied or swapped into this place; :func:`cached` then quarantines it and
    builds the right one. Entries written before keys were recorded (``None``) are read as they are."""
    if recorded is not None and recorded != path.name:
        raise ValueError(f"it holds the entry built as {recorded}, not {path.name} (copied or swapped into place?)")


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    elif p.exists() or p.is_symlink():
        p.unlink()


def quarantine(path: Path, why: str) -> Path:
    """Move a corrupt entry to ``<its folder>/quarantine/`` (kept for inspection), warning with its name."""

    dest = path.parent / "quarantine" / f"{path.name}.{time.strftime('%Y%m%d-%H%M%S')}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, dest)
    warnings.warn(f"corrupt cache entry {relative_to_project(path)} ({why[:200]}): moved to "
                  f"{relative_to_project(dest)}; building it again", CorruptCacheWarning, stacklevel=3)
    return dest
