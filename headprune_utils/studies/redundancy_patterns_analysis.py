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

from .. import claims, clustering, redundancy
from .base import Claim

__all__ = ["CLAIMS", "Matrices", "metric_agreement", "summary_stats", "where", "group_labels", "when", "who", "why", "verdicts",
           "scale_text", "mlm_trained", "CLAIM_RULES", "SAME_SHARE", "MLM_TRAINED"]

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


# ------------------------------------------------------------------------------------------------ claims

SAME_SHARE = 0.2  # "the same": r within 0.2 x (ceiling - chance) of the probe's split-half ceiling (chance: r = 0)
MLM_TRAINED = 0.5  # the MLM is trained when its final loss is at most this share of ln |V| (uniform guessing)
_SAME_TEXT = (f"non-inferiority of (r - ceiling) with margin {SAME_SHARE:g} x (ceiling - chance), chance r = 0: "
              f"'the same' = r at most {SAME_SHARE:g} x (ceiling - chance) below the ceiling")

CLAIMS: tuple[Claim, ...] = (
    Claim("bian.what_token", "ours (exploratory)",
          "Token-based distances between heads' attention maps agree with each other: the same heads are redundant.",
          quantity="per fine-tuned model (task x seed), on its task's inputs: mean Mantel r between its matrices of "
                   f"every two token-based distances, minus the ceiling min(split-half r of each); {_SAME_TEXT}",
          precondition="at least two token-based distances among the metrics; fine-tuned models of at least 2 "
                       "seeds per task (the unit; the pre-trained model alone is one unit)"),
    Claim("bian.what_sentence", "ours (exploratory)",
          "Sentence-based distances between heads' attention maps agree with each other.",
          quantity="as bian.what_token, for every two sentence-based distances",
          precondition="at least two sentence-based distances among the metrics; fine-tuned models of at least 2 "
                       "seeds per task"),
    Claim("bian.what_token_sentence", "ours (exploratory)",
          "Token-based and sentence-based distances agree.",
          quantity="as bian.what_token, for every pair of a token-based and a sentence-based distance",
          precondition="at least one distance of each kind among the metrics; fine-tuned models of at least 2 "
                       "seeds per task"),
    Claim("bian.where", "Bian et al. 2021 (Where)",
          "Heads form clusters of mutually redundant heads (more cluster structure than the same distances "
          "without structure).",
          quantity="per fine-tuned model (task x seed), its cluster_metric matrix on its task's inputs: silhouette "
                   "of the groups minus the mean of the same criterion on the matrix shuffled over head pairs; "
                   "superiority (> 0). The pre-trained model's clusters are described, not tested (one model)",
          precondition="fine-tuned models of at least 2 seeds per task; a randomly initialised model as a negative "
                       "control is MISSING (it needs new cells): structure that the architecture or the inputs "
                       "alone produce is not ruled out"),
    Claim("bian.when", "Bian et al. 2021 (When)",
          "The redundancy patterns are the same before and after fine-tuning (phase-independent).",
          quantity="per fine-tuned model (task x seed): Mantel r between the pre-trained and the fine-tuned model's "
                   f"matrix on the task's inputs, minus the probe's split-half ceiling; {_SAME_TEXT}",
          precondition="fine-tuned models of at least 2 seeds per task"),
    Claim("bian.who_tasks", "Bian et al. 2021 (Who)",
          "The redundancy patterns are the same across GLUE tasks (task-agnostic).",
          quantity="per pair of fine-tuned tasks and seed: Mantel r between the model fine-tuned on one task and the "
                   "model of the same seed fine-tuned on the other (each on its own task's inputs), minus the mean "
                   f"of their split-half ceilings; {_SAME_TEXT}. Pairs of tasks share models: never pooled",
          precondition="fine-tuned models of at least 2 tasks, with at least 2 seeds in common; a randomly "
                       "initialised model as a negative control is MISSING (it needs new cells)"),
    Claim("bian.who_random", "Bian et al. 2021 (Who)",
          "The redundancy patterns are the same on random token sequences as on task inputs.",
          quantity="Mantel r between the pre-trained model's matrices on a random-token probe and on a task probe, "
                   f"minus the task probe's split-half ceiling; {_SAME_TEXT}",
          precondition="random-token probes of at least 2 independently trained models (they run on the "
                       "pre-trained model only: one unit, so not testable here); a randomly initialised model as "
                       "a negative control is MISSING (it needs new cells)"),
    Claim("bian.why", "Bian et al. 2021 (Why; the direction is ours: the paper reports that dropout influences "
          "redundancy)",
          "More dropout makes heads more redundant (lower mean distance); the paper varies pre-training dropout, "
          "here continued masked-LM training.",
          quantity="per MLM run (seed): OLS slope of the mean distance on the dropout ratio; superiority (< 0) per "
                   "distance, Holm over the distances (and the rest of the study's family)",
          precondition="at least two dropout ratios and 2 MLM seeds; the MLM head is trained: every run's final "
                       "masked-LM loss is at most 0.5 x ln |V| (ln |V| = uniform guessing; a head that learned only "
                       "token frequencies stays near 0.7 x ln |V|)"),
)


