"""The cross-study summary is built from the verdict tables alone: one row per claim, primary rows counted, decided
rows spelled out, flips reported, links to the notebooks, never a NaN."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headprune_utils.analysis import claims
from headprune_utils.run import summary
from headprune_utils.store.paths import StudyPaths


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
                   "depends": "flips", "note": "uniform: supported; zero: not supported"},
                  # a setting with no primary row: measured outside the claim's protocol (its sensitivity analysis)
                  {"claim_id": "a.x", "task": "STS-B", "setting": "other protocol", "primary_semantics": "uniform",
                   "depends": "flips", "note": "uniform: contradicted; zero: supported"}]).to_csv(
        t / "semantics_dependence.csv", index=False)
    rows = summary.claim_rows("quick").set_index("claim_id")
    assert list(rows.index) == ["a.x", "b.y", "c.z"], "one row per claim; studies without tables are left out"
    assert rows.loc["c.z", "decided"].startswith("pooled (A, B): **supported**"), "an empty setting reads nothing"
    assert rows.loc["a.x", "verdicts"] == "1 supported, 1 not testable"  # the sensitivity row is not counted
    assert "SST-2, s: **supported** (+0.1 [+0, +0.2])" in rows.loc["a.x", "decided"]
    assert rows.loc["a.x", "flips"] == ("SST-2 (s): uniform: supported; zero: not supported; STS-B (other protocol; "
                                        "outside the claim's protocol: sensitivity): uniform: contradicted; zero: "
                                        "supported")
    assert rows.loc["b.y", "flips"] == "no"
    assert rows.loc["b.y", "decided"] == "none (SST-2, s: inconclusive, +0.1 [+0, +0.2])", "the nearest row"
    with pytest.raises(ValueError, match="has no executed notebook"):  # it would link a missing notebook
        summary.write_summary("quick")
    assert not (tmp_path / "SUMMARY.md").exists()
    StudyPaths("random_pruning", "quick", staged=False).notebook.write_text("{}")
    with pytest.raises(ValueError, match="run_meta.json is missing"):  # the record of the run that made them
        summary.write_summary("quick")
    StudyPaths("random_pruning", "quick", staged=False).meta.write_text('{"profile": "quick"}')
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


def test_an_existence_claim_reads_as_a_share_of_units_never_as_a_signed_effect(tmp_path, monkeypatch):
    """A ``claims.Presence`` row's effect is the share of units with the role: the summary and the report say
    "share k of n units" unsigned, with the Clopper-Pearson interval; every other row keeps the signed effect."""
    presence = {"test": "presence (greater); exact binomial on share of units with x > 0", "n_units": 2,
                "effect": 0.0, "ci_low": 0.0, "ci_high": 0.841886}
    assert summary.fmt_estimate(presence) == "share 0 of 2 units = 0 [0, 0.842]"
    assert summary.fmt_estimate({**presence, "n_units": 6, "effect": 5 / 6, "ci_low": 0.36, "ci_high": 0.996}) \
        == "share 5 of 6 units = 0.833 [0.36, 0.996]"
    assert summary.fmt_estimate({**presence, "test": "superiority (less); t on x", "effect": -1.25, "ci_low": -2.0,
                                 "ci_high": -0.5}) == "-1.25 [-2, -0.5]"
    assert summary.fmt_estimate({**presence, "effect": np.nan}) == "n/a [+0, +0.842]", "no share without an effect"
    # the one pre-trained model's row, described and never tested: its effect is the count of the role's heads
    described = {**presence, "n_units": 1, "effect": 9.0, "ci_low": np.nan, "ci_high": np.nan, "tests": "[]"}
    assert summary.fmt_estimate(described) == "9 heads with the role in the one model (described, not tested)"
    assert summary.fmt_estimate(described, unit=True) == summary.fmt_estimate(described)
    assert summary.fmt_estimate({**described, "tests": "[{'label': 'x'}]"}).startswith("share "), \
        "a tested row stays a share"
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    t = StudyPaths("nmt_heads", "quick", staged=False).tables
    t.mkdir(parents=True)
    row = {**_row("nmt_heads", "v.roles", "all (A, B)", "supported", "zero", "primary", 5 / 6), **presence,
           "n_units": 6, "effect": 5 / 6, "ci_low": 0.36, "ci_high": 0.996}
    pd.DataFrame([row], columns=list(claims.COLUMNS)).to_csv(t / "verdicts.csv", index=False)
    decided = summary.claim_rows("quick").set_index("claim_id").loc["v.roles", "decided"]
    assert decided == "pooled (A, B), s: **supported** (share 5 of 6 units = 0.833 [0.36, 0.996])"
    assert "share 5 of 6 units" in summary.study_findings_markdown("nmt_heads", "quick")


def _header_counts(text: str) -> dict[str, int]:
    import re
    line = next(x for x in text.splitlines() if "claims with at least one row of each word" in x)
    return {w: int(n) for w, n in re.findall(r"(supported|not supported|contradicted|inconclusive|not testable) (\d+)",
                                              line.split(":", 1)[1])}


def test_the_header_counts_equal_counts_from_the_verdict_tables(tmp_path, monkeypatch):
    """A claim whose only decided word is "not supported" is not counted as "supported" (a substring of it)."""
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    t = StudyPaths("random_pruning", "quick", staged=False).tables
    t.mkdir(parents=True)
    rows = [_row("random_pruning", "a.x", "SST-2", "not supported", "uniform", "primary"),
            _row("random_pruning", "a.x", "CoLA", "not supported", "uniform", "primary"),
            _row("random_pruning", "b.y", "SST-2", "supported", "uniform", "primary"),
            _row("random_pruning", "b.y", "CoLA", "contradicted", "uniform", "primary"),
            _row("random_pruning", "c.z", "SST-2", "not testable", "uniform", "primary", None),
            _row("random_pruning", "c.z", "SST-2", "supported", "zero", "sensitivity")]
    table = pd.DataFrame(rows, columns=list(claims.COLUMNS))
    table.to_csv(t / "verdicts.csv", index=False)
    got = _header_counts(summary.summary_markdown("quick"))
    prim = table[table["analysis"] == "primary"]
    want = {w: int(prim.groupby("claim_id")["verdict"].apply(lambda v: w in set(v)).sum()) for w in claims.VERDICTS}
    assert got == want
    assert got["supported"] == 1 and got["not supported"] == 1
    assert summary.verdict_words("1 not supported, 2 supported") == ["not supported", "supported"]


def test_committed_summary_headers_equal_their_verdict_tables():
    """Every committed SUMMARY page's header counts equal the counts computed from the committed verdict tables."""
    from headprune_utils.store.paths import outputs_root
    from headprune_utils.studies import NAMES
    checked = 0
    for profile in ("quick", "standard"):
        page = summary.summary_path(profile)
        if not page.exists():
            continue
        tables = [pd.read_csv(StudyPaths(n, profile, staged=False).tables / "verdicts.csv", keep_default_na=False,
                              na_values=[""]) for n in NAMES
                  if (StudyPaths(n, profile, staged=False).tables / "verdicts.csv").exists()]
        prim = pd.concat(tables)
        prim = prim[prim["analysis"] == "primary"]
        want = {w: int(prim.groupby(["study", "claim_id"])["verdict"].apply(lambda v: w in set(v)).sum())
                for w in claims.VERDICTS}
        assert _header_counts(page.read_text()) == want, profile
        checked += 1
    assert checked >= 1, f"no committed summary page under {outputs_root()}"


