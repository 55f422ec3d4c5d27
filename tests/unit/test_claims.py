"""headprune_utils.analysis.claims on hand-made tables: decision rules, gates (both branches), units, pooling, Holm."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from headprune_utils.analysis import claims, margins, preconditions
from headprune_utils.analysis.claims import (
    COLUMNS, VERDICTS, Claim, Equivalence, Measurement, NonInferiority, Presence, ShareOfHeadroom, Superiority,
    adjust, decide, enough_units, render, validate,
)
from headprune_utils.analysis.stats import holm

CLAIM = Claim("paper.claim", "Someone et al. 2020", "Pruning A beats pruning B.", Superiority(),
              metric="score(A) - score(B)")
OTHER = Claim("paper.other", "Someone et al. 2020", "A and B are comparable.", Equivalence(0.02))


def evaluate(claim, rule, measurements, gates=(), scale="", study=""):
    """``claim`` decided by ``rule`` with ``gates`` through :func:`claims.evaluate` (the claim carries its rule and
    gates; a plain function of the measurement becomes a ``preconditions.Check``)."""
    objs = tuple(g if isinstance(g, claims.Gate) else preconditions.Check("a test gate", lambda m, ev, g=g: g(m))
                 for g in gates)
    return claims.evaluate(replace(claim, rule=rule, gates=objs), measurements, scale=scale, study=study)


def role_found(role, counts):
    """The :class:`preconditions.RoleFound` gate with its evidence bound (``counts``: task -> count, or one count)."""
    return preconditions.Check(f"role {role}", lambda m, ev: preconditions.RoleFound(role).check(m, {"role_counts": counts}))


def above_chance(margin):
    return preconditions.AboveChance(margin)


def meas(task, values, units=None, setting="50%", **kw):
    units = list(range(len(values))) if units is None else units
    return Measurement(task, values, units, setting=setting, semantics="zero", **kw)


def one(table, task=None):
    rows = table if task is None else table[table["task"] == task]
    assert len(rows) == 1, rows
    return rows.iloc[0]


# --------------------------------------------------------------------------------------------- vocabulary

def test_vocabulary_and_layout():
    assert VERDICTS == ("supported", "not supported", "contradicted", "inconclusive", "not testable")
    assert COLUMNS == ("study", "claim_id", "paper", "claim", "task", "setting", "semantics", "analysis", "effect",
                       "ci_low", "ci_high", "n_units", "unit", "test", "p", "p_adjusted", "p_test", "margin", "verdict",
                       "reason", "scale", "tests", "unit_values")
    t = evaluate(CLAIM, Superiority(), [meas("sst2", [0.03, 0.05, 0.04])], scale="quick", study="s")
    assert tuple(t.columns) == COLUMNS
    validate(t)
    r = one(t)
    assert (r.study, r.claim_id, r.paper, r.claim, r.task, r.setting, r.semantics, r.scale) == (
        "s", CLAIM.id, CLAIM.paper, CLAIM.text, "sst2", "50%", "zero", "quick")


def test_rules_reject_bad_parameters():
    with pytest.raises(ValueError):
        Superiority(direction="up")
    with pytest.raises(ValueError):
        Superiority(test="anova")
    with pytest.raises(ValueError, match="alpha"):
        Equivalence(0.1, alpha=0.6)
    with pytest.raises(ValueError):
        NonInferiority(0.1, direction="sideways")


# ------------------------------------------------------------------------------------- decision rules (rows)

SUP = "superiority (greater); one-sided t tests on unit means; alpha=0.05"
SUP_LESS = "superiority (less); one-sided t tests on unit means; alpha=0.05"
EQ = "equivalence (TOST); one-sided t tests on unit means; alpha=0.05; margin: 0.02 = fixed"
NI = "non-inferiority (greater); one-sided t tests on unit means; alpha=0.05"
NI_LESS = "non-inferiority (less); one-sided t tests on unit means; alpha=0.05"
PRES = "presence (greater); exact one-sided binomial tests on share of units with heads > 0 (Clopper-Pearson CI); alpha=0.05"
HT = claims.HypothesisTest


def row(test, effect, low, high, tests, margin=0.0):
    """A tested row whose tests already carry adjusted p-values (``tests``: (word, side, bound, p_adjusted))."""
    ts = [HT(w, side, b, "TOST, one-sided t" if side == "inside" else "one-sided t", min(pa, 1.0), pa)
          for w, side, b, pa in tests]
    return {"test": test, "effect": effect, "ci_low": low, "ci_high": high, "margin": margin, "n_units": 5,
            "verdict": "inconclusive", "claim_id": "c", "task": "t", "setting": "", "semantics": "",
            "tests": claims._dump_tests(ts)}


def sup(p_sup, p_con, p_ns=None, m=0.0, less=False):
    d, o = ("less", "greater") if less else ("greater", "less")
    out = [("supported", d, 0.0, p_sup), ("contradicted", o, 0.0, p_con)]
    return out + ([("not supported", o, (-m if less else m), p_ns)] if p_ns is not None else [])


def eq(p_tost, p_above, p_below, m=0.02):
    return [("supported", "inside", m, p_tost), ("contradicted", "greater", m, p_above),
            ("contradicted", "less", -m, p_below)]


def ni(p_sup, p_con, m=0.02, less=False):
    return [("supported", "less" if less else "greater", m if less else -m, p_sup),
            ("contradicted", "greater" if less else "less", m if less else -m, p_con)]


# Every word both ways: given when ITS test's adjusted p < alpha, withheld otherwise -- including rows whose
# unadjusted interval lies past the margin (the old rule's words) while the adjusted test does not reach alpha.
@pytest.mark.parametrize("test, effect, low, high, tests, margin, verdict", [
    (SUP, 0.04, 0.01, 0.07, sup(0.01, 0.99), 0.0, "supported"),
    (SUP, 0.02, 0.001, 0.04, sup(0.08, 1.0), 0.0, "inconclusive"),         # CI above 0, not after Holm
    (SUP, -0.04, -0.07, -0.01, sup(1.0, 0.01), 0.0, "contradicted"),
    (SUP, -0.04, -0.07, -0.01, sup(1.0, 0.07), 0.0, "inconclusive"),        # CI below 0, not after Holm
    (SUP, -0.01, -0.03, 0.005, sup(1.0, 0.2, 0.01, 0.01), 0.01, "not supported"),
    (SUP, -0.01, -0.03, 0.005, sup(1.0, 0.2, 0.09, 0.01), 0.01, "inconclusive"),  # CI below m, test not after Holm
    (SUP, -0.04, -0.07, -0.01, sup(1.0, 0.01, 0.001, 0.01), 0.01, "contradicted"),  # the stronger word
    (SUP, 0.011, 0.01, 0.012, sup(0.001, 1.0, 0.001, 0.1), 0.1, "not supported"),   # shown > 0 but too small
    (SUP_LESS, -0.04, -0.07, -0.01, sup(0.01, 0.99, less=True), 0.0, "supported"),
    (SUP_LESS, 0.04, 0.01, 0.07, sup(0.99, 0.01, less=True), 0.0, "contradicted"),
    (SUP_LESS, 0.01, -0.005, 0.03, sup(0.9, 0.3, 0.02, 0.01, less=True), 0.01, "not supported"),
    (EQ, 0.001, -0.01, 0.012, eq(0.01, 1.0, 1.0), 0.02, "supported"),
    (EQ, 0.001, -0.01, 0.012, eq(0.06, 1.0, 1.0), 0.02, "inconclusive"),      # inside, not after Holm
    (EQ, 0.05, 0.03, 0.07, eq(1.0, 0.01, 1.0), 0.02, "contradicted"),         # above +margin
    (EQ, -0.05, -0.07, -0.03, eq(1.0, 1.0, 0.01), 0.02, "contradicted"),      # below -margin
    (EQ, 0.05, 0.03, 0.07, eq(1.0, 0.2, 1.0), 0.02, "inconclusive"),          # CI wholly outside, test not after Holm
    (NI, -0.005, -0.015, 0.005, ni(0.01, 1.0), 0.02, "supported"),
    (NI, -0.005, -0.015, 0.005, ni(0.3, 1.0), 0.02, "inconclusive"),
    (NI, -0.05, -0.07, -0.03, ni(1.0, 0.01), 0.02, "contradicted"),
    (NI, -0.05, -0.07, -0.03, ni(1.0, 0.06), 0.02, "inconclusive"),         # CI past -m, test not after Holm
    (NI_LESS, 0.005, -0.005, 0.015, ni(0.01, 1.0, less=True), 0.02, "supported"),
    (NI_LESS, 0.05, 0.03, 0.07, ni(1.0, 0.01, less=True), 0.02, "contradicted"),
    (PRES, 1.0, 0.55, 1.0, [("supported", "greater", 0.5, 0.03), ("contradicted", "less", 0.5, 1.0)], 0.5,
     "supported"),
    (PRES, 0.0, 0.0, 0.45, [("supported", "greater", 0.5, 1.0), ("contradicted", "less", 0.5, 0.03)], 0.5,
     "contradicted"),
    (PRES, 0.0, 0.0, 0.45, [("supported", "greater", 0.5, 1.0), ("contradicted", "less", 0.5, 0.3)], 0.5,
     "inconclusive"),
])
def test_decide_gives_a_word_only_when_its_own_adjusted_test_reaches_alpha(test, effect, low, high, tests, margin,
                                                                           verdict):
    r = row(test, effect, low, high, tests, margin)
    got, reason = decide(r)
    assert got == verdict and reason and "nan" not in reason.lower()
    word, t = claims._deciding(r)
    if verdict in claims.DECIDED:
        assert t.word == verdict and t.p_adjusted < 0.05 and f"{t.p_adjusted:.3g}" in reason
    else:
        assert t.p_adjusted == min(x[3] for x in tests) and "no test reaches 0.05 after Holm" in reason


def test_decide_reasons_state_the_numbers():
    _, reason = decide(row(EQ, 0.001, -0.01, 0.012, eq(0.01, 1.0, 1.0), 0.02))
    assert "90% CI" in reason and "|effect| < 0.02" in reason
    _, reason = decide(row(SUP, 0.04, 0.01, 0.07, sup(0.01, 0.99)))
    assert "95% CI" in reason and "Holm-adjusted p = 0.01" in reason and "effect > 0" in reason
    with pytest.raises(ValueError, match="label"):
        decide(row("a t-test", 0.04, 0.01, 0.07, sup(0.01, 0.99)))


def test_the_decision_table_is_written_once_and_rendered():
    md = claims.decision_table_markdown()
    assert md.count("\n") == len(claims.DECISION_TABLE) + 1
    for rule, word, _ in claims.DECISION_TABLE:
        assert f"| {rule} | {word} |" in md


def test_validate_enforces_the_contract():
    t = evaluate(CLAIM, Superiority(), [meas("sst2", [0.03, 0.05, 0.04, 0.045])], study="s")
    assert one(t).verdict == "supported"
    validate(t)
    with pytest.raises(ValueError, match="not decided by a test of that word"):
        validate(t.assign(verdict="contradicted"))
    with pytest.raises(ValueError, match="p_adjusted"):
        validate(t.assign(p_adjusted=0.001))
    weak = evaluate(CLAIM, Superiority(), [meas("sst2", [0.02, -0.01, 0.03])], study="s")
    assert one(weak).verdict == "inconclusive"
    with pytest.raises(ValueError, match="not decided"):
        validate(weak.assign(verdict="supported"))


def test_every_test_of_every_row_is_in_the_holm_family():
    """Both directions of a superiority row and the three tests of an equivalence row are members of the study's
    family: Holm over the long table of tests equals the adjusted p-values stored."""
    t = adjust(pd.concat([
        evaluate(CLAIM, Superiority(margin=0.01), [meas("sst2", [0.03, 0.05, 0.04, 0.045])], study="s"),
        evaluate(OTHER, Equivalence(0.02), [meas("sst2", [0.001, -0.002, 0.0, 0.003])], study="s"),
    ], ignore_index=True))
    ft = claims.family_tests(t)
    assert len(ft) == 3 + 3 and ft["family"].nunique() == 1
    np.testing.assert_allclose(ft["p_adjusted"], holm(ft["p"]))
    validate(t)


def test_an_unadjusted_interval_past_the_margin_alone_decides_nothing():
    """An equivalence row whose 90% CI lies wholly above +m (the old rule: contradicted) stays inconclusive when its
    'effect > m' test does not survive Holm in a family of many tests."""
    far = [0.035, 0.05, 0.03, 0.06, 0.033]  # 90% CI about [+0.029, +0.054], m = 0.02; p(effect > m) = 0.0099
    alone = one(evaluate(OTHER, Equivalence(0.02), [meas("sst2", far)], study="s"))
    assert alone.ci_low > 0.02 and alone.verdict == "contradicted"
    others = [evaluate(Claim(f"x.c{i}", "P", "c", Superiority()), Superiority(), [meas("sst2", [0.01, -0.02, 0.015, 0.0, -0.01])],
                       study="s") for i in range(12)]
    crowded = adjust(pd.concat([evaluate(OTHER, Equivalence(0.02), [meas("sst2", far)], study="s"), *others],
                               ignore_index=True))
    r = crowded.iloc[0]
    assert r.ci_low > 0.02 and r.p < 0.05 <= r.p_adjusted and r.verdict == "inconclusive"
    validate(crowded)


# ------------------------------------------------------------------------------------- evaluate: one task

def test_superiority_on_unit_means_matches_a_one_sample_t_test():
    # unequal numbers of values per unit: the unit means, not the values, are the replicates
    values, units = [0.1, 0.3, 0.2, 0.5, 0.7], ["s0", "s0", "s0", "s1", "s2"]
    r = one(evaluate(CLAIM, Superiority(), [meas("sst2", values, units)]))
    unit_means = np.array([0.2, 0.5, 0.7])
    assert r.n_units == 3
    assert r.effect == pytest.approx(unit_means.mean())  # not the pooled mean 0.36
    greater = sps.ttest_1samp(unit_means, 0.0, alternative="greater").pvalue
    assert r.p == pytest.approx(greater, rel=1e-12) and r.p_test.startswith("supported: effect > 0")
    lo, hi = sps.t.interval(0.95, 2, loc=unit_means.mean(), scale=sps.sem(unit_means))
    assert (r.ci_low, r.ci_high) == pytest.approx((lo, hi))
    assert json.loads(r.unit_values) == pytest.approx(list(unit_means))
    # both one-sided tests are in the family of this row: Holm over 2 tests; 3 models: p = 0.042 one-sided
    assert r.p_adjusted == pytest.approx(2 * greater) and r.verdict == "inconclusive"


@pytest.mark.parametrize("values, margin, verdict", [
    ([0.03, 0.05, 0.04, 0.045], 0.0, "supported"),
    ([-0.03, -0.05, -0.04, -0.045], 0.0, "contradicted"),
    ([-0.01, 0.0, -0.005, 0.005, -0.002], 0.02, "not supported"),
    ([-0.05, 0.08, 0.01], 0.0, "inconclusive"),
])
def test_superiority_verdicts_from_data(values, margin, verdict):
    r = one(evaluate(CLAIM, Superiority(margin=margin), [meas("sst2", values)]))
    assert r.verdict == verdict


def test_equivalence_uses_tost_with_the_stated_margin():
    from headprune_utils.analysis.stats import tost

    d = [0.002, -0.004, 0.001, 0.003, -0.001]
    full = [0.90, 0.92, 0.91]
    rule = Equivalence(ShareOfHeadroom(0.1))
    r = one(evaluate(OTHER, rule, [meas("sst2", d, full=full, chance=0.5)]))
    margin = 0.1 * (np.mean(full) - 0.5)
    assert r.margin == pytest.approx(margin)
    assert r.p == pytest.approx(tost(d, margin).p) and r.p_test.startswith("supported: |effect| < ")
    assert r.verdict == "supported" and "0.1 x (full - chance)" in r.test
    far = one(evaluate(OTHER, rule, [meas("sst2", [0.05, 0.06, 0.055, 0.05], full=full, chance=0.5)]))
    assert far.verdict == "contradicted"
    wide = one(evaluate(OTHER, rule, [meas("sst2", [0.03, -0.02, 0.01], full=full, chance=0.5)]))
    assert wide.verdict == "inconclusive"


def test_non_inferiority_from_data():
    rule = NonInferiority(0.02)
    assert one(evaluate(OTHER, rule, [meas("sst2", [-0.004, 0.001, -0.002, 0.0])])).verdict == "supported"
    assert one(evaluate(OTHER, rule, [meas("sst2", [-0.05, -0.06, -0.055, -0.05])])).verdict == "contradicted"
    assert one(evaluate(OTHER, rule, [meas("sst2", [-0.03, 0.01, -0.02])])).verdict == "inconclusive"
    r = one(evaluate(OTHER, rule, [meas("sst2", [-0.004, 0.001, -0.002, 0.0])]))
    assert r.p == pytest.approx(sps.ttest_1samp([-0.004, 0.001, -0.002, 0.0], -0.02, alternative="greater").pvalue)
    bad = one(evaluate(OTHER, rule, [meas("sst2", [-0.05, -0.06, -0.055, -0.05])]))
    assert bad.p == pytest.approx(sps.ttest_1samp([-0.05, -0.06, -0.055, -0.05], -0.02, alternative="less").pvalue)


def test_margins_from_the_full_model():
    m = meas("sst2", [0.0, 0.1], full=[0.8, 0.9, 0.85], chance=0.5)
    assert ShareOfHeadroom(0.1)(m) == pytest.approx(0.1 * (0.85 - 0.5))
    assert not hasattr(claims, "SeedSpread")  # a noise estimate is not a margin
    # a margin that cannot be computed, or is 0, makes the claim not testable
    r = one(evaluate(OTHER, Equivalence(ShareOfHeadroom()), [meas("sst2", [0.0, 0.1], full=[0.5, 0.5], chance=0.5)]))
    assert r.verdict == "not testable" and "must be > 0" in r.reason and np.isnan(r.p)
    r = one(evaluate(OTHER, Equivalence(ShareOfHeadroom()), [meas("sst2", [0.0, 0.1])]))
    assert r.verdict == "not testable" and "chance" in r.reason


# ------------------------------------------------------------------------------------------------- gates

def test_enough_units_both_branches_and_the_automatic_power_gate():
    assert enough_units("t")(meas("sst2", [0.1, 0.2])) is None
    assert enough_units("t")(meas("sst2", [0.1])) == "a one-sample t-test needs at least 2 units; got 1"
    reason = enough_units("sign_flip", 0.05)(meas("sst2", [0.1, 0.2, 0.3]))
    assert "one-sided" in reason and "0.125" in reason and "needs 5 units" in reason  # tests are one-sided
    assert enough_units("sign_flip", 0.05)(meas("sst2", [0.1] * 5)) is None
    assert enough_units("sign_flip", 0.05, n=5)(meas("sst2", [0.1])) is None
    # evaluate applies the rule's own power gate: a sign-flip test over 3 models is not testable at 0.05
    r = one(evaluate(CLAIM, Superiority(test="sign_flip"), [meas("sst2", [0.3, 0.4, 0.5])]))
    assert r.verdict == "not testable" and "smallest attainable p = 0.125" in r.reason
    r = one(evaluate(CLAIM, Superiority(test="sign_flip"), [meas("sst2", [0.3, 0.4, 0.5, 0.2, 0.6, 0.35])]))
    assert r.verdict == "supported" and r.p == pytest.approx(1 / 64) and r.p_adjusted == pytest.approx(2 / 64)
    r = one(evaluate(CLAIM, Superiority(), [meas("sst2", [0.3, 0.3], units=["s0", "s0"])]))  # one model
    assert r.verdict == "not testable" and "got 1" in r.reason


def test_above_chance_both_branches():
    gate = above_chance(0.05)
    assert gate(meas("sst2", [0.1], full=[0.9, 0.85], chance=0.5)) is None
    reason = gate(meas("sst2", [0.1], full=[0.9, 0.52], chance=0.5))
    assert "not above chance by 0.05 on sst2" in reason and "0.52" in reason
    with pytest.raises(ValueError, match="chance"):
        gate(meas("sst2", [0.1]))


def test_role_found_both_branches():
    gate = role_found("positional", {"sst2": 2, "mrpc": 0})
    assert gate(meas("sst2", [0.1])) is None
    assert gate(meas("mrpc", [0.1])) == "no head of role 'positional' found on mrpc"
    assert gate(meas("rte", [0.1])) is not None
    assert role_found("syntactic", 0)(meas("sst2", [0.1])) is not None
    assert role_found("syntactic", 3)(meas("sst2", [0.1])) is None


def test_every_failed_gate_is_named_and_no_p_is_reported():
    gates = [role_found("rare", 0), above_chance(0.1)]
    r = one(evaluate(CLAIM, Superiority(), [meas("sst2", [0.1, 0.2], full=[0.55, 0.6], chance=0.5)], gates=gates))
    assert r.verdict == "not testable" and "role 'rare'" in r.reason and "not above chance" in r.reason
    assert np.isnan(r.p) and np.isnan(r.p_adjusted) and r.effect == pytest.approx(0.15)


# ------------------------------------------------------------------------------------------------ pooling

FULL = {"sst2": ([0.90, 0.92, 0.91], 0.5), "mrpc": ([0.80, 0.82, 0.81], 0.68), "rte": ([0.70, 0.66, 0.68], 0.5)}


def tm(task, values, setting="50%"):
    full, chance = FULL[task]
    return meas(task, values, setting=setting, full=full, chance=chance)


def test_pooled_row_on_normalised_effects_when_tasks_agree():
    a, b = [0.03, 0.05, 0.04], [0.02, 0.03, 0.025]
    t = evaluate(CLAIM, Superiority(), [tm("sst2", a), tm("mrpc", b)])
    assert list(t["task"]) == ["sst2", "mrpc", "all (sst2, mrpc)"]
    pooled = one(t, "all (sst2, mrpc)")
    x = np.concatenate([np.array(a) / (0.91 - 0.5), np.array(b) / (0.81 - 0.68)])
    assert pooled.n_units == 6 and pooled.effect == pytest.approx(x.mean())
    assert pooled.p == pytest.approx(sps.ttest_1samp(x, 0.0, alternative="greater").pvalue, rel=1e-12)
    assert "/ (full - chance)" in pooled.test and pooled.verdict == "supported"
    # Holm within the claim: the two tests of each of the three rows
    ft = claims.family_tests(t)
    assert len(ft) == 6
    np.testing.assert_allclose(ft["p_adjusted"], holm(ft["p"]))


def test_a_pool_over_tasks_decided_both_ways_is_tested_in_the_family():
    t = evaluate(CLAIM, Superiority(), [tm("sst2", [0.03, 0.05, 0.04, 0.045, 0.035]),
                                        tm("mrpc", [-0.02, -0.03, -0.025, -0.022, -0.028])])
    pooled = one(t, "all (sst2, mrpc)")
    assert one(t, "sst2").verdict == "supported" and one(t, "mrpc").verdict == "contradicted"
    # the pooled row's tests are in the family (fixed by the design, not by the directions the data took): 3 x 2
    ft = claims.family_tests(t)
    assert set(ft["row"]) == {0, 1, 2} and len(ft) == 6
    np.testing.assert_allclose(ft["p_adjusted"], holm(ft["p"]))
    # its own tests reach nothing here: inconclusive on them, not withheld
    assert pooled.verdict == "inconclusive" and not claims.withheld(pooled) and pooled.p_adjusted >= 0.05
    claims.validate(t)


def test_a_pooled_word_is_withheld_beside_a_task_decided_the_other_way():
    """A pool whose test reaches the level while one task is decided the other way (contradicted): its word is
    withheld (a pool never overrides a task), its tests still raise the other tests' Holm factor, and adjusting
    twice changes nothing."""
    big = [0.30, 0.32, 0.31, 0.33, 0.29]
    t = evaluate(CLAIM, Superiority(), [tm("sst2", big), tm("mrpc", [-0.001, -0.003, -0.002, -0.0015, -0.0025])])
    pooled = one(t, "all (sst2, mrpc)")
    assert one(t, "mrpc").verdict == "contradicted"
    assert pooled.reason.startswith("a task decided otherwise: mrpc contradicted") and pooled.verdict == "inconclusive"
    assert claims.withheld(pooled) and "it would read supported" in pooled.reason
    assert pooled.p_adjusted < 0.05 and pooled.p_test.startswith("supported")
    ft = claims.family_tests(t)
    assert len(ft) == 6
    np.testing.assert_allclose(ft["p_adjusted"], holm(ft["p"]))
    again = claims.adjust(t)
    assert again["reason"].tolist() == t["reason"].tolist() and again["verdict"].tolist() == t["verdict"].tolist()
    # under other margins the pool stays withheld (mrpc's "effect < 0" does not depend on the margin)
    assert claims.retest(t, 2.0).loc[pooled.name, "verdict"] == "inconclusive"
    claims.validate(t)
    # the contract: a pooled word over a task decided the other way is an error
    bad = t.copy()
    bad.loc[pooled.name, ["verdict", "p_adjusted"]] = ["supported", pooled.p_adjusted]
    with pytest.raises(ValueError, match="overrides the word decided on mrpc"):
        claims.validate(bad)


def test_tasks_that_decide_nothing_never_withhold_the_pool_whatever_their_signs():
    """A task whose point estimate goes the other way but decides nothing (inconclusive) does not withhold the
    pool's word: deciding what each task alone cannot is what pooling is for (the rule before 2026-12-06's
    revision withheld it on the sign of the estimate)."""
    t = evaluate(CLAIM, Superiority(), [tm("sst2", [0.30, 0.32, 0.31, 0.33, 0.29, 0.30]),
                                        tm("mrpc", [-0.002, 0.003, -0.004, 0.002, -0.001, 0.001])])
    assert one(t, "mrpc").effect < 0 and one(t, "mrpc").verdict == "inconclusive"
    pooled = one(t, "all (sst2, mrpc)")
    assert pooled.verdict == "supported" and not claims.withheld(pooled)
    claims.validate(t)


def test_not_supported_and_contradicted_are_one_stance():
    """A pooled ``contradicted`` or ``not supported`` beside a task's ``not supported`` or ``contradicted`` (all: no
    effect of interest) stands; a pooled ``supported`` beside a task's ``not supported`` is withheld."""
    rule = Superiority(margin=ShareOfHeadroom(0.1))
    t = evaluate(CLAIM, rule, [tm("sst2", [-0.05, -0.06, -0.055, -0.052, -0.058]),
                               tm("mrpc", [0.001, 0.002, 0.0015, 0.0012, 0.0018])])
    assert one(t, "mrpc").verdict == "not supported" and one(t, "sst2").verdict == "contradicted"
    assert one(t, "all (sst2, mrpc)").verdict in ("contradicted", "not supported")  # stands: one stance
    t = evaluate(CLAIM, rule, [tm("sst2", [0.001, 0.002, 0.0015, 0.0012, 0.0018, 0.0011]),
                               tm("mrpc", [0.05, 0.06, 0.055, 0.052, 0.058, 0.051])])
    assert one(t, "mrpc").verdict == "supported" and one(t, "sst2").verdict == "not supported"
    pooled = one(t, "all (sst2, mrpc)")
    assert claims.withheld(pooled) and pooled.reason.startswith("a task decided otherwise: sst2 not supported")
    assert "it would read supported" in pooled.reason


