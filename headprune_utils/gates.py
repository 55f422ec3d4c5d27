"""Head gates through hooks (transformers v5 has no ``head_mask``).

A gate ``g[l, h]`` scales head ``h`` of layer ``l`` between its real output (``g = 1``) and an
ablated output (``g = 0``). The hook sits on each layer's attention output projection, whose input is
the concatenation of the per-head contexts ``[batch, seq, n_heads * head_dim]``:

    context_h  <-  g * context_h + (1 - g) * ablated_h

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

Gates may require grad: the hooks are differentiable in ``g`` (gradient importance, L0 gates).
Hooks are removed when the ``with`` block ends, also on error.
"""
from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from typing import Iterable, Iterator, Literal

import torch
from torch import nn

from .architecture import (
    SEQ2SEQ_KINDS,
    _base,
    attention_sites,
    head_shape,
    is_encoder_decoder,
    kept_heads,
    key_padding_mask_from_call,
)

Ablation = Literal["zero", "uniform", "mean"]
ABLATIONS: tuple[str, ...] = ("zero", "uniform", "mean")
UNIFORM_KINDS: tuple[str, ...] = ("enc",)  # encoder-decoder types that support ablation="uniform"


def _as_grid(gates, shape: tuple[int, int], name: str) -> torch.Tensor:
    if not isinstance(gates, torch.Tensor):
        gates = torch.as_tensor(gates, dtype=torch.float32)
    if tuple(gates.shape) != shape:
        raise ValueError(f"{name} must have shape [n_layers, n_heads] = {list(shape)}, got {list(gates.shape)}")
    return gates


def check_gates(model: nn.Module, gates):
    """``gates`` as tensors of the model's head shape: one ``[n_layers, n_heads]`` tensor, or for an
    encoder-decoder a dict ``{kind: [n_layers, n_heads]}`` over a subset of ``("enc", "dec", "cross")``.
    Tensors are returned as given (a ``requires_grad`` handle stays valid)."""
    if is_encoder_decoder(model):
        if not isinstance(gates, Mapping):
            raise ValueError(
                "an encoder-decoder model takes gates as a dict by attention type, "
                '{"enc": [L_enc, H], "dec": [L_dec, H], "cross": [L_dec, H]} (a type left out is not gated); '
                f"got {type(gates).__name__}"
            )
        unknown = sorted(set(gates) - set(SEQ2SEQ_KINDS))
        if unknown:
            raise ValueError(f"unknown attention type(s) {unknown} in gates; choose from {SEQ2SEQ_KINDS}")
        shapes = head_shape(model)
        return {k: _as_grid(g, shapes[k], f'gates["{k}"]') for k, g in gates.items()}
    if isinstance(gates, Mapping):
        raise ValueError("this model has one grid of heads: pass gates as one [n_layers, n_heads] tensor, not a dict")
    return _as_grid(gates, head_shape(model), "gates")


def _check_means(model: nn.Module, grids: dict, means) -> dict:
    """``means`` by grid key (``None`` for one-grid encoders), each ``[n_layers, n_heads, head_dim]``."""
    if means is None:
        raise ValueError('ablation="mean" needs means= (compute them with head_means(model, batches))')
    if is_encoder_decoder(model):
        if not isinstance(means, Mapping):
            raise ValueError('an encoder-decoder model takes means as a dict by attention type, like its gates')
        missing = sorted(set(grids) - set(means))
        if missing:
            raise ValueError(f"means lack the gated attention type(s) {missing}")
        by_kind = dict(means)
    else:
        by_kind = {None: means}
    for k in grids:
        shape = head_shape(model, k)
        if tuple(by_kind[k].shape[:2]) != shape:
            what = "means" if k is None else f'means["{k}"]'
            raise ValueError(f"{what} must be [n_layers, n_heads, head_dim] with [n_layers, n_heads] = {list(shape)}, "
                             f"got {list(by_kind[k].shape)}")
    return by_kind


