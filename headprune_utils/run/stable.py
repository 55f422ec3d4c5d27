"""Text that a rendering makes afresh each time, made a function of its content: pandas Styler ids.

pandas' Styler names its table and cells ``T_<5 random hex digits>`` at every execution, so a notebook that
displays a styled table, executed twice on unchanged results, differs in those ids alone. Both the executed
notebook (:func:`headprune_utils.run.notebooks.normalise`) and the report's pages
(:mod:`headprune_utils.run.report`) number them in order of first appearance instead.
"""
from __future__ import annotations

import re

__all__ = ["stable_styler_ids"]

_STYLER_ID = re.compile(r"\bT_([0-9a-f]{5})(?=[_\"'\s.:,{>#\[])")


def stable_styler_ids(body: str, prefix: str = "t") -> str:
    """``body`` with every pandas Styler id (``T_<uuid>``, new at every execution of the notebook) replaced by
    ``T_<prefix>_<n>``, numbered in order of first appearance, so a page rendered again from unchanged results is
    byte-identical."""
    seen: dict[str, str] = {}
    safe = re.sub(r"[^A-Za-z0-9]", "_", prefix)

    def sub(m: re.Match) -> str:
        return seen.setdefault(m.group(1), f"T_{safe}_{len(seen) + 1}")

    return _STYLER_ID.sub(sub, body)
