#!/usr/bin/env python
"""Does removing heads make the model faster? Latency and throughput of physically pruned encoders.

The question users ask (transformers issues #20018 and #19926: masking heads gave no speed-up; Michel et al.
2019: +17.5% at 50% of heads, batch 16): here the heads are REMOVED from the weights (``pruning.prune_heads``:
query/key/value rows and output-projection columns sliced), not masked. Models:

- ``minilm``: the embedded all-MiniLM-L6-v2 (6 x 12 heads, hidden 384);
- ``bert-base``: a bert-base-uncased-shaped BERT (12 x 12 heads, hidden 768) built from its config with random
  weights (the speed does not depend on the weights; no download);
- ``llama-gqa``: a Llama-shaped causal LM body (``LlamaModel``: 8 layers x 16 query heads on 4 key/value heads,
  head dim 64, hidden 1024, gated MLP 2816), random weights. Query heads are pruned; a key/value head goes when no
  kept query head of its group reads it (random masks keep most groups alive, so the key/value projections shrink
  less than the query and output ones: the FLOP ideal counts the key/value heads actually kept).

For each model, share of heads pruned (0 / 25 / 50 / 75 %, random heads of seed 0, and at 50 % also whole top
layers: ``--layers``), batch size (1, 32) and sequence length (32, 128): the median forward latency of
``--repeats`` timed runs after ``--warmup`` untimed ones (``torch.inference_mode``, fixed random token ids,
full attention mask), the throughput (sequences per second), the speed-up over the unpruned model, and the
FLOP-ideal speed-up: forward FLOPs of the unpruned model over those of the pruned one
(``headprune_utils.measure.costs``: projections and attention of the kept heads, the feed-forward unchanged), so
"% of ideal" says how much of the arithmetic saving turns into time. Embedding and pooler costs are in the
measured time, not in the FLOP count (a few per cent at these lengths).

One run prints the whole table (and ``--out`` writes it as JSON with the machine and versions). ``--device cuda``
times the same on a GPU (synchronised around each timed call), under bf16 autocast unless ``--precision fp32``.

Usage::

    python benchmarks/pruned_latency.py [--models minilm bert-base] [--threads T] [--repeats 7] [--out f.json]
"""
from __future__ import annotations

import argparse
import copy
import os
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from headprune_utils.measure import costs  # noqa: E402
from headprune_utils.model import architecture, masks, models  # noqa: E402
from headprune_utils.model.pruning import prune_heads  # noqa: E402
from headprune_utils.store.results import cpu_description, package_versions  # noqa: E402

DEVICE = {"device": "cpu", "precision": "fp32"}  # set by main()

BERT_BASE = dict(num_hidden_layers=12, num_attention_heads=12, hidden_size=768, intermediate_size=3072,
                 vocab_size=30522)


LLAMA_GQA = dict(num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4, hidden_size=1024,
                 intermediate_size=2816, vocab_size=32000, max_position_embeddings=512)


def build(name: str) -> torch.nn.Module:
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaModel

    if name == "minilm":
        return _minilm()
    if name == "llama-gqa":
        torch.manual_seed(0)
        return LlamaModel(LlamaConfig(**LLAMA_GQA, attn_implementation="sdpa")).eval()
    torch.manual_seed(0)
    return BertModel(BertConfig(**BERT_BASE, attn_implementation="sdpa")).eval()


def _minilm() -> torch.nn.Module:
    from transformers import AutoModel

    return AutoModel.from_pretrained(models.resolve_model_source("minilm"), attn_implementation="sdpa").eval()


