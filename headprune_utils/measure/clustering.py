"""Clusters of heads from a redundancy (distance) matrix, comparison of two matrices, zero-shot masks.

Every matrix here is a square ``[N, N]`` distance matrix over FLAT head ids (layer-major,
``n = layer * n_heads + head``), symmetric with a zero diagonal (``redundancy.py`` makes them).

- :func:`cluster_heads`: agglomerative clustering with average linkage (UPGMA; it uses the distances as they
  are, no Euclidean embedding needed). The number of clusters, when not given, is the ``k`` in ``k_range``
  with the largest mean silhouette width (Rousseeuw 1987) computed on the same precomputed distances, over
  the heads in clusters of at least ``min_size`` heads (smaller clusters hold "unique" heads, reported as
  such: see :func:`core_silhouette`). :func:`silhouette_null` gives the criterion's value on shuffled
  distances (no structure), to judge an observed one against.
- :func:`spectral_heads`: spectral clustering of the affinity ``1 - D`` (a check that the structure is not an
  artefact of the linkage).
- :func:`mantel`: how alike two matrices are: the correlation of their upper triangles, with a Mantel
  permutation test (rows and columns of one matrix permuted together, the null of no association).
- :func:`zero_shot_mask`: Bian et al.'s zero-shot pruning. To keep ``K`` heads, cut the average-linkage tree
  into ``K`` clusters and keep each cluster's medoid (the member with the smallest mean distance to the
  other members); every other head is pruned. No task data is involved, only the matrix.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.cluster import hierarchy
from scipy.spatial.distance import squareform


def check_distance(d: np.ndarray) -> np.ndarray:
    """A float64 copy of ``d`` after checking it is a square, symmetric, finite, non-negative distance matrix."""
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1] or d.shape[0] < 2:
        raise ValueError(f"a distance matrix must be square [N, N] with N >= 2, got shape {list(d.shape)}")
    if not np.all(np.isfinite(d)):
        raise ValueError("the distance matrix has NaN or infinite entries")
    if not np.allclose(d, d.T, atol=1e-9):
        raise ValueError("the distance matrix is not symmetric")
    if (d < -1e-12).any():
        raise ValueError("the distance matrix has negative entries")
    d = (d + d.T) / 2
    np.fill_diagonal(d, 0.0)
    return np.clip(d, 0.0, None)


def upper(d: np.ndarray) -> np.ndarray:
    """The strict upper triangle of a square matrix, as a vector (row-major order)."""
    d = np.asarray(d)
    return d[np.triu_indices(d.shape[0], k=1)]


def linkage(d: np.ndarray, method: str = "average") -> np.ndarray:
    """SciPy linkage matrix of the distance matrix ``d`` (``method``: average, complete, single, weighted)."""
    if method not in ("average", "complete", "single", "weighted"):
        raise ValueError(f"method must be one of average, complete, single, weighted (distance-based), got {method!r}")
    return hierarchy.linkage(squareform(check_distance(d), checks=False), method=method)


def silhouette(d: np.ndarray, labels: np.ndarray) -> float:
    """Mean silhouette width of ``labels`` under the precomputed distances ``d`` (between -1 and 1)."""
    return _silhouette(check_distance(d), np.asarray(labels))


def _silhouette(d: np.ndarray, labels: np.ndarray) -> float:
    """:func:`silhouette` of a matrix :func:`check_distance` has already checked."""
    if not 2 <= len(np.unique(labels)) <= len(labels) - 1:
        return float("nan")
    return float(np.mean(silhouette_widths(d, labels)))


def silhouette_widths(d: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``[N]`` silhouette width of each head under the precomputed distances ``d`` (a checked distance matrix), a
    singleton's 0: scikit-learn's ``silhouette_samples(d, labels, metric="precomputed")`` done the same way (the same
    sums in the same order, so the same bits; tested against it) without its input checks, which took most of the
    time of the permutation nulls that call it tens of thousands of times. Needs 2 <= clusters <= N - 1."""
    codes = np.unique(labels, return_inverse=True)[1].reshape(-1)
    freqs = np.bincount(codes)
    if not 2 <= len(freqs) <= len(codes) - 1:
        raise ValueError(f"a silhouette needs between 2 and N - 1 = {len(codes) - 1} clusters, got {len(freqs)}")
    dist = np.zeros((len(codes), len(freqs)), dtype=d.dtype)
    for i in range(len(codes)):
        dist[i] += np.bincount(codes, weights=d[i], minlength=len(freqs))
    own = (np.arange(len(codes)), codes)
    intra = dist[own]
    dist[own] = np.inf
    dist /= freqs
    inter = dist.min(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        intra /= (freqs - 1).take(codes, mode="clip")
        widths = inter - intra
        widths /= np.maximum(intra, inter)
    return np.nan_to_num(widths)


@dataclass
class Clusters:
    labels: np.ndarray          # [N] cluster id (1..k) of each flat head id
    k: int                      # number of clusters of the tree cut (small ones included)
    order: np.ndarray           # [N] flat head ids in dendrogram leaf order (for ordered heatmaps)
    linkage: np.ndarray         # SciPy linkage matrix
    silhouette: float           # mean silhouette width over the heads in clusters of >= min_size heads
    silhouette_by_k: dict[int, float]  # the criterion over the k tried (empty when k was given)
    min_size: int = 1           # clusters smaller than this hold "unique" heads, not structure

    def sizes(self) -> np.ndarray:
        return np.bincount(self.labels)[1:]

    @property
    def core(self) -> np.ndarray:
        """``[N]`` bool: heads in clusters of at least ``min_size`` heads."""
        return self.sizes()[self.labels - 1] >= self.min_size

    @property
    def n_groups(self) -> int:
        """Clusters of at least ``min_size`` heads."""
        return int((self.sizes() >= self.min_size).sum())


def core_silhouette(d: np.ndarray, labels: np.ndarray, min_size: int = 1) -> float:
    """Silhouette of a partition whose clusters of fewer than ``min_size`` heads hold "unique" heads: the
    silhouette width of each head in a cluster of >= ``min_size`` heads, computed among those clusters only,
    averaged over ALL heads with the unique heads counting 0 (as scikit-learn counts a singleton). NaN when
    fewer than two clusters have ``min_size`` heads. With ``min_size=1`` it is the plain mean silhouette.

    Why: one head unlike every other, split off as its own cluster, makes the rest look well separated (their
    nearest other cluster is far away) and dominates the plain criterion; here the other clusters are judged
    against each other, and setting heads aside is not free (they count 0)."""
    return _core_silhouette(check_distance(d), np.asarray(labels), min_size)


def _core_silhouette(d: np.ndarray, labels: np.ndarray, min_size: int) -> float:
    """:func:`core_silhouette` of a matrix :func:`check_distance` has already checked."""
    sizes = np.bincount(labels)
    core = sizes[labels] >= min_size
    if len(np.unique(labels[core])) < 2:
        return float("nan")
    if min_size <= 1:
        return _silhouette(d, labels)
    sub = labels[core]
    if len(np.unique(sub)) > len(sub) - 1:
        return float("nan")
    return float(silhouette_widths(d[np.ix_(core, core)], sub).sum() / len(labels))


def cluster_heads(d: np.ndarray, k: int | None = None, k_range: tuple[int, int] = (2, 20),
                  method: str = "average", order: bool = True, min_size: int = 1) -> Clusters:
    """Agglomerative clustering of heads. ``k=None`` picks the k in ``k_range`` (inclusive) with the largest
    :func:`core_silhouette` (clusters of fewer than ``min_size`` heads set aside; ties: the smaller k; when no
    cut has two clusters of ``min_size`` heads, the smallest k, with a NaN silhouette). ``order=False`` skips
    the optimal leaf ordering (``Clusters.order`` is then the plain dendrogram order)."""
    d = check_distance(d)
    n = d.shape[0]
    z = linkage(d, method)
    tried: dict[int, float] = {}
    if k is None:
        lo, hi = max(2, k_range[0]), min(k_range[1], n - 1)
        if lo > hi:
            raise ValueError(f"k_range {k_range} leaves no k between 2 and N - 1 = {n - 1}")
        for kk in range(lo, hi + 1):
            tried[kk] = _core_silhouette(d, hierarchy.fcluster(z, kk, criterion="maxclust"), min_size)
        valid = {kk: s for kk, s in tried.items() if np.isfinite(s)}
        if valid:
            best = max(valid.values())
            k = min(kk for kk, s in valid.items() if s >= best - 1e-12)
        else:
            k = lo
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and N = {n}, got {k}")
    labels = hierarchy.fcluster(z, k, criterion="maxclust")
    if order:
        z = hierarchy.optimal_leaf_ordering(z, squareform(d, checks=False))
    return Clusters(labels=labels, k=int(len(np.unique(labels))), order=np.asarray(hierarchy.leaves_list(z)), linkage=z,
                    silhouette=_core_silhouette(d, labels, min_size), silhouette_by_k=tried, min_size=min_size)


def silhouette_null(d: np.ndarray, k_range: tuple[int, int], method: str = "average", n_perm: int = 99,
                    seed: int = 0, min_size: int = 1) -> np.ndarray:
    """Best silhouette (over ``k_range``, as :func:`cluster_heads` chooses) of ``n_perm`` matrices whose
    upper-triangle entries are shuffled: the same distances with no structure. Compare the observed best
    silhouette with it (``p = (1 + #null >= observed) / (1 + n_perm)``)."""
    d = check_distance(d)
    n = d.shape[0]
    iu = np.triu_indices(n, k=1)
    rng = np.random.default_rng(seed)
    out = np.empty(n_perm)
    for i in range(n_perm):
        m = np.zeros_like(d)
        m[iu] = rng.permutation(d[iu])
        out[i] = cluster_heads(m + m.T, k_range=k_range, method=method, order=False, min_size=min_size).silhouette
    return out


def spectral_heads(d: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Spectral clustering (labels 1..k) of the affinity ``1 - d / max(d)``."""
    from sklearn.cluster import SpectralClustering

    d = check_distance(d)
    top = d.max()
    affinity = 1.0 - d / top if top > 0 else np.ones_like(d)
    sc = SpectralClustering(n_clusters=k, affinity="precomputed", random_state=seed, assign_labels="cluster_qr")
    return sc.fit_predict(affinity) + 1


def adjusted_rand(a: np.ndarray, b: np.ndarray) -> float:
    """Adjusted Rand index of two labelings (1 = the same partition, about 0 = chance)."""
    from sklearn.metrics import adjusted_rand_score

    return float(adjusted_rand_score(np.asarray(a), np.asarray(b)))


def mantel(a: np.ndarray, b: np.ndarray, n_perm: int = 999, method: str = "pearson",
           alternative: str = "greater", seed: int = 0) -> tuple[float, float]:
    """Correlation ``r`` of the upper triangles of ``a`` and ``b`` and its Mantel permutation p-value.

    The null: no association between the two matrices; it permutes the rows and columns of ``b`` together
    (``n_perm`` times) and recomputes ``r``. ``p = (1 + #{r_perm >= r}) / (1 + n_perm)`` for
    ``alternative="greater"`` (the usual question: are the matrices alike?), ``|r_perm| >= |r|`` for
    ``"two-sided"``. ``method="spearman"`` ranks the two triangles first.
    """
    from scipy.stats import rankdata

    a, b = check_distance(a), check_distance(b)
    if a.shape != b.shape:
        raise ValueError(f"matrices of different shapes: {list(a.shape)} and {list(b.shape)}")
    if method not in ("pearson", "spearman"):
        raise ValueError(f"method must be 'pearson' or 'spearman', got {method!r}")
    if alternative not in ("greater", "two-sided"):
        raise ValueError(f"alternative must be 'greater' or 'two-sided', got {alternative!r}")
    n = a.shape[0]
    iu = np.triu_indices(n, k=1)
    x = a[iu]
    if method == "spearman":
        x = rankdata(x)
        b = _rank_matrix(b)
    x = (x - x.mean()) / (x.std() or 1.0)

    def corr(y: np.ndarray) -> np.ndarray:  # y: [..., M] upper triangles -> r per leading index
        sd = y.std(-1, keepdims=True)
        y = (y - y.mean(-1, keepdims=True)) / np.where(sd > 0, sd, 1.0)
        return (y * x).mean(-1)

    r = float(corr(b[iu]))
    rng = np.random.default_rng(seed)
    null = np.empty(n_perm)
    step = 200  # permutations per vectorised block
    for s in range(0, n_perm, step):
        perms = np.stack([rng.permutation(n) for _ in range(min(step, n_perm - s))])
        null[s:s + len(perms)] = corr(b[perms[:, iu[0]], perms[:, iu[1]]])  # the permuted matrices' triangles
    hits = null >= r - 1e-12 if alternative == "greater" else np.abs(null) >= abs(r) - 1e-12
    return r, float((1 + hits.sum()) / (1 + n_perm))


def _rank_matrix(b: np.ndarray) -> np.ndarray:
    """``b`` with its upper-triangle entries replaced by their ranks (mirrored; the diagonal 0)."""
    from scipy.stats import rankdata

    n = b.shape[0]
    out = np.zeros_like(b)
    iu = np.triu_indices(n, k=1)
    out[iu] = rankdata(b[iu])
    return out + out.T


def medoids(d: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """For each cluster (in label order), the member with the smallest mean distance to the other members
    (ties: the smallest head id)."""
    d = check_distance(d)
    labels = np.asarray(labels)
    out = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        cost = d[np.ix_(members, members)].sum(axis=1)
        out.append(members[int(np.argmin(cost))])
    return np.asarray(out, dtype=np.int64)


def zero_shot_mask(d: np.ndarray, n_keep: int, shape: tuple[int, int], method: str = "average") -> torch.Tensor:
    """Bian et al.'s zero-shot pruning mask ``[n_layers, n_heads]`` (1 = kept) keeping exactly ``n_keep`` heads.

    The tree of ``method`` linkage is cut into ``n_keep`` clusters and each cluster's medoid is kept: one
    representative per group of mutually redundant heads. When ties in ``d`` leave fewer than ``n_keep``
    clusters, the remaining heads are added greedily, each the head farthest (max-min distance) from those
    already kept.
    """
    d = check_distance(d)
    n_layers, n_heads = shape
    n = n_layers * n_heads
    if d.shape[0] != n:
        raise ValueError(f"the matrix is {d.shape[0]} x {d.shape[0]}, the model has {n_layers} x {n_heads} = {n} heads")
    if not 1 <= n_keep <= n:
        raise ValueError(f"n_keep must be between 1 and {n}, got {n_keep}")
    if n_keep == n:
        return torch.ones(n_layers, n_heads)
    labels = hierarchy.fcluster(linkage(d, method), n_keep, criterion="maxclust")
    keep = list(medoids(d, labels))
    while len(keep) < n_keep:
        rest = np.setdiff1d(np.arange(n), keep)
        keep.append(int(rest[np.argmax(d[np.ix_(rest, keep)].min(axis=1))]))
    mask = torch.zeros(n)
    mask[torch.as_tensor(keep[:n_keep])] = 1.0
    return mask.view(n_layers, n_heads)