def test_equivalence_pools_on_normalised_effects_and_never_over_a_contradicted_task():
    rule = Equivalence(ShareOfHeadroom(0.1))
    t = evaluate(OTHER, rule, [tm("sst2", [0.002, -0.001, 0.001]), tm("mrpc", [-0.001, -0.002, 0.0005])])
    pooled = one(t, "all (sst2, mrpc)")
    assert np.isfinite(pooled.p) and pooled.verdict == "supported"
    assert pooled.margin == pytest.approx(0.1)  # a share of the headroom is that share once normalised
    t = evaluate(OTHER, rule, [tm("sst2", [0.002, -0.001, 0.001]), tm("mrpc", [0.05, 0.06, 0.055])])
    assert one(t, "mrpc").verdict == "contradicted"
    assert one(t, "all (sst2, mrpc)").verdict != "supported"
    # a pooled TOST that reaches the level beside a contradicted task: withheld (rte above its margin, 0.018)
    near = [0.001, -0.001, 0.0005, -0.0005, 0.0002, -0.0002]
    t = evaluate(OTHER, rule, [tm("sst2", near), tm("mrpc", [x / 2 for x in near]),
                               tm("rte", [0.025, 0.026, 0.024, 0.025, 0.0255, 0.0245])])
    assert one(t, "rte").verdict == "contradicted" and one(t, "sst2").verdict == "supported"
    pooled = one(t, "all (sst2, mrpc, rte)")
    assert claims.withheld(pooled) and "it would read supported" in pooled.reason
    assert pooled.reason.startswith("a task decided otherwise: rte contradicted: effect > +0.018")


