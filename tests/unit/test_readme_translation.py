"""Failure cases for study 7 / machine translation, written from the README alone ("### Machine translation
(study 7)", the profiles' `nmt_heads` parameters and the runner's documented checks).

Project standard probed here: bad input gets a clear error naming the parameter or problem, before heavy work;
nothing silently wrong; non-finite numbers are errors, not results. Tiny models only (the README's 2+2-layer,
4-head, d_model 32 example); no hub access.
"""
from __future__ import annotations

import copy
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from headprune_utils.model.gates import head_gates
from headprune_utils.model.pruning import prune_heads
from headprune_utils.model.translation_model import NMTModelConfig, build_translation_model
from headprune_utils.studies.nmt_heads import NMTHeadsConfig
from headprune_utils.tasks.subword import train_tokenizer
from headprune_utils.tasks.translation_data import ParallelData
from headprune_utils.tasks.translation_metrics import corpus_bleu
from headprune_utils.train.translation import EncodedPairs, NMTTrainConfig, encode_pairs, train_translation, translate

REPO = Path(__file__).resolve().parents[2]

SOURCES = ["a man rides a bike .", "two dogs play in the snow ."]
REFERENCES = ["ein mann fährt fahrrad .", "zwei hunde spielen im schnee ."]
MORE_SRC = ["a dog runs .", "a man plays .", "two men ride bikes .", "the snow is white ."]
MORE_TGT = ["ein hund läuft .", "ein mann spielt .", "zwei männer fahren fahrrad .", "der schnee ist weiß ."]

# error types that mean "crashed somewhere inside", not "refused with a clear message"
CRASHES = (AttributeError, IndexError, KeyError, ZeroDivisionError, NameError, UnboundLocalError, AssertionError)


def _id(value) -> str:
    """Readable ids for the parametrized cases: the parameters as key=value, the pattern as 'err'."""
    return ",".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else "err"


def refused(fn, pattern: str):
    """Call fn; it must raise a clear error (not a crash type) whose message matches pattern (case-insensitive)."""
    with pytest.raises(Exception) as info:
        fn()
    exc = info.value
    assert not isinstance(exc, CRASHES), f"crashed instead of a clear error: {type(exc).__name__}: {exc}"
    assert re.search(pattern, str(exc), re.IGNORECASE), f"message does not name {pattern!r}: {type(exc).__name__}: {exc}"
    return exc


# ---------------------------------------------------------------- fixtures: the README's tiny example
@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(SOURCES + REFERENCES + MORE_SRC + MORE_TGT, vocab_size=120)


def _tiny_model(tok):
    cfg = NMTModelConfig(encoder_layers=2, decoder_layers=2, heads=4, d_model=32, ffn_dim=64)
    return build_translation_model(cfg, tok).eval()


@pytest.fixture(scope="module")
def model(tok):
    return _tiny_model(tok)


@pytest.fixture(scope="module")
def batch(tok):
    src = tok(SOURCES, padding=True, return_tensors="pt")
    tgt = tok(REFERENCES, padding=True, return_tensors="pt")["input_ids"]
    return {"input_ids": src["input_ids"], "attention_mask": src["attention_mask"], "decoder_input_ids": tgt}


def forward(model, batch, gates=None, ablation="zero"):
    with torch.no_grad():
        if gates is None:
            out = model(**batch, use_cache=False)
        else:
            with head_gates(model, gates, ablation=ablation):
                out = model(**batch, use_cache=False)
    return out.encoder_last_hidden_state, out.logits


MASK = torch.tensor([[1, 0, 1, 1], [1, 1, 0, 0]])
ONES = torch.ones(2, 4)
ZEROS = torch.zeros(2, 4)


# ---------------------------------------------------------------- the README example itself
def test_readme_example_runs(model, tok):
    """The README's example: dict gates, greedy translate, corpus_bleu returns (score, signature), about 0."""
    gates = {"enc": MASK, "cross": torch.ones(2, 4)}
    hyps = translate(model, tok, SOURCES, gates=gates, num_beams=1)
    assert isinstance(hyps, list) and len(hyps) == len(SOURCES) and all(isinstance(h, str) for h in hyps)
    score, signature = corpus_bleu(hyps, REFERENCES)
    assert math.isfinite(score) and 0 <= score <= 100 and isinstance(signature, str)


# ---------------------------------------------------------------- gates as a dict by attention type
def test_gates_unknown_type_encoder_refused(model, batch):
    """Gates are a dict with keys enc / dec / cross: an unknown key ("encoder") is refused, naming it."""
    refused(lambda: forward(model, batch, {"encoder": ONES}), "encoder")


