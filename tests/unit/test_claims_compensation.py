"""Study 3's claims (claims model) on hand-made per-run tables and the cells behind them: each claim's verdict in both
directions, the gates' both branches (the convergence gate on hand-made held-out curves), per-task then pooled,
absent measurements, the claims as data (rule, gate objects, a figure the notebook writes), and no NaN in the
rendered text."""
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


# held-out curves (one record per epoch, the kept one selected): best at epoch 2 of 4 reached the plateau (patience
# 2), best at the last epoch of 3 stopped at the cap still improving, no selected epoch = no validation split
CONVERGED = [{"epoch": 1, "val_score": 0.80}, {"epoch": 2, "val_score": 0.84, "selected": True},
             {"epoch": 3, "val_score": 0.83}, {"epoch": 4, "val_score": 0.82}]
STALLED = [{"epoch": 1, "val_score": 0.70}, {"epoch": 2, "val_score": 0.75},
           {"epoch": 3, "val_score": 0.78, "selected": True}]
NO_SPLIT = [{"epoch": 1, "train_loss": 0.5}, {"epoch": 2, "train_loss": 0.4}, {"epoch": 3, "train_loss": 0.3}]


BASE = 100  # the comparison run of seed s: seed s + BASE (baseline_seeds)


def cells_of(tests: pd.DataFrame, curves: dict | None = None, default=CONVERGED, baseline: bool = True) -> pd.DataFrame:
    """The cells behind the per-run rows ``tests``: per (task, semantics, seed) the unpruned reference (strategy
    ``none``, budget 0) and per run the masked model, each with the held-out curve ``default`` unless ``curves``
    gives another: keyed ``(task, seed)`` for the full model (every semantics' reference: one model), ``(task,
    ablation, strategy, seed)`` for a masked model. ``baseline``: each seed's comparison run of its own, an unpruned
    reference of seed ``s + BASE`` (baseline_seeds); False: none (the ring pairing, neighbouring units sharing a
    run)."""
    curves = curves or {}
    if tests.empty:
        return pd.DataFrame(columns=["task", "ablation", "seed", "strategy", "budget", "history"])
    runs_ = tests.drop_duplicates(["task", "ablation", "seed", "strategy", "budget"])
    refs = runs_[["task", "ablation", "seed"]].drop_duplicates()
    if baseline:
        refs = pd.concat([refs, refs.assign(seed=refs["seed"] + BASE)], ignore_index=True)
    rows = [{"task": t, "ablation": a, "seed": s, "strategy": "none", "budget": 0.0,
             "history": curves.get((t, s), default)}
            for t, a, s in refs.itertuples(index=False)]
    rows += [{"task": r.task, "ablation": r.ablation, "seed": r.seed, "strategy": r.strategy, "budget": r.budget,
              "history": curves.get((r.task, r.ablation, r.strategy, r.seed), default)} for r in runs_.itertuples()]
    return pd.DataFrame(rows)


def paired(cfg, tests: pd.DataFrame, baseline: bool = True):
    """``cfg`` with the seeds of ``tests`` and, with ``baseline``, their comparison runs (seed s + BASE)."""
    seeds = sorted(int(x) for x in tests["seed"].unique()) if len(tests) else list(cfg.seeds)
    return dataclasses.replace(cfg, seeds=seeds, baseline_seeds=[s + BASE for s in seeds] if baseline else None)


def judge(tests: pd.DataFrame, cfg, curves: dict | None = None, default=CONVERGED, baseline: bool = True) -> pd.DataFrame:
    """The study's verdicts on ``tests`` and the cells behind them (:func:`cells_of`), the config's comparison runs
    those cells hold (``baseline``) or none (the ring)."""
    return study.verdicts(tests, cells_of(tests, curves, default, baseline), paired(cfg, tests, baseline))


def rows_of(table, cid, task=None, setting_has=""):
    t = table[(table["claim_id"] == cid) & table["setting"].str.contains(setting_has, regex=False)]
    return t if task is None else t[t["task"] == task]


