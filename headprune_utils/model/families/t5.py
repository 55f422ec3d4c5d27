"""T5 and mT5 (``model_type`` "t5", "mt5"; mT5's attention is T5's), and UMT5 (``"umt5"``): encoder-decoders and
encoder-only models.

An encoder-decoder has three grids of heads, as Marian and BART: ``"enc"``
(``encoder.block[i].layer[0].SelfAttention``), ``"dec"`` (``decoder.block[i].layer[0].SelfAttention``, causal, with
a KV cache in ``generate()``) and ``"cross"`` (``decoder.block[i].layer[1].EncDecAttention``). Each attention module
has separate ``q``/``k``/``v`` Linears and the output projection ``o`` inside it, all without bias, ``inner_dim =
num_heads * d_kv`` (``d_kv`` need not be ``d_model / num_heads``) and as many key/value heads as query heads. The
scores are ``q . k`` UNSCALED plus a per-head relative position bias. An encoder-only model (``T5EncoderModel``,
``MT5EncoderModel``, the token classifiers built on them) has the ``"enc"`` grid alone: those models set
``is_encoder_decoder = False`` on their config when built, which is what :meth:`T5Family.kinds` reads.

UMT5 (``"umt5"``, :class:`UMT5Family`) has the same grids and projections, but every self-attention layer owns its
bias table ``[num_buckets, num_heads]`` and computes its bias itself (no bias passes between layers, the modules
return none): pruning keeps the kept heads' columns of that table in the module itself, and a layer with no head
left becomes an :class:`EmptyAttention`. ``UMT5EncoderModel`` builds its encoder from a COPY of its config, so its
own config keeps ``is_encoder_decoder = True``: it reports three grids and :meth:`T5Family.sites` names the missing
decoder (the config alone cannot tell; the model can).

Positions: the first layer of each stack (``has_relative_attention_bias``) looks up a bias table
``[num_buckets, num_heads]`` by the bucket of ``key - query`` and returns the bias ``[1, num_heads, q, k]``
(cross attention: zeros) to the stack, which hands it to every later layer. Heads are per-head columns of that
bias, so after pruning each layer must add the bias of ITS OWN kept heads. A pruned layer becomes a
:class:`T5PrunedAttention`: the same computation as the family's module, with the kept heads' rows of ``q``, ``k``,
``v`` and columns of ``o``, and the original ids of its kept heads (``heads``); it takes the full-width bias from
the stack, uses the columns ``heads`` of it, and returns the full-width bias, so later layers find theirs whatever
the first layer kept. The first layer keeps the whole bias table even when it loses heads, or all of them (it then
still computes the bias for the layers after it, and a decoder self-attention writes a placeholder into the KV
cache so that the cache still counts the positions seen).
"""
from __future__ import annotations

import importlib

import torch
from torch import nn

from headprune_utils.model.families.base import (
    SEQ2SEQ_KINDS, AttentionSite, CostDims, EmptyAttention, Family, base_model, slice_linear,
)


def _cache_of(cache, is_cross: bool, layer_idx):
    """The part of an encoder-decoder cache a self- or cross-attention layer uses, and whether that cross layer's
    keys and values are already stored there."""
    if cache is None:
        return None, False
    if hasattr(cache, "self_attention_cache"):
        part = cache.cross_attention_cache if is_cross else cache.self_attention_cache
        return part, is_cross and bool(cache.is_updated.get(layer_idx))
    return cache, False


