"""Study 7 (translation heads) end to end on a tiny Marian model and a tiny synthetic parallel corpus; parameters
refused early; resume without recomputation; the analysis on hand-made tables."""
from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest
import torch

from headprune_utils.analysis import claims
from headprune_utils.model import masks, models
from headprune_utils.studies.config import ParameterError, validate
from headprune_utils.run.execution import run_study
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import StaleResultsError, cell_key
from headprune_utils.studies import STUDIES
from headprune_utils.studies import nmt_heads as study

# a toy language pair: the target is the source word by word through a dictionary (learnable in a few steps)
LEXICON = {"a": "ein", "the": "der", "man": "Mann", "woman": "Frau", "dog": "Hund", "red": "rot", "big": "groß",
           "runs": "rennt", "sees": "sieht", "plays": "spielt", "ball": "Ball", "in": "im", "park": "Park",
           "snow": "Schnee", "quickly": "schnell", ".": "."}
UD = [  # (form, head, deprel) over the lexicon's English words
    [("a", 3, "det"), ("big", 3, "amod"), ("dog", 4, "nsubj"), ("runs", 0, "root"), ("quickly", 4, "advmod"), (".", 4, "punct")],
    [("the", 2, "det"), ("man", 3, "nsubj"), ("sees", 0, "root"), ("a", 6, "det"), ("red", 6, "amod"), ("ball", 3, "obj")],
    [("a", 2, "det"), ("woman", 3, "nsubj"), ("plays", 0, "root"), ("in", 6, "case"), ("the", 6, "det"), ("park", 3, "obl")],
]


