"""DistilBERT.

Heads: ``transformer.layer[i].attention`` with separate ``q_lin``/``k_lin``/``v_lin`` Linears and the output
projection ``out_lin`` INSIDE the attention module; one grid (``n_layers`` x ``n_heads``, ``head_dim = dim /
n_heads``, as many key/value heads as query heads). Bidirectional; absolute learned (or sinusoidal) positions.
"""
from __future__ import annotations

from torch import nn

from headprune_utils.model.families.base import AttentionSite, EmptyAttention, Family, base_model, slice_linear


def _layers(model: nn.Module):
    return getattr(getattr(base_model(model), "transformer", None), "layer", None)


class DistilBertFamily(Family):
    name = "distilbert"
    model_types = ("distilbert",)
    projections = "separate"
    linear = "Linear"
    positions = "absolute (learned or sinusoidal)"
    causal_kinds = ()

    def matches_model(self, model: nn.Module) -> bool:
        return _layers(model) is not None

    def head_shape(self, cfg, kind):
        return int(cfg.n_layers), int(cfg.n_heads)

    def sites(self, model, kind):
        cfg = model.config
        head_dim = cfg.dim // cfg.n_heads
        sites = []
        for i, layer in enumerate(_layers(model)):
            a = layer.attention
            sites.append(AttentionSite(
                layer=i, parent=layer, attr="attention",
                query=getattr(a, "q_lin", None), key=getattr(a, "k_lin", None),
                value=getattr(a, "v_lin", None),
                out_proj=a.out_proj if isinstance(a, EmptyAttention) else a.out_lin,
                head_dim=head_dim, out_proj_inside=True,
            ))
        return sites

    def prune_site(self, site, index, n_keep):
        module = site.module
        module.q_lin = slice_linear(module.q_lin, index, 0)
        module.k_lin = slice_linear(module.k_lin, index, 0)
        module.v_lin = slice_linear(module.v_lin, index, 0)
        module.n_heads = n_keep

    def set_out_proj(self, site, new):
        site.module.out_lin = new

    def cost_shape(self, cfg):
        return int(cfg.n_layers), int(cfg.n_heads), int(cfg.dim), int(cfg.hidden_dim)


FAMILY = DistilBertFamily()
