"""Failure-case tests written from the README alone ("## The toolkit" and "### Your own model: causal LMs,
grouped-query attention"): masks, gates, pruning, causal LMs with grouped-query attention, loading offline.

Standard probed: bad input gets a clear error naming the parameter or problem, before heavy work; nothing is
silently wrong; non-finite numbers are errors, not results; hooks go away when the with-block ends, also when it
raises. Tiny random models only."""
from __future__ import annotations

import os
import re
import signal
import time
from contextlib import contextmanager

import pytest
import torch
import transformers

from headprune_utils.measure.language_model import perplexity
from headprune_utils.model import architecture, models
from headprune_utils.model.families import UnsupportedArchitectureError
from headprune_utils.model.gates import head_gates, head_means
from headprune_utils.model.masks import random_mask
from headprune_utils.model.pruning import prune_heads, prune_kv_groups

BAD_INPUT = (ValueError, TypeError)
L, H = 3, 4  # the tiny BERT's grid


# ----------------------------------------------------------------------------------------------------- helpers
def tiny_bert(seed: int = 0, dtype=torch.float32, layers: int = L, heads: int = H) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(vocab_size=120, hidden_size=8 * heads, num_hidden_layers=layers,
                                  num_attention_heads=heads, intermediate_size=37, max_position_embeddings=64,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=3)
    model = transformers.BertForSequenceClassification(cfg)
    return model.to(dtype).eval()


def bert_inputs(batch: int = 3, seq: int = 9, seed: int = 1) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 120, (batch, seq), generator=g)
    att = torch.ones(batch, seq, dtype=torch.long)
    for b in range(batch):  # ragged, as in real batches
        n = seq - (b * 2) % (seq - 2)
        att[b, n:] = 0
        ids[b, n:] = 0
    return {"input_ids": ids, "attention_mask": att}


def logits(model, inputs) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).logits


def gated_logits(model, inputs, mask, **kw) -> torch.Tensor:
    with head_gates(model, mask, **kw):
        return logits(model, inputs)


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def tiny_llama(seed: int = 0, vocab: int = 60, dtype=torch.float32, **over) -> torch.nn.Module:
    cfg = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2)
    cfg.update(over)
    model = models.tiny_causal_lm(vocab, seed=seed, pad_token_id=0, **cfg)
    return model.to(dtype).eval()


def lm_inputs(batch: int = 2, seq: int = 8, vocab: int = 60, seed: int = 3) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, seq), generator=g)
    att = torch.ones_like(ids)
    return [{"input_ids": ids, "attention_mask": att, "labels": ids.clone()}]


def is_clear(exc: BaseException, *words: str) -> bool:
    text = str(exc).lower()
    return any(w.lower() in text for w in words)


@contextmanager
def time_limit(seconds: int):
    def _raise(signum, frame):
        raise TimeoutError(f"took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def readme_lm():
    """The README's own example: a BPE tokenizer on four lines, a tiny Llama (4 query heads on 2 kv heads)."""
    from headprune_utils.tasks.subword import train_tokenizer
    from headprune_utils.tasks.text import lm_batches

    lines = ["the cat sat on the mat .", "a dog ran in the park .", "the dog sat on a mat .", "a cat ran ."] * 8
    tok = train_tokenizer(lines, vocab_size=60)
    batches = lm_batches(tok, lines, batch_size=8, max_length=16)

    def make():
        return models.tiny_causal_lm(len(tok), pad_token_id=tok.pad_token_id, hidden_size=32,
                                     intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2).eval()

    return tok, batches, make


# ------------------------------------------------------------------------------------------------------ masks
def test_random_mask_shape_and_budget():
    """README: random_mask(n_layers, n_heads, n_prune, seed) is [n_layers, n_heads], 1 = kept, n_prune zeros."""
    m = random_mask(6, 12, n_prune=36, seed=0)
    assert tuple(m.shape) == (6, 12)
    assert set(torch.unique(m).tolist()) <= {0, 1}
    assert int((m == 0).sum()) == 36


def test_random_mask_seed_reproducible():
    """README: masks are seeded: the same seed gives the same mask, another seed another one."""
    a = random_mask(6, 12, n_prune=36, seed=0)
    b = random_mask(6, 12, n_prune=36, seed=0)
    c = random_mask(6, 12, n_prune=36, seed=1)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_random_mask_more_than_all_heads_raises():
    """Standard: n_prune > n_layers * n_heads is an error naming n_prune, not a clipped mask."""
    with pytest.raises(Exception) as ei:
        random_mask(2, 3, n_prune=7, seed=0)
    assert is_clear(ei.value, "n_prune", "prune", "budget", "heads")


def test_random_mask_negative_raises():
    """Standard: a negative n_prune is an error, not a full mask."""
    with pytest.raises(Exception) as ei:
        random_mask(2, 3, n_prune=-1, seed=0)
    assert is_clear(ei.value, "n_prune", "prune", "negative", "budget")


def test_random_mask_fractional_n_prune_raises():
    """Standard: n_prune must be a whole number of heads; 2.5 is an error, not silently rounded."""
    with pytest.raises(Exception):
        random_mask(2, 3, n_prune=2.5, seed=0)


@pytest.mark.parametrize("shape", [
    (0, 4),
    (2, 0),
    (-1, 4)])
def test_random_mask_degenerate_grid_raises(shape):
    """Standard: a grid with no (or negative) layers/heads is a clear error, not an empty mask."""
    with pytest.raises(BAD_INPUT, match="n_layers|n_heads"):
        random_mask(*shape, n_prune=0, seed=0)


def test_random_mask_edges_none_and_all():
    """README: 0 pruned keeps every head; pruning all heads is a valid mask (a layer can lose all its heads)."""
    assert int(random_mask(2, 3, n_prune=0, seed=0).sum()) == 6
    assert int(random_mask(2, 3, n_prune=6, seed=0).sum()) == 0


# ------------------------------------------------------------------------------------------------------ gates
def test_gates_wrong_layer_count_raises():
    """README convention: a gate mask is [n_layers, n_heads]; a mask for another layer count is a clear error."""
    model = tiny_bert()
    with pytest.raises(BAD_INPUT) as ei:
        with head_gates(model, torch.ones(L + 1, H)):
            logits(model, bert_inputs())
    assert is_clear(ei.value, "shape", "layer", str(L))


def test_gates_wrong_head_count_raises():
    """README convention: a gate mask with the wrong number of heads is a clear error."""
    model = tiny_bert()
    with pytest.raises(BAD_INPUT) as ei:
        with head_gates(model, torch.ones(L, H + 2)):
            logits(model, bert_inputs())
    assert is_clear(ei.value, "shape", "head", str(H))


def test_gates_flat_mask_raises():
    """README convention: a flat [n_layers * n_heads] vector is not an [n_layers, n_heads] mask."""
    model = tiny_bert()
    with pytest.raises(BAD_INPUT):
        with head_gates(model, torch.ones(L * H)):
            logits(model, bert_inputs())


@pytest.mark.parametrize("bad", [2.0, -1.0])
def test_gates_out_of_range_values_raise(bad):
    """Standard: gate values outside [0, 1] (2, -1) are an error, not silently an amplified/negated head."""
    model = tiny_bert()
    mask = torch.ones(L, H)
    mask[1, 2] = bad
    with pytest.raises(BAD_INPUT) as ei:
        with head_gates(model, mask):
            logits(model, bert_inputs())
    assert is_clear(ei.value, "gate", "range", "[0, 1]", "mask", "binary")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_gates_non_finite_raise(bad):
    """Standard: a NaN/inf gate is an error, not NaN logits."""
    model = tiny_bert()
    mask = torch.ones(L, H)
    mask[0, 0] = bad
    with pytest.raises(BAD_INPUT) as ei:
        with head_gates(model, mask):
            logits(model, bert_inputs())
    assert is_clear(ei.value, "nan", "finite", "gate", "mask")


@pytest.mark.parametrize("dtype", [torch.bool, torch.long, torch.int32, torch.float64, torch.float16])
def test_gates_mask_dtypes_agree(dtype):
    """README: a head mask is 1 = kept, 0 = pruned; bool/int/float masks of the same heads gate alike."""
    model, x = tiny_bert(), bert_inputs()
    ref_mask = torch.tensor([[1, 0, 1, 1], [0, 0, 1, 1], [1, 1, 1, 0]], dtype=torch.float32)
    ref = gated_logits(model, x, ref_mask)
    got = gated_logits(model, x, ref_mask.to(dtype))
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)


