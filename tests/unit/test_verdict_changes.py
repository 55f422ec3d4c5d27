"""The primary verdicts that moved between two verdict tables (``summary.verdict_changes``): what the closing note
of a re-run lists, old -> new and why."""
from __future__ import annotations

import pandas as pd
import pytest

from headprune_utils.run import summary


def table(rows):
    cols = ["study", "claim_id", "task", "setting", "semantics", "analysis", "verdict", "effect", "reason"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows], columns=cols)


OLD = table([
    ("s1", "a.x", "SST-2", "50%", "uniform", "primary", "not testable", 0.01, "gate"),
    ("s1", "a.x", "SST-2", "75%", "uniform", "primary", "inconclusive", -0.02, "no test"),
    ("s1", "a.x", "SST-2", "50%", "zero", "sensitivity", "supported", 0.03, "t"),      # not primary: never listed
    ("s1", "a.x", "CoLA", "50%", "uniform", "primary", "supported", 0.04, "t"),        # CoLA: not in the new table
    ("s1", "a.y", "SST-2", "50%", "uniform", "primary", "contradicted", -0.05, "t"),   # gone from the new table
    ("s2", "b.z", "pooled", "", "", "primary", "inconclusive", None, "no test"),
])
NEW = table([
    ("s1", "a.x", "SST-2", "50%", "uniform", "primary", "supported", 0.02, "effect > 0, Holm p 0.01"),
    ("s1", "a.x", "SST-2", "75%", "uniform", "primary", "inconclusive", -0.03, "no test"),  # same word: not listed
    ("s1", "a.x", "SST-2", "50%", "zero", "sensitivity", "contradicted", 0.03, "t"),
    ("s1", "a.z", "SST-2", "25%", "uniform", "primary", "not supported", 0.001, "below the margin"),  # new row
    ("s2", "b.z", "pooled", "", "", "primary", "supported", 0.2, "pooled t"),
])


def test_changes_list_the_primary_rows_whose_word_moved_within_the_tasks_both_measure():
    ch = summary.verdict_changes(OLD, NEW)
    assert list(ch.columns) == summary.CHANGE_COLUMNS
    got = {(r.study, r.claim_id, r.task, r.setting): (r.verdict_old, r.verdict_new) for r in ch.itertuples()}
    assert got == {("s1", "a.x", "SST-2", "50%"): ("not testable", "supported"),
                   ("s1", "a.y", "SST-2", "50%"): ("contradicted", "absent"),
                   ("s1", "a.z", "SST-2", "25%"): ("absent", "not supported"),
                   ("s2", "b.z", "pooled", ""): ("inconclusive", "supported")}
    row = ch[ch["claim_id"] == "a.x"].iloc[0]
    assert row["effect_old"] == pytest.approx(0.01) and row["effect_new"] == pytest.approx(0.02)
    assert row["reason_new"] == "effect > 0, Holm p 0.01"
    assert ch[ch["claim_id"] == "a.y"].iloc[0]["reason_new"] == ""  # absent on the new side: no reason, no NaN
    assert summary.verdict_changes(NEW, NEW).empty


def test_two_primary_rows_under_one_key_are_refused():
    twice = pd.concat([NEW, NEW.iloc[:1]], ignore_index=True)
    with pytest.raises(ValueError, match="two primary rows"):
        summary.verdict_changes(OLD, twice)


def test_the_command_prints_the_changes_between_two_profiles(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(summary, "profile_verdicts", lambda profile: {"old": OLD, "new": NEW}[profile])
    assert summary.main(["--profile", "new", "--changes-from", "old"]) == 0
    out = capsys.readouterr().out
    assert "from `old` to `new`" in out and ": 4" in out
    assert "| s1 | a.x | SST-2 | 50% | uniform | not testable | supported | +0.0100 | +0.0200 |" in out


def test_a_profile_without_verdict_tables_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="profile 'nosuch': no study has a verdict table"):
        summary.profile_verdicts("nosuch")


def test_the_command_refuses_a_profile_without_tables_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    assert summary.main(["--profile", "nosuch", "--changes-from", "other"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: profile 'other': no study has a verdict table") and "Traceback" not in err


def test_the_heading_counts_what_was_left_out_and_names_interim_renders(monkeypatch):
    monkeypatch.setattr(summary, "profile_verdicts", lambda profile: {"old": OLD, "new": NEW}[profile])
    monkeypatch.setattr(summary, "interim_note", lambda name, profile: "interim render: only SST-2"
                        if (name, profile) == ("random_pruning", "new") else "")
    md = summary.changes_markdown("old", "new")
    assert "4, over the 2 (study, task) pairs both measure" in md
    assert "left out, measured by one side only: 1 primary rows of `old`, 0 of `new`" in md  # CoLA
    assert "- `new` random_pruning: interim render: only SST-2" in md