@contextmanager
def head_gates(
    model: nn.Module,
    gates,
    ablation: Ablation = "zero",
    means=None,
) -> Iterator:
    """Apply ``gates`` ([n_layers, n_heads], original head ids) to ``model`` inside the block.

    Encoder-decoders: ``gates`` is a dict by attention type (``"enc"``, ``"dec"``, ``"cross"``; any subset),
    see the module docstring for the ablations each type supports.
    ``means``: ``[n_layers, n_heads, head_dim]`` from :func:`head_means` (a dict of them by type for
    encoder-decoders), required for ``"mean"``.
    Yields ``gates`` as checked (the same tensor objects, so callers can keep a handle on ``requires_grad`` ones).
    """
    if ablation not in ABLATIONS:
        raise ValueError(f"unknown ablation {ablation!r}; choose one of {ABLATIONS}")
    gates = check_gates(model, gates)
    grids = gates if isinstance(gates, dict) else {None: gates}
    if ablation == "uniform":
        unsupported = [k for k in grids if k is not None and k not in UNIFORM_KINDS]
        if unsupported:
            raise ValueError(
                f'ablation="uniform" is implemented for the attention type(s) {UNIFORM_KINDS} only, not {unsupported} '
                '(decoder self-attention is causal and, like encoder-decoder attention, reads values from a KV cache '
                'during generation); gate those types with "zero" or "mean" in a separate head_gates block'
            )
    means_by = _check_means(model, grids, means) if ablation == "mean" else {}

    handles: list[torch.utils.hooks.RemovableHandle] = []
    state: dict = {}  # per-forward captures: key padding mask, value projections per (kind, layer)

    def capture_mask(module, args, kwargs):
        state["key_mask"] = key_padding_mask_from_call(args, kwargs)

    def make_value_hook(key):
        def hook(module, args, output):
            state[("value",) + key] = output

        return hook

    def make_gate_hook(kind, layer: int, head_dim: int, ids: list[int]):
        g_all = grids[kind]
        index = torch.tensor(ids, dtype=torch.long)
        key = (kind, layer)

        def hook(module, args):
            ctx = args[0]
            b, s, _ = ctx.shape
            ctx4 = ctx.view(b, s, len(ids), head_dim)
            g = g_all[layer].to(device=ctx.device, dtype=ctx.dtype).index_select(0, index.to(ctx.device))
            g4 = g.view(1, 1, -1, 1)
            if ablation == "zero":
                out = ctx4 * g4
            elif ablation == "uniform":
                v = state.pop(("value",) + key).view(b, s, len(ids), head_dim)
                key_mask = state.get("key_mask")
                if key_mask is None:
                    u = v.mean(dim=1, keepdim=True)
                else:
                    w = key_mask.to(v.dtype).view(b, s, 1, 1)
                    u = (v * w).sum(dim=1, keepdim=True) / w.sum(dim=1, keepdim=True).clamp_min(1.0)
                out = ctx4 * g4 + (1 - g4) * u
            else:
                m = means_by[kind][layer].to(device=ctx.device, dtype=ctx.dtype).index_select(0, index.to(ctx.device))
                out = ctx4 * g4 + (1 - g4) * m.view(1, 1, len(ids), head_dim)
            return (out.reshape(b, s, -1),) + tuple(args[1:])

        return hook

    try:
        if ablation == "uniform":
            # the key padding mask of the attention being gated: the encoder's input mask for "enc" (the encoder
            # runs on its own inside generate()), the base model's for one-grid encoders
            source = _base(model).encoder if is_encoder_decoder(model) else _base(model)
            handles.append(source.register_forward_pre_hook(capture_mask, with_kwargs=True))
        for kind in grids:
            kept = kept_heads(model, kind)
            for site in attention_sites(model, kind):
                ids = kept[site.layer]
                if not ids:
                    continue
                if ablation == "uniform":
                    handles.append(site.value.register_forward_hook(make_value_hook((kind, site.layer))))
                hook = make_gate_hook(kind, site.layer, site.head_dim, ids)
                handles.append(site.out_proj.register_forward_pre_hook(hook))
        yield gates
    finally:
        for h in handles:
            h.remove()
        state.clear()


@contextmanager
def capture_head_contexts(model: nn.Module) -> Iterator[dict]:
    """Record each layer's per-head context ``[batch, seq, n_present, head_dim]`` of the last forward.

    Keys: the layer index; for encoder-decoders ``(kind, layer)``. During generation with a KV cache each
    step overwrites the previous one's (``seq`` is then the new positions only).
    """
    store: dict = {}
    handles = []
    seq2seq = is_encoder_decoder(model)

    def make(key, head_dim: int):
        def hook(module, args):
            ctx = args[0]
            b, s, hd = ctx.shape
            store[key] = ctx.detach().view(b, s, hd // head_dim, head_dim)

        return hook

    try:
        for site in attention_sites(model):
            if kept_heads(model, site.kind)[site.layer]:
                key = (site.kind, site.layer) if seq2seq else site.layer
                handles.append(site.out_proj.register_forward_pre_hook(make(key, site.head_dim)))
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
    seq2seq = is_encoder_decoder(model)
    sites = attention_sites(model)
    keys = [(s.kind, s.layer) if seq2seq else s.layer for s in sites]
    head_dims = {k: s.head_dim for k, s in zip(keys, sites)}
    n_heads = {k: head_shape(model, s.kind)[1] for k, s in zip(keys, sites)}
    kept = {k: kept_heads(model, s.kind)[s.layer] for k, s in zip(keys, sites)}
    total = {k: torch.zeros(n_heads[k], head_dims[k], dtype=torch.float64) for k in keys}
    count = {"enc": 0.0, "tgt": 0.0}
    was_training = model.training
    model.eval()
    try:
        with capture_head_contexts(model) as store:
            for batch in batches:
                inputs = batch if seq2seq else {k: v for k, v in batch.items() if k != "labels"}
                store.clear()
                model(**inputs)
                weights = {"enc": inputs["attention_mask"].to(torch.float64)}  # [batch, seq]
                if seq2seq:
                    weights["tgt"] = _target_mask(inputs).to(torch.float64)
                for name, w in weights.items():
                    count[name] += float(w.sum())
                for key, ctx in store.items():
                    w = weights["enc" if not seq2seq or key[0] == "enc" else "tgt"]
                    s = torch.einsum("bshd,bs->hd", ctx.to(torch.float64), w.to(ctx.device))
                    total[key][kept[key]] += s.cpu()
    finally:
        model.train(was_training)
    if count["enc"] == 0 or (seq2seq and count["tgt"] == 0):
        raise ValueError("head_means got no tokens")

    def grid(kind) -> torch.Tensor:
        n = count["enc" if kind in (None, "enc") else "tgt"]
        layer_keys = [k for k in keys if (k[0] if seq2seq else None) == kind]
        return (torch.stack([total[k] for k in layer_keys]) / n).to(torch.float32)

    if seq2seq:
        return {kind: grid(kind) for kind in SEQ2SEQ_KINDS}
    return grid(None)
