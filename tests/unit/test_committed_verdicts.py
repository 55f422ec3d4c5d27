"""The committed verdict tables (every profile whose findings are committed: quick, standard, standard-next) keep the
decision contract, recomputed here from each row's own tests with independent code (scipy's tests, Holm's step-down
with Tarone's factor written out from its definition), not through ``claims``' decision or adjustment functions:

- every test's adjusted p is Holm's step-down over every test of its family with Tarone's factor (Hommel &
  Krummenauer 1998): at each step, the smallest K such that at most K of the tests not yet passed can reach alpha/K,
  each test's smallest attainable p read off the row's declared test (its label) and its number of units;
- every row decided ``supported`` / ``contradicted`` / ``not supported`` has a test of that word whose adjusted
  p is the row's ``p_adjusted``, below alpha;
- every ``inconclusive`` row with tests has none below alpha, except a pooled row whose word is withheld (tested,
  in the family): a pool never overrides a task, so a pooled row is decided only when none of its tasks' rows is
  decided in the other stance (supported against contradicted / not supported), and withheld only when one is;
- the stored unadjusted p of every t-test equals scipy's one-sided t-test on the row's unit values.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from headprune_utils.analysis import claims
from headprune_utils.store.paths import StudyPaths
from headprune_utils.studies import NAMES

DECIDED = {"supported", "contradicted", "not supported"}


PROFILES = ("quick", "standard", "standard-next")


def _smallest_p(label: str, n: int) -> float:
    """The smallest p the row's declared test can give over n units, from its label alone: 0 for a t-test on 2 or
    more units; 1/2^n for an exact one-sided sign-flip or binomial test (all n signs one way: one of 2^n equally
    likely outcomes)."""
    if "one-sided t tests" in label:
        return 0.0 if n >= 2 else 1.0
    if "sign-flip tests" in label or "binomial tests" in label:
        return 0.5 ** n
    raise AssertionError(f"a declared test this check does not know: {label!r}")


def _tarone_holm(p: np.ndarray, p_min: np.ndarray, alpha: float) -> np.ndarray:
    """Holm's step-down with Tarone's factor, from the definition: p sorted ascending; at step i the factor is the
    smallest K >= 1 for which the count of remaining tests with p_min <= alpha / K is at most K (all of them
    counted when none is: Holm's m - i); adjusted p = running maximum of min(1, K p), capped at 1."""
    order = np.argsort(p, kind="stable")
    adj = np.empty_like(p)
    running = 0.0
    for i, j in enumerate(order):
        rest = p_min[order[i:]]
        factor = next((k for k in range(1, len(rest) + 1) if sum(q <= alpha / k for q in rest) <= k), len(rest))
        running = max(running, min(1.0, factor * p[j]))
        adj[j] = running
    return adj


def test_tarone_holm_written_out_is_holm_for_t_tests_and_smaller_beside_exact_tests():
    """The check's own adjustment: Holm when every test can reach any level; beside a test that cannot reach alpha/2
    (1/32 > 0.025), the others' factor drops by one."""
    p = np.array([0.01, 0.02, 0.04, 0.03125])
    holm = np.array([0.04, 0.06, 0.0625, 0.0625])
    assert np.allclose(_tarone_holm(p, np.zeros(4), 0.05), holm)
    got = _tarone_holm(p, np.array([0.0, 0.0, 0.0, 1 / 32]), 0.05)
    assert np.allclose(got, [0.03, 0.04, 0.0625, 0.0625])


def _tables():
    out = []
    for profile in PROFILES:
        for name in NAMES:
            f = StudyPaths(name, profile, staged=False).tables / "verdicts.csv"
            if f.exists():
                out.append(pytest.param(f, id=f"{profile}-{name}"))
    return out


@pytest.mark.parametrize("path", _tables())
def test_committed_verdicts_keep_the_decision_contract(path):
    v = pd.read_csv(path, keep_default_na=False, na_values=[""])
    assert tuple(v.columns) == claims.COLUMNS, f"{path}: re-render it (old layout)"
    claims.validate(v)
    family = v["study"].astype(str) + "|" + v["analysis"] + "|" + np.where(v["analysis"] == "sensitivity",
                                                                          v["semantics"].astype(str), "")
    long = [(i, family[i], t) for i in v.index for t in json.loads(v.at[i, "tests"] or "[]")]
    for fam in {f for _, f, _ in long}:
        members = [(i, t) for i, f, t in long if f == fam]
        alphas = {float(re.search(r"alpha=([0-9.]+)", v.at[i, "test"]).group(1)) for i, _ in members}
        assert len(alphas) == 1, (path.name, fam, alphas)
        p_min = np.array([_smallest_p(v.at[i, "test"], len(json.loads(v.at[i, "unit_values"] or "[]"))
                                      or int(v.at[i, "n_units"])) for i, _ in members])
        adj = _tarone_holm(np.array([t["p"] for _, t in members], dtype=float), p_min, alphas.pop())
        for (i, t), a in zip(members, adj):
            assert t["p_adjusted"] == pytest.approx(a, rel=1e-9, abs=1e-15), (path.name, v.at[i, "claim_id"])
    for i, r in v.iterrows():
        tests = json.loads(r["tests"] or "[]")
        alpha = float(re.search(r"alpha=([0-9.]+)", r["test"]).group(1)) if tests else 0.05
        if r["verdict"] in DECIDED:
            own = [t for t in tests if t["word"] == r["verdict"] and t["p_adjusted"] < alpha]
            # the CSV carries p_adjusted to 6 significant digits
            assert own and r["p_adjusted"] == pytest.approx(min(t["p_adjusted"] for t in own), rel=1e-5), \
                (r["claim_id"], r["task"])
        elif r["verdict"] == "inconclusive" and tests and not r["reason"].startswith("a task decided otherwise: "):
            assert all(t["p_adjusted"] >= alpha for t in tests), (r["claim_id"], r["task"])
        x = np.asarray(json.loads(r["unit_values"] or "[]"), dtype=float)
        for t in tests:
            if t["method"] == "one-sided t" and x.size >= 2 and np.ptp(x) > 0:
                want = sps.ttest_1samp(x, t["bound"], alternative=t["side"]).pvalue
                assert t["p"] == pytest.approx(want, rel=1e-7, abs=1e-12), (r["claim_id"], r["task"], t)


STANCE = {"supported": 1, "contradicted": -1, "not supported": -1}


def _side(row) -> int:
    """The side of 0 the row's deciding test shows the effect on: +1 (a one-sided t or sign-flip test of effect > b,
    b >= 0), -1 (effect < b, b <= 0), 0 otherwise (a TOST, a binomial test, a bound on the other side of 0)."""
    alpha = float(re.search(r"alpha=([0-9.]+)", row["test"]).group(1))
    won = [t for t in json.loads(row["tests"] or "[]") if t["word"] == row["verdict"] and t["p_adjusted"] < alpha]
    if not won:
        return 0
    t = min(won, key=lambda t: t["p_adjusted"])
    if t["method"].startswith("TOST") or "binomial" in t["method"]:
        return 0
    return 1 if t["side"] == "greater" and t["bound"] >= 0 else -1 if t["side"] == "less" and t["bound"] <= 0 else 0


@pytest.mark.parametrize("path", _tables())
def test_committed_pools_never_override_a_task(path):
    v = pd.read_csv(path, keep_default_na=False, na_values=[""])
    key = pd.Series(["|".join(map(str, r)) for r in
                     v[["study", "claim_id", "setting", "semantics", "analysis"]].itertuples(index=False)], index=v.index)
    for i, r in v.iterrows():
        task = str(r["task"])
        if not (task.startswith("all (") and task.endswith(")")) or not json.loads(r["tests"] or "[]"):
            continue
        members = v[(key == key[i]) & v["task"].isin([t.strip() for t in task[5:-1].split(",")])]
        assert set(members["task"]) == {t.strip() for t in task[5:-1].split(",")}, (path.name, r["claim_id"], task)
        stances = {STANCE[w] for w in members["verdict"] if w in STANCE}
        if r["verdict"] in STANCE:
            assert stances <= {STANCE[r["verdict"]]}, (path.name, r["claim_id"], task, r["verdict"])
            # nor the same word from the opposite side (an equivalence contradicted above +m and below -m)
            mine = _side(r)
            assert all(mine * _side(m) >= 0 for _, m in members.iterrows() if m["verdict"] in STANCE), \
                (path.name, r["claim_id"], task)
        if r["reason"].startswith("a task decided otherwise: "):
            alpha = float(re.search(r"alpha=([0-9.]+)", r["test"]).group(1))
            would = re.search(r"it would read (supported|contradicted|not supported)", r["reason"]).group(1)
            assert any(t["word"] == would and t["p_adjusted"] < alpha for t in json.loads(r["tests"]))
            assert stances - {STANCE[would]}, (path.name, r["claim_id"], task)


def test_some_committed_table_decides_words_so_the_contract_is_checked():
    """The check above is empty over tables whose every row is not testable (quick, and standard before convergence):
    at least one committed table must carry decided words with their tests, else this file checks nothing."""
    decided = 0
    for param in _tables():
        v = pd.read_csv(param.values[0], keep_default_na=False, na_values=[""])
        decided += int(v["verdict"].isin(DECIDED).sum())
    assert decided > 0
