"""Llama 4 causal LMs (the text model of Llama 4 Scout and Maverick): the Llama family's grouped-query attention with
chunked attention, layers without positions whose queries are scaled by position, and weightless query/key norms.

Heads: ``model.layers[i].self_attn`` with separate ``q_proj`` / ``k_proj`` / ``v_proj`` / ``o_proj`` as Llama's
(query head ``h`` reads key/value head ``h // (H / KV)``). What differs, layer by layer (``config.no_rope_layers``):

- rotary layers (``use_rope``): rotary on interleaved pairs of each query and key head (complex angles,
  ``freqs_cis``, computed in float32 by the module), then, when ``use_qk_norm``, an RMS norm without weight over each
  head's ``head_dim`` (shared by all heads: a head's scores stay its own); with ``attention_chunk_size``, CHUNKED
  attention: a query sees the earlier keys of its own chunk of ``attention_chunk_size`` positions only, the chunks
  counted from each row's first real token as the model's mask counts them (``layer_types[i] ==
  "chunked_attention"``; :meth:`Llama4Family.visible_keys`);
- layers without positions (NoPE, every fourth): no rotary, no norm, every earlier key visible, and with
  ``attn_temperature_tuning`` each query scaled by ``1 + attn_scale * log(1 + floor((position + 1) / floor_scale))``
  (positions counted from the start of the cache).

Pruning is the Llama family's (kept query heads' rows of ``q_proj``, their columns of ``o_proj``, the key/value heads
a kept head reads); a pruned layer is a :class:`Llama4GroupedAttention` that computes what Llama 4's own module
computes (its rotary, norm, temperature, attention function, mask and scaling) with each kept query head paired
with the key/value head it reads. The attention maps place queries and keys the same way (a full-sequence forward:
positions from 0). The mixture-of-experts feed-forward layers are never touched; the FLOP estimate counts the
routed experts and the shared one, and is refused when dense and expert layers differ in width.

Llama 4's checkpoints are multimodal (``Llama4ForConditionalGeneration``, model type ``llama4``): load the text model
(``Llama4ForCausalLM``, model type ``llama4_text``); the multimodal wrapper is refused with that advice.
"""
from __future__ import annotations

import importlib

import torch
from torch import nn

from headprune_utils.model.families.base import CostDims, UnsupportedArchitectureError
from headprune_utils.model.families.llama import GroupedQueryAttention, LlamaFamily, head_dim_of

_MODELING = "transformers.models.llama4.modeling_llama4"


def _layers(model: nn.Module):
    inner = getattr(model, "model", model)  # Llama4ForCausalLM keeps its text model as .model
    return getattr(inner, "layers", None)


def _settings(module: nn.Module) -> dict:
    """What Llama 4's attention does besides q . k, read from its module (or a pruned layer's copy)."""
    if isinstance(module, Llama4GroupedAttention):
        return module.settings
    cfg = module.config
    return {"use_rope": bool(module.use_rope), "qk_norm": getattr(module, "qk_norm", None),
            "temperature": (float(cfg.floor_scale), float(cfg.attn_scale))
            if cfg.attn_temperature_tuning and not module.use_rope else None}


def _placed(q: torch.Tensor, k: torch.Tensor, settings: dict, freqs_cis, offset: int, modeling):
    """Queries and keys ``[batch, seq, heads, head_dim]`` -> ``[batch, heads, seq, head_dim]`` as Llama 4's module
    places them: rotary (complex angles on interleaved pairs), the weightless norm, or the NoPE layers' temperature
    (positions ``offset + arange(seq)``)."""
    if settings["use_rope"]:
        if freqs_cis is None:
            raise ValueError("a Llama 4 rotary layer was called without position_embeddings (its complex angles)")
        q, k = modeling.apply_rotary_emb(q, k, freqs_cis.to(q.device))
    if settings["qk_norm"] is not None:
        q, k = settings["qk_norm"](q), settings["qk_norm"](k)
    if settings["temperature"] is not None:
        floor_scale, attn_scale = settings["temperature"]
        positions = torch.arange(q.shape[1], device=q.device) + offset
        scales = torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) * attn_scale + 1.0
        q = (q * scales.view(1, -1, 1, 1)).to(q.dtype)
    return q.transpose(1, 2), k.transpose(1, 2)


