"""The T5 adapter against the independent reference of ``reference.py``: three grids (encoder, decoder and cross
attention), gates, head means, physical pruning with the per-head relative position bias following each layer's
own kept heads (also when the first layer, which computes the bias, lost other heads or all of them), cached
generation of pruned models, "uniform" on the encoder, and gradients in the gates."""
from __future__ import annotations

import copy
import functools

import pytest
import torch

from headprune_utils.model import architecture as A
from headprune_utils.model.attention import attention_maps
from headprune_utils.model.families.t5 import T5PrunedAttention
from headprune_utils.model.gates import capture_head_contexts, head_gates, head_means
from headprune_utils.model.pruning import count_attention_params, prune_heads

from . import reference as R
from .fixtures import FIXTURES

FX = FIXTURES["t5"]
KINDS = ("enc", "dec", "cross")
IMPLS = FX.attn_implementations
SHAPE = (FX.grids["enc"].n_layers, FX.grids["enc"].n_heads)
# kept heads per layer (4 heads, 2 layers): layers 0 and 1 keep different heads, so a layer that adds the first
# layer's columns or the first columns of the bias is wrong; the first layer (which computes the bias) empty;
# the last layer empty
KEEPS = {
    "different": {0: [1, 3], 1: [0, 2, 3]},
    "first-empty": {0: [], 1: [2, 3]},
    "last-empty": {0: [0, 2], 1: []},
}


@functools.lru_cache(maxsize=None)
def _model(impl):
    return FX.build(impl)


def _fresh(impl="eager"):
    return copy.deepcopy(_model(impl))


def _mask(keep: dict) -> torch.Tensor:
    m = torch.ones(SHAPE, dtype=torch.float64)
    for layer, heads in keep.items():
        m[layer] = 0
        m[layer, heads] = 1
    return m


def _gates() -> torch.Tensor:
    g = torch.ones(SHAPE, dtype=torch.float64)
    g[0, 1], g[1, 2], g[1, 3] = 0.3, 0.0, 0.0
    return g


def _diff(a, b) -> float:
    return float((a - b).detach().abs().max())


# ------------------------------------------------------------------ the grids
def test_adapter_declares_three_grids():
    model = _model("eager")
    family = A.family_of(model)
    assert family.name == "t5" and A.attention_kinds(model) == KINDS
    assert family.is_causal("dec") and not family.is_causal("enc") and not family.is_causal("cross")
    for kind in KINDS:
        g = FX.grids[kind]
        assert A.head_shape(model, kind) == (g.n_layers, g.n_heads)
        assert A.kv_shape(model, kind) == (g.n_layers, g.n_kv_heads)
        sites = A.attention_sites(model, kind)
        assert [s.head_dim for s in sites] == [g.head_dim] * g.n_layers
        assert all(s.kind == kind and s.out_proj.in_features == g.n_heads * g.head_dim for s in sites)
    assert A.kept_heads(model) == {k: [list(range(SHAPE[1]))] * SHAPE[0] for k in KINDS}


def test_unsupported_architecture_lists_t5():
    from transformers import FalconH1Config

    cfg = FalconH1Config(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, mamba_d_ssm=16, mamba_n_heads=4, mamba_d_head=4, mamba_d_state=8, intermediate_size=37)
    with pytest.raises(A.UnsupportedArchitectureError) as err:
        A.head_shape(cfg)
    assert "t5" in str(err.value)


# ------------------------------------------------------------------ gates = reference
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", KINDS)
def test_gates_equal_the_reference(kind, impl):
    model, batch = _model(impl), FX.inputs()
    hows = ("zero", "mean", "uniform") if kind == "enc" else ("zero", "mean")
    with torch.no_grad():
        plain = model(**batch).logits
        with head_gates(model, {kind: torch.ones(SHAPE, dtype=torch.float64)}):
            assert torch.equal(model(**batch).logits, plain)  # gates of 1 = the unmodified model, exactly
        means = R.head_means(model, batch)
        for how in hows:
            gates = _gates()
            ref = R.forward(model, batch, {kind: R.Ablation(how, gates, means[kind] if how == "mean" else None)})
            with head_gates(model, {kind: gates}, ablation=how, means=means if how == "mean" else None):
                ours = model(**batch).logits
            assert _diff(ours, ref.logits) <= FX.atol, how
            assert _diff(ours, plain) > 1e-3, how  # the ablation did something


def test_all_grids_gated_at_once():
    model, batch = _model("sdpa"), FX.inputs()
    gates = {k: _gates() for k in KINDS}
    gates["dec"] = gates["dec"].flip(1)
    ref = R.forward(model, batch, {k: R.Ablation("zero", g) for k, g in gates.items()})
    with torch.no_grad(), head_gates(model, gates):
        assert _diff(model(**batch).logits, ref.logits) <= FX.atol


@pytest.mark.parametrize("kind", ["dec", "cross"])
def test_uniform_is_refused_on_decoder_grids(kind):
    with pytest.raises(ValueError, match="uniform"):
        with head_gates(_model("eager"), {kind: _gates()}, ablation="uniform"):
            pass


