"""Study 4 end to end on a tiny local model; its analysis on hand-made matrices."""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from headprune_utils.analysis import claims
from headprune_utils.measure import clustering, redundancy
from headprune_utils.studies.config import ParameterError, validate
from headprune_utils.run.execution import run_study
from headprune_utils.store.paths import StudyPaths
from headprune_utils.studies import redundancy_patterns as study


def config(model_dir, data_root, **kw):
    base = dict(model=str(model_dir), tasks=["SST-2"], seeds=[0, 1], probe_tasks=["SST-2"], probe_size=8,
                random_probes=1, k_max=4, dropouts=[0.0, 0.3], mlm_seeds=[0], mlm_steps=2, mlm_head_steps=2,
                mlm_batch_size=8, mlm_text_size=32, n_permutations=99, n_null=19, train_size=None, dev_size=None,
                epochs=1, batch_size=8, lr=1e-3, device="cpu", data_dir=str(data_root), allow_hub=False, progress=False)
    return validate(study.RedundancyPatternsConfig, {**base, **kw})


def test_bad_parameters_are_refused_early(tiny_model_dir, tiny_glue_root):
    with pytest.raises(ParameterError, match="metrics"):
        config(tiny_model_dir, tiny_glue_root, metrics=["js", "nope"])
    with pytest.raises(ParameterError, match="cluster_metric"):
        config(tiny_model_dir, tiny_glue_root, metrics=["js"], cluster_metric="dcor")
    with pytest.raises(ParameterError, match="dropouts"):
        config(tiny_model_dir, tiny_glue_root, dropouts=[0.1, 1.0])
    with pytest.raises(ParameterError, match="k_max"):
        config(tiny_model_dir, tiny_glue_root, k_max=12)  # the tiny model has 3 x 4 = 12 heads
    with pytest.raises(ParameterError, match="probe_tasks"):
        config(tiny_model_dir, tiny_glue_root, probe_tasks=["SST-3"])
    with pytest.raises(ParameterError, match="random_init_control"):
        config(tiny_model_dir, tiny_glue_root, random_init_control="yes")


def test_study_runs_end_to_end_and_resumes(tiny_model_dir, tiny_glue_root, tmp_path):
    cfg = config(tiny_model_dir, tiny_glue_root)
    paths = StudyPaths(study.NAME, "t", root=tmp_path)
    table = run_study(study.STUDY, cfg, "t", paths)
    cells = study.plan_cells(cfg)
    assert len(table) == len(cells) == study.STUDY.n_cells(cfg) == 1 + 1 + 1 + 2 + 2 + 3  # + the control's 3 probes
    mats = study.Matrices(table, (3, 4))
    for model, probe in mats.keys():
        for m in redundancy.METRICS:
            full, a, b = (mats.get(model, probe, m, h) for h in ("full", "a", "b"))
            assert full.shape == (12, 12) and np.allclose(full, full.T) and (np.diag(full) == 0).all()
            assert (full >= 0).all() and (full <= 1 + 1e-9).all()
            assert np.allclose(full, (a + b) / 2, atol=1e-6)  # two halves of 4 sentences each
    # the fine-tuned models changed the maps; the pre-trained matrix on the task probe is that of the probe
    assert not np.allclose(mats.get("pretrained", "task-SST-2", "js"), mats.get("finetuned-SST-2-s0", "task-SST-2", "js"))
    # the negative control ran on every probe of the pre-trained model. The tiny "checkpoint" is itself BertModel
    # initialised after torch.manual_seed(0), so the control (seed 0, the architecture's own initialiser) equals it here
    assert {p for m, p in mats.keys() if m == study.CONTROL} == set(study.probe_names(cfg))
    assert np.allclose(mats.get("pretrained", "generic", "js"), mats.get(study.CONTROL, "generic", "js"))
    ctrl = study.negative_control(mats, cfg, ["SST-2"])
    assert set(ctrl["claim_id"]) == {"bian.who_random", "bian.where"}  # one fine-tuned task: no pair of tasks
    assert set(ctrl["model"]) == {"pretrained", study.CONTROL} and ctrl["criterion"].str.len().gt(0).all()
    again = run_study(study.STUDY, cfg, "t", paths)  # resumes: every cell reused
    assert again["seconds"].tolist() == table["seconds"].tolist()
    # a fine-tuned model's cells record its held-out curve (the model cache's); the other encoders' none
    import torch

    from headprune_utils.studies import glue_workbench

    ctx = glue_workbench.GlueContext(cfg, torch.device("cpu"), paths.finetuned_cache)
    tuned = table["model"].str.startswith("finetuned-")
    assert tuned.any() and (~tuned).any()
    for r in table[tuned].itertuples():
        task, s = r.model[len("finetuned-"):].rsplit("-s", 1)
        # the full model's curve, without the fine-tuning's clock readings (the cell is the same however computed)
        assert r.full_model_history == glue_workbench.recorded_curve(ctx.full_model(task, int(s))[1])
        assert len(r.full_model_history) >= 1 and not any("train_seconds" in e for e in r.full_model_history)
        # and the hash of the weights it probed: sha256 of the state dict computed here, independently
        weights = ctx.full_model(task, int(s))[0].state_dict()
        h = hashlib.sha256()
        for k, v in weights.items():  # the state dict's order
            h.update(k.encode())
            h.update(v.detach().cpu().contiguous().numpy().tobytes())
        assert r.full_model_sha == h.hexdigest()[:16]
    assert table.loc[~tuned, "full_model_history"].isna().all() and table.loc[~tuned, "full_model_sha"].isna().all()
    cl, info, crit = study.where(mats, cfg)
    assert info["k_cut"].iloc[0] == cl.k and info["n_groups"].iloc[0] == cl.n_groups and len(crit) >= 1
    labels = study.group_labels(cl)
    assert ((labels == 0) == ~cl.core).all() and set(labels[labels > 0]) == set(range(1, cl.n_groups + 1))
    when_t = study.when(mats, cfg, ["SST-2"])
    assert len(when_t) == 2 * len(cfg.metrics) and when_t["mantel_p"].between(0, 1).all()
    who_t = study.who(mats, cfg, ["generic", "random-0", "task-SST-2"])
    assert len(who_t) == 3 * len(cfg.metrics)
    runs, tests = study.why(mats, cfg)
    assert len(runs) == 2 * len(cfg.metrics) and "slope_per_unit_dropout" in tests
    agree = study.metric_agreement(mats, list(cfg.metrics), 99)
    assert len(agree) == len(cfg.metrics) * (len(cfg.metrics) + 1) // 2
    v = study.verdicts(mats, cfg, when_t, runs, ["SST-2"])
    assert tuple(v.columns) == claims.COLUMNS and set(v["claim_id"]) == {c.id for c in study.STUDY.claims}
    assert "nan" not in claims.render(v).lower()