def test_gates_list_mask_same_as_tensor_or_clear_error():
    """Standard: a nested list instead of a tensor is either the same mask or a clear TypeError, never wrong."""
    model, x = tiny_bert(), bert_inputs()
    rows = [[1, 0, 1, 1], [0, 0, 1, 1], [1, 1, 1, 0]]
    ref = gated_logits(model, x, torch.tensor(rows, dtype=torch.float32))
    try:
        got = gated_logits(model, x, rows)
    except TypeError as e:
        assert is_clear(e, "tensor", "mask", "gate")
        return
    torch.testing.assert_close(got, ref)


def test_gates_all_ones_is_identity():
    """README: gates are hooks; all heads kept leaves the model's outputs as they are."""
    model, x = tiny_bert(), bert_inputs()
    torch.testing.assert_close(gated_logits(model, x, torch.ones(L, H)), logits(model, x))


def test_gates_all_zero_finite_and_different():
    """README: "zero" removes heads; with every head removed the outputs are finite and differ from the model's."""
    model, x = tiny_bert(), bert_inputs()
    out = gated_logits(model, x, torch.zeros(L, H))
    assert torch.isfinite(out).all()
    assert not torch.allclose(out, logits(model, x))


def test_gates_unknown_ablation_raises_and_leaves_no_hooks():
    """Standard: an unknown ablation name is an error naming it; the model is left untouched."""
    model, x = tiny_bert(), bert_inputs()
    ref = logits(model, x)
    mask = torch.zeros(L, H)
    with pytest.raises(BAD_INPUT) as ei:
        with head_gates(model, mask, ablation="zeroo"):
            logits(model, x)
    assert is_clear(ei.value, "zeroo", "ablation")
    torch.testing.assert_close(logits(model, x), ref)


def test_gates_mean_without_means_raises():
    """README: "mean" replaces a head by its mean over a reference set; without means it is a clear error."""
    model, x = tiny_bert(), bert_inputs()
    mask = torch.ones(L, H)
    mask[0, 1] = 0
    with pytest.raises(BAD_INPUT) as ei:
        with head_gates(model, mask, ablation="mean"):
            logits(model, x)
    assert is_clear(ei.value, "mean")
    torch.testing.assert_close(logits(model, x), logits(tiny_bert(), x))


def test_gates_mean_with_means_works_and_all_kept_is_identity():
    """README: gates.head_means gives the means for "mean"; keeping every head changes nothing; ablating one does."""
    model, x = tiny_bert(), bert_inputs()
    means = head_means(model, [bert_inputs(seed=5), bert_inputs(seed=6)])
    ref = logits(model, x)
    torch.testing.assert_close(gated_logits(model, x, torch.ones(L, H), ablation="mean", means=means), ref)
    mask = torch.ones(L, H)
    mask[0, 1] = 0
    out = gated_logits(model, x, mask, ablation="mean", means=means)
    assert torch.isfinite(out).all() and not torch.allclose(out, ref)


def test_gates_mean_with_wrong_shape_means_raises():
    """Standard: "mean" with means of another model's shape is a clear error, not a broadcast."""
    model, x = tiny_bert(), bert_inputs()
    other = tiny_bert(layers=2)
    means = head_means(other, [bert_inputs(seed=5)])
    mask = torch.ones(L, H)
    mask[2, 0] = 0
    with pytest.raises(BAD_INPUT) as ei:
        with head_gates(model, mask, ablation="mean", means=means):
            logits(model, x)
    assert is_clear(ei.value, "mean", "shape", "layer")


