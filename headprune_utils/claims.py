"""The claims model: a claim's verdict is computed from unit-level measurements by a stated decision rule, into
one row of one table layout (:data:`COLUMNS`), with one of five words (:data:`VERDICTS`) and a reason.

Pieces: a decision rule (:class:`Superiority`, :class:`Equivalence`, :class:`NonInferiority`, :class:`Presence`),
measurements (:class:`Measurement`: one task x setting x ablation semantics, values with the unit each belongs
to), gates (callables ``Measurement -> None | failed precondition``), :func:`evaluate` (rows of one claim),
:func:`adjust` (Holm within a study's family), :func:`decide` (the verdict of one row), :func:`render` (text,
never "nan").

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
  normalised margins; the pooled test runs over all units of the pooled tasks (units stay independent models);
- the pooled row is tested only when the tasks agree, each task's direction being: superiority, the sign of
  its effect; equivalence, +1 / -1 when its CI lies wholly above +margin / below -margin, else 0;
  non-inferiority, -1 (or +1 for ``"less"``) when its CI lies wholly on the wrong side of the margin, else 0.
  Tasks that disagree give ``inconclusive`` with the reason "tasks disagree: ..." and no p (the per-task
  rows carry the verdicts; a pool never overrides a task).

Decision rules. ``alpha`` is the rule's level; ``p_adj`` the Holm-adjusted p (:func:`adjust`; :func:`evaluate`
adjusts within the claim, ``adjust`` on the study's concatenated table supersedes it). ``s = +1`` for
``direction="greater"``, ``-1`` for ``"less"``; ``e = s * effect`` and ``[lo, hi]`` the CI multiplied by ``s``
(reordered), ``m`` the margin. Rules are checked in this order; the first that holds gives the verdict:

- ``not testable``: a gate failed (its text is the reason), the margin cannot be computed or is not > 0, or
  the test cannot reach ``alpha`` with the units at hand (computed: a one-sample t needs 2 units; a two-sided
  sign-flip test over n units cannot go below ``2 / 2**n``). No p is reported and the row is outside the Holm
  family.
- Superiority (claim: the effect lies in ``direction``; two-sided one-sample t or exact sign-flip test of
  effect = 0 (the exact sign-flip test also when every unit gave the same value: the t statistic is then
  undefined); ``(1 - alpha)`` t-interval; ``m >= 0`` = smallest effect of interest, default 0):
  ``supported`` if ``p_adj < alpha`` and ``e > 0``; ``contradicted`` if ``p_adj < alpha`` and ``e < 0``;
  ``not supported`` if ``hi <= m`` (the CI excludes every effect beyond ``m`` in the claimed direction);
  ``inconclusive`` otherwise.
- Equivalence (claim: ``|effect| < m``, "no preference", "comparable"; TOST with two one-sided t-tests,
  p = the larger; ``(1 - 2 alpha)`` t-interval): ``supported`` if ``p_adj < alpha`` (unadjusted, this is the
  CI inside ``(-m, m)``); ``contradicted`` if the CI lies wholly outside the margin (``lo > m`` or
  ``hi < -m``); ``inconclusive`` otherwise (the CI overlaps a margin bound). Never ``not supported``.
- Presence (claim: models trained this way have a head of a role, "positional heads exist"; an existence claim
  measured per model as a count of such heads): a unit counts as having the role when its count is > 0; ``k``
  of the ``n`` units have it; effect = ``k / n``, the share of models with the role; ``(1 - alpha)``
  Clopper-Pearson interval of that share (exact, valid at any n; never a t-interval over counts, which is
  ``[0, 0]`` when no model has one); exact two-sided binomial test of share = ``m`` = 1/2 ("most models have
  one"), so at least 6 units for ``alpha`` = 0.05 (fewer: ``not testable``, the row still giving k of n and
  its interval). ``supported`` if ``p_adj < alpha`` and ``k / n > 1/2``; ``contradicted`` if ``p_adj < alpha``
  and ``k / n < 1/2`` (most such models lack the role); ``not supported`` if the CI lies below 1/2 but the
  adjusted p does not reach ``alpha``; ``inconclusive`` otherwise.
- Non-inferiority (claim: ``e > -m``, "no worse than"; one-sided t-test of ``e <= -m``; ``(1 - 2 alpha)``
  t-interval): ``supported`` if ``p_adj < alpha`` (unadjusted: the CI's lower end above ``-m``);
  ``contradicted`` if ``hi < -m`` (worse by more than the margin); ``inconclusive`` otherwise.

Semantics. Every row names the ablation semantics it was measured under (``semantics``: ``zero``, ``uniform``,
``mean``, :mod:`headprune_utils.gates`) and whether that is the claim's own paper's (``analysis = "primary"``)
or another one (``"sensitivity"``: the same claim re-tested under another intervention). Holm families: a
study's primary rows; each sensitivity semantics of a study apart (:func:`adjust`). Whether a verdict flips with
the semantics: :func:`semantics_dependence`.

The CIs are not multiplicity-adjusted; only the p-values are. Margins are stated in the ``margin`` column and
their derivation in the ``test`` column (e.g. "1 x seed-to-seed SD of the full model", :class:`SeedSpread`;
"0.1 x (full - chance)", :class:`ShareOfHeadroom`), so every verdict can be re-derived from its row
(:func:`decide`).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from . import stats

__all__ = [
    "VERDICTS", "COLUMNS", "Untestable", "SeedSpread", "ShareOfHeadroom", "Superiority", "Equivalence",
    "NonInferiority", "Presence", "Measurement", "Gate", "enough_units", "above_chance", "adapts_to_mask",
    "role_found", "evaluate", "decide", "adjust", "render", "validate", "empty_table", "ANALYSES", "semantics_dependence",
]

VERDICTS: tuple[str, ...] = ("supported", "not supported", "contradicted", "inconclusive", "not testable")
COLUMNS: tuple[str, ...] = (
    "study", "claim_id", "paper", "claim", "task", "setting", "semantics", "analysis", "effect", "ci_low",
    "ci_high", "n_units", "unit", "test", "p", "p_adjusted", "margin", "verdict", "reason", "scale",
)
ANALYSES: tuple[str, ...] = ("primary", "sensitivity")  # under the claim's own paper's semantics, or another
DEFAULT_UNIT = "model (task x seed)"


class Untestable(Exception):
    """Raised by a margin (or other rule input) that cannot be computed; its message becomes the reason."""


# ------------------------------------------------------------------------------------------------ margins

@dataclass(frozen=True)
class SeedSpread:
    """Margin = ``k`` x the seed-to-seed SD (ddof=1) of the full model's score on the measurement's task."""

    k: float = 1.0

    def __call__(self, m: Measurement) -> float:
        if m.full is None or len(m.full) < 2:
            raise Untestable(f"the margin ({self.describe()}) needs the full-model scores of at least 2 seeds")
        return self.k * float(np.std(np.asarray(m.full, dtype=float), ddof=1))

    def describe(self) -> str:
        return f"{self.k:g} x seed-to-seed SD of the full model"


@dataclass(frozen=True)
class ShareOfHeadroom:
    """Margin = ``share`` x (mean full-model score - chance score) on the measurement's task."""

    share: float = 0.1

    def __call__(self, m: Measurement) -> float:
        if m.headroom is None:
            raise Untestable(f"the margin ({self.describe()}) needs the full-model and chance scores")
        return self.share * m.headroom

    def describe(self) -> str:
        return f"{self.share:g} x (full - chance)"


