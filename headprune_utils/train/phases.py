"""What a long computation is doing now, in words, for whoever shows progress (a bar, the runner's status line).

Training loops say their epoch and step (``"SST-2 s0 full: fine-tuning, epoch 1/3, step 40/57"``), a study's
context says what it loads; the run's driver (``run.execution``) listens and shows the latest phase beside its
cell count. Nothing is printed here and nothing lands in a notebook's outputs: a phase goes only to the listeners
registered with :func:`listening` (none, by default).

    with phases.listening(show):      # show(text) is called with every phase reported meanwhile
        phases.report("loading the model")
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

_LISTENERS: list[Callable[[str], None]] = []
_CURRENT = [""]


def report(text: str) -> None:
    """Say what runs now; every listener gets ``text`` (cheap when none listens: call it every step)."""
    _CURRENT[0] = text
    for listener in list(_LISTENERS):
        listener(text)


def current() -> str:
    """The phase reported last ("" before any)."""
    return _CURRENT[0]


@contextlib.contextmanager
def listening(listener: Callable[[str], None]) -> Iterator[None]:
    """Call ``listener(text)`` with every phase reported inside the block."""
    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)


def steps(what: str, step: int, total: int, epoch: int | None = None, epochs: int | None = None) -> str:
    """``"<what>, epoch 2/3, step 40/171"`` (the epoch part only when ``epochs`` is given)."""
    at = f", epoch {epoch}/{epochs}" if epochs is not None and epoch is not None else ""
    return f"{what}{at}, step {step}/{total}"
