#!/usr/bin/env python
"""Fine-tuning throughput: our loop (``headprune_utils.train.training.finetune``) against the Hugging Face Trainer.

One run does three things, all with the same torch thread count:

1. Measures the machine's fp32 matmul peak: square ``torch.mm`` of sizes 1024, 1536 and 2048, a few
   repeats each after a warm-up; the peak is the best GFLOP/s seen (2 n^3 FLOPs per product).
2. Fine-tunes MiniLM (``"minilm"``, 2 labels, full model) on an SST-2 training subset
   (``data.subset(train, n, seed=0)``), one epoch, batch 32, lr 5e-5, warm-up 10 %, weight decay 0.01,
   max grad norm 1.0, fp32, with
   (a) our loop: ``training.finetune(model, encoded, "SST-2", TrainConfig(...), seed=0, dev=None,
       progress=False)`` (dynamic padding, length-grouped batches);
   (a') the same loop with ``TrainConfig(lean=True)`` (``headprune_utils.train.lean_loss``: the same loss computed
       without the work on padding and with the last layer on token 0 only, the one position the classifier
       reads);
   (b) ``transformers.Trainer`` on a freshly loaded model (same seed), a ``datasets.Dataset`` of the same
       token ids (unpadded), ``DataCollatorWithPadding`` (dynamic padding),
       ``train_sampling_strategy="group_by_length"``, the same hyper-parameters (warm-up passed as the
       same integer number of steps), no evaluation, no saving, ``report_to="none"``,
       ``dataloader_num_workers=0``, the Trainer's default optimizer.
   Only the training call is timed (``finetune(...)`` / ``trainer.train()``); model loading and the
   Trainer's construction are not. After one small untimed warm-up of each, the two variants alternate
   (the first one swaps every repeat) and the report gives the best and the median of the repeats.
3. Model FLOP utilisation (MFU) from the real shapes of the batches:

       FLOPs = 6 * N * T  +  12 * L * H * sum_b(B_b * S_b^2)

   N = non-embedding parameters (every parameter except the word/position/token-type embedding tables;
   this counts the pooler and classifier as if they ran on every token: a ~1 % overcount),
   T = sum_b(B_b * S_b) = tokens actually computed, i.e. INCLUDING the padding of each batch to its
   longest sequence, L = layers, H = hidden size, B_b x S_b = shape of batch b. The first term is the
   forward (2 N T) plus backward (4 N T) of the weight matmuls, the second the attention score (Q K^T)
   and context (P V) matmuls: 4 B S^2 H per layer forward, times 3 for forward + backward.
   Achieved GFLOP/s = FLOPs / training seconds; MFU = achieved / measured matmul peak. The same figures
   are given for the Trainer (its batch shapes are recorded by a thin wrapper round its collator). The lean
   loop's FLOPs are those it computes: the weight products on real tokens only (the last layer's query,
   output projection and feed-forward, and the pooler and classifier, on one token per sentence), attention
   as above but with one query row in the last layer (``LEAN_FLOP_FORMULA``).

On a GPU (``--device cuda``): the same three variants with ``--precision bf16`` (our loop's ``"auto"`` on CUDA:
bf16 autocast, float32 weights; the Trainer's ``bf16=True``), and the peak is measured with ``torch.mm`` in that
dtype on the device (sizes 4096-8192); ``--model bert-base-random`` trains a bert-base-shaped BERT
(``BertConfig()``: 12 x 12 heads, hidden 768) with random weights, which needs no download.

Usage::

    HEADPRUNE_DATA_DIR=/path/to/data python benchmarks/finetune_throughput.py [--n-train 1024]
        [--batch-size 32] [--repeats 3] [--threads N] [--out results.json]
        [--device cpu|cuda] [--precision fp32|bf16] [--model minilm|bert-base-random]
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time

# Offline and quiet before transformers/datasets are imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

MODEL = "minilm"
RUN = {"device": "cpu", "precision": "fp32", "model": "minilm"}  # set by main() from the command line
TASK = "SST-2"
SEED = 0
LR = 5e-5
WEIGHT_DECAY = 0.01
WARMUP_RATIO = 0.1
MAX_GRAD_NORM = 1.0
FLOP_FORMULA = (
    "FLOPs = 6*N*T + 12*L*H*sum_b(B_b*S_b^2); N = non-embedding parameters, T = sum_b(B_b*S_b) tokens "
    "computed INCLUDING padding to each batch's longest sequence, L = layers, H = hidden size, "
    "B_b x S_b = shape of batch b"
)


LEAN_FLOP_FORMULA = (
    "lean FLOPs = 6*((N - P_last - P_head)*R + P_kv*R + (P_last - P_kv + P_head)*B) + "
    "12*H*((L-1)*sum_b(B_b*S_b^2) + sum_b(B_b*S_b)); R = real tokens, B = sentences, P_last = the last "
    "layer's parameters, P_kv = its key and value projections', P_head = pooler and classifier"
)


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
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = (sum(fields[:8]) - idle) / hz  # user..steal; guest time is already inside user
    t = os.times()
    return busy, t.user + t.system


def other_load(start, end, wall: float) -> float | None:
    """Average number of cores kept busy by OTHER processes between two ``cpu_seconds()`` readings."""
    if start is None or end is None or wall <= 0:
        return None
    return max(0.0, (end[0] - start[0]) - (end[1] - start[1])) / wall


# ----------------------------------------------------------------------------- matmul peak
def sync() -> None:
    if RUN["device"] == "cuda":
        torch.cuda.synchronize()


def matmul_peak(sizes=None, repeats: int = 5) -> dict:
    """Best GFLOP/s of square ``torch.mm`` over ``sizes`` (warm-up product first, then ``repeats``), in the run's
    dtype (float32, or bfloat16 with ``--precision bf16``) on the run's device."""
    per_size = {}
    dev = RUN["device"]
    dtype = torch.bfloat16 if RUN["precision"] == "bf16" else torch.float32
    sizes = sizes or ((4096, 6144, 8192) if dev == "cuda" else (1024, 1536, 2048))
    gen = torch.Generator().manual_seed(0)
    for n in sizes:
        a = torch.randn(n, n, generator=gen).to(dev, dtype)
        b = torch.randn(n, n, generator=gen).to(dev, dtype)
        out = torch.empty(n, n, device=dev, dtype=dtype)
        torch.mm(a, b, out=out)  # warm-up
        sync()
        best = math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            torch.mm(a, b, out=out)
            sync()
            best = min(best, time.perf_counter() - t0)
        per_size[n] = 2 * n**3 / best / 1e9
        del a, b, out
    return {"gflops": max(per_size.values()), "per_size_gflops": per_size, "repeats": repeats}


