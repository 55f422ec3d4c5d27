"""The Ray executor on a local Ray instance (2 CPUs): the same results as in-process, a killed worker retried,
a dead cell reported with its dependants. Skipped only where Ray is not installed (``pip install -e '.[ray]'``;
``make test`` installs it)."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from headprune_utils.run.execution import CellsFailed, RayExecutor, run_study  # noqa: E402
from headprune_utils.store.paths import StudyPaths  # noqa: E402

from fake_studies import FakeConfig, FakeStudy  # noqa: E402

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module; its workers import this folder's modules (PYTHONPATH) and inherit
    OMP_NUM_THREADS=2 (as where an earlier step of the process set it): the tasks must still compute with one
    torch thread (RayExecutor.threads)."""
    with pytest.MonkeyPatch.context() as mp:  # restores both variables (or their absence) at the end
        mp.setenv("PYTHONPATH", str(HERE), prepend=os.pathsep)
        mp.setenv("OMP_NUM_THREADS", "2")
        yield RayExecutor(num_cpus=2)
        ray.shutdown()


def results(table: pd.DataFrame) -> pd.DataFrame:
    drop = [c for c in table.columns if c == "seconds" or c.startswith("seconds_") or c == "batch"]
    return table.drop(columns=drop).sort_values(list(table.columns[:1])).reset_index(drop=True)


def test_fake_study_on_ray_equals_local(local_ray, tmp_path):
    local = run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "local", root=tmp_path))
    remote = run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "ray", root=tmp_path), executor=local_ray)
    pd.testing.assert_frame_equal(results(local), results(remote))
    import json

    assert json.loads(StudyPaths("fake", "ray", root=tmp_path).meta.read_text())["executor"] == "ray"


def test_a_killed_worker_is_retried(local_ray, tmp_path, monkeypatch):
    marker = tmp_path / "died"
    monkeypatch.setenv("HEADPRUNE_TEST_FAULTS", f"die-once:name=a1:{marker}")
    table = run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=tmp_path), executor=local_ray)
    assert marker.exists(), "the first worker to start a1 died"
    assert dict(zip(table["name"], table["value"]))["b"] == 13.0


def test_a_cell_whose_worker_always_dies_is_reported_and_its_dependants_not_run(local_ray, tmp_path, monkeypatch):
    marker = tmp_path / "died"
    monkeypatch.setenv("HEADPRUNE_TEST_FAULTS", f"die:name=a2:{marker}")
    with pytest.raises(CellsFailed) as info:
        run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=tmp_path), executor=local_ray)
    # a0 shares a2's batch (group "even"), so it fails with it; b requires a2
    assert set(info.value.failed) == {"name=a0", "name=a2"} and info.value.skipped == {"name=b": "name=a2"}
    assert "died" in str(info.value).lower() or "worker" in str(info.value).lower()
    stored = sorted(p.stem for p in StudyPaths("fake", "t", root=tmp_path).cells.glob("*.json"))
    assert stored == ["name=a1", "name=a3"]


def test_study_one_on_ray_equals_local(local_ray, tiny_model_dir, tiny_glue_root, tmp_path):
    """A real study (tiny model): the cells Ray computes equal the in-process ones, the trained weights' hashes
    included. Like with like: a Ray task computes with one torch thread (RayExecutor.threads, whatever
    OMP_NUM_THREADS its worker inherited: an earlier test may have set it in this process), and training with
    another number of threads gives other weights (bytes) on this CPU, so the in-process run here has one thread
    too."""
    import torch

    from headprune_utils.studies.config import validate
    from headprune_utils.studies import random_pruning as study

    cfg = validate(study.RandomPruningConfig, dict(
        model=str(tiny_model_dir), tasks=["SST-2"], fractions=[0.0, 0.5], finetune_fractions=None, seeds=[0, 1],
        train_size=None, dev_size=None, epochs=1, batch_size=8, lr=1e-3, device="cpu", data_dir=str(tiny_glue_root),
        allow_hub=False, progress=False))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        local = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path / "local"))
    finally:
        torch.set_num_threads(threads)
    remote = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path / "ray"), executor=local_ray)
    key = ["task", "regime", "fraction", "seed"]
    a = local.drop(columns=["seconds", "history"]).sort_values(key).reset_index(drop=True)
    b = remote.drop(columns=["seconds", "history"]).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)
