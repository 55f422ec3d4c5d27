"""The ModernBERT adapter (fused Wqkv, rotary positions, local and global layers) against the independent reference:
gates, "uniform" over the keys of each query's local window, attention maps, head means, physical pruning (an empty
layer included) and gradients in the gates."""
from __future__ import annotations

import copy
import functools

import pytest
import torch

from headprune_utils.model import architecture as A
from headprune_utils.model.attention import attention_maps
from headprune_utils.model.gates import head_gates, head_means
from headprune_utils.model.pruning import count_attention_params, prune_heads

from . import reference as R
from .fixtures import FIXTURES

FX = FIXTURES["modernbert"]
G = FX.grids[None]


@functools.lru_cache(maxsize=None)
def _model(impl):
    return FX.build(impl)


def _diff(a, b) -> float:
    return float((a - b).detach().abs().max())


def _gates() -> torch.Tensor:
    g = torch.ones(G.n_layers, G.n_heads, dtype=torch.float64)
    g[0, 1], g[1, 2], g[2, 3], g[1, 0] = 0.3, 0.0, 0.0, 0.0
    return g


def test_adapter_declares_the_grid():
    model = _model("eager")
    family = A.family_of(model)
    assert family.name == "modernbert" and family.projections == "fused" and not family.is_causal(None)
    assert A.head_shape(model) == (G.n_layers, G.n_heads) and A.kv_shape(model) == (G.n_layers, G.n_kv_heads)
    sites = A.attention_sites(model)
    assert [family.window(model, s) for s in sites] == list(G.windows)


@pytest.mark.parametrize("impl", FX.attn_implementations)
def test_gates_equal_the_reference(impl):
    model, batch = _model(impl), FX.inputs()
    with torch.no_grad():
        plain = model(**batch).logits
        with head_gates(model, torch.ones(G.n_layers, G.n_heads)):
            assert torch.equal(model(**batch).logits, plain)
        means = R.head_means(model, batch)[None]
        for how in ("zero", "mean", "uniform"):
            m = means if how == "mean" else None
            ref = R.forward(model, batch, R.Ablation(how, _gates(), m))
            with head_gates(model, _gates(), ablation=how, means=m):
                ours = model(**batch).logits
            assert _diff(ours, ref.logits) <= FX.atol, how
            assert _diff(ours, plain) > 1e-3, how
        assert _diff(head_means(model, [batch]).double(), means) <= max(FX.atol, 1e-6)


@pytest.mark.parametrize("impl", FX.attn_implementations)
def test_attention_maps_equal_the_reference(impl):
    model, batch = _model(impl), FX.inputs()
    ref = R.forward(model, batch)
    for layer, m in enumerate(attention_maps(model, batch)):
        assert _diff(m, ref.grids[None][layer].probs) <= FX.atol
        assert bool((m[~ref.grids[None][layer].visible[:, None].expand_as(m)] == 0).all())


@pytest.mark.parametrize("keep", [{0: [0, 1, 2], 1: [], 2: [1, 3]}, {0: [], 1: [0], 2: []}],
                         ids=["middle-empty", "one-head-left"])
def test_pruned_equals_gated_and_the_reference(keep):
    model, batch = _model("eager"), FX.inputs()
    mask = torch.zeros(G.n_layers, G.n_heads, dtype=torch.float64)
    for layer, heads in keep.items():
        mask[layer, heads] = 1
    pruned = prune_heads(copy.deepcopy(model), mask)
    assert A.kept_heads(pruned) == [keep[i] for i in range(G.n_layers)]
    with torch.no_grad():
        ours = pruned(**batch).logits
        with head_gates(model, mask):
            gated = model(**batch).logits
    assert _diff(ours, gated) <= 1e-9
    assert _diff(ours, R.forward(model, batch, R.Ablation("zero", mask)).logits) <= FX.atol
    assert count_attention_params(pruned) < count_attention_params(model)


def test_gate_gradients_equal_the_reference():
    model, batch = _model("eager"), FX.inputs()
    labels = torch.tensor([0, 2])
    gates = _gates().requires_grad_(True)
    with head_gates(model, gates, ablation="uniform"):
        loss = torch.nn.functional.cross_entropy(model(**batch).logits, labels)
    (ours,) = torch.autograd.grad(loss, gates)
    ref_gates = _gates().requires_grad_(True)
    ref_loss = torch.nn.functional.cross_entropy(R.forward(model, batch, R.Ablation("uniform", ref_gates)).logits,
                                                 labels)
    (want,) = torch.autograd.grad(ref_loss, ref_gates)
    assert float(want.abs().max()) > 1e-4
    assert _diff(ours, want) <= 2e-5 * float(want.abs().max())


def test_head_parameters_follow_the_heads_through_pruning():
    model = _model("eager")
    family = A.family_of(model)
    sites = A.attention_sites(model)
    d, width = G.head_dim, G.n_heads * G.head_dim
    got = family.head_parameters(sites[0], 2)
    assert torch.equal(got["value"][: d * 32], sites[0].query.weight.detach()[2 * width + 2 * d:2 * width + 3 * d]
                       .reshape(-1).double())
    keep = {0: [0, 2, 3], 1: [1], 2: [0, 1, 2, 3]}
    mask = torch.zeros(G.n_layers, G.n_heads)
    for layer, heads in keep.items():
        mask[layer, heads] = 1
    pruned = prune_heads(copy.deepcopy(model), mask)
    for site in A.attention_sites(pruned):
        for pos, h in enumerate(keep[site.layer]):
            before, after = family.head_parameters(sites[site.layer], h), family.head_parameters(site, pos)
            assert all(torch.equal(before[p], after[p]) for p in ("query", "key", "value", "output"))
