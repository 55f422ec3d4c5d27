"""Study 5 end to end on a tiny local model; its contrasts on hand-made score tables."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from headprune_utils.analysis import claims
from headprune_utils.measure import clustering
from headprune_utils.model import models
from headprune_utils.studies.config import ParameterError, validate
from headprune_utils.run.execution import run_study
from headprune_utils.model.masks import mask_from_string
from headprune_utils.store.paths import StudyPaths
from headprune_utils.studies import zero_shot_pruning as study


def config(model_dir, data_root, **kw):
    base = dict(model=str(model_dir), tasks=["SST-2"], seeds=[0, 1], fractions=[0.5], probe_size=8,
                train_size=None, dev_size=None, epochs=1, batch_size=8, lr=1e-3, importance_size=16,
                device="cpu", data_dir=str(data_root), allow_hub=False, progress=False)
    return validate(study.ZeroShotPruningConfig, {**base, **kw})


def test_bad_parameters_are_refused_early(tiny_model_dir, tiny_glue_root):
    with pytest.raises(ParameterError, match="methods"):
        config(tiny_model_dir, tiny_glue_root, methods=["zero_shot", "oracle"])
    with pytest.raises(ParameterError, match="fractions"):
        config(tiny_model_dir, tiny_glue_root, fractions=[0.0, 0.5])
    with pytest.raises(ParameterError, match="metric"):
        config(tiny_model_dir, tiny_glue_root, metric="euclid")
    with pytest.raises(ParameterError, match="probe"):
        config(tiny_model_dir, tiny_glue_root, probe="wiki")


def test_study_runs_end_to_end(tiny_model_dir, tiny_glue_root, tmp_path):
    cfg = config(tiny_model_dir, tiny_glue_root)
    table = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path))
    n_sem = len(cfg.ablations) + len(cfg.finetune_ablations)
    assert cfg.finetune_ablations == ["zero", "uniform"]  # Bian et al.'s (our reading), then Budhraja et al.'s
    assert len(table) == len(study.plan_cells(cfg)) == 2 * n_sem * (1 + 3)  # seeds x regime-semantics x (full + 3)
    zs = table[table["strategy"] == "zero_shot"]
    assert zs["mask"].nunique() == 1, "the zero-shot mask uses no task data, no seed and no semantics"
    mask = mask_from_string(zs["mask"].iloc[0])
    assert int((mask == 0).sum()) == 6  # 50 % of 12 heads
    # it is the medoid mask of the pre-trained model's matrix on random token sequences
    tok = models.load_tokenizer(str(tiny_model_dir))
    model = models.load_classifier(str(tiny_model_dir), 2, device="cpu", seed=0)
    d = study.zero_shot_matrix(cfg, model, tok, torch.device("cpu"))
    assert torch.equal(mask, clustering.zero_shot_mask(d, 6, (3, 4)))
    rnd = table[table["strategy"] == "random"].groupby("seed")["mask"].first()
    assert rnd.nunique() == 2, "random masks change with the seed"
    contr = study.contrasts(table)
    assert set(contr["contrast"]) == {c.name for c in study.CONTRASTS}
    assert set(contr["ablation"]) == set(cfg.ablations) | set(cfg.finetune_ablations)
    assert {"ci_low", "ci_high"} <= set(contr.columns) and "boot_ci_low" not in contr.columns
    v = study.verdicts(table, cfg)
    assert tuple(v.columns) == claims.COLUMNS and set(v["claim_id"]) == {c.id for c in study.STUDY.claims}
    own = {c.id: c.semantics for c in study.STUDY.claims}
    protocol = {c.id: study.REGIME_NAMES.get(c.decided_in, "") for c in study.STUDY.claims}
    in_own = v["setting"].astype(str).combine(v["claim_id"].map(protocol), lambda s, p: not p or s.endswith(p))
    assert ((v["analysis"] == "primary") == ((v["semantics"] == v["claim_id"].map(own)) & in_own)).all()
    assert "nan" not in claims.render(v).lower()
    beside = study.verdict_masks(v, table)
    measured = beside.merge(v[["claim_id", "task", "setting", "semantics", "n_units"]],
                            on=["claim_id", "task", "setting", "semantics"])["n_units"].gt(0).to_numpy()
    assert len(measured) == len(beside) and measured.any()
    kept = beside["zero-shot heads kept per layer"]
    assert kept[measured].str.startswith("[").all()
    # a row measured nowhere (bian.zero_shot_comparable at 50%: 'most heads' is more than half) names no mask
    assert (kept[~measured] == "n/a (no zero-shot mask)").all()
    ov = study.mask_overlap(table)
    assert ov.loc[ov["method"] == "zero_shot", "layers_touched"].iloc[0] >= 1


def test_paired_contrasts_against_the_full_model_and_between_methods():
    rows = []
    rng = np.random.default_rng(0)
    for ablation, shift in (("zero", 0.0), ("uniform", 0.3)):
        for task in ("A", "B"):
            for seed in range(4):
                full = 0.8 + 0.01 * rng.standard_normal()
                at = {"task": task, "regime": "mask_then_finetune", "ablation": ablation, "seed": seed}
                rows.append({**at, "strategy": "none", "budget": 0.0, "score": full})
                for f, drop_z, drop_r in ((0.5, 0.005, 0.10), (0.75, 0.05, 0.20)):
                    rows.append({**at, "strategy": "zero_shot", "budget": f, "score": full - drop_z - shift})
                    rows.append({**at, "strategy": "random", "budget": f, "score": full - drop_r})
    table = pd.DataFrame(rows)
    d = study.paired(table, "zero_shot", "none")
    assert len(d) == 2 * 2 * 4 * 2, "paired within a semantics, never across"
    assert np.allclose(d.loc[(d["budget"] == 0.5) & (d["ablation"] == "zero"), "diff"], -0.005)
    contr = study.contrasts(table)
    assert "all" not in set(contr["task"]), "no pooled rows over task x budget x seed pseudo-replicates"
    per = contr[(contr["task"] == "A") & (contr["ablation"] == "zero")].set_index(["contrast", "budget"])
    assert per.loc[("zero-shot vs random", 0.5), "mean_diff"] == pytest.approx(0.095)
    assert per.loc[("zero-shot vs full model", 0.75), "mean_diff"] == pytest.approx(-0.05)
    assert per.loc[("zero-shot vs full model", "all"), "mean_diff"] == pytest.approx(-0.0275)  # model means over budgets
    assert (per["n_units"] == 4).all()  # the models (seeds), not budget x seed pairs
    uni = contr[(contr["task"] == "A") & (contr["ablation"] == "uniform")].set_index(["contrast", "budget"])
    assert uni.loc[("zero-shot vs full model", 0.5), "mean_diff"] == pytest.approx(-0.305)


def test_masked_fine_tuning_is_shared_between_studies(tiny_model_dir, tiny_glue_root, tmp_path, monkeypatch):
    """A (task, seed, mask) fine-tuned once is read back by the next study: the same numbers, no training."""
    from headprune_utils.train import training
    from headprune_utils.studies import glue_workbench as common

    cfg = config(tiny_model_dir, tiny_glue_root)
    mask = torch.ones(3, 4)
    mask[1, :3] = 0
    ctx = common.GlueContext(cfg, torch.device("cpu"), tmp_path)
    metrics, history = ctx.masked_scores("SST-2", 0, mask, "t", "zero")
    assert ctx.masked_scores_path("SST-2", 0, mask, "zero").exists()
    assert not ctx.masked_scores_path("SST-2", 0, mask, "uniform").exists(), "another semantics: another entry"
    # the same as fine-tuning and evaluating directly
    model, hist2, gates, means = ctx.finetune_masked("SST-2", 0, mask, "t", "zero")
    direct = training.evaluate(model, ctx.task_data("SST-2")[2], "SST-2", common.EVAL_BATCH)
    assert direct == metrics and len(hist2) == len(history)
    other = common.GlueContext(cfg, torch.device("cpu"), tmp_path)
    monkeypatch.setattr(other, "finetune_masked", lambda *a, **k: pytest.fail("trained again"))
    assert other.masked_scores("SST-2", 0, mask, "t", "zero") == (metrics, history)
    mask2 = mask.clone()
    mask2[2, 0] = 0
    assert ctx.masked_scores_path("SST-2", 0, mask2, "zero") != ctx.masked_scores_path("SST-2", 0, mask, "zero")
    assert ctx.masked_scores_path("SST-2", 1, mask, "zero") != ctx.masked_scores_path("SST-2", 0, mask, "zero")


def test_plan_groups_evaluation_cells_and_zero_shot_cells_cost_their_probe(tiny_model_dir, tiny_glue_root):
    cfg = config(tiny_model_dir, tiny_glue_root, fractions=[0.5, 0.75], finetune_fractions=[0.5])
    cells = study.plan_cells(cfg)
    assert [c.key for c in cells] == [c.key for c in study.STUDY.plan(cfg)]
    assert len(cells) == 2 * (len(cfg.finetune_ablations) * (1 + 3) + len(cfg.ablations) * (1 + 2 * 3))
    assert len({c.key for c in cells}) == len(cells)
    for c in cells:
        assert c.cost.flops > 0 and c.requires == ()
        assert list(c.axes)[:3] == ["task", "regime", "ablation"]
        evaluated = c["regime"] == "finetune_then_mask" or c["strategy"] == "none"  # the reference: cached, evaluated
        assert c.group == ((c["task"], c["seed"], "evaluate") if evaluated else None)
        assert c["ablation"] in (cfg.finetune_ablations if c["regime"] == "mask_then_finetune" else cfg.ablations)
    cost = {(c["regime"], c["ablation"], c["strategy"], c["budget"]): c.cost.flops for c in cells if c["seed"] == 0}
    for regime, sem in (("mask_then_finetune", "zero"), ("mask_then_finetune", "uniform"), ("finetune_then_mask", "zero")):
        extra = cost[(regime, sem, "zero_shot", 0.5)] - cost[(regime, sem, "random", 0.5)]
        assert extra == pytest.approx(study.probe_cost(cfg)) and extra > 0
    # heads removed under zero only: fine-tuning costs less there
    assert cost[("mask_then_finetune", "zero", "random", 0.5)] < cost[("mask_then_finetune", "uniform", "random", 0.5)]


def test_no_import_of_another_study_module():
    import inspect
    import re

    src = inspect.getsource(study)
    imported = re.findall(r"^from \.(\w*) import|^from \. import (\w+)", src, flags=re.M)
    own = {("base", ""), (f"{study.NAME}_analysis", ""), (f"{study.NAME}_claims", "")}  # protocol, analysis, claims
    assert [m for m in imported if m not in own] == []
