"""Specialized heads (positional, syntactic, rare-word) on hand-built maps, and the CoNLL-U reader."""
from __future__ import annotations

import math

import pytest
import torch

import headprune_utils.measure.specialized as sp
from conftest import tiny_inputs, tiny_model
from headprune_utils.model.attention import attention_maps
from headprune_utils.tasks.data import DataUnavailableError
from headprune_utils.measure.head_scores import query_mask

ATT = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])  # lengths 6 and 4


def positional_maps(att=ATT):
    """One layer, 4 heads: 0 previous token, 1 next token, 2 uniform over real keys, 3 self."""
    b, s = att.shape
    a = torch.zeros(b, 4, s, s)
    for r, n in enumerate(att.sum(1).tolist()):
        for i in range(s):
            a[r, 0, i, max(i - 1, 0)] = 1.0
            a[r, 1, i, min(i + 1, n - 1)] = 1.0
            a[r, 2, i, :n] = 1.0 / n
            a[r, 3, i, i] = 1.0
    return [a]


def test_positional_from_maps_finds_prev_and_next_heads_only():
    out = sp.positional_from_maps(positional_maps(), query_mask(ATT))
    # 6 queries (4 + 2); the uniform head's argmax is key 0 (first max), i.e. "prev" only for query 1
    torch.testing.assert_close(out["prev"], torch.tensor([[1.0, 0.0, 2 / 6, 0.0]]))
    torch.testing.assert_close(out["next"], torch.tensor([[0.0, 1.0, 0.0, 0.0]]))
    assert out["positional"].tolist() == [[True, True, False, False]]
    # with the specials as queries, the first query of "prev" and the last of "next" miss
    out = sp.positional_from_maps(positional_maps(), query_mask(ATT, exclude_special=False), threshold=0.8)
    assert out["prev"][0, 0] == pytest.approx(8 / 10) and out["positional"].tolist() == [[True, True, False, False]]


def test_positional_heads_streams_over_batches(monkeypatch):
    b1 = {"input_ids": torch.ones(2, 6, dtype=torch.long), "attention_mask": ATT}
    att2 = torch.tensor([[1, 1, 1, 1, 1, 0, 0]])
    b2 = {"input_ids": torch.ones(1, 7, dtype=torch.long), "attention_mask": att2}
    maps = {id(b1): positional_maps(ATT), id(b2): positional_maps(att2)}
    monkeypatch.setattr(sp, "attention_maps", lambda model, batch: maps[id(batch)])
    out = sp.positional_heads(None, [b1, b2])
    # uniform head: "prev" hits query 1 of each sentence: 3 of 9 queries
    torch.testing.assert_close(out["prev"], torch.tensor([[1.0, 0.0, 3 / 9, 0.0]]))
    assert out["positional"].tolist() == [[True, True, False, False]]


def test_positional_heads_on_a_tiny_model_equal_the_pure_function():
    model = tiny_model()
    batch = tiny_inputs()
    got = sp.positional_heads(model, [batch])
    want = sp.positional_from_maps(attention_maps(model, batch), query_mask(batch["attention_mask"]))
    for k in ("prev", "next", "positional"):
        assert torch.equal(got[k], want[k])
    assert got["prev"].shape == (3, 4) and bool(((got["prev"] + got["next"]) <= 1).all())


CONLLU = """# sent_id = s1
# text = Don't eat apples.
1-2\tDon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tDo\tdo\tAUX\tVBP\t_\t3\taux\t3:aux\t_
2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t3:advmod\t_
3\teat\teat\tVERB\tVB\t_\t0\troot\t0:root\t_
3.1\tate\teat\tVERB\tVB\t_\t_\t_\t3:conj\t_
4\tapples\tapple\tNOUN\tNNS\t_\t3\tobj\t3:obj\t_
5\t.\t.\tPUNCT\t.\t_\t3\tpunct\t3:punct\t_

# sent_id = s2
1\tIt\tit\tPRON\tPRP\t_\t2\tnsubj:pass\t2:nsubj:pass\t_
2\twas\tbe\tAUX\tVBD\t_\t0\troot\t0:root\t_
"""


