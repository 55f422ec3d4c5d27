"""Causal-LM text batches, loss/perplexity and the short trainer, against independent computations."""
import math

import pytest
import torch
import torch.nn.functional as F

from families import reference as R
from families.fixtures import FIXTURES
from headprune_utils.measure import language_model as LM
from headprune_utils.model import models
from headprune_utils.tasks import text
from headprune_utils.train.language_model import train_lm


class WordTokenizer:
    """A whitespace tokenizer with a fixed vocabulary (ids 0 = pad, 1 = end)."""

    pad_token_id, eos_token_id = 0, 1

    def __init__(self, words):
        self.ids = {w: i + 2 for i, w in enumerate(sorted(set(words)))}

    def __call__(self, lines, truncation=True, max_length=None):
        out = [[self.ids[w] for w in line.split()] + [1] for line in lines]
        return {"input_ids": [x[:max_length] for x in out]}


def test_read_lines(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("one two\n\n  three \nfour\n", encoding="utf-8")
    assert text.read_lines(f) == ["one two", "three", "four"]
    assert text.read_lines(f, 2) == ["one two", "three"]
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        text.read_lines(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match="is not a file"):
        text.read_lines(tmp_path)
    (tmp_path / "e.txt").write_text("\n \n", encoding="utf-8")
    with pytest.raises(ValueError, match="e.txt.*no non-empty line"):
        text.read_lines(tmp_path / "e.txt")
    (tmp_path / "b.txt").write_bytes(b"ok\n\xff\xfe bad\n")
    with pytest.raises(ValueError, match="b.txt.*not UTF-8"):
        text.read_lines(tmp_path / "b.txt")
    with pytest.raises(ValueError, match="n must be"):
        text.read_lines(f, 0)


def test_lm_batches_pad_and_label():
    tok = WordTokenizer("a b c d e".split())
    batches = text.lm_batches(tok, ["a b c", "d", "e a", "b c d e"], batch_size=2, max_length=4)
    # "d" + end is two tokens (kept); truncation to 4
    assert [b["input_ids"].shape for b in batches] == [torch.Size([2, 4]), torch.Size([2, 4])]
    first = batches[0]
    assert first["input_ids"][1].tolist() == [tok.ids["d"], 1, 0, 0]
    assert first["attention_mask"][1].tolist() == [1, 1, 0, 0]
    assert first["labels"][1].tolist() == [tok.ids["d"], 1, -100, -100]
    assert batches[1]["input_ids"][1].tolist() == [tok.ids[w] for w in "b c d e".split()]
    with pytest.raises(ValueError, match="max_length must be at least 2"):
        text.lm_batches(tok, ["a"], max_length=1)
    with pytest.raises(ValueError, match="batch_size"):
        text.lm_batches(tok, ["a"], batch_size=0)


def test_lm_loss_is_the_token_weighted_mean_over_batches():
    fx = FIXTURES["llama_gqa"]
    model = fx.build("eager")
    batch = fx.inputs()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    one = {"input_ids": ids, "attention_mask": mask}
    # one batch: the reference loss and HF's own loss with -100 labels
    with torch.no_grad():
        want = float(R.lm_loss(model(**one).logits, ids, mask))
        hf = float(model(**one, labels=ids.masked_fill(mask == 0, -100)).loss)  # HF's loss runs in float32
    assert LM.lm_loss(model, [one]) == pytest.approx(want, rel=1e-12)
    assert hf == pytest.approx(want, rel=1e-6)
    # two batches of different token counts: every token weighs the same (not every batch)
    rows = [{"input_ids": ids[i:i + 1], "attention_mask": mask[i:i + 1]} for i in range(ids.shape[0])]
    per_row = []
    for r in rows:
        real = r["attention_mask"][0, 1:].bool()
        with torch.no_grad():
            logits = model(**r).logits[0, :-1][real]
        per_row.append(F.cross_entropy(logits, r["input_ids"][0, 1:][real], reduction="none"))
    pooled = float(torch.cat(per_row).mean())
    assert len({len(x) for x in per_row}) > 1  # the rows differ in length, so a batch-weighted mean would differ
    assert LM.lm_loss(model, rows) == pytest.approx(pooled, rel=1e-12)
    assert LM.perplexity(model, rows) == pytest.approx(math.exp(pooled), rel=1e-12)
    assert model.training is False


def test_lm_loss_honours_labels():
    """Labels, when a batch has them, choose the target tokens as in Hugging Face's loss: padding labels (-100) give
    the loss without labels; a prompt labelled -100 is left out; labels of another shape are refused."""
    fx = FIXTURES["llama_gqa"]
    model = fx.build("eager")
    batch = fx.inputs()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    one = {"input_ids": ids, "attention_mask": mask}
    padded = ids.masked_fill(mask == 0, -100)
    assert LM.lm_loss(model, [{**one, "labels": padded}]) == pytest.approx(LM.lm_loss(model, [one]), rel=1e-12)
    prompt = padded.clone()
    prompt[:, :3] = -100  # the first three tokens are a prompt: positions 0-1 predict no target
    with torch.no_grad():
        hf = float(model(**one, labels=prompt).loss)
        logits = model(**one).logits[:, :-1].double()
    target = prompt[:, 1:]
    keep = target != -100
    want = float(F.cross_entropy(logits[keep], target[keep]))
    assert LM.lm_loss(model, [{**one, "labels": prompt}]) == pytest.approx(want, rel=1e-12)
    assert hf == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="no target token"):
        LM.lm_loss(model, [{**one, "labels": torch.full_like(ids, -100)}])
    with pytest.raises(ValueError, match="labels must have the shape"):
        LM.lm_loss(model, [{**one, "labels": ids[:, :-1]}])


def test_lm_loss_errors():
    fx = FIXTURES["llama_gqa"]
    model = fx.build("eager")
    empty = {"input_ids": torch.tensor([[3]]), "attention_mask": torch.tensor([[1]])}
    with pytest.raises(ValueError, match="no target token"):
        LM.lm_loss(model, [empty])
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="not finite"):
        LM.lm_loss(model, [fx.inputs()])


def test_tiny_causal_lm_learns_and_errors_are_named():
    tok = WordTokenizer("the cat sat on a mat dog ran".split())
    lines = ["the cat sat on a mat", "the dog ran", "a cat ran on the mat", "the dog sat"] * 4
    batches = text.lm_batches(tok, lines, batch_size=4, max_length=8)
    torch.set_num_threads(1)
    model = models.tiny_causal_lm(len(tok.ids) + 2, seed=0, pad_token_id=0, eos_token_id=1,
                                  hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2)
    before = LM.lm_loss(model, batches)
    losses = train_lm(model, batches, steps=40, lr=1e-2)
    after = LM.lm_loss(model, batches)
    assert len(losses) == 40 and after < before - 1.0
    again = models.tiny_causal_lm(len(tok.ids) + 2, seed=0, pad_token_id=0, eos_token_id=1, hidden_size=32,
                                  intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2)
    assert train_lm(again, batches, steps=40, lr=1e-2) == losses  # seeded: the same run twice
    with pytest.raises(ValueError, match="not LlamaConfig fields"):
        models.tiny_causal_lm(10, hidden_sise=32)
    with pytest.raises(ValueError, match="steps"):
        train_lm(model, batches, steps=0)
    with pytest.raises(ValueError, match="labels"):
        train_lm(model, [{"input_ids": batches[0]["input_ids"]}], steps=1)
