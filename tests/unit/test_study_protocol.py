"""Every study follows the one protocol (studies/base.py), and no study imports another."""
from __future__ import annotations

import ast
import dataclasses
import re

import pytest

from headprune_utils.paths import PACKAGE_DIR
from headprune_utils.studies import NAMES, STUDIES, Claim, Study

STUDY_DIR = PACKAGE_DIR / "studies"


def family(module: str) -> str | None:
    """The study a module of studies/ belongs to (``nmt_heads_analysis`` -> ``nmt_heads``), or None."""
    return next((n for n in NAMES if module == n or module.startswith(n + "_")), None)


@pytest.mark.parametrize("name", NAMES)
def test_study_object_follows_the_protocol(name):
    study = STUDIES[name]
    assert isinstance(study, Study), f"{name}: STUDY must be an instance of studies.base.Study"
    assert study.name == name and study.notebook.endswith(f"_{name}.ipynb")
    assert dataclasses.is_dataclass(study.Config) and study.Config.__dataclass_params__.frozen
    fields = {f.name for f in dataclasses.fields(study.Config)}
    assert {"progress", "device"} <= fields
    assert study.Config.__name__.lower().replace("_", "") == name.replace("_", "") + "config", \
        "one name per study: the config class is <StudyName>Config"
    assert study.claims and all(isinstance(c, Claim) for c in study.claims)
    ids = [c.id for c in study.claims]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"[a-z]+\.[a-z0-9_]+", i) for i in ids), ids
    assert all(c.paper and c.text.endswith(".") for c in study.claims)


def test_registry_lists_every_study_module():
    modules = {p.stem for p in STUDY_DIR.glob("*.py")} - {"__init__", "base"}
    assert {family(m) for m in modules} == set(NAMES), "every module of studies/ belongs to a registered study"


@pytest.mark.parametrize("name", NAMES)
def test_every_study_has_one_layout(name):
    """``studies/<name>.py`` (the protocol) beside ``studies/<name>_analysis.py`` (pure functions of the cells), which
    imports no study module, not even its own (the study module imports it and re-exports its names)."""
    analysis = STUDY_DIR / f"{name}_analysis.py"
    assert analysis.exists(), f"{name}: its analysis belongs in {analysis.name}"
    for node in ast.walk(ast.parse(analysis.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            targets = [node.module] if node.module else [a.name for a in node.names]
            assert all(t.split(".")[0] == "base" for t in targets), f"{analysis.name} imports .{targets}"
        if isinstance(node, ast.ImportFrom) and node.module and "studies." in node.module:
            assert False, f"{analysis.name} imports {node.module}"


@pytest.mark.parametrize("path", sorted(STUDY_DIR.glob("*.py")), ids=lambda p: p.stem)
def test_no_study_imports_another(path):
    own = family(path.stem)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:  # from .x import y / from . import x
            targets = [node.module] if node.module else [a.name for a in node.names]
            for t in targets:
                other = family(t.split(".")[0])
                assert other in (None, own), f"{path.name} imports study {other!r} ({t})"
        if isinstance(node, ast.ImportFrom) and node.module and "studies." in node.module:
            other = family(node.module.rsplit(".", 1)[-1])
            assert other in (None, own), f"{path.name} imports study {other!r}"


@pytest.mark.parametrize("path", sorted(PACKAGE_DIR.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_no_private_name_is_imported_across_modules(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            assert not private, f"{path.name} imports private {private} from {node.module}"
