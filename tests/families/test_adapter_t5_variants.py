"""The T5 adapters on mT5 (``model_type`` "mt5"), on UMT5 (``"umt5"``: a bias table in every
self-attention layer) and on encoder-only models (``T5EncoderModel``, ``MT5EncoderModel``):
the grids the model has, gates of 0 equal to removing the heads (their columns of the output projection zeroed,
which has no bias), physical pruning equal to masking, cached generation of pruned models, the reference forward
on mT5, attention maps (UMT5: against the eager model's own probabilities) and the cost dimensions."""
from __future__ import annotations

import copy
import functools

import pytest
import torch
import transformers as tf

from headprune_utils.model import architecture as A
from headprune_utils.model.attention import attention_maps
from headprune_utils.model.families.base import CostDims
from headprune_utils.model.families.t5 import T5PrunedAttention
from headprune_utils.model.gates import head_gates
from headprune_utils.model.pruning import count_attention_params, prune_heads

from . import reference as R
from .fixtures import FIXTURES, SEED, _redraw

FX = FIXTURES["t5"]
KINDS = ("enc", "dec", "cross")
SHAPE = (2, 4)
SIZES = dict(vocab_size=61, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_decoder_layers=2, num_heads=4,
             relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0, pad_token_id=0,
             eos_token_id=1, decoder_start_token_id=0)
# per layer, the heads kept: different heads per layer; the first layer (which computes the bias) empty
KEEPS = {"different": {0: [1, 3], 1: [0, 2, 3]}, "first-empty": {0: [], 1: [2, 3]}}


def _build(model_class, config_class):
    torch.manual_seed(SEED)
    model = model_class._from_config(config_class(**SIZES), attn_implementation="eager").to(torch.float64).eval()
    _redraw(model, SEED)
    return model


@functools.lru_cache(maxsize=None)
def _mt5():
    return _build(tf.MT5ForConditionalGeneration, tf.MT5Config)


@functools.lru_cache(maxsize=None)
def _encoder(name):
    """An encoder-only model with the weights of the seq2seq model of the same family (so its encoder is the same)."""
    full, model_class, config_class = {"t5": (FX.build(), tf.T5EncoderModel, tf.T5Config),
                                       "mt5": (_mt5(), tf.MT5EncoderModel, tf.MT5Config)}[name]
    model = _build(model_class, config_class)
    missing, _ = model.load_state_dict(full.state_dict(), strict=False)
    assert not missing
    return model, full


def _mask(keep: dict) -> torch.Tensor:
    m = torch.ones(SHAPE, dtype=torch.float64)
    for layer, heads in keep.items():
        m[layer] = 0
        m[layer, heads] = 1
    return m


def _removed(model, kind, mask):
    """A copy of ``model`` whose heads with mask 0 in ``kind`` add nothing: their columns of ``o`` are zero."""
    out = copy.deepcopy(model)
    d = SIZES["d_kv"]
    with torch.no_grad():
        for site in A.attention_sites(out, kind):
            for h in range(SHAPE[1]):
                if mask[site.layer, h] == 0:
                    site.out_proj.weight[:, h * d:(h + 1) * d] = 0
    return out


def _enc_inputs():
    b = FX.inputs()
    return {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]}


def _diff(a, b) -> float:
    return float((a - b).detach().abs().max())


# ------------------------------------------------------------------ mT5
def test_mt5_is_a_t5_family_model_with_three_grids():
    model = _mt5()
    assert A.family_of(model).name == "t5" and A.attention_kinds(model) == KINDS
    assert A.head_shape(model) == {k: SHAPE for k in KINDS}
    assert A.family_of(tf.MT5Config(**SIZES)).name == "t5"


