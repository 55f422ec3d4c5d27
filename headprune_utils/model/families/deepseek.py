"""DeepSeek-V2 and -V3 causal LMs (and models built on them, e.g. Kimi K2, Moonlight): multi-head LATENT attention.

Heads: ``model.layers[i].self_attn`` with
- the queries: ``q_proj`` (no query compression) or ``q_b_proj(q_a_layernorm(q_a_proj(x)))``, ``qk_head_dim =
  qk_nope_head_dim + qk_rope_head_dim`` rows per head, laid out head by head (the first ``qk_nope_head_dim`` without
  positions, the last ``qk_rope_head_dim`` rotated);
- a shared latent ``kv_a_proj_with_mqa(x)`` = ``[kv_lora_rank | qk_rope_head_dim]``: the compressed keys and values
  (RMS-normed by ``kv_a_layernorm``) and ONE rotated key part shared by every head (what the KV cache holds);
- ``kv_b_proj`` expanding the compressed latent into each head's ``qk_nope_head_dim`` key part and ``v_head_dim``
  value, rows head by head (``[k_nope | v]`` per head);
- ``o_proj`` over the heads' ``v_head_dim`` contexts.
Head ``h``'s query is ``[q_nope_h | rot(q_rope_h)]`` and its key ``[k_nope_h | rot(k_rope)]``: every head has its own
query, key and value but shares the rotated key part and the latent. One grid, ``[n_layers, num_attention_heads]``;
as many key/value heads as query heads. Causal; rotary on the rope parts only (through the module's own functions:
V3 interleaved pairs de-interleaved when the config's ``rope_interleave`` says so, else rotate-half; V2 complex angles
on interleaved pairs, computed in float32 as its module does); scores scaled by the module's ``scaling`` (YaRN's
mscale included). The mixture of experts is never touched.

Physical pruning keeps the kept heads' query rows (``q_proj`` / ``q_b_proj``), their ``[k_nope | v]`` rows of
``kv_b_proj`` and their columns of ``o_proj``; the latent projections, the shared rotated key and the KV cache (the
compressed latent, head-independent) stay whole. The module reshapes by ``-1`` heads, so it stays Hugging Face's own.
A layer with no head left becomes an ``EmptyAttention``. The FLOP estimate of latent attention is not implemented
(refused, not guessed).
"""
from __future__ import annotations

import importlib

import torch
from torch import nn

from headprune_utils.model.families.base import (
    AttentionSite, EmptyAttention, Family, UnsupportedArchitectureError, base_model, rows_of, slice_linear,
)


def _layers(model: nn.Module):
    return getattr(base_model(model), "layers", None)


def _query(module: nn.Module) -> nn.Linear:
    return module.q_proj if getattr(module, "q_proj", None) is not None else module.q_b_proj


def _modeling(module: nn.Module):
    return importlib.import_module(type(module).__module__)


