"""Study 3's claims (claims model) on hand-made per-run tables: each claim's verdict in both directions, the gates'
both branches, per-task then pooled, absent measurements, the claims as data (rule, gate objects, a figure the
notebook writes), and no NaN in the rendered text."""
from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from headprune_utils.analysis import claims, margins
from headprune_utils.studies.config import validate
from headprune_utils.store.paths import notebooks_dir
from headprune_utils.studies import compensation as study


@pytest.fixture(scope="module")
def cfg(tiny_model_dir, tiny_glue_root):
    return validate(study.CompensationConfig, dict(
        model=str(tiny_model_dir), tasks=["SST-2"], seeds=[0, 1, 2], train_size=None, dev_size=None, epochs=1,
        device="cpu", data_dir=str(tiny_glue_root), allow_hub=False, progress=False))


def runs(excess=(0.0, 0.0), noise_sd=0.05, shift=(0.2, 0.2), rho_lc=(0.5, 0.5), rho=0.3, strategy="random",
         tasks=("A", "B"), seeds=(0, 1, 2, 3), measures=("weight_change",), jitter=0.01, ablation="uniform") -> pd.DataFrame:
    """One row per run (task x seed) like ``spread_tests``, all under the semantics ``ablation``: per task, ``excess`` / ``shift`` / ``rho_lc`` give the
    mean of that task's units (small jitter between seeds); the noise dispersion varies with SD ``noise_sd``. The
    dispersion's kind is the one ``spread_tests`` gives the measure (importance: an sd of differences)."""
    rng = np.random.default_rng(0)
    rows = []
    for ti, task in enumerate(tasks):
        noise = 0.3 + noise_sd * rng.standard_normal(len(seeds))
        for si, s in enumerate(seeds):
            for m in measures:
                j = jitter * (si - (len(seeds) - 1) / 2)
                rows.append({"task": task, "ablation": ablation, "seed": s, "strategy": strategy, "budget": 0.5, "measure": m,
                             "dispersion_kind": "sd of differences" if m == "importance" else "Gini of ratios",
                             "dispersion": noise[si] + excess[ti] + j,
                             "dispersion_noise": noise[si], "excess_dispersion": excess[ti] + j,
                             "mean_shift": shift[ti] + j, "rho_pruned_in_layer": rho + j, "rho_pruned_adjacent": rho + j,
                             "rho_lc_pruned_in_layer": np.nan if rho_lc is None else rho_lc[ti] + j,
                             "rho_lc_pruned_adjacent": np.nan if rho_lc is None else rho_lc[ti] + j})
    return pd.DataFrame(rows)


def rows_of(table, cid, task=None, setting_has=""):
    t = table[(table["claim_id"] == cid) & table["setting"].str.contains(setting_has, regex=False)]
    return t if task is None else t[t["task"] == task]


def verdict(table, cid, task, setting_has=""):
    r = rows_of(table, cid, task, setting_has)
    assert len(r) == 1, r
    return r.iloc[0]


def test_layout_scale_and_no_nan(cfg):
    v = study.verdicts(runs(), cfg)
    assert tuple(v.columns) == claims.COLUMNS
    claims.validate(v)
    assert set(v["claim_id"]) == {c.id for c in study.STUDY.claims}
    assert (v["semantics"] == "uniform").all() and (v["analysis"] == "primary").all()
    assert all(c.semantics == "uniform" for c in study.STUDY.claims)  # Budhraja et al.'s BERT code, and ours re-read it
    assert v["scale"].str.contains("small-scale test, not the paper's set-up").all()
    assert v["scale"].str.contains("seeds 0, 1, 2").all()
    text = claims.render(v)
    assert "nan" not in text.lower()
    assert [c.paper for c in study.STUDY.claims] == ["Budhraja et al. 2020 (claim 4)", "ours (exploratory)",
                                                    "ours (exploratory)"]


