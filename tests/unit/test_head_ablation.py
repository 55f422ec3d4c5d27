"""``gates.ablate_heads`` (the one ablation formula) against the inline formulas it replaced, bit for bit.

The two ``former_*`` functions below are the code as it stood in ``gates.head_gates``' hook and in
``mask_sweep._LayerStep.finish`` before both called ``ablate_heads``; they are kept here verbatim (only
wrapped in functions) so that the refactoring is checked to keep every float the same (``torch.equal``).
"""
from __future__ import annotations

import pytest
import torch

from headprune_utils.model.gates import ablate_heads

B, S, N, D = 3, 7, 4, 8  # batch, seq, heads, head_dim


def former_gates_hook(ctx4, g, ablation, v=None, key_mask=None, m=None):
    """``gates.head_gates``' hook: ``ctx4`` [b, s, n, d], ``g`` [n], ``v`` [b, s, n, d], ``m`` [n, d]."""
    b, s, n, head_dim = ctx4.shape
    g4 = g.view(1, 1, -1, 1)
    if ablation == "zero":
        out = ctx4 * g4
    elif ablation == "uniform":
        if key_mask is None:
            u = v.mean(dim=1, keepdim=True)
        else:
            w = key_mask.to(v.dtype).view(b, s, 1, 1)
            u = (v * w).sum(dim=1, keepdim=True) / w.sum(dim=1, keepdim=True).clamp_min(1.0)
        out = ctx4 * g4 + (1 - g4) * u
    else:
        out = ctx4 * g4 + (1 - g4) * m.view(1, 1, n, head_dim)
    return out


def former_sweep_full(full, row, ablation, v=None, key_mask=None, means_l=None, cls_only=False, row_sentence=None):
    """``mask_sweep._LayerStep.finish``, every present head: ``full`` [R, n, d] (R packed rows), ``row`` the
    gates as a tuple, ``v`` [B, S, n, d], ``means_l`` [n, d]."""
    n, d = full.shape[1:]
    bt_b, bt_s = v.shape[:2] if v is not None else (None, None)
    g3 = torch.tensor(row, dtype=full.dtype, device=full.device).view(1, n, 1)
    if ablation == "zero":
        out = full * g3
    elif ablation == "uniform":
        if key_mask is None:
            u = v.mean(dim=1)
        else:
            w = key_mask.to(v.dtype).view(bt_b, bt_s, 1, 1)
            u = (v * w).sum(dim=1) / w.sum(dim=1).clamp_min(1.0)  # [B, n, d]
        out = full * g3 + (1 - g3) * (u if cls_only else u.index_select(0, row_sentence))
    else:
        out = full * g3 + (1 - g3) * means_l.view(1, n, d)
    return out


def former_sweep_sliced(c, g):
    """``mask_sweep._LayerStep.finish``, ``"zero"`` with head slicing: ``c`` [R, k, d] kept heads, ``g`` a list."""
    return c * torch.tensor(g, dtype=c.dtype, device=c.device).view(1, -1, 1)


def _data(seed: int, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    ctx = torch.randn(B, S, N, D, generator=gen, dtype=dtype)
    v = torch.randn(B, S, N, D, generator=gen, dtype=dtype)
    means = torch.randn(N, D, generator=gen, dtype=dtype)
    g = torch.rand(N, generator=gen, dtype=dtype)
    g[0], g[1] = 0.0, 1.0  # a pruned and a kept head among fractional gates
    lengths = torch.tensor([S, S - 2, 1])
    key_mask = (torch.arange(S)[None, :] < lengths[:, None]).long()  # ragged, 1 = real token
    return ctx, v, means, g, key_mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ablation", ["zero", "uniform", "mean"])
@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reproduces_gates_hook_exactly(dtype, ablation, masked, seed):
    ctx, v, means, g, key_mask = _data(seed, dtype)
    km = key_mask if masked else None
    want = former_gates_hook(ctx, g, ablation, v=v, key_mask=km, m=means)
    got = ablate_heads(ctx, g, ablation, values=v, key_mask=km, means=means)
    assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ablation", ["zero", "uniform", "mean"])
@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("cls_only", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reproduces_mask_sweep_exactly(dtype, ablation, masked, cls_only, seed):
    _, v, means, g, key_mask = _data(seed, dtype)
    km = key_mask if masked else None
    gen = torch.Generator().manual_seed(100 + seed)
    if cls_only:  # one row per sentence (token 0)
        row_sentence = None
        full = torch.randn(B, N, D, generator=gen, dtype=dtype)
    else:  # packed: one row per real token, sentence by sentence
        real = key_mask.reshape(-1).nonzero().squeeze(1)
        row_sentence = real // S
        full = torch.randn(len(real), N, D, generator=gen, dtype=dtype)
    row = tuple(g.tolist())
    want = former_sweep_full(full, row, ablation, v=v, key_mask=km, means_l=means, cls_only=cls_only,
                             row_sentence=row_sentence)
    got = ablate_heads(full.unsqueeze(1), torch.tensor(row, dtype=dtype), ablation, values=v, key_mask=km,
                       means=means, rows=row_sentence)
    assert got.shape == (full.shape[0], 1, N, D)
    assert torch.equal(got.reshape(want.shape), want)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reproduces_mask_sweep_sliced_zero_exactly(seed):
    gen = torch.Generator().manual_seed(seed)
    c = torch.randn(11, 3, D, generator=gen)
    g = [0.25, 1.0, 0.7]
    want = former_sweep_sliced(c, g)
    got = ablate_heads(c.unsqueeze(1), torch.tensor(g, dtype=c.dtype), "zero")
    assert torch.equal(got.reshape(want.shape), want)


def test_gates_one_change_nothing_and_zero_gates_give_the_ablated_output():
    ctx, v, means, _, key_mask = _data(0)
    for ablation in ("zero", "uniform", "mean"):
        out = ablate_heads(ctx, torch.ones(N), ablation, values=v, key_mask=key_mask, means=means)
        assert torch.equal(out, ctx)
    assert torch.equal(ablate_heads(ctx, torch.zeros(N), "zero"), torch.zeros_like(ctx))
    assert torch.allclose(ablate_heads(ctx, torch.zeros(N), "mean", means=means), means.expand_as(ctx))
    uni = ablate_heads(ctx, torch.zeros(N), "uniform", values=v, key_mask=key_mask)
    # sentence 2 has one real token: attending uniformly over it gives that token's values
    assert torch.allclose(uni[2], v[2, :1].expand(S, N, D))
    assert torch.allclose(uni[0], v[0].mean(dim=0).expand(S, N, D))


def test_unknown_ablation_is_an_error():
    ctx, *_ = _data(0)
    with pytest.raises(ValueError, match="unknown ablation"):
        ablate_heads(ctx, torch.ones(N), "random")


def test_gradient_flows_to_the_gates():
    ctx, v, means, _, key_mask = _data(0)
    g = torch.full((N,), 0.5, requires_grad=True)
    ablate_heads(ctx, g, "mean", means=means).sum().backward()
    assert g.grad is not None and torch.isfinite(g.grad).all()
