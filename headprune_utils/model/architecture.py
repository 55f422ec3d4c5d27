"""Where the attention heads live, asked of the model's family adapter (``families``).

Supported families (one adapter each, ``families/``): BERT-type encoders (BERT, RoBERTa, ELECTRA, XLM-RoBERTa,
CamemBERT, MiniLM) and DistilBERT (one grid of heads each), Marian and BART (encoder-decoders, three grids), and the
causal LMs GPT-2, GPT-NeoX, OPT and the Llama family (Llama, Mistral, Qwen2, Qwen3, Gemma, Phi-3; one grid of QUERY
heads each; grouped-query attention's key/value heads are derived structure: :func:`kv_head_of`, :func:`kv_shape`),
ModernBERT (one grid; rotary, local and global layers), and T5 (an encoder-decoder, three grids; per-head relative
position bias).

Encoder-decoders have one grid per attention type, named by :data:`SEQ2SEQ_KINDS`: ``"enc"`` (encoder
self-attention), ``"dec"`` (decoder self-attention, causal) and ``"cross"`` (encoder-decoder attention). For these
models ``head_shape``, ``kept_heads`` and ``present_mask`` return a dict keyed by type, or one type's value with
``kind=``.

Everything else raises :class:`UnsupportedArchitectureError`, naming the supported families.

This module and the adapters are the ones that know model families; only the adapters name a family's attributes.
The other modules loop over :func:`attention_kinds` (``(None,)`` for one grid, ``SEQ2SEQ_KINDS`` for an
encoder-decoder) and :func:`attention_sites`, and take per-grid arguments (gates, masks, means) through
:func:`kind_dict` / :func:`kind_value`: dicts keyed by kind, ``None`` for one grid.

Heads are always addressed by their ORIGINAL ids in an ``[n_layers, n_heads]`` grid, also after
physical pruning: ``kept_heads(model)[l]`` (``kept_heads(model, kind)[l]``) lists the original ids still
present in layer ``l``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
from torch import nn

from headprune_utils.model.families import registry
from headprune_utils.model.families.base import (  # re-exported: users import them from here
    SEQ2SEQ_KINDS, AttentionSite, EmptyAttention, Family, UnsupportedArchitectureError, base_model,
)

__all__ = [
    "ACTIVE_GATES_ATTR", "SEQ2SEQ_KINDS", "AttentionKind", "AttentionSite", "EmptyAttention",
    "UnsupportedArchitectureError", "active_gates", "attention_kinds", "attention_sites", "base_model", "family_of",
    "grid_name", "head_shape", "head_shapes", "is_encoder_decoder", "kept_heads", "kept_kv_heads", "kv_head_of",
    "kv_shape", "key_mask_source", "key_padding_mask_from_call", "kind_dict", "kind_value", "layout_problem",
    "model_layers", "present_mask", "query_side", "set_kept_heads",
]

_KEPT_ATTR = "_headprune_kept_heads"
# the gates.head_gates blocks open on a model, innermost last (set and removed by head_gates; read by pruning, maps)
ACTIVE_GATES_ATTR = "_headprune_active_gates"


def active_gates(model: nn.Module) -> list[tuple[object, dict]]:
    """The ``gates.head_gates`` blocks open on ``model``, outermost first: ``(ablation object, {grid: gates})``."""
    return list(getattr(model, ACTIVE_GATES_ATTR, []))

AttentionKind = Literal["enc", "dec", "cross"]


def family_of(config_or_model) -> Family:
    """The model's family adapter (``families``); :class:`UnsupportedArchitectureError` naming the supported
    families when it has none."""
    return registry.family_of(config_or_model)


def is_encoder_decoder(config_or_model) -> bool:
    """True for an encoder-decoder (Marian, BART): its heads form three grids, one per attention type."""
    cfg = getattr(config_or_model, "config", config_or_model)
    return bool(getattr(cfg, "is_encoder_decoder", False))


def attention_kinds(config_or_model) -> tuple[str | None, ...]:
    """The model's grids of heads, by attention type: ``("enc", "dec", "cross")`` for an encoder-decoder,
    ``(None,)`` for a one-grid model. Per-kind dicts of this module (:func:`head_shapes`, :func:`kind_dict`)
    are keyed by these, so callers loop over the kinds instead of asking which family the model is."""
    family = registry.find_family(config_or_model)
    if family is not None:
        if isinstance(config_or_model, nn.Module):
            return family.model_kinds(config_or_model)
        return family.kinds(config_or_model)
    return SEQ2SEQ_KINDS if is_encoder_decoder(config_or_model) else (None,)


def query_side(kind: str | None) -> Literal["source", "target"]:
    """Which tokens ``kind``'s queries are: ``"source"`` (one-grid encoders, ``"enc"``: the input tokens) or
    ``"target"`` (``"dec"``, ``"cross"``: the decoder positions)."""
    return "target" if kind in ("dec", "cross") else "source"


def key_mask_source(model: nn.Module, kind: str | None) -> nn.Module:
    """The module whose call carries the ``[batch, seq]`` key padding mask of ``kind``'s attention: the base model
    of a one-grid encoder; an encoder-decoder's encoder for ``"enc"`` (it runs on its own inside ``generate()``).
    Decoder-side types (``"dec"``, ``"cross"``) have none here (an error)."""
    if query_side(kind) == "target":
        raise ValueError(f"no key padding mask source for attention type {kind!r} (only 'enc' or a one-grid encoder)")
    return family_of(model).key_mask_source(model, kind)


def grid_forward(model: nn.Module, kind: str | None) -> nn.Module:
    """What to call to run grid ``kind`` on ``input_ids``/``attention_mask``: the model (one grid), or an
    encoder-decoder's encoder (``"enc"``)."""
    return family_of(model).encoder(model, kind)


