"""Study 4's claims (claims model) on hand-made matrices: each claim's verdict in both directions where the cells
allow, the gates' both branches (one task / one model / MLM not trained / one MLM seed / the negative control shows
the pattern or not), the claims about the one pre-trained model described and never tested (n = 1), the claims as
data (rule, gate objects, a figure the notebook writes), no NaN in the text."""
from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pandas as pd
import pytest

from headprune_utils.analysis import claims, margins
from headprune_utils.measure import clustering
from headprune_utils.studies.config import validate
from headprune_utils.store.paths import notebooks_dir
from headprune_utils.studies import redundancy_patterns as study

N = 12  # the tiny model: 3 layers x 4 heads
METRICS = ["js", "hellinger", "dcor"]
VOCAB = 30522


@pytest.fixture(scope="module")
def cfg(tiny_model_dir, tiny_glue_root):
    return validate(study.RedundancyPatternsConfig, dict(
        model=str(tiny_model_dir), tasks=["SST-2"], seeds=[0, 1, 2], probe_tasks=["SST-2"], metrics=METRICS,
        cluster_metric="js", k_max=4, n_null=39, n_permutations=99, dropouts=[0.0, 0.1, 0.3], mlm_seeds=[0, 1, 2],
        train_size=None, dev_size=None, epochs=1, device="cpu", data_dir=str(tiny_glue_root), allow_hub=False,
        progress=False))


def sym(rng, base=None, noise=0.0):
    x = rng.random((N, N)) if base is None else base + noise * rng.standard_normal((N, N))
    x = np.clip(np.abs((x + x.T) / 2), 0, 1)
    np.fill_diagonal(x, 0)
    return x


def blocks(rng, noise=0.02):
    """Three clear groups of 4 heads: small distances within, large between."""
    lab = np.repeat([0, 1, 2], 4)
    return sym(rng, base=np.where(lab[:, None] == lab[None, :], 0.1, 0.8), noise=noise)


def table_of(cells: dict, extra: dict | None = None) -> pd.DataFrame:
    rows = []
    for (model, probe), m in cells.items():
        rows.append({"model": model, "probe": probe, "seconds": 0.0,
                     "matrices": {**{k: {"a": clustering.upper(a).tolist(), "b": clustering.upper(b).tolist()}
                                     for k, (a, b) in m.items()}, "n_a": 4, "n_b": 4},
                     **(extra or {}).get(model, {})})
    return pd.DataFrame(rows)


def own(rng):
    """Two halves of one pattern unrelated to anything else (a consistent matrix: split-half ceiling near 1)."""
    x = sym(rng)
    return x, sym(rng, base=x, noise=0.01)


# the held-out curve of a fine-tuning that reached the plateau (best epoch 2, two more without beating it) and of one
# stopped at its cap still improving (best epoch 4 of 4)
CONVERGED_CURVE = [{"epoch": e, "val_score": v, "selected": e == 2} for e, v in ((1, 0.8), (2, 0.86), (3, 0.85), (4, 0.85))]
IMPROVING_CURVE = [{"epoch": e, "val_score": v, "selected": e == 4} for e, v in ((1, 0.8), (2, 0.82), (3, 0.84), (4, 0.86))]


