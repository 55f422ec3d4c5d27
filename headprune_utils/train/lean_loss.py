"""A sequence classifier's training loss computed only where the loss reads it (``TrainConfig.lean``).

A fine-tuning step of a BERT-style classifier spends most of its time in matrix products over every position of a
padded batch, yet the loss reads one vector per sentence: the first token's final hidden state. Two kinds of work
are therefore wasted, and this module leaves both out while computing the same function:

1. **Padding.** Each length-grouped batch is padded to its longest sentence (about 13% of the positions of an SST-2
   epoch at batch 32). Here hidden states are PACKED, ``[T, hidden]`` for the T real tokens of the batch, so the
   projections, LayerNorms, feed-forward, dropout and embeddings run on real tokens only; only the attention
   itself runs on the padded ``[B, heads, S, S]`` layout, with the padding masked as keys (as the model does).
2. **The last layer's other tokens.** The classification head reads token 0 of the last layer only, so the last
   layer computes its keys and values for every token but its query, attention output projection, LayerNorms and
   feed-forward for token 0 alone (about 10/12 of that layer's products).

Padding never influences a real token (it is masked as a key) and the other tokens of the last layer never reach
the loss, so loss and gradients are those of the model's own forward up to float rounding (the tests compare
both, and the gradients of every parameter, with dropout off; float32 agrees to ~1e-6). With dropout on, the
dropout masks are drawn over other tensor shapes, so a lean run follows a different (equally valid) random
stream than a plain one: the same seed gives the same numbers, but not the plain path's numbers. That is why
the option is part of a trained model's cache key when it is on (``GlueStudyConfig.lean_training``).

Head gates (``[n_layers, n_heads]`` over original head ids, any ablation of :mod:`gates`) are applied with
:func:`gates.ablate_heads`, the formula ``head_gates`` hooks apply, to the contexts of the present heads before
the output projection; physically pruned heads (``pruning.prune_heads``, including layers with no head left) are
simply absent.

Supported: BERT-layout encoders with a pooler and a sequence-classification head (``BertForSequenceClassification``
and models shaped like it, e.g. the embedded MiniLM), absolute position embeddings, problem types regression and
single-label classification. :func:`unsupported_reason` says why another model is not; ``training.finetune``
then uses the plain forward with a ``RuntimeWarning``. A model with a forward hook or pre-hook registered on any
module is refused too: its hooks (e.g. an open ``head_gates`` block) would not see the calls they expect.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from headprune_utils.model.architecture import attention_sites, family_of, kept_heads, layout_problem
from headprune_utils.model.ablations import HeadAblation, as_ablation
from headprune_utils.model.gates import check_gates

__all__ = ["unsupported_reason", "lean_loss"]

_ATTN = ("sdpa", "eager")


def _records_only(hook) -> bool:
    """Hugging Face's own output-recording hook (``output_attentions``): it only records, and only while a forward
    asks for the outputs, which the lean loss never does."""
    return (getattr(hook, "__module__", "") or "").startswith("transformers.") and getattr(
        hook, "__name__", "") == "output_capturing_hook"


def _hooked(model: nn.Module) -> str | None:
    for name, m in model.named_modules():
        if m._forward_pre_hooks or any(not _records_only(h) for h in m._forward_hooks.values()):
            return name or "the model"
    return None


def unsupported_reason(model: nn.Module) -> str | None:
    """None when :func:`lean_loss` computes ``model``'s loss exactly; else why not, in words."""
    problem = layout_problem(model)
    if problem is not None:
        return problem
    cfg = model.config
    family = family_of(model)
    positions = family.position_embedding(cfg)
    if positions not in (None, "absolute"):
        return f"position_embedding_type={positions!r} (only absolute position embeddings)"
    if getattr(cfg, "_attn_implementation", None) not in (*_ATTN, None):
        return f"attention implementation {cfg._attn_implementation!r} (only {_ATTN})"
    if getattr(cfg, "problem_type", None) not in (None, "regression", "single_label_classification"):
        return f"problem_type={cfg.problem_type!r}"
    if family.classifier_parts(model) is None:
        return ("not a pooled sequence classifier with BERT's head (a base model with a pooler under dropout, then "
                "one linear classifier)")
    layers = family.post_norm_layers(model)
    if len(layers) == 0:
        return "an encoder without layers"
    for i, lp in enumerate(layers):
        if lp.query is not None and not isinstance(lp.attention_dropout, nn.Dropout):
            return f"layer {i}'s self-attention has no attention dropout module"
    hooked = _hooked(model)
    if hooked is not None:
        return (f"a forward hook is registered on {hooked} (e.g. an open head_gates block): pass the gates to "
                "finetune instead")
    return None


def _layer_gates(model: nn.Module, gates, ablation: HeadAblation, means) -> list[tuple[torch.Tensor, torch.Tensor | None] | None]:
    """Per layer: ``(gates of the present heads, their means or None)``, or None where no gate is given."""
    n_layers = len(kept_heads(model))
    if gates is None:
        return [None] * n_layers
    grid = check_gates(model, gates)
    if not isinstance(grid, torch.Tensor):
        raise ValueError("gates must be one [n_layers, n_heads] tensor for an encoder classifier")
    if ablation.needs_means:
        if means is None:
            raise ValueError(f'ablation="{ablation.name}" needs means ([n_layers, n_heads, head_dim], gates.head_means)')
        means = torch.as_tensor(means)
        if tuple(means.shape[:2]) != tuple(grid.shape):
            raise ValueError(f"means must have shape [n_layers, n_heads, head_dim] with [n_layers, n_heads] = "
                             f"{list(grid.shape)}, got {list(means.shape)}")
    out = []
    for layer, ids in enumerate(kept_heads(model)):
        idx = torch.tensor(ids, dtype=torch.long)
        g = grid[layer].detach().index_select(0, idx)
        m = means[layer].index_select(0, idx) if ablation.needs_means else None
        out.append((g, m))
    return out