def test_gates_unknown_type_self_refused(model, tok):
    """Gates are a dict with keys enc / dec / cross: "self" is refused by translate, naming it."""
    refused(lambda: translate(model, tok, SOURCES, gates={"self": ONES}), "self")


def test_gates_wrong_shape_refused(model, batch):
    """Each type's grid is [n_layers, n_heads]: a [2, 3] grid for "dec" is refused (naming the type or shape)."""
    refused(lambda: forward(model, batch, {"dec": torch.ones(2, 3)}), r"dec|shape|\[2, ?4\]|2 x 4|heads")


def test_gates_wrong_layer_count_refused_in_translate(model, tok):
    """Each type's grid is [n_layers, n_heads]: a 3-layer grid for "enc" on a 2-layer encoder is refused."""
    refused(lambda: translate(model, tok, SOURCES, gates={"enc": torch.ones(3, 4)}), r"enc|shape|layer")


def test_gates_nan_refused(model, batch):
    """Non-finite numbers are errors: a NaN gate is refused, not propagated into the outputs."""
    g = ONES.clone()
    g[0, 1] = float("nan")
    refused(lambda: forward(model, batch, {"cross": g}), r"nan|finite|gate")


def test_gates_nan_refused_in_translate(model, tok):
    """Non-finite numbers are errors: translate with a NaN gate is refused, not decoded into garbage."""
    g = ONES.clone()
    g[1, 2] = float("nan")
    refused(lambda: translate(model, tok, SOURCES, gates={"enc": g}), r"nan|finite|gate")


def test_gates_out_of_range_refused_in_translate(model, tok):
    """Gates are 1 = kept, 0 = pruned: a gate of 2 (not a mask value) is refused, not silently amplifying a head."""
    g = ONES.clone()
    g[0, 0] = 2.0
    refused(lambda: translate(model, tok, SOURCES, gates={"enc": g}), r"gate|range|\[0, ?1\]|binary|enc")


def test_gates_type_left_out_is_kept(model, batch):
    """A type left out of the dict: all its heads kept (= the same type given as all ones)."""
    a = forward(model, batch, {"enc": MASK})
    b = forward(model, batch, {"enc": MASK, "dec": ONES, "cross": ONES})
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_gates_all_ones_is_untouched_model(model, batch):
    """All gates at 1 = the untouched model, on every type."""
    a = forward(model, batch)
    b = forward(model, batch, {"enc": ONES, "dec": ONES, "cross": ONES})
    assert torch.allclose(a[1], b[1], atol=1e-6, rtol=0)


def test_gates_types_independent(model, batch):
    """The types are independent: decoder-side gates leave the encoder's output untouched; enc gates change it."""
    enc_full, logits_full = forward(model, batch)
    enc_dec, logits_dec = forward(model, batch, {"dec": MASK})
    enc_cross, logits_cross = forward(model, batch, {"cross": MASK})
    enc_enc, _ = forward(model, batch, {"enc": MASK})
    assert torch.equal(enc_full, enc_dec) and torch.equal(enc_full, enc_cross)
    assert not torch.allclose(enc_full, enc_enc)
    assert not torch.allclose(logits_full, logits_dec) and not torch.allclose(logits_full, logits_cross)
    assert not torch.allclose(logits_dec, logits_cross)


def test_uniform_on_dec_refused_in_generate(model, tok):
    """Uniform attention on "dec" is refused during generate with a clear error (README)."""
    refused(lambda: translate(model, tok, SOURCES, gates={"dec": MASK}, ablation="uniform"),
            r"uniform|cache|generat")


def test_uniform_on_cross_refused_in_generate(model, tok):
    """Uniform attention on "cross" is refused during generate with a clear error (README)."""
    refused(lambda: translate(model, tok, SOURCES, gates={"cross": MASK}, ablation="uniform"),
            r"uniform|cache|generat")


def test_uniform_on_dec_refused_in_raw_generate(model, tok):
    """Uniform on "dec" is refused during generate also through head_gates + model.generate (the same hooks)."""
    src = tok(SOURCES, padding=True, return_tensors="pt")

    def go():
        with torch.no_grad(), head_gates(model, {"dec": MASK}, ablation="uniform"):
            model.generate(**src, num_beams=1, max_new_tokens=5)

    refused(go, r"uniform|cache|generat")