@pytest.mark.parametrize("kind", KINDS)
def test_mt5_gates_of_zero_remove_the_heads_and_equal_the_reference(kind):
    model, batch, mask = _mt5(), FX.inputs(), _mask(KEEPS["different"])
    ref_model = copy.deepcopy(model)
    ref_model.config.scale_decoder_outputs = False  # mT5 does not scale its decoder output (the reference reads this)
    with torch.no_grad():
        plain = model(**batch).logits
        assert _diff(plain, R._t5(ref_model, batch, None).logits) <= FX.atol
        with head_gates(model, {kind: mask}):
            gated = model(**batch).logits
        removed = _removed(model, kind, mask)(**batch).logits
        ref = R._t5(ref_model, batch, {kind: R.Ablation("zero", mask)}).logits
    assert _diff(gated, removed) <= 1e-9
    assert _diff(gated, ref) <= FX.atol
    assert _diff(gated, plain) > 1e-3


@pytest.mark.parametrize("case", list(KEEPS))
@pytest.mark.parametrize("kind", KINDS)
def test_mt5_pruned_equals_masked(kind, case):
    model, batch, mask = _mt5(), FX.inputs(), _mask(KEEPS[case])
    pruned = prune_heads(copy.deepcopy(model), {kind: mask})
    assert A.kept_heads(pruned, kind) == [KEEPS[case][layer] for layer in range(SHAPE[0])]
    assert all(isinstance(s.module, T5PrunedAttention) for s in A.attention_sites(pruned, kind))
    with torch.no_grad(), head_gates(model, {kind: mask}):
        gated = model(**batch).logits
    with torch.no_grad():
        assert _diff(pruned(**batch).logits, gated) <= 1e-9


def test_mt5_pruned_generates_as_the_masked_model():
    model, prompt = _mt5(), FX.inputs()
    masks = {"enc": _mask(KEEPS["first-empty"]), "dec": _mask(KEEPS["first-empty"]),
             "cross": _mask(KEEPS["different"])}
    pruned = prune_heads(copy.deepcopy(model), masks)
    with torch.no_grad():
        ours = R.hf_greedy(pruned, prompt, 5)
    with head_gates(model, masks):
        want = R.hf_greedy(model, prompt, 5)
    assert torch.equal(ours, want)


# ------------------------------------------------------------------ encoder-only
@pytest.mark.parametrize("name", ["t5", "mt5"])
def test_encoder_only_has_the_encoder_grid_only(name):
    model, _ = _encoder(name)
    assert A.attention_kinds(model) == ("enc",)
    assert A.head_shape(model) == {"enc": SHAPE} and A.kept_heads(model) == {"enc": [[0, 1, 2, 3]] * 2}
    assert [s.kind for s in A.attention_sites(model)] == ["enc", "enc"]
    for kind in ("dec", "cross"):
        with pytest.raises(ValueError, match="unknown attention type"):
            A.head_shape(model, kind)
    with pytest.raises(ValueError, match="unknown attention type"):
        with head_gates(model, {"dec": torch.ones(SHAPE)}):
            pass


@pytest.mark.parametrize("name", ["t5", "mt5"])
def test_encoder_only_gates_of_zero_remove_the_heads(name):
    model, full = _encoder(name)
    batch, mask = _enc_inputs(), _mask(KEEPS["different"])
    with torch.no_grad():
        plain = model(**batch).last_hidden_state
        assert _diff(plain, full.encoder(**batch).last_hidden_state) <= 1e-12  # the same encoder
        with head_gates(model, {"enc": mask}):
            gated = model(**batch).last_hidden_state
        with head_gates(full, {"enc": mask}):
            full_gated = full.encoder(**batch).last_hidden_state
        removed = _removed(model, "enc", mask)(**batch).last_hidden_state
    assert _diff(gated, removed) <= 1e-9
    assert _diff(gated, full_gated) <= 1e-12
    assert _diff(gated, plain) > 1e-3


