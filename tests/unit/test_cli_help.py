"""The runner's usage line names the command the user typed: ``headprune`` or ``python -m headprune_utils.run``."""
from __future__ import annotations

import subprocess
import sys

import pytest

from headprune_utils.run import cli


@pytest.mark.parametrize("argv0, prog", [
    ("/somewhere/.venv/bin/headprune", "headprune"),
    ("headprune", "headprune"),
    ("/somewhere/headprune_utils/run/__main__.py", "python -m headprune_utils.run"),
    ("/somewhere/headprune_utils/run/cli.py", "python -m headprune_utils.run"),
])
def test_program_name(argv0, prog, monkeypatch):
    monkeypatch.setattr(sys, "argv", [argv0, "--help"])
    assert cli.program_name() == prog
    assert cli.build_parser().format_usage().startswith(f"usage: {prog} ")


def test_help_as_the_console_script(tmp_path):
    """The console script's own file name (what pip's launcher puts in sys.argv[0])."""
    script = tmp_path / "headprune"
    script.write_text("import sys\nfrom headprune_utils.run.cli import main\nsys.exit(main())\n")
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: headprune "), done.stdout[:200]
    assert "python -m headprune_utils.run" not in done.stdout.splitlines()[0]
