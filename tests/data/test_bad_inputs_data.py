"""Bad inputs on the real data: the committed profiles with one value changed, and corrupted copies of real files.

The data-tier part of the bad-input catalogue (tests/unit/test_bad_inputs.py): each case runs the batch runner
(``--check``, or ``--plan`` for the paper profile, which names a hub model) on a copy of ``params/<profile>.yaml``
with one value changed, against the real data root, and asserts exit status 2, a message naming the profile file,
the study and the parameter, that no heavy work started and that nothing under the outputs root changed.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from headprune_utils.run import cli

pytestmark = pytest.mark.data

COMMITTED = Path(__file__).resolve().parents[2] / "params"

HEAVY = (
    "headprune_utils.model.models.load_classifier",
    "headprune_utils.model.models.load_tokenizer",
    "headprune_utils.train.training.finetune",
    "headprune_utils.train.translation.train_translation",
    "headprune_utils.tasks.translation_data.load_parallel",
    "headprune_utils.run.schedule.execute_study",
    "headprune_utils.run.pipeline.compute_cells",
)


def snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else "<folder>")
            for p in sorted(Path(root).rglob("*"))} if Path(root).exists() else {}



@pytest.fixture
def check(data_root, tmp_path, monkeypatch, capsys):
    """``check(profile, study, changes, mode="--check", data_dir=None) -> (status, stderr)`` on a copy of the committed
    profile with ``changes`` applied to ``study``'s section."""
    params = tmp_path / "params"
    params.mkdir()
    monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: params)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("HEADPRUNE_STAGED_OUTPUTS", raising=False)
    out = tmp_path / "outputs"
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(out))
    earlier = out / "random_pruning" / "smoke" / "tables" / "cells.csv"  # earlier results the check must leave alone
    earlier.parent.mkdir(parents=True)
    earlier.write_text("task,score\nSST-2,0.9\n")

    def call(profile: str, study: str, changes: dict, mode: str = "--check", data_dir: Path | None = None):
        monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_dir or data_root))
        sections = yaml.safe_load((COMMITTED / f"{profile}.yaml").read_text())
        sections[study] = {**(sections.get(study) or {}), **changes}
        (params / f"{profile}.yaml").write_text(yaml.safe_dump(sections, sort_keys=False))
        calls = []
        for target in HEAVY:
            monkeypatch.setattr(target, lambda *a, _t=target, **k: calls.append(_t) or pytest.fail(f"heavy: {_t}"))
        before = snapshot(out)
        capsys.readouterr()
        status = cli.main(["--profile", profile, mode, "--only", study])
        err = capsys.readouterr().err
        assert calls == [], f"heavy work started: {calls}"
        assert snapshot(out) == before, "the check changed the outputs"
        return status, err

    return call