Margin = float | Callable[["Measurement"], float]


def _describe_margin(margin: Margin) -> str:
    return margin.describe() if hasattr(margin, "describe") else "fixed" if np.ndim(margin) == 0 else "computed"


# -------------------------------------------------------------------------------------------------- rules

def _check_alpha(alpha: float) -> None:
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")


@dataclass(frozen=True)
class Superiority:
    """Claim: the effect is above 0 (``"greater"``) or below 0 (``"less"``). ``margin``: the smallest effect of
    interest (>= 0), used only to say ``not supported``. ``test``: ``"t"`` (one-sample t) or ``"sign_flip"``."""

    direction: Literal["greater", "less"] = "greater"
    alpha: float = 0.05
    margin: Margin = 0.0
    test: Literal["t", "sign_flip"] = "t"
    kind: str = field(default="superiority", init=False)

    def __post_init__(self):
        _check_alpha(self.alpha)
        if self.direction not in ("greater", "less") or self.test not in ("t", "sign_flip"):
            raise ValueError(f"direction must be 'greater'/'less' and test 't'/'sign_flip', got {self}")


@dataclass(frozen=True)
class Equivalence:
    """Claim: ``|effect| < margin`` (TOST). ``margin``: a number (> 0) or a callable of the measurement
    (:class:`SeedSpread`, :class:`ShareOfHeadroom`), derived from something real."""

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