def kind_dict(model: nn.Module, value, name: str, hint: str = "", extra_kinds_ok: bool = False) -> dict:
    """A per-grid argument as a dict by kind (see :func:`attention_kinds`): ``{None: value}`` for a one-grid
    encoder (which must not get a dict), ``dict(value)`` for an encoder-decoder (which must get a dict by
    attention type; any subset of its kinds, unknown kinds are an error unless ``extra_kinds_ok``).
    ``name`` and ``hint`` word the errors, e.g. ``name="gates"``."""
    kinds = attention_kinds(model)
    if kinds == (None,):
        if isinstance(value, Mapping):
            raise ValueError(f"this model has one grid of heads: pass {name} as one [n_layers, n_heads] tensor, "
                             "not a dict")
        return {None: value}
    if not isinstance(value, Mapping):
        raise ValueError(f"an encoder-decoder model takes {name} as a dict by attention type{hint}; "
                         f"got {type(value).__name__}")
    unknown = sorted(set(value) - set(kinds))
    if unknown and not extra_kinds_ok:
        raise ValueError(f"unknown attention type(s) {unknown} in {name}; choose from {kinds}")
    return dict(value)


def kind_value(model: nn.Module, by_kind: dict):
    """The inverse of :func:`kind_dict`: ``by_kind[None]`` for a one-grid encoder, the dict for an encoder-decoder."""
    return by_kind[None] if attention_kinds(model) == (None,) else by_kind


def grid_name(name: str, kind: str | None) -> str:
    """How errors name one grid of a per-kind argument: ``gates`` or ``gates["enc"]``."""
    return name if kind is None else f'{name}["{kind}"]'


def _check_kind(config_or_model, kind: str | None) -> None:
    kinds = attention_kinds(config_or_model)
    if kinds != (None,):
        if kind is not None and kind not in kinds:
            raise ValueError(f"unknown attention type {kind!r}; choose one of {kinds}")
    elif kind is not None:
        raise ValueError(f"kind={kind!r} is for encoder-decoder models; this model has one grid of heads (kind=None)")


def attention_sites(model: nn.Module, kind: AttentionKind | None = None) -> list[AttentionSite]:
    """Every attention block whose heads the gates and the pruner reach, in layer order.

    Encoder-decoders: ``kind`` selects one attention type; ``None`` gives all three types' sites
    (``enc``, then ``dec``, then ``cross``; ``site.kind`` and ``site.layer``, the layer within its stack,
    say which). One-grid encoders take ``kind=None`` only.
    """
    _check_kind(model, kind)
    family = family_of(model)
    kinds = family.model_kinds(model)
    if kind is not None or kinds == (None,):
        return _checked(model, family, kind, family.sites(model, kind))
    return [site for k in kinds for site in _checked(model, family, k, family.sites(model, k))]


