"""Length-grouped, dynamically padded batches."""
from __future__ import annotations

import numpy as np
import torch

from headprune_utils.tasks.batching import Encoded, collate, eval_batches, train_batches


def test_train_batches_cover_every_example_once_and_are_deterministic():
    lengths = np.random.default_rng(0).integers(3, 60, size=1000)
    a = train_batches(lengths, 16, seed=3)
    b = train_batches(lengths, 16, seed=3)
    c = train_batches(lengths, 16, seed=4)
    flat = np.concatenate(a)
    assert sorted(flat.tolist()) == list(range(1000))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert lengths[a[0]].max() == lengths.max(), "the longest batch comes first"


def test_grouping_reduces_padding():
    lengths = np.random.default_rng(1).integers(3, 60, size=2000)
    pad = lambda bs: sum(len(x) * lengths[x].max() for x in bs) / lengths.sum()
    grouped = pad(train_batches(lengths, 32, seed=0, group_by_length=True))
    plain = pad(train_batches(lengths, 32, seed=0, group_by_length=False))
    assert grouped < 1.1 < plain


def test_eval_batches_sorted_and_collate_pads_to_longest():
    enc = Encoded(input_ids=[[1, 5, 2], [1, 2], [1, 7, 8, 9, 2]], token_type_ids=[[0, 0, 0], [0, 0], [0, 0, 1, 1, 1]],
                  labels=np.array([0, 1, 0]), pad_id=0)
    batches = eval_batches(enc.lengths, 2)
    assert [b.tolist() for b in batches] == [[2, 0], [1]]
    batch = collate(enc, batches[0])
    assert batch["input_ids"].tolist() == [[1, 7, 8, 9, 2], [1, 5, 2, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 1, 1, 1], [0, 0, 0, 0, 0]]
    assert batch["labels"].dtype == torch.long
