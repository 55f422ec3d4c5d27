"""Study 4's analysis: pure functions over the tidy table of the ``redundancy_patterns`` cells (one row per
(model, probe) cell, its matrices stored as upper triangles of the probe's two halves).

:class:`Matrices` gives back each cell's ``[N, N]`` matrices (N = n_layers * n_heads, layer-major); the Five Ws
compare them: what/how (:func:`metric_agreement`, :func:`summary_stats`), where (:func:`where`,
:func:`group_labels`), when (:func:`when`), who (:func:`who`), why (:func:`why`), then the :func:`verdicts`.
``cfg`` is the study's parameters (``RedundancyPatternsConfig``, defined with the protocol in
:mod:`.redundancy_patterns`); which fine-tuned tasks and probes to compare are passed in (the notebook passes the
planned ones: ``redundancy_patterns.finetuned_tasks``, ``redundancy_patterns.probe_names``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from .. import clustering, redundancy

__all__ = ["Matrices", "metric_agreement", "summary_stats", "where", "group_labels", "when", "who", "why", "verdicts"]

def _square(upper: list[float], n: int) -> np.ndarray:
    out = np.zeros((n, n))
    out[np.triu_indices(n, k=1)] = upper
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


def who(mats: Matrices, cfg, names: list[str]) -> pd.DataFrame:
    """Mantel r (p) between the pre-trained model's matrices on every two probes, per distance. ``names``: the
    probes compared (every planned one: ``redundancy_patterns.probe_names(cfg)``)."""
    rows = []
    for m in cfg.metrics:
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                r, p = clustering.mantel(mats.get("pretrained", a, m), mats.get("pretrained", b, m), cfg.n_permutations)
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


def verdicts(agree: pd.DataFrame, where_info: pd.DataFrame, when_t: pd.DataFrame, who_t: pd.DataFrame,
             why_tests: pd.DataFrame, cfg, alpha: float = 0.05, strong: float = 0.8) -> pd.DataFrame:
    """"claim - our result - verdict" rows. "Alike" = Mantel p < alpha for every comparison; "the same" =
    also mean r >= ``strong`` (stated, and beside the split-half ceiling)."""
    rows = []

    def alike(t: pd.DataFrame) -> str:
        if t.empty:
            return "not run"
        sig = bool((t["mantel_p"] < alpha).all())
        if sig and t["mantel_r"].mean() >= strong:
            return "supported"
        return "partly supported (alike but not the same)" if sig else "not supported"

    pairs = agree[agree["what"] == "two distances"].rename(columns={"pearson_r": "mantel_r"})
    kind = {m: "token" if m in redundancy.TOKEN_METRICS else "sentence" for m in redundancy.METRICS}
    families = (("token-based distances agree with each other", "token", "token"),
                ("sentence-based distances agree with each other", "sentence", "sentence"),
                ("token-based and sentence-based distances agree", "token", "sentence"))
    for claim, ka, kb in families:
        t = pairs[[{kind[a], kind[b]} == {ka, kb} for a, b in zip(pairs["metric_a"], pairs["metric_b"])]]
        if t.empty:
            continue
        rows.append({"W": "What/How", "claim": f"{claim} (the same heads redundant; our check, the paper uses both kinds)",
                     "our result": "; ".join(f"{r.metric_a}~{r.metric_b} r={r.mantel_r:.2f} (p={r.mantel_p:.3g})"
                                             for r in t.itertuples()),
                     "verdict": alike(t)})
    w = where_info.iloc[0]
    beats_null = bool(w["silhouette_null_p"] < alpha) if np.isfinite(w["silhouette_null_p"]) else False
    sil = w["silhouette"]
    if beats_null and sil > 0.5:
        where_v = "supported (a reasonable structure: silhouette above 0.5)"
    elif beats_null and sil > 0.25:
        where_v = "partly supported (real but weak structure: silhouette 0.25-0.5)"
    elif beats_null:
        where_v = "partly supported (more structure than chance, but no substantial structure: silhouette below 0.25)"
    else:
        where_v = "not supported (no more structure than the shuffled distances)"
    rows.append({"W": "Where", "claim": "heads form clear clusters of mutually redundant heads",
                 "our result": (f"{w['metric']}: {w['n_groups']} groups of >= {w['min_cluster_size']} heads (sizes "
                                f"{w['group_sizes']}) and {w['n_unique_heads']} unique head(s) ({w['unique_heads']}); "
                                f"silhouette {w['silhouette']:.2f} (shuffled-distance null {w['silhouette_null_mean']:.2f}, "
                                f"p = {w['silhouette_null_p']:.3g}); within/between-group distance "
                                f"{w['mean_within_cluster_distance']:.3f}/{w['mean_between_cluster_distance']:.3f}; "
                                f"ARI with layers {w['ari_with_layer']:.2f}; hierarchical vs spectral ARI "
                                f"{w['ari_hierarchical_vs_spectral']:.2f}"),
                 "verdict": where_v + "; thresholds of Kaufman & Rousseeuw, null p < 0.05"})
    rows.append({"W": "When", "claim": "the patterns are the same before and after fine-tuning (phase-independent)",
                 "our result": "; ".join(f"{m}: r={g['mantel_r'].mean():.2f} (min {g['mantel_r'].min():.2f}, split-half "
                                         f"{g['split_half_r'].mean():.2f}), max p={g['mantel_p'].max():.3g}"
                                         for m, g in when_t.groupby("metric")),
                 "verdict": alike(when_t)})
    tasks_only = who_t[who_t["probe_a"].str.startswith("task-") & who_t["probe_b"].str.startswith("task-")]
    vs_random = who_t[(who_t["probe_a"].str.startswith("random-") ^ who_t["probe_b"].str.startswith("random-"))
                      & ~(who_t["probe_a"] == "generic") & ~(who_t["probe_b"] == "generic")]
    for name, t in (("across GLUE tasks (task-agnostic)", tasks_only), ("on random token sequences vs task inputs", vs_random)):
        rows.append({"W": "Who", "claim": f"the patterns are the same {name}",
                     "our result": "; ".join(f"{m}: mean r={g['mantel_r'].mean():.2f} (min {g['mantel_r'].min():.2f}), "
                                             f"max p={g['mantel_p'].max():.3g}" for m, g in t.groupby("metric")),
                     "verdict": alike(t)})
    if not why_tests.empty and "slope_p" in why_tests:
        res = "; ".join(f"{r.metric}: slope {r.slope_per_unit_dropout:+.4f} per unit p (p={r.slope_p:.3g}), |diff| between "
                        f"dropouts {r.mean_abs_diff_between_dropouts:.4f} vs between seeds {r.mean_abs_diff_between_seeds:.4f}"
                        for r in why_tests.itertuples())
        moved = why_tests[(why_tests["slope_p"] < alpha)
                          & (why_tests["mean_abs_diff_between_dropouts"] > why_tests["mean_abs_diff_between_seeds"])]
        v = (f"supported for {len(moved)}/{len(why_tests)} distances" if len(moved) else "not supported") + \
            " in continued MLM training (not pre-training)"
        rows.append({"W": "Why", "claim": "dropout changes redundancy (Bian et al.: pre-training dropout)",
                     "our result": res, "verdict": v})
    return pd.DataFrame(rows)
