"""Head gates through hooks (transformers v5 has no ``head_mask``).

A gate ``g[l, h]`` scales head ``h`` of layer ``l`` between its real output (``g = 1``) and an
ablated output (``g = 0``). The hook sits on each layer's attention output projection, whose input is
the concatenation of the per-head contexts ``[batch, seq, n_heads * head_dim]``:

    context_h  <-  g * context_h + (1 - g) * ablated_h

(each semantics is an object of ``ablations`` that applies this formula itself; :func:`ablate_heads` and
``mask_sweep`` call it). ``ablation=`` takes a name below or a ``HeadAblation`` object (a new semantics is one
class: see ``ablations``).

Ablation semantics (``ablation=``):

- ``"zero"``    ablated_h = 0. Michel et al. 2019 and the old Hugging Face ``head_mask`` (post-softmax
                probabilities times the mask); equals physically removing the head.
- ``"uniform"`` ablated_h = the mean of the head's value vectors over the non-padding tokens of the
                sentence, i.e. the head attends uniformly. Budhraja et al.'s BERT code (pre-softmax
                scores times 0) and Kovaleva et al.'s "disabled" heads. Attention dropout is not
                applied to the uniform part.
- ``"mean"``    ablated_h = the head's mean context over a reference set of tokens (mean-ablation),
                computed once by :func:`head_means` and passed as ``means=``.

Encoder-decoders (Marian, BART; see ``architecture``) have three grids of heads, and take gates as a dict
``{"enc": [L_enc, H], "dec": [L_dec, H], "cross": [L_dec, H]}``: encoder self-attention, decoder
self-attention and encoder-decoder attention. A type left out of the dict is not gated. Each type is hooked
the same way, on its own output projection (``self_attn.out_proj`` of the encoder and decoder layers,
``encoder_attn.out_proj`` of the decoder layers), so the gates also act inside ``model.generate()`` with a
KV cache: at every decoding step the hook scales the new positions' contexts. Ablations there:

- ``"zero"`` and ``"mean"``: all three types (``means`` is then a dict of ``[L, H, head_dim]`` by type).
- ``"uniform"``: ``"enc"`` only (uniform over the real source tokens). Not for ``"dec"`` (the uniform
  distribution of a causal head is over the visible prefix, whose values a KV cache holds outside the
  hook's reach) nor ``"cross"`` (with a KV cache the source values are projected once, at the first step):
  gating those types with ``"uniform"`` is an error. Nest two blocks to mix ablations, e.g. ``"uniform"`` on
  ``"enc"`` and ``"zero"`` on ``"dec"``.

Causal LMs (GPT-2; GPT-NeoX; OPT; Llama, Mistral, Mixtral, Qwen2, Qwen3, Gemma, Phi-3, gpt-oss) have one grid of QUERY
heads, hooked on the output projection as above (grouped-query attention: the gates act per query head; heads sharing
a key/value head are gated independently). ``"zero"`` and ``"mean"`` work everywhere, also inside ``generate()``.
``"uniform"`` is uniform over the keys each query may SEE, by the family adapter's rule (padding, the causal prefix,
Mistral/Qwen sliding windows), with each query head reading its own key/value head's values; it needs a full-sequence
forward (the visible prefix is in the KV cache, out of the hooks' reach), so a forward that continues a non-empty KV
cache (``generate()`` after its first step) raises ValueError instead of computing a wrong answer. A gated attention
(Qwen3-Next, Qwen3.5: each head's context times the sigmoid of its own gate before the output projection) is gated
after its output gate, where its context enters the output projection; ``"uniform"``'s replacement (the mean of the
visible values) is multiplied by the head's own output gate, as the head's attention output would be.

Gates may require grad: the hooks are differentiable in ``g`` (gradient importance, L0 gates).
Hooks are removed when the ``with`` block ends, also on error.

Precision: the hooks cast the gates (and ``means``) to the dtype of the activations they scale, so under bf16
autocast (``precision``) the gated contexts stay bfloat16 and a gate of 0 still zeroes its head exactly (gates
between 0 and 1 are rounded to bfloat16's 8-bit mantissa there); float32 activations see the float32 gates
unchanged. Gradients flow back through the cast to float32 gates.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator, Literal

import torch
from torch import nn

from headprune_utils.model.ablations import ABLATIONS, HeadAblation, UniformAblation, as_ablation
from headprune_utils.model.architecture import (
    ACTIVE_GATES_ATTR, attention_kinds, attention_sites, family_of, grid_name, head_shape, head_shapes, kept_heads,
    key_mask_source, key_padding_mask_from_call, kind_dict, kind_value, query_side,
)

__all__ = ["ABLATIONS", "ABLATION_VERSION", "UNIFORM_KINDS", "Ablation", "HeadAblation", "ablate_heads", "as_ablation",
           "capture_head_contexts", "check_gates", "head_gates", "head_means"]

Ablation = Literal["zero", "uniform", "mean"]  # the names public functions take (or a HeadAblation object)
UNIFORM_KINDS: tuple[str, ...] = UniformAblation.kinds  # encoder-decoder types that support ablation="uniform"
# Bump when what a semantics computes changes (:func:`ablate_heads`): every study's fingerprint holds it, so
# results made under the old meaning of an ablation are then stale.
ABLATION_VERSION = 1


def ablate_heads(
    context: torch.Tensor,
    gates: torch.Tensor,
    ablation: Ablation | HeadAblation,
    *,
    values: torch.Tensor | None = None,
    key_mask: torch.Tensor | None = None,
    means: torch.Tensor | None = None,
    rows: torch.Tensor | None = None,
    visible: torch.Tensor | None = None,
) -> torch.Tensor:
    """What gated heads output: ``context * g + (1 - g) * ablated`` (``"zero"``: ``context * g``), as the
    ablation object (``ablations``) computes it. Pure.

    The one place of the ablation arithmetic: :func:`head_gates`' hooks and ``mask_sweep``'s layer step call it.

    context: ``[batch, seq, heads, head_dim]`` per-head contexts of the heads being gated (the model's dtype).
    gates: ``[heads]`` the gate of each of those heads, in ``context``'s dtype and device.
    values (``"uniform"``): ``[batch, seq_k, heads, head_dim]`` the heads' value vectors; the ablated output is
        their mean over the real keys, ``sum_j w_j v_j / max(sum_j w_j, 1)`` with ``w = key_mask``
        ``[batch, seq_k]`` (1 = real token), or the plain mean over ``seq_k`` when ``key_mask`` is None.
    means (``"mean"``): ``[heads, head_dim]`` the heads' mean contexts (from :func:`head_means`).
    rows: ``[batch']`` only when ``context`` is packed, ``[batch', 1, heads, head_dim]`` with one row per token
        (``mask_sweep``): the sentence (index into ``values``' batch) of each row.
    visible (``"uniform"`` in causal attention): ``[batch, seq_q, seq_k]`` bool, the keys each query may see (the
        adapter's rule: padding, causal prefix, sliding window); the ablated output of query ``i`` is then the
        mean of the values of its visible keys (``values`` one per query head), instead of one mean per sentence.
    Returns ``context``'s shape and dtype. Differentiable in ``gates``.
    """
    return as_ablation(ablation).apply(context, gates, values=values, key_mask=key_mask, means=means, rows=rows,
                                       visible=visible)


def _as_grid(gates, shape: tuple[int, int], name: str, allow_out_of_range: bool = False) -> torch.Tensor:
    if gates is None:
        raise ValueError(f"{name} is None: give a [n_layers, n_heads] = {list(shape)} tensor of gate values "
                         "(1 = the head kept, 0 = removed)")
    if not isinstance(gates, torch.Tensor):
        try:
            gates = torch.as_tensor(gates, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"{name} must be a [n_layers, n_heads] = {list(shape)} grid of numbers, got "
                             f"{type(gates).__name__} ({exc})") from None
    if gates.is_complex():
        raise ValueError(f"{name} must be real numbers, got dtype {gates.dtype}")
    if gates.device.type == "meta":
        raise ValueError(f"{name} is on the meta device (a tensor without values): give gates with values "
                         "(they may be on the CPU; they are moved to each layer's device)")
    if tuple(gates.shape) != shape:
        raise ValueError(f"{name} must have shape [n_layers, n_heads] = {list(shape)}, got {list(gates.shape)}")
    g = gates.detach()
    finite = torch.isfinite(g)
    if not bool(finite.all()):
        bad = [tuple(int(i) for i in x) for x in torch.nonzero(~finite)[:5]]
        raise ValueError(f"{name} must be finite; NaN or inf at (layer, head) {bad}")
    if not allow_out_of_range and bool(((g < 0) | (g > 1)).any()):
        raise ValueError(f"{name} must lie in [0, 1] (1 = the head kept, 0 = removed), got values from "
                         f"{float(g.min()):g} to {float(g.max()):g}; pass allow_out_of_range=True to scale heads "
                         "beyond that on purpose")
    return gates


def check_gates(model: nn.Module, gates, allow_out_of_range: bool = False):
    """``gates`` as tensors of the model's head shape: one ``[n_layers, n_heads]`` tensor, or for an
    encoder-decoder a dict ``{kind: [n_layers, n_heads]}`` over a subset of ``("enc", "dec", "cross")``.
    Every gate must be finite and, unless ``allow_out_of_range``, in [0, 1] (ValueError naming the grid).
    Tensors are returned as given (a ``requires_grad`` handle stays valid)."""
    by_kind = kind_dict(model, gates, "gates", hint=', {"enc": [L_enc, H], "dec": [L_dec, H], "cross": [L_dec, H]} '
                                                 "(a type left out is not gated)")
    shapes = head_shapes(model)
    return kind_value(model, {k: _as_grid(g, shapes[k], grid_name("gates", k), allow_out_of_range)
                              for k, g in by_kind.items()})


def _check_means(model: nn.Module, grids: dict, means, name: str = "mean") -> dict:
    """``means`` by grid key (``None`` for one-grid encoders), each ``[n_layers, n_heads, head_dim]``."""
    if means is None:
        raise ValueError(f'ablation="{name}" needs means= (compute them with head_means(model, batches))')
    by_kind = kind_dict(model, means, "means", hint=", like its gates", extra_kinds_ok=True)
    missing = sorted(set(grids) - set(by_kind))
    if missing:
        raise ValueError(f"means lack the gated attention type(s) {missing}")
    for k in grids:
        shape = head_shape(model, k)
        dims = sorted({int(site.head_dim) for site in attention_sites(model, k)})
        want = list(shape) + (dims if len(dims) == 1 else ["head_dim"])
        got = tuple(torch.as_tensor(by_kind[k]).shape)
        if len(got) != 3 or got[:2] != shape or (len(dims) == 1 and got[2] != dims[0]):
            raise ValueError(f"{grid_name('means', k)} must be [n_layers, n_heads, head_dim] = {want}, got "
                             f"{list(got)} (head_means(model, batches) computes them)")
        finite = torch.isfinite(torch.as_tensor(by_kind[k]))
        if not bool(finite.all()):
            bad = sorted({tuple(int(i) for i in x[:2]) for x in torch.nonzero(~finite)})[:5]
            raise ValueError(f"{grid_name('means', k)} must be finite; NaN or inf at (layer, head) {bad} (every head's "
                             "mean enters the output, kept heads' too: recompute them with head_means)")
    return by_kind


@contextmanager
def head_gates(
    model: nn.Module,
    gates,
    ablation: Ablation | HeadAblation = "zero",
    means=None,
    allow_out_of_range: bool = False,
) -> Iterator:
    """Apply ``gates`` ([n_layers, n_heads], original head ids) to ``model`` inside the block.

    Gates must be finite and in [0, 1] (1 = kept, 0 = removed, between: scaled); ``allow_out_of_range=True``
    lets research code scale heads beyond that (e.g. amplify a head with 2). The gate of a head that pruning removed
    is ignored: it has no output left to scale (so a mask over original ids, or L0 gates sampling every head, apply
    to a pruned model as they are). Not to be nested with pruning: ``prune_heads`` inside the block is refused.

    Encoder-decoders: ``gates`` is a dict by attention type (``"enc"``, ``"dec"``, ``"cross"``; any subset),
    see the module docstring for the ablations each type supports.
    ``means``: ``[n_layers, n_heads, head_dim]`` from :func:`head_means` (a dict of them by type for
    encoder-decoders), required for ``"mean"`` and read by it only (the other ablations leave them unread, so one
    loop may pass them with every ablation).
    Yields ``gates`` as checked (the same tensor objects, so callers can keep a handle on ``requires_grad`` ones).
    The gates are read at every forward, not copied: changing them in place inside the block changes the gating
    (what a training loop over gate values relies on), and their values are checked when the block opens only.
    """
    abl = as_ablation(ablation)
    gates = check_gates(model, gates, allow_out_of_range)
    grids = kind_dict(model, gates, "gates")
    unsupported = [k for k in grids if not abl.supports(k)]
    if unsupported:
        raise ValueError(
            f'ablation="{abl.name}" is implemented for the attention type(s) {abl.kinds} only, not {unsupported} '
            '(decoder self-attention is causal and, like encoder-decoder attention, reads values from a KV cache '
            'during generation); gate those types with "zero" or "mean" in a separate head_gates block'
        )
    means_by = _check_means(model, grids, means, abl.name) if abl.needs_means else {}

    handles: list[torch.utils.hooks.RemovableHandle] = []
    pushed = False
    state: dict = {}  # per-forward captures: key padding mask per kind, value projections per (kind, layer)
    family = family_of(model)

    def make_mask_hook(kind):
        def capture_mask(module, args, kwargs):
            problem = family.visibility_problem(model, kwargs)
            if problem and not family.plain_attention(model, kind):
                raise ValueError(f'ablation="{abl.name}" needs the keys each query may see: {problem}')
            state[("key_mask", kind)] = key_padding_mask_from_call(args, kwargs)
            state[("cached", kind)] = _cached_positions(kwargs)

        return capture_mask

    def make_capture_hook(part, key):
        def hook(module, args, output):
            state[(part,) + key] = output

        return hook

    def causal_uniform(site, raw_values: torch.Tensor, b: int, s: int, n_present: int, device) -> dict:
        """Values per query head and the keys each query sees, for "uniform" in causal (or windowed, or
        grouped) attention: by the adapter's rule."""
        kind = site.kind
        cached = state.get(("cached", kind), 0)
        key_mask = state.get(("key_mask", kind))
        if cached or (key_mask is not None and key_mask.shape[1] != s):
            raise ValueError(
                f'ablation="{abl.name}" in this attention needs a full-sequence forward: the keys a query may see '
                f"are the whole visible prefix, but this forward (layer {site.layer}) computes {s} new position(s) "
                f"after {cached or key_mask.shape[1] - s} cached one(s) (generate() or a KV cache). Gate with "
                '"zero" or "mean" during cached generation, or recompute the full prefix (use_cache=False)')
        values = family.split_values(site, raw_values)  # [b, s_k, n_kv, d]
        values = values.index_select(2, family.site_kv_index(site, n_present).to(values.device))
        visible = family.visible_keys(model, site, key_mask, b, s, values.shape[1], device=device)
        return {"values": values, "visible": visible}

    def make_gate_hook(site, ids: list[int]):
        kind, layer, head_dim = site.kind, site.layer, site.head_dim
        causal = not family.plain_attention(model, kind)  # the adapter says which keys a query sees
        g_all = grids[kind]
        index = torch.tensor(ids, dtype=torch.long)
        key = (kind, layer)

        def hook(module, args):
            ctx = args[0]
            b, s, _ = ctx.shape
            ctx4 = ctx.view(b, s, len(ids), head_dim)
            g = g_all[layer].to(device=ctx.device, dtype=ctx.dtype).index_select(0, index.to(ctx.device))
            needs = {}
            if abl.needs_values and causal:
                needs.update(causal_uniform(site, state.pop(("value",) + key), b, s, len(ids), ctx.device))
            elif abl.needs_values:
                needs["values"] = state.pop(("value",) + key).view(b, s, len(ids), head_dim)
                needs["key_mask"] = state.get(("key_mask", kind))
            if abl.needs_means:
                needs["means"] = means_by[kind][layer].to(device=ctx.device, dtype=ctx.dtype).index_select(
                    0, index.to(ctx.device))
            if abl.gated_by_output and family.output_gated(site):  # Qwen3-Next: the replacement gated as the head
                needs["out_gate"] = family.output_gate(site, state.pop(("query",) + key))
            out = abl.apply(ctx4, g, **needs)
            return (out.reshape(b, s, -1),) + tuple(args[1:])

        return hook

    try:
        for kind in grids:
            if abl.needs_values:
                # the key padding mask of the attention being gated (an encoder-decoder's encoder runs on its own
                # inside generate())
                handles.append(key_mask_source(model, kind).register_forward_pre_hook(make_mask_hook(kind),
                                                                                      with_kwargs=True))
            kept = kept_heads(model, kind)
            for site in attention_sites(model, kind):
                ids = kept[site.layer]
                if not ids:
                    continue
                if abl.needs_values:
                    handles.append(site.value.register_forward_hook(make_capture_hook("value", (kind, site.layer))))
                if abl.gated_by_output and family.output_gated(site):
                    handles.append(site.query.register_forward_hook(make_capture_hook("query", (kind, site.layer))))
                hook = make_gate_hook(site, ids)
                handles.append(site.out_proj.register_forward_pre_hook(hook))
        entry = (abl, grids)
        setattr(model, ACTIVE_GATES_ATTR, getattr(model, ACTIVE_GATES_ATTR, []) + [entry])  # prune_heads, maps
        pushed = True
        yield gates
    finally:
        for h in handles:
            h.remove()
        state.clear()
        if pushed:  # this block's entry only, found by identity: blocks left out of order (an ExitStack, manual
            # __exit__) remove their own, never an inner block's (an error before it was recorded: nothing)
            left = [e for e in getattr(model, ACTIVE_GATES_ATTR, []) if e is not entry]
            if left:
                setattr(model, ACTIVE_GATES_ATTR, left)
            elif hasattr(model, ACTIVE_GATES_ATTR):
                delattr(model, ACTIVE_GATES_ATTR)


def _cached_positions(kwargs: dict) -> int:
    """How many positions the KV cache a base model was called with already holds (0: none, or no cache)."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    if cache is None or not hasattr(cache, "get_seq_length"):
        return 0
    return int(cache.get_seq_length())


@contextmanager
def capture_head_contexts(model: nn.Module) -> Iterator[dict]:
    """Record each layer's per-head context ``[batch, seq, n_present, head_dim]`` of the last forward.

    Keys: the layer index; for encoder-decoders ``(kind, layer)``. During generation with a KV cache each
    step overwrites the previous one's (``seq`` is then the new positions only).
    """
    store: dict = {}
    handles = []

    def make(key, head_dim: int):
        def hook(module, args):
            ctx = args[0]
            b, s, hd = ctx.shape
            store[key] = ctx.detach().view(b, s, hd // head_dim, head_dim)

        return hook

    try:
        for site in attention_sites(model):
            if kept_heads(model, site.kind)[site.layer]:
                handles.append(site.out_proj.register_forward_pre_hook(make(site.layer_key, site.head_dim)))
        yield store
    finally:
        for h in handles:
            h.remove()


def _target_mask(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """``[batch, tgt_len]`` 1 for the real target positions of a seq2seq batch (from ``decoder_attention_mask``,
    else ``labels != -100``, else every decoder input position)."""
    if batch.get("decoder_attention_mask") is not None:
        return batch["decoder_attention_mask"]
    if batch.get("labels") is not None:
        return (batch["labels"] != -100).long()
    return torch.ones_like(batch["decoder_input_ids"])


@torch.no_grad()
def head_means(model: nn.Module, batches: Iterable[dict[str, torch.Tensor]]):
    """Mean context of every head over the non-padding tokens of ``batches``.

    Returns ``[n_layers, n_heads, head_dim]`` (zeros for heads that are not present), for
    ``head_gates(..., ablation="mean", means=...)``. Batches are dicts of model inputs on the model's device.
    Encoder-decoders: a dict by attention type; ``"enc"`` heads are averaged over the real source tokens,
    ``"dec"`` and ``"cross"`` heads over the real target positions (batches then need ``labels``, padded with
    -100, or ``decoder_input_ids``; they are passed to the model as they are, teacher-forced).
    """
    kinds = attention_kinds(model)
    sides = {query_side(k) for k in kinds}  # "source": averaged over the input tokens; "target": target positions
    sites = attention_sites(model)
    keys = [s.layer_key for s in sites]
    head_dims = {s.layer_key: s.head_dim for s in sites}
    n_heads = {s.layer_key: head_shape(model, s.kind)[1] for s in sites}
    kept = {s.layer_key: kept_heads(model, s.kind)[s.layer] for s in sites}
    side_of = {s.layer_key: query_side(s.kind) for s in sites}
    total = {k: torch.zeros(n_heads[k], head_dims[k], dtype=torch.float64) for k in keys}
    count = {side: 0.0 for side in sides}
    was_training = model.training
    model.eval()
    try:
        with capture_head_contexts(model) as store:
            for batch in batches:
                # the target side runs teacher-forced on the batch as it is (labels make the decoder inputs)
                inputs = batch if "target" in sides else {k: v for k, v in batch.items() if k != "labels"}
                store.clear()
                model(**inputs)
                weights = {"source": inputs["attention_mask"].to(torch.float64)}  # [batch, seq]
                if "target" in sides:
                    weights["target"] = _target_mask(inputs).to(torch.float64)
                for name, w in weights.items():
                    count[name] += float(w.sum())
                for key, ctx in store.items():
                    w = weights[side_of[key]]
                    s = torch.einsum("bshd,bs->hd", ctx.to(torch.float64), w.to(ctx.device))
                    total[key][kept[key]] += s.cpu()
    finally:
        model.train(was_training)
    if any(count[side] == 0 for side in sides):
        raise ValueError("head_means got no tokens")

    def grid(kind) -> torch.Tensor:
        n = count[query_side(kind)]
        layer_keys = [s.layer_key for s in sites if s.kind == kind]
        return (torch.stack([total[k] for k in layer_keys]) / n).to(torch.float32)

    return kind_value(model, {kind: grid(kind) for kind in kinds})