def test_a_pooled_word_shown_in_the_opposite_direction_of_a_tasks_is_withheld():
    """The same word from opposite sides is no agreement: an equivalence claim contradicted above +margin on one task
    and below -margin on the pool (the other tasks far below) withholds the pool's word; so does a two-sided
    difference."""
    rule = Equivalence(ShareOfHeadroom(0.1))
    up = [0.05, 0.052, 0.048, 0.051, 0.049]             # sst2: +0.05, above its margin 0.041
    down = [-0.10, -0.11, -0.105, -0.102, -0.108]        # mrpc, rte: far below theirs
    t = evaluate(OTHER, rule, [tm("sst2", up), tm("mrpc", down), tm("rte", down)])
    assert one(t, "sst2").verdict == one(t, "mrpc").verdict == "contradicted"
    pooled = one(t, "all (sst2, mrpc, rte)")
    assert pooled.effect < -0.1 and claims.withheld(pooled) and "it would read contradicted" in pooled.reason
    assert pooled.reason.startswith("a task decided otherwise: sst2 contradicted: effect > +0.041")
    claims.validate(t)
    two = Superiority("two-sided")
    t = evaluate(CLAIM, two, [tm("sst2", up), tm("mrpc", down), tm("rte", down)])
    assert one(t, "sst2").verdict == one(t, "mrpc").verdict == "supported"
    assert claims.withheld(one(t, "all (sst2, mrpc, rte)"))


