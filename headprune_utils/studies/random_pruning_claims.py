"""Study 1's claims, declared once as data (:data:`CLAIMS`): each with its decision rule and margin, its gates
(:mod:`headprune_utils.analysis.preconditions`), the figure that shows it and what the analysis measures for it
(``measure``: a key of :data:`.random_pruning_analysis.MEASURES`). The study sets ``claims = CLAIMS``;
:func:`.random_pruning_analysis.claim_verdicts` decides them (:func:`headprune_utils.analysis.claims.evaluate`) with the
evidence the gates read (``convergence``: :func:`.random_pruning_analysis.convergence_evidence`).
"""
from __future__ import annotations

from headprune_utils.analysis import claims, margins, preconditions

__all__ = ["CLAIMS", "CONVERGED"]

# every fine-tuned model behind a row reached the plateau of its held-out score: the full models (both regimes) and
# the models fine-tuned with the mask fixed (evidence: random_pruning_analysis.convergence_evidence)
CONVERGED = preconditions.Converged()

CLAIMS: tuple[claims.Claim, ...] = (
    claims.Claim(
        "budhraja.random_prunable", "Budhraja et al. 2020",
        "A large fraction (>= 50%) of heads can be pruned at random with limited effect when fine-tuning "
        "follows the masking.",
        rule=claims.NonInferiority(margins.TASK_SCORE),
        metric="score(pruned at random, then fine-tuned) - score(full model), per (task, seed) model, at every "
               "mask-then-fine-tune share >= 50%",
        regime="masked, then fine-tuned (the mask fixed during fine-tuning)",
        semantics="uniform",
        gates=(preconditions.AboveChance(), CONVERGED),
        figure="score_vs_fraction",
        measure="prunable",
        decided_in="mask_then_finetune",
        pool_by=claims.SEED_SHARED_MASKS,
        note="'limited effect' read as non-inferiority within the task-score margin (the paper gives no threshold); "
             "the convergence gate is ours: a fine-tuning stopped while the masked model still improves tests our "
             "step budget, not fine-tuning after masking"),
    claims.Claim(
        "ours.retraining_recovers", "ours (exploratory)",
        "Fine-tuning after masking recovers more than masking a fine-tuned model (Budhraja et al.'s regime "
        "vs Michel et al.'s).",
        rule=claims.Superiority("greater", margin=margins.TASK_SCORE),
        metric="score(mask, then fine-tune) - score(fine-tune, then mask) at the same random mask, per (task, seed) "
               "model and share pruned",
        regime="masked, then fine-tuned; fine-tuned, then masked (the same masks, paired by model)",
        semantics="uniform",
        gates=(preconditions.AboveChance(), CONVERGED),
        figure="score_vs_fraction",
        measure="retraining",
        pool_by=claims.SEED_SHARED_MASKS),
)
