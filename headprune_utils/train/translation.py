"""Training a translation model, decoding with ``generate()``, and BLEU/chrF on a test set.

Training (:func:`train_translation`): teacher forcing with label-smoothed cross-entropy over the real target
tokens (padding ignored; the loss is the mean over target tokens of the batch), AdamW with betas (0.9, 0.98)
(Vaswani et al.), a linear warm-up to ``lr`` then inverse-square-root decay, gradient clipping. Batches are
grouped by length and padded to their own longest sequence, either ``batch_size`` sentences each or, with
``max_tokens``, as many sentences as fit ``n_sentences * longest <= max_tokens`` (token-based batching, as
fairseq). Every ``eval_every`` steps the per-token negative log-likelihood on the dev set is measured; the
weights with the lowest dev loss are restored at the end (model selection), and training stops early after
``patience`` evaluations without improvement. Gates (a dict by attention type, see ``gates``) can stay applied
for the whole run, as Budhraja et al. fix a mask and then train. With ``checkpoint`` (a file path), the whole
training state (weights, optimizer, schedule, step, position in the epoch, the best weights so far, the history,
the random-number generators' states) is written there atomically after every evaluation, and a call that finds
it resumes from it: training that outlives one process (a long run cut into sessions) continues where it stopped
and ends with the weights an uninterrupted run gives (tested, bit for bit on the same machine). The loop advances
one :class:`TranslationTrainingState`, which is also what is saved and loaded, so the two cannot drift apart.

Decoding (:func:`translate`): ``model.generate`` (greedy by default, beam search with ``num_beams > 1``) with
its KV cache, inside ``head_gates`` when gates are given; at most ``max_len_a * source_length + max_len_b``
new tokens; the output is the tokenizer's detokenised text, which :func:`evaluate_translation` scores with
sacrebleu (``translation_metrics``).

``precision`` (``precision.PRECISIONS``) of the training forward passes (default ``"auto"``): bf16 autocast on a
CUDA device that supports it, plain float32 on the CPU (no autocast entered: CPU numbers bit-identical to before
the setting existed); the loss is computed in float32 from the logits either way, weights and optimizer states stay
float32, ``backward()`` runs outside autocast. Evaluation (:func:`dev_loss`, the early-stopping dev losses,
:func:`translate` and so BLEU) is float32 on every device by default, as in ``training`` (a study's scores never
depend on the path that computed them); ``precision="bf16"`` asks for autocast there explicitly.
"""
from __future__ import annotations

import hashlib
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from headprune_utils.analysis.preconditions import last_improvement
from headprune_utils.tasks.batching import eval_batches, train_batches
from headprune_utils.model.gates import Ablation
from headprune_utils.model.precision import autocast_context, check_precision
from headprune_utils.train import phases
from headprune_utils.train.fused_vocab_loss import CHUNK_ROWS as FUSED_CHUNK_ROWS
from headprune_utils.train.fused_vocab_loss import fused_label_smoothed_loss, seq2seq_lm_head
from headprune_utils.train.training import (NonFiniteError, check_finite_weights, gate_context, model_device, runtime,
                                           set_aside_if_other_runtime, set_seed)
from headprune_utils.tasks.translation_metrics import translation_scores

__all__ = ["EncodedPairs", "encode_pairs", "collate_pairs", "token_batches", "label_smoothed_loss",
           "NMTTrainConfig", "NMTTrainResult", "inverse_sqrt_schedule", "dev_loss", "training_identity",
           "TranslationTrainingState", "CHECKPOINT_KEYS", "train_translation", "translate", "evaluate_translation"]


@dataclass
class EncodedPairs:
    """Token ids of a parallel split (unpadded; each sequence ends with ``</s>``)."""

    src_ids: list[list[int]]
    tgt_ids: list[list[int]]
    pad_id: int
    decoder_start_id: int
    n_dropped: int = 0  # pairs left out for length (encode_pairs(..., drop_longer=True))

    def __len__(self) -> int:
        return len(self.src_ids)

    @property
    def lengths(self) -> np.ndarray:
        """``max(source, target)`` length of each pair in tokens: what a padded batch costs."""
        return np.fromiter((max(len(s), len(t)) for s, t in zip(self.src_ids, self.tgt_ids)), dtype=np.int64,
                           count=len(self.src_ids))

    @property
    def n_target_tokens(self) -> int:
        return sum(len(t) for t in self.tgt_ids)


