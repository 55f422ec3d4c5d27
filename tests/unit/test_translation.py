"""The translation track's pieces on tiny inputs: tokenizer round trip, model, batching, loss, training,
decoding under gates, BLEU/chrF against sacrebleu."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from headprune_utils.model.architecture import head_shape
from headprune_utils.model.gates import head_gates
from headprune_utils.model.pruning import prune_heads
from headprune_utils.tasks.subword import train_tokenizer
from headprune_utils.train.translation import (
    CHECKPOINT_KEYS, NMTTrainConfig, TranslationTrainingState, collate_pairs, dev_loss, encode_pairs,
    evaluate_translation, inverse_sqrt_schedule, label_smoothed_loss, token_batches, train_translation, translate,
)
from headprune_utils.tasks.translation_data import ParallelData
from headprune_utils.tasks.translation_metrics import corpus_bleu, corpus_chrf, translation_scores
from headprune_utils.model.translation_model import (
    NMTModelConfig, build_translation_model, load_translation_model, save_translation_model, transformer_base,
)

SRC = ["a man rides a red bike .", "two dogs play in the snow .", "a woman is reading a book !",
       "the children run , and laugh .", "a man in a red hat sings .", "two women walk on the beach ."]
TGT = ["ein Mann fährt ein rotes Fahrrad .", "zwei Hunde spielen im Schnee .", "eine Frau liest ein Buch !",
       "die Kinder rennen und lachen .", "ein Mann mit rotem Hut singt .", "zwei Frauen gehen am Strand ."]
TINY = NMTModelConfig(encoder_layers=2, decoder_layers=2, heads=4, d_model=32, ffn_dim=64, dropout=0.0,
                      max_positions=64)


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(SRC + TGT, vocab_size=200)


def pairs(n: int | None = None) -> ParallelData:
    return ParallelData("toy", "train", "en", "de", SRC[:n], TGT[:n], "test")


@pytest.mark.parametrize("model", ["bpe", "unigram"])
def test_tokenizer_round_trip_gives_back_the_text(model):
    texts = SRC + TGT + ["Größe, Straße: «Ünïcödé»  two  spaces; x.y (z)"]
    tok = train_tokenizer(texts, vocab_size=150, model=model)
    assert tok.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    for text in texts:
        ids = tok(text).input_ids
        assert ids[-1] == tok.eos_token_id
        assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok.decode(tok("a man €").input_ids, skip_special_tokens=True) == "a man "  # unseen character: <unk>


def test_tokenizer_saves_and_loads_with_the_model(tmp_path, tok):
    model = build_translation_model(TINY, tok, seed=0)
    save_translation_model(model, tok, tmp_path / "m", meta={"corpus": "toy"})
    model2, tok2, meta = load_translation_model(tmp_path / "m")
    assert meta == {"corpus": "toy"}
    assert tok2(SRC[0]).input_ids == tok(SRC[0]).input_ids
    batch = collate_pairs(encode_pairs(tok, pairs()), np.arange(6))
    batch.pop("labels")
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, model2(**batch).logits)
    pruned = build_translation_model(TINY, tok)
    prune_heads(pruned, {"enc": torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1]])})
    with pytest.raises(ValueError, match="physically pruned"):
        save_translation_model(pruned, tok, tmp_path / "p")


def test_model_layout_and_shared_embeddings(tok):
    model = build_translation_model(TINY, tok, seed=0)
    assert head_shape(model) == {"enc": (2, 4), "dec": (2, 4), "cross": (2, 4)}
    shared = model.model.shared.weight
    assert model.lm_head.weight is shared and model.model.encoder.embed_tokens.weight is shared
    assert model.config.vocab_size == len(tok) and model.config.decoder_start_token_id == tok.bos_token_id
    base = transformer_base()
    assert (base.encoder_layers, base.decoder_layers, base.heads, base.d_model, base.ffn_dim) == (6, 6, 8, 512, 2048)
    with pytest.raises(ValueError, match="divisible"):
        build_translation_model(NMTModelConfig(d_model=30, heads=4), tok)
    # same seed, same weights
    other = build_translation_model(TINY, tok, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))


def test_collate_shifts_targets_and_masks_padding(tok):
    enc = encode_pairs(tok, pairs())
    batch = collate_pairs(enc, np.array([0, 3]))
    for row, i in enumerate([0, 3]):
        src, tgt = enc.src_ids[i], enc.tgt_ids[i]
        assert batch["input_ids"][row, : len(src)].tolist() == src and src[-1] == tok.eos_token_id
        assert batch["attention_mask"][row].sum() == len(src)
        assert batch["labels"][row, : len(tgt)].tolist() == tgt
        assert bool((batch["labels"][row, len(tgt):] == -100).all())
        assert batch["decoder_input_ids"][row, : len(tgt)].tolist() == [tok.bos_token_id] + tgt[:-1]


def test_long_pairs_truncated_or_dropped(tok):
    long = ParallelData("toy", "train", "en", "de", [SRC[0], " ".join(SRC)], [TGT[0], TGT[1]], "test")
    n = max(len(tok(SRC[0]).input_ids), len(tok(TGT[1]).input_ids))
    cut = encode_pairs(tok, long, max_length=n)
    assert len(cut) == 2 and len(cut.src_ids[1]) == n and cut.src_ids[1][-1] == tok.eos_token_id
    kept = encode_pairs(tok, long, max_length=n, drop_longer=True)
    assert len(kept) == 1 and kept.n_dropped == 1 and kept.src_ids[0] == cut.src_ids[0]


def test_token_batches_respect_the_budget_and_cover_every_pair():
    lengths = np.random.default_rng(0).integers(3, 40, size=500)
    batches = token_batches(lengths, max_tokens=200, seed=1, max_sentences=16)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(500))
    assert all(len(b) * lengths[b].max() <= 200 and len(b) <= 16 for b in batches)
    assert [b.tolist() for b in token_batches(lengths, 200, seed=1, max_sentences=16)] == [b.tolist() for b in batches]
    with pytest.raises(ValueError, match="below the longest"):
        token_batches(lengths, max_tokens=20, seed=0)


def test_label_smoothed_loss_by_hand():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5)
    labels = torch.tensor([[1, 4, -100], [0, -100, -100]])
    loss, nll, n = label_smoothed_loss(logits, labels, smoothing=0.1)
    logp = torch.log_softmax(logits, -1)
    picks = [(0, 0, 1), (0, 1, 4), (1, 0, 0)]
    hand_nll = -sum(logp[b, t, c] for b, t, c in picks)
    hand = sum(-(0.9 * logp[b, t, c] + 0.1 * logp[b, t].mean()) for b, t, c in picks) / 3
    assert n == 3 and math.isclose(float(nll), float(hand_nll), rel_tol=1e-6)
    assert math.isclose(float(loss), float(hand), rel_tol=1e-6)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_label_smoothed_loss_skips_the_nll_without_changing_the_loss(smoothing):
    """A training step asks for no NLL (``nll=False``): the loss and its gradient are the same bits as with it, and
    without smoothing the NLL is the loss's own sum (one log-softmax), the same bits as a separate computation."""
    torch.manual_seed(1)
    logits = torch.randn(3, 4, 7, requires_grad=True)
    labels = torch.tensor([[1, 4, -100, 2], [0, -100, -100, 6], [3, 3, 5, -100]])
    loss, nll, n = label_smoothed_loss(logits, labels, smoothing)
    (grad,) = torch.autograd.grad(loss, logits)
    lean, none, n2 = label_smoothed_loss(logits, labels, smoothing, nll=False)
    (lean_grad,) = torch.autograd.grad(lean, logits)
    assert none is None and n2 == n == 8
    assert torch.equal(lean, loss) and torch.equal(lean_grad, grad)
    separate = torch.nn.functional.cross_entropy(logits.detach().reshape(-1, 7), labels.reshape(-1),
                                                 ignore_index=-100, reduction="sum")
    assert torch.equal(nll, separate) and not nll.requires_grad


