"""Study 1's claims on hand-made cell tables: the claims declared once as data (random_pruning_claims), each claim's
wiring in both directions, both branches of every gate, absent measurements, per-task then pooled verdicts, Holm over
the study, no NaN in the rendered text."""
from __future__ import annotations

from types import SimpleNamespace

import nbformat
import pandas as pd
import pytest

from headprune_utils.analysis import claims, margins, preconditions, stats
from headprune_utils.run import summary
from headprune_utils.store.paths import notebooks_dir
from headprune_utils.studies import random_pruning as study
from headprune_utils.studies import random_pruning_analysis as analysis
from headprune_utils.studies import random_pruning_claims

JITTER = (-0.002, -0.001, 0.0, 0.001, 0.002)  # seed-to-seed spread of every score (5 seeds)
MASK = "1111/1111/1111"
PRUNABLE, RETRAIN = "budhraja.random_prunable", "ours.retraining_recovers"
# held-out curves (one record per epoch, the kept one selected): best at epoch 2 of 4 reached the plateau (patience
# 2); best at the last epoch of the cap did not
CONVERGED = [{"epoch": 1}, {"epoch": 2, "selected": True}, {"epoch": 3}, {"epoch": 4}]
STALLED = [{"epoch": 1}, {"epoch": 2}, {"epoch": 3, "selected": True}]


def cfg(**kw):
    base = dict(model="minilm", train_size=300, dev_size=300, epochs=3, seeds=list(range(len(JITTER))),
                ablations=["uniform"], finetune_ablations=["uniform"], tolerance=0.02)
    return SimpleNamespace(**{**base, **kw})


def cells(tasks: dict, regimes=("mask_then_finetune", "finetune_then_mask"), ablation="uniform",
          curves: dict | None = None) -> pd.DataFrame:
    """``tasks``: name -> (full, chance, {fraction: drop after mask-then-fine-tune}, {fraction: drop after
    fine-tune-then-mask}); the full model is the fraction-0 cell of both regimes. Every fine-tuning (the
    mask-then-fine-tune cells) stores a held-out curve that reached the plateau, unless ``curves`` gives
    ``(task, seed, fraction)`` another; the evaluation-only cells store none (as the study does)."""
    curves = curves or {}
    rows = []
    for task, (full, chance, mtf, ftm) in tasks.items():
        for seed, j in enumerate(JITTER):
            f = full + j
            for regime, drops in (("mask_then_finetune", mtf), ("finetune_then_mask", ftm)):
                if regime not in regimes:
                    continue
                for fraction, drop in {0.0: 0.0, **drops}.items():
                    # the pruned score's jitter differs from the full model's and between the regimes, so every
                    # paired difference varies by seed
                    wobble = j * j * (10 if regime == "mask_then_finetune" else 5) if fraction else 0.0
                    rows.append({"task": task, "regime": regime, "ablation": ablation, "fraction": fraction, "seed": seed,
                                 "score": f - drop + wobble, "chance": chance,
                                 "metric": "accuracy", "mask": MASK, "n_heads_pruned": int(12 * fraction),
                                 "history": curves.get((task, seed, fraction), CONVERGED)
                                 if regime == "mask_then_finetune" else []})
    return pd.DataFrame(rows)


def rows(v, claim_id, task=None, fraction=None):
    r = v[v["claim_id"] == claim_id]
    if task is not None:
        r = r[r["task"] == task]
    if fraction is not None:
        r = r[r["setting"].str.startswith(f"{100 * fraction:g}% ")]
    return r


def one(v, *a, **k):
    r = rows(v, *a, **k)
    assert len(r) == 1, r
    return r.iloc[0]


ADAPTS = {0.5: 0.005, 0.75: 0.01}, {0.5: 0.15, 0.75: 0.25}          # fine-tuning recovers: mtf drops << ftm drops
NO_ADAPT = {0.5: 0.10, 0.75: 0.20}, {0.5: 0.05, 0.75: 0.08}         # masking a fine-tuned model does better


