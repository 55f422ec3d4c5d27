"""Every study follows the one protocol (studies/base.py), and no study imports another."""
from __future__ import annotations

import ast
import dataclasses
import re

import pytest

from headprune_utils.store.paths import PACKAGE_DIR
from headprune_utils.studies import NAMES, STUDIES, Claim, Study

STUDY_DIR = PACKAGE_DIR / "studies"


# modules of studies/ that every study may use: the protocol, parameters, ablation semantics and shared engines
SHARED = {"base", "config", "semantics", "glue_workbench", "strategy_sweep", "role_survival", "translation_heads",
          "study_outputs", "convergence"}


def studies_imports(tree: ast.AST) -> list[str]:
    """The modules of studies/ a module imports (relative or absolute), by name within studies/."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 1:
            out += [node.module] if node.module else [a.name for a in node.names]
        elif node.module and (node.module == "headprune_utils.studies" or node.module.startswith("headprune_utils.studies.")):
            rest = node.module[len("headprune_utils.studies"):].lstrip(".")
            out += [rest] if rest else [a.name for a in node.names]
    return [t.split(".")[0] for t in out]


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
    assert isinstance(study.model_axes, tuple) and all(isinstance(a, str) for a in study.model_axes), \
        "model_axes: the cell axes that select one trained model, a tuple of names"


def test_registry_lists_every_study_module():
    modules = {p.stem for p in STUDY_DIR.glob("*.py")} - {"__init__"} - SHARED
    assert {family(m) for m in modules} == set(NAMES), "every module of studies/ belongs to a registered study"


@pytest.mark.parametrize("name", NAMES)
def test_every_study_has_one_layout(name):
    """``studies/<name>.py`` (the protocol) beside ``studies/<name>_analysis.py`` (pure functions of the cells), which
    imports no study module, not even its own (the study module imports it and re-exports its names)."""
    analysis = STUDY_DIR / f"{name}_analysis.py"
    assert analysis.exists(), f"{name}: its analysis belongs in {analysis.name}"
    studies = [t for t in studies_imports(ast.parse(analysis.read_text())) if t not in SHARED]
    assert not studies, f"{analysis.name} imports study modules {studies}"


@pytest.mark.parametrize("path", sorted(STUDY_DIR.glob("*.py")), ids=lambda p: p.stem)
def test_no_study_imports_another(path):
    own = family(path.stem)
    for t in studies_imports(ast.parse(path.read_text())):
        other = family(t)
        assert other in (None, own), f"{path.name} imports study {other!r} ({t})"


@pytest.mark.parametrize("path", sorted(PACKAGE_DIR.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_no_private_name_is_imported_across_modules(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            assert not private, f"{path.name} imports private {private} from {node.module}"
