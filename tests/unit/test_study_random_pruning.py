"""Study 1 end to end on a tiny local model and synthetic data: determinism, resume, no silent overwrite."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from headprune_utils.tasks import batching, data
from headprune_utils.analysis import claims
from headprune_utils.studies import glue_workbench
from headprune_utils.model import models
from headprune_utils.train import training
from headprune_utils.run.execution import run_study
from headprune_utils.studies.config import validate
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import StaleResultsError
from headprune_utils.studies import random_pruning as study


def config(model_dir, data_root, **kw):
    base = dict(model=str(model_dir), tasks=["SST-2"], fractions=[0.0, 0.5], finetune_fractions=None, seeds=[0, 1], train_size=None,
                dev_size=None, epochs=2, batch_size=8, lr=1e-3, device="cpu", data_dir=str(data_root),
                allow_hub=False, progress=False, ablations=["zero"], finetune_ablations=["zero"])
    return validate(study.RandomPruningConfig, {**base, **kw})


def test_finetune_same_seed_same_numbers(tiny_model_dir, tiny_glue_root):
    tok = models.load_tokenizer(str(tiny_model_dir))
    tr = batching.encode(tok, data.load_task("SST-2", "train", tiny_glue_root, allow_hub=False))
    dv = batching.encode(tok, data.load_task("SST-2", "dev", tiny_glue_root, allow_hub=False))
    runs = []
    for _ in range(2):
        model = models.load_classifier(str(tiny_model_dir), 2, device="cpu", seed=0)
        hist = training.finetune(model, tr, "SST-2", training.TrainConfig(epochs=2, batch_size=8, lr=1e-3), seed=0,
                                 dev=dv, progress=False)
        runs.append((hist, [p.detach().clone() for p in model.parameters()]))
    (h1, p1), (h2, p2) = runs
    assert len(h1) == 2 and "dev_accuracy" in h1[0] and "train_loss" in h1[1]
    assert [r["train_loss"] for r in h1] == [r["train_loss"] for r in h2]
    assert [r["dev_accuracy"] for r in h1] == [r["dev_accuracy"] for r in h2]
    assert all(torch.equal(a, b) for a, b in zip(p1, p2))


def test_interrupted_study_resumes_without_redoing_work(tiny_model_dir, tiny_glue_root, tmp_path, monkeypatch):
    cfg = config(tiny_model_dir, tiny_glue_root)
    n_cells = len(study.plan_cells(cfg))
    assert n_cells == 8
    # an uninterrupted reference run
    ref = run_study(study.STUDY, cfg, "test", StudyPaths(study.NAME, "ref", root=tmp_path))

    real = study.run_cell
    calls = []

    def interrupted(ctx, cell):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(cell)
        return real(ctx, cell)

    paths = StudyPaths(study.NAME, "test", root=tmp_path)
    monkeypatch.setattr(study, "run_cell", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_study(study.STUDY, cfg, "test", paths)
    assert len(list(paths.cells.glob("*.json"))) == 3
    assert not list(paths.cells.glob("*.tmp"))

    calls.clear()
    monkeypatch.setattr(study, "run_cell", lambda ctx, cell: calls.append(cell) or real(ctx, cell))
    table = run_study(study.STUDY, cfg, "test", paths)
    assert len(calls) == n_cells - 3, "only the unfinished cells run again"
    assert len(table) == n_cells
    key = ["task", "regime", "ablation", "fraction", "seed"]
    a = table.sort_values(key).reset_index(drop=True)
    b = ref.sort_values(key).reset_index(drop=True)
    np.testing.assert_allclose(a["score"], b["score"], atol=1e-9)

    calls.clear()
    run_study(study.STUDY, cfg, "test", paths)
    assert calls == [], "a finished study recomputes nothing"

    # other result-changing parameters: refuse, touch nothing
    before = sorted(p.read_text() for p in paths.cells.glob("*.json"))
    with pytest.raises(StaleResultsError):
        run_study(study.STUDY, config(tiny_model_dir, tiny_glue_root, lr=5e-4), "test", paths)
    assert sorted(p.read_text() for p in paths.cells.glob("*.json")) == before
    meta = paths.meta.read_text()
    assert '"git_revision"' in meta and '"seeds"' in meta


def test_study_tables_and_regimes(tiny_model_dir, tiny_glue_root, tmp_path):
    cfg = config(tiny_model_dir, tiny_glue_root, fractions=[0.0, 0.25, 1.0], seeds=[0, 1, 2], epochs=1)
    table = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path))
    # the unpruned cells of both regimes are the same fine-tuned model
    full = table[table["fraction"] == 0].pivot(index="seed", columns="regime", values="score")
    np.testing.assert_allclose(full["mask_then_finetune"], full["finetune_then_mask"])
    # fraction 1.0: every head pruned, the model still runs
    assert (table[table["fraction"] == 1.0]["n_heads_pruned"] == 12).all()
    summary = study.summarise(table)
    assert set(summary.columns) >= {"mean", "ci_low", "ci_high", "drop_from_full"}
    assert (summary["ci_low"] <= summary["mean"]).all() and (summary["mean"] <= summary["ci_high"]).all()
    drops = study.paired_drop(table)
    assert len(drops) == 2 * 2  # 2 regimes x 2 nonzero fractions
    for _, r in drops.iterrows():
        g = table[(table["regime"] == r["regime"])]
        d = g[g["fraction"] == 0].set_index("seed")["score"] - g[g["fraction"] == r["fraction"]].set_index("seed")["score"]
        assert r["mean_drop"] == pytest.approx(d.mean())
    text = study.findings(summary, drops, cfg)
    assert "SST-2" in text and "constant predictor" in text
    gains = study.regime_difference(table)
    assert len(gains) == 2  # 2 nonzero fractions x 1 task
    for _, r in gains.iterrows():
        p = table[table["fraction"] == r["fraction"]].pivot(index="seed", columns="regime", values="score")
        assert r["mean_gain_of_retraining"] == pytest.approx((p["mask_then_finetune"] - p["finetune_then_mask"]).mean())
    v = study.verdicts(table, cfg)
    assert tuple(v.columns) == claims.COLUMNS and set(v["claim_id"]) == {c.id for c in study.STUDY.claims}
    assert "nan" not in claims.render(v).lower()


def test_unavailable_task_is_reported_not_crashed(tiny_model_dir, tiny_glue_root):
    cfg = config(tiny_model_dir, tiny_glue_root, tasks=["all"])
    tasks, missing = glue_workbench.resolve_tasks(cfg)
    assert tasks == ["SST-2"]
    assert "MNLI" in missing and "CoLA" in missing


@pytest.mark.parametrize("ablation", ["uniform", "mean"])
def test_gated_ablations_are_trained_and_evaluated_with_their_gates(tiny_model_dir, tiny_glue_root, tmp_path,
                                                                    monkeypatch, ablation):
    """With "uniform"/"mean" the heads stay in the weights: every pruned cell must be scored WITH its gates."""
    cfg = config(tiny_model_dir, tiny_glue_root, fractions=[0.0, 0.5], seeds=[0], epochs=1, ablations=[ablation],
                 finetune_ablations=[ablation])
    seen = []
    real_eval, real_ft = training.evaluate, training.finetune

    def evaluate(model, enc, task, batch_size=128, gates=None, ablation="zero", means=None):
        seen.append(("eval", gates is not None, ablation, means is not None))
        return real_eval(model, enc, task, batch_size, gates=gates, ablation=ablation, means=means)

    def finetune(*a, gates=None, ablation="zero", means=None, **k):
        seen.append(("train", gates is not None, ablation, means is not None))
        return real_ft(*a, gates=gates, ablation=ablation, means=means, **k)

    monkeypatch.setattr(training, "evaluate", evaluate)
    monkeypatch.setattr(training, "finetune", finetune)
    table = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path))
    need_means = ablation == "mean"
    # full model: trained and scored without gates; pruned cells: gated in training (regime a) and scoring (both)
    assert seen.count(("train", False, "zero", False)) == 1  # the full model: nothing masked, one for every semantics
    assert seen.count(("train", True, ablation, need_means)) == 1
    # regime a at 0.5, regime b at 0.5, and regime b at 0 (all-ones gates) are scored with gates
    assert seen.count(("eval", True, ablation, need_means)) == 3
    assert seen.count(("eval", False, "zero", False)) == 1  # regime a at 0: nothing pruned, no gates
    assert len(table) == 4 and set(table["ablation"]) == {ablation}


def test_finetune_fractions_limit_the_fine_tuned_regime_only(tiny_model_dir, tiny_glue_root):
    from headprune_utils.studies.config import ParameterError

    cfg = config(tiny_model_dir, tiny_glue_root, fractions=[0.0, 0.25, 0.5], finetune_fractions=[0.5], seeds=[0])
    cells = study.plan_cells(cfg)
    by_regime = {r: sorted(c["fraction"] for c in cells if c["regime"] == r) for r in study.REGIMES}
    assert by_regime == {"mask_then_finetune": [0.0, 0.5], "finetune_then_mask": [0.0, 0.25, 0.5]}
    assert len(study.plan_cells(config(tiny_model_dir, tiny_glue_root, fractions=[0.0, 0.25, 0.5], seeds=[0]))) == 6  # None: every fraction in both regimes
    with pytest.raises(ParameterError, match=r"finetune_fractions \[0.75\] are not in fractions"):
        config(tiny_model_dir, tiny_glue_root, finetune_fractions=[0.75])


def test_semantics_are_cells_of_their_own_and_verdicts_say_which(tiny_model_dir, tiny_glue_root, tmp_path):
    """Each semantics is its own cell (key axis ``ablation``), never mixed in a table row or a summary; the verdict
    rows under the claim's own semantics (uniform, Budhraja et al.'s BERT code) are primary, the others sensitivity."""
    cfg = config(tiny_model_dir, tiny_glue_root, fractions=[0.0, 0.5], seeds=[0, 1], epochs=1,
                 ablations=["uniform", "zero", "mean"], finetune_ablations=["uniform", "zero"])
    cells = study.plan_cells(cfg)
    keys = [tuple(sorted(c.axes.items())) for c in cells]
    assert len(keys) == len(set(keys))
    per = {(r, a): sum(1 for c in cells if c["regime"] == r and c["ablation"] == a)
           for r in study.REGIMES for a in ("uniform", "zero", "mean")}
    assert per == {("mask_then_finetune", "uniform"): 4, ("mask_then_finetune", "zero"): 4,
                   ("mask_then_finetune", "mean"): 0, ("finetune_then_mask", "uniform"): 4,
                   ("finetune_then_mask", "zero"): 4, ("finetune_then_mask", "mean"): 4}
    table = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path))
    trained = table[(table["fraction"] == 0.5) & (table["regime"] == "mask_then_finetune")]
    loss = {a: [h[-1]["train_loss"] for h in g.sort_values("seed")["history"]] for a, g in trained.groupby("ablation")}
    assert not np.allclose(loss["uniform"], loss["zero"]), "each semantics fine-tunes its own model"
    summary = study.summarise(table)
    assert set(summary["ablation"]) == {"uniform", "zero", "mean"}
    assert (summary.groupby(["task", "ablation", "regime", "fraction"]).size() == 1).all()
    assert (summary["n_seeds"] == 2).all(), "a summary row holds one semantics' seeds, never two semantics"
    drops = study.paired_drop(table)
    for _, r in drops.iterrows():
        g = table[(table["regime"] == r["regime"]) & (table["ablation"] == r["ablation"])]
        d = g[g["fraction"] == 0].set_index("seed")["score"] - g[g["fraction"] == 0.5].set_index("seed")["score"]
        assert r["mean_drop"] == pytest.approx(d.mean())
    v = study.verdicts(table, cfg)
    claims.validate(v)
    assert set(v["semantics"]) <= {"uniform", "zero", "mean"}
    assert (v.loc[v["semantics"] == "uniform", "analysis"] == "primary").all()
    assert (v.loc[v["semantics"] != "uniform", "analysis"] == "sensitivity").all()
    assert {"budhraja.random_prunable", "ours.retraining_recovers"} <= set(v.loc[v["analysis"] == "primary", "claim_id"])
    dep = claims.semantics_dependence(v)
    assert set(dep["depends"]) <= {"flips", "differs in strength", "no", "cannot tell"} and len(dep) > 0


def test_mask_draws_are_averaged_within_the_model(tiny_model_dir, tiny_glue_root, tmp_path):
    """Extra random masks per model (evaluation-only regime): draw 0 is the shared mask, the others differ; every
    summary averages a model's draws first (the model is the unit), by hand here."""
    cfg = config(tiny_model_dir, tiny_glue_root, fractions=[0.0, 0.5], seeds=[0, 1], epochs=1, mask_draws=3,
                 regimes=["finetune_then_mask"])
    cells = study.plan_cells(cfg)
    assert sorted((c["fraction"], c["draw"]) for c in cells if c["seed"] == 0) == [(0.0, 0), (0.5, 0), (0.5, 1), (0.5, 2)]
    m = [study.cell_mask((2, 6), 0.5, 0, d) for d in range(3)]
    assert torch.equal(m[0], study.cell_mask((2, 6), 0.5, 0)) and not torch.equal(m[0], m[1])
    assert all(int((x == 0).sum()) == 6 for x in m)
    table = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path))
    summary = study.summarise(table).set_index(["fraction"])
    by_hand = table[table["fraction"] == 0.5].groupby("seed")["score"].mean().mean()
    assert summary.loc[0.5, "mean"] == pytest.approx(by_hand)
    assert summary.loc[0.5, "n_seeds"] == 2, "units are models, not masks"
    drops = study.paired_drop(table)
    full = table[table["fraction"] == 0].set_index("seed")["score"]
    assert drops["mean_drop"].iloc[0] == pytest.approx((full - table[table["fraction"] == 0.5].groupby("seed")["score"].mean()).mean())
    spread = study.mask_spread(table)
    assert len(spread) == 1 and spread["draws_per_model"].iloc[0] == 3
    from headprune_utils.studies.config import ParameterError
    with pytest.raises(ParameterError, match="mask_draws"):
        config(tiny_model_dir, tiny_glue_root, mask_draws=0)
    for bad in (-0.02, float("nan"), float("inf")):  # a README-only user's negative tolerance passed --check
        with pytest.raises(ParameterError, match="tolerance must be|'tolerance' must be finite"):
            config(tiny_model_dir, tiny_glue_root, tolerance=bad)


