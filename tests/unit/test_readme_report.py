"""Failure cases for the report (`make report`, `python -m headprune_utils.run.report`) and the summary
(`python -m headprune_utils.run.summary`, `make summary`, SUMMARY-<profile>.md), and the Makefile's variables, written
from the README alone (not from the code).

Every case builds from an outputs root under pytest's tmp_path (``HEADPRUNE_OUTPUT_DIR``): copies of committed study
outputs (without their cells), damaged where the case says. The committed outputs are only read, and a guard checks
that the committed report and summaries are left as they were.
"""
from __future__ import annotations

import hashlib
import html
import json
import logging
import os
import re
import runpy
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OUTPUTS = REPO / "outputs"
STUDY = "random_pruning"
STUDIES = ("random_pruning", "layer_strategies", "compensation", "redundancy_patterns", "zero_shot_pruning",
           "specialized_heads_l0", "nmt_heads")
VERDICT_WORDS = ("supported", "not supported", "contradicted", "inconclusive", "not testable")
# committed outputs with `contradicted` rows (the quick and standard runs decide no claim now: their models were not
# trained to the plateau): the interim standard-next render of study 5
DECIDED = ("zero_shot_pruning", "standard-next")


# --------------------------------------------------------------------------------------------------------------------
# helpers


def _fingerprint_committed() -> dict[str, tuple[int, str]]:
    files = [p for p in (OUTPUTS / "report").rglob("*") if p.is_file()] + sorted(OUTPUTS.glob("SUMMARY*.md"))
    return {str(p.relative_to(OUTPUTS)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in files}


@pytest.fixture(scope="module", autouse=True)
def _committed_outputs_untouched():
    """No case may write into the repository's outputs/: the committed report and summaries are checked after."""
    before = _fingerprint_committed()
    yield
    assert _fingerprint_committed() == before, "a case wrote into the committed outputs/"


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    """An empty outputs root, set as HEADPRUNE_OUTPUT_DIR; the working directory is tmp_path."""
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(out))
    monkeypatch.chdir(tmp_path)
    return out


def copy_study(root: Path, study: str = STUDY, profile: str = "quick") -> Path:
    """One study's committed outputs of ``profile`` (its cells and caches left out) copied under ``root``."""
    src = OUTPUTS / study / profile
    dst = root / study / profile
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("cells", "cache", "quarantine"))
    return dst


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def outside_report(root: Path) -> dict[str, bytes]:
    return {k: v for k, v in tree(root).items() if not k.startswith("report" + os.sep) and k != "report"}


def read_csv_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    import csv

    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def write_csv_rows(path: Path, header: list[str], rows: list[list[str]]) -> None:
    import csv

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def set_cell(path: Path, column: str, value: str, where=lambda row: True, first_only: bool = False) -> None:
    header, rows = read_csv_rows(path)
    i = header.index(column)
    for row in rows:
        if where(dict(zip(header, row))):
            row[i] = value
            if first_only:
                break
    write_csv_rows(path, header, rows)


def text_of_html(s: str) -> str:
    s = re.sub(r"<style.*?</style>", " ", s, flags=re.S)
    s = re.sub(r"<[^>]+>", " ", s)
    return re.sub(r"\s+", " ", html.unescape(s))


@dataclass
class Result:
    rc: int
    out: str
    err: str
    exc: BaseException | None

    @property
    def text(self) -> str:
        return f"{self.out}\n{self.err}\n{self.exc!r}\n{self.exc}"

    def names(self, *keys: str) -> bool:
        t = self.text.lower()
        return all(k.lower() in t for k in keys)


@pytest.fixture
def cli(capsys, caplog):
    """Runs ``python -m <module> <args>`` in this process (as runpy does for ``-m``): exit status, output, warnings,
    log records, and the exception if one escaped (a traceback, exit status 1)."""

    def run(module: str, *args: str) -> Result:
        capsys.readouterr()
        caplog.clear()
        old_argv = sys.argv
        sys.argv = [module, *args]
        rc, exc = 0, None
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
            warnings.simplefilter("always")
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=False)
            except SystemExit as e:
                if e.code is None:
                    rc = 0
                elif isinstance(e.code, int):
                    rc = e.code
                else:
                    rc, exc = 1, e
            except Exception as e:  # noqa: BLE001 - a traceback is a result here
                rc, exc = 1, e
            finally:
                sys.argv = old_argv
        cap = capsys.readouterr()
        notes = "\n".join(str(w.message) for w in caught if not issubclass(w.category, RuntimeWarning)
                          or "sys.modules" not in str(w.message))
        return Result(rc, cap.out, cap.err + "\n" + notes + "\n" + caplog.text, exc)

    return run


@pytest.fixture
def report(cli):
    return lambda *args: cli("headprune_utils.run.report", *args)


@pytest.fixture
def summary(cli):
    return lambda *args: cli("headprune_utils.run.summary", *args)


def site_pages(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root / "report")): p.read_text(errors="replace")
            for p in sorted((root / "report").rglob("*.html"))}


