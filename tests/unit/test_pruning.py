"""Physical pruning against zero gates: the removed head equals the zero-gated head."""
from __future__ import annotations

import pytest
import torch

from conftest import tiny_inputs, tiny_model
from headprune_utils.model.architecture import kept_heads, present_mask
from headprune_utils.model.gates import head_gates
from headprune_utils.model.masks import random_mask
from headprune_utils.model.pruning import count_attention_params, prune_heads


def out(model, inputs):
    with torch.no_grad():
        return model(**inputs).logits


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_pruned_equals_zero_gated(seed, attn):
    model = tiny_model(attn=attn, seed=seed)
    inputs = tiny_inputs(seed=seed)
    mask = random_mask(3, 4, n_prune=5, seed=seed)
    with head_gates(model, mask, "zero"):
        gated = out(model, inputs)
    prune_heads(model, mask)
    assert torch.allclose(out(model, inputs), gated, atol=1e-5)
    assert torch.equal(present_mask(model), mask)


def test_fully_pruned_layer_and_whole_model():
    model = tiny_model()
    inputs = tiny_inputs()
    mask = torch.ones(3, 4)
    mask[0] = 0  # every head of layer 0
    with head_gates(model, mask):
        gated = out(model, inputs)
    prune_heads(model, mask)
    assert kept_heads(model)[0] == []
    assert torch.allclose(out(model, inputs), gated, atol=1e-5)
    # every head of every layer: the model still runs (FFN only) and matches the all-zero gates
    fresh = tiny_model()
    with head_gates(fresh, torch.zeros(3, 4)):
        all_zero = out(fresh, inputs)
    prune_heads(model, torch.zeros(3, 4))
    assert count_attention_params(model) == 3 * (32 + 0)  # only output-projection biases remain
    assert torch.allclose(out(model, inputs), all_zero, atol=1e-5)


def test_pruning_twice_equals_pruning_once():
    inputs = tiny_inputs()
    first = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]], dtype=torch.float32)
    second = first.clone()
    second[0, 3] = 0
    second[1] = 0
    once, twice = tiny_model(), tiny_model()
    prune_heads(once, second)
    prune_heads(twice, first)
    assert kept_heads(twice) == [[0, 2, 3], [0, 1, 2, 3], [1, 2, 3]]
    prune_heads(twice, second)
    assert kept_heads(twice) == kept_heads(once) == [[0, 2], [], [1, 2, 3]]
    assert torch.allclose(out(once, inputs), out(twice, inputs), atol=1e-6)


def test_cannot_keep_a_head_already_pruned_and_bad_masks():
    model = tiny_model()
    mask = torch.ones(3, 4)
    mask[2, 1] = 0
    prune_heads(model, mask)
    with pytest.raises(ValueError, match=r"layer 2: heads \[1\] were already pruned"):
        prune_heads(model, torch.ones(3, 4))
    with pytest.raises(ValueError, match="shape"):
        prune_heads(model, torch.ones(2, 4))
    with pytest.raises(ValueError, match="only 0"):
        prune_heads(model, torch.full((3, 4), 0.5))


@pytest.mark.parametrize("ablation", ["zero", "uniform"])
def test_gates_on_a_pruned_model_use_original_head_ids(ablation):
    """Gating head (l, h) of a pruned model = gating it on the unpruned model with the pruned heads at 0."""
    inputs = tiny_inputs()
    mask = torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 0, 1]], dtype=torch.float32)
    extra = torch.ones(3, 4)
    extra[0, 3] = 0.0
    extra[2, 0] = 0.25
    full = tiny_model()
    pruned = prune_heads(tiny_model(), mask)
    if ablation == "zero":
        with head_gates(full, mask * extra, ablation):
            want = out(full, inputs)
    else:
        # pruned heads are removed (zero), the extra gates use the uniform ablation: compose both
        with head_gates(full, mask, "zero"), head_gates(full, extra, "uniform"):
            want = out(full, inputs)
    with head_gates(pruned, extra, ablation):
        got = out(pruned, inputs)
    assert torch.allclose(got, want, atol=1e-5)


def test_pruned_model_trains_and_stays_pruned():
    model = tiny_model()
    inputs = tiny_inputs()
    mask = random_mask(3, 4, 6, seed=0)
    prune_heads(model, mask)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss = model(**inputs, labels=torch.tensor([0, 1, 2])).loss
    loss.backward()
    opt.step()
    assert torch.equal(present_mask(model), mask)
    assert sum(p.numel() for p in model.parameters()) < sum(p.numel() for p in tiny_model().parameters())
