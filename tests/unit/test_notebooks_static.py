"""The committed notebooks: clean (no outputs), parameters cell = the study's typed defaults."""
from __future__ import annotations

import ast
import dataclasses
import json

import pytest

from headprune_utils.store.paths import notebooks_dir
from headprune_utils.studies import STUDIES


@pytest.mark.parametrize("name", list(STUDIES))
def test_notebook_is_clean_and_parameters_match_defaults(name):
    study = STUDIES[name]
    nb = json.loads((notebooks_dir() / study.notebook).read_text())
    assert all(not c.get("outputs") and not c.get("execution_count") for c in nb["cells"] if c["cell_type"] == "code")
    params = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1, "exactly one cell tagged 'parameters'"
    source = "".join(params[0]["source"])
    values = {}
    for node in ast.parse(source).body:
        assert isinstance(node, ast.AnnAssign), "the parameters cell holds annotated assignments only (name: type = value)"
        values[node.target.id] = ast.literal_eval(node.value)
    assert values.pop("profile") == "quick"
    assert values.pop("executor", "local") == "local" and values.pop("ray_address", None) is None
    defaults = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
                for f in dataclasses.fields(study.Config)}
    assert values == defaults


@pytest.mark.parametrize("name", list(STUDIES))
def test_study_follows_the_registry_convention(name):
    study = STUDIES[name]
    fields = {f.name: f.type for f in dataclasses.fields(study.Config)}
    assert "progress" in fields, "the runner turns notebook progress bars off through this parameter"
    assert study.name == name and study.notebook.endswith(f"_{name}.ipynb")
