"""Official GLUE metrics: scikit-learn's and scipy's implementations behind one calling convention
(``metric(predictions, labels)``, Python floats in natural units).

All values are in natural units: accuracy and F1 in [0, 1], Matthews and correlations in [-1, 1]. Edge cases:

* Matthews correlation is 0.0 when it is undefined (constant predictions or labels), as scikit-learn.
* F1 (positive class 1) is 0.0 when there are no positive predictions (``zero_division=0``).
* Pearson/Spearman are NaN when either input is constant (or has < 2 values, or contains NaN): a correlation with
  a constant is undefined. scipy warns there; here the NaN is the answer, without the warning.

The unit tests check them against independent numpy computations of the same formulas and hand-worked examples.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from headprune_utils.tasks.data import TaskSpec, get_task

__all__ = [
    "accuracy",
    "f1_binary",
    "matthews_corrcoef",
    "pearson",
    "spearman",
    "compute_metrics",
    "main_score",
    "verdict_scores", "rescored_tasks", "chance_accuracy",
]


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of exact matches, in [0, 1]."""
    from sklearn.metrics import accuracy_score

    return float(accuracy_score(labels, predictions))


def f1_binary(predictions: np.ndarray, labels: np.ndarray) -> float:
    """F1 of the positive class 1, in [0, 1]; 0.0 when it is undefined."""
    from sklearn.metrics import f1_score

    return float(f1_score(labels, predictions, pos_label=1, average="binary", labels=[0, 1], zero_division=0.0))


def matthews_corrcoef(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Matthews correlation (multiclass form), in [-1, 1]; 0.0 when the denominator is zero (e.g. constant
    predictions)."""
    from sklearn.metrics import matthews_corrcoef as mcc

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 0/0: scikit-learn returns 0.0
        return float(mcc(labels, predictions))


def _correlation(kind: str, x: np.ndarray, y: np.ndarray) -> float:
    from scipy import stats

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) < 2 or np.isnan(x).any() or np.isnan(y).any() or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    r = stats.pearsonr(x, y)[0] if kind == "pearson" else stats.spearmanr(x, y)[0]
    return float(np.clip(r, -1.0, 1.0))


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation in [-1, 1]; NaN if either input is constant (scipy.stats.pearsonr)."""
    return _correlation("pearson", x, y)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (Pearson of average ranks) in [-1, 1]; NaN if either is constant
    (scipy.stats.spearmanr)."""
    return _correlation("spearman", x, y)


_METRIC_FUNCS = {
    "accuracy": accuracy,
    "f1": f1_binary,
    "matthews": matthews_corrcoef,
    "pearson": pearson,
    "spearman": spearman,
}


def _as_class_ids(a: np.ndarray, what: str) -> np.ndarray:
    """Validate integer-valued class ids and return them as int64."""
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
            raise ValueError(
                f"{what} must be class ids (integers); for logits take argmax(-1) first"
            )
    elif a.dtype.kind not in "iub":
        raise ValueError(f"{what} must be numeric class ids, got dtype {a.dtype}")
    return a.astype(np.int64)


def compute_metrics(task: str, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Official GLUE metrics of a task.

    Args:
        task: task name (any spelling accepted by ``get_task``).
        predictions: 1-D class ids for classification, float scores for STS-B.
        labels: 1-D gold labels, same length.

    Returns:
        ``{metric: value}`` with exactly ``TaskSpec.metrics`` as keys (in that order),
        values as Python floats in natural units (accuracy in [0, 1], not percent).
    """
    spec: TaskSpec = get_task(task)
    predictions = np.asarray(predictions)
    labels = np.asarray(labels)
    if predictions.ndim != 1 or labels.ndim != 1:
        raise ValueError(
            f"predictions and labels must be 1-D, got shapes {predictions.shape} and "
            f"{labels.shape} (for logits take argmax(-1) first)"
        )
    if len(predictions) != len(labels):
        raise ValueError(f"length mismatch: {len(predictions)} predictions, {len(labels)} labels")
    if len(labels) == 0:
        raise ValueError("cannot compute metrics on zero examples")
    if spec.is_regression:
        predictions = predictions.astype(np.float64)
        labels = labels.astype(np.float64)
    else:
        predictions = _as_class_ids(predictions, "predictions")
        labels = _as_class_ids(labels, "labels")
    return {name: float(_METRIC_FUNCS[name](predictions, labels)) for name in spec.metrics}


def main_score(task: str, metrics: dict[str, float]) -> float:
    """The task's main metric (``TaskSpec.main_metric``) taken from ``metrics``."""
    spec = get_task(task)
    if spec.main_metric not in metrics:
        raise KeyError(
            f"{spec.name}: main metric {spec.main_metric!r} missing from {sorted(metrics)}"
        )
    return float(metrics[spec.main_metric])


def rescored_tasks(tasks):
    """``(task, spec)`` for each GLUE task of ``tasks`` (names; others skipped) decided by another metric than its main
    one (``TaskSpec.verdict_metric``: MRPC, QQP by accuracy)."""
    for task in pd.unique(pd.Series(list(tasks), dtype=object)):
        try:
            spec = get_task(str(task))
        except (KeyError, ValueError):
            continue
        if spec.verdict_metric != spec.main_metric:
            yield task, spec


def chance_accuracy(spec, f1: float) -> float:
    """The constant "positive" predictor's accuracy from its F1 on the same evaluation set: F1 = 2 q / (1 + q) with q
    the share of positives, so accuracy q = F1 / (2 - F1). A chance F1 of 0 leaves q unknown: a ValueError."""
    if spec.main_metric != "f1" or spec.verdict_metric != "accuracy" or not f1 > 0:
        raise ValueError(f"{spec.name}: cannot turn the chance {spec.main_metric} {f1} into {spec.verdict_metric} "
                         f"(a chance F1 of 0 leaves the positive share unknown)")
    return f1 / (2 - f1)


def verdict_scores(table):
    """``table`` (one row per stored cell: ``task``, ``metric``, ``score``, ``chance`` and every metric's column)
    with each GLUE task scored by its verdict metric (``TaskSpec.verdict_metric``): MRPC's ``score`` becomes its
    ``accuracy`` and its ``chance`` the accuracy of the same constant predictor; ``metric`` names the metric used,
    the F1 column stays beside it. Rows already in their verdict metric, and rows of other kinds (no ``metric`` or
    a metric that is not a GLUE task's: BLEU), are returned unchanged. Returns a new frame.

    The constant predictor's accuracy comes from its F1 exactly, on the same evaluation set: predicting the
    positive class everywhere gives F1 = 2 q / (1 + q) with q the share of positives, and accuracy q = F1 / (2 - F1).
    A chance F1 of 0 (the constant predictor is the negative class) does not determine q: an error."""
    if table is None or len(table) == 0 or not {"task", "metric", "score"} <= set(table.columns):
        return table
    out = table.copy()
    for task, spec in rescored_tasks(out["task"]):
        want = spec.verdict_metric
        rows = (out["task"] == task) & (out["metric"] == spec.main_metric)
        if not rows.any():
            continue
        if want not in out.columns or out.loc[rows, want].isna().any():
            raise ValueError(f"{spec.name}: the cells do not store {want!r}, the metric its claims are decided on")
        out.loc[rows, "score"] = out.loc[rows, want].astype(float)
        if "chance" in out.columns:
            out.loc[rows, "chance"] = [chance_accuracy(spec, float(f)) for f in out.loc[rows, "chance"]]
        out.loc[rows, "metric"] = want
    return out