def test_a_pool_is_decided_only_beside_its_tasks_rows():
    """A tested pooled row whose tasks' rows are not in the table beside it cannot be decided (it could override a
    task unseen): adjust and validate refuse it, naming the task."""
    t = evaluate(CLAIM, Superiority(), [tm("sst2", [0.30, 0.32, 0.31, 0.33, 0.29]),
                                        tm("mrpc", [-0.001, -0.003, -0.002, -0.0015, -0.0025])])
    alone = t[t["task"] != "mrpc"].reset_index(drop=True)
    with pytest.raises(ValueError, match="the rows of mrpc are not in the table beside their pooled row"):
        claims.adjust(alone)


def test_retest_decides_tasks_and_pools_again_at_each_margin():
    """Equivalence: at the declared margin both tasks lie within it and the pool is decided; at half the margin
    mrpc is contradicted and the pool decides nothing (tasks and pools are decided again together, a pool never
    overriding a task under any margin); back at the declared margin it is decided again."""
    rule = Equivalence(ShareOfHeadroom(0.1))
    t = evaluate(OTHER, rule, [tm("sst2", [0.002, -0.001, 0.001, 0.0, 0.0015]),
                               tm("mrpc", [0.008, 0.009, 0.0085, 0.0095, 0.0088])])
    pooled = one(t, "all (sst2, mrpc)")
    assert pooled.verdict == "supported" and not claims.withheld(pooled)
    half = claims.retest(t, 0.5)
    assert half.loc[pooled.name, "verdict"] == "inconclusive"  # its TOST no longer reaches the level
    assert half.loc[one(t, "mrpc").name, "verdict"] == "contradicted"
    back = claims.retest(half, 2.0)
    assert back["verdict"].tolist() == t["verdict"].tolist()
    assert back.loc[pooled.name, "reason"] == pooled.reason
    sens = claims.margin_sensitivity(t)
    assert sens.loc[pooled.name, "verdict_x0.5"] == "inconclusive" and bool(sens.loc[pooled.name, "changes"])


