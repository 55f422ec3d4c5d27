"""Clustering of heads, matrix comparison and the zero-shot mask, on small hand-made distance matrices."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from headprune_utils.measure import clustering


def blocks(sizes, within=0.1, between=0.9, noise=0.02, seed=0) -> np.ndarray:
    """A distance matrix with clear blocks (clusters) of the given sizes."""
    rng = np.random.default_rng(seed)
    lab = np.repeat(np.arange(len(sizes)), sizes)
    d = np.where(lab[:, None] == lab[None, :], within, between) + noise * rng.random((len(lab), len(lab)))
    d = (d + d.T) / 2
    np.fill_diagonal(d, 0)
    return d


def test_check_distance_rejects_bad_matrices():
    with pytest.raises(ValueError, match="square"):
        clustering.check_distance(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="symmetric"):
        clustering.check_distance(np.array([[0, 1.0], [0.5, 0]]))
    with pytest.raises(ValueError, match="NaN"):
        clustering.check_distance(np.array([[0, np.nan], [np.nan, 0]]))
    with pytest.raises(ValueError, match="negative"):
        clustering.check_distance(np.array([[0, -1.0], [-1.0, 0]]))


def test_silhouette_matches_a_hand_computation():
    # points on a line 0, 1, 10, 12; clusters {0,1}, {2,3}
    x = np.array([0.0, 1.0, 10.0, 12.0])
    d = np.abs(x[:, None] - x[None, :])
    lab = np.array([1, 1, 2, 2])
    s = []
    for i in range(4):
        same = [j for j in range(4) if lab[j] == lab[i] and j != i]
        other = [j for j in range(4) if lab[j] != lab[i]]
        a, b = d[i, same].mean(), d[i, other].mean()
        s.append((b - a) / max(a, b))
    assert clustering.silhouette(d, lab) == pytest.approx(np.mean(s))


def test_cluster_heads_finds_the_blocks_and_chooses_k_by_silhouette():
    d = blocks([5, 7, 4])
    cl = clustering.cluster_heads(d, k_range=(2, 8))
    assert cl.k == 3
    truth = np.repeat([0, 1, 2], [5, 7, 4])
    assert clustering.adjusted_rand(cl.labels, truth) == pytest.approx(1.0)
    assert max(cl.silhouette_by_k, key=cl.silhouette_by_k.get) == 3
    assert sorted(cl.order.tolist()) == list(range(16))
    # the dendrogram order keeps each block contiguous
    pos = {h: i for i, h in enumerate(cl.order)}
    for b in range(3):
        idx = sorted(pos[h] for h in np.flatnonzero(truth == b))
        assert idx == list(range(idx[0], idx[0] + len(idx)))
    assert clustering.cluster_heads(d, k=2).k == 2


def test_spectral_clustering_agrees_on_clear_blocks():
    d = blocks([6, 6, 6], seed=3)
    lab = clustering.spectral_heads(d, 3)
    assert clustering.adjusted_rand(lab, np.repeat([0, 1, 2], 6)) == pytest.approx(1.0)


def test_a_single_unlike_head_does_not_make_the_structure():
    """Two real groups plus one head far from all: the plain silhouette prefers splitting off that head
    (k = 2: 12 + 1); with min_size=3 the criterion finds the two groups and sets the lone head aside."""
    d = blocks([6, 6], within=0.3, between=0.6, noise=0.05)
    d = np.pad(d, ((0, 1), (0, 1)), constant_values=0.99)
    d[-1, -1] = 0
    plain = clustering.cluster_heads(d, k_range=(2, 6))
    assert sorted(plain.sizes().tolist()) == [1, 12]
    core = clustering.cluster_heads(d, k_range=(2, 6), min_size=3)
    assert core.n_groups == 2 and core.core.tolist() == [True] * 12 + [False]
    assert clustering.adjusted_rand(core.labels[:12], np.repeat([0, 1], 6)) == pytest.approx(1.0)
    from sklearn.metrics import silhouette_samples
    expect = silhouette_samples(d[:12, :12], core.labels[:12], metric="precomputed").sum() / 13  # the lone head counts 0
    assert core.silhouette == pytest.approx(expect)
    # no cut with two groups of >= 7 heads: NaN silhouette, the smallest k
    none = clustering.cluster_heads(d, k_range=(2, 4), min_size=7)
    assert np.isnan(none.silhouette) and none.k == 2


def test_silhouette_null_is_below_real_structure():
    d = blocks([6, 6, 6])
    obs = clustering.cluster_heads(d, k_range=(2, 6)).silhouette
    null = clustering.silhouette_null(d, (2, 6), n_perm=30)
    assert obs > null.max()  # the shuffled distances (same values, no structure) never cluster as well


def test_mantel_correlation_and_p_value():
    rng = np.random.default_rng(0)
    a = blocks([4, 4, 4], noise=0.3)
    n = a.shape[0]
    iu = np.triu_indices(n, 1)
    b = a + 0.05 * rng.random((n, n))
    b = (b + b.T) / 2
    np.fill_diagonal(b, 0)
    r, p = clustering.mantel(a, b, n_perm=499)
    assert r == pytest.approx(np.corrcoef(a[iu], b[iu])[0, 1])
    assert p < 0.01
    rs, _ = clustering.mantel(a, b, n_perm=0, method="spearman")
    from scipy.stats import spearmanr
    assert rs == pytest.approx(spearmanr(a[iu], b[iu]).statistic)
    # unrelated matrices: r near 0, not significant
    c = rng.random((n, n))
    c = (c + c.T) / 2
    np.fill_diagonal(c, 0)
    r0, p0 = clustering.mantel(a, c, n_perm=499)
    assert p0 > 0.05


def test_mantel_p_value_equals_the_exact_permutation_distribution():
    """n = 4: 24 permutations. With every permutation sampled many times, the Monte-Carlo p approaches the
    exact share of permutations with r >= observed."""
    rng = np.random.default_rng(1)
    a, b = rng.random((4, 4)), rng.random((4, 4))
    a, b = a + a.T, b + b.T
    np.fill_diagonal(a, 0)
    np.fill_diagonal(b, 0)
    iu = np.triu_indices(4, 1)
    r = np.corrcoef(a[iu], b[iu])[0, 1]
    exact = np.mean([np.corrcoef(a[iu], b[np.ix_(p, p)][iu])[0, 1] >= r - 1e-12 for p in itertools.permutations(range(4))])
    _, p = clustering.mantel(a, b, n_perm=20000, seed=2)
    assert p == pytest.approx(exact, abs=0.015)


def test_medoids_by_hand():
    x = np.array([0.0, 1.0, 3.0, 10.0, 11.0])
    d = np.abs(x[:, None] - x[None, :])
    # cluster {0,1,3}: sums 4, 3, 5 -> point 1; cluster {10,11}: tie -> the smaller id
    assert clustering.medoids(d, np.array([1, 1, 1, 2, 2])).tolist() == [1, 3]


def test_zero_shot_mask_keeps_one_medoid_per_cluster_and_the_exact_budget():
    d = blocks([4, 4, 4], seed=5)  # 3 layers x 4 heads, one block per layer
    mask = clustering.zero_shot_mask(d, 3, (3, 4))
    assert mask.shape == (3, 4) and int(mask.sum()) == 3
    assert mask.sum(dim=1).tolist() == [1.0, 1.0, 1.0]  # one representative per block
    for layer in range(3):
        kept = int(torch.nonzero(mask[layer])[0]) + 4 * layer
        members = list(range(4 * layer, 4 * layer + 4))
        sums = d[np.ix_(members, members)].sum(1)
        assert kept == members[int(np.argmin(sums))]
    for n_keep in range(1, 13):
        assert int(clustering.zero_shot_mask(d, n_keep, (3, 4)).sum()) == n_keep
    assert torch.equal(clustering.zero_shot_mask(d, 12, (3, 4)), torch.ones(3, 4))
    with pytest.raises(ValueError, match="n_keep"):
        clustering.zero_shot_mask(d, 0, (3, 4))
    with pytest.raises(ValueError, match="heads"):
        clustering.zero_shot_mask(d, 3, (2, 4))


def test_zero_shot_mask_fills_up_when_ties_leave_fewer_clusters():
    d = np.ones((6, 6)) - np.eye(6)  # every pair equally far: one merge height
    d[0, 1] = d[1, 0] = 0.0
    mask = clustering.zero_shot_mask(d, 5, (2, 3))
    assert int(mask.sum()) == 5


@pytest.mark.parametrize("seed", range(12))
def test_silhouette_widths_are_scikit_learns_bit_for_bit(seed):
    """The silhouette the permutation nulls call tens of thousands of times is scikit-learn's silhouette_samples
    done the same way without its input checks: the same widths to the last bit (singletons 0, labels of any
    values and order), so the nulls' p-values and the chosen k are what scikit-learn's gave."""
    from sklearn.metrics import silhouette_samples, silhouette_score

    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 60))
    x = rng.random((n, 3))
    d = clustering.check_distance(np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1)))
    k = int(rng.integers(2, n))
    labels = rng.choice(np.array([7, 3, 12, 1, 40, 5])[: min(k, 6)] if seed % 2 else np.arange(1, k + 1), n)
    labels[: 2] = np.unique(labels)[:2] if len(np.unique(labels)) >= 2 else [1, 2]
    if not 2 <= len(np.unique(labels)) <= n - 1:
        labels = np.r_[np.ones(n - 1, int), 2]
    mine = clustering.silhouette_widths(d, labels)
    theirs = silhouette_samples(d, labels, metric="precomputed")
    assert mine.tobytes() == theirs.tobytes()
    assert clustering.silhouette(d, labels) == float(silhouette_score(d, labels, metric="precomputed"))
    for size in (2, 3):  # the criterion with small clusters set aside, as it was computed with scikit-learn
        core = np.bincount(labels)[labels] >= size
        if len(np.unique(labels[core])) >= 2 and len(np.unique(labels[core])) <= core.sum() - 1:
            want = float(silhouette_samples(d[np.ix_(core, core)], labels[core], metric="precomputed").sum() / n)
            assert clustering.core_silhouette(d, labels, size) == want


def test_silhouette_widths_need_two_to_n_minus_one_clusters():
    d = blocks([3, 3])
    with pytest.raises(ValueError, match="between 2 and N - 1"):
        clustering.silhouette_widths(d, np.ones(6, int))
    with pytest.raises(ValueError, match="between 2 and N - 1"):
        clustering.silhouette_widths(d, np.arange(6))
