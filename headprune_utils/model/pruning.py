"""Physical head pruning: remove heads from the weights.

For each pruned head the query/key/value output rows and the output-projection input columns are
sliced away, so the model is smaller and faster, and its outputs equal those of the model with the
same heads gated to zero (``head_gates(..., ablation="zero")``; a test checks it to 1e-5).

- A layer may lose ALL its heads: its attention then contributes only the output projection's bias
  (what a zero gate on every head gives); transformers' own old ``prune_heads`` crashed there.
- Pruning twice works; heads are always named by their ORIGINAL ids (``architecture.kept_heads``).
- Encoder-decoders (Marian, BART) take the mask as a dict by attention type, like the gates
  (``{"enc": [L_enc, H], "dec": [L_dec, H], "cross": [L_dec, H]}``; a type left out keeps its heads). Their
  attention reshapes by ``head_dim`` (``view(..., -1, head_dim)``), so slicing q/k/v/out_proj is enough; the
  per-layer KV cache of ``generate()`` then holds only the kept heads. A decoder self-attention with no head
  left still writes a 1-wide placeholder into the cache, because the decoder reads the number of positions
  generated so far from the cache (of layer 0).
"""
from __future__ import annotations

import warnings

import torch
from torch import nn

from headprune_utils.model.architecture import (  # EmptyAttention: re-exported (users import it from here)
    AttentionSite, EmptyAttention, attention_kinds, attention_sites, grid_name, head_shapes, kept_heads, kind_dict, kind_value,
    set_kept_heads,
)


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
        if isinstance(module, EmptyAttention) or not hasattr(module, "out_lin"):  # Marian, BART: out_proj
            module.out_proj = new
        else:  # DistilBERT
            module.out_lin = new
    else:
        site.parent.output.dense = new


def _check_mask(mask, shape: tuple[int, int], name: str) -> torch.Tensor:
    mask = torch.as_tensor(mask)
    if tuple(mask.shape) != shape:
        raise ValueError(f"{name} must have shape [n_layers, n_heads] = {list(shape)}, got {list(mask.shape)}")
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{name} must hold only 0 (prune) and 1 (keep)")
    return mask


def prune_heads(model: nn.Module, mask) -> nn.Module:
    """Remove, in place, every present head whose ``mask`` entry is 0.

    mask: ``[n_layers, n_heads]`` over ORIGINAL head ids, 1 = keep, 0 = prune; for an encoder-decoder a dict
    of them by attention type (``"enc"``, ``"dec"``, ``"cross"``; a type left out is untouched). Keeping a head
    that an earlier call already removed is an error, found before anything changes. Returns ``model``.
    """
    masks = kind_dict(model, mask, "the mask",
                      hint=', {"enc": [L_enc, H], "dec": [L_dec, H], "cross": [L_dec, H]}')
    shapes = head_shapes(model)
    before = {k: kept_heads(model, k) for k in attention_kinds(model)}
    # every grid is checked before anything changes
    after = {k: _kept_after(k, _check_mask(m, shapes[k], grid_name("mask", k)), before[k]) for k, m in masks.items()}
    for kind, kept in after.items():
        _prune_grid(model, kind, before[kind], kept)
    set_kept_heads(model, kind_value(model, {**before, **after}))
    return model


def _kept_after(kind, mask: torch.Tensor, kept_before: list[list[int]]) -> list[list[int]]:
    """Original ids kept per layer once ``mask`` is applied; an error if it keeps a head already removed."""
    where = "" if kind is None else f"{kind} "
    after = []
    for layer, present in enumerate(kept_before):
        want = [h for h in range(mask.shape[1]) if mask[layer, h] == 1]
        missing = sorted(set(want) - set(present))
        if missing:
            raise ValueError(f"{where}layer {layer}: heads {missing} were already pruned and cannot be kept")
        after.append([h for h in present if h in want])
    return after


def _prune_grid(model: nn.Module, kind, kept_before: list[list[int]], kept_after: list[list[int]]) -> None:
    """Slice one grid of heads (one attention type) from ``kept_before`` down to ``kept_after`` (original ids)."""
    for site in attention_sites(model, kind):
        present = kept_before[site.layer]
        keep_pos = [present.index(h) for h in kept_after[site.layer]]
        if len(keep_pos) == len(present):
            continue
        d = site.head_dim
        index = torch.tensor([i * d + j for i in keep_pos for j in range(d)], dtype=torch.long)
        new_out = _slice_linear(site.out_proj, index, dim=1)
        if not keep_pos:
            cache_idx = getattr(site.module, "layer_idx", site.layer) if kind == "dec" else None
            empty = EmptyAttention(new_out if site.out_proj_inside else None, cache_layer_idx=cache_idx)
            setattr(site.parent, site.attr, empty)
            if not site.out_proj_inside:
                site.parent.output.dense = new_out
            continue
        module = site.module
        if hasattr(module, "q_proj"):  # Marian, BART: they reshape by head_dim, num_heads is informative
            module.q_proj = _slice_linear(module.q_proj, index, 0)
            module.k_proj = _slice_linear(module.k_proj, index, 0)
            module.v_proj = _slice_linear(module.v_proj, index, 0)
            module.num_heads = len(keep_pos)
        elif site.out_proj_inside:  # DistilBERT
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


def count_attention_params(model: nn.Module) -> int:
    """Parameters of the attention blocks' q/k/v and output projections (to report what pruning saved);
    for an encoder-decoder, of all three attention types."""
    total = 0
    for site in attention_sites(model):
        for lin in (site.query, site.key, site.value, site.out_proj):
            if lin is not None:
                total += sum(p.numel() for p in lin.parameters())
    return total
