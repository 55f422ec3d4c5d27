"""The shared mask-sweep evaluator against the plain approach (head_gates + one full forward per mask)."""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch

from conftest import tiny_model
from headprune_utils.measure import mask_sweep
from headprune_utils.tasks.batching import Encoded
from headprune_utils.model.gates import head_gates, head_means
from headprune_utils.measure.mask_sweep import (
    SweepOptions, evaluate_masks, logits_masks, plain_logits_masks, plain_predict_masks, predict_masks, sweep_plan,
)
from headprune_utils.model.pruning import prune_heads
from headprune_utils.train.training import evaluate, predict

L, H = 3, 4  # the tiny models: 3 layers x 4 heads, head_dim 8


def make_enc(n: int = 13, seed: int = 0, token_types: bool = False, same_length: bool = False,
             n_labels: int = 3) -> Encoded:
    """Ragged sentences ([CLS]=2 ... [SEP]=3), so batches are padded; labels at random."""
    rng = np.random.default_rng(seed)
    sizes = [7] * n if same_length else [int(rng.integers(1, 14)) for _ in range(n)]
    ids = [[2] + [int(t) for t in rng.integers(5, 120, size=k)] + [3] for k in sizes]
    tt = [[0] * (len(x) // 2) + [1] * (len(x) - len(x) // 2) for x in ids] if token_types else None
    labels = rng.normal(size=n).astype(np.float32) if n_labels == 1 else rng.integers(0, n_labels, size=n)
    return Encoded(input_ids=ids, token_type_ids=tt, labels=labels, pad_id=0)


def sweep_set(seed: int = 0) -> dict:
    """Masks with shared prefixes, whole layers pruned, all ones / all zeros, random and fractional gates."""
    g = torch.Generator().manual_seed(seed)
    ones = torch.ones(L, H)
    masks = {
        "ones": ones,
        "zeros": torch.zeros(L, H),
        "top_layer": ones.clone().index_fill_(0, torch.tensor([2]), 0.0),
        "top_half": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 0.]]),  # shares rows 0-1 with "ones"
        "top_other": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 0, 0.]]),
        "middle": torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1.]]),
        "bottom": torch.tensor([[0, 0, 0, 0], [1, 0, 0, 1], [1, 1, 1, 1.]]),
        "bottom2": torch.tensor([[0, 0, 0, 0], [1, 0, 0, 1], [0, 1, 1, 0.]]),  # shares rows 0-1 with "bottom"
        "random": (torch.rand(L, H, generator=g) > 0.5).float(),
        "fractional": torch.rand(L, H, generator=g),
        "ones_again": ones.clone(),  # identical masks under two keys
    }
    masks["fractional"][1, 2] = 0.0
    return masks


def assert_logits_match(got: dict, ref: dict, atol: float) -> None:
    assert list(got) == list(ref)
    for k in ref:
        assert got[k].shape == ref[k].shape, k
        diff = float((got[k] - ref[k]).abs().max())
        assert diff <= atol, f"mask {k!r}: max |diff| {diff:.3g} > {atol}"


def n_hooks(model) -> int:
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


