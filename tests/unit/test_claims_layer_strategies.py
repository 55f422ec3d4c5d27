"""Study 2's claims on hand-made tables: the claims declared once as data (layer_strategies_claims), each claim's
wiring in both directions, the gates' both branches (above chance, trained to the plateau, identical masks),
absent measurements, per task then pooled, the model as the unit, no NaN in the rendered verdicts, and each claim
decided under each ablation semantics apart (primary = its paper's)."""
from __future__ import annotations

import re
from dataclasses import replace

import nbformat
import numpy as np
import pandas as pd
import pytest

from headprune_utils.analysis import claims, margins, preconditions
from headprune_utils.studies.config import ParameterError, validate
from headprune_utils.store.paths import notebooks_dir
from headprune_utils.studies import layer_strategies as study
from headprune_utils.studies import layer_strategies_analysis as analysis
from headprune_utils.studies import layer_strategies_claims

SEEDS = range(5)
STRATEGIES = ("random", "top", "bottom", "middle", "top_bottom", "consecutive", "spread", "least_important",
              "most_important")
SUPPORTING = {"top_bottom": 0.1, "spread": 0.1, "least_important": 0.1}  # every other strategy = random
OPPOSING = {"top": -0.1, "top_bottom": -0.3, "middle": -0.1, "spread": -0.1, "most_important": -0.1,
            "least_important": -0.1}
FTM, MTF = "finetune_then_mask", "mask_then_finetune"
TEXT = {c.id: c.text for c in study.STUDY.claims}
OWN = {c.id: c.semantics for c in study.STUDY.claims}
DECIDED_IN = {c.id: c.decided_in for c in study.STUDY.claims}


# held-out curves (one record per epoch, the kept one selected): best at epoch 2 of 4 reached the plateau (patience
# 2); best at the last epoch of the cap did not
CONVERGED = [{"epoch": 1}, {"epoch": 2, "selected": True}, {"epoch": 3}, {"epoch": 4}]
STALLED = [{"epoch": 1}, {"epoch": 2}, {"epoch": 3, "selected": True}]


def make_table(effects=None, per_task=None, full=None, adapt=None, strategies=STRATEGIES, same=(),
               ablations=("uniform", "zero"), curves=None) -> pd.DataFrame:
    """Tasks A and B (chance 0.5), 5 seeds, budgets 25%/50% (fine-tune, then mask) and 50% (mask, then fine-tune).
    Full model = ``full[task]`` + a seed jitter (SD 0.0158); random = full - 0.1; strategy s = random +
    ``effects[s]`` (or ``per_task[task][s]``) + small noise. Mask-then-fine-tune scores = those + ``adapt[task]``.
    ``same``: (strategy, its twin, budget, seeds) whose mask is made identical to the twin's. The same cells under
    each semantics of ``ablations`` (identical scores). Every mask-then-fine-tune cell stores a held-out curve that
    reached the plateau unless ``curves`` gives ``(task, seed, strategy)`` another (the full model: ``none``); the
    evaluation-only cells store none (as the study does)."""
    rng = np.random.default_rng(0)
    curves = curves or {}

    def curve(regime, task, seed, strategy):
        return curves.get((task, seed, strategy), CONVERGED) if regime == MTF else []

    full = full or {"A": 0.8, "B": 0.85}
    adapt = adapt or {"A": 0.05, "B": 0.05}
    rows = []
    for task in ("A", "B"):
        eff = (per_task or {}).get(task, effects or {})
        for seed in SEEDS:
            f = full[task] + 0.01 * (seed - 2)
            for regime, budgets in ((FTM, (0.25, 0.5)), (MTF, (0.5,))):
                rows.append({"task": task, "regime": regime, "strategy": "none", "budget": 0.0, "seed": seed,
                             "score": f, "chance": 0.5, "metric": "accuracy", "mask": "full", "n_heads_total": 72,
                             "history": curve(regime, task, seed, "none")})
                for budget in budgets:
                    for s in strategies:
                        score = f - 0.1 + eff.get(s, 0.0) + rng.normal(0, 0.002) + (adapt[task] if regime == MTF else 0)
                        mask = f"{s}-{budget}-{seed}"
                        for a, twin, b, seeds in same:
                            if s == a and budget == b and seed in seeds:
                                mask = f"{twin}-{budget}-{seed}"
                        rows.append({"task": task, "regime": regime, "strategy": s, "budget": budget, "seed": seed,
                                     "score": score, "chance": 0.5, "metric": "accuracy", "mask": mask,
                                     "n_heads_total": 72, "history": curve(regime, task, seed, s)})
    one = pd.DataFrame(rows)
    return pd.concat([one.assign(ablation=a) for a in ablations], ignore_index=True)


