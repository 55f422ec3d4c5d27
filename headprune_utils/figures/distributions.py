"""Distributions: per-head (or per-model) values as boxes and points by group (run, role, distance)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import numpy as np
import seaborn as sns
from matplotlib.ticker import MaxNLocator

from headprune_utils.figures.labels import L0_SETTING_TITLES, MEASURE_LABELS, ROLE_COLORS



def _stripplot(*args, **kwargs):
    """``seaborn.stripplot`` with its jitter drawn from a fixed seed (seaborn uses numpy's global generator),
    restoring that generator after: the same data give the same picture, byte for byte."""
    state = np.random.get_state()
    np.random.seed(0)
    try:
        return sns.stripplot(*args, **kwargs)
    finally:
        np.random.set_state(state)

def extra_change_distributions(heads: pd.DataFrame) -> plt.Figure:
    """Distributions of the kept heads' extra change vs the noise baseline: a panel per measure, a box per
    strategy plus the noise.

    heads: columns strategy, budget, measure, x, x_noise (``compensation_analysis.per_head``).
    """
    measures = [m for m in MEASURE_LABELS if m in set(heads["measure"])]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(measures), figsize=(4.6 * len(measures), 3.8), squeeze=False)
    for ax, m in zip(axes[0], measures):
        g = heads[heads["measure"] == m]
        parts = [pd.DataFrame({"run": "noise baseline", "value": g["x_noise"]})]
        for (st, b), gs in g.groupby(["strategy", "budget"]):
            parts.append(pd.DataFrame({"run": f"{st} {100 * b:.0f}%", "value": gs["x"]}))
        d = pd.concat(parts, ignore_index=True)
        sns.boxplot(data=d, x="run", y="value", ax=ax, color="0.85", fliersize=2)
        _stripplot(data=d, x="run", y="value", ax=ax, size=2, alpha=0.4, color="tab:blue")
        ax.axhline(0, color="grey", linewidth=1)
        ax.set_title(MEASURE_LABELS[m], fontsize="medium")
        ax.set_xlabel("")
        ax.set_ylabel("extra change per kept head")
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return fig


def survival_by_role(data: pd.DataFrame) -> plt.Figure:
    """Survival level of every head of every model by role (box + points, outlined so the light grey of "other"
    shows), one panel per task (study 7: per L0 setting).

    data: columns task, role, survival (``role_survival.survival_with_roles``).
    """
    tasks = list(dict.fromkeys(data["task"]))
    order = [r for r in ROLE_COLORS if r in set(data["role"])]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        g = data[data["task"] == task]
        sns.boxplot(data=g, x="role", y="survival", order=order, ax=ax, color="0.9", fliersize=0)
        _stripplot(data=g, x="role", y="survival", order=order, ax=ax, hue="role", palette=ROLE_COLORS,
                   size=3.5, alpha=0.8, jitter=0.25, legend=False, linewidth=0.6, edgecolor="0.3")
        counts = g["role"].value_counts()
        ax.set_xticks(range(len(order)))
        ax.set_xticklabels([f"{r}\n(n={counts.get(r, 0)})" for r in order], fontsize=8)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # survival levels are whole numbers
        ax.set_title(L0_SETTING_TITLES.get(task, task))
        ax.set_xlabel("")
        ax.set_ylabel("survival level")
    fig.tight_layout()
    return fig


def phase_plot(when_t: pd.DataFrame) -> plt.Figure:
    """Mantel r between the pre-trained and fine-tuned matrices on halves of disjoint sentences (the r the claims
    test), per distance (points: task x seed), with the mean attenuation ceiling (grey; ``Matrices.compare``).
    when_t: ``redundancy_patterns_analysis.when``."""
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    metrics = list(dict.fromkeys(when_t["metric"]))
    _stripplot(data=when_t, x="metric", y="r_disjoint", hue="task", order=metrics, dodge=True, ax=ax, size=6)
    ceil = when_t.groupby("metric")["ceiling"].mean().reindex(metrics)
    ax.scatter(range(len(metrics)), ceil.values, marker="_", s=900, color="grey", label="attenuation ceiling")
    ax.set_ylim(min(0, float(when_t["r_disjoint"].min()) - 0.05), 1.02)
    ax.set_ylabel("Mantel r, pre-trained vs fine-tuned\n(halves of disjoint sentences)")
    ax.legend(fontsize="small", loc="lower left")
    fig.tight_layout()
    return fig
