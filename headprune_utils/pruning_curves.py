"""Score against share of heads pruned, over independently trained models: means with t-intervals, drops
paired by seed, the largest share prunable within a tolerance, and the difference between two regimes.

Pure functions over a tidy table with columns task, regime, fraction, seed, score (and metric, chance,
n_heads_pruned). Studies 1 (GLUE) and 7 (translation: ``task`` = attention type) use them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import stats

REGIMES: tuple[str, ...] = ("mask_then_finetune", "finetune_then_mask")


def summarise(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Mean score per task x regime x fraction, with a t-interval over seeds and the drop from fraction 0."""
    rows = []
    for (task, regime, fraction), g in table.groupby(["task", "regime", "fraction"]):
        mean, lo, hi = stats.t_interval(g["score"].to_numpy(dtype=float), confidence)
        rows.append({"task": task, "regime": regime, "fraction": fraction, "metric": g["metric"].iloc[0],
                     "n_seeds": len(g), "mean": mean, "ci_low": lo, "ci_high": hi,
                     "n_heads_pruned": int(g["n_heads_pruned"].iloc[0]), "chance": float(g["chance"].iloc[0])})
    out = pd.DataFrame(rows)
    base = out[out["fraction"] == 0].set_index(["task", "regime"])["mean"]
    out["drop_from_full"] = [base.get((t, r), np.nan) - m for t, r, m in zip(out["task"], out["regime"], out["mean"])]
    return out.sort_values(["task", "regime", "fraction"]).reset_index(drop=True)


def paired_drop(table: pd.DataFrame, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per task x regime x fraction: the drop from the full model paired by seed, with a bootstrap CI."""
    rows = []
    for (task, regime), g in table.groupby(["task", "regime"]):
        full = g[g["fraction"] == 0].set_index("seed")["score"]
        for fraction, gf in g[g["fraction"] > 0].groupby("fraction"):
            d = (full - gf.set_index("seed")["score"]).dropna().to_numpy(dtype=float)
            if len(d) == 0:
                continue
            lo, hi = stats.bootstrap_ci(d, confidence, n_boot, seed)
            rows.append({"task": task, "regime": regime, "fraction": fraction, "n_seeds": len(d),
                         "mean_drop": float(d.mean()), "boot_ci_low": float(lo), "boot_ci_high": float(hi)})
    return pd.DataFrame(rows)


def prunable_fraction(drops: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """Per task x regime: the largest fraction whose mean drop (and every smaller one's) is <= tolerance."""
    rows = []
    for (task, regime), g in drops.groupby(["task", "regime"]):
        best = 0.0
        for _, r in g.sort_values("fraction").iterrows():
            if r["mean_drop"] <= tolerance:
                best = float(r["fraction"])
            else:
                break
        rows.append({"task": task, "regime": regime, "max_fraction_within_tolerance": best, "tolerance": tolerance})
    return pd.DataFrame(rows)


def regime_difference(table: pd.DataFrame, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per task x fraction > 0: score(mask, then fine-tune) - score(fine-tune, then mask), paired by seed."""
    rows = []
    for (task, fraction), g in table[table["fraction"] > 0].groupby(["task", "fraction"]):
        p = g.pivot(index="seed", columns="regime", values="score")
        if not set(REGIMES) <= set(p.columns):
            continue
        d = (p["mask_then_finetune"] - p["finetune_then_mask"]).dropna().to_numpy(dtype=float)
        lo, hi = stats.bootstrap_ci(d, confidence, n_boot, seed)
        rows.append({"task": task, "fraction": fraction, "n_seeds": len(d), "mean_gain_of_retraining": float(d.mean()),
                     "boot_ci_low": float(lo), "boot_ci_high": float(hi)})
    return pd.DataFrame(rows)
