"""The one scheduler and the executors (in-process, process pool, Ray), on a tiny study without a model."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import torch

from headprune_utils.run.execution import (EXECUTORS, Batch, CellsFailed, LocalExecutor, PlanError, ProcessExecutor,
                                           RayExecutor, batches_of, check_plan, make_executor, run_study)
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import StaleResultsError
from headprune_utils.studies.base import Cell

from fake_studies import FakeConfig, FakeStudy, ThreadsStudy

HERE = Path(__file__).resolve().parent


def paths(tmp_path, profile="t"):
    return StudyPaths("fake", profile, root=tmp_path)


def values(table):
    return dict(zip(table["name"], table["value"]))


def test_plan_errors_name_the_cell():
    a, b = Cell({"x": 1}), Cell({"x": 2}, requires=("x=9",))
    with pytest.raises(PlanError, match="x=1 is planned twice"):
        check_plan([a, Cell({"x": 1})])
    with pytest.raises(PlanError, match="x=2 requires x=9, which is not in the plan"):
        check_plan([a, b])
    c1, c2 = Cell({"x": 1}, requires=("x=2",)), Cell({"x": 2}, requires=("x=1",))
    with pytest.raises(PlanError, match="cycle"):
        check_plan([c1, c2])


def test_batches_keep_plan_order_and_gather_groups():
    cells = [Cell({"i": i}, group="g" if i in (1, 3) else None) for i in range(5)]
    assert [[c["i"] for c in b] for b in batches_of(cells)] == [[0], [1, 3], [2], [4]]


def test_requirements_first_inputs_passed_groups_batched(tmp_path, monkeypatch):
    study = FakeStudy()
    seen = []
    real = FakeStudy.run

    def spy(self, ctx, cells, inputs):
        seen.append(([c["name"] for c in cells], sorted(inputs)))
        yield from real(self, ctx, cells, inputs)

    monkeypatch.setattr(FakeStudy, "run", spy)
    table = run_study(study, FakeConfig(), "t", paths(tmp_path))
    assert values(table) == {"a0": 1.0, "a1": 4.0, "a2": 9.0, "a3": 16.0, "b": 13.0}
    # a0 and a2 (group "even") in one batch at a0's place; b last, with a1's and a2's stored results
    assert seen == [(["a0", "a2"], []), (["a1"], []), (["a3"], []), (["b"], ["name=a1", "name=a2"])]


def test_resume_reuses_cells_and_refuses_other_parameters(tmp_path, monkeypatch):
    study = FakeStudy()
    run_study(study, FakeConfig(), "t", paths(tmp_path))
    monkeypatch.setattr(FakeStudy, "run", lambda *a: pytest.fail("nothing should be recomputed"))
    assert len(run_study(study, FakeConfig(), "t", paths(tmp_path))) == 5
    with pytest.raises(StaleResultsError, match="other parameters"):
        run_study(study, FakeConfig(scale=2.0), "t", paths(tmp_path))


def test_a_failure_is_named_dependants_skipped_the_rest_stored(tmp_path):
    study = FakeStudy()
    with pytest.raises(CellsFailed) as info:
        run_study(study, FakeConfig(fail=["a1"]), "t", paths(tmp_path))
    err = info.value
    assert list(err.failed) == ["name=a1"] and err.skipped == {"name=b": "name=a1"}
    assert "broken on purpose" in str(err) and "not run: name=b (requires name=a1" in str(err)
    stored = sorted(p.stem for p in paths(tmp_path).cells.glob("*.json"))
    assert stored == ["name=a0", "name=a2", "name=a3"]
    # the rerun computes only what is missing
    table = run_study(study, FakeConfig(), "t", paths(tmp_path))
    assert values(table)["b"] == 13.0


def test_a_failure_inside_a_group_keeps_the_cells_before_it(tmp_path):
    with pytest.raises(CellsFailed) as info:
        run_study(FakeStudy(), FakeConfig(fail=["a2"]), "t", paths(tmp_path))
    assert set(info.value.failed) == {"name=a2"} and set(info.value.skipped) == {"name=b"}
    assert (paths(tmp_path).cells / "name=a0.json").exists(), "a0 ran in the same batch before a2 failed"


def test_metadata_records_the_executor_and_run_params(tmp_path):
    import json

    run_study(FakeStudy(), FakeConfig(), "t", paths(tmp_path))
    meta = json.loads(paths(tmp_path).meta.read_text())
    assert meta["executor"] == "local" and meta["study"] == "fake"
    assert meta["durations_seconds"]["cells_computed_now"] == 5


def test_stale_results_name_the_changed_parameter(tmp_path):
    run_study(FakeStudy(), FakeConfig(), "t", paths(tmp_path))
    with pytest.raises(StaleResultsError, match=r"scale: 1\.0 -> 2\.0"):
        run_study(FakeStudy(), FakeConfig(scale=2.0), "t", paths(tmp_path))


def test_store_refuses_to_overwrite_a_record_of_other_parameters(tmp_path):
    from headprune_utils.store.results import ResultStore

    ResultStore(tmp_path, "aaaa").put({"x": 1}, {"v": 1})
    other = ResultStore(tmp_path, "bbbb")
    with pytest.raises(StaleResultsError, match="Nothing was overwritten"):
        other.put({"x": 1}, {"v": 2})
    with pytest.raises(StaleResultsError):
        other.get({"x": 1})
    assert ResultStore(tmp_path, "aaaa").get({"x": 1})["result"] == {"v": 1}
    assert other.records() == [], "a table is built from records of its own fingerprint only"


@pytest.mark.parametrize("content", ["", '{"cell": {"name": "a1"}, "fingerpr', "{}", "[1, 2]", "\xff\xfe"])
def test_a_corrupt_cell_is_quarantined_named_and_recomputed(tmp_path, content):
    from headprune_utils.store.results import CorruptCellWarning

    run_study(FakeStudy(), FakeConfig(), "t", paths(tmp_path))
    bad = paths(tmp_path).cells / "name=a1.json"
    bad.write_bytes(content.encode("latin-1"))
    with pytest.warns(CorruptCellWarning, match="name=a1.json"):
        table = run_study(FakeStudy(), FakeConfig(), "t", paths(tmp_path))
    assert values(table)["a1"] == 4.0
    assert [p.name.split(".json")[0] for p in (paths(tmp_path).dir / "quarantine").iterdir()] == ["name=a1"]


def test_a_second_runner_of_the_same_study_stops_naming_the_holder(tmp_path):
    import os

    from headprune_utils.store.results import ResultStore, StudyBusyError

    store = ResultStore(paths(tmp_path).cells, "x")
    with store.lock(owner="the first runner"):
        with pytest.raises(StudyBusyError, match=rf"pid {os.getpid()} .*the first runner"):
            run_study(FakeStudy(), FakeConfig(), "t", paths(tmp_path))
    run_study(FakeStudy(), FakeConfig(), "t", paths(tmp_path))  # free again


def test_changed_data_never_reuses_cells_and_the_message_names_the_file(tiny_model_dir, tiny_glue_root, tmp_path):
    """A data file whose content changed (say, a corrupt copy replaced by a good one) gets new cells."""
    import shutil

    from headprune_utils.studies.config import validate
    from headprune_utils.studies import random_pruning as study

    root = tmp_path / "data"
    shutil.copytree(tiny_glue_root, root)
    cfg = validate(study.RandomPruningConfig, dict(
        model=str(tiny_model_dir), tasks=["SST-2"], fractions=[0.0, 0.5], finetune_fractions=[0.5], seeds=[0],
        regimes=["finetune_then_mask"], train_size=None, dev_size=None, epochs=1, batch_size=8, lr=1e-3,
        device="cpu", data_dir=str(root), allow_hub=False, progress=False))
    p = StudyPaths(study.NAME, "t", root=tmp_path / "out")
    run_study(study.STUDY, cfg, "t", p)
    dev = root / "glue" / "SST-2" / "dev.tsv"
    lines = dev.read_text().splitlines()
    lines[1] = lines[1][:-1] + ("0" if lines[1].endswith("1") else "1")  # one label changed
    dev.write_text("\n".join(lines) + "\n")
    with pytest.raises(StaleResultsError, match=r"data SST-2/dev: '[0-9a-f]{16}' -> '[0-9a-f]{16}'"):
        run_study(study.STUDY, cfg, "t", p)


def test_two_runners_with_different_parameters_never_mix(tmp_path):
    """The second runner (other parameters) stops at once while the first holds the study, and is refused after
    it: the cells all carry the first run's fingerprint."""
    import json
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from headprune_utils.store.results import StudyBusyError

    here = Path(__file__).resolve().parent
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys; from pathlib import Path; from fake_studies import *; "
                              "from headprune_utils.run.execution import run_study; "
                              "from headprune_utils.store.paths import StudyPaths; "
                              "run_study(FakeStudy(), FakeConfig(delay=0.4), 't', "
                              "StudyPaths('fake', 't', root=Path(sys.argv[1])))", str(tmp_path)],
                             env={**os.environ, "PYTHONPATH": os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])})
    try:
        deadline = time.time() + 120
        while not list(paths(tmp_path).cells.glob("*.json")) and time.time() < deadline and child.poll() is None:
            time.sleep(0.02)
        assert child.poll() is None, "the first runner is still computing"
        with pytest.raises(StudyBusyError, match=r"is being computed by pid \d+ .*\(study fake, profile t\)"):
            run_study(FakeStudy(), FakeConfig(scale=2.0), "t", paths(tmp_path))
        assert child.wait(timeout=120) == 0
    finally:
        if child.poll() is None:
            child.kill()
    with pytest.raises(StaleResultsError, match=r"scale: 1\.0 -> 2\.0"):
        run_study(FakeStudy(), FakeConfig(scale=2.0), "t", paths(tmp_path))
    fps = {json.loads(p.read_text())["fingerprint"] for p in paths(tmp_path).cells.glob("*.json")}
    assert len(fps) == 1 and len(list(paths(tmp_path).cells.glob("*.json"))) == 5


