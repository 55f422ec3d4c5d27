"""The committed verdict tables (quick and standard) keep the decision contract, recomputed here from each row's own
tests with independent code (scipy's tests, our own Holm), not through ``claims``' decision functions:

- every row decided ``supported`` / ``contradicted`` / ``not supported`` has a test of that word whose Holm-adjusted
  p (over every test of its family) is the row's ``p_adjusted``, below alpha;
- every ``inconclusive`` row with tests has none below alpha;
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


def _holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment written out: sorted ascending, (m - i) p_(i), running maximum, capped at 1."""
    order = np.argsort(p, kind="stable")
    adj = np.empty_like(p)
    running = 0.0
    for i, j in enumerate(order):
        running = max(running, min(1.0, (len(p) - i) * p[j]))
        adj[j] = running
    return adj


def _tables():
    out = []
    for profile in ("quick", "standard"):
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
        adj = _holm(np.array([t["p"] for _, t in members], dtype=float))
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
        elif r["verdict"] == "inconclusive" and tests:
            assert all(t["p_adjusted"] >= alpha for t in tests), (r["claim_id"], r["task"])
        x = np.asarray(json.loads(r["unit_values"] or "[]"), dtype=float)
        for t in tests:
            if t["method"] == "one-sided t" and x.size >= 2 and np.ptp(x) > 0:
                want = sps.ttest_1samp(x, t["bound"], alternative=t["side"]).pvalue
                assert t["p"] == pytest.approx(want, rel=1e-7, abs=1e-12), (r["claim_id"], r["task"], t)
