"""Head maps: a layer x head grid per panel, one value or label per head (scores, roles, survival, extra change,
cluster), heads in the one convention ``[n_layers, n_heads]``, layer-major.
"""
from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import ListedColormap, to_rgb
from matplotlib.patches import Patch

from headprune_utils.figures.labels import L0_SETTING_TITLES, MEASURE_LABELS, ROLE_COLORS, ROLE_LETTERS, SCORE_LABELS


def _grid(g: pd.DataFrame, value: str, n_layers: int, n_heads: int) -> np.ndarray:
    return g.pivot(index="layer", columns="head", values=value).reindex(index=range(n_layers), columns=range(n_heads)).to_numpy(dtype=float)


# ---------------------------------------------------------------------------------------------- layout
# Head maps are laid out in inches (no tight_layout): every head is a square cell of one size in every panel, a
# colour bar is exactly as tall as its heat map, and titles are wrapped to the panel's width, so small grids
# (study 7's 3 x 4 encoder) and large ones (BERT's 12 x 12) both read well. Font sizes in points.
_TICK_PT, _LABEL_PT, _TITLE_PT, _SUPTITLE_PT = 8.0, 9.0, 9.5, 10.0
_LEFT, _BOTTOM, _GAP, _TOP = 0.6, 0.55, 0.35, 0.08        # inches: y labels, x labels, between panels, above
_CB_PAD, _CB_W, _CB_ROOM = 0.08, 0.14, 0.6                 # colour bar: gap, width, room for its tick labels


def _style_head_axes(ax, title: str, n_layers: int, n_heads: int, ylabel: str | None) -> None:
    """One head map's axes: its title, head and layer ticks, the "head" label; y tick labels and ``ylabel`` only
    on the first panel of a row (``ylabel`` not None)."""
    ax.set_title(title, fontsize=_TITLE_PT)
    ax.grid(False)
    ax.set_xticks(range(0, n_heads, 1 if n_heads <= 16 else 2))
    ax.set_yticks(range(n_layers))
    ax.tick_params(labelsize=_TICK_PT, labelleft=ylabel is not None)
    ax.set_xlabel("head", fontsize=_LABEL_PT)
    if ylabel is not None:
        ax.set_ylabel(ylabel, fontsize=_LABEL_PT)


def _cell_inches(n_heads: int) -> float:
    """Side of one head's cell: 0.5 in for a few heads per layer, down to 0.28 in from 8 heads per layer on."""
    return float(np.clip(2.0 / max(1, n_heads), 0.28, 0.5))


def _wrap(text: str, width_in: float, pt: float) -> str:
    """``text`` broken into lines no wider than ``width_in`` inches at ``pt`` points (0.6 em per character)."""
    return textwrap.fill(text, max(8, int(width_in * 72 / (0.6 * pt))), break_long_words=False)


def _text_height(text: str, pt: float) -> float:
    return (text.count("\n") + 1) * pt * 1.3 / 72 if text else 0.0


def _ink(color) -> str:
    """Black or white, whichever contrasts more with ``color`` (WCAG relative luminance): dark letters on light
    cells (the orange, green and pink roles, the light end of a colour map), white on dark ones."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(color)]
    lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "black" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "white"


def _letter_points(cell_in: float) -> float:
    """Font size of a letter inside a cell: about half the cell's side, at most 16 pt."""
    return float(min(16.0, 0.55 * 72 * cell_in))


def _head_panels(n_panels: int, n_layers: int, n_heads: int, titles: list[str], colorbar: str | None = None,
                 suptitle: str = "", bottom_extra: float = 0.0):
    """A figure with ``n_panels`` layer x head panels in a row, each ``n_heads`` x ``n_layers`` square cells.

    colorbar: None, ``"each"`` (a colour bar right of every panel) or ``"shared"`` (one right of the last panel);
    each colour bar as tall as the panels. bottom_extra: inches below the x labels (for a legend).
    Returns (fig, axes, colour-bar axes, cell side in inches, the figure's size in inches).
    """
    cell = _cell_inches(n_heads)
    pw, ph = n_heads * cell, n_layers * cell
    titles = [_wrap(t, pw + 0.2, _TITLE_PT) for t in titles]
    cb_block = _CB_PAD + _CB_W + _CB_ROOM
    step = pw + (cb_block if colorbar == "each" else 0.0) + _GAP
    width = _LEFT + (n_panels - 1) * step + pw + (cb_block if colorbar else 0.1)
    suptitle = _wrap(suptitle, width - 0.2, _SUPTITLE_PT) if suptitle else ""
    title_h = max(_text_height(t, _TITLE_PT) for t in titles) + 0.1
    sup_h = _text_height(suptitle, _SUPTITLE_PT) + (0.1 if suptitle else 0.0)
    bottom = _BOTTOM + bottom_extra
    height = bottom + ph + title_h + sup_h + _TOP
    fig = plt.figure(figsize=(width, height))
    axes, caxes = [], []
    for i, title in enumerate(titles):
        x = _LEFT + i * step
        ax = fig.add_axes((x / width, bottom / height, pw / width, ph / height))
        _style_head_axes(ax, title, n_layers, n_heads, "layer" if i == 0 else None)
        axes.append(ax)
        if colorbar == "each" or (colorbar == "shared" and i == n_panels - 1):
            caxes.append(fig.add_axes(((x + pw + _CB_PAD) / width, bottom / height, _CB_W / width, ph / height)))
    if suptitle:
        fig.suptitle(suptitle, fontsize=_SUPTITLE_PT, y=1 - _TOP / height, va="top")
    return fig, axes, caxes, cell, (width, height)


