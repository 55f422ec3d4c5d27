"""Study 2's analysis: pure functions over the tidy table of the ``layer_strategies`` cells (one row per cell).

The mean per strategy and the example masks are the strategy sweep's (:mod:`headprune_utils.strategy_sweep`,
shared with study 5; re-exported here); the contrasts are the location contrasts of
:mod:`headprune_utils.paired_contrasts`; this module pairs them by strategy and reads them as verdicts. ``cfg`` is
the study's parameters (``LayerStrategiesConfig``, defined with the protocol in :mod:`.layer_strategies`); only
``equivalence_margin`` is read.
"""
from __future__ import annotations

import pandas as pd

from ..paired_contrasts import LOCATION_CONTRASTS, Contrast, contrast_table, contrast_verdict, paired_by_strategy
from ..strategy_sweep import (  # noqa: F401 (re-exported: the notebook and the tests read them from this study)
    REGIME_NAMES, example_masks, summarise,
)

__all__ = ["CONTRASTS", "Contrast", "REGIME_NAMES", "summarise", "example_masks", "contrasts", "verdicts"]

CONTRASTS: tuple[Contrast, ...] = LOCATION_CONTRASTS


def contrasts(table: pd.DataFrame, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Every contrast per task x regime x budget (paired over seeds), and pooled per regime ("all" tasks
    and budgets: paired over task x budget x seed). Mean difference, percentile-bootstrap CI, paired t-test
    p and sign-flip permutation p."""
    return contrast_table(CONTRASTS, lambda a, b: paired_by_strategy(table, a, b), confidence, n_boot, seed)


def verdicts(contr: pd.DataFrame, cfg, alpha: float = 0.05) -> pd.DataFrame:
    """The table "claim - our result - verdict" per regime, from the pooled contrasts; every number from this run."""
    rows = []
    pooled = contr[contr["task"] == "all"]
    for c in CONTRASTS:
        for _, r in pooled[pooled["contrast"] == c.name].iterrows():
            per = contr[(contr["contrast"] == c.name) & (contr["regime"] == r.regime) & (contr["task"] != "all")]
            detail = "; ".join(f"{p.task} {100 * p.budget:.0f}%: {p.mean_diff:+.3f} [{p.boot_ci_low:+.3f}, {p.boot_ci_high:+.3f}]"
                               for p in per.itertuples())
            result = (f"{c.a} - {c.b} = {r.mean_diff:+.3f}, 95% CI [{r.boot_ci_low:+.3f}, {r.boot_ci_high:+.3f}], "
                      f"sign-flip p = {r.sign_flip_p:.3g} over {r.n_pairs} pairs (task x budget x seed). Per setting: {detail}")
            rows.append({"claim": c.claim, "regime": REGIME_NAMES[r.regime], "our result": result,
                         "verdict": contrast_verdict(c.expect, r, cfg.equivalence_margin, alpha) + " at this scale"})
    return pd.DataFrame(rows)
