"""The shared mask-sweep evaluator on the real MiniLM and real SST-2 dev sentences (Study 2's strategy sweep)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from headprune_utils.tasks.batching import encode
from headprune_utils.tasks.data import load_task, subset
from headprune_utils.measure.mask_sweep import logits_masks, plain_logits_masks, plain_predict_masks, predict_masks
from headprune_utils.model.models import load_classifier, load_tokenizer
from headprune_utils.model.pruning import prune_heads
from headprune_utils.model.strategies import STRATEGIES, strategy_mask

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def dev64(data_root):
    """64 SST-2 dev sentences (skips with a reason when the real data is absent)."""
    return encode(load_tokenizer("minilm"), subset(load_task("SST-2", "dev", data_root), 64, seed=0))


def strategy_masks() -> dict:
    masks = {"unpruned": torch.ones(6, 12)}
    for strategy in STRATEGIES:
        for n_prune in (18, 36, 54):  # 25 / 50 / 75 % of 72 heads
            masks[(strategy, n_prune)] = strategy_mask(strategy, 6, 12, n_prune, seed=0)
    masks["all_pruned"] = torch.zeros(6, 12)
    return masks


def test_strategy_sweep_predictions_equal_plain(dev64):
    model = load_classifier("minilm", 2, device="cpu", seed=0)
    masks = strategy_masks()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the shared path, not the fall-back
        got = logits_masks(model, dev64, masks, batch_size=32)
    ref = plain_logits_masks(model, dev64, masks, batch_size=32)
    for k in masks:
        diff = float((got[k] - ref[k]).abs().max())
        assert diff < 1e-5, (k, diff)
        assert torch.equal(got[k].argmax(-1), ref[k].argmax(-1)), k
    preds = predict_masks(model, dev64, masks, batch_size=32)
    plain = plain_predict_masks(model, dev64, {"unpruned": masks["unpruned"], ("top", 36): masks[("top", 36)]},
                                batch_size=32)
    for k, p in plain.items():
        assert np.array_equal(preds[k], p), k


@pytest.mark.parametrize("ablation", ["uniform", "mean"])
def test_other_ablations_on_pretrained_weights(dev64, ablation):
    from headprune_utils.tasks.batching import eval_batches, iterate
    from headprune_utils.model.gates import head_means

    model = load_classifier("minilm", 2, device="cpu", seed=0)
    masks = {k: v for k, v in strategy_masks().items() if k == "unpruned" or (isinstance(k, tuple) and k[1] == 36)}
    means = None
    if ablation == "mean":
        means = head_means(model, (b for _, b in iterate(dev64, eval_batches(dev64.lengths, 32), "cpu")))
    got = logits_masks(model, dev64, masks, batch_size=32, ablation=ablation, means=means)
    ref = plain_logits_masks(model, dev64, masks, batch_size=32, ablation=ablation, means=means)
    for k in masks:
        assert float((got[k] - ref[k]).abs().max()) < 1e-5, k
        assert torch.equal(got[k].argmax(-1), ref[k].argmax(-1)), k


def test_physically_pruned_minilm(dev64):
    model = load_classifier("minilm", 2, device="cpu", seed=0)
    prune_heads(model, strategy_mask("random", 6, 12, 18, seed=1))
    masks = {k: v for k, v in strategy_masks().items() if k == "unpruned" or (isinstance(k, tuple) and k[1] == 18)}
    got = logits_masks(model, dev64, masks, batch_size=32)
    ref = plain_logits_masks(model, dev64, masks, batch_size=32)
    for k in masks:
        assert float((got[k] - ref[k]).abs().max()) < 1e-5, k
