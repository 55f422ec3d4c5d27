"""The T5 adapter on mT5 (``model_type`` "mt5") and on encoder-only models (``T5EncoderModel``,
``MT5EncoderModel``): the grids the model has, gates of 0 equal to removing the heads (their columns of the
output projection zeroed, which has no bias), physical pruning equal to masking, the reference forward on mT5,
and the cost dimensions. UMT5 (a bias table in every layer) is refused, naming its model type."""
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
from headprune_utils.model.pruning import prune_heads

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
@pytest.mark.parametrize("model_class", [tf.UMT5ForConditionalGeneration, tf.UMT5EncoderModel])
def test_umt5_is_refused_by_name(model_class):
    model = model_class._from_config(tf.UMT5Config(**SIZES))
    for what in (model, model.config):
        with pytest.raises(A.UnsupportedArchitectureError, match=r"\(umt5\)"):
            A.head_shape(what)
    with pytest.raises(A.UnsupportedArchitectureError, match=r"\(umt5\)"):
        with head_gates(model, {"enc": torch.ones(SHAPE)}):
            pass
