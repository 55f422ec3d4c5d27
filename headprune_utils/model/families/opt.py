"""OPT causal LMs (Meta's OPT-125m ... 66B, the models of the LLM pruning literature: SparseGPT, Wanda).

Heads: ``model.decoder.layers[i].self_attn`` with separate ``q_proj``/``k_proj``/``v_proj`` Linears and ``out_proj``
INSIDE the module; one grid (``num_hidden_layers`` x ``num_attention_heads``, as many key/value heads, ``head_dim =
hidden / heads``). Causal; learned absolute positions (offset by 2, counted over the attention mask) added to the
embeddings, which may be narrower than the layers (``word_embed_proj_dim``: ``project_in`` / ``project_out`` around
the stack); layer norms before (most sizes) or after (350m) each block. The module scales the query by
``head_dim ** -0.5`` before the attention function (the same scores) and reshapes by ``num_heads``, which pruning
sets; its KV cache then holds the kept heads only. A layer with no head left becomes an ``EmptyAttention``
(``out_proj``'s bias).
"""
from __future__ import annotations

from torch import nn

from headprune_utils.model.families.base import AttentionSite, EmptyAttention, Family, base_model, slice_linear


def _layers(model: nn.Module):
    return getattr(getattr(base_model(model), "decoder", None), "layers", None)


class OPTFamily(Family):
    name = "opt"
    model_types = ("opt",)
    projections = "separate"
    linear = "Linear"
    positions = "absolute (learned, offset 2)"
    causal_kinds = (None,)

    def head_shape(self, cfg, kind):
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads)

    def sites(self, model, kind):
        cfg = model.config
        head_dim = int(cfg.hidden_size) // int(cfg.num_attention_heads)
        sites = []
        for i, layer in enumerate(_layers(model)):
            a = layer.self_attn
            sites.append(AttentionSite(
                layer=i, parent=layer, attr="self_attn",
                query=getattr(a, "q_proj", None), key=getattr(a, "k_proj", None), value=getattr(a, "v_proj", None),
                out_proj=a.out_proj, head_dim=head_dim, out_proj_inside=True,
            ))
        return sites

    def key_mask_source(self, model, kind):
        # OPTForCausalLM calls its decoder directly, not OPTModel: the decoder's call carries the padding mask
        return base_model(model).decoder

    def score_scale(self, site):
        return float(getattr(site.module, "scaling", site.head_dim ** -0.5))

    def prune_site(self, site, index, n_keep):
        module = site.module
        module.q_proj = slice_linear(module.q_proj, index, 0)
        module.k_proj = slice_linear(module.k_proj, index, 0)
        module.v_proj = slice_linear(module.v_proj, index, 0)
        module.num_heads = n_keep  # the module views its projections as [.., num_heads, head_dim]
        module.embed_dim = n_keep * site.head_dim

    def set_out_proj(self, site, new):
        site.module.out_proj = new

    def cache_layer_idx(self, site):
        return getattr(site.module, "layer_idx", site.layer)

    def cost_shape(self, cfg):
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads), int(cfg.hidden_size), int(cfg.ffn_dim)


FAMILY = OPTFamily()
