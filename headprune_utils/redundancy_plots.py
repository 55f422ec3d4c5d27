"""Figures of the redundancy studies: data in, figure out (``plotting.save_figure`` writes figure + data)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from scipy.cluster import hierarchy

METRIC_LABELS = {"js": "Jensen-Shannon / ln 2", "hellinger": "Hellinger", "cosine": "1 - cosine",
                 "pearson": "(1 - Pearson r) / 2", "dcor": "1 - distance correlation", "procrustes": "Procrustes disparity"}


def head_labels(shape: tuple[int, int]) -> list[str]:
    n_layers, n_heads = shape
    return [f"{l}.{h}" for l in range(n_layers) for h in range(n_heads)]


def dendrogram_data(labels: np.ndarray, order: np.ndarray, shape: tuple[int, int]) -> pd.DataFrame:
    """The data of :func:`dendrogram_heatmap`: per position along the dendrogram, the head (``layer.head``) and
    its group (0: a unique head)."""
    names = np.asarray(head_labels(shape))
    return pd.DataFrame({"position": range(len(names)), "head": names[order], "group": np.asarray(labels)[order]})


def cluster_map_data(labels: np.ndarray, shape: tuple[int, int]) -> pd.DataFrame:
    """The data of :func:`cluster_map`: per head (layer-major), its layer, head and group (0: a unique head)."""
    n_layers, n_heads = shape
    return pd.DataFrame({"layer": np.repeat(np.arange(n_layers), n_heads), "head": np.tile(np.arange(n_heads), n_layers),
                         "cluster": labels})


def matrix_tidy(mats: dict[str, np.ndarray], shape: tuple[int, int]) -> pd.DataFrame:
    """Long table (metric, head_a, head_b, distance) of square matrices over flat head ids."""
    labels = head_labels(shape)
    rows = []
    for m, d in mats.items():
        n = d.shape[0]
        ii, jj = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        rows.append(pd.DataFrame({"metric": m, "head_a": np.asarray(labels)[ii.ravel()],
                                  "head_b": np.asarray(labels)[jj.ravel()], "distance": d.ravel()}))
    return pd.concat(rows, ignore_index=True)


def matrix_heatmaps(mats: dict[str, np.ndarray], order: np.ndarray, shape: tuple[int, int]) -> plt.Figure:
    """One heatmap per distance, heads in ``order`` (e.g. the dendrogram of one distance), each on its own scale."""
    n = len(mats)
    cols = min(3, n)
    rows = int(np.ceil(n / cols))
    sns.set_theme(style="white", context="notebook")
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 4.2 * rows), squeeze=False)
    for ax, (m, d) in zip(axes.ravel(), mats.items()):
        sub = d[np.ix_(order, order)]
        off = sub[~np.eye(len(sub), dtype=bool)]
        im = ax.imshow(sub, cmap="viridis_r", vmin=np.quantile(off, 0.01), vmax=np.quantile(off, 0.99))
        ax.set_title(METRIC_LABELS.get(m, m), fontsize="medium")
        ax.set_xticks([])
        ax.set_yticks([])
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    fig.suptitle("distance between heads (same head order in every panel; yellow = small distance = redundant)", fontsize="small")
    fig.tight_layout()
    return fig


def dendrogram_heatmap(d: np.ndarray, linkage: np.ndarray, labels: np.ndarray, order: np.ndarray,
                       names: list[str], metric: str) -> plt.Figure:
    """Dendrogram (average linkage) beside the matrix ordered by it, groups outlined (label 0: unique heads,
    not outlined). ``d``, ``labels``, ``names`` are over all heads (``order`` indexes them)."""
    sns.set_theme(style="white", context="notebook")
    fig, (ax_d, ax_m) = plt.subplots(1, 2, figsize=(13, 6.5), gridspec_kw={"width_ratios": [1, 2.2]})
    hierarchy.dendrogram(linkage, ax=ax_d, orientation="left", no_labels=True, color_threshold=None,
                         above_threshold_color="grey")
    ax_d.invert_yaxis()  # row 0 of the matrix at the top, as the dendrogram's first leaf
    ax_d.set_xlabel("merge distance")
    ax_d.set_yticks([])
    sub = d[np.ix_(order, order)]
    off = sub[~np.eye(len(sub), dtype=bool)]
    im = ax_m.imshow(sub, cmap="viridis_r", vmin=np.quantile(off, 0.01), vmax=np.quantile(off, 0.99))
    lab = np.asarray(labels)[order]
    start = 0
    for i in range(1, len(lab) + 1):
        if i == len(lab) or lab[i] != lab[start]:
            if lab[start] > 0:
                ax_m.add_patch(plt.Rectangle((start - 0.5, start - 0.5), i - start, i - start, fill=False, edgecolor="red", linewidth=1))
            start = i
    names = np.asarray(names)[order]
    step = max(1, len(names) // 36)
    ax_m.set_yticks(range(0, len(names), step))
    ax_m.set_yticklabels(names[::step], fontsize=6)
    ax_m.set_xticks([])
    ax_m.set_title(f"{METRIC_LABELS.get(metric, metric)}, ordered by the dendrogram; red = groups (layer.head)", fontsize="small")
    fig.colorbar(im, ax=ax_m, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig


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


def probe_agreement(who_t: pd.DataFrame, metric: str) -> plt.Figure:
    """Mantel r between the pre-trained model's matrices on every two probes (one distance)."""
    t = who_t[who_t["metric"] == metric]
    names = list(dict.fromkeys([*t["probe_a"], *t["probe_b"]]))
    r = pd.DataFrame(np.eye(len(names)), index=names, columns=names)
    for row in t.itertuples():
        r.loc[row.probe_a, row.probe_b] = r.loc[row.probe_b, row.probe_a] = row.mantel_r
    sns.set_theme(style="white", context="notebook")
    fig, ax = plt.subplots(figsize=(0.6 * len(names) + 2.5, 0.55 * len(names) + 1.5))
    sns.heatmap(r, annot=True, fmt=".2f", cmap="mako", vmin=min(0, float(r.values.min())), vmax=1, ax=ax,
                annot_kws={"fontsize": 7}, cbar_kws={"label": "Mantel r"})
    ax.set_title(f"same patterns on every input? ({METRIC_LABELS.get(metric, metric)})", fontsize="small")
    fig.tight_layout()
    return fig


def phase_plot(when_t: pd.DataFrame) -> plt.Figure:
    """Mantel r between the pre-trained and fine-tuned matrices, per distance (points: task x seed), with the
    split-half ceiling of the probe (grey)."""
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    metrics = list(dict.fromkeys(when_t["metric"]))
    sns.stripplot(data=when_t, x="metric", y="mantel_r", hue="task", order=metrics, dodge=True, ax=ax, size=6)
    ceil = when_t.groupby("metric")["split_half_r"].mean().reindex(metrics)
    ax.scatter(range(len(metrics)), ceil.values, marker="_", s=900, color="grey", label="split-half ceiling")
    ax.set_ylim(min(0, float(when_t["mantel_r"].min()) - 0.05), 1.02)
    ax.set_ylabel("Mantel r, pre-trained vs fine-tuned")
    ax.legend(fontsize="small", loc="lower left")
    fig.tight_layout()
    return fig


def dropout_plot(runs: pd.DataFrame) -> plt.Figure:
    """Mean off-diagonal distance (lower = more redundant) after continued MLM training, by dropout ratio;
    a line per seed, the pre-trained model dashed. One panel per distance."""
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
