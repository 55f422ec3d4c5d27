"""The Llama family: Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen3-MoE, Gemma 1-3, gpt-oss, SmolLM3, Granite,
StarCoder2, Cohere (Command R), Cohere 2, Ministral, Seed-OSS, Qwen2-MoE, Helium, ERNIE 4.5, Arcee, Apertus, EXAONE 4,
Hunyuan (dense), nanochat, GLM, GLM-4 and StableLM causal LMs (grouped-query attention).

Heads: ``model.layers[i].self_attn`` with separate ``q_proj`` (``num_attention_heads * head_dim`` rows), ``k_proj`` /
``v_proj`` (``num_key_value_heads * head_dim`` rows each) and ``o_proj`` INSIDE the module. One grid, ``[n_layers,
n_query_heads]``; key/value heads are derived structure: query head ``h`` reads key/value head ``h // (n_query_heads /
n_kv_heads)``. Causal; rotary positions applied to q and k inside the module (the angles come in as
``position_embeddings``); Mistral's every layer and Qwen2's ``"sliding_attention"`` layers see only the last
``sliding_window`` keys (key ``j`` visible from query ``i`` when ``i - sliding_window < j <= i``). Gemma 3's
multimodal model (``Gemma3ForConditionalGeneration``, model type ``gemma3``: gemma-3-4b and larger) is read as its
language model (the grid, the config of ``text_config``); its image tokens attend to each other both ways inside their
block, so "uniform" and the attention maps refuse a batch with images (:meth:`LlamaFamily.visibility_problem`).
Mixtral and Qwen3-MoE have these attention layers (Mistral's and Qwen3's) over a mixture of experts, which the adapter
never touches (their FLOP estimate counts the experts a token is routed to). Qwen3 and Gemma 3 RMS-normalise each
query and key head over its ``head_dim`` (``q_norm``, ``k_norm``: one weight of ``head_dim`` shared by the heads of a
layer) before rotary: per head, so a head's scores stay its own and pruning leaves the norms as they are. Gemma 2 and
3 scale the scores by ``query_pre_attn_scalar ** -0.5`` (the module's ``scaling``, which the pruned layer and the
attention maps use) and alternate sliding-window and global layers (``layer_types``); Gemma 2 soft-caps the scaled
scores (``cap * tanh(scores / cap)``, ``attn_logit_softcapping``; the pruned layer passes the cap to the attention
function as the original does, the attention maps apply it: :meth:`LlamaFamily.score_softcap`); a bidirectional Gemma
(``use_bidirectional_attention``, e.g. EmbeddingGemma) is refused, as the adapter's keys are causal. What Gemma does
around the attention (scaled embeddings, norms of weight 1+w, norms after the attention, a soft-capped output) the
adapter never touches.

gpt-oss (``gpt_oss``: gpt-oss-20b, -120b) has biased projections, alternating sliding-window and global layers, a
mixture of experts (untouched), and per head an attention SINK: a learned logit ``sinks[h]`` that joins each query's
softmax as one more column and is dropped after it, so a head can give part of its attention to nothing. The sink is a
parameter of its query head: pruning keeps the kept heads' sinks (the pruned layer passes them to the attention
function as ``s_aux``, as the original does), the attention maps include it in each row's normalisation (a row sums to
less than 1: :meth:`LlamaFamily.score_sink`), and ``"uniform"`` is, as everywhere, the mean of the visible keys'
values (the head attends equally to every key it may see, nothing to the sink).

SmolLM3 skips rotary in every fourth layer (NoPE: the module's ``use_rope`` false), which a pruned layer and the
attention maps follow; Granite scales the scores by ``attention_multiplier`` (the module's ``scaling``) and multiplies
embeddings, residual branches and logits by constants the adapter never touches; StarCoder2 has biased projections, a
sliding window over every layer, and dropout on the attention's output while training (``residual_dropout``, as
Seed-OSS), which a pruned or emptied layer applies too. Helium, ERNIE 4.5 and Cohere (Command R, Aya) rotate
interleaved pairs of dimensions through their own rotary functions. Cohere with ``use_qk_norm`` layer-normalises each
query and key head with weights of its own (``q_norm.weight`` ``[n_heads, head_dim]``, ``k_norm.weight``
``[n_kv_heads, head_dim]``): a pruned layer keeps the kept heads' rows of them. Cohere 2 uses rotary only in its
sliding-window layers (the global ones have no positions), which a pruned layer and the maps follow.

Apertus and EXAONE 4 RMS-normalise each query and key head before rotary as Qwen3 does; EXAONE 4 with a sliding window
uses rotary in its sliding layers only (its global layers have no positions, and pass no window to the attention
function) and normalises after its blocks rather than before (untouched). Hunyuan (dense) and nanochat normalise each
query and key head AFTER rotary (Hunyuan's ``query_layernorm`` / ``key_layernorm``; nanochat's norms have no weight),
an order a pruned layer and the attention maps keep. Arcee, Apertus and nanochat have MLPs of two matrices (no gate),
which the FLOP estimate counts. StableLM (2) rotates the first part of each head only, may layer-normalise each query
and key head with a norm module of its own (``qk_layernorm``: a pruned layer keeps the kept heads' modules) and may add
the attention and the MLP in parallel. GLM and GLM-4 rotate interleaved pairs of the first half of each head through their
own rotary function (and GLM-4 normalises after its blocks as well as before: untouched).

Physical pruning removes the query heads' rows of ``q_proj`` and columns of ``o_proj``, and the rows of a
key/value head in ``k_proj`` / ``v_proj`` once no kept query head reads it. The groups left may be uneven (3 query
heads on one key/value head, 1 on another), which Hugging Face's attention (``repeat_kv``: every key/value head
repeated ``num_key_value_groups`` times) cannot express, so a pruned layer becomes a
:class:`GroupedQueryAttention`: the same computation as the family's own module, calling the family's rotary and
attention functions with the same mask, sliding window and scaling, but handing each kept query head the
key/value head it reads by index (``kv_index``). Its KV cache holds the kept key/value heads only. A layer with no
head left becomes an ``EmptyAttention`` (it adds ``o_proj``'s bias, and writes a placeholder into the cache so
that the cache still counts the positions seen).
"""
from __future__ import annotations

