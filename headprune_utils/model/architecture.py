"""Where the attention heads live in each supported model family.

Encoders (one grid of heads): BERT, RoBERTa, ELECTRA, XLM-RoBERTa, CamemBERT, MiniLM (all
``encoder.layer[i].attention`` with ``self.{query,key,value}`` and ``output.dense``) and DistilBERT
(``transformer.layer[i].attention`` with ``{q,k,v,out}_lin``).

Encoder-decoders (three grids, one per attention type): Marian and BART (``encoder.layers[i].self_attn``,
``decoder.layers[i].self_attn`` and ``decoder.layers[i].encoder_attn``, each with ``{q,k,v,out}_proj``).
The types are named by :data:`SEQ2SEQ_KINDS`: ``"enc"`` (encoder self-attention), ``"dec"`` (decoder
self-attention, causal) and ``"cross"`` (encoder-decoder attention). For these models ``head_shape``,
``kept_heads`` and ``present_mask`` return a dict keyed by type, or one type's value with ``kind=``.

Everything else raises :class:`UnsupportedArchitectureError`.

This is the one module that knows model families. The others loop over :func:`attention_kinds` (``(None,)`` for
one grid, ``SEQ2SEQ_KINDS`` for an encoder-decoder) and :func:`attention_sites`, and take per-grid arguments
(gates, masks, means) through :func:`kind_dict` / :func:`kind_value`: dicts keyed by kind, ``None`` for one grid.

Heads are always addressed by their ORIGINAL ids in an ``[n_layers, n_heads]`` grid, also after
physical pruning: ``kept_heads(model)[l]`` (``kept_heads(model, kind)[l]``) lists the original ids still
present in layer ``l``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

_KEPT_ATTR = "_headprune_kept_heads"

AttentionKind = Literal["enc", "dec", "cross"]
SEQ2SEQ_KINDS: tuple[str, ...] = ("enc", "dec", "cross")
SEQ2SEQ_FAMILIES: tuple[str, ...] = ("marian", "bart")


class UnsupportedArchitectureError(ValueError):
    pass


@dataclass
class AttentionSite:
    """One layer's self-attention, as the gates and the pruner need it.

    ``out_proj``'s input is the concatenation of the present heads' contexts,
    ``[batch, seq, n_present * head_dim]``, in the order of ``kept_heads(model)[layer]``.
    ``query/key/value`` are ``None`` once every head of the layer is pruned.
    """

    layer: int
    parent: nn.Module  # holds the module at ``attr`` (swapped out when the layer loses all heads)
    attr: str
    query: nn.Linear | None
    key: nn.Linear | None
    value: nn.Linear | None
    out_proj: nn.Linear
    head_dim: int
    out_proj_inside: bool  # DistilBERT, Marian and BART apply out_proj inside the attention module
    kind: str | None = None  # encoder-decoders: "enc" | "dec" | "cross"; None for one-grid encoders

    @property
    def module(self) -> nn.Module:
        return getattr(self.parent, self.attr)

    @property
    def layer_key(self):
        """This site's key in per-layer dicts: ``layer`` (one-grid encoders), ``(kind, layer)`` (encoder-decoders)."""
        return self.layer if self.kind is None else (self.kind, self.layer)


def base_model(model: nn.Module) -> nn.Module:
    base = getattr(model, "base_model", model)
    return base if base is not None else model


def is_encoder_decoder(config_or_model) -> bool:
    """True for an encoder-decoder (Marian, BART): its heads form three grids, one per attention type."""
    cfg = getattr(config_or_model, "config", config_or_model)
    return bool(getattr(cfg, "is_encoder_decoder", False))


def attention_kinds(config_or_model) -> tuple[str | None, ...]:
    """The model's grids of heads, by attention type: ``("enc", "dec", "cross")`` for an encoder-decoder,
    ``(None,)`` for a one-grid encoder. Per-kind dicts of this module (:func:`head_shapes`, :func:`kind_dict`)
    are keyed by these, so callers loop over the kinds instead of asking which family the model is."""
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
    return base_model(model).encoder if kind == "enc" else base_model(model)


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
    if is_encoder_decoder(config_or_model):
        if kind is not None and kind not in SEQ2SEQ_KINDS:
            raise ValueError(f"unknown attention type {kind!r}; choose one of {SEQ2SEQ_KINDS}")
    elif kind is not None:
        raise ValueError(f"kind={kind!r} is for encoder-decoder models; this model has one grid of heads (kind=None)")


