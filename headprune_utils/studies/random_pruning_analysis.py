"""Study 1's analysis: pure functions over the tidy table of the ``random_pruning`` cells (one row per cell).

The score curves, the drops paired by seed, the largest prunable fraction and the difference between the two
regimes are the library's (:mod:`headprune_utils.pruning_curves`, shared with study 7; re-exported here); this
module adds the regimes' names, the claims' decision rules and verdicts (:mod:`headprune_utils.claims`) and the
findings text. ``cfg`` is the study's parameters (``RandomPruningConfig``, defined with the protocol in
:mod:`.random_pruning`); read here: ``tolerance``, ``model``, ``train_size``, ``dev_size``,
``epochs``, ``seeds``, ``ablations``, ``finetune_ablations``. Every table is per ablation semantics (the
cells' ``ablation``); the verdicts are decided under each (:mod:`headprune_utils.semantics`).

The claims (declared in :mod:`.random_pruning`) and how each is decided (:data:`RULES`):

- ``budhraja.random_prunable``: non-inferiority of score(pruned at f, then fine-tuned) - score(full model), per
  (task, seed) model, at every mask-then-fine-tune share f >= 50%; margin :data:`margins.TASK_SCORE`, 0.1 x
  (full - chance) of the task (:mod:`headprune_utils.margins`: one policy for every study). Gates: the full model
  is above chance by :data:`ABOVE_CHANCE` in every seed; fine-tuning adapts to the mask (at 50% pruned,
  mask-then-fine-tune beats fine-tune-then-mask on the task, 95% t-interval above 0).
- ``ours.retraining_recovers``: superiority of score(mask, then fine-tune) - score(fine-tune, then mask) at the
  same random mask, per (task, seed) model and share; smallest effect of interest the same margin
  (:data:`margins.TASK_SCORE`: an effect shown below it is ``not supported``). Gate: above chance. (It is the
  adapts-to-mask quantity itself, so it does not carry that gate.)
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from .. import claims, glue_workbench, margins, semantics
from .. import pruning_curves
from ..pruning_curves import prunable_fraction  # noqa: F401 (re-exported: the notebook and the tests read it from here)

__all__ = ["REGIME_NAMES", "per_model", "mask_spread", "summarise", "paired_drop", "prunable_fraction", "regime_difference", "ABOVE_CHANCE",
           "ADAPT_FRACTION", "RULES", "ClaimRule", "too_short_to_adapt", "adapt_diffs",
           "prunable_measurements", "retraining_measurements", "claim_verdicts", "findings"]

REGIME_NAMES = {
    "mask_then_finetune": "mask, then fine-tune",
    "finetune_then_mask": "fine-tune, then mask (no retraining)",
}
ABOVE_CHANCE = 0.05   # score units: a trained-model claim needs the full model this far above chance in every seed
ADAPT_FRACTION = 0.5  # the share pruned at which fine-tuning must be seen to adapt to the mask
UNIT = "model (task x seed)"


# ------------------------------------------------------------------------------------------------- units

_KEYS = ("task", "ablation", "regime", "fraction", "seed")


def per_model(table: pd.DataFrame) -> pd.DataFrame:
    """One row per fine-tuned model (task x seed) and setting: the mean over the model's random-mask draws
    (``draw``; several in the evaluation-only regime when ``mask_draws`` > 1). Draws of one model are not
    independent replicates, so every table and test below runs on these rows. With one draw per model, the
    table itself."""
    if "draw" not in table.columns or (table.groupby(list(_KEYS)).size() == 1).all():
        return table
    first = table.sort_values("draw").groupby(list(_KEYS), as_index=False).first()
    means = table.groupby(list(_KEYS), as_index=False)["score"].mean()
    out = first.drop(columns=["score"]).merge(means, on=list(_KEYS))
    out["draw"] = -1  # the mean over draws
    return out


def mask_spread(table: pd.DataFrame) -> pd.DataFrame:
    """How much the random mask matters next to the model: per task x ablation x regime x fraction, the SD of the
    score over a model's mask draws (averaged over models) and the SD over models of their draw means.
    Empty when no model has more than one draw."""
    if "draw" not in table.columns:
        return pd.DataFrame()
    g = table.groupby(list(_KEYS))["score"]
    within = g.std(ddof=1).rename("sd_over_masks").reset_index().dropna()
    if within.empty:
        return pd.DataFrame()
    keys = [k for k in _KEYS if k != "seed"]
    between = per_model(table).groupby(keys)["score"].std(ddof=1).rename("sd_over_models")
    draws = table.groupby(list(_KEYS)).size().groupby(keys).max().rename("draws_per_model")
    return (within.groupby(keys)["sd_over_masks"].mean().to_frame().join(between).join(draws).reset_index())


def summarise(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """``pruning_curves.summarise`` over the models (:func:`per_model`)."""
    return pruning_curves.summarise(per_model(table), confidence)


def paired_drop(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """``pruning_curves.paired_drop`` over the models (:func:`per_model`)."""
    return pruning_curves.paired_drop(per_model(table), confidence)


def regime_difference(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """``pruning_curves.regime_difference`` over the models (:func:`per_model`); only draw 0 exists in both regimes,
    so the difference is taken at the shared mask."""
    t = table[table["draw"] == 0] if "draw" in table.columns else table
    return pruning_curves.regime_difference(t, confidence)


# ---------------------------------------------------------------------------------------------- measurements

def _full(table: pd.DataFrame) -> pd.DataFrame:
    """``[task, seed, full, chance]``: the fine-tuned full model's score (fraction 0; both regimes share it)."""
    f = table[table["fraction"] == 0]
    return f.groupby(["task", "seed"], as_index=False).agg(full=("score", "first"), chance=("chance", "first"))


