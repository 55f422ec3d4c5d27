"""Every study's plan for the committed profiles: consistent (unique keys, requirements planned, no cycle),
plain cell keys, finite costs, stable fingerprints; --plan prints them without running anything."""
from __future__ import annotations

import math

import pytest
import torch

from headprune_utils.model import models
from headprune_utils.run import cli, profiles
from headprune_utils.studies.config import validate
from headprune_utils.run.execution import check_plan
from headprune_utils.studies import NAMES, STUDIES

pytestmark = pytest.mark.data


@pytest.mark.parametrize("profile", ["smoke", "quick", "standard"])
@pytest.mark.parametrize("name", NAMES)
def test_plan_is_consistent(name, profile, data_root, monkeypatch):
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    study = STUDIES[name]
    cfg = validate(study.Config, profiles.validate_profile(profile, [name])[name], where=name)
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
    assert cli.main(["--profile", "paper", "--plan", "--plan-summary"]) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert f"== {name} (paper):" in out
    assert "GPU-hours" in out and "total" in out
    assert not any(tmp_path.iterdir()), "--plan writes nothing"
    assert not models._PLANNING, "planning mode ends with the command"


def test_plan_slices_partition_the_standard_plan_and_each_where_selects_its_slice(data_root, monkeypatch, capsys,
                                                                                   tmp_path):
    """--plan --plan-slices: every planned cell in exactly one slice (one trained model: task and seed, or the
    translation model's seed), and the printed --where selects exactly that slice's cells (profiles.selector)."""
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))  # nothing stored: every slice incomplete
    with models.planning():
        plan = profiles.validate_profile("standard", None)
    rows = profiles.slice_counts(plan, "standard")
    for name in NAMES:
        study = STUDIES[name]
        cfg = validate(study.Config, {**plan[name], "progress": False}, where=name)
        with models.planning():
            cells = study.plan(cfg)
        mine = [r for r in rows if r[0] == name]
        assert sum(r[3] for r in mine) == len(cells) and all(r[2] == 0 for r in mine)
        for _, where, _, planned in mine:
            select = profiles.selector(profiles.parse_where(where.split()) if where else {})
            hit = [c for c in cells if select is None or select(dict(c.axes))]
            assert len(hit) == planned, (name, where)
    assert len([r for r in rows if r[0] == "nmt_heads"]) == len(plan["nmt_heads"]["model_seeds"])
    assert cli.main(["--profile", "standard", "--plan", "--plan-slices", "--only", "compensation"]) == 0
    out = capsys.readouterr().out
    assert "== compensation (standard): 0 of 5 slices complete, 0 of 30 cells stored" in out
    assert "0/6     --only compensation --where task=SST-2 seed=4" in out
    assert not any(tmp_path.iterdir()), "--plan writes nothing"


# What the runner guessed a cell's model from before each study declared its ``model_axes``: the slice listing took
# the first of these a cell has; the check of one training per model took (task, seed) where the table has both
# columns, else model_seed, and checked nothing where those were missing.
GUESSED_SLICE_AXES = (("task", "seed"), ("model_seed",), ("task",))


@pytest.mark.parametrize("profile", ["smoke", "quick", "standard"])
@pytest.mark.parametrize("name", NAMES)
def test_model_axes_are_axes_of_the_planned_cells_and_agree_with_the_old_guesses(name, profile, data_root,
                                                                                   monkeypatch):
    """A study's ``model_axes`` name axes its planned cells have (every cell has the first), and the slices and
    the models checked for one training are those the runner guessed from the cells' axes before."""
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    study = STUDIES[name]
    cfg = validate(study.Config, profiles.validate_profile(profile, [name])[name], where=name)
    with models.planning():
        cells = [dict(c.axes) for c in study.plan(cfg)]
    declared = study.model_axes
    assert isinstance(declared, tuple) and len(set(declared)) == len(declared)
    if declared:
        assert all(declared[0] in axes for axes in cells), f"{name}: a cell without {declared[0]!r}"
    columns = set().union(*cells)
    assert set(declared) <= columns, f"{name}: model_axes {declared} are not all axes of its cells"
    for axes in cells:
        guessed = next((k for k in GUESSED_SLICE_AXES if set(k) <= set(axes)), ())
        assert profiles.model_slice(axes, declared) == " ".join(f"{k}={axes[k]}" for k in guessed), (name, axes)
    guessed = ["task", "seed"] if {"task", "seed"} <= columns else ["model_seed"]
    assert list(declared) == (guessed if set(guessed) <= columns else []), name
