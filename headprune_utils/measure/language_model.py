"""Causal language-model loss and perplexity, with or without head gates.

``lm_loss`` is the mean next-token cross-entropy over every real target token of the batches (token-weighted, so
a batch's weight is its number of predicted tokens, not 1): position ``t`` predicts token ``t + 1`` where both are
real (``attention_mask``), as Hugging Face's causal-LM loss with ``-100`` labels on padding, summed over batches
before dividing. A batch with ``labels`` (as ``tasks.text.lm_batches`` makes them) is scored on those: token
``t + 1``'s label where it is not ``-100`` (e.g. a prompt left out of the score). ``perplexity`` is ``exp`` of it. Gates go through :func:`~headprune_utils.model.gates.head_gates`
(any ablation object or its name), so a gated model and a pruned one are measured by the same code.
"""
from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from headprune_utils.model.gates import head_gates

__all__ = ["lm_loss", "perplexity"]


@torch.no_grad()
def lm_loss(model: nn.Module, batches: Iterable[dict[str, torch.Tensor]], gates=None, ablation="zero",
            means=None) -> float:
    """Mean next-token cross-entropy (nats per token) of ``model`` over ``batches`` (dicts with ``input_ids`` and
    optionally ``attention_mask``, every token real when it is left out, and ``labels``: see the module), under
    ``gates`` when given. Non-finite: an error."""
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    ctx = head_gates(model, gates, ablation=ablation, means=means) if gates is not None else nullcontext()
    try:
        with ctx:
            for batch in batches:
                if "input_ids" not in batch:
                    raise ValueError(f"each batch needs input_ids (got the keys {sorted(batch)})")
                ids = batch["input_ids"]
                mask = batch.get("attention_mask")
                if mask is None:  # as Hugging Face's models take it: every token real
                    mask = torch.ones_like(ids)
                if tuple(mask.shape) != tuple(ids.shape):  # no cache here: a column per position, no more
                    raise ValueError(f"attention_mask must have the shape of input_ids {list(ids.shape)}, got "
                                     f"{list(mask.shape)}")
                logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
                target = batch.get("labels")
                if target is None:
                    target = ids[:, 1:]
                    real = (mask[:, :-1] * mask[:, 1:]).bool()  # the position and its next token both real
                else:  # the labels say which tokens are targets (-100: not one), as Hugging Face's loss
                    if target.shape != ids.shape:
                        raise ValueError(f"labels must have the shape of input_ids {list(ids.shape)}, got "
                                         f"{list(target.shape)}")
                    target = target[:, 1:]
                    real = mask[:, :-1].bool() & (target != -100)
                if not bool(real.any()):
                    continue
                ce = F.cross_entropy(logits[:, :-1][real].double(), target[real], reduction="sum")
                total += float(ce)
                count += int(real.sum())
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("lm_loss got no target token (every batch empty or one token long)")
    loss = total / count
    if not math.isfinite(loss):
        raise FloatingPointError(f"the language-model loss is not finite ({loss}); the model's outputs overflowed")
    return loss


def perplexity(model: nn.Module, batches: Iterable[dict[str, torch.Tensor]], gates=None, ablation="zero",
               means=None) -> float:
    """``exp(lm_loss(...))``: the model's perplexity on the batches' real tokens."""
    return math.exp(lm_loss(model, batches, gates=gates, ablation=ablation, means=means))