def verdict(table, cid, task, setting_has=""):
    r = rows_of(table, cid, task, setting_has)
    assert len(r) == 1, r
    return r.iloc[0]


def test_layout_scale_and_no_nan(cfg):
    v = judge(runs(), cfg)
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
    even = judge(runs(excess=(0.0, 0.0), noise_sd=0.05), cfg)
    r = verdict(even, "budhraja.compensation_spread", "A")
    assert r["verdict"] == "supported" and "Gini's range" in r["test"] and "seed-to-seed" not in r["test"]
    assert r["margin"] == pytest.approx(margins.SHARE * 1.0) == pytest.approx(0.1)
    noisy = judge(runs(excess=(0.0, 0.0), noise_sd=0.5), cfg)
    assert verdict(noisy, "budhraja.compensation_spread", "A")["margin"] == r["margin"]  # noise does not move it
    assert verdict(even, "budhraja.compensation_spread", "all (A, B)")["verdict"] == "supported"
    unequal = judge(runs(excess=(0.3, 0.3), noise_sd=0.05), cfg)
    assert verdict(unequal, "budhraja.compensation_spread", "A")["verdict"] == "contradicted"
    assert verdict(unequal, "budhraja.compensation_spread", "all (A, B)")["verdict"] == "contradicted"
    # within the margin but not shown to be: an excess of 0.08 with 4 units per task is no equivalence
    near = judge(runs(excess=(0.08, 0.08), jitter=0.05), cfg)
    assert verdict(near, "budhraja.compensation_spread", "A")["verdict"] == "inconclusive"


def test_importance_spread_has_no_declared_margin(cfg):
    """The importance dispersion (an sd of differences of per-layer normalised scores) has no margin in
    headprune_utils.analysis.margins: its rows are not testable, saying so, with their numbers shown; the Gini rows and the
    other claims on importance are tested as usual."""
    v = judge(runs(measures=("weight_change", "importance")), cfg)
    claims.validate(v)
    imp = rows_of(v, "budhraja.compensation_spread", setting_has="gradient importance")
    assert len(imp) == 3 and (imp["verdict"] == "not testable").all()
    per_task = imp[~imp["task"].str.startswith("all")]
    assert per_task["reason"].str.contains("no smallest effect of interest is declared").all()
    assert verdict(v, "budhraja.compensation_spread", "all (A, B)", "gradient importance")["reason"].startswith(
        "fewer than 2 tasks testable for pooling")
    assert imp["margin"].isna().all() and (imp["tests"] == "[]").all()
    # the test column names no margin it did not use: the Gini one is the Gini rows', none for the sd
    assert per_task["test"].str.contains("none declared for the sd of differences (its rows not testable)",
                                    regex=False).all()
    a = verdict(v, "budhraja.compensation_spread", "A", "gradient importance")
    assert a["n_units"] == 4 and a["effect"] == pytest.approx(0.0, abs=1e-12)  # measured, only not decided
    assert verdict(v, "budhraja.compensation_spread", "A", "weight change")["verdict"] == "supported"
    assert verdict(v, "ours.compensation_local", "A", "gradient importance, pruned heads in adjacent")["reason"] == \
        study.LAYER_MODEL_SHARED  # described, not tested (its units share the layer-only model)
    assert not claims.family_tests(v)["row"].isin(imp.index).any()  # no test: outside the Holm family
    assert "nan" not in claims.render(v).lower()


def test_spread_pool_never_over_a_task_decided_otherwise(cfg):
    v = judge(runs(excess=(0.0, 0.3), noise_sd=0.05), cfg)
    assert verdict(v, "budhraja.compensation_spread", "A")["verdict"] in ("supported", "inconclusive")  # Holm
    assert verdict(v, "budhraja.compensation_spread", "B")["verdict"] == "contradicted"
    pooled = verdict(v, "budhraja.compensation_spread", "all (A, B)")
    assert pooled["verdict"] == "inconclusive"  # a task decided each way: never the pool's word over a task


