"""Study 4's claims (claims model) on hand-made matrices: each claim's verdict in both directions where the cells
allow, the gates' both branches (one task / one model / MLM not trained / one MLM seed / the negative control shows
the pattern or not), no NaN in the text."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from headprune_utils import claims, clustering, margins
from headprune_utils.config import validate
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


def world(related: bool = True, tasks=("A", "B"), loss_last: float = 2.0, slope: float = -0.2, seed: int = 0,
          control: str | None = None):
    """Pre-trained model on generic / random / task probes, fine-tuned models (task x seed 0-2), MLM runs: every
    matrix a noisy copy of one block matrix when ``related``, else independent noise for the fine-tuned models.
    ``control``: the negative control's cells on the pre-trained model's probes, None (absent), "same" (copies of the
    block matrix: it shows every pattern) or "noise" (independent noise per probe and half: no pattern)."""
    rng = np.random.default_rng(seed)
    base = blocks(rng)
    copy = lambda: sym(rng, base=base, noise=0.01)
    probes = ["generic", "random-0", *(f"task-{t}" for t in tasks)]
    cells = {("pretrained", p): {m: (copy(), copy()) for m in METRICS} for p in probes}
    if control is not None:
        make = copy if control == "same" else (lambda: sym(rng))
        cells.update({(study.CONTROL, p): {m: (make(), make()) for m in METRICS} for p in probes})
    for t in tasks:
        for s in (0, 1, 2):
            cells[(f"finetuned-{t}-s{s}", f"task-{t}")] = {
                m: ((copy(), copy()) if related else own(rng)) for m in METRICS}
    extra = {}
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
    return run(world(related=True), cfg)


@pytest.fixture(scope="module")
def unrelated(cfg):
    return run(world(related=False, loss_last=7.5), cfg)


def test_layout_and_no_nan(alike, unrelated):
    for v in (alike, unrelated):
        assert tuple(v.columns) == claims.COLUMNS
        claims.validate(v)
        assert set(v["claim_id"]) == {c.id for c in study.STUDY.claims}
        assert "nan" not in claims.render(v).lower()
    papers = {c.id: c.paper for c in study.STUDY.claims}
    assert papers["bian.what_token"] == "ours (exploratory)" and papers["bian.when"].startswith("Bian")


def against(row) -> bool:
    """The row's test nearest to deciding is its ``contradicted`` one (a per-task row of 3 units may not reach alpha
    after Holm over the study's whole family, but it points against the claim, never for it)."""
    return row["verdict"] in ("contradicted", "inconclusive") and str(row["p_test"]).startswith("contradicted")


def test_when_both_directions(alike, unrelated, cfg):
    assert one(alike, "bian.when", "all (A, B)", "js")["verdict"] == "supported"
    # the margin: margins.HEADROOM, 0.1 x (ceiling - chance), the ceiling the mean split-half r of the task's models
    when_t = study.when(world(related=True), cfg, ["A", "B"])
    ceiling = when_t[(when_t["task"] == "A") & (when_t["metric"] == "js")]["split_half_r"].mean()
    r = one(alike, "bian.when", "A", "js")
    assert r["margin"] == pytest.approx(margins.SHARE * (ceiling - 0.0)) and margins.SHARE == 0.1
    assert "0.1 x (full - chance)" in r["test"]
    assert one(unrelated, "bian.when", "all (A, B)", "js")["verdict"] == "contradicted"
    assert against(one(unrelated, "bian.when", "A", "js"))


def test_who_tasks_pairs_models_of_two_tasks(alike, unrelated, cfg):
    r = one(alike, "bian.who_tasks", "A vs B", "js")
    assert r["verdict"] == "supported" and r["unit"].startswith("seed") and "negative control" in r["reason"]
    assert one(unrelated, "bian.who_tasks", "A vs B", "js")["verdict"] == "contradicted"
    single = run(world(tasks=("A",)), cfg, tasks=("A",))
    row = one(single, "bian.who_tasks")
    assert row["verdict"] == "not testable" and "fine-tuned models of 1 task(s)" in row["reason"]


def test_what_on_the_fine_tuned_models(alike, unrelated):
    assert one(alike, "bian.what_token", "all (A, B)")["verdict"] == "supported"
    assert one(alike, "bian.what_token", "A")["n_units"] == 3
    # independent noise per metric: the distances do not agree
    assert one(unrelated, "bian.what_token_sentence", "all (A, B)")["verdict"] == "contradicted"
    assert against(one(unrelated, "bian.what_token_sentence", "A"))
    # one sentence-based distance only: the pair claim is not testable (no pair)
    row = one(alike, "bian.what_sentence")
    assert row["verdict"] == "not testable" and "no pair" in row["reason"]


def test_where_clusters_against_the_shuffled_null(alike, unrelated):
    assert one(alike, "bian.where", "all (A, B)")["verdict"] == "supported"
    assert one(unrelated, "bian.where", "A")["verdict"] != "supported"
    # no structure beyond the null: below the declared margin (margins.CORRELATION, 0.1) -> not supported
    none = one(unrelated, "bian.where", "all (A, B)")
    assert none["verdict"] == "not supported" and none["margin"] == pytest.approx(0.1)


