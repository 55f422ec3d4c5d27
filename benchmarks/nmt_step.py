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
        [--steps 10] [--rounds 3] [--threads 1]
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
from headprune_utils.model.translation_model import build_translation_model  # noqa: E402
from headprune_utils.run import profiles  # noqa: E402
from headprune_utils.store.paths import StudyPaths  # noqa: E402
from headprune_utils.studies.nmt_heads import Context  # noqa: E402
from headprune_utils.tasks.subword import train_tokenizer  # noqa: E402
from headprune_utils.train import translation as tr  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="standard-next")
    parser.add_argument("--steps", type=int, default=10, help="timed steps of a variant in a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sections = profiles.validate_profile(args.profile, ["nmt_heads"])
    _, cfg = profiles.study_config("nmt_heads", sections["nmt_heads"], args.profile)
    ctx = Context(cfg, torch.device("cpu"), StudyPaths("nmt_heads", args.profile, staged=False))
    train = ctx.data()[0]
    tok = train_tokenizer(train.src + train.tgt, vocab_size=cfg.vocab_size, model=cfg.tokenizer_model)
    enc = tr.encode_pairs(tok, train, cfg.max_length, drop_longer=True)
    tc = cfg.train_config()
    batches = [tr.collate_pairs(enc, i) for i in tr._epoch_batches(enc.lengths, tc, 0, 0)[:args.steps + 1]]
    base = build_translation_model(cfg.model_config(), tok, seed=0).train()

    def run(nll: bool) -> float:
        model = copy.deepcopy(base)
        optim = tr._Optimization.build(model, tc)

        def step(batch):
            batch = dict(batch)
            labels = batch.pop("labels")
            loss = tr.label_smoothed_loss(model(**batch).logits, labels, tc.label_smoothing, nll=nll)[0]
            optim.step(loss, tc.max_grad_norm)

        step(batches[0])  # untimed warm-up
        t = time.perf_counter()
        for b in batches[1:]:
            step(b)
        return (time.perf_counter() - t) / args.steps

    times = {"plain (NLL every step)": [], "lean (no NLL)": []}
    for r in range(args.rounds):
        order = list(times) if r % 2 == 0 else list(times)[::-1]
        for name in order:
            times[name].append(run(nll=name.startswith("plain")))
    tokens = sum(int((b["labels"] != -100).sum()) for b in batches[1:]) / args.steps
    print(f"nmt_heads [{args.profile}]: d_model {cfg.d_model}, {cfg.encoder_layers}+{cfg.decoder_layers} layers, "
          f"vocabulary {len(tok)}, {tokens:.0f} target tokens a step, {args.threads} thread(s), "
          f"{args.steps} steps x {args.rounds} rounds")
    for name, ts in times.items():
        print(f"  {name:24s} best {min(ts):.3f} s/step, median {statistics.median(ts):.3f}")
    plain, lean = times["plain (NLL every step)"], times["lean (no NLL)"]
    print(f"  ratio plain / lean: best {min(plain) / min(lean):.3f}x, "
          f"median {statistics.median(plain) / statistics.median(lean):.3f}x")


if __name__ == "__main__":
    main()
