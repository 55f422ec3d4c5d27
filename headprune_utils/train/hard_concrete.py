"""Stochastic Hard Concrete head gates with a relaxed L0 penalty (Louizos et al. 2018), as Voita et al. (2019) prune.

One gate per head, ``z[l, h]`` in ``[0, 1]``, multiplies the head's context (``gates.head_gates``,
``ablation="zero"`` by default). With ``u ~ U(eps, 1 - eps)``, location ``log_alpha``, temperature ``beta``
and stretch interval ``(gamma, zeta)``:

    s     = sigmoid((log u - log(1 - u) + log_alpha) / beta)
    s_bar = s * (zeta - gamma) + gamma
    z     = clamp(s_bar, 0, 1)                     (exact 0 and 1 have positive probability)

Closed forms (``L`` standard logistic, ``logit(u)`` = ``L``):

    P(z > 0) = sigmoid(log_alpha - beta * log(-gamma / zeta))             (the relaxed L0 of one gate)
    P(z = 0) = 1 - P(z > 0)
    P(z = 1) = sigmoid(log_alpha - beta * log((1 - gamma) / (zeta - 1)))

Defaults: ``beta = 0.33``, ``(gamma, zeta) = (-0.1, 1.1)`` (Voita et al.'s values; Louizos et al. use
``beta = 2/3``). ``log_alpha`` starts at ``init_log_alpha`` or, by default, at the value that gives every gate
``P(z > 0) = init_open_prob = 0.9``: ``log_alpha = logit(0.9) + beta * log(-gamma / zeta) = 1.406``
(then ``P(z = 1) = 0.65``, and the test-time gate below is 1).

Test time (``eval()``): Louizos et al.'s estimator ``z_hat = clamp(sigmoid(log_alpha) * (zeta - gamma) + gamma,
0, 1)``, binarised ``z_hat > threshold`` (0.5 by default, i.e. ``log_alpha > 0``): a gate is open (1, the
head kept) or closed (0, pruned), so the final mask can be pruned physically (``pruning.prune_heads``).

Encoder-decoders (Marian, BART; three grids of heads, ``architecture.SEQ2SEQ_KINDS``):
:class:`HardConcreteGateDict` holds one :class:`HardConcreteGates` per gated attention type (``"enc"``,
``"dec"``, ``"cross"``; any subset, e.g. the encoder alone as Voita et al.'s first setting). It has the same
interface, with dicts by type where one grid gives a tensor (samples, deterministic gates, probabilities), and
ONE penalty: ``expected_l0()`` is the expected number of open gates summed over the gated types, so
``l0_train``'s loss is ``task loss + lam * sum_types sum_heads P(z > 0)`` (Voita et al. use one lambda for all).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch
from torch import nn
from tqdm import tqdm

from headprune_utils.model.architecture import SEQ2SEQ_KINDS, attention_kinds, head_shapes, present_mask
from headprune_utils.model.gates import Ablation, head_gates
from headprune_utils.train import phases

__all__ = ["HardConcreteGates", "HardConcreteGateDict", "L0Result", "l0_train", "n_open"]


class HardConcreteGates(nn.Module):
    """Hard Concrete gates ``[n_layers, n_heads]``; the only parameter is ``log_alpha`` ``[n_layers, n_heads]``.

    ``forward()``: in training mode a fresh sample (differentiable in ``log_alpha``); in eval mode the
    deterministic 0/1 gates of :meth:`deterministic`. Float32 on the module's device.
    """

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        beta: float = 0.33,  # temperature
        gamma: float = -0.1,  # stretch interval (gamma, zeta), gamma < 0 < 1 < zeta
        zeta: float = 1.1,
        init_open_prob: float = 0.9,  # P(z > 0) of every gate at the start (ignored if init_log_alpha given)
        init_log_alpha: float | None = None,
        eps: float = 1e-6,  # u ~ U(eps, 1 - eps): keeps log u finite
    ):
        super().__init__()
        if not (gamma < 0 and zeta > 1 and beta > 0):
            raise ValueError(f"need gamma < 0 < 1 < zeta and beta > 0, got gamma={gamma}, zeta={zeta}, beta={beta}")
        if init_log_alpha is None:
            if not 0 < init_open_prob < 1:
                raise ValueError(f"init_open_prob must be in (0, 1), got {init_open_prob}")
            init_log_alpha = math.log(init_open_prob / (1 - init_open_prob)) + beta * math.log(-gamma / zeta)
        self.beta, self.gamma, self.zeta, self.eps = float(beta), float(gamma), float(zeta), float(eps)
        self.log_alpha = nn.Parameter(torch.full((n_layers, n_heads), float(init_log_alpha)))

    @classmethod
    def for_model(cls, model: nn.Module, **kwargs) -> "HardConcreteGates":
        """Gates shaped like ``model``'s heads (``[n_layers, n_heads]``, original ids), on its device.
        Encoder-decoders: use :meth:`HardConcreteGateDict.for_model`."""
        if None not in attention_kinds(model):
            raise ValueError("an encoder-decoder has one grid of heads per attention type: use "
                             "HardConcreteGateDict.for_model(model, kinds=...)")
        n_layers, n_heads = head_shapes(model)[None]
        return cls(n_layers, n_heads, **kwargs).to(next(model.parameters()).device)

    def sample(self) -> torch.Tensor:
        """A stochastic sample ``z`` ``[n_layers, n_heads]`` in [0, 1], differentiable in ``log_alpha``."""
        u = torch.rand_like(self.log_alpha) * (1 - 2 * self.eps) + self.eps
        s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + self.log_alpha) / self.beta)
        return (s * (self.zeta - self.gamma) + self.gamma).clamp(0.0, 1.0)

    def test_time_estimate(self) -> torch.Tensor:
        """Louizos et al.'s continuous test-time gate ``clamp(sigmoid(log_alpha) (zeta - gamma) + gamma, 0, 1)``."""
        return (torch.sigmoid(self.log_alpha) * (self.zeta - self.gamma) + self.gamma).clamp(0.0, 1.0)

    def deterministic(self, threshold: float = 0.5) -> torch.Tensor:
        """0/1 gates (float, no grad): 1 where :meth:`test_time_estimate` ``> threshold``."""
        with torch.no_grad():
            return (self.test_time_estimate() > threshold).to(self.log_alpha.dtype)

    def forward(self) -> torch.Tensor:
        return self.sample() if self.training else self.deterministic()

    def open_prob(self) -> torch.Tensor:
        """``P(z > 0)`` per gate, ``[n_layers, n_heads]`` (differentiable)."""
        return torch.sigmoid(self.log_alpha - self.beta * math.log(-self.gamma / self.zeta))

    def expected_l0(self) -> torch.Tensor:
        """The relaxed L0 penalty: expected number of open gates, ``sum P(z > 0)`` (scalar, differentiable)."""
        return self.open_prob().sum()

    def extra_repr(self) -> str:
        return f"shape={list(self.log_alpha.shape)}, beta={self.beta}, gamma={self.gamma}, zeta={self.zeta}"