def test_parse_conllu_skips_multiword_tokens_and_empty_nodes():
    s1, s2 = sp.parse_conllu(CONLLU)
    assert s1.sent_id == "s1" and s1.ids == [1, 2, 3, 4, 5]
    assert s1.forms == ["Do", "n't", "eat", "apples", "."]
    assert s1.heads == [3, 3, 0, 3, 3] and s1.deprels == ["aux", "advmod", "root", "obj", "punct"]
    assert s2.deprels == ["nsubj", "root"] and len(s2) == 2
    assert sp.parse_conllu(CONLLU, strip_subtypes=False)[1].deprels == ["nsubj:pass", "root"]


def test_read_conllu_and_missing_ud_folder(tmp_path, monkeypatch):
    folder = tmp_path / "ud_english_ewt"
    folder.mkdir()
    (folder / "en_ewt-ud-dev.conllu").write_text(CONLLU)
    assert len(sp.load_ud_ewt("dev", data_dir=tmp_path)) == 2
    assert len(sp.load_ud_ewt("dev", data_dir=tmp_path, max_sentences=1)) == 1
    with pytest.raises(DataUnavailableError, match="en_ewt-ud-test"):
        sp.load_ud_ewt("test", data_dir=tmp_path)
    monkeypatch.delenv("HEADPRUNE_DATA_DIR", raising=False)
    with pytest.raises(DataUnavailableError, match="HEADPRUNE_DATA_DIR"):
        sp.load_ud_ewt("dev")
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(tmp_path))
    assert len(sp.load_ud_ewt("dev")) == 2


def test_word_attention_means_rows_and_sums_columns():
    # pieces: [CLS] w0 w1a w1b [SEP]
    a = torch.tensor([
        [0.2, 0.2, 0.2, 0.2, 0.2],
        [0.1, 0.1, 0.3, 0.4, 0.1],
        [0.0, 0.5, 0.2, 0.2, 0.1],
        [0.0, 0.9, 0.0, 0.0, 0.1],
        [0.2, 0.2, 0.2, 0.2, 0.2],
    ])
    w = sp.word_attention(a[None], [None, 0, 1, 1, None])
    torch.testing.assert_close(w[0], torch.tensor([[0.1, 0.7], [0.7, 0.2]]))
    assert sp.word_argmax(w[0]).tolist() == [1, 0]
    assert sp.word_argmax(w[0], exclude_self=False).tolist() == [1, 0]


def sentence():
    # "the big red dog chased cats" (0-based words); amod: big->dog, red->dog; nsubj dog->chased; obj cats->chased
    return sp.Sentence(ids=[1, 2, 3, 4, 5, 6], forms="the big red dog chased cats".split(),
                       heads=[4, 4, 4, 5, 0, 5], deprels=["det", "amod", "amod", "nsubj", "root", "obj"])


def test_relation_instances_by_direction_and_truncation():
    s = sentence()
    assert sp.relation_instances(s, "amod", "dep->head") == [(1, frozenset({3})), (2, frozenset({3}))]
    assert sp.relation_instances(s, "amod", "head->dep") == [(3, frozenset({1, 2}))]
    assert sp.relation_instances(s, "obj", "dep->head", usable={0, 1, 2, 3, 4}) == []


