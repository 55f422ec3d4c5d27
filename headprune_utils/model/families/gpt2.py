"""GPT-2 causal LMs.

Heads: ``transformer.h[i].attn`` with ONE fused query/key/value projection ``c_attn``, a ``Conv1D`` (``x @ W + b``,
weight ``[hidden, 3 * n_heads * head_dim]``: the output columns are q | k | v, each with the heads side by side),
and the output projection ``c_proj``, a ``Conv1D`` INSIDE the module whose input dims are the ROWS of its weight.
One grid (``n_layer`` x ``n_head``, as many key/value heads, ``head_dim = n_embd / n_head``). Causal; learned
absolute positions added to the embeddings. The module splits ``c_attn``'s output by ``split_size`` and reshapes by
``head_dim``, so pruning slices the three column blocks of ``c_attn`` and the rows of ``c_proj`` and sets
``split_size``; the per-layer KV cache then holds only the kept heads. Cross-attention GPT-2 layers
(``add_cross_attention``) are not supported.
"""
from __future__ import annotations

import warnings

import torch
from torch import nn

from headprune_utils.model.families.base import (
    AttentionSite, EmptyAttention, Family, UnsupportedArchitectureError, rows_of, base_model,
)


def _blocks(model: nn.Module):
    return getattr(base_model(model), "h", None)


def slice_conv1d(conv: nn.Module, index: torch.Tensor, dim: int) -> nn.Module:
    """A new ``Conv1D`` keeping ``index`` along ``dim`` of its weight ``[in, out]`` (0: inputs, 1: outputs)."""
    from transformers.pytorch_utils import Conv1D

    index = index.to(conv.weight.device)
    w = conv.weight.index_select(dim, index).detach().clone()
    b = conv.bias.index_select(0, index).detach().clone() if dim == 1 else conv.bias.detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        new = Conv1D(w.shape[1], w.shape[0])
    new = new.to(device=w.device, dtype=w.dtype)
    with torch.no_grad():
        new.weight.copy_(w)
        new.bias.copy_(b)
    new.weight.requires_grad_(conv.weight.requires_grad)
    new.bias.requires_grad_(conv.bias.requires_grad)
    return new


class GPT2Family(Family):
    name = "gpt2"
    model_types = ("gpt2",)
    projections = "fused"
    linear = "Conv1D"
    positions = "absolute (learned)"
    causal_kinds = (None,)

    def head_shape(self, cfg, kind):
        return int(cfg.n_layer), int(cfg.n_head)

    def sites(self, model, kind):
        cfg = model.config
        if getattr(cfg, "add_cross_attention", False):
            raise UnsupportedArchitectureError("GPT-2 with cross-attention layers (config.add_cross_attention) is not "
                                               "supported: its heads would form a second grid")
        head_dim = cfg.n_embd // cfg.n_head
        sites = []
        for i, block in enumerate(_blocks(model)):
            a = block.attn
            empty = isinstance(a, EmptyAttention)
            fused = None if empty else a.c_attn
            sites.append(AttentionSite(
                layer=i, parent=block, attr="attn", query=fused, key=fused, value=fused,
                out_proj=a.out_proj if empty else a.c_proj, head_dim=head_dim, out_proj_inside=True,
            ))
        return sites

    def _third(self, site, output: torch.Tensor, which: int) -> torch.Tensor:
        width = output.shape[-1] // 3
        return output[..., which * width:(which + 1) * width]

    def split_values(self, site, output):
        return super().split_values(site, self._third(site, output, 2))

    def queries_keys(self, site, query_out, key_out, call_kwargs):
        return super().queries_keys(site, self._third(site, query_out, 0), self._third(site, key_out, 1),
                                    call_kwargs)

    def head_parameters(self, site, pos):
        d, w = site.head_dim, site.query.weight.detach()  # Conv1D: [hidden, 3 * width], columns q | k | v
        width = w.shape[1] // 3
        out = {part: rows_of(w, site.query.bias, slice(i * width + pos * d, i * width + (pos + 1) * d), 1)
               for i, part in enumerate(("query", "key", "value"))}
        out["output"] = site.out_proj.weight.detach()[pos * d:(pos + 1) * d].reshape(-1).to("cpu", torch.float64)
        return out

    def score_scale(self, site):
        return float(site.module.scaling)

    def query_width(self, site):
        return int(site.query.weight.shape[1]) // 3  # Conv1D [hidden, 3 * width]: q | k | v

    def slice_out_proj(self, site, index):
        if len(index) == 0:
            # a Conv1D cannot take 0 input dims (it flattens with view(-1, 0)); an empty layer adds c_proj's bias, as a
            # Linear with no input column does
            conv = site.out_proj
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                new = nn.Linear(0, conv.weight.shape[1], device=conv.weight.device, dtype=conv.weight.dtype)
            with torch.no_grad():
                new.bias.copy_(conv.bias)
            new.bias.requires_grad_(conv.bias.requires_grad)
            return new
        return slice_conv1d(site.out_proj, index, dim=0)

    def prune_site(self, site, index, n_keep):
        module = site.module
        width = module.c_attn.weight.shape[1] // 3
        index = index.to(module.c_attn.weight.device)
        module.c_attn = slice_conv1d(module.c_attn, torch.cat([index, index + width, index + 2 * width]), dim=1)
        module.split_size = n_keep * site.head_dim
        module.num_heads = n_keep
        module.embed_dim = n_keep * site.head_dim

    def set_out_proj(self, site, new):
        site.module.c_proj = new

    def cache_layer_idx(self, site):
        return getattr(site.module, "layer_idx", site.layer)

    def cost_shape(self, cfg):
        inner = getattr(cfg, "n_inner", None) or 4 * cfg.n_embd
        return int(cfg.n_layer), int(cfg.n_head), int(cfg.n_embd), int(inner)


FAMILY = GPT2Family()