def test_uniform_on_enc_works(model, tok):
    """Uniform attention on "enc" works in translate; with every gate at 1 it is the untouched model."""
    hyps = translate(model, tok, SOURCES, gates={"enc": MASK}, ablation="uniform")
    assert len(hyps) == len(SOURCES) and all(isinstance(h, str) for h in hyps)
    assert translate(model, tok, SOURCES, gates={"enc": ONES}, ablation="uniform") == translate(model, tok, SOURCES)


def test_mean_ablation_without_means_refused(model, tok):
    """Mean ablation replaces a head by its mean over a reference set: without means, a clear error naming them."""
    refused(lambda: translate(model, tok, SOURCES, gates={"enc": MASK}, ablation="mean"), r"mean")


def test_unknown_ablation_refused(model, tok):
    """The ablation semantics are named (zero, uniform, mean): another name is refused, naming it."""
    refused(lambda: translate(model, tok, SOURCES, gates={"enc": MASK}, ablation="shuffle"), r"shuffle|ablation")


# ---------------------------------------------------------------- translate
def test_translate_all_ones_equals_no_gates(model, tok):
    """All gates at 1 = the untouched model: translate gives the same text as without gates (greedy)."""
    ones = {"enc": ONES, "dec": ONES, "cross": ONES}
    assert translate(model, tok, SOURCES, gates=ones) == translate(model, tok, SOURCES)


def test_translate_all_ones_equals_no_gates_beam(model, tok):
    """All gates at 1 = the untouched model, also with beam search (num_beams > 1)."""
    ones = {"enc": ONES, "dec": ONES, "cross": ONES}
    assert translate(model, tok, SOURCES, gates=ones, num_beams=3) == translate(model, tok, SOURCES, num_beams=3)


def test_translate_zero_gates_equal_physical_pruning(model, tok):
    """A zero gate = the head removed, also under generate with the KV cache (physical pruning per type)."""
    gates = {"enc": MASK, "dec": torch.tensor([[0, 1, 1, 0], [1, 1, 1, 0]]), "cross": torch.tensor([[1, 1, 0, 1], [0, 1, 1, 1]])}
    gated = translate(model, tok, SOURCES + MORE_SRC, gates=gates)
    pruned = prune_heads(copy.deepcopy(model), gates)
    assert translate(pruned, tok, SOURCES + MORE_SRC) == gated


def test_translate_empty_sources(model, tok):
    """translate of an empty source list: an empty list of translations (or a clear error), never a crash."""
    try:
        out = translate(model, tok, [])
    except Exception as exc:  # a clear refusal is acceptable
        assert not isinstance(exc, CRASHES) and re.search(r"source|empty", str(exc), re.I), repr(exc)
    else:
        assert out == []


def test_translate_string_instead_of_list_refused(model, tok):
    """sources is a list of sentences: a bare string is refused, not translated character by character."""
    refused(lambda: translate(model, tok, "a man rides a bike ."), r"source|list|str")


def test_translate_none_source_refused(model, tok):
    """A None sentence among the sources gets a clear error naming the sources."""
    refused(lambda: translate(model, tok, ["a man .", None]), r"source|none|str")


def test_translate_num_beams_zero_refused(model, tok):
    """num_beams: 1 greedy, > 1 beam search; 0 is refused naming num_beams."""
    refused(lambda: translate(model, tok, SOURCES, num_beams=0), r"num_beams|beam")


def test_translate_num_beams_negative_refused(model, tok):
    """num_beams: 1 greedy, > 1 beam search; -2 is refused naming num_beams."""
    refused(lambda: translate(model, tok, SOURCES, num_beams=-2), r"num_beams|beam")


def test_translate_batch_size_zero_refused(model, tok):
    """batch_size 0 is refused naming batch_size (not an endless loop or a range() error)."""
    refused(lambda: translate(model, tok, SOURCES, batch_size=0), r"batch_size|batch")


@pytest.mark.parametrize("kind", ["enc", "dec", "cross"])
def test_translate_every_head_of_a_type_pruned(model, tok, kind):
    """Gates pruning every head of one type: translations still come out (a layer can lose all its heads)."""
    hyps = translate(model, tok, SOURCES, gates={kind: ZEROS})
    assert len(hyps) == len(SOURCES) and all(isinstance(h, str) for h in hyps)