def sentences(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    subj, verbs, objs = ["man", "woman", "dog"], ["runs", "sees", "plays"], ["ball", "park", "snow"]
    src = []
    for _ in range(n):
        words = [str(rng.choice(["a", "the"])), *(["big"] if rng.random() < 0.4 else []), str(rng.choice(subj)),
                 str(rng.choice(verbs)), *(["quickly"] if rng.random() < 0.3 else []), str(rng.choice(["a", "the"])),
                 *(["red"] if rng.random() < 0.4 else []), str(rng.choice(objs)), "."]
        src.append(" ".join(words))
    return src, [" ".join(LEXICON[w] for w in s.split()) for s in src]


def write_gz(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A data root with a tiny Multi30k-layout corpus and a tiny UD English-EWT dev split."""
    r = tmp_path_factory.mktemp("nmt_root")
    raw = r / "multi30k" / "task1" / "raw"
    for i, (stem, n) in enumerate((("train", 160), ("val", 24), ("test_2016_flickr", 16))):
        src, tgt = sentences(n, seed=i)
        write_gz(raw / f"{stem}.en.gz", src)
        write_gz(raw / f"{stem}.de.gz", tgt)
    lines = []
    for k, sent in enumerate(UD * 2):
        lines.append(f"# sent_id = s{k}")
        lines += [f"{i}\t{f}\t{f}\tX\tX\t_\t{h}\t{d}\t_\t_" for i, (f, h, d) in enumerate(sent, 1)]
        lines.append("")
    (r / "ud_english_ewt").mkdir()
    (r / "ud_english_ewt" / "en_ewt-ud-dev.conllu").write_text("\n".join(lines) + "\n")
    return r


TINY = dict(vocab_size=80, encoder_layers=2, decoder_layers=2, heads=2, d_model=16, ffn_dim=32, dropout=0.0,
            max_steps=12, max_tokens=None, batch_size=16, lr=3e-3, warmup_steps=2, eval_every=6, patience=None,
            train_max_seconds=None, eval_batch_size=16, types=["enc", "cross", "all"], fractions=[0.5], seeds=[0, 1],
            retrain_types=["all"], retrain_fractions=[0.5], retrain_steps=2, strategy_types=["enc", "dec"],
            strategies=["random", "top", "bottom"], strategy_budgets=[0.5], role_sentences=8, importance_size=8,
            ud_sentences=None, l0_settings=["enc", "all"], lambdas=[0.0, 2.0], l0_steps=3, l0_batch_size=8, l0_lr=0.5,
            n_permutations=99, device="cpu", allow_hub=False, progress=False)


def config(root, **kw):
    return validate(study.NMTHeadsConfig, {**TINY, "data_dir": str(root), **kw})


# ---------------------------------------------------------------------------------------------- parameters
def test_bad_parameters_are_refused_before_any_training(root, tmp_path, monkeypatch):
    with pytest.raises(ParameterError, match="unknown attention type"):
        config(root, types=["enc", "encoder"])
    with pytest.raises(ParameterError, match="l0_settings: unknown attention type"):
        config(root, l0_settings=["self"])
    with pytest.raises(ParameterError, match="outside"):
        config(root, fractions=[1.5])  # an impossible budget
    with pytest.raises(ParameterError, match="prunes no head"):
        config(root, fractions=[0.01])
    with pytest.raises(ParameterError, match="include 'random'"):
        config(root, strategies=["top", "bottom"])
    with pytest.raises(ParameterError, match="unknown parameter"):
        config(root, fraction=[0.5])
    with pytest.raises(ParameterError, match="divisible"):
        config(root, d_model=15)
    with pytest.raises(ParameterError, match="data_dir"):
        config(root, data_dir=str(tmp_path / "nowhere"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ParameterError, match="multi30k.*no local data.*HEADPRUNE_DATA_DIR"):
        config(root, data_dir=str(empty), allow_hub=True, syntactic=False)
    with pytest.raises(ParameterError, match="UD English-EWT"):
        config(root, ud_split="test")
    with pytest.raises(ParameterError, match="source language"):
        config(root, direction="de-en")
    assert config(root, direction="de-en", syntactic=False).source_lang() == "de"
    assert "nmt_heads" in STUDIES and STUDIES["nmt_heads"].Config is study.NMTHeadsConfig


def test_cell_masks_prune_the_right_heads(root):
    cfg = config(root)
    shapes = cfg.shapes()
    for t in ("enc", "dec", "cross"):
        m = study.cell_masks(cfg, {"kind": "prune", "type": t, "fraction": 0.5, "seed": 0})
        assert int((m[t] == 0).sum()) == 2 and all(bool((m[k] == 1).all()) for k in shapes if k != t)
        assert torch.equal(m[t], masks.random_mask(2, 2, 2, 0))  # the one-grid random mask
    joint = study.cell_masks(cfg, {"kind": "prune", "type": "all", "fraction": 0.5, "seed": 3})
    assert sum(int((m == 0).sum()) for m in joint.values()) == 6
    s = study.cell_masks(cfg, {"kind": "strategy", "type": "enc", "strategy": "top", "budget": 0.5, "seed": 0})
    assert s["enc"].tolist() == [[1.0, 1.0], [0.0, 0.0]]


def test_every_cell_requires_its_model_and_the_keys_are_unchanged(root):
    cfg = config(root, model_seeds=[0, 3])
    cells = study.plan_cells(cfg)
    assert [c["kind"] for c in cells[:2]] == ["model", "roles"]
    assert dict(cells[2].axes) == {"kind": "prune", "type": "enc", "fraction": 0.5, "seed": 0, "model_seed": 0}
    assert dict(cells[-1].axes) == {"kind": "retrain", "type": "all", "fraction": 0.5, "seed": 1, "model_seed": 3}
    for c in cells:
        assert c.cost.flops > 0
        if c["kind"] == "model":
            assert c.requires == () and c.group is None
            continue
        assert c.requires == (cell_key({"kind": "model", "model_seed": c["model_seed"]}),)
        want = {"prune": (c["model_seed"], "evaluate"), "strategy": (c["model_seed"], "evaluate"),
                "l0": (c["model_seed"], "l0")}.get(c["kind"])
        assert c.group == want
    costs = study.plan_costs(cfg)
    assert costs["model"] > costs["l0"] > costs["evaluate"] > 0
    ids = [claim.id for claim in study.STUDY.claims]
    assert len(ids) == len(set(ids)) and "voita.enc_most_prunable" in ids


# ---------------------------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def run(root, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    cfg = config(root)
    paths = StudyPaths(study.NAME, "unit", root=out)
    table = run_study(study.STUDY, cfg, "unit", paths)
    return cfg, paths, table


def test_the_study_runs_end_to_end(run):
    cfg, paths, table = run
    assert len(table) == len(study.plan_cells(cfg)) == len(list(paths.cells.glob("*.json")))
    counts = table["kind"].value_counts().to_dict()
    assert counts == {"model": 1, "roles": 1, "prune": 6, "strategy": 12, "l0": 4, "retrain": 3}
    folders = [f for f in paths.nmt_cache.glob("multi30k__seed=0__*") if f.is_dir()]
    assert folders == [study.model_folder(paths, cfg, 0, torch.device("cpu"))]
    assert (folders[0] / "config.json").is_file() and (folders[0] / "tokenizer.json").is_file()
    assert not list(paths.nmt_cache.glob(".*tmp*")), "no temporary folder is left"
    assert not list(paths.nmt_cache.glob("*checkpoint*")), "the training checkpoint is removed once the model is stored"
    curves = study.training_curves(table)  # the dev-loss curve: every evaluation of the model cell's history
    assert curves["step"].tolist() == [6, 12] and curves["best"].sum() == 1
    assert curves.loc[curves["best"], "dev_loss"].iloc[0] == curves["dev_loss"].min()
    full = table[table["kind"] == "model"].iloc[0]
    assert 0 <= full["bleu"] <= 100 and full["steps"] == 12 and full["trained_now"]
    # the random strategy at budget 0.5 is the random-pruning mask of the same type and seed: decoded once
    p = table[(table["kind"] == "prune") & (table["type"] == "enc")].set_index("seed")
    s = table[(table["kind"] == "strategy") & (table["type"] == "enc") & (table["strategy"] == "random")].set_index("seed")
    assert (p["masks"] == s["masks"]).all() and np.allclose(p["bleu"], s["bleu"]) and s["eval_cached"].all()
    l0 = table[table["kind"] == "l0"].set_index(["setting", "lam"])
    assert set(l0.loc[("enc", 0.0), "kept_by_type"]) == {"enc"}
    assert set(l0.loc[("all", 2.0), "kept_by_type"]) == {"enc", "dec", "cross"}
    assert l0.loc[("all", 2.0), "n_kept"] <= l0.loc[("all", 0.0), "n_kept"]
    roles = table[table["kind"] == "roles"].iloc[0]
    assert np.asarray(roles["roles"]["prev"]).shape == (2, 2) and roles["roles"]["syntactic"]
    assert set(roles["importance"]) == {"enc", "dec", "cross"}
    re = table[table["kind"] == "retrain"]
    assert set(re["type"]) == {"none", "all"} and (re["retrain_steps"] == 2).all()
    meta = (paths.dir / "run_meta.json").read_text()
    assert "model_cache" in meta and str(paths.dir) not in meta
    # every cell records the trained model it started from: the hash of the cached model's weights
    cached_model = study.Context(cfg, torch.device("cpu"), paths).model(0)[0]
    assert table["full_model_sha"].tolist() == [models.weights_sha(cached_model)] * len(table)


def test_a_context_without_the_cached_model_trains_the_same_model(run, tmp_path):
    """A worker whose outputs root lacks the model (a Ray node without shared storage) trains it itself: the
    same parameters, seed and device type give the same weights in the same folder name."""
    cfg, paths, table = run
    elsewhere = StudyPaths(study.NAME, "unit", root=tmp_path)
    ctx = study.Context(cfg, torch.device("cpu"), elsewhere)
    model, _, meta, trained_now = ctx.model(0)
    assert trained_now and ctx.folder(0).name == study.model_folder(paths, cfg, 0, torch.device("cpu")).name
    assert ctx.model(0)[3] is False, "then from memory"
    cached = study.Context(cfg, torch.device("cpu"), paths)
    reference, _, ref_meta, again = cached.model(0)
    assert not again and meta["steps"] == ref_meta["steps"]
    ref = reference.state_dict()
    assert all(torch.equal(v, ref[k]) for k, v in model.state_dict().items())


def test_a_model_trained_on_another_kind_of_machine_is_refused_by_name(run, tmp_path, monkeypatch):
    """A cached model (e.g. an outputs folder copied from another machine) records the kind of machine that trained it; on another
    kind its cells are refused, naming both kinds and the remedy, before any work (one model's cells are never
    computed on two kinds). A folder written before the kind was recorded is read as it is."""
    import json
    import shutil

    from headprune_utils.store.results import machine_kind

    cfg, paths, table = run
    source = study.model_folder(paths, cfg, 0, torch.device("cpu"))
    meta = json.loads((source / "headprune_nmt.json").read_text())
    assert meta["machine"] == machine_kind("cpu") == table["machine"].iloc[0]
    other = StudyPaths(study.NAME, "unit", root=tmp_path)
    copy = study.model_folder(other, cfg, 0, torch.device("cpu"))
    shutil.copytree(source, copy)
    (copy / "headprune_nmt.json").write_text(json.dumps({**meta, "machine": "cpu: Another CPU [sse4_2]"}))
    with pytest.raises(study.OtherMachineModelError, match=r"trained on cpu: Another CPU \[sse4_2\]; this machine is") as e:
        study.Context(cfg, torch.device("cpu"), other).model(0)
    assert "--profile unit --only nmt_heads --cells-only --fresh --where model_seed=0" in str(e.value)
    assert str(tmp_path) not in str(e.value), "no path of this machine in the message"
    (copy / "headprune_nmt.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "machine"}))
    model, _, _, trained_now = study.Context(cfg, torch.device("cpu"), other).model(0)
    assert not trained_now
    study.check_trained_here(meta, "cpu", 0, copy)  # the same kind: nothing to refuse
    # an AVX-512 machine of the model of CPU that trained it on AVX2: the message names the way to hold it to AVX2
    avx2 = {**meta, "machine": "cpu: Some CPU [sse4_2 avx avx2 fma]"}
    monkeypatch.setattr(study, "machine_kind", lambda device: "cpu: Some CPU [sse4_2 avx avx2 fma avx512f]")
    with pytest.raises(study.OtherMachineModelError, match=r"--where model_seed=0\. Or resume it here held to AVX2: "
                                                           r"start the command with ATEN_CPU_CAPABILITY=avx2 "):
        study.check_trained_here(avx2, "cpu", 0, copy)


def test_a_rerun_resumes_without_recomputing_and_refuses_other_parameters(run, monkeypatch):
    cfg, paths, table = run

    def boom(*a, **k):
        raise AssertionError("recomputed")

    monkeypatch.setattr(study.Context, "_train", boom)
    monkeypatch.setattr(study.Context, "score", boom)
    monkeypatch.setattr(study, "l0_train", boom)
    again = run_study(study.STUDY, cfg, "unit", paths)
    pd.testing.assert_frame_equal(again.drop(columns="seconds"), table.drop(columns="seconds"))
    # a lost cell is recomputed from the cached model and evaluations, without training or decoding again
    victim = next(paths.cells.glob("*kind=prune__*"))
    victim.unlink()
    again = run_study(study.STUDY, cfg, "unit", paths)
    assert len(again) == len(table)
    with pytest.raises(StaleResultsError):
        run_study(study.STUDY, config(cfg.data_dir, test_size=8), "unit", paths)


def test_the_analysis_runs_on_the_study_table(run):
    cfg, paths, table = run
    summary = study.random_summary(table)
    assert set(summary["regime"]) == {"prune", "prune_then_train"}
    assert set(summary[summary["regime"] == "prune"]["type"]) == {"enc", "cross", "all"}
    drops = study.random_drops(table)
    full = table[table["kind"] == "model"]["bleu"].iloc[0]
    p = table[(table["kind"] == "prune") & (table["type"] == "cross")]["bleu"].to_numpy()
    row = drops[(drops["type"] == "cross") & (drops["regime"] == "prune")].iloc[0]
    assert row["mean_drop"] == pytest.approx(full - p.mean())
    tc = study.type_contrasts(table)
    assert set(tc["contrast"]) == {"enc vs cross"}  # dec was not pruned at random here
    sc = study.strategy_contrasts(table)
    assert {"top vs random", "bottom vs random"} <= set(sc["contrast"])
    role_tab = study.roles(table, **study.role_thresholds(cfg))
    assert len(role_tab) == 4
    curve = study.l0_curve(table)
    by_type = study.l0_by_type(curve, table)
    assert set(by_type[by_type["setting"] == "all"]["type"]) == {"enc", "dec", "cross"}
    surv = study.survival(table)
    assert set(surv["task"]) == {"enc", "all"} and len(surv) == 8
    tests = study.survival_tests(surv, role_tab, n_perm=cfg.n_permutations)
    assert "specialized" in set(tests["group"])
    verdict = study.verdicts(table, role_tab, surv, study.roles_at_budget(table, role_tab),
                             study.score_agreement(study.encoder_scores(table)), by_type, claims_=study.CLAIMS,
                             corpus=cfg.corpus,
                             semantics=study.SEMANTICS, scale_=study.scale(cfg), patience=cfg.patience)
    claims.validate(verdict)
    assert set(verdict["claim_id"]) == {c.id for c in study.CLAIMS}
    assert (verdict["verdict"] == "not testable").all()  # one trained model: no test can reach its level
    assert "nan" not in claims.render(verdict).lower()


# ---------------------------------------------------------------------------------------------- analysis by hand
def _cells():
    """Hand-made cells: one model (BLEU 30), random pruning of enc and cross at 0.5 with seeds 0-2."""
    rows = [{"kind": "model", "model_seed": 0, "bleu": 30.0, "chrf": 50.0, "nll": 2.0, "seconds": 1.0}]
    bleu = {"enc": [29.0, 28.0, 30.0], "cross": [20.0, 22.0, 21.0]}
    for t, values in bleu.items():
        for s, b in enumerate(values):
            rows.append({"kind": "prune", "type": t, "fraction": 0.5, "seed": s, "model_seed": 0, "bleu": b,
                         "chrf": b + 20, "nll": 2.5, "n_heads_pruned": 24, "n_heads_total": 48, "seconds": 1.0})
    rows.append({"kind": "retrain", "type": "none", "fraction": 0.0, "seed": -1, "model_seed": 0, "bleu": 31.0, "chrf": 0.0,
                 "nll": 0.0, "n_heads_pruned": 0, "n_heads_total": 144, "retrain_steps": 5, "seconds": 1.0})
    for s, b in enumerate([30.0, 29.0, 28.0]):
        rows.append({"kind": "retrain", "type": "cross", "fraction": 0.5, "seed": s, "model_seed": 0, "bleu": b,
                     "chrf": 0.0, "nll": 0.0, "n_heads_pruned": 24, "n_heads_total": 48, "retrain_steps": 5, "seconds": 1.0})
    return pd.DataFrame(rows)


def test_random_pruning_analysis_by_hand():
    t = _cells()
    s = study.random_summary(t).set_index(["regime", "type", "fraction"])
    assert s.loc[("prune", "enc", 0.5), "mean"] == pytest.approx(29.0)
    assert s.loc[("prune", "cross", 0.5), "drop_from_full"] == pytest.approx(9.0)
    assert s.loc[("prune_then_train", "cross", 0.0), "mean"] == pytest.approx(31.0)
    d = study.random_drops(t).set_index(["regime", "type"])
    assert d.loc[("prune_then_train", "cross"), "mean_drop"] == pytest.approx(2.0)
    assert study.prunable(study.random_drops(t), 1.5).set_index(["regime", "type"]).loc[
        ("prune", "enc"), "max_fraction_within_tolerance"] == 0.5
    r = study.retrain_table(t)
    # seed 0: drop without retraining 30 - 20 = 10, with 31 - 30 = 1: recovered 9
    assert r.set_index("seed").loc[0, "recovery"] == pytest.approx(9.0)
    c = study.type_contrasts(t)
    pooled = c[(c["task"] == "all") & (c["budget"] == "all")].iloc[0]
    assert pooled["contrast"] == "enc vs cross" and pooled["mean_diff"] == pytest.approx(8.0)
    # one trained model (its 3 mask seeds are no replicates): one unit, no interval, no p-value
    assert pooled["n_pairs"] == 3 and pooled["n_units"] == 1 and pd.isna(pooled["ci_low"])
    assert "sign_flip_p" not in c.columns and "t_test_p" not in c.columns


def test_l0_analysis_by_hand():
    curve = pd.DataFrame([
        {"setting": "all", "model_seed": 0, "lam": 0.1, "n_kept": 20, "n_heads_total": 36, "bleu_l0": 25.0,
         "bleu_random_mean": 20.0, "bleu_full": 27.0, "kept_enc": 4, "kept_dec": 7, "kept_cross": 9},
        {"setting": "all", "model_seed": 0, "lam": 1.0, "n_kept": 9, "n_heads_total": 36, "bleu_l0": 15.0,
         "bleu_random_mean": 14.0, "bleu_full": 27.0, "kept_enc": 3, "kept_dec": 3, "kept_cross": 3},
        {"setting": "all", "model_seed": 0, "lam": 9.0, "n_kept": 0, "n_heads_total": 36, "bleu_l0": 0.0,
         "bleu_random_mean": 0.0, "bleu_full": 27.0, "kept_enc": 0, "kept_dec": 0, "kept_cross": 0},
    ])
    table = pd.DataFrame([{"kind": "l0", "setting": "all", "heads_by_type": {"enc": 12, "dec": 12, "cross": 12}}])
    by_type = study.l0_by_type(curve, table)
    assert len(by_type) == 9 and by_type["frac_kept"].max() == pytest.approx(0.75)
    tp = study.type_prunability(by_type).set_index("lam")
    assert list(tp.index) == [0.1, 1.0]  # lambda 9 pruned everything
    assert tp.loc[0.1, "enc_fewest"] and tp.loc[0.1, "cross_most"]
    assert not tp.loc[1.0, "enc_fewest"] and not tp.loc[1.0, "cross_most"]  # ties are not "fewest"
    c = study.l0_contrasts(curve).set_index(["contrast", "setting", "lam"])
    assert c.loc[("L0 - random", "all", "all"), "n_pairs"] == 2  # the all-pruned mask is left out
    assert c.loc[("L0 - random", "all", "all"), "mean_diff"] == pytest.approx(3.0)
    assert c.loc[("L0 - random", "pooled", "all"), "n_pairs"] == 2
    assert c.loc[("L0 - random", "pooled", "all"), "n_units"] == 1
    assert c.loc[("L0 - random", "pooled", "all"), "ci_low"] == "n/a (one model seed)"  # a missing interval is said in words, never NaN
    assert c.loc[("L0 - full", "all", "all"), "n_pairs"] == 3


def test_a_data_root_without_multi30k_is_a_data_gap_of_the_smoke_run(tmp_path, monkeypatch):
    """What makes the smoke test skip this study (with the reason) instead of failing every notebook."""
    from headprune_utils.run.profiles import validate_profile

    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ParameterError, match="multi30k.*HEADPRUNE_DATA_DIR"):
        validate_profile("smoke", ["nmt_heads"])


# ---------------------------------------------------------------------------------------------- retraining to the plateau
PLATEAU_RETRAINING = dict(retrain_patience=1, retrain_eval_every=2, retrain_max_steps=6, retrain_seeds=[0],
                          retrain_strategy_budgets=[0.5])


def test_the_plateau_regime_is_checked_before_any_training(root):
    for kw, field in (({"retrain_patience": 2}, "retrain_max_steps"),  # no cap
                      ({"retrain_patience": 0, "retrain_max_steps": 100}, "retrain_patience"),
                      ({"retrain_patience": 2, "retrain_eval_every": 0, "retrain_max_steps": 100}, "retrain_eval_every"),
                      ({"retrain_patience": 3, "retrain_eval_every": 10, "retrain_max_steps": 39}, "retrain_max_steps"),
                      ({"retrain_seeds": []}, "retrain_seeds"), ({"retrain_seeds": [0, 0]}, "retrain_seeds"),
                      ({"retrain_strategy_budgets": [0.01]}, "retrain_strategy_budgets"),
                      ({"retrain_strategy_budgets": [0.5], "strategy_types": []}, "retrain_strategy_budgets"),
                      ({"retrain_strategy_types": ["all"]}, "retrain_strategy_types"),
                      ({"retrain_strategy_types": []}, "retrain_strategy_types")):
        with pytest.raises(ParameterError, match=field):
            config(root, **kw)
    with pytest.raises(ParameterError, match="retrain_patience.*train_max_seconds"):
        config(root, retrain_patience=1, retrain_max_steps=10, retrain_eval_every=2, train_max_seconds=60.0)
    cfg = config(root, retrain_patience=3, retrain_eval_every=10, retrain_max_steps=40)  # (3 + 1) x 10: the least
    rc = cfg.retrain_config()
    assert (rc.max_steps, rc.eval_every, rc.patience, rc.lr, rc.warmup_steps) == (40, 10, 3, cfg.retrain_lr,
                                                                               cfg.retrain_warmup)
    fixed = config(root).retrain_config()
    assert (fixed.max_steps, fixed.patience) == (TINY["retrain_steps"], None)


def test_the_fingerprint_tells_the_plateau_regime_from_fixed_steps(root):
    """The plateau regime's fields are in the fingerprint when it is on, so cells retrained a fixed number of steps
    are never read as plateau retrainings; off, they are left out, so the committed fixed-regime cells keep theirs."""
    cpu = torch.device("cpu")
    fixed = study.study_fingerprint(config(root), cpu)
    assert study.study_fingerprint(config(root, retrain_eval_every=7, retrain_max_steps=99), cpu) == fixed
    assert study.study_fingerprint(config(root, retrain_seeds=[1], retrain_strategy_budgets=[0.5],
                                          retrain_strategy_types=["dec"]), cpu) == fixed
    plateau = study.study_fingerprint(config(root, **PLATEAU_RETRAINING), cpu)
    assert plateau != fixed
    assert study.study_fingerprint(config(root, **{**PLATEAU_RETRAINING, "retrain_patience": 2}), cpu) != plateau
    assert study.study_fingerprint(config(root, **{**PLATEAU_RETRAINING, "retrain_max_steps": 8}), cpu) != plateau
    assert study.study_fingerprint(config(root, **{**PLATEAU_RETRAINING, "retrain_eval_every": 3}), cpu) != plateau


def test_the_committed_standard_cells_keep_their_fingerprint(data_root, monkeypatch):
    """The standard profile's meaning is unchanged by the plateau regime's fields: its committed cells (retrained a
    fixed 500 steps) still match the parameters' fingerprint."""
    import json as json_

    from headprune_utils.store.paths import project_root
    from headprune_utils.studies.config import load_profile

    cells = project_root() / "outputs" / "nmt_heads" / "standard" / "cells"
    stored = {json_.loads(p.read_text())["fingerprint"] for p in cells.glob("*.json")}
    if not stored:
        pytest.skip("no committed standard cells of study 7")
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))  # the profile's corpus is read from the real data
    cfg = validate(study.NMTHeadsConfig, {**load_profile("standard")["nmt_heads"], "device": "cpu"})
    assert not cfg.plateau_retraining()
    assert stored == {study.study_fingerprint(cfg, torch.device("cpu"))}


