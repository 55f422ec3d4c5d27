"""Brief continued masked-LM training of a pre-trained encoder with a chosen dropout ratio.

Bian et al. (2021) vary the dropout of PRE-training and find that it changes attention redundancy.
Pre-training BERT again is out of reach at this scale; the closest honest experiment is to CONTINUE
masked-LM training of the already pre-trained model for a few hundred steps with dropout ``p`` (hidden and
attention-probability dropout both set to ``p``) and see whether, and how, the redundancy structure moves
relative to a control with the same steps, data and seed but another ``p``. It shows what dropout does to
the heads of a model that already has its structure; it does not show what pre-training from scratch with
that dropout would have produced.

Recipe (BERT's, scaled down): 15 % of the non-special tokens are chosen; 80 % of those become ``[MASK]``,
10 % a random token, 10 % stay; the loss is the cross-entropy at the chosen positions only (the vocabulary
projection is computed there alone, which makes a CPU step several times cheaper). The MLM head is the
checkpoint's when it has one; otherwise (all-MiniLM-L6-v2 is a sentence-embedding model without one) a new
head whose decoder is tied to the word embeddings is first trained alone for ``head_steps`` steps with the
encoder frozen and dropout 0 — the same for every ``p`` and seed-matched — before the encoder trains.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from headprune_utils.model import models
from headprune_utils.tasks import batching
from headprune_utils.tasks.probes import drawable_ids
from headprune_utils.train import phases
from headprune_utils.train.training import linear_schedule, set_seed


def mask_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor, special: torch.Tensor, mask_id: int,
                vocab: torch.Tensor, generator: torch.Generator, prob: float = 0.15):
    """BERT's masking. Returns (corrupted ids, target positions [bool, same shape], target ids at them)."""
    candidates = attention_mask.bool() & ~torch.isin(input_ids, special)
    chosen = (torch.rand(input_ids.shape, generator=generator) < prob) & candidates
    if not chosen.any():  # at least one target per batch
        first = candidates.nonzero()[:1]
        chosen[first[:, 0], first[:, 1]] = True
    out = input_ids.clone()
    u = torch.rand(input_ids.shape, generator=generator)
    out[chosen & (u < 0.8)] = mask_id
    rand = chosen & (u >= 0.8) & (u < 0.9)
    out[rand] = vocab[torch.randint(len(vocab), (int(rand.sum()),), generator=generator)]
    return out, chosen, input_ids[chosen]


