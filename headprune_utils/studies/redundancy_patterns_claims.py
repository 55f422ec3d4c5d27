"""Study 4's claims as data, their decision rules and the verdict table (:func:`verdicts`), computed from the cells'
matrices (:class:`.redundancy_patterns_analysis.Matrices`) by the claims model (:mod:`headprune_utils.claims`).

Negative control. A pattern counts as evidence of LEARNED redundancy only if a randomly initialised model of the
same architecture (:data:`.redundancy_patterns_analysis.CONTROL`, run on the same probes) does not show it: an
untrained model's heads differ only by their random weights, so whatever it shares with the pre-trained model
(the same matrix on random tokens and on text, clusters) comes from the architecture and the inputs, not from
training. The control is one model, so it is judged at its point estimate by the claim's own criterion
(:func:`.redundancy_patterns_analysis.negative_control`): "the same" when its matrix is reproducible on the
reference probes (split-half Mantel p < 0.05: noise has no pattern) and its r - ceiling exceeds -0.1 x its
ceiling (``margins.SHARE``, the claims' margin); clusters when its silhouette beats the shuffled null
(permutation p < 0.05; a test that cannot reach 0.05 with the shuffles at hand leaves the control undecided, which
clears nothing). Rule: for ``bian.where``, ``bian.who_tasks`` and ``bian.who_random``, a task x setting where the
control shows the pattern is ``not testable`` (a failed precondition, :func:`control_gate`) with both models'
numbers in the reason; where it does not, the reason says the control passed; without control cells the reason
carries the caveat :data:`NO_RANDOM_INIT`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from .. import claims, clustering, margins, redundancy
from .base import Claim
from .redundancy_patterns_analysis import CONTROL, Matrices, negative_control, sameness

__all__ = ["CLAIMS", "CLAIM_RULES", "MLM_TRAINED", "NO_RANDOM_INIT", "scale_text", "mlm_trained", "control_gate",
           "verdicts"]

MLM_TRAINED = 0.5  # the MLM is trained when its final loss is at most this share of ln |V| (uniform guessing)
_SAME_TEXT = (f"non-inferiority of (r - ceiling) with margin {margins.SHARE:g} x (ceiling - chance), chance r = 0 "
              f"(margins.HEADROOM): 'the same' = r at most {margins.SHARE:g} x (ceiling - chance) below the ceiling")

CLAIMS: tuple[Claim, ...] = (
    Claim("bian.what_token", "ours (exploratory)",
          "Token-based distances between heads' attention maps agree with each other: the same heads are redundant.",
          quantity="per fine-tuned model (task x seed), on its task's inputs: mean Mantel r between its matrices of "
                   f"every two token-based distances, minus the ceiling min(split-half r of each); {_SAME_TEXT}",
          precondition="at least two token-based distances among the metrics; fine-tuned models of at least 2 "
                       "seeds per task (the unit; the pre-trained model alone is one unit)"),
    Claim("bian.what_sentence", "ours (exploratory)",
          "Sentence-based distances between heads' attention maps agree with each other.",
          quantity="as bian.what_token, for every two sentence-based distances",
          precondition="at least two sentence-based distances among the metrics; fine-tuned models of at least 2 "
                       "seeds per task"),
    Claim("bian.what_token_sentence", "ours (exploratory)",
          "Token-based and sentence-based distances agree.",
          quantity="as bian.what_token, for every pair of a token-based and a sentence-based distance",
          precondition="at least one distance of each kind among the metrics; fine-tuned models of at least 2 "
                       "seeds per task"),
    Claim("bian.where", "Bian et al. 2021 (Where)",
          "Heads form clusters of mutually redundant heads (more cluster structure than the same distances "
          "without structure).",
          quantity="per fine-tuned model (task x seed), its cluster_metric matrix on its task's inputs: silhouette "
                   "of the groups minus the mean of the same criterion on the matrix shuffled over head pairs; "
                   "superiority (> 0), not supported below 0.1 (margins.CORRELATION). The pre-trained model's "
                   "clusters are described, not tested (one model)",
          precondition="fine-tuned models of at least 2 seeds per task; the randomly initialised model (negative "
                       "control, same architecture, on the task's inputs) has no cluster structure (permutation p >= "
                       "0.05 against its shuffled null): else the structure is the architecture's and the inputs', "
                       "not learned"),
    Claim("bian.when", "Bian et al. 2021 (When)",
          "The redundancy patterns are the same before and after fine-tuning (phase-independent).",
          quantity="per fine-tuned model (task x seed): Mantel r between the pre-trained and the fine-tuned model's "
                   f"matrix on the task's inputs, minus the probe's split-half ceiling; {_SAME_TEXT}",
          precondition="fine-tuned models of at least 2 seeds per task"),
    Claim("bian.who_tasks", "Bian et al. 2021 (Who)",
          "The redundancy patterns are the same across GLUE tasks (task-agnostic).",
          quantity="per pair of fine-tuned tasks and seed: Mantel r between the model fine-tuned on one task and the "
                   "model of the same seed fine-tuned on the other (each on its own task's inputs), minus the mean "
                   f"of their split-half ceilings; {_SAME_TEXT}. Pairs of tasks share models: never pooled",
          precondition="fine-tuned models of at least 2 tasks, with at least 2 seeds in common; the randomly "
                       "initialised model (negative control) is NOT the same on the two tasks' inputs by the same "
                       "criterion: else sameness across inputs is the architecture's, not learned"),
    Claim("bian.who_random", "Bian et al. 2021 (Who)",
          "The redundancy patterns are the same on random token sequences as on task inputs.",
          quantity="Mantel r between the pre-trained model's matrices on a random-token probe and on a task probe, "
                   f"minus the task probe's split-half ceiling; {_SAME_TEXT}",
          precondition="random-token probes of at least 2 independently trained models (they run on the "
                       "pre-trained model only: one unit, so not testable here); the randomly initialised model "
                       "(negative control, on the same random-token and task probes) is NOT the same on random tokens "
                       "as on task inputs by the same criterion: else the sameness is the architecture's, not learned"),
    Claim("bian.why", "Bian et al. 2021 (Why; the direction is ours: the paper reports that dropout influences "
          "redundancy)",
          "More dropout makes heads more redundant (lower mean distance); the paper varies pre-training dropout, "
          "here continued masked-LM training.",
          quantity="per MLM run (seed): OLS slope of the mean distance on the dropout ratio; superiority (< 0) per "
                   "distance, Holm over the distances (and the rest of the study's family); no smallest slope of "
                   "interest is declared, so it is supported or contradicted only",
          precondition="at least two dropout ratios and 2 MLM seeds; the MLM head is trained: every run's final "
                       "masked-LM loss is at most 0.5 x ln |V| (ln |V| = uniform guessing; a head that learned only "
                       "token frequencies stays near 0.7 x ln |V|)"),
)


# ---------------------------------------------------------------------------------------------- verdicts

NO_RANDOM_INIT = ("no randomly initialised model was run as a negative control (random_init_control is off, or its "
                  "cells are missing), so a pattern that the architecture or the inputs alone produce cannot be "
                  "ruled out")


def scale_text(cfg) -> str:
    """What the run is, from ``cfg``: model, heads, the fine-tuned models (examples x epochs, seeds), probes, the
    MLM runs; whether it is the paper's set-up (Bian et al.: bert-base-uncased, full GLUE, pre-training)."""
    n_layers, n_heads = cfg.head_shape()
    train = "full training sets" if cfg.train_size is None else f"{cfg.train_size} training examples"
    mlm_part = (f"; dropout: {cfg.mlm_steps} steps of continued MLM training x {len(cfg.mlm_seeds)} seed(s), "
                "not pre-training" if cfg.dropouts else "")
    text = (f"{cfg.model} ({n_layers} x {n_heads} = {n_layers * n_heads} heads); fine-tuned models: {train} x "
            f"{cfg.epochs} epochs, seeds {', '.join(str(s) for s in cfg.seeds)}; probes of {cfg.probe_size} sentences"
            + mlm_part)
    paper = cfg.model == "bert-base-uncased" and cfg.train_size is None
    return text + ("" if paper else "; a small-scale test, not the paper's set-up")