def test_spread_is_equivalence_within_the_declared_gini_margin(cfg):
    """The margin is the Gini's declared one (margins.GINI: a tenth of its range 0-1), never a noise estimate: the
    same whatever the seed-to-seed spread of the noise baseline."""
    even = study.verdicts(runs(excess=(0.0, 0.0), noise_sd=0.05), cfg)
    r = verdict(even, "budhraja.compensation_spread", "A")
    assert r["verdict"] == "supported" and "Gini's range" in r["test"] and "seed-to-seed" not in r["test"]
    assert r["margin"] == pytest.approx(margins.SHARE * 1.0) == pytest.approx(0.1)
    noisy = study.verdicts(runs(excess=(0.0, 0.0), noise_sd=0.5), cfg)
    assert verdict(noisy, "budhraja.compensation_spread", "A")["margin"] == r["margin"]  # noise does not move it
    assert verdict(even, "budhraja.compensation_spread", "all (A, B)")["verdict"] == "supported"
    unequal = study.verdicts(runs(excess=(0.3, 0.3), noise_sd=0.05), cfg)
    assert verdict(unequal, "budhraja.compensation_spread", "A")["verdict"] == "contradicted"
    assert verdict(unequal, "budhraja.compensation_spread", "all (A, B)")["verdict"] == "contradicted"
    # within the margin but not shown to be: an excess of 0.08 with 4 units per task is no equivalence
    near = study.verdicts(runs(excess=(0.08, 0.08), jitter=0.05), cfg)
    assert verdict(near, "budhraja.compensation_spread", "A")["verdict"] == "inconclusive"


def test_importance_spread_has_no_declared_margin(cfg):
    """The importance dispersion (an sd of differences of per-layer normalised scores) has no margin in
    headprune_utils.analysis.margins: its rows are not testable, saying so, with their numbers shown; the Gini rows and the
    other claims on importance are tested as usual."""
    v = study.verdicts(runs(measures=("weight_change", "importance")), cfg)
    claims.validate(v)
    imp = rows_of(v, "budhraja.compensation_spread", setting_has="gradient importance")
    assert len(imp) == 3 and (imp["verdict"] == "not testable").all()
    per_task = imp[~imp["task"].str.startswith("all")]
    assert per_task["reason"].str.contains("no smallest effect of interest is declared").all()
    assert verdict(v, "budhraja.compensation_spread", "all (A, B)", "gradient importance")["reason"].startswith(
        "fewer than 2 tasks testable for pooling")
    assert imp["margin"].isna().all() and (imp["tests"] == "[]").all()
    a = verdict(v, "budhraja.compensation_spread", "A", "gradient importance")
    assert a["n_units"] == 4 and a["effect"] == pytest.approx(0.0, abs=1e-12)  # measured, only not decided
    assert verdict(v, "budhraja.compensation_spread", "A", "weight change")["verdict"] == "supported"
    assert verdict(v, "ours.compensation_local", "A", "gradient importance, pruned heads in adjacent")["verdict"] == \
        "supported"
    assert not claims.family_tests(v)["row"].isin(imp.index).any()  # no test: outside the Holm family
    assert "nan" not in claims.render(v).lower()


def test_spread_pools_only_when_tasks_agree(cfg):
    v = study.verdicts(runs(excess=(0.0, 0.3), noise_sd=0.05), cfg)
    assert verdict(v, "budhraja.compensation_spread", "A")["verdict"] in ("supported", "inconclusive")  # Holm
    assert verdict(v, "budhraja.compensation_spread", "B")["verdict"] == "contradicted"
    pooled = verdict(v, "budhraja.compensation_spread", "all (A, B)")
    assert pooled["verdict"] == "inconclusive" and pooled["reason"].startswith("tasks disagree")


def test_power_gate_one_seed_is_not_testable(cfg):
    v = study.verdicts(runs(seeds=(0,)), cfg)
    r = verdict(v, "budhraja.compensation_spread", "A")
    assert r["verdict"] == "not testable" and "at least 2 units" in r["reason"]
    s = verdict(v, "ours.kept_heads_change_more", "A")
    assert s["verdict"] == "not testable" and "at least 2 units" in s["reason"]