def fake_table(mats_by_cell: dict, n_a: int = 4, n_b: int = 4) -> pd.DataFrame:
    rows = []
    for (model, probe), by_metric in mats_by_cell.items():
        rows.append({"model": model, "probe": probe, "seconds": 0.0,
                     "matrices": {**{m: {"a": clustering.upper(a).tolist(), "b": clustering.upper(b).tolist()}
                                     for m, (a, b) in by_metric.items()}, "n_a": n_a, "n_b": n_b}})
    return pd.DataFrame(rows)


def sym(rng, n=12, base=None, noise=0.0):
    x = rng.random((n, n)) if base is None else base + noise * rng.standard_normal((n, n))
    x = np.abs((x + x.T) / 2)
    np.fill_diagonal(x, 0)
    return x


def test_matrices_weight_the_halves_by_their_sentences():
    rng = np.random.default_rng(0)
    a, b = sym(rng), sym(rng)
    mats = study.Matrices(fake_table({("pretrained", "generic"): {"js": (a, b)}}, n_a=1, n_b=3), (3, 4))
    assert np.allclose(mats.get("pretrained", "generic", "js"), (a + 3 * b) / 4)
    assert np.allclose(mats.get("pretrained", "generic", "js", "a"), a)


def test_phase_independence_follows_the_matrices(tiny_model_dir, tiny_glue_root):
    """A fine-tuned matrix equal to the pre-trained one (plus little noise) has a high, significant Mantel r; an
    unrelated one does not (the verdicts: tests/unit/test_claims_redundancy_patterns.py)."""
    cfg = config(tiny_model_dir, tiny_glue_root, metrics=["js"], cluster_metric="js", seeds=[0], n_permutations=199)
    rng = np.random.default_rng(1)
    pre = sym(rng)
    cells_same = {("pretrained", "task-SST-2"): {"js": (pre, pre)},
                  ("finetuned-SST-2-s0", "task-SST-2"): {"js": (sym(rng, base=pre, noise=0.01),) * 2}}
    cells_other = {("pretrained", "task-SST-2"): {"js": (pre, pre)},
                   ("finetuned-SST-2-s0", "task-SST-2"): {"js": (sym(rng),) * 2}}
    same = study.when(study.Matrices(fake_table(cells_same), (3, 4)), cfg, ["SST-2"])
    other = study.when(study.Matrices(fake_table(cells_other), (3, 4)), cfg, ["SST-2"])
    assert same["mantel_r"].iloc[0] > 0.95 and same["mantel_p"].iloc[0] < 0.01
    assert other["mantel_p"].iloc[0] > 0.01


