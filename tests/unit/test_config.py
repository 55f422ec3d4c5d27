"""Strict parameters: unknown keys, wrong types and impossible budgets fail early and clearly."""
from __future__ import annotations

import os
from pathlib import Path

from dataclasses import dataclass, field
from typing import Literal

import pytest

from headprune_utils.run import cli, notebooks, pipeline, schedule
from headprune_utils.studies.config import ParameterError, validate
from headprune_utils.studies import STUDIES
from headprune_utils.studies.random_pruning import RandomPruningConfig


@dataclass(frozen=True)
class Toy:
    n: int = 1
    x: float = 0.5
    name: Literal["a", "b"] = "a"
    items: list[float] = field(default_factory=list)
    size: int | None = None
    flag: bool = False


def test_validate_accepts_and_converts():
    t = validate(Toy, {"n": 3, "x": 2, "name": "b", "items": [1, 0.5], "size": None, "flag": True})
    assert t == Toy(n=3, x=2.0, name="b", items=[1.0, 0.5], size=None, flag=True)
    assert isinstance(t.x, float)


@pytest.mark.parametrize("params, message", [
    ({"nn": 3}, r"unknown parameter\(s\) 'nn' \(did you mean 'n'\?\)"),
    ({"n": "3"}, r"'n' must be int, got '3'"),
    ({"n": True}, r"'n' must be int, got True"),
    ({"n": 1.5}, r"'n' must be int"),
    ({"name": "c"}, r"'name' must be 'a' \| 'b', got 'c'"),
    ({"items": [1, "x"]}, r"'items' must be list\[float\]"),
    ({"items": 0.5}, r"'items' must be list\[float\]"),
    ({"size": 2.5}, r"'size' must be int \| None"),
])
def test_validate_rejects(params, message):
    with pytest.raises(ParameterError, match=message):
        validate(Toy, params)


def test_study_checks_budget_task_and_model(tiny_glue_root):
    here = {"tasks": ["SST-2"], "data_dir": str(tiny_glue_root)}  # data that exists (offline: no hub)
    assert validate(RandomPruningConfig, here).model == "minilm"
    with pytest.raises(ParameterError, match="150 heads of 72"):
        validate(RandomPruningConfig, {"fractions": [0.0, 150 / 72]})
    with pytest.raises(ParameterError, match="unknown GLUE task|valid"):
        validate(RandomPruningConfig, {"tasks": ["SST-3"]})
    with pytest.raises(ParameterError, match="regimes"):
        validate(RandomPruningConfig, {"regimes": ["prune_whenever"]})
    with pytest.raises(ParameterError, match="ablation"):
        validate(RandomPruningConfig, {"ablation": "random"})
    with pytest.raises(ParameterError, match="(?s)model: .*bert-base-uncased.*(HF_HUB_OFFLINE|internet)"):
        validate(RandomPruningConfig, {**here, "model": "bert-base-uncased"})
    with pytest.raises(ParameterError, match="(?s)tasks: no local data for STS-B train, STS-B dev.*offline mode") as err:
        validate(RandomPruningConfig, {**here, "tasks": ["SST-2", "STS-B"]})
    # the files looked for are named, and where to put them (the data folder in use)
    assert "looked for " in str(err.value) and str(Path("glue") / "STS-B" / "train.tsv") in str(err.value)
    assert "Put glue/<TASK>/ under " in str(err.value)


def test_runner_rejects_bad_profiles_before_running(tmp_path, monkeypatch, capsys, tiny_glue_root):
    executed = []
    monkeypatch.setattr(schedule, "execute_study", lambda *a, **k: executed.append(a) or 0.0)
    monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: tmp_path)
    (tmp_path / "bad.yaml").write_text("random_pruning:\n  fractoins: [0.5]\n")
    assert cli.main(["--profile", "bad"]) == 2
    assert "fractoins" in capsys.readouterr().err
    (tmp_path / "budget.yaml").write_text("random_pruning:\n  fractions: [0.0, 2.5]\n")
    assert cli.main(["--profile", "budget"]) == 2
    assert "180 heads of 72" in capsys.readouterr().err
    (tmp_path / "study.yaml").write_text("no_such_study: {}\n")
    assert cli.main(["--profile", "study"]) == 2
    assert "no_such_study" in capsys.readouterr().err
    assert cli.main(["--profile", "missing"]) == 2
    assert "unknown profile 'missing'" in capsys.readouterr().err
    assert executed == []
    (tmp_path / "ok.yaml").write_text(f"random_pruning:\n  seeds: [0]\n  tasks: [SST-2]\n  data_dir: {tiny_glue_root}\n")
    assert cli.main(["--profile", "ok", "--check", "--only", "random_pruning"]) == 0
    assert cli.main(["--profile", "ok", "--only", "nope"]) == 2
    assert executed == []


def test_fresh_moves_earlier_results_aside_and_keeps_them(tmp_path, monkeypatch):
    from headprune_utils.store.paths import StudyPaths

    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    paths = StudyPaths("random_pruning", "quick")
    paths.ensure()
    (paths.cells / "a.json").write_text("{}")
    backup = pipeline.move_aside(paths)
    assert not paths.dir.exists()
    assert backup.parent == paths.dir.parent and backup.name.startswith("quick.bak-")
    assert (backup / "cells" / "a.json").read_text() == "{}"
    assert pipeline.move_aside(paths) is None  # nothing to move


