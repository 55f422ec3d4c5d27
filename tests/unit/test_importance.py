"""Gradient head importance against central finite differences of the loss in each gate."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import tiny_inputs, tiny_model
from headprune_utils.model.gates import head_gates
from headprune_utils.measure.importance import head_importance, layer_normalize
from headprune_utils.model.pruning import prune_heads

MASK = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 0]], dtype=torch.float64)
HEADS = [(0, 0), (0, 3), (1, 2), (2, 1)]  # kept by MASK
EPS = 1e-6


def model64(kind="bert"):
    """A float64 tiny model with larger weights than the default 0.02 init, so that the gate gradients
    (~0.1 instead of ~1e-5) stand well above the finite differences' rounding error."""
    return tiny_model(kind, dtype=torch.float64, initializer_range=0.2)


def make_batches():
    a = {**tiny_inputs(batch=3, seq=9, seed=1), "labels": torch.tensor([0, 2, 1])}
    b = {**tiny_inputs(batch=2, seq=7, seed=2), "labels": torch.tensor([1, 1])}
    return [a, b]


def loss_at(model, batch, gates, ablation="zero"):
    with torch.no_grad(), head_gates(model, gates, ablation=ablation, allow_out_of_range=True):  # finite differences step past 1
        return model(**batch).loss.item()


def fd(model, batch, point, layer, head, ablation="zero"):
    """Central finite difference of the batch loss in the gate of (layer, head) at ``point``."""
    vals = []
    for sign in (1, -1):
        g = point.clone()
        g[layer, head] += sign * EPS
        vals.append(loss_at(model, batch, g, ablation))
    return (vals[0] - vals[1]) / (2 * EPS)


def single_examples(batch):
    """Each example of a padded batch on its own, padding trimmed (built independently of the module)."""
    out = []
    for i, n in enumerate(batch["attention_mask"].sum(1).tolist()):
        out.append({"input_ids": batch["input_ids"][i : i + 1, :n],
                    "attention_mask": batch["attention_mask"][i : i + 1, :n],
                    "labels": batch["labels"][i : i + 1]})
    return out


@pytest.mark.parametrize("ablation", ["zero", "uniform"])
def test_per_batch_importance_is_weighted_mean_of_abs_batch_gradients(ablation):
    model = model64()
    batches = make_batches()
    got = head_importance(model, batches, ablation=ablation, normalize_layers=False)
    assert got.shape == (3, 4) and got.dtype == torch.float32
    ones = torch.ones(3, 4, dtype=torch.float64)
    n = [len(b["labels"]) for b in batches]
    for layer, head in HEADS:
        # |d(batch mean loss)/dg| per BATCH, weighted by batch size: (3 |g_a| + 2 |g_b|) / 5
        ref = sum(nb * abs(fd(model, b, ones, layer, head, ablation)) for nb, b in zip(n, batches)) / sum(n)
        assert float(got[layer, head]) == pytest.approx(ref, rel=1e-5)


def test_per_example_importance_is_mean_of_abs_example_gradients():
    model = model64()
    batches = make_batches()
    got = head_importance(model, batches, normalize_layers=False, per_example=True)
    per_batch = head_importance(model, batches, normalize_layers=False)
    examples = [e for b in batches for e in single_examples(b)]
    ones = torch.ones(3, 4, dtype=torch.float64)
    for layer, head in HEADS:
        ref = sum(abs(fd(model, e, ones, layer, head)) for e in examples) / len(examples)
        assert float(got[layer, head]) == pytest.approx(ref, rel=1e-5)
    # |.| of a sum never exceeds the sum of |.|: the per-batch scores are smaller or equal
    assert bool((per_batch <= got * (1 + 1e-5)).all())


def test_gradient_taken_at_the_mask_and_pruned_heads_excluded():
    model = model64()
    batches = make_batches()[:1]
    got = head_importance(model, batches, mask=MASK, normalize_layers=False)
    assert bool(torch.isnan(got[MASK == 0]).all()) and not bool(torch.isnan(got[MASK == 1]).any())
    for layer, head in HEADS:
        assert float(got[layer, head]) == pytest.approx(abs(fd(model, batches[0], MASK, layer, head)), rel=1e-5)
    kept_too = head_importance(model, batches, mask=MASK, normalize_layers=False, exclude_pruned=False)
    assert not bool(torch.isnan(kept_too).any())
    assert float(kept_too[0, 1]) == pytest.approx(abs(fd(model, batches[0], MASK, 0, 1)), rel=1e-5)
    assert torch.equal(kept_too[MASK == 1], got[MASK == 1])


