"""The cross-study summary is built from the verdict tables alone: one row per claim, primary rows counted, decided
rows spelled out, flips reported, links to the notebooks, never a NaN."""
from __future__ import annotations

import numpy as np
import pandas as pd

from headprune_utils import claims, summary
from headprune_utils.paths import StudyPaths


def _row(study, cid, task, verdict, sem, analysis, effect=0.1):
    return {"study": study, "claim_id": cid, "paper": "P", "claim": f"claim {cid}", "task": task, "setting": "s",
            "semantics": sem, "analysis": analysis, "effect": effect, "ci_low": np.nan if effect is None else 0.0,
            "ci_high": 0.2, "n_units": 3, "unit": "model", "test": "t", "p": 0.01, "p_adjusted": 0.02, "margin": 0.0,
            "verdict": verdict, "reason": "r", "scale": f"{study} scale"}


def test_summary_from_verdict_tables(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    t = StudyPaths("random_pruning", "quick", staged=False).tables
    t.mkdir(parents=True)
    pd.DataFrame([_row("random_pruning", "a.x", "SST-2", "supported", "uniform", "primary"),
                  _row("random_pruning", "a.x", "STS-B", "not testable", "uniform", "primary", None),
                  _row("random_pruning", "a.x", "SST-2", "not supported", "zero", "sensitivity"),
                  _row("random_pruning", "b.y", "SST-2", "inconclusive", "uniform", "primary"),
                  {**_row("random_pruning", "c.z", "all (A, B)", "supported", "zero", "primary"), "setting": ""}],
                 columns=list(claims.COLUMNS)).to_csv(t / "verdicts.csv", index=False)
    pd.DataFrame([{"claim_id": "a.x", "task": "SST-2", "setting": "s", "primary_semantics": "uniform",
                   "depends": "flips", "note": "uniform: supported; zero: not supported"}]).to_csv(
        t / "semantics_dependence.csv", index=False)
    rows = summary.claim_rows("quick").set_index("claim_id")
    assert list(rows.index) == ["a.x", "b.y", "c.z"], "one row per claim; studies without tables are left out"
    assert rows.loc["c.z", "decided"].startswith("all (A, B): **supported**"), "an empty setting reads nothing"
    assert rows.loc["a.x", "verdicts"] == "1 supported, 1 not testable"  # the sensitivity row is not counted
    assert "SST-2, s: **supported** (+0.1 [+0, +0.2])" in rows.loc["a.x", "decided"]
    assert rows.loc["a.x", "flips"].startswith("SST-2: uniform: supported") and rows.loc["b.y", "flips"] == "no"
    assert rows.loc["b.y", "decided"] == "none"
    path = summary.write_summary("quick")
    text = path.read_text()
    assert path == tmp_path / "SUMMARY.md" and "nan" not in text.lower()
    assert "[random_pruning](random_pruning/quick/random_pruning.ipynb)" in text and "3 claims in 1 studies" in text
    assert summary.summary_path("standard").name == "SUMMARY-standard.md"


def test_another_profiles_summary_sets_the_quick_verdicts_beside_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    for profile, rows in (("quick", [_row("random_pruning", "a.x", "SST-2", "not testable", "uniform", "primary", None),
                                     _row("random_pruning", "b.y", "SST-2", "inconclusive", "uniform", "primary")]),
                          ("standard", [_row("random_pruning", "a.x", "SST-2", "supported", "uniform", "primary"),
                                        _row("random_pruning", "b.y", "SST-2", "inconclusive", "uniform", "primary"),
                                        _row("random_pruning", "d.w", "SST-2", "supported", "uniform", "primary")])):
        t = StudyPaths("random_pruning", profile, staged=False).tables
        t.mkdir(parents=True)
        pd.DataFrame(rows, columns=list(claims.COLUMNS)).to_csv(t / "verdicts.csv", index=False)
    q = summary.quick_verdicts(summary.claim_rows("standard"))
    assert q == {("random_pruning", "a.x"): "1 not testable", ("random_pruning", "b.y"): "same",
                 ("random_pruning", "d.w"): "no verdict table"}
    text = summary.summary_markdown("standard")
    assert "the quick run (demonstration) |" in text and "| 1 supported | " in text and "| 1 not testable |" in text
    assert "(demonstration)" not in summary.summary_markdown("quick"), "the quick page compares with nothing"
