"""Falcon causal LMs: one fused projection in three layouts, rotary or ALiBi (through the attention mask).

Heads: ``transformer.h[i].self_attention`` with ONE fused ``query_key_value`` (its rows in ``head_dim`` blocks ``d``)
and the output projection ``dense``, INSIDE the module. How the rows are laid out depends on the config:

- ``new_decoder_architecture`` (Falcon-40B, -180B, Falcon 2; Falcon 3 checkpoints are Llama models): grouped-query
  attention, the rows GROUP BY GROUP: for each of the ``num_kv_heads`` key/value heads, the queries of its
  ``H / num_kv_heads`` query heads, then its key, then its value (query head ``h`` reads key/value head
  ``h // group``);
- ``multi_query`` (Falcon-7B): every query head first, then ONE key and ONE value shared by all of them;
- neither (Falcon-RW): head by head, each head's query, key and value (as GPT-NeoX's).

Positions: rotary on each whole query and key head (the angles come in as ``position_embeddings``), or, with
``alibi`` (Falcon-RW), ALiBi: the model adds ``slope_h * position of the key / sqrt(head_dim)`` to each head's scores
THROUGH THE ATTENTION MASK, which then has a row per head (``[batch, H, queries, keys]``). Parallel or sequential
attention and MLP, one or two layer norms: the adapter touches none of that.

The module splits its fused output by the config's head counts, so a pruned layer cannot stay a Falcon module:
pruning cuts ``query_key_value`` into the query, key and value Linears of the kept heads (by the layout) and hands
the layer to :class:`FalconGroupedAttention`, the Llama family's
:class:`~headprune_utils.model.families.llama.GroupedQueryAttention` (Falcon's own rotary and attention function,
the same mask and scaling; each kept query head paired with the key/value head it reads, so uneven groups are exact)
called as Falcon calls its attention (the cache as ``layer_past``), and reading the mask rows of its kept heads by
their ORIGINAL ids under ALiBi. Its KV cache holds the kept key/value heads only. A layer with no head left becomes an
``EmptyAttention`` (``dense``'s bias). The attention maps and the ``"uniform"`` ablation read the queries, keys and
values out of the fused rows by the layout, and under ALiBi add each head's row of the mask (:meth:`score_bias`).
"""
from __future__ import annotations

import functools
import importlib

import torch
from torch import nn

from headprune_utils.model.families.base import (
    AttentionSite, CostDims, EmptyAttention, base_model, rows_of, slice_linear,
)
from headprune_utils.model.families.llama import GroupedQueryAttention, LlamaFamily, place_queries_keys

_MODELING = "transformers.models.falcon.modeling_falcon"


def _fused(module: nn.Module) -> bool:
    """Whether ``module`` is Falcon's own attention (the fused projection), not a pruned or an emptied layer."""
    return hasattr(module, "query_key_value") and not isinstance(module, (GroupedQueryAttention, EmptyAttention))


def _layout(module: nn.Module) -> str:
    if module.new_decoder_architecture:
        return "grouped"
    return "multi_query" if module.multi_query else "head_by_head"


def _blocks(module: nn.Module) -> tuple[list[int], list[int], list[int]]:
    """The first row of each query head's, each key/value head's key and each key/value head's value block (``d``
    rows each) in ``query_key_value`` of a Falcon module, in head order."""
    d, n_heads = int(module.head_dim), int(module.num_heads)
    layout = _layout(module)
    if layout == "grouped":
        n_kv = int(module.num_kv_heads)
        group = n_heads // n_kv
        q = [(g * (group + 2) + i) * d for g in range(n_kv) for i in range(group)]
        return q, [(g * (group + 2) + group) * d for g in range(n_kv)], [(g * (group + 2) + group + 1) * d
                                                                         for g in range(n_kv)]
    if layout == "multi_query":
        return [h * d for h in range(n_heads)], [n_heads * d], [(n_heads + 1) * d]
    return [3 * h * d for h in range(n_heads)], [(3 * h + 1) * d for h in range(n_heads)], [(3 * h + 2) * d
                                                                                          for h in range(n_heads)]


