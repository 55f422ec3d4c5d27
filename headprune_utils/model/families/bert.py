"""BERT-type encoders: BERT, RoBERTa, ELECTRA, XLM-RoBERTa, CamemBERT and MiniLM (``model_type`` "bert").

Heads: ``encoder.layer[i].attention.self`` with separate ``query``/``key``/``value`` Linears (one grid,
``num_attention_heads`` query heads, as many key/value heads, ``head_dim = hidden_size / num_attention_heads``),
the output projection ``attention.output.dense`` OUTSIDE the self-attention module (post-LayerNorm:
``attention.output.LayerNorm(dropout(dense(ctx)) + x)``). Bidirectional; absolute learned positions
(``position_embedding_type``). Models of another ``model_type`` laid out the same way are taken too.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from torch import nn

from headprune_utils.model.families.base import (
    AttentionSite, ClassifierParts, EmptyAttention, Family, PostNormLayer, base_model, slice_linear,
)

# Architectures of hub models, for planning offline (shapes only): ``models.load_config`` inside ``planning()``.
KNOWN_CONFIGS = {
    "bert-base-uncased": dict(model_type="bert", num_hidden_layers=12, num_attention_heads=12, hidden_size=768,
                              intermediate_size=3072, vocab_size=30522),
    "bert-large-uncased": dict(model_type="bert", num_hidden_layers=24, num_attention_heads=16, hidden_size=1024,
                               intermediate_size=4096, vocab_size=30522),
}


def _layers(model: nn.Module):
    return getattr(getattr(base_model(model), "encoder", None), "layer", None)


class BertFamily(Family):
    name = "bert"
    model_types = ("bert", "roberta", "electra", "xlm-roberta", "camembert")
    projections = "separate"
    linear = "Linear"
    positions = "absolute (learned)"
    causal_kinds = ()

    def matches_model(self, model: nn.Module) -> bool:
        layers = _layers(model)
        return layers is not None and not getattr(getattr(model, "config", None), "is_encoder_decoder", False)

    def head_shape(self, cfg, kind):
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads)

    def sites(self, model, kind):
        cfg = model.config
        head_dim = cfg.hidden_size // cfg.num_attention_heads
        sites = []
        for i, layer in enumerate(_layers(model)):
            att = layer.attention
            s = att.self
            sites.append(AttentionSite(
                layer=i, parent=att, attr="self",
                query=getattr(s, "query", None), key=getattr(s, "key", None),
                value=getattr(s, "value", None), out_proj=att.output.dense,
                head_dim=head_dim, out_proj_inside=False,
            ))
        return sites

    def prune_site(self, site, index, n_keep):
        module = site.module
        module.query = slice_linear(module.query, index, 0)
        module.key = slice_linear(module.key, index, 0)
        module.value = slice_linear(module.value, index, 0)
        module.num_attention_heads = n_keep
        module.all_head_size = n_keep * site.head_dim

    def set_out_proj(self, site, new):
        site.parent.output.dense = new

    def cost_shape(self, cfg):
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads), int(cfg.hidden_size), int(cfg.intermediate_size)

    def position_embedding(self, cfg) -> str:
        return getattr(cfg, "position_embedding_type", "absolute")

    # ---------------------------------------------------------------- layer-by-layer computation
    def layout_problem(self, model):
        """None when the encoder is laid out as BERT's (``encoder.layer[i]``: ``attention.self`` with query, key and
        value Linears, or no head left after pruning; ``attention.output`` with dense, dropout, LayerNorm;
        ``intermediate``, ``output``, ``feed_forward_chunk``); else what differs, in words."""
        cfg = getattr(model, "config", None)
        if cfg is None or not hasattr(cfg, "num_attention_heads"):
            return "the model has no config with num_attention_heads"
        if getattr(cfg, "is_decoder", False) or getattr(cfg, "add_cross_attention", False):
            return "a decoder (causal or cross attention)"
        layers = _layers(model)
        if not isinstance(layers, nn.ModuleList):
            return "no encoder.layer list"
        for i, layer in enumerate(layers):
            att = getattr(layer, "attention", None)
            if att is None or not hasattr(att, "self") or not hasattr(att, "output"):
                return f"layer {i} is not laid out as BERT's (attention.self / attention.output)"
            if not all(isinstance(getattr(att.output, n, None), nn.Module) for n in ("dense", "LayerNorm", "dropout")):
                return f"layer {i}'s attention output is not BERT's (dense, dropout, LayerNorm)"
            if not all(hasattr(layer, n) for n in ("feed_forward_chunk", "intermediate", "output")):
                return f"layer {i} has no BERT feed-forward"
            sa = att.self
            if not isinstance(sa, EmptyAttention) and not all(
                    isinstance(getattr(sa, n, None), nn.Linear) for n in ("query", "key", "value")):
                return f"layer {i}'s self-attention is not BERT's (query, key, value)"
        return None

    def post_norm_layers(self, model):
        out = []
        for layer in _layers(model):
            sa, so = layer.attention.self, layer.attention.output
            out.append(PostNormLayer(
                attention=sa, query=getattr(sa, "query", None), key=getattr(sa, "key", None),
                value=getattr(sa, "value", None), out=so.dense, dropout=so.dropout, norm=so.LayerNorm,
                ffn=layer.feed_forward_chunk, attention_dropout=getattr(sa, "dropout", None),
                scaling=getattr(sa, "scaling", None),
            ))
        return out

    @contextmanager
    def layers_swapped(self, model: nn.Module, stub: nn.Module) -> Iterator[None]:
        encoder = base_model(model).encoder
        original = encoder.layer
        encoder.layer = nn.ModuleList([stub])
        try:
            yield
        finally:
            encoder.layer = original

    def classifier_parts(self, model):
        base = base_model(model)
        if base is model or getattr(base, "pooler", None) is None or not hasattr(base, "embeddings"):
            return None
        if not (isinstance(getattr(model, "classifier", None), nn.Linear)
                and isinstance(getattr(model, "dropout", None), nn.Dropout)):
            return None
        return ClassifierParts(embeddings=base.embeddings, pooler=base.pooler, dropout=model.dropout,
                               classifier=model.classifier)


FAMILY = BertFamily()
