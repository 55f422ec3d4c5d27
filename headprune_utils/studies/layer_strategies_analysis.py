"""Study 2's analysis: pure functions over the tidy table of the ``layer_strategies`` cells (one row per cell).

The mean per strategy and the example masks are the strategy sweep's (:mod:`headprune_utils.studies.strategy_sweep`,
shared with study 5; re-exported here); the contrasts are the location contrasts of
:mod:`headprune_utils.analysis.paired_contrasts`. ``cfg`` is the study's parameters (``LayerStrategiesConfig``, defined with
the protocol in :mod:`.layer_strategies`). Every table is per ablation semantics (the cells' ``ablation`` column,
:mod:`headprune_utils.studies.semantics`): results of different semantics are never paired, pooled or compared.

Verdicts (:func:`verdicts`) follow :mod:`headprune_utils.analysis.claims`. The claims are declared as data in
:mod:`.layer_strategies_claims` (rule, margin, gates, figure; ``measure``: the name of the contrast) and passed to
:func:`verdicts`. Every claim is a paired contrast
``score(a) - score(b)`` of the same model (task, seed) and budget. The unit of replication is the model: a model's
differences over its budgets are averaged first, and the claim is tested on the model means (one-sample t over
``n_seeds - 1`` degrees of freedom), per task and regime, then pooled over tasks (effects / (full - chance)),
the pool's word withheld where a task is decided the other way. Each claim is decided under every semantics measured, on that semantics' cells and with that
semantics' gates (:func:`semantics.verdicts_by_semantics`): the rows under the claim's own paper's semantics
(``Claim.semantics``: ``uniform`` for Budhraja et al.'s BERT code, ``zero`` for Michel et al.) are the primary
analysis, Holm over the study's primary rows; each other semantics is a sensitivity analysis, its own Holm family.
Pairs where ``a`` and ``b`` pruned IDENTICAL masks (two names for
one mask, e.g. ``consecutive`` placed at the top) are left out: a mask is not tested against itself; a
measurement with no other pair is ``not testable`` ("degenerate contrast"), and a row that lost some pairs says so
in its reason. Margin of every claim: the task score's (:data:`margins.TASK_SCORE`), 0.1 x (full - chance) on the
task (the pooled row: the smallest of the tasks' margins / (full - chance)); it decides the "no preference" /
"no worse than random" claims and lets the "beats" claims be ``not supported``. Gates (declared with the claims):
the two strategies' masks differ (evidence ``identical_masks``: :func:`measurements`' notes); the full model above
chance by :data:`preconditions.ABOVE_CHANCE` in every unit; every fine-tuned model behind a row reached the plateau of
its held-out score (evidence ``convergence``: :func:`convergence_evidence`). A contrast whose two strategies did not both run is
one absent measurement (:meth:`claims.Measurement.absent`: ``not testable`` with the reason).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from headprune_utils.analysis import claims, paired_contrasts
from headprune_utils.studies import convergence, glue_workbench, semantics
from headprune_utils.analysis.paired_contrasts import (
    LOCATION_CONTRASTS, Contrast, paired_by_strategy, per_ablation, unit_contrast_table,
)
from headprune_utils.studies.strategy_sweep import ( # noqa: F401 (re-exported: the notebook and the tests read them from this study)
    REGIME_NAMES, example_masks, summarise,
)

__all__ = ["MICHEL_PRUNABLE", "michel_prunable", "CONTRASTS", "Contrast", "REGIME_NAMES", "summarise",
           "example_masks", "contrasts", "identical_masks", "convergence_evidence", "measurements", "scale", "verdicts"]

CONTRASTS: tuple[Contrast, ...] = LOCATION_CONTRASTS
STUDY = "layer_strategies"
REGIME_ORDER = ("finetune_then_mask", "mask_then_finetune")


# Michel et al. 2019's largest share of heads prunable by iterative importance (fine-tune, then mask; BERT-base)
# with under about one point of loss, per task (read from their figures;
# approximate): compared side by side, not tested.
MICHEL_PRUNABLE = {"SST-2": 0.6, "CoLA": 0.5, "MRPC": 0.5}


def michel_prunable(table: pd.DataFrame, tolerance: float = 0.01, ablation: str = "zero") -> pd.DataFrame:
    """Michel et al.'s curve read as they read it: per task and fine-tuned model (seed), the largest budget of the
    ``iterative_importance`` strategy (fine-tune, then mask; ``ablation``, theirs: zero) whose score, and every
    smaller budget's, is within ``tolerance`` (score units: 0.01 = one point) of the full model; then per task the
    mean, SD and range over the models, beside Michel et al.'s share (:data:`MICHEL_PRUNABLE`, NaN where they give
    none). Empty when the strategy did not run."""
    t = table[(table["strategy"].isin(["iterative_importance", "none"])) & (table["regime"] == "finetune_then_mask")]
    if "ablation" in t.columns:
        t = t[t["ablation"] == ablation]
    cols = ["task", "n_models", "mean_prunable", "sd_prunable", "min_prunable", "max_prunable", "tolerance",
            "michel_et_al"]
    if not (t["strategy"] == "iterative_importance").any():
        return pd.DataFrame(columns=cols)
    rows = []
    for task, g in t.groupby("task", sort=False):
        per_model = []
        for seed, gs in g.groupby("seed"):
            full = gs.loc[gs["strategy"] == "none", "score"]
            if full.empty:
                continue
            best = 0.0
            for _, r in gs[gs["strategy"] == "iterative_importance"].sort_values("budget").iterrows():
                if full.iloc[0] - r["score"] <= tolerance:
                    best = float(r["budget"])
                else:
                    break
            per_model.append(best)
        if not per_model:
            continue
        x = np.asarray(per_model, dtype=float)
        rows.append({"task": task, "n_models": x.size, "mean_prunable": float(x.mean()),
                     "sd_prunable": float(x.std(ddof=1)) if x.size > 1 else float("nan"),
                     "min_prunable": float(x.min()), "max_prunable": float(x.max()), "tolerance": tolerance,
                     "michel_et_al": MICHEL_PRUNABLE.get(task, float("nan"))})
    return pd.DataFrame(rows, columns=cols)


def contrasts(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Every contrast per task x regime x ablation x budget (over seeds) and per task x regime x ablation over all
    budgets (each model's mean over its budgets first): mean difference and t-interval (``ci_low``, ``ci_high``)
    over the models (task x seed), never over budget x seed pseudo-replicates; pairs with identical masks left out
    (``n_same_mask``, ``note``). Descriptive: the tests are in :func:`verdicts`."""
    return per_ablation(table, lambda t: unit_contrast_table(
        CONTRASTS, lambda a, b: paired_by_strategy(t, a, b, same_mask=True), confidence))