def world(related: bool = True, tasks=("A", "B"), loss_last: float = 2.0, slope: float = -0.2, seed: int = 0,
          control: str | None = None, curves: dict | None = None):
    """Pre-trained model on generic / random / task probes, fine-tuned models (task x seed 0-2), MLM runs: every
    matrix a noisy copy of one block matrix when ``related``, else independent noise for the fine-tuned models.
    ``control``: the negative control's cells on the pre-trained model's probes, None (absent), "same" (copies of the
    block matrix: it shows every pattern) or "noise" (independent noise per probe and half: no pattern). ``curves``:
    fine-tuned model name -> its held-out curve (None: not recorded), the others' :data:`CONVERGED_CURVE`."""
    rng = np.random.default_rng(seed)
    base = blocks(rng)
    copy = lambda: sym(rng, base=base, noise=0.01)
    probes = ["generic", "random-0", *(f"task-{t}" for t in tasks)]
    cells = {("pretrained", p): {m: (copy(), copy()) for m in METRICS} for p in probes}
    if control is not None:  # drawn from a stream of its own: the other models' matrices do not depend on it
        crng = np.random.default_rng(seed + 1000)
        make = (lambda: sym(crng, base=base, noise=0.01)) if control == "same" else (lambda: sym(crng))
        cells.update({(study.CONTROL, p): {m: (make(), make()) for m in METRICS} for p in probes})
    extra = {}
    for t in tasks:
        for s in (0, 1, 2):
            cells[(f"finetuned-{t}-s{s}", f"task-{t}")] = {
                m: ((copy(), copy()) if related else own(rng)) for m in METRICS}
            curve = (curves or {}).get(f"finetuned-{t}-s{s}", CONVERGED_CURVE)
            extra[f"finetuned-{t}-s{s}"] = {} if curve is None else {"full_model_history": curve}
    for p in (0.0, 0.1, 0.3):
        for s in (0, 1, 2):
            name = f"mlm-p{p:g}-s{s}"
            shifted = np.clip(base * (1 + slope * p) + 0.002 * rng.standard_normal(), 0, 1)
            np.fill_diagonal(shifted, 0)
            cells[(name, "generic")] = {m: (shifted, shifted) for m in METRICS}
            extra[name] = {"head_loss_first": 9.8, "head_loss_last": 8.0, "loss_first": loss_last + 1, "loss_last": loss_last}
    return study.Matrices(table_of(cells, extra), (3, 4))


def run(mats, cfg, tasks=("A", "B")):
    when_t = study.when(mats, cfg, list(tasks))
    why_runs, _ = study.why(mats, cfg)
    return study.verdicts(mats, cfg, when_t, why_runs, list(tasks), vocab_size=VOCAB)


def one(v, cid, task=None, setting=None):
    r = v[v["claim_id"] == cid]
    if task is not None:
        r = r[r["task"] == task]
    if setting is not None:
        r = r[r["setting"] == setting]
    assert len(r) == 1, r
    return r.iloc[0]


@pytest.fixture(scope="module")
def alike(cfg):
    return run(world(related=True, control="noise"), cfg)  # a negative control that shows no pattern: it passes


@pytest.fixture(scope="module")
def unrelated(cfg):
    return run(world(related=False, loss_last=7.5, control="noise"), cfg)


def test_layout_and_no_nan(alike, unrelated):
    for v in (alike, unrelated):
        assert tuple(v.columns) == claims.COLUMNS
        claims.validate(v)
        assert set(v["claim_id"]) == {c.id for c in study.STUDY.claims}
        assert "nan" not in claims.render(v).lower()
    papers = {c.id: c.paper for c in study.STUDY.claims}
    assert papers["ours.what_token"] == "ours (exploratory)" and papers["bian.when"].startswith("Bian")


def against(row) -> bool:
    """The row's test nearest to deciding is its ``contradicted`` one (a per-task row of 3 units may not reach alpha
    after Holm over the study's whole family, but it points against the claim, never for it)."""
    return row["verdict"] in ("contradicted", "inconclusive") and str(row["p_test"]).startswith("contradicted")


SURVIVE, CLUSTERS = "ours.patterns_survive_finetuning", "ours.clusters_after_finetuning"
AGREE = "ours.tasks_agree_after_finetuning"


