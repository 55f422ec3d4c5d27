"""Curves: a score (or a share of heads kept, or a distance) as a line against how much is pruned or changed
(share of heads pruned, budget, heads kept, L0 penalty, dropout), one panel per task, regime or setting.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from headprune_utils.figures.layout import mark_not_run
from headprune_utils.figures.labels import (
    METRIC_LABELS, NMT_REGIME_LABELS, REGIME_LABELS, TYPE_COLORS, TYPE_LABELS, break_title,
)


def log_axis(axis, values) -> None:
    """A log scale on ``axis`` (``ax.xaxis`` or ``ax.yaxis``) labelled in plain numbers (0.02, 0.05, 0.1) at few
    enough places not to overlap: 1-2-5 per decade over up to 1.5 decades of ``values``, 1-3 up to 3 decades,
    powers of ten beyond; the other ticks unlabelled."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    decades = float(np.log10(v.max() / v.min())) if v.size else 1.0
    subs = (1.0, 2.0, 5.0) if decades <= 1.5 else (1.0, 3.0) if decades <= 3 else (1.0,)
    if axis is axis.axes.xaxis:
        axis.axes.set_xscale("log")
    else:
        axis.axes.set_yscale("log")
    axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
    axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    axis.set_minor_locator(LogLocator(base=10, subs=np.arange(1, 10), numticks=12))
    axis.set_minor_formatter(NullFormatter())


def fit_titles(fig: plt.Figure, axes, sep: str = " — ") -> None:
    """Lay ``fig`` out (``tight_layout``) with every panel title of ``axes`` no wider than its panel: when one is
    wider, all of them are broken (at ``sep``, else between words) to the narrowest panel's measure, so panels read
    alike, and the figure is laid out again."""
    axes = [ax for ax in np.ravel(axes) if ax.get_visible() and ax.get_title()]
    fig.tight_layout()
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    width = None
    for ax in axes:
        text = ax.get_title()
        w_title, w_ax = ax.title.get_window_extent(r).width, ax.get_window_extent(r).width
        if w_title > w_ax:
            chars = int(0.95 * len(text) * w_ax / w_title)  # the title's own mean character width
            width = chars if width is None else min(width, chars)
    if width is None:
        return
    for ax in axes:
        ax.set_title(break_title(ax.get_title(), width, sep), fontsize=ax.title.get_fontsize())
    fig.tight_layout()


def score_vs_fraction(summary: pd.DataFrame, raw: pd.DataFrame | None = None) -> plt.Figure:
    """One panel per task (and a row of panels per ablation semantics when ``summary`` has an ``ablation``
    column): mean score vs share of heads pruned, a line per regime, CI band over seeds. A task's panels share
    their y axis (the rows are compared).

    summary: columns task, regime, fraction, mean, ci_low, ci_high, metric (``pruning_curves.summarise``).
    raw: optional per-seed rows (task, regime, fraction, score) drawn as points.
    """
    tasks = list(dict.fromkeys(summary["task"]))
    sems = list(dict.fromkeys(summary["ablation"])) if "ablation" in summary else [None]
    sns.set_theme(style="whitegrid", context="notebook")
    # the rows (ablation semantics) are compared task by task: a column shares its y axis
    fig, axes = plt.subplots(len(sems), len(tasks), figsize=(5.2 * len(tasks), 4.2 * len(sems)), squeeze=False,
                             sharey="col")
    palette = dict(zip(REGIME_LABELS, sns.color_palette("colorblind", len(REGIME_LABELS))))
    for i, sem in enumerate(sems):
        for ax, task in zip(axes[i], tasks):
            s = summary[(summary["task"] == task) & ((summary["ablation"] == sem) if sem else True)]
            for regime, g in s.groupby("regime"):
                g = g.sort_values("fraction")
                color = palette.get(regime)
                ax.plot(100 * g["fraction"], g["mean"], marker="o", color=color, label=REGIME_LABELS.get(regime, regime))
                ax.fill_between(100 * g["fraction"], g["ci_low"], g["ci_high"], color=color, alpha=0.2, linewidth=0)
                if raw is not None:
                    r = raw[(raw["task"] == task) & (raw["regime"] == regime) & ((raw["ablation"] == sem) if sem else True)]
                    ax.scatter(100 * r["fraction"], r["score"], color=color, s=10, alpha=0.5)
            if "chance" in s and len(s):
                ax.axhline(s["chance"].iloc[0], color="grey", linestyle="--", linewidth=1, label="constant predictor")
            ax.set_title(f"{task} — {sem} ablation" if sem else task, fontsize="medium")
            ax.set_xlabel("heads pruned (%)")
            ax.set_ylabel(s["metric"].iloc[0] if len(s) else "")
    # every regime drawn in any panel (the first row may lack one: mask-then-fine-tune runs under uniform only)
    handles, labels = figure_legend_entries(fig, first=list(REGIME_LABELS.values()))
    axes[0][0].legend(handles, labels, loc="lower left", fontsize="small")
    fig.tight_layout()
    return fig