def _kind(metric: str) -> str:
    return "token" if metric in redundancy.TOKEN_METRICS else "sentence"


def _ft_models(mats: Matrices, cfg, tasks: list[str]) -> list[tuple[str, int, str, str]]:
    """``(task, seed, model, probe)`` of every fine-tuned model whose cell is in ``mats``."""
    have = set(mats.keys())
    return [(t, s, f"finetuned-{t}-s{s}", f"task-{t}") for t in tasks for s in cfg.seeds
            if (f"finetuned-{t}-s{s}", f"task-{t}") in have]


def _same(effect: str) -> str:
    return f"{effect} (Mantel r minus the split-half ceiling)"


def _what(mats, cfg, tasks, ka, kb, sem):
    """Per fine-tuned task, units = its models: mean over the metric pairs of kinds (ka, kb) of r(a, b) minus the
    ceiling min(split-half a, split-half b) of that model's probe; ``full`` = the mean ceiling, chance 0."""
    metrics = list(cfg.metrics)
    pairs = [(a, b) for i, a in enumerate(metrics) for b in metrics[i + 1:] if {_kind(a), _kind(b)} == {ka, kb}
             and (ka != kb or _kind(a) == ka)]
    if not pairs:
        return [], f"no pair of {ka}-based and {kb}-based distances among the metrics {metrics}"
    rows = []
    for task, seed, model, probe in _ft_models(mats, cfg, tasks):
        sh = {m: mats.split_half(model, probe, m) for m in {x for p in pairs for x in p}}
        r = [clustering.mantel(mats.get(model, probe, a), mats.get(model, probe, b), n_perm=0)[0] for a, b in pairs]
        c = [min(sh[a], sh[b]) for a, b in pairs]
        rows.append((task, seed, float(np.mean(r) - np.mean(c)), float(np.mean(c))))
    setting = ", ".join(f"{a}~{b}" for a, b in pairs)
    out = []
    for task in dict.fromkeys(r[0] for r in rows):
        g = [r for r in rows if r[0] == task]
        out.append(claims.Measurement(task, [r[2] for r in g], [(task, r[1]) for r in g], setting, sem,
                                      effect=_same("mean r between the distances"), full=[r[3] for r in g], chance=0.0))
    return out, "" if out else "no fine-tuned model's cells"


