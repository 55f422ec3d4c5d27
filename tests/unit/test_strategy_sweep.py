"""The strategy sweep engine (studies 2 and 5) on hand-made cells, masks and tables (no model)."""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from headprune_utils.model import strategies
from headprune_utils.studies import strategy_sweep
from headprune_utils.model.masks import mask_from_string, mask_to_string
from headprune_utils.studies.base import Cell


class FakeContext:
    """What ``cell_mask`` reads: the head shape and each (task, seed)'s importance."""

    shape = (3, 4)

    def importance(self, task, seed):
        return torch.arange(12, dtype=torch.float).reshape(3, 4)  # head (0, 0) least important, (2, 3) most


def axes(regime, strategy="random", budget=0.5, task="A", seed=0, ablation="zero"):
    return {"task": task, "regime": regime, "ablation": ablation, "strategy": strategy, "budget": budget, "seed": seed}


def test_cell_mask_meets_the_budget_for_every_strategy_and_none_keeps_all():
    ctx = FakeContext()
    assert torch.equal(strategy_sweep.cell_mask(ctx, axes("finetune_then_mask", "none", 0.0)), torch.ones(3, 4))
    for s in strategy_sweep.ALL_STRATEGIES:
        for budget, n in ((0.25, 3), (0.5, 6)):
            m = strategy_sweep.cell_mask(ctx, axes("finetune_then_mask", s, budget))
            assert m.shape == (3, 4) and int((m == 0).sum()) == n, (s, budget)
    least = strategy_sweep.cell_mask(ctx, axes("finetune_then_mask", "least_important", 0.25))
    most = strategy_sweep.cell_mask(ctx, axes("finetune_then_mask", "most_important", 0.25))
    assert least[0, :3].sum() == 0 and most[2, 1:].sum() == 0
    assert torch.equal(strategy_sweep.cell_mask(ctx, axes("finetune_then_mask", "top", 0.25)),
                       strategies.strategy_mask("top", 3, 4, 3, 0))


def test_sweep_batch_evaluates_each_models_cells_together_then_fine_tunes_one_by_one():
    cells = [Cell(axes("mask_then_finetune", "none", 0.0)), Cell(axes("mask_then_finetune", "top")),
             Cell(axes("finetune_then_mask", "none", 0.0)), Cell(axes("finetune_then_mask", "top")),
             Cell(axes("finetune_then_mask", "top", seed=1)), Cell(axes("mask_then_finetune", "top", seed=1))]
    calls = []

    def together(batch):
        calls.append(("together", [(a["seed"], a["strategy"]) for a in batch]))
        return [{"n": i} for i in range(len(batch))]

    def one(a):
        calls.append(("one", (a["seed"], a["strategy"])))
        return {"n": -1}

    out = list(strategy_sweep.sweep_batch(cells, together, one))
    assert calls == [("together", [(0, "none"), (0, "top")]), ("one", (0, "none")), ("one", (0, "top")),
                     ("together", [(1, "top")]), ("one", (1, "top"))]
    assert [c for c, _ in out] == [cells[2], cells[3], cells[0], cells[1], cells[4], cells[5]]
    assert [r["n"] for _, r in out] == [0, 1, -1, -1, 0, -1]
    # a batch of fine-tuning cells only never calls the evaluation
    calls.clear()
    list(strategy_sweep.sweep_batch(cells[:1], together, one))
    assert calls == [("one", (0, "none"))]


def test_run_cells_refuses_cells_of_two_models():
    with pytest.raises(ValueError, match="one \\(task, seed\\)"):
        strategy_sweep.run_cells(SimpleNamespace(cfg=None), [axes("finetune_then_mask"), axes("finetune_then_mask", seed=1)])


