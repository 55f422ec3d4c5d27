"""Evaluate many head masks on the same data, sharing the work the masks have in common.

The plain way (:func:`plain_predict_masks`) runs one full forward per mask under
:func:`gates.head_gates`. For a sweep of masks over one dev set most of that work is repeated or wasted:

1. **Prefix sharing.** Masks whose rows ``0..l`` are identical give identical hidden states after layer
   ``l``. The masks form a prefix tree over their rows (the unpruned mask is one path of it; identical
   masks are one leaf); every tree node -- one layer under one row pattern, given its parent's hidden
   state -- is computed once per batch (depth first, so only one path of states is held).
2. **Pruned heads are not computed** (``ablation="zero"``). A node computes q/k/v and the attention only
   for the heads that one of its children keeps (gate > 0): the *union* over the children, so siblings
   that share the node's input share one attention computation; each child then projects only its own
   kept heads through the output projection (weights sliced per (layer, head set), cached for the call).
   A child that keeps no head of a layer gets the output projection's bias, as with a zero gate.
3. **Only what the classifier reads.** The sequence-classification heads of BERT, RoBERTa and ELECTRA
   read the first token's final hidden state only, so the last layer computes its query, output
   projection and feed-forward for token 0 alone (keys and values still for every token).
4. **No work on padding.** Hidden states are kept packed, ``[T, hidden]`` for the T real tokens of the
   batch, so the projections, LayerNorms and feed-forward skip the padding of each length-sorted batch;
   only the attention itself runs on the padded ``[B, heads, S, S]`` layout, with the model's mask.
   (Padding positions never influence real tokens: they are masked as keys.)

Items 3 and 4 are used only when the check below proves them for the model at hand.
``SweepOptions`` switches each piece off (to measure it; ``benchmarks/mask_sweep.py --breakdown``).

The ``"uniform"`` and ``"mean"`` ablations share prefixes and the node's attention too, and apply the
very formula of :func:`gates.head_gates` (:func:`gates.ablate_heads`) to every present head (no head
slicing: an ablated head is not zero there). DistilBERT (``transformer.layer``), decoders and any layer
layout the code does not know fall back to the plain path (one gated forward per mask), with a
``RuntimeWarning`` only when the layout looked supported but the check failed.

How the model is driven (transformers v5, eval mode, no weight is changed):

- per batch, one model call with the encoder's layer list swapped for a stub that records the first
  layer's input (the embeddings, after ELECTRA's projection) and the attention mask the model built
  (``sdpa``: boolean ``[B, 1, S, S]``; ``eager``: additive float ``[B, 1, S, S]``);
- the layers are then computed here from the layer modules' own sub-modules (q/k/v and output
  projection weights, the model's attention function from ``config._attn_implementation``, the
  ``LayerNorm`` s and feed-forward of each layer);
- the task head runs through a second model call with the layer list swapped for a stub that returns
  the final hidden states of all masks stacked along the batch (so the pooler / classification head /
  dropout of the family are the model's own).

The layer list is restored in ``finally``; no hook is left behind. Before the sweep, a check on up to 8
sentences of the data (spread over the lengths, so with padding) compares this decomposition (unpruned)
with the model's own forward: with unpadding, else without it (a task head that reads padding
positions), else the plain path is used (``RuntimeWarning``); then the token-0-only last layer is tried
the same way. "Agrees" means max |logit diff| <= 1000 float eps (relative to the largest logit).

Outputs equal the plain approach up to float rounding (sliced matrix products round differently;
float32 logits agree to ~1e-6, float64 to ~1e-15); predictions are identical unless two logits tie to
that precision.

Gates of heads that were physically removed (``pruning.prune_heads``) are ignored, as in ``head_gates``.
Masks are constants here (no gradients).

API (``masks``: ``{key: [n_layers, n_heads]}`` over ORIGINAL head ids, values in [0, 1], 1 = kept;
``means``: ``[n_layers, n_heads, head_dim]`` for ``ablation="mean"``; batches as ``training.predict``):

- :func:`predict_masks` -> ``{key: float64 [len(enc)]}``: class ids, or scores of a 1-logit head;
- :func:`logits_masks` -> ``{key: [len(enc), n_labels]}`` logits (model dtype, CPU), original order;
- :func:`evaluate_masks` -> ``{key: metrics}`` as ``training.evaluate(..., gates=mask)``;
- :func:`plain_predict_masks` / :func:`plain_logits_masks`: the plain baseline (benchmarks, tests);
- :func:`sweep_plan`: how many layer and head evaluations the tree saves; :func:`check_masks`.
"""
from __future__ import annotations

