"""Attention maps against transformers' own eager attentions; JS divergence against scipy."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon

from conftest import tiny_inputs, tiny_model
from headprune_utils.model.attention import attention_maps, head_js, js_divergence
from headprune_utils.model.gates import head_gates
from headprune_utils.model.pruning import prune_heads

KINDS = ["bert", "roberta", "electra", "distilbert"]
MASK = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.float32)


def hf_attentions(model, inputs):
    with torch.no_grad():
        return model(**inputs, output_attentions=True).attentions


def n_hooks(model):
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


@pytest.mark.parametrize("kind", KINDS)
def test_maps_equal_eager_output_attentions(kind):
    model = tiny_model(kind, attn="eager", dtype=torch.float64)
    inputs = tiny_inputs()
    ref = hf_attentions(model, inputs)
    maps = attention_maps(model, inputs)
    assert len(maps) == len(ref) == 3
    real = inputs["attention_mask"].bool()
    for got, want in zip(maps, ref):
        assert got.shape == want.shape == (3, 4, 9, 9)
        assert torch.allclose(got, want, atol=1e-12, rtol=0)
        # real query rows in particular (padded query rows are distributions over real keys, as in the model)
        assert torch.allclose(got.permute(0, 2, 1, 3)[real], want.permute(0, 2, 1, 3)[real], atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_sdpa_model_gives_the_eager_maps(kind):
    eager = tiny_model(kind, attn="eager")
    sdpa = tiny_model(kind, attn="sdpa")  # same seed: same weights
    inputs = tiny_inputs()
    for got, want in zip(attention_maps(sdpa, inputs), hf_attentions(eager, inputs)):
        assert torch.allclose(got, want, atol=1e-6)


def test_rows_sum_to_one_padded_keys_get_zero_and_labels_are_ignored(bert):
    inputs = {**tiny_inputs(), "labels": torch.tensor([0, 1, 2])}
    for a in attention_maps(bert, inputs):
        assert torch.allclose(a.sum(-1), torch.ones(3, 4, 9), atol=1e-6)
        pad_keys = ~inputs["attention_mask"].bool()[:, None, None, :].expand_as(a)
        assert bool((a[pad_keys] == 0).all())
        assert bool((a >= 0).all())


def test_no_hooks_left_mode_restored_and_model_unchanged(bert):
    inputs = tiny_inputs()
    state = {k: v.clone() for k, v in bert.state_dict().items()}
    bert.train()
    attention_maps(bert, inputs)
    assert bert.training and n_hooks(bert) == 0
    with pytest.raises(Exception):
        attention_maps(bert, {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"][:, :3]})
    assert n_hooks(bert) == 0
    assert all(torch.equal(v, bert.state_dict()[k]) for k, v in state.items())


@pytest.mark.parametrize("kind", KINDS)
def test_pruned_model_nan_for_absent_heads_same_maps_for_kept(kind):
    model = tiny_model(kind, attn="eager", dtype=torch.float64)
    inputs = tiny_inputs()
    with head_gates(model, MASK.double()):  # zero gates == pruning: the kept heads see the same inputs
        gated = attention_maps(model, inputs)
    prune_heads(model, MASK)
    maps = attention_maps(model, inputs)
    hf = hf_attentions(model, inputs)  # transformers' own maps of the PRESENT heads
    # the emptied layer keeps its place: a map of no head, [batch, 0, seq, seq]
    hf_by_layer = dict(enumerate(hf))
    assert len(hf) == 3 and all(hf_by_layer[l].shape[1] == 0 for l in range(3) if not MASK[l].any())
    for layer, (got, want) in enumerate(zip(maps, gated)):
        kept = MASK[layer].bool()
        assert got.shape == (3, 4, 9, 9)
        assert bool(torch.isnan(got[:, ~kept]).all())
        assert not bool(torch.isnan(got[:, kept]).any())
        assert torch.allclose(got[:, kept], want[:, kept], atol=1e-12)
        if kept.any():
            assert torch.allclose(got[:, kept], hf_by_layer[layer], atol=1e-12)


def test_maps_under_gates_differ_downstream(bert):
    inputs = tiny_inputs()
    base = attention_maps(bert, inputs)
    with head_gates(bert, MASK):
        gated = attention_maps(bert, inputs)
    assert torch.equal(base[0], gated[0])  # layer 0 sees the embeddings either way
    assert not torch.allclose(base[2], gated[2])


# --- Jensen-Shannon -----------------------------------------------------------------------------------

def random_dists(shape, seed, zeros=True):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(shape, generator=g, dtype=torch.float64)
    if zeros:
        p[..., ::3] = 0.0
    return p / p.sum(-1, keepdim=True)


def test_js_matches_scipy_symmetric_and_zero_for_equal():
    p, q = random_dists((5, 7), 0), random_dists((5, 7), 1, zeros=False)
    js = js_divergence(p, q)
    ref = torch.tensor([jensenshannon(a, b) ** 2 for a, b in zip(p.numpy(), q.numpy())], dtype=torch.float64)
    assert js.shape == (5,)
    assert torch.allclose(js, ref, atol=1e-14)
    assert torch.allclose(js_divergence(q, p), js, atol=1e-15)
    assert torch.equal(js_divergence(p, p), torch.zeros(5, dtype=torch.float64))
    disjoint = js_divergence(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]))
    assert float(disjoint) == pytest.approx(np.log(2))  # the maximum, in nats


def test_js_smoothing_as_clark_et_al():
    p, q = random_dists((4, 6), 2), random_dists((4, 6), 3)
    smooth = lambda a: 0.001 / a.shape[-1] + 0.999 * a
    ref = [jensenshannon(smooth(a), smooth(b)) ** 2 for a, b in zip(p.numpy(), q.numpy())]
    assert torch.allclose(js_divergence(p, q, eps=0.001), torch.tensor(ref, dtype=torch.float64), atol=1e-14)


def test_head_js_by_hand_with_padding_and_smoothing():
    inputs = tiny_inputs()
    a = attention_maps(tiny_model(seed=0, dtype=torch.float64), inputs)
    b_model = tiny_model(seed=1, dtype=torch.float64)
    prune_heads(b_model, MASK)
    b = attention_maps(b_model, inputs)
    lengths = inputs["attention_mask"].sum(1).tolist()
    for eps in (0.0, 0.001):
        got = head_js(a, b, inputs["attention_mask"], eps=eps)
        assert got.shape == (3, 4)
        for layer in range(3):
            for head in range(4):
                if MASK[layer, head] == 0:
                    assert torch.isnan(got[layer, head])
                    continue
                vals = []
                for s, n in enumerate(lengths):
                    for i in range(n):  # real queries, real keys only
                        pa = a[layer][s, head, i, :n].numpy()
                        pb = b[layer][s, head, i, :n].numpy()
                        if eps:
                            pa, pb = eps / n + (1 - eps) * pa, eps / n + (1 - eps) * pb
                        vals.append(jensenshannon(pa, pb) ** 2)
                assert float(got[layer, head]) == pytest.approx(np.mean(vals), rel=1e-9, abs=1e-15)
    same = head_js(a, a, inputs["attention_mask"])
    assert torch.equal(same, torch.zeros(3, 4, dtype=torch.float64))


# --- encoder-decoders: encoder self-attention -------------------------------------------------------------

@pytest.mark.parametrize("family", ["marian", "bart"])
def test_encoder_maps_of_a_seq2seq_model_equal_eager_output_attentions(family):
    from test_seq2seq_gates import tiny_batch, tiny_marian

    model = tiny_marian(attn="eager", dtype=torch.float64, family=family)
    batch = tiny_batch()  # ragged sources, decoder inputs and labels (ignored)
    with torch.no_grad():
        ref = model.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                  output_attentions=True).attentions
    hooks_before = n_hooks(model)  # transformers' own output recording may leave hooks of its own
    maps = attention_maps(model, batch, kind="enc")
    assert n_hooks(model) == hooks_before
    assert len(maps) == len(ref) == 2
    for got, want in zip(maps, ref):
        assert got.shape == want.shape == (3, 4, 9, 9)
        assert torch.allclose(got, want, atol=1e-12, rtol=0)
    sdpa = tiny_marian(attn="sdpa", family=family)  # same seed, same weights, float32, another backend
    for got, want in zip(attention_maps(sdpa, batch, kind="enc"), ref):
        assert torch.allclose(got.double(), want, atol=1e-5)
    assert n_hooks(sdpa) == 0


def test_encoder_maps_of_a_seq2seq_model_under_gates_and_after_pruning():
    from headprune_utils.model.pruning import prune_heads as prune
    from test_seq2seq_gates import tiny_batch, tiny_marian

    model = tiny_marian(dtype=torch.float64)
    batch = tiny_batch()
    mask = {"enc": torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)}
    with head_gates(model, mask):
        gated = attention_maps(model, batch, kind="enc")
    prune(model, mask)
    maps = attention_maps(model, batch, kind="enc")
    kept = mask["enc"][0].bool()
    assert torch.allclose(maps[0][:, kept], gated[0][:, kept], atol=1e-12)
    assert bool(torch.isnan(maps[0][:, ~kept]).all()) and bool(torch.isnan(maps[1]).all())
    with pytest.raises(ValueError, match="kind="):
        attention_maps(model, batch)  # an encoder-decoder needs kind="enc"
    with pytest.raises(ValueError, match="not implemented"):
        attention_maps(model, batch, kind="cross")
    with pytest.raises(ValueError, match="one grid"):
        attention_maps(tiny_model(), tiny_inputs(), kind="enc")
