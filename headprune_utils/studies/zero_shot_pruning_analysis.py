"""Study 5's analysis: pure functions over the tidy table of the ``zero_shot_pruning`` cells (one row per cell).

The mean per method is the strategy sweep's (:mod:`headprune_utils.strategy_sweep`, shared with study 2;
re-exported here); the contrasts pair zero-shot pruning with the full model, random pruning and gradient
importance (:mod:`headprune_utils.paired_contrasts`); :func:`mask_overlap` compares the methods' masks. ``cfg`` is
the study's parameters (``ZeroShotPruningConfig``, defined with the protocol in :mod:`.zero_shot_pruning`); only
``equivalence_margin`` is read.
"""
from __future__ import annotations

import pandas as pd

from .. import masks, strategy_sweep
from ..paired_contrasts import Contrast, contrast_table, contrast_verdict
from ..strategy_sweep import REGIME_NAMES, summarise  # noqa: F401 (re-exported: the notebook reads them from this study)

__all__ = ["METHODS", "CONTRASTS", "REGIME_NAMES", "summarise", "example_masks", "paired", "contrasts", "verdicts",
           "mask_overlap"]

METHODS: tuple[str, ...] = ("zero_shot", "random", "least_important")


def example_masks(table: pd.DataFrame, seed: int | None = None) -> pd.DataFrame:
    """One mask per method x budget (seed ``seed``, default the smallest; first task) as rows for the picture."""
    return strategy_sweep.example_masks(table, seed, order=METHODS)


CONTRASTS: tuple[Contrast, ...] = (
    Contrast("zero-shot vs full model", "Bian et al.: most heads can be pruned zero-shot with comparable fine-tuned "
             "scores", "zero_shot", "none", "not_worse"),
    Contrast("zero-shot vs random", "Bian et al.: zero-shot pruning from redundancy clusters beats random pruning",
             "zero_shot", "random", "greater"),
    Contrast("zero-shot vs gradient importance", "Zero-shot pruning (no task data) is no worse than gradient-importance "
             "pruning (task data)", "zero_shot", "least_important", "not_worse"),
    Contrast("random vs full model", "Reference: random pruning keeps comparable fine-tuned scores",
             "random", "none", "not_worse"),
)


def paired(table: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """Rows (task, regime, budget, seed, diff = score_a - score_b); ``b="none"`` pairs with the full model."""
    t = table[table["strategy"] == a][["task", "regime", "budget", "seed", "score"]]
    if b == "none":
        ref = table[table["strategy"] == "none"][["task", "regime", "seed", "score"]]
        m = t.merge(ref, on=["task", "regime", "seed"], suffixes=("_a", "_b"))
    else:
        ref = table[table["strategy"] == b][["task", "regime", "budget", "seed", "score"]]
        m = t.merge(ref, on=["task", "regime", "budget", "seed"], suffixes=("_a", "_b"))
    m["diff"] = m["score_a"] - m["score_b"]
    return m[["task", "regime", "budget", "seed", "diff"]]


def contrasts(table: pd.DataFrame, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Every contrast per task x regime x budget (paired over seeds), per regime x budget pooled over tasks
    (``task="all"``), and per regime over everything (``task="all", budget="all"``)."""
    return contrast_table(CONTRASTS, lambda a, b: paired(table, a, b), confidence, n_boot, seed, pool_per_budget=True)


def verdicts(contr: pd.DataFrame, cfg, alpha: float = 0.05) -> pd.DataFrame:
    """"claim - setting - our result - verdict" per contrast, regime and budget (pooled over tasks)."""
    rows = []
    pooled = contr[(contr["task"] == "all") & (contr["budget"] != "all")]
    for c in CONTRASTS:
        for r in pooled[pooled["contrast"] == c.name].itertuples():
            per = contr[(contr["contrast"] == c.name) & (contr["regime"] == r.regime) & (contr["task"] != "all")
                        & (contr["budget"] == r.budget)]
            detail = "; ".join(f"{p.task}: {p.mean_diff:+.3f} [{p.boot_ci_low:+.3f}, {p.boot_ci_high:+.3f}]"
                               for p in per.itertuples())
            b = "full model" if c.b == "none" else c.b
            result = (f"{c.a} - {b} = {r.mean_diff:+.3f}, 95% CI [{r.boot_ci_low:+.3f}, {r.boot_ci_high:+.3f}], "
                      f"sign-flip p = {r.sign_flip_p:.3g} over {r.n_pairs} pairs (task x seed). Per task: {detail}")
            rows.append({"claim": c.claim, "regime": REGIME_NAMES[r.regime], "heads pruned": f"{100 * float(r.budget):.0f}%",
                         "our result": result,
                         "verdict": contrast_verdict(c.expect, r, cfg.equivalence_margin, alpha) + " at this scale"})
    return pd.DataFrame(rows)


def mask_overlap(table: pd.DataFrame) -> pd.DataFrame:
    """How much the methods' masks agree: per regime x budget x task x seed, the share of pruned heads that
    zero-shot shares with each other method (Jaccard index of the pruned sets), and how many layers each
    method's mask touches and empties."""
    rows = []
    t = table[table["strategy"] != "none"]
    for (task, regime, budget, seed), g in t.groupby(["task", "regime", "budget", "seed"]):
        pruned = {r.strategy: masks.mask_from_string(r.mask) < 1 for r in g.itertuples()}
        for m, p in pruned.items():
            row = {"task": task, "regime": regime, "budget": budget, "seed": seed, "method": m,
                   "layers_touched": int(p.any(dim=1).sum()), "layers_emptied": int(p.all(dim=1).sum())}
            if "zero_shot" in pruned and m != "zero_shot":
                z = pruned["zero_shot"]
                row["jaccard_with_zero_shot"] = float((z & p).sum() / max(1, int((z | p).sum())))
            rows.append(row)
    return pd.DataFrame(rows)
