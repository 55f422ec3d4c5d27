"""BLOOM causal LMs: ALiBi positions, one fused projection laid out head by head, the residual added inside.

Heads: ``transformer.h[i].self_attention`` with ONE fused ``query_key_value`` Linear whose rows are laid out HEAD BY
HEAD (head ``h`` owns rows ``h * 3d : (h + 1) * 3d``: its query, key and value blocks of ``head_dim`` ``d``, as
GPT-NeoX) and the output projection ``dense``, INSIDE the module, which also adds the residual (with dropout while
training). One grid (``n_layer`` x ``n_head``), as many key/value heads. Causal, no position embeddings: each head adds
ALiBi, ``slope_h * position of the key`` (positions counting real tokens), to its scaled scores; the model builds
the ``alibi`` tensor for all ``n_head`` heads and hands it to every layer.

Physical pruning keeps the kept heads' ``3 * head_dim`` rows of ``query_key_value`` and their columns of ``dense``;
the module reshapes by its ``num_heads`` and reads the alibi rows of every head, so a pruned layer becomes a
:class:`PrunedBloomAttention` (Hugging Face's own computation, with ``num_heads`` the kept heads and the alibi rows
of those heads, by their ORIGINAL ids). Its KV cache holds the kept heads only. A layer with no head left becomes a
:class:`BloomEmptyAttention`: ``dense``'s bias plus the residual, as the original adds it. The attention maps add
each kept head's own alibi (``score_bias``). ``pretraining_tp > 1`` with ``slow_but_exact`` splits ``dense`` by
the full width: such a model is not pruned (refused before anything changes).
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from headprune_utils.model.families.base import AttentionSite, EmptyAttention, base_model, slice_linear
from headprune_utils.model.families.gpt_neox import GPTNeoXFamily


def _layers(model: nn.Module):
    return getattr(base_model(model), "h", None)


def _head_dim(cfg) -> int:
    return int(cfg.hidden_size) // int(cfg.n_head)


def _bloom_attention():
    from transformers.models.bloom.modeling_bloom import BloomAttention

    return BloomAttention


def _original_heads(module: nn.Module, n_heads: int) -> torch.Tensor:
    """The ORIGINAL ids of a layer's present heads (whose rows of the model's alibi it reads)."""
    index = getattr(module, "alibi_heads", None)
    return index.detach().cpu() if index is not None else torch.arange(n_heads)


def _kept_alibi(alibi: torch.Tensor, heads: torch.Tensor, n_heads: int) -> torch.Tensor:
    """The model's alibi ``[batch * n_heads, 1, keys]`` -> the rows of ``heads`` ``[batch * len(heads), 1, keys]``."""
    b = alibi.shape[0] // n_heads
    return alibi.view(b, n_heads, *alibi.shape[1:]).index_select(1, heads.to(alibi.device)).reshape(
        b * len(heads), *alibi.shape[1:])


def pruned_attention(original: nn.Module, qkv: nn.Linear, dense: nn.Linear, heads: torch.Tensor) -> nn.Module:
    """A :class:`PrunedBloomAttention` with the kept heads' projections and their original ids ``heads``."""
    cls = _pruned_class()
    new = cls.__new__(cls)
    nn.Module.__init__(new)
    internals = ("_parameters", "_buffers", "_modules", "training")
    for k, v in original.__dict__.items():  # the settings the computation reads (head size, scaling, dropout, tp)
        if k not in internals and not k.startswith("_"):
            new.__dict__[k] = v
    new.attention_dropout = copy.deepcopy(original.attention_dropout)
    new.query_key_value, new.dense = qkv, dense
    new.n_heads_model = _model_heads(original)
    new.num_heads = len(heads)
    new.register_buffer("alibi_heads", heads.to(torch.long).to(qkv.weight.device), persistent=False)
    new.train(original.training)
    return new


def _model_heads(module: nn.Module) -> int:
    """How many heads the model's alibi has rows for: the layer's own count before any pruning."""
    return int(getattr(module, "n_heads_model", module.num_heads))


_PRUNED = None


def _pruned_class():
    """Hugging Face's BloomAttention, reading only its kept heads' alibi rows (defined once, on first use)."""
    global _PRUNED
    if _PRUNED is None:
        base = _bloom_attention()

        class PrunedBloomAttention(base):
            """BLOOM's attention after pruning: the same computation, over the kept heads (``num_heads``) and the
            rows of the model's alibi of those heads (``alibi_heads``, original ids)."""

            def forward(self, hidden_states, residual, alibi, attention_mask, *args, **kwargs):
                alibi = _kept_alibi(alibi, self.alibi_heads, self.n_heads_model)
                return super().forward(hidden_states, residual, alibi, attention_mask, *args, **kwargs)

        _PRUNED = PrunedBloomAttention
    return _PRUNED