def test_mean_shift_both_directions(cfg):
    more = study.verdicts(runs(shift=(0.3, 0.3)), cfg)
    less = study.verdicts(runs(shift=(-0.3, -0.3)), cfg)
    assert verdict(more, "ours.kept_heads_change_more", "all (A, B)")["verdict"] == "supported"
    assert verdict(less, "ours.kept_heads_change_more", "all (A, B)")["verdict"] == "contradicted"
    # no shift: smaller than the declared margin (ln 1.1, a change 10% larger) -> not supported
    none = study.verdicts(runs(shift=(0.0, 0.0)), cfg)
    r = verdict(none, "ours.kept_heads_change_more", "all (A, B)")
    assert r["verdict"] == "not supported" and r["margin"] == pytest.approx(math.log(1.1))
    assert verdict(none, "ours.kept_heads_change_more", "A")["margin"] == pytest.approx(math.log(1.1))
    # importance is per-layer normalised: no shift claim on it
    v = study.verdicts(runs(measures=("weight_change", "importance")), cfg)
    assert not rows_of(v, "ours.kept_heads_change_more", setting_has="gradient importance").shape[0]


def test_locality_beyond_the_layer_both_directions(cfg):
    local = study.verdicts(runs(rho_lc=(0.5, 0.5)), cfg)
    r = verdict(local, "ours.compensation_local", "all (A, B)", "adjacent")
    assert r["verdict"] == "supported" and "beyond a layer-only model" in r["test"]
    flat = study.verdicts(runs(rho_lc=(0.0, 0.0), rho=0.5, jitter=0.02), cfg)
    f = verdict(flat, "ours.compensation_local", "all (A, B)", "adjacent")
    assert f["verdict"] == "not supported" and f["margin"] == pytest.approx(0.1)  # margins.CORRELATION
    assert verdict(flat, "ours.compensation_local", "A", "adjacent")["verdict"] != "supported"
    against = study.verdicts(runs(rho_lc=(-0.5, -0.5)), cfg)
    assert verdict(against, "ours.compensation_local", "all (A, B)", "adjacent")["verdict"] == "contradicted"


def test_locality_gate_pure_layer_effect(cfg):
    """middle: the counts never vary beyond the layer -> not testable; the raw rho is shown where defined, a row
    without numbers where even the raw rho is undefined."""
    t = runs(rho_lc=None, strategy="middle")
    t.loc[:, "rho_pruned_in_layer"] = np.nan
    v = study.verdicts(t, cfg)
    adj = verdict(v, "ours.compensation_local", "A", "adjacent")
    assert adj["verdict"] == "not testable" and "layer-only model explains it fully" in adj["reason"]
    assert adj["effect"] == pytest.approx(t.query("task == 'A'")["rho_pruned_adjacent"].mean())
    same = verdict(v, "ours.compensation_local", "A", "same layer")
    assert same["verdict"] == "not testable" and same["n_units"] == 0 and "raw rho is undefined" in same["reason"]
    assert "nan" not in claims.render(v).lower()
    # the spread claim is unaffected by the locality gate
    assert verdict(v, "budhraja.compensation_spread", "A")["verdict"] == "supported"


def holm_holds(table) -> set:
    """The families of ``table``'s tests; asserts Holm within each: every test of every tested row adjusted together."""
    ft = claims.family_tests(table)
    for _, g in ft.groupby("family"):
        assert np.allclose(g["p_adjusted"], claims.stats.holm(g["p"].to_numpy()))
    return set(ft["family"])


def test_holm_runs_over_the_whole_family(cfg):
    v = study.verdicts(runs(), cfg)
    claims.validate(v)  # every decided row's p_adjusted is its deciding test's Holm-adjusted p, below alpha
    tested = v[v["tests"] != "[]"]
    assert len(tested) > 3
    assert len(holm_holds(v)) == 1  # one semantics: the primary family
    ft = claims.family_tests(v)
    assert len(ft) == sum(len(claims.row_tests(r)) for _, r in tested.iterrows()) > len(tested)
    # both directions of every superiority row, and the margin's test, are in the family
    shift = ft[ft["row"] == rows_of(v, "ours.kept_heads_change_more", "A").index[0]]
    assert sorted(shift["word"]) == ["contradicted", "not supported", "supported"]
    # the Holm correction bites: a row's adjusted p is its own p times at least the tests not yet passed
    assert (ft["p_adjusted"] >= ft["p"]).all() and (ft["p_adjusted"] > ft["p"]).any()