def test_training_without_the_nll_gives_the_same_model(monkeypatch, tok):
    """The training steps skip the NLL; forcing it back on (the way before) trains the same weights, bit for bit."""
    import headprune_utils.train.translation as tr

    enc = encode_pairs(tok, pairs())
    cfg = NMTTrainConfig(max_steps=6, batch_size=2, lr=1e-3, warmup_steps=2, eval_every=3, label_smoothing=0.1)
    drop = NMTModelConfig(**{**TINY.as_dict(), "dropout": 0.2})
    lean = build_translation_model(drop, tok, seed=2)
    train_translation(lean, enc, enc, cfg, seed=4, progress=False)
    real, asked = tr.label_smoothed_loss, []

    def always_nll(logits, labels, smoothing=0.0, nll=True):
        asked.append(nll)
        return real(logits, labels, smoothing, nll=True)

    monkeypatch.setattr(tr, "label_smoothed_loss", always_nll)
    old = build_translation_model(drop, tok, seed=2)
    train_translation(old, enc, enc, cfg, seed=4, progress=False)
    assert asked.count(False) == 6  # every training step asked for none
    assert all(torch.equal(a, b) for a, b in zip(lean.parameters(), old.parameters()))


def test_min_delta_stops_a_creeping_training_sooner_and_keeps_the_lowest_loss(monkeypatch, tok):
    """Patience counts evaluations since the last improvement by more than min_delta: dev losses that creep down by
    thousandths stop a run with min_delta at its patience, while the strict rule (0) trains to the cap; both keep
    the weights of the lowest dev loss. Without min_delta the settings (model keys, checkpoint identities) are those
    of before the field existed."""
    import headprune_utils.train.translation as tr

    enc = encode_pairs(tok, pairs())
    runs = {}
    for delta in (0.0, 0.01):
        losses = iter([3.0, 2.5, 2.499, 2.498, 2.497, 2.496, 2.495, 2.494, 2.493, 2.492])
        monkeypatch.setattr(tr, "dev_loss", lambda *a, **k: next(losses))
        cfg = NMTTrainConfig(max_steps=10, batch_size=2, lr=1e-3, warmup_steps=2, eval_every=1, patience=3,
                             min_delta=delta)
        runs[delta] = train_translation(build_translation_model(TINY, tok, seed=0), enc, enc, cfg, seed=0,
                                        progress=False)
    strict, lenient = runs[0.0], runs[0.01]
    assert (strict.steps, strict.stopped, strict.best_step) == (10, "max_steps", 10)
    assert (lenient.steps, lenient.stopped) == (5, "patience")  # 2.5 at step 2, then 3 evaluations within 0.01
    assert lenient.best_step == 5 and lenient.best_dev_loss == 2.497  # the lowest loss's weights, not step 2's
    # the analysis judges the stored histories by the same rule: the stop at the plateau, the strict run not there
    from headprune_utils.analysis.preconditions import plateau
    assert plateau(lenient.history, 3, 0.01) is None and plateau(strict.history, 3) is not None
    assert "min_delta" not in NMTTrainConfig().as_dict() and NMTTrainConfig(min_delta=0.1).as_dict()["min_delta"] == 0.1
    for bad in (-0.1, float("inf"), True):
        with pytest.raises(ValueError, match="min_delta"):
            NMTTrainConfig(min_delta=bad, patience=2).check()
    with pytest.raises(ValueError, match="min_delta.*patience"):
        NMTTrainConfig(min_delta=0.1).check()


