"""The committed cells are the ones their manifests record, and they pass their study's checks: what makes the
committed results citable (an edited, swapped or replaced committed cell fails here and in every render)."""
from __future__ import annotations

import json

from headprune_utils.store.paths import project_root

OUTPUTS = project_root() / "outputs"


def _check(study: str):
    from headprune_utils.studies import STUDIES

    return STUDIES[study].check_record


def test_committed_cells_satisfy_their_study_checks_and_their_manifests():
    """Every committed cells folder has a manifest its cells match (sha256), every cell listed and every line a
    cell, and a sample of every folder's cells passes its study's check (the whole set, 6,734 cells, was checked
    when the manifests were recorded). Cells committed later (computed by older code, which writes no manifest)
    are recorded with ``python -m headprune_utils.store.manifest outputs/<study>/<profile>/cells`` after checking
    them."""
    from headprune_utils.store.manifest import verify

    folders = sorted(OUTPUTS.glob("*/*/cells"))
    assert folders, "no committed cells"
    for folder in folders:
        found = verify(folder)
        assert not any(found.values()), (f"{folder.relative_to(project_root())}: "
                                         + "; ".join(f"{k}: {v[:3]}" for k, v in found.items() if v))
        study = folder.parent.parent.name
        check = _check(study)
        for p in sorted(folder.glob("*.json"))[:40]:
            rec = json.loads(p.read_text())
            assert check(rec["cell"], rec["result"]) is None, p
