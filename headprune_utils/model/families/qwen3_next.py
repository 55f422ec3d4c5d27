"""Qwen3-Next and Qwen3.5: hybrids of gated DeltaNet layers (linear attention) and, every few layers, a GATED
attention layer (``qwen3_next``; Qwen3.5's text models ``qwen3_5_text`` and ``qwen3_5_moe_text``). Only the attention
layers have heads.

The grid is ``[n_attention_layers, n_query_heads]`` as in the other hybrids (:mod:`.hybrid`): its rows are the layers
whose ``config.layer_types[i]`` is ``"full_attention"``, in order (``architecture.model_layers`` maps rows to model
layers); the DeltaNet layers (``linear_attn``) are never touched. An attention layer (``model.layers[i].self_attn``)
is the Llama family's grouped-query attention with per-head query/key RMSNorms (weight ``1 + w``) before rotary on the
first ``partial_rotary_factor`` of each head, and an OUTPUT GATE: ``q_proj`` computes, head by head, the head's
``head_dim`` query rows and then ``head_dim`` gate rows (rows ``h * 2d : h * 2d + d`` and ``h * 2d + d : (h + 1) * 2d``),
and the head's context is multiplied by ``sigmoid(gate)`` before ``o_proj``. So:

- what the gates scale, what "mean" replaces and what the head means average is the GATED context (``o_proj``'s
  input); ``"uniform"`` replaces the head's attention pattern, so its replacement (the mean of the visible values) is
  gated by the head's own output gate too (:meth:`Family.output_gate`);
- the attention maps read the query half of each head's rows; a head's parameters are its query, its gate
  (``"output_gate"``), its key/value head's rows and its ``o_proj`` columns;
- pruning keeps each kept head's query AND gate rows; a pruned layer is a :class:`GatedGroupedAttention` (the Llama
  family's :class:`~headprune_utils.model.families.llama.GroupedQueryAttention`, uneven groups exact, its KV cache at
  the model layer's index of the hybrid cache, with the output gate); an emptied layer an ``EmptyAttention``.

The FLOP estimate, which has no term for a DeltaNet layer, is refused. Qwen3.5's checkpoints are multimodal
(``Qwen3_5ForConditionalGeneration``, model types ``qwen3_5`` / ``qwen3_5_moe``): load their language model with
``AutoModelForCausalLM`` (``Qwen3_5ForCausalLM``, which reads the checkpoint's language-model weights); the multimodal
wrapper is refused with that advice.
"""
from __future__ import annotations

import torch

from headprune_utils.model.families.base import UnsupportedArchitectureError, rows_of
from headprune_utils.model.families.hybrid import HybridFamily
from headprune_utils.model.families.llama import GroupedQueryAttention

_WRAPPERS = ("qwen3_5", "qwen3_5_moe")  # multimodal: refused, naming the text model to load


class GatedGroupedAttention(GroupedQueryAttention):
    """A gated attention layer after pruning: :class:`GroupedQueryAttention` whose ``q_proj`` holds each kept head's
    query rows then its gate rows, and whose heads' contexts are multiplied by ``sigmoid(gate)`` before ``o_proj``
    (as Qwen3-Next's module does)."""

    def project_queries(self, hidden_states, input_shape):
        query, gate = self.q_proj(hidden_states).view(*input_shape, -1, 2 * self.head_dim).chunk(2, dim=-1)
        return query, gate.reshape(*input_shape, -1)

    def gate_output(self, attn_output, gate):
        return attn_output * torch.sigmoid(gate)


class GatedAttentionHybridFamily(HybridFamily):
    name = "qwen3_next"
    model_types = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text") + _WRAPPERS
    positions = "rotary (partial)"
    query_blocks = 2  # each head's rows of q_proj: its query, then its output gate

    @staticmethod
    def _text_only(cfg):
        if getattr(cfg, "model_type", None) in _WRAPPERS:
            raise UnsupportedArchitectureError(
                f"{cfg.model_type} (the multimodal Qwen3.5 model) is not supported: load its language model, "
                "transformers.AutoModelForCausalLM.from_pretrained(<checkpoint>) (Qwen3_5ForCausalLM, which reads the "
                "checkpoint's language-model weights), whose heads the qwen3_next adapter reads")

    def model_layers(self, cfg, kind=None) -> list[int]:
        """The model layer of each grid row: the gated attention layers' indices, in order."""
        self._text_only(cfg)
        return [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"]

    def head_shape(self, cfg, kind):
        self._text_only(cfg)
        return super().head_shape(cfg, kind)

    def sites(self, model, kind):
        self._text_only(model.config)
        return super().sites(model, kind)

    def _query_half(self, site, query_out: torch.Tensor, half: int) -> torch.Tensor:
        b, s, _ = query_out.shape
        d = site.head_dim
        return query_out.view(b, s, -1, 2 * d)[..., half * d:(half + 1) * d]

    def queries_keys(self, site, query_out, key_out, call_kwargs):
        b, s, _ = query_out.shape
        return super().queries_keys(site, self._query_half(site, query_out, 0).reshape(b, s, -1), key_out,
                                    call_kwargs)

    def output_gated(self, site):
        return True

    def output_gate(self, site, query_out):
        return torch.sigmoid(self._query_half(site, query_out, 1))

    def head_parameters(self, site, pos):
        out = super().head_parameters(site, pos)  # key, value, output (and the norms: shared here, so none)
        d, w = site.head_dim, site.query.weight.detach()
        out["query"] = rows_of(w, site.query.bias, slice(2 * pos * d, (2 * pos + 1) * d), 0)
        out["output_gate"] = rows_of(w, site.query.bias, slice((2 * pos + 1) * d, (2 * pos + 2) * d), 0)
        return out

    def pruned_attention(self, original, keep_pos, q_proj, k_proj, v_proj, o_proj, kv_index, head_dim, **parts):
        return GatedGroupedAttention(original, q_proj, k_proj, v_proj, o_proj, kv_index, head_dim, **parts)

    def cost_dims(self, cfg):
        self._text_only(cfg)
        raise UnsupportedArchitectureError(
            f"{cfg.model_type}: the FLOP estimate has no term for a gated DeltaNet layer (most of this hybrid's "
            "layers), so it is not estimated")


FAMILY = GatedAttentionHybridFamily()
