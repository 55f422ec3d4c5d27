"""The report: a static HTML site of the executed studies, built from the committed outputs alone (no cell is
computed, no network is needed to build or to read it).

    outputs/report/index.html           the profiles there are, with their scale and verdict counts
    outputs/report/<profile>/index.html the cross-study findings table (one row per claim: paper, semantics, our
                                        number with its interval, verdicts, links to the study's section and
                                        figure) and the headline figures
    outputs/report/<profile>/<study>.html
                                        the executed notebook: "What this study found" first, then its text,
                                        figures and tables; the code is in the notebook (linked), plumbing cells
                                        (tag ``plumbing``, the parameters) are left out

Why nbconvert's ``basic`` template and not a site builder (Jupyter Book, Sphinx): the notebooks are already
executed and the pages need no cross-references beyond anchors, so a site builder would add a build tool and its
theme (and a network for its default assets) for nothing. The ``basic`` template gives the cells' HTML without
scripts; the page shell and its small style sheet are ours. Math is rendered at build time to MathML with
``latex2mathml`` (browsers display MathML natively), so no MathJax from a network is needed; a formula that does
not convert stays as its LaTeX source in ``<code>`` and is reported.

    python -m headprune_utils.run.report [--profile quick] [--profile standard]    (make report)
"""
from __future__ import annotations

import argparse
import html
import logging
import math
import os
import re
import sys
import time
from pathlib import Path

import pandas as pd
from latex2mathml.converter import convert

from headprune_utils.analysis import claims
from headprune_utils.run.stable import stable_styler_ids
from headprune_utils.run.summary import (
    UNITS_NOTE,
    claim_rows,
    fmt_estimate,
    inject_findings,
    read_verdicts,
    row_label,
    study_findings_markdown,
    study_output_problems,
    verdict_row,
    verdict_words,
)
from headprune_utils.store.paths import StudyPaths, outputs_root, profile_name_problem, report_dir, shown_path
from headprune_utils.store.results import atomic_write_text
from headprune_utils.studies import STUDIES

__all__ = ["build_report", "render_study", "convert_math", "claim_figure", "profiles_with_outputs", "PLUMBING_TAGS",
           "HEADLINE_FIGURES", "headline_findings", "stable_styler_ids", "reasons_table"]

# cells left out of the report whole (their code and their outputs)
PLUMBING_TAGS = frozenset({"plumbing", "parameters", "injected-parameters"})
# the report's headline figures: (study, figure name, caption)
HEADLINE_FIGURES = (
    ("random_pruning", "score_vs_fraction",
     "Study 1: task score against the share of heads pruned at random, in both regimes (mean over models, 95% "
     "t-band; dots: models)."),
    ("layer_strategies", "score_by_strategy",
     "Study 2: score by where the heads are pruned (layer strategies and importance orders) at each budget."),
)

def claim_figure(study: str, claim_id: str) -> str:
    """The name of the figure (of ``study``) that shows ``claim_id``: the claim's own ``figure`` (declared with the
    claim, ``claims.Claim.figure``)."""
    found = [c for c in STUDIES[study].claims if c.id == claim_id]
    if not found:
        raise KeyError(f"study {study} declares no claim {claim_id!r}")
    return found[0].figure


_CODE = re.compile(r"(```.*?```|`[^`\n]*`)", re.S)
_DISPLAY_MATH = re.compile(r"\$\$(.+?)\$\$", re.S)
_INLINE_MATH = re.compile(r"(?<![\\$\w])\$(?=\S)([^$\n]+?)(?<=\S)\$(?![\w$])")


def convert_math(text: str, store: dict[str, str], failures: list[str]) -> str:
    """``$...$`` and ``$$...$$`` outside code spans replaced by placeholders (plain letters, so the Markdown
    renderer leaves them alone) whose MathML goes into ``store``; LaTeX that does not convert is kept as code and
    appended to ``failures``."""
    def put(latex: str, display: str) -> str:
        key = f"HPMATHX{len(store):05d}X"
        try:
            store[key] = convert(latex.strip(), display=display)
        except Exception as exc:  # noqa: BLE001 - any converter error: keep the source visible, report it
            failures.append(f"{latex.strip()!r}: {type(exc).__name__}: {exc}")
            store[key] = f"<code>{html.escape(latex.strip())}</code>"
        return key

    parts = _CODE.split(text)
    for i in range(0, len(parts), 2):  # even parts are outside code
        p = _DISPLAY_MATH.sub(lambda m: "\n\n" + put(m.group(1), "block") + "\n\n", parts[i])
        parts[i] = _INLINE_MATH.sub(lambda m: put(m.group(1), "inline"), p)
    return "".join(parts)


