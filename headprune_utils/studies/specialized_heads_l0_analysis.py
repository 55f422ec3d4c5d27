"""Study 6's analysis: pure functions over the tidy table of the ``specialized_heads_l0`` cells (one row per cell).

Head scores and their agreement, the L0 curve against its baselines, the rare-word criterion's sensitivity (the
counts and the survival test over thresholds the criterion is NOT chosen from), and the verdicts: the claims are data
(``specialized_heads_l0_claims.CLAIMS``, handed to :func:`verdicts`), each measured by the function its ``measure``
names (:data:`MEASURES`) and decided by ``claims.evaluate``. The roles and the survival-by-role analysis, which
study 7 shares, live in :mod:`headprune_utils.studies.role_survival` (re-exported here).
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy import stats as sps

from headprune_utils.analysis import preconditions, stats, survival
from headprune_utils.analysis.claims import Claim, Measurement, adjust, empty_table, evaluate, validate
from headprune_utils.analysis.paired_contrasts import unit_summary
from headprune_utils.measure.head_scores import rank_agreement
from headprune_utils.measure.specialized import RARE_SHARE
from headprune_utils.model.masks import mask_from_string
from headprune_utils.tasks.metrics import chance_accuracy, rescored_tasks
from headprune_utils.studies import convergence, glue_workbench, role_survival
from headprune_utils.studies.role_survival import (  # noqa: F401 (re-exported: the notebook and the tests read them from this study)
    RARE_SHARES,
    ROLE_NAMES,
    VOITA_FRACTION,
    presence_effect,
    rare_criterion_counts,
    role_counts,
    role_map_data,
    role_mask,
    role_stability,
    role_table,
    roles_at_budget,
    survival_auc_per_model,
    survival_heads,
    survival_map_data,
    survival_tests,
    survival_with_roles,
)

NAME = "specialized_heads_l0"
SCORES: tuple[str, ...] = ("gradient_importance", "relevance", "ablation", "confidence", "confidence_no_special_keys",
                           "entropy")
# The two definitions of confidence (head_scores): every key, and the special-token keys excluded (Voita et al.
# exclude EOS). The claim "important heads are confident" is reported under both (setting column).
CONFIDENCES: dict[str, str] = {"confidence": "confidence: every key (special tokens included)",
                               "confidence_no_special_keys": "confidence: special-token keys excluded"}


def _arr(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _kind(table: pd.DataFrame, kind: str) -> pd.DataFrame:
    return table[table["kind"] == kind] if "kind" in table else table.iloc[0:0]


def scores_recorded(table: pd.DataFrame) -> list[str]:
    """The scores (of :data:`SCORES`, in that order) the scores cells record: every one, except in cells made before
    ``confidence_no_special_keys`` existed (RESULTS_VERSION 1), which lack it. A score recorded by only some cells
    is an error (cells of two code versions mixed)."""
    t = _kind(table, "scores")
    out = []
    for s in SCORES:
        have = t[s].notna() if s in t else pd.Series(False, index=t.index)
        if have.all() and len(t):
            out.append(s)
        elif have.any():
            raise ValueError(f"score {s!r} is recorded by some scores cells only: cells of two code versions are mixed")
    return out


# ---------------------------------------------------------------------------------------------- scores
def head_score_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, seed, layer, head) with every score the cells record (:func:`scores_recorded`) of the
    fine-tuned full model."""
    rows, names = [], scores_recorded(table)
    for r in _kind(table, "scores").itertuples():
        grids = {s: _arr(getattr(r, s)) for s in names}
        n_layers, n_heads = grids[names[0]].shape
        for layer in range(n_layers):
            for head in range(n_heads):
                rows.append({"task": r.task, "seed": int(r.seed), "layer": layer, "head": head,
                             **{s: float(g[layer, head]) for s, g in grids.items()}})
    return pd.DataFrame(rows)



def score_map_data(scores: pd.DataFrame, task: str | None = None) -> pd.DataFrame:
    """Long rows (score, layer, head, value): each score's mean over the seeds of ``task`` (default: the first).
    ``scores``: :func:`head_score_table` (its score columns: those of :data:`SCORES` it has)."""
    task = scores["task"].iloc[0] if task is None else task
    names = [s for s in SCORES if s in scores]
    m = scores[scores["task"] == task].groupby(["layer", "head"])[names].mean().reset_index()
    return m.melt(id_vars=["layer", "head"], value_vars=names, var_name="score", value_name="value").assign(task=task)



