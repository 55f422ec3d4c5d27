"""The semantics axis of the claims model: primary vs sensitivity rows, Holm families, whether a verdict depends on
the semantics, and the paper -> semantics table (hand-made tables; independent computations)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from headprune_utils.analysis import claims, stats
from headprune_utils.studies import semantics
from headprune_utils.studies.config import ParameterError


SUP = "superiority (greater); one-sided t tests on d; alpha=0.05"
EQ = "equivalence (TOST); one-sided t tests on d; alpha=0.05; margin: 0.1 = fixed"


def _row(cid, sem, p, verdict="inconclusive", n=5, task="SST-2", setting="s", effect=0.1):
    """A superiority row: tests 'effect > 0' with one-sided p ``p`` and 'effect < 0' with ``1 - p`` (their
    adjusted p set to the raw one until claims.adjust runs)."""
    tests = "[]" if p != p else claims._dump_tests([
        claims.HypothesisTest("supported", "greater", 0.0, "one-sided t", p, p),
        claims.HypothesisTest("contradicted", "less", 0.0, "one-sided t", 1 - p, 1 - p)])
    return {"study": "x", "claim_id": cid, "paper": "P", "claim": "c", "task": task, "setting": setting,
            "semantics": sem, "effect": effect, "ci_low": 0.0, "ci_high": 0.2, "n_units": n, "unit": "model",
            "test": SUP, "p": p, "p_adjusted": np.nan, "margin": 0.0, "verdict": verdict,
            "reason": "" if p == p else "a gate failed", "scale": "", "tests": tests}


def _eq_row(cid, sem, effect, side):
    """An equivalence row contradicted above +0.1 (``side="greater"``) or below -0.1."""
    tests = claims._dump_tests([
        claims.HypothesisTest("supported", "inside", 0.1, "TOST, one-sided t", 1.0, 1.0),
        claims.HypothesisTest("contradicted", "greater", 0.1, "one-sided t", *(2 * [0.001 if side == "greater" else 1])),
        claims.HypothesisTest("contradicted", "less", -0.1, "one-sided t", *(2 * [0.001 if side == "less" else 1]))])
    return {**_row(cid, sem, 0.5, "contradicted", effect=effect), "test": EQ, "margin": 0.1, "tests": tests}


def test_adjust_marks_primary_and_runs_holm_per_family():
    t = pd.DataFrame([_row("a", "uniform", 0.01), _row("b", "zero", 0.02), _row("a", "zero", 0.03),
                      _row("b", "uniform", 0.04), _row("a", "mean", 0.01)])
    out = claims.adjust(t, {"a": "uniform", "b": "zero"})
    assert out["analysis"].tolist() == ["primary", "primary", "sensitivity", "sensitivity", "sensitivity"]
    # primary family: rows 0 and 1 (two claims, each under its own paper's semantics), two tests each
    assert out["p_adjusted"].iloc[:2].tolist() == pytest.approx(list(stats.holm([0.01, 0.02, 0.99, 0.98]))[:2])
    assert out["p_adjusted"].iloc[:2].tolist() == pytest.approx([0.04, 0.06])  # by hand: 4 x 0.01, 3 x 0.02
    # each sensitivity semantics alone: one row each, its two tests
    assert out["p_adjusted"].iloc[2:].tolist() == pytest.approx([0.06, 0.08, 0.02])
    assert out["verdict"].tolist() == ["supported", "inconclusive", "inconclusive", "inconclusive", "supported"]
    claims.validate(out)


def test_adjust_without_mapping_keeps_everything_primary_and_validate_refuses_odd_analysis():
    out = claims.adjust(pd.DataFrame([_row("a", "zero", 0.01), _row("b", "zero", 0.04)]))
    assert (out["analysis"] == "primary").all()
    assert out["p_adjusted"].tolist() == pytest.approx([0.04, 0.12])  # 4 tests: 4 x 0.01, 3 x 0.04
    bad = out.copy()
    bad.loc[0, "analysis"] = "secondary"
    with pytest.raises(ValueError, match="unknown analysis"):
        claims.validate(bad)


def test_semantics_dependence_yes_no_cannot_tell():
    t = pd.DataFrame([
        _row("a", "uniform", 0.01, "supported"), _row("a", "zero", 0.5, "not supported"),          # flips
        _row("b", "uniform", 0.01, "supported"), _row("b", "zero", 0.01, "supported"),              # same
        _row("c", "uniform", np.nan, "not testable", 0), _row("c", "zero", 0.01, "supported"),       # one testable
        _row("d", "uniform", 0.01, "supported"),                                                    # one semantics
        _row("e", "uniform", 0.01, "supported"), _row("e", "zero", 0.5, "inconclusive"),            # strength only
        _row("f", "uniform", 0.01, "contradicted"), _row("f", "zero", 0.5, "not supported"),        # both against
        _eq_row("g", "uniform", 0.3, "greater"), _eq_row("g", "zero", -0.3, "less"),                # a reversal
        _eq_row("h", "uniform", 0.3, "greater"), _eq_row("h", "zero", 0.25, "greater"),             # same side
    ])
    t["analysis"] = np.where(t["semantics"] == "uniform", "primary", "sensitivity")
    dep = claims.semantics_dependence(t).set_index("claim_id")
    assert dep.loc["a", "depends"] == "flips" and "zero: not supported" in dep.loc["a", "note"]
    assert dep.loc["b", "depends"] == "no"
    assert dep.loc["c", "depends"] == "cannot tell"
    assert dep.loc["e", "depends"] == "differs in strength"
    assert dep.loc["f", "depends"] == "differs in strength", "not supported vs contradicted: no flip"
    assert "d" not in dep.index
    assert (dep["primary_semantics"] == "uniform").all()
    assert dep.loc["a", "verdict_zero"] == "not supported"
    # both "contradicted", but significantly above +m under one semantics and below -m under the other: a flip
    assert dep.loc["g", "depends"] == "flips"
    assert "reversal: effect > 0 under uniform; effect < 0 under zero" in dep.loc["g", "note"]
    assert dep.loc["h", "depends"] == "no" and "effect > 0 under uniform; effect > 0 under zero" in dep.loc["h", "note"]


def test_verdicts_by_semantics_keeps_primary_rows_and_drops_unmeasured_sensitivity_rows():
    declared = [SimpleNamespace(id="a", semantics="uniform"), SimpleNamespace(id="b", semantics="zero")]
    table = pd.DataFrame({"ablation": ["uniform", "zero"], "score": [1.0, 2.0]})
    seen = []

    def decide(sub, sem):
        seen.append((sem, sub["ablation"].unique().tolist()))
        # claim a is measured under uniform only; claim b under zero only
        return pd.DataFrame([_row("a", sem, 0.01 if sem == "uniform" else np.nan,
                                  "inconclusive" if sem == "uniform" else "not testable", 5 if sem == "uniform" else 0),
                             _row("b", sem, 0.02 if sem == "zero" else np.nan,
                                  "inconclusive" if sem == "zero" else "not testable", 5 if sem == "zero" else 0)])

    v = semantics.verdicts_by_semantics(table, declared, decide, ["uniform", "zero"])
    assert seen == [("uniform", ["uniform"]), ("zero", ["zero"])], "each semantics is decided on its own rows"
    assert sorted(zip(v["claim_id"], v["semantics"], v["analysis"])) == [("a", "uniform", "primary"),
                                                                       ("b", "zero", "primary")]
    with pytest.raises(ValueError, match="ablation"):
        semantics.verdicts_by_semantics(table.drop(columns="ablation"), declared, decide)


def test_a_sensitivity_semantics_that_measured_a_claim_keeps_all_its_rows_the_unformed_pool_too():
    """Claim a (uniform) measured under zero on one task, its pool over two tasks not formed (n_units 0, not
    testable): the pool's row stays beside the task's, as it does under the claim's own semantics."""
    declared = [SimpleNamespace(id="a", semantics="uniform")]
    table = pd.DataFrame({"ablation": ["uniform", "zero"], "score": [1.0, 2.0]})

    def decide(sub, sem):
        task = _row("a", sem, 0.01, "inconclusive", 5)
        pool = {**_row("a", sem, np.nan, "not testable", 0), "task": "all (SST-2, STS-B)",
                "reason": "fewer than 2 tasks testable for pooling (testable: SST-2)"}
        return pd.DataFrame([task, pool])

    v = semantics.verdicts_by_semantics(table, declared, decide, ["uniform", "zero"])
    zero = v[v["semantics"] == "zero"]
    assert len(zero) == 2 and set(zero["analysis"]) == {"sensitivity"}
    assert (zero["verdict"] == "not testable").sum() == 1


def test_paper_semantics_and_parameter_checks():
    assert semantics.PAPER_SEMANTICS["Budhraja et al. 2020"] == "uniform"
    assert {semantics.PAPER_SEMANTICS[p] for p in ("Michel et al. 2019", "Voita et al. 2019", "Bian et al. 2021")} == {"zero"}
    assert semantics.order("uniform", ["zero", "uniform", "mean"]) == ["uniform", "zero", "mean"]
    semantics.check_ablations("ablations", ["zero", "mean"])
    for bad, msg in (([], "non-empty"), ("zero", "non-empty"), (["zero", "zero"], "repeat"), (["none"], "unknown")):
        with pytest.raises(ParameterError, match=f"ablations.*{msg}|{msg}"):
            semantics.check_ablations("ablations", bad)