def test_pooling_leaves_out_untestable_tasks_and_needs_two():
    gate = role_found("positional", {"sst2": 1, "mrpc": 1, "rte": 0})
    ms = [tm("sst2", [0.03, 0.05, 0.04]), tm("mrpc", [0.02, 0.03, 0.025]), tm("rte", [0.02, 0.01, 0.03])]
    t = evaluate(CLAIM, Superiority(), ms, gates=[gate])
    assert one(t, "rte").verdict == "not testable"
    assert one(t, "all (sst2, mrpc)").n_units == 6
    t = evaluate(CLAIM, Superiority(), ms[1:], gates=[gate])
    pooled = one(t, "all (mrpc, rte)")
    assert pooled.verdict == "not testable" and "fewer than 2 tasks testable" in pooled.reason
    # a pool that could not be formed has no number of its own (not mrpc's values under the pool's name)
    assert pooled.n_units == 0 and pooled.unit_values == "[]"
    assert np.isnan(pooled.effect) and np.isnan(pooled.ci_low) and np.isnan(pooled.ci_high)
    assert one(t, "mrpc").n_units == 3 and np.isfinite(one(t, "mrpc").effect)


def test_pooling_groups_by_setting_and_refuses_bad_input():
    ms = [tm("sst2", [0.03, 0.05, 0.04], "30%"), tm("mrpc", [0.02, 0.03, 0.025], "30%"),
          tm("sst2", [0.03, 0.05, 0.04], "50%"), tm("mrpc", [0.02, 0.03, 0.025], "50%")]
    t = evaluate(CLAIM, Superiority(), ms)
    assert len(t) == 6 and (t["task"] == "all (sst2, mrpc)").sum() == 2
    assert len(evaluate(CLAIM, Superiority(), ms[:1])) == 1  # one task: no pooled row
    with pytest.raises(ValueError, match="full and chance"):
        evaluate(CLAIM, Superiority(), [tm("sst2", [0.1, 0.2]), meas("mrpc", [0.1, 0.2])])
    with pytest.raises(ValueError, match="twice"):
        evaluate(CLAIM, Superiority(), [tm("sst2", [0.1, 0.2]), tm("sst2", [0.1, 0.3])])


def test_raw_pooling_without_full_and_chance():
    t = evaluate(CLAIM, Superiority(), [meas("a", [0.1, 0.2, 0.15]), meas("b", [0.3, 0.2, 0.25])])
    pooled = one(t, "all (a, b)")
    assert pooled.effect == pytest.approx(0.2) and "full - chance" not in pooled.test


# --------------------------------------------------------------------------------------------------- Holm

def test_adjust_holm_within_each_study_and_verdicts_from_the_adjusted_p():
    weak = [0.02, 0.07, 0.01, 0.06, 0.04]  # one-sided p = 0.0124 alone
    s1 = [evaluate(CLAIM, Superiority(), [meas("sst2", [0.05, 0.06, 0.055, 0.05])], study="s1")]
    s1 += [evaluate(Claim(f"paper.weak{i}", "P", "weak", Superiority()), Superiority(), [meas("sst2", weak)], study="s1")
           for i in range(3)]
    s1 += [evaluate(OTHER, Superiority(), [meas("sst2", [0.3], units=["one model"])], study="s1")]  # not testable
    s2 = [evaluate(CLAIM, Superiority(), [meas("sst2", weak)], study="s2")]
    alone = s1[1].iloc[0]
    assert alone.verdict == "supported" and alone.p_adjusted == pytest.approx(2 * alone.p)  # a family of 2 tests
    table = adjust(pd.concat(s1 + s2, ignore_index=True))
    validate(table)
    ft = claims.family_tests(table)
    s1_tests = ft[ft["family"].str.startswith("s1|")]
    assert len(s1_tests) == 8  # 4 tested rows x 2 directions; the not-testable row is outside the family
    np.testing.assert_allclose(s1_tests["p_adjusted"], holm(s1_tests["p"]))
    s1_rows = table[table["study"] == "s1"]
    # 8 tests: the strong row's p x 8, the three tied weak rows x max(7, 6, 5) = 7
    weak_rows = s1_rows[s1_rows["claim_id"].str.startswith("paper.weak")]
    np.testing.assert_allclose(weak_rows["p_adjusted"], 7 * alone.p)
    assert (weak_rows["verdict"] == "inconclusive").all()
    assert s1_rows.iloc[0].verdict == "supported" and s1_rows.iloc[-1].verdict == "not testable"
    s2_row = table[table["study"] == "s2"].iloc[0]
    assert s2_row.p_adjusted == pytest.approx(2 * alone.p) and s2_row.verdict == "supported"  # its own family


def test_adjust_hand_case_turns_a_significant_row_inconclusive():
    def hand(i, p):
        tests = claims._dump_tests([HT("supported", "greater", 0.0, "one-sided t", p),
                                    HT("contradicted", "less", 0.0, "one-sided t", 1 - p)])
        return {**{c: "" for c in COLUMNS}, "study": "s", "claim_id": f"c{i}", "claim": f"claim {i}",
                "task": "sst2", "effect": 0.1, "ci_low": 0.01, "ci_high": 0.2, "n_units": 5, "unit": "model",
                "test": SUP, "p": np.nan, "p_adjusted": np.nan, "margin": 0.0, "verdict": "inconclusive",
                "reason": "x", "tests": tests}
    out = adjust(pd.DataFrame([hand(i, p) for i, p in enumerate([0.005, 0.01, 0.02])], columns=list(COLUMNS)))
    # 6 tests sorted 0.005, 0.01, 0.02, 0.98, 0.99, 0.995 x 6, 5, 4, ... = 0.03, 0.05, 0.08
    np.testing.assert_allclose(out["p_adjusted"], [0.03, 0.05, 0.08])
    assert list(out["verdict"]) == ["supported", "inconclusive", "inconclusive"]
    out = adjust(pd.DataFrame([hand(i, p) for i, p in enumerate([0.005, 0.008, 0.009])], columns=list(COLUMNS)))
    np.testing.assert_allclose(out["p_adjusted"], [0.03, 0.04, 0.04])
    assert list(out["verdict"]) == ["supported"] * 3
    validate(out)


