"""environment.yml carries the same pins as pyproject.toml; torch is always pinned."""
from __future__ import annotations

import re
import tomllib

import yaml

from conftest import REPO


def _name(req: str) -> str:
    return re.split(r"[<>=!~ \[]", req.strip(), maxsplit=1)[0].lower()


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = {_name(r): r.replace(" ", "") for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    got = {_name(r): r.replace(" ", "") for r in pip if not r.startswith("-e")}
    assert got == wanted
    assert wanted["torch"] == "torch==2.13.0"


def test_console_command_license_and_citation():
    """`headprune` is the batch runner (the same function as python -m headprune_utils.run.cli); the project says its
    license and how to cite it and the papers it tests."""
    import tomllib

    root = REPO
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["headprune"] == "headprune_utils.run.cli:main"
    from headprune_utils.run import cli as run

    assert callable(run.main)
    assert meta["project"]["license"] == "Apache-2.0" and meta["project"]["license-files"] == ["LICENSE"]
    assert "Apache License" in (root / "LICENSE").read_text() and "Version 2.0" in (root / "LICENSE").read_text()
    import yaml

    cff = yaml.safe_load((root / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "Apache-2.0"
    titles = " ".join(r["title"] for r in cff["references"])
    for paper in ("weak link between importance and prunability", "Specialized Heads Do the Heavy Lifting",
                  "On Attention Redundancy"):
        assert paper in titles
