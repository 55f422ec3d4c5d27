"""Writing a figure: the PNG and, beside it, the table of its data (so a reader can re-plot without re-running)."""
from __future__ import annotations

import warnings

import matplotlib.pyplot as plt
import pandas as pd

from headprune_utils.figures.layout import FigureLayoutWarning, layout_problems
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import atomic_write_csv


def save_figure(fig: plt.Figure, data: pd.DataFrame, paths: StudyPaths, name: str) -> None:
    """``figures/<name>.png`` and ``tables/<name>.csv`` (the figure's data). A layout problem
    (:func:`headprune_utils.figures.layout.layout_problems`) is a :class:`FigureLayoutWarning` naming it."""

    problems = layout_problems(fig)
    if problems:
        warnings.warn(f"figure {name!r}: " + "; ".join(problems), FigureLayoutWarning, stacklevel=3)
    paths.figures.mkdir(parents=True, exist_ok=True)
    tmp = paths.figure(name).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120, bbox_inches="tight", metadata={"Software": None})
    tmp.replace(paths.figure(name))
    atomic_write_csv(paths.table(name), data)
