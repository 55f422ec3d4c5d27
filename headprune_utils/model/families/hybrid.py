"""Hybrid causal LMs of Mamba-2 layers and, every few layers, a Llama-family attention layer: IBM's Bamba
(``bamba``), Granite 4.0-H (``granitemoehybrid``) and NVIDIA's Nemotron-H (``nemotron_h``: Nemotron-H, Nemotron Nano
2, Nemotron 3). Only the attention layers have heads.

The grid is ``[n_attention_layers, n_query_heads]``: its rows are the model's ATTENTION layers in order
(``config.layers_block_type[i] == "full_attention"``; :meth:`HybridFamily.model_layers` gives each row's index among
all layers), so a hybrid's masks, scores and pictures have a row per attention layer and none for the Mamba layers
(nor, in Nemotron-H, whose every layer is ONE block, for its MLP and mixture-of-experts layers), which the adapter
never touches. An attention layer (``model.layers[i].self_attn``; Nemotron-H's ``model.layers[i].mixer``) has
separate ``q_proj`` / ``k_proj`` / ``v_proj`` / ``o_proj`` and grouped-query attention, as Llama's: Bamba's with
rotary on half of each head; Granite's with its scores scaled by ``attention_multiplier``, and rotary when
``position_embedding_type == "rope"``, no positions otherwise (Granite-4.0-H: NoPE); Nemotron-H's without positions
(the Mamba layers carry them). Pruning is the Llama family's (a
:class:`~headprune_utils.model.families.llama.GroupedQueryAttention`, its KV cache at the model layer's own index of
the hybrid cache; an emptied layer an ``EmptyAttention``). The FLOP estimate, which has no term for a Mamba layer,
is refused.
"""
from __future__ import annotations

from headprune_utils.model.families.base import UnsupportedArchitectureError
from headprune_utils.model.families.llama import LlamaFamily, head_norms_of, place_queries_keys

_ATTENTION = "full_attention"  # the layer type of the attention layers (the others: Mamba-2; Nemotron-H's MLP, MoE)


def _uses_rope(cfg) -> bool:
    """Bamba always rotates; Granite 4.0-H only with ``position_embedding_type == "rope"``; Nemotron-H never."""
    if cfg.model_type == "granitemoehybrid":
        return getattr(cfg, "position_embedding_type", None) == "rope"
    return cfg.model_type != "nemotron_h"


class HybridFamily(LlamaFamily):
    name = "hybrid"
    model_types = ("granitemoehybrid", "bamba", "nemotron_h")
    positions = "rotary (Bamba: on half of each head) or none (Granite 4.0-H, Nemotron-H: NoPE)"

    def model_layers(self, cfg, kind=None) -> list[int]:
        """The model layer of each grid row: the attention layers' indices, in order."""
        return [i for i, t in enumerate(cfg.layers_block_type) if t == _ATTENTION]

    def attention_attr(self, cfg) -> str:
        return "mixer" if cfg.model_type == "nemotron_h" else "self_attn"  # Nemotron-H: one mixer per layer

    def head_shape(self, cfg, kind):
        layers = self.model_layers(cfg)
        if not layers:
            raise UnsupportedArchitectureError(
                f"{cfg.model_type}: no layer is an attention layer (none in layers_block_type), so the "
                "model has no attention heads to gate, score or prune")
        return len(layers), int(cfg.num_attention_heads)

    def sites(self, model, kind):
        cfg = model.config
        layers = model.model.layers
        return [self.site(row, layers[i], cfg) for row, i in enumerate(self.model_layers(cfg))]

    def position_embedding(self, cfg):
        return "rotary" if _uses_rope(cfg) else "none (NoPE)"

    def queries_keys(self, site, query_out, key_out, call_kwargs):
        if _uses_rope(site.module.config):
            return super().queries_keys(site, query_out, key_out, call_kwargs)
        b, s, _ = query_out.shape
        d = site.head_dim
        q_norm, k_norm = head_norms_of(site.module)
        # no positions: no rotary function needed
        return place_queries_keys(query_out.view(b, s, -1, d), key_out.view(b, s, -1, d), q_norm, k_norm, False,
                                  None, None, None, cast=True)

    def window(self, model, site):
        return None  # no sliding window (and the layer types name the Mamba layers, not windows)

    def cost_dims(self, cfg):
        raise UnsupportedArchitectureError(
            f"{cfg.model_type}: the FLOP estimate has no term for a Mamba-2 layer (most of this hybrid's layers), so "
            "it is not estimated")


FAMILY = HybridFamily()
