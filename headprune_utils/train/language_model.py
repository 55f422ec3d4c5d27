"""Training a causal language model for a few steps (the offline stand-in model of ``notebooks/your_own_model``).

Plain AdamW on the model's own next-token loss (``labels`` in the batches, ``-100`` on padding), a linear
warm-up over the first tenth of the steps, cycling through ``batches`` in a seeded order. Not a recipe for real
pre-training: enough to turn a random tiny model into one whose heads do something measurable.
"""
from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["train_lm"]


def train_lm(model: nn.Module, batches: list[dict[str, torch.Tensor]], steps: int, lr: float = 3e-3,
             seed: int = 0, weight_decay: float = 0.01) -> list[float]:
    """Train ``model`` in place for ``steps`` optimisation steps; returns the training loss of every step.
    Leaves the model in eval mode. A non-finite loss stops with an error naming the step."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if not batches:
        raise ValueError("train_lm got no batches")
    if any("labels" not in b for b in batches):
        raise ValueError("train_lm needs batches with labels (tasks.text.lm_batches makes them)")
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
    order: list[int] = []
    losses = []
    model.train()
    for step in range(steps):
        if not order:
            order = torch.randperm(len(batches), generator=gen).tolist()
        batch = batches[order.pop()]
        loss = model(**batch, use_cache=False).loss
        if not math.isfinite(float(loss.detach())):
            raise FloatingPointError(f"train_lm: the loss is not finite at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses
