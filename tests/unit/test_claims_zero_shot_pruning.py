"""Study 5's claims on hand-made cell tables: the claims as data (zero_shot_pruning_claims), each claim's wiring in
both directions, both branches of every gate, per-task then pooled verdicts, the one zero-shot mask against each
fine-tuned model's own random masks (paired per model, the rule for a fixed mask against random masks), the zero-shot masks
beside the verdicts, no NaN in the rendered text, each claim decided under each ablation semantics apart (primary =
its paper's: zero for Bian et al., uniform for Budhraja et al.)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from headprune_utils.analysis import claims, margins, preconditions, stats
from headprune_utils.studies import zero_shot_pruning as study
from headprune_utils.studies import zero_shot_pruning_analysis as analysis
from headprune_utils.studies import zero_shot_pruning_claims as zsc

JITTER = (-0.002, -0.001, 0.0, 0.001, 0.002)  # seed-to-seed spread of every score (5 seeds)
FULL_MASK = "1111/1111/1111"
ZS_MASK = {0.5: "1110/1100/1000", 0.75: "1000/0000/0010"}  # kept per layer [3, 2, 1] and [1, 0, 1]
COMPARABLE, VS_RANDOM, VS_IMPORTANCE, RANDOM = ("bian.zero_shot_comparable", "bian.zero_shot_vs_random",
                                                 "ours.zero_shot_vs_importance", "budhraja.random_comparable")
MTF, FTM = "mask_then_finetune", "finetune_then_mask"
OWN = {c.id: c.semantics for c in study.STUDY.claims}
DECIDED_IN = {c.id: c.decided_in for c in study.STUDY.claims}
RULE = {c.id: c.rule for c in study.STUDY.claims}
NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / study.STUDY.notebook
# held-out curves (one record per epoch, the kept one selected): best at epoch 2 of 4 reached the plateau (patience
# 2); best at the last epoch of the cap did not
CONVERGED = [{"epoch": 1}, {"epoch": 2, "selected": True}, {"epoch": 3}, {"epoch": 4}]
STALLED = [{"epoch": 1}, {"epoch": 2}, {"epoch": 3, "selected": True}]


def cfg(**kw):
    base = dict(model="minilm", train_size=300, dev_size=300, epochs=3, seeds=list(range(len(JITTER))),
                ablations=["zero", "uniform"], finetune_ablations=["zero", "uniform"])
    return SimpleNamespace(**{**base, **kw})


def cells(tasks: dict, methods=("zero_shot", "random", "least_important"), ablations=("zero", "uniform"),
          curves: dict | None = None, mtf_budgets=(0.5, 0.75)) -> pd.DataFrame:
    """``tasks``: name -> (full, chance, {(regime, method, budget): drop from the full model}); a drop not given
    is 0.1 (mask-then-fine-tune) or 0.2 (fine-tune-then-mask). The same cells under each of ``ablations``. Every
    mask-then-fine-tune cell stores a held-out curve that reached the plateau unless ``curves`` gives
    ``(task, seed, method, budget)`` another (the full model: method ``none``, budget 0); the evaluation-only cells
    store none (as the study does). ``mtf_budgets``: the shares fine-tuned after masking."""
    curves = curves or {}

    def curve(regime, task, seed, method, budget):
        return curves.get((task, seed, method, budget), CONVERGED) if regime == MTF else []

    rows = []
    for task, (full, chance, drops) in tasks.items():
        for seed, j in enumerate(JITTER):
            for regime in (MTF, FTM):
                rows.append({"task": task, "regime": regime, "strategy": "none", "budget": 0.0, "seed": seed,
                             "score": full + j, "chance": chance, "mask": FULL_MASK,
                             "history": curve(regime, task, seed, "none", 0.0)})
                for budget in (mtf_budgets if regime == MTF else (0.5, 0.75)):
                    for m in methods:
                        drop = drops.get((regime, m, budget), 0.1 if regime == MTF else 0.2)
                        mask = ZS_MASK[budget] if m == "zero_shot" else f"{seed % 2}111/1111/0000"
                        rows.append({"task": task, "regime": regime, "strategy": m, "budget": budget, "seed": seed,
                                     "score": full + j - drop + j * j * (10 + len(m) + budget), "chance": chance, "mask": mask,
                                     "history": curve(regime, task, seed, m, budget)})
    one_sem = pd.DataFrame(rows)
    return pd.concat([one_sem.assign(ablation=a) for a in ablations], ignore_index=True)


def one(v, claim_id, task, budget, regime, sem=None):
    """The claim's row for task x budget x regime under ``sem`` (default: its own paper's semantics: primary)."""
    sem = sem or OWN[claim_id]
    setting = f"{100 * budget:g}% of heads pruned; {study.REGIME_NAMES[regime]}"
    r = v[(v["claim_id"] == claim_id) & (v["task"] == task) & (v["setting"] == setting) & (v["semantics"] == sem)]
    assert len(r) == 1, (claim_id, task, setting, sem, v[["claim_id", "task", "setting", "semantics"]])
    own = sem == OWN[claim_id] and DECIDED_IN[claim_id] in ("", regime)  # its paper's semantics and protocol
    assert r["analysis"].iloc[0] == ("primary" if own else "sensitivity")
    return r.iloc[0]


GOOD = {**{(MTF, m, b): 0.005 for m in ("zero_shot", "random", "least_important") for b in (0.5, 0.75)},
        (FTM, "zero_shot", 0.5): 0.2, (FTM, "random", 0.5): 0.2, (FTM, "least_important", 0.5): 0.2}


def test_layout_labels_and_no_nan():
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD), "STS-B": (0.8, 0.0, GOOD)}), cfg())
    claims.validate(v)
    assert tuple(v.columns) == claims.COLUMNS
    assert set(v["claim_id"]) == {c.id for c in study.STUDY.claims} == {c.id for c in zsc.CLAIMS}
    paper = {c.id: c.paper for c in study.STUDY.claims}
    assert paper[VS_IMPORTANCE] == "ours (exploratory)" and paper[COMPARABLE].startswith("Bian")
    assert "nan" not in claims.render(v).lower() and "nan" not in " ".join(v["test"]).lower()
    assert v["scale"].str.endswith("a small-scale test, not the paper's set-up").all()
    # rules: against the full model and against random masks (paired per model) non-inferiority, against
    # importance equivalence
    assert one(v, COMPARABLE, "SST-2", 0.75, MTF)["test"].startswith("non-inferiority (greater)")
    assert one(v, VS_RANDOM, "SST-2", 0.5, MTF)["test"].startswith("non-inferiority (greater)")
    assert one(v, VS_IMPORTANCE, "SST-2", 0.5, MTF)["test"].startswith("equivalence (TOST)")


def test_comparable_to_the_full_model_both_directions():
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD)}), cfg())
    r = one(v, COMPARABLE, "SST-2", 0.75, MTF)
    assert r["verdict"] == "supported" and r["margin"] == pytest.approx(0.03), r["reason"]
    # fine-tune, then mask loses 0.2 (> 0.03): contradicted
    assert one(v, COMPARABLE, "SST-2", 0.75, FTM)["verdict"] == "contradicted"
    assert one(v, RANDOM, "SST-2", 0.5, MTF)["verdict"] == "supported"
    assert one(v, RANDOM, "SST-2", 0.5, FTM)["verdict"] == "contradicted"


def test_equivalence_between_methods_both_directions():
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD)}), cfg())
    assert one(v, VS_IMPORTANCE, "SST-2", 0.5, MTF)["verdict"] == "supported"
    better = {**GOOD, (MTF, "least_important", 0.5): 0.09}  # zero-shot 0.085 better: outside +-0.03
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, better)}), cfg())
    r = one(v, VS_IMPORTANCE, "SST-2", 0.5, MTF)
    assert r["verdict"] == "contradicted" and r["ci_low"] > r["margin"]


def test_a_masked_model_still_improving_blocks_the_rows_it_stands_behind():
    """The convergence gate: seed 1's random 50% mask stopped at the epoch cap still improving. The mask-then-fine-tune
    rows of the claims with random masks behind them are not testable, naming it; the rows without it, and the
    fine-tune-then-mask rows, are decided."""
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD)}, curves={("SST-2", 1, "random", 0.5): STALLED}), cfg())
    for claim in (RANDOM, VS_RANDOM):
        r = one(v, claim, "SST-2", 0.5, MTF)
        assert r["verdict"] == "not testable" and pd.isna(r["p"]), r["reason"]
        assert "were still improving when training stopped" in r["reason"]
        # the model named once: the paired contrast's unit says the seed
        assert "random 50% mask of SST-2 seed 1" in r["reason"] and "(best epoch 3 of 3)" in r["reason"], r["reason"]
        assert "still improving" not in one(v, claim, "SST-2", 0.5, FTM)["reason"]
    assert one(v, VS_IMPORTANCE, "SST-2", 0.5, MTF)["verdict"] == "supported"
    assert one(v, COMPARABLE, "SST-2", 0.75, MTF)["verdict"] == "supported"


def test_a_full_model_still_improving_blocks_both_regimes():
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD)}, curves={("SST-2", 2, "none", 0.0): STALLED}), cfg())
    for claim in (COMPARABLE, VS_IMPORTANCE, RANDOM):
        for regime in (MTF, FTM):
            r = one(v, claim, "SST-2", 0.75 if claim == COMPARABLE else 0.5, regime)
            assert r["verdict"] == "not testable" and "full model seed 2 of SST-2 seed 2" in r["reason"], r["reason"]


def test_above_chance_gate_both_branches():
    v = study.verdicts(cells({"SST-2": (0.53, 0.5, GOOD), "STS-B": (0.8, 0.0, GOOD)}), cfg())
    r = one(v, COMPARABLE, "SST-2", 0.75, FTM)
    assert r["verdict"] == "not testable" and "not above chance by 0.05" in r["reason"]
    assert one(v, COMPARABLE, "STS-B", 0.75, FTM)["verdict"] == "contradicted"
    pooled = one(v, COMPARABLE, "all (SST-2, STS-B)", 0.75, FTM)
    assert pooled["verdict"] == "not testable" and "fewer than 2 tasks testable" in pooled["reason"]


def test_pooled_when_tasks_agree_never_over_a_task_decided_otherwise():
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD), "STS-B": (0.8, 0.0, GOOD)}), cfg())
    pooled = one(v, COMPARABLE, "all (SST-2, STS-B)", 0.75, MTF)
    assert pooled["verdict"] == "supported" and pooled["n_units"] == 10 and pooled["margin"] == pytest.approx(0.1)
    worse = {**GOOD, (MTF, "zero_shot", 0.75): 0.1}
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD), "STS-B": (0.8, 0.0, worse)}), cfg())
    assert one(v, COMPARABLE, "STS-B", 0.75, MTF)["verdict"] == "contradicted"
    pooled = one(v, COMPARABLE, "all (SST-2, STS-B)", 0.75, MTF)
    assert pooled["verdict"] == "inconclusive"  # a task decided each way: never the pool's word over a task
    # tested and in the Holm family (the family is fixed by the design), its word withheld
    assert np.isfinite(pooled["p_adjusted"]) and len(claims.row_tests(pooled)) == 2
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
    assert set(primary["semantics"]) == {"zero", "uniform"} and set(primary["claim_id"]) == set(RULE)
    # each tested row: its rule's tests, its p / p_adjusted those of the test that decided it
    for i in ft["row"].unique():
        r = v.loc[i]
        words = sorted(t.word for t in claims.row_tests(r))
        rule = RULE[r["claim_id"]]
        assert words == (["contradicted", "contradicted", "supported"] if rule.kind == "equivalence"
                         else ["contradicted", "supported"]), (r["claim_id"], words)
        deciding = [t for t in claims.row_tests(r) if t.text() == r["p_test"]]
        assert len(deciding) == 1 and (r["p"], r["p_adjusted"]) == (deciding[0].p, deciding[0].p_adjusted)


def test_zero_shot_masks_beside_the_verdicts():
    table = cells({"SST-2": (0.8, 0.5, GOOD), "STS-B": (0.8, 0.0, GOOD)})
    zm = study.zero_shot_masks(table)
    assert len(zm) == 2 * 4  # per semantics x (mtf 50%, mtf 75%, ftm 50%, ftm 75%)
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
    """Every claim takes the task-score margin of headprune_utils.analysis.margins (0.1 x (full - chance)); no study knob."""
    from headprune_utils.studies.config import ParameterError, validate

    base = dict(model=str(tiny_model_dir), tasks=["SST-2"], seeds=[0], fractions=[0.5], device="cpu",
                data_dir=str(tiny_glue_root), allow_hub=False)
    with pytest.raises(ParameterError, match="unknown parameter.*'margin_share'"):
        validate(study.ZeroShotPruningConfig, {**base, "margin_share": 0.1})
    assert not hasattr(validate(study.ZeroShotPruningConfig, base), "margin_share")
    margined = [c.id for c in zsc.CLAIMS]
    assert all(RULE[cid].margin is margins.TASK_SCORE for cid in margined)
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD), "STS-B": (0.9, 0.0, GOOD)}), cfg())
    for task, headroom in (("SST-2", 0.8 - 0.5), ("STS-B", 0.9 - 0.0)):
        for cid in margined:
            r = one(v, cid, task, 0.75 if cid == COMPARABLE else 0.5, FTM)
            assert r["margin"] == pytest.approx(margins.SHARE * headroom) and "0.1 x (full - chance)" in r["test"]


def test_each_semantics_is_decided_on_its_own_cells_primary_is_the_papers():
    """Zero-shot pruning holds up under zero (Bian et al.'s, primary) and not under uniform (sensitivity); the
    Budhraja reference claim is primary under uniform. Nothing is pooled over the semantics."""
    bad = {**GOOD, (MTF, "zero_shot", 0.5): 0.1, (MTF, "random", 0.5): 0.1, (MTF, "zero_shot", 0.75): 0.1}
    table = pd.concat([cells({"SST-2": (0.8, 0.5, GOOD)}, ablations=("zero",)),
                       cells({"SST-2": (0.8, 0.5, bad)}, ablations=("uniform",))], ignore_index=True)
    v = study.verdicts(table, cfg())
    claims.validate(v)
    # primary: the claim's own semantics in its own protocol (Bian's and Budhraja's: mask, then fine-tune)
    own_protocol = np.array([DECIDED_IN[c] == "" or s.endswith(study.REGIME_NAMES[DECIDED_IN[c]])
                             for c, s in zip(v["claim_id"], v["setting"])])
    assert ((v["analysis"] == "primary") == ((v["semantics"] == v["claim_id"].map(OWN)) & own_protocol)).all()
    r = one(v, COMPARABLE, "SST-2", 0.75, MTF)
    assert (r["semantics"], r["verdict"]) == ("zero", "supported")
    assert one(v, COMPARABLE, "SST-2", 0.75, MTF, "uniform")["verdict"] == "contradicted"
    b = one(v, RANDOM, "SST-2", 0.5, MTF)
    assert (b["semantics"], b["verdict"]) == ("uniform", "contradicted")
    assert one(v, RANDOM, "SST-2", 0.5, MTF, "zero")["verdict"] == "supported"
    assert one(v, COMPARABLE, "SST-2", 0.75, MTF)["n_units"] == len(JITTER)  # the seeds of one semantics, not both
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
    """Uniform ran evaluation-only cells only: no uniform mask-then-fine-tune row measured, and the uniform rows'
    gates come from the uniform cells. The Budhraja reference claim (uniform, decided in mask-then-fine-tune) keeps
    one primary row, not testable for want of its protocol; its fine-tune-then-mask rows are beside it."""
    table = cells({"SST-2": (0.8, 0.5, GOOD)})
    table = table[~((table["ablation"] == "uniform") & (table["regime"] == MTF))]
    v = study.verdicts(table, cfg(finetune_ablations=["zero"]))
    uni = v[v["semantics"] == "uniform"]
    mtf = uni[uni["setting"].str.endswith(study.REGIME_NAMES[MTF])]
    assert list(mtf["claim_id"]) == [RANDOM] and list(mtf["analysis"]) == ["primary"]
    assert mtf["verdict"].iloc[0] == "not testable" and (mtf["n_units"] == 0).all()
    assert "in Budhraja et al. 2020's protocol (mask, then fine-tune) under the uniform" in mtf["reason"].iloc[0]
    assert one(v, RANDOM, "SST-2", 0.5, FTM)["verdict"] == "contradicted"  # beside it: fine-tune-then-mask
    assert one(v, COMPARABLE, "SST-2", 0.75, MTF)["verdict"] == "supported"  # zero: its own fine-tuned models


# ------------------------------------------------------------------------------------------ claims as data

def test_every_claim_is_declared_as_data_with_a_rule_gates_and_a_figure_the_study_writes():
    written = set(re.findall(r'out\.figure\("(\w+)"', "".join(
        "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code")))
    assert {"score_by_method", "contrasts"} <= written
    assert study.STUDY.claims is zsc.CLAIMS
    for c in zsc.CLAIMS:
        assert isinstance(c, claims.Claim) and isinstance(c.rule, claims.RULES), c.id
        assert c.gates and all(isinstance(g, claims.Gate) for g in c.gates), c.id
        assert c.figure in written, (c.id, c.figure)
        assert c.measure in {x.name for x in analysis.CONTRASTS} and c.metric and c.regime and c.note
        assert "0.1 x (full - chance)" not in c.metric  # the margin renders itself (the rule), not the metric
        assert "above chance by more than 0.05" in c.precondition
        assert "reached the plateau of its held-out score" in c.precondition
    # the one zero-shot mask: said in every zero-shot claim's note; against random masks, paired per model
    for cid in (COMPARABLE, VS_RANDOM, VS_IMPORTANCE):
        assert "n = 1" in next(c for c in zsc.CLAIMS if c.id == cid).note
    assert isinstance(RULE[VS_RANDOM], claims.NonInferiority) and RULE[VS_RANDOM].direction == "greater"
    assert isinstance(RULE[COMPARABLE], claims.NonInferiority) and isinstance(RULE[VS_IMPORTANCE], claims.Equivalence)


def test_the_convergence_evidence_stands_behind_each_fine_tuned_model():
    """Every model behind a paired contrast carries its fine-tuned model's unit (task, seed); the full models come
    from every semantics."""
    t = cells({"SST-2": (0.8, 0.5, GOOD)})
    sub = t[t["ablation"] == "zero"]
    both = analysis.convergence_evidence(t, sub, "zero_shot", "random")
    assert set(both["unit"]) == {("SST-2", s) for s in range(5)} and len(both) == 5 + 2 * 10  # shares 50%, 75%
    assert set(both.loc[both["setting"] == "", "model"]) == {f"full model seed {s}" for s in range(5)}
    assert set(both.loc[both["setting"] != "", "setting"]) == {"50% of heads pruned; mask, then fine-tune",
                                                               "75% of heads pruned; mask, then fine-tune"}
    pair = analysis.convergence_evidence(t, sub, "zero_shot", "none")
    assert set(pair["unit"]) == {("SST-2", s) for s in range(5)} and len(pair) == 5 + 2 * 5 and pair["reached"].all()


def test_an_absent_method_is_not_testable_through_evaluate_with_its_reason():
    """A table lacking random masks: the claims against them get one not-testable row (Measurement.absent), no
    test."""
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD)}, methods=("zero_shot", "least_important")), cfg())
    for cid in (VS_RANDOM, RANDOM):
        r = v[(v["claim_id"] == cid) & (v["semantics"] == OWN[cid])]
        assert len(r) == 1 and r.iloc[0]["verdict"] == "not testable" and r.iloc[0]["n_units"] == 0
        assert r.iloc[0]["reason"].startswith("no paired cells of ") and " random " in r.iloc[0]["reason"]
        assert (r.iloc[0]["tests"], r.iloc[0]["unit_values"]) == ("[]", "[]")
    claims.validate(v)


# ------------------------------------------------- the one zero-shot mask against random masks (paired, per model)

SEEDS = range(5)


def vs_random_cells(zero_shot, random, tasks=("SST-2",), full=0.8) -> pd.DataFrame:
    """Fine-tune-then-mask cells at 50% (zero semantics): the full models (``full``), the one zero-shot mask scoring
    ``zero_shot[s]`` on seed s's model, and seed s's own random masks scoring ``random[s]`` (a list: one cell per
    random mask of that model, the committed run's layout being one). The full models' fine-tuning (a
    mask-then-fine-tune cell of no mask) stores its held-out curve, which reached the plateau."""
    rows = []
    for task in tasks:
        at = {"task": task, "regime": FTM, "ablation": "zero", "chance": 0.5, "history": []}
        for s in SEEDS:
            rows.append({**at, "regime": MTF, "strategy": "none", "budget": 0.0, "seed": s, "score": full,
                         "mask": "1" * 12, "history": CONVERGED})
            rows.append({**at, "strategy": "none", "budget": 0.0, "seed": s, "score": full, "mask": "1" * 12})
            rows.append({**at, "strategy": "zero_shot", "budget": 0.5, "seed": s, "score": zero_shot[s],
                         "mask": "111111000000"})
            for k, r in enumerate(random[s]):
                rows.append({**at, "strategy": "random", "budget": 0.5, "seed": s, "score": r,
                             "mask": f"{s:02d}{k:02d}10101010"})
    return pd.DataFrame(rows)


def vs_random_only(table) -> pd.DataFrame:
    """The claim alone (its own Holm family)."""
    return analysis.claim_verdicts(table, cfg(ablations=["zero"], finetune_ablations=["zero"]),
                                   [c for c in zsc.CLAIMS if c.id == VS_RANDOM])


def test_against_random_masks_the_one_mask_is_paired_with_each_models_own_random_mask():
    """The rule for a fixed mask against random masks: per fine-tuned model, the zero-shot score minus that model's
    own random mask's (the committed layout: one per model), non-inferiority over the models within 0.1 x
    (full - chance); the unit is the fine-tuned model (task, seed), as study 2's middle layers against random."""
    zs = [0.75, 0.76, 0.74, 0.75, 0.77]
    rnd = [[0.70], [0.72], [0.71], [0.74], [0.73]]
    v = vs_random_only(vs_random_cells(zs, rnd))
    claims.validate(v)
    r = one(v, VS_RANDOM, "SST-2", 0.5, FTM)
    diffs = [z - x[0] for z, x in zip(zs, rnd)]
    assert json.loads(r["unit_values"]) == pytest.approx(diffs) and r["n_units"] == 5
    assert r["unit"] == claims.DEFAULT_UNIT and r["test"].startswith("non-inferiority (greater)")
    assert r["effect"] == pytest.approx(np.mean(diffs)) and r["margin"] == pytest.approx(0.1 * (0.8 - 0.5))
    p = stats.t_test_p(np.array(diffs), -0.03, "greater")
    assert r["verdict"] == "supported" and r["p"] == pytest.approx(p) and r["p_adjusted"] == pytest.approx(2 * p)


def test_several_random_masks_of_one_model_are_averaged_within_it():
    zs = [0.75, 0.76, 0.74, 0.75, 0.77]
    rnd = [[0.70, 0.80], [0.72, 0.70], [0.71, 0.75], [0.74, 0.60], [0.73, 0.73]]
    r = one(vs_random_only(vs_random_cells(zs, rnd)), VS_RANDOM, "SST-2", 0.5, FTM)
    assert json.loads(r["unit_values"]) == pytest.approx([z - np.mean(x) for z, x in zip(zs, rnd)])
    assert r["n_units"] == 5


def test_a_zero_shot_mask_worse_than_random_masks_by_more_than_the_margin_is_contradicted():
    zs = [0.60, 0.62, 0.61, 0.63, 0.60]
    rnd = [[0.70], [0.72], [0.71], [0.74], [0.73]]
    r = one(vs_random_only(vs_random_cells(zs, rnd)), VS_RANDOM, "SST-2", 0.5, FTM)
    assert r["verdict"] == "contradicted" and r["effect"] == pytest.approx(-0.108)
    # within the margin either way, with the models' spread: inconclusive
    zs = [0.70, 0.75, 0.66, 0.77, 0.70]
    r = one(vs_random_only(vs_random_cells(zs, rnd)), VS_RANDOM, "SST-2", 0.5, FTM)
    assert r["verdict"] == "inconclusive", r["reason"]


def test_tasks_that_agree_are_pooled_for_the_claim_against_random_masks():
    zs = [0.75, 0.76, 0.74, 0.75, 0.77]
    rnd = [[0.70], [0.72], [0.71], [0.74], [0.73]]
    v = vs_random_only(vs_random_cells(zs, rnd, tasks=("SST-2", "MRPC")))
    pooled = one(v, VS_RANDOM, "all (MRPC, SST-2)", 0.5, FTM)
    # 5 seeds, not 10 models: seed s's random mask is the same on both tasks (claims.SEED_SHARED_MASKS)
    assert pooled["n_units"] == 5 and pooled["verdict"] == "supported" and pooled["unit"].startswith("seed")


def test_the_claim_against_random_masks_passes_the_above_chance_gate_on_the_models_full_scores():
    zs = [0.75, 0.76, 0.74, 0.75, 0.77]
    rnd = [[0.70], [0.72], [0.71], [0.74], [0.73]]
    r = one(vs_random_only(vs_random_cells(zs, rnd, full=0.52)), VS_RANDOM, "SST-2", 0.5, FTM)
    assert r["verdict"] == "not testable" and "not above chance by 0.05 on SST-2" in r["reason"]


def test_most_heads_is_more_than_half_of_them():
    """``bian.zero_shot_comparable`` ("most heads"): no row at 50% or fewer in either protocol; a task fine-tuned after
    masking only at 50% gets a not-testable primary row naming the shares run (outside the Holm family), while the
    other claims are decided at 50% as before; the rows at 75% stay."""
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD), "STS-B": (0.8, 0.0, GOOD)}), cfg())
    comp = v[v["claim_id"] == COMPARABLE]
    assert not comp["setting"].str.startswith(("25%", "50%")).any() and comp["setting"].str.startswith("75%").any()
    assert one(v, VS_IMPORTANCE, "SST-2", 0.5, MTF)["verdict"] == "supported"
    half = study.verdicts(cells({"SST-2": (0.8, 0.5, GOOD), "STS-B": (0.8, 0.0, GOOD)}, mtf_budgets=(0.5,)), cfg())
    claims.validate(half)
    for task in ("SST-2", "STS-B"):
        r = half[(half["claim_id"] == COMPARABLE) & (half["task"] == task) & (half["semantics"] == "zero")
                 & (half["analysis"] == "primary")]
        assert len(r) == 1 and r.iloc[0]["verdict"] == "not testable" and r.iloc[0]["n_units"] == 0
        assert f"was run on {task} with 50% of the heads pruned only" in r.iloc[0]["reason"]
        assert "more than 50%" in r.iloc[0]["reason"] and pd.isna(r.iloc[0]["p_adjusted"])
        assert one(half, COMPARABLE, task, 0.75, FTM)["analysis"] == "sensitivity"
    assert one(half, VS_IMPORTANCE, "SST-2", 0.5, MTF)["verdict"] == "supported"