import sys
import warnings
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from headprune_utils.model.architecture import attention_sites, family_of, head_shape, kept_heads, layout_problem
from headprune_utils.model.families.base import PostNormLayer
from headprune_utils.model.ablations import HeadAblation, as_ablation
from headprune_utils.model.gates import Ablation, head_gates
from headprune_utils.tasks.batching import Encoded, collate, eval_batches, iterate
from headprune_utils.tasks.metrics import compute_metrics
from headprune_utils.train.training import NonFiniteError, check_finite_weights, model_device, predict

__all__ = [
    "SweepOptions",
    "check_masks",
    "logits_masks",
    "predict_masks",
    "evaluate_masks",
    "plain_logits_masks",
    "plain_predict_masks",
    "sweep_plan",
]


@dataclass(frozen=True)
class SweepOptions:
    """Switches for the shared evaluator (all on by default; off only to measure what each one buys).

    - ``slice_heads``: ``"zero"`` ablation computes only the kept heads (else every present head is
      computed and gated, as ``head_gates`` does).
    - ``share_attention``: a node computes the attention once for all its children (union of their
      heads); else once per child, for that child's heads only.
    - ``cls_only``: the last layer computes token 0 only, when the check proves that the task head reads
      token 0 only (``False``: never).
    - ``unpad``: the per-token work (projections, LayerNorm, feed-forward) runs on the real tokens only,
      not on the padding of each batch (the attention itself runs padded, as in the model).
    - ``check``: run the agreement check before the sweep (``False`` trusts the decomposition).
    """

    slice_heads: bool = True
    share_attention: bool = True
    cls_only: bool = True
    unpad: bool = True
    check: bool = True


# ----------------------------------------------------------------------------- validation
def check_masks(model: nn.Module, masks: Mapping[Hashable, torch.Tensor]) -> dict[Hashable, torch.Tensor]:
    """``masks`` as float tensors, each ``[n_layers, n_heads]`` (original head ids) with values in [0, 1].

    Raises ``ValueError`` naming the offending key.
    """
    if not isinstance(masks, Mapping):
        raise ValueError(f"masks must be a dict {{key: [n_layers, n_heads] tensor}}, got {type(masks).__name__}")
    shape = head_shape(model)
    out: dict[Hashable, torch.Tensor] = {}
    for key, m in masks.items():
        try:
            t = torch.as_tensor(m)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"mask {key!r} is not a tensor: {exc}") from exc
        if tuple(t.shape) != shape:
            raise ValueError(f"mask {key!r} must have shape [n_layers, n_heads] = {list(shape)}, got {list(t.shape)}")
        if t.is_complex():
            raise ValueError(f"mask {key!r} must be real, got {t.dtype}")
        if not t.is_floating_point():  # bool / integer 0-1 masks
            t = t.to(torch.float32)
        t = t.detach().cpu()
        if not bool(torch.isfinite(t).all()) or bool((t < 0).any()) or bool((t > 1).any()):
            raise ValueError(f"mask {key!r} must hold values in [0, 1] (1 = kept, 0 = pruned)")
        out[key] = t
    return out


def _check_ablation(model: nn.Module, ablation, means: torch.Tensor | None) -> HeadAblation:
    """The ablation object for ``ablation`` (a name or an object), its needs checked."""
    ablation = as_ablation(ablation)
    if ablation.needs_means:
        if means is None:
            raise ValueError(f'ablation="{ablation.name}" needs means= (compute them with gates.head_means(model, batches))')
        if tuple(means.shape[:2]) != head_shape(model):
            raise ValueError(f"means must be [n_layers, n_heads, head_dim], got {list(means.shape)}")
    return ablation


# ----------------------------------------------------------------------------- the prefix tree
class _Node:
    """A tree node at depth ``l`` stands for rows ``0..l-1``; ``children`` maps row ``l`` to a node."""

    __slots__ = ("children", "keys")

    def __init__(self):
        self.children: dict[tuple[float, ...], _Node] = {}
        self.keys: list[Hashable] = []  # at the leaves: the mask keys that end here