def test_syntactic_scores_by_hand():
    s = sentence()
    # one layer, two heads; per word the argmax target
    am = torch.tensor([[[1, 3, 3, 4, 3, 4],     # head 0: amod deps -> dog, nsubj dog -> chased, cats -> chased
                        [1, 2, 3, 4, 5, 4]]])   # head 1: always the next word (cats -> chased)
    df = sp.syntactic_scores([am, am], [s, s], relations=("amod", "obj"), margin=0.1)
    r = df.set_index(["head", "relation", "direction"])
    # amod dep->head: instances big(1)->{3}, red(2)->{3}, twice; offsets +2, +1 -> best baseline 1/2 (k = +1)
    assert r.loc[(0, "amod", "dep->head"), "accuracy"] == 1.0
    assert r.loc[(0, "amod", "dep->head"), "baseline"] == 0.5
    assert r.loc[(0, "amod", "dep->head"), "baseline_offset"] == 1
    assert r.loc[(0, "amod", "dep->head"), "n"] == 4
    assert bool(r.loc[(0, "amod", "dep->head"), "syntactic"])
    assert r.loc[(1, "amod", "dep->head"), "accuracy"] == 0.5  # red -> dog only
    assert not bool(r.loc[(1, "amod", "dep->head"), "syntactic"])
    # amod head->dep: dog(3) -> {1, 2}: head 0 says 4 (no), head 1 says 4 (no); baseline k in {-1, -2}: 1.0
    assert r.loc[(0, "amod", "head->dep"), "accuracy"] == 0.0
    assert r.loc[(0, "amod", "head->dep"), "baseline"] == 1.0
    assert r.loc[(0, "amod", "head->dep"), "baseline_offset"] == -1
    # obj dep->head: cats(5) -> chased(4): both heads right; baseline k=-1 also 1.0 -> not syntactic
    assert r.loc[(1, "obj", "dep->head"), "accuracy"] == 1.0
    assert not bool(r.loc[(1, "obj", "dep->head"), "syntactic"])
    # a relation absent from the data: n = 0, NaN accuracy, never syntactic
    none = sp.syntactic_scores([am], [s], relations=("advmod",))
    assert (none.n == 0).all() and none.accuracy.isna().all() and not none.syntactic.any()
    assert len(df) == 2 * 2 * 2  # heads x relations x directions (one layer)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import BertTokenizerFast

    return BertTokenizerFast.from_pretrained(tiny_model_dir)


def test_syntactic_heads_runs_and_skips_truncated_relations(tokenizer):
    model = tiny_model()
    s = sp.Sentence(ids=[1, 2, 3, 4], forms=["the", "film", "was", "boring"], heads=[2, 4, 4, 0],
                    deprels=["det", "nsubj", "cop", "root"])
    df = sp.syntactic_heads(model, tokenizer, [s, sentence()], relations=("nsubj",), batch_size=1)
    assert len(df) == 3 * 4 * 2 and set(df.n) == {2}
    # max_length 4: [CLS] the film [SEP]: "boring" is cut, so film -> boring is skipped
    short = sp.syntactic_heads(model, tokenizer, [s], relations=("nsubj",), max_length=4)
    assert set(short.n) == {0}
    # pure path: the same argmaxes as computed by hand from the model's maps
    enc = tokenizer([s.forms], is_split_into_words=True, return_tensors="pt")
    maps = attention_maps(model, dict(enc))
    per = torch.stack([m[0] for m in maps])
    am = sp.word_argmax(sp.word_attention(per, enc.word_ids(0), 4))
    want = sp.syntactic_scores([am], [s], relations=("nsubj",))
    got = sp.syntactic_heads(model, tokenizer, [s], relations=("nsubj",))
    assert got.accuracy.tolist() == want.accuracy.tolist()


@pytest.mark.data
def test_ud_dev_file(data_root):
    sents = sp.load_ud_ewt("dev", data_dir=data_root)
    assert len(sents) == 2001 and sum(len(s) for s in sents) == 25147  # PROVENANCE.md / stats.xml
    for s in sents:
        assert s.ids == list(range(1, len(s) + 1))
        assert all(0 <= h <= len(s) for h in s.heads)
        assert all(":" not in r for r in s.deprels)
    rels = {r for s in sents for r in s.deprels}
    assert {"nsubj", "obj", "amod", "advmod"} <= rels


def test_token_frequencies_excludes_specials():
    counts = sp.token_frequencies([[2, 7, 8, 7, 3], [2, 8, 3, 0]], special_ids={0})
    assert counts == {7: 2, 8: 2, 3: 1}
    assert sp.token_frequencies([[5, 6]], exclude_first_last=False) == {5: 1, 6: 1}


