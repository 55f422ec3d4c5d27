"""Voita et al.'s (2019) specialized heads: positional, syntactic and rare-word heads; a CoNLL-U reader.

Conventions (``A[b, h, i, j]`` = attention of query ``i`` to key ``j``, ``attention.attention_maps``):

- Queries: the real tokens minus the special ones (first and last real token of each sequence, and ids in
  ``special_ids``) -- ``head_scores.query_mask``. Argmaxes run over the keys named below; ties go to the
  first (lowest) position (``torch.argmax``).
- Positional: share of queries whose argmax over ALL real keys is ``i - 1`` ("prev") or ``i + 1`` ("next");
  ``positional = max(prev, next) >= threshold`` (Voita et al.: 90%). (They also ask the head to be confident;
  compare with ``head_scores.confidence`` yourself.)
- Syntactic (:func:`syntactic_heads`): word-level maps as Clark et al. (2019): attention FROM a word is the
  MEAN over its pieces' rows, attention TO a word the SUM over its pieces' columns; [CLS]/[SEP] are dropped,
  so argmaxes run over the sentence's words, the source word itself excluded (a word is never its own head or
  dependent). Scored against the UD basic tree, with the best fixed-offset baseline and a margin.
- Rare-word (:func:`rare_word_heads`): unit = query token; success = its argmax over the sentence's
  candidate keys (real, non-special tokens) is a least-frequent token of the sentence; ``rare`` when the share of
  successes is above :data:`RARE_SHARE` (more than half of the queries: Voita et al.'s definition, fixed before any
  data; no ratio over chance).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy import stats
from torch import nn

from headprune_utils.model.attention import attention_maps, check_maps
from headprune_utils.tasks.data import DataUnavailableError, resolve_data_dir
from headprune_utils.measure.head_scores import query_mask

__all__ = [
    "positional_from_maps", "positional_heads", "Sentence", "parse_conllu", "read_conllu", "load_ud_ewt",
    "word_attention", "word_argmax", "relation_instances", "syntactic_scores", "syntactic_heads",
    "token_frequencies", "rare_counts_from_maps", "rare_table", "rare_word_heads", "RARE_SHARE",
]

Batch = dict[str, torch.Tensor]
DIRECTIONS = ("dep->head", "head->dep")
# A head is a rare-word head when its maximum attention falls on the sentence's least frequent token for MORE THAN
# this share of the queries. Fixed from the paper before any data: Voita et al. 2019 (Sec. 5, "Rare
# words") define the head as the one that "points to the least frequent token of the sentence"; they report it does
# so in 66% of cases (OpenSubtitles) and, for their WMT models, to one of the two least frequent tokens in more than
# 50% of cases (over sentences whose rarest token is not among the 500 most frequent). The majority reading of
# "points to" (> 0.5) is the paper's weakest reported level. No ratio over chance, no threshold chosen from our data;
# the analyses show the count of such heads over 0.1-0.9 as a sensitivity, never to choose.
RARE_SHARE = 0.5


# ----------------------------------------------------------------------------- positional heads
def _positional_counts(maps: list[torch.Tensor], queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    pos = torch.arange(queries.shape[1])
    check_maps(maps, queries, "positional heads")
    prev, nxt = [], []
    for a in maps:
        q = queries.to(a.device)[:, None, :]
        am = a.argmax(dim=-1)  # [b, H, s]
        p = pos.to(a.device).view(1, 1, -1)
        absent = torch.isnan(a).transpose(0, 1).flatten(1).all(dim=1)  # [H]
        for out, off in ((prev, -1), (nxt, 1)):
            c = ((am == p + off) & q).sum(dim=(0, 2)).to(torch.float64).cpu()
            c[absent.cpu()] = float("nan")
            out.append(c)
    return torch.stack(prev), torch.stack(nxt), int(queries.sum())


def positional_from_maps(maps: list[torch.Tensor], queries: torch.Tensor, threshold: float = 0.9) -> dict[str, torch.Tensor]:
    """Positional shares of hand-made or model maps (per layer ``[batch, n_heads, seq, seq]``).

    queries: bool ``[batch, seq]`` (``head_scores.query_mask``). Returns ``{"prev", "next"}`` float32
    ``[L, H]`` shares in [0, 1] (NaN for absent heads) and ``"positional"`` bool ``[L, H]``.
    """
    prev, nxt, n = _positional_counts(maps, queries)
    return _positional_result(prev, nxt, n, threshold)


def _positional_result(prev, nxt, n, threshold) -> dict[str, torch.Tensor]:
    if n == 0:
        raise ValueError("no query tokens")
    prev, nxt = (prev / n).to(torch.float32), (nxt / n).to(torch.float32)
    return {"prev": prev, "next": nxt, "positional": torch.maximum(prev, nxt) >= threshold}


def positional_heads(
    model: nn.Module,
    batches: Iterable[Batch],
    threshold: float = 0.9,
    exclude_special: bool = True,
    special_ids: Iterable[int] | None = None,
) -> dict[str, torch.Tensor]:
    """:func:`positional_from_maps` pooled over ``batches`` (streaming: one batch of maps at a time)."""
    prev = nxt = None
    n = 0
    for batch in batches:
        q = query_mask(batch["attention_mask"], batch.get("input_ids"), exclude_special, special_ids)
        p, x, k = _positional_counts(attention_maps(model, batch), q)
        prev, nxt, n = (p, x, k) if prev is None else (prev + p, nxt + x, n + k)
    return _positional_result(prev, nxt, n, threshold)


# ----------------------------------------------------------------------------- CoNLL-U
@dataclass
class Sentence:
    """One UD sentence, syntactic words only. ``heads[i]``: 1-based id of word ``i``'s head, 0 = root."""

    ids: list[int]
    forms: list[str]
    heads: list[int]
    deprels: list[str]
    sent_id: str | None = None

    def __len__(self) -> int:
        return len(self.forms)