# ----------------------------------------------------------------------------- equality with the plain way
@pytest.mark.parametrize("kind", ["bert", "roberta", "electra"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("ablation", ["zero", "uniform", "mean"])
def test_logits_equal_plain_float32(kind, attn, ablation):
    model = tiny_model(kind, attn=attn)
    enc = make_enc(token_types=kind == "bert")
    masks = sweep_set()
    means = torch.randn(L, H, 8) if ablation == "mean" else None
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no silent fall-back to the plain path
        got = logits_masks(model, enc, masks, batch_size=4, ablation=ablation, means=means)
    ref = plain_logits_masks(model, enc, masks, batch_size=4, ablation=ablation, means=means)
    assert_logits_match(got, ref, atol=1e-5)
    for k in masks:
        assert torch.equal(got[k].argmax(-1), ref[k].argmax(-1)), k


@pytest.mark.parametrize("kind", ["bert", "roberta", "electra"])
@pytest.mark.parametrize("ablation", ["zero", "uniform", "mean"])
def test_logits_equal_plain_float64_tightly(kind, ablation):
    model = tiny_model(kind, dtype=torch.float64, attn="eager")
    enc = make_enc(seed=1)
    masks = sweep_set(seed=1)
    means = torch.randn(L, H, 8, dtype=torch.float64) if ablation == "mean" else None
    got = logits_masks(model, enc, masks, batch_size=5, ablation=ablation, means=means)
    ref = plain_logits_masks(model, enc, masks, batch_size=5, ablation=ablation, means=means)
    assert_logits_match(got, ref, atol=1e-12)


def test_real_head_means_and_large_logits():
    """Mean ablation with means from head_means; a model scaled up so logits are far from 0."""
    model = tiny_model("bert")
    with torch.no_grad():
        model.classifier.weight.mul_(1000)
    enc = make_enc(n=10, seed=2)
    from headprune_utils.tasks.batching import eval_batches, iterate

    batches = [b for _, b in iterate(enc, eval_batches(enc.lengths, 4), "cpu")]
    means = head_means(model, batches)
    masks = sweep_set(seed=2)
    got = logits_masks(model, enc, masks, batch_size=4, ablation="mean", means=means)
    ref = plain_logits_masks(model, enc, masks, batch_size=4, ablation="mean", means=means)
    scale = max(float(r.abs().max()) for r in ref.values())
    assert scale > 1.0
    assert_logits_match(got, ref, atol=1e-5 * scale)


@pytest.mark.parametrize("options", [
    SweepOptions(**dict(zip(("slice_heads", "share_attention", "cls_only", "unpad"), flags)))
    for flags in itertools.product((True, False), repeat=4)
], ids=lambda o: f"slice{int(o.slice_heads)}-share{int(o.share_attention)}-cls{int(o.cls_only)}-unpad{int(o.unpad)}")
def test_every_option_combination_gives_the_same_logits(options):
    model = tiny_model("bert", dtype=torch.float64)
    enc = make_enc(seed=3)
    masks = sweep_set(seed=3)
    ref = plain_logits_masks(model, enc, masks, batch_size=4)
    assert_logits_match(logits_masks(model, enc, masks, batch_size=4, options=options), ref, atol=1e-12)
    ref_u = plain_logits_masks(model, enc, masks, batch_size=4, ablation="uniform")
    assert_logits_match(logits_masks(model, enc, masks, batch_size=4, ablation="uniform", options=options),
                        ref_u, atol=1e-12)


def test_decomposition_is_used_with_its_shortcuts():
    """The check accepts BERT-family models with the token-0-only last layer (no plain fall-back)."""
    for kind in ("bert", "roberta", "electra"):
        model = tiny_model(kind)
        sweeper, cls_only = mask_sweep._prepare(model, make_enc(), "zero", None, SweepOptions())
        assert sweeper is not None and cls_only and sweeper.unpad, kind


@pytest.mark.parametrize("ablation", ["zero", "uniform", "mean"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_physically_pruned_model(ablation, attn):
    model = tiny_model("bert", attn=attn)
    keep = torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 0, 1.]])
    prune_heads(model, keep)  # layer 1 has no head left
    enc = make_enc(seed=4)
    masks = {
        "present": keep.clone(),
        "ones": torch.ones(L, H),  # gates of removed heads are ignored, as in head_gates
        "less": torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1], [0, 0, 0, 1.]]),
        "zeros": torch.zeros(L, H),
        "frac": torch.tensor([[0.5, 1, 0.25, 1], [1, 1, 1, 1], [1, 0.75, 1, 0.]]),
    }
    means = torch.randn(L, H, 8) if ablation == "mean" else None
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = logits_masks(model, enc, masks, batch_size=4, ablation=ablation, means=means)
    ref = plain_logits_masks(model, enc, masks, batch_size=4, ablation=ablation, means=means)
    assert_logits_match(got, ref, atol=1e-5)
    assert torch.equal(got["present"], got["ones"])


def test_batches_without_padding_and_single_sentences():
    model = tiny_model("roberta")
    masks = sweep_set(seed=5)
    for enc in (make_enc(n=6, same_length=True), make_enc(n=1, seed=6)):
        got = logits_masks(model, enc, masks, batch_size=4)
        assert_logits_match(got, plain_logits_masks(model, enc, masks, batch_size=4), atol=1e-5)


def test_chunked_feed_forward():
    model = tiny_model("bert", chunk_size_feed_forward=1)  # the plain forward needs seq % chunk == 0
    enc = make_enc(seed=7)
    masks = sweep_set(seed=7)
    assert_logits_match(logits_masks(model, enc, masks, batch_size=4),
                        plain_logits_masks(model, enc, masks, batch_size=4), atol=1e-5)


