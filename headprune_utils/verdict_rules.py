"""Decision rules shared by the verdict tables of studies 6 and 7 (pure functions: numbers in, verdict words out).

Each rule returns the verdict word (with its reason in parentheses where the word alone would mislead); the
callers add the scale qualifier and the result text. Thresholds and wordings of the counted units are arguments.
"""
from __future__ import annotations

import pandas as pd

from .role_survival import ROLE_NAMES, VOITA_FRACTION

__all__ = ["greater_verdict", "most_prunable_verdict", "budget_presence"]


def greater_verdict(mean: float, p: float, alpha: float) -> str:
    """The verdict on a claim "a > b" from the mean difference ``a - b`` and its p-value."""
    if mean > 0 and p < alpha:
        return "supported"
    if mean < 0 and p < alpha:
        return "contradicted (the opposite is significant)"
    return "not supported (no significant difference)"


def most_prunable_verdict(kept_within_margin: list[float], total: int) -> str:
    """"Most heads can be pruned with little loss": supported when some mask within the margin keeps at most
    half of the ``total`` heads; otherwise not, saying how many were pruned at most within the margin."""
    if not kept_within_margin:
        return "not supported (no mask within the margin)"
    fewest = min(kept_within_margin)
    if fewest <= 0.5 * total:
        return "supported"
    return f"not supported (at most {total - fewest:.0f} of {total} pruned within the margin)"


def budget_presence(budget: pd.DataFrame, heads: str = "the heads", kept: str = " heads",
                    per: str = " models") -> tuple[str, str]:
    """Result text and verdict of "with 17 of 48 heads kept, every identified head function is still present"
    from ``role_survival.roles_at_budget`` rows (the wording of the counted units is the caller's)."""
    parts, all_ok, any_role = [], True, False
    for role in ROLE_NAMES:
        p = budget[f"present_{role}"].dropna()
        if len(p):
            any_role = True
            all_ok &= bool(p.all())
            parts.append(f"{role}: kept in {int(p.sum())} of {len(p)}{per}")
    res = (f"L0 masks nearest {100 * VOITA_FRACTION:.0f}% of {heads} keep {budget['n_kept'].mean():.1f}{kept} on "
           f"average (target {budget['target'].iloc[0]:.1f}); " + ("; ".join(parts) or "no roles found"))
    return res, "not testable (no roles found)" if not any_role else "supported" if all_ok else "partly supported"