class BloomEmptyAttention(EmptyAttention):
    """A BLOOM layer with no head left: ``dense``'s bias (dropped out while training) plus the residual, which the
    original adds inside its attention."""

    def __init__(self, out_proj, cache_layer_idx, hidden_dropout: float):
        super().__init__(out_proj, cache_layer_idx=cache_layer_idx)
        self.hidden_dropout = float(hidden_dropout)

    def forward(self, hidden_states, residual, *args, **kwargs):
        out, weights = super().forward(hidden_states, *args, **kwargs)
        out = nn.functional.dropout(out, p=self.hidden_dropout, training=self.training)
        return residual + out, weights


class BloomFamily(GPTNeoXFamily):
    """GPT-NeoX's head-by-head fused layout (its value split, head parameters, output projection and cache), with
    BLOOM's attribute names, ALiBi instead of rotary, and pruned layers of its own."""

    name = "bloom"
    model_types = ("bloom",)
    projections = "fused"
    linear = "Linear"
    positions = "alibi"
    causal_kinds = (None,)

    def head_shape(self, cfg, kind):
        return int(cfg.n_layer), int(cfg.n_head)

    def kv_heads(self, cfg, kind):
        return int(cfg.n_head)

    def sites(self, model, kind):
        d = _head_dim(model.config)
        sites = []
        for i, layer in enumerate(_layers(model)):
            a = layer.self_attention
            empty = isinstance(a, EmptyAttention)
            fused = None if empty else a.query_key_value
            sites.append(AttentionSite(layer=i, parent=layer, attr="self_attention", query=fused, key=fused,
                                       value=fused, out_proj=a.out_proj if empty else a.dense, head_dim=d,
                                       out_proj_inside=True))
        return sites

    def queries_keys(self, site, query_out, key_out, call_kwargs):  # no rotary: ALiBi is a score bias
        return self._part(site, query_out, 0).transpose(1, 2), self._part(site, key_out, 1).transpose(1, 2)

    def score_scale(self, site):
        return float(site.module.inv_norm_factor)

    def call_extras(self, site, kwargs, output):
        return {"alibi": kwargs["alibi"]} if kwargs.get("alibi") is not None else {}

    def score_bias(self, site, call):
        alibi = (call or {}).get("alibi")
        if alibi is None:
            raise ValueError(f"layer {site.layer}: the attention module was called without its alibi; cannot place "
                             "the scores")
        n_heads = _model_heads(site.module)
        heads = _original_heads(site.module, n_heads)
        kept = _kept_alibi(alibi, heads, n_heads)
        b = kept.shape[0] // len(heads)
        return kept.view(b, len(heads), 1, kept.shape[-1])  # [batch, present, 1 (every query), keys]

    def prune_problem(self, model):
        cfg = model.config
        if int(getattr(cfg, "pretraining_tp", 1)) > 1 and getattr(cfg, "slow_but_exact", False):
            return ("BLOOM with pretraining_tp > 1 and slow_but_exact splits the output projection by the full width, "
                    "which a pruned layer no longer has: set slow_but_exact=False (the same result up to rounding)")
        return None

    def prune_layer(self, site, keep_pos):
        module = site.module
        d = site.head_dim
        cols = torch.tensor([p * d + j for p in keep_pos for j in range(d)], dtype=torch.long)
        new_out = slice_linear(module.dense, cols, dim=1)
        if not keep_pos:
            empty = BloomEmptyAttention(new_out, self.cache_layer_idx(site), module.hidden_dropout)
            empty.train(module.training)
            setattr(site.parent, site.attr, empty)
            return
        rows = torch.tensor([3 * d * p + j for p in keep_pos for j in range(3 * d)], dtype=torch.long)
        heads = _original_heads(module, _model_heads(module))[torch.tensor(keep_pos, dtype=torch.long)]
        new = pruned_attention(module, slice_linear(module.query_key_value, rows, 0), new_out, heads)
        setattr(site.parent, site.attr, new)

    def cost_shape(self, cfg):
        return int(cfg.n_layer), int(cfg.n_head), int(cfg.hidden_size), 4 * int(cfg.hidden_size)


FAMILY = BloomFamily()
