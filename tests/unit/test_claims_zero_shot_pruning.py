"""Study 5's claims on hand-made cell tables: each claim's wiring in both directions, both branches of every gate,
per-task then pooled verdicts, the zero-shot masks beside the verdicts, no NaN in the rendered text, each claim
decided under each ablation semantics apart (primary = its paper's: zero for Bian et al., uniform for Budhraja et al.)."""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from headprune_utils import claims, margins, stats
from headprune_utils.studies import zero_shot_pruning as study

JITTER = (-0.002, -0.001, 0.0, 0.001, 0.002)  # seed-to-seed spread of every score (5 seeds)
FULL_MASK = "1111/1111/1111"
ZS_MASK = {0.5: "1110/1100/1000", 0.75: "1000/0000/0010"}  # kept per layer [3, 2, 1] and [1, 0, 1]
COMPARABLE, VS_RANDOM, VS_IMPORTANCE, RANDOM = ("bian.zero_shot_comparable", "bian.zero_shot_vs_random",
                                                 "ours.zero_shot_vs_importance", "budhraja.random_comparable")
MTF, FTM = "mask_then_finetune", "finetune_then_mask"
OWN = {c.id: c.semantics for c in study.STUDY.claims}


def cfg(**kw):
    base = dict(model="minilm", train_size=300, dev_size=300, epochs=3, seeds=list(range(len(JITTER))),
                ablations=["zero", "uniform"], finetune_ablations=["zero", "uniform"])
    return SimpleNamespace(**{**base, **kw})


def cells(tasks: dict, methods=("zero_shot", "random", "least_important"), ablations=("zero", "uniform")) -> pd.DataFrame:
    """``tasks``: name -> (full, chance, {(regime, method, budget): drop from the full model}); a drop not given
    is 0.1 (mask-then-fine-tune) or 0.2 (fine-tune-then-mask). The same cells under each of ``ablations``."""
    rows = []
    for task, (full, chance, drops) in tasks.items():
        for seed, j in enumerate(JITTER):
            for regime in (MTF, FTM):
                rows.append({"task": task, "regime": regime, "strategy": "none", "budget": 0.0, "seed": seed,
                             "score": full + j, "chance": chance, "mask": FULL_MASK})
                for budget in ((0.5,) if regime == MTF else (0.5, 0.75)):
                    for m in methods:
                        drop = drops.get((regime, m, budget), 0.1 if regime == MTF else 0.2)
                        mask = ZS_MASK[budget] if m == "zero_shot" else f"{seed % 2}111/1111/0000"
                        rows.append({"task": task, "regime": regime, "strategy": m, "budget": budget, "seed": seed,
                                     "score": full + j - drop + j * j * (10 + len(m) + budget), "chance": chance, "mask": mask})
    one_sem = pd.DataFrame(rows)
    return pd.concat([one_sem.assign(ablation=a) for a in ablations], ignore_index=True)


def one(v, claim_id, task, budget, regime, sem=None):
    """The claim's row for task x budget x regime under ``sem`` (default: its own paper's semantics: primary)."""
    sem = sem or OWN[claim_id]
    setting = f"{100 * budget:g}% of heads pruned; {study.REGIME_NAMES[regime]}"
    r = v[(v["claim_id"] == claim_id) & (v["task"] == task) & (v["setting"] == setting) & (v["semantics"] == sem)]
    assert len(r) == 1, (claim_id, task, setting, sem, v[["claim_id", "task", "setting", "semantics"]])
    assert r["analysis"].iloc[0] == ("primary" if sem == OWN[claim_id] else "sensitivity")
    return r.iloc[0]


GOOD = {(MTF, "zero_shot", 0.5): 0.005, (MTF, "random", 0.5): 0.005, (MTF, "least_important", 0.5): 0.005,
        (FTM, "zero_shot", 0.5): 0.2, (FTM, "random", 0.5): 0.2, (FTM, "least_important", 0.5): 0.2}


