"""Per-head attention maps, whatever the attention implementation, and Jensen-Shannon distances between them.

Transformers v5 returns attention probabilities only from the eager implementation, and not for heads that
were physically pruned. :func:`attention_maps` recomputes them instead from what each layer's own query and
key projections output during a normal forward (captured with forward hooks), so it works with ``sdpa``,
eager or any other backend, inside ``head_gates`` blocks, and on pruned models:

    A[b, h, i, j] = softmax_j( q_h(x_i) . k_h(x_j) * head_dim**-0.5 ),   j over the real (non-padding) keys

exactly as BERT, RoBERTa, ELECTRA and DistilBERT compute them (padded keys get probability 0; rows of padded
QUERY positions are, as in the models, distributions over the real keys, so they are not NaN — mask them
out yourself, as :func:`head_js` does). Attention dropout is not applied (the forward runs in eval mode).

Encoder-decoders (Marian, BART): ``kind="enc"`` gives the ENCODER self-attention maps (the same formula: their
attention scales ``q . k`` by ``head_dim**-0.5`` and masks padded source keys); only the encoder runs, on
``input_ids``/``attention_mask`` (decoder inputs in the batch are ignored). Decoder self-attention (causal)
and encoder-decoder attention maps are not implemented for them.

T5: all three grids (the adapter's ``map_kinds``). Scores are unscaled plus each head's relative position bias
(what the attention module returned as its stack's bias, the columns of the layer's own kept heads); ``"dec"``
(causal, keys = the decoder positions) and ``"cross"`` (keys = the source tokens, padding excluded) run the whole
model on the batch (with ``decoder_input_ids``), and give ``[batch, n_heads, target_len, key_len]`` maps.

Causal LMs (GPT-2; GPT-NeoX; OPT; Llama, Mistral, Mixtral, Qwen2, Qwen3, Gemma, Phi-3, gpt-oss) and ModernBERT
(rotary, local layers): the queries and keys are placed as the model places them (rotary positions applied with the
angles the attention module was called with), each query head is paired with the key/value head it reads
(grouped-query attention), the scores are scaled by the module's own scaling, and key ``j`` is visible from query
``i`` by the family adapter's rule (not padding, causal ``j <= i``, within a sliding window): invisible keys get
probability exactly 0. gpt-oss's heads each have a learned sink logit in their softmax (``Family.score_sink``): a row
of such a head's map is its attention over the keys and sums to less than 1 (the rest went to the sink, which has no
value). Maps are of a full-sequence forward (no KV cache). A query that sees no key at all (a left-padded position of
a causal model) gets a row of zeros; mask padded queries out, as :func:`head_js` does.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

from headprune_utils.model.architecture import (
    active_gates, attention_kinds, attention_sites, family_of, grid_forward, head_shape, kept_heads, key_mask_source,
    key_padding_mask_from_call, query_side,
)

MAP_KINDS: tuple[str, ...] = ("enc",)  # encoder-decoder attention types whose maps are implemented


def _check_map_kind(model: nn.Module, kind: str | None) -> None:
    kinds = attention_kinds(model)
    map_kinds = family_of(model).map_kinds(model.config)
    if kind in kinds and (kind is None or kind in map_kinds):
        return
    if None in kinds:
        raise ValueError(f"kind={kind!r} is for encoder-decoder models; this model has one grid of heads (kind=None)")
    if tuple(map_kinds) == MAP_KINDS:
        raise ValueError(f"attention maps of an encoder-decoder need kind= one of {MAP_KINDS} (encoder "
                         f"self-attention); got {kind!r} (decoder and encoder-decoder maps are not implemented)")
    raise ValueError(f"attention maps of this model need kind= one of {tuple(map_kinds)}; got {kind!r}")


@contextmanager
def capture_queries_keys(model: nn.Module, kind: str | None = None) -> Iterator[dict]:
    """Record, for the next forward, each layer's query and key projections and the key padding mask.

    Yields a dict filled during the forward: ``("query", l)`` and ``("key", l)`` -> ``[batch, seq,
    n_present * head_dim]`` (detached; layers with no head left are absent) and ``"key_mask"`` -> the
    ``[batch, seq]`` attention mask the base model (encoder-decoders, ``kind="enc"``: the encoder) was called
    with (``None`` when not given). Hooks are removed when the block ends, also on error.
    """
    store: dict = {}
    handles = []

    def capture_mask(module, args, kwargs):
        problem = family.visibility_problem(model, kwargs)
        if problem and causal:
            raise ValueError(f"attention maps need the keys each query may see: {problem}")
        mask = key_padding_mask_from_call(args, kwargs)
        ids = kwargs.get("input_ids", args[0] if args else None)
        if isinstance(mask, torch.Tensor) and isinstance(ids, torch.Tensor) and mask.shape[1] != ids.shape[1]:
            raise ValueError(f"attention maps need a full-sequence forward: attention_mask of shape "
                             f"{list(mask.shape)} for inputs of shape {list(ids.shape)} (a column per position)")
        store["key_mask"] = mask

    def make_call(layer: int):
        def hook(module, args, kwargs):
            store[("call", layer)] = {k: v for k, v in kwargs.items() if k == "position_embeddings"}

        return hook

    def make_extras(site):
        def hook(module, args, kwargs, output):
            extras = family.call_extras(site, kwargs, output)
            if extras:
                store.setdefault(("call", site.layer), {}).update(extras)

        return hook

    def make(name: str, layer: int):
        def hook(module, args, output):
            store[(name, layer)] = output.detach()

        return hook

    _check_map_kind(model, kind)
    family = family_of(model)
    causal = not family.plain_attention(model, kind)
    try:
        if query_side(kind) == "source":  # decoder-side grids: attention_maps takes the masks from the batch
            handles.append(key_mask_source(model, kind).register_forward_pre_hook(capture_mask, with_kwargs=True))
        for site in attention_sites(model, kind):
            if site.query is None or site.key is None:
                continue
            if causal:  # what the attention module gets from outside (rotary angles), or returns (T5's bias)
                handles.append(site.module.register_forward_pre_hook(make_call(site.layer), with_kwargs=True))
                handles.append(site.module.register_forward_hook(make_extras(site), with_kwargs=True))
            handles.append(site.query.register_forward_hook(make("query", site.layer)))
            handles.append(site.key.register_forward_hook(make("key", site.layer)))
        yield store
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def attention_maps(model: nn.Module, batch: dict[str, torch.Tensor], kind: str | None = None) -> list[torch.Tensor]:
    """Attention probabilities of every head on ``batch``, one ``[batch, n_heads, seq, seq]`` tensor per layer.

    Heads are in ORIGINAL ids; heads that are physically absent are all NaN. ``batch`` holds model inputs
    (``labels`` are ignored); the maps are on the model's device, in its dtype promoted to at least float32.
    Works inside ``head_gates``: the maps then are those of the gated model (a head gated by ``g`` under
    ``"uniform"`` attends ``g * A + (1 - g) * uniform``; ``"zero"`` and ``"mean"`` replace a head's output, not its
    attention, so its own map stays, while later layers see the gated model). The model's mode is restored.
    Encoder-decoders: ``kind="enc"`` (encoder self-attention; only the encoder runs, on ``input_ids`` and
    ``attention_mask``), ``seq`` = source length.
    """
    _check_map_kind(model, kind)
    n_layers, n_heads = head_shape(model, kind)
    kept = kept_heads(model, kind)
    sites = attention_sites(model, kind)
    if kind == "enc":
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask") if k in batch}
        forward = grid_forward(model, kind)
    else:
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        forward = model
    ids = inputs["input_ids"] if "input_ids" in inputs else inputs["inputs_embeds"]
    b, s = ids.shape[:2]
    if b == 0 or s == 0:
        raise ValueError(f"attention_maps: an empty batch (input of shape {list(ids.shape)}): no token to attend from")
    was_training = model.training
    model.eval()
    try:
        with capture_queries_keys(model, kind) as store:
            forward(**inputs)
    finally:
        model.train(was_training)

    key_mask = store.get("key_mask")
    n_q = n_k = s
    if query_side(kind) == "target":  # decoder self-attention or cross attention: queries are the decoder positions
        key_mask = inputs.get("decoder_attention_mask" if kind == "dec" else "attention_mask")
        captured = [(store[("query", x.layer)], store[("key", x.layer)]) for x in sites if ("query", x.layer) in store]
        if not captured:
            raise ValueError(f"attention maps of {kind!r}: no layer has a head left")
        n_q, n_k = captured[0][0].shape[1], captured[0][1].shape[1]
    dtype = torch.promote_types(next(model.parameters()).dtype, torch.float32)
    family = family_of(model)
    causal = not family.plain_attention(model, kind)  # placed by the adapter (rotary, groups, causal, windows)
    maps = []
    for site in sites:
        layer = site.layer
        q, k = store.get(("query", layer)), store.get(("key", layer))
        device = q.device if q is not None else ids.device
        out = torch.full((b, n_heads, n_q, n_k), float("nan"), dtype=dtype, device=device)
        if q is not None and kept[layer] and causal:
            visible = family.visible_keys(model, site, key_mask, b, n_q, k.shape[1], device=device)
            probs = _causal_probs(model, family, site, q, k, store.get(("call", layer)), visible, len(kept[layer]),
                                  dtype)
        elif q is not None and kept[layer]:
            d = site.head_dim
            q4 = q.to(dtype).view(b, s, -1, d).transpose(1, 2)  # [b, H_present, s, d]
            k4 = k.to(dtype).view(b, s, -1, d).transpose(1, 2)
            scores = torch.matmul(q4, k4.transpose(-1, -2)) * d**-0.5  # [b, H_present, s, s]
            visible = torch.ones(b, s, s, dtype=torch.bool, device=device)
            if key_mask is not None:
                visible = visible & key_mask.to(device).bool().view(b, 1, s)
                scores = scores.masked_fill(~visible[:, None], torch.finfo(dtype).min)
            probs = torch.softmax(scores, dim=-1)
        if q is not None and kept[layer]:
            out[:, kept[layer]] = _under_gates(model, kind, layer, kept[layer], probs, visible)
        maps.append(out)
    if len(maps) != n_layers:
        raise RuntimeError(f"expected {n_layers} layers, found {len(maps)}")
    rows = inputs.get("decoder_attention_mask") if query_side(kind) == "target" else key_mask
    for layer, a in enumerate(maps):  # a present head is finite where a query is real; an absent one all NaN
        bad = [kept[layer][j] for j in faulty_heads(a[:, kept[layer]], rows, absent_ok=False)] if kept[layer] else []
        if bad:
            raise ValueError(
                f"attention_maps: layer {layer}, heads {bad} (present) have NaN or infinite attention weights in "
                "rows of real queries: a numerical fault of the model or its inputs (weights with NaN, a "
                "half-precision overflow); left as they are, the scores would read them as heads pruned away")
    return maps


def _under_gates(model, kind, layer: int, present: list[int], probs: torch.Tensor,
                   visible: torch.Tensor) -> torch.Tensor:
    """The present heads' maps ``probs`` under the gates of the head_gates blocks open on ``model``, innermost last,
    as each block's semantics says (``HeadAblation.attention_under_gate``: ``"uniform"`` mixes in the uniform
    attention over the visible keys; ``"zero"`` and ``"mean"`` replace a head's OUTPUT, not its attention)."""
    for ablation, grids in active_gates(model):
        if kind in grids:
            g = torch.as_tensor(grids[kind]).detach()[layer, present]
            probs = ablation.attention_under_gate(probs, g, visible)
    return probs