def test_a_slice_computes_the_selected_cells_and_what_they_require(tmp_path):
    """``select`` (the runner's --where): only the matching cells and, transitively, their requirements; the rest
    is left for a later run, which completes the study without recomputing the slice."""
    from headprune_utils.run.profiles import parse_where, selector

    study = FakeStudy()
    table = run_study(study, FakeConfig(), "t", paths(tmp_path), select=selector(parse_where(["name=b"])))
    assert values(table) == {"a1": 4.0, "a2": 9.0, "b": 13.0}, "b and the cells it requires, nothing else"
    table = run_study(study, FakeConfig(), "t", paths(tmp_path), select=selector(parse_where(["name=a0", "name=a3"])))
    assert sorted(table["name"]) == ["a0", "a1", "a2", "a3", "b"]
    assert selector({}) is None
    with pytest.raises(ValueError, match="AXIS=VALUE"):
        parse_where(["seed"])
    match = selector(parse_where(["fraction=0.5", "seed=0"]))
    assert match({"fraction": 0.5, "seed": 0}) and not match({"fraction": 0.25, "seed": 0})
    assert match({"kind": "roles"}), "a cell without the axis is not filtered by it"


def test_where_needs_cells_only_or_from_cells(capsys):
    from headprune_utils.run.cli import build_parser, flags_error, main

    assert main(["--profile", "smoke", "--where", "seed=0"]) == 2
    assert "--where is for --cells-only (compute a slice) or --from-cells" in capsys.readouterr().err
    assert flags_error(build_parser().parse_args(["--from-cells", "--where", "task=SST-2"])) is None
    # --plan sizes every planned cell: with --where it would list cells the selection leaves out, so it is refused
    assert "--plan sizes every planned cell" in flags_error(
        build_parser().parse_args(["--plan", "--cells-only", "--where", "seed=0"]))
    # --from-cells reads stored cells alone: moving the model caches aside has no place there
    assert "does not go with --cells-only, --fresh, --fresh-caches" in flags_error(
        build_parser().parse_args(["--from-cells", "--fresh-caches"]))