def held_out_curves(curves: pd.DataFrame) -> plt.Figure:
    """Were the fine-tunings trained to the plateau? One panel per task: the held-out score after every epoch, a
    thin line per fine-tuned model (seed), coloured by model (the full model, each share pruned then fine-tuned), a
    dot on the epoch kept; a run that stopped at the epoch cap still improving is dashed (not at the plateau: the
    rows it stands behind are not testable).

    curves: columns task, seed, model, epoch, score, selected, reached (``convergence.curves``, e.g.
    ``random_pruning.held_out_curves``).
    """
    sns.set_theme(style="whitegrid", context="notebook")
    tasks = list(dict.fromkeys(curves["task"])) or ["(no held-out curve stored)"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.2 * len(tasks), 4.2), squeeze=False)
    models = list(dict.fromkeys(curves["model"]))
    palette = dict(zip(models, sns.color_palette("viridis_r", len(models))))
    for ax, task in zip(axes[0], tasks):
        t = curves[curves["task"] == task]
        if t.empty:
            mark_not_run(ax, "no held-out curve stored (no validation split)")
            continue
        for (model, seed), g in t.groupby(["model", "seed"], sort=False):
            g = g.sort_values("epoch")
            reached = bool(g["reached"].iloc[0])
            ax.plot(g["epoch"], g["score"], color=palette[model], linewidth=1.1, alpha=0.8,
                    linestyle="-" if reached else "--")
            kept = g[g["selected"]]
            ax.scatter(kept["epoch"], kept["score"], color=palette[model], s=22, zorder=3)
        n_open = int((t.drop_duplicates(["model", "seed"])["reached"] == False).sum())  # noqa: E712
        ax.set_title(f"{task} — {n_open} of {t.groupby(['model', 'seed']).ngroups} runs still improving at the cap"
                     if n_open else f"{task} — every run at its plateau", fontsize="medium")
        ax.set_xlabel("epoch")
        ax.set_ylabel("held-out score")
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    handles = [plt.Line2D([], [], color=palette[m], label=m) for m in models]
    handles += [plt.Line2D([], [], color="grey", linestyle="--", label="stopped at the cap, still improving"),
                plt.Line2D([], [], color="grey", marker="o", linestyle="", label="epoch kept")]
    axes[0][0].legend(handles=handles, loc="lower right", fontsize="small")
    fit_titles(fig, axes)
    return fig


def figure_legend_entries(fig: plt.Figure, first: list[str] = ()) -> tuple[list, list[str]]:
    """Every labelled artist of every panel, each label once: a figure-level legend that names every line, also one
    a panel lacks (the first panel, mask-then-fine-tune, has no iterative curve). The labels in ``first`` come
    first, in that order, then the others in the order drawn."""
    entries: dict[str, object] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    labels = [lab for lab in first if lab in entries] + [lab for lab in entries if lab not in first]
    return [entries[lab] for lab in labels], labels


# the narrowest x range of a score_by_strategy panel, in percentage points of heads pruned: a panel of one budget
# (mask, then fine-tune at 50%) shows its strategies side by side at that budget, not spread over the whole axis
MIN_BUDGET_SPAN = 20.0


