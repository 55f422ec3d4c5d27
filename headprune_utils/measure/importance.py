"""Gradient head importance (Michel et al. 2019, "Are Sixteen Heads Really Better than One?").

Each head ``h`` gets a gate ``g_h`` (``headprune_utils.model.gates.head_gates``) set to its mask value (1 when
no mask is given) and the importance is the expected absolute sensitivity of the loss to that gate:

    I_h = (1 / N) * sum_b  n_b * | dL_b / dg_h |

where ``L_b`` is the model's own loss on batch ``b`` (the MEAN over its ``n_b`` examples for the
sequence-classification heads of transformers), and ``N = sum_b n_b``. In words: the example-weighted
mean over batches of the absolute gradient of the batch loss. The absolute value is taken per BATCH (as in
Michel et al.'s and Hugging Face's bertology code), so a head whose gradients cancel within a batch scores
low. ``per_example=True`` runs every example on its own (padding trimmed), which gives exactly Michel et
al.'s ``E_x | dL(x) / dg_h |`` (absolute value per example), at the cost of one forward/backward per example.

Per-layer normalisation (Michel et al., section 4.1; ``normalize_layers=True``) divides the scores of each
layer by their L2 norm over the heads considered (a layer whose considered scores are all zero is left at
zero). Units: loss units per unit of gate before normalisation, unitless after.

The model is left as it was: no ``.grad`` is accumulated on its parameters (gradients are taken with
``torch.autograd.grad`` w.r.t. the gates only), the forward passes run in ``eval()`` mode (no dropout) and
the previous train/eval mode is restored, the weights are untouched and every hook is removed.
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from headprune_utils.model.architecture import head_shape, present_mask
from headprune_utils.model.gates import Ablation, head_gates

SEQUENCE_KEYS = ("input_ids", "attention_mask", "token_type_ids", "position_ids")


def _examples(batch: dict[str, torch.Tensor]) -> Iterable[dict[str, torch.Tensor]]:
    """Split a padded batch into single-example batches with the padding trimmed: the positions its
    ``attention_mask`` marks real (right or left padding alike) of the token-aligned inputs, and of ``labels`` when
    they are per token (a causal LM's, shaped as ``input_ids``)."""
    mask = batch.get("attention_mask")
    n = int(batch["labels"].shape[0])
    ids = batch.get("input_ids")
    token_labels = ids is not None and batch["labels"].shape == ids.shape
    for i in range(n):
        real = mask[i].bool() if mask is not None else None
        one = {}
        for k, v in batch.items():
            if not isinstance(v, torch.Tensor):
                one[k] = v
            elif real is not None and v.dim() >= 2 and (k in SEQUENCE_KEYS or (k == "labels" and token_labels)):
                one[k] = v[i : i + 1][:, real]
            else:
                one[k] = v[i : i + 1]
        yield one


def _is_causal_lm(model: nn.Module) -> bool:
    """Whether ``model`` is one of Hugging Face's causal-LM classes (its loss shifts the labels by one)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return type(model).__name__ in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())


def _targets_from_real_positions(model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A causal LM's batch whose labels no longer count a token predicted FROM a padding position (under left
    padding, the first real token of a row is predicted from the pad before it): that label set to -100, as
    ``lm_loss`` and ``perplexity`` count tokens (position ``t`` predicts ``t + 1`` where both are real) and as the
    per-example form, which trims the padding, does. Other batches are returned as they are."""
    labels, mask, ids = batch.get("labels"), batch.get("attention_mask"), batch.get("input_ids")
    if (labels is None or mask is None or ids is None or labels.shape != ids.shape or mask.shape != ids.shape
            or labels.dim() != 2 or not _is_causal_lm(model)):
        return batch
    from_pad = torch.zeros_like(mask, dtype=torch.bool)
    from_pad[:, 1:] = ~mask[:, :-1].bool()
    if not bool(from_pad.any()):
        return batch
    return {**batch, "labels": labels.masked_fill(from_pad.to(labels.device), -100)}


def layer_normalize(scores: torch.Tensor) -> torch.Tensor:
    """Divide each row (layer) of ``scores`` ``[n_layers, n_heads]`` by its L2 norm over its non-NaN entries.

    NaN entries stay NaN and are left out of the norm; a row whose norm is 0 is returned unchanged.
    """
    finite = ~torch.isnan(scores)
    norm = torch.where(finite, scores, torch.zeros_like(scores)).pow(2).sum(dim=1, keepdim=True).sqrt()
    return torch.where(norm > 0, scores / torch.where(norm > 0, norm, torch.ones_like(norm)), scores)


def head_importance(
    model: nn.Module,
    batches: Iterable[dict[str, torch.Tensor]],
    mask: torch.Tensor | None = None,
    ablation: Ablation = "zero",
    means: torch.Tensor | None = None,
    normalize_layers: bool = True,
    exclude_pruned: bool = True,
    per_example: bool = False,
) -> torch.Tensor:
    """Michel et al.'s gradient importance of every head, ``[n_layers, n_heads]`` float32, original head ids.

    model: a sequence-classification (or any ``labels``-taking) BERT-family model, possibly physically pruned.
    batches: dicts of model inputs WITH ``labels`` (``input_ids``/``attention_mask`` ``[batch, seq]``, ...)
        on the model's device; the loss is the model's own (``model(**batch).loss``).
    mask: ``[n_layers, n_heads]`` gate values (1 = kept, 0 = gated off; fractional values allowed) at which the
        gradient is taken; ``None`` = all ones.
    ablation, means: what a gate of 0 means (see ``headprune_utils.model.gates``); gradients differ by ablation.
    normalize_layers: divide each layer by the L2 norm of its considered scores (see module docstring).
    exclude_pruned: heads with ``mask == 0`` are returned as NaN and left out of the normalisation. Heads that
        are physically absent (``kept_heads``) are NaN in any case.
    per_example: take ``|.|`` per example instead of per batch (exact Michel et al.; slower).

    A causal LM's loss counts the tokens ``lm_loss`` counts: a target predicted from a padding position (the first
    real token of a left-padded row) is left out in both forms. Each batch (or example) weighs by its number of
    examples, not of tokens.

    Returns ``I`` with ``I[l, h] = (1/N) sum_b n_b |dL_b/dg[l, h]|`` (or its per-example form), then normalised.
    """
    n_layers, n_heads = head_shape(model)
    params = list(model.parameters())
    dtype = params[0].dtype if params and params[0].is_floating_point() else torch.float32
    device = params[0].device if params else torch.device("cpu")
    if mask is None:
        gate_values = torch.ones(n_layers, n_heads, dtype=dtype, device=device)
    else:
        gate_values = torch.as_tensor(mask).to(device=device, dtype=dtype)
        if tuple(gate_values.shape) != (n_layers, n_heads):
            raise ValueError(f"mask must have shape [n_layers, n_heads] = {[n_layers, n_heads]}, "
                             f"got {list(gate_values.shape)}")

    total = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    count = 0
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            for batch in batches:
                if "labels" not in batch:
                    raise ValueError("head_importance needs batches with labels (the gradient is of the model's loss)")
                mask = batch.get("attention_mask")
                if mask is not None and mask.dim() == 2 and bool((mask.sum(-1) == 0).any()):
                    rows = (mask.sum(-1) == 0).nonzero().flatten().tolist()
                    raise ValueError(f"head_importance: example(s) {rows} of a batch have no real token "
                                     "(attention_mask all 0): there is nothing to score")
                parts = _examples(batch) if per_example else (_targets_from_real_positions(model, batch),)
                for part in parts:
                    n = int(part["labels"].shape[0])
                    gates = gate_values.detach().clone().requires_grad_(True)
                    with head_gates(model, gates, ablation=ablation, means=means):
                        loss = model(**part).loss
                    if loss is None:
                        raise ValueError("the model returned no loss for this batch")
                    (grad,) = torch.autograd.grad(loss, gates, allow_unused=True)
                    if grad is not None:
                        total += n * grad.detach().abs().to("cpu", torch.float64)
                    count += n
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("head_importance got no examples")

    scores = total / count
    considered = present_mask(model).bool()
    if exclude_pruned:
        considered &= gate_values.detach().cpu() != 0
    scores[~considered] = float("nan")
    if normalize_layers:
        scores = layer_normalize(scores)
    return scores.to(torch.float32)


__all__ = ["head_importance", "layer_normalize"]