def parse_conllu(text: str | Iterable[str], strip_subtypes: bool = True) -> list[Sentence]:
    """Sentences of a CoNLL-U text (a string or lines). Multiword-token lines (``1-2``) and empty nodes
    (``1.1``) are skipped; ``strip_subtypes`` maps ``nsubj:pass`` to ``nsubj``."""
    lines = text.splitlines() if isinstance(text, str) else text
    out: list[Sentence] = []
    cur = Sentence([], [], [], [])

    def flush():
        nonlocal cur
        if cur.forms:
            out.append(cur)
        cur = Sentence([], [], [], [])

    for raw in lines:
        line = raw.rstrip("\n")
        if not line.strip():
            flush()
        elif line.startswith("#"):
            if line.startswith("# sent_id") and "=" in line:
                cur.sent_id = line.split("=", 1)[1].strip()
        else:
            cols = line.split("\t")
            if len(cols) != 10:
                raise ValueError(f"CoNLL-U line without 10 tab-separated fields: {line!r}")
            if "-" in cols[0] or "." in cols[0]:
                continue
            rel = cols[7].split(":")[0] if strip_subtypes else cols[7]
            cur.ids.append(int(cols[0]))
            cur.forms.append(cols[1])
            cur.heads.append(int(cols[6]))
            cur.deprels.append(rel)
    flush()
    return out


def read_conllu(path: str | Path, strip_subtypes: bool = True, max_sentences: int | None = None) -> list[Sentence]:
    """:func:`parse_conllu` of a file; the first ``max_sentences`` only when given."""
    with open(path, encoding="utf-8") as f:
        sents = parse_conllu(f, strip_subtypes)
    return sents[:max_sentences] if max_sentences is not None else sents


def load_ud_ewt(split: str = "dev", data_dir: str | Path | None = None, strip_subtypes: bool = True,
                max_sentences: int | None = None) -> list[Sentence]:
    """UD English-EWT ``split`` (train/dev/test) from ``<data root>/ud_english_ewt/en_ewt-ud-<split>.conllu``.

    The data root is ``data.resolve_data_dir(data_dir)`` (``$HEADPRUNE_DATA_DIR``); raises
    ``data.DataUnavailableError`` when it or the file is missing.
    """
    if split not in ("train", "dev", "test"):
        raise ValueError(f"split must be train, dev or test, got {split!r}")
    root = resolve_data_dir(data_dir)
    if root is None:
        raise DataUnavailableError("no data root: set HEADPRUNE_DATA_DIR (or pass data_dir) to a folder holding "
                                   "ud_english_ewt/en_ewt-ud-{train,dev,test}.conllu")
    path = root / "ud_english_ewt" / f"en_ewt-ud-{split}.conllu"
    if not path.is_file():
        raise DataUnavailableError(f"UD English-EWT file not found: {path}")
    return read_conllu(path, strip_subtypes, max_sentences)