CASES = [
    pytest.param("smoke", "random_pruning", {"fractions": [0.0, 2.5]}, ["fractions", "180 heads of 72"],
                 id="smoke-rp-impossible-budget"),
    pytest.param("smoke", "layer_strategies", {"tasks": ["MNLI"], "allow_hub": False}, ["MNLI", "allow_hub"],
                 id="smoke-ls-task-without-local-data"),
    pytest.param("smoke", "compensation", {"seeds": [0]}, ["seeds", "at least 2"], id="smoke-co-one-seed"),
    pytest.param("quick", "redundancy_patterns", {"k_max": 72}, ["k_max", "72"], id="quick-rd-k_max-all-heads"),
    pytest.param("smoke", "zero_shot_pruning", {"fractions": [0.5, 1.5]}, ["fractions", "108 heads of 72"],
                 id="smoke-zs-impossible-budget"),
    pytest.param("smoke", "specialized_heads_l0", {"ud_split": "validation"}, ["'ud_split'", "'dev'"],
                 id="smoke-sp-unknown-ud-split"),
    pytest.param("smoke", "specialized_heads_l0", {"lambdas": [0.01, -1.0]}, ["lambdas", ">= 0"],
                 id="smoke-sp-negative-lambda"),
    pytest.param("quick", "nmt_heads", {"corpus": "wmt14-en-ru"}, ["wmt14-en-ru", "offline"],
                 id="quick-nm-hub-only-corpus-offline"),
    pytest.param("smoke", "nmt_heads", {"direction": "de-en"}, ["syntactic", "'de'"], id="smoke-nm-german-source"),
    pytest.param("smoke", "nmt_heads", {"heads": 3}, ["heads=3", "d_model=32"], id="smoke-nm-heads-not-dividing"),
    pytest.param("smoke", "nmt_heads", {"lr": "1e-3"}, ["'lr'", "1.0e-3"], id="smoke-nm-yaml-string-number"),
    pytest.param("quick", "random_pruning", {"tasks": ["MNLI"]}, ["MNLI", "offline"], id="quick-rp-task-offline"),
    *[pytest.param("quick", study, {"seed": 0}, ["'seed'", "did you mean 'seeds'"], id=f"quick-{study}-unknown-key")
      for study in ("random_pruning", "layer_strategies", "compensation", "redundancy_patterns", "zero_shot_pruning",
                    "specialized_heads_l0", "nmt_heads")],
]


@pytest.mark.parametrize("profile, study, changes, names", CASES)
def test_a_committed_profile_with_one_bad_value_stops_the_check(profile, study, changes, names, check):
    status, err = check(profile, study, changes)
    assert status == 2, err
    assert f"params/{profile}.yaml" in err and study in err, err
    for name in names:
        assert name in err, f"{name!r} is not named in: {err}"


def test_the_paper_profile_with_an_impossible_budget_stops_the_plan_offline(check):
    status, err = check("paper", "random_pruning", {"fractions": [0.0, 1.5]}, mode="--plan")
    assert status == 2, err
    assert "params/paper.yaml [random_pruning]" in err and "216 heads of 144" in err, err


def test_control_the_committed_smoke_profile_passes_the_check(check):
    """Not a bad input: the harness itself lets a valid profile through."""
    status, err = check("smoke", "random_pruning", {})
    assert status == 0, err


def _root_with(tmp_path: Path, data_root: Path, glue_only: bool = False) -> Path:
    """A data root of links to the real one (GLUE tasks; UD and corpora unless ``glue_only``)."""
    root = tmp_path / "data"
    (root / "glue").mkdir(parents=True)
    for task in (data_root / "glue").iterdir():
        (root / "glue" / task.name).symlink_to(task)
    if not glue_only:
        for entry in data_root.iterdir():
            if entry.name != "glue":
                (root / entry.name).symlink_to(entry)
    return root


def test_a_corrupted_copy_of_a_real_task_file_is_named_by_the_check(check, data_root, tmp_path):
    root = _root_with(tmp_path, data_root)
    sst2 = root / "glue" / "SST-2"
    sst2.unlink()
    sst2.mkdir()
    (sst2 / "train.tsv").symlink_to(data_root / "glue" / "SST-2" / "train.tsv")
    real_dev = (data_root / "glue" / "SST-2" / "dev.tsv").read_text(encoding="utf-8")
    (sst2 / "dev.tsv").write_text(real_dev + "".join(f"a line cut short {i}\n" for i in range(20)), encoding="utf-8")
    status, err = check("smoke", "random_pruning", {}, data_dir=root)
    assert status == 2, err
    assert "SST-2/dev" in err and "20 of" in err and "malformed" in err, err


def test_real_data_without_the_treebank_stops_the_syntactic_studies(check, data_root, tmp_path):
    root = _root_with(tmp_path, data_root, glue_only=True)
    status, err = check("smoke", "specialized_heads_l0", {}, data_dir=root)
    assert status == 2, err
    assert "params/smoke.yaml [specialized_heads_l0]" in err and "UD English-EWT" in err, err
    assert os.fspath(root) in err, err