def _where(mats, cfg, tasks, sem):
    """Per fine-tuned task, units = its models: the silhouette of the groups (as :func:`where` chooses them) minus
    the mean of the same criterion on ``n_null`` shuffles of that model's ``cluster_metric`` matrix."""
    k_range, out = (cfg.k_min, cfg.k_max), []
    rows = []
    for task, seed, model, probe in _ft_models(mats, cfg, tasks):
        d = mats.get(model, probe, cfg.cluster_metric)
        sil = clustering.cluster_heads(d, k_range=k_range, order=False, min_size=cfg.min_cluster_size).silhouette
        null = clustering.silhouette_null(d, k_range, n_perm=cfg.n_null, min_size=cfg.min_cluster_size)
        if np.isfinite(sil) and np.isfinite(null).any():
            rows.append((task, seed, float(sil - np.nanmean(null))))
    for task in dict.fromkeys(r[0] for r in rows):
        g = [r for r in rows if r[0] == task]
        out.append(claims.Measurement(task, [r[2] for r in g], [(task, r[1]) for r in g], cfg.cluster_metric, sem,
                                      effect="silhouette minus the shuffled-distance null's mean"))
    return out, "" if out else "no fine-tuned model with two groups of heads (or no fine-tuned model's cells)"


def _when(when_t: pd.DataFrame, sem):
    out = []
    for (metric, task), g in when_t.groupby(["metric", "task"], sort=False):
        out.append(claims.Measurement(task, (g["mantel_r"] - g["split_half_r"]).tolist(),
                                      [(task, s) for s in g["seed"]], metric, sem,
                                      effect=_same("r(pre-trained, fine-tuned) on the task's inputs"),
                                      full=g["split_half_r"].tolist(), chance=0.0))
    return out, "" if out else "no fine-tuned model"


