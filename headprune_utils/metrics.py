"""Official GLUE metrics, implemented with numpy only.

They are written out here (rather than calling scikit-learn/scipy) so the unit
tests can check them against those libraries as independent references.

All values are in natural units: accuracy and F1 in [0, 1], Matthews and
correlations in [-1, 1].  Edge cases follow scikit-learn/scipy:

* Matthews correlation is 0.0 when it is undefined (constant predictions or labels).
* F1 (positive class 1) is 0.0 when there are no positive predictions.
* Pearson/Spearman are NaN when either input is constant (or has < 2 values,
  or contains NaN): a correlation with a constant is undefined.
"""

from __future__ import annotations

import numpy as np

from .data import TaskSpec, get_task

__all__ = [
    "accuracy",
    "f1_binary",
    "matthews_corrcoef",
    "pearson",
    "spearman",
    "compute_metrics",
    "main_score",
]


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of exact matches, in [0, 1]."""
    return float(np.mean(predictions == labels))


def f1_binary(predictions: np.ndarray, labels: np.ndarray) -> float:
    """F1 of the positive class 1, in [0, 1]; 0.0 when it is undefined."""
    tp = np.sum((predictions == 1) & (labels == 1))
    fp = np.sum((predictions == 1) & (labels != 1))
    fn = np.sum((predictions != 1) & (labels == 1))
    denom = 2 * tp + fp + fn  # F1 = 2PR/(P+R) = 2tp / (2tp + fp + fn)
    return float(2 * tp / denom) if denom > 0 else 0.0


def matthews_corrcoef(predictions: np.ndarray, labels: np.ndarray) -> float:
    """Matthews correlation (multiclass form, as scikit-learn), in [-1, 1].

    Returns 0.0 when the denominator is zero (e.g. constant predictions).
    """
    classes, inv = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    k, n = len(classes), len(labels)
    y_true, y_pred = inv[:n], inv[n:]
    conf = np.zeros((k, k), dtype=np.float64)  # float: products overflow int64 on big sets
    np.add.at(conf, (y_true, y_pred), 1.0)
    t = conf.sum(axis=1)  # true count per class
    p = conf.sum(axis=0)  # predicted count per class
    c, s = np.trace(conf), conf.sum()
    cov_tp = c * s - t @ p
    cov_pp = s * s - p @ p
    cov_tt = s * s - t @ t
    denom = cov_tt * cov_pp
    if denom == 0:
        return 0.0
    return float(cov_tp / np.sqrt(denom))


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation in [-1, 1]; NaN if either input is constant."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) < 2 or np.isnan(x).any() or np.isnan(y).any():
        return float("nan")
    dx, dy = x - x.mean(), y - y.mean()
    sxx, syy = dx @ dx, dy @ dy
    if sxx == 0 or syy == 0:
        return float("nan")
    # clip: rounding can push |r| a hair above 1 for perfectly linear data
    return float(np.clip((dx @ dy) / np.sqrt(sxx * syy), -1.0, 1.0))


def _rank_average(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties get their average rank (scipy.stats.rankdata 'average')."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    new_group = np.r_[True, xs[1:] != xs[:-1]]
    group = np.cumsum(new_group) - 1
    starts = np.flatnonzero(new_group)
    counts = np.diff(np.r_[starts, len(x)])
    avg = starts + (counts + 1) / 2.0  # mean of ranks start+1 .. start+count
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = avg[group]
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (Pearson of average ranks); NaN if either is constant."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) < 2 or np.isnan(x).any() or np.isnan(y).any():
        return float("nan")
    return pearson(_rank_average(x), _rank_average(y))


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