def _build_tree(masks: dict[Hashable, torch.Tensor], kept: list[list[int]]) -> _Node:
    """Rows are keyed by the gates of the PRESENT heads (in ``kept`` order): absent heads are ignored."""
    root = _Node()
    for key, m in masks.items():
        node = root
        for layer, ids in enumerate(kept):
            row = tuple(m[layer, ids].tolist()) if ids else ()
            node = node.children.setdefault(row, _Node())
        node.keys.append(key)
    return root


def sweep_plan(model: nn.Module, masks: Mapping[Hashable, torch.Tensor]) -> dict[str, int]:
    """How much the prefix tree and head slicing save for ``masks`` (layer and head counts).

    ``layer_evals_plain = n_masks * n_layers``; ``tree_nodes`` = distinct (layer, prefix) pairs the shared
    evaluator computes; ``heads_plain`` = present heads computed by the plain way (every present head of
    every layer of every mask); ``heads_kept`` = kept heads summed over tree nodes (per-child attention);
    ``heads_union`` = union of the children's kept heads summed over the nodes that have children.
    """
    masks = check_masks(model, masks)
    kept = kept_heads(model)
    root = _build_tree(masks, kept)
    n_present = sum(len(k) for k in kept)
    stats = {"masks": len(masks), "distinct_masks": 0, "layer_evals_plain": len(masks) * len(kept),
             "tree_nodes": 0, "heads_plain": len(masks) * n_present, "heads_kept": 0, "heads_union": 0}

    def walk(node: _Node, depth: int) -> None:
        if depth == len(kept):
            stats["distinct_masks"] += 1
            return
        union = set()
        for row, child in node.children.items():
            stats["tree_nodes"] += 1
            on = {i for i, g in enumerate(row) if g > 0}
            stats["heads_kept"] += len(on)
            union |= on
            walk(child, depth + 1)
        stats["heads_union"] += len(union)

    walk(root, 0)
    return stats


# ----------------------------------------------------------------------------- driving the model
class _Capture(nn.Module):
    """Stands in for the encoder's layers: records the first layer's inputs and passes them through."""

    def __init__(self):
        super().__init__()
        self.hidden: torch.Tensor | None = None
        self.attention_mask: torch.Tensor | None = None

    def forward(self, hidden_states, *args, **kwargs):
        self.hidden = hidden_states
        self.attention_mask = kwargs["attention_mask"] if "attention_mask" in kwargs else (args[0] if args else None)
        return hidden_states


class _Inject(nn.Module):
    """Stands in for the encoder's layers: returns the final hidden states computed here."""

    def __init__(self, hidden: torch.Tensor):
        super().__init__()
        self.hidden = hidden

    def forward(self, hidden_states, *args, **kwargs):
        if hidden_states.shape[:2] != self.hidden.shape[:2]:
            raise RuntimeError(f"tail call shape {tuple(hidden_states.shape)} != {tuple(self.hidden.shape)}")
        return self.hidden


def _layers_swapped(model: nn.Module, stub: nn.Module):
    """Within the block the model's layer list is ``[stub]`` (its family adapter swaps it; restored after)."""
    return family_of(model).layers_swapped(model, stub)


def _inputs(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in batch.items() if k != "labels"}