# ----------------------------------------------------------------------------- syntactic heads
def word_attention(maps: torch.Tensor, word_ids: Sequence[int | None], n_words: int | None = None) -> torch.Tensor:
    """Piece-level maps ``[..., seq, seq]`` of ONE sequence -> word-level ``[..., n_words, n_words]``.

    word_ids: per piece, its word index or None (specials, padding). Rows: mean over the word's pieces; columns:
    sum over its pieces (Clark et al. 2019). A word without pieces gets a zero row and column.
    """
    n_words = n_words if n_words is not None else max((w for w in word_ids if w is not None), default=-1) + 1
    m = torch.zeros(n_words, maps.shape[-1], dtype=maps.dtype, device=maps.device)
    for s, w in enumerate(word_ids):
        if w is not None and w < n_words:
            m[w, s] = 1.0
    rows = m / m.sum(dim=1, keepdim=True).clamp_min(1.0)
    return rows @ maps @ m.T


def word_argmax(word_maps: torch.Tensor, exclude_self: bool = True) -> torch.Tensor:
    """Argmax over target words of word-level maps ``[..., W, W]`` -> long ``[..., W]`` (self excluded)."""
    if exclude_self:
        eye = torch.eye(word_maps.shape[-1], dtype=torch.bool, device=word_maps.device)
        word_maps = word_maps.masked_fill(eye, float("-inf"))
    return word_maps.argmax(dim=-1)


def relation_instances(sent: Sentence, relation: str, direction: str, usable: Container[int] | None = None
                       ) -> list[tuple[int, frozenset[int]]]:
    """``(source, targets)`` 0-based word indices for ``relation`` in ``direction``.

    "dep->head": one instance per dependent, target = its head. "head->dep": one per head word, targets = all
    its dependents with that relation (correct if the argmax hits any). Instances touching a word not in
    ``usable`` (default: all; e.g. words cut by truncation) are skipped; root arcs too.
    """
    arcs = [(i, sent.heads[i] - 1) for i, r in enumerate(sent.deprels) if r == relation and sent.heads[i] > 0]
    if direction == "dep->head":
        inst = [(d, frozenset([h])) for d, h in arcs]
    elif direction == "head->dep":
        heads: dict[int, set[int]] = {}
        for d, h in arcs:
            heads.setdefault(h, set()).add(d)
        inst = [(h, frozenset(ds)) for h, ds in sorted(heads.items())]
    else:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if usable is None:
        return inst
    return [(s, t) for s, t in inst if s in usable and all(x in usable for x in t)]


def syntactic_scores(
    argmaxes: Sequence[torch.Tensor],
    sentences: Sequence[Sentence],
    relations: Sequence[str] = ("nsubj", "obj", "amod", "advmod"),
    margin: float = 0.10,
    usable: Sequence[Container[int]] | None = None,
) -> pd.DataFrame:
    """Accuracy of every head per relation and direction against the best fixed-offset baseline.

    argmaxes: per sentence, long ``[n_layers, n_heads, W]`` (:func:`word_argmax` of its word maps).
    usable: per sentence, the word indices wholly inside the model input (default all). Baseline: for each
    (relation, direction) the offset ``k`` maximising the share of instances with ``source + k`` in targets,
    over the same instances. Returns one row per (layer, head, relation, direction): ``n, accuracy, baseline,
    baseline_offset, syntactic`` (``accuracy >= baseline + margin``; False when ``n == 0``).
    """
    n_layers, n_heads = argmaxes[0].shape[:2] if argmaxes else (0, 0)
    rows = []
    for rel in relations:
        for direction in DIRECTIONS:
            hits = torch.zeros(n_layers, n_heads, dtype=torch.float64)
            offsets: Counter = Counter()
            n = 0
            for i, (am, sent) in enumerate(zip(argmaxes, sentences)):
                inst = relation_instances(sent, rel, direction, None if usable is None else usable[i])
                for src, tgts in inst:
                    t = torch.tensor(sorted(tgts))
                    hits += torch.isin(am[:, :, src].cpu(), t).to(torch.float64)
                    offsets.update(k - src for k in tgts)
                    n += 1
            if offsets:  # targets are distinct, so offsets[k] = instances that offset k gets right
                k_best, k_hits = max(offsets.items(), key=lambda kv: (kv[1], -abs(kv[0]), -kv[0]))
                base = k_hits / n
            else:
                k_best, base = 0, float("nan")
            for layer in range(n_layers):
                for head in range(n_heads):
                    acc = float(hits[layer, head] / n) if n else float("nan")
                    rows.append({"layer": layer, "head": head, "relation": rel, "direction": direction, "n": n,
                                 "accuracy": acc, "baseline": base, "baseline_offset": int(k_best),
                                 "syntactic": bool(n > 0 and acc >= base + margin)})
    return pd.DataFrame(rows)


