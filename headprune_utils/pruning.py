"""Physical head pruning: remove heads from the weights.

For each pruned head the query/key/value output rows and the output-projection input columns are
sliced away, so the model is smaller and faster, and its outputs equal those of the model with the
same heads gated to zero (``head_gates(..., ablation="zero")``; a test checks it to 1e-5).

- A layer may lose ALL its heads: its attention then contributes only the output projection's bias
  (what a zero gate on every head gives); transformers' own old ``prune_heads`` crashed there.
- Pruning twice works; heads are always named by their ORIGINAL ids (``architecture.kept_heads``).
"""
from __future__ import annotations

import warnings

import torch
from torch import nn

from .architecture import AttentionSite, attention_sites, head_shape, kept_heads, set_kept_heads


class EmptyAttention(nn.Module):
    """Stands in for a self-attention module whose heads are all pruned.

    Returns a ``[batch, seq, 0]`` context (or, when the output projection lives inside the attention
    module as in DistilBERT, that projection applied to it: its bias), and no attention weights.
    """

    def __init__(self, out_proj: nn.Linear | None = None):
        super().__init__()
        self.out_proj = out_proj
        self.num_attention_heads = 0
        self.n_heads = 0

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        ctx = hidden_states.new_zeros(*hidden_states.shape[:-1], 0)
        if self.out_proj is not None:
            ctx = self.out_proj(ctx)
        return ctx, None


def _slice_linear(linear: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """A new Linear keeping ``index`` along ``dim`` of the weight (0: outputs, 1: inputs)."""
    index = index.to(linear.weight.device)
    w = linear.weight.index_select(dim, index).detach().clone()
    if dim == 0:
        b = linear.bias.index_select(0, index).detach().clone() if linear.bias is not None else None
    else:
        b = linear.bias.detach().clone() if linear.bias is not None else None
    with warnings.catch_warnings():  # a 0-input layer (all heads pruned) warns on init; it is overwritten anyway
        warnings.simplefilter("ignore", UserWarning)
        new = nn.Linear(w.shape[1], w.shape[0], bias=b is not None, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        new.weight.copy_(w)
        if b is not None:
            new.bias.copy_(b)
    new.weight.requires_grad_(linear.weight.requires_grad)
    if new.bias is not None and linear.bias is not None:
        new.bias.requires_grad_(linear.bias.requires_grad)
    return new


def _set_out_proj(site: AttentionSite, new: nn.Linear) -> None:
    module = site.module
    if site.out_proj_inside:
        if isinstance(module, EmptyAttention):
            module.out_proj = new
        else:
            module.out_lin = new
    else:
        site.parent.output.dense = new


def prune_heads(model: nn.Module, mask: torch.Tensor) -> nn.Module:
    """Remove, in place, every present head whose ``mask`` entry is 0.

    mask: ``[n_layers, n_heads]`` over ORIGINAL head ids, 1 = keep, 0 = prune. Keeping a head that an
    earlier call already removed is an error. Returns ``model``.
    """
    shape = head_shape(model)
    mask = torch.as_tensor(mask)
    if tuple(mask.shape) != shape:
        raise ValueError(f"mask must have shape [n_layers, n_heads] = {list(shape)}, got {list(mask.shape)}")
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask must hold only 0 (prune) and 1 (keep)")
    kept_before = kept_heads(model)
    kept_after: list[list[int]] = []
    for site in attention_sites(model):
        present = kept_before[site.layer]
        want = [h for h in range(shape[1]) if mask[site.layer, h] == 1]
        missing = sorted(set(want) - set(present))
        if missing:
            raise ValueError(f"layer {site.layer}: heads {missing} were already pruned and cannot be kept")
        keep_pos = [i for i, h in enumerate(present) if h in want]
        kept_after.append([present[i] for i in keep_pos])
        if len(keep_pos) == len(present):
            continue
        d = site.head_dim
        index = torch.tensor([i * d + j for i in keep_pos for j in range(d)], dtype=torch.long)
        new_out = _slice_linear(site.out_proj, index, dim=1)
        if not keep_pos:
            empty = EmptyAttention(new_out if site.out_proj_inside else None)
            setattr(site.parent, site.attr, empty)
            if not site.out_proj_inside:
                site.parent.output.dense = new_out
            continue
        module = site.module
        if site.out_proj_inside:  # DistilBERT
            module.q_lin = _slice_linear(module.q_lin, index, 0)
            module.k_lin = _slice_linear(module.k_lin, index, 0)
            module.v_lin = _slice_linear(module.v_lin, index, 0)
            module.n_heads = len(keep_pos)
        else:
            module.query = _slice_linear(module.query, index, 0)
            module.key = _slice_linear(module.key, index, 0)
            module.value = _slice_linear(module.value, index, 0)
            module.num_attention_heads = len(keep_pos)
            module.all_head_size = len(keep_pos) * d
        _set_out_proj(site, new_out)
    set_kept_heads(model, kept_after)
    return model


def count_attention_params(model: nn.Module) -> int:
    """Parameters of the attention blocks' q/k/v and output projections (to report what pruning saved)."""
    total = 0
    for site in attention_sites(model):
        for lin in (site.query, site.key, site.value, site.out_proj):
            if lin is not None:
                total += sum(p.numel() for p in lin.parameters())
    return total