def test_an_interim_render_computes_nothing_and_analyses_the_selection_alone(tmp_path, monkeypatch):
    """``--from-cells --where`` (the kernels get SELECT_ENV): the rows are the selected stored cells and what they
    require, no other stored cell; nothing is computed; run_meta.json records the selection and the counts."""
    from headprune_utils.run.execution import SELECT_ENV

    study = FakeStudy()
    run_study(study, FakeConfig(), "t", paths(tmp_path))  # every cell stored
    stored = sorted(p.name for p in paths(tmp_path).cells.glob("*.json"))
    monkeypatch.setenv(SELECT_ENV, json.dumps({"name": ["a1"]}))
    table = run_study(study, FakeConfig(), "t", paths(tmp_path))
    assert sorted(table["name"]) == ["a1"], "the selection alone, not every stored cell"
    meta = json.loads(paths(tmp_path).meta.read_text())
    assert meta["interim"] == {"where": {"name": ["a1"]}, "cells": 1, "planned": 5}
    marker = paths(tmp_path).tables / "interim.json"
    assert json.loads(marker.read_text()) == meta["interim"], "the label goes with the tables it describes"
    monkeypatch.setenv(SELECT_ENV, json.dumps({"name": ["b"]}))
    assert sorted(run_study(study, FakeConfig(), "t", paths(tmp_path))["name"]) == ["a1", "a2", "b"]
    assert sorted(p.name for p in paths(tmp_path).cells.glob("*.json")) == stored
    monkeypatch.delenv(SELECT_ENV)
    assert len(run_study(study, FakeConfig(), "t", paths(tmp_path))) == 5
    assert "interim" not in json.loads(paths(tmp_path).meta.read_text()), "a full render records no selection"


