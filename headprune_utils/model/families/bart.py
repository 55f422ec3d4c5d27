"""Encoder-decoders laid out as BART: Marian (the papers' Transformer) and BART.

Three grids of heads, one per attention type: ``"enc"`` (``encoder.layers[i].self_attn``), ``"dec"``
(``decoder.layers[i].self_attn``, causal, with a KV cache in ``generate()``) and ``"cross"``
(``decoder.layers[i].encoder_attn``, queries from the decoder, keys and values from the encoder output). Each has
separate ``q_proj``/``k_proj``/``v_proj`` Linears and ``out_proj`` inside the module, ``head_dim = d_model /
heads`` and as many key/value heads as query heads. Positions: sinusoidal (Marian) or learned absolute (BART),
added to the embeddings. Their attention reshapes by ``head_dim`` (``view(..., -1, head_dim)``), so slicing the
projections is enough; the per-layer KV cache then holds only the kept heads.
"""
from __future__ import annotations


from headprune_utils.model.families.base import SEQ2SEQ_KINDS, AttentionSite, Family, base_model, slice_linear


class BartFamily(Family):
    name = "marian/bart"
    model_types = ("marian", "bart")
    projections = "separate"
    linear = "Linear"
    positions = "absolute (Marian: sinusoidal, BART: learned)"
    causal_kinds = ("dec",)

    def kinds(self, cfg):
        return SEQ2SEQ_KINDS

    def head_shape(self, cfg, kind):
        # the decoder's two grids share its depth and head count; Marian maps num_attention_heads to the ENCODER's
        if kind == "enc":
            return int(cfg.encoder_layers), int(cfg.encoder_attention_heads)
        return int(cfg.decoder_layers), int(cfg.decoder_attention_heads)

    def sites(self, model, kind):
        cfg = model.config
        base = base_model(model)
        stack = base.encoder if kind == "enc" else base.decoder
        attr = "encoder_attn" if kind == "cross" else "self_attn"
        head_dim = cfg.d_model // self.head_shape(cfg, kind)[1]
        sites = []
        for i, layer in enumerate(stack.layers):
            a = getattr(layer, attr)
            sites.append(AttentionSite(
                layer=i, parent=layer, attr=attr,
                query=getattr(a, "q_proj", None), key=getattr(a, "k_proj", None),
                value=getattr(a, "v_proj", None), out_proj=a.out_proj,
                head_dim=head_dim, out_proj_inside=True, kind=kind,
            ))
        return sites

    def key_mask_source(self, model, kind):
        # the encoder runs on its own inside generate()
        return base_model(model).encoder

    def encoder(self, model, kind):
        return base_model(model).encoder

    def prune_site(self, site, index, n_keep):
        module = site.module
        module.q_proj = slice_linear(module.q_proj, index, 0)
        module.k_proj = slice_linear(module.k_proj, index, 0)
        module.v_proj = slice_linear(module.v_proj, index, 0)
        module.num_heads = n_keep  # informative: the module reshapes by head_dim

    def set_out_proj(self, site, new):
        site.module.out_proj = new

    def cache_layer_idx(self, site):
        return getattr(site.module, "layer_idx", site.layer) if site.kind == "dec" else None

    def cost_shape(self, cfg):
        return int(cfg.encoder_layers), int(cfg.encoder_attention_heads), int(cfg.d_model), int(cfg.encoder_ffn_dim)


FAMILY = BartFamily()