Rule = Superiority | Equivalence | NonInferiority | Presence
_TEST_NAMES = {"t": "one-sample t", "sign_flip": "exact sign-flip", "binomial": "exact binomial"}


def _label(rule: Rule, effect: str, margin_note: str) -> str:
    """The ``test`` column: kind (direction); test on what; alpha; margin derivation. :func:`decide` parses it."""
    head = "TOST" if rule.kind == "equivalence" else rule.direction
    what = effect or "unit means"
    if rule.kind == "presence":
        what = f"share of units with {what} > 0 (Clopper-Pearson CI)"
    text = f"{rule.kind} ({head}); {_TEST_NAMES[rule.test]} on {what}; alpha={rule.alpha:g}"
    return text + (f"; margin: {margin_note}" if margin_note else "")


_LABEL = re.compile(r"^(superiority|equivalence|non-inferiority|presence) \((greater|less|TOST)\); "
                    r"(one-sample t|exact sign-flip|exact binomial) on .*?; alpha=([0-9.eE+-]+)(;|$)")


def _parse_label(label: str) -> tuple[str, str, str, float]:
    match = _LABEL.match(label)
    if not match:
        raise ValueError(f"not a claims test label: {label!r}")
    kind, direction, test, alpha, _ = match.groups()
    return kind, direction, test, float(alpha)


# ------------------------------------------------------------------------------------------- measurements

@dataclass(frozen=True)
class Measurement:
    """What a claim is measured on, for one task x setting x ablation semantics.

    ``values``: the effect per observation (e.g. a paired difference score(a) - score(b)), one or more per
    unit; ``units``: the unit (independently trained model, e.g. ``(task, seed)`` or the seed) of each value.
    ``effect``: the effect's name (goes into the ``test`` column). ``full``: the full model's score per unit
    (margins, :func:`above_chance`, normalisation), ``chance``: the chance score (same units as ``full``).
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

    def unit_values(self) -> np.ndarray:
        """``[n_units]`` the mean value of each unit (order of first appearance)."""
        return stats.unit_means(self.values, self.units)[1]

    @property
    def n_units(self) -> int:
        return len(stats.unit_means(self.values, self.units)[0])

    @property
    def headroom(self) -> float | None:
        """``mean(full) - chance``, or None when either is missing."""
        if self.full is None or self.chance is None or len(self.full) == 0:
            return None
        return float(np.mean(np.asarray(self.full, dtype=float))) - float(self.chance)


Gate = Callable[[Measurement], "str | None"]


def _needed_units(test: str, alpha: float) -> int:
    n = 1
    while stats.min_attainable_p(test, n) >= alpha:
        n += 1
    return n


def enough_units(test: Literal["t", "sign_flip", "wilcoxon", "binomial"] = "t", alpha: float = 0.05,
                 n: int | None = None) -> Gate:
    """Gate: the two-sided ``test`` can reach p < ``alpha`` with the measurement's units (or ``n`` units)."""

    def gate(m: Measurement) -> str | None:
        k = m.n_units if n is None else n
        smallest = stats.min_attainable_p(test, k) if k >= 1 else 1.0
        if smallest < alpha:
            return None
        need = _needed_units(test, alpha)
        if test == "t":
            return f"a one-sample t-test needs at least {need} units; got {k}"
        return (f"a two-sided {test.replace('_', '-')} test over {k} units cannot reach p < {alpha:g} "
                f"(smallest attainable p = {smallest:.3g}; needs {need} units)")

    return gate


