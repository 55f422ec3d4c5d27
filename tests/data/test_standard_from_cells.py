"""The committed standard outputs are reproducible from the committed cells alone.

For every study whose standard cells are all committed, the study notebook is executed from a copy of those cells
only (no model cache, no training: a cell that would compute fails the test at once), and the verdict table it
writes must equal the committed one. Studies whose standard run is still in progress are skipped, naming how many
cells are missing; at least one study must be complete for the test to mean anything (asserted).

Rendering unchanged results leaves git clean: one complete study (the quickest to render, :data:`RENDER_TWICE`)
is rendered a second time over its first render and must write the same bytes (its executed notebook, figures,
tables, metrics, and its run_meta.json: the second render, reproducing every output, keeps the record of the run
that made them), and its executed notebook holds the committed one's cells.
"""
from __future__ import annotations

import hashlib
import shutil

import nbformat
import pandas as pd
import pytest

from headprune_utils.run.notebooks import execute_study
from headprune_utils.run.profiles import missing_cells, validate_profile
from headprune_utils.store.paths import StudyPaths, outputs_root
from headprune_utils.studies import NAMES

pytestmark = pytest.mark.data

# the studies rendered twice, in order of preference (the quickest renders first): the first complete one is
RENDER_TWICE = ("random_pruning", "nmt_heads", "zero_shot_pruning", "layer_strategies", "specialized_heads_l0",
                "compensation", "redundancy_patterns")


@pytest.fixture(scope="module")
def complete_studies(data_root) -> dict[str, tuple[int, int, str] | None]:
    """Per study: None when all its standard cells are committed, else (missing, total, ...); read once."""
    from headprune_utils.tasks import data

    with pytest.MonkeyPatch.context() as mp:  # as conftest's per-test fixture: no default folder, no hub probe
        mp.setattr(data, "default_data_dir", lambda: None)
        mp.setattr(data, "_HUB_REACHABLE", {"huggingface.co": False})
        mp.setenv("HEADPRUNE_DATA_DIR", str(data_root))
        plan = validate_profile("standard", list(NAMES))
        gaps = missing_cells(plan, "standard")
    return {name: gaps.get(name) for name in NAMES}


def test_at_least_one_standard_study_is_complete(complete_studies):
    assert any(v is None for v in complete_studies.values()), \
        f"no standard study has all its cells committed: {complete_studies}"


@pytest.mark.parametrize("name", NAMES)
def test_a_complete_standard_study_renders_from_its_cells_alone(name, complete_studies, data_root, monkeypatch,
                                                                tmp_path):
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    gap = complete_studies[name]
    if gap is not None:
        pytest.skip(f"{name}: the standard run is in progress ({gap[0]} of {gap[1]} cells not committed yet)")
    committed = StudyPaths(name, "standard", root=outputs_root(), staged=False)  # the checkout's, fixed now
    assert committed.cells.is_dir()
    # a fresh output root holding the committed cells only: no model cache, nothing else
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "outputs"))
    fresh = StudyPaths(name, "standard", staged=False)
    shutil.copytree(committed.cells, fresh.cells)
    plan = validate_profile("standard", [name])
    assert missing_cells(plan, "standard") == {}
    before = {p.name for p in fresh.cells.iterdir()}
    execute_study(name, "standard", plan[name], progress=False)
    assert {p.name for p in fresh.cells.iterdir()} == before, "rendering computed no cell"
    assert not (tmp_path / "outputs" / "_finetuned").exists() and not (tmp_path / "outputs" / "_nmt").exists(), \
        "no model was trained or loaded into a cache"
    mine = pd.read_csv(fresh.dir / "tables" / "verdicts.csv")
    theirs = pd.read_csv(committed.dir / "tables" / "verdicts.csv")
    pd.testing.assert_frame_equal(mine, theirs)
    if name == next(n for n in RENDER_TWICE if complete_studies[n] is None):
        first = rendered(fresh)
        execute_study(name, "standard", plan[name], progress=False)
        assert rendered(fresh) == first, f"{name}: a second render of the same cells changed files"
        assert f"{name}.ipynb" in first and any(k.startswith("tables/") for k in first)
        same_notebook_cells(fresh, committed)


def rendered(paths: StudyPaths) -> dict[str, str]:
    """``{file relative to the study's folder: sha256}`` of everything a render wrote (not the cells, not a lock)."""
    return {str(p.relative_to(paths.dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(paths.dir.rglob("*")) if p.is_file() and "cells" not in p.parts and p.name != ".lock"}


def same_notebook_cells(fresh: StudyPaths, committed: StudyPaths) -> None:
    """The executed notebook holds the committed one's cells (their ids), the parameters and findings aside."""
    mine, theirs = (nbformat.read(p, as_version=4) for p in (fresh.notebook, committed.notebook))
    assert [c.get("id") for c in mine.cells if c.get("id") not in ("injected-parameters", "findings-summary")] == \
        [c.get("id") for c in theirs.cells if "injected-parameters" not in c.metadata.get("tags", [])
         and "findings-summary" not in c.metadata.get("tags", [])]
