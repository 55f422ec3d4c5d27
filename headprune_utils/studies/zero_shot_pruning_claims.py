"""Study 5's claims as data (:data:`CLAIMS`): what each claim says, how it is decided (its rule and margin from
:mod:`headprune_utils.analysis.margins`), its gates and the figure that shows it. The analysis
(:func:`.zero_shot_pruning_analysis.claim_verdicts`) measures each claim by its ``measure`` (a contrast of
:data:`.zero_shot_pruning_analysis.CONTRASTS`, by name) and decides it with :func:`headprune_utils.analysis.claims.evaluate`.

The zero-shot mask is ONE mask per budget: it is read from the one pre-trained model with no task data, so it is
the same for every task, seed and semantics (n = 1 mask). Two kinds of claim follow from that:

- against the full model (``bian.zero_shot_comparable``), against random pruning (``bian.zero_shot_vs_random``) and
  against gradient importance (``ours.zero_shot_vs_importance``, whose masks change with the task and seed), what
  varies between units is the fine-tuning (and, for random pruning, each model's own random mask): the units are
  the fine-tuned models (task x seed), paired differences are t-tested over them, and the verdict is about this one
  mask on the one pre-trained model, not about zero-shot masks in general.

One rule for a fixed mask against random masks (declared 2026-12-06, shared with study 2's
``budhraja.important_location_not_worse``): the paired difference per fine-tuned model between the fixed mask and
that model's own random mask(s) of the same size (several averaged within the model), decided by its claim's
rule over the models. Its estimand is the papers' comparison with random pruning as a method: the expected score
with this mask minus the expected score with a random mask of its size, over fine-tuning seeds and random draws
(the draws' spread is in the paired differences), conditional on the one pre-trained model. An empirical rank of
the one mask among random masks (:class:`claims.EmpiricalRank`, this claim's rule until then) asks another
question, whether the mask lies in the tail of random masks, and no run could test it (one random mask per model).

Gates: the fine-tuned full model above chance (:class:`preconditions.AboveChance`) and every fine-tuned model behind a row reached the plateau of its held-out score (:data:`CONVERGED`: the full models in
both regimes, the masked models of mask-then-fine-tune rows; evidence ``convergence``: the analysis's
``convergence_evidence``).
"""
from __future__ import annotations

from headprune_utils.analysis import claims, margins, preconditions
from headprune_utils.studies.zero_shot_pruning_analysis import MOST_HEADS, REGIME_NAMES

__all__ = ["CLAIMS", "CONVERGED", "PRUNE_THEN_FINETUNE"]

# every fine-tuned model behind a row reached the plateau of its held-out score (full models in both regimes)
CONVERGED = preconditions.Converged()

_ABOVE = preconditions.AboveChance()
_GATES = (_ABOVE, CONVERGED)
# Bian et al. prune the heads zero-shot, THEN fine-tune; Budhraja et al. mask, then fine-tune (docs: the papers): their
# claims are decided in that protocol, the fine-tune-then-mask rows (Michel et al.'s protocol) reported beside them
PRUNE_THEN_FINETUNE = "mask_then_finetune"
_REGIMES = f"{REGIME_NAMES['mask_then_finetune']} (Bian et al.'s protocol); {REGIME_NAMES['finetune_then_mask']}"
_DECIDED = (f"{REGIME_NAMES['mask_then_finetune']} (the paper's protocol: the primary verdicts); "
            f"{REGIME_NAMES['finetune_then_mask']} (Michel et al.'s): a sensitivity analysis beside them")
_ONE_MASK = ("n = 1 zero-shot mask per budget (one pre-trained model, no task data: the same mask for every task "
             "and seed): the units are the fine-tuned models, what varies between them is the fine-tuning, so the "
             "verdict is about this mask, not about zero-shot masks in general")

CLAIMS: tuple[claims.Claim, ...] = (
    claims.Claim(
        "bian.zero_shot_comparable", "Bian et al. 2021",
        "Most heads can be pruned zero-shot (from the pre-trained model's redundancy clusters, no task data) "
        "with fine-tuned scores comparable to the full model's.",
        claims.NonInferiority(margins.TASK_SCORE),
        metric="score(zero_shot) - score(full model) per (task, seed) model, per regime x share pruned (shares "
               f"above {100 * MOST_HEADS:g}%: 'most heads')",
        regime=_DECIDED, semantics="zero", gates=_GATES, figure="score_by_method", measure="zero-shot vs full model",
        note=f"{_ONE_MASK}. 'Most heads' read as more than half of them (the paper's 75-85%, secondary sources): "
             f"shares of {100 * MOST_HEADS:g}% or fewer are not tested for this claim. 'Comparable' read as "
             "non-inferiority: a pruned model scoring above the full one does not contradict it. Bian et al. "
             "released no code: zero semantics is our reading of their pruning",
        decided_in=PRUNE_THEN_FINETUNE),
    claims.Claim(
        "bian.zero_shot_vs_random", "Bian et al. 2021",
        "Zero-shot pruning from redundancy clusters scores comparably to random pruning at the same budget.",
        claims.NonInferiority(margins.TASK_SCORE),
        metric="score(zero_shot) - score(random) per (task, seed) model (the model's own random mask(s) of the same "
               "size, averaged within the model), per regime x share pruned",
        regime=_DECIDED, semantics="zero", gates=_GATES, figure="contrasts", measure="zero-shot vs random",
        decided_in=PRUNE_THEN_FINETUNE, pool_by=claims.SEED_SHARED_MASKS,
        note=f"{_ONE_MASK}. 'Comparable' read as 'not worse than random pruning' (the paper proposes zero-shot "
             "pruning as a method that does not lose to it): non-inferiority within the margin; a zero-shot mask "
             "scoring above random ones does not contradict it. The rule for a fixed mask against random masks "
             "(the module docstring): paired over the fine-tuned models, the estimand the expected score of this "
             "mask minus a random mask's, conditional on the one pre-trained model (until 2026-12-06 an empirical "
             "rank of the one mask among random masks, which no run could test). Zero semantics: our reading of "
             "Bian et al."),
    claims.Claim(
        "ours.zero_shot_vs_importance", "ours (exploratory)",
        "Zero-shot pruning (no task data) scores comparably to gradient-importance pruning (Michel et al. "
        "2019; task data) at the same budget.",
        claims.Equivalence(margins.TASK_SCORE),
        metric="score(zero_shot) - score(least_important) per (task, seed) model, per regime x share pruned",
        regime=_REGIMES, semantics="zero", gates=_GATES, figure="contrasts",
        measure="zero-shot vs gradient importance",
        note=f"{_ONE_MASK}; the importance masks change with the task and the model (they use its training data)"),
    claims.Claim(
        "budhraja.random_comparable", "Budhraja et al. 2020",
        "Reference (claim 1): random pruning keeps fine-tuned scores comparable to the full model's.",
        claims.NonInferiority(margins.TASK_SCORE),
        metric="score(random) - score(full model) per (task, seed) model, per regime x share pruned",
        regime=_DECIDED, semantics="uniform", gates=_GATES, figure="score_by_method",
        measure="random vs full model", decided_in=PRUNE_THEN_FINETUNE, pool_by=claims.SEED_SHARED_MASKS,
        note="a reference claim (Budhraja et al.'s BERT code masks uniform); each model's own random mask (seed s). "
             "In the paper's protocol (mask, then fine-tune, uniform) it is study 1's budhraja.random_prunable; this "
             "study fine-tunes its random masks under zero semantics only, so its primary row here is not testable "
             "and the rows beside it describe the other protocol and semantics"),
)
