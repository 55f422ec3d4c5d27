"""The report's parts without a browser: formulas to MathML, the findings summary and its place in a notebook,
plumbing cells left out, every claim's figure, and no NaN in a page (the browser test opens the pages)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from headprune_utils.run import report, summary
from headprune_utils.store.paths import StudyPaths, notebooks_dir
from headprune_utils.studies import STUDIES


def test_math_becomes_mathml_outside_code_only():
    store, failures = {}, []
    text = report.convert_math("A gate $g_h \\in \\{0, 1\\}$ costs `$HOME` and $5.\n\n$$c = \\sum_j a_j v_j$$\n",
                               store, failures)
    assert not failures
    assert "`$HOME`" in text and "$5." in text  # code and a lone dollar stay
    assert len(store) == 2
    inline, block = store.values()
    assert inline.startswith("<math") and 'display="inline"' in inline and "<msub>" in inline
    assert 'display="block"' in block and "&#x02211;" in block or "∑" in block


def test_a_formula_that_does_not_convert_is_reported():
    store, failures = {}, []
    report.convert_math("bad: $x^$ here", store, failures)
    assert failures and "x^" in failures[0]
    assert list(store.values())[0].startswith("<code>")


def test_every_claim_has_a_figure_its_study_writes():
    for name, study in STUDIES.items():
        written = {p.stem for p in StudyPaths(name, "quick", staged=False).figures.glob("*.png")}
        for c in study.claims:
            fig = report.claim_figure(name, c.id)
            if written:  # the committed quick outputs are here
                assert fig in written, f"{name}: {c.id} -> {fig} is not one of {sorted(written)}"


def test_plumbing_cells_are_tagged_in_every_notebook():
    for name, study in STUDIES.items():
        nb = json.loads((notebooks_dir() / study.notebook).read_text())
        plumbing = [c for c in nb["cells"] if "plumbing" in c["metadata"].get("tags", [])]
        starts = sorted("".join(c["source"]).split("\n")[0][:20] for c in plumbing)
        assert len(plumbing) == 3, f"{study.notebook}: {starts}"


def _verdicts(tmp: Path, name: str) -> pd.DataFrame:
    rows = [dict(study=name, claim_id="x.one", paper="P 2020", claim="One thing holds.", task="SST-2",
                 setting="50%", semantics="zero", analysis="primary", effect=0.1, ci_low=0.05, ci_high=0.15,
                 verdict="supported", reason="p = 0.01", scale="tiny"),
            dict(study=name, claim_id="x.one", paper="P 2020", claim="One thing holds.", task="STS-B",
                 setting="50%", semantics="zero", analysis="primary", effect=float("nan"), ci_low=float("nan"),
                 ci_high=float("nan"), verdict="not testable",
                 reason="the full model is not above chance on STS-B (0.01 < 0.05)", scale="tiny"),
            dict(study=name, claim_id="x.one", paper="P 2020", claim="One thing holds.", task="SST-2",
                 setting="50%", semantics="uniform", analysis="sensitivity", effect=-0.1, ci_low=-0.2,
                 ci_high=-0.05, verdict="contradicted", reason="", scale="tiny")]
    return pd.DataFrame(rows)


def test_findings_summary_and_its_place_in_the_notebook():
    v = _verdicts(Path("."), "random_pruning")
    md = summary.study_findings_markdown("random_pruning", "nowhere-profile", verdicts=v)
    assert md.startswith("## What this study found")
    assert '<a id="claim-x.one"></a>' in md and "1 supported, 1 not testable" in md
    assert "SST-2, 50%: **supported**, +0.1 [+0.05, +0.15]" in md
    assert "not testable because: the full model is not above chance on STS-B" in md
    assert "contradicted" not in md  # the sensitivity analysis is not the primary verdict
    assert "nan" not in md.lower().replace("nanmean", "")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title"),
                                         nbformat.v4.new_code_cell("x = 1")])
    assert summary.inject_findings(nb, md)
    assert nb.cells[1].source == md and summary.FINDINGS_TAG in nb.cells[1].metadata["tags"]
    assert not summary.inject_findings(nb, md)  # the same summary again: nothing changes
    summary.inject_findings(nb, md.replace("supported", "SUPPORTED"))
    assert len(nb.cells) == 3 and "SUPPORTED" in nb.cells[1].source  # replaced, not added
    summary.inject_findings(nb, "")
    assert [c.source for c in nb.cells] == ["# Title", "x = 1"]


@pytest.fixture(scope="module")
def quick_site(tmp_path_factory):
    if not StudyPaths("random_pruning", "quick", staged=False).notebook.exists():
        pytest.skip("no committed quick outputs in this checkout")
    root = tmp_path_factory.mktemp("site")
    report.build_report(["quick"], quiet=True, root=root)
    return root


def test_pages_show_findings_first_no_plumbing_and_no_nan(quick_site):
    import re

    for name, study in STUDIES.items():
        page = (quick_site / "quick" / f"{name}.html").read_text(encoding="utf-8")
        h1 = page.index("<h1>")
        assert h1 < page.index('class="findings"') < page.index("<h2", page.index('class="findings"') + 30)
        assert "_globals_before_parameters" not in page and "# Headline numbers" not in page
        assert "Config(" not in page  # the configuration repr of the plumbing cell
        assert not re.search(r"<td>\s*(NaN|nan)\s*</td>", page), name
        assert "HPMATHX" not in page
        assert f'href="../../{name}/quick/{name}.ipynb"' in page or "the executed notebook" in page


def test_index_has_one_row_per_claim_with_links(quick_site):
    import re

    index = (quick_site / "quick" / "index.html").read_text(encoding="utf-8")
    rows = re.findall(r'<tr class="claim" id="row-([^"]+)">', index)
    assert sorted(rows) == sorted(f"{n}-{c.id}" for n, st in STUDIES.items() for c in st.claims)
    for n, st in STUDIES.items():
        page = (quick_site / "quick" / f"{n}.html").read_text(encoding="utf-8")
        for c in st.claims:
            assert f'href="{n}.html#claim-{c.id}"' in index
            assert f'id="claim-{c.id}"' in page, f"{n}: no anchor for {c.id}"


def test_the_readme_carries_no_generated_table_and_links_the_summary_pages():
    """The generated verdict counts live on the summary pages and in the report, not in the README (about 95 rows
    of them came before the prose findings): the README links the pages, and they hold a row for every claim."""
    from headprune_utils.store.paths import project_root

    text = (project_root() / "README.md").read_text(encoding="utf-8")
    assert "generated by `make summary`" not in text and "do not edit by hand" not in text
    assert text.count("not testable |") == 0, "a verdict-count table row in the README"
    for page in ("outputs/SUMMARY-standard.md", "outputs/SUMMARY.md"):
        assert f"]({page})" in text, f"the README does not link {page}"
    standard = (project_root() / "outputs" / "SUMMARY-standard.md").read_text(encoding="utf-8")
    for n, st in STUDIES.items():
        for c in st.claims:
            assert f"`{c.id}`" in standard, f"{n}: {c.id} missing from SUMMARY-standard.md"


def test_writing_the_overviews_leaves_the_readme_alone(tmp_path, monkeypatch):
    """A run writes only what it made: its overviews (summary page, report) never rewrite a README beside the
    outputs, even one that still has the markers of the table runs used to regenerate there."""
    from headprune_utils.run import pipeline

    (tmp_path / "outputs").mkdir()
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- findings table: generated by `make summary` from outputs/SUMMARY*.md; do not edit "
                      "by hand -->\nold table\n<!-- end of the generated findings table -->\n", encoding="utf-8")
    before = readme.read_bytes()
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "outputs"))
    monkeypatch.setattr(pipeline, "write_summary", lambda profile: tmp_path / "outputs" / "SUMMARY.md")
    monkeypatch.setattr(pipeline, "build_report", lambda profiles: None)
    assert pipeline.write_overviews("standard") and pipeline.write_overviews("quick")
    assert readme.read_bytes() == before


def test_a_summary_that_cannot_be_built_is_a_warning_after_the_results_are_written(monkeypatch, capsys):
    """The summary is a view of results already written: when it cannot be built (another study's outputs damaged,
    a study outside the registry) the run warns, names why, and leaves an earlier summary as it was; an unwritable
    summary stays an error (the run's status says so)."""
    from headprune_utils.run import pipeline

    def damaged(profile):
        raise ValueError("outputs/x/standard/tables/verdicts.csv is cut off")

    monkeypatch.setattr(pipeline, "write_summary", damaged)
    monkeypatch.setattr(pipeline, "build_report", lambda profiles: None)
    assert pipeline.write_overviews("standard")
    err = capsys.readouterr().err
    assert "warning: the cross-study summary was not written" in err and "verdicts.csv is cut off" in err

    def full(profile):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pipeline, "write_summary", full)
    assert not pipeline.write_overviews("standard")
    assert "error: the cross-study summary was not written" in capsys.readouterr().err


