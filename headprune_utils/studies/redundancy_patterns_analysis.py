"""Study 4's analysis: pure functions over the tidy table of the ``redundancy_patterns`` cells (one row per
(model, probe) cell, its matrices stored as upper triangles of the probe's two halves).

:class:`Matrices` gives back each cell's ``[N, N]`` matrices (N = n_layers * n_heads, layer-major); the Five Ws
compare them: what/how (:func:`metric_agreement`, :func:`summary_stats`), where (:func:`where`,
:func:`group_labels`), when (:func:`when`), who (:func:`who`), why (:func:`why`); :func:`negative_control` puts the
randomly initialised model (:data:`CONTROL`) beside the pre-trained one for every pattern that needs a negative
control. The verdicts (:func:`claim_verdicts`): the claims are declared as data in :mod:`.redundancy_patterns_claims`
(rule, margin, gates, figure) and passed in; each claim's ``measure`` names its measurements here
(:data:`MEASUREMENTS`), and :func:`headprune_utils.analysis.claims.evaluate` decides them with the evidence their gates read
(the negative control's failures, :func:`control_failures`; the MLM losses, :func:`mlm_losses`; the description of
a claim about the one pre-trained model, n = 1, which is described and never tested).
``cfg`` is the study's parameters (``RedundancyPatternsConfig``, defined with the protocol in
:mod:`.redundancy_patterns`); which fine-tuned tasks and probes to compare are passed in (the notebook passes the
planned ones: ``redundancy_patterns.finetuned_tasks``, ``redundancy_patterns.probe_names``).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from headprune_utils.analysis import claims, margins
from headprune_utils.measure import clustering, redundancy
from headprune_utils.model import models
from headprune_utils.store.results import unpack_floats
from headprune_utils.studies import convergence, glue_workbench

__all__ = ["Matrices", "metric_agreement", "summary_stats", "where", "group_labels", "when", "who", "why",
           "sameness", "negative_control", "CONTROL", "CONTROL_SEED", "CONTROL_ALPHA", "NO_RANDOM_INIT",
           "PRETRAINED_TASK", "PRETRAINED_UNIT", "scale_text", "mlm_losses", "control_failures", "control_measured", "VerdictInputs",
           "MEASUREMENTS", "claim_verdicts"]

CONTROL_SEED = 0  # the negative control's weights: the pre-trained model's architecture initialised from this seed
CONTROL = f"random-init-s{CONTROL_SEED}"  # its cells' model name
CONTROL_ALPHA = 0.05  # a model "has clusters" / "a reproducible matrix" when its permutation test reaches this level
PRETRAINED_UNIT = "pre-trained model"  # the unit of a claim about the pre-trained model itself (a run has one)


def _square(upper, n: int) -> np.ndarray:
    """The symmetric [n, n] matrix of a stored upper triangle (packed, or a list in cells of results version 1)."""
    out = np.zeros((n, n))
    out[np.triu_indices(n, k=1)] = unpack_floats(upper)
    return out + out.T


class Matrices:
    """The cells' matrices: ``get(model, probe, metric, half="full"|"a"|"b") -> [N, N]``."""

    def __init__(self, table: pd.DataFrame, shape: tuple[int, int]):
        self.shape = shape
        self.n = shape[0] * shape[1]
        self._cells = {(r.model, r.probe): r.matrices for r in table.itertuples()}
        self.extra = table.drop(columns=["matrices"]).set_index(["model", "probe"])

    def keys(self) -> list[tuple[str, str]]:
        return list(self._cells)

    def get(self, model: str, probe: str, metric: str, half: str = "full") -> np.ndarray:
        c = self._cells[(model, probe)]
        if half in ("a", "b"):
            return _square(c[metric][half], self.n)
        wa, wb = c["n_a"], c["n_b"]
        return (wa * _square(c[metric]["a"], self.n) + wb * _square(c[metric]["b"], self.n)) / (wa + wb)

    def by_metric(self, model: str, probe: str, metrics: list[str]) -> dict[str, np.ndarray]:
        """``{metric: [N, N]}``: the full matrices of one cell, every distance in ``metrics``."""
        return {m: self.get(model, probe, m) for m in metrics}

    def split_half(self, model: str, probe: str, metric: str) -> float:
        """Mantel r between the matrices of the probe's two halves (disjoint sentences): how reproducible a
        half-probe matrix is, the reliability that bounds every comparison of half-probe matrices (:meth:`compare`)."""
        return clustering.mantel(self.get(model, probe, metric, "a"), self.get(model, probe, metric, "b"), n_perm=0)[0]

    def compare(self, a: tuple[str, str, str], b: tuple[str, str, str]) -> tuple[float, float]:
        """``(r, ceiling)`` of two matrices ``a``, ``b`` = (model, probe, metric) compared like with like: ``r`` the
        mean Mantel r between half-probe matrices of DISJOINT sentences (the same probe: half a of one with half b of
        the other and the reverse; two probes: all four pairs of halves), ``ceiling`` = sqrt(split-half r of a x
        split-half r of b) (Spearman's attenuation bound: the r two matrices with one underlying pattern reach
        through their probe noise, at the same half-probe size; a split-half r below 0 counts as 0). Comparing the
        full matrices against a split-half r instead sets a full-probe r against a half-probe reliability, and on one
        probe shares the sentences' own noise between the two sides: both lift r above its ceiling (measured on the
        standard-next cells: 0.01-0.03 of r on average, up to 0.14 for two distances on one model)."""
        pairs = [("a", "b"), ("b", "a")] if a[1] == b[1] else [("a", "a"), ("a", "b"), ("b", "a"), ("b", "b")]
        r = float(np.mean([clustering.mantel(self.get(*a, ha), self.get(*b, hb), n_perm=0)[0] for ha, hb in pairs]))
        ceiling = float(np.sqrt(max(self.split_half(*a), 0.0) * max(self.split_half(*b), 0.0)))
        return r, ceiling


def metric_agreement(mats: Matrices, metrics: list[str], n_perm: int, model: str = "pretrained",
                     probe: str = "generic") -> pd.DataFrame:
    """Mantel (Pearson and Spearman) between the matrices of every two distances, and each one's split-half r."""
    rows = []
    for i, a in enumerate(metrics):
        for b in metrics[i:]:
            if a == b:
                r, p = mats.split_half(model, probe, a), np.nan
                rows.append({"metric_a": a, "metric_b": b, "pearson_r": r, "spearman_r": np.nan, "mantel_p": p,
                             "what": "split-half agreement of one distance"})
                continue
            A, B = mats.get(model, probe, a), mats.get(model, probe, b)
            r, p = clustering.mantel(A, B, n_perm)
            rs, _ = clustering.mantel(A, B, n_perm=0, method="spearman")
            rows.append({"metric_a": a, "metric_b": b, "pearson_r": r, "spearman_r": rs, "mantel_p": p,
                         "what": "two distances"})
    return pd.DataFrame(rows)