def test_layout_claims_and_no_nan():
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, *ADAPTS), "STS-B": (0.8, 0.0, *ADAPTS)}), cfg())
    claims.validate(v)
    assert tuple(v.columns) == claims.COLUMNS
    assert set(v["claim_id"]) == {c.id for c in study.STUDY.claims}
    assert {c.measure for c in study.STUDY.claims} == set(study.MEASURES)
    assert (v["study"] == "random_pruning").all() and (v["semantics"] == "uniform").all()
    assert (v["analysis"] == "primary").all()
    assert v["scale"].iloc[0] == ("minilm (3 x 4 heads); 300 training examples x 3 epochs, 300 dev examples; "
                                  "5 seeds per task; a small-scale test, not the paper's set-up")
    # trained to the plateau: the epochs are a cap, and the scale says so
    capped = study.verdicts(cells({"SST-2": (0.8, 0.5, *ADAPTS)}), cfg(epochs=10, patience=2))
    assert capped["scale"].iloc[0].startswith("minilm (3 x 4 heads); 300 training examples x up to 10 epochs (to the "
                                              "plateau of the held-out score, patience 2), 300 dev examples; ")
    assert "nan" not in claims.render(v).lower() and "nan" not in " ".join(v["test"]).lower()
    paper = {c.id: c.paper for c in study.STUDY.claims}
    assert paper[RETRAIN] == "ours (exploratory)" and paper[PRUNABLE].startswith("Budhraja")


def test_prunable_supported_when_fine_tuning_adapts_and_the_loss_is_within_the_margin():
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, *ADAPTS)}), cfg())
    for f in (0.5, 0.75):
        r = one(v, PRUNABLE, "SST-2", f)
        assert r["verdict"] == "supported", r["reason"]
        assert r["margin"] == pytest.approx(0.1 * 0.3) and r["n_units"] == 5
        assert r["test"].startswith("non-inferiority (greater)") and "0.1 x (full - chance)" in r["test"]
    assert one(v, RETRAIN, "SST-2", 0.5)["verdict"] == "supported"


def test_prunable_contradicted_when_the_loss_exceeds_the_margin():
    mtf, ftm = {0.5: 0.10, 0.75: 0.12}, {0.5: 0.30, 0.75: 0.35}  # adapts (mtf beats ftm) but loses 0.1 > 0.03
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, mtf, ftm)}), cfg())
    r = one(v, PRUNABLE, "SST-2", 0.5)
    assert r["verdict"] == "contradicted" and r["ci_high"] < -r["margin"]


def test_a_masked_model_still_improving_makes_its_rows_not_testable_naming_it():
    """The convergence gate: a model fine-tuned with a 50% mask that hit the epoch cap still improving blocks the
    rows it stands behind (both claims at 50%), named with its best epoch; the 75% rows are decided."""
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, *ADAPTS)}, curves={("SST-2", 3, 0.5): STALLED}), cfg())
    for claim in (PRUNABLE, RETRAIN):
        r = one(v, claim, "SST-2", 0.5)
        assert r["verdict"] == "not testable" and pd.isna(r["p"]), r["reason"]
        assert r["reason"] == ("not trained to the plateau: 1 of 10 fine-tuned models on SST-2 were still improving "
                               "when training stopped (fewer than 2 epochs after their best): random 50% mask of "
                               "SST-2 seed 3 (best epoch 3 of 3)")
        # the findings bullet drops parenthesised details; the model it names stays whole
        assert summary._reason_head(r["reason"]).endswith("random 50% mask of SST-2 seed 3")
        assert one(v, claim, "SST-2", 0.75)["verdict"] == "supported"


def test_a_full_model_still_improving_blocks_both_regimes():
    """The full model stands behind every row of its task, the fine-tune-then-mask ones too (Michel et al.'s regime
    masks that very model)."""
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, *ADAPTS)}, curves={("SST-2", 0, 0.0): STALLED}), cfg())
    for claim in (PRUNABLE, RETRAIN):
        for f in (0.5, 0.75):
            r = one(v, claim, "SST-2", f)
            assert r["verdict"] == "not testable" and "full model of SST-2 seed 0 (best epoch 3 of 3)" in r["reason"]


