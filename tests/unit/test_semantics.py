"""The semantics axis of the claims model: primary vs sensitivity rows, Holm families, whether a verdict depends on
the semantics, and the paper -> semantics table (hand-made tables; independent computations)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from headprune_utils import claims, semantics, stats
from headprune_utils.config import ParameterError


def _row(cid, sem, p, verdict="inconclusive", n=5, task="SST-2", setting="s"):
    return {"study": "x", "claim_id": cid, "paper": "P", "claim": "c", "task": task, "setting": setting,
            "semantics": sem, "effect": 0.1, "ci_low": 0.0, "ci_high": 0.2, "n_units": n, "unit": "model",
            "test": "superiority (greater); one-sample t on d; alpha=0.05", "p": p, "p_adjusted": np.nan,
            "margin": 0.0, "verdict": verdict, "reason": "" if p == p else "a gate failed", "scale": ""}


def test_adjust_marks_primary_and_runs_holm_per_family():
    t = pd.DataFrame([_row("a", "uniform", 0.01), _row("b", "zero", 0.02), _row("a", "zero", 0.03),
                      _row("b", "uniform", 0.04), _row("a", "mean", 0.01)])
    out = claims.adjust(t, {"a": "uniform", "b": "zero"})
    assert out["analysis"].tolist() == ["primary", "primary", "sensitivity", "sensitivity", "sensitivity"]
    # primary family: rows 0 and 1 (two claims, each under its own paper's semantics)
    assert out["p_adjusted"].iloc[:2].tolist() == pytest.approx(list(stats.holm([0.01, 0.02])))
    assert out["p_adjusted"].iloc[:2].tolist() == pytest.approx([0.02, 0.02])  # by hand: 2 x 0.01, max(0.02, 1 x 0.02)
    # each sensitivity semantics alone: one row each, unadjusted
    assert out["p_adjusted"].iloc[2:].tolist() == pytest.approx([0.03, 0.04, 0.01])
    claims.validate(out)


def test_adjust_without_mapping_keeps_everything_primary_and_validate_refuses_odd_analysis():
    out = claims.adjust(pd.DataFrame([_row("a", "zero", 0.01), _row("b", "zero", 0.04)]))
    assert (out["analysis"] == "primary").all()
    assert out["p_adjusted"].tolist() == pytest.approx([0.02, 0.04])
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


def test_paper_semantics_and_parameter_checks():
    assert semantics.PAPER_SEMANTICS["Budhraja et al. 2020"] == "uniform"
    assert {semantics.PAPER_SEMANTICS[p] for p in ("Michel et al. 2019", "Voita et al. 2019", "Bian et al. 2021")} == {"zero"}
    assert semantics.order("uniform", ["zero", "uniform", "mean"]) == ["uniform", "zero", "mean"]
    semantics.check_ablations("ablations", ["zero", "mean"])
    for bad, msg in (([], "non-empty"), ("zero", "non-empty"), (["zero", "zero"], "repeat"), (["none"], "unknown")):
        with pytest.raises(ParameterError, match=f"ablations.*{msg}|{msg}"):
            semantics.check_ablations("ablations", bad)
