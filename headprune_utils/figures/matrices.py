"""Square matrices: the distances between every two heads (redundancy matrices, ordered by a dendrogram) and the
agreement between every two measurements (probes, head scores), with the data helpers that turn them into tables.
"""
from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from mpl_toolkits.axes_grid1 import make_axes_locatable
from scipy.cluster import hierarchy

from headprune_utils.figures.labels import METRIC_LABELS, SCORE_LABELS


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
    # one colour: scipy's default threshold (0.7 of the largest merge) would colour groups the red boxes do not draw
    hierarchy.dendrogram(linkage, ax=ax_d, orientation="left", no_labels=True, color_threshold=0,
                         above_threshold_color="0.35")
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
    step = max(1, -(-len(names) // 72))  # every head named up to 72 heads (MiniLM), every k-th beyond
    ax_m.set_yticks(range(0, len(names), step))
    ax_m.set_yticklabels(names[::step], fontsize=6 if len(names[::step]) <= 48 else 5)
    ax_m.set_xticks([])
    ax_m.set_title(f"{METRIC_LABELS.get(metric, metric)}, ordered by the dendrogram; red = groups (layer.head)", fontsize="small")
    fig.colorbar(im, ax=ax_m, fraction=0.046, pad=0.04, label="distance (lower = more redundant)")
    fig.tight_layout()
    return fig


def probe_agreement(who_t: pd.DataFrame, metric: str, model: str = "pre-trained model") -> plt.Figure:
    """Mantel r between a model's matrices on every two probes (one distance); who_t:
    ``redundancy_patterns_analysis.who``; ``model`` names the model in the title (study 4 draws the pre-trained
    model and its randomly initialised control)."""
    t = who_t[who_t["metric"] == metric]
    names = list(dict.fromkeys([*t["probe_a"], *t["probe_b"]]))
    r = pd.DataFrame(np.eye(len(names)), index=names, columns=names)
    for row in t.itertuples():
        r.loc[row.probe_a, row.probe_b] = r.loc[row.probe_b, row.probe_a] = row.mantel_r
    sns.set_theme(style="white", context="notebook")
    fig, ax = plt.subplots(figsize=(0.6 * len(names) + 2.5, 0.55 * len(names) + 1.5))
    sns.heatmap(r, annot=True, fmt=".2f", cmap="mako", vmin=min(0, float(r.values.min())), vmax=1, ax=ax,
                annot_kws={"fontsize": 7}, cbar_kws={"label": "Mantel r"})
    ax.set_title(f"same patterns on every input? {model} ({METRIC_LABELS.get(metric, metric)})", fontsize="small")
    fig.tight_layout()
    return fig


def _wrap(text: str, width: int) -> str:
    """``text`` in lines of at most ``width`` characters, broken between words only (never inside a word)."""
    return textwrap.fill(text, max(1, width), break_long_words=False, break_on_hyphens=False)


def _fit_column_labels(fig: plt.Figure, ax, labels: list[str], fontsize: float) -> None:
    """Horizontal x tick labels on a heat map of ``len(labels)`` columns, each broken into lines no wider than its
    column, and the title broken into lines no wider than the heat map (measured on the rendered figure; laid out
    again with ``tight_layout`` after each change). A single word wider than a column turns the labels upright."""
    n = len(labels)
    longest_word = max((len(w) for w in " ".join(labels).split()), default=1)
    width = max((len(l) for l in labels), default=1)
    title = ax.get_title()
    title_width = len(title)
    upright = False
    for _ in range(6):
        if upright:
            ax.set_xticklabels([_wrap(l, 24) for l in labels], rotation=90, ha="center", fontsize=fontsize)
        else:
            ax.set_xticklabels([_wrap(l, width) for l in labels], rotation=0, ha="center", fontsize=fontsize)
        ax.set_title(_wrap(title, title_width), fontsize=ax.title.get_fontsize())
        fig.tight_layout()
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        box = ax.get_window_extent(r)
        cell = box.width / n
        done = True
        w_title = ax.title.get_window_extent(r).width
        if w_title > box.width:
            longest_line = max(len(line) for line in ax.get_title().split("\n"))
            title_width = max(8, min(title_width - 1, int(0.95 * longest_line * box.width / w_title)))
            done = False
        if not upright:
            widest = max(ax.get_xticklabels(), key=lambda t: t.get_window_extent(r).width)
            w = widest.get_window_extent(r).width
            if w > 0.92 * cell:
                longest_line = max(len(line) for line in widest.get_text().split("\n"))
                new = min(width - 1, int(0.92 * longest_line * cell / w))
                upright = new < longest_word  # a word alone is wider than a column: no wrapping fits
                width = new
                done = False
        if done:
            return


def agreement_heatmap(summary: pd.DataFrame) -> plt.Figure:
    """Mean Spearman correlation between every pair of scores (over the fine-tuned models), annotated; the score
    names under the columns broken into lines that fit a column (upright when even a word does not).

    summary: columns a, b, mean_spearman (``specialized_heads_l0_analysis.agreement_summary``).
    """
    names = list(dict.fromkeys(list(summary["a"]) + list(summary["b"])))
    m = pd.DataFrame(np.eye(len(names)), index=names, columns=names)
    for r in summary.itertuples():
        m.loc[r.a, r.b] = m.loc[r.b, r.a] = r.mean_spearman
    labels = [SCORE_LABELS.get(n, n) for n in names]
    sns.set_theme(style="white", context="notebook")
    # at least 6 x 4.5 in: room for the long score names and the title beside two or three columns
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(names) + 2.5), max(4.5, 0.9 * len(names) + 1.5)))
    # the colour bar on the heat map's own divider: exactly as tall as the (square-celled) heat map, whichever
    # of the figure's width or height limits it
    cax = make_axes_locatable(ax).append_axes("right", size=0.22, pad=0.15)
    sns.heatmap(m.to_numpy(dtype=float), annot=True, fmt=".2f", cmap="RdBu_r", vmin=-1, vmax=1, square=True,
                xticklabels=labels, yticklabels=[_wrap(l, 24) for l in labels], ax=ax, cbar_ax=cax,
                cbar_kws={"label": "mean Spearman rho"})
    ax.tick_params(axis="y", rotation=0, labelsize=8)
    ax.set_title("rank agreement of head scores (mean over fine-tuned models)", fontsize="medium")
    _fit_column_labels(fig, ax, labels, 8)
    return fig
