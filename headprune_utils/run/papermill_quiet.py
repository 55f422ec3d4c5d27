"""papermill with a profile file, without its noise: ``papermill NB out.ipynb -f params/smoke.yaml -p profile smoke``.

A profile file holds one section per study; the notebook applies its own study's and says which it ignored
(:func:`headprune_utils.studies.config.notebook_config`), but papermill warns "Passed unknown parameter: <study>"
for each of them (its parameters cell does not declare them), seven lines that look like errors. This module drops
exactly those lines: any other unknown parameter (a typo) is still warned about by papermill, and refused, by
name, by the notebook before any work.

papermill imports every registered engine when it starts; pyproject.toml registers :class:`Engine` (papermill's
default engine under the name ``headprune``) so that importing this module installs the filter. Nothing heavy is
imported until papermill warns.
"""
from __future__ import annotations

import logging

from papermill.engines import NBClientEngine

_PREFIX = "Passed unknown parameter: "


class StudySectionFilter(logging.Filter):
    """Drops papermill's "Passed unknown parameter: <study>" records (a profile file's study sections)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(_PREFIX):
            return True
        from headprune_utils.studies import NAMES  # only now: papermill starts as fast as before

        return message[len(_PREFIX):].strip() not in NAMES


def install(logger: logging.Logger | None = None) -> None:
    """The filter on papermill's logger (once)."""
    logger = logger or logging.getLogger("papermill")
    if not any(isinstance(f, StudySectionFilter) for f in logger.filters):
        logger.addFilter(StudySectionFilter())


class Engine(NBClientEngine):
    """papermill's default engine (registered as ``headprune``: the entry point that installs the filter)."""


install()
