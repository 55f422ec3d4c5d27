"""The "task x regime x strategy x budget x seed" sweep of GLUE head-pruning strategies (studies 2 and 5).

A cell (its axes: ``task``, ``regime``, ``strategy``, ``budget``, ``seed``, ``ablation``) prunes ``budget`` (share of
ALL heads) with ``strategy`` under the ablation semantics ``ablation`` (:mod:`headprune_utils.studies.semantics`) and scores
the task's dev subset:

- ``finetune_then_mask`` (evaluation only): the fine-tuned full model of (task, seed) with the mask applied;
  the masks of one model are evaluated together, sharing work (``mask_sweep``; same outputs as one forward each);
- ``mask_then_finetune``: the pre-trained model pruned by the mask, then fine-tuned with the mask fixed (through
  ``GlueContext.masked_scores``, the cache every study shares: a (task, seed, mask) is fine-tuned once).

The reference cell (strategy ``"none"``, budget 0) is the fine-tuned full model in both regimes. Masks come from
:meth:`Context.cell_mask`: location strategies (``strategies.STRATEGIES``) and gradient-importance strategies
(``strategies.IMPORTANCE_STRATEGIES``: Michel et al.'s importance of the fine-tuned full model on the task's
training subset); a study adds strategies by subclassing :class:`Context` and overriding ``cell_mask``.

Analysis: :func:`summarise` (mean per task x regime x strategy x budget), :func:`example_masks` (rows for the
mask picture). Paired contrasts between strategies live in :mod:`headprune_utils.analysis.paired_contrasts`.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import pandas as pd
import torch

from headprune_utils.studies import glue_workbench
from headprune_utils.measure import importance, mask_sweep
from headprune_utils.model import masks, strategies
from headprune_utils.model.ablations import as_ablation
from headprune_utils.analysis import stats
from headprune_utils.train import training
from headprune_utils.tasks.metrics import main_score
from headprune_utils.analysis.pruning_curves import REGIMES

__all__ = ["REGIMES", "REGIME_NAMES", "Regime", "ALL_STRATEGIES", "KNOWN_STRATEGIES", "ITERATIVE_STEP", "Context", "cell_mask", "result_row", "run_cells",
           "run_cell", "sweep_batch", "summarise", "example_masks"]

Regime = Literal["mask_then_finetune", "finetune_then_mask"]
REGIME_NAMES = {
    "mask_then_finetune": "mask, then fine-tune",
    "finetune_then_mask": "fine-tune, then mask (no retraining)",
}
ALL_STRATEGIES: tuple[str, ...] = strategies.STRATEGIES + strategies.IMPORTANCE_STRATEGIES  # the default sweep
KNOWN_STRATEGIES: tuple[str, ...] = ALL_STRATEGIES + strategies.ITERATIVE_STRATEGIES  # what may be asked for
ITERATIVE_STEP = 0.1  # Michel et al.: 10% of all heads pruned per step of iterative pruning


class Context(glue_workbench.GlueContext):
    """The shared workbench plus each full model's head importance (for the importance strategies)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._importance: dict = {}
        self._iterative: dict = {}

    def importance(self, task: str, seed: int) -> torch.Tensor:
        """``[n_layers, n_heads]`` gradient importance (Michel et al.; normalised per layer) of the fine-tuned
        full model on the task's TRAINING subset (never the dev set the strategies are scored on); the last
        (task, seed) only is kept."""
        if (task, seed) not in self._importance:
            model = self.full_model(task, seed)[0]
            batches = glue_workbench.batches(self.task_data(task)[1], self.device, self.cfg.importance_size)
            self._importance = {(task, seed): importance.head_importance(model, batches).cpu()}
        return self._importance[(task, seed)]

    def iterative_order(self, task: str, seed: int) -> list[int]:
        """Michel et al.'s iterative pruning of the fine-tuned full model (``strategies.iterative_order``): 10% of
        all heads per step by gradient importance re-estimated on the TRAINING subset with the pruned heads masked
        (zero: their output removed, as Michel et al.), normalised per layer. The whole order (all heads but one)
        is computed once per (task, seed), so every budget's mask comes from the same path (the last (task, seed)
        only is kept)."""
        key = (task, seed)
        if key not in self._iterative:
            model = self.full_model(task, seed)[0]
            batches = glue_workbench.batches(self.task_data(task)[1], self.device, self.cfg.importance_size)
            n_layers, n_heads = self.shape
            step = max(1, int(round(ITERATIVE_STEP * n_layers * n_heads)))
            score = lambda m: importance.head_importance(model, batches, mask=m.to(self.device), ablation="zero").cpu()
            self._iterative = {key: strategies.iterative_order(score, n_layers, n_heads, step)}
        return self._iterative[key]

    def cell_mask(self, cell: dict) -> torch.Tensor:
        """The cell's mask (studies add strategies by overriding this method)."""
        return cell_mask(self, cell)


