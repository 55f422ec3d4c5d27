"""The family adapters, and which one a model or config belongs to."""
from __future__ import annotations

from torch import nn

import headprune_utils.model.families.bart as bart
import headprune_utils.model.families.bert as bert
import headprune_utils.model.families.bloom as bloom
import headprune_utils.model.families.deepseek as deepseek
import headprune_utils.model.families.distilbert as distilbert
import headprune_utils.model.families.falcon as falcon
import headprune_utils.model.families.gpt2 as gpt2
import headprune_utils.model.families.gpt_neox as gpt_neox
import headprune_utils.model.families.hybrid as hybrid
import headprune_utils.model.families.llama as llama
import headprune_utils.model.families.llama4 as llama4
import headprune_utils.model.families.modernbert as modernbert
import headprune_utils.model.families.olmo as olmo
import headprune_utils.model.families.opt as opt
import headprune_utils.model.families.phi3 as phi3
import headprune_utils.model.families.qwen3_next as qwen3_next
import headprune_utils.model.families.t5 as t5
from headprune_utils.model.families.base import Family, UnsupportedArchitectureError

FAMILIES: list[Family] = [bert.FAMILY, distilbert.FAMILY, bart.FAMILY, gpt2.FAMILY, gpt_neox.FAMILY, llama.FAMILY,
                           olmo.FAMILY, opt.FAMILY, phi3.FAMILY, modernbert.FAMILY, t5.FAMILY, t5.UMT5_FAMILY,
                           deepseek.FAMILY, bloom.FAMILY, falcon.FAMILY, llama4.FAMILY,
                           hybrid.FAMILY, qwen3_next.FAMILY]


def register(family: Family) -> Family:
    """Add an adapter (checked before the built-in ones, so it may also take over a ``model_type``)."""
    if not isinstance(family, Family):
        raise TypeError(f"register() takes a Family, got {type(family).__name__}")
    FAMILIES.insert(0, family)
    return family


def supported() -> str:
    """The supported families in words (for error messages)."""
    return "; ".join(f.describe() for f in FAMILIES)


def find_family(config_or_model) -> Family | None:
    """The adapter of a model or config: by ``config.model_type``, else (a model) by its layout; None if none."""
    cfg = getattr(config_or_model, "config", config_or_model)
    for family in FAMILIES:
        if family.matches_config(cfg):
            return family
    if isinstance(config_or_model, nn.Module):
        for family in FAMILIES:
            if family.matches_model(config_or_model):
                return family
    return None


def family_of(config_or_model) -> Family:
    """:func:`find_family`, or :class:`UnsupportedArchitectureError` naming the supported families."""
    family = find_family(config_or_model)
    if family is None:
        cfg = getattr(config_or_model, "config", config_or_model)
        what = type(config_or_model).__name__
        raise UnsupportedArchitectureError(
            f"{what} ({getattr(cfg, 'model_type', '?')}): headprune supports the model families {supported()}. "
            "A new family is one adapter (headprune_utils.model.families), added with families.register().")
    return family
