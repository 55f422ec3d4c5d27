"""Paired contrasts drawn as a forest: each difference a - b with its confidence interval, pooled rows in black."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from headprune_utils.figures.labels import REGIME_LABELS


def _interval_columns(contr: pd.DataFrame) -> tuple[str, str]:
    """``ci_low``/``ci_high`` (the t-intervals over units of ``paired_contrasts.unit_contrast_table``), else the
    older ``boot_ci_low``/``boot_ci_high`` (``paired_contrasts.contrast_table``, study 7)."""
    if {"ci_low", "ci_high"} <= set(contr.columns):
        return "ci_low", "ci_high"
    if {"boot_ci_low", "boot_ci_high"} <= set(contr.columns):
        return "boot_ci_low", "boot_ci_high"
    raise ValueError("the contrast table has no interval columns (ci_low, ci_high)")


# a forest panel with more rows than this is split by contrast (a panel per contrast); one with more than
# TALL_ROWS rows gets its x axis at the top as well as at the bottom
MAX_ROWS = 40
TALL_ROWS = 24
# at most this many panels side by side (a split forest wraps its contrasts onto further rows)
MAX_COLUMNS = 4


def contrast_forest(contr: pd.DataFrame, regime_labels: dict[str, str] | None = None,
                    xlabel: str = "score difference a - b (95% t-interval over models)",
                    all_label: str = "pooled over tasks") -> plt.Figure:
    """Mean paired difference a - b with its confidence interval, per contrast, task and budget; a panel per
    regime, and a row of panels per ablation semantics when ``contr`` has an ``ablation`` column (contrasts of
    different semantics are never drawn in one panel).

    contr: columns contrast, task, regime, budget, mean_diff, ci_low, ci_high (``layer_strategies_analysis.contrasts``,
    ``zero_shot_pruning_analysis.contrasts``; the older boot_ci_low, boot_ci_high are read when ci_low is absent),
    optionally ablation. Rows with task "all" are drawn in black, and then (only then) the x label says what they
    are: ``xlabel`` (the measure and its interval) + "; black = " + ``all_label`` (study 7: every attention type).
    regime_labels: the regimes to draw, in order, with their panel titles (default: the GLUE studies' two regimes).

    A (regime, semantics) with no contrast (e.g. no mask-then-fine-tune cells under one semantics) gets no panel:
    its place in the grid is left blank with a note; a row's panels are as tall as its longest panel needs.
    When a panel would have more than :data:`MAX_ROWS` rows (study 5: 4 contrasts x 4 tasks x 5 budgets), the
    forest is split by contrast instead: a panel per contrast (columns, at most :data:`MAX_COLUMNS` side by side,
    sharing the x axis down a column) and a row of panels per (regime, semantics). A panel still taller than
    :data:`TALL_ROWS` rows has its x axis at the top as well.
    """
    lo_col, hi_col = _interval_columns(contr)
    if (contr["task"] == "all").any():
        xlabel = f"{xlabel}; black = {all_label}"
    labels_of = REGIME_LABELS if regime_labels is None else regime_labels
    regimes = [r for r in labels_of if r in set(contr["regime"])]
    sems = list(dict.fromkeys(contr["ablation"])) if "ablation" in contr.columns else [None]

    def rows_of(regime, sem, contrast=None):
        at = contr["regime"] == regime
        if sem is not None:
            at &= contr["ablation"] == sem
        if contrast is not None:
            at &= contr["contrast"] == contrast
        return contr[at].reset_index(drop=True)

    n_rows = {(r, s): len(rows_of(r, s)) for r in regimes for s in sems}
    sems = [s for s in sems if any(n_rows[r, s] for r in regimes)] or sems[:1]  # only semantics with contrasts
    sns.set_theme(style="whitegrid", context="notebook")
    if max(n_rows.values(), default=0) > MAX_ROWS and contr["contrast"].nunique() > 1:
        return _split_forest(contr, rows_of, regimes, sems, labels_of, xlabel, lo_col, hi_col)
    heights = [0.28 * max([n_rows.get((r, s), 0) for r in regimes] + [1]) + 1.5 for s in sems]
    fig, axes = plt.subplots(len(sems), max(1, len(regimes)), figsize=(6.2 * max(1, len(regimes)), sum(heights)),
                             squeeze=False, gridspec_kw={"height_ratios": heights})
    empty = []
    for i, sem in enumerate(sems):
        for ax, regime in zip(axes[i], regimes):
            c = rows_of(regime, sem)
            title = labels_of[regime] + ("" if sem is None else f" | {sem} ablation")
            if c.empty:  # no data: no panel (an empty frame would read as a missing result)
                empty.append((ax, labels_of[regime] + ("" if sem is None else f"\n{sem} ablation")))
                continue
            ax.set_title(title, fontsize="medium")
            labels = [f"{r.contrast} | {r.task}" + ("" if r.budget == "all" else f" {100 * float(r.budget):.0f}%")
                      for r in c.itertuples()]
            _draw(ax, c, labels, xlabel, lo_col, hi_col)
    for ax, _ in empty:
        ax.set_visible(False)
    fig.tight_layout()
    for ax, title in empty:  # a note where the panel would be, so the blank reads as "nothing was run"
        box = ax.get_position()
        fig.text(box.x0 + box.width / 2, box.y0 + box.height / 2, f"{title}:\nno contrasts (no such cells)",
                 ha="center", va="center", fontsize="small", color="0.45")
    return fig


def _draw(ax, c: pd.DataFrame, labels: list[str], xlabel: str, lo_col: str, hi_col: str) -> None:
    """One forest panel: a row per row of ``c`` (pooled rows in black), a vertical line at 0, the x axis at the
    bottom and, for a panel of more than :data:`TALL_ROWS` rows, at the top too."""
    y = list(range(len(c)))[::-1]
    for pooled_rows, color in ((c["task"] != "all", "tab:blue"), (c["task"] == "all", "black")):
        g = c[pooled_rows]
        yy = [y[k] for k in g.index]
        ax.errorbar(g["mean_diff"], yy, xerr=[g["mean_diff"] - g[lo_col], g[hi_col] - g["mean_diff"]],
                    fmt="o", markersize=3.5, color=color, capsize=2)
    ax.axvline(0, color="grey", linewidth=1)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_ylim(-0.7, len(c) - 0.3)
    ax.set_xlabel(xlabel)
    if len(c) > TALL_ROWS:  # a tall panel: the scale readable at its top as well
        ax.tick_params(axis="x", top=True, labeltop=True)


def _split_forest(contr, rows_of, regimes, sems, labels_of, xlabel, lo_col, hi_col) -> plt.Figure:
    """:func:`contrast_forest` split by contrast: a column per contrast (wrapped after :data:`MAX_COLUMNS`), a row
    of panels per (regime, semantics) with contrasts; a column shares its x axis."""
    contrasts = list(dict.fromkeys(contr["contrast"]))
    blocks = [(r, s) for s in sems for r in regimes if len(rows_of(r, s))]
    n_cols = min(MAX_COLUMNS, len(contrasts))
    wraps = [contrasts[k:k + n_cols] for k in range(0, len(contrasts), n_cols)]
    grid = [(block, part) for part in wraps for block in blocks]  # one grid row per (contrasts part, block)
    heights = [0.26 * max([len(rows_of(*block, c)) for c in part] + [1]) + 1.6 for block, part in grid]
    fig, axes = plt.subplots(len(grid), n_cols, figsize=(5.6 * n_cols, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for i, ((regime, sem), part) in enumerate(grid):
        for j in range(n_cols):
            ax = axes[i][j]
            if j >= len(part):
                ax.set_visible(False)
                continue
            c = rows_of(regime, sem, part[j])
            head = f"{part[j]}\n{labels_of[regime]}" + ("" if sem is None else f" | {sem} ablation")
            if c.empty:
                ax.set_visible(False)
                continue
            ax.set_title(head, fontsize="medium")
            labels = [str(r.task) + ("" if r.budget == "all" else f" {100 * float(r.budget):.0f}%")
                      for r in c.itertuples()]
            _draw(ax, c, labels, "", lo_col, hi_col)
    # a column (one contrast) compares the same difference across regimes and semantics: one x range per column
    for part_no, part in enumerate(wraps):
        for j in range(len(part)):
            col = [axes[i][j] for i, (_, p) in enumerate(grid) if p is part and axes[i][j].get_visible()]
            if col:
                lo = min(a.get_xlim()[0] for a in col)
                hi = max(a.get_xlim()[1] for a in col)
                for a in col:
                    a.set_xlim(lo, hi)
    fig.tight_layout()
    # one x label for the figure, below the last row (a label per panel ran into its neighbours')
    fig.text(0.5, 0.0, xlabel, ha="center", va="top", fontsize="medium")
    return fig