def test_gates_mean_with_nan_means_raises():
    """Standard: non-finite means are an error, not NaN outputs."""
    model, x = tiny_bert(), bert_inputs()
    means = head_means(model, [bert_inputs(seed=5)])
    if isinstance(means, torch.Tensor):
        means = means.clone()
        means.view(-1)[0] = float("nan")
    else:  # a container of tensors: poison every one of them
        def poison(m):
            if isinstance(m, torch.Tensor):
                return torch.full_like(m, float("nan"))
            if isinstance(m, dict):
                return {k: poison(v) for k, v in m.items()}
            if isinstance(m, (list, tuple)):
                return type(m)(poison(v) for v in m)
            return m
        means = poison(means)
    mask = torch.zeros(L, H)
    with pytest.raises(BAD_INPUT) as ei:
        with head_gates(model, mask, ablation="mean", means=means):
            logits(model, x)
    assert is_clear(ei.value, "nan", "finite", "mean")


def test_head_means_of_no_batches_raises():
    """Standard: a mean over an empty reference set is an error, not NaN means."""
    model = tiny_bert()
    with pytest.raises(Exception) as ei:
        head_means(model, [])
    assert is_clear(ei.value, "batch", "empty", "reference", "no ")


def test_gates_removed_after_exception_in_block():
    """README: hooks are removed when the block ends, also when it raises: outputs equal the untouched model's."""
    model, x = tiny_bert(), bert_inputs()
    ref = logits(tiny_bert(), x)
    with pytest.raises(RuntimeError, match="boom"):
        with head_gates(model, torch.zeros(L, H)):
            logits(model, x)
            raise RuntimeError("boom")
    torch.testing.assert_close(logits(model, x), ref)


def test_gates_invalid_last_layer_leaves_no_partial_hooks():
    """Standard: a mask bad only in its last layer is refused with no hook left on the earlier layers."""
    model, x = tiny_bert(), bert_inputs()
    ref = logits(model, x)
    mask = torch.zeros(L, H)
    mask[L - 1, H - 1] = float("nan")
    with pytest.raises(BAD_INPUT):
        with head_gates(model, mask):
            pass
    torch.testing.assert_close(logits(model, x), ref)


def test_gates_batched_mask_raises():
    """README convention: [n_layers, n_heads]; a [1, n_layers, n_heads] mask is a clear error, not broadcast."""
    model = tiny_bert()
    with pytest.raises(BAD_INPUT):
        with head_gates(model, torch.ones(1, L, H)):
            logits(model, bert_inputs())


def test_prune_inside_gates_block_refused_or_consistent():
    """Standard: pruning while gates are on is refused clearly, or the block's exit leaves exactly the pruned model."""
    x = bert_inputs()
    p = torch.tensor([[1, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 0]])
    ref_model = tiny_bert()
    prune_heads(ref_model, p)
    ref = logits(ref_model, x)
    model = tiny_bert()
    try:
        with head_gates(model, torch.ones(L, H)):
            prune_heads(model, p)
    except (ValueError, RuntimeError) as e:
        assert is_clear(e, "gate", "hook")
        return
    torch.testing.assert_close(logits(model, x), ref, rtol=1e-5, atol=1e-6)


def test_gates_removed_after_normal_exit():
    """README: hooks, removed when the block ends."""
    model, x = tiny_bert(), bert_inputs()
    ref = logits(model, x)
    for ablation in ("zero", "uniform"):
        gated_logits(model, x, torch.zeros(L, H), ablation=ablation)
        torch.testing.assert_close(logits(model, x), ref)


def test_gates_nested_compose_or_refuse_and_unwind():
    """Standard: nested gates compose (product of masks) or refuse clearly; leaving the inner restores the outer."""
    model, x = tiny_bert(), bert_inputs()
    a = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]], dtype=torch.float32)
    b = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.float32)
    ref_a = gated_logits(model, x, a)
    ref_ab = gated_logits(model, x, a * b)
    ref = logits(model, x)
    with head_gates(model, a):
        try:
            with head_gates(model, b):
                torch.testing.assert_close(logits(model, x), ref_ab)
        except (ValueError, RuntimeError) as e:
            assert is_clear(e, "nest", "already", "gate")
        torch.testing.assert_close(logits(model, x), ref_a)
    torch.testing.assert_close(logits(model, x), ref)


def test_gates_gradient_flows_to_gate_tensor():
    """README: gates are differentiable (requires_grad_() for gradient importance): every head gets a finite grad."""
    model, x = tiny_bert(), bert_inputs()
    g = torch.ones(L, H).requires_grad_()
    with head_gates(model, g):
        model(**x).logits.logsumexp(-1).sum().backward()
    assert g.grad is not None and g.grad.shape == (L, H)
    assert torch.isfinite(g.grad).all() and (g.grad != 0).all()


def test_gates_gradient_matches_finite_difference():
    """README: differentiable gates: d output / d gate equals a central finite difference (float64)."""
    model, x = tiny_bert(dtype=torch.float64), bert_inputs()

    def f(gates):
        with head_gates(model, gates):
            return model(**x).logits[:, 0].sum()

    g = torch.full((L, H), 0.5, dtype=torch.float64).requires_grad_()
    f(g).backward()
    eps = 1e-5
    for (layer, head) in [(0, 0), (1, 3), (2, 1)]:
        up, down = g.detach().clone(), g.detach().clone()
        up[layer, head] += eps
        down[layer, head] -= eps
        with torch.no_grad():
            fd = (f(up) - f(down)) / (2 * eps)
        assert abs(float(fd) - float(g.grad[layer, head])) < 1e-6 * max(1.0, abs(float(fd)))


def test_uniform_ablation_ignores_padding():
    """README: "uniform" attends uniformly over the *real* tokens: padding a sentence must not change its output."""
    model = tiny_bert()
    ids = torch.tensor([[7, 20, 31, 44, 9]])
    short = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    padded_ids = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], 1)
    padded = {"input_ids": padded_ids, "attention_mask": (padded_ids != 0).long()}
    mask = torch.ones(L, H)
    mask[:, :2] = 0
    a = gated_logits(model, short, mask, ablation="uniform")
    b = gated_logits(model, padded, mask, ablation="uniform")
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(a, logits(model, short))


