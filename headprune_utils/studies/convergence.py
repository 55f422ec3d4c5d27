"""The evidence of the convergence gate (:class:`headprune_utils.analysis.preconditions.Converged`) from a GLUE study's
cells: one row per fine-tuned model behind a claim, its held-out curve (the cell's ``history``: one record per
epoch, the selected one ``"selected": True``) and whether it reached the plateau by the rule declared once
(:func:`~headprune_utils.analysis.preconditions.reached_plateau`, :data:`~headprune_utils.analysis.preconditions.PATIENCE`).

- :func:`full_rows`: the fine-tuned full model of every (task, seed): its curve is stored in the cell that
  fine-tuned it with no head masked (a mask-then-fine-tune cell at share 0, or the strategy ``none``), under
  whichever ablation semantics that cell ran (no head is masked: the same model). Its rows have setting ``""``:
  they stand behind every measurement of their task and unit, in both regimes (a model masked after fine-tuning
  is that full model). A (task, seed) whose full model left no curve gets a row without one (nothing to judge).
- :func:`masked_rows`: the models fine-tuned with a mask fixed, behind the measurements of one ``setting`` (the
  measurement's own setting text, so the gate matches them to it).

Each analysis says which cells are which (it built the measurements from them); the rows are pure functions of
the stored cells, so a verdict checks convergence from the committed results alone.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np
import pandas as pd

from headprune_utils.analysis import preconditions

__all__ = ["COLUMNS", "CURVE_COLUMNS", "task_seed", "full_rows", "full_rows_recorded", "masked_rows", "table",
           "curves"]

COLUMNS = ["task", "unit", "model", "setting", "epochs", "best_epoch", "reached"]
CURVE_COLUMNS = ["task", "seed", "model", "epoch", "score", "selected", "reached"]


def task_seed(task: str, seed) -> Hashable:
    """The unit of the GLUE studies' measurements: an independently fine-tuned model, ``(task, seed)``."""
    return (task, int(seed))


def _curve(history) -> list:
    return list(history) if isinstance(history, (list, tuple)) else []


def full_rows(cells: pd.DataFrame, unit: Callable[[str, object], Hashable] = task_seed,
              name: Callable[[str, object], str] = lambda task, seed: "full model", column: str = "history") -> list[dict]:
    """One row per (task, seed) of ``cells`` (the cells that fine-tuned the full model, any semantics, or that
    recorded its curve in ``column``): the first stored held-out curve of that model (all are the same model), or
    none when no cell stored one (or ``cells`` have no such column). ``unit`` and ``name`` of (task, seed): the
    measurement's unit it stands behind and its name in a reason."""
    out = []
    for (task, seed), g in cells.groupby(["task", "seed"], sort=True):
        curves = [h for h in (_curve(x) for x in g.get(column, pd.Series(dtype=object))) if h]
        out.append(preconditions.convergence_row(task, unit(task, seed), name(task, seed),
                                                 curves[0] if curves else None))
    return out


def full_rows_recorded(full: pd.DataFrame, cells: pd.DataFrame, unit: Callable[[str, object], Hashable] = task_seed,
                       name: Callable[[str, object], str] = lambda task, seed: "full model") -> list[dict]:
    """:func:`full_rows` of the full models: the curve of the cells that fine-tuned each one (``full``: their
    ``history``), else the curve any cell of ``cells`` recorded of it (``full_model_history``: a fine-tune-then-mask
    cell evaluates the full model it did not train, and records that model's curve), so that a task with no
    mask-then-fine-tune cells still shows whether its full models reached the plateau. A cell without a recorded
    curve adds nothing (cells computed before the field was recorded leave the evidence as it was)."""
    parts = [full[["task", "seed"]].assign(curve=list(full["history"]) if "history" in full else [None] * len(full))]
    if "full_model_history" in cells:
        rec = cells.loc[np.array([bool(_curve(h)) for h in cells["full_model_history"]], dtype=bool)]
        parts.append(rec[["task", "seed"]].assign(curve=list(rec["full_model_history"])))
    both = pd.concat(parts, ignore_index=True)  # ``full`` first: full_rows takes the first curve of each model
    return full_rows(both, unit, name, column="curve")


def masked_rows(cells: pd.DataFrame, setting: str, name: Callable[[pd.Series], str],
                unit: Callable[[str, object], Hashable] = task_seed) -> list[dict]:
    """One row per cell of ``cells`` (models fine-tuned with a mask fixed), behind the measurements whose setting is
    ``setting``; ``name(row)`` names the model in a reason (e.g. "random 50% mask")."""
    return [preconditions.convergence_row(r["task"], unit(r["task"], r["seed"]), name(r), _curve(r.get("history")),
                                          setting) for _, r in cells.iterrows()]


def table(rows: list[dict]) -> pd.DataFrame:
    """The ``convergence`` evidence (:data:`COLUMNS`), one row per fine-tuned model and setting."""
    return pd.DataFrame(rows, columns=COLUMNS)


def curves(cells: pd.DataFrame, model: Callable[[pd.Series], str]) -> pd.DataFrame:
    """The held-out curves of ``cells`` (fine-tuned models; cells without a held-out curve, i.e. no history or no
    validation split, are left out) as one row per model
    and epoch (:data:`CURVE_COLUMNS`): ``model(row)`` names the model (e.g. "full", "random 50%"), ``score`` is the
    epoch's held-out score (``val_score``), ``selected`` marks the epoch kept, ``reached`` whether the model reached
    the plateau (:func:`~headprune_utils.analysis.preconditions.reached_plateau`). What a figure of convergence
    draws: every curve, its kept epoch, and which runs stopped at the cap still improving."""
    rows = []
    for _, r in cells.iterrows():
        h = _curve(r.get("history"))
        if not any(rec.get("val_score") is not None for rec in h):
            continue
        reached = preconditions.reached_plateau(h)
        name = model(r)
        for rec in h:
            if rec.get("val_score") is None:
                raise ValueError(f"a held-out curve of {r['task']} seed {r['seed']} ({name}) has an epoch without a "
                                 f"held-out score (val_score): {rec}")
            rows.append({"task": r["task"], "seed": int(r["seed"]), "model": name, "epoch": int(rec["epoch"]),
                         "score": float(rec["val_score"]), "selected": bool(rec.get("selected", False)),
                         "reached": reached})
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)
