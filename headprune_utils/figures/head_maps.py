"""Head maps: a layer x head grid per panel, one value or label per head (scores, roles, survival, extra change,
cluster), heads in the one convention ``[n_layers, n_heads]``, layer-major.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from .labels import MEASURE_LABELS, ROLE_COLORS, ROLE_LETTERS, SCORE_LABELS


def _grid(g: pd.DataFrame, value: str, n_layers: int, n_heads: int) -> np.ndarray:
    return g.pivot(index="layer", columns="head", values=value).reindex(index=range(n_layers), columns=range(n_heads)).to_numpy(dtype=float)


def score_maps(data: pd.DataFrame) -> plt.Figure:
    """Layer x head heatmap of every score (each on its own scale).

    data: columns score, layer, head, value (``specialized_heads_l0_analysis.score_map_data``).
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


def extra_change_heatmaps(grid: pd.DataFrame) -> plt.Figure:
    """Layer x head heatmaps of the mean extra change: a row per measure, a column for the noise baseline and
    one per (strategy, budget); a diverging scale centred on 0 shared within a row.

    grid: columns strategy, budget, measure, layer, head, x, x_noise (``compensation_analysis.heatmap_data``).
    """
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


def cluster_map_data(labels: np.ndarray, shape: tuple[int, int]) -> pd.DataFrame:
    """The data of :func:`cluster_map`: per head (layer-major), its layer, head and group (0: a unique head)."""
    n_layers, n_heads = shape
    return pd.DataFrame({"layer": np.repeat(np.arange(n_layers), n_heads), "head": np.tile(np.arange(n_heads), n_layers),
                         "cluster": labels})


def cluster_map(labels: np.ndarray, shape: tuple[int, int]) -> plt.Figure:
    """Layer x head grid, each head coloured and numbered by its group (0: a unique head, white)."""
    n_layers, n_heads = shape
    grid = np.asarray(labels).reshape(shape)
    k = int(grid.max())
    sns.set_theme(style="white", context="notebook")
    fig, ax = plt.subplots(figsize=(0.45 * n_heads + 1.5, 0.45 * n_layers + 1))
    cmap = plt.get_cmap("tab20", max(k, 2))
    ax.imshow(np.ma.masked_where(grid == 0, grid - 1), cmap=cmap, vmin=-0.5, vmax=max(k, 2) - 0.5, aspect="equal")
    for l in range(n_layers):
        for h in range(n_heads):
            ax.text(h, l, str(grid[l, h]), ha="center", va="center", fontsize=7)
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(f"group of each head ({k} groups; 0 = unique head)", fontsize="small")
    fig.tight_layout()
    return fig
