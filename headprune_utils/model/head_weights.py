"""Each head's own parameters, and how much they moved between two models (e.g. before and after fine-tuning).

Head ``h`` of layer ``l`` owns rows ``h*d:(h+1)*d`` of the query, key and value projections (weights and
biases) and the same columns of the attention output projection's weight (``d`` = head_dim). The output
projection's bias is shared by the layer's heads and belongs to none. Heads are in ORIGINAL ids; a head that
is physically absent (``architecture.kept_heads``) gives NaN.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from headprune_utils.model.architecture import attention_sites, family_of, head_shape, kept_heads

PARTS: tuple[str, ...] = ("query", "key", "value", "output")


def head_parameters(model: nn.Module) -> dict[str, list[list[torch.Tensor | None]]]:
    """``{part: [layer][head] -> flat float64 tensor of that head's parameters, or None when absent}``."""
    n_layers, n_heads = head_shape(model)
    kept = kept_heads(model)
    out = {p: [[None] * n_heads for _ in range(n_layers)] for p in PARTS}
    family = family_of(model)
    for site in attention_sites(model):
        for pos, h in enumerate(kept[site.layer]):
            # the family's adapter knows where the head's rows are (fused projections; grouped-query attention:
            # the key/value head it reads, shared with its group)
            for part, flat in family.head_parameters(site, pos).items():
                out[part][site.layer][h] = flat
    return out


def relative_change(before: nn.Module, after: nn.Module) -> dict[str, torch.Tensor]:
    """``||theta_after - theta_before|| / ||theta_before||`` per head, ``{part: [n_layers, n_heads]}`` float64,
    for each of :data:`PARTS` and ``"all"`` (the four parts together). NaN where the head is absent in either."""
    if head_shape(before) != head_shape(after):
        raise ValueError(f"models of different shapes: {head_shape(before)} and {head_shape(after)}")
    n_layers, n_heads = head_shape(before)
    pb, pa = head_parameters(before), head_parameters(after)
    res = {p: torch.full((n_layers, n_heads), math.nan, dtype=torch.float64) for p in (*PARTS, "all")}
    for l in range(n_layers):
        for h in range(n_heads):
            num = den = 0.0
            ok = True
            for part in PARTS:
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
