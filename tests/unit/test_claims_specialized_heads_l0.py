"""Study 6's claims on hand-made tables: each claim's wiring gives the expected verdict both ways, the gates (trained
model, role found) both ways, per task then pooled, the survival AUC stratified by layer, and no NaN in the text."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from headprune_utils import claims
from headprune_utils.masks import mask_to_string
from headprune_utils.role_survival import random_keeps
from headprune_utils.studies import specialized_heads_l0 as study
from headprune_utils.verdict_rules import plateau, presence_effect, trained_gate

TASKS = ("A", "B")
SEEDS = (0, 1, 2, 3)
L, H = 2, 3  # 6 heads; (0, 0) and (1, 2) are the specialized (positional) heads
SPEC = {(0, 0), (1, 2)}


def cells(full=0.9, chance=0.5, l0_gain=0.2, imp_gap=0.0, spec_first=False, rho=0.5, l0_loss=0.005):
    """Scores cells (full score, chance, Spearman via relevance/confidence grids) and L0 cells per (task, seed)."""
    rows = []
    rng = np.random.default_rng(0)
    for task in TASKS:
        for seed in SEEDS:
            jitter = 0.002 * seed
            conf = rng.random((L, H))
            rel = conf if rho > 0 else -conf
            rows.append({"kind": "scores", "task": task, "seed": float(seed), "score_full": full + jitter,
                         "chance": chance, "relevance": rel.tolist(), "confidence": conf.tolist()})
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
                             "score_l0": full + jitter - (l0_loss if pruned else 0.0),
                             "score_random_mean": full + jitter - (l0_gain if pruned else 0.0) + 0.003 * seed,
                             "score_importance": full + jitter - (imp_gap if pruned else 0.0) + 0.001 * seed})
    return pd.DataFrame(rows)


def roles_of(table, found=True):
    rows = []
    for task in TASKS:
        for seed in SEEDS:
            for layer in range(L):
                for head in range(H):
                    s = found and (layer, head) in SPEC
                    rows.append({"source": task, "task": task, "seed": seed, "layer": layer, "head": head,
                                 "positional": s, "syntactic": False, "rare": s and layer == 0, "specialized": s,
                                 "role": "positional" if s else "other"})
    return pd.DataFrame(rows)


def agreement_of(rho, rho_no_special=None):
    """Spearman(relevance, confidence) per model; with ``rho_no_special`` also the special-key-free confidence's."""
    rows = [{"task": t, "seed": s, "a": "relevance", "b": "confidence", "spearman": rho + 0.01 * s}
            for t in TASKS for s in SEEDS]
    if rho_no_special is not None:
        rows += [{"task": t, "seed": s, "a": "confidence_no_special_keys", "b": "relevance",
                  "spearman": rho_no_special + 0.01 * s} for t in TASKS for s in SEEDS]
    return pd.DataFrame(rows)


EVERY_KEY, NO_SPECIAL = study.CONFIDENCES["confidence"], study.CONFIDENCES["confidence_no_special_keys"]


def run(table, roles, rho=0.5, rho_no_special=None):
    surv = study.survival_heads(table)
    budget = study.roles_at_budget(table, roles, fraction=1 / 3)
    v = study.verdicts(table, agreement_of(rho, rho_no_special), roles, surv, budget, semantics="zero",
                       scale_="hand-made")
    claims.validate(v)
    text = claims.render(v)
    assert "nan" not in text.lower()
    return v


def verdict(v, cid, task="A", setting=None):
    rows = v[(v["claim_id"] == cid) & (v["task"] == task)]
    if setting is not None:
        rows = rows[rows["setting"] == setting]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_every_claim_has_a_rule_and_a_row():
    v = run(cells(), roles_of(None))
    assert set(study.RULES) == {c.id for c in study.CLAIMS} == set(v["claim_id"])
    assert (v["study"] == "specialized_heads_l0").all() and (v["semantics"] == "zero").all()
    assert (v["unit"] == "model (task x seed)").all()
    assert {c.id: c for c in study.CLAIMS}["exploratory.l0_vs_importance"].paper == "ours (exploratory)"
    confident = {c.id: c for c in study.CLAIMS}["voita.important_are_confident"]
    assert "EOS" in confident.quantity and "BOTH" in confident.quantity and "not measured" not in confident.precondition


