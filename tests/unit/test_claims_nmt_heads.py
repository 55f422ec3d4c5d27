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
from headprune_utils.studies import nmt_heads_claims as declared

PLATEAU = [{"dev_loss": x} for x in (5.0, 4.0, 3.5, 3.6, 3.55, 3.52)]
RISING = [{"dev_loss": x} for x in (5.0, 4.0, 3.5, 3.2)]


def cells(model_seeds=(0, 1), enc_drop=1.0, cross_drop=6.0, history=PLATEAU):
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
                             # the t statistic undefined: the exact sign-flip test over 2 models cannot reach 0.05),
                             # little enough that a t-test on 1 degree of freedom survives Holm over the study
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
    r = row(v, "voita.type_prunability_random", "enc - cross")
    assert r["n_units"] == 1 and "needs at least 2 units; got 1" in r["reason"]
    assert r["effect"] == pytest.approx(5.0)  # the mean over the model's three mask seeds, one value
    assert r["unit"] == "model (model seed)" and r["task"] == "toy en-de"


def test_two_models_test_the_claims_both_ways():
    v = run(cells(enc_drop=1.0, cross_drop=6.0))
    r = row(v, "voita.type_prunability_random", "enc - cross")
    assert r["verdict"] == "supported" and r["p_test"] == "supported: effect > 0 (one-sided t)"
    # margins.TASK_SCORE: 0.1 x (mean BLEU(full) - 0) = 3.05 BLEU, for every BLEU difference
    assert r["margin"] == pytest.approx(0.1 * 30.5) and "0.1 x (full - chance)" in r["test"]
    r = row(v, "budhraja.random_prunable", "enc, 50% pruned")
    assert r["margin"] == pytest.approx(0.1 * 30.5) and r["verdict"] == "supported"
    r = row(v, "budhraja.random_prunable", "cross, 50% pruned")
    assert r["verdict"] == "contradicted" and r["p_test"] == "contradicted: effect < -3.05 (one-sided t)"
    # Holm over the study: every test of every tested row in one family
    ft = claims.family_tests(v)
    assert ft["family"].nunique() == 1 and len(ft) == 7  # 2 non-inferiority rows x 2 tests, 1 superiority row x 3
    assert np.allclose(ft["p_adjusted"], claims.stats.holm(ft["p"].to_numpy()))
    v2 = run(cells(enc_drop=6.0, cross_drop=1.0))
    assert row(v2, "voita.type_prunability_random", "enc - cross")["verdict"] == "contradicted"
    # the same drop for both types: no difference as large as the margin, so the claim is not supported
    r = row(run(cells(enc_drop=3.0, cross_drop=3.0)), "voita.type_prunability_random", "enc - cross")
    assert r["verdict"] == "not supported" and r["p_test"] == "not supported: effect < +3.05 (one-sided t)"
    assert row(v2, "voita.enc_most_prunable", "")["verdict"] == "not testable"  # no L0 cells in this run
    assert "no cell of this run measures it" in row(v2, "voita.enc_most_prunable", "")["reason"]


def test_the_plateau_gate_both_ways():
    v = run(cells(history=RISING))
    r = row(v, "voita.type_prunability_random", "enc - cross")
    assert r["verdict"] == "not testable" and "not reached a plateau" in r["reason"] and np.isnan(r["p"])
    v2 = run(cells(history=None))
    r2 = row(v2, "voita.type_prunability_random", "enc - cross")
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
