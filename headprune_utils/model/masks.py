"""Head masks as pure functions. Convention: ``[n_layers, n_heads]`` float, 1 = kept, 0 = pruned."""
from __future__ import annotations

import numpy as np
import torch


class BudgetError(ValueError):
    """A pruning budget the model cannot meet (e.g. 150 heads of 72)."""


def n_pruned_for_fraction(fraction: float, n_layers: int, n_heads: int) -> int:
    """Heads pruned for ``fraction`` of all heads, rounded to the nearest head."""
    total = n_layers * n_heads
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool):
        raise BudgetError(f"fraction must be a number, got {fraction!r}")
    if fraction != fraction or fraction in (float("inf"), float("-inf")):
        raise BudgetError(f"fraction must be a finite number in [0, 1], got {fraction!r}")
    if not 0.0 <= fraction <= 1.0:
        raise BudgetError(
            f"fraction {fraction} is outside [0, 1]: it would prune {round(fraction * total)} heads of "
            f"{total} ({n_layers} layers x {n_heads} heads)"
        )
    return int(round(fraction * total))


def check_budget(n_prune: int, n_layers: int, n_heads: int) -> None:
    for name, n in (("n_layers", n_layers), ("n_heads", n_heads)):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise BudgetError(f"{name} must be a positive integer (a grid of heads), got {n!r}")
    total = n_layers * n_heads
    if isinstance(n_prune, bool) or not isinstance(n_prune, (int, np.integer)):
        raise BudgetError(f"the number of heads to prune must be an integer, got {n_prune!r}")
    if not 0 <= n_prune <= total:
        raise BudgetError(
            f"cannot prune {n_prune} heads: the model has {total} ({n_layers} layers x {n_heads} heads)"
        )


def random_order(n_layers: int, n_heads: int, seed: int) -> np.ndarray:
    """A seeded random permutation of the flat head ids ``layer * n_heads + head`` (``seed`` >= 0)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer (numpy seeds are unsigned), got {seed!r}")
    return np.random.default_rng(seed).permutation(n_layers * n_heads)


def random_mask(n_layers: int, n_heads: int, n_prune: int, seed: int) -> torch.Tensor:
    """Prune ``n_prune`` heads chosen uniformly at random over all layers.

    Masks of one seed are NESTED across budgets (the first ``n_prune`` heads of one permutation), so a
    larger budget prunes a superset of a smaller one: comparisons across fractions are paired.
    """
    check_budget(n_prune, n_layers, n_heads)
    flat = np.ones(n_layers * n_heads, dtype=np.float32)
    flat[random_order(n_layers, n_heads, seed)[:n_prune]] = 0.0
    return torch.from_numpy(flat.reshape(n_layers, n_heads))


def random_masks(shapes: dict[str, tuple[int, int]], n_prune: int, seed: int) -> dict[str, torch.Tensor]:
    """Prune ``n_prune`` heads chosen uniformly at random over the UNION of several grids, e.g. the three attention
    types of an encoder-decoder ``{"enc": (L, H), "dec": ..., "cross": ...}``; returns a mask per grid.

    The heads are numbered grid after grid (in the dict's order), layer-major within a grid, and the first
    ``n_prune`` of one seeded permutation are pruned: nested across budgets as :func:`random_mask`, and with one
    grid exactly :func:`random_mask`'s mask.
    """
    if not shapes:
        raise ValueError("shapes must name at least one grid")
    sizes = {k: int(l) * int(h) for k, (l, h) in shapes.items()}
    total = sum(sizes.values())
    if isinstance(n_prune, bool) or not isinstance(n_prune, (int, np.integer)) or not 0 <= n_prune <= total:
        raise BudgetError(f"cannot prune {n_prune!r} heads of the {total} in the grids {dict(shapes)}")
    flat = np.ones(total, dtype=np.float32)
    flat[np.random.default_rng(seed).permutation(total)[:n_prune]] = 0.0
    out, start = {}, 0
    for k, (l, h) in shapes.items():
        out[k] = torch.from_numpy(flat[start : start + sizes[k]].reshape(int(l), int(h)).copy())
        start += sizes[k]
    return out


def mask_from_pruned(n_layers: int, n_heads: int, pruned: list[tuple[int, int]]) -> torch.Tensor:
    """A mask from ``(layer, head)`` pairs to prune."""
    mask = torch.ones(n_layers, n_heads)
    for layer, head in pruned:
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise ValueError(f"head ({layer}, {head}) is outside the {n_layers} x {n_heads} grid")
        mask[layer, head] = 0.0
    return mask


def mask_to_string(mask: torch.Tensor) -> str:
    """Compact, diff-able text form: one row of 0/1 per layer, rows joined by '/'."""
    return "/".join("".join(str(int(v)) for v in row) for row in mask.tolist())


def mask_from_string(text: str) -> torch.Tensor:
    rows = [[float(c) for c in row] for row in text.split("/")]
    return torch.tensor(rows)
