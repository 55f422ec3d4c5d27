"""What a study notebook writes, through one object: tables, figures with their data, headline metrics.

    out = StudyOutputs("random_pruning", profile)
    drops = out.table("paired_drop", study.paired_drop(table))      # tables/paired_drop.csv; returns the frame
    out.figure("score_vs_fraction", fig, summary)                   # figures/*.png + tables/*.csv (its data)
    out.metrics(n_cells=len(table), verdicts=verdict)               # metrics.json (study and profile added)

Every file is written atomically (a reader never sees half a file); paths come from :class:`StudyPaths`.
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from headprune_utils.figures.save import save_figure
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import atomic_write_csv, atomic_write_json


def _plain(value: Any) -> Any:
    """JSON-ready: frames as records, NaN and infinities as null (metrics.json stays valid JSON, never 'NaN')."""
    if isinstance(value, pd.DataFrame):
        return _plain(value.astype(object).where(value.notna(), None).to_dict(orient="records"))
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, pd.Series):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class StudyOutputs:
    """The outputs of one study run (``outputs/<study>/<profile>/``)."""

    def __init__(self, study: str, profile: str, paths: StudyPaths | None = None):
        self.study, self.profile = study, profile
        self.paths = paths or StudyPaths(study, profile)

    def table(self, name: str, df: pd.DataFrame, drop: tuple[str, ...] = ()) -> pd.DataFrame:
        """Write ``tables/<name>.csv`` (without the columns ``drop``); returns ``df`` unchanged."""
        atomic_write_csv(self.paths.table(name), df.drop(columns=[c for c in drop if c in df]))
        return df

    def figure(self, name: str, fig, data: pd.DataFrame):
        """Write ``figures/<name>.png`` and its data as ``tables/<name>.csv``; returns ``fig``."""
        save_figure(fig, data, self.paths, name)
        return fig

    def metrics(self, **values: Any) -> dict:
        """Write ``metrics.json``: the headline numbers tests and the runner read back (frames as records)."""
        record = {"study": self.study, "profile": self.profile, **{k: _plain(v) for k, v in values.items()}}
        atomic_write_json(self.paths.metrics, record)
        return record