import copy
import importlib

import torch
from torch import nn

from headprune_utils.model.families.base import (
    AttentionSite, CostDims, EmptyAttention, Family, UnsupportedArchitectureError, base_model, slice_linear,
)

# the attention function and rotary of a family's modelling module (looked up where the module was defined)
_LLAMA_MODELING = "transformers.models.llama.modeling_llama"
# the model types whose attention module soft-caps its scores by config.attn_logit_softcapping (Gemma 3 has the
# setting too, but its module does not apply it)
_SOFTCAPPED = ("gemma2",)


def _softcap(module: nn.Module) -> float | None:
    if isinstance(module, GroupedQueryAttention):
        return module.softcap
    if getattr(getattr(module, "config", None), "model_type", None) in _SOFTCAPPED:
        return getattr(module, "attn_logit_softcapping", None)
    return None


# vision-language wrappers whose language model is of this family: the grid is the language model's heads
_WRAPPERS = ("gemma3",)


def _text(cfg):
    """The language model's config: a wrapper's ``text_config``, else ``cfg`` itself."""
    if getattr(cfg, "model_type", None) in _WRAPPERS:
        return cfg.text_config
    return cfg


def _layers(model: nn.Module):
    base = base_model(model)
    if getattr(model.config, "model_type", None) in _WRAPPERS:  # Gemma 3's multimodal model: its language model
        base = base.language_model
    return getattr(base, "layers", None)


