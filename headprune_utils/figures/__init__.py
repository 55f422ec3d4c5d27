"""Figures: data in, figure out; :func:`save.save_figure` writes each figure with its data beside it.

Each module is named for the kind of picture it draws, whichever study draws it (several studies share
``curves.score_by_strategy``, ``masks.mask_grid``, ``contrasts.contrast_forest``, the head maps):

    save           save_figure: figures/<name>.png and its data as tables/<name>.csv
    labels         the display names and colours every figure uses (regimes, attention types, roles, scores,
                   distances, measures)
    curves         a score against how much is pruned or changed (share pruned, budget, heads kept, lambda, dropout)
    masks          masks as layer x head pictures
    contrasts      paired contrasts with their confidence intervals (a forest plot)
    head_maps      layer x head grids of one value or label per head (scores, roles, survival, extra change, groups)
    distributions  per-head (or per-model) values as boxes and points by group
    matrices       square matrices: distances between heads (with the dendrogram), agreement between measurements

The data a figure takes is a table made by a study's analysis module (``studies/<study>_analysis.py``); each
function's docstring names the columns and the function that makes them.
"""
from headprune_utils.figures import contrasts, curves, distributions, head_maps, labels, masks, matrices, save
from headprune_utils.figures.save import save_figure

__all__ = ["contrasts", "curves", "distributions", "head_maps", "labels", "masks", "matrices", "save", "save_figure"]