class DeepseekFamily(Family):
    name = "deepseek"
    model_types = ("deepseek_v3", "deepseek_v2")
    projections = "latent"
    linear = "Linear"
    positions = "rotary (on a part of each head, shared key part)"
    causal_kinds = (None,)

    def head_shape(self, cfg, kind):
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads)

    def kv_heads(self, cfg, kind):
        return int(cfg.num_attention_heads)  # each head its own key and value (the rotated part shared)

    def sites(self, model, kind):
        cfg = model.config
        sites = []
        for i, layer in enumerate(_layers(model)):
            a = layer.self_attn
            empty = isinstance(a, EmptyAttention)
            sites.append(AttentionSite(
                layer=i, parent=layer, attr="self_attn",
                query=None if empty else _query(a), key=None if empty else a.kv_a_proj_with_mqa,
                value=None if empty else a.kv_b_proj, out_proj=a.out_proj if empty else a.o_proj,
                head_dim=int(cfg.v_head_dim), out_proj_inside=True))
        return sites

    def present_heads(self, site):
        if site.query is None:
            return 0
        return int(site.query.weight.shape[0]) // int(site.module.qk_head_dim)

    def present_kv_heads(self, site):
        if site.value is None:
            return 0
        m = site.module
        return int(site.value.weight.shape[0]) // (int(m.qk_nope_head_dim) + int(m.v_head_dim))

    def split_values(self, site, output):
        # kv_b_proj's output ([batch, 1, seq, heads * (nope + v)]: the module views the latent as one head):
        # each head's value part
        m = site.module
        b, s = output.shape[0], output.shape[-2]
        return output.reshape(b, s, -1, int(m.qk_nope_head_dim) + int(m.v_head_dim))[..., int(m.qk_nope_head_dim):]

    def queries_keys(self, site, query_out, key_out, call_kwargs):
        m = site.module
        nope, rope = int(m.qk_nope_head_dim), int(m.qk_rope_head_dim)
        b, s, _ = query_out.shape
        q = query_out.view(b, s, -1, nope + rope).transpose(1, 2)
        q_pass, q_rot = q.split([nope, rope], dim=-1)
        latent, k_rot = key_out.split([int(m.kv_lora_rank), rope], dim=-1)
        kv = m.kv_b_proj(m.kv_a_layernorm(latent)).view(b, s, -1, nope + int(m.v_head_dim)).transpose(1, 2)
        k_pass = kv[..., :nope]
        k_rot = k_rot.view(b, 1, s, rope)
        angles = (call_kwargs or {}).get("position_embeddings")
        if angles is None:
            raise ValueError(f"layer {site.layer}: the attention module was called without position_embeddings "
                             "(rotary angles); cannot place the queries and keys")
        modeling = _modeling(m)
        if isinstance(angles, torch.Tensor):  # DeepSeek-V2: complex angles, pairs (2i, 2i + 1) turned in place
            q_rot, k_rot = modeling.apply_rotary_emb(q_rot, k_rot, angles)
        else:
            cos, sin = angles
            rotate = (modeling.apply_rotary_pos_emb_interleave if getattr(m.config, "rope_interleave", False)
                      else modeling.apply_rotary_pos_emb)
            q_rot, k_rot = rotate(q_rot, k_rot, cos.to(q_rot.dtype), sin.to(q_rot.dtype))
        k_rot = k_rot.expand(-1, k_pass.shape[1], -1, -1)
        return torch.cat([q_pass, q_rot], dim=-1), torch.cat([k_pass, k_rot], dim=-1)

    def score_scale(self, site):
        return float(site.module.scaling)

    def head_parameters(self, site, pos):
        """A head's own parameters: its query rows, the key part (``qk_nope_head_dim`` rows) and the value
        (``v_head_dim`` rows) of its ``kv_b_proj`` block, its ``o_proj`` columns. The latent projections and the
        shared rotated key belong to no head."""
        m = site.module
        qk, nope, v = int(m.qk_head_dim), int(m.qk_nope_head_dim), int(m.v_head_dim)
        block = pos * (nope + v)
        return {
            "query": rows_of(site.query.weight.detach(), site.query.bias, slice(pos * qk, (pos + 1) * qk), 0),
            "key": rows_of(site.value.weight.detach(), site.value.bias, slice(block, block + nope), 0),
            "value": rows_of(site.value.weight.detach(), site.value.bias, slice(block + nope, block + nope + v), 0),
            "output": site.out_proj.weight.detach()[:, pos * v:(pos + 1) * v].reshape(-1).to("cpu", torch.float64),
        }

    def cache_layer_idx(self, site):
        return getattr(site.module, "layer_idx", site.layer)

    def prune_layer(self, site, keep_pos):
        m = site.module
        qk, nope, v = int(m.qk_head_dim), int(m.qk_nope_head_dim), int(m.v_head_dim)
        out_cols = torch.tensor([p * v + j for p in keep_pos for j in range(v)], dtype=torch.long)
        new_out = slice_linear(m.o_proj, out_cols, dim=1)
        if not keep_pos:
            self.empty_site(site, new_out, self.cache_layer_idx(site))
            return
        q_rows = torch.tensor([p * qk + j for p in keep_pos for j in range(qk)], dtype=torch.long)
        kv_rows = torch.tensor([p * (nope + v) + j for p in keep_pos for j in range(nope + v)], dtype=torch.long)
        if getattr(m, "q_proj", None) is not None:
            m.q_proj = slice_linear(m.q_proj, q_rows, 0)
        else:
            m.q_b_proj = slice_linear(m.q_b_proj, q_rows, 0)
        m.kv_b_proj = slice_linear(m.kv_b_proj, kv_rows, 0)
        m.o_proj = new_out
        m.num_heads = len(keep_pos)

    def set_out_proj(self, site, new):
        site.module.o_proj = new

    def cost_shape(self, cfg):
        raise UnsupportedArchitectureError(
            "the FLOP estimate of multi-head latent attention (DeepSeek-V3) is not implemented: its projections "
            "are not the query/key/value/output matrices of head_dim the estimate counts")

    def cost_dims(self, cfg):
        return self.cost_shape(cfg)


FAMILY = DeepseekFamily()
