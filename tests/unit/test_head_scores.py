"""Head scores (confidence, entropy, ablation importance, relevance, rank agreement) on hand-built maps
and tiny random models."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from conftest import tiny_inputs, tiny_model
from headprune_utils.model.attention import attention_maps
from headprune_utils.tasks.batching import Encoded
from headprune_utils.measure.head_scores import (
    ablation_importance, confidence, confidence_from_maps, entropy, entropy_from_maps, query_mask, rank_agreement,
    relevance,
)
from headprune_utils.measure.importance import head_importance
from headprune_utils.tasks.metrics import main_score
from headprune_utils.model.pruning import prune_heads
from headprune_utils.train.training import evaluate

ATT = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])  # lengths 5 and 4


def hand_maps():
    """One layer, 3 heads: 0 one-hot on key 0, 1 uniform over the real keys, 2 absent (NaN)."""
    b, s = ATT.shape
    a = torch.zeros(b, 3, s, s)
    a[:, 0, :, 0] = 1.0
    for i, n in enumerate(ATT.sum(1).tolist()):
        a[i, 1, :, :n] = 1.0 / n
    a[:, 2] = float("nan")
    return [a]


def test_query_mask_drops_first_last_padding_and_special_ids():
    ids = torch.tensor([[2, 7, 3, 8, 3], [2, 9, 9, 3, 0]])
    q = query_mask(ATT, ids)
    assert q.tolist() == [[False, True, True, True, False], [False, True, True, False, False]]
    q = query_mask(ATT, ids, special_ids={3})
    assert q.tolist() == [[False, True, False, True, False], [False, True, True, False, False]]
    assert query_mask(ATT, exclude_special=False).tolist() == ATT.bool().tolist()
    with pytest.raises(ValueError, match="input_ids"):
        query_mask(ATT, special_ids={3})


def test_query_mask_finds_the_special_tokens_by_the_mask_under_left_padding():
    """Left padding: the first and last REAL tokens are dropped (they were positions 0 and length - 1 before, a
    real middle token dropped and the last one kept); a sentence scores the same padded on either side."""
    left = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0]])
    assert query_mask(left).tolist() == [[False, False, False, True, True, True, False],
                                         [False, True, True, True, True, True, False], [False] * 7]
    from headprune_utils.model import models

    model = models.tiny_causal_lm(60, seed=0, pad_token_id=0, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2).eval()
    ids = torch.randint(3, 60, (1, 6), generator=torch.Generator().manual_seed(0))
    pad = torch.zeros(1, 2, dtype=torch.long)
    alone = {"input_ids": ids, "attention_mask": torch.ones(1, 6, dtype=torch.long)}
    left = {"input_ids": torch.cat([pad, ids], 1), "attention_mask": torch.tensor([[0, 0] + [1] * 6])}
    right = {"input_ids": torch.cat([ids, pad], 1), "attention_mask": torch.tensor([[1] * 6 + [0, 0]])}
    for score in (confidence, entropy):  # rotary positions are relative: the same sentence, the same maps
        base = score(model, [alone])
        for batch in (left, right):
            assert torch.allclose(score(model, [batch]), base, atol=1e-5), score.__name__


def test_confidence_and_entropy_from_hand_maps():
    maps = hand_maps()
    q = query_mask(ATT)  # 3 queries in the first row (n = 5), 2 in the second (n = 4)
    conf = confidence_from_maps(maps, q)
    assert conf.shape == (1, 3)
    assert conf[0, 0] == pytest.approx(1.0)
    assert conf[0, 1] == pytest.approx((3 * (1 / 5) + 2 * (1 / 4)) / 5)  # token-weighted, pooled
    assert math.isnan(conf[0, 2])
    ent = entropy_from_maps(maps, q)
    assert ent[0, 0] == pytest.approx(0.0, abs=1e-7)
    assert ent[0, 1] == pytest.approx((3 * math.log(5) + 2 * math.log(4)) / 5, rel=1e-6)
    assert math.isnan(ent[0, 2])
    with pytest.raises(ValueError, match="no query"):
        confidence_from_maps(maps, torch.zeros_like(q))


def batches():
    return [tiny_inputs(batch=3, seq=9, seed=1), tiny_inputs(batch=2, seq=6, seed=2)]


@pytest.mark.parametrize("exclude_special", [True, False])
def test_streaming_confidence_and_entropy_equal_pooled_maps(exclude_special):
    model = tiny_model(initializer_range=0.5)
    bs = batches()
    got_c = confidence(model, bs, exclude_special=exclude_special)
    got_e = entropy(model, bs, exclude_special=exclude_special)
    # by hand: every query's max / entropy, pooled over the two batches
    mx, ent = [], []
    for b in bs:
        q = query_mask(b["attention_mask"], exclude_special=exclude_special)
        per_layer = [(a.amax(-1), -(a * a.clamp_min(1e-30).log()).sum(-1)) for a in attention_maps(model, b)]
        mx.append(torch.stack([m.permute(1, 0, 2)[:, q] for m, _ in per_layer]))  # [L, H, n_q]
        ent.append(torch.stack([e.permute(1, 0, 2)[:, q] for _, e in per_layer]))
    torch.testing.assert_close(got_c, torch.cat(mx, -1).mean(-1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_e, torch.cat(ent, -1).mean(-1), rtol=1e-5, atol=1e-5)
    assert got_c.shape == (3, 4) and bool((got_c <= 1).all()) and bool((got_c > 0).all())


def test_confidence_is_nan_for_pruned_heads():
    model = prune_heads(tiny_model(), torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0]]))
    c = confidence(model, batches())
    assert torch.isnan(c[0, 1]) and bool(torch.isnan(c[2]).all())
    assert int(torch.isnan(c).sum()) == 5


def tiny_encoded(n=12, seed=3):
    rng = np.random.default_rng(seed)
    ids = [[2] + rng.integers(5, 120, size=int(rng.integers(3, 9))).tolist() + [3] for _ in range(n)]
    return Encoded(input_ids=ids, token_type_ids=None, labels=rng.integers(0, 3, size=n), pad_id=0)


def test_ablation_importance_equals_one_gated_evaluation_per_head():
    model = tiny_model(initializer_range=0.5)
    prune_heads(model, torch.tensor([[1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 1, 1]]))
    enc = tiny_encoded()
    got = ablation_importance(model, enc, "MNLI", batch_size=5)
    assert got.shape == (3, 4) and torch.isnan(got[1, 1]) and int(torch.isnan(got).sum()) == 1
    full = main_score("MNLI", evaluate(model, enc, "MNLI"))
    want = torch.full((3, 4), float("nan"))
    for layer, head in [(l, h) for l in range(3) for h in range(4) if (l, h) != (1, 1)]:
        m = torch.ones(3, 4)
        m[layer, head] = 0
        want[layer, head] = full - main_score("MNLI", evaluate(model, enc, "MNLI", gates=m))
    torch.testing.assert_close(got, want, equal_nan=True)
    assert bool((got[~torch.isnan(got)] != 0).any())  # the case is not vacuous


def labelled_batches():
    a = {**tiny_inputs(batch=3, seq=9, seed=1), "labels": torch.tensor([0, 2, 1])}
    b = {**tiny_inputs(batch=2, seq=7, seed=2), "labels": torch.tensor([1, 1])}
    return [a, b]


def test_relevance_unnormalised_equals_per_example_gate_gradient():
    """Gradient x context of a head = d loss / d gate at gate 1 (zero ablation), so the unnormalised relevance
    equals Michel et al.'s per-example importance without layer normalisation."""
    model = tiny_model(dtype=torch.float64, initializer_range=0.2)
    before = [p.detach().clone() for p in model.parameters()]
    got = relevance(model, labelled_batches(), normalize=False)
    want = head_importance(model, labelled_batches(), per_example=True, normalize_layers=False)
    torch.testing.assert_close(got.double(), want.double(), rtol=1e-4, atol=1e-7)
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_relevance_normalised_rows_sum_to_one_and_pruned_heads_are_nan():
    model = tiny_model(initializer_range=0.2)
    prune_heads(model, torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1], [1, 1, 1, 1]]))
    for p in model.parameters():  # a frozen model must work too
        p.requires_grad_(False)
    for target in ("loss", "top_logit"):
        r = relevance(model, labelled_batches(), target=target)
        assert torch.isnan(r[0, 2])
        torch.testing.assert_close(torch.nansum(r, dim=1), torch.ones(3))
        assert bool((r[~torch.isnan(r)] >= 0).all())