def _checked(model: nn.Module, family: Family, kind, sites: list[AttentionSite]) -> list[AttentionSite]:
    """``sites``, once their weights agree with the config and the pruning record: as many layers, as many query
    (and key/value) heads per layer. A config edited after the model was built (``num_attention_heads``,
    ``num_key_value_heads``, ``num_hidden_layers``) would otherwise make every head id and mask silently wrong."""
    where = "" if kind is None else f"{kind} "
    edited = ("was the config edited after the model was built (num_hidden_layers, num_attention_heads, "
              "num_key_value_heads)? Build the model from the config you want instead")
    n_layers = head_shape(model, kind)[0]
    if len(sites) != n_layers:
        raise ValueError(f"the config gives {n_layers} {where}layers but the model has {len(sites)}: {edited}")
    kept = _recorded_kept(model, kind)
    kept_kv = None
    for site in sites:
        n = family.present_heads(site)
        if n is not None and n != len(kept[site.layer]):
            raise ValueError(f"{where}layer {site.layer}: the weights hold {n} query heads, the config and the "
                             f"pruning record say {len(kept[site.layer])}: {edited}")
        n_kv = family.present_kv_heads(site)
        if n_kv is not None:
            kept_kv = kept_kv if kept_kv is not None else _recorded_kept_kv(model, kind)
            if n_kv != len(kept_kv[site.layer]):
                raise ValueError(f"{where}layer {site.layer}: the weights hold {n_kv} key/value heads, the config "
                                 f"and the pruning record say {len(kept_kv[site.layer])}: {edited}")
    return sites


def head_shape(config_or_model, kind: AttentionKind | None = None):
    """``(n_layers, n_heads)`` of the original, unpruned model (``n_heads``: query heads).

    Encoder-decoders: ``{"enc": (L_enc, H_enc), "dec": (L_dec, H_dec), "cross": (L_dec, H_dec)}``, or one
    type's tuple with ``kind=``.
    """
    cfg = getattr(config_or_model, "config", config_or_model)
    _check_kind(config_or_model, kind)
    family = family_of(config_or_model)
    kinds = attention_kinds(config_or_model)
    try:
        shapes = {k: family.head_shape(cfg, k) for k in kinds}
    except AttributeError as exc:
        raise UnsupportedArchitectureError(f"cannot read the head layout of {type(cfg).__name__}") from exc
    if kinds == (None,):
        return shapes[None]
    return shapes if kind is None else shapes[kind]


def model_layers(config_or_model, kind: AttentionKind | None = None) -> list[int]:
    """The model layer (its index among all layers of the stack) of each row of grid ``kind``: ``0 .. n_layers - 1``,
    except in a hybrid, whose rows are its attention layers only (Granite 4.0-H: the layers that are not Mamba)."""
    cfg = getattr(config_or_model, "config", config_or_model)
    _check_kind(config_or_model, kind)
    return list(family_of(config_or_model).model_layers(cfg, kind))


def kv_shape(config_or_model, kind: AttentionKind | None = None) -> tuple[int, int]:
    """``(n_layers, n_kv_heads)`` of grid ``kind`` of the original model: key/value heads per layer (as many as
    query heads unless the family groups query heads on shared key/value heads, e.g. Llama, Mistral, Qwen2, Qwen3,
    Gemma)."""
    cfg = getattr(config_or_model, "config", config_or_model)
    _check_kind(config_or_model, kind)
    family = family_of(config_or_model)
    return family.head_shape(cfg, kind)[0], family.kv_heads(cfg, kind)


def kv_head_of(config_or_model, kind: AttentionKind | None = None) -> list[int]:
    """For each ORIGINAL query head of grid ``kind``, the original key/value head it reads (grouped-query
    attention: ``h // (n_heads / n_kv_heads)``; ``h`` itself where heads are not grouped). The same in every
    layer; physical pruning keeps a key/value head as long as one kept query head reads it."""
    cfg = getattr(config_or_model, "config", config_or_model)
    _check_kind(config_or_model, kind)
    if isinstance(config_or_model, nn.Module):  # a model: its weights must agree with its config
        attention_sites(config_or_model, kind)
    return list(family_of(config_or_model).kv_of_query(cfg, kind))


def head_shapes(config_or_model) -> dict:
    """``{kind: (n_layers, n_heads)}`` over :func:`attention_kinds` (``{None: (L, H)}`` for a one-grid encoder)."""
    return {k: head_shape(config_or_model, k) for k in attention_kinds(config_or_model)}


def _all_heads(shape: tuple[int, int]) -> list[list[int]]:
    n_layers, n_heads = shape
    return [list(range(n_heads)) for _ in range(n_layers)]


