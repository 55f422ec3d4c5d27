"""What every family adapter declares, and the pieces they share.

A :class:`Family` says where a model's heads live and what they are: its grids of heads (one for an encoder, three
for an encoder-decoder: ``"enc"``, ``"dec"``, ``"cross"``), per grid the layers' :class:`AttentionSite` s (the
query/key/value and output projections), the head layout read from the config (layers, query heads, key/value
heads, head dim), which grids are causal, how positions enter, and how one layer's heads are sliced out of the
weights. The rest of the package asks the adapter (through ``architecture``) and names no family attribute.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Literal

import torch
from torch import nn

SEQ2SEQ_KINDS: tuple[str, ...] = ("enc", "dec", "cross")


class UnsupportedArchitectureError(ValueError):
    pass


# the attributes under which the families' attention modules keep their head size (set when built)
_HEAD_SIZE_ATTRS = ("head_dim", "attention_head_size", "head_size", "key_value_proj_dim")


@dataclass
class AttentionSite:
    """One layer's attention block of one grid, as the gates and the pruner need it.

    ``out_proj``'s input is the concatenation of the present heads' contexts,
    ``[batch, seq, n_present * head_dim]``, in the order of ``kept_heads(model)[layer]``.
    ``query/key/value`` are ``None`` once every head of the layer is pruned.
    """

    layer: int
    parent: nn.Module  # holds the module at ``attr`` (swapped out when the layer loses all heads)
    attr: str
    query: nn.Linear | None
    key: nn.Linear | None
    value: nn.Linear | None
    out_proj: nn.Linear
    head_dim: int
    out_proj_inside: bool  # the attention module applies the output projection itself (DistilBERT, Marian, BART)
    kind: str | None = None  # encoder-decoders: "enc" | "dec" | "cross"; None for one-grid encoders

    @property
    def module(self) -> nn.Module:
        return getattr(self.parent, self.attr)

    @property
    def layer_key(self):
        """This site's key in per-layer dicts: ``layer`` (one-grid encoders), ``(kind, layer)`` (encoder-decoders)."""
        return self.layer if self.kind is None else (self.kind, self.layer)


class EmptyAttention(nn.Module):
    """Stands in for an attention module whose heads are all pruned.

    Returns a ``[batch, seq, 0]`` context (or, when the output projection lives inside the attention
    module as in DistilBERT, Marian and BART, that projection applied to it: its bias), and attention weights
    ``[batch, 0, seq, keys]`` (no head; ``output_attentions`` keeps the layer in its place). ``cache_layer_idx``: for a decoder self-attention, the layer whose KV cache gets a
    ``[batch, 1, seq, 1]`` zero placeholder per call, so that the cache still counts the positions seen.
    """

    def __init__(self, out_proj: nn.Linear | None = None, cache_layer_idx: int | None = None):
        super().__init__()
        self.out_proj = out_proj
        # the head counts the families' modules carry, all zero (code reading them sees an empty layer)
        self.num_attention_heads = 0
        self.n_heads = 0
        self.num_heads = 0
        self.cache_layer_idx = cache_layer_idx
        self.residual_dropout = 0.0  # StarCoder2: dropout on the attention's output while training, as the original

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        # the KV cache, by the keyword the family's layer passes it under (GPT-NeoX: layer_past)
        cache = next((kwargs[k] for k in ("cache", "past_key_values", "layer_past") if kwargs.get(k) is not None),
                     None)
        n_keys = hidden_states.shape[1]
        if self.cache_layer_idx is not None and cache is not None:
            self_cache = getattr(cache, "self_attention_cache", cache)
            placeholder = hidden_states.new_zeros(hidden_states.shape[0], 1, hidden_states.shape[1], 1)
            keys, _ = self_cache.update(placeholder, placeholder, self.cache_layer_idx)
            n_keys = keys.shape[2]
        source = next((kwargs[k] for k in ("key_value_states", "encoder_hidden_states") if kwargs.get(k) is not None),
                      None)
        if source is not None:  # cross attention: the keys are the source positions
            n_keys = source.shape[1]
        ctx = hidden_states.new_zeros(*hidden_states.shape[:-1], 0)
        if self.out_proj is not None:
            ctx = self.out_proj(ctx)
        if self.residual_dropout:
            ctx = nn.functional.dropout(ctx, p=self.residual_dropout, training=self.training)
        return ctx, hidden_states.new_zeros(hidden_states.shape[0], 0, hidden_states.shape[1], n_keys)