def test_plan_cells_of_the_plateau_regime(root):
    cfg = config(root, model_seeds=[0], **PLATEAU_RETRAINING)
    cells = [dict(c.axes) for c in study.plan_cells(cfg)]
    retrain = [c for c in cells if c["kind"] == "retrain"]
    assert retrain == [{"kind": "retrain", "type": "none", "fraction": 0.0, "seed": -1, "model_seed": 0},
                       {"kind": "retrain", "type": "all", "fraction": 0.5, "seed": 0, "model_seed": 0}]
    rs = [c for c in cells if c["kind"] == "retrain_strategy"]
    assert len(rs) == 2 * 3 and {c["seed"] for c in rs} == {0} and {c["budget"] for c in rs} == {0.5}
    only_dec = [dict(c.axes) for c in study.plan_cells(config(root, model_seeds=[0], retrain_strategy_types=["dec"],
                                                              **PLATEAU_RETRAINING)) if c["kind"] == "retrain_strategy"]
    assert {c["type"] for c in rs} == {"enc", "dec"} and {c["type"] for c in only_dec} == {"dec"} and len(only_dec) == 3
    m = study.cell_masks(cfg, rs[1])
    s = study.cell_masks(cfg, {**rs[1], "kind": "strategy"})
    assert all(torch.equal(m[k], s[k]) for k in m), "a retrained strategy mask is the strategy cell's mask"
    # a strategy whose mask another strategy's cell retrains already is planned as a cache read
    both = {c["strategy"]: c for c in study.plan_cells(config(root, model_seeds=[0], **{
        **PLATEAU_RETRAINING, "strategies": ["random", "top", "top_bottom"]})) if c["kind"] == "retrain_strategy"
        and c["type"] == "enc"}
    assert both["top_bottom"].cost.flops == 1.0 < both["top"].cost.flops == both["random"].cost.flops
    # planned at the cap, with a dev-loss forward per evaluation: more than the fixed regime's steps
    assert study.retrain_cost(cfg, "all", 0.5) > study.retrain_cost(config(root), "all", 0.5)


