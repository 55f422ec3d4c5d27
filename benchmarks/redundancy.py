#!/usr/bin/env python
"""Redundancy matrices: the vectorised ``redundancy.sentence_distances`` against a plain per-pair loop.

MiniLM (``load_classifier("minilm", 2, seed=0)``; attention maps do not depend on the classification head),
an SST-2 dev subset (``data.subset(dev, n, seed=0)``, default 64 sentences), eval batches of 32 (length-sorted,
``batching.eval_batches``). The attention maps are computed once, before and outside both timings.

- **vectorised**: ``sentence_distances(maps, attention_mask, metric)`` per batch (all head pairs at once);
- **loop**: what public code does (Clark et al.'s ``head_distances.py``): for each sentence, on its unpadded
  ``n x n`` maps in numpy float64, ``for i in heads: for j in heads: distance(map_i, map_j)`` with numpy /
  scipy per pair (``rel_entr`` for js, ``scipy.spatial.procrustes``, ``pdist`` for dcor). It is slow, so it
  runs on the first ``--loop-sentences`` sentences of the subset (default 8) and its time is extrapolated
  per sentence.

Per metric: seconds per sentence of each, their ratio, the same ratio with the vectorised path run on the
loop's own sentences (the subset's lengths differ), and the largest |difference| between the two ways'
per-sentence matrices on the loop's sentences (expected ~1e-12).

Usage::

    HEADPRUNE_DATA_DIR=/path/to/data python benchmarks/redundancy.py [--sentences 64] [--loop-sentences 8]
        [--metrics js,dcor] [--threads 1] [--out results.json]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy.spatial import procrustes  # noqa: E402
from scipy.spatial.distance import pdist, squareform  # noqa: E402
from scipy.special import rel_entr  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODEL = "minilm"
TASK = "SST-2"
SEED = 0
TOL = 1e-12  # redundancy.ZERO_TOL


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def busy_seconds() -> tuple[float, float] | None:
    """(busy CPU-seconds of the machine, CPU-seconds of this process); None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    t = os.times()
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK"), t.user + t.system


# ----------------------------------------------------------------------------- per-pair references (numpy)
def js_pair(p, q):
    m = (p + q) / 2
    return float(np.mean((rel_entr(p, m).sum(1) + rel_entr(q, m).sum(1)) / 2)) / math.log(2)


def hellinger_pair(p, q):
    return float(np.mean(np.sqrt(0.5 * ((np.sqrt(p) - np.sqrt(q)) ** 2).sum(1))))


def cosine_pair(p, q):
    return float(np.mean(1 - (p * q).sum(1) / (np.linalg.norm(p, axis=1) * np.linalg.norm(q, axis=1))))


def pearson_pair(p, q):
    pc, qc = p - p.mean(1, keepdims=True), q - q.mean(1, keepdims=True)
    npc, nqc = np.linalg.norm(pc, axis=1), np.linalg.norm(qc, axis=1)
    flat = (npc <= TOL) | (nqc <= TOL)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (pc * qc).sum(1) / (npc * nqc)
    r = np.where(flat, (np.abs(p - q).max(1) <= TOL).astype(float), r)
    return float(np.mean((1 - r) / 2))


def dcor_pair(x, y):
    def centred(z):
        a = squareform(pdist(z))
        return a - a.mean(0, keepdims=True) - a.mean(1, keepdims=True) + a.mean()

    a, b = centred(x), centred(y)
    vx, vy = (a * a).mean(), (b * b).mean()
    if math.sqrt(vx) <= TOL or math.sqrt(vy) <= TOL:
        return 0.0 if np.abs(x - y).max() <= TOL else 1.0
    return 1 - math.sqrt(min(1.0, max(0.0, (a * b).mean() / math.sqrt(vx * vy))))


def procrustes_pair(x, y):
    try:
        return float(procrustes(x, y)[2])
    except ValueError:  # a map whose rows are all equal
        return 0.0 if np.abs(x - y).max() <= TOL else 1.0