def rare_case():
    att = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]])
    ids = torch.tensor([[2, 10, 11, 12, 10, 3], [2, 11, 11, 13, 3, 0]])
    counts = {10: 100, 11: 50, 12: 1, 13: 1}
    # rarest candidate: row 0 -> position 3 (id 12); row 1 -> position 3 (id 13)
    b, s = att.shape
    a = torch.zeros(b, 2, s, s)
    a[:, 0, :, 3] = 0.7  # head 0: the rare token
    a[:, 0, :, 0] = 0.3
    for r, n in enumerate(att.sum(1).tolist()):
        a[r, 1, :, :n] = 1.0 / n  # head 1: uniform -> argmax = first candidate (position 1)
    return [a], ids, query_mask(att, ids), counts


def test_rare_counts_and_table_by_hand():
    maps, ids, q, counts = rare_case()
    r = sp.rare_counts_from_maps(maps, ids, q, counts)
    assert r["trials"] == 4 + 3
    assert r["hits"].tolist() == [[7.0, 0.0]]
    assert r["chance_sum"] == pytest.approx(4 * (1 / 4) + 3 * (1 / 3))
    df = sp.rare_table(r["hits"], r["trials"], r["chance_sum"])
    assert df.chance.tolist() == pytest.approx([2 / 7, 2 / 7])
    assert df.share.tolist() == [1.0, 0.0]
    assert df.p_value[0] == pytest.approx((2 / 7) ** 7)
    assert df.rare.tolist() == [True, False]
    # rare-word: the share above sp.RARE_SHARE (more than half of the queries); the p-value decides nothing
    assert sp.RARE_SHARE == 0.5
    assert sp.rare_table(r["hits"], r["trials"], r["chance_sum"], rare_share=1.0).rare.tolist() == [False, False]
    half = sp.rare_table(torch.tensor([[4.0, 3.0]]), 7, 7 * 0.1)  # 4/7 > 0.5, 3/7 not (at 4.3 x chance)
    assert half.rare.tolist() == [True, False] and (half.p_value < 0.05).all()


def test_rare_word_heads_streams_over_batches(monkeypatch):
    maps, ids, q, counts = rare_case()
    batch = {"input_ids": ids, "attention_mask": (ids != 0).long()}
    monkeypatch.setattr(sp, "attention_maps", lambda model, b: maps)
    df = sp.rare_word_heads(None, [batch, batch], counts)
    assert df.n.tolist() == [14, 14] and df.share.tolist() == [1.0, 0.0]
    assert df.rare.tolist() == [True, False] and math.isclose(df.p_value[0], (2 / 7) ** 14)


def test_syntactic_records_store_no_nan_for_a_relation_without_instances():
    """Too few sentences for a relation: its rows have n = 0 and no accuracy; the records a result cell stores say
    None (JSON null), never NaN, which the store rejects as a corrupt number (a shrunk paper-profile run lost its
    roles cells that way, then failed later in the analysis)."""
    import json

    import pandas as pd

    syn = pd.DataFrame([{"layer": 0, "head": 0, "relation": "nsubj", "direction": "dep->head", "n": 3,
                         "accuracy": 0.5, "baseline": 0.25, "baseline_offset": 1, "syntactic": True},
                        {"layer": 0, "head": 0, "relation": "obj", "direction": "dep->head", "n": 0,
                         "accuracy": float("nan"), "baseline": float("nan"), "baseline_offset": 0, "syntactic": False}])
    recs = sp.syntactic_records(syn)
    assert recs[1]["accuracy"] is None and recs[1]["baseline"] is None and recs[0]["accuracy"] == 0.5
    assert set(recs[0]) == set(sp.SYNTACTIC_COLUMNS)
    json.dumps(recs, allow_nan=False)  # plain JSON
    back = pd.DataFrame(recs)
    assert back["accuracy"].dtype == float and back.loc[1, "accuracy"] != back.loc[1, "accuracy"]  # NaN again on read