def test_a_verdict_table_this_run_wrote_that_cannot_be_a_finding_fails_the_run(tmp_path, monkeypatch, capsys):
    """The views read verdict tables strictly (summary.read_verdicts); a table the run itself just wrote that they
    refuse (here a decided row without its effect) is the run's error, not a warning about a view."""
    from headprune_utils.run import pipeline

    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    monkeypatch.setattr(pipeline, "write_summary", lambda profile: tmp_path / "SUMMARY.md")
    monkeypatch.setattr(pipeline, "build_report", lambda profiles: None)
    # committed outputs with decided rows: the interim standard-next render of study 5 (the quick and standard runs
    # decide no claim now: their models were not trained to the plateau)
    name, profile = "zero_shot_pruning", "standard-next"
    paths = StudyPaths(name, profile, staged=False)
    (paths.tables).mkdir(parents=True)
    committed = StudyPaths(name, profile, root=Path(__file__).resolve().parents[2] / "outputs", staged=False)
    for f in (committed.notebook, committed.meta):
        (paths.dir / f.name).write_bytes(f.read_bytes())
    (paths.tables / "verdicts.csv").write_bytes((committed.tables / "verdicts.csv").read_bytes())
    assert pipeline.write_overviews(profile, [name]), "the committed table as it is: read, no error"
    table = pd.read_csv(committed.tables / "verdicts.csv")
    decided = table.index[table["verdict"].isin(["supported", "contradicted", "not supported"])]
    assert len(decided), "the committed table has a decided row"
    table.loc[decided[0], "effect"] = float("nan")
    table.to_csv(paths.tables / "verdicts.csv", index=False)
    capsys.readouterr()
    assert not pipeline.write_overviews(profile, [name])
    err = capsys.readouterr().err
    assert f"error: {name}: the verdict table this run wrote" in err and "effect" in err
    assert pipeline.write_overviews(profile), "a study this run did not write: the views' warning, not an error"