def encode_pairs(tokenizer, data, max_length: int = 128, drop_longer: bool = False) -> EncodedPairs:
    """Tokenise a ``translation_data.ParallelData``.

    A side longer than ``max_length`` tokens is truncated (``</s>`` kept), or with ``drop_longer=True`` the pair
    is left out (for training: a truncated source no longer matches its truncated target); ``n_dropped``
    counts those pairs.
    """
    if len(data.src) != len(data.tgt):
        raise ValueError(f"encode_pairs: {len(data.src)} sources but {len(data.tgt)} targets")
    if len(data.src) == 0:
        return EncodedPairs([], [], tokenizer.pad_token_id, tokenizer.bos_token_id)
    kwargs = dict(truncation=not drop_longer, max_length=None if drop_longer else max_length, padding=False)
    src = tokenizer(list(data.src), **kwargs)["input_ids"]
    tgt = tokenizer(text_target=list(data.tgt), **kwargs)["input_ids"]
    keep = [i for i in range(len(src)) if not drop_longer or max(len(src[i]), len(tgt[i])) <= max_length]
    return EncodedPairs([list(src[i]) for i in keep], [list(tgt[i]) for i in keep], tokenizer.pad_token_id,
                        tokenizer.bos_token_id, n_dropped=len(src) - len(keep))