def _causal_probs(model, family, site, q, k, call, visible, n_present: int, dtype) -> torch.Tensor:
    """``[batch, n_present, seq, seq]`` probabilities of the present heads of one layer that the adapter places
    (causal, rotary, grouped or windowed attention; see the module docstring); ``visible`` ``[batch, seq, keys]``."""
    q4, k4 = family.queries_keys(site, q, k, call)
    q4, k4 = q4.to(dtype), k4.to(dtype)
    k4 = k4.index_select(1, family.site_kv_index(site, n_present).to(k4.device))  # one key head per query head
    scores = torch.matmul(q4, k4.transpose(-1, -2)) * family.score_scale(site)
    cap = family.score_softcap(site)
    if cap is not None:  # Gemma 2: the scaled scores soft-capped before the mask
        scores = torch.tanh(scores / cap) * cap
    bias = family.score_bias(site, call)
    if bias is not None:
        scores = scores + bias.to(device=scores.device, dtype=dtype)
    scores = scores.masked_fill(~visible[:, None].to(scores.device), torch.finfo(dtype).min)
    sink = family.score_sink(site)
    if sink is None:
        probs = torch.softmax(scores, dim=-1)
    else:  # gpt-oss: each head's sink logit joins the softmax as one more column, dropped after it
        column = sink.detach().to(device=scores.device, dtype=dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        probs = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]
    # a query that sees no key at all (a LEFT-padded position of a causal model) has no distribution: its row is 0
    # (a softmax over the masked scores alone would spread it evenly over padding and future keys)
    return probs * visible.any(-1)[:, None, :, None].to(dtype)