def test_a_selection_of_every_planned_cell_is_a_full_render(tmp_path, monkeypatch):
    from headprune_utils.run.execution import SELECT_ENV

    study = FakeStudy()
    run_study(study, FakeConfig(), "t", paths(tmp_path))
    monkeypatch.setenv(SELECT_ENV, json.dumps({"name": ["a0", "a1", "a2", "a3", "b"]}))
    assert len(run_study(study, FakeConfig(), "t", paths(tmp_path))) == 5
    assert "interim" not in json.loads(paths(tmp_path).meta.read_text())
    assert not (paths(tmp_path).tables / "interim.json").exists(), "nothing left out: nothing to label"


def test_the_label_of_an_interim_render_survives_computing_more_cells(tmp_path, monkeypatch):
    """The usual order: render a complete slice (interim), then compute the next slice with --cells-only (which
    rewrites the run record): the interim tables keep their label, as the summary and report read it."""
    from headprune_utils.run import summary
    from headprune_utils.run.execution import SELECT_ENV

    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    study, where = FakeStudy(), StudyPaths("fake", "t", staged=False)
    run_study(study, FakeConfig(), "t", where, select=lambda axes: axes["name"] == "a0")
    monkeypatch.setenv(SELECT_ENV, json.dumps({"name": ["a0"]}))
    run_study(study, FakeConfig(), "t", where)
    assert summary.interim_note("fake", "t").startswith("interim render: only the cells with name = a0 (1 of 5")
    monkeypatch.delenv(SELECT_ENV)
    run_study(study, FakeConfig(), "t", where, select=lambda axes: axes["name"] == "a1")  # the next slice
    assert "interim" not in json.loads(where.meta.read_text())
    assert summary.interim_note("fake", "t").startswith("interim render"), "the tables still are the interim ones"


