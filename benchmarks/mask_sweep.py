#!/usr/bin/env python
"""Mask sweep: the plain approach (one gated forward per mask) against the shared evaluator.

The layer-strategy sweep of Study 2's evaluation-only regime: MiniLM (``"minilm"``, 2 labels, the fresh
classification head of ``seed=0``: the timing does not depend on fine-tuning), an SST-2 dev subset
(``data.subset(dev, n, seed=0)``, default 300 sentences), eval batch 32, and the masks

    the unpruned mask + every strategy of ``strategies.STRATEGIES`` x budgets 25 / 50 / 75 % of the heads
    (``strategy_mask(strategy, 6, 12, n_prune, seed=0)``; 22 masks for 7 strategies, ablation "zero").

- **plain**: ``mask_sweep.plain_predict_masks`` = ``training.predict`` under ``gates.head_gates``, once per
  mask (what a study loop does without sharing);
- **shared**: ``mask_sweep.predict_masks`` (prefix tree over the masks' rows, pruned heads not computed,
  last layer on token 0 only, per-token work on real tokens only; see the module docstring).

After an untimed warm-up (both variants on 32 sentences, through the logits functions, which also gives
the largest logit difference between the two), the variants alternate (the first one swaps every repeat);
the report gives the best and median seconds, the ratio plain / shared, and checks that the predictions
of every timed run are identical (exit status 1 if not).

It also counts the matrix-product FLOPs each variant performs on these batch shapes (weights: q/k/v,
output projection, feed-forward; attention: scores and contexts), so the FLOP ratio can be compared with
the time ratio. ``--breakdown`` times the shared evaluator with each of its switches off
(``mask_sweep.SweepOptions``), to show what each piece buys.

Usage::

    HEADPRUNE_DATA_DIR=/path/to/data python benchmarks/mask_sweep.py [--n 300] [--batch-size 32]
        [--repeats 3] [--threads T] [--breakdown] [--out results.json]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
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

REPO = Path(__file__).resolve().parents[1]
MODEL = "minilm"
TASK = "SST-2"
SEED = 0
BUDGETS = (0.25, 0.50, 0.75)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- machine noise
def cpu_seconds() -> tuple[float, float] | None:
    """(busy CPU-seconds of the whole machine, CPU-seconds of this process) now; None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    busy = (sum(fields[:8]) - idle) / hz
    t = os.times()
    return busy, t.user + t.system


def other_load(start, end, wall: float) -> float | None:
    """Average number of cores kept busy by OTHER processes between two ``cpu_seconds()`` readings."""
    if start is None or end is None or wall <= 0:
        return None
    return max(0.0, (end[0] - start[0]) - (end[1] - start[1])) / wall


# ----------------------------------------------------------------------------- the sweep
def sweep_masks(n_layers: int, n_heads: int) -> dict:
    from headprune_utils.model.strategies import STRATEGIES, strategy_mask

    masks = {"unpruned": torch.ones(n_layers, n_heads)}
    total = n_layers * n_heads
    for strategy in STRATEGIES:
        for frac in BUDGETS:
            masks[f"{strategy}@{int(frac * 100)}%"] = strategy_mask(strategy, n_layers, n_heads,
                                                                   int(round(frac * total)), SEED)
    return masks