def above_chance(margin: float = 0.0) -> Gate:
    """Gate for trained-model claims: EVERY unit's full model scores above ``chance + margin`` on its task
    (``margin`` in score units: e.g. a share of the chance-to-perfect range)."""

    def gate(m: Measurement) -> str | None:
        if m.full is None or m.chance is None or len(m.full) == 0:
            raise ValueError(f"above_chance needs the full-model and chance scores of {m.task}")
        full = np.asarray(m.full, dtype=float)
        if (full > m.chance + margin).all():
            return None
        return (f"the full model is not above chance by {margin:g} on {m.task} in every unit "
                f"(scores {', '.join(f'{x:.3g}' for x in full)}; chance {m.chance:.3g})")

    return gate


def adapts_to_mask(diffs: pd.DataFrame, value: str = "diff", unit: str = "seed", task: str = "task",
                   confidence: float = 0.95,
                   what: str = "at 50% pruned, mask-then-fine-tune - fine-tune-then-mask") -> Gate:
    """Gate for mask-then-fine-tune claims: fine-tuning adapts to the mask on the measurement's task, i.e. the
    t-interval (``confidence``) of the unit means of ``diffs[value]`` (rows of that task, averaged within
    ``unit``) lies above 0. ``diffs``: the caller's table (e.g. ``what`` at 50% pruned, one row per model)."""

    def gate(m: Measurement) -> str | None:
        rows = diffs[diffs[task] == m.task]
        if rows.empty:
            return f"no results to check that fine-tuning adapts to the mask on {m.task} ({what})"
        _, means = stats.unit_means(rows[value].to_numpy(dtype=float), rows[unit].tolist())
        mean, low, high = stats.t_interval(means, confidence)
        if len(means) >= 2 and low > 0:
            return None
        ci = f"{100 * confidence:g}% CI [{_fmt(low)}, {_fmt(high)}]" if len(means) >= 2 else "no CI with one unit"
        return (f"fine-tuning does not adapt to the mask on {m.task}: {what} = {mean:+.3g}, {ci} over "
                f"{len(means)} units, not above 0")

    return gate


def role_found(role: str, counts: Mapping[str, int] | int) -> Gate:
    """Gate for role claims: at least one head of ``role`` was found (``counts``: per task, or one number)."""

    def gate(m: Measurement) -> str | None:
        k = counts if isinstance(counts, int) else counts.get(m.task, 0)
        return None if k >= 1 else f"no head of role '{role}' found on {m.task}"

    return gate


# ---------------------------------------------------------------------------------------------- computing

def _fmt(x: float) -> str:
    return "n/a" if x is None or pd.isna(x) else f"{x:+.3g}"


def _margin(rule: Rule, m: Measurement) -> float:
    value = float(rule.margin(m) if callable(rule.margin) else rule.margin)
    positive = rule.kind != "superiority"  # a margin of 0 can never be shown (equivalence, non-inferiority)
    if not np.isfinite(value) or value < 0 or (positive and value == 0):
        raise Untestable(f"the margin ({_describe_margin(rule.margin)}) is {value:.3g} on {m.task}; "
                         f"it must be {'> 0' if positive else '>= 0'}")
    return value


def _presence(rule: Rule, x: np.ndarray) -> tuple[float, float, float, float]:
    """``(k / n, Clopper-Pearson low, high, exact binomial p)`` of unit counts ``x`` (a unit has the role: > 0)."""
    k, n = int((x > 0).sum()), int(x.size)
    low, high = stats.clopper_pearson(k, n, 1 - rule.alpha)
    return k / n, low, high, stats.binomial_test_p(k, n)


