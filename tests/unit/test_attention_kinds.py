"""The per-kind view of ``architecture`` that gates, pruning, attention maps and Hard Concrete gates go through."""
from __future__ import annotations

import pytest
import torch

from conftest import tiny_model
from headprune_utils.model.architecture import (
    SEQ2SEQ_KINDS, attention_kinds, attention_sites, grid_name, head_shape, head_shapes, key_mask_source, kind_dict,
    kind_value, query_side,
)
from test_seq2seq_gates import SHAPES, tiny_marian


def test_one_grid_encoder_has_one_kind_none():
    bert = tiny_model("bert")
    assert attention_kinds(bert) == (None,)
    assert head_shapes(bert) == {None: head_shape(bert)} == {None: (3, 4)}
    assert [s.layer_key for s in attention_sites(bert)] == [0, 1, 2]
    assert key_mask_source(bert, None) is bert.bert
    g = torch.ones(3, 4)
    assert kind_dict(bert, g, "gates") == {None: g}
    assert kind_value(bert, {None: g}) is g
    with pytest.raises(ValueError, match="one grid"):
        kind_dict(bert, {"enc": g}, "gates")


def test_encoder_decoder_has_three_kinds():
    model = tiny_marian()
    assert attention_kinds(model) == SEQ2SEQ_KINDS
    assert head_shapes(model) == SHAPES == head_shape(model)
    assert [s.layer_key for s in attention_sites(model, "cross")] == [("cross", 0), ("cross", 1), ("cross", 2)]
    assert key_mask_source(model, "enc") is model.model.encoder
    with pytest.raises(ValueError, match="no key padding mask"):
        key_mask_source(model, "dec")
    d = {"enc": torch.ones(2, 4)}
    assert kind_dict(model, d, "gates") == d and kind_value(model, d) is d
    with pytest.raises(ValueError, match="dict by attention type"):
        kind_dict(model, torch.ones(2, 4), "gates")
    with pytest.raises(ValueError, match=r"unknown attention type\(s\) \['decoder'\] in gates"):
        kind_dict(model, {"decoder": torch.ones(3, 4)}, "gates")
    assert set(kind_dict(model, {"decoder": 1, "enc": 2}, "means", extra_kinds_ok=True)) == {"decoder", "enc"}


def test_query_side_and_grid_names():
    assert [query_side(k) for k in (None, "enc", "dec", "cross")] == ["source", "source", "target", "target"]
    assert grid_name("gates", None) == "gates" and grid_name("mask", "enc") == 'mask["enc"]'


def test_only_architecture_asks_for_the_model_family():
    """The encoder vs encoder-decoder dispatch goes through the kinds and sites above, not through branches on
    ``is_encoder_decoder`` spread over the modules."""
    from pathlib import Path

    import headprune_utils

    package = Path(headprune_utils.__file__).parent
    users = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                   if p.name != "architecture.py" and "is_encoder_decoder(" in p.read_text())
    assert users == []
