"""Study 3 end to end on a tiny local model; its statistics on hand-made per-head tables."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import torch

from headprune_utils.analysis import claims
from headprune_utils.studies import glue_workbench
from headprune_utils.studies.config import ParameterError, validate
from headprune_utils.model.head_weights import head_parameters
from headprune_utils.run.execution import run_study
from headprune_utils.model.masks import mask_from_string, mask_to_string
from headprune_utils.store.paths import StudyPaths
from headprune_utils.studies import compensation as study


def config(model_dir, data_root, **kw):
    base = dict(model=str(model_dir), tasks=["SST-2"], seeds=[0, 1], strategies=["random", "middle"], budgets=[0.5],
                train_size=None, dev_size=None, probe_size=8, n_resamples=200, epochs=1, batch_size=8, lr=1e-3,
                device="cpu", data_dir=str(data_root), allow_hub=False, progress=False)
    return validate(study.CompensationConfig, {**base, **kw})


def test_cells_measure_every_kept_head_and_only_those(tiny_model_dir, tiny_glue_root, tmp_path):
    """Both default semantics (uniform: primary, zero: sensitivity) end to end: every kept head measured, the
    analysis per semantics, verdict rows under each with their analysis."""
    cfg = config(tiny_model_dir, tiny_glue_root)
    assert cfg.finetune_ablations == ["uniform", "zero"]
    table = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path))
    assert len(table) == 2 * 2 * 3  # seeds x semantics x (reference, random, middle)
    assert table.groupby("ablation").size().to_dict() == {"uniform": 6, "zero": 6}
    for r in table.itertuples():
        kept = mask_from_string(r.mask).numpy().astype(bool)
        for measure in study.MEASURES:
            grid = np.array([[np.nan if v is None else v for v in row] for row in getattr(r, measure)], dtype=float)
            assert np.isfinite(grid[kept]).all(), (r.ablation, r.strategy, measure)
            assert np.isnan(grid[~kept]).all(), (r.ablation, r.strategy, measure)
            assert (grid[kept] >= 0).all()
        wc = np.array([[np.nan if v is None else v for v in row] for row in r.weight_change], dtype=float)
        assert (wc[kept] > 0).all(), "fine-tuning moved every kept head"
    heads = study.per_head(table)
    assert set(heads["measure"]) == set(study.MEASURES)
    n_kept = sum(int(mask_from_string(m).sum()) for m in table[table["strategy"] != "none"]["mask"])
    assert len(heads[heads["measure"] == "weight_change"]) == n_kept
    tests = study.spread_tests(heads, n_boot=200)
    assert len(tests) == 2 * 2 * 2 * 3  # semantics x seeds x strategies x measures
    assert tests["excess_p"].between(0, 1).all()
    pool = study.pooled(tests)
    assert {"mean_shift", "rho_lc_pruned_adjacent", "mean_var_between_layers"} <= set(pool.columns)
    assert set(pool["ablation"]) == {"uniform", "zero"} and len(pool) == 2 * 2 * 3
    grid = study.heatmap_data(heads)
    assert set(grid["ablation"]) == {"uniform", "zero"}
    v = study.verdicts(tests, table, cfg)
    assert tuple(v.columns) == claims.COLUMNS and set(v["claim_id"]) == {c.id for c in study.STUDY.claims}
    assert set(v["semantics"]) == {"uniform", "zero"}
    assert (v["analysis"] == np.where(v["semantics"] == "uniform", "primary", "sensitivity")).all()
    # no validation split: the cells store no held-out curve, so no row can show its models reached the plateau
    measured = v[(v["n_units"] > 0) & ~v["task"].str.startswith("all")]
    assert len(measured) and measured["reason"].str.contains("have no held-out curve (no validation split)",
                                                             regex=False).all()
    assert "nan" not in claims.render(v).lower()


def test_mean_ablation_runs_every_cell(tiny_model_dir, tiny_glue_root, tmp_path):
    """The unpruned reference under ``mean`` takes the fine-tuned full model's means (it used to have none and
    crashed in the gradient importance); its importance differs from the same model's under ``zero``."""
    cfg = config(tiny_model_dir, tiny_glue_root, seeds=[0, 1], strategies=["random"], finetune_ablations=["mean", "zero"])
    table = run_study(study.STUDY, cfg, "t", StudyPaths(study.NAME, "t", root=tmp_path))
    assert len(table) == 2 * 2 * 2 and set(table["ablation"]) == {"mean", "zero"}
    for r in table.itertuples():
        kept = mask_from_string(r.mask).numpy().astype(bool)
        for measure in study.MEASURES:
            grid = np.array([[np.nan if v is None else v for v in row] for row in getattr(r, measure)], dtype=float)
            assert np.isfinite(grid[kept]).all(), (r.ablation, r.strategy, measure)
    ref = table[table["strategy"] == "none"].set_index(["ablation", "seed"])
    for seed in (0, 1):
        assert ref.loc[("mean", seed), "weight_change"] == ref.loc[("zero", seed), "weight_change"]  # one model
        assert ref.loc[("mean", seed), "importance"] != ref.loc[("zero", seed), "importance"]  # gates mean another thing
    v = study.verdicts(study.spread_tests(study.per_head(table), n_boot=100), table, cfg)
    primary = v[v["analysis"] == "primary"]
    assert set(primary["semantics"]) == {"uniform"} and (primary["verdict"] == "not testable").all()
    assert primary["reason"].str.contains("no pruned run measured under the uniform semantics").all()
    assert set(v.loc[v["analysis"] == "sensitivity", "semantics"]) <= {"mean", "zero"}


