"""Numeric precision of forward passes: the one home of the ``precision=`` setting.

``precision`` is one of :data:`PRECISIONS`:

- ``"auto"`` (the default): bf16 autocast on a CUDA device that supports bfloat16
  (``torch.cuda.is_bf16_supported()``), plain float32 everywhere else. On the CPU no autocast context is
  entered at all, so the numbers are bit-identical to code that never heard of this module (the determinism
  tests and the cached results rely on it).
- ``"fp32"``: plain float32 on every device (no autocast).
- ``"bf16"``: bf16 autocast on whatever device, the CPU included (the equivalence tests use it there).

Autocast only: weights, gradients and optimizer states stay float32 (nothing is ``.half()``-ed), the
matrix products run in bfloat16 and the ops autocast keeps in float32 (softmax, LayerNorm, losses) stay there.
bfloat16 has float32's exponent range, so no ``GradScaler`` is needed. Enter the context around the forward
pass and the loss; call ``backward()`` outside it, as usual.

Head gates (``gates.head_gates``) cast each gate to the activations' dtype inside their hooks, so they work
under autocast too; their exactness is tested in float32 on the CPU and in bf16 within a stated tolerance
(``tests/unit/test_precision.py``).
"""
from __future__ import annotations

import contextlib
from typing import Literal

import torch

__all__ = ["Precision", "PRECISIONS", "check_precision", "resolve_precision", "autocast_context", "training_key"]

Precision = Literal["auto", "fp32", "bf16"]
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16")


def check_precision(precision) -> str:
    """``precision`` if it is one of :data:`PRECISIONS`, else ValueError naming the parameter."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


def _device(device) -> torch.device:
    if isinstance(device, torch.nn.Module):
        device = next(device.parameters()).device
    return torch.device(device)


def resolve_precision(device, precision: str = "auto") -> str:
    """What ``precision`` means on ``device`` (a ``torch.device``, a string such as ``"cuda"``, or a model, whose
    first parameter's device is used): ``"fp32"`` or ``"bf16"``."""
    check_precision(precision)
    dev = _device(device)
    if precision == "auto":
        # is_bf16_supported() is only asked on CUDA (on the CPU it would initialise nothing useful)
        return "bf16" if dev.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    if precision == "bf16" and dev.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError('precision="bf16" but this CUDA device does not support bfloat16; use "auto" or "fp32"')
    return precision


def autocast_context(device, precision: str = "auto"):
    """A context manager for the forward pass: ``torch.autocast(device.type, dtype=torch.bfloat16)`` when
    ``precision`` resolves to bf16 on ``device`` (:func:`resolve_precision`), else a ``contextlib.nullcontext()``
    (no autocast entered: float32 results bit-identical to plain code). ValueError for an unknown ``precision``."""
    if resolve_precision(device, precision) == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=_device(device).type, dtype=torch.bfloat16)


def training_key(device) -> dict:
    """What a cache key or fingerprint of TRAINED results must add for the training precision ``"auto"`` means on
    ``device``: nothing where it is float32 (the CPU: keys made before the setting existed stay valid),
    ``{"training_precision": "bf16"}`` where it is bf16 (so models and cells trained in float32 on CUDA before
    the setting are never mixed with bf16-trained ones)."""
    p = resolve_precision(device, "auto")
    return {} if p == "fp32" else {"training_precision": p}
