"""Progress that informs: the time left from the plan's costs calibrated by the cells measured in the run
(``profiles.TimeLeft``), and a progress text that names what runs now (``execution.Progress``, fed by
``train.phases``: loading, a cell, a model's training with its epoch and step)."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

from conftest import tiny_model
from fake_studies import FakeConfig, FakeStudy
from headprune_utils.run import execution
from headprune_utils.run.execution import Progress, read_status, run_study
from headprune_utils.run.profiles import TimeLeft, calibrated_gflops, duration_text
from headprune_utils.store.paths import RUN_OUTPUTS, StudyPaths
from headprune_utils.studies.base import Cell, Cost
from headprune_utils.tasks.batching import Encoded
from headprune_utils.train import phases
from headprune_utils.train.training import TrainConfig, finetune


# ------------------------------------------------------------------------------------------- the estimator

def synthetic_run(seed: int = 0):
    """A run like a study's: one cell that also trains the model (20x the others), then 60 cells whose costs vary
    tenfold; true seconds = 2e-9 per FLOP, +-20% noise."""
    rng = np.random.default_rng(seed)
    costs = {"first": 2e12, **{f"c{i}": float(rng.uniform(1e10, 1e11)) for i in range(60)}}
    seconds = {k: 2e-9 * c * float(rng.uniform(0.8, 1.2)) for k, c in costs.items()}
    return costs, seconds


def test_time_left_starts_at_the_prior_and_is_calibrated_by_the_cells_measured():
    costs, seconds = synthetic_run()
    total = sum(seconds.values())
    est = TimeLeft(costs, prior=1e-9, prior_weight=60.0)  # the prior is 2x too fast
    assert est.seconds_left() == pytest.approx(1e-9 * sum(costs.values()))
    assert abs(est.seconds_left() - total) / total > 0.4  # the prior alone is far off
    errors, spent = [], 0.0
    for key in costs:
        est.done(key, seconds[key])
        spent += seconds[key]
        if est.left:
            errors.append(abs(spent + est.seconds_left() - total) / total)
    assert est.seconds_left() == 0.0
    assert errors[0] < 0.1  # the first cell (over a third of the run) already calibrates it
    assert max(errors) < 0.1  # against 0.5 for the prior alone


def test_time_left_is_steady_where_counting_cells_swings():
    """The count-based estimate (cells left x mean seconds per cell so far: what a plain progress bar shows) swings
    by the cells' cost mix; the cost-based one does not."""
    costs, seconds = synthetic_run(seed=1)
    total = sum(seconds.values())
    est = TimeLeft(costs, prior=1e-9)
    by_cost, by_count, spent = [], [], 0.0
    for n, key in enumerate(costs, 1):
        est.done(key, seconds[key])
        spent += seconds[key]
        if n < len(costs):
            by_cost.append(spent + est.seconds_left())
            by_count.append(spent + (len(costs) - n) * spent / n)
    swing = lambda xs: max(xs) / min(xs)  # noqa: E731
    assert swing(by_count) > 5  # the first cell makes every later cell look 20x dearer
    assert swing(by_cost) < 1.15
    assert all(abs(x - total) / total < 0.1 for x in by_cost)


def test_time_left_counts_the_running_cell_down_by_at_most_its_share():
    est = TimeLeft({"a": 1e9, "b": 3e9}, prior=1e-9, prior_weight=1.0)
    assert est.seconds_left() == pytest.approx(4.0)
    assert est.seconds_left(running_for=1.0) == pytest.approx(3.0)
    assert est.seconds_left(running_for=100.0) == pytest.approx(1.0)  # never below the cells after the running one


def test_a_cell_that_outlasts_its_estimate_is_said_to_and_never_shown_as_under_a_minute_left():
    """A fine-tuning to its plateau can outlast its planned cost: the count-down stops at the cells after it, and
    the text says the running cell is past its estimate (by how much), then what the others need; the last cell
    says only that (before, "under a minute left" for as long as it ran)."""
    est = TimeLeft({"a": 60e9, "b": 600e9}, prior=1e-9, prior_weight=1.0)
    assert est.overrun(100.0) == 0.0 and est.overrun(700.0) == pytest.approx(100.0)
    clock = Clock()
    cells = [Cell({"name": n}, cost=Cost(c)) for n, c in (("a", 6e13), ("b", 6e13))]
    shown = Progress("fake", cells, show=False, clock=clock)
    rate = shown.time_left.rate()
    clock.t = rate * 6e13 + 20 * 60  # the first cell is 20 minutes past its estimate
    assert shown.text() == f"past its estimate by 20 min; then {duration_text(rate * 6e13)} left", shown.text()
    shown.on_cell(cells[0].key)
    clock.t += shown.time_left.rate() * 6e13 + 15 * 60
    assert shown.text() == "past its estimate by 15 min", shown.text()
    clock.t -= 15 * 60 + 30
    assert shown.text() == "under a minute left"


