"""Study 6's claims on hand-made tables: each claim's wiring gives the expected verdict both ways, the gates (trained
model, role found) both ways, per task then pooled, the survival AUC stratified by layer, and no NaN in the text.
The claims are data (``specialized_heads_l0_claims.CLAIMS``): each a ``claims.Claim`` with its rule, gate objects, the
figure the notebook writes, and a measure the analysis knows; a measurement that could not be made is a ``not
testable`` row through ``claims.evaluate``, never a hand-built one."""
from __future__ import annotations

import inspect
import json

import numpy as np
import pandas as pd
import pytest
import torch

from headprune_utils.analysis import claims, margins, preconditions
from headprune_utils.model.masks import mask_to_string
from headprune_utils.store.paths import notebooks_dir
from headprune_utils.analysis.preconditions import plateau
from headprune_utils.studies.role_survival import RoomAboveChance
from headprune_utils.studies.role_survival import presence_effect, random_keeps
from headprune_utils.studies import specialized_heads_l0 as study
from headprune_utils.studies import specialized_heads_l0_claims as declared

TASKS = ("A", "B")
SEEDS = (0, 1, 2, 3)
MANY = tuple(range(8))  # 8 models per task: a pooled exact one-sided test over 16 can survive Holm over the study
L, H = 2, 3  # 6 heads; (0, 0) and (1, 2) are the specialized (positional) heads
SPEC = {(0, 0), (1, 2)}


# a fine-tuning that reached the plateau (best epoch 2, two more without beating it), and one stopped at its cap
# still improving (best epoch 4 of 4)
CONVERGED_CURVE = [{"epoch": e, "val_score": v, "selected": e == 2} for e, v in ((1, 0.8), (2, 0.86), (3, 0.85), (4, 0.85))]
IMPROVING_CURVE = [{"epoch": e, "val_score": v, "selected": e == 4} for e, v in ((1, 0.8), (2, 0.82), (3, 0.84), (4, 0.86))]


