"""What a gated head outputs: ablation semantics as objects.

A gate ``g`` in [0, 1] mixes a head's real context with its ablated output::

    context_h  <-  g * context_h + (1 - g) * ablated_h

Each semantics is one :class:`HeadAblation` subclass that says what it needs (``needs_means``: each head's mean
context over data; ``needs_values``: the head's value vectors and the key mask of the keys a query may see),
whether a gate of 0 equals physically removing the head (``equals_removal``), which encoder-decoder attention types
it supports, whether its ablated output reads the head's own context (``reads_context``), and applies itself (:meth:`HeadAblation.apply`). Code that gates heads asks the object; a new
semantics is one new class added to :data:`ABLATION_OBJECTS`.

Public functions take the semantics by name (``"zero"``, ``"uniform"``, ``"mean"``) or as an object;
:func:`as_ablation` turns either into the object, once, at the edge.
"""
from __future__ import annotations

import torch


class HeadAblation:
    """One ablation semantics. Subclasses set the class attributes and implement :meth:`ablated`."""

    name: str = ""
    needs_means: bool = False  # ``means=`` [n_layers, n_heads, head_dim] (``gates.head_means``)
    needs_values: bool = False  # the heads' value vectors and the key padding mask of the attention
    equals_removal: bool = False  # a gate of 0 gives what the model gives with the head physically removed
    # whether ``ablated`` reads the head's own context: then a head gated to 0 must still be computed (the shared
    # mask sweep skips the attention of heads whose every gate is 0 otherwise)
    reads_context: bool = False
    # encoder-decoder attention types it supports (None: all); one-grid models always
    kinds: tuple[str, ...] | None = None
    # whether the replacement stands for an attention pattern's output, which a head's output gate (Qwen3-Next's
    # gated attention: ``context * sigmoid(gate)`` before the output projection) multiplies as it does the real one
    gated_by_output: bool = False

    def supports(self, kind: str | None) -> bool:
        return kind is None or self.kinds is None or kind in self.kinds

    def ablated(self, context: torch.Tensor, *, values=None, key_mask=None, means=None, rows=None,
                visible=None) -> torch.Tensor:
        """What the heads output at a gate of 0, broadcastable to ``context`` ``[batch, seq, heads, head_dim]``."""
        raise NotImplementedError

    def apply(self, context: torch.Tensor, gates: torch.Tensor, *, values: torch.Tensor | None = None,
              key_mask: torch.Tensor | None = None, means: torch.Tensor | None = None,
              rows: torch.Tensor | None = None, visible: torch.Tensor | None = None,
              out_gate: torch.Tensor | None = None) -> torch.Tensor:
        """``context * g + (1 - g) * ablated`` (see ``gates.ablate_heads`` for the arguments; ``out_gate``: the
        heads' output gates, broadcastable to ``context``, which multiply a replacement that is
        :attr:`gated_by_output`). Differentiable in ``gates``."""
        g = gates.view(*([1] * (context.dim() - 2)), -1, 1)  # [1, 1, heads, 1]
        extra = {} if visible is None else {"visible": visible}
        replacement = self.ablated(context, values=values, key_mask=key_mask, means=means, rows=rows, **extra)
        if out_gate is not None and self.gated_by_output:
            replacement = replacement * out_gate
        return context * g + (1 - g) * replacement

    def attention_under_gate(self, probs: torch.Tensor, gates: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """The attention maps ``probs`` ``[batch, heads, q, k]`` of heads gated by ``gates`` ``[heads]`` (``visible``
        ``[batch, q, k]``: the keys each query may see). The default: unchanged, as a semantics that scales or
        replaces a head's OUTPUT leaves what it attends to."""
        return probs

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))


class ZeroAblation(HeadAblation):
    """ablated_h = 0: Michel et al. 2019 and the old Hugging Face ``head_mask``; equals removing the head."""

    name = "zero"
    equals_removal = True

    def ablated(self, context, **_):
        return torch.zeros_like(context)

    def apply(self, context, gates, **_):
        g = gates.view(*([1] * (context.dim() - 2)), -1, 1)
        return context * g


class UniformAblation(HeadAblation):
    """ablated_h = the mean of the head's value vectors over the keys a query may see (the head attends
    uniformly): Budhraja et al.'s BERT code and Kovaleva et al.'s "disabled" heads. For a bidirectional encoder the
    visible keys are the real (non-padding) tokens of the sentence; in causal attention (one-grid causal LMs) they
    are what ``visible`` ``[batch, seq_q, seq_k]`` says (the family adapter's rule: padding, the causal prefix,
    sliding windows), so each query gets its own mean (``values`` then one per query head)."""

    name = "uniform"
    needs_values = True
    gated_by_output = True  # the head attends uniformly; a gated attention's output gate still applies
    kinds = ("enc",)  # decoder self-attention (causal, cached values) and cross attention are not implemented

    def attention_under_gate(self, probs, gates, visible):
        """``g * probs + (1 - g) * uniform`` over the visible keys: what the gated head's output averages."""
        uniform = (visible.to(probs.dtype) / visible.sum(-1, keepdim=True).clamp(min=1))[:, None]
        g = gates.to(device=probs.device, dtype=probs.dtype).view(1, -1, 1, 1)
        return g * probs + (1 - g) * uniform

    def ablated(self, context, *, values=None, key_mask=None, rows=None, visible=None, **_):
        if visible is not None:
            w = visible.to(values.dtype)
            w = w / w.sum(dim=-1, keepdim=True).clamp_min(1.0)  # [batch, seq_q, seq_k]
            return torch.einsum("bqk,bkhd->bqhd", w, values)
        if key_mask is None:
            out = values.mean(dim=1, keepdim=True)  # [batch, 1, heads, head_dim]
        else:
            w = key_mask.to(values.dtype).view(values.shape[0], values.shape[1], 1, 1)
            out = (values * w).sum(dim=1, keepdim=True) / w.sum(dim=1, keepdim=True).clamp_min(1.0)
        if rows is not None:
            out = out.index_select(0, rows)
        return out


class MeanAblation(HeadAblation):
    """ablated_h = the head's mean context over a reference set of tokens (mean-ablation), from ``means=``."""

    name = "mean"
    needs_means = True

    def ablated(self, context, *, means=None, **_):
        return means  # [heads, head_dim], broadcast over batch and seq


ABLATION_OBJECTS: dict[str, HeadAblation] = {a.name: a for a in (ZeroAblation(), UniformAblation(), MeanAblation())}
ABLATIONS: tuple[str, ...] = tuple(ABLATION_OBJECTS)


def as_ablation(ablation) -> HeadAblation:
    """The semantics object for a name (``"zero"``, ``"uniform"``, ``"mean"``) or an object (returned as is);
    ``ValueError`` naming the choices for anything else."""
    if isinstance(ablation, HeadAblation):
        return ablation
    if isinstance(ablation, str) and ablation in ABLATION_OBJECTS:
        return ABLATION_OBJECTS[ablation]
    raise ValueError(f"unknown ablation {ablation!r}; choose one of {ABLATIONS}")
