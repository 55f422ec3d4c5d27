"""Small, pure statistics shared by the studies (numpy; scipy for the Student t and normal distributions).

All functions take 1-D array-likes of finite floats (NaNs are rejected), never modify their inputs, and are
deterministic for a given ``seed`` (``numpy.random.default_rng``).

- :func:`t_interval`        mean and Student-t confidence interval of the mean.
- :func:`bootstrap_ci`      percentile bootstrap interval of the mean of paired differences.
- :func:`sign_flip_test`    two-sided paired permutation (sign-flip) test of ``mean(d) = 0``.
- :func:`gini`              Gini coefficient of nonnegative values.

For verdicts on claims (:mod:`headprune_utils.analysis.claims`), whose unit of replication is an independently trained
model (task x seed):

- :func:`unit_means`                    aggregate within a unit first (values sharing a model are not replicates).
- :func:`cluster_bootstrap_distribution` / :func:`cluster_bootstrap_ci`  resample whole units (clusters).
- :func:`bca_interval`                  BCa interval of the mean of independent units.
- :func:`t_test_p`                      one-sample t-test p-value (two- or one-sided).
- :func:`tost`                          two one-sided t-tests (equivalence within a margin).
- :func:`holm`                          Holm step-down adjusted p-values.
- :func:`min_attainable_p`              the smallest p-value a test can give with ``n`` units (power gates).
- :func:`clopper_pearson`               exact interval of a share ``k / n`` (e.g. of models that have a head role).
- :func:`binomial_test_p`               exact two-sided binomial test of a share against 1/2.

Small n: with 3 units a percentile bootstrap of the mean is far too narrow to be a 95% interval (its spread
is ``sqrt((n-1)/n)`` of the standard error and it ignores the t quantile); use :func:`t_interval` (right
degrees of freedom) there, and bootstrap intervals only with enough units.

Permutation p-values count the observed arrangement: exact enumeration gives
``#{T* at least as extreme} / #arrangements``; random sampling gives ``(1 + #{...}) / (1 + n_perm)``
(Phipson & Smyth 2010), never 0. "At least as extreme" allows a relative tolerance of 1e-12 for ties.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Hashable
from typing import Callable, Literal, NamedTuple

import numpy as np

_TOL = 1e-12


def _vector(x, name: str = "x") -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return a


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def t_interval(x, confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: ``mean -/+ t_{(1+c)/2, n-1} * s / sqrt(n)``, ``s`` the sample std (ddof=1).

    With one value the bounds are NaN (no spread to estimate). Units: those of ``x``.
    """
    from scipy import stats

    _check_confidence(confidence)
    a = _vector(x)
    mean = float(a.mean())
    if a.size < 2:
        return mean, float("nan"), float("nan")
    half = float(stats.t.ppf((1 + confidence) / 2, a.size - 1)) * float(a.std(ddof=1)) / math.sqrt(a.size)
    return mean, mean - half, mean + half


