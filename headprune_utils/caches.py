"""One rule for every on-disk cache that cells and studies share (fine-tuned models, masked fine-tunings'
scores, trained translation models, cached evaluations):

    value = cached(path, build, load)

Under an exclusive lock on ``<path>.lock`` (processes side by side, or Ray workers on one machine, build each
entry once): if ``path`` exists, ``load(path)``; otherwise ``build(tmp)`` writes the entry to a temporary
sibling (a file or a folder), which is renamed to ``path`` only when complete (a crash never leaves half an
entry under the real name), then ``load(path)``. Entries are keyed by what they depend on (the caller puts a
fingerprint in the name: see :mod:`headprune_utils.paths`), so an entry is never stale, only absent.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .results import file_lock

T = TypeVar("T")


def cached(path: str | os.PathLike, build: Callable[[Path], None], load: Callable[[Path], T]) -> T:
    """``load(path)``, building the entry first (``build(tmp)``, then an atomic rename) when it is absent."""
    path = Path(path)
    with file_lock(path):
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


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    elif p.exists() or p.is_symlink():
        p.unlink()