def verdicts(table, **cfg):
    v = study.verdicts(table, study.LayerStrategiesConfig(**cfg))
    assert tuple(v.columns) == claims.COLUMNS
    claims.validate(v)
    text = claims.render(v)
    assert not re.search(r"\bnan\b", text, flags=re.I), "no NaN in the rendered verdicts"
    assert not re.search(r"\bnan\b", v.astype(str).drop(columns=["effect", "ci_low", "ci_high", "p", "p_adjusted",
                                                                   "margin"]).to_string(), flags=re.I)
    return v


def row(v, claim_id, task, regime=FTM, sem=None):
    """The claim's one row for task x regime under ``sem`` (default: its own paper's semantics, the primary row)."""
    sem = sem or OWN[claim_id]
    r = v[(v["claim_id"] == claim_id) & (v["task"] == task) & (v["semantics"] == sem)
          & v["setting"].str.startswith(study.REGIME_NAMES[regime])]
    assert len(r) == 1, (claim_id, task, regime, sem)
    own = sem == OWN[claim_id] and DECIDED_IN[claim_id] in ("", regime)  # its paper's semantics and protocol
    assert r["analysis"].iloc[0] == ("primary" if own else "sensitivity")
    return r.iloc[0]


def test_each_paper_s_claims_are_decided_in_its_own_protocol():
    """Budhraja et al. mask, then fine-tune; Michel et al. mask a fine-tuned model: each claim's primary rows are
    its paper's protocol under its paper's semantics, the other protocol's rows a sensitivity analysis in a Holm
    family of their semantics (never the primary one); a task without the paper's protocol gives a primary row
    saying so (not testable)."""
    assert {DECIDED_IN[c] for c in DECIDED_IN if c.startswith("budhraja.")} == {MTF}
    assert DECIDED_IN["michel.least_important_first"] == FTM == DECIDED_IN["ours.most_important_not_worse"]
    v = verdicts(make_table(SUPPORTING))
    prim = v[(v["analysis"] == "primary") & v["claim_id"].str.startswith("budhraja.")]
    assert len(prim) and prim["setting"].str.startswith(study.REGIME_NAMES[MTF]).all()
    beside = v[(v["claim_id"] == "budhraja.avoid_middle") & (v["semantics"] == "uniform")
               & v["setting"].str.startswith(study.REGIME_NAMES[FTM])]
    assert len(beside) == 3 and set(beside["analysis"]) == {"sensitivity"}
    assert set(beside["verdict"]) == {"supported"}, "reported beside the primary rows, decided in their own family"
    fam = claims.family_tests(v)
    primary_families = set(fam.loc[fam["row"].isin(prim.index), "family"])
    assert primary_families == {"layer_strategies|primary|"}
    assert not set(fam.loc[fam["row"].isin(beside.index), "family"]) & primary_families
    ftm_only = make_table(SUPPORTING)
    ftm_only = ftm_only[(ftm_only["regime"] == FTM) | (ftm_only["strategy"] == "none")]  # full models: curves
    v = verdicts(ftm_only)
    r = v[(v["claim_id"] == "budhraja.avoid_middle") & (v["analysis"] == "primary")]
    assert list(r["task"]) == ["A", "B"] and set(r["verdict"]) == {"not testable"}, "one per task, never pooled"
    assert "in Budhraja et al. 2020's protocol (mask, then fine-tune) under the uniform semantics" in r["reason"].iloc[0]
    m = v[(v["claim_id"] == "michel.least_important_first") & (v["analysis"] == "primary")]
    assert len(m) == 3 and set(m["verdict"]) == {"supported"}, "Michel et al.'s own protocol was run"
    # the paper's protocol run on task A only (as standard's finetune_tasks): B's primary row says it was not
    t = make_table(SUPPORTING)
    v = verdicts(t[(t["task"] == "A") | (t["regime"] == FTM) | (t["strategy"] == "none")])
    r = v[(v["claim_id"] == "budhraja.avoid_middle") & (v["analysis"] == "primary")]
    assert list(r["task"]) == ["A", "B"] and list(r["verdict"]) == ["supported", "not testable"]
    assert r["reason"].iloc[1].endswith("(mask, then fine-tune) under the uniform semantics on B")
    typo = replace(next(c for c in study.STUDY.claims if c.id == "budhraja.avoid_middle"), decided_in="mask_first")
    with pytest.raises(ValueError, match="claim budhraja.avoid_middle: decided_in='mask_first' is none of"):
        claims.in_own_protocol(typo, [], "uniform", study.REGIME_NAMES)