def test_distilbert_falls_back_to_the_plain_path_silently():
    model = tiny_model("distilbert")
    enc = make_enc(seed=8)
    masks = sweep_set(seed=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = logits_masks(model, enc, masks, batch_size=4, ablation="uniform")
    assert_logits_match(got, plain_logits_masks(model, enc, masks, batch_size=4, ablation="uniform"), atol=0.0)


def test_a_head_reading_every_token_disables_the_shortcuts(monkeypatch):
    """A pooler that averages ALL positions (padding included): no token-0 shortcut, no unpadding."""
    model = tiny_model("bert")

    class MeanPooler(torch.nn.Module):
        def __init__(self, dense):
            super().__init__()
            self.dense = dense

        def forward(self, hidden_states):
            return torch.tanh(self.dense(hidden_states.mean(dim=1)))

    model.bert.pooler = MeanPooler(model.bert.pooler.dense)
    enc = make_enc(seed=9)
    sweeper, cls_only = mask_sweep._prepare(model, enc, "zero", None, SweepOptions())
    assert sweeper is not None and not cls_only and not sweeper.unpad
    masks = sweep_set(seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = logits_masks(model, enc, masks, batch_size=4)
    assert_logits_match(got, plain_logits_masks(model, enc, masks, batch_size=4), atol=1e-5)


def test_a_decomposition_that_disagrees_falls_back_with_a_warning(monkeypatch):
    model = tiny_model("bert")
    enc = make_enc(seed=10)
    masks = sweep_set(seed=10)
    original = mask_sweep._LayerStep.finish
    monkeypatch.setattr(mask_sweep._LayerStep, "finish", lambda self, *a, **k: original(self, *a, **k) + 0.5)
    with pytest.warns(RuntimeWarning, match="plain path"):
        got = logits_masks(model, enc, masks, batch_size=4)
    assert_logits_match(got, plain_logits_masks(model, enc, masks, batch_size=4), atol=0.0)


# ----------------------------------------------------------------------------- predictions and metrics
def test_predictions_and_metrics_equal_training_evaluate():
    model = tiny_model("bert")
    enc = make_enc(n=17, seed=11)
    masks = sweep_set(seed=11)
    preds = predict_masks(model, enc, masks, batch_size=4)
    plain = plain_predict_masks(model, enc, masks, batch_size=4)
    metrics = evaluate_masks(model, enc, "SST-2", masks, batch_size=4)
    for k, m in masks.items():
        assert preds[k].dtype == np.float64 and preds[k].shape == (17,)
        assert np.array_equal(preds[k], plain[k]), k
        with head_gates(model, m):
            assert np.array_equal(preds[k], predict(model, enc, 4)), k
        assert metrics[k] == evaluate(model, enc, "SST-2", batch_size=4, gates=m), k


def test_regression_head_gives_float_scores():
    model = tiny_model("bert", num_labels=1)
    enc = make_enc(n=9, seed=12, n_labels=1)
    masks = sweep_set(seed=12)
    preds = predict_masks(model, enc, masks, batch_size=4)
    plain = plain_predict_masks(model, enc, masks, batch_size=4)
    for k in masks:
        assert np.allclose(preds[k], plain[k], atol=1e-5), k
    # scores, not class ids (under "zeros" every sentence scores the same: token 0 sees only itself)
    assert len(np.unique(preds["ones"])) > 2
    got = evaluate_masks(model, enc, "STS-B", masks, batch_size=4)
    for k, m in masks.items():
        ref = evaluate(model, enc, "STS-B", batch_size=4, gates=m)
        assert got[k].keys() == ref.keys()
        # (constant scores, as under "zeros", give NaN correlations on both sides)
        assert np.allclose([got[k][n] for n in ref], [ref[n] for n in ref], atol=1e-4, equal_nan=True), k


def test_original_order_and_keys_are_kept():
    model = tiny_model("electra")
    enc = make_enc(n=11, seed=13)
    masks = {("b", 2): torch.zeros(L, H), ("a", 1): torch.ones(L, H), 7: torch.ones(L, H)}
    got = logits_masks(model, enc, masks, batch_size=3)
    assert list(got) == [("b", 2), ("a", 1), 7]
    with torch.no_grad():
        direct = torch.cat([model(input_ids=torch.tensor([ids])).logits for ids in enc.input_ids])
    assert torch.allclose(got[7], direct, atol=1e-5)
    assert torch.equal(got[("a", 1)], got[7])
    assert logits_masks(model, enc, {}) == {}


# ----------------------------------------------------------------------------- the model is left alone
@pytest.mark.parametrize("ablation", ["zero", "uniform"])
def test_model_unchanged_and_no_hooks_left(ablation):
    model = tiny_model("bert")
    model.train()
    enc = make_enc(seed=14)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    layers = list(model.bert.encoder.layer)
    batch = {"input_ids": torch.tensor([enc.input_ids[0]])}
    model.eval()
    with torch.no_grad():
        before = model(**batch).logits
    model.train()
    predict_masks(model, enc, sweep_set(seed=14), batch_size=4, ablation=ablation)
    assert model.training  # mode restored
    assert n_hooks(model) == 0
    assert list(model.bert.encoder.layer) == layers
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, before)


def test_layers_restored_after_an_error(monkeypatch):
    model = tiny_model("bert")
    enc = make_enc(seed=15)
    layers = model.bert.encoder.layer

    def boom(self, *args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(mask_sweep._Inject, "forward", boom)
    with pytest.raises(RuntimeError, match="boom"):
        logits_masks(model, enc, sweep_set(), batch_size=4, options=SweepOptions(check=False))
    assert model.bert.encoder.layer is layers
    assert n_hooks(model) == 0
    monkeypatch.undo()
    assert_logits_match(logits_masks(model, enc, sweep_set(), batch_size=4),
                        plain_logits_masks(model, enc, sweep_set(), batch_size=4), atol=1e-5)


# ----------------------------------------------------------------------------- validation and the plan
def test_bad_masks_raise_value_error_before_any_work(monkeypatch):
    model = tiny_model("bert")
    enc = make_enc()
    monkeypatch.setattr(mask_sweep, "_prepare", lambda *a, **k: pytest.fail("validation must come first"))
    bad = {
        "shape": (torch.ones(H, L), r"\[n_layers, n_heads\] = \[3, 4\]"),
        "above": (torch.full((L, H), 1.5), r"in \[0, 1\]"),
        "below": (torch.full((L, H), -0.1), r"in \[0, 1\]"),
        "nan": (torch.full((L, H), float("nan")), r"in \[0, 1\]"),
    }
    for key, (m, msg) in bad.items():
        with pytest.raises(ValueError, match=f"{key}.*{msg}"):
            predict_masks(model, enc, {"fine": torch.ones(L, H), key: m})
    with pytest.raises(ValueError, match="dict"):
        predict_masks(model, enc, [torch.ones(L, H)])
    with pytest.raises(ValueError, match="unknown ablation"):
        predict_masks(model, enc, {"a": torch.ones(L, H)}, ablation="random")
    with pytest.raises(ValueError, match="needs means"):
        predict_masks(model, enc, {"a": torch.ones(L, H)}, ablation="mean")
    with pytest.raises(ValueError, match="means must be"):
        predict_masks(model, enc, {"a": torch.ones(L, H)}, ablation="mean", means=torch.zeros(2, 4, 8))
    with pytest.raises(ValueError, match=r"\[n_layers, n_heads\]"):
        plain_predict_masks(model, enc, {"a": torch.ones(2, 2)})


def test_integer_and_boolean_masks_are_accepted():
    model = tiny_model("bert")
    enc = make_enc(n=5)
    m = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 0]])
    got = logits_masks(model, enc, {"int": m, "bool": m.bool(), "list": m.tolist(), "float": m.float()})
    assert torch.equal(got["int"], got["float"]) and torch.equal(got["bool"], got["float"])
    assert torch.equal(got["list"], got["float"])


def test_sweep_plan_counts():
    model = tiny_model("bert")
    ones = torch.ones(L, H)
    top = ones.clone()
    top[2] = 0
    bottom = ones.clone()
    bottom[0, :2] = 0
    plan = sweep_plan(model, {"ones": ones, "top": top, "bottom": bottom, "same": ones.clone()})
    # layer 0: {ones, bottom}; layer 1: {ones.ones, bottom.ones}; layer 2: {ones.ones.ones,
    # ones.ones.zeros, bottom.ones.ones}; "same" is "ones" again
    assert plan == {"masks": 4, "distinct_masks": 3, "layer_evals_plain": 12, "tree_nodes": 7,
                    "heads_plain": 48, "heads_kept": (4 + 2) + (4 + 4) + (4 + 0 + 4),
                    "heads_union": 4 + (4 + 4) + (4 + 4)}
