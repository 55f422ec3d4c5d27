"""Every study's plan for the committed profiles: consistent (unique keys, requirements planned, no cycle),
plain cell keys, finite costs, stable fingerprints; --plan prints them without running anything."""
from __future__ import annotations

import math

import pytest
import torch

from headprune_utils import models, run
from headprune_utils.config import validate
from headprune_utils.execution import check_plan
from headprune_utils.studies import NAMES, STUDIES

pytestmark = pytest.mark.data


@pytest.mark.parametrize("profile", ["smoke", "quick", "standard"])
@pytest.mark.parametrize("name", NAMES)
def test_plan_is_consistent(name, profile, data_root, monkeypatch):
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    study = STUDIES[name]
    cfg = validate(study.Config, run.validate_profile(profile, [name])[name], where=name)
    cells = study.plan(cfg)
    assert cells and check_plan(cells)
    for c in cells:
        assert all(isinstance(v, (str, int, float, bool)) or v is None for v in c.axes.values()), c.key
        assert math.isfinite(c.cost.flops) and c.cost.flops > 0, c.key
    assert [c.key for c in study.plan(cfg)] == [c.key for c in cells], "planning is deterministic"
    fp = study.fingerprint(cfg, torch.device("cpu"))
    assert isinstance(fp, str) and fp == study.fingerprint(cfg, torch.device("cpu"))


def test_plan_command_runs_nothing_and_sizes_the_paper_profile(data_root, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    assert run.main(["--profile", "paper", "--plan", "--plan-summary"]) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert f"== {name} (paper):" in out
    assert "GPU-hours" in out and "total" in out
    assert not any(tmp_path.iterdir()), "--plan writes nothing"
    assert not models._PLANNING, "planning mode ends with the command"