class T5PrunedAttention(nn.Module):
    """A T5 attention module (self or cross) keeping the heads ``heads`` (original ids, possibly none) of
    ``n_total``.

    ``q``/``k``/``v`` hold the kept heads' rows (``None`` when no head is left), ``o`` their input columns. The
    position bias it receives, and the one it returns, are full width ``[1, n_total, q, k]``: the first layer of a
    stack computes it from the whole bias table; this module adds the columns ``heads`` of it to its scores."""

    def __init__(self, original: nn.Module, heads: list[int], q: nn.Linear | None, k: nn.Linear | None,
                 v: nn.Linear | None, o: nn.Linear):
        super().__init__()
        self.config = original.config
        self.is_decoder = original.is_decoder
        self.is_causal = original.is_causal
        self.has_relative_attention_bias = original.has_relative_attention_bias
        self.relative_attention_num_buckets = original.relative_attention_num_buckets
        self.relative_attention_max_distance = original.relative_attention_max_distance
        self.d_model = original.d_model
        self.key_value_proj_dim = original.key_value_proj_dim
        self.dropout = original.dropout
        self.scaling = original.scaling
        self.layer_idx = original.layer_idx
        self.gradient_checkpointing = getattr(original, "gradient_checkpointing", False)
        self.n_total = int(getattr(original, "n_total", original.n_heads))
        self.modeling_name = getattr(original, "modeling_name", type(original).__module__)
        self.bucket_fn = getattr(original, "bucket_fn", None) or type(original)._relative_position_bucket
        if self.has_relative_attention_bias:
            self.relative_attention_bias = original.relative_attention_bias  # the whole table: every head's column
        self.q, self.k, self.v, self.o = q, k, v, o
        self.register_buffer("heads", torch.tensor(heads, dtype=torch.long, device=o.weight.device),
                             persistent=False)
        self.n_heads = len(heads)
        self.inner_dim = self.n_heads * self.key_value_proj_dim

    def compute_bias(self, query_length: int, key_length: int, device=None, past_seen_tokens=0) -> torch.Tensor:
        """``[1, n_total, query_length, key_length]``: every original head's relative position bias."""
        weight = self.relative_attention_bias.weight
        device = weight.device if device is None else device
        context = torch.arange(query_length, dtype=torch.long, device=device)[:, None] + past_seen_tokens
        memory = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        bucket = self.bucket_fn(memory - context, bidirectional=not self.is_decoder,
                                num_buckets=self.relative_attention_num_buckets,
                                max_distance=self.relative_attention_max_distance)
        return self.relative_attention_bias(bucket).permute([2, 0, 1]).unsqueeze(0)

    def forward(self, hidden_states, mask=None, key_value_states=None, position_bias=None, cache=None, **kwargs):
        if cache is None:
            cache = kwargs.pop("past_key_values", None)
        kwargs.pop("past_key_values", None)
        input_shape = hidden_states.shape[:-1]
        past_seen = cache.get_seq_length(self.layer_idx) if cache is not None else 0
        past_seen = past_seen.clone() if isinstance(past_seen, torch.Tensor) else past_seen
        is_cross = key_value_states is not None
        curr_cache, reuse = _cache_of(cache, is_cross, self.layer_idx)
        source = key_value_states if is_cross else hidden_states

        if self.n_heads == 0:
            key_length = source.shape[1] + (0 if is_cross else past_seen)
            if not is_cross and curr_cache is not None:  # the cache still counts the positions seen
                placeholder = hidden_states.new_zeros(hidden_states.shape[0], 1, hidden_states.shape[1], 1)
                curr_cache.update(placeholder, placeholder, self.layer_idx)
        else:
            hidden_shape = (*input_shape, -1, self.key_value_proj_dim)
            query_states = self.q(hidden_states).view(hidden_shape).transpose(1, 2)
            if reuse:
                key_states = curr_cache.layers[self.layer_idx].keys
                value_states = curr_cache.layers[self.layer_idx].values
            else:
                kv_shape = (*source.shape[:-1], -1, self.key_value_proj_dim)
                key_states = self.k(source).view(kv_shape).transpose(1, 2)
                value_states = self.v(source).view(kv_shape).transpose(1, 2)
                if curr_cache is not None:
                    key_states, value_states = curr_cache.update(key_states, value_states, self.layer_idx,
                                                                 kwargs=kwargs)
                    if is_cross and hasattr(cache, "is_updated"):
                        cache.is_updated[self.layer_idx] = True
            key_length = key_states.shape[-2]

        if position_bias is None:
            if self.has_relative_attention_bias:
                position_bias = self.compute_bias(input_shape[1], key_length, device=hidden_states.device,
                                                  past_seen_tokens=past_seen)
            else:
                position_bias = hidden_states.new_zeros(1, self.n_total, input_shape[1], key_length)
                if self.gradient_checkpointing and self.training:
                    position_bias.requires_grad = True
        if position_bias.shape[1] != self.n_total:
            raise RuntimeError(f"layer {self.layer_idx}: got a position bias of {position_bias.shape[1]} heads, "
                               f"expected all {self.n_total} (the stack's full-width bias)")

        if self.n_heads == 0:
            return self.o(hidden_states.new_zeros(*input_shape, 0)), position_bias, None

        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        modeling = importlib.import_module(self.modeling_name)
        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                                    modeling.eager_attention_forward)
        own_bias = position_bias.index_select(1, self.heads.to(position_bias.device))
        attn_output, attn_weights = attention_interface(
            self, query_states, key_states, value_states, mask,
            dropout=0.0 if not self.training else self.dropout, scaling=self.scaling, position_bias=own_bias,
            **kwargs)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o(attn_output), position_bias, attn_weights