def test_patterns_survive_finetuning_both_directions(alike, unrelated, cfg):
    """Each fine-tuned copy compared with the pre-trained model is a unit (the copies are independent fine-tunings)."""
    assert one(alike, SURVIVE, "all (A, B)", "js")["verdict"] == "supported"
    # the margin: margins.HEADROOM, 0.1 x (ceiling - chance), the ceiling the mean attenuation ceiling of the task's
    # models: sqrt(split-half r of the pre-trained matrix x split-half r of the fine-tuned one), by hand
    mats = world(related=True, control="noise")
    when_t = study.when(mats, cfg, ["A", "B"])
    up = lambda x: clustering.upper(x)
    cor = lambda x, y: np.corrcoef(up(x), up(y))[0, 1]
    g = lambda m, h: mats.get(m, "task-A", "js", h)
    sh = lambda m: cor(g(m, "a"), g(m, "b"))
    models = [f"finetuned-A-s{s}" for s in (0, 1, 2)]
    ceiling = np.mean([np.sqrt(sh("pretrained") * sh(m)) for m in models])
    disjoint = [(cor(g("pretrained", "a"), g(m, "b")) + cor(g("pretrained", "b"), g(m, "a"))) / 2 for m in models]
    a = when_t[(when_t["task"] == "A") & (when_t["metric"] == "js")]
    assert a["ceiling"].mean() == pytest.approx(ceiling) and a["r_disjoint"].tolist() == pytest.approx(disjoint)
    r = one(alike, SURVIVE, "A", "js")
    assert r["margin"] == pytest.approx(margins.SHARE * (ceiling - 0.0)) and margins.SHARE == 0.1
    assert r["effect"] == pytest.approx(np.mean(disjoint) - ceiling)
    assert "0.1 x the attenuation ceiling" in r["test"] and r["n_units"] == 3 and r["unit"] == claims.DEFAULT_UNIT
    assert one(unrelated, SURVIVE, "all (A, B)", "js")["verdict"] == "contradicted"
    assert against(one(unrelated, SURVIVE, "A", "js"))


N1 = "a one-sample t-test needs at least 2 units; got 1; n = 1 pre-trained model: described, not tested: "


def test_when_is_about_the_one_pretrained_model(alike, unrelated, cfg):
    """bian.when (phase independence of THE pre-trained model): n = 1, one row per distance, never tested, whether
    the copies agree with it or not; described by the mean (and range) over the copies, outside the Holm family."""
    when_t = study.when(world(related=True, control="noise"), cfg, ["A", "B"])
    for v in (alike, unrelated):
        rows = v[v["claim_id"] == "bian.when"]
        assert list(rows["setting"]) == METRICS and (rows["task"] == study.PRETRAINED_TASK).all()
        assert (rows["verdict"] == "not testable").all() and (rows["tests"] == "[]").all()
        assert (rows["n_units"] == 1).all() and (rows["unit"] == "pre-trained model").all()
        assert rows["reason"].str.startswith(N1).all()
        assert rows["reason"].str.contains("over its 6 fine-tuned copies").all()
        assert rows["reason"].str.contains("ours.patterns_survive_finetuning").all()
        assert not claims.family_tests(v)["row"].isin(rows.index).any()
    js = when_t[when_t["metric"] == "js"]
    r = one(alike, "bian.when", setting="js")
    assert r["effect"] == pytest.approx((js["r_disjoint"] - js["ceiling"]).mean())
    assert r["margin"] == pytest.approx(margins.SHARE * js["ceiling"].mean())
    assert f"mean {r['effect']:+.3g}" in r["reason"]


def test_tasks_agree_pairs_models_of_two_tasks(alike, unrelated, cfg):
    r = one(alike, AGREE, "A vs B", "js")
    assert r["verdict"] == "supported" and r["unit"].startswith("seed") and "negative control" in r["reason"]
    assert one(unrelated, AGREE, "A vs B", "js")["verdict"] == "contradicted"
    single = run(world(tasks=("A",)), cfg, tasks=("A",))
    row = one(single, AGREE)
    assert row["verdict"] == "not testable" and "fine-tuned models of 1 task(s)" in row["reason"]
    row = one(single, "bian.who_tasks")
    assert row["verdict"] == "not testable" and "the pre-trained model ran on the inputs of 1 task(s)" in row["reason"]


