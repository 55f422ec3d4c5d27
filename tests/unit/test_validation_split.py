"""Each model's epoch chosen on a validation split carved from the training data (never the reported dev set):
the split, the restored best weights, and the parameters' checks."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from headprune_utils.tasks import batching, data
from headprune_utils.studies import glue_workbench
from headprune_utils.model import models
from headprune_utils.train import training
from headprune_utils.studies.config import ParameterError, validate
from headprune_utils.studies import random_pruning as study


def test_hold_out_is_disjoint_deterministic_and_complete(tiny_glue_root):
    tr = data.load_task("SST-2", "train", tiny_glue_root, allow_hub=False)
    rest, held = data.hold_out(tr, 10, seed=1)
    assert len(rest) + len(held) == len(tr) and len(held) == 10
    assert not set(rest.text_a) & set(held.text_a) or len(set(tr.text_a)) < len(tr)
    assert sorted(rest.text_a + held.text_a) == sorted(tr.text_a)
    again = data.hold_out(tr, 10, seed=1)[1]
    assert again.text_a == held.text_a and data.hold_out(tr, 10, seed=2)[1].text_a != held.text_a
    for bad in (0, len(tr)):
        with pytest.raises(ValueError, match="hold out"):
            data.hold_out(tr, bad, seed=1)


def test_keep_best_restores_the_best_validation_epoch(tiny_model_dir, tiny_glue_root):
    tok = models.load_tokenizer(str(tiny_model_dir))
    tr_raw, val_raw = data.hold_out(data.load_task("SST-2", "train", tiny_glue_root, allow_hub=False), 16, seed=1)
    tr, val = batching.encode(tok, tr_raw), batching.encode(tok, val_raw)
    cfg = training.TrainConfig(epochs=4, batch_size=8, lr=3e-3)
    model = models.load_classifier(str(tiny_model_dir), 2, device="cpu", seed=0)
    hist = training.finetune(model, tr, "SST-2", cfg, seed=0, dev=val, progress=False, keep_best=True, dev_name="val")
    scores = [r["val_score"] for r in hist]
    chosen = [r["epoch"] for r in hist if r["selected"]]
    assert chosen == [int(np.argmax(scores)) + 1], "the first best epoch is the selected one"
    # the model now holds that epoch's weights: its validation score is the selected one's, by an independent evaluation
    assert training.evaluate(model, val, "SST-2", 8)["accuracy"] == pytest.approx(hist[chosen[0] - 1]["val_accuracy"])
    # the same run without keep_best ends with the last epoch's weights (same seed, same numbers up to there)
    plain = models.load_classifier(str(tiny_model_dir), 2, device="cpu", seed=0)
    hist2 = training.finetune(plain, tr, "SST-2", cfg, seed=0, dev=val, progress=False, dev_name="val")
    assert [r["val_score"] for r in hist2] == scores and "selected" not in hist2[0]
    if chosen[0] != 4:
        assert not all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), plain.state_dict().values()))
    with pytest.raises(ValueError, match="keep_best"):
        training.finetune(plain, tr, "SST-2", cfg, seed=0, dev=None, progress=False, keep_best=True)


def test_workbench_trains_on_the_rest_and_chooses_on_validation(tiny_model_dir, tiny_glue_root):
    base = dict(model=str(tiny_model_dir), tasks=["SST-2"], seeds=[0], train_size=None, dev_size=None, epochs=2,
                batch_size=8, lr=1e-3, device="cpu", data_dir=str(tiny_glue_root), allow_hub=False, progress=False)
    cfg = validate(study.RandomPruningConfig, {**base, "validation_size": 12})
    wb = glue_workbench.GlueContext(cfg, torch.device("cpu"), tiny_glue_root / "cache")
    spec, tr, dv, *_, val = wb.task_data("SST-2")
    n_train = len(data.load_task("SST-2", "train", tiny_glue_root, allow_hub=False))
    assert len(val) == 12 and len(tr) == n_train - 12
    _, history, *_ = wb.finetune_masked("SST-2", 0, torch.ones(*wb.shape), "t", "zero")
    assert all("val_score" in r and "dev_score" not in r for r in history) and sum(r["selected"] for r in history) == 1
    # the cache key of the full models is unchanged when no validation split is used (older caches stay valid)
    plain = validate(study.RandomPruningConfig, base)
    assert glue_workbench.training_fingerprint(plain, torch.device("cpu")) != \
        glue_workbench.training_fingerprint(cfg, torch.device("cpu"))
    assert "validation_size" not in glue_workbench.result_params(plain, torch.device("cpu"), 1)
    with pytest.raises(ParameterError, match="validation_size"):
        validate(study.RandomPruningConfig, {**base, "train_size": 10, "validation_size": 10})
    with pytest.raises(ParameterError, match="validation_size"):
        validate(study.RandomPruningConfig, {**base, "validation_size": 0})


@pytest.mark.parametrize("scores,patience,expected_epochs,selected", [
    ([0.5, 0.6, 0.6, 0.55, 0.7, 0.8], 2, 4, 2),   # equal is no improvement: two epochs past the best, stop
    ([0.5, 0.6, 0.7, 0.8, 0.9, 0.95], 2, 6, 6),   # still improving at the cap: every epoch, the last one kept
    ([0.9, 0.5, 0.95, 0.1, 0.2, 0.3], 1, 2, 1),   # patience 1: the first epoch without improvement stops it
    ([0.5, 0.6, 0.7, 0.8, 0.6, 0.6], 2, 6, 4),    # the plateau reached exactly at the cap
])
def test_patience_stops_at_the_plateau_of_the_held_out_score(tiny_model_dir, tiny_glue_root, monkeypatch, scores,
                                                             patience, expected_epochs, selected):
    """Early stopping follows the held-out scores alone (scripted here, so the rule is checked, not the model):
    training stops after the first epoch that is `patience` epochs past the best (a tie is no improvement), keeps
    the best epoch, and reached_plateau reads the same from the stored history."""
    tok = models.load_tokenizer(str(tiny_model_dir))
    tr_raw, val_raw = data.hold_out(data.load_task("SST-2", "train", tiny_glue_root, allow_hub=False), 16, seed=1)
    tr, val = batching.encode(tok, tr_raw), batching.encode(tok, val_raw)
    script = iter(scores)
    monkeypatch.setattr(training, "evaluate", lambda *a, **k: {"accuracy": next(script)})
    cfg = training.TrainConfig(epochs=6, batch_size=8, lr=1e-3, patience=patience)
    model = models.load_classifier(str(tiny_model_dir), 2, device="cpu", seed=0)
    hist = training.finetune(model, tr, "SST-2", cfg, seed=0, dev=val, progress=False, keep_best=True, dev_name="val")
    assert len(hist) == expected_epochs
    assert [r["epoch"] for r in hist if r["selected"]] == [selected]
    plateau = expected_epochs - selected >= patience
    assert training.reached_plateau(hist, patience) is plateau
    assert plateau is (scores != [0.5, 0.6, 0.7, 0.8, 0.9, 0.95])


def test_reached_plateau_by_hand_and_patience_needs_a_validation_split(tiny_model_dir, tiny_glue_root):
    h = lambda sel, n: [{"epoch": e, "selected": e == sel} for e in range(1, n + 1)]  # noqa: E731
    assert training.reached_plateau(h(1, 3), 2) and not training.reached_plateau(h(2, 3), 2)
    assert training.reached_plateau(h(8, 10), 2) and not training.reached_plateau(h(9, 10), 2)
    assert not training.reached_plateau([{"epoch": 1}], 1), "no selected epoch: no plateau can be claimed"
    with pytest.raises(ValueError, match="patience"):
        training.reached_plateau(h(1, 3), 0)
    tok = models.load_tokenizer(str(tiny_model_dir))
    tr = batching.encode(tok, data.load_task("SST-2", "train", tiny_glue_root, allow_hub=False))
    model = models.load_classifier(str(tiny_model_dir), 2, device="cpu", seed=0)
    with pytest.raises(ValueError, match="patience"):
        training.finetune(model, tr, "SST-2", training.TrainConfig(epochs=3, patience=1), seed=0, dev=tr,
                          progress=False)
    base = dict(model=str(tiny_model_dir), tasks=["SST-2"], seeds=[0], train_size=None, dev_size=None, epochs=4,
                batch_size=8, lr=1e-3, device="cpu", data_dir=str(tiny_glue_root), allow_hub=False, progress=False)
    with pytest.raises(ParameterError, match="patience=2 needs validation_size"):
        validate(study.RandomPruningConfig, {**base, "patience": 2})
    with pytest.raises(ParameterError, match="patience must be >= 1 and below epochs"):
        validate(study.RandomPruningConfig, {**base, "patience": 4, "validation_size": 12})
    # the cache keys of models trained without patience are unchanged; with it they differ
    plain = validate(study.RandomPruningConfig, {**base, "validation_size": 12})
    early = validate(study.RandomPruningConfig, {**base, "validation_size": 12, "patience": 2})
    cpu = torch.device("cpu")
    assert "patience" not in glue_workbench.result_params(plain, cpu, 1)
    assert glue_workbench.result_params(early, cpu, 1)["patience"] == 2
    assert glue_workbench.training_fingerprint(plain, cpu) != glue_workbench.training_fingerprint(early, cpu)
    assert glue_workbench.train_config(early).patience == 2
