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


# studies whose every claim is measured on runs with masks drawn by the seed alone, whatever its words name (study
# 3: each run's random or middle-layer mask, compensation.cell_mask(..., seed), the same on every task)
EVERY_CLAIM_ON_SEEDED_MASKS = ("compensation",)


def _names_random(claim: claims.Claim) -> bool:
    return "random" in f"{claim.metric} {claim.measure}".lower()


@pytest.mark.parametrize("study", GLUE_STUDIES)
def test_claims_against_random_masks_pool_by_seed(study):
    declared = importlib.import_module(f"headprune_utils.studies.{study}_claims").CLAIMS
    for claim in declared:
        if study not in EVERY_CLAIM_ON_SEEDED_MASKS and (not _names_random(claim) or claim.id in NO_SHARED_DRAW):
            continue
        assert claim.pool_by is claims.SEED_SHARED_MASKS, (
            f"{study}: {claim.id} compares against random masks drawn per seed, the same on every task: its pooled "
            "row must average each seed's models first (pool_by=claims.SEED_SHARED_MASKS)")


def test_the_exempt_claims_exist_and_study_6_draws_by_seed_alone():
    ids = {c.id for s in GLUE_STUDIES for c in importlib.import_module(f"headprune_utils.studies.{s}_claims").CLAIMS}
    assert set(NO_SHARED_DRAW) <= ids, "an exemption for a claim that no longer exists"
    from headprune_utils.studies import specialized_heads_l0 as study6
    assert list(inspect.signature(study6.random_seed).parameters) == ["seed", "r"], "no task in the draw's seed"


def test_a_seed_pool_reads_both_unit_shapes():
    """Units are (task, seed) in most studies and a bare seed in study 3: the pool's cluster is the seed either way."""
    assert claims.SEED_SHARED_MASKS.key(("SST-2", 3)) == 3 and claims.SEED_SHARED_MASKS.key(3) == 3


def test_study_6s_committed_random_baselines_are_one_permutation_per_seed_across_tasks():
    """The committed standard-next cells of study 6 (where present): for each seed, the random masks of every task
    and lambda are nested (each pruned set inside the next larger one), i.e. prefixes of one permutation, the same
    draw on every task: what makes its pooled row average each seed's models first."""
    import json
    from collections import defaultdict

    from headprune_utils.store.paths import project_root

    folder = project_root() / "outputs" / "specialized_heads_l0" / "standard-next" / "cells"
    cells = sorted(folder.glob("kind=l0__*.json"))
    if not cells:
        pytest.skip("no committed study 6 standard-next cells")
    pruned = defaultdict(set)  # (seed, baseline r) -> {(task, pruned heads)}
    for p in cells:
        rec = json.loads(p.read_text())
        for r, m in enumerate(rec["result"].get("random_masks", [])):
            pruned[(rec["cell"]["seed"], r)].add(
                (rec["cell"]["task"], frozenset(i for i, ch in enumerate(m.replace("/", "")) if ch == "0")))
    assert pruned, "no random baseline recorded"
    for (seed, r), got in pruned.items():
        assert len({task for task, _ in got}) > 1, "one task only: nothing to compare"
        sets = sorted({heads for _, heads in got}, key=len)
        assert all(a <= b for a, b in zip(sets, sets[1:])), f"seed {seed}, baseline {r}: not nested across tasks"