# -------------------------------------------------------------------------------------- render and validate

def test_render_never_shows_nan():
    t = pd.concat([
        evaluate(CLAIM, Superiority(), [tm("sst2", [0.03, 0.05, 0.04]), tm("mrpc", [-0.02, -0.03, -0.025])],
                 scale="quick"),
        evaluate(OTHER, Equivalence(ShareOfHeadroom()), [meas("sst2", [0.1], units=["m"], full=[0.9], chance=0.5)],
                 scale="quick"),
    ], ignore_index=True)
    text = render(adjust(t))
    assert "nan" not in text.lower()
    assert "n/a (not testable)" in text and "INCONCLUSIVE" in text
    assert text.splitlines()[0].startswith(f"{CLAIM.id} ({CLAIM.paper}): {CLAIM.text} [quick]")


def test_validate_refuses_other_layouts_and_words():
    t = evaluate(CLAIM, Superiority(), [meas("sst2", [0.03, 0.05, 0.04])])
    validate(t)
    with pytest.raises(ValueError, match="columns"):
        validate(t.rename(columns={"p": "p_value"}))
    with pytest.raises(ValueError, match="verdict words"):
        validate(t.assign(verdict="partly supported"))
    with pytest.raises(ValueError, match="reason"):
        validate(t.assign(reason=""))
    assert tuple(claims.empty_table().columns) == COLUMNS


def test_a_task_at_chance_cannot_be_normalised_and_stays_out_of_the_pool():
    ms = [tm("sst2", [0.03, 0.05, 0.04]), tm("mrpc", [0.02, 0.03, 0.025]),
          meas("rte", [0.01, 0.02, 0.015], full=[0.5, 0.49, 0.51], chance=0.5)]
    t = evaluate(CLAIM, Superiority(), ms)
    assert one(t, "all (sst2, mrpc)").n_units == 6
    t = evaluate(CLAIM, Superiority(), ms[1:])
    pooled = one(t, "all (mrpc, rte)")
    assert pooled.verdict == "not testable" and "full <= chance on rte" in pooled.reason


def test_identical_unit_values_are_tested_exactly_not_at_p_zero():
    """One head of a role in every model: t is undefined; the exact one-sided sign-flip test decides (1/2**n), so 3
    models cannot reach 0.05 (not testable) and 6 give p = 1/64."""
    claim = Claim("x.role", "nobody", "Heads of the role exist.", Superiority())
    m = claims.Measurement("SST-2", [1.0, 1.0, 1.0], [0, 1, 2], effect="heads of the role")
    row = evaluate(claim, claims.Superiority(), [m]).iloc[0]
    assert row["verdict"] == "not testable" and "smallest attainable p = 0.125" in row["reason"]
    m6 = claims.Measurement("SST-2", [1.0] * 6, list(range(6)), effect="heads of the role")
    assert evaluate(claim, claims.Superiority(), [m6]).iloc[0]["p"] == pytest.approx(1 / 64)


# ------------------------------------------------------------------------------------------ presence claims

@pytest.mark.parametrize("counts", [[0] * 6, [1, 2, 1, 3, 1, 1], [1, 0, 2, 0, 1, 0], [0, 0, 0, 0, 0, 0, 0, 1],
                                    [2] * 9])