PAIR = {"js": js_pair, "hellinger": hellinger_pair, "cosine": cosine_pair, "pearson": pearson_pair,
        "dcor": dcor_pair, "procrustes": procrustes_pair}


def loop_distances(maps: np.ndarray, metric: str) -> np.ndarray:
    """maps [N, n, n] of one unpadded sentence -> [N, N], every ordered pair, as public code does."""
    f, n_heads = PAIR[metric], maps.shape[0]
    out = np.zeros((n_heads, n_heads))
    for i in range(n_heads):
        for j in range(n_heads):
            out[i, j] = f(maps[i], maps[j])
    np.fill_diagonal(out, 0.0)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=64, help="SST-2 dev sentences, vectorised (default 64)")
    parser.add_argument("--loop-sentences", type=int, default=8,
                        help="of these, how many the per-pair loop runs on (default 8)")
    parser.add_argument("--metrics", default=None, help="comma-separated (default: all of redundancy.METRICS)")
    parser.add_argument("--batch-size", type=int, default=32, help="eval batch size (default 32)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: the loop is single-threaded too)")
    parser.add_argument("--data-dir", default=None,
                        help="data root (default $HEADPRUNE_DATA_DIR, else ../shared/data beside the repo)")
    parser.add_argument("--out", default=None, help="also write the figures as JSON here")
    args = parser.parse_args(argv)

    from headprune_utils.tasks import data as hp_data
    from headprune_utils.model.attention import attention_maps
    from headprune_utils.tasks.batching import collate, encode, eval_batches, iterate
    from headprune_utils.model.models import load_classifier, load_tokenizer
    from headprune_utils.measure.redundancy import METRICS, sentence_distances, stack_heads

    metrics = tuple(args.metrics.split(",")) if args.metrics else METRICS
    if unknown := [m for m in metrics if m not in METRICS]:
        parser.error(f"unknown metrics {unknown}; allowed: {', '.join(METRICS)}")
    if not 1 <= args.loop_sentences <= args.sentences or args.batch_size < 1:
        parser.error("need 1 <= --loop-sentences <= --sentences and a positive --batch-size")
    torch.set_num_threads(args.threads)

    data_dir = args.data_dir or os.environ.get("HEADPRUNE_DATA_DIR") or str(REPO.parent / "shared" / "data")
    dev = hp_data.subset(hp_data.load_task(TASK, "dev", data_dir), args.sentences, seed=SEED)
    enc = encode(load_tokenizer(MODEL), dev)
    model = load_classifier(MODEL, 2, device="cpu", seed=SEED)
    lengths = enc.lengths
    batches = []  # (sentence ids, stacked maps [b, N, seq, seq], attention_mask), computed once
    for index, batch in iterate(enc, eval_batches(lengths, args.batch_size), "cpu"):
        batches.append((index, stack_heads(attention_maps(model, batch)), batch["attention_mask"]))
    n_heads = batches[0][1].shape[1]
    loop_ids = list(range(args.loop_sentences))
    loop_maps = {}
    for index, maps, mask in batches:
        for row, sid in enumerate(index):
            if sid in loop_ids:
                n = int(mask[row].sum())
                loop_maps[sid] = maps[row, :, :n, :n].double().numpy()
    loop_batch = collate(enc, np.array(loop_ids))
    loop_stacked = stack_heads(attention_maps(model, loop_batch))
    log(f"[setup] {len(enc)} sentences ({len(batches)} batches, mean length {lengths.mean():.1f}); loop on "
        f"{len(loop_ids)} (mean length {lengths[loop_ids].mean():.1f}); N = {n_heads}; torch threads {args.threads}")

    cpu0, wall0 = busy_seconds(), time.perf_counter()
    rows = []
    for metric in metrics:
        sentence_distances(batches[-1][1][:1], batches[-1][2][:1], metric)  # warm-up
        per_sentence = {}
        t0 = time.perf_counter()
        for index, maps, mask in batches:
            d = sentence_distances(maps, mask, metric)
            per_sentence.update(zip(index.tolist(), d))
        vec = (time.perf_counter() - t0) / len(enc)
        t0 = time.perf_counter()
        same = sentence_distances(loop_stacked, loop_batch["attention_mask"], metric)
        vec_same = (time.perf_counter() - t0) / len(loop_ids)
        t0 = time.perf_counter()
        ref = {sid: loop_distances(loop_maps[sid], metric) for sid in loop_ids}
        loop = (time.perf_counter() - t0) / len(loop_ids)
        diff = max(float(np.abs(per_sentence[sid].numpy() - ref[sid]).max()) for sid in loop_ids)
        diff_same = max(float(np.abs(same[k].numpy() - ref[sid]).max()) for k, sid in enumerate(loop_ids))
        rows.append(dict(metric=metric, vectorised_s_per_sentence=vec, loop_s_per_sentence=loop,
                         ratio=loop / vec, vectorised_same_s_per_sentence=vec_same, ratio_same=loop / vec_same,
                         max_abs_diff=max(diff, diff_same)))
        log(f"[{metric}] vectorised {vec * 1e3:.1f} ms/sentence, loop {loop * 1e3:.0f} ms/sentence, "
            f"ratio {loop / vec:.1f}, max |diff| {diff:.1e}")
    wall = time.perf_counter() - wall0
    cpu1 = busy_seconds()
    others = None if cpu0 is None or cpu1 is None else max(0.0, (cpu1[0] - cpu0[0]) - (cpu1[1] - cpu0[1])) / wall

    lines = [
        "=" * 96,
        f"Redundancy matrices: {MODEL} (N = {n_heads} heads), {len(enc)} {TASK} dev sentences in batches of "
        f"{args.batch_size} (mean length {lengths.mean():.1f} tokens); torch {torch.__version__}, "
        f"{args.threads} torch thread(s)",
        f"loop = numpy/scipy per ordered head pair per sentence ({n_heads}x{n_heads} pairs), run on the first "
        f"{len(loop_ids)} sentences (mean length {lengths[loop_ids].mean():.1f}) and extrapolated per sentence",
        "other processes kept " + (f"{others:.2f} cores busy on average" if others is not None else "? cores busy"),
        "-" * 96,
        f"{'metric':12s}{'vectorised':>14s}{'loop':>14s}{'ratio':>9s}{f'vec, same {len(loop_ids)}':>14s}{'ratio':>9s}"
        f"{'max |diff|':>13s}",
        f"{'':12s}{'ms/sentence':>14s}{'ms/sentence':>14s}{'':>9s}{'ms/sentence':>14s}{'(same)':>9s}",
    ]
    for r in rows:
        lines.append(f"{r['metric']:12s}{r['vectorised_s_per_sentence'] * 1e3:>14.2f}"
                     f"{r['loop_s_per_sentence'] * 1e3:>14.1f}{r['ratio']:>9.1f}"
                     f"{r['vectorised_same_s_per_sentence'] * 1e3:>14.2f}{r['ratio_same']:>9.1f}"
                     f"{r['max_abs_diff']:>13.1e}")
    lines.append("-" * 96)
    lines.append(f"ratio = loop / vectorised (per sentence); 'same {len(loop_ids)}' = the vectorised path on the "
                 "loop's own sentences (one batch); max |diff| over per-sentence matrices")
    if others is not None and others > 0.25:
        lines.append(f"WARNING: other processes competed for the CPUs ({others:.2f} cores busy): absolute times "
                     "are noisy; compare the ratios.")
    lines.append("=" * 96)
    print("\n".join(lines), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"model": MODEL, "sentences": len(enc), "loop_sentences": len(loop_ids),
                       "threads": args.threads, "other_processes_busy_cores": others, "rows": rows}, f, indent=2)
    return 0 if all(r["max_abs_diff"] < 1e-9 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
