"""ModernBERT encoders.

Heads: ``model.layers[i].attn`` with ONE fused query/key/value Linear ``Wqkv`` (rows q | k | v, each
``n_heads * head_dim`` with the heads side by side) and the output projection ``Wo`` INSIDE the module. One grid
(``num_hidden_layers`` x ``num_attention_heads``, as many key/value heads, ``head_dim = hidden / heads``).
Bidirectional; rotary positions applied to q and k inside the module (angles passed in as ``position_embeddings``,
with the local or global ``rope_theta`` of the layer); local layers (``config.layer_types[i] ==
"sliding_attention"``) see only the keys with ``|query - key| <= local_attention // 2``. The module reshapes
``Wqkv``'s output by ``(3, -1, head_dim)``, so pruning slices the three row blocks of ``Wqkv`` and the columns of
``Wo``.
"""
from __future__ import annotations

import importlib

import torch
from torch import nn

from headprune_utils.model.families.base import (
    AttentionSite, EmptyAttention, Family, rows_of, base_model, slice_linear,
)


def _layers(model: nn.Module):
    return getattr(base_model(model), "layers", None)


class ModernBertFamily(Family):
    name = "modernbert"
    model_types = ("modernbert",)
    projections = "fused"
    linear = "Linear"
    positions = "rotary (local and global layers)"
    causal_kinds = ()

    def head_shape(self, cfg, kind):
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads)

    def plain_attention(self, model, kind):
        return False  # rotary positions and local windows: the adapter places queries and keys

    def sites(self, model, kind):
        cfg = model.config
        head_dim = cfg.hidden_size // cfg.num_attention_heads
        sites = []
        for i, layer in enumerate(_layers(model)):
            a = layer.attn
            empty = isinstance(a, EmptyAttention)
            fused = None if empty else a.Wqkv
            sites.append(AttentionSite(
                layer=i, parent=layer, attr="attn", query=fused, key=fused, value=fused,
                out_proj=a.out_proj if empty else a.Wo, head_dim=head_dim, out_proj_inside=True,
            ))
        return sites

    @staticmethod
    def _third(output: torch.Tensor, which: int) -> torch.Tensor:
        width = output.shape[-1] // 3
        return output[..., which * width:(which + 1) * width]

    def split_values(self, site, output):
        return super().split_values(site, self._third(output, 2))

    def queries_keys(self, site, query_out, key_out, call_kwargs):
        q, k = super().queries_keys(site, self._third(query_out, 0), self._third(key_out, 1), call_kwargs)
        cos, sin = (call_kwargs or {}).get("position_embeddings", (None, None))
        if cos is None:
            raise ValueError(f"layer {site.layer}: the attention module was called without position_embeddings "
                             "(rotary angles); cannot place the queries and keys")
        modeling = importlib.import_module(type(site.module).__module__)
        return modeling.apply_rotary_pos_emb(q, k, cos.to(q.dtype), sin.to(q.dtype), unsqueeze_dim=1)

    def head_parameters(self, site, pos):
        d, w = site.head_dim, site.query.weight.detach()  # Linear: [3 * width, hidden], rows q | k | v
        width = w.shape[0] // 3
        out = {part: rows_of(w, site.query.bias, slice(i * width + pos * d, i * width + (pos + 1) * d), 0)
               for i, part in enumerate(("query", "key", "value"))}
        out["output"] = site.out_proj.weight.detach()[:, pos * d:(pos + 1) * d].reshape(-1).to("cpu", torch.float64)
        return out

    def query_width(self, site):
        return int(site.query.weight.shape[0]) // 3  # rows q | k | v

    def window(self, model, site):
        cfg = model.config
        types = getattr(cfg, "layer_types", None)
        if types is None or types[site.layer] != "sliding_attention":
            return None
        return int(cfg.local_attention) // 2

    def prune_site(self, site, index, n_keep):
        module = site.module
        width = module.Wqkv.out_features // 3
        index = index.to(module.Wqkv.weight.device)
        module.Wqkv = slice_linear(module.Wqkv, torch.cat([index, index + width, index + 2 * width]), 0)

    def set_out_proj(self, site, new):
        site.module.Wo = new

    def cost_shape(self, cfg):
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads), int(cfg.hidden_size), int(cfg.intermediate_size)

    def cost_dims(self, cfg):
        from headprune_utils.model.families.base import CostDims

        n_layers, n_heads, d_model, d_ffn = self.cost_shape(cfg)
        return CostDims(n_layers, n_heads, n_heads, d_model // n_heads, d_model, d_ffn, ffn_matrices=3)


FAMILY = ModernBertFamily()
