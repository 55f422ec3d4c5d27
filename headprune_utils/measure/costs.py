"""Estimated cost of result cells in floating-point operations, for ``run --plan`` and executors' resources.

The model: a Transformer layer's forward pass costs, per token, ``2 * (4 d^2 * a + 2 d f) + 4 s d * a``
multiply-adds turned into FLOPs (``d`` hidden size, ``f`` FFN size, ``s`` the sequence length the token attends
over, ``a`` the share of heads kept: pruned heads' projections are removed). In general (the family adapter's
``cost_dims``): ``2 * (2 d H h a + 2 d K h a + m d f) + 4 s H h a`` with ``H`` query heads and ``K`` key/value heads
of ``h`` dimensions (grouped-query attention: ``K < H``) and ``m`` feed-forward matrices (3 for a gated MLP), which is
the first formula when ``H h = d``, ``K = H`` and ``m = 2``; a training step costs three
forward passes (forward, and backward at twice the forward). Embedding lookups, layer norms, softmax and the
classifier are left out (a few per cent). Token counts come from the data: rows of the local split (or GLUE's
published split sizes when the data is not here) times the split's mean length in word pieces, estimated as
1.3 word pieces per whitespace word plus the special tokens ([CLS], [SEP]) — measured on the local TSVs when
present. These are planning numbers (to size a cluster), not measurements; the benchmarks measure speed.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from headprune_utils.model import models
from headprune_utils.model.architecture import family_of
from headprune_utils.tasks import data

# Rows per split as published by GLUE (used only when the local TSV is absent). dev = dev_matched for MNLI.
GLUE_ROWS = {
    "CoLA": (8551, 1043), "SST-2": (67349, 872), "MRPC": (3668, 408), "STS-B": (5749, 1500),
    "QQP": (363846, 40430), "MNLI": (392702, 9815), "QNLI": (104743, 5463), "RTE": (2490, 277), "WNLI": (635, 71),
}
# Mean whitespace words per example (both texts) when no local data is present: rounded GLUE figures.
GLUE_WORDS = {"CoLA": 9, "SST-2": 10, "MRPC": 43, "STS-B": 20, "QQP": 22, "MNLI": 31, "QNLI": 37, "RTE": 52, "WNLI": 31}
PIECES_PER_WORD = 1.3


@dataclass(frozen=True)
class Shape:
    """What the FLOP count needs of an encoder (or one stack of an encoder-decoder)."""

    n_layers: int
    n_heads: int
    d_model: int
    d_ffn: int
    n_kv_heads: int | None = None  # None: as many as query heads
    head_dim: int | None = None  # None: d_model / n_heads
    ffn_matrices: int = 2

    @classmethod
    def of(cls, model: str) -> "Shape":
        return _shape_of(model, models._PLANNING)

    @classmethod
    def _load(cls, model: str) -> "Shape":
        """The shape of ``model`` ("minilm", a folder, a hub id: its config; offline planning of a known hub
        model: ``models.KNOWN_CONFIGS``)."""
        c = models.load_config(model)
        dims = family_of(c).cost_dims(c)
        return cls(dims.n_layers, dims.n_heads, dims.d_model, dims.d_ffn, dims.n_kv_heads, dims.head_dim,
                   dims.ffn_matrices)


@functools.lru_cache(maxsize=16)
def _shape_of(model: str, planning: bool) -> Shape:
    return Shape._load(model)


def layer_forward_flops(shape: Shape, tokens: float, seq_len: float, kept_share: float = 1.0,
                        cross_len: float | None = None, kv_share: float | None = None) -> float:
    """FLOPs of ONE layer's forward pass over ``tokens`` tokens in sequences of ``seq_len`` (a decoder layer
    with encoder-decoder attention over ``cross_len`` source tokens adds that block). ``kv_share``: the share of
    key/value heads kept, when it differs from ``kept_share`` (grouped-query attention keeps a key/value head while
    one query head of its group is kept); None: ``kept_share``."""
    d, f, a = shape.d_model, shape.d_ffn, kept_share
    q_width = d if shape.head_dim is None else shape.n_heads * shape.head_dim  # query heads x head dim
    kv_width = q_width if shape.n_kv_heads is None else shape.n_kv_heads * (shape.head_dim or d // shape.n_heads)
    # query and output projections, key and value projections (by default at the share of query heads kept), the
    # feed-forward block, then scores and weighted values
    a_kv = a if kv_share is None else kv_share
    per_token = 2 * (2 * d * q_width * a + 2 * d * kv_width * a_kv + shape.ffn_matrices * d * f) + 4 * seq_len * q_width * a
    if cross_len is not None:
        per_token += 2 * (4 * d * d * a) + 4 * cross_len * d * a
    return tokens * per_token


def forward_flops(shape: Shape, tokens: float, seq_len: float, kept_share: float = 1.0) -> float:
    """FLOPs of an encoder's forward pass (all layers)."""
    return shape.n_layers * layer_forward_flops(shape, tokens, seq_len, kept_share)


def train_flops(shape: Shape, tokens: float, seq_len: float, kept_share: float = 1.0) -> float:
    """FLOPs of training on ``tokens`` tokens (forward + backward = 3 forwards)."""
    return 3.0 * forward_flops(shape, tokens, seq_len, kept_share)


@functools.lru_cache(maxsize=64)
def _local_stats(path: str) -> tuple[int, float]:
    """(rows, mean words per row over the text columns) of a local GLUE TSV (a cheap, tab-split read)."""
    lines = [ln for ln in Path(path).read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    rows = lines[1:] if not path.endswith(("CoLA/train.tsv", "CoLA/dev.tsv")) else lines
    if not rows:
        return 0, 0.0
    sample = rows[:2000]
    words = sum(len(ln.split()) for ln in sample) / len(sample)  # every column: a slight over-count
    return len(rows), words


def split_tokens(task: str, split: str, size: int | None, data_dir=None) -> tuple[float, float]:
    """(examples, mean word pieces per example) of ``size`` examples (None: all) of a GLUE split."""
    name = data.get_task(task).name
    root = data.resolve_data_dir(data_dir)
    rows, words = None, None
    if root is not None:
        path = data._local_path(root, data.get_task(name), split)
        if path.is_file():
            rows, words = _local_stats(str(path))
    if rows is None:
        rows = GLUE_ROWS.get(name, (10000, 1000))[0 if split == "train" else 1]
        words = GLUE_WORDS.get(name, 30)
    n = rows if size is None else min(size, rows)
    pair = data.get_task(name).hub_text_b is not None
    return float(n), words * PIECES_PER_WORD + (3 if pair else 2)


def fmt_flops(flops: float) -> str:
    for unit, scale in (("EFLOP", 1e18), ("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.3g} FLOP"
