"""Study 2's claims, declared once as data (:data:`CLAIMS`): each a paired contrast of two strategies
(:data:`.layer_strategies_analysis.CONTRASTS`; its name is the claim's ``measure``) with its decision rule and margin
(:data:`margins.TASK_SCORE`), its gates (:mod:`headprune_utils.analysis.preconditions`, and :data:`MASKS_DIFFER`, the
study's own) and the figure that shows it. The study sets ``claims = CLAIMS``;
:func:`.layer_strategies_analysis.verdicts` decides them (:func:`headprune_utils.analysis.claims.evaluate`) with the evidence
the gates read: ``convergence`` (:func:`.layer_strategies_analysis.convergence_evidence`) and ``identical_masks`` (the
contrast's notes, :func:`.layer_strategies_analysis.measurements`).
"""
from __future__ import annotations

from collections.abc import Mapping

from headprune_utils.analysis import claims, margins, preconditions
from headprune_utils.studies.layer_strategies_analysis import CONTRASTS

__all__ = ["CLAIMS", "MASKS_DIFFER", "CONVERGED", "BUDHRAJA", "MICHEL"]


def _masks_differ(m: claims.Measurement, evidence: Mapping) -> str | None:
    """The measurement's reason when every pair of it pruned identical masks (evidence ``identical_masks``:
    ``{(task, setting): (kind, text)}``, kind ``"degenerate"`` or ``"partial"``), else None."""
    kind, text = evidence.get("identical_masks", {}).get((m.task, m.setting), ("", ""))
    return text if kind == "degenerate" else None


MASKS_DIFFER = preconditions.Check(
    "the two strategies' masks differ in at least one pair (pairs where both pruned identical masks are left out: "
    "a mask is not tested against itself)", _masks_differ)

# every fine-tuned model behind a row reached the plateau of its held-out score: the full models (both regimes) and
# the two strategies' masked models of mask-then-fine-tune rows (evidence: layer_strategies_analysis.convergence_evidence)
CONVERGED = preconditions.Converged()

GATES = (MASKS_DIFFER, preconditions.AboveChance(), CONVERGED)
BOTH_REGIMES = "fine-tuned, then masked; masked, then fine-tuned (each regime decided apart)"
# Budhraja et al. mask the heads, THEN fine-tune with the mask fixed; Michel et al. mask a fine-tuned model (docs: the
# papers): each paper's claims are decided in its own protocol, the other protocol's rows reported beside them
BUDHRAJA = "mask_then_finetune"
MICHEL = "finetune_then_mask"
REGIME_TEXT = {BUDHRAJA: "masked, then fine-tuned with the mask fixed (Budhraja et al.'s protocol: the primary "
                         "verdicts); fine-tuned, then masked (Michel et al.'s): a sensitivity analysis beside them",
               MICHEL: "fine-tuned, then masked (Michel et al.'s protocol: the primary verdicts); masked, then "
                       "fine-tuned: a sensitivity analysis beside them",
               "": BOTH_REGIMES}


def _claim(id_: str, paper: str, text: str, contrast: str, rule: claims.Rule, semantics: str, figure: str = "contrasts",
           note: str = "", decided_in: str = "") -> claims.Claim:
    """A claim on the contrast named ``contrast``: its metric text from the contrast's two strategies. Every
    strategy's mask is drawn with the seed (the random heads, and the heads of a partly pruned layer), the same on
    every task: pooled rows cluster by seed (:data:`claims.SEED_SHARED_MASKS`)."""
    c = next(c for c in CONTRASTS if c.name == contrast)
    return claims.Claim(
        id_, paper, text, rule=rule,
        metric=f"score({c.a}) - score({c.b}) of the same fine-tuned model (task, seed) and budget, averaged over the "
               f"budgets within the model; per task and regime, then pooled over tasks on (full - chance)-normalised "
               f"effects (contrast {c.name!r})",
        regime=REGIME_TEXT[decided_in], semantics=semantics, gates=GATES, figure=figure, measure=c.name, note=note,
        decided_in=decided_in, pool_by=claims.SEED_SHARED_MASKS)


_BEATS = claims.Superiority("greater", margin=margins.TASK_SCORE)  # an effect shown below the margin: not supported
_NOT_WORSE = claims.NonInferiority(margins.TASK_SCORE)

CLAIMS: tuple[claims.Claim, ...] = (
    _claim("budhraja.location_no_preference", "Budhraja et al. 2020",
           "There is no preference between pruning the top or the bottom layers.", "top vs bottom",
           claims.Equivalence(margins.TASK_SCORE), "uniform",
           note="'no preference' read as equivalence within the task-score margin (TOST)", decided_in=BUDHRAJA),
    _claim("budhraja.avoid_middle", "Budhraja et al. 2020",
           "Pruning that avoids the middle layers (top + bottom) beats pruning the middle layers.",
           "avoid the middle", _BEATS, "uniform", decided_in=BUDHRAJA),
    _claim("budhraja.avoid_consecutive", "Budhraja et al. 2020",
           "Pruning layers spread apart beats pruning the same number of consecutive layers.",
           "avoid consecutive layers", _BEATS, "uniform", decided_in=BUDHRAJA),
    _claim("budhraja.important_location_not_worse", "Budhraja et al. 2020",
           "Pruning the layers earlier studies call important (the middle) is no worse than random pruning "
           "(the paper's claim 2, made for the Transformer, tested on BERT).",
           "important-by-location vs random", _NOT_WORSE, "uniform",
           note="the paper's claim 2 was made for the Transformer (NMT); here tested on BERT, 'important' = the "
                "middle layers probing studies point to. The middle mask is one fixed mask: the rule for a fixed mask "
                "against random masks (as study 5's zero-shot mask) pairs it, per fine-tuned model, with that "
                "model's own random mask of its size; the verdict is about this mask on the one pre-trained model",
           decided_in=BUDHRAJA),
    _claim("ours.most_important_not_worse", "ours (exploratory)",
           "Masking the most important heads (gradient importance) of a fine-tuned model is no worse than masking "
           "random heads.", "most important vs random", _NOT_WORSE, "uniform",
           note="ours, decided where the importance masks are measured, after fine-tuning (Michel et al.'s protocol); "
                "it is not Budhraja et al.'s claim: they report a weak link between importance and prunability for "
                "models fine-tuned after masking, a protocol this strategy is not run in (finetune_strategies)",
           decided_in=MICHEL),
    _claim("michel.least_important_first", "Michel et al. 2019",
           "Pruning the least important heads (gradient importance) first beats random pruning.",
           "least important vs random", _BEATS, "zero", figure="score_by_strategy",
           note="Michel et al. prune iteratively and read the score against the share pruned; here the importance "
                "mask of each budget against a random mask of the same size, averaged over the budgets within each "
                "model (their iterative curve, compared, not tested: tables/michel_prunable.csv)", decided_in=MICHEL),
)