def test_power_gate_one_seed_is_not_testable(cfg):
    v = judge(runs(seeds=(0,)), cfg)
    r = verdict(v, "budhraja.compensation_spread", "A")
    assert r["verdict"] == "not testable" and "at least 2 units" in r["reason"]
    s = verdict(v, "ours.kept_heads_change_more", "A")
    assert s["verdict"] == "not testable" and "at least 2 units" in s["reason"]


def test_mean_shift_both_directions(cfg):
    more = judge(runs(shift=(0.3, 0.3)), cfg)
    less = judge(runs(shift=(-0.3, -0.3)), cfg)
    assert verdict(more, "ours.kept_heads_change_more", "all (A, B)")["verdict"] == "supported"
    assert verdict(less, "ours.kept_heads_change_more", "all (A, B)")["verdict"] == "contradicted"
    # no shift: smaller than the declared margin (ln 1.1, a change 10% larger) -> not supported
    none = judge(runs(shift=(0.0, 0.0)), cfg)
    r = verdict(none, "ours.kept_heads_change_more", "all (A, B)")
    assert r["verdict"] == "not supported" and r["margin"] == pytest.approx(math.log(1.1))
    assert verdict(none, "ours.kept_heads_change_more", "A")["margin"] == pytest.approx(math.log(1.1))
    # importance is per-layer normalised: no shift claim on it
    v = judge(runs(measures=("weight_change", "importance")), cfg)
    assert not rows_of(v, "ours.kept_heads_change_more", setting_has="gradient importance").shape[0]


def test_locality_beyond_the_layer_is_described_not_tested(cfg):
    """The layer-controlled rho of a unit reads a layer-only model fitted on the other units' runs: the units are not
    independent, so its rows are not testable, saying so, with the effect shown (the mean rho over the seeds), its
    margin the declared one, and no test in the family; the other claims are decided as usual."""
    for lc in ((0.5, 0.5), (0.0, 0.0), (-0.5, -0.5)):
        v = judge(runs(rho_lc=lc), cfg)
        claims.validate(v)
        r = verdict(v, "ours.compensation_local", "A", "adjacent")
        assert r["verdict"] == "not testable" and r["reason"] == study.LAYER_MODEL_SHARED
        assert "beyond a layer-only model" in r["test"] and r["tests"] == "[]"
        assert r["effect"] == pytest.approx(lc[0], abs=1e-12) and r["n_units"] == 4
        assert verdict(v, "ours.compensation_local", "all (A, B)", "adjacent")["verdict"] == "not testable"
        local = rows_of(v, "ours.compensation_local")
        assert not claims.family_tests(v)["row"].isin(local.index).any()
        assert verdict(v, "budhraja.compensation_spread", "A")["verdict"] == "supported"


def test_a_ring_of_comparison_runs_makes_spread_not_testable_and_leaves_the_mean_shift(cfg):
    """Without baseline_seeds each seed's comparison run is the next seed's own unpruned run: neighbouring units share
    a model, so the excess dispersion (which reads it) is not testable, naming why; the mean shift reads only the unit's
    own two runs and is decided as with comparison runs of their own."""
    t = runs(excess=(0.0, 0.0), shift=(0.2, 0.2))
    ring = judge(t, cfg, baseline=False)
    own = judge(t, cfg)
    r = verdict(ring, "budhraja.compensation_spread", "A", "weight change")
    assert r["verdict"] == "not testable" and "not independent" in r["reason"] and "baseline_seeds" in r["reason"]
    assert verdict(own, "budhraja.compensation_spread", "A", "weight change")["verdict"] == "supported"
    for table in (ring, own):
        assert verdict(table, "ours.kept_heads_change_more", "A")["verdict"] == "supported"
    assert study.shared_runs(paired(cfg, t, False)) and study.shared_runs(paired(cfg, t)) is None
    assert study.next_seeds(cells_of(t), paired(cfg, t)) == {s: s + BASE for s in (0, 1, 2, 3)}
    assert study.next_seeds(cells_of(t, baseline=False)) == {0: 1, 1: 2, 2: 3, 3: 0}
    # by position, as the config gives them, not sorted
    rev = dataclasses.replace(paired(cfg, t), baseline_seeds=[103, 102, 101, 100])
    assert study.next_seeds(cells_of(t), rev) == {0: 103, 1: 102, 2: 101, 3: 100}