def test_no_held_out_curve_is_not_testable_and_the_mask_then_fine_tune_claim_needs_no_other_regime():
    """Without a validation split there is no curve to judge: not testable, saying so; with curves, the prunable
    claim is decided from the mask-then-fine-tune cells alone (the old adapts-to-mask gate needed both regimes)."""
    t = cells({"SST-2": (0.8, 0.5, *ADAPTS)})
    v = study.verdicts(t.assign(history=[[{"epoch": 1}, {"epoch": 2}]] * len(t)), cfg())
    r = one(v, PRUNABLE, "SST-2", 0.5)
    assert r["verdict"] == "not testable" and "have no held-out curve (no validation split)" in r["reason"]
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, *ADAPTS)}, regimes=("mask_then_finetune",)), cfg())
    assert one(v, PRUNABLE, "SST-2", 0.5)["verdict"] == "supported"
    r = one(v, RETRAIN)
    assert r["verdict"] == "not testable" and "both regimes" in r["reason"] and r["n_units"] == 0
    assert (r["p_test"], r["tests"], r["unit_values"]) == ("", "[]", "[]") and pd.isna(r["p_adjusted"])  # no test
    claims.validate(v)


def test_the_full_models_curve_comes_from_any_semantics():
    """The full model (no head masked) is the same under every semantics: a semantics evaluated only after
    fine-tuning (zero here) is judged by the curve stored under another (uniform)."""
    t = pd.concat([cells({"SST-2": (0.8, 0.5, *ADAPTS)}, ablation="uniform"),
                   cells({"SST-2": (0.8, 0.5, *ADAPTS)}, regimes=("finetune_then_mask",), ablation="zero")],
                  ignore_index=True)
    ev = analysis.convergence_evidence(t, t[t["ablation"] == "zero"])
    assert list(ev["model"]) == ["full model"] * 5 and ev["reached"].all()
    assert set(ev["unit"]) == {("SST-2", s) for s in range(5)}


def test_above_chance_gate_both_branches():
    v = study.verdicts(cells({"SST-2": (0.52, 0.5, *ADAPTS), "STS-B": (0.8, 0.0, *ADAPTS)}), cfg())
    for claim in (PRUNABLE, RETRAIN):
        r = one(v, claim, "SST-2", 0.5)
        assert r["verdict"] == "not testable" and "not above chance by 0.05" in r["reason"]
        assert one(v, claim, "STS-B", 0.5)["verdict"] == "supported"
        pooled = one(v, claim, "all (SST-2, STS-B)", 0.5)  # the pool that could not be formed
        assert pooled["verdict"] == "not testable" and "fewer than 2 tasks testable" in pooled["reason"]


def test_per_task_then_pooled_and_never_over_a_task_decided_otherwise():
    agree = study.verdicts(cells({"SST-2": (0.8, 0.5, *ADAPTS), "STS-B": (0.8, 0.0, *ADAPTS)}), cfg())
    pooled = one(agree, PRUNABLE, "all (SST-2, STS-B)", 0.5)
    # 5 seeds, not 10 models: seed s's random mask is the same on both tasks (claims.SEED_SHARED_MASKS)
    assert pooled["verdict"] == "supported" and pooled["n_units"] == 5 and pooled["unit"].startswith("seed")
    assert pooled["margin"] == pytest.approx(0.1)  # normalised: the share of (full - chance)
    bad = {0.5: 0.10, 0.75: 0.12}, {0.5: 0.30, 0.75: 0.35}
    split = study.verdicts(cells({"SST-2": (0.8, 0.5, *ADAPTS), "STS-B": (0.8, 0.0, *bad)}), cfg())
    assert one(split, PRUNABLE, "SST-2", 0.5)["verdict"] == "supported"
    assert one(split, PRUNABLE, "STS-B", 0.5)["verdict"] == "contradicted"
    pooled = one(split, PRUNABLE, "all (SST-2, STS-B)", 0.5)
    assert pooled["verdict"] == "inconclusive" and claims.row_tests(pooled)  # tested; never its word over a task


def exact(x):
    """Equal up to rounding only (the p-values here are ~1e-14: pytest.approx's default absolute 1e-12 would pass
    anything)."""
    return pytest.approx(x, rel=1e-9, abs=0)