# ---------------------------------------------------------------------------------------------- verdicts

NO_RANDOM_INIT = ("no randomly initialised model was run as a negative control (it needs new cells), so a pattern "
                  "that the architecture or the inputs alone produce cannot be ruled out")


def scale_text(cfg) -> str:
    """What the run is, from ``cfg``: model, heads, the fine-tuned models (examples x epochs, seeds), probes, the
    MLM runs; whether it is the paper's set-up (Bian et al.: bert-base-uncased, full GLUE, pre-training)."""
    n_layers, n_heads = cfg.head_shape()
    train = "full training sets" if cfg.train_size is None else f"{cfg.train_size} training examples"
    mlm_part = (f"; dropout: {cfg.mlm_steps} steps of continued MLM training x {len(cfg.mlm_seeds)} seed(s), "
                "not pre-training" if cfg.dropouts else "")
    text = (f"{cfg.model} ({n_layers} x {n_heads} = {n_layers * n_heads} heads); fine-tuned models: {train} x "
            f"{cfg.epochs} epochs, seeds {', '.join(str(s) for s in cfg.seeds)}; probes of {cfg.probe_size} sentences"
            + mlm_part)
    paper = cfg.model == "bert-base-uncased" and cfg.train_size is None
    return text + ("" if paper else "; a small-scale test, not the paper's set-up")


def _kind(metric: str) -> str:
    return "token" if metric in redundancy.TOKEN_METRICS else "sentence"


def _ft_models(mats: Matrices, cfg, tasks: list[str]) -> list[tuple[str, int, str, str]]:
    """``(task, seed, model, probe)`` of every fine-tuned model whose cell is in ``mats``."""
    have = set(mats.keys())
    return [(t, s, f"finetuned-{t}-s{s}", f"task-{t}") for t in tasks for s in cfg.seeds
            if (f"finetuned-{t}-s{s}", f"task-{t}") in have]


def _same(effect: str) -> str:
    return f"{effect} (Mantel r minus the split-half ceiling)"