def test_a_selection_left_in_the_shell_never_makes_a_run_interim(monkeypatch):
    """HEADPRUNE_SELECT is the runner's message to its kernels: a run without --where unsets it for its kernels
    (restored after); the runner's own cell computation never reads it (test_runner_checks)."""
    from headprune_utils.run import pipeline
    from headprune_utils.run.execution import SELECT_ENV

    monkeypatch.setenv(SELECT_ENV, '{"task": ["SST-2"]}')
    with pipeline.interim_kernels(None):
        assert SELECT_ENV not in os.environ
    assert os.environ[SELECT_ENV] == '{"task": ["SST-2"]}'
    with pytest.raises(RuntimeError):
        with pipeline.interim_kernels({"seed": {"1", "0"}}):
            assert json.loads(os.environ[SELECT_ENV]) == {"seed": ["0", "1"]}
            raise RuntimeError("a failing run")
    assert os.environ[SELECT_ENV] == '{"task": ["SST-2"]}', "restored after a failure too"


def test_an_interim_render_of_cells_not_stored_is_refused_before_computing(tmp_path, monkeypatch):
    from headprune_utils.run.execution import SELECT_ENV, InterimIncomplete

    study = FakeStudy()
    run_study(study, FakeConfig(), "t", paths(tmp_path), select=lambda axes: axes["name"] == "a0")
    monkeypatch.setenv(SELECT_ENV, json.dumps({"name": ["b"]}))
    with pytest.raises(InterimIncomplete, match=r"3 of 3 are not \(e\.g\. .*compute them first"):
        run_study(study, FakeConfig(), "t", paths(tmp_path))
    assert [p.name for p in paths(tmp_path).cells.glob("*.json")] == ["name=a0.json"], "nothing computed"
    monkeypatch.setenv(SELECT_ENV, json.dumps({"name": ["zz"]}))
    with pytest.raises(InterimIncomplete, match="no planned cell matches"):
        run_study(study, FakeConfig(), "t", paths(tmp_path))
    for bad in ("task=SST-2", "[]", '{"task": "SST-2"}', "{}"):
        monkeypatch.setenv(SELECT_ENV, bad)
        with pytest.raises(ValueError, match=SELECT_ENV):
            run_study(study, FakeConfig(), "t", paths(tmp_path))


def test_every_executor_has_the_one_interface():
    """Local, process-pool and Ray executors are driven alike (no branch on the executor's type): the same
    attributes and methods, ``start`` taking the same keywords, each made by its name."""
    import inspect

    for cls in (LocalExecutor, ProcessExecutor, RayExecutor):
        assert isinstance(cls.name, str)
        for method in ("start", "submit", "wait", "close"):
            assert callable(getattr(cls, method)), f"{cls.__name__}.{method}"
        params = inspect.signature(cls.start).parameters
        assert {"study", "cfg", "device", "paths", "profile"} <= set(params), f"{cls.__name__}.start: {list(params)}"
    assert [make_executor(name).name for name in EXECUTORS] == list(EXECUTORS) == ["local", "process", "ray"]
    assert LocalExecutor.max_in_flight == 1
    assert ProcessExecutor().max_in_flight == os.cpu_count() and ProcessExecutor(workers=3).max_in_flight == 3
    with pytest.raises(ValueError, match="executor must be one of"):
        make_executor("threads")