def _who_tasks(mats, cfg, tasks, sem):
    """One list of measurements per pair of fine-tuned tasks (evaluated apart: pairs share models, so they are never
    pooled): per seed s, r between the models (A, s) and (B, s), each on its own task's inputs, minus the mean of
    the two models' split-half ceilings."""
    models = _ft_models(mats, cfg, tasks)
    done = sorted({t for t, *_ in models}, key=tasks.index)
    if len(done) < 2:
        return [], f"fine-tuned models of {len(done)} task(s) ({', '.join(done) or 'none'}): task-agnostic compares " \
                   "fine-tuned models of different tasks"
    by = {(t, s): (m, p) for t, s, m, p in models}
    groups = []
    for i, a in enumerate(done):
        for b in done[i + 1:]:
            ms = []
            for metric in cfg.metrics:
                vals, fulls, units = [], [], []
                for s in cfg.seeds:
                    if (a, s) in by and (b, s) in by:
                        (ma, pa), (mb, pb) = by[(a, s)], by[(b, s)]
                        r = clustering.mantel(mats.get(ma, pa, metric), mats.get(mb, pb, metric), n_perm=0)[0]
                        c = (mats.split_half(ma, pa, metric) + mats.split_half(mb, pb, metric)) / 2
                        vals.append(r - c), fulls.append(c), units.append(s)
                if vals:
                    ms.append(claims.Measurement(f"{a} vs {b}", vals, units, metric, sem,
                                                 effect=_same("r(model of one task, model of the other, same seed)"),
                                                 unit="seed (a model of each task)", full=fulls, chance=0.0))
            if ms:
                groups.append(ms)
    return groups, "" if groups else "no seed with a fine-tuned model of both tasks"


def _who_random(mats, cfg, sem):
    """The pre-trained model only (the random probes run on it alone): r(random probe, task probe) minus the
    task probe's split-half ceiling (:func:`.redundancy_patterns_analysis.sameness`), every random x task probe;
    one unit (the pre-trained model)."""
    have = {p for m, p in mats.keys() if m == "pretrained"}
    rand = sorted(p for p in have if p.startswith("random-"))
    task = sorted(p for p in have if p.startswith("task-"))
    if not rand or not task:
        return [], f"needs a random-token probe and a task probe of the pre-trained model (random: {len(rand)}, " \
                   f"task: {len(task)})"
    out = []
    for metric in cfg.metrics:
        pairs = [sameness(mats, "pretrained", metric, r_, t) for r_ in rand for t in task]
        out.append(claims.Measurement("random tokens vs task inputs", [v for v, _ in pairs], ["pretrained"] * len(pairs),
                                      metric, sem, effect=_same("r(random-token probe, task probe)"),
                                      unit="model (pre-trained)", full=[c for _, c in pairs], chance=0.0))
    return out, ""


def _why(why_runs: pd.DataFrame, sem):
    """Per distance, units = MLM seeds: the OLS slope of the mean distance on the dropout ratio within the seed."""
    if why_runs.empty or why_runs["dropout"].nunique() < 2:
        return [], "fewer than two dropout ratios were run"
    out = []
    for metric, g in why_runs.groupby("metric", sort=False):
        slopes, units = [], []
        for s, gs in g.groupby("seed"):
            if gs["dropout"].nunique() > 1:
                slopes.append(float(sps.linregress(gs["dropout"], gs["mean_distance"]).slope)), units.append(s)
        out.append(claims.Measurement("generic text", slopes, units, metric, sem,
                                      effect="slope of the mean distance on the dropout ratio", unit="MLM run (seed)"))
    return out, ""


def mlm_trained(mats: Matrices, cfg, vocab_size: int) -> str | None:
    """Gate of the dropout claim: every MLM run ends with a masked-LM loss at most ``MLM_TRAINED`` x ln |V|. ln |V|
    is the loss of guessing uniformly; a head that learned only how frequent tokens are stays near the unigram
    entropy of English word pieces (about 0.7 x ln |V| for a 30k vocabulary), a pre-trained BERT reaches about
    0.2 x ln |V|. ``None`` when it holds, else the failed precondition with the recorded losses."""
    names = [f"mlm-p{p:g}-s{s}" for p in cfg.dropouts for s in cfg.mlm_seeds]
    extra = mats.extra
    if "loss_last" not in extra.columns:
        return "the cells record no masked-LM loss: cannot tell whether the MLM head is trained"
    rows = [extra.loc[(n, "generic")] for n in names if (n, "generic") in extra.index]
    last = np.array([float(r["loss_last"]) for r in rows], dtype=float)
    if not len(last) or not np.isfinite(last).all():
        return "the cells record no masked-LM loss for every MLM run: cannot tell whether the MLM head is trained"
    uniform = float(np.log(vocab_size))
    if (last <= MLM_TRAINED * uniform).all():
        return None
    first = [float(r["head_loss_first"]) for r in rows if "head_loss_first" in r and np.isfinite(r["head_loss_first"])]
    start = f"; the untrained head started at {min(first):.3g}-{max(first):.3g}" if first else ""
    return (f"the MLM head is not trained: the masked-LM loss ends at {last.min():.3g}-{last.max():.3g} nats = "
            f"{last.min() / uniform:.2f}-{last.max() / uniform:.2f} x ln |V| (uniform guessing: {uniform:.3g}{start}), "
            f"above the stated {MLM_TRAINED:g} x ln |V|: no better than predicting token frequencies")