@pytest.fixture(scope="module")
def plateau_run(root, tmp_path_factory):
    out = tmp_path_factory.mktemp("out_plateau")
    cfg = config(root, **PLATEAU_RETRAINING, types=["enc"], strategy_types=["enc"], l0_settings=[],
                 strategies=["random", "top", "bottom", "top_bottom"])  # top_bottom at one layer of two: top's mask
    paths = StudyPaths(study.NAME, "unit", root=out)
    return cfg, paths, run_study(study.STUDY, cfg, "unit", paths)


def test_plateau_retraining_stores_its_dev_loss_curve_and_whether_it_reached_the_plateau(plateau_run, monkeypatch):
    cfg, paths, table = plateau_run
    re = table[table["kind"].isin(["retrain", "retrain_strategy"])]
    assert len(re) == 2 + 4  # the reference, all at 50%, and four strategies on enc
    for r in re.to_dict("records"):
        curve = r["retrain_curve"]
        steps = [h["step"] for h in curve]
        assert steps == list(range(2, int(r["retrain_steps"]) + 1, 2)) and r["retrain_steps"] <= 6
        losses = [h["dev_loss"] for h in curve]
        best = int(np.argmin(losses))
        assert r["retrain_best_step"] == steps[best] and r["retrain_best_dev_loss"] == pytest.approx(losses[best])
        # the rule that stopped it: one evaluation after the best without a better one, or the cap
        assert r["reached_plateau"] == (len(losses) - 1 - best >= 1)
        assert r["retrain_stopped"] == ("patience" if r["reached_plateau"] else "max_steps")
        assert r["retrain_regime"] == "plateau" and r["retrain_patience"] == 1 and r["retrain_max_steps"] == 6
    assert not list(paths.nmt_cache.glob("*checkpoint*")), "a retraining's checkpoint is removed once its cell exists"
    conv = study.retraining_convergence(table, 3)
    assert set(conv["setting"]) == {"", "all, 50% pruned; retrained with the mask fixed", "top; retrained with the "
                                    "mask fixed", "bottom; retrained with the mask fixed",
                                    "top_bottom; retrained with the mask fixed"}
    # a mask two strategies share is retrained once: the second cell reads the first's retraining
    rs = re[re["kind"] == "retrain_strategy"].set_index("strategy")
    assert rs.loc["top_bottom", "masks"] == rs.loc["top", "masks"] and rs.loc["top_bottom", "retrain_cached"]
    assert not rs.loc["top", "retrain_cached"] and rs.loc["top_bottom", "bleu"] == rs.loc["top", "bleu"]
    assert rs.loc["top_bottom", "retrain_curve"] == rs.loc["top", "retrain_curve"]
    assert len(list(study.Context(cfg, torch.device("cpu"), paths).folder(0).glob("retrains/*.json"))) == 2 + 3
    assert (conv["evaluations"] > 0).all()
    curves = study.retraining_curves(table)
    assert len(curves) == sum(len(c) for c in re["retrain_curve"]) and curves.groupby(
        ["kind", "type", "strategy", "seed"])["best"].sum().eq(1).all()