def _what(mats, cfg, tasks, ka, kb, sem):
    """Per fine-tuned task, units = its models: mean over the metric pairs of kinds (ka, kb) of r(a, b) minus the
    ceiling min(split-half a, split-half b) of that model's probe; ``full`` = the mean ceiling, chance 0."""
    metrics = list(cfg.metrics)
    pairs = [(a, b) for i, a in enumerate(metrics) for b in metrics[i + 1:] if {_kind(a), _kind(b)} == {ka, kb}
             and (ka != kb or _kind(a) == ka)]
    if not pairs:
        return [], f"no pair of {ka}-based and {kb}-based distances among the metrics {metrics}"
    rows = []
    for task, seed, model, probe in _ft_models(mats, cfg, tasks):
        sh = {m: mats.split_half(model, probe, m) for m in {x for p in pairs for x in p}}
        r = [clustering.mantel(mats.get(model, probe, a), mats.get(model, probe, b), n_perm=0)[0] for a, b in pairs]
        c = [min(sh[a], sh[b]) for a, b in pairs]
        rows.append((task, seed, float(np.mean(r) - np.mean(c)), float(np.mean(c))))
    setting = ", ".join(f"{a}~{b}" for a, b in pairs)
    out = []
    for task in dict.fromkeys(r[0] for r in rows):
        g = [r for r in rows if r[0] == task]
        out.append(claims.Measurement(task, [r[2] for r in g], [(task, r[1]) for r in g], setting, sem,
                                      effect=_same("mean r between the distances"), full=[r[3] for r in g], chance=0.0))
    return out, "" if out else "no fine-tuned model's cells"


def _where(mats, cfg, tasks, sem):
    """Per fine-tuned task, units = its models: the silhouette of the groups (as :func:`where` chooses them) minus
    the mean of the same criterion on ``n_null`` shuffles of that model's ``cluster_metric`` matrix."""
    k_range, out = (cfg.k_min, cfg.k_max), []
    rows = []
    for task, seed, model, probe in _ft_models(mats, cfg, tasks):
        d = mats.get(model, probe, cfg.cluster_metric)
        sil = clustering.cluster_heads(d, k_range=k_range, order=False, min_size=cfg.min_cluster_size).silhouette
        null = clustering.silhouette_null(d, k_range, n_perm=cfg.n_null, min_size=cfg.min_cluster_size)
        if np.isfinite(sil) and np.isfinite(null).any():
            rows.append((task, seed, float(sil - np.nanmean(null))))
    for task in dict.fromkeys(r[0] for r in rows):
        g = [r for r in rows if r[0] == task]
        out.append(claims.Measurement(task, [r[2] for r in g], [(task, r[1]) for r in g], cfg.cluster_metric, sem,
                                      effect="silhouette minus the shuffled-distance null's mean"))
    return out, "" if out else "no fine-tuned model with two groups of heads (or no fine-tuned model's cells)"


def _when(when_t: pd.DataFrame, sem):
    out = []
    for (metric, task), g in when_t.groupby(["metric", "task"], sort=False):
        out.append(claims.Measurement(task, (g["mantel_r"] - g["split_half_r"]).tolist(),
                                      [(task, s) for s in g["seed"]], metric, sem,
                                      effect=_same("r(pre-trained, fine-tuned) on the task's inputs"),
                                      full=g["split_half_r"].tolist(), chance=0.0))
    return out, "" if out else "no fine-tuned model"


def _who_tasks(mats, cfg, tasks, sem):
    """One list of measurements per pair of fine-tuned tasks (evaluated apart: pairs share models, so they are never
    pooled): per seed s, r between the models (A, s) and (B, s), each on its own task's inputs, minus the mean of
    the two models' split-half ceilings."""
    models = _ft_models(mats, cfg, tasks)
    done = sorted({t for t, *_ in models}, key=tasks.index)
    if len(done) < 2:
        return [], f"fine-tuned models of {len(done)} task(s) ({', '.join(done) or 'none'}): task-agnostic compares " \
                   "fine-tuned models of different tasks"
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
                        r = clustering.mantel(mats.get(ma, pa, metric), mats.get(mb, pb, metric), n_perm=0)[0]
                        c = (mats.split_half(ma, pa, metric) + mats.split_half(mb, pb, metric)) / 2
                        vals.append(r - c), fulls.append(c), units.append(s)
                if vals:
                    ms.append(claims.Measurement(f"{a} vs {b}", vals, units, metric, sem,
                                                 effect=_same("r(model of one task, model of the other, same seed)"),
                                                 unit="seed (a model of each task)", full=fulls, chance=0.0))
            if ms:
                groups.append(ms)
    return groups, "" if groups else "no seed with a fine-tuned model of both tasks"