def test_locality_gate_pure_layer_effect(cfg):
    """middle: the counts never vary beyond the layer -> not testable; the raw rho is shown where defined, a row
    without numbers where even the raw rho is undefined."""
    t = runs(rho_lc=None, strategy="middle")
    t.loc[:, "rho_pruned_in_layer"] = np.nan
    v = judge(t, cfg)
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
    v = judge(runs(), cfg)
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
    v = judge(two_semantics(excess=(0.3, 0.3)), cfg)
    claims.validate(v)
    assert set(v["semantics"]) == {"uniform", "zero"}
    assert (v["analysis"] == np.where(v["semantics"] == "uniform", "primary", "sensitivity")).all()
    for sem, word in (("uniform", "supported"), ("zero", "contradicted")):
        part = v[v["semantics"] == sem]
        assert verdict(part, "budhraja.compensation_spread", "all (A, B)")["verdict"] == word
        assert len(holm_holds(part)) == 1  # each semantics' rows: one family, Holm within it
    assert len(holm_holds(v)) == 2
    # the same runs under uniform alone give the same primary rows: the zero rows never enter them
    alone = judge(runs(), cfg)
    cols = ["claim_id", "task", "setting", "effect", "p", "p_adjusted", "verdict"]
    pd.testing.assert_frame_equal(v[v["semantics"] == "uniform"][cols].reset_index(drop=True),
                                  alone[cols].reset_index(drop=True))


def test_semantics_dependence_reports_a_flip(cfg):
    v = judge(two_semantics(excess=(0.3, 0.3)), cfg)
    dep = claims.semantics_dependence(v)
    r = dep[(dep["claim_id"] == "budhraja.compensation_spread") & (dep["task"] == "all (A, B)")].iloc[0]
    assert r["depends"] == "flips" and r["primary_semantics"] == "uniform"
    assert r["verdict_uniform"] == "supported" and r["verdict_zero"] == "contradicted"
    same = claims.semantics_dependence(judge(two_semantics(), cfg))
    assert (same.loc[same["claim_id"] == "budhraja.compensation_spread", "depends"] == "no").all()


def test_primary_semantics_not_run_is_not_testable(cfg):
    """Runs under zero only: each claim gets one primary (uniform) row saying nothing was measured under it, and
    its zero rows as the sensitivity analysis."""
    v = judge(runs(ablation="zero"), cfg)
    claims.validate(v)
    primary = v[v["analysis"] == "primary"]
    assert sorted(primary["claim_id"]) == sorted(c.id for c in study.STUDY.claims)
    assert (primary["semantics"] == "uniform").all() and (primary["verdict"] == "not testable").all()
    assert primary["reason"].str.contains("under the uniform semantics").all()
    assert (v.loc[v["analysis"] == "sensitivity", "semantics"] == "zero").all()
    assert "nan" not in claims.render(v).lower()
    empty = judge(pd.DataFrame(), cfg)
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
    assert by_id["ours.compensation_local"].gates == (study.BEYOND_LAYER, study.OWN_LAYER_MODEL,
                                                      study.INDEPENDENT_RUNS, study.CONVERGED)
    assert by_id["budhraja.compensation_spread"].gates == (study.INDEPENDENT_RUNS, study.CONVERGED)
    assert by_id["ours.kept_heads_change_more"].gates == (study.CONVERGED,)  # reads only the unit's own two runs
    # every claim is about models masked, then fine-tuned: each is gated on their convergence
    for c in study.CLAIMS:
        assert study.CONVERGED in c.gates and "reached the plateau of its held-out score" in c.precondition, c.id
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
    v = judge(t, cfg)
    same = rows_of(v, "ours.compensation_local", setting_has="same layer")
    assert sorted(same["task"]) == ["A", "B"]  # no pooled row of two absent measurements
    assert (same["verdict"] == "not testable").all() and (same["tests"] == "[]").all()
    assert (same["n_units"] == 0).all() and same["test"].str.startswith("superiority (greater)").all()
    only_zero = judge(runs(ablation="zero"), cfg)
    r = verdict(only_zero[only_zero["analysis"] == "primary"], "budhraja.compensation_spread", "all")
    assert r["reason"] == "no pruned run measured under the uniform semantics in this run"
    assert r["test"].startswith("equivalence (TOST)") and r["n_units"] == 0 and r["tests"] == "[]"
    assert not claims.family_tests(only_zero)["row"].isin([r.name]).any()