class HardConcreteGateDict(nn.Module):
    """Hard Concrete gates for several attention types of an encoder-decoder: one :class:`HardConcreteGates`
    per type (``gates[kind]``, ``[n_layers, n_heads]`` of that type), all with the same settings.

    ``forward()``, :meth:`sample`, :meth:`deterministic`, :meth:`test_time_estimate`, :meth:`open_prob` return
    dicts ``{kind: [n_layers, n_heads]}`` (what ``gates.head_gates`` takes); :meth:`expected_l0` is the scalar sum
    over the types. Train/eval mode applies to every type.
    """

    def __init__(self, shapes: dict[str, tuple[int, int]], **kwargs):
        super().__init__()
        unknown = sorted(set(shapes) - set(SEQ2SEQ_KINDS))
        if unknown or not shapes:
            raise ValueError(f"shapes must map a non-empty subset of {SEQ2SEQ_KINDS} to (n_layers, n_heads), got {list(shapes)}")
        self.gates = nn.ModuleDict({k: HardConcreteGates(*shapes[k], **kwargs) for k in SEQ2SEQ_KINDS if k in shapes})

    @classmethod
    def for_model(cls, model: nn.Module, kinds: tuple[str, ...] | list[str] | None = None, **kwargs) -> "HardConcreteGateDict":
        """Gates for ``kinds`` (default all three types) shaped like ``model``'s grids, on its device."""
        if None in attention_kinds(model):
            raise ValueError("HardConcreteGateDict is for encoder-decoders; use HardConcreteGates.for_model")
        shapes = head_shapes(model)
        kinds = tuple(attention_kinds(model) if kinds is None else kinds)
        unknown = sorted(set(kinds) - set(shapes))
        if unknown:
            raise ValueError(f"unknown attention type(s) {unknown}; choose from {tuple(shapes)}")
        return cls({k: shapes[k] for k in kinds}, **kwargs).to(next(model.parameters()).device)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.gates.keys())

    @property
    def log_alpha(self) -> dict[str, nn.Parameter]:
        return {k: g.log_alpha for k, g in self.gates.items()}

    def sample(self) -> dict[str, torch.Tensor]:
        return {k: g.sample() for k, g in self.gates.items()}

    def test_time_estimate(self) -> dict[str, torch.Tensor]:
        return {k: g.test_time_estimate() for k, g in self.gates.items()}

    def deterministic(self, threshold: float = 0.5) -> dict[str, torch.Tensor]:
        return {k: g.deterministic(threshold) for k, g in self.gates.items()}

    def forward(self) -> dict[str, torch.Tensor]:
        return self.sample() if self.training else self.deterministic()

    def open_prob(self) -> dict[str, torch.Tensor]:
        return {k: g.open_prob() for k, g in self.gates.items()}

    def expected_l0(self) -> torch.Tensor:
        """The relaxed L0 penalty summed over the gated types: ``sum_kind sum_heads P(z > 0)``."""
        return torch.stack([g.expected_l0() for g in self.gates.values()]).sum()