def set_dropout(model: nn.Module, p: float) -> None:
    """Set every dropout module (hidden and attention probabilities) and the config's ratios to ``p``."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = p
    for attr in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
        if hasattr(model.config, attr):
            setattr(model.config, attr, p)


def load_mlm(name: str, device: torch.device, seed: int) -> nn.Module:
    """The encoder with an MLM head (``seed`` initialises a new head when the checkpoint has none)."""
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    torch.manual_seed(seed)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model = models._from_pretrained(AutoModelForMaskedLM, name, attn_implementation="sdpa")
    finally:
        hf_logging.set_verbosity(verbosity)
    model.tie_weights()
    return model.to(device)


def _head(model: nn.Module) -> nn.Module:
    for attr in ("cls", "lm_head", "generator_lm_head"):
        if hasattr(model, attr):
            return getattr(model, attr)
    raise ValueError(f"{type(model).__name__}: no MLM head found")


def _steps(model, enc, tokenizer, n_steps, batch_size, seed, lr, train_encoder, dropout, progress, desc):
    device = next(model.parameters()).device
    base, head = model.base_model, _head(model)
    params = [p for p in (model.parameters() if train_encoder else head.parameters()) if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    warmup = max(1, n_steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: linear_schedule(s, n_steps, warmup))
    special = torch.as_tensor(sorted(set(tokenizer.all_special_ids)))

    vocab = torch.as_tensor(drawable_ids(tokenizer))
    gen = torch.Generator().manual_seed(seed)
    set_dropout(model, dropout)
    model.train()
    if not train_encoder:
        base.eval()
    losses = []
    per_epoch = max(1, len(enc) // batch_size)
    order: list = []
    for step in tqdm(range(n_steps), desc=desc, disable=not progress, mininterval=10, leave=False):
        if not order:
            order = batching.train_batches(enc.lengths, batch_size, seed=seed * 1000 + step // per_epoch)[::-1]
        batch = batching.collate(enc, order.pop(), "cpu")
        ids, chosen, targets = mask_tokens(batch["input_ids"], batch["attention_mask"], special,
                                           tokenizer.mask_token_id, vocab, gen)
        inputs = {k: v.to(device) for k, v in batch.items() if k not in ("labels", "input_ids")}
        with torch.set_grad_enabled(True):
            hidden = base(input_ids=ids.to(device), **inputs).last_hidden_state
            logits = head(hidden[chosen.to(device)])
            loss = nn.functional.cross_entropy(logits, targets.to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        phases.report(phases.steps(f"{desc}: masked-LM training", step + 1, n_steps))
        losses.append(loss.item())
    model.eval()
    return losses


def prepare_mlm(name: str, enc: batching.Encoded, tokenizer, seed: int, head_steps: int = 100,
                batch_size: int = 32, head_lr: float = 1e-3, device: torch.device | str = "cpu",
                progress: bool = False) -> tuple[nn.Module, dict]:
    """Load ``name`` with an MLM head and train the head alone (encoder frozen, dropout 0) for ``head_steps``.

    The result depends on ``seed`` only (not on any dropout ratio): copy it for each ratio to compare.
    Returns (model in eval mode, {"head_loss_first", "head_loss_last"}): the mean loss of the first and last tenth
    of the head's steps; ``{}`` when ``head_steps`` is 0 (the checkpoint's own head, no loss to report: a missing
    number, not a NaN that a result check would take for a corrupt cell).
    """
    if head_steps < 0:
        raise ValueError(f"head_steps must be >= 0, got {head_steps}")
    set_seed(seed)
    device = torch.device(device) if not isinstance(device, torch.device) else device
    model = load_mlm(name, device, seed)
    losses: list[float] = []
    if head_steps:
        for p in model.base_model.parameters():
            p.requires_grad_(False)
        losses = _steps(model, enc, tokenizer, head_steps, batch_size, seed, head_lr, False, 0.0, progress, "MLM head")
        for p in model.base_model.parameters():
            p.requires_grad_(True)
    if not losses:
        return model, {}
    k = max(1, len(losses) // 10)
    return model, {"head_loss_first": float(np.mean(losses[:k])), "head_loss_last": float(np.mean(losses[-k:]))}


def continue_mlm(model: nn.Module, enc: batching.Encoded, tokenizer, dropout: float, steps: int, seed: int,
                 batch_size: int = 32, lr: float = 1e-4, progress: bool = False) -> dict:
    """Continue masked-LM training of ``model`` (from :func:`prepare_mlm`) IN PLACE with dropout ``dropout``.

    Hidden and attention dropout are ``dropout`` during these steps and 0 afterwards (eval mode). The
    word embeddings (= the tied decoder) stay frozen, as in the project's fine-tuning: a third of the
    parameters and most of a CPU step's optimizer work, and not where attention patterns live. Data order
    and masking depend on ``seed`` only, so runs with different ratios see the same batches.
    Returns {"loss_first", "loss_last", "loss": per step}.
    """
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    set_seed(seed + 1)
    model.get_input_embeddings().weight.requires_grad_(False)
    losses = _steps(model, enc, tokenizer, steps, batch_size, seed + 1, lr, True, dropout, progress, f"MLM p={dropout:g}")
    set_dropout(model, 0.0)
    k = max(1, len(losses) // 10)
    return {"loss_first": float(np.mean(losses[:k])), "loss_last": float(np.mean(losses[-k:])), "loss": losses}