def test_every_committed_effect_has_a_named_unit():
    """Every row of every committed verdict table reads with a unit a reader knows (a GLUE metric, share of
    headroom, BLEU, or the measure's own), never an unnamed number."""
    import glob

    from headprune_utils.store.paths import outputs_root
    files = glob.glob(str(outputs_root() / "*" / "*" / "tables" / "verdicts.csv"))
    if not files:
        import pytest
        pytest.skip("no committed verdict tables in this checkout")
    for f in files:
        v = pd.read_csv(f, keep_default_na=False, na_values=[""])
        for r in v.to_dict("records"):
            unit = summary.effect_unit(r)
            assert unit and not unit.startswith("units of"), (f, r["claim_id"], r["test"], unit)
            if str(r["task"]).startswith("all (") and "/ (full - chance)" in str(r["test"]):
                assert unit == "share of headroom"


def test_effect_units_by_measure():
    t = "non-inferiority (greater); one-sided t tests on {}; alpha=0.05; margin: 0.02"
    assert summary.effect_unit({"test": t.format("score(random) - score(full)"), "task": "SST-2"}) == "accuracy"
    assert summary.effect_unit({"test": t.format("score(random) - score(full)"), "task": "CoLA"}) == "MCC"
    assert summary.effect_unit({"test": t.format("score(random) - score(full)"), "task": "STS-B"}) == "Pearson r"
    assert summary.effect_unit({"test": t.format("score(random) - score(full) / (full - chance)"),
                                "task": "all (CoLA, SST-2)"}) == "share of headroom"
    assert summary.effect_unit({"test": t.format("BLEU(pruned) - BLEU(full)"), "task": "multi30k en-de"}) == "BLEU"
    assert summary.effect_unit({"test": "t"}) == "", "a label that names no measure: no unit"
    row = {"test": t.format("score(random) - score(full)"), "task": "SST-2", "effect": 0.0268, "ci_low": 0.01,
           "ci_high": 0.04}
    assert summary.fmt_estimate(row, unit=True) == "+0.0268 [+0.01, +0.04] accuracy"
    # study 4's pooled rows divide by the attenuation ceiling, named in their test label (margins.HEADROOM)
    ceiling = {**row, "task": "all (SST-2, CoLA)", "test": "non-inferiority (greater); one-sided t tests on Mantel r "
               "of disjoint sentences minus the attenuation ceiling / the attenuation ceiling; alpha=0.05; margin: 0.1 = "
               "smallest of the tasks' margins / the attenuation ceiling"}
    assert summary.effect_unit(ceiling) == "share of the ceiling" and "share of the ceiling" in summary.UNITS_NOTE
    assert summary.fmt_estimate(row) == "+0.0268 [+0.01, +0.04]"