def test_a_plateau_retraining_evaluates_on_the_dev_pairs_never_the_test_set(plateau_run, monkeypatch):
    """The dev loss that stops a retraining is measured on the dev pairs that chose the full model's weights."""
    cfg, paths, _ = plateau_run
    ctx = study.Context(cfg, torch.device("cpu"), paths)
    seen = []
    real = study.train_translation

    def spy(model, train, dev, tcfg, **kw):
        seen.append((dev, tcfg))
        return real(model, train, dev, tcfg, **kw)

    monkeypatch.setattr(study, "train_translation", spy)
    cell = {"kind": "retrain", "type": "all", "fraction": 0.5, "seed": 0, "model_seed": 0}
    study.retrain(ctx, cell, study.cell_masks(cfg, cell))  # the cell's retraining itself (run_cell reads the cache)
    (dev, tcfg), = seen
    _, dev_enc, test_enc = ctx.encoded(0)
    assert dev is dev_enc and dev.src_ids != test_enc.src_ids
    assert (tcfg.patience, tcfg.eval_every, tcfg.max_steps) == (1, 2, 6)


def test_min_delta_is_checked_and_reaches_both_trainings(root):
    """min_delta (full models) and retrain_min_delta (retrainings): finite, >= 0, only with the patience they refine;
    passed to the trainers; in the fingerprint only when set, so cells made before they existed keep theirs."""
    for kw, field in (({"min_delta": -0.01}, "min_delta"), ({"min_delta": float("nan")}, "min_delta"),
                      ({"min_delta": 0.01, "patience": None}, "min_delta"),
                      ({"retrain_min_delta": 0.01}, "retrain_min_delta"),  # the fixed regime: no patience to refine
                      ({**PLATEAU_RETRAINING, "retrain_min_delta": -1.0}, "retrain_min_delta")):
        with pytest.raises(ParameterError, match=field):
            config(root, **kw)
    cfg = config(root, patience=2, min_delta=0.02, **{**PLATEAU_RETRAINING, "retrain_min_delta": 0.03})
    assert cfg.train_config().min_delta == 0.02 and cfg.retrain_config().min_delta == 0.03
    cpu = torch.device("cpu")
    plateau = study.study_fingerprint(config(root, **PLATEAU_RETRAINING), cpu)
    assert study.study_fingerprint(config(root, **{**PLATEAU_RETRAINING, "retrain_min_delta": 0.0}), cpu) == plateau
    assert study.study_fingerprint(config(root, **{**PLATEAU_RETRAINING, "retrain_min_delta": 0.01}), cpu) != plateau
    assert study.study_fingerprint(config(root, patience=2, min_delta=0.01, **PLATEAU_RETRAINING), cpu) != \
        study.study_fingerprint(config(root, patience=2, **PLATEAU_RETRAINING), cpu)
    # the trained model's cache key: unchanged without min_delta, another with it
    keep = study.model_key(config(root, patience=2), 0, cpu)
    assert study.model_key(config(root, patience=2, min_delta=0.0), 0, cpu) == keep
    assert study.model_key(config(root, patience=2, min_delta=0.01), 0, cpu) != keep


