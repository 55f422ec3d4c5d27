"""The cross-study summary: every claim of every study, its paper, what this run measured and its verdicts, in
one Markdown table (``outputs/SUMMARY.md`` for the quick profile, ``outputs/SUMMARY-<profile>.md`` otherwise),
built from the studies' ``tables/verdicts.csv`` with no hand work.

One row per claim: the primary analysis (the claim's own paper's semantics) counted by verdict word, the
decided rows spelled out (task, setting, effect with its interval), whether any verdict flips with the ablation
semantics (``tables/semantics_dependence.csv``), the scale, and a link to the executed notebook. Never a NaN: a
missing number reads ``n/a``.

    python -m headprune_utils.run.summary [--profile quick]
    python -m headprune_utils.run.summary --profile standard-next --changes-from standard   # verdicts that moved
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

import pandas as pd

from headprune_utils.analysis import claims
from headprune_utils.run.options import Once, Parser
from headprune_utils.store.paths import INTERIM_FILE, StudyPaths, outputs_root, shown_path
from headprune_utils.store.results import atomic_write_text
from headprune_utils.studies import STUDIES

__all__ = ["verdict_words", "claim_rows", "quick_verdicts", "fmt_number", "fmt_estimate", "where_label", "summary_markdown", "write_summary", "summary_path", "study_findings_markdown", "interim_note", "read_verdicts",
           "inject_findings", "FINDINGS_TAG", "study_output_problems", "effect_unit", "pool_label",
           "row_label", "verdict_row", "UNITS_NOTE", "verdict_changes",
           "profile_verdicts", "changes_markdown"]

DECIDED = claims.DECIDED
# the cell tag of the "What this study found" summary at the top of an executed notebook
FINDINGS_TAG = "findings-summary"


def summary_path(profile: str) -> Path:
    return outputs_root() / ("SUMMARY.md" if profile == "quick" else f"SUMMARY-{profile}.md")


def fmt_number(x) -> str:
    return "n/a" if x is None or pd.isna(x) else f"{x:+.3g}"


def fmt_estimate(row, unit: bool = False) -> str:
    """A verdict row's estimate and interval as text: ``"+1.2 [+0.4, +2]"`` for an effect; for an existence claim
    (``claims.Presence``, test label ``presence ...``) the share of units with the role, unsigned, with its count:
    ``"share 0 of 2 units = 0 [0, 0.842]"`` (a share is not an effect with a sign); the one pre-trained model's
    described row (no test, no interval: its effect is a count), ``"9 heads with the role in the one model
    (described, not tested)"``. ``unit``: followed by the
    effect's unit (:func:`effect_unit`), ``"+0.0268 [+0.0233, +0.0304] accuracy"``."""
    text = _fmt_estimate(row)
    if unit and not text.startswith("share ") and "(described, not tested)" not in text:
        u = effect_unit(row)
        text = f"{text} {u}" if u else text
    return text


def below_margin(row) -> str:
    """``"; above 0, below the smallest effect of interest (0.0332)"`` for a ``supported`` superiority row whose
    effect is under its margin: the decision rule gives ``supported`` when the effect is shown above 0 and not shown
    below the margin (``claims``), so such a row is a difference shown to exist, not one shown to matter; "" for
    every other row."""
    get = row.get if isinstance(row, dict) else (lambda k, d=None: getattr(row, k, d))
    effect, margin = pd.to_numeric(get("effect"), errors="coerce"), pd.to_numeric(get("margin"), errors="coerce")
    if get("verdict") != "supported" or not str(get("test", "") or "").startswith("superiority") \
            or pd.isna(effect) or pd.isna(margin) or margin <= 0 or abs(effect) >= margin:
        return ""
    return f"; above 0, below the smallest effect of interest ({float(margin):.3g})"


def _fmt_estimate(row) -> str:
    get = row.get if isinstance(row, dict) else (lambda k, d=None: getattr(row, k, d))
    test, n = str(get("test", "") or ""), get("n_units")
    if test.startswith("presence") and not pd.isna(get("effect")) and pd.isna(get("ci_low")) \
            and pd.isna(get("ci_high")) and str(get("tests", "") or "[]") == "[]":
        # the one pre-trained model's row, described and never tested: its effect is the count of the role's heads
        return f"{float(get('effect')):g} heads with the role in the one model (described, not tested)"
    if test.startswith("presence") and n is not None and not pd.isna(n) and not pd.isna(get("effect")):
        n = int(n)
        k = int(round(float(get("effect")) * n))
        u = lambda x: "n/a" if x is None or pd.isna(x) else f"{float(x):.3g}"
        return f"share {k} of {n} units = {u(get('effect'))} [{u(get('ci_low'))}, {u(get('ci_high'))}]"
    return f"{fmt_number(get('effect'))} [{fmt_number(get('ci_low'))}, {fmt_number(get('ci_high'))}]"


