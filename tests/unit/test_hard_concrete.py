"""Hard Concrete gates and L0 training: closed forms, limits, physical-pruning equivalence, a short training."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import tiny_inputs, tiny_model
from headprune_utils.model.gates import head_gates
from headprune_utils.train.hard_concrete import HardConcreteGates, l0_train
from headprune_utils.model.pruning import prune_heads

BETA, GAMMA, ZETA = 0.33, -0.1, 1.1


def test_defaults_and_init_open_probability():
    g = HardConcreteGates(3, 4)
    assert (g.beta, g.gamma, g.zeta) == (BETA, GAMMA, ZETA)
    torch.testing.assert_close(g.open_prob(), torch.full((3, 4), 0.9))
    want = math.log(9) + BETA * math.log(-GAMMA / ZETA)
    torch.testing.assert_close(g.log_alpha.detach(), torch.full((3, 4), want))
    assert bool((g.eval()() == 1).all())  # starts open at test time
    assert HardConcreteGates(2, 2, init_log_alpha=-1.0).log_alpha.detach().eq(-1.0).all()
    with pytest.raises(ValueError):
        HardConcreteGates(2, 2, gamma=0.1)


def test_expected_l0_value_and_gradient_match_the_hand_formula():
    torch.manual_seed(0)
    g = HardConcreteGates(3, 4)
    with torch.no_grad():
        g.log_alpha.copy_(torch.randn(3, 4) * 2)
    la = g.log_alpha.detach().double()
    s = torch.sigmoid(la - BETA * math.log(-GAMMA / ZETA))
    l0 = g.expected_l0()
    assert l0.detach().item() == pytest.approx(float(s.sum()), rel=1e-6)
    l0.backward()
    torch.testing.assert_close(g.log_alpha.grad.double(), s * (1 - s), rtol=1e-5, atol=1e-7)


def test_samples_in_unit_interval_and_exact_zero_one_shares_match_closed_forms():
    torch.manual_seed(0)
    values = torch.tensor([[-3.0, -1.0, 0.0], [0.5, 1.5, 3.0]])
    g = HardConcreteGates(2, 3)
    with torch.no_grad():
        g.log_alpha.copy_(values)
    g.train()
    n = 20000
    with torch.no_grad():
        z = torch.stack([g() for _ in range(n)])  # [n, 2, 3]
    assert bool((z >= 0).all()) and bool((z <= 1).all())
    p_open = (z > 0).double().mean(0)
    p_one = (z == 1).double().mean(0)
    want_open = torch.sigmoid(values.double() - BETA * math.log(-GAMMA / ZETA))
    want_one = torch.sigmoid(values.double() - BETA * math.log((1 - GAMMA) / (ZETA - 1)))
    tol = 4.5 * torch.sqrt(0.25 / torch.tensor(float(n)))  # > 4 standard errors
    assert bool(((p_open - want_open).abs() < tol).all()), (p_open, want_open)
    assert bool(((p_one - want_one).abs() < tol).all()), (p_one, want_one)
    torch.testing.assert_close(want_open.sum(), g.expected_l0().double().detach())
    # the samples are differentiable in log_alpha
    g.zero_grad()
    g().sum().backward()
    assert g.log_alpha.grad is not None and bool(torch.isfinite(g.log_alpha.grad).all())


def test_deterministic_gates_follow_the_test_time_estimator():
    g = HardConcreteGates(1, 4)
    with torch.no_grad():
        g.log_alpha.copy_(torch.tensor([[-2.0, -0.1, 0.1, 2.0]]))
    est = torch.clamp(torch.sigmoid(g.log_alpha.detach()) * (ZETA - GAMMA) + GAMMA, 0, 1)
    torch.testing.assert_close(g.test_time_estimate().detach(), est)
    assert g.deterministic().tolist() == [[0.0, 0.0, 1.0, 1.0]]  # threshold 0.5 <=> log_alpha > 0
    assert g.deterministic(threshold=0.9).tolist() == [[0.0, 0.0, 0.0, 1.0]]
    g.eval()
    assert torch.equal(g(), g.deterministic())


def logits(model, batch, gates=None):
    with torch.no_grad():
        if gates is None:
            return model(**batch).logits
        with head_gates(model, gates):
            return model(**batch).logits


@pytest.mark.parametrize("training", [True, False])
def test_large_log_alpha_gives_ones_and_the_untouched_model(training):
    model = tiny_model(initializer_range=0.2)
    batch = tiny_inputs()
    g = HardConcreteGates.for_model(model, init_log_alpha=50.0).train(training)
    z = g()
    assert bool((z == 1).all())
    torch.testing.assert_close(logits(model, batch, z), logits(model, batch), rtol=0, atol=0)


@pytest.mark.parametrize("training", [True, False])
def test_very_negative_log_alpha_equals_physical_pruning(training):
    model = tiny_model(initializer_range=0.2)
    batch = tiny_inputs()
    mask = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 0, 1]], dtype=torch.float32)
    g = HardConcreteGates.for_model(model).train(training)
    with torch.no_grad():
        g.log_alpha.copy_(torch.where(mask == 1, 50.0, -50.0))
    z = g()
    assert torch.equal(z, mask)
    gated = logits(model, batch, z)
    pruned = prune_heads(tiny_model(initializer_range=0.2), mask)
    torch.testing.assert_close(gated, logits(pruned, batch), rtol=1e-5, atol=1e-5)


def train_batches():
    return [{**tiny_inputs(batch=3, seq=9, seed=s), "labels": torch.tensor([0, 2, 1])} for s in (1, 2, 3)]


def test_l0_train_large_lambda_closes_gates_and_leaves_a_frozen_model_alone():
    torch.manual_seed(0)
    model = tiny_model(initializer_range=0.2)
    before = [p.detach().clone() for p in model.parameters()]
    g = HardConcreteGates.for_model(model)
    res = l0_train(model, g, train_batches(), lam=10.0, steps=40, lr=0.1)
    assert len(res.history) == 40 and res.history[0]["open"] == 12
    assert res.history[-1]["expected_l0"] < res.history[0]["expected_l0"]
    assert res.mask.shape == (3, 4) and int(res.mask.sum()) == 0
    assert not g.training and model.training is False
    assert all(p.requires_grad and p.grad is None for p in model.parameters())
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_l0_train_until_stops_at_the_first_check_that_holds_and_never_before_min_steps():
    """``until`` (e.g. the gates settled): checked at ``min_steps`` and every ``check_every`` steps after it; the run
    stops at the first check that holds, ``steps`` stays the cap; the steps it made are those of a run without
    ``until`` (the same records, the same gates)."""
    from headprune_utils.analysis.preconditions import gates_settled

    def run(**kw):
        torch.manual_seed(0)
        model = tiny_model(initializer_range=0.2)
        torch.manual_seed(1)
        g = HardConcreteGates.for_model(model)
        return l0_train(model, g, train_batches(), lam=10.0, steps=60, lr=0.1, **kw), g

    full, g_full = run()
    seen = []

    def after_25(h):
        seen.append(len(h))
        return len(h) >= 25

    early, g_early = run(until=after_25, min_steps=12, check_every=5)
    assert seen == [12, 15, 20, 25] and len(early.history) == 25
    assert early.history == full.history[:25]
    never, _ = run(until=lambda h: False, min_steps=12)
    assert len(never.history) == 60 and never.history == full.history
    settled, _ = run(until=lambda h: bool(gates_settled(h)[0]), min_steps=10)
    assert len(settled.history) < 60 and gates_settled(settled.history)[0] is True  # all gates shut: settled


def test_l0_train_lambda_zero_keeps_gates_open_and_can_finetune_the_model():
    torch.manual_seed(0)
    model = tiny_model(initializer_range=0.2)
    g = HardConcreteGates.for_model(model)
    res = l0_train(model, g, train_batches(), lam=0.0, epochs=4, lr=0.05)
    assert len(res.history) == 12 and int(res.mask.sum()) == 12
    assert all(h["open"] == 12 for h in res.history)
    # train_model=True also moves the model's weights
    before = [p.detach().clone() for p in model.parameters()]
    l0_train(model, g, train_batches(), lam=0.0, steps=2, train_model=True, model_lr=1e-3)
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert not model.training


# --- encoder-decoders: one gate set per attention type ----------------------------------------------------

def seq2seq():
    from test_seq2seq_gates import tiny_batch, tiny_marian

    return tiny_marian(), tiny_batch()


def test_gate_dict_penalty_is_the_sum_over_types_with_the_right_gradient():
    from headprune_utils.train.hard_concrete import HardConcreteGateDict

    model, _ = seq2seq()
    g = HardConcreteGateDict.for_model(model)
    assert g.kinds == ("enc", "dec", "cross")
    assert {k: tuple(v.shape) for k, v in g.log_alpha.items()} == {"enc": (2, 4), "dec": (3, 4), "cross": (3, 4)}
    torch.manual_seed(0)
    with torch.no_grad():
        for p in g.parameters():
            p.copy_(torch.randn_like(p) * 2)
    la = {k: v.detach().double() for k, v in g.log_alpha.items()}
    s = {k: torch.sigmoid(v - BETA * math.log(-GAMMA / ZETA)) for k, v in la.items()}
    l0 = g.expected_l0()
    assert l0.item() == pytest.approx(float(sum(x.sum() for x in s.values())), rel=1e-6)
    l0.backward()
    for k, p in g.log_alpha.items():
        torch.testing.assert_close(p.grad.double(), s[k] * (1 - s[k]), rtol=1e-5, atol=1e-7)
    enc_only = HardConcreteGateDict.for_model(model, kinds=["enc"])
    assert enc_only.kinds == ("enc",) and set(enc_only.eval()()) == {"enc"}
    with pytest.raises(ValueError, match="unknown attention type"):
        HardConcreteGateDict.for_model(model, kinds=["encoder"])
    with pytest.raises(ValueError, match="HardConcreteGateDict"):
        HardConcreteGates.for_model(model)


@pytest.mark.parametrize("training", [True, False])
def test_gate_dict_with_infinite_log_alpha_is_all_ones_on_every_type(training):
    from headprune_utils.train.hard_concrete import HardConcreteGateDict

    model, batch = seq2seq()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    g = HardConcreteGateDict.for_model(model, init_log_alpha=float("inf")).train(training)
    z = g()
    assert set(z) == {"enc", "dec", "cross"} and all(bool((v == 1).all()) for v in z.values())
    assert g.expected_l0().item() == 2 * 4 + 3 * 4 + 3 * 4
    with torch.no_grad():
        plain = model(**inputs).logits
        with head_gates(model, z):
            gated = model(**inputs).logits
    torch.testing.assert_close(gated, plain, rtol=0, atol=0)


def test_l0_train_with_a_gate_dict_freezes_the_model_and_returns_masks_by_type():
    from headprune_utils.train.hard_concrete import HardConcreteGateDict, n_open

    model, batch = seq2seq()
    before = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(0)
    g = HardConcreteGateDict.for_model(model, kinds=("enc", "cross"))
    res = l0_train(model, g, [batch], lam=10.0, steps=30, lr=0.2)
    assert set(res.mask) == {"enc", "cross"} and res.mask["enc"].shape == (2, 4)
    assert res.history[0]["open"] == 20 and res.history[0]["open_enc"] == 8 and res.history[0]["open_cross"] == 12
    assert n_open(res.mask) == res.history[-1]["open"] == 0  # a large lambda closes every gate of both types
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())
    res0 = l0_train(model, HardConcreteGateDict.for_model(model, kinds=("enc",)), [batch], lam=0.0, steps=3, lr=0.05)
    assert n_open(res0.mask) == 8


def test_l0_train_on_a_pruned_model_keeps_its_absent_heads_closed_and_out_of_the_penalty():
    """After prune_heads, the absent heads had gates that read as open (an all-ones mask that prune_heads then
    refused; a penalty counting heads that do not exist). Now they are closed in every record and in the mask, the
    penalty is the expected number of open PRESENT heads (by hand), and the mask prunes the model again."""
    model = prune_heads(tiny_model(), torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 0]]))
    gates = HardConcreteGates.for_model(model, init_log_alpha=10.0)
    batch = tiny_inputs()
    batch["labels"] = torch.tensor([0, 1, 2])
    r = l0_train(model, gates, [batch], lam=0.0, steps=2)
    assert r.mask.tolist() == [[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 0]]
    assert all(h["open"] == 6 for h in r.history)
    present = torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.float32)
    assert r.history[-1]["expected_l0"] == pytest.approx(float((gates.open_prob() * present).sum()), rel=1e-6)
    prune_heads(model, r.mask)  # the same heads: nothing new to prune, and no refusal
    with pytest.raises(ValueError, match="lam must be a finite number >= 0"):
        l0_train(model, gates, [batch], lam=-1.0, steps=1)
    with pytest.raises(ValueError, match=r"gates of shape \(2, 4\)"):
        l0_train(model, HardConcreteGates(2, 4), [batch], lam=0.1, steps=1)