# ----------------------------------------------------------------------------- FLOP counting
def model_dims(model) -> dict:
    cfg = model.config
    emb_names = ("word_embeddings", "position_embeddings", "token_type_embeddings")
    n_total = sum(p.numel() for p in model.parameters())
    n_emb = sum(p.numel() for name, p in model.named_parameters()
                if name.endswith(".weight") and any(e in name for e in emb_names))
    return {
        "n_layers": cfg.num_hidden_layers,
        "n_heads": cfg.num_attention_heads,
        "hidden": cfg.hidden_size,
        "params_total": n_total,
        "params_embedding_tables": n_emb,
        "params_non_embedding": n_total - n_emb,
        "params_trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "params_last_layer": _count(model.base_model.encoder.layer[-1]),
        "params_last_kv": _count(model.base_model.encoder.layer[-1].attention.self.key)
        + _count(model.base_model.encoder.layer[-1].attention.self.value),
        "params_head": _count(model.base_model.pooler) + _count(model.classifier),
    }


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def lean_stats(shapes: list[tuple[int, int]], real_tokens: int, dims: dict) -> dict:
    """:func:`shape_stats` for the lean loop: the FLOPs it computes (``LEAN_FLOP_FORMULA``)."""
    out = shape_stats(shapes, real_tokens, dims)
    n_sent = sum(b for b, _ in shapes)
    p_last, p_kv, p_head = dims["params_last_layer"], dims["params_last_kv"], dims["params_head"]
    weights = 6 * ((dims["params_non_embedding"] - p_last - p_head) * real_tokens + p_kv * real_tokens
                   + (p_last - p_kv + p_head) * n_sent)
    attn = 12 * dims["hidden"] * ((dims["n_layers"] - 1) * out["sum_batch_seq2"] + sum(b * s for b, s in shapes))
    out.update({"tokens_computed": int(real_tokens), "padding_fraction": 0.0, "train_flops": float(weights + attn),
                "train_flops_weights": float(weights), "train_flops_attention": float(attn)})
    return out