def matmul_flops(masks: dict, batches: list[tuple[int, int, int]], cfg) -> dict:
    """Matrix-product FLOPs of the plain and the shared way on ``batches`` of (batch, seq, real tokens).

    Plain: every head of every layer for every mask, on every position (padding included). Shared: the
    prefix tree's nodes; per node the union of its children's kept heads for q/k/v and attention; per
    child its kept heads for the output projection, and the feed-forward; per-token work on the real
    tokens only; the last layer's query, output projection and feed-forward on token 0 only. Attention
    (scores and contexts) is padded in both. The pooler and classifier (the same for both, tiny) are left
    out.
    """
    h, inter, nh = cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads
    d = h // nh
    n_layers = cfg.num_hidden_layers
    plain = shared = 0.0
    tree: list[dict[tuple, set]] = [dict() for _ in range(n_layers)]  # depth -> {prefix: next rows}
    for m in masks.values():
        rows = [tuple(m[l].tolist()) for l in range(n_layers)]
        for l in range(n_layers):
            tree[l].setdefault(tuple(rows[:l]), set()).add(rows[l])
    for b, s, t in batches:
        plain += len(masks) * n_layers * (2 * b * s * (4 * h * h + 2 * h * inter) + 4 * b * nh * s * s * d)
        for l in range(n_layers):
            last = l == n_layers - 1
            rq, sq = (b, 1) if last else (t, s)  # rows of per-token work; query length in attention
            for rows in tree[l].values():
                union = sum(1 for i in range(nh) if any(r[i] > 0 for r in rows))
                shared += 2 * rq * h * union * d + 2 * t * h * 2 * union * d + 4 * b * union * sq * s * d
                for r in rows:
                    kept = sum(1 for g in r if g > 0)
                    shared += 2 * rq * kept * d * h + 2 * rq * 2 * h * inter
    return {"plain": plain, "shared": shared}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300, help="SST-2 dev sentences (default 300)")
    parser.add_argument("--batch-size", type=int, default=32, help="eval batch size (default 32)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each variant (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    parser.add_argument("--data-dir", default=None,
                        help="data root (default $HEADPRUNE_DATA_DIR, else ../shared/data beside the repo)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time the shared evaluator with each switch off (one run each)")
    parser.add_argument("--out", default=None, help="write the figures as JSON here (default: print only)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.n < 1 or args.batch_size < 1:
        parser.error("--n, --batch-size and --repeats must be positive")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()

    import transformers
    from headprune_utils.tasks import data as hp_data
    from headprune_utils.model.architecture import head_shape
    from headprune_utils.tasks.batching import encode, eval_batches
    from headprune_utils.measure.mask_sweep import (
        SweepOptions, logits_masks, plain_logits_masks, plain_predict_masks, predict_masks, sweep_plan,
    )
    from headprune_utils.model.models import load_classifier, load_tokenizer

    data_dir = args.data_dir or os.environ.get("HEADPRUNE_DATA_DIR") or str(REPO.parent / "shared" / "data")
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    log(f"[setup] torch {torch.__version__}, transformers {transformers.__version__}, {threads} threads, "
        f"load average {os.getloadavg()[0]:.2f}, data {data_dir}")
    dev = hp_data.subset(hp_data.load_task(TASK, "dev", data_dir), args.n, seed=SEED)
    tokenizer = load_tokenizer(MODEL)
    enc = encode(tokenizer, dev)
    model = load_classifier(MODEL, 2, device="cpu", seed=SEED)
    n_layers, n_heads = head_shape(model)
    masks = sweep_masks(n_layers, n_heads)
    plan = sweep_plan(model, masks)
    lengths = enc.lengths
    shapes = [(len(b), int(lengths[b].max()), int(lengths[b].sum())) for b in eval_batches(lengths, args.batch_size)]
    flops = matmul_flops(masks, shapes, model.config)
    tokens_real, tokens_padded = int(lengths.sum()), sum(b * s for b, s, _ in shapes)
    log(f"[setup] {len(enc)} sentences, {len(shapes)} batches, {len(masks)} masks, "
        f"tree nodes {plan['tree_nodes']} / {plan['layer_evals_plain']} layer evaluations")

    # warm-up (untimed): both ways on a small subset, with logits to report the largest difference
    from headprune_utils.tasks.batching import Encoded

    n_warm = min(len(enc), 32)
    warm = Encoded(enc.input_ids[:n_warm], None if enc.token_type_ids is None else enc.token_type_ids[:n_warm],
                   enc.labels[:n_warm], enc.pad_id)
    log(f"[warm-up] {n_warm} sentences, both ways ...")
    lp = plain_logits_masks(model, warm, masks, args.batch_size)
    ls = logits_masks(model, warm, masks, args.batch_size)
    max_logit_diff = max(float((lp[k] - ls[k]).abs().max()) for k in masks)
    min_margin = min(float((lp[k][:, 0] - lp[k][:, 1]).abs().min()) for k in masks)

    runs: dict[str, list[float]] = {"plain": [], "shared": []}
    identical = True
    reference = None
    for r in range(args.repeats):
        for which in (("plain", "shared") if r % 2 == 0 else ("shared", "plain")):
            gc.collect()
            t0 = time.perf_counter()
            if which == "plain":
                preds = plain_predict_masks(model, enc, masks, args.batch_size)
            else:
                preds = predict_masks(model, enc, masks, args.batch_size)
            seconds = time.perf_counter() - t0
            runs[which].append(seconds)
            if reference is None:
                reference = preds
            same = all(np.array_equal(preds[k], reference[k]) for k in masks)
            identical &= same
            log(f"[run {r + 1}/{args.repeats}] {which:6s} {seconds:7.2f} s  predictions "
                f"{'identical' if same else 'DIFFER'}")

    breakdown = {}
    if args.breakdown:
        variants = {
            "shared (all on)": SweepOptions(),
            "no unpadding": SweepOptions(unpad=False),
            "no token-0-only last layer": SweepOptions(cls_only=False),
            "no attention shared by siblings": SweepOptions(share_attention=False),
            "no head slicing (gated heads)": SweepOptions(slice_heads=False),
            "prefix sharing only": SweepOptions(slice_heads=False, cls_only=False, share_attention=False,
                                                unpad=False),
        }
        for name, opt in variants.items():
            gc.collect()
            t0 = time.perf_counter()
            preds = predict_masks(model, enc, masks, args.batch_size, options=opt)
            breakdown[name] = time.perf_counter() - t0
            same = all(np.array_equal(preds[k], reference[k]) for k in masks)
            identical &= same
            log(f"[breakdown] {name:32s} {breakdown[name]:7.2f} s  predictions "
                f"{'identical' if same else 'DIFFER'}")

    wall = time.perf_counter() - wall0
    others = other_load(cpu0, cpu_seconds(), wall)
    stats = {k: {"best": min(v), "median": statistics.median(v), "seconds": v} for k, v in runs.items()}
    ratio_best = stats["plain"]["best"] / stats["shared"]["best"]
    ratio_median = stats["plain"]["median"] / stats["shared"]["median"]
    flop_ratio = flops["plain"] / flops["shared"]
    result = {
        "model": MODEL, "task": TASK, "n": len(enc), "batch_size": args.batch_size, "repeats": args.repeats,
        "threads": threads, "torch": torch.__version__, "transformers": transformers.__version__,
        "python": platform.python_version(), "cpu_count": os.cpu_count(), "other_processes_busy_cores": others,
        "masks": list(masks), "plan": plan, "tokens_real": tokens_real, "tokens_padded": tokens_padded,
        "matmul_gflop": {k: v / 1e9 for k, v in flops.items()}, "flop_ratio": flop_ratio,
        "plain": stats["plain"], "shared": stats["shared"],
        "ratio_plain_over_shared_best": ratio_best, "ratio_plain_over_shared_median": ratio_median,
        "predictions_identical": identical, "warmup_max_abs_logit_diff": max_logit_diff,
        "warmup_min_logit_margin": min_margin, "breakdown_seconds": breakdown,
    }

    lines = [
        "=" * 78,
        f"Mask sweep: {MODEL} on {len(enc)} {TASK} dev sentences, batch {args.batch_size}, "
        f"{len(masks)} masks (unpruned + {len(masks) - 1} strategy x budget), ablation zero",
        f"torch {torch.__version__} | transformers {transformers.__version__} | {threads} torch threads "
        f"| {os.cpu_count()} CPUs",
        f"batches: {len(shapes)}, tokens {tokens_real} real / {tokens_padded} computed "
        f"({1 - tokens_real / tokens_padded:.1%} padding)",
        f"prefix tree: {plan['tree_nodes']} nodes for {plan['layer_evals_plain']} layer evaluations "
        f"({plan['distinct_masks']} distinct masks); heads computed: {plan['heads_union']} (union per node) "
        f"vs {plan['heads_plain']} plain",
        f"matmul work: plain {flops['plain'] / 1e9:.1f} GFLOP, shared {flops['shared'] / 1e9:.1f} GFLOP "
        f"(FLOP ratio {flop_ratio:.2f})",
        "other processes kept "
        + (f"{others:.2f} cores busy on average during this run" if others is not None else "? cores busy"),
        "-" * 78,
        f"{'':22s}{'plain':>14s}{'shared':>14s}",
        f"{'seconds (best)':22s}{stats['plain']['best']:>14.2f}{stats['shared']['best']:>14.2f}",
        f"{'seconds (median)':22s}{stats['plain']['median']:>14.2f}{stats['shared']['median']:>14.2f}",
        f"{'matmul GFLOP/s (best)':22s}{flops['plain'] / 1e9 / stats['plain']['best']:>14.1f}"
        f"{flops['shared'] / 1e9 / stats['shared']['best']:>14.1f}",
        "-" * 78,
        f"ratio plain / shared: best {ratio_best:.2f}, median {ratio_median:.2f} (FLOP ratio {flop_ratio:.2f})",
        f"all runs (s): plain {', '.join(f'{t:.2f}' for t in runs['plain'])}; "
        f"shared {', '.join(f'{t:.2f}' for t in runs['shared'])}",
        f"predictions of every run identical: {'yes' if identical else 'NO'}; warm-up ({n_warm} sentences): "
        f"max |logit diff| {max_logit_diff:.2e}, smallest logit margin {min_margin:.2e}",
    ]
    if breakdown:
        lines.append("-" * 78)
        lines.append("shared evaluator with one switch off (one run each, seconds; ratio = plain best / this):")
        for name, sec in breakdown.items():
            lines.append(f"  {name:34s}{sec:>8.2f}   ratio {stats['plain']['best'] / sec:.2f}")
    if others is not None and others > max(0.0, (os.cpu_count() or 1) - threads) + 0.25:
        lines.append(f"WARNING: other processes competed for the CPUs ({others:.2f} cores busy on average): "
                     "absolute figures are depressed and noisy; compare the ratio, and rerun on a quiet machine.")
    lines.append("=" * 78)
    print("\n".join(lines), flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.out}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
