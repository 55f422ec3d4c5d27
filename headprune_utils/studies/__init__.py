"""One module per study notebook. ``STUDIES`` is the registry the batch runner executes, in order."""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Study:
    name: str          # output folder: outputs/<name>/<profile>/
    notebook: str      # file in notebooks/
    module: str        # headprune_utils.studies.<module>
    config: str        # the parameters dataclass in that module

    def config_class(self):
        return getattr(importlib.import_module(self.module), self.config)


STUDIES: dict[str, Study] = {
    s.name: s
    for s in [
        Study("random_pruning", "01_random_pruning.ipynb", "headprune_utils.studies.random_pruning", "RandomPruningConfig"),
    ]
}