def test_l0_beats_random_both_ways_per_task_and_pooled():
    v = run(cells(l0_gain=0.2), roles_of(None))
    assert verdict(v, "voita.l0_beats_random")["verdict"] == "supported"
    pooled = verdict(v, "voita.l0_beats_random", "all (A, B)")
    assert pooled["verdict"] == "supported" and pooled["n_units"] == 8
    # pooled effect normalised by (full - chance): L0 loses 0.005, random 0.2 - 0.003 seed; headroom 0.4 + jitter
    assert pooled["effect"] == pytest.approx(np.mean([(0.195 - 0.003 * s) / (0.4 + 0.002 * np.mean(SEEDS))
                                                      for s in SEEDS]))
    v2 = run(cells(l0_gain=-0.2), roles_of(None))
    assert verdict(v2, "voita.l0_beats_random")["verdict"] == "contradicted"
    # one value per model: the lambdas of a model are averaged, never replicates
    assert verdict(v, "voita.l0_beats_random")["n_units"] == len(SEEDS)


def test_l0_vs_importance_is_an_equivalence_with_a_headroom_margin():
    v = run(cells(imp_gap=0.0), roles_of(None))
    row = verdict(v, "exploratory.l0_vs_importance")
    assert row["verdict"] == "supported" and row["margin"] == pytest.approx(0.1 * (0.9 + 0.003 - 0.5))
    assert "0.1 x (full - chance)" in row["test"]
    v2 = run(cells(imp_gap=-0.3, l0_loss=0.0), roles_of(None))  # importance far better: outside the margin
    assert verdict(v2, "exploratory.l0_vs_importance")["verdict"] == "contradicted"


def test_most_prunable_is_non_inferiority_at_half_the_heads():
    v = run(cells(l0_loss=0.005), roles_of(None))
    row = verdict(v, "voita.most_prunable")
    assert row["verdict"] == "supported" and row["setting"] == "<= half the heads kept"
    v2 = run(cells(l0_loss=0.3), roles_of(None))
    assert verdict(v2, "voita.most_prunable")["verdict"] == "contradicted"


def test_trained_model_gate_both_ways():
    v = run(cells(full=0.52, chance=0.5), roles_of(None))  # needs > 0.5 + 0.1 x 0.5 = 0.55
    row = verdict(v, "voita.l0_beats_random")
    assert row["verdict"] == "not testable" and "not above chance" in row["reason"]
    assert np.isnan(row["p"])
    gate = trained_gate({("A", 0): 0.6}, {"A": 0.5})
    m = claims.Measurement("A", [0.1], [("A", 0)])
    assert gate(m) is None
    assert "not above chance" in trained_gate({("A", 0): 0.54}, {"A": 0.5})(m)


def test_role_claims_need_a_role_found():
    v = run(cells(), roles_of(None, found=False))
    for setting in ("positional", "syntactic", "rare-word"):
        row = verdict(v, "voita.functions_at_17_of_48", setting=setting)
        assert row["verdict"] == "not testable" and f"no head of role '{setting}'" in row["reason"]
    row = verdict(v, "voita.specialized_last_pruned")
    assert row["verdict"] == "not testable" and "specialized" in row["reason"]
    # existence claims are tested on the share of models with the role (claims.Presence): none found in 4 models
    # per task is k = 0 of 4, whose exact binomial test cannot reach 0.05 (not testable, never a t-interval [0, 0]);
    # the two tasks pool to 0 of 8, p = 2 / 2**8, the Clopper-Pearson upper bound 1 - 0.025**(1/8)
    row, pooled = verdict(v, "voita.positional_heads"), verdict(v, "voita.positional_heads", task="all (A, B)")
    assert row["verdict"] == "not testable" and "found in 0 of 4 units" in row["reason"]
    assert row["effect"] == 0 and row["ci_high"] == pytest.approx(1 - 0.025 ** (1 / 4))
    assert pooled["effect"] == 0 and pooled["p"] == pytest.approx(2 / 2**8)
    assert pooled["ci_high"] == pytest.approx(1 - 0.025 ** (1 / 8)) and pooled["verdict"] in ("contradicted", "not supported")
    v2 = run(cells(), roles_of(None))
    for cid in ("voita.positional_heads", "voita.rare_word_head"):  # rare-word: (0, 0), the first layer
        row, pooled = verdict(v2, cid), verdict(v2, cid, task="all (A, B)")
        assert row["effect"] == 1 and row["verdict"] == "not testable" and "found in 4 of 4 units" in row["reason"]
        assert pooled["effect"] == 1 and pooled["p"] == pytest.approx(2 / 2**8)
        assert pooled["ci_low"] == pytest.approx(0.025 ** (1 / 8))
    assert verdict(v2, "voita.functions_at_17_of_48", setting="syntactic")["verdict"] == "not testable"