def test_layout_labels_and_no_nan():
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD), "STS-B": (0.8, 0.0, GOOD)}), cfg())
    claims.validate(v)
    assert tuple(v.columns) == claims.COLUMNS
    assert set(v["claim_id"]) == {c.id for c in study.STUDY.claims} == set(study.RULES)
    paper = {c.id: c.paper for c in study.STUDY.claims}
    assert paper[VS_IMPORTANCE] == "ours (exploratory)" and paper[COMPARABLE].startswith("Bian")
    assert "nan" not in claims.render(v).lower() and "nan" not in " ".join(v["test"]).lower()
    assert v["scale"].str.endswith("a small-scale test, not the paper's set-up").all()
    # rules: against the full model non-inferiority, between methods equivalence
    assert one(v, COMPARABLE, "SST-2", 0.5, MTF)["test"].startswith("non-inferiority (greater)")
    assert one(v, VS_RANDOM, "SST-2", 0.5, MTF)["test"].startswith("equivalence (TOST)")
    assert one(v, VS_IMPORTANCE, "SST-2", 0.5, MTF)["test"].startswith("equivalence (TOST)")


def test_comparable_to_the_full_model_both_directions():
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD)}), cfg())
    r = one(v, COMPARABLE, "SST-2", 0.5, MTF)
    assert r["verdict"] == "supported" and r["margin"] == pytest.approx(0.03), r["reason"]
    # fine-tune, then mask loses 0.2 (> 0.03): contradicted
    assert one(v, COMPARABLE, "SST-2", 0.75, FTM)["verdict"] == "contradicted"
    assert one(v, RANDOM, "SST-2", 0.5, MTF)["verdict"] == "supported"
    assert one(v, RANDOM, "SST-2", 0.5, FTM)["verdict"] == "contradicted"


def test_equivalence_between_methods_both_directions():
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD)}), cfg())
    assert one(v, VS_RANDOM, "SST-2", 0.5, MTF)["verdict"] == "supported"
    assert one(v, VS_IMPORTANCE, "SST-2", 0.5, MTF)["verdict"] == "supported"
    better = {**GOOD, (MTF, "random", 0.5): 0.09}  # zero-shot 0.085 better than random: outside +-0.03
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, better)}), cfg())
    r = one(v, VS_RANDOM, "SST-2", 0.5, MTF)
    assert r["verdict"] == "contradicted" and r["ci_low"] > r["margin"]


def test_adapts_gate_only_on_mask_then_fine_tune_rows():
    no_adapt = {**GOOD, (FTM, "random", 0.5): 0.0}  # masking the fine-tuned model loses nothing: mtf cannot beat it
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, no_adapt)}), cfg())
    for claim in (COMPARABLE, VS_RANDOM, VS_IMPORTANCE, RANDOM):
        r = one(v, claim, "SST-2", 0.5, MTF)
        assert r["verdict"] == "not testable" and r["reason"].startswith("fine-tuning too short to adapt")
        assert "random masks" in r["reason"] and pd.isna(r["p"])
        assert one(v, claim, "SST-2", 0.5, FTM)["verdict"] != "not testable"


def test_above_chance_gate_both_branches():
    v = study.verdicts(cells({"SST-2": (0.53, 0.5, GOOD), "STS-B": (0.8, 0.0, GOOD)}), cfg())
    r = one(v, COMPARABLE, "SST-2", 0.75, FTM)
    assert r["verdict"] == "not testable" and "not above chance by 0.05" in r["reason"]
    assert one(v, COMPARABLE, "STS-B", 0.75, FTM)["verdict"] == "contradicted"
    pooled = one(v, COMPARABLE, "all (SST-2, STS-B)", 0.75, FTM)
    assert pooled["verdict"] == "not testable" and "fewer than 2 tasks testable" in pooled["reason"]