def test_the_analysis_decides_the_claims_it_is_given(cfg):
    """The analysis takes the claims as data: a claim set without the locality claim gives no locality row, a claim
    whose measure it does not know is refused."""
    two = tuple(c for c in study.CLAIMS if c.id != "ours.compensation_local")
    t = runs()
    v = study.claim_verdicts(t, cells_of(t), cfg, two)
    assert set(v["claim_id"]) == {c.id for c in two}
    odd = dataclasses.replace(study.CLAIMS[0], measure="no_such_measure")
    with pytest.raises(ValueError, match="no_such_measure"):
        study.claim_verdicts(t, cells_of(t), cfg, (odd,))


# ------------------------------------------------------------------------------------------- the convergence gate

def both_strategies(**kw) -> pd.DataFrame:
    """Random and middle runs under uniform and zero (the locality of middle runs left layer-confounded)."""
    return pd.concat([runs(strategy=s, ablation=a, rho_lc=None if s == "middle" else (0.5, 0.5), **kw)
                      for a in ("uniform", "zero") for s in ("random", "middle")], ignore_index=True)


def gated(v: pd.DataFrame) -> pd.Series:
    """Rows not testable because a model behind them did not reach the plateau."""
    return v["reason"].str.contains("not trained to the plateau", regex=False)


def test_converged_models_pass_the_gate(cfg):
    """Every fine-tuning behind every row reached the plateau: no row is held back by the gate, and the rows are decided
    as without it (the same verdicts on the same runs)."""
    t = both_strategies()
    v = judge(t, cfg)
    claims.validate(v)
    assert not gated(v).any() and not v["reason"].str.contains("held-out curve", regex=False).any()
    u = v[v["semantics"] == "uniform"]
    assert verdict(u, "budhraja.compensation_spread", "all (A, B)", "random")["verdict"] == "supported"
    assert verdict(u, "ours.compensation_local", "A", "random 50%, weight change, pruned heads in adj"
                   )["reason"] == study.LAYER_MODEL_SHARED


def test_a_stalled_masked_model_blocks_only_its_rows(cfg):
    """The uniform random-50% model of task A, seed 2, stopped at its epoch cap still improving: every row of task A
    measured on the random uniform runs is not testable, naming it; A's middle rows, A's zero rows (other models)
    and task B are decided as before; the random pooled rows lose task A."""
    t = both_strategies()
    base = judge(t, cfg)
    v = judge(t, cfg, curves={("A", "uniform", "random", 2): STALLED})
    claims.validate(v)
    hit = (v["task"] == "A") & v["setting"].str.startswith("random") & (v["semantics"] == "uniform")
    assert hit.sum() == 4  # spread, mean shift, locality (same layer, adjacent layers): one measure
    assert (v.loc[hit, "verdict"] == "not testable").all()
    # spread and shift: 4 masked models, their 4 full models and 4 comparison runs; locality: the masked models and
    # the comparison runs of every run of its task and setting (the layer-only model), 8
    assert v.loc[hit, "reason"].str.contains(
        r"not trained to the plateau: 1 of (?:12|8) fine-tuned models on A were still improving when training stopped "
        r"\(fewer than 2 epochs after their best\): random 50% mask seed 2 of seed 2 \(best epoch 3 of 3\)").all()
    assert gated(v).sum() == hit.sum()
    cols = ["claim_id", "task", "setting", "semantics", "effect", "verdict"]  # Holm: fewer tests, other adjusted p
    same = ~hit & ~v["task"].str.startswith("all")
    pd.testing.assert_frame_equal(v.loc[same, cols], base.loc[same, cols])
    zero = v["semantics"] == "zero"  # its own Holm family: untouched, p for p
    pd.testing.assert_frame_equal(v[zero], base[zero])
    pooled = v[v["task"].str.startswith("all") & v["setting"].str.startswith("random") & (v["semantics"] == "uniform")]
    assert (pooled["verdict"] == "not testable").all()
    decided = pooled["claim_id"] != "ours.compensation_local"  # locality: testable nowhere (its layer-only model)
    assert pooled.loc[decided, "reason"].str.startswith("fewer than 2 tasks testable for pooling (testable: B)").all()