def shape_stats(shapes: list[tuple[int, int]], real_tokens: int, dims: dict) -> dict:
    """Token counts and training FLOPs of one epoch whose batches have ``shapes`` (batch, seq)."""
    padded = sum(b * s for b, s in shapes)
    attn = sum(b * s * s for b, s in shapes)
    flops = 6 * dims["params_non_embedding"] * padded + 12 * dims["n_layers"] * dims["hidden"] * attn
    return {
        "n_batches": len(shapes),
        "tokens_real": int(real_tokens),
        "tokens_computed": int(padded),
        "padding_fraction": 1 - real_tokens / padded if padded else 0.0,
        "sum_batch_seq2": int(attn),
        "train_flops": float(flops),
        "train_flops_weights": float(6 * dims["params_non_embedding"] * padded),
        "train_flops_attention": float(12 * dims["n_layers"] * dims["hidden"] * attn),
    }


# ----------------------------------------------------------------------------- the two variants
def load_model():
    if RUN["model"] == "bert-base-random":
        from transformers import AutoModelForSequenceClassification, BertConfig

        torch.manual_seed(SEED)
        cfg = BertConfig(num_labels=2)  # bert-base's shape; the MiniLM tokenizer's ids (the same 30,522 vocabulary)
        return AutoModelForSequenceClassification.from_config(cfg, attn_implementation="sdpa").to(RUN["device"])
    from headprune_utils.model.models import load_classifier

    return load_classifier(MODEL, num_labels=2, device=RUN["device"], seed=SEED)


def run_ours(encoded, batch_size: int, lean: bool = False) -> dict:
    from headprune_utils.train.training import TrainConfig, finetune

    model = load_model()
    cfg = TrainConfig(epochs=1, batch_size=batch_size, lr=LR, weight_decay=WEIGHT_DECAY,
                      warmup_ratio=WARMUP_RATIO, max_grad_norm=MAX_GRAD_NORM, group_by_length=True, lean=lean)
    sync()
    t0 = time.perf_counter()
    history = finetune(model, encoded, TASK, cfg, seed=SEED, dev=None, progress=False, precision=RUN["precision"])
    sync()
    seconds = time.perf_counter() - t0
    threads = torch.get_num_threads()
    del model
    gc.collect()
    return {"seconds": seconds, "loss": history[0]["train_loss"], "real_tokens": history[0]["train_tokens"],
            "loop_seconds": history[0]["train_seconds"], "threads": threads}


class RecordingCollator:
    """``DataCollatorWithPadding`` that also records the (batch, seq) shape of each batch it builds."""

    def __init__(self, inner):
        self.inner = inner
        self.shapes: list[tuple[int, int]] = []
        self.real_tokens = 0

    def __call__(self, features):
        batch = self.inner(features)
        self.shapes.append(tuple(batch["input_ids"].shape))
        self.real_tokens += int(batch["attention_mask"].sum())
        return batch


def trainer_dataset(encoded):
    from datasets import Dataset

    columns = {
        "input_ids": [list(x) for x in encoded.input_ids],
        "attention_mask": [[1] * len(x) for x in encoded.input_ids],
        "labels": [int(y) for y in encoded.labels],
    }
    if encoded.token_type_ids is not None:
        columns["token_type_ids"] = [list(x) for x in encoded.token_type_ids]
    return Dataset.from_dict(columns)


def run_trainer(dataset, tokenizer, batch_size: int, n_train: int) -> dict:
    from transformers import DataCollatorWithPadding, PrinterCallback, Trainer, TrainingArguments

    model = load_model()
    steps = math.ceil(n_train / batch_size)
    warmup = int(round(WARMUP_RATIO * steps))  # the same integer as our loop (the Trainer's ratio ceils)
    with tempfile.TemporaryDirectory(prefix="hp-trainer-") as out_dir:
        args = TrainingArguments(
            output_dir=out_dir,
            num_train_epochs=1,
            per_device_train_batch_size=batch_size,
            learning_rate=LR,
            lr_scheduler_type="linear",
            warmup_steps=warmup,
            weight_decay=WEIGHT_DECAY,
            max_grad_norm=MAX_GRAD_NORM,
            fp16=False,
            bf16=RUN["precision"] == "bf16",
            use_cpu=RUN["device"] == "cpu",
            train_sampling_strategy="group_by_length",
            eval_strategy="no",
            save_strategy="no",
            logging_strategy="no",
            report_to="none",
            dataloader_num_workers=0,
            dataloader_pin_memory=False,
            disable_tqdm=True,
            seed=SEED,
            data_seed=SEED,
        )
        collator = RecordingCollator(DataCollatorWithPadding(tokenizer))
        t0 = time.perf_counter()
        trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collator,
                          processing_class=tokenizer)
        trainer.remove_callback(PrinterCallback)  # it prints the final metrics dict to stdout
        build_seconds = time.perf_counter() - t0
        sync()
        t0 = time.perf_counter()
        output = trainer.train()
        sync()
        seconds = time.perf_counter() - t0
        optim = str(args.optim.value if hasattr(args.optim, "value") else args.optim)
    threads = torch.get_num_threads()
    del trainer, model
    gc.collect()
    return {"seconds": seconds, "loss": float(output.training_loss), "shapes": collator.shapes,
            "real_tokens": collator.real_tokens, "build_seconds": build_seconds, "optim": optim,
            "threads": threads, "warmup_steps": warmup}