def test_who_tasks_is_about_the_one_pretrained_model(alike, unrelated, cfg):
    """bian.who_tasks (task-agnostic patterns of THE pre-trained model): n = 1, one row per pair of tasks and distance,
    never tested whether its fine-tuned copies agree or not; the effect is the pre-trained model's r between its
    matrices on the two tasks' inputs (every pair of halves: two probes, disjoint sentences) minus the attenuation
    ceiling, described with the copies' seed pairs."""
    mats = world(related=True, control="noise")
    up = lambda x: clustering.upper(x)
    g = lambda p, h="full": mats.get("pretrained", p, "js", h)
    cor = lambda x, y: np.corrcoef(up(x), up(y))[0, 1]
    sh = lambda p: cor(g(p, "a"), g(p, "b"))
    want = (np.mean([cor(g("task-A", ha), g("task-B", hb)) for ha in "ab" for hb in "ab"])
            - np.sqrt(sh("task-A") * sh("task-B")))
    for v in (alike, unrelated):
        r = one(v, "bian.who_tasks", "A vs B", "js")
        assert r["verdict"] == "not testable" and r["tests"] == "[]" and r["n_units"] == 1
        assert r["unit"] == "pre-trained model" and r["reason"].startswith(N1)
        assert f"r(pre-trained model on one task's inputs, on the other's) - attenuation ceiling {r['effect']:+.3g}; its " \
            "fine-tuned copies (a model of each task, same seed; 3 seeds): mean" in r["reason"]
        assert AGREE in r["reason"] and not claims.family_tests(v)["row"].isin([r.name]).any()
    assert one(alike, "bian.who_tasks", "A vs B", "js")["effect"] == pytest.approx(want)


def test_what_on_the_fine_tuned_models(alike, unrelated):
    assert one(alike, "ours.what_token", "all (A, B)")["verdict"] == "supported"
    assert one(alike, "ours.what_token", "A")["n_units"] == 3
    # independent noise per metric: the distances do not agree
    assert one(unrelated, "ours.what_token_sentence", "all (A, B)")["verdict"] == "contradicted"
    assert against(one(unrelated, "ours.what_token_sentence", "A"))
    # one sentence-based distance only: the pair claim is not testable (no pair)
    row = one(alike, "ours.what_sentence")
    assert row["verdict"] == "not testable" and "no pair" in row["reason"]


def test_clusters_after_finetuning_against_the_shuffled_null(alike, unrelated):
    assert one(alike, CLUSTERS, "all (A, B)")["verdict"] == "supported"
    assert one(unrelated, CLUSTERS, "A")["verdict"] != "supported"
    # no structure beyond the null: below the declared margin (margins.CORRELATION, 0.1) -> not supported
    none = one(unrelated, CLUSTERS, "all (A, B)")
    assert none["verdict"] == "not supported" and none["margin"] == pytest.approx(0.1)


def test_where_is_about_the_one_pretrained_model(alike, cfg):
    """bian.where (the pre-trained model's heads form clusters): one row, n = 1, never tested even where its copies
    support ours.clusters_after_finetuning; the effect is the pre-trained model's silhouette minus the shuffled
    null's mean on generic text, described with its groups and permutation p."""
    r = one(alike, "bian.where")
    assert r["task"] == study.PRETRAINED_TASK and r["setting"] == "js" and r["n_units"] == 1
    assert r["verdict"] == "not testable" and r["tests"] == "[]" and r["reason"].startswith(N1)
    _, info, _ = study.where(world(related=True), cfg)
    info = info.iloc[0]
    assert r["effect"] == pytest.approx(info["silhouette"] - info["silhouette_null_mean"])
    assert f"{info['n_groups']} groups of >= {cfg.min_cluster_size} heads" in r["reason"]
    assert f"permutation p = {info['silhouette_null_p']:.3g}" in r["reason"]
    assert "the negative control (randomly initialised model) on the same text" in r["reason"]
    assert one(alike, CLUSTERS, "all (A, B)")["verdict"] == "supported"
    assert not claims.family_tests(alike)["row"].isin([r.name]).any()


def test_who_random_is_one_model(alike):
    r = one(alike, "bian.who_random", setting="js")
    assert r["verdict"] == "not testable" and r["n_units"] == 1 and "pre-trained model only" in r["reason"]
    assert "negative control passed" in r["reason"]