def test_translate_every_head_pruned_all_types(model, tok):
    """Gates pruning every head of every type: translations still come out, with beam search too."""
    zeros = {"enc": ZEROS, "dec": ZEROS, "cross": ZEROS}
    for beams in (1, 2):
        hyps = translate(model, tok, SOURCES, gates=zeros, num_beams=beams)
        assert len(hyps) == len(SOURCES) and all(isinstance(h, str) for h in hyps)


def test_translate_physically_pruned_empty_layers(model, tok):
    """Physical pruning per type can empty a layer (all heads of dec layer 0, cross layer 1); it still translates."""
    gates = {"dec": torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1]]), "cross": torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]])}
    pruned = prune_heads(copy.deepcopy(model), gates)
    assert translate(pruned, tok, SOURCES) == translate(model, tok, SOURCES, gates=gates)


# ---------------------------------------------------------------- corpus_bleu
def test_bleu_identical_is_100():
    """Identical hypotheses and references give BLEU 100."""
    score, _ = corpus_bleu(REFERENCES + MORE_TGT, REFERENCES + MORE_TGT)
    assert score == pytest.approx(100.0)


def test_bleu_length_mismatch_refused():
    """Hypotheses and references of different lengths are refused (not silently truncated)."""
    refused(lambda: corpus_bleu(REFERENCES, REFERENCES + MORE_TGT), r"length|number|same|hypothes|reference")


def test_bleu_empty_refused():
    """corpus_bleu of empty lists is a clear error, not a score of nothing."""
    refused(lambda: corpus_bleu([], []), r"empty|no sentences|nothing|hypothes|reference")


def test_bleu_none_hypothesis_refused():
    """A None hypothesis gets a clear error naming the hypotheses (not a crash inside sacrebleu)."""
    refused(lambda: corpus_bleu(["ein mann .", None], ["ein mann .", "zwei hunde ."]), r"hypothes|none|str")


def test_bleu_none_reference_refused():
    """A None reference gets a clear error naming the references (not a crash inside sacrebleu)."""
    refused(lambda: corpus_bleu(["ein mann .", "zwei hunde ."], ["ein mann .", None]), r"reference|none|str")


def test_bleu_bare_strings_refused():
    """Hypotheses and references are lists of sentences: bare strings are refused, not scored char by char."""
    refused(lambda: corpus_bleu("ein mann fährt .", "ein mann fährt ."), r"hypothes|reference|list|str")


# ---------------------------------------------------------------- train_tokenizer
def test_tokenizer_vocab_size_zero_refused():
    """train_tokenizer with vocab_size 0 is refused naming vocab_size."""
    refused(lambda: train_tokenizer(SOURCES + REFERENCES, vocab_size=0), r"vocab_size|vocab")


def test_tokenizer_vocab_size_negative_refused():
    """train_tokenizer with a negative vocab_size is refused naming vocab_size."""
    refused(lambda: train_tokenizer(SOURCES + REFERENCES, vocab_size=-5), r"vocab_size|vocab")


def test_tokenizer_vocab_size_too_small():
    """vocab_size 3 (below the special tokens alone): a clear error naming vocab_size, or a vocab within it."""
    try:
        tok = train_tokenizer(SOURCES + REFERENCES, vocab_size=3)
    except Exception as exc:
        assert not isinstance(exc, CRASHES) and re.search(r"vocab", str(exc), re.I), repr(exc)
    else:
        assert len(tok) <= 3, f"asked for 3 tokens, silently got {len(tok)}"


def test_tokenizer_empty_texts_refused():
    """train_tokenizer on no training text is refused with a clear error."""
    refused(lambda: train_tokenizer([], vocab_size=120), r"text|empty|no ")


def test_tokenizer_blank_texts_refused():
    """train_tokenizer on only blank lines (nothing to learn) is refused with a clear error."""
    refused(lambda: train_tokenizer(["", "   "], vocab_size=120), r"text|empty|blank|no ")


def test_tokenizer_unknown_model_refused():
    """train_tokenizer's model is BPE or unigram: "wordpiece" is refused naming it."""
    refused(lambda: train_tokenizer(SOURCES + REFERENCES, vocab_size=120, model="wordpiece"), r"wordpiece|model|bpe")


# ---------------------------------------------------------------- NMTModelConfig / build_translation_model
def _build(tok, **kw):
    base = dict(encoder_layers=2, decoder_layers=2, heads=4, d_model=32, ffn_dim=64)
    base.update(kw)
    return build_translation_model(NMTModelConfig(**base), tok)


