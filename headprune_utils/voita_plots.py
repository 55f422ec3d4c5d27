"""Figures of study 6 (Voita et al.): data in, figure out (``plotting.save_figure`` writes figure + data)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

ROLE_COLORS = {"other": "#e6e6e6", "positional": "#0173b2", "syntactic": "#de8f05", "rare-word": "#029e73",
               "several": "#cc78bc"}
ROLE_LETTERS = {"other": "", "positional": "P", "syntactic": "S", "rare-word": "R", "several": "+"}
SCORE_LABELS = {"gradient_importance": "gradient importance", "relevance": "first-order relevance",
                "ablation": "ablation importance", "confidence": "confidence", "entropy": "entropy (nats)",
                "l0_survival": "L0 survival level"}


def _grid(g: pd.DataFrame, value: str, n_layers: int, n_heads: int) -> np.ndarray:
    return g.pivot(index="layer", columns="head", values=value).reindex(index=range(n_layers), columns=range(n_heads)).to_numpy(dtype=float)


def score_maps(data: pd.DataFrame) -> plt.Figure:
    """Layer x head heatmap of every score (each on its own scale).

    data: columns score, layer, head, value (``specialized_heads_l0.score_map_data``).
    """
    scores = list(dict.fromkeys(data["score"]))
    n_layers, n_heads = int(data["layer"].max()) + 1, int(data["head"].max()) + 1
    fig, axes = plt.subplots(1, len(scores), figsize=(0.3 * n_heads * len(scores) + 1.5, 0.35 * n_layers + 1.4), squeeze=False)
    for ax, s in zip(axes[0], scores):
        im = ax.imshow(_grid(data[data["score"] == s], "value", n_layers, n_heads), cmap="viridis", aspect="equal")
        ax.grid(False)
        ax.set_title(SCORE_LABELS.get(s, s), fontsize="small")
        ax.set_xlabel("head", fontsize="small")
        ax.set_yticks(range(n_layers))
        ax.tick_params(labelsize=6)
        fig.colorbar(im, ax=ax, shrink=0.6)
    axes[0][0].set_ylabel("layer")
    return fig


def agreement_heatmap(summary: pd.DataFrame) -> plt.Figure:
    """Mean Spearman correlation between every pair of scores (over the fine-tuned models), annotated.

    summary: columns a, b, mean_spearman (``specialized_heads_l0.agreement_summary``).
    """
    names = list(dict.fromkeys(list(summary["a"]) + list(summary["b"])))
    m = pd.DataFrame(np.eye(len(names)), index=names, columns=names)
    for r in summary.itertuples():
        m.loc[r.a, r.b] = m.loc[r.b, r.a] = r.mean_spearman
    labels = [SCORE_LABELS.get(n, n) for n in names]
    sns.set_theme(style="white", context="notebook")
    fig, ax = plt.subplots(figsize=(1.1 * len(names) + 2.5, 0.9 * len(names) + 1.5))
    sns.heatmap(m.to_numpy(dtype=float), annot=True, fmt=".2f", cmap="RdBu_r", vmin=-1, vmax=1, square=True,
                xticklabels=labels, yticklabels=labels, ax=ax, cbar_kws={"label": "mean Spearman rho"})
    ax.tick_params(axis="x", rotation=40, labelsize=8)
    ax.tick_params(axis="y", rotation=0, labelsize=8)
    ax.set_title("rank agreement of head scores (mean over fine-tuned models)", fontsize="medium")
    fig.tight_layout()
    return fig


def role_map(data: pd.DataFrame) -> plt.Figure:
    """Layer x head map of the specialized heads by role, one panel per model (pre-trained, then each task).

    data: columns panel, layer, head, role (``role_survival.role_map_data``).
    """
    panels = list(dict.fromkeys(data["panel"]))
    roles = list(ROLE_COLORS)
    n_layers, n_heads = int(data["layer"].max()) + 1, int(data["head"].max()) + 1
    cmap = ListedColormap([ROLE_COLORS[r] for r in roles])
    fig, axes = plt.subplots(1, len(panels), figsize=(0.33 * n_heads * len(panels) + 1.5, 0.4 * n_layers + 1.6), squeeze=False)
    for ax, p in zip(axes[0], panels):
        g = data[data["panel"] == p].assign(code=lambda d: d["role"].map({r: i for i, r in enumerate(roles)}))
        ax.imshow(_grid(g, "code", n_layers, n_heads), cmap=cmap, vmin=-0.5, vmax=len(roles) - 0.5, aspect="equal")
        ax.grid(False)
        for r in g.itertuples():
            ax.text(r.head, r.layer, ROLE_LETTERS[r.role], ha="center", va="center", fontsize=6, color="white")
        ax.set_title(p if p == "pretrained" else f"{p} (most seeds)", fontsize="small")
        ax.set_xticks(range(0, n_heads, max(1, n_heads // 6)))
        ax.set_yticks(range(n_layers))
        ax.tick_params(labelsize=6)
        ax.set_xlabel("head", fontsize="small")
    axes[0][0].set_ylabel("layer")
    fig.legend(handles=[Patch(color=ROLE_COLORS[r], label=r) for r in roles], loc="lower center", ncol=len(roles),
               fontsize="small", bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def l0_curve(curve: pd.DataFrame) -> plt.Figure:
    """Dev score against heads kept, one panel per task: L0 masks (per seed, and the mean per lambda), and the
    random and gradient-importance masks at the same head counts; the full model dotted, a constant predictor dashed.

    curve: columns task, seed, lam, n_kept, score_l0, score_random_mean, score_importance, score_full, chance,
    metric (``specialized_heads_l0.l0_curve``).
    """
    tasks = list(dict.fromkeys(curve["task"]))
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.4 * len(tasks), 4.2), squeeze=False)
    series = (("score_l0", "L0 gates", "tab:blue", "o"), ("score_importance", "gradient importance", "tab:orange", "s"),
              ("score_random_mean", "random (mean of masks)", "tab:grey", "^"))
    for ax, task in zip(axes[0], tasks):
        c = curve[curve["task"] == task]
        mean = c.groupby("lam")[["n_kept", "score_l0", "score_importance", "score_random_mean"]].mean().sort_values("n_kept")
        for col, label, color, marker in series:
            ax.scatter(c["n_kept"], c[col], color=color, marker=marker, s=14, alpha=0.45)
            ax.plot(mean["n_kept"], mean[col], color=color, marker=marker, markersize=5, label=label)
        ax.axhline(c["score_full"].mean(), color="black", linestyle=":", linewidth=1, label="full model")
        ax.axhline(c["chance"].iloc[0], color="grey", linestyle="--", linewidth=1, label="constant predictor")
        ax.set_title(task)
        ax.set_xlabel("heads kept (of %d)" % int(c["n_heads_total"].iloc[0]) if "n_heads_total" in c else "heads kept")
        ax.set_ylabel(c["metric"].iloc[0])
    axes[0][0].legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    return fig


def survival_map(data: pd.DataFrame) -> plt.Figure:
    """Layer x head heatmap of the mean survival level (the largest lambda a head is kept at, as an index), one
    panel per task, with each head's role letter (P positional, S syntactic, R rare-word, + several).

    data: columns task, layer, head, mean_survival, role, n_lambdas (``role_survival.survival_map_data``).
    """
    tasks = list(dict.fromkeys(data["task"]))
    n_layers, n_heads = int(data["layer"].max()) + 1, int(data["head"].max()) + 1
    fig, axes = plt.subplots(1, len(tasks), figsize=(0.36 * n_heads * len(tasks) + 2, 0.42 * n_layers + 1.4), squeeze=False)
    top = max(1, int(data["n_lambdas"].max()))
    for ax, task in zip(axes[0], tasks):
        g = data[data["task"] == task]
        im = ax.imshow(_grid(g, "mean_survival", n_layers, n_heads), cmap="magma", vmin=0, vmax=top, aspect="equal")
        ax.grid(False)
        for r in g.itertuples():
            ax.text(r.head, r.layer, ROLE_LETTERS[r.role], ha="center", va="center", fontsize=7,
                    color="white" if r.mean_survival < 0.6 * top else "black")
        ax.set_title(f"{task}: mean survival level over seeds", fontsize="small")
        ax.set_xticks(range(0, n_heads, max(1, n_heads // 6)))
        ax.set_yticks(range(n_layers))
        ax.tick_params(labelsize=6)
        ax.set_xlabel("head", fontsize="small")
        fig.colorbar(im, ax=ax, shrink=0.7, label="survival level (0 = pruned at every lambda)")
    axes[0][0].set_ylabel("layer")
    return fig


def survival_by_role(data: pd.DataFrame) -> plt.Figure:
    """Survival level of every head of every model by role (box + points), one panel per task.

    data: columns task, role, survival (``role_survival.survival_with_roles``).
    """
    tasks = list(dict.fromkeys(data["task"]))
    order = [r for r in ROLE_COLORS if r in set(data["role"])]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        g = data[data["task"] == task]
        sns.boxplot(data=g, x="role", y="survival", order=order, ax=ax, color="0.9", fliersize=0)
        sns.stripplot(data=g, x="role", y="survival", order=order, ax=ax, hue="role", palette=ROLE_COLORS,
                      size=3, alpha=0.6, jitter=0.25, legend=False)
        counts = g["role"].value_counts()
        ax.set_xticks(range(len(order)))
        ax.set_xticklabels([f"{r}\n(n={counts.get(r, 0)})" for r in order], fontsize=8)
        ax.set_title(task)
        ax.set_xlabel("")
        ax.set_ylabel("survival level")
    fig.tight_layout()
    return fig
