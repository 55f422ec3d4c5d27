"""Study 5's claims as data (:data:`CLAIMS`): what each claim says, how it is decided (its rule and margin from
:mod:`headprune_utils.analysis.margins`), its gates and the figure that shows it. The analysis
(:func:`.zero_shot_pruning_analysis.claim_verdicts`) measures each claim by its ``measure`` (a contrast of
:data:`.zero_shot_pruning_analysis.CONTRASTS`, by name) and decides it with :func:`headprune_utils.analysis.claims.evaluate`.

The zero-shot mask is ONE mask per budget: it is read from the one pre-trained model with no task data, so it is
the same for every task, seed and semantics (n = 1 mask). Two kinds of claim follow from that:

- against the full model (``bian.zero_shot_comparable``) and against gradient importance
  (``ours.zero_shot_vs_importance``, whose masks change with the task and seed), what varies between units is the
  fine-tuning: the units are the fine-tuned models (task x seed) and the t-tests over them stand, but the verdict
  is about this one mask, not about zero-shot masks in general;
- against random pruning (``bian.zero_shot_vs_random``) the question is where the one mask lies among random masks
  of its size, so it is an empirical rank (:class:`claims.EmpiricalRank`): the zero-shot mask's mean score over
  the task's models against the same mean of each random mask scored on those same models (the reference draws).
  :data:`DRAWS` (a :class:`preconditions.Check`) names the shortfall when the run has too few such draws, and
  describes the effect it can (the random masks each on its own model).

Gates: the fine-tuned full model above chance (:class:`preconditions.AboveChance`) and every fine-tuned model behind a row reached the plateau of its held-out score (:data:`CONVERGED`: the full models in
both regimes, the masked models of mask-then-fine-tune rows; evidence ``convergence``: the analysis's
``convergence_evidence``).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from headprune_utils.analysis import claims, margins, preconditions
from headprune_utils.studies.zero_shot_pruning_analysis import MOST_HEADS, REGIME_NAMES

__all__ = ["CLAIMS", "CONVERGED", "DRAWS", "RANK_UNIT", "VS_RANDOM_RULE", "PRUNE_THEN_FINETUNE", "draws_needed"]

RANK_UNIT = "zero-shot mask (n = 1; reference: random masks of its size)"
VS_RANDOM_RULE = claims.EmpiricalRank("greater")

# every fine-tuned model behind a row reached the plateau of its held-out score (full models in both regimes)
CONVERGED = preconditions.Converged()


def draws_needed(alpha: float) -> int:
    """The fewest reference draws K whose empirical p can go below ``alpha``: ``1 / (1 + K) < alpha``."""
    return int(np.floor(1 / alpha - 1)) + 1


def _draws(m: claims.Measurement, evidence: Mapping) -> str | None:
    """None when the measurement has enough comparable random masks for the empirical p; else the shortfall: how
    many random masks the run scored and on how many of the models, and the effect it can describe.
    ``evidence["draws"]``: ``(task, setting, semantics)`` -> a dict with ``models`` (the models the zero-shot mask
    was scored on), ``masks`` (random masks of the size in the run), ``scored_on`` (per random mask, how many of
    those models it was scored on), ``observed`` (the zero-shot mask's mean score over the models) and ``random``
    (the random masks' mean score, each on the models it was scored on)."""
    k = 0 if m.null is None else len(m.null)
    need = draws_needed(VS_RANDOM_RULE.alpha)
    if k >= need:
        return None
    d = evidence["draws"][(m.task, m.setting, m.semantics)]
    on = sorted(set(d["scored_on"]))
    where = (f"each scored on {on[0]} of the {d['models']} models" if len(on) == 1
             else f"scored on {on[0]} to {on[-1]} of the {d['models']} models")
    if on == [1]:
        where += ", its own seed's"
    return (f"the one zero-shot mask needs >= {need} random masks of its size, each scored on the same "
            f"{d['models']} models, for an empirical p at alpha {VS_RANDOM_RULE.alpha:g}; this run scored {k} such "
            f"({d['masks']} random masks, {where}); described, not tested: the zero-shot mask's mean score over "
            f"the models {d['observed']:.3g}, the random masks' {d['random']:.3g}, each on its own model(s) "
            f"(difference {d['observed'] - d['random']:+.3g})")


DRAWS = preconditions.Check(
    f"at least {draws_needed(VS_RANDOM_RULE.alpha)} random masks of the zero-shot mask's size, each scored on every "
    "model the zero-shot mask was scored on (the reference draws of the empirical p)", _draws)

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
        VS_RANDOM_RULE,
        metric="per task x regime x share pruned: the zero-shot mask's score averaged over the task's fine-tuned "
               "models (task x seed), ranked among the same average of each random mask of its size scored on "
               "those same models (one reference draw per random mask)",
        regime=_DECIDED, semantics="zero", gates=(*_GATES, DRAWS), figure="contrasts", measure="zero-shot vs random",
        unit=RANK_UNIT, decided_in=PRUNE_THEN_FINETUNE,
        note="n = 1 zero-shot mask (deterministic given the one pre-trained model), so it is ranked among random "
             "masks of its size (an exact one-sided empirical p, never pooled over tasks), not t-tested across "
             "seeds. How 'comparable' maps onto the rank (decided before any result was read): the paper proposes "
             "zero-shot pruning as a method that does not lose to random pruning, so the claim is read as 'not "
             "worse than random masks': it is contradicted when the zero-shot mask scores below the random masks "
             "(empirical p of the lower tail < alpha) and supported only when it scores above them (upper tail), "
             "which is more than 'comparable'; a mask inside the random masks' spread is inconclusive, because an "
             "equivalence of one mask to a distribution cannot be shown without a margin (the old rule, TOST "
             "within 0.1 x (full - chance) over seeds, paired each seed's zero-shot model with one random mask "
             "and so treated the one mask as replicated). Zero semantics: our reading of Bian et al."),
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
        measure="random vs full model", decided_in=PRUNE_THEN_FINETUNE,
        note="a reference claim (Budhraja et al.'s BERT code masks uniform); each model's own random mask (seed s). "
             "In the paper's protocol (mask, then fine-tune, uniform) it is study 1's budhraja.random_prunable; this "
             "study fine-tunes its random masks under zero semantics only, so its primary row here is not testable "
             "and the rows beside it describe the other protocol and semantics"),
)