# ---------------------------------------------------------------------------------------------------- pruning
def test_prune_equals_zero_gates():
    """README: prune_heads makes the model physically smaller with the same outputs as the zero gates."""
    model, x = tiny_bert(), bert_inputs()
    mask = torch.tensor([[1, 0, 1, 0], [0, 1, 1, 1], [1, 1, 0, 0]])
    ref = gated_logits(model, x, mask)
    before = n_params(model)
    prune_heads(model, mask)
    assert n_params(model) < before
    torch.testing.assert_close(logits(model, x), ref, rtol=1e-4, atol=1e-5)


def test_prune_whole_layer():
    """README: a layer can lose all its heads; outputs equal the zero-gated model's."""
    model, x = tiny_bert(), bert_inputs()
    mask = torch.ones(L, H, dtype=torch.long)
    mask[1] = 0
    ref = gated_logits(model, x, mask)
    prune_heads(model, mask)
    out = logits(model, x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_prune_every_head():
    """README: every layer may lose all its heads; the result is finite and equals all-zero gates."""
    model, x = tiny_bert(), bert_inputs()
    mask = torch.zeros(L, H, dtype=torch.long)
    ref = gated_logits(model, x, mask)
    prune_heads(model, mask)
    out = logits(model, x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_prune_twice_original_ids():
    """README: pruning twice works, masks in original head ids: the result equals zero gates of both masks."""
    model, x = tiny_bert(), bert_inputs()
    m1 = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]])
    m2 = torch.tensor([[1, 0, 0, 1], [1, 1, 1, 0], [0, 1, 1, 1]])  # a subset of m1's kept heads
    ref = gated_logits(model, x, m1 * m2)
    prune_heads(model, m1)
    prune_heads(model, m2)
    torch.testing.assert_close(logits(model, x), ref, rtol=1e-4, atol=1e-5)
    assert architecture.kept_heads(model) == [[0, 3], [0, 1, 2], [1, 2, 3]]


def test_prune_twice_same_mask_is_noop():
    """README: pruning twice works: the same mask again changes nothing."""
    model, x = tiny_bert(), bert_inputs()
    m = torch.tensor([[1, 0, 1, 1], [1, 1, 0, 1], [0, 1, 1, 1]])
    prune_heads(model, m)
    ref, size = logits(model, x), n_params(model)
    prune_heads(model, m)
    assert n_params(model) == size
    torch.testing.assert_close(logits(model, x), ref)


def test_prune_all_ones_changes_nothing():
    """README: 1 = kept: an all-ones mask leaves the model and its outputs as they are."""
    model, x = tiny_bert(), bert_inputs()
    ref, size = logits(model, x), n_params(model)
    prune_heads(model, torch.ones(L, H))
    assert n_params(model) == size
    torch.testing.assert_close(logits(model, x), ref)


def test_prune_wrong_shape_raises_and_leaves_model_intact():
    """Standard: a mask of the wrong shape is a clear error before any layer is sliced."""
    model, x = tiny_bert(), bert_inputs()
    ref, size = logits(model, x), n_params(model)
    bad = torch.ones(L - 1, H)
    bad[0, 0] = 0
    with pytest.raises(BAD_INPUT) as ei:
        prune_heads(model, bad)
    assert is_clear(ei.value, "shape", "layer", str(L))
    assert n_params(model) == size
    torch.testing.assert_close(logits(model, x), ref)


def test_prune_kv_shaped_mask_on_bert_extra_heads_raises():
    """Standard: a mask with too many heads is refused (not truncated) and the model is untouched."""
    model = tiny_bert()
    size = n_params(model)
    with pytest.raises(BAD_INPUT):
        prune_heads(model, torch.zeros(L, H + 1))
    assert n_params(model) == size


@pytest.mark.parametrize("bad", [0.5, 2.0, -1.0, float("nan")])
def test_prune_non_binary_mask_raises_before_work(bad):
    """Standard: a pruning mask must be 0/1; 0.5, 2, -1 or NaN are a clear error, and nothing is pruned."""
    model, x = tiny_bert(), bert_inputs()
    ref, size = logits(model, x), n_params(model)
    mask = torch.ones(L, H)
    mask[0, 0] = 0  # a valid pruned head before the bad one: nothing may be half-done
    mask[2, 3] = bad
    with pytest.raises(BAD_INPUT) as ei:
        prune_heads(model, mask)
    assert is_clear(ei.value, "binary", "0", "mask", "nan", "finite")
    assert n_params(model) == size
    torch.testing.assert_close(logits(model, x), ref)


def test_prune_list_mask_same_as_tensor_or_clear_error():
    """Standard: a nested list mask prunes the same heads as the tensor, or is a clear TypeError; never wrong."""
    rows = [[1, 0, 1, 1], [1, 1, 0, 0], [0, 1, 1, 1]]
    model = tiny_bert()
    try:
        prune_heads(model, rows)
    except TypeError as e:
        assert is_clear(e, "tensor", "mask")
        return
    assert architecture.kept_heads(model) == [[0, 2, 3], [0, 1], [1, 2, 3]]


def test_prune_kv_groups_non_binary_raises():
    """Standard: a kv mask of 0.5 is an error; no group is half-removed."""
    model = tiny_llama()
    size = n_params(model)
    with pytest.raises(BAD_INPUT):
        prune_kv_groups(model, torch.tensor([[0.0, 1.0], [1.0, 0.5]]))
    assert n_params(model) == size


def test_prune_bool_mask_equals_int_mask():
    """README: 1 = kept, 0 = pruned; a bool mask prunes the same heads as the int mask."""
    x = bert_inputs()
    m = torch.tensor([[1, 0, 1, 1], [1, 1, 0, 0], [0, 1, 1, 1]])
    a, b = tiny_bert(), tiny_bert()
    prune_heads(a, m)
    prune_heads(b, m.bool())
    assert architecture.kept_heads(a) == architecture.kept_heads(b) == [[0, 2, 3], [0, 1], [1, 2, 3]]
    torch.testing.assert_close(logits(a, x), logits(b, x))


