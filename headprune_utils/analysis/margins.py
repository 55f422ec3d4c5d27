"""The margins of every claim: one policy, a smallest effect of interest per metric, declared here once.

Policy. A difference matters when it is at least a tenth (:data:`SHARE`) of the metric's headroom: the distance
between the metric's null value (chance, no association, no excess) and the best value it can reach in the
measurement (the full model's score, a perfect correlation, the attenuation ceiling). The same share for every
study, task and claim; never a noise estimate (a seed-to-seed SD measures our run, not what matters), never chosen
after looking at results. Verdicts under half and double the margin are a sensitivity analysis
(:func:`scaled`), never the primary verdict.

Where the margin enters (``claims.DECISION_TABLE``): equivalence and non-inferiority claims need it to be decided
at all; a superiority claim uses it only to say ``not supported`` (the effect is smaller than what matters).

| metric | margin | why |
|---|---|---|
| task score (GLUE main metric, BLEU) | 0.1 x (full - chance) per task | a tenth of what the full model gains over a constant predictor (chance: the majority class; 0 for correlations and BLEU) |
| Mantel r against its attenuation ceiling (sqrt of the two matrices' split-half r) | 0.1 x (ceiling - 0) | a tenth of the agreement the probes can show at all |
| Gini (excess over the noise baseline) | 0.1 (a tenth of the Gini's range 0-1) | |
| rank correlation (Spearman rho), silhouette | 0.1 (a tenth of the distance from no association, 0, to perfect, 1) | |
| AUC - 0.5 | 0.05 (a tenth of the distance from 0.5 to 1) | |
| share of heads, presence beyond chance | 0.1 (a tenth of 0-1) | |
| log ratio of change | ln 1.1 (one run changing 10% more than the other) | |
| other effects (a slope per unit of dropout) | none declared: such a claim cannot be ``not supported`` | |
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from headprune_utils.analysis.claims import Measurement, ShareOfHeadroom

__all__ = ["SHARE", "TASK_SCORE", "HEADROOM", "GINI", "CORRELATION", "AUC", "SHARE_OF_HEADS", "LOG_RATIO", "NONE",
           "Fixed", "scaled"]

SHARE = 0.1  # the one share of headroom that matters, for every metric


@dataclass(frozen=True)
class Fixed:
    """A margin in the metric's own units, ``SHARE`` x ``span`` (the metric's headroom from its null to its best),
    or ``value`` when given directly; ``what`` names the metric and the span in the ``test`` column."""

    span: float
    what: str
    value: float | None = None

    def __call__(self, m: Measurement) -> float:
        return float(self.value) if self.value is not None else SHARE * float(self.span)

    def describe(self) -> str:
        if self.value is not None:
            return self.what
        return f"{SHARE:g} x {self.what}"


TASK_SCORE = ShareOfHeadroom(SHARE)          # per task: 0.1 x (mean full - chance)
# the same rule where "full" is a ceiling and chance r = 0 (study 4's Mantel r: 0.1 x the attenuation ceiling),
# named as such in the test column
HEADROOM = ShareOfHeadroom(SHARE, "the attenuation ceiling")
GINI = Fixed(1.0, "the Gini's range (0 to 1)")
CORRELATION = Fixed(1.0, "the distance from no association (0) to perfect (1)")
AUC = Fixed(0.5, "the distance from chance (AUC 0.5) to perfect (1)")
SHARE_OF_HEADS = Fixed(1.0, "the range of a share (0 to 1)")
LOG_RATIO = Fixed(math.log(1.1), "ln 1.1 (a change 10% larger)", value=math.log(1.1))
NONE = 0.0  # no smallest effect of interest declared for the metric: the claim can be supported or contradicted only


@dataclass(frozen=True)
class Scaled:
    """``factor`` x a margin (sensitivity analysis: half and double the declared margin)."""

    base: object
    factor: float

    def __call__(self, m: Measurement) -> float:
        return self.factor * float(self.base(m) if callable(self.base) else self.base)

    def describe(self) -> str:
        inner = self.base.describe() if hasattr(self.base, "describe") else f"{float(self.base):g}"
        return f"{self.factor:g} x ({inner})"


def scaled(margin, factor: float):
    """The margin ``margin`` multiplied by ``factor`` (the half / double sensitivity tables)."""
    if not factor > 0:
        raise ValueError(f"factor must be > 0, got {factor}")
    return Scaled(margin, float(factor))
