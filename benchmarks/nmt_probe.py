"""How fast a small Transformer trains on Multi30k en-de on this CPU, and what BLEU a few minutes buy.

One run: trains a joint BPE tokenizer on the training text, builds a Marian-style model from scratch
(``translation_model``), trains it for ``--seconds`` of wall-clock (``translation.train_translation`` with
``max_seconds``; sentence batches grouped by length), then decodes the test set (test_2016_flickr) greedily
and a slice with beam search, and prints one JSON line of numbers. The fp32 matmul rate is measured before
and after, so a reader can tell a busy machine from a slow configuration.

    HEADPRUNE_DATA_DIR=../shared/data nice -n 19 .venv/bin/python benchmarks/nmt_probe.py --seconds 300
"""
from __future__ import annotations

import argparse
import json
import time

import torch


def matmul_gflops(n: int = 1024, repeats: int = 10) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - t) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=300.0, help="training wall-clock budget")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--layers", type=int, default=3, help="encoder and decoder layers each")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=150)
    parser.add_argument("--dropout", type=float, default=0.1, help="residual and embedding dropout")
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    parser.add_argument("--max-tokens", type=int, default=None, help="token-based batches (sentences x longest)")
    parser.add_argument("--dev-size", type=int, default=500)
    parser.add_argument("--beam-sentences", type=int, default=200)
    args = parser.parse_args()

    from headprune_utils.tasks.subword import train_tokenizer
    from headprune_utils.train.translation import NMTTrainConfig, encode_pairs, train_translation, translate
    from headprune_utils.tasks.translation_data import load_parallel, subset_pairs
    from headprune_utils.tasks.translation_metrics import translation_scores
    from headprune_utils.model.translation_model import NMTModelConfig, build_translation_model

    torch.set_num_threads(args.threads)
    out: dict = {"args": vars(args), "gflops_before": round(matmul_gflops(), 1)}
    train = load_parallel("multi30k", "train")
    dev = subset_pairs(load_parallel("multi30k", "dev"), args.dev_size, seed=0)
    test = load_parallel("multi30k", "test")

    t = time.perf_counter()
    tok = train_tokenizer(train.src + train.tgt, vocab_size=args.vocab)
    out["tokenizer_seconds"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    train_enc, dev_enc = encode_pairs(tok, train), encode_pairs(tok, dev)
    out["encode_seconds"] = round(time.perf_counter() - t, 1)
    out["mean_src_tokens"] = round(sum(map(len, train_enc.src_ids)) / len(train_enc), 1)
    out["mean_tgt_tokens"] = round(sum(map(len, train_enc.tgt_ids)) / len(train_enc), 1)

    mcfg = NMTModelConfig(encoder_layers=args.layers, decoder_layers=args.layers, heads=args.heads,
                          d_model=args.d_model, ffn_dim=args.ffn, dropout=args.dropout)
    model = build_translation_model(mcfg, tok, seed=0)
    out["params_m"] = round(sum(p.numel() for p in model.parameters()) / 1e6, 2)
    tcfg = NMTTrainConfig(max_steps=10**6, batch_size=args.batch_size, lr=args.lr, warmup_steps=args.warmup,
                          label_smoothing=args.label_smoothing, max_tokens=args.max_tokens,
                          eval_every=150, max_seconds=args.seconds)
    result = train_translation(model, train_enc, dev_enc, tcfg, seed=0, progress=False)
    out.update(steps=result.steps, train_seconds=round(result.seconds, 1),
               steps_per_s=round(result.steps / result.seconds, 2),
               target_tokens_per_s=round(result.history[-1]["tokens"] / result.seconds, 0),
               epochs=round(result.steps * args.batch_size / len(train_enc), 2),
               best_step=result.best_step, best_dev_nll=round(result.best_dev_loss, 3),
               history=[{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                        for r in result.history])

    t = time.perf_counter()
    hyps = translate(model, tok, test.src, batch_size=100)
    out["greedy_seconds"] = round(time.perf_counter() - t, 1)
    scores = translation_scores(hyps, test.tgt)
    out.update(test_bleu_greedy=round(scores["bleu"], 2), test_chrf_greedy=round(scores["chrf"], 2),
               bleu_signature=scores["bleu_signature"], examples=list(zip(test.src[:3], hyps[:3])))
    n = args.beam_sentences
    if n:
        t = time.perf_counter()
        beams = translate(model, tok, test.src[:n], batch_size=50, num_beams=4)
        out["beam4_seconds_for_n"] = round(time.perf_counter() - t, 1)
        out["beam4_bleu_first_n"] = round(translation_scores(beams, test.tgt[:n])["bleu"], 2)
        out["greedy_bleu_first_n"] = round(translation_scores(hyps[:n], test.tgt[:n])["bleu"], 2)
    out["gflops_after"] = round(matmul_gflops(), 1)
    print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    main()