def test_dropout_analysis_on_hand_made_runs(tiny_model_dir, tiny_glue_root):
    """Mean distance falling with dropout by more than the seeds differ: the slope is negative and significant, over
    the seeds (one OLS slope per MLM seed, a one-sample t over them: a seed's runs are not independent points)."""
    cfg = config(tiny_model_dir, tiny_glue_root, metrics=["js"], cluster_metric="js", dropouts=[0.0, 0.1, 0.3],
                 mlm_seeds=[0, 1, 2])
    rng = np.random.default_rng(2)
    base = 0.2 + sym(rng) * 0.6
    cells = {("pretrained", "generic"): {"js": (base, base)}}
    rows_extra = {}
    for p in cfg.dropouts:
        for s in cfg.mlm_seeds:
            m = np.clip(base * (1 - p * (1 + 0.05 * s)) + 0.001 * s, 0, 1)
            np.fill_diagonal(m, 0)
            cells[(f"mlm-p{p:g}-s{s}", "generic")] = {"js": (m, m)}
            rows_extra[f"mlm-p{p:g}-s{s}"] = 5.0
    table = fake_table(cells)
    table["loss_last"] = table["model"].map(rows_extra)
    runs, tests = study.why(study.Matrices(table, (3, 4)), cfg)
    t = tests.set_index("metric").loc["js"]
    assert t["slope_per_unit_dropout"] < 0 and t["slope_p"] < 0.01 and t["n_seeds"] == 3 and t["n_runs"] == 9
    # independently: a slope per seed (numpy's least squares), a t-test over the three
    slopes = [np.polyfit(g["dropout"], g["mean_distance"], 1)[0] for _, g in runs[runs["metric"] == "js"].groupby("seed")]
    assert t["slope_per_unit_dropout"] == pytest.approx(np.mean(slopes))
    se = np.std(slopes, ddof=1) / np.sqrt(3)
    assert t["slope_p"] == pytest.approx(2 * sps.t.sf(abs(np.mean(slopes)) / se, 2))
    assert t["slope_ci_low"] == pytest.approx(np.mean(slopes) - sps.t.ppf(0.975, 2) * se)
    assert t["mean_abs_diff_between_dropouts"] > 10 * t["mean_abs_diff_between_seeds"]


def test_plan_groups_the_cells_that_share_a_model(tiny_model_dir, tiny_glue_root, monkeypatch):
    """The pre-trained model's cells form one group, the MLM cells of one seed another, a fine-tuned model's cell
    is alone; no cell requires another; the first MLM cell of a seed also pays for the new head's training."""
    from headprune_utils.run.execution import batches_of

    cfg = config(tiny_model_dir, tiny_glue_root, mlm_seeds=[0, 1])
    cells = study.STUDY.plan(cfg)
    assert [c["probe"] for c in cells if c["model"] == "pretrained"] == study.probe_names(cfg) == \
        ["generic", "random-0", "task-SST-2"]
    assert all(c.requires == () and c.cost.flops > 0 for c in cells)
    groups = {c.key: c.group for c in cells}
    assert [[c.key for c in b] for b in batches_of(cells)] == [[c.key for c in cells[:3]], [cells[3].key], [cells[4].key],
                                                               [cells[5].key, cells[6].key], [cells[7].key, cells[8].key],
                                                               [c.key for c in cells[9:]]]
    assert groups[cells[5].key] == ("mlm", 0) and groups[cells[7].key] == ("mlm", 1)
    assert [c["model"] for c in cells[9:]] == [study.CONTROL] * 3 and groups[cells[9].key] == ("random-init", 0)
    assert [c["probe"] for c in cells[9:]] == study.probe_names(cfg)
    assert cells[5].cost.flops > cells[6].cost.flops
    monkeypatch.setattr(study, "run_cell", lambda ctx, cell: {"seen": dict(cell)})
    assert [r["seen"] for _, r in study.STUDY.run(None, cells[:3], {})] == [dict(c.axes) for c in cells[:3]]


def test_the_control_only_adds_cells_and_keeps_the_fingerprint(tiny_model_dir, tiny_glue_root):
    """random_init_control adds the control's cells at the end and changes nothing else: the other cells' keys, order,
    groups and costs, and the fingerprint (so the committed cells stay valid)."""
    import torch

    on, off = (config(tiny_model_dir, tiny_glue_root, random_init_control=v) for v in (True, False))
    with_control, without = study.plan_cells(on), study.plan_cells(off)
    n = len(without)
    assert [(c.key, c.group, c.cost) for c in with_control[:n]] == [(c.key, c.group, c.cost) for c in without]
    assert all(c["model"] == study.CONTROL for c in with_control[n:]) and len(with_control) - n == len(study.probe_names(on))
    assert all(a.cost == b.cost for a, b in zip(with_control[n:], with_control[:3]))  # the same matrices as the pre-trained model's
    cpu = torch.device("cpu")
    assert study.study_fingerprint(on, cpu) == study.study_fingerprint(off, cpu)


