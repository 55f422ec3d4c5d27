"""Layer-location pruning strategies as pure functions: (model shape, budget, seed) -> mask.

Groundwork for the layer-strategy study (Budhraja et al. claim 3). Every strategy prunes exactly
``n_prune`` heads (the same budget), as ``[n_layers, n_heads]`` masks (1 = kept, 0 = pruned).

Layer groups for any depth: ``bottom`` and ``top`` are the first and last ``n_layers // 3`` layers,
``middle`` the rest (6 layers: 2/2/2; 12: 4/4/4; 7: 2/3/2).

How a budget is spread: each strategy orders ALL layers by preference and prunes whole layers in that
order; a budget that does not fill whole layers prunes the remaining heads of the next layer in the order,
chosen at random (seeded). So "top" at a budget above the top group's size continues into the layers just
below it, and every strategy meets every budget from 0 to all heads.

- ``random``: heads uniformly at random over all layers (``masks.random_mask``);
- ``top`` / ``bottom``: from the last / first layer inwards;
- ``middle``: from the centre outwards;
- ``top_bottom``: alternately from both ends, so the middle goes last (avoids the middle);
- ``consecutive``: the ``ceil(n_prune / n_heads)`` layers form one contiguous block at a seeded position;
- ``spread``: the same number of layers, as evenly spaced as possible (first and last included).

Importance strategies (:func:`importance_mask`, scores in, mask out): ``least_important`` /
``most_important`` prune the heads with the lowest / highest scores (e.g. Michel et al.'s gradient
importance of the fine-tuned model, normalised per layer), ties broken by head position.

Iterative importance (:func:`iterative_order`, Michel et al. 2019's pruning): prune ``step`` heads (10% of all
heads) with the lowest importance, re-estimate the importance of the heads kept with the pruned ones masked,
repeat; the order in which heads go gives nested masks at every budget (``iterative_importance``).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from headprune_utils.model.masks import check_budget, random_mask

STRATEGIES: tuple[str, ...] = ("random", "top", "bottom", "middle", "top_bottom", "consecutive", "spread")
IMPORTANCE_STRATEGIES: tuple[str, ...] = ("least_important", "most_important")
ITERATIVE_STRATEGIES: tuple[str, ...] = ("iterative_importance",)  # re-estimated after every step (Michel et al.)


def layer_order(strategy: str, n_layers: int, n_layers_needed: int, seed: int) -> list[int]:
    """The layers a strategy prunes first, in order (a permutation of all layers)."""
    layers = list(range(n_layers))
    if strategy == "top":
        return layers[::-1]
    if strategy == "bottom":
        return layers
    if strategy == "middle":
        centre = (n_layers - 1) / 2
        return sorted(layers, key=lambda l: (abs(l - centre), l))
    if strategy == "top_bottom":
        order, lo, hi = [], 0, n_layers - 1
        while lo <= hi:
            order.append(hi)
            if lo != hi:
                order.append(lo)
            hi, lo = hi - 1, lo + 1
        return order
    k = max(1, min(n_layers_needed, n_layers))
    if strategy == "consecutive":
        start = int(np.random.default_rng(seed).integers(0, n_layers - k + 1))
        chosen = list(range(start, start + k))
    elif strategy == "spread":
        chosen = [0] if k == 1 else sorted({round(i * (n_layers - 1) / (k - 1)) for i in range(k)})
    else:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {STRATEGIES}")
    return chosen + [l for l in layers if l not in chosen]


def strategy_mask(strategy: str, n_layers: int, n_heads: int, n_prune: int, seed: int) -> torch.Tensor:
    """Prune ``n_prune`` heads by ``strategy`` (see the module docstring)."""
    check_budget(n_prune, n_layers, n_heads)
    if strategy == "random":
        return random_mask(n_layers, n_heads, n_prune, seed)
    order = layer_order(strategy, n_layers, math.ceil(n_prune / n_heads), seed)
    mask = torch.ones(n_layers, n_heads)
    rng = np.random.default_rng(seed)
    left = n_prune
    for layer in order:
        if left == 0:
            break
        take = min(left, n_heads)
        heads = np.arange(n_heads) if take == n_heads else rng.choice(n_heads, size=take, replace=False)
        mask[layer, torch.as_tensor(heads)] = 0.0
        left -= take
    return mask


def importance_mask(scores: torch.Tensor, n_prune: int, prune: str = "least_important") -> torch.Tensor:
    """Prune the ``n_prune`` heads with the lowest (``"least_important"``) or highest (``"most_important"``)
    ``scores`` (``[n_layers, n_heads]``); equal scores go in head order (layer-major)."""
    if prune not in IMPORTANCE_STRATEGIES:
        raise ValueError(f"prune must be one of {IMPORTANCE_STRATEGIES}, got {prune!r}")
    scores = torch.as_tensor(scores, dtype=torch.float64)
    if scores.ndim != 2:
        raise ValueError(f"scores must be [n_layers, n_heads], got shape {list(scores.shape)}")
    if torch.isnan(scores).any():
        raise ValueError("scores contain NaN (absent heads): rank the heads of an unpruned model")
    n_layers, n_heads = scores.shape
    check_budget(n_prune, n_layers, n_heads)
    flat = scores.flatten().numpy()
    key = flat if prune == "least_important" else -flat
    order = np.lexsort((np.arange(flat.size), key))  # by score, then by position
    mask = torch.ones(n_layers * n_heads)
    mask[torch.as_tensor(order[:n_prune])] = 0.0
    return mask.view(n_layers, n_heads)


def iterative_order(score, n_layers: int, n_heads: int, step: int, until: int | None = None) -> list[int]:
    """Michel et al.'s iterative pruning as the order heads are pruned in (flat indices, layer-major).

    ``score(mask) -> [n_layers, n_heads]``: the importance of every head with ``mask`` applied (``mask``: 1 kept,
    0 pruned; the values of pruned heads are ignored). Each step prunes the ``step`` kept heads with the lowest
    score (ties by position), then the scores are taken again with them masked, until ``until`` heads (default
    all but one) are pruned; the mask at a budget of ``n`` heads prunes the first ``n`` of the order (nested)."""
    total = n_layers * n_heads
    until = total - 1 if until is None else until
    if step < 1:
        raise ValueError(f"step must be >= 1 head, got {step}")
    check_budget(until, n_layers, n_heads)
    mask = torch.ones(n_layers, n_heads)
    order: list[int] = []
    while len(order) < until:
        s = torch.as_tensor(score(mask.clone()), dtype=torch.float64).flatten()
        if s.shape[0] != total:
            raise ValueError(f"score must return [{n_layers}, {n_heads}] values, got {s.shape[0]}")
        kept = [i for i in range(total) if i not in set(order)]
        values = s[kept].numpy()
        if not np.isfinite(values).all():
            raise ValueError("score returned a non-finite value for a kept head")
        ranked = [kept[j] for j in np.lexsort((np.asarray(kept), values))]
        for i in ranked[:min(step, until - len(order))]:
            order.append(i)
            mask.view(-1)[i] = 0.0
    return order


def mask_from_order(order: list[int], n_layers: int, n_heads: int, n_prune: int) -> torch.Tensor:
    """The mask pruning the first ``n_prune`` heads of ``order`` (:func:`iterative_order`)."""
    check_budget(n_prune, n_layers, n_heads)
    if n_prune > len(order):
        raise ValueError(f"the order holds {len(order)} heads, fewer than the {n_prune} to prune")
    mask = torch.ones(n_layers * n_heads)
    mask[torch.as_tensor(order[:n_prune], dtype=torch.long)] = 0.0
    return mask.view(n_layers, n_heads)
