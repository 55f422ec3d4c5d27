"""Study 3's claims as data (:data:`CLAIMS`): what each claim says, how it is decided (its rule, with its margin from
:mod:`headprune_utils.analysis.margins`), its gates and the figure that shows it. The analysis
(:func:`.compensation_analysis.claim_verdicts`) measures each claim by its ``measure`` (a key of
:data:`.compensation_analysis.MEASUREMENTS`) on the per-run table (``spread_tests``) and decides it with
:func:`headprune_utils.analysis.claims.evaluate` under every ablation semantics of the runs.

The unit is the pruned, fine-tuned model (task x seed): one value per model for each strategy x budget x measure.

Convergence. Every claim here is about models fine-tuned with their heads masked (Budhraja et al.'s regime: mask,
then fine-tune), each compared with unpruned fine-tunings: all three carry :data:`CONVERGED` (a row is testable
when every fine-tuned model its values are computed from, masked and unpruned, reached the plateau of its held-out
score; evidence ``convergence``: :func:`.compensation_analysis.convergence_evidence`, from the cells' stored
curves). No claim of this study is about a model that was not fine-tuned, so none is left ungated.

Independence. The excess dispersion and the locality rho of a unit (seed s) read a comparison run, an unpruned
fine-tuning of another seed: with ``baseline_seeds`` each seed has one of its own (:data:`INDEPENDENT_RUNS`; without,
seed s's comparison run is seed s+1's own unpruned run, shared by two units, and those rows are not testable). The
layer-controlled locality rho also reads a layer-only model fitted on the other units' runs (:data:`OWN_LAYER_MODEL`):
described, never tested. The mean shift reads only the unit's own two runs.

Margins. The spread claim's equivalence margin is the declared margin of the dispersion's metric
(:class:`DispersionMargin`), never a noise estimate: the excess Gini (a difference of two Ginis, each in 0-1) gets
``margins.GINI``. The importance dispersion is a standard deviation of differences of per-layer L2-normalised scores:
its reachable range depends on how many heads each layer keeps (about sqrt(2 / kept heads per layer) at most), so
no ``margins`` entry fits it and none is invented here: its rows are not testable (:data:`NO_MARGIN`), their
numbers shown.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from headprune_utils.analysis import claims, margins, preconditions

__all__ = ["CLAIMS", "CONVERGED", "DISPERSION_MARGINS", "NO_MARGIN", "DispersionMargin", "BEYOND_LAYER", "REGIME",
           "INDEPENDENT_RUNS", "OWN_LAYER_MODEL", "LAYER_MODEL_SHARED"]

REGIME = "masked, then fine-tuned (the mask fixed during fine-tuning); each kept head compared with the same head " \
         "in an unpruned fine-tuning of the same semantics"

DISPERSION_MARGINS = {"Gini of ratios": margins.GINI, "sd of differences": None}  # None: no margin declared
NO_MARGIN = ("no smallest effect of interest is declared for the sd of per-layer normalised importance differences "
             "(headprune_utils.margins has no entry for it: its reachable range depends on the number of kept heads "
             "per layer), so equivalence cannot be decided")


@dataclass(frozen=True)
class DispersionMargin:
    """Equivalence margin of the spread claim: the declared margin (:mod:`headprune_utils.analysis.margins`) of the
    measurement's dispersion (:data:`DISPERSION_MARGINS`, keyed by the dispersion's kind, which the analysis puts
    into the measurement's ``effect``); where none is declared the measurement is not testable
    (:class:`claims.Untestable`, reason :data:`NO_MARGIN`)."""

    def __call__(self, m: claims.Measurement) -> float:
        kinds = [k for k in DISPERSION_MARGINS if k in m.effect]
        if len(kinds) != 1:
            raise ValueError(f"cannot tell the dispersion of the measurement from its effect {m.effect!r}")
        margin = DISPERSION_MARGINS[kinds[0]]
        if margin is None:
            raise claims.Untestable(NO_MARGIN)
        return float(margin(m))

    def describe(self) -> str:
        return (f"{margins.GINI.describe()} for the Gini dispersions (margins.GINI); none declared for the sd of "
                "differences (its rows not testable)")


def _beyond_layer(m: claims.Measurement, evidence: Mapping) -> str | None:
    """The reason a locality measurement cannot be told from a layer effect (evidence ``layer_confounded``:
    ``{(task, setting): reason}``, from the analysis), else None."""
    return evidence.get("layer_confounded", {}).get((m.task, m.setting))


# locality is testable only where the pruned-head counts near a kept head vary beyond its layer across runs
BEYOND_LAYER = preconditions.Check(
    "the number of pruned heads near a kept head varies beyond its layer across runs (random masks differ by seed; "
    "the middle strategy prunes the same layers in every run, so its locality is a pure layer effect)",
    _beyond_layer)

def _shared_runs(m: claims.Measurement, evidence: Mapping) -> str | None:
    """Why the measurement's units share a fine-tuned model (evidence ``shared_runs``, from the analysis: the ring
    pairing of the comparison runs), else None."""
    return evidence.get("shared_runs")


# the excess dispersion and the locality rho read each unit's comparison run ("other"): testable only when no two
# units share one (baseline_seeds: one comparison run per seed, used by that seed alone)
INDEPENDENT_RUNS = preconditions.Check(
    "no two units read the same fine-tuned model (each seed's comparison run is its own: baseline_seeds)",
    _shared_runs)

LAYER_MODEL_SHARED = ("each run's layer-only model is the mean of the other seeds' runs of its task and setting, so "
                      "every unit's rho reads the other units' runs: the units are not independent, and the rho is "
                      "described, not tested")


def _own_layer_model(m: claims.Measurement, evidence: Mapping) -> str | None:
    """The layer-controlled rho's units share data by construction (:data:`LAYER_MODEL_SHARED`); the raw rho's do not
    (it is not testable for its own reason, :data:`BEYOND_LAYER`)."""
    return LAYER_MODEL_SHARED if "beyond a layer-only model" in m.effect else None


# locality beyond the layer needs a layer-only model fitted without the unit's own run: on the other units' runs (as
# here) the units are not independent; no design of this study gives one from independent runs, so it is described
OWN_LAYER_MODEL = preconditions.Check(
    "each unit's layer-only model is fitted on runs no other unit reads", _own_layer_model)

# every fine-tuned model behind a row reached the plateau of its held-out score: the models fine-tuned with the mask
# fixed and the unpruned fine-tunings they are compared with (evidence: compensation_analysis.convergence_evidence)
CONVERGED = preconditions.Converged()

_CONVERGENCE = ("the convergence gate is ours: how much a kept head changed is measured at the end of fine-tuning, so "
                "a fine-tuning stopped while its model still improves measures our step budget, not the compensation "
                "after masking")
_N = ("n = the pruned, fine-tuned models (task x seed) of a task; the noise baseline compares unpruned runs of two "
      "seeds, so the study needs at least 2 seeds; the units are independent only when each seed has a comparison run "
      "of its own (baseline_seeds, since 2026-12-06; before, each seed's comparison run was the next seed's own "
      "unpruned run, shared by two units); a seed's masks are the same on every task (compensation.cell_mask), so a "
      "pool over tasks averages each seed's models first")

CLAIMS: tuple[claims.Claim, ...] = (
    claims.Claim(
        "budhraja.compensation_spread", "Budhraja et al. 2020 (claim 4)",
        "The compensation for pruned heads is spread roughly equally over the kept heads during fine-tuning.",
        rule=claims.Equivalence(DispersionMargin()),
        metric="excess dispersion of the kept heads' extra change over the seed-noise baseline (Gini of c_pruned / "
               "c_other minus the Gini of c_full / c_other; importance: sd of differences), one value per pruned "
               "model (task x seed), per strategy x budget x measure",
        regime=REGIME,
        semantics="uniform",
        pool_by=claims.SEED_SHARED_MASKS,
        gates=(INDEPENDENT_RUNS, CONVERGED),
        figure="extra_change_heatmaps_uniform",
        measure="excess_dispersion",
        note=f"'roughly equally' read as equivalence of the excess Gini within the Gini's margin (the paper gives no "
             f"threshold); no margin is declared for the importance sd, so those rows are not testable (their numbers "
             f"shown). {_N}. {_CONVERGENCE}"),
    claims.Claim(
        "ours.kept_heads_change_more", "ours (exploratory)",
        "Kept heads change more during fine-tuning when other heads are pruned (there is extra change to "
        "spread).",
        rule=claims.Superiority("greater", margin=margins.LOG_RATIO),
        metric="mean shift of the kept heads: mean over kept heads of log(change in the pruned run / change of the "
               "same head in the unpruned run of the same seed), per pruned model (task x seed); weight change and "
               "attention-pattern change only (per-layer normalised importance has no level to shift)",
        regime=REGIME,
        semantics="uniform",
        pool_by=claims.SEED_SHARED_MASKS,
        gates=(CONVERGED,),
        figure="extra_change_distributions_uniform",
        measure="mean_shift",
        note=f"the premise of 'compensation' (ours): the spread claim presumes extra change to spread. {_N}. "
             f"{_CONVERGENCE}"),
    claims.Claim(
        "ours.compensation_local", "ours (exploratory)",
        "Heads near the pruned ones (same layer, adjacent layers) compensate more, beyond what their layer "
        "alone predicts.",
        rule=claims.Superiority("greater", margin=margins.CORRELATION),
        metric="Spearman rho of a kept head's extra change with the number of pruned heads in its own / the adjacent "
               "layers, both taken relative to a layer-only model (the mean over the other seeds' runs of the same "
               "task and setting, per layer), per pruned model (task x seed)",
        regime=REGIME,
        semantics="uniform",
        pool_by=claims.SEED_SHARED_MASKS,
        gates=(BEYOND_LAYER, OWN_LAYER_MODEL, INDEPENDENT_RUNS, CONVERGED),
        figure="extra_change_heatmaps_uniform",
        measure="locality",
        note=f"where the counts do not vary beyond the layer, the raw (layer-confounded) rho is shown, not tested; "
             f"where they do, the layer-controlled rho is described, not tested (its layer-only model is fitted on the "
             f"other units' runs). {_N}. {_CONVERGENCE}"),
)