def test_random_init_model_is_the_architecture_with_seeded_weights(tiny_model_dir):
    """Built from the config only: the same seed gives the same weights, another seed others, none the checkpoint's;
    the caller's random stream is untouched; eval mode."""
    import torch
    from transformers import AutoModel

    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    a = study.random_init_model(str(tiny_model_dir), 0, torch.device("cpu"))
    assert torch.equal(torch.rand(3), before)
    b = study.random_init_model(str(tiny_model_dir), 0, torch.device("cpu"))
    c = study.random_init_model(str(tiny_model_dir), 1, torch.device("cpu"))
    ckpt = AutoModel.from_pretrained(str(tiny_model_dir))  # saved from BertModel(config) after torch.manual_seed(0)
    name = "encoder.layer.0.attention.self.query.weight"
    sa, sb, sc, sk = (m.state_dict()[name] for m in (a, b, c, ckpt))
    assert torch.equal(sa, sb) and not torch.equal(sa, sc)
    assert torch.equal(sa, sk) and not torch.equal(sc, sk)  # the architecture's own initialiser, seeded
    assert not a.training and type(a) is type(ckpt) and a.config.num_attention_heads == ckpt.config.num_attention_heads


def test_probe_halves_are_a_seeded_random_split_or_the_files_order():
    """A probe's halves: "random" (since 2026-12-06) draws a half with the seed, so the halves are exchangeable samples
    of the probe even where the file is ordered by content (STS-B's dev file by genre); "file_order" keeps the first
    and second half (the committed standard cells). Either way: disjoint, covering, len // 2 and the rest, each
    half in the file's order."""
    from headprune_utils.tasks.batching import Encoded
    ids = [[101, i, 102] for i in range(11)]
    enc = Encoded(ids, None, np.arange(11), 0)
    a, b = study._halves(enc, "file_order", 0)
    assert [x[1] for x in a.input_ids] == list(range(5)) and [x[1] for x in b.input_ids] == list(range(5, 11))
    a, b = study._halves(enc, "random", 3)
    ra, rb = [x[1] for x in a.input_ids], [x[1] for x in b.input_ids]
    assert len(ra) == 5 and len(rb) == 6 and sorted(ra + rb) == list(range(11)) and ra == sorted(ra) and rb == sorted(rb)
    assert ra == sorted(np.random.default_rng([3, 1]).permutation(11)[:5].tolist())  # the seed's draw, reproducible
    assert list(a.labels) == ra and ra != list(range(5))
    assert [x[1] for x in study._halves(enc, "random", 4)[0].input_ids] != ra  # another seed, another split
    # an ordered file (two genres, one after the other): the random halves mix them, the file-order halves do not
    genre = np.repeat([0, 1], 48)
    order = Encoded([[101, int(i), 102] for i in range(96)], None, genre, 0)
    fa, _ = study._halves(order, "file_order", 0)
    sa, _ = study._halves(order, "random", 0)
    assert set(fa.labels) == {0} and 0.3 < np.mean(sa.labels) < 0.7
    with pytest.raises(ValueError, match="split must be one of"):
        study._halves(enc, "alternate", 0)


def test_probe_split_is_checked_and_keeps_the_file_order_cells_fingerprint(tiny_model_dir, tiny_glue_root):
    import torch
    with pytest.raises(ParameterError, match="probe_split"):
        config(tiny_model_dir, tiny_glue_root, probe_split="halves")
    cpu = torch.device("cpu")
    rnd, old = (config(tiny_model_dir, tiny_glue_root, probe_split=v) for v in ("random", "file_order"))
    assert study.study_fingerprint(rnd, cpu) != study.study_fingerprint(old, cpu)


def test_the_committed_standard_cells_keep_their_fingerprint(data_root, monkeypatch):
    """standard and standard-next pin probe_split: file_order, the halves their committed cells hold: the cells still
    match their parameters' fingerprint (the parameter is hashed only when it is not file_order)."""
    import json as json_

    import torch
    from headprune_utils.store.paths import project_root
    from headprune_utils.studies.config import load_profile

    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    checked = 0
    for profile in ("standard", "standard-next"):
        cells = project_root() / "outputs" / "redundancy_patterns" / profile / "cells"
        stored = {json_.loads(p.read_text())["fingerprint"] for p in cells.glob("*.json")}
        if not stored:
            continue
        params = load_profile(profile)["redundancy_patterns"]
        assert params["probe_split"] == "file_order"
        cfg = validate(study.RedundancyPatternsConfig, {**params, "device": "cpu"})
        assert stored == {study.study_fingerprint(cfg, torch.device("cpu"))}, profile
        checked += 1
    if not checked:
        pytest.skip("no committed cells of study 4")