class T5Family(Family):
    name = "t5"
    model_types = ("t5", "mt5")
    projections = "separate"
    linear = "Linear"
    positions = "relative (per-head bias from each stack's first layer)"
    causal_kinds = ("dec",)

    def kinds(self, cfg):
        # T5EncoderModel / MT5EncoderModel set is_encoder_decoder = False on the config they are built from (a
        # config loaded alone keeps the default, True: the three grids of the full model)
        return SEQ2SEQ_KINDS if getattr(cfg, "is_encoder_decoder", True) else ("enc",)

    def model_kinds(self, model):
        # UMT5EncoderModel builds its encoder from a copy of its config, so its own config still says
        # is_encoder_decoder=True: the model itself, with no decoder, has the encoder grid only
        if getattr(base_model(model), "decoder", None) is None:
            return ("enc",)
        return self.kinds(model.config)

    def head_shape(self, cfg, kind):
        if kind == "enc":
            return int(cfg.num_layers), int(cfg.num_heads)
        n_dec = getattr(cfg, "num_decoder_layers", None)
        return int(n_dec if n_dec is not None else cfg.num_layers), int(cfg.num_heads)

    def sites(self, model, kind):
        base = base_model(model)
        if kind not in self.model_kinds(model):
            raise ValueError(f"attention type {kind!r}: this {type(model).__name__} has {self.model_kinds(model)}")
        stack = base.encoder if kind == "enc" else getattr(base, "decoder", None)
        if stack is None:
            raise ValueError(f"attention type {kind!r}: {type(model).__name__} has no decoder, though its config "
                             "says is_encoder_decoder=True")
        sublayer, attr = (1, "EncDecAttention") if kind == "cross" else (0, "SelfAttention")
        sites = []
        for i, block in enumerate(stack.block):
            parent = block.layer[sublayer]
            a = getattr(parent, attr)
            empty = isinstance(a, EmptyAttention)  # UMT5: a layer with no head left
            sites.append(AttentionSite(
                layer=i, parent=parent, attr=attr, query=None if empty else a.q, key=None if empty else a.k,
                value=None if empty else a.v, out_proj=a.out_proj if empty else a.o,
                head_dim=int(model.config.d_kv), out_proj_inside=True, kind=kind,
            ))
        return sites

    def key_mask_source(self, model, kind):
        return base_model(model).encoder

    def encoder(self, model, kind):
        return base_model(model).encoder

    def plain_attention(self, model, kind):
        return False  # unscaled scores plus a relative position bias: the adapter places them

    def score_scale(self, site):
        return float(getattr(site.module, "scaling", 1.0))

    def queries_keys(self, site, query_out, key_out, call_kwargs):
        # cross attention: the keys are the source positions, as many as there are, not the queries' count
        d = site.head_dim
        return (query_out.view(*query_out.shape[:2], -1, d).transpose(1, 2),
                key_out.view(*key_out.shape[:2], -1, d).transpose(1, 2))

    def call_extras(self, site, kwargs, output):
        # the module returns its stack's full-width position bias (computed by the first layer, or passed on)
        return {"position_bias": output[1]} if isinstance(output, tuple) and len(output) > 1 else {}

    def score_bias(self, site, call):
        bias = (call or {}).get("position_bias")
        if bias is None:
            raise ValueError(f"{site.kind} layer {site.layer}: the attention module returned no position bias")
        module = site.module
        heads = module.heads if isinstance(module, T5PrunedAttention) else torch.arange(bias.shape[1])
        return bias.index_select(1, heads.to(bias.device))

    def map_kinds(self, cfg):
        return self.kinds(cfg)

    def cache_layer_idx(self, site):
        return getattr(site.module, "layer_idx", site.layer) if site.kind == "dec" else None

    def prune_layer(self, site, keep_pos):
        module = site.module
        d = site.head_dim
        present = module.heads.tolist() if isinstance(module, T5PrunedAttention) else list(range(module.n_heads))
        heads = [present[p] for p in keep_pos]
        index = torch.tensor([i * d + j for i in keep_pos for j in range(d)], dtype=torch.long)
        o = slice_linear(module.o, index, 1)
        q, k, v = ((slice_linear(module.q, index, 0), slice_linear(module.k, index, 0),
                    slice_linear(module.v, index, 0)) if keep_pos else (None, None, None))
        new = T5PrunedAttention(module, heads, q, k, v, o)
        new.train(module.training)
        setattr(site.parent, site.attr, new)

    def set_out_proj(self, site, new):
        site.module.o = new

    def cost_shape(self, cfg):
        return int(cfg.num_layers), int(cfg.num_heads), int(cfg.d_model), int(cfg.d_ff)

    def cost_dims(self, cfg):
        n_layers, n_heads, d_model, d_ff = self.cost_shape(cfg)
        matrices = 3 if getattr(cfg, "is_gated_act", False) else 2
        return CostDims(n_layers, n_heads, n_heads, int(cfg.d_kv), d_model, d_ff, ffn_matrices=matrices)