def test_uniform_finetuning_keeps_the_mask_and_trains_the_value_path(tiny_model_dir, tiny_glue_root, tmp_path):
    """Mask, then fine-tune under ``uniform`` (Budhraja et al.'s BERT code): the heads stay in the weights, the
    gates stay fixed, the masked heads' value rows and output-projection columns train, and their query/key
    rows get no gradient (weight decay off, so a parameter without gradient does not move at all)."""
    cfg = config(tiny_model_dir, tiny_glue_root, weight_decay=0.0, epochs=1)
    ctx = glue_workbench.GlueContext(cfg, torch.device("cpu"), tmp_path / "cache")
    mask = study.cell_mask(ctx.shape, {"strategy": "random", "budget": 0.5, "seed": 0})
    before = head_parameters(ctx.fresh_model("SST-2", 0))
    model, history, gates, means = ctx.finetune_masked("SST-2", 0, mask, "test", "uniform")
    assert means is None and torch.equal(gates.cpu(), mask) and not gates.requires_grad
    after = head_parameters(model)
    n_layers, n_heads = ctx.shape
    assert all(after[p][l][h] is not None for p in after for l in range(n_layers) for h in range(n_heads))
    moved = lambda part, l, h: not torch.equal(before[part][l][h], after[part][l][h])
    for l in range(n_layers):
        for h in range(n_heads):
            if mask[l, h] == 0:
                assert not moved("query", l, h) and not moved("key", l, h), (l, h)
                assert moved("value", l, h) and moved("output", l, h), (l, h)
            else:
                assert all(moved(p, l, h) for p in ("query", "key", "value", "output")), (l, h)


def synthetic(concentrated: bool, n_seeds: int = 4, seed: int = 0) -> pd.DataFrame:
    """Runs on a 2 x 6 grid: the unpruned runs change every head by about 1 (noise 5%); the pruned run prunes
    the first 3 heads of layer 0 and changes the kept heads by 1.5x — evenly, or all on one head."""
    rng = np.random.default_rng(seed)
    mask = np.ones((2, 6))
    mask[0, :3] = 0
    rows = []
    grid = lambda a, m: [[float(v) if k else None for v, k in zip(r, kr)] for r, kr in zip(a.tolist(), m.astype(bool).tolist())]
    for s in range(n_seeds):
        base = 1 + 0.05 * rng.standard_normal((2, 6))
        full = {m: grid(base * (1 + 0.05 * rng.standard_normal((2, 6))), np.ones((2, 6))) for m in study.MEASURES}
        rows.append({"task": "A", "ablation": "uniform", "seed": s, "strategy": "none", "budget": 0.0,
                     "mask": mask_to_string(np.ones((2, 6))), **full})
        factor = np.ones((2, 6))
        if concentrated:
            factor[1, 5] = 10.0
        else:
            factor *= 1.5
        pruned = {m: grid(base * factor * (1 + 0.05 * rng.standard_normal((2, 6))), mask) for m in study.MEASURES}
        rows.append({"task": "A", "ablation": "uniform", "seed": s, "strategy": "random", "budget": 0.25,
                     "mask": mask_to_string(mask), **pruned})
    return pd.DataFrame(rows)