def _colorbar(fig: plt.Figure, im, cax, label: str = "") -> None:
    cb = fig.colorbar(im, cax=cax)
    cb.ax.tick_params(labelsize=_TICK_PT)
    if label:
        cb.set_label(label, fontsize=_LABEL_PT)


def score_maps(data: pd.DataFrame) -> plt.Figure:
    """Layer x head heatmap of every score (each on its own scale, its colour bar beside it).

    data: columns score, layer, head, value (``specialized_heads_l0_analysis.score_map_data``).
    """
    scores = list(dict.fromkeys(data["score"]))
    n_layers, n_heads = int(data["layer"].max()) + 1, int(data["head"].max()) + 1
    fig, axes, caxes, _, _ = _head_panels(len(scores), n_layers, n_heads, [SCORE_LABELS.get(s, s) for s in scores],
                                          colorbar="each")
    for ax, cax, s in zip(axes, caxes, scores):
        im = ax.imshow(_grid(data[data["score"] == s], "value", n_layers, n_heads), cmap="viridis", aspect="equal")
        _colorbar(fig, im, cax)
    return fig


def role_map(data: pd.DataFrame) -> plt.Figure:
    """Layer x head map of the specialized heads by role, one panel per model (pre-trained, then each task); each
    head's role letter (P positional, S syntactic, R rare-word, + several) sized to its cell, dark on light roles.

    data: columns panel, layer, head, role (``role_survival.role_map_data``).
    """
    panels = list(dict.fromkeys(data["panel"]))
    roles = list(ROLE_COLORS)
    n_layers, n_heads = int(data["layer"].max()) + 1, int(data["head"].max()) + 1
    cmap = ListedColormap([ROLE_COLORS[r] for r in roles])
    titles = [(p if p == "pretrained" else f"{p} (most seeds)")
              + (": no specialized head" if (data.loc[data["panel"] == p, "role"] == "other").all() else "")
              for p in panels]
    cell = _cell_inches(n_heads)
    approx_w = _LEFT + len(panels) * (n_heads * cell + _GAP)
    ncol = max(1, min(len(roles), int(approx_w / 1.25)))
    legend_rows = -(-len(roles) // ncol)
    fig, axes, _, cell, (width, height) = _head_panels(len(panels), n_layers, n_heads, titles,
                                                       bottom_extra=0.1 + 0.24 * legend_rows)
    size = _letter_points(cell)
    for ax, p in zip(axes, panels):
        g = data[data["panel"] == p].assign(code=lambda d: d["role"].map({r: i for i, r in enumerate(roles)}))
        ax.imshow(_grid(g, "code", n_layers, n_heads), cmap=cmap, vmin=-0.5, vmax=len(roles) - 0.5, aspect="equal")
        for r in g.itertuples():
            if ROLE_LETTERS[r.role]:
                ax.text(r.head, r.layer, ROLE_LETTERS[r.role], ha="center", va="center", fontsize=size,
                        fontweight="bold", color=_ink(ROLE_COLORS[r.role]))
    handles = [Patch(facecolor=ROLE_COLORS[r], edgecolor="0.6", label=f"{ROLE_LETTERS[r]} {r}".strip()) for r in roles]
    fig.legend(handles=handles, loc="upper center", ncol=ncol, fontsize=_LABEL_PT, frameon=False,
               bbox_to_anchor=(0.5, (0.1 + 0.24 * legend_rows) / height))
    return fig


def survival_map(data: pd.DataFrame) -> plt.Figure:
    """Layer x head heatmap of the mean survival level (the largest lambda a head is kept at, as an index), one
    panel per task (study 7: per L0 setting), one colour bar for all, with each head's role letter (P positional,
    S syntactic, R rare-word, + several), dark on light cells.

    data: columns task, layer, head, mean_survival, role, n_lambdas (``role_survival.survival_map_data``).
    """
    tasks = list(dict.fromkeys(data["task"]))
    n_layers, n_heads = int(data["layer"].max()) + 1, int(data["head"].max()) + 1
    top = max(1, int(data["n_lambdas"].max()))
    fig, axes, caxes, cell, _ = _head_panels(
        len(tasks), n_layers, n_heads, [L0_SETTING_TITLES.get(t, t) for t in tasks], colorbar="shared",
        suptitle=f"mean survival level over seeds (the index of the largest of {top} lambdas a head is kept at; "
                 "0 = never kept). Letters: P positional, S syntactic, R rare-word, + several")
    size = _letter_points(cell)
    for ax, task in zip(axes, tasks):
        g = data[data["task"] == task]
        im = ax.imshow(_grid(g, "mean_survival", n_layers, n_heads), cmap="magma", vmin=0, vmax=top, aspect="equal")
        for r in g.itertuples():
            if ROLE_LETTERS[r.role]:
                ink = _ink(im.cmap(im.norm(r.mean_survival))) if r.mean_survival == r.mean_survival else "black"
                ax.text(r.head, r.layer, ROLE_LETTERS[r.role], ha="center", va="center", fontsize=size,
                        fontweight="bold", color=ink)
    _colorbar(fig, im, caxes[0], "survival level")
    return fig


def extra_change_heatmaps(grid: pd.DataFrame) -> plt.Figure:
    """Layer x head heatmaps of the mean extra change: a row per measure, a column for the noise baseline and
    one per (strategy, budget); a diverging scale centred on 0 shared within a row (its colour bar right of the
    row, as tall as the heat maps). A kept head's value is its mean over the runs that keep it; grey: no value (a
    head the strategy prunes in every run; in the noise baseline, a head no setting keeps in any run).

    Laid out in inches like the other head maps (square cells of one size, no ``tight_layout``), the measure
    named left of each row.

    grid: columns strategy, budget, measure, layer, head, x, x_noise (``compensation_analysis.heatmap_data``).
    """
    measures = [m for m in MEASURE_LABELS if m in set(grid["measure"])]
    settings = list(dict.fromkeys(zip(grid["strategy"], grid["budget"])))
    n_layers, n_heads = int(grid["layer"].max()) + 1, int(grid["head"].max()) + 1
    cell = _cell_inches(n_heads)
    pw, ph = n_heads * cell, n_layers * cell
    titles = [_wrap(t, pw + 0.2, _TITLE_PT)
              for t in ["noise baseline", *[f"{st} {100 * b:.0f}%" for st, b in settings]]]
    cols = len(titles)
    row_labels = [_wrap(MEASURE_LABELS[m], ph + 0.3, _LABEL_PT) + "\nlayer" for m in measures]
    line = _LABEL_PT * 1.3 / 72
    left = _LEFT + line * (max(l.count("\n") for l in row_labels) if row_labels else 0)
    cb_block = _CB_PAD + _CB_W + _CB_ROOM
    width = left + cols * pw + (cols - 1) * _GAP + cb_block
    title_h = max(_text_height(t, _TITLE_PT) for t in titles) + 0.1
    row_h = title_h + ph + _BOTTOM
    height = _TOP + len(measures) * row_h
    fig = plt.figure(figsize=(width, height))
    for i, m in enumerate(measures):
        bottom = height - _TOP - (i + 1) * row_h + _BOTTOM
        g = grid[grid["measure"] == m]
        lim = float(np.nanmax(np.abs(g[["x", "x_noise"]].to_numpy()))) or 1.0
        noise = g.groupby(["layer", "head"], as_index=False)["x_noise"].mean()  # the baseline: mean over settings
        panels = [_grid(noise, "x_noise", n_layers, n_heads)]
        panels += [_grid(g[(g["strategy"] == st) & (g["budget"] == b)], "x", n_layers, n_heads) for st, b in settings]
        for j, (title, data) in enumerate(zip(titles, panels)):
            x = left + j * (pw + _GAP)
            ax = fig.add_axes((x / width, bottom / height, pw / width, ph / height))
            ax.set_facecolor("0.8")
            im = ax.imshow(data, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="equal")
            _style_head_axes(ax, title, n_layers, n_heads, row_labels[i] if j == 0 else None)
        x_cb = left + cols * pw + (cols - 1) * _GAP + _CB_PAD
        _colorbar(fig, im, fig.add_axes((x_cb / width, bottom / height, _CB_W / width, ph / height)), "extra change")
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
