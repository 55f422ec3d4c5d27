"""Study 6's analysis: pure functions over the tidy table of the ``specialized_heads_l0`` cells (one row per cell).

Head scores and their agreement, the L0 curve against its baselines, the rare-word threshold's effect on the
survival test, and the verdicts. The roles and the survival-by-role analysis, which study 7 shares, live in
:mod:`headprune_utils.role_survival` (re-exported here); the shared decision rules in
:mod:`headprune_utils.verdict_rules`.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import torch
from scipy import stats as sps

from .. import margins, stats, survival
from ..head_scores import rank_agreement
from ..masks import mask_from_string
from ..role_survival import (  # noqa: F401 (re-exported: the notebook and the tests read them from this study)
    ROLE_NAMES, VOITA_FRACTION, role_counts, role_map_data, role_stability, role_table, roles_at_budget,
    survival_heads, survival_map_data, survival_tests, survival_with_roles,
)
from ..claims import (Equivalence, Gate, Measurement, NonInferiority, Presence, Superiority, adjust, evaluate,
                      role_found, validate)
from ..role_survival import role_mask, survival_auc_per_model  # noqa: F401
from ..verdict_rules import presence_effect, trained_gate, untestable
from .base import Claim

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
    from ..paired_contrasts import unit_summary

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



def rare_ratio_sensitivity(table: pd.DataFrame, surv: pd.DataFrame, ratios=(2.0, 3.0, 4.0, 5.0), n_perm: int = 10000,
                           seed: int = 0, **thresholds) -> pd.DataFrame:
    """How the rare-word threshold (share >= ratio x chance) changes the roles and the survival test.

    Per ratio: rare-word heads of the pre-trained model and (mean) of the fine-tuned ones, specialized heads per
    fine-tuned model, and the mean AUC / one-sided p of specialized vs other heads and of rare-word vs other heads.
    ``thresholds``: the other keyword arguments of :func:`role_table`.
    """
    rows = []
    for ratio in ratios:
        roles = role_table(table, rare_ratio=ratio, **thresholds)
        t = survival_tests(surv, roles, n_perm, seed).set_index("group")
        pre, ft = roles[roles["source"] == "pretrained"], roles[roles["source"] != "pretrained"]
        rows.append({"rare_ratio": ratio, "n_rare_pretrained": int(pre["rare"].sum()),
                     "mean_n_rare_finetuned": float(ft.groupby(["source", "seed"])["rare"].sum().mean()),
                     "mean_n_specialized_finetuned": float(ft.groupby(["source", "seed"])["specialized"].sum().mean()),
                     "auc_specialized": t.loc["specialized", "mean_auc"], "p_specialized": t.loc["specialized", "p_greater"],
                     "auc_rare": t.loc["rare-word", "mean_auc"], "p_rare": t.loc["rare-word", "p_greater"]})
    return pd.DataFrame(rows)



# ---------------------------------------------------------------------------------------------- claims
VOITA = "Voita et al. 2019"
CLAIMS: tuple[Claim, ...] = (
    Claim("voita.important_are_confident", f"{VOITA} (Sec. 4)",
          "The most important heads (LRP relevance) are also the most confident.",
          quantity="per fine-tuned model (task x seed): Spearman(first-order relevance, confidence) over its heads; "
                   "superiority (> 0), one-sample t over models, margin margins.CORRELATION (0.1: a tenth of the "
                   "distance from no association to perfect; a smaller rho is not supported); under BOTH definitions of confidence (setting): "
                   "special-token keys excluded (the max over the non-special keys, not renormalised: Voita et al. "
                   "exclude EOS; the primary reading) and every key (sensitivity: a head parking its attention on "
                   "[CLS]/[SEP] counts as confident); both rows are in the Holm family",
          precondition="the full model above chance (+ 0.1 x (1 - chance)); relevance here is first-order "
                       "(gradient x activation), not LRP; the special-key-free confidence needs scores cells of "
                       "RESULTS_VERSION >= 2"),
    # The role claims ("heads of this role exist") are about THE pre-trained model: every fine-tuned model here starts
    # from one pre-trained MiniLM, which already has (or lacks) the heads, so for "a model trained this way has such
    # heads" n = 1 model; it is described (claims.evaluate, not testable by a gate that names the count), never tested
    # over its fine-tuned copies (pseudo-replicates). What the copies do test is another claim, declared as such below
    # (ours.*_survive: the role survives fine-tuning).
    Claim("voita.positional_heads", f"{VOITA} (Sec. 5)",
          "Positional heads exist: the maximum attention falls on the previous or next token >= 90% of the time.",
          quantity="positional heads of THE pre-trained model (UD English-EWT); one model (n = 1): described (the count "
                   "and the heads), not tested; the fine-tuned copies test ours.positional_heads_survive",
          precondition="a claim about one pre-trained model (n = 1 model) is never tested (described only); UD "
                       "English-EWT sentences"),
    Claim("voita.syntactic_heads", f"{VOITA} (Sec. 5)",
          "Syntactic heads exist: they point to a word's dependency relative more often than the best "
          "fixed-offset baseline (by >= 10 points).",
          quantity="syntactic heads of THE pre-trained model (word pieces aggregated); one model (n = 1): described "
                   "(the count and the heads), not tested; the fine-tuned copies test ours.syntactic_heads_survive",
          precondition="a claim about one pre-trained model (n = 1 model) is never tested (described only); UD "
                       "sentences with the relations"),
    Claim("voita.rare_word_head", f"{VOITA} (Sec. 5)",
          "A rare-word head exists: it attends to the least frequent token of the sentence, in the first layer.",
          quantity="rare-word heads IN THE FIRST LAYER of THE pre-trained model (share pointing at the rarest token "
                   ">= rare_ratio x chance, binomial p < rare_alpha); one model (n = 1): described (the count and the "
                   "heads), not tested; the fine-tuned copies test ours.rare_word_head_survives",
          precondition="a claim about one pre-trained model (n = 1 model) is never tested (described only); "
                       "word-piece frequencies of the stated corpus"),
    Claim("ours.positional_heads_survive", "ours (exploratory)",
          "Fine-tuning keeps the pre-trained model's positional heads: most fine-tuned models still have one.",
          quantity="positional heads per fine-tuned model (UD English-EWT); presence: share of models with one, exact "
                   "binomial against 1/2, per task and pooled",
          precondition="the full model above chance (+ 0.1 x (1 - chance)); the pre-trained model has a positional "
                       "head (else nothing can survive); UD English-EWT sentences"),
    Claim("ours.syntactic_heads_survive", "ours (exploratory)",
          "Fine-tuning keeps the pre-trained model's syntactic heads: most fine-tuned models still have one.",
          quantity="syntactic heads per fine-tuned model (word pieces aggregated); presence: share of models with one, "
                   "exact binomial against 1/2, per task and pooled",
          precondition="the full model above chance (+ 0.1 x (1 - chance)); the pre-trained model has a syntactic "
                       "head (else nothing can survive); UD sentences with the relations"),
    Claim("ours.rare_word_head_survives", "ours (exploratory)",
          "Fine-tuning keeps the pre-trained model's rare-word head: most fine-tuned models still have one "
          "(in the first layer).",
          quantity="rare-word heads IN THE FIRST LAYER per fine-tuned model (share pointing at the rarest token >= "
                   "rare_ratio x chance, binomial p < rare_alpha); presence: share of models with one, exact binomial "
                   "against 1/2, per task and pooled",
          precondition="the full model above chance (+ 0.1 x (1 - chance)); the pre-trained model has a rare-word "
                       "head in the first layer (else nothing can survive); word-piece frequencies of the stated corpus"),
    Claim("voita.most_prunable", f"{VOITA} (Sec. 6)",
          "Most encoder heads can be pruned with little loss (38 of 48 pruned for -0.15 BLEU).",
          quantity="per model: score(L0 mask) - score(full) at the L0 mask keeping the most heads among those keeping "
                   "at most half; non-inferiority, margin margins.TASK_SCORE (a tenth of full - chance of the task)",
          precondition="the full model above chance (+ 0.1 x (1 - chance)); an L0 mask that prunes at least half"),
    Claim("voita.l0_beats_random", f"{VOITA} (Sec. 6)",
          "L0 gates choose heads that matter: better than random heads at the same count (no retraining).",
          quantity="per model: score(L0 mask) - score(random mask at its head count), mean over its lambdas; "
                   "superiority, per task, pooled on (full - chance); margin margins.TASK_SCORE (a tenth of full - "
                   "chance of the task: a smaller gain is not supported)",
          precondition="the full model above chance (+ 0.1 x (1 - chance)); masks that prune something and keep "
                       "something"),
    Claim("exploratory.l0_vs_importance", "ours (exploratory)",
          "L0 gates and gradient importance choose equally good heads at the same head count.",
          quantity="per model: score(L0 mask) - score(least-important heads at its head count), mean over its "
                   "lambdas; equivalence, margin margins.TASK_SCORE (a tenth of full - chance of the task)",
          precondition="the full model above chance (+ 0.1 x (1 - chance)); masks that prune something and keep "
                       "something"),
    Claim("voita.specialized_last_pruned", f"{VOITA} (Sec. 6.2)",
          "Specialized heads are the last to be pruned.",
          quantity="per model: AUC of the survival level, specialized vs the other heads OF THE SAME LAYER, mean over "
                   "layers with both, minus 0.5; superiority, margin margins.AUC (0.05: a tenth of the distance from "
                   "AUC 0.5 to 1); the rare-word threshold's effect: a descriptive table",
          precondition="the full model above chance (+ 0.1 x (1 - chance)); at least one specialized head found; a "
                       "layer with specialized and other heads"),
    Claim("voita.functions_at_17_of_48", f"{VOITA} (Sec. 6.2)",
          "With 17 of 48 heads kept, every identified head function is still present.",
          quantity="per model and role: 1 if the L0 mask nearest 17/48 of the heads keeps one of the role's heads, "
                   "minus the chance that a random mask of that size would; superiority, per role, margin "
                   "margins.SHARE_OF_HEADS (0.1: a tenth of the range of a share)",
          precondition="the full model above chance (+ 0.1 x (1 - chance)); at least one head of the role found"),
)
CLAIM = {c.id: c for c in CLAIMS}
TRAINED_SHARE = 0.1             # a trained model: above chance by a tenth of the chance-to-perfect range


def rules() -> dict:
    """Claim id -> the rule its measurements are tested by (gates and measurements: :func:`verdicts`). Every margin
    is its metric's smallest effect of interest, declared once in :mod:`headprune_utils.margins`: score differences
    ("little loss", "equally good", L0 against random) ``margins.TASK_SCORE`` (0.1 x (full - chance) of the task);
    Spearman rho ``margins.CORRELATION``; within-layer AUC - 0.5 ``margins.AUC``; presence beyond chance (a
    difference of shares) ``margins.SHARE_OF_HEADS``. A superiority claim uses its margin only to say ``not
    supported``; the survival-of-a-role claims (``claims.Presence``) test the share of fine-tuned models with the role
    against 1/2. The existence claims (``voita.*`` roles, also ``claims.Presence``) are about the one pre-trained
    model (n = 1): described, never tested (:func:`pretrained_role_rows`)."""
    return {
        "voita.important_are_confident": Superiority("greater", margin=margins.CORRELATION),
        "voita.positional_heads": Presence(),
        "voita.syntactic_heads": Presence(),
        "voita.rare_word_head": Presence(),
        "ours.positional_heads_survive": Presence(),
        "ours.syntactic_heads_survive": Presence(),
        "ours.rare_word_head_survives": Presence(),
        "voita.most_prunable": NonInferiority(margins.TASK_SCORE),
        "voita.l0_beats_random": Superiority("greater", margin=margins.TASK_SCORE),
        "exploratory.l0_vs_importance": Equivalence(margins.TASK_SCORE),
        "voita.specialized_last_pruned": Superiority("greater", margin=margins.AUC),
        "voita.functions_at_17_of_48": Superiority("greater", margin=margins.SHARE_OF_HEADS),
    }


RULES = rules()
UNIT = "model (task x seed)"


def scale(cfg, n_heads: int | None = None) -> str:
    """The ``scale`` column: model, heads, training examples x epochs, seeds, gate steps, from the parameters."""
    heads = f", {n_heads} heads" if n_heads else ""
    ex = "all" if cfg.train_size is None else f"{cfg.train_size}"
    steps = f"{cfg.l0_steps} gate steps" if cfg.l0_steps is not None else f"{cfg.l0_epochs} gate epoch(s)"
    return (f"{cfg.model}{heads}; {ex} training examples x {cfg.epochs} epochs; seeds {list(cfg.seeds)}; {steps}; "
            "a small-scale test, not the paper's set-up (BERT-family encoders on GLUE, not NMT encoders)")


def full_scores(table: pd.DataFrame) -> pd.DataFrame:
    """Per fine-tuned model (task, seed): its full-model dev score and the task's chance score (scores cells)."""
    t = _kind(table, "scores")
    return pd.DataFrame({"task": t["task"].to_numpy(), "seed": t["seed"].astype(int).to_numpy(),
                         "score_full": t["score_full"].astype(float).to_numpy(),
                         "chance": t["chance"].astype(float).to_numpy()})