def _pairs(table: pd.DataFrame, a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """``[task, seed, diff, full, chance]``: ``score(a) - score(b)`` paired by (task, seed)."""
    m = a[["task", "seed", "score"]].merge(b[["task", "seed", "score"]], on=["task", "seed"], suffixes=("_a", "_b"))
    m["diff"] = m["score_a"] - m["score_b"]
    return m.merge(_full(table), on=["task", "seed"])[["task", "seed", "diff", "full", "chance"]]


def _setting(fraction: float, regime: str) -> str:
    return f"{100 * fraction:g}% of heads pruned at random; {REGIME_NAMES[regime]}"


def _measurements(pairs: pd.DataFrame, setting: str, semantics: str, effect: str) -> list[claims.Measurement]:
    out = []
    for task, g in pairs.groupby("task", sort=True):
        out.append(claims.Measurement(task, g["diff"].tolist(), [(task, int(s)) for s in g["seed"]], setting,
                                      semantics, effect, UNIT, full=g["full"].tolist(),
                                      chance=float(g["chance"].iloc[0])))
    return out


def _at(table: pd.DataFrame, regime: str, fraction: float) -> pd.DataFrame:
    return table[(table["regime"] == regime) & (table["fraction"] == fraction)]


def prunable_measurements(table: pd.DataFrame, semantics: str) -> list[claims.Measurement]:
    """Per task and mask-then-fine-tune share >= 50%: score(pruned, then fine-tuned) - score(full), per seed."""
    fractions = sorted(f for f in table.loc[table["regime"] == "mask_then_finetune", "fraction"].unique() if f >= 0.5)
    out = []
    full = _at(table, "mask_then_finetune", 0.0)
    for f in fractions:
        pairs = _pairs(table, _at(table, "mask_then_finetune", f), full)
        out += _measurements(pairs, _setting(f, "mask_then_finetune"), semantics,
                             "score(pruned, then fine-tuned) - score(full)")
    return out


def retraining_measurements(table: pd.DataFrame, semantics: str) -> list[claims.Measurement]:
    """Per task and share > 0 run in both regimes: score(mask, then fine-tune) - score(fine-tune, then mask)."""
    shares = [set(table.loc[table["regime"] == r, "fraction"]) for r in REGIME_NAMES]
    out = []
    for f in sorted(f for f in shares[0] & shares[1] if f > 0):
        pairs = _pairs(table, _at(table, "mask_then_finetune", f), _at(table, "finetune_then_mask", f))
        out += _measurements(pairs, f"{100 * f:g}% of heads pruned at random", semantics,
                             "score(mask, then fine-tune) - score(fine-tune, then mask)")
    return out


def adapt_diffs(table: pd.DataFrame) -> pd.DataFrame:
    """``[task, seed, diff]`` at :data:`ADAPT_FRACTION`: mask-then-fine-tune - fine-tune-then-mask (the same mask)."""
    pairs = _pairs(table, _at(table, "mask_then_finetune", ADAPT_FRACTION), _at(table, "finetune_then_mask", ADAPT_FRACTION))
    return pairs[["task", "seed", "diff"]]


# ------------------------------------------------------------------------------------------------- rules

@dataclass(frozen=True)
class ClaimRule:
    """How one claim is decided: its rule (from ``cfg``), its measurements (from the table and the ablation
    semantics) and the names of its gates (:func:`_gates`)."""

    rule: Callable[[object], claims.Rule]
    measurements: Callable[[pd.DataFrame, str], list[claims.Measurement]]
    gates: tuple[str, ...]


RULES: dict[str, ClaimRule] = {
    "budhraja.random_prunable": ClaimRule(
        lambda cfg: claims.NonInferiority(margins.TASK_SCORE),
        prunable_measurements, ("above_chance", "adapts_to_mask")),
    "ours.retraining_recovers": ClaimRule(
        lambda cfg: claims.Superiority("greater", margin=margins.TASK_SCORE),
        retraining_measurements, ("above_chance",)),
}


def _gates(names: Sequence[str], table: pd.DataFrame) -> list[claims.Gate]:
    made = {
        "above_chance": lambda: claims.above_chance(ABOVE_CHANCE),
        "adapts_to_mask": lambda: too_short_to_adapt(claims.adapts_to_mask(
            adapt_diffs(table), what=f"at {100 * ADAPT_FRACTION:g}% pruned, mask-then-fine-tune - fine-tune-then-mask")),
    }
    return [made[n]() for n in names]


def too_short_to_adapt(gate: claims.Gate) -> claims.Gate:
    """``gate`` (:func:`claims.adapts_to_mask`) with its failure named as the issue names it: "fine-tuning too
    short to adapt: <the numbers>" (a missing comparison keeps its own reason)."""

    def named(m: claims.Measurement) -> str | None:
        why = gate(m)
        return f"fine-tuning too short to adapt ({why})" if why and why.startswith("fine-tuning does not adapt") else why

    return named


def claim_verdicts(table: pd.DataFrame, cfg, declared: Sequence) -> pd.DataFrame:
    """The study's verdict table (:data:`claims.COLUMNS`): every declared claim (``declared``: the study's
    ``claims``) decided by its :data:`RULES` entry under every ablation semantics of the table (the cells'
    ``ablation``; :func:`semantics.verdicts_by_semantics`: primary = the claim's paper's, the others sensitivity),
    per task then pooled, Holm over the study's primary family and each sensitivity semantics apart. A claim with
    no measurement under its own semantics gets one ``not testable`` row saying so."""
    if {c.id for c in declared} != set(RULES):
        raise ValueError(f"claims without a rule or rules without a claim: {sorted({c.id for c in declared} ^ set(RULES))}")
    text = glue_workbench.scale_text(cfg, table)
    if "draw" in table.columns:  # both claims pair the regimes at the same mask: draw 0 (the only one fine-tuned)
        table = table[table["draw"] == 0]

    def decide(sub: pd.DataFrame, sem: str) -> pd.DataFrame:
        parts = []
        for claim in declared:
            spec = RULES[claim.id]
            ms = spec.measurements(sub, sem)
            if ms:
                parts.append(claims.evaluate(claim, spec.rule(cfg), ms, _gates(spec.gates, sub), text, "random_pruning"))
            else:
                parts.append(_no_measurement(claim, sem, text))
        return pd.concat(parts, ignore_index=True)

    order = semantics.order(declared[0].semantics, [*(c.semantics for c in declared), *cfg.finetune_ablations,
                                                    *cfg.ablations])
    return semantics.verdicts_by_semantics(table, declared, decide, order)


def _no_measurement(claim, sem: str, scale_text: str) -> pd.DataFrame:
    why = {"budhraja.random_prunable": "no mask-then-fine-tune cells with >= 50% of heads pruned in this run",
           "ours.retraining_recovers": "no share of heads pruned in both regimes in this run"}[claim.id]
    nan = float("nan")
    row = {"study": "random_pruning", "claim_id": claim.id, "paper": claim.paper, "claim": claim.text, "task": "all",
           "setting": "", "semantics": sem, "effect": nan, "ci_low": nan, "ci_high": nan, "n_units": 0,
           "analysis": "primary", "unit": UNIT, "test": "n/a", "p": nan, "p_adjusted": nan, "p_test": "",
           "margin": nan, "verdict": "not testable", "reason": f"{why} under the {sem} semantics", "scale": scale_text,
           "tests": "[]", "unit_values": "[]"}  # no test: outside the Holm family
    return pd.DataFrame([row], columns=list(claims.COLUMNS))


# ---------------------------------------------------------------------------------------------- findings

def findings(summary: pd.DataFrame, drops: pd.DataFrame, cfg) -> str:
    """The run's findings per task and ablation semantics as Markdown, every number computed from the tables."""
    lines = []
    prunable = prunable_fraction(drops, cfg.tolerance)
    for (task, ablation), g in summary.groupby(["task", "ablation"], sort=False):
        metric = g["metric"].iloc[0]
        lines.append(f"**{task}, {ablation} ablation** ({metric}; dev subset of {cfg.dev_size or 'all'} examples; "
                     f"{g['n_seeds'].max()} seeds; a constant predictor scores {g['chance'].iloc[0]:.3f}):")
        for regime, gr in g.groupby("regime"):
            full = gr[gr["fraction"] == 0]["mean"]
            parts = []
            at = (drops["task"] == task) & (drops["ablation"] == ablation) & (drops["regime"] == regime)
            for _, r in gr[gr["fraction"] > 0].sort_values("fraction").iterrows():
                d = drops[at & (drops["fraction"] == r["fraction"])]
                ci = ""
                if len(d) and pd.notna(d["ci_low"].iloc[0]):
                    ci = (f" (paired drop {d['mean_drop'].iloc[0]:+.3f}, 95% t-interval over seeds "
                          f"[{d['ci_low'].iloc[0]:+.3f}, {d['ci_high'].iloc[0]:+.3f}])")
                parts.append(f"{100 * r['fraction']:.0f}% pruned ({r['n_heads_pruned']} heads): {r['mean']:.3f}{ci}")
            p = prunable[(prunable["task"] == task) & (prunable["ablation"] == ablation) & (prunable["regime"] == regime)]
            within = f"{100 * p['max_fraction_within_tolerance'].iloc[0]:.0f}%" if len(p) else "n/a"
            base = f"{full.iloc[0]:.3f}" if len(full) else "n/a"
            lines.append(f"- {REGIME_NAMES[regime]}: full model {base}; " + "; ".join(parts)
                         + f". Largest fraction tested with a mean drop <= {cfg.tolerance:g}: **{within}**.")
        lines.append("")
    return "\n".join(lines)