SYNTACTIC_COLUMNS = ("layer", "head", "relation", "direction", "n", "accuracy", "baseline", "baseline_offset")


def syntactic_records(syn: pd.DataFrame) -> list[dict]:
    """The rows of :func:`syntactic_scores` as plain records for a result cell: a relation without instances among
    the sentences (``n == 0``: too few sentences, e.g. a smoke or shrunk run) has no accuracy and no baseline, stored
    as None (null), never NaN, which a result store takes for a corrupt number."""
    out = []
    for r in syn[list(SYNTACTIC_COLUMNS)].to_dict(orient="records"):
        out.append({k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()})
    return out


def syntactic_heads(
    model: nn.Module,
    tokenizer,
    sentences: Sequence[Sentence],
    relations: Sequence[str] = ("nsubj", "obj", "amod", "advmod"),
    margin: float = 0.10,
    batch_size: int = 16,
    max_length: int = 128,
    exclude_self: bool = True,
) -> pd.DataFrame:
    """:func:`syntactic_scores` of ``model`` on UD ``sentences`` (words tokenised with
    ``is_split_into_words=True``, truncated to ``max_length`` pieces; a word cut by the truncation counts as
    truncated and relations touching it are skipped, as are words the tokenizer gives no piece). Needs a fast
    tokenizer (``word_ids``); RoBERTa-style BPE tokenizers need ``add_prefix_space=True``.

    Returns the table of :func:`syntactic_scores`.
    """
    device = next(model.parameters()).device
    argmaxes, complete = [], []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start : start + batch_size]
        words = [s.forms for s in chunk]
        full = tokenizer(words, is_split_into_words=True, truncation=False)
        enc = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length,
                        padding=True, return_tensors="pt")
        maps = attention_maps(model, {k: v.to(device) for k, v in enc.items()})
        for b, sent in enumerate(chunk):
            wids = enc.word_ids(b)
            cut, whole = Counter(w for w in wids if w is not None), Counter(w for w in full.word_ids(b) if w is not None)
            ok = {w for w in range(len(sent)) if whole[w] > 0 and cut[w] == whole[w]}
            per = torch.stack([m[b] for m in maps])  # [L, H, seq, seq]
            argmaxes.append(word_argmax(word_attention(per, wids, len(sent)), exclude_self).cpu())
            complete.append(ok)
    return syntactic_scores(argmaxes, sentences, relations, margin, complete)


# ----------------------------------------------------------------------------- rare-word heads
def token_frequencies(sequences, special_ids: Iterable[int] | None = None, exclude_first_last: bool = True) -> Counter:
    """Token id counts over ``sequences`` (a ``batching.Encoded`` or lists of ids), specials excluded (the
    first and last token of each sequence when ``exclude_first_last``, and ``special_ids``). State the corpus."""
    seqs = sequences.input_ids if hasattr(sequences, "input_ids") else sequences
    special = set(int(i) for i in (special_ids or ()))
    counts: Counter = Counter()
    for s in seqs:
        s = list(s)[1:-1] if exclude_first_last else list(s)
        counts.update(int(t) for t in s if int(t) not in special)
    return counts


