"""Per-head parameters and their relative change, against hand computations on a tiny BERT."""
from __future__ import annotations

import copy
import math

import torch

from headprune_utils.model.head_weights import PARTS, head_parameters, relative_change
from headprune_utils.model.masks import mask_from_pruned
from headprune_utils.model.pruning import prune_heads
from tests.conftest import tiny_model


def test_a_change_to_one_head_is_seen_in_that_head_only():
    before = tiny_model("bert", dtype=torch.float64)
    after = copy.deepcopy(before)
    d = 32 // 4
    att = after.bert.encoder.layer[1].attention
    with torch.no_grad():
        att.self.query.weight[2 * d:3 * d] += 0.5  # head 2 of layer 1
        att.output.dense.weight[:, 0:d] *= 2.0     # head 0 of layer 1 (output columns)
    ch = relative_change(before, after)
    q = before.bert.encoder.layer[1].attention.self.query
    w, b = q.weight.detach()[2 * d:3 * d], q.bias.detach()[2 * d:3 * d]
    expect_q = math.sqrt(0.25 * w.numel()) / math.sqrt(float(w.pow(2).sum() + b.pow(2).sum()))
    assert math.isclose(float(ch["query"][1, 2]), expect_q, rel_tol=1e-12)
    assert math.isclose(float(ch["output"][1, 0]), 1.0, rel_tol=1e-12)  # doubled: ||W|| / ||W||
    nonzero = {(p, l, h) for p in PARTS for l in range(3) for h in range(4) if float(ch[p][l, h]) != 0}
    assert nonzero == {("query", 1, 2), ("output", 1, 0)}
    assert float(ch["all"][1, 3]) == 0 and float(ch["all"][1, 2]) > 0


def test_pruned_heads_are_nan_and_kept_heads_keep_their_ids():
    before = tiny_model("bert", dtype=torch.float64)
    after = copy.deepcopy(before)
    with torch.no_grad():
        after.bert.encoder.layer[0].attention.self.value.weight.mul_(1.5)
    pruned = copy.deepcopy(after)
    prune_heads(pruned, mask_from_pruned(3, 4, [(0, 1), (2, 0), (2, 1), (2, 2), (2, 3)]))
    full, part = relative_change(before, after), relative_change(before, pruned)
    for p in (*PARTS, "all"):
        assert torch.isnan(part[p][0, 1]) and torch.isnan(part[p][2]).all()
        keep = ~torch.isnan(part[p])
        torch.testing.assert_close(part[p][keep], full[p][keep], rtol=1e-12, atol=0)
    params = head_parameters(pruned)
    assert params["query"][0][1] is None and params["key"][0][2] is not None