POOLED = "all (A, B)"


@pytest.mark.parametrize("claim_id, yes, no", [
    ("budhraja.location_no_preference", "supported", "contradicted"),
    ("budhraja.avoid_middle", "supported", "contradicted"),
    ("budhraja.avoid_consecutive", "supported", "contradicted"),
    ("budhraja.important_location_not_worse", "supported", "contradicted"),
    ("ours.most_important_not_worse", "supported", "contradicted"),
    ("michel.least_important_first", "supported", "contradicted"),
])
def test_each_claim_in_both_directions_in_both_regimes(claim_id, yes, no):
    for effects, expected in ((SUPPORTING, yes), (OPPOSING, no)):
        v = verdicts(make_table(effects))
        for regime in (FTM, MTF):
            for task in ("A", "B", POOLED):
                r = row(v, claim_id, task, regime)
                assert r["verdict"] == expected, (claim_id, task, regime, r["reason"])
                assert r["claim"] == TEXT[claim_id] and r["semantics"] == OWN[claim_id]
                other = "zero" if OWN[claim_id] == "uniform" else "uniform"
                assert row(v, claim_id, task, regime, other)["verdict"] == expected  # the same cells: same verdict


def test_the_unit_is_the_model_and_budgets_are_averaged_within_it():
    t = make_table({"top_bottom": 0.1})
    v = verdicts(t)
    r = row(v, "budhraja.avoid_middle", "A")
    assert r["n_units"] == 5 and r["unit"] == "model (task x seed)"  # 5 models, not 10 (budget x seed) pairs
    a = t[(t["task"] == "A") & (t["regime"] == FTM)].pivot_table(index=["seed", "budget"], columns="strategy",
                                                                 values="score")
    per_model = (a["top_bottom"] - a["middle"]).groupby(level="seed").mean()
    assert r["effect"] == pytest.approx(per_model.mean())
    _, lo, hi = claims.stats.t_interval(per_model.to_numpy(), 0.95)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((lo, hi))
    pooled = row(v, "budhraja.avoid_middle", POOLED)
    # 5 seeds, not 10 models: seed s's masks are the same on both tasks (claims.SEED_SHARED_MASKS)
    assert pooled["n_units"] == 5 and "(full - chance)" in pooled["test"] and pooled["unit"].startswith("seed")


