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

import torch
from torch import nn

from headprune_utils.model.architecture import (  # EmptyAttention: re-exported (users import it from here)
    EmptyAttention, attention_kinds, attention_sites, family_of, grid_name, head_shapes, kept_heads, kind_dict,
    kind_value, set_kept_heads,
)
from headprune_utils.model.families.base import slice_linear

__all__ = ["EmptyAttention", "count_attention_params", "prune_heads"]


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
    family = family_of(model)
    for site in attention_sites(model, kind):
        present = kept_before[site.layer]
        keep_pos = [present.index(h) for h in kept_after[site.layer]]
        if len(keep_pos) == len(present):
            continue
        d = site.head_dim
        index = torch.tensor([i * d + j for i in keep_pos for j in range(d)], dtype=torch.long)
        new_out = slice_linear(site.out_proj, index, dim=1)
        if not keep_pos:
            family.empty_site(site, new_out, family.cache_layer_idx(site))
            continue
        family.prune_site(site, index, len(keep_pos))
        family.set_out_proj(site, new_out)


def count_attention_params(model: nn.Module) -> int:
    """Parameters of the attention blocks' q/k/v and output projections (to report what pruning saved);
    for an encoder-decoder, of all three attention types."""
    total = 0
    for site in attention_sites(model):
        for lin in (site.query, site.key, site.value, site.out_proj):
            if lin is not None:
                total += sum(p.numel() for p in lin.parameters())
    return total
