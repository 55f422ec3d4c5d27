"""A figure's layout, checked with matplotlib's own renderer: no two tick labels overlap, no two titles overlap
(nor a title another panel), a colour bar is no taller than the heat map it belongs to, no panel is empty.

:func:`headprune_utils.figures.save.save_figure` runs :func:`layout_problems` on every figure a study writes and
warns (:class:`FigureLayoutWarning`) with what it finds, so a notebook run is never stopped by a visual problem
but the smoke tests, which run every study's figures at smoke scale, fail on it.
"""
from __future__ import annotations

import itertools

__all__ = ["layout_problems", "FigureLayoutWarning", "mark_not_run"]


class FigureLayoutWarning(UserWarning):
    """A figure has overlapping labels or titles, an over-tall colour bar or an empty panel."""


def _overlap(a, b, tol: float = 0.5) -> bool:
    """Two display-space boxes share an area wider and taller than ``tol`` pixels (touching is not overlapping)."""
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w > tol and h > tol


def _drawn_tick_labels(axis) -> list:
    """The tick labels ``axis`` draws: visible, non-empty, at a tick inside the view interval."""
    lo, hi = sorted(axis.get_view_interval())
    span = hi - lo
    out = []
    for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
        loc = tick.get_loc()
        if loc is None or not (lo - 1e-9 * span <= loc <= hi + 1e-9 * span):
            continue
        for label in (tick.label1, tick.label2):
            if label.get_visible() and label.get_text().strip():
                out.append(label)
    return out


def mark_not_run(ax, text: str = "not run in this profile") -> None:
    """A panel with nothing to draw on purpose (this cell of the grid was not run): says so, no ticks, no frame,
    its labels kept (a row's label stays readable); :func:`layout_problems` does not count it as empty."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey", fontsize="small")
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.grid(False)
    ax._headprune_not_run = True


def _has_data(ax) -> bool:
    return bool(ax.images or ax.lines or ax.patches or ax.collections or getattr(ax, "_headprune_not_run", False))


def _colorbars(fig) -> list:
    """(colour bar, axes of the mappable it belongs to) for every colour bar of ``fig``."""
    out = []
    for ax in fig.axes:
        for m in [*ax.images, *ax.collections]:
            cb = getattr(m, "colorbar", None)
            if cb is not None and cb.ax is not ax:
                out.append((cb, ax))
    return out


def layout_problems(fig) -> list[str]:
    """Every layout problem of ``fig`` (empty: none), measured on the rendered figure."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    problems = []
    axes = [ax for ax in fig.axes if ax.get_visible()]
    names = {ax: (ax.get_title() or ax.get_ylabel() or ax.get_label() or f"axes {i}") for i, ax in enumerate(axes)}

    # tick labels: none overlaps another of the same axis, nor one of another axes
    labels = []
    for ax in axes:
        for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            ls = _drawn_tick_labels(axis)
            labels += [(ax, which, t, t.get_window_extent(r)) for t in ls]
    for (ax1, w1, t1, b1), (ax2, w2, t2, b2) in itertools.combinations(labels, 2):
        if (ax1 is ax2 and w1 == w2) or ax1 is not ax2:
            if _overlap(b1, b2):
                where = f"{names[ax1]!r} {w1}" if ax1 is ax2 else f"{names[ax1]!r} {w1} / {names[ax2]!r} {w2}"
                problems.append(f"tick labels overlap on {where}: {t1.get_text()!r} and {t2.get_text()!r}")

    # titles: none overlaps another title (or the suptitle), nor another panel's frame
    titles = [(ax, t) for ax in axes for t in (ax.title, ax._left_title, ax._right_title)
              if t.get_visible() and t.get_text().strip()]
    boxes = [(ax, t, t.get_window_extent(r)) for ax, t in titles]
    for (ax1, t1, b1), (ax2, t2, b2) in itertools.combinations(boxes, 2):
        if _overlap(b1, b2):
            problems.append(f"titles overlap: {t1.get_text()!r} and {t2.get_text()!r}")
    sup = fig._suptitle
    if sup is not None and sup.get_text().strip():
        sb = sup.get_window_extent(r)
        problems += [f"the suptitle overlaps the title {t.get_text()!r}" for _, t, b in boxes if _overlap(sb, b)]
        problems += [f"the suptitle overlaps the panel {names[ax]!r}" for ax in axes
                     if _overlap(sb, ax.get_window_extent(r))]
    for ax1, t1, b1 in boxes:
        for ax2 in axes:
            if ax2 is not ax1 and _overlap(b1, ax2.get_window_extent(r)):
                problems.append(f"the title {t1.get_text()!r} overlaps the panel {names[ax2]!r}")

    # colour bars: no taller than 1.1 x the heat map they belong to
    for cb, ax in _colorbars(fig):
        h_cb, h_ax = cb.ax.get_window_extent(r).height, ax.get_window_extent(r).height
        if h_cb > 1.1 * h_ax:
            problems.append(f"the colour bar of {names[ax]!r} is {h_cb / h_ax:.2f} x as tall as its heat map")

    # panels: every one draws some data (images, lines, patches or collections)
    problems += [f"the panel {names[ax]!r} is empty" for ax in axes if not _has_data(ax)]
    return problems


