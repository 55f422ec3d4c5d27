"""Seaborn figures: data in, figure out. :func:`save_figure` writes each figure with its data beside it."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from .paths import StudyPaths
from .results import atomic_write_csv

REGIME_LABELS = {
    "mask_then_finetune": "mask, then fine-tune (Budhraja et al.)",
    "finetune_then_mask": "fine-tune, then mask (Michel et al.)",
}


def score_vs_fraction(summary: pd.DataFrame, raw: pd.DataFrame | None = None) -> plt.Figure:
    """One panel per task: mean score vs share of heads pruned, a line per regime, CI band over seeds.

    summary: columns task, regime, fraction, mean, ci_low, ci_high, metric (``random_pruning.summarise``).
    raw: optional per-seed rows (task, regime, fraction, score) drawn as points.
    """
    tasks = list(dict.fromkeys(summary["task"]))
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.2 * len(tasks), 4.2), squeeze=False)
    palette = dict(zip(REGIME_LABELS, sns.color_palette("colorblind", len(REGIME_LABELS))))
    for ax, task in zip(axes[0], tasks):
        s = summary[summary["task"] == task]
        for regime, g in s.groupby("regime"):
            g = g.sort_values("fraction")
            color = palette.get(regime)
            ax.plot(100 * g["fraction"], g["mean"], marker="o", color=color, label=REGIME_LABELS.get(regime, regime))
            ax.fill_between(100 * g["fraction"], g["ci_low"], g["ci_high"], color=color, alpha=0.2, linewidth=0)
            if raw is not None:
                r = raw[(raw["task"] == task) & (raw["regime"] == regime)]
                ax.scatter(100 * r["fraction"], r["score"], color=color, s=10, alpha=0.5)
        if "chance" in s:
            ax.axhline(s["chance"].iloc[0], color="grey", linestyle="--", linewidth=1, label="constant predictor")
        ax.set_title(task)
        ax.set_xlabel("heads pruned (%)")
        ax.set_ylabel(s["metric"].iloc[0])
    axes[0][0].legend(loc="lower left", fontsize="small")
    fig.tight_layout()
    return fig


def save_figure(fig: plt.Figure, data: pd.DataFrame, paths: StudyPaths, name: str) -> None:
    """``figures/<name>.png`` and ``tables/<name>.csv`` (the figure's data)."""
    paths.figures.mkdir(parents=True, exist_ok=True)
    tmp = paths.figure(name).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120, bbox_inches="tight", metadata={"Software": None})
    tmp.replace(paths.figure(name))
    atomic_write_csv(paths.table(name), data)