def test_every_margin_is_a_tenth_of_full_minus_chance_and_the_study_has_no_margin_knob():
    t = make_table(SUPPORTING)
    v = verdicts(t)
    full = t[t["strategy"] == "none"].groupby("task")["score"].mean()  # per task, over seeds (and regimes)
    assert full.to_dict() == pytest.approx({"A": 0.8, "B": 0.85})
    for claim_id in TEXT:  # every claim, superiority ones too (their "not supported" test)
        for task in ("A", "B"):
            for regime in (FTM, MTF):
                r = row(v, claim_id, task, regime)
                assert r["margin"] == pytest.approx(0.1 * (full[task] - 0.5)), (claim_id, task)
                assert f"margin: {r['margin']:.3g} = 0.1 x (full - chance)" in r["test"]
        pooled = row(v, claim_id, POOLED)  # effects / (full - chance): the smallest of the tasks' margins, 0.1
        assert pooled["margin"] == pytest.approx(0.1)
        assert "smallest of the tasks' margins / (full - chance)" in pooled["test"]
    assert row(v, "budhraja.location_no_preference", "A")["test"].startswith("equivalence")
    assert row(v, "budhraja.important_location_not_worse", "A")["test"].startswith("non-inferiority")
    assert row(v, "budhraja.avoid_middle", "A")["test"].startswith("superiority (greater)")
    # one policy (margins.TASK_SCORE), declared once: no per-study margin parameter, nor in the fingerprint's drop-list
    with pytest.raises(ParameterError, match="unknown parameter"):
        validate(study.LayerStrategiesConfig, {"equivalence_margin": 2.0})


def test_the_margin_follows_the_tasks_headroom():
    """top - bottom = +0.02 on every model: inside A's margin when the full model scores 0.8 (0.1 x 0.3 = 0.03),
    outside it when it scores 0.6 (0.1 x 0.1 = 0.01)."""
    wide = row(verdicts(make_table({"top": 0.02})), "budhraja.location_no_preference", "A")
    assert wide["margin"] == pytest.approx(0.03) and wide["verdict"] == "supported"
    narrow = row(verdicts(make_table({"top": 0.02}, full={"A": 0.6, "B": 0.85})), "budhraja.location_no_preference",
                 "A")
    assert narrow["margin"] == pytest.approx(0.01) and narrow["verdict"] == "contradicted"
    assert narrow["effect"] == pytest.approx(wide["effect"])


@pytest.mark.parametrize("claim_id", ["budhraja.avoid_middle", "budhraja.avoid_consecutive",
                                      "michel.least_important_first"])
def test_a_beats_claim_with_no_effect_is_not_supported(claim_id):
    """Every strategy as good as random: the "beats" claims' effect is shown below the margin (not supported), in
    both regimes; with an effect (SUPPORTING) the same rows are supported."""
    v = verdicts(make_table({}))
    for regime in (FTM, MTF):
        for task in ("A", "B"):
            r = row(v, claim_id, task, regime)
            assert r["verdict"] == "not supported", (claim_id, task, regime, r["reason"])
            assert r["p_test"].startswith("not supported: effect < +0.03")
            assert abs(r["effect"]) < 0.005 and r["ci_high"] < r["margin"]
    yes = verdicts(make_table(SUPPORTING))
    assert row(yes, claim_id, "A")["verdict"] == "supported"


def test_tasks_decided_each_way_give_an_inconclusive_pooled_row_and_per_task_verdicts():
    v = verdicts(make_table(per_task={"A": {"top_bottom": 0.1}, "B": {"top_bottom": -0.1}}))
    assert row(v, "budhraja.avoid_middle", "A")["verdict"] == "supported"
    assert row(v, "budhraja.avoid_middle", "B")["verdict"] == "contradicted"
    pooled = row(v, "budhraja.avoid_middle", POOLED)
    assert pooled["verdict"] == "inconclusive"  # a task decided each way: never the pool's word over a task


def test_gate_above_chance_both_branches():
    v = verdicts(make_table(SUPPORTING, full={"A": 0.8, "B": 0.53}))
    assert row(v, "budhraja.avoid_middle", "A")["verdict"] == "supported"
    b = row(v, "budhraja.avoid_middle", "B")
    assert b["verdict"] == "not testable" and "not above chance by 0.05 on B" in b["reason"]
    pooled = row(v, "budhraja.avoid_middle", POOLED)
    assert pooled["verdict"] == "not testable" and "fewer than 2 tasks" in pooled["reason"]


