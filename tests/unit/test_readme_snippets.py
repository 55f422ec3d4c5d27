"""Every Python block of the README runs as written (a snippet that fails, e.g. on an undefined name or a moved
module, is a broken promise to the reader); the "add a study" recipe stores its cells and reuses them."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
TEXT = README.read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)


def test_the_readme_has_python_blocks():
    assert BLOCKS, "no ```python block found in the README"


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_python_block_runs(i, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))  # a block that stores results: not in the checkout
    namespace: dict = {}
    exec(compile(BLOCKS[i], f"README.md python block {i + 1}", "exec"), namespace)  # noqa: S102


def test_the_add_a_study_recipe_stores_its_cells_and_reuses_them(monkeypatch, tmp_path):
    recipe = [b for b in BLOCKS if "(Study):" in b and "run_study(" in b]
    assert len(recipe) == 1, "the README's one-file study recipe (a Study subclass run by run_study) is missing"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    namespace: dict = {}
    exec(compile(recipe[0], "README.md study recipe", "exec"), namespace)  # noqa: S102
    study, cfg, table = namespace["LogitDrift"](), namespace["DriftConfig"](), namespace["table"]
    cells = sorted((tmp_path / study.name / "mine" / "cells").glob("*.json"))
    assert len(cells) == len(table) == len(cfg.fractions) * len(cfg.seeds)
    drift = table.groupby("fraction")["drift"].mean()
    assert (drift > 0).all() and drift.is_monotonic_increasing  # more heads masked, further from the full model
    stamps = [c.stat().st_mtime_ns for c in cells]
    again = namespace["run_study"](study, cfg, profile="mine")
    assert [c.stat().st_mtime_ns for c in cells] == stamps  # reused, not recomputed
    assert again["drift"].tolist() == table["drift"].tolist()
    # what the README says about "module:Class": the string a worker resolves a study outside the registry by
    from headprune_utils.run.execution import study_ref
    from headprune_utils.studies import get_study
    from fake_studies import FakeStudy

    assert "`\"module:Class\"`" in TEXT and "study_ref" in TEXT
    assert study_ref(FakeStudy()) == "fake_studies:FakeStudy"
    assert isinstance(get_study(study_ref(FakeStudy())), FakeStudy)