def test_pooled_when_tasks_agree_inconclusive_when_they_disagree():
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD), "STS-B": (0.8, 0.0, GOOD)}), cfg())
    pooled = one(v, COMPARABLE, "all (SST-2, STS-B)", 0.5, MTF)
    assert pooled["verdict"] == "supported" and pooled["n_units"] == 10 and pooled["margin"] == pytest.approx(0.1)
    worse = {**GOOD, (MTF, "zero_shot", 0.5): 0.1}
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD), "STS-B": (0.8, 0.0, worse)}), cfg())
    assert one(v, COMPARABLE, "STS-B", 0.5, MTF)["verdict"] == "contradicted"
    pooled = one(v, COMPARABLE, "all (SST-2, STS-B)", 0.5, MTF)
    assert pooled["verdict"] == "inconclusive" and pooled["reason"].startswith("tasks disagree")
    assert pd.isna(pooled["p"]) and claims.row_tests(pooled) == []  # no test: outside the Holm family
    claims.validate(v)
    # Holm over every test of every tested row, per family: primary (one, whatever each claim's own semantics);
    # each sensitivity semantics apart. p-values here are ~1e-12: compared up to rounding only (abs=0)
    ft = claims.family_tests(v)
    assert set(ft["family"]) == {"zero_shot_pruning|primary|", "zero_shot_pruning|sensitivity|zero",
                                 "zero_shot_pruning|sensitivity|uniform"}
    for fam, g in ft.groupby("family"):
        rows = v.loc[g["row"]]
        assert set(rows["analysis"]) == {"sensitivity" if "sensitivity" in fam else "primary"}
        assert g["p_adjusted"].to_numpy() == pytest.approx(stats.holm(g["p"].to_numpy()), rel=1e-9, abs=0)
    assert ft["p_adjusted"].to_numpy() != pytest.approx(stats.holm(ft["p"].to_numpy()), rel=1e-9, abs=0)
    primary = v.loc[ft.loc[ft["family"] == "zero_shot_pruning|primary|", "row"]]
    assert set(primary["semantics"]) == {"zero", "uniform"} and set(primary["claim_id"]) == set(study.RULES)
    # each tested row: its rule's tests, its p / p_adjusted those of the test that decided it
    for i in ft["row"].unique():
        r = v.loc[i]
        words = sorted(t.word for t in claims.row_tests(r))
        rule = study.RULES[r["claim_id"]].rule(cfg())
        assert words == (["contradicted", "contradicted", "supported"] if rule.kind == "equivalence"
                         else ["contradicted", "supported"]), (r["claim_id"], words)
        deciding = [t for t in claims.row_tests(r) if t.text() == r["p_test"]]
        assert len(deciding) == 1 and (r["p"], r["p_adjusted"]) == (deciding[0].p, deciding[0].p_adjusted)


def test_zero_shot_masks_beside_the_verdicts():
    table = cells({"SST-2": (0.8, 0.5, GOOD), "STS-B": (0.8, 0.0, GOOD)})
    zm = study.zero_shot_masks(table)
    assert len(zm) == 2 * 3  # per semantics x (mtf 50%, ftm 50%, ftm 75%)
    zm = zm[zm["semantics"] == "zero"].set_index(["regime", "budget"])
    assert zm.loc[(FTM, 0.75), "kept_per_layer"] == "[1, 0, 1]" and zm.loc[(FTM, 0.75), "layers_emptied"] == 1
    assert zm.loc[(MTF, 0.5), "kept_per_layer"] == "[3, 2, 1]" and (zm["n_masks"] == 1).all()
    v = study.verdicts(table, cfg())
    beside = study.verdict_masks(v, table)
    assert set(beside["claim_id"]) == {COMPARABLE, VS_RANDOM, VS_IMPORTANCE}  # the claims measured on zero-shot
    assert len(beside) == (v["claim_id"] != RANDOM).sum()
    assert {"semantics", "analysis"} <= set(beside.columns)
    assert set(beside.loc[beside["analysis"] == "primary", "semantics"]) == {"zero"}  # Bian et al.'s and ours
    row = beside[(beside["claim_id"] == COMPARABLE) & beside["setting"].str.startswith("75%")
                 & (beside["semantics"] == "uniform")].iloc[0]
    assert row["zero-shot heads kept per layer"] == "[1, 0, 1]" and row["layers emptied"] == "1"
    assert not beside.isna().any().any() and "nan" not in beside.to_csv().lower()


def test_a_method_not_run_makes_its_claim_not_testable():
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD)}, methods=("zero_shot", "random")), cfg())
    r = v[v["claim_id"] == VS_IMPORTANCE]
    assert len(r) == 1 and r.iloc[0]["verdict"] == "not testable" and "least_important" in r.iloc[0]["reason"]
    assert (r.iloc[0]["p_test"], r.iloc[0]["tests"], r.iloc[0]["unit_values"]) == ("", "[]", "[]")  # no test
    claims.validate(v)