def test_gate_converged_both_branches_masked_models_on_their_contrasts_only():
    """Seed 3's 'middle' model on B stopped at its epoch cap still improving: B's mask-then-fine-tune rows of the
    contrasts with 'middle' are not testable, naming it; the other contrasts and the fine-tune-then-mask rows (no
    masked model fine-tuned) are decided; A is untouched."""
    v = verdicts(make_table(SUPPORTING, curves={("B", 3, "middle"): STALLED}))
    with_middle = {"budhraja.avoid_middle", "budhraja.important_location_not_worse"}
    for claim_id in TEXT:
        assert row(v, claim_id, "A", MTF)["verdict"] == "supported"
        b = row(v, claim_id, "B", MTF)
        if claim_id in with_middle:
            assert b["verdict"] == "not testable"
            assert b["reason"].startswith("not trained to the plateau: 1 of 15 fine-tuned models on B were still "
                                          "improving"), b["reason"]
            assert "middle 50% mask of B seed 3 (best epoch 3 of 3)" in b["reason"]
        else:
            assert b["verdict"] == "supported", (claim_id, b["reason"])
        assert row(v, claim_id, "B", FTM)["verdict"] == "supported"


def test_gate_converged_a_full_model_blocks_both_regimes():
    v = verdicts(make_table(SUPPORTING, curves={("A", 0, "none"): STALLED}))
    for claim_id in TEXT:
        for regime in (FTM, MTF):
            a = row(v, claim_id, "A", regime)
            assert a["verdict"] == "not testable" and "full model of A seed 0" in a["reason"], (claim_id, regime)
        assert row(v, claim_id, "B", FTM)["verdict"] == "supported"


def test_identical_masks_are_reported_once_and_never_tested_against_each_other():
    # consecutive pruned the same mask as spread in every pair: the contrast is degenerate
    everywhere = [("consecutive", "spread", b, SEEDS) for b in (0.25, 0.5)]
    t = make_table(SUPPORTING, same=everywhere)
    same = study.identical_masks(t)
    assert set(same["strategies"]) == {"consecutive = spread"}
    assert len(same) == 6, "one line per regime x semantics x budget x group of names"  # (ftm 25%, ftm 50%, mtf 50%) x 2
    assert same.groupby("ablation").size().to_dict() == {"uniform": 3, "zero": 3}
    assert (same["tasks"] == "A, B").all() and "'avoid consecutive layers'" in same["note"].iloc[0]
    v = verdicts(t)
    for task in ("A", "B", POOLED):
        r = row(v, "budhraja.avoid_consecutive", task)
        assert r["verdict"] == "not testable"
    r = row(v, "budhraja.avoid_consecutive", "A")
    assert r["reason"].startswith("degenerate contrast: spread and consecutive pruned identical masks in 10 of 10")
    assert "not tested against itself" in r["reason"]
    assert row(v, "budhraja.avoid_middle", "A")["verdict"] == "supported", "other contrasts are untouched"
    # the descriptive contrasts leave the pairs out too
    c = study.contrasts(t)
    assert "avoid consecutive layers" not in set(c["contrast"])


def test_partly_identical_masks_are_left_out_and_said_in_the_reason():
    t = make_table(SUPPORTING, same=[("consecutive", "spread", 0.25, (0, 1))])
    v = verdicts(t)
    r = row(v, "budhraja.avoid_consecutive", "A")
    assert r["verdict"] == "supported" and r["n_units"] == 5
    assert "identical masks in 2 of 10 pairs (budgets 25%; seeds 0, 1), left out" in r["reason"]
    kept = t[(t["task"] == "A") & (t["regime"] == FTM)].pivot_table(index=["seed", "budget"], columns="strategy",
                                                                    values="score")
    d = (kept["spread"] - kept["consecutive"]).drop([(0, 0.25), (1, 0.25)])
    assert r["effect"] == pytest.approx(d.groupby(level="seed").mean().mean())
    assert "left out" in row(v, "budhraja.avoid_consecutive", POOLED)["reason"]
    c = study.contrasts(t)
    all_a = c[(c["contrast"] == "avoid consecutive layers") & (c["task"] == "A") & (c["regime"] == FTM)
              & (c["budget"] == "all") & (c["ablation"] == "uniform")].iloc[0]
    assert all_a["n_same_mask"] == 2 and all_a["mean_diff"] == pytest.approx(r["effect"])


