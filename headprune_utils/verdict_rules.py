"""What the claims of studies 6 and 7 share beyond :mod:`headprune_utils.claims`: their testability gates and the
unit-level effect of the "functions still present" claim (pure functions: numbers in, gates and effects out).

The verdicts themselves are computed by ``claims.evaluate`` from ``claims.Measurement`` s; nothing here types a
verdict word.

- :func:`trained_gate`: a claim about a trained (fine-tuned) model needs every unit's full model above chance by
  a stated share of the chance-to-perfect range (GLUE scores: perfect = 1).
- :func:`plateau_gate`: a claim about a model trained from scratch (translation) needs its dev loss to have reached
  a plateau: no improvement over the last ``n`` evaluations of its training history.
- :func:`untestable`: the ``not testable`` row of a measurement without a single unit (``claims.evaluate`` needs
  one value).
- :func:`presence_effect`: per model and role, 1 if the role keeps a head in the mask, minus the chance that a
  random mask of the same size keeps one (``role_survival.random_keeps``).
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

import pandas as pd

from .claims import COLUMNS, Gate, Measurement, enough_units, evaluate

__all__ = ["trained_gate", "plateau_gate", "plateau", "presence_effect", "untestable"]


def trained_gate(full: Mapping[Hashable, float], chance: Mapping[str, float], share: float = 0.1,
                 perfect: float = 1.0, task_of=lambda unit: unit[0]) -> Gate:
    """Gate: every unit of the measurement has a full model scoring above ``chance + share x (perfect - chance)``
    on its task. ``full``: unit -> full-model score; ``chance``: task -> chance score; ``task_of``: unit -> task."""

    def gate(m: Measurement) -> str | None:
        bad = []
        for u in dict.fromkeys(m.units):
            if u not in full:
                return f"no full-model score for unit {u}"
            c = float(chance[task_of(u)])
            need = c + share * (perfect - c)
            if not float(full[u]) > need:
                bad.append(f"{u}: {float(full[u]):.3g} <= {need:.3g}")
        if not bad:
            return None
        return (f"the full model is not above chance + {share:g} x (perfect - chance) on {m.task} in every unit "
                f"({'; '.join(bad)})")

    return gate


def plateau(history: Sequence[Mapping], n: int) -> str | None:
    """None when the dev loss of ``history`` (one dict per evaluation, key ``dev_loss``, in training order) did not
    improve over its last ``n`` evaluations (the best is at least ``n`` evaluations before the end), else why not."""
    losses = [float(h["dev_loss"]) for h in history if h.get("dev_loss") is not None]
    if len(losses) < n + 1:
        return (f"the dev-loss plateau cannot be judged: {len(losses)} dev-loss evaluations recorded, "
                f"{n + 1} needed (the best and {n} after it)")
    best = int(np.argmin(losses))
    since = len(losses) - 1 - best
    if since >= n:
        return None
    gain = losses[-2] - losses[-1] if len(losses) > 1 else float("nan")
    return (f"the dev loss has not reached a plateau: its best ({losses[best]:.3f}) is at evaluation {best + 1} of "
            f"{len(losses)}, {since} evaluation(s) before the end, fewer than {n} without improvement "
            f"(last change {-gain:+.3f} nats)")


def plateau_gate(histories: Mapping[Hashable, Sequence[Mapping] | None], n: int) -> Gate:
    """Gate: every unit (model seed) of the measurement has a training history whose dev loss reached a plateau
    (:func:`plateau`); a unit without a stored history cannot be judged."""

    def gate(m: Measurement) -> str | None:
        reasons = []
        for u in dict.fromkeys(m.units):
            h = histories.get(u)
            why = ("no training history stored for it: the plateau cannot be judged" if not h else plateau(h, n))
            if why:
                reasons.append(f"model {u}: {why}")
        return "; ".join(reasons) or None

    return gate


def presence_effect(present: bool, random_keeps: float) -> float:
    """1 if the role keeps a head in the mask (else 0), minus the probability that a random mask of the same size
    keeps one: > 0 when the mask keeps the role's heads more often than chance would."""
    return float(bool(present)) - float(random_keeps)


def untestable(claim, rule, task: str, reason: str, *, setting: str = "", semantics: str = "", unit: str = "",
               scale: str = "", study: str = "", units: Sequence[Hashable] = (), gates: Sequence[Gate] = ()) -> pd.DataFrame:
    """The verdict row (exactly ``claims.COLUMNS``) of a measurement that has no value at all: ``claims.evaluate``'s
    ``not testable`` row, no numbers, 0 units, no tests (outside the Holm family), no unit values; the reason is
    ``reason`` (the failed precondition; "" when ``gates`` say it), then what the rule's power gate and ``gates``
    say of the models the measurement would have had (``units``). (``claims.evaluate`` refuses an empty
    measurement, so a placeholder value goes in and its numbers are blanked.)"""
    why = [reason] if reason else []
    if units:
        ghost = Measurement(task, [0.0] * len(units), list(units), setting, semantics, unit=unit or "model")
        why += [r for r in (g(ghost) for g in (enough_units(rule.test, rule.alpha), *gates)) if r]
    m = Measurement(task, [0.0], ["none"], setting, semantics, unit=unit or "model")
    row = evaluate(claim, rule, [m], gates=[lambda _: reason or "no measurement"], scale=scale, study=study)
    if not (row["verdict"] == "not testable").all():
        raise AssertionError(f"a measurement without values was tested: {row[['claim_id', 'task']].values.tolist()}")
    row[["effect", "ci_low", "ci_high", "margin", "p", "p_adjusted"]] = float("nan")
    why = list(dict.fromkeys(why)) or ["no measurement"]
    out = row.assign(n_units=0, reason="; ".join(why), p_test="", tests="[]", unit_values="[]")
    return out.reindex(columns=list(COLUMNS))