def summary_stats(mats: Matrices, metrics: list[str]) -> pd.DataFrame:
    """Per cell and distance: mean, median and spread of the off-diagonal distances (lower = more redundant)."""
    rows = []
    for model, probe in mats.keys():
        for m in metrics:
            u = clustering.upper(mats.get(model, probe, m))
            rows.append({"model": model, "probe": probe, "metric": m, "mean": float(u.mean()),
                         "median": float(np.median(u)), "sd": float(u.std()), "min": float(u.min()),
                         "max": float(u.max())})
    return pd.DataFrame(rows)


def where(mats: Matrices, cfg, model: str = "pretrained", probe: str = "generic"):
    """(clusters, a one-row table about them, the criterion by k).

    Average-linkage clustering of the ``cluster_metric`` matrix; k by the silhouette of the clusters of at
    least ``min_cluster_size`` heads (``clustering.core_silhouette``: smaller clusters hold "unique" heads,
    listed, counting 0). The table says how clear the structure is (that silhouette against the same
    criterion on ``n_null`` matrices of the same distances shuffled over head pairs), how the clusters align
    with layers (adjusted Rand index with the heads' layers; share of within-cluster pairs in the same layer
    against all pairs) and with spectral clustering at the same number of groups (on the grouped heads).
    """
    d = mats.get(model, probe, cfg.cluster_metric)
    k_range = (cfg.k_min, cfg.k_max)
    cl = clustering.cluster_heads(d, k_range=k_range, min_size=cfg.min_cluster_size)
    null = clustering.silhouette_null(d, k_range, n_perm=cfg.n_null, min_size=cfg.min_cluster_size)
    n_layers, n_heads = mats.shape
    core = cl.core
    heads = np.flatnonzero(core)
    layer = np.repeat(np.arange(n_layers), n_heads)[heads]
    lab = cl.labels[heads]
    dc = d[np.ix_(heads, heads)]
    iu = np.triu_indices(len(heads), k=1)
    same_layer = (layer[:, None] == layer[None, :])[iu]
    within = (lab[:, None] == lab[None, :])[iu]
    spectral = clustering.spectral_heads(dc, cl.n_groups) if cl.n_groups >= 2 else lab
    unique = [f"{h // n_heads}.{h % n_heads}" for h in np.flatnonzero(~core)]
    null_ok = np.isfinite(null)
    sil = cl.silhouette
    info = {
        "metric": cfg.cluster_metric, "min_cluster_size": cfg.min_cluster_size, "k_cut": cl.k, "n_groups": cl.n_groups,
        "group_sizes": " ".join(str(int(s)) for s in sorted(cl.sizes()[cl.sizes() >= cl.min_size], reverse=True)),
        "n_unique_heads": len(unique), "unique_heads": " ".join(unique) or "none",
        "silhouette": sil, "silhouette_null_mean": float(np.nanmean(null)) if null_ok.any() else np.nan,
        # a shuffled matrix without two groups (NaN) counts as not reaching the observed value
        "silhouette_null_p": float((1 + np.sum(null[null_ok] >= sil - 1e-12)) / (1 + len(null))) if np.isfinite(sil) else np.nan,
        "ari_with_layer": clustering.adjusted_rand(lab, layer),
        "same_layer_share_within_clusters": float(same_layer[within].mean()) if within.any() else np.nan,
        "same_layer_share_all_pairs": float(same_layer.mean()),
        "ari_hierarchical_vs_spectral": clustering.adjusted_rand(lab, spectral),
        "mean_within_cluster_distance": float(dc[iu][within].mean()) if within.any() else np.nan,
        "mean_between_cluster_distance": float(dc[iu][~within].mean()) if (~within).any() else np.nan,
    }
    crit = pd.DataFrame({"k": list(cl.silhouette_by_k), "silhouette": list(cl.silhouette_by_k.values())})
    return cl, pd.DataFrame([info]), crit


def group_labels(cl: clustering.Clusters) -> np.ndarray:
    """``[N]`` cluster id per flat head id, renumbered 1.. over the groups; 0 for unique heads."""
    out = np.zeros(len(cl.labels), dtype=int)
    core = cl.core
    ids = {c: i + 1 for i, c in enumerate(np.unique(cl.labels[core]))}
    out[core] = [ids[c] for c in cl.labels[core]]
    return out


def _k(d: np.ndarray, cfg) -> int:
    """The number of groups (clusters of >= ``min_cluster_size`` heads) chosen as in :func:`where`."""
    return clustering.cluster_heads(d, k_range=(cfg.k_min, cfg.k_max), order=False, min_size=cfg.min_cluster_size).n_groups


def when(mats: Matrices, cfg, tasks: list[str]) -> pd.DataFrame:
    """Per fine-tuned model and distance: Mantel r (p) between the pre-trained and the fine-tuned matrix on the
    same task inputs (full probe; described), the pre-trained model's split-half r, and the comparison the claims
    test (:meth:`Matrices.compare`): ``r_disjoint`` (halves of disjoint sentences) and its ``ceiling``. ``tasks``:
    those of the fine-tuned models (every planned one: ``redundancy_patterns.finetuned_tasks(cfg)``), each with
    every seed of ``cfg``."""
    rows = []
    for t in tasks:
        for s in cfg.seeds:
            ft = f"finetuned-{t}-s{s}"
            for m in cfg.metrics:
                r, p = clustering.mantel(mats.get("pretrained", f"task-{t}", m), mats.get(ft, f"task-{t}", m),
                                         cfg.n_permutations)
                rd, c = mats.compare(("pretrained", f"task-{t}", m), (ft, f"task-{t}", m))
                rows.append({"task": t, "seed": s, "metric": m, "mantel_r": r, "mantel_p": p,
                             "split_half_r": mats.split_half("pretrained", f"task-{t}", m), "r_disjoint": rd,
                             "ceiling": c})
    return pd.DataFrame(rows)