def _embed(model: nn.Module, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """First layer input ``[B, S, hidden]`` and the layers' attention mask (as the model builds it)."""
    cap = _Capture()
    with _layers_swapped(model, cap):
        model(**inputs)
    return cap.hidden, cap.attention_mask


def _head(model: nn.Module, inputs: dict[str, torch.Tensor], finals: list[torch.Tensor]) -> list[torch.Tensor]:
    """The task head's logits ``[B, n_labels]`` for each final hidden state ``[B, S', hidden]``.

    All are stacked along the batch and run through the model with the layers swapped out; ``S'`` is the
    full length or 1 (token 0 only), and the tail call's inputs are cut to it.
    """
    b, s1 = finals[0].shape[:2]
    stacked = torch.cat(finals, dim=0) if len(finals) > 1 else finals[0]
    tail = {k: v[:, :s1].repeat(len(finals), *([1] * (v.dim() - 1))) for k, v in inputs.items()}
    with _layers_swapped(model, _Inject(stacked)):
        logits = model(**tail).logits
    return list(logits.split(b, dim=0))


def _eager_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """BERT's eager attention (for families whose modelling file does not define its own)."""
    w = torch.matmul(query, key.transpose(2, 3)) * (scaling if scaling is not None else query.size(-1) ** -0.5)
    if attention_mask is not None:
        w = w + attention_mask
    w = nn.functional.softmax(w, dim=-1)
    return torch.matmul(w, value).transpose(1, 2).contiguous(), w


def _attention_function(model: nn.Module, self_attention: nn.Module):
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    eager = getattr(sys.modules.get(type(self_attention).__module__), "eager_attention_forward", _eager_attention)
    return ALL_ATTENTION_FUNCTIONS.get_interface(impl, eager) if impl != "eager" else eager


def _supported(model: nn.Module) -> bool:
    """Whether the family gives the layers by their parts and the model is laid out so
    (:func:`architecture.layout_problem`)."""
    return layout_problem(model) is None


# ----------------------------------------------------------------------------- one layer, many rows
@dataclass
class _Batch:
    """One batch as the layers see it. Hidden states are PACKED: ``[T, hidden]``, the real tokens only
    (row-major, so sentence by sentence), or all ``B * S`` positions when ``real`` is None."""

    b: int
    s: int
    mask: torch.Tensor | None  # the layers' attention mask as the model built it, e.g. [B, 1, S, S]
    mask_cls: torch.Tensor | None  # its rows for query token 0 only
    key_mask: torch.Tensor | None  # [B, S] input attention mask (1 = real token), for the uniform ablation
    real: torch.Tensor | None  # [T] flat positions b * S + s of the real tokens; None = every position
    cls: torch.Tensor  # [B] packed row of each sentence's token 0
    row_sentence: torch.Tensor  # [T] sentence of each packed row

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """``[T, C]`` -> ``[B, S, C]`` (zeros at padding)."""
        if self.real is None:
            return x.view(self.b, self.s, -1)
        out = x.new_zeros(self.b * self.s, x.shape[-1])
        out.index_copy_(0, self.real, x)
        return out.view(self.b, self.s, -1)

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, S, C]`` -> ``[T, C]``."""
        flat = x.reshape(self.b * self.s, -1)
        return flat if self.real is None else flat.index_select(0, self.real)


def _make_batch(x0: torch.Tensor, mask: torch.Tensor | None, key_mask: torch.Tensor | None,
                unpad: bool) -> tuple[_Batch, torch.Tensor]:
    """The batch description and the packed first-layer input ``[T, hidden]`` from ``x0`` ``[B, S, hidden]``."""
    b, s, h = x0.shape
    dev = x0.device
    mask_cls = mask[:, :, :1, :] if mask is not None and mask.dim() == 4 and mask.shape[-2] != 1 else mask
    real = None
    if unpad and key_mask is not None and bool(key_mask[:, 0].all()) and not bool(key_mask.all()):
        real = key_mask.reshape(-1).nonzero().squeeze(1).to(dev)
    if real is None:
        cls = torch.arange(b, device=dev) * s
        row_sentence = torch.arange(b * s, device=dev) // s
        x = x0.reshape(b * s, h)
    else:
        lengths = key_mask.sum(dim=1).to(dev)
        cls = torch.cumsum(lengths, 0) - lengths
        row_sentence = real // s
        x = x0.reshape(b * s, h).index_select(0, real)
    return _Batch(b, s, mask, mask_cls, key_mask, real, cls, row_sentence), x


class _LayerStep:
    """One encoder layer computed from its sub-modules for any set of present heads, on packed rows.

    Head positions (``pos``) index the PRESENT heads (``kept_heads(model)[layer]`` order). Sliced weights
    are cached per position tuple for the lifetime of the sweep.
    """

    def __init__(self, layer: PostNormLayer, n_present: int, head_dim: int, attn_fn, ablation: HeadAblation,
                 means_l: torch.Tensor | None):
        self.layer = layer
        self.sa = layer.attention
        self.n = n_present
        self.d = head_dim
        self.scaling = layer.scaling if layer.scaling is not None else head_dim**-0.5
        self.attn_fn = attn_fn
        self.ablation = ablation
        self.means_l = means_l  # [n_present, head_dim] in the model's dtype, or None
        # the feed-forward is per token: the layer's optional chunking (``chunk_size_feed_forward``) only
        # bounds memory and gives the same numbers, so the rows go through in one piece
        self._ffn = layer.ffn
        self._in: dict[tuple, tuple] = {}
        self._out: dict[tuple, tuple] = {}
        self._index: dict[tuple, torch.Tensor] = {}

    def _cols(self, pos: tuple[int, ...]) -> torch.Tensor:
        idx = self._index.get(pos)
        if idx is None:
            dev = self.layer.out.weight.device
            idx = (torch.tensor(pos, dtype=torch.long, device=dev)[:, None] * self.d
                   + torch.arange(self.d, device=dev)).reshape(-1)
            self._index[pos] = idx
        return idx

    def _in_weights(self, pos: tuple[int, ...], cls_only: bool):
        """Fused input projections for heads ``pos``: ``(Wqkv [3 n d, H], bqkv)``, or with ``cls_only``
        ``(Wq [n d, H], bq, Wkv [2 n d, H], bkv)`` (the query runs on token 0 only)."""
        w = self._in.get((pos, cls_only))
        if w is None:
            mods = (self.layer.query, self.layer.key, self.layer.value)
            idx = None if len(pos) == self.n else self._cols(pos)
            ws = [m.weight if idx is None else m.weight.index_select(0, idx) for m in mods]
            bs = [m.bias if m.bias is None or idx is None else m.bias.index_select(0, idx) for m in mods]
            if any(b is None for b in bs) and not all(b is None for b in bs):
                bs = [torch.zeros_like(w_[:, 0]) if b is None else b for w_, b in zip(ws, bs)]

            def cat(a):
                return None if a[0] is None else torch.cat(a)

            w = (ws[0], bs[0], cat(ws[1:]), cat(bs[1:])) if cls_only else (cat(ws), cat(bs))
            self._in[(pos, cls_only)] = w
        return w

    def _out_weights(self, pos: tuple[int, ...]):
        w = self._out.get(pos)
        if w is None:
            dense = self.layer.out
            w = (dense.weight if len(pos) == self.n else dense.weight.index_select(1, self._cols(pos)), dense.bias)
            self._out[pos] = w
        return w

    def attend(self, x: torch.Tensor, bt: _Batch, pos: tuple[int, ...], cls_only: bool):
        """Contexts of heads ``pos`` from packed ``x`` ``[T, hidden]``: ``[R, len(pos), d]`` with R = T, or
        R = B (token 0 of each sentence) when ``cls_only``; and the values ``[B, S, len(pos), d]``."""
        b, s, n, d = bt.b, bt.s, len(pos), self.d
        if cls_only:
            wq, bq, wkv, bkv = self._in_weights(pos, True)
            q = F.linear(x.index_select(0, bt.cls), wq, bq).view(b, 1, n, d).transpose(1, 2)
            kv = bt.pad(F.linear(x, wkv, bkv)).view(b, s, 2, n, d)
            k, v = kv[:, :, 0], kv[:, :, 1]
            mask = bt.mask_cls
        else:
            wqkv, bqkv = self._in_weights(pos, False)
            qkv = bt.pad(F.linear(x, wqkv, bqkv)).view(b, s, 3, n, d)
            q, k, v = qkv[:, :, 0].transpose(1, 2), qkv[:, :, 1], qkv[:, :, 2]
            mask = bt.mask
        ctx, _ = self.attn_fn(self.sa, q, k.transpose(1, 2), v.transpose(1, 2), mask, dropout=0.0,
                              scaling=self.scaling)  # [B, S_q, n, d]
        ctx = ctx.reshape(b, n * d) if cls_only else bt.unpad(ctx.reshape(b, s, n * d))
        return ctx.view(-1, n, d), v

    def finish(self, x: torch.Tensor, bt: _Batch, ctx: torch.Tensor | None, v: torch.Tensor | None,
               pos: tuple[int, ...], row: tuple[float, ...], cls_only: bool, slice_heads: bool) -> torch.Tensor:
        """The layer's output ``[R, hidden]`` for one child: gates ``row`` (over the present heads) applied
        to the contexts ``ctx`` ``[R, len(pos), d]`` of heads ``pos`` (a superset of the heads the row
        keeps), output projection, residual, LayerNorm, feed-forward."""
        xq = x.index_select(0, bt.cls) if cls_only else x
        r = xq.shape[0]
        dtype, dev = x.dtype, x.device
        if self.ablation.equals_removal and slice_heads:
            keep = tuple(p for p in pos if row[p] > 0)
            if not keep:  # the output projection of nothing: its bias (what a zero gate on every head gives)
                bias = self.layer.out.bias
                proj = bias.expand(r, -1) if bias is not None else xq.new_zeros(r, self.layer.out.out_features)
            else:
                c = ctx if keep == pos else ctx[:, [pos.index(p) for p in keep]]
                g = [row[p] for p in keep]
                if any(x_ != 1.0 for x_ in g):
                    c = self.ablation.apply(c.unsqueeze(1), torch.tensor(g, dtype=dtype, device=dev))  # [R, 1, k, d]
                w, bias = self._out_weights(keep)
                proj = F.linear(c.reshape(r, -1), w, bias)
        elif self.n == 0:
            proj = self.layer.out(xq.new_zeros(r, 0))
        else:
            # every present head, with head_gates' formula (gates.ablate_heads); the packed rows are its
            # [rows, 1, heads, head_dim] layout: one sentence per row (cls_only) or one token per row
            n, d = self.n, self.d
            if ctx is not None and len(pos) == n:
                full = ctx
            else:
                full = xq.new_zeros(r, n, d)
                if ctx is not None:
                    full[:, list(pos)] = ctx
            g = torch.tensor(row, dtype=dtype, device=dev)
            out = self.ablation.apply(full.unsqueeze(1), g, values=v, key_mask=bt.key_mask, means=self.means_l,
                                      rows=None if cls_only else bt.row_sentence)
            proj = self.layer.out(out.reshape(r, n * d))
        att = self.layer.norm(self.layer.dropout(proj) + xq)
        return self._ffn(att)


class _Sweeper:
    def __init__(self, model: nn.Module, ablation: HeadAblation | str, means: torch.Tensor | None,
                 options: SweepOptions):
        self.model = model
        self.ablation = ablation = as_ablation(ablation)
        self.options = options
        self.kept = kept_heads(model)
        head_dims = [site.head_dim for site in attention_sites(model)]
        dtype = next(model.parameters()).dtype
        device = model_device(model)
        self.steps = []
        for l, layer in enumerate(family_of(model).post_norm_layers(model)):
            ids = self.kept[l]
            m_l = means[l, ids].to(device=device, dtype=dtype) if ablation.needs_means and ids else None
            self.steps.append(_LayerStep(layer, len(ids), head_dims[l], _attention_function(model, layer.attention),
                                         ablation, m_l))
        self.unpad = options.unpad  # may be switched off by the check

    def _needed(self, rows: list[tuple[float, ...]], n: int) -> tuple[int, ...]:
        """Present-head positions whose context some row needs."""
        if n == 0:
            return ()
        abl = self.ablation
        if abl.needs_values or abl.reads_context or (abl.equals_removal and not self.options.slice_heads):
            return tuple(range(n))  # every present head enters the gate formula (uniform: its values too)
        return tuple(i for i in range(n) if any(r[i] > 0 for r in rows))

    def tree_logits(self, root: _Node, inputs: dict[str, torch.Tensor], cls_only: bool) -> dict[Hashable, torch.Tensor]:
        """Logits ``[B, n_labels]`` of every mask in the tree for one batch."""
        x0, mask = _embed(self.model, inputs)
        bt, x = _make_batch(x0, mask, inputs.get("attention_mask"), self.unpad)
        n_layers = len(self.steps)
        finals: list[torch.Tensor] = []
        leaf_keys: list[list[Hashable]] = []
        share = self.options.share_attention

        def visit(node: _Node, x: torch.Tensor, depth: int) -> None:
            step = self.steps[depth]
            last = cls_only and depth == n_layers - 1
            rows = list(node.children)
            shared = None
            if share or len(rows) == 1:
                pos = self._needed(rows, step.n)
                shared = (pos, *step.attend(x, bt, pos, last)) if pos else (pos, None, None)
            for row, child in node.children.items():
                if shared is not None:
                    pos, ctx, v = shared
                else:
                    pos = self._needed([row], step.n)
                    ctx, v = step.attend(x, bt, pos, last) if pos else (None, None)
                y = step.finish(x, bt, ctx, v, pos, row, last, self.options.slice_heads)
                if depth + 1 == n_layers:
                    finals.append(y.unsqueeze(1) if last else bt.pad(y))
                    leaf_keys.append(child.keys)
                else:
                    visit(child, y, depth + 1)

        visit(root, x, 0)
        out: dict[Hashable, torch.Tensor] = {}
        for keys, logits in zip(leaf_keys, _head(self.model, inputs, finals)):
            for k in keys:
                out[k] = logits
        return out


def _check_batch(enc: Encoded, device) -> dict[str, torch.Tensor]:
    """Up to 8 sentences spread over the length order (ragged, so with padding)."""
    order = np.argsort(-enc.lengths, kind="stable")
    pick = order[np.unique(np.linspace(0, len(order) - 1, num=min(8, len(order))).round().astype(int))]
    return collate(enc, pick, device)


def _agrees(a: torch.Tensor, b: torch.Tensor) -> bool:
    eps = torch.finfo(b.dtype).eps
    tol = min(1000 * eps, 5e-2) * max(1.0, float(b.abs().max()))
    return a.shape == b.shape and bool(torch.isfinite(a).all()) and float((a - b).abs().max()) <= tol


def _prepare(model, enc, ablation, means, options) -> tuple[_Sweeper | None, bool]:
    """A sweeper (or None: use the plain path) and whether the last layer may compute token 0 only.

    The check (unpruned, on up to 8 sentences of ``enc``) tries the layer decomposition with unpadding,
    then without (for a task head that reads padding positions), then the token-0-only last layer.
    """
    if not _supported(model):
        return None, False
    sweeper = _Sweeper(model, ablation, means, options)
    if not options.check:
        return sweeper, options.cls_only
    n_layers, n_heads = head_shape(model)
    tree = _build_tree({"ones": torch.ones(n_layers, n_heads)}, sweeper.kept)
    inputs = _inputs(_check_batch(enc, model_device(model)))
    problem = None
    with torch.no_grad():
        ref = model(**inputs).logits
        for unpad in ((True, False) if options.unpad else (False,)):
            sweeper.unpad = unpad
            try:
                full = sweeper.tree_logits(tree, inputs, cls_only=False)["ones"]
            except Exception as exc:  # noqa: BLE001 - any failure of the decomposition means: plain path
                problem = f"it failed: {exc!r}"
                break
            if _agrees(full, ref):
                problem = None
                break
            problem = f"it does not reproduce the model's logits (max |diff| {float((full - ref).abs().max()):.3g})"
        if problem is not None:
            warnings.warn(f"mask_sweep: the layer decomposition of {type(model).__name__}: {problem}; using "
                          "the plain path (one forward per mask)", RuntimeWarning, stacklevel=4)
            return None, False
        cls_only = False
        if options.cls_only:
            try:
                cls_only = _agrees(sweeper.tree_logits(tree, inputs, cls_only=True)["ones"], ref)
            except Exception:  # noqa: BLE001 - the head needs more than token 0
                cls_only = False
    return sweeper, cls_only


# ----------------------------------------------------------------------------- public API
@torch.no_grad()
def logits_masks(
    model: nn.Module,
    enc: Encoded,
    masks: Mapping[Hashable, torch.Tensor],
    batch_size: int = 32,
    ablation: Ablation = "zero",
    means: torch.Tensor | None = None,
    progress: bool = False,
    options: SweepOptions | None = None,
) -> dict[Hashable, torch.Tensor]:
    """Logits of the model under every mask, shared evaluation.

    masks: ``{key: [n_layers, n_heads]}`` gates over ORIGINAL head ids in [0, 1] (1 = kept); ``means``:
    ``[n_layers, n_heads, head_dim]`` for ``ablation="mean"`` (see ``gates.head_means``).
    Returns ``{key: [len(enc), n_labels]}`` (model dtype, on the CPU) in the original order of ``enc``,
    equal to ``model(**batch).logits`` under ``head_gates(model, mask, ablation, means)`` up to rounding.
    Batches are those of ``training.predict`` (``eval_batches``, length sorted). The model is put in eval
    mode for the call and its mode restored.
    """
    options = options or SweepOptions()
    masks = check_masks(model, masks)
    ablation = _check_ablation(model, ablation, means)
    was_training = model.training
    model.eval()
    try:
        if not masks or len(enc) == 0:
            n_labels = model.config.num_labels
            return {k: torch.empty(len(enc), n_labels) for k in masks}
        sweeper, cls_only = _prepare(model, enc, ablation, means, options)
        if sweeper is None:
            return plain_logits_masks(model, enc, masks, batch_size, ablation, means, progress)
        tree = _build_tree(masks, sweeper.kept)
        device = model_device(model)
        out: dict[Hashable, torch.Tensor] = {}
        batches = eval_batches(enc.lengths, batch_size)
        for index, batch in tqdm(iterate(enc, batches, device), total=len(batches), disable=not progress,
                                 desc="mask sweep", leave=False):
            got = sweeper.tree_logits(tree, _inputs(batch), cls_only)
            idx = torch.as_tensor(index)
            for k, logits in got.items():
                if k not in out:
                    out[k] = torch.empty(len(enc), logits.shape[-1], dtype=logits.dtype)
                out[k][idx] = logits.cpu()
        return {k: out[k] for k in masks}
    finally:
        model.train(was_training)


def _to_predictions(logits: torch.Tensor) -> np.ndarray:
    """As ``training.predict``: class ids, or float scores for a 1-logit regression head (float64 array)."""
    if logits.shape[-1] == 1:
        return logits.squeeze(-1).float().numpy().astype(np.float64)
    return logits.argmax(-1).numpy().astype(np.float64)


def predict_masks(
    model: nn.Module,
    enc: Encoded,
    masks: Mapping[Hashable, torch.Tensor],
    batch_size: int = 32,
    ablation: Ablation = "zero",
    means: torch.Tensor | None = None,
    progress: bool = False,
    options: SweepOptions | None = None,
) -> dict[Hashable, np.ndarray]:
    """``{key: predictions [len(enc)]}`` as ``training.predict`` gives them under each mask (class ids,
    or float scores for a regression head), in the original order; shared evaluation (module docstring)."""
    logits = logits_masks(model, enc, masks, batch_size, ablation, means, progress, options)
    return {k: _to_predictions(v) for k, v in logits.items()}


def evaluate_masks(
    model: nn.Module,
    enc: Encoded,
    task: str,
    masks: Mapping[Hashable, torch.Tensor],
    batch_size: int = 32,
    ablation: Ablation = "zero",
    means: torch.Tensor | None = None,
    progress: bool = False,
    options: SweepOptions | None = None,
) -> dict[Hashable, dict[str, float]]:
    """``{key: metrics}``: the task's metrics under each mask, as ``training.evaluate(..., gates=mask)`` (a model
    with non-finite weights, or non-finite predictions, are refused the same way: NonFiniteError)."""
    check_finite_weights(model)
    preds = predict_masks(model, enc, masks, batch_size, ablation, means, progress, options)
    labels = enc.labels
    out = {}
    for k, p in preds.items():
        if not np.isfinite(p).all():
            raise NonFiniteError(f"mask {k!r}: the model predicted non-finite values; not scored")
        if p.dtype != labels.dtype and not np.issubdtype(labels.dtype, np.floating):
            p = p.astype(labels.dtype)
        out[k] = compute_metrics(task, p, labels)
    return out


# ----------------------------------------------------------------------------- the plain baseline
def plain_predict_masks(
    model: nn.Module,
    enc: Encoded,
    masks: Mapping[Hashable, torch.Tensor],
    batch_size: int = 32,
    ablation: Ablation = "zero",
    means: torch.Tensor | None = None,
    progress: bool = False,
) -> dict[Hashable, np.ndarray]:
    """The plain approach: ``training.predict`` under ``head_gates(model, mask, ...)``, once per mask."""
    masks = check_masks(model, masks)
    ablation = _check_ablation(model, ablation, means)
    out = {}
    for k, m in tqdm(masks.items(), disable=not progress, desc="plain masks", leave=False):
        with head_gates(model, m, ablation=ablation, means=means):
            out[k] = predict(model, enc, batch_size)
    return out


@torch.no_grad()
def plain_logits_masks(
    model: nn.Module,
    enc: Encoded,
    masks: Mapping[Hashable, torch.Tensor],
    batch_size: int = 32,
    ablation: Ablation = "zero",
    means: torch.Tensor | None = None,
    progress: bool = False,
) -> dict[Hashable, torch.Tensor]:
    """Logits ``{key: [len(enc), n_labels]}`` the plain way (one gated forward per mask and batch)."""
    masks = check_masks(model, masks)
    ablation = _check_ablation(model, ablation, means)
    was_training = model.training
    model.eval()
    device = model_device(model)
    out: dict[Hashable, torch.Tensor] = {}
    try:
        for k, m in tqdm(masks.items(), disable=not progress, desc="plain masks", leave=False):
            res = None
            with head_gates(model, m, ablation=ablation, means=means):
                for index, batch in iterate(enc, eval_batches(enc.lengths, batch_size), device):
                    logits = model(**_inputs(batch)).logits
                    if res is None:
                        res = torch.empty(len(enc), logits.shape[-1], dtype=logits.dtype)
                    res[torch.as_tensor(index)] = logits.cpu()
            out[k] = res if res is not None else torch.empty(0, model.config.num_labels)
    finally:
        model.train(was_training)
    return out