def cell_mask(ctx: Context, cell: dict) -> torch.Tensor:
    """The cell's ``[n_layers, n_heads]`` mask (1 = kept) for the strategies of ``ALL_STRATEGIES`` and ``"none"``."""
    n_layers, n_heads = ctx.shape
    if cell["strategy"] == "none":
        return torch.ones(n_layers, n_heads)
    n_prune = masks.n_pruned_for_fraction(cell["budget"], n_layers, n_heads)
    if cell["strategy"] in strategies.IMPORTANCE_STRATEGIES:
        return strategies.importance_mask(ctx.importance(cell["task"], cell["seed"]), n_prune, cell["strategy"])
    if cell["strategy"] in strategies.ITERATIVE_STRATEGIES:
        order = ctx.iterative_order(cell["task"], cell["seed"])
        return strategies.mask_from_order(order, n_layers, n_heads, n_prune)
    return strategies.strategy_mask(cell["strategy"], n_layers, n_heads, n_prune, cell["seed"])


def result_row(ctx: Context, cell: dict, metrics: dict, mask: torch.Tensor, history: list, seconds: float) -> dict:
    """A cell's stored result: its score and metrics, the mask and where it prunes, the training history."""
    spec, tr, dv, *_ = ctx.task_data(cell["task"])
    pruned_layers = [int(l) for l in torch.nonzero((mask < 1).any(dim=1)).flatten()]
    return {
        "score": main_score(cell["task"], metrics),
        **metrics,
        "metric": spec.main_metric,
        "chance": glue_workbench.chance_score(cell["task"], tr, dv),
        "n_heads_pruned": int((mask == 0).sum()),
        "n_heads_total": int(mask.numel()),
        "first_pruned_layer": pruned_layers[0] if pruned_layers else None,
        "n_layers_touched": len(pruned_layers),
        "mask": masks.mask_to_string(mask),
        "history": history,
        "seconds": seconds,
    }


def run_cell(ctx: Context, cell: dict) -> dict:
    """One cell on its own (the unit a cluster engine may run anywhere)."""
    return run_cells(ctx, [cell], shared=False)[0]


def run_cells(ctx: Context, cells: list[dict], shared: bool = True) -> list[dict]:
    """Results of ``cells`` of ONE (task, seed), in order, each under its own semantics (``cell["ablation"]``).
    Evaluation-only cells of one semantics are evaluated together (``mask_sweep``: work shared between masks)
    when ``shared``; the outputs equal the plain way's."""
    if len({(c["task"], c["seed"]) for c in cells}) > 1:
        raise ValueError("run_cells takes the cells of one (task, seed)")
    out: dict[int, dict] = {}
    evals = [i for i, c in enumerate(cells) if c["regime"] == "finetune_then_mask"]
    for ablation in dict.fromkeys(cells[i]["ablation"] for i in evals):
        idx = [i for i in evals if cells[i]["ablation"] == ablation]
        task, seed = cells[idx[0]]["task"], cells[idx[0]]["seed"]
        model, full_history, _ = ctx.full_model(task, seed)
        dv = ctx.task_data(task)[2]
        means = ctx.full_means(task, seed) if as_ablation(ablation).needs_means else None
        cell_masks = {i: ctx.cell_mask(cells[i]) for i in idx}
        t0 = time.perf_counter()
        if shared and len(idx) > 1:
            metrics = mask_sweep.evaluate_masks(model, dv, task, cell_masks, glue_workbench.EVAL_BATCH,
                                                ablation=ablation, means=means)
        else:
            metrics = {i: training.evaluate(model, dv, task, glue_workbench.EVAL_BATCH, gates=m.to(ctx.device),
                                            ablation=ablation, means=means) for i, m in cell_masks.items()}
        each = (time.perf_counter() - t0) / len(idx)
        for i in idx:
            # the curve of the full model it masks (its convergence, for a task with no mask-then-fine-tune cell)
            out[i] = {**result_row(ctx, cells[i], metrics[i], cell_masks[i], [], each),
                      "full_model_history": glue_workbench.recorded_curve(full_history)}
    for i, cell in enumerate(cells):
        if cell["regime"] != "mask_then_finetune":
            continue
        t0 = time.perf_counter()
        mask = ctx.cell_mask(cell)
        task, seed = cell["task"], cell["seed"]
        dv = ctx.task_data(task)[2]
        if cell["strategy"] == "none":
            model, history, _ = ctx.full_model(task, seed)
            metrics = training.evaluate(model, dv, task, glue_workbench.EVAL_BATCH)
        else:
            # the same (task, seed, mask, semantics) fine-tuned in another study (study 5 shares study 2's random
            # and importance masks, study 1 the random ones) is read back, not trained again
            metrics, history = ctx.masked_scores(task, seed, mask, f"{task} s{seed} {cell['strategy']} "
                                                 f"{cell['budget']:g} {cell['ablation']}", cell["ablation"])
        out[i] = result_row(ctx, cell, metrics, mask, history, time.perf_counter() - t0)
    return [out[i] for i in range(len(cells))]


