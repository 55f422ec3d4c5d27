"""Hard Concrete L0 gates (Voita et al.) train a few steps on every family the adapters cover, through the same
hooks as the fixed gates: the gates' parameters move, the loss stays finite, the model stays frozen. (The gates'
arithmetic is checked against the reference in each family's own test file; this is the training loop.)"""
from __future__ import annotations

import copy

import pytest
import torch

from headprune_utils.model.architecture import attention_kinds, head_shapes
from headprune_utils.train.hard_concrete import HardConcreteGateDict, HardConcreteGates, l0_train

from .fixtures import FIXTURES

NAMES = ("bert", "distilbert", "marian", "gpt2", "gpt_neox", "opt", "llama_gqa", "mistral", "qwen2", "qwen3",
         "qwen3_moe", "gpt_oss", "gemma3", "phi3", "olmo2", "modernbert", "t5")


def _batch(name):
    fx = FIXTURES[name]
    batch = fx.inputs()
    if fx.encoder_decoder:  # teacher-forced targets: the decoder inputs shifted by one
        dec = batch["decoder_input_ids"]
        return {**batch, "labels": torch.cat([dec[:, 1:], dec[:, :1]], dim=1)}
    if "causal" in type(fx.build("eager")).__name__.lower() or fx.grids[None].causal:
        return {**batch, "labels": batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)}
    return {**batch, "labels": torch.tensor([0, 2])}  # sequence classification (num_labels 3)


@pytest.mark.parametrize("name", NAMES)
def test_l0_gates_train_a_few_steps(name):
    fx = FIXTURES[name]
    model = fx.build(fx.attn_implementations[0])
    batch = _batch(name)
    shapes = head_shapes(model)
    kinds = attention_kinds(model)
    make = (lambda: HardConcreteGateDict({k: shapes[k] for k in kinds})) if kinds != (None,) else \
        (lambda: HardConcreteGates(*shapes[None]))
    torch.manual_seed(0)
    gates = make()
    start = copy.deepcopy(gates)
    before = [p.detach().clone() for p in model.parameters()]
    # lam = 0: only the task loss moves the gates, so a gate the hooks do not reach would stay where it started
    result = l0_train(model, gates, [batch], lam=0.0, steps=3, lr=0.1)
    assert len(result.history) == 3 and all(torch.isfinite(torch.tensor(float(r["loss"]))) for r in result.history)
    moved = [not torch.equal(a.detach(), b.detach()) for a, b in zip(gates.parameters(), start.parameters())]
    assert all(moved), name  # every grid's gates got a gradient from the loss
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the model stays frozen