def test_a_stalled_full_model_blocks_every_row_it_stands_behind(cfg):
    """The full model of task A, seed 1 (the unpruned reference of seed 1, under every semantics: one model) stalled:
    every row of task A that reads it (the spread and the mean shift, both strategies and semantics) is not testable
    naming it; task B is decided as before."""
    t = both_strategies()
    base = judge(t, cfg)
    v = judge(t, cfg, curves={("A", 1): STALLED})
    claims.validate(v)
    a = (v["task"] == "A") & (v["n_units"] > 0) & (v["claim_id"] != "ours.compensation_local")
    assert a.sum() == 8 and (v.loc[a, "verdict"] == "not testable").all()  # 2 claims x 2 strategies x 2 semantics
    assert v.loc[a, "reason"].str.contains("full model seed 1 of seed 1 (best epoch 3 of 3)", regex=False).all()
    assert gated(v).sum() == a.sum()
    cols = ["claim_id", "setting", "semantics", "verdict"]
    pd.testing.assert_frame_equal(v.loc[v["task"] == "B", cols].reset_index(drop=True),
                                  base.loc[base["task"] == "B", cols].reset_index(drop=True))


def test_a_stalled_comparison_run_blocks_the_spread_and_not_the_mean_shift(cfg):
    """Seed 0's comparison run (seed 100) stopped still improving: the spread row of its task, which reads it, is not
    testable naming it; the mean shift, in which the comparison run cancels, is decided as before."""
    t = runs()
    base = judge(t, cfg)
    v = judge(t, cfg, curves={("A", 100): STALLED})
    r = verdict(v, "budhraja.compensation_spread", "A")
    assert r["verdict"] == "not testable" and "full model seed 100 of seed 0" in r["reason"]
    shift, before = verdict(v, "ours.kept_heads_change_more", "A"), verdict(base, "ours.kept_heads_change_more", "A")
    assert shift["verdict"] == before["verdict"] == "supported" and "seed 100" not in shift["reason"]


def test_the_next_seeds_full_model_stands_behind_a_run_whose_seed_lacks_a_value(cfg):
    """Ring pairing: seed 1 has no excess dispersion on task A (not a unit of the spread row), yet seed 0's value
    compares seed 0's pruned run with seed 1's unpruned run: a stalled seed-1 full model still blocks that row, named
    under unit 0 (beside the reason the ring gives). With comparison runs of their own, seed 0's is seed 100's."""
    t = runs(seeds=(0, 1, 2, 3))
    t.loc[(t["task"] == "A") & (t["seed"] == 1), "excess_dispersion"] = np.nan
    v = judge(t, cfg, curves={("A", 1): STALLED}, baseline=False)
    r = verdict(v, "budhraja.compensation_spread", "A")
    assert r["n_units"] == 3 and r["verdict"] == "not testable"
    assert "1 of 7 fine-tuned models on A" in r["reason"] and "not independent" in r["reason"]
    assert "full model seed 1 of seed 0 (best epoch 3 of 3)" in r["reason"]
    own = verdict(judge(t, cfg, curves={("A", 100): STALLED}), "budhraja.compensation_spread", "A")
    assert own["verdict"] == "not testable" and "full model seed 100 of seed 0 (best epoch 3 of 3)" in own["reason"]
    assert "1 of 9 fine-tuned models on A" in own["reason"] and "not independent" not in own["reason"]