def score_by_strategy(summary: pd.DataFrame, strategies: list[str]) -> plt.Figure:
    """A row of panels per regime (x ablation semantics, when ``summary`` has an ``ablation`` column), a column per task: mean score (t-interval over seeds) by budget, a line
    per strategy; the full model (budget 0) as a dotted line.

    summary: columns task, regime, strategy, budget, mean, ci_low, ci_high, metric, chance
    (``strategy_sweep.summarise``).
    """
    tasks = list(dict.fromkeys(summary["task"]))
    sems = list(dict.fromkeys(summary["ablation"])) if "ablation" in summary else [None]
    rows = [(r, a) for r in REGIME_LABELS for a in sems
            if ((summary["regime"] == r) & ((summary["ablation"] == a) if a else True)).any()]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(len(rows), len(tasks), figsize=(5.6 * len(tasks), 4.0 * len(rows)), squeeze=False)
    palette = dict(zip(strategies, sns.color_palette("tab10", len(strategies))))
    not_run: dict[int, list] = {}
    for i, (regime, sem) in enumerate(rows):
        for j, task in enumerate(tasks):
            ax = axes[i][j]
            s = summary[(summary["task"] == task) & (summary["regime"] == regime)
                        & ((summary["ablation"] == sem) if sem else True)]
            ax.set_title(f"{task} — {REGIME_LABELS[regime]}" + (f" — {sem} ablation" if sem else ""), fontsize="medium")
            if s.empty:  # this task was not run in this regime x semantics (e.g. mask-then-fine-tune on 2 tasks only)
                not_run.setdefault(i, []).append((ax, task))
                continue
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
            lo, hi = 100 * budgets[0], 100 * budgets[-1]
            if hi - lo < MIN_BUDGET_SPAN:  # one budget: the strategies' offsets (+-0.6) must not fill the whole axis
                mid = (lo + hi) / 2
                ax.set_xlim(mid - MIN_BUDGET_SPAN / 2, mid + MIN_BUDGET_SPAN / 2)
            ax.set_xlabel("heads pruned (%)")
            ax.set_ylabel(s["metric"].iloc[0])
    # a row's tasks that were not run: their panels left out, one note in the first one's place (a panel of its
    # own saying only "not run" was a quarter of the row)
    for i, blanks in not_run.items():
        for ax, _ in blanks[1:]:
            ax.set_visible(False)
        regime, sem = rows[i]
        mark_not_run(blanks[0][0], "not run in this profile:\n" + ", ".join(t for _, t in blanks) + "\n("
                     + REGIME_LABELS[regime] + (f", {sem} ablation" if sem else "") + ")")
        blanks[0][0].set_title("")
    handles, labels = figure_legend_entries(fig, first=strategies)
    fit_titles(fig, axes)  # "task — regime — semantics" is wider than a panel: broken into lines that fit
    # the legend above the panels, across the figure, in the panels' own type size (at the far right it was tiny)
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(labels), 6),
               fontsize="medium", frameon=False)
    return fig


def bleu_vs_fraction(summary: pd.DataFrame) -> plt.Figure:
    """One panel per regime: mean BLEU vs share of the type's heads pruned, a line per attention type, t-interval
    band over (model seed, mask seed) pairs; fraction 0 is the unpruned reference.

    summary: columns type, regime, fraction, mean, ci_low, ci_high (``nmt_heads_analysis.random_summary``).
    """
    regimes = [r for r in NMT_REGIME_LABELS if r in set(summary["regime"])]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(regimes), figsize=(5.6 * len(regimes), 4.2), squeeze=False)
    for ax, regime in zip(axes[0], regimes):
        s = summary[summary["regime"] == regime]
        for t in [t for t in TYPE_LABELS if t in set(s["type"])]:
            g = s[s["type"] == t].sort_values("fraction")
            ax.plot(100 * g["fraction"], g["mean"], marker="o", color=TYPE_COLORS[t], label=TYPE_LABELS[t])
            ax.fill_between(100 * g["fraction"], g["ci_low"], g["ci_high"], color=TYPE_COLORS[t], alpha=0.18, linewidth=0)
        ax.set_title(NMT_REGIME_LABELS[regime], fontsize="medium")
        ax.set_xlabel("heads of the type pruned (%)")
        ax.set_ylabel("test BLEU (greedy)")
        ax.set_ylim(bottom=0)
    # every type drawn in any panel, in the first (the retraining panel draws "all three types jointly" only)
    handles, labels = figure_legend_entries(fig, first=[TYPE_LABELS[t] for t in TYPE_LABELS])
    axes[0][0].legend(handles, labels, loc="lower left", fontsize="small")
    fig.tight_layout()
    return fig


def training_curves(curves: pd.DataFrame) -> plt.Figure:
    """Loss against training step, a colour per model seed: dev loss (per-token NLL, solid, markers) and the training
    loss since the previous evaluation (dashed; label-smoothed, so above the NLL), the restored (best) evaluation
    starred. curves: ``nmt_heads_analysis.training_curves``."""
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    palette = sns.color_palette("colorblind", max(1, curves["model_seed"].nunique()))
    for color, (seed, g) in zip(palette, curves.groupby("model_seed")):
        g = g.sort_values("step")
        ax.plot(g["step"], g["dev_loss"], marker="o", markersize=3, color=color, label=f"model seed {seed}: dev NLL")
        ax.plot(g["step"], g["train_loss"], linestyle="--", color=color, alpha=0.7, label=f"model seed {seed}: train loss")
        b = g[g["best"]]
        ax.plot(b["step"], b["dev_loss"], marker="*", markersize=13, color=color, linestyle="none")
    ax.set_xlabel("training step")
    ax.set_ylabel("loss (nats per target token)")
    ax.set_title("Translation model training (star: the weights kept)", fontsize="medium")
    ax.legend(fontsize="x-small")
    fig.tight_layout()
    return fig


