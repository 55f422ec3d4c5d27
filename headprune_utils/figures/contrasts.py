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
    """
    lo_col, hi_col = _interval_columns(contr)
    if (contr["task"] == "all").any():
        xlabel = f"{xlabel}; black = {all_label}"
    labels_of = REGIME_LABELS if regime_labels is None else regime_labels
    regimes = [r for r in labels_of if r in set(contr["regime"])]
    sems = list(dict.fromkeys(contr["ablation"])) if "ablation" in contr.columns else [None]

    def rows_of(regime, sem):
        at = contr["regime"] == regime
        if sem is not None:
            at &= contr["ablation"] == sem
        return contr[at].reset_index(drop=True)

    n_rows = {(r, s): len(rows_of(r, s)) for r in regimes for s in sems}
    sems = [s for s in sems if any(n_rows[r, s] for r in regimes)] or sems[:1]  # only semantics with contrasts
    heights = [0.28 * max([n_rows.get((r, s), 0) for r in regimes] + [1]) + 1.5 for s in sems]
    sns.set_theme(style="whitegrid", context="notebook")
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
            y = list(range(len(c)))[::-1]
            for pooled_rows, color in ((c["task"] != "all", "tab:blue"), (c["task"] == "all", "black")):
                g = c[pooled_rows]
                yy = [y[k] for k in g.index]
                ax.errorbar(g["mean_diff"], yy, xerr=[g["mean_diff"] - g[lo_col], g[hi_col] - g["mean_diff"]],
                            fmt="o", markersize=3.5, color=color, capsize=2)
            ax.axvline(0, color="grey", linewidth=1)
            ax.set_yticks(y)
            ax.set_yticklabels(labels, fontsize=7)
            ax.set_xlabel(xlabel)
    for ax, _ in empty:
        ax.set_visible(False)
    fig.tight_layout()
    for ax, title in empty:  # a note where the panel would be, so the blank reads as "nothing was run"
        box = ax.get_position()
        fig.text(box.x0 + box.width / 2, box.y0 + box.height / 2, f"{title}:\nno contrasts (no such cells)",
                 ha="center", va="center", fontsize="small", color="0.45")
    return fig
