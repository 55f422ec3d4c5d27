"""One module per study notebook. ``STUDIES`` is the registry the batch runner executes, in order.

Each study module provides a frozen parameters dataclass (with a ``progress: bool`` field) and
``n_cells(cfg)``; its notebook's ``parameters`` cell equals the dataclass defaults (a test checks it).
"""
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

    def n_cells(self, cfg) -> int:
        """How many result cells a run with ``cfg`` has (for the batch runner's progress bar)."""
        return importlib.import_module(self.module).n_cells(cfg)


STUDIES: dict[str, Study] = {
    s.name: s
    for s in [
        Study("random_pruning", "01_random_pruning.ipynb", "headprune_utils.studies.random_pruning", "RandomPruningConfig"),
        Study("layer_strategies", "02_layer_strategies.ipynb", "headprune_utils.studies.layer_strategies", "LayerStrategiesConfig"),
        Study("compensation", "03_compensation.ipynb", "headprune_utils.studies.compensation", "CompensationConfig"),
        Study("redundancy_patterns", "04_redundancy_patterns.ipynb", "headprune_utils.studies.redundancy_patterns", "RedundancyConfig"),
        Study("zero_shot_pruning", "05_zero_shot_pruning.ipynb", "headprune_utils.studies.zero_shot", "ZeroShotConfig"),
        Study("specialized_heads_l0", "06_specialized_heads_l0.ipynb", "headprune_utils.studies.specialized_l0", "SpecializedL0Config"),
        Study("nmt_heads", "07_nmt_heads.ipynb", "headprune_utils.studies.nmt_heads", "NMTHeadsConfig"),
    ]
}