def test_inverse_sqrt_schedule():
    assert inverse_sqrt_schedule(0, 10) == pytest.approx(0.1)
    assert inverse_sqrt_schedule(9, 10) == pytest.approx(1.0)
    assert inverse_sqrt_schedule(39, 10) == pytest.approx(0.5)
    assert inverse_sqrt_schedule(5, 0) == 1.0


def test_tiny_model_overfits_a_handful_of_pairs_and_translates_them(tok):
    model = build_translation_model(TINY, tok, seed=0)
    enc = encode_pairs(tok, pairs())
    before = dev_loss(model, enc)
    cfg = NMTTrainConfig(max_steps=150, batch_size=6, lr=3e-3, warmup_steps=10, label_smoothing=0.0,
                         eval_every=50, patience=None)
    result = train_translation(model, enc, enc, cfg, seed=0, progress=False)
    assert result.steps == 150 and [r["step"] for r in result.history] == [50, 100, 150]
    assert result.best_dev_loss < 0.1 * before
    assert dev_loss(model, enc) == pytest.approx(result.best_dev_loss)  # the best weights are restored
    scores = evaluate_translation(model, tok, pairs())
    assert scores["hypotheses"] == TGT and scores["bleu"] == pytest.approx(100.0)
    assert scores["chrf"] == pytest.approx(100.0) and scores["n"] == 6