def test_finetune_tasks_limit_the_fine_tuned_regime(tiny_model_dir, tiny_glue_root):
    from headprune_utils.studies.config import ParameterError

    cfg = config(tiny_model_dir, tiny_glue_root, finetune_tasks=["sst2"])
    assert any(c["regime"] == "mask_then_finetune" for c in study.plan_cells(cfg))
    assert cfg.finetunes("SST-2") and not cfg.finetunes("STS-B")
    import dataclasses
    other = dataclasses.replace(cfg, finetune_tasks=["STS-B"])  # (not validated: SST-2 then gets no fine-tuning)
    cells = study.plan_cells(other)
    assert cells and not [c for c in cells if c["regime"] == "mask_then_finetune"]
    with pytest.raises(ParameterError, match=r"finetune_tasks \['CoLA'\] are not in tasks"):
        config(tiny_model_dir, tiny_glue_root, finetune_tasks=["CoLA"])
    with pytest.raises(ParameterError, match="finetune_tasks"):
        config(tiny_model_dir, tiny_glue_root, finetune_tasks=["NOPE"])
    # the parameter only selects cells: the fingerprint is unchanged
    import torch
    assert study.study_fingerprint(cfg, torch.device("cpu")) == \
        study.study_fingerprint(config(tiny_model_dir, tiny_glue_root), torch.device("cpu"))
