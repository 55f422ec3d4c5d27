"""An independent forward pass of every fixture family, written from the model's weights, with head ablations.

This is what the adapter tests compare against. It never calls the model's attention, layer or block modules
and sets no hooks: it reads their weights (``module.weight``, ``module.bias``) and recomputes the model from its
math, one head at a time. ``test_reference.py`` shows it equals Hugging Face's forward pass (logits and eager
attention probabilities) and HF's ``generate``. Nothing here imports headprune_utils.

Ablating a head mixes what it outputs (its context, ``[head_dim]`` per query position, the input of the output
projection; in a gated attention (Qwen3-Next, Qwen3.5) the attention's output times the head's output gate) with a
replacement, by a gate ``g`` (1 = the head as it is, 0 = fully ablated)::

    context_h  <-  g * context_h + (1 - g) * replacement_h

- ``"zero"``:    replacement 0 (equals removing the head from the output projection);
- ``"uniform"``: the head attends uniformly over the keys its query may SEE: padding excluded, and in causal
                 (and windowed) attention only the visible keys; i.e. the mean of those keys' value vectors
                 (a gated attention: times the head's output gate, which still applies);
- ``"mean"``:    a given per-head vector (``means[layer, head]``, e.g. :func:`head_means` over some data).

Shapes: probabilities ``[batch, heads, queries, keys]``; contexts ``[batch, queries, heads, head_dim]``.
Grids are keyed like the fixtures' ``grids``: ``None`` for one-grid models, ``"enc"`` / ``"dec"`` / ``"cross"``
for encoder-decoders.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

HOWS = ("zero", "uniform", "mean")


# ------------------------------------------------------------------------------------------------ ablations
@dataclass(frozen=True)
class Ablation:
    """Ablate heads of one grid. ``gates``: ``[n_layers, n_heads]``, 1 = untouched, 0 = fully ablated, values
    between mix (see the module docstring). ``means``: ``[n_layers, n_heads, head_dim]``, for ``how="mean"``."""

    how: str
    gates: torch.Tensor
    means: torch.Tensor | None = None

    def __post_init__(self):
        if self.how not in HOWS:
            raise ValueError(f"Ablation.how={self.how!r}: choose one of {HOWS}")
        if self.gates.dim() != 2:
            raise ValueError(f"Ablation.gates must be [n_layers, n_heads], got {tuple(self.gates.shape)}")
        if self.how == "mean" and (self.means is None or self.means.dim() != 3):
            raise ValueError('Ablation(how="mean") needs means [n_layers, n_heads, head_dim]')

    @staticmethod
    def heads(how: str, shape: tuple[int, int], heads: list[tuple[int, int]], means=None) -> "Ablation":
        """Fully ablate the listed ``(layer, head)`` pairs, keep the others."""
        gates = torch.ones(shape, dtype=torch.float64)
        for layer, head in heads:
            gates[layer, head] = 0.0
        return Ablation(how, gates, means)


@dataclass
class LayerTrace:
    """What one attention layer of one grid computed. ``visible``: ``[batch, queries, keys]`` the keys each query
    may see; ``probs``: the softmax probabilities (before any ablation); ``contexts``: each head's output
    (before ablation); ``mixed``: what entered the output projection (after ablation)."""

    visible: torch.Tensor
    probs: torch.Tensor
    contexts: torch.Tensor
    mixed: torch.Tensor


@dataclass
class Trace:
    """The reference forward: ``logits`` as the HF model class returns them, and per grid, per layer, a
    :class:`LayerTrace` (``trace.grids[kind][layer]``)."""

    logits: torch.Tensor
    grids: dict = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ one attention
def attend(q, k, v, visible, *, scale: float, bias=None, kv_of_query=None, ablation: Ablation | None = None,
           layer: int = 0, softcap: float | None = None, sinks=None, out_gate=None) -> LayerTrace:
    """Scaled dot-product attention of every head, then the ablation of ``layer``'s heads.

    q: ``[batch, heads, queries, head_dim]``; k, v: ``[batch, kv_heads, keys, head_dim]``;
    visible: ``[batch, queries, keys]`` bool; bias: ``[heads, queries, keys]`` added to the scores (T5) or None;
    kv_of_query: ``[heads]`` which key/value head each query head reads (default: even groups, head // group);
    softcap: the scaled scores become ``softcap * tanh(scores / softcap)`` (Gemma 2), before the bias and the mask;
    sinks: ``[heads]`` logits, one more column of each query's softmax, dropped after it (gpt-oss), or None;
    out_gate: ``[batch, heads, queries, head_dim]``, the sigmoid of each head's output gate (Qwen3-Next, Qwen3.5),
    or None: a head's context is then ``(probs @ v) * out_gate``, what enters the output projection. Its
    "uniform" replacement is ``(uniform @ v) * out_gate`` (the head attends uniformly, its gate still applies);
    "zero" is 0 and "mean" the given means (of the gated contexts, as :func:`head_means` takes them).
    """
    n_heads, n_kv = q.shape[1], k.shape[1]
    if ablation is not None and ablation.gates.shape[1] != n_heads:
        raise ValueError(f"Ablation.gates has {ablation.gates.shape[1]} heads per layer, the layer has {n_heads}")
    if kv_of_query is None:
        kv_of_query = torch.arange(n_heads) // (n_heads // n_kv)
    if not bool(visible.any(-1).all()):
        raise ValueError("a query position sees no key at all: its attention is undefined")
    k, v = k[:, kv_of_query], v[:, kv_of_query]  # each query head with its own key/value head
    scores = (q @ k.transpose(-1, -2)) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if bias is not None:
        scores = scores + bias
    scores = scores.masked_fill(~visible[:, None], float("-inf"))
    if sinks is None:
        probs = scores.softmax(-1)
    else:  # the sink takes its share of the normalisation and gives nothing back
        logits = torch.cat([scores, sinks.to(q.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)], dim=-1)
        probs = logits.softmax(-1)[..., :-1]
    contexts = probs @ v  # [batch, heads, queries, head_dim]
    if out_gate is not None:
        contexts = contexts * out_gate
    mixed = contexts
    if ablation is not None:
        g = ablation.gates[layer].to(q.dtype)[None, :, None, None]
        if ablation.how == "zero":
            replacement = torch.zeros_like(contexts)
        elif ablation.how == "uniform":
            uniform = visible.to(q.dtype) / visible.sum(-1, keepdim=True)  # [batch, queries, keys]
            replacement = uniform[:, None] @ v
            if out_gate is not None:  # the head attends uniformly; its output gate still applies
                replacement = replacement * out_gate
        else:
            replacement = ablation.means[layer].to(q.dtype)[None, :, None, :].expand_as(contexts)
        mixed = g * contexts + (1 - g) * replacement
    return LayerTrace(visible, probs, contexts.transpose(1, 2), mixed.transpose(1, 2))


def visible_keys(key_mask, n_queries: int, *, causal: bool, window: int | None = None) -> torch.Tensor:
    """``[batch, queries, keys]``: key j is visible from query i when it is not padding (``key_mask[b, j]``),
    j <= i if ``causal``, and |i - j| <= ``window`` if a window is given (queries and keys at the same positions
    for self-attention; cross-attention passes ``causal=False`` and no window)."""
    n_keys = key_mask.shape[1]
    i = torch.arange(n_queries)[:, None]
    j = torch.arange(n_keys)[None, :]
    allowed = torch.ones(n_queries, n_keys, dtype=torch.bool)
    if causal:
        allowed &= j <= i
    if window is not None:
        allowed &= (i - j).abs() <= window
    return allowed[None] & key_mask.bool()[:, None, :]


def split_heads(x, head_dim: int):
    """``[batch, seq, heads * head_dim]`` -> ``[batch, heads, seq, head_dim]``."""
    b, t, _ = x.shape
    return x.view(b, t, -1, head_dim).transpose(1, 2)


def merge(trace: LayerTrace):
    """The output projection's input: ``[batch, queries, heads * head_dim]``."""
    b, t, h, d = trace.mixed.shape
    return trace.mixed.reshape(b, t, h * d)


def _grid_ablation(ablations, kind):
    if ablations is None:
        return None
    if isinstance(ablations, Ablation):
        if kind is not None:
            raise ValueError("an encoder-decoder takes ablations as a dict by grid: 'enc', 'dec', 'cross'")
        return ablations
    unknown = set(ablations) - {None, *("enc", "dec", "cross")}
    if unknown:
        raise ValueError(f"unknown grid(s) {sorted(unknown, key=str)} in ablations")
    return ablations.get(kind)


# ------------------------------------------------------------------------------------------------ small pieces
def lin(x, module):
    """``module``'s affine map from its weights (``nn.Linear`` layout: weight ``[out, in]``)."""
    return F.linear(x, module.weight, module.bias)


def conv1d(x, module):
    """GPT-2's ``Conv1D``: weight ``[in, out]``."""
    return x @ module.weight + module.bias


def layer_norm(x, module, eps=None):
    eps = module.eps if eps is None else eps
    return F.layer_norm(x, x.shape[-1:], module.weight, module.bias, eps)


def rms_norm(x, weight, eps):
    """Llama's RMSNorm and T5's layer norm: no mean subtraction, no bias."""
    return weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def activation(name: str):
    table = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "swish": F.silu,
             "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
             "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"), "relu2": lambda x: F.relu(x) ** 2}
    if name not in table:
        raise ValueError(f"activation {name!r} is not in the reference's table {sorted(table)}")
    return table[name]


def rotary(x, positions, theta: float):
    """Rotary positions (the "rotate half" layout of Llama and ModernBERT): x ``[batch, heads, seq, head_dim]``,
    positions ``[seq]``. Dimension pair (i, i + d/2) rotates by the angle position * theta^(-2i/d)."""
    d = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # [seq, d/2]
    cos = torch.cat([angles.cos(), angles.cos()], -1).to(x.dtype)
    sin = torch.cat([angles.sin(), angles.sin()], -1).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def rotary_interleaved(x, positions, theta: float):
    """Rotary in Cohere's layout: dimension pair (2i, 2i + 1) rotates by the angle position * theta^(-2i/d)."""
    d = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = (positions.to(torch.float64)[:, None] * inv_freq[None, :]).to(x.dtype)  # [seq, d/2]
    even, odd = x[..., 0::2], x[..., 1::2]
    c, s = angles.cos(), angles.sin()
    return torch.stack([even * c - odd * s, odd * c + even * s], dim=-1).flatten(-2)


# ------------------------------------------------------------------------------------------------ BERT, RoBERTa
def _bert_like(model, inputs, ablations) -> Trace:
    cfg = model.config
    base = model.base_model
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    emb = base.embeddings
    if cfg.model_type == "roberta":  # positions count real tokens, starting after the padding index
        real = (ids != cfg.pad_token_id).long()
        positions = torch.cumsum(real, 1) * real + cfg.pad_token_id
    else:
        positions = torch.arange(ids.shape[1])[None].expand_as(ids)
    token_types = inputs.get("token_type_ids", torch.zeros_like(ids))
    h = emb.word_embeddings.weight[ids] + emb.token_type_embeddings.weight[token_types] \
        + emb.position_embeddings.weight[positions]
    h = layer_norm(h, emb.LayerNorm)
    d = cfg.hidden_size // cfg.num_attention_heads
    act = activation(cfg.hidden_act)
    ablation = _grid_ablation(ablations, None)
    layers = []
    for i, layer in enumerate(base.encoder.layer):
        sa = layer.attention.self
        vis = visible_keys(mask, ids.shape[1], causal=False)
        t = attend(split_heads(lin(h, sa.query), d), split_heads(lin(h, sa.key), d), split_heads(lin(h, sa.value), d),
                   vis, scale=d ** -0.5, ablation=ablation, layer=i)
        layers.append(t)
        h = layer_norm(lin(merge(t), layer.attention.output.dense) + h, layer.attention.output.LayerNorm)
        h = layer_norm(lin(act(lin(h, layer.intermediate.dense)), layer.output.dense) + h, layer.output.LayerNorm)
    if cfg.model_type == "roberta":
        head = model.classifier
        logits = lin(torch.tanh(lin(h[:, 0], head.dense)), head.out_proj)
    else:
        logits = lin(torch.tanh(lin(h[:, 0], base.pooler.dense)), model.classifier)
    return Trace(logits, {None: layers})