@pytest.mark.parametrize("kw, name", ids=_id, argvalues=[
    (dict(d_model=30), r"d_model|heads|divisible"),
    (dict(heads=0), r"heads"),
    (dict(heads=-4), r"heads"),
    (dict(encoder_layers=0), r"encoder_layers"),
    (dict(decoder_layers=0), r"decoder_layers"),
    (dict(d_model=-32), r"d_model"),
    (dict(ffn_dim=-64), r"ffn_dim"),
    (dict(dropout=1.5), r"dropout"),
    (dict(max_positions=0), r"max_positions"),
])
def test_model_config_bad_sizes_refused(tok, kw, name):
    """NMTModelConfig / build_translation_model: an impossible size is a clear error naming the parameter."""
    refused(lambda: _build(tok, **kw), name)


# ---------------------------------------------------------------- train_translation (tiny)
def _pairs(tok, src, tgt):
    data = ParallelData(corpus="toy", split="train", src_lang="en", tgt_lang="de", src=list(src), tgt=list(tgt),
                        source="test")
    return encode_pairs(tok, data)


@pytest.fixture(scope="module")
def train_pairs(tok):
    return _pairs(tok, SOURCES + MORE_SRC, REFERENCES + MORE_TGT)


def _train(tok, train, dev, **kw):
    cfg = dict(max_steps=4, batch_size=3, warmup_steps=1, eval_every=2)
    cfg.update(kw)
    return train_translation(_tiny_model(tok), train, dev, NMTTrainConfig(**cfg), seed=0, progress=False)


def test_train_translation_tiny_runs(tok, train_pairs):
    """A few steps of train_translation on a tiny model: a finite best dev loss, at most max_steps steps."""
    res = _train(tok, train_pairs, train_pairs)
    assert math.isfinite(res.best_dev_loss) and 0 < res.steps <= 4


def test_train_translation_inf_lr_stops(tok, train_pairs):
    """A non-finite loss stops training with a clear error (lr = inf): never NaN results."""
    refused(lambda: _train(tok, train_pairs, train_pairs, lr=float("inf")), r"finite|nan|inf|lr")


def test_train_translation_huge_lr_never_nan(tok, train_pairs):
    """lr = 1e6: either a clear non-finite error, or a finite result with finite weights; never NaN results."""
    model = _tiny_model(tok)
    cfg = NMTTrainConfig(max_steps=6, batch_size=3, warmup_steps=1, eval_every=2, lr=1e6)
    try:
        res = train_translation(model, train_pairs, train_pairs, cfg, seed=0, progress=False)
    except Exception as exc:
        assert not isinstance(exc, CRASHES) and re.search(r"finite|nan|inf|loss", str(exc), re.I), repr(exc)
    else:
        assert math.isfinite(res.best_dev_loss)
        assert all(torch.isfinite(p).all() for p in model.parameters())


def test_train_translation_negative_lr_refused(tok, train_pairs):
    """A negative learning rate is refused naming lr, before training."""
    refused(lambda: _train(tok, train_pairs, train_pairs, lr=-1e-3), r"\blr\b|learning rate")


def test_train_translation_zero_max_steps_refused(tok, train_pairs):
    """max_steps 0 trains nothing: refused naming max_steps (not a 'result' of an untrained model)."""
    refused(lambda: _train(tok, train_pairs, train_pairs, max_steps=0), r"max_steps")


def test_train_translation_zero_eval_every_refused(tok, train_pairs):
    """eval_every 0 is refused naming eval_every (not a modulo-by-zero crash)."""
    refused(lambda: _train(tok, train_pairs, train_pairs, eval_every=0), r"eval_every")


def test_train_translation_zero_patience_refused(tok, train_pairs):
    """patience 0 (stop before any evaluation could improve) is refused naming patience."""
    refused(lambda: _train(tok, train_pairs, train_pairs, patience=0), r"patience")


def test_train_translation_patience_without_dev_refused(tok, train_pairs):
    """Early stopping reads the dev loss: patience with dev=None is refused naming patience or dev."""
    refused(lambda: _train(tok, train_pairs, None, patience=2), r"patience|dev")


def test_encode_pairs_empty_data(tok):
    """Encoding no pairs: an empty encoding or a clear error, never a crash inside the tokenizer."""
    try:
        enc = _pairs(tok, [], [])
    except Exception as exc:
        assert not isinstance(exc, CRASHES) and re.search(r"empty|pairs|no ", str(exc), re.I), repr(exc)
    else:
        assert len(enc.src_ids) == 0