def test_a_claim_whose_strategies_did_not_run_is_not_testable_once():
    v = verdicts(make_table(SUPPORTING, strategies=STRATEGIES[:7]))
    for claim_id in ("ours.most_important_not_worse", "michel.least_important_first"):
        r = v[v["claim_id"] == claim_id]
        assert len(r) == 1 and r["verdict"].iloc[0] == "not testable"
        assert "did not both run" in r["reason"].iloc[0]
    assert row(v, "budhraja.avoid_middle", "A")["verdict"] == "supported"


def test_one_seed_is_not_testable_and_holm_runs_over_the_whole_family():
    t = make_table(SUPPORTING)
    v = verdicts(t[t["seed"] == 0])
    assert (v["verdict"] == "not testable").all()
    assert v["reason"].str.contains("needs at least 2 units").any()
    v = verdicts(t)
    # Holm families: the study's primary rows (under uniform AND zero: Budhraja's and Michel's); each sensitivity
    # semantics apart. Every test of every tested row is in its row's family, adjusted together.
    ft = claims.family_tests(v)
    rows = v.loc[ft["row"]]
    ft["expected"] = (rows["analysis"] + np.where(rows["analysis"] == "sensitivity", " " + rows["semantics"], "")
                      ).to_numpy()
    assert ft.groupby("family")["expected"].nunique().eq(1).all() and ft["family"].nunique() == 3
    assert set(ft["expected"]) == {"primary", "sensitivity uniform", "sensitivity zero"}
    assert set(rows.loc[rows["analysis"] == "primary", "semantics"]) == {"uniform", "zero"}  # one primary family
    for _, fam in ft.groupby("family"):
        np.testing.assert_allclose(fam["p_adjusted"], claims.stats.holm(fam["p"].to_numpy()))
    tested = v.index[v["tests"] != "[]"]
    assert set(ft["row"]) == set(tested) and len(ft) > len(tested), "several tests per row, all in the family"
    words = ft.groupby("row")["word"].apply(set)
    sup = v.loc[tested].index[v.loc[tested, "test"].str.startswith("superiority")]
    assert all(words[i] == {"supported", "contradicted", "not supported"} for i in sup)
    assert (v.loc[v["verdict"] == "not testable", "tests"] == "[]").all(), "not testable rows are outside the family"
    assert set(v.loc[v["analysis"] == "primary", "semantics"]) == {"uniform", "zero"}  # Budhraja's, Michel's
    assert (v["study"] == "layer_strategies").all()


def test_scale_says_when_it_is_not_the_papers_set_up():
    cfg = study.LayerStrategiesConfig()
    assert study.scale(cfg).endswith("a small-scale test, not the paper's set-up")
    assert "300 training examples x 3 epochs" in study.scale(cfg)
    paper = study.LayerStrategiesConfig(model="bert-base-uncased", train_size=None, dev_size=None, batch_size=32,
                                        lr=2e-5)
    assert "small-scale" not in study.scale(paper)
    assert "small-scale" in study.scale(study.LayerStrategiesConfig(model="bert-base-uncased", train_size=None))