def test_cell_progress_counts_finished_cells(tmp_path):
    cells = tmp_path / "cells"
    cells.mkdir()
    (cells / "done.json").write_text("{}")
    with notebooks.CellProgress(cells, total=3, desc="t", interval=0.05) as progress:
        assert progress.bar.n == 1
        (cells / "two.json").write_text("{}")
        (cells / "ignored.tmp").write_text("")
    assert progress.bar.n == 2


def test_side_by_side_runs_every_study_with_threads_shared_out(tmp_path, monkeypatch, capsys):
    import threading
    import time

    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        # setenv first so that the variables the runner sets are restored (or removed) after the test: a bare
        # delenv of an unset variable records nothing to undo, and a leaked MKL_NUM_THREADS=2 changed later
        # tests' subprocesses' rounding
        monkeypatch.setenv(var, "0")
        monkeypatch.delenv(var)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    lock, state = threading.Lock(), {"now": 0, "most": 0, "ran": []}

    def fake(name, profile, overrides, progress):
        assert progress is False and os.getcwd() == str(schedule.project_root())
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
            state["ran"].append(name)
        return 0.05

    monkeypatch.setattr(schedule, "execute_study", fake)
    plan = {name: {} for name in list(STUDIES)[:4]}
    assert schedule.run_side_by_side(plan, "quick", jobs=2)
    assert sorted(state["ran"]) == sorted(plan) and state["most"] == 2
    assert os.environ["OMP_NUM_THREADS"] == "2" and os.environ["MKL_NUM_THREADS"] == "2"
    assert schedule.threads_per_job(3, cores=2) == 1 and schedule.threads_per_job(2, cores=16) == 8


def test_side_by_side_starts_nothing_after_a_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    ran = []

    def fake(name, profile, overrides, progress):
        ran.append(name)
        if name == first:
            raise notebooks.StudyFailed(f"study {name!r} failed")
        return 0.0

    names = list(STUDIES)[:4]
    first = names[0]
    monkeypatch.setattr(schedule, "execute_study", fake)
    assert not schedule.run_side_by_side({n: {} for n in names}, "quick", jobs=1)
    assert ran == [first]
    err = capsys.readouterr().err
    assert f"study {first!r} failed" in err and "not started after the failure" in err
    assert cli.main(["--profile", "quick", "--jobs", "0"]) == 2


def test_file_lock_lets_one_process_at_a_time_fill_a_cache_entry(tmp_path):
    import multiprocessing as mp

    from headprune_utils.store.results import file_lock

    log = tmp_path / "log.txt"
    entry = tmp_path / "cache" / "model.pt"
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("needs the fork start method (Linux/macOS)")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_fill_once, args=(str(entry), str(log), i)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    lines = log.read_text().split()
    assert lines.count("computed") == 1 and lines.count("reused") == 2
    with file_lock(entry):  # released: the lock can be taken again
        assert entry.read_text() == "model"


def _fill_once(entry: str, log: str, i: int) -> None:
    import time
    from pathlib import Path

    from headprune_utils.store.results import file_lock

    path = Path(entry)
    with file_lock(path):
        if path.exists():
            outcome = "reused"
        else:
            time.sleep(0.3)  # a slow computation: the others must wait, then reuse it
            path.write_text("model")
            outcome = "computed"
        with open(log, "a") as fh:
            fh.write(outcome + "\n")


def test_side_by_side_order_is_longest_first_by_the_last_run(tmp_path, monkeypatch):
    """--jobs > 1 starts the studies that took longest last time first (never run: first of all), so the
    last study to start is a short one; the recorded seconds include reused cells."""
    import json as _json

    from headprune_utils.store.paths import StudyPaths

    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    seconds = {"random_pruning": (10.0, 300.0), "layer_strategies": (900.0, 5.0), "compensation": (50.0, 60.0)}
    for name, (total, this_run) in seconds.items():
        meta = StudyPaths(name, "quick").meta
        meta.parent.mkdir(parents=True)
        meta.write_text(_json.dumps({"durations_seconds": {"cells_total": total, "this_run": this_run}}))
    broken = StudyPaths("zero_shot_pruning", "quick").meta
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")
    plan = {n: {"k": n} for n in ("compensation", "random_pruning", "zero_shot_pruning", "layer_strategies", "nmt_heads")}
    ordered = schedule.longest_first(plan, "quick")
    assert list(ordered) == ["zero_shot_pruning", "nmt_heads", "layer_strategies", "random_pruning", "compensation"]
    assert ordered == plan  # same studies, same overrides
    assert schedule.recorded_seconds("random_pruning", "quick") == 300.0


def test_one_rule_says_which_glue_runs_are_the_papers_set_up():
    """Every GLUE study judges "the paper's set-up" by the one rule (glue_workbench.PAPER_SETUP): the paper
    profile is it for each of them, no CPU profile is, and each study's scale text follows the rule."""
    import yaml

    from headprune_utils.store.paths import params_dir
    from headprune_utils.studies import glue_workbench

    glue = [n for n, s in STUDIES.items() if issubclass(s.Config, glue_workbench.GlueStudyConfig)]
    assert len(glue) == 6
    for profile, expected in (("paper", True), ("standard", False), ("quick", False), ("smoke", False)):
        sections = yaml.safe_load((params_dir() / f"{profile}.yaml").read_text())
        for name in glue:
            cfg = STUDIES[name].Config(**sections.get(name, {}))
            assert glue_workbench.is_paper_setup(cfg) is expected, (profile, name)
    text = glue_workbench.scale_note("x", False)
    assert text == "x; a small-scale test, not the paper's set-up" and glue_workbench.scale_note("x", True) == "x"
