"""Strict parameters: unknown keys, wrong types and impossible budgets fail early and clearly."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from headprune_utils import run
from headprune_utils.config import ParameterError, validate
from headprune_utils.models import ModelUnavailableError
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


def test_study_checks_budget_task_and_model():
    assert validate(RandomPruningConfig, {}).model == "minilm"
    with pytest.raises(ParameterError, match="150 heads of 72"):
        validate(RandomPruningConfig, {"fractions": [0.0, 150 / 72]})
    with pytest.raises(ParameterError, match="unknown GLUE task|valid"):
        validate(RandomPruningConfig, {"tasks": ["SST-3"]})
    with pytest.raises(ParameterError, match="regimes"):
        validate(RandomPruningConfig, {"regimes": ["prune_whenever"]})
    with pytest.raises(ParameterError, match="ablation"):
        validate(RandomPruningConfig, {"ablation": "random"})
    with pytest.raises(ModelUnavailableError, match="(?s)bert-base-uncased.*(HF_HUB_OFFLINE|internet)"):
        validate(RandomPruningConfig, {"model": "bert-base-uncased"})


def test_runner_rejects_bad_profiles_before_running(tmp_path, monkeypatch, capsys):
    executed = []
    monkeypatch.setattr(run, "execute_study", lambda *a, **k: executed.append(a) or 0.0)
    monkeypatch.setattr("headprune_utils.config.params_dir", lambda: tmp_path)
    (tmp_path / "bad.yaml").write_text("random_pruning:\n  fractoins: [0.5]\n")
    assert run.main(["--profile", "bad"]) == 2
    assert "fractoins" in capsys.readouterr().err
    (tmp_path / "budget.yaml").write_text("random_pruning:\n  fractions: [0.0, 2.5]\n")
    assert run.main(["--profile", "budget"]) == 2
    assert "180 heads of 72" in capsys.readouterr().err
    (tmp_path / "study.yaml").write_text("no_such_study: {}\n")
    assert run.main(["--profile", "study"]) == 2
    assert "no_such_study" in capsys.readouterr().err
    assert run.main(["--profile", "missing"]) == 2
    assert "unknown profile 'missing'" in capsys.readouterr().err
    assert executed == []
    (tmp_path / "ok.yaml").write_text("random_pruning:\n  seeds: [0]\n")
    assert run.main(["--profile", "ok", "--check"]) == 0
    assert run.main(["--profile", "ok", "--only", "nope"]) == 2
    assert executed == []


def test_committed_profiles_are_valid_offline():
    # the paper profile names a hub model: checked without the model's config (offline here)
    for profile in ("smoke", "quick"):
        assert run.validate_profile(profile)
    from headprune_utils.config import load_profile

    paper = load_profile("paper")
    assert set(paper) <= set(STUDIES)


def test_fresh_moves_earlier_results_aside_and_keeps_them(tmp_path, monkeypatch):
    from headprune_utils.paths import StudyPaths

    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    paths = StudyPaths("random_pruning", "quick")
    paths.ensure()
    (paths.cells / "a.json").write_text("{}")
    backup = run.move_aside(paths)
    assert not paths.dir.exists()
    assert backup.parent == paths.dir.parent and backup.name.startswith("quick.bak-")
    assert (backup / "cells" / "a.json").read_text() == "{}"
    assert run.move_aside(paths) is None  # nothing to move


def test_cell_progress_counts_finished_cells(tmp_path):
    cells = tmp_path / "cells"
    cells.mkdir()
    (cells / "done.json").write_text("{}")
    with run.CellProgress(cells, total=3, desc="t", interval=0.05) as progress:
        assert progress.bar.n == 1
        (cells / "two.json").write_text("{}")
        (cells / "ignored.tmp").write_text("")
    assert progress.bar.n == 2
