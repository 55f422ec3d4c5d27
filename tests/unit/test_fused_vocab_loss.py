"""The fused vocabulary loss (``fused_vocab_loss``) against independent computations: autograd through the plain
logits and ``cross_entropy(label_smoothing=...)``, finite differences in float64, and a translation training with it
against one without."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from headprune_utils.studies.nmt_heads_config import NMTHeadsConfig
from headprune_utils.studies.config import ParameterError
from headprune_utils.tasks.subword import train_tokenizer
from headprune_utils.train.fused_vocab_loss import fused_label_smoothed_loss, seq2seq_lm_head
from headprune_utils.train.translation import NMTTrainConfig, encode_pairs, label_smoothed_loss, train_translation
from headprune_utils.model.translation_model import NMTModelConfig, build_translation_model
from headprune_utils.tasks.translation_data import ParallelData

SRC = ["a man rides a red bike .", "two dogs play in the snow .", "a woman is reading a book !",
       "the children run , and laugh .", "a man in a red hat sings .", "two women walk on the beach ."]
TGT = ["ein Mann fährt ein rotes Fahrrad .", "zwei Hunde spielen im Schnee .", "eine Frau liest ein Buch !",
       "die Kinder rennen und lachen .", "ein Mann mit rotem Hut singt .", "zwei Frauen gehen am Strand ."]


def problem(dtype=torch.float32, batch=5, length=7, d=16, vocab=50, seed=0, bias=True):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(batch, length, d, generator=g, dtype=dtype)
    w = torch.randn(vocab, d, generator=g, dtype=dtype) * 0.5
    b = torch.randn(1, vocab, generator=g, dtype=dtype) if bias else None
    y = torch.randint(0, vocab, (batch, length), generator=g)
    y[0, 2:] = -100  # padding, as collate_pairs leaves it
    y[-1, length - 1:] = -100
    return h, w, b, y


def plain(h, w, b, y, smoothing):
    """The whole logits, then PyTorch's label-smoothed cross-entropy (in the inputs' precision), mean per token."""
    logits = h @ w.t() + (b if b is not None else 0)
    n = int((y != -100).sum())
    total = nn.functional.cross_entropy(logits.reshape(-1, w.shape[0]), y.reshape(-1), ignore_index=-100,
                                        label_smoothing=smoothing, reduction="sum")
    return total / n, None, n


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("chunk_rows", [1, 4, 64, 1000])
@pytest.mark.parametrize("bias", [True, False])
def test_the_loss_and_its_gradients_are_the_plain_computations(smoothing, chunk_rows, bias):
    """Loss, d/dhidden, d/dweight and d/dbias equal autograd through the whole logits and PyTorch's label-smoothed
    cross-entropy (float64: to 1e-12), whatever the block size, padding dropped."""
    h, w, b, y = problem(torch.float64, bias=bias)
    b = b.requires_grad_() if b is not None else None
    leaves = [t.clone().requires_grad_() for t in (h, w)] + ([b.detach().clone().requires_grad_()] if bias else [])
    ref, _, n_ref = plain(*leaves[:2], leaves[2] if bias else None, y, smoothing)
    ref.backward()
    mine = [t.detach().clone().requires_grad_() for t in leaves]
    got, nll, n = fused_label_smoothed_loss(mine[0], mine[1], mine[2] if bias else None, y, smoothing,
                                            chunk_rows=chunk_rows)
    (got * 3.0).backward()  # the incoming gradient scales what the forward pass computed
    assert nll is None and n == n_ref == int((y != -100).sum())
    assert got.item() == pytest.approx(ref.item(), rel=1e-12)
    for a, r in zip(mine, leaves):
        torch.testing.assert_close(a.grad, 3.0 * r.grad, rtol=1e-10, atol=1e-12)


def test_float32_matches_the_plain_loss_to_rounding_and_padding_gets_no_gradient():
    h, w, b, y = problem(torch.float32, d=128, vocab=600, batch=9, length=11)
    hp, wp = h.clone().requires_grad_(), w.clone().requires_grad_()
    ref = label_smoothed_loss(hp @ wp.t() + b, y, 0.1, nll=False)[0]  # the training's own loss on the logits
    ref.backward()
    hf, wf = h.clone().requires_grad_(), w.clone().requires_grad_()
    got = fused_label_smoothed_loss(hf, wf, b, y, 0.1)[0]
    got.backward()
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(hf.grad, hp.grad, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(wf.grad, wp.grad, rtol=1e-4, atol=1e-7)
    assert hf.grad[y == -100].abs().sum() == 0


def test_finite_differences_agree_in_float64():
    h, w, b, y = problem(torch.float64, batch=3, length=3, d=4, vocab=7, bias=True)
    h, w, b = (t.requires_grad_() for t in (h, w, b))
    assert torch.autograd.gradcheck(lambda h, w, b: fused_label_smoothed_loss(h, w, b, y, 0.1, chunk_rows=2)[0],
                                    (h, w, b))


def test_bad_inputs_are_named():
    h, w, b, y = problem()
    with pytest.raises(ValueError, match="chunk_rows"):
        fused_label_smoothed_loss(h, w, b, y, 0.1, chunk_rows=0)
    with pytest.raises(ValueError, match="smoothing"):
        fused_label_smoothed_loss(h, w, b, y, 1.0)
    with pytest.raises(ValueError, match="labels"):
        fused_label_smoothed_loss(h, w, b, y[:, :-1], 0.1)
    with pytest.raises(ValueError, match="weight"):
        fused_label_smoothed_loss(h, w[:, :-1], b, y, 0.1)
    with pytest.raises(ValueError, match="bias"):
        fused_label_smoothed_loss(h, w, b[:, :-1], y, 0.1)
    bad = y.clone()
    bad[1, 1] = w.shape[0]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        fused_label_smoothed_loss(h, w, b, bad, 0.1)
    with pytest.raises(ValueError, match="output projection"):
        seq2seq_lm_head(nn.Linear(3, 3))


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(SRC + TGT, vocab_size=200)


def test_a_training_with_the_fused_loss_follows_the_plain_one(tok):
    """The same model, data and seed trained with and without ``fused_loss``: dropout draws the same masks (the
    model's forward is the same), so the two stay within float rounding of each other step after step."""
    enc = encode_pairs(tok, ParallelData("toy", "train", "en", "de", SRC, TGT, "test"))
    model_cfg = NMTModelConfig(encoder_layers=2, decoder_layers=2, heads=4, d_model=32, ffn_dim=64, dropout=0.2,
                               max_positions=64)
    runs = {}
    for fused in (False, True):
        cfg = NMTTrainConfig(max_steps=8, batch_size=2, lr=1e-3, warmup_steps=2, eval_every=4, label_smoothing=0.1,
                             fused_loss=fused)
        model = build_translation_model(model_cfg, tok, seed=2)
        runs[fused] = (train_translation(model, enc, enc, cfg, seed=4, progress=False), model)
    (plain_res, plain_model), (fused_res, fused_model) = runs[False], runs[True]
    a = [h["train_loss"] for h in plain_res.history]
    b = [h["train_loss"] for h in fused_res.history]
    assert b == pytest.approx(a, rel=1e-4)
    assert [h["dev_loss"] for h in fused_res.history] == pytest.approx([h["dev_loss"] for h in plain_res.history],
                                                                        rel=1e-4)
    # the key projections' biases have no gradient in exact arithmetic (a softmax ignores a score added to every
    # key), so Adam turns their gradients' rounding noise into steps of about lr either way: not compared
    compared = 0
    for (name, p), q in zip(plain_model.named_parameters(), fused_model.parameters()):
        if not name.endswith("k_proj.bias"):
            torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
            compared += 1
    assert compared > 30
    assert any(not torch.equal(p, q) for p, q in zip(plain_model.parameters(), fused_model.parameters())), \
        "the fused loss rounds differently: not the plain path run twice"


def test_one_step_of_a_model_gives_every_parameter_the_plain_gradient(tok):
    """A Marian model's step, both ways, from the same weights and random state (dropout on): the loss and every
    parameter's gradient (the tied embedding and output projection included) equal the plain path's, to float32
    rounding; a gradient wrong by a constant factor (which clipping and Adam would hide from a training) fails."""
    from headprune_utils.train.translation import collate_pairs

    enc = encode_pairs(tok, ParallelData("toy", "train", "en", "de", SRC, TGT, "test"))
    batch = collate_pairs(enc, list(range(len(SRC))))
    model = build_translation_model(NMTModelConfig(encoder_layers=2, decoder_layers=2, heads=4, d_model=32,
                                                   ffn_dim=64, dropout=0.2, max_positions=64), tok, seed=3).train()
    with torch.no_grad():
        model.final_logits_bias.normal_()  # a bias that is not zero, to see it used
    grads, losses = [], []
    for fused in (False, True):
        model.zero_grad()
        torch.manual_seed(7)
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        if fused:
            w, b = seq2seq_lm_head(model)
            loss = fused_label_smoothed_loss(model.model(**inputs, use_cache=False)[0], w, b, batch["labels"], 0.1)[0]
        else:
            loss = label_smoothed_loss(model(**inputs).logits, batch["labels"], 0.1, nll=False)[0]
        loss.backward()
        losses.append(loss.item())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert losses[1] == pytest.approx(losses[0], rel=1e-6)
    assert grads[0].keys() == grads[1].keys() and "model.shared.weight" in grads[1]
    for name, g in grads[0].items():
        if not name.endswith("k_proj.bias"):  # zero in exact arithmetic: rounding noise only
            torch.testing.assert_close(grads[1][name], g, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_no_gradient_work_without_grad_mode_and_no_second_derivative():
    h, w, b, y = problem()
    w = w.requires_grad_()
    with torch.no_grad():
        loss = fused_label_smoothed_loss(h, w, b, y, 0.1)[0]
    assert not loss.requires_grad
    assert loss.item() == pytest.approx(plain(h, w.detach(), b, y, 0.1)[0].item(), rel=1e-6)
    h = h.clone().requires_grad_()
    loss = fused_label_smoothed_loss(h, w, b, y, 0.1)[0]
    (g,) = torch.autograd.grad(loss, h, create_graph=True)
    with pytest.raises(RuntimeError):
        g.sum().backward()


def test_the_setting_is_in_a_trainings_identity_only_when_on():
    """Off, the settings (a model's key, a checkpoint's identity) are what they were before the option existed;
    on, they differ. The study's config validates it and passes it to both the full models and the retrainings."""
    assert "fused_loss" not in NMTTrainConfig().as_dict()
    on = NMTTrainConfig(fused_loss=True).as_dict()
    assert on["fused_loss"] is True and on["fused_chunk_rows"] == 64  # the block size: part of the numerics
    with pytest.raises(ValueError, match="fused_loss"):
        NMTTrainConfig(fused_loss="yes").check()
    cfg = NMTHeadsConfig(fused_loss=True, retrain_patience=2, retrain_max_steps=10)
    assert cfg.train_config().fused_loss and cfg.retrain_config().fused_loss
    assert NMTHeadsConfig(fused_loss=True).retrain_config().fused_loss  # the fixed regime too
    with pytest.raises(ParameterError, match="fused_loss"):
        NMTHeadsConfig(fused_loss=1).check()
