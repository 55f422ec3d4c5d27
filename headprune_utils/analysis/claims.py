"""The claims model: a claim's verdict is computed from unit-level measurements by a stated decision rule, into
one row of one table layout (:data:`COLUMNS`), with one of five words (:data:`VERDICTS`) and a reason.

Pieces: a claim (:class:`Claim`: declared once per study in ``studies/<study>_claims.py``, with its rule, gates and
figure), a decision rule (one class per rule: :class:`Superiority`, :class:`Equivalence`, :class:`NonInferiority`,
:class:`Presence`, :class:`EmpiricalRank`), measurements (:class:`Measurement`: one task x setting x ablation
semantics, values with the unit each belongs to; :meth:`Measurement.absent` for one the run could not make), gates
(:class:`Gate` objects that render their own text and check a measurement; the standard ones in
:mod:`headprune_utils.analysis.preconditions`), :func:`evaluate` (rows of one claim), :func:`adjust` (Holm within a study's
family), :func:`decide` (the verdict of one row), :func:`render` (text, never "nan"). No verdict row is built by
hand: a ``not testable`` row comes from a failed gate (:class:`Measured` for an absent measurement).

Units. The unit of replication is an independently trained model (task x seed). Several values of one unit
(nested budgets of one model, masks on one fine-tuned model) are averaged within the unit first
(:func:`stats.unit_means`); tests and intervals use the unit means: one-sample t on ``n_units - 1`` degrees of
freedom (or the exact sign-flip test), never a pooled test over pseudo-replicates.

Rows. One row per measurement (per task first). When a claim is measured on two or more tasks with the same
setting and semantics, a pooled row follows (``task = "all (t1, t2, ...)"``, listing the tasks pooled):

- tasks that are not testable are left out of the pool (fewer than 2 left: the pooled row is ``not testable``),
  except a task whose only failure is the test's power gate while it has at least 2 units (e.g. 5 models for
  an exact test that needs 6): its units join the pool, which is what pooling is for (a task of one model never
  does: every pooled task has its own replication);
- effects are normalised per task by ``mean(full) - chance`` when every measurement gives ``full`` and
  ``chance`` (raw otherwise, the caller asserting one scale; a mix is an error); a task whose full model is
  not above chance cannot be normalised and is left out; the pooled margin is the smallest of the tasks'
  normalised margins; the pooled test runs over all units of the pooled tasks (units stay independent models),
  except that units sharing a random draw across tasks (a claim's :attr:`Claim.pool_by`, e.g. seed s's random
  mask, the same on every task) are averaged within their cluster first and the test runs over the clusters;
- a pool never overrides a task: the pooled row's word is withheld (``inconclusive``, the reason "a task decided
  otherwise: ...") where one of its tasks' rows was decided the other way, a pooled ``supported`` against a task's
  ``contradicted`` or ``not supported``, a pooled ``contradicted`` or ``not supported`` against a task's
  ``supported``, or the same word shown in the opposite direction (an equivalence claim contradicted above +margin on
  the pool and below -margin on a task; a two-sided difference) (:func:`adjust`, which decides the tasks' rows and
  the pool's in one pass; a tested pool's tasks must all be in the table beside it). A task left out of the pool
  (not testable, or not normalisable) is not among its tasks and does not withhold it. Tasks that decide
  nothing (``inconclusive``) never withhold it, whatever the sign of their point estimates: deciding what each
  task alone is too small to decide is what the pool is for. The pooled row's tests are run and stay in the Holm
  family whether or not its word is withheld (since 2026-12-06): which tests a family holds is fixed by the design
  (every pool of 2 or more testable tasks), never by the directions the data took, and withholding a word never
  raises the family-wise error. (Before 2026-12-06's revision a pool's word was withheld whenever its tasks' point
  estimates differed in sign, or their intervals in side of the margin: a rule read off noise.)

Decision rules. Every word a row can be given is decided by a hypothesis test of its own, and every such test of
every tested row is in the study's Holm family (:func:`adjust`): a row is ``supported``, ``contradicted`` or ``not
supported`` only when the one-sided test for THAT word has a Holm-adjusted p below the rule's ``alpha``; otherwise it
is ``inconclusive``. The table below (:data:`DECISION_TABLE`, written once; a notebook shows it with
:func:`decision_table_markdown`) lists the tests: ``s = +1`` for ``direction="greater"``, ``-1`` for ``"less"``;
``m`` the margin (the smallest effect of interest of the metric, :mod:`headprune_utils.analysis.margins`). Tests are one-sided
t-tests on the unit means (or exact one-sided sign-flip tests: ``test="sign_flip"``, or when every unit gave the same
value, where t is undefined); presence uses exact one-sided binomial tests; equivalence's own test is the TOST (the
larger of its two one-sided p). When two words' tests are significant, ``contradicted`` wins over ``not supported``
(they agree: an effect shown below 0 is shown below the margin), and ``not supported`` over ``supported`` (an effect
shown above 0 and below the smallest effect of interest is too small to matter: that is what the margin is for). The row's ``p``, ``p_adjusted`` and
``p_test`` are those of the deciding test (of an ``inconclusive`` row: of its test nearest to deciding, the smallest
adjusted p), ``tests`` lists every test of the row with its p and adjusted p (JSON) and ``unit_values`` the unit
values tested (JSON), so each verdict can be re-derived from its row (:func:`decide`) and re-tested under another
margin (:func:`margin_sensitivity`). Contract (tested, :func:`validate`): in every row whose verdict is
``supported``, ``contradicted`` or ``not supported``, ``p_adjusted`` is the Holm-adjusted p of the test that decided
that word, and it is below ``alpha``.

``not testable``: a gate failed (its text is the reason), the margin cannot be computed or is not > 0, or the
one-sided test cannot reach ``alpha`` with the units at hand (a t-test needs 2 units; an exact one-sided sign-flip or
binomial test over n units cannot go below ``1 / 2**n``). No test is run and the row is outside the Holm family.
The Holm factor is family-aware (Tarone 1990; its step-down form, Hommel & Krummenauer 1998,
:func:`stats.tarone_holm`, applied by :func:`adjust`): at each step of Holm's procedure the factor is Tarone's ``K``
of the tests not yet passed (the smallest ``K`` such that at most ``K`` of them can reach ``alpha / K`` by their
design: test and number of units, never the data), not their count; an exact test over few models (a sign-flip
test over 5, smallest p 1/32) then no longer raises every other test's factor while it cannot reach the level, and
still gets its turn when the factor falls (it reads ``inconclusive`` when it does not reach it). With t-tests only
it is Holm's procedure.

Semantics. Every row names the ablation semantics it was measured under (``semantics``: ``zero``, ``uniform``,
``mean``, :mod:`headprune_utils.model.gates`) and whether that is the claim's own paper's (``analysis = "primary"``)
or another one (``"sensitivity"``: the same claim re-tested under another intervention). Holm families: a
study's primary rows; each sensitivity semantics of a study apart (:func:`adjust`). Whether a verdict flips with
the semantics: :func:`semantics_dependence`.

The CIs (``(1 - alpha)`` for superiority and presence, ``(1 - 2 alpha)`` for equivalence and non-inferiority) are
descriptive and not multiplicity-adjusted; the verdicts come from the adjusted tests only, so an unadjusted interval
lying past a margin does not decide a word by itself. Margins are stated in the ``margin`` column and their
derivation in the ``test`` column (:class:`ShareOfHeadroom`, :mod:`headprune_utils.analysis.margins`).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import pandas as pd

from headprune_utils.analysis import stats

__all__ = [
    "VERDICTS", "COLUMNS", "pool_tasks", "Untestable", "ShareOfHeadroom", "Superiority", "Equivalence", "PoolBy", "SEED_SHARED_MASKS",
    "NonInferiority", "Presence", "EmpiricalRank", "Claim", "Measurement", "Gate", "Measured", "RULES",
    "enough_units", "evaluate", "decide", "adjust", "render", "validate", "empty_table", "ANALYSES", "semantics_dependence",
    "HypothesisTest", "DECISION_TABLE", "decision_table_markdown", "row_tests", "family_tests", "DECIDED",
    "retest", "margin_sensitivity", "in_own_protocol", "withheld",
]

VERDICTS: tuple[str, ...] = ("supported", "not supported", "contradicted", "inconclusive", "not testable")
DECIDED: tuple[str, ...] = ("supported", "not supported", "contradicted")  # the words a test decides
COLUMNS: tuple[str, ...] = (
    "study", "claim_id", "paper", "claim", "task", "setting", "semantics", "analysis", "effect", "ci_low",
    "ci_high", "n_units", "unit", "test", "p", "p_adjusted", "p_test", "margin", "verdict", "reason", "scale",
    "tests", "unit_values",
)
# (rule, word, the one-sided alternative whose Holm-adjusted p < alpha gives the word)
DECISION_TABLE: tuple[tuple[str, str, str], ...] = (
    ("superiority", "supported", "s x effect > 0"),
    ("superiority", "contradicted", "s x effect < 0"),
    ("superiority", "not supported", "s x effect < m (only when m > 0: no effect as large as the smallest of interest; "
                                     "given also when 'supported' is significant: a difference too small to matter)"),
    ("superiority (two-sided)", "supported", "effect > 0, or effect < 0 (two tests, both in the family)"),
    ("superiority (two-sided)", "not supported", "-m < effect < m (TOST; only when m > 0); never 'contradicted'"),
    ("equivalence", "supported", "-m < effect < m (TOST: the larger of the two one-sided p)"),
    ("equivalence", "contradicted", "effect > m, or effect < -m (two tests, both in the family)"),
    ("non-inferiority", "supported", "s x effect > -m"),
    ("non-inferiority", "contradicted", "s x effect < -m"),
    ("presence", "supported", "share of units with the role > 1/2 (exact binomial)"),
    ("presence", "contradicted", "share of units with the role < 1/2 (exact binomial)"),
    ("every rule", "inconclusive", "no test of the row reaches alpha after Holm"),
    ("every rule", "not testable", "a gate failed (the reason): no test is run, the row is outside the family"),
)


def decision_table_markdown() -> str:
    """:data:`DECISION_TABLE` as a Markdown table (the notebooks show it)."""
    lines = ["| rule | word | given when this one-sided test has Holm-adjusted p < alpha (study's family) |",
             "|---|---|---|"]
    lines += [f"| {r} | {w} | {t} |" for r, w, t in DECISION_TABLE]
    return "\n".join(lines)
ANALYSES: tuple[str, ...] = ("primary", "sensitivity")  # under the claim's own paper's semantics, or another
DEFAULT_UNIT = "model (task x seed)"


class Untestable(Exception):
    """Raised by a margin (or other rule input) that cannot be computed; its message becomes the reason."""


# ------------------------------------------------------------------------------------------------ margins

@dataclass(frozen=True)
class ShareOfHeadroom:
    """Margin = ``share`` x (mean full-model score - chance score) on the measurement's task; ``span`` names that
    headroom in the ``test`` column (e.g. an attenuation ceiling, where "full" is the ceiling and chance r = 0)."""

    share: float = 0.1
    span: str = "(full - chance)"

    def __call__(self, m: Measurement) -> float:
        if m.headroom is None:
            raise Untestable(f"the margin ({self.describe()}) needs the full-model and chance scores")
        return self.share * m.headroom

    def describe(self) -> str:
        return f"{self.share:g} x {self.span}"


Margin = float | Callable[["Measurement"], float]


def _describe_margin(margin: Margin) -> str:
    return margin.describe() if hasattr(margin, "describe") else "fixed" if np.ndim(margin) == 0 else "computed"


# -------------------------------------------------------------------------------------------------- rules

def _check_alpha(alpha: float) -> None:
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")


@dataclass(frozen=True)
class Superiority:
    """Claim: the effect is above 0 (``"greater"``) or below 0 (``"less"``), or differs from 0 either way
    (``"two-sided"``: a claim that names no direction, e.g. "dropout influences redundancy"; ``supported`` by either
    one-sided test, both in the Holm family, together a two-sided test at alpha; never ``contradicted``).
    ``margin``: the smallest effect of interest (>= 0), used only to say ``not supported`` (two-sided: the TOST
    within +-margin). ``test``: ``"t"`` (one-sample t) or ``"sign_flip"``."""

    direction: Literal["greater", "less", "two-sided"] = "greater"
    alpha: float = 0.05
    margin: Margin = 0.0
    test: Literal["t", "sign_flip"] = "t"
    kind: str = field(default="superiority", init=False)

    def __post_init__(self):
        _check_alpha(self.alpha)
        if self.direction not in ("greater", "less", "two-sided") or self.test not in ("t", "sign_flip"):
            raise ValueError(f"direction must be 'greater'/'less'/'two-sided' and test 't'/'sign_flip', got {self}")


@dataclass(frozen=True)
class Equivalence:
    """Claim: ``|effect| < margin`` (TOST). ``margin``: a number (> 0) or a callable of the measurement
    (:class:`ShareOfHeadroom`), a smallest effect of interest (:mod:`headprune_utils.analysis.margins`)."""

    margin: Margin
    alpha: float = 0.05
    test: str = field(default="t", init=False)
    kind: str = field(default="equivalence", init=False)

    def __post_init__(self):
        _check_alpha(self.alpha)


@dataclass(frozen=True)
class NonInferiority:
    """Claim: the effect is no worse than ``-margin`` (``"greater"``: higher is better) or no higher than
    ``+margin`` (``"less"``)."""

    margin: Margin
    direction: Literal["greater", "less"] = "greater"
    alpha: float = 0.05
    test: str = field(default="t", init=False)
    kind: str = field(default="non-inferiority", init=False)

    def __post_init__(self):
        _check_alpha(self.alpha)
        if self.direction not in ("greater", "less"):
            raise ValueError(f"direction must be 'greater' or 'less', got {self.direction!r}")


@dataclass(frozen=True)
class Presence:
    """Claim: models trained this way have a head of a role (an existence claim; the measurement's values are
    counts of such heads per unit). Tested on the share of units with a count > 0 against ``margin`` = 1/2 by an
    exact two-sided binomial test, with a Clopper-Pearson interval (module docstring)."""

    alpha: float = 0.05
    direction: str = field(default="greater", init=False)
    margin: float = field(default=0.5, init=False)
    test: str = field(default="binomial", init=False)
    kind: str = field(default="presence", init=False)

    def __post_init__(self):
        _check_alpha(self.alpha)


@dataclass(frozen=True)
class EmpiricalRank:
    """Claim: one observed statistic lies above (``"greater"``) or below (``"less"``) the distribution of a
    reference: for a method that is deterministic given the one pre-trained model (its one result is n = 1, e.g.
    the one zero-shot mask), compared with the draws of a random method (e.g. random masks of the same size).
    The measurement's ``values`` hold the observed statistic, ``null`` one statistic per reference draw (K draws).
    Tests: the exact one-sided empirical p, ``(1 + #{draws at least as extreme}) / (1 + K)`` (the observed result
    counted as one of the draws, so p is never 0), for ``supported`` (beyond the draws in the claim's direction)
    and ``contradicted`` (beyond them the other way). Power gate: ``1 / (1 + K) < alpha`` (20 draws for 0.05).
    Effect: observed - mean of the draws; its interval: observed - the draws' ``alpha`` and ``1 - alpha``
    quantiles (descriptive). No margin: such a claim is supported or contradicted only. Never pooled over tasks
    (one statistic per task)."""

    direction: Literal["greater", "less"] = "greater"
    alpha: float = 0.05
    margin: float = field(default=0.0, init=False)
    test: str = field(default="rank", init=False)
    kind: str = field(default="rank", init=False)

    def __post_init__(self):
        _check_alpha(self.alpha)
        if self.direction not in ("greater", "less"):
            raise ValueError(f"direction must be 'greater' or 'less', got {self.direction!r}")


Rule = Superiority | Equivalence | NonInferiority | Presence | EmpiricalRank
RULES: tuple[type, ...] = (Superiority, Equivalence, NonInferiority, Presence, EmpiricalRank)
_TEST_NAMES = {"t": "one-sided t", "sign_flip": "exact one-sided sign-flip", "binomial": "exact one-sided binomial",
               "rank": "exact one-sided empirical rank"}


@dataclass(frozen=True)
class PoolBy:
    """How a pooled row (over tasks) groups its units before the test, when units of different tasks share a random
    draw: ``key(unit)`` names the unit's cluster (e.g. the seed, when seed s's random mask is the same on every
    task), ``text`` says so (the pooled row's ``unit``). The tasks' normalised unit values are averaged within each
    cluster and the test runs over the clusters: the draws they share are then not counted as independent. Without
    it (a claim's :attr:`Claim.pool_by` None) the pooled test runs over every unit of the pooled tasks."""

    key: Callable[[Hashable], Hashable]
    text: str


SEED_SHARED_MASKS = PoolBy(lambda unit: unit[1] if isinstance(unit, tuple) else unit,  # (task, seed), or a seed
                           "seed (its random masks are the same on every task: the tasks' models of a seed averaged "
                           "first)")


@dataclass(frozen=True)
class Claim:
    """A claim a study tests, declared once as data (each study's ``<study>_claims.py``, its ``CLAIMS``).

    ``id`` (``paper.short_name``), ``paper`` (who claimed it, with the section), ``text`` (the claim in one
    sentence), ``rule`` (how a word is decided: :class:`Superiority`, :class:`Equivalence`,
    :class:`NonInferiority`, :class:`Presence`, :class:`EmpiricalRank`; its margin, the smallest effect of interest
    from :mod:`headprune_utils.analysis.margins`, is the claim's :attr:`margin`), ``metric`` (the quantity measured per unit,
    in words), ``regime`` (the models it is about: e.g. "fine-tuned, then masked", "the pre-trained model"),
    ``semantics`` (the ablation semantics of the claim's own paper, under which its primary verdict is tested; ""
    where the claim masks no head), ``gates`` (:class:`Gate` objects: the preconditions, each rendering its own
    text, :attr:`precondition`), ``figure`` (the name of the study's figure that shows it, ``figures/<name>.png``),
    ``measure`` (the analysis's key of what to measure, e.g. a contrast's name), ``unit`` (the unit of
    replication), ``note`` (where our definition or protocol differs from the paper's, and why) and ``decided_in``
    (the protocol of the claim's own paper, e.g. ``"mask_then_finetune"``: its primary verdicts come from
    measurements made in it, :attr:`Measurement.regime`; those made in another protocol are a sensitivity analysis,
    reported beside them (:func:`in_own_protocol` keeps a primary row when the paper's protocol was not run); ""
    where the claim names no protocol, every measurement then primary), ``pool_by`` (:class:`PoolBy`: how its pooled
    rows cluster units that share a random draw across tasks; None: every unit is its own)."""

    id: str
    paper: str
    text: str
    rule: Rule
    metric: str = ""
    regime: str = ""
    semantics: str = "zero"
    gates: tuple = ()
    figure: str = ""
    measure: str = ""
    unit: str = DEFAULT_UNIT
    note: str = ""
    decided_in: str = ""
    pool_by: PoolBy | None = None

    def __post_init__(self):
        if not re.fullmatch(r"[a-z0-9_]+\.[a-z0-9_]+", self.id):
            raise ValueError(f"claim id must read 'paper.short_name' (lower case), got {self.id!r}")
        if not isinstance(self.rule, RULES):
            raise TypeError(f"claim {self.id}: rule must be one of {[r.__name__ for r in RULES]}, got {self.rule!r}")
        bad = [g for g in self.gates if not isinstance(g, Gate)]
        if bad:
            raise TypeError(f"claim {self.id}: gates must be claims.Gate objects (their text is the precondition), "
                            f"got {bad}")
        object.__setattr__(self, "gates", tuple(self.gates))

    @property
    def margin(self) -> Margin:
        return self.rule.margin

    @property
    def precondition(self) -> str:
        """The claim's preconditions in words (its gates' texts, then the rule's power gate)."""
        power = ("the one-sided test can reach alpha with the units at hand"
                 if self.rule.kind != "rank" else "enough reference draws for the empirical p to reach alpha")
        return "; ".join([*(g.text() for g in self.gates), power])

    def at(self, alpha: float) -> Rule:
        """The claim's rule at level ``alpha``."""
        return replace(self.rule, alpha=alpha)


def _label(rule: Rule, effect: str, margin_note: str) -> str:
    """The ``test`` column: kind (direction); tests on what; alpha; margin derivation. :func:`decide` parses it."""
    head = "TOST" if rule.kind == "equivalence" else rule.direction
    what = effect or "unit means"
    if rule.kind == "presence":
        what = f"share of units with {what} > 0 (Clopper-Pearson CI)"
    if rule.kind == "rank":
        what = f"{effect or 'the observed statistic'} against the reference draws"
    text = f"{rule.kind} ({head}); {_TEST_NAMES[rule.test]} tests on {what}; alpha={rule.alpha:g}"
    return text + (f"; margin: {margin_note}" if margin_note else "")


_LABEL = re.compile(r"^(superiority|equivalence|non-inferiority|presence|rank) \((greater|less|two-sided|TOST)\); "
                    r"(one-sided t|exact one-sided sign-flip|exact one-sided binomial|exact one-sided empirical rank) "
                    r"tests on .*?; "
                    r"alpha=([0-9.eE+-]+)(;|$)")


def _parse_label(label: str) -> tuple[str, str, str, float]:
    match = _LABEL.match(str(label))
    if not match:
        raise ValueError(f"not a claims test label: {label!r}")
    kind, direction, test, alpha, _ = match.groups()
    return kind, direction, test, float(alpha)


@dataclass(frozen=True)
class HypothesisTest:
    """One one-sided test of a row: significant after Holm (``p_adjusted < alpha``), it gives the verdict ``word``.

    H1: ``effect > bound`` (``side="greater"``) or ``effect < bound`` (``"less"``), the effect in its own
    orientation (for presence: the share of units with the role); ``method="TOST"``: ``|effect| < bound``."""

    word: str
    side: str
    bound: float
    method: str
    p: float
    p_adjusted: float = float("nan")

    @property
    def h1(self) -> str:
        what = "share" if "binomial" in self.method else "effect"
        if "empirical rank" in self.method:
            return f"observed {'>' if self.side == 'greater' else '<'} the reference draws"
        if self.method.startswith("TOST"):
            return f"|{what}| < {self.bound:.3g}"
        bound = "0" if self.bound == 0 else f"{self.bound:+.3g}"
        return f"{what} {'>' if self.side == 'greater' else '<'} {bound}"

    @property
    def direction(self) -> int:
        """+1 when the test, significant, shows the effect above 0; -1 below 0; 0 when it shows neither."""
        if self.method.startswith("TOST") or "binomial" in self.method:
            return 0
        if self.side == "greater" and self.bound >= 0:
            return 1
        if self.side == "less" and self.bound <= 0:
            return -1
        return 0

    def text(self) -> str:
        return f"{self.word}: {self.h1} ({self.method})"

    def as_dict(self) -> dict:
        return {"word": self.word, "side": self.side, "bound": self.bound, "method": self.method, "p": self.p,
                "p_adjusted": self.p_adjusted}


def _dump_tests(tests: Sequence[HypothesisTest]) -> str:
    return json.dumps([t.as_dict() for t in tests])


def row_tests(row) -> list[HypothesisTest]:
    """The tests of a verdict row (its ``tests`` column; none for a row outside the Holm family)."""
    raw = row["tests"] if "tests" in row else ""
    if raw is None or (isinstance(raw, float) and np.isnan(raw)) or str(raw).strip() in ("", "[]"):
        return []
    return [HypothesisTest(**{**d, "p_adjusted": float("nan") if d.get("p_adjusted") is None else d["p_adjusted"]})
            for d in json.loads(str(raw))]


# ------------------------------------------------------------------------------------------- measurements

@dataclass(frozen=True)
class Measurement:
    """What a claim is measured on, for one task x setting x ablation semantics.

    ``values``: the effect per observation (e.g. a paired difference score(a) - score(b)), one or more per
    unit; ``units``: the unit (independently trained model, e.g. ``(task, seed)`` or the seed) of each value.
    ``effect``: the effect's name (goes into the ``test`` column). ``full``: the full model's score per unit
    (margins, ``preconditions.AboveChance``, normalisation), ``chance``: the chance score (same units as ``full``).
    ``missing``: why nothing could be measured (:meth:`absent`; the row is then ``not testable`` with that reason).
    ``null``: for the :class:`EmpiricalRank` rule only, the statistic of each draw of the reference distribution
    (e.g. each random mask), ``values`` holding the one observed statistic. ``regime``: the protocol the models
    were measured in (e.g. ``"mask_then_finetune"``; "" when the claim's protocols do not differ): a measurement
    outside its claim's :attr:`Claim.decided_in` gives a sensitivity row.
    """

    task: str
    values: Sequence[float]
    units: Sequence[Hashable]
    setting: str = ""
    semantics: str = ""
    effect: str = ""
    unit: str = DEFAULT_UNIT
    full: Sequence[float] | None = None
    chance: float | None = None
    missing: str = ""
    null: Sequence[float] | None = None
    regime: str = ""

    def unit_values(self) -> np.ndarray:
        """``[n_units]`` the mean value of each unit (order of first appearance); empty when nothing was measured."""
        if len(self.values) == 0:
            return np.zeros(0)
        return stats.unit_means(self.values, self.units)[1]

    @property
    def n_units(self) -> int:
        return 0 if len(self.values) == 0 else len(stats.unit_means(self.values, self.units)[0])

    @classmethod
    def absent(cls, task: str, why: str, *, setting: str = "", semantics: str = "", unit: str = DEFAULT_UNIT,
               effect: str = "", regime: str = "") -> "Measurement":
        """A measurement that could not be made (``why``: what is missing, e.g. "no paired cells of zero_shot and
        random under the zero semantics in this run"): its row is ``not testable`` with that reason (the
        :class:`Measured` gate, which :func:`evaluate` always applies first), 0 units, outside the Holm family."""
        if not str(why).strip():
            raise ValueError("an absent measurement needs the reason it is absent")
        return cls(task, [], [], setting, semantics, effect, unit, missing=str(why), regime=regime)

    @property
    def headroom(self) -> float | None:
        """``mean(full) - chance``, or None when either is missing."""
        if self.full is None or self.chance is None or len(self.full) == 0:
            return None
        return float(np.mean(np.asarray(self.full, dtype=float))) - float(self.chance)


class Gate:
    """A precondition of a claim, as an object: :meth:`text` says what must hold (a claim's precondition is its
    gates' texts, :attr:`Claim.precondition`); :meth:`check` returns ``None`` when it holds for a measurement, else
    the failed precondition with its numbers (the reason of the ``not testable`` row). ``evidence``: what the
    analysis hands :func:`evaluate` besides the measurements (e.g. the adaptation differences of a run), by name.
    Standard gates: :mod:`headprune_utils.analysis.preconditions`; a gate is also callable as ``gate(m, evidence)``."""

    def text(self) -> str:
        raise NotImplementedError

    def check(self, m: "Measurement", evidence: Mapping) -> str | None:
        raise NotImplementedError

    def __call__(self, m: "Measurement", evidence: Mapping | None = None) -> str | None:
        return self.check(m, evidence or {})


class Measured(Gate):
    """The gate :func:`evaluate` applies first to every measurement: something was measured (else the
    measurement's ``missing`` reason; :meth:`Measurement.absent`)."""

    def text(self) -> str:
        return "the run measured it"

    def check(self, m: "Measurement", evidence: Mapping) -> str | None:
        if m.missing:
            return m.missing
        return None if len(m.values) else f"nothing measured on {m.task}"


def _needed_units(test: str, alpha: float) -> int:
    n = 1
    while stats.min_attainable_p(test, n, "greater") >= alpha:
        n += 1
    return n


def enough_units(test: Literal["t", "sign_flip", "wilcoxon", "binomial"] = "t", alpha: float = 0.05,
                 n: int | None = None) -> Gate:
    """Gate: the one-sided ``test`` (every decision test is one-sided) can reach p < ``alpha`` with the
    measurement's units (or ``n`` units)."""

    def gate(m: Measurement) -> str | None:
        k = m.n_units if n is None else n
        smallest = stats.min_attainable_p(test, k, "greater") if k >= 1 else 1.0
        if smallest < alpha:
            return None
        need = _needed_units(test, alpha)
        if test == "t":
            return f"a one-sample t-test needs at least {need} units; got {k}"
        return (f"a one-sided {test.replace('_', '-')} test over {k} units cannot reach p < {alpha:g} "
                f"(smallest attainable p = {smallest:.3g}; needs {need} units)")

    return gate


# ---------------------------------------------------------------------------------------------- computing

def _fmt(x: float) -> str:
    return "n/a" if x is None or pd.isna(x) else f"{x:+.3g}"


def _margin(rule: Rule, m: Measurement) -> float:
    value = float(rule.margin(m) if callable(rule.margin) else rule.margin)
    positive = rule.kind not in ("superiority", "rank")  # a margin of 0 can never be shown (equivalence, non-inferiority)
    if not np.isfinite(value) or value < 0 or (positive and value == 0):
        raise Untestable(f"the margin ({_describe_margin(rule.margin)}) is {value:.3g} on {m.task}; "
                         f"it must be {'> 0' if positive else '>= 0'}")
    return value


def _presence(rule: Rule, x: np.ndarray) -> tuple[float, float, float]:
    """``(k / n, Clopper-Pearson low, high)`` of unit counts ``x`` (a unit has the role: > 0)."""
    k, n = int((x > 0).sum()), int(x.size)
    low, high = stats.clopper_pearson(k, n, 1 - rule.alpha)
    return k / n, low, high


def _interval(rule: Rule, x: np.ndarray) -> tuple[float, float, float]:
    """``(effect, ci_low, ci_high)`` of unit values ``x`` under ``rule`` (descriptive; no test). For
    :class:`EmpiricalRank`, ``x`` is ``[observed, *draws]``."""
    if rule.kind == "presence":
        return _presence(rule, x)
    if rule.kind == "rank":
        obs, null = float(x[0]), x[1:]
        if null.size == 0:
            return float("nan"), float("nan"), float("nan")
        return (obs - float(null.mean()), obs - float(np.quantile(null, 1 - rule.alpha)),
                obs - float(np.quantile(null, rule.alpha)))
    return stats.t_interval(x, 1 - rule.alpha * (1 if rule.kind == "superiority" else 2))


def _power(rule: Rule, m: Measurement, x: np.ndarray) -> str | None:
    """The power gate of the test that will run: the rule's, or the exact sign-flip test when a t-test rule meets
    unit values that are all the same (:func:`_one_sided`)."""
    if rule.kind == "rank":
        k = max(0, x.size - 1)
        if 1 / (1 + k) < rule.alpha:
            return None
        return (f"an empirical p over {k} reference draws cannot go below 1/{k + 1} = {1 / (k + 1):.3g}, not below "
                f"{rule.alpha:g} (needs {int(np.floor(1 / rule.alpha - 1)) + 1} draws)")
    test = "sign_flip" if rule.test == "t" and x.size >= 2 and float(np.ptp(x)) == 0.0 else rule.test
    return enough_units(test, rule.alpha)(m)


def _one_sided(rule: Rule, x: np.ndarray, side: str, bound: float) -> tuple[float, str]:
    """``(p, method)`` of H1 ``mean(x) > bound`` (``side="greater"``) or ``< bound``: one-sided t on the unit
    values, or the exact one-sided sign-flip test of ``x - bound`` (``rule.test == "sign_flip"``, or when every
    unit gave the same value: the t statistic is then undefined)."""
    if rule.test == "sign_flip" or (x.size >= 2 and float(np.ptp(x)) == 0.0):
        return stats.sign_flip_test(x - bound, alternative=side), _TEST_NAMES["sign_flip"]
    return stats.t_test_p(x, bound, side), _TEST_NAMES["t"]


def _tests(rule: Rule, x: np.ndarray, margin: float) -> list[HypothesisTest]:
    """Every test that can decide a word of a row with unit values ``x`` (:data:`DECISION_TABLE`)."""
    other = {"greater": "less", "less": "greater"}
    if rule.kind == "rank":
        obs, null, method = float(x[0]), x[1:], _TEST_NAMES["rank"]
        k = null.size
        p_up, p_down = (1 + int((null >= obs).sum())) / (1 + k), (1 + int((null <= obs).sum())) / (1 + k)
        d = rule.direction
        mine, theirs = (p_up, p_down) if d == "greater" else (p_down, p_up)
        return [HypothesisTest("supported", d, 0.0, method, mine),
                HypothesisTest("contradicted", other[d], 0.0, method, theirs)]
    if rule.kind == "presence":
        k, n = int((x > 0).sum()), int(x.size)
        method = _TEST_NAMES["binomial"]
        return [HypothesisTest("supported", "greater", 0.5, method, stats.binomial_test_p(k, n, "greater")),
                HypothesisTest("contradicted", "less", 0.5, method, stats.binomial_test_p(k, n, "less"))]

    def test(word: str, side: str, bound: float) -> HypothesisTest:
        p, method = _one_sided(rule, x, side, bound)
        return HypothesisTest(word, side, float(bound), method, p)

    if rule.kind == "superiority" and rule.direction == "two-sided":
        out = [test("supported", "greater", 0.0), test("supported", "less", 0.0)]
        if margin > 0:
            lower, upper = test("", "greater", -margin), test("", "less", margin)
            out.append(HypothesisTest("not supported", "inside", float(margin), f"TOST, {lower.method}",
                                      max(lower.p, upper.p)))
        return out
    if rule.kind == "superiority":
        d, s = rule.direction, (-1.0 if rule.direction == "less" else 1.0)
        out = [test("supported", d, 0.0), test("contradicted", other[d], 0.0)]
        if margin > 0:
            out.append(test("not supported", other[d], s * margin))
        return out
    if rule.kind == "equivalence":
        above, below = test("contradicted", "greater", margin), test("contradicted", "less", -margin)
        lower, upper = test("", "greater", -margin), test("", "less", margin)
        tost = HypothesisTest("supported", "inside", float(margin), f"TOST, {lower.method}", max(lower.p, upper.p))
        return [tost, above, below]
    d, s = rule.direction, (-1.0 if rule.direction == "less" else 1.0)  # non-inferiority
    return [test("supported", d, -s * margin), test("contradicted", other[d], -s * margin)]


def _row(claim, study: str, scale: str, task: str, m: Measurement, rule: Rule, x: np.ndarray, margin: float,
         label: str, reasons: list[str]) -> dict:
    testable = not reasons
    nan = float("nan")
    tests: list[HypothesisTest] = []
    if x.size:
        effect, low, high = _interval(rule, x)
        if testable:
            tests = _tests(rule, x, margin)
        elif rule.kind == "presence":  # descriptive only: no test, so outside the Holm family
            reasons = [*reasons, f"found in {int((x > 0).sum())} of {x.size} units ({100 * (1 - rule.alpha):g}% "
                                 f"Clopper-Pearson CI of the share [{low:.3g}, {high:.3g}])"]
    else:
        effect = low = high = nan
    return {"study": study, "claim_id": claim.id, "paper": claim.paper, "claim": claim.text, "task": task,
            "setting": m.setting, "semantics": m.semantics, "analysis": _analysis(claim, m), "effect": effect,
            "ci_low": low,
            "ci_high": high, "n_units": (1 if x.size else 0) if rule.kind == "rank" else int(x.size), "unit": m.unit, "test": label, "p": nan, "p_adjusted": nan,
            "p_test": "", "margin": margin, "verdict": "inconclusive" if testable else "not testable",
            "reason": "" if testable else "; ".join(reasons), "scale": scale, "tests": _dump_tests(tests),
            "unit_values": json.dumps([float(v) for v in x])}


def _analysis(claim: Claim, m: Measurement) -> str:
    """``"sensitivity"`` for a measurement made outside the protocol its claim is decided in (:attr:`Claim.decided_in`),
    else ``"primary"`` (:func:`adjust` then makes rows under another semantics sensitivity too)."""
    decided_in = getattr(claim, "decided_in", "")
    return "sensitivity" if decided_in and m.regime and m.regime != decided_in else "primary"


def in_own_protocol(claim: Claim, measurements: Iterable[Measurement], semantics: str,
                    protocol_names: Mapping[str, str] | None = None) -> list[Measurement]:
    """``measurements`` of ``claim`` under ``semantics``, plus an absent measurement in the claim's own protocol
    (:attr:`Claim.decided_in`) for each task measured only in another one, when the claim is decided in one and
    ``semantics`` is its own: that task's primary row is then ``not testable``, saying the paper's protocol was not
    run on it, instead of the claim being decided there on the other protocol's rows (which stay, as its
    sensitivity analysis). ``protocol_names``: each protocol in words (the rows' setting); a ``decided_in`` that
    is none of them is a ValueError naming the claim."""
    ms = list(measurements)
    if protocol_names is not None and claim.decided_in and claim.decided_in not in protocol_names:
        raise ValueError(f"claim {claim.id}: decided_in={claim.decided_in!r} is none of this study's protocols "
                         f"({', '.join(protocol_names)})")
    if not claim.decided_in or semantics != claim.semantics or all(m.missing for m in ms):
        return ms  # nothing measured at all: its one absent row says why
    name = (protocol_names or {}).get(claim.decided_in, claim.decided_in)
    why = f"no cell of this run measures it in {claim.paper}'s protocol ({name}) under the {semantics} semantics"
    own = {m.task for m in ms if m.regime == claim.decided_in}
    tasks = [t for t in dict.fromkeys(m.task for m in ms if not m.missing) if t not in own]
    effect = next((m.effect for m in ms if m.effect), "")  # what the other protocol measured: the row's unit
    return [*ms, *(Measurement.absent(t, why + f" on {t}", setting=name, semantics=semantics, unit=claim.unit,
                                      effect=effect, regime=claim.decided_in) for t in tasks)]


def evaluate(claim: Claim, measurements: Iterable[Measurement], *legacy, evidence: Mapping | None = None,
             alpha: float | None = None, scale: str = "", study: str = "") -> pd.DataFrame:
    """The verdict rows of one claim: one row per measurement, then a pooled row per setting x semantics measured
    on 2+ tasks (module docstring; never for :class:`EmpiricalRank`), Holm-adjusted within the claim
    (:func:`adjust` the study's concatenated table for its family). The claim's ``rule`` (at ``alpha`` when given)
    decides; every measurement passes :class:`Measured` first (an absent one is ``not testable`` for its
    ``missing`` reason alone), then the rule's power gate, then the claim's ``gates`` (all are checked, with
    ``evidence``; the failed preconditions, joined, are the reason of ``not testable``)."""
    if isinstance(measurements, RULES) or legacy:
        raise TypeError("evaluate(claim, measurements, *, evidence=..., alpha=..., scale=..., study=...): the claim "
                        "carries its rule and gates")
    rule = claim.rule if alpha is None else claim.at(alpha)
    ev = dict(evidence or {})
    return _evaluate(claim, rule, measurements, [lambda m, g=g: g.check(m, ev) for g in claim.gates], scale, study)


def _sample(rule: Rule, m: Measurement) -> np.ndarray:
    """The values a row is tested on: the unit means; for :class:`EmpiricalRank`, ``[observed, *draws]``."""
    if rule.kind != "rank":
        return m.unit_values()
    if len(m.values) != 1:
        raise ValueError(f"an empirical-rank measurement holds one observed statistic, got {len(m.values)} on {m.task}")
    null = np.asarray([] if m.null is None else m.null, dtype=float)
    if not np.isfinite(null).all() or not np.isfinite(float(m.values[0])):
        raise ValueError(f"non-finite statistic in the empirical-rank measurement of {m.task}")
    return np.concatenate([[float(m.values[0])], null])


def _evaluate(claim, rule: Rule, measurements: Iterable[Measurement], gates: Sequence = (), scale: str = "",
              study: str = "") -> pd.DataFrame:
    measurements = list(measurements)
    rows, info = [], []
    for m in measurements:
        reasons, margin = [], float("nan")
        absent = Measured().check(m, {})
        if absent:
            x = np.zeros(0)
            rows.append(_row(claim, study, scale, m.task, m, rule, x, margin,
                             _label(rule, m.effect, _margin_note(rule, margin)), [absent]))
            info.append((m, x, margin, False))
            continue
        try:
            margin = _margin(rule, m)
        except Untestable as e:
            reasons.append(str(e))
        x = _sample(rule, m)
        short = _power(rule, m, x)  # too few units: the task may still join a pool (module docstring)
        reasons += [r for r in (g(m) for g in gates) if r]
        poolable = not reasons and (short is None or m.n_units >= 2)
        reasons = [r for r in (short, *reasons) if r]
        rows.append(_row(claim, study, scale, m.task, m, rule, x, margin,
                         _label(rule, m.effect, _margin_note(rule, margin)), reasons))
        info.append((m, x, margin, poolable))
    groups: dict[tuple[str, str], list[int]] = {}
    for i, m in enumerate(measurements):
        if not Measured().check(m, {}):  # an absent measurement is never pooled (its row says why it is absent)
            groups.setdefault((m.setting, m.semantics), []).append(i)
    pooled = []
    for idx in groups.values():
        tasks = [measurements[i].task for i in idx]
        if len(set(tasks)) != len(tasks):
            raise ValueError(f"claim {claim.id}: task measured twice with one setting and semantics: {tasks}")
        if len(idx) >= 2 and rule.kind != "rank":
            pooled.append(_pooled_row(claim, rule, study, scale, [rows[i] for i in idx], [info[i] for i in idx]))
    table = pd.DataFrame(rows + pooled, columns=list(COLUMNS))
    return adjust(table)


def _margin_note(rule: Rule, margin: float) -> str:
    if rule.kind == "presence":
        return "0.5 = the share of units with the role under the null (most units have one)"
    if rule.kind in ("superiority", "rank") and not callable(rule.margin) and float(rule.margin) == 0:
        return ""
    return f"{margin:.3g} = {_describe_margin(rule.margin)}" if np.isfinite(margin) else _describe_margin(rule.margin)


def _pooled_row(claim, rule: Rule, study: str, scale: str, rows: list[dict], info: list) -> dict:
    measurements = [m for m, *_ in info]
    have = [m.headroom is not None for m in measurements if not Measured().check(m, {})]
    if any(have) and not all(have):
        raise ValueError(f"claim {claim.id}: give full and chance scores for every task or for none")
    normalise = all(have)
    ok = [i for i, r in enumerate(rows) if r["verdict"] != "not testable" or info[i][3]]
    bad = [measurements[i].task for i in ok if normalise and measurements[i].headroom <= 0]
    ok = [i for i in ok if measurements[i].task not in bad]
    base = measurements[0]
    names = ", ".join(measurements[i].task for i in ok)
    pool_task = f"all ({names})"
    unit = base.unit if all(m.unit == base.unit for m in measurements) else DEFAULT_UNIT
    scale_of = [measurements[i].headroom if normalise else 1.0 for i in ok]
    x = np.concatenate([info[i][1] / h for i, h in zip(ok, scale_of)]) if ok else np.zeros(0)
    pool_by = claim.pool_by
    if pool_by is not None and rule.kind != "rank":
        unit = pool_by.text  # the pool's unit, whether or not it can be formed
        if ok:
            labels = [u for i in ok for u in stats.unit_means(measurements[i].values, measurements[i].units)[0]]
            _, x = stats.unit_means(x, [pool_by.key(u) for u in labels]) if x.size else ([], x)
    margin = min((info[i][2] / h for i, h in zip(ok, scale_of)), default=float("nan"))
    span = rule.margin.span if isinstance(rule.margin, ShareOfHeadroom) else "(full - chance)"
    span = f" / {span}" if normalise else ""
    what = (base.effect or "unit means") + span
    note = f"smallest of the tasks' margins{span}"
    label = _label(rule, what, (f"{margin:.3g} = {note}" if np.isfinite(margin) else f"n/a (no testable task to pool); {note}")
                   if _margin_note(rule, margin) else "")
    pool_m = Measurement(pool_task, x, list(range(x.size)), base.setting, base.semantics, unit=unit,
                         regime=base.regime)
    if len(ok) < 2:
        why = [f"fewer than 2 tasks testable for pooling (testable: {names or 'none'})"]
        if bad:
            why.append(f"cannot normalise: full <= chance on {', '.join(bad)}")
        pool_task = f"all ({', '.join(m.task for m in measurements)})"  # the pool that could not be formed
        # ... so no number of its own: the one testable task's values under the pool's name would read as a pooled
        # effect (they are that task's row, normalised)
        return _row(claim, study, scale, pool_task, pool_m, rule, np.zeros(0), margin, label, why)
    return _row(claim, study, scale, pool_task, pool_m, rule, x, margin, label,
                [r for r in (_power(rule, pool_m, x),) if r])


def pool_tasks(task: str) -> list[str] | None:
    """The tasks of a pooled row's name, ``"all (A, B)"`` -> ``["A", "B"]``; None for a task's own row."""
    text = str(task).strip()
    if not (text.startswith("all (") and text.endswith(")")):
        return None
    return [t.strip() for t in text[len("all ("):-1].split(",")]


_OVERRIDDEN = "a task decided otherwise: "
_IN_FAMILY = "; its tests count in the Holm family, its word is withheld"
# the words of a claim's two stances: a pooled word of one stance is withheld beside a task decided in the other
_STANCE = {"supported": 1, "contradicted": -1, "not supported": -1}


def withheld(row) -> bool:
    """Whether ``row`` is a pooled row whose word is withheld because a task of the pool decided otherwise."""
    return str(row.get("reason", "")).startswith(_OVERRIDDEN)


def _against(table: pd.DataFrame, i, members: list) -> list:
    """The task rows among ``members`` decided against pooled row ``i``'s word: in the other stance (supported against
    contradicted / not supported), or in the same word shown in the opposite direction (an equivalence claim
    contradicted above +margin on the pool and below -margin on a task; a two-sided difference)."""
    word = table.at[i, "verdict"]
    pool_dir = _deciding(table.loc[i])[1].direction if row_tests(table.loc[i]) else 0
    out = []
    for j in members:
        w = table.at[j, "verdict"]
        if w not in _STANCE:
            continue
        if _STANCE[w] != _STANCE[word]:
            out.append(j)
        elif pool_dir and row_tests(table.loc[j]) and pool_dir * _deciding(table.loc[j])[1].direction < 0:
            out.append(j)
    return out


def _check_members(table: pd.DataFrame, i, members: list) -> None:
    """A tested pooled row's tasks must all be in the table beside it (same study, claim, setting, semantics and
    analysis): a pool judged without one of its tasks could override it unseen."""
    named = pool_tasks(table.at[i, "task"]) or []
    found = {str(table.at[j, "task"]) for j in members}
    missing = [t for t in named if t not in found]
    if missing:
        raise ValueError(f"{table.at[i, 'claim_id']} / {table.at[i, 'task']}: the rows of {', '.join(missing)} are not in "
                         "the table beside their pooled row (same study, claim, setting, semantics, analysis): a pool "
                         "is decided with its tasks' rows")


def _pool_members(table: pd.DataFrame) -> dict:
    """``{index of a pooled row: indexes of its tasks' rows}`` (same study, claim, setting, semantics and analysis;
    the tasks named in the pooled row's task, :func:`pool_tasks`)."""
    key = ["study", "claim_id", "setting", "semantics", "analysis"]
    keyed = pd.Series(["|".join(map(str, r)) for r in table.reindex(columns=key).itertuples(index=False)],
                      index=table.index)
    out = {}
    for i in table.index:
        tasks = pool_tasks(table.at[i, "task"])
        if tasks:
            out[i] = list(table.index[(keyed == keyed[i]) & table["task"].astype(str).isin(tasks)])
    return out


# ----------------------------------------------------------------------------------------------- verdicts

# When two words' tests are significant: contradicted and not supported agree (an effect shown below 0 is shown below
# the margin too) and the stronger word is given; supported and not supported (an effect shown above 0 AND below the
# smallest effect of interest) mean a difference too small to matter, which is what the margin is for: not supported.
# (supported and contradicted test opposite sides and cannot both be significant.)
_PRIORITY = ("contradicted", "not supported", "supported")


def _deciding(row) -> tuple[str, HypothesisTest | None]:
    """The row's word and the test that decided it (of an ``inconclusive`` row: its test with the smallest adjusted
    p; None without tests)."""
    _, _, _, alpha = _parse_label(row["test"])
    tests = row_tests(row)
    if not tests:
        return str(row["verdict"]), None
    if any(pd.isna(t.p_adjusted) for t in tests):
        raise ValueError(f"row {row.get('claim_id', '')} / {row.get('task', '')}: a test without an adjusted p "
                         "(run claims.adjust on the study's table)")
    for word in _PRIORITY:
        cands = [t for t in tests if t.word == word]
        if cands:
            best = min(cands, key=lambda t: t.p_adjusted)
            if best.p_adjusted < alpha:
                return word, best
    return "inconclusive", min(tests, key=lambda t: t.p_adjusted)


def decide(row) -> tuple[str, str]:
    """``(verdict, reason)`` of a tested row (fields effect, ci_low, ci_high, margin, n_units, test and ``tests``
    with adjusted p-values) by :data:`DECISION_TABLE`: the word of the first of supported, contradicted, not
    supported whose own test has an adjusted p below alpha (``_PRIORITY``: contradicted, not supported, supported),
    else ``inconclusive``."""
    kind, direction, test, alpha = _parse_label(row["test"])
    word, t = _deciding(row)
    if t is None:
        raise ValueError("decide needs a row with tests (a row outside the Holm family keeps its verdict)")
    head = _described_effect(row)
    if word == "inconclusive":
        each = "; ".join(f"{x.word}: {x.h1}, Holm-adjusted p = {x.p_adjusted:.3g}" for x in row_tests(row))
        return word, f"{head}: no test reaches {alpha:g} after Holm ({each})"
    return word, (f"{head}: {t.h1} ({t.method}), p = {t.p:.3g}, Holm-adjusted p = {t.p_adjusted:.3g} "
                  f"< {alpha:g}")


def _described_effect(row) -> str:
    """The effect of a row with unit values in words: the effect, its units, its (unadjusted) interval and margin."""
    kind, _, _, alpha = _parse_label(row["test"])
    m = float(row["margin"])
    effect, low, high = float(row["effect"]), float(row["ci_low"]), float(row["ci_high"])
    level = 1 - alpha if kind in ("superiority", "presence") else 1 - 2 * alpha
    ci = f"{100 * level:g}% CI [{_fmt(low)}, {_fmt(high)}]"
    if kind == "presence":
        units = int(row["n_units"])
        return f"found in {int(round(effect * units))} of {units} units (share {effect:.3g}; {ci}, Clopper-Pearson)"
    if kind == "rank":
        k = len(json.loads(str(row["unit_values"]))) - 1
        return (f"observed - mean of {k} reference draws = {_fmt(effect)} (observed - the draws' {alpha:g} to "
                f"{1 - alpha:g} quantiles [{_fmt(low)}, {_fmt(high)}]; n = 1)")
    n = f"{int(row['n_units'])} units"
    return f"effect {_fmt(effect)} ({n}; {ci}{f'; margin {m:.3g}' if kind != 'superiority' or m > 0 else ''})"


def _smallest_p(row) -> float:
    """The smallest p-value the row's tests can give with its units, whatever the data: from the rule's declared test
    (its ``test`` label) and the number of units, so that it depends on the design alone (a t rule whose units all
    gave one value runs the exact sign-flip test, but counts as the t-test it declared: counting a test that cannot
    reach a level as one that can only keeps Tarone's factor larger, never smaller). 0 for a t-test on 2 or more
    units; ``1 / 2**n`` for an exact one-sided sign-flip or binomial test over n units (:func:`stats.min_attainable_p`;
    a Monte Carlo sign-flip test of many units is counted with that bound too, which is conservative); ``1 / (1 + K)``
    for an empirical rank among K reference draws."""
    _, _, test, _ = _parse_label(row["test"])
    raw = str(row["unit_values"]).strip() if pd.notna(row["unit_values"]) else ""
    x = json.loads(raw) if raw else []
    n = len(x) if x else int(row["n_units"]) if pd.notna(row["n_units"]) and str(row["n_units"]) != "" else 0
    if test == _TEST_NAMES["rank"]:
        return 1.0 / max(1, n)  # unit_values: the observed statistic, then the K draws
    return stats.min_attainable_p(_METHOD_TEST[test], max(n, 1), "greater")


def family_tests(table: pd.DataFrame) -> pd.DataFrame:
    """Every hypothesis test of ``table`` in long form (columns: row, family, word, h1, p, p_adjusted), ``row`` the
    index of its verdict row; ``family`` the Holm family (:func:`adjust`)."""
    fam = _families(table)
    rows = [{"row": i, "family": fam[i], "word": t.word, "h1": t.h1, "p": t.p, "p_adjusted": t.p_adjusted}
            for i in table.index for t in row_tests(table.loc[i])]
    return pd.DataFrame(rows, columns=["row", "family", "word", "h1", "p", "p_adjusted"])


def _families(table: pd.DataFrame) -> pd.Series:
    return table["study"].astype(str) + "|" + table["analysis"].astype(str) + "|" + pd.Series(np.where(
        table["analysis"] == "sensitivity", table["semantics"].astype(str), ""), index=table.index)


def adjust(table: pd.DataFrame, primary: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Holm-adjust every hypothesis test of every tested row within its family and set those rows' verdicts
    (:func:`decide`), ``p``, ``p_adjusted`` and ``p_test`` (the deciding test's). Rows without tests (not
    testable) keep their verdict and reason; a pooled row whose word one of its tasks' rows decides the other way
    (module docstring) is adjusted with its family and reads ``inconclusive``, the task and the word it would have
    had named in its reason. Returns a new table in :data:`COLUMNS` order.

    ``primary``: ``{claim_id: the semantics of the claim's own paper}`` (:attr:`Claim.semantics`). A row
    measured under that semantics is the ``"primary"`` analysis unless it already is a sensitivity one (measured
    outside the claim's protocol, :attr:`Claim.decided_in`), any other a ``"sensitivity"`` one (claims not
    in ``primary`` keep the ``analysis`` they have, else ``"primary"``). Families: a study's primary rows are one
    family (the claims as the papers made them); each sensitivity semantics of a study is a family of its own
    (a re-test of the same claims under another intervention or protocol, which must not dilute the primary
    tests). All the tests of a row (e.g. both directions of a superiority claim) are members of its family. The
    adjustment is Holm's step-down with Tarone's factor (:func:`stats.tarone_holm`, Hommel & Krummenauer 1998): at
    each step the factor counts the remaining tests that can still reach ``alpha / K`` by their design
    (:func:`_smallest_p`), so an exact test over few models that cannot does not raise every other test's factor;
    with t-tests only it is Holm's. One alpha per family (else ValueError)."""
    out = table.reindex(columns=list(COLUMNS)).copy()
    out["tests"] = out["tests"].where(out["tests"].notna(), "[]").astype(str)
    out["unit_values"] = out["unit_values"].where(out["unit_values"].notna(), "[]").astype(str)
    out["p_test"] = out["p_test"].where(out["p_test"].notna(), "").astype(object)
    out["analysis"] = out["analysis"].where(out["analysis"].isin(ANALYSES), "primary")
    if primary:
        known = out["claim_id"].isin(list(primary))
        own = out["claim_id"].map(primary)
        out.loc[known, "analysis"] = np.where((out.loc[known, "semantics"] == own[known])
                                              & (out.loc[known, "analysis"] == "primary"), "primary", "sensitivity")
    out["p"] = out["p"].astype(float)
    out["p_adjusted"] = np.nan
    family = _families(out)
    tests = {i: row_tests(out.loc[i]) for i in out.index}
    for name, idx in out.groupby(family, sort=False, dropna=False).groups.items():
        flat = [(i, j) for i in idx for j in range(len(tests[i]))]
        if not flat:
            continue
        alphas = {_parse_label(out.at[i, "test"])[3] for i, _ in flat}
        if len(alphas) > 1:
            raise ValueError(f"Holm family {name!r} mixes alpha levels {sorted(alphas)}: one alpha per family")
        smallest = {i: _smallest_p(out.loc[i]) for i in idx if tests[i]}
        adj = stats.tarone_holm(np.array([tests[i][j].p for i, j in flat], dtype=float),
                                np.array([smallest[i] for i, _ in flat], dtype=float), alphas.pop())
        for (i, j), a in zip(flat, adj):
            t = tests[i][j]
            tests[i][j] = HypothesisTest(t.word, t.side, t.bound, t.method, t.p, float(a))
    for i in out.index:
        if not tests[i]:
            continue
        out.at[i, "tests"] = _dump_tests(tests[i])
        verdict, reason = decide(out.loc[i])
        _, t = _deciding(out.loc[i])
        out.at[i, "verdict"], out.at[i, "reason"] = verdict, reason
        out.at[i, "p"], out.at[i, "p_adjusted"], out.at[i, "p_test"] = t.p, t.p_adjusted, t.text()
    for i, members in _pool_members(out).items():  # a pool never overrides a task (module docstring)
        word = out.at[i, "verdict"]
        if word not in _STANCE or not tests[i]:
            continue
        _check_members(out, i, members)
        against = _against(out, i, members)
        if against:
            t = _deciding(out.loc[i])[1]
            out.at[i, "verdict"] = "inconclusive"
            out.at[i, "reason"] = (_OVERRIDDEN + ", ".join(f"{out.at[j, 'task']} {out.at[j, 'verdict']}: "
                                                           f"{_deciding(out.loc[j])[1].h1} (Holm-adjusted "
                                                           f"p = {out.at[j, 'p_adjusted']:.3g})" for j in against)
                                   + "; a pool never overrides a task" + _IN_FAMILY
                                   + f" (it would read {word}: {t.h1}, Holm-adjusted p = {t.p_adjusted:.3g})")
    return out


def empty_table() -> pd.DataFrame:
    return pd.DataFrame(columns=list(COLUMNS))


def validate(table: pd.DataFrame) -> None:
    """Raise ``ValueError`` unless ``table`` has exactly :data:`COLUMNS`, only :data:`VERDICTS`, a reason on every
    row, and the decision contract holds: every ``supported`` / ``contradicted`` / ``not supported`` row has tests,
    and its ``p_adjusted`` is the Holm-adjusted p of the test that decided that word, below ``alpha``; no pooled
    row's word is of the other stance than a word decided on one of its tasks (a pool never overrides a task)."""
    if tuple(table.columns) != COLUMNS:
        raise ValueError(f"verdict table columns must be {COLUMNS}, got {tuple(table.columns)}")
    bad = set(table["verdict"]) - set(VERDICTS)
    if bad:
        raise ValueError(f"unknown verdict words {sorted(bad)}; use {VERDICTS}")
    odd = set(table["analysis"]) - set(ANALYSES)
    if odd:
        raise ValueError(f"unknown analysis {sorted(map(str, odd))}; use {ANALYSES}")
    missing = table["reason"].isna() | (table["reason"].astype(str).str.strip() == "")
    if missing.any():
        raise ValueError(f"rows without a reason: {table.loc[missing, ['claim_id', 'task']].values.tolist()}")
    for i, r in table.iterrows():
        if r["verdict"] not in DECIDED:
            continue
        where = f"{r['claim_id']} / {r['task']} / {r['setting']} / {r['semantics']}"
        word, t = _deciding(r)
        _, _, _, alpha = _parse_label(r["test"])
        if t is None or word != r["verdict"] or t.word != r["verdict"]:
            raise ValueError(f"{where}: '{r['verdict']}' is not decided by a test of that word")
        # (a table read back from CSV carries p_adjusted to 6 significant digits; ``tests`` keeps every digit)
        if not (np.isclose(float(r["p_adjusted"]), t.p_adjusted, rtol=1e-5, atol=0) and t.p_adjusted < alpha):
            raise ValueError(f"{where}: p_adjusted {r['p_adjusted']} is not the deciding test's ({t.p_adjusted}) "
                             f"below {alpha}")
    for i, members in _pool_members(table).items():  # a pool never overrides a task
        word = table.at[i, "verdict"]
        if word not in _STANCE:
            continue
        _check_members(table, i, members)
        against = [str(table.at[j, "task"]) for j in _against(table, i, members)]
        if against:
            raise ValueError(f"{table.at[i, 'claim_id']} / {table.at[i, 'task']}: the pooled word '{word}' overrides "
                             f"the word decided on {', '.join(against)}")


_METHOD_TEST = {v: k for k, v in _TEST_NAMES.items()}


def _rule_from_label(label: str) -> Rule:
    """The rule of a ``test`` label, without its margin (the margin is passed to :func:`_tests` apart)."""
    kind, direction, test, alpha = _parse_label(label)
    if kind == "superiority":
        return Superiority(direction, alpha, 0.0, _METHOD_TEST[test])
    if kind == "equivalence":
        return Equivalence(1.0, alpha)
    if kind == "non-inferiority":
        return NonInferiority(1.0, direction, alpha)
    if kind == "rank":
        return EmpiricalRank(direction, alpha)
    return Presence(alpha)


def retest(table: pd.DataFrame, factor: float) -> pd.DataFrame:
    """``table`` re-decided with every tested row's margin multiplied by ``factor``: the tests rerun on the row's
    ``unit_values``, Holm within the same families (:func:`adjust`), the tasks' rows and the pools' decided again
    together (a pool never overrides a task under any margin). Rows without tests keep their verdict.
    ``factor = 1`` reproduces the table's verdicts (tested)."""
    if not factor > 0:
        raise ValueError(f"factor must be > 0, got {factor}")
    out = table.reindex(columns=list(COLUMNS)).copy()
    for i in out.index:
        if not row_tests(out.loc[i]):
            continue
        x = np.asarray(json.loads(str(out.at[i, "unit_values"])), dtype=float)
        margin = float(out.at[i, "margin"]) * factor
        out.at[i, "margin"] = margin
        out.at[i, "tests"] = _dump_tests(_tests(_rule_from_label(out.at[i, "test"]), x, margin))
    return adjust(out)


def margin_sensitivity(table: pd.DataFrame, factors: Sequence[float] = (0.5, 2.0)) -> pd.DataFrame:
    """The verdicts under other margins (half and double the declared one by default), a sensitivity analysis
    beside the primary verdicts, never in place of them: one row per row of ``table`` (claim_id, task, setting,
    semantics, analysis, margin, verdict) and a column ``verdict_x<factor>`` per factor, ``changes`` = whether any
    of them differs from the declared margin's verdict."""
    keys = ["claim_id", "task", "setting", "semantics", "analysis", "margin", "verdict"]
    out = table.reindex(columns=list(COLUMNS))[keys].copy()
    for f in factors:
        out[f"verdict_x{f:g}"] = retest(table, f)["verdict"].to_numpy()
    cols = [f"verdict_x{f:g}" for f in factors]
    out["changes"] = out[cols].ne(out["verdict"], axis=0).any(axis=1) if cols else False
    return out.reset_index(drop=True)


# ---------------------------------------------------------------------------------------------- rendering

def _na(row, field: str) -> str:
    if row["verdict"] == "not testable":
        return "n/a (not testable)"
    if field in ("ci_low", "ci_high") and row["n_units"] < 2:
        return "n/a (one unit)"
    return "n/a (not computed)"


def _val(row, field: str) -> str:
    x = row[field]
    if x is None or pd.isna(x):
        return _na(row, field)
    return f"{x:.3g}" if field in ("p", "p_adjusted", "margin") else f"{x:+.3g}"


def render(table: pd.DataFrame) -> str:
    """Plain text, one block per claim: ``claim_id (paper): claim [scale]`` and a line per row,
    ``task | setting | semantics: VERDICT: effect, CI, n, p, Holm p, margin; reason``. Never shows NaN: a
    missing number reads ``n/a (reason)``."""
    lines: list[str] = []
    for (cid, claim), rows in table.groupby(["claim_id", "claim"], sort=False):
        first = rows.iloc[0]
        scale = f" [{first['scale']}]" if str(first["scale"]) else ""
        lines.append(f"{cid} ({first['paper']}): {claim}{scale}")
        for _, r in rows.iterrows():
            sem = f"{r['semantics']} ablation" + (" (sensitivity)" if r["analysis"] == "sensitivity" else "") \
                if str(r["semantics"]) else ""
            where = " | ".join(str(v) for v in (r["task"], r["setting"], sem) if str(v))
            lines.append(
                f"  {where}: {str(r['verdict']).upper()}: effect {_val(r, 'effect')}, CI [{_val(r, 'ci_low')}, "
                f"{_val(r, 'ci_high')}], {r['n_units']} x {r['unit']}, p {_val(r, 'p')}, Holm p "
                f"{_val(r, 'p_adjusted')}, margin {_val(r, 'margin')}; {r['reason']} ({r['test']})")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ semantics dependence

def _significant_direction(row) -> int:
    """+1 / -1 when the row's deciding test shows its effect significantly above / below 0 after Holm; else 0."""
    if row["verdict"] not in DECIDED or str(row.get("tests", "[]")) in ("", "[]", "nan"):
        return 0
    _, t = _deciding(row)
    return 0 if t is None else t.direction


def semantics_dependence(table: pd.DataFrame) -> pd.DataFrame:
    """Does a verdict depend on the ablation semantics? One row per claim x task x setting measured under two or
    more semantics: the verdict under each (columns ``verdict_<semantics>``), the primary semantics, and
    ``depends``, from the testable verdicts (``not testable`` ones are left out):

    - ``"flips"``: one semantics supports the claim (``supported``) and another goes against it (``not supported``
      or ``contradicted``), OR the effect is significant (after Holm) in opposite directions under two semantics
      (a reversal: e.g. both ``contradicted`` for an equivalence claim, one above +margin and one below -margin) —
      the claim's verdict, or the direction of its effect, depends on the intervention;
    - ``"differs in strength"``: the verdicts differ without opposing each other (one decides, another is
      ``inconclusive``; or ``not supported`` vs ``contradicted``);
    - ``"no"``: at least two testable and all the same, with no reversal;
    - ``"cannot tell"``: fewer than two testable;

    with ``note`` listing each semantics' verdict and, where a direction is significant, under which semantics it
    holds (``effect > 0 under uniform; effect < 0 under zero``)."""
    cols = ["claim_id", "task", "setting", "primary_semantics", "depends", "note"]
    if table.empty or table["semantics"].astype(str).nunique() < 2:
        return pd.DataFrame(columns=cols)
    rows = []
    own = table[table["analysis"] == "primary"].groupby("claim_id")["semantics"].first()  # each claim's own
    for (cid, task, setting), g in table.groupby(["claim_id", "task", "setting"], sort=False):
        if g["semantics"].nunique() < 2:
            continue
        verdict = dict(zip(g["semantics"], g["verdict"]))
        direction = {r["semantics"]: _significant_direction(r) for _, r in g.iterrows()}
        testable = {s: v for s, v in verdict.items() if v != "not testable"}
        prim = g.loc[g["analysis"] == "primary", "semantics"]
        sides = {+1 if v == "supported" else -1 for v in testable.values() if v != "inconclusive"}
        signs = {d for s, d in direction.items() if d and s in testable}
        each = "; ".join(f"{s}: {v}" for s, v in testable.items())
        where = "; ".join(f"effect {'> 0' if d > 0 else '< 0'} under {s}" for s, d in direction.items()
                          if d and s in testable)
        if len(testable) < 2:
            depends, note = "cannot tell", f"testable under {', '.join(testable) or 'none'} only"
        elif len(sides) > 1 or len(signs) > 1:
            depends = "flips"
            note = each + (f" (reversal: {where})" if len(signs) > 1 else "")
        elif len(set(testable.values())) > 1:
            depends, note = "differs in strength", each + (f" ({where})" if where else "")
        else:
            depends = "no"
            note = f"{next(iter(testable.values()))} under {', '.join(testable)}" + (f" ({where})" if where else "")
        rows.append({"claim_id": cid, "task": task, "setting": setting,
                     # a setting in another protocol has no primary row: the claim's own semantics still
                     "primary_semantics": prim.iloc[0] if len(prim) else own.get(cid, ""), "depends": depends,
                     "note": note,
                     **{f"verdict_{s}": v for s, v in verdict.items()}})
    return pd.DataFrame(rows).reindex(columns=cols + sorted({c for r in rows for c in r} - set(cols))) if rows \
        else pd.DataFrame(columns=cols)
