"""Ablation semantics as objects (``model/ablations``): what each declares, the names accepted at the edges, and a
new semantics written as one class working through every gating path (hooks, mask sweep, lean loss)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import headprune_utils
from conftest import tiny_inputs, tiny_model
from headprune_utils.model.ablations import (
    ABLATION_OBJECTS, ABLATIONS, HeadAblation, MeanAblation, UniformAblation, ZeroAblation, as_ablation,
)
from headprune_utils.model.gates import ablate_heads, head_gates
from headprune_utils.measure.mask_sweep import logits_masks, plain_logits_masks
from headprune_utils.tasks.batching import Encoded
from headprune_utils.train.lean_loss import lean_loss

PKG = Path(headprune_utils.__file__).parent


class Negate(HeadAblation):
    """A semantics for the test: the ablated head outputs minus its context, so gate g gives (2g - 1) * context,
    which is zero-ablation at gate 2g - 1."""

    name = "negate"
    reads_context = True

    def ablated(self, context, **_):
        return -context


def test_names_and_objects():
    assert ABLATIONS == ("zero", "uniform", "mean")
    for name in ABLATIONS:
        obj = as_ablation(name)
        assert obj.name == name and as_ablation(obj) is obj and ABLATION_OBJECTS[name] is obj
    assert as_ablation(Negate()).name == "negate"
    with pytest.raises(ValueError, match=r"unknown ablation 'half'; choose one of \('zero', 'uniform', 'mean'\)"):
        as_ablation("half")
    with pytest.raises(ValueError, match="unknown ablation"):
        as_ablation(None)


def test_what_each_semantics_declares():
    zero, uniform, mean = ZeroAblation(), UniformAblation(), MeanAblation()
    assert zero.equals_removal and not zero.needs_means and not zero.needs_values
    assert not (zero.reads_context or uniform.reads_context or mean.reads_context)
    assert uniform.needs_values and not uniform.equals_removal and not uniform.needs_means
    assert mean.needs_means and not mean.equals_removal and not mean.needs_values
    assert zero.supports("dec") and mean.supports("cross") and uniform.supports("enc") and uniform.supports(None)
    assert not uniform.supports("dec") and not uniform.supports("cross")
    assert zero == as_ablation("zero") and zero != mean and len({zero, as_ablation("zero"), mean}) == 2


def test_apply_is_the_gate_formula():
    g = torch.Generator().manual_seed(0)
    ctx = torch.randn(2, 5, 3, 4, generator=g, dtype=torch.float64)
    values = torch.randn(2, 5, 3, 4, generator=g, dtype=torch.float64)
    key_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    means = torch.randn(3, 4, generator=g, dtype=torch.float64)
    gates = torch.tensor([0.0, 0.3, 1.0], dtype=torch.float64)
    gv = gates.view(1, 1, 3, 1)
    assert torch.equal(ablate_heads(ctx, gates, "zero"), ctx * gv)
    uniform = torch.stack([values[0, :3].mean(0), values[1].mean(0)])[:, None]
    torch.testing.assert_close(ablate_heads(ctx, gates, "uniform", values=values, key_mask=key_mask),
                               ctx * gv + (1 - gv) * uniform)
    torch.testing.assert_close(ablate_heads(ctx, gates, "mean", means=means), ctx * gv + (1 - gv) * means)
    torch.testing.assert_close(ablate_heads(ctx, gates, Negate()), ctx * (2 * gv - 1))


def test_a_new_semantics_is_one_class_through_every_path():
    model = tiny_model("bert", dtype=torch.float64)
    inputs = tiny_inputs(batch=4)
    gates = torch.rand(3, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    gates[1, 2] = 0.0
    with torch.no_grad():
        with head_gates(model, gates, ablation=Negate()):
            got = model(**inputs).logits
        with head_gates(model, 2 * gates - 1, ablation="zero", allow_out_of_range=True):
            want = model(**inputs).logits
    torch.testing.assert_close(got, want)
    assert not torch.allclose(got, model(**inputs).logits)
    # the shared mask sweep and the lean loss take the object too, with the same numbers
    ids = [row[m.bool()].tolist() for row, m in zip(inputs["input_ids"], inputs["attention_mask"])]
    enc = Encoded(ids, None, torch.tensor([0, 1, 2, 1]).numpy(), 0)
    swept = logits_masks(model, enc, {"g": gates}, batch_size=4, ablation=Negate())["g"]
    plain = plain_logits_masks(model, enc, {"g": gates}, batch_size=4, ablation=Negate())["g"]
    torch.testing.assert_close(swept, plain)
    _, lean = lean_loss(model, {**inputs, "labels": torch.tensor([0, 1, 2, 1])}, gates=gates, ablation=Negate())
    torch.testing.assert_close(lean, got)


def test_no_semantics_is_compared_by_name_in_the_model_layers():
    offenders = []
    for sub in ("model", "measure", "train"):
        for path in sorted((PKG / sub).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Compare):
                    consts = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                    if any(c in ABLATIONS for c in consts):
                        offenders.append(f"{path.relative_to(PKG.parent)}:{node.lineno}")
    assert not offenders, "ablation semantics compared by name (ask the object instead): " + ", ".join(offenders)


def test_no_study_compares_an_ablation_by_name():
    # the studies pass the semantics of their parameters on; what a semantics needs or equals comes from its object
    offenders = []
    for path in sorted((PKG / "studies").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and "ablation" in ast.unparse(node):
                consts = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                if any(c in ABLATIONS for c in consts):
                    offenders.append(f"{path.relative_to(PKG.parent)}:{node.lineno}")
    assert not offenders, "ablation semantics compared by name (ask the object instead): " + ", ".join(offenders)
