"""Head gates through hooks (transformers v5 has no ``head_mask``).

A gate ``g[l, h]`` scales head ``h`` of layer ``l`` between its real output (``g = 1``) and an
ablated output (``g = 0``). The hook sits on each layer's attention output projection, whose input is
the concatenation of the per-head contexts ``[batch, seq, n_heads * head_dim]``:

    context_h  <-  g * context_h + (1 - g) * ablated_h

Ablation semantics (``ablation=``):

- ``"zero"``    ablated_h = 0. Michel et al. 2019 and the old Hugging Face ``head_mask`` (post-softmax
                probabilities times the mask); equals physically removing the head.
- ``"uniform"`` ablated_h = the mean of the head's value vectors over the non-padding tokens of the
                sentence, i.e. the head attends uniformly. Budhraja et al.'s BERT code (pre-softmax
                scores times 0) and Kovaleva et al.'s "disabled" heads. Attention dropout is not
                applied to the uniform part.
- ``"mean"``    ablated_h = the head's mean context over a reference set of tokens (mean-ablation),
                computed once by :func:`head_means` and passed as ``means=``.

Gates may require grad: the hooks are differentiable in ``g`` (gradient importance, L0 gates).
Hooks are removed when the ``with`` block ends, also on error.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator, Literal

import torch
from torch import nn

from .architecture import _base, attention_sites, head_shape, kept_heads, key_padding_mask_from_call

Ablation = Literal["zero", "uniform", "mean"]
ABLATIONS: tuple[str, ...] = ("zero", "uniform", "mean")


def check_gates(model: nn.Module, gates: torch.Tensor) -> torch.Tensor:
    shape = head_shape(model)
    if not isinstance(gates, torch.Tensor):
        gates = torch.as_tensor(gates, dtype=torch.float32)
    if tuple(gates.shape) != shape:
        raise ValueError(f"gates must have shape [n_layers, n_heads] = {list(shape)}, got {list(gates.shape)}")
    return gates


@contextmanager
def head_gates(
    model: nn.Module,
    gates: torch.Tensor,
    ablation: Ablation = "zero",
    means: torch.Tensor | None = None,
) -> Iterator[torch.Tensor]:
    """Apply ``gates`` ([n_layers, n_heads], original head ids) to ``model`` inside the block.

    ``means``: ``[n_layers, n_heads, head_dim]`` from :func:`head_means`, required for ``"mean"``.
    Yields the gate tensor (so callers can keep a handle on a ``requires_grad`` tensor).
    """
    if ablation not in ABLATIONS:
        raise ValueError(f"unknown ablation {ablation!r}; choose one of {ABLATIONS}")
    gates = check_gates(model, gates)
    if ablation == "mean":
        if means is None:
            raise ValueError('ablation="mean" needs means= (compute them with head_means(model, batches))')
        n_layers, n_heads = head_shape(model)
        if means.shape[:2] != (n_layers, n_heads):
            raise ValueError(f"means must be [n_layers, n_heads, head_dim], got {list(means.shape)}")

    kept = kept_heads(model)
    handles: list[torch.utils.hooks.RemovableHandle] = []
    state: dict = {}  # per-forward captures: key padding mask, value projections per layer

    def capture_mask(module, args, kwargs):
        state["key_mask"] = key_padding_mask_from_call(args, kwargs)

    def make_value_hook(layer: int):
        def hook(module, args, output):
            state[("value", layer)] = output

        return hook

    def make_gate_hook(layer: int, head_dim: int):
        ids = kept[layer]
        if not ids:
            return None
        index = torch.tensor(ids, dtype=torch.long)

        def hook(module, args):
            ctx = args[0]
            b, s, _ = ctx.shape
            ctx4 = ctx.view(b, s, len(ids), head_dim)
            g = gates[layer].to(device=ctx.device, dtype=ctx.dtype).index_select(0, index.to(ctx.device))
            g4 = g.view(1, 1, -1, 1)
            if ablation == "zero":
                out = ctx4 * g4
            elif ablation == "uniform":
                v = state.pop(("value", layer)).view(b, s, len(ids), head_dim)
                key_mask = state.get("key_mask")
                if key_mask is None:
                    u = v.mean(dim=1, keepdim=True)
                else:
                    w = key_mask.to(v.dtype).view(b, s, 1, 1)
                    u = (v * w).sum(dim=1, keepdim=True) / w.sum(dim=1, keepdim=True).clamp_min(1.0)
                out = ctx4 * g4 + (1 - g4) * u
            else:
                m = means[layer].to(device=ctx.device, dtype=ctx.dtype).index_select(0, index.to(ctx.device))
                out = ctx4 * g4 + (1 - g4) * m.view(1, 1, len(ids), head_dim)
            return (out.reshape(b, s, -1),) + tuple(args[1:])

        return hook

    try:
        if ablation == "uniform":
            handles.append(_base(model).register_forward_pre_hook(capture_mask, with_kwargs=True))
        for site in attention_sites(model):
            hook = make_gate_hook(site.layer, site.head_dim)
            if hook is None:
                continue
            if ablation == "uniform":
                handles.append(site.value.register_forward_hook(make_value_hook(site.layer)))
            handles.append(site.out_proj.register_forward_pre_hook(hook))
        yield gates
    finally:
        for h in handles:
            h.remove()
        state.clear()


@contextmanager
def capture_head_contexts(model: nn.Module) -> Iterator[dict[int, torch.Tensor]]:
    """Record each layer's per-head context ``[batch, seq, n_present, head_dim]`` of the last forward."""
    store: dict[int, torch.Tensor] = {}
    handles = []

    def make(layer: int, head_dim: int):
        def hook(module, args):
            ctx = args[0]
            b, s, hd = ctx.shape
            store[layer] = ctx.detach().view(b, s, hd // head_dim, head_dim)

        return hook

    try:
        for site in attention_sites(model):
            if kept_heads(model)[site.layer]:
                handles.append(site.out_proj.register_forward_pre_hook(make(site.layer, site.head_dim)))
        yield store
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def head_means(model: nn.Module, batches: Iterable[dict[str, torch.Tensor]]) -> torch.Tensor:
    """Mean context of every head over the non-padding tokens of ``batches``.

    Returns ``[n_layers, n_heads, head_dim]`` (zeros for heads that are not present), for
    ``head_gates(..., ablation="mean", means=...)``. Batches are dicts of model inputs on the model's device.
    """
    n_layers, n_heads = head_shape(model)
    sites = attention_sites(model)
    head_dim = sites[0].head_dim
    kept = kept_heads(model)
    total = torch.zeros(n_layers, n_heads, head_dim, dtype=torch.float64)
    count = 0.0
    was_training = model.training
    model.eval()
    try:
        with capture_head_contexts(model) as store:
            for batch in batches:
                inputs = {k: v for k, v in batch.items() if k != "labels"}
                model(**inputs)
                w = inputs["attention_mask"].to(torch.float64)  # [batch, seq]
                count += float(w.sum())
                for layer, ctx in store.items():
                    s = torch.einsum("bshd,bs->hd", ctx.to(torch.float64), w.to(ctx.device))
                    total[layer, kept[layer]] += s.cpu()
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("head_means got no tokens")
    return (total / count).to(torch.float32)