def _rows(starts: list[int], d: int) -> torch.Tensor:
    """The rows of the blocks starting at ``starts`` (``d`` each), built once per layout: the maps and "uniform" ask
    for them at every forward of every layer."""
    return _rows_cached(tuple(starts), d)


@functools.lru_cache(maxsize=64)
def _rows_cached(starts: tuple[int, ...], d: int) -> torch.Tensor:
    return torch.tensor([s + j for s in starts for j in range(d)], dtype=torch.long)


def _original_heads(module: nn.Module) -> torch.Tensor:
    """The ORIGINAL ids of a layer's present query heads (whose rows of an ALiBi mask it reads)."""
    heads = getattr(module, "mask_heads", None)
    return heads.detach().cpu() if heads is not None else torch.arange(int(module.num_heads))


class FalconGroupedAttention(GroupedQueryAttention):
    """A Falcon layer after pruning: :class:`GroupedQueryAttention` called as Falcon's decoder layer calls its
    attention (the cache as ``layer_past``), rotary only without ALiBi, and, when the mask has a row per head
    (ALiBi), the rows of the kept heads (``mask_heads``: their ORIGINAL ids)."""

    def __init__(self, original: nn.Module, heads: torch.Tensor, *args, **kwargs):
        super().__init__(original, *args, **kwargs)
        self.use_rope = not bool(getattr(self.config, "alibi", False))
        self.register_buffer("mask_heads", heads.to(torch.long).to(self.q_proj.weight.device), persistent=False)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, layer_past=None, use_cache=False,
                output_attentions=False, position_embeddings=None, **kwargs):
        if attention_mask is not None and attention_mask.dim() == 4 and attention_mask.shape[1] > 1:
            attention_mask = attention_mask.index_select(1, self.mask_heads.to(attention_mask.device))
        return super().forward(hidden_states, position_embeddings=position_embeddings, attention_mask=attention_mask,
                               cache=layer_past, position_ids=position_ids, **kwargs)