# ----------------------------------------------------------------------------- report
def summarise(times: list[float], n: int, stats: dict, peak: float) -> dict:
    best, median = min(times), statistics.median(times)
    out = {"seconds": times, "seconds_best": best, "seconds_median": median}
    for tag, t in (("best", best), ("median", median)):
        gflops = stats["train_flops"] / t / 1e9
        out[f"examples_per_s_{tag}"] = n / t
        out[f"tokens_real_per_s_{tag}"] = stats["tokens_real"] / t
        out[f"tokens_computed_per_s_{tag}"] = stats["tokens_computed"] / t
        out[f"achieved_gflops_{tag}"] = gflops
        out[f"mfu_{tag}"] = gflops / peak
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-train", type=int, default=1024, help="SST-2 training sentences (default 1024)")
    parser.add_argument("--batch-size", type=int, default=32, help="batch size (default 32)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each variant (default 3)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads for everything (default: torch's default)")
    parser.add_argument("--data-dir", default=None, help="GLUE data root (default $HEADPRUNE_DATA_DIR)")
    parser.add_argument("--out", default=None, help="write the figures as JSON here (default: print only)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to train (default cpu)")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default=None,
                        help="training precision (default: fp32 on the CPU, bf16 on CUDA; peak in the same dtype)")
    parser.add_argument("--model", choices=["minilm", "bert-base-random"], default="minilm",
                        help="the embedded MiniLM, or a bert-base-shaped BERT with random weights (no download)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available here")
    RUN.update(device=args.device, model=args.model,
               precision=args.precision or ("bf16" if args.device == "cuda" else "fp32"))
    if args.repeats < 1 or args.n_train < 1 or args.batch_size < 1:
        parser.error("--n-train, --batch-size and --repeats must be positive")

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()

    import transformers
    from headprune_utils.tasks import data as hp_data
    from headprune_utils.tasks.batching import encode, train_batches
    from headprune_utils.model.models import load_tokenizer

    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    log(f"[setup] torch {torch.__version__}, transformers {transformers.__version__}, {threads} threads, "
        f"load average {os.getloadavg()[0]:.2f}")
    log(f"[peak] measuring the {RUN['precision']} matmul peak on {RUN['device']} ...")
    peak = matmul_peak()
    log(f"[peak] {peak['gflops']:.1f} GFLOP/s")

    train = hp_data.subset(hp_data.load_task(TASK, "train", args.data_dir), args.n_train, seed=SEED)
    n = len(train)
    tokenizer = load_tokenizer(MODEL)
    encoded = encode(tokenizer, train)
    dataset = trainer_dataset(encoded)
    lengths = encoded.lengths

    # Our loop's batches are deterministic: the same call as inside finetune (epoch 0).
    our_batches = train_batches(lengths, args.batch_size, seed=SEED * 1000 + 0, group_by_length=True)
    our_shapes = [(len(b), int(lengths[b].max())) for b in our_batches]
    probe = load_model()
    dims = model_dims(probe)
    del probe
    ours_stats = shape_stats(our_shapes, int(lengths.sum()), dims)
    lean_stats_ = lean_stats(our_shapes, int(lengths.sum()), dims)

    # Small untimed warm-up of both (lazy imports, allocator, oneDNN kernels).
    n_warm = min(n, 2 * args.batch_size)
    log(f"[warm-up] {n_warm} examples each ...")
    warm = hp_data.subset(train, n_warm, seed=SEED)
    warm_enc = encode(tokenizer, warm)
    run_ours(warm_enc, args.batch_size)
    run_ours(warm_enc, args.batch_size, lean=True)
    run_trainer(trainer_dataset(warm_enc), tokenizer, args.batch_size, len(warm))

    ours_runs, lean_runs, trainer_runs = [], [], []
    variants = ["ours", "lean", "trainer"]
    for r in range(args.repeats):
        order = variants[r % 3:] + variants[:r % 3]  # each variant leads in turn
        for which in order:
            if which == "ours":
                res = run_ours(encoded, args.batch_size)
                ours_runs.append(res)
            elif which == "lean":
                res = run_ours(encoded, args.batch_size, lean=True)
                lean_runs.append(res)
            else:
                res = run_trainer(dataset, tokenizer, args.batch_size, n)
                trainer_runs.append(res)
            log(f"[run {r + 1}/{args.repeats}] {which:7s} {res['seconds']:7.2f} s  "
                f"{n / res['seconds']:6.1f} examples/s  loss {res['loss']:.4f}  threads {res['threads']}")

    others = other_load(cpu0, cpu_seconds(), time.perf_counter() - wall0)
    if ours_runs[0]["real_tokens"] != ours_stats["tokens_real"]:
        log("WARNING: our loop's token count differs from the recomputed batches")
    tr_shapes = trainer_runs[-1]["shapes"]
    trainer_stats = shape_stats(tr_shapes, trainer_runs[-1]["real_tokens"], dims)

    pk = peak["gflops"]
    ours = summarise([r["seconds"] for r in ours_runs], n, ours_stats, pk)
    lean = summarise([r["seconds"] for r in lean_runs], n, lean_stats_, pk)
    trainer = summarise([r["seconds"] for r in trainer_runs], n, trainer_stats, pk)
    result = {
        "benchmark": "finetune_throughput",
        "model": RUN["model"],
        "device": RUN["device"],
        "device_name": torch.cuda.get_device_name() if RUN["device"] == "cuda" else platform.processor() or None,
        "precision": RUN["precision"],
        "task": TASK,
        "n_train": n,
        "batch_size": args.batch_size,
        "epochs": 1,
        "lr": LR,
        "weight_decay": WEIGHT_DECAY,
        "warmup_steps": trainer_runs[0]["warmup_steps"],
        "max_grad_norm": MAX_GRAD_NORM,
        "repeats": args.repeats,
        "threads": threads,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "other_processes_busy_cores": others,
        "matmul_peak_gflops": pk,
        "matmul_peak_per_size_gflops": {str(k): v for k, v in peak["per_size_gflops"].items()},
        "model_dims": dims,
        "flop_formula": FLOP_FORMULA,
        "lean_flop_formula": LEAN_FLOP_FORMULA,
        "ours": {**ours, **ours_stats, "train_loss": [r["loss"] for r in ours_runs],
                 "loop_seconds": [r["loop_seconds"] for r in ours_runs]},
        "lean": {**lean, **lean_stats_, "train_loss": [r["loss"] for r in lean_runs],
                 "loop_seconds": [r["loop_seconds"] for r in lean_runs]},
        "trainer": {**trainer, **trainer_stats, "train_loss": [r["loss"] for r in trainer_runs],
                    "optim": trainer_runs[0]["optim"],
                    "build_seconds": [r["build_seconds"] for r in trainer_runs]},
        "ratio_ours_over_trainer_best": ours["examples_per_s_best"] / trainer["examples_per_s_best"],
        "ratio_ours_over_trainer_median": ours["examples_per_s_median"] / trainer["examples_per_s_median"],
        "ratio_lean_over_trainer_best": lean["examples_per_s_best"] / trainer["examples_per_s_best"],
        "ratio_lean_over_trainer_median": lean["examples_per_s_median"] / trainer["examples_per_s_median"],
        "ratio_lean_over_ours_best": lean["examples_per_s_best"] / ours["examples_per_s_best"],
        "ratio_lean_over_ours_median": lean["examples_per_s_median"] / ours["examples_per_s_median"],
    }

    lines = [
        "=" * 78,
        f"Fine-tuning throughput: {RUN['model']} on {n} {TASK} sentences, batch {args.batch_size}, 1 epoch, "
        f"{RUN['precision']} on {RUN['device']}"
        + (f" ({torch.cuda.get_device_name()})" if RUN["device"] == "cuda" else "") + ", "
        f"lr {LR:g}",
        f"torch {torch.__version__} | transformers {transformers.__version__} | {threads} torch threads "
        f"| {os.cpu_count()} CPUs",
        f"{RUN['precision']} matmul peak: {pk:.1f} GFLOP/s (best of "
        + ", ".join(f"{k}: {v:.1f}" for k, v in peak["per_size_gflops"].items()) + ")",
        f"model: {dims['n_layers']} layers x {dims['n_heads']} heads, hidden {dims['hidden']}, "
        f"{dims['params_total'] / 1e6:.2f}M params ({dims['params_non_embedding'] / 1e6:.2f}M non-embedding, "
        f"{dims['params_trainable'] / 1e6:.2f}M trainable)",
        f"timed: training call only; {args.repeats} repeat(s) each, alternating, after a warm-up",
        "other processes kept "
        + (f"{others:.2f} cores busy on average during this run" if others is not None else "? cores busy")
        + f" ({os.cpu_count()} CPUs)",
        "-" * 78,
        f"{'':22s}{'ours':>14s}{'ours, lean':>14s}{'Trainer':>14s}",
    ]

    def row(label, key, fmt):
        lines.append(f"{label:22s}" + "".join(f"{fmt.format(v[key]):>14s}" for v in (ours, lean, trainer)))

    row("seconds (best)", "seconds_best", "{:.2f}")
    row("seconds (median)", "seconds_median", "{:.2f}")
    row("examples/s (best)", "examples_per_s_best", "{:.1f}")
    row("examples/s (median)", "examples_per_s_median", "{:.1f}")
    row("real tokens/s (best)", "tokens_real_per_s_best", "{:.0f}")
    row("comp. tokens/s (best)", "tokens_computed_per_s_best", "{:.0f}")
    row("GFLOP/s (best)", "achieved_gflops_best", "{:.1f}")
    row("GFLOP/s (median)", "achieved_gflops_median", "{:.1f}")
    stats3 = (ours_stats, lean_stats_, trainer_stats)
    runs3 = (ours_runs, lean_runs, trainer_runs)
    lines.append(f"{'MFU (best)':22s}" + "".join(f"{v['mfu_best']:>14.1%}" for v in (ours, lean, trainer)))
    lines.append(f"{'MFU (median)':22s}" + "".join(f"{v['mfu_median']:>14.1%}" for v in (ours, lean, trainer)))
    for label, key in (("batches", "n_batches"), ("real tokens", "tokens_real"),
                       ("computed tokens", "tokens_computed")):
        lines.append(f"{label:22s}" + "".join(f"{st[key]:>14d}" for st in stats3))
    lines.append(f"{'padding fraction':22s}" + "".join(f"{st['padding_fraction']:>14.1%}" for st in stats3))
    lines.append(f"{'train FLOPs (G)':22s}" + "".join(f"{st['train_flops'] / 1e9:>14.1f}" for st in stats3))
    lines.append(f"{'final train loss':22s}" + "".join(f"{rs[-1]['loss']:>14.4f}" for rs in runs3))
    lines += [
        "-" * 78,
        f"ratio ours / Trainer (examples/s): best {result['ratio_ours_over_trainer_best']:.2f}, "
        f"median {result['ratio_ours_over_trainer_median']:.2f}",
        f"ratio lean / Trainer (examples/s): best {result['ratio_lean_over_trainer_best']:.2f}, "
        f"median {result['ratio_lean_over_trainer_median']:.2f}",
        f"ratio lean / ours    (examples/s): best {result['ratio_lean_over_ours_best']:.2f}, "
        f"median {result['ratio_lean_over_ours_median']:.2f}",
        f"all runs (s): ours {', '.join(f'{t:.2f}' for t in ours['seconds'])}; "
        f"lean {', '.join(f'{t:.2f}' for t in lean['seconds'])}; "
        f"Trainer {', '.join(f'{t:.2f}' for t in trainer['seconds'])}",
        f"Trainer optimizer: {result['trainer']['optim']}; ours: torch AdamW (fused, see training._optimizer); "
        f"warm-up {result['warmup_steps']} steps both",
        "MFU: " + FLOP_FORMULA + "; achieved = FLOPs / training seconds; MFU = achieved / matmul peak.",
        "lean MFU: " + LEAN_FLOP_FORMULA + ".",
    ]
    if others is not None and others > max(0.0, (os.cpu_count() or 1) - threads) + 0.25:
        lines.append(f"WARNING: other processes competed for the CPUs ({others:.2f} cores busy on average): "
                     "absolute figures are depressed and noisy; compare the ratio, and rerun on a quiet machine.")
    lines.append("=" * 78)
    print("\n".join(lines), flush=True)
    if args.out:
        out_dir = os.path.dirname(os.path.abspath(args.out))
        os.makedirs(out_dir, exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
