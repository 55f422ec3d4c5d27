"""A GLUE fine-tuning cut short resumes from its last epoch's checkpoint to the weights and history an uninterrupted
run gives, bit for bit (dropout on: the random-number generators travel with it); each training has its own file
(named by its identity); a file that cannot be used, or one written under another runtime (machine kind, thread
count), is set aside with a warning and the training starts again; a failed write only warns; a study's masked
fine-tuning resumes through the cache and leaves no checkpoint behind."""
from __future__ import annotations

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


def run(checkpoint=None, *, machine=MACHINE, seed=3, gates=None, ablation="zero", means=None, cfg=CFG, cut_after=None,
        monkeypatch=None, prune=None, every=0):
    """(history without timings, weights) of a fine-tuning of the tiny model with dropout; ``cut_after``: raise
    ``Cut`` right after that many checkpoints were written; ``prune``: a mask whose heads are removed first."""
    if cut_after is not None:
        real, saved = training._save_checkpoint, []

        def save(path, state):
            real(path, state)
            saved.append(state["epochs_done"])
            if len(saved) == cut_after:
                raise Cut(state["epochs_done"])

        monkeypatch.setattr(training, "_save_checkpoint", save)
    model = tiny_model(hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.1)
    if prune is not None:
        from headprune_utils.model.pruning import prune_heads

        prune_heads(model, prune)
    try:
        hist = training.finetune(model, TRAIN, "MNLI", cfg, seed=seed, dev=VAL, gates=gates, ablation=ablation,
                                 means=means, progress=False, keep_best=True, dev_name="val", checkpoint=checkpoint,
                                 machine=machine, checkpoint_every=every)
    finally:
        if cut_after is not None:
            monkeypatch.setattr(training, "_save_checkpoint", real)
    timeless = [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in hist]
    return timeless, {k: v.clone() for k, v in model.state_dict().items()}


def files(stem) -> list:
    return sorted(p.name for p in stem.parent.iterdir())


def the_checkpoint(stem):
    found = list(stem.parent.glob(f"{stem.name}-*.pt"))
    assert len(found) == 1, files(stem)
    return found[0]


def same(a, b) -> None:
    assert a[0] == b[0]
    assert a[1].keys() == b[1].keys() and all(torch.equal(a[1][k], b[1][k]) for k in a[1])


SEMANTICS = ["zero", "zero-removed", "uniform-lean", "mean"]


def semantics_args(semantics: str) -> dict:
    g = torch.ones(L, H)
    g[1, :3] = 0.0
    if semantics == "zero":
        return {}
    if semantics == "zero-removed":  # heads removed physically before training: another model shape
        return {"prune": g}
    if semantics == "uniform-lean":
        return {"gates": g, "ablation": "uniform",
                "cfg": training.TrainConfig(epochs=5, batch_size=8, lr=2e-3, patience=2, lean=True)}
    return {"gates": g, "ablation": "mean", "means": torch.randn(L, H, 8, generator=torch.Generator().manual_seed(0))}


@pytest.mark.parametrize("semantics", SEMANTICS)
def test_a_fine_tuning_cut_after_an_epoch_resumes_to_the_uninterrupted_weights(semantics, tmp_path, monkeypatch):
    kw = semantics_args(semantics)
    plain = run(**kw)  # no checkpoint at all
    assert len(plain[0]) >= 3, "a training of several epochs"
    assert len({r["train_loss"] for r in plain[0]}) == len(plain[0])
    stem = tmp_path / "m.pt.training-checkpoint"
    same(run(stem, **kw), plain)  # writing checkpoints changes nothing
    assert the_checkpoint(stem).exists(), "a finished run leaves its last checkpoint (the caller removes it)"
    training.remove_checkpoint(stem)
    assert files(stem) == []
    for cut in (1, 2):
        with pytest.raises(Cut):
            run(stem, cut_after=cut, monkeypatch=monkeypatch, **kw)
        assert torch.load(the_checkpoint(stem), weights_only=False)["epochs_done"] == cut
        same(run(stem, **kw), plain)
        training.remove_checkpoint(stem)
    assert not list(tmp_path.glob(".*.tmp")), "checkpoints are written atomically"