def test_the_home_page_lists_every_profile_present_whichever_run_built_it(tmp_path):
    """A run of one profile rebuilt the home page from that profile alone (a quick run hid standard; a smoke run
    left only smoke): the home lists every named profile whose site is there, standard first (smoke and custom
    runs are listed only where no named profile's site is: report._home_profiles)."""
    have = [p for p in ("standard", "quick") if StudyPaths("random_pruning", p, staged=False).notebook.exists()]
    if len(have) < 2:
        pytest.skip("needs the committed quick and standard outputs")
    report.build_report(["standard"], quiet=True, root=tmp_path)
    report.build_report(["quick"], quiet=True, root=tmp_path)
    home = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert home.index('href="standard/index.html"') < home.index('href="quick/index.html"')
    before = (tmp_path / "index.html").stat().st_mtime_ns
    report.build_report(["standard"], quiet=True, root=tmp_path)
    assert (tmp_path / "index.html").read_text(encoding="utf-8") == home, "the same profiles: the same home page"
    assert (tmp_path / "index.html").stat().st_mtime_ns == before, "an unchanged home page is not rewritten"


# ------------------------------------------------------------------------- issue: the user's path, second pass
def _styled_output(frame: pd.DataFrame) -> dict:
    return nbformat.v4.new_output("display_data", data={"text/html": frame.style.hide(axis="index").to_html()})


def _notebook(outputs, first="# A study\n\nThe claim.\n\n**Scale.** The `quick` profile (the default) is tiny.\n\nDesign."):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(first), nbformat.v4.new_code_cell("x")])
    nb.cells[1].outputs = outputs
    return nb


def test_a_page_rendered_again_from_unchanged_results_is_byte_identical():
    """pandas' Styler draws a new random table id ("T_<5 hex digits>") at every execution: two executions of the
    same notebook gave pages that differ in every styled cell's id. The page numbers them in order instead."""
    frame = pd.DataFrame({"a": [1.5, 2.0], "b": ["x", "y"]})
    one, two = _styled_output(frame), _styled_output(frame)
    assert one["data"]["text/html"] != two["data"]["text/html"], "pandas draws a new id each time"
    body1, _ = report.study_body(_notebook([one]), "zero_shot_pruning", "nowhere-profile", None)
    body2, _ = report.study_body(_notebook([two]), "zero_shot_pruning", "nowhere-profile", None)
    assert body1 == body2
    assert "T_zero_shot_pruning_1" in body1
    assert report.stable_styler_ids("#T_ab12f_row0_col0, #T_ab12f th {} <table id=\"T_ab12f\">", "s") \
        == "#T_s_1_row0_col0, #T_s_1 th {} <table id=\"T_s_1\">"