def score_agreement(table: pd.DataFrame, surv: pd.DataFrame | None = None) -> pd.DataFrame:
    """Rank agreement (Spearman, Kendall) of every pair of scores, per fine-tuned model (task, seed).

    surv: optional :func:`survival_heads` rows; then ``l0_survival`` (the survival level) joins as a score.
    """
    out, names = [], scores_recorded(table)
    for r in _kind(table, "scores").itertuples():
        scores = {s: torch.tensor(getattr(r, s)) for s in names}
        if surv is not None:
            g = surv[(surv["task"] == r.task) & (surv["seed"] == r.seed)]
            if len(g):
                grid = np.zeros(tuple(scores[names[0]].shape))
                grid[g["layer"].to_numpy(), g["head"].to_numpy()] = g["survival"].to_numpy(dtype=float)
                scores["l0_survival"] = torch.from_numpy(grid)
        with warnings.catch_warnings():  # a constant score (e.g. nothing pruned) has no rank correlation: NaN
            warnings.simplefilter("ignore", sps.ConstantInputWarning)
            agr = rank_agreement(scores)
        agr.insert(0, "seed", int(r.seed))
        agr.insert(0, "task", r.task)
        out.append(agr)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()



def agreement_summary(agr: pd.DataFrame, confidence: float = 0.95, alpha: float = 0.05) -> pd.DataFrame:
    """Per score pair: mean Spearman over the models with a t-interval, and how many models show a significant
    positive / negative correlation (``spearman_p < alpha``)."""
    rows = []
    for (a, b), g in agr.groupby(["a", "b"], sort=False):
        rho = g["spearman"].dropna().to_numpy(dtype=float)
        mean, lo, hi = stats.t_interval(rho, confidence) if len(rho) else (np.nan, np.nan, np.nan)
        sig = g["spearman_p"] < alpha
        rows.append({"a": a, "b": b, "n_models": len(rho), "mean_spearman": mean, "ci_low": lo, "ci_high": hi,
                     "mean_kendall": float(g["kendall"].mean()), "n_sig_positive": int((sig & (g["spearman"] > 0)).sum()),
                     "n_sig_negative": int((sig & (g["spearman"] < 0)).sum())})
    return pd.DataFrame(rows)



# ---------------------------------------------------------------------------------------------- L0 curve
def l0_curve(table: pd.DataFrame) -> pd.DataFrame:
    """One row per L0 cell: heads kept and the dev scores of L0, the baselines and the full model."""
    t = _kind(table, "l0")
    cols = ["task", "seed", "lam", "n_kept", "n_heads_total", "score_l0", "score_random_mean", "score_importance",
            "score_full", "chance", "metric", "seconds"]
    c = t[cols].copy()
    c["seed"] = c["seed"].astype(int)
    c["frac_kept"] = c["n_kept"] / c["n_heads_total"]
    return c.sort_values(["task", "seed", "lam"]).reset_index(drop=True)



CONTRASTS = (("L0 - random", "score_l0", "score_random_mean"), ("L0 - importance", "score_l0", "score_importance"),
             ("importance - random", "score_importance", "score_random_mean"), ("L0 - full", "score_l0", "score_full"))