def test_each_semantics_is_decided_on_its_own_cells_and_michels_primary_rows_are_zero_cells():
    """Uniform cells where least-important pruning loses, zero cells where it wins: Michel et al.'s claim (zero,
    their intervention) is supported on its primary rows and contradicted in the uniform sensitivity rows;
    Budhraja et al.'s claims (uniform) have their primary rows from the uniform cells."""
    t = pd.concat([make_table(OPPOSING, ablations=("uniform",)), make_table(SUPPORTING, ablations=("zero",))],
                  ignore_index=True)
    v = verdicts(t)
    assert set(v["analysis"]) == {"primary", "sensitivity"} and v["semantics"].isin(["uniform", "zero"]).all()
    for regime in (FTM, MTF):
        for task in ("A", "B", POOLED):
            # primary in the paper's own protocol only (row() checks the analysis: the other one is beside it)
            r = row(v, "michel.least_important_first", task, regime)
            assert (r["semantics"], r["verdict"]) == ("zero", "supported")
            assert row(v, "michel.least_important_first", task, regime, "uniform")["verdict"] == "contradicted"
            b = row(v, "budhraja.avoid_middle", task, regime)
            assert (b["semantics"], b["verdict"]) == ("uniform", "contradicted")
            assert row(v, "budhraja.avoid_middle", task, regime, "zero")["verdict"] == "supported"
    # every verdict row says which semantics it was measured under, and whether that (and its protocol) is the
    # claim's own
    code = {name: k for k, name in study.REGIME_NAMES.items()}
    own_protocol = np.array([DECIDED_IN[c] in ("", code[s.split(";")[0]]) for c, s in zip(v["claim_id"], v["setting"])])
    assert ((v["analysis"] == "primary") == ((v["semantics"] == v["claim_id"].map(OWN)) & own_protocol)).all()
    dep = claims.semantics_dependence(v)
    assert (dep.loc[dep["claim_id"] == "michel.least_important_first", "depends"] == "flips").all()
    # the descriptive tables too: one row per semantics, never pooled over them
    c = study.contrasts(t)
    per = c[(c["contrast"] == "least important vs random") & (c["budget"] == "all") & (c["task"] == "A")
            & (c["regime"] == FTM)].set_index("ablation")
    assert per.loc["zero", "mean_diff"] > 0.05 and per.loc["uniform", "mean_diff"] < -0.05
    assert (per["n_units"] == 5).all()
    s = study.summarise(t.assign(n_heads_pruned=36))
    assert set(s["ablation"]) == {"uniform", "zero"} and (s["n_seeds"] == 5).all()


def test_the_masked_models_of_a_semantics_come_from_its_own_cells():
    """A masked model stalled under zero, not under uniform: zero's mask-then-fine-tune row of that contrast is not
    testable, uniform's is decided (the full models, the same under both, converged)."""
    t = pd.concat([make_table(SUPPORTING, ablations=("uniform",)),
                   make_table(SUPPORTING, ablations=("zero",), curves={("A", 1, "top_bottom"): STALLED})],
                  ignore_index=True)
    v = verdicts(t)
    assert row(v, "budhraja.avoid_middle", "A", MTF)["verdict"] == "supported"
    z = row(v, "budhraja.avoid_middle", "A", MTF, "zero")
    assert z["verdict"] == "not testable" and "top_bottom 50% mask of A seed 1" in z["reason"]
    assert row(v, "budhraja.location_no_preference", "A", MTF, "zero")["verdict"] != "not testable"


def test_a_semantics_with_no_cells_gives_not_testable_primary_rows_only():
    """Only uniform cells ran: Michel et al.'s claim (zero) has one not-testable primary row, and its uniform rows
    are sensitivity; no zero row is invented for the Budhraja claims."""
    v = verdicts(make_table(SUPPORTING, ablations=("uniform",)))
    m = v[(v["claim_id"] == "michel.least_important_first") & (v["analysis"] == "primary")]
    assert len(m) == 1 and m["verdict"].iloc[0] == "not testable" and m["semantics"].iloc[0] == "zero"
    assert "zero semantics" in m["reason"].iloc[0]
    assert row(v, "michel.least_important_first", "A", FTM, "uniform")["verdict"] == "supported"
    assert (v.loc[v["claim_id"].str.startswith("budhraja"), "semantics"] == "uniform").all()


# ------------------------------------------------------------------------------------------ the claims as data