# ------------------------------------------------------------------------------------------------ DistilBERT
def _distilbert(model, inputs, ablations) -> Trace:
    cfg = model.config
    base = model.distilbert
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    h = base.embeddings.word_embeddings.weight[ids] + base.embeddings.position_embeddings.weight[:ids.shape[1]]
    h = layer_norm(h, base.embeddings.LayerNorm)
    d = cfg.dim // cfg.n_heads
    act = activation(cfg.activation)
    ablation = _grid_ablation(ablations, None)
    layers = []
    for i, layer in enumerate(base.transformer.layer):
        a = layer.attention
        t = attend(split_heads(lin(h, a.q_lin), d), split_heads(lin(h, a.k_lin), d), split_heads(lin(h, a.v_lin), d),
                   visible_keys(mask, ids.shape[1], causal=False), scale=d ** -0.5, ablation=ablation, layer=i)
        layers.append(t)
        h = layer_norm(lin(merge(t), a.out_lin) + h, layer.sa_layer_norm)
        h = layer_norm(lin(act(lin(h, layer.ffn.lin1)), layer.ffn.lin2) + h, layer.output_layer_norm)
    logits = lin(F.relu(lin(h[:, 0], model.pre_classifier)), model.classifier)
    return Trace(logits, {None: layers})


# ------------------------------------------------------------------------------------------------ BART, Marian
def _bart_attention(x, source, attn, vis, d, ablation, layer):
    """BART/Marian attention from ``x`` (queries) to ``source`` (keys/values); returns (out_proj output, trace)."""
    t = attend(split_heads(lin(x, attn.q_proj), d), split_heads(lin(source, attn.k_proj), d),
               split_heads(lin(source, attn.v_proj), d), vis, scale=d ** -0.5, ablation=ablation, layer=layer)
    return lin(merge(t), attn.out_proj), t


def _bart_embed(stack, ids, cfg):
    scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
    positions = torch.arange(ids.shape[1])
    if cfg.model_type == "bart":  # learned positions, offset by 2; a layer norm on the embeddings
        h = stack.embed_tokens.weight[ids] * scale + stack.embed_positions.weight[positions + 2]
        return layer_norm(h, stack.layernorm_embedding)
    return stack.embed_tokens.weight[ids] * scale + stack.embed_positions.weight[positions]  # Marian: sinusoidal


def _bart_like(model, inputs, ablations) -> Trace:
    cfg = model.config
    ids, mask, dec_ids = inputs["input_ids"], inputs["attention_mask"], inputs["decoder_input_ids"]
    dec_mask = inputs.get("decoder_attention_mask", torch.ones_like(dec_ids))
    enc, dec = model.model.encoder, model.model.decoder
    act = activation(cfg.activation_function)
    d = cfg.d_model // cfg.encoder_attention_heads
    grids = {"enc": [], "dec": [], "cross": []}

    h = _bart_embed(enc, ids, cfg)
    for i, layer in enumerate(enc.layers):  # post-norm: norm(x + sublayer(x))
        out, t = _bart_attention(h, h, layer.self_attn, visible_keys(mask, ids.shape[1], causal=False), d,
                                 _grid_ablation(ablations, "enc"), i)
        grids["enc"].append(t)
        h = layer_norm(h + out, layer.self_attn_layer_norm)
        h = layer_norm(h + lin(act(lin(h, layer.fc1)), layer.fc2), layer.final_layer_norm)
    memory = h

    d = cfg.d_model // cfg.decoder_attention_heads
    h = _bart_embed(dec, dec_ids, cfg)
    for i, layer in enumerate(dec.layers):
        out, t = _bart_attention(h, h, layer.self_attn, visible_keys(dec_mask, dec_ids.shape[1], causal=True), d,
                                 _grid_ablation(ablations, "dec"), i)
        grids["dec"].append(t)
        h = layer_norm(h + out, layer.self_attn_layer_norm)
        out, t = _bart_attention(h, memory, layer.encoder_attn, visible_keys(mask, dec_ids.shape[1], causal=False),
                                 d, _grid_ablation(ablations, "cross"), i)
        grids["cross"].append(t)
        h = layer_norm(h + out, layer.encoder_attn_layer_norm)
        h = layer_norm(h + lin(act(lin(h, layer.fc1)), layer.fc2), layer.final_layer_norm)
    logits = F.linear(h, model.lm_head.weight) + model.final_logits_bias
    return Trace(logits, grids)


# ------------------------------------------------------------------------------------------------ GPT-2
def _gpt2(model, inputs, ablations) -> Trace:
    cfg = model.config
    tr = model.transformer
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    n, D = ids.shape[1], cfg.n_embd
    d = D // cfg.n_head
    h = tr.wte.weight[ids] + tr.wpe.weight[torch.arange(n)]
    act = activation(cfg.activation_function)
    ablation = _grid_ablation(ablations, None)
    layers = []
    for i, block in enumerate(tr.h):
        x = layer_norm(h, block.ln_1)
        qkv = conv1d(x, block.attn.c_attn)  # [batch, seq, 3 * D]: q | k | v, each heads side by side
        q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]
        scale = d ** -0.5 if cfg.scale_attn_weights else 1.0
        if cfg.scale_attn_by_inverse_layer_idx:
            scale /= i + 1
        t = attend(split_heads(q, d), split_heads(k, d), split_heads(v, d), visible_keys(mask, n, causal=True),
                   scale=scale, ablation=ablation, layer=i)
        layers.append(t)
        h = h + conv1d(merge(t), block.attn.c_proj)
        h = h + conv1d(act(conv1d(layer_norm(h, block.ln_2), block.mlp.c_fc)), block.mlp.c_proj)
    h = layer_norm(h, tr.ln_f)
    return Trace(F.linear(h, model.lm_head.weight), {None: layers})


# ------------------------------------------------------------------------------------------------ OPT
def _opt(model, inputs, ablations) -> Trace:
    cfg = model.config
    dec = model.model.decoder
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    n = ids.shape[1]
    d = cfg.hidden_size // cfg.num_attention_heads
    positions = torch.cumsum(mask, 1) * mask - 1  # the real tokens counted from 0 (padding: -1), then offset by 2
    h = dec.embed_tokens.weight[ids]
    if dec.project_in is not None:  # embeddings narrower than the layers (word_embed_proj_dim)
        h = F.linear(h, dec.project_in.weight)
    h = h + dec.embed_positions.weight[positions + 2]
    act = activation(cfg.activation_function)
    pre = cfg.do_layer_norm_before
    ablation = _grid_ablation(ablations, None)
    layers = []
    for i, layer in enumerate(dec.layers):
        a = layer.self_attn
        x = layer_norm(h, layer.self_attn_layer_norm) if pre else h
        t = attend(split_heads(lin(x, a.q_proj), d), split_heads(lin(x, a.k_proj), d), split_heads(lin(x, a.v_proj), d),
                   visible_keys(mask, n, causal=True), scale=d ** -0.5, ablation=ablation, layer=i)
        layers.append(t)
        h = h + lin(merge(t), a.out_proj)
        if not pre:  # OPT-350m: the norms after each block
            h = layer_norm(h, layer.self_attn_layer_norm)
        x = layer_norm(h, layer.final_layer_norm) if pre else h
        h = h + lin(act(lin(x, layer.fc1)), layer.fc2)
        if not pre:
            h = layer_norm(h, layer.final_layer_norm)
    if dec.final_layer_norm is not None:
        h = layer_norm(h, dec.final_layer_norm)
    if dec.project_out is not None:
        h = F.linear(h, dec.project_out.weight)
    return Trace(F.linear(h, model.lm_head.weight), {None: layers})


# ------------------------------------------------------------------------------------------------ GPT-NeoX
def partial_rotary(x, positions, theta: float, n_rotary: int):
    """Rotary on the first ``n_rotary`` dims of each head (GPT-NeoX, Pythia), the rest passed through; the angles
    of dimension pair (i, i + n_rotary/2) are position * theta^(-2i/n_rotary)."""
    return torch.cat([rotary(x[..., :n_rotary], positions, theta), x[..., n_rotary:]], -1)


def _gpt_neox(model, inputs, ablations) -> Trace:
    cfg = model.config
    base = model.gpt_neox
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    b, n = ids.shape
    H = cfg.num_attention_heads
    d = cfg.hidden_size // H
    rope = cfg.rope_parameters
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type {rope['rope_type']!r}: the reference does default rotary only")
    n_rot, theta = int(d * rope.get("partial_rotary_factor", 1.0)), rope["rope_theta"]
    positions = torch.arange(n)
    act = activation(cfg.hidden_act)
    ablation = _grid_ablation(ablations, None)
    h = base.embed_in.weight[ids]
    layers = []
    for i, layer in enumerate(base.layers):
        a = layer.attention
        x = layer_norm(h, layer.input_layernorm)
        qkv = lin(x, a.query_key_value).view(b, n, H, 3, d)  # head by head: each head's q | k | v, head_dim each
        q, k, v = (qkv[:, :, :, j].transpose(1, 2) for j in range(3))
        t = attend(partial_rotary(q, positions, theta, n_rot), partial_rotary(k, positions, theta, n_rot), v,
                   visible_keys(mask, n, causal=True), scale=d ** -0.5, ablation=ablation, layer=i)
        layers.append(t)
        attn_out = lin(merge(t), a.dense)
        mlp = lambda y: lin(act(lin(y, layer.mlp.dense_h_to_4h)), layer.mlp.dense_4h_to_h)
        if cfg.use_parallel_residual:  # x + attn(ln1(x)) + mlp(ln2(x))
            h = h + attn_out + mlp(layer_norm(h, layer.post_attention_layernorm))
        else:
            h = h + attn_out
            h = h + mlp(layer_norm(h, layer.post_attention_layernorm))
    h = layer_norm(h, base.final_layer_norm)
    return Trace(F.linear(h, model.lm_head.weight), {None: layers})


# ------------------------------------------------------------------------------------------------ Llama family
@dataclass
class LlamaHeads:
    """One Llama-family attention layer's weights, head by head: ``q``: ``[n_heads * d, hidden]`` (and bias),
    ``k``, ``v``: ``[n_kv * d, hidden]``, ``o``: ``[hidden, n_heads * d]``; ``kv_of_query[h]``: which key/value
    head query head ``h`` reads; ``q_gate``: a gated attention's output-gate rows ``[n_heads * d, hidden]`` (and
    bias; head h's context is multiplied by ``sigmoid(q_gate_h x)`` before ``o``), else None. A physically pruned
    layer is the same with fewer rows/columns (see :func:`prune_llama_heads`); ``n_heads`` may be 0 (the layer then
    adds ``o_bias`` or nothing)."""

    q: torch.Tensor
    q_bias: torch.Tensor | None
    k: torch.Tensor
    k_bias: torch.Tensor | None
    v: torch.Tensor
    v_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    kv_of_query: torch.Tensor
    head_dim: int
    q_norm: torch.Tensor | None = None  # Qwen3: an RMSNorm weight [head_dim] over each query head, shared by all
    k_norm: torch.Tensor | None = None  # ... and over each key head
    norm_eps: float = 0.0
    sinks: torch.Tensor | None = None  # gpt-oss: one sink logit per query head
    q_gate: torch.Tensor | None = None  # Qwen3-Next, Qwen3.5: each head's output-gate rows, in q's head order
    q_gate_bias: torch.Tensor | None = None

    @property
    def n_heads(self) -> int:
        return len(self.kv_of_query)


# the attention of these model types has an output gate: q_proj holds each head's query rows and its gate rows
GATED_ATTENTION = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")