def test_the_job_body_streams_outcomes_and_returns_an_error_as_failed_cells(tmp_path):
    """``iter_batch`` (what every executor runs): outcomes one by one as cells finish; after an error, the cells not
    done are failed with the traceback, never raised; ``run_batch`` is the same to its end."""
    from headprune_utils.run.execution import Batch, iter_batch, run_batch

    study, cfg = FakeStudy(), FakeConfig(fail=["a2"])
    cells = [c for c in study.plan(cfg) if c.key.startswith("name=a")]
    batch = Batch(cells, {})
    stream = iter_batch(study, cfg, "cpu", paths(tmp_path), batch)
    first = next(stream)
    assert first.key == cells[0].key and first.status == "done"
    rest = list(stream)
    status = {o.key: o.status for o in [first, *rest]}
    assert status["name=a0"] == status["name=a1"] == "done" and status["name=a2"] == status["name=a3"] == "failed"
    assert "broken on purpose" in next(o.error for o in rest if o.key == "name=a2")
    assert [(o.key, o.status) for o in run_batch(study, cfg, "cpu", paths(tmp_path), batch)] == \
        [(o.key, o.status) for o in [first, *rest]]


# ------------------------------------------------------------------------- every executor on the same tests

@pytest.fixture(scope="module")
def process_executor():
    """One pool of two workers for the module (a worker's start-up costs seconds; the workers serve test after
    test); they inherit OMP_NUM_THREADS=2 and must still compute with one torch thread."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "2")
        ex = ProcessExecutor(workers=2, max_retries=1)
        yield ex
        ex.shutdown()


@pytest.fixture(scope="module")
def ray_executor():
    """One local Ray instance for the module (skipped where Ray is not installed); its workers import this folder's
    modules and inherit OMP_NUM_THREADS=2, as the pool's do."""
    ray = pytest.importorskip("ray")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(HERE), prepend=os.pathsep)
        mp.setenv("OMP_NUM_THREADS", "2")
        yield RayExecutor(num_cpus=2)
        ray.shutdown()


@pytest.fixture(params=EXECUTORS)
def executor(request):
    """Each executor by name: a new in-process one, the module's pool, the module's Ray instance."""
    if request.param == "local":
        return LocalExecutor()
    return request.getfixturevalue(f"{request.param}_executor")


def within(seconds: float, fn):
    """``fn()``, failing the test instead of hanging the suite when it is not done after ``seconds``."""
    result: dict = {}

    def target():
        try:
            result["value"] = fn()
        except BaseException as exc:  # handed to the test below
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds} s: it hangs")
    if "error" in result:
        raise result["error"]
    return result["value"]


def test_each_executor_computes_batches_through_the_interface(executor, tmp_path):
    """start, submit, wait (at least one finished batch each time, whichever finishes first), close: every executor
    returns the same outcomes; the pool's and Ray's workers computed with one torch thread each."""
    study, cfg = ThreadsStudy(), FakeConfig()
    executor.start(study=study, cfg=cfg, device=torch.device("cpu"), paths=paths(tmp_path), profile="t")
    try:
        pending = [executor.submit(Batch(b)) for b in batches_of([c for c in study.plan(cfg) if not c.requires])]
        got = {}
        while pending:
            finished = executor.wait(pending)
            assert finished, "wait returns at least one finished batch"
            for handle, outcomes in finished:
                pending.remove(handle)
                got.update({o.key: o for o in outcomes})
    finally:
        executor.close()
    assert {k: (o.status, o.result["value"]) for k, o in got.items()} == {
        "name=a0": ("done", 1.0), "name=a1": ("done", 4.0), "name=a2": ("done", 9.0), "name=a3": ("done", 16.0)}
    threads = {o.result["threads"] for o in got.values()}
    assert threads == ({torch.get_num_threads()} if executor.name == "local" else {1})


