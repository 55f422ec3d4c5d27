"""Study 5's analysis: pure functions over the tidy table of the ``zero_shot_pruning`` cells (one row per cell).

The mean per method is the strategy sweep's (:mod:`headprune_utils.studies.strategy_sweep`, shared with study 2;
re-exported here); the descriptive contrasts pair zero-shot pruning with the full model, random pruning and
gradient importance (:mod:`headprune_utils.analysis.paired_contrasts`); :func:`mask_overlap` compares the methods' masks;
:func:`zero_shot_masks` / :func:`verdict_masks` put each zero-shot mask's heads per layer beside the verdicts.
``cfg`` is the study's parameters (``ZeroShotPruningConfig``, defined with the protocol in
:mod:`.zero_shot_pruning`); read here: ``model``, ``train_size``, ``dev_size``, ``epochs``,
``seeds``, ``ablations``, ``finetune_ablations``. Every table is per ablation semantics (the cells' ``ablation``
column, :mod:`headprune_utils.studies.semantics`): results of different semantics are never paired, pooled or compared.

The claims are declared as data in :mod:`.zero_shot_pruning_claims` (``CLAIMS``: each claim's rule, margin, gates
and ``measure``, a contrast of :data:`CONTRASTS` by name) and handed to :func:`claim_verdicts` by the study, which
measures each and decides it with :func:`claims.evaluate`. A paired contrast ``score(a) - score(b)`` gives one value per (task, seed) model, per
regime x share pruned (:func:`contrast_measurements`), decided per task and then pooled over tasks (effects /
(full - chance)) by the claim's rule (non-inferiority against the full model, equivalence between zero-shot and
gradient importance; margin :data:`margins.TASK_SCORE`, 0.1 x (full - chance) of the task). The zero-shot mask is
one mask (n = 1: the one pre-trained model, no task data): against random pruning it is paired, per fine-tuned
model, with that model's own random mask(s) of its size (the rule for a fixed mask against random masks,
:mod:`.zero_shot_pruning_claims`), so every verdict speaks of this mask on this pre-trained model. The gates'
evidence comes from here: :func:`convergence_evidence` (every fine-tuned model behind a row trained to its plateau).
Each claim is decided under every semantics measured (:func:`semantics.verdicts_by_semantics`): the rows under the
claim's own paper's semantics (``Claim.semantics``: ``zero`` for Bian et al., our reading, and for ours;
``uniform`` for Budhraja et al.'s BERT code) are the primary analysis, Holm over the study's primary rows; each
other semantics is a sensitivity analysis, its own Holm family.
"""
from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from headprune_utils.analysis import claims
from headprune_utils.studies import convergence, glue_workbench, semantics, strategy_sweep
from headprune_utils.model import masks
from headprune_utils.analysis.paired_contrasts import Contrast, per_ablation, unit_contrast_table
from headprune_utils.studies.strategy_sweep import ( # noqa: F401 (re-exported: the notebook reads them from this study)
    REGIME_NAMES, summarise,
)

__all__ = ["METHODS", "CONTRASTS", "REGIME_NAMES", "STUDY_NAME", "MOST_HEADS", "SHARES_ABOVE", "summarise", "example_masks", "paired", "contrasts",
           "contrast_measurements", "convergence_evidence", "claim_verdicts", "zero_shot_masks",
           "verdict_masks", "mask_overlap"]

METHODS: tuple[str, ...] = ("zero_shot", "random", "least_important")


def example_masks(table: pd.DataFrame, seed: int | None = None) -> pd.DataFrame:
    """One mask per method x budget (seed ``seed``, default the smallest; first task; one semantics: the masks
    do not depend on it) as rows for the picture."""
    return strategy_sweep.example_masks(table, seed, order=METHODS)


CONTRASTS: tuple[Contrast, ...] = (
    Contrast("zero-shot vs full model", "Bian et al.: most heads can be pruned zero-shot with comparable fine-tuned "
             "scores", "zero_shot", "none", "not_worse"),
    Contrast("zero-shot vs random", "Bian et al.: zero-shot pruning from redundancy clusters is comparable to random "
             "pruning at the same budget", "zero_shot", "random", "not_worse"),
    Contrast("zero-shot vs gradient importance", "ours (exploratory): zero-shot pruning (no task data) is comparable "
             "to gradient-importance pruning (task data)", "zero_shot", "least_important", "equal"),
    Contrast("random vs full model", "Reference (Budhraja et al. claim 1): random pruning keeps comparable "
             "fine-tuned scores", "random", "none", "not_worse"),
)