def who(mats: Matrices, cfg, names: list[str], model: str = "pretrained") -> pd.DataFrame:
    """Mantel r (p) between ``model``'s matrices on every two probes, per distance. ``names``: the probes compared
    (every planned one: ``redundancy_patterns.probe_names(cfg)``); ``model``: the pre-trained model, or the
    negative control (:data:`CONTROL`, run on the same probes)."""
    rows = []
    for m in cfg.metrics:
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                r, p = clustering.mantel(mats.get(model, a, m), mats.get(model, b, m), cfg.n_permutations)
                rows.append({"metric": m, "probe_a": a, "probe_b": b, "mantel_r": r, "mantel_p": p})
    return pd.DataFrame(rows)


def why(mats: Matrices, cfg) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, tests). Per MLM run and distance: the mean off-diagonal distance (lower = more redundant),
    the Mantel r with the pre-trained model's matrix, the clusters' k. Tests per distance: the slope of the mean
    distance on the dropout ratio, one OLS slope per MLM seed (a seed's runs share its MLM head and data order, so
    the seed is the unit, never the run), their mean with a t-interval and a two-sided one-sample t over the seeds
    (the verdict rows' units; NaN with one seed), and the mean |difference| of mean distance between runs of the
    same seed at different ratios against runs of different seeds at the same ratio. Both empty when no dropout
    ratio is run."""
    if not cfg.dropouts:
        return pd.DataFrame(), pd.DataFrame()
    runs = []
    for p in cfg.dropouts:
        for s in cfg.mlm_seeds:
            name = f"mlm-p{p:g}-s{s}"
            for m in cfg.metrics:
                d = mats.get(name, "generic", m)
                runs.append({"dropout": p, "seed": s, "metric": m, "mean_distance": float(clustering.upper(d).mean()),
                             "mantel_r_vs_pretrained": clustering.mantel(d, mats.get("pretrained", "generic", m), 0)[0],
                             "k": _k(d, cfg) if m == cfg.cluster_metric else np.nan,
                             "mlm_loss_last": float(mats.extra.loc[(name, "generic"), "loss_last"])})
    runs = pd.DataFrame(runs)
    base = {m: float(clustering.upper(mats.get("pretrained", "generic", m)).mean()) for m in cfg.metrics}
    runs["pretrained_mean_distance"] = runs["metric"].map(base)
    tests = []
    for m, g in runs.groupby("metric"):
        row = {"metric": m, "n_runs": len(g)}
        if g["dropout"].nunique() > 1:
            slopes = np.array([sps.linregress(h["dropout"], h["mean_distance"]).slope
                               for _, h in g.groupby("seed") if h["dropout"].nunique() > 1])
            mean = float(slopes.mean()) if slopes.size else np.nan
            if slopes.size > 1:
                half = float(sps.t.ppf(0.975, slopes.size - 1) * slopes.std(ddof=1) / np.sqrt(slopes.size))
                p = float(sps.ttest_1samp(slopes, 0.0).pvalue)
            else:
                half, p = np.nan, np.nan
            row.update({"n_seeds": int(slopes.size), "slope_per_unit_dropout": mean, "slope_p": p,
                        "slope_ci_low": mean - half, "slope_ci_high": mean + half})
            by = g.pivot(index="seed", columns="dropout", values="mean_distance")
            between_p = [abs(by[a] - by[b]).mean() for i, a in enumerate(by.columns) for b in by.columns[i + 1:]]
            between_s = ([abs(by.iloc[i] - by.iloc[j]).mean() for i in range(len(by)) for j in range(i + 1, len(by))]
                         if len(by) > 1 else [np.nan])
            row.update({"mean_abs_diff_between_dropouts": float(np.mean(between_p)),
                        "mean_abs_diff_between_seeds": float(np.mean(between_s)) if len(by) > 1 else np.nan})
        tests.append(row)
    return runs, pd.DataFrame(tests)


# ------------------------------------------------------------------------------------------ negative control

def sameness(mats: Matrices, model: str, metric: str, a: str, b: str) -> tuple[float, float]:
    """``(r - c, c)``: ``model``'s matrices on probes ``a`` and ``b`` compared like with like
    (:meth:`Matrices.compare`: r between halves of the two probes, c the attenuation ceiling sqrt(split-half r of
    each)). The quantity of every "the same" claim of the study."""
    r, c = mats.compare((model, a, metric), (model, b, metric))
    return float(r - c), float(c)


def _consistent(mats: Matrices, model: str, metric: str, probes: list[str], n_perm: int) -> tuple[bool, str]:
    """Whether ``model`` has a reproducible matrix on every one of ``probes``: the Mantel test of the two halves of
    each gives p < ``CONTROL_ALPHA`` (a matrix of noise has nothing to be "the same" as)."""
    ps = {p: clustering.mantel(mats.get(model, p, metric, "a"), mats.get(model, p, metric, "b"), n_perm)[1]
          for p in probes}
    worst = max(ps, key=ps.get)
    ok = ps[worst] < CONTROL_ALPHA
    return ok, (f"split-half Mantel p <= {ps[worst]:.3g} < {CONTROL_ALPHA:g} on every reference probe" if ok else
                f"no reproducible matrix on {worst} (split-half Mantel p = {ps[worst]:.3g} >= {CONTROL_ALPHA:g})")


def _same_row(values: list[tuple[float, float]], consistent: tuple[bool, str]) -> dict:
    """The "the same" criterion at the point estimate (a single model has no interval): the model has a reproducible
    matrix on the reference probes (``consistent``, :func:`_consistent`) and mean (r - c) > -``margins.SHARE`` x mean c
    (the claims' margin, ``margins.HEADROOM``: a tenth of the way from chance, r = 0, to the ceiling)."""
    effect, ceiling = float(np.mean([v[0] for v in values])), float(np.mean([v[1] for v in values]))
    margin = margins.SHARE * ceiling
    if not consistent[0]:
        return {"effect": effect, "reference": ceiling, "shows_pattern": False, "decidable": True,
                "criterion": f"{consistent[1]}: no consistent pattern to be the same (r - ceiling = {effect:+.3g})"}
    shows = effect > -margin
    return {"effect": effect, "reference": ceiling, "shows_pattern": bool(shows), "decidable": True,
            "criterion": f"r - ceiling = {effect:+.3g} {'>' if shows else '<='} -{margin:.3g} "
                         f"(= -{margins.SHARE:g} x ceiling {ceiling:.3g}; mean of {len(values)} probe pair(s)); "
                         f"{consistent[1]}"}


def _cluster_row(mats: Matrices, cfg, model: str, probe: str) -> dict:
    """Cluster structure of one model on one probe, by the permutation test of :func:`where` (silhouette of the
    groups against ``n_null`` matrices shuffled over head pairs): present when ``p < CONTROL_ALPHA``; not decidable
    when ``n_null`` shuffles cannot give such a p (smallest p = 1 / (1 + n_null))."""
    d = mats.get(model, probe, cfg.cluster_metric)
    k_range = (cfg.k_min, cfg.k_max)
    sil = clustering.cluster_heads(d, k_range=k_range, order=False, min_size=cfg.min_cluster_size).silhouette
    null = clustering.silhouette_null(d, k_range, n_perm=cfg.n_null, min_size=cfg.min_cluster_size)
    ok = np.isfinite(null)
    smallest = 1 / (1 + len(null))
    if smallest >= CONTROL_ALPHA:
        return {"effect": float("nan"), "reference": float("nan"), "shows_pattern": False, "decidable": False,
                "criterion": f"n_null = {len(null)} shuffles cannot give p < {CONTROL_ALPHA:g} (smallest p = "
                             f"{smallest:.3g}): cluster structure cannot be told"}
    if not np.isfinite(sil) or not ok.any():
        return {"effect": float("nan"), "reference": float(np.nanmean(null)) if ok.any() else float("nan"),
                "shows_pattern": False, "decidable": True,
                "criterion": f"no two groups of >= {cfg.min_cluster_size} heads (or none in the shuffled matrices): "
                             "no cluster structure"}
    p = float((1 + np.sum(null[ok] >= sil - 1e-12)) / (1 + len(null)))  # as where(): a null without groups counts below
    shows = p < CONTROL_ALPHA
    return {"effect": float(sil - np.nanmean(null)), "reference": float(np.nanmean(null)), "shows_pattern": bool(shows),
            "decidable": True,
            "criterion": f"silhouette {sil:.3g} vs shuffled null mean {np.nanmean(null):.3g}: permutation p = {p:.3g} "
                         f"{'<' if shows else '>='} {CONTROL_ALPHA:g}"}


def negative_control(mats: Matrices, cfg, tasks: list[str], control: str = CONTROL) -> pd.DataFrame:
    """The patterns the claims call evidence of redundancy, measured the same way on the pre-trained model and on
    the randomly initialised one (``control``: same architecture, same probes). One row per claim x task x setting x
    model; empty when the control's cells are absent.

    - ``bian.who_random`` (setting = distance): mean over the random-token x task probes of r(random, task) minus its
      attenuation ceiling (:func:`sameness`); the pattern is shown when the model's matrix is
      reproducible on every task probe (split-half Mantel p < ``CONTROL_ALPHA``, ``n_permutations``) and the mean
      exceeds ``-margins.SHARE`` x the mean ceiling (the claim's "the same", at the point estimate);
    - ``bian.who_tasks`` (task = "A vs B", setting = distance): r between the model's matrices on the two tasks'
      inputs minus its attenuation ceiling, the same criterion;
    - ``bian.where`` (task = each fine-tuned task, setting = ``cluster_metric``): the silhouette against the
      shuffled-distance null on the task's inputs; shown when the permutation p < ``CONTROL_ALPHA``.

    Columns: claim_id, pattern, task, setting, model, effect, reference (the ceiling, or the null's mean; NaN only
    where the criterion says there is no number), shows_pattern, decidable (False: the test cannot reach its level
    with the shuffles at hand), criterion (the rule with its numbers). ``tasks``: the fine-tuned tasks (their probes)."""
    cols = ["claim_id", "pattern", "task", "setting", "model", "effect", "reference", "shows_pattern", "decidable",
            "criterion"]
    have = {p for m, p in mats.keys() if m == control}
    if not have:
        return pd.DataFrame(columns=cols)
    pre = {p for m, p in mats.keys() if m == "pretrained"}
    both = have & pre
    rand = sorted(p for p in both if p.startswith("random-"))
    task_probes = sorted(p for p in both if p.startswith("task-"))
    fine = [t for t in tasks if f"task-{t}" in both]
    rows = []
    for model in ("pretrained", control):
        for metric in cfg.metrics:
            if rand and task_probes:
                vals = [sameness(mats, model, metric, r, t) for r in rand for t in task_probes]
                same = _same_row(vals, _consistent(mats, model, metric, task_probes, cfg.n_permutations))
                rows.append({"claim_id": "bian.who_random", "pattern": "the same on random tokens as on task inputs",
                             "task": "random tokens vs task inputs", "setting": metric, "model": model, **same})
            for i, a in enumerate(fine):
                for b in fine[i + 1:]:
                    pa, pb = f"task-{a}", f"task-{b}"
                    same = _same_row([sameness(mats, model, metric, pa, pb)],
                                     _consistent(mats, model, metric, [pa, pb], cfg.n_permutations))
                    rows.append({"claim_id": "bian.who_tasks", "pattern": "the same on two tasks' inputs",
                                 "task": f"{a} vs {b}", "setting": metric, "model": model, **same})
        for t in fine:
            rows.append({"claim_id": "bian.where", "pattern": "cluster structure", "task": t,
                         "setting": cfg.cluster_metric, "model": model, **_cluster_row(mats, cfg, model, f"task-{t}")})
    return pd.DataFrame(rows, columns=cols)


# ---------------------------------------------------------------------------------------------- verdicts

NO_RANDOM_INIT = ("no randomly initialised model was run as a negative control (random_init_control is off, or its "
                  "cells are missing), so a pattern that the architecture or the inputs alone produce cannot be "
                  "ruled out")
PRETRAINED_TASK = "pre-trained model"  # the task column of a row about the pre-trained model itself (n = 1)


def scale_text(cfg) -> str:
    """What the run is, from ``cfg``: model, heads, the fine-tuned models (examples x epochs, seeds), probes, the
    MLM runs; whether it is the paper's set-up (Bian et al.: bert-base-uncased, full GLUE, pre-training)."""
    n_layers, n_heads = cfg.head_shape()
    train = "full training sets" if cfg.train_size is None else f"{cfg.train_size} training examples"
    mlm_part = (f"; dropout: {cfg.mlm_steps} steps of continued MLM training x {len(cfg.mlm_seeds)} seed(s), "
                "not pre-training" if cfg.dropouts else "")
    text = (f"{cfg.model} ({n_layers} x {n_heads} = {n_layers * n_heads} heads); fine-tuned models: {train} x "
            f"{glue_workbench.epochs_text(cfg)}, seeds {', '.join(str(s) for s in cfg.seeds)}; probes of {cfg.probe_size} sentences"
            + mlm_part)
    return glue_workbench.scale_note(text, glue_workbench.is_paper_setup(cfg))


def mlm_losses(mats: Matrices, cfg) -> dict:
    """The MLM runs' recorded losses (evidence ``mlm_losses`` of the dropout claim's gate,
    ``redundancy_patterns_claims.MlmTrained``): ``recorded`` (whether the cells record a masked-LM loss at all),
    ``last`` (the final loss of every MLM run whose cell is there) and ``head_first`` (the new head's first loss)."""
    extra = mats.extra
    if "loss_last" not in extra.columns:
        return {"recorded": False, "last": [], "head_first": []}
    names = [f"mlm-p{p:g}-s{s}" for p in cfg.dropouts for s in cfg.mlm_seeds]
    rows = [extra.loc[(n, "generic")] for n in names if (n, "generic") in extra.index]
    return {"recorded": True, "last": [float(r["loss_last"]) for r in rows],
            "head_first": [float(r["head_loss_first"]) for r in rows if "head_loss_first" in r]}


def control_measured(control: pd.DataFrame) -> frozenset[tuple[str, str, str]]:
    """``{(pattern, task, setting)}`` where the negative control (:func:`negative_control`) was measured: the evidence
    ``control_measured`` of the claims' ``ControlGate``, which fails where it was not (a precondition nobody checked
    is not met)."""
    if control.empty:
        return frozenset()
    ctrl = control[control["model"] != "pretrained"]
    return frozenset(zip(ctrl["claim_id"].astype(str), ctrl["task"].astype(str), ctrl["setting"].astype(str)))


def control_failures(control: pd.DataFrame) -> dict[tuple[str, str, str], str]:
    """``{(pattern, task, setting): reason}`` where the negative control (:func:`negative_control`; ``pattern`` its
    ``claim_id``) shows the pattern, or cannot be judged (a control that cannot fail clears nothing), with both
    models' numbers: the evidence ``control`` of the claims' ``ControlGate``. A task x setting absent from it (the
    control shows nothing there, or was not measured there) is not in it."""
    out = {}
    if control.empty:
        return out
    for (pattern, task, setting), here in control.groupby(["claim_id", "task", "setting"], sort=False):
        ctrl = here[here["model"] != "pretrained"]
        if ctrl.empty:
            continue
        if not bool(ctrl["decidable"].iloc[0]):
            out[(pattern, task, setting)] = (f"the negative control (randomly initialised {CONTROL}) cannot be judged: "
                                             f"{ctrl['criterion'].iloc[0]}")
        elif bool(ctrl["shows_pattern"].iloc[0]):
            pre = here[here["model"] == "pretrained"]
            pre_text = f"; the pre-trained model: {pre['criterion'].iloc[0]}" if len(pre) else ""
            out[(pattern, task, setting)] = (
                f"the negative control (randomly initialised {CONTROL}, same architecture and probes) shows the same "
                f"pattern ({ctrl['pattern'].iloc[0]}: {ctrl['criterion'].iloc[0]}){pre_text}: the pattern is not "
                "evidence of learned redundancy")
    return out


def _control_note(control: pd.DataFrame, pattern: str, row) -> str:
    """What the negative control says of a row of a claim that needs it (its pattern ``pattern``), for the reason
    column: the caveat without control cells, "passed" with the control's numbers where it does not show the pattern
    (a failed control is already the row's reason, the claim's gate)."""
    if control.empty:  # a gated row already says so in its reason (the control gate: not measured)
        return "" if "negative control (randomly initialised model, same architecture and probes) was not measured" \
            in str(row["reason"]) else "; caveat: " + NO_RANDOM_INIT
    ctrl = control[(control["claim_id"] == pattern) & (control["model"] != "pretrained")]
    task, setting = str(row["task"]), str(row["setting"])
    if task == "n/a":  # nothing was measured (e.g. one fine-tuned task): nothing for the control to say
        return ""
    if task.startswith("all (") and task.endswith(")"):  # a pooled row: the tasks pooled
        here = ctrl[ctrl["task"].isin(task[len("all ("):-1].split(", ")) & (ctrl["setting"] == setting)]
    else:
        here = ctrl[(ctrl["task"] == task) & (ctrl["setting"] == setting)]
    if here.empty:
        return "; caveat: the negative control (randomly initialised model) was not measured here"
    failed = here["shows_pattern"] | ~here["decidable"].astype(bool)
    if failed.any():
        if task.startswith("all ("):
            shown = ", ".join(here.loc[failed, "task"])
            return (f"; the negative control (randomly initialised model) shows the pattern, or cannot be judged, on "
                    f"{shown} (see its row)")
        return ""  # the gate's reason says it
    return ("; negative control passed: the randomly initialised model does not show the pattern ("
            + "; ".join(f"{r.task}: {r.criterion}" for r in here.itertuples()) + ")")


class VerdictInputs:
    """What the claims are measured on: the cells' matrices, the parameters, the fine-tuned ``tasks``, the
    :func:`when` and :func:`why` tables; the negative control (:func:`negative_control`) and the pre-trained model's
    clusters on generic text (:func:`where`) computed once, on first use."""

    def __init__(self, mats: Matrices, cfg, tasks: list[str], when_t: pd.DataFrame, why_runs: pd.DataFrame):
        self.mats, self.cfg, self.tasks, self.when_t, self.why_runs = mats, cfg, list(tasks), when_t, why_runs
        self._control, self._clusters = None, None

    @property
    def control(self) -> pd.DataFrame:
        if self._control is None:
            self._control = negative_control(self.mats, self.cfg, self.tasks)
        return self._control

    @property
    def pretrained_clusters(self) -> dict | None:
        """:func:`where`'s one-row table of the pre-trained model on generic text, as a dict (None without that
        cell)."""
        if self._clusters is None and ("pretrained", "generic") in self.mats.keys():
            self._clusters = where(self.mats, self.cfg)[1].iloc[0].to_dict()
        return self._clusters

    def ft_models(self) -> list[tuple[str, int, str, str]]:
        """``(task, seed, model, probe)`` of every fine-tuned model whose cell is in the matrices."""
        have = set(self.mats.keys())
        return [(t, s, f"finetuned-{t}-s{s}", f"task-{t}") for t in self.tasks for s in self.cfg.seeds
                if (f"finetuned-{t}-s{s}", f"task-{t}") in have]


def _kind(metric: str) -> str:
    return "token" if metric in redundancy.TOKEN_METRICS else "sentence"


def _same(effect: str) -> str:
    return f"{effect} (Mantel r of disjoint sentences minus the attenuation ceiling)"


def _absent(why: str, unit: str = claims.DEFAULT_UNIT) -> list[list[claims.Measurement]]:
    """Nothing to measure: one absent measurement (``not testable`` with ``why``), task ``n/a``."""
    return [[claims.Measurement.absent("n/a", why, unit=unit)]]


def _what(x: VerdictInputs, ka: str, kb: str) -> list[list[claims.Measurement]]:
    """Per fine-tuned task, units = its models: mean over the metric pairs of kinds (ka, kb) of r(a, b) minus the
    ceiling, the two distances' matrices of that model on its probe compared like with like
    (:meth:`Matrices.compare`); ``full`` = the mean ceiling, chance 0."""
    mats, metrics = x.mats, list(x.cfg.metrics)
    pairs = [(a, b) for i, a in enumerate(metrics) for b in metrics[i + 1:] if {_kind(a), _kind(b)} == {ka, kb}
             and (ka != kb or _kind(a) == ka)]
    if not pairs:
        return _absent(f"no pair of {ka}-based and {kb}-based distances among the metrics {metrics}")
    rows = []
    for task, seed, model, probe in x.ft_models():
        rc = [mats.compare((model, probe, a), (model, probe, b)) for a, b in pairs]
        r, c = [v for v, _ in rc], [v for _, v in rc]
        rows.append((task, seed, float(np.mean(r) - np.mean(c)), float(np.mean(c))))
    setting = ", ".join(f"{a}~{b}" for a, b in pairs)
    out = []
    for task in dict.fromkeys(r[0] for r in rows):
        g = [r for r in rows if r[0] == task]
        out.append(claims.Measurement(task, [r[2] for r in g], [(task, r[1]) for r in g], setting, "",
                                      effect=_same("mean r between the distances"), full=[r[3] for r in g], chance=0.0))
    return [out] if out else _absent("no fine-tuned model's cells")


def _pretrained_clusters(x: VerdictInputs) -> list[list[claims.Measurement]]:
    """The pre-trained model on generic text (n = 1): its silhouette minus the shuffled-distance null's mean
    (:func:`where`), one unit; described by :func:`_describe_clusters`."""
    info = x.pretrained_clusters
    if info is None:
        return _absent("no cell of the pre-trained model on generic text", unit=PRETRAINED_UNIT)
    effect = float(info["silhouette"] - info["silhouette_null_mean"])
    if not np.isfinite(effect):
        return _absent(f"n = 1 pre-trained model: described, not tested: {_describe_clusters(x)}",
                       unit=PRETRAINED_UNIT)
    return [[claims.Measurement(PRETRAINED_TASK, [effect], ["pretrained"], x.cfg.cluster_metric, "",
                                effect="silhouette minus the shuffled-distance null's mean (the pre-trained model on "
                                       "generic text)", unit=PRETRAINED_UNIT)]]


def _describe_clusters(x: VerdictInputs) -> str:
    """The pre-trained model's clusters on generic text in words: the groups, the silhouette against the shuffled
    null (permutation p), and the negative control on the same text."""
    cfg, info = x.cfg, x.pretrained_clusters
    if not np.isfinite(info["silhouette"]):
        text = f"on generic text ({cfg.cluster_metric}), no two groups of >= {cfg.min_cluster_size} heads"
    else:
        text = (f"on generic text ({cfg.cluster_metric}), {info['n_groups']} groups of >= {cfg.min_cluster_size} "
                f"heads (sizes {info['group_sizes']}) and {info['n_unique_heads']} unique heads; silhouette "
                f"{info['silhouette']:.3g} against the shuffled-distance null's mean {info['silhouette_null_mean']:.3g}"
                f" (permutation p = {info['silhouette_null_p']:.3g}, {cfg.n_null} shuffles)")
    if (CONTROL, "generic") not in x.mats.keys():
        return text + "; caveat: " + NO_RANDOM_INIT
    ctrl = _cluster_row(x.mats, cfg, CONTROL, "generic")
    verdict = (": it shows cluster structure too, so the structure is not evidence of learned redundancy"
               if ctrl["shows_pattern"] else "" if ctrl["decidable"] else ": the control cannot be judged")
    return (text + f"; the negative control (randomly initialised model) on the same text: {ctrl['criterion']}"
            + verdict + "; the fine-tuned copies: ours.clusters_after_finetuning")


def _finetuned_clusters(x: VerdictInputs) -> list[list[claims.Measurement]]:
    """Per fine-tuned task, units = its models: the silhouette of the groups (as :func:`where` chooses them) minus
    the mean of the same criterion on ``n_null`` shuffles of that model's ``cluster_metric`` matrix."""
    cfg, k_range, rows = x.cfg, (x.cfg.k_min, x.cfg.k_max), []
    for task, seed, model, probe in x.ft_models():
        d = x.mats.get(model, probe, cfg.cluster_metric)
        sil = clustering.cluster_heads(d, k_range=k_range, order=False, min_size=cfg.min_cluster_size).silhouette
        null = clustering.silhouette_null(d, k_range, n_perm=cfg.n_null, min_size=cfg.min_cluster_size)
        if np.isfinite(sil) and np.isfinite(null).any():
            rows.append((task, seed, float(sil - np.nanmean(null))))
    out = []
    for task in dict.fromkeys(r[0] for r in rows):
        g = [r for r in rows if r[0] == task]
        out.append(claims.Measurement(task, [r[2] for r in g], [(task, r[1]) for r in g], cfg.cluster_metric, "",
                                      effect="silhouette minus the shuffled-distance null's mean"))
    return [out] if out else _absent("no fine-tuned model with two groups of heads (or no fine-tuned model's cells)")


def _pretrained_phase(x: VerdictInputs) -> list[list[claims.Measurement]]:
    """Per distance, the pre-trained model (n = 1): the mean over its fine-tuned copies of r(pre-trained, fine-tuned)
    minus the ceiling; ``full`` = the mean ceiling (the margin's headroom), chance 0. Described by
    :func:`_describe_phase`."""
    if x.when_t.empty:
        return _absent("no fine-tuned model", unit=PRETRAINED_UNIT)
    out = []
    for metric, g in x.when_t.groupby("metric", sort=False):
        out.append(claims.Measurement(
            PRETRAINED_TASK, [float((g["r_disjoint"] - g["ceiling"]).mean())], ["pretrained"], metric, "",
            effect=_same("r(pre-trained, fine-tuned) on the task's inputs, mean over its fine-tuned copies"),
            unit=PRETRAINED_UNIT, full=[float(g["ceiling"].mean())], chance=0.0))
    return [out]


def _describe_phase(when_t: pd.DataFrame) -> dict[str, str]:
    """Per distance, in words: r(pre-trained, fine-tuned) - ceiling over the fine-tuned copies (mean, range, per
    task), with the mean r and ceiling."""
    out = {}
    for metric, g in when_t.groupby("metric", sort=False):
        d = g["r_disjoint"] - g["ceiling"]
        per_task = ", ".join(f"{t} {v:+.3g}" for t, v in d.groupby(g["task"], sort=False).mean().items())
        out[metric] = (f"r(pre-trained, fine-tuned) - attenuation ceiling over its {len(g)} fine-tuned copies (task x "
                       f"seed): mean {d.mean():+.3g}, from {d.min():+.3g} to {d.max():+.3g} (per task: {per_task}; "
                       f"mean r {g['r_disjoint'].mean():.3g} against a mean ceiling of {g['ceiling'].mean():.3g}); "
                       "the fine-tuned copies as units: ours.patterns_survive_finetuning")
    return out


def _finetuned_phase(x: VerdictInputs) -> list[list[claims.Measurement]]:
    """Per distance and fine-tuned task, units = its models: r(pre-trained, fine-tuned) minus the ceiling."""
    if x.when_t.empty:
        return _absent("no fine-tuned model")
    out = []
    for (metric, task), g in x.when_t.groupby(["metric", "task"], sort=False):
        out.append(claims.Measurement(task, (g["r_disjoint"] - g["ceiling"]).tolist(),
                                      [(task, s) for s in g["seed"]], metric, "",
                                      effect=_same("r(pre-trained, fine-tuned) on the task's inputs"),
                                      full=g["ceiling"].tolist(), chance=0.0))
    return [out] if out else _absent("no fine-tuned model")


def _who_tasks(x: VerdictInputs) -> list[list[claims.Measurement]]:
    """One list of measurements per pair of fine-tuned tasks (evaluated apart: pairs share models, so they are never
    pooled): per seed s, r between the models (A, s) and (B, s), each on its own task's inputs, minus its
    attenuation ceiling (:meth:`Matrices.compare`)."""
    mats, cfg, tasks = x.mats, x.cfg, x.tasks
    models = x.ft_models()
    done = sorted({t for t, *_ in models}, key=tasks.index)
    if len(done) < 2:
        return _absent(f"fine-tuned models of {len(done)} task(s) ({', '.join(done) or 'none'}): task-agnostic "
                       "compares fine-tuned models of different tasks")
    by = {(t, s): (m, p) for t, s, m, p in models}
    groups = []
    for i, a in enumerate(done):
        for b in done[i + 1:]:
            ms = []
            for metric in cfg.metrics:
                vals, fulls, units = [], [], []
                for s in cfg.seeds:
                    if (a, s) in by and (b, s) in by:
                        (ma, pa), (mb, pb) = by[(a, s)], by[(b, s)]
                        r, c = mats.compare((ma, pa, metric), (mb, pb, metric))
                        vals.append(r - c), fulls.append(c), units.append(s)
                if vals:
                    ms.append(claims.Measurement(f"{a} vs {b}", vals, units, metric, "",
                                                 effect=_same("r(model of one task, model of the other, same seed)"),
                                                 unit="seed (a model of each task)", full=fulls, chance=0.0))
            if ms:
                groups.append(ms)
    return groups or _absent("no seed with a fine-tuned model of both tasks")


def _pretrained_who_tasks(x: VerdictInputs) -> list[list[claims.Measurement]]:
    """Per pair of fine-tuned tasks and distance, the pre-trained model (n = 1): r between its matrices on the two
    tasks' inputs minus its attenuation ceiling (``full`` = the ceiling, chance 0). Described by
    :func:`_describe_who_tasks`."""
    mats, cfg = x.mats, x.cfg
    have = {p for m, p in mats.keys() if m == "pretrained"}
    probed = [t for t in x.tasks if f"task-{t}" in have]
    if len(probed) < 2:
        return _absent(f"the pre-trained model ran on the inputs of {len(probed)} task(s): task-agnostic compares two",
                       unit=PRETRAINED_UNIT)
    groups = []
    for i, a in enumerate(probed):
        for b in probed[i + 1:]:
            ms = []
            for metric in cfg.metrics:
                pa, pb = f"task-{a}", f"task-{b}"
                r, c = mats.compare(("pretrained", pa, metric), ("pretrained", pb, metric))
                ms.append(claims.Measurement(f"{a} vs {b}", [r - c], ["pretrained"], metric, "",
                                             effect=_same("r(pre-trained model on one task's inputs, on the other's)"),
                                             unit=PRETRAINED_UNIT, full=[c], chance=0.0))
            groups.append(ms)
    return groups


def _describe_who_tasks(x: VerdictInputs) -> dict[tuple[str, str], str]:
    """Per pair of tasks and distance (``(task, setting)`` of the row), in words: the pre-trained model's r - ceiling
    on the two tasks' inputs, and the same of its fine-tuned copies (a model of each task, same seed: mean and range
    over the seeds)."""
    tuned = {(m.task, m.setting): np.asarray(m.values, dtype=float) for g in _who_tasks(x) for m in g if not m.missing}
    out = {}
    for g in _pretrained_who_tasks(x):
        for m in g:
            if m.missing:
                continue
            text = f"r(pre-trained model on one task's inputs, on the other's) - attenuation ceiling {m.values[0]:+.3g}"
            c = tuned.get((m.task, m.setting))
            if c is not None and c.size:
                text += (f"; its fine-tuned copies (a model of each task, same seed; {c.size} seeds): mean "
                         f"{c.mean():+.3g}, from {c.min():+.3g} to {c.max():+.3g}")
            out[(m.task, m.setting)] = text + "; the fine-tuned copies as units: ours.tasks_agree_after_finetuning"
    return out


def _who_random(x: VerdictInputs) -> list[list[claims.Measurement]]:
    """The pre-trained model only (the random probes run on it alone): r(random probe, task probe) minus its
    attenuation ceiling (:func:`sameness`), every random x task probe; one unit (the pre-trained model)."""
    mats = x.mats
    have = {p for m, p in mats.keys() if m == "pretrained"}
    rand = sorted(p for p in have if p.startswith("random-"))
    task = sorted(p for p in have if p.startswith("task-"))
    if not rand or not task:
        return _absent(f"needs a random-token probe and a task probe of the pre-trained model (random: {len(rand)}, "
                       f"task: {len(task)})")
    out = []
    for metric in x.cfg.metrics:
        pairs = [sameness(mats, "pretrained", metric, r_, t) for r_ in rand for t in task]
        out.append(claims.Measurement("random tokens vs task inputs", [v for v, _ in pairs],
                                      ["pretrained"] * len(pairs), metric, "",
                                      effect=_same("r(random-token probe, task probe)"), unit="model (pre-trained)",
                                      full=[c for _, c in pairs], chance=0.0))
    return [out]


def _dropout_slope(x: VerdictInputs) -> list[list[claims.Measurement]]:
    """Per distance, units = MLM seeds: the OLS slope of the mean distance on the dropout ratio within the seed."""
    runs = x.why_runs
    if runs.empty or runs["dropout"].nunique() < 2:
        return _absent("fewer than two dropout ratios were run")
    out = []
    for metric, g in runs.groupby("metric", sort=False):
        slopes, units = [], []
        for s, gs in g.groupby("seed"):
            if gs["dropout"].nunique() > 1:
                slopes.append(float(sps.linregress(gs["dropout"], gs["mean_distance"]).slope)), units.append(s)
        out.append(claims.Measurement("generic text", slopes, units, metric, "",
                                      effect="slope of the mean distance on the dropout ratio", unit="MLM run (seed)"))
    return [out]


# a claim's ``measure`` -> its measurements: groups evaluated apart (the pairs of tasks of who_tasks share models)
MEASUREMENTS = {
    "what_token": lambda x: _what(x, "token", "token"),
    "what_sentence": lambda x: _what(x, "sentence", "sentence"),
    "what_token_sentence": lambda x: _what(x, "token", "sentence"),
    "pretrained_clusters": _pretrained_clusters,
    "finetuned_clusters": _finetuned_clusters,
    "pretrained_phase": _pretrained_phase,
    "finetuned_phase": _finetuned_phase,
    "pretrained_who_tasks": _pretrained_who_tasks,
    "who_tasks": _who_tasks,
    "who_random": _who_random,
    "dropout_slope": _dropout_slope,
}


def _described(x: VerdictInputs, measure: str) -> dict:
    """Evidence ``described`` of a claim about the pre-trained model itself (n = 1): ``{setting: its numbers in
    words}``, or ``{(task, setting): ...}`` where one setting has several rows (who_tasks: a row per pair of tasks)."""
    if measure == "pretrained_clusters" and x.pretrained_clusters is not None:
        return {x.cfg.cluster_metric: _describe_clusters(x)}
    if measure == "pretrained_phase" and not x.when_t.empty:
        return _describe_phase(x.when_t)
    if measure == "pretrained_who_tasks":
        return _describe_who_tasks(x)
    return {}


def convergence_evidence(mats: Matrices) -> pd.DataFrame:
    """The convergence gate's evidence (:mod:`.convergence`): every fine-tuned model (``finetuned-<task>-s<seed>``),
    its held-out curve as its cells recorded it (``full_model_history``; none in cells of before it was recorded)."""
    extra = mats.extra.reset_index()
    tuned = extra[extra["model"].astype(str).str.startswith("finetuned-")]
    if tuned.empty:
        return convergence.table([])
    task_seed = tuned["model"].str[len("finetuned-"):].str.rsplit("-s", n=1)
    frame = tuned.assign(task=task_seed.str[0], seed=task_seed.str[1].astype(int))
    return convergence.table(convergence.full_rows(frame, column="full_model_history"))


def claim_verdicts(mats: Matrices, cfg, when_t: pd.DataFrame, why_runs: pd.DataFrame, tasks: list[str],
                   declared: Sequence[claims.Claim], vocab_size: int | None = None,
                   study: str = "redundancy_patterns") -> pd.DataFrame:
    """The study's verdict table (:data:`claims.COLUMNS`): every declared claim (``declared``: the study's ``claims``,
    ``redundancy_patterns_claims.CLAIMS``) measured by its ``measure`` (:data:`MEASUREMENTS`) and decided by
    :func:`claims.evaluate` (its rule, margin and gates), Holm over every test of the study (one family: no head is
    masked, no semantics). Units: the fine-tuned models (task x seed) for what and for the claims about fine-tuning
    the pre-trained model; seed-matched pairs of fine-tuned models of two tasks for ours.tasks_agree_after_finetuning;
    the MLM runs (seeds) for why; the one pre-trained model for a claim about it (where, when, who_tasks, who_random:
    n = 1, described in the reason, never tested). ``tasks``: the fine-tuned tasks; ``vocab_size``: the model's vocabulary (the MLM gate;
    default: read from ``cfg.model``'s config). Evidence: ``control`` (:func:`control_failures` of
    :func:`negative_control`) and ``control_measured`` (:func:`control_measured`), ``described`` (the pre-trained model's numbers), ``mlm_losses`` (:func:`mlm_losses`),
    ``vocab_size``. The rows of a claim with a control gate end with what the control says (passed, or the caveat
    :data:`NO_RANDOM_INIT` without its cells)."""
    unknown = sorted(c.measure for c in declared if c.measure not in MEASUREMENTS)
    if unknown:
        raise ValueError(f"claims with a measure this analysis does not know: {unknown} "
                         f"(known: {sorted(MEASUREMENTS)})")
    scale = scale_text(cfg)
    if vocab_size is None and cfg.dropouts:
        vocab_size = int(models.load_config(cfg.model).vocab_size)
    x = VerdictInputs(mats, cfg, tasks, when_t, why_runs)
    common = {"control": control_failures(x.control), "control_measured": control_measured(x.control),
              "mlm_losses": mlm_losses(mats, cfg), "vocab_size": vocab_size,
              "convergence": convergence_evidence(mats)}
    parts, patterns = [], []
    for claim in declared:
        pattern = next((g.pattern for g in claim.gates if hasattr(g, "pattern")), None)  # a control gate's pattern
        evidence = {**common, "described": _described(x, claim.measure)}
        for group in MEASUREMENTS[claim.measure](x):
            part = claims.evaluate(claim, group, evidence=evidence, scale=scale, study=study)
            parts.append(part)
            patterns += [pattern] * len(part)
    table = claims.adjust(pd.concat(parts, ignore_index=True))
    for i, pattern in zip(table.index, patterns):
        if pattern is not None:
            table.loc[i, "reason"] = str(table.loc[i, "reason"]) + _control_note(x.control, pattern, table.loc[i])
    claims.validate(table)
    return table