def layer_mask(n_layers: int, n_heads: int, n_prune: int) -> torch.Tensor:
    """Whole top layers' heads pruned (``n_prune`` a multiple of ``n_heads``)."""
    mask = torch.ones(n_layers, n_heads)
    mask[n_layers - n_prune // n_heads:] = 0
    return mask


def _sync() -> None:
    if DEVICE["device"] == "cuda":
        torch.cuda.synchronize()


def _autocast():
    import contextlib

    if DEVICE["precision"] == "bf16":
        return torch.autocast(DEVICE["device"], dtype=torch.bfloat16)
    return contextlib.nullcontext()


def time_forward(model, batch: int, seq: int, warmup: int, repeats: int, vocab: int) -> float:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, vocab - 1, (batch, seq), generator=g).to(DEVICE["device"])
    am = torch.ones_like(ids)
    with torch.inference_mode(), _autocast():
        for _ in range(warmup):
            model(input_ids=ids, attention_mask=am)
        times = []
        for _ in range(repeats):
            _sync()
            t0 = time.perf_counter()
            model(input_ids=ids, attention_mask=am)
            _sync()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_train_step(model, batch: int, seq: int, warmup: int, repeats: int, vocab: int) -> float:
    """Median seconds of one fine-tuning step (forward in train mode with dropout, a 2-way classifier on the first
    token, cross-entropy, backward, fused AdamW step, zeroed gradients) with the word embeddings frozen, as the
    studies fine-tune (``freeze_word_embeddings``)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, vocab - 1, (batch, seq), generator=g).to(DEVICE["device"])
    am = torch.ones_like(ids)
    labels = torch.randint(0, 2, (batch,), generator=g).to(DEVICE["device"])
    model = copy.deepcopy(model).train()
    model.get_input_embeddings().weight.requires_grad_(False)
    head = torch.nn.Linear(model.config.hidden_size, 2).to(DEVICE["device"])
    params = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-5, fused=True)
    times = []
    for i in range(warmup + repeats):
        _sync()
        t0 = time.perf_counter()
        with _autocast():
            logits = head(model(input_ids=ids, attention_mask=am).last_hidden_state[:, 0])
        torch.nn.functional.cross_entropy(logits.float(), labels).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ideal_speedup(shape: costs.Shape, mask: torch.Tensor, seq: int, kv_of: list[int] | None = None) -> float:
    """Forward FLOPs unpruned / pruned: each layer's attention part scales with its kept heads (``kv_of``: the
    key/value head each query head reads; a key/value head counts while one kept query head reads it)."""
    full = pruned = 0.0
    for layer in range(shape.n_layers):
        kept = float(mask[layer].mean())
        kv_share = None
        if kv_of is not None:
            kv_share = len({kv_of[h] for h in range(len(kv_of)) if mask[layer, h] > 0}) / len(set(kv_of))
        full += costs.layer_forward_flops(shape, seq, seq, 1.0)
        pruned += costs.layer_forward_flops(shape, seq, seq, kept, kv_share=kv_share)
    return full / pruned


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=["minilm", "bert-base"], choices=["minilm", "bert-base", "llama-gqa"])
    p.add_argument("--fractions", nargs="+", type=float, default=[0.0, 0.25, 0.5, 0.75])
    p.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    p.add_argument("--lengths", nargs="+", type=int, default=[32, 128])
    p.add_argument("--layers", action="store_true", default=True, help="also prune whole top layers at 50%%")
    p.add_argument("--train", action="store_true",
                   help="also time fine-tuning steps of the pruned models (batch --train-batch, each length): the "
                        "speed-up of training a physically pruned model (mask-then-fine-tune under zero) against the "
                        "FLOP ratio")
    p.add_argument("--train-batch", type=int, default=32)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--precision", choices=["fp32", "bf16"], default=None,
                   help="default: fp32 on the CPU, bf16 autocast on CUDA")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available here")
    DEVICE.update(device=args.device, precision=args.precision or ("bf16" if args.device == "cuda" else "fp32"))
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    header = f"{'model':<10}{'pruned':>8}{'how':>8}{'batch':>6}{'seq':>5}{'ms':>10}{'seq/s':>9}{'speed-up':>10}{'ideal':>7}{'% ideal':>9}"
    where = torch.cuda.get_device_name() if args.device == "cuda" else cpu_description()['cpu_model']
    print(f"threads {torch.get_num_threads()}, {args.device} ({where}), {DEVICE['precision']}, torch {torch.__version__}")
    print(header)
    for name in args.models:
        base = build(name).to(args.device)
        cfg = base.config
        dims = architecture.family_of(cfg).cost_dims(cfg)
        shape = costs.Shape(dims.n_layers, dims.n_heads, dims.d_model, dims.d_ffn, dims.n_kv_heads, dims.head_dim,
                            dims.ffn_matrices)
        kv_of = architecture.kv_head_of(cfg)
        variants = [(f, "random", masks.random_mask(shape.n_layers, shape.n_heads,
                                                    masks.n_pruned_for_fraction(f, shape.n_layers, shape.n_heads), 0))
                    for f in args.fractions]
        if args.layers and 0.5 in args.fractions:
            n = masks.n_pruned_for_fraction(0.5, shape.n_layers, shape.n_heads)
            variants.append((0.5, "layers", layer_mask(shape.n_layers, shape.n_heads, n)))
        reference: dict[tuple, float] = {}
        for f, how, mask in variants:
            model = copy.deepcopy(base)
            if f > 0:
                prune_heads(model, mask)
            for b in args.batches:
                for s in args.lengths:
                    sec = time_forward(model, b, s, args.warmup, args.repeats, cfg.vocab_size)
                    if f == 0:
                        reference[(b, s)] = sec
                    speed = reference[(b, s)] / sec
                    ideal = ideal_speedup(shape, mask, s, kv_of)
                    row = dict(model=name, mode="forward", fraction=f, how=how, batch=b, seq=s, ms=1000 * sec, seq_per_s=b / sec,
                               speedup=speed, ideal=ideal, share_of_ideal=(speed - 1) / (ideal - 1) if ideal > 1 else None)
                    rows.append(row)
                    share = f"{100 * row['share_of_ideal']:.0f}%" if row["share_of_ideal"] is not None else "-"
                    print(f"{name:<10}{100 * f:>7.0f}%{how:>8}{b:>6}{s:>5}{1000 * sec:>10.1f}{b / sec:>9.1f}"
                          f"{speed:>9.2f}x{ideal:>6.2f}x{share:>9}", flush=True)
            if args.train:
                b = args.train_batch
                for s in args.lengths:
                    sec = time_train_step(model, b, s, args.warmup, args.repeats, cfg.vocab_size)
                    if f == 0:
                        reference[("train", b, s)] = sec
                    speed = reference[("train", b, s)] / sec
                    ideal = ideal_speedup(shape, mask, s, kv_of)  # training FLOPs are 3x the forward's, pruned or not
                    row = dict(model=name, mode="train", fraction=f, how=how, batch=b, seq=s, ms=1000 * sec,
                               seq_per_s=b / sec, speedup=speed, ideal=ideal,
                               share_of_ideal=(speed - 1) / (ideal - 1) if ideal > 1 else None)
                    rows.append(row)
                    share = f"{100 * row['share_of_ideal']:.0f}%" if row["share_of_ideal"] is not None else "-"
                    print(f"{name:<10}{100 * f:>7.0f}%{how:>8}{b:>6}{s:>5}{1000 * sec:>10.1f}{b / sec:>9.1f}"
                          f"{speed:>9.2f}x{ideal:>6.2f}x{share:>9}  train step", flush=True)
            del model
    print("% ideal = (speed-up - 1) / (ideal - 1): the share of the FLOP saving that became time.")
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "machine": {**cpu_description(), "machine": platform.machine(),
                                        "threads": torch.get_num_threads(), "device": args.device,
                                        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
                                        "precision": DEVICE["precision"]}, "packages": package_versions(),
                                        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}},
                                       indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
