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
