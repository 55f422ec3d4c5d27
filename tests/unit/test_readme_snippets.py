"""Every Python block of the README runs as written (a snippet that fails, e.g. on an undefined name or a moved
module, is a broken promise to the reader)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_the_readme_has_python_blocks():
    assert BLOCKS, "no ```python block found in the README"


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_python_block_runs(i, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    namespace: dict = {}
    exec(compile(BLOCKS[i], f"README.md python block {i + 1}", "exec"), namespace)  # noqa: S102