def _by(table: pd.DataFrame) -> list[str]:
    """The keys that pair two cells besides budget: task, regime, seed and, when present, the semantics."""
    return ["task", "regime", *(["ablation"] if "ablation" in table.columns else []), "seed"]


def paired(table: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """Rows (task, regime[, ablation], budget, seed, diff = score_a - score_b), paired within one semantics;
    ``b="none"`` pairs with the full model."""
    by = _by(table)
    t = table[table["strategy"] == a][[*by, "budget", "score"]]
    if b == "none":
        ref = table[table["strategy"] == "none"][[*by, "score"]]
        m = t.merge(ref, on=by, suffixes=("_a", "_b"))
    else:
        ref = table[table["strategy"] == b][[*by, "budget", "score"]]
        m = t.merge(ref, on=[*by, "budget"], suffixes=("_a", "_b"))
    m["diff"] = m["score_a"] - m["score_b"]
    return m[[*by[:-1], "budget", "seed", "diff"]]


def contrasts(table: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Every contrast per task x regime x ablation x budget (over seeds: one difference per fine-tuned model) and
    per task x regime x ablation over all budgets (``budget = "all"``: each model's differences averaged over its
    budgets first): mean difference and Student-t interval (``ci_low``, ``ci_high``) over the models (task x seed).
    No pooled test over task x budget x seed pseudo-replicates (several budgets of one fine-tuned model are not
    independent). Descriptive: the tests are in :func:`claim_verdicts`."""
    return per_ablation(table, lambda t: unit_contrast_table(CONTRASTS, lambda a, b: paired(t, a, b), confidence))


# ------------------------------------------------------------------------------------------------- claims

STUDY_NAME = "zero_shot_pruning"

def _setting(budget: float, regime: str) -> str:
    return f"{100 * float(budget):g}% of heads pruned; {REGIME_NAMES[regime]}"


def _contrast(name: str) -> Contrast:
    """The contrast a claim measures (its ``measure``: a name of :data:`CONTRASTS`)."""
    found = [c for c in CONTRASTS if c.name == name]
    if not found:
        raise ValueError(f"no contrast {name!r}: a claim's measure is one of {[c.name for c in CONTRASTS]}")
    return found[0]


def _full(table: pd.DataFrame) -> pd.DataFrame:
    """``[task, regime[, ablation], seed, full, chance]``: the fine-tuned full model's score (strategy ``none``)."""
    f = table[table["strategy"] == "none"]
    return f.groupby(_by(table), as_index=False).agg(full=("score", "first"), chance=("chance", "first"))


def _one_semantics(table: pd.DataFrame, what: str) -> None:
    if "ablation" in table.columns and table["ablation"].nunique() > 1:
        raise ValueError(f"{what} takes the cells of one semantics")


def contrast_measurements(table: pd.DataFrame, a: str, b: str, semantics: str,
                          unit: str = claims.DEFAULT_UNIT) -> list[claims.Measurement]:
    """``score(a) - score(b)`` (``b="none"``: the full model) per regime x budget x task, one value per
    (task, seed) model, with the full model's scores and the task's chance score. ``table``: the cells of one
    semantics (``semantics``)."""
    _one_semantics(table, "contrast_measurements")
    if table.empty:
        return []
    d = paired(table, a, b).merge(_full(table), on=_by(table))
    b_name = "full" if b == "none" else b
    out = []
    regimes = [r for r in REGIME_NAMES if r in set(d["regime"])]
    for regime in regimes:
        for budget in sorted(d.loc[d["regime"] == regime, "budget"].unique()):
            g = d[(d["regime"] == regime) & (d["budget"] == budget)]
            for task, gt in g.groupby("task", sort=True):
                out.append(claims.Measurement(task, gt["diff"].tolist(), [(task, int(s)) for s in gt["seed"]],
                                              _setting(budget, regime), semantics, f"score({a}) - score({b_name})",
                                              unit, full=gt["full"].tolist(), chance=float(gt["chance"].iloc[0]),
                                              regime=regime))
    return out


def convergence_evidence(cells: pd.DataFrame, sub: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """The convergence gate's evidence (:mod:`.convergence`) for the contrast of methods ``a`` and ``b``: the full
    model of every (task, seed), from its mask-then-fine-tune cell of the strategy ``none`` in ``cells`` (every
    semantics: no head masked, the same model), and the models of ``a`` and ``b`` fine-tuned with their mask fixed
    in ``sub`` (one semantics), behind the measurements of their budget."""
    unit = convergence.task_seed
    full = cells[(cells["regime"] == "mask_then_finetune") & (cells["strategy"] == "none")]
    rows = convergence.full_rows_recorded(full, cells, unit, lambda task, seed: f"full model seed {seed}")
    masked = sub[(sub["regime"] == "mask_then_finetune") & sub["strategy"].isin({a, b} - {"none"})]
    for budget, g in masked.groupby("budget", sort=True):
        rows += convergence.masked_rows(
            g, _setting(budget, "mask_then_finetune"),
            lambda r: f"{r['strategy']} {100 * float(r['budget']):g}% mask", unit)
    return convergence.table(rows)


# "Most heads" (bian.zero_shot_comparable) read from the claim's own words: more than half of them (the share the
# secondary sources give for the paper is 75-85%). Rows at half the heads or fewer are not that claim's: it is
# measured at larger shares only (SHARES_ABOVE: claim id -> the share its measurements must exceed), and a task
# whose models were fine-tuned after masking only at smaller shares gets a not-testable row saying so
# (tables/contrasts.csv still describes every share).
MOST_HEADS = 0.5
SHARES_ABOVE: dict[str, float] = {"bian.zero_shot_comparable": MOST_HEADS}


def _only_at_smaller_shares(claim: claims.Claim, sub: pd.DataFrame, ms: list[claims.Measurement], above: float,
                            semantics: str) -> list[claims.Measurement]:
    """For a claim measured only at shares above ``above`` (:data:`.zero_shot_pruning_claims.SHARES_ABOVE`): an
    absent measurement in the claim's own protocol for each task whose models were fine-tuned in it with the mask
    fixed, but only at ``above`` or fewer of the heads pruned: its primary row is ``not testable`` naming the shares
    run, instead of the claim being decided on a share it does not speak of."""
    regime = claim.decided_in
    if not regime:
        return []
    have = {m.task for m in ms if m.regime == regime}
    run = sub[(sub["regime"] == regime) & (sub["strategy"] != "none")]
    out = []
    for task, g in run.groupby("task", sort=True):
        if task in have:
            continue
        shares = ", ".join(f"{100 * float(b):g}%" for b in sorted(g["budget"].unique()))
        out.append(claims.Measurement.absent(
            task, f"{claim.paper}'s protocol ({REGIME_NAMES[regime]}) was run on {task} with {shares} of the heads "
                  f"pruned only; the claim speaks of more than {100 * above:g}% of them (under the {semantics} "
                  "semantics)", setting=REGIME_NAMES[regime], semantics=semantics, unit=claim.unit,
            effect=f"score({_contrast(claim.measure).a}) - score(full)", regime=regime))
    return out


def claim_verdicts(table: pd.DataFrame, cfg, declared: Sequence[claims.Claim]) -> pd.DataFrame:
    """The study's verdict table (:data:`claims.COLUMNS`): every declared claim (``declared``: the study's
    ``claims``, :data:`.zero_shot_pruning_claims.CLAIMS`) measured by its ``measure`` (a contrast of
    :data:`CONTRASTS`: paired differences per model, :func:`contrast_measurements`) and
    decided by :func:`claims.evaluate` per task, then pooled over tasks, per regime x budget, under
    every ablation semantics of the table (:func:`semantics.verdicts_by_semantics`: each semantics on its own cells
    and with its own gates' evidence; primary = the claim's paper's semantics, the others sensitivity); Holm over the
    study's primary rows and each sensitivity semantics apart. A claim with no cells of its two methods under a
    semantics gets one ``not testable`` row saying so (:meth:`claims.Measurement.absent`)."""
    for claim in declared:
        _contrast(claim.measure)
    text = glue_workbench.scale_text(cfg, table)

    def decide(sub: pd.DataFrame, sem: str) -> pd.DataFrame:
        parts = []
        for claim in declared:
            c = _contrast(claim.measure)
            evidence = {"convergence": convergence_evidence(table, sub, c.a, c.b)}
            above = SHARES_ABOVE.get(claim.id)
            own = sub if above is None else sub[(sub["strategy"] == "none") | (sub["budget"] > above)]
            ms = contrast_measurements(own, c.a, c.b, sem, claim.unit)
            if above is not None:
                ms += _only_at_smaller_shares(claim, sub, ms, above, sem)
            if not ms:
                other = "the full model" if c.b == "none" else c.b
                ms = [claims.Measurement.absent(
                    "all", f"no paired cells of {c.a} and {other} under the {sem} semantics in this run",
                    semantics=sem, unit=claim.unit)]
            ms = claims.in_own_protocol(claim, ms, sem, REGIME_NAMES)
            parts.append(claims.evaluate(claim, ms, evidence=evidence, scale=text, study=STUDY_NAME))
        return pd.concat(parts, ignore_index=True)

    order = semantics.order(declared[0].semantics, [*(c.semantics for c in declared), *cfg.finetune_ablations,
                                                    *cfg.ablations])
    return semantics.verdicts_by_semantics(table, declared, decide, order)


def zero_shot_masks(table: pd.DataFrame) -> pd.DataFrame:
    """The zero-shot mask of every regime x ablation x budget (the same for every task and seed: no task data;
    and for every semantics): heads pruned and kept, heads kept per layer (bottom layer first) and layers emptied,
    keyed by the verdicts' ``setting`` and ``semantics`` (= the cells' ``ablation``). ``n_masks`` > 1 would mean
    the mask changed with task or seed."""
    rows = []
    z = table[table["strategy"] == "zero_shot"]
    for (regime, ablation, budget), g in z.groupby(["regime", "ablation", "budget"], sort=True):
        m = masks.mask_from_string(str(g["mask"].iloc[0]))
        kept = [int(k) for k in m.sum(dim=1).tolist()]
        rows.append({"setting": _setting(budget, regime), "semantics": ablation, "regime": regime,
                     "budget": float(budget), "heads_pruned": int((m == 0).sum()), "heads_kept": int(m.sum()),
                     "kept_per_layer": "[" + ", ".join(map(str, kept)) + "]",
                     "layers_emptied": sum(k == 0 for k in kept), "n_masks": int(g["mask"].nunique())})
    return pd.DataFrame(rows, columns=["setting", "semantics", "regime", "budget", "heads_pruned", "heads_kept",
                                       "kept_per_layer", "layers_emptied", "n_masks"])


def _interval(r) -> str:
    if pd.isna(r["effect"]):
        return "n/a (not testable)" if r["verdict"] == "not testable" else "n/a"
    if pd.isna(r["ci_low"]):
        return f"{r['effect']:+.3f} (CI n/a: one unit)"
    return f"{r['effect']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]"


def verdict_masks(verdict: pd.DataFrame, table: pd.DataFrame, declared: Sequence[claims.Claim]) -> pd.DataFrame:
    """The zero-shot claims' verdicts (of ``declared``, those whose contrast involves ``zero_shot``) beside the
    zero-shot mask each was measured with: claim_id, task, setting, semantics, analysis (primary / sensitivity),
    verdict, effect [CI] (text, never NaN), heads kept per layer (bottom layer first), layers emptied."""
    zs = {c.id for c in declared if "zero_shot" in (_contrast(c.measure).a, _contrast(c.measure).b)}
    v = verdict[verdict["claim_id"].isin(zs)].copy()
    v["effect [CI]"] = [_interval(r) for _, r in v.iterrows()]
    m = zero_shot_masks(table)[["setting", "semantics", "kept_per_layer", "layers_emptied"]]
    out = v.merge(m, on=["setting", "semantics"], how="left")
    out["kept_per_layer"] = out["kept_per_layer"].fillna("n/a (no zero-shot mask)")
    out["layers_emptied"] = out["layers_emptied"].map(lambda x: "n/a" if pd.isna(x) else str(int(x)))
    return out[["claim_id", "task", "setting", "semantics", "analysis", "verdict", "effect [CI]", "kept_per_layer",
                "layers_emptied"]].rename(
        columns={"kept_per_layer": "zero-shot heads kept per layer", "layers_emptied": "layers emptied"})


def mask_overlap(table: pd.DataFrame) -> pd.DataFrame:
    """How much the methods' masks agree: per task x regime x ablation x budget x seed, the share of pruned heads
    that zero-shot shares with each other method (Jaccard index of the pruned sets), and how many layers each
    method's mask touches and empties."""
    rows = []
    t = table[table["strategy"] != "none"]
    for (task, regime, ablation, budget, seed), g in t.groupby(["task", "regime", "ablation", "budget", "seed"]):
        pruned = {r.strategy: masks.mask_from_string(r.mask) < 1 for r in g.itertuples()}
        for m, p in pruned.items():
            row = {"task": task, "regime": regime, "ablation": ablation, "budget": budget, "seed": seed, "method": m,
                   "layers_touched": int(p.any(dim=1).sum()), "layers_emptied": int(p.all(dim=1).sum())}
            if "zero_shot" in pruned and m != "zero_shot":
                z = pruned["zero_shot"]
                row["jaccard_with_zero_shot"] = float((z & p).sum() / max(1, int((z | p).sum())))
            rows.append(row)
    return pd.DataFrame(rows)