def test_train_translation_empty_train_refused(tok, train_pairs):
    """No training pairs: a clear error, not a loop over nothing returning a result."""
    empty = EncodedPairs(src_ids=[], tgt_ids=[], pad_id=train_pairs.pad_id, decoder_start_id=train_pairs.decoder_start_id)
    refused(lambda: _train(tok, empty, train_pairs), r"train|empty|pairs|no ")


# ---------------------------------------------------------------- study 7's parameters (NMTHeadsConfig.check)
@pytest.fixture(scope="module")
def toy_data_root(tmp_path_factory) -> Path:
    """A Multi30k-layout data root with a few toy pairs, so the check's data step passes (no hub)."""
    root = tmp_path_factory.mktemp("nmt_data")
    raw = root / "multi30k" / "task1" / "raw"
    raw.mkdir(parents=True)
    for split in ("train", "val", "test_2016_flickr"):
        (raw / f"{split}.en").write_text("\n".join(SOURCES + MORE_SRC) + "\n")
        (raw / f"{split}.de").write_text("\n".join(REFERENCES + MORE_TGT) + "\n")
    return root


@pytest.fixture
def check(toy_data_root):
    def _check(**kw):
        kw = {"data_dir": str(toy_data_root), "allow_hub": False, "syntactic": False, **kw}
        NMTHeadsConfig(**kw).check()
    return _check


def test_study_defaults_valid(check):
    """The notebook defaults (the quick profile's nmt_heads: {}) pass the parameter check."""
    check()


@pytest.mark.parametrize("kw, name", ids=_id, argvalues=[
    (dict(model_seeds=[]), r"model_seeds"),
    (dict(model_seeds=[0, 0]), r"model_seeds"),
    (dict(model_seeds=["a"]), r"model_seeds"),
    (dict(fractions=[1.5]), r"fractions"),
    (dict(fractions=[0.0]), r"fractions"),
    (dict(fractions=[float("nan")]), r"fractions"),
    (dict(types=["self"]), r"types"),
    (dict(retrain_types=["encoder"]), r"retrain_types"),
    (dict(patience=0), r"patience"),
    (dict(retrain_patience=0, retrain_max_steps=100), r"retrain_patience"),
    (dict(retrain_patience=2, retrain_max_steps=None), r"retrain_max_steps"),
    (dict(strategies=["top", "bottom"]), r"strategies|random"),
    (dict(strategy_budgets=[1.5]), r"strategy_budgets"),
    (dict(l0_settings=["encoder"]), r"l0_settings"),
    (dict(lambdas=[float("nan")]), r"lambdas"),
    (dict(heads=5), r"heads|d_model"),
    (dict(lr=float("inf")), r"\blr\b"),
    (dict(num_beams=0), r"num_beams"),
    (dict(eval_every=0), r"eval_every"),
    (dict(tokenizer_model="wordpiece"), r"tokenizer_model"),
    (dict(corpus="multi31k"), r"corpus|multi31k"),
])
def test_study_parameters_refused(check, kw, name):
    """Every study-7 parameter is typed and checked before any work: a bad value is refused naming it."""
    exc = refused(lambda: check(**kw), name)
    assert isinstance(exc, (ValueError, TypeError))


def test_study_unknown_parameter_refused(check):
    """An unknown key is refused (naming it), not ignored."""
    refused(lambda: check(n_heads=4), r"n_heads")


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return env


def test_runner_plan_nmt_heads_runs_nothing():
    """`--profile quick --only nmt_heads --plan` prints the study's cells and runs nothing (quick exit 0)."""
    r = subprocess.run([sys.executable, "-m", "headprune_utils.run", "--profile", "quick", "--only", "nmt_heads",
                        "--plan", "--plan-summary", "--no-progress"], cwd=REPO, env=_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "nmt_heads" in r.stdout + r.stderr


def test_notebook_bad_parameter_refused_before_training(tmp_path):
    """papermill -p heads 5 (d_model 256 not divisible): the notebook stops at once naming the parameter."""
    env = _env()
    env["HEADPRUNE_OUTPUT_DIR"] = str(tmp_path / "outputs")
    r = subprocess.run([sys.executable, "-m", "papermill", "notebooks/07_nmt_heads.ipynb", str(tmp_path / "o.ipynb"),
                        "-p", "heads", "5", "-p", "progress", "False"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "ParameterError" in out or "parameter" in out.lower()
    assert re.search(r"heads|d_model", out)
    assert not list((tmp_path / "outputs").glob("_nmt/**/*.safetensors")), "a model was trained"