def test_cells_without_a_cost_count_as_one_each_and_bad_numbers_are_refused():
    est = TimeLeft({"a": 0.0, "b": 0.0, "c": 0.0}, prior=1e-9)
    assert est.seconds_left() is None  # no cost, no prior: nothing to estimate from before the first cell
    est.done("a", 10.0)
    assert est.seconds_left() == pytest.approx(20.0)
    with pytest.raises(ValueError, match="cell x"):
        TimeLeft({"x": math.nan}, prior=1e-9)
    with pytest.raises(ValueError, match="prior"):
        TimeLeft({"x": 1.0}, prior=math.inf)
    with pytest.raises(ValueError, match="seconds"):
        est.done("b", math.nan)


def test_every_registered_study_has_a_calibrated_speed_and_others_the_overall_one():
    from headprune_utils.run.profiles import CALIBRATED_GFLOPS, CALIBRATED_GFLOPS_ANY
    from headprune_utils.studies import NAMES

    assert set(CALIBRATED_GFLOPS) == set(NAMES)
    assert calibrated_gflops("my_own_study") == CALIBRATED_GFLOPS_ANY
    assert duration_text(30) == "under a minute" and duration_text(725) == "about 12 min"
    assert duration_text(3900) == "about 1 h 05 min"


# ------------------------------------------------------------------------------------------- the phase shown

class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_progress_text_names_the_phase_and_the_time_left(tmp_path):
    clock = Clock()
    cells = [Cell({"name": n}, cost=Cost(1e14)) for n in ("a", "b", "c")]
    status = tmp_path / "staging" / "status.json"
    shown = Progress("fake", cells, show=False, status_file=status, clock=clock)
    assert "after the first cell" not in shown.text()  # the prior (a calibrated speed) estimates from the start
    phase = phases.steps("SST-2 s0 full: fine-tuning", 40, 57, 1, 3)
    with phases.listening(shown.on_phase):
        phases.report(phase)
    text = shown.text()
    assert text.startswith("SST-2 s0 full: fine-tuning, epoch 1/3, step 40/57; ") and text.endswith(" left"), text
    clock.t = 100.0
    shown.on_cell(cells[0].key)  # the phase of the cell done is over
    assert shown.text().startswith("about ")
    with phases.listening(shown.on_phase):
        phases.report("computing name=b")  # the first phase after a cell is shown (and written) at once
    assert read_status(status).startswith("1/3 cells computed now; computing name=b; about ")
    assert read_status(tmp_path / "none.json") is None


def test_a_run_shows_what_it_loads_computes_and_trains(tmp_path, capsys, monkeypatch):
    """run_study's bar (progress on) names the phase; the batch runner's notebooks (staged, progress off) write it
    to the status file in their staging folder, never into their outputs."""

    class TrainingStudy(FakeStudy):
        def run(self, ctx, cells, inputs):
            for c in cells:
                phases.report(phases.steps(f"{c['name']}: fine-tuning", 3, 9, 1, 3))
                yield from super().run(ctx, [c], inputs)

    monkeypatch.setattr(execution, "PROGRESS_INTERVAL", 0.0)  # every phase shown
    seen: list[str] = []
    with phases.listening(seen.append):
        run_study(TrainingStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=tmp_path / "a"), progress=True)
    err = capsys.readouterr().err
    assert "fake: loading what the cells need" in seen[0]
    assert "computing name=a0" in seen and "computing name=b" in seen
    assert "a0: fine-tuning, epoch 1/3, step 3/9" in seen
    assert "fake cells:" in err and "fine-tuning, epoch 1/3, step 3/9" in err and " left" in err, err

    staged = StudyPaths("fake", "t", root=tmp_path / "b", staged=True)
    run_study(TrainingStudy(), FakeConfig(), "t", staged, progress=False)
    assert capsys.readouterr().err == ""  # no bar
    assert read_status(staged.staging / execution.STATUS_FILE).startswith("5/5 cells computed now; ")
    assert execution.STATUS_FILE not in RUN_OUTPUTS  # promoted outputs never carry it
    plain = StudyPaths("fake", "t", root=tmp_path / "c")
    run_study(TrainingStudy(), FakeConfig(), "t", plain, progress=False)
    assert not plain.staging.exists()  # a run outside the batch runner writes no status file


def test_fine_tuning_reports_its_epoch_and_step():
    rng = np.random.default_rng(0)
    ids = [[2] + [int(x) for x in rng.integers(5, 120, size=5)] + [3] for _ in range(6)]
    enc = Encoded(ids, None, rng.normal(size=6).astype(np.float32), pad_id=0)
    seen: list[str] = []
    with phases.listening(seen.append):
        finetune(tiny_model(num_labels=1), enc, "stsb", TrainConfig(epochs=2, batch_size=4), seed=0,
                 progress=False, desc="STS-B s0 full")
    assert seen[0] == "STS-B s0 full: fine-tuning, epoch 1/2, step 0/4"
    assert "STS-B s0 full: fine-tuning, epoch 2/2, step 4/4" in seen
    assert phases.current() == seen[-1]


def test_no_listener_means_no_cost_and_no_output(capsys):
    t0 = time.perf_counter()
    for i in range(10000):
        phases.report(phases.steps("x", i, 10000))
    assert time.perf_counter() - t0 < 1.0
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
