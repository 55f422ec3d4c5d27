"""The cross-study summary: every claim of every study, its paper, what this run measured and its verdicts, in
one Markdown table (``outputs/SUMMARY.md`` for the quick profile, ``outputs/SUMMARY-<profile>.md`` otherwise),
built from the studies' ``tables/verdicts.csv`` with no hand work.

One row per claim: the primary analysis (the claim's own paper's semantics) counted by verdict word, the
decided rows spelled out (task, setting, effect with its interval), whether any verdict flips with the ablation
semantics (``tables/semantics_dependence.csv``), the scale, and a link to the executed notebook. Never a NaN: a
missing number reads ``n/a``.

    python -m headprune_utils.summary [--profile quick]
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

from . import claims
from .paths import StudyPaths, outputs_root
from .results import atomic_write_text
from .studies import STUDIES

__all__ = ["claim_rows", "summary_markdown", "write_summary", "summary_path"]

DECIDED = ("supported", "not supported", "contradicted")


def summary_path(profile: str) -> Path:
    return outputs_root() / ("SUMMARY.md" if profile == "quick" else f"SUMMARY-{profile}.md")


def _fmt(x) -> str:
    return "n/a" if x is None or pd.isna(x) else f"{x:+.3g}"


def _where(task, setting) -> str:
    """``"task, setting"`` without the parts that are empty (a missing setting reads nothing, never "nan")."""
    return ", ".join(str(x) for x in (task, setting) if isinstance(x, str) and x.strip())


def claim_rows(profile: str) -> pd.DataFrame:
    """One row per claim of every study with a verdict table under ``profile`` (columns: study, claim_id, paper,
    claim, semantics, verdicts, decided, flips, scale, notebook)."""
    rows = []
    for name, study in STUDIES.items():
        paths = StudyPaths(name, profile, staged=False)
        f = paths.tables / "verdicts.csv"
        if not f.exists():
            continue
        v = pd.read_csv(f, keep_default_na=False, na_values=[""])
        dep_f = paths.tables / "semantics_dependence.csv"
        dep = pd.read_csv(dep_f) if dep_f.exists() else pd.DataFrame(columns=["claim_id", "depends", "note"])
        prim = v[v["analysis"] == "primary"] if "analysis" in v.columns else v
        for cid, g in prim.groupby("claim_id", sort=False):
            counts = g["verdict"].value_counts()
            verdicts = ", ".join(f"{int(counts[w])} {w}" for w in claims.VERDICTS if w in counts)
            decided = "; ".join(
                f"{_where(r.task, r.setting)}: **{r.verdict}** ({_fmt(r.effect)} [{_fmt(r.ci_low)}, {_fmt(r.ci_high)}])"
                for r in g.itertuples() if r.verdict in DECIDED)
            d = dep[dep["claim_id"] == cid]
            flips = "; ".join(f"{r.task}: {r.note}" for r in d.itertuples() if r.depends in ("flips", "yes"))
            sem = str(g["semantics"].iloc[0]) if str(g["semantics"].iloc[0]) not in ("", "nan") else "none (no head masked)"
            rows.append({"study": name, "claim_id": cid, "paper": g["paper"].iloc[0], "claim": g["claim"].iloc[0],
                         "semantics": sem, "verdicts": verdicts, "decided": decided or "none",
                         "flips": flips or "no", "scale": g["scale"].iloc[0],
                         "notebook": os.path.relpath(paths.dir / f"{name}.ipynb", outputs_root())})
    return pd.DataFrame(rows)


def summary_markdown(profile: str) -> str:
    """The summary page (Markdown)."""
    t = claim_rows(profile)
    head = [f"# What the {profile} run found", "",
            f"Every claim the studies test, from their `tables/verdicts.csv` (profile `{profile}`; built by "
            "`python -m headprune_utils.summary`). Verdicts of the primary analysis (each claim under its own paper's "
            "ablation semantics), counted per word; the decided rows spelled out as task, setting: verdict (effect "
            "[interval]); whether a verdict flips under another semantics. The unit of replication is an "
            "independently trained model; the rules are in `headprune_utils/claims.py`.", ""]
    if t.empty:
        return "\n".join(head + ["No study has a verdict table for this profile yet."]) + "\n"
    scales = t.groupby("study")["scale"].first()
    lines = ["| study | claim | paper | semantics | verdicts (primary) | decided | flips with the semantics |",
             "|---|---|---|---|---|---|---|"]
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    for r in t.itertuples():
        lines.append(f"| [{r.study}]({r.notebook}) | `{r.claim_id}`: {esc(r.claim)} | {esc(r.paper)} | {r.semantics} | "
                     f"{r.verdicts} | {esc(r.decided)} | {esc(r.flips)} |")
    counts = pd.Series([w for v in t["verdicts"] for w in claims.VERDICTS if w in v]).value_counts()
    scale = ["", "**Scale of each study** (say which before quoting a number):", ""] + \
        [f"- {s}: {esc(x)}" for s, x in scales.items()]
    total = [f"{len(t)} claims in {t['study'].nunique()} studies; claims with at least one row of each word: "
             + ", ".join(f"{w} {int(counts.get(w, 0))}" for w in claims.VERDICTS) + ".", ""]
    return "\n".join(head + total + lines + scale) + "\n"


def write_summary(profile: str = "quick") -> Path:
    path = summary_path(profile)
    atomic_write_text(path, summary_markdown(profile))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m headprune_utils.summary", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="quick")
    args = ap.parse_args(argv)
    print(f"wrote {os.path.relpath(write_summary(args.profile))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
