"""The committed parameter profiles validate offline against the real data root (study 6 needs UD EWT there)."""
from __future__ import annotations

import pytest

from headprune_utils.run.profiles import validate_profile
from headprune_utils.studies.config import load_profile
from headprune_utils.studies import STUDIES

pytestmark = pytest.mark.data


def test_committed_profiles_are_valid_offline(data_root, monkeypatch):
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    # the paper profile names a hub model: checked without the model's config (offline here)
    for profile in ("smoke", "quick", "standard"):
        assert validate_profile(profile)
    paper = load_profile("paper")
    assert set(paper) <= set(STUDIES)