def two_semantics(**zero_kw) -> pd.DataFrame:
    """Even spread under uniform; under zero the same runs, changed by ``zero_kw``."""
    return pd.concat([runs(), runs(ablation="zero", **zero_kw)], ignore_index=True)


def test_verdict_rows_carry_semantics_and_analysis_and_holm_per_family(cfg):
    """Each semantics decided on its own runs: uniform (Budhraja et al.'s) primary, zero sensitivity; Holm over
    the primary rows as one family and the zero rows as another."""
    v = study.verdicts(two_semantics(excess=(0.3, 0.3)), cfg)
    claims.validate(v)
    assert set(v["semantics"]) == {"uniform", "zero"}
    assert (v["analysis"] == np.where(v["semantics"] == "uniform", "primary", "sensitivity")).all()
    for sem, word in (("uniform", "supported"), ("zero", "contradicted")):
        part = v[v["semantics"] == sem]
        assert verdict(part, "budhraja.compensation_spread", "all (A, B)")["verdict"] == word
        assert len(holm_holds(part)) == 1  # each semantics' rows: one family, Holm within it
    assert len(holm_holds(v)) == 2
    # the same runs under uniform alone give the same primary rows: the zero rows never enter them
    alone = study.verdicts(runs(), cfg)
    cols = ["claim_id", "task", "setting", "effect", "p", "p_adjusted", "verdict"]
    pd.testing.assert_frame_equal(v[v["semantics"] == "uniform"][cols].reset_index(drop=True),
                                  alone[cols].reset_index(drop=True))


def test_semantics_dependence_reports_a_flip(cfg):
    v = study.verdicts(two_semantics(excess=(0.3, 0.3)), cfg)
    dep = claims.semantics_dependence(v)
    r = dep[(dep["claim_id"] == "budhraja.compensation_spread") & (dep["task"] == "all (A, B)")].iloc[0]
    assert r["depends"] == "flips" and r["primary_semantics"] == "uniform"
    assert r["verdict_uniform"] == "supported" and r["verdict_zero"] == "contradicted"
    same = claims.semantics_dependence(study.verdicts(two_semantics(), cfg))
    assert (same.loc[same["claim_id"] == "budhraja.compensation_spread", "depends"] == "no").all()


def test_primary_semantics_not_run_is_not_testable(cfg):
    """Runs under zero only: each claim gets one primary (uniform) row saying nothing was measured under it, and
    its zero rows as the sensitivity analysis."""
    v = study.verdicts(runs(ablation="zero"), cfg)
    claims.validate(v)
    primary = v[v["analysis"] == "primary"]
    assert sorted(primary["claim_id"]) == sorted(c.id for c in study.STUDY.claims)
    assert (primary["semantics"] == "uniform").all() and (primary["verdict"] == "not testable").all()
    assert primary["reason"].str.contains("under the uniform semantics").all()
    assert (v.loc[v["analysis"] == "sensitivity", "semantics"] == "zero").all()
    assert "nan" not in claims.render(v).lower()
    empty = study.verdicts(pd.DataFrame(), cfg)
    assert len(empty) == len(study.STUDY.claims) and (empty["verdict"] == "not testable").all()


def written_figures(cfg) -> set[str]:
    """The figure names the notebook writes, ``{sem}`` expanded over the study's semantics."""
    nb = json.loads((notebooks_dir() / study.STUDY.notebook).read_text())
    source = "".join("".join(c["source"]) for c in nb["cells"])
    names = re.findall(r'out\.figure\(\s*f?"([^"]+)"', source)
    return {n.replace("{sem}", s) for n in names for s in cfg.finetune_ablations}