def collate_pairs(enc: EncodedPairs, index: np.ndarray, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Model inputs for the pairs at ``index``: ``input_ids``/``attention_mask`` ``[batch, src_len]``,
    ``decoder_input_ids`` ``[batch, tgt_len]`` (``<s>`` then the target shifted right) and ``labels``
    ``[batch, tgt_len]`` (the target, -100 on padding)."""
    srcs = [enc.src_ids[i] for i in index]
    tgts = [enc.tgt_ids[i] for i in index]
    n, s_len, t_len = len(srcs), max(len(s) for s in srcs), max(len(t) for t in tgts)
    ids = torch.full((n, s_len), enc.pad_id, dtype=torch.long)
    att = torch.zeros((n, s_len), dtype=torch.long)
    dec = torch.full((n, t_len), enc.pad_id, dtype=torch.long)
    labels = torch.full((n, t_len), -100, dtype=torch.long)
    for row, (s, t) in enumerate(zip(srcs, tgts)):
        ids[row, : len(s)] = torch.tensor(s, dtype=torch.long)
        att[row, : len(s)] = 1
        labels[row, : len(t)] = torch.tensor(t, dtype=torch.long)
        dec[row, 0] = enc.decoder_start_id
        dec[row, 1 : len(t)] = torch.tensor(t[:-1], dtype=torch.long)
    batch = {"input_ids": ids, "attention_mask": att, "decoder_input_ids": dec, "labels": labels}
    return {k: v.to(device) for k, v in batch.items()}


def token_batches(lengths: np.ndarray, max_tokens: int, seed: int, max_sentences: int | None = None) -> list[np.ndarray]:
    """One epoch of batches holding at most ``max_tokens`` padded tokens each (``n * longest``), grouped by length
    within shuffled chunks, the batch order shuffled; deterministic for ``seed``."""
    if max_tokens < int(lengths.max()):
        raise ValueError(f"max_tokens={max_tokens} is below the longest sequence ({int(lengths.max())} tokens)")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths))
    chunk_size = max(1, 50 * max_tokens // max(1, int(np.median(lengths))))
    batches: list[np.ndarray] = []
    for start in range(0, len(order), chunk_size):
        chunk = order[start : start + chunk_size]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        current: list[int] = []
        longest = 0
        for i in chunk:
            new_longest = max(longest, int(lengths[i]))
            if current and ((len(current) + 1) * new_longest > max_tokens
                            or (max_sentences is not None and len(current) >= max_sentences)):
                batches.append(np.asarray(current))
                current, new_longest = [], int(lengths[i])
            current.append(int(i))
            longest = new_longest
        if current:
            batches.append(np.asarray(current))
    return [batches[i] for i in rng.permutation(len(batches))]


def label_smoothed_loss(logits: torch.Tensor, labels: torch.Tensor, smoothing: float = 0.0,
                        nll: bool = True) -> tuple[torch.Tensor, torch.Tensor | None, int]:
    """``(loss, nll_sum, n_tokens)`` over the positions with ``labels != -100``.

    logits ``[batch, tgt_len, vocab]``, labels ``[batch, tgt_len]``. ``loss``: the mean label-smoothed cross-entropy
    per target token (``CrossEntropyLoss(label_smoothing=smoothing)``: the target gets ``1 - smoothing`` plus its
    share of ``smoothing`` spread uniformly over the vocabulary); ``nll_sum``: the plain negative log-likelihood
    summed over the tokens (no grad), for dev perplexity; ``None`` with ``nll=False`` (a training step, which never
    reads it: the second log-softmax over the vocabulary is about 5% of a step at the standard size). Without
    smoothing the two are one computation (the same sum, bit for bit), done once.
    """
    flat_logits = logits.reshape(-1, logits.shape[-1]).float()
    flat_labels = labels.reshape(-1)
    n_tokens = int((flat_labels != -100).sum())
    total = nn.functional.cross_entropy(flat_logits, flat_labels, ignore_index=-100, label_smoothing=smoothing,
                                        reduction="sum")
    loss = total / max(1, n_tokens)
    if not nll:
        return loss, None, n_tokens
    if smoothing == 0:
        return loss, total.detach(), n_tokens
    with torch.no_grad():
        nll_sum = nn.functional.cross_entropy(flat_logits, flat_labels, ignore_index=-100, reduction="sum")
    return loss, nll_sum, n_tokens


@dataclass(frozen=True)
class NMTTrainConfig:
    max_steps: int = 4000  # optimiser steps (the budget; deterministic)
    batch_size: int = 64  # sentences per batch (with max_tokens: the cap on sentences)
    max_tokens: int | None = None  # token-based batching: n_sentences * longest <= max_tokens
    lr: float = 1e-3  # peak learning rate, reached at the end of the warm-up
    warmup_steps: int = 400
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    max_grad_norm: float = 1.0
    eval_every: int = 500  # steps between dev-loss evaluations (and at the end)
    patience: int | None = None  # stop after this many evaluations without a better dev loss; None: never
    eval_batch_size: int = 128
    max_seconds: float | None = None  # a wall-clock cap on training (then not deterministic); None: none
    # nats: for patience, an evaluation improves only when its dev loss beats the last improvement by more than this
    # (preconditions.last_improvement); 0: any lower loss. The weights kept are the lowest dev loss's either way.
    min_delta: float = 0.0
    # the training loss computed with the output projection a block of tokens at a time (fused_vocab_loss): the same
    # loss and gradient to float rounding, not bit for bit, so part of a model's key when on
    fused_loss: bool = False

    def as_dict(self) -> dict:
        """The settings; ``min_delta`` only when it is set (> 0) and ``fused_loss`` only when on, so that what a
        training without them depends on (its model cache key, its checkpoint's identity) is what it was before the
        settings existed."""
        d = asdict(self)
        if d["min_delta"] == 0:
            del d["min_delta"]
        if not d["fused_loss"]:
            del d["fused_loss"]
        else:  # the block size is part of the numerics (fused_vocab_loss.CHUNK_ROWS)
            d["fused_chunk_rows"] = FUSED_CHUNK_ROWS
        return d

    def check(self, has_dev: bool = True) -> None:
        """A ValueError naming the first bad setting (before any training): counts that are not positive integers,
        a learning rate that is not a positive finite number, early stopping (``patience``) without dev pairs."""
        def whole(name, v, least):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
                raise ValueError(f"NMTTrainConfig.{name} must be an integer >= {least}, got {v!r}")
        for name in ("max_steps", "batch_size", "eval_every", "eval_batch_size"):
            whole(name, getattr(self, name), 1)
        whole("warmup_steps", self.warmup_steps, 0)
        for name in ("max_tokens", "patience"):
            if getattr(self, name) is not None:
                whole(name, getattr(self, name), 1)
        lr, clip = self.lr, self.max_grad_norm
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
            raise ValueError(f"NMTTrainConfig.lr must be a positive finite number, got {lr!r}")
        if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not math.isfinite(clip) or clip < 0:
            raise ValueError(f"NMTTrainConfig.max_grad_norm must be a finite number >= 0 (0: no clipping), got {clip!r}")
        if not (isinstance(self.label_smoothing, (int, float)) and 0 <= self.label_smoothing < 1):
            raise ValueError(f"NMTTrainConfig.label_smoothing must be in [0, 1), got {self.label_smoothing!r}")
        if self.max_seconds is not None and not (isinstance(self.max_seconds, (int, float)) and self.max_seconds > 0):
            raise ValueError(f"NMTTrainConfig.max_seconds must be None or a positive number, got {self.max_seconds!r}")
        if self.patience is not None and not has_dev:
            raise ValueError("NMTTrainConfig.patience (early stopping on the dev loss) needs dev pairs; got dev=None")
        d = self.min_delta
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or d < 0:
            raise ValueError(f"NMTTrainConfig.min_delta must be a finite number >= 0 (nats), got {d!r}")
        if d > 0 and self.patience is None:
            raise ValueError(f"NMTTrainConfig.min_delta={d:g} is a rule of early stopping: it needs patience")
        if not isinstance(self.fused_loss, bool):
            raise ValueError(f"NMTTrainConfig.fused_loss must be true or false, got {self.fused_loss!r}")


@dataclass
class NMTTrainResult:
    """``history``: one dict per evaluation (``step, train_loss, dev_loss, lr, seconds, tokens``); ``best_step``
    and ``best_dev_loss`` (per-token NLL, nats) of the restored weights; ``stopped``: ``"max_steps"``,
    ``"patience"`` or ``"max_seconds"``."""

    history: list[dict] = field(default_factory=list)
    best_step: int = 0
    best_dev_loss: float = math.inf
    steps: int = 0
    seconds: float = 0.0
    stopped: str = "max_steps"


def inverse_sqrt_schedule(step: int, warmup: int) -> float:
    """Learning-rate factor at optimiser step ``step`` (0-based): linear warm-up to 1 at ``warmup``, then
    ``sqrt(warmup / step)``."""
    s = step + 1
    if warmup <= 0:
        return 1.0
    return s / warmup if s < warmup else math.sqrt(warmup / s)


@torch.no_grad()
def dev_loss(model: nn.Module, enc: EncodedPairs, batch_size: int = 128, gates=None, ablation: Ablation = "zero",
             means=None, *, precision: str = "fp32") -> float:
    """Per-token negative log-likelihood (nats, no smoothing) of the targets of ``enc``, teacher-forced."""
    check_precision(precision)
    check_finite_weights(model, "the translation model")
    was_training = model.training
    model.eval()
    device = model_device(model)
    total, count = 0.0, 0
    try:
        with gate_context(model, gates, ablation, means):
            for index in eval_batches(enc.lengths, batch_size):
                batch = collate_pairs(enc, index, device)
                labels = batch.pop("labels")
                with autocast_context(device, precision):
                    logits = model(**batch).logits
                _, nll, n = label_smoothed_loss(logits, labels)
                total += float(nll)
                count += n
    finally:
        model.train(was_training)
    return total / max(1, count)


def _ids_digest(pairs: EncodedPairs) -> str:
    """A content hash of the token ids (the tokenizer and the data a checkpoint was trained on)."""
    h = hashlib.sha256()
    for seqs in (pairs.src_ids, pairs.tgt_ids):
        for ids in seqs:
            h.update(np.asarray(ids, dtype=np.int64).tobytes())
            h.update(b"|")
    return h.hexdigest()[:16]


def training_identity(model: nn.Module, train: EncodedPairs, dev: EncodedPairs | None, cfg: NMTTrainConfig,
                      seed: int, precision: str) -> dict:
    """What a checkpoint must match to be resumed: resuming another training's state (other config, seed, data,
    precision or model shape) would silently give weights that no uninterrupted run gives."""
    return {"config": cfg.as_dict(), "seed": int(seed), "n_train": len(train), "data": _ids_digest(train),
            "n_dev": None if dev is None else len(dev), "precision": precision,
            "shapes": {k: list(v.shape) for k, v in model.state_dict().items()}}


@dataclass
class TranslationTrainingState:
    """Where a translation training stands between two optimiser steps: the one object the training loop
    advances, and (with the weights, optimizer, schedule and random-number generators) the one thing a checkpoint
    holds, so that what is saved and what is resumed cannot drift apart.

    The checkpoint is a flat dict whose keys are this class's fields plus ``seconds``, ``model``, ``optimizer``,
    ``scheduler``, ``rng_cpu`` and ``rng_cuda`` (:meth:`to_checkpoint`): the layout checkpoints have always had, so
    a run interrupted before this class existed still resumes.
    """

    identity: dict  # training_identity(): a checkpoint of another training is refused
    step: int = 0  # optimiser steps done
    epoch: int = 0
    batch_pos: int = 0  # batches of the current epoch done: a resumed epoch skips them
    losses: list[float] = field(default_factory=list)  # training losses since the last evaluation
    tokens: int = 0  # target tokens trained on
    bad_evals: int = 0  # evaluations since the best dev loss (patience)
    best_state: dict | None = None  # CPU copy of the weights of the best dev loss, restored at the end
    history: list[dict] = field(default_factory=list)  # one record per evaluation (NMTTrainResult.history)
    best_step: int = 0
    best_dev_loss: float = math.inf
    # the time.perf_counter() reading at which the training's clock read zero: a resumed state's lies before its
    # process began, so that ``seconds`` counts every session of the training
    started: float = field(default_factory=time.perf_counter, init=False, repr=False, compare=False)

    def elapsed(self) -> float:
        """Seconds of training so far, earlier sessions included."""
        return time.perf_counter() - self.started

    def to_checkpoint(self, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler) -> dict:
        """The state with everything else a resumed run needs to continue bit for bit: the weights, the optimizer
        and schedule states and the random-number generators (dropout draws from them)."""
        progress = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        return {**progress, "seconds": self.elapsed(), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "rng_cpu": torch.get_rng_state(),
                "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}

    @classmethod
    def from_checkpoint(cls, ck, identity: dict, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler,
                        where: str | os.PathLike = "the checkpoint") -> "TranslationTrainingState":
        """The state of ``ck`` (a :meth:`to_checkpoint` dict), its weights, optimizer, schedule and random-number
        states put back into ``model``, ``optimizer``, ``scheduler`` and torch.

        Refused (ValueError naming ``where``) before anything is touched when ``ck`` belongs to another training
        (its identity differs from ``identity``) or lacks a key: a partial restore would train on silently."""
        if not isinstance(ck, dict) or ck.get("identity") != identity:
            raise ValueError(f"checkpoint {where} belongs to another training (config, seed, data or model shape "
                             "differ); remove it to train from the start")
        missing = sorted(CHECKPOINT_KEYS - set(ck))
        if missing:
            raise ValueError(f"checkpoint {where} lacks {', '.join(missing)}: not a translation training checkpoint; "
                             "remove it to train from the start")
        state = cls(**{f.name: ck[f.name] for f in fields(cls) if f.init})
        state.started -= ck["seconds"]
        model.load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizer"])
        scheduler.load_state_dict(ck["scheduler"])
        torch.set_rng_state(ck["rng_cpu"])
        if ck.get("rng_cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(ck["rng_cuda"])
        return state

    def save(self, path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler,
             machine: str | None = None) -> None:
        """Write the checkpoint to ``path`` atomically (a temporary file beside it, then renamed over it): a process
        killed while writing leaves the previous checkpoint whole, never a truncated one. ``machine``: the kind of
        machine training (``results.machine_kind``), recorded beside the state with torch's thread count and version
        (``training.runtime``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            torch.save({**self.to_checkpoint(model, optimizer, scheduler), "runtime": runtime(machine)}, tmp)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a failed write (disk full) leaves no half file behind either
            raise

    @classmethod
    def load(cls, path: str | os.PathLike, identity: dict, model: nn.Module, optimizer: torch.optim.Optimizer,
             scheduler, machine: str | None = None) -> "TranslationTrainingState | None":
        """The state saved at ``path``, restored into ``model``, ``optimizer``, ``scheduler`` and torch's random
        number generators (:meth:`from_checkpoint`); a file that is no checkpoint is refused with a ValueError.
        None when it was written under another runtime than now on ``machine`` (another kind of machine, torch
        thread count or version: set aside with a warning, ``training.set_aside_if_other_runtime``)."""
        try:
            ck = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:  # a truncated file cannot happen (atomic writes) but a foreign one can
            raise ValueError(f"checkpoint {path}: unreadable ({exc}); remove it to train from the start") from None
        if isinstance(ck, dict) and set_aside_if_other_runtime(Path(path), ck.get("runtime"), runtime(machine)):
            return None
        return cls.from_checkpoint(ck, identity, model, optimizer, scheduler, where=path)


# every key a checkpoint holds: the state's fields and what to_checkpoint adds
CHECKPOINT_KEYS = frozenset({f.name for f in fields(TranslationTrainingState) if f.init}
                            | {"seconds", "model", "optimizer", "scheduler", "rng_cpu", "rng_cuda"})


@dataclass(frozen=True)
class _Optimization:
    """The trained parameters, AdamW over them (no weight decay on biases and norms) and its warm-up/inverse-sqrt
    schedule: built afresh by every call, their states restored from a checkpoint when resuming."""

    params: list[nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR

    @classmethod
    def build(cls, model: nn.Module, cfg: NMTTrainConfig) -> "_Optimization":
        params = [p for p in model.parameters() if p.requires_grad]
        decay = [p for p in params if p.ndim >= 2]
        no_decay = [p for p in params if p.ndim < 2]
        fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=cfg.lr, betas=cfg.betas, eps=1e-9, **({"fused": True} if fused else {}))
        # a plain lambda, not a callable object: LambdaLR then keeps no state of it in the checkpoint
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: inverse_sqrt_schedule(s, cfg.warmup_steps))
        return cls(params, opt, sched)

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def step(self, loss: torch.Tensor, max_grad_norm: float) -> None:
        """Back-propagate ``loss``, clip the gradients (when ``max_grad_norm > 0``), step and clear them."""
        loss.backward()
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.params, max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)