def test_gates_on_pruned_model_use_original_ids():
    """README: gates are in original head ids also after physical pruning: gate G on pruned(P) == gate P*G."""
    x = bert_inputs()
    p = torch.tensor([[1, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 0]])
    g = torch.tensor([[1, 1, 0, 1], [1, 0, 1, 1], [1, 1, 1, 1]])
    ref = gated_logits(tiny_bert(), x, (p * g).float())
    pruned = tiny_bert()
    prune_heads(pruned, p)
    torch.testing.assert_close(gated_logits(pruned, x, g.float()), ref, rtol=1e-4, atol=1e-5)


def test_gates_on_pruned_model_reduced_shape_raises():
    """README: masks stay [n_layers, n_heads] in original ids after pruning; a reduced-width mask is an error."""
    model = tiny_bert()
    p = torch.ones(L, H)
    p[:, 3] = 0  # every layer keeps 3 heads
    prune_heads(model, p)
    with pytest.raises(BAD_INPUT):
        with head_gates(model, torch.ones(L, H - 1)):
            logits(model, bert_inputs())


def test_gates_on_pruned_model_gradient_only_for_kept_heads():
    """README: gates differentiable after pruning too; a pruned head has no effect, so its gradient is zero."""
    model, x = tiny_bert(), bert_inputs()
    p = torch.ones(L, H)
    p[0, 1] = 0
    prune_heads(model, p)
    g = torch.ones(L, H).requires_grad_()
    with head_gates(model, g):
        model(**x).logits.logsumexp(-1).sum().backward()
    assert g.grad is not None and torch.isfinite(g.grad).all()
    assert float(g.grad[0, 1]) == 0.0
    assert float(g.grad[0, 0]) != 0.0


# ------------------------------------------------------------------------------------- README's toolkit example
def test_readme_toolkit_example_minilm():
    """README's example: MiniLM, random_mask(6, 12, 36), zero gates, then prune_heads gives the same logits."""
    try:
        model = models.load_classifier("minilm", num_labels=2, device="cpu")
        tokenizer = models.load_tokenizer("minilm")
    except Exception as e:  # no local copy offline
        pytest.skip(f"minilm not available: {e}")
    model.eval()
    batch = tokenizer(["a gripping, funny film", "dull and far too long"], padding=True, return_tensors="pt")
    mask = random_mask(6, 12, n_prune=36, seed=0)
    with head_gates(model, mask, ablation="zero"):
        with torch.no_grad():
            ref = model(**batch).logits
    prune_heads(model, mask)
    with torch.no_grad():
        out = model(**batch).logits
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------- your own model (causal LMs)
def test_readme_causal_lm_example(readme_lm):
    """README's example: gated perplexity == pruned perplexity; kept heads [[0,1,2],[2,3]], kv [[0,1],[1]]."""
    _, batches, make = readme_lm
    model = make()
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 1, 1]])
    gated = perplexity(model, batches, gates=mask)
    prune_heads(model, mask)
    assert abs(perplexity(model, batches) - gated) < 1e-3 * gated
    assert architecture.kept_heads(model) == [[0, 1, 2], [2, 3]]
    assert architecture.kept_kv_heads(model) == [[0, 1], [1]]


def test_tiny_causal_lm_is_seeded():
    """README: tiny_causal_lm is a tiny *seeded* Llama: same seed same weights, another seed other weights."""
    a, b, c = tiny_llama(seed=0), tiny_llama(seed=0), tiny_llama(seed=1)
    assert models.weights_sha(a) == models.weights_sha(b)
    assert models.weights_sha(a) != models.weights_sha(c)


def test_tiny_causal_lm_bad_gqa_ratio_raises():
    """Standard: 4 query heads on 3 key/value heads is no grouped-query layout: a clear error at construction."""
    with pytest.raises(BAD_INPUT) as ei:
        m = tiny_llama(num_key_value_heads=3)
        m(**{k: v for k, v in lm_inputs()[0].items() if k != "labels"})
    assert is_clear(ei.value, "key_value", "kv", "divis", "heads")


def test_kv_head_of_and_unpruned_kept():
    """README: the grid is [n_layers, n_query_heads]; kv heads derived (kv_head_of, kept_kv_heads)."""
    model = tiny_llama()
    assert list(architecture.kv_head_of(model)) == [0, 0, 1, 1]
    assert architecture.kept_heads(model) == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert architecture.kept_kv_heads(model) == [[0, 1], [0, 1]]


def test_llama_prune_equals_zero_gates_logits():
    """README: gates and pruning agree on a Llama with uneven groups (layer 0: groups of 2 and 1)."""
    model, batch = tiny_llama(), lm_inputs()[0]
    x = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 1, 1]])
    ref = gated_logits(model, x, mask)
    prune_heads(model, mask)
    torch.testing.assert_close(logits(model, x), ref, rtol=1e-4, atol=1e-5)


def test_llama_gates_removed_after_exception():
    """README/standard: gates on a causal LM are removed when the block raises."""
    model, batch = tiny_llama(), lm_inputs()[0]
    x = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    ref = logits(model, x)
    with pytest.raises(KeyError):
        with head_gates(model, torch.zeros(2, 4), ablation="uniform"):
            logits(model, x)
            raise KeyError("inside")
    torch.testing.assert_close(logits(model, x), ref)


def test_llama_gates_kv_shaped_mask_raises():
    """README: the grid is always [n_layers, n_query_heads]; a [n_layers, n_kv_heads] mask is a clear error."""
    model = tiny_llama()
    with pytest.raises(BAD_INPUT) as ei:
        with head_gates(model, torch.ones(2, 2)):
            pass
    assert is_clear(ei.value, "shape", "head", "4")


def test_llama_prune_kv_shaped_mask_raises():
    """README: prune_heads takes [n_layers, n_query_heads]; a kv-shaped mask is refused, model untouched."""
    model = tiny_llama()
    size = n_params(model)
    with pytest.raises(BAD_INPUT):
        prune_heads(model, torch.tensor([[1, 0], [0, 1]]))
    assert n_params(model) == size


