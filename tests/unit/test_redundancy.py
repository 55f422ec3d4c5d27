"""Redundancy matrices between heads against scipy, hand values and plain loops; padding, chunking, streaming."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.spatial import procrustes
from scipy.spatial.distance import cosine, jensenshannon
from scipy.stats import pearsonr

from conftest import tiny_inputs, tiny_model
from headprune_utils.model.attention import attention_maps, js_divergence
from headprune_utils.model.pruning import prune_heads
from headprune_utils.measure.redundancy import (
    METRICS, SENTENCE_METRICS, TOKEN_METRICS, RedundancyAccumulator, redundancy_matrices, sentence_distances,
    stack_heads,
)

LENGTHS = (6, 4, 1, 4, 3)  # ragged, with a 1-token sentence and two of equal length


def make_maps(lengths=LENGTHS, n_heads=5, seq=7, seed=0, left=False):
    """Attention-like maps [batch, heads, seq, seq] (float64): rows of real queries are distributions over the
    real keys (padded keys 0); rows of padded queries are junk, which the masks must ignore."""
    g = torch.Generator().manual_seed(seed)
    b = len(lengths)
    mask = torch.zeros(b, seq, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, slice(seq - n, seq) if left else slice(0, n)] = 1
    scores = torch.randn(b, n_heads, seq, seq, generator=g, dtype=torch.float64) * 2
    maps = torch.softmax(scores.masked_fill(~mask.bool()[:, None, None, :], float("-inf")), dim=-1)
    junk = torch.rand(b, n_heads, seq, seq, generator=g, dtype=torch.float64)
    pad_rows = ~mask.bool()[:, None, :, None].expand_as(maps)
    return torch.where(pad_rows, junk, maps), mask


def real_block(maps, mask, b, head):
    keep = mask[b].bool()
    return maps[b, head][keep][:, keep].numpy()


def check_matrix(d):
    assert d.dtype == torch.float64
    assert torch.equal(d, d.transpose(-1, -2))
    assert torch.equal(torch.diagonal(d, dim1=-2, dim2=-1), torch.zeros(d.shape[:-1], dtype=torch.float64))
    assert bool(((d >= 0) & (d <= 1)).all())


# ----------------------------------------------------------------------------- basic invariants
@pytest.mark.parametrize("metric", METRICS)
def test_symmetric_zero_diagonal_bounded_and_zero_for_identical_heads(metric):
    maps, mask = make_maps()
    maps[:, 3] = maps[:, 1]  # heads 1 and 3 identical
    d = sentence_distances(maps, mask, metric)
    assert d.shape == (len(LENGTHS), 5, 5)
    check_matrix(d)
    assert float(d[:, 1, 3].abs().max()) < 1e-7
    assert float(d[0].sum()) > 1  # the other heads differ


def test_identical_float32_heads_from_a_model_are_zero():
    maps = attention_maps(tiny_model(), tiny_inputs())  # float32: row sums are 1 +- 1e-7
    stacked = stack_heads(maps + maps)  # heads n and n + 12 identical
    for metric in METRICS:
        d = sentence_distances(stacked, tiny_inputs()["attention_mask"], metric)
        same = torch.diagonal(d[:, :12, 12:], dim1=-2, dim2=-1)
        assert float(same.max()) < 1e-7, metric


# ----------------------------------------------------------------------------- against independent computations
def per_token_reference(metric, p, q):
    if metric == "js":
        return jensenshannon(p, q) ** 2 / math.log(2)
    if metric == "hellinger":
        return math.sqrt(max(0.0, 1.0 - float(np.sum(np.sqrt(p * q)))))
    if metric == "cosine":
        return cosine(p, q)
    return (1 - pearsonr(p, q)[0]) / 2


@pytest.mark.parametrize("metric", TOKEN_METRICS)
def test_token_metrics_match_scipy_mean_over_real_queries(metric):
    lengths = (6, 4, 3, 4)  # >= 2 real keys: pearsonr is defined
    maps, mask = make_maps(lengths)
    d = sentence_distances(maps, mask, metric)
    for b, n in enumerate(lengths):
        for i in range(5):
            for j in range(5):
                if i == j:
                    continue
                x, y = real_block(maps, mask, b, i), real_block(maps, mask, b, j)
                ref = np.mean([per_token_reference(metric, p, q) for p, q in zip(x, y)])
                assert float(d[b, i, j]) == pytest.approx(ref, abs=1e-13)


def test_js_smoothing_is_attention_js_divergence_over_the_real_keys():
    maps, mask = make_maps()
    d = sentence_distances(maps, mask, "js", js_eps=0.001)
    for b, n in enumerate(LENGTHS):
        x = torch.from_numpy(np.stack([real_block(maps, mask, b, h) for h in range(5)]))  # [H, n, n]
        ref = js_divergence(x[:, None], x[None, :], eps=0.001).mean(-1) / math.log(2)  # [H, H]
        ref.fill_diagonal_(0)
        assert torch.allclose(d[b], ref, atol=1e-14, rtol=0)
    assert not torch.allclose(d, sentence_distances(maps, mask, "js"))
    with pytest.raises(ValueError, match="js_eps"):
        sentence_distances(maps, mask, "js", js_eps=1.5)


def test_procrustes_matches_scipy_disparity():
    lengths = (6, 4, 3, 4)
    maps, mask = make_maps(lengths)
    d = sentence_distances(maps, mask, "procrustes")
    for b in range(len(lengths)):
        for i in range(5):
            for j in range(i + 1, 5):
                _, _, disparity = procrustes(real_block(maps, mask, b, i), real_block(maps, mask, b, j))
                assert float(d[b, i, j]) == pytest.approx(disparity, abs=1e-13)


def dcor_loop(x, y):
    """1 - distance correlation (V-statistic), written out with loops."""
    n = len(x)

    def centred(z):
        a = [[math.dist(z[i], z[j]) for j in range(n)] for i in range(n)]
        row = [sum(a[i]) / n for i in range(n)]
        col = [sum(a[i][j] for i in range(n)) / n for j in range(n)]
        grand = sum(row) / n
        return [[a[i][j] - row[i] - col[j] + grand for j in range(n)] for i in range(n)]

    a, b = centred(x), centred(y)
    mean = lambda u, v: sum(u[i][j] * v[i][j] for i in range(n) for j in range(n)) / n**2  # noqa: E731
    return 1 - math.sqrt(max(0.0, mean(a, b)) / math.sqrt(mean(a, a) * mean(b, b)))


def test_dcor_matches_a_loop_implementation():
    lengths = (6, 4, 3, 4)
    maps, mask = make_maps(lengths)
    d = sentence_distances(maps, mask, "dcor")
    for b in range(len(lengths)):
        for i in range(5):
            for j in range(i + 1, 5):
                ref = dcor_loop(real_block(maps, mask, b, i), real_block(maps, mask, b, j))
                assert float(d[b, i, j]) == pytest.approx(ref, abs=1e-13)


def test_dcor_and_procrustes_invariant_to_scaling_rotation_and_shift():
    g = torch.Generator().manual_seed(3)
    x = torch.rand(6, 6, generator=g, dtype=torch.float64)
    rot, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))
    y = 2.5 * x @ rot + torch.randn(1, 6, generator=g, dtype=torch.float64)
    maps, mask = torch.stack([x, y])[None], torch.ones(1, 6, dtype=torch.long)
    for metric in SENTENCE_METRICS:
        assert float(sentence_distances(maps, mask, metric)[0, 0, 1]) == pytest.approx(0.0, abs=1e-12)


def test_hand_values():
    # one 2-token sentence; head 0 attends to token 0 from both queries, head 1 to [.5, .5] then [0, 1]
    maps = torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[0.5, 0.5], [0.0, 1.0]]], dtype=torch.float64)[None]
    mask = torch.ones(1, 2, dtype=torch.long)
    want = {  # (query 0 + query 1) / 2
        "js": (0.75 * math.log2(4 / 3) + 1.0) / 2,  # JS([1,0],[.5,.5]) = 3/4 ln(4/3); disjoint = ln 2
        "hellinger": (math.sqrt(1 - math.sqrt(0.5)) + 1.0) / 2,
        "cosine": (1 - math.sqrt(0.5) + 1.0) / 2,
        "pearson": (0.5 + 1.0) / 2,  # [.5, .5] has zero variance: r := 0; then r = -1
        "dcor": 1.0,  # head 0's rows are all equal: zero distance variance, and head 1 differs
        "procrustes": 1.0,
    }
    for metric, value in want.items():
        assert float(sentence_distances(maps, mask, metric)[0, 0, 1]) == pytest.approx(value, abs=1e-15), metric
    # 3 tokens, one-hot rows: by hand dCor^2 = 12 / sqrt(18 * 16) = 2^-1/2; disparity = 1 - (1/sqrt 2)^2
    x = torch.eye(3, dtype=torch.float64)
    y = torch.tensor([[1.0, 0, 0], [1, 0, 0], [0, 1, 0]], dtype=torch.float64)
    maps, mask = torch.stack([x, y])[None], torch.ones(1, 3, dtype=torch.long)
    assert float(sentence_distances(maps, mask, "dcor")[0, 0, 1]) == pytest.approx(1 - 2**-0.25, abs=1e-15)
    assert float(sentence_distances(maps, mask, "procrustes")[0, 0, 1]) == pytest.approx(0.5, abs=1e-15)


def test_two_token_sentences_are_always_identical_for_sentence_metrics():
    # centred 2 x 2 maps are rank 1 along the same query direction (the CCA degeneracy in miniature)
    maps, mask = make_maps((2, 2), n_heads=6, seq=2, seed=4)
    for metric in SENTENCE_METRICS:
        assert float(sentence_distances(maps, mask, metric).abs().max()) < 1e-12


# ----------------------------------------------------------------------------- zero-variance rules
def test_zero_variance_rules():
    n = 3
    uniform = torch.full((n, n), 1 / n, dtype=torch.float64)
    constant_rows = torch.tensor([[0.2, 0.3, 0.5]] * n, dtype=torch.float64)  # all rows equal, not uniform
    varied = torch.softmax(torch.arange(9, dtype=torch.float64).view(n, n), -1)
    maps = torch.stack([uniform, uniform.clone(), constant_rows, constant_rows.clone(), varied])[None]
    mask = torch.ones(1, n, dtype=torch.long)
    d = {m: sentence_distances(maps, mask, m)[0] for m in METRICS}
    # pearson: uniform rows have zero variance: r = 1 against an equal row, r = 0 (distance 1/2) otherwise
    assert float(d["pearson"][0, 1]) == 0.0
    assert float(d["pearson"][0, 2]) == 0.5 and float(d["pearson"][0, 4]) == 0.5
    assert float(d["pearson"][2, 3]) == pytest.approx(0.0, abs=1e-15)  # constant_rows has variance
    for metric in SENTENCE_METRICS:  # all rows equal: 0 against the same map, else 1
        assert float(d[metric][0, 1]) == 0.0 and float(d[metric][2, 3]) == 0.0
        assert float(d[metric][0, 2]) == 1.0 and float(d[metric][0, 4]) == 1.0 and float(d[metric][2, 4]) == 1.0
    # a 1-token sentence: every map is [[1]]: all metrics 0
    one = sentence_distances(torch.ones(1, 4, 1, 1, dtype=torch.float64), torch.ones(1, 1), "pearson")
    assert torch.equal(one, torch.zeros(1, 4, 4, dtype=torch.float64))
    for metric in METRICS:
        assert float(sentence_distances(torch.ones(1, 4, 1, 1), torch.ones(1, 1), metric).abs().max()) == 0.0


# ----------------------------------------------------------------------------- padding, chunking, streaming
@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
@pytest.mark.parametrize("metric", METRICS)
def test_padded_batch_equals_each_sentence_alone(metric, left):
    maps, mask = make_maps(left=left)
    d = sentence_distances(maps, mask, metric)
    for b, n in enumerate(LENGTHS):
        keep = mask[b].bool()
        alone = maps[b : b + 1][:, :, keep][:, :, :, keep]
        ref = sentence_distances(alone, torch.ones(1, n, dtype=torch.long), metric)
        assert torch.allclose(d[b], ref[0], atol=1e-13, rtol=0)


@pytest.mark.parametrize("metric", METRICS)
def test_chunk_size_does_not_change_the_result(metric):
    maps, mask = make_maps()
    assert torch.allclose(sentence_distances(maps, mask, metric, chunk=1),
                          sentence_distances(maps, mask, metric), atol=1e-14, rtol=0)


def test_streaming_two_batches_equals_one_batch_sentence_weighted():
    maps, mask = make_maps()
    first, second = slice(0, 2), slice(2, 5)
    one = RedundancyAccumulator(5)
    one.add(maps, mask)
    two = RedundancyAccumulator(5)
    two.add(maps[first, :, :6, :6], mask[first, :6])  # a narrower batch, as real batches are
    two.add(maps[second], mask[second])
    assert one.n_sentences == two.n_sentences == 5
    a, b = one.result(), two.result()
    assert set(a) == set(METRICS)
    for metric in METRICS:
        assert a[metric].shape == (5, 5) and a[metric].dtype == np.float64
        assert np.allclose(a[metric], b[metric], atol=1e-14, rtol=0)
        mean = sentence_distances(maps, mask, metric).mean(0).numpy()  # each sentence weight 1
        assert np.allclose(a[metric], mean, atol=1e-14, rtol=0)


def test_accumulator_takes_the_per_layer_list_and_checks_its_input():
    maps = attention_maps(tiny_model(), tiny_inputs())
    mask = tiny_inputs()["attention_mask"]
    acc = RedundancyAccumulator(12, metrics=("js", "dcor"))
    acc.add(maps, mask)
    acc.add(stack_heads(maps), mask)
    assert acc.n_sentences == 6 and set(acc.result()) == {"js", "dcor"}
    with pytest.raises(ValueError, match="12"):
        RedundancyAccumulator(8).add(maps, mask)
    with pytest.raises(ValueError, match="attention_mask"):
        acc.add(maps, mask[:, :5])
    with pytest.raises(ValueError, match="no sentences"):
        RedundancyAccumulator(12).result()


def test_stack_heads_is_layer_major():
    maps = attention_maps(tiny_model(), tiny_inputs())
    stacked = stack_heads(maps)
    assert stacked.shape == (3, 12, 9, 9)
    for layer in range(3):
        for head in range(4):
            assert torch.equal(stacked[:, layer * 4 + head], maps[layer][:, head])


# ----------------------------------------------------------------------------- errors
def test_unknown_metric_is_rejected_before_any_work():
    maps, mask = make_maps()
    with pytest.raises(ValueError, match="allowed are js, hellinger"):
        sentence_distances(maps, mask, "cca")
    with pytest.raises(ValueError, match="bhattacharyya"):
        RedundancyAccumulator(5, ["js", "bhattacharyya"])

    def batches():
        raise AssertionError("batches were read before the metrics were checked")
        yield

    with pytest.raises(ValueError, match="allowed"):
        redundancy_matrices(tiny_model(), batches(), metrics=["cca"])


def test_pruned_heads_nan_maps_are_rejected():
    model = tiny_model()
    prune_heads(model, torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.float32))
    maps = attention_maps(model, tiny_inputs())
    with pytest.raises(ValueError, match=r"flat heads \[1\]"):
        stack_heads(maps)
    with pytest.raises(ValueError, match="NaN"):
        RedundancyAccumulator(12).add(maps, tiny_inputs()["attention_mask"])
    with pytest.raises(ValueError, match="NaN"):
        sentence_distances(torch.cat(maps, 1), tiny_inputs()["attention_mask"], "js")


def test_shapes_are_validated():
    maps, mask = make_maps()
    with pytest.raises(ValueError, match="seq, seq"):
        sentence_distances(maps[..., :5], mask, "js")
    with pytest.raises(ValueError, match="attention_mask"):
        sentence_distances(maps, mask[:3], "js")
    with pytest.raises(ValueError, match="real token"):
        sentence_distances(maps, torch.zeros_like(mask), "js")


# ----------------------------------------------------------------------------- the model-level entry point
def test_redundancy_matrices_equals_a_manual_loop_over_attention_maps():
    model = tiny_model(dtype=torch.float64)
    batches = [{**tiny_inputs(seed=1), "labels": torch.tensor([0, 1, 2])}, tiny_inputs(batch=2, seq=7, seed=2)]
    got = redundancy_matrices(model, iter(batches), progress=True)
    for metric in METRICS:
        per_sentence = []
        for batch in batches:
            stacked = torch.cat(attention_maps(model, batch), dim=1)
            for b in range(stacked.shape[0]):
                keep = batch["attention_mask"][b].bool()
                alone = stacked[b : b + 1][:, :, keep][:, :, :, keep]
                per_sentence.append(sentence_distances(alone, torch.ones(1, int(keep.sum())), metric)[0])
        want = torch.stack(per_sentence).mean(0).numpy()
        assert got[metric].shape == (12, 12)
        assert np.allclose(got[metric], want, atol=1e-13, rtol=0), metric


