"""Study 6 end to end on a tiny local model (with a tiny UD treebank); survival and the analysis on hand-made tables."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from headprune_utils.analysis import claims, survival
from headprune_utils.studies.config import ParameterError, validate
from headprune_utils.run.execution import run_study
from headprune_utils.model.masks import mask_from_string, mask_to_string
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import StaleResultsError, cell_key
from headprune_utils.studies import specialized_heads_l0 as study

# (form, head, deprel): words of the tiny tokenizer's vocabulary, so none is [UNK]
SENTENCES = [
    [("the", 3, "det"), ("good", 3, "amod"), ("film", 6, "nsubj"), ("was", 6, "cop"), ("very", 6, "advmod"), ("fun", 0, "root")],
    [("love", 0, "root"), ("the", 4, "det"), ("great", 4, "amod"), ("story", 1, "obj")],
    [("the", 2, "det"), ("acting", 5, "nsubj"), ("is", 5, "cop"), ("not", 5, "advmod"), ("boring", 0, "root")],
    [("hate", 0, "root"), ("a", 4, "det"), ("long", 4, "amod"), ("plot", 1, "obj"), ("but", 6, "cc"), ("love", 1, "conj"),
     ("the", 8, "det"), ("acting", 6, "obj")],
]


def conllu(repeat: int) -> str:
    out = []
    for n, sent in enumerate(SENTENCES * repeat):
        out.append(f"# sent_id = s{n}")
        out += [f"{i}\t{f}\t{f}\tX\tX\t_\t{h}\t{r}\t_\t_" for i, (f, h, r) in enumerate(sent, 1)]
        out.append("")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def data_root(tiny_glue_root, tmp_path_factory):
    """The tiny GLUE root plus a tiny UD English-EWT (train and dev)."""
    root = tmp_path_factory.mktemp("data_root")
    (root / "glue").symlink_to(tiny_glue_root / "glue")
    ud = root / "ud_english_ewt"
    ud.mkdir()
    (ud / "en_ewt-ud-dev.conllu").write_text(conllu(3))
    (ud / "en_ewt-ud-train.conllu").write_text(conllu(5))
    return root


def config(model_dir, root, **kw):
    base = dict(model=str(model_dir), tasks=["SST-2"], seeds=[0, 1], train_size=None, dev_size=None, epochs=1,
                batch_size=8, lr=1e-3, score_size=16, ablation_size=8, ud_sentences=None, lambdas=[0.0, 5.0],
                l0_steps=6, l0_batch_size=8, l0_lr=0.5, n_random_baselines=2, n_permutations=199,
                device="cpu", data_dir=str(root), allow_hub=False, progress=False)
    return validate(study.SpecializedHeadsL0Config, {**base, **kw})


# ---------------------------------------------------------------------------------------------- parameters
def test_bad_parameters_are_refused_early(tiny_model_dir, data_root, tiny_glue_root):
    with pytest.raises(ParameterError, match="lambdas"):
        config(tiny_model_dir, data_root, lambdas=[])
    with pytest.raises(ParameterError, match="lambdas"):
        config(tiny_model_dir, data_root, lambdas=[0.1, 0.1])
    with pytest.raises(ParameterError, match="stretch"):
        config(tiny_model_dir, data_root, stretch_low=0.1)
    with pytest.raises(ParameterError, match="l0_steps"):
        config(tiny_model_dir, data_root, l0_steps=0)
    with pytest.raises(ParameterError, match="l0_max_steps"):
        config(tiny_model_dir, data_root, l0_max_steps=5)  # fewer than l0_steps (6)
    with pytest.raises(ParameterError, match="l0_max_steps"):
        config(tiny_model_dir, data_root, l0_steps=None, l0_max_steps=50)
    # the cap is an axis of the L0 cells alone, out of the fingerprint: the scores cells keep their keys
    import torch
    plain, capped = config(tiny_model_dir, data_root), config(tiny_model_dir, data_root, l0_max_steps=60)
    assert study.study_fingerprint(plain, torch.device("cpu")) == study.study_fingerprint(capped, torch.device("cpu"))
    keys = {c.key: c for c in study.plan_cells(plain)}
    for c in study.plan_cells(capped):
        if c["kind"] == "l0":
            assert c["l0_max_steps"] == 60 and c.key not in keys
        else:
            assert c.key in keys
    with pytest.raises(ParameterError, match="rare_corpus"):
        config(tiny_model_dir, data_root, rare_corpus="wikipedia")
    with pytest.raises(ParameterError, match="unknown parameter"):
        config(tiny_model_dir, data_root, lamdas=[0.1])
    # a data root without the treebank: refused before any model is loaded, naming what is missing
    with pytest.raises(ParameterError, match="UD English-EWT"):
        config(tiny_model_dir, tiny_glue_root)


def test_defaults_are_the_shared_quick_glue_defaults():
    """The fine-tuned models must be the cached ones of studies 1-5: the inherited defaults are untouched."""
    import dataclasses

    from headprune_utils.studies import glue_workbench as common

    def defaults(cls):
        return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(cls)}

    mine, shared = defaults(study.SpecializedHeadsL0Config), defaults(common.GlueStudyConfig)
    assert {k: mine[k] for k in shared} == shared
    assert (mine["temperature"], mine["stretch_low"], mine["stretch_high"]) == (0.33, -0.1, 1.1)


def test_the_plan_keeps_the_cell_keys_and_makes_the_l0_cells_require_their_scores_cell(tiny_model_dir, data_root):
    cfg = config(tiny_model_dir, data_root, lambdas=[5.0, 0.0])
    cells = study.plan_cells(cfg)
    assert [dict(c.axes) for c in cells] == [  # the keys of the stored results: never reshaped
        {"kind": "roles", "task": "pretrained"},
        {"kind": "scores", "task": "SST-2", "seed": 0},
        {"kind": "l0", "task": "SST-2", "seed": 0, "lam": 0.0}, {"kind": "l0", "task": "SST-2", "seed": 0, "lam": 5.0},
        {"kind": "scores", "task": "SST-2", "seed": 1},
        {"kind": "l0", "task": "SST-2", "seed": 1, "lam": 0.0}, {"kind": "l0", "task": "SST-2", "seed": 1, "lam": 5.0},
    ]
    for c in cells:
        assert c.cost.flops > 0
        if c["kind"] == "l0":
            assert c.requires == (cell_key(study.scores_axes("SST-2", c["seed"])),)
            assert c.group == ("SST-2", c["seed"], "l0")
        else:
            assert c.requires == () and c.group is None
    assert study.STUDY.plan(cfg)[2].key == cells[2].key and study.STUDY.name == study.NAME
    ids = [claim.id for claim in study.STUDY.claims]
    assert len(ids) == len(set(ids)) >= 7 and all(claim.text and claim.metric for claim in study.STUDY.claims)


# ---------------------------------------------------------------------------------------------- end to end
def test_study_runs_end_to_end_and_resumes(tiny_model_dir, data_root, tmp_path, monkeypatch):
    from headprune_utils.model import strategies
    from headprune_utils.train import training
    from headprune_utils.studies import glue_workbench as common

    cfg = config(tiny_model_dir, data_root)
    paths = StudyPaths(study.NAME, "t", root=tmp_path)
    table = run_study(study.STUDY, cfg, "t", paths)
    assert len(table) == len(study.plan_cells(cfg)) == 1 + 2 * (1 + 2)
    scores = table[table["kind"] == "scores"]
    for name in study.SCORES:
        assert all(np.asarray(v).shape == (3, 4) for v in scores[name])
    every, no_special = (np.asarray(scores[n].tolist()) for n in ("confidence", "confidence_no_special_keys"))
    assert (no_special <= every + 1e-6).all() and (no_special > 0).all()  # a max over fewer keys of the same weights
    l0 = table[table["kind"] == "l0"].sort_values(["seed", "lam"])
    assert set(l0["lam"]) == {0.0, 5.0}
    for _, g in l0.groupby("seed"):
        assert g["n_kept"].iloc[0] >= g["n_kept"].iloc[1], "a larger penalty keeps no more heads"
    assert int(l0.loc[l0["lam"] == 5.0, "n_kept"].max()) < 12, "a large penalty closes gates"
    # every stored number is what evaluating the stored masks on the cached fine-tuned model gives
    ctx = common.GlueContext(cfg, torch.device("cpu"), paths.finetuned_cache)
    for r in scores.itertuples():  # the scores cell records the fine-tuned model's held-out curve
        # the full model's curve, without the fine-tuning's clock readings (the cell is the same however computed)
        assert r.full_model_history == common.recorded_curve(ctx.full_model("SST-2", int(r.seed))[1])
        assert len(r.full_model_history) >= 1 and not any("train_seconds" in e for e in r.full_model_history)
    for r in l0.itertuples():
        seed = int(r.seed)
        model = ctx.full_model("SST-2", seed)[0]
        dv = ctx.task_data("SST-2")[2]
        score = lambda m: training.evaluate(model, dv, "SST-2", gates=m)["accuracy"]  # noqa: E731
        mask = mask_from_string(r.mask)
        assert int(mask.sum()) == r.n_kept
        assert r.score_l0 == pytest.approx(score(mask))
        assert r.score_full == pytest.approx(training.evaluate(model, dv, "SST-2")["accuracy"]), "the model is unchanged"
        for m, s in zip(r.random_masks, r.score_random):
            assert int(mask_from_string(m).sum()) == r.n_kept and s == pytest.approx(score(mask_from_string(m)))
        imp = torch.tensor(scores[scores["seed"] == seed]["gradient_importance"].iloc[0])
        want = strategies.importance_mask(imp, 12 - int(r.n_kept), "least_important")
        assert torch.equal(mask_from_string(r.importance_mask), want)
        assert r.score_importance == pytest.approx(score(want))
        assert np.asarray(r.log_alpha).shape == (3, 4) and ((mask > 0) == (torch.tensor(r.log_alpha) > 0)).all()
    # resume: nothing is computed again
    monkeypatch.setattr(study, "run_l0_cell", lambda *a, **k: pytest.fail("recomputed an L0 cell"))
    monkeypatch.setattr(study, "run_scores_cell", lambda *a, **k: pytest.fail("recomputed a scores cell"))
    again = run_study(study.STUDY, cfg, "t", paths)
    cols = ["kind", "task", "seed", "lam", "score_l0", "mask", "score_full"]
    assert again[cols].equals(table[cols])
    # analysis-only parameters do not invalidate the cells; the others do
    run_study(study.STUDY, config(tiny_model_dir, data_root, positional_threshold=0.5, rare_share=0.3), "t", paths)
    with pytest.raises(StaleResultsError):
        run_study(study.STUDY, config(tiny_model_dir, data_root, l0_lr=0.2), "t", paths)
    # the whole analysis runs on the real table
    roles = study.role_table(table, **study.role_thresholds(cfg))
    assert set(roles["source"]) == {"pretrained", "SST-2"} and len(roles) == 3 * 12
    counts = study.role_counts(roles, cfg.relations)
    curve = study.l0_curve(table)
    contr = study.curve_contrasts(curve)
    surv = study.survival_heads(table)
    assert set(surv["survival"]) <= {0, 1, 2}
    agree = study.agreement_summary(study.score_agreement(table, surv))
    assert "l0_survival" in set(agree["b"])
    tests = study.survival_tests(surv, roles, n_perm=99)
    budget = study.roles_at_budget(table, roles)
    agreement = study.score_agreement(table, surv)
    v = study.verdicts(table, agreement, roles, surv, budget, claims_=study.CLAIMS, semantics=cfg.ablation,
                       scale_=study.scale(cfg, 12))
    claims.validate(v)
    assert set(v["claim_id"]) == {c.id for c in study.CLAIMS} and "nan" not in claims.render(v).lower()
    confident = v[v["claim_id"] == "voita.important_are_confident"]
    assert set(confident["setting"]) == set(study.CONFIDENCES.values())
    assert study.sweep_summary(table)["monotone_share"].between(0, 1).all()
    sens = study.rare_criterion_survival(table, surv, shares=(0.1, 0.5, 0.9), n_perm=99)
    assert len(sens) == 3 and sens["n_rare_pretrained"].is_monotonic_decreasing
    assert sens["fixed"].tolist() == [False, True, False]
    counts = study.rare_criterion_counts(table, shares=(0.1, 0.5, 0.9))
    assert set(counts["model"]) == {"pre-trained model", "fine-tuned models (mean)"} and len(counts) == 3 * 2 * 2


def test_gates_with_a_trained_model_leave_the_cached_model_alone(tiny_model_dir, data_root, tmp_path):
    cfg = config(tiny_model_dir, data_root, l0_train_model=True, l0_model_lr=1e-2, seeds=[0])
    ctx = study.Context(cfg, torch.device("cpu"), tmp_path)
    model = ctx.full_model("SST-2", 0)[0]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    row = study.run_l0_cell(ctx, {"kind": "l0", "task": "SST-2", "seed": 0, "lam": 0.0}, torch.rand(3, 4), 0.5)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert 0 <= row["score_l0"] <= 1 and len(row["score_random"]) == 2


def test_roles_in_one_pass_equal_the_separate_measurements(tiny_model_dir, data_root, tmp_path):
    from conftest import tiny_model
    from headprune_utils.measure import specialized
    from headprune_utils.studies import glue_workbench as common

    cfg = config(tiny_model_dir, data_root)
    ctx = study.Context(cfg, torch.device("cpu"), tmp_path)
    model = tiny_model(initializer_range=0.5)  # peaked attention: no near-ties for the argmaxes
    got = study.head_roles(ctx, model, ["SST-2"])
    special = ctx.tokenizer.all_special_ids
    batches = common.batches(ctx.encode_words(ctx.ud()), torch.device("cpu"))
    pos = specialized.positional_heads(model, batches, special_ids=special)
    np.testing.assert_allclose(got["prev"], pos["prev"].numpy(), atol=1e-6)
    np.testing.assert_allclose(got["next"], pos["next"].numpy(), atol=1e-6)
    rare = specialized.rare_word_heads(model, batches, ctx.token_counts(["SST-2"]), special_ids=special)
    np.testing.assert_allclose(got["rare_share"], rare["share"].to_numpy().reshape(3, 4))
    np.testing.assert_allclose(got["rare_p"], rare["p_value"].to_numpy().reshape(3, 4))
    assert got["rare_n"] == rare["n"].iloc[0] > 0
    syn = specialized.syntactic_heads(model, ctx.tokenizer, ctx.ud(), relations=tuple(cfg.relations))
    mine = pd.DataFrame(got["syntactic"])
    assert mine[["layer", "head", "relation", "direction", "n"]].equals(syn[["layer", "head", "relation", "direction", "n"]])
    np.testing.assert_allclose(mine["accuracy"], syn["accuracy"])
    assert set(mine.loc[mine["n"] > 0, "relation"]) == {"nsubj", "obj", "amod", "advmod"}
    assert float(np.max(got["prev"])) > 0


# ---------------------------------------------------------------------------------------------- survival (pure)
def test_survival_levels_and_nestedness_by_hand():
    masks = torch.tensor([[[1, 1, 1, 0]], [[1, 1, 0, 0]], [[1, 0, 1, 0]]], dtype=torch.float32)  # 3 lambdas, 1 x 4
    assert survival.survival_levels(masks).tolist() == [[3, 2, 3, 0]]
    assert survival.monotone_share(masks) == pytest.approx(3 / 4)  # head 2 comes back at the strongest lambda
    with pytest.raises(ValueError, match="0/1"):
        survival.survival_levels(masks * 0.5)
    with pytest.raises(ValueError, match="K, n_layers"):
        survival.survival_levels(torch.ones(2, 3))


def test_auc_and_the_stratified_permutation_test():
    assert survival.auc([3, 3, 1, 0], [True, True, False, False]) == 1.0
    assert survival.auc([1, 1, 1, 1], [True, False, True, False]) == 0.5  # ties count a half
    assert survival.auc([0, 2, 1], [True, False, False]) == 0.0
    assert math.isnan(survival.auc([1, 2], [True, True]))
    rng = np.random.default_rng(0)
    vals, labs = [], []
    for _ in range(4):  # 4 models of 24 heads; 4 specialized heads each, always the longest survivors
        v = rng.integers(0, 3, 24).astype(float)
        lab = np.zeros(24, dtype=bool)
        lab[:4] = True
        v[:4] = 4
        vals.append(v)
        labs.append(lab)
    r = survival.stratified_auc_test(vals, labs, n_perm=999)
    assert r["mean_auc"] == 1.0 and r["p_value"] == pytest.approx(1 / 1000) and r["n_strata"] == 4
    assert survival.stratified_auc_test(vals, labs, n_perm=999, alternative="less")["p_value"] == 1.0
    # no difference: a large p; a stratum without the group is left out
    null = survival.stratified_auc_test([np.zeros(10), np.arange(5)], [np.arange(10) < 3, np.zeros(5, bool)], n_perm=199)
    assert null["mean_auc"] == 0.5 and null["p_value"] == 1.0 and null["n_strata"] == 1


# ---------------------------------------------------------------------------------------------- analysis on hand tables
def roles_dict(prev, nxt, share, p, chance=0.2, syn=()):
    rows = []
    for layer in range(2):
        for head in range(3):
            for rel in ("nsubj", "amod"):
                for d in ("dep->head", "head->dep"):
                    acc = dict(syn).get((layer, head, rel, d), 0.3)
                    rows.append({"layer": layer, "head": head, "relation": rel, "direction": d, "n": 20,
                                 "accuracy": acc, "baseline": 0.4, "baseline_offset": 1})
    return {"prev": prev, "next": nxt, "rare_share": share, "rare_p": p, "rare_chance": chance, "rare_n": 100,
            "syntactic": rows}


def test_role_table_applies_the_thresholds():
    d = roles_dict(prev=[[0.95, 0.1, 0.1], [0.1, 0.1, 0.1]], nxt=[[0.0, 0.89, 0.0], [0.0, 0.0, 0.92]],
                   share=[[0.1, 0.1, 0.7], [0.1, 0.5, 0.51]], p=[[1, 1, 1e-5], [1, 1e-9, 1e-5]],
                   syn=[((1, 0, "amod", "head->dep"), 0.55), ((1, 2, "nsubj", "dep->head"), 0.49)])
    table = pd.DataFrame([{"kind": "roles", "task": "pretrained", "seed": np.nan, "roles": d},
                          {"kind": "scores", "task": "A", "seed": 0.0, "roles": d}])
    roles = study.role_table(table).set_index(["source", "layer", "head"]).loc["pretrained"]
    assert roles["positional"].tolist() == [True, False, False, False, False, True]
    assert roles.loc[(0, 0), "positional_dir"] == "prev" and roles.loc[(1, 2), "positional_dir"] == "next"
    assert roles["syntactic"].tolist() == [False, False, False, True, False, False]  # 0.49 - 0.4 < 0.10
    assert roles.loc[(1, 0), "syn_relations"] == "amod" and roles.loc[(1, 0), "syn_gain"] == pytest.approx(0.15)
    # rare-word: more than half of the queries on the rarest token (the paper's definition); (1, 1) at exactly 0.5 is
    # not, whatever its p or its ratio over chance (0.5 = 2.5 x chance 0.2)
    assert roles["rare"].tolist() == [False, False, True, False, False, True]
    assert roles.loc[(1, 2), "role"] == "several" and roles.loc[(0, 1), "role"] == "other"
    assert roles["specialized"].sum() == 4
    # looser thresholds change the roles, not the measurements
    loose = study.role_table(table, positional_threshold=0.85, syntactic_margin=0.05, rare_share=0.4)
    assert loose[loose["source"] == "A"]["positional"].sum() == 3 and loose[loose["source"] == "A"]["syntactic"].sum() == 2
    assert loose[loose["source"] == "A"]["rare"].sum() == 3
    assert study.role_table(table, rare_share=0.7)["rare"].sum() == 0  # strictly more than the threshold
    c = study.role_counts(study.role_table(table), ["nsubj", "amod"]).set_index("source")
    assert c.loc["pretrained", "n_syntactic_amod"] == 1 and c.loc["pretrained", "n_syntactic_nsubj"] == 0
    assert c.loc["pretrained", "rare_layers"] == "0,1"
    st = study.role_stability(study.role_table(table))
    assert (st["jaccard"].dropna() == 1.0).all()  # the same measurements: the same roles


def l0_table(specialized_survive_longer: bool, n_models: int = 4):
    """2 x 3 heads; heads (0, 0) and (1, 2) specialized. Three lambdas; specialized heads kept longest (or first cut)."""
    rows, role_rows = [], []
    spec = {(0, 0), (1, 2)}
    for m in range(n_models):
        order = [(0, 0), (1, 2), (0, 1), (1, 0), (0, 2), (1, 1)]  # survive longest first
        if not specialized_survive_longer:
            order = order[2:] + order[:2]
        if m % 2:  # the non-specialized order varies between models
            order = order[:2] + order[2:][::-1] if specialized_survive_longer else order[:4][::-1] + order[4:]
        for k, (lam, keep) in enumerate(((0.01, 6), (0.1, 4), (1.0, 2))):
            mask = torch.zeros(2, 3)
            for layer, head in order[:keep]:
                mask[layer, head] = 1
            rows.append({"kind": "l0", "task": "A", "seed": float(m), "lam": lam, "mask": mask_to_string(mask),
                         "n_kept": keep, "n_heads_total": 6, "log_alpha": (2 * mask - 1).tolist()})
        for layer in range(2):
            for head in range(3):
                s = (layer, head) in spec
                role_rows.append({"source": "A", "task": "A", "seed": m, "layer": layer, "head": head, "positional": s,
                                  "syntactic": False, "rare": False, "specialized": s, "role": "positional" if s else "other"})
    return pd.DataFrame(rows), pd.DataFrame(role_rows)


def test_survival_tests_find_heads_that_survive_longer():
    table, roles = l0_table(True)
    surv = study.survival_heads(table)
    s0 = surv[surv["seed"] == 0].set_index(["layer", "head"])["survival"]
    assert s0[(0, 0)] == 3 and s0[(1, 2)] == 3 and s0[(1, 1)] == 1
    t = study.survival_tests(surv, roles, n_perm=999).set_index("group")
    assert t.loc["specialized", "mean_auc"] == 1.0 and t.loc["specialized", "p_greater"] < 0.01
    assert t.loc["specialized", "mean_survival_group"] == 3.0
    assert t.loc["syntactic", "n_models"] == 0 and t.loc["syntactic", "mean_auc"] == "n/a (no syntactic heads)"
    # the opposite: specialized heads cut first
    table2, roles2 = l0_table(False)
    t2 = study.survival_tests(study.survival_heads(table2), roles2, n_perm=999).set_index("group")
    assert t2.loc["specialized", "mean_auc"] == 0.0 and t2.loc["specialized", "p_less"] < 0.01
    # at a third of the heads (2 of 6) the specialized heads are the ones kept
    b = study.roles_at_budget(table, roles, fraction=1 / 3)
    assert (b["n_kept"] == 2).all() and b["present_positional"].all() and b["n_syntactic"].eq(0).all()
    assert (b["present_syntactic"] == "n/a (no syntactic head in this model)").all()
    assert b["random_positional"].iloc[0] == pytest.approx(1 - 6 / 15)  # 2 of 6 kept miss 2 given heads: C(4,2)/C(6,2)
    b2 = study.roles_at_budget(table2, roles2, fraction=1 / 3)
    assert not b2["present_positional"].any()
    # two masks equally near the size (3 and 1 heads around 2): the smaller lambda's, whatever the cells' order
    l0 = table[table["kind"] == "l0"]
    near = {3: l0["lam"].min(), 1: l0["lam"].max()}
    tie = l0[l0["seed"] == 0].head(2).assign(n_kept=[3, 1], lam=[near[3], near[1]])
    for order in (tie, tie.iloc[::-1]):
        got = study.roles_at_budget(order, roles, fraction=1 / 3)
        assert len(got) == 1 and int(got["n_kept"].iloc[0]) == 3, order


def test_curve_contrasts():
    rows = []
    for task in ("A", "B"):
        for seed in range(4):
            for lam, kept in ((0.001, 12), (0.01, 5), (0.1, 2)):
                rows.append({"task": task, "seed": seed, "lam": lam, "n_kept": kept, "n_heads_total": 12,
                             "score_l0": 0.9 - (0.005 if kept == 5 else 0.3 if kept == 2 else 0.0) + 0.001 * seed,
                             "score_random_mean": 0.9 - (0.0 if kept == 12 else 0.2), "score_importance": 0.9 - (0.0 if kept == 12 else 0.1),
                             "score_full": 0.9 + 0.001 * seed, "chance": 0.5, "metric": "accuracy"})
    curve = pd.DataFrame(rows)
    c = study.curve_contrasts(curve)
    assert not (c["task"] == "all").any(), "tasks are not pooled raw"
    over = c[(c["task"] == "A") & (c["lam"] == "all")].set_index("contrast")
    # only masks that prune something: the 12-head rows are left out of the baseline contrasts
    assert over.loc["L0 - random", "n_pairs"] == 4 * 2 and over.loc["L0 - random", "n_units"] == 4
    assert over.loc["L0 - random", "mean_diff"] == pytest.approx(np.mean([0.195, -0.1]) + 0.0015)
    # by hand: each seed's mean over its two lambdas, then a t-interval over the 4 seeds
    from scipy import stats as sps
    x = np.array([np.mean([0.195, -0.1]) + 0.001 * s for s in range(4)])
    half = sps.t.ppf(0.975, 3) * x.std(ddof=1) / 2
    assert over.loc["L0 - random", "ci_low"] == pytest.approx(x.mean() - half)
    assert over.loc["L0 - full", "n_pairs"] == 4 * 3
    per = c[(c["contrast"] == "L0 - full") & (c["task"] == "A") & (c["lam"] == 0.01)].iloc[0]
    assert per["mean_diff"] == pytest.approx(-0.005) and per["mean_kept"] == 5


def test_score_agreement_by_hand():
    g = torch.arange(12, dtype=torch.float32).view(3, 4)
    row = {"kind": "scores", "task": "A", "seed": 0.0, "gradient_importance": g.tolist(), "relevance": g.tolist(),
           "ablation": (-g).tolist(), "confidence": g.tolist(), "entropy": (-g).tolist()}
    table = pd.DataFrame([row, {**row, "seed": 1.0}])
    agr = study.score_agreement(table)
    assert len(agr) == 2 * 10
    s = study.agreement_summary(agr).set_index(["a", "b"])
    assert s.loc[("relevance", "confidence"), "mean_spearman"] == pytest.approx(1.0)
    assert s.loc[("ablation", "confidence"), "mean_spearman"] == pytest.approx(-1.0)
    assert s.loc[("relevance", "confidence"), "n_sig_positive"] == 2
    hs = study.head_score_table(table)
    assert len(hs) == 24 and hs.loc[(hs["seed"] == 1) & (hs["layer"] == 2) & (hs["head"] == 3), "entropy"].item() == -11
    # cells of RESULTS_VERSION 1 lack the special-key-free confidence: left out; with it, it joins as a score
    assert "confidence_no_special_keys" not in hs and study.scores_recorded(table) == [
        "gradient_importance", "relevance", "ablation", "confidence", "entropy"]
    new = table.assign(confidence_no_special_keys=[(g / 20).tolist()] * 2)
    assert len(study.score_agreement(new)) == 2 * 15 and "confidence_no_special_keys" in study.head_score_table(new)
    assert set(study.score_map_data(study.head_score_table(new))["score"]) == set(study.SCORES)
    mixed = pd.concat([table.iloc[:1], new.iloc[1:]], ignore_index=True)  # two code versions: an error, not a result
    with pytest.raises(ValueError, match="some scores cells only"):
        study.head_score_table(mixed)


def test_gates_train_until_they_settle_with_l0_max_steps(tiny_model_dir, data_root, tmp_path, monkeypatch):
    """With ``l0_max_steps`` the gates train at least ``l0_steps`` steps and stop at the first check where they
    settled (analysis.preconditions.gates_settled, the rule the claims' gate reads), else at the cap; each L0 cell
    records how many steps it trained, its history every step of them."""
    from headprune_utils.analysis.preconditions import gates_settled

    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    cfg = config(tiny_model_dir, data_root, l0_max_steps=40)
    table = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path))
    l0 = table[table["kind"] == "l0"]
    assert len(l0) == 4
    for r in l0.itertuples():
        n = int(r.l0_steps_trained)
        assert 6 <= n <= 40 and len(r.history) == n and r.history[-1]["step"] == n - 1
        assert n == 40 or gates_settled(r.history)[0] is True