def smooth(p: torch.Tensor, eps: float, support: torch.Tensor | None = None) -> torch.Tensor:
    """Mix ``p`` with the uniform distribution: ``(1 - eps) * p + eps * u`` (Clark et al.'s smoothing).

    ``u`` is uniform over the last dim, or over the entries where ``support`` (broadcastable to ``p``) is
    true, e.g. the real keys of a padded sentence.
    """
    if eps == 0:
        return p
    if support is None:
        u = torch.full_like(p, 1.0 / p.shape[-1])
    else:
        w = support.to(p.dtype).expand_as(p)
        u = w / w.sum(dim=-1, keepdim=True)
    return (1 - eps) * p + eps * u


def js_divergence(p: torch.Tensor, q: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """Jensen-Shannon divergence, in nats (natural log), between distributions along the last dim.

    ``JS(p, q) = KL(p || m) / 2 + KL(q || m) / 2`` with ``m = (p + q) / 2``; between 0 and ``ln 2``,
    symmetric, 0 iff ``p == q``; equals ``scipy.spatial.distance.jensenshannon(p, q) ** 2``. ``p`` and ``q``
    must each sum to 1 along the last dim (they are not renormalised); zeros are fine (``0 log 0 = 0``).
    ``eps > 0`` first smooths both with the uniform distribution over the last dim as Clark et al. (2019)
    ``head_distances.py`` do with 0.001: ``p <- eps / n + (1 - eps) * p``.
    Shapes: ``p``, ``q`` ``[..., n]`` (broadcastable) -> ``[...]``.
    """
    p, q = smooth(p, eps), smooth(q, eps)
    m = (p + q) / 2
    kl_pm = (torch.xlogy(p, p) - torch.xlogy(p, m)).sum(-1)
    kl_qm = (torch.xlogy(q, q) - torch.xlogy(q, m)).sum(-1)
    return ((kl_pm + kl_qm) / 2).clamp_min(0.0)


def faulty_heads(a: torch.Tensor, queries: torch.Tensor | None, absent_ok: bool = True) -> list[int]:
    """The heads (indices into dim 1 of ``a``, ``[batch, heads, seq, keys]``) with a NaN or infinite weight in a row
    of a real query (``queries`` bool ``[batch, seq]``; None or another shape: every row), except, with
    ``absent_ok``, those NaN at every position (absent heads). See :func:`check_maps`."""
    if not a.is_floating_point():
        return []
    absent = torch.isnan(a).transpose(0, 1).flatten(1).all(dim=1)  # [H]
    bad = ~torch.isfinite(a)
    if queries is not None and tuple(queries.shape) == (a.shape[0], a.shape[2]):
        bad = bad & queries.to(a.device).bool()[:, None, :, None]
    faulty = bad.transpose(0, 1).flatten(1).any(dim=1)
    if absent_ok:
        faulty = faulty & ~absent
    return faulty.nonzero().flatten().tolist()


def check_maps(maps, queries: torch.Tensor | None, what: str, absent_ok: bool = True) -> None:
    """Raise ValueError naming the layer and heads where a head of ``maps`` (per layer ``[batch, heads, seq, keys]``,
    or one such tensor of flat heads) has a NaN or infinite weight in a row of a real query (``queries``: bool
    ``[batch, seq]``, 1 = looked at; None or another shape: every row) without being ABSENT. An absent head (pruned
    away: :func:`attention_maps` marks it) is NaN at every position; anything else non-finite is a numerical fault
    (NaN weights, a half-precision overflow, hand-made maps) that the scores would otherwise read as an absent head
    (a NaN mean) or as a real one (an argmax that picks the NaN). ``absent_ok=False``: every head is present (the
    maps' maker knows which are), so one NaN everywhere is a fault too."""
    stacked = isinstance(maps, torch.Tensor)
    for i, a in enumerate([maps] if stacked else list(maps)):
        heads = faulty_heads(a, queries, absent_ok)
        if heads:
            where = f"flat heads {heads}" if stacked else f"layer {i}, heads {heads}"
            raise ValueError(
                f"{what}: {where} have NaN or infinite attention weights in rows of real queries"
                + (" but are not absent (an absent, pruned head is NaN at every position)" if absent_ok else
                   " though present") + ": a numerical fault of the model, its inputs or "
                "the maps (weights with NaN, a half-precision overflow), not a pruned head")


ROW_SUM_TOL = 1e-4  # a row of a map counts as a distribution when it sums to 1 within this


def require_distributions(maps, attention_mask: torch.Tensor, what: str) -> None:
    """Raise ValueError unless every row of a real query (``attention_mask`` ``[batch, seq]``, 1 = real) of every
    present head of ``maps`` (per layer ``[batch, heads, seq, keys]``, or one such tensor; all-NaN heads are absent)
    sums to 1 within :data:`ROW_SUM_TOL`. Entropy, the JS divergence and the redundancy measures treat a row as a
    distribution over the keys; a head with an attention sink (gpt-oss) gives part of each row to no key."""
    stacked = isinstance(maps, torch.Tensor)  # [batch, N, seq, keys]: heads of all layers, flat
    layers = [maps] if stacked else list(maps)
    check_maps(maps, attention_mask, what)
    for i, a in enumerate(layers):
        real = attention_mask.to(a.device).bool()
        if real.shape != (a.shape[0], a.shape[2]):
            return  # the caller's own shape check names the problem
        sums = a.sum(-1)  # [batch, heads, seq]
        rows = real[:, None, :].expand_as(sums) & ~torch.isnan(sums)
        off = (sums - 1).abs().masked_fill(~rows, 0.0)
        if bool((off > ROW_SUM_TOL).any()):
            heads = sorted({int(h) for h in (off > ROW_SUM_TOL).nonzero()[:, 1].tolist()})
            lo, hi = float(sums[:, heads][rows[:, heads]].min()), float(sums[:, heads][rows[:, heads]].max())
            where = f"flat heads {heads}" if stacked else f"layer {i}, heads {heads}"
            raise ValueError(
                f"{what}: rows of real queries of {where} sum to {lo:.4g}..{hi:.4g}, not 1: a row must be a "
                "distribution over the keys (a model with attention sinks, such as gpt-oss, gives part of each row "
                "to the sink, which is no key; its maps are attention weights, not distributions)")


def head_js(
    maps_a: list[torch.Tensor], maps_b: list[torch.Tensor], attention_mask: torch.Tensor, eps: float = 0.0
) -> torch.Tensor:
    """Mean JS divergence (nats) between two models' maps of each head on the same sentences.

    maps_a, maps_b: per layer ``[batch, n_heads, seq, seq]`` (from :func:`attention_maps`, same batch).
    attention_mask: ``[batch, seq]``, 1 = real token. The mean is over all real QUERY tokens of the batch
    (pooled, so longer sentences weigh more); to pool several batches, weight each result by
    ``attention_mask.sum()``. ``eps`` smooths both maps with the uniform distribution over each sentence's
    real keys (Clark et al. use 0.001). Returns ``[n_layers, n_heads]`` float; NaN where a head is absent
    (all-NaN map) in either model.
    """
    if len(maps_a) != len(maps_b):
        raise ValueError(f"different numbers of layers: {len(maps_a)} and {len(maps_b)}")
    for a in (*maps_a, *maps_b):
        if tuple(attention_mask.shape) != (a.shape[0], a.shape[2]):
            raise ValueError(f"head_js: attention_mask of shape {list(attention_mask.shape)} for maps of "
                             f"{a.shape[0]} sentences of {a.shape[2]} queries (it must be [batch, seq] of the maps)")
    if not bool(attention_mask.bool().any()):
        raise ValueError("head_js: attention_mask is all 0: no query token to average over")
    require_distributions(maps_a, attention_mask, "head_js")
    require_distributions(maps_b, attention_mask, "head_js")
    rows = []
    for a, b in zip(maps_a, maps_b):
        if a.shape != b.shape:
            raise ValueError(f"maps of different shapes: {list(a.shape)} and {list(b.shape)}")
        dtype = torch.promote_types(a.dtype, b.dtype)
        mask = attention_mask.to(a.device).bool()  # [batch, seq]
        real_keys = mask[:, None, None, :]  # [batch, 1, 1, seq]
        pa = smooth(a.to(dtype), eps, real_keys)
        pb = smooth(b.to(dtype).to(a.device), eps, real_keys)
        js = js_divergence(pa, pb)  # [batch, H, seq]
        w = mask[:, None, :].to(dtype)  # real queries
        js = torch.where(mask[:, None, :], js, torch.zeros_like(js))
        mean = (js * w).sum(dim=(0, 2)) / w.sum(dim=(0, 2)).clamp_min(1.0)  # [H]
        absent = torch.isnan(a).flatten(2).all(-1).all(0) | torch.isnan(b).flatten(2).all(-1).all(0)
        rows.append(torch.where(absent, torch.full_like(mean, float("nan")), mean))
    return torch.stack(rows)