def _interval(rule: Rule, x: np.ndarray) -> tuple[float, float, float]:
    """``(effect, ci_low, ci_high)`` of unit values ``x`` under ``rule``, without a test (descriptive rows)."""
    if rule.kind == "presence":
        return _presence(rule, x)[:3]
    return stats.t_interval(x, 1 - rule.alpha * (1 if rule.kind == "superiority" else 2))


def _test(rule: Rule, x: np.ndarray, margin: float) -> tuple[float, float, float, float]:
    """``(effect, ci_low, ci_high, p)`` of unit values ``x`` under ``rule`` (unadjusted p)."""
    if rule.kind == "presence":
        return _presence(rule, x)
    if rule.kind == "superiority":
        effect, low, high = stats.t_interval(x, 1 - rule.alpha)
        if rule.test == "t" and x.size >= 2 and float(np.ptp(x)) == 0.0:
            # every unit gave the same value (e.g. one head of a role in every model): the t statistic is
            # undefined, so the exact sign-flip test decides (two-sided p = 2 / 2**n; not p = 0)
            return effect, low, high, stats.sign_flip_test(x)
        p = stats.t_test_p(x) if rule.test == "t" else stats.sign_flip_test(x)
        return effect, low, high, p
    effect, low, high = stats.t_interval(x, 1 - 2 * rule.alpha)
    if rule.kind == "equivalence":
        return effect, low, high, stats.tost(x, margin, rule.alpha).p
    if rule.direction == "greater":
        return effect, low, high, stats.t_test_p(x, -margin, "greater")
    return effect, low, high, stats.t_test_p(x, margin, "less")


def _direction(kind: str, direction: str, effect: float, low: float, high: float, margin: float) -> int:
    """A task's direction for the pooling rule (module docstring)."""
    if kind == "superiority":
        return int(np.sign(effect))
    if kind == "presence":
        return int(np.sign(effect - margin))
    if kind == "equivalence":
        return 1 if low > margin else -1 if high < -margin else 0
    if direction == "greater":
        return -1 if high < -margin else 0
    return 1 if low > margin else 0


def _row(claim, study: str, scale: str, task: str, m: Measurement, rule: Rule, x: np.ndarray, margin: float,
         label: str, reasons: list[str]) -> dict:
    testable = not reasons
    nan = float("nan")
    if testable:
        effect, low, high, p = _test(rule, x, margin)
    elif x.size:  # descriptive only: no p, so outside the Holm family
        effect, low, high = _interval(rule, x)
        p = nan
        if rule.kind == "presence":
            reasons = [*reasons, f"found in {int((x > 0).sum())} of {x.size} units ({100 * (1 - rule.alpha):g}% "
                                 f"Clopper-Pearson CI of the share [{low:.3g}, {high:.3g}])"]
    else:
        effect = low = high = p = nan
    return {"study": study, "claim_id": claim.id, "paper": claim.paper, "claim": claim.text, "task": task,
            "setting": m.setting, "semantics": m.semantics, "analysis": "primary", "effect": effect, "ci_low": low, "ci_high": high,
            "n_units": int(x.size), "unit": m.unit, "test": label, "p": p, "p_adjusted": float("nan"),
            "margin": margin, "verdict": "inconclusive" if testable else "not testable",
            "reason": "" if testable else "; ".join(reasons), "scale": scale}


