"""The committed standard outputs are reproducible from the committed cells alone.

For every study whose standard cells are all committed, the study notebook is executed from a copy of those cells
only (no model cache, no training: a cell that would compute fails the test at once), and the verdict table it
writes must equal the committed one. Studies whose standard run is still in progress are skipped, naming how many
cells are missing; at least one study must be complete for the test to mean anything (asserted).
"""
from __future__ import annotations

import shutil

import pandas as pd
import pytest

from headprune_utils.run.notebooks import execute_study
from headprune_utils.run.profiles import missing_cells, validate_profile
from headprune_utils.store.paths import StudyPaths, outputs_root
from headprune_utils.studies import NAMES

pytestmark = pytest.mark.data


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