def test_a_retraining_checkpoint_is_named_by_its_masks_and_goes_only_once_its_result_is_stored(plateau_run,
                                                                                                monkeypatch):
    """Two masks never share a resumable state (the name holds the masks: the state's identity holds only the weight
    shapes, the same for two masks with as many heads per layer); the state of a retraining stays until its result is
    in the cache (a process stopped between the two resumes instead of losing it), and a stale one goes when the
    result is read from the cache."""
    cfg, paths, _ = plateau_run
    ctx = study.Context(cfg, torch.device("cpu"), paths)
    a = {"kind": "retrain", "type": "all", "fraction": 0.5, "seed": 0, "model_seed": 0}
    b = {**a, "seed": 1}
    ma, mb = study.cell_masks(cfg, a), study.cell_masks(cfg, b)
    assert any(not torch.equal(ma[k], mb[k]) for k in ma)
    ck = study.retrain_checkpoint(ctx, a, ma)
    assert ck != study.retrain_checkpoint(ctx, b, mb) and ck.parent == ctx.folder(0).parent
    stored = ctx.folder(0) / "retrains" / f"{study.retrain_key(cfg, 0, ma)}.json"
    stored.unlink(missing_ok=True)
    real, at_store = study.atomic_write_json, []

    def write(path, obj):  # what is on disk when the result is written
        at_store.append(ck.exists())
        return real(path, obj)

    monkeypatch.setattr(study, "atomic_write_json", write)
    monkeypatch.setattr(study, "retrain", lambda ctx_, cell, ms: (ck.write_bytes(b"state"), {"bleu": 1.0})[1])
    study.run_retrain_cell(ctx, a)
    assert at_store == [True] and not ck.exists()  # there while storing, gone after
    ck.write_bytes(b"stale")
    assert study.run_retrain_cell(ctx, a)["retrain_cached"] and not ck.exists()