def test_a_control_never_measured_clears_nothing(cfg):
    """Without the negative control's cells the claims that need it are not testable (the precondition was never
    checked), naming it; the claims about the one pre-trained model keep the caveat; claims without the gate are
    unchanged."""
    v = run(world(related=True), cfg)
    for cid, task in ((CLUSTERS, "A"), (CLUSTERS, "B"), (AGREE, "A vs B")):
        r = one(v, cid, task, "js")
        assert r["verdict"] == "not testable" and r["tests"] == "[]", (cid, r["reason"])
        assert "the negative control (randomly initialised model, same architecture and probes) was not measured on " \
            f"{task} (js)" in r["reason"] and "caveat" not in r["reason"]  # said once
    assert one(v, CLUSTERS, "all (A, B)")["verdict"] == "not testable"
    assert "was not measured on random tokens vs task inputs (js)" in one(v, "bian.who_random", setting="js")["reason"]
    assert study.NO_RANDOM_INIT in one(v, "bian.where")["reason"]
    assert one(v, SURVIVE, "all (A, B)", "js")["verdict"] == "supported"


def test_a_control_with_the_same_patterns_makes_them_not_testable(cfg):
    """The randomly initialised model shows the clusters and the sameness (across tasks' inputs, random tokens vs
    text): those rows are "not testable", the reason naming the control and both models' numbers."""
    v = run(world(control="same"), cfg)
    for cid, task in ((CLUSTERS, "A"), (CLUSTERS, "B"), (AGREE, "A vs B"), ("bian.who_tasks", "A vs B"),
                      ("bian.who_random", "random tokens vs task inputs")):
        r = one(v, cid, task, "js")
        assert r["verdict"] == "not testable", (cid, r["reason"])
        assert "negative control" in r["reason"] and "shows the same pattern" in r["reason"]
        assert "not evidence of learned redundancy" in r["reason"] and "the pre-trained model:" in r["reason"]
    pooled = one(v, CLUSTERS, "all (A, B)")
    assert pooled["verdict"] == "not testable" and "negative control" in pooled["reason"]
    assert one(v, SURVIVE, "all (A, B)", "js")["verdict"] == "supported"  # a claim without the control: unchanged
    # the pre-trained model's clusters (n = 1) are described with the control's on the same text
    where = one(v, "bian.where")["reason"]
    assert "the negative control (randomly initialised model) on the same text" in where
    assert "it shows cluster structure too" in where and study.NO_RANDOM_INIT not in where
    assert "nan" not in claims.render(v).lower()


def test_a_control_without_the_patterns_lets_the_claims_be_tested(cfg, alike):
    """Noise in the control: no cluster structure, no consistent matrix (split-half ceiling near 0). The verdicts are
    those without the control, and the reason says the control passed (with its numbers)."""
    v = run(world(control="noise"), cfg)
    for cid, task in ((CLUSTERS, "all (A, B)"), (AGREE, "A vs B")):
        r = one(v, cid, task, "js")
        assert r["verdict"] == one(alike, cid, task, "js")["verdict"] == "supported"
        assert "negative control passed" in r["reason"] and study.NO_RANDOM_INIT not in r["reason"]
    r = one(v, "bian.who_random", setting="js")  # still one model, but the control is no longer a second reason
    assert r["verdict"] == "not testable" and "negative control passed" in r["reason"]
    assert "shows the same pattern" not in r["reason"]