def verdict_words(counted: str) -> list[str]:
    """The verdict words of a ``"2 supported, 1 not supported"`` text, each once (exact words: "not supported" is
    not "supported")."""
    words = []
    for part in str(counted).split(","):
        match = re.fullmatch(r"\s*\d+ (.+?)\s*", part)
        if match and match.group(1) in claims.VERDICTS and match.group(1) not in words:
            words.append(match.group(1))
    return words


def where_label(task, setting) -> str:
    """``"task, setting"`` without the parts that are empty (a missing setting reads nothing, never "nan")."""
    return ", ".join(str(x) for x in (task, setting) if isinstance(x, str) and x.strip())


# how a reader is told what the units mean (the report's findings page and the summary pages)
UNITS_NOTE = ("Units: a GLUE task's own metric (MCC, accuracy, Pearson r) on its 0-1 scale (+0.027 accuracy = "
              "+2.7 points); \"share of headroom\": a pooled row's effect, each task's effect divided by its "
              "(full - chance) before pooling; \"share of the ceiling\": a pooled row of study 4, each task's "
              "effect divided by its attenuation ceiling; BLEU in BLEU points (0-100); other measures as named.")

# a GLUE task's verdict metric (tasks.data.TaskSpec.verdict_metric) as a reader knows it
_METRIC_WORDS = {"matthews": "MCC", "accuracy": "accuracy", "pearson": "Pearson r", "spearman": "Spearman r",
                 "f1": "F1"}
# the unit of a verdict row's effect, from the measure its test label names (claims._label: "... tests on <measure>;
# alpha=..."): the first pattern that matches; None: the task's own metric
_EFFECT_UNITS = (
    (re.compile(r"/ \(full - chance\)$"), "share of headroom"),
    (re.compile(r"/ the (attenuation|split-half) ceiling$"), "share of the ceiling"),  # split-half: before 2026-12-06
    (re.compile(r"BLEU"), "BLEU"),
    (re.compile(r"^(mean )?score\("), None),
    (re.compile(r"^share kept"), "share of heads"),
    (re.compile(r"P\(random mask keeps one\)"), "probability"),
    (re.compile(r"AUC - 0\.5"), "AUC - 0.5"),
    (re.compile(r"^Spearman"), "Spearman rho"),
    (re.compile(r"Mantel r"), "Mantel r"),
    (re.compile(r"^silhouette"), "silhouette"),
    (re.compile(r"Gini"), "Gini"),
    (re.compile(r"^excess sd"), "sd of importance"),
    (re.compile(r"log\("), "log ratio"),
    (re.compile(r"^slope"), "distance per unit of dropout"),
)
_MEASURE = re.compile(r" tests on (.+?); alpha=")


def _task_metric(task: str) -> str | None:
    from headprune_utils.tasks.data import TASKS

    spec = TASKS.get(str(task).strip())
    return None if spec is None else _METRIC_WORDS.get(spec.verdict_metric, spec.verdict_metric)


def effect_unit(row) -> str:
    """The unit of a verdict row's effect, in words: ``"accuracy"``, ``"MCC"``, ``"Pearson r"`` (a GLUE task's
    metric, 0-1 scale), ``"share of headroom"`` (a pooled row: effects divided by (full - chance) per task),
    ``"BLEU"``, or the measure's own (``"Spearman rho"``, ``"Mantel r"``, ...), read from the measure its ``test``
    label names; ``"share of units"`` for an existence claim; ``""`` where the label names no measure. A score
    difference on a task that is not a GLUE task reads ``"task metric"``."""
    get = row.get if isinstance(row, dict) else (lambda k, d=None: getattr(row, k, d))
    test = str(get("test", "") or "")
    if test.startswith("presence"):
        return "share of units"
    m = _MEASURE.search(test)
    if not m:
        return ""
    measure = m.group(1).strip()
    for pattern, unit in _EFFECT_UNITS:
        if pattern.search(measure):
            return unit if unit is not None else (_task_metric(get("task", "")) or "task metric")
    return f"units of {measure}"


_NOT_POOLED = re.compile(r"fewer than 2 tasks testable for pooling \(testable: ([^)]*)\)")


def pool_label(task, verdict="", reason="") -> str:
    """A row's task as a reader should read it: a pooled row (``"all (t1, t2)"``) names the tasks actually in the
    pool, ``"pooled: t1, t2"``; a pool that could not be formed (too few testable tasks) says so,
    ``"no pool (of t1, t2; testable: t2)"``, never listing a left-out task as pooled. Other tasks as they are."""
    text = str(task) if isinstance(task, str) else ""
    tasks = claims.pool_tasks(text)
    if tasks is None:
        return text
    why = _NOT_POOLED.search(str(reason or "")) if verdict == "not testable" else None
    if why:
        return f"no pool (of {', '.join(tasks)}; testable: {why.group(1)})"
    return f"pooled ({', '.join(tasks)})"