def test_a_pool_is_named_by_the_tasks_in_it():
    """A pooled row that could not be formed lists every task measured (claims._pooled_row); the label says no pool
    was formed and which task was testable, never that the left-out task was pooled."""
    why = "fewer than 2 tasks testable for pooling (testable: SST-2)"
    assert summary.pool_label("all (CoLA, SST-2)", "not testable", why) == "no pool (of CoLA, SST-2; testable: SST-2)"
    assert summary.pool_label("all (CoLA, SST-2)", "inconclusive", "effect ...") == "pooled (CoLA, SST-2)"
    assert summary.pool_label("SST-2", "not testable", why) == "SST-2"
    assert summary.row_label({"task": "all (CoLA, SST-2)", "setting": "50%", "verdict": "not testable",
                              "reason": why}) == "no pool (of CoLA, SST-2; testable: SST-2), 50%"


def test_the_row_shown_is_the_one_that_carries_the_verdict():
    """The pooled row is not testable while a task's row is decided: the task's row is shown (it carries the
    verdict); among decided rows a pool comes first; with nothing decided, an inconclusive row before a not
    testable one."""
    def rows(*spec):
        return pd.DataFrame([{"task": t, "verdict": v, "effect": e} for t, v, e in spec])
    g = rows(("CoLA", "not testable", -0.1), ("SST-2", "contradicted", -0.05), ("all (CoLA, SST-2)", "not testable", None))
    assert summary.verdict_row(g)["task"] == "SST-2"
    g = rows(("CoLA", "supported", 0.1), ("all (CoLA, SST-2)", "supported", 0.2))
    assert summary.verdict_row(g)["task"].startswith("all")
    g = rows(("CoLA", "not testable", 0.3), ("SST-2", "inconclusive", 0.1), ("all (CoLA, SST-2)", "not testable", None))
    assert summary.verdict_row(g)["task"] == "SST-2"
    assert summary.verdict_row(g.iloc[0:0]) is None
    # a pool whose word is withheld (a task decided otherwise): an inconclusive task row is shown before it
    g = pd.DataFrame([{"task": "CoLA", "verdict": "inconclusive", "effect": 0.1, "reason": "effect +0.1 ..."},
                      {"task": "all (CoLA, SST-2)", "verdict": "inconclusive", "effect": 0.2,
                       "reason": "a task decided otherwise: SST-2 contradicted (Holm-adjusted p = 0.01); ..."},
                      {"task": "SST-2", "verdict": "contradicted", "effect": -0.1, "reason": "effect -0.1 ..."}])
    assert summary.verdict_row(g)["task"] == "SST-2"
    assert summary.verdict_row(g.iloc[:2])["task"] == "CoLA"