def _epoch_batches(lengths: np.ndarray, cfg: NMTTrainConfig, seed: int, epoch: int) -> list[np.ndarray]:
    """The batches of one epoch: a function of (seed, epoch) alone, so a resumed run draws the same ones."""
    if cfg.max_tokens is not None:
        return token_batches(lengths, cfg.max_tokens, seed=seed * 1000 + epoch, max_sentences=cfg.batch_size)
    return train_batches(lengths, cfg.batch_size, seed=seed * 1000 + epoch)


def _remaining_batches(state: TranslationTrainingState, lengths: np.ndarray, cfg: NMTTrainConfig, seed: int):
    """The batches still to train on, epoch after epoch from where ``state`` stands, until ``cfg.max_steps``.

    ``state``'s position in the data moves along as each batch is handed out, so a checkpoint written after a
    step resumes at the next batch; an epoch ends (``epoch`` + 1) only when its next batch is asked for, so the
    evaluation at an epoch's last batch records that epoch, and its checkpoint resumes with an empty rest of it.
    """
    while state.step < cfg.max_steps:
        for index in _epoch_batches(lengths, cfg, seed, state.epoch)[state.batch_pos:]:
            state.batch_pos += 1
            yield index
        state.batch_pos = 0
        state.epoch += 1


def _train_step(model: nn.Module, optim: _Optimization, batch: dict[str, torch.Tensor], cfg: NMTTrainConfig,
                device: torch.device, precision: str, state: TranslationTrainingState) -> None:
    """One optimiser step on ``batch`` (a collate_pairs batch), counted in ``state``; a non-finite loss stops the
    training (NonFiniteError) before it reaches the weights."""
    labels = batch.pop("labels")
    if cfg.fused_loss:  # the loss with the output projection, a block of tokens at a time (fused_vocab_loss)
        weight, bias = seq2seq_lm_head(model)
        with autocast_context(device, precision):
            hidden = model.model(**batch, use_cache=False)[0]
        loss, _, n = fused_label_smoothed_loss(hidden, weight, bias, labels, cfg.label_smoothing)
    else:
        with autocast_context(device, precision):
            logits = model(**batch).logits
        loss, _, n = label_smoothed_loss(logits, labels, cfg.label_smoothing, nll=False)
    if not bool(torch.isfinite(loss.detach())):
        raise NonFiniteError(f"translation training: the loss is {loss.item()} at step {state.step + 1} "
                             f"(lr={cfg.lr:g}); training stopped. Lower lr, or keep clipping on.")
    optim.step(loss, cfg.max_grad_norm)
    state.losses.append(loss.item())
    state.tokens += n
    state.step += 1


