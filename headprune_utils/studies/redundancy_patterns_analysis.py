"""Study 4's analysis: pure functions over the tidy table of the ``redundancy_patterns`` cells (one row per
(model, probe) cell, its matrices stored as upper triangles of the probe's two halves).

:class:`Matrices` gives back each cell's ``[N, N]`` matrices (N = n_layers * n_heads, layer-major); the Five Ws
compare them: what/how (:func:`metric_agreement`, :func:`summary_stats`), where (:func:`where`,
:func:`group_labels`), when (:func:`when`), who (:func:`who`), why (:func:`why`); :func:`negative_control` puts the
randomly initialised model (:data:`CONTROL`) beside the pre-trained one for every pattern that needs a negative
control. The claims, their rules and the verdicts are in :mod:`.redundancy_patterns_claims`.
``cfg`` is the study's parameters (``RedundancyPatternsConfig``, defined with the protocol in
:mod:`.redundancy_patterns`); which fine-tuned tasks and probes to compare are passed in (the notebook passes the
planned ones: ``redundancy_patterns.finetuned_tasks``, ``redundancy_patterns.probe_names``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from .. import clustering, margins
from ..results import unpack_floats

__all__ = ["Matrices", "metric_agreement", "summary_stats", "where", "group_labels", "when", "who", "why",
           "sameness", "negative_control", "CONTROL", "CONTROL_SEED", "CONTROL_ALPHA"]

CONTROL_SEED = 0  # the negative control's weights: the pre-trained model's architecture initialised from this seed
CONTROL = f"random-init-s{CONTROL_SEED}"  # its cells' model name
CONTROL_ALPHA = 0.05  # a model "has clusters" / "a reproducible matrix" when its permutation test reaches this level


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
        """Mantel r between the two halves of the probe: the ceiling of any comparison on this probe."""
        return clustering.mantel(self.get(model, probe, metric, "a"), self.get(model, probe, metric, "b"), n_perm=0)[0]


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
    same task inputs, with the probe's split-half ceiling (pre-trained). ``tasks``: those of the fine-tuned
    models (every planned one: ``redundancy_patterns.finetuned_tasks(cfg)``), each with every seed of ``cfg``."""
    rows = []
    for t in tasks:
        for s in cfg.seeds:
            ft = f"finetuned-{t}-s{s}"
            for m in cfg.metrics:
                r, p = clustering.mantel(mats.get("pretrained", f"task-{t}", m), mats.get(ft, f"task-{t}", m),
                                         cfg.n_permutations)
                rows.append({"task": t, "seed": s, "metric": m, "mantel_r": r, "mantel_p": p,
                             "split_half_r": mats.split_half("pretrained", f"task-{t}", m)})
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
    the Mantel r with the pre-trained model's matrix, the clusters' k. Tests per distance: the OLS slope of
    the mean distance on the dropout ratio (runs as points) and the mean |difference| of mean distance between
    runs of the same seed at different ratios against runs of different seeds at the same ratio. Both empty
    when no dropout ratio is run."""
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
            fit = sps.linregress(g["dropout"], g["mean_distance"])
            row.update({"slope_per_unit_dropout": fit.slope, "slope_p": fit.pvalue,
                        "slope_ci_low": fit.slope - 1.96 * fit.stderr, "slope_ci_high": fit.slope + 1.96 * fit.stderr})
            by = g.pivot(index="seed", columns="dropout", values="mean_distance")
            between_p = [abs(by[a] - by[b]).mean() for i, a in enumerate(by.columns) for b in by.columns[i + 1:]]
            between_s = ([abs(by.iloc[i] - by.iloc[j]).mean() for i in range(len(by)) for j in range(i + 1, len(by))]
                         if len(by) > 1 else [np.nan])
            row.update({"mean_abs_diff_between_dropouts": float(np.mean(between_p)),
                        "mean_abs_diff_between_seeds": float(np.mean(between_s)) if len(by) > 1 else np.nan})
        tests.append(row)
    return runs, pd.DataFrame(tests)


# ------------------------------------------------------------------------------------------ negative control

def sameness(mats: Matrices, model: str, metric: str, a: str, b: str, ceiling: str = "b") -> tuple[float, float]:
    """``(r - c, c)``: Mantel r between ``model``'s matrices on probes ``a`` and ``b`` minus the ceiling ``c``, the
    split-half r of probe ``b`` (``ceiling="b"``: ``b`` is the reference, e.g. the task probe against a random-token
    probe) or the mean of both probes' (``"mean"``). The quantity of every "the same" claim of the study."""
    if ceiling not in ("b", "mean"):
        raise ValueError(f"ceiling must be 'b' or 'mean', got {ceiling!r}")
    r = clustering.mantel(mats.get(model, a, metric), mats.get(model, b, metric), n_perm=0)[0]
    c = mats.split_half(model, b, metric)
    if ceiling == "mean":
        c = (c + mats.split_half(model, a, metric)) / 2
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

    - ``bian.who_random`` (setting = distance): mean over the random-token x task probes of r(random, task) minus the
      task probe's split-half ceiling (:func:`sameness`); the pattern is shown when the model's matrix is
      reproducible on every task probe (split-half Mantel p < ``CONTROL_ALPHA``, ``n_permutations``) and the mean
      exceeds ``-margins.SHARE`` x the mean ceiling (the claim's "the same", at the point estimate);
    - ``bian.who_tasks`` (task = "A vs B", setting = distance): r between the model's matrices on the two tasks'
      inputs minus the mean of the two ceilings, the same criterion;
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
                    same = _same_row([sameness(mats, model, metric, pa, pb, ceiling="mean")],
                                     _consistent(mats, model, metric, [pa, pb], cfg.n_permutations))
                    rows.append({"claim_id": "bian.who_tasks", "pattern": "the same on two tasks' inputs",
                                 "task": f"{a} vs {b}", "setting": metric, "model": model, **same})
        for t in fine:
            rows.append({"claim_id": "bian.where", "pattern": "cluster structure", "task": t,
                         "setting": cfg.cluster_metric, "model": model, **_cluster_row(mats, cfg, model, f"task-{t}")})
    return pd.DataFrame(rows, columns=cols)