def test_the_printed_verdict_table_becomes_a_table_of_reasons():
    """``print(claims.render(verdict))`` (a monospace dump) is shown as a table, a row per verdict row with its
    reason; what else the cell printed stays."""
    from headprune_utils.analysis import claims as claims_model

    f = StudyPaths("random_pruning", "quick", staged=False).tables / "verdicts.csv"
    if not f.exists():
        pytest.skip("no committed quick outputs in this checkout")
    v = pd.read_csv(f, keep_default_na=False, na_values=[""])
    text = claims_model.render(v) + "\nrows whose verdict changes under half or double the margin: none\n"
    nb = _notebook([nbformat.v4.new_output("stream", name="stdout", text=text)])
    body, _ = report.study_body(nb, "random_pruning", "quick", v)
    assert '<table class="reasons">' in body
    assert body.count("<tr><td>") == len(v)
    assert "rows whose verdict changes under half or double the margin: none" in body
    assert ": NOT TESTABLE: effect" not in body and ": INCONCLUSIVE: effect" not in body
    # a printed table that is not this table (another row count) is left as printed
    nb = _notebook([nbformat.v4.new_output("stream", name="stdout", text=text)])
    body, _ = report.study_body(nb, "random_pruning", "quick", v.iloc[:-1])
    assert '<table class="reasons">' not in body


def test_a_standard_page_describes_the_standard_scale():
    """The notebooks' "Scale." paragraph describes quick (their default): a standard page says what the standard run
    is, from its verdict table's scale; a quick page keeps the notebook's words."""
    v = pd.DataFrame([{"claim_id": "x.one", "scale": "minilm, 5500 examples x 3 epochs", "verdict": "supported"}])
    body, _ = report.study_body(_notebook([]), "random_pruning", "standard", v)
    assert "This page is the <code>standard</code> profile" in body and "minilm, 5500 examples x 3 epochs" in body
    assert "is tiny" not in body and "Design." in body
    body, _ = report.study_body(_notebook([]), "random_pruning", "quick", v)
    assert "The <code>quick</code> profile (the default) is tiny." in body


@pytest.fixture(scope="module")
def both_site(tmp_path_factory):
    have = [p for p in ("standard", "quick") if StudyPaths("random_pruning", p, staged=False).notebook.exists()]
    if len(have) < 2:
        pytest.skip("needs the committed quick and standard outputs")
    root = tmp_path_factory.mktemp("both")
    report.build_report(["standard", "quick"], quiet=True, root=root)
    return root


def _primary(name, profile):
    v = pd.read_csv(StudyPaths(name, profile, staged=False).tables / "verdicts.csv", keep_default_na=False,
                    na_values=[""])
    return v[v["analysis"] == "primary"]


def test_the_home_page_states_the_headline_findings_with_numbers_units_and_scale(both_site):
    """The home page says what each study found (standard first): decided claims with the row that carries each
    verdict, its effect with interval and unit, and the study's scale, all from the committed verdict tables."""
    import html as h

    home = (both_site / "index.html").read_text(encoding="utf-8")
    assert home.index("What the standard run found") < home.index("What the quick run found")
    standard = home[home.index("What the standard run found"):home.index("What the quick run found")]
    n_decided = 0
    for i, name in enumerate(STUDIES, 1):
        assert f"Study {i}, {name.replace('_', ' ')}" in standard
        prim = _primary(name, "standard")
        assert h.escape(f"Scale (standard): {prim['scale'].iloc[0]}") in standard
        decided = [summary.verdict_row(g) for _, g in prim.groupby("claim_id", sort=False)]
        decided = [r for r in decided if r["verdict"] in ("supported", "not supported", "contradicted")]
        for r in decided[:1]:
            assert h.escape(summary.fmt_estimate(r, unit=True)) in standard, (name, r["claim_id"])
            n_decided += 1
        if not decided:  # a study that decides nothing says so, with why
            n = prim["claim_id"].nunique()
            assert f"none of {n} claims decided" in h.unescape(re.sub(r"<[^>]+>", "", standard)), name
    # the committed standard tables decide no claim now (their models were not trained to the plateau): the page
    # says what the run is, not that its models were trained well enough
    assert n_decided > 0 or "not testable until standard-next" in h.unescape(standard)


