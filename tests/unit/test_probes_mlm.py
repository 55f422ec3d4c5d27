"""Task-free probes (random token sequences, pooled text) and continued masked-LM training, on the tiny model."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from headprune_utils.train import mlm
from headprune_utils.model import models
from headprune_utils.tasks import probes


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return models.load_tokenizer(str(tiny_model_dir))


def test_random_tokens_have_the_lengths_and_never_special_tokens(tok):
    enc = probes.random_tokens(tok, [3, 5, 9], seed=0)
    assert enc.lengths.tolist() == [3, 5, 9]
    special = set(tok.all_special_ids)
    for ids in enc.input_ids:
        assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
        assert not special & set(ids[1:-1])
    assert enc.input_ids == probes.random_tokens(tok, [3, 5, 9], seed=0).input_ids
    assert enc.input_ids != probes.random_tokens(tok, [3, 5, 9], seed=1).input_ids
    with pytest.raises(ValueError, match=">= 3"):
        probes.random_tokens(tok, [2], seed=0)


def test_drawable_ids_exclude_placeholders():
    class Tok:
        all_special_ids = [0, 1]

        def get_vocab(self):
            return {"[PAD]": 0, "[CLS]": 1, "[unused3]": 2, "<extra>": 3, "dog": 4, "cat": 5}

    assert probes.drawable_ids(Tok()).tolist() == [4, 5]


def test_glue_text_pools_unique_sentences(tok, tiny_glue_root):
    enc = probes.glue_text(tok, ["SST-2"], "train", 10, seed=0, data_dir=str(tiny_glue_root), allow_hub=False)
    assert len(enc) == 10 and (enc.labels == 0).all()
    again = probes.glue_text(tok, ["SST-2"], "train", 10, seed=0, data_dir=str(tiny_glue_root), allow_hub=False)
    assert enc.input_ids == again.input_ids
    everything = probes.glue_text(tok, ["SST-2"], "train", 10_000, seed=0, data_dir=str(tiny_glue_root), allow_hub=False)
    assert len({tuple(x) for x in everything.input_ids}) == len(everything)  # no sentence twice


def test_mask_tokens_follows_bert_recipe():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 100, (64, 40))
    ids[:, 0], ids[:, -1] = 2, 3
    att = torch.ones_like(ids)
    att[:8, 30:] = 0
    out, chosen, targets = mlm.mask_tokens(ids, att, torch.tensor([2, 3]), 4, torch.arange(10, 100), g, prob=0.15)
    assert not chosen[:, 0].any() and not chosen[:, -1].any() and not chosen[:8, 30:].any()
    share = chosen.sum() / (att.sum() - 2 * 64)
    assert 0.12 < share < 0.18
    assert torch.equal(targets, ids[chosen])
    masked = (out[chosen] == 4).float().mean()
    kept = (out[chosen] == ids[chosen]).float().mean()
    assert 0.74 < masked < 0.86 and 0.05 < kept < 0.16
    assert torch.equal(out[~chosen], ids[~chosen])


def test_set_dropout_reaches_every_dropout(tiny_model_dir):
    model = mlm.load_mlm(str(tiny_model_dir), torch.device("cpu"), seed=0)
    mlm.set_dropout(model, 0.37)
    ps = {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)}
    assert ps == {0.37} and model.config.attention_probs_dropout_prob == 0.37


def test_continued_mlm_training_is_seeded_and_dropout_matters(tiny_model_dir, tiny_glue_root, tok):
    text = probes.glue_text(tok, ["SST-2"], "train", 48, seed=0, data_dir=str(tiny_glue_root), allow_hub=False)
    base, head = mlm.prepare_mlm(str(tiny_model_dir), text, tok, seed=0, head_steps=3, batch_size=8)
    assert np.isfinite(head["head_loss_last"])
    _, none = mlm.prepare_mlm(str(tiny_model_dir), text, tok, seed=0, head_steps=0, batch_size=8)
    assert none == {}  # no head trained: no loss to report (a NaN there made the result check drop the cell)
    enc_before = copy.deepcopy(base.base_model.state_dict())
    # the head phase leaves the encoder untouched
    fresh = mlm.load_mlm(str(tiny_model_dir), torch.device("cpu"), seed=0)
    for k, v in fresh.base_model.state_dict().items():
        assert torch.equal(v, enc_before[k]), k

    def run(p):
        m = copy.deepcopy(base)
        hist = mlm.continue_mlm(m, text, tok, p, steps=4, seed=0, batch_size=8, lr=1e-3)
        return m, hist

    a, ha = run(0.0)
    b, _ = run(0.0)
    c, _ = run(0.5)
    sa, sb, sc = (x.base_model.state_dict() for x in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa), "same seed and dropout: the same model"
    assert any(not torch.equal(sa[k], sc[k]) for k in sa), "another dropout ratio: another model"
    assert any(not torch.equal(sa[k], enc_before[k]) for k in sa), "the encoder trained"
    emb = "embeddings.word_embeddings.weight"
    assert torch.equal(sa[emb], enc_before[emb]), "word embeddings (the tied decoder) stay frozen"
    assert not a.training and {m.p for m in a.modules() if isinstance(m, torch.nn.Dropout)} == {0.0}
    assert len(ha["loss"]) == 4 and np.isfinite(ha["loss_last"])
    with pytest.raises(ValueError, match="dropout"):
        mlm.continue_mlm(copy.deepcopy(base), text, tok, 1.0, steps=1, seed=0)