def test_uniform_on_the_encoder_generates_as_the_reference():
    model, prompt = _model("eager"), FX.inputs()
    with head_gates(model, {"enc": _gates()}, ablation="uniform"):
        ours = R.hf_greedy(model, prompt, 4)
    assert torch.equal(ours, R.greedy(model, prompt, 4, {"enc": R.Ablation("uniform", _gates())}))


@pytest.mark.parametrize("how", ["zero", "mean"])
def test_gated_generation_equals_the_reference(how):
    """Gates on every grid act at each cached decoding step (the decoder's KV cache, the cross attention's stored
    source keys) as in the reference's decoding without a cache."""
    model, prompt = _model("sdpa"), FX.inputs()
    means = R.head_means(model, FX.inputs()) if how == "mean" else None
    gates = {"enc": _gates(), "dec": _gates().flip(1), "cross": _gates().flip(0)}
    with head_gates(model, gates, ablation=how, means=means):
        ours = R.hf_greedy(model, prompt, 5)
    want = R.greedy(model, prompt, 5, {k: R.Ablation(how, g, means[k] if means else None) for k, g in gates.items()})
    assert torch.equal(ours, want)
    assert not torch.equal(ours, R.hf_greedy(model, prompt, 5))  # the gates changed the output


def test_head_means_and_contexts():
    model, batch = _model("sdpa"), FX.inputs()
    ours, want = head_means(model, [batch]), R.head_means(model, batch)
    ref = R.forward(model, batch)
    for kind in KINDS:
        g = FX.grids[kind]
        assert ours[kind].shape == (g.n_layers, g.n_heads, g.head_dim) and ours[kind].dtype == torch.float32
        assert _diff(ours[kind].double(), want[kind]) <= FX.atol  # float32 means of a model that rounds via float32
    with torch.no_grad(), capture_head_contexts(model) as store:
        model(**batch)
    for kind in KINDS:
        for layer in range(SHAPE[0]):
            assert _diff(store[(kind, layer)], ref.grids[kind][layer].contexts) <= FX.atol


# ------------------------------------------------------------------ physical pruning
@pytest.mark.parametrize("case", list(KEEPS))
@pytest.mark.parametrize("kind", KINDS)
def test_pruned_equals_gated_and_the_reference(kind, case):
    batch, keep = FX.inputs(), KEEPS[case]
    model, mask = _model("eager"), _mask(KEEPS[case])
    pruned = prune_heads(_fresh(), {kind: mask})
    assert A.kept_heads(pruned, kind) == [keep[layer] for layer in range(SHAPE[0])]
    with torch.no_grad():
        ours = pruned(**batch).logits
        with head_gates(model, {kind: mask}, ablation="zero"):
            gated = model(**batch).logits
    assert _diff(ours, gated) <= 1e-9  # both HF's own arithmetic
    assert _diff(ours, R.forward(model, batch, {kind: R.Ablation("zero", mask)}).logits) <= FX.atol
    for site in A.attention_sites(pruned, kind):
        n = len(keep[site.layer])
        assert isinstance(site.module, T5PrunedAttention) and site.module.heads.tolist() == keep[site.layer]
        assert site.out_proj.in_features == n * FX.grids[kind].head_dim
        assert (site.query is None) == (n == 0)
    assert count_attention_params(pruned) < count_attention_params(model)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", list(KEEPS))
def test_pruned_generates_as_the_gated_reference(case, impl):
    """All three grids pruned (the decoder's KV cache then holds a different number of heads per layer, or a
    placeholder for an empty layer): cached generate() = greedy decoding of the gated model, token for token."""
    prompt = FX.inputs()
    masks = {"enc": _mask(KEEPS[case]), "dec": _mask(KEEPS[case]), "cross": _mask(KEEPS[case]).flip(1)}
    pruned = prune_heads(_fresh(impl), masks)
    with torch.no_grad():
        ours = R.hf_greedy(pruned, prompt, 5)
    assert torch.equal(ours, R.greedy(_model(impl), prompt, 5, {k: R.Ablation("zero", m) for k, m in masks.items()}))


@pytest.mark.parametrize("kind", ["enc", "dec"])
def test_each_layer_adds_its_own_heads_bias(kind):
    """The checks above fail when a pruned layer adds the wrong columns of the stack's relative position bias:
    the first columns of it (as if the bias were sliced to the kept count), or the first layer's kept heads'."""
    batch, keep = FX.inputs(), KEEPS["different"]
    want = R.forward(_model("eager"), batch, {kind: R.Ablation("zero", _mask(keep))}).logits
    pruned = prune_heads(_fresh(), {kind: _mask(keep)})
    with torch.no_grad():
        assert _diff(pruned(**batch).logits, want) <= FX.atol
        second = A.attention_sites(pruned, kind)[1].module
        second.heads = torch.arange(len(keep[1]))  # the first columns of the bias
        assert _diff(pruned(**batch).logits, want) > 1e-3
        second.heads = torch.tensor(keep[0] + [keep[1][-1]])  # the first layer's heads' columns
        assert _diff(pruned(**batch).logits, want) > 1e-3