def test_the_claims_are_declared_once_as_data():
    """The study's claims are layer_strategies_claims.CLAIMS: claims.Claim objects with a rule and the task-score
    margin, Gate objects (the precondition is their text), the figure the notebook writes, a contrast as measure."""
    assert study.STUDY.claims is layer_strategies_claims.CLAIMS is study.CLAIMS
    nb = nbformat.read(notebooks_dir() / study.STUDY.notebook, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    contrasts = {c.name: c for c in study.CONTRASTS}
    for c in study.STUDY.claims:
        assert isinstance(c, claims.Claim) and isinstance(c.rule, claims.RULES), c.id
        assert c.margin is margins.TASK_SCORE, c.id
        assert c.gates and all(isinstance(g, claims.Gate) for g in c.gates), c.id
        assert c.figure and f'out.figure("{c.figure}"' in code, (c.id, c.figure)  # the study writes it
        assert c.measure in contrasts and c.regime and c.semantics == OWN[c.id]
        k = contrasts[c.measure]
        assert f"score({k.a}) - score({k.b})" in c.metric and "margin" not in c.metric  # the gates and rule say those
        kinds = [type(g) for g in c.gates]
        assert kinds == [preconditions.Check, preconditions.AboveChance, preconditions.Converged], c.id
        assert c.precondition.startswith("the two strategies' masks differ")
    assert {c.id: c.figure for c in study.STUDY.claims}["michel.least_important_first"] == "score_by_strategy"
    rules = {c.id: c.rule.kind for c in study.STUDY.claims}
    assert rules == {"budhraja.location_no_preference": "equivalence", "budhraja.avoid_middle": "superiority",
                     "budhraja.avoid_consecutive": "superiority", "budhraja.important_location_not_worse":
                     "non-inferiority", "ours.most_important_not_worse": "non-inferiority",
                     "michel.least_important_first": "superiority"}
    conv = layer_strategies_claims.CONVERGED
    assert conv.only == "" and conv.patience == preconditions.PATIENCE == 2  # both regimes: the full models too
    assert preconditions.AboveChance().margin == preconditions.ABOVE_CHANCE == 0.05
    for gone in ("CLAIM_RULES", "ClaimRule", "ABOVE_CHANCE_MARGIN"):  # one home: the claims module
        assert not hasattr(analysis, gone) and not hasattr(study, gone), gone


def test_the_masks_differ_gate_reads_the_contrasts_notes():
    """The study's own gate (a preconditions.Check): the measurement's reason when all its pairs were identical,
    None when only some were (those are left out and said in the reason) or none."""
    gate = layer_strategies_claims.MASKS_DIFFER
    m = claims.Measurement("A", [0.1, 0.2], [("A", 0), ("A", 1)], setting="s")
    assert gate(m, {"identical_masks": {("A", "s"): ("degenerate", "degenerate contrast: x")}}) == \
        "degenerate contrast: x"
    assert gate(m, {"identical_masks": {("A", "s"): ("partial", "note: y, left out")}}) is None
    assert gate(m, {"identical_masks": {("A", "other"): ("degenerate", "z")}}) is None
    assert gate(m, {}) is None


def test_a_claim_whose_measure_is_not_a_contrast_is_an_error():
    bad = (*study.CLAIMS[:1], claims.Claim("ours.unknown", "ours", "An unmeasured claim.", claims.Superiority(),
                                           measure="no such contrast"))
    with pytest.raises(ValueError, match="no such contrast"):
        analysis.verdicts(make_table(SUPPORTING), study.LayerStrategiesConfig(), bad)


def test_a_strategy_missing_is_an_absent_measurement_not_testable_through_evaluate():
    """The importance strategies did not run: their claims' rows come from an absent measurement through
    claims.evaluate (not testable, the reason naming the missing strategies, 0 units, outside the Holm family)."""
    v = verdicts(make_table(SUPPORTING, strategies=STRATEGIES[:7], ablations=("zero",)))
    r = v[(v["claim_id"] == "michel.least_important_first")]
    assert len(r) == 1
    r = r.iloc[0]
    assert (r["verdict"], r["task"], r["semantics"], r["analysis"], r["n_units"]) == \
        ("not testable", "all", "zero", "primary", 0)
    assert r["reason"] == ("the strategies of the contrast 'least important vs random' did not both run under the "
                           "zero semantics (missing: least_important)")
    assert r["tests"] == "[]" and r["p_test"] == "" and pd.isna(r["p_adjusted"])
    assert r["test"].startswith("superiority (greater)")  # the claim's own rule labels the row
    assert row(v, "budhraja.avoid_middle", "A", FTM, "zero")["verdict"] == "supported"