def bootstrap_ci(d, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap ``(low, high)`` of the mean of paired differences ``d`` (resampling pairs).

    ``n_boot`` resamples of size ``len(d)`` with replacement; the bounds are the ``(1-c)/2`` and ``(1+c)/2``
    quantiles (numpy's linear interpolation) of the resampled means. Units: those of ``d``.
    """
    _check_confidence(confidence)
    a = _vector(d, "d")
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    chunk = max(1, 2_000_000 // a.size)  # bounds the memory of the index matrix
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        means[start:stop] = a[rng.integers(0, a.size, size=(stop - start, a.size))].mean(axis=1)
    low, high = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


def _extreme(t_star: np.ndarray, t_obs: float, alternative: str) -> np.ndarray:
    tol = _TOL * max(1.0, abs(t_obs))
    if alternative == "two-sided":
        return np.abs(t_star) >= abs(t_obs) - tol
    if alternative == "greater":
        return t_star >= t_obs - tol
    if alternative == "less":
        return t_star <= t_obs + tol
    raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less', got {alternative!r}")


def sign_flip_test(d, n_perm: int = 10000, seed: int = 0,
                   alternative: Literal["two-sided", "greater", "less"] = "two-sided") -> float:
    """p-value of ``mean(d) = 0`` for paired differences ``d`` by random sign flips (``"greater"``: H1 mean > 0).

    Statistic ``mean(s * d)`` over sign vectors ``s`` (its absolute value when two-sided); all ``2**n`` of them
    when ``2**n <= n_perm`` (exact), else ``n_perm`` random ones. Example: ``d = [1, 1, 1]`` -> 2 of 8 sign
    vectors reach 1 in absolute value -> two-sided ``p = 0.25``; one of 8 reaches +1 -> ``"greater"`` 0.125.
    A one-sided test of ``mean(d) = c``: pass ``d - c``.
    """
    a = _vector(d, "d")
    n = a.size
    t_obs = float(a.mean())
    if 2**n <= n_perm:
        bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
        t_star = ((1 - 2 * bits) * a).mean(axis=1)
        return float(_extreme(t_star, t_obs, alternative).mean())
    rng = np.random.default_rng(seed)
    hits = 0
    chunk = max(1, 2_000_000 // n)
    for start in range(0, n_perm, chunk):
        m = min(n_perm, start + chunk) - start
        signs = rng.choice(np.array([-1.0, 1.0]), size=(m, n))
        hits += int(_extreme((signs * a).mean(axis=1), t_obs, alternative).sum())
    return (1 + hits) / (1 + n_perm)


def gini(x) -> float:
    """Gini coefficient of nonnegative values (population formula, no small-sample correction).

    ``G = sum_i sum_j |x_i - x_j| / (2 n^2 mean(x))``, computed as
    ``sum_i (2i - n - 1) x_(i) / (n sum(x))`` over the ascending order statistics ``x_(1..n)``.
    0 = all values equal; ``(n - 1) / n`` = everything on one value (``gini([0, 0, 0, 1]) = 0.75``).
    All zeros gives 0. Raises on negative or non-finite values.
    """
    a = _vector(x)
    if (a < 0).any():
        raise ValueError("gini needs nonnegative values")
    total = a.sum()
    if total == 0:
        return 0.0
    n = a.size
    i = np.arange(1, n + 1)
    return float(((2 * i - n - 1) * np.sort(a)).sum() / (n * total))


# ------------------------------------------------------------------------------------- units and clusters

def _labels(units, n: int, name: str = "units") -> list[Hashable]:
    """``units`` as a list of hashable labels (rows of a 2-D array become tuples, e.g. ``(task, seed)``)."""
    if isinstance(units, np.ndarray) and units.ndim == 2:
        labels = [tuple(r) for r in units.tolist()]
    else:
        labels = [tuple(u) if isinstance(u, list) else u for u in units]
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} labels for {n} values")
    return labels


def unit_means(values, units) -> tuple[list[Hashable], np.ndarray]:
    """``(labels, means)``: the mean of ``values`` within each unit, units in order of first appearance.

    The unit of replication is an independently trained model (task x seed). Values that share a model (several
    budgets of one model, several sentences, several masks) are not independent replicates: aggregate them
    here first and test the unit means (``len(labels)`` = the number of replicates).
    ``values``: 1-D, finite; ``units``: one hashable label per value (a 2-D array's rows are read as tuples).
    """
    a = _vector(values, "values")
    labels = _labels(units, a.size)
    index: dict[Hashable, int] = {}
    codes = np.array([index.setdefault(u, len(index)) for u in labels])
    sums = np.bincount(codes, weights=a, minlength=len(index))
    counts = np.bincount(codes, minlength=len(index))
    return list(index), sums / counts


def _clusters(values, clusters) -> list[np.ndarray]:
    a = _vector(values, "values")
    labels = _labels(clusters, a.size, "clusters")
    groups: dict[Hashable, list[float]] = {}
    for v, c in zip(a.tolist(), labels):
        groups.setdefault(c, []).append(v)
    return [np.asarray(g) for g in groups.values()]


def cluster_bootstrap_distribution(values, clusters, statistic: Callable[[np.ndarray], float] = np.mean,
                                   n_boot: int = 2000, seed: int = 0) -> tuple[np.ndarray, bool]:
    """``(theta_star, exact)``: the bootstrap distribution of ``statistic`` when whole clusters are resampled.

    A resample draws ``k`` clusters (``k`` = number of distinct labels) with replacement and applies
    ``statistic`` to the concatenated values of the drawn clusters (one-stage cluster bootstrap: values are
    never resampled within a cluster, so dependence inside a unit is kept). When ``k**k <= n_boot`` all
    ``k**k`` ordered draws are enumerated (equally likely: the exact bootstrap distribution, ``exact=True``),
    in ``itertools.product`` order; else ``n_boot`` random draws (``rng.integers(0, k, (n_boot, k))``).
    """
    groups = _clusters(values, clusters)
    k = len(groups)
    if k**k <= n_boot:
        draws = np.array(list(itertools.product(range(k), repeat=k)), dtype=np.int64).reshape(-1, k)
        exact = True
    else:
        draws = np.random.default_rng(seed).integers(0, k, size=(n_boot, k))
        exact = False
    if statistic is np.mean:  # fast path: the pooled mean from cluster sums and sizes
        sums = np.array([g.sum() for g in groups])
        sizes = np.array([g.size for g in groups], dtype=np.float64)
        return sums[draws].sum(axis=1) / sizes[draws].sum(axis=1), exact
    theta = np.array([float(statistic(np.concatenate([groups[i] for i in row]))) for row in draws])
    return theta, exact


def _bca_levels(theta_star: np.ndarray, theta_hat: float, jackknife: np.ndarray,
                confidence: float) -> tuple[float, float]:
    """Efron's BCa quantile levels (Efron & Tibshirani 1993, 14.3; as ``scipy.stats.bootstrap``):
    ``z0 = Phi^-1(mid-rank share of theta* below theta_hat)``, acceleration ``a`` from the jackknife."""
    from scipy.special import ndtr, ndtri

    share = ((theta_star < theta_hat).sum() + (theta_star <= theta_hat).sum()) / (2 * theta_star.size)
    z0 = float(ndtri(share))
    u = jackknife.mean() - jackknife
    den = float((u**2).sum())
    a = float((u**3).sum()) / (6 * den**1.5) if den > 0 else 0.0
    levels = []
    for q in ((1 - confidence) / 2, (1 + confidence) / 2):
        z = z0 + float(ndtri(q))
        levels.append(float(ndtr(z0 + z / (1 - a * z))))
    return levels[0], levels[1]


def cluster_bootstrap_ci(values, clusters, statistic: Callable[[np.ndarray], float] = np.mean,
                         confidence: float = 0.95, n_boot: int = 2000, seed: int = 0,
                         method: Literal["percentile", "bca"] = "percentile") -> tuple[float, float]:
    """``(low, high)`` of ``statistic`` by the cluster bootstrap (:func:`cluster_bootstrap_distribution`).

    Use it when values share a unit (a fine-tuned model, nested budgets of one model): the resampling unit is
    the cluster, so the interval reflects the number of independent units, not of values.
    ``"percentile"``: the ``(1-c)/2`` and ``(1+c)/2`` quantiles (numpy's linear interpolation) of theta*.
    ``"bca"``: bias-corrected and accelerated quantile levels (``z0`` from the mid-rank share of theta* below
    the estimate; acceleration from the leave-one-CLUSTER-out jackknife), then the same quantiles.
    With one cluster the bounds are NaN; BCa bounds are NaN when every theta* lies on one side of the estimate.
    Units: those of ``statistic``.
    """
    _check_confidence(confidence)
    if method not in ("percentile", "bca"):
        raise ValueError(f"method must be 'percentile' or 'bca', got {method!r}")
    groups = _clusters(values, clusters)
    if len(groups) < 2:
        return float("nan"), float("nan")
    theta_star, _ = cluster_bootstrap_distribution(values, clusters, statistic, n_boot, seed)
    if method == "percentile":
        levels = ((1 - confidence) / 2, (1 + confidence) / 2)
    else:
        theta_hat = float(statistic(np.concatenate(groups)))
        jack = np.array([float(statistic(np.concatenate(groups[:i] + groups[i + 1:]))) for i in range(len(groups))])
        levels = _bca_levels(theta_star, theta_hat, jack, confidence)
        if not all(np.isfinite(levels)):
            return float("nan"), float("nan")
    low, high = np.quantile(theta_star, levels)
    return float(low), float(high)


def bca_interval(x, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """BCa ``(low, high)`` of the mean of independent units ``x`` (each value its own cluster; jackknife
    acceleration). Same resamples as ``scipy.stats.bootstrap(..., method="BCa", rng=seed)`` when
    ``len(x)**len(x) > n_boot``; exact enumeration otherwise. Units: those of ``x``."""
    a = _vector(x)
    return cluster_bootstrap_ci(a, np.arange(a.size), np.mean, confidence, n_boot, seed, method="bca")


# ---------------------------------------------------------------------------------- tests on unit values

def t_test_p(d, null: float = 0.0, alternative: Literal["two-sided", "greater", "less"] = "two-sided") -> float:
    """p-value of the one-sample t-test of ``mean(d) = null`` (``d``: one value per independent unit; paired
    designs pass the unit-level differences). ``t = (mean - null) / (s / sqrt(n))``, ``n - 1`` degrees of freedom.
    ``"greater"``: H1 mean > null. NaN with one unit; with zero spread (``se <= 1e-12 max(1, |mean|)``, i.e.
    rounding) the test is decided by the sign of ``mean - null`` (p = 0 or 1; 1 when equal)."""
    from scipy import stats

    _extreme(np.zeros(1), 0.0, alternative)  # validates ``alternative``
    a = _vector(d, "d")
    if a.size < 2:
        return float("nan")
    diff = float(a.mean()) - null
    se = float(a.std(ddof=1)) / math.sqrt(a.size)
    if se <= _TOL * max(1.0, abs(float(a.mean()))):  # no spread (to rounding): the sign decides exactly
        if abs(diff) <= _TOL * max(1.0, abs(null)):
            return 1.0
        if alternative == "two-sided":
            return 0.0
        return 0.0 if (diff > 0) == (alternative == "greater") else 1.0
    t, df = diff / se, a.size - 1
    if alternative == "greater":
        return float(stats.t.sf(t, df))
    if alternative == "less":
        return float(stats.t.cdf(t, df))
    return float(min(1.0, 2 * stats.t.sf(abs(t), df)))


class TostResult(NamedTuple):
    """Result of :func:`tost` (units of ``d`` unless said)."""

    estimate: float    # mean of d
    se: float          # s / sqrt(n)
    df: int            # n - 1
    p_lower: float     # H0: mean <= low margin  vs  H1: mean > low margin
    p_upper: float     # H0: mean >= high margin vs  H1: mean < high margin
    p: float           # the TOST p-value: max(p_lower, p_upper)
    ci_low: float      # (1 - 2 alpha) t-interval of the mean
    ci_high: float
    margin_low: float
    margin_high: float


def tost(d, margin: float | tuple[float, float], alpha: float = 0.05) -> TostResult:
    """Two one-sided t-tests (Schuirmann 1987) of equivalence ``low < mean(d) < high`` on unit-level values
    (paired designs: the per-unit differences).

    ``margin``: ``m > 0`` for ``(-m, m)``, or ``(low, high)`` with ``low < high``. Equivalence is shown at level
    ``alpha`` when ``p = max(p_lower, p_upper) < alpha``, which is the same as the ``(1 - 2 alpha)`` t-interval
    lying inside the margin. ``p_lower = P(T_{n-1} >= (mean - low) / se)``,
    ``p_upper = P(T_{n-1} <= (mean - high) / se)``.
    With one unit every p and bound is NaN.
    """
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    low, high = (-float(margin), float(margin)) if np.ndim(margin) == 0 else (float(margin[0]), float(margin[1]))
    if not (np.isfinite(low) or np.isfinite(high)) or not low < high:
        raise ValueError(f"the margin must give low < high, got {margin}")
    a = _vector(d, "d")
    mean = float(a.mean())
    nan = float("nan")
    if a.size < 2:
        return TostResult(mean, nan, 0, nan, nan, nan, nan, nan, low, high)
    _, ci_low, ci_high = t_interval(a, 1 - 2 * alpha)
    p_lower = t_test_p(a, low, "greater") if np.isfinite(low) else 0.0
    p_upper = t_test_p(a, high, "less") if np.isfinite(high) else 0.0
    se = float(a.std(ddof=1)) / math.sqrt(a.size)
    return TostResult(mean, se, a.size - 1, p_lower, p_upper, max(p_lower, p_upper), ci_low, ci_high, low, high)


def tarone_k(p_min, alpha: float = 0.05) -> int:
    """Tarone (1990)'s K of a set of tests with smallest attainable p-values ``p_min``: the smallest K >= 1 such that
    at most K of them can reach ``alpha / K`` (an empty set: 1)."""
    q = np.sort(np.asarray(p_min, dtype=np.float64).reshape(-1))
    for k in range(1, q.size + 1):
        if np.searchsorted(q, alpha / k, side="right") <= k:
            return k
    return max(1, q.size)


def tarone_holm(pvalues, p_min, alpha: float = 0.05) -> np.ndarray:
    """Holm's step-down procedure with Tarone's factor (Hommel & Krummenauer 1998), adjusted p-values at ``alpha``.

    ``p_min``: each test's smallest attainable p (fixed by its design: the test and its number of units, never by
    the data; 0 for a t-test). With the finite p-values sorted ascending, step j's factor is
    ``K_j = tarone_k(p_min of the tests not yet passed)`` instead of Holm's count of them, and
    ``p_adj(j) = max_{l <= j} min(1, K_l p(l))``; rejecting where ``p_adj < alpha`` controls the family-wise error at
    ``alpha`` (the adjusted values are for that ``alpha``: K depends on it). A test that cannot reach ``alpha / K``
    no longer counts in the factor of the others, and it still gets its turn: it is never worse than Holm, and equals
    it when every ``p_min`` is 0. NaN p-values are passed through and do not count."""
    p = np.asarray(pvalues, dtype=np.float64).reshape(-1)
    q = np.asarray(p_min, dtype=np.float64).reshape(-1)
    if p.shape != q.shape:
        raise ValueError(f"p_min must give one value per p-value: {q.shape} against {p.shape}")
    if ((p < 0) | (p > 1)).any() or ((q < 0) | (q > 1)).any() or np.isnan(q).any():
        raise ValueError("p-values and smallest attainable p-values must lie in [0, 1]")
    if ((p < q) & ~np.isnan(p)).any():
        raise ValueError("a p-value is below its test's smallest attainable p: p_min is wrong for that test")
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    order = idx[np.argsort(p[idx], kind="stable")]
    running = 0.0
    for j, i in enumerate(order):
        k = tarone_k(q[order[j:]], alpha)
        running = max(running, min(1.0, k * p[i]))
        out[i] = running
    return out


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979), in the input order.

    With the ``m`` finite p-values sorted ascending, ``p_adj(i) = max_{j <= i} min(1, (m - j + 1) p(j))``:
    monotone in the raw p, capped at 1, ties adjusted alike. NaN entries are passed through and do not count
    in ``m``. Rejecting where ``p_adj < alpha`` controls the family-wise error rate at ``alpha``.
    """
    p = np.asarray(pvalues, dtype=np.float64).reshape(-1)
    if ((p < 0) | (p > 1)).any():
        raise ValueError("p-values must lie in [0, 1]")
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    if idx.size == 0:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    m = order.size
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adjusted
    return out


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) two-sided interval of a binomial share from ``k`` successes in ``n`` trials:
    ``[Beta_{a/2}(k, n-k+1), Beta_{1-a/2}(k+1, n-k)]`` with ``a = 1 - confidence`` (0 when ``k = 0``, 1 when
    ``k = n``). Valid at any ``n`` (conservative). Example: 0 of 2 at 95%: ``[0, 0.842]``."""
    from scipy import stats

    _check_confidence(confidence)
    k, n = _counts(k, n)
    a = 1 - confidence
    low = 0.0 if k == 0 else float(stats.beta.ppf(a / 2, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.ppf(1 - a / 2, k + 1, n - k))
    return low, high


def binomial_test_p(k: int, n: int, alternative: Literal["two-sided", "greater", "less"] = "two-sided") -> float:
    """Exact two-sided p-value of ``k`` successes in ``n`` trials under share 1/2: twice the smaller tail
    (``min(1, 2 min(P(X <= k), P(X >= k)))``; the null is symmetric, so this is also the "as likely or less"
    p-value). It is below ``alpha`` exactly when 1/2 lies outside the ``1 - alpha`` :func:`clopper_pearson`
    interval. Smallest value: ``2 / 2**n`` (all or none), as :func:`min_attainable_p` ``("binomial", n)``."""
    from scipy import stats

    k, n = _counts(k, n)
    _extreme(np.zeros(1), 0.0, alternative)  # validates ``alternative``
    if alternative == "greater":  # H1: share > 1/2
        return float(stats.binom.sf(k - 1, n, 0.5))
    if alternative == "less":
        return float(stats.binom.cdf(k, n, 0.5))
    tail = min(float(stats.binom.cdf(k, n, 0.5)), float(stats.binom.sf(k - 1, n, 0.5)))
    return min(1.0, 2.0 * tail)


def _counts(k, n) -> tuple[int, int]:
    if int(n) != n or int(k) != k or not 0 <= k <= n or n < 1:
        raise ValueError(f"need integers 0 <= k <= n, n >= 1; got k={k}, n={n}")
    return int(k), int(n)


def min_attainable_p(test: Literal["sign_flip", "wilcoxon", "t", "binomial"], n: int,
                     alternative: Literal["two-sided", "greater", "less"] = "two-sided") -> float:
    """The smallest p-value ``test`` can give with ``n`` independent units, so that power gates are computed.

    ``"sign_flip"`` (exact, :func:`sign_flip_test`), ``"wilcoxon"`` (exact signed-rank) and ``"binomial"``
    (:func:`binomial_test_p`, share 1/2): all ``n``
    differences on one side is the most extreme of the ``2**n`` equally likely sign vectors, so ``2 / 2**n``
    two-sided and ``1 / 2**n`` one-sided (3 units: 0.25; no level 0.05 test below 6 units two-sided).
    ``"t"``: a t-test is not limited (p -> 0 as the spread shrinks) once ``n >= 2``; with ``n < 2`` there are
    no degrees of freedom and the result is 1 (nothing can be rejected).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    _extreme(np.zeros(1), 0.0, alternative)
    if test in ("sign_flip", "wilcoxon", "binomial"):
        return min(1.0, (2.0 if alternative == "two-sided" else 1.0) / 2**n)
    if test == "t":
        return 0.0 if n >= 2 else 1.0
    raise ValueError(f"test must be 'sign_flip', 'wilcoxon', 'binomial' or 't', got {test!r}")
