"""A GLUE fine-tuning cut short resumes from its last epoch's checkpoint to the weights and history an uninterrupted
run gives, bit for bit (dropout on: the random-number generators travel with it); another training's checkpoint is
refused naming the file and what differs; one written on another kind of machine is set aside and the training
starts again; a study's masked fine-tuning resumes through the cache and leaves no checkpoint behind."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import tiny_model
from headprune_utils.tasks.batching import Encoded
from headprune_utils.train import training

L, H = 3, 4
MACHINE = "cpu: test kind"


def make_enc(n: int, seed: int) -> Encoded:
    rng = np.random.default_rng(seed)
    ids = [[2] + [int(t) for t in rng.integers(5, 120, size=int(rng.integers(1, 14)))] + [3] for _ in range(n)]
    return Encoded(input_ids=ids, token_type_ids=None, labels=rng.integers(0, 3, size=n), pad_id=0)


TRAIN, VAL = make_enc(48, 0), make_enc(16, 7)
CFG = training.TrainConfig(epochs=5, batch_size=8, lr=2e-3, patience=2)


class Cut(Exception):
    """The process 'killed' after a checkpoint was written."""


def run(checkpoint=None, *, machine=MACHINE, seed=3, gates=None, ablation="zero", cfg=CFG, cut_after=None,
        monkeypatch=None):
    """(history without timings, weights) of a fine-tuning of the tiny model with dropout; ``cut_after``: raise
    ``Cut`` right after that many checkpoints were written."""
    if cut_after is not None:
        real, saved = training._save_checkpoint, []

        def save(path, state):
            real(path, state)
            saved.append(state["epochs_done"])
            if len(saved) == cut_after:
                raise Cut(state["epochs_done"])

        monkeypatch.setattr(training, "_save_checkpoint", save)
    model = tiny_model(hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.1)
    try:
        hist = training.finetune(model, TRAIN, "MNLI", cfg, seed=seed, dev=VAL, gates=gates, ablation=ablation,
                                 progress=False, keep_best=True, dev_name="val", checkpoint=checkpoint,
                                 machine=machine, checkpoint_every=0)
    finally:
        if cut_after is not None:
            monkeypatch.setattr(training, "_save_checkpoint", real)
    timeless = [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in hist]
    return timeless, {k: v.clone() for k, v in model.state_dict().items()}


def same(a, b) -> None:
    assert a[0] == b[0]
    assert a[1].keys() == b[1].keys() and all(torch.equal(a[1][k], b[1][k]) for k in a[1])


@pytest.mark.parametrize("semantics", ["zero", "uniform-lean"])
def test_a_fine_tuning_cut_after_an_epoch_resumes_to_the_uninterrupted_weights(semantics, tmp_path, monkeypatch):
    gates, ablation, cfg = None, "zero", CFG
    if semantics == "uniform-lean":
        gates = torch.ones(L, H)
        gates[1, :3] = 0.0
        ablation, cfg = "uniform", training.TrainConfig(epochs=5, batch_size=8, lr=2e-3, patience=2, lean=True)
    plain = run(gates=gates, ablation=ablation, cfg=cfg)  # no checkpoint at all
    assert len(plain[0]) >= 3, "a training of several epochs"
    assert len({r["train_loss"] for r in plain[0]}) == len(plain[0])
    ck = tmp_path / "m.pt.training-checkpoint.pt"
    same(run(ck, gates=gates, ablation=ablation, cfg=cfg), plain)  # writing checkpoints changes nothing
    ck.unlink()
    for cut in (1, 2):
        with pytest.raises(Cut):
            run(ck, gates=gates, ablation=ablation, cfg=cfg, cut_after=cut, monkeypatch=monkeypatch)
        assert ck.exists() and torch.load(ck, weights_only=False)["epochs_done"] == cut
        same(run(ck, gates=gates, ablation=ablation, cfg=cfg), plain)
        ck.unlink()


def test_dropout_makes_the_checkpointed_generators_matter(tmp_path, monkeypatch):
    """The test above would pass without restoring the random-number generators if dropout drew nothing: a resume
    whose generators are reseeded instead must differ."""
    ck = tmp_path / "c.pt"
    plain = run()
    with pytest.raises(Cut):
        run(ck, cut_after=1, monkeypatch=monkeypatch)
    monkeypatch.setattr(training, "_set_rng_state", lambda rng: torch.manual_seed(0))
    resumed = run(ck)
    assert resumed[0][0] == plain[0][0] and resumed[0][1:] != plain[0][1:]


def test_another_trainings_checkpoint_is_refused_naming_the_file_and_what_differs(tmp_path, monkeypatch):
    ck = tmp_path / "c.pt"
    with pytest.raises(Cut):
        run(ck, seed=3, cut_after=1, monkeypatch=monkeypatch)
    with pytest.raises(ValueError, match=r"c\.pt belongs to another training \(seed differ\)"):
        run(ck, seed=4)
    g = torch.ones(L, H)
    g[0, 0] = 0
    with pytest.raises(ValueError, match=r"another training \(.*gates.*\)"):
        run(ck, gates=g, ablation="uniform")
    ck.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=r"c\.pt: unreadable"):
        run(ck)
    torch.save({"identity": {}}, ck)
    with pytest.raises(ValueError, match=r"lacks .*epochs_done"):
        run(ck)


def test_a_checkpoint_of_another_machine_kind_is_set_aside_and_training_starts_again(tmp_path, monkeypatch):
    ck = tmp_path / "c.pt"
    plain = run()
    with pytest.raises(Cut):
        run(ck, machine="cpu: another kind", cut_after=2, monkeypatch=monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = run(ck)
    said = " ".join(str(w.message) for w in caught)
    assert "another kind of machine" in said and "cpu: another kind" in said and MACHINE in said
    assert (tmp_path / "c.pt.other-machine").exists()
    same(again, plain)


def test_a_study_resumes_a_masked_fine_tuning_cut_short_and_leaves_no_checkpoint(tiny_model_dir, tiny_glue_root,
                                                                                 tmp_path, monkeypatch):
    from headprune_utils.run.execution import CellsFailed, run_study
    from headprune_utils.store.paths import StudyPaths
    from headprune_utils.studies import random_pruning as study
    from headprune_utils.studies.config import validate

    params = dict(tasks=["SST-2"], fractions=[0.0, 0.5], finetune_fractions=[0.5], seeds=[0], train_size=None,
                  dev_size=None, epochs=4, patience=2, validation_size=8, batch_size=8, lr=1e-3, device="cpu",
                  allow_hub=False, progress=False, mask_draws=1, model=str(tiny_model_dir),
                  data_dir=str(tiny_glue_root), regimes=["mask_then_finetune"], ablations=["uniform"],
                  finetune_ablations=["uniform"])
    cfg = validate(study.RandomPruningConfig, params)
    ref = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path / "ref"))

    root = tmp_path / "cut"
    real, cuts = training._save_checkpoint, []

    def save(path, state):  # the masked model's fine-tuning (gated) is 'killed' once, after its first epoch
        real(path, state)
        if not cuts and state["identity"]["gates"] is not None:
            cuts.append(path)
            raise Cut(path)

    monkeypatch.setattr(training, "_save_checkpoint", save)
    monkeypatch.setattr(training, "CHECKPOINT_EVERY", 0.0)  # the tiny model's epochs take milliseconds
    with pytest.raises(CellsFailed):
        run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=root))
    assert cuts and cuts[0].exists(), "the masked fine-tuning was cut with its checkpoint written"
    monkeypatch.setattr(training, "_save_checkpoint", real)
    resumed_from = []
    real_load = training._load_checkpoint
    monkeypatch.setattr(training, "_load_checkpoint",
                        lambda *a: (lambda ck: (resumed_from.append(ck is not None), ck)[1])(real_load(*a)))
    again = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=root))
    assert True in resumed_from, "the second run resumed the cut fine-tuning"
    drop = [c for c in ref.columns if c.startswith("seconds") or c.endswith("_seconds") or c == "history"]
    pd.testing.assert_frame_equal(again.drop(columns=drop), ref.drop(columns=drop))
    timeless = lambda h: [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in h]  # noqa: E731
    assert [timeless(h) for h in again["history"]] == [timeless(h) for h in ref["history"]]
    assert not list(root.rglob(f"*{training.CHECKPOINT_SUFFIX}")), "no checkpoint is left once results are stored"