def llama_heads(model) -> list[LlamaHeads]:
    """Each layer's :class:`LlamaHeads`, read from the model (even groups: head h reads kv head h // group)."""
    cfg = model.config
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    group = cfg.num_attention_heads // cfg.num_key_value_heads
    out = []
    for layer in model.model.layers:
        a = getattr(layer, "self_attn", None)
        if a is None and getattr(layer, "block_type", None) == "full_attention":  # Nemotron-H: one mixer per layer
            a = layer.mixer
        if a is None:  # a hybrid's Mamba layer: no heads (the heads' list is the attention layers')
            continue
        qn, kn = getattr(a, "q_norm", None), getattr(a, "k_norm", None)
        if qn is None:  # Hunyuan's names
            qn, kn = getattr(a, "query_layernorm", None), getattr(a, "key_layernorm", None)
        if qn is None and getattr(a, "qk_layernorm", False):  # StableLM: one LayerNorm per head -> rows [heads, d]
            qn, kn = (type("PerHead", (), {"weight": torch.stack([m.weight for m in ln.norms])})()
                      for ln in (a.q_layernorm, a.k_layernorm))
        if qn is not None and getattr(qn, "weight", None) is None:  # nanochat: RMSNorms without a weight
            qn = kn = type("Unweighted", (), {"weight": torch.ones(d, dtype=a.q_proj.weight.dtype)})()
        if cfg.model_type in GATED_ATTENTION:  # q_proj's rows head by head: head h's d query rows, then its d
            rows = a.q_proj.weight.view(cfg.num_attention_heads, 2, d, -1)  # output-gate rows ([h*2d, (h+1)*2d))
            q_w, gate_w = rows[:, 0].flatten(0, 1), rows[:, 1].flatten(0, 1)
            q_b = gate_b = None
            if a.q_proj.bias is not None:
                q_b, gate_b = a.q_proj.bias.view(cfg.num_attention_heads, 2, d).unbind(1)
                q_b, gate_b = q_b.flatten(), gate_b.flatten()
            out.append(LlamaHeads(q_w, q_b, a.k_proj.weight, a.k_proj.bias, a.v_proj.weight, a.v_proj.bias,
                                  a.o_proj.weight, a.o_proj.bias, torch.arange(cfg.num_attention_heads) // group, d,
                                  qn.weight, kn.weight, cfg.rms_norm_eps, None, gate_w, gate_b))
            continue
        if hasattr(a, "qkv_proj"):  # Phi-3: one projection, rows: the query heads, the keys, the values
            w, q_w, kv_w = a.qkv_proj.weight, cfg.num_attention_heads * d, cfg.num_key_value_heads * d
            out.append(LlamaHeads(w[:q_w], None, w[q_w:q_w + kv_w], None, w[q_w + kv_w:], None, a.o_proj.weight,
                                  a.o_proj.bias, torch.arange(cfg.num_attention_heads) // group, d))
            continue
        out.append(LlamaHeads(a.q_proj.weight, a.q_proj.bias, a.k_proj.weight, a.k_proj.bias, a.v_proj.weight,
                              a.v_proj.bias, a.o_proj.weight, a.o_proj.bias,
                              torch.arange(cfg.num_attention_heads) // group, d,
                              None if qn is None else qn.weight, None if kn is None else kn.weight,
                              getattr(cfg, "rms_norm_eps", None) or getattr(cfg, "layer_norm_eps", 0.0),
                              getattr(a, "sinks", None)))
    return out


def prune_llama_heads(heads: LlamaHeads, keep: list[int]) -> LlamaHeads:
    """The layer with only query heads ``keep`` (ids into ``heads``): their rows of q and columns of o; key/value
    heads that no kept query head reads are removed, the others renumbered. Groups may end up uneven."""
    d = heads.head_dim
    keep = sorted(keep)
    kv_kept = sorted({int(heads.kv_of_query[h]) for h in keep})

    def rows(ids):  # the weight rows of heads ``ids``
        return torch.tensor([i * d + j for i in ids for j in range(d)], dtype=torch.long)

    def pick(t, r):
        return None if t is None else t[r]

    q_rows, kv_rows = rows(keep), rows(kv_kept)

    def norm_rows(weight, ids):  # Cohere: a weight row per head; Qwen3, Gemma 3: one row shared by the heads
        return weight if weight is None or weight.dim() == 1 else weight[torch.tensor(ids, dtype=torch.long)]

    return LlamaHeads(
        heads.q[q_rows], pick(heads.q_bias, q_rows), heads.k[kv_rows], pick(heads.k_bias, kv_rows),
        heads.v[kv_rows], pick(heads.v_bias, kv_rows), heads.o[:, q_rows], heads.o_bias,
        torch.tensor([kv_kept.index(int(heads.kv_of_query[h])) for h in keep], dtype=torch.long), d,
        norm_rows(heads.q_norm, keep), norm_rows(heads.k_norm, kv_kept), heads.norm_eps,
        None if heads.sinks is None else heads.sinks[torch.tensor(keep, dtype=torch.long)],  # a sink per query head
        pick(heads.q_gate, q_rows), pick(heads.q_gate_bias, q_rows))  # the kept heads' output-gate rows


def _llama_window(cfg, layer: int) -> int | None:
    """The largest distance a query may look back in ``layer`` (None: no window). Mistral: every layer;
    Qwen2: the layers its ``layer_types`` mark "sliding_attention"."""
    window = getattr(cfg, "sliding_window", None)
    if window is None:
        return None
    types = getattr(cfg, "layer_types", None)
    if types is not None and types[layer] != "sliding_attention":
        return None
    return window - 1  # HF: key j visible from query i when j > i - sliding_window


def moe(x, m, cfg, act):
    """A sparse mixture of experts (Mixtral, Qwen3-MoE, Qwen3-Next, Qwen3.5-MoE): each token's router softmax over the
    experts, its top ``num_experts_per_tok`` (their weights renormalised to sum 1 in Mixtral and Qwen3.5-MoE, and in
    Qwen2/3-MoE and Qwen3-Next when ``norm_topk_prob``), each expert a gated MLP ``down(act(gate(x)) * up(x))`` from
    the stacked expert weights; Qwen2-MoE, Qwen3-Next and Qwen3.5-MoE add a shared expert."""
    logits = F.linear(x, m.gate.weight)
    top_p, top_i = logits.softmax(-1).topk(cfg.num_experts_per_tok, dim=-1)
    if cfg.model_type in ("mixtral", "qwen3_5_moe_text") or getattr(cfg, "norm_topk_prob", False):
        top_p = top_p / top_p.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(m.gate.weight.shape[0]):
        weight = (top_p * (top_i == e)).sum(-1, keepdim=True)  # 0 where the token is not routed to expert e
        gate, up = F.linear(x, m.experts.gate_up_proj[e]).chunk(2, dim=-1)
        out = out + weight * F.linear(act(gate) * up, m.experts.down_proj[e])
    if hasattr(m, "shared_expert"):  # Qwen2-MoE: a gated MLP every token takes, weighted by sigmoid(gate . x)
        s = m.shared_expert
        shared = lin(act(lin(x, s.gate_proj)) * lin(x, s.up_proj), s.down_proj)
        out = out + torch.sigmoid(F.linear(x, m.shared_expert_gate.weight)) * shared
    return out


def gpt_oss_moe(x, m, cfg):
    """gpt-oss's mixture of experts: router logits ``x W^T + b``; a softmax over each token's top
    ``num_experts_per_tok`` logits; expert ``e``: ``gate_up = x @ G_e + g_e`` (gate and up interleaved: even and odd
    columns), gate clamped above at ``swiglu_limit``, up to ``[-limit, limit]``, ``(up + 1) * gate * sigmoid(alpha *
    gate) @ D_e + d_e``."""
    logits = F.linear(x, m.router.weight, m.router.bias)
    top_v, top_i = logits.topk(cfg.num_experts_per_tok, dim=-1)
    top_p = top_v.softmax(-1)
    e_ = m.experts
    out = torch.zeros_like(x)
    for e in range(m.router.weight.shape[0]):
        weight = (top_p * (top_i == e)).sum(-1, keepdim=True)
        gate_up = x @ e_.gate_up_proj[e] + e_.gate_up_proj_bias[e]
        gate, up = gate_up[..., 0::2].clamp(max=cfg.swiglu_limit), gate_up[..., 1::2].clamp(-cfg.swiglu_limit,
                                                                                            cfg.swiglu_limit)
        hidden = (up + 1) * gate * torch.sigmoid(gate * cfg.swiglu_alpha)
        out = out + weight * (hidden @ e_.down_proj[e] + e_.down_proj_bias[e])
    return out


def xielu(x, act):
    """Apertus's xIELU activation from its module's parameters: ``a_p x^2 + b x`` for x > 0, else
    ``a_n (expm1(min(x, eps)) - x) + b x``, with ``a_p = softplus(alpha_p)``, ``a_n = b + softplus(alpha_n)``."""
    a_p, a_n = F.softplus(act.alpha_p), act._beta_scalar + F.softplus(act.alpha_n)
    b, eps = act._beta_scalar, act._eps_scalar
    return torch.where(x > 0, a_p * x * x + b * x, (torch.expm1(torch.clamp(x, max=eps)) - x) * a_n + b * x)


def _llama_like(model, inputs, ablations, heads: list[LlamaHeads] | None = None) -> Trace:
    """Llama and its relatives. Besides the plain layer (pre-norm, rotary, gated MLP), per model type: Qwen3 / Apertus
    / EXAONE 4 RMS-norm each query and key head before rotary, Hunyuan and nanochat after it; EXAONE 4 has no norm
    before its blocks but RMSNorms after the attention and the MLP, and (with a sliding window) no positions in its
    global layers; GLM and GLM-4 rotate interleaved pairs of the first half of each head, GLM-4 with sandwich norms;
    nanochat has norms without weights (one more right after the embedding), rotates by minus the
    angle (its rotate-half is the mirror of Llama's), a plain relu^2 MLP (as Arcee; Apertus: xIELU) and soft-capped
    logits."""
    cfg = model.config
    if cfg.rope_parameters.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type {cfg.rope_parameters['rope_type']!r}: the reference does default rotary only")
    theta = cfg.rope_parameters["rope_theta"]
    heads = llama_heads(model) if heads is None else heads
    partial = cfg.rope_parameters.get("partial_rotary_factor", 1.0)  # Phi-3 / Phi-4-mini: rotary on part of a head
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    n = ids.shape[1]
    positions = torch.arange(n)
    act = None if cfg.hidden_act == "xielu" else activation(cfg.hidden_act)  # Apertus: xIELU, from its module
    ablation = _grid_ablation(ablations, None)
    starcoder2 = cfg.model_type == "starcoder2"  # layer norms with biases, a plain MLP
    stablelm = cfg.model_type == "stablelm"  # layer norms with biases; per-head layer norms; maybe parallel
    exaone4 = cfg.model_type == "exaone4"  # norms after the blocks, not before
    nanochat = cfg.model_type == "nanochat"
    after_rope = cfg.model_type in ("hunyuan_v1_dense", "nanochat")  # head norms after rotary
    # StarCoder2: LayerNorm (weight, bias, norm_epsilon); nanochat: RMSNorm without weight; the others: RMSNorm
    norm = ((lambda y, m: layer_norm(y, m)) if starcoder2 or stablelm else
            (lambda y, m: rms_norm(y, 1.0, cfg.rms_norm_eps)) if nanochat else
            (lambda y, m: rms_norm(y, m.weight, cfg.rms_norm_eps)))
    granite = cfg.model_type == "granite"  # multipliers of the embeddings, the scores, each residual branch, the logits
    h = model.model.embed_tokens.weight[ids] * (cfg.embedding_multiplier if granite else 1.0)
    if nanochat:  # a norm right after the embedding
        h = norm(h, None)
    branch = cfg.residual_multiplier if granite else 1.0
    layers = []
    for i, (layer, w) in enumerate(zip(model.model.layers, heads)):
        # Apertus names its norms attention_layernorm and feedforward_layernorm
        pre_attn = layer.attention_layernorm if hasattr(layer, "attention_layernorm") else getattr(
            layer, "input_layernorm", None)
        pre_mlp = layer.feedforward_layernorm if hasattr(layer, "feedforward_layernorm") else getattr(
            layer, "post_attention_layernorm", None)
        x = h if exaone4 else norm(h, pre_attn)
        vis = visible_keys(mask, n, causal=True, window=_llama_window(cfg, i))
        use_rope = bool(cfg.no_rope_layers[i]) if cfg.model_type == "smollm3" else True  # SmolLM3's NoPE layers
        if exaone4 and cfg.sliding_window is not None:  # EXAONE 4: rotary in the sliding layers only
            use_rope = cfg.layer_types[i] == "sliding_attention"
        if w.n_heads == 0:
            layers.append(None)
            attn_out = torch.zeros_like(h) if w.o_bias is None else w.o_bias.expand_as(h)
        else:
            d = w.head_dim
            q, k = split_heads(F.linear(x, w.q, w.q_bias), d), split_heads(F.linear(x, w.k, w.k_bias), d)
            if w.q_norm is not None and stablelm:  # a layer norm (no bias) per head, weights [heads, d]
                q, k = (F.layer_norm(t, (d,), None, None, w.norm_eps) * wt[:, None, :]
                        for t, wt in ((q, w.q_norm), (k, w.k_norm)))
            elif w.q_norm is not None and not after_rope:  # Qwen3: each head's query and key RMS-normed over head_dim
                q, k = rms_norm(q, w.q_norm, w.norm_eps), rms_norm(k, w.k_norm, w.norm_eps)
            n_rot = int(d * partial)
            if use_rope and cfg.model_type in ("helium", "ernie4_5"):  # interleaved pairs (2i, 2i + 1)
                q, k = rotary_interleaved(q, positions, theta), rotary_interleaved(k, positions, theta)
            elif use_rope and cfg.model_type in ("glm", "glm4"):  # interleaved pairs of the first n_rot dims
                q, k = (torch.cat([rotary_interleaved(t[..., :n_rot], positions, theta), t[..., n_rot:]], -1)
                        for t in (q, k))
            elif use_rope:  # nanochat rotates by minus the angle
                p = -positions if nanochat else positions
                q, k = partial_rotary(q, p, theta, n_rot), partial_rotary(k, p, theta, n_rot)
            if w.q_norm is not None and after_rope:  # Hunyuan, nanochat: the head norms after rotary
                q, k = rms_norm(q, w.q_norm, w.norm_eps), rms_norm(k, w.k_norm, w.norm_eps)
            v = split_heads(F.linear(x, w.v, w.v_bias), d)
            scale = cfg.attention_multiplier if granite else d ** -0.5
            t = attend(q, k, v, vis, scale=scale, kv_of_query=w.kv_of_query, ablation=ablation, layer=i,
                       sinks=w.sinks)
            layers.append(t)
            attn_out = F.linear(merge(t), w.o, w.o_bias)
        if exaone4:  # the attention's and the MLP's outputs normed before each residual sum
            h = h + norm(attn_out, layer.post_attention_layernorm)
            m = layer.mlp
            h = h + norm(lin(act(lin(h, m.gate_proj)) * lin(h, m.up_proj), m.down_proj), layer.post_feedforward_layernorm)
            continue
        if cfg.model_type == "glm4":  # sandwich norms: after the attention and after the MLP as well
            h = h + norm(attn_out, layer.post_self_attn_layernorm)
            m = layer.mlp
            gate, up = lin(norm(h, layer.post_attention_layernorm), m.gate_up_proj).chunk(2, dim=-1)
            h = h + norm(lin(act(gate) * up, m.down_proj), layer.post_mlp_layernorm)
            continue
        if stablelm and cfg.use_parallel_residual:  # the attention and the MLP both read the first norm
            m = layer.mlp
            h = h + attn_out + lin(act(lin(x, m.gate_proj)) * lin(x, m.up_proj), m.down_proj)
            continue
        h = h + attn_out * branch
        x = norm(h, pre_mlp)
        m = layer.mlp
        if nanochat:  # fc1, relu^2, fc2
            h = h + lin(act(lin(x, m.fc1)), m.fc2)
        elif not hasattr(m, "gate_proj") and hasattr(m, "up_proj"):  # Arcee (relu^2), Apertus (xIELU): no gate
            f = (lambda y: xielu(y, m.act_fn)) if cfg.hidden_act == "xielu" else act
            h = h + lin(f(lin(x, m.up_proj)), m.down_proj)
        elif starcoder2:
            h = h + lin(act(lin(x, m.c_fc)), m.c_proj)
        elif hasattr(m, "router"):  # gpt-oss: biased experts, clamped SwiGLU
            h = h + gpt_oss_moe(x, m, cfg)
        elif hasattr(m, "experts"):  # Mixtral, Qwen3-MoE: a sparse mixture of experts
            h = h + moe(x, m, cfg, act)
        elif hasattr(m, "gate_up_proj"):  # Phi-3: gate and up in one projection, gate first
            gate, up = lin(x, m.gate_up_proj).chunk(2, dim=-1)
            h = h + lin(act(gate) * up, m.down_proj)
        else:
            h = h + lin(act(lin(x, m.gate_proj)) * lin(x, m.up_proj), m.down_proj) * branch
    h = norm(h, model.model.norm)
    logits = F.linear(h, model.lm_head.weight)
    if nanochat and cfg.final_logit_softcapping is not None:
        logits = cfg.final_logit_softcapping * torch.tanh(logits / cfg.final_logit_softcapping)
    return Trace(logits / cfg.logits_scaling if granite else logits, {None: layers})


# ------------------------------------------------------------------------------------------------ Cohere
def _cohere_like(model, inputs, ablations, heads: list[LlamaHeads] | None = None) -> Trace:
    """Cohere (Command R) and Cohere 2: one bias-free layer norm before each layer, whose attention and MLP both read
    it (parallel residual); with ``use_qk_norm``, each query and key head layer-normed over head_dim with weights of its
    own (``[heads, head_dim]``); rotary on interleaved pairs (Cohere 2: only in its sliding-window layers, the global
    ones without positions); gated SiLU MLP; logits scaled by ``logit_scale``."""
    cfg = model.config
    cohere2 = cfg.model_type == "cohere2"
    heads = llama_heads(model) if heads is None else heads
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    n = ids.shape[1]
    positions = torch.arange(n)
    theta = cfg.rope_parameters["rope_theta"]
    act = activation(cfg.hidden_act)
    ablation = _grid_ablation(ablations, None)

    def ln(y, weight):  # mean-subtracting, no bias; weight broadcast over the last dims
        y = y - y.mean(-1, keepdim=True)
        return weight * y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + cfg.layer_norm_eps)

    h = model.model.embed_tokens.weight[ids]
    layers = []
    for i, (layer, w) in enumerate(zip(model.model.layers, heads)):
        sliding = cohere2 and cfg.layer_types[i] == "sliding_attention"
        window = cfg.sliding_window - 1 if sliding else None
        x = ln(h, layer.input_layernorm.weight)
        if w.n_heads == 0:
            layers.append(None)
            attn_out = torch.zeros_like(h) if w.o_bias is None else w.o_bias.expand_as(h)
        else:
            d = w.head_dim
            b = x.shape[0]
            q = F.linear(x, w.q, w.q_bias).view(b, n, -1, d)  # [batch, seq, heads, d]
            k = F.linear(x, w.k, w.k_bias).view(b, n, -1, d)
            if w.q_norm is not None:  # per-head weights [heads, d] (the kept heads' rows after pruning)
                q, k = ln(q, w.q_norm), ln(k, w.k_norm)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            if sliding or not cohere2:
                q, k = rotary_interleaved(q, positions, theta), rotary_interleaved(k, positions, theta)
            v = split_heads(F.linear(x, w.v, w.v_bias), d)
            t = attend(q, k, v, visible_keys(mask, n, causal=True, window=window), scale=d ** -0.5,
                       kv_of_query=w.kv_of_query, ablation=ablation, layer=i)
            layers.append(t)
            attn_out = F.linear(merge(t), w.o, w.o_bias)
        m = layer.mlp
        h = h + attn_out + lin(act(lin(x, m.gate_proj)) * lin(x, m.up_proj), m.down_proj)
    h = ln(h, model.model.norm.weight)
    return Trace(F.linear(h, model.lm_head.weight) * cfg.logit_scale, {None: layers})


# ------------------------------------------------------------------------------------------------ Llama 4
def llama4_moe(x, m, act):
    """Llama 4's mixture of experts: router logits ``x R^T``; each token's top ``k`` experts, weighted by the sigmoid
    of their logits, take ``x * weight`` as input (the weight applied BEFORE the expert); expert ``e``:
    ``(up * act(gate)) @ D_e`` with ``[gate | up] = x @ GU_e``; plus a shared gated MLP every token takes."""
    logits = F.linear(x, m.router.weight)
    top_v, top_i = logits.topk(m.router.top_k, dim=-1)
    out = torch.zeros_like(x)
    for e in range(logits.shape[-1]):
        weight = (torch.sigmoid(top_v) * (top_i == e)).sum(-1, keepdim=True)  # 0 where not routed to e
        gate, up = ((x * weight) @ m.experts.gate_up_proj[e]).chunk(2, dim=-1)
        out = out + (up * act(gate)) @ m.experts.down_proj[e]
    s = m.shared_expert
    return out + lin(act(lin(x, s.gate_proj)) * lin(x, s.up_proj), s.down_proj)


def _llama4(model, inputs, ablations, heads: list[LlamaHeads] | None = None) -> Trace:
    """Llama 4's text model. Rotary layers (``no_rope_layers[i]`` = 1): rotary on interleaved pairs, then (with
    ``use_qk_norm``) an RMS norm without weight over each query and key head, and with ``attention_chunk_size``
    chunked attention (a query sees the earlier keys of its own chunk, chunks counted from the row's first real
    token). NoPE layers: no rotary, no norm, every earlier
    key, and (``attn_temperature_tuning``) queries times ``1 + attn_scale * log(1 + floor((p + 1) / floor_scale))``.
    RMSNorms before the blocks; a gated MLP or (``moe_layers``) a mixture of experts."""
    cfg = model.config
    if cfg.rope_parameters.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type {cfg.rope_parameters['rope_type']!r}: the reference does default rotary only")
    theta = cfg.rope_parameters["rope_theta"]
    heads = llama_heads(model) if heads is None else heads
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    n = ids.shape[1]
    positions = torch.arange(n)
    act = activation(cfg.hidden_act)
    ablation = _grid_ablation(ablations, None)
    eps = cfg.rms_norm_eps
    h = model.model.embed_tokens.weight[ids]
    layers = []
    for i, (layer, w) in enumerate(zip(model.model.layers, heads)):
        rope = bool(cfg.no_rope_layers[i])
        x = rms_norm(h, layer.input_layernorm.weight, eps)
        vis = visible_keys(mask, n, causal=True)
        if rope and cfg.attention_chunk_size is not None:  # chunks counted from each row's first real token
            lead = (mask.cumsum(-1) == 0).sum(-1)  # [b]: the row's left padding
            chunk = torch.div(positions[None, :] - lead[:, None], cfg.attention_chunk_size, rounding_mode="floor")
            vis = vis & (chunk[:, :, None] == chunk[:, None, :])
        if w.n_heads == 0:
            layers.append(None)
            attn_out = torch.zeros_like(h)
        else:
            d = w.head_dim
            q, k = split_heads(F.linear(x, w.q, w.q_bias), d), split_heads(F.linear(x, w.k, w.k_bias), d)
            if rope:
                q, k = rotary_interleaved(q, positions, theta), rotary_interleaved(k, positions, theta)
                if cfg.use_qk_norm:
                    q, k = rms_norm(q, 1.0, eps), rms_norm(k, 1.0, eps)
            elif cfg.attn_temperature_tuning:
                scale = torch.log1p(torch.floor((positions.to(q.dtype) + 1) / cfg.floor_scale)) * cfg.attn_scale + 1
                q = q * scale[None, None, :, None]
            v = split_heads(F.linear(x, w.v, w.v_bias), d)
            t = attend(q, k, v, vis, scale=d ** -0.5, kv_of_query=w.kv_of_query, ablation=ablation, layer=i)
            layers.append(t)
            attn_out = F.linear(merge(t), w.o, w.o_bias)
        h = h + attn_out
        x = rms_norm(h, layer.post_attention_layernorm.weight, eps)
        f = layer.feed_forward
        h = h + (llama4_moe(x, f, act) if i in cfg.moe_layers else
                 lin(act(lin(x, f.gate_proj)) * lin(x, f.up_proj), f.down_proj))
    h = rms_norm(h, model.model.norm.weight, eps)
    return Trace(F.linear(h, model.lm_head.weight), {None: layers})


# ------------------------------------------------------------------------------------------------ Granite 4.0-H
def mamba2(x, m, mask):
    """A Mamba-2 mixer (Granite 4.0-H's), written out as its recurrence, one position at a time: padding positions
    zeroed; ``[z | xBC | dt] = in_proj(x)``; a causal depthwise convolution of ``xBC`` (kernel ``K``, left-padded
    with zeros), SiLU, padding zeroed again, split into ``x`` (``H`` heads of ``P``), ``B`` and ``C`` (``G`` groups of
    ``N``); ``dt = softplus(dt + dt_bias)``, ``A = -exp(A_log)``; per head ``h`` (group ``g = h // (H / G)``) the state
    ``S <- exp(dt A_h) S + dt x_h B_g^T`` and the output ``y_h = S C_g + D_h x_h``; then
    ``out_proj(w * rms_groups(y * silu(z)))``."""
    b, n, _ = x.shape
    keep = mask.to(x.dtype)[:, :, None]
    proj = lin(x * keep, m.in_proj)
    inner, H, P, G, N = m.intermediate_size, m.num_heads, m.head_dim, m.n_groups, m.ssm_state_size
    z, xbc, dt = proj.split([inner, m.conv_dim, H], dim=-1)
    K = m.conv1d.weight.shape[-1]
    padded = F.pad(xbc.transpose(1, 2), (K - 1, 0))  # [b, channels, K - 1 + n]
    w = m.conv1d.weight[:, 0]  # [channels, K]
    conv = torch.stack([(padded[:, :, t:t + K] * w).sum(-1) for t in range(n)], dim=-1) + m.conv1d.bias[:, None]
    xbc = F.silu(conv).transpose(1, 2) * keep
    xs, B, C = xbc.split([inner, G * N, G * N], dim=-1)
    xs, B, C = xs.view(b, n, H, P), B.view(b, n, G, N), C.view(b, n, G, N)
    dt = F.softplus(dt + m.dt_bias)  # [b, n, H]
    A = -torch.exp(m.A_log)
    state = x.new_zeros(b, H, P, N)
    ys = []
    for t in range(n):
        Bt, Ct = B[:, t].repeat_interleave(H // G, dim=1), C[:, t].repeat_interleave(H // G, dim=1)  # [b, H, N]
        decay = torch.exp(dt[:, t] * A)[:, :, None, None]
        state = decay * state + (dt[:, t][:, :, None] * xs[:, t])[..., None] * Bt[:, :, None, :]
        ys.append((state * Ct[:, :, None, :]).sum(-1) + m.D[None, :, None] * xs[:, t])
    y = torch.stack(ys, dim=1).reshape(b, n, inner) * F.silu(z)
    groups = y.view(b, n, G, inner // G)
    y = (groups / torch.sqrt(groups.pow(2).mean(-1, keepdim=True) + m.norm.variance_epsilon)).view(b, n, inner)
    return lin(m.norm.weight * y, m.out_proj)


def _mamba_hybrid(model, inputs, ablations, heads: list[LlamaHeads] | None = None) -> Trace:
    """Bamba and Granite 4.0-H: per layer an RMSNorm, then a Mamba-2 mixer (``layers_block_type[i] ==
    "linear_attention"``) or a grouped-query attention, added to the residual; an RMSNorm and a gated MLP, added.
    Bamba: rotary on half of each head, scores scaled by ``head_dim ** -0.5``, the MLP ``feed_forward`` (gate, up,
    down). Granite 4.0-H: embeddings times ``embedding_multiplier``; rotary if ``position_embedding_type == "rope"``,
    else none; scores scaled by ``attention_multiplier``; both branches times ``residual_multiplier``; the shared MLP
    (``input_linear``: gate | up); logits divided by ``logits_scaling``. The grid's rows (and ``heads``,
    ``ablations``' rows, the trace's layers) are the attention layers, in order."""
    cfg = model.config
    granite = cfg.model_type == "granitemoehybrid"
    if granite and cfg.num_local_experts:
        raise ValueError("the Granite 4.0-H reference has the shared MLP only (num_local_experts=0)")
    heads = llama_heads(model) if heads is None else heads
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    n = ids.shape[1]
    positions = torch.arange(n)
    act = activation(cfg.hidden_act)
    ablation = _grid_ablation(ablations, None)
    eps = cfg.rms_norm_eps
    rope = cfg.position_embedding_type == "rope" if granite else True
    partial = cfg.rope_parameters.get("partial_rotary_factor", 1.0) if rope else None
    branch = cfg.residual_multiplier if granite else 1.0
    h = model.model.embed_tokens.weight[ids] * (cfg.embedding_multiplier if granite else 1.0)
    layers = []
    row = 0
    for i, layer in enumerate(model.model.layers):
        x = rms_norm(h, layer.input_layernorm.weight, eps)
        if cfg.layers_block_type[i] == "linear_attention":
            out = mamba2(x, layer.mamba, mask)
        else:
            w = heads[row]
            if w.n_heads == 0:
                layers.append(None)
                out = torch.zeros_like(h)
            else:
                d = w.head_dim
                q, k = split_heads(F.linear(x, w.q, w.q_bias), d), split_heads(F.linear(x, w.k, w.k_bias), d)
                if rope:
                    theta, n_rot = cfg.rope_parameters["rope_theta"], int(d * partial)
                    q, k = partial_rotary(q, positions, theta, n_rot), partial_rotary(k, positions, theta, n_rot)
                v = split_heads(F.linear(x, w.v, w.v_bias), d)
                t = attend(q, k, v, visible_keys(mask, n, causal=True),
                           scale=cfg.attention_multiplier if granite else d ** -0.5, kv_of_query=w.kv_of_query,
                           ablation=ablation, layer=row)
                layers.append(t)
                out = F.linear(merge(t), w.o, w.o_bias)
            row += 1
        h = h + out * branch
        if granite:
            x = rms_norm(h, layer.post_attention_layernorm.weight, eps)
            gate, up = lin(x, layer.shared_mlp.input_linear).chunk(2, dim=-1)
            h = h + lin(act(gate) * up, layer.shared_mlp.output_linear) * branch
        else:
            x = rms_norm(h, layer.pre_ff_layernorm.weight, eps)
            f = layer.feed_forward
            h = h + lin(act(lin(x, f.gate_proj)) * lin(x, f.up_proj), f.down_proj)
    h = rms_norm(h, (model.model.norm if granite else model.model.final_layernorm).weight, eps)
    logits = F.linear(h, model.lm_head.weight)
    return Trace(logits / cfg.logits_scaling if granite else logits, {None: layers})


# ------------------------------------------------------------------------------------------------ Qwen3-Next, Qwen3.5
def l2_normalize(x, eps: float = 1e-6):
    """``x / sqrt(sum(x^2) + eps)`` over the last dim (the gated DeltaNet's query and key normalisation)."""
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def gated_deltanet(x, m, mask, cfg):
    """A gated DeltaNet layer (Qwen3-Next's, Qwen3.5's), written out as its recurrence, one position at a time.

    Padding positions' inputs zeroed; the projections: ``[q | k | v]`` (``n_k`` key heads of ``dk`` for q and k,
    ``n_v`` value heads of ``dv`` for v), ``z`` (``n_v`` x ``dv``), ``b`` and ``a`` (one per value head); a causal
    depthwise convolution of ``[q | k | v]`` (kernel ``K``, zeros on the left, no bias), then the activation (SiLU);
    q and k L2-normalised per head, q scaled by ``dk^-1/2``; key head ``i`` serves the ``r = n_v / n_k`` consecutive
    value heads ``i*r .. i*r + r - 1``; ``beta = sigmoid(b)``, ``g = -exp(A_log) * softplus(a + dt_bias)``; per value
    head a state ``S`` ``[dk, dv]`` from zero::

        S <- exp(g_t) S;   S <- S + k_t (beta_t (v_t - S^T k_t))^T;   o_t = S^T q_t

    then per value head the gated RMSNorm ``w * o / rms(o) * silu(z)`` (the norm before the gate, over dv) and
    ``out_proj``."""
    b, n, _ = x.shape
    nk, nv, dk, dv = cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim, \
        cfg.linear_value_head_dim
    r = nv // nk
    x = x * mask.to(x.dtype)[:, :, None]  # padding positions' inputs zeroed
    if hasattr(m, "in_proj_qkvz"):  # Qwen3-Next: fused projections, their rows grouped by KEY head
        # per key head i: [q_i (dk) | k_i (dk) | v (r * dv: value heads i*r ..) | z (r * dv)], and [b (r) | a (r)]
        qkvz = lin(x, m.in_proj_qkvz).view(b, n, nk, 2 * dk + 2 * r * dv)
        q, k, v, z = qkvz.split([dk, dk, r * dv, r * dv], dim=-1)
        beta_in, a = lin(x, m.in_proj_ba).view(b, n, nk, 2 * r).split([r, r], dim=-1)
        qkv = torch.cat([q.flatten(2), k.flatten(2), v.flatten(2)], -1)  # the convolution's channels: all q | k | v
        z, beta_in, a = z.reshape(b, n, nv, dv), beta_in.reshape(b, n, nv), a.reshape(b, n, nv)
    else:  # Qwen3.5: in_proj_qkv's rows [all q | all k | all v]; z, b, a projections of their own
        qkv = lin(x, m.in_proj_qkv)
        z, beta_in, a = lin(x, m.in_proj_z).view(b, n, nv, dv), lin(x, m.in_proj_b), lin(x, m.in_proj_a)
    K = m.conv1d.weight.shape[-1]
    padded = F.pad(qkv.transpose(1, 2), (K - 1, 0))  # [b, channels, K - 1 + n]
    w = m.conv1d.weight[:, 0]  # [channels, K]
    conv = torch.stack([(padded[:, :, t:t + K] * w).sum(-1) for t in range(n)], dim=-1)
    if m.conv1d.bias is not None:
        conv = conv + m.conv1d.bias[:, None]
    qkv = activation(cfg.hidden_act)(conv).transpose(1, 2)
    q, k, v = qkv.split([nk * dk, nk * dk, nv * dv], dim=-1)
    key_of_value = torch.arange(nv) // r  # the key (and query) head each value head reads
    q = (l2_normalize(q.view(b, n, nk, dk)) * dk ** -0.5)[:, :, key_of_value]  # [b, n, nv, dk]
    k = l2_normalize(k.view(b, n, nk, dk))[:, :, key_of_value]
    v = v.view(b, n, nv, dv)
    beta = torch.sigmoid(beta_in)  # [b, n, nv]
    g = -torch.exp(m.A_log) * F.softplus(a + m.dt_bias)
    state = x.new_zeros(b, nv, dk, dv)
    outs = []
    for t in range(n):
        kt = k[:, t]
        state = torch.exp(g[:, t])[:, :, None, None] * state
        predicted = (state * kt[..., None]).sum(-2)  # S^T k_t: [b, nv, dv]
        state = state + kt[..., None] * (beta[:, t, :, None] * (v[:, t] - predicted))[:, :, None, :]
        outs.append((state * q[:, t][..., None]).sum(-2))  # S^T q_t
    o = torch.stack(outs, dim=1)  # [b, n, nv, dv]
    o = m.norm.weight * o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps) * F.silu(z)
    return lin(o.reshape(b, n, nv * dv), m.out_proj)


def _gated_deltanet_hybrid(model, inputs, ablations, heads: list[LlamaHeads] | None = None) -> Trace:
    """Qwen3-Next, Qwen3.5 and Qwen3.5-MoE (text): per layer an RMSNorm of weight (1 + w), then a gated DeltaNet layer
    (``layer_types[i] == "linear_attention"``, see :func:`gated_deltanet`) or a gated attention layer, added to the
    residual; an RMSNorm (1 + w) and the MLP, added: a dense gated MLP, or (Qwen3-Next, Qwen3.5-MoE) a mixture of
    experts with a sigmoid-gated shared expert (:func:`moe`); a final RMSNorm (1 + w); ``lm_head``. The gated
    attention: per-head query and key RMSNorms (1 + w) over head_dim, rotary (rotate-half) on the first
    ``partial_rotary_factor * head_dim`` dims of each head, grouped-query attention scaled by ``head_dim ** -0.5``,
    each head's context times ``sigmoid(q_gate x)`` (its output gate, ``attend(out_gate=...)``), ``o_proj``. The
    grid's rows (and ``heads``, ``ablations``' rows, the trace's layers) are the attention layers, in order."""
    cfg = model.config
    rope = cfg.rope_parameters
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type {rope['rope_type']!r}: the reference does default rotary only")
    heads = llama_heads(model) if heads is None else heads
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    n = ids.shape[1]
    positions = torch.arange(n)
    act = activation(cfg.hidden_act)
    ablation = _grid_ablation(ablations, None)
    eps = cfg.rms_norm_eps
    h = model.model.embed_tokens.weight[ids]
    layers = []
    row = 0
    for i, layer in enumerate(model.model.layers):
        x = gemma_norm(h, layer.input_layernorm.weight, eps)
        if cfg.layer_types[i] == "linear_attention":
            out = gated_deltanet(x, layer.linear_attn, mask, cfg)
        else:
            w = heads[row]
            if w.n_heads == 0:
                layers.append(None)
                out = torch.zeros_like(h) if w.o_bias is None else w.o_bias.expand_as(h)
            else:
                d = w.head_dim
                q, k = split_heads(F.linear(x, w.q, w.q_bias), d), split_heads(F.linear(x, w.k, w.k_bias), d)
                q, k = gemma_norm(q, w.q_norm, w.norm_eps), gemma_norm(k, w.k_norm, w.norm_eps)
                n_rot = int(d * rope.get("partial_rotary_factor", 1.0))
                q, k = (partial_rotary(t, positions, rope["rope_theta"], n_rot) for t in (q, k))
                v = split_heads(F.linear(x, w.v, w.v_bias), d)
                gate = torch.sigmoid(split_heads(F.linear(x, w.q_gate, w.q_gate_bias), d))
                t = attend(q, k, v, visible_keys(mask, n, causal=True), scale=d ** -0.5, kv_of_query=w.kv_of_query,
                           ablation=ablation, layer=row, out_gate=gate)
                layers.append(t)
                out = F.linear(merge(t), w.o, w.o_bias)
            row += 1
        h = h + out
        x = gemma_norm(h, layer.post_attention_layernorm.weight, eps)
        m = layer.mlp
        h = h + (moe(x, m, cfg, act) if hasattr(m, "experts") else
                 lin(act(lin(x, m.gate_proj)) * lin(x, m.up_proj), m.down_proj))
    h = gemma_norm(h, model.model.norm.weight, eps)
    return Trace(F.linear(h, model.lm_head.weight), {None: layers})


# ------------------------------------------------------------------------------------------------ Nemotron-H
def nemotron_moe(x, m, cfg):
    """Nemotron-H's mixture of experts: router scores ``sigmoid(x W^T)``; the experts in ``n_group`` groups, a group
    scored by the sum of its 2 best ``scores + e_score_correction_bias``; the ``topk_group`` best groups' experts
    eligible; among them the ``num_experts_per_tok`` best by ``scores + correction``; their weights the (uncorrected)
    scores, renormalised to sum 1 when ``norm_topk_prob``, times ``routed_scaling_factor``; each expert
    ``down(relu2(up x))`` (no gate); plus the shared expert ``down(relu2(up x))``."""
    if cfg.moe_latent_size is not None:
        raise ValueError("the Nemotron-H reference has no latent projection of the experts (moe_latent_size=None)")
    act = activation(cfg.mlp_hidden_act)
    scores = torch.sigmoid(F.linear(x, m.gate.weight))
    choice = scores + m.gate.e_score_correction_bias
    n_experts = choice.shape[-1]
    grouped = choice.view(*choice.shape[:-1], cfg.n_group, n_experts // cfg.n_group)
    group_scores = grouped.topk(2, dim=-1).values.sum(-1)
    best = group_scores.topk(cfg.topk_group, dim=-1).indices
    eligible = torch.zeros_like(group_scores, dtype=torch.bool).scatter(-1, best, True)
    eligible = eligible[..., None].expand_as(grouped).reshape(choice.shape)
    top_i = choice.masked_fill(~eligible, float("-inf")).topk(cfg.num_experts_per_tok, dim=-1).indices
    top_w = scores.gather(-1, top_i)
    if cfg.norm_topk_prob:
        top_w = top_w / (top_w.sum(-1, keepdim=True) + 1e-20)
    top_w = top_w * cfg.routed_scaling_factor
    out = torch.zeros_like(x)
    for e in range(n_experts):
        weight = (top_w * (top_i == e)).sum(-1, keepdim=True)  # 0 where the token is not routed to expert e
        out = out + weight * F.linear(act(F.linear(x, m.experts.up_proj[e])), m.experts.down_proj[e])
    s = m.shared_experts
    return out + lin(act(lin(x, s.up_proj)), s.down_proj)


def _nemotron_h(model, inputs, ablations, heads: list[LlamaHeads] | None = None) -> Trace:
    """Nemotron-H: every layer ONE block, ``h + block(rms(h))``, the block by ``layers_block_type[i]``: a Mamba-2 mixer
    (:func:`mamba2`), grouped-query attention without positions (scores scaled by ``head_dim ** -0.5``), a relu^2 MLP
    ``down(relu2(up x))`` or a mixture of experts (:func:`nemotron_moe`); a final RMSNorm (``norm_f``); ``lm_head``
    (HF returns the logits in float32; these stay float64). The grid's rows (and ``heads``, ``ablations``' rows, the
    trace's layers) are the attention blocks, in order."""
    cfg = model.config
    heads = llama_heads(model) if heads is None else heads
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    n = ids.shape[1]
    ablation = _grid_ablation(ablations, None)
    eps = cfg.layer_norm_epsilon
    h = model.model.embeddings.weight[ids]
    layers = []
    row = 0
    for i, layer in enumerate(model.model.layers):
        x = rms_norm(h, layer.norm.weight, eps)
        kind, m = cfg.layers_block_type[i], layer.mixer
        if kind == "linear_attention":
            out = mamba2(x, m, mask)
        elif kind == "full_attention":
            w = heads[row]
            if w.n_heads == 0:
                layers.append(None)
                out = torch.zeros_like(h) if w.o_bias is None else w.o_bias.expand_as(h)
            else:
                d = w.head_dim
                q, k = split_heads(F.linear(x, w.q, w.q_bias), d), split_heads(F.linear(x, w.k, w.k_bias), d)
                v = split_heads(F.linear(x, w.v, w.v_bias), d)
                t = attend(q, k, v, visible_keys(mask, n, causal=True), scale=d ** -0.5, kv_of_query=w.kv_of_query,
                           ablation=ablation, layer=row)
                layers.append(t)
                out = F.linear(merge(t), w.o, w.o_bias)
            row += 1
        elif kind == "mlp":
            out = lin(activation(cfg.mlp_hidden_act)(lin(x, m.up_proj)), m.down_proj)
        else:
            out = nemotron_moe(x, m, cfg)
        h = h + out
    h = rms_norm(h, model.model.norm_f.weight, eps)
    return Trace(F.linear(h, model.lm_head.weight), {None: layers})


# ------------------------------------------------------------------------------------------------ OLMo
def _olmo_like(model, inputs, ablations, heads: list[LlamaHeads] | None = None) -> Trace:
    """OLMo (1): parameter-free layer norms (eps 1e-5) before the attention and the MLP, q/k/v clamped to
    ``[-clip_qkv, clip_qkv]``; OLMo 2 and 3: no norm before the blocks, RMSNorms after the attention and after the MLP,
    and q_norm / k_norm over the WHOLE query / key projection (all heads together) before rotary; OLMo 3's sliding
    layers see the last ``sliding_window`` keys and each layer type has its own rotary base. Gated SiLU MLP."""
    cfg = model.config
    later = cfg.model_type in ("olmo2", "olmo3")
    olmo3 = cfg.model_type == "olmo3"
    heads = llama_heads(model) if heads is None else heads
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    n = ids.shape[1]
    positions = torch.arange(n)
    act = activation(cfg.hidden_act)
    ablation = _grid_ablation(ablations, None)
    clip = getattr(cfg, "clip_qkv", None)
    plain = lambda y: F.layer_norm(y, y.shape[-1:], None, None, 1e-5)  # OLMo 1's norm: no weight, no bias
    h = model.model.embed_tokens.weight[ids]
    layers = []
    for i, (layer, w) in enumerate(zip(model.model.layers, heads)):
        kind = cfg.layer_types[i] if olmo3 else None
        rope = cfg.rope_parameters[kind] if olmo3 else cfg.rope_parameters
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"rope_type {rope['rope_type']!r}: the reference does default rotary only")
        window = cfg.sliding_window - 1 if kind == "sliding_attention" else None
        x = h if later else plain(h)
        a = layer.self_attn
        if w.n_heads == 0:
            layers.append(None)
            attn_out = torch.zeros_like(h) if w.o_bias is None else w.o_bias.expand_as(h)
        else:
            d = w.head_dim
            q, k, v = F.linear(x, w.q, w.q_bias), F.linear(x, w.k, w.k_bias), F.linear(x, w.v, w.v_bias)
            if clip is not None:
                q, k, v = q.clamp(-clip, clip), k.clamp(-clip, clip), v.clamp(-clip, clip)
            if later:  # one RMSNorm over all heads of the projection
                q, k = rms_norm(q, a.q_norm.weight, cfg.rms_norm_eps), rms_norm(k, a.k_norm.weight, cfg.rms_norm_eps)
            q, k, v = split_heads(q, d), split_heads(k, d), split_heads(v, d)
            q, k = rotary(q, positions, rope["rope_theta"]), rotary(k, positions, rope["rope_theta"])
            t = attend(q, k, v, visible_keys(mask, n, causal=True, window=window), scale=d ** -0.5,
                       kv_of_query=w.kv_of_query, ablation=ablation, layer=i)
            layers.append(t)
            attn_out = F.linear(merge(t), w.o, w.o_bias)
        m = layer.mlp
        ffn = lambda y: lin(act(lin(y, m.gate_proj)) * lin(y, m.up_proj), m.down_proj)
        if later:
            h = h + rms_norm(attn_out, layer.post_attention_layernorm.weight, cfg.rms_norm_eps)
            h = h + rms_norm(ffn(h), layer.post_feedforward_layernorm.weight, cfg.rms_norm_eps)
        else:
            h = h + attn_out
            h = h + ffn(plain(h))
    h = rms_norm(h, model.model.norm.weight, cfg.rms_norm_eps) if later else plain(h)
    return Trace(F.linear(h, model.lm_head.weight), {None: layers})


# ------------------------------------------------------------------------------------------------ BLOOM
def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's slope per head (Press et al.): ``2^(-8 i / n)`` for ``i = 1..n`` when ``n`` is a power of 2; else those of
    the nearest lower power of 2 followed by every other slope of the next one."""
    closest = 2 ** math.floor(math.log2(n_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** p for p in range(1, closest + 1)]
    if closest != n_heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** p for p in range(1, 1 + 2 * min(closest, n_heads - closest), 2)]
    return torch.tensor(slopes, dtype=torch.float64)


def _bloom(model, inputs, ablations, keep: dict[int, list[int]] | None = None) -> Trace:
    """BLOOM: a layer norm on the embeddings; per layer a fused query/key/value projection laid out head by head,
    scores ``q . k / sqrt(d) + slope_h * position(key)`` (positions count the real tokens; ALiBi), the residual taken
    before the layer norm or after it (``apply_residual_connection_post_layernorm``), a tanh-GELU MLP; logits from the
    tied embeddings. ``keep``: the reference of a model pruned to those heads per layer."""
    cfg = model.config
    t = model.transformer
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    b, n = ids.shape
    n_heads, d = cfg.n_head, cfg.hidden_size // cfg.n_head
    position = ((mask.cumsum(-1) - 1) * mask).to(torch.float64)  # [b, keys]
    slopes = alibi_slopes(n_heads)
    ablation = _grid_ablation(ablations, None)
    post = cfg.apply_residual_connection_post_layernorm
    h = layer_norm(t.word_embeddings.weight[ids], t.word_embeddings_layernorm)
    layers = []
    for i, block in enumerate(t.h):
        a = block.self_attention
        heads = list(range(n_heads)) if keep is None or i not in keep else sorted(keep[i])
        x = layer_norm(h, block.input_layernorm)
        residual = x if post else h
        if not heads:
            layers.append(None)
            attn = a.dense.bias.expand_as(h)
        else:
            if ablation is not None and keep is not None:
                raise ValueError("ablations of a pruned model's reference: gate the unpruned one instead")
            qkv = lin(x, a.query_key_value).view(b, n, n_heads, 3, d)[:, :, heads]
            q, k, v = (qkv[..., j, :].transpose(1, 2) for j in range(3))
            bias = slopes[heads].to(q.dtype)[None, :, None, None] * position.to(q.dtype)[:, None, None, :]
            tr = attend(q, k, v, visible_keys(mask, n, causal=True), scale=d ** -0.5, bias=bias,
                        kv_of_query=torch.arange(len(heads)), ablation=ablation, layer=i)
            layers.append(tr)
            cols = torch.tensor([hh * d + j for hh in heads for j in range(d)], dtype=torch.long)
            attn = F.linear(merge(tr), a.dense.weight[:, cols], a.dense.bias)
        h = residual + attn
        x = layer_norm(h, block.post_attention_layernorm)
        residual = x if post else h
        m = block.mlp
        h = residual + lin(F.gelu(lin(x, m.dense_h_to_4h), approximate="tanh"), m.dense_4h_to_h)
    h = layer_norm(h, t.ln_f)
    return Trace(F.linear(h, model.lm_head.weight), {None: layers})


# ------------------------------------------------------------------------------------------------ Falcon
def _falcon_qkv(qkv, cfg, b: int, n: int):
    """Falcon's fused output ``[b, n, rows]`` -> q ``[b, H, n, d]``, k and v ``[b, KV, n, d]`` by its layout: group by
    group (``new_decoder_architecture``: each key/value head's queries, its key, its value), multi-query (every query,
    then one key and one value), else head by head (each head's q | k | v)."""
    H = cfg.num_attention_heads
    d = cfg.hidden_size // H
    if cfg.new_decoder_architecture:
        grouped = qkv.view(b, n, cfg.num_kv_heads, H // cfg.num_kv_heads + 2, d)
        q, k, v = grouped[..., :-2, :].reshape(b, n, H, d), grouped[..., -2, :], grouped[..., -1, :]
    elif cfg.multi_query:
        q, k, v = qkv[..., :H * d].view(b, n, H, d), qkv[..., H * d:(H + 1) * d].view(b, n, 1, d), \
            qkv[..., (H + 1) * d:].view(b, n, 1, d)
    else:
        heads = qkv.view(b, n, H, 3, d)
        q, k, v = heads[..., 0, :], heads[..., 1, :], heads[..., 2, :]
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def _falcon(model, inputs, ablations) -> Trace:
    """Falcon in its three layouts (see :func:`_falcon_qkv`): rotary on each whole query and key head, or ALiBi
    (``slope_h * position(key) / sqrt(d)`` added to the scaled scores, positions counting the real tokens; HF rounds
    ``slope * position`` to bfloat16, which the reference does too); the attention and the MLP in parallel (one layer
    norm, or ``ln_attn`` / ``ln_mlp`` in the new architecture) or one after the other; an exact-GELU MLP; tied
    embeddings."""
    cfg = model.config
    t = model.transformer
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    b, n = ids.shape
    H = cfg.num_attention_heads
    d = cfg.hidden_size // H
    n_kv = cfg.num_kv_heads if cfg.new_decoder_architecture else (1 if cfg.multi_query else H)
    kv_of_query = torch.arange(H) // (H // n_kv)
    bias = None
    if cfg.alibi:
        position = ((mask.cumsum(-1) - 1) * mask)  # [b, keys], long
        slope_pos = alibi_slopes(H).to(torch.bfloat16)[None, :, None] * position[:, None, :]  # bfloat16, as HF
        bias = (slope_pos.to(torch.float64) / math.sqrt(d))[:, :, None, :]  # [b, H, 1, keys]
    else:
        rope = cfg.rope_parameters
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"rope_type {rope['rope_type']!r}: the reference does default rotary only")
        theta = rope["rope_theta"]
    positions = torch.arange(n)
    two_norms = cfg.new_decoder_architecture and cfg.num_ln_in_parallel_attn == 2
    ablation = _grid_ablation(ablations, None)
    h = t.word_embeddings.weight[ids]
    layers = []
    for i, block in enumerate(t.h):
        a = block.self_attention
        x = layer_norm(h, block.ln_attn if two_norms else block.input_layernorm)
        q, k, v = _falcon_qkv(lin(x, a.query_key_value), cfg, b, n)
        if not cfg.alibi:
            q, k = rotary(q, positions, theta), rotary(k, positions, theta)
        tr = attend(q, k, v, visible_keys(mask, n, causal=True), scale=d ** -0.5, bias=bias, kv_of_query=kv_of_query,
                    ablation=ablation, layer=i)
        layers.append(tr)
        attn = lin(merge(tr), a.dense)
        if cfg.new_decoder_architecture or cfg.parallel_attn:  # x + attn(ln(x)) + mlp(ln'(x))
            mlp_in, residual = (layer_norm(h, block.ln_mlp) if two_norms else x), h
        else:  # x' = x + attn(ln(x)); x' + mlp(ln2(x'))
            residual = h + attn
            mlp_in = layer_norm(residual, block.post_attention_layernorm)
        m = block.mlp
        out = lin(activation(cfg.activation)(lin(mlp_in, m.dense_h_to_4h)), m.dense_4h_to_h)
        if cfg.new_decoder_architecture or cfg.parallel_attn:
            out = out + attn
        h = residual + out
    h = layer_norm(h, t.ln_f)
    return Trace(F.linear(h, model.lm_head.weight), {None: layers})


# ------------------------------------------------------------------------------------------------ DeepSeek-V3
def _deepseek_v3(model, inputs, ablations, keep: dict[int, list[int]] | None = None) -> Trace:
    """DeepSeek-V3's (and V2's: rotary on interleaved pairs in place) multi-head latent attention, head by head: head h's query ``[q_nope_h | rot(q_rope_h)]`` from
    ``q_proj`` (or ``q_b_proj(rms(q_a_proj x))``), its key ``[k_nope_h | rot(k_rope)]`` and value from
    ``kv_b_proj(rms(latent))``, the rotated key part ``k_rope`` shared by the heads (both from ``kv_a_proj_with_mqa``);
    rotary on the rope parts (interleaved pairs de-interleaved first when ``rope_interleave``); scores scaled by
    ``qk_head_dim ** -0.5`` (default rope: no YaRN mscale). Dense gated SiLU MLPs only (the fixture has no expert
    layer). ``keep``: the reference of a model pruned to those heads per layer (their rows and columns only)."""
    cfg = model.config
    rope = cfg.rope_parameters
    if rope.get("rope_type", "default") != "default" or cfg.first_k_dense_replace < cfg.num_hidden_layers:
        raise ValueError("the DeepSeek-V3 reference does default rotary and dense MLPs only")
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    n = ids.shape[1]
    positions = torch.arange(n)
    eps = cfg.rms_norm_eps
    nope, rot, dv, rank = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
    act = activation(cfg.hidden_act)
    ablation = _grid_ablation(ablations, None)

    def place(x):  # rotary on the rope part
        if cfg.model_type == "deepseek_v2":  # pairs (2i, 2i + 1) turned in place (complex angles)
            return rotary_interleaved(x, positions, rope["rope_theta"])
        if cfg.rope_interleave:  # V3: the pairs de-interleaved first
            x = torch.cat([x[..., 0::2], x[..., 1::2]], -1)
        return rotary(x, positions, rope["rope_theta"])

    h = model.model.embed_tokens.weight[ids]
    layers = []
    for i, layer in enumerate(model.model.layers):
        a = layer.self_attn
        heads = list(range(cfg.num_attention_heads)) if keep is None or i not in keep else sorted(keep[i])
        x = rms_norm(h, layer.input_layernorm.weight, eps)
        if not heads:
            layers.append(None)
            attn_out = torch.zeros_like(h) if a.o_proj.bias is None else a.o_proj.bias.expand_as(h)
        else:
            q = (lin(x, a.q_proj) if cfg.q_lora_rank is None
                 else lin(rms_norm(lin(x, a.q_a_proj), a.q_a_layernorm.weight, eps), a.q_b_proj))
            q = split_heads(q, nope + rot)[:, heads]  # [b, kept, n, nope + rot]
            latent = lin(x, a.kv_a_proj_with_mqa)
            kv = split_heads(lin(rms_norm(latent[..., :rank], a.kv_a_layernorm.weight, eps), a.kv_b_proj),
                             nope + dv)[:, heads]
            k_rope = place(latent[..., rank:][:, None])  # [b, 1, n, rot]: one for every head
            q = torch.cat([q[..., :nope], place(q[..., nope:])], -1)
            k = torch.cat([kv[..., :nope], k_rope.expand(-1, len(heads), -1, -1)], -1)
            v = kv[..., nope:]
            if ablation is not None and keep is not None:
                raise ValueError("ablations of a pruned model's reference: gate the unpruned one instead")
            t = attend(q, k, v, visible_keys(mask, n, causal=True), scale=(nope + rot) ** -0.5,
                       kv_of_query=torch.arange(len(heads)), ablation=ablation, layer=i)
            layers.append(t)
            cols = torch.tensor([hh * dv + j for hh in heads for j in range(dv)], dtype=torch.long)
            attn_out = F.linear(merge(t), a.o_proj.weight[:, cols], a.o_proj.bias)
        h = h + attn_out
        x = rms_norm(h, layer.post_attention_layernorm.weight, eps)
        m = layer.mlp
        h = h + lin(act(lin(x, m.gate_proj)) * lin(x, m.up_proj), m.down_proj)
    h = rms_norm(h, model.model.norm.weight, eps)
    return Trace(F.linear(h, model.lm_head.weight), {None: layers})


# ------------------------------------------------------------------------------------------------ Gemma
def gemma_norm(x, weight, eps):
    """Gemma's RMSNorm: the weight is an offset from 1 (``(1 + weight) * x / rms(x)``)."""
    return rms_norm(x, 1.0 + weight, eps)


def _gemma_like(model, inputs, ablations, heads: list[LlamaHeads] | None = None) -> Trace:
    """Gemma (1), Gemma 2 and Gemma 3's text model: Llama-shaped attention (grouped-query, rotary) with the embeddings
    scaled by sqrt(hidden), RMSNorms of weight (1 + w), GeGLU feed-forward; Gemma 2 and 3 add scores scaled by
    query_pre_attn_scalar^-1/2, a norm after the attention and around the feed-forward ("sandwich"), per layer type
    a sliding window; Gemma 2 soft-caps the attention scores; Gemma 3 adds per-head query/key norms and a rotary
    base per layer type."""
    cfg = model.config
    gemma3 = cfg.model_type == "gemma3_text"
    later = cfg.model_type in ("gemma2", "gemma3_text")  # sandwich norms, score scalar, layer types
    softcap = cfg.attn_logit_softcapping if cfg.model_type == "gemma2" else None
    heads = llama_heads(model) if heads is None else heads
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    n = ids.shape[1]
    positions = torch.arange(n)
    act = activation(cfg.hidden_activation if later else cfg.hidden_act)
    eps = cfg.rms_norm_eps
    ablation = _grid_ablation(ablations, None)
    h = model.model.embed_tokens.weight[ids] * math.sqrt(cfg.hidden_size)
    layers = []
    for i, (layer, w) in enumerate(zip(model.model.layers, heads)):
        kind = cfg.layer_types[i] if later else None
        rope = cfg.rope_parameters[kind] if gemma3 else cfg.rope_parameters
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"rope_type {rope['rope_type']!r}: the reference does default rotary only")
        window = cfg.sliding_window - 1 if kind == "sliding_attention" else None
        x = gemma_norm(h, layer.input_layernorm.weight, eps)
        if w.n_heads == 0:
            layers.append(None)
            attn_out = torch.zeros_like(h) if w.o_bias is None else w.o_bias.expand_as(h)
        else:
            d = w.head_dim
            q, k = split_heads(F.linear(x, w.q, w.q_bias), d), split_heads(F.linear(x, w.k, w.k_bias), d)
            if w.q_norm is not None:
                q, k = gemma_norm(q, w.q_norm, eps), gemma_norm(k, w.k_norm, eps)
            q, k = rotary(q, positions, rope["rope_theta"]), rotary(k, positions, rope["rope_theta"])
            v = split_heads(F.linear(x, w.v, w.v_bias), d)
            scale = cfg.query_pre_attn_scalar ** -0.5 if later else d ** -0.5
            t = attend(q, k, v, visible_keys(mask, n, causal=True, window=window), scale=scale,
                       kv_of_query=w.kv_of_query, ablation=ablation, layer=i, softcap=softcap)
            layers.append(t)
            attn_out = F.linear(merge(t), w.o, w.o_bias)
        m = layer.mlp
        ffn = lambda y: lin(act(lin(y, m.gate_proj)) * lin(y, m.up_proj), m.down_proj)
        if later:
            h = h + gemma_norm(attn_out, layer.post_attention_layernorm.weight, eps)
            h = h + gemma_norm(ffn(gemma_norm(h, layer.pre_feedforward_layernorm.weight, eps)),
                               layer.post_feedforward_layernorm.weight, eps)
        else:
            h = h + attn_out
            h = h + ffn(gemma_norm(h, layer.post_attention_layernorm.weight, eps))
    h = gemma_norm(h, model.model.norm.weight, eps)
    logits = F.linear(h, model.lm_head.weight)
    cap = getattr(cfg, "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return Trace(logits, {None: layers})


# ------------------------------------------------------------------------------------------------ T5
def t5_bucket(relative, *, bidirectional: bool, num_buckets: int, max_distance: int):
    """T5's relative position buckets (relative = key position - query position). Half the buckets per
    direction when bidirectional; the future shares bucket 0 in the decoder. Distances below ``max_exact`` get
    their own bucket, larger ones log-spaced buckets up to ``max_distance``. The log is taken in float32, as the
    model takes it (a distance on a bucket boundary may round down)."""
    bucket = torch.zeros_like(relative)
    n = num_buckets
    if bidirectional:
        n //= 2
        bucket = bucket + (relative > 0).long() * n
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)
    max_exact = n // 2
    log_ratio = torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (log_ratio * (n - max_exact)).long()).clamp(max=n - 1)
    return bucket + torch.where(distance < max_exact, distance, large)


def t5_position_bias(attn, n_q: int, n_k: int, *, bidirectional: bool, cfg):
    """``[heads, n_q, n_k]``: the first layer's relative-attention-bias table looked up per head."""
    relative = torch.arange(n_k)[None, :] - torch.arange(n_q)[:, None]
    buckets = t5_bucket(relative, bidirectional=bidirectional, num_buckets=cfg.relative_attention_num_buckets,
                        max_distance=cfg.relative_attention_max_distance)
    return attn.relative_attention_bias.weight[buckets].permute(2, 0, 1)


def _t5_attention(x, source, attn, vis, d, bias, ablation, layer):
    t = attend(split_heads(lin(x, attn.q), d), split_heads(lin(source, attn.k), d), split_heads(lin(source, attn.v), d),
               vis, scale=1.0, bias=bias, ablation=ablation, layer=layer)  # T5 does not scale by 1/sqrt(d)
    return lin(merge(t), attn.o), t


def _t5_ff(h, ff, cfg):
    x = rms_norm(h, ff.layer_norm.weight, cfg.layer_norm_epsilon)
    m = ff.DenseReluDense
    act = activation(cfg.dense_act_fn)
    inner = act(lin(x, m.wi_0)) * lin(x, m.wi_1) if cfg.is_gated_act else act(lin(x, m.wi))
    return h + lin(inner, m.wo)


def _t5(model, inputs, ablations) -> Trace:
    cfg = model.config
    ids, mask, dec_ids = inputs["input_ids"], inputs["attention_mask"], inputs["decoder_input_ids"]
    dec_mask = inputs.get("decoder_attention_mask", torch.ones_like(dec_ids))
    d, eps = cfg.d_kv, cfg.layer_norm_epsilon
    grids = {"enc": [], "dec": [], "cross": []}

    h = model.encoder.embed_tokens.weight[ids]
    first = model.encoder.block[0].layer[0].SelfAttention
    bias = t5_position_bias(first, ids.shape[1], ids.shape[1], bidirectional=True, cfg=cfg)  # shared by all layers
    vis = visible_keys(mask, ids.shape[1], causal=False)
    for i, block in enumerate(model.encoder.block):  # pre-norm: x + sublayer(norm(x))
        sa = block.layer[0]
        x = rms_norm(h, sa.layer_norm.weight, eps)
        out, t = _t5_attention(x, x, sa.SelfAttention, vis, d, bias, _grid_ablation(ablations, "enc"), i)
        grids["enc"].append(t)
        h = _t5_ff(h + out, block.layer[-1], cfg)
    memory = rms_norm(h, model.encoder.final_layer_norm.weight, eps)

    h = model.decoder.embed_tokens.weight[dec_ids]
    n = dec_ids.shape[1]
    first = model.decoder.block[0].layer[0].SelfAttention
    bias = t5_position_bias(first, n, n, bidirectional=False, cfg=cfg)
    vis_self = visible_keys(dec_mask, n, causal=True)
    vis_cross = visible_keys(mask, n, causal=False)
    for i, block in enumerate(model.decoder.block):
        sa, ca = block.layer[0], block.layer[1]
        x = rms_norm(h, sa.layer_norm.weight, eps)
        out, t = _t5_attention(x, x, sa.SelfAttention, vis_self, d, bias, _grid_ablation(ablations, "dec"), i)
        grids["dec"].append(t)
        h = h + out
        x = rms_norm(h, ca.layer_norm.weight, eps)
        out, t = _t5_attention(x, memory, ca.EncDecAttention, vis_cross, d, None, _grid_ablation(ablations, "cross"), i)
        grids["cross"].append(t)
        h = _t5_ff(h + out, block.layer[-1], cfg)
    h = rms_norm(h, model.decoder.final_layer_norm.weight, eps)
    if getattr(cfg, "scale_decoder_outputs", True):  # tied embeddings: the output is scaled by d_model^-1/2
        h = h * cfg.d_model ** -0.5
    return Trace(F.linear(h, model.lm_head.weight), grids)


# ------------------------------------------------------------------------------------------------ ModernBERT
def _modernbert(model, inputs, ablations) -> Trace:
    cfg = model.config
    base = model.model
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    n, H = ids.shape[1], cfg.num_attention_heads
    d = cfg.hidden_size // H
    positions = torch.arange(n)
    ablation = _grid_ablation(ablations, None)
    h = layer_norm(base.embeddings.tok_embeddings.weight[ids], base.embeddings.norm)
    act = activation(cfg.hidden_activation)
    layers = []
    for i, layer in enumerate(base.layers):
        local = cfg.layer_types[i] == "sliding_attention"  # local layers see |query - key| <= local_attention // 2
        theta = cfg.rope_parameters["sliding_attention" if local else "full_attention"]["rope_theta"]
        x = h if i == 0 else layer_norm(h, layer.attn_norm)  # the first layer has no attention norm
        qkv = lin(x, layer.attn.Wqkv).view(x.shape[0], n, 3, H, d)  # fused: q | k | v, heads side by side
        q, k, v = (qkv[:, :, j].transpose(1, 2) for j in range(3))
        vis = visible_keys(mask, n, causal=False, window=cfg.local_attention // 2 if local else None)
        t = attend(rotary(q, positions, theta), rotary(k, positions, theta), v, vis, scale=d ** -0.5,
                   ablation=ablation, layer=i)
        layers.append(t)
        h = h + lin(merge(t), layer.attn.Wo)
        inner, gate = lin(layer_norm(h, layer.mlp_norm), layer.mlp.Wi).chunk(2, dim=-1)
        h = h + lin(act(inner) * gate, layer.mlp.Wo)
    h = layer_norm(h, base.final_norm)
    if cfg.classifier_pooling == "cls":
        pooled = h[:, 0]
    else:
        m = mask.to(h.dtype)[..., None]
        pooled = (h * m).sum(1) / m.sum(1)
    head = model.head
    pooled = layer_norm(activation(cfg.classifier_activation)(lin(pooled, head.dense)), head.norm)
    return Trace(lin(pooled, model.classifier), {None: layers})


# ------------------------------------------------------------------------------------------------ entry points
_FAMILIES = {
    "bert": _bert_like, "roberta": _bert_like, "distilbert": _distilbert, "bart": _bart_like,
    "marian": _bart_like, "gpt2": _gpt2, "gpt_neox": _gpt_neox, "opt": _opt, "llama": _llama_like,
    "mistral": _llama_like,
    "qwen2": _llama_like, "phi3": _llama_like, "mixtral": _llama_like, "qwen3_moe": _llama_like,
    "qwen3": _llama_like, "gpt_oss": _llama_like, "smollm3": _llama_like, "granite": _llama_like,
    "starcoder2": _llama_like, "qwen2_moe": _llama_like, "helium": _llama_like, "ernie4_5": _llama_like, "ministral": _llama_like, "seed_oss": _llama_like,
    "arcee": _llama_like, "apertus": _llama_like, "exaone4": _llama_like, "hunyuan_v1_dense": _llama_like,
    "nanochat": _llama_like, "glm": _llama_like, "glm4": _llama_like, "stablelm": _llama_like,
    "deepseek_v3": _deepseek_v3, "deepseek_v2": _deepseek_v3, "bloom": _bloom, "falcon": _falcon, "llama4_text": _llama4, "granitemoehybrid": _mamba_hybrid, "bamba": _mamba_hybrid, "cohere": _cohere_like, "cohere2": _cohere_like, "olmo": _olmo_like, "olmo2": _olmo_like, "olmo3": _olmo_like,
    **{model_type: _gated_deltanet_hybrid for model_type in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")},
    "nemotron_h": _nemotron_h,
    "gemma": _gemma_like, "gemma2": _gemma_like,
    "gemma3_text": _gemma_like,
    "t5": _t5, "modernbert": _modernbert,
}
FAMILIES = tuple(_FAMILIES)


def forward(model, inputs: dict, ablations=None) -> Trace:
    """The reference forward pass of ``model`` (a fixture's HF model class) on ``inputs`` (``input_ids``,
    ``attention_mask``; encoder-decoders also ``decoder_input_ids``, optionally ``decoder_attention_mask``).

    ablations: None; an :class:`Ablation` (one-grid models); or a dict ``{grid: Ablation}`` (encoder-decoders:
    ``"enc"``, ``"dec"``, ``"cross"``, any subset). Differentiable in the gates (and weights) under the caller's
    grad mode: importance scores are ``d loss / d gates`` of this forward.
    """
    family = model.config.model_type
    if family not in _FAMILIES:
        raise ValueError(f"no reference for model_type {family!r}; families: {FAMILIES}")
    if "attention_mask" not in inputs:
        inputs = {**inputs, "attention_mask": torch.ones_like(inputs["input_ids"])}
    trace = _FAMILIES[family](model, inputs, ablations)
    if not bool(torch.isfinite(trace.logits).all()):
        raise ValueError(f"{family}: the reference produced non-finite logits")
    return trace


def lm_loss(logits, input_ids, attention_mask=None):
    """Mean next-token cross-entropy of a causal LM over the predicted positions whose target is a real token
    (what HF returns as ``loss`` for ``labels=input_ids`` with padding set to -100); exp of it is perplexity."""
    targets = input_ids[:, 1:]
    real = torch.ones_like(targets, dtype=torch.bool) if attention_mask is None else attention_mask[:, 1:].bool()
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), targets, reduction="none")
    return losses[real].mean()


def pruned_llama_forward(model, inputs: dict, keep: dict[int, list[int]]) -> Trace:
    """The reference forward of a Llama-family model physically pruned to ``keep[layer]`` query heads (layers
    not in ``keep`` whole): rows of q and columns of o removed, key/value heads no kept head reads removed,
    uneven groups computed as they are. ``trace.grids[None][layer]`` is None for a layer left with no head."""
    heads = [prune_llama_heads(w, keep[i]) if i in keep else w for i, w in enumerate(llama_heads(model))]
    model_type = model.config.model_type
    if model_type in ("olmo2", "olmo3"):
        raise ValueError(f"{model_type}: its query/key norms span all heads, so it has no head-by-head pruning")
    forward_of = (_gemma_like if model_type in ("gemma", "gemma2", "gemma3_text")
                  else _olmo_like if model_type == "olmo"
                  else _llama4 if model_type == "llama4_text"
                  else _mamba_hybrid if model_type in ("granitemoehybrid", "bamba")
                  else _gated_deltanet_hybrid if model_type in GATED_ATTENTION
                  else _nemotron_h if model_type == "nemotron_h"
                  else _cohere_like if model_type in ("cohere", "cohere2") else _llama_like)
    return forward_of(model, inputs, None, heads=heads)


def head_means(model, inputs: dict) -> dict:
    """``{grid: [n_layers, n_heads, head_dim]}``: each head's mean context over the real (non-padding) query
    positions of ``inputs``, from an unablated reference forward. Decoder-side grids average over every decoder
    position (or those of ``decoder_attention_mask``)."""
    trace = forward(model, inputs)
    out = {}
    for kind, layers in trace.grids.items():
        q_mask = inputs.get("decoder_attention_mask", torch.ones_like(inputs["decoder_input_ids"])) \
            if kind in ("dec", "cross") else inputs["attention_mask"]
        w = q_mask.to(layers[0].contexts.dtype)[:, :, None, None]
        out[kind] = torch.stack([(t.contexts * w).sum((0, 1)) / w.sum() for t in layers])
    return out


def greedy(model, inputs: dict, n_new: int, ablations=None) -> torch.Tensor:
    """Greedy decoding by the reference, recomputing the whole prefix at every step (no cache: the truth a
    cached ``generate`` must match). Causal LMs: returns ``[batch, prompt + n_new]`` ids (prompt unpadded);
    encoder-decoders: the decoder ids ``[batch, 1 + n_new]``, starting from the decoder start token."""
    inputs = {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask")}
    if model.config.is_encoder_decoder:
        start = model.config.decoder_start_token_id
        seq = torch.full((inputs["input_ids"].shape[0], 1), start, dtype=torch.long)
        for _ in range(n_new):
            logits = forward(model, {**inputs, "decoder_input_ids": seq}, ablations).logits
            seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], 1)
        return seq
    seq = inputs["input_ids"]
    if "attention_mask" in inputs and not bool(inputs["attention_mask"].all()):
        raise ValueError("greedy: give unpadded prompts (equal lengths)")
    for _ in range(n_new):
        logits = forward(model, {"input_ids": seq}, ablations).logits
        seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return seq


def hf_greedy(model, inputs: dict, n_new: int) -> torch.Tensor:
    """HF ``generate``, greedy, with its KV cache, exactly ``n_new`` new tokens (no end-of-sequence stop, no
    forced or suppressed tokens), in :func:`greedy`'s layout."""
    cfg = model.config
    inputs = {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask")}  # the decoder starts afresh
    # generate() fills settings left at None from the model's own generation config, so a stop token is switched
    # off there (and put back after)
    gen = model.generation_config
    saved = {k: getattr(gen, k, None) for k in ("eos_token_id", "forced_eos_token_id", "forced_bos_token_id")}
    try:
        for k in saved:
            setattr(gen, k, None)
        with torch.no_grad():
            out = model.generate(**inputs, do_sample=False, num_beams=1, max_new_tokens=n_new, min_new_tokens=0,
                                 use_cache=True, pad_token_id=cfg.pad_token_id if cfg.pad_token_id is not None else 0)
    finally:
        for k, v in saved.items():
            setattr(gen, k, v)
    if out.shape[1] != (1 if cfg.is_encoder_decoder else inputs["input_ids"].shape[1]) + n_new:
        raise AssertionError(f"generate returned {out.shape[1]} positions, expected {n_new} new tokens")
    return out
