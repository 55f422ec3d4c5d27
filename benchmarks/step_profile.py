#!/usr/bin/env python
"""Where a fine-tuning step's time goes, and what bounds its speed: MiniLM on SST-2 batches, on the CPU.

One run prints, with the same torch thread count throughout:

1. **Time by kind of operation** over ``--steps`` profiled training steps of our loop's step (forward, backward,
   gradient clipping, fused AdamW; word embeddings frozen as in the quick profile), from ``torch.profiler``
   self-CPU times grouped into: matmul (``mm``, ``addmm``, ``bmm``, ``matmul``), dropout (``bernoulli_``,
   masks), optimizer (``_fused_adamw_``), clipping (``linalg_vector_norm`` and the rescale), softmax, GELU,
   layer norm, copies/casts, the rest. The share of matmuls bounds what removing everything else can give:
   ``1 / matmul share`` x.
2. **The matmul ceiling**: GFLOP/s of ``torch.mm`` at the step's real linear-layer shapes (tokens of a batch x
   384 -> 384 / 1536 and back, with their transposes for the backward) against the square-matrix peak
   (sizes 1024-2048, as ``finetune_throughput.py`` measures it). MFU against the square peak cannot exceed
   this ratio, whatever is done to the rest of the step.
   And the wall time of the same steps unprofiled: the share outside the operators (Python, autograd).
3. With ``--compile``: ``torch.compile`` (inductor, ``dynamic=True``) of the model's forward against eager:
   compile seconds, steady-state seconds per step, ratio.

Usage::

    HEADPRUNE_DATA_DIR=../shared/data .venv/bin/python benchmarks/step_profile.py [--n-train 512]
        [--batch-size 32] [--steps 8] [--threads 1] [--compile]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections import defaultdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from headprune_utils.tasks import batching, data  # noqa: E402
from headprune_utils.model import models

KINDS = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::baddbmm", "aten::_addmm_activation"),
    "dropout": ("aten::bernoulli_", "aten::native_dropout", "aten::native_dropout_backward"),
    "optimizer": ("aten::_fused_adamw_",),
    "clipping": ("aten::linalg_vector_norm", "aten::_foreach_norm", "aten::_foreach_mul_", "aten::clamp"),
    "softmax": ("aten::_softmax", "aten::_softmax_backward_data", "aten::_safe_softmax"),
    "gelu": ("aten::gelu", "aten::gelu_backward"),
    "layer norm": ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
    "copies": ("aten::copy_", "aten::to", "aten::_to_copy", "aten::clone", "aten::contiguous"),
}


def kind(name: str) -> str:
    return next((k for k, names in KINDS.items() if name in names), "rest")


def setup(n_train: int, batch_size: int):
    tok = models.load_tokenizer("minilm")
    train = data.subset(data.load_task("SST-2", "train", os.environ.get("HEADPRUNE_DATA_DIR"), allow_hub=False),
                        n_train, 0)
    enc = batching.encode(tok, train, 128)
    return [b for _, b in batching.iterate(enc, batching.train_batches(enc.lengths, batch_size, seed=0), "cpu")]


def fresh(compiled: bool = False):
    model = models.load_classifier("minilm", 2, device="cpu", seed=0)
    model.get_input_embeddings().weight.requires_grad_(False)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=5e-5, fused=True)
    forward = torch.compile(model, dynamic=True) if compiled else model

    def step(batch):
        loss = forward(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return model, step


def profile_kinds(batches, steps: int) -> tuple[dict, float]:
    from torch.profiler import ProfilerActivity, profile

    _, step = fresh()
    for b in batches[:2]:
        step(b)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for b in batches[2:2 + steps]:
            step(b)
    by = defaultdict(float)
    for e in prof.key_averages():
        by[kind(e.key)] += e.self_cpu_time_total
    total = sum(by.values())
    return {k: v / total for k, v in sorted(by.items(), key=lambda kv: -kv[1])}, total / 1e6 / steps


def gflops_mm(m: int, k: int, n: int, repeats: int = 10) -> float:
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3):
        torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * m * k * n / best / 1e9


def matmul_ceiling(batches, hidden: int = 384, ffn: int = 1536) -> dict:
    peak = max(gflops_mm(n, n, n, 5) for n in (1024, 1536, 2048))
    flops = secs = 0.0
    for b in batches:
        t = int(b["input_ids"].numel())  # tokens computed by every linear layer (padding included)
        shapes = [(t, hidden, hidden)] * 4 + [(t, hidden, ffn), (t, ffn, hidden)]  # q, k, v, o, ffn in, ffn out
        for m, k, n in shapes:  # forward, grad of the input (m x n @ n x k), grad of the weight (k x m @ m x n)
            for mm in ((m, k, n), (m, n, k), (k, m, n)):
                g = gflops_mm(*mm, repeats=3)
                f = 2 * mm[0] * mm[1] * mm[2]
                flops += f
                secs += f / (g * 1e9)
    return {"square_peak_gflops": peak, "model_shapes_gflops": flops / secs / 1e9,
            "ceiling": flops / secs / 1e9 / peak}


def time_steps(batches, compiled: bool, steps: int) -> tuple[float, float]:
    """(warm-up seconds, seconds per step) over the same batches the profile covers (``batches[2:2 + steps]``)."""
    _, step = fresh(compiled)
    t0 = time.perf_counter()
    for b in batches[:2]:
        step(b)
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    for b in batches[2:2 + steps]:
        step(b)
    return warm, (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-train", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile against eager (slow: ~2 min compile)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor()) \
        if os.path.exists("/proc/cpuinfo") else platform.processor()
    batches = setup(args.n_train, args.batch_size)
    tokens = [int(b["input_ids"].numel()) for b in batches]
    print(f"MiniLM fine-tuning step on {len(batches)} SST-2 batches of {args.batch_size} (tokens per batch: median "
          f"{sorted(tokens)[len(tokens) // 2]}, max {max(tokens)}); torch {torch.__version__}, {args.threads} thread(s), {cpu}")
    shares, per_step = profile_kinds(batches, args.steps)
    print(f"\n1. Time by kind of operation ({args.steps} profiled steps, {per_step:.3f} s/step of op time):")
    for k, v in shares.items():
        print(f"   {k:<11} {100 * v:5.1f} %")
    mm = shares.get("matmul", 0.0)
    print(f"   -> removing every non-matmul operation would make a step at most {1 / mm:.2f}x faster")
    we, se = time_steps(batches, False, args.steps)
    print(f"   wall time of the same steps unprofiled: {se:.3f} s/step; operator time (profiled) / wall = "
          f"{per_step / se:.2f} (about 1: next to nothing is spent outside the operators)")
    c = matmul_ceiling(batches)
    print(f"\n2. Matmul ceiling: square-matrix peak {c['square_peak_gflops']:.1f} GFLOP/s; torch.mm at the step's own "
          f"linear-layer shapes {c['model_shapes_gflops']:.1f} GFLOP/s = {100 * c['ceiling']:.0f}% of the peak "
          f"(no MFU above this is reachable without larger matrices)")
    if args.compile:
        wc, sc = time_steps(batches, True, args.steps)
        print(f"\n3. torch.compile (inductor, dynamic): eager {se:.3f} s/step, compiled {sc:.3f} s/step "
              f"(compiled/eager time = {sc / se:.2f}x; compile and warm-up {wc:.0f} s vs {we:.0f} s)")


if __name__ == "__main__":
    main()