def test_run_cells_evaluates_each_semantics_apart_and_fine_tunes_under_the_cells_own(monkeypatch):
    """Cells of different semantics never share an evaluation: one mask sweep per semantics, with that semantics;
    a fine-tuning cell is fine-tuned (and cached) under its own semantics."""
    sweeps, fine_tuned, evaluated = [], [], []
    curve = [{"epoch": 1, "score": 0.7}, {"epoch": 2, "score": 0.8}]  # the full model's held-out curve

    class Ctx(FakeContext):
        device = "cpu"

        def full_model(self, task, seed):
            return "model", curve, None

        def task_data(self, task):
            return None, None, "dev"

        def full_means(self, task, seed):
            return "means"

        def cell_mask(self, cell):
            return strategy_sweep.cell_mask(self, cell)

        def masked_scores(self, task, seed, mask, desc, ablation):
            fine_tuned.append(ablation)
            return {"accuracy": 0.5}, []

    def sweep(model, dv, task, cell_masks, batch, ablation, means):
        sweeps.append((sorted(cell_masks), ablation, means))
        return {i: {"accuracy": 0.5} for i in cell_masks}

    monkeypatch.setattr(strategy_sweep.mask_sweep, "evaluate_masks", sweep)
    monkeypatch.setattr(strategy_sweep.training, "evaluate", lambda *a, **k: evaluated.append(k.get("ablation")) or {})
    monkeypatch.setattr(strategy_sweep, "result_row", lambda ctx, cell, metrics, mask, history, seconds: dict(cell))
    cells = [axes("finetune_then_mask", "top", ablation="uniform"), axes("finetune_then_mask", "top", ablation="zero"),
             axes("finetune_then_mask", "none", 0.0, ablation="uniform"), axes("finetune_then_mask", "random", ablation="mean"),
             axes("finetune_then_mask", "none", 0.0, ablation="zero"), axes("mask_then_finetune", "top", ablation="uniform")]
    out = strategy_sweep.run_cells(Ctx(), cells)
    # in order, each from its own cell; a fine-tune-then-mask cell records the curve of the full model it masks
    assert out == [{**c, "full_model_history": curve} if c["regime"] == "finetune_then_mask" else c for c in cells]
    assert sweeps == [([0, 2], "uniform", None), ([1, 4], "zero", None)]
    assert evaluated == ["mean"]  # a lone mask: the plain evaluation, under its semantics
    assert fine_tuned == ["uniform"]


def table():
    rows = []
    for seed, (a, b) in enumerate([(0.8, 0.7), (0.9, 0.6), (0.7, 0.8)]):
        for strategy, score in (("top", a), ("random", b)):
            m = torch.ones(3, 4)
            m[2 if strategy == "top" else seed, :2] = 0
            rows.append({**axes("finetune_then_mask", strategy, 0.5, seed=seed), "score": score, "metric": "accuracy",
                         "chance": 0.5, "n_heads_pruned": 2, "mask": mask_to_string(m)})
    return pd.DataFrame(rows)


def test_summarise_means_over_seeds_and_never_mixes_semantics():
    t = table()
    other = t.assign(ablation="uniform", score=t["score"] - 0.5)
    both = strategy_sweep.summarise(pd.concat([t, other], ignore_index=True))
    assert len(both) == 4 and set(both["ablation"]) == {"zero", "uniform"}
    u = both[both["ablation"] == "uniform"].set_index("strategy")
    assert u.loc["top", "mean"] == pytest.approx(0.3) and u.loc["top", "n_seeds"] == 3
    s = strategy_sweep.summarise(t).set_index("strategy")
    assert s.loc["top", "mean"] == pytest.approx(0.8) and s.loc["random", "mean"] == pytest.approx(0.7)
    assert s.loc["top", "n_seeds"] == 3 and (s["ci_low"] <= s["mean"]).all() and (s["mean"] <= s["ci_high"]).all()


def test_example_masks_one_per_strategy_in_the_given_order():
    rows = strategy_sweep.example_masks(table(), order=("top", "random"))
    assert list(dict.fromkeys(rows["strategy"])) == ["top", "random"] and len(rows) == 2 * 12
    top = rows[rows["strategy"] == "top"].pivot(index="layer", columns="head", values="kept").to_numpy()
    assert top[2, :2].sum() == 0 and top.sum() == 10
    r = rows[rows["strategy"] == "random"]  # seed 0 by default: its mask prunes layer 0
    assert r[(r["layer"] == 0) & (r["head"] < 2)]["kept"].sum() == 0
    assert strategy_sweep.example_masks(table()[table()["strategy"] == "none"]).empty
    assert mask_from_string(table()["mask"].iloc[0]).shape == (3, 4)
    # a strategy not in ``order`` (the standard profile's "iterative_importance") comes last, never a KeyError
    assert list(dict.fromkeys(strategy_sweep.example_masks(table(), order=("random",))["strategy"])) == ["random", "top"]