def test_training_is_deterministic_and_stops_early(tok):
    enc = encode_pairs(tok, pairs())
    cfg = NMTTrainConfig(max_steps=12, batch_size=4, lr=1e-3, warmup_steps=4, eval_every=3, patience=1)
    runs = []
    for _ in range(2):
        model = build_translation_model(TINY, tok, seed=1)
        runs.append((train_translation(model, enc, enc, cfg, seed=3, progress=False), model))
    assert [r["train_loss"] for r in runs[0][0].history] == [r["train_loss"] for r in runs[1][0].history]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1].parameters(), runs[1][1].parameters()))
    # a learning rate far too high makes the dev loss worse after the first evaluation: patience stops it
    model = build_translation_model(TINY, tok, seed=1)
    bad = NMTTrainConfig(max_steps=200, batch_size=6, lr=5.0, warmup_steps=1, eval_every=2, patience=2,
                         max_grad_norm=0.0)
    result = train_translation(model, enc, enc, bad, seed=0, progress=False)
    assert result.stopped == "patience" and result.steps < 200


class Interrupt(Exception):
    pass


@pytest.mark.parametrize("stop_at", [5, 8, 13])  # steps; 3 batches an epoch: mid-epoch, at an epoch's end, later
def test_an_interrupted_training_resumes_from_its_checkpoint_to_the_same_weights(tok, tmp_path, monkeypatch, stop_at):
    """A process killed mid-training (here: an exception at step ``stop_at``) leaves a checkpoint of its last
    evaluation; the next call resumes from it and ends with the weights, history and best step of an
    uninterrupted run, bit for bit (dropout on, so the random stream must be restored too)."""
    import headprune_utils.train.translation as tr

    drop = NMTModelConfig(**{**TINY.as_dict(), "dropout": 0.2})
    enc = encode_pairs(tok, pairs())
    cfg = NMTTrainConfig(max_steps=16, batch_size=2, lr=1e-3, warmup_steps=4, eval_every=2, patience=None)
    ref_model = build_translation_model(drop, tok, seed=1)
    ref = train_translation(ref_model, enc, enc, cfg, seed=3, progress=False)

    ck = tmp_path / "train.ckpt"
    real_loss, calls = tr.label_smoothed_loss, {"n": 0}

    def dying_loss(*args, **kwargs):
        calls["n"] += torch.is_grad_enabled()  # training steps only (the dev losses run without grad)
        if calls["n"] == stop_at:
            raise Interrupt
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(tr, "label_smoothed_loss", dying_loss)
    with pytest.raises(Interrupt):
        train_translation(build_translation_model(drop, tok, seed=1), enc, enc, cfg, seed=3, progress=False,
                          checkpoint=ck)
    monkeypatch.setattr(tr, "label_smoothed_loss", real_loss)
    saved = torch.load(ck, weights_only=False)
    assert saved["step"] == 2 * ((stop_at - 1) // 2) and saved["step"] > 0
    assert saved["batch_pos"] == {5: 1, 8: 3, 13: 3}[stop_at]  # 3 batches an epoch: resumed mid-epoch, or at its end
    model = build_translation_model(drop, tok, seed=1)  # a fresh process: new weights, resumed from the file
    res = train_translation(model, enc, enc, cfg, seed=3, progress=False, checkpoint=ck)
    assert res.steps == ref.steps and res.best_step == ref.best_step
    assert [r["train_loss"] for r in res.history] == [r["train_loss"] for r in ref.history]
    assert [r["dev_loss"] for r in res.history] == [r["dev_loss"] for r in ref.history]
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ref_model.parameters()))
    assert not list(tmp_path.glob(".*.tmp")), "checkpoints are written atomically"


