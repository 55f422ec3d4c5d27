"""Study 3's analysis: pure functions over the tidy table of the ``compensation`` cells (one row per cell).

Each kept head's change in a pruned run is compared with the same head's change in an unpruned run of ANOTHER
seed, and, as the noise baseline, the unpruned run of this seed with that same other run (so both sides carry
seed-to-seed noise): the EXTRA change of head h is ``x_h = log(c_pruned(h) / c_other(h))`` (a difference of
per-layer-normalised scores for importance), the noise ``x'_h = log(c_full(h) / c_other(h))`` (:func:`per_head`).

- Equal spread: Gini coefficient of the ratios ``c_pruned / c_other`` (importance: standard deviation of the
  differences) against the noise baseline's, with a permutation baseline that swaps, head by head, the pruned
  and the unpruned run; combined over runs (Fisher's method; bootstrap CI of the mean excess)
  (:func:`spread_tests`, :func:`pooled`).
- Locality: Spearman correlation of ``x_h`` with the number of pruned heads in the head's own layer and in
  the adjacent layers, with a permutation null (``x`` shuffled over the kept heads).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from .. import masks, stats

__all__ = ["MEASURES", "MEASURE_NAMES", "per_head", "spread_tests", "pooled", "verdicts", "heatmap_data"]

MEASURES: tuple[str, ...] = ("weight_change", "importance", "attention_change")


def _grid(value) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in row] for row in value], dtype=float)


def _normalise_rows(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Per-layer L2 normalisation over the heads in ``keep`` (Michel et al.); others NaN."""
    y = np.where(keep, x, np.nan)
    norm = np.sqrt(np.nansum(y ** 2, axis=1, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, y / norm, np.nan)


def per_head(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, seed, strategy, budget, measure, kept head): the head's change in the pruned run
    (``pruned``), in the unpruned run of the same seed (``full``) and of the next seed (``other``), the
    extra change ``x = log(pruned / other)`` and the noise ``x_noise = log(full / other)`` (importance:
    differences of per-layer-normalised scores), and where the pruned heads are."""
    seeds = sorted(table["seed"].unique())
    nxt = {s: seeds[(i + 1) % len(seeds)] for i, s in enumerate(seeds)}
    full = {(r.task, r.seed): r for r in table[table["strategy"] == "none"].itertuples()}
    rows = []
    for r in table[table["strategy"] != "none"].itertuples():
        f, o = full.get((r.task, r.seed)), full.get((r.task, nxt[r.seed]))
        if f is None or o is None or nxt[r.seed] == r.seed:
            continue
        m = masks.mask_from_string(r.mask).numpy().astype(bool)
        n_layers, n_heads = m.shape
        pruned_in_layer = (~m).sum(axis=1)
        adjacent = np.array([pruned_in_layer[max(0, l - 1)] * (l > 0) + (pruned_in_layer[l + 1] if l + 1 < n_layers else 0)
                             for l in range(n_layers)])
        for measure in MEASURES:
            p, fu, ot = _grid(getattr(r, measure)), _grid(getattr(f, measure)), _grid(getattr(o, measure))
            if measure == "importance":
                p, fu, ot = (_normalise_rows(a, m) for a in (p, fu, ot))
                x, x0 = p - ot, fu - ot
            else:
                with np.errstate(invalid="ignore", divide="ignore"):
                    x, x0 = np.log(p / ot), np.log(fu / ot)
            for l in range(n_layers):
                for h in range(n_heads):
                    if m[l, h] and np.isfinite(x[l, h]) and np.isfinite(x0[l, h]):
                        rows.append({"task": r.task, "seed": r.seed, "strategy": r.strategy, "budget": r.budget,
                                     "measure": measure, "layer": l, "head": h, "pruned": p[l, h], "full": fu[l, h],
                                     "other": ot[l, h], "x": x[l, h], "x_noise": x0[l, h],
                                     "pruned_in_layer": int(pruned_in_layer[l]), "pruned_adjacent": int(adjacent[l])})
    return pd.DataFrame(rows)


def _dispersion(measure: str, x: np.ndarray) -> float:
    """How unequal the extra changes ``x`` of one run's kept heads are: the Gini coefficient of the ratios
    ``exp(x)`` (positive measures; scale-free) or the standard deviation of ``x`` (importance differences)."""
    return float(np.std(x)) if measure == "importance" else stats.gini(np.exp(x))


def spread_tests(heads: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per pruned run and measure:

    - ``dispersion`` of the kept heads' extra change ``x`` and ``dispersion_noise`` of the same heads' noise
      ``x_noise``; ``excess_p``: one-sided permutation p of ``dispersion - dispersion_noise``, swapping the
      pruned and the unpruned run head by head (``n_boot`` swaps; exchangeable when pruning changes nothing
      about how the change is spread). Exact and calibrated, but weak against a change concentrated on ONE
      head (a swap moves it to the other side): the pooled CI of the excess covers that case.
    - ``rho_*``: Spearman correlation of ``x`` with the number of pruned heads in the head's own layer and
      in the adjacent layers; ``p_*``: two-sided permutation p (``x`` shuffled over the kept heads).
    """
    rng = np.random.default_rng(seed)
    rows = []
    for (task, s, strategy, budget, measure), g in heads.groupby(["task", "seed", "strategy", "budget", "measure"]):
        x, x0 = g["x"].to_numpy(dtype=float), g["x_noise"].to_numpy(dtype=float)
        d_obs, d_noise = _dispersion(measure, x), _dispersion(measure, x0)
        excess = d_obs - d_noise
        swaps = rng.random((n_boot, len(x))) < 0.5
        null = np.array([_dispersion(measure, np.where(w, x0, x)) - _dispersion(measure, np.where(w, x, x0)) for w in swaps])
        row = {"task": task, "seed": s, "strategy": strategy, "budget": budget, "measure": measure, "n_heads": len(g),
               "dispersion_kind": "sd of differences" if measure == "importance" else "Gini of ratios",
               "dispersion": d_obs, "dispersion_noise": d_noise, "excess_dispersion": excess,
               "excess_p": float((1 + np.sum(null >= excess - 1e-12)) / (1 + n_boot))}
        for feat in ("pruned_in_layer", "pruned_adjacent"):
            z = g[feat].to_numpy(dtype=float)
            if np.ptp(z) == 0 or np.ptp(x) == 0:
                row[f"rho_{feat}"], row[f"p_{feat}"] = np.nan, np.nan
                continue
            rho = float(sps.spearmanr(x, z).statistic)
            perm = np.array([sps.spearmanr(rng.permutation(x), z).statistic for _ in range(min(n_boot, 1000))])
            row[f"rho_{feat}"] = rho
            row[f"p_{feat}"] = float((1 + np.sum(np.abs(perm) >= abs(rho) - 1e-12)) / (len(perm) + 1))
        rows.append(row)
    return pd.DataFrame(rows)


def pooled(tests: pd.DataFrame, confidence: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Per strategy x budget x measure, over tasks and seeds (the runs are the units): mean excess dispersion
    and mean correlations with a bootstrap CI and a sign-flip p; the runs' ``excess_p`` combined by Fisher's
    method (``excess_fisher_p``: small when the runs are, together, more unequal than noise)."""
    rows = []
    for (strategy, budget, measure), g in tests.groupby(["strategy", "budget", "measure"]):
        row = {"strategy": strategy, "budget": budget, "measure": measure, "n_runs": len(g),
               "dispersion_kind": g["dispersion_kind"].iloc[0], "mean_dispersion": float(g["dispersion"].mean()),
               "mean_dispersion_noise": float(g["dispersion_noise"].mean()),
               "excess_fisher_p": float(sps.combine_pvalues(g["excess_p"].to_numpy(dtype=float), method="fisher").pvalue)}
        for col in ("excess_dispersion", "rho_pruned_in_layer", "rho_pruned_adjacent"):
            v = g[col].dropna().to_numpy(dtype=float)
            lo, hi = stats.bootstrap_ci(v, confidence, seed=seed) if len(v) > 1 else (np.nan, np.nan)
            row.update({col: float(v.mean()) if len(v) else np.nan, f"{col}_ci_low": lo, f"{col}_ci_high": hi,
                        f"{col}_p": stats.sign_flip_test(v, seed=seed) if len(v) else np.nan})
        rows.append(row)
    return pd.DataFrame(rows)


MEASURE_NAMES = {"weight_change": "weight change", "importance": "gradient importance",
                 "attention_change": "attention-pattern change (JS)"}


def verdicts(pool: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """"claim - our result - verdict" rows: equal spread, and locality, per strategy x budget x measure."""
    rows = []
    for r in pool.itertuples():
        setting = f"{r.strategy} {100 * r.budget:.0f}%, {MEASURE_NAMES[r.measure]}"
        res = (f"{r.dispersion_kind}: pruned runs {r.mean_dispersion:.3f} vs noise {r.mean_dispersion_noise:.3f}; "
               f"excess {r.excess_dispersion:+.3f} [{r.excess_dispersion_ci_low:+.3f}, {r.excess_dispersion_ci_high:+.3f}]; "
               f"more unequal than noise: Fisher-combined p = {r.excess_fisher_p:.3g} over {r.n_runs} runs")
        if r.excess_fisher_p < alpha or r.excess_dispersion_ci_low > 0:
            v = "not supported: the extra change is more concentrated than seed-to-seed noise"
        else:
            v = "supported: no more concentrated than seed-to-seed noise"
        rows.append({"claim": "Budhraja et al. claim 4: the compensation is spread roughly equally over the kept heads",
                     "setting": setting, "our result": res, "verdict": v + " at this scale"})
        loc = []
        sig = False
        for feat, name in (("pruned_in_layer", "same layer"), ("pruned_adjacent", "adjacent layers")):
            m, lo, hi, p = (getattr(r, f"rho_{feat}{s}") for s in ("", "_ci_low", "_ci_high", "_p"))
            if np.isnan(m):
                loc.append(f"{name}: not testable (the count does not vary over kept heads)")
                continue
            loc.append(f"{name}: mean Spearman rho {m:+.3f} [{lo:+.3f}, {hi:+.3f}], sign-flip p = {p:.3g}")
            sig = sig or (m > 0 and p < alpha)
        rows.append({"claim": "Heads near the pruned ones (same layer, adjacent layers) compensate more",
                     "setting": setting, "our result": "; ".join(loc),
                     "verdict": ("supported" if sig else "not supported (no significant positive correlation)")
                     + " at this scale"})
    return pd.DataFrame(rows)


def heatmap_data(heads: pd.DataFrame) -> pd.DataFrame:
    """Mean extra change per (strategy, budget, measure, layer, head) over tasks and seeds."""
    keys = ["strategy", "budget", "measure", "layer", "head"]
    return heads.groupby(keys, as_index=False).agg(x=("x", "mean"), x_noise=("x_noise", "mean"), n=("x", "size"))