def _uses_rope(module: nn.Module) -> bool:
    """Whether the attention module applies rotary: SmolLM3's NoPE layers (``use_rope`` false) and Cohere 2's global
    layers (no sliding window) do not."""
    if isinstance(module, GroupedQueryAttention):
        return module.use_rope
    model_type = getattr(getattr(module, "config", None), "model_type", None)
    if model_type == "cohere2":
        return getattr(module, "sliding_window", None) is not None
    if model_type == "exaone4":  # EXAONE 4: with a sliding window, its global layers have no positions
        return module.sliding_window is None or bool(module.is_sliding)
    return bool(getattr(module, "use_rope", True))


# the model types that normalise each query and key head AFTER rotary (the others that have head norms: before)
_NORM_AFTER_ROPE = ("hunyuan_v1_dense", "nanochat")


def _norm_after_rope(module: nn.Module) -> bool:
    """Whether the module's per-head query/key norms come after rotary (Hunyuan, nanochat) rather than before."""
    if isinstance(module, GroupedQueryAttention):
        return module.norm_after_rope
    return getattr(getattr(module, "config", None), "model_type", None) in _NORM_AFTER_ROPE


def _windowed(module: nn.Module) -> bool:
    """Whether the model of this attention module masks by a sliding window at all: its modelling module builds
    sliding-window masks (Mistral, Qwen2, Gemma 2, ...). Llama, Arcee, GLM, StableLM and others never do, whatever
    ``sliding_window`` their config carries (Hugging Face keeps unknown ``config.json`` keys as attributes)."""
    name = getattr(module, "modeling_name", type(module).__module__)
    return hasattr(importlib.import_module(name), "create_sliding_window_causal_mask")


def head_norms_of(module: nn.Module) -> tuple[nn.Module | None, nn.Module | None]:
    """The module's per-head query and key norms (``q_norm`` / ``k_norm``; Hunyuan's ``query_layernorm`` /
    ``key_layernorm``; StableLM's ``q_layernorm`` / ``k_layernorm`` when ``qk_layernorm``), or (None, None)."""
    if getattr(module, "q_norm", None) is not None:
        return module.q_norm, module.k_norm
    if getattr(module, "qk_layernorm", False):  # StableLM: a layer norm per head (a list), only when asked for
        return module.q_layernorm, module.k_layernorm
    return getattr(module, "query_layernorm", None), getattr(module, "key_layernorm", None)


def _norms_per_head_module(norm: nn.Module | None) -> bool:
    """StableLM's head norms: one LayerNorm module per head (``norms``), applied to ``[batch, heads, seq, head_dim]``
    (the heads on dim 1), where the others take ``[batch, seq, heads, head_dim]``."""
    return norm is not None and isinstance(getattr(norm, "norms", None), nn.ModuleList)


def _own_norm_parameters(norm: nn.Module | None, i: int) -> torch.Tensor | None:
    """Head ``i``'s own norm parameters, flat float64 on the CPU (weight, then bias): StableLM's module ``norms[i]``,
    Cohere's weight row ``i``; None for a norm the heads share (Qwen3, Gemma 3: a weight of ``head_dim``) or none."""
    if _norms_per_head_module(norm):
        own = norm.norms[i]
        parts = [own.weight] + ([own.bias] if getattr(own, "bias", None) is not None else [])
    elif norm is not None and getattr(norm, "weight", None) is not None and norm.weight.dim() == 2:
        parts = [norm.weight[i]] + ([norm.bias[i]] if getattr(norm, "bias", None) is not None
                                    and norm.bias.dim() == 2 else [])
    else:
        return None
    return torch.cat([p.detach().reshape(-1) for p in parts if p is not None]).to("cpu", torch.float64)


def _rotary_dims(module: nn.Module) -> int | None:
    """StableLM rotates the first ``rotary_ndims`` dims of each head by handing only those to its rotary function
    (Phi-3's and GLM's functions split the head themselves); None elsewhere."""
    return getattr(module, "rotary_ndims", None)