def test_llama_gates_on_pruned_model_original_ids():
    """README: one convention after pruning: gates G on the pruned Llama equal gates P*G on the unpruned one."""
    batch = lm_inputs()[0]
    x = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    p = torch.tensor([[1, 1, 1, 0], [0, 0, 1, 1]])
    g = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 0]])
    ref = gated_logits(tiny_llama(), x, (p * g).float())
    pruned = tiny_llama()
    prune_heads(pruned, p)
    torch.testing.assert_close(gated_logits(pruned, x, g.float()), ref, rtol=1e-4, atol=1e-5)


def test_llama_prune_twice():
    """README: pruning twice works on a Llama too; kept heads and kv heads follow."""
    model, batch = tiny_llama(), lm_inputs()[0]
    x = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    m1 = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    m2 = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]])
    ref = gated_logits(model, x, m1 * m2)
    prune_heads(model, m1)
    prune_heads(model, m2)
    torch.testing.assert_close(logits(model, x), ref, rtol=1e-4, atol=1e-5)
    assert architecture.kept_heads(model) == [[1, 2], [0, 1]]
    assert architecture.kept_kv_heads(model) == [[0, 1], [0]]


def test_llama_prune_kv_groups():
    """README: prune_kv_groups removes whole groups: equal to zero-gating that group's query heads."""
    model, batch = tiny_llama(), lm_inputs()[0]
    x = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    ref = gated_logits(model, x, torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]))
    prune_kv_groups(model, torch.tensor([[0, 1], [1, 1]]))
    assert architecture.kept_heads(model) == [[2, 3], [0, 1, 2, 3]]
    assert architecture.kept_kv_heads(model) == [[1], [0, 1]]
    torch.testing.assert_close(logits(model, x), ref, rtol=1e-4, atol=1e-5)


def test_llama_prune_kv_groups_wrong_shape_raises():
    """Standard: a kv mask must be [n_layers, n_kv_heads]; a query-shaped one is a clear error, model untouched."""
    model = tiny_llama()
    size = n_params(model)
    with pytest.raises(BAD_INPUT):
        prune_kv_groups(model, torch.ones(2, 4))
    assert n_params(model) == size


def test_llama_generate_with_empty_layer_matches_gated():
    """README: a pruned Llama still generates with its KV cache, also with a layer left empty."""
    ids = torch.tensor([[5, 9, 14, 22]])
    mask = torch.tensor([[0, 0, 0, 0], [1, 0, 1, 1]])
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    ref_model = tiny_llama()
    with head_gates(ref_model, mask):
        ref = ref_model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    model = tiny_llama()
    prune_heads(model, mask)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    assert torch.equal(out, ref)


def test_uniform_refused_during_cached_generation():
    """README: "uniform" on a causal model is refused during cached generation, with a clear error."""
    model = tiny_llama()
    ids = torch.tensor([[5, 9, 14, 22]])
    mask = torch.ones(2, 4)
    mask[0, 1] = 0
    with pytest.raises(Exception) as ei:
        with head_gates(model, mask, ablation="uniform"):
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                           pad_token_id=0, use_cache=True)
    assert is_clear(ei.value, "cache", "uniform", "generat")
    # and the hooks are gone afterwards
    batch = lm_inputs()[0]
    x = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    torch.testing.assert_close(logits(model, x), logits(tiny_llama(), x))


def test_uniform_uncached_generation_allowed():
    """README: "uniform" is refused during *cached* generation only; generate(use_cache=False) works."""
    model = tiny_llama()
    ids = torch.tensor([[5, 9, 14, 22]])
    mask = torch.ones(2, 4)
    mask[0, 1] = 0
    with head_gates(model, mask, ablation="uniform"):
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False,
                             pad_token_id=0, use_cache=False)
    assert out.shape == (1, 7)


def test_uniform_respects_sliding_window():
    """README: "uniform" on a causal model is uniform over the keys a query may see, a sliding window included."""
    torch.manual_seed(0)
    cfg = transformers.MistralConfig(vocab_size=60, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=4, num_key_value_heads=2, sliding_window=2,
                                     max_position_embeddings=32, pad_token_id=0)
    cfg._attn_implementation = "eager"
    model = transformers.MistralForCausalLM(cfg).eval()
    a = torch.tensor([[5, 9, 14, 22, 30, 41]])
    b = a.clone()
    b[0, 0] = 50  # outside the window of positions >= 2 (one layer: nothing else carries it)
    xa = {"input_ids": a, "attention_mask": torch.ones_like(a)}
    xb = {"input_ids": b, "attention_mask": torch.ones_like(b)}
    torch.testing.assert_close(logits(model, xa)[:, 2:], logits(model, xb)[:, 2:])  # the window is real
    mask = torch.zeros(1, 4)
    la = gated_logits(model, xa, mask, ablation="uniform")
    lb = gated_logits(model, xb, mask, ablation="uniform")
    torch.testing.assert_close(la[:, 2:], lb[:, 2:], rtol=1e-5, atol=1e-6)


def test_uniform_causal_does_not_see_future():
    """README: "uniform" on a causal model is uniform over the keys a query may see: later tokens change nothing."""
    model = tiny_llama()
    a = torch.tensor([[5, 9, 14, 22, 30, 41]])
    b = a.clone()
    b[0, 4:] = torch.tensor([11, 50])
    mask = torch.ones(2, 4)
    mask[:, 0] = 0
    la = gated_logits(model, {"input_ids": a, "attention_mask": torch.ones_like(a)}, mask, ablation="uniform")
    lb = gated_logits(model, {"input_ids": b, "attention_mask": torch.ones_like(b)}, mask, ablation="uniform")
    torch.testing.assert_close(la[:, :4], lb[:, :4], rtol=1e-5, atol=1e-6)