def test_a_supported_superiority_below_its_margin_says_so():
    """``supported`` for a superiority claim means an effect shown above 0 and not shown below the margin: where the
    estimate itself is under the margin, the summary says the difference is not shown to matter; nowhere else."""
    base = {"verdict": "supported", "test": "superiority (greater); one-sided t tests on d; alpha=0.05; margin: x",
            "effect": 0.0319, "margin": 0.0332}
    assert summary.below_margin(base) == "; above 0, below the smallest effect of interest (0.0332)"
    assert summary.below_margin({**base, "effect": -0.02, "test": "superiority (less); t"}) != ""
    assert summary.below_margin({**base, "effect": 0.04}) == ""            # at or above the margin
    assert summary.below_margin({**base, "verdict": "not supported"}) == ""
    assert summary.below_margin({**base, "test": "non-inferiority (greater); t"}) == ""
    assert summary.below_margin({**base, "margin": 0.0}) == "" and summary.below_margin({**base, "margin": None}) == ""


def test_a_verdict_table_must_be_the_one_its_run_recorded(tmp_path, monkeypatch):
    """A verdict table copied from another profile over this one's (run_meta.json and metrics.json left as they
    were), rows removed, or an effect edited: it is not what the render recorded in metrics.json, and the summary
    and the report refuse it, naming the difference; the table as written reads back."""
    import json
    import shutil
    from pathlib import Path

    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    repo = Path(__file__).resolve().parents[2] / "outputs" / "compensation"
    for profile in ("standard", "standard-next"):
        shutil.copytree(repo / profile / "tables", tmp_path / "compensation" / profile / "tables")
        for f in ("metrics.json", "run_meta.json"):
            shutil.copy(repo / profile / f, tmp_path / "compensation" / profile / f)
    table = tmp_path / "compensation" / "standard" / "tables" / "verdicts.csv"
    original = table.read_bytes()
    assert len(summary.read_verdicts("compensation", "standard")) == len(
        json.loads((repo / "standard" / "metrics.json").read_text())["verdicts"])
    shutil.copy(tmp_path / "compensation" / "standard-next" / "tables" / "verdicts.csv", table)
    with pytest.raises(ValueError,
                       match=r"not a verdict table this profile's render wrote: row \d+ .* has (effect|verdict)"):
        summary.read_verdicts("compensation", "standard")
    lines = original.decode().splitlines(keepends=True)
    table.write_text("".join(lines[:-3]))  # three rows removed, whole
    with pytest.raises(ValueError, match=r"has 41 rows where its run's metrics.json records 44 \(rows removed"):
        summary.read_verdicts("compensation", "standard")
    table.write_bytes(original.replace(b",supported,", b",not supported,", 1) if b",supported," in original
                      else original.replace(b",not testable,", b",inconclusive,", 1))
    with pytest.raises(ValueError, match="has verdict .* where its run's metrics.json records"):
        summary.read_verdicts("compensation", "standard")
