"""Study 4's claims as data (:data:`CLAIMS`): what each claim says, how it is decided (its rule, with its margin from
:mod:`headprune_utils.analysis.margins`), its gates, the figure that shows it and what the analysis measures for it
(``measure``: a key of :data:`.redundancy_patterns_analysis.MEASUREMENTS`). The study sets ``claims = CLAIMS``;
:func:`.redundancy_patterns_analysis.claim_verdicts` decides them with :func:`headprune_utils.analysis.claims.evaluate` and the
evidence the gates read (``control``, ``control_measured``, ``described``, ``mlm_losses``, ``vocab_size``).

The unit is the thing that varies. Every model here comes from ONE pre-trained model: its fine-tuned copies (task x
seed) inherit its matrices, so they are no replications of a claim about the pre-trained model itself. Such a claim
(``bian.where``: its heads form clusters; ``bian.when``: its patterns are the same before and after fine-tuning;
``bian.who_tasks``: the same across tasks; ``bian.who_random``: the same on random tokens) has n = 1 pre-trained model: it is described, never tested (its row
is ``not testable``, the reason "n = 1 pre-trained model: described, not tested" with the numbers, :data:`ONE_MODEL`;
the cells hold each probe's two halves, not per-sentence matrices, so there is no bootstrap by sentence to give).
What the fine-tuned copies can test is another claim, about fine-tuning this pre-trained model, where each copy IS a
unit: ``ours.clusters_after_finetuning`` (each copy has cluster structure), ``ours.patterns_survive_finetuning``
(each copy's matrix is the same as the pre-trained model's) and ``ours.tasks_agree_after_finetuning`` (copies
fine-tuned on two tasks with the same seed have the same matrices).

Negative control. A pattern counts as evidence of LEARNED redundancy only if a randomly initialised model of the
same architecture (run on the same probes) does not show it: whatever it shares with the pre-trained model comes
from the architecture and the inputs, not from training. The control is one model, judged at its point estimate by
the claim's own criterion (:func:`.redundancy_patterns_analysis.negative_control`). A claim that needs it carries a
:class:`ControlGate` naming the pattern: ``not testable`` where the control shows the pattern (or cannot be judged,
or was not measured there), with both models' numbers in the reason (evidence ``control``:
:func:`.redundancy_patterns_analysis.control_failures`).

Margins. "The same": r within a tenth of the way from chance (r = 0) to its attenuation ceiling
(``margins.HEADROOM``, the ceiling as "full"): every comparison is made like with like
(:meth:`.redundancy_patterns_analysis.Matrices.compare`: r between half-probe matrices of disjoint sentences, the
ceiling sqrt(split-half r of each matrix), Spearman's attenuation bound at that size; since 2026-12-06, before which
full-probe r was set against one split-half r). Clusters: silhouette minus its shuffled null, a tenth of the distance
from no structure (0) to perfect (1) (``margins.CORRELATION``, whose entry covers the silhouette). Dropout:
``margins.NONE``: a slope of the mean distance per unit of dropout has no declared smallest effect of interest (its
size depends on the distance and the dropout range), so that claim (two-sided: the paper names no direction) can be
supported, never "not supported" nor "contradicted".
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from headprune_utils.analysis import claims, margins, preconditions
from headprune_utils.studies.redundancy_patterns_analysis import CONTROL_ALPHA, PRETRAINED_UNIT

__all__ = ["CLAIMS", "MLM_TRAINED", "PRETRAINED_UNIT", "ONE_MODEL", "ControlGate", "MlmTrained"]

MLM_TRAINED = 0.5  # the MLM is trained when its final loss is at most this share of ln |V| (uniform guessing)
_SAME = claims.NonInferiority(margins.HEADROOM)
_CLUSTERS = claims.Superiority("greater", margin=margins.CORRELATION)


def _one_model(m: claims.Measurement, evidence: Mapping) -> str | None:
    """Fails unless the measurement has 2+ pre-trained models (units); the reason is the description (evidence
    ``described``: ``{(task, setting): text}`` or ``{setting: text}``, from the analysis)."""
    if m.n_units >= 2:
        return None
    described = evidence.get("described", {})
    return ("n = 1 pre-trained model: described, not tested: "
            + described.get((m.task, m.setting), described.get(m.setting, "(no description)")))


# a claim about the pre-trained model itself: its unit is a pre-trained model, and a run has one
ONE_MODEL = preconditions.Check(
    "at least 2 independently pre-trained models (the unit of a claim about the pre-trained model; its fine-tuned "
    "copies are not replications of it): with one (n = 1), the claim is described, never tested", _one_model)


@dataclass(frozen=True)
class ControlGate(claims.Gate):
    """The randomly initialised model (negative control, same architecture and probes) does not show ``pattern`` (the
    ``claim_id`` of :func:`.redundancy_patterns_analysis.negative_control`'s rows) on the measurement's task x
    setting by the same criterion. Evidence ``control``: ``{(pattern, task, setting): reason}`` where it shows it or
    cannot be judged (:func:`.redundancy_patterns_analysis.control_failures`); ``control_measured``: the
    ``(pattern, task, setting)`` it was measured on (:func:`.redundancy_patterns_analysis.control_measured`). A task x
    setting where the control was not measured fails too: the precondition was never checked."""

    pattern: str
    says: str

    def text(self) -> str:
        return self.says

    def check(self, m: claims.Measurement, evidence: Mapping) -> str | None:
        key = (self.pattern, m.task, m.setting)
        failed = evidence.get("control", {}).get(key)
        if failed:
            return failed
        if key not in evidence.get("control_measured", frozenset()):
            return (f"the negative control (randomly initialised model, same architecture and probes) was not measured "
                    f"on {m.task} ({m.setting}): a pattern the architecture or the inputs alone produce cannot be "
                    "ruled out")
        return None


@dataclass(frozen=True)
class MlmTrained(claims.Gate):
    """Every MLM run ends with a masked-LM loss at most ``share`` x ln |V|. ln |V| is the loss of guessing uniformly; a
    head that learned only how frequent tokens are stays near the unigram entropy of English word pieces (about 0.7 x
    ln |V| for a 30k vocabulary), a pre-trained BERT reaches about 0.2 x ln |V|. Evidence ``mlm_losses``
    (:func:`.redundancy_patterns_analysis.mlm_losses`: ``recorded``, ``last``, ``head_first``) and ``vocab_size``."""

    share: float = MLM_TRAINED

    def text(self) -> str:
        return (f"the MLM head is trained: every run's final masked-LM loss is at most {self.share:g} x ln |V| (ln |V| "
                "= uniform guessing; a head that learned only token frequencies stays near 0.7 x ln |V|)")

    def check(self, m: claims.Measurement, evidence: Mapping) -> str | None:
        losses = evidence["mlm_losses"]
        if not losses["recorded"]:
            return "the cells record no masked-LM loss: cannot tell whether the MLM head is trained"
        last = np.asarray(losses["last"], dtype=float)
        if not len(last) or not np.isfinite(last).all():
            return "the cells record no masked-LM loss for every MLM run: cannot tell whether the MLM head is trained"
        uniform = float(np.log(evidence["vocab_size"]))
        if (last <= self.share * uniform).all():
            return None
        first = [float(x) for x in losses["head_first"] if np.isfinite(x)]
        start = f"; the untrained head started at {min(first):.3g}-{max(first):.3g}" if first else ""
        return (f"the MLM head is not trained: the masked-LM loss ends at {last.min():.3g}-{last.max():.3g} nats = "
                f"{last.min() / uniform:.2f}-{last.max() / uniform:.2f} x ln |V| (uniform guessing: {uniform:.3g}"
                f"{start}), above the stated {self.share:g} x ln |V|: no better than predicting token frequencies")


def _same_text(model: str) -> str:
    return (f"the randomly initialised model (negative control, same architecture and probes) is NOT the same {model} "
            f"by the same criterion (its matrix reproducible across the probe's halves, split-half Mantel p < "
            f"{CONTROL_ALPHA:g}, and r - ceiling above -{margins.SHARE:g} x its ceiling): else the sameness is the "
            "architecture's, not learned")


RANDOM_TOKENS = preconditions.Check(
    "random-token probes of at least 2 independently trained models (they run on the pre-trained model only)",
    lambda m, evidence: "the random-token probes run on the pre-trained model only: one model")

# every fine-tuned model behind a row reached the plateau of its held-out score (the rule of studies 1-3, 5 and 6: a
# claim about a fine-tuned model's heads assumes a model trained enough; evidence ``convergence``: one row per fine-tuned
# model, from the curve its cells record, redundancy_patterns_analysis.convergence_evidence; cells of before the curve
# was recorded cannot be judged)
CONVERGED = preconditions.Converged(no_curve="no validation split, or cells computed before the curve was recorded")


def _pair_converged(m: claims.Measurement, evidence: Mapping) -> str | None:
    """:data:`CONVERGED` for a row of two tasks (``"A vs B"``, units: seeds): both tasks' models of those seeds."""
    for task in m.task.split(" vs "):
        why = CONVERGED.check(replace(m, task=task, units=[(task, int(s)) for s in m.units]), evidence)
        if why:
            return why
    return None


PAIR_CONVERGED = preconditions.Check(
    "every fine-tuned model behind the row, of both tasks, reached the plateau of its held-out score (trained "
    f"{CONVERGED.patience} epochs past its best without beating it)", _pair_converged)

_FT = ("n = the fine-tuned models (task x seed) of a task, each an independent fine-tuning (seed) of the one "
       "pre-trained model")
_N1 = "n = 1 pre-trained model (every model of the study comes from it)"

CLAIMS: tuple[claims.Claim, ...] = (
    claims.Claim(
        "ours.what_token", "ours (exploratory)",
        "Token-based distances between heads' attention maps agree with each other: the same heads are redundant.",
        rule=_SAME,
        metric="per fine-tuned model (task x seed), on its task's inputs: mean Mantel r between its matrices of every "
               "two token-based distances (halves of disjoint sentences), minus the attenuation ceiling",
        regime="fine-tuned (the full models of studies 1-3)", semantics="", gates=(CONVERGED,), figure="matrices_by_distance",
        measure="what_token",
        note=f"needs at least two token-based distances among the metrics. {_FT}"),
    claims.Claim(
        "ours.what_sentence", "ours (exploratory)",
        "Sentence-based distances between heads' attention maps agree with each other.",
        rule=_SAME,
        metric="as ours.what_token, for every two sentence-based distances",
        regime="fine-tuned (the full models of studies 1-3)", semantics="", gates=(CONVERGED,), figure="matrices_by_distance",
        measure="what_sentence",
        note=f"needs at least two sentence-based distances among the metrics. {_FT}"),
    claims.Claim(
        "ours.what_token_sentence", "ours (exploratory)",
        "Token-based and sentence-based distances agree.",
        rule=_SAME,
        metric="as ours.what_token, for every pair of a token-based and a sentence-based distance",
        regime="fine-tuned (the full models of studies 1-3)", semantics="", gates=(CONVERGED,), figure="matrices_by_distance",
        measure="what_token_sentence",
        note=f"needs at least one distance of each kind among the metrics. {_FT}"),
    claims.Claim(
        "bian.where", "Bian et al. 2021 (Where)",
        "Heads form clusters of mutually redundant heads (more cluster structure than the same distances "
        "without structure).",
        rule=_CLUSTERS,
        metric="the pre-trained model's cluster_metric matrix on generic text: silhouette of the groups minus the mean "
               "of the same criterion on the matrix shuffled over head pairs",
        regime="the pre-trained model", semantics="", gates=(ONE_MODEL,), figure="cluster_map",
        measure="pretrained_clusters", unit=PRETRAINED_UNIT,
        note=f"{_N1}: a claim about its heads, described (with the shuffled-distance permutation p and the negative "
             "control on the same text), never tested; its fine-tuned copies are not replications of it (they "
             "inherit its structure) and test ours.clusters_after_finetuning instead"),
    claims.Claim(
        "ours.clusters_after_finetuning", "ours (exploratory)",
        "The fine-tuned copies of the pre-trained model have clusters of mutually redundant heads (more cluster "
        "structure than the same distances without structure).",
        rule=_CLUSTERS,
        metric="per fine-tuned model (task x seed), its cluster_metric matrix on its task's inputs: silhouette of the "
               "groups minus the mean of the same criterion on the matrix shuffled over head pairs",
        regime="fine-tuned from the one pre-trained model", semantics="",
        gates=(CONVERGED, ControlGate("bian.where", f"the randomly initialised model (negative control, same architecture, on "
                                         f"the task's inputs) has no cluster structure (permutation p >= "
                                         f"{CONTROL_ALPHA:g} against its shuffled null): else the structure is the "
                                         "architecture's and the inputs', not learned"),),
        figure="cluster_map", measure="finetuned_clusters",
        note=f"a claim about fine-tuning this one pre-trained model, not about pre-trained models: {_FT}"),
    claims.Claim(
        "bian.when", "Bian et al. 2021 (When)",
        "The redundancy patterns are the same before and after fine-tuning (phase-independent).",
        rule=_SAME,
        metric="per distance: Mantel r between the pre-trained model's and a fine-tuned copy's matrix on the task's "
               "inputs (halves of disjoint sentences), minus the attenuation ceiling, described over its fine-tuned copies "
               "(task x seed)",
        regime="the pre-trained model (against its fine-tuned copies)", semantics="", gates=(ONE_MODEL,),
        figure="phase_independence", measure="pretrained_phase", unit=PRETRAINED_UNIT,
        note=f"{_N1}: phase independence is a property of a pre-trained model, so it is described (the mean and range "
             "over its fine-tuned copies), never tested; the copies test ours.patterns_survive_finetuning"),
    claims.Claim(
        "ours.patterns_survive_finetuning", "ours (exploratory)",
        "Fine-tuning keeps the pre-trained model's redundancy patterns: each fine-tuned copy's matrix is the same as "
        "the pre-trained model's on the task's inputs.",
        rule=_SAME,
        metric="per fine-tuned model (task x seed): Mantel r between the pre-trained and the fine-tuned model's matrix "
               "on the task's inputs (halves of disjoint sentences), minus the attenuation ceiling",
        regime="fine-tuned from the one pre-trained model, compared with it", semantics="", gates=(CONVERGED,),
        figure="phase_independence", measure="finetuned_phase",
        note=f"a claim about fine-tuning this one pre-trained model, not about pre-trained models: {_FT}, each "
             "compared with the pre-trained model"),
    claims.Claim(
        "bian.who_tasks", "Bian et al. 2021 (Who)",
        "The redundancy patterns are the same across GLUE tasks (task-agnostic).",
        rule=_SAME,
        metric="per pair of tasks and distance: Mantel r between the pre-trained model's matrices on the two tasks' "
               "inputs, minus the attenuation ceiling (described with its fine-tuned copies' pairs)",
        regime="the pre-trained model (on each task's inputs)", semantics="",
        gates=(ONE_MODEL, ControlGate("bian.who_tasks", _same_text("on the two tasks' inputs"))),
        figure="probe_agreement", measure="pretrained_who_tasks", unit=PRETRAINED_UNIT,
        note=f"{_N1}: task-agnostic redundancy is a property of a pre-trained model, so it is described (per pair of "
             "tasks), never tested; until 2026-12-06 it was tested over seed-matched pairs of its fine-tuned copies, "
             "which are no replications of it (they inherit its matrices): that test is now "
             "ours.tasks_agree_after_finetuning"),
    claims.Claim(
        "ours.tasks_agree_after_finetuning", "ours (exploratory)",
        "Copies of the pre-trained model fine-tuned on two tasks (same seed) have the same redundancy patterns.",
        rule=_SAME,
        metric="per pair of fine-tuned tasks and seed: Mantel r between the model fine-tuned on one task and the model "
               "of the same seed fine-tuned on the other (each on its own task's inputs), minus the attenuation "
               "ceiling. Pairs of tasks share models: never pooled",
        regime="fine-tuned from the one pre-trained model (a model of each task, same seed)", semantics="",
        gates=(PAIR_CONVERGED, ControlGate("bian.who_tasks", _same_text("on the two tasks' inputs"))),
        figure="probe_agreement", measure="who_tasks", unit="seed (a model of each task)",
        note="a claim about fine-tuning this one pre-trained model, not about pre-trained models: n = the seeds with "
             "a fine-tuned model of both tasks (at least 2 needed), per pair of tasks"),
    claims.Claim(
        "bian.who_random", "Bian et al. 2021 (Who)",
        "The redundancy patterns are the same on random token sequences as on task inputs.",
        rule=_SAME,
        metric="Mantel r between the pre-trained model's matrices on a random-token probe and on a task probe, minus "
               "the attenuation ceiling",
        regime="the pre-trained model", semantics="",
        gates=(RANDOM_TOKENS, ControlGate("bian.who_random", _same_text("on random tokens as on task inputs"))),
        figure="probe_agreement_control", measure="who_random", unit="model (pre-trained)",
        note=f"{_N1}: the random-token probes run on it alone, so the claim is described (the mean over every random x "
             "task probe pair), not tested"),
    claims.Claim(
        "bian.why", "Bian et al. 2021 (Why)",
        "Dropout changes how redundant heads are (the mean distance between their attention maps); the paper varies "
        "pre-training dropout and names no direction, here continued masked-LM training.",
        rule=claims.Superiority("two-sided", margin=margins.NONE),
        metric="per MLM run (seed): OLS slope of the mean distance on the dropout ratio, per distance",
        regime="the pre-trained model after continued masked-LM training with dropout p", semantics="",
        gates=(MlmTrained(),), figure="dropout_effect", measure="dropout_slope", unit="MLM run (seed)",
        note="n = the MLM runs (seeds), each continued training of the one pre-trained model at every dropout ratio "
             "(at least two ratios and 2 seeds); continued training, not pre-training from scratch as in the paper. "
             "Two-sided (declared 2026-12-06): the paper reports that dropout influences redundancy without a "
             "direction, so a slope shown either way supports it (the effect's sign says which: negative = more "
             "dropout, more redundancy); until then the claim was read one way (more dropout, more redundant) and "
             "a positive slope would have been 'contradicted'"),
)
