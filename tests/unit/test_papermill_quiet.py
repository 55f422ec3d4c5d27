"""papermill -f params/<profile>.yaml without seven "Passed unknown parameter" lines for the other studies' sections;
a typo is still warned about (and refused by the notebook, naming it: tests/unit/test_notebook_parameters.py)."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import tomllib

import yaml

from conftest import REPO
from headprune_utils.studies import NAMES

ENTRY = "headprune_utils.run.papermill_quiet:Engine"


def test_pyproject_registers_the_engine_papermill_imports_at_start():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["papermill.engine"] == {"headprune": ENTRY}
    from papermill.engines import NBClientEngine

    from headprune_utils.run.papermill_quiet import Engine

    assert issubclass(Engine, NBClientEngine)


def test_study_sections_are_quiet_a_typo_is_not(caplog, tmp_path):
    import papermill as pm

    from headprune_utils.run import papermill_quiet

    papermill_quiet.install()
    params = {**yaml.safe_load((REPO / "params" / "smoke.yaml").read_text()), "profile": "smoke", "trian_size": 48}
    with caplog.at_level(logging.INFO, logger="papermill"):
        pm.execute_notebook(str(REPO / "notebooks" / "01_random_pruning.ipynb"), str(tmp_path / "out.ipynb"),
                            parameters=params, prepare_only=True, kernel_name="python3")
    unknown = [r.getMessage() for r in caplog.records if "Passed unknown parameter" in r.getMessage()]
    assert unknown == ["Passed unknown parameter: trian_size"]


def test_the_papermill_command_through_the_entry_point(tmp_path):
    """The command line as a user runs it, with the entry point installed as pip installs it (a dist-info folder
    on the path): no line for the sections, one for the typo."""
    dist = tmp_path / "site" / "headprune_entry-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: headprune-entry\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[papermill.engine]\nheadprune = {ENTRY}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}
    cmd = [sys.executable, "-m", "papermill", str(REPO / "notebooks" / "01_random_pruning.ipynb"),
           str(tmp_path / "out.ipynb"), "-f", str(REPO / "params" / "smoke.yaml"), "-p", "profile", "smoke",
           "-p", "trian_size", "48", "--prepare-only"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "Passed unknown parameter" in line]
    assert lines == ["Passed unknown parameter: trian_size"], done.stderr
    assert all(name in yaml.safe_load((REPO / "params" / "smoke.yaml").read_text()) for name in NAMES)
