"""Inputs on which attention patterns are read without any task: generic text and random token sequences.

- :func:`glue_text`: sentences pooled from the GLUE tasks' splits (text only, labels dropped), the project's
  "generic text" (it is on disk offline and on the hub online).
- :func:`random_tokens`: sequences of tokens drawn uniformly from the vocabulary (Bian et al.'s task-agnostic
  probe), ``[CLS] t_1 ... t_m [SEP]`` with the lengths of a reference set. Special tokens and reserved
  placeholders (``[unused17]``, ``[PAD]``, any ``[...]`` entry) are never drawn.
"""
from __future__ import annotations

import re

import numpy as np

from headprune_utils.tasks import batching, data


def _as_encoded(ids: list[list[int]], token_type_ids, pad_id: int) -> batching.Encoded:
    return batching.Encoded(input_ids=ids, token_type_ids=token_type_ids,
                            labels=np.zeros(len(ids), dtype=np.int64), pad_id=pad_id)


def drawable_ids(tokenizer) -> np.ndarray:
    """Vocabulary ids a random sequence may contain: not special, not a bracketed placeholder."""
    special = set(tokenizer.all_special_ids)
    placeholder = re.compile(r"^\[.*\]$|^<.*>$")
    vocab = tokenizer.get_vocab()
    ids = sorted(i for tok, i in vocab.items() if i not in special and not placeholder.match(tok))
    if not ids:
        raise ValueError("the tokenizer has no ordinary tokens to draw from")
    return np.asarray(ids, dtype=np.int64)


def random_tokens(tokenizer, lengths: np.ndarray | list[int], seed: int) -> batching.Encoded:
    """One random sequence per entry of ``lengths`` (total length in tokens, specials included, >= 3)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) == 0 or lengths.min() < 3:
        raise ValueError("random_tokens needs at least one length, each >= 3 ([CLS] t [SEP])")
    cls = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if cls is None or sep is None:
        raise ValueError("the tokenizer has no [CLS]/[SEP] (or <s>/</s>) tokens")
    pool = drawable_ids(tokenizer)
    rng = np.random.default_rng(seed)
    ids = [[int(cls), *rng.choice(pool, size=int(n) - 2).tolist(), int(sep)] for n in lengths]
    return _as_encoded(ids, [[0] * len(x) for x in ids], tokenizer.pad_token_id or 0)


def glue_text(tokenizer, tasks: list[str], split: str, n: int, seed: int, max_length: int = 128,
              data_dir: str | None = None, allow_hub: bool = True) -> batching.Encoded:
    """``n`` single sentences drawn at random (``seed``) from the pooled ``split`` texts of ``tasks``.

    Pairs are split into their two sentences; duplicates are removed before drawing. Labels are dropped.
    """
    texts: list[str] = []
    for t in tasks:
        d = data.load_task(t, split, data_dir, allow_hub=allow_hub)
        texts.extend(d.text_a)
        if d.text_b is not None:
            texts.extend(d.text_b)
    texts = sorted({s.strip() for s in texts if s and s.strip()})
    if not texts:
        raise data.DataUnavailableError(f"no {split} text in tasks {tasks}")
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(texts), size=min(n, len(texts)), replace=False)
    enc = tokenizer([texts[i] for i in pick], truncation=True, max_length=max_length, padding=False)
    return _as_encoded(list(enc["input_ids"]), list(enc["token_type_ids"]) if "token_type_ids" in enc else None,
                       tokenizer.pad_token_id or 0)


def task_text(tokenizer, task: str, split: str, n: int | None, seed: int, max_length: int = 128,
              data_dir: str | None = None, allow_hub: bool = True) -> batching.Encoded:
    """The task's own inputs (pairs stay pairs, as the fine-tuned model sees them), ``n`` drawn at random."""
    d = data.subset(data.load_task(task, split, data_dir, allow_hub=allow_hub), n, seed)
    return batching.encode(tokenizer, d, max_length)