def test_layer_normalisation_by_hand():
    model = model64()
    batches = make_batches()
    raw = head_importance(model, batches, mask=MASK, normalize_layers=False)
    normed = head_importance(model, batches, mask=MASK)
    for layer in range(3):
        kept = MASK[layer] == 1
        values = raw[layer, kept].double()
        expected = values / math.sqrt(float((values**2).sum()))
        assert torch.allclose(normed[layer, kept].double(), expected, rtol=1e-6)
        assert float((normed[layer, kept].double() ** 2).sum()) == pytest.approx(1.0, rel=1e-6)
        assert bool(torch.isnan(normed[layer, ~kept]).all())
    # without exclusion the norm runs over all present heads
    raw_all = head_importance(model, batches, mask=MASK, normalize_layers=False, exclude_pruned=False)
    normed_all = head_importance(model, batches, mask=MASK, exclude_pruned=False)
    assert torch.allclose(normed_all, raw_all / raw_all.norm(dim=1, keepdim=True), rtol=1e-6)


def test_layer_normalize_edge_cases():
    nan = float("nan")
    s = torch.tensor([[3.0, 4.0, nan], [0.0, 0.0, 0.0], [nan, nan, nan]])
    out = layer_normalize(s)
    assert torch.allclose(out[0, :2], torch.tensor([0.6, 0.8])) and torch.isnan(out[0, 2])
    assert torch.equal(out[1], torch.zeros(3))
    assert bool(torch.isnan(out[2]).all())


def test_model_left_unchanged():
    model = tiny_model()
    batches = make_batches()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    n_hooks = lambda: sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())
    model.train()
    head_importance(model, batches)
    assert model.training
    model.eval()
    head_importance(model, batches, ablation="uniform", per_example=True)
    assert not model.training
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    assert n_hooks() == 0
    with pytest.raises(ValueError, match="labels"):
        head_importance(model, [{k: v for k, v in batches[0].items() if k != "labels"}])
    assert n_hooks() == 0 and not model.training


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_physically_pruned_model_matches_gated_model(kind):
    model = model64(kind)
    batches = make_batches()
    gated = head_importance(model, batches, mask=MASK)
    mask = MASK.clone()
    mask[1] = 0  # a whole layer removed as well
    gated_layer = head_importance(model, batches, mask=mask)
    prune_heads(model, mask.float())
    pruned = head_importance(model, batches)
    assert torch.allclose(pruned, gated_layer, rtol=1e-6, equal_nan=True)
    assert bool(torch.isnan(pruned[mask == 0]).all())
    # exclude_pruned=False still leaves physically absent heads NaN
    assert torch.equal(torch.isnan(head_importance(model, batches, exclude_pruned=False)), mask == 0)
    assert not bool(torch.isnan(gated[MASK == 1]).any())


@pytest.mark.parametrize("kind", ["roberta", "electra"])
def test_other_families_finite_and_normalised(kind):
    out = head_importance(tiny_model(kind), make_batches())
    assert not bool(torch.isnan(out).any())
    assert torch.allclose(out.norm(dim=1), torch.ones(3), rtol=1e-5)


def test_a_causal_lms_importance_counts_the_tokens_lm_loss_counts_under_left_padding():
    """Left padding: the first real token of a row is predicted from a pad. Hugging Face's loss counts that target;
    lm_loss and the per-example form (which trims the padding) do not. Batch-mode importance now leaves it out too:
    equal to |d lm_loss / d gates| of an own hook-free gradient (the gated model's mean token loss, the pad-predicted
    targets excluded), and a batch of one left-padded sentence scores as the sentence alone."""
    import torch.nn.functional as F

    from headprune_utils.model import models

    model = models.tiny_causal_lm(60, seed=0, pad_token_id=0, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2).eval()
    ids = torch.randint(3, 60, (1, 6), generator=torch.Generator().manual_seed(1))
    left = {"input_ids": torch.cat([torch.zeros(1, 2, dtype=torch.long), ids], 1),
            "attention_mask": torch.tensor([[0, 0] + [1] * 6])}
    left["labels"] = left["input_ids"].masked_fill(left["attention_mask"] == 0, -100)
    alone = {"input_ids": ids, "attention_mask": torch.ones(1, 6, dtype=torch.long), "labels": ids.clone()}
    got = head_importance(model, [left], normalize_layers=False)
    assert torch.allclose(got, head_importance(model, [alone], normalize_layers=False), atol=1e-6)
    assert torch.allclose(got, head_importance(model, [left], normalize_layers=False, per_example=True), atol=1e-6)
    gates = torch.ones(2, 4, requires_grad=True)
    with head_gates(model, gates):
        logits = model(input_ids=left["input_ids"], attention_mask=left["attention_mask"]).logits
    real = (left["attention_mask"][:, :-1] * left["attention_mask"][:, 1:]).bool()
    loss = F.cross_entropy(logits[:, :-1][real], left["input_ids"][:, 1:][real])
    (grad,) = torch.autograd.grad(loss, gates)
    assert torch.allclose(got, grad.abs(), atol=1e-6)
