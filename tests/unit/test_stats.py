"""headprune_utils.stats on hand-written cases and against scipy / brute force."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats as sps

from headprune_utils.stats import bootstrap_ci, gini, permutation_test, sign_flip_test, t_interval


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

def test_permutation_test_exact_hand_case():
    x, y = [1.0, 2.0], [3.0, 4.0]  # 6 splits, mean differences -2, -1, 0, 0, 1, 2
    assert permutation_test(x, y) == pytest.approx(2 / 6)
    assert permutation_test(x, y, alternative="less") == pytest.approx(1 / 6)
    assert permutation_test(x, y, alternative="greater") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="alternative"):
        permutation_test(x, y, alternative="bigger")


@pytest.mark.parametrize("alternative", ["greater", "less"])
def test_permutation_test_exact_matches_scipy_one_sided(alternative):
    rng = np.random.default_rng(5)
    x, y = rng.normal(0.5, 1, size=6), rng.normal(0, 1, size=5)
    ref = sps.permutation_test((x, y), lambda a, b: np.mean(a) - np.mean(b), vectorized=False,
                               permutation_type="independent", n_resamples=np.inf, alternative=alternative)
    assert permutation_test(x, y, alternative=alternative) == pytest.approx(ref.pvalue, rel=1e-12)


def test_permutation_test_separated_samples_and_custom_statistic():
    x, y = np.arange(10.0) + 100, np.arange(10.0)  # C(20, 10) > n_perm: Monte Carlo
    p = permutation_test(x, y, n_perm=2000, seed=0)
    assert 1 / 2001 <= p < 0.005  # only the observed split and its mirror reach |T| = 100
    assert permutation_test(x, y, n_perm=2000, seed=0) == p
    med = permutation_test(x, y, statistic=lambda a, b: float(np.median(a) - np.median(b)), n_perm=500)
    assert 0 < med < 0.01
    rng = np.random.default_rng(6)
    same = permutation_test(rng.normal(size=12), rng.normal(size=12), n_perm=2000, seed=0)
    assert 0 <= same <= 1 and same > 0.05


def test_smallest_sign_flip_p_is_what_the_exact_test_gives_for_same_sign_pairs():
    from headprune_utils.stats import sign_flip_test, smallest_sign_flip_p

    for n in range(1, 8):
        assert smallest_sign_flip_p(n) == pytest.approx(sign_flip_test([1.0 + 0.1 * i for i in range(n)]))
    assert smallest_sign_flip_p(5) > 0.05 > smallest_sign_flip_p(6)
    with pytest.raises(ValueError):
        smallest_sign_flip_p(0)