def _evaluate(model: nn.Module, dev: EncodedPairs | None, cfg: NMTTrainConfig, lr: float,
              state: TranslationTrainingState) -> bool:
    """Record an evaluation in ``state.history`` (and, on a better dev loss, keep a copy of the weights); True when
    ``cfg.patience`` evaluations in a row brought no better dev loss."""
    record = {"step": state.step, "epoch": state.epoch,
              "train_loss": float(np.mean(state.losses)) if state.losses else math.nan,
              "lr": lr, "seconds": state.elapsed(), "tokens": state.tokens}
    state.losses = []
    if dev is not None:
        loss = dev_loss(model, dev, cfg.eval_batch_size)  # float32; the gates are already applied
        record["dev_loss"] = loss
        # patience counts from the last improvement by more than min_delta (with 0: the best so far, the same test)
        before = [h["dev_loss"] for h in state.history if h.get("dev_loss") is not None]
        at = last_improvement(before, cfg.min_delta)
        reference = math.inf if at is None else before[at]
        if loss < state.best_dev_loss:
            state.best_dev_loss, state.best_step = loss, state.step
            state.best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        if loss < reference - cfg.min_delta:
            state.bad_evals = 0
        else:
            state.bad_evals += 1
    state.history.append(record)
    return cfg.patience is not None and state.bad_evals >= cfg.patience