def test_relevance_top_logit_matches_per_example_gradient_of_the_top_logit():
    from headprune_utils.model.gates import head_gates

    model = tiny_model(dtype=torch.float64, initializer_range=0.2)
    bs = labelled_batches()
    got = relevance(model, bs, normalize=False, target="top_logit")
    total, n = torch.zeros(3, 4, dtype=torch.float64), 0
    for b in bs:
        for i, length in enumerate(b["attention_mask"].sum(1).tolist()):
            g = torch.ones(3, 4, dtype=torch.float64, requires_grad=True)
            with head_gates(model, g):
                logits = model(input_ids=b["input_ids"][i : i + 1, :length]).logits
            (grad,) = torch.autograd.grad(logits.max(), g)
            total += grad.abs()
            n += 1
    torch.testing.assert_close(got.double(), total / n, rtol=1e-4, atol=1e-7)


def test_rank_agreement_matches_scipy_and_skips_nan():
    a = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = -a
    c = torch.tensor([[3.0, 1.0, 2.0], [float("nan"), 6.0, 4.0]])
    df = rank_agreement({"a": a, "b": b, "c": c})
    assert list(df[["a", "b"]].itertuples(index=False, name=None)) == [("a", "b"), ("a", "c"), ("b", "c")]
    ab = df.iloc[0]
    assert ab.spearman == pytest.approx(-1.0) and ab.kendall == pytest.approx(-1.0) and ab.n == 6
    ac = df.iloc[1]
    keep = ~torch.isnan(c.flatten())
    x, y = a.flatten()[keep].numpy(), c.flatten()[keep].numpy()
    assert ac.n == 5
    assert ac.spearman == pytest.approx(stats.spearmanr(x, y)[0])
    assert ac.kendall_p == pytest.approx(stats.kendalltau(x, y)[1])
    with pytest.raises(ValueError, match="shapes"):
        rank_agreement({"a": a, "d": torch.zeros(3, 2)})