class UMT5Family(T5Family):
    """UMT5: T5's grids and projections; each self-attention layer computes its own relative position bias from its
    own table (cross attention: none), so a pruned layer keeps its kept heads' columns of its table."""

    name = "umt5"
    model_types = ("umt5",)
    positions = "relative (per-head bias, a table in every self-attention layer)"

    def call_extras(self, site, kwargs, output):
        # the module returns no bias: recompute the one it added from its own table (a full-sequence forward)
        module = site.module
        if (isinstance(module, EmptyAttention) or kwargs.get("encoder_hidden_states") is not None
                or not module.has_relative_attention_bias):
            return {}
        n = output[0].shape[1]
        return {"position_bias": module.compute_bias(n, n, device=output[0].device)}

    def score_bias(self, site, call):
        if site.kind == "cross":
            return None
        bias = (call or {}).get("position_bias")
        if bias is None:
            raise ValueError(f"{site.kind} layer {site.layer}: no position bias was recorded for the attention call")
        return bias

    def prune_layer(self, site, keep_pos):
        if not keep_pos:  # an EmptyAttention (writing a placeholder into a decoder's KV cache)
            Family.prune_layer(self, site, keep_pos)
            return
        module = site.module
        d = site.head_dim
        index = torch.tensor([i * d + j for i in keep_pos for j in range(d)], dtype=torch.long)
        module.q, module.k, module.v = (slice_linear(module.q, index, 0), slice_linear(module.k, index, 0),
                                        slice_linear(module.v, index, 0))
        module.o = slice_linear(module.o, index, 1)
        if module.has_relative_attention_bias:
            table = module.relative_attention_bias
            weight = table.weight.index_select(1, torch.tensor(keep_pos, device=table.weight.device))
            new = nn.Embedding(weight.shape[0], weight.shape[1], device=weight.device, dtype=weight.dtype)
            with torch.no_grad():
                new.weight.copy_(weight)
            new.weight.requires_grad_(table.weight.requires_grad)
            module.relative_attention_bias = new
        module.n_heads = len(keep_pos)
        module.inner_dim = module.n_heads * d


FAMILY = T5Family()
UMT5_FAMILY = UMT5Family()
