"""OLMo (1), OLMo 2 and OLMo 3 causal LMs (AllenAI's open models): the Llama family's attention with two twists.

Heads: ``model.layers[i].self_attn`` with separate ``q_proj`` / ``k_proj`` / ``v_proj`` / ``o_proj`` as Llama's
(grouped-query attention where ``num_key_value_heads`` says so), rotary through the module's own
``apply_rotary_pos_emb``; OLMo 3's ``"sliding_attention"`` layers see only the last ``sliding_window`` keys.

- OLMo (1) clamps the query, key and value projections to ``[-clip_qkv, clip_qkv]`` when the config sets
  ``clip_qkv`` (OLMo-7B-0424: 8): an elementwise clamp of each head's own rows, which the attention maps and the
  ``"uniform"`` ablation's values apply too, and the pruned layer (the Llama family's
  :class:`~headprune_utils.model.families.llama.GroupedQueryAttention`) keeps.
- OLMo 2 and 3 RMS-normalise the query and the key projections over ALL heads of a layer together (``q_norm`` of
  width ``num_attention_heads * head_dim``, ``k_norm`` of ``num_key_value_heads * head_dim``) before rotary: every
  head's queries depend on every other head's, so a head is not a separable part of the layer's weights. Gates
  (which act on each head's context), the attention maps (the norms applied over the whole projection, as the module
  does), importance scores and L0 gates work; physical pruning is refused before anything changes
  (:meth:`OlmoFamily.prune_problem`: removing a head would change the other heads' queries), so mask such heads with
  ``head_gates`` instead.

What OLMo does around the attention (OLMo 1's parameter-free layer norms, OLMo 2's norms after each block) the
adapter never touches.
"""
from __future__ import annotations

import torch

from headprune_utils.model.families.llama import GroupedQueryAttention, LlamaFamily

_WHOLE_LAYER_NORMS = ("olmo2", "olmo3")  # q_norm / k_norm over all heads of a layer together


def _clip(module) -> float | None:
    """OLMo 1's clamp of q, k and v (None: none; OLMo 2 and 3 have no clamp, whatever their config says)."""
    cfg = getattr(module, "config", None)
    if getattr(cfg, "model_type", None) != "olmo":
        return None
    clip = getattr(cfg, "clip_qkv", None)
    return None if clip is None else float(clip)


class OlmoFamily(LlamaFamily):
    name = "olmo"
    model_types = ("olmo", "olmo2", "olmo3")

    def head_norms(self, module):
        return None, None  # OLMo 2/3's norms span the layer: applied to the whole projections in queries_keys

    def queries_keys(self, site, query_out, key_out, call_kwargs):
        module = site.module
        clip = _clip(module)
        if clip is not None:  # OLMo 1: q and k clamped before anything else
            query_out, key_out = query_out.clamp(-clip, clip), key_out.clamp(-clip, clip)
        if getattr(module.config, "model_type", None) in _WHOLE_LAYER_NORMS and not isinstance(
                module, GroupedQueryAttention):
            query_out, key_out = module.q_norm(query_out), module.k_norm(key_out)
        return super().queries_keys(site, query_out, key_out, call_kwargs)

    def split_values(self, site, output):
        clip = _clip(site.module)
        if clip is not None:  # OLMo 1: the values clamped as q and k
            output = output.clamp(-clip, clip)
        return super().split_values(site, output)

    def prune_problem(self, model):
        model_type = getattr(model.config, "model_type", None)
        if model_type in _WHOLE_LAYER_NORMS:
            return (f"{model_type} cannot be pruned head by head: its q_norm and k_norm RMS-normalise the query and "
                    "key projections over all heads of a layer together, so removing a head would change every "
                    "other head's queries and keys; mask the heads with head_gates (gates, attention maps, "
                    "importance scores and L0 gates work on this family)")
        return None


FAMILY = OlmoFamily()