def test_holm_runs_over_the_whole_study():
    """Every test of every tested row of both claims is in ONE Holm family (the study's primary analysis); each
    row's p / p_adjusted are its deciding test's; rows without tests stay outside the family."""
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, *ADAPTS), "STS-B": (0.8, 0.0, *ADAPTS)}), cfg())
    claims.validate(v)
    ft = claims.family_tests(v)
    assert set(ft["family"]) == {"random_pruning|primary|"}
    assert set(v.loc[ft["row"], "claim_id"]) == {PRUNABLE, RETRAIN}
    assert ft["p_adjusted"].to_numpy() == exact(stats.holm(ft["p"].to_numpy()))
    # not Holm within each claim: the study's family is larger, so the smallest p is multiplied by all its tests
    for cid in (PRUNABLE, RETRAIN):
        own = ft[v.loc[ft["row"], "claim_id"].to_numpy() == cid]
        assert len(own) < len(ft) and (own["p_adjusted"].to_numpy() >= stats.holm(own["p"].to_numpy())).all()
        assert own["p_adjusted"].to_numpy() != exact(stats.holm(own["p"].to_numpy()))
    assert ft["p_adjusted"].min() == exact(len(ft) * ft["p"].min())
    # the tests of each row: non-inferiority 2 (supported, contradicted); superiority with its margin 3
    n_tests = ft.groupby("row").size()
    for i, r in v.iterrows():
        if r["verdict"] == "not testable" or claims.withheld(r):
            assert i not in n_tests.index and pd.isna(r["p"]) and r["tests"] == "[]"
            continue
        words = sorted(t.word for t in claims.row_tests(r))
        assert words == (["contradicted", "supported"] if r["claim_id"] == PRUNABLE
                         else ["contradicted", "not supported", "supported"]), (r["claim_id"], words)
        deciding = [t for t in claims.row_tests(r) if t.text() == r["p_test"]]
        assert len(deciding) == 1 and (r["p"], r["p_adjusted"]) == (deciding[0].p, deciding[0].p_adjusted)
        assert r["p_test"].startswith(r["verdict"] + ":")


def test_the_paper_scale_is_named_as_such():
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, *ADAPTS)}), cfg(model="bert-base-uncased", train_size=None,
                                                                  dev_size=None, batch_size=32, lr=2e-5))
    assert "not the paper's set-up" not in v["scale"].iloc[0] and "full training sets" in v["scale"].iloc[0]


def test_the_margins_are_the_policys_not_a_parameter(tiny_model_dir, tiny_glue_root):
    """Both claims take the task-score margin of headprune_utils.analysis.margins (0.1 x (full - chance)); no study knob."""
    from headprune_utils.studies.config import ParameterError, validate

    base = dict(model=str(tiny_model_dir), tasks=["SST-2"], seeds=[0], device="cpu", data_dir=str(tiny_glue_root),
                allow_hub=False)
    with pytest.raises(ParameterError, match="unknown parameter.*'margin_share'"):
        validate(study.RandomPruningConfig, {**base, "margin_share": 0.1})
    assert not hasattr(validate(study.RandomPruningConfig, base), "margin_share")
    for claim in study.STUDY.claims:
        assert claim.margin is margins.TASK_SCORE
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, *ADAPTS), "STS-B": (0.9, 0.0, *ADAPTS)}), cfg())
    for task, headroom in (("SST-2", 0.8 - 0.5), ("STS-B", 0.9 - 0.0)):
        for cid in (PRUNABLE, RETRAIN):
            r = one(v, cid, task, 0.5)
            assert r["margin"] == pytest.approx(margins.SHARE * headroom) and "0.1 x (full - chance)" in r["test"]


def test_retraining_not_supported_when_the_regimes_differ_by_less_than_the_margin():
    """The superiority claim's margin gives it a third word: the same drop in both regimes is an effect shown to be
    below 0.1 x (full - chance), neither supported nor contradicted."""
    same = {0.5: 0.10, 0.75: 0.20}, {0.5: 0.10, 0.75: 0.20}
    v = study.verdicts(cells({"SST-2": (0.8, 0.5, *same)}), cfg())
    claims.validate(v)
    r = one(v, RETRAIN, "SST-2", 0.5)
    assert r["verdict"] == "not supported", r["reason"]
    assert r["p_test"] == "not supported: effect < +0.03 (one-sided t)" and r["p_adjusted"] < 0.05
    assert r["ci_high"] < r["margin"] == pytest.approx(0.03)


