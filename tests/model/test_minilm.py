"""The real offline model (all-MiniLM-L6-v2, 6 x 12 heads): gates and pruning on pretrained weights."""
from __future__ import annotations

import time

import pytest
import torch

from headprune_utils.model.architecture import head_shape, kept_heads
from headprune_utils.model.gates import head_gates
from headprune_utils.model.masks import random_mask
from headprune_utils.model.models import (
    ModelUnavailableError, load_classifier, load_config, load_tokenizer, resolve_device,
)
from headprune_utils.model.pruning import prune_heads

pytestmark = pytest.mark.model

SENTENCES = ["a gripping, funny and humane film .", "the plot is thin and the acting is worse .",
             "it 's not a bad movie , just an unremarkable one ."]


@pytest.fixture(scope="module")
def batch():
    tok = load_tokenizer("minilm")
    return dict(tok(SENTENCES, padding=True, return_tensors="pt"))


def test_embedded_model_loads_offline_with_its_shape():
    cfg = load_config("minilm")
    assert head_shape(cfg) == (6, 12)
    model = load_classifier("minilm", num_labels=2, device="cpu", seed=0)
    assert head_shape(model) == (6, 12)
    assert resolve_device("auto").type in ("cpu", "cuda")


def test_same_seed_same_classifier():
    a = load_classifier("minilm", 2, device="cpu", seed=3)
    b = load_classifier("minilm", 2, device="cpu", seed=3)
    assert torch.equal(a.classifier.weight, b.classifier.weight)


@pytest.mark.parametrize("seed", [0, 1])
def test_gates_and_pruning_on_pretrained_weights(batch, seed):
    model = load_classifier("minilm", 2, device="cpu", seed=0)
    with torch.no_grad():
        base = model(**batch).logits
        with head_gates(model, torch.ones(6, 12)):
            assert torch.equal(model(**batch).logits, base)
        mask = random_mask(6, 12, 40, seed=seed)
        mask[3] = 0  # one layer loses every head
        with head_gates(model, mask):
            gated = model(**batch).logits
        prune_heads(model, mask)
        pruned = model(**batch).logits
    assert kept_heads(model)[3] == []
    assert torch.allclose(pruned, gated, atol=1e-5), (pruned - gated).abs().max()
    assert not torch.allclose(pruned, base, atol=1e-3)


def test_hub_model_offline_fails_fast_and_clearly(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(ModelUnavailableError, match=r"(?s)bert-base-uncased.*HF_HUB_OFFLINE.*model='minilm'") as err:
        load_classifier("bert-base-uncased", 2, device="cpu")
    assert time.perf_counter() - t0 < 10
    assert "hf download" in str(err.value)
    with pytest.raises(ModelUnavailableError, match="does not exist"):
        load_config("/no/such/model/folder")


def test_lean_loss_equals_the_real_models_own_loss_and_gradients(batch):
    """lean_loss on the real MiniLM (pre-trained weights, padded batch, a pruned layer and uniform gates): the loss,
    logits and gradients of the model's own forward, in float64."""
    from headprune_utils.train.lean_loss import lean_loss, unsupported_reason

    model = load_classifier("minilm", 2, device="cpu", seed=0).double()
    mask = torch.ones(6, 12)
    mask[2, :7] = 0
    prune_heads(model, mask)
    b = {**batch, "labels": torch.tensor([1, 0, 0])}
    assert bool((b["attention_mask"] == 0).any()) and unsupported_reason(model) is None
    g = torch.rand(6, 12, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with head_gates(model, g, "uniform"):
        ref = model(**b)
        ref.loss.backward()
    g_ref = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    loss, logits = lean_loss(model, b, g, "uniform")
    loss.backward()
    torch.testing.assert_close(logits, ref.logits, rtol=0, atol=1e-10)
    for n, p in model.named_parameters():
        if n in g_ref:
            torch.testing.assert_close(p.grad, g_ref[n], rtol=0, atol=1e-10, msg=n)
