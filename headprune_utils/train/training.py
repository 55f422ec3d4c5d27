"""Fine-tuning with a fixed head mask, and evaluation.

AdamW (no decay on biases and LayerNorm weights), linear warm-up then linear decay, gradient
clipping, evaluation after every epoch. Pruned heads stay pruned throughout: either physically removed
before training (``pruning.prune_heads``; the fast way for ``"zero"`` ablation) or gated inside
``gates.head_gates`` for the whole run (any ablation). The same seed gives the same numbers on the CPU.

``precision`` (``precision.PRECISIONS``): of :func:`finetune`'s training forward passes and loss, default
``"auto"``: bf16 autocast on a CUDA device that supports it, plain float32 on the CPU (no autocast entered, so CPU
numbers are bit-identical to before the setting existed); ``"fp32"`` forces float32, ``"bf16"`` forces autocast on
any device. Weights and optimizer states stay float32; ``backward()`` runs outside autocast. Scores are computed
in float32 on every device by default (:func:`predict`, :func:`evaluate`, and the epoch choice inside
:func:`finetune`), as the mask sweep computes them, so that a study's numbers never depend on which evaluation
path produced them; ``precision="bf16"`` asks an evaluation for autocast explicitly.

``checkpoint`` (a path stem, :func:`checkpoint_beside`): :func:`finetune` writes its whole state after an epoch it
will continue past (weights, optimizer and schedule states, random-number generators, the history and the best
epoch's weights), atomically, to a file named by the training's identity, and a later call of the same training
resumes from it to the weights and history an uninterrupted run gives (tested bit for bit). A checkpoint written
under another runtime (another kind of machine, ``machine``; another torch thread count or torch version: numbers
differ, and one model is trained under one) or that cannot be used (unreadable, incomplete, another training's) is
set aside with a warning and the training starts from the beginning. The caller removes the checkpoint once the
trained model is stored (:func:`remove_checkpoint`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from headprune_utils.analysis.preconditions import reached_plateau  # noqa: F401 (the rule finetune stops by, for callers)
from headprune_utils.model.gates import Ablation, head_gates
from headprune_utils.model.precision import autocast_context, check_precision
from headprune_utils.tasks.batching import Encoded, eval_batches, iterate, train_batches
from headprune_utils.tasks.metrics import compute_metrics, main_score
from headprune_utils.train import phases
from headprune_utils.train.lean_loss import lean_loss, unsupported_reason


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 3
    batch_size: int = 32
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float | None = 1.0  # None: no clipping
    eval_batch_size: int = 32
    group_by_length: bool = True
    lean: bool = False  # lean_loss: no work on padding nor on the last layer's other tokens (same function)
    # with keep_best: stop once the held-out score has not improved for this many epochs (the plateau); epochs is
    # then the cap, and the learning-rate schedule still spans it. None: train every epoch
    patience: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def set_seed(seed: int) -> None:
    """The one place that seeds Python, NumPy and torch."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


class NonFiniteError(FloatingPointError):
    """A training loss or a model weight is NaN or infinite: never trained on, never scored."""


def check_finite_weights(model: nn.Module, what: str = "the model") -> None:
    """NonFiniteError naming the first parameter with a NaN or infinite value (a model like that is never scored)."""
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p.detach()).all()):
            raise NonFiniteError(f"{what} has non-finite weights (first: {name}); it is not scored. Usual causes: "
                                 "a learning rate far too large or infinite, or a diverged run")


def gate_context(model, gates, ablation, means):
    if gates is None:
        return contextlib.nullcontext()
    return head_gates(model, gates, ablation=ablation, means=means)


@torch.no_grad()
def predict(model: nn.Module, enc: Encoded, batch_size: int = 128, *, precision: str = "fp32") -> np.ndarray:
    """Predictions in the original order: class ids, or float scores for a regression head.
    ``precision``: see the module docstring."""
    check_precision(precision)
    model.eval()
    device = model_device(model)
    preds = np.empty(len(enc), dtype=np.float64)
    for index, batch in iterate(enc, eval_batches(enc.lengths, batch_size), device):
        batch.pop("labels")
        with autocast_context(device, precision):
            logits = model(**batch).logits
        if logits.shape[-1] == 1:
            p = logits.squeeze(-1).float().cpu().numpy()
        else:
            p = logits.argmax(-1).cpu().numpy()
        preds[index] = p
    if not np.isfinite(preds).all():
        raise NonFiniteError(f"the model predicted {int((~np.isfinite(preds)).sum())} non-finite value(s); not scored")
    return preds


