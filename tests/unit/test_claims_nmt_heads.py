"""Study 7's claims on hand-made tables: the unit is the trained model (model seed), so one model makes every claim
``not testable`` (computed by the rule, never typed) and mask seeds are never replicates; the dev-loss plateau
gate both ways; the claims' wiring both ways with two models; no NaN in the tables or the text. The claims are data
(``nmt_heads_claims.CLAIMS``: rule, gate objects, the figure the notebook writes, a measure the analysis knows); a
measurement that could not be made is a ``not testable`` row through ``claims.evaluate``."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from headprune_utils.analysis import claims
from headprune_utils.store.paths import notebooks_dir
from headprune_utils.studies import nmt_heads as study
from headprune_utils.studies import nmt_heads_analysis as analysis
from headprune_utils.studies import nmt_heads_claims as declared

PLATEAU = [{"dev_loss": x} for x in (5.0, 4.0, 3.5, 3.6, 3.55, 3.52)]
RISING = [{"dev_loss": x} for x in (5.0, 4.0, 3.5, 3.2)]


def cells(model_seeds=(0, 1, 2, 3, 4), enc_drop=1.0, cross_drop=6.0, history=PLATEAU):
    """Full models (BLEU 30 + seed) and random pruning of enc and cross at 50%, three mask seeds each."""
    rows = []
    for ms in model_seeds:
        full = 30.0 + ms
        rows.append({"kind": "model", "model_seed": ms, "bleu": full, "chrf": 50.0, "nll": 2.0, "seconds": 1.0,
                     "direction": "en-de", "history": history})
        for t, drop in (("enc", enc_drop), ("cross", cross_drop)):
            for s in range(3):
                rows.append({"kind": "prune", "type": t, "fraction": 0.5, "seed": s, "model_seed": ms,
                             # the types differ a little from model to model (identical differences would leave
                             # the t statistic undefined), little enough that the t-test survives Holm over the study
                             "bleu": full - drop - 0.1 * s - (0.025 if t == "cross" else 0.02) * ms, "chrf": 0.0,
                             "nll": 2.5, "n_heads_pruned": 24,
                             "n_heads_total": 48, "seconds": 1.0})
    return pd.DataFrame(rows)


def run(table):
    empty = pd.DataFrame()
    v = study.verdicts(table, empty, empty, empty, empty, empty, claims_=study.CLAIMS, corpus="toy",
                       semantics=study.SEMANTICS, scale_="hand-made", patience=3)
    claims.validate(v)
    assert set(v["claim_id"]) == {c.id for c in study.CLAIMS}
    assert "nan" not in claims.render(v).lower()
    return v


def row(v, cid, setting):
    r = v[(v["claim_id"] == cid) & (v["setting"] == setting)]
    assert len(r) == 1, r
    return r.iloc[0]


def test_one_model_is_not_testable_and_mask_seeds_are_not_replicates():
    v = run(cells(model_seeds=(0,)))
    assert (v["verdict"] == "not testable").all()
    r = row(v, "ours.type_prunability_random", "enc - cross")
    assert r["n_units"] == 1 and "needs at least 2 units; got 1" in r["reason"]
    assert r["effect"] == pytest.approx(5.0)  # the mean over the model's three mask seeds, one value
    assert r["unit"] == "model (model seed)" and r["task"] == "toy en-de"


def test_fewer_than_five_models_decide_nothing():
    v = run(cells(model_seeds=(0, 1), enc_drop=1.0, cross_drop=6.0))
    r = row(v, "ours.type_prunability_random", "enc - cross")
    assert r["verdict"] == "not testable" and r["n_units"] == 2 and np.isnan(r["p"])
    assert "2 independently trained model(s) behind the row; a decision needs at least 5" in r["reason"]
    assert (v["verdict"] == "not testable").all()
    assert declared.ENOUGH_MODELS in declared.CLAIM["ours.type_prunability_random"].gates and declared.MIN_MODELS == 5
    # the same cells with five models are decided
    assert row(run(cells(enc_drop=1.0, cross_drop=6.0)), "ours.type_prunability_random", "enc - cross")["verdict"] \
        == "supported"


def test_five_models_test_the_claims_both_ways():
    v = run(cells(enc_drop=1.0, cross_drop=6.0))
    r = row(v, "ours.type_prunability_random", "enc - cross")
    assert r["verdict"] == "supported" and r["p_test"] == "supported: effect > 0 (one-sided t)"
    # margins.TASK_SCORE: 0.1 x (mean BLEU(full) - 0) = 3.2 BLEU, for every BLEU difference
    assert r["margin"] == pytest.approx(0.1 * 32) and "0.1 x (full - chance)" in r["test"]
    r = row(v, "budhraja.random_prunable", "enc, 50% pruned")
    assert r["margin"] == pytest.approx(0.1 * 32) and r["verdict"] == "supported"
    r = row(v, "budhraja.random_prunable", "cross, 50% pruned")
    assert r["verdict"] == "contradicted" and r["p_test"] == "contradicted: effect < -3.2 (one-sided t)"
    # without retraining, Budhraja et al.'s claim 1 is a sensitivity analysis (its own Holm family); the primary
    # family holds every other tested row's tests
    assert r["analysis"] == "sensitivity" and row(v, "ours.type_prunability_random", "enc - cross")["analysis"] == "primary"
    ft = claims.family_tests(v)
    assert ft.groupby("family").size().to_dict() == {"nmt_heads|primary|": 3,  # 1 superiority row x 3 tests
                                                     "nmt_heads|sensitivity|zero": 4}  # 2 non-inferiority rows x 2
    for _, f in ft.groupby("family"):
        assert np.allclose(f["p_adjusted"], claims.stats.holm(f["p"].to_numpy()))
    # the retrained rows exist for every type pruned, not testable where no cell retrains it
    r = row(v, "budhraja.random_prunable", "enc, 50% pruned; retrained with the mask fixed")
    assert r["verdict"] == "not testable" and r["analysis"] == "primary"
    assert r["reason"] == "no cell of this run retrains such a mask (enc, 50% pruned; retrained with the mask fixed)"
    v2 = run(cells(enc_drop=6.0, cross_drop=1.0))
    assert row(v2, "ours.type_prunability_random", "enc - cross")["verdict"] == "contradicted"
    # the same drop for both types: no difference as large as the margin, so the claim is not supported
    r = row(run(cells(enc_drop=3.0, cross_drop=3.0)), "ours.type_prunability_random", "enc - cross")
    assert r["verdict"] == "not supported" and r["p_test"] == "not supported: effect < +3.2 (one-sided t)"
    assert row(v2, "voita.enc_most_prunable", "")["verdict"] == "not testable"  # no L0 cells in this run
    assert "no cell of this run measures it" in row(v2, "voita.enc_most_prunable", "")["reason"]


def test_the_plateau_gate_both_ways():
    v = run(cells(history=RISING))
    r = row(v, "ours.type_prunability_random", "enc - cross")
    assert r["verdict"] == "not testable" and "not reached a plateau" in r["reason"] and np.isnan(r["p"])
    v2 = run(cells(history=None))
    r2 = row(v2, "ours.type_prunability_random", "enc - cross")
    assert r2["verdict"] == "not testable" and "cannot be judged" in r2["reason"]


def test_no_role_head_gives_no_nan_in_the_survival_and_role_tables():
    from headprune_utils.studies import role_survival

    surv = pd.DataFrame({"task": "enc", "seed": 0, "layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
                         "survival": [1, 2, 0, 3], "mean_log_alpha": [0.1, 0.2, -1.0, 1.0]})
    roles = pd.DataFrame({"source": "enc", "task": "enc", "seed": 0, "layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
                          "positional": False, "syntactic": False, "rare": False, "specialized": False, "role": "other"})
    t = role_survival.survival_tests(surv, roles, n_perm=9)
    assert not t.isna().any().any() and t.loc[0, "mean_auc"] == "n/a (no specialized heads)"


def test_a_measurement_without_values_is_a_not_testable_row_in_the_table_layout():
    """Measurement.absent through claims.evaluate: the row of the table layout, not testable for its reason alone,
    no numbers, 0 units, no tests (outside the Holm family)."""
    claim = declared.CLAIM["voita.positional_heads"]
    m = claims.Measurement.absent("toy", "no roles measured (encoder)", setting="encoder", unit=declared.UNIT)
    r = claims.evaluate(claim, [m], evidence={"histories": {}, "patience": 3}, study=study.NAME)
    assert tuple(r.columns) == claims.COLUMNS and len(r) == 1
    r = r.iloc[0]
    assert r["verdict"] == "not testable" and r["n_units"] == 0 and r["tests"] == "[]" and r["unit_values"] == "[]"
    assert np.isnan(r["effect"]) and np.isnan(r["margin"]) and np.isnan(r["p"]) and r["p_test"] == ""
    assert r["reason"] == "no roles measured (encoder)" and r["unit"] == "model (model seed)"
    # in the study: a run without roles cells gives the role claims that row, for that reason
    v = run(cells())
    row_ = row(v, "voita.rare_word_head", "encoder")
    assert row_["verdict"] == "not testable" and row_["reason"] == "no roles measured (encoder)"
    # a claim no cell of this run measures (no L0 cells): one absent row, saying so
    r = row(v, "voita.l0_beats_random", "")
    assert r["reason"] == "no cell of this run measures it" and r["n_units"] == 0


def test_every_claim_is_data_with_a_rule_gates_and_a_figure_the_notebook_writes():
    nb = json.loads((notebooks_dir() / study.STUDY.notebook).read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert study.STUDY.claims is declared.CLAIMS is study.CLAIMS
    for c in study.CLAIMS:
        assert isinstance(c, claims.Claim) and isinstance(c.rule, claims.RULES), c.id
        assert declared.PLATEAU in c.gates and all(isinstance(g, claims.Gate) for g in c.gates), c.id
        assert c.figure and f'out.figure("{c.figure}"' in code, f"{c.id}: the notebook writes no figure {c.figure!r}"
        assert c.measure in study.MEASURES and c.unit == "model (model seed)" and c.metric and c.regime and c.note
    note = declared.CLAIM["voita.rare_word_head"].note
    assert "66%" in note and "subword" in note and "top-500" in note


def test_the_plateau_gate_reads_the_patience_it_is_given():
    m = claims.Measurement("toy", [1.0, 2.0], [0, 1])
    histories = {0: PLATEAU, 1: PLATEAU}  # the best at evaluation 3 of 6: 3 evaluations without improvement
    assert declared.PLATEAU.check(m, {"histories": histories, "patience": 3}) is None
    why = declared.PLATEAU.check(m, {"histories": histories, "patience": 4})
    assert "model 0: the dev loss has not reached a plateau" in why and "model 1" in why
    assert "plateau" in declared.PLATEAU.text() and "patience" in declared.PLATEAU.text()


# ---------------------------------------------------------------------------------------------- retrained to the plateau
def curve(losses, every=250):
    return [{"step": every * (i + 1), "dev_loss": x, "train_loss": x + 0.5} for i, x in enumerate(losses)]


CONVERGED = curve([3.0, 2.6, 2.5, 2.55, 2.52])  # best at evaluation 3, then 2 without a better one
STALLED = curve([3.0, 2.8, 2.7, 2.6, 2.5])  # still improving at the cap


def retrained(table, drops=None, curves=None, patience=2, cap=1250, fixed_steps=None, min_delta=None, gain=0.1,
              reference=True):
    """``table`` plus retrain cells of enc and cross at 50%, mask seed 0, per model: BLEU = full - drop, the dev-loss
    curve ``curves[(type, model_seed)]`` (default CONVERGED); and, with ``reference``, the unpruned model retrained
    alike (type ``none``, curve ``curves[("none", model_seed)]``): BLEU = full + ``gain``; ``fixed_steps``: cells
    of the fixed regime instead (no curve)."""
    drops = {**(drops or {"enc": 0.5, "cross": 5.0}), **({"none": -gain} if reference else {})}
    rows = []
    for r in table[table["kind"] == "model"].to_dict("records"):
        ms = r["model_seed"]
        for t, drop in drops.items():
            c = (curves or {}).get((t, ms), CONVERGED)
            none = t == "none"
            cell = {"kind": "retrain", "type": t, "fraction": 0.0 if none else 0.5, "seed": -1 if none else 0,
                    "model_seed": ms,
                    # the models differ a little (a t statistic needs some spread)
                    "bleu": r["bleu"] - drop - 0.02 * ms * (not none), "chrf": 0.0, "nll": 2.2,
                    "n_heads_pruned": 0 if none else 24, "n_heads_total": 48, "seconds": 1.0}
            if fixed_steps:
                cell.update(retrain_steps=fixed_steps)
            else:
                cell.update(retrain_steps=c[-1]["step"], retrain_curve=c, retrain_patience=patience,
                            retrain_max_steps=cap, retrain_regime="plateau")
                if min_delta is not None:
                    cell.update(retrain_min_delta=min_delta)
            rows.append(cell)
    return pd.concat([table, pd.DataFrame(rows)], ignore_index=True)


R = "; retrained with the mask fixed"


def test_retrained_rows_are_primary_and_testable_when_every_model_reached_the_plateau():
    v = run(retrained(cells()))
    r = row(v, "budhraja.random_prunable", "enc, 50% pruned" + R)
    assert r["analysis"] == "primary" and r["verdict"] == "supported" and r["n_units"] == 5
    # BLEU(retrained) - BLEU(the unpruned model retrained alike: full + 0.1), mean over the five models
    assert r["effect"] == pytest.approx(-0.64)
    r = row(v, "budhraja.random_prunable", "cross, 50% pruned" + R)
    assert r["verdict"] == "contradicted" and r["analysis"] == "primary"
    assert "retrained with the mask fixed" in declared.RETRAINED_CONVERGED.text() and \
        declared.RETRAINED_CONVERGED in declared.CLAIM["budhraja.random_prunable"].gates
    # the rows without retraining stay, as the sensitivity analysis, decided as before
    assert row(v, "budhraja.random_prunable", "enc, 50% pruned")["analysis"] == "sensitivity"
    assert "sensitivity" in declared.CLAIM["budhraja.random_prunable"].regime


def test_a_model_stopped_at_the_cap_still_improving_blocks_only_its_rows_and_is_named():
    v = run(retrained(cells(), curves={("cross", 1): STALLED}))
    r = row(v, "budhraja.random_prunable", "cross, 50% pruned" + R)
    assert r["verdict"] == "not testable" and np.isnan(r["p"])
    assert r["reason"] == ("not trained to the plateau: 1 of 15 models behind this row were still improving when "
                           "training stopped: retrained cross, 50% pruned mask 0 of model 1 (stopped at the cap of 1250 "
                           "steps, best dev loss at step 1250)")
    assert row(v, "budhraja.random_prunable", "enc, 50% pruned" + R)["verdict"] == "supported"
    assert row(v, "budhraja.random_prunable", "cross, 50% pruned")["verdict"] == "contradicted"  # no retraining: ungated
    # the same curve judged with a patience it satisfies is a plateau (the patience it ran with is the rule)
    v1 = run(retrained(cells(), curves={("cross", 1): curve([3.0, 2.5, 2.6])}, patience=1))
    assert row(v1, "budhraja.random_prunable", "cross, 50% pruned" + R)["verdict"] == "contradicted"
    v2 = run(retrained(cells(), curves={("cross", 1): curve([3.0, 2.5, 2.6])}, patience=2))
    assert row(v2, "budhraja.random_prunable", "cross, 50% pruned" + R)["verdict"] == "not testable"


def test_retraining_without_a_dev_loss_curve_is_not_testable():
    """A fixed number of retraining steps (the committed standard cells: 500) stores no curve: nothing to judge."""
    v = run(retrained(cells(), fixed_steps=500))
    for t in ("enc", "cross"):
        r = row(v, "budhraja.random_prunable", f"{t}, 50% pruned" + R)
        assert r["verdict"] == "not testable" and r["n_units"] == 5
        assert r["reason"] == ("10 of 15 models behind this row have no dev-loss curve (retrained a fixed 500 steps): "
                               "whether they were trained to the plateau cannot be judged")
    # ours.nmt_retraining_recovers is gated by it too (its rows are on retrained models)
    assert "cannot be judged" in " ".join(v[v["claim_id"] == "ours.nmt_retraining_recovers"]["reason"])


def strategy_cells(table, curves=None, drops=None):
    """Retrained strategy masks (enc, budget 0.5, mask seeds 0 and 1): random, top (drop ``drops['top']`` more than
    random) and bottom."""
    drops = drops or {"random": 2.0, "top": 2.1, "bottom": 8.0}
    rows = []
    for r in table[table["kind"] == "model"].to_dict("records"):
        ms = r["model_seed"]
        for st, drop in drops.items():
            for s in (0, 1):
                c = (curves or {}).get((st, ms), CONVERGED)
                rows.append({"kind": "retrain_strategy", "type": "enc", "strategy": st, "budget": 0.5, "seed": s,
                             "model_seed": ms, "bleu": r["bleu"] - drop - 0.03 * ms * (st != "random") - 0.01 * s,
                             "chrf": 0.0, "nll": 2.2, "n_heads_pruned": 24, "n_heads_total": 48, "seconds": 1.0,
                             "retrain_steps": c[-1]["step"], "retrain_curve": c, "retrain_patience": 2,
                             "retrain_max_steps": 1250, "retrain_regime": "plateau"})
    return pd.concat([table, pd.DataFrame(rows)], ignore_index=True)


def test_claim_2_is_decided_on_retrained_masks_and_a_stalled_random_reference_blocks_every_strategy():
    v = run(strategy_cells(cells()))
    top, bottom = (row(v, "budhraja.location_no_better", f"{s}{R}") for s in ("top", "bottom"))
    assert top["analysis"] == bottom["analysis"] == "primary"
    assert top["effect"] == pytest.approx(-0.16) and bottom["effect"] == pytest.approx(-6.06)
    assert bottom["verdict"] == "contradicted" and top["verdict"] != "not testable"
    # the random masks are every strategy's reference: one of them still improving blocks both rows
    v = run(strategy_cells(cells(), curves={("random", 0): STALLED}))
    for s in ("top", "bottom"):
        r = row(v, "budhraja.location_no_better", f"{s}{R}")
        assert r["verdict"] == "not testable" and "retrained random mask 0 (enc, 50% pruned) of model 0" in r["reason"]
    # a stalled top mask blocks the top row only
    v = run(strategy_cells(cells(), curves={("top", 1): STALLED}))
    assert row(v, "budhraja.location_no_better", f"top{R}")["verdict"] == "not testable"
    assert row(v, "budhraja.location_no_better", f"bottom{R}")["verdict"] == "contradicted"
    # no strategy retrained in a run: the rows say so
    v = run(cells())
    assert set(v[v["claim_id"] == "budhraja.location_no_better"]["reason"]) == {"no cell of this run measures it"}


def test_the_gate_reads_only_the_retrained_rows_and_needs_a_retrained_model():
    m = claims.Measurement("toy", [1.0, 2.0], [0, 1], setting="enc, 50% pruned")
    empty = pd.DataFrame(columns=analysis.RETRAINING_COLUMNS)
    assert declared.RETRAINED_CONVERGED.check(m, {"retraining": empty}) is None  # not a retrained row
    m = claims.Measurement("toy", [1.0, 2.0], [0, 1], setting="enc, 50% pruned" + R)
    assert "no model retrained with the mask fixed" in declared.RETRAINED_CONVERGED.check(m, {"retraining": empty})


def test_a_retraining_is_judged_by_the_smallest_gain_it_ran_with():
    """A curve creeping down by thousandths is still improving under the strict rule, at its plateau under the
    retrain_min_delta its cell records (cells made before the field: strict)."""
    creep = curve([3.0, 2.5, 2.499, 2.498])
    v = run(retrained(cells(), curves={("cross", 1): creep}))
    assert row(v, "budhraja.random_prunable", "cross, 50% pruned" + R)["verdict"] == "not testable"
    v = run(retrained(cells(), curves={("cross", 1): creep}, min_delta=0.01))
    assert row(v, "budhraja.random_prunable", "cross, 50% pruned" + R)["verdict"] == "contradicted"


def test_claim_1_is_measured_against_the_unpruned_model_retrained_alike_whose_plateau_is_gated():
    """The extra training is in both: the reference is the unpruned model retrained the same way (not the full
    model); without it the retrained rows have nothing to compare with; a reference still improving at its cap
    blocks the retrained rows of its model, named as the reference."""
    v = run(retrained(cells(), gain=2.0))
    assert row(v, "budhraja.random_prunable", "enc, 50% pruned" + R)["effect"] == pytest.approx(-2.54)
    assert row(v, "budhraja.random_prunable", "enc, 50% pruned")["effect"] != pytest.approx(-2.54)  # vs the full model
    r = row(run(retrained(cells(), reference=False)), "budhraja.random_prunable", "enc, 50% pruned" + R)
    assert r["verdict"] == "not testable" and "no unpruned reference retrained alike" in r["reason"]
    # one model without its reference: not decided on the other four, its rows name it
    table = retrained(cells())
    table = table[~((table["kind"] == "retrain") & (table["type"] == "none") & (table["model_seed"] == 3))]
    r = row(run(table), "budhraja.random_prunable", "enc, 50% pruned" + R)
    assert r["verdict"] == "not testable" and "no unpruned reference retrained alike for model(s) 3" in r["reason"]
    v = run(retrained(cells(), curves={("none", 2): STALLED}))
    for t in ("enc", "cross"):
        r = row(v, "budhraja.random_prunable", f"{t}, 50% pruned" + R)
        assert r["verdict"] == "not testable"
        assert "unpruned model retrained alike (the reference) of model 2 (stopped at the cap" in r["reason"]
    assert row(v, "ours.nmt_retraining_recovers", "enc, 50% pruned" + R)["verdict"] == "not testable"


def test_the_recovery_rows_at_any_retrained_fraction_find_their_models_plateau():
    """The recovery claim measures every retrained fraction; its gate reads the curves of each (not only claim 1's
    fractions), so a row at 25% is judged, not refused for want of a record."""
    table = retrained(cells())
    table.loc[(table["kind"] == "retrain") & (table["type"] == "enc"), "fraction"] = 0.25
    prune = table[(table["kind"] == "prune") & (table["type"] == "enc") & (table["fraction"] == 0.5)]
    table = pd.concat([table, prune.assign(fraction=0.25)], ignore_index=True)
    r = row(run(table), "ours.nmt_retraining_recovers", "enc, 25% pruned" + R)
    assert r["verdict"] != "not testable", r["reason"]


def test_a_convergence_record_reads_its_best_evaluation_among_the_finite_losses():
    """A non-finite dev loss is never the best evaluation (the plateau rule ignores it too); none finite: no best."""
    curve = [{"step": 250, "dev_loss": 3.0}, {"step": 500, "dev_loss": float("nan")},
             {"step": 750, "dev_loss": 2.5}, {"step": 1000, "dev_loss": 2.6}, {"step": 1250, "dev_loss": 2.7}]
    rec = analysis._convergence_record(0, "full model", "", curve, 2, 1250, None)
    assert rec["best_evaluation"] == 3 and rec["best_step"] == 750 and rec["reached"]
    bad = analysis._convergence_record(0, "full model", "", [{"step": 250, "dev_loss": float("inf")}], 2, 250, None)
    assert bad["best_evaluation"] is None and bad["best_step"] is None and not bad["reached"]


def test_a_strategy_repeating_another_strategys_masks_is_not_counted_twice():
    """On three layers, top_bottom at one layer of three prunes the top layer as top does: its row would be top's
    test again (the same paired differences), so it is not testable naming top, and outside the Holm family; a
    strategy whose masks differ in some cell keeps its row."""
    top = {"enc": "11111111/11111111/00000000", "dec": "11111111/11111111/11111111"}
    bottom = {"enc": "00000000/11111111/11111111", "dec": "11111111/11111111/11111111"}
    rows = []
    for r in cells().query("kind == 'model'").to_dict("records"):
        ms = r["model_seed"]
        for strategy, masks, drop in (("random", {"enc": "10101010/10101010/10101010"}, 1.0), ("top", top, 1.5),
                                      ("bottom", bottom, 3.0), ("top_bottom", top, 1.5), ("spread", bottom, 3.0)):
            if strategy == "spread" and ms == 4:
                masks = top  # spread differs from bottom in one cell: its own row
            rows.append({"kind": "retrain_strategy", "type": "enc", "strategy": strategy, "budget": 0.33, "seed": 0,
                         "model_seed": ms, "masks": masks, "bleu": r["bleu"] - drop - 0.03 * ms * (strategy != "random"),
                         "chrf": 0.0, "nll": 2.2, "n_heads_pruned": 8, "n_heads_total": 48, "seconds": 1.0,
                         "retrain_steps": CONVERGED[-1]["step"], "retrain_curve": CONVERGED, "retrain_patience": 2,
                         "retrain_max_steps": 1250, "retrain_regime": "plateau"})
    table = pd.concat([cells(), pd.DataFrame(rows)], ignore_index=True)
    assert analysis.repeated_strategies(table[table["kind"] == "retrain_strategy"]) == {"top_bottom": "top"}
    v = run(table)
    r = row(v, "budhraja.location_no_better", "top_bottom" + R)
    assert r["verdict"] == "not testable" and "its masks are top's in every cell (33% of the heads" in r["reason"]
    tested = set(claims.family_tests(v)["row"])
    assert r.name not in tested and row(v, "budhraja.location_no_better", "top" + R).name in tested
    for s in ("top", "bottom", "spread"):
        assert row(v, "budhraja.location_no_better", s + R)["verdict"] != "not testable"
    assert row(v, "budhraja.location_no_better", "top" + R)["effect"] == pytest.approx(-0.5 - 0.03 * 2)


def test_rows_read_off_l0_gates_need_gates_that_settled():
    """Every claim read off the L0 gates carries the settling gate; its evidence is one row per L0 cell (model seed,
    setting and lambda) from the cell's history, and a model whose gates at any setting or lambda were still moving
    at their last step makes the rows it stands behind not testable, naming that training (a 30-step run: its last
    3 steps judged). Cells without a history: nothing to judge."""
    from headprune_utils.analysis import preconditions
    from headprune_utils.studies import nmt_heads_analysis

    read_off_gates = {c.id for c in study.CLAIMS if "L0-gated" in c.regime}
    assert read_off_gates == {c.id for c in study.CLAIMS if declared.GATES_SETTLED in c.gates}
    assert {"voita.type_prunability_l0", "voita.enc_most_prunable", "voita.l0_beats_random"} <= read_off_gates

    def steps(closing):
        hist = [{"step": i, "open": 40, "expected_l0": 41.0} for i in range(30)]
        if closing:  # one head and 2.5 expected lost over the last three steps
            hist[-3:] = [{"step": 27, "open": 39, "expected_l0": 39.8}, {"step": 28, "open": 39, "expected_l0": 39.0},
                         {"step": 29, "open": 39, "expected_l0": 38.5}]
        return hist

    table = pd.DataFrame([{"kind": "l0", "model_seed": ms, "setting": st, "lam": lam,
                           "history": steps(closing=(ms, st, lam) == (1, "enc", 0.1))}
                          for ms in (0, 1) for st in ("enc", "all") for lam in (0.01, 0.1)]
                         + [{"kind": "l0", "model_seed": 2, "setting": "enc", "lam": 0.1, "history": None}])
    ev = nmt_heads_analysis.gates_evidence(table)
    assert len(ev) == 9 and ev["settled"].sum() == 7 and ev["settled"].isna().sum() == 1
    gate = declared.GATES_SETTLED
    m = claims.Measurement("toy", [0.1, 0.2], [0, 1], "enc", "zero")
    why = gate.check(m, {"gates": ev})
    assert why.startswith("L0 gates not settled: 1 of 8 gate trainings behind this row on toy")
    assert "enc lambda 0.1 of seed 1: -1 heads open and -2.50 expected open over its last 3 of 30 steps" in why
    assert gate.check(claims.Measurement("toy", [0.1], [0], "enc", "zero"), {"gates": ev}) is None
    assert "have no record of their steps" in gate.check(claims.Measurement("toy", [0.1], [2], "enc", "zero"),
                                                          {"gates": ev})
    assert "no record of the L0 gates' training" in gate.check(m, {"gates": ev.iloc[0:0]})
    assert preconditions.gates_settled(steps(False)) == (True, "+0 heads open and +0.00 expected open over its "
                                                               "last 3 of 30 steps")


def test_functions_at_17_of_48_need_room_above_chance_per_setting_and_role():
    """Study 7's rows of the claim are keyed by L0 setting and role ("enc: syntactic"): the room gate reads each
    model's chance for that setting and role from the budget table (role_survival.role_chances), and a role that a
    random mask of that size keeps almost surely is not testable, naming the probabilities."""
    from headprune_utils.studies import role_survival
    budget = pd.DataFrame([{"setting": s, "model_seed": ms, "n_syntactic": 12, "random_syntactic": p,
                            "n_positional": 2, "random_positional": 0.4, "n_rare-word": 0, "random_rare-word": 0.0}
                           for s, p in (("enc", 0.99), ("all", 0.5)) for ms in (0, 1)])
    chances = role_survival.role_chances(budget, lambda r: (r["setting"], int(r["model_seed"])))
    assert chances[(("enc", 1), "syntactic")] == 0.99 and (("enc", 1), "rare-word") not in chances
    gate = [g for g in declared.CLAIM["voita.functions_at_17_of_48"].gates
            if isinstance(g, role_survival.RoomAboveChance)]
    assert len(gate) == 1
    m = lambda setting: claims.Measurement("multi30k en-de", [0.01, 0.01], [0, 1], setting, "zero", "", "model")
    why = gate[0].check(m("enc: syntactic"), {"role_chances": chances})
    assert why.startswith("a random mask of the size read keeps a syntactic head with probability 0.99 to 0.99")
    assert "0.01, is not above the margin 0.1" in why
    assert gate[0].check(m("all: syntactic"), {"role_chances": chances}) is None
    assert gate[0].check(m("enc: positional"), {"role_chances": chances}) is None