def test_a_checkpoint_of_another_training_is_refused(tok, tmp_path):
    enc = encode_pairs(tok, pairs())
    cfg = NMTTrainConfig(max_steps=6, batch_size=2, lr=1e-3, warmup_steps=2, eval_every=2, patience=None)
    ck = tmp_path / "train.ckpt"
    # a run that ends leaves its last checkpoint (the caller removes it once the model is stored)
    train_translation(build_translation_model(TINY, tok, seed=1), enc, enc, cfg, seed=3, progress=False, checkpoint=ck)
    assert ck.exists()
    other = NMTTrainConfig(**{**cfg.as_dict(), "lr": 2e-3})
    with pytest.raises(ValueError, match="another training"):
        train_translation(build_translation_model(TINY, tok, seed=1), enc, enc, other, seed=3, progress=False,
                          checkpoint=ck)
    with pytest.raises(ValueError, match="another training"):
        train_translation(build_translation_model(TINY, tok, seed=1), enc, enc, cfg, seed=4, progress=False,
                          checkpoint=ck)
    ck.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="unreadable"):
        train_translation(build_translation_model(TINY, tok, seed=1), enc, enc, cfg, seed=3, progress=False,
                          checkpoint=ck)
    with pytest.raises(ValueError, match="max_seconds"):
        train_translation(build_translation_model(TINY, tok, seed=1), enc, enc,
                          NMTTrainConfig(**{**cfg.as_dict(), "max_seconds": 5.0}), seed=3, checkpoint=ck)


def test_a_checkpoint_of_another_machine_kind_is_set_aside_and_training_starts_again(tok, tmp_path, monkeypatch):
    """A translation model trained across sessions on machines of two kinds would mix their roundings in one
    model: a checkpoint written on another kind is moved aside with a warning and the training starts again,
    ending with the weights of an uninterrupted run on this kind."""
    import warnings

    import headprune_utils.train.translation as tr

    drop = NMTModelConfig(**{**TINY.as_dict(), "dropout": 0.2})
    enc = encode_pairs(tok, pairs())
    cfg = NMTTrainConfig(max_steps=8, batch_size=2, lr=1e-3, warmup_steps=2, eval_every=2, patience=None)
    ref_model = build_translation_model(drop, tok, seed=1)
    ref = train_translation(ref_model, enc, enc, cfg, seed=3, progress=False)
    ck = tmp_path / "train.ckpt"
    real_loss, calls = tr.label_smoothed_loss, {"n": 0}

    def dying_loss(*args, **kwargs):
        calls["n"] += torch.is_grad_enabled()
        if calls["n"] == 5:
            raise Interrupt
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(tr, "label_smoothed_loss", dying_loss)
    with pytest.raises(Interrupt):
        train_translation(build_translation_model(drop, tok, seed=1), enc, enc, cfg, seed=3, progress=False,
                          checkpoint=ck, machine="cpu: kind A")
    monkeypatch.setattr(tr, "label_smoothed_loss", real_loss)
    assert torch.load(ck, weights_only=False)["runtime"]["machine"] == "cpu: kind A"
    model = build_translation_model(drop, tok, seed=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = train_translation(model, enc, enc, cfg, seed=3, progress=False, checkpoint=ck, machine="cpu: kind B")
    said = " ".join(str(w.message) for w in caught)
    assert "machine cpu: kind A (now cpu: kind B)" in said
    assert (tmp_path / "train.ckpt.other-machine").exists()
    assert [r["dev_loss"] for r in res.history] == [r["dev_loss"] for r in ref.history]
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ref_model.parameters()))
    # the same kind resumes: the checkpoint the second run left (kind B) is this one's
    assert torch.load(ck, weights_only=False)["runtime"]["machine"] == "cpu: kind B"


