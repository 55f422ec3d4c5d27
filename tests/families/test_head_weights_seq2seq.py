"""``head_weights`` on encoder-decoders (BART, T5): one grid of per-head parameters and relative changes per
attention type, against the weights' rows and columns read by hand."""
from __future__ import annotations

import copy
import functools
import math

import pytest
import torch

from headprune_utils.model import architecture as A
from headprune_utils.model.head_weights import PARTS, head_parameters, relative_change
from headprune_utils.model.pruning import prune_heads

from .fixtures import FIXTURES

KINDS = ("enc", "dec", "cross")
D, H, L = 8, 4, 2


@functools.lru_cache(maxsize=None)
def _model(name):
    return FIXTURES[name].build()


def _modules(model, name, kind, layer):
    """``(q, k, v, o)`` Linears of ``kind``'s layer ``layer``, found by the models' own attribute names."""
    if name == "bart":
        stack = model.model.encoder if kind == "enc" else model.model.decoder
        a = getattr(stack.layers[layer], {"enc": "self_attn", "dec": "self_attn", "cross": "encoder_attn"}[kind])
        return a.q_proj, a.k_proj, a.v_proj, a.out_proj
    stack = model.encoder if kind == "enc" else model.decoder
    block = stack.block[layer]
    a = block.layer[1].EncDecAttention if kind == "cross" else block.layer[0].SelfAttention
    return a.q, a.k, a.v, a.o


def _own(lin, h, rows=True):
    w = lin.weight.detach()
    if not rows:
        return w[:, h * D:(h + 1) * D].reshape(-1)
    b = lin.bias.detach()[h * D:(h + 1) * D] if lin.bias is not None else w.new_zeros(0)
    return torch.cat([w[h * D:(h + 1) * D].reshape(-1), b])


@pytest.mark.parametrize("name", ["bart", "t5"])
def test_parameters_are_each_heads_own_rows_per_kind(name):
    model = _model(name)
    params = head_parameters(model)
    assert set(params) == set(KINDS)
    for kind in KINDS:
        for layer in range(L):
            q, k, v, o = _modules(model, name, kind, layer)
            for h in range(H):
                want = {"query": _own(q, h), "key": _own(k, h), "value": _own(v, h), "output": _own(o, h, False)}
                for part in PARTS:
                    got = params[kind][part][layer][h]
                    assert got.dtype == torch.float64 and torch.equal(got, want[part].double()), (kind, part)


@pytest.mark.parametrize("name", ["bart", "t5"])
def test_a_change_to_one_head_is_seen_in_that_head_and_kind_only(name):
    before = _model(name)
    after = copy.deepcopy(before)
    q_dec = _modules(after, name, "dec", 1)[0]
    o_cross = _modules(after, name, "cross", 0)[3]
    with torch.no_grad():
        q_dec.weight[2 * D:3 * D] += 0.5  # head 2 of decoder layer 1
        o_cross.weight[:, 0:D] *= 2.0  # head 0 of cross-attention layer 0 (output columns)
    ch = relative_change(before, after)
    assert set(ch) == set(KINDS)
    q = _modules(before, name, "dec", 1)[0]
    w = q.weight.detach()[2 * D:3 * D]
    n2 = float(w.pow(2).sum()) + (float(q.bias.detach()[2 * D:3 * D].pow(2).sum()) if q.bias is not None else 0.0)
    assert math.isclose(float(ch["dec"]["query"][1, 2]), math.sqrt(0.25 * w.numel()) / math.sqrt(n2), rel_tol=1e-12)
    assert math.isclose(float(ch["cross"]["output"][0, 0]), 1.0, rel_tol=1e-12)  # doubled: ||W|| / ||W||
    nonzero = {(kind, p, l, h) for kind in KINDS for p in PARTS for l in range(L) for h in range(H)
               if float(ch[kind][p][l, h]) != 0}
    assert nonzero == {("dec", "query", 1, 2), ("cross", "output", 0, 0)}
    for kind in KINDS:
        assert all(ch[kind][p].shape == (L, H) and ch[kind][p].dtype == torch.float64 for p in (*PARTS, "all"))
        assert not any(bool(torch.isnan(ch[kind][p]).any()) for p in (*PARTS, "all"))


@pytest.mark.parametrize("name", ["bart", "t5"])
def test_pruned_heads_are_nan_in_their_kind_only(name):
    before = _model(name)
    after = copy.deepcopy(before)
    with torch.no_grad():
        for kind in KINDS:
            for layer in range(L):
                _modules(after, name, kind, layer)[2].weight.mul_(1.5)
    mask = torch.ones(L, H)
    mask[0, 1] = 0
    mask[1] = 0
    pruned = prune_heads(copy.deepcopy(after), {"cross": mask})
    full, part = relative_change(before, after), relative_change(before, pruned)
    for kind in KINDS:
        for p in (*PARTS, "all"):
            gone = torch.isnan(part[kind][p])
            assert bool(gone.eq(mask == 0).all()) if kind == "cross" else not bool(gone.any())
            torch.testing.assert_close(part[kind][p][~gone], full[kind][p][~gone], rtol=1e-12, atol=0)
    assert head_parameters(pruned)["cross"]["query"][0][1] is None
    assert A.kept_heads(pruned, "cross") == [[0, 2, 3], []]


def test_models_with_different_grids_are_refused():
    with pytest.raises(ValueError, match="different grids"):
        relative_change(_model("t5"), FIXTURES["bert"].build())
