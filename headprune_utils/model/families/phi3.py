"""Phi-3 and Phi-4-mini causal LMs: the Llama family's attention with ONE fused projection ``qkv_proj``.

Heads: ``model.layers[i].self_attn`` with ``qkv_proj`` (a Linear without bias; its output rows are the query heads
``[0, H*d)``, then the key/value heads' keys ``[H*d, H*d + KV*d)``, then their values, each head a block of
``head_dim`` (``d``)) and ``o_proj`` INSIDE the module; grouped-query attention as Llama's (query head ``h`` reads
key/value head ``h // (H / KV)``); rotary on the first ``head_dim * partial_rotary_factor`` dims of each head
(Phi-4-mini: 75 %), through the module's own ``apply_rotary_pos_emb``; a sliding window over every layer when the
config sets ``sliding_window``.

The module splits ``qkv_proj``'s output by the CONFIG's head count, so a pruned layer cannot stay a Phi-3 module:
pruning cuts ``qkv_proj`` into the query, key and value Linears and hands the layer to the Llama family's
:class:`~headprune_utils.model.families.llama.GroupedQueryAttention` (the same computation with the module's own
rotary, attention function, mask, window and scaling; uneven groups exact; its KV cache holds the kept key/value
heads). Such a layer is then read as a Llama layer; the others stay fused.
"""
from __future__ import annotations

import torch
from torch import nn

from headprune_utils.model.families.base import AttentionSite, EmptyAttention, rows_of, slice_linear
from headprune_utils.model.families.llama import GroupedQueryAttention, LlamaFamily, head_dim_of


def _fused(module: nn.Module) -> bool:
    return hasattr(module, "qkv_proj") and not isinstance(module, (GroupedQueryAttention, EmptyAttention))


class Phi3Family(LlamaFamily):
    name = "phi3"
    model_types = ("phi3",)
    projections = "fused"
    positions = "rotary (partial)"

    def site(self, i, layer, cfg):
        a = layer.self_attn
        if not _fused(a):  # a pruned layer: a Llama layer from here on
            return super().site(i, layer, cfg)
        return AttentionSite(layer=i, parent=layer, attr="self_attn", query=a.qkv_proj, key=a.qkv_proj,
                             value=a.qkv_proj, out_proj=a.o_proj, head_dim=head_dim_of(cfg), out_proj_inside=True)

    @staticmethod
    def _widths(site: AttentionSite) -> tuple[int, int]:
        """(query width, key width) of a fused site's ``qkv_proj`` output: ``H * d`` and ``KV * d``."""
        module, d = site.module, site.head_dim
        kv = int(module.num_key_value_heads) * d
        return site.query.weight.shape[0] - 2 * kv, kv

    def present_heads(self, site):
        if not _fused(site.module):
            return super().present_heads(site)
        d, kv = int(site.module.head_dim), int(site.module.num_key_value_heads)
        return int(site.query.weight.shape[0]) // d - 2 * kv

    def present_kv_heads(self, site):
        if not _fused(site.module):
            return super().present_kv_heads(site)
        return int(site.module.num_key_value_heads)

    def split_values(self, site, output):
        if not _fused(site.module):
            return super().split_values(site, output)
        q, kv = self._widths(site)
        return super().split_values(site, output[..., q + kv:])

    def queries_keys(self, site, query_out, key_out, call_kwargs):
        if _fused(site.module):
            q, kv = self._widths(site)
            query_out, key_out = query_out[..., :q], key_out[..., q:q + kv]
        return super().queries_keys(site, query_out, key_out, call_kwargs)

    def head_parameters(self, site, pos):
        if not _fused(site.module):
            return super().head_parameters(site, pos)
        d, w = site.head_dim, site.query.weight.detach()
        q, kv = self._widths(site)
        kv_head = int(self.site_kv_index(site, q // d)[pos])
        return {
            "query": rows_of(w, None, slice(pos * d, (pos + 1) * d), 0),
            "key": rows_of(w, None, slice(q + kv_head * d, q + (kv_head + 1) * d), 0),
            "value": rows_of(w, None, slice(q + kv + kv_head * d, q + kv + (kv_head + 1) * d), 0),
            "output": site.out_proj.weight.detach()[:, pos * d:(pos + 1) * d].reshape(-1).to("cpu", torch.float64),
        }

    def prune_layer(self, site, keep_pos):
        module = site.module
        if _fused(module):  # cut qkv_proj into the query, key and value Linears; the Llama family prunes from there
            q, kv = self._widths(site)
            fused = module.qkv_proj
            module.q_proj = slice_linear(fused, torch.arange(q), 0)
            module.k_proj = slice_linear(fused, torch.arange(q, q + kv), 0)
            module.v_proj = slice_linear(fused, torch.arange(q + kv, q + 2 * kv), 0)
            if getattr(module, "sliding_window", None) is None:  # what the module passes its attention function
                module.sliding_window = getattr(module.config, "sliding_window", None)
        super().prune_layer(site, keep_pos)  # the module is replaced (GroupedQueryAttention or EmptyAttention)


FAMILY = Phi3Family()
