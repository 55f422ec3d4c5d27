"""Small, pure statistics shared by the studies (numpy; scipy only for the Student t quantile).

All functions take 1-D array-likes of finite floats (NaNs are rejected), never modify their inputs, and are
deterministic for a given ``seed`` (``numpy.random.default_rng``).

- :func:`t_interval`        mean and Student-t confidence interval of the mean.
- :func:`bootstrap_ci`      percentile bootstrap interval of the mean of paired differences.
- :func:`sign_flip_test`    two-sided paired permutation (sign-flip) test of ``mean(d) = 0``.
- :func:`permutation_test`  two-sample label-permutation test.
- :func:`gini`              Gini coefficient of nonnegative values.

Permutation p-values count the observed arrangement: exact enumeration gives
``#{T* at least as extreme} / #arrangements``; random sampling gives ``(1 + #{...}) / (1 + n_perm)``
(Phipson & Smyth 2010), never 0. "At least as extreme" allows a relative tolerance of 1e-12 for ties.
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, Literal

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


def smallest_sign_flip_p(n: int) -> float:
    """The smallest two-sided p-value :func:`sign_flip_test` can give with ``n`` pairs (exact test): 2 of the
    ``2**n`` sign vectors are as extreme as the observed one when every difference has the same sign. With
    ``n <= 5`` it is above 0.05, so no result can be significant at that level."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return min(1.0, 2.0 / 2**n)


def sign_flip_test(d, n_perm: int = 10000, seed: int = 0) -> float:
    """Two-sided p-value of ``mean(d) = 0`` for paired differences ``d`` by random sign flips.

    Statistic ``|mean(s * d)|`` over sign vectors ``s``; all ``2**n`` of them when ``2**n <= n_perm`` (exact),
    else ``n_perm`` random ones. Example: ``d = [1, 1, 1]`` -> 2 of 8 sign vectors reach 1 -> ``p = 0.25``.
    """
    a = _vector(d, "d")
    n = a.size
    t_obs = float(a.mean())
    if 2**n <= n_perm:
        bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
        t_star = ((1 - 2 * bits) * a).mean(axis=1)
        return float(_extreme(t_star, t_obs, "two-sided").mean())
    rng = np.random.default_rng(seed)
    hits = 0
    chunk = max(1, 2_000_000 // n)
    for start in range(0, n_perm, chunk):
        m = min(n_perm, start + chunk) - start
        signs = rng.choice(np.array([-1.0, 1.0]), size=(m, n))
        hits += int(_extreme((signs * a).mean(axis=1), t_obs, "two-sided").sum())
    return (1 + hits) / (1 + n_perm)


def mean_difference(x: np.ndarray, y: np.ndarray) -> float:
    """``mean(x) - mean(y)``, the default statistic of :func:`permutation_test`."""
    return float(np.mean(x) - np.mean(y))


def permutation_test(
    x,
    y,
    statistic: Callable[[np.ndarray, np.ndarray], float] = mean_difference,
    n_perm: int = 10000,
    seed: int = 0,
    alternative: Literal["two-sided", "greater", "less"] = "two-sided",
) -> float:
    """p-value of ``statistic(x, y)`` under random relabelling of the pooled samples (two independent samples).

    ``"greater"``: large statistics are evidence (``P(T* >= T)``), ``"less"``: ``P(T* <= T)``,
    ``"two-sided"``: ``P(|T*| >= |T|)`` (for statistics centred on 0 under the null, as the mean difference).
    Exact over all ``C(n_x + n_y, n_x)`` splits when that is ``<= n_perm``, else ``n_perm`` random ones.
    """
    a, b = _vector(x, "x"), _vector(y, "y")
    _extreme(np.zeros(1), 0.0, alternative)  # validates ``alternative``
    pooled = np.concatenate([a, b])
    n, nx = pooled.size, a.size
    t_obs = float(statistic(a, b))
    if math.comb(n, nx) <= n_perm:
        t_star = []
        for idx in itertools.combinations(range(n), nx):
            take = np.zeros(n, dtype=bool)
            take[list(idx)] = True
            t_star.append(statistic(pooled[take], pooled[~take]))
        return float(_extreme(np.asarray(t_star, dtype=np.float64), t_obs, alternative).mean())
    rng = np.random.default_rng(seed)
    t_star = np.empty(n_perm)
    for i in range(n_perm):
        perm = rng.permutation(pooled)
        t_star[i] = statistic(perm[:nx], perm[nx:])
    return (1 + int(_extreme(t_star, t_obs, alternative).sum())) / (1 + n_perm)


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