def test_claims_are_declared_as_data(cfg):
    """One home: each claim a claims.Claim with its rule, gate objects, a figure the notebook writes, a measure the
    analysis knows and a note saying what n is; the study's claims are the claims module's."""
    assert study.STUDY.claims is study.CLAIMS
    figures = written_figures(cfg)
    for c in study.CLAIMS:
        assert isinstance(c, claims.Claim) and isinstance(c.rule, claims.RULES), c.id
        assert all(isinstance(g, claims.Gate) for g in c.gates), c.id
        assert c.figure in figures, (c.id, c.figure, sorted(figures))
        assert c.measure in study.MEASUREMENTS and "n = " in c.note and c.metric and c.regime, c.id
    by_id = {c.id: c for c in study.CLAIMS}
    assert isinstance(by_id["budhraja.compensation_spread"].margin, study.DispersionMargin)
    assert by_id["ours.compensation_local"].gates == (study.BEYOND_LAYER,)
    assert "varies beyond its layer" in by_id["ours.compensation_local"].precondition


def test_locality_gate_reads_its_evidence():
    m = claims.Measurement("A", [0.1, 0.2], [0, 1], "middle 50%, weight change, pruned heads in adjacent layers")
    assert study.BEYOND_LAYER.check(m, {"layer_confounded": {("A", m.setting): "a layer effect"}}) == "a layer effect"
    assert study.BEYOND_LAYER.check(m, {"layer_confounded": {("B", m.setting): "a layer effect"}}) is None
    t = runs(rho_lc=None, strategy="middle")
    why = study.layer_confounded(t[t["ablation"] == "uniform"])
    assert set(why) == {(task, s) for task in ("A", "B") for s in (
        "middle 50%, weight change, pruned heads in the same layer",
        "middle 50%, weight change, pruned heads in adjacent layers")}
    assert all("layer-only model explains it fully" in r for r in why.values())


def test_a_table_lacking_a_run_gives_absent_measurements(cfg):
    """What cannot be measured comes from claims.evaluate of an absent measurement (``not testable`` with the reason,
    0 units, no test, the claim's own rule in the test label), never a hand-built row: a rho undefined in every run of
    a task (locality), and a semantics without a run (every claim); absent measurements are never pooled."""
    t = runs(rho_lc=None, strategy="middle")
    t.loc[:, "rho_pruned_in_layer"] = np.nan
    ms = study.locality_measurements(t, "uniform")
    absent = [m for m in ms if m.missing]
    assert {(m.task, m.setting) for m in absent} == {
        ("A", "middle 50%, weight change, pruned heads in the same layer"),
        ("B", "middle 50%, weight change, pruned heads in the same layer")}
    assert all(m.n_units == 0 and "raw rho is undefined" in m.missing for m in absent)
    v = study.verdicts(t, cfg)
    same = rows_of(v, "ours.compensation_local", setting_has="same layer")
    assert sorted(same["task"]) == ["A", "B"]  # no pooled row of two absent measurements
    assert (same["verdict"] == "not testable").all() and (same["tests"] == "[]").all()
    assert (same["n_units"] == 0).all() and same["test"].str.startswith("superiority (greater)").all()
    only_zero = study.verdicts(runs(ablation="zero"), cfg)
    r = verdict(only_zero[only_zero["analysis"] == "primary"], "budhraja.compensation_spread", "all")
    assert r["reason"] == "no pruned run measured under the uniform semantics in this run"
    assert r["test"].startswith("equivalence (TOST)") and r["n_units"] == 0 and r["tests"] == "[]"
    assert not claims.family_tests(only_zero)["row"].isin([r.name]).any()


def test_the_analysis_decides_the_claims_it_is_given(cfg):
    """The analysis takes the claims as data: a claim set without the locality claim gives no locality row, a claim
    whose measure it does not know is refused."""
    two = tuple(c for c in study.CLAIMS if c.id != "ours.compensation_local")
    v = study.claim_verdicts(runs(), cfg, two)
    assert set(v["claim_id"]) == {c.id for c in two}
    odd = dataclasses.replace(study.CLAIMS[0], measure="no_such_measure")
    with pytest.raises(ValueError, match="no_such_measure"):
        study.claim_verdicts(runs(), cfg, (odd,))
