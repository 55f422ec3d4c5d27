"""Paired contrasts between pruning strategies: ``score(a) - score(b)`` paired by setting and seed.

Pure functions over tidy tables (columns task, regime, strategy, budget, seed, score; ``mask`` for the
identical-mask checks). Studies 2 (layer locations), 5 (zero-shot pruning) and 7 (translation: ``task`` =
attention type) use them.

- :func:`paired_by_strategy`: the paired differences (optionally flagging pairs whose two masks are identical:
  two strategy names that pruned the same heads measure one thing, not two);
- :func:`identical_masks`: every group of strategies that pruned the same mask in one setting and seed;
- :func:`unit_contrast_table`: descriptive statistics with the model (task x seed) as the unit: per setting over
  seeds, and per task x regime over the models' means across budgets (t-intervals; identical-mask pairs left out).
  Studies 2 and 5 use it: several budgets of one fine-tuned model are not independent replicates;
- :func:`per_ablation`: a table function applied to the rows of each ablation semantics apart (column
  ``ablation``), so results of different semantics are never paired, pooled or compared with each other;
- :func:`contrast_table`: descriptive statistics over a unit the caller names (study 7's tables: the trained
  model, its mask seeds averaged within it first), per setting and pooled, t-intervals, no p-values. Verdicts on
  claims come from :mod:`headprune_utils.analysis.claims` alone.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from headprune_utils.analysis import stats

__all__ = ["Contrast", "LOCATION_CONTRASTS", "paired_by_strategy", "identical_masks", "unit_contrast_table", "unit_summary",
           "per_ablation", "contrast_table"]

PAIR_COLUMNS = ["task", "regime", "budget", "seed", "diff"]
SETTING = ["task", "regime", "budget", "seed"]


@dataclass(frozen=True)
class Contrast:
    """``a - b`` paired by (task, budget, seed) (study 5: ``b = "none"`` is the full model of the same task and
    seed); ``expect``: what the claim predicts of the difference."""

    name: str
    claim: str
    a: str
    b: str
    expect: Literal["equal", "greater", "not_worse"]


# Budhraja et al. 2020's location contrasts (claims 2 and 3), plus the importance ones (Michel et al. 2019).
LOCATION_CONTRASTS: tuple[Contrast, ...] = (
    Contrast("top vs bottom", "Budhraja et al. claim 3a: no preference between pruning the top or the bottom layers",
             "top", "bottom", "equal"),
    Contrast("avoid the middle", "Budhraja et al. claim 3b: pruning that avoids the middle layers (top + bottom) "
             "beats pruning the middle layers", "top_bottom", "middle", "greater"),
    Contrast("avoid consecutive layers", "Budhraja et al. claim 3c: pruning layers spread apart beats pruning "
             "the same number of consecutive layers", "spread", "consecutive", "greater"),
    Contrast("important-by-location vs random", "Budhraja et al. claim 2 (for BERT): pruning the layers earlier "
             "studies call important (the middle) is no worse than random", "middle", "random", "not_worse"),
    Contrast("most important vs random", "Weak link between importance and prunability: pruning the MOST important "
             "heads (gradient importance) is no worse than random", "most_important", "random", "not_worse"),
    Contrast("least important vs random", "Michel et al.: pruning the LEAST important heads first beats random",
             "least_important", "random", "greater"),
)


def paired_by_strategy(table: pd.DataFrame, a: str, b: str, same_mask: bool = False) -> pd.DataFrame:
    """Rows (task, regime, budget, seed, diff = score_a - score_b) where both strategies ran with the same task,
    regime, budget and seed. ``same_mask``: add a boolean column ``same_mask`` (the two strategies pruned
    identical masks there; needs the ``mask`` column)."""
    t = table[table["strategy"].isin([a, b])]
    p = t.pivot_table(index=SETTING, columns="strategy", values="score")
    if a not in p or b not in p:
        return pd.DataFrame(columns=PAIR_COLUMNS + (["same_mask"] if same_mask else []))
    p = p.dropna(subset=[a, b])
    out = (p[a] - p[b]).rename("diff").reset_index()
    if same_mask:
        masks = {(*k, s): m for *k, s, m in t[SETTING + ["strategy", "mask"]].itertuples(index=False)}
        out["same_mask"] = [masks[(*k, a)] == masks[(*k, b)] for k in out[SETTING].itertuples(index=False)]
    return out


def identical_masks(table: pd.DataFrame, keys: tuple[str, ...] = tuple(SETTING)) -> pd.DataFrame:
    """Every group of two or more strategies that pruned the same mask with the same ``keys`` (columns:
    ``keys``, ``strategies`` = the names joined by " = ", ``mask``). The reference ``"none"`` is left out."""
    t = table[table["strategy"] != "none"]
    rows = []
    for k, g in t.groupby(list(keys), sort=True):
        for mask, names in g.groupby("mask", sort=False)["strategy"]:
            if names.nunique() > 1:
                rows.append({**dict(zip(keys, k)), "strategies": " = ".join(sorted(set(names))), "mask": mask})
    return pd.DataFrame(rows, columns=[*keys, "strategies", "mask"])


def per_ablation(table: pd.DataFrame, make: Callable[[pd.DataFrame], pd.DataFrame],
                 after: str = "regime") -> pd.DataFrame:
    """``make`` applied to the rows of each ablation semantics of ``table`` apart (its ``ablation`` column, in
    order of first appearance), the results stacked with an ``ablation`` column inserted after the column
    ``after`` (first when absent). A table without an ``ablation`` column is passed to ``make`` whole. Results of
    different semantics are different interventions: never paired, pooled or compared here."""
    if "ablation" not in table.columns:
        return make(table)
    parts, columns = [], None
    for sem in dict.fromkeys(table["ablation"].astype(str)):
        part = make(table[table["ablation"].astype(str) == sem])
        cols = list(part.columns)
        part = part.copy()
        part.insert(cols.index(after) + 1 if after in cols else 0, "ablation", sem)
        columns = columns or list(part.columns)
        if not part.empty:
            parts.append(part)
    if not parts:
        out = make(table.iloc[:0])
        cols = list(out.columns)
        out.insert(cols.index(after) + 1 if after in cols else 0, "ablation", pd.Series(dtype=object))
        return out
    return pd.concat(parts, ignore_index=True).reindex(columns=columns)


def _pct(budgets) -> str:
    return ", ".join(f"{100 * float(b):g}%" for b in sorted(set(budgets)))


def unit_contrast_table(contrast_list: Iterable[Contrast], pair: Callable[[str, str], pd.DataFrame],
                        confidence: float = 0.95) -> pd.DataFrame:
    """Descriptive statistics of paired contrasts, the unit being the model (task x seed).

    ``pair(a, b)``: rows (task, regime, budget, seed, diff[, same_mask]); pairs with ``same_mask`` are left out
    (a mask is not compared with itself). Rows per task x regime x budget (over seeds: one value per model) and per
    task x regime with ``budget = "all"`` (each model's differences averaged over its budgets first, then over
    the models). Columns: contrast, a, b, expect, task, regime, budget, n_units, mean_diff, ci_low, ci_high
    (Student-t interval over the units, ``confidence``), n_same_mask (pairs left out), note. Contrasts whose
    strategies did not both run are left out, and so is a setting whose every pair was identical (its note is
    on the ``"all"`` row; with no pair left anywhere the task x regime has no row: :func:`identical_masks`
    reports it)."""
    rows = []
    for c in contrast_list:
        d = pair(c.a, c.b)
        if d.empty:
            continue
        same = d["same_mask"].astype(bool) if "same_mask" in d else pd.Series(False, index=d.index)
        for (task, regime), g in d.groupby(["task", "regime"], sort=True):
            s = same.loc[g.index]
            kept = g[~s]
            groups = [(b, gb) for b, gb in kept.groupby("budget", sort=True)]
            if not kept.empty:
                _, means = stats.unit_means(kept["diff"].to_numpy(dtype=float), kept["seed"].tolist())
                groups.append(("all", means))
            for budget, x in groups:
                x = x["diff"].to_numpy(dtype=float) if isinstance(x, pd.DataFrame) else x
                out = s if budget == "all" else s & (g["budget"] == budget)
                n_same = int(out.sum())
                mean, lo, hi = stats.t_interval(x, confidence)
                note = ""
                if n_same:
                    note = (f"{n_same} pair(s) left out: {c.a} and {c.b} pruned identical masks (budgets "
                            f"{_pct(g.loc[out, 'budget'])}; seeds {', '.join(map(str, sorted(set(g.loc[out, 'seed']))))})")
                rows.append({"contrast": c.name, "a": c.a, "b": c.b, "expect": c.expect, "task": task,
                             "regime": regime, "budget": budget, "n_units": len(x), "mean_diff": mean,
                             "ci_low": lo, "ci_high": hi, "n_same_mask": n_same, "note": note})
    return pd.DataFrame(rows, columns=["contrast", "a", "b", "expect", "task", "regime", "budget", "n_units",
                                       "mean_diff", "ci_low", "ci_high", "n_same_mask", "note"])


def contrast_table(contrast_list: Iterable[Contrast], pair: Callable[[str, str], pd.DataFrame],
                   confidence: float = 0.95, pool_per_budget: bool = False,
                   unit: Callable[[pd.DataFrame], pd.Series] = lambda d: d["seed"]) -> pd.DataFrame:
    """Descriptive statistics of paired contrasts over their units. ``pair(a, b)`` gives rows (task, regime, budget,
    seed, diff); ``unit(rows)`` names each row's unit (default its ``seed``; study 7: the trained model, whose mask
    seeds are no replicates). Each contrast is summarised per task x regime x budget, pooled over tasks per regime x
    budget when ``pool_per_budget`` (``task="all"``), and pooled over everything per regime (``task="all",
    budget="all"``): the rows of one unit averaged within it first, then the mean over the units and a Student-t
    interval (``confidence``; NaN bounds from one unit). Columns: contrast, a, b, expect, task, regime, budget,
    n_pairs, n_units, mean_diff, ci_low, ci_high. No p-value: the tests are the claims'
    (:mod:`headprune_utils.analysis.claims`). Contrasts whose strategies did not both run are left out."""
    rows = []
    for c in contrast_list:
        d = pair(c.a, c.b)
        if d.empty:
            continue
        d = d.assign(_unit=unit(d).to_numpy())
        groups = [((t, r, b), g) for (t, r, b), g in d.groupby(["task", "regime", "budget"])]
        if pool_per_budget:
            groups += [(("all", r, b), g) for (r, b), g in d.groupby(["regime", "budget"])]
        groups += [(("all", r, "all"), g) for r, g in d.groupby("regime")]
        for (task, regime, budget), g in groups:
            per = g.groupby("_unit")["diff"].mean().to_numpy(dtype=float)
            mean, lo, hi = stats.t_interval(per, confidence)
            rows.append({"contrast": c.name, "a": c.a, "b": c.b, "expect": c.expect, "task": task, "regime": regime,
                         "budget": budget, "n_pairs": len(g), "n_units": per.size, "mean_diff": mean, "ci_low": lo,
                         "ci_high": hi})
    return pd.DataFrame(rows, columns=["contrast", "a", "b", "expect", "task", "regime", "budget", "n_pairs",
                                       "n_units", "mean_diff", "ci_low", "ci_high"])


def unit_summary(d: pd.DataFrame, keys: list[str], unit: list[str], value: str = "diff",
                 confidence: float = 0.95) -> pd.DataFrame:
    """Per group of ``keys``: the values averaged within each unit (``unit`` columns, e.g. the fine-tuned model's
    task and seed), then the mean over units with a t-interval (``n_units - 1`` degrees of freedom; NaN bounds from
    one unit). Columns: ``keys``, n_pairs (rows), n_units, mean_diff, ci_low, ci_high. Several rows of one unit
    (lambdas or budgets of one model) are never treated as replicates."""
    rows = []
    for k, g in d.groupby(keys, sort=False):
        per = g.groupby(unit)[value].mean().to_numpy(dtype=float)
        mean, lo, hi = stats.t_interval(per, confidence)
        rows.append({**dict(zip(keys, k if isinstance(k, tuple) else (k,))), "n_pairs": len(g), "n_units": per.size,
                     "mean_diff": mean, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows, columns=[*keys, "n_pairs", "n_units", "mean_diff", "ci_low", "ci_high"])
