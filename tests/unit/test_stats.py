"""headprune_utils.analysis.stats on hand-written cases and against scipy / brute force."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats as sps

from headprune_utils.analysis.stats import (
    binomial_test_p, bootstrap_ci, clopper_pearson, gini, sign_flip_test, t_interval,
)


# --- gini ---------------------------------------------------------------------------------------------

def test_gini_hand_cases():
    assert gini([1, 1, 1, 1]) == 0.0
    assert gini([0, 0, 0, 1]) == pytest.approx(0.75, abs=1e-15)
    assert gini([5.0]) == 0.0
    assert gini([0, 0, 0]) == 0.0
    assert gini([0, 1]) == pytest.approx(0.5)


def test_gini_equals_mean_absolute_difference_formula_and_is_scale_and_order_invariant():
    x = np.random.default_rng(0).exponential(size=17)
    direct = np.abs(x[:, None] - x[None, :]).sum() / (2 * x.size**2 * x.mean())
    assert gini(x) == pytest.approx(direct, rel=1e-12)
    assert gini(3.5 * x) == pytest.approx(gini(x), rel=1e-12)
    assert gini(x[::-1]) == pytest.approx(gini(x), rel=1e-12)


def test_gini_rejects_negative_and_nan():
    with pytest.raises(ValueError, match="nonnegative"):
        gini([1, -1, 2])
    with pytest.raises(ValueError, match="NaN"):
        gini([1, float("nan")])
    with pytest.raises(ValueError, match="empty"):
        gini([])


# --- t interval -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_t_interval_matches_scipy(confidence):
    x = np.random.default_rng(1).normal(2.0, 3.0, size=11)
    mean, low, high = t_interval(x, confidence)
    ref_low, ref_high = sps.t.interval(confidence, x.size - 1, loc=x.mean(), scale=sps.sem(x))
    assert mean == pytest.approx(x.mean(), rel=1e-14)
    assert low == pytest.approx(ref_low, rel=1e-12)
    assert high == pytest.approx(ref_high, rel=1e-12)


def test_t_interval_degenerate_cases():
    mean, low, high = t_interval([4.0])
    assert mean == 4.0 and np.isnan(low) and np.isnan(high)
    assert t_interval([2.0, 2.0, 2.0]) == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="confidence"):
        t_interval([1.0, 2.0], confidence=95)


# --- bootstrap ------------------------------------------------------------------------------------------

def test_bootstrap_ci_contains_mean_is_reproducible_and_seeded():
    d = np.random.default_rng(2).normal(0.3, 1.0, size=40)
    low, high = bootstrap_ci(d, n_boot=2000, seed=7)
    assert low < d.mean() < high
    assert bootstrap_ci(d, n_boot=2000, seed=7) == (low, high)
    assert bootstrap_ci(d, n_boot=2000, seed=8) != (low, high)
    # wider at higher confidence
    low99, high99 = bootstrap_ci(d, confidence=0.99, n_boot=2000, seed=7)
    assert low99 <= low and high99 >= high


def test_bootstrap_ci_close_to_t_interval_for_a_large_normal_sample():
    d = np.random.default_rng(3).normal(1.0, 2.0, size=400)
    low, high = bootstrap_ci(d, n_boot=4000, seed=0)
    _, t_low, t_high = t_interval(d)
    assert low == pytest.approx(t_low, abs=0.05) and high == pytest.approx(t_high, abs=0.05)


def test_bootstrap_ci_of_constant_differences_is_a_point():
    assert bootstrap_ci([0.5] * 6) == (0.5, 0.5)


# --- sign-flip test ---------------------------------------------------------------------------------------

def test_sign_flip_exact_hand_case():
    assert sign_flip_test([1, 1, 1]) == 0.25  # 2 of the 8 sign vectors reach |mean| = 1
    assert sign_flip_test([0, 0, 0]) == 1.0
    assert sign_flip_test([1, -1]) == 1.0


def test_sign_flip_exact_matches_brute_force_and_is_symmetric():
    d = np.array([0.3, -0.1, 0.8, 1.2, 0.05, 0.4, -0.2])
    t_obs = abs(d.mean())
    flips = [abs(np.mean(np.array(s) * d)) for s in itertools.product([-1, 1], repeat=d.size)]
    brute = np.mean([f >= t_obs - 1e-12 for f in flips])
    assert sign_flip_test(d) == pytest.approx(brute, abs=1e-15)
    assert sign_flip_test(-d) == sign_flip_test(d)


def test_sign_flip_monte_carlo_close_to_exact_and_reproducible():
    d = np.random.default_rng(4).normal(0.4, 1.0, size=16)
    exact = sign_flip_test(d, n_perm=2**16)
    mc = sign_flip_test(d, n_perm=5000, seed=1)
    assert mc == sign_flip_test(d, n_perm=5000, seed=1)
    assert 1 / 5001 <= mc <= 1
    assert mc == pytest.approx(exact, abs=0.03)


# --- two-sample permutation test ---------------------------------------------------------------------------

def test_min_attainable_sign_flip_p_is_what_the_exact_test_gives_for_same_sign_pairs():
    from headprune_utils.analysis.stats import min_attainable_p, sign_flip_test

    for n in range(1, 8):
        same_sign = [1.0 + 0.1 * i for i in range(n)]
        assert min_attainable_p("sign_flip", n) == pytest.approx(sign_flip_test(same_sign))
        assert min_attainable_p("sign_flip", n, "greater") == pytest.approx(sign_flip_test(same_sign, alternative="greater"))
    assert min_attainable_p("sign_flip", 5) > 0.05 > min_attainable_p("sign_flip", 6)
    with pytest.raises(ValueError):
        min_attainable_p("sign_flip", 0)


# --- unit means -------------------------------------------------------------------------------------------

def test_unit_means_aggregates_within_units_in_order_of_first_appearance():
    from headprune_utils.analysis.stats import unit_means

    labels, means = unit_means([1.0, 2.0, 10.0, 3.0, 20.0], ["b", "b", ("sst2", 1), "b", ("sst2", 1)])
    assert labels == ["b", ("sst2", 1)]
    np.testing.assert_allclose(means, [2.0, 15.0])
    labels, means = unit_means([1.0, 3.0, 5.0], np.array([["sst2", 0], ["sst2", 0], ["mrpc", 0]]))
    assert labels == [("sst2", "0"), ("mrpc", "0")]
    np.testing.assert_allclose(means, [2.0, 5.0])
    with pytest.raises(ValueError, match="labels"):
        unit_means([1.0, 2.0], ["a"])
    with pytest.raises(ValueError, match="NaN"):
        unit_means([1.0, float("nan")], ["a", "b"])


# --- cluster bootstrap ------------------------------------------------------------------------------------

VALUES = np.array([0.1, 0.3, 0.2, 1.0, 0.9, -0.4])
CLUSTERS = ["a", "a", "a", "b", "b", "c"]  # 3 clusters of sizes 3, 2, 1


def _brute_force(statistic):
    groups = [VALUES[:3], VALUES[3:5], VALUES[5:]]
    return np.array([statistic(np.concatenate([groups[i] for i in draw]))
                     for draw in itertools.product(range(3), repeat=3)])


@pytest.mark.parametrize("statistic", [np.mean, np.median])
def test_cluster_bootstrap_enumerates_all_27_resamples_of_3_clusters(statistic):
    from headprune_utils.analysis.stats import cluster_bootstrap_ci, cluster_bootstrap_distribution

    brute = _brute_force(statistic)
    theta, exact = cluster_bootstrap_distribution(VALUES, CLUSTERS, statistic)
    assert exact and theta.size == 27
    np.testing.assert_allclose(theta, brute, rtol=1e-12, atol=1e-15)
    low, high = cluster_bootstrap_ci(VALUES, CLUSTERS, statistic, confidence=0.9)
    ref_low, ref_high = np.quantile(brute, [0.05, 0.95])
    assert (low, high) == pytest.approx((ref_low, ref_high), rel=1e-12)


def test_cluster_bootstrap_resamples_clusters_not_values():
    from headprune_utils.analysis.stats import bootstrap_ci, cluster_bootstrap_ci

    rng = np.random.default_rng(10)
    centres = rng.normal(size=8)
    # 50 identical values per cluster: 8 independent units, not 400; the interval is that of the 8 unit means
    values, clusters = np.repeat(centres, 50), np.repeat(np.arange(8), 50)
    clustered = cluster_bootstrap_ci(values, clusters, n_boot=4000, seed=1)
    of_units = cluster_bootstrap_ci(centres, np.arange(8), n_boot=4000, seed=1)
    assert clustered == pytest.approx(of_units, rel=1e-12)
    naive_low, naive_high = bootstrap_ci(values, n_boot=4000, seed=1)
    assert (naive_high - naive_low) < 0.3 * (clustered[1] - clustered[0])  # the pseudo-replicate interval lies


def test_cluster_bootstrap_monte_carlo_is_seeded_and_close_to_exact():
    from headprune_utils.analysis.stats import cluster_bootstrap_ci, cluster_bootstrap_distribution

    x = np.random.default_rng(11).normal(size=10)
    clusters = np.repeat(np.arange(5), 2)  # 5**5 = 3125 draws
    exact_theta, exact = cluster_bootstrap_distribution(x, clusters, n_boot=3125)
    mc_theta, mc_exact = cluster_bootstrap_distribution(x, clusters, n_boot=3000, seed=3)
    assert exact and not mc_exact
    np.testing.assert_allclose(np.quantile(mc_theta, [0.05, 0.5, 0.95]),
                               np.quantile(exact_theta, [0.05, 0.5, 0.95]), atol=0.05)
    assert cluster_bootstrap_ci(x, clusters, n_boot=3000, seed=3) == cluster_bootstrap_ci(x, clusters, n_boot=3000,
                                                                                         seed=3)


def test_cluster_bootstrap_degenerate_and_bad_inputs():
    from headprune_utils.analysis.stats import cluster_bootstrap_ci

    low, high = cluster_bootstrap_ci([1.0, 2.0], ["a", "a"])
    assert np.isnan(low) and np.isnan(high)
    assert cluster_bootstrap_ci([2.0, 2.0, 2.0], [0, 1, 2], method="bca") == (2.0, 2.0)
    with pytest.raises(ValueError, match="method"):
        cluster_bootstrap_ci([1.0, 2.0], [0, 1], method="basic")
    with pytest.raises(ValueError, match="labels"):
        cluster_bootstrap_ci([1.0, 2.0], [0])


# --- BCa ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_bca_interval_matches_scipy_bootstrap_bca(confidence):
    from headprune_utils.analysis.stats import bca_interval

    x = np.random.default_rng(12).exponential(size=9)  # skewed: BCa differs from the percentile interval
    ref = sps.bootstrap((x,), np.mean, method="BCa", confidence_level=confidence, n_resamples=3000, rng=5)
    low, high = bca_interval(x, confidence, n_boot=3000, seed=5)
    # same resamples as scipy: the same interval to rounding
    assert low == pytest.approx(ref.confidence_interval.low, rel=1e-9)
    assert high == pytest.approx(ref.confidence_interval.high, rel=1e-9)


def test_bca_of_a_symmetric_exact_case_equals_the_percentile_interval():
    from headprune_utils.analysis.stats import bca_interval, cluster_bootstrap_ci

    # [-1, 0, 1]: the 27 resampled means are symmetric about 0 (z0 = 0) and the jackknife means +-0.5, 0 give
    # acceleration 0, so BCa's levels are the percentile ones
    x = [-1.0, 0.0, 1.0]
    assert bca_interval(x, 0.9) == pytest.approx(cluster_bootstrap_ci(x, [0, 1, 2], confidence=0.9), abs=1e-15)


def test_cluster_bca_with_singleton_clusters_is_bca_interval():
    from headprune_utils.analysis.stats import bca_interval, cluster_bootstrap_ci

    x = np.random.default_rng(13).gamma(2.0, size=12)
    assert cluster_bootstrap_ci(x, np.arange(12), method="bca", seed=2) == bca_interval(x, seed=2)


# --- t-test, TOST -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_t_test_p_matches_scipy(alternative):
    from headprune_utils.analysis.stats import t_test_p

    d = np.random.default_rng(14).normal(0.3, 1.0, size=7)
    ref = sps.ttest_1samp(d, 0.1, alternative=alternative).pvalue
    assert t_test_p(d, 0.1, alternative) == pytest.approx(ref, rel=1e-12)


def test_t_test_p_degenerate_cases():
    from headprune_utils.analysis.stats import t_test_p

    assert np.isnan(t_test_p([1.0]))
    assert t_test_p([0.2, 0.2, 0.2]) == 0.0
    assert t_test_p([0.2, 0.2], alternative="less") == 1.0
    assert t_test_p([0.0, 0.0]) == 1.0
    with pytest.raises(ValueError, match="alternative"):
        t_test_p([1.0, 2.0], alternative="bigger")


def test_tost_matches_a_hand_computation():
    from headprune_utils.analysis.stats import tost

    d = np.array([0.012, -0.004, 0.020, 0.006, -0.001])
    margin, alpha = 0.03, 0.05
    n, mean, sd = d.size, d.mean(), d.std(ddof=1)
    se = sd / np.sqrt(n)
    p_lower = sps.t.sf((mean + margin) / se, n - 1)    # H0: mean <= -margin
    p_upper = sps.t.cdf((mean - margin) / se, n - 1)   # H0: mean >= +margin
    half = sps.t.ppf(1 - alpha, n - 1) * se            # the (1 - 2 alpha) interval
    r = tost(d, margin, alpha)
    assert r.estimate == pytest.approx(mean) and r.se == pytest.approx(se) and r.df == n - 1
    assert r.p_lower == pytest.approx(p_lower, rel=1e-10) and r.p_upper == pytest.approx(p_upper, rel=1e-10)
    assert r.p == max(r.p_lower, r.p_upper)
    assert (r.ci_low, r.ci_high) == pytest.approx((mean - half, mean + half), rel=1e-10)
    assert r.p < alpha and -margin < r.ci_low and r.ci_high < margin  # TOST p < alpha <=> CI inside the margin
    narrow = tost(d, 0.01, alpha)
    assert narrow.p >= alpha and narrow.ci_high > 0.01


def test_tost_asymmetric_margins_and_bad_inputs():
    from headprune_utils.analysis.stats import tost

    d = [0.5, 0.7, 0.6, 0.4]
    r = tost(d, (0.0, 1.0))
    assert r.margin_low == 0.0 and r.margin_high == 1.0
    assert r.p_lower == pytest.approx(sps.ttest_1samp(d, 0.0, alternative="greater").pvalue)
    assert np.isnan(tost([0.1], 0.5).p)
    with pytest.raises(ValueError, match="margin"):
        tost(d, 0.0)
    with pytest.raises(ValueError, match="alpha"):
        tost(d, 0.5, alpha=0.6)


# --- Holm ---------------------------------------------------------------------------------------------------

def _holm_by_definition(p):
    """Holm by its step-down definition: reject in ascending order while p(j) <= alpha / (m - j + 1); the
    adjusted p is the smallest alpha at which the hypothesis is rejected."""
    p = np.asarray(p, dtype=float)
    order = np.argsort(p)
    m = p.size
    out = np.empty(m)
    for rank, i in enumerate(order):
        out[i] = min(1.0, max((m - j) * p[order[j]] for j in range(rank + 1)))
    return out


def test_holm_hand_case_nan_and_cap():
    from headprune_utils.analysis.stats import holm

    # sorted 0.005, 0.01, 0.03, 0.04 x 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.02, 0.03, 0.06, 0.06
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    out = holm([0.01, float("nan"), 0.04])  # NaN does not count: m = 2
    assert out[0] == pytest.approx(0.02) and np.isnan(out[1]) and out[2] == pytest.approx(0.04)
    np.testing.assert_allclose(holm([0.5, 0.6]), [1.0, 1.0])
    np.testing.assert_allclose(holm([0.01, 0.01, 0.2]), [0.03, 0.03, 0.2])  # ties adjusted alike
    assert np.isnan(holm([float("nan")])).all() and holm([]).size == 0
    with pytest.raises(ValueError, match="p-values"):
        holm([0.1, 1.2])


def test_holm_matches_its_definition_and_is_monotone():
    from headprune_utils.analysis.stats import holm

    p = np.random.default_rng(15).uniform(0, 0.2, size=12)
    adjusted = holm(p)
    np.testing.assert_allclose(adjusted, _holm_by_definition(p), rtol=1e-12)
    order = np.argsort(p)
    assert (np.diff(adjusted[order]) >= 0).all() and (adjusted >= p).all() and (adjusted <= 1).all()


# --- min attainable p ----------------------------------------------------------------------------------------

def test_min_attainable_p():
    from headprune_utils.analysis.stats import min_attainable_p, sign_flip_test

    assert min_attainable_p("sign_flip", 3) == 0.25
    assert min_attainable_p("sign_flip", 3, "greater") == 0.125
    assert min_attainable_p("wilcoxon", 6) == pytest.approx(1 / 32)
    for n in range(1, 9):
        assert min_attainable_p("sign_flip", n) == pytest.approx(sign_flip_test(np.arange(1.0, n + 1)))
    assert min_attainable_p("sign_flip", 5) > 0.05 > min_attainable_p("sign_flip", 6)
    assert min_attainable_p("t", 1) == 1.0 and min_attainable_p("t", 2) == 0.0
    with pytest.raises(ValueError, match="test"):
        min_attainable_p("anova", 4)
    with pytest.raises(ValueError, match="n must"):
        min_attainable_p("t", 0)


@pytest.mark.parametrize("k, n", [(0, 1), (0, 2), (2, 2), (0, 6), (6, 6), (3, 6), (1, 8), (7, 20), (20, 20)])
def test_binomial_test_and_clopper_pearson_match_scipy_and_each_other(k, n):
    ref = sps.binomtest(k, n, 0.5)
    assert binomial_test_p(k, n) == pytest.approx(ref.pvalue)
    for conf in (0.9, 0.95):
        ci = ref.proportion_ci(conf, method="exact")
        low, high = clopper_pearson(k, n, conf)
        assert (low, high) == (pytest.approx(ci.low), pytest.approx(ci.high))
        assert (binomial_test_p(k, n) < 1 - conf) == (not low <= 0.5 <= high)  # the test inverts the interval


def test_binomial_inputs_are_checked():
    for k, n in ((3, 2), (-1, 2), (0, 0), (1.5, 3)):
        with pytest.raises(ValueError, match="0 <= k <= n"):
            binomial_test_p(k, n)
    with pytest.raises(ValueError, match="confidence"):
        clopper_pearson(1, 2, 1.0)


def test_one_sided_sign_flip_and_binomial_against_independent_computations():
    """One-sided exact sign-flip p = the share of the 2**n sign vectors whose mean is at least (at most) the
    observed one, enumerated here with itertools; one-sided binomial p = scipy's binomtest."""
    import itertools

    from scipy import stats as sps

    from headprune_utils.analysis.stats import binomial_test_p, sign_flip_test
    d = np.array([0.3, -0.1, 0.2, 0.25, 0.05])
    means = np.array([np.mean(np.array(s) * d) for s in itertools.product([-1, 1], repeat=d.size)])
    obs = d.mean()
    assert sign_flip_test(d, alternative="greater") == pytest.approx(np.mean(means >= obs - 1e-12))
    assert sign_flip_test(d, alternative="less") == pytest.approx(np.mean(means <= obs + 1e-12))
    assert sign_flip_test([1.0] * 5, alternative="greater") == pytest.approx(1 / 32)
    assert sign_flip_test([1.0] * 5, alternative="less") == pytest.approx(1.0)
    for k, n in [(0, 5), (3, 5), (5, 5), (7, 9)]:
        for alt in ("greater", "less", "two-sided"):
            assert binomial_test_p(k, n, alt) == pytest.approx(sps.binomtest(k, n, 0.5, alternative=alt).pvalue)
    with pytest.raises(ValueError):
        binomial_test_p(1, 2, "sideways")