def train_translation(
    model: nn.Module,
    train: EncodedPairs,
    dev: EncodedPairs | None,
    cfg: NMTTrainConfig,
    seed: int = 0,
    gates=None,
    ablation: Ablation = "zero",
    means=None,
    progress: bool = True,
    *,
    precision: str = "auto",
    checkpoint: str | os.PathLike | None = None,
    machine: str | None = None,
) -> NMTTrainResult:
    """Train ``model`` in place (see the module docstring); returns the evaluation history.

    With ``dev``, the weights of the best dev loss are restored at the end; without, the last weights stay.
    ``gates``: fixed, no grad, applied during training and the dev evaluations. ``precision``: of the training
    forward passes (see the module docstring); the dev evaluations are float32. ``checkpoint``: a file to write
    the training state to after every evaluation and to resume from when it exists (the module docstring); it
    is left in place at the end (the caller removes it once the trained model is safely stored). A checkpoint
    of another training (other config, seed, data size or model shape) is refused with a ValueError naming it;
    one written under another runtime (another kind of machine than ``machine``, another torch thread count or
    version) is set aside with a warning and the training starts from the beginning (one model is trained under
    one).
    """
    check_precision(precision)
    cfg.check(has_dev=dev is not None)
    if cfg.fused_loss:
        seq2seq_lm_head(model)  # a model without the output projection it needs: refused before any training
    if len(train) == 0:
        raise ValueError("train_translation got no training pairs")
    if cfg.max_seconds is not None and checkpoint is not None:
        raise ValueError("checkpoint needs a deterministic run: max_seconds must be None")
    set_seed(seed)
    device = model_device(model)
    optim = _Optimization.build(model, cfg)
    identity = training_identity(model, train, dev, cfg, seed, precision)
    ck_path = Path(checkpoint) if checkpoint is not None else None
    if ck_path is not None and ck_path.exists():
        state = TranslationTrainingState.load(ck_path, identity, model, optim.optimizer, optim.scheduler, machine)
    else:
        state = None
    state = state or TranslationTrainingState(identity)
    stopped = None
    bar = tqdm(total=cfg.max_steps, initial=state.step, desc="train NMT", disable=not progress, mininterval=10,
               leave=False)
    try:
        with gate_context(model, gates, ablation, means):
            model.train()
            for index in _remaining_batches(state, train.lengths, cfg, seed):
                _train_step(model, optim, collate_pairs(train, index, device), cfg, device, precision, state)
                bar.update(1)
                phases.report(phases.steps("translation model: training", state.step, cfg.max_steps))
                last = state.step >= cfg.max_steps
                out_of_time = cfg.max_seconds is not None and state.elapsed() > cfg.max_seconds
                if state.step % cfg.eval_every != 0 and not last and not out_of_time:
                    continue
                if _evaluate(model, dev, cfg, optim.lr, state):  # dev_loss() leaves the model in training mode
                    stopped = "patience"
                elif out_of_time:
                    stopped = "max_seconds"
                elif last:
                    stopped = "max_steps"
                record = state.history[-1]
                bar.set_postfix(train=f"{record['train_loss']:.3f}", dev=f"{record.get('dev_loss', math.nan):.3f}")
                if stopped is not None:
                    break
                if ck_path is not None:
                    state.save(ck_path, model, optim.optimizer, optim.scheduler, machine)
    finally:
        bar.close()
        model.eval()
    if state.best_state is not None:
        model.load_state_dict(state.best_state)
    return NMTTrainResult(history=state.history, best_step=state.best_step, best_dev_loss=state.best_dev_loss,
                          steps=state.step, seconds=state.elapsed(), stopped=stopped or "max_steps")