def test_perplexity_removes_gates_when_a_batch_fails():
    """Standard: perplexity's gates are removed also when a later batch is malformed."""
    model = tiny_llama()
    good = lm_inputs()[0]
    bad = {"attention_mask": good["attention_mask"]}
    x = {"input_ids": good["input_ids"], "attention_mask": good["attention_mask"]}
    ref = logits(model, x)
    with pytest.raises(Exception):
        perplexity(model, [good, bad], gates=torch.zeros(2, 4))
    torch.testing.assert_close(logits(model, x), ref)


def test_llama_gate_gradients_same_after_pruning():
    """README: gates differentiable on pruned Llama layers (uneven groups): kept heads' grads equal the unpruned."""
    batch = lm_inputs()[0]
    x = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    p = torch.tensor([[1, 1, 1, 0], [0, 0, 1, 1]])

    def grads(model, g):
        g = g.clone().float().requires_grad_()
        with head_gates(model, g):
            model(**x).logits.logsumexp(-1).sum().backward()
        return g.grad

    ref = grads(tiny_llama(dtype=torch.float64), p)
    pruned = tiny_llama(dtype=torch.float64)
    prune_heads(pruned, p)
    got = grads(pruned, torch.ones(2, 4))
    keep = p.bool()
    torch.testing.assert_close(got[keep].double(), ref[keep].double(), rtol=1e-6, atol=1e-8)
    assert (got[~keep] == 0).all()


def test_gpt2_uniform_refused_during_cached_generation():
    """README: "uniform" on a causal model is refused during cached generation (GPT-2 too)."""
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=60, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.tensor([[5, 9, 14]])
    mask = torch.ones(2, 4)
    mask[1, 2] = 0
    with pytest.raises(Exception) as ei:
        with head_gates(model, mask, ablation="uniform"):
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False,
                           pad_token_id=0, use_cache=True)
    assert is_clear(ei.value, "cache", "uniform", "generat")


def test_perplexity_all_ones_gates_equal_ungated():
    """README: perplexity(model, batches, gates=...) with every head kept equals plain perplexity, finite, > 1."""
    model, batches = tiny_llama(), lm_inputs()
    p = perplexity(model, batches)
    assert p > 1 and p == pytest.approx(perplexity(model, batches, gates=torch.ones(2, 4)), rel=1e-6)


def test_perplexity_wrong_gate_shape_raises():
    """Standard: perplexity with a gate mask of the wrong shape is a clear error, not a number."""
    model, batches = tiny_llama(), lm_inputs()
    with pytest.raises(BAD_INPUT) as ei:
        perplexity(model, batches, gates=torch.ones(3, 4))
    assert is_clear(ei.value, "shape", "layer", "head", "gate")


def test_perplexity_nan_gate_raises():
    """Standard: a NaN gate is an error, not a NaN perplexity."""
    model, batches = tiny_llama(), lm_inputs()
    g = torch.ones(2, 4)
    g[1, 1] = float("nan")
    with pytest.raises(BAD_INPUT):
        perplexity(model, batches, gates=g)


def test_perplexity_no_batches_raises():
    """Standard: the perplexity of no text is undefined: an error, not nan/inf/1.0."""
    model = tiny_llama()
    with pytest.raises(BAD_INPUT) as ei:
        perplexity(model, [])
    assert is_clear(ei.value, "batch", "empty", "token", "no ")


def test_perplexity_no_real_tokens_raises():
    """Standard: batches with no real token (attention_mask all 0) score nothing: an error, not a number."""
    model = tiny_llama()
    b = lm_inputs()[0]
    b["attention_mask"] = torch.zeros_like(b["attention_mask"])
    with pytest.raises(BAD_INPUT) as ei:
        perplexity(model, [b])
    assert is_clear(ei.value, "token", "empty", "mask", "no ")


def test_perplexity_one_token_sequences_raise():
    """Standard: one-token sequences have no next token to predict: an error, not nan."""
    model = tiny_llama()
    ids = torch.tensor([[7], [9]])
    b = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    with pytest.raises(BAD_INPUT):
        perplexity(model, [b])


def test_perplexity_bad_gates_fail_before_reading_batches():
    """Standard: bad gates are refused before heavy work: no batch is read."""
    model = tiny_llama()

    def batches():
        raise AssertionError("a batch was read before the gates were checked")
        yield  # pragma: no cover

    with pytest.raises(BAD_INPUT):
        perplexity(model, batches(), gates=torch.ones(2, 5))


def test_perplexity_out_of_range_gate_raises():
    """Standard: a gate of 2 is an error, not an amplified head's perplexity."""
    model, batches = tiny_llama(), lm_inputs()
    g = torch.ones(2, 4)
    g[0, 0] = 2
    with pytest.raises(BAD_INPUT):
        perplexity(model, batches, gates=g)


def test_perplexity_unknown_ablation_raises():
    """Standard: perplexity(..., ablation="nope") is an error naming the ablation."""
    model, batches = tiny_llama(), lm_inputs()
    with pytest.raises(BAD_INPUT) as ei:
        perplexity(model, batches, gates=torch.ones(2, 4), ablation="nope")
    assert is_clear(ei.value, "nope", "ablation")


def test_perplexity_uniform_finite():
    """README: "uniform" on a causal model (uniform over the prefix) gives a finite perplexity, not the ungated one."""
    model, batches = tiny_llama(), lm_inputs()
    g = torch.ones(2, 4)
    g[0, :2] = 0
    p = perplexity(model, batches, gates=g, ablation="uniform")
    assert p == p and p < float("inf") and p != pytest.approx(perplexity(model, batches), rel=1e-6)


def test_perplexity_batch_without_input_ids_raises():
    """Standard: a batch missing input_ids is a clear error naming the key."""
    model = tiny_llama()
    b = lm_inputs()[0]
    b.pop("input_ids")
    with pytest.raises(Exception) as ei:
        perplexity(model, [b])
    assert is_clear(ei.value, "input_ids")


def test_perplexity_non_finite_weights_raises():
    """Standard: non-finite numbers are errors: a model with NaN weights has no perplexity (no nan returned)."""
    model, batches = tiny_llama(), lm_inputs()
    with torch.no_grad():
        model.model.layers[0].self_attn.o_proj.weight[0, 0] = float("nan")
    with pytest.raises(Exception) as ei:
        perplexity(model, batches)
    assert is_clear(ei.value, "finite", "nan")


