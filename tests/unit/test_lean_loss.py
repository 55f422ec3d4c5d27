"""The lean training loss (no work on padding, last layer on token 0) against the model's own forward.

The reference is the model's own forward (``model(**batch)``, with ``head_gates`` for gated heads): lean_loss
must give its loss, logits and the gradient of every parameter, up to float rounding, for classification,
regression, sentence pairs, every ablation and physically pruned models (a layer with no head left included).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from conftest import tiny_model
from headprune_utils.train import training
from headprune_utils.tasks.batching import Encoded, collate
from headprune_utils.model.gates import head_gates
from headprune_utils.train.lean_loss import lean_loss, unsupported_reason
from headprune_utils.model.pruning import prune_heads

L, H, D = 3, 4, 8  # the tiny models: 3 layers x 4 heads, head_dim 8


def make_enc(n: int = 11, seed: int = 0, token_types: bool = False, n_labels: int = 3) -> Encoded:
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(1, 14)) for _ in range(n)]
    ids = [[2] + [int(t) for t in rng.integers(5, 120, size=k)] + [3] for k in sizes]
    tt = [[0] * (len(x) // 2) + [1] * (len(x) - len(x) // 2) for x in ids] if token_types else None
    labels = rng.normal(size=n).astype(np.float32) if n_labels == 1 else rng.integers(0, n_labels, size=n)
    return Encoded(input_ids=ids, token_type_ids=tt, labels=labels, pad_id=0)


def batch_of(enc: Encoded, dtype=torch.float64):
    b = collate(enc, np.arange(len(enc)))
    if b["labels"].is_floating_point():
        b["labels"] = b["labels"].to(dtype)
    return b


def grads(model, loss_fn):
    model.zero_grad(set_to_none=True)
    loss_fn().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("n_labels,token_types", [(3, False), (1, False), (2, True)])
def test_loss_logits_and_gradients_equal_the_models_own_forward(n_labels, token_types):
    model = tiny_model(dtype=torch.float64, num_labels=n_labels)
    batch = batch_of(make_enc(token_types=token_types, n_labels=n_labels))
    assert bool((batch["attention_mask"] == 0).any()), "the batch must be padded for the test to mean anything"
    assert unsupported_reason(model) is None
    ref = model(**batch)
    loss, logits = lean_loss(model, batch)
    torch.testing.assert_close(logits, ref.logits, rtol=0, atol=1e-12)
    torch.testing.assert_close(loss, ref.loss, rtol=0, atol=1e-12)
    g_ref = grads(model, lambda: model(**batch).loss)
    g_lean = grads(model, lambda: lean_loss(model, batch)[0])
    assert set(g_ref) == set(g_lean) and len(g_ref) > 20
    for name in g_ref:
        torch.testing.assert_close(g_lean[name], g_ref[name], rtol=0, atol=1e-12, msg=name)


@pytest.mark.parametrize("ablation", ["zero", "uniform", "mean"])
def test_gates_match_head_gates_for_every_ablation(ablation):
    model = tiny_model(dtype=torch.float64)
    batch = batch_of(make_enc(seed=1))
    g = torch.rand(L, H, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    g[0, 1] = 0.0
    g[2] = 0.0  # the last layer (token 0 only here) fully gated
    means = torch.randn(L, H, D, dtype=torch.float64) if ablation == "mean" else None
    with head_gates(model, g, ablation, means=means):
        ref = model(**batch)
        g_ref = grads(model, lambda: model(**batch).loss)
    loss, logits = lean_loss(model, batch, g, ablation, means)
    torch.testing.assert_close(logits, ref.logits, rtol=0, atol=1e-12)
    g_lean = grads(model, lambda: lean_loss(model, batch, g, ablation, means)[0])
    for name in g_ref:
        torch.testing.assert_close(g_lean[name], g_ref[name], rtol=0, atol=1e-12, msg=name)


def test_physically_pruned_models_including_an_empty_layer():
    model = tiny_model(dtype=torch.float64)
    mask = torch.ones(L, H)
    mask[0, :2] = 0
    mask[1] = 0  # no head left in layer 1
    mask[2, 3] = 0
    prune_heads(model, mask)
    assert unsupported_reason(model) is None
    batch = batch_of(make_enc(seed=2))
    ref = model(**batch)
    loss, logits = lean_loss(model, batch)
    torch.testing.assert_close(logits, ref.logits, rtol=0, atol=1e-12)
    # gates over ORIGINAL head ids on top of the pruning: the pruned heads' gates are ignored, as in head_gates
    g = torch.full((L, H), 0.5, dtype=torch.float64)
    with head_gates(model, g, "uniform"):
        ref = model(**batch)
    torch.testing.assert_close(lean_loss(model, batch, g, "uniform")[1], ref.logits, rtol=0, atol=1e-12)


def test_float32_agrees_and_a_batch_without_padding_works():
    model = tiny_model()
    enc = make_enc()
    same = Encoded(input_ids=[x[:5] + [3] for x in enc.input_ids if len(x) >= 6], token_type_ids=None,
                   labels=enc.labels[[len(x) >= 6 for x in enc.input_ids]], pad_id=0)
    for batch in (batch_of(enc), batch_of(same)):
        ref = model(**batch)
        torch.testing.assert_close(lean_loss(model, batch)[1], ref.logits, rtol=1e-5, atol=1e-5)


def test_dropout_is_applied_in_training_mode():
    model = tiny_model(dtype=torch.float64, hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3).train()
    batch = batch_of(make_enc())
    torch.manual_seed(0)
    a = lean_loss(model, batch)[1]
    torch.manual_seed(1)
    b = lean_loss(model, batch)[1]
    torch.manual_seed(0)
    c = lean_loss(model, batch)[1]
    assert not torch.allclose(a, b) and torch.equal(a, c)
    model.eval()
    torch.testing.assert_close(lean_loss(model, batch)[1], model(**batch).logits, rtol=0, atol=1e-12)


def test_unsupported_models_and_inputs_are_named():
    model = tiny_model()
    handle = model.bert.encoder.layer[0].attention.output.dense.register_forward_pre_hook(lambda m, a: None)
    assert "hook" in unsupported_reason(model)
    handle.remove()
    assert unsupported_reason(model) is None
    assert unsupported_reason(tiny_model("distilbert")) is not None  # no pooler, another layer layout
    batch = batch_of(make_enc())
    left = {k: (v.flip(1) if v.dim() == 2 else v) for k, v in batch.items()}  # left padding
    with pytest.raises(ValueError, match="padding"):
        lean_loss(model, left)


def enc_for_training(n=40, seed=0):
    return make_enc(n=n, seed=seed)


def test_finetune_lean_follows_the_plain_run_without_dropout_and_is_deterministic():
    cfg = training.TrainConfig(epochs=2, batch_size=8, lr=1e-3)
    lean_cfg = training.TrainConfig(epochs=2, batch_size=8, lr=1e-3, lean=True)
    tr, dev = enc_for_training(), make_enc(n=12, seed=5)
    g = torch.ones(L, H)
    g[1, :3] = 0.0
    runs = {}
    for name, c in (("plain", cfg), ("lean", lean_cfg), ("lean again", lean_cfg)):
        model = tiny_model()
        hist = training.finetune(model, tr, "MNLI", c, seed=3, dev=dev, gates=g, ablation="uniform", progress=False)
        runs[name] = (hist, model)
    for key in ("train_loss", "dev_accuracy"):
        assert [r[key] for r in runs["lean"][0]] == pytest.approx([r[key] for r in runs["plain"][0]], abs=1e-5)
        assert [r[key] for r in runs["lean"][0]] == [r[key] for r in runs["lean again"][0]]
    for (n1, p1), (n2, p2) in zip(runs["plain"][1].named_parameters(), runs["lean"][1].named_parameters()):
        torch.testing.assert_close(p2, p1, rtol=1e-4, atol=1e-5, msg=n1)


def test_finetune_lean_on_an_unsupported_model_warns_and_trains_the_plain_way():
    model = tiny_model("distilbert")
    before = [p.detach().clone() for p in model.parameters()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        training.finetune(model, enc_for_training(), "MNLI", training.TrainConfig(epochs=1, batch_size=8, lean=True),
                          seed=0, progress=False)
    assert any("TrainConfig.lean" in str(w.message) for w in caught)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_lean_training_changes_the_model_cache_key_only_when_on():
    from headprune_utils.studies.glue_workbench import GlueStudyConfig, result_params, training_fingerprint

    off, on = GlueStudyConfig(), GlueStudyConfig(lean_training=True)
    cpu = torch.device("cpu")
    assert "lean_training" not in result_params(off, cpu, 1)
    assert result_params(on, cpu, 1)["lean_training"] is True
    assert training_fingerprint(off, cpu) != training_fingerprint(on, cpu)
    assert training.TrainConfig().lean is False


def test_bf16_autocast_agrees_within_bf16_rounding():
    """The CUDA training path autocasts to bf16 (precision.py); the lean loss must run and agree there too
    (checked with the CPU's bf16 autocast: the same dtype rules)."""
    model = tiny_model()
    batch = batch_of(make_enc(seed=4))
    g = torch.full((L, H), 0.5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with head_gates(model, g, "uniform"):
            ref = model(**batch)
        loss, logits = lean_loss(model, batch, g, "uniform")
    assert logits.dtype == ref.logits.dtype
    torch.testing.assert_close(logits.float(), ref.logits.float(), rtol=0.05, atol=0.05)
    torch.testing.assert_close(loss.float(), ref.loss.float(), rtol=0.05, atol=0.05)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_cuda_in_float32_and_under_bf16_autocast():
    model = tiny_model().cuda()
    batch = {k: v.cuda() for k, v in batch_of(make_enc(seed=6)).items()}
    g = torch.full((L, H), 0.5, device="cuda")
    with head_gates(model, g, "uniform"):
        ref = model(**batch).logits
    torch.testing.assert_close(lean_loss(model, batch, g, "uniform")[1], ref, rtol=1e-4, atol=1e-4)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        with head_gates(model, g, "uniform"):
            ref = model(**batch).logits
        logits = lean_loss(model, batch, g, "uniform")[1]
    torch.testing.assert_close(logits.float(), ref.float(), rtol=0.05, atol=0.05)


def test_hugging_faces_output_recording_hooks_leave_the_lean_loss_exact():
    """After a forward with output_attentions (HF installs its recording hooks on the attention modules), and after
    pruning a layer to empty (the replacement gets them too), the lean loss still applies and equals the model's."""
    model = tiny_model(dtype=torch.float64)
    batch = batch_of(make_enc(seed=2))
    with torch.no_grad():
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_attentions=True)
    assert unsupported_reason(model) is None
    mask = torch.ones(L, H)
    mask[1] = 0  # no head left in layer 1
    prune_heads(model, mask)
    assert unsupported_reason(model) is None
    ref = model(**batch)
    torch.testing.assert_close(lean_loss(model, batch)[1], ref.logits, rtol=0, atol=1e-12)
