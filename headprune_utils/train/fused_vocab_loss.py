"""The label-smoothed cross-entropy of a language-model head, computed with the output projection a block of rows
at a time, never the whole logits (``NMTTrainConfig.fused_loss``).

A translation step at ``standard-next``'s size (d_model 128, 6,000 words, ~1,500 target tokens) spends about half
its time on the vocabulary: the logits ``[tokens, vocabulary]`` (36 MB) are written by the output projection, read
and written again by the bias, the log-softmax, its backward, the zeros of the NLL's gradient and the sum of the two
gradients of the smoothed loss. On a CPU these passes are bound by memory, not arithmetic. Here the logits of
``chunk_rows`` tokens at a time (1.5 MB at 64 rows) are made, turned into their loss and their gradient
(``softmax - q``, q the smoothed target) while they are in cache, and multiplied back into the gradients of the
hidden states and of the projection (and bias); the backward pass only scales those by the incoming gradient.
Positions whose label is ``ignore_index`` are dropped first (no logits for padding).

The loss is ``torch.nn.functional.cross_entropy(..., label_smoothing=s, reduction="sum")``'s: per token
``logsumexp(z) - (1 - s) z_y - (s / V) sum(z)``; its gradient is the same function's, to float rounding (not bit for
bit: the sums run in another order), which ``tests/unit/test_fused_vocab_loss.py`` checks against autograd through the
plain computation and by finite differences. Being another rounding, it is part of a trained model's key when on (with its block
size).

Under autocast (bf16) the fused loss runs outside it, in float32: the output projection is then computed in float32,
where the plain path's runs in bf16 (the fused loss is the closer of the two to a float32 step, not equal to the
plain bf16 one). The fused path calls the base model (``model.model``) and the projection's weights directly: a hook
on the top-level model or on ``lm_head`` does not run (none of the project's gates sit there).
``benchmarks/nmt_step.py --fused`` prints the step time of both and their ratio.
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

__all__ = ["fused_label_smoothed_loss", "seq2seq_lm_head"]

# rows of logits made at a time: 64 x 6,000 floats = 1.5 MB (measured fastest of 64-1,024 here). The block size
# changes the rounding of the projection's gradient (its sum over blocks), so a training records it in its settings
# (``NMTTrainConfig.as_dict``): a model or checkpoint of another block size is another training
CHUNK_ROWS = 64


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """sum over rows of the label-smoothed cross-entropy of ``h @ w.T + b`` (float64 accumulation of the sum);
    the gradients are computed in the forward pass, a block of rows at a time, and scaled in the backward (no
    second derivative: ``once_differentiable`` refuses one). ``grads``: whether grad mode was on at the call (inside
    ``forward`` it is always off; ``needs_input_grad`` says only which inputs require a gradient)."""

    @staticmethod
    def forward(ctx, h, w, b, labels, smoothing: float, chunk: int, grads: bool):
        vocab = w.shape[0]
        on, off = 1.0 - smoothing, smoothing / vocab
        need_h, need_w = grads and ctx.needs_input_grad[0], grads and ctx.needs_input_grad[1]
        need_b = grads and b is not None and ctx.needs_input_grad[2]
        grad_h = torch.empty_like(h) if need_h else None
        grad_w = torch.zeros_like(w) if need_w else None
        grad_b = torch.zeros_like(b) if need_b else None
        total = torch.zeros((), dtype=torch.float64, device=h.device)
        wt = w.t()
        for s in range(0, h.shape[0], chunk):
            hc, yc = h[s:s + chunk], labels[s:s + chunk]
            z = torch.addmm(b, hc, wt) if b is not None else hc @ wt
            rows = -on * z.gather(1, yc[:, None]).squeeze(1)
            if smoothing:
                rows = rows - off * z.sum(dim=1)
            top = z.amax(dim=1, keepdim=True)
            p = z.sub_(top).exp_()  # exp(z - max), in place of the block's logits: one exp pass for loss and gradient
            norm = p.sum(dim=1, keepdim=True)
            total += (rows + (top + norm.log()).squeeze(1)).sum(dtype=torch.float64)  # + logsumexp(z) per row
            if not (need_h or need_w or need_b):
                continue
            p.div_(norm)  # softmax
            if smoothing:
                p.sub_(off)
            p[torch.arange(len(yc), device=p.device), yc] -= on  # softmax - q: d(row loss) / d(logits)
            if need_h:
                torch.mm(p, w, out=grad_h[s:s + chunk])
            if need_w:
                grad_w.addmm_(p.t(), hc)
            if need_b:
                grad_b += p.sum(dim=0)
        ctx.save_for_backward(*(g if g is not None else torch.empty(0) for g in (grad_h, grad_w, grad_b)))
        ctx.have = (need_h, need_w, need_b)
        return total.to(h.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        grads = [t * g if have else None for t, have in zip(ctx.saved_tensors, ctx.have)]
        return (*grads, None, None, None, None)


def fused_label_smoothed_loss(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                              labels: torch.Tensor, smoothing: float = 0.0, *, ignore_index: int = -100,
                              chunk_rows: int = CHUNK_ROWS) -> tuple[torch.Tensor, None, int]:
    """``(loss, None, n_tokens)`` as ``translation.label_smoothed_loss(logits, labels, smoothing, nll=False)`` with
    ``logits = hidden @ weight.T + bias``: the mean label-smoothed cross-entropy per target token
    (``labels != ignore_index``), made a block of ``chunk_rows`` tokens at a time (module docstring).

    hidden ``[..., d]`` (any leading shape, e.g. ``[batch, tgt_len, d]``), weight ``[vocab, d]``, bias ``[vocab]``
    (or any shape of ``vocab`` elements, e.g. Marian's ``[1, vocab]``) or None, labels hidden's leading shape.
    Computed in float32 (a lower-precision ``hidden`` is cast; float64 stays float64)."""
    if not 0 <= float(smoothing) < 1:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing!r}")
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    d = hidden.shape[-1]
    if weight.dim() != 2 or weight.shape[1] != d:
        raise ValueError(f"weight must be [vocab, {d}] for hidden states of width {d}, got {tuple(weight.shape)}")
    if hidden.shape[:-1] != labels.shape:
        raise ValueError(f"labels {tuple(labels.shape)} do not match the hidden states' positions "
                         f"{tuple(hidden.shape[:-1])}")
    dtype = torch.promote_types(hidden.dtype, torch.float32)  # float32 at least (float64 stays)
    if bias is not None:
        if bias.numel() != weight.shape[0]:
            raise ValueError(f"bias has {bias.numel()} elements for a vocabulary of {weight.shape[0]}")
        bias = bias.reshape(-1).to(dtype)
    flat_labels = labels.reshape(-1)
    keep = flat_labels != ignore_index
    n_tokens = int(keep.sum())
    y = flat_labels[keep]
    if n_tokens and (int(y.min()) < 0 or int(y.max()) >= weight.shape[0]):
        raise ValueError(f"labels outside the vocabulary [0, {weight.shape[0]}) (besides ignore_index {ignore_index})")
    h = hidden.reshape(-1, d)[keep].to(dtype)
    total = _FusedLinearCrossEntropy.apply(h, weight.to(dtype), bias, y, float(smoothing), int(chunk_rows),
                                           torch.is_grad_enabled())
    return total / max(1, n_tokens), None, n_tokens


def seq2seq_lm_head(model) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(weight, bias)`` of an encoder-decoder's output projection (``logits = hidden @ weight.T + bias``, the
    hidden states being ``model.model(...)[0]``): Marian's ``lm_head`` (no bias of its own) plus its
    ``final_logits_bias``. A ValueError names what a model without them lacks."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor) or not hasattr(model, "model"):
        raise ValueError(f"fused_loss needs an encoder-decoder with an output projection and a base model "
                         f"(model.model, model.get_output_embeddings()); {type(model).__name__} has not")
    if getattr(head, "bias", None) is not None:
        raise ValueError(f"fused_loss: {type(model).__name__}'s output projection has a bias of its own; "
                         "only Marian's final_logits_bias is supported")
    return head.weight, getattr(model, "final_logits_bias", None)