def test_who_random_is_one_model(alike):
    r = one(alike, "bian.who_random", setting="js")
    assert r["verdict"] == "not testable" and r["n_units"] == 1 and "pre-trained model only" in r["reason"]
    assert "negative control" in r["reason"] and study.NO_RANDOM_INIT in r["reason"]  # no control cells: the caveat


def test_a_control_with_the_same_patterns_makes_them_not_testable(cfg):
    """The randomly initialised model shows the clusters and the sameness (across tasks' inputs, random tokens vs
    text): those rows are "not testable", the reason naming the control and both models' numbers."""
    v = run(world(control="same"), cfg)
    for cid, task in (("bian.where", "A"), ("bian.where", "B"), ("bian.who_tasks", "A vs B"),
                      ("bian.who_random", "random tokens vs task inputs")):
        r = one(v, cid, task, "js")
        assert r["verdict"] == "not testable", (cid, r["reason"])
        assert "negative control" in r["reason"] and "shows the same pattern" in r["reason"]
        assert "not evidence of learned redundancy" in r["reason"] and "the pre-trained model:" in r["reason"]
    pooled = one(v, "bian.where", "all (A, B)")
    assert pooled["verdict"] == "not testable" and "negative control" in pooled["reason"]
    assert one(v, "bian.when", "all (A, B)", "js")["verdict"] == "supported"  # a claim without the control: unchanged
    assert "nan" not in claims.render(v).lower()


def test_a_control_without_the_patterns_lets_the_claims_be_tested(cfg, alike):
    """Noise in the control: no cluster structure, no consistent matrix (split-half ceiling near 0). The verdicts are
    those without the control, and the reason says the control passed (with its numbers)."""
    v = run(world(control="noise"), cfg)
    for cid, task in (("bian.where", "all (A, B)"), ("bian.who_tasks", "A vs B")):
        r = one(v, cid, task, "js")
        assert r["verdict"] == one(alike, cid, task, "js")["verdict"] == "supported"
        assert "negative control passed" in r["reason"] and study.NO_RANDOM_INIT not in r["reason"]
    r = one(v, "bian.who_random", setting="js")  # still one model, but the control is no longer a second reason
    assert r["verdict"] == "not testable" and "negative control passed" in r["reason"]
    assert "shows the same pattern" not in r["reason"]


def test_negative_control_table_by_hand(cfg):
    """The control's numbers: r - ceiling by hand (Pearson r of the upper triangles), the "same" criterion at the
    point estimate, and the cluster test only when the shuffles can reach its level."""
    mats = world(control="same")
    t = study.negative_control(mats, cfg, ["A", "B"])
    assert set(t["model"]) == {"pretrained", study.CONTROL} and t["decidable"].all()
    up = lambda x: clustering.upper(x)
    r = lambda x, y: np.corrcoef(up(x), up(y))[0, 1]
    g = lambda p, h="full": mats.get(study.CONTROL, p, "js", h)
    want = np.mean([r(g("random-0"), g(f"task-{k}")) - r(g(f"task-{k}", "a"), g(f"task-{k}", "b")) for k in "AB"])
    row = t[(t["claim_id"] == "bian.who_random") & (t["model"] == study.CONTROL) & (t["setting"] == "js")].iloc[0]
    assert row["effect"] == pytest.approx(want) and bool(row["shows_pattern"])
    pair = t[(t["claim_id"] == "bian.who_tasks") & (t["model"] == study.CONTROL) & (t["setting"] == "js")].iloc[0]
    ceil = (r(g("task-A", "a"), g("task-A", "b")) + r(g("task-B", "a"), g("task-B", "b"))) / 2
    assert pair["effect"] == pytest.approx(r(g("task-A"), g("task-B")) - ceil) and pair["reference"] == pytest.approx(ceil)
    noise = study.negative_control(world(control="noise"), cfg, ["A", "B"])
    assert not noise.loc[noise["model"] == study.CONTROL, "shows_pattern"].any()
    assert study.negative_control(world(), cfg, ["A", "B"]).empty  # no control cells
    few = dataclasses.replace(cfg, n_null=19)  # smallest p = 0.05: the cluster test cannot reach p < 0.05
    t19 = study.negative_control(mats, few, ["A"])
    where19 = t19[t19["claim_id"] == "bian.where"]
    assert not where19["decidable"].any() and where19["criterion"].str.contains("cannot").all()
    gate = study.control_gate(t19, "bian.where")
    assert "cannot be judged" in gate(claims.Measurement("A", [0.1], [("A", 0)], "js"))


def test_why_gate_mlm_trained_both_branches(alike, unrelated, cfg):
    trained = one(alike, "bian.why", setting="js")
    assert trained["verdict"] == "supported" and trained["effect"] < 0  # more dropout, lower distance
    untrained = one(unrelated, "bian.why", setting="js")
    assert untrained["verdict"] == "not testable" and "MLM head is not trained" in untrained["reason"]
    up = run(world(slope=+0.2), cfg)
    assert one(up, "bian.why", setting="js")["verdict"] == "contradicted"


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
    # the slopes: both directions tested, and no "not supported" test (no margin declared for a slope)
    assert len(why) == 2 * len(METRICS) and set(why["word"]) == {"supported", "contradicted"}
    assert (alike.loc[alike["claim_id"] == "bian.why", "margin"] == 0).all()
