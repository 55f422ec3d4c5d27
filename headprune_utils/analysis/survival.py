"""Which heads survive a sweep of pruning strengths, and whether a group of heads survives longer (pure functions).

A sweep gives one mask per strength, ordered from the weakest to the strongest (e.g. the L0 penalty ``lambda``
ascending), stacked as ``[K, n_layers, n_heads]`` (1 = kept). Masks of independent runs need not be nested, so
"survival" is defined per head as the LAST strength at which it is still kept:

    survival[l, h] = max { k in 1..K : masks[k - 1, l, h] = 1 },   0 when the head is kept at no strength.

Group comparison: the AUC (common-language effect size) of a group ``S`` against the other heads ``O``,

    AUC = P(x_S > x_O) + P(x_S = x_O) / 2 = (R_S - n_S (n_S + 1) / 2) / (n_S n_O)

with ``R_S`` the sum of the mid-ranks of ``S`` (the Mann-Whitney U statistic over ``n_S n_O``; 0.5 = no
difference). Over several independent sweeps (e.g. task x seed) :func:`stratified_auc_test` averages the
per-sweep AUCs and tests them by permuting the group labels WITHIN each sweep (the heads of one sweep share its
model and its strengths; the sweeps are not pooled into one ranking).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from scipy import stats

__all__ = ["survival_levels", "monotone_share", "auc", "stratified_auc_test"]

_TOL = 1e-12


def _stack(masks) -> torch.Tensor:
    m = torch.as_tensor(np.asarray(masks) if not isinstance(masks, torch.Tensor) else masks).to(torch.float32)
    if m.ndim != 3:
        raise ValueError(f"masks must be [K, n_layers, n_heads] (K strengths, weakest first), got shape {list(m.shape)}")
    if m.shape[0] == 0:
        raise ValueError("masks is empty (no strength)")
    if bool(((m != 0) & (m != 1)).any()):
        raise ValueError("masks must hold 0/1 values (1 = kept)")
    return m


def survival_levels(masks) -> torch.Tensor:
    """Long ``[n_layers, n_heads]``: the 1-based index of the strongest mask that keeps each head, 0 if none does.

    masks: ``[K, n_layers, n_heads]`` 0/1, ordered from the weakest to the strongest pruning.
    """
    m = _stack(masks)
    k = torch.arange(1, m.shape[0] + 1, dtype=torch.long).view(-1, 1, 1)
    return torch.where(m > 0, k, torch.zeros((), dtype=torch.long)).amax(dim=0)


def monotone_share(masks) -> float:
    """Share of heads whose kept pattern is nested (kept at strength ``k`` => kept at every weaker strength).

    1.0 when the masks form a chain (as a single pruning order would); lower when independent runs disagree.
    """
    m = _stack(masks)
    # nested <=> the pattern is non-increasing along k
    ok = (m[1:] <= m[:-1]).all(dim=0) if m.shape[0] > 1 else torch.ones(m.shape[1:], dtype=torch.bool)
    return float(ok.float().mean())


def auc(values, group) -> float:
    """AUC of the heads in ``group`` (bool) against the rest on ``values`` (ties count one half); NaN if a side is empty."""
    x = np.asarray(values, dtype=np.float64).ravel()
    g = np.asarray(group, dtype=bool).ravel()
    if x.shape != g.shape:
        raise ValueError(f"values and group differ in size: {x.shape} vs {g.shape}")
    if np.isnan(x).any():
        raise ValueError("values contain NaN")
    n1, n2 = int(g.sum()), int((~g).sum())
    if n1 == 0 or n2 == 0:
        return float("nan")
    r = stats.rankdata(x)
    return float((r[g].sum() - n1 * (n1 + 1) / 2) / (n1 * n2))


def stratified_auc_test(
    values: Sequence,
    groups: Sequence,
    n_perm: int = 10000,
    seed: int = 0,
    alternative: Literal["greater", "less", "two-sided"] = "greater",
) -> dict[str, float | int]:
    """Mean AUC over strata and its permutation p-value (labels permuted within each stratum).

    values, groups: one 1-D array per stratum (e.g. per task x seed: every head's survival level, and whether
    it is specialized). Strata where the group or the rest is empty are left out (``n_strata`` says how many
    count). Statistic ``T = mean_s AUC_s``; ``"greater"``: ``p = (1 + #{T* >= T}) / (1 + n_perm)`` (Phipson &
    Smyth; never 0), ``"less"`` mirrored, ``"two-sided"``: ``|T* - 0.5| >= |T - 0.5|``.
    Returns ``{"mean_auc", "p_value", "n_strata", "n_group", "n_other"}`` (NaN AUC and p without a stratum).
    """
    if len(values) != len(groups):
        raise ValueError("values and groups need one entry per stratum each")
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative must be 'greater', 'less' or 'two-sided', got {alternative!r}")
    rng = np.random.default_rng(seed)
    obs, perm_sum, n_strata, n_g, n_o = 0.0, np.zeros(n_perm), 0, 0, 0
    for v, g in zip(values, groups):
        x = np.asarray(v, dtype=np.float64).ravel()
        lab = np.asarray(g, dtype=bool).ravel()
        n1, n2 = int(lab.sum()), int((~lab).sum())
        if n1 == 0 or n2 == 0:
            continue
        r = stats.rankdata(x)
        obs += (r[lab].sum() - n1 * (n1 + 1) / 2) / (n1 * n2)
        perms = rng.permuted(np.tile(lab, (n_perm, 1)), axis=1)  # [n_perm, n]
        perm_sum += (perms @ r - n1 * (n1 + 1) / 2) / (n1 * n2)
        n_strata, n_g, n_o = n_strata + 1, n_g + n1, n_o + n2
    if n_strata == 0:
        return {"mean_auc": float("nan"), "p_value": float("nan"), "n_strata": 0, "n_group": 0, "n_other": 0}
    t_obs, t_star = obs / n_strata, perm_sum / n_strata
    tol = _TOL * max(1.0, abs(t_obs))
    if alternative == "greater":
        hits = t_star >= t_obs - tol
    elif alternative == "less":
        hits = t_star <= t_obs + tol
    else:
        hits = np.abs(t_star - 0.5) >= abs(t_obs - 0.5) - tol
    return {"mean_auc": float(t_obs), "p_value": float((1 + int(hits.sum())) / (1 + n_perm)),
            "n_strata": n_strata, "n_group": n_g, "n_other": n_o}
