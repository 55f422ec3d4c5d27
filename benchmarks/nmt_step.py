#!/usr/bin/env python
"""A translation training step with and without the NLL it never reads: study 7's model at a profile's size.

``train_translation``'s steps ask ``label_smoothed_loss`` for no NLL (``nll=False``); before, every step also
computed the plain NLL under ``no_grad``: a second log-softmax over the vocabulary, thrown away. One run builds the
profile's tokenizer and model (``params/<profile>.yaml [nmt_heads]``: vocabulary, width, layers, token batches),
then times ``--steps`` training steps of each variant on the same batches (forward, loss, backward, clipping,
fused AdamW), the variants alternating ``--rounds`` times from the same weights, and prints each variant's best
and median seconds per step and the ratio plain / lean. The two train the same weights bit for bit
(``tests/unit/test_translation.py``).

    HEADPRUNE_DATA_DIR=../shared/data .venv/bin/python benchmarks/nmt_step.py [--profile standard-next]
        [--steps 10] [--rounds 3] [--threads 1] [--fused]

``--fused`` compares instead the training's loss on the whole logits (no NLL) with ``NMTTrainConfig.fused_loss``
(``fused_vocab_loss``: the output projection and the loss a block of tokens at a time, never the whole logits).
``--against OTHER`` compares instead the training step (fused loss) of the two profiles' models, each with its own
tokenizer and token batches (a model size against another: the ratio is ``--profile`` / ``OTHER``).
``--bf16`` compares instead the training step (fused loss) in float32 with the same step's forward and loss under
bf16 autocast (``precision="bf16"``: what ``train_translation`` does; backward and AdamW outside autocast); worth it
on a CPU with native bfloat16 dot products only (``avx512_bf16`` or AMX in ``/proc/cpuinfo``), which the output names.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from headprune_utils.model.precision import autocast_context  # noqa: E402
from headprune_utils.model.translation_model import build_translation_model  # noqa: E402
from headprune_utils.run import profiles  # noqa: E402
from headprune_utils.store.paths import StudyPaths  # noqa: E402
from headprune_utils.studies.nmt_heads import Context  # noqa: E402
from headprune_utils.tasks.subword import train_tokenizer  # noqa: E402
from headprune_utils.train import translation as tr  # noqa: E402
from headprune_utils.train.fused_vocab_loss import fused_label_smoothed_loss, seq2seq_lm_head  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="standard-next")
    parser.add_argument("--steps", type=int, default=10, help="timed steps of a variant in a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--fused", action="store_true",
                        help="compare the training's loss on the whole logits (no NLL) with the fused one "
                             "(fused_vocab_loss: the output projection a block of tokens at a time)")
    parser.add_argument("--against", metavar="OTHER", default=None,
                        help="compare the training step (fused loss) of --profile's model with OTHER profile's")
    parser.add_argument("--bf16", action="store_true",
                        help="compare the training step (fused loss) in float32 with the same step under bf16 autocast")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    def setup(profile: str):
        sections = profiles.validate_profile(profile, ["nmt_heads"])
        _, cfg = profiles.study_config("nmt_heads", sections["nmt_heads"], profile)
        ctx = Context(cfg, torch.device("cpu"), StudyPaths("nmt_heads", profile, staged=False))
        train = ctx.data()[0]
        tok = train_tokenizer(train.src + train.tgt, vocab_size=cfg.vocab_size, model=cfg.tokenizer_model)
        enc = tr.encode_pairs(tok, train, cfg.max_length, drop_longer=True)
        tc = cfg.train_config()
        batches = [tr.collate_pairs(enc, i) for i in tr._epoch_batches(enc.lengths, tc, 0, 0)[:args.steps + 1]]
        return cfg, tok, tc, batches, build_translation_model(cfg.model_config(), tok, seed=0).train()

    sizes = {args.profile: setup(args.profile)}
    if args.against:
        sizes[args.against] = setup(args.against)
    cfg, tok, tc, batches, base = sizes[args.profile]

    def run(nll: bool, fused: bool = False, profile: str | None = None, precision: str = "fp32") -> float:
        cfg, tok, tc, batches, base = sizes[profile or args.profile]
        model = copy.deepcopy(base)
        optim = tr._Optimization.build(model, tc)

        def step(batch):
            batch = dict(batch)
            labels = batch.pop("labels")
            if fused:  # as train_translation: the encoder-decoder under autocast, the fused loss outside it
                weight, bias = seq2seq_lm_head(model)
                with autocast_context(torch.device("cpu"), precision):
                    hidden = model.model(**batch, use_cache=False)[0]
                loss = fused_label_smoothed_loss(hidden, weight, bias, labels, tc.label_smoothing)[0]
            else:
                with autocast_context(torch.device("cpu"), precision):
                    logits = model(**batch).logits
                loss = tr.label_smoothed_loss(logits, labels, tc.label_smoothing, nll=nll)[0]
            optim.step(loss, tc.max_grad_norm)

        step(batches[0])  # untimed warm-up
        t = time.perf_counter()
        for b in batches[1:]:
            step(b)
        return (time.perf_counter() - t) / args.steps

    if args.against:
        variants = {f"{p} (fused)": dict(nll=False, fused=True, profile=p) for p in sizes}
    elif args.bf16:
        variants = {"float32 (fused)": dict(nll=False, fused=True),
                    "bf16 autocast (fused)": dict(nll=False, fused=True, precision="bf16")}
    elif args.fused:
        variants = {"plain (whole logits)": dict(nll=False), "fused (blocks of tokens)": dict(nll=False, fused=True)}
    else:
        variants = {"plain (NLL every step)": dict(nll=True), "lean (no NLL)": dict(nll=False)}
    times = {name: [] for name in variants}
    for r in range(args.rounds):
        order = list(times) if r % 2 == 0 else list(times)[::-1]
        for name in order:
            times[name].append(run(**variants[name]))
    for profile, (cfg, tok, tc, batches, base) in sizes.items():
        tokens = sum(int((b["labels"] != -100).sum()) for b in batches[1:]) / args.steps
        print(f"nmt_heads [{profile}]: d_model {cfg.d_model}, ffn {cfg.ffn_dim}, {cfg.encoder_layers}+"
              f"{cfg.decoder_layers} layers, vocabulary {len(tok)}, {sum(p.numel() for p in base.parameters()):,} "
              f"parameters, {tokens:.0f} target tokens a step, {args.threads} thread(s), {args.steps} steps x "
              f"{args.rounds} rounds")
    if args.bf16:
        flags = set(open("/proc/cpuinfo").read().split()) if os.path.exists("/proc/cpuinfo") else set()
        native = sorted(flags & {"avx512_bf16", "amx_bf16"})
        print(f"  CPU bfloat16 instructions: {', '.join(native) if native else 'none (emulated: expect a slowdown)'}")
    for name, ts in times.items():
        print(f"  {name:24s} best {min(ts):.3f} s/step, median {statistics.median(ts):.3f}")
    (a, plain), (b, lean) = times.items()
    print(f"  ratio {a.split()[0]} / {b.split()[0]}: best {min(plain) / min(lean):.3f}x, "
          f"median {statistics.median(plain) / statistics.median(lean):.3f}x")


if __name__ == "__main__":
    main()
