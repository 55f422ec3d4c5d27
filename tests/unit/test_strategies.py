"""Layer-location strategies on hand-written small cases."""
from __future__ import annotations

import pytest
import torch

from headprune_utils.model.masks import BudgetError
from headprune_utils.model.strategies import STRATEGIES, layer_order, strategy_mask


def pruned_layers(mask):
    """Layers with at least one pruned head, and how many heads each lost."""
    lost = (mask == 0).sum(dim=1).tolist()
    return {l: n for l, n in enumerate(lost) if n}


def test_orders_by_hand():
    assert layer_order("top", 6, 2, 0) == [5, 4, 3, 2, 1, 0]
    assert layer_order("bottom", 6, 2, 0) == [0, 1, 2, 3, 4, 5]
    assert layer_order("middle", 6, 2, 0) == [2, 3, 1, 4, 0, 5]
    assert layer_order("middle", 5, 2, 0) == [2, 1, 3, 0, 4]
    assert layer_order("top_bottom", 6, 2, 0) == [5, 0, 4, 1, 3, 2]
    assert layer_order("top_bottom", 5, 2, 0) == [4, 0, 3, 1, 2]
    assert layer_order("spread", 6, 3, 0)[:3] == [0, 2, 5]  # round(2.5) == 2
    assert layer_order("spread", 12, 4, 0)[:4] == [0, 4, 7, 11]
    block = layer_order("consecutive", 12, 4, seed=3)[:4]
    assert block == list(range(block[0], block[0] + 4))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("n_prune", [0, 5, 12, 30, 72])
def test_every_strategy_meets_every_budget_exactly(strategy, n_prune):
    mask = strategy_mask(strategy, 6, 12, n_prune, seed=1)
    assert mask.shape == (6, 12) and int((mask == 0).sum()) == n_prune
    assert torch.equal(mask, strategy_mask(strategy, 6, 12, n_prune, seed=1))


def test_whole_layers_first_then_a_random_part():
    # 2.5 layers of 12 heads from the top: layers 5 and 4 entirely, 6 random heads of layer 3
    mask = strategy_mask("top", 6, 12, 30, seed=0)
    assert pruned_layers(mask) == {5: 12, 4: 12, 3: 6}
    assert pruned_layers(strategy_mask("bottom", 6, 12, 30, seed=0)) == {0: 12, 1: 12, 2: 6}
    assert pruned_layers(strategy_mask("middle", 6, 12, 24, seed=0)) == {2: 12, 3: 12}
    assert pruned_layers(strategy_mask("top_bottom", 6, 12, 24, seed=0)) == {0: 12, 5: 12}
    spread = pruned_layers(strategy_mask("spread", 6, 12, 24, seed=0))
    assert spread == {0: 12, 5: 12}
    consecutive = sorted(pruned_layers(strategy_mask("consecutive", 6, 12, 24, seed=0)))
    assert consecutive[1] - consecutive[0] == 1
    a, b = strategy_mask("top", 6, 12, 30, seed=0), strategy_mask("top", 6, 12, 30, seed=1)
    assert not torch.equal(a[3], b[3]), "the partial layer's heads depend on the seed"


def test_bad_budgets_and_names():
    with pytest.raises(BudgetError, match="150 heads"):
        strategy_mask("top", 6, 12, 150, seed=0)
    with pytest.raises(ValueError, match="unknown strategy"):
        strategy_mask("sideways", 6, 12, 10, seed=0)


def test_importance_masks_by_hand():
    from headprune_utils.model.strategies import importance_mask

    scores = torch.tensor([[0.5, 0.1, 0.9], [0.3, 0.1, 0.7]])
    least = importance_mask(scores, 3, "least_important")
    assert least.tolist() == [[1, 0, 1], [0, 0, 1]]  # 0.1 (0,1), 0.1 (1,1) in head order, then 0.3
    most = importance_mask(scores, 2, "most_important")
    assert most.tolist() == [[1, 1, 0], [1, 1, 0]]
    assert importance_mask(scores, 0).sum() == 6 and importance_mask(scores, 6).sum() == 0
    # nested across budgets (one ranking)
    for n in range(6):
        assert ((importance_mask(scores, n + 1) <= importance_mask(scores, n))).all()
    with pytest.raises(BudgetError):
        importance_mask(scores, 7)
    with pytest.raises(ValueError, match="NaN"):
        importance_mask(torch.tensor([[float("nan"), 1.0]]), 1)
    with pytest.raises(ValueError, match="prune must be"):
        importance_mask(scores, 1, "random")
