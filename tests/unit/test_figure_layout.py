"""The figures' layout, checked with matplotlib's own renderer on small synthetic inputs (no model, no notebook):
no two tick labels overlap, no two titles overlap (nor a title another panel), a colour bar is no taller than
the heat map it belongs to, no panel is empty, and the role letters on a head map are large and legible.

Issue 18 ("figures fixed"): study 7's survival map had panel titles running into each other and a colour bar
(with a long label) far taller than the small heat maps; its L0 lambda axis (log scale) had overlapping tick
labels; the role letters on the role maps were 6 pt white on orange.

The quick outputs' re-rendering then showed: study 3's extra-change heat maps with colour bars 1.28 x as tall as
the heat maps; studies 2 and 5's score-by-strategy facet titles ("task — regime — semantics") running into each
other; study 2's contrast forest with an empty panel (no mask-then-fine-tune cells under zero ablation); study 6's
score-agreement heat map with overlapping score names under the columns.
"""
from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb

from headprune_utils import figures
from headprune_utils.figures.labels import (
    MEASURE_LABELS, NMT_REGIME_LABELS, REGIME_LABELS, ROLE_COLORS, ROLE_LETTERS, SCORE_LABELS,
)

LAMBDAS = [0.02, 0.04, 0.05, 0.06, 0.08, 0.16]  # study 7's quick lambdas: 0.04-0.06 crowd a log axis


# ---------------------------------------------------------------------------------------------- the checks
from headprune_utils.figures.layout import _overlap, layout_problems  # noqa: E402,F401  (the library's checks)


def assert_no_overlaps(fig) -> None:
    """Fail with every layout problem of ``fig`` (see :func:`layout_problems`); close the figure either way."""
    try:
        problems = layout_problems(fig)
    finally:
        plt.close(fig)
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------- synthetic inputs
def _heads(n_layers: int, n_heads: int):
    return [(l, h) for l in range(n_layers) for h in range(n_heads)]


def _roles(n: int, rng) -> list[str]:
    return list(rng.choice(list(ROLE_COLORS), size=n, p=[0.5, 0.1, 0.2, 0.1, 0.1]))