def test_the_models_behind_each_measurement():
    """Exactly the fine-tunings a value is computed from: the run's masked model, the unpruned run of its seed (the
    noise baseline; not for locality) and of the next seed; a layer-controlled locality rho also reads every run of
    its task and setting (the layer-only model). Each model once, under its own seed where that is a unit."""
    t = runs(seeds=(0, 1, 2, 3), tasks=("A",))
    cells = cells_of(t, baseline=False)  # the ring: seed s compared with seed s + 1 (mod 4)
    spread = claims.Measurement("A", [0.0, 0.0], [0, 2], "random 50%, weight change", "uniform")
    raw = claims.Measurement("A", [0.0, 0.0], [0, 2], "random 50%, weight change, pruned heads in adjacent layers",
                             "uniform", effect="Spearman rho (raw, layer-confounded)")
    lc = claims.Measurement("A", [0.0], [0], "random 50%, weight change, pruned heads in the same layer", "uniform",
                            effect="Spearman rho beyond a layer-only model")
    absent = claims.Measurement.absent("A", "nothing", setting="middle 50%, weight change", semantics="uniform")

    def behind(m):
        ev = study.convergence_evidence(cells, t, [m], "uniform")
        assert (ev["setting"] == m.setting).all() and ev["reached"].all()
        return sorted(zip(ev["model"], ev["unit"]))

    assert behind(spread) == [("full model seed 0", 0), ("full model seed 1", 0), ("full model seed 2", 2),
                              ("full model seed 3", 2), ("random 50% mask seed 0", 0),
                              ("random 50% mask seed 2", 2)]
    assert behind(raw) == [("full model seed 1", 0), ("full model seed 3", 2), ("random 50% mask seed 0", 0),
                           ("random 50% mask seed 2", 2)]
    assert behind(lc) == [(f"full model seed {s}", 0) for s in range(4)] + [
        (f"random 50% mask seed {s}", 0) for s in range(4)]
    assert study.convergence_evidence(cells, t, [absent], "uniform").empty
    # the full model is one model under every semantics: a zero measurement reads the same curve
    zero = runs(seeds=(0, 1), tasks=("A",), ablation="zero")
    zc = cells_of(zero, curves={("A", 0): STALLED}, baseline=False)
    ev = study.convergence_evidence(zc, zero, [claims.Measurement("A", [0.0], [0], "random 50%, weight change",
                                                                   "zero")], "zero")
    assert dict(zip(ev["model"], ev["reached"])) == {"full model seed 0": False, "full model seed 1": True,
                                                     "random 50% mask seed 0": True}


def test_no_held_out_curve_is_not_testable_saying_so(cfg):
    """No validation split (the quick profile): the cells store no held-out curve, so whether the models reached the
    plateau cannot be judged, and every measured row is not testable for that reason."""
    v = judge(both_strategies(), cfg, default=NO_SPLIT)
    claims.validate(v)
    measured = v[(v["n_units"] > 0) & ~v["task"].str.startswith("all")]
    assert len(measured) and (measured["verdict"] == "not testable").all()
    assert measured["reason"].str.contains(r"of (?:12|8) fine-tuned models on").all()
    assert measured["reason"].str.contains("have no held-out curve (no validation split): whether they were trained "
                                           "to the plateau cannot be judged", regex=False).all()
    assert (v["verdict"] == "not testable").all() and "nan" not in claims.render(v).lower()


def test_the_cells_behind_a_row_must_be_given(cfg):
    """A row computed from a fine-tuning the cells' table lacks, or cells without their curves, is an error naming
    it (before any verdict), not a row judged on fewer models."""
    t = runs()
    cells = cells_of(t)
    lacking = cells[~((cells["task"] == "A") & (cells["strategy"] == "random") & (cells["seed"] == 3))]
    with pytest.raises(ValueError, match=r"random 50% mask seed 3 of A \(uniform\)"):
        study.verdicts(t, lacking, cfg)
    with pytest.raises(ValueError, match="history"):
        study.verdicts(t, cells.drop(columns=["history"]), cfg)