_SCALE_PARAGRAPH = re.compile(r"^\*\*Scale\.\*\*.*?(?=\n\s*\n|\Z)", re.S | re.M)


def _scale_paragraph(text: str, profile: str, scale: str) -> str:
    """The notebook's "**Scale.**" paragraph (written for the notebook's default, quick) as this page's profile
    reads it: for another profile, a paragraph on that profile's scale (its verdict table's ``scale``)."""
    if profile == "quick" or not _SCALE_PARAGRAPH.search(text):
        return text
    words = _PROFILE_WORDS.get(profile, "a run of every study")
    para = (f"**Scale.** This page is the `{profile}` profile's run ({words}): {scale or 'see its verdict table'}. "
            "It is a small-scale test of the claims, not a reproduction of the papers' tables. The notebook's default, "
            "`quick`, is a CPU demonstration of minutes on small subsets; `paper` runs the papers' models on a GPU.")
    return _SCALE_PARAGRAPH.sub(lambda _: para, text, count=1)


def _prepare(nb, store: dict[str, str], failures: list[str], profile: str = "quick",
             verdicts: pd.DataFrame | None = None):
    """The notebook as the report shows it: plumbing cells, stderr and the notebook's own findings cell out (the
    page shows them boxed at its top), the scale paragraph for ``profile``, the printed verdict table as a table
    (:func:`reasons_table`, from ``verdicts``), math converted."""
    inject_findings(nb, "")
    title = ""
    if nb.cells and nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "):
        # the title goes above the findings box; the rest of the first cell (the claim, the design) below it
        title, _, rest = nb.cells[0].source.partition("\n")
        title = title[2:].strip()
        nb.cells[0].source = rest.lstrip("\n")
    nb.metadata["report_title"] = title
    scale = ""
    if verdicts is not None and "scale" in verdicts.columns and len(verdicts):
        scale = str(verdicts["scale"].iloc[0])
    if nb.cells and nb.cells[0].cell_type == "markdown":
        nb.cells[0].source = _scale_paragraph(nb.cells[0].source, profile, scale)
    kept = []
    for cell in nb.cells:
        tags = set(cell.get("metadata", {}).get("tags", []))
        if tags & PLUMBING_TAGS:
            continue
        if cell.cell_type == "markdown":
            cell.source = convert_math(cell.source, store, failures)
        elif cell.cell_type == "code":
            outs = [o for o in cell.get("outputs", []) if not (o.get("output_type") == "stream"
                                                             and o.get("name") == "stderr")]
            if verdicts is not None:
                outs = [x for o in outs for x in _verdict_dump_as_table(o, verdicts)]
            for o in outs:
                data = o.get("data", {})
                if "text/markdown" in data:
                    data["text/markdown"] = convert_math(data["text/markdown"], store, failures)
            cell.outputs = outs
            if not outs:
                continue
        kept.append(cell)
    nb.cells = kept
    return nb


_PLACEHOLDER_ALT = 'alt="No description has been provided for this image"'  # what nbconvert writes


def _alt_from_headings(body: str, default: str) -> str:
    """Each figure's alternative text: the heading of the section it is in (nbconvert leaves a placeholder)."""
    parts, last, pos = [], default, 0
    for m in re.finditer(r'<h[1-3][^>]*>(.*?)(?:<a class="anchor-link"|</h[1-3]>)|' + re.escape(_PLACEHOLDER_ALT), body):
        if m.group(0).startswith("<h"):
            last = html.unescape(re.sub(r"<[^>]+>", "", m.group(1))).strip() or last
            continue
        parts += [body[pos:m.start()], f'alt="Figure: {html.escape(last)}"']
        pos = m.end()
    return "".join(parts) + body[pos:]