def test_the_margins_are_the_policys_not_a_parameter(tiny_model_dir, tiny_glue_root):
    """Every claim takes the task-score margin of headprune_utils.margins (0.1 x (full - chance)); no study knob."""
    from headprune_utils.config import ParameterError, validate

    base = dict(model=str(tiny_model_dir), tasks=["SST-2"], seeds=[0], fractions=[0.5], device="cpu",
                data_dir=str(tiny_glue_root), allow_hub=False)
    with pytest.raises(ParameterError, match="unknown parameter.*'margin_share'"):
        validate(study.ZeroShotPruningConfig, {**base, "margin_share": 0.1})
    assert not hasattr(validate(study.ZeroShotPruningConfig, base), "margin_share")
    assert all(spec.rule(cfg()).margin is margins.TASK_SCORE for spec in study.RULES.values())
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD), "STS-B": (0.9, 0.0, GOOD)}), cfg())
    for task, headroom in (("SST-2", 0.8 - 0.5), ("STS-B", 0.9 - 0.0)):
        for cid in study.RULES:
            r = one(v, cid, task, 0.5, FTM)
            assert r["margin"] == pytest.approx(margins.SHARE * headroom) and "0.1 x (full - chance)" in r["test"]


def test_each_semantics_is_decided_on_its_own_cells_primary_is_the_papers():
    """Zero-shot pruning holds up under zero (Bian et al.'s, primary) and not under uniform (sensitivity); the
    Budhraja reference claim is primary under uniform. Nothing is pooled over the semantics."""
    bad = {**GOOD, (MTF, "zero_shot", 0.5): 0.1, (MTF, "random", 0.5): 0.1}
    table = pd.concat([cells({"SST-2": (0.8, 0.5, GOOD)}, ablations=("zero",)),
                       cells({"SST-2": (0.8, 0.5, bad)}, ablations=("uniform",))], ignore_index=True)
    v = study.verdicts(table, cfg())
    claims.validate(v)
    assert ((v["analysis"] == "primary") == (v["semantics"] == v["claim_id"].map(OWN))).all()
    r = one(v, COMPARABLE, "SST-2", 0.5, MTF)
    assert (r["semantics"], r["verdict"]) == ("zero", "supported")
    assert one(v, COMPARABLE, "SST-2", 0.5, MTF, "uniform")["verdict"] == "contradicted"
    b = one(v, RANDOM, "SST-2", 0.5, MTF)
    assert (b["semantics"], b["verdict"]) == ("uniform", "contradicted")
    assert one(v, RANDOM, "SST-2", 0.5, MTF, "zero")["verdict"] == "supported"
    assert one(v, COMPARABLE, "SST-2", 0.5, MTF)["n_units"] == len(JITTER)  # the seeds of one semantics, not both
    dep = claims.semantics_dependence(v)
    yes = dep[(dep["claim_id"] == COMPARABLE) & dep["setting"].str.endswith(study.REGIME_NAMES[MTF])]
    assert (yes["depends"] == "flips").all() and len(yes)
    # the descriptive contrasts: per semantics, the model as the unit
    c = study.contrasts(table)
    zf = c[(c["contrast"] == "zero-shot vs full model") & (c["regime"] == MTF) & (c["budget"] == 0.5)].set_index("ablation")
    assert zf.loc["zero", "mean_diff"] == pytest.approx(-0.005, abs=1e-3)
    assert zf.loc["uniform", "mean_diff"] == pytest.approx(-0.1, abs=1e-3)
    assert (zf["n_units"] == len(JITTER)).all() and "all" not in set(c["task"])


def test_a_semantics_without_fine_tuning_cells_has_no_mask_then_fine_tune_rows():
    """Uniform ran evaluation-only cells only: no uniform mask-then-fine-tune row, and the uniform rows' gates come
    from the uniform cells."""
    table = cells({"SST-2": (0.8, 0.5, GOOD)})
    table = table[~((table["ablation"] == "uniform") & (table["regime"] == MTF))]
    v = study.verdicts(table, cfg(finetune_ablations=["zero"]))
    uni = v[v["semantics"] == "uniform"]
    assert not uni["setting"].str.endswith(study.REGIME_NAMES[MTF]).any()
    assert one(v, RANDOM, "SST-2", 0.5, FTM)["verdict"] == "contradicted"  # primary (uniform), fine-tune-then-mask
    assert one(v, COMPARABLE, "SST-2", 0.5, MTF)["verdict"] == "supported"  # zero: its own adapts gate passes
