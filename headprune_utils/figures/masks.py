"""Masks drawn as layer x head pictures (1 = kept, 0 = pruned), a row per strategy, a column per budget."""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from headprune_utils.figures.layout import mark_not_run


# a grid of more strategies than this (and few budgets) is wrapped into blocks side by side: study 7's 21
# type x strategy rows of two budgets made a figure 3.6 times as tall as wide
MAX_MASK_ROWS = 8
MAX_MASK_COLUMNS = 8


def mask_grid(rows: pd.DataFrame) -> plt.Figure:
    """Layer x head picture of each strategy's mask (a row per strategy, a column per budget); dark = pruned.
    More than :data:`MAX_MASK_ROWS` strategies of few budgets are wrapped into blocks of rows side by side (each
    block its own budget columns), so the figure is not a narrow column.

    rows: columns strategy, budget, layer, head, kept (``strategy_sweep.example_masks``).
    """
    strategies = list(dict.fromkeys(rows["strategy"]))
    budgets = sorted(rows["budget"].unique())
    n_layers, n_heads = int(rows["layer"].max()) + 1, int(rows["head"].max()) + 1
    blocks = 1
    while (len(strategies) / blocks > MAX_MASK_ROWS and (blocks + 1) * len(budgets) <= MAX_MASK_COLUMNS):
        blocks += 1
    per_block = math.ceil(len(strategies) / blocks)
    scale = 0.16
    fig, axes = plt.subplots(per_block, len(budgets) * blocks, squeeze=False,
                             figsize=(max(2.2, scale * n_heads + 0.8) * len(budgets) * blocks
                                      + (blocks - 1) * 1.2, (scale * n_layers + 0.5) * per_block))
    for k in range(per_block * blocks):
        for j in range(len(budgets)):
            if k >= len(strategies):
                axes[k % per_block][(k // per_block) * len(budgets) + j].set_visible(False)
    for k, st in enumerate(strategies):
        i, first = k % per_block, (k // per_block) * len(budgets)
        for j, b in enumerate(budgets):
            ax = axes[i][first + j]
            g = rows[(rows["strategy"] == st) & (rows["budget"] == b)]
            if g.empty:  # a budget only some strategies have (the standard profile's iterative_importance curve)
                mark_not_run(ax, "not run")
                if i == 0:
                    ax.set_title(f"{100 * b:.0f}% pruned", fontsize="small")
                if j == 0:
                    ax.set_ylabel(st, fontsize="small", rotation=0, ha="right", va="center")
                continue
            grid = g.pivot(index="layer", columns="head", values="kept").to_numpy()
            ax.imshow(grid, cmap="Greys_r", vmin=0, vmax=1, aspect="equal", origin="upper")
            ax.grid(False)  # a style's grid lines (seaborn's whitegrid, set by an earlier figure) would cut the layers
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