def test_sensitivity_semantics_are_decided_apart_and_flag_a_flip():
    """The same claims under zero (sensitivity): their own rows, their own Holm family; a verdict that differs
    from the primary one is reported by ``claims.semantics_dependence``."""
    t = pd.concat([cells({"SST-2": (0.8, 0.5, *ADAPTS)}, ablation="uniform"),
                   cells({"SST-2": (0.8, 0.5, *NO_ADAPT)}, ablation="zero")], ignore_index=True)
    v = study.verdicts(t, cfg(ablations=["uniform", "zero"], finetune_ablations=["uniform", "zero"]))
    claims.validate(v)
    prim, sens = v[v["analysis"] == "primary"], v[v["analysis"] == "sensitivity"]
    assert set(prim["semantics"]) == {"uniform"} and set(sens["semantics"]) == {"zero"}
    # Holm within each family: the primary tests are adjusted over the primary rows' tests only, the zero ones apart
    ft = claims.family_tests(v)
    assert set(ft["family"]) == {"random_pruning|primary|", "random_pruning|sensitivity|zero"}
    for fam, g in ft.groupby("family"):
        assert set(v.loc[g["row"], "analysis"]) == {"sensitivity" if fam.endswith("zero") else "primary"}
        assert g["p_adjusted"].to_numpy() == exact(stats.holm(g["p"].to_numpy()))
    assert ft["p_adjusted"].to_numpy() != exact(stats.holm(ft["p"].to_numpy()))  # not one family over both
    u = one(prim, PRUNABLE, "SST-2", 0.5)
    z = one(sens, PRUNABLE, "SST-2", 0.5)
    assert u["verdict"] == "supported" and z["verdict"] == "contradicted", (u["reason"], z["reason"])
    dep = claims.semantics_dependence(v).set_index(["claim_id", "task", "setting"])
    row = dep.loc[(RETRAIN, "SST-2", "50% of heads pruned at random")]
    assert row["depends"] == "flips" and row["primary_semantics"] == "uniform"
    assert row["verdict_uniform"] == "supported" and row["verdict_zero"] == "contradicted"


# ------------------------------------------------------------------------------------------ the claims as data

