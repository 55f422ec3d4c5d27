#!/usr/bin/env bash
# Issue 15's GPU measurements as one prepared run (about 5-8 minutes on one H100/H200-class GPU): fine-tuning
# throughput of a bert-base-shaped BERT (random weights, no download) and MiniLM under bf16 autocast -- ours, ours
# lean and the Hugging Face Trainer, MFU against the chip's measured bf16 matmul peak -- then the pruned-model
# latency table on the GPU, then the tests that only run where CUDA is present (bf16 equivalence of the gates).
# Needs a CUDA build of torch in $PY's environment and the GLUE data (HEADPRUNE_DATA_DIR). Results: $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-benchmarks/gpu_results}
export HEADPRUNE_DATA_DIR=${HEADPRUNE_DATA_DIR:-../shared/data}
mkdir -p "$OUT"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device for torch ' + torch.__version__)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
for model in bert-base-random minilm; do
  "$PY" benchmarks/finetune_throughput.py --device cuda --model "$model" --n-train 4096 --repeats 2 \
      --out "$OUT/finetune_$model.json" | tee "$OUT/finetune_$model.txt"
done
"$PY" benchmarks/pruned_latency.py --device cuda --repeats 20 --warmup 5 --train \
    --out "$OUT/pruned_latency.json" | tee "$OUT/pruned_latency.txt"
"$PY" -m pytest -q tests/unit/test_precision.py tests/unit/test_lean_loss.py | tee "$OUT/gpu_tests.txt"
