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

    summary: columns task, regime, fraction, mean, ci_low, ci_high, metric (``pruning_curves.summarise``).
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


def score_by_strategy(summary: pd.DataFrame, strategies: list[str]) -> plt.Figure:
    """A row of panels per regime, a column per task: mean score (t-interval over seeds) by budget, a line
    per strategy; the full model (budget 0) as a dotted line.

    summary: columns task, regime, strategy, budget, mean, ci_low, ci_high, metric, chance
    (``strategy_sweep.summarise``).
    """
    tasks = list(dict.fromkeys(summary["task"]))
    regimes = [r for r in REGIME_LABELS if r in set(summary["regime"])]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(len(regimes), len(tasks), figsize=(5.6 * len(tasks), 4.0 * len(regimes)), squeeze=False)
    palette = dict(zip(strategies, sns.color_palette("tab10", len(strategies))))
    for i, regime in enumerate(regimes):
        for j, task in enumerate(tasks):
            ax = axes[i][j]
            s = summary[(summary["task"] == task) & (summary["regime"] == regime)]
            full = s[s["strategy"] == "none"]
            budgets = sorted(s.loc[s["strategy"] != "none", "budget"].unique())
            offsets = {st: (k - (len(strategies) - 1) / 2) * 0.6 for k, st in enumerate(strategies)}
            for st in strategies:
                g = s[s["strategy"] == st].sort_values("budget")
                if g.empty:
                    continue
                x = 100 * g["budget"] + offsets[st]
                ax.errorbar(x, g["mean"], yerr=[g["mean"] - g["ci_low"], g["ci_high"] - g["mean"]], marker="o",
                            markersize=4, capsize=2, linewidth=1.2, color=palette[st], label=st)
            if len(full):
                ax.axhline(full["mean"].iloc[0], color="black", linestyle=":", linewidth=1, label="full model")
            ax.axhline(s["chance"].iloc[0], color="grey", linestyle="--", linewidth=1, label="constant predictor")
            ax.set_xticks([100 * b for b in budgets])
            ax.set_title(f"{task} — {REGIME_LABELS[regime]}", fontsize="medium")
            ax.set_xlabel("heads pruned (%)")
            ax.set_ylabel(s["metric"].iloc[0])
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small")
    fig.tight_layout()
    return fig


def mask_grid(rows: pd.DataFrame) -> plt.Figure:
    """Layer x head picture of each strategy's mask (a row per strategy, a column per budget); dark = pruned.

    rows: columns strategy, budget, layer, head, kept (``strategy_sweep.example_masks``).
    """
    strategies = list(dict.fromkeys(rows["strategy"]))
    budgets = sorted(rows["budget"].unique())
    n_layers, n_heads = int(rows["layer"].max()) + 1, int(rows["head"].max()) + 1
    scale = 0.16
    fig, axes = plt.subplots(len(strategies), len(budgets), squeeze=False,
                             figsize=(max(2.2, scale * n_heads + 0.8) * len(budgets), (scale * n_layers + 0.5) * len(strategies)))
    for i, st in enumerate(strategies):
        for j, b in enumerate(budgets):
            ax = axes[i][j]
            g = rows[(rows["strategy"] == st) & (rows["budget"] == b)]
            grid = g.pivot(index="layer", columns="head", values="kept").to_numpy()
            ax.imshow(grid, cmap="Greys_r", vmin=0, vmax=1, aspect="equal", origin="upper")
            ax.set_xticks([])
            ax.set_yticks([0, n_layers - 1])
            ax.tick_params(labelsize=6)
            if i == 0:
                ax.set_title(f"{100 * b:.0f}% pruned", fontsize="small")
            if j == 0:
                ax.set_ylabel(st, fontsize="small", rotation=0, ha="right", va="center")
    fig.suptitle("masks (rows: layers, bottom layer on top; columns: heads; black = pruned)", fontsize="small")
    fig.tight_layout()
    return fig


def contrast_forest(contr: pd.DataFrame, regime_labels: dict[str, str] | None = None,
                    xlabel: str = "score difference a - b (95% bootstrap CI; black = pooled)") -> plt.Figure:
    """Mean paired difference a - b with its bootstrap CI, per contrast, task and budget; a panel per regime.

    contr: columns contrast, task, regime, budget, mean_diff, boot_ci_low, boot_ci_high (``layer_strategies.contrasts``).
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


MEASURE_LABELS = {"weight_change": "weight change (log ratio)", "importance": "importance (normalised difference)",
                  "attention_change": "attention change (log JS ratio)"}


def extra_change_heatmaps(grid: pd.DataFrame) -> plt.Figure:
    """Layer x head heatmaps of the mean extra change: a row per measure, a column for the noise baseline and
    one per (strategy, budget); a diverging scale centred on 0 shared within a row.

    grid: columns strategy, budget, measure, layer, head, x, x_noise (``compensation.heatmap_data``).
    """
    import numpy as np

    measures = [m for m in MEASURE_LABELS if m in set(grid["measure"])]
    settings = list(dict.fromkeys(zip(grid["strategy"], grid["budget"])))
    n_layers, n_heads = int(grid["layer"].max()) + 1, int(grid["head"].max()) + 1
    cols = 1 + len(settings)
    fig, axes = plt.subplots(len(measures), cols, figsize=(0.32 * n_heads * cols + 1.5, 0.4 * n_layers * len(measures) + 1.2),
                             squeeze=False)
    for i, m in enumerate(measures):
        g = grid[grid["measure"] == m]
        lim = float(np.nanmax(np.abs(g[["x", "x_noise"]].to_numpy()))) or 1.0
        noise = g.groupby(["layer", "head"])["x_noise"].mean().unstack().reindex(index=range(n_layers), columns=range(n_heads))
        panels = [("noise baseline", noise)]
        for st, b in settings:
            s = g[(g["strategy"] == st) & (g["budget"] == b)]
            panels.append((f"{st} {100 * b:.0f}%", s.pivot(index="layer", columns="head", values="x")
                           .reindex(index=range(n_layers), columns=range(n_heads))))
        for j, (title, data) in enumerate(panels):
            ax = axes[i][j]
            ax.set_facecolor("0.8")
            im = ax.imshow(data.to_numpy(dtype=float), cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="equal")
            ax.set_xticks(range(0, n_heads, max(1, n_heads // 6)))
            ax.set_yticks(range(n_layers))
            ax.tick_params(labelsize=6)
            ax.set_title(title, fontsize="small")
            if j == 0:
                ax.set_ylabel(f"{MEASURE_LABELS[m]}\nlayer", fontsize="small")
        fig.colorbar(im, ax=list(axes[i]), shrink=0.8)
    return fig


def extra_change_distributions(heads: pd.DataFrame) -> plt.Figure:
    """Distributions of the kept heads' extra change vs the noise baseline: a panel per measure, a box per
    strategy plus the noise.

    heads: columns strategy, budget, measure, x, x_noise (``compensation.per_head``).
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
        sns.stripplot(data=d, x="run", y="value", ax=ax, size=2, alpha=0.4, color="tab:blue")
        ax.axhline(0, color="grey", linewidth=1)
        ax.set_title(MEASURE_LABELS[m], fontsize="medium")
        ax.set_xlabel("")
        ax.set_ylabel("extra change per kept head")
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return fig
