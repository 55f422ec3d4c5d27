"""Where the attention heads live in each supported encoder family.

Supported: BERT, RoBERTa, ELECTRA, XLM-RoBERTa, CamemBERT, MiniLM (all ``encoder.layer[i].attention``
with ``self.{query,key,value}`` and ``output.dense``) and DistilBERT (``transformer.layer[i].attention``
with ``{q,k,v,out}_lin``). Everything else raises :class:`UnsupportedArchitectureError`.

Heads are always addressed by their ORIGINAL ids in an ``[n_layers, n_heads]`` grid, also after
physical pruning: ``kept_heads(model)[l]`` lists the original ids still present in layer ``l``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

_KEPT_ATTR = "_headprune_kept_heads"


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
    out_proj_inside: bool  # DistilBERT applies out_proj inside the attention module

    @property
    def module(self) -> nn.Module:
        return getattr(self.parent, self.attr)


def _base(model: nn.Module) -> nn.Module:
    base = getattr(model, "base_model", model)
    return base if base is not None else model


def attention_sites(model: nn.Module) -> list[AttentionSite]:
    base = _base(model)
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


def head_shape(config_or_model) -> tuple[int, int]:
    """``(n_layers, n_heads)`` of the original, unpruned model."""
    cfg = getattr(config_or_model, "config", config_or_model)
    if hasattr(cfg, "num_attention_heads") and hasattr(cfg, "num_hidden_layers"):
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads)
    if hasattr(cfg, "n_heads") and hasattr(cfg, "n_layers"):
        return int(cfg.n_layers), int(cfg.n_heads)
    raise UnsupportedArchitectureError(f"cannot read the head layout of {type(cfg).__name__}")


def kept_heads(model: nn.Module) -> list[list[int]]:
    """Original ids of the heads still present, per layer."""
    kept = getattr(model, _KEPT_ATTR, None)
    if kept is None:
        n_layers, n_heads = head_shape(model)
        kept = [list(range(n_heads)) for _ in range(n_layers)]
    return [list(k) for k in kept]


def set_kept_heads(model: nn.Module, kept: list[list[int]]) -> None:
    setattr(model, _KEPT_ATTR, [list(k) for k in kept])


def present_mask(model: nn.Module) -> torch.Tensor:
    """``[n_layers, n_heads]`` float mask: 1 where the head is physically present."""
    n_layers, n_heads = head_shape(model)
    mask = torch.zeros(n_layers, n_heads)
    for layer, ids in enumerate(kept_heads(model)):
        mask[layer, ids] = 1.0
    return mask


def key_padding_mask_from_call(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The 2-D ``attention_mask`` ([batch, seq], 1 = real token) a base model was called with."""
    mask = kwargs.get("attention_mask")
    if mask is None and len(args) >= 2:
        mask = args[1]
    return mask
