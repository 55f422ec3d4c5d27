"""Mask functions on hand-written small cases."""
from __future__ import annotations

import pytest
import torch

from headprune_utils.model.masks import (
    BudgetError, mask_from_pruned, mask_from_string, mask_to_string, n_pruned_for_fraction, random_mask,
    random_masks,
)


def test_random_mask_counts_determinism_and_nesting():
    for n in range(0, 13):
        m = random_mask(3, 4, n, seed=7)
        assert m.shape == (3, 4) and int((m == 0).sum()) == n
        assert set(m.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(random_mask(3, 4, 5, seed=1), random_mask(3, 4, 5, seed=1))
    assert not torch.equal(random_mask(6, 12, 36, seed=1), random_mask(6, 12, 36, seed=2))
    small, large = random_mask(6, 12, 10, seed=3), random_mask(6, 12, 40, seed=3)
    assert bool(((small == 0) <= (large == 0)).all()), "masks of one seed must be nested"


def test_random_mask_is_uniform_over_heads():
    counts = torch.zeros(2, 3)
    for seed in range(3000):
        counts += 1 - random_mask(2, 3, 2, seed)
    # each head pruned with probability 2/6
    assert torch.allclose(counts / 3000, torch.full((2, 3), 1 / 3), atol=0.03)


def test_budgets():
    assert n_pruned_for_fraction(0.5, 6, 12) == 36
    assert n_pruned_for_fraction(0.0, 6, 12) == 0
    assert n_pruned_for_fraction(1.0, 6, 12) == 72
    with pytest.raises(BudgetError, match="150 heads of 72"):
        n_pruned_for_fraction(150 / 72, 6, 12)
    with pytest.raises(BudgetError, match="cannot prune 150 heads: the model has 72"):
        random_mask(6, 12, 150, seed=0)
    with pytest.raises(BudgetError, match="cannot prune -1"):
        random_mask(6, 12, -1, seed=0)
    with pytest.raises(BudgetError, match="integer"):
        random_mask(6, 12, 3.5, seed=0)


def test_mask_from_pruned_and_string_round_trip():
    m = mask_from_pruned(2, 3, [(0, 1), (1, 2)])
    assert m.tolist() == [[1, 0, 1], [1, 1, 0]]
    assert mask_to_string(m) == "101/110"
    assert torch.equal(mask_from_string("101/110"), m)
    with pytest.raises(ValueError, match="outside"):
        mask_from_pruned(2, 3, [(2, 0)])


def test_random_masks_over_several_grids_are_nested_and_match_one_grid():
    shapes = {"enc": (2, 3), "dec": (1, 3), "cross": (1, 3)}
    prev = None
    for n in range(13):
        m = random_masks(shapes, n, seed=4)
        assert sum(int((x == 0).sum()) for x in m.values()) == n
        flat = torch.cat([x.flatten() for x in m.values()])
        if prev is not None:
            assert bool((flat <= prev).all())  # a larger budget prunes a superset
        prev = flat
    assert torch.equal(random_masks({"enc": (3, 4)}, 5, 7)["enc"], random_mask(3, 4, 5, 7))
    with pytest.raises(BudgetError):
        random_masks(shapes, 13, 0)