_NAN_CELL = re.compile(r"<td>\s*(?:NaN|nan|None|&lt;NA&gt;|NaT)\s*</td>")


def render_study(name: str, profile: str) -> tuple[str, list[str]]:
    """The study's page body (HTML) from its executed notebook, and the formulas that did not convert."""
    import nbformat

    paths = StudyPaths(name, profile, staged=False)
    verdicts = read_verdicts(name, profile)  # first: a damaged table is named before the notebook is read
    try:
        nb = nbformat.read(paths.notebook, as_version=4)
    except Exception as exc:  # nbformat's NotJSONError, a validation error, an unreadable file
        raise ValueError(f"{shown_path(paths.notebook)} is not a readable executed notebook ({type(exc).__name__}: "
                         f"{str(exc)[:200]}): run the study again") from None
    for fig in sorted(paths.figures.glob("*.png")) if paths.figures.is_dir() else []:
        if fig.stat().st_size == 0:
            raise ValueError(f"{shown_path(fig)} is an empty file (a figure cut off): run the study again")
    for fig in sorted({c.figure for c in STUDIES[name].claims if c.figure}):
        # a figure is written with its data (figures.save.save_figure): data without the picture is a figure lost
        if paths.table(fig).exists() and not paths.figure(fig).exists():
            raise ValueError(f"{shown_path(paths.figure(fig))} is missing (its data, {shown_path(paths.table(fig))}, "
                             f"is there; the figure of a claim): run the study again")
    return study_body(nb, name, profile, verdicts)


def study_body(nb, name: str, profile: str, verdicts: pd.DataFrame | None) -> tuple[str, list[str]]:
    """:func:`render_study` of a notebook node ``nb`` (changed in place) and its verdict table ``verdicts``."""
    from nbconvert import HTMLExporter

    store: dict[str, str] = {}
    failures: list[str] = []
    nb = _prepare(nb, store, failures, profile, verdicts)
    findings = study_findings_markdown(name, profile)
    exporter = HTMLExporter(template_name="basic", exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True)
    exporter.log.setLevel(logging.ERROR)  # its alternative-text warning: the alt texts are set below
    body, _ = exporter.from_notebook_node(nb)
    body = _alt_from_headings(body, name.replace("_", " "))
    if findings:
        from nbconvert.filters.markdown_mistune import markdown2html_mistune

        body = f'<div class="findings">{markdown2html_mistune(convert_math(findings, store, failures))}</div>\n' + body
    title = nb.metadata.get("report_title") or name.replace("_", " ")
    body = f"<h1>{html.escape(title)}</h1>\n" + body
    for key, mathml in store.items():
        body = body.replace(key, mathml)
    # a missing value in a displayed table reads as a dash with its meaning on hover, never "NaN"
    body = _NAN_CELL.sub('<td class="na" title="no value: see the reason column or the text">–</td>', body)
    return _stable_cell_ids(stable_styler_ids(body, name)), failures


def _stable_cell_ids(body: str) -> str:
    """nbconvert names each cell's block by the notebook's cell id (``id="cell-id=<id>"``), new whenever the notebook
    is written afresh: numbered in page order instead (nothing links to them)."""
    count = iter(range(1, 1_000_000))
    return re.sub(r'id="cell-id=[^"]*"', lambda _: f'id="cell-{next(count)}"', body)


