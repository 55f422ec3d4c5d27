"""Nothing committed carries a path of the machine it was made on: the executed notebooks, report pages, summaries,
run records and tables under outputs/ and the README (a warning printed in a notebook once carried the package's
absolute path)."""
from __future__ import annotations

import re
import subprocess

from headprune_utils.store.paths import project_root

ABSOLUTE = re.compile(r"(?<![\w.:/-])/(?:work|home|tmp|Users|root|var/folders|private|mnt|opt)/[\w.@-]+")
KINDS = (".ipynb", ".html", ".md", ".json", ".csv", ".txt")


def test_committed_outputs_carry_no_machine_path():
    root = project_root()
    files = subprocess.run(["git", "ls-files", "outputs", "README.md"], cwd=root, capture_output=True, text=True,
                           check=True).stdout.split()
    files = [f for f in files if f.endswith(KINDS) and "/cells/" not in f]
    assert files, "no committed outputs found"
    found = {}
    for f in files:
        hits = ABSOLUTE.findall((root / f).read_text(encoding="utf-8", errors="replace"))
        if hits:
            found[f] = sorted(set(hits))[:3]
    assert not found, found