def identical_masks(table: pd.DataFrame) -> pd.DataFrame:
    """Strategies that pruned the same mask, reported once per regime x ablation x budget x group of names
    (columns regime, ablation, budget, strategies, tasks, seeds, n_cells, note; per semantics, as the contrasts
    that leave those pairs out are). The note names the contrast that left those pairs out."""
    keys = ("task", "regime", "ablation", "budget", "seed")
    same = paired_contrasts.identical_masks(table, keys=keys)
    rows = []
    for (regime, ablation, budget, names), g in same.groupby(["regime", "ablation", "budget", "strategies"], sort=True):
        group = set(names.split(" = "))
        hit = [c.name for c in CONTRASTS if {c.a, c.b} <= group]
        note = "one mask under several names: the same measurement, not independent ones"
        if hit:
            note += f"; left out of the contrast(s) {', '.join(repr(h) for h in hit)} (a mask is not tested against itself)"
        rows.append({"regime": regime, "ablation": ablation, "budget": budget, "strategies": names,
                     "tasks": ", ".join(sorted(set(g["task"]))), "seeds": ", ".join(map(str, sorted(set(g["seed"])))),
                     "n_cells": len(g) * len(group), "note": note})
    return pd.DataFrame(rows, columns=["regime", "ablation", "budget", "strategies", "tasks", "seeds", "n_cells",
                                       "note"])


