"""Each head's own parameters, and how much they moved between two models (e.g. before and after fine-tuning).

Head ``h`` of layer ``l`` owns rows ``h*d:(h+1)*d`` of the query, key and value projections (weights and
biases) and the same columns of the attention output projection's weight (``d`` = head_dim). The output
projection's bias is shared by the layer's heads and belongs to none. A gpt-oss head also owns its attention sink
(part ``"sink"``, which only such models have). Heads are in ORIGINAL ids; a head that is physically absent
(``architecture.kept_heads``) gives NaN.

A model with one grid of heads gets one grid per part; a model with several (an encoder-decoder's ``"enc"``,
``"dec"`` and ``"cross"``, ``architecture.attention_kinds``) gets a dict of them by kind.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from headprune_utils.model.architecture import attention_kinds, attention_sites, family_of, head_shape, kept_heads

PARTS: tuple[str, ...] = ("query", "key", "value", "output")


def _grid_parameters(model: nn.Module, kind: str | None) -> dict[str, list[list[torch.Tensor | None]]]:
    n_layers, n_heads = head_shape(model, kind)
    kept = kept_heads(model, kind)
    out = {p: [[None] * n_heads for _ in range(n_layers)] for p in PARTS}
    family = family_of(model)
    for site in attention_sites(model, kind):
        for pos, h in enumerate(kept[site.layer]):
            # the family's adapter knows where the head's rows are (fused projections; grouped-query attention:
            # the key/value head it reads, shared with its group); parts beyond PARTS (gpt-oss's "sink") as it says
            for part, flat in family.head_parameters(site, pos).items():
                out.setdefault(part, [[None] * n_heads for _ in range(n_layers)])[site.layer][h] = flat
    return out


def head_parameters(model: nn.Module) -> dict:
    """``{part: [layer][head] -> flat float64 tensor of that head's parameters, or None when absent}``; a model with
    several grids of heads: ``{kind: {part: ...}}``."""
    kinds = attention_kinds(model)
    if kinds == (None,):
        return _grid_parameters(model, None)
    return {kind: _grid_parameters(model, kind) for kind in kinds}


def _grid_change(pb: dict, pa: dict, n_layers: int, n_heads: int) -> dict[str, torch.Tensor]:
    if set(pb) != set(pa):
        raise ValueError(f"models whose heads have different parts: {sorted(pb)} and {sorted(pa)}")
    parts = (*PARTS, *sorted(set(pb) - set(PARTS)))
    res = {p: torch.full((n_layers, n_heads), math.nan, dtype=torch.float64) for p in (*parts, "all")}
    for l in range(n_layers):
        for h in range(n_heads):
            num = den = 0.0
            ok = True
            for part in parts:
                b, a = pb[part][l][h], pa[part][l][h]
                if a is None or b is None:
                    ok = False
                    break
                d2, n2 = float((a - b).pow(2).sum()), float(b.pow(2).sum())
                res[part][l, h] = math.sqrt(d2) / math.sqrt(n2) if n2 > 0 else math.nan
                num, den = num + d2, den + n2
            if ok:
                res["all"][l, h] = math.sqrt(num) / math.sqrt(den) if den > 0 else math.nan
    return res


def relative_change(before: nn.Module, after: nn.Module) -> dict:
    """``||theta_after - theta_before|| / ||theta_before||`` per head, ``{part: [n_layers, n_heads]}`` float64,
    for each of :data:`PARTS` (and ``"sink"`` for gpt-oss) and ``"all"`` (the parts together). NaN where the head is
    absent in either.
    A model with several grids of heads: ``{kind: {part: [n_layers, n_heads]}}``."""
    kinds = attention_kinds(before)
    if attention_kinds(after) != kinds:
        raise ValueError(f"models of different grids of heads: {kinds} and {attention_kinds(after)}")
    if head_shape(before) != head_shape(after):
        raise ValueError(f"models of different shapes: {head_shape(before)} and {head_shape(after)}")
    pb, pa = head_parameters(before), head_parameters(after)
    if kinds == (None,):
        return _grid_change(pb, pa, *head_shape(before))
    return {kind: _grid_change(pb[kind], pa[kind], *head_shape(before, kind)) for kind in kinds}