def row_label(row) -> str:
    """``"task, setting"`` of a verdict row with its pool named as :func:`pool_label` does."""
    get = row.get if isinstance(row, dict) else (lambda k, d=None: getattr(row, k, d))
    return where_label(pool_label(get("task"), get("verdict", ""), get("reason", "")), get("setting"))


_TIER = {"supported": 0, "not supported": 0, "contradicted": 0, "inconclusive": 1, "not testable": 2}


def verdict_row(g: pd.DataFrame):
    """The row of a claim's primary rows ``g`` that carries its verdict (the one a one-line summary shows): a
    decided row (supported, not supported, contradicted) before an inconclusive one before a not testable one;
    within a tier a pooled row first (a pool whose word is withheld last: a task decided otherwise, the tasks carry
    the verdicts), then a row with an effect, then the table's order. ``None`` when ``g`` is empty."""
    if g.empty:
        return None
    def key(item):
        pos, r = item
        pooled = claims.pool_tasks(r["task"]) is not None
        held = claims.withheld(r)
        has = "effect" in r and not pd.isna(r["effect"])
        return (_TIER.get(str(r["verdict"]), 3), held, not has, not pooled, pos)
    return min(enumerate(g.to_dict("records")), key=key)[1]


def interim_note(name: str, profile: str) -> str:
    """"" unless ``name``'s outputs under ``profile`` are an interim render (``--from-cells --where``: its tables
    carry ``interim.json``, which the render wrote beside them); then what it covers, e.g. "interim render: only
    the cells with task = SST-2 (1,033 of 3,460 planned cells); the other cells of the profile are still being
    computed"."""
    try:
        interim = json.loads((StudyPaths(name, profile, staged=False).tables / INTERIM_FILE).read_text())
    except FileNotFoundError:
        return ""
    except (OSError, ValueError):  # there, but unreadable: still an interim render's tables
        return "interim render (its record tables/interim.json cannot be read)"
    if not isinstance(interim, dict):
        return ""
    where = interim.get("where") or {}
    told = "; ".join(f"{k} = {', '.join(str(x) for x in v)}" for k, v in sorted(where.items()))
    return (f"interim render: only the cells with {told} ({interim.get('cells', 0):,} of "
            f"{interim.get('planned', 0):,} planned cells); the other cells of the profile are still being "
            "computed, so its verdicts, pooled rows and Holm families cover these cells alone")


def primary_rows(v: pd.DataFrame) -> pd.DataFrame:
    """The rows of a verdict table in its primary analysis (every row of a table that does not split them)."""
    return v[v["analysis"] == "primary"] if "analysis" in v.columns else v


VERDICT_COLUMNS = ("study", "claim_id", "verdict")
NUMBER_COLUMNS = ("effect", "ci_low", "ci_high", "n_units", "p", "p_adjusted", "margin")


def read_verdicts(name: str, profile: str) -> pd.DataFrame | None:
    """``name``'s ``tables/verdicts.csv`` under ``profile`` (None when there is none), its ``scale`` saying so
    when the outputs are an interim render (:func:`interim_note`): every page that quotes a scale quotes that.

    A table that cannot be what a render wrote is a ValueError naming the file (never shown as a finding): unreadable,
    cut off (no final newline), without rows or its key columns, rows of another study, a verdict outside
    ``claims.VERDICTS``, an infinite number, a decided row without its effect, or a ``run_meta.json`` beside it that
    names another profile."""
    paths = StudyPaths(name, profile, staged=False)
    f = paths.tables / "verdicts.csv"
    if not f.exists():
        return None
    where = shown_path(f)
    again = f"render the study again (python -m headprune_utils.run --profile {profile} --only {name})"
    raw = f.read_bytes()
    try:
        v = pd.read_csv(f, keep_default_na=False, na_values=[""])
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where} is not a readable verdict table ({exc}): {again}") from None
    problem = None
    if not raw.endswith(b"\n"):
        problem = "it is cut off (no final newline)"
    elif missing := [c for c in VERDICT_COLUMNS if c not in v.columns]:
        problem = f"it lacks the column(s) {missing}"
    elif v.empty:
        problem = "it has no rows"
    elif (other := sorted(set(v["study"].astype(str)) - {name})):
        problem = f"it holds rows of another study ({', '.join(other[:3])})"
    elif (words := sorted(set(v["verdict"].astype(str)) - set(claims.VERDICTS))):
        problem = f"verdict(s) {words} are none of {list(claims.VERDICTS)}"
    else:
        for c in NUMBER_COLUMNS:
            if c in v.columns:
                x = pd.to_numeric(v[c], errors="coerce")
                if ((x == float("inf")) | (x == float("-inf"))).any():
                    problem = f"column {c} holds an infinite number"
                    break
        if problem is None and "effect" in v.columns:
            decided = v["verdict"].isin(DECIDED) & pd.to_numeric(v["effect"], errors="coerce").isna()
            if decided.any():
                r = v[decided].iloc[0]
                problem = f"a decided row has no effect ({r['claim_id']}, {r.get('task', '')}: {r['verdict']})"
    if problem is None and paths.meta.exists():
        try:
            recorded = json.loads(paths.meta.read_text(encoding="utf-8")).get("profile")
        except (ValueError, OSError) as exc:
            raise ValueError(f"{shown_path(paths.meta)} is not readable ({exc}): {again}") from None
        if recorded is not None and recorded != profile:
            problem = f"its run_meta.json records profile {recorded!r}, not {profile!r} (outputs copied across profiles)"
    if problem is None:
        problem = _disagrees_with_metrics(v, paths.metrics, profile)
    if problem is not None:
        raise ValueError(f"{where} is not a verdict table this profile's render wrote: {problem}; {again}")
    note = interim_note(name, profile)
    if note and "scale" in v.columns:
        v["scale"] = v["scale"].astype(str) + "; " + note
    return v