def convergence_evidence(cells: pd.DataFrame, sub: pd.DataFrame, contrast: Contrast) -> pd.DataFrame:
    """The convergence gate's evidence (:mod:`.convergence`) for ``contrast``: the full model of every (task, seed),
    from its mask-then-fine-tune cell of the strategy ``none`` in ``cells`` (every semantics: no head masked, the
    same model), and the models of the contrast's two strategies fine-tuned with their mask fixed in ``sub`` (one
    semantics) at the budgets the contrast pairs, behind its mask-then-fine-tune measurements (:func:`_setting`)."""
    full = cells[(cells["regime"] == "mask_then_finetune") & (cells["strategy"] == "none")]
    rows = convergence.full_rows_recorded(full, cells)
    mt = "mask_then_finetune"
    d = paired_by_strategy(sub, contrast.a, contrast.b, same_mask=True) if len(sub) else pd.DataFrame()
    if len(d) and (d["regime"] == mt).any():
        budgets = set(d.loc[d["regime"] == mt, "budget"])
        masked = sub[(sub["regime"] == mt) & sub["strategy"].isin({contrast.a, contrast.b})
                     & sub["budget"].isin(budgets)]
        rows += convergence.masked_rows(masked, _setting(mt, budgets),
                                        lambda r: f"{r['strategy']} {100 * float(r['budget']):g}% mask")
    return convergence.table(rows)


def _setting(regime: str, budgets) -> str:
    pct = ", ".join(f"{100 * float(b):g}%" for b in sorted(set(budgets)))
    return f"{REGIME_NAMES.get(regime, regime)}; budgets {pct} (mean over budgets within each model)"


def measurements(table: pd.DataFrame, contrast: Contrast, semantics: str = "") -> tuple[list[claims.Measurement], dict]:
    """``(measurements, notes)`` of one contrast: one :class:`claims.Measurement` per regime x task (values = the
    paired differences of the (task, seed) unit over budgets, identical-mask pairs left out; ``full`` = the full
    model's score per seed, ``chance`` = the task's chance score). ``notes``: ``{(task, setting): (kind, text)}``,
    kind ``"degenerate"`` (every pair identical: the measurement keeps them only to be gated not testable) or
    ``"partial"`` (some pairs left out)."""
    d = paired_by_strategy(table, contrast.a, contrast.b, same_mask=True)
    out, notes = [], {}
    for regime in [r for r in REGIME_ORDER if r in set(d["regime"])]:
        dr = d[d["regime"] == regime]
        setting = _setting(regime, dr["budget"])
        for task, g in dr.groupby("task", sort=True):
            ref = table[(table["task"] == task) & (table["regime"] == regime) & (table["strategy"] == "none")]
            full = ref.sort_values("seed")["score"].astype(float).tolist()
            chance = float(table.loc[table["task"] == task, "chance"].iloc[0])
            same = g["same_mask"].astype(bool)
            kept = g if same.all() else g[~same]
            if same.any():
                lost = g[same]
                text = (f"{contrast.a} and {contrast.b} pruned identical masks in {int(same.sum())} of {len(g)} "
                        f"pairs (budgets {', '.join(f'{100 * float(b):g}%' for b in sorted(set(lost['budget'])))}; "
                        f"seeds {', '.join(map(str, sorted(set(lost['seed']))))})")
                notes[(task, setting)] = ("degenerate", f"degenerate contrast: {text}; a mask is not tested "
                                                        "against itself") if same.all() else \
                    ("partial", f"note: {text}, left out")
            out.append(claims.Measurement(
                task=task, values=kept["diff"].to_numpy(dtype=float),
                units=[(task, int(s)) for s in kept["seed"]], setting=setting, semantics=semantics,
                effect=_effect(contrast),
                full=full, chance=chance, regime=regime))
    return out, notes