def _seq2seq_sites(model: nn.Module, kind: str) -> list[AttentionSite]:
    cfg = model.config
    if getattr(cfg, "model_type", None) not in SEQ2SEQ_FAMILIES:
        raise UnsupportedArchitectureError(
            f"{type(model).__name__} ({getattr(cfg, 'model_type', '?')}): headprune supports the encoder-decoder "
            f"families {SEQ2SEQ_FAMILIES}."
        )
    base = base_model(model)
    stack = base.encoder if kind == "enc" else base.decoder
    attr = "encoder_attn" if kind == "cross" else "self_attn"
    n_heads = cfg.encoder_attention_heads if kind == "enc" else cfg.decoder_attention_heads
    head_dim = cfg.d_model // n_heads
    sites = []
    for i, layer in enumerate(stack.layers):
        a = getattr(layer, attr)
        sites.append(AttentionSite(
            layer=i, parent=layer, attr=attr,
            query=getattr(a, "q_proj", None), key=getattr(a, "k_proj", None),
            value=getattr(a, "v_proj", None), out_proj=a.out_proj,
            head_dim=head_dim, out_proj_inside=True, kind=kind,
        ))
    return sites


def attention_sites(model: nn.Module, kind: AttentionKind | None = None) -> list[AttentionSite]:
    """Every attention block whose heads the gates and the pruner reach, in layer order.

    Encoder-decoders: ``kind`` selects one attention type; ``None`` gives all three types' sites
    (``enc``, then ``dec``, then ``cross``; ``site.kind`` and ``site.layer``, the layer within its stack,
    say which). One-grid encoders take ``kind=None`` only.
    """
    _check_kind(model, kind)
    if is_encoder_decoder(model):
        kinds = SEQ2SEQ_KINDS if kind is None else (kind,)
        return [site for k in kinds for site in _seq2seq_sites(model, k)]
    base = base_model(model)
    cfg = model.config
    if hasattr(base, "encoder") and hasattr(base.encoder, "layer"):
        sites = []
        head_dim = cfg.hidden_size // cfg.num_attention_heads
        for i, layer in enumerate(base.encoder.layer):
            att = layer.attention
            s = att.self
            sites.append(AttentionSite(
                layer=i, parent=att, attr="self",
                query=getattr(s, "query", None), key=getattr(s, "key", None),
                value=getattr(s, "value", None), out_proj=att.output.dense,
                head_dim=head_dim, out_proj_inside=False,
            ))
        return sites
    if hasattr(base, "transformer") and hasattr(base.transformer, "layer"):
        sites = []
        head_dim = cfg.dim // cfg.n_heads
        for i, layer in enumerate(base.transformer.layer):
            a = layer.attention
            sites.append(AttentionSite(
                layer=i, parent=layer, attr="attention",
                query=getattr(a, "q_lin", None), key=getattr(a, "k_lin", None),
                value=getattr(a, "v_lin", None),
                out_proj=a.out_lin if hasattr(a, "out_lin") else a.out_proj,
                head_dim=head_dim, out_proj_inside=True,
            ))
        return sites
    raise UnsupportedArchitectureError(
        f"{type(model).__name__} ({getattr(cfg, 'model_type', '?')}): headprune supports BERT-family "
        "encoders (bert, roberta, electra, xlm-roberta, camembert, distilbert)."
    )


def head_shape(config_or_model, kind: AttentionKind | None = None):
    """``(n_layers, n_heads)`` of the original, unpruned model.

    Encoder-decoders: ``{"enc": (L_enc, H_enc), "dec": (L_dec, H_dec), "cross": (L_dec, H_dec)}``, or one
    type's tuple with ``kind=``.
    """
    cfg = getattr(config_or_model, "config", config_or_model)
    _check_kind(cfg, kind)
    if is_encoder_decoder(cfg):  # checked first: Marian maps num_attention_heads to the ENCODER's heads
        try:
            shapes = {
                "enc": (int(cfg.encoder_layers), int(cfg.encoder_attention_heads)),
                "dec": (int(cfg.decoder_layers), int(cfg.decoder_attention_heads)),
                "cross": (int(cfg.decoder_layers), int(cfg.decoder_attention_heads)),
            }
        except AttributeError as exc:
            raise UnsupportedArchitectureError(f"cannot read the head layout of {type(cfg).__name__}") from exc
        return shapes if kind is None else shapes[kind]
    if hasattr(cfg, "num_attention_heads") and hasattr(cfg, "num_hidden_layers"):
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads)
    if hasattr(cfg, "n_heads") and hasattr(cfg, "n_layers"):
        return int(cfg.n_layers), int(cfg.n_heads)
    raise UnsupportedArchitectureError(f"cannot read the head layout of {type(cfg).__name__}")


def head_shapes(config_or_model) -> dict:
    """``{kind: (n_layers, n_heads)}`` over :func:`attention_kinds` (``{None: (L, H)}`` for a one-grid encoder)."""
    return {k: head_shape(config_or_model, k) for k in attention_kinds(config_or_model)}