def test_negative_control_table_by_hand(cfg):
    """The control's numbers: r - ceiling by hand (Pearson r of the upper triangles of half-probe matrices of
    disjoint sentences, the ceiling sqrt of the two split-half r), the "same" criterion at the point estimate, and
    the cluster test only when the shuffles can reach its level."""
    mats = world(control="same")
    t = study.negative_control(mats, cfg, ["A", "B"])
    assert set(t["model"]) == {"pretrained", study.CONTROL} and t["decidable"].all()
    up = lambda x: clustering.upper(x)
    r = lambda x, y: np.corrcoef(up(x), up(y))[0, 1]
    g = lambda p, h="full": mats.get(study.CONTROL, p, "js", h)
    sh = lambda p: r(g(p, "a"), g(p, "b"))
    cross = lambda p, q: np.mean([r(g(p, hp), g(q, hq)) for hp in "ab" for hq in "ab"])
    want = np.mean([cross("random-0", f"task-{k}") - np.sqrt(sh("random-0") * sh(f"task-{k}")) for k in "AB"])
    row = t[(t["claim_id"] == "bian.who_random") & (t["model"] == study.CONTROL) & (t["setting"] == "js")].iloc[0]
    assert row["effect"] == pytest.approx(want) and bool(row["shows_pattern"])
    pair = t[(t["claim_id"] == "bian.who_tasks") & (t["model"] == study.CONTROL) & (t["setting"] == "js")].iloc[0]
    ceil = np.sqrt(sh("task-A") * sh("task-B"))
    assert pair["effect"] == pytest.approx(cross("task-A", "task-B") - ceil) and pair["reference"] == pytest.approx(ceil)
    noise = study.negative_control(world(control="noise"), cfg, ["A", "B"])
    assert not noise.loc[noise["model"] == study.CONTROL, "shows_pattern"].any()
    assert study.negative_control(world(), cfg, ["A", "B"]).empty  # no control cells
    few = dataclasses.replace(cfg, n_null=19)  # smallest p = 0.05: the cluster test cannot reach p < 0.05
    t19 = study.negative_control(mats, few, ["A"])
    where19 = t19[t19["claim_id"] == "bian.where"]
    assert not where19["decidable"].any() and where19["criterion"].str.contains("cannot").all()
    gate = study.ControlGate("bian.where", "no cluster structure in the control")
    m = claims.Measurement("A", [0.1], [("A", 0)], "js")
    assert "cannot be judged" in gate.check(m, {"control": study.control_failures(t19)})
    measured = study.control_measured(noise)
    assert ("bian.where", "A", "js") in measured
    # the control measured there and showing nothing: passes; not measured there (or nowhere): fails, naming it
    assert gate.check(m, {"control": study.control_failures(noise), "control_measured": measured}) is None
    assert "was not measured on A (js)" in gate.check(m, {"control": {}, "control_measured": frozenset()})
    assert "was not measured on A (js)" in gate.check(m, {"control": {}})


def test_why_gate_mlm_trained_both_branches(alike, unrelated, cfg):
    trained = one(alike, "bian.why", setting="js")
    assert trained["verdict"] == "supported" and trained["effect"] < 0  # more dropout, lower distance
    assert trained["p_test"] == "supported: effect < 0 (one-sided t)"
    untrained = one(unrelated, "bian.why", setting="js")
    assert untrained["verdict"] == "not testable" and "MLM head is not trained" in untrained["reason"]
    # the paper names no direction: a slope shown the other way supports "dropout changes redundancy" too
    up = one(run(world(slope=+0.2), cfg), "bian.why", setting="js")
    assert up["verdict"] == "supported" and up["effect"] > 0 and up["p_test"] == "supported: effect > 0 (one-sided t)"
    flat = one(run(world(slope=0.0), cfg), "bian.why", setting="js")
    assert flat["verdict"] == "inconclusive", flat["reason"]  # no margin: no slope can be shown to be nothing


def test_why_one_mlm_seed_is_not_testable(tiny_model_dir, tiny_glue_root):
    cfg1 = validate(study.RedundancyPatternsConfig, dict(
        model=str(tiny_model_dir), tasks=["SST-2"], seeds=[0, 1, 2], probe_tasks=["SST-2"], metrics=METRICS,
        cluster_metric="js", k_max=4, n_null=19, n_permutations=99, dropouts=[0.0, 0.1, 0.3], mlm_seeds=[0],
        train_size=None, dev_size=None, epochs=1, device="cpu", data_dir=str(tiny_glue_root), allow_hub=False,
        progress=False))
    v = run(world(), cfg1)
    r = one(v, "bian.why", setting="js")
    assert r["verdict"] == "not testable" and "at least 2 units" in r["reason"]


def test_holm_over_the_family_includes_the_dropout_slopes(alike):
    claims.validate(alike)  # every decided row's p_adjusted is its deciding test's Holm-adjusted p, below alpha
    tested = alike[alike["tests"] != "[]"]
    assert (tested["claim_id"] == "bian.why").sum() == len(METRICS)
    ft = claims.family_tests(alike)
    assert ft["family"].nunique() == 1  # no semantics in this study: one family, every test of every tested row
    assert np.allclose(ft["p_adjusted"], claims.stats.holm(ft["p"].to_numpy()))
    assert len(ft) == sum(len(claims.row_tests(r)) for _, r in tested.iterrows())
    why = ft[ft["row"].isin(tested.index[tested["claim_id"] == "bian.why"])]
    # the slopes: both directions tested, each a "supported" test (two-sided: no direction named), and no "not
    # supported" test (no margin declared for a slope)
    assert len(why) == 2 * len(METRICS) and set(why["word"]) == {"supported"}
    assert sorted(why.loc[why["row"] == why["row"].iloc[0], "h1"]) == ["effect < 0", "effect > 0"]
    assert (alike.loc[alike["claim_id"] == "bian.why", "margin"] == 0).all()