@pytest.mark.parametrize("regression", [False, True])
def test_ablation_loss_and_confidence_entropy_equal_the_plain_computations(regression):
    """The one-sweep ablation loss and the one-forward confidence/entropy equal the plain per-head computations."""
    from headprune_utils.measure import head_scores
    from headprune_utils.model.gates import head_gates
    from headprune_utils.studies import glue_workbench as common

    model = tiny_model(initializer_range=0.3, num_labels=1 if regression else 3,
                       problem_type="regression" if regression else "single_label_classification")
    rng = np.random.default_rng(0)
    ids = [[2] + rng.integers(5, 120, size=int(rng.integers(3, 9))).tolist() + [3] for _ in range(10)]
    labels = rng.standard_normal(10).astype(np.float32) if regression else rng.integers(0, 3, 10)
    enc = Encoded(ids, None, labels, 0)
    got = head_scores.ablation_loss(model, enc, "STS-B" if regression else "MNLI")
    batches = common.batches(enc, torch.device("cpu"))

    def loss(gates=None):
        total = 0.0
        with torch.no_grad():
            for b in batches:
                if gates is None:
                    out = model(**b)
                else:
                    with head_gates(model, gates):
                        out = model(**b)
                total += float(out.loss) * len(b["labels"])
        return total / len(enc)

    full = loss()
    want = torch.zeros(3, 4)
    for layer in range(3):
        for head in range(4):
            m = torch.ones(3, 4)
            m[layer, head] = 0
            want[layer, head] = loss(m) - full
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert bool((want != 0).any())
    conf, ent = head_scores.confidence_entropy(model, batches, [0, 2, 3])
    torch.testing.assert_close(conf, head_scores.confidence(model, batches, special_ids=[0, 2, 3]))
    torch.testing.assert_close(ent, head_scores.entropy(model, batches, special_ids=[0, 2, 3]))


def numpy_confidence_without_special_keys(maps: np.ndarray, att: np.ndarray, ids: np.ndarray, special: set) -> np.ndarray:
    """Independent of the package: for every real, non-special query (not the first/last real token, not an id in
    ``special``), the largest weight on a real, non-special key, NOT renormalised; the mean over all such queries.
    maps: ``[batch, heads, seq, seq]``."""
    b, h, s, _ = maps.shape
    vals = [[] for _ in range(h)]
    for i in range(b):
        n = int(att[i].sum())
        ok = [t for t in range(n) if 0 < t < n - 1 and int(ids[i, t]) not in special]
        for head in range(h):
            for q in ok:
                vals[head].append(max(maps[i, head, q, k] for k in ok))
    return np.array([np.mean(v) for v in vals])


def test_confidence_without_special_keys_by_hand():
    """A hand-made map: head 0 parks 0.9 on [CLS] (a "no-op" head), head 1 puts 0.7 on one word, head 2 0.6 on [SEP].
    Without special keys, head 0's confidence is the largest weight left on a word (0.06, not renormalised to a
    near-uniform or peaked distribution), head 1's is unchanged, head 2's the largest word weight."""
    att = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]])  # [CLS] w w (w|[SEP]) ... [SEP] pad
    ids = torch.tensor([[2, 7, 8, 9, 10, 3], [2, 7, 3, 8, 3, 0]])  # the second row: a pair, middle [SEP] at 2
    b, s = ids.shape
    rng = np.random.default_rng(0)
    a = np.zeros((b, 3, s, s))
    for i in range(b):
        n = int(att[i].sum())
        for q in range(s):
            rest = rng.dirichlet(np.ones(n - 1))
            a[i, 0, q, :n] = np.r_[0.9, 0.1 * rest]                  # 0.9 on [CLS]
            row = 0.3 * rng.dirichlet(np.ones(n))
            row[1] += 0.7                                            # 0.7 on the first word
            a[i, 1, q, :n] = row
            row = 0.4 * rng.dirichlet(np.ones(n))
            row[n - 1] += 0.6                                        # 0.6 on the final [SEP]
            a[i, 2, q, :n] = row
    maps = [torch.tensor(a, dtype=torch.float32)]
    q = query_mask(att, ids, special_ids={0, 2, 3})
    got = confidence_from_maps(maps, q, keys=q)
    want = numpy_confidence_without_special_keys(a, att.numpy(), ids.numpy(), {0, 2, 3})
    np.testing.assert_allclose(got[0].numpy(), want, rtol=1e-5)
    plain = confidence_from_maps(maps, q)
    assert plain[0, 0] > 0.89 and got[0, 0] < 0.1  # the no-op head: confident only with [CLS] counted
    assert got[0, 1] == pytest.approx(float(plain[0, 1]))  # its max is on a word anyway
    assert bool((got <= plain + 1e-7).all())  # a max over fewer keys of the same weights