def _all_heads(shape: tuple[int, int]) -> list[list[int]]:
    n_layers, n_heads = shape
    return [list(range(n_heads)) for _ in range(n_layers)]


def kept_heads(model: nn.Module, kind: AttentionKind | None = None):
    """Original ids of the heads still present, per layer (encoder-decoders: a dict by type, or ``kind``'s)."""
    _check_kind(model, kind)
    kept = getattr(model, _KEPT_ATTR, None)
    if is_encoder_decoder(model):
        shapes = head_shape(model)
        kept = kept or {}
        full = {k: [list(ids) for ids in kept.get(k, _all_heads(shapes[k]))] for k in SEQ2SEQ_KINDS}
        return full if kind is None else full[kind]
    if kept is None:
        kept = _all_heads(head_shape(model))
    return [list(k) for k in kept]


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
    if is_encoder_decoder(model) and kind is None:
        return {k: present_mask(model, k) for k in SEQ2SEQ_KINDS}
    n_layers, n_heads = head_shape(model, kind)
    mask = torch.zeros(n_layers, n_heads)
    for layer, ids in enumerate(kept_heads(model, kind)):
        mask[layer, ids] = 1.0
    return mask


def key_padding_mask_from_call(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The 2-D ``attention_mask`` ([batch, seq], 1 = real token) a base model was called with."""
    mask = kwargs.get("attention_mask")
    if mask is None and len(args) >= 2:
        mask = args[1]
    return mask


class EmptyAttention(nn.Module):
    """Stands in for an attention module whose heads are all pruned.

    Returns a ``[batch, seq, 0]`` context (or, when the output projection lives inside the attention
    module as in DistilBERT, Marian and BART, that projection applied to it: its bias), and no attention
    weights. ``cache_layer_idx``: for a decoder self-attention, the layer whose KV cache gets a
    ``[batch, 1, seq, 1]`` zero placeholder per call, so that the cache still counts the positions seen.
    """

    def __init__(self, out_proj: nn.Linear | None = None, cache_layer_idx: int | None = None):
        super().__init__()
        self.out_proj = out_proj
        self.num_attention_heads = 0
        self.n_heads = 0
        self.num_heads = 0
        self.cache_layer_idx = cache_layer_idx

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if self.cache_layer_idx is not None and cache is not None:
            self_cache = getattr(cache, "self_attention_cache", cache)
            placeholder = hidden_states.new_zeros(hidden_states.shape[0], 1, hidden_states.shape[1], 1)
            self_cache.update(placeholder, placeholder, self.cache_layer_idx)
        ctx = hidden_states.new_zeros(*hidden_states.shape[:-1], 0)
        if self.out_proj is not None:
            ctx = self.out_proj(ctx)
        return ctx, None


def bert_layout_problem(model: nn.Module) -> str | None:
    """None when ``model``'s encoder is laid out as BERT's (``encoder.layer[i]``: ``attention.self`` with query,
    key and value Linears, or no head left after pruning; ``attention.output`` with dense, dropout, LayerNorm;
    ``intermediate``, ``output``, ``feed_forward_chunk``), as in BERT, RoBERTa, ELECTRA, XLM-R, CamemBERT and
    MiniLM; else what differs, in words. The code that computes such layers from their sub-modules
    (``mask_sweep``, ``lean_loss``) checks it first."""
    cfg = getattr(model, "config", None)
    if cfg is None or not hasattr(cfg, "num_attention_heads"):
        return "the model has no config with num_attention_heads"
    if getattr(cfg, "is_decoder", False) or getattr(cfg, "add_cross_attention", False):
        return "a decoder (causal or cross attention)"
    base = base_model(model)
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList):
        return "no encoder.layer list"
    for i, layer in enumerate(layers):
        att = getattr(layer, "attention", None)
        if att is None or not hasattr(att, "self") or not hasattr(att, "output"):
            return f"layer {i} is not laid out as BERT's (attention.self / attention.output)"
        if not all(isinstance(getattr(att.output, n, None), nn.Module) for n in ("dense", "LayerNorm", "dropout")):
            return f"layer {i}'s attention output is not BERT's (dense, dropout, LayerNorm)"
        if not all(hasattr(layer, n) for n in ("feed_forward_chunk", "intermediate", "output")):
            return f"layer {i} has no BERT feed-forward"
        sa = att.self
        if not isinstance(sa, EmptyAttention) and not all(
                isinstance(getattr(sa, n, None), nn.Linear) for n in ("query", "key", "value")):
            return f"layer {i}'s self-attention is not BERT's (query, key, value)"
    return None