def test_specialized_last_pruned_within_layers_both_ways():
    v = run(cells(spec_first=False), roles_of(None))
    row = verdict(v, "voita.specialized_last_pruned")
    assert row["effect"] == pytest.approx(0.5) and row["p"] == pytest.approx(2 / 2**4)  # every model: AUC 1
    assert row["verdict"] == "inconclusive", "4 models agreeing cannot reach 0.05 after Holm, exactly tested"
    v2 = run(cells(spec_first=True), roles_of(None))
    assert verdict(v2, "voita.specialized_last_pruned")["effect"] < 0  # specialized heads pruned first
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
    assert row["effect"] == pytest.approx(0.4) and row["p"] == pytest.approx(2 / 2**4)
    v2 = run(cells(spec_first=True), roles_of(None))
    assert verdict(v2, "voita.functions_at_17_of_48", setting="positional")["effect"] < 0


def test_important_are_confident_both_ways_and_holm_over_the_study():
    v = run(cells(), roles_of(None), rho=0.5)
    assert verdict(v, "voita.important_are_confident", setting=EVERY_KEY)["verdict"] == "supported"
    v2 = run(cells(), roles_of(None), rho=-0.5)
    assert verdict(v2, "voita.important_are_confident", setting=EVERY_KEY)["verdict"] == "contradicted"
    tested = v[v["p"].notna()]
    assert np.allclose(tested["p_adjusted"], claims.stats.holm(tested["p"].to_numpy()))


def test_important_are_confident_under_both_definitions_of_confidence():
    """One row per definition (setting) and task, each tested on its own Spearman; both in the Holm family. Cells
    without the special-key-free confidence (RESULTS_VERSION 1) make its rows not testable, with that reason."""
    v = run(cells(), roles_of(None), rho=0.5, rho_no_special=-0.5)
    assert verdict(v, "voita.important_are_confident", setting=EVERY_KEY)["verdict"] == "supported"
    row = verdict(v, "voita.important_are_confident", setting=NO_SPECIAL)
    assert row["verdict"] == "contradicted" and "confidence_no_special_keys" in row["test"]
    assert verdict(v, "voita.important_are_confident", "all (A, B)", setting=NO_SPECIAL)["n_units"] == 8
    tested = v[v["p"].notna()]
    assert (tested["claim_id"] == "voita.important_are_confident").sum() == 6  # 2 tasks + pool, x 2 definitions
    assert np.allclose(tested["p_adjusted"], claims.stats.holm(tested["p"].to_numpy()))
    old = verdict(run(cells(), roles_of(None)), "voita.important_are_confident", setting=NO_SPECIAL)
    assert old["verdict"] == "not testable" and "do not record confidence_no_special_keys" in old["reason"]


def test_tasks_that_disagree_give_no_pooled_verdict():
    a, b = cells(l0_gain=0.2), cells(l0_gain=-0.2)
    table = pd.concat([a[a["task"] == "A"], b[b["task"] == "B"]], ignore_index=True)
    v = run(table, roles_of(None))
    pooled = verdict(v, "voita.l0_beats_random", "all (A, B)")
    assert pooled["verdict"] == "inconclusive" and pooled["reason"].startswith("tasks disagree")


def test_a_task_without_masks_is_not_testable_with_its_reason():
    table = cells()
    table = table[~((table["kind"] == "l0") & (table["task"] == "B") & (table["n_kept"] <= 3))]
    v = run(table, roles_of(None))
    row = verdict(v, "voita.most_prunable", "B")
    assert row["verdict"] == "not testable" and "no L0 mask keeps at most half" in row["reason"]
    assert row["n_units"] == 0


def test_the_plateau_rule():
    h = [{"dev_loss": x} for x in (5.0, 4.0, 3.9, 3.95, 3.91, 3.92)]
    assert plateau(h, 3) is None
    assert "not reached a plateau" in plateau(h[:4], 3)
    assert "cannot be judged" in plateau(h[:2], 3)