def test_comparison_runs_of_their_own_and_a_missing_one_named():
    """per_head with baseline_seeds: each seed's runs compared with its own comparison run (seed s + 10), paired by
    position; the mean shift is the same as under the ring (the comparison run cancels in log(pruned / full)); a
    comparison run without a cell is an error naming it, not a unit dropped in silence."""
    from types import SimpleNamespace
    t = synthetic(False, n_seeds=6)
    units = t[t["seed"] < 3]
    comp = t[(t["seed"] >= 3) & (t["strategy"] == "none")].assign(seed=lambda d: d["seed"] + 7)  # seeds 10, 11, 12
    table = pd.concat([units, comp], ignore_index=True)
    cfg = SimpleNamespace(seeds=[0, 1, 2], baseline_seeds=[10, 11, 12])
    heads = study.per_head(table, cfg)
    assert study.next_seeds(table, cfg) == {0: 10, 1: 11, 2: 12}
    for s, other in ((0, 10), (1, 11), (2, 12)):
        h = heads[(heads["seed"] == s) & (heads["measure"] == "weight_change")]
        run = comp[comp["seed"] == other].iloc[0]
        assert np.allclose(h["other"], [np.array(run["weight_change"], dtype=float)[l, k]
                                        for l, k in zip(h["layer"], h["head"])])
    ring = study.per_head(units)  # each seed with the next among 0, 1, 2
    shift = lambda h: study.spread_tests(h, n_boot=100).set_index(["seed", "measure"])["mean_shift"]
    pd.testing.assert_series_equal(shift(heads), shift(ring))
    with pytest.raises(ValueError, match=r"comparison run of seed 1 \(unpruned, seed 11, uniform\) of A has no cell"):
        study.per_head(table[table["seed"] != 11], cfg)


def test_equal_spread_is_told_from_a_concentrated_one():
    even = study.pooled(study.spread_tests(study.per_head(synthetic(False)), n_boot=500))
    conc = study.pooled(study.spread_tests(study.per_head(synthetic(True)), n_boot=500))
    e = even.set_index("measure").loc["weight_change"]
    c = conc.set_index("measure").loc["weight_change"]
    assert abs(e["excess_dispersion"]) < 0.05
    assert c["excess_dispersion"] > 0.2 and c["excess_dispersion"] > 2 * c["excess_dispersion_sd"] / np.sqrt(c["n_runs"])
    assert not [k for k in e.index if k.endswith("_p") or "fisher" in k or "_ci_" in k], "descriptive: no p, no interval"
    assert e["mean_shift"] == pytest.approx(np.log(1.5), abs=0.05)  # the kept heads changed 1.5x as much


def test_per_head_extra_change_by_hand():
    t = synthetic(False, n_seeds=2)
    heads = study.per_head(t)
    h = heads[(heads["measure"] == "weight_change") & (heads["seed"] == 0) & (heads["layer"] == 1) & (heads["head"] == 2)].iloc[0]
    runs = t.set_index(["seed", "strategy"])
    p, f, o = runs.loc[(0, "random"), "weight_change"][1][2], runs.loc[(0, "none"), "weight_change"][1][2], \
        runs.loc[(1, "none"), "weight_change"][1][2]
    assert h["x"] == pytest.approx(np.log(p / o)) and h["x_noise"] == pytest.approx(np.log(f / o))
    assert h["pruned_in_layer"] == 0 and h["pruned_adjacent"] == 3
    assert len(heads[(heads["measure"] == "weight_change") & (heads["seed"] == 0)]) == 9  # kept heads only


def test_layer_split_adds_up_and_layer_control_needs_varying_masks():
    """between + within = the variance of x; the same mask in every run (as here) leaves the count no variation
    beyond the layer, so the layer-controlled correlation is undefined."""
    heads = study.per_head(synthetic(False, n_seeds=3))
    tests = study.spread_tests(heads, n_boot=100)
    for r in tests.itertuples():
        g = heads[(heads["seed"] == r.seed) & (heads["measure"] == r.measure)]
        assert r.var_between_layers + r.var_within_layers == pytest.approx(np.var(g["x"]))
    assert tests["rho_lc_pruned_adjacent"].isna().all()


def test_cells_of_different_semantics_never_mix(tiny_model_dir, tiny_glue_root):
    """The semantics is part of every cell's key (a reference cell per semantics, not shared) and not of the
    fingerprint's parameters; the analysis pairs a pruned run only with unpruned runs of its own semantics."""
    cfg = config(tiny_model_dir, tiny_glue_root)
    cells = study.STUDY.plan(cfg)
    assert len({c.key for c in cells}) == len(cells)
    refs = [c for c in cells if c.axes["strategy"] == "none"]
    assert sorted((c.axes["seed"], c.axes["ablation"]) for c in refs) == [(0, "uniform"), (0, "zero"), (1, "uniform"), (1, "zero")]
    device = torch.device("cpu")
    fp = study.study_fingerprint(cfg, device)
    assert fp == study.study_fingerprint(config(tiny_model_dir, tiny_glue_root, finetune_ablations=["zero"]), device)
    assert fp == study.study_fingerprint(config(tiny_model_dir, tiny_glue_root, ablations=["zero"]), device)
    # the analysis: uniform runs evenly spread, zero runs concentrated; each semantics alone gives its own numbers
    uni, zer = synthetic(False).assign(ablation="uniform"), synthetic(True, seed=1).assign(ablation="zero")
    both = study.per_head(pd.concat([uni, zer], ignore_index=True))
    for sem, alone in (("uniform", study.per_head(uni)), ("zero", study.per_head(zer))):
        got = both[both["ablation"] == sem].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, alone.reset_index(drop=True))
    # a zero run whose references are all uniform is not paired with them
    orphan = pd.concat([uni, zer[zer["strategy"] != "none"]], ignore_index=True)
    assert set(study.per_head(orphan)["ablation"]) == {"uniform"}
    pool = study.pooled(study.spread_tests(both, n_boot=200)).set_index(["ablation", "measure"])
    assert abs(pool.loc[("uniform", "weight_change"), "excess_dispersion"]) < 0.05
    assert pool.loc[("zero", "weight_change"), "excess_dispersion"] > 0.2