def _no_numbers(claim, study, scale, task, setting, sem, reason, label) -> dict:
    """A ``not testable`` row without numbers (nothing could be measured)."""
    nan = float("nan")
    row = {"study": study, "claim_id": claim.id, "paper": claim.paper, "claim": claim.text, "task": task,
           "setting": setting, "semantics": sem, "analysis": "primary", "effect": nan, "ci_low": nan, "ci_high": nan,
           "n_units": 0, "unit": claims.DEFAULT_UNIT, "test": label, "p": nan, "p_adjusted": nan, "p_test": "",
           "margin": nan, "verdict": claims.VERDICTS[-1], "reason": reason, "scale": scale, "tests": "[]",
           "unit_values": "[]"}
    assert tuple(row) == claims.COLUMNS, "keep _no_numbers in step with claims.COLUMNS"
    return row


# Margins: headprune_utils.margins, each metric's entry. "The same": r within a tenth of the way from chance (r = 0)
# to the probe's split-half ceiling (HEADROOM, the ceiling as "full"). Clusters: silhouette minus its shuffled
# null, a tenth of the distance from no structure (0) to perfect (1) (CORRELATION, whose entry covers the
# silhouette). Dropout: NONE, because a slope of the mean distance per unit of dropout has no declared smallest
# effect of interest (its size depends on the distance and on the dropout range): the claim can be supported or
# contradicted, never "not supported".
_SAME = claims.NonInferiority(margins.HEADROOM)
CLAIM_RULES = {
    # claim id -> rule (how the measurements are built: the _what/_where/... functions above; gates in verdicts)
    "bian.what_token": _SAME,
    "bian.what_sentence": _SAME,
    "bian.what_token_sentence": _SAME,
    "bian.where": claims.Superiority("greater", margin=margins.CORRELATION),
    "bian.when": _SAME,
    "bian.who_tasks": _SAME,
    "bian.who_random": _SAME,
    "bian.why": claims.Superiority("less", margin=margins.NONE),
}
_NEEDS_CONTROL = ("bian.where", "bian.who_tasks", "bian.who_random")


def control_gate(control: pd.DataFrame, claim_id: str) -> claims.Gate:
    """Gate of the claims that need the negative control (module docstring): the failed precondition when the
    randomly initialised model shows the measured pattern on the measurement's task x setting (both models' numbers
    in the reason), or when its test cannot reach its level (too few shuffles: a control that cannot fail clears
    nothing), else None. ``control``: :func:`.redundancy_patterns_analysis.negative_control`; a task x setting
    it does not cover passes (the caveat :data:`NO_RANDOM_INIT` then goes into the reason)."""
    rows = control[control["claim_id"] == claim_id] if len(control) else control

    def gate(m: claims.Measurement) -> str | None:
        here = rows[(rows["task"] == m.task) & (rows["setting"] == m.setting)] if len(rows) else rows
        ctrl = here[here["model"] != "pretrained"]
        if ctrl.empty:
            return None
        if not bool(ctrl["decidable"].iloc[0]):
            return (f"the negative control (randomly initialised {CONTROL}) cannot be judged: "
                    f"{ctrl['criterion'].iloc[0]}")
        if not bool(ctrl["shows_pattern"].iloc[0]):
            return None
        pre = here[here["model"] == "pretrained"]
        pre_text = f"; the pre-trained model: {pre['criterion'].iloc[0]}" if len(pre) else ""
        return (f"the negative control (randomly initialised {CONTROL}, same architecture and probes) shows the same "
                f"pattern ({ctrl['pattern'].iloc[0]}: {ctrl['criterion'].iloc[0]}){pre_text}: the pattern is not "
                "evidence of learned redundancy")

    return gate