def written_figures(notebook: str) -> set[str]:
    """The figure names a notebook writes (``out.figure("<name>", ...)``)."""
    source = "".join("".join(c["source"]) for c in json.loads((notebooks_dir() / notebook).read_text())["cells"])
    return set(re.findall(r'out\.figure\(\s*"([^"]+)"', source))


def test_claims_are_declared_as_data():
    """One home: each claim a claims.Claim with its rule, gate objects, a figure the notebook writes, a measure the
    analysis knows and a note saying what n is; the study's claims are the claims module's."""
    assert study.STUDY.claims is study.CLAIMS
    figures = written_figures(study.STUDY.notebook)
    for c in study.CLAIMS:
        assert isinstance(c, claims.Claim) and isinstance(c.rule, claims.RULES), c.id
        assert all(isinstance(g, claims.Gate) for g in c.gates), c.id
        assert c.figure in figures, (c.id, c.figure, sorted(figures))
        assert c.measure in study.MEASUREMENTS, c.id
        assert "n = " in c.note and c.metric and c.regime and c.semantics == "", c.id  # no head masked
    by_id = {c.id: c for c in study.CLAIMS}
    for cid in ("bian.where", "bian.when"):  # about the one pre-trained model: the n = 1 gate
        assert study.ONE_MODEL in by_id[cid].gates and "n = 1 pre-trained model" in by_id[cid].note
    for cid in (CLUSTERS, SURVIVE):  # the fine-tuned copies as units: a different claim, ours
        assert by_id[cid].paper == "ours (exploratory)" and study.ONE_MODEL not in by_id[cid].gates
    assert [g.pattern for g in by_id[CLUSTERS].gates if hasattr(g, "pattern")] == ["bian.where"]
    for c in study.CLAIMS:  # every claim about fine-tuned models is gated by their convergence, the others not
        tuned = c.regime.startswith("fine-tuned")
        assert (study.CONVERGED in c.gates or study.PAIR_CONVERGED in c.gates) == tuned, c.id
    assert [c.id for c in study.CLAIMS].index(CLUSTERS) == [c.id for c in study.CLAIMS].index("bian.where") + 1


def test_claims_about_fine_tuned_models_need_them_trained_to_the_plateau(cfg):
    """The convergence gate of studies 1-6 on the curve each fine-tuned model's cells record: a model stopped at its
    cap still improving makes its task's rows (and the pairs of tasks with it) not testable, naming it; cells without
    the curve cannot be judged and say why; the claims about the one pre-trained model are untouched."""
    def rows(v, cid, task):
        return v[(v["claim_id"] == cid) & (v["task"] == task)]

    ok = run(world(control="noise"), cfg)
    v = run(world(curves={"finetuned-A-s1": IMPROVING_CURVE}, control="noise"), cfg)
    for cid in (SURVIVE, CLUSTERS, "ours.what_token"):
        assert (rows(ok, cid, "A")["verdict"] != "not testable").all(), cid
        r = rows(v, cid, "A")
        assert len(r) and (r["verdict"] == "not testable").all(), cid
        assert r["reason"].str.contains(r"not trained to the plateau: 1 of 3 .*A seed 1 \(best epoch 4 of 4\)").all()
        assert rows(v, cid, "B")["verdict"].tolist() == rows(ok, cid, "B")["verdict"].tolist(), cid
    pair = v[v["claim_id"] == AGREE]
    assert len(pair) and (pair["verdict"] == "not testable").all() and pair["reason"].str.contains("A seed 1").all()
    assert (ok[ok["claim_id"] == AGREE]["verdict"] != "not testable").any()
    unrecorded = run(world(curves={f"finetuned-{t}-s{s}": None for t in "AB" for s in range(3)}), cfg)
    r = rows(unrecorded, SURVIVE, "A")
    assert (r["verdict"] == "not testable").all() and r["reason"].str.contains("before the curve was recorded").all()
    for cid in ("bian.where", "bian.when", "bian.why"):  # not about the fine-tuned models: not gated by it (their
        # adjusted p-values move with the family: fewer tests in it)
        mine, theirs = (t[t["claim_id"] == cid].reset_index(drop=True) for t in (unrecorded, ok))
        cols = ["task", "setting", "effect", "n_units", "p"]
        assert len(mine) and mine[cols].equals(theirs[cols]), cid
        assert not mine["reason"].str.contains("plateau|held-out curve").any(), cid