class FalconFamily(LlamaFamily):
    """The Llama family's grouped-query machinery (pruned layers, key/value index, maps), over Falcon's fused
    layouts and names."""

    name = "falcon"
    model_types = ("falcon",)
    projections = "fused"
    positions = "rotary or alibi"

    def position_embedding(self, cfg):
        return "alibi" if getattr(cfg, "alibi", False) else "rotary"

    def kv_heads(self, cfg, kind):
        if cfg.new_decoder_architecture:
            return int(cfg.num_kv_heads)
        return 1 if cfg.multi_query else int(cfg.num_attention_heads)

    def sites(self, model, kind):
        cfg = model.config
        sites = []
        for i, layer in enumerate(base_model(model).h):
            a = layer.self_attention
            if _fused(a):
                sites.append(AttentionSite(layer=i, parent=layer, attr="self_attention", query=a.query_key_value,
                                           key=a.query_key_value, value=a.query_key_value, out_proj=a.dense,
                                           head_dim=int(a.head_dim), out_proj_inside=True))
                continue
            empty = isinstance(a, EmptyAttention)
            sites.append(AttentionSite(
                layer=i, parent=layer, attr="self_attention", query=None if empty else a.q_proj,
                key=None if empty else a.k_proj, value=None if empty else a.v_proj,
                out_proj=a.out_proj if empty else a.o_proj,
                head_dim=int(cfg.hidden_size // cfg.num_attention_heads) if empty else int(a.head_dim),
                out_proj_inside=True))
        return sites

    def present_heads(self, site):
        module = site.module
        if not _fused(module):
            return super().present_heads(site)
        rows, d = int(site.query.weight.shape[0]), int(module.head_dim)
        layout = _layout(module)
        if layout == "head_by_head":
            return rows // (3 * d)
        return rows // d - 2 * (int(module.num_kv_heads) if layout == "grouped" else 1)

    def present_kv_heads(self, site):
        module = site.module
        if not _fused(module):
            return super().present_kv_heads(site)
        return len(_blocks(module)[1])

    def split_values(self, site, output):
        if _fused(site.module):
            output = output[..., _rows(_blocks(site.module)[2], site.head_dim).to(output.device)]
        return super().split_values(site, output)

    def queries_keys(self, site, query_out, key_out, call_kwargs):
        module = site.module
        if not _fused(module):
            return super().queries_keys(site, query_out, key_out, call_kwargs)
        d = site.head_dim
        q_starts, k_starts, _ = _blocks(module)
        query_out = query_out[..., _rows(q_starts, d).to(query_out.device)]
        key_out = key_out[..., _rows(k_starts, d).to(key_out.device)]
        b, s, _ = query_out.shape
        angles = None
        if not module.config.alibi:
            angles = (call_kwargs or {}).get("position_embeddings", (None, None))
            if angles[0] is None:
                raise ValueError(f"layer {site.layer}: the attention module was called without position_embeddings "
                                 "(rotary angles); cannot place the queries and keys")
        return place_queries_keys(query_out.view(b, s, -1, d), key_out.view(b, s, -1, d), None, None, False,
                                  angles, importlib.import_module(_MODELING), None, cast=True)

    def call_extras(self, site, kwargs, output):
        mask = kwargs.get("attention_mask")
        if getattr(site.module.config, "alibi", False) and mask is not None:
            return {"alibi_mask": mask}
        return {}

    def score_bias(self, site, call):
        if not getattr(site.module.config, "alibi", False):
            return None
        mask = (call or {}).get("alibi_mask")
        if mask is None or mask.dim() != 4:
            raise ValueError(f"layer {site.layer}: the attention module was called without its ALiBi mask (a row per "
                             "head); cannot place the scores")
        if mask.shape[1] > 1:
            mask = mask.index_select(1, _original_heads(site.module).to(mask.device))
        # the mask holds each head's alibi where a key is visible and the dtype's minimum where not (the visible
        # keys are the adapter's own): the bias is its non-negative part
        return mask.masked_fill(mask < 0, 0.0)

    def head_parameters(self, site, pos):
        module = site.module
        if not _fused(module):
            return super().head_parameters(site, pos)
        d, w, b = site.head_dim, site.query.weight.detach(), site.query.bias
        q_starts, k_starts, v_starts = _blocks(module)
        kv = int(self.site_kv_index(site, len(q_starts))[pos])
        return {
            "query": rows_of(w, b, slice(q_starts[pos], q_starts[pos] + d), 0),
            "key": rows_of(w, b, slice(k_starts[kv], k_starts[kv] + d), 0),
            "value": rows_of(w, b, slice(v_starts[kv], v_starts[kv] + d), 0),
            "output": site.out_proj.weight.detach()[:, pos * d:(pos + 1) * d].reshape(-1).to("cpu", torch.float64),
        }

    def prune_layer(self, site, keep_pos):
        module = site.module
        if _fused(module):  # cut query_key_value into the query, key and value Linears; prune from there
            d, fused = site.head_dim, module.query_key_value
            q_starts, k_starts, v_starts = _blocks(module)
            module.q_proj = slice_linear(fused, _rows(q_starts, d), 0)
            module.k_proj = slice_linear(fused, _rows(k_starts, d), 0)
            module.v_proj = slice_linear(fused, _rows(v_starts, d), 0)
            module.o_proj = module.dense
        super().prune_layer(site, keep_pos)  # the module is replaced (FalconGroupedAttention or EmptyAttention)

    def pruned_attention(self, original, keep_pos, q_proj, k_proj, v_proj, o_proj, kv_index, head_dim, **parts):
        heads = _original_heads(original)[torch.tensor(keep_pos, dtype=torch.long)]
        return FalconGroupedAttention(original, heads, q_proj, k_proj, v_proj, o_proj, kv_index, head_dim, **parts)

    def set_out_proj(self, site, new):
        if _fused(site.module):
            site.module.dense = new
        else:
            super().set_out_proj(site, new)

    def cost_shape(self, cfg):
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads), int(cfg.hidden_size), int(cfg.ffn_hidden_size)

    def cost_dims(self, cfg):
        n_layers, n_heads, d_model, d_ffn = self.cost_shape(cfg)
        return CostDims(n_layers, n_heads, self.kv_heads(cfg, None), d_model // n_heads, d_model, d_ffn,
                        ffn_matrices=2)


FAMILY = FalconFamily()
