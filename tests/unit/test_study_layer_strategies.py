"""Study 2 end to end on a tiny local model and synthetic data; its statistics on hand-made tables."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headprune_utils.analysis import claims
from headprune_utils.studies.config import ParameterError, validate
from headprune_utils.run.execution import run_study
from headprune_utils.model.masks import mask_from_string
from headprune_utils.store.paths import StudyPaths
from headprune_utils.studies import layer_strategies as study


def config(model_dir, data_root, **kw):
    base = dict(model=str(model_dir), tasks=["SST-2"], seeds=[0, 1], budgets=[0.25, 0.5], finetune_budgets=[0.5],
                train_size=None, dev_size=None, epochs=1, batch_size=8, lr=1e-3, device="cpu",
                data_dir=str(data_root), allow_hub=False, progress=False)
    return validate(study.LayerStrategiesConfig, {**base, **kw})


def test_every_strategy_meets_the_same_budget_and_shared_evaluation_changes_nothing(tiny_model_dir, tiny_glue_root, tmp_path):
    cfg = config(tiny_model_dir, tiny_glue_root, ablations=["uniform", "zero", "mean"])
    table = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path))
    n_strat = len(study.ALL_STRATEGIES)
    # per seed: eval regime (1 + 9 x 2 budgets) x 3 semantics, fine-tune regime (1 + 9 x 1) x uniform
    assert len(table) == 2 * (3 * (1 + 2 * n_strat) + (1 + n_strat))
    assert set(table["ablation"]) == {"uniform", "zero", "mean"}
    assert set(table.loc[table["regime"] == "mask_then_finetune", "ablation"]) == {"uniform"}
    for (regime, budget), g in table.groupby(["regime", "budget"]):
        assert g["n_heads_pruned"].nunique() == 1, (regime, budget)
        assert g["n_heads_pruned"].iloc[0] == round(budget * 12)
        for m in g["mask"]:
            assert int((mask_from_string(m) == 0).sum()) == round(budget * 12)
    # the fine-tuned full model is the reference of both regimes and every semantics (no head masked)
    ref = table[table["strategy"] == "none"]
    assert (ref.groupby("seed")["score"].nunique() == 1).all() and len(ref) == 2 * 4
    # importance strategies prune different heads than each other (least vs most)
    ftm = table[table["regime"] == "finetune_then_mask"]
    e = ftm[(ftm["budget"] == 0.25) & (ftm["seed"] == 0) & (ftm["ablation"] == "zero")].set_index("strategy")
    assert e.loc["least_important", "mask"] != e.loc["most_important", "mask"]
    # one mask per strategy, budget and seed whatever the semantics (which semantics each cell is evaluated
    # under: test_strategy_sweep; the tiny model's scores are too coarse to tell them apart)
    assert (ftm[ftm["strategy"] != "none"].groupby(["strategy", "budget", "seed"])["mask"].nunique() == 1).all()
    assert (ftm.groupby(["strategy", "budget", "seed"])["ablation"].nunique() == 3).all()

    plain_cfg = config(tiny_model_dir, tiny_glue_root, shared_evaluation=False, regimes=["finetune_then_mask"],
                       ablations=["uniform", "zero", "mean"])
    plain = run_study(study.STUDY, plain_cfg, "p", StudyPaths(study.NAME, "p", root=tmp_path))
    key = ["regime", "ablation", "strategy", "budget", "seed"]
    a = table[table["regime"] == "finetune_then_mask"].sort_values(key).reset_index(drop=True)
    b = plain.sort_values(key).reset_index(drop=True)
    assert list(a["mask"]) == list(b["mask"])
    np.testing.assert_allclose(a["score"], b["score"], atol=1e-12)

    # analysis runs on the real table
    summary = study.summarise(table)
    assert (summary["ci_low"] <= summary["mean"] + 1e-12).all()
    contr = study.contrasts(table)
    assert set(contr["contrast"]) == {c.name for c in study.CONTRASTS}
    assert (contr.groupby(["contrast", "task", "regime", "ablation"])["budget"]
            .apply(lambda b: (b == "all").sum()) == 1).all()
    assert {"ci_low", "ci_high"} <= set(contr.columns) and "boot_ci_low" not in contr.columns
    v = study.verdicts(table, cfg)
    claims.validate(v)
    assert set(v["claim_id"]) == {c.id for c in study.STUDY.claims}
    own = {c.id: c.semantics for c in study.STUDY.claims}
    protocol = {c.id: study.REGIME_NAMES.get(c.decided_in, "") for c in study.STUDY.claims}
    in_own = v["setting"].astype(str).combine(v["claim_id"].map(protocol), lambda s, p: not p or s.startswith(p))
    assert ((v["analysis"] == "primary") == ((v["semantics"] == v["claim_id"].map(own)) & in_own)).all()
    assert set(v["semantics"]) == {"uniform", "zero", "mean"}
    assert set(v["verdict"]) <= set(claims.VERDICTS) and (v["n_units"] <= 2).all()  # 2 seeds = 2 models
    assert "nan" not in claims.render(v).lower().replace("n/a", "")
    rows = study.example_masks(table)
    assert len(rows) == n_strat * 2 * 12


def test_resume_computes_nothing_twice(tiny_model_dir, tiny_glue_root, tmp_path, monkeypatch):
    cfg = config(tiny_model_dir, tiny_glue_root, seeds=[0], strategies=["random", "top"], budgets=[0.5])
    paths = StudyPaths(study.NAME, "t", root=tmp_path)
    run_study(study.STUDY, cfg, "t", paths)
    calls = []
    monkeypatch.setattr(study, "run_cells", lambda *a, **k: calls.append(a) or [])
    monkeypatch.setattr(study, "run_cell", lambda *a, **k: calls.append(a) or {})
    table = run_study(study.STUDY, cfg, "t", paths)
    assert calls == [] and len(table) == 3 * len(cfg.ablations) + 3  # evaluation-only x semantics, fine-tuning x uniform


def table_from_diffs(diffs: dict[str, list[float]], base: float = 0.8) -> pd.DataFrame:
    """A results table with 2 tasks x 2 budgets x 3 seeds, strategy scores = base + the given offsets; the full
    model ("none") = base + 0.1 + a seed jitter; every strategy's mask its own. The full model's fine-tuning (its
    mask-then-fine-tune cell of no mask) stores a held-out curve that reached the plateau; the evaluation-only cells
    store none (as the study does)."""
    converged = [{"epoch": 1}, {"epoch": 2, "selected": True}, {"epoch": 3}, {"epoch": 4}]
    rows = []
    for task in ("A", "B"):
        for seed in range(3):
            for regime, history in (("finetune_then_mask", []), ("mask_then_finetune", converged)):
                rows.append({"task": task, "regime": regime, "strategy": "none", "budget": 0.0,
                             "seed": seed, "score": base + 0.1 + 0.01 * seed, "metric": "accuracy", "chance": 0.5,
                             "n_heads_pruned": 0, "mask": "full", "history": history})
        for budget in (0.25, 0.5):
            for seed in range(3):
                for st, offs in diffs.items():
                    rows.append({"task": task, "regime": "finetune_then_mask", "strategy": st, "budget": budget,
                                 "seed": seed, "score": base + offs[seed], "metric": "accuracy", "chance": 0.5,
                                 "n_heads_pruned": 1, "mask": st, "history": []})
    return pd.DataFrame(rows).assign(ablation="uniform")


def test_contrasts_and_verdicts_on_hand_made_tables():
    cfg = study.LayerStrategiesConfig()
    diffs = {"top_bottom": [0.10, 0.12, 0.11], "middle": [0.0, 0.0, 0.0], "top": [0.001, 0.0, -0.001],
             "bottom": [0.0, 0.001, 0.0], "spread": [0.0, 0.0, 0.0], "consecutive": [0.05, 0.051, 0.049]}
    clear = table_from_diffs(diffs)
    c = study.contrasts(clear)
    # over all budgets: one value per model (task, seed), budgets averaged within the model
    over = c[c["budget"] == "all"].set_index(["contrast", "task"])
    assert over.loc[("avoid the middle", "A"), "mean_diff"] == pytest.approx(0.11)
    assert over.loc[("avoid the middle", "A"), "n_units"] == 3
    per = c[(c["contrast"] == "avoid the middle") & (c["task"] == "A") & (c["budget"] == 0.25)]
    assert per["mean_diff"].iloc[0] == pytest.approx(0.11) and per["n_units"].iloc[0] == 3
    assert "all" not in set(c["task"]), "no pooled test over task x budget x seed pseudo-replicates"
    v = study.verdicts(clear, cfg)
    # fine-tune, then mask only: Budhraja's primary rows say their protocol was not run; the contrasts are decided
    # beside them (sensitivity rows), which this test reads
    prim = v[v["claim_id"].str.startswith("budhraja.") & (v["analysis"] == "primary")]
    assert set(prim["verdict"]) == {"not testable"}
    assert prim.loc[prim["claim_id"] == "budhraja.avoid_middle", "reason"].str.contains("protocol").all()
    ftm = study.REGIME_NAMES["finetune_then_mask"]
    v = v[v["setting"].str.startswith(ftm) | (v["task"] == "all")]
    verdict = v.set_index(["claim_id", "task"])["verdict"]
    assert verdict[("budhraja.avoid_middle", "A")] == "supported"
    assert verdict[("budhraja.avoid_middle", "all (A, B)")] == "supported"
    assert verdict[("budhraja.location_no_preference", "A")] == "supported"
    assert verdict[("budhraja.avoid_consecutive", "A")] == "contradicted"
    margin = v.set_index(["claim_id", "task"])["margin"]
    assert margin[("budhraja.avoid_consecutive", "A")] == pytest.approx(0.1 * (0.91 - 0.5)), \
        "0.1 x (full - chance), full = the mean over the 3 models"
    # the same -0.05 on 3 models, noisier: shown below the margin (not supported), but its sign is not shown after
    # Holm over the study's family (every test of every row, the "not supported" ones too)
    noisy = study.verdicts(table_from_diffs({**diffs, "consecutive": [0.05, 0.06, 0.04]}), cfg)
    noisy = noisy[noisy["setting"].str.startswith(ftm)]
    n = noisy.set_index(["claim_id", "task"]).loc[("budhraja.avoid_consecutive", "A")]
    assert n["verdict"] == "not supported" and n["effect"] == pytest.approx(-0.05)
    t = {x.word: x for x in claims.row_tests(n)}
    assert t["not supported"].p_adjusted < 0.05 <= t["contradicted"].p_adjusted and t["contradicted"].p < 0.05
    # contrasts whose strategies did not run are left out, not invented; their claims are not testable
    assert "most important vs random" not in set(c["contrast"])
    assert verdict[("ours.most_important_not_worse", "all")] == "not testable"


def test_bad_parameters_fail_before_any_work(tiny_model_dir, tiny_glue_root):
    with pytest.raises(ParameterError, match="strategies"):
        config(tiny_model_dir, tiny_glue_root, strategies=["topp"])
    with pytest.raises(ParameterError, match="0 is the reference"):
        config(tiny_model_dir, tiny_glue_root, budgets=[0.0, 0.5])
    with pytest.raises(ParameterError, match="budgets"):
        config(tiny_model_dir, tiny_glue_root, finetune_budgets=[1.5])
    with pytest.raises(ParameterError, match="unknown parameter"):
        validate(study.LayerStrategiesConfig, {"budget": [0.5]})


def test_plan_groups_the_evaluation_cells_of_one_model_and_costs_every_cell(tiny_model_dir, tiny_glue_root):
    cfg = config(tiny_model_dir, tiny_glue_root, strategies=["random", "top"], budgets=[0.25, 0.5],
                 finetune_ablations=["uniform", "zero"])
    cells = study.plan_cells(cfg)
    assert [c.key for c in cells] == [c.key for c in study.STUDY.plan(cfg)]
    assert len(cells) == 2 * (len(cfg.ablations) * (1 + 2 * 2) + 2 * (1 + 2))
    for c in cells:
        assert c.cost.flops > 0 and c.requires == ()
        if c["regime"] == "finetune_then_mask" or c["strategy"] == "none":  # the reference: the cached model, evaluated
            assert c.group == (c["task"], c["seed"], "evaluate")
        else:
            assert c.group is None
    ft = {(c["strategy"], c["ablation"]): c.cost.flops for c in cells
          if c["regime"] == "mask_then_finetune" and c["seed"] == 0 and c["strategy"] != "none"}
    ev = [c.cost.flops for c in cells if c.group is not None]
    # pruned heads are removed under "zero" only: fine-tuning at half the heads costs less than under "uniform"
    assert ft[("random", "zero")] < ft[("random", "uniform")] and max(ev) < min(ft.values())


def test_study_run_evaluates_a_group_together_then_fine_tunes_one_by_one(tiny_model_dir, tiny_glue_root, monkeypatch):
    cfg = config(tiny_model_dir, tiny_glue_root, seeds=[0], strategies=["random", "top"], budgets=[0.5])
    cells = study.plan_cells(cfg)
    calls = []
    monkeypatch.setattr(study, "run_cells", lambda ctx, axes, shared: calls.append(("together", len(axes), shared))
                        or [{"i": i} for i in range(len(axes))])
    monkeypatch.setattr(study, "run_cell", lambda ctx, axes: calls.append(("one", axes["strategy"])) or {})

    class Ctx:
        pass

    ctx = Ctx()
    ctx.cfg = cfg
    done = [c.key for c, _ in study.STUDY.run(ctx, cells, {})]
    assert sorted(done) == sorted(c.key for c in cells)
    assert calls == [("together", 3 * len(cfg.ablations), True), ("one", "none"), ("one", "random"), ("one", "top")]


def test_the_plan_has_one_cell_per_semantics_and_the_semantics_is_in_the_key_not_the_fingerprint(tiny_model_dir,
                                                                                                 tiny_glue_root):
    cfg = config(tiny_model_dir, tiny_glue_root, strategies=["random", "top"], budgets=[0.5],
                 ablations=["zero", "mean"], finetune_ablations=["uniform", "zero"])
    cells = study.plan_cells(cfg)
    assert len({c.key for c in cells}) == len(cells), "no two cells share a key"
    assert all(list(c.axes)[:3] == ["task", "regime", "ablation"] for c in cells)
    seen: dict = {}
    for c in cells:
        seen.setdefault((c["task"], c["regime"], c["strategy"], c["budget"], c["seed"]), []).append(c["ablation"])
    for (task, regime, *_), sems in seen.items():
        assert sems == (cfg.ablations if regime == "finetune_then_mask" else cfg.finetune_ablations)
    other = config(tiny_model_dir, tiny_glue_root, strategies=["random", "top"], budgets=[0.5])
    assert study.study_fingerprint(cfg, "cpu") == study.study_fingerprint(other, "cpu")
    with pytest.raises(ParameterError, match="ablations"):
        config(tiny_model_dir, tiny_glue_root, ablations=["zero", "zero"])
    with pytest.raises(ParameterError, match="finetune_ablations"):
        config(tiny_model_dir, tiny_glue_root, finetune_ablations=["random"])


def test_no_import_of_another_study_module():
    import inspect
    import re

    src = inspect.getsource(study)
    imported = re.findall(r"^from \.(\w*) import|^from \. import (\w+)", src, flags=re.M)
    own = {("base", ""), (f"{study.NAME}_analysis", ""), (f"{study.NAME}_claims", "")}  # the protocol, its own analysis and claims
    assert [m for m in imported if m not in own] == []