def evaluate(
    model: nn.Module,
    enc: Encoded,
    task: str,
    batch_size: int = 128,
    gates: torch.Tensor | None = None,
    ablation: Ablation = "zero",
    means: torch.Tensor | None = None,
    *,
    precision: str = "fp32",
) -> dict[str, float]:
    """The task's official metrics on ``enc`` (with ``gates`` applied when given). A model with non-finite
    weights is refused (NonFiniteError), and so are non-finite predictions. ``precision``: see the module
    docstring."""
    check_precision(precision)
    check_finite_weights(model)
    with gate_context(model, gates, ablation, means):
        preds = predict(model, enc, batch_size, precision=precision)
    labels = enc.labels
    if preds.dtype != labels.dtype and not np.issubdtype(labels.dtype, np.floating):
        preds = preds.astype(labels.dtype)
    return compute_metrics(task, preds, labels)


def _optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "LayerNorm" in name or "layer_norm" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused AdamW: one pass over the parameters per step (foreach makes ~10 on a CPU: 30% of a MiniLM step)
    params = [p for g in groups for p in g["params"]]
    fused = bool(params) and all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return torch.optim.AdamW(groups, lr=cfg.lr, **({"fused": True} if fused else {"foreach": True}))


# ---------------------------------------------------------------------------------------------- checkpoints
CHECKPOINT_STEM = ".training-checkpoint"  # <entry><stem>-<hash of the training's identity>.pt
CHECKPOINT_EVERY = 60.0  # seconds of training between two checkpoints (finetune's checkpoint_every)
# every key a fine-tuning checkpoint holds
CHECKPOINT_KEYS = frozenset({"identity", "runtime", "epochs_done", "step", "history", "best", "model", "optimizer",
                             "scheduler", "rng"})


def checkpoint_beside(entry: str | os.PathLike) -> Path:
    """Where the training of a cache entry (a model file, a scores file) keeps its resumable state: beside it, in
    ``<entry>.training-checkpoint-<hash>.pt`` (the hash of the training's identity: two trainings that build one
    entry, e.g. studies whose dev subsets differ, never resume each other's state)."""
    entry = Path(entry)
    return entry.with_name(entry.name + CHECKPOINT_STEM)


def checkpoint_file(stem: str | os.PathLike, identity: dict) -> Path:
    """The checkpoint file of the training ``identity`` (:func:`training_identity`) under ``stem``."""
    stem = Path(stem)
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return stem.with_name(f"{stem.name}-{digest}.pt")


def remove_checkpoint(stem: str | os.PathLike | None) -> None:
    """Remove every checkpoint under ``stem`` once what it trained is stored, with the files set aside and the
    temporary files of writes cut short (no stem: nothing to do)."""
    if stem is None:
        return
    stem = Path(stem)
    if stem.parent.is_dir():
        for p in [*stem.parent.glob(f"{stem.name}-*.pt*"), *stem.parent.glob(f".{stem.name}-*.tmp")]:
            p.unlink(missing_ok=True)


def runtime(machine: str | None) -> dict:
    """What a training's numbers depend on beyond its identity: the kind of machine (``results.machine_kind``;
    None: not given), torch's thread count (another count rounds otherwise) and torch's version."""
    return {"machine": machine, "torch_threads": torch.get_num_threads(), "torch": torch.__version__}


def _encoded_digest(enc: Encoded | None) -> str | None:
    """A content hash of a split's token ids, token types and labels (what a checkpoint was trained on)."""
    if enc is None:
        return None
    h = hashlib.sha256()
    for seqs in (enc.input_ids, enc.token_type_ids or []):
        for ids in seqs:
            h.update(np.asarray(ids, dtype=np.int64).tobytes())
            h.update(b"|")
        h.update(b"#")
    h.update(np.ascontiguousarray(np.asarray(enc.labels)).tobytes())
    h.update(str(enc.pad_id).encode())
    return h.hexdigest()[:16]