def _per_head_norm(norm: nn.Module | None, rows: list[int]) -> nn.Module | None:
    """Cohere's head norms have a weight row per head: a copy keeping ``rows``; a norm shared by the heads (a 1-d
    weight: Qwen3, Gemma 3) or None is returned as it is."""
    if _norms_per_head_module(norm):  # StableLM: a module per head, the kept heads' modules kept
        new = copy.deepcopy(norm)
        new.norms = nn.ModuleList([new.norms[i] for i in rows])
        new.num_heads = len(rows)
        return new
    if norm is None or getattr(norm, "weight", None) is None or norm.weight.dim() != 2:  # nanochat: no weight
        return norm
    new = copy.deepcopy(norm)
    new.weight = nn.Parameter(norm.weight.detach()[torch.tensor(rows, dtype=torch.long)].clone(),
                              requires_grad=norm.weight.requires_grad)
    return new


def head_dim_of(cfg) -> int:
    """A Llama-family config's head size (its ``head_dim``, else hidden / heads)."""
    return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)


def _modeling(name: str):
    module = importlib.import_module(name)
    if not hasattr(module, "apply_rotary_pos_emb") or not hasattr(module, "eager_attention_forward"):
        module = importlib.import_module(_LLAMA_MODELING)
    return module


def place_queries_keys(q: torch.Tensor, k: torch.Tensor, q_norm, k_norm, after_rope: bool, position_embeddings,
                       modeling, rotary_ndims: int | None, cast: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys ``[batch, seq, heads, head_dim]`` -> ``[batch, heads, seq, head_dim]``, head-normed and rotated
    in the family's order: the head norms before rotary (on ``[b, s, heads, d]``; StableLM's module per head on
    ``[b, heads, s, d]``) or after it (Hunyuan, nanochat); rotary from ``position_embeddings`` (None: no positions)
    through the family's own function, on the first ``rotary_ndims`` dims when given (StableLM). ``cast``: the angles
    in the queries' dtype (the attention maps); a pruned layer uses them as given, as the original does."""
    per_module = _norms_per_head_module(q_norm)
    if q_norm is not None and not after_rope and not per_module:
        q, k = q_norm(q), k_norm(k)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    if q_norm is not None and not after_rope and per_module:
        q, k = q_norm(q), k_norm(k)
    if position_embeddings is not None:
        cos, sin = position_embeddings
        if cast:
            cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        if rotary_ndims is not None and rotary_ndims < q.shape[-1]:
            r = rotary_ndims
            q_rot, k_rot = modeling.apply_rotary_pos_emb(q[..., :r], k[..., :r], cos, sin)
            q, k = torch.cat((q_rot, q[..., r:]), dim=-1), torch.cat((k_rot, k[..., r:]), dim=-1)
        else:
            q, k = modeling.apply_rotary_pos_emb(q, k, cos, sin)
    if q_norm is not None and after_rope:  # Hunyuan, nanochat ([b, heads, s, d]: over d alike)
        q, k = q_norm(q), k_norm(k)
    return q, k


