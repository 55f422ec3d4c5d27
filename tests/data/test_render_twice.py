"""Rendering unchanged results leaves git clean: the smallest complete standard study, rendered twice from its
committed cells alone, writes the same bytes (its executed notebook, figures, tables, metrics, and its run_meta.json:
the second render, reproducing every output, keeps the record of the run that made them)."""
from __future__ import annotations

import hashlib
import shutil

import nbformat
import pytest

from headprune_utils.run.notebooks import execute_study
from headprune_utils.run.profiles import missing_cells, validate_profile
from headprune_utils.store.paths import StudyPaths, outputs_root
from headprune_utils.studies import NAMES

pytestmark = pytest.mark.data


def test_a_standard_study_rendered_twice_from_its_cells_writes_the_same_bytes(data_root, monkeypatch, tmp_path):
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    plan = validate_profile("standard", list(NAMES))
    gaps = missing_cells(plan, "standard")
    complete = [n for n in NAMES if n not in gaps]
    assert complete, "no standard study has all its cells committed"
    size = {n: sum(1 for _ in StudyPaths(n, "standard", staged=False).cells.glob("*.json")) for n in complete}
    name = min(size, key=size.get)  # the cheapest to render
    committed = StudyPaths(name, "standard", root=outputs_root(), staged=False)
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "outputs"))
    fresh = StudyPaths(name, "standard", staged=False)
    shutil.copytree(committed.cells, fresh.cells)

    def rendered() -> dict[str, str]:
        return {str(p.relative_to(fresh.dir)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(fresh.dir.rglob("*")) if p.is_file() and "cells" not in p.parts
                and p.name != ".lock"}

    execute_study(name, "standard", plan[name], progress=False)
    first = rendered()
    execute_study(name, "standard", plan[name], progress=False)
    assert rendered() == first, f"{name}: a second render of the same cells changed files"
    assert f"{name}.ipynb" in first and any(k.startswith("tables/") for k in first)
    # and the executed notebook holds the committed one's outputs (its cells' ids, text and figures)
    mine, theirs = (nbformat.read(p, as_version=4) for p in (fresh.notebook, committed.notebook))
    assert [c.get("id") for c in mine.cells if c.get("id") not in ("injected-parameters", "findings-summary")] == \
        [c.get("id") for c in theirs.cells if "injected-parameters" not in c.metadata.get("tags", [])
         and "findings-summary" not in c.metadata.get("tags", [])]
