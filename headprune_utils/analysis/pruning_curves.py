"""Score against share of heads pruned, over independently trained models: means with t-intervals, drops
paired by seed, the largest share prunable within a tolerance, and the difference between two regimes.

Pure functions over a tidy table with columns task, regime, fraction, seed, score (and metric, chance,
n_heads_pruned; and ``ablation``, the semantics, when the study ran several: every result is then per semantics).
Studies 1 (GLUE) and 7 (translation: ``task`` = attention type) use them. Intervals are t-intervals over the
seeds (independently trained models; valid at small n), never a percentile bootstrap over three values.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from headprune_utils.analysis import stats

REGIMES: tuple[str, ...] = ("mask_then_finetune", "finetune_then_mask")


def _by(table: pd.DataFrame, *keys: str) -> list[str]:
    """``keys`` with ``ablation`` after ``task`` when the table has that column."""
    keys = list(keys)
    return keys[:1] + ["ablation"] + keys[1:] if "ablation" in table.columns else keys


def summarise(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Mean score per task x regime x fraction, with a t-interval over seeds and the drop from fraction 0."""
    rows = []
    keys = _by(table, "task", "regime", "fraction")
    for k, g in table.groupby(keys):
        mean, lo, hi = stats.t_interval(g["score"].to_numpy(dtype=float), confidence)
        rows.append({**dict(zip(keys, k)), "metric": g["metric"].iloc[0],
                     "n_seeds": len(g), "mean": mean, "ci_low": lo, "ci_high": hi,
                     "n_heads_pruned": int(g["n_heads_pruned"].iloc[0]), "chance": float(g["chance"].iloc[0])})
    out = pd.DataFrame(rows)
    group = keys[:-1]
    base = out[out["fraction"] == 0].set_index(group)["mean"]
    out["drop_from_full"] = [base.get(tuple(r[c] for c in group), np.nan) - r["mean"] for _, r in out.iterrows()]
    return out.sort_values(keys).reset_index(drop=True)


def paired_drop(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per task x regime x fraction: the drop from the full model paired by seed, with a t-interval over the
    seeds (NaN bounds from one seed)."""
    rows = []
    keys = _by(table, "task", "regime")
    for k, g in table.groupby(keys):
        full = g[g["fraction"] == 0].set_index("seed")["score"]
        for fraction, gf in g[g["fraction"] > 0].groupby("fraction"):
            d = (full - gf.set_index("seed")["score"]).dropna().to_numpy(dtype=float)
            if len(d) == 0:
                continue
            mean, lo, hi = stats.t_interval(d, confidence)
            rows.append({**dict(zip(keys, k)), "fraction": fraction, "n_seeds": len(d),
                         "mean_drop": float(d.mean()), "ci_low": float(lo), "ci_high": float(hi)})
    return pd.DataFrame(rows)


def prunable_fraction(drops: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """Per task x regime: the largest fraction whose mean drop (and every smaller one's) is <= tolerance."""
    rows = []
    keys = _by(drops, "task", "regime")
    for k, g in drops.groupby(keys):
        best = 0.0
        for _, r in g.sort_values("fraction").iterrows():
            if r["mean_drop"] <= tolerance:
                best = float(r["fraction"])
            else:
                break
        rows.append({**dict(zip(keys, k)), "max_fraction_within_tolerance": best, "tolerance": tolerance})
    return pd.DataFrame(rows)


def regime_difference(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per task x fraction > 0: score(mask, then fine-tune) - score(fine-tune, then mask), paired by seed, with a
    t-interval over the seeds."""
    rows = []
    keys = _by(table, "task", "fraction")
    for k, g in table[table["fraction"] > 0].groupby(keys):
        p = g.pivot(index="seed", columns="regime", values="score")
        if not set(REGIMES) <= set(p.columns):
            continue
        d = (p["mask_then_finetune"] - p["finetune_then_mask"]).dropna().to_numpy(dtype=float)
        if len(d) == 0:
            continue
        mean, lo, hi = stats.t_interval(d, confidence)
        rows.append({**dict(zip(keys, k)), "n_seeds": len(d), "mean_gain_of_retraining": float(d.mean()),
                     "ci_low": float(lo), "ci_high": float(hi)})
    return pd.DataFrame(rows)