def survival_map_data(tasks, n_layers, n_heads, n_lambdas=len(LAMBDAS), seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for t in tasks:
        roles = _roles(n_layers * n_heads, rng)
        for (l, h), role in zip(_heads(n_layers, n_heads), roles):
            rows.append({"task": t, "layer": l, "head": h, "mean_survival": float(rng.integers(0, n_lambdas + 1)),
                         "mean_log_alpha": float(rng.normal()), "role": role, "n_lambdas": n_lambdas})
    return pd.DataFrame(rows)


def role_map_data(panels, n_layers, n_heads, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for p in panels:
        for (l, h), role in zip(_heads(n_layers, n_heads), _roles(n_layers * n_heads, rng)):
            rows.append({"panel": p, "layer": l, "head": h, "role": role, "share_specialized": 1.0, "n_models": 1})
    return pd.DataFrame(rows)


def score_map_data(n_layers, n_heads, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    scores = ["confidence", "confidence_no_special_keys", "entropy", "importance"]
    return pd.DataFrame([{"layer": l, "head": h, "score": s, "value": float(rng.normal(1.3, 0.2))}
                         for s in scores for l, h in _heads(n_layers, n_heads)])


def l0_by_type() -> pd.DataFrame:
    rows = []
    for setting, types in (("enc", ["enc"]), ("all", ["enc", "dec", "cross"])):
        for i, lam in enumerate(LAMBDAS):
            for k, t in enumerate(types):
                kept = max(0, 12 - 2 * i - k)
                rows.append({"setting": setting, "model_seed": 0, "lam": lam, "type": t, "kept": kept, "heads": 12,
                             "frac_kept": kept / 12, "bleu_l0": 12.0 - i, "bleu_full": 13.0})
    return pd.DataFrame(rows)


def l0_curve() -> pd.DataFrame:
    rows = []
    for setting, total in (("enc", 12), ("all", 36)):
        for i, lam in enumerate(LAMBDAS):
            n = max(0, total - (total // 6) * i)
            rows.append({"setting": setting, "model_seed": 0, "lam": lam, "n_kept": n, "n_heads_total": total,
                         "bleu_l0": 13.0 * n / total, "bleu_random_mean": 11.0 * n / total, "bleu_full": 13.0})
    return pd.DataFrame(rows)


def bleu_summary() -> pd.DataFrame:
    rows = []
    for regime, types, fractions in (("prune", ["enc", "dec", "cross", "all"], [0, 0.25, 0.5, 0.75]),
                                     ("prune_then_train", ["all"], [0, 0.5])):
        for t in types:
            for f in fractions:
                m = 13.0 * (1 - f)
                rows.append({"type": t, "regime": regime, "fraction": f, "mean": m, "ci_low": m - 2, "ci_high": m + 2})
    return pd.DataFrame(rows)


def strategy_contrasts() -> pd.DataFrame:
    rows = []
    for c in ["top vs random", "bottom vs random", "avoid the middle"]:
        for t in ["cross", "dec", "enc", "all"]:
            for b in (["0.33", "all"] if t == "all" else ["0.33"]):
                rows.append({"contrast": c, "task": t, "regime": "prune", "budget": b, "mean_diff": -1.0,
                             "boot_ci_low": -2.0, "boot_ci_high": 0.5})
    return pd.DataFrame(rows)


def survival_by_role_data(tasks) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame([{"task": t, "role": r, "survival": int(rng.integers(0, 7))}
                         for t in tasks for r in _roles(24, rng)])


def extra_change_grid(n_layers, n_heads, measures, settings, seed=0) -> pd.DataFrame:
    """``compensation_analysis.heatmap_data``'s shape: per (strategy, budget, measure, head) the extra change, NaN
    on some pruned heads (the middle strategy prunes whole middle layers, as in the quick run)."""
    rng = np.random.default_rng(seed)
    rows = []
    for st, b in settings:
        for m in measures:
            for l, h in _heads(n_layers, n_heads):
                pruned = st == "middle" and 0 < l < n_layers - 2
                rows.append({"ablation": "uniform", "strategy": st, "budget": b, "measure": m, "layer": l, "head": h,
                             "x": np.nan if pruned else float(rng.normal(0, 0.1)),
                             "x_noise": float(rng.normal(0, 0.02)), "n": 6})
    return pd.DataFrame(rows)


def strategy_summary(tasks, strategies, budgets=(0.25, 0.5, 0.75), finetune_budgets=(0.5,),
                     finetune_ablations=("uniform",)) -> pd.DataFrame:
    """``strategy_sweep.summarise``'s shape (studies 2, 5): per task, semantics, regime, strategy and budget a mean
    score and its interval; the full model as strategy "none" at budget 0; mask-then-fine-tune only at
    ``finetune_budgets`` and under ``finetune_ablations`` (as in the quick profile)."""
    rows = []
    for task, metric, chance in (("CoLA", "matthews", 0.0), ("MRPC", "accuracy", 0.68), ("SST-2", "accuracy", 0.49),
                                  ("STS-B", "pearson", 0.0)):
        if task not in tasks:
            continue
        for ablation in ("uniform", "zero"):
            for regime, bs in (("finetune_then_mask", budgets), ("mask_then_finetune", finetune_budgets)):
                if regime == "mask_then_finetune" and ablation not in finetune_ablations:
                    continue
                cells = [("none", 0.0)] + [(st, b) for st in strategies for b in bs]
                for k, (st, b) in enumerate(cells):
                    m = 0.8 - 0.3 * b - 0.01 * k
                    rows.append({"task": task, "ablation": ablation, "regime": regime, "strategy": st, "budget": b,
                                 "metric": metric, "n_seeds": 3, "mean": m, "ci_low": m - 0.05, "ci_high": m + 0.05,
                                 "n_heads_pruned": int(144 * b), "chance": chance})
    return pd.DataFrame(rows)


LAYER_STRATEGIES = ["random", "top", "bottom", "middle", "top_bottom", "consecutive", "spread", "least_important",
                    "most_important"]
ZERO_SHOT_METHODS = ["zero_shot", "random", "least_important"]


def layer_strategy_contrasts(finetune_ablations=("uniform",)) -> pd.DataFrame:
    """``layer_strategies_analysis.contrasts``' shape: per contrast, task, regime, semantics and budget a paired
    difference; no mask-then-fine-tune rows under the semantics it did not run (the quick profile's zero)."""
    rows = []
    for c in ["top vs bottom", "avoid the middle", "avoid consecutive layers"]:
        for ablation in ("uniform", "zero"):
            for regime, budgets in (("finetune_then_mask", ["0.25", "0.5", "0.75", "all"]),
                                    ("mask_then_finetune", ["0.5", "all"])):
                if regime == "mask_then_finetune" and ablation not in finetune_ablations:
                    continue
                for task in ["SST-2", "STS-B"]:
                    for b in budgets:
                        rows.append({"contrast": c, "task": task, "regime": regime, "ablation": ablation, "budget": b,
                                     "n_units": 3, "mean_diff": 0.01, "ci_low": -0.02, "ci_high": 0.04})
    return pd.DataFrame(rows)


def score_agreement(scores=tuple(s for s in SCORE_LABELS)) -> pd.DataFrame:
    """``specialized_heads_l0_analysis.agreement_summary``'s shape: the mean Spearman rho of every two scores."""
    rng = np.random.default_rng(0)
    return pd.DataFrame([{"a": a, "b": b, "n_models": 6, "mean_spearman": float(rng.uniform(-1, 1))}
                         for a, b in itertools.combinations(scores, 2)])


# ---------------------------------------------------------------------------------------------- the figures
FIGURES = {
    "survival_map, study 7 (3 x 4 encoder heads, settings all/enc)":
        lambda: figures.head_maps.survival_map(survival_map_data(["all", "enc"], 3, 4)),
    "survival_map, study 6 (6 x 12 heads, two tasks)":
        lambda: figures.head_maps.survival_map(survival_map_data(["SST-2", "STS-B"], 6, 12, n_lambdas=4)),
    "role_map, study 7 (one panel)": lambda: figures.head_maps.role_map(role_map_data(["encoder"], 3, 4)),
    "role_map, study 6 (three panels)":
        lambda: figures.head_maps.role_map(role_map_data(["pretrained", "SST-2", "STS-B"], 6, 12)),
    "score_maps, study 7 (3 x 4)": lambda: figures.head_maps.score_maps(score_map_data(3, 4)),
    "score_maps, study 6 (6 x 12)": lambda: figures.head_maps.score_maps(score_map_data(6, 12)),
    "l0_heads_kept (log lambda axis)": lambda: figures.curves.l0_heads_kept(l0_by_type()),
    "l0_bleu": lambda: figures.curves.l0_bleu(l0_curve()),
    "bleu_vs_fraction": lambda: figures.curves.bleu_vs_fraction(bleu_summary()),
    "strategy_contrasts (forest)": lambda: figures.contrasts.contrast_forest(
        strategy_contrasts(), regime_labels={"prune": NMT_REGIME_LABELS["prune"]},
        xlabel="BLEU difference a - b (95% bootstrap CI)"),
    "survival_by_role, study 7": lambda: figures.distributions.survival_by_role(survival_by_role_data(["all", "enc"])),
    # the quick outputs' problems (studies 2, 3, 5, 6)
    "extra_change_heatmaps, study 3 (6 x 12, three measures, two settings)":
        lambda: figures.head_maps.extra_change_heatmaps(
            extra_change_grid(6, 12, list(MEASURE_LABELS), [("middle", 0.5), ("random", 0.5)])),
    "extra_change_heatmaps, study 3 (6 x 12, one measure, one setting)":
        lambda: figures.head_maps.extra_change_heatmaps(extra_change_grid(6, 12, ["weight_change"], [("random", 0.5)])),
    "extra_change_heatmaps, study 3 (12 x 12, three measures, four settings)":
        lambda: figures.head_maps.extra_change_heatmaps(extra_change_grid(
            12, 12, list(MEASURE_LABELS), [("middle", 0.25), ("middle", 0.5), ("random", 0.25), ("random", 0.5)])),
    "score_by_strategy, study 2 (two tasks, nine strategies)":
        lambda: figures.curves.score_by_strategy(strategy_summary(["SST-2", "STS-B"], LAYER_STRATEGIES),
                                                 LAYER_STRATEGIES),
    "score_by_strategy, study 2 (two tasks, two strategies, one semantics)":
        lambda: figures.curves.score_by_strategy(
            strategy_summary(["SST-2", "STS-B"], ["top", "bottom"]).query("ablation == 'uniform'"), ["top", "bottom"]),
    "score_by_method, study 5 (two tasks, three methods)":
        lambda: figures.curves.score_by_strategy(
            strategy_summary(["SST-2", "STS-B"], ZERO_SHOT_METHODS, budgets=(0.5, 0.75),
                             finetune_ablations=("uniform", "zero")), ZERO_SHOT_METHODS),
    "contrasts, study 2 (no mask-then-fine-tune cells under zero ablation)":
        lambda: figures.contrasts.contrast_forest(layer_strategy_contrasts(),
                                                  xlabel="score a - b (95% t-interval over models)"),
    "contrasts, study 2 (only mask-then-fine-tune under zero ablation)":
        lambda: figures.contrasts.contrast_forest(
            layer_strategy_contrasts(("uniform", "zero"))
            .query("ablation == 'uniform' or regime == 'mask_then_finetune'")),
    "score_agreement, study 6 (seven scores)": lambda: figures.matrices.agreement_heatmap(score_agreement()),
    "score_agreement, study 6 (two scores)":
        lambda: figures.matrices.agreement_heatmap(
            score_agreement(("gradient_importance", "confidence_no_special_keys"))),
}


@pytest.mark.parametrize("name", list(FIGURES))
def test_figure_layout(name):
    assert_no_overlaps(FIGURES[name]())


def _luminance(rgb) -> float:
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _contrast(a, b) -> float:
    la, lb = sorted((_luminance(to_rgb(a)), _luminance(to_rgb(b))), reverse=True)
    return (la + 0.05) / (lb + 0.05)


@pytest.mark.parametrize("shape", [(3, 4), (6, 12), (12, 16)])
def test_role_letters_are_large_and_legible(shape):
    """Each role letter fills a good share of its cell, and its colour stands out from the cell's
    (WCAG contrast >= 3, large text); dark letters on the light role colours."""
    n_layers, n_heads = shape
    data = role_map_data(["pretrained", "SST-2"], n_layers, n_heads)
    fig = figures.head_maps.role_map(data)
    try:
        fig.canvas.draw()
        ax = fig.axes[0]
        cell_pt = ax.get_window_extent().width / n_heads * 72 / fig.dpi
        texts = [t for t in ax.texts if t.get_text()]
        assert texts, "no role letter drawn"
        by_letter = {v: k for k, v in ROLE_LETTERS.items() if v}
        for t in texts:
            assert t.get_fontsize() >= 0.4 * cell_pt, (t.get_fontsize(), cell_pt)
            assert _contrast(t.get_color(), ROLE_COLORS[by_letter[t.get_text()]]) >= 3.0, t.get_text()
        syntactic = [t for t in texts if t.get_text() == ROLE_LETTERS["syntactic"]]
        assert syntactic and all(_luminance(to_rgb(t.get_color())) < 0.2 for t in syntactic)  # dark on orange
    finally:
        plt.close(fig)


def test_the_checks_catch_what_they_check():
    """The checks themselves: overlapping titles and tick labels, a tall colour bar, an empty panel."""
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(4, 2))
    a.set_title("a long title that runs far into the next panel")
    b.set_title("and another long title")
    a.plot([0, 1], [0, 1])
    a.set_xticks(np.linspace(0, 1, 30))
    b.plot([0, 1], [1, 0])
    text = "\n".join(layout_problems(fig))
    plt.close(fig)
    assert "titles overlap" in text and "tick labels overlap" in text and "'axes 2' is empty" in text

    fig, ax = plt.subplots(figsize=(4, 4))
    fig.colorbar(ax.imshow(np.zeros((2, 8))), ax=ax)  # a wide, flat heat map: the default colour bar is too tall
    text = "\n".join(layout_problems(fig))
    plt.close(fig)
    assert "as tall as its heat map" in text


def test_score_by_strategy_with_a_regime_run_on_some_tasks_only():
    """The standard profile runs mask-then-fine-tune on SST-2 and CoLA only: the other tasks' panels in that row
    say so (axis off), never an IndexError from an empty panel."""
    s = strategy_summary(["SST-2", "STS-B"], ["random", "top"])
    s = s[~((s["task"] == "STS-B") & (s["regime"] == "mask_then_finetune"))]
    fig = figures.curves.score_by_strategy(s, ["random", "top"])
    blank = [ax for ax in fig.axes if ax.texts]
    assert len(blank) == 1 and blank[0].texts[0].get_text().startswith("not run in this profile:\nSTS-B")
    assert layout_problems(fig) == [], "a panel marked 'not run' is not an empty panel"
    plt.close(fig)


def test_score_by_strategy_says_not_run_once_per_row_and_puts_the_legend_above():
    """Study 2 (standard): mask-then-fine-tune ran on two of four tasks; the row says once which tasks were not
    run (one note, the other blank panels hidden), and the legend sits above the panels, not at the far right."""
    tasks = ["CoLA", "MRPC", "SST-2", "STS-B"]
    s = strategy_summary(tasks, ["random", "top"])
    s = s[~(s["task"].isin(["MRPC", "STS-B"]) & (s["regime"] == "mask_then_finetune"))]
    fig = figures.curves.score_by_strategy(s, ["random", "top"])
    try:
        notes = [t.get_text() for ax in fig.axes if ax.get_visible() for t in ax.texts]
        assert len(notes) == 1 and "MRPC, STS-B" in notes[0]
        assert sum(not ax.get_visible() for ax in fig.axes) == 1
        fig.canvas.draw()
        legend = fig.legends[0].get_window_extent()
        top = max(ax.get_window_extent().y1 for ax in fig.axes if ax.get_visible())
        assert legend.y0 >= top - 1, "the legend is above the panels"
        assert fig.legends[0].get_texts()[0].get_fontsize() >= 10
    finally:
        plt.close(fig)


def test_score_vs_fraction_shares_a_tasks_y_axis_across_the_ablation_rows():
    """Study 1: the rows (ablation semantics) are compared task by task, so a task's column has one y range."""
    rows = [{"task": task, "ablation": sem, "regime": "finetune_then_mask", "fraction": f,
             "mean": base - drop * f, "ci_low": base - drop * f - 0.02, "ci_high": base - drop * f + 0.02,
             "metric": "accuracy", "chance": 0.5}
            for task, base in (("SST-2", 0.85), ("MRPC", 0.8)) for sem, drop in (("zero", 0.1), ("mean", 0.6))
            for f in (0.0, 0.5, 0.9)]
    fig = figures.curves.score_vs_fraction(pd.DataFrame(rows))
    try:
        grid = np.array(fig.axes).reshape(2, 2)
        for col in range(2):
            assert grid[0][col].get_ylim() == grid[1][col].get_ylim()
        assert layout_problems(fig) == []
    finally:
        plt.close(fig)


def _many_contrasts(n_tasks=4, budgets=(0.25, 0.5, 0.75, 0.85, "all"), sems=("zero", "uniform")):
    names = ["zero-shot vs full model", "zero-shot vs random", "random vs full model"]
    return pd.DataFrame([{"contrast": c, "task": f"T{t}", "regime": "finetune_then_mask", "ablation": sem,
                          "budget": b, "mean_diff": -0.1 * t, "ci_low": -0.1 * t - 0.05, "ci_high": -0.1 * t + 0.05}
                         for sem in sems for c in names for t in range(n_tasks) for b in budgets])


def test_a_forest_too_tall_for_a_page_is_split_by_contrast():
    """Study 5's contrasts (a panel of 80 rows per semantics: 8,583 px) are split into a panel per contrast, a
    column per contrast sharing its x range; the figure is no taller than it is wide x 1.5."""
    contr = _many_contrasts()
    fig = figures.contrasts.contrast_forest(contr)
    try:
        visible = [ax for ax in fig.axes if ax.get_visible()]
        assert len(visible) == 3 * 2, "a panel per contrast and semantics"
        assert max(len(ax.get_yticks()) for ax in visible) <= figures.contrasts.MAX_ROWS
        w, h = fig.get_size_inches()
        assert h <= 1.5 * w, (w, h)
        grid = np.array(fig.axes).reshape(2, -1)
        assert grid[0][0].get_xlim() == grid[1][0].get_xlim(), "a column (one contrast) shares its x range"
        assert "zero-shot vs full model" in grid[0][0].get_title()
        assert layout_problems(fig) == []
    finally:
        plt.close(fig)


def test_a_tall_forest_panel_has_its_x_axis_at_top_and_bottom():
    """Study 7's strategy forest (72 rows) had its x axis only at the bottom, 2,579 px below the first row: a panel
    of more than TALL_ROWS rows labels its x axis at the top as well."""
    contr = _many_contrasts(n_tasks=6, budgets=(0.2, 0.4, 0.6, 0.8, "all"), sems=("zero",))
    contr = contr[contr["contrast"] == "zero-shot vs random"]  # one contrast: cannot be split
    assert len(contr) > figures.contrasts.TALL_ROWS
    fig = figures.contrasts.contrast_forest(contr)
    try:
        ax = next(ax for ax in fig.axes if ax.get_visible())
        fig.canvas.draw()
        top = [t for t in ax.xaxis.get_major_ticks() if t.label2.get_visible() and t.label2.get_text()]
        bottom = [t for t in ax.xaxis.get_major_ticks() if t.label1.get_visible() and t.label1.get_text()]
        assert top and bottom
    finally:
        plt.close(fig)
    short = figures.contrasts.contrast_forest(contr.iloc[:5])
    try:
        short.canvas.draw()
        ax = next(ax for ax in short.axes if ax.get_visible())
        assert not any(t.label2.get_visible() for t in ax.xaxis.get_major_ticks()), "a short panel: bottom only"
    finally:
        plt.close(short)


def test_mask_grid_with_budgets_only_some_strategies_have():
    """Michel's iterative curve adds budgets the other strategies lack: those cells say "not run", the row keeps its
    label, no warning from an empty image."""
    import warnings
    rows = pd.DataFrame([{"strategy": st, "budget": b, "layer": l, "head": h, "kept": int((l + h) % 2)}
                         for st, bs in (("random", (0.5,)), ("iterative_importance", (0.1, 0.5)))
                         for b in bs for l in range(2) for h in range(3)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = figures.masks.mask_grid(rows)
    assert [t.get_text() for ax in fig.axes for t in ax.texts] == ["not run"]
    assert fig.axes[0].get_ylabel() == "random" and layout_problems(fig) == []
    plt.close(fig)


def test_score_by_strategy_one_budget_keeps_the_strategies_together():
    """A regime run at one budget only (mask, then fine-tune at 50%): the strategies sit side by side at 50 (their
    +-0.6 offsets), the axis spans 20 points around it, so no strategy looks like another budget."""
    s = strategy_summary(["SST-2"], ["random", "top", "bottom"])
    fig = figures.curves.score_by_strategy(s, ["random", "top", "bottom"])
    titles = [ax.get_title() for ax in fig.axes]
    ax = fig.axes[[k for k, t in enumerate(titles) if "mask, then fine-tune" in t][0]]
    assert ax.get_xlim() == (40.0, 60.0)
    xs = sorted(x for line in ax.lines for x in line.get_xdata() if len(line.get_xdata()) == 1)
    assert xs and min(xs) >= 49 and max(xs) <= 51
    several = fig.axes[[k for k, t in enumerate(titles) if "fine-tune, then mask" in t][0]]
    assert several.get_xlim()[1] - several.get_xlim()[0] > 50, "several budgets: matplotlib's own limits"
    plt.close(fig)


def test_score_by_strategy_legend_names_every_strategy_drawn():
    """The first panel (mask, then fine-tune) lacks strategies other panels draw (the standard profile's
    least_important, most_important and iterative curves): the figure's legend still names each of them once."""
    s = strategy_summary(["SST-2"], ["random", "top", "least_important"])
    s = s[~((s["regime"] == "mask_then_finetune") & (s["strategy"] == "least_important"))]
    fig = figures.curves.score_by_strategy(s, ["random", "top", "least_important"])
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["random", "top", "least_important", "full model", "constant predictor"]
    plt.close(fig)


def test_score_vs_fraction_legend_names_a_regime_the_first_panel_lacks():
    """Study 1 (standard): the zero-ablation row has fine-tune-then-mask only, the uniform row both regimes: the
    legend (in the first panel) names both regimes and the constant predictor."""
    rows = [{"task": "SST-2", "ablation": sem, "regime": regime, "fraction": f, "mean": 0.8 - 0.2 * f,
             "ci_low": 0.75 - 0.2 * f, "ci_high": 0.85 - 0.2 * f, "metric": "accuracy", "chance": 0.51}
            for sem, regimes in (("zero", ("finetune_then_mask",)), ("uniform", ("finetune_then_mask", "mask_then_finetune")))
            for regime in regimes for f in (0.0, 0.5)]
    fig = figures.curves.score_vs_fraction(pd.DataFrame(rows))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == [REGIME_LABELS["mask_then_finetune"], REGIME_LABELS["finetune_then_mask"], "constant predictor"]
    plt.close(fig)


def test_contrast_forest_names_black_rows_only_when_there_are_some():
    """The x label's colour key ("black = pooled over tasks", or the caller's meaning of "all") only where rows with
    task "all" are drawn; study 5's contrasts have none."""
    def label(frame, **kw):
        fig = figures.contrasts.contrast_forest(frame, **kw)
        text = next(ax.get_xlabel() for ax in fig.axes if ax.get_visible() and ax.get_xlabel())
        plt.close(fig)
        return text
    rows = pd.DataFrame([{"contrast": "a vs b", "task": t, "regime": "finetune_then_mask", "budget": 0.5,
                          "mean_diff": 0.1, "ci_low": 0.0, "ci_high": 0.2} for t in ("SST-2", "CoLA", "all")])
    assert label(rows).endswith("; black = pooled over tasks")
    assert "black" not in label(rows[rows["task"] != "all"])
    assert label(rows, all_label="heads of all three types").endswith("; black = heads of all three types")


def test_l0_bleu_draws_one_line_per_series_through_the_means_per_lambda():
    """Two translation models: a point per (model, lambda), and the line through the means per lambda, never a line
    through every point sorted by heads kept (it jumped between the models at equal counts)."""
    two = pd.concat([l0_curve().assign(model_seed=0),
                     l0_curve().assign(model_seed=1, n_kept=lambda d: d["n_kept"] + 1, bleu_l0=lambda d: d["bleu_l0"] - 1)])
    fig = figures.curves.l0_bleu(two)
    ax = fig.axes[0]
    lines = [line for line in ax.lines if line.get_label() != "full model"]
    assert len(lines) == 2 and all(len(line.get_xdata()) == len(LAMBDAS) for line in lines)
    assert all(np.all(np.diff(line.get_xdata()) > 0) for line in lines)
    assert sum(len(c.get_offsets()) for c in ax.collections) == 2 * 2 * len(LAMBDAS)  # every (model, lambda) point
    assert "mean per lambda" in fig.legends[0].get_texts()[0].get_text() and ax.get_legend() is None
    plt.close(fig)


def test_mask_grid_draws_no_grid_lines_over_the_masks():
    """Under seaborn's whitegrid (set by the figure before it in study 7) the grid lines cut a mask's layers."""
    import seaborn as sns
    rows = pd.DataFrame([{"strategy": "top", "budget": 0.5, "layer": l, "head": h, "kept": int(l < 2)}
                         for l in range(4) for h in range(8)])
    with sns.axes_style("whitegrid"):  # this test's style only
        fig = figures.masks.mask_grid(rows)
    assert not any(line.get_visible() for ax in fig.axes for line in ax.get_xgridlines() + ax.get_ygridlines())
    plt.close(fig)


def test_probe_agreement_names_the_model_in_its_title():
    """Study 4 draws the pre-trained model's probe agreement and its random-init control's: titles that differ."""
    who_t = pd.DataFrame([{"metric": "js", "probe_a": a, "probe_b": b, "mantel_r": 0.5}
                          for a, b in (("SST-2", "CoLA"), ("SST-2", "random"), ("CoLA", "random"))])
    titles = []
    for kw in ({}, {"model": "randomly initialised encoder (control)"}):
        fig = figures.matrices.probe_agreement(who_t, "js", **kw)
        titles.append(fig.axes[0].get_title())
        plt.close(fig)
    assert "pre-trained model" in titles[0] and "randomly initialised encoder (control)" in titles[1]


def test_dendrogram_heatmap_names_every_head_and_draws_the_tree_in_one_colour():
    """Study 4's dendrogram beside the ordered matrix: all 72 heads named (every second one was), the tree in one
    colour (scipy's default threshold coloured a grouping the red boxes do not show), the colour bar labelled."""
    from scipy.cluster import hierarchy
    from scipy.spatial.distance import squareform
    rng = np.random.default_rng(0)
    x = rng.normal(size=(72, 5))
    d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    link = hierarchy.linkage(squareform(d, checks=False), method="average")
    order = hierarchy.leaves_list(link)
    labels = hierarchy.fcluster(link, 4, criterion="maxclust")
    names = [f"{i // 12}.{i % 12}" for i in range(72)]
    fig = figures.matrices.dendrogram_heatmap(d, link, labels, order, names, "js")
    ax_d, ax_m = fig.axes[0], fig.axes[1]
    assert [t.get_text() for t in ax_m.get_yticklabels()] == [names[i] for i in order]
    colours = {tuple(np.round(c, 3)) for coll in ax_d.collections for c in coll.get_colors()}
    assert len(colours) == 1
    assert fig.axes[2].get_ylabel() == "distance (lower = more redundant)"
    assert layout_problems(fig) == []
    plt.close(fig)


def test_a_mask_grid_of_many_strategies_is_wrapped_into_blocks():
    """Study 7's masks (21 type x strategy rows, two budgets) were a column 3.6 times as tall as wide: more than
    MAX_MASK_ROWS strategies of few budgets are wrapped into blocks side by side."""
    names = [f"{t}: {s}" for t in ("enc", "dec", "cross") for s in ("random", "top", "bottom", "middle", "top_bottom",
                                                                      "consecutive", "spread")]
    rows = pd.DataFrame([{"strategy": st, "budget": b, "layer": l, "head": h, "kept": int((l + h + k) % 2)}
                         for k, st in enumerate(names) for b in (0.33, 0.67) for l in range(3) for h in range(4)])
    fig = figures.masks.mask_grid(rows)
    try:
        visible = [ax for ax in fig.axes if ax.get_visible()]
        assert len(visible) == 21 * 2
        w, h = fig.get_size_inches()
        assert h < w, (w, h)
        assert max(ax.get_subplotspec().rowspan.start for ax in visible) + 1 <= figures.masks.MAX_MASK_ROWS
        assert sorted(ax.get_ylabel() for ax in visible if ax.get_ylabel()) == sorted(names)
        assert layout_problems(fig) == []
    finally:
        plt.close(fig)
