"""Study 1's analysis: pure functions over the tidy table of the ``random_pruning`` cells (one row per cell).

The score curves, the drops paired by seed, the largest prunable fraction and the difference between the two
regimes are the library's (:mod:`headprune_utils.analysis.pruning_curves`, shared with study 7; re-exported here); this
module adds the regimes' names, the claims' measurements and verdicts (:mod:`headprune_utils.analysis.claims`) and the
findings text. ``cfg`` is the study's parameters (``RandomPruningConfig``, defined with the protocol in
:mod:`.random_pruning`); read here: ``tolerance``, ``model``, ``train_size``, ``dev_size``,
``epochs``, ``seeds``, ``ablations``, ``finetune_ablations``. Every table is per ablation semantics (the
cells' ``ablation``); the verdicts are decided under each (:mod:`headprune_utils.studies.semantics`).

The claims are declared as data in :mod:`.random_pruning_claims` (rule, margin, gates, figure) and passed to
:func:`claim_verdicts`; each claim's ``measure`` names its measurements here (:data:`MEASURES`):

- ``"prunable"`` (``budhraja.random_prunable``): score(pruned at f, then fine-tuned) - score(full model), per
  (task, seed) model, at every mask-then-fine-tune share f >= 50%;
- ``"retraining"`` (``ours.retraining_recovers``): score(mask, then fine-tune) - score(fine-tune, then mask) at
  the same random mask, per (task, seed) model and share.

A measure with nothing to measure in the run gives one absent measurement (:meth:`claims.Measurement.absent`:
``not testable`` with the reason). The convergence gate reads :func:`convergence_evidence` (evidence ``convergence``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from headprune_utils.analysis import claims
from headprune_utils.studies import convergence, glue_workbench, semantics
from headprune_utils.analysis import pruning_curves
from headprune_utils.analysis.pruning_curves import ( # noqa: F401 (re-exported: the notebook and the tests read it from here)
    prunable_fraction,
)

__all__ = ["REGIME_NAMES", "per_model", "mask_spread", "summarise", "paired_drop", "prunable_fraction", "regime_difference",
           "MEASURES", "prunable_measurements", "retraining_measurements",
           "convergence_evidence", "held_out_curves", "claim_verdicts", "findings"]

REGIME_NAMES = {
    "mask_then_finetune": "mask, then fine-tune",
    "finetune_then_mask": "fine-tune, then mask (no retraining)",
}
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


def _both_regimes_setting(fraction: float) -> str:
    return f"{100 * fraction:g}% of heads pruned at random"


def _measurements(pairs: pd.DataFrame, setting: str, semantics: str, effect: str,
                  regime: str = "") -> list[claims.Measurement]:
    out = []
    for task, g in pairs.groupby("task", sort=True):
        out.append(claims.Measurement(task, g["diff"].tolist(), [(task, int(s)) for s in g["seed"]], setting,
                                      semantics, effect, UNIT, full=g["full"].tolist(),
                                      chance=float(g["chance"].iloc[0]), regime=regime))
    return out


def _not_fine_tuned_after_masking(table: pd.DataFrame, out: list[claims.Measurement], semantics: str, effect: str,
                                  what: str) -> list[claims.Measurement]:
    """``out`` plus, for each task of the run with cells but none of ``out``'s measurements (no model of it fine-tuned
    with a random mask fixed: ``finetune_tasks``), an absent measurement in the mask-then-fine-tune protocol: its row
    is ``not testable`` naming the protocol no cell measures, instead of the task missing from the verdicts."""
    have = {m.task for m in out}
    missing = [t for t in dict.fromkeys(table["task"]) if t not in have]
    name = REGIME_NAMES["mask_then_finetune"]
    return [*out, *(claims.Measurement.absent(
        t, f"no cell of this run measures it on {t}: {what}, and no model of {t} was fine-tuned after masking "
           f"({t} is not among finetune_tasks) under the {semantics} semantics", setting=name, semantics=semantics, unit=UNIT,
        effect=effect, regime="mask_then_finetune") for t in missing)]


def _at(table: pd.DataFrame, regime: str, fraction: float) -> pd.DataFrame:
    return table[(table["regime"] == regime) & (table["fraction"] == fraction)]


def _or_absent(out: list[claims.Measurement], why: str, semantics: str, effect: str) -> list[claims.Measurement]:
    """``out``, or one absent measurement (``not testable``: ``why`` under the semantics) when it is empty."""
    return out or [claims.Measurement.absent("all", f"{why} under the {semantics} semantics", semantics=semantics,
                                             unit=UNIT, effect=effect)]


def prunable_measurements(table: pd.DataFrame, semantics: str) -> list[claims.Measurement]:
    """Per task and mask-then-fine-tune share >= 50%: score(pruned, then fine-tuned) - score(full), per seed (one
    absent measurement when no such share ran)."""
    fractions = sorted(f for f in table.loc[table["regime"] == "mask_then_finetune", "fraction"].unique() if f >= 0.5)
    out = []
    full = _at(table, "mask_then_finetune", 0.0)
    effect = "score(pruned, then fine-tuned) - score(full)"
    for f in fractions:
        pairs = _pairs(table, _at(table, "mask_then_finetune", f), full)
        out += _measurements(pairs, _setting(f, "mask_then_finetune"), semantics, effect, "mask_then_finetune")
    if not out:
        return _or_absent(out, "no mask-then-fine-tune cells with >= 50% of heads pruned in this run", semantics,
                          effect)
    return _not_fine_tuned_after_masking(table, out, semantics, effect, "it is decided in Budhraja et al.'s protocol "
                                         "(>= 50% of heads pruned at random, then fine-tuned)")


def retraining_measurements(table: pd.DataFrame, semantics: str) -> list[claims.Measurement]:
    """Per task and share > 0 run in both regimes: score(mask, then fine-tune) - score(fine-tune, then mask) (one
    absent measurement when no share ran in both)."""
    shares = [set(table.loc[table["regime"] == r, "fraction"]) for r in REGIME_NAMES]
    out = []
    effect = "score(mask, then fine-tune) - score(fine-tune, then mask)"
    for f in sorted(f for f in shares[0] & shares[1] if f > 0):
        pairs = _pairs(table, _at(table, "mask_then_finetune", f), _at(table, "finetune_then_mask", f))
        out += _measurements(pairs, _both_regimes_setting(f), semantics, effect)
    if not out:
        return _or_absent(out, "no share of heads pruned in both regimes in this run", semantics, effect)
    return _not_fine_tuned_after_masking(table, out, semantics, effect, "it compares the two protocols")


def convergence_evidence(cells: pd.DataFrame, sub: pd.DataFrame) -> pd.DataFrame:
    """The convergence gate's evidence (:mod:`.convergence`): the full model of every (task, seed) from its
    mask-then-fine-tune cell at share 0 in ``cells`` (every semantics: no head masked, the same model), and the
    models fine-tuned with a random mask fixed in ``sub`` (one semantics), behind the measurements of their share
    in both claims' settings."""
    full = cells[(cells["regime"] == "mask_then_finetune") & (cells["fraction"] == 0)]
    rows = convergence.full_rows_recorded(full, cells)
    masked = sub[(sub["regime"] == "mask_then_finetune") & (sub["fraction"] > 0)]
    for f, g in masked.groupby("fraction", sort=True):
        for setting in (_setting(f, "mask_then_finetune"), _both_regimes_setting(f)):
            rows += convergence.masked_rows(g, setting, lambda r: f"random {100 * r['fraction']:g}% mask")
    return convergence.table(rows)