class GroupedQueryAttention(nn.Module):
    """A Llama-family self-attention after pruning: any number of query heads, each reading the key/value head
    ``kv_index[h]`` (an index into the rows of ``k_proj`` / ``v_proj`` in ``head_dim`` blocks), groups even or not.

    Computes what the family's own attention module computes (same rotary, cache update, attention function of
    ``config._attn_implementation``, mask, sliding window, scaling and dropout), except that the keys and values
    are gathered per query head before the attention function instead of repeated by a fixed group size; the
    cache keeps the un-gathered key/value heads."""

    def __init__(self, original: nn.Module, q_proj: nn.Linear, k_proj: nn.Linear, v_proj: nn.Linear,
                 o_proj: nn.Linear, kv_index: torch.Tensor, head_dim: int, sinks: torch.Tensor | None = None,
                 q_norm: nn.Module | None = None, k_norm: nn.Module | None = None):
        super().__init__()
        self.config = original.config
        self.layer_idx = original.layer_idx
        self.head_dim = head_dim
        self.scaling = original.scaling
        self.attention_dropout = original.attention_dropout
        self.is_causal = True
        self.layer_type = getattr(original, "layer_type", None)
        # what the original passes to the attention function as sliding_window (the mask already holds it; flash
        # attention reads it): Qwen2 per layer, Mistral from the config, Llama nothing
        if isinstance(original, GroupedQueryAttention):
            self._sliding = original._sliding
        elif getattr(self.config, "model_type", None) == "exaone4":  # its global layers pass no window
            self._sliding = ("sliding_window", original.sliding_window if original.is_sliding else None)
        elif hasattr(original, "sliding_window"):
            self._sliding = ("sliding_window", original.sliding_window)
        elif getattr(self.config, "model_type", None) in ("mistral", "mixtral", "starcoder2"):
            self._sliding = ("sliding_window", getattr(self.config, "sliding_window", None))
        else:
            self._sliding = None
        self.modeling_name = getattr(original, "modeling_name", type(original).__module__)
        self.softcap = _softcap(original)  # Gemma 2's soft cap on the scores, passed on as the original does
        self.use_rope = _uses_rope(original)  # SmolLM3's NoPE layers, Cohere 2's global layers: False
        self.residual_dropout = float(getattr(original, "residual_dropout", 0.0))  # StarCoder2, while training
        self.num_key_value_groups = 1  # the attention function gets one key/value head per query head
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = q_proj, k_proj, v_proj, o_proj
        # Qwen3, Gemma 3: an RMSNorm over each head's head_dim (shared by the heads, so kept whole); Cohere: a layer
        # norm with a weight row per head (the caller passes the kept heads' rows); None elsewhere
        own_q, own_k = head_norms_of(original)
        self.q_norm = q_norm if q_norm is not None else own_q
        self.k_norm = k_norm if k_norm is not None else own_k
        self.norm_after_rope = _norm_after_rope(original)  # Hunyuan, nanochat: the head norms after rotary
        self.rotary_ndims = _rotary_dims(original)  # StableLM: rotary on the first rotary_ndims dims only
        clip = getattr(original, "clip", None) if isinstance(original, GroupedQueryAttention) else (
            getattr(self.config, "clip_qkv", None) if self.config.model_type == "olmo" else None)
        self.clip = None if clip is None else float(clip)  # OLMo 1: q, k and v clamped to [-clip, clip]
        # gpt-oss: the kept query heads' sink logits (the attention functions read module.sinks or s_aux)
        self.sinks = None if sinks is None else nn.Parameter(sinks.detach().clone(),
                                                             requires_grad=sinks.requires_grad)
        self.register_buffer("kv_index", kv_index.to(torch.long).to(q_proj.weight.device), persistent=False)
        self.num_heads = len(kv_index)
        self.num_key_value_heads = k_proj.out_features // head_dim

    def modeling(self):
        """The modelling module whose rotary and eager attention the layer uses (Llama's where its own has none)."""
        return _modeling(self.modeling_name)

    def project_queries(self, hidden_states: torch.Tensor, input_shape) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The queries ``[batch, seq, heads, head_dim]`` and what gates the heads' contexts before ``o_proj``
        (``[batch, seq, heads * head_dim]``; None: nothing, as here: a family with an output gate overrides this
        and :meth:`gate_output`)."""
        return self.q_proj(hidden_states).view(*input_shape, -1, self.head_dim), None

    def gate_output(self, attn_output: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
        """The heads' contexts ``[batch, seq, heads * head_dim]`` as they enter ``o_proj`` (here: as they are)."""
        return attn_output

    def place(self, query_states, key_states, position_embeddings, modeling, cache):
        """Queries and keys ``[batch, seq, heads, head_dim]`` -> ``[batch, heads, seq, head_dim]``, normed and rotated
        as the family's module does (a family with another placement overrides this)."""
        return place_queries_keys(query_states, key_states, self.q_norm, self.k_norm, self.norm_after_rope,
                                  position_embeddings if self.use_rope else None, modeling, self.rotary_ndims)

    def forward(self, hidden_states: torch.Tensor, position_embeddings=None, attention_mask=None, cache=None,
                **kwargs):
        if cache is None:
            cache = kwargs.pop("past_key_values", None)
        modeling = self.modeling()
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        query_states, output_gate = self.project_queries(hidden_states, input_shape)
        key_states = self.k_proj(hidden_states).view(hidden_shape)
        value_states = self.v_proj(hidden_states).view(hidden_shape)
        if self.clip is not None:  # OLMo 1: q, k and v clamped
            query_states = query_states.clamp(-self.clip, self.clip)
            key_states = key_states.clamp(-self.clip, self.clip)
            value_states = value_states.clamp(-self.clip, self.clip)
        query_states, key_states = self.place(query_states, key_states, position_embeddings, modeling, cache)
        value_states = value_states.transpose(1, 2)
        if cache is not None:
            key_states, value_states = cache.update(key_states, value_states, self.layer_idx, kwargs=kwargs)
        key_states = key_states.index_select(1, self.kv_index)
        value_states = value_states.index_select(1, self.kv_index)

        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                                    modeling.eager_attention_forward)
        extra = dict([self._sliding]) if self._sliding is not None else {}
        if self.softcap is not None:
            extra["softcap"] = self.softcap
        if self.sinks is not None:
            extra["s_aux"] = self.sinks
        attn_output, attn_weights = attention_interface(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling, **extra, **kwargs)
        attn_output = self.gate_output(attn_output.reshape(*input_shape, -1).contiguous(), output_gate)
        out = self.o_proj(attn_output)
        if self.residual_dropout:
            out = nn.functional.dropout(out, p=self.residual_dropout, training=self.training)
        return out, attn_weights