def _loss(model: nn.Module, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss ``BertForSequenceClassification`` computes (its problem-type rule, unchanged)."""
    n = model.config.num_labels
    problem = model.config.problem_type
    if problem is None:
        problem = "regression" if n == 1 else (
            "single_label_classification" if labels.dtype in (torch.long, torch.int) else "multi_label_classification")
    if problem == "regression":
        return F.mse_loss(logits.squeeze(), labels.squeeze()) if n == 1 else F.mse_loss(logits, labels)
    if problem == "single_label_classification":
        return F.cross_entropy(logits.view(-1, n), labels.view(-1))
    raise ValueError(f"lean_loss: problem type {problem!r} is not supported")


def lean_loss(model: nn.Module, batch: dict[str, torch.Tensor], gates=None, ablation: str | HeadAblation = "zero",
              means=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, logits [B, n_labels])`` of ``model`` on ``batch`` (``batching.collate``'s dict: input_ids,
    attention_mask, optional token_type_ids, labels), as ``model(**batch)`` computes them with ``gates``
    applied as ``head_gates(model, gates, ablation, means)`` would, without the work on padding and on the
    last layer's tokens other than the first. Dropout follows ``model.training``. The caller checks
    :func:`unsupported_reason` first (``training.finetune`` does)."""
    family = family_of(model)
    parts = family.classifier_parts(model)
    ids, key_mask = batch["input_ids"], batch["attention_mask"]
    b, s = ids.shape
    dev = ids.device
    if not bool(key_mask[:, 0].all()):
        raise ValueError("lean_loss needs every sentence's first position to be a real token (right padding)")
    lengths = key_mask.sum(dim=1)
    if not bool((key_mask == (torch.arange(s, device=dev) < lengths[:, None])).all()):
        raise ValueError("lean_loss needs right padding (real tokens first in each row)")
    real = key_mask.reshape(-1).nonzero().squeeze(1)  # [T] flat positions of the real tokens
    cls = torch.cumsum(lengths, 0) - lengths  # [B] packed row of each sentence's token 0
    row_sentence = real // s  # [T]
    positions = (real % s)[None]
    tt = batch.get("token_type_ids")
    tt = tt.reshape(-1).index_select(0, real)[None] if tt is not None else torch.zeros_like(positions)
    x = parts.embeddings(input_ids=ids.reshape(-1).index_select(0, real)[None], token_type_ids=tt,
                        position_ids=positions)[0]  # [T, hidden]
    attn_mask = key_mask.bool()[:, None, None, :]  # [B, 1, 1, S] keys
    ablation = as_ablation(ablation)
    per_layer = _layer_gates(model, gates, ablation, means)
    layers = family.post_norm_layers(model)
    head_dims = [site.head_dim for site in attention_sites(model)]
    for i, lp in enumerate(layers):
        last = i == len(layers) - 1
        xq = x.index_select(0, cls) if last else x
        r = xq.shape[0]
        d = head_dims[i]
        n = 0 if lp.query is None else lp.query.out_features // d
        if n == 0:  # no head left: the output projection of nothing is its bias
            proj = lp.out(xq.new_zeros(r, lp.out.in_features))
        else:

            def padded(t):  # [T, n d] -> [B, n, S, d]
                out = t.new_zeros(b * s, n * d).index_copy(0, real, t)
                return out.view(b, s, n, d).transpose(1, 2)

            k, v = padded(lp.key(x)), padded(lp.value(x))
            if last:
                q = lp.query(xq).view(b, 1, n, d).transpose(1, 2)  # [B, n, 1, d]
            else:
                q = padded(lp.query(x))
            p = lp.attention_dropout.p if lp.attention.training else 0.0
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p,
                                                 scale=lp.scaling if lp.scaling is not None else d ** -0.5)
            ctx = ctx.transpose(1, 2)  # [B, Sq, n, d]
            ctx = ctx.reshape(b, n, d)[:, None] if last else ctx.reshape(b * s, n, d).index_select(0, real)[:, None]
            gm = per_layer[i]
            if gm is not None:
                g, m = gm
                ctx = ablation.apply(ctx, g.to(device=ctx.device, dtype=ctx.dtype),
                                     values=v.transpose(1, 2), key_mask=key_mask,
                                     means=None if m is None else m.to(device=ctx.device, dtype=ctx.dtype),
                                     rows=None if last else row_sentence)
            proj = lp.out(ctx.reshape(r, n * d))
        att = lp.norm(lp.dropout(proj) + xq)
        x = lp.ffn(att)
    pooled = parts.pooler(x[:, None, :])  # [B, hidden]: the pooler reads token 0
    logits = parts.classifier(parts.dropout(pooled))
    return _loss(model, logits, batch["labels"]), logits
