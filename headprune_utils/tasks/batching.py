"""Tokenising task data and cutting it into length-grouped, dynamically padded batches.

Sequence length is the main cost on a CPU and GLUE sentences are short, so batches are padded to
their own longest sequence (never to a fixed 128), and sequences of similar length are batched together:
- evaluation: sorted by length (order restored in the predictions);
- training: the Hugging Face ``group_by_length`` recipe: a seeded shuffle, cut into mega-batches of
  50 batches, each sorted by length and cut into batches; the batch order is shuffled again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch


@dataclass
class Encoded:
    """Token ids of one task split (unpadded), with labels."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    labels: np.ndarray
    pad_id: int

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(x) for x in self.input_ids), dtype=np.int64, count=len(self.input_ids))


def encode(tokenizer, data, max_length: int = 128) -> Encoded:
    """Tokenise a ``data.TaskData`` (sentence or sentence pair), truncated to ``max_length`` tokens."""
    kwargs = dict(truncation=True, max_length=max_length, padding=False)
    if data.text_b is None:
        enc = tokenizer(list(data.text_a), **kwargs)
    else:
        enc = tokenizer(list(data.text_a), list(data.text_b), **kwargs)
    return Encoded(
        input_ids=list(enc["input_ids"]),
        token_type_ids=list(enc["token_type_ids"]) if "token_type_ids" in enc else None,
        labels=np.asarray(data.labels),
        pad_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
    )


def standardize_labels(train: Encoded, *others: Encoded) -> tuple[float, float]:
    """Standardise regression targets in place with the TRAINING mean and std; returns (mean, std).

    A fresh regression head starts near 0 and AdamW moves its bias by about ``lr`` per step, so raw
    STS-B targets (0-5) are out of reach in a few hundred steps. Pearson and Spearman correlations are
    invariant to this affine map, so reported scores are unchanged; predictions are in standard units.
    """
    mean = float(np.mean(train.labels))
    std = float(np.std(train.labels)) or 1.0
    for enc in (train, *others):
        enc.labels = ((np.asarray(enc.labels, dtype=np.float64) - mean) / std).astype(np.float32)
    return mean, std


def eval_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Indices sorted by length (longest first), cut into batches."""
    order = np.argsort(-lengths, kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def train_batches(lengths: np.ndarray, batch_size: int, seed: int, group_by_length: bool = True) -> list[np.ndarray]:
    """One epoch of shuffled batches (grouped by length when asked), deterministic for ``seed``."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths))
    if not group_by_length:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    mega = batch_size * 50
    batches = []
    for start in range(0, len(order), mega):
        chunk = order[start : start + mega]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    # the longest batch first (as transformers does) surfaces out-of-memory errors at once
    longest = int(np.argmax([lengths[b].max() for b in batches]))
    batches[0], batches[longest] = batches[longest], batches[0]
    rest = batches[1:]
    perm = rng.permutation(len(rest))
    return [batches[0]] + [rest[i] for i in perm]


def collate(enc: Encoded, index: np.ndarray, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Pad the sequences at ``index`` to their longest; returns model inputs plus ``labels``."""
    seqs = [enc.input_ids[i] for i in index]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), enc.pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, s in enumerate(seqs):
        ids[row, : len(s)] = torch.tensor(s, dtype=torch.long)
        att[row, : len(s)] = 1
    batch = {"input_ids": ids, "attention_mask": att}
    if enc.token_type_ids is not None:
        tt = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, i in enumerate(index):
            t = enc.token_type_ids[i]
            tt[row, : len(t)] = torch.tensor(t, dtype=torch.long)
        batch["token_type_ids"] = tt
    labels = torch.as_tensor(enc.labels[index])
    batch["labels"] = labels.float() if labels.is_floating_point() else labels.long()
    return {k: v.to(device) for k, v in batch.items()}


def iterate(enc: Encoded, batches: list[np.ndarray], device) -> Iterator[tuple[np.ndarray, dict[str, torch.Tensor]]]:
    for index in batches:
        yield index, collate(enc, index, device)