def test_attention_scores_in_one_forward_equal_the_separate_scores():
    """On a tiny model: confidence and entropy equal confidence_entropy's; the special-key-free confidence equals the
    numpy computation on the model's own maps, and is never above the plain confidence."""
    from headprune_utils.measure import head_scores

    model = tiny_model(initializer_range=0.5)
    bs = [tiny_inputs(batch=3, seq=9, seed=1), tiny_inputs(batch=2, seq=6, seed=2)]
    for b in bs:  # real special tokens: [CLS] first, [SEP] last (and one in the middle of the first row)
        n = b["attention_mask"].sum(1)
        b["input_ids"][:, 0] = 2
        b["input_ids"][torch.arange(len(n)), n - 1] = 3
    bs[0]["input_ids"][0, 3] = 3
    got = head_scores.attention_scores(model, bs, [0, 2, 3])
    conf, ent = head_scores.confidence_entropy(model, bs, [0, 2, 3])
    torch.testing.assert_close(got["confidence"], conf)
    torch.testing.assert_close(got["entropy"], ent)
    num, den = np.zeros(12), 0
    for b in bs:
        maps = np.stack([m.numpy() for m in attention_maps(model, b)])  # [L, batch, H, seq, seq]
        n_q = int(query_mask(b["attention_mask"], b["input_ids"], True, [0, 2, 3]).sum())
        per = [numpy_confidence_without_special_keys(maps[layer], b["attention_mask"].numpy(), b["input_ids"].numpy(),
                                                     {0, 2, 3}) for layer in range(3)]
        num, den = num + n_q * np.concatenate(per), den + n_q
    np.testing.assert_allclose(got["confidence_no_special_keys"].flatten().numpy(), num / den, rtol=1e-5)
    assert bool((got["confidence_no_special_keys"] <= got["confidence"] + 1e-7).all())


def test_a_partly_nan_head_is_a_fault_not_an_absent_head():
    """An absent head is NaN everywhere; a head with a NaN or inf weight in a real query's row only is a numerical
    fault: the mean scores and the argmax counts refuse it, naming the layer and head, where they read it as an
    absent head (a NaN mean) or as a real one (an argmax that picks the NaN). NaN in padded rows is not looked at."""
    from headprune_utils.measure.specialized import positional_from_maps, rare_counts_from_maps
    q = query_mask(ATT)
    for bad in (float("nan"), float("inf")):
        maps = hand_maps()
        maps[0][0, 1, 1, 0] = bad  # one weight of head 1, a real query
        for score in (confidence_from_maps, entropy_from_maps, positional_from_maps):
            with pytest.raises(ValueError, match=r"layer 0, heads \[1\] have NaN or infinite attention"):
                score(maps, q)
        with pytest.raises(ValueError, match=r"layer 0, heads \[1\]"):
            rare_counts_from_maps(maps, torch.arange(10).view(2, 5), q, {})
    maps = hand_maps()
    maps[0][1, 1, 4, :] = float("nan")  # the padded query of sentence 1: no score reads it
    assert torch.isnan(confidence_from_maps(maps, q)[0, 2]) and torch.isfinite(confidence_from_maps(maps, q)[0, :2]).all()


def test_attention_maps_refuse_a_present_head_with_nan_weights():
    """A model whose weights carry a NaN gives NaN maps: an error naming the layer and its present heads, not
    maps that every score would read as heads pruned away."""
    model = tiny_model()
    with torch.no_grad():
        model.bert.encoder.layer[1].attention.self.query.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"attention_maps: layer 1, heads \[0\] \(present\) have NaN"):
        attention_maps(model, tiny_inputs())
    pruned = prune_heads(tiny_model(), torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]]))
    with torch.no_grad():  # head 0 of layer 1 is absent: the first PRESENT head (id 1) is named by its own id
        pruned.bert.encoder.layer[1].attention.self.query.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"layer 1, heads \[1\] \(present\)"):
        attention_maps(pruned, tiny_inputs())
