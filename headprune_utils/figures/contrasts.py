"""Paired contrasts drawn as a forest: each difference a - b with its confidence interval, pooled rows in black."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from .labels import REGIME_LABELS


def contrast_forest(contr: pd.DataFrame, regime_labels: dict[str, str] | None = None,
                    xlabel: str = "score difference a - b (95% bootstrap CI; black = pooled)") -> plt.Figure:
    """Mean paired difference a - b with its bootstrap CI, per contrast, task and budget; a panel per regime.

    contr: columns contrast, task, regime, budget, mean_diff, boot_ci_low, boot_ci_high (``layer_strategies_analysis.contrasts``).
    regime_labels: the regimes to draw, in order, with their panel titles (default: the GLUE studies' two regimes).
    """
    labels_of = REGIME_LABELS if regime_labels is None else regime_labels
    regimes = [r for r in labels_of if r in set(contr["regime"])]
    sns.set_theme(style="whitegrid", context="notebook")
    n = max(len(contr[contr["regime"] == r]) for r in regimes)
    fig, axes = plt.subplots(1, len(regimes), figsize=(6.2 * len(regimes), 0.28 * n + 1.5), squeeze=False)
    for ax, regime in zip(axes[0], regimes):
        c = contr[contr["regime"] == regime].reset_index(drop=True)
        labels = [f"{r.contrast} | {r.task}" + ("" if r.budget == "all" else f" {100 * float(r.budget):.0f}%") for r in c.itertuples()]
        y = list(range(len(c)))[::-1]
        for pooled_rows, color in ((c["task"] != "all", "tab:blue"), (c["task"] == "all", "black")):
            g = c[pooled_rows]
            yy = [y[i] for i in g.index]
            ax.errorbar(g["mean_diff"], yy, xerr=[g["mean_diff"] - g["boot_ci_low"], g["boot_ci_high"] - g["mean_diff"]],
                        fmt="o", markersize=3.5, color=color, capsize=2)
        ax.axvline(0, color="grey", linewidth=1)
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=7)
        ax.set_xlabel(xlabel)
        ax.set_title(labels_of[regime], fontsize="medium")
    fig.tight_layout()
    return fig
