"""The standard gates of the claims (:class:`claims.Gate`): preconditions as objects that say what must hold
(``text()``, which becomes the claim's precondition) and check it on a measurement (``check(m, evidence)``: None, or
the failed precondition with its numbers, the reason of a ``not testable`` row). A claim lists its gates once
(``Claim.gates``); :func:`claims.evaluate` applies them with the ``evidence`` the analysis hands it by name.

| gate | holds when | evidence |
|---|---|---|
| :class:`AboveChance` | every unit's full model scores above chance by more than :data:`ABOVE_CHANCE` | (the measurement's ``full``, ``chance``) |
| :class:`TrainedAboveChance` | every unit's full model scores above chance + a share of (perfect - chance) | ``full`` (unit -> score), ``chance`` (task -> score) |
| :class:`RoleFound` | at least one head of the role was found | ``role_counts`` (task -> count, or one count) |
| :class:`Plateau` | every model's dev loss reached a plateau (no gain over its last ``n`` evaluations) | ``histories`` (unit -> training history) |
| :class:`Converged` | every fine-tuned model behind the row (full and masked) reached the plateau of its held-out score | ``convergence`` (a table, one row per fine-tuned model: :func:`convergence_row`) |
| :class:`Check` | a study's own condition (its text and its function, declared with the claim) | what the function reads |
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headprune_utils.analysis.claims import Gate, Measurement

__all__ = ["ABOVE_CHANCE", "AboveChance", "TrainedAboveChance", "RoleFound", "Plateau", "Converged",
           "Check", "plateau", "last_improvement", "reached_plateau", "convergence_row", "PATIENCE",
           "GatesSettled", "gates_settled", "gates_row", "SETTLE_SHARE"]

# A trained full model beats a constant predictor by more than this (score units: accuracy, F1, correlation): below
# it there is no learned behaviour for pruning to remove, and a claim about pruning a trained model is not testable.
# Declared once, for every study that fine-tunes.
ABOVE_CHANCE = 0.05


def applies(only: str, m: Measurement) -> bool:
    """Whether a gate restricted to ``only`` checks ``m``: ``only`` is "" (every measurement) or one of the
    ``;``-separated parts of ``m.setting``, wherever it stands (e.g. the regime "mask, then fine-tune")."""
    return not only or only in (part.strip() for part in str(m.setting).split(";"))


def _fmt(x: float) -> str:
    return "n/a" if x is None or pd.isna(x) else f"{x:+.3g}"


@dataclass(frozen=True)
class AboveChance(Gate):
    """Every unit's full model (the measurement's ``full``) scores above ``chance + margin`` on its task."""

    margin: float = ABOVE_CHANCE

    def text(self) -> str:
        return f"the fine-tuned full model scores above chance by more than {self.margin:g} (score units) in every unit"

    def check(self, m: Measurement, evidence: Mapping) -> str | None:
        if m.full is None or m.chance is None or len(m.full) == 0:
            raise ValueError(f"AboveChance needs the full-model and chance scores of {m.task}")
        full = np.asarray(m.full, dtype=float)
        if (full > m.chance + self.margin).all():
            return None
        return (f"the full model is not above chance by {self.margin:g} on {m.task} in every unit "
                f"(scores {', '.join(f'{x:.3g}' for x in full)}; chance {m.chance:.3g})")


@dataclass(frozen=True)
class TrainedAboveChance(Gate):
    """Every unit of the measurement has a full model scoring above ``chance + share x (perfect - chance)`` on its
    task. Evidence ``full``: unit -> full-model score; ``chance``: task -> chance score; a unit's task is its first
    element (``(task, seed)``)."""

    share: float = 0.1
    perfect: float = 1.0

    def text(self) -> str:
        return (f"every model's full score is above chance + {self.share:g} x (perfect - chance) on its task "
                f"(perfect = {self.perfect:g})")

    def check(self, m: Measurement, evidence: Mapping) -> str | None:
        full, chance = evidence["full"], evidence["chance"]
        bad = []
        for u in dict.fromkeys(m.units):
            if u not in full:
                return f"no full-model score for unit {u}"
            c = float(chance[u[0]])
            need = c + self.share * (self.perfect - c)
            if not float(full[u]) > need:
                bad.append(f"{u}: {float(full[u]):.3g} <= {need:.3g}")
        if not bad:
            return None
        return (f"the full model is not above chance + {self.share:g} x (perfect - chance) on {m.task} in every unit "
                f"({'; '.join(bad)})")


@dataclass(frozen=True)
class RoleFound(Gate):
    """At least one head of ``role`` was found (``evidence["role_counts"]``: task -> count, or one count)."""

    role: str

    def text(self) -> str:
        return f"at least one head of role '{self.role}' was found"

    def check(self, m: Measurement, evidence: Mapping) -> str | None:
        counts = evidence["role_counts"]
        k = counts if isinstance(counts, (int, np.integer)) else counts.get(m.task, 0)
        return None if k >= 1 else f"no head of role '{self.role}' found on {m.task}"


def last_improvement(losses: Sequence[float], min_delta: float = 0.0) -> int | None:
    """The index of the evaluation that last improved on the dev loss by more than ``min_delta`` (nats): the first
    finite loss is the reference, and a later one lower than the reference by more than ``min_delta`` becomes it
    (a non-finite loss never does). With ``min_delta`` 0 that is the first occurrence of the lowest loss
    (``argmin``). None when no loss is finite. The rule a translation training stops by
    (``translation.train_translation``: ``patience`` evaluations after it) and the plateau is judged by."""
    if not (math.isfinite(min_delta) and min_delta >= 0):
        raise ValueError(f"min_delta must be a finite number >= 0, got {min_delta!r}")
    ref = None
    for i, loss in enumerate(losses):
        if math.isfinite(loss) and (ref is None or loss < losses[ref] - min_delta):
            ref = i
    return ref


def plateau(history: Sequence[Mapping], n: int, min_delta: float = 0.0) -> str | None:
    """None when the dev loss of ``history`` (one dict per evaluation, key ``dev_loss``, in training order) did not
    improve by more than ``min_delta`` (nats) over its last ``n`` evaluations (:func:`last_improvement` is at least
    ``n`` evaluations before the end), else why not."""
    losses = [float(h["dev_loss"]) for h in history if h.get("dev_loss") is not None]
    if len(losses) < n + 1:
        return (f"the dev-loss plateau cannot be judged: {len(losses)} dev-loss evaluations recorded, "
                f"{n + 1} needed (the best and {n} after it)")
    best = last_improvement(losses, min_delta)
    if best is None:
        return f"the dev-loss plateau cannot be judged: none of its {len(losses)} dev losses is finite"
    since = len(losses) - 1 - best
    if since >= n:
        return None
    gain = losses[-2] - losses[-1] if len(losses) > 1 else float("nan")
    what = f"last improvement by more than {min_delta:g} nats" if min_delta > 0 else "best"
    return (f"the dev loss has not reached a plateau: its {what} ({losses[best]:.3f}) is at evaluation {best + 1} of "
            f"{len(losses)}, {since} evaluation(s) before the end, fewer than {n} without improvement "
            f"(last change {-gain:+.3f} nats)")


@dataclass(frozen=True)
class Plateau(Gate):
    """Every unit (model seed) of the measurement has a training history (``evidence["histories"]``: unit ->
    history) whose dev loss reached a plateau (:func:`plateau`, ``n`` evaluations without improvement); a unit
    without a stored history cannot be judged."""

    n: int = 3
    min_delta: float = 0.0  # nats: a smaller gain is no improvement (the rule the models were trained by)

    def text(self) -> str:
        by = f" by more than {self.min_delta:g} nats" if self.min_delta > 0 else ""
        return f"every model's dev loss reached a plateau (no improvement{by} over its last {self.n} evaluations)"

    def check(self, m: Measurement, evidence: Mapping) -> str | None:
        histories: Mapping[Hashable, Sequence[Mapping] | None] = evidence["histories"]
        reasons = []
        for u in dict.fromkeys(m.units):
            h = histories.get(u)
            why = ("no training history stored for it: the plateau cannot be judged" if not h
                   else plateau(h, self.n, self.min_delta))
            if why:
                reasons.append(f"model {u}: {why}")
        return "; ".join(reasons) or None


# The convergence rule of fine-tuning, declared once: a model reached the plateau of its held-out score when it
# trained this many epochs after its best one without beating it (the standard profile trains to this rule).
PATIENCE = 2


def reached_plateau(history: Sequence[Mapping], patience: int = PATIENCE) -> bool:
    """Whether a fine-tuning with its epoch chosen on held-out data (``history``: one record per epoch, the chosen
    one ``"selected": True``) reached the plateau: at least ``patience`` epochs trained after the selected one
    without beating it. False when the best epoch is among the last ``patience`` (the run hit its epoch cap still
    improving) or no epoch is selected (no held-out split: nothing to judge by). A pure function of the stored
    history, so a verdict checks it from the cells."""
    if patience < 1:
        raise ValueError(f"patience must be >= 1, got {patience}")
    selected = [r["epoch"] for r in history if r.get("selected")]
    if len(selected) != 1:
        return False
    return len(history) - selected[0] >= patience


def convergence_row(task: str, unit: Hashable, model: str, history: Sequence[Mapping] | None, setting: str = "",
                    patience: int = PATIENCE) -> dict:
    """One row of the ``convergence`` evidence: a fine-tuned model (``model`` names it: "full model", "masked 50%
    draw 0", ...) of ``unit`` on ``task``, its epochs trained, its selected epoch and whether it reached the plateau.
    ``setting``: the measurements it stands behind ("" = every one of its task and unit: a full model)."""
    h = list(history or [])
    best = next((int(r["epoch"]) for r in h if r.get("selected")), None)
    return {"task": task, "unit": unit, "model": model, "setting": setting, "epochs": len(h), "best_epoch": best,
            "reached": reached_plateau(h, patience) if h else False}


def unit_text(unit: Hashable) -> str:
    """A unit of replication in words, for a reason that names a model: a GLUE model's ``(task, seed)`` is "SST-2
    seed 0" (a task and an integer), a seed alone (an integer: a study of one task, a translation model) "seed 2", another tuple its parts
    joined, anything else as it reads (integral floats as integers). Never in parentheses, which the findings bullets drop
    (``summary._reason_head``)."""
    if isinstance(unit, float) and unit.is_integer():
        unit = int(unit)
    if isinstance(unit, tuple):
        unit = tuple(int(u) if isinstance(u, float) and u.is_integer() else u for u in unit)
    if isinstance(unit, tuple) and len(unit) == 2 and isinstance(unit[0], str) \
            and isinstance(unit[1], numbers.Integral) and not isinstance(unit[1], bool):
        return f"{unit[0]} seed {unit[1]}"
    if isinstance(unit, tuple):
        return " ".join(str(u) for u in unit)
    if isinstance(unit, numbers.Integral) and not isinstance(unit, bool):
        return f"seed {unit}"
    return str(unit)


@dataclass(frozen=True)
class Converged(Gate):
    """Every fine-tuned model behind the measurement reached the plateau of its held-out score (:func:`reached_plateau`,
    ``patience`` epochs without improvement): its full models and, for a mask-then-fine-tune row, its masked models.
    ``evidence["convergence"]``: rows of :func:`convergence_row`; the rows of the measurement's task and units whose
    ``setting`` is "" (full models) or the measurement's. ``only``: the gate applies to measurements whose setting has
    it as one of its ``;``-separated parts ("" = every measurement). A model that hit its epoch cap still improving is
    named in the reason; with no held-out curve there is nothing to judge, and the row is not testable either."""

    patience: int = PATIENCE
    only: str = ""
    # why a model may have no held-out curve, said in the reason (a study whose older cells did not record it says so)
    no_curve: str = "no validation split"

    def text(self) -> str:
        where = f"{self.only} rows: " if self.only else ""
        return (f"{where}every fine-tuned model behind the row (full and masked) reached the plateau of its held-out "
                f"score (trained {self.patience} epochs past its best without beating it)")

    def check(self, m: Measurement, evidence: Mapping) -> str | None:
        if not applies(self.only, m):
            return None
        conv: pd.DataFrame = evidence["convergence"]
        units = set(m.units)
        rows = conv[(conv["task"] == m.task) & conv["unit"].isin(units)
                    & ((conv["setting"] == "") | (conv["setting"] == m.setting))]
        if rows.empty:
            return (f"no held-out training curve of the models behind this row on {m.task}: whether they were "
                    "trained to the plateau cannot be judged")
        no_curve = rows[(rows["epochs"] == 0) | rows["best_epoch"].isna()]
        if len(no_curve):
            return (f"{len(no_curve)} of {len(rows)} fine-tuned models on {m.task} have no held-out curve "
                    f"({self.no_curve}): whether they were trained to the plateau cannot be judged")
        bad = rows[~rows["reached"].astype(bool)]
        if bad.empty:
            return None
        named = "; ".join(f"{r['model']} of {unit_text(r['unit'])} (best epoch {int(r['best_epoch'])} of "
                          f"{int(r['epochs'])})"
                          for r in bad.head(4).to_dict("records"))
        more = f"; and {len(bad) - 4} more" if len(bad) > 4 else ""
        return (f"not trained to the plateau: {len(bad)} of {len(rows)} fine-tuned models on {m.task} were still "
                f"improving when training stopped (fewer than {self.patience} epochs after their best): {named}{more}")


# The L0 gates (Hard Concrete, Louizos et al.; Voita et al.'s pruning) are trained for a fixed number of steps
# (l0_steps); what a claim reads off them is the deterministic mask (its head count, which heads). They had settled
# when the deterministic mask's head count at the last step equals its count SETTLE_SHARE of the steps earlier (at
# least one step; the window's two ends compared) and the expected number of open gates (the L0 penalty's quantity)
# moved by less than one head between them: the resolution of the head counts the claims measure. Gates still closing (or opening) when the steps ran out measure
# the step budget, not where the penalty settles, and the rows they stand behind are not testable. Declared
# 2026-12-06, before any standard-next translation L0 cell and before the standard-next study 6 render.
SETTLE_SHARE = 0.1


def gates_settled(history: Sequence[Mapping] | None, share: float = SETTLE_SHARE) -> tuple[bool | None, str]:
    """``(settled, what moved)`` of one L0 gate training from its ``history`` (one record per step, or a subsample
    with the last step: ``step``, ``open`` = the deterministic mask's head count, ``expected_l0``): the head count
    at the last step equal to its count ``share`` of the steps earlier (at least one step; the last record at or
    before it) and the expected open gates moved by less than one head between the two. Only the window's two ends
    are compared: a count that moves by one head and back inside it counts as settled. ``(None, "no record ...")``
    without a history to judge."""
    recs = [r for r in (history or []) if "step" in r and "open" in r and "expected_l0" in r]
    if len(recs) < 2:
        return None, "no record of the gates' training"
    recs = sorted(recs, key=lambda r: r["step"])
    last = recs[-1]
    n_steps = int(last["step"]) + 1
    window = max(1, math.ceil(share * n_steps))
    before = [r for r in recs if r["step"] <= last["step"] - window]
    ref = before[-1] if before else recs[0]
    d_open = int(last["open"]) - int(ref["open"])
    d_exp = float(last["expected_l0"]) - float(ref["expected_l0"])
    settled = d_open == 0 and abs(d_exp) < 1.0
    return settled, (f"{d_open:+d} heads open and {d_exp:+.2f} expected open over its last "
                     f"{int(last['step']) - int(ref['step'])} of {n_steps} steps")


def gates_row(unit: Hashable, gates: str, history: Sequence[Mapping] | None) -> dict:
    """One row of the :class:`GatesSettled` evidence: the model (``unit``), which gate training (``gates``, e.g.
    "lambda 0.01"), whether it settled and what moved (:func:`gates_settled`)."""
    settled, moved = gates_settled(history)
    return {"unit": unit, "gates": gates, "settled": settled, "moved": moved}


@dataclass(frozen=True)
class GatesSettled(Gate):
    """Every L0 gate training of the models behind the measurement settled (:func:`gates_settled`, declared with
    :data:`SETTLE_SHARE`): a model's rows stand on all its gate trainings (the claims choose among, average over or
    rank heads across its lambdas). ``evidence["gates"]``: rows of :func:`gates_row`. A model without any recorded
    gate training, or with one that has no history, is not testable either (nothing to judge)."""

    def text(self) -> str:
        return (f"the L0 gates of every model behind the row settled before their steps ran out (the mask's head "
                f"count at the last step equal to its count {100 * SETTLE_SHARE:g}% of the steps earlier and the "
                "expected open gates moved by less than one head)")

    def check(self, m: Measurement, evidence: Mapping) -> str | None:
        ev = evidence.get("gates")
        units = set(m.units)
        rows = ev[ev["unit"].isin(units)] if ev is not None and len(ev) else pd.DataFrame()
        if rows.empty:
            return f"no record of the L0 gates' training of the models behind this row on {m.task}"
        unknown = rows[rows["settled"].isna()]
        if len(unknown):
            return (f"{len(unknown)} of {len(rows)} L0 gate trainings behind this row on {m.task} have no record of "
                    "their steps: whether they settled cannot be judged")
        bad = rows[~rows["settled"].astype(bool)]
        if bad.empty:
            return None
        named = "; ".join(f"{r['gates']} of {unit_text(r['unit'])}: {r['moved']}" for r in bad.head(3).to_dict("records"))
        more = f"; and {len(bad) - 3} more" if len(bad) > 3 else ""
        return (f"L0 gates not settled: {len(bad)} of {len(rows)} gate trainings behind this row on {m.task} were "
                f"still moving when their steps ran out: {named}{more}")


@dataclass(frozen=True)
class Check(Gate):
    """A study's own precondition: ``says`` (what must hold, in words) and ``fn(m, evidence) -> None | reason``,
    declared with the claim (e.g. "the two strategies' masks differ")."""

    says: str
    fn: Callable[[Measurement, Mapping], "str | None"]

    def text(self) -> str:
        return self.says

    def check(self, m: Measurement, evidence: Mapping) -> str | None:
        return self.fn(m, evidence)
