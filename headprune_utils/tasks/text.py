"""Plain text for language models: lines of a text file, cut into padded next-token batches.

``read_lines`` reads a UTF-8 text file, one example per non-empty line (e.g. WMT newstest, one sentence a line);
``lm_batches`` tokenises them, truncated to ``max_length`` tokens, into right-padded batches with ``labels``
(the input ids, ``-100`` on padding), the layout every Hugging Face causal LM takes for its own loss.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

__all__ = ["lm_batches", "read_lines"]


def read_lines(path: str | os.PathLike, n: int | None = None) -> list[str]:
    """The first ``n`` non-empty lines of the UTF-8 text file ``path`` (all of them when ``n`` is None), stripped.

    Errors name the file: missing, a folder, not UTF-8, or without a non-empty line."""
    p = Path(path)
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"n must be a positive integer or None, got {n!r}")
    if not p.exists():
        raise FileNotFoundError(f"text file {str(p)!r} does not exist")
    if not p.is_file():
        raise ValueError(f"text file {str(p)!r} is not a file")
    lines: list[str] = []
    try:
        with p.open(encoding="utf-8") as f:
            for raw in f:
                line = raw.strip()
                if line:
                    lines.append(line)
                    if n is not None and len(lines) == n:
                        break
    except UnicodeDecodeError as exc:
        raise ValueError(f"text file {str(p)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not lines:
        raise ValueError(f"text file {str(p)!r} has no non-empty line")
    return lines


def lm_batches(tokenizer, lines: list[str], batch_size: int = 16, max_length: int = 64,
               device: torch.device | str = "cpu") -> list[dict[str, torch.Tensor]]:
    """``lines`` tokenised (truncated to ``max_length``) into batches of ``batch_size`` lines, in order, each a dict
    of ``input_ids`` and ``attention_mask`` (right-padded with the tokenizer's pad token, else its end-of-sequence
    token) and ``labels`` (``input_ids`` with ``-100`` where padded). A line of one token has no next token to
    predict: such lines are dropped (an error when none is left)."""
    for name, v in (("batch_size", batch_size), ("max_length", max_length)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if max_length < 2:
        raise ValueError(f"max_length must be at least 2 (one token and the next), got {max_length}")
    if isinstance(lines, str):
        raise ValueError(f"lines must be a list of texts, not one string ({lines[:40]!r}...)")
    lines = list(lines)
    if not lines:
        raise ValueError("lines is empty: no text to make batches of")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError("the tokenizer has neither a pad nor an end-of-sequence token to pad with")
    ids = [x for x in tokenizer(list(lines), truncation=True, max_length=max_length)["input_ids"] if len(x) >= 2]
    if not ids:
        raise ValueError("no line has two tokens or more: nothing to predict")
    out = []
    for start in range(0, len(ids), batch_size):
        chunk = ids[start:start + batch_size]
        width = max(len(x) for x in chunk)
        input_ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for i, x in enumerate(chunk):
            input_ids[i, :len(x)] = torch.tensor(x, dtype=torch.long)
            mask[i, :len(x)] = 1
        labels = input_ids.masked_fill(mask == 0, -100)
        out.append({"input_ids": input_ids.to(device), "attention_mask": mask.to(device), "labels": labels.to(device)})
    return out