def claim_rows(claim: Claim, rule, data: pd.DataFrame, value: str, gates, semantics: str, scale_: str,
               tasks: list[str], setting: str = "", effect: str = "", full: pd.DataFrame | None = None,
               empty: str = "no unit has a measurement", in_score_units: bool = True) -> pd.DataFrame:
    """``claims.evaluate`` of one claim over ``data`` rows (task, seed, ``value``), one measurement per task
    (units = (task, seed)); ``full``: :func:`full_scores` rows, given when the effect is in score units (margins,
    pooling on full - chance) when ``in_score_units``. Tasks without a row get ``not testable`` with ``empty`` as the
    reason (and what the gates say of the task's models, ``full``'s units)."""
    ms, out = [], []
    for task in tasks:
        d = data[data["task"] == task] if len(data) else data
        if d.empty:
            units = [] if full is None else [(task, int(x)) for x in full.loc[full["task"] == task, "seed"]]
            out.append(untestable(claim, rule, task, f"{empty} on {task}", setting=setting, semantics=semantics,
                                  unit=UNIT, scale=scale_, study=NAME, units=units, gates=gates))
            continue
        units = [(task, int(s)) for s in d["seed"]]
        kw = {}
        if full is not None and in_score_units:
            f = full[full["task"] == task].set_index("seed")
            kw = {"full": [float(f.loc[u[1], "score_full"]) for u in dict.fromkeys(units)],
                  "chance": float(f["chance"].iloc[0])}
        ms.append(Measurement(task, d[value].to_numpy(dtype=float), units, setting, semantics, effect, UNIT, **kw))
    if ms:
        out.insert(0, evaluate(claim, rule, ms, gates, scale=scale_, study=NAME))
    return pd.concat(out, ignore_index=True)