def kept_heads(model: nn.Module, kind: AttentionKind | None = None):
    """Original ids of the heads still present, per layer (encoder-decoders: a dict by type, or ``kind``'s), once the
    weights agree with the config and the pruning record (an edited config is an error, as for the gates)."""
    attention_sites(model, kind)
    return _recorded_kept(model, kind)


def _recorded_kept(model: nn.Module, kind: AttentionKind | None = None):
    """:func:`kept_heads` from the record and the config alone (for the check itself)."""
    _check_kind(model, kind)
    kept = getattr(model, _KEPT_ATTR, None)
    kinds = attention_kinds(model)
    if kinds != (None,):
        shapes = head_shape(model)
        kept = kept or {}
        full = {k: [list(ids) for ids in kept.get(k, _all_heads(shapes[k]))] for k in kinds}
        return full if kind is None else full[kind]
    if kept is None:
        kept = _all_heads(head_shape(model))
    return [list(k) for k in kept]


def kept_kv_heads(model: nn.Module, kind: AttentionKind | None = None) -> list[list[int]]:
    """Original ids of the key/value heads still present, per layer of grid ``kind``: those some kept query head
    reads (:func:`kv_head_of`); the physical pruner keeps exactly these."""
    attention_sites(model, kind)
    return _recorded_kept_kv(model, kind)


def _recorded_kept_kv(model: nn.Module, kind: AttentionKind | None = None) -> list[list[int]]:
    kv = list(family_of(model).kv_of_query(model.config, kind))
    return [sorted({kv[h] for h in ids}) for ids in _recorded_kept(model, kind)]


def set_kept_heads(model: nn.Module, kept) -> None:
    """Record which original heads are present: a list per layer, or (encoder-decoders) a dict of them by type."""
    if isinstance(kept, dict):
        setattr(model, _KEPT_ATTR, {k: [list(ids) for ids in v] for k, v in kept.items()})
    else:
        setattr(model, _KEPT_ATTR, [list(k) for k in kept])


def present_mask(model: nn.Module, kind: AttentionKind | None = None):
    """``[n_layers, n_heads]`` float mask: 1 where the head is physically present (encoder-decoders: a dict by
    type, or ``kind``'s mask)."""
    _check_kind(model, kind)
    kinds = attention_kinds(model)
    if kinds != (None,) and kind is None:
        return {k: present_mask(model, k) for k in kinds}
    n_layers, n_heads = head_shape(model, kind)
    mask = torch.zeros(n_layers, n_heads)
    for layer, ids in enumerate(kept_heads(model, kind)):
        mask[layer, ids] = 1.0
    return mask


def key_padding_mask_from_call(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The 2-D ``attention_mask`` ([batch, seq], 1 = real token) a base model was called with; a ValueError naming
    both shapes when a tensor mask is not 2-D or does not cover the inputs (its batch, and at least their positions:
    more with a KV cache)."""
    mask = kwargs.get("attention_mask")
    if mask is None and len(args) >= 2:
        mask = args[1]
    if not isinstance(mask, torch.Tensor):
        return mask
    inputs = next((kwargs[k] for k in ("input_ids", "inputs_embeds") if isinstance(kwargs.get(k), torch.Tensor)),
                  args[0] if args and isinstance(args[0], torch.Tensor) else None)
    want = "" if inputs is None else f" for inputs of shape {list(inputs.shape)}"
    if mask.dim() != 2:
        raise ValueError(f"attention_mask of shape {list(mask.shape)}{want}: the toolkit reads a 2-D padding mask "
                         "[batch, seq] (1 = real token, 0 = padding)")
    if inputs is not None and inputs.dim() >= 2 and (mask.shape[0] != inputs.shape[0]
                                                     or mask.shape[1] < inputs.shape[1]):
        raise ValueError(f"attention_mask of shape {list(mask.shape)} does not cover the inputs of shape "
                         f"{list(inputs.shape)}: it needs their batch and a column per position (more only for "
                         "positions already in a KV cache)")
    return mask


def layout_problem(model: nn.Module) -> str | None:
    """None when code that computes the model's layers itself (``mask_sweep``, ``lean_loss``) can: its family
    gives the layers by their parts (post-LayerNorm encoder layers, ``Family.post_norm_layers``) and the model
    is laid out so; else why not, in words."""
    family = registry.find_family(model)
    if family is None:
        return f"{type(model).__name__} is of no supported family ({registry.supported()})"
    return family.layout_problem(model)