def l0_heads_kept(by_type: pd.DataFrame) -> plt.Figure:
    """One panel per L0 setting: share of each gated type's heads kept against lambda (log scale), a line per type
    (mean over model seeds), points per model.

    by_type: columns setting, model_seed, lam, type, frac_kept (``nmt_heads_analysis.l0_by_type``).
    """
    settings = [t for t in TYPE_LABELS if t in set(by_type["setting"])]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(settings), figsize=(5.0 * len(settings), 3.9), squeeze=False)
    for ax, setting in zip(axes[0], settings):
        s = by_type[by_type["setting"] == setting]
        for t in [t for t in TYPE_LABELS if t in set(s["type"])]:
            g = s[s["type"] == t]
            m = g.groupby("lam")["frac_kept"].mean()
            ax.scatter(g["lam"], g["frac_kept"], color=TYPE_COLORS[t], s=12, alpha=0.5)
            ax.plot(m.index, m.to_numpy(), marker="o", color=TYPE_COLORS[t], label=TYPE_LABELS[t])
        log_axis(ax.xaxis, s["lam"])
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(f"L0 gates on: {TYPE_LABELS.get(setting, setting)}", fontsize="medium")
        ax.set_xlabel("lambda (penalty per open gate, nats)")
        ax.set_ylabel("share of the type's heads kept")
        ax.legend(loc="best", fontsize="small")  # "lower left" covered the encoder's points at lambda 0.04-0.06
    fig.tight_layout()
    return fig


def _points_and_lambda_means(ax, c: pd.DataFrame, series, label_suffix: str = "") -> None:
    """For each (column, label, colour, marker) of ``series``: a point per row of ``c`` (one model at one lambda)
    and a line through the means per lambda against the mean heads kept (one line through every point would zigzag
    between models at equal head counts). ``c``: columns lam, n_kept and the series' columns."""
    mean = c.groupby("lam")[["n_kept", *[col for col, *_ in series]]].mean().sort_values("n_kept")
    for col, label, color, marker in series:
        ax.scatter(c["n_kept"], c[col], color=color, marker=marker, s=14, alpha=0.45)
        ax.plot(mean["n_kept"], mean[col], color=color, marker=marker, markersize=5, label=label + label_suffix)


def l0_bleu(curve: pd.DataFrame) -> plt.Figure:
    """One panel per L0 setting: test BLEU against heads kept (of the gated types): L0 masks and random masks with
    the same heads per type, a point per (model seed, lambda) and a line through the means per lambda (as
    ``l0_curve``: one line through every point would zigzag between the seeds); the full model dotted.

    curve: columns setting, lam, n_kept, n_heads_total, bleu_l0, bleu_random_mean, bleu_full, optionally model_seed
    (``nmt_heads_analysis.l0_curve``).
    """
    settings = [t for t in TYPE_LABELS if t in set(curve["setting"])]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(settings), figsize=(5.0 * len(settings), 3.9), squeeze=False)
    for ax, setting in zip(axes[0], settings):
        c = curve[curve["setting"] == setting]
        _points_and_lambda_means(ax, c, (("bleu_l0", "L0 gates", "tab:blue", "o"),
                                         ("bleu_random_mean", "random, same heads per type", "tab:grey", "^")),
                                 label_suffix=" (line: mean per lambda)" if c["lam"].duplicated().any() else "")
        ax.axhline(c["bleu_full"].mean(), color="black", linestyle=":", linewidth=1, label="full model")
        ax.set_title(f"L0 gates on: {TYPE_LABELS.get(setting, setting)}", fontsize="medium")
        ax.set_xlabel(f"heads kept (of {int(c['n_heads_total'].max())})")
        ax.set_ylabel("test BLEU (greedy)")
        ax.set_ylim(bottom=0)
    # one legend below the panels: inside a panel it covered the fewest-heads points
    handles, labels = figure_legend_entries(fig)
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(labels), fontsize="small",
               frameon=False)
    fig.tight_layout()
    return fig