def test_presence_tests_the_share_of_models_with_the_role_exactly(counts):
    """Against scipy's exact binomial test and its Clopper-Pearson interval (an independent computation)."""
    r = one(evaluate(CLAIM, Presence(), [meas("sst2", counts, effect="heads")]))
    k, n = sum(c > 0 for c in counts), len(counts)
    ci = sps.binomtest(k, n, 0.5).proportion_ci(0.95, method="exact")
    tests = {t.word: t for t in claims.row_tests(r)}
    assert tests["supported"].p == pytest.approx(sps.binomtest(k, n, 0.5, alternative="greater").pvalue)
    assert tests["contradicted"].p == pytest.approx(sps.binomtest(k, n, 0.5, alternative="less").pvalue)
    assert r.effect == pytest.approx(k / n) and r.p in (tests["supported"].p, tests["contradicted"].p)
    assert (r.ci_low, r.ci_high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert r.margin == 0.5 and f"found in {k} of {n} units" in r.reason
    assert decide(r) == (r.verdict, r.reason)  # re-derivable from the row


def test_presence_with_too_few_models_is_not_testable_but_says_what_was_found():
    """0 of 2 models: no t-interval [0, 0] (as a Superiority on the counts gives), but k of n and its exact CI."""
    r = one(evaluate(CLAIM, Presence(), [meas("sst2", [0, 0], effect="heads")]))
    assert r.verdict == "not testable" and np.isnan(r.p)
    assert "needs 5 units" in r.reason and "found in 0 of 2 units" in r.reason
    assert (r.effect, r.ci_low) == (0, 0) and r.ci_high == pytest.approx(1 - 0.025 ** 0.5)
    old = one(evaluate(CLAIM, Superiority(), [meas("sst2", [0, 0])]))
    assert (old.ci_low, old.ci_high) == (0, 0)  # a t-interval [0, 0] over counts: what Presence replaces
    r = one(evaluate(CLAIM, Presence(), [meas("sst2", [0, 0, 3], units=["a", "a", "b"], effect="heads")]))
    assert r.n_units == 2 and r.effect == 0.5  # unit means first: a = 0 (two values), b = 3


def test_tasks_short_of_units_alone_join_the_pool():
    """4 models per task cannot reach 0.05 exactly (one-sided 1 / 2**4); two such tasks pool to 8 models
    (1 / 2**8). A task failing another gate stays out."""
    ms = [meas("sst2", [1] * 4, effect="heads"), meas("mrpc", [2] * 4, effect="heads"), meas("rte", [1] * 4)]
    t = evaluate(CLAIM, Presence(), ms[:2])
    assert set(t.loc[t["task"] != "all (sst2, mrpc)", "verdict"]) == {"not testable"}
    pooled = one(t, "all (sst2, mrpc)")
    assert pooled.n_units == 8 and pooled.p == pytest.approx(1 / 2**8) and pooled.verdict == "supported"
    gate = role_found("positional", {"sst2": 1, "mrpc": 1, "rte": 0})
    t = evaluate(CLAIM, Presence(), ms, gates=[gate])
    assert one(t, "all (sst2, mrpc)").n_units == 8 and "no head of role" in one(t, "rte").reason
    t = evaluate(CLAIM, Presence(), [ms[0], meas("mrpc", [0] * 4)])
    assert one(t, "all (sst2, mrpc)").verdict == "inconclusive"  # 4 of 8 units: its own test decides nothing


def test_margin_sensitivity_reruns_the_tests_at_other_margins():
    """Half and double the declared margin, a table apart; factor 1 reproduces every verdict and adjusted p."""
    ms = [tm("sst2", [0.002, -0.001, 0.001, 0.0]), tm("mrpc", [0.004, 0.006, 0.005, 0.0045])]
    t = adjust(pd.concat([evaluate(OTHER, Equivalence(ShareOfHeadroom(0.1)), ms, study="s"),
                          evaluate(CLAIM, Superiority(margin=ShareOfHeadroom(0.1)), ms, study="s")],
                         ignore_index=True))
    same = claims.retest(t, 1.0)
    assert list(same["verdict"]) == list(t["verdict"])
    np.testing.assert_allclose(same["p_adjusted"].astype(float), t["p_adjusted"].astype(float))
    sens = claims.margin_sensitivity(t)
    assert list(sens.columns[-3:]) == ["verdict_x0.5", "verdict_x2", "changes"]
    eq_mrpc = sens[(sens["claim_id"] == OTHER.id) & (sens["task"] == "mrpc")].iloc[0]
    # mrpc's effect 0.0049 against margins 0.0065 (x0.5), 0.013 (x1), 0.026 (x2): equivalence only gets easier
    assert eq_mrpc["margin"] == pytest.approx(0.1 * (0.81 - 0.68))
    order = ["contradicted", "inconclusive", "supported"]
    assert order.index(eq_mrpc["verdict_x0.5"]) <= order.index(eq_mrpc["verdict"]) <= order.index(eq_mrpc["verdict_x2"])
    with pytest.raises(ValueError, match="factor"):
        claims.retest(t, 0)


def test_a_task_of_one_model_never_joins_a_pool():
    t = evaluate(CLAIM, Presence(), [meas("sst2", [1] * 5), meas("mrpc", [1]), meas("rte", [1] * 5)])
    pooled = one(t, "all (sst2, rte)")
    assert pooled.n_units == 10 and one(t, "mrpc").verdict == "not testable"
    t = evaluate(CLAIM, Superiority(), [meas("sst2", [0.1]), meas("mrpc", [0.2])])
    assert one(t, "all (sst2, mrpc)").verdict == "not testable"


def test_identical_values_under_a_t_rule_get_the_power_gate_of_the_exact_test_that_runs():
    """Every unit gave the same value: the t statistic is undefined and the exact sign-flip test runs, so the row
    needs that test's units (5 at 0.05), not the t-test's 2: with 4 it is not testable and joins no Holm family."""
    r = one(evaluate(CLAIM, Superiority(), [meas("sst2", [0.02] * 4)]))
    assert r.verdict == "not testable" and "sign-flip" in r.reason and "needs 5 units" in r.reason
    assert claims.row_tests(r) == []
    r = one(evaluate(CLAIM, Superiority(), [meas("sst2", [0.02] * 5)]))
    assert r.verdict == "inconclusive" and r.p == pytest.approx(1 / 32)  # x 2 tests after Holm: 1/16
    r = one(evaluate(CLAIM, Superiority(), [meas("sst2", [0.02] * 6)]))
    assert r.verdict == "supported" and r.p == pytest.approx(1 / 64) and r.p_adjusted == pytest.approx(1 / 32)


def test_a_positive_effect_smaller_than_the_margin_is_not_supported():
    values = [0.011, 0.0112, 0.0109, 0.0111, 0.0108]
    r = one(evaluate(CLAIM, Superiority(margin=0.1), [meas("sst2", values)]))
    tests = {t.word: t for t in claims.row_tests(r)}
    assert tests["supported"].p_adjusted < 0.05 and tests["not supported"].p_adjusted < 0.05
    assert r.verdict == "not supported" and r.p_test.startswith("not supported: effect < +0.1")
    validate(pd.DataFrame([r]))


def test_converged_gate_names_the_models_still_improving_and_needs_curves():
    """The gate of claims about fine-tuned models: testable only when every model behind the row (full models of
    its units, and its own masked models) reached the plateau of its held-out score; a model that stopped at the
    cap still improving is named; no curve, nothing judged."""
    import pandas as pd

    from headprune_utils.analysis import preconditions as pc

    flat = [{"epoch": 1, "selected": False}, {"epoch": 2, "selected": True}, {"epoch": 3}, {"epoch": 4}]
    rising = [{"epoch": e, "selected": e == 10} for e in range(1, 11)]
    rows = [pc.convergence_row("SST-2", s, "full model", flat) for s in range(3)]
    rows += [pc.convergence_row("SST-2", s, "masked 50%", flat, setting="50%; mask, then fine-tune") for s in (0, 1)]
    rows += [pc.convergence_row("SST-2", 2, "masked 50%", rising, setting="50%; mask, then fine-tune")]
    rows += [pc.convergence_row("CoLA", 0, "full model", None)]
    ev = {"convergence": pd.DataFrame(rows)}
    gate = pc.Converged(only="mask, then fine-tune")
    m = lambda task, units, setting: claims.Measurement(task, [0.1] * len(units), units, setting=setting)  # noqa: E731
    assert gate.check(m("SST-2", [0, 1], "50%; mask, then fine-tune"), ev) is None
    why = gate.check(m("SST-2", [0, 1, 2], "50%; mask, then fine-tune"), ev)
    assert "1 of 6" in why and "masked 50% of seed 2 (best epoch 10 of 10)" in why
    assert gate.check(m("SST-2", [0, 1, 2], "50%; fine-tune, then mask"), ev) is None, "`only`: another regime"
    assert "cannot be judged" in pc.Converged().check(m("CoLA", [0], "x"), ev)
    assert "cannot be judged" in pc.Converged().check(m("MRPC", [0], "x"), ev)
    assert pc.reached_plateau(flat) and not pc.reached_plateau(rising) and not pc.reached_plateau([])
    assert "plateau" in gate.text() and "mask, then fine-tune rows" in gate.text()


@pytest.mark.parametrize("unit, text", [(("SST-2", 3), "SST-2 seed 3"), (2, "seed 2"), (("a", "b", 1), "a b 1"),
                                        (("CoLA", "zero_shot"), "CoLA zero_shot"),
                                        ("model-x", "model-x")])
def test_a_unit_named_in_a_reason_reads_in_words_outside_parentheses(unit, text):
    """A model still improving at the cap is named with its unit in words (the findings bullets drop what is in
    parentheses: a unit printed as a tuple vanished there, leaving "mask of;")."""
    assert preconditions.unit_text(unit) == text
    assert "(" not in preconditions.unit_text(unit)


def test_a_unit_read_back_as_floats_is_named_with_integers():
    assert preconditions.unit_text(("SST-2", 3.0)) == "SST-2 seed 3" and preconditions.unit_text(2.0) == "seed 2"


# -------------------------------------------- the family-aware Holm factor (Tarone 1990; Hommel & Krummenauer 1998)

def test_exact_tests_that_cannot_reach_the_level_do_not_raise_the_others_factor():
    """30 rows of an exact sign-flip test over 5 models (smallest p 1/32) beside 3 rows of t-tests: at the first
    steps only the t-tests can reach alpha / K (K = 6), so the strong t rows get a factor of 6, not 66; the exact rows
    keep their turn and read inconclusive (after the 3 t rows, K = 3: 3 x 1/32 > 0.05), never "not testable"."""
    sign = Superiority(test="sign_flip")
    # (each task in a setting of its own: no pooled rows)
    exact = evaluate(CLAIM, sign, [meas(f"e{i}", [0.1, 0.2, 0.3, 0.4, 0.5], setting=f"e{i}") for i in range(30)],
                     study="s")
    strong = [0.101, 0.102, 0.099, 0.1, 0.098]
    tt = evaluate(CLAIM, Superiority(), [meas(f"t{i}", strong, setting=f"t{i}") for i in range(3)], study="s")
    table = adjust(pd.concat([exact, tt], ignore_index=True))
    validate(table)
    e, t = table[table["task"].str.startswith("e")], table[table["task"].str.startswith("t")]
    assert (e["verdict"] == "inconclusive").all() and np.allclose(e["p_adjusted"], 3 / 32)
    p_sup = sps.ttest_1samp(strong, 0.0, alternative="greater").pvalue
    assert np.allclose(t["p_adjusted"], 6 * p_sup) and (t["verdict"] == "supported").all()
    ft = claims.family_tests(table)
    assert len(ft) == 66  # every test is in the family
    pd.testing.assert_frame_equal(adjust(table), table)  # idempotent


def test_leaving_the_hopeless_tests_out_of_the_factor_is_what_lets_a_t_row_be_decided():
    """A t row whose p (about 0.0017) survives a factor of 6 (the tests that can reach alpha / 6) but not Holm's 66:
    supported beside 30 exact 5-unit rows; the same row beside 30 t rows (every test can reach the level) stays
    inconclusive, as under Holm."""
    sign = Superiority(test="sign_flip")
    mid = [0.1, 0.15, 0.12, 0.08, 0.2]
    p_mid = sps.ttest_1samp(mid, 0.0, alternative="greater").pvalue
    assert 6 * p_mid < 0.05 < 66 * p_mid
    exact = [evaluate(CLAIM, sign, [meas(f"e{i}", [0.1, 0.2, 0.3, 0.4, 0.5], setting=f"e{i}")], study="s")
             for i in range(30)]
    tt = [evaluate(CLAIM, Superiority(), [meas(f"t{i}", mid, setting=f"t{i}")], study="s") for i in range(3)]
    table = adjust(pd.concat(exact + tt, ignore_index=True))
    t = table[table["task"].str.startswith("t")]
    assert (t["verdict"] == "supported").all() and np.allclose(t["p_adjusted"], 6 * p_mid)
    wide = [0.1, 0.2, 0.3, 0.4, 0.5]
    as_t = [evaluate(CLAIM, Superiority(), [meas(f"e{i}", wide, setting=f"e{i}")], study="s") for i in range(30)]
    table = adjust(pd.concat(as_t + tt, ignore_index=True))
    ft = claims.family_tests(table)
    assert np.allclose(ft["p_adjusted"], holm(ft["p"]))  # t-tests only: Holm's procedure
    assert (table.loc[table["task"].str.startswith("t"), "verdict"] == "inconclusive").all()


def test_the_factor_counts_the_declared_test_not_the_one_that_ran():
    """A t rule whose units all gave one value runs the exact sign-flip test (t is undefined), but its smallest p is
    the declared t-test's (0): which tests count in the factor never depends on the values."""
    row = one(evaluate(CLAIM, Superiority(), [meas("sst2", [0.02] * 5)]))
    assert claims._smallest_p(row) == 0.0 and "sign-flip" in row["p_test"]
    row = one(evaluate(CLAIM, Superiority(test="sign_flip"), [meas("sst2", [0.01, 0.02, 0.03, 0.04, 0.05])]))
    assert claims._smallest_p(row) == pytest.approx(1 / 32)


def test_one_alpha_per_family():
    a = evaluate(CLAIM, Superiority(), [meas("x", [0.1, 0.2, 0.3])], study="s")
    b = evaluate(CLAIM, Superiority(alpha=0.01), [meas("y", [0.1, 0.2, 0.3])], study="s")
    with pytest.raises(ValueError, match="mixes alpha levels"):
        adjust(pd.concat([a, b], ignore_index=True))


def test_a_two_sided_claim_is_supported_either_way_and_never_contradicted():
    """Superiority("two-sided"): a claim that names no direction. Either one-sided test supports it (both in the
    Holm family, together a two-sided test); with a margin, the TOST within it says "not supported"; the label
    round-trips (retest at factor 1 reproduces the verdicts)."""
    two = Superiority("two-sided", margin=0.05)
    down, up, flat = [-0.2, -0.21, -0.19, -0.2, -0.22], [0.2, 0.21, 0.19, 0.2, 0.22], [0.001, -0.002, 0.0, 0.002, -0.001]
    t = evaluate(CLAIM, two, [meas(f"t{i}", v, setting=f"s{i}") for i, v in enumerate((down, up, flat))])
    validate(t)
    rows = {r["task"]: r for _, r in t.iterrows()}
    assert rows["t0"]["verdict"] == "supported" and rows["t0"]["p_test"] == "supported: effect < 0 (one-sided t)"
    assert rows["t1"]["verdict"] == "supported" and rows["t1"]["p_test"] == "supported: effect > 0 (one-sided t)"
    assert rows["t2"]["verdict"] == "not supported" and rows["t2"]["p_test"].startswith("not supported: |effect| < 0.05")
    assert rows["t0"]["test"].startswith("superiority (two-sided)")
    assert {x.word for x in claims.row_tests(rows["t0"])} == {"supported", "not supported"}
    p_down = sps.ttest_1samp(down, 0.0, alternative="less").pvalue
    assert rows["t0"]["p"] == pytest.approx(p_down)
    pd.testing.assert_frame_equal(claims.retest(t, 1.0), t)
    assert "contradicted" not in set(t["verdict"])
    with pytest.raises(ValueError, match="two-sided"):
        Superiority("both")


def test_a_pooled_row_clusters_units_that_share_a_random_draw():
    """Seed s's random mask is the same on every task: with ``pool_by`` the pooled row averages the tasks'
    normalised values of a seed first and tests over the seeds (3 units, not 6); per-task rows are unchanged."""
    a = [0.10, 0.20, 0.30]
    b = [0.05, 0.15, 0.40]
    ms = [meas("A", a, units=[("A", s) for s in range(3)], full=[0.9] * 3, chance=0.5),
          meas("B", b, units=[("B", s) for s in range(3)], full=[0.6] * 3, chance=0.0)]
    plain = evaluate(CLAIM, Superiority(), ms)
    clustered = evaluate(replace(CLAIM, pool_by=claims.SEED_SHARED_MASKS), Superiority(), ms)
    assert one(plain, "all (A, B)")["n_units"] == 6
    pooled = one(clustered, "all (A, B)")
    want = [(x / 0.4 + y / 0.6) / 2 for x, y in zip(a, b)]  # each task / (full - chance), then the seed's mean
    assert pooled["n_units"] == 3 and json.loads(pooled["unit_values"]) == pytest.approx(want)
    assert pooled["unit"] == claims.SEED_SHARED_MASKS.text and pooled["effect"] == pytest.approx(np.mean(want))
    for task in ("A", "B"):
        pd.testing.assert_series_equal(one(plain, task).drop(["p_adjusted", "reason", "tests"]),
                                       one(clustered, task).drop(["p_adjusted", "reason", "tests"]), check_names=False)


def test_a_pooled_label_names_the_headroom_it_divides_by():
    """A pooled row of task scores names what each task's values are divided by: "(full - chance)" for a
    fixed-span margin and for ``TASK_SCORE``, the margin's own ``span`` for a ``ShareOfHeadroom`` that names one
    (study 4's attenuation ceiling); a ``Fixed`` margin's numeric span is never taken for a name."""
    ms = [meas("A", [0.1, 0.2, 0.3], units=[("A", s) for s in range(3)], full=[0.9] * 3, chance=0.5),
          meas("B", [0.05, 0.15, 0.4], units=[("B", s) for s in range(3)], full=[0.6] * 3, chance=0.0)]
    for margin, span in ((margins.SHARE_OF_HEADS, "(full - chance)"), (margins.TASK_SCORE, "(full - chance)"),
                         (margins.HEADROOM, "the attenuation ceiling")):
        pooled = one(evaluate(CLAIM, Superiority(margin=margin), ms), "all (A, B)")
        assert f"/ {span};" in pooled["test"] and f"margins / {span}" in pooled["test"], pooled["test"]
