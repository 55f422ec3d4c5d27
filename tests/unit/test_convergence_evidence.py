"""The convergence evidence of the GLUE studies (studies/convergence.py) from stored cells: full models once per
(task, seed) from any semantics, masked models per setting, the curves a figure draws; checked by hand."""
from __future__ import annotations

import pandas as pd
import pytest

from headprune_utils.analysis import preconditions
from headprune_utils.analysis.claims import Measurement
from headprune_utils.studies import convergence

REACHED = [{"epoch": 1, "val_score": 0.80}, {"epoch": 2, "val_score": 0.84, "selected": True},
           {"epoch": 3, "val_score": 0.83}, {"epoch": 4, "val_score": 0.82}]
CAPPED = [{"epoch": 1, "val_score": 0.70}, {"epoch": 2, "val_score": 0.75}, {"epoch": 3, "val_score": 0.78, "selected": True}]
NO_SPLIT = [{"epoch": 1, "train_loss": 0.5}, {"epoch": 2, "train_loss": 0.4}]


def cells():
    return pd.DataFrame([
        {"task": "SST-2", "seed": 0, "ablation": "zero", "fraction": 0.0, "history": []},       # evaluation only
        {"task": "SST-2", "seed": 0, "ablation": "uniform", "fraction": 0.0, "history": REACHED},
        {"task": "SST-2", "seed": 1, "ablation": "uniform", "fraction": 0.0, "history": CAPPED},
        {"task": "CoLA", "seed": 0, "ablation": "uniform", "fraction": 0.0, "history": NO_SPLIT},
        {"task": "CoLA", "seed": 1, "ablation": "uniform", "fraction": 0.0, "history": None},
        {"task": "SST-2", "seed": 0, "ablation": "uniform", "fraction": 0.5, "history": CAPPED},
    ])


def test_full_rows_take_the_stored_curve_of_each_model_once():
    full = cells()[cells()["fraction"] == 0]
    rows = convergence.table(convergence.full_rows(full))
    assert list(rows.columns) == convergence.COLUMNS
    got = {r["unit"]: (r["epochs"], r["best_epoch"], r["reached"]) for r in rows.to_dict("records")}
    assert got[("SST-2", 0)] == (4, 2, True)       # the evaluation-only cell's empty history is not its curve
    assert got[("SST-2", 1)] == (3, 3, False)      # best at the cap: still improving
    assert pd.isna(got[("CoLA", 0)][1]) and not got[("CoLA", 0)][2]  # no validation split: no epoch chosen
    assert got[("CoLA", 1)][0] == 0 and pd.isna(got[("CoLA", 1)][1]) and not got[("CoLA", 1)][2]
    assert set(rows["setting"]) == {""} and set(rows["model"]) == {"full model"}


def test_masked_rows_carry_the_setting_and_name_and_the_gate_reads_them():
    t = cells()
    rows = convergence.full_rows(t[(t["fraction"] == 0) & (t["task"] == "SST-2") & (t["seed"] == 0)])
    rows += convergence.masked_rows(t[t["fraction"] == 0.5], "50%; mask, then fine-tune",
                                    lambda r: f"random {100 * r['fraction']:g}% mask")
    ev = convergence.table(rows)
    gate = preconditions.Converged()
    from headprune_utils.analysis.claims import Measurement
    m = Measurement("SST-2", [0.0], [("SST-2", 0)], setting="50%; mask, then fine-tune")
    assert "random 50% mask of SST-2 seed 0 (best epoch 3 of 3)" in gate.check(m, {"convergence": ev})
    other = Measurement("SST-2", [0.0], [("SST-2", 0)], setting="50%; fine-tune, then mask")
    assert gate.check(other, {"convergence": ev}) is None  # only the full model stands behind it, and it reached


def test_curves_one_row_per_epoch_with_the_kept_epoch_and_the_plateau():
    t = cells()
    c = convergence.curves(t[t["task"] == "SST-2"], lambda r: "full" if r["fraction"] == 0 else "masked")
    assert list(c.columns) == convergence.CURVE_COLUMNS and len(c) == 4 + 3 + 3
    kept = c[c["selected"]]
    assert list(zip(kept["seed"], kept["model"], kept["epoch"], kept["reached"])) == [
        (0, "full", 2, True), (1, "full", 3, False), (0, "masked", 3, False)]
    assert c.loc[(c["seed"] == 0) & (c["model"] == "full"), "score"].tolist() == [0.80, 0.84, 0.83, 0.82]
    assert convergence.curves(t[t["task"] == "CoLA"], lambda r: "full").empty  # no validation split: no curve
    torn = t[t["seed"] == 1].head(1).assign(history=[[{"epoch": 1, "val_score": 0.7}, {"epoch": 2}]])
    with pytest.raises(ValueError, match="without a held-out score"):
        convergence.curves(torn, lambda r: "full")