def reported(res: Result, name: str) -> bool:
    """The problem is named in the run's messages (an error, a warning or a log line)."""
    return res.names(name)


@pytest.fixture(scope="module")
def quick_all(tmp_path_factory) -> Path:
    """Every committed quick study (no cells) copied once into an outputs root that cases here only read."""
    out = tmp_path_factory.mktemp("quick_all")
    for s in STUDIES:
        if (OUTPUTS / s / "quick").is_dir():
            copy_study(out, s, "quick")
    return out


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


def _run_module_quietly(module: str, *args: str) -> Done:
    import contextlib
    import io
    import traceback

    out, err, rc = io.StringIO(), io.StringIO(), 0
    old_argv = sys.argv
    sys.argv = [module, *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            runpy.run_module(module, run_name="__main__", alter_sys=False)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Exception:  # noqa: BLE001
        rc = 1
        err.write(traceback.format_exc())
    finally:
        sys.argv = old_argv
    return Done(rc, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def quick_all_built(quick_all):
    """The report and the summary of quick_all, built once (as `python -m ...` runs them, in this process)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HEADPRUNE_OUTPUT_DIR", str(quick_all))
        mp.chdir(quick_all)
        t0 = time.perf_counter()
        r = _run_module_quietly("headprune_utils.run.report")
        seconds = time.perf_counter() - t0
        s = _run_module_quietly("headprune_utils.run.summary", "--profile", "quick")
    return quick_all, r, s, seconds


@pytest.fixture(scope="module")
def next_built(tmp_path_factory):
    """The committed standard-next studies (no cells) copied into an outputs root; its report and summary built."""
    out = tmp_path_factory.mktemp("next_all")
    for s in STUDIES:
        if (OUTPUTS / s / "standard-next").is_dir():
            copy_study(out, s, "standard-next")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HEADPRUNE_OUTPUT_DIR", str(out))
        mp.chdir(out)
        r = _run_module_quietly("headprune_utils.run.report", "--profile", "standard-next")
        s = _run_module_quietly("headprune_utils.run.summary", "--profile", "standard-next")
    return out, r, s


def primary_counts(root: Path, profile: str) -> dict[str, int]:
    """Per verdict word, the claims (study, claim id) with at least one primary row of it, from the verdict tables."""
    import csv

    seen: dict[str, set] = {w: set() for w in VERDICT_WORDS}
    for f in sorted(root.glob(f"*/{profile}/tables/verdicts.csv")):
        with open(f, newline="") as fh:
            for row in csv.DictReader(fh):
                if row["analysis"] == "primary":
                    seen[row["verdict"]].add((row["study"], row["claim_id"]))
    return {w: len(v) for w, v in seen.items()}


def stated_counts(text: str) -> dict[str, int]:
    return {w: int(m.group(1)) for w in VERDICT_WORDS
            if (m := re.search(rf"(?<!not ){w} (\d+)", text.split("at least one row of each")[1]))}


# --------------------------------------------------------------------------------------------------------------------
# the report on sound outputs: what the README says it builds


def test_report_builds_site_from_one_study(root, report):
    """`make report` builds a static site readable offline: outputs/report/index.html and each study's page."""
    copy_study(root)
    res = report()
    assert res.rc == 0, res.text
    assert (root / "report" / "index.html").is_file()
    assert (root / "report" / "quick" / f"{STUDY}.html").is_file()


def test_report_writes_only_under_report(root, report):
    """The report is built from the committed outputs: a run writes only under outputs/report, changes no input."""
    copy_study(root)
    before = outside_report(root)
    res = report()
    assert res.rc == 0, res.text
    assert outside_report(root) == before


def test_report_is_byte_for_byte_reproducible(root, report):
    """Rebuilding the report from unchanged outputs changes nothing (the committed report stays git-clean)."""
    copy_study(root)
    assert report().rc == 0
    first = tree(root / "report")
    assert report().rc == 0
    assert tree(root / "report") == first


def test_report_all_quick_studies_in_seconds(quick_all_built):
    """`make report` builds the static report of every profile in outputs/ in seconds."""
    _, r, _, seconds = quick_all_built
    assert r.returncode == 0, r.stderr[-3000:]
    assert seconds < 90


def test_report_findings_one_row_per_claim_with_links(quick_all_built):
    """The findings page has one row per claim, linking the claim in its study's page."""
    root, r, _, _ = quick_all_built
    assert r.returncode == 0, r.stderr[-3000:]
    findings = (root / "report" / "quick" / "index.html").read_text()
    for s in STUDIES:
        header, rows = read_csv_rows(root / s / "quick" / "tables" / "verdicts.csv")
        ids = {dict(zip(header, row))["claim_id"] for row in rows}
        for cid in ids:
            assert f"{s}.html#claim-{cid}" in findings, (s, cid)
            page = (root / "report" / "quick" / f"{s}.html").read_text()
            assert f'id="claim-{cid}"' in page or f"id='claim-{cid}'" in page, (s, cid)


def test_report_every_local_link_resolves(quick_all_built):
    """The static site is readable offline: every relative link and image of every page points to a file."""
    root, r, _, _ = quick_all_built
    assert r.returncode == 0, r.stderr[-3000:]
    broken = []
    for page in (root / "report").rglob("*.html"):
        for ref in re.findall(r'(?:href|src)="([^"]+)"', page.read_text()):
            if ref.startswith(("data:", "#", "http://", "https://", "mailto:")):
                continue
            target = (page.parent / ref.split("#")[0]).resolve()
            if not target.exists():
                broken.append((str(page.relative_to(root)), ref))
    assert not broken, broken[:10]


def test_report_needs_no_network(quick_all_built):
    """Readable offline: no page loads a script, stylesheet or image from the network."""
    root, r, _, _ = quick_all_built
    assert r.returncode == 0
    for page in (root / "report").rglob("*.html"):
        s = page.read_text()
        assert not re.search(r'<(?:script|img|iframe)[^>]+src="(?:https?:)?//', s), page
        assert not re.search(r'<link[^>]+href="(?:https?:)?//', s), page


def test_report_study_page_begins_with_findings_and_links_notebook(quick_all_built):
    """Each study's page begins with *What this study found* and links the executed notebook."""
    root, r, _, _ = quick_all_built
    assert r.returncode == 0
    for s in STUDIES:
        page = (root / "report" / "quick" / f"{s}.html").read_text()
        heads = [text_of_html(h).strip(" ¶") for h in re.findall(r"<h2[^>]*>(.*?)</h2>", page, flags=re.S)]
        assert heads and heads[0].startswith("What this study found"), (s, heads[:3])
        assert re.search(rf'href="[^"]*{s}/quick/{s}\.ipynb"', page), s


def test_report_study_page_shows_no_code(quick_all_built):
    """A study's page shows the notebook's text, figures and tables without the code."""
    root, r, _, _ = quick_all_built
    assert r.returncode == 0
    nb = json.loads((root / STUDY / "quick" / f"{STUDY}.ipynb").read_text())
    page = html.unescape((root / "report" / "quick" / f"{STUDY}.html").read_text())
    code_lines = [ln.strip() for c in nb["cells"] if c["cell_type"] == "code"
                  for ln in "".join(c["source"]).splitlines() if len(ln.strip()) > 30 and "(" in ln]
    assert code_lines
    shown = [ln for ln in code_lines if ln in page]
    assert not shown, shown[:5]


def test_report_and_summary_count_the_same_verdicts(quick_all_built):
    """The report's findings and SUMMARY.md are built from the same verdict tables: the same counts per word."""
    root, r, s, _ = quick_all_built
    assert r.returncode == 0 and s.returncode == 0, s.stderr[-3000:]
    findings = text_of_html((root / "report" / "quick" / "index.html").read_text())
    md = (root / "SUMMARY.md").read_text()
    pat = r"(\d+) claims in (\d+) studies"
    assert re.search(pat, findings) and re.search(pat, md)
    assert re.search(pat, findings).groups() == re.search(pat, md).groups()
    for word in VERDICT_WORDS:
        f = re.search(rf"(?<!not ){word} (\d+)", findings)
        m = re.search(rf"(?<!not ){word} (\d+)", md)
        assert f and m and f.group(1) == m.group(1), word


def test_summary_counts_the_primary_verdicts(next_built):
    """SUMMARY-<profile>.md counts the verdicts of the primary analysis per word, as the verdict tables hold them."""
    root, _, s = next_built
    assert s.returncode == 0, s.stderr[-3000:]
    md = (root / "SUMMARY-standard-next.md").read_text()
    assert stated_counts(md) == primary_counts(root, "standard-next")


def test_report_counts_the_primary_verdicts(next_built):
    """The findings page's counts are of the primary verdicts (each claim under its own paper's semantics)."""
    root, r, _ = next_built
    assert r.returncode == 0, r.stderr[-3000:]
    findings = text_of_html((root / "report" / "standard-next" / "index.html").read_text())
    assert stated_counts(findings) == primary_counts(root, "standard-next")


# --------------------------------------------------------------------------------------------------------------------
# the report: bad options, profiles and roots


def test_report_empty_outputs_root_is_an_error(root, report):
    """Bad input gets a clear error: an outputs root with no executed study is named, not built into an empty site."""
    res = report()
    assert res.rc != 0, "an empty outputs root built a report: " + res.out
    assert res.names("outputs") or res.names(str(root)) or res.names("no ")


def test_report_missing_outputs_root_is_an_error(root, report, monkeypatch, tmp_path):
    """Bad input gets a clear error naming the folder: HEADPRUNE_OUTPUT_DIR pointing nowhere is not a report."""
    missing = tmp_path / "no_such_outputs"
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(missing))
    res = report()
    assert res.rc != 0
    assert res.names("no_such_outputs")


def test_report_unknown_profile_is_an_error(root, report):
    """An unknown --profile is a clear error naming it, and writes nothing."""
    copy_study(root)
    res = report("--profile", "nosuch")
    assert res.rc != 0
    assert res.names("nosuch")
    assert not (root / "report").exists()


def test_report_profile_without_studies_is_an_error(root, report):
    """A profile with no executed study (params/paper.yaml exists, nothing ran) is named, not built empty."""
    copy_study(root)
    res = report("--profile", "paper")
    assert res.rc != 0
    assert res.names("paper")
    assert not (root / "report" / "paper").exists()






def test_report_one_profile_keeps_the_other_profiles_pages(root, report):
    """`make report PROFILE=...` builds that profile only: the pages of the others are not deleted or changed."""
    copy_study(root, profile="quick")
    copy_study(root, profile="standard")
    assert report().rc == 0
    standard_pages = tree(root / "report" / "standard")
    assert standard_pages
    res = report("--profile", "quick")
    assert res.rc == 0, res.text
    assert tree(root / "report" / "standard") == standard_pages


def test_report_removed_study_is_not_linked(root, report):
    """The report is of what is in outputs/: a study whose outputs are gone is no longer linked from the site."""
    copy_study(root, STUDY)
    copy_study(root, "compensation")
    assert report().rc == 0
    shutil.rmtree(root / "compensation")
    res = report()
    assert res.rc == 0, res.text
    for name, page in site_pages(root).items():
        if name != "quick/compensation.html":
            assert "compensation.html" not in page, name


# --------------------------------------------------------------------------------------------------------------------
# the report: damaged study outputs


def test_report_missing_verdicts_is_an_error(root, report):
    """A study folder without tables/verdicts.csv is not presented as fine: the file is named."""
    d = copy_study(root)
    (d / "tables" / "verdicts.csv").unlink()
    res = report()
    assert res.rc != 0
    assert res.names("verdicts")


def test_report_missing_tables_folder_is_an_error(root, report):
    """A study folder missing its tables is an error naming the study (not a page without its claims)."""
    d = copy_study(root)
    shutil.rmtree(d / "tables")
    res = report()
    assert res.rc != 0
    assert res.names(STUDY) or res.names("tables")


def test_report_zero_byte_verdicts_is_an_error(root, report):
    """A zero-byte verdicts.csv (a damaged file) is an error naming it."""
    d = copy_study(root)
    (d / "tables" / "verdicts.csv").write_bytes(b"")
    res = report()
    assert res.rc != 0
    assert res.names("verdicts")


def test_report_header_only_verdicts_is_an_error(root, report):
    """A verdicts.csv with its header and no row (a study with no claim decided) is an error naming it."""
    d = copy_study(root)
    f = d / "tables" / "verdicts.csv"
    f.write_text(f.read_text().splitlines()[0] + "\n")
    res = report()
    assert res.rc != 0
    assert res.names("verdicts")


def test_report_truncated_verdicts_is_an_error(root, report):
    """A verdicts.csv cut off in the middle of a row (a half-written file) is an error, not a short table."""
    d = copy_study(root)
    f = d / "tables" / "verdicts.csv"
    raw = f.read_bytes()
    f.write_bytes(raw[: int(len(raw) * 0.6)])
    res = report()
    assert res.rc != 0
    assert res.names("verdicts")


def test_report_verdicts_missing_a_column_is_an_error(root, report):
    """The one verdict layout: a verdicts.csv without its `verdict` column is an error naming the column."""
    d = copy_study(root)
    f = d / "tables" / "verdicts.csv"
    header, rows = read_csv_rows(f)
    i = header.index("verdict")
    write_csv_rows(f, header[:i] + header[i + 1:], [r[:i] + r[i + 1:] for r in rows])
    res = report()
    assert res.rc != 0
    assert res.names("verdict")


def test_report_unknown_verdict_word_is_an_error(root, report):
    """A verdict is one of five words: any other word in verdicts.csv is an error naming it."""
    d = copy_study(root)
    set_cell(d / "tables" / "verdicts.csv", "verdict", "probably", first_only=True)
    res = report()
    assert res.rc != 0
    assert res.names("probably")


def test_report_infinite_effect_is_an_error(root, report):
    """Non-finite numbers are errors, not results: an effect of inf in verdicts.csv is refused."""
    d = copy_study(root)
    set_cell(d / "tables" / "verdicts.csv", "effect", "inf", where=lambda r: r["effect"] != "", first_only=True)
    res = report()
    assert res.rc != 0
    assert res.names("verdicts") or res.names("effect")


def test_report_nan_effect_on_a_decided_row_is_an_error(root, report):
    """A decided row (here `contradicted`) whose effect is NaN is an error, not a verdict shown without a number."""
    d = copy_study(root, DECIDED[0], DECIDED[1])
    assert any("contradicted" in row for row in read_csv_rows(d / "tables" / "verdicts.csv")[1]), "a decided row"
    set_cell(d / "tables" / "verdicts.csv", "effect", "nan", where=lambda r: r["verdict"] == "contradicted")
    res = report()
    assert res.rc != 0
    assert res.names("verdicts") or res.names("effect")


def test_report_verdicts_of_another_study_is_an_error(root, report):
    """Nothing is mixed: a verdicts.csv whose rows say they are another study's is refused, naming both."""
    d = copy_study(root)
    set_cell(d / "tables" / "verdicts.csv", "study", "layer_strategies")
    res = report()
    assert res.rc != 0
    assert res.names("layer_strategies")


def test_report_metrics_not_json_is_an_error(root, report):
    """A metrics.json that is not JSON is a damaged study: an error naming the file."""
    d = copy_study(root)
    (d / "metrics.json").write_text('{"profile": "quick", "n_cells": ')
    res = report()
    assert reported(res, "metrics.json") and res.rc != 0


def test_report_metrics_with_nan_is_an_error(root, report):
    """Non-finite numbers are errors, not results: a NaN headline number in metrics.json is refused."""
    d = copy_study(root)
    m = json.loads((d / "metrics.json").read_text())
    m["full_model_score"][0]["mean"] = float("nan")
    (d / "metrics.json").write_text(json.dumps(m))  # writes the bare token NaN
    res = report()
    assert res.rc != 0
    assert res.names("metrics.json") or res.names("nan")


def test_report_missing_run_meta_is_reported(root, report):
    """run_meta.json is the record of the run that made the outputs: a study without it is named."""
    d = copy_study(root)
    (d / "run_meta.json").unlink()
    res = report()
    assert reported(res, "run_meta")


def test_report_run_meta_of_another_profile_is_an_error(root, report):
    """Nothing is mixed: a quick folder whose run_meta.json records the standard profile is refused."""
    d = copy_study(root)
    meta = json.loads((d / "run_meta.json").read_text())
    meta["profile"] = "standard"
    (d / "run_meta.json").write_text(json.dumps(meta, indent=1))
    res = report()
    assert res.rc != 0
    assert res.names("standard") and res.names("quick")


def test_report_missing_notebook_is_reported(root, report):
    """Each page links the executed notebook: a study folder without it is named, not linked to a missing file."""
    d = copy_study(root)
    (d / f"{STUDY}.ipynb").unlink()
    res = report()
    assert reported(res, f"{STUDY}.ipynb")
    if res.rc == 0:
        for name, page in site_pages(root).items():
            assert f"{STUDY}/quick/{STUDY}.ipynb" not in page, name


def test_report_notebook_not_json_is_an_error(root, report):
    """A damaged executed notebook (not JSON) is an error naming it."""
    d = copy_study(root)
    (d / f"{STUDY}.ipynb").write_text('{"cells": [')
    res = report()
    assert res.rc != 0
    assert res.names(f"{STUDY}.ipynb")


def test_report_missing_figure_is_reported(root, report):
    """The findings page links the figure that shows each claim: a missing figure is reported, not silently linked."""
    d = copy_study(root)
    (d / "figures" / "score_vs_fraction.png").unlink()
    res = report()
    assert reported(res, "score_vs_fraction")
    if res.rc == 0:
        for name, page in site_pages(root).items():
            assert "figures/score_vs_fraction.png" not in page, name


def test_report_zero_byte_figure_is_reported(root, report):
    """A zero-byte figure (a damaged PNG) is reported, not shown as a broken image."""
    d = copy_study(root)
    (d / "figures" / "score_vs_fraction.png").write_bytes(b"")
    res = report()
    assert reported(res, "score_vs_fraction")
    if res.rc == 0:
        for name, page in site_pages(root).items():
            assert "figures/score_vs_fraction.png" not in page, name


# --------------------------------------------------------------------------------------------------------------------
# the report: where it writes, and failing without a half-written site


def test_report_output_path_is_a_file_is_a_clear_error(root, report):
    """An output path that cannot be written (outputs/report is a file) is a clear error naming it."""
    copy_study(root)
    (root / "report").write_text("not a folder")
    res = report()
    assert res.rc != 0
    assert res.names("report")
    assert res.exc is None or isinstance(res.exc, SystemExit), f"a traceback: {res.exc!r}"
    assert (root / "report").read_text() == "not a folder"


def test_report_failed_write_leaves_the_previous_site(root, report):
    """Results are written atomically: a report that fails part-way leaves the earlier site as it was."""
    copy_study(root)
    assert report().rc == 0
    for p in (root / "report").rglob("*.html"):
        p.write_text("<p>earlier site</p>")
    page = root / "report" / "quick" / f"{STUDY}.html"
    page.unlink()
    page.mkdir()  # the study's page cannot be written
    (page / "keep").write_text("x")
    earlier = tree(root / "report")
    res = report()
    assert res.rc != 0
    assert tree(root / "report") == earlier, "the failed run changed the earlier site"


def test_report_failure_on_damaged_study_leaves_the_previous_site(root, report):
    """Nothing is silently overwritten: a report refused for a damaged study leaves the earlier site untouched."""
    d = copy_study(root)
    assert report().rc == 0
    earlier = tree(root / "report")
    (d / "tables" / "verdicts.csv").write_bytes(b"")
    report()
    assert tree(root / "report") == earlier




def test_report_interim_render_says_so(root, report):
    """An interim render (run_meta.json records `interim`, as the render writes it, with tables/interim.json beside
    the tables): the report says so (it ends with it); the committed full render does not."""
    d = copy_study(root, profile="standard-next")
    meta = json.loads((d / "run_meta.json").read_text())
    assert "interim" not in meta, "the committed render is a full one"
    res = report()
    assert res.rc == 0, res.text
    assert "interim" not in text_of_html((root / "report" / "standard-next" / "index.html").read_text()).lower()
    interim = {"cells": 730, "planned": 1420, "where": {"task": ["SST-2", "STS-B"]}}
    (d / "run_meta.json").write_text(json.dumps({**meta, "interim": interim}))
    (d / "tables" / "interim.json").write_text(json.dumps(interim))
    res = report()
    assert res.rc == 0, res.text
    findings = text_of_html((root / "report" / "standard-next" / "index.html").read_text()).lower()
    assert "interim" in findings


# --------------------------------------------------------------------------------------------------------------------
# the summary


def test_summary_quick_writes_summary_md_only(root, summary):
    """`make summary` writes outputs/SUMMARY.md for the quick profile, and nothing else."""
    copy_study(root)
    before = tree(root)
    res = summary("--profile", "quick")
    assert res.rc == 0, res.text
    after = tree(root)
    assert set(after) - set(before) == {"SUMMARY.md"}
    assert {k: v for k, v in after.items() if k != "SUMMARY.md"} == before


def test_summary_other_profile_writes_summary_profile_md(root, summary):
    """Another profile's summary is SUMMARY-<profile>.md; SUMMARY.md (quick's) is left as it is."""
    copy_study(root, profile="quick")
    copy_study(root, profile="standard")
    (root / "SUMMARY.md").write_text("quick summary\n")
    res = summary("--profile", "standard")
    assert res.rc == 0, res.text
    assert (root / "SUMMARY-standard.md").is_file()
    assert (root / "SUMMARY.md").read_text() == "quick summary\n"


def test_summary_is_reproducible(root, summary):
    """The summary is built from the verdict tables with no hand work: the same tables, the same bytes."""
    copy_study(root)
    assert summary("--profile", "quick").rc == 0
    first = (root / "SUMMARY.md").read_bytes()
    assert summary("--profile", "quick").rc == 0
    assert (root / "SUMMARY.md").read_bytes() == first


def test_summary_notebook_links_resolve(quick_all_built):
    """Every claim in SUMMARY.md comes with a link to its notebook, and each link points to the notebook."""
    root, _, s, _ = quick_all_built
    assert s.returncode == 0, s.stderr[-3000:]
    links = re.findall(r"\]\(([^)]+\.ipynb)\)", (root / "SUMMARY.md").read_text())
    assert {Path(link).parts[0] for link in links} == set(STUDIES)
    assert all((root / link).is_file() for link in links)


def test_summary_unknown_profile_is_an_error(root, summary):
    """An unknown --profile is a clear error naming it, and writes no SUMMARY file."""
    copy_study(root)
    res = summary("--profile", "nosuch")
    assert res.rc != 0
    assert res.names("nosuch")
    assert not list(root.glob("SUMMARY*"))


def test_summary_profile_without_studies_is_an_error(root, summary):
    """A profile with no executed study (paper, nothing ran) is named, not written as an empty SUMMARY-paper.md."""
    copy_study(root)
    res = summary("--profile", "paper")
    assert res.rc != 0
    assert res.names("paper")
    assert not (root / "SUMMARY-paper.md").exists()


def test_summary_empty_outputs_root_is_an_error(root, summary):
    """An outputs root with no study is a clear error, not an empty SUMMARY.md."""
    res = summary("--profile", "quick")
    assert res.rc != 0
    assert not (root / "SUMMARY.md").exists()


def test_summary_profile_given_twice_is_an_error(root, summary):
    """An option that takes one value given twice is an error (not the last one silently winning)."""
    copy_study(root, profile="quick")
    copy_study(root, profile="standard")
    res = summary("--profile", "quick", "--profile", "standard")
    assert res.rc != 0
    assert res.names("--profile")
    assert not list(root.glob("SUMMARY*"))


def test_summary_missing_verdicts_is_an_error(root, summary):
    """A study folder without tables/verdicts.csv is named, not left out of "every claim of every study"."""
    d = copy_study(root)
    copy_study(root, "compensation")
    (d / "tables" / "verdicts.csv").unlink()
    res = summary("--profile", "quick")
    assert res.rc != 0
    assert res.names("verdicts") and res.names(STUDY)


def test_summary_zero_byte_verdicts_is_an_error(root, summary):
    """A zero-byte verdicts.csv is an error naming it."""
    d = copy_study(root)
    (d / "tables" / "verdicts.csv").write_bytes(b"")
    res = summary("--profile", "quick")
    assert res.rc != 0
    assert res.names("verdicts")


def test_summary_header_only_verdicts_is_an_error(root, summary):
    """A verdicts.csv with a header and no row is an error naming it, not a study with no claims."""
    d = copy_study(root)
    f = d / "tables" / "verdicts.csv"
    f.write_text(f.read_text().splitlines()[0] + "\n")
    res = summary("--profile", "quick")
    assert res.rc != 0
    assert res.names("verdicts")


def test_summary_truncated_verdicts_is_an_error(root, summary):
    """A verdicts.csv cut off mid-row is an error, not a shorter table."""
    d = copy_study(root)
    f = d / "tables" / "verdicts.csv"
    raw = f.read_bytes()
    f.write_bytes(raw[: int(len(raw) * 0.6)])
    res = summary("--profile", "quick")
    assert res.rc != 0
    assert res.names("verdicts")


def test_summary_unknown_verdict_word_is_an_error(root, summary):
    """A verdict is one of five words: another word is an error naming it."""
    d = copy_study(root)
    set_cell(d / "tables" / "verdicts.csv", "verdict", "probably", first_only=True)
    res = summary("--profile", "quick")
    assert res.rc != 0
    assert res.names("probably")


def test_summary_infinite_effect_is_an_error(root, summary):
    """Non-finite numbers are errors, not results: an effect of inf is refused, not printed as `inf`."""
    d = copy_study(root)
    set_cell(d / "tables" / "verdicts.csv", "effect", "inf", where=lambda r: r["effect"] != "")
    res = summary("--profile", "quick")
    assert res.rc != 0


def test_summary_nan_effect_on_a_decided_row_is_an_error(root, summary):
    """A decided row whose effect is NaN is an error, not a verdict printed with `nan`."""
    d = copy_study(root, DECIDED[0], DECIDED[1])
    assert any("contradicted" in row for row in read_csv_rows(d / "tables" / "verdicts.csv")[1]), "a decided row"
    res = summary("--profile", DECIDED[1])
    assert res.rc == 0, "the committed table itself is accepted"
    set_cell(d / "tables" / "verdicts.csv", "effect", "nan", where=lambda r: r["verdict"] == "contradicted")
    res = summary("--profile", DECIDED[1])
    assert res.rc != 0


def test_summary_verdicts_of_another_profile_is_an_error(root, summary):
    """Nothing is mixed: a quick folder whose run_meta.json records another profile is refused."""
    d = copy_study(root)
    meta = json.loads((d / "run_meta.json").read_text())
    meta["profile"] = "standard"
    (d / "run_meta.json").write_text(json.dumps(meta, indent=1))
    res = summary("--profile", "quick")
    assert res.rc != 0
    assert res.names("standard")


def test_summary_missing_notebook_is_reported(root, summary):
    """Each claim links its notebook: a study without its executed notebook is named, not linked to nothing."""
    d = copy_study(root)
    (d / f"{STUDY}.ipynb").unlink()
    res = summary("--profile", "quick")
    assert res.names(f"{STUDY}.ipynb") or res.names("notebook")
    if res.rc == 0:
        assert f"({STUDY}/quick/{STUDY}.ipynb)" not in (root / "SUMMARY.md").read_text()


def test_summary_failure_leaves_the_previous_summary(root, summary):
    """Nothing is silently overwritten: a summary refused for a damaged study leaves the earlier SUMMARY.md."""
    d = copy_study(root)
    copy_study(root, "compensation")
    assert summary("--profile", "quick").rc == 0
    earlier = (root / "SUMMARY.md").read_bytes()
    (d / "tables" / "verdicts.csv").write_bytes(b"")
    summary("--profile", "quick")
    assert (root / "SUMMARY.md").read_bytes() == earlier


def test_summary_output_path_unwritable_is_a_clear_error(root, summary):
    """An output path that cannot be written (SUMMARY.md is a folder) is a clear error naming it."""
    copy_study(root)
    (root / "SUMMARY.md").mkdir()
    res = summary("--profile", "quick")
    assert res.rc != 0
    assert res.names("SUMMARY.md")
    assert res.exc is None or isinstance(res.exc, SystemExit), f"a traceback: {res.exc!r}"


def test_summary_interim_render_says_so(root, summary):
    """An interim render: SUMMARY-<profile>.md says so for the study (the scale it quotes), and a full render of the
    same study does not. (The committed standard-next renders are full now: the interim record is the one the
    render writes beside its tables, ``tables/interim.json``, as the SST-2 and STS-B render of 2026-12-05 had it.)"""
    import json

    dst = copy_study(root, profile="standard-next")
    assert not (dst / "tables" / "interim.json").exists(), "the committed render is a full one"
    res = summary("--profile", "standard-next")
    assert res.rc == 0, res.text
    assert "interim" not in (root / "SUMMARY-standard-next.md").read_text().lower()
    (dst / "tables" / "interim.json").write_text(json.dumps({"cells": 730, "planned": 1420,
                                                             "where": {"task": ["SST-2", "STS-B"]}}))
    res = summary("--profile", "standard-next")
    assert res.rc == 0, res.text
    text = (root / "SUMMARY-standard-next.md").read_text()
    assert "interim render: only the cells with task = SST-2, STS-B (730 of 1,420 planned cells)" in text, text


# --------------------------------------------------------------------------------------------------------------------
# the Makefile's variables (dry runs)


def make_n(*args: str, env: dict | None = None) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    e = {k: v for k, v in os.environ.items() if k not in ("PROFILE", "ONLY", "JOBS", "TORCH_INDEX", "MAKEFLAGS")}
    e.update(env or {})
    r = subprocess.run(["make", "-n", *args], cwd=REPO, env=e, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_make_report_passes_profile():
    """`make report PROFILE=...` builds that profile only: the value reaches the report's --profile."""
    out = make_n("report", "PROFILE=nosuch")
    assert re.search(r"-m headprune_utils\.run\.report --profile nosuch\b", out), out


def test_make_report_without_profile_builds_every_profile():
    """`make report` with no PROFILE builds every profile there is (no --profile passed)."""
    out = make_n("report")
    line = [ln for ln in out.splitlines() if "headprune_utils.run.report" in ln]
    assert line and "--profile" not in line[-1], out


def test_make_report_profile_from_the_environment():
    """PROFILE set in the environment counts as given: `PROFILE=standard make report` builds standard only."""
    out = make_n("report", env={"PROFILE": "standard"})
    assert re.search(r"headprune_utils\.run\.report --profile standard\b", out), out


def test_make_summary_defaults_to_quick_and_passes_profile():
    """`make summary` is the quick profile's summary; PROFILE=... is passed through."""
    assert re.search(r"headprune_utils\.run\.summary --profile quick\b", make_n("summary"))
    assert re.search(r"headprune_utils\.run\.summary --profile standard-next\b",
                     make_n("summary", "PROFILE=standard-next"))


def test_make_render_passes_profile_only_and_jobs():
    """`make render PROFILE=... ONLY=... JOBS=N` renders from the stored cells with those values."""
    out = make_n("render", "PROFILE=nosuch", "ONLY=random_pruning nosuch_study", "JOBS=3")
    line = [ln for ln in out.splitlines() if "headprune_utils.run " in ln + " "][-1]
    assert "--from-cells" in line
    assert re.search(r"--profile nosuch\b", line)
    assert re.search(r"--jobs 3\b", line)
    assert re.search(r"--only random_pruning nosuch_study\b", line)




def test_make_torch_index_installs_torch_from_it_first():
    """TORCH_INDEX=<index>: the first `make` installs torch==2.13.0 from that index, then the rest from PyPI."""
    out = make_n("-B", "env", "TORCH_INDEX=https://download.pytorch.org/whl/cpu")
    lines = out.splitlines()
    torch_i = [i for i, ln in enumerate(lines) if "torch==2.13.0" in ln and "--index-url" in ln]
    rest_i = [i for i, ln in enumerate(lines) if "pip install" in ln and "-e" in ln.split()]
    assert torch_i and rest_i and torch_i[0] < rest_i[0], out
    assert "https://download.pytorch.org/whl/cpu" in lines[torch_i[0]]




def _env_ready() -> bool:
    if shutil.which("make") is None:
        return False
    r = subprocess.run(["make", "-q", "env"], cwd=REPO, capture_output=True, timeout=60)
    return r.returncode == 0


@pytest.mark.skipif(not _env_ready(), reason="the .venv is not up to date: `make report` would install it")
def test_make_report_real_run_honours_output_dir(tmp_path):
    """`make report PROFILE=quick` takes seconds and writes the site under the outputs root it is given."""
    out = tmp_path / "out"
    copy_study(out)
    env = {**{k: v for k, v in os.environ.items() if k not in ("PROFILE", "MAKEFLAGS")},
           "HEADPRUNE_OUTPUT_DIR": str(out), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(["make", "report", "PROFILE=quick"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out / "report" / "quick" / f"{STUDY}.html").is_file()


@pytest.mark.skipif(not _env_ready(), reason="the .venv is not up to date: `make report` would install it")
def test_make_report_bad_profile_fails(tmp_path):
    """`make report PROFILE=<unknown>` fails (make's exit status non-zero), naming the profile."""
    out = tmp_path / "out"
    copy_study(out)
    env = {**{k: v for k, v in os.environ.items() if k not in ("PROFILE", "MAKEFLAGS")},
           "HEADPRUNE_OUTPUT_DIR": str(out), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(["make", "report", "PROFILE=nosuch"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0
    assert "nosuch" in r.stdout + r.stderr
    assert not (out / "report").exists()