def gate_steps(keep, settled=True, steps=20):
    """An L0 gate training's history ending with ``keep`` heads open: settled (the count and the expected open gates
    flat over the last steps) or still closing (one head, and 1.5 expected, lost in its last two steps)."""
    hist = [{"step": i, "open": keep + 2, "expected_l0": keep + 2.0} for i in range(steps // 2)]
    hist += [{"step": i, "open": keep, "expected_l0": keep + 0.5} for i in range(steps // 2, steps)]
    if not settled:
        hist[-3:] = [{"step": steps - 3, "open": keep + 1, "expected_l0": keep + 1.5},
                     {"step": steps - 2, "open": keep, "expected_l0": keep + 0.2},
                     {"step": steps - 1, "open": keep, "expected_l0": keep}]
    return hist


def cells(full=0.9, chance=0.5, l0_gain=0.2, imp_gap=0.0, spec_first=False, rho=0.5, l0_loss=0.005, l0_spread=0.0,
          seeds=SEEDS, curve=CONVERGED_CURVE, unsettled=()):
    """Scores cells (full score, chance, Spearman via relevance/confidence grids) and L0 cells per (task, seed).
    A pruned L0 mask loses ``l0_loss + l0_spread x seed`` (``l0_spread`` > 0: the models differ, so the t statistic
    of score(L0) - score(full) is defined). Every L0 cell's gates settled, except those of ``unsettled``
    ``(task, seed, lam)``."""
    rows = []
    rng = np.random.default_rng(0)
    for task in TASKS:
        for seed in seeds:
            jitter = 0.002 * seed
            conf = rng.random((L, H))
            rel = conf if rho > 0 else -conf
            rows.append({"kind": "scores", "task": task, "seed": float(seed), "score_full": full + jitter,
                         "chance": chance, "relevance": rel.tolist(), "confidence": conf.tolist(),
                         **({} if curve is None else {"full_model_history": curve})})
            order = [(0, 0), (1, 2), (0, 1), (1, 0), (0, 2), (1, 1)]
            if spec_first:
                order = order[2:] + order[:2]
            if seed % 2:  # the order of the other heads varies
                order = order[:2] + order[2:][::-1] if not spec_first else order[:4][::-1] + order[4:]
            for lam, keep in ((0.01, 6), (0.1, 3), (1.0, 2)):
                m = torch.zeros(L, H)
                for layer, head in order[:keep]:
                    m[layer, head] = 1
                pruned = keep < L * H
                rows.append({"kind": "l0", "task": task, "seed": float(seed), "lam": lam, "n_kept": keep,
                             "n_heads_total": L * H, "mask": mask_to_string(m), "log_alpha": (2 * m - 1).tolist(),
                             "score_full": full + jitter, "chance": chance, "metric": "accuracy", "seconds": 1.0,
                             "score_l0": full + jitter - (l0_loss + l0_spread * seed if pruned else 0.0),
                             "score_random_mean": full + jitter - (l0_gain if pruned else 0.0) + 0.003 * seed,
                             "score_importance": full + jitter - (imp_gap if pruned else 0.0) + 0.001 * seed,
                             "history": gate_steps(keep, (task, seed, lam) not in unsettled)})
    return pd.DataFrame(rows)


def roles_of(table, found=True, seeds=SEEDS, pretrained=("positional", "rare-word")):
    """Role rows of the fine-tuned models (the SPEC heads positional, (0, 0) also rare-word, when ``found``) and of
    the pre-trained model (source "pretrained", seed -1): the SPEC heads have the roles in ``pretrained`` (rare-word:
    (0, 0) only, the first layer); ``pretrained=None``: no pre-trained row (its roles cell missing)."""
    rows = []
    for task in TASKS:
        for seed in seeds:
            for layer in range(L):
                for head in range(H):
                    s = found and (layer, head) in SPEC
                    rows.append({"source": task, "task": task, "seed": seed, "layer": layer, "head": head,
                                 "positional": s, "syntactic": False, "rare": s and layer == 0, "specialized": s,
                                 "role": "positional" if s else "other"})
    for layer in range(L):
        for head in range(H) if pretrained is not None else ():
            s = (layer, head) in SPEC
            pos, syn = s and "positional" in pretrained, s and "syntactic" in pretrained
            rare = s and layer == 0 and "rare-word" in pretrained
            rows.append({"source": "pretrained", "task": "pretrained", "seed": -1, "layer": layer, "head": head,
                         "positional": pos, "syntactic": syn, "rare": rare, "specialized": pos or syn or rare,
                         "role": "several" if pos + syn + rare > 1 else "positional" if pos else "syntactic" if syn
                         else "rare-word" if rare else "other"})
    return pd.DataFrame(rows)


def agreement_of(rho, rho_no_special=None, seeds=SEEDS):
    """Spearman(relevance, confidence) per model; with ``rho_no_special`` also the special-key-free confidence's."""
    rows = [{"task": t, "seed": s, "a": "relevance", "b": "confidence", "spearman": rho + 0.01 * s}
            for t in TASKS for s in seeds]
    if rho_no_special is not None:
        rows += [{"task": t, "seed": s, "a": "confidence_no_special_keys", "b": "relevance",
                  "spearman": rho_no_special + 0.01 * s} for t in TASKS for s in seeds]
    return pd.DataFrame(rows)


EVERY_KEY, NO_SPECIAL = study.CONFIDENCES["confidence"], study.CONFIDENCES["confidence_no_special_keys"]


def run(table, roles, rho=0.5, rho_no_special=None, seeds=SEEDS):
    surv = study.survival_heads(table)
    budget = study.roles_at_budget(table, roles, fraction=1 / 3)
    v = study.verdicts(table, agreement_of(rho, rho_no_special, seeds), roles, surv, budget, claims_=study.CLAIMS,
                       semantics="zero", scale_="hand-made")
    claims.validate(v)
    holm_over_the_study(v)
    text = claims.render(v)
    assert "nan" not in text.lower()
    return v


def smallest_p(rows) -> np.ndarray:
    """Each test's smallest attainable p from its row's declared test and units, written out here: 0 for a t-test,
    1 / 2**n for an exact sign-flip or binomial test over n units."""
    return np.array([0.0 if "one-sided t tests" in r["test"] else 0.5 ** len(json.loads(r["unit_values"]))
                     for _, r in rows.iterrows()])


def holm_over_the_study(v):
    """Every test of every tested row is in one of the study's Holm families (one semantics): the primary rows', and
    the sensitivity rows' (the every-key reading of confidence: ``voita.important_are_confident`` is decided on the
    special-key-free one, ``decided_in``), each adjusted on its own."""
    ft = claims.family_tests(v)
    assert set(ft["family"]) <= {"specialized_heads_l0|primary|", "specialized_heads_l0|sensitivity|zero"}
    assert (ft.groupby("row").size() >= 2).all() and set(ft["row"]) == set(v.index[v["tests"] != "[]"])
    for fam, g in ft.groupby("family"):
        assert np.allclose(g["p_adjusted"], claims.stats.tarone_holm(g["p"].to_numpy(), smallest_p(v.loc[g["row"]])))
        rows = v.loc[g["row"]]
        assert set(rows["analysis"]) == {"sensitivity" if "sensitivity" in fam else "primary"}
        if "sensitivity" in fam:
            assert set(rows["setting"]) <= {EVERY_KEY, PAPER}
    return ft


HALF, PAPER = "< half the heads kept", "nearest 10/48 of the heads kept (the paper's)"


def verdict(v, cid, task="A", setting=None):
    rows = v[(v["claim_id"] == cid) & (v["task"] == task)]
    if setting is not None:
        rows = rows[rows["setting"] == setting]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_every_claim_has_a_rule_and_a_row():
    v = run(cells(), roles_of(None))
    assert {c.id for c in study.CLAIMS} == set(v["claim_id"]) and study.STUDY.claims is study.CLAIMS
    assert (v["study"] == "specialized_heads_l0").all() and (v["semantics"] == "zero").all()
    about_pretrained = v["claim_id"].isin([voita for voita, _, _ in study.ROLE_CLAIMS])
    seed_pooled = (v["claim_id"] == "voita.l0_beats_random") & v["task"].str.startswith("all")
    assert (v.loc[~about_pretrained & ~seed_pooled, "unit"] == "model (task x seed)").all()
    assert (v.loc[seed_pooled, "unit"] == claims.SEED_SHARED_MASKS.text).all() and seed_pooled.sum() == 1
    assert (v.loc[about_pretrained, "unit"] == "pre-trained model").all() and about_pretrained.sum() == 3
    claim = {c.id: c for c in study.CLAIMS}
    assert claim["ours.l0_vs_importance"].paper == "ours (exploratory)"
    for voita, survives, role in study.ROLE_CLAIMS:
        assert claim[survives].paper == "ours (exploratory)" and "Fine-tuning keeps" in claim[survives].text
        assert isinstance(claim[survives].rule, claims.Presence)
        assert "pre-trained model" in claim[voita].metric and "n = 1" in claim[voita].note
        assert "n = 1" in claim[voita].precondition and claim[voita].regime.startswith("the pre-trained model")
    confident = {c.id: c for c in study.CLAIMS}["voita.important_are_confident"]
    assert "EOS" in confident.metric and "not LRP" in confident.note
    assert "sensitivity analysis, its own family" in confident.metric
    assert confident.decided_in == "confidence_no_special_keys"


def test_l0_beats_random_both_ways_per_task_and_pooled():
    v = run(cells(l0_gain=0.2), roles_of(None))
    assert verdict(v, "voita.l0_beats_random")["verdict"] == "supported"
    pooled = verdict(v, "voita.l0_beats_random", "all (A, B)")
    # 4 seeds, not 8 models: seed s's random masks are the same on both tasks (prefixes of one permutation,
    # study.random_seed), so the pooled row averages each seed's models first (claims.SEED_SHARED_MASKS)
    assert pooled["verdict"] == "supported" and pooled["n_units"] == len(SEEDS)
    assert pooled["unit"] == claims.SEED_SHARED_MASKS.text
    assert list(inspect.signature(study.random_seed).parameters) == ["seed", "r"], "the same masks on every task"
    # pooled effect normalised by (full - chance): L0 loses 0.005, random 0.2 - 0.003 seed; headroom 0.4 + jitter
    assert pooled["effect"] == pytest.approx(np.mean([(0.195 - 0.003 * s) / (0.4 + 0.002 * np.mean(SEEDS))
                                                      for s in SEEDS]))
    v2 = run(cells(l0_gain=-0.2), roles_of(None))
    assert verdict(v2, "voita.l0_beats_random")["verdict"] == "contradicted"
    # a gain smaller than the smallest of interest (margins.TASK_SCORE: 0.1 x (full - chance)) is not supported
    v3 = run(cells(l0_gain=0.01), roles_of(None))
    row = verdict(v3, "voita.l0_beats_random")
    assert row["margin"] == pytest.approx(0.1 * (0.9 + 0.003 - 0.5)) and "0.1 x (full - chance)" in row["test"]
    assert row["verdict"] == "not supported" and row["p_test"].startswith("not supported: effect < +0.0403")
    assert verdict(v3, "voita.l0_beats_random", "all (A, B)")["verdict"] == "not supported"
    # one value per model: the lambdas of a model are averaged, never replicates
    assert verdict(v, "voita.l0_beats_random")["n_units"] == len(SEEDS)


def test_l0_vs_importance_is_an_equivalence_with_a_headroom_margin():
    v = run(cells(imp_gap=0.0), roles_of(None))
    row = verdict(v, "ours.l0_vs_importance")
    assert row["verdict"] == "supported" and row["margin"] == pytest.approx(0.1 * (0.9 + 0.003 - 0.5))
    assert "0.1 x (full - chance)" in row["test"]
    v2 = run(cells(imp_gap=-0.3, l0_loss=0.0), roles_of(None))  # importance far better: outside the margin
    assert verdict(v2, "ours.l0_vs_importance")["verdict"] == "contradicted"


def test_most_prunable_is_non_inferiority_at_half_the_heads():
    # the models lose a little more with each seed (identical losses would leave the t statistic undefined, and the
    # exact one-sided sign-flip test over 4 models cannot go below 1/16 > 0.05)
    v = run(cells(l0_loss=0.005, l0_spread=0.001), roles_of(None))
    row = verdict(v, "voita.most_prunable", setting=HALF)
    assert row["verdict"] == "supported" and row["analysis"] == "primary"
    assert row["margin"] == pytest.approx(0.1 * (0.9 + 0.003 - 0.5))  # margins.TASK_SCORE: 0.1 x (full - chance)
    assert row["p_test"] == "supported: effect > -0.0403 (one-sided t)"
    v2 = run(cells(l0_loss=0.3, l0_spread=0.001), roles_of(None))
    row = verdict(v2, "voita.most_prunable", setting=HALF)
    assert row["verdict"] == "contradicted" and row["p_test"].startswith("contradicted: effect < -0.0403")
    # every model losing exactly the same: t is undefined, the exact test that runs instead cannot reach 0.05 with 4
    # models (1/16): not testable, by that test's power gate
    row = verdict(run(cells(l0_loss=0.005), roles_of(None)), "voita.most_prunable", setting=HALF)
    assert row["verdict"] == "not testable" and "sign-flip" in row["reason"] and "needs 5 units" in row["reason"]


def test_most_prunable_at_the_papers_share_is_a_sensitivity_analysis():
    """Voita et al.'s own share, 10 of 48 heads kept: the L0 mask nearest it (a tie: the smaller lambda), a
    sensitivity row (its own family), not testable where no mask within 0.1 x the heads of it was trained."""
    curve = pd.DataFrame([{"task": "A", "seed": s, "lam": lam, "n_kept": k, "n_heads_total": 72, "score_l0": 0.8 - d,
                           "score_full": 0.8} for s in (0, 1) for lam, k, d in ((0.01, 27, 0.01), (0.03, 9, 0.05),
                                                                                 (0.05, 21, 0.03))]
                         + [{"task": "B", "seed": 0, "lam": 0.01, "n_kept": 40, "n_heads_total": 72, "score_l0": 0.7,
                             "score_full": 0.8},
                            {"task": "B", "seed": 1, "lam": 1.0, "n_kept": 0, "n_heads_total": 72, "score_l0": 0.5,
                             "score_full": 0.8}])
    rows, misses = study.paper_share_rows(curve, 10 / 48)  # target 15 heads: 9 and 21 tie, the smaller lambda wins
    a = rows[rows["task"] == "A"]
    assert a["n_kept"].tolist() == [9, 9] and a["lam"].tolist() == [0.03, 0.03]
    assert a["diff"].tolist() == pytest.approx([-0.05, -0.05]) and a["target"].tolist() == pytest.approx([15, 15])
    assert set(misses) == {("B", 0), ("B", 1)} and "keeps 40 of 72 (tolerance +-7.2)" in misses[("B", 0)]
    assert "keeps 0 of 72" in misses[("B", 1)]  # a model whose masks are all empty is a miss, never dropped
    # through the study: the cells' masks keep 6, 3 or 2 of 6 heads; 10/48 of 6 is 1.25, the nearest (2) is 0.75
    # away, beyond 0.1 x 6: not testable, naming each model; the primary reading is unchanged
    v = run(cells(l0_loss=0.005, l0_spread=0.001), roles_of(None))
    row = verdict(v, "voita.most_prunable", setting=PAPER)
    assert row["analysis"] == "sensitivity" and row["verdict"] == "not testable"
    assert "no L0 mask near 10/48 of the heads: A seed 0: the L0 mask nearest 1.25 heads keeps 2 of 6" in row["reason"]
    assert verdict(v, "voita.most_prunable", setting=HALF)["analysis"] == "primary"
    # a mask at the share: tested in the sensitivity family
    near = cells(l0_loss=0.005, l0_spread=0.001)
    near.loc[(near["kind"] == "l0") & (near["n_kept"] == 2), "n_kept"] = 1
    v = run(near, roles_of(None))
    row = verdict(v, "voita.most_prunable", setting=PAPER)
    assert row["analysis"] == "sensitivity" and row["verdict"] == "supported" and row["n_units"] == len(SEEDS)
    fam = claims.family_tests(v)
    assert set(fam.loc[fam["row"] == row.name, "family"]) == {"specialized_heads_l0|sensitivity|zero"}


def test_trained_model_gate_both_ways():
    v = run(cells(full=0.52, chance=0.5), roles_of(None))  # needs > 0.5 + 0.1 x 0.5 = 0.55
    row = verdict(v, "voita.l0_beats_random")
    assert row["verdict"] == "not testable" and "not above chance" in row["reason"]
    assert np.isnan(row["p"])
    gate = declared.TRAINED  # preconditions.TrainedAboveChance(0.1): chance + 0.1 x (1 - chance)
    m = claims.Measurement("A", [0.1], [("A", 0)])
    assert gate.check(m, {"full": {("A", 0): 0.6}, "chance": {"A": 0.5}}) is None
    assert "not above chance" in gate.check(m, {"full": {("A", 0): 0.54}, "chance": {"A": 0.5}})


def test_fine_tuned_model_claims_need_models_trained_to_the_plateau():
    """The convergence gate of studies 1-5, on the curve each scores cell records of its full model: a model stopped
    at its epoch cap still improving makes its task's rows not testable, naming it; cells of before the curve was
    recorded cannot be judged, and say why; the claims about the one pre-trained model are not gated by it."""
    ok = run(cells(l0_spread=0.001), roles_of(None))
    assert verdict(ok, "voita.l0_beats_random")["verdict"] == "supported"
    t = cells(l0_spread=0.001)
    improving = (t["kind"] == "scores") & (t["task"] == "A") & (t["seed"] == 1)
    t.loc[improving, "full_model_history"] = pd.Series([IMPROVING_CURVE], index=t.index[improving])
    v = run(t, roles_of(None))
    row = verdict(v, "voita.l0_beats_random")
    assert row["verdict"] == "not testable" and "not trained to the plateau: 1 of" in row["reason"]
    assert "A seed 1 (best epoch 4 of 4)" in row["reason"]
    assert verdict(v, "voita.l0_beats_random", task="B")["verdict"] == "supported"  # per task: B's models are fine
    old = run(cells(l0_spread=0.001, curve=None), roles_of(None))  # cells without the curve
    row = verdict(old, "voita.l0_beats_random")
    assert row["verdict"] == "not testable" and "cells computed before the curve was recorded" in row["reason"]
    for cid in ("voita.positional_heads", "voita.rare_word_head"):  # about the pre-trained model: no such gate
        reasons = old[old["claim_id"] == cid]["reason"]
        assert len(reasons) and not any("plateau" in r or "curve" in r for r in reasons)
    fine_tuned = [c for c in declared.CLAIMS if declared.TRAINED in c.gates]
    assert fine_tuned and all(declared.CONVERGED in c.gates for c in fine_tuned)


def test_role_claims_need_a_role_found():
    v = run(cells(), roles_of(None, found=False))
    for setting in ("positional", "syntactic", "rare-word"):
        row = verdict(v, "voita.functions_at_17_of_48", setting=setting)
        assert row["verdict"] == "not testable" and f"no head of role '{setting}'" in row["reason"]
    row = verdict(v, "voita.specialized_last_pruned")
    assert row["verdict"] == "not testable" and "specialized" in row["reason"]
    # the survival claims are tested on the share of fine-tuned models with the role (claims.Presence): none found
    # in 4 models
    # per task is k = 0 of 4, whose exact one-sided binomial test cannot reach 0.05 (1/16; it needs 5 models: not
    # testable, never a t-interval [0, 0]); the two tasks pool to 0 of 8, one-sided p = 1 / 2**8, the
    # Clopper-Pearson upper bound 1 - 0.025**(1/8); that p does not survive Holm over every test of the study
    row, pooled = verdict(v, "ours.positional_heads_survive"), verdict(v, "ours.positional_heads_survive", task="all (A, B)")
    assert row["verdict"] == "not testable" and "found in 0 of 4 units" in row["reason"]
    assert "needs 5 units" in row["reason"] and row["tests"] == "[]"
    assert row["effect"] == 0 and row["ci_high"] == pytest.approx(1 - 0.025 ** (1 / 4))
    assert pooled["effect"] == 0 and pooled["p"] == pytest.approx(1 / 2**8)
    assert pooled["p_test"] == "contradicted: share < +0.5 (exact one-sided binomial)"
    assert pooled["ci_high"] == pytest.approx(1 - 0.025 ** (1 / 8))
    assert pooled["verdict"] == "inconclusive" and pooled["p_adjusted"] >= 0.05
    v2 = run(cells(), roles_of(None))
    for cid in ("ours.positional_heads_survive", "ours.rare_word_head_survives"):  # rare-word: (0, 0), the first layer
        row, pooled = verdict(v2, cid), verdict(v2, cid, task="all (A, B)")
        assert row["effect"] == 1 and row["verdict"] == "not testable" and "found in 4 of 4 units" in row["reason"]
        assert pooled["effect"] == 1 and pooled["p"] == pytest.approx(1 / 2**8)
        assert pooled["p_test"] == "supported: share > +0.5 (exact one-sided binomial)"
        assert pooled["ci_low"] == pytest.approx(0.025 ** (1 / 8))
    assert verdict(v2, "voita.functions_at_17_of_48", setting="syntactic")["verdict"] == "not testable"
    # with 8 models per task the pooled share (16 models, p = 1 / 2**16) decides, both ways
    for found, word in ((True, "supported"), (False, "contradicted")):
        v3 = run(cells(seeds=MANY), roles_of(None, found=found, seeds=MANY), seeds=MANY)
        for cid in ("ours.positional_heads_survive", "ours.rare_word_head_survives"):
            pooled = verdict(v3, cid, task="all (A, B)")
            assert pooled["p"] == pytest.approx(1 / 2**16) and pooled["verdict"] == word


def test_role_existence_is_described_on_the_pretrained_model_never_tested():
    """voita.<role>: one row, the pre-trained model (n = 1): not testable by a gate naming the count, no tests."""
    v = run(cells(seeds=MANY), roles_of(None, seeds=MANY), seeds=MANY)  # the survival rows do decide here
    for voita, survives, role in study.ROLE_CLAIMS:
        rows = v[v["claim_id"] == voita]
        assert len(rows) == 1 and rows.iloc[0]["task"] == "pre-trained model"
        row = rows.iloc[0]
        assert row["verdict"] == "not testable" and row["n_units"] == 1 and claims.row_tests(row) == []
        assert np.isnan(row["p"]) and np.isnan(row["p_adjusted"])
        assert "a claim about one pre-trained model (n = 1 model): described, not tested" in row["reason"]
        count = {"positional": 2, "syntactic": 0, "rare-word": 1}[role]
        assert row["effect"] == count and f"the pre-trained MiniLM has {count} {role} head" in row["reason"]
    assert "(0-0, 1-2; layer-head)" in verdict(v, "voita.positional_heads", "pre-trained model")["reason"]
    assert "(0-0; layer-head)" in verdict(v, "voita.rare_word_head", "pre-trained model")["reason"]
    # the fine-tuned copies test the survival claims instead (here, 16 models: decided)
    assert verdict(v, "ours.positional_heads_survive", "all (A, B)")["verdict"] == "supported"
    # no test of these rows is in the study's family
    ft = claims.family_tests(v)
    assert not set(ft["row"]) & set(v.index[v["claim_id"].isin([c for c, _, _ in study.ROLE_CLAIMS])])
    # also when the pre-trained model has every role, or none
    for pretrained in (("positional", "syntactic", "rare-word"), ()):
        v2 = run(cells(), roles_of(None, pretrained=pretrained))
        for voita, _, role in study.ROLE_CLAIMS:
            row = verdict(v2, voita, "pre-trained model")
            assert row["verdict"] == "not testable" and claims.row_tests(row) == [] and row["n_units"] == 1
            assert row["effect"] == (0 if not pretrained else 1 if role == "rare-word" else 2)


def test_a_role_absent_from_the_pretrained_model_cannot_survive():
    v = run(cells(seeds=MANY), roles_of(None, seeds=MANY, pretrained=("rare-word",)), seeds=MANY)
    for task in ("A", "B", "all (A, B)"):  # the fine-tuned models have positional heads, the pre-trained has none
        row = verdict(v, "ours.positional_heads_survive", task)
        assert row["verdict"] == "not testable" and claims.row_tests(row) == []
    assert "the pre-trained model has no positional head: nothing to survive fine-tuning" in verdict(
        v, "ours.positional_heads_survive")["reason"]
    assert "nothing to survive" in verdict(v, "ours.syntactic_heads_survive")["reason"]
    # the role it has is tested as before
    assert verdict(v, "ours.rare_word_head_survives", "all (A, B)")["verdict"] == "supported"
    # no pre-trained row at all (its roles cell missing): every role row is not testable, with that reason
    v2 = run(cells(), roles_of(None, pretrained=None))
    for voita, survives, _ in study.ROLE_CLAIMS:
        row = verdict(v2, voita, "pre-trained model")
        assert row["verdict"] == "not testable" and "not measured" in row["reason"] and claims.row_tests(row) == []
        for task in ("A", "B", "all (A, B)"):
            assert verdict(v2, survives, task)["verdict"] == "not testable"
        assert "roles are not measured" in verdict(v2, survives)["reason"]


def test_specialized_last_pruned_within_layers_both_ways():
    v = run(cells(spec_first=False), roles_of(None))
    row = verdict(v, "voita.specialized_last_pruned")
    assert row["effect"] == pytest.approx(0.5)  # every model: AUC 1, identical values: the exact test runs
    assert row["verdict"] == "not testable" and "needs 5 units" in row["reason"], \
        "4 models agreeing: the exact one-sided test cannot go below 1/16"
    assert row["margin"] == pytest.approx(0.05) and "0.1 x the distance from chance (AUC 0.5)" in row["test"]  # margins.AUC
    v2 = run(cells(spec_first=True), roles_of(None))
    assert verdict(v2, "voita.specialized_last_pruned")["effect"] < 0  # specialized heads pruned first
    # 8 models per task: the pooled row (16 models) decides, both ways
    many = run(cells(seeds=MANY), roles_of(None, seeds=MANY), seeds=MANY)
    assert verdict(many, "voita.specialized_last_pruned", "all (A, B)")["verdict"] == "supported"
    many = run(cells(seeds=MANY, spec_first=True), roles_of(None, seeds=MANY), seeds=MANY)
    pooled = verdict(many, "voita.specialized_last_pruned", "all (A, B)")
    assert pooled["verdict"] == "contradicted" and pooled["effect"] < 0
    # the AUC is taken within a layer: a layer's heads all outlasting another layer's do not count
    table = cells()
    roles = roles_of(None)
    auc = study.survival_auc_per_model(study.survival_heads(table), roles)
    assert (auc["n_layers"] == 2).all() and (auc["auc"] == 1.0).all()


def test_functions_present_beyond_chance():
    assert random_keeps(6, 2, 2) == pytest.approx(1 - 6 / 15)
    assert presence_effect(True, 0.6) == pytest.approx(0.4) and presence_effect(False, 0.6) == pytest.approx(-0.6)
    v = run(cells(), roles_of(None))
    row = verdict(v, "voita.functions_at_17_of_48", setting="positional")
    assert row["effect"] == pytest.approx(0.4)  # identical in the 4 models: the exact one-sided test cannot reach 0.05
    assert row["margin"] == pytest.approx(0.1) and row["verdict"] == "not testable"  # margins.SHARE_OF_HEADS
    assert "needs 5 units" in row["reason"]
    v2 = run(cells(spec_first=True), roles_of(None))
    assert verdict(v2, "voita.functions_at_17_of_48", setting="positional")["effect"] < 0
    # 8 models per task: the pooled row (16 models) decides, both ways
    for spec_first, word in ((False, "supported"), (True, "contradicted")):
        many = run(cells(seeds=MANY, spec_first=spec_first), roles_of(None, seeds=MANY), seeds=MANY)
        for role in ("positional", "rare-word"):
            pooled = verdict(many, "voita.functions_at_17_of_48", "all (A, B)", setting=role)
            assert pooled["verdict"] == word and pooled["p"] < 1e-3


def test_functions_beyond_chance_need_room_above_chance():
    """A role so large that a random mask of the size read keeps one of its heads almost surely leaves no room to
    beat chance by the margin: the row is not testable (the word would come from the design), whatever the masks
    keep; a role with room is decided as before."""
    assert random_keeps(6, 2, 5) == 1.0  # 5 of 6 heads: every 2-head mask keeps one
    roles = roles_of(None, seeds=MANY)
    big = roles["source"] != "pretrained"
    roles.loc[big, "positional"] = ~((roles.loc[big, "layer"] == 0) & (roles.loc[big, "head"] == 1))  # 5 of 6
    many = run(cells(seeds=MANY), roles, seeds=MANY)
    for task in ("A", "all (A, B)"):
        row = verdict(many, "voita.functions_at_17_of_48", task, setting="positional")
        assert row["verdict"] == "not testable", row["reason"]
        assert "largest effect any mask could show, 0, is not above the margin 0.1" in row["reason"] or \
            task.startswith("all"), row["reason"]
    # the rare-word role (one head) has room: its rows are decided as before
    assert verdict(many, "voita.functions_at_17_of_48", "all (A, B)", setting="rare-word")["verdict"] == "supported"
    gate = declared.CLAIM["voita.functions_at_17_of_48"].gates[-1]
    assert isinstance(gate, RoomAboveChance)
    m = claims.Measurement("A", [0.01, 0.01], [("A", 0), ("A", 1)], "syntactic", "zero", "", "model")
    chances = {(("A", 0), "syntactic"): 0.985, (("A", 1), "syntactic"): 0.95}
    assert "0.0325, is not above the margin 0.1" in gate.check(m, {"role_chances": chances})
    assert gate.check(m, {"role_chances": {k: 0.5 for k in chances}}) is None
    assert gate.check(m, {}) == "the chance that a random mask keeps the role is not measured"
    # a unit whose chance is not recorded (a key that does not match) is named, never passed silently
    why = gate.check(m, {"role_chances": {(("A", 0), "syntactic"): 0.5}})
    assert why.startswith("the chance that a random mask keeps a syntactic head is not recorded for 1 of the 2")


def test_important_are_confident_both_ways_and_holm_over_the_study():
    v = run(cells(), roles_of(None), rho=0.5)
    assert verdict(v, "voita.important_are_confident", setting=EVERY_KEY)["verdict"] == "supported"
    v2 = run(cells(), roles_of(None), rho=-0.5)
    assert verdict(v2, "voita.important_are_confident", setting=EVERY_KEY)["verdict"] == "contradicted"
    # rho about 0 (-0.015 to +0.015): below the smallest of interest (margins.CORRELATION, 0.1): not supported
    v3 = run(cells(), roles_of(None), rho=-0.015)
    pooled = verdict(v3, "voita.important_are_confident", "all (A, B)", setting=EVERY_KEY)
    assert pooled["margin"] == pytest.approx(0.1) and pooled["verdict"] == "not supported"
    # Holm over the study: every test of every tested row (both directions, and the margin's) in one family, and
    # each row's p_adjusted is its deciding test's adjusted p
    ft = holm_over_the_study(v)
    rows = ft[ft["row"] == verdict(v, "voita.important_are_confident", setting=EVERY_KEY).name]
    assert list(rows["word"]) == ["supported", "contradicted", "not supported"]
    assert verdict(v, "voita.important_are_confident", setting=EVERY_KEY)["p_adjusted"] == rows["p_adjusted"].iloc[0]


def test_important_are_confident_under_both_definitions_of_confidence():
    """One row per definition (setting) and task, each tested on its own Spearman: the special-key-free reading (the
    claim's own, Voita et al. exclude EOS) in the study's Holm family, the every-key reading a sensitivity analysis in
    its own. Cells without the special-key-free confidence (RESULTS_VERSION 1) make its rows not testable, with that
    reason."""
    v = run(cells(), roles_of(None), rho=0.5, rho_no_special=-0.5)
    assert verdict(v, "voita.important_are_confident", setting=EVERY_KEY)["verdict"] == "supported"
    row = verdict(v, "voita.important_are_confident", setting=NO_SPECIAL)
    assert row["verdict"] == "contradicted" and "confidence_no_special_keys" in row["test"]
    assert verdict(v, "voita.important_are_confident", "all (A, B)", setting=NO_SPECIAL)["n_units"] == 8
    tested = v[v["tests"] != "[]"]
    assert (tested["claim_id"] == "voita.important_are_confident").sum() == 6  # 2 tasks + pool, x 2 definitions
    ft = holm_over_the_study(v)
    assert set(ft["row"]) == set(tested.index)
    conf = v[v["claim_id"] == "voita.important_are_confident"]
    assert set(conf.loc[conf["setting"] == NO_SPECIAL, "analysis"]) == {"primary"}
    assert set(conf.loc[conf["setting"] == EVERY_KEY, "analysis"]) == {"sensitivity"}
    every = ft[ft["row"].isin(conf.index[conf["setting"] == EVERY_KEY])]
    assert set(every["family"]) == {"specialized_heads_l0|sensitivity|zero"}  # its own family, not the study's
    old = verdict(run(cells(), roles_of(None)), "voita.important_are_confident", setting=NO_SPECIAL)
    assert old["verdict"] == "not testable" and "do not record confidence_no_special_keys" in old["reason"]


def test_tasks_decided_each_way_give_no_pooled_verdict():
    a, b = cells(l0_gain=0.2), cells(l0_gain=-0.2)
    table = pd.concat([a[a["task"] == "A"], b[b["task"] == "B"]], ignore_index=True)
    v = run(table, roles_of(None))
    pooled = verdict(v, "voita.l0_beats_random", "all (A, B)")
    assert pooled["verdict"] == "inconclusive"  # a task decided each way: never the pool's word over a task


def test_a_task_without_masks_is_not_testable_with_its_reason():
    table = cells()
    table = table[~((table["kind"] == "l0") & (table["task"] == "B") & (table["n_kept"] <= 3))]
    v = run(table, roles_of(None))
    row = verdict(v, "voita.most_prunable", "B", setting=HALF)
    assert row["verdict"] == "not testable" and "no L0 mask keeps fewer than half" in row["reason"]
    assert row["n_units"] == 0


def test_the_plateau_rule():
    h = [{"dev_loss": x} for x in (5.0, 4.0, 3.9, 3.95, 3.91, 3.92)]
    assert plateau(h, 3) is None
    assert "not reached a plateau" in plateau(h[:4], 3)
    assert "cannot be judged" in plateau(h[:2], 3)


# ---------------------------------------------------------------------------------------------- the claims as data
def notebook_code(name: str) -> str:
    nb = json.loads((notebooks_dir() / name).read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


def test_every_claim_is_data_with_a_rule_gates_and_a_figure_the_notebook_writes():
    text = notebook_code(study.STUDY.notebook)
    assert study.CLAIMS is declared.CLAIMS and study.STUDY.claims is declared.CLAIMS
    for c in study.CLAIMS:
        assert isinstance(c, claims.Claim) and isinstance(c.rule, claims.RULES), c.id
        assert c.gates and all(isinstance(g, claims.Gate) for g in c.gates), c.id
        assert c.figure and f'out.figure("{c.figure}"' in text, f"{c.id}: the notebook writes no figure {c.figure!r}"
        assert c.measure in study.MEASURES, c.id
        assert c.metric and c.regime and c.note, c.id
        assert "margin" not in c.metric, f"{c.id}: the margin renders itself (the rule), not in the metric"
    # the claims that train nothing (the pre-trained model) are never gated on a trained model; all the others are
    trained = {c.id for c in study.CLAIMS if declared.TRAINED in c.gates}
    assert trained == {c.id for c in study.CLAIMS} - {voita for voita, _, _ in study.ROLE_CLAIMS}
    # the rare-word claims say where the criterion differs from the paper's
    for cid in ("voita.rare_word_head", "ours.rare_word_head_survives"):
        note = declared.CLAIM[cid].note
        assert "66%" in note and "word pieces" in note and "top-500" in note and "frequency corpus" in note


def test_a_gate_that_is_not_a_gate_object_is_refused():
    with pytest.raises(TypeError, match="Gate"):
        claims.Claim("voita.x", "p", "t.", claims.Presence(), gates=(lambda m: None,))


def test_an_absent_measurement_is_a_not_testable_row_through_evaluate():
    """A task with no L0 mask keeping fewer than half: its measurement is absent (Measurement.absent), and evaluate
    gives its row: not testable with that reason, no numbers, no tests, outside the Holm family."""
    table = cells()
    table = table[~((table["kind"] == "l0") & (table["task"] == "B") & (table["n_kept"] <= 3))]
    v = run(table, roles_of(None))
    row = verdict(v, "voita.most_prunable", "B", setting=HALF)
    assert row["verdict"] == "not testable" and row["reason"] == "no L0 mask keeps fewer than half of the heads on B"
    assert row["n_units"] == 0 and row["tests"] == "[]" and row["unit_values"] == "[]" and np.isnan(row["p"])
    half = (v["claim_id"] == "voita.most_prunable") & (v["setting"] == HALF)
    assert not (v["task"] == "all (A, B)")[half].any(), "an absent task pools nothing"
    assert row.name not in set(claims.family_tests(v)["row"])
    # the same through the claims layer directly
    m = claims.Measurement.absent("B", "no roles measured on B", unit=declared.UNIT)
    r = claims.evaluate(declared.CLAIM["ours.positional_heads_survive"], [m], evidence={}, study=study.NAME).iloc[0]
    assert r["verdict"] == "not testable" and r["reason"] == "no roles measured on B" and r["n_units"] == 0
    # the pre-trained model's roles cell missing: its existence rows are absent, for that reason
    v2 = run(cells(), roles_of(None, pretrained=None))
    row = verdict(v2, "voita.rare_word_head", "pre-trained model")
    assert row["reason"] == "the pre-trained model's roles are not measured (its roles cell is missing)"
    assert row["n_units"] == 0 and np.isnan(row["effect"])


def test_rows_read_off_gates_still_moving_at_their_last_step_are_not_testable():
    """The gates of model (A, 1) at lambda 0.1 were still closing when their steps ran out: every L0 row of task A
    (they stand on all of a model's lambdas) is not testable, naming them and what moved; task B, and the claims not
    read off the gates, are decided as before. The rule's own edges: a count unchanged but the expected open gates
    moving by a head is not settled; no history is nothing to judge."""
    base = run(cells(), roles_of(None))
    v = run(cells(unsettled={("A", 1, 0.1)}), roles_of(None))
    l0_claims = {c.id for c in study.CLAIMS if preconditions.GatesSettled() in c.gates}
    assert {"voita.most_prunable", "voita.l0_beats_random", "ours.l0_vs_importance"} <= l0_claims
    assert "voita.important_are_confident" not in l0_claims
    a = v[v["claim_id"].isin(l0_claims) & (v["task"] == "A") & (v["n_units"] > 0)]
    assert len(a) and (a["verdict"] == "not testable").all()
    assert a["reason"].str.contains("L0 gates not settled: 1 of ", regex=False).all()
    assert a["reason"].str.contains("lambda 0.1 of A seed 1: -1 heads open and -1.50 expected open over its last 2 "
                                    "of 20 steps", regex=False).all()
    cols = ["claim_id", "setting", "verdict"]
    for t in ("B",):
        pd.testing.assert_frame_equal(v.loc[v["task"] == t, cols].reset_index(drop=True),
                                      base.loc[base["task"] == t, cols].reset_index(drop=True))
    assert verdict(v, "voita.important_are_confident", setting=EVERY_KEY)["verdict"] == \
        verdict(base, "voita.important_are_confident", setting=EVERY_KEY)["verdict"]
    flat_count = [{"step": i, "open": 5, "expected_l0": 9.0 - (i >= 18) * 1.2} for i in range(20)]
    assert preconditions.gates_settled(flat_count)[0] is False
    assert preconditions.gates_settled(gate_steps(4))[0] is True
    assert preconditions.gates_settled(None)[0] is None and preconditions.gates_settled([{"step": 0}])[0] is None
    # a long run judged on its last tenth: 300 steps, the count moving at step 250 is outside it
    late = [{"step": i, "open": 10 if i < 250 else 9, "expected_l0": 9.2} for i in range(300)]
    assert preconditions.gates_settled(late) == (True, "+0 heads open and +0.00 expected open over its last 30 of "
                                                       "300 steps")


def test_mrpc_is_scored_by_accuracy_where_its_cells_store_it_for_every_mask():
    """MRPC's claims are decided by accuracy (TaskSpec.verdict_metric) where its cells store every mask's metrics:
    each score, the L0 cells' copy of the full model's, the random masks' mean and the chance level (the constant
    "paraphrase" predictor: F1 0.8 -> accuracy 0.8 / 1.2) rewritten; cells with F1 only stay in F1; a mix of the two
    in one task is refused, naming it; SST-2 (decided by its main metric) is untouched."""
    from headprune_utils.studies import specialized_heads_l0_analysis as an

    def m(acc, f1):
        return {"accuracy": acc, "f1": f1}

    def rows(task="MRPC", metrics=True, seeds=(0, 1)):
        out = []
        for s in seeds:
            sc = {"kind": "scores", "task": task, "seed": s, "score_full": 0.86, "chance": 0.8, "metric": "f1"}
            l0 = {"kind": "l0", "task": task, "seed": s, "lam": 0.1, "score_full": 0.86, "chance": 0.8, "metric": "f1",
                  "score_l0": 0.85, "score_random": [0.82, 0.80], "score_random_mean": 0.81, "score_importance": 0.84}
            if metrics:
                sc["metrics_full"] = m(0.79 + s / 100, 0.86)
                l0.update(metrics_l0=m(0.77, 0.85), metrics_random=[m(0.70, 0.82), m(0.68, 0.80)],
                          metrics_importance=m(0.75, 0.84))
            out += [sc, l0]
        return out

    t = pd.DataFrame(rows() + [{"kind": "scores", "task": "SST-2", "seed": 0, "score_full": 0.9, "chance": 0.5,
                                "metric": "accuracy", "metrics_full": {"accuracy": 0.9}}])
    v = an.in_verdict_metric(t)
    mrpc = v[v["task"] == "MRPC"]
    assert (mrpc["metric"] == "accuracy").all() and np.allclose(mrpc["chance"].astype(float), 0.8 / 1.2)
    l0 = mrpc[mrpc["kind"] == "l0"].set_index("seed")
    assert l0.loc[1, "score_full"] == pytest.approx(0.80) and l0.loc[0, "score_full"] == pytest.approx(0.79)
    assert l0.loc[0, "score_l0"] == 0.77 and l0.loc[0, "score_random"] == [0.70, 0.68]
    assert l0.loc[0, "score_random_mean"] == pytest.approx(0.69) and l0.loc[0, "score_importance"] == 0.75
    pd.testing.assert_frame_equal(v[v["task"] == "SST-2"], t[t["task"] == "SST-2"])
    assert t.loc[t["task"] == "MRPC", "metric"].eq("f1").all()  # the input is not changed
    old = pd.DataFrame(rows(metrics=False))
    pd.testing.assert_frame_equal(an.in_verdict_metric(old), old)  # F1 only (the standard profile's cells): F1
    # ... as the standard profile stores them: its scores cells keep the full model's metrics, its L0 cells F1 only
    std = old.copy()
    std["metrics_full"] = [m(0.79, 0.86) if k == "scores" else None for k in std["kind"]]
    pd.testing.assert_frame_equal(an.in_verdict_metric(std), std)
    with pytest.raises(ValueError, match=r"MRPC's cells store 'accuracy' .* in 2 of 4 cells.*--fresh --where task=MRPC"):
        an.in_verdict_metric(pd.DataFrame(rows(seeds=(0,)) + rows(metrics=False, seeds=(1,))))
    assert study.STUDY.scored(t)["metric"].tolist() == v["metric"].tolist()  # what run_study returns


def test_most_heads_pruned_means_fewer_than_half_kept():
    """``voita.most_prunable`` reads the L0 mask keeping the most heads among those keeping FEWER than half: a mask
    keeping exactly half has not pruned most heads (the fixture's 3 of 6 at lambda 0.1), so the 2 of 6 one is read."""
    from headprune_utils.studies import specialized_heads_l0_analysis as an

    curve = an.l0_curve(cells())
    assert ((curve["n_kept"] == 3) & (curve["n_heads_total"] == 6)).any()  # exactly half: not read
    rows = an.most_prunable_rows(curve)
    assert len(rows) == len(TASKS) * len(SEEDS) and (rows["n_kept"] == 2).all() and (rows["lam"] == 1.0).all()


def test_the_mask_read_at_17_of_48_must_be_near_that_size():
    """voita.functions_at_17_of_48 reads the L0 mask nearest its budget (here 1/3 of 6 heads: 2); one kept within a tenth
    of the heads of it (0.6) is read; a model whose nearest mask keeps 3 (no lambda pruned it to 2) makes its
    task's rows not testable, naming it (role_survival.AtBudget); the other task's rows stand."""
    from headprune_utils.studies import role_survival

    budget = pd.DataFrame([{"task": "A", "seed": 0, "n_kept": 2, "target": 2.125, "n_heads_total": 6},
                           {"task": "B", "seed": 1, "n_kept": 3, "target": 2.125, "n_heads_total": 6}])
    misses = role_survival.budget_misses(budget, lambda r: (r["task"], r["seed"]), lambda r: f"{r['task']} s{r['seed']}")
    assert list(misses) == [("B", 1)] and "keeps 3 of 6 (tolerance +-0.6, 0.1 of the heads)" in misses[("B", 1)]
    gate = role_survival.AtBudget()
    m = claims.Measurement("B", [0.4, 0.4], [("B", 0), ("B", 1)], "positional")
    assert gate.check(m, {"budget_misses": misses}).startswith("no L0 mask near 17/48 of the heads: B s1")
    assert gate.check(replace_units(m, [("B", 0)]), {"budget_misses": misses}) is None
    assert "not measured" in gate.check(m, {})
    table = cells()
    table = table[~((table["kind"] == "l0") & (table["task"] == "B") & (table["seed"] == 1) & (table["n_kept"] == 2))]
    v = run(table, roles_of(None))
    for role in ("positional", "rare-word"):
        b = verdict(v, "voita.functions_at_17_of_48", "B", setting=role)
        assert b["verdict"] == "not testable" and "B seed 1: the L0 mask nearest 2 heads keeps 3 of 6" in b["reason"]
        a = verdict(v, "voita.functions_at_17_of_48", "A", setting=role)
        assert "no L0 mask near" not in a["reason"]


def replace_units(m, units):
    import dataclasses

    return dataclasses.replace(m, values=[0.4] * len(units), units=units)