def _l0_pairs(curve: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """Per model: mean over its lambdas (masks that prune something and keep something) of ``a - b``."""
    c = curve[(curve["n_kept"] > 0) & (curve["n_kept"] < curve["n_heads_total"])]
    d = c.assign(diff=c[a] - c[b])
    return d.groupby(["task", "seed"], as_index=False, sort=False)["diff"].mean()


def most_prunable_rows(curve: pd.DataFrame) -> pd.DataFrame:
    """Per model: the L0 mask keeping the most heads among those keeping at most half (chosen by its head count,
    never by its score), and ``diff`` = its score - the full model's."""
    rows = []
    for (task, seed), g in curve.groupby(["task", "seed"], sort=False):
        half = g[g["n_kept"] <= 0.5 * g["n_heads_total"]]
        if len(half):
            r = half.sort_values(["n_kept", "lam"]).iloc[-1]
            rows.append({"task": task, "seed": int(seed), "lam": float(r["lam"]), "n_kept": int(r["n_kept"]),
                         "diff": float(r["score_l0"] - r["score_full"])})
    return pd.DataFrame(rows, columns=["task", "seed", "lam", "n_kept", "diff"])


def role_heads_per_model(roles: pd.DataFrame) -> pd.DataFrame:
    """Per fine-tuned model (task, seed): heads per role (``positional``, ``syntactic``), rare-word heads in the
    first layer (``rare-word``), and specialized heads (``specialized``)."""
    ft = roles[roles["source"] != "pretrained"]
    rows = []
    for (task, seed), g in ft.groupby(["task", "seed"], sort=False):
        rows.append({"task": task, "seed": int(seed), "positional": int(g["positional"].sum()),
                     "syntactic": int(g["syntactic"].sum()), "rare-word": int((g["rare"] & (g["layer"] == 0)).sum()),
                     "specialized": int(g["specialized"].sum())})
    return pd.DataFrame(rows, columns=["task", "seed", "positional", "syntactic", "rare-word", "specialized"])


# (the existence claim about the pre-trained model, the survival claim over its fine-tuned copies, the role)
ROLE_CLAIMS: tuple[tuple[str, str, str], ...] = (
    ("voita.positional_heads", "ours.positional_heads_survive", "positional"),
    ("voita.syntactic_heads", "ours.syntactic_heads_survive", "syntactic"),
    ("voita.rare_word_head", "ours.rare_word_head_survives", "rare-word"),
)
PRETRAINED_TASK = "pre-trained model"
PRETRAINED_UNIT = "pre-trained model"
_LIST_AT_MOST = 8  # a role's heads are listed (layer-head) when there are at most this many


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


def _heads_text(role: str, heads: list[tuple[int, int]]) -> str:
    word = f"{role} head" + ("" if len(heads) == 1 else "s") + (" in the first layer" if role == "rare-word" else "")
    listed = (f" ({', '.join(f'{a}-{b}' for a, b in heads)}; layer-head)" if 0 < len(heads) <= _LIST_AT_MOST else "")
    return f"{len(heads)} {word}{listed}"


def one_pretrained_model_gate(role: str, heads: list[tuple[int, int]]) -> Gate:
    """Gate of an existence claim about the pre-trained model: always fails (one model, n = 1: described, never
    tested), its reason naming the count of the role's heads (and the heads when few)."""

    def gate(m: Measurement) -> str:
        return ("a claim about one pre-trained model (n = 1 model): described, not tested: the pre-trained MiniLM has "
                + _heads_text(role, heads))

    return gate


def pretrained_has_role_gate(role: str, heads: list[tuple[int, int]] | None) -> Gate:
    """Gate of a survival claim: the pre-trained model has a head of ``role`` (else nothing can survive fine-tuning;
    ``heads`` None: the pre-trained model's roles were not measured)."""

    def gate(m: Measurement) -> str | None:
        if heads is None:
            return "the pre-trained model's roles are not measured: nothing to say survives fine-tuning"
        if heads:
            return None
        return (f"the pre-trained model has no {role} head" + (" in the first layer" if role == "rare-word" else "")
                + ": nothing to survive fine-tuning")

    return gate


def pretrained_role_rows(claim: Claim, rule, heads: list[tuple[int, int]] | None, role: str, semantics: str,
                         scale_: str) -> pd.DataFrame:
    """The verdict row of an existence claim about the pre-trained model (``claims.evaluate`` of one measurement:
    the pre-trained model, one unit, its count of ``role`` heads): ``not testable`` by
    :func:`one_pretrained_model_gate` (n = 1), outside the Holm family. The effect column is the count of heads (the
    description), not the share of units with one (1 of 1 or 0 of 1), and the share's interval is left out."""
    if heads is None:
        return untestable(claim, rule, PRETRAINED_TASK, "the pre-trained model's roles are not measured (its roles "
                          "cell is missing)", semantics=semantics, unit=PRETRAINED_UNIT, scale=scale_, study=NAME)
    effect = f"{role} heads of the pre-trained model" + (" (first layer)" if role == "rare-word" else "")
    m = Measurement(PRETRAINED_TASK, [float(len(heads))], ["pretrained"], "", semantics, effect, PRETRAINED_UNIT)
    row = evaluate(claim, rule, [m], [one_pretrained_model_gate(role, heads)], scale=scale_, study=NAME)
    if not ((row["verdict"] == "not testable") & (row["tests"] == "[]")).all():
        raise AssertionError(f"{claim.id}: a claim about one pre-trained model was tested")
    return row.assign(effect=float(len(heads)), ci_low=float("nan"), ci_high=float("nan"))


def presence_rows(budget: pd.DataFrame) -> pd.DataFrame:
    """Long rows (task, seed, role, effect) of :func:`roles_at_budget`: per model and role found in it,
    ``verdict_rules.presence_effect``."""
    rows = []
    for r in budget.to_dict("records"):
        for role in ROLE_NAMES:
            if r[f"n_{role}"] > 0:
                rows.append({"task": r["task"], "seed": int(r["seed"]), "role": role,
                             "effect": presence_effect(r[f"present_{role}"], r[f"random_{role}"])})
    return pd.DataFrame(rows, columns=["task", "seed", "role", "effect"])


def verdicts(table: pd.DataFrame, agreement: pd.DataFrame, roles: pd.DataFrame, surv: pd.DataFrame,
             budget: pd.DataFrame, semantics: str, scale_: str) -> pd.DataFrame:
    """The verdict table (``claims.COLUMNS``) of :data:`CLAIMS`, every number from this run.

    ``table``: the cells; ``agreement``: :func:`score_agreement` per model; ``roles``: :func:`role_table`;
    ``surv``: :func:`survival_heads`; ``budget``: :func:`roles_at_budget`; ``semantics``: the ablation;
    ``scale_``: :func:`scale`. Rules and margins: :func:`rules`. Unit = the fine-tuned model (task, seed): values of
    one model (its lambdas) are averaged first; one measurement per task, a pooled row when tasks agree; Holm over
    every test of the whole table (``claims.adjust``). The role-existence claims (:data:`ROLE_CLAIMS`) are about the
    one pre-trained model (the ``roles`` rows with ``source == "pretrained"``): one row each, task
    :data:`PRETRAINED_TASK`, ``not testable`` (n = 1: described by the count of its heads), outside the family; their
    fine-tuned copies test the survival claims (``ours.*_survive*``)."""
    rule = rules()
    full = full_scores(table)
    tasks = list(dict.fromkeys(full["task"]))
    trained = trained_gate({(r.task, int(r.seed)): r.score_full for r in full.itertuples()},
                           dict(zip(full["task"], full["chance"])), TRAINED_SHARE)
    curve = l0_curve(table)
    per_model = role_heads_per_model(roles)
    parts = []

    def add(cid, data, value, gates=(), setting="", effect="", full_=None, empty="no unit has a measurement"):
        parts.append(claim_rows(CLAIM[cid], rule[cid], data, value, [trained, *gates], semantics, scale_, tasks,
                                setting, effect, full, empty, in_score_units=full_ is not None))

    for conf, setting in CONFIDENCES.items():  # both definitions of confidence (the claim's quantity)
        if len(agreement):
            rho = agreement[agreement[["a", "b"]].apply(frozenset, axis=1) == frozenset({"relevance", conf})]
        else:
            rho = pd.DataFrame(columns=["task", "seed", "spearman"])
        empty = ("no defined Spearman (a constant score)" if len(rho) else
                 f"the scores cells do not record {conf} (cells made before it existed: RESULTS_VERSION 1)")
        add("voita.important_are_confident", rho.dropna(subset=["spearman"]), "spearman", setting=setting,
            effect=f"Spearman(relevance, {conf}) per model", empty=empty)
    pre = pretrained_role_heads(roles)
    for voita, survives, role in ROLE_CLAIMS:  # n = 1 (the pre-trained model): described; its copies: survival
        parts.append(pretrained_role_rows(CLAIM[voita], rule[voita], None if pre is None else pre[role], role,
                                          semantics, scale_))
        add(survives, per_model, role, gates=[pretrained_has_role_gate(role, None if pre is None else pre[role])],
            effect=f"{role} heads per model" + (" (first layer)" if role == "rare-word" else ""),
            empty="no roles measured")
    add("voita.most_prunable", most_prunable_rows(curve), "diff", setting="<= half the heads kept",
        effect="score(L0) - score(full)", full_=full, empty="no L0 mask keeps at most half of the heads")
    add("voita.l0_beats_random", _l0_pairs(curve, "score_l0", "score_random_mean"), "diff",
        effect="score(L0) - score(random), mean over lambdas", full_=full,
        empty="no L0 mask prunes something and keeps something")
    add("exploratory.l0_vs_importance", _l0_pairs(curve, "score_l0", "score_importance"), "diff",
        effect="score(L0) - score(importance), mean over lambdas", full_=full,
        empty="no L0 mask prunes something and keeps something")
    auc = survival_auc_per_model(surv, roles) if len(surv) and len(roles) else pd.DataFrame(columns=["task", "seed", "auc"])
    add("voita.specialized_last_pruned", auc.assign(effect=auc["auc"] - 0.5), "effect",
        gates=[role_found("specialized", _role_totals(roles, "specialized"))], effect="within-layer AUC - 0.5 per model",
        empty="no model has a layer with specialized and other heads")
    pres = presence_rows(budget) if len(budget) else pd.DataFrame(columns=["task", "seed", "role", "effect"])
    for role in ROLE_NAMES:
        add("voita.functions_at_17_of_48", pres[pres["role"] == role], "effect",
            gates=[role_found(role, _role_totals(roles, role))],
            setting=role, effect="kept - P(random mask keeps one)", empty=f"no head of role '{role}' found")
    out = adjust(pd.concat(parts, ignore_index=True))
    validate(out)
    return out


def _role_totals(roles: pd.DataFrame, role: str) -> dict[str, int]:
    """Per task: heads of ``role`` over its fine-tuned models (any layer)."""
    ft = roles[roles["source"] != "pretrained"]
    return {t: int(role_mask(g, role).sum()) for t, g in ft.groupby("task")} if len(ft) else {}