@pytest.mark.parametrize("case", list(KEEPS))
@pytest.mark.parametrize("name", ["t5", "mt5"])
def test_encoder_only_pruned_equals_masked(name, case):
    model, _ = _encoder(name)
    batch, mask = _enc_inputs(), _mask(KEEPS[case])
    pruned = prune_heads(copy.deepcopy(model), {"enc": mask})
    assert A.kept_heads(pruned) == {"enc": [KEEPS[case][layer] for layer in range(SHAPE[0])]}
    with torch.no_grad(), head_gates(model, {"enc": mask}):
        gated = model(**batch).last_hidden_state
    with torch.no_grad():
        assert _diff(pruned(**batch).last_hidden_state, gated) <= 1e-9
    for site in A.attention_sites(pruned):
        assert site.out_proj.in_features == len(KEEPS[case][site.layer]) * SIZES["d_kv"]


@pytest.mark.parametrize("name", ["t5", "mt5"])
def test_encoder_only_attention_maps_equal_the_full_models(name):
    model, full = _encoder(name)
    ours = attention_maps(model, _enc_inputs(), "enc")
    want = attention_maps(full, FX.inputs(), "enc")
    assert len(ours) == SHAPE[0]
    for got, ref in zip(ours, want):
        assert got.shape == ref.shape and _diff(got, ref) <= 1e-12


@pytest.mark.parametrize("name", ["t5", "mt5"])
def test_encoder_only_cost_dims(name):
    model, full = _encoder(name)
    family = A.family_of(model)
    gated = 3 if name == "mt5" else 2  # mT5's feed-forward is gated-gelu, T5's (here) relu
    want = CostDims(2, 4, 4, 8, 32, 37, ffn_matrices=gated)
    assert family.cost_dims(model.config) == want == family.cost_dims(full.config)


# ------------------------------------------------------------------ UMT5
UMT5_KEEPS = {**KEEPS, "last-empty": {0: [0, 2], 1: []}}


@functools.lru_cache(maxsize=None)
def _umt5(impl="eager"):
    torch.manual_seed(SEED)
    model = tf.UMT5ForConditionalGeneration._from_config(tf.UMT5Config(**SIZES), attn_implementation=impl)
    model = model.to(torch.float64).eval()
    _redraw(model, SEED)
    return model


def test_umt5_has_its_own_adapter_with_three_grids():
    model = _umt5()
    family = A.family_of(model)
    assert family.name == "umt5" and A.attention_kinds(model) == KINDS
    assert A.head_shape(model) == {k: SHAPE for k in KINDS}
    tables = [s.module.relative_attention_bias.weight for k in ("enc", "dec") for s in A.attention_sites(model, k)]
    assert len(tables) == 4 and not torch.equal(tables[0], tables[1])  # a table in every self-attention layer
    # UMT5EncoderModel builds its encoder from a copy of the config, so its own config still says
    # is_encoder_decoder=True: the model (no decoder) has the encoder grid alone
    enc = tf.UMT5EncoderModel._from_config(tf.UMT5Config(**SIZES))
    assert enc.config.is_encoder_decoder, "UMT5EncoderModel's config now tells: this test no longer tests the model path"
    assert A.attention_kinds(enc) == ("enc",) and A.head_shape(enc) == {"enc": SHAPE}
    assert [s.kind for s in A.attention_sites(enc)] == ["enc", "enc"]
    for kind in ("dec", "cross"):
        with pytest.raises(ValueError, match="unknown attention type"):
            A.attention_sites(enc, kind)
    assert A.attention_kinds(enc.config) == KINDS  # the config alone: the full model's grids


@pytest.mark.parametrize("kind", KINDS)
def test_umt5_gates_of_zero_remove_the_heads(kind):
    model, batch, mask = _umt5(), FX.inputs(), _mask(UMT5_KEEPS["different"])
    with torch.no_grad():
        plain = model(**batch).logits
        with head_gates(model, {kind: mask}):
            gated = model(**batch).logits
        removed = _removed(model, kind, mask)(**batch).logits
    assert _diff(gated, removed) <= 1e-9
    assert _diff(gated, plain) > 1e-3