def test_the_index_shows_the_row_that_carries_each_verdict_with_its_unit(both_site):
    """A claim whose pooled row is not testable while a task's row is decided shows the task's row (study 2's
    location claims in the standard run); every number has its unit; a failed pool is not named as a pool."""
    import html as h
    import re

    for profile in ("standard", "quick"):
        index = (both_site / profile / "index.html").read_text(encoding="utf-8")
        for name in STUDIES:
            prim = _primary(name, profile)
            for cid, g in prim.groupby("claim_id", sort=False):
                row = re.search(rf'<tr class="claim" id="row-{name}-{re.escape(cid)}">(.*?)</tr>', index).group(1)
                r = summary.verdict_row(g)
                shown = f"({h.escape(summary.row_label(r))}: {h.escape(r['verdict'])}"
                assert shown in row, (profile, cid, shown)
                if not pd.isna(r["effect"]):
                    assert h.escape(summary.fmt_estimate(r, unit=True)) in row
                if (g["verdict"].isin(["supported", "not supported", "contradicted"])).any():
                    assert r["verdict"] in ("supported", "not supported", "contradicted")
        assert "Units:" in index


def test_summary_pages_give_units_and_name_pools_by_their_tasks(both_site):
    text = summary.summary_markdown("standard")
    assert "share of headroom" in text and " accuracy" in text and "Units:" in text
    assert "all (CoLA, SST-2)" not in text, "a pool is named by the tasks in it"


def test_an_interim_render_says_so_on_every_page_that_quotes_it(tmp_path, monkeypatch):
    """An interim render (``--from-cells --where``: run_meta.json's "interim") is labelled wherever its verdicts
    are quoted: the findings the notebook and the study page open with, the scale the summary and report quote,
    and the summary page's head; a full render of the same tables says nothing of the kind."""
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    paths = StudyPaths("random_pruning", "later", staged=False)
    paths.tables.mkdir(parents=True)
    _verdicts(tmp_path, "random_pruning").to_csv(paths.tables / "verdicts.csv", index=False)
    paths.meta.write_text(json.dumps({"study": "random_pruning", "profile": "later"}))
    assert summary.interim_note("random_pruning", "later") == ""
    assert set(summary.read_verdicts("random_pruning", "later")["scale"]) == {"tiny"}
    assert "nterim" not in summary.study_findings_markdown("random_pruning", "later")
    assert "nterim" not in summary.summary_markdown("later")
    (paths.tables / "interim.json").write_text(json.dumps({"where": {"task": ["SST-2"]}, "cells": 1033,
                                                           "planned": 3460}))  # the render writes it beside them
    note = summary.interim_note("random_pruning", "later")
    assert note.startswith("interim render: only the cells with task = SST-2 (1,033 of 3,460 planned cells)")
    assert set(summary.read_verdicts("random_pruning", "later")["scale"]) == {f"tiny; {note}"}
    findings = summary.study_findings_markdown("random_pruning", "later")
    assert findings.split("\n")[2] == f"**I{note[1:]}.**", "the findings open with it, in bold"
    page = summary.summary_markdown("later")
    assert "**Interim renders.**" in page and f"- random_pruning: {note}" in page
    assert f"- random_pruning: tiny; {note}" in page, "the scale it lists says so too"
    assert all(f"tiny; {note}" == s for s in report._read_verdicts("random_pruning", "later")["scale"])
    from headprune_utils.run.pipeline import verdict_summary
    assert verdict_summary({"random_pruning": {}}, "later").endswith(
        "(interim render: only the cells with task = SST-2 (1,033 of 3,460 planned cells))"), "and the console"
    assert findings.count(note[1:]) == 1, "said once, in bold (not again in the scale line)"
    (paths.tables / "interim.json").write_text("{not json")
    assert summary.interim_note("random_pruning", "later").startswith("interim render"), "unreadable: still interim"
    (paths.tables / "interim.json").unlink()
    assert summary.interim_note("random_pruning", "later") == "", "a full render's tables have no record"