def _who_random(mats, cfg, sem):
    """The pre-trained model only (the random probes run on it alone): r(random probe, task probe) minus the
    task probe's split-half ceiling, every random x task probe; one unit (the pre-trained model)."""
    have = {p for m, p in mats.keys() if m == "pretrained"}
    rand = sorted(p for p in have if p.startswith("random-"))
    task = sorted(p for p in have if p.startswith("task-"))
    if not rand or not task:
        return [], f"needs a random-token probe and a task probe of the pre-trained model (random: {len(rand)}, " \
                   f"task: {len(task)})"
    out = []
    for metric in cfg.metrics:
        vals, fulls = [], []
        for r_ in rand:
            for t in task:
                r = clustering.mantel(mats.get("pretrained", r_, metric), mats.get("pretrained", t, metric), n_perm=0)[0]
                c = mats.split_half("pretrained", t, metric)
                vals.append(r - c), fulls.append(c)
        out.append(claims.Measurement("random tokens vs task inputs", vals, ["pretrained"] * len(vals), metric, sem,
                                      effect=_same("r(random-token probe, task probe)"), unit="model (pre-trained)",
                                      full=fulls, chance=0.0))
    return out, ""


def _why(why_runs: pd.DataFrame, sem):
    """Per distance, units = MLM seeds: the OLS slope of the mean distance on the dropout ratio within the seed."""
    if why_runs.empty or why_runs["dropout"].nunique() < 2:
        return [], "fewer than two dropout ratios were run"
    out = []
    for metric, g in why_runs.groupby("metric", sort=False):
        slopes, units = [], []
        for s, gs in g.groupby("seed"):
            if gs["dropout"].nunique() > 1:
                slopes.append(float(sps.linregress(gs["dropout"], gs["mean_distance"]).slope)), units.append(s)
        out.append(claims.Measurement("generic text", slopes, units, metric, sem,
                                      effect="slope of the mean distance on the dropout ratio", unit="MLM run (seed)"))
    return out, ""


def mlm_trained(mats: Matrices, cfg, vocab_size: int) -> str | None:
    """Gate of the dropout claim: every MLM run ends with a masked-LM loss at most ``MLM_TRAINED`` x ln |V|. ln |V|
    is the loss of guessing uniformly; a head that learned only how frequent tokens are stays near the unigram
    entropy of English word pieces (about 0.7 x ln |V| for a 30k vocabulary), a pre-trained BERT reaches about
    0.2 x ln |V|. ``None`` when it holds, else the failed precondition with the recorded losses."""
    names = [f"mlm-p{p:g}-s{s}" for p in cfg.dropouts for s in cfg.mlm_seeds]
    extra = mats.extra
    if "loss_last" not in extra.columns:
        return "the cells record no masked-LM loss: cannot tell whether the MLM head is trained"
    rows = [extra.loc[(n, "generic")] for n in names if (n, "generic") in extra.index]
    last = np.array([float(r["loss_last"]) for r in rows], dtype=float)
    if not len(last) or not np.isfinite(last).all():
        return "the cells record no masked-LM loss for every MLM run: cannot tell whether the MLM head is trained"
    uniform = float(np.log(vocab_size))
    if (last <= MLM_TRAINED * uniform).all():
        return None
    first = [float(r["head_loss_first"]) for r in rows if "head_loss_first" in r and np.isfinite(r["head_loss_first"])]
    start = f"; the untrained head started at {min(first):.3g}-{max(first):.3g}" if first else ""
    return (f"the MLM head is not trained: the masked-LM loss ends at {last.min():.3g}-{last.max():.3g} nats = "
            f"{last.min() / uniform:.2f}-{last.max() / uniform:.2f} x ln |V| (uniform guessing: {uniform:.3g}{start}), "
            f"above the stated {MLM_TRAINED:g} x ln |V|: no better than predicting token frequencies")