@torch.no_grad()
def translate(
    model: nn.Module,
    tokenizer,
    sources: list[str],
    batch_size: int = 64,
    num_beams: int = 1,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    max_source_length: int = 256,
    gates=None,
    ablation: Ablation = "zero",
    means=None,
    progress: bool = False,
    *,
    precision: str = "fp32",
) -> list[str]:
    """Detokenised translations of ``sources``, in their order (greedy, or beam search with ``num_beams``).

    Sources are batched by length; each batch may generate up to ``max_len_a * longest source + max_len_b``
    tokens. ``gates`` (a dict by attention type) act on every decoding step, KV cache included. ``precision``:
    of ``generate``'s forward passes (see the module docstring).
    """
    check_precision(precision)
    if isinstance(sources, (str, bytes)) or not isinstance(sources, (list, tuple)):
        raise TypeError(f"sources must be a list of strings, got {type(sources).__name__} (one sentence: [sentence])")
    bad = [i for i, x in enumerate(sources) if not isinstance(x, str)]
    if bad:
        raise TypeError(f"sources must be strings; entries {bad[:5]} are not (e.g. {sources[bad[0]]!r})")
    for name, v in (("batch_size", batch_size), ("num_beams", num_beams), ("max_source_length", max_source_length)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if not sources:
        return []
    was_training = model.training
    model.eval()
    device = model_device(model)
    enc = tokenizer(list(sources), truncation=True, max_length=max_source_length)["input_ids"]
    lengths = np.fromiter((len(x) for x in enc), dtype=np.int64, count=len(enc))
    out: list[str | None] = [None] * len(sources)
    try:
        with gate_context(model, gates, ablation, means):
            for index in tqdm(eval_batches(lengths, batch_size), desc="translate", disable=not progress,
                              mininterval=10, leave=False):
                width = int(lengths[index].max())
                ids = torch.full((len(index), width), tokenizer.pad_token_id, dtype=torch.long)
                att = torch.zeros((len(index), width), dtype=torch.long)
                for row, i in enumerate(index):
                    ids[row, : lengths[i]] = torch.tensor(enc[i], dtype=torch.long)
                    att[row, : lengths[i]] = 1
                max_new = int(math.ceil(max_len_a * width + max_len_b))
                with autocast_context(device, precision):
                    generated = model.generate(
                        input_ids=ids.to(device), attention_mask=att.to(device), num_beams=num_beams,
                        do_sample=False, max_length=max_new + 1, early_stopping=num_beams > 1, use_cache=True,
                    )
                texts = tokenizer.batch_decode(generated, skip_special_tokens=True, clean_up_tokenization_spaces=False)
                for i, text in zip(index, texts):
                    out[i] = text
    finally:
        model.train(was_training)
    return out  # type: ignore[return-value]


def evaluate_translation(model: nn.Module, tokenizer, data, **translate_kwargs) -> dict:
    """BLEU and chrF (sacrebleu) of the model's translations of ``data.src`` against ``data.tgt``
    (a model with non-finite weights is refused: NonFiniteError).

    Returns ``translation_metrics.translation_scores`` plus ``"hypotheses"`` (the translations, in order).
    ``translate_kwargs`` go to :func:`translate` (``num_beams``, ``gates``, ``precision``, ...).
    """
    check_finite_weights(model, "the translation model")
    hyps = translate(model, tokenizer, list(data.src), **translate_kwargs)
    scores = translation_scores(hyps, list(data.tgt))
    scores["hypotheses"] = hyps
    return scores
