"""Ablation semantics as an axis of every study that masks heads: which intervention each paper used, and the
verdicts of a study's claims under each semantics it measured.

The three semantics (the formulas: :mod:`headprune_utils.model.gates`):

- ``"zero"``: the head's whole output is removed (its context vector is 0; the output projection's bias stays).
  Equal to removing the head from the weights (``pruning.prune_heads``), so only this semantics can make a
  model faster.
- ``"uniform"``: the head's attention pattern is removed, its value path kept: it attends uniformly over the real
  tokens and passes the mean of its value vectors (a bag-of-words summary of the sentence) on. Its value and
  output projections still train when fine-tuning follows the masking. A uniform-masked head cannot be
  removed from the weights: "prunable under uniform" is not a speed-up.
- ``"mean"``: the head's output is replaced by its average output over a reference set of tokens (the task's
  training subset, through the model being measured).

Which one each paper used (:data:`PAPER_SEMANTICS`; ``../shared/docs/papers.md``, "Masking semantics"):
Budhraja et al.'s BERT code multiplies the PRE-softmax scores by the mask, so a pruned head attends uniformly:
``uniform``, in both regimes (the mask fixed during fine-tuning means uniform attention during fine-tuning, not
physical removal). Their Transformer code, Michel et al. and Voita et al. (whose gates scale the head output)
zero the head: ``zero``. Bian et al. released no code; in 2021 "pruning" a BERT head meant the Hugging Face
``prune_heads``/``head_mask``, both of which remove the head's output: ``zero`` (our reading).

A study's cells carry their semantics in the key (``ablation``), so results of different semantics are
different cells and never mix; the study's fingerprint holds ``gates.ABLATION_VERSION``. The verdicts:
:func:`verdicts_by_semantics` decides every claim under every semantics measured, marks each row primary
(the claim's own paper's semantics, ``studies.base.Claim.semantics``) or sensitivity, and Holm-adjusts the
primary rows as the study's family and each sensitivity semantics apart (``claims.adjust``);
``claims.semantics_dependence`` says which verdicts flip with the semantics.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from headprune_utils.analysis import claims
from headprune_utils.model.gates import ABLATION_VERSION, ABLATIONS
from headprune_utils.studies.config import ParameterError

__all__ = ["ABLATIONS", "ABLATION_VERSION", "PAPER_SEMANTICS", "KEEPS", "order", "verdicts_by_semantics",
           "check_ablations"]

PAPER_SEMANTICS: dict[str, str] = {
    "Budhraja et al. 2020": "uniform",  # BERT code: pre-softmax scores x mask (their Transformer code: zero)
    "Michel et al. 2019": "zero",
    "Voita et al. 2019": "zero",
    "Bian et al. 2021": "zero",         # no code released: Hugging Face prune_heads / head_mask (our reading)
}

KEEPS: dict[str, str] = {
    "zero": "nothing: the head's output is removed (= physical pruning; the only one that saves compute)",
    "uniform": "the value path: the head attends uniformly and passes the mean of its value vectors",
    "mean": "an average: the head's output is replaced by its mean output over the reference tokens",
}


def order(primary: str, others: Sequence[str]) -> list[str]:
    """``primary`` first, then ``others`` in their order, each once."""
    return list(dict.fromkeys([primary, *others]))


def check_ablations(name: str, values: Sequence[str]) -> None:
    """``values`` is a non-empty list of distinct semantics names (raises ``config.ParameterError`` naming
    ``name``)."""
    if isinstance(values, str) or not values:
        raise ParameterError(f"{name} must be a non-empty list of {ABLATIONS}, got {values!r}")
    bad = [v for v in values if v not in ABLATIONS]
    if bad:
        raise ParameterError(f"{name}: unknown ablation semantics {bad}; choose from {ABLATIONS}")
    if len(set(values)) != len(values):
        raise ParameterError(f"{name} must not repeat, got {list(values)}")


def verdicts_by_semantics(table: pd.DataFrame, declared: Sequence, decide: Callable[[pd.DataFrame, str], pd.DataFrame],
                          semantics: Sequence[str] | None = None) -> pd.DataFrame:
    """Every declared claim decided under every semantics: ``decide(rows of the table with that semantics,
    semantics)`` gives that semantics' verdict rows (``claims.COLUMNS``). ``table`` has an ``ablation`` column
    (the cells' semantics); ``semantics``: the order to report them in (default: as they first appear).

    A claim's rows under its own paper's semantics (``Claim.semantics``) are its primary analysis; rows under
    another semantics are kept only for the claims that semantics measured (some row with ``n_units > 0``; then
    all their rows, a pooled row that could not be formed among them): a sensitivity semantics that ran no cell of
    a claim adds no row, while a primary row is always there (``not testable`` when nothing measured it). Holm: ``claims.adjust`` with the claims' semantics (primary family, and one
    family per sensitivity semantics)."""
    if "ablation" not in table.columns:
        raise ValueError("the table has no 'ablation' column (the cells' semantics)")
    present = list(dict.fromkeys(table["ablation"].astype(str)))
    wanted = list(semantics) if semantics is not None else present
    own = {c.id: c.semantics for c in declared}
    parts = []
    for s in dict.fromkeys([*wanted, *sorted(set(own.values()) & set(ABLATIONS))]):
        part = decide(table[table["ablation"].astype(str) == s], s)
        if part.empty:
            continue
        measured = set(part.loc[part["n_units"].astype(int) > 0, "claim_id"])  # claims this semantics measured
        keep = (part["claim_id"].map(own) == s) | part["claim_id"].isin(measured)
        parts.append(part[keep])
    if not parts:
        return claims.empty_table()
    out = claims.adjust(pd.concat(parts, ignore_index=True), own)
    claims.validate(out)
    return out