def _control_note(control: pd.DataFrame, row) -> str:
    """What the negative control says of a row of a claim that needs it, for the reason column: the caveat without
    control cells, "passed" with the control's numbers where it does not show the pattern (a failed control is
    already the row's reason, :func:`control_gate`)."""
    if control.empty:
        return "; caveat: " + NO_RANDOM_INIT
    ctrl = control[(control["claim_id"] == row["claim_id"]) & (control["model"] != "pretrained")]
    task, setting = str(row["task"]), str(row["setting"])
    if task == "n/a":  # nothing was measured (e.g. one fine-tuned task): nothing for the control to say
        return ""
    if task.startswith("all (") and task.endswith(")"):  # a pooled row: the tasks pooled
        here = ctrl[ctrl["task"].isin(task[len("all ("):-1].split(", ")) & (ctrl["setting"] == setting)]
    else:
        here = ctrl[(ctrl["task"] == task) & (ctrl["setting"] == setting)]
    if here.empty:
        return "; caveat: the negative control (randomly initialised model) was not measured here"
    failed = here["shows_pattern"] | ~here["decidable"].astype(bool)
    if failed.any():
        if task.startswith("all ("):
            shown = ", ".join(here.loc[failed, "task"])
            return (f"; the negative control (randomly initialised model) shows the pattern, or cannot be judged, on "
                    f"{shown} (see its row)")
        return ""  # the gate's reason says it
    return ("; negative control passed: the randomly initialised model does not show the pattern ("
            + "; ".join(f"{r.task}: {r.criterion}" for r in here.itertuples()) + ")")


def verdicts(mats: Matrices, cfg, when_t: pd.DataFrame, why_runs: pd.DataFrame, tasks: list[str],
             vocab_size: int | None = None, claim_list=None, study: str = "redundancy_patterns") -> pd.DataFrame:
    """The study's verdict table (:data:`claims.COLUMNS`). Units: the fine-tuned models (task x seed) for
    what/where/when, seed-matched pairs of fine-tuned models of two tasks for who_tasks, the pre-trained model (one
    unit) for who_random, the MLM runs (seeds) for why. ``tasks``: the fine-tuned tasks; ``vocab_size``: the
    model's vocabulary (the MLM gate; default: read from ``cfg.model``'s config). The negative control (module
    docstring) gates where / who_tasks / who_random when the cells of the randomly initialised model are there."""
    claim_list = CLAIMS if claim_list is None else claim_list
    by_id = {c.id: c for c in claim_list}
    scale, sem = scale_text(cfg), ""  # no head is masked in this study: no ablation semantics
    if vocab_size is None and cfg.dropouts:
        from .. import models
        vocab_size = int(models.load_config(cfg.model).vocab_size)
    built = {
        "bian.what_token": _what(mats, cfg, tasks, "token", "token", sem),
        "bian.what_sentence": _what(mats, cfg, tasks, "sentence", "sentence", sem),
        "bian.what_token_sentence": _what(mats, cfg, tasks, "token", "sentence", sem),
        "bian.where": _where(mats, cfg, tasks, sem),
        "bian.when": _when(when_t, sem),
        "bian.who_tasks": _who_tasks(mats, cfg, tasks, sem),
        "bian.who_random": _who_random(mats, cfg, sem),
        "bian.why": _why(why_runs, sem),
    }
    mlm_reason = mlm_trained(mats, cfg, vocab_size) if built["bian.why"][0] else None
    control = negative_control(mats, cfg, tasks)
    gates = {
        "bian.where": [control_gate(control, "bian.where")],
        "bian.who_tasks": [control_gate(control, "bian.who_tasks")],
        "bian.who_random": [lambda m: "the random-token probes run on the pre-trained model only: one model",
                            control_gate(control, "bian.who_random")],
        "bian.why": [lambda m: mlm_reason],
    }
    parts = []
    for cid, rule in CLAIM_RULES.items():
        claim = by_id[cid]
        ms, why_not = built[cid]
        if not ms:
            label = f"{rule.kind}; not run"
            parts.append(pd.DataFrame([_no_numbers(claim, study, scale, "n/a", "", sem, why_not, label)],
                                      columns=list(claims.COLUMNS)))
            continue
        groups = ms if cid == "bian.who_tasks" else [ms]
        for g in groups:
            parts.append(claims.evaluate(claim, rule, g, gates.get(cid, ()), scale=scale, study=study))
    table = claims.adjust(pd.concat(parts, ignore_index=True))
    for i in table.index[table["claim_id"].isin(_NEEDS_CONTROL)]:
        table.loc[i, "reason"] = str(table.loc[i, "reason"]) + _control_note(control, table.loc[i])
    claims.validate(table)
    return table
