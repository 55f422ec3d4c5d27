"""`make lab` starts JupyterLab as root too (a container): --allow-root exactly when the user is root."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import REPO


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_lab_passes_allow_root_only_as_root():
    done = subprocess.run(["make", "-n", "-C", str(REPO), "lab"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if "jupyter lab" in x)
    assert ("--allow-root" in line) == (os.getuid() == 0), line