def _verdict_dump_as_table(output, verdicts: pd.DataFrame) -> list:
    """A printed verdict table (``print(claims.render(verdict))``: a monospace block per claim) as an HTML table
    (:func:`reasons_table` of ``verdicts``, the table that was printed), the rest of the printed text kept around
    it. Replaced only when the printed rows are the table's rows (count and verdict words, in order); any other
    output unchanged, as a one-element list."""
    import nbformat

    if output.get("output_type") != "stream" or output.get("name") != "stdout" or verdicts.empty:
        return [output]
    ids = tuple(f"{c} (" for c in dict.fromkeys(verdicts["claim_id"].astype(str)))
    lines = output.get("text", "").split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith(ids)), None)
    if start is None:
        return [output]
    end = start
    while end < len(lines) and (lines[end].startswith(ids) or lines[end].startswith("  ")):
        end += 1
    printed = [re.match(r"  .*?: ([A-Z ]+): effect ", line) for line in lines[start:end] if line.startswith("  ")]
    words = [m.group(1).lower() if m else None for m in printed]
    grouped = [str(w) for _, g in verdicts.groupby(["claim_id", "claim"], sort=False) for w in g["verdict"]]
    if words != grouped:  # claims.render prints the rows claim by claim
        return [output]
    out = []
    before, after = "\n".join(lines[:start]).strip("\n"), "\n".join(lines[end:]).strip("\n")
    if before:
        out.append(nbformat.v4.new_output("stream", name="stdout", text=before + "\n"))
    out.append(nbformat.v4.new_output("display_data", data={"text/html": reasons_table(verdicts)}))
    if after:
        out.append(nbformat.v4.new_output("stream", name="stdout", text=after + "\n"))
    return out


def _num(x, fmt: str = ".3g") -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) or pd.isna(x) else format(float(x), fmt)


def reasons_table(verdicts: pd.DataFrame) -> str:
    """Every row of a verdict table as HTML: a block per claim (its verdict counts of the primary analysis in the
    summary line), a row per task x setting x semantics: where, semantics (and whether it is the primary analysis),
    verdict, effect [interval] with its unit, units, Holm-adjusted p, margin, and the reason in words (the test on
    hover)."""
    out = ['<div class="verdict-rows">']
    for (cid, _), g in verdicts.groupby(["claim_id", "claim"], sort=False):
        prim = g[g["analysis"] == "primary"] if "analysis" in g.columns else g
        counts = prim["verdict"].value_counts()
        words = ", ".join(f"{int(counts[w])} {w}" for w in claims.VERDICTS if w in counts)
        first = g.iloc[0]
        out.append(f'<details open><summary><code>{html.escape(str(cid))}</code> ({html.escape(str(first["paper"]))}):'
                   f" {html.escape(str(first['claim']))} <b>Primary: {_verdict_words(words)}</b></summary>")
        out.append('<table class="reasons"><thead><tr><th>where</th><th>semantics</th><th>verdict</th>'
                   "<th>effect [interval], unit</th><th>units</th><th>Holm p</th><th>margin</th><th>reason</th>"
                   "</tr></thead><tbody>")
        for r in g.to_dict("records"):
            sem = str(r.get("semantics", "") or "")
            sem = (sem or "none") + (" (sensitivity)" if r.get("analysis") == "sensitivity" else "")
            word = str(r["verdict"])
            est = fmt_estimate(r, unit=True) if not pd.isna(r.get("effect")) else "–"
            n = r.get("n_units")
            n = "–" if n is None or pd.isna(n) else str(int(n))
            out.append(
                f"<tr><td>{html.escape(row_label(r))}</td><td>{html.escape(sem)}</td>"
                f'<td class="v-{word.replace(" ", "-")}">{html.escape(word)}</td><td>{html.escape(est)}</td>'
                f"<td>{n}</td><td>{_num(r.get('p_adjusted'))}</td><td>{_num(r.get('margin'))}</td>"
                f'<td title="{html.escape(str(r.get("test", "") or ""))}">{html.escape(str(r.get("reason", "") or ""))}'
                "</td></tr>")
        out.append("</tbody></table></details>")
    out.append("</div>")
    return "".join(out)