def test_bad_parameters(tiny_model_dir, tiny_glue_root):
    with pytest.raises(ParameterError, match="at least 2 seeds"):
        config(tiny_model_dir, tiny_glue_root, seeds=[0])
    with pytest.raises(ParameterError, match=r"\(0, 1\)"):
        config(tiny_model_dir, tiny_glue_root, budgets=[1.0])
    with pytest.raises(ParameterError, match="strategies"):
        config(tiny_model_dir, tiny_glue_root, strategies=["least_important"])
    with pytest.raises(ParameterError, match="finetune_ablations"):
        config(tiny_model_dir, tiny_glue_root, finetune_ablations=["uniform", "uniform"])
    with pytest.raises(ParameterError, match="finetune_ablations"):
        config(tiny_model_dir, tiny_glue_root, finetune_ablations=["gaussian"])
    for bad in ([5], [5, 5], [1, 5], [5, -6], [5, True], [5, 6.0]):  # one per seed, distinct, none a seed, >= 0
        with pytest.raises(ParameterError, match="baseline_seeds"):
            config(tiny_model_dir, tiny_glue_root, baseline_seeds=bad)


def test_baseline_seeds_plan_unpruned_comparison_runs_and_keep_the_cells_key(tiny_model_dir, tiny_glue_root):
    """baseline_seeds adds one unpruned reference cell per seed and semantics (nothing pruned), after the units'
    cells; the units' cells and the study's fingerprint are unchanged (stored cells stay valid)."""
    plain = config(tiny_model_dir, tiny_glue_root)
    more = config(tiny_model_dir, tiny_glue_root, baseline_seeds=[7, 8])
    a, b = study.STUDY.plan(plain), study.STUDY.plan(more)
    assert [c.key for c in b[:len(a)]] == [c.key for c in a]
    assert [dict(c.axes) for c in b[len(a):]] == [
        {"task": "SST-2", "ablation": ab, "strategy": "none", "budget": 0.0, "seed": s}
        for s in (7, 8) for ab in ("uniform", "zero")]
    assert study.study_fingerprint(plain, torch.device("cpu")) == study.study_fingerprint(more, torch.device("cpu"))


def test_plan_cells_are_independent_and_costed(tiny_model_dir, tiny_glue_root, monkeypatch):
    """No cell requires or shares a model with another (each fine-tunes its own); the reference cell costs more
    than a pruned one (all heads kept); ``run`` calls the module's ``run_cell`` looked up at call time."""
    cfg = config(tiny_model_dir, tiny_glue_root)
    cells = study.STUDY.plan(cfg)
    assert [dict(c.axes) for c in cells] == [
        {"task": "SST-2", "ablation": a, "strategy": s, "budget": b, "seed": seed}
        for seed in (0, 1) for a in ("uniform", "zero") for s, b in (("none", 0.0), ("random", 0.5), ("middle", 0.5))]
    assert all(c.requires == () and c.group is None and c.cost.flops > 0 for c in cells)
    uniform, zero = cells[0:3], cells[3:6]
    # zero removes the pruned heads from the computation; uniform-masked heads are still computed
    assert zero[0].cost.flops > zero[1].cost.flops == zero[2].cost.flops
    assert uniform[0].cost.flops == uniform[1].cost.flops == zero[0].cost.flops
    monkeypatch.setattr(study, "run_cell", lambda ctx, cell: {"seen": dict(cell)})
    out = list(study.STUDY.run(None, cells[:2], {}))
    assert [(c.key, r["seen"]) for c, r in out] == [(c.key, dict(c.axes)) for c in cells[:2]]


def test_one_seed_without_comparison_runs_is_a_clear_error():
    """The ring pairs each seed with the NEXT seed's unpruned run: cells of one seed alone (an interim render
    ``--from-cells --where seed=0``) have none, and used to give an empty table that failed later with a bare
    KeyError. Now the error names the seeds and the way out; two seeds are enough."""
    t = synthetic(False, n_seeds=3)
    with pytest.raises(ValueError, match=r"only seed 0: select at least two seeds .*--where seed=0 seed=1"):
        study.per_head(t[t["seed"] == 0])
    assert set(study.per_head(t[t["seed"] < 2])["seed"]) == {0, 1}