def test_dropout_makes_the_checkpointed_generators_matter(tmp_path, monkeypatch):
    """The test above would pass without restoring the random-number generators if dropout drew nothing: a resume
    whose generators are reseeded instead must differ."""
    stem = tmp_path / "c"
    plain = run()
    with pytest.raises(Cut):
        run(stem, cut_after=1, monkeypatch=monkeypatch)
    monkeypatch.setattr(training, "_set_rng_state", lambda rng, device: torch.manual_seed(0))
    resumed = run(stem)
    assert resumed[0][0] == plain[0][0] and resumed[0][1:] != plain[0][1:]


def test_each_training_has_its_own_file_and_an_unusable_one_is_set_aside(tmp_path, monkeypatch):
    stem = tmp_path / "c"
    with pytest.raises(Cut):
        run(stem, seed=3, cut_after=1, monkeypatch=monkeypatch)
    three = the_checkpoint(stem)
    seed4 = run(seed=4)
    with pytest.raises(Cut):  # another training of the same entry (another seed) keeps its own file
        run(stem, seed=4, cut_after=1, monkeypatch=monkeypatch)
    assert len(files(stem)) == 2
    four = next(p for p in stem.parent.glob("c-*.pt") if p != three)
    # a foreign file under this training's name: set aside, never resumed
    four.write_bytes(three.read_bytes())
    with pytest.warns(RuntimeWarning, match=r"belongs to another training \(.*seed.*\).*starts from the beginning"):
        same(run(stem, seed=4), seed4)
    assert (tmp_path / (four.name + ".unusable")).exists()
    for junk, said in ((b"not a checkpoint", "is unreadable"), (None, "lacks best, epochs_done")):
        if junk is None:
            torch.save({"identity": {}}, four)
        else:
            four.write_bytes(junk)
        with pytest.warns(RuntimeWarning, match=said):
            same(run(stem, seed=4), seed4)
    training.remove_checkpoint(stem)
    assert files(stem) == [], "every checkpoint of the entry and what was set aside is removed"


def test_a_checkpoint_of_another_machine_kind_or_thread_count_is_set_aside(tmp_path, monkeypatch):
    stem = tmp_path / "c"
    plain = run()
    with pytest.raises(Cut):
        run(stem, machine="cpu: another kind", cut_after=2, monkeypatch=monkeypatch)
    with pytest.warns(RuntimeWarning, match=r"machine cpu: another kind \(now cpu: test kind\)"):
        again = run(stem)
    assert len(list(tmp_path.glob("c-*.pt.other-machine"))) == 1
    same(again, plain)
    training.remove_checkpoint(stem)
    threads = torch.get_num_threads()
    with pytest.raises(Cut):
        monkeypatch.setattr(training, "runtime", lambda machine: {"machine": machine, "torch_threads": threads + 1,
                                                                  "torch": torch.__version__})
        run(stem, cut_after=1, monkeypatch=monkeypatch)
    monkeypatch.undo()
    with pytest.warns(RuntimeWarning, match=rf"torch_threads {threads + 1} \(now {threads}\)"):
        same(run(stem), plain)


def test_a_checkpoint_that_cannot_be_written_only_warns_and_a_short_training_writes_none(tmp_path, monkeypatch):
    plain = run()
    stem = tmp_path / "c"

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.warns(RuntimeWarning, match="could not be written.*No space left"):
        same(run(stem), plain)
    monkeypatch.undo()
    assert files(stem) == [], "no half file"
    same(run(stem, every=3600.0), plain)  # epochs of milliseconds: no checkpoint is worth writing
    assert files(stem) == []


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
    assert cuts and not list(root.rglob(f"*{training.CHECKPOINT_STEM}*")), "no checkpoint is left once results are stored"