# ------------------------------------------- Holm with Tarone's factor (Tarone 1990; Hommel & Krummenauer 1998)

def _tarone_k_by_definition(p_min, alpha):
    k = 1
    while sum(q <= alpha / k for q in p_min) > k:
        k += 1
    return k


def _tarone_holm_by_definition(p, p_min, alpha):
    """The step-down procedure written out: reject the smallest remaining p while p <= ... < alpha / K(remaining)."""
    remaining, rejected = list(range(len(p))), set()
    while remaining:
        k = _tarone_k_by_definition([p_min[i] for i in remaining], alpha)
        i = min(remaining, key=lambda j: (p[j], j))
        if not k * p[i] < alpha:
            break
        rejected.add(i)
        remaining.remove(i)
    return rejected


@pytest.mark.parametrize("seed", range(8))
def test_tarone_holm_rejects_what_the_step_down_procedure_rejects(seed):
    from headprune_utils.analysis.stats import holm, tarone_holm, tarone_k

    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 40))
    p_min = np.where(rng.random(m) < 0.5, 0.0, 0.5 ** rng.integers(3, 9, size=m))
    p = np.maximum(p_min, rng.random(m) ** 3)
    assert tarone_k(p_min) == _tarone_k_by_definition(p_min, 0.05)
    adj = tarone_holm(p, p_min, 0.05)
    assert set(np.flatnonzero(adj < 0.05)) == _tarone_holm_by_definition(p, p_min, 0.05)
    assert (adj <= holm(p) + 1e-15).all()  # never worse than Holm
    np.testing.assert_allclose(tarone_holm(p, np.zeros(m)), holm(p))  # continuous tests only: Holm