def slice_linear(linear: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """A new Linear keeping ``index`` along ``dim`` of the weight (0: outputs, 1: inputs)."""
    index = index.to(linear.weight.device)
    w = linear.weight.index_select(dim, index).detach().clone()
    if dim == 0:
        b = linear.bias.index_select(0, index).detach().clone() if linear.bias is not None else None
    else:
        b = linear.bias.detach().clone() if linear.bias is not None else None
    with warnings.catch_warnings():  # a 0-input layer (all heads pruned) warns on init; it is overwritten anyway
        warnings.simplefilter("ignore", UserWarning)
        new = nn.Linear(w.shape[1], w.shape[0], bias=b is not None, device=w.device, dtype=w.dtype)
    with torch.no_grad():
        new.weight.copy_(w)
        if b is not None:
            new.bias.copy_(b)
    new.weight.requires_grad_(linear.weight.requires_grad)
    if new.bias is not None and linear.bias is not None:
        new.bias.requires_grad_(linear.bias.requires_grad)
    return new


def rows_of(weight: torch.Tensor, bias: torch.Tensor | None, index: slice, dim: int) -> torch.Tensor:
    """``weight``'s slice ``index`` along ``dim`` (flattened in ``[index, other]`` order) then ``bias[index]``, flat
    float64 on the CPU."""
    w = (weight[index] if dim == 0 else weight[:, index].t()).reshape(-1)
    b = bias.detach()[index] if bias is not None else w.new_zeros(0)
    return torch.cat([w, b]).to("cpu", torch.float64)


def base_model(model: nn.Module) -> nn.Module:
    base = getattr(model, "base_model", model)
    return base if base is not None else model


@dataclass(frozen=True)
class CostDims:
    """What a FLOP estimate of one stack's layers needs, per layer: ``n_heads`` query heads and ``n_kv_heads``
    key/value heads of ``head_dim`` (grouped-query attention: fewer key/value heads, so the key and value
    projections cost ``n_kv_heads / n_heads`` of the query's), the residual width ``d_model``, and the feed-forward
    block: ``ffn_matrices`` matrices of ``d_model x d_ffn`` (2 for ``W_out(act(W_in x))``, 3 for a gated MLP such as
    Llama's ``down(act(gate(x)) * up(x))``)."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_model: int
    d_ffn: int
    ffn_matrices: int = 2

    def attention_macs_per_token(self, kept_heads: int | None = None, kept_kv_heads: int | None = None,
                                 seq_len: float = 0.0) -> float:
        """Multiply-adds per token of one layer's attention with ``kept_heads`` query and ``kept_kv_heads``
        key/value heads (default: all): the q and o projections of the query heads, the k and v projections of
        the key/value heads, and ``2 * seq_len`` per query head and head dim for the scores and the context."""
        hq = self.n_heads if kept_heads is None else kept_heads
        hkv = self.n_kv_heads if kept_kv_heads is None else kept_kv_heads
        d, hd = self.d_model, self.head_dim
        return 2 * d * hq * hd + 2 * d * hkv * hd + 2 * seq_len * hq * hd

    def ffn_macs_per_token(self) -> float:
        return self.ffn_matrices * self.d_model * self.d_ffn


@dataclass
class PostNormLayer:
    """One post-LayerNorm encoder layer by its parts, for code that computes such layers itself (``mask_sweep``,
    ``lean_loss``): ``norm(dropout(out(attention)) + x)``, then ``ffn``. ``attention`` is the self-attention
    module (an :class:`EmptyAttention` once its heads are gone; its modelling module supplies the attention
    function), ``attention_dropout`` its dropout on the probabilities."""

    attention: nn.Module
    query: nn.Linear | None
    key: nn.Linear | None
    value: nn.Linear | None
    out: nn.Linear
    dropout: nn.Module
    norm: nn.Module
    ffn: object  # callable: [.., hidden] -> [.., hidden]
    attention_dropout: nn.Module | None
    scaling: float | None  # the attention module's score scale (None: head_dim ** -0.5)


@dataclass
class ClassifierParts:
    """A pooled sequence classifier's pieces around its layers (for ``lean_loss``)."""

    embeddings: nn.Module
    pooler: nn.Module
    dropout: nn.Module
    classifier: nn.Module


class Family:
    """One model family's adapter. Subclasses set the class attributes and implement the methods."""

    name: str = ""
    model_types: tuple[str, ...] = ()  # ``config.model_type`` values it covers
    # what its heads are (documentation for users, and the registry's error message)
    projections: Literal["separate", "fused", "latent"] = "separate"
    linear: Literal["Linear", "Conv1D"] = "Linear"
    positions: str = "absolute"
    causal_kinds: tuple[str | None, ...] = ()  # grids whose queries see only earlier keys

    # ---------------------------------------------------------------- which models
    def matches_config(self, cfg) -> bool:
        return getattr(cfg, "model_type", None) in self.model_types

    def matches_model(self, model: nn.Module) -> bool:
        """Whether ``model`` is laid out as this family's models (for a model whose ``model_type`` no adapter
        names)."""
        return False

    # ---------------------------------------------------------------- the grids
    def kinds(self, cfg) -> tuple[str | None, ...]:
        return (None,)

    def model_kinds(self, model: nn.Module) -> tuple[str | None, ...]:
        """The grids of a loaded model: :meth:`kinds` of its config, unless the model says more than its config
        (a family whose encoder-only classes keep an encoder-decoder config overrides this)."""
        return self.kinds(model.config)

    def head_shape(self, cfg, kind: str | None) -> tuple[int, int]:
        """``(n_layers, n_query_heads)`` of the original model's grid ``kind``."""
        raise NotImplementedError

    def model_layers(self, cfg, kind: str | None = None) -> list[int]:
        """The model layer of each grid row (its index among all the stack's layers): every layer, unless the
        family is a hybrid whose grid holds its attention layers only."""
        return list(range(self.head_shape(cfg, kind)[0]))

    def kv_heads(self, cfg, kind: str | None) -> int:
        """Key/value heads per layer of grid ``kind`` (as many as query heads unless grouped)."""
        return self.head_shape(cfg, kind)[1]

    def sites(self, model: nn.Module, kind: str | None) -> list[AttentionSite]:
        raise NotImplementedError

    def key_mask_source(self, model: nn.Module, kind: str | None) -> nn.Module:
        """The module whose call carries grid ``kind``'s ``[batch, seq]`` key padding mask."""
        return base_model(model)

    def encoder(self, model: nn.Module, kind: str | None) -> nn.Module:
        """What to call to run grid ``kind`` alone on ``input_ids``/``attention_mask`` (the model itself for
        one grid)."""
        return model

    def kv_of_query(self, cfg, kind: str | None) -> list[int]:
        """The ORIGINAL key/value head each original query head reads (grouped-query attention: ``h // group``;
        the identity elsewhere)."""
        n_heads = self.head_shape(cfg, kind)[1]
        group = n_heads // self.kv_heads(cfg, kind)
        return [h // group for h in range(n_heads)]

    def site_kv_index(self, site: AttentionSite, n_present: int) -> torch.Tensor:
        """``[n_present]`` long: for each present query head of ``site`` (in ``kept_heads`` order), the index of the
        key/value head it reads among the site's present key/value heads (rows of ``site.key`` / ``site.value``
        in ``head_dim`` blocks)."""
        return torch.arange(n_present)

    def split_values(self, site: AttentionSite, output: torch.Tensor) -> torch.Tensor:
        """The value vectors ``[batch, seq, n_kv_present, head_dim]`` from what ``site.value`` output."""
        b, s, _ = output.shape
        return output.view(b, s, -1, site.head_dim)

    def queries_keys(self, site: AttentionSite, query_out: torch.Tensor, key_out: torch.Tensor,
                     call_kwargs: dict | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The queries ``[batch, n_present, seq, head_dim]`` and the keys ``[batch, n_kv_present, seq, head_dim]``
        whose scaled dot products the softmax takes (positions applied, e.g. rotary), from what ``site.query`` and
        ``site.key`` output during a forward; ``call_kwargs``: the keyword arguments the attention module was
        called with (for what the module gets from outside, e.g. rotary angles)."""
        b, s, _ = query_out.shape
        d = site.head_dim
        return (query_out.view(b, s, -1, d).transpose(1, 2), key_out.view(b, s, -1, d).transpose(1, 2))

    def present_heads(self, site: AttentionSite) -> int | None:
        """How many query heads the weights of ``site`` hold, counted with the attention module's own head size (set
        when the module was built, so an edit of the config after that does not move it); None: the adapter cannot
        tell. ``architecture.attention_sites`` checks it against the config and the pruning record."""
        if site.query is None:
            return 0
        size = next((v for v in (getattr(site.module, a, None) for a in _HEAD_SIZE_ATTRS) if isinstance(v, int)), None)
        width = self.query_width(site)
        return None if not size or width is None else width // size

    def query_width(self, site: AttentionSite) -> int | None:
        """The width of ``site``'s query output (all its present heads); a fused projection's adapter says (None:
        unknown)."""
        if site.query is site.key:
            return None
        weight = getattr(site.query, "weight", None)
        return None if weight is None or weight.dim() != 2 else int(weight.shape[0])

    def present_kv_heads(self, site: AttentionSite) -> int | None:
        """How many key/value heads the weights of ``site`` hold (None: not checked; grouped-query adapters say)."""
        return None

    def score_scale(self, site: AttentionSite) -> float:
        """The factor of ``q . k`` in the attention scores."""
        return site.head_dim ** -0.5

    def score_softcap(self, site: AttentionSite) -> float | None:
        """A soft cap on the scaled scores (Gemma 2: ``cap * tanh(scores / cap)``, before any mask); None: none."""
        return None

    def prune_problem(self, model: nn.Module) -> str | None:
        """Why ``model``'s heads cannot be removed one by one (physical pruning is refused, before anything
        changes, with this reason); None: they can."""
        return None

    def output_gated(self, site: AttentionSite) -> bool:
        """Whether each head's context is multiplied, before the output projection, by an output gate that the query
        projection also computes (Qwen3-Next's and Qwen3.5's gated attention: ``context_h * sigmoid(gate_h(x))``).
        What enters ``out_proj`` (and what the gates scale, the head means average) is then the gated context; a
        replacement that stands for an attention pattern (``"uniform"``) is gated too (:meth:`output_gate`)."""
        return False

    def output_gate(self, site: AttentionSite, query_out: torch.Tensor) -> torch.Tensor:
        """``[batch, seq, n_present, head_dim]``: the multiplier of each present head's context (``kept_heads``
        order), from what ``site.query`` output during the forward; only for :meth:`output_gated` sites."""
        raise NotImplementedError(f"the {self.name} family has no output gate")

    def score_sink(self, site: AttentionSite) -> torch.Tensor | None:
        """Per present head (``kept_heads`` order), a learned logit that joins each query's softmax as one more
        column and is dropped after it (gpt-oss's attention sinks): a head's attention over the keys then sums to
        less than 1. ``[n_present]``; None: no sink."""
        return None

    def score_bias(self, site: AttentionSite, call: dict | None) -> torch.Tensor | None:
        """What the attention adds to the scaled scores of the present heads of ``site`` (in ``kept_heads`` order),
        broadcastable to ``[batch, n_present, n_queries, n_keys]``, e.g. T5's relative position bias; None: nothing.
        ``call``: what :meth:`call_extras` recorded of the module's call during the forward."""
        return None

    def call_extras(self, site: AttentionSite, kwargs: dict, output) -> dict:
        """What the attention maps need of one call of ``site.module`` besides its query and key projections
        (``kwargs``: its keyword arguments, ``output``: what it returned), merged into the ``call`` dict that
        :meth:`queries_keys` and :meth:`score_bias` get. The default records nothing."""
        return {}

    def map_kinds(self, cfg) -> tuple[str | None, ...]:
        """The grids whose attention maps ``attention.attention_maps`` computes (encoder-decoders: the encoder
        self-attention unless the adapter places the decoder's and the cross attention's too)."""
        return tuple(k for k in self.kinds(cfg) if k in (None, "enc"))

    def is_causal(self, kind: str | None) -> bool:
        return kind in self.causal_kinds

    def plain_attention(self, model: nn.Module, kind: str | None) -> bool:
        """Whether grid ``kind`` attends as BERT does: ``softmax(q . k / sqrt(head_dim))`` of the query and key
        projections' outputs as they are, every real key visible, one key/value head per query head. Else the
        attention maps and the ``"uniform"`` ablation ask the adapter (:meth:`queries_keys`, :meth:`score_scale`,
        :meth:`visible_keys`, :meth:`site_kv_index`, :meth:`split_values`)."""
        return not self.is_causal(kind)

    def visible_keys(self, model: nn.Module, site: AttentionSite, key_mask: torch.Tensor | None, batch: int,
                     n_queries: int, n_keys: int, device=None) -> torch.Tensor:
        """``[batch, n_queries, n_keys]`` bool: the keys each query may see in a full-sequence forward (queries and
        keys at the same positions): not padding (``key_mask`` ``[batch, n_keys]``, 1 = real; None = all real),
        and, where the family says so, causal (key <= query) and within a sliding window."""
        device = key_mask.device if key_mask is not None and device is None else device
        allowed = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device)
        i = torch.arange(n_queries, device=device)[:, None]
        j = torch.arange(n_keys, device=device)[None, :]
        causal = self.is_causal(site.kind)
        if causal:
            allowed = allowed & (j <= i)
        window = self.window(model, site)
        if window is not None:  # causal: looking back only; bidirectional: both ways
            allowed = allowed & ((i - j <= window) if causal else ((i - j).abs() <= window))
        allowed = allowed[None].expand(batch, n_queries, n_keys)
        if key_mask is not None:
            allowed = allowed & key_mask.to(device).bool()[:, None, :]
        return allowed

    def visibility_problem(self, model: nn.Module, call_kwargs: dict) -> str | None:
        """Why, for this call of the model (the keyword arguments its key-mask source was called with), the keys a
        query may see are not those :meth:`visible_keys` gives (e.g. image tokens that attend both ways); None when
        they are. Whatever needs the visible keys ("uniform", the attention maps) refuses such a call."""
        return None

    def window(self, model: nn.Module, site: AttentionSite) -> int | None:
        """The largest distance ``|query - key|`` a query of ``site`` may see (causal: look back; None: no sliding
        window)."""
        return None

    def head_parameters(self, site: AttentionSite, pos: int) -> dict[str, torch.Tensor]:
        """The parameters of the present head at position ``pos`` of ``site`` (``kept_heads`` order), flat float64
        on the CPU, by part: ``"query"``, ``"key"``, ``"value"`` (weight rows then bias of its ``head_dim`` block;
        grouped-query attention: of the key/value head it reads, shared with its group) and ``"output"`` (its
        input columns of the out projection)."""
        d = site.head_dim
        rows = slice(pos * d, (pos + 1) * d)
        kv = int(self.site_kv_index(site, site.query.weight.shape[0] // d)[pos])
        out = {}
        for part, lin, r in (("query", site.query, rows), ("key", site.key, slice(kv * d, (kv + 1) * d)),
                             ("value", site.value, slice(kv * d, (kv + 1) * d))):
            out[part] = rows_of(lin.weight.detach(), lin.bias, r, 0)
        out["output"] = site.out_proj.weight.detach()[:, rows].reshape(-1).to("cpu", torch.float64)
        return out

    # ---------------------------------------------------------------- pruning
    def prune_layer(self, site: AttentionSite, keep_pos: list[int]) -> None:
        """Keep only the present heads at positions ``keep_pos`` (into ``kept_heads`` of the layer, fewer than
        present; may be empty: the layer then becomes an :class:`EmptyAttention`). The default slices the
        head-dim columns of the out projection (:meth:`slice_out_proj`) and the query/key/value rows
        (:meth:`prune_site`)."""
        d = site.head_dim
        index = torch.tensor([i * d + j for i in keep_pos for j in range(d)], dtype=torch.long)
        new_out = self.slice_out_proj(site, index)
        if not keep_pos:
            self.empty_site(site, new_out, self.cache_layer_idx(site))
            return
        self.prune_site(site, index, len(keep_pos))
        self.set_out_proj(site, new_out)

    def slice_out_proj(self, site: AttentionSite, index: torch.Tensor) -> nn.Module:
        """A new out projection keeping input dims ``index`` (nn.Linear: columns of the weight)."""
        return slice_linear(site.out_proj, index, dim=1)

    def prune_site(self, site: AttentionSite, index: torch.Tensor, n_keep: int) -> None:
        """Keep the head-dim columns ``index`` of ``site`` (``n_keep`` heads, at least one): slice the query,
        key and value rows and the output projection's columns, and set the module's head counts."""
        raise NotImplementedError

    def empty_site(self, site: AttentionSite, new_out: nn.Module, cache_layer_idx: int | None) -> None:
        """Replace ``site``'s attention module by an :class:`EmptyAttention` (every head gone); ``new_out`` is the
        output projection with no input column."""
        empty = EmptyAttention(new_out if site.out_proj_inside else None, cache_layer_idx=cache_layer_idx)
        empty.train(site.module.training)  # a new module is in training mode; the layer it replaces may not be
        setattr(site.parent, site.attr, empty)
        if not site.out_proj_inside:
            self.set_out_proj(site, new_out)

    def set_out_proj(self, site: AttentionSite, new: nn.Linear) -> None:
        raise NotImplementedError

    def cache_layer_idx(self, site: AttentionSite) -> int | None:
        """The KV-cache layer of a causal self-attention site (None: the site writes no cache)."""
        return None

    # ---------------------------------------------------------------- costs
    def cost_shape(self, cfg) -> tuple[int, int, int, int]:
        """``(n_layers, n_heads, d_model, d_ffn)`` for the FLOP estimate of one stack."""
        raise NotImplementedError

    def cost_dims(self, cfg) -> CostDims:
        """:class:`CostDims` of one stack (by default from :meth:`cost_shape`: as many key/value heads as query
        heads, ``head_dim = d_model / n_heads``, a two-matrix feed-forward)."""
        n_layers, n_heads, d_model, d_ffn = self.cost_shape(cfg)
        return CostDims(n_layers, n_heads, n_heads, d_model // n_heads, d_model, d_ffn)

    # ---------------------------------------------------------------- layer-by-layer computation
    def layout_problem(self, model: nn.Module) -> str | None:
        """None when ``model``'s layers can be computed from :meth:`post_norm_layers` (``mask_sweep``,
        ``lean_loss``); else why not, in words."""
        return f"the {self.name} family has no layer-by-layer decomposition here"

    def post_norm_layers(self, model: nn.Module) -> list[PostNormLayer]:
        raise NotImplementedError(self.layout_problem(model))

    @contextmanager
    def layers_swapped(self, model: nn.Module, stub: nn.Module) -> Iterator[None]:
        """Within the block the model's layer list is ``[stub]`` (restored after)."""
        raise NotImplementedError(self.layout_problem(model))
        yield  # pragma: no cover

    def classifier_parts(self, model: nn.Module) -> ClassifierParts | None:
        """The pieces of a pooled sequence classifier (None when ``model`` is not one)."""
        return None

    def position_embedding(self, cfg) -> str:
        """How positions enter, as the config says (e.g. ``"absolute"``)."""
        return self.positions

    def describe(self) -> str:
        return f"{self.name} ({', '.join(self.model_types)})"
