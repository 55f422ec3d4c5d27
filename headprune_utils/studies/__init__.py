"""The study registry: one :class:`~headprune_utils.studies.base.Study` object per study notebook, in run order.

Each study module ``headprune_utils.studies.<name>`` defines ``STUDY``, the study's object (its name equals the
module name, its outputs folder ``outputs/<name>/<profile>/`` and its notebook's stem). One layout for every study:
its analysis, pure functions of its cells, lives in ``headprune_utils.studies.<name>_analysis`` and is re-exported
by the study module. ``STUDIES`` lists them by name; ``get_study(name)`` is how the runner and the Ray workers find
a study (by name: nothing else travels).
"""
from __future__ import annotations

import importlib

from headprune_utils.studies.base import Cell, Claim, Cost, Study

NAMES: tuple[str, ...] = (
    "random_pruning",
    "layer_strategies",
    "compensation",
    "redundancy_patterns",
    "zero_shot_pruning",
    "specialized_heads_l0",
    "nmt_heads",
)


def get_study(name: str) -> Study:
    """The study object named ``name`` (raises KeyError naming the known studies); ``"module:Class"`` names a
    study outside the registry (instantiated without arguments)."""
    if ":" in name:
        module, cls = name.split(":", 1)
        obj = getattr(importlib.import_module(module), cls)()
        from headprune_utils.studies.base import Study

        if not isinstance(obj, Study):
            raise TypeError(f"{name!r} names {type(obj).__name__}, not a study (a subclass of "
                            "headprune_utils.studies.base.Study)")
        return obj
    if name not in NAMES:
        raise KeyError(f"unknown study {name!r}; known: {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}").STUDY


class _Registry(dict):
    """``{name: Study}`` in run order, each study module imported on first use."""

    def __init__(self):
        super().__init__((n, None) for n in NAMES)

    def __getitem__(self, name: str) -> Study:
        if name not in self:
            raise KeyError(f"unknown study {name!r}; known: {', '.join(NAMES)}")
        value = super().__getitem__(name)
        if value is None:
            value = get_study(name)
            super().__setitem__(name, value)
        return value

    def values(self):
        return [self[n] for n in self]

    def items(self):
        return [(n, self[n]) for n in self]

    def get(self, name, default=None):
        return self[name] if name in self else default


STUDIES: dict[str, Study] = _Registry()

__all__ = ["Cell", "Claim", "Cost", "Study", "STUDIES", "NAMES", "get_study"]