def evaluate(claim, rule: Rule, measurements: Iterable[Measurement], gates: Sequence[Gate] = (),
             scale: str = "", study: str = "") -> pd.DataFrame:
    """The verdict rows of one claim (``claim``: ``id``, ``paper``, ``text``, e.g. ``studies.base.Claim``):
    one row per measurement, then a pooled row per setting x semantics measured on 2+ tasks (module
    docstring), Holm-adjusted within the claim (:func:`adjust` the study's concatenated table for its family).
    Every measurement first passes the rule's power gate (:func:`enough_units`), then ``gates`` (all are
    checked; the failed preconditions, joined, are the reason of ``not testable``)."""
    measurements = list(measurements)
    power = enough_units(rule.test, rule.alpha)
    rows, info = [], []
    for m in measurements:
        reasons, margin = [], float("nan")
        try:
            margin = _margin(rule, m)
        except Untestable as e:
            reasons.append(str(e))
        short = power(m)  # too few units for the test: the task may still join a pool (module docstring)
        reasons += [r for r in (g(m) for g in gates) if r]
        poolable = not reasons and (short is None or m.n_units >= 2)
        reasons = [r for r in (short, *reasons) if r]
        x = m.unit_values()
        rows.append(_row(claim, study, scale, m.task, m, rule, x, margin,
                         _label(rule, m.effect, _margin_note(rule, margin)), reasons))
        info.append((m, x, margin, poolable))
    groups: dict[tuple[str, str], list[int]] = {}
    for i, m in enumerate(measurements):
        groups.setdefault((m.setting, m.semantics), []).append(i)
    pooled = []
    for idx in groups.values():
        tasks = [measurements[i].task for i in idx]
        if len(set(tasks)) != len(tasks):
            raise ValueError(f"claim {claim.id}: task measured twice with one setting and semantics: {tasks}")
        if len(idx) >= 2:
            pooled.append(_pooled_row(claim, rule, study, scale, [rows[i] for i in idx], [info[i] for i in idx]))
    table = pd.DataFrame(rows + pooled, columns=list(COLUMNS))
    return adjust(table)


def _margin_note(rule: Rule, margin: float) -> str:
    if rule.kind == "presence":
        return f"{margin:.3g} = the share of units with the role under the null (most units have one)"
    if rule.kind == "superiority" and not callable(rule.margin) and float(rule.margin) == 0:
        return ""
    return f"{margin:.3g} = {_describe_margin(rule.margin)}" if np.isfinite(margin) else _describe_margin(rule.margin)


def _pooled_row(claim, rule: Rule, study: str, scale: str, rows: list[dict], info: list) -> dict:
    measurements = [m for m, *_ in info]
    have = [m.headroom is not None for m in measurements]
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
    margin = min((info[i][2] / h for i, h in zip(ok, scale_of)), default=float("nan"))
    what = (base.effect or "unit means") + (" / (full - chance)" if normalise else "")
    note = f"smallest of the tasks' margins{' / (full - chance)' if normalise else ''}"
    label = _label(rule, what, (f"{margin:.3g} = {note}" if np.isfinite(margin) else f"n/a (no testable task to pool); {note}")
                   if _margin_note(rule, margin) else "")
    pool_m = Measurement(pool_task, x, list(range(x.size)), base.setting, base.semantics, unit=unit)
    if len(ok) < 2:
        why = [f"fewer than 2 tasks testable for pooling (testable: {names or 'none'})"]
        if bad:
            why.append(f"cannot normalise: full <= chance on {', '.join(bad)}")
        pool_task = f"all ({', '.join(m.task for m in measurements)})"  # the pool that could not be formed
        return _row(claim, study, scale, pool_task, pool_m, rule, x, margin, label, why)
    kind, direction = rule.kind, getattr(rule, "direction", "")
    dirs = {rows[i]["task"]: _direction(kind, direction, rows[i]["effect"], rows[i]["ci_low"], rows[i]["ci_high"],
                                        rows[i]["margin"]) for i in ok}
    row = _row(claim, study, scale, pool_task, pool_m, rule, x, margin, label,
               [r for r in (enough_units(rule.test, rule.alpha)(pool_m),) if r])
    if len(set(dirs.values())) > 1 and row["verdict"] != "not testable":
        row.update(p=float("nan"), verdict="inconclusive",
                   reason="tasks disagree: " + ", ".join(f"{t} {'+' if d > 0 else '-' if d < 0 else '0'}"
                                                         for t, d in dirs.items())
                   + " (" + ("sign of the effect" if kind == "superiority" else "side of the margin")
                   + "); the per-task rows carry the verdicts")
    return row


# ----------------------------------------------------------------------------------------------- verdicts