_CSS = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fff}
nav{background:#233;color:#fff;padding:.5em 1.2em;position:sticky;top:0;z-index:2;font-size:14px}
nav a{color:#cfe;margin-right:1em;text-decoration:none} nav a:hover{text-decoration:underline}
main{max-width:1100px;margin:0 auto;padding:1em 1.5em 4em}
h1{font-size:1.7em} h2{font-size:1.35em;margin-top:1.6em;border-bottom:1px solid #ddd} h3{font-size:1.1em}
a.anchor-link{visibility:hidden;margin-left:.3em;text-decoration:none} h1:hover a.anchor-link,
h2:hover a.anchor-link,h3:hover a.anchor-link{visibility:visible}
img{max-width:100%;height:auto}
table{border-collapse:collapse;font-size:13px;margin:.6em 0;display:block;overflow-x:auto;max-width:100%}
th,td{border:1px solid #ddd;padding:3px 7px;vertical-align:top;text-align:left}
thead th{background:#f3f5f7} td.na{color:#999;text-align:center}
pre{background:#f6f8fa;padding:.6em;overflow-x:auto;font-size:12.5px;white-space:pre-wrap}
code{background:#f3f3f3;padding:0 3px;border-radius:3px;font-size:92%}
.findings{background:#f4f8fb;border-left:4px solid #4a86a8;padding:.3em 1.2em;margin:1em 0}
.v-supported{color:#11703b;font-weight:600}.v-contradicted{color:#a3271d;font-weight:600}
.v-not-supported{color:#a35d00;font-weight:600}.v-inconclusive{color:#555}.v-not-testable{color:#777}
table.claims,table.reasons{display:table;width:100%;table-layout:auto}
table.claims td,table.reasons td{overflow-wrap:break-word} table.claims code{overflow-wrap:anywhere}
table.reasons td:nth-child(2),table.reasons td:nth-child(3),table.reasons td:nth-child(5),
table.reasons td:nth-child(6),table.reasons td:nth-child(7),table.reasons th{white-space:nowrap}
table.claims td:nth-child(2){min-width:12em} figure{margin:1.2em 0} figcaption{font-size:13px;color:#444}
.scale{color:#444;font-style:italic} .units{color:#444;font-size:13px}
details{margin:.4em 0} summary{cursor:pointer}
.headline li{margin:.35em 0} .headline .study-scale{color:#555;font-size:13px}
"""


def _page(title: str, nav: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n"
            f"<body><nav>{nav}</nav><main>\n{body}\n</main></body></html>\n")


def _nav(profile: str, studies: list[str], here: str = "") -> str:
    links = ['<a href="../index.html">headprune report</a>',
             f'<a href="index.html">{html.escape(profile)}: findings</a>']
    for i, s in enumerate(studies, 1):
        style = ' style="font-weight:700"' if s == here else ""
        links.append(f'<a href="{s}.html"{style}>{i}. {s.replace("_", " ")}</a>')
    return " ".join(links)


def _verdict_words(text: str) -> str:
    """``"1 supported, 2 inconclusive"`` with each word styled by its class."""
    out = html.escape(text)
    for w in claims.VERDICTS:
        out = re.sub(rf"(\d+ ){re.escape(w)}\b", rf'\1<span class="v-{w.replace(" ", "-")}">{w}</span>', out)
    return out


def _headline_number(g: pd.DataFrame) -> str:
    """A claim's number as the index shows it: the row that carries its verdict (:func:`summary.verdict_row`: a
    decided row first, a pooled one before a task's), effect [interval] unit, where (a pool named by the tasks in
    it), verdict."""
    r = verdict_row(g)
    if r is None:
        return "no row"
    where = html.escape(row_label(r))
    if pd.isna(r.get("effect")):
        return f"no number <small>({where}: {html.escape(str(r['verdict']))}; see the reasons)</small>"
    return (f"{html.escape(fmt_estimate(r, unit=True))} "
            f"<small>({where}: {html.escape(str(r['verdict']))})</small>")


def _index_page(profile: str, studies: list[str], here: Path) -> tuple[str, int]:
    t = claim_rows(profile)
    out = [f"<h1>What the {html.escape(profile)} run found</h1>"]
    scales = {}
    for name in studies:
        v = _read_verdicts(name, profile)
        if "scale" in v.columns and len(v):
            scales[name] = str(v["scale"].iloc[0])
    counts = pd.Series([w for v in t["verdicts"] for w in verdict_words(v)]).value_counts() \
        if len(t) else pd.Series(dtype=int)
    out.append(f"<p>{len(t)} claims in {t['study'].nunique() if len(t) else 0} studies, each tested under its own "
               "paper's ablation semantics (primary analysis); the unit of replication is an independently trained "
               "model, the rules are in <code>headprune_utils/analysis/claims.py</code>. Claims with at least one row of each "
               "verdict: " + ", ".join(f"{w} {int(counts.get(w, 0))}" for w in claims.VERDICTS) + ".</p>")
    if profile == "quick":
        out.append('<p class="scale"><b>Scale:</b> the quick profile is a one-hour demonstration on a CPU: small '
                   "training sets, three seeds, an unconverged translation model. Most claims are not testable at "
                   "this scale; no number here is a reproduction of a paper's table.</p>")
    else:
        out.append(f'<p class="scale"><b>Scale:</b> the {html.escape(profile)} profile is '
                   f"{html.escape(_PROFILE_WORDS.get(profile, 'a run of every study'))}; each study's scale is "
                   "listed below the table. No number here is a reproduction of a paper's table.</p>")
    out.append(f'<p class="units">{html.escape(UNITS_NOTE)} The number shown is the row that carries the claim\'s '
               "verdict (a decided row first, a pooled row before a task's); every row is on the study's page.</p>")
    out.append('<table class="claims"><thead><tr><th>study</th><th>claim</th><th>paper</th><th>semantics</th>'
               "<th>our number [95% CI] unit</th><th>verdicts (primary)</th><th>flips with the semantics</th>"
               "<th>figure</th></tr></thead><tbody>")
    prim_cache: dict[str, pd.DataFrame] = {}
    for r in t.itertuples():
        if r.study not in prim_cache:
            v = _read_verdicts(r.study, profile)
            prim_cache[r.study] = v[v["analysis"] == "primary"] if "analysis" in v.columns else v
        g = prim_cache[r.study][prim_cache[r.study]["claim_id"] == r.claim_id]
        fig = claim_figure(r.study, r.claim_id)
        fig_path = StudyPaths(r.study, profile, staged=False).figure(fig)
        fig_cell = (f'<a href="{os.path.relpath(fig_path, here)}">{html.escape(fig)}</a>'
                    if fig_path.exists() else "–")
        out.append(
            f'<tr class="claim" id="row-{r.study}-{html.escape(r.claim_id)}"><td><a href="{r.study}.html">{html.escape(r.study)}</a></td>'
            f'<td><a href="{r.study}.html#claim-{html.escape(r.claim_id)}"><code>{html.escape(r.claim_id)}</code></a>'
            f" {html.escape(r.claim)}</td><td>{html.escape(str(r.paper))}</td><td>{html.escape(r.semantics)}</td>"
            f"<td>{_headline_number(g)}</td><td>{_verdict_words(r.verdicts)}</td>"
            f"<td>{html.escape(r.flips)}</td><td>{fig_cell}</td></tr>")
    out.append("</tbody></table>")
    shown = []
    for study, fig, caption in HEADLINE_FIGURES:
        p = StudyPaths(study, profile, staged=False).figure(fig)
        if study in studies and p.exists():
            shown.append(f'<figure><img src="{os.path.relpath(p, here)}" alt="{html.escape(fig)}">'
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    if shown:
        out.append("<h2>Headline figures</h2>" + "".join(shown))
    if scales:
        out.append("<h2>Scale of each study</h2><ul>" + "".join(
            f'<li><a href="{s}.html">{html.escape(s)}</a>: {html.escape(x)}</li>' for s, x in scales.items())
            + "</ul>")
    return _page(f"headprune: {profile} findings", _nav(profile, studies), "\n".join(out)), len(t)


_PROFILE_WORDS = {
    "quick": "the one-hour demonstration on a CPU (small training sets, three seeds): most claims are not testable "
             "at this scale, by rule",
    "standard": "the findings' run (five seeds, whole dev sets); its models were fine-tuned for 3 epochs, most still "
                "improving, so under the convergence rule its claims about fine-tuned models are not testable until "
                "standard-next (retrained to the plateau) replaces it",
    "standard-next": "the standard profile retrained to convergence (every fine-tuning to the plateau of its held-out "
                     "score), computed slice by slice: it replaces standard when complete",
    "paper": "bert-base on GPUs, the papers' scale",
}


def _read_verdicts(name: str, profile: str) -> pd.DataFrame:
    v = read_verdicts(name, profile)
    return pd.DataFrame() if v is None else v


def headline_findings(profile: str, per_study: int = 3) -> list[str]:
    """The headline findings of ``profile``, one HTML item per study with a verdict table (in study order): its
    scale, how many claims have a decided row, and up to ``per_study`` claims with the row that carries each one's
    verdict (:func:`summary.verdict_row`: decided claims first), effect [interval] and unit; all from the committed
    verdict tables."""
    items = []
    for i, name in enumerate(STUDIES, 1):
        v = _read_verdicts(name, profile)
        if v.empty:
            continue
        prim = v[v["analysis"] == "primary"] if "analysis" in v.columns else v
        picked = []
        for cid, g in prim.groupby("claim_id", sort=False):
            r = verdict_row(g)
            if r is not None:
                picked.append((0 if r["verdict"] in claims.DECIDED else 1 if r["verdict"] == "inconclusive" else 2,
                               cid, r))
        n_claims = len(picked)
        n_decided = sum(1 for t, *_ in picked if t == 0)
        shown = sorted(picked, key=lambda x: x[0])[:per_study]
        parts = []
        for tier, cid, r in shown:
            if tier == 2:
                continue
            number = fmt_estimate(r, unit=True) if not pd.isna(r.get("effect")) else "no number"
            parts.append(f'<code>{html.escape(str(cid))}</code> <span class="v-{r["verdict"].replace(" ", "-")}">'
                         f'{html.escape(r["verdict"])}</span> on {html.escape(row_label(r))}: {html.escape(number)}')
        untestable = sum(1 for t, *_ in picked if t == 2)
        lead = (f"{n_decided} of {n_claims} claims decided" if n_decided else
                f"none of {n_claims} claims decided")
        text = lead + (": " if parts else ".") + "; ".join(parts) + ("." if parts else "")
        if untestable:
            text += f" {untestable} not testable at this scale (reasons on the page)."
        scale = str(prim["scale"].iloc[0]) if "scale" in prim.columns and len(prim) else ""
        items.append(f'<li><a href="{profile}/{name}.html"><b>Study {i}, {html.escape(name.replace("_", " "))}</b></a>: '
                     f"{text}<br><span class=\"study-scale\">Scale ({html.escape(profile)}): {html.escape(scale)}"
                     "</span></li>")
    return items


def _home_page(built: dict[str, int]) -> str:
    items, findings = [], []
    for profile, n in built.items():
        t = claim_rows(profile)
        counts = pd.Series([w for v in t["verdicts"] for w in verdict_words(v)]).value_counts()
        words = ", ".join(f"{w} {int(counts.get(w, 0))}" for w in claims.VERDICTS)
        items.append(f'<li><a href="{profile}/index.html"><b>{html.escape(profile)}</b></a> — '
                     f"{html.escape(_PROFILE_WORDS.get(profile, 'a run of every study'))}: {n} claims in "
                     f"{t['study'].nunique()} studies; claims with at least one row of each verdict: {words}.</li>")
        found = headline_findings(profile)
        if found:
            findings.append(f'<h2>What the {html.escape(profile)} run found</h2>'
                            f'<p class="scale">{html.escape(_PROFILE_WORDS.get(profile, "a run of every study"))}. '
                            "A small-scale test of the papers' claims, not their set-up: no number is a "
                            "reproduction of a paper's table.</p>"
                            f'<ul class="headline">{"".join(found)}</ul>')
    body = ("<h1>headprune: attention-head pruning, reproduced and tested</h1>"
            "<p>Seven studies of three papers (Budhraja et al. 2020, Voita et al. 2019, Bian et al. 2021; and "
            "Michel et al. 2019 where they rely on it). Each profile is one batch run of every study; its page "
            "has the cross-study findings table, and each study's page begins with what that study found.</p>"
            "<ul>" + "".join(items) + "</ul>"
            + (f'<p class="units">{html.escape(UNITS_NOTE)}</p>' if findings else "")
            + "".join(findings) +
            "<p>Rebuild with <code>make report</code>; rerun the studies with <code>make run</code>.</p>")
    return _page("headprune report", '<a href="index.html">headprune report</a>', body)


def profiles_with_outputs() -> list[str]:
    """The named profiles (``params/<name>.yaml``) for which at least one study has an executed notebook (or a verdict
    table, so that one without its notebook is named by :func:`build_report`), standard
    and quick first; ``smoke`` (the tests' scale, not committed) and ``custom-*`` runs only when asked for."""
    found = {p.parent.name for name in STUDIES for p in (outputs_root() / name).glob(f"*/{name}.ipynb")}
    found |= {p.parent.parent.name for name in STUDIES for p in (outputs_root() / name).glob("*/tables/verdicts.csv")}
    found = {p for p in found if p != "smoke" and not p.startswith("custom-") and profile_name_problem(p) is None}
    order = ["standard", "quick", "paper", "smoke"]
    return sorted(found, key=lambda p: (order.index(p) if p in order else len(order), p))


def _home_profiles(built: dict[str, int], root: Path) -> dict[str, int]:
    """``{profile: claims}`` of the home page: every named profile with executed notebooks whose site is under
    ``root`` (:func:`profiles_with_outputs`: standard first), whichever run built it, so a run of one profile never
    hides the others; a smoke or custom run's site is listed only when no named profile's is there (a test's or a
    sandbox's report)."""
    named = [p for p in profiles_with_outputs() if p in built or (root / p / "index.html").exists()]
    if not named:
        return dict(built)
    out = {}
    for p in named:
        if p in built:
            out[p] = built[p]
        else:
            studies = [n for n in STUDIES if StudyPaths(n, p, staged=False).notebook.exists()]
            out[p] = _index_page(p, studies, root / p)[1]
    return out


def build_report(profiles: list[str] | None = None, quiet: bool = False, root: Path | None = None) -> Path:
    """Write the site for ``profiles`` (default: :func:`profiles_with_outputs`) under ``root`` (default
    ``outputs/report/``); returns the home page. Raises ``ValueError`` if a formula does not convert."""
    t0 = time.perf_counter()
    if not outputs_root().is_dir():
        raise ValueError(f"the outputs root {shown_path(outputs_root())} does not exist (HEADPRUNE_OUTPUT_DIR?)")
    profiles = profiles or profiles_with_outputs()
    if not profiles:
        raise ValueError(f"no profile has executed notebooks under {shown_path(outputs_root())} (run `make run` first)")
    for profile in profiles:
        problems = study_output_problems(profile)
        if problems:
            raise ValueError("; ".join(problems))
    root = Path(root) if root is not None else report_dir()
    built: dict[str, int] = {}
    failures: list[str] = []
    for profile in profiles:
        studies = [n for n in STUDIES if StudyPaths(n, profile, staged=False).notebook.exists()]
        if not studies:
            raise ValueError(f"--profile {profile!r}: no executed notebook under outputs/*/{profile}/ "
                             f"(run `make run PROFILE={profile}` first)")
        out = root / profile
        out.mkdir(parents=True, exist_ok=True)
        for name in studies:
            body, bad = render_study(name, profile)
            failures += [f"{name}: {b}" for b in bad]
            nb_rel = os.path.relpath(StudyPaths(name, profile, staged=False).notebook, out)
            head = (f'<p class="scale">Rendered from <a href="{nb_rel}">the executed notebook</a> '
                    f"(profile <code>{html.escape(profile)}</code>; the code is in the notebook).</p>")
            body = body.replace("</h1>\n", "</h1>\n" + head, 1)
            atomic_write_text(out / f"{name}.html", _page(f"headprune: {name} ({profile})",
                                                         _nav(profile, studies, name), body))
        page, n = _index_page(profile, studies, out)
        atomic_write_text(out / "index.html", page)
        built[profile] = n
    home = _home_profiles(built, root)
    page = _home_page(home)
    if not (root / "index.html").exists() or (root / "index.html").read_text(encoding="utf-8") != page:
        atomic_write_text(root / "index.html", page)
    if failures:
        raise ValueError("formulas that did not convert to MathML:\n" + "\n".join(failures))
    if not quiet:
        print(f"report: {shown_path(root / 'index.html')} ({', '.join(f'{p}: {n} claims' for p, n in built.items())}"
              f"; {time.perf_counter() - t0:.0f} s)")
    return root / "index.html"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m headprune_utils.run.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", action="append", help="a profile to build (repeatable; default: every profile "
                    "with executed notebooks)")
    args = ap.parse_args(argv)
    try:
        build_report(args.profile)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write {exc.filename or report_dir()}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