def sweep_batch(cells: Sequence[Any], evaluate_together: Callable[[list[dict]], list[dict]],
              compute_one: Callable[[dict], dict]) -> Iterator[tuple[Any, dict]]:
    """``(cell, result)`` for a batch of sweep cells (objects with ``.axes``, e.g. ``studies.base.Cell``): per
    (task, seed), its evaluation-only cells together (``evaluate_together(axes list) -> results``, e.g.
    :func:`run_cells`), then its other cells one by one (``compute_one(axes) -> result``, e.g. :func:`run_cell`),
    each yielded as soon as it is done."""
    groups: dict[tuple, list] = defaultdict(list)
    for c in cells:
        groups[(c.axes["task"], c.axes["seed"])].append(c)
    for group in groups.values():
        evals = [c for c in group if c.axes["regime"] == "finetune_then_mask"]
        if evals:
            yield from zip(evals, evaluate_together([dict(c.axes) for c in evals]))
        for cell in (c for c in group if c.axes["regime"] == "mask_then_finetune"):
            yield cell, compute_one(dict(cell.axes))


# ---------------------------------------------------------------------------------------------- analysis

def summarise(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Mean score per task x ablation x regime x strategy x budget with a t-interval over seeds (no ablation when the
    table has no ``ablation`` column, e.g. study 7's)."""
    rows = []
    keys = ["task", "ablation", "regime", "strategy", "budget"] if "ablation" in table.columns else \
        ["task", "regime", "strategy", "budget"]
    for k, g in table.groupby(keys):
        mean, lo, hi = stats.t_interval(g["score"].to_numpy(dtype=float), confidence)
        rows.append({**dict(zip(keys, k)),
                     "metric": g["metric"].iloc[0], "n_seeds": len(g), "mean": mean, "ci_low": lo, "ci_high": hi,
                     "n_heads_pruned": int(g["n_heads_pruned"].iloc[0]), "chance": float(g["chance"].iloc[0])})
    order = [k for k in ("task", "ablation", "regime", "budget", "strategy") if k in keys]
    return pd.DataFrame(rows).sort_values(order).reset_index(drop=True)


def example_masks(table: pd.DataFrame, seed: int | None = None, order: tuple[str, ...] = ALL_STRATEGIES) -> pd.DataFrame:
    """One mask per strategy x budget (of ``seed``, default the smallest; evaluation-only regime when present,
    first task) as rows (strategy, budget, layer, head, kept) for the mask picture; strategies in ``order``."""
    t = table[(table["strategy"] != "none")]
    if t.empty:
        return pd.DataFrame(columns=["strategy", "budget", "layer", "head", "kept"])
    seed = int(t["seed"].min()) if seed is None else seed
    t = t[(t["seed"] == seed) & (t["task"] == t["task"].iloc[0])]
    if "ablation" in t.columns:  # masks do not depend on the semantics: one semantics' rows
        t = t[t["ablation"] == t["ablation"].iloc[0]]
    t = t[t["regime"] == ("finetune_then_mask" if (t["regime"] == "finetune_then_mask").any() else "mask_then_finetune")]
    rows = []
    rank = {s: i for i, s in enumerate(order)}  # strategies not in ``order`` (e.g. "iterative_importance") last, by name
    key = lambda kv: (rank.get(kv[0][0], len(rank)), kv[0][0], kv[0][1])
    for (strategy, budget), g in sorted(t.groupby(["strategy", "budget"]), key=key):
        m = masks.mask_from_string(g["mask"].iloc[0])
        for layer in range(m.shape[0]):
            for head in range(m.shape[1]):
                rows.append({"strategy": strategy, "budget": budget, "layer": layer, "head": head,
                             "kept": int(m[layer, head])})
    return pd.DataFrame(rows)
