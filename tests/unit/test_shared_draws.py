"""Pooled rows never count a shared random draw as independent units.

A GLUE study's random masks are seeded by the model seed alone (the same mask, or prefixes of one permutation, on
every task), so the units of different tasks that compare against them share a draw: a claim measured against
random masks and pooled over tasks must average each seed's models first (``pool_by=claims.SEED_SHARED_MASKS``).
This check reads every GLUE study's declared claims: a claim whose metric or measure names random heads either pools
by seed or is listed below with why no draw is shared. It caught ``voita.l0_beats_random`` of study 6, pooled over
20 models whose random baselines were 5 draws (2026-12-06)."""
from __future__ import annotations

import importlib
import inspect

import pytest

from headprune_utils.analysis import claims

GLUE_STUDIES = ("random_pruning", "layer_strategies", "zero_shot_pruning", "specialized_heads_l0",
                "redundancy_patterns", "compensation")
# claims that name "random" without comparing against a drawn random mask
NO_SHARED_DRAW = {
    "bian.who_random": "a random-token probe of the one pre-trained model (n = 1: described, never pooled)",
    "voita.functions_at_17_of_48": "the chance that a random mask keeps a role's head is computed exactly "
                                   "(hypergeometric), no mask is drawn",
}


def _names_random(claim: claims.Claim) -> bool:
    return "random" in f"{claim.metric} {claim.measure}".lower()


@pytest.mark.parametrize("study", GLUE_STUDIES)
def test_claims_against_random_masks_pool_by_seed(study):
    declared = importlib.import_module(f"headprune_utils.studies.{study}_claims").CLAIMS
    for claim in declared:
        if not _names_random(claim) or claim.id in NO_SHARED_DRAW:
            continue
        assert claim.pool_by is claims.SEED_SHARED_MASKS, (
            f"{study}: {claim.id} compares against random masks drawn per seed, the same on every task: its pooled "
            "row must average each seed's models first (pool_by=claims.SEED_SHARED_MASKS)")


def test_the_exempt_claims_exist_and_study_6_draws_by_seed_alone():
    ids = {c.id for s in GLUE_STUDIES for c in importlib.import_module(f"headprune_utils.studies.{s}_claims").CLAIMS}
    assert set(NO_SHARED_DRAW) <= ids, "an exemption for a claim that no longer exists"
    from headprune_utils.studies import specialized_heads_l0 as study6
    assert list(inspect.signature(study6.random_seed).parameters) == ["seed", "r"], "no task in the draw's seed"