def test_pruning_twice_is_pruning_the_union():
    batch = FX.inputs()
    first = {k: _mask({0: [0, 1, 3], 1: [0, 2, 3]}) for k in KINDS}
    union = {k: _mask({0: [3], 1: [0, 2]}) for k in KINDS}
    twice = prune_heads(prune_heads(_fresh(), first), union)
    once = prune_heads(_fresh(), union)
    assert A.kept_heads(twice) == A.kept_heads(once) == {k: [[3], [0, 2]] for k in KINDS}
    with torch.no_grad():
        assert _diff(twice(**batch).logits, once(**batch).logits) <= 1e-12
    twice = prune_heads(twice, {"dec": _mask({0: [], 1: [2]})})  # down to an empty first layer
    want = R.forward(_model("eager"), batch, {**{k: R.Ablation("zero", union[k]) for k in ("enc", "cross")},
                                              "dec": R.Ablation("zero", _mask({0: [], 1: [2]}))})
    with torch.no_grad():
        assert _diff(twice(**batch).logits, want.logits) <= FX.atol
    with pytest.raises(ValueError, match="already pruned"):
        prune_heads(twice, {"enc": _mask({0: [1, 3], 1: [0, 2]})})


# ------------------------------------------------------------------ gradients in the gates
def test_gate_gradients_equal_the_reference_and_finite_differences():
    model, batch = _model("eager"), FX.inputs()
    labels = batch["decoder_input_ids"]

    def loss_of(logits):
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                 labels[:, 1:].reshape(-1))

    base = {k: _gates() for k in KINDS}
    ours_g = {k: g.clone().requires_grad_() for k, g in base.items()}
    with head_gates(model, ours_g) as gates:
        loss = loss_of(model(**batch).logits)
    ours = dict(zip(KINDS, torch.autograd.grad(loss, [gates[k] for k in KINDS])))
    ref_g = {k: g.clone().requires_grad_() for k, g in base.items()}
    ref_loss = loss_of(R.forward(model, batch, {k: R.Ablation("zero", g) for k, g in ref_g.items()}).logits)
    ref = dict(zip(KINDS, torch.autograd.grad(ref_loss, [ref_g[k] for k in KINDS])))
    eps = 1e-6
    for kind in KINDS:
        assert _diff(ours[kind], ref[kind]) <= 1e-5, kind
        assert float(ours[kind].abs().max()) > 1e-3, kind
        for layer, head in [(0, 0), (1, 2)]:  # central finite differences of the reference loss
            plus = {k: g.clone() for k, g in base.items()}
            minus = {k: g.clone() for k, g in base.items()}
            plus[kind][layer, head] += eps
            minus[kind][layer, head] -= eps
            with torch.no_grad():
                fd = (loss_of(R.forward(model, batch, {k: R.Ablation("zero", g) for k, g in plus.items()}).logits)
                      - loss_of(R.forward(model, batch, {k: R.Ablation("zero", g) for k, g in minus.items()}).logits)
                      ) / (2 * eps)
            assert abs(float(ours[kind][layer, head]) - float(fd)) <= 1e-4, (kind, layer, head)


# ------------------------------------------------------------------ attention maps
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", KINDS)
def test_attention_maps_equal_the_reference(kind, impl):
    model, batch = _model(impl), FX.inputs()
    ref = R.forward(model, batch)
    maps = attention_maps(model, batch, kind)
    assert len(maps) == SHAPE[0]
    for layer, got in enumerate(maps):
        want = ref.grids[kind][layer].probs
        assert got.shape == want.shape
        assert _diff(got, want) <= FX.atol, layer
        assert bool(((want == 0) == (got == 0)).all())  # keys a query may not see: exactly 0


@pytest.mark.parametrize("kind", KINDS)
def test_attention_maps_of_a_pruned_model(kind):
    """Each layer's kept heads keep their own maps (their own columns of the position bias); pruned heads are
    NaN."""
    keep, batch = KEEPS["different"], FX.inputs()
    ref = R.forward(_model("eager"), batch, {kind: R.Ablation("zero", _mask(keep))})
    pruned = prune_heads(_fresh(), {kind: _mask(keep)})
    for layer, got in enumerate(attention_maps(pruned, batch, kind)):
        gone = [h for h in range(SHAPE[1]) if h not in keep[layer]]
        assert bool(torch.isnan(got[:, gone]).all())
        assert _diff(got[:, keep[layer]], ref.grids[kind][layer].probs[:, keep[layer]]) <= FX.atol
    ref = R.forward(_model("eager"), batch, {kind: R.Ablation("zero", _mask(KEEPS["first-empty"]))})
    empty = prune_heads(_fresh(), {kind: _mask(KEEPS["first-empty"])})
    got = attention_maps(empty, batch, kind)
    assert bool(torch.isnan(got[0]).all())
    assert _diff(got[1][:, [2, 3]], ref.grids[kind][1].probs[:, [2, 3]]) <= FX.atol
