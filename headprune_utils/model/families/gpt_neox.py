"""The GPT-NeoX family: Pythia and GPT-NeoX causal LMs (one fused projection laid out head by head, partial rotary).

Heads: ``gpt_neox.layers[i].attention`` with ONE fused ``query_key_value`` Linear (``3 * hidden`` output rows) and
the output projection ``dense``, INSIDE the module. Unlike GPT-2's q | k | v blocks, the rows are laid out HEAD BY
HEAD: head ``h`` owns rows ``h * 3d : (h + 1) * 3d``, its query, key and value blocks of ``head_dim`` (``d``) in
that order (the module views the output as ``[.., heads, 3 * head_dim]`` and chunks it in three). One grid
(``num_hidden_layers`` x ``num_attention_heads``, as many key/value heads, ``head_dim = hidden / heads``). Causal;
rotary positions on the first ``rotary_ndims = head_dim * partial_rotary_factor`` dims of each query and key head
(Pythia: 25 %; the angles come in as ``position_embeddings``, their width says how many dims turn). The residual is
parallel (Pythia: ``x + attn(ln1(x)) + mlp(ln2(x))``) or sequential (``use_parallel_residual=False``); the adapter
does not depend on which.

Physical pruning keeps the kept heads' ``3 * head_dim`` rows of ``query_key_value`` and their columns of ``dense``;
the module reshapes by ``-1`` heads, so it has no head count to set, and its KV cache (the ``layer_past`` keyword)
holds the kept heads only. A layer with no head left becomes an ``EmptyAttention`` (``dense``'s bias).
"""
from __future__ import annotations

import importlib

import torch
from torch import nn

from headprune_utils.model.families.base import AttentionSite, EmptyAttention, Family, base_model, rows_of, slice_linear

_MODELING = "transformers.models.gpt_neox.modeling_gpt_neox"


def _layers(model: nn.Module):
    return getattr(base_model(model), "layers", None)


def _head_dim(cfg) -> int:
    return int(cfg.hidden_size) // int(cfg.num_attention_heads)


class GPTNeoXFamily(Family):
    name = "gpt_neox"
    model_types = ("gpt_neox",)
    projections = "fused"
    linear = "Linear"
    positions = "rotary (partial)"
    causal_kinds = (None,)

    def head_shape(self, cfg, kind):
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads)

    def sites(self, model, kind):
        head_dim = _head_dim(model.config)
        sites = []
        for i, layer in enumerate(_layers(model)):
            a = layer.attention
            empty = isinstance(a, EmptyAttention)
            fused = None if empty else a.query_key_value
            sites.append(AttentionSite(
                layer=i, parent=layer, attr="attention", query=fused, key=fused, value=fused,
                out_proj=a.out_proj if empty else a.dense, head_dim=head_dim, out_proj_inside=True,
            ))
        return sites

    @staticmethod
    def _part(site: AttentionSite, output: torch.Tensor, which: int) -> torch.Tensor:
        """Part ``which`` (0 query, 1 key, 2 value) of every head: ``[batch, seq, n_present, head_dim]``."""
        b, s, _ = output.shape
        d = site.head_dim
        return output.view(b, s, -1, 3 * d)[..., which * d:(which + 1) * d]

    def split_values(self, site, output):
        return self._part(site, output, 2)

    def queries_keys(self, site, query_out, key_out, call_kwargs):
        q = self._part(site, query_out, 0).transpose(1, 2)
        k = self._part(site, key_out, 1).transpose(1, 2)
        cos, sin = (call_kwargs or {}).get("position_embeddings", (None, None))
        if cos is None:
            raise ValueError(f"layer {site.layer}: the attention module was called without position_embeddings "
                             "(rotary angles); cannot place the queries and keys")
        modeling = importlib.import_module(_MODELING)
        return modeling.apply_rotary_pos_emb(q, k, cos.to(q.dtype), sin.to(q.dtype))  # partial: by cos's width

    def query_width(self, site):
        return int(site.query.weight.shape[0]) // 3  # each head's q | k | v rows

    def score_scale(self, site):
        return float(getattr(site.module, "scaling", site.head_dim ** -0.5))

    def head_parameters(self, site, pos):
        d, w, b = site.head_dim, site.query.weight.detach(), site.query.bias
        out = {part: rows_of(w, b, slice(pos * 3 * d + i * d, pos * 3 * d + (i + 1) * d), 0)
               for i, part in enumerate(("query", "key", "value"))}
        out["output"] = site.out_proj.weight.detach()[:, pos * d:(pos + 1) * d].reshape(-1).to("cpu", torch.float64)
        return out

    def prune_site(self, site, index, n_keep):
        d = site.head_dim
        positions = (index.view(n_keep, d)[:, 0] // d).tolist()  # the kept heads' positions among those present
        rows = torch.tensor([p * 3 * d + j for p in positions for j in range(3 * d)], dtype=torch.long)
        site.module.query_key_value = slice_linear(site.module.query_key_value, rows, 0)

    def set_out_proj(self, site, new):
        site.module.dense = new

    def cache_layer_idx(self, site):
        return getattr(site.module, "layer_idx", site.layer)

    def cost_shape(self, cfg):
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads), int(cfg.hidden_size), int(cfg.intermediate_size)


FAMILY = GPTNeoXFamily()