class Llama4GroupedAttention(GroupedQueryAttention):
    """A pruned Llama 4 layer: Llama 4's attention computation over the kept query heads, each paired with the
    key/value head it reads (``kv_index``): the Llama family's pruned layer with Llama 4's placement of queries and
    keys and its own attention function."""

    def __init__(self, original: nn.Module, *args, **kwargs):
        super().__init__(original, *args, **kwargs)
        self.settings = dict(_settings(original))

    def modeling(self):
        return importlib.import_module(self.modeling_name)  # Llama 4's own eager attention (no float32 softmax)

    def place(self, query_states, key_states, position_embeddings, modeling, cache):
        offset = cache.get_seq_length(self.layer_idx) if cache is not None else 0  # the NoPE layers' positions
        return _placed(query_states, key_states, self.settings, position_embeddings, offset, modeling)


class Llama4Family(LlamaFamily):
    name = "llama4"
    model_types = ("llama4_text", "llama4")
    positions = "rotary (interleaved) and none (NoPE layers)"

    def head_shape(self, cfg, kind):
        self._text_only(cfg)
        return super().head_shape(cfg, kind)

    @staticmethod
    def _text_only(cfg):
        if getattr(cfg, "model_type", None) == "llama4":
            raise UnsupportedArchitectureError(
                "llama4 (the multimodal Llama4ForConditionalGeneration) is not supported: load its text model, "
                "transformers.Llama4ForCausalLM.from_pretrained(<checkpoint>), whose heads the llama4 adapter reads")

    def sites(self, model, kind):
        self._text_only(model.config)
        cfg = model.config
        return [self.site(i, layer, cfg) for i, layer in enumerate(_layers(model))]

    def queries_keys(self, site, query_out, key_out, call_kwargs):
        b, s, _ = query_out.shape
        d = site.head_dim
        return _placed(query_out.view(b, s, -1, d), key_out.view(b, s, -1, d), _settings(site.module),
                       (call_kwargs or {}).get("position_embeddings"), 0, importlib.import_module(_MODELING))

    def visible_keys(self, model, site, key_mask, batch, n_queries, n_keys, device=None):
        allowed = super().visible_keys(model, site, key_mask, batch, n_queries, n_keys, device)
        cfg = model.config
        chunk = getattr(cfg, "attention_chunk_size", None)
        if chunk is not None and cfg.layer_types[site.layer] == "chunked_attention":
            # the chunks start at each row's first real token (the model's chunked mask counts left padding out)
            lead = torch.zeros(batch, dtype=torch.long, device=allowed.device) if key_mask is None else (
                key_mask.to(allowed.device).long().cumsum(-1) == 0).sum(-1)
            i = torch.arange(n_queries, device=allowed.device)[None, :, None] - lead[:, None, None]
            j = torch.arange(n_keys, device=allowed.device)[None, None, :] - lead[:, None, None]
            allowed = allowed & (torch.div(i, int(chunk), rounding_mode="floor")
                                 == torch.div(j, int(chunk), rounding_mode="floor"))
        return allowed

    def pruned_attention(self, original, keep_pos, q_proj, k_proj, v_proj, o_proj, kv_index, head_dim, **parts):
        return Llama4GroupedAttention(original, q_proj, k_proj, v_proj, o_proj, kv_index, head_dim, **parts)

    def cost_dims(self, cfg):
        self._text_only(cfg)
        n_layers, n_heads, d_model = int(cfg.num_hidden_layers), int(cfg.num_attention_heads), int(cfg.hidden_size)
        expert = int(cfg.num_experts_per_tok) * int(cfg.intermediate_size) + int(cfg.intermediate_size)  # + shared
        widths = {expert if i in cfg.moe_layers else int(cfg.intermediate_size_mlp) for i in range(n_layers)}
        if len(widths) != 1:
            raise UnsupportedArchitectureError(
                f"llama4: its dense layers (intermediate_size_mlp={cfg.intermediate_size_mlp}) and expert layers "
                f"({cfg.num_experts_per_tok} routed + 1 shared expert of {cfg.intermediate_size}) differ in width; "
                "the FLOP estimate assumes one feed-forward width per stack")
        return CostDims(n_layers, n_heads, self.kv_heads(cfg, None), head_dim_of(cfg), d_model, widths.pop(),
                        ffn_matrices=3)


FAMILY = Llama4Family()
