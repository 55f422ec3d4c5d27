"""Measurements of the heads of a translation model (an encoder-decoder such as ``translation_model``'s Marian).

- :func:`encoder_roles`: Voita et al.'s encoder-head measurements -- confidence, entropy, positional, rare-word
  (on source sentences) and syntactic heads (on UD sentences with gold trees; the encoder reads the source
  language, so this needs an English source for UD English-EWT) -- from ``attention.attention_maps(kind="enc")``,
  with the pure functions of ``specialized`` and ``head_scores``;
- :func:`ablation_nll`: each head's importance as the increase of the teacher-forced NLL when it alone is zeroed,
  for every attention type.

Source sentences carry no leading special token (Marian appends ``</s>`` only), so the queries are the real
tokens minus the special ids (:func:`source_queries`), not ``head_scores.query_mask``'s first/last rule.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch

from headprune_utils.measure import specialized
from headprune_utils.model.attention import attention_maps
from headprune_utils.measure.head_scores import confidence_from_maps, entropy_from_maps
from headprune_utils.train.translation import dev_loss

__all__ = ["source_queries", "encoder_roles", "ablation_nll"]


def _source_batches(tok, sentences: list[str], max_length: int, batch_size: int, device) -> list[dict]:
    out = []
    for start in range(0, len(sentences), batch_size):
        enc = tok(sentences[start : start + batch_size], truncation=True, max_length=max_length, padding=True,
                  return_tensors="pt")
        out.append({k: v.to(device) for k, v in enc.items()})
    return out


def source_queries(batch: dict, special_ids) -> torch.Tensor:
    """Query positions of a Marian source batch: the real tokens minus the special ones (``</s>``; there is no
    leading special token, so ``head_scores.query_mask``'s first/last rule does not apply)."""
    ids = torch.as_tensor(sorted(special_ids), device=batch["input_ids"].device)
    return batch["attention_mask"].bool() & ~torch.isin(batch["input_ids"], ids)


def encoder_roles(model, tok, sources: list[str], train_sources: list[str], ud: Sequence[specialized.Sentence] = (),
                  max_length: int = 128, relations: Sequence[str] = ("nsubj", "obj", "amod", "advmod"),
                  syntactic_margin: float = 0.10, batch_size: int = 32) -> dict:
    """Raw measurements of the ENCODER self-attention heads of a translation model, as lists ``[L][H]``:

    - on ``sources`` (source sentences, e.g. of the dev set): ``prev``/``next`` (positional shares), ``confidence``,
      ``entropy`` (nats), and the rare-word counts (``rare_share``, ``rare_p``, ``rare_chance``, ``rare_n``) with
      piece frequencies counted over ``train_sources`` (the training source side);
    - on ``ud`` (UD sentences with gold trees; none: no rows): ``syntactic``, one row per head, relation and
      direction (``specialized.syntactic_scores``).

    The format of study 6's cells, so ``role_survival.role_table`` applies the role thresholds.
    Queries: :func:`source_queries`. Model on its own device, eval mode restored.
    """
    device = next(model.parameters()).device
    special = [tok.pad_token_id, tok.bos_token_id, tok.eos_token_id]
    counts = specialized.token_frequencies(tok(train_sources)["input_ids"], special, exclude_first_last=False)
    prev = nxt = hits = conf = ent = None
    n_q = trials = 0
    chance_sum = 0.0
    for batch in _source_batches(tok, sources, max_length, batch_size, device):
        maps = attention_maps(model, batch, kind="enc")
        q = source_queries(batch, special)
        n = int(q.sum())
        if not n:
            continue
        pos = specialized.positional_from_maps(maps, q)
        c, e = confidence_from_maps(maps, q).double() * n, entropy_from_maps(maps, q).double() * n
        p, x = pos["prev"].double() * n, pos["next"].double() * n
        prev, nxt, conf, ent = (p, x, c, e) if prev is None else (prev + p, nxt + x, conf + c, ent + e)
        n_q += n
        r = specialized.rare_counts_from_maps(maps, batch["input_ids"], q, counts)
        hits = r["hits"] if hits is None else hits + r["hits"]
        trials, chance_sum = trials + r["trials"], chance_sum + r["chance_sum"]
    if not n_q:
        raise ValueError("the source sentences have no query tokens")
    rare = specialized.rare_table(hits, trials, chance_sum)
    shape = tuple(prev.shape)
    syn_rows: list[dict] = []
    if ud:
        argmaxes, complete = [], []
        for start in range(0, len(ud), batch_size):
            chunk = ud[start : start + batch_size]
            words = [s.forms for s in chunk]
            whole = tok(words, is_split_into_words=True, truncation=False)
            enc = tok(words, is_split_into_words=True, truncation=True, max_length=max_length, padding=True,
                      return_tensors="pt")
            maps = attention_maps(model, {k: v.to(device) for k, v in enc.items()}, kind="enc")
            for b, sent in enumerate(chunk):  # as specialized.syntactic_heads: words cut by truncation are skipped
                wids = enc.word_ids(b)
                cut = Counter(w for w in wids if w is not None)
                full = Counter(w for w in whole.word_ids(b) if w is not None)
                complete.append({w for w in range(len(sent)) if full[w] > 0 and cut[w] == full[w]})
                per = torch.stack([m[b] for m in maps])
                argmaxes.append(specialized.word_argmax(specialized.word_attention(per, wids, len(sent))).cpu())
        syn = specialized.syntactic_scores(argmaxes, list(ud), tuple(relations), syntactic_margin, complete)
        syn_rows = specialized.syntactic_records(syn)
    return {
        "prev": (prev / n_q).to(torch.float32).tolist(), "next": (nxt / n_q).to(torch.float32).tolist(),
        "rare_share": rare["share"].to_numpy().reshape(shape).tolist(),
        "rare_p": rare["p_value"].to_numpy().reshape(shape).tolist(),
        "rare_chance": float(rare["chance"].iloc[0]), "rare_n": int(rare["n"].iloc[0]), "syntactic": syn_rows,
        "confidence": (conf / n_q).to(torch.float32).tolist(), "entropy": (ent / n_q).to(torch.float32).tolist(),
        "n_queries": n_q,
    }


def ablation_nll(model, enc, shapes: dict[str, tuple[int, int]], batch_size: int = 128) -> tuple[dict, float]:
    """``({kind: [L, H] increase of the teacher-forced NLL (nats per target token) when that head alone is
    zeroed}, NLL of the full model)`` on ``enc``."""
    full = dev_loss(model, enc, batch_size)
    out = {}
    for kind, (n_layers, n_heads) in shapes.items():
        grid = torch.zeros(n_layers, n_heads, dtype=torch.float64)
        for layer in range(n_layers):
            for head in range(n_heads):
                g = torch.ones(n_layers, n_heads)
                g[layer, head] = 0.0
                grid[layer, head] = dev_loss(model, enc, batch_size, gates={kind: g}) - full
        out[kind] = grid.to(torch.float32).tolist()
    return out, full
