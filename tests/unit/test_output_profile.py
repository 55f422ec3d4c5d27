"""A notebook run with changed parameters never writes into a profile's folder: its outputs go to
outputs/<study>/custom-<hash>/, said at the start; the profile's own parameters keep the profile's folder."""
from __future__ import annotations

import dataclasses

from headprune_utils.studies.config import load_profile, output_profile, validate
from headprune_utils.studies import STUDIES


def test_profile_folder_only_for_the_profiles_parameters(capsys, data_root, monkeypatch):
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    study = STUDIES["random_pruning"]
    quick = validate(study.Config, load_profile("quick").get(study.name, {}))
    assert output_profile(study, quick, "quick") == "quick"
    assert output_profile(study, dataclasses.replace(quick, progress=False), "quick") == "quick"  # display only
    changed = dataclasses.replace(quick, lr=5e-4)
    name = output_profile(study, changed, "quick")
    assert name.startswith("custom-") and name != "quick"
    out = capsys.readouterr().out
    assert "changed: lr" in out and "outputs/random_pruning/quick/ is left untouched" in out
    assert output_profile(study, changed, "quick") == name, "the same parameters, the same folder"
    assert output_profile(study, dataclasses.replace(quick, lr=3e-4), "quick") != name
    # a quick-size run named 'paper' is not the paper profile's
    assert output_profile(study, quick, "paper").startswith("custom-")
    # a name with no params/<name>.yaml is the user's own run folder
    assert output_profile(study, changed, "my-run") == "my-run"