@pytest.mark.parametrize("case", list(UMT5_KEEPS))
@pytest.mark.parametrize("kind", KINDS)
def test_umt5_pruned_equals_masked(kind, case):
    """Each self-attention layer keeps its kept heads' columns of its own bias table (a layer that kept the first
    columns, or the other layer's heads' columns, differs)."""
    model, batch, keep = _umt5(), FX.inputs(), UMT5_KEEPS[case]
    mask = _mask(keep)
    pruned = prune_heads(copy.deepcopy(model), {kind: mask})
    assert A.kept_heads(pruned, kind) == [keep[layer] for layer in range(SHAPE[0])]
    with torch.no_grad(), head_gates(model, {kind: mask}):
        gated = model(**batch).logits
    with torch.no_grad():
        assert _diff(pruned(**batch).logits, gated) <= 1e-9
    originals = A.attention_sites(model, kind)
    for site in A.attention_sites(pruned, kind):
        n = len(keep[site.layer])
        assert site.out_proj.in_features == n * SIZES["d_kv"] and (site.query is None) == (n == 0)
        if n and kind != "cross":
            table = originals[site.layer].module.relative_attention_bias.weight
            assert torch.equal(site.module.relative_attention_bias.weight, table[:, keep[site.layer]])
    assert count_attention_params(pruned) < count_attention_params(model)


def test_umt5_pruning_twice_is_pruning_the_union():
    batch = FX.inputs()
    first = {k: _mask({0: [0, 1, 3], 1: [0, 2, 3]}) for k in KINDS}
    union = {k: _mask({0: [3], 1: [0, 2]}) for k in KINDS}
    twice = prune_heads(prune_heads(copy.deepcopy(_umt5()), first), union)
    once = prune_heads(copy.deepcopy(_umt5()), union)
    assert A.kept_heads(twice) == A.kept_heads(once) == {k: [[3], [0, 2]] for k in KINDS}
    with torch.no_grad():
        assert _diff(twice(**batch).logits, once(**batch).logits) <= 1e-12


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("case", list(UMT5_KEEPS))
def test_umt5_pruned_generates_as_the_masked_model(case, impl):
    """All three grids pruned (a decoder layer left empty writes a placeholder into the KV cache, so the next
    layers' biases still see the positions decoded)."""
    model, prompt = _umt5("eager"), FX.inputs()
    masks = {"enc": _mask(UMT5_KEEPS[case]), "dec": _mask(UMT5_KEEPS[case]), "cross": _mask(UMT5_KEEPS[case]).flip(1)}
    pruned = prune_heads(copy.deepcopy(_umt5(impl)), masks)
    with torch.no_grad():
        ours = R.hf_greedy(pruned, prompt, 5)
    with head_gates(model, masks):
        want = R.hf_greedy(model, prompt, 5)
    assert torch.equal(ours, want)


def _hf_maps(model, batch, kind):
    with torch.no_grad():
        out = model(**batch, output_attentions=True)
    return {"enc": out.encoder_attentions, "dec": out.decoder_attentions, "cross": out.cross_attentions}[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_umt5_attention_maps_equal_the_models_own(kind):
    """The maps the adapter places (own scores plus each layer's own bias) equal the eager model's probabilities,
    before and after pruning (kept heads; pruned heads NaN)."""
    batch, keep = FX.inputs(), UMT5_KEEPS["first-empty"]
    for model in (_umt5(), prune_heads(copy.deepcopy(_umt5()), {kind: _mask(keep)})):
        kept = A.kept_heads(model, kind)
        hf = list(_hf_maps(model, batch, kind))  # one per layer (an empty layer: a map of no head)
        assert len(hf) == len(kept) and all(m.shape[1] == len(ids) for m, ids in zip(hf, kept))
        for layer, got in enumerate(attention_maps(model, batch, kind)):
            gone = [h for h in range(SHAPE[1]) if h not in kept[layer]]
            assert bool(torch.isnan(got[:, gone]).all())
            want = hf.pop(0)
            if kept[layer]:
                assert want.shape[1] == len(kept[layer]) and _diff(got[:, kept[layer]], want) <= 1e-12, layer