def test_each_executor_stores_the_cells_and_names_a_failure(executor, tmp_path):
    """The same study through each executor: a failing cell named, its dependant not run, the rest stored, the
    executor recorded; the rerun (other parameters that change no result, so the same store) completes the study
    with the values of every executor."""
    p = paths(tmp_path)
    with pytest.raises(CellsFailed) as info:
        run_study(FakeStudy(), FakeConfig(fail=["a1"]), "t", p, executor=executor)
    assert list(info.value.failed) == ["name=a1"] and info.value.skipped == {"name=b": "name=a1"}
    assert "cell a1 broken on purpose" in str(info.value)
    assert sorted(x.stem for x in p.cells.glob("*.json")) == ["name=a0", "name=a2", "name=a3"]
    assert json.loads(p.meta.read_text())["executor"] == executor.name
    table = run_study(FakeStudy(), FakeConfig(), "t", p, executor=executor)
    assert values(table) == {"a0": 1.0, "a1": 4.0, "a2": 9.0, "a3": 16.0, "b": 13.0}


def test_a_worker_killed_mid_batch_fails_that_batch_naming_its_cells(process_executor, tmp_path, monkeypatch):
    """A worker that dies computing a batch (``os._exit``, as a kill or the out-of-memory killer ends it) breaks the
    pool: the pool is rebuilt, the batches lost with it rerun, and the batch that killed it, after dying again alone
    (``max_retries`` = 1), comes back failed: each of its cells named, with the death; its dependant not run; no
    hang. Ray's counterpart is in test_ray_executor.py."""
    monkeypatch.setenv("HEADPRUNE_TEST_FAULTS", f"die:name=a2:{tmp_path / 'died'}")
    p = paths(tmp_path)
    with pytest.raises(CellsFailed) as info:
        within(120, lambda: run_study(FakeStudy(), FakeConfig(), "t", p, executor=process_executor))
    # a0 shares a2's batch (group "even"), so it fails with it; b requires a2
    assert set(info.value.failed) == {"name=a0", "name=a2"} and info.value.skipped == {"name=b": "name=a2"}
    assert all("worker process died while computing this batch, 2 time(s)" in e for e in info.value.failed.values())
    assert sorted(x.stem for x in p.cells.glob("*.json")) == ["name=a1", "name=a3"]


def test_a_worker_killed_once_is_replaced_and_its_batch_rerun(process_executor, tmp_path, monkeypatch):
    """A worker that dies once (killed, say) costs a rerun, not the cells: the study completes."""
    marker = tmp_path / "died"
    monkeypatch.setenv("HEADPRUNE_TEST_FAULTS", f"die-once:name=a1:{marker}")
    table = within(120, lambda: run_study(FakeStudy(), FakeConfig(), "t", paths(tmp_path), executor=process_executor))
    assert marker.exists(), "the first worker to start a1 died"
    assert values(table) == {"a0": 1.0, "a1": 4.0, "a2": 9.0, "a3": 16.0, "b": 13.0}


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1", "localhost:1"])
def test_a_ray_address_nobody_answers_at_fails_at_once_naming_it(address):
    """`--executor ray --address 127.0.0.1:1` waited minutes on Ray's own retries: nothing listening there is a
    clear error within the connect timeout, before Ray is started."""
    import time as _time

    from headprune_utils.run.execution import check_ray_address

    t0 = _time.perf_counter()
    with pytest.raises(RuntimeError, match="no Ray cluster answers at"):
        check_ray_address(address, timeout=2.0)
    assert _time.perf_counter() - t0 < 5
    with pytest.raises(RuntimeError, match="expected host:port"):
        check_ray_address("nonsense")
    check_ray_address(None), check_ray_address("auto")  # Ray's own to resolve


def test_the_process_pool_starts_under_a_main_module_without_spec(process_executor, tmp_path, monkeypatch):
    """A ``__main__`` without ``__spec__`` (a notebook kernel's user module, an embedding shell, or one left so by
    another test) does not stop the pool: spawn reads it to prepare each worker. The cells equal the local ones."""
    import sys

    monkeypatch.delattr(sys.modules["__main__"], "__spec__", raising=False)
    table = within(120, lambda: run_study(FakeStudy(), FakeConfig(), "t", paths(tmp_path), executor=process_executor))
    assert values(table) == {"a0": 1.0, "a1": 4.0, "a2": 9.0, "a3": 16.0, "b": 13.0}