def test_the_curves_figure_dashes_the_runs_still_improving_and_marks_the_kept_epoch():
    import matplotlib
    matplotlib.use("Agg")
    from headprune_utils import figures

    t = cells()
    c = convergence.curves(t[t["task"] == "SST-2"], lambda r: "full model" if r["fraction"] == 0 else "50% pruned")
    fig = figures.curves.held_out_curves(c)
    ax = fig.axes[0]
    styles = sorted(line.get_linestyle() for line in ax.get_lines() if line.get_label().startswith("_"))
    assert styles == ["-", "--", "--"]  # seed 1's full model and the masked model stopped at the cap
    assert sum(len(col.get_offsets()) for col in ax.collections) == 3  # one kept epoch per run
    assert ax.get_title().startswith("SST-2") and "2 of 3 runs still improving" in ax.get_title().replace("\n", " ")
    empty = figures.curves.held_out_curves(convergence.curves(t[t["task"] == "CoLA"], lambda r: "full"))
    assert "no held-out curve" in " ".join(x.get_text() for x in empty.axes[0].texts)


def test_last_improvement_and_the_plateau_with_a_smallest_gain():
    """The dev-loss plateau rule with min_delta: an evaluation improves only when it beats the last improvement by
    more than min_delta; 0 is the first occurrence of the lowest loss (argmin)."""
    creep = [3.0, 2.5, 2.499, 2.498, 2.497, 2.496]
    assert preconditions.last_improvement(creep) == 5
    assert preconditions.last_improvement(creep, 0.01) == 1
    assert preconditions.last_improvement([2.0, 1.5, 1.5, 1.6]) == 1  # a tie is no improvement
    assert preconditions.last_improvement([2.0, 1.95, 1.9, 1.85], 0.06) == 2  # gains add up from the reference
    with pytest.raises(ValueError, match="min_delta"):
        preconditions.last_improvement(creep, -0.1)
    nan = float("nan")
    assert preconditions.last_improvement([nan, 2.0, 1.5]) == 2  # a non-finite loss is never the reference
    assert preconditions.last_improvement([nan, nan]) is None and preconditions.last_improvement([]) is None
    assert "none of its 2 dev losses is finite" in preconditions.plateau([{"dev_loss": nan}] * 2, 1)
    history = [{"step": 250 * (i + 1), "dev_loss": x} for i, x in enumerate(creep)]
    assert preconditions.plateau(history, 4, 0.01) is None
    why = preconditions.plateau(history, 4)
    assert "has not reached a plateau" in why and "its best (2.496)" in why
    why = preconditions.plateau(history, 5, 0.01)
    assert "its last improvement by more than 0.01 nats (2.500) is at evaluation 2 of 6" in why
    gate = preconditions.Plateau(n=4, min_delta=0.01)
    assert "by more than 0.01 nats" in gate.text() and "by more" not in preconditions.Plateau(n=4).text()


def test_a_task_evaluated_only_after_fine_tuning_reads_its_full_models_curve_from_the_cells_that_recorded_it():
    """CoLA and MRPC have no mask-then-fine-tune cell in standard-next: the fine-tune-then-mask cells record the curve
    of the full model they mask (``full_model_history``), and that is the full model's evidence; a model fine-tuned
    at share 0 keeps precedence; a cell without the record (computed before it existed) adds nothing."""
    full = pd.DataFrame([{"task": "SST-2", "seed": 0, "history": REACHED}])
    ftm = pd.DataFrame([
        {"task": "SST-2", "seed": 0, "full_model_history": CAPPED},   # not read: the share-0 cell's curve comes first
        {"task": "CoLA", "seed": 0, "full_model_history": []},        # an older cell: no record
        {"task": "CoLA", "seed": 0, "full_model_history": CAPPED},
        {"task": "CoLA", "seed": 1, "full_model_history": REACHED},
        {"task": "MRPC", "seed": 0, "full_model_history": None},       # no record at all: no row (as before)
    ])
    rows = convergence.table(convergence.full_rows_recorded(full, ftm)).set_index(["task", "unit"])
    assert list(rows.index) == [("CoLA", ("CoLA", 0)), ("CoLA", ("CoLA", 1)), ("SST-2", ("SST-2", 0))]
    assert rows.loc[("SST-2", ("SST-2", 0)), "reached"] and rows.loc[("SST-2", ("SST-2", 0)), "best_epoch"] == 2
    assert not rows.loc[("CoLA", ("CoLA", 0)), "reached"] and rows.loc[("CoLA", ("CoLA", 1)), "reached"]
    # cells without the column leave the evidence what full_rows alone gives
    assert convergence.full_rows_recorded(full, ftm.drop(columns="full_model_history")) == convergence.full_rows(full)
    # the gate names the CoLA full model that stopped still improving (before: no curve, nothing to judge)
    m = Measurement("CoLA", [0.1, 0.2], [("CoLA", 0), ("CoLA", 1)], "", "uniform", "e", "u")
    why = preconditions.Converged().check(m, {"convergence": convergence.table(convergence.full_rows_recorded(full, ftm))})
    assert "1 of 2 fine-tuned models on CoLA were still improving" in why
    assert "no held-out training curve" in preconditions.Converged().check(
        m, {"convergence": convergence.table(convergence.full_rows_recorded(full, ftm.iloc[:0]))})