def test_tarone_holm_by_hand():
    from headprune_utils.analysis.stats import tarone_holm

    # two t-tests (p_min 0) and two exact 5-unit tests (p_min 1/32 > 0.025). Step 1: all 4 reach 0.05 (K = 1 fails),
    # 2 reach 0.025 -> K = 2: 2 x 0.001. Step 2: 3 reach 0.05, 1 reaches 0.025 -> K = 2: 2 x 0.02 (Holm: 3 x 0.02).
    # Step 3: the two exact tests, none reaches 0.025 -> K = 2: 2/32. Step 4: one test -> K = 1: 0.5.
    p, p_min = [0.001, 0.02, 1 / 32, 0.5], [0.0, 0.0, 1 / 32, 1 / 32]
    np.testing.assert_allclose(tarone_holm(p, p_min), [0.002, 0.04, 2 / 32, 0.5])
    with pytest.raises(ValueError, match="below its test's smallest attainable p"):
        tarone_holm([0.01], [1 / 32])
    with pytest.raises(ValueError, match="one value per p-value"):
        tarone_holm([0.01, 0.2], [0.0])
    assert np.isnan(tarone_holm([np.nan, 0.01], [0.0, 0.0])[0])


def test_tarone_holm_controls_the_family_wise_error_under_the_null():
    """Under the global null (t p-values uniform; exact 5-unit sign-flip p-values uniform on k/32), the share of
    simulated families with any rejection stays at or below alpha (Monte Carlo, 4000 families of 10 + 10 tests)."""
    from headprune_utils.analysis.stats import tarone_holm

    rng = np.random.default_rng(1)
    p_min = np.r_[np.zeros(10), np.full(10, 1 / 32)]
    hits = 0
    for _ in range(4000):
        p = np.r_[rng.random(10), rng.integers(1, 33, size=10) / 32]
        hits += bool((tarone_holm(p, p_min) < 0.05).any())
    assert hits / 4000 <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 4000)