def decide(row) -> tuple[str, str]:
    """``(verdict, reason)`` of a tested row (fields effect, ci_low, ci_high, p, p_adjusted, margin, n_units,
    test) by the decision rules of the module docstring."""
    kind, direction, test, alpha = _parse_label(row["test"])
    p, p_adj, m = float(row["p"]), float(row["p_adjusted"]), float(row["margin"])
    effect, low, high = float(row["effect"]), float(row["ci_low"]), float(row["ci_high"])
    level = 1 - alpha if kind in ("superiority", "presence") else 1 - 2 * alpha
    ci = f"{100 * level:g}% CI [{_fmt(low)}, {_fmt(high)}]"
    ps = f"p = {p:.3g}, Holm-adjusted p = {p_adj:.3g}"
    n = f"{int(row['n_units'])} units"
    s = -1.0 if direction == "less" else 1.0
    e, hi = s * effect, max(s * low, s * high)  # the claimed direction made positive
    sig = p_adj < alpha
    if kind == "presence":
        units = int(row["n_units"])
        k = int(round(effect * units))
        found = f"found in {k} of {units} units (share {effect:.3g}; {ci}, Clopper-Pearson)"
        if sig:
            side = "above" if effect > m else "below"
            return ("supported" if effect > m else "contradicted"), f"{found}: {side} {m:g}, {ps} < {alpha:g}"
        if high < m:
            return "not supported", f"{found}: the CI lies below {m:g}, {ps} >= {alpha:g}"
        return "inconclusive", f"{found}: the CI reaches {m:g}; {ps} >= {alpha:g}"
    if kind == "superiority":
        side = ">" if s > 0 else "<"
        if sig and e > 0:
            return "supported", f"effect {_fmt(effect)} {side} 0, {ps} < {alpha:g} ({n}; {ci})"
        if sig and e < 0:
            return "contradicted", f"effect {_fmt(effect)}: significant in the opposite direction, {ps} ({n}; {ci})"
        bound = f"{side} {s * m + 0.0:+.3g}"  # + 0.0: no "-0"
        if hi <= m:
            return "not supported", f"{ci} excludes effects {bound} (the smallest effect of interest); {ps} ({n})"
        return "inconclusive", f"{ps} >= {alpha:g} and the {ci} reaches effects {bound} ({n})"
    if kind == "equivalence":
        if sig:
            return "supported", f"{ci} inside +-{m:.3g}; TOST {ps} < {alpha:g} ({n})"
        if low > m or high < -m:
            return "contradicted", f"{ci} wholly outside +-{m:.3g}: a difference beyond the margin ({n}; TOST {ps})"
        return "inconclusive", f"{ci} overlaps a bound of +-{m:.3g}; TOST {ps} >= {alpha:g} ({n})"
    bound, good, bad = -s * m + 0.0, ("above", "below")[s < 0], ("below", "above")[s < 0]
    if sig:
        return "supported", f"{ci} {good} {bound:+.3g} (the margin); {ps} < {alpha:g} ({n})"
    if hi < -m:
        return "contradicted", f"{ci} wholly {bad} {bound:+.3g}: worse than the margin ({n}; {ps})"
    return "inconclusive", f"{ci} reaches past {bound:+.3g} (the margin); {ps} >= {alpha:g} ({n})"


