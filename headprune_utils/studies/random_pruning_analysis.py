"""Study 1's analysis: pure functions over the tidy table of the ``random_pruning`` cells (one row per cell).

The score curves, the drops paired by seed, the largest prunable fraction and the difference between the two
regimes are the library's (:mod:`headprune_utils.pruning_curves`, shared with study 7; re-exported here); this
module adds the regimes' names, the verdicts and the findings text. ``cfg`` is the study's parameters
(``RandomPruningConfig``, defined with the protocol in :mod:`.random_pruning`); only ``tolerance`` and ``dev_size``
are read.
"""
from __future__ import annotations

import pandas as pd

from ..pruning_curves import (  # noqa: F401 (re-exported: the notebook and the tests read them from this study)
    paired_drop, prunable_fraction, regime_difference, summarise,
)

__all__ = ["REGIME_NAMES", "summarise", "paired_drop", "prunable_fraction", "regime_difference", "verdicts",
           "findings"]

REGIME_NAMES = {
    "mask_then_finetune": "mask, then fine-tune",
    "finetune_then_mask": "fine-tune, then mask (no retraining)",
}


def verdicts(drops: pd.DataFrame, gains: pd.DataFrame, cfg) -> pd.DataFrame:
    """The table "claim - our result - verdict", every number from this run."""
    rows = []
    prunable = prunable_fraction(drops, cfg.tolerance)
    a = prunable[prunable["regime"] == "mask_then_finetune"]
    if len(a):
        best = a["max_fraction_within_tolerance"]
        worst = drops[(drops["regime"] == "mask_then_finetune")].sort_values("fraction")
        at_half = worst[worst["fraction"] >= 0.5].groupby("task").first()
        result = "; ".join(
            f"{t}: largest fraction with mean drop <= {cfg.tolerance:g} is {100 * f:.0f}%"
            + (f", drop at {100 * at_half.loc[t, 'fraction']:.0f}% = {at_half.loc[t, 'mean_drop']:.3f} "
               f"[{at_half.loc[t, 'boot_ci_low']:.3f}, {at_half.loc[t, 'boot_ci_high']:.3f}]" if t in at_half.index else "")
            for t, f in zip(a["task"], best))
        verdict = ("supported" if (best >= 0.5).all() else "partly supported" if (best >= 0.5).any() else "not supported")
        rows.append({"claim": "Budhraja et al. claim 1: a large fraction (>= 50%) of heads can be pruned at random "
                              "with limited effect when fine-tuning follows the masking",
                     "our result": result, "verdict": f"{verdict} at this scale"})
    if len(gains):
        g = gains.sort_values(["task", "fraction"])
        result = "; ".join(f"{r.task} {100 * r.fraction:.0f}%: {r.mean_gain_of_retraining:+.3f} "
                           f"[{r.boot_ci_low:+.3f}, {r.boot_ci_high:+.3f}]" for r in g.itertuples())
        positive = (g["boot_ci_low"] > 0).sum()
        negative = (g["boot_ci_high"] < 0).sum()
        verdict = (f"retraining helps in {positive} of {len(g)} task x fraction settings (CI above 0), "
                   f"hurts in {negative}")
        rows.append({"claim": "Fine-tuning after masking recovers more than masking a fine-tuned model "
                              "(the premise of Budhraja et al.'s regime vs Michel et al.'s)",
                     "our result": result, "verdict": verdict})
    return pd.DataFrame(rows)


def findings(summary: pd.DataFrame, drops: pd.DataFrame, cfg) -> str:
    """The run's findings per task as Markdown, every number computed from the tables."""
    lines = []
    prunable = prunable_fraction(drops, cfg.tolerance)
    for task, g in summary.groupby("task"):
        metric = g["metric"].iloc[0]
        lines.append(f"**{task}** ({metric}; dev subset of {cfg.dev_size or 'all'} examples; {g['n_seeds'].max()} seeds; "
                     f"a constant predictor scores {g['chance'].iloc[0]:.3f}):")
        for regime, gr in g.groupby("regime"):
            full = gr[gr["fraction"] == 0]["mean"]
            parts = []
            for _, r in gr[gr["fraction"] > 0].sort_values("fraction").iterrows():
                d = drops[(drops["task"] == task) & (drops["regime"] == regime) & (drops["fraction"] == r["fraction"])]
                ci = f" (paired drop {d['mean_drop'].iloc[0]:+.3f}, bootstrap 95% CI [{d['boot_ci_low'].iloc[0]:+.3f}, {d['boot_ci_high'].iloc[0]:+.3f}])" if len(d) else ""
                parts.append(f"{100 * r['fraction']:.0f}% pruned ({r['n_heads_pruned']} heads): {r['mean']:.3f}{ci}")
            p = prunable[(prunable["task"] == task) & (prunable["regime"] == regime)]
            within = f"{100 * p['max_fraction_within_tolerance'].iloc[0]:.0f}%" if len(p) else "n/a"
            base = f"{full.iloc[0]:.3f}" if len(full) else "n/a"
            lines.append(f"- {REGIME_NAMES[regime]}: full model {base}; " + "; ".join(parts)
                         + f". Largest fraction tested with a mean drop <= {cfg.tolerance:g}: **{within}**.")
        lines.append("")
    return "\n".join(lines)