def rare_counts_from_maps(maps: list[torch.Tensor], input_ids: torch.Tensor, queries: torch.Tensor,
                          token_counts: Mapping[int, int]) -> dict[str, torch.Tensor | float | int]:
    """Per head: query tokens whose argmax over the candidate keys (= ``queries``, bool ``[batch, seq]``) is a
    least-frequent candidate of the sentence (unseen ids count 0).

    Returns ``hits`` float64 ``[L, H]`` (NaN for absent heads), ``trials`` (queries counted) and
    ``chance_sum`` = sum over queries of (least-frequent candidates / candidates of its sentence).
    """
    cand = queries.bool()
    freq = torch.tensor([[float(token_counts.get(int(t), 0)) for t in row] for row in input_ids.tolist()],
                        dtype=torch.float64).masked_fill(~cand.cpu(), float("inf"))
    rare = cand.cpu() & (freq == freq.min(dim=1, keepdim=True).values)  # [b, s]
    n_cand = cand.sum(dim=1).cpu()
    chance = torch.where(n_cand > 0, rare.sum(1) / n_cand.clamp_min(1), torch.zeros(()))  # per sentence
    per_query = cand.cpu() & (n_cand > 0)[:, None]
    check_maps(maps, queries, "rare-word heads")
    hits = []
    for a in maps:
        absent = torch.isnan(a).transpose(0, 1).flatten(1).all(dim=1).cpu()
        am = a.masked_fill(~cand.to(a.device)[:, None, None, :], float("-inf")).argmax(-1).cpu()  # [b, H, s]
        hit = torch.gather(rare[:, None, :].expand(-1, a.shape[1], -1), 2, am) & per_query[:, None, :]
        h = hit.sum(dim=(0, 2)).to(torch.float64)
        h[absent] = float("nan")
        hits.append(h)
    return {"hits": torch.stack(hits), "trials": int(per_query.sum()),
            "chance_sum": float((chance[:, None] * per_query).sum())}


def rare_table(hits: torch.Tensor, trials: int, chance_sum: float, rare_share: float = RARE_SHARE) -> pd.DataFrame:
    """One row per head: ``share = hits / trials`` (queries whose argmax is a least-frequent token of the sentence),
    ``chance = chance_sum / trials`` (the share a head attending to a random candidate would reach), a one-sided
    binomial p-value of the share against that chance (``scipy.stats.binomtest``, ``greater``, at the mean chance: an
    approximation, as chance varies by sentence; descriptive, it decides nothing) and ``rare = share > rare_share``
    (default :data:`RARE_SHARE`: more than half of the queries)."""
    chance = chance_sum / trials if trials else float("nan")
    rows = []
    for (layer, head), k in np.ndenumerate(hits.numpy()):
        if np.isnan(k) or trials == 0:
            s, p = float("nan"), float("nan")
        else:
            s = k / trials
            p = float(stats.binomtest(int(round(k)), trials, min(max(chance, 0.0), 1.0), alternative="greater").pvalue)
        rows.append({"layer": layer, "head": head, "share": s, "chance": chance, "n": trials, "p_value": p,
                     "rare": bool(s > rare_share)})
    return pd.DataFrame(rows)


def rare_word_heads(model: nn.Module, batches: Iterable[Batch], token_counts: Mapping[int, int],
                    special_ids: Iterable[int] | None = None, rare_share: float = RARE_SHARE) -> pd.DataFrame:
    """:func:`rare_table` of ``model`` pooled over ``batches`` (streaming). Queries and candidate keys are
    the real non-special tokens (first/last real token and ``special_ids`` excluded)."""
    hits, trials, chance_sum = None, 0, 0.0
    for batch in batches:
        q = query_mask(batch["attention_mask"], batch["input_ids"], True, special_ids)
        r = rare_counts_from_maps(attention_maps(model, batch), batch["input_ids"], q, token_counts)
        hits = r["hits"] if hits is None else hits + r["hits"]
        trials += r["trials"]
        chance_sum += r["chance_sum"]
    return rare_table(hits, trials, chance_sum, rare_share)