def curve_contrasts(curve: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Paired differences per (task, lambda) and per task over lambdas (``lam="all"``: each model's mean over its
    lambdas first), with t-intervals over the fine-tuned models (task x seed, the unit); tasks are not pooled (their
    metrics differ). Against the baselines only masks that prune something and keep something count (else every
    mask is the same); ``L0 - full`` uses every cell. Descriptive: the tests are the verdicts."""
    parts = []
    for name, a, b in CONTRASTS:
        c = curve if name == "L0 - full" else curve[(curve["n_kept"] > 0) & (curve["n_kept"] < curve["n_heads_total"])]
        d = c.assign(diff=c[a] - c[b], lam_all="all")
        if d.empty:
            continue
        kept = d.groupby(["task", "lam"])["n_kept"].mean().rename("mean_kept")
        total = d.groupby("task")["n_heads_total"].max().rename("n_heads_total")
        per = unit_summary(d, ["task", "lam"], ["task", "seed"], confidence=confidence).merge(
            kept.reset_index(), on=["task", "lam"])
        over = unit_summary(d, ["task", "lam_all"], ["task", "seed"], confidence=confidence).rename(columns={"lam_all": "lam"})
        over = over.merge(d.groupby("task")["n_kept"].mean().rename("mean_kept").reset_index(), on="task")
        both = pd.concat([per, over], ignore_index=True).merge(total.reset_index(), on="task")
        parts.append(both.assign(contrast=name))
    cols = ["contrast", "task", "lam", "n_pairs", "n_units", "mean_kept", "n_heads_total", "mean_diff", "ci_low", "ci_high"]
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


# ---------------------------------------------------------------------------------------------- survival
def sweep_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per (task, seed): heads kept at each lambda and the share of heads whose masks are nested across lambdas."""
    rows = []
    for (task, seed), g in _kind(table, "l0").groupby(["task", "seed"]):
        g = g.sort_values("lam")
        ms = torch.stack([mask_from_string(m) for m in g["mask"]])
        rows.append({"task": task, "seed": int(seed), "lambdas": " ".join(f"{l:g}" for l in g["lam"]),
                     "heads_kept": " ".join(str(int(n)) for n in g["n_kept"]), "monotone_share": survival.monotone_share(ms)})
    return pd.DataFrame(rows)



def rare_criterion_survival(table: pd.DataFrame, surv: pd.DataFrame, shares=RARE_SHARES, n_perm: int = 10000,
                            seed: int = 0, rare_share: float = RARE_SHARE, **thresholds) -> pd.DataFrame:
    """How the rare-word criterion (``rare_share`` above a threshold; fixed at ``specialized.RARE_SHARE``) would
    change the roles and the survival test, over ``shares`` (a sensitivity, never a selection).

    Per threshold: rare-word heads of the pre-trained model (all layers, first layer) and (mean) of the fine-tuned
    ones, specialized heads per fine-tuned model, and the mean AUC / one-sided p of specialized vs other heads and of
    rare-word vs other heads (:func:`survival_tests`); ``fixed``: the threshold is ``rare_share`` (the run's
    criterion). ``thresholds``: the other keyword arguments of :func:`role_table`. The counts alone, for the figure:
    :func:`rare_criterion_counts`.
    """
    rows = []
    for share in shares:
        roles = role_table(table, rare_share=share, **thresholds)
        t = survival_tests(surv, roles, n_perm, seed).set_index("group")
        pre, ft = roles[roles["source"] == "pretrained"], roles[roles["source"] != "pretrained"]
        rows.append({"rare_share": float(share), "fixed": bool(np.isclose(share, rare_share)),
                     "n_rare_pretrained": int(pre["rare"].sum()),
                     "n_rare_pretrained_first_layer": int((pre["rare"] & (pre["layer"] == 0)).sum()),
                     "mean_n_rare_finetuned": float(ft.groupby(["source", "seed"])["rare"].sum().mean()),
                     "mean_n_specialized_finetuned": float(ft.groupby(["source", "seed"])["specialized"].sum().mean()),
                     "auc_specialized": t.loc["specialized", "mean_auc"], "p_specialized": t.loc["specialized", "p_greater"],
                     "auc_rare": t.loc["rare-word", "mean_auc"], "p_rare": t.loc["rare-word", "p_greater"]})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- verdicts
# The claims are data (``specialized_heads_l0_claims.CLAIMS``, handed to :func:`verdicts`): each names its rule,
# gates and ``measure``, the key of :data:`MEASURES` that makes its measurements from the run's tables.
PRETRAINED_TASK = "pre-trained model"  # the task column of the rows about the one pre-trained model


def scale(cfg, n_heads: int | None = None) -> str:
    """The ``scale`` column: model, heads, training examples x epochs, seeds, gate steps, from the parameters."""
    heads = f", {n_heads} heads" if n_heads else ""
    ex = "all" if cfg.train_size is None else f"{cfg.train_size}"
    steps = f"{cfg.l0_steps} gate steps" if cfg.l0_steps is not None else f"{cfg.l0_epochs} gate epoch(s)"
    if cfg.l0_max_steps is not None:
        steps = f"{steps}, then on until the gates settle (at most {cfg.l0_max_steps})"
    return (f"{cfg.model}{heads}; {ex} training examples x {glue_workbench.epochs_text(cfg)}; seeds {list(cfg.seeds)}; {steps}; "
            "a small-scale test, not the paper's set-up (BERT-family encoders on GLUE, not NMT encoders)")


def full_scores(table: pd.DataFrame) -> pd.DataFrame:
    """Per fine-tuned model (task, seed): its full-model dev score and the task's chance score (scores cells)."""
    t = _kind(table, "scores")
    return pd.DataFrame({"task": t["task"].to_numpy(), "seed": t["seed"].astype(int).to_numpy(),
                         "score_full": t["score_full"].astype(float).to_numpy(),
                         "chance": t["chance"].astype(float).to_numpy()})


def _l0_pairs(curve: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """Per model: mean over its lambdas (masks that prune something and keep something) of ``a - b``."""
    c = curve[(curve["n_kept"] > 0) & (curve["n_kept"] < curve["n_heads_total"])]
    d = c.assign(diff=c[a] - c[b])
    return d.groupby(["task", "seed"], as_index=False, sort=False)["diff"].mean()


def most_prunable_rows(curve: pd.DataFrame) -> pd.DataFrame:
    """Per model: the L0 mask keeping the most heads among those keeping fewer than half ("most heads" pruned: more
    than half; chosen by its head count, never by its score), and ``diff`` = its score - the full model's."""
    rows = []
    for (task, seed), g in curve.groupby(["task", "seed"], sort=False):
        half = g[g["n_kept"] < 0.5 * g["n_heads_total"]]
        if len(half):
            r = half.sort_values(["n_kept", "lam"]).iloc[-1]
            rows.append({"task": task, "seed": int(seed), "lam": float(r["lam"]), "n_kept": int(r["n_kept"]),
                         "diff": float(r["score_l0"] - r["score_full"])})
    return pd.DataFrame(rows, columns=["task", "seed", "lam", "n_kept", "diff"])


# voita.most_prunable's two readings (Measurement.regime): "most" heads pruned, the primary one (the claim's words),
# and the paper's own share, a sensitivity analysis: 38 of its 48 encoder heads pruned, 10 kept
MOST_BELOW_HALF = "below_half"
PAPER_SHARE_READING = "paper_share"
PAPER_SHARE = 10 / 48
PAPER_SHARE_TEXT = "10/48"


def paper_share_rows(curve: pd.DataFrame, share: float) -> tuple[pd.DataFrame, dict]:
    """Per model: the L0 mask whose heads kept are nearest ``share`` of all heads (a tie: the smaller lambda, as
    :func:`role_survival.roles_at_budget`; an empty mask nearest is always a miss, 10/48 being beyond the tolerance),
    ``diff`` = its score - the full model's; and
    ``{(task, seed): text}`` of the models whose nearest mask keeps more than ``BUDGET_TOLERANCE`` x the heads away
    from the target (the evidence ``paper_share_misses`` of ``NearPaperShare``)."""
    rows, misses = [], {}
    for (task, seed), g in curve.groupby(["task", "seed"], sort=False):
        total = int(g["n_heads_total"].iloc[0])
        target = share * total
        r = role_survival.nearest_mask(g, target)
        rows.append({"task": task, "seed": int(seed), "lam": float(r["lam"]), "n_kept": int(r["n_kept"]),
                     "target": target, "diff": float(r["score_l0"] - r["score_full"])})
        if abs(int(r["n_kept"]) - target) > role_survival.BUDGET_TOLERANCE * total:
            misses[(task, int(seed))] = (f"{task} seed {int(seed)}: the L0 mask nearest {target:.3g} heads keeps "
                                         f"{int(r['n_kept'])} of {total} (tolerance +-"
                                         f"{role_survival.BUDGET_TOLERANCE * total:.3g})")
    return pd.DataFrame(rows, columns=["task", "seed", "lam", "n_kept", "target", "diff"]), misses


def role_heads_per_model(roles: pd.DataFrame) -> pd.DataFrame:
    """Per fine-tuned model (task, seed): heads per role (``positional``, ``syntactic``), rare-word heads in the
    first layer (``rare-word``), and specialized heads (``specialized``)."""
    ft = roles[roles["source"] != "pretrained"] if len(roles) else roles
    rows = []
    for (task, seed), g in (ft.groupby(["task", "seed"], sort=False) if len(ft) else ()):
        rows.append({"task": task, "seed": int(seed), "positional": int(g["positional"].sum()),
                     "syntactic": int(g["syntactic"].sum()), "rare-word": int((g["rare"] & (g["layer"] == 0)).sum()),
                     "specialized": int(g["specialized"].sum())})
    return pd.DataFrame(rows, columns=["task", "seed", "positional", "syntactic", "rare-word", "specialized"])


def pretrained_role_heads(roles: pd.DataFrame) -> dict[str, list[tuple[int, int]]] | None:
    """Per role (:data:`ROLE_NAMES`): the (layer, head) of the pre-trained model's heads of that role (rare-word: in
    the first layer only, as the claim says), from the rows of :func:`role_table` with ``source == "pretrained"``
    (the cell ``{"kind": "roles", "task": "pretrained"}``); None when the table has no such row (not measured)."""
    pre = roles[roles["source"] == "pretrained"] if len(roles) and "source" in roles else roles.iloc[0:0]
    if pre.empty:
        return None
    out = {}
    for role in ROLE_NAMES:
        has = role_mask(pre, role).astype(bool) & ((pre["layer"] == 0) if role == "rare-word" else True)
        g = pre[has].sort_values(["layer", "head"])
        out[role] = [(int(a), int(b)) for a, b in zip(g["layer"], g["head"])]
    return out


def presence_rows(budget: pd.DataFrame) -> pd.DataFrame:
    """Long rows (task, seed, role, effect) of :func:`roles_at_budget`: per model and role found in it,
    ``role_survival.presence_effect``."""
    rows = []
    for r in budget.to_dict("records"):
        for role in ROLE_NAMES:
            if r[f"n_{role}"] > 0:
                rows.append({"task": r["task"], "seed": int(r["seed"]), "role": role,
                             "effect": presence_effect(r[f"present_{role}"], r[f"random_{role}"])})
    return pd.DataFrame(rows, columns=["task", "seed", "role", "effect"])


def _role_totals(roles: pd.DataFrame, role: str) -> dict[str, int]:
    """Per task: heads of ``role`` over its fine-tuned models (any layer)."""
    ft = roles[roles["source"] != "pretrained"] if len(roles) else roles
    return {t: int(role_mask(g, role).sum()) for t, g in ft.groupby("task")} if len(ft) else {}


@dataclass(frozen=True)
class Run:
    """What the measurements of the claims are made from: the cells (``table``) and the analysis tables of a run
    (:func:`verdicts`' arguments), with ``full`` (:func:`full_scores`) and ``tasks`` (in the cells' order)."""

    table: pd.DataFrame
    agreement: pd.DataFrame
    roles: pd.DataFrame
    surv: pd.DataFrame
    budget: pd.DataFrame
    semantics: str
    full: pd.DataFrame
    tasks: tuple[str, ...]

    @property
    def curve(self) -> pd.DataFrame:
        return l0_curve(self.table)


Group = tuple[list[Measurement], dict]  # measurements evaluated together, and the evidence their gates read


def per_task(claim: Claim, run: Run, data: pd.DataFrame, value: str, *, setting: str = "", effect: str = "",
             empty: str = "no unit has a measurement", score_units: bool = False,
             regime: str = "") -> list[Measurement]:
    """One measurement per task of ``data`` rows (task, seed, ``value``), units (task, seed), the claim's unit; a task
    without a row is ``Measurement.absent`` ("``empty`` on <task>"). ``score_units``: the effect is in task-score
    units, so each measurement carries the full and chance scores (margins, pooling on full - chance). ``regime``:
    the reading measured (``Measurement.regime``): outside the claim's ``decided_in`` its rows are a sensitivity
    analysis."""
    out = []
    for task in run.tasks:
        d = data[data["task"] == task] if len(data) else data
        if d.empty:
            out.append(Measurement.absent(task, f"{empty} on {task}", setting=setting, semantics=run.semantics,
                                          unit=claim.unit, effect=effect, regime=regime))
            continue
        units = [(task, int(s)) for s in d["seed"]]
        kw = {}
        if score_units:
            f = run.full[run.full["task"] == task].set_index("seed")
            kw = {"full": [float(f.loc[u[1], "score_full"]) for u in dict.fromkeys(units)],
                  "chance": float(f["chance"].iloc[0])}
        out.append(Measurement(task, d[value].to_numpy(dtype=float), units, setting, run.semantics, effect,
                               claim.unit, regime=regime, **kw))
    return out


def _confidence(claim: Claim, run: Run) -> list[Group]:
    """Spearman(relevance, confidence) per model, one group per definition of confidence (:data:`CONFIDENCES`)."""
    out = []
    for conf, setting in CONFIDENCES.items():
        a = run.agreement
        rho = (a[a[["a", "b"]].apply(frozenset, axis=1) == frozenset({"relevance", conf})] if len(a)
               else pd.DataFrame(columns=["task", "seed", "spearman"]))
        empty = ("no defined Spearman (a constant score)" if len(rho) else
                 f"the scores cells do not record {conf} (cells made before it existed: RESULTS_VERSION 1)")
        out.append((per_task(claim, run, rho.dropna(subset=["spearman"]), "spearman", setting=setting,
                             effect=f"Spearman(relevance, {conf}) per model", empty=empty, regime=conf), {}))
    return out


def _role(claim: Claim) -> str:
    return claim.measure.split(":", 1)[1]


def _pretrained_heads(claim: Claim, run: Run) -> list[Group]:
    """The pre-trained model's count of the role's heads (rare-word: first layer), one unit (n = 1)."""
    role, pre = _role(claim), pretrained_role_heads(run.roles)
    if pre is None:
        m = Measurement.absent(PRETRAINED_TASK, "the pre-trained model's roles are not measured (its roles cell is "
                               "missing)", semantics=run.semantics, unit=claim.unit)
        return [([m], {})]
    effect = f"{role} heads of the pre-trained model" + (" (first layer)" if role == "rare-word" else "")
    m = Measurement(PRETRAINED_TASK, [float(len(pre[role]))], ["pretrained"], "", run.semantics, effect, claim.unit)
    return [([m], {"pretrained_heads": pre})]


def _finetuned_heads(claim: Claim, run: Run) -> list[Group]:
    """Heads of the role per fine-tuned model (rare-word: first layer); presence: models with one."""
    role = _role(claim)
    ms = per_task(claim, run, role_heads_per_model(run.roles), role, empty="no roles measured",
                  effect=f"{role} heads per model" + (" (first layer)" if role == "rare-word" else ""))
    return [(ms, {"pretrained_heads": pretrained_role_heads(run.roles)})]


def _most_prunable(claim: Claim, run: Run) -> list[Group]:
    """The primary reading ("most" heads pruned: the mask keeping the most heads below half) and the paper's own
    share (:data:`PAPER_SHARE` kept), a sensitivity analysis (``Claim.decided_in``)."""
    at_share, misses = paper_share_rows(run.curve, PAPER_SHARE)
    return [(per_task(claim, run, most_prunable_rows(run.curve), "diff", setting="< half the heads kept",
                      effect="score(L0) - score(full)", empty="no L0 mask keeps fewer than half of the heads",
                      score_units=True, regime=MOST_BELOW_HALF), {}),
            (per_task(claim, run, at_share, "diff", setting=f"nearest {PAPER_SHARE_TEXT} of the heads kept (the paper's)",
                      effect="score(L0) - score(full)", empty="no L0 mask", score_units=True,
                      regime=PAPER_SHARE_READING), {"paper_share_misses": misses})]


def _l0_against(baseline: str, name: str):
    def measure(claim: Claim, run: Run) -> list[Group]:
        return [(per_task(claim, run, _l0_pairs(run.curve, "score_l0", baseline), "diff",
                          effect=f"score(L0) - score({name}), mean over lambdas",
                          empty="no L0 mask prunes something and keeps something", score_units=True), {})]
    return measure


def _specialized_auc(claim: Claim, run: Run) -> list[Group]:
    auc = (survival_auc_per_model(run.surv, run.roles) if len(run.surv) and len(run.roles)
           else pd.DataFrame(columns=["task", "seed", "auc"]))
    ms = per_task(claim, run, auc.assign(effect=auc["auc"] - 0.5), "effect", effect="within-layer AUC - 0.5 per model",
                  empty="no model has a layer with specialized and other heads")
    return [(ms, {"role_counts": _role_totals(run.roles, "specialized")})]


def _roles_kept(claim: Claim, run: Run) -> list[Group]:
    """Per role (setting): kept - P(random mask keeps one) at the L0 mask nearest 17/48 of the heads."""
    pres = presence_rows(run.budget) if len(run.budget) else pd.DataFrame(columns=["task", "seed", "role", "effect"])
    counts = {role: _role_totals(run.roles, role) for role in ROLE_NAMES}
    misses = role_survival.budget_misses(run.budget, lambda r: (r["task"], int(r["seed"])),
                                         lambda r: f"{r['task']} seed {int(r['seed'])}") if len(run.budget) else {}
    chances = role_survival.role_chances(run.budget, lambda r: (r["task"], int(r["seed"]))) if len(run.budget) else {}
    return [(per_task(claim, run, pres[pres["role"] == role], "effect", setting=role,
                      effect="kept - P(random mask keeps one)", empty=f"no head of role '{role}' found"),
             {"role_counts": counts, "budget_misses": misses, "role_chances": chances}) for role in ROLE_NAMES]


MEASURES: dict[str, Callable[[Claim, Run], list[Group]]] = {
    "relevance_confidence_spearman": _confidence,
    **{f"pretrained_heads:{r}": _pretrained_heads for r in ROLE_NAMES},
    **{f"finetuned_heads:{r}": _finetuned_heads for r in ROLE_NAMES},
    "most_prunable": _most_prunable,
    "L0 - random": _l0_against("score_random_mean", "random"),
    "L0 - importance": _l0_against("score_importance", "importance"),
    "specialized_survival_auc": _specialized_auc,
    "roles_kept_at_17_of_48": _roles_kept,
}


def evaluate_group(claim: Claim, ms: Sequence[Measurement], evidence: Mapping, scale_: str) -> pd.DataFrame:
    """``claims.evaluate`` of one group: the measured tasks together (per task, then pooled), then each absent one
    alone (``not testable`` for its reason; an absent task never makes a pooled row)."""
    measured = [m for m in ms if not m.missing]
    parts = [evaluate(claim, measured, evidence=evidence, scale=scale_, study=NAME)] if measured else []
    parts += [evaluate(claim, [m], evidence=evidence, scale=scale_, study=NAME) for m in ms if m.missing]
    return pd.concat(parts, ignore_index=True) if parts else empty_table()


def convergence_evidence(table: pd.DataFrame) -> pd.DataFrame:
    """The convergence gate's evidence (:mod:`.convergence`): the full model of every (task, seed), its held-out curve
    as its scores cell recorded it (``full_model_history``; none in cells of before it was recorded)."""
    return convergence.table(convergence.full_rows(table[table["kind"] == "scores"], column="full_model_history"))


# the score columns of the cells and the metrics dicts they are read from (an L0 cell's random masks: a list)
_PER_MASK = {"scores": (("score_full", "metrics_full"),),
             "l0": (("score_l0", "metrics_l0"), ("score_random", "metrics_random"),
                    ("score_importance", "metrics_importance"))}


def in_verdict_metric(table: pd.DataFrame) -> pd.DataFrame:
    """The cells' table with each task scored by the metric its claims are decided on (``TaskSpec.verdict_metric``:
    MRPC by accuracy, as in every other study) where its cells store that metric for every mask (``metrics_full``;
    ``metrics_l0``, ``metrics_random``, ``metrics_importance``: cells made since 2026-12-06): the scores, the L0 cells'
    copy of the full model's, the random masks' mean and the chance level (the constant predictor's accuracy, from
    its F1 exactly: ``tasks.metrics.verdict_scores``) rewritten, ``metric`` naming it. A task whose cells store only
    their main metric stays in it (the standard profile's MRPC: F1); one whose cells are mixed is a ValueError
    naming the task (compute its cells again). Returns a new frame."""
    if table is None or len(table) == 0 or not {"task", "kind", "metric"} <= set(table.columns):
        return table
    out = table.copy()
    for task, spec in rescored_tasks(out["task"]):
        want = spec.verdict_metric
        rows = (out["task"] == task) & out["kind"].isin(tuple(_PER_MASK)) & (out["metric"] == spec.main_metric)
        if not rows.any():
            continue

        # the L0 cells decide (a scores cell always keeps the full model's metrics; an L0 cell made before
        # 2026-12-06 keeps only the L0 mask's)
        stored = pd.Series({i: all(isinstance(r.get(src), (dict, list)) for _, src in _PER_MASK[r["kind"]])
                            for i, r in out[rows].iterrows()}, dtype=bool)
        have = stored[out.loc[rows, "kind"] == "l0"]
        if not have.any():
            continue
        if not stored.all():
            n = int(stored.sum())
            raise ValueError(f"specialized_heads_l0: {task}'s cells store {want!r} (its claims' metric) for every mask "
                             f"in {n} of {int(rows.sum())} cells: compute the others again (--fresh --where "
                             f"task={task}), so that all are scored alike")
        full = {}
        for i, r in out[rows].iterrows():
            for col, src in _PER_MASK[r["kind"]]:
                v = r[src]
                out.at[i, col] = [float(m[want]) for m in v] if isinstance(v, list) else float(v[want])
            if r["kind"] == "scores":
                full[int(r["seed"])] = out.at[i, "score_full"]
            out.at[i, "chance"] = chance_accuracy(spec, float(r["chance"]))
            out.at[i, "metric"] = want
        for i, r in out[rows & (out["kind"] == "l0")].iterrows():
            out.at[i, "score_random_mean"] = float(np.mean(out.at[i, "score_random"]))
            if int(r["seed"]) not in full:
                raise ValueError(f"specialized_heads_l0: no scores cell of {task} seed {int(r['seed'])} to score "
                                 f"its full model in {want!r}")
            out.at[i, "score_full"] = full[int(r["seed"])]
    return out


def gates_evidence(table: pd.DataFrame) -> pd.DataFrame:
    """The L0 gates' evidence (:class:`preconditions.GatesSettled`): one row per L0 cell, the model (task, seed), its
    lambda, and whether its gates settled (:func:`preconditions.gates_settled` on the cell's ``history``)."""
    l0 = table[table["kind"] == "l0"] if "kind" in table else table.iloc[0:0]
    rows = [preconditions.gates_row((r["task"], int(r["seed"])), f"lambda {float(r['lam']):g}", r.get("history"))
            for _, r in l0.iterrows()]
    return pd.DataFrame(rows, columns=["unit", "gates", "settled", "moved"])


def verdicts(table: pd.DataFrame, agreement: pd.DataFrame, roles: pd.DataFrame, surv: pd.DataFrame,
             budget: pd.DataFrame, *, claims_: Sequence[Claim], semantics: str, scale_: str) -> pd.DataFrame:
    """The verdict table (``claims.COLUMNS``) of ``claims_`` (the study's ``CLAIMS``), every number from this run.

    ``table``: the cells; ``agreement``: :func:`score_agreement` per model; ``roles``: :func:`role_table`;
    ``surv``: :func:`survival_heads`; ``budget``: :func:`roles_at_budget`; ``semantics``: the ablation;
    ``scale_``: :func:`scale`. Each claim's measurements come from :data:`MEASURES` (its ``measure``), its word from
    its rule and gates (``claims.evaluate``, evidence: the full and chance scores, the pre-trained model's role heads,
    the role counts). Unit = the fine-tuned model (task, seed): values of one model (its lambdas) are averaged first;
    one measurement per task, a pooled row (its word withheld where a task is decided the other way); Holm over every test of the whole table
    (``claims.adjust``). The role-existence claims are about the one pre-trained model (the ``roles`` rows with
    ``source == "pretrained"``): one row each, task :data:`PRETRAINED_TASK`, ``not testable`` (n = 1: described by the
    count of its heads, the ``effect`` column), outside the family; their fine-tuned copies test the survival claims."""
    full = full_scores(table)
    run = Run(table, agreement, roles, surv, budget, semantics, full, tuple(dict.fromkeys(full["task"])))
    trained = {"full": {(r.task, int(r.seed)): r.score_full for r in full.itertuples()},
               "chance": dict(zip(full["task"], full["chance"])), "convergence": convergence_evidence(table),
               "gates": gates_evidence(table)}
    parts = []
    for claim in claims_:
        for ms, evidence in MEASURES[claim.measure](claim, run):
            rows = evaluate_group(claim, ms, {**trained, **evidence}, scale_)
            if claim.measure.startswith("pretrained_heads:") and len(rows) and len(ms[0].values):
                rows = _described(claim, rows, ms[0])
            parts.append(rows)
    out = adjust(pd.concat(parts, ignore_index=True))
    validate(out)
    return out


def _described(claim: Claim, rows: pd.DataFrame, m: Measurement) -> pd.DataFrame:
    """The row of an existence claim about the one pre-trained model: never tested (its gate says n = 1); the effect
    column is the count of the role's heads (the description), not the share of units with one (1 of 1 or 0 of 1),
    and the share's interval is left out."""
    if not ((rows["verdict"] == "not testable") & (rows["tests"] == "[]")).all():
        raise AssertionError(f"{claim.id}: a claim about one pre-trained model was tested")
    return rows.assign(effect=float(m.values[0]), ci_low=float("nan"), ci_high=float("nan"))
