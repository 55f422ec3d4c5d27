"""A study killed with SIGKILL mid-run resumes: every finished cell reused, the table equal to an uninterrupted
run's (on a configuration whose scores vary), no half-written cell."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from headprune_utils.studies.config import validate
from headprune_utils.run.execution import run_study
from headprune_utils.store.paths import StudyPaths
from headprune_utils.studies import random_pruning as study

PARAMS = dict(tasks=["SST-2"], fractions=[0.0, 0.25, 0.5, 0.75], finetune_fractions=None, seeds=[0, 1, 2],
              train_size=None, dev_size=None, epochs=2, batch_size=8, lr=1e-3, device="cpu", allow_hub=False,
              progress=False)

CHILD = """
import sys, time
from headprune_utils.studies.config import validate
from headprune_utils.run.execution import run_study
from headprune_utils.store.paths import StudyPaths
from headprune_utils.studies import random_pruning as study
from headprune_utils.train import training
real = training.finetune
def slow(*a, **k):  # slow enough for the parent to kill it between cells
    time.sleep(0.5)
    return real(*a, **k)
training.finetune = slow
params = eval(sys.argv[1])
cfg = validate(study.RandomPruningConfig, params)
from pathlib import Path
run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=Path(sys.argv[2])))
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
def test_sigkill_mid_study_then_resume_equals_an_uninterrupted_run(tiny_model_dir, tiny_glue_root, tmp_path):
    params = {**PARAMS, "model": str(tiny_model_dir), "data_dir": str(tiny_glue_root)}
    cfg = validate(study.RandomPruningConfig, params)
    ref = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path / "ref"))
    losses = lambda t: t["history"].map(lambda h: tuple(round(r["train_loss"], 12) for r in h))  # noqa: E731
    # the tiny model's dev accuracy barely moves, but every fine-tuning's training losses differ: compared too
    assert losses(ref).nunique() > 6, "a configuration whose results vary from cell to cell"

    killed = StudyPaths(study.NAME, "t", root=tmp_path / "killed")
    import torch

    # the same number of threads as this process: a different count rounds differently
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads()),
           "MKL_NUM_THREADS": str(torch.get_num_threads())}
    child = subprocess.Popen([sys.executable, "-c", CHILD, repr(params), str(tmp_path / "killed")], env=env)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and child.poll() is None:
            if killed.cells.exists() and len(list(killed.cells.glob("*.json"))) >= 4:
                break
            time.sleep(0.05)
        assert child.poll() is None, "the child finished before it could be killed"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    done_before = {p.name for p in killed.cells.glob("*.json")}
    assert 4 <= len(done_before) < len(ref)
    import json

    for p in killed.cells.glob("*.json"):
        json.loads(p.read_text())  # no half-written cell under a cell's name (a killed write leaves a .tmp)

    calls = []
    real = study.run_cell

    def counting(ctx, cell):
        calls.append(cell)
        return real(ctx, cell)

    study.run_cell, saved = counting, study.run_cell
    try:
        resumed = run_study(study.STUDY, cfg, "t", killed)
    finally:
        study.run_cell = saved
    assert len(calls) == len(ref) - len(done_before), "every finished cell reused"
    assert not list(killed.cells.glob(".*.tmp")), "the killed run's unfinished writes are cleaned up"
    key = ["task", "regime", "fraction", "seed"]
    cols = [c for c in ref.columns if c not in ("seconds", "history")]
    a, b = ref.sort_values(key).reset_index(drop=True), resumed.sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(a[cols], b[cols])
    assert list(losses(a)) == list(losses(b))