def _tensor_digest(t: torch.Tensor | None) -> str | None:
    return None if t is None else hashlib.sha256(t.detach().float().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


def training_identity(model: nn.Module, train: Encoded, dev: Encoded | None, task: str, cfg: TrainConfig, seed: int,
                      gates: torch.Tensor | None, ablation: str, means: torch.Tensor | None, keep_best: bool,
                      dev_name: str, precision: str, lean: bool) -> dict:
    """What a fine-tuning checkpoint must match to be resumed: resuming another training's state (other config,
    seed, data, mask, semantics, precision or model shape) would silently give weights no uninterrupted run gives."""
    return {"task": task, "config": cfg.as_dict(), "seed": int(seed), "n_train": len(train),
            "train": _encoded_digest(train), "dev": _encoded_digest(dev), "gates": _tensor_digest(gates),
            "ablation": str(ablation), "means": _tensor_digest(means), "keep_best": bool(keep_best),
            "dev_name": dev_name, "precision": precision, "lean": bool(lean),
            "shapes": {k: list(v.shape) for k, v in model.state_dict().items()}}


def _rng_state(device: torch.device) -> dict:
    """The random-number generators a training draws from (dropout: torch's, on the training's device)."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def _set_rng_state(rng: dict, device: torch.device) -> None:
    torch.set_rng_state(rng["torch"])
    if rng.get("cuda") is not None and device.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"], device)
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])


def _save_checkpoint(path: Path, state: dict) -> None:
    """Write ``state`` to ``path`` atomically (a temporary file beside it, then renamed over it): a process killed
    while writing leaves the previous checkpoint whole. A write that fails for want of space or permission leaves
    no half file and is only warned about: the training goes on (the previous checkpoint, if any, stays valid)."""
    tmp = path.with_name(f".{path.name[:-3]}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(state, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        warnings.warn(f"training checkpoint {path} could not be written ({exc}); the training goes on without it",
                      RuntimeWarning, stacklevel=3)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _set_aside(path: Path, suffix: str, why: str) -> None:
    aside = path.with_name(path.name + suffix)
    os.replace(path, aside)
    warnings.warn(f"training checkpoint {path} {why}, so the training starts from the beginning (the checkpoint was "
                  f"moved to {aside.name})", RuntimeWarning, stacklevel=4)


def set_aside_if_other_runtime(path: Path, written: dict | None, now: dict) -> bool:
    """Whether the checkpoint at ``path``, written under ``written`` (:func:`runtime`), must not be resumed under
    ``now``: then it is moved aside (``<name>.other-machine``) with a warning naming what differs, and the training
    starts from the beginning. Numbers differ across machine kinds, thread counts and torch versions, and one model
    is trained under one (a checkpoint written before these were recorded counts as another)."""
    written = written if isinstance(written, dict) else {}
    differ = [f"{k} {written.get(k, 'not recorded')} (now {v})" for k, v in now.items() if written.get(k, "?") != v]
    if not differ:
        return False
    _set_aside(path, ".other-machine", "was written under another " + "; ".join(differ) +
               ": one model is trained on one kind of machine, with one thread count and torch version")
    return True


def _load_checkpoint(path: Path, identity: dict, now: dict) -> dict | None:
    """The checkpoint at ``path`` when it is this training's and was written under the runtime ``now``, else None:
    none there, or one set aside with a warning (written under another runtime; unreadable, incomplete or another
    training's, which its name makes a foreign file: ``.unusable``)."""
    if not path.exists():
        return None
    try:
        ck = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # a truncated file cannot come from our atomic writes, but a foreign one can
        _set_aside(path, ".unusable", f"is unreadable ({type(exc).__name__}: {str(exc)[:200]})")
        return None
    missing = sorted(CHECKPOINT_KEYS - set(ck)) if isinstance(ck, dict) else ["everything"]
    if missing:
        _set_aside(path, ".unusable", f"lacks {', '.join(missing)} (not a fine-tuning checkpoint of this code)")
        return None
    if set_aside_if_other_runtime(path, ck["runtime"], now):
        return None
    if ck["identity"] != identity:
        differ = sorted(k for k in set(identity) | set(ck["identity"]) if identity.get(k) != ck["identity"].get(k))
        _set_aside(path, ".unusable", f"belongs to another training ({', '.join(differ)} differ)")
        return None
    return ck


def linear_schedule(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def finetune(
    model: nn.Module,
    train: Encoded,
    task: str,
    cfg: TrainConfig,
    seed: int,
    dev: Encoded | None = None,
    gates: torch.Tensor | None = None,
    ablation: Ablation = "zero",
    means: torch.Tensor | None = None,
    progress: bool = True,
    desc: str = "fine-tune",
    keep_best: bool = False,
    dev_name: str = "dev",
    *,
    precision: str = "auto",
    checkpoint: str | os.PathLike | None = None,
    machine: str | None = None,
    checkpoint_every: float | None = None,
) -> list[dict]:
    """Fine-tune ``model`` in place; returns one record per epoch (train loss, ``dev`` metrics, seconds).

    ``gates`` (``[n_layers, n_heads]``, fixed, no grad) stay applied during training and evaluation.
    ``keep_best`` (needs ``dev``: a validation split, never the reported dev set): after the last epoch the model's
    weights are those of the epoch with the best ``dev`` score (the first of equals), so the number of epochs is
    chosen on ``dev``, at most ``cfg.epochs`` (the learning-rate schedule spans ``cfg.epochs``); that record has
    ``"selected": True``. ``dev_name`` prefixes the metrics' keys (``dev_accuracy``, ``val_accuracy``, ...).
    ``precision``: of the training forward passes and the loss (see the module docstring; ``"auto"`` on the CPU
    is plain float32); the ``dev`` evaluations are float32.
    ``cfg.patience`` (with ``keep_best``): training stops after the first epoch that is ``patience`` epochs past the
    best one (:func:`~headprune_utils.analysis.preconditions.reached_plateau` says, from the history alone, whether
    a run stopped there or at the cap).
    ``cfg.lean``: the training loss by :func:`lean_loss.lean_loss` (the same function without the work on padding
    and on the last layer's other tokens; the gates applied inside it), where :func:`lean_loss.unsupported_reason`
    allows, else the model's own forward with a ``RuntimeWarning`` saying why.
    ``checkpoint``: the stem of the file (:func:`checkpoint_file`) to write the training's state to after an epoch
    that is not the last, and to resume from when it exists (the module docstring); left in place at the end
    (:func:`remove_checkpoint` once the model is stored). ``machine``: the kind of machine training now
    (``results.machine_kind``), recorded in the checkpoint; a checkpoint of another kind is not resumed. ``checkpoint_every``: seconds of training since the
    last checkpoint (or the start) before the next epoch's end writes one (a MiniLM checkpoint takes about half a
    second to write: short trainings are not worth it); None: :data:`CHECKPOINT_EVERY`; 0: after every epoch. It
    changes no number.
    """
    check_precision(precision)
    if keep_best and dev is None:
        raise ValueError("keep_best needs a dev (validation) set to choose the epoch on")
    if cfg.patience is not None and (not keep_best or cfg.patience < 1):
        raise ValueError(f"TrainConfig.patience={cfg.patience}: early stopping needs keep_best (a validation set to "
                         "judge the plateau on) and a patience of at least 1 epoch")
    lean = False
    if cfg.lean:
        why = unsupported_reason(model)
        if why is None:
            lean = True
        else:
            warnings.warn(f"TrainConfig.lean: {why}; fine-tuning with the model's own forward instead",
                          RuntimeWarning, stacklevel=2)
    set_seed(seed)
    device = model_device(model)
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    warmup = int(round(cfg.warmup_ratio * total))
    opt = _optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: linear_schedule(s, total, warmup))
    lengths = train.lengths
    history = []
    best: tuple[float, int, dict] | None = None  # (score, epoch, weights) of the best epoch so far (keep_best)
    step, first_epoch = 0, 0
    ck_path = None
    if checkpoint is not None:
        identity = training_identity(model, train, dev, task, cfg, seed, gates, ablation, means, keep_best, dev_name,
                                     precision, lean)
        ck_path, now = checkpoint_file(checkpoint, identity), runtime(machine)
        ck = _load_checkpoint(ck_path, identity, now)
        if ck is not None:  # the state after epoch ck["epochs_done"], as an uninterrupted run had it
            model.load_state_dict(ck["model"])
            opt.load_state_dict(ck["optimizer"])
            sched.load_state_dict(ck["scheduler"])
            _set_rng_state(ck["rng"], device)
            first_epoch, step, history, best = ck["epochs_done"], ck["step"], ck["history"], ck["best"]
            if best is not None:
                best = (best[0], best[1], {k: v.to(device) for k, v in best[2].items()})
            phases.report(f"{desc}: resumed from its checkpoint after epoch {first_epoch}")
    last_saved = time.perf_counter()
    checkpoint_every = CHECKPOINT_EVERY if checkpoint_every is None else checkpoint_every
    bar = tqdm(total=total, initial=step, desc=desc, disable=not progress, mininterval=10, leave=False)
    phases.report(phases.steps(f"{desc}: fine-tuning", step, total, first_epoch + 1, cfg.epochs))
    try:
        # lean: the gates are applied inside lean_loss and passed to the evaluations (no hook may be open)
        with contextlib.nullcontext() if lean else gate_context(model, gates, ablation, means):
            for epoch in range(first_epoch, cfg.epochs):
                start = time.perf_counter()
                model.train()
                losses, n_tokens = [], 0
                batches = train_batches(lengths, cfg.batch_size, seed=seed * 1000 + epoch,
                                        group_by_length=cfg.group_by_length)
                for _, batch in iterate(train, batches, device):
                    with autocast_context(device, precision):
                        loss = lean_loss(model, batch, gates, ablation, means)[0] if lean else model(**batch).loss
                    if not bool(torch.isfinite(loss.detach())):
                        raise NonFiniteError(
                            f"{desc}: the training loss is {loss.item()} at step {step + 1} of {total} (epoch "
                            f"{epoch + 1}; lr={cfg.lr:g}, max_grad_norm={cfg.max_grad_norm}); training stopped. "
                            "Lower lr, or keep gradient clipping on.")
                    loss.backward()
                    if cfg.max_grad_norm is not None and cfg.max_grad_norm > 0:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                    opt.step()
                    sched.step()
                    opt.zero_grad(set_to_none=True)
                    losses.append(loss.item())
                    n_tokens += int(batch["attention_mask"].sum())
                    step += 1
                    bar.update(1)
                    phases.report(phases.steps(f"{desc}: fine-tuning", step, total, epoch + 1, cfg.epochs))
                record = {
                    "epoch": epoch + 1,
                    "train_loss": float(np.mean(losses)),
                    "train_seconds": time.perf_counter() - start,
                    "train_tokens": n_tokens,
                }
                if dev is not None:
                    phases.report(f"{desc}: scoring the {dev_name} split after epoch {epoch + 1}/{cfg.epochs}")
                    t0 = time.perf_counter()
                    # gates already applied (lean: passed here); scores in float32 (the module docstring)
                    metrics = (evaluate(model, dev, task, cfg.eval_batch_size, gates=gates, ablation=ablation,
                                        means=means) if lean else evaluate(model, dev, task, cfg.eval_batch_size))
                    record.update({f"{dev_name}_{k}": v for k, v in metrics.items()})
                    record[f"{dev_name}_score"] = main_score(task, metrics)
                    record["eval_seconds"] = time.perf_counter() - t0
                    if keep_best and (best is None or record[f"{dev_name}_score"] > best[0]):
                        best = (record[f"{dev_name}_score"], epoch,
                                {k: v.detach().clone() for k, v in model.state_dict().items()})
                history.append(record)
                if keep_best and cfg.patience is not None and epoch - best[1] >= cfg.patience:
                    break  # the plateau: `patience` epochs without a better held-out score
                if ck_path is not None and epoch + 1 < cfg.epochs and \
                        time.perf_counter() - last_saved >= checkpoint_every:
                    last_saved = time.perf_counter()
                    _save_checkpoint(ck_path, {
                        "identity": identity, "runtime": now, "epochs_done": epoch + 1, "step": step,
                        "history": history, "model": model.state_dict(), "optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict(), "rng": _rng_state(device),
                        "best": None if best is None else (best[0], best[1], {k: v.cpu() for k, v in best[2].items()})})
            if keep_best and best is not None:
                model.load_state_dict(best[2])
                for r in history:
                    r["selected"] = r["epoch"] == best[1] + 1
    finally:
        bar.close()
        model.eval()
    return history
