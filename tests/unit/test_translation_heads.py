"""Encoder-head measurements of a translation model against a direct computation from eager attentions."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from headprune_utils.measure.specialized import Sentence
from headprune_utils.tasks.subword import train_tokenizer
from headprune_utils.train.translation import encode_pairs, dev_loss
from headprune_utils.tasks.translation_data import ParallelData
from headprune_utils.studies.translation_heads import ablation_nll, encoder_roles, source_queries
from headprune_utils.model.translation_model import NMTModelConfig, build_translation_model

SRC = ["a man rides a red bike .", "two dogs play in the snow .", "a woman is reading a book !",
       "the children run and laugh .", "a man in a red hat sings ."]
TGT = ["ein Mann fährt ein rotes Fahrrad .", "zwei Hunde spielen im Schnee .", "eine Frau liest ein Buch !",
       "die Kinder rennen und lachen .", "ein Mann mit rotem Hut singt ."]


@pytest.fixture(scope="module")
def setup():
    tok = train_tokenizer(SRC + TGT, vocab_size=120)
    cfg = NMTModelConfig(encoder_layers=2, decoder_layers=2, heads=4, d_model=32, ffn_dim=64, dropout=0.0,
                         max_positions=64, attn_implementation="eager")
    model = build_translation_model(cfg, tok, seed=1).double()
    return tok, model


def test_encoder_roles_equal_a_direct_computation_from_eager_attentions(setup):
    tok, model = setup
    ud = [Sentence([1, 2, 3, 4], ["a", "man", "rides", "bikes"], [2, 3, 0, 3], ["det", "nsubj", "root", "obj"])]
    out = encoder_roles(model, tok, SRC, SRC, ud, max_length=64, batch_size=2)
    special = [tok.pad_token_id, tok.bos_token_id, tok.eos_token_id]
    conf = np.zeros((2, 4))
    prev = np.zeros((2, 4))
    n = 0
    for s in SRC:  # one sentence at a time, no padding: an independent route
        ids = torch.tensor([tok(s).input_ids])
        with torch.no_grad():
            att = model.get_encoder()(input_ids=ids, output_attentions=True).attentions
        q = [i for i, t in enumerate(ids[0].tolist()) if t not in special]
        n += len(q)
        for layer, a in enumerate(att):
            a = a[0].numpy()  # [H, seq, seq]
            conf[layer] += a[:, q, :].max(-1).sum(-1)
            prev[layer] += np.array([[a[h, i].argmax() == i - 1 for i in q] for h in range(4)]).sum(-1)
    np.testing.assert_allclose(np.asarray(out["confidence"]), conf / n, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(out["prev"]), prev / n, rtol=1e-6)
    assert out["n_queries"] == n and out["rare_n"] == n
    assert {r["relation"] for r in out["syntactic"]} == {"nsubj", "obj", "amod", "advmod"}
    nsubj = [r for r in out["syntactic"] if r["relation"] == "nsubj" and r["direction"] == "dep->head"]
    assert len(nsubj) == 8 and all(r["n"] == 1 for r in nsubj)
    assert encoder_roles(model, tok, SRC, SRC)["syntactic"] == []  # no UD sentences, no syntactic rows


def test_ablation_nll_is_the_loss_increase_of_each_single_head(setup):
    tok, model = setup
    enc = encode_pairs(tok, ParallelData("toy", "dev", "en", "de", SRC, TGT, "test"))
    shapes = {"enc": (2, 4), "cross": (2, 4)}
    imp, full = ablation_nll(model, enc, shapes)
    assert full == pytest.approx(dev_loss(model, enc))
    g = torch.ones(2, 4)
    g[1, 2] = 0.0
    assert imp["cross"][1][2] == pytest.approx(dev_loss(model, enc, gates={"cross": g}) - full, rel=1e-4, abs=1e-7)
    assert set(imp) == {"enc", "cross"} and np.asarray(imp["enc"]).shape == (2, 4)


def test_source_queries():
    batch = {"input_ids": torch.tensor([[5, 6, 2, 0]]), "attention_mask": torch.tensor([[1, 1, 1, 0]])}
    assert source_queries(batch, [0, 1, 2]).tolist() == [[True, True, False, False]]