def n_open(mask) -> int:
    """Heads open in a 0/1 mask, or summed over a dict of masks by type."""
    if isinstance(mask, dict):
        return sum(int(m.sum()) for m in mask.values())
    return int(mask.sum())


@dataclass
class L0Result:
    """``history``: one dict per step (``step, loss, task_loss, expected_l0, open``; dict gates also
    ``open_<kind>`` per type); ``mask``: the final deterministic gates ``[n_layers, n_heads]`` (1 = kept),
    float32 on the CPU (dict gates: a dict of them by type)."""

    history: list[dict] = field(default_factory=list)
    mask: torch.Tensor | dict[str, torch.Tensor] | None = None


def _default_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    loss = model(**batch).loss
    if loss is None:
        raise ValueError("the model returned no loss: give batches with labels or a loss_fn")
    return loss


def l0_train(
    model: nn.Module,
    gates: HardConcreteGates | HardConcreteGateDict,
    train_batches: Iterable[dict[str, torch.Tensor]],
    lam: float,
    steps: int | None = None,
    epochs: int = 1,
    lr: float = 0.05,
    loss_fn: Callable[[nn.Module, dict[str, torch.Tensor]], torch.Tensor] | None = None,
    train_model: bool = False,
    model_lr: float = 2e-5,
    ablation: Ablation = "zero",
    means=None,
    threshold: float = 0.5,
    progress: bool = False,
    until: Callable[[list[dict]], bool] | None = None,
    min_steps: int = 0,
    check_every: int = 10,
) -> L0Result:
    """Train the gates' ``log_alpha`` with ``loss = task loss + lam * gates.expected_l0()`` (Adam, ``lr``).

    model: any model ``gates.head_gates`` supports; by default FROZEN (its parameters get no gradient and are unchanged) and run
        in eval mode (no dropout), as Voita et al. prune a converged model. ``train_model=True`` also fine-tunes
        the parameters that require grad (AdamW, ``model_lr``) in train mode.
    train_batches: a RE-ITERABLE of batches (dicts of model inputs with ``labels``, on the model's device),
        e.g. a list; ``steps`` optimiser steps cycling over it, else ``epochs`` passes.
    gates: :class:`HardConcreteGates` (one grid), or for an encoder-decoder :class:`HardConcreteGateDict` (the
        types it holds are gated, the others left alone; the penalty sums over them).
    lam: weight of the expected number of open gates (loss units per head; larger = fewer heads).
    loss_fn: ``(model, batch) -> scalar``; default the model's own loss (``model(**batch).loss``).
    until: stop early: after at least ``min_steps`` steps, at the first step (checked every ``check_every`` steps and
        at ``min_steps``) where ``until(history)`` is true, e.g. the gates settled
        (:func:`headprune_utils.analysis.preconditions.gates_settled`); ``steps`` stays the cap. None: every step.
    Each step applies a fresh sample ``gates()`` (train mode) through ``head_gates(model, z, ablation)``.
    A model pruned before (``prune_heads``): its absent heads' gates are closed in every record and in the mask,
    and left out of the penalty (the expected number of open PRESENT heads), so the mask can prune the model again.
    Returns :class:`L0Result`; ``gates`` is left in eval mode, the model's mode and ``requires_grad`` restored.
    """
    if isinstance(lam, bool) or not isinstance(lam, numbers.Real) or not math.isfinite(lam) or lam < 0:
        raise ValueError(f"lam must be a finite number >= 0 (the weight of the expected number of open heads), "
                         f"got {lam!r}")
    loss_fn = loss_fn or _default_loss
    device = next(model.parameters()).device
    gates.to(device)
    # heads pruned away before (physically absent) have no gate to learn: closed, and not counted by the penalty
    present = present_mask(model)
    if isinstance(gates, HardConcreteGateDict):
        present = {k: present[k].to(device) for k in gates.kinds}
        shapes = {k: tuple(gates.gates[k].log_alpha.shape) for k in gates.kinds}
        model_shapes = {k: tuple(m.shape) for k, m in present.items()}
    else:
        present = present.to(device)
        shapes, model_shapes = tuple(gates.log_alpha.shape), tuple(present.shape)
    if shapes != model_shapes:
        raise ValueError(f"gates of shape {shapes} for a model whose heads are {model_shapes} "
                         "(HardConcreteGates.for_model builds them to fit)")

    def only_present(m):
        return {k: v * present[k] for k, v in m.items()} if isinstance(m, dict) else m * present

    def expected_open():
        if isinstance(gates, HardConcreteGateDict):
            return torch.stack([(g.open_prob() * present[k]).sum() for k, g in gates.gates.items()]).sum()
        return (gates.open_prob() * present).sum()
    trainable = [p for p in model.parameters() if p.requires_grad]
    flags = [p.requires_grad for p in model.parameters()]
    opt = torch.optim.Adam(list(gates.parameters()), lr=lr)
    model_opt = torch.optim.AdamW(trainable, lr=model_lr) if train_model and trainable else None
    batches = list(train_batches) if not hasattr(train_batches, "__len__") else train_batches
    if len(batches) == 0:
        raise ValueError("l0_train got no batches")
    total = steps if steps is not None else epochs * len(batches)
    result = L0Result()
    was_training = model.training
    try:
        if not train_model:
            for p in model.parameters():
                p.requires_grad_(False)
        model.train(train_model)
        gates.train()
        step = 0
        done = False
        with tqdm(total=total, disable=not progress, desc="L0 gates", leave=False) as bar:
            while step < total and not done:
                for batch in batches:
                    if step >= total or done:
                        break
                    opt.zero_grad(set_to_none=True)
                    if model_opt is not None:
                        model_opt.zero_grad(set_to_none=True)
                    z = gates()
                    with head_gates(model, z, ablation=ablation, means=means):
                        task_loss = loss_fn(model, batch)
                    l0 = expected_open()
                    loss = task_loss + lam * l0
                    loss.backward()
                    opt.step()
                    if model_opt is not None:
                        model_opt.step()
                    det = only_present(gates.deterministic(threshold))
                    n = n_open(det)
                    record = {"step": step, "loss": loss.detach().item(), "task_loss": task_loss.detach().item(),
                              "expected_l0": l0.detach().item(), "open": n}
                    if isinstance(det, dict):
                        record.update({f"open_{k}": int(m.sum()) for k, m in det.items()})
                    result.history.append(record)
                    bar.update(1)
                    phases.report(phases.steps(f"L0 gates (lambda {lam:g}): training", step + 1, total))
                    bar.set_postfix(loss=f"{record['loss']:.3f}", open=n)
                    step += 1
                    if until is not None and step >= min_steps and (step == min_steps or step % check_every == 0):
                        done = bool(until(result.history))
    finally:
        gates.eval()
        for p, f in zip(model.parameters(), flags):
            p.requires_grad_(f)
        model.train(was_training)
    final = only_present(gates.deterministic(threshold))
    if isinstance(final, dict):
        result.mask = {k: m.detach().cpu().to(torch.float32) for k, m in final.items()}
    else:
        result.mask = final.detach().cpu().to(torch.float32)
    return result