class LlamaFamily(Family):
    name = "llama"
    model_types = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text",
                   "gpt_oss", "smollm3", "granite", "starcoder2", "cohere", "cohere2", "ministral", "seed_oss",
                   "qwen2_moe", "helium", "ernie4_5", "arcee", "apertus", "exaone4", "hunyuan_v1_dense",
                   "nanochat", "glm", "glm4", "stablelm") + _WRAPPERS
    projections = "separate"
    linear = "Linear"
    positions = "rotary"
    causal_kinds = (None,)
    # blocks of head_dim rows per head in q_proj: 1 (its query); a gated attention's 2 (its query, then its gate)
    query_blocks = 1

    def head_shape(self, cfg, kind):
        cfg = _text(cfg)
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads)

    def kv_heads(self, cfg, kind):
        cfg = _text(cfg)
        return int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)

    def sites(self, model, kind):
        cfg = _text(model.config)
        if getattr(cfg, "use_bidirectional_attention", None):
            raise UnsupportedArchitectureError(
                f"{cfg.model_type} with use_bidirectional_attention=True (an encoder, e.g. EmbeddingGemma) is not "
                "supported: the llama adapter's queries see only earlier keys")
        return [self.site(i, layer, cfg) for i, layer in enumerate(_layers(model))]

    def attention_attr(self, cfg) -> str:
        """The attribute of a decoder layer that holds its attention module."""
        return "self_attn"

    def site(self, i: int, layer: nn.Module, cfg) -> AttentionSite:
        """Layer ``i``'s attention site: its separate query/key/value projections (none once the layer is empty)."""
        attr = self.attention_attr(cfg)
        a = getattr(layer, attr)
        empty = isinstance(a, EmptyAttention)
        return AttentionSite(
            layer=i, parent=layer, attr=attr,
            query=None if empty else a.q_proj, key=None if empty else a.k_proj,
            value=None if empty else a.v_proj, out_proj=a.out_proj if empty else a.o_proj,
            head_dim=getattr(a, "head_dim", None) or head_dim_of(cfg), out_proj_inside=True,
        )

    def query_width(self, site):
        width = super().query_width(site)  # q_proj's rows, of which a gated attention's queries are half
        return None if width is None else width // self.query_blocks

    def present_kv_heads(self, site):
        if site.key is None:
            return 0
        return int(site.key.weight.shape[0]) // int(site.module.head_dim)

    def site_kv_index(self, site, n_present):
        module = site.module
        index = getattr(module, "kv_index", None)
        if index is not None:
            return index.detach().cpu()
        return torch.arange(n_present) // int(module.num_key_value_groups)

    def queries_keys(self, site, query_out, key_out, call_kwargs):
        b, s, _ = query_out.shape
        q, k = query_out.view(b, s, -1, site.head_dim), key_out.view(b, s, -1, site.head_dim)
        q_norm, k_norm = self.head_norms(site.module)
        angles = None
        if _uses_rope(site.module):  # not SmolLM3's NoPE layers, Cohere 2's and EXAONE 4's global layers
            angles = (call_kwargs or {}).get("position_embeddings", (None, None))
            if angles[0] is None:
                raise ValueError(f"layer {site.layer}: the attention module was called without position_embeddings "
                                 "(rotary angles); cannot place the queries and keys")
        modeling = _modeling(getattr(site.module, "modeling_name", type(site.module).__module__))
        return place_queries_keys(q, k, q_norm, k_norm, _norm_after_rope(site.module), angles, modeling,
                                  _rotary_dims(site.module), cast=True)

    def head_norms(self, module):
        """(q_norm, k_norm) applied to each head over its ``head_dim`` (Qwen3, Gemma 3, Hunyuan), or (None, None)."""
        return head_norms_of(module)

    def score_scale(self, site):
        return float(getattr(site.module, "scaling", site.head_dim ** -0.5))

    def score_softcap(self, site):
        return _softcap(site.module)

    def head_parameters(self, site, pos):
        out = super().head_parameters(site, pos)
        sinks = getattr(site.module, "sinks", None)
        if sinks is not None:  # gpt-oss: the head's sink logit is its own parameter
            out["sink"] = sinks.detach()[pos:pos + 1].to("cpu", torch.float64)
        q_norm, k_norm = head_norms_of(site.module)
        kv = int(self.site_kv_index(site, site.query.weight.shape[0] // (site.head_dim * self.query_blocks))[pos])
        for part, norm, i in (("query_norm", q_norm, pos), ("key_norm", k_norm, kv)):
            own = _own_norm_parameters(norm, i)
            if own is not None:  # Cohere, StableLM: each head's norm is its own (a shared one belongs to no head)
                out[part] = own
        return out

    def score_sink(self, site):
        return getattr(site.module, "sinks", None)  # gpt-oss: one per present query head, in kept order

    def visibility_problem(self, model, call_kwargs):
        if getattr(model.config, "model_type", None) not in _WRAPPERS:
            return None
        types = call_kwargs.get("token_type_ids")
        if call_kwargs.get("pixel_values") is not None or (types is not None and bool((types != 0).any())):
            return ("the batch holds image tokens (pixel_values / token_type_ids), which attend to each other both "
                    "ways inside their block in Gemma 3's multimodal model, while the keys a query may see are "
                    "taken as the causal ones of text: give text-only inputs")
        return None

    def window(self, model, site):
        cfg = _text(model.config)
        window = getattr(cfg, "sliding_window", None)
        if window is None or not _windowed(site.module):  # a config key the model's own masks never read
            return None
        types = getattr(cfg, "layer_types", None)
        if types is not None and types[site.layer] != "sliding_attention":
            return None
        return int(window) - 1

    def cache_layer_idx(self, site):
        return getattr(site.module, "layer_idx", site.layer)

    def prune_layer(self, site, keep_pos):
        module = site.module
        d = site.head_dim
        n_present = module.q_proj.out_features // (d * self.query_blocks)
        old_kv = self.site_kv_index(site, n_present).tolist()
        out_index = torch.tensor([i * d + j for i in keep_pos for j in range(d)], dtype=torch.long)
        new_out = slice_linear(module.o_proj, out_index, dim=1)
        q_index = self.query_rows(keep_pos, d)  # a gated attention's query rows hold each head's gate too
        if not keep_pos:
            self.empty_site(site, new_out, self.cache_layer_idx(site))
            # StarCoder2 drops out the attention's output while training: the empty layer's (its bias) too
            getattr(site.parent, site.attr).residual_dropout = float(getattr(module, "residual_dropout", 0.0))
            return
        kv_kept = sorted({old_kv[p] for p in keep_pos})
        kv_index = torch.tensor([kv_kept.index(old_kv[p]) for p in keep_pos], dtype=torch.long)
        kv_rows = torch.tensor([i * d + j for i in kv_kept for j in range(d)], dtype=torch.long)
        sinks = getattr(module, "sinks", None)
        if sinks is not None:  # gpt-oss: the kept query heads' sinks
            sinks = sinks.detach()[torch.tensor(keep_pos, dtype=torch.long, device=sinks.device)].requires_grad_(
                sinks.requires_grad)
        new = self.pruned_attention(
            module, keep_pos, slice_linear(module.q_proj, q_index, 0), slice_linear(module.k_proj, kv_rows, 0),
            slice_linear(module.v_proj, kv_rows, 0), new_out, kv_index, d, sinks=sinks,
            q_norm=_per_head_norm(head_norms_of(module)[0], list(keep_pos)),
            k_norm=_per_head_norm(head_norms_of(module)[1], kv_kept))
        new.train(module.training)
        setattr(site.parent, site.attr, new)

    def query_rows(self, keep_pos: list[int], head_dim: int) -> torch.Tensor:
        """The rows of ``q_proj`` that the present heads at ``keep_pos`` own: ``query_blocks`` blocks of ``head_dim``
        each, head by head (their query rows; in a gated attention their query rows, then their gate rows)."""
        n = head_dim * self.query_blocks
        return torch.tensor([i * n + j for i in keep_pos for j in range(n)], dtype=torch.long)

    def pruned_attention(self, original, keep_pos, q_proj, k_proj, v_proj, o_proj, kv_index, head_dim, **parts):
        """The module a pruned layer becomes (``keep_pos``: the kept heads' positions in ``original``): a
        :class:`GroupedQueryAttention` of the sliced projections; a family whose module is called otherwise (another
        keyword for the cache, a mask per head) returns its subclass."""
        return GroupedQueryAttention(original, q_proj, k_proj, v_proj, o_proj, kv_index, head_dim, **parts)

    def set_out_proj(self, site, new):
        site.module.o_proj = new

    def cost_shape(self, cfg):
        cfg = _text(cfg)
        return int(cfg.num_hidden_layers), int(cfg.num_attention_heads), int(cfg.hidden_size), int(cfg.intermediate_size)

    def cost_dims(self, cfg):
        cfg = _text(cfg)
        n_layers, n_heads, d_model, d_ffn = self.cost_shape(cfg)
        experts = getattr(cfg, "num_experts_per_tok", None)
        if experts:  # mixture of experts (Mixtral, Qwen3-MoE): the experts a token is routed to, each a gated MLP
            d_ffn = int(experts) * int(getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size)
            d_ffn += int(getattr(cfg, "shared_expert_intermediate_size", None) or 0)  # Qwen2-MoE: + a shared expert
        # StarCoder2 (c_fc, c_proj), Arcee, Apertus, nanochat: an MLP of two matrices (no gate)
        matrices = 2 if cfg.model_type in ("starcoder2", "arcee", "apertus", "nanochat") else 3
        return CostDims(n_layers, n_heads, self.kv_heads(cfg, None), head_dim_of(cfg), d_model, d_ffn,
                        ffn_matrices=matrices)


FAMILY = LlamaFamily()