def _no_numbers(claim, study, scale, task, setting, sem, reason, label) -> dict:
    """A ``not testable`` row without numbers (nothing could be measured)."""
    nan = float("nan")
    return {"study": study, "claim_id": claim.id, "paper": claim.paper, "claim": claim.text, "task": task,
            "setting": setting, "semantics": sem, "effect": nan, "ci_low": nan, "ci_high": nan, "n_units": 0,
            "unit": claims.DEFAULT_UNIT, "test": label, "p": nan, "p_adjusted": nan, "margin": nan,
            "verdict": claims.VERDICTS[-1], "reason": reason, "scale": scale}


_SAME = claims.NonInferiority(claims.ShareOfHeadroom(SAME_SHARE))
CLAIM_RULES = {
    # claim id -> rule (how the measurements are built: the _what/_where/... functions above; gates in verdicts)
    "bian.what_token": _SAME,
    "bian.what_sentence": _SAME,
    "bian.what_token_sentence": _SAME,
    "bian.where": claims.Superiority("greater"),
    "bian.when": _SAME,
    "bian.who_tasks": _SAME,
    "bian.who_random": _SAME,
    "bian.why": claims.Superiority("less"),
}
_NEEDS_CONTROL = ("bian.where", "bian.who_tasks", "bian.who_random")


def verdicts(mats: Matrices, cfg, when_t: pd.DataFrame, why_runs: pd.DataFrame, tasks: list[str],
             vocab_size: int | None = None, claim_list=None, study: str = "redundancy_patterns") -> pd.DataFrame:
    """The study's verdict table (:data:`claims.COLUMNS`). Units: the fine-tuned models (task x seed) for
    what/where/when, seed-matched pairs of fine-tuned models of two tasks for who_tasks, the pre-trained model (one
    unit) for who_random, the MLM runs (seeds) for why. ``tasks``: the fine-tuned tasks; ``vocab_size``: the
    model's vocabulary (the MLM gate; default: read from ``cfg.model``'s config)."""
    claim_list = CLAIMS if claim_list is None else claim_list
    by_id = {c.id: c for c in claim_list}
    scale, sem = scale_text(cfg), cfg.ablation
    if vocab_size is None and cfg.dropouts:
        from .. import models
        vocab_size = int(models.load_config(cfg.model).vocab_size)
    built = {
        "bian.what_token": _what(mats, cfg, tasks, "token", "token", sem),
        "bian.what_sentence": _what(mats, cfg, tasks, "sentence", "sentence", sem),
        "bian.what_token_sentence": _what(mats, cfg, tasks, "token", "sentence", sem),
        "bian.where": _where(mats, cfg, tasks, sem),
        "bian.when": _when(when_t, sem),
        "bian.who_tasks": _who_tasks(mats, cfg, tasks, sem),
        "bian.who_random": _who_random(mats, cfg, sem),
        "bian.why": _why(why_runs, sem),
    }
    mlm_reason = mlm_trained(mats, cfg, vocab_size) if built["bian.why"][0] else None
    gates = {
        "bian.who_random": [lambda m: "the random-token probes run on the pre-trained model only: one model"],
        "bian.why": [lambda m: mlm_reason],
    }
    parts = []
    for cid, rule in CLAIM_RULES.items():
        claim = by_id[cid]
        ms, why_not = built[cid]
        if not ms:
            label = f"{rule.kind}; not run"
            parts.append(pd.DataFrame([_no_numbers(claim, study, scale, "n/a", "", sem, why_not, label)],
                                      columns=list(claims.COLUMNS)))
            continue
        groups = ms if cid == "bian.who_tasks" else [ms]
        for g in groups:
            parts.append(claims.evaluate(claim, rule, g, gates.get(cid, ()), scale=scale, study=study))
    table = claims.adjust(pd.concat(parts, ignore_index=True))
    control = table["claim_id"].isin(_NEEDS_CONTROL)
    table.loc[control, "reason"] = table.loc[control, "reason"] + "; caveat: " + NO_RANDOM_INIT
    claims.validate(table)
    return table
