"""Head gates against independent computations on tiny random models."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import tiny_inputs, tiny_model
from headprune_utils.model.architecture import attention_sites, kept_heads
from headprune_utils.model.gates import head_gates, head_means
from headprune_utils.model.pruning import prune_heads


def logits(model, inputs):
    with torch.no_grad():
        return model(**inputs).logits


def reference_forward(model, inputs, gates=None, ablation="zero", means=None):
    """A hand-written BERT forward (no hooks, no attention interface): per-head probabilities are
    computed explicitly, and an ablated head's PROBABILITIES are replaced (uniform over real tokens)
    or its context is scaled/replaced; independent of headprune_utils.model.gates."""
    bert = model.bert
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    b, s = ids.shape
    x = bert.embeddings(input_ids=ids, token_type_ids=torch.zeros_like(ids))
    dtype = x.dtype
    additive = (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
    n_heads = model.config.num_attention_heads
    d = model.config.hidden_size // n_heads
    for l, layer in enumerate(bert.encoder.layer):
        sa = layer.attention.self
        q = sa.query(x).view(b, s, n_heads, d).transpose(1, 2)
        k = sa.key(x).view(b, s, n_heads, d).transpose(1, 2)
        v = sa.value(x).view(b, s, n_heads, d).transpose(1, 2)
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + additive, dim=-1)
        ctx = p @ v  # [b, H, s, d]
        if gates is not None:
            g = gates[l].to(dtype).view(1, n_heads, 1, 1)
            if ablation == "zero":
                ctx = ctx * g
            elif ablation == "uniform":
                pu = mask[:, None, None, :].to(dtype).expand(b, n_heads, s, s)
                pu = pu / pu.sum(-1, keepdim=True)
                ctx = g * ctx + (1 - g) * (pu @ v)
            elif ablation == "mean":
                ctx = g * ctx + (1 - g) * means[l].to(dtype).view(1, n_heads, 1, d)
        ctx = ctx.transpose(1, 2).reshape(b, s, n_heads * d)
        att = layer.attention.output.LayerNorm(layer.attention.output.dense(ctx) + x)
        x = layer.output(layer.intermediate(att), att)
    return model.classifier(bert.pooler(x))


def random_gates(shape, seed, binary=False):
    g = torch.Generator().manual_seed(seed)
    if binary:
        return (torch.rand(shape, generator=g) > 0.5).float()
    return torch.rand(shape, generator=g)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("ablation", ["zero", "uniform", "mean"])
def test_all_gates_one_change_nothing_exactly(attn, ablation):
    model = tiny_model(attn=attn)
    inputs = tiny_inputs()
    base = logits(model, inputs)
    means = torch.randn(3, 4, 8)
    with head_gates(model, torch.ones(3, 4), ablation=ablation, means=means):
        gated = logits(model, inputs)
    assert torch.equal(base, gated)


@pytest.mark.parametrize("ablation", ["zero", "uniform", "mean"])
@pytest.mark.parametrize("binary", [True, False])
def test_gates_match_reference_forward(ablation, binary):
    model = tiny_model(dtype=torch.float64)
    inputs = tiny_inputs()
    gates = random_gates((3, 4), seed=3, binary=binary).double()
    gates[1] = 0.0  # a whole layer ablated
    means = torch.randn(3, 4, 8, dtype=torch.float64)
    with torch.no_grad():
        ref = reference_forward(model, inputs, gates, ablation, means)
        with head_gates(model, gates, ablation=ablation, means=means):
            got = model(**inputs).logits
        assert torch.allclose(reference_forward(model, inputs), model(**inputs).logits, atol=1e-10)
    assert torch.allclose(got, ref, atol=1e-10), (got - ref).abs().max()


def test_uniform_differs_from_zero(bert, inputs):
    gates = torch.ones(3, 4)
    gates[0, 1] = 0
    with head_gates(bert, gates, "zero"):
        z = logits(bert, inputs)
    with head_gates(bert, gates, "uniform"):
        u = logits(bert, inputs)
    assert not torch.allclose(z, u)


def test_hooks_removed_after_block_and_on_error(bert, inputs):
    base = logits(bert, inputs)
    n_hooks = lambda: sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in bert.modules())
    assert n_hooks() == 0
    with head_gates(bert, torch.zeros(3, 4), "uniform"):
        assert n_hooks() > 0
        assert not torch.allclose(logits(bert, inputs), base)
    assert n_hooks() == 0
    with pytest.raises(RuntimeError, match="boom"):
        with head_gates(bert, torch.zeros(3, 4)):
            raise RuntimeError("boom")
    assert n_hooks() == 0
    assert torch.equal(logits(bert, inputs), base)


def test_bad_gate_shape_and_ablation(bert):
    with pytest.raises(ValueError, match=r"\[n_layers, n_heads\] = \[3, 4\]"):
        with head_gates(bert, torch.ones(4, 3)):
            pass
    with pytest.raises(ValueError, match="unknown ablation"):
        with head_gates(bert, torch.ones(3, 4), ablation="random"):
            pass
    with pytest.raises(ValueError, match="needs means"):
        with head_gates(bert, torch.ones(3, 4), ablation="mean"):
            pass


@pytest.mark.parametrize("ablation", ["zero", "uniform"])
def test_gradients_reach_gates_and_match_finite_differences(ablation):
    model = tiny_model(dtype=torch.float64)
    inputs = tiny_inputs()
    labels = torch.tensor([0, 2, 1])
    gates = torch.full((3, 4), 0.7, dtype=torch.float64, requires_grad=True)
    with head_gates(model, gates, ablation=ablation):
        loss = model(**inputs, labels=labels).loss
    loss.backward()
    assert gates.grad is not None and bool((gates.grad != 0).all())
    eps = 1e-6
    for l, h in [(0, 0), (1, 3), (2, 2)]:
        vals = []
        for sign in (1, -1):
            g = gates.detach().clone()
            g[l, h] += sign * eps
            with torch.no_grad(), head_gates(model, g, ablation=ablation):
                vals.append(model(**inputs, labels=labels).loss.item())
        fd = (vals[0] - vals[1]) / (2 * eps)
        assert gates.grad[l, h].item() == pytest.approx(fd, rel=1e-5, abs=1e-8)


def test_head_means_match_direct_average():
    model = tiny_model(dtype=torch.float64)
    inputs = tiny_inputs()
    means = head_means(model, [inputs])
    # direct: per-head context from the reference computation, averaged over real tokens
    bert = model.bert
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    b, s = ids.shape
    x = bert.embeddings(input_ids=ids, token_type_ids=torch.zeros_like(ids))
    additive = (1.0 - mask[:, None, None, :].double()) * torch.finfo(torch.float64).min
    with torch.no_grad():
        for l, layer in enumerate(bert.encoder.layer):
            sa = layer.attention.self
            q, k, v = (f(x).view(b, s, 4, 8).transpose(1, 2) for f in (sa.query, sa.key, sa.value))
            ctx = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8) + additive, -1) @ v  # [b,H,s,d]
            w = mask.double()
            direct = torch.einsum("bhsd,bs->hd", ctx, w) / w.sum()
            assert torch.allclose(means[l].double(), direct, atol=1e-6)
            att = layer.attention.output.LayerNorm(layer.attention.output.dense(ctx.transpose(1, 2).reshape(b, s, 32)) + x)
            x = layer.output(layer.intermediate(att), att)


@pytest.mark.parametrize("kind", ["bert", "roberta", "electra", "distilbert"])
def test_other_families_all_ones_and_zero_gate_equals_pruning(kind):
    model = tiny_model(kind)
    inputs = tiny_inputs()
    if kind == "distilbert":
        inputs = {k: v for k, v in inputs.items()}
    base = logits(model, inputs)
    with head_gates(model, torch.ones(3, 4)):
        assert torch.equal(logits(model, inputs), base)
    mask = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.float32)
    with head_gates(model, mask):
        gated = logits(model, inputs)
    prune_heads(model, mask)
    assert torch.allclose(logits(model, inputs), gated, atol=1e-5)
    assert kept_heads(model) == [[0, 2], [], [0, 1, 2]]
    assert len(attention_sites(model)) == 3


def test_gate_blocks_left_out_of_order_remove_their_own_record_only():
    """Enter A, enter B, leave A, leave B (an ExitStack or manual __exit__): between the exits B is still gating and
    active_gates shows B alone (it showed nothing), and afterwards no record is left (A's stayed behind, and
    prune_heads refused the model as 'inside a head_gates block' from then on)."""
    from headprune_utils.model.architecture import active_gates

    model = tiny_model()
    x = tiny_inputs()
    base = model(**x).logits
    a_gates, b_gates = torch.ones(3, 4), torch.ones(3, 4)
    a_gates[0, 0], b_gates[1, 1] = 0.0, 0.0
    a, b = head_gates(model, a_gates), head_gates(model, b_gates)
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    assert [g[None] for _, g in active_gates(model)] == [b_gates]
    with head_gates(model, b_gates):
        only_b = model(**x).logits
    assert torch.allclose(model(**x).logits, only_b)  # B alone is gating
    b.__exit__(None, None, None)
    assert active_gates(model) == [] and torch.allclose(model(**x).logits, base)
    prune_heads(model, a_gates)  # not refused


def test_gates_and_means_that_cannot_work_are_refused_when_the_block_opens_naming_them():
    """Odd gate values (None, text, complex, meta tensors) and means of a wrong head size used to give bare torch or
    Python errors (means: only at the first forward)."""
    model = tiny_model()
    for bad, match in ((None, "gates is None"), ("0101", "grid of numbers, got str"),
                       (torch.ones(3, 4, dtype=torch.complex64), "real numbers"),
                       (torch.ones(3, 4, device="meta"), "meta device")):
        with pytest.raises(ValueError, match=match):
            with head_gates(model, bad):
                pass
    d = attention_sites(model)[0].head_dim
    for shape in ((3, 4), (3, 4, d + 1)):
        with pytest.raises(ValueError, match=rf"means must be \[n_layers, n_heads, head_dim\] = \[3, 4, {d}\]"):
            with head_gates(model, torch.ones(3, 4), ablation="mean", means=torch.zeros(shape)):
                pass
    assert not hasattr(model, "_headprune_active_gates") or not model._headprune_active_gates