def _disagrees_with_metrics(v: pd.DataFrame, metrics_file, profile: str) -> str | None:
    """Why the verdict table ``v`` is not the one its render recorded in ``metrics.json`` beside it (the same rows,
    in order: claim, task, analysis, verdict, effect to 1e-5 relative: the table's 6 digits), or None. A table copied from another profile,
    or with rows removed or edited, disagrees; a ``metrics.json`` without a ``verdicts`` list checks nothing."""
    if not metrics_file.exists():
        return None
    try:
        metrics = json.loads(metrics_file.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return None  # damaged_outputs names an unreadable metrics.json
    if metrics.get("profile") not in (None, profile):
        return f"the metrics.json beside it records profile {metrics.get('profile')!r}, not {profile!r}"
    recorded = metrics.get("verdicts")
    if not isinstance(recorded, list):
        return None
    if len(recorded) != len(v):
        return f"it has {len(v)} rows where its run's metrics.json records {len(recorded)} (rows removed or added)"
    for i, (row, want) in enumerate(zip(v.to_dict("records"), recorded)):
        for col in ("claim_id", "task", "analysis", "verdict"):
            got, exp = row.get(col), want.get(col)
            if _blank(got) and _blank(exp):
                continue
            if str(got) != str(exp):
                return (f"row {i + 1} ({row.get('claim_id')}) has {col} {got!r} where its run's metrics.json records "
                        f"{exp!r}")
        got, exp = pd.to_numeric(pd.Series([row.get("effect")]), errors="coerce").iloc[0], want.get("effect")
        exp = float("nan") if exp is None else float(exp)
        if not (math.isnan(got) and math.isnan(exp)) and not abs(got - exp) <= 1e-5 * abs(exp) + 1e-12:
            return (f"row {i + 1} ({row.get('claim_id')}) has effect {got} where its run's metrics.json records "
                    f"{exp} (a table of another run or profile)")
    return None


def _blank(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or x == ""


def _flips(dep: pd.DataFrame, verdicts: pd.DataFrame, claim_id: str) -> str:
    """The rows of ``claim_id`` whose verdict flips with the ablation semantics (``tables/semantics_dependence.csv``),
    each with its setting, and, where that setting lies outside the claim's own protocol (its rows there are a
    sensitivity analysis under every semantics: ``Claim.decided_in``), saying so: a flip there is no flip of the
    claim's primary verdict. "" when none flips."""
    d = dep[(dep["claim_id"] == claim_id) & dep["depends"].isin(("flips", "yes"))]
    if d.empty:
        return ""
    own = primary_rows(verdicts)
    own = own[own["claim_id"] == claim_id]
    primary_at = set(zip(own["task"].astype(str), own["setting"].astype(str)))
    out = []
    for r in d.itertuples():
        setting = str(getattr(r, "setting", "") or "")
        if setting in ("", "nan"):
            out.append(f"{r.task}: {r.note}")
            continue
        outside = "" if (str(r.task), setting) in primary_at else "; outside the claim's protocol: sensitivity"
        out.append(f"{r.task} ({setting}{outside}): {r.note}")
    return "; ".join(out)


def claim_rows(profile: str) -> pd.DataFrame:
    """One row per claim of every study with a verdict table under ``profile`` (columns: study, claim_id, paper,
    claim, semantics, verdicts, decided, flips, scale, notebook)."""
    rows = []
    for name, study in STUDIES.items():
        paths = StudyPaths(name, profile, staged=False)
        v = read_verdicts(name, profile)
        if v is None:
            continue
        dep_f = paths.tables / "semantics_dependence.csv"
        dep = pd.read_csv(dep_f) if dep_f.exists() else pd.DataFrame(columns=["claim_id", "depends", "note"])
        prim = primary_rows(v)
        for cid, g in prim.groupby("claim_id", sort=False):
            counts = g["verdict"].value_counts()
            verdicts = ", ".join(f"{int(counts[w])} {w}" for w in claims.VERDICTS if w in counts)
            decided = "; ".join(
                f"{row_label(r)}: **{r.verdict}** ({fmt_estimate(r, unit=True)}{below_margin(r)})"
                for r in g.itertuples() if r.verdict in DECIDED)
            shown = verdict_row(g)
            if not decided and shown is not None:
                number = f", {fmt_estimate(shown, unit=True)}" if not pd.isna(shown.get("effect")) else ""
                decided = f"none ({row_label(shown)}: {shown['verdict']}{number})"
            flips = _flips(dep, v, cid)
            sem = str(g["semantics"].iloc[0]) if str(g["semantics"].iloc[0]) not in ("", "nan") else "none (no head masked)"
            rows.append({"study": name, "claim_id": cid, "paper": g["paper"].iloc[0], "claim": g["claim"].iloc[0],
                         "semantics": sem, "verdicts": verdicts, "decided": decided or "none",
                         "flips": flips or "no", "scale": g["scale"].iloc[0],
                         "notebook": os.path.relpath(paths.dir / f"{name}.ipynb", outputs_root())})
    return pd.DataFrame(rows)


def _reason_head(reason: str, limit: int = 220) -> str:
    """A reason without its parenthesised details (the numbers are in the verdict table), cut at a word boundary
    after ``limit`` characters."""
    text = reason.strip()
    while True:
        shorter = re.sub(r"\s*\([^()]*\)", "", text)
        if shorter == text:
            break
        text = shorter
    text = text.strip().rstrip(";,.")
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0].rstrip(";,.:") + " …"
    return text


def _reasons(g: pd.DataFrame, words: tuple[str, ...], limit: int = 3) -> str:
    """The distinct reasons of the rows with a verdict in ``words`` (:func:`_reason_head`); rows whose reasons
    differ only in the task they name are said once, with their tasks joined; at most ``limit`` of them."""
    heads: dict[str, list[str]] = {}
    for r in g.itertuples():
        if r.verdict not in words or not isinstance(r.reason, str) or not r.reason.strip():
            continue
        head = _reason_head(r.reason)
        task = str(r.task) if isinstance(r.task, str) and r.task and r.task in head else ""
        key = head.replace(task, "{T}") if task else head
        tasks = heads.setdefault(key, [])
        if task and task not in tasks:
            tasks.append(task)
    shown = [k.replace("{T}", ", ".join(t)) for k, t in list(heads.items())[:limit]]
    more = f" (and {len(heads) - limit} more)" if len(heads) > limit else ""
    return "; ".join(shown) + more


def study_findings_markdown(name: str, profile: str, verdicts: pd.DataFrame | None = None) -> str:
    """"What this study found": one bullet per claim of the study's primary analysis (verdicts counted per word,
    the decided rows with their effect and interval, why the others are not decided, whether a verdict flips
    with the ablation semantics), from ``tables/verdicts.csv`` (or ``verdicts``). Markdown, with an anchor
    ``claim-<claim_id>`` per claim for the report's links; "" when the study has no verdict table."""
    paths = StudyPaths(name, profile, staged=False)
    if verdicts is None:
        verdicts = read_verdicts(name, profile)
        if verdicts is None:
            return ""
    if verdicts.empty:
        return ""
    dep_f = paths.tables / "semantics_dependence.csv"
    dep = pd.read_csv(dep_f) if dep_f.exists() else pd.DataFrame(columns=["claim_id", "task", "depends", "note"])
    v = primary_rows(verdicts)
    scale = str(v["scale"].iloc[0]) if "scale" in v.columns and len(v) else ""
    note = interim_note(name, profile)
    scale = scale.replace(f"; {note}", "") if note else scale  # said once, in bold, below
    lines = ["## What this study found", "",
             f"*Profile `{profile}`" + (f": {scale}" if scale else "") + ".* From this run's verdict table (the "
             "last section, with every row's test and reason). Each claim is tested under its own paper's ablation "
             "semantics; the unit of replication is an independently trained model. " + UNITS_NOTE, ""]
    if note:
        lines[2:2] = [f"**{note[:1].upper()}{note[1:]}.**", ""]
    for cid, g in v.groupby("claim_id", sort=False):
        counts = g["verdict"].value_counts()
        words = ", ".join(f"{int(counts[w])} {w}" for w in claims.VERDICTS if w in counts)
        sem = str(g["semantics"].iloc[0]) if "semantics" in g.columns else ""
        sem = f"under `{sem}`" if sem not in ("", "nan") else "no head masked"
        lines.append(f'- <a id="claim-{cid}"></a>**`{cid}`** ({g["paper"].iloc[0]}; {sem}): {g["claim"].iloc[0]} '
                     f"Verdicts: **{words}**.")
        for r in g.itertuples():
            if r.verdict in DECIDED:
                lines.append(f"  - {row_label(r)}: **{r.verdict}**, {fmt_estimate(r, unit=True)}{below_margin(r)}")
        shown = verdict_row(g)
        if not any(g["verdict"].isin(DECIDED)) and shown is not None and shown["verdict"] == "inconclusive" \
                and not pd.isna(shown.get("effect")):
            lines.append(f"  - nearest to a verdict: {row_label(shown)}, {fmt_estimate(shown, unit=True)}")
        why = _reasons(g, ("not testable",))
        if why:
            lines.append(f"  - not testable because: {why}")
        flips = _flips(dep, verdicts, cid)
        if flips:
            lines.append(f"  - **the verdict flips with the ablation semantics**: {flips}")
    return "\n".join(lines) + "\n"


def inject_findings(nb, markdown: str) -> bool:
    """Put ``markdown`` as the notebook's findings cell (tag :data:`FINDINGS_TAG`) right after its title cell,
    replacing an earlier one; with an empty ``markdown`` any earlier one is removed. Returns whether ``nb``
    changed. ``nb``: an ``nbformat`` notebook node, changed in place."""
    import nbformat

    old = [i for i, c in enumerate(nb.cells) if FINDINGS_TAG in c.get("metadata", {}).get("tags", [])]
    if old and markdown and nb.cells[old[0]].source == markdown and len(old) == 1:
        return False
    for i in reversed(old):
        del nb.cells[i]
    if markdown:
        cell = nbformat.v4.new_markdown_cell(markdown, metadata={"tags": [FINDINGS_TAG]})
        cell.pop("id", None) if nb.nbformat_minor < 5 else None
        at = 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0
        nb.cells.insert(at, cell)
    return bool(old) or bool(markdown)


def quick_verdicts(rows: pd.DataFrame) -> dict[tuple[str, str], str]:
    """``{(study, claim_id): text}`` for each of ``rows`` (another profile's :func:`claim_rows`): the quick
    (demonstration) run's primary verdicts of that claim, ``"same"`` when they are the same counts, ``"no verdict
    table"`` where the quick run has none."""
    q = claim_rows("quick")
    q = {(r.study, r.claim_id): r.verdicts for r in q.itertuples()} if not q.empty else {}
    out = {}
    for r in rows.itertuples():
        theirs = q.get((r.study, r.claim_id))
        out[(r.study, r.claim_id)] = "no verdict table" if theirs is None else "same" if theirs == r.verdicts else theirs
    return out


def summary_markdown(profile: str) -> str:
    """The summary page (Markdown)."""
    t = claim_rows(profile)
    head = [f"# What the {profile} run found", "",
            f"Every claim the studies test, from their `tables/verdicts.csv` (profile `{profile}`; built by "
            "`python -m headprune_utils.run.summary`). Verdicts of the primary analysis (each claim under its own paper's "
            "ablation semantics), counted per word; the decided rows spelled out as task, setting: verdict (effect "
            "[interval] unit; a claim with no decided row: the row nearest to a verdict); whether a verdict flips "
            "under another semantics. The unit of replication is an independently trained model; the rules are in "
            "`headprune_utils/analysis/claims.py`. " + UNITS_NOTE
            + ("" if profile == "quick" else " The last column: the quick (demonstration) run's primary verdicts of "
               "the same claim, for comparison (\"same\": the same counts)."), ""]
    interim = [f"- {name}: {interim_note(name, profile)}" for name in STUDIES if interim_note(name, profile)]
    if interim:
        head += ["**Interim renders.** These studies' pages show part of the profile (the rest is still being "
                 "computed); their verdicts cover only the cells named:", "", *interim, ""]
    if t.empty:
        return "\n".join(head + ["No study has a verdict table for this profile yet."]) + "\n"
    scales = t.groupby("study")["scale"].first()
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    quick = quick_verdicts(t) if profile != "quick" else None
    extra = " the quick run (demonstration) |" if quick is not None else ""
    lines = ["| study | claim | paper | semantics | verdicts (primary) | decided | flips with the semantics |" + extra,
             "|---|---|---|---|---|---|---|" + ("---|" if quick is not None else "")]
    for r in t.itertuples():
        line = (f"| [{r.study}]({r.notebook}) | `{r.claim_id}`: {esc(r.claim)} | {esc(r.paper)} | {r.semantics} | "
                f"{r.verdicts} | {esc(r.decided)} | {esc(r.flips)} |")
        if quick is not None:
            line += f" {esc(quick[(r.study, r.claim_id)])} |"
        lines.append(line)
    counts = pd.Series([w for v in t["verdicts"] for w in verdict_words(v)]).value_counts()
    scale = ["", "**Scale of each study** (say which before quoting a number):", ""] + \
        [f"- {s}: {esc(x)}" for s, x in scales.items()]
    total = [f"{len(t)} claims in {t['study'].nunique()} studies; claims with at least one row of each word: "
             + ", ".join(f"{w} {int(counts.get(w, 0))}" for w in claims.VERDICTS) + ".", ""]
    return "\n".join(head + total + lines + scale) + "\n"


def _strict_json(text: str):
    """``json.loads`` that refuses NaN and infinities (Python's json reads them: they are not JSON)."""
    def refuse(token):
        raise ValueError(f"{token} is not a number JSON has")
    return json.loads(text, parse_constant=refuse)


def study_output_problems(profile: str) -> list[str]:
    """Studies of ``profile`` whose outputs are incomplete or damaged: a verdict table without the executed notebook
    it came from, or the reverse; a study without its ``run_meta.json`` (the record of the run), or with a
    ``run_meta.json`` or ``metrics.json`` that is not JSON or holds NaN or an infinity."""
    out = []
    for name in STUDIES:
        paths = StudyPaths(name, profile, staged=False)
        table, nb = (paths.tables / "verdicts.csv").exists(), paths.notebook.exists()
        if table and not nb:
            out.append(f"{shown_path(paths.tables / 'verdicts.csv')} has no executed notebook beside it "
                       f"({shown_path(paths.notebook)})")
        elif nb and not table:
            out.append(f"{shown_path(paths.notebook)} has no verdict table ({shown_path(paths.tables / 'verdicts.csv')})")
        if not (table or nb):
            continue
        if not paths.meta.exists():
            out.append(f"{shown_path(paths.meta)} is missing (the record of the run that made {name}'s outputs)")
        for f in (paths.meta, paths.out / "metrics.json"):
            if f.exists():
                try:
                    _strict_json(f.read_text(encoding="utf-8"))
                except (ValueError, UnicodeDecodeError) as exc:
                    out.append(f"{shown_path(f)} is damaged ({exc})")
    if out:
        out[-1] += f" -- render the study again (python -m headprune_utils.run --profile {profile} --only STUDY)"
    return out


def write_summary(profile: str = "quick") -> Path:
    """Write :func:`summary_markdown` of ``profile`` (atomically). ValueError, before anything is written, when no
    study of ``profile`` has outputs or one study's are incomplete or damaged (:func:`read_verdicts`)."""
    from headprune_utils.run.profiles import unknown_profile

    unknown = unknown_profile(profile)
    if unknown and not any(StudyPaths(n, profile, staged=False).notebook.exists() for n in STUDIES):
        raise ValueError(unknown)
    problems = study_output_problems(profile)
    if problems:
        raise ValueError("; ".join(problems))
    if not any(StudyPaths(n, profile, staged=False).notebook.exists() for n in STUDIES):
        raise ValueError(f"profile {profile!r}: no study has outputs under {shown_path(outputs_root())}/*/{profile}/ "
                         f"(run `make run PROFILE={profile}` first)")
    path = summary_path(profile)
    atomic_write_text(path, summary_markdown(profile))
    return path


CHANGE_KEYS = ["study", "claim_id", "task", "setting", "semantics"]
CHANGE_COLUMNS = [*CHANGE_KEYS, "verdict_old", "verdict_new", "effect_old", "effect_new", "reason_new"]


def verdict_changes(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """The primary rows whose verdict differs between two verdict tables (two profiles, or one before and after a
    re-render; each with a ``study`` column), matched by study, claim, task, setting and semantics
    (:data:`CHANGE_COLUMNS`; ``reason_new``: why the new row is what it is). Only the (study, task) pairs both
    tables measure are compared (an interim render's other tasks are not "gone"); within them a row on one side
    only reads ``absent`` on the other. Sorted by study, claim, task and setting."""
    def prim(v: pd.DataFrame) -> pd.DataFrame:
        v = primary_rows(v)
        v = v.assign(**{k: v[k].astype("string").fillna("").astype(str) for k in CHANGE_KEYS})
        dup = v.duplicated(CHANGE_KEYS, keep=False)
        if dup.any():
            raise ValueError(f"two primary rows of one claim, task, setting and semantics: "
                             f"{v.loc[dup, CHANGE_KEYS].iloc[0].to_dict()}")
        return v
    a, b = prim(old), prim(new)
    both = compared_pairs(a, b)
    # .loc: an empty table keeps its columns (v[[]] would select no column)
    keep = lambda v: v.loc[[(s, t) in both for s, t in zip(v["study"], v["task"])]]  # noqa: E731
    m = keep(a).merge(keep(b), on=CHANGE_KEYS, how="outer", suffixes=("_old", "_new"))
    for side in ("old", "new"):
        m[f"verdict_{side}"] = m[f"verdict_{side}"].fillna("absent")
    m = m[m["verdict_old"] != m["verdict_new"]]
    if "reason_new" not in m.columns:
        m["reason_new"] = ""
    m["reason_new"] = m["reason_new"].fillna("")
    return m[CHANGE_COLUMNS].sort_values(CHANGE_KEYS[:4], kind="stable").reset_index(drop=True)


def compared_pairs(old: pd.DataFrame, new: pd.DataFrame) -> set[tuple[str, str]]:
    """The (study, task) pairs both verdict tables measure (:func:`verdict_changes` compares those alone)."""
    return set(zip(old["study"].astype(str), old["task"].astype(str))) & \
        set(zip(new["study"].astype(str), new["task"].astype(str)))


def profile_verdicts(profile: str) -> pd.DataFrame:
    """Every study's verdict table under ``profile``, stacked (a ``study`` column)."""
    tables = [v.assign(study=name) for name in STUDIES if (v := read_verdicts(name, profile)) is not None]
    if not tables:
        raise FileNotFoundError(f"profile {profile!r}: no study has a verdict table (tables/verdicts.csv) under "
                                f"{os.path.relpath(outputs_root())}")
    return pd.concat(tables, ignore_index=True)


def changes_markdown(old_profile: str, new_profile: str) -> str:
    """:func:`verdict_changes` from ``old_profile`` to ``new_profile`` as a Markdown table (effects at 4 digits)."""
    tables, missing = {}, []
    for p in (old_profile, new_profile):
        try:
            tables[p] = profile_verdicts(p)
        except FileNotFoundError as exc:
            missing.append(str(exc))
    if missing:  # both named when both are missing
        raise FileNotFoundError("; ".join(missing))
    old, new = tables[old_profile], tables[new_profile]
    ch = verdict_changes(old, new)
    po, pn = primary_rows(old), primary_rows(new)
    both = compared_pairs(po, pn)
    left = lambda v: sum((str(s_), str(t)) not in both for s_, t in zip(v["study"], v["task"]))  # noqa: E731
    head = (f"Primary verdicts that differ from `{old_profile}` to `{new_profile}`: {len(ch)}, over the "
            f"{len(both)} (study, task) pairs both measure; left out, measured by one side only: {left(po)} primary "
            f"rows of `{old_profile}`, {left(pn)} of `{new_profile}` (pooled rows over other task sets among them)\n")
    interim = [f"- `{p}` {name}: {note}" for p in (old_profile, new_profile) for name in STUDIES
               if (note := interim_note(name, p))]
    if interim:
        head += ("\nAn interim render's Holm families cover its selected cells alone, so its verdicts are not those a "
                 "full render would give:\n" + "\n".join(interim) + "\n")
    if ch.empty:
        return head
    def cell(x) -> str:
        if pd.isna(x):
            return ""
        if isinstance(x, float):
            return f"{x:+.4f}"
        x = str(x).replace("|", "/")
        return x if len(x) <= 300 else x[:300].rsplit(" ", 1)[0] + " …"

    lines = ["| " + " | ".join(CHANGE_COLUMNS) + " |", "|" + "---|" * len(CHANGE_COLUMNS)]
    lines += ["| " + " | ".join(cell(r[c]) for c in CHANGE_COLUMNS) + " |" for _, r in ch.iterrows()]
    return head + "\n" + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m headprune_utils.run.summary", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", action=Once, default="quick")
    ap.add_argument("--changes-from", action=Once, metavar="PROFILE",
                    help="print the primary verdicts that differ from PROFILE's to --profile's (writes nothing)")
    args = ap.parse_args(argv)
    if args.changes_from:
        try:
            print(changes_markdown(args.changes_from, args.profile), end="")
        except (FileNotFoundError, ValueError) as exc:  # a profile without verdict tables, a bad name, a duplicate
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        path = write_summary(args.profile)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write {exc.filename or summary_path(args.profile)}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    print(f"wrote {shown_path(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