def test_one_model_gate_holds_only_with_several_pretrained_models():
    one_model = claims.Measurement(study.PRETRAINED_TASK, [0.1], ["pretrained"], "js")
    why = study.ONE_MODEL.check(one_model, {"described": {"js": "the numbers"}})
    assert why == "n = 1 pre-trained model: described, not tested: the numbers"
    two = claims.Measurement(study.PRETRAINED_TASK, [0.1, 0.2], ["pre-trained a", "pre-trained b"], "js")
    assert study.ONE_MODEL.check(two, {}) is None


def test_mlm_gate_reads_the_recorded_losses():
    gate, m = study.MlmTrained(), claims.Measurement("generic text", [0.1], [0], "js")
    ln_v = np.log(VOCAB)
    ok = {"recorded": True, "last": [0.3 * ln_v, 0.4 * ln_v], "head_first": [9.0]}
    assert gate.check(m, {"mlm_losses": ok, "vocab_size": VOCAB}) is None
    bad = {**ok, "last": [0.3 * ln_v, 0.7 * ln_v]}
    assert "MLM head is not trained" in gate.check(m, {"mlm_losses": bad, "vocab_size": VOCAB})
    none = {"recorded": False, "last": [], "head_first": []}
    assert "record no masked-LM loss" in gate.check(m, {"mlm_losses": none, "vocab_size": VOCAB})
    assert gate.share == study.MLM_TRAINED


def test_nothing_to_measure_is_an_absent_measurement(cfg):
    """A run without what a claim needs (one fine-tuned task: no pair of tasks; no random-token probe; no
    fine-tuned model; no dropout ratio): its row comes from claims.evaluate of an absent measurement, ``not testable``
    with the reason, 0 units, no test, task ``n/a``, the claim's own rule in the test label."""
    mats = world(tasks=("A",))
    keep = [k for k in mats.keys() if not k[0].startswith(("finetuned-", "mlm-")) and not k[1].startswith("random-")]
    bare = study.Matrices(table_of({k: {m: (mats.get(*k, m, "a"), mats.get(*k, m, "b")) for m in METRICS}
                                    for k in keep}), (3, 4))
    v = study.verdicts(bare, dataclasses.replace(cfg, dropouts=[]), pd.DataFrame(), pd.DataFrame(), ["A"],
                       vocab_size=VOCAB)
    claims.validate(v)
    reasons = {AGREE: "fine-tuned models of 0 task(s)", "bian.who_tasks": "the pre-trained model ran on the inputs of 1", "bian.who_random": "needs a random-token probe",
               "bian.why": "fewer than two dropout ratios were run", SURVIVE: "no fine-tuned model",
               "bian.when": "no fine-tuned model", CLUSTERS: "no fine-tuned model",
               "ours.what_token": "no fine-tuned model's cells"}
    for cid, why in reasons.items():
        r = one(v, cid)
        assert r["verdict"] == "not testable" and r["reason"].startswith(why), (cid, r["reason"])
        assert r["task"] == "n/a" and r["n_units"] == 0 and r["tests"] == "[]" and r["unit_values"] == "[]"
        assert r["test"].startswith(study.CLAIMS[[c.id for c in study.CLAIMS].index(cid)].rule.kind)
    assert one(v, "bian.where")["task"] == study.PRETRAINED_TASK  # the pre-trained model is there: described
    assert "nan" not in claims.render(v).lower()