def adjust(table: pd.DataFrame, primary: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Holm-adjust ``p`` within each family and set the verdicts of those rows from the adjusted p
    (:func:`decide`). Rows without p (not testable, tasks disagree) keep their verdict and reason. Returns a new
    table in :data:`COLUMNS` order.

    ``primary``: ``{claim_id: the semantics of the claim's own paper}`` (``studies.base.Claim.semantics``). A row
    measured under that semantics is the ``"primary"`` analysis, any other a ``"sensitivity"`` one (claims not
    in ``primary`` keep the ``analysis`` they have, else ``"primary"``). Families: a study's primary rows are one
    family (the claims as the papers made them); each sensitivity semantics of a study is a family of its own
    (a re-test of the same claims under another intervention, which must not dilute the primary tests)."""
    out = table.reindex(columns=list(COLUMNS)).copy()
    out["analysis"] = out["analysis"].where(out["analysis"].isin(ANALYSES), "primary")
    if primary:
        known = out["claim_id"].isin(list(primary))
        own = out["claim_id"].map(primary)
        out.loc[known, "analysis"] = np.where(out.loc[known, "semantics"] == own[known], "primary", "sensitivity")
    out["p_adjusted"] = np.nan
    family = out["study"].astype(str) + "|" + out["analysis"].astype(str) + "|" + np.where(
        out["analysis"] == "sensitivity", out["semantics"].astype(str), "")
    for _, idx in out.groupby(family, sort=False, dropna=False).groups.items():
        out.loc[idx, "p_adjusted"] = stats.holm(out.loc[idx, "p"].to_numpy(dtype=float))
    for i in out.index[out["p"].notna()]:
        out.loc[i, ["verdict", "reason"]] = decide(out.loc[i])
    return out


def empty_table() -> pd.DataFrame:
    return pd.DataFrame(columns=list(COLUMNS))


def validate(table: pd.DataFrame) -> None:
    """Raise ``ValueError`` unless ``table`` has exactly :data:`COLUMNS`, only :data:`VERDICTS`, and a reason on
    every row that is not ``supported``/``not supported``/``contradicted``/``inconclusive`` with a p."""
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


# ---------------------------------------------------------------------------------------------- rendering

def _na(row, field: str) -> str:
    if row["verdict"] == "not testable":
        return "n/a (not testable)"
    if str(row["reason"]).startswith("tasks disagree"):
        return "n/a (tasks disagree)"
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

def semantics_dependence(table: pd.DataFrame) -> pd.DataFrame:
    """Does a verdict depend on the ablation semantics? One row per claim x task x setting measured under two or
    more semantics: the verdict under each (columns ``verdict_<semantics>``), the primary semantics, and
    ``depends``, from the testable verdicts (``not testable`` ones are left out):

    - ``"flips"``: one semantics supports the claim (``supported``) and another goes against it (``not supported``
      or ``contradicted``) — the claim's verdict depends on the intervention;
    - ``"differs in strength"``: the verdicts differ without opposing each other (one decides, another is
      ``inconclusive``; or ``not supported`` vs ``contradicted``);
    - ``"no"``: at least two testable and all the same;
    - ``"cannot tell"``: fewer than two testable;

    with ``note`` listing each semantics' verdict."""
    cols = ["claim_id", "task", "setting", "primary_semantics", "depends", "note"]
    if table.empty or table["semantics"].astype(str).nunique() < 2:
        return pd.DataFrame(columns=cols)
    rows = []
    for (cid, task, setting), g in table.groupby(["claim_id", "task", "setting"], sort=False):
        if g["semantics"].nunique() < 2:
            continue
        verdict = dict(zip(g["semantics"], g["verdict"]))
        testable = {s: v for s, v in verdict.items() if v != "not testable"}
        prim = g.loc[g["analysis"] == "primary", "semantics"]
        sides = {+1 if v == "supported" else -1 for v in testable.values() if v != "inconclusive"}
        if len(testable) < 2:
            depends, note = "cannot tell", f"testable under {', '.join(testable) or 'none'} only"
        elif len(sides) > 1:
            depends, note = "flips", "; ".join(f"{s}: {v}" for s, v in testable.items())
        elif len(set(testable.values())) > 1:
            depends, note = "differs in strength", "; ".join(f"{s}: {v}" for s, v in testable.items())
        else:
            depends, note = "no", f"{next(iter(testable.values()))} under {', '.join(testable)}"
        rows.append({"claim_id": cid, "task": task, "setting": setting,
                     "primary_semantics": prim.iloc[0] if len(prim) else "", "depends": depends, "note": note,
                     **{f"verdict_{s}": v for s, v in verdict.items()}})
    return pd.DataFrame(rows).reindex(columns=cols + sorted({c for r in rows for c in r} - set(cols))) if rows \
        else pd.DataFrame(columns=cols)