def test_the_claims_are_declared_once_as_data():
    """The study's claims are random_pruning_claims.CLAIMS: claims.Claim objects with a rule, Gate objects (the
    precondition is their text), the figure the notebook writes, and a measure the analysis knows."""
    assert study.STUDY.claims is random_pruning_claims.CLAIMS is study.CLAIMS
    nb = nbformat.read(notebooks_dir() / study.STUDY.notebook, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for c in study.STUDY.claims:
        assert isinstance(c, claims.Claim) and isinstance(c.rule, claims.RULES), c.id
        assert c.gates and all(isinstance(g, claims.Gate) for g in c.gates), c.id
        assert c.figure and f'out.figure("{c.figure}"' in code, (c.id, c.figure)  # the study writes it
        assert c.measure in study.MEASURES and c.metric and c.regime and c.semantics == "uniform"
        assert c.precondition.startswith(preconditions.AboveChance().text())
    by_id = {c.id: c for c in study.STUDY.claims}
    assert isinstance(by_id[PRUNABLE].rule, claims.NonInferiority)
    assert isinstance(by_id[RETRAIN].rule, claims.Superiority) and by_id[RETRAIN].rule.direction == "greater"
    # the above-chance margin is the project's one constant; the convergence gate on both claims (both regimes)
    assert all(g.margin == preconditions.ABOVE_CHANCE == 0.05 for c in study.STUDY.claims for g in c.gates
               if isinstance(g, preconditions.AboveChance))
    for c in study.STUDY.claims:
        conv = [g for g in c.gates if isinstance(g, preconditions.Converged)]
        assert len(conv) == 1 and conv[0].patience == preconditions.PATIENCE == 2 and conv[0].only == "", c.id
        assert "reached the plateau of its held-out score" in c.precondition
    assert not hasattr(analysis, "RULES") and not hasattr(analysis, "ABOVE_CHANCE")  # one home: the claims module


def test_a_claim_with_an_unknown_measure_is_an_error():
    bad = (*study.CLAIMS[:1], claims.Claim("ours.unknown", "ours", "An unmeasured claim.", claims.Superiority(),
                                           measure="nothing"))
    with pytest.raises(ValueError, match="nothing"):
        analysis.claim_verdicts(cells({"SST-2": (0.8, 0.5, *ADAPTS)}), cfg(), bad)


def test_an_absent_measurement_is_not_testable_through_evaluate():
    """No mask-then-fine-tune share >= 50% ran: the prunable claim's one measurement is absent, and evaluate makes
    its row not testable with the reason, 0 units, outside the Holm family; the other claim is decided."""
    t = cells({"SST-2": (0.8, 0.5, {0.25: 0.005}, {0.25: 0.15, 0.5: 0.15})})
    ms = analysis.prunable_measurements(t, "uniform")
    assert len(ms) == 1 and ms[0].missing and ms[0].n_units == 0
    claim = next(c for c in study.CLAIMS if c.id == PRUNABLE)
    r = claims.evaluate(claim, ms, evidence={"convergence": analysis.convergence_evidence(t, t)}).iloc[0]
    why = "no mask-then-fine-tune cells with >= 50% of heads pruned in this run under the uniform semantics"
    assert (r["verdict"], r["reason"], r["n_units"], r["tests"]) == ("not testable", why, 0, "[]")
    v = study.verdicts(t, cfg())
    claims.validate(v)
    r = one(v, PRUNABLE)
    assert (r["verdict"], r["reason"], r["task"], r["semantics"]) == ("not testable", why, "all", "uniform")
    assert pd.isna(r["p_adjusted"]) and r["p_test"] == "" and r["test"].startswith("non-inferiority (greater)")
    assert one(v, RETRAIN, "SST-2", 0.25)["verdict"] == "supported"
    # a sensitivity semantics that measured nothing adds no row (only the claim's own semantics always has one)
    z = study.verdicts(pd.concat([t, cells({"SST-2": (0.8, 0.5, {}, {0.5: 0.1})}, regimes=("finetune_then_mask",),
                                           ablation="zero")], ignore_index=True),
                       cfg(ablations=["uniform", "zero"]))
    assert not ((z["semantics"] == "zero") & (z["n_units"] == 0)).any()


def test_a_task_never_fine_tuned_after_masking_is_named_not_left_out():
    """CoLA has fine-tune-then-mask cells only (not among ``finetune_tasks``): both claims, decided on models
    fine-tuned after masking, give CoLA a ``not testable`` row naming the protocol no cell measures, outside the
    Holm family; SST-2 and STS-B are decided as without CoLA, and the pool stays theirs."""
    mtf_only = {"SST-2": (0.8, 0.5, *ADAPTS), "STS-B": (0.8, 0.0, *ADAPTS)}
    base = study.verdicts(cells(mtf_only), cfg())
    table = pd.concat([cells(mtf_only), cells({"CoLA": (0.6, 0.0, *ADAPTS)}, regimes=("finetune_then_mask",))],
                      ignore_index=True)
    v = study.verdicts(table, cfg())
    claims.validate(v)
    for claim in (PRUNABLE, RETRAIN):
        r = one(v, claim, "CoLA")
        assert r.verdict == "not testable" and r.n_units == 0 and pd.isna(r.p_adjusted)
        assert "no model of CoLA was fine-tuned after masking" in r.reason and "finetune_tasks" in r.reason
    pooled = v[v["task"].str.startswith("all (")]
    assert len(pooled) and (pooled["task"] == "all (SST-2, STS-B)").all()
    cols = ["claim_id", "task", "setting", "verdict", "p_adjusted"]
    kept = v[v["task"] != "CoLA"][cols].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, base[cols].reset_index(drop=True))
    # a run without any mask-then-fine-tune cell: one absent row, as before (nothing to name per task)
    none = study.verdicts(cells(mtf_only, regimes=("finetune_then_mask",)), cfg())
    assert set(rows(none, PRUNABLE)["task"]) == {"all"}