def held_out_curves(table: pd.DataFrame) -> pd.DataFrame:
    """The held-out curve of every fine-tuning of the run (:func:`.convergence.curves`): the full model of each (task,
    seed) once (no head masked: the same model under every semantics) and each model fine-tuned with a random mask
    fixed, named by its share and semantics; one row per model and epoch with the kept epoch and whether the model
    reached the plateau (the convergence gate's rule). Empty when no cell stored a curve."""
    mt = table[table["regime"] == "mask_then_finetune"]
    full = mt[mt["fraction"] == 0].sort_values("ablation").drop_duplicates(["task", "seed"])
    cells = pd.concat([full, mt[mt["fraction"] > 0].sort_values(["fraction", "ablation"], kind="stable")],
                      ignore_index=True)
    return convergence.curves(cells, lambda r: "full model" if r["fraction"] == 0
                              else f"{100 * r['fraction']:g}% pruned ({r['ablation']})")


# ---------------------------------------------------------------------------------------------- verdicts

# a claim's ``measure`` -> its measurements (the table of one semantics, that semantics)
MEASURES: dict[str, Callable[[pd.DataFrame, str], list[claims.Measurement]]] = {
    "prunable": prunable_measurements,
    "retraining": retraining_measurements,
}


def claim_verdicts(table: pd.DataFrame, cfg, declared: Sequence[claims.Claim]) -> pd.DataFrame:
    """The study's verdict table (:data:`claims.COLUMNS`): every declared claim (``declared``: the study's
    ``claims``, :data:`.random_pruning_claims.CLAIMS`) measured by its ``measure`` (:data:`MEASURES`) and decided
    by :func:`claims.evaluate` (its rule, margin and gates; evidence ``convergence``: :func:`convergence_evidence`,
    the full models from every semantics' cells, the masked ones of the same semantics) under every ablation semantics of the table (the cells' ``ablation``;
    :func:`semantics.verdicts_by_semantics`: primary = the claim's paper's, the others sensitivity), per task then
    pooled, Holm over the study's primary family and each sensitivity semantics apart. A claim with nothing
    measured under its own semantics gets one ``not testable`` row saying so (an absent measurement)."""
    unknown = sorted(c.measure for c in declared if c.measure not in MEASURES)
    if unknown:
        raise ValueError(f"claims with a measure this analysis does not know: {unknown} (known: {sorted(MEASURES)})")
    text = glue_workbench.scale_text(cfg, table)
    if "draw" in table.columns:  # both claims pair the regimes at the same mask: draw 0 (the only one fine-tuned)
        table = table[table["draw"] == 0]

    def decide(sub: pd.DataFrame, sem: str) -> pd.DataFrame:
        evidence = {"convergence": convergence_evidence(table, sub)}
        return pd.concat([claims.evaluate(claim, MEASURES[claim.measure](sub, sem), evidence=evidence, scale=text,
                                          study="random_pruning") for claim in declared], ignore_index=True)

    order = semantics.order(declared[0].semantics, [*(c.semantics for c in declared), *cfg.finetune_ablations,
                                                    *cfg.ablations])
    return semantics.verdicts_by_semantics(table, declared, decide, order)


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