def test_the_l0_cap_is_an_axis_of_the_l0_cells_alone(root):
    """``l0_max_steps`` (the gates train until they settle, at most that many steps) changes the keys of the L0 cells
    and nothing else: every other cell keeps its key and the study's fingerprint is the same, so setting it on a
    profile whose models and retrainings are stored recomputes only the gates. Below ``l0_steps`` it is refused."""
    import torch

    plain, capped = config(root), config(root, l0_max_steps=90)
    assert study.study_fingerprint(plain, torch.device("cpu")) == study.study_fingerprint(capped, torch.device("cpu"))
    keys = {c.key for c in study.plan_cells(plain)}
    l0 = [c for c in study.plan_cells(capped) if c["kind"] == "l0"]
    assert l0 and all(c["l0_max_steps"] == 90 and c.key not in keys for c in l0)
    assert {c.key for c in study.plan_cells(capped) if c["kind"] != "l0"} <= keys
    with pytest.raises(ParameterError, match="l0_max_steps"):
        config(root, l0_max_steps=plain.l0_steps - 1)


def test_l0_gates_train_until_they_settle_with_the_cap(root, tmp_path, monkeypatch):
    """With ``l0_max_steps`` an L0 cell trains its gates at least ``l0_steps`` steps, stops at the first check where
    they settled (``preconditions.gates_settled``) or at the cap, and records how many steps it trained."""
    from headprune_utils.analysis.preconditions import gates_settled

    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path))
    cfg = config(root, l0_max_steps=25, l0_settings=["enc"], lambdas=[0.0, 2.0], types=["enc"], strategy_types=["enc"],
                 strategies=["random"], retrain_types=[], retrain_fractions=[])
    table = run_study(study.STUDY, cfg, "unit", StudyPaths(study.NAME, "unit", root=tmp_path))
    l0 = table[table["kind"] == "l0"]
    assert len(l0) == 2 and (l0["l0_max_steps"] == 25).all()
    for r in l0.itertuples():
        n = int(r.l0_steps_trained)
        assert 3 <= n <= 25 and r.history[-1]["step"] == n - 1
        assert n == 25 or gates_settled(r.history)[0] is True


def test_a_contrast_pair_reads_its_model_seed_back_and_refuses_a_mask_seed_it_cannot_hold():
    from headprune_utils.studies import nmt_heads_analysis as a

    assert a._pair(3, 999) == 3999 and a._model_seed(pd.DataFrame({"seed": [3999, 12]})).tolist() == [3, 0]
    with pytest.raises(ValueError, match="mask seed must be in"):
        a._pair(0, 1000)