def scale(cfg, table: pd.DataFrame | None = None) -> str:
    """The run's scale in words (model, heads, training examples x epochs, seeds)."""
    heads = ""
    if table is not None and "n_heads_total" in table and len(table):
        heads = f", {int(table['n_heads_total'].iloc[0])} heads"
    train = "all" if cfg.train_size is None else str(cfg.train_size)
    text = f"{cfg.model}{heads}, {train} training examples x {glue_workbench.epochs_text(cfg)}, seeds {list(cfg.seeds)}"
    return glue_workbench.scale_note(text, glue_workbench.is_paper_setup(cfg))


def verdicts(table: pd.DataFrame, cfg, claim_list: Sequence[claims.Claim], alpha: float = 0.05) -> pd.DataFrame:
    """The verdict table (exactly :data:`claims.COLUMNS`) of ``claim_list`` (the study's ``claims``,
    :data:`.layer_strategies_claims.CLAIMS`; each one's ``measure`` names a contrast of :data:`CONTRASTS`) under every
    ablation semantics of ``table`` (its ``ablation`` column; :func:`semantics.verdicts_by_semantics`): each
    semantics decided on its own cells by :func:`claims.evaluate`, with its own evidence (``convergence``: the
    models behind the contrast, :func:`convergence_evidence`; ``identical_masks``: the contrast's notes);
    ``analysis`` primary for the claim's own paper's semantics, sensitivity otherwise; Holm over the study's primary
    rows and each sensitivity semantics apart. Every number from ``table``. A claim whose two strategies did not
    both run under a semantics is one absent measurement there (``not testable`` saying so; kept under the claim's
    own semantics only). ``alpha``: the level of every rule. Rows that lost some pairs to identical masks say so in
    their reason."""
    text = scale(cfg, table)
    notes_of: dict[tuple[str, str], dict] = {}
    by_name = {c.name: c for c in CONTRASTS}
    unknown = sorted(c.measure for c in claim_list if c.measure not in by_name)
    if unknown:
        raise ValueError(f"claims with a measure that is not a contrast: {unknown} (contrasts: {sorted(by_name)})")

    def decide(sub: pd.DataFrame, sem: str) -> pd.DataFrame:
        parts = []
        for claim in claim_list:
            contrast = by_name[claim.measure]
            ms, notes = measurements(sub, contrast, semantics=sem) if len(sub) else ([], {})
            if not ms:
                ms = [claims.Measurement.absent("all", _not_run(contrast, sub, sem), semantics=sem,
                                                effect=_effect(contrast))]
            ms = claims.in_own_protocol(claim, ms, sem, REGIME_NAMES)
            notes_of[(claim.id, sem)] = notes
            parts.append(claims.evaluate(claim, ms, evidence={"convergence": convergence_evidence(table, sub, contrast),
                                                               "identical_masks": notes},
                                         alpha=alpha, scale=text, study=STUDY))
        return pd.concat(parts, ignore_index=True)

    order = semantics.order(claim_list[0].semantics, [*(c.semantics for c in claim_list),
                                                      *getattr(cfg, "finetune_ablations", ()),
                                                      *getattr(cfg, "ablations", ())])
    out = semantics.verdicts_by_semantics(table, claim_list, decide, order)
    for i, r in out.iterrows():  # pairs left out: said in the reason of the rows they touch (after the verdicts)
        notes = notes_of.get((r["claim_id"], r["semantics"]), {})
        extra = [t for (task, setting), (kind, t) in notes.items() if kind == "partial" and setting == r["setting"]
                 and (task == r["task"] or str(r["task"]).startswith("all ("))]
        if extra:
            out.loc[i, "reason"] = f"{r['reason']}; " + "; ".join(extra)
    claims.validate(out)
    return out


def _effect(contrast: Contrast) -> str:
    return f"score({contrast.a}) - score({contrast.b}), model mean over budgets"


def _not_run(contrast: Contrast, table: pd.DataFrame, semantics: str) -> str:
    """Why a contrast has no measurement under ``semantics`` (the reason of its absent measurement)."""
    ran = set(table["strategy"]) if "strategy" in table.columns else set()
    missing = [s for s in (contrast.a, contrast.b) if s not in ran]
    return (f"the strategies of the contrast {contrast.name!r} did not both run under the {semantics} semantics"
            + (f" (missing: {', '.join(missing)})" if missing else " in any common setting"))
