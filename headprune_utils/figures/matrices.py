"""Square matrices: the distances between every two heads (redundancy matrices, ordered by a dendrogram) and the
agreement between every two measurements (probes, head scores), with the data helpers that turn them into tables.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from scipy.cluster import hierarchy

from .labels import METRIC_LABELS, SCORE_LABELS


def head_labels(shape: tuple[int, int]) -> list[str]:
    n_layers, n_heads = shape
    return [f"{l}.{h}" for l in range(n_layers) for h in range(n_heads)]


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


def dendrogram_data(labels: np.ndarray, order: np.ndarray, shape: tuple[int, int]) -> pd.DataFrame:
    """The data of :func:`dendrogram_heatmap`: per position along the dendrogram, the head (``layer.head``) and
    its group (0: a unique head)."""
    names = np.asarray(head_labels(shape))
    return pd.DataFrame({"position": range(len(names)), "head": names[order], "group": np.asarray(labels)[order]})


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


def probe_agreement(who_t: pd.DataFrame, metric: str) -> plt.Figure:
    """Mantel r between the pre-trained model's matrices on every two probes (one distance); who_t:
    ``redundancy_patterns_analysis.who``."""
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


def agreement_heatmap(summary: pd.DataFrame) -> plt.Figure:
    """Mean Spearman correlation between every pair of scores (over the fine-tuned models), annotated.

    summary: columns a, b, mean_spearman (``specialized_heads_l0_analysis.agreement_summary``).
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