def test_gpt2_prune_equals_zero_gates():
    """README: GPT-2 (fused c_attn sliced per head) is supported: pruning equals zero gates."""
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=60, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    x = {"input_ids": torch.tensor([[3, 8, 13, 21, 34]])}
    mask = torch.tensor([[1, 0, 0, 1], [0, 0, 0, 0]])
    ref = gated_logits(model, x, mask)
    prune_heads(model, mask)
    torch.testing.assert_close(logits(model, x), ref, rtol=1e-4, atol=1e-5)
    assert architecture.kept_heads(model) == [[0, 3], []]


# ----------------------------------------------------------------------------------- unsupported / offline
def _tiny_unsupported():
    """A causal LM of a family no adapter covers (Falcon-H1: Mamba-2 mixers beside the attention in every layer)."""
    torch.manual_seed(0)
    cfg = transformers.FalconH1Config(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, mamba_d_ssm=16, mamba_n_heads=4, mamba_d_head=4,
                                      mamba_d_state=8, intermediate_size=37)
    return transformers.FalconH1ForCausalLM(cfg).eval()


def test_unsupported_architecture_gates_lists_families():
    """README: another family raises UnsupportedArchitectureError, which lists the families there are."""
    model = _tiny_unsupported()
    with pytest.raises(UnsupportedArchitectureError) as ei:
        with head_gates(model, torch.ones(2, 4)):
            pass
    text = str(ei.value).lower()
    assert "llama" in text and "bert" in text and "gpt2" in text.replace("-", "")


def test_unsupported_architecture_prune_raises_untouched():
    """README: UnsupportedArchitectureError also from prune_heads, and the model is untouched."""
    model = _tiny_unsupported()
    size = n_params(model)
    with pytest.raises(UnsupportedArchitectureError):
        prune_heads(model, torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1]]))
    assert n_params(model) == size


def test_unsupported_architecture_perplexity_with_gates():
    """README: measurements on an unsupported family refuse with UnsupportedArchitectureError, before scoring."""
    model = _tiny_unsupported()
    with pytest.raises(UnsupportedArchitectureError):
        perplexity(model, lm_inputs(), gates=torch.ones(2, 4))


def test_unsupported_architecture_kept_heads_raises():
    """README: architecture.kept_heads on an unsupported family raises UnsupportedArchitectureError."""
    with pytest.raises(UnsupportedArchitectureError):
        architecture.kept_heads(_tiny_unsupported())


def test_plain_module_is_unsupported():
    """README: a model of no known family is refused with UnsupportedArchitectureError (or a clear TypeError)."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises((UnsupportedArchitectureError, TypeError)):
        prune_heads(model, torch.ones(1, 1))


HUB_ID_LM = "Qwen/Qwen2.5-0.5B"
HUB_ID_CLS = "google-bert/bert-large-cased-whole-word-masking"


def _offline_load(fn, name, monkeypatch, unset_offline: bool, **kw):
    if unset_offline:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    start = time.monotonic()
    with time_limit(60):
        with pytest.raises(Exception) as ei:
            fn(name, **kw)
    elapsed = time.monotonic() - start
    assert not isinstance(ei.value, TimeoutError), "load hung for 60 s"
    assert elapsed < 20, f"took {elapsed:.1f} s to fail"
    return ei.value


def test_load_causal_lm_hub_id_offline_fails_fast_and_says_how(monkeypatch):
    """README: a hub id while offline fails at once and says how to get the model."""
    err = _offline_load(models.load_causal_lm, HUB_ID_LM, monkeypatch, unset_offline=False, device="cpu")
    assert HUB_ID_LM in str(err)
    assert is_clear(err, "download", "internet", "offline", "online", "local", "folder")


def test_load_causal_lm_hub_id_no_network_fails_fast(monkeypatch):
    """README: fails at once offline even when HF_HUB_OFFLINE is not set (no network here), naming the model."""
    err = _offline_load(models.load_causal_lm, HUB_ID_LM, monkeypatch, unset_offline=True, device="cpu")
    assert HUB_ID_LM in str(err)


@pytest.mark.parametrize("hub_id", [HUB_ID_CLS, "bert-base-uncased"])
def test_load_classifier_hub_id_offline_fails_fast_and_says_how(monkeypatch, hub_id):
    """README: load_classifier with an uncached hub id offline fails at once and says how to get the model."""
    err = _offline_load(models.load_classifier, hub_id, monkeypatch, unset_offline=False, num_labels=2,
                        device="cpu")
    assert hub_id in str(err)
    assert is_clear(err, "download", "internet", "offline", "online", "local", "folder")


def test_load_tokenizer_hub_id_offline_fails_fast(monkeypatch):
    """README: a hub id while offline fails at once (the tokenizer too) and names the model."""
    err = _offline_load(models.load_tokenizer, HUB_ID_CLS, monkeypatch, unset_offline=False)
    assert HUB_ID_CLS in str(err)


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")
@pytest.mark.parametrize("n", [0, -2])
def test_load_classifier_bad_num_labels_raises(n):
    """Standard: num_labels must be >= 1 (checked before loading): a clear error naming num_labels."""
    with pytest.raises(BAD_INPUT) as ei:
        models.load_classifier("minilm", num_labels=n, device="cpu")
    assert is_clear(ei.value, "num_labels", "label")


def test_resolve_bad_device_raises():
    """README: device="auto" picks CUDA when present; an unknown device name is a clear error naming it."""
    with pytest.raises(Exception) as ei:
        models.resolve_device("gpu0-please")
    assert is_clear(ei.value, "gpu0-please", "device")


def test_load_classifier_missing_local_folder(tmp_path):
    """README: load_classifier takes a local folder; a missing one is a clear error naming the path, at once."""
    missing = tmp_path / "no_such_model"
    start = time.monotonic()
    with pytest.raises(Exception) as ei:
        models.load_classifier(str(missing), num_labels=2, device="cpu")
    assert time.monotonic() - start < 20
    assert "no_such_model" in str(ei.value)