def _stepped(seed: int):
    """A small model and its optimizer and schedule after one step: states worth saving."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Dropout(0.5), torch.nn.Linear(3, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: inverse_sqrt_schedule(s, 3))
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return model, opt, sched


def test_the_training_state_round_trips_through_its_checkpoint_file(tmp_path):
    model, opt, sched = _stepped(0)
    state = TranslationTrainingState(
        {"seed": 3}, step=7, epoch=2, batch_pos=1, losses=[0.5, 0.25], tokens=123, bad_evals=1,
        best_state={k: v.clone() for k, v in model.state_dict().items()},
        history=[{"step": 6, "epoch": 2, "train_loss": 0.75, "lr": 1e-3, "seconds": 0.1, "tokens": 100,
                  "dev_loss": 1.5}], best_step=6, best_dev_loss=1.5)
    state.started -= 40.0  # 40 s of earlier sessions
    ck = tmp_path / "sub" / "train.ckpt"
    state.save(ck, model, opt, sched)
    after_save = torch.rand(3)  # the random stream goes on from the saved state
    # the on-disk layout: the keys checkpoints have always had, and the runtime that wrote it (training.runtime: the
    # kind of machine, None here, torch's threads and version; a file without it is set aside, not resumed)
    saved = torch.load(ck, weights_only=False)
    assert saved["runtime"] == {"machine": None, "torch_threads": torch.get_num_threads(), "torch": torch.__version__}
    assert set(saved) - {"runtime"} == CHECKPOINT_KEYS == {
        "identity", "model", "optimizer", "scheduler", "step", "epoch", "batch_pos", "losses", "tokens", "bad_evals",
        "best_state", "history", "best_step", "best_dev_loss", "seconds", "rng_cpu", "rng_cuda"}
    assert saved["seconds"] >= 40.0

    model2, opt2, sched2 = _stepped(1)  # another process: other weights, optimizer state and random stream
    loaded = TranslationTrainingState.load(ck, {"seed": 3}, model2, opt2, sched2)
    for name in ("identity", "step", "epoch", "batch_pos", "losses", "tokens", "bad_evals", "history", "best_step",
                 "best_dev_loss"):
        assert getattr(loaded, name) == getattr(state, name), name
    assert all(torch.equal(loaded.best_state[k], v) for k, v in state.best_state.items())
    assert loaded.elapsed() >= 40.0  # the clock counts the earlier sessions
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), model2.state_dict().values()))
    assert sched2.state_dict() == sched.state_dict() and opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    for a, b in zip(opt.state.values(), opt2.state.values()):
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(torch.rand(3), after_save)


def test_the_training_state_is_written_atomically_and_refuses_what_it_cannot_resume(tmp_path, monkeypatch):
    model, opt, sched = _stepped(0)
    ck = tmp_path / "train.ckpt"
    TranslationTrainingState({"seed": 3}, step=2).save(ck, model, opt, sched)

    real_save = torch.save

    def dying_save(obj, f, *args, **kwargs):  # the disk fills up halfway through the file
        Path(f).write_bytes(b"half a checkpoint")
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(OSError, match="No space"):
        TranslationTrainingState({"seed": 3}, step=4).save(ck, model, opt, sched)
    monkeypatch.setattr(torch, "save", real_save)
    assert [p.name for p in tmp_path.iterdir()] == ["train.ckpt"], "no temporary file left behind"
    assert TranslationTrainingState.load(ck, {"seed": 3}, *_stepped(1)).step == 2  # the previous one, whole

    with pytest.raises(ValueError, match="another training"):
        TranslationTrainingState.load(ck, {"seed": 4}, *_stepped(1))
    incomplete = torch.load(ck, weights_only=False)
    del incomplete["rng_cpu"]
    torch.save(incomplete, ck)
    model2, opt2, sched2 = _stepped(1)
    before = [v.clone() for v in model2.state_dict().values()]
    with pytest.raises(ValueError, match="lacks rng_cpu"):
        TranslationTrainingState.load(ck, {"seed": 3}, model2, opt2, sched2)
    assert all(torch.equal(a, b) for a, b in zip(before, model2.state_dict().values())), "refused before restoring"
    torch.save(["not", "a", "dict"], ck)
    with pytest.raises(ValueError, match="another training"):
        TranslationTrainingState.load(ck, {"seed": 3}, *_stepped(1))


def test_generation_under_gates_runs_and_zero_gates_match_pruning(tok):
    model = build_translation_model(TINY, tok, seed=2)
    enc = encode_pairs(tok, pairs())
    train_translation(model, enc, None, NMTTrainConfig(max_steps=30, batch_size=6, lr=3e-3, warmup_steps=5),
                      progress=False)
    mask = {"enc": torch.tensor([[1., 0, 1, 1], [1, 1, 1, 0]]), "dec": torch.tensor([[0., 1, 1, 1], [1, 1, 0, 1]]),
            "cross": torch.tensor([[1., 1, 0, 0], [1, 0, 1, 1]])}
    plain = translate(model, tok, SRC, batch_size=4)
    gated = translate(model, tok, SRC, batch_size=4, gates=mask)
    assert len(gated) == 6 and all(isinstance(t, str) for t in gated)
    beams = translate(model, tok, SRC, batch_size=4, num_beams=3, gates=mask)
    assert len(beams) == 6
    ones = {k: torch.ones(2, 4) for k in mask}
    assert translate(model, tok, SRC, batch_size=4, gates=ones) == plain
    # the gated model and the pruned model decode alike (KV cache, batches of ragged length)
    with head_gates(model, mask):
        gated_loss = dev_loss(model, enc)
    prune_heads(model, mask)
    assert translate(model, tok, SRC, batch_size=4) == gated
    assert dev_loss(model, enc) == pytest.approx(gated_loss, abs=1e-5)
    # gates held during training: they are applied, and the trained weights differ from ungated training
    m1, m2 = build_translation_model(TINY, tok, seed=3), build_translation_model(TINY, tok, seed=3)
    cfg = NMTTrainConfig(max_steps=5, batch_size=6, warmup_steps=2)
    train_translation(m1, enc, None, cfg, progress=False)
    train_translation(m2, enc, None, cfg, gates=mask, progress=False)
    assert not all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))


def test_bleu_and_chrf_equal_sacrebleu_on_known_strings():
    import sacrebleu

    hyps = ["the cat sat on the mat", "a quick brown fox jumps over the lazy dog", "Hello, world!",
            "Das ist ein Test.", "Это тест."]
    refs = ["the cat sat on a mat", "the quick brown fox jumped over the lazy dog", "Hello world !",
            "Das ist kein Test.", "Это тест."]
    bleu, sig = corpus_bleu(hyps, refs)
    assert bleu == sacrebleu.corpus_bleu(hyps, [refs]).score and "tok:13a" in sig
    chrf, _ = corpus_chrf(hyps, refs)
    assert chrf == sacrebleu.corpus_chrf(hyps, [refs]).score
    # by hand: 1-4-gram precisions 5/6, 3/5, 2/4, 1/3, no brevity penalty: BLEU = (1/12) ** (1/4)
    assert corpus_bleu(["the cat sat on the mat"], ["the cat sat on a mat"])[0] == pytest.approx(100 * (1 / 12) ** 0.25)
    scores = translation_scores(refs, refs)
    assert scores["bleu"] == pytest.approx(100.0) and scores["chrf"] == pytest.approx(100.0) and scores["n"] == 5
    assert corpus_bleu(["x y z w"], ["a b c d"])[0] == 0.0
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_bleu(["a", "b"], ["a"])
    with pytest.raises(TypeError, match="strings"):
        corpus_chrf([["a"]], ["a"])