def l0_curve(curve: pd.DataFrame) -> plt.Figure:
    """Dev score against heads kept, one panel per task: L0 masks (per seed, and the mean per lambda), and the
    random and gradient-importance masks at the same head counts; the full model dotted, a constant predictor dashed.

    curve: columns task, seed, lam, n_kept, score_l0, score_random_mean, score_importance, score_full, chance,
    metric (``specialized_heads_l0_analysis.l0_curve``).
    """
    tasks = list(dict.fromkeys(curve["task"]))
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.4 * len(tasks), 4.2), squeeze=False)
    series = (("score_l0", "L0 gates", "tab:blue", "o"), ("score_importance", "gradient importance", "tab:orange", "s"),
              ("score_random_mean", "random (mean of masks)", "tab:grey", "^"))
    for ax, task in zip(axes[0], tasks):
        c = curve[curve["task"] == task]
        _points_and_lambda_means(ax, c, series)
        ax.axhline(c["score_full"].mean(), color="black", linestyle=":", linewidth=1, label="full model")
        ax.axhline(c["chance"].iloc[0], color="grey", linestyle="--", linewidth=1, label="constant predictor")
        ax.set_title(task)
        ax.set_xlabel("heads kept (of %d)" % int(c["n_heads_total"].iloc[0]) if "n_heads_total" in c else "heads kept")
        ax.set_ylabel(c["metric"].iloc[0])
    axes[0][0].legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    return fig


def dropout_plot(runs: pd.DataFrame) -> plt.Figure:
    """Mean off-diagonal distance (lower = more redundant) after continued MLM training, by dropout ratio;
    a line per seed, the pre-trained model dashed. One panel per distance. runs: ``redundancy_patterns_analysis.why``."""
    metrics = list(dict.fromkeys(runs["metric"]))
    cols = min(3, len(metrics))
    rows = int(np.ceil(len(metrics) / cols))
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    for ax, m in zip(axes.ravel(), metrics):
        g = runs[runs["metric"] == m]
        for s, gs in g.groupby("seed"):
            gs = gs.sort_values("dropout")
            ax.plot(gs["dropout"], gs["mean_distance"], marker="o", label=f"seed {s}")
        ax.axhline(g["pretrained_mean_distance"].iloc[0], color="black", linestyle="--", linewidth=1, label="pre-trained")
        ax.set_title(METRIC_LABELS.get(m, m), fontsize="small")
        ax.set_xlabel("dropout during continued MLM")
        ax.set_ylabel("mean distance")
    for ax in axes.ravel()[len(metrics):]:
        ax.axis("off")
    axes[0][0].legend(fontsize="x-small")
    fig.tight_layout()
    return fig


def rare_criterion_sensitivity(counts: pd.DataFrame, fixed: float) -> plt.Figure:
    """How many rare-word heads each threshold on the share of queries pointing at the sentence's least frequent
    token would give: a line per model group (colour, marker) and layers (solid: all layers, dashed: the first
    layer) against the threshold; the fixed criterion (``fixed``, from the paper) marked by a vertical line. A
    sensitivity, not a selection: the criterion is never chosen from this curve.

    counts: columns rare_share, model, layers, n_rare_heads (``role_survival.rare_criterion_counts``).
    """
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=(6.8, 4.6))
    models = list(dict.fromkeys(counts["model"]))
    palette = dict(zip(models, sns.color_palette("colorblind", max(1, len(models)))))
    markers = dict(zip(models, "osD^v"))
    for (model, layers), g in counts.groupby(["model", "layers"], sort=False):
        g = g.sort_values("rare_share")
        ax.plot(g["rare_share"], g["n_rare_heads"], marker=markers[model], markersize=5, color=palette[model],
                linestyle="--" if layers == "first layer" else "-", label=f"{model}, {layers}")
    ax.axvline(fixed, color="black", linestyle=":", linewidth=1.2)
    ax.annotate(f"fixed criterion: > {fixed:g}\n(from the paper)", xy=(fixed, 0.97), xycoords=("data", "axes fraction"),
                xytext=(5, 0), textcoords="offset points", ha="left", va="top", fontsize="small")
    ax.set_xlabel("threshold: share of queries pointing at the rarest token")
    ax.set_ylabel("rare-word heads (a group: its mean)")
    ax.set_ylim(bottom=0)
    ax.set_title("Rare-word heads over the criterion (sensitivity, not selection)", fontsize="medium")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize="x-small", frameon=False)
    fig.tight_layout(rect=(0, 0.06 * ((len(labels) + 1) // 2), 1, 1))
    return fig
