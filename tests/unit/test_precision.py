"""The ``precision`` setting: "auto" on the CPU is plain float32 bit for bit; bf16 autocast keeps the head gates
and physical pruning equivalent to their float32 results within a stated tolerance.

Tolerance: ``TOL = 5e-2``, a norm-wise relative error ``||x_bf16 - x_fp32|| / ||x_fp32||``. Measured on CPU
autocast (torch 2.13) with the tiny BERT below (initializer_range 0.2, so that heads change the logits by 5-90%;
with the default 0.02 a head moves the logits less than bf16 rounding does, and no comparison could fail):

- the fixed model and inputs of these tests: gated logits 5.6e-3 (zero) and 7.6e-3 (uniform), ungated 4.8e-3;
  per-head gated contexts at most 9.3e-3; pruned vs zero-gated under bf16 0 (identical kernels), pruned bf16 vs
  zero-gated fp32 5.3e-3;
- over 32 model seeds: gated logits at most 2.5e-2 (ungated 2.3e-2), so TOL keeps a 2x margin for other CPUs
  and for CUDA's kernels;
- gate gradients (``uniform``, seed 0) 2.2e-2, at most 3.8e-2 over 8 seeds: checked against ``2 * TOL``.

Each comparison also checks that what it compares moves by more than ``2 * TOL`` when the gates are ignored
(0.16-2.7 here), so a gate that silently stopped acting under bf16 fails the test. A zero gate is exact in bf16
too (``0 * x == 0``): the zero-gated heads' contexts are compared with ``torch.equal``.
"""
from __future__ import annotations

import contextlib
import copy

import numpy as np
import pytest
import torch

from conftest import tiny_inputs, tiny_model
from headprune_utils.tasks.batching import Encoded, collate, train_batches
from headprune_utils.model.gates import capture_head_contexts, head_gates
from headprune_utils.model.precision import PRECISIONS, autocast_context, check_precision, resolve_precision
from headprune_utils.model.pruning import prune_heads
from headprune_utils.train.training import TrainConfig, _optimizer, evaluate, finetune, predict

TOL = 5e-2  # relative error of bf16 vs fp32 (module docstring); worst measured 2.5e-2 (logits, 32 seeds)

# layer 0: head 1 removed; layer 1: heads 0 and 3 removed; layer 2: head 2 scaled by 0.3
GATES = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.3, 1.0]])
MASK = (GATES == 1).float()


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm())


def sensitive_model(seed: int = 0, device="cpu"):
    """A tiny random BERT whose heads matter (initializer_range 0.2: see the module docstring)."""
    return tiny_model(seed=seed, initializer_range=0.2).to(device)


def bf16_inputs(device="cpu"):
    return {k: v.to(device) for k, v in tiny_inputs(batch=4, seq=12, seed=1).items()}


def forward(model, inputs, precision, gates=None, ablation="zero"):
    """(logits, per-layer gated head contexts) of one no-grad forward under ``precision``."""
    device = next(model.parameters()).device
    gate = contextlib.nullcontext() if gates is None else head_gates(model, gates.to(device), ablation)
    with torch.no_grad(), gate, capture_head_contexts(model) as contexts, autocast_context(device, precision):
        logits = model(**inputs).logits
    return logits, dict(contexts)


class AutocastProbe:
    """Records, at every forward of ``model``, whether autocast is on for the model's device."""

    def __init__(self, model):
        self.seen: list[bool] = []
        device_type = next(model.parameters()).device.type
        self.handle = model.register_forward_pre_hook(
            lambda module, args: self.seen.append(torch.is_autocast_enabled(device_type)))

    def close(self):
        self.handle.remove()


def regression_data(n: int = 6, length: int = 7, seed: int = 0) -> Encoded:
    """Sentences of one length (one batch, no padding order to restore) with float targets."""
    rng = np.random.default_rng(seed)
    ids = [[2] + [int(x) for x in rng.integers(5, 120, size=length - 2)] + [3] for _ in range(n)]
    return Encoded(ids, None, rng.normal(size=n).astype(np.float32), pad_id=0)


# ---------------------------------------------------------------------------------------------- the setting


def test_precision_choices_and_what_they_mean_on_the_cpu():
    assert PRECISIONS == ("auto", "fp32", "bf16")
    model = tiny_model()
    assert resolve_precision("cpu", "auto") == "fp32" and resolve_precision(model, "auto") == "fp32"
    assert resolve_precision(torch.device("cpu"), "bf16") == "bf16"
    # "auto" and "fp32" enter no autocast context at all on the CPU
    for p in ("auto", "fp32"):
        ctx = autocast_context("cpu", p)
        assert isinstance(ctx, contextlib.nullcontext)
        with ctx:
            assert not torch.is_autocast_enabled("cpu")
    with autocast_context("cpu", "bf16"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("bad", ["fp16", "BF16", "float32", "", None, 16])
def test_a_bad_precision_is_a_value_error_naming_the_parameter(bad):
    for call in (lambda: check_precision(bad), lambda: autocast_context("cpu", bad),
                 lambda: resolve_precision("cpu", bad)):
        with pytest.raises(ValueError, match="precision"):
            call()


def test_training_functions_refuse_a_bad_precision_before_doing_anything():
    model = tiny_model(num_labels=1)
    before = [p.detach().clone() for p in model.parameters()]
    enc = regression_data()
    cfg = TrainConfig(epochs=1, batch_size=8)
    for call in (lambda: predict(model, enc, precision="half"),
                 lambda: evaluate(model, enc, "stsb", precision="half"),
                 lambda: finetune(model, enc, "stsb", cfg, seed=0, progress=False, precision="half")):
        with pytest.raises(ValueError, match="precision"):
            call()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


# ---------------------------------------------------------------------- (a) "auto" on the CPU: plain float32


def test_auto_on_the_cpu_predicts_exactly_the_plain_float32_forward():
    model = tiny_model(num_labels=1, initializer_range=0.2)  # a regression head: predict returns the raw scores
    enc = regression_data()
    batch = collate(enc, np.arange(len(enc)))
    batch.pop("labels")
    with torch.no_grad():
        plain = model(**batch).logits.squeeze(-1).double().numpy()  # no precision code involved at all
    probe = AutocastProbe(model)
    try:
        auto = predict(model, enc, precision="auto")
        default = predict(model, enc)
        fp32 = predict(model, enc, precision="fp32")
        assert probe.seen == [False, False, False]
        bf16 = predict(model, enc, precision="bf16")
        assert probe.seen[-1] is True
    finally:
        probe.close()
    assert np.array_equal(auto, plain) and np.array_equal(default, plain) and np.array_equal(fp32, plain)
    # the comparison is not vacuous: bf16 autocast does change the numbers (a little)
    assert not np.array_equal(bf16, plain) and rel(torch.as_tensor(bf16), torch.as_tensor(plain)) < TOL


def test_auto_on_the_cpu_trains_exactly_like_a_plain_float32_step():
    enc = regression_data(n=5)
    cfg = TrainConfig(epochs=1, batch_size=8, warmup_ratio=0.0, lr=1e-3)  # one step, learning-rate factor 1
    seed = 4

    # the reference: one hand-written float32 step (same batch, optimizer and clipping as finetune)
    ref = tiny_model(num_labels=1, initializer_range=0.2).train()
    opt = _optimizer(ref, cfg)
    index = train_batches(enc.lengths, cfg.batch_size, seed=seed * 1000)[0]
    loss = ref(**collate(enc, index)).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), cfg.max_grad_norm)
    opt.step()

    runs = {}
    for precision in ("auto", None, "fp32", "bf16"):
        model = tiny_model(num_labels=1, initializer_range=0.2)
        probe = AutocastProbe(model)
        kwargs = {} if precision is None else {"precision": precision}
        history = finetune(model, enc, "stsb", cfg, seed=seed, progress=False, **kwargs)
        probe.close()
        runs[precision] = (model, history, probe.seen)
    for precision in ("auto", None, "fp32"):
        model, history, seen = runs[precision]
        assert seen == [False]
        assert history[0]["train_loss"] == loss.item()
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters())), precision
    # bf16 trained under autocast, kept float32 weights, and moved them differently (not vacuous)
    model, history, seen = runs["bf16"]
    assert seen == [True]
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert not all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters()))
    assert history[0]["train_loss"] == pytest.approx(loss.item(), rel=TOL)


# --------------------------------------------------------------- (b) gates under bf16, (c) pruning under bf16


def check_gated_forward(device, precision):
    """bf16 gated logits vs fp32 gated logits (zero and uniform ablation) within TOL, on ``device``."""
    model = sensitive_model(device=device)
    inputs = bf16_inputs(device)
    plain, _ = forward(model, inputs, "fp32")
    for ablation in ("zero", "uniform"):
        ref, _ = forward(model, inputs, "fp32", GATES, ablation)
        low, _ = forward(model, inputs, precision, GATES, ablation)
        assert low.dtype == torch.bfloat16  # autocast really ran
        err = rel(low, ref)
        assert err < TOL, f"{ablation}: bf16 vs fp32 relative error {err:.2e} >= {TOL}"
        # sensitivity: ignoring the gates would be caught
        assert rel(plain, ref) > 2 * TOL, ablation
        assert rel(low, plain) > 2 * TOL, ablation


def check_zero_gate_removes_the_head(device, precision):
    """Under bf16 the gated contexts stay bf16, a zero gate zeroes its head exactly (as in fp32), a uniform
    ablation replaces it by the uniform mean as in fp32 (within TOL), and the kept heads match fp32 within TOL."""
    model = sensitive_model(device=device)
    inputs = bf16_inputs(device)
    _, plain = forward(model, inputs, "fp32")
    for ablation in ("zero", "uniform"):
        _, ref = forward(model, inputs, "fp32", GATES, ablation)
        _, low = forward(model, inputs, precision, GATES, ablation)
        for layer in range(3):
            assert low[layer].dtype == torch.bfloat16, "the gate hook must keep the activations' dtype"
            for head in range(4):
                g = float(GATES[layer, head])
                a, b = low[layer][:, :, head], ref[layer][:, :, head]
                if ablation == "zero" and g == 0:
                    assert torch.equal(a, torch.zeros_like(a)) and torch.equal(b, torch.zeros_like(b))
                    continue
                err = rel(a, b)
                assert err < TOL, f"{ablation} layer {layer} head {head} (gate {g}): {err:.2e}"
                if g < 1:  # the ablation really acted (compared with the ungated head)
                    assert rel(plain[layer][:, :, head], b) > 2 * TOL, (ablation, layer, head)


def check_pruned_matches_zero_gated(device, precision):
    """A physically pruned model under bf16 equals the zero-gated one under bf16, and the fp32 one, within TOL."""
    model = sensitive_model(device=device)
    inputs = bf16_inputs(device)
    plain, _ = forward(model, inputs, "fp32")
    gated_fp32, _ = forward(model, inputs, "fp32", MASK)
    gated_low, _ = forward(model, inputs, precision, MASK)
    pruned = prune_heads(copy.deepcopy(model), MASK)
    pruned_low, _ = forward(pruned, inputs, precision)
    assert pruned_low.dtype == torch.bfloat16
    assert rel(pruned_low, gated_low) < TOL
    assert rel(pruned_low, gated_fp32) < TOL
    assert rel(plain, gated_fp32) > 2 * TOL  # the pruning matters


def test_bf16_gated_forward_matches_fp32_within_tolerance():
    check_gated_forward("cpu", "bf16")


def test_bf16_zero_gate_removes_the_heads_contribution_as_in_fp32():
    check_zero_gate_removes_the_head("cpu", "bf16")


def test_bf16_pruned_model_matches_the_zero_gated_model():
    check_pruned_matches_zero_gated("cpu", "bf16")


def test_bf16_gates_keep_their_gradient_and_the_weights_stay_float32():
    """Gates that require grad (gradient importance, L0) get a float32 gradient through the bf16 cast,
    close to the fp32 one."""
    model = sensitive_model()
    inputs = bf16_inputs()
    labels = torch.tensor([0, 1, 2, 1])
    grads = {}
    for precision in ("fp32", "bf16"):
        g = GATES.clone().requires_grad_(True)
        with head_gates(model, g, "uniform"), autocast_context("cpu", precision):
            loss = torch.nn.functional.cross_entropy(model(**inputs).logits.float(), labels)
        loss.backward()
        grads[precision] = g.grad
    assert grads["bf16"].dtype == torch.float32
    assert rel(grads["bf16"], grads["fp32"]) < 2 * TOL  # gradients: measured 2.2e-2 (3.8e-2 worst seed)
    assert all(p.dtype == torch.float32 for p in model.parameters())


# ------------------------------------------------------------------------------------------ (e) on CUDA


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_auto_on_cuda_runs_bf16_with_gates_and_pruning_within_tolerance():
    if not torch.cuda.is_bf16_supported():
        pytest.skip("this CUDA device has no bfloat16")
    assert resolve_precision("cuda", "auto") == "bf16"
    check_gated_forward("cuda", "auto")
    check_zero_gate_removes_the_head("cuda", "auto")
    check_pruned_matches_zero_gated("cuda", "auto")


# ------------------------------------------------------------------------------------------ translation


def test_translation_auto_is_plain_float32_and_bf16_stays_close():
    from headprune_utils.tasks.subword import train_tokenizer
    from headprune_utils.train.translation import NMTTrainConfig, dev_loss, encode_pairs, train_translation, translate
    from headprune_utils.tasks.translation_data import ParallelData
    from headprune_utils.model.translation_model import NMTModelConfig, build_translation_model

    src = ["a man rides a red bike .", "two dogs play in the snow .", "a woman is reading a book !"]
    tgt = ["ein Mann fährt ein rotes Fahrrad .", "zwei Hunde spielen im Schnee .", "eine Frau liest ein Buch !"]
    tok = train_tokenizer(src + tgt, vocab_size=120)
    enc = encode_pairs(tok, ParallelData("toy", "train", "en", "de", src, tgt, "test"))
    tiny = NMTModelConfig(encoder_layers=2, decoder_layers=2, heads=4, d_model=32, ffn_dim=64, dropout=0.0,
                          max_positions=64)
    cfg = NMTTrainConfig(max_steps=3, batch_size=3, lr=3e-3, warmup_steps=1, eval_every=3)
    runs = {}
    for precision in ("auto", "fp32", "bf16"):
        model = build_translation_model(tiny, tok, seed=0)
        probe = AutocastProbe(model)
        result = train_translation(model, enc, enc, cfg, seed=0, progress=False, precision=precision)
        probe.close()
        runs[precision] = (model, result, probe.seen)
    auto, fp32, bf16 = runs["auto"], runs["fp32"], runs["bf16"]
    # the 3 training forwards under autocast, the dev batch (early stopping) in float32
    assert not any(auto[2]) and bf16[2] == [True, True, True, False]
    assert [r["train_loss"] for r in auto[1].history] == [r["train_loss"] for r in fp32[1].history]
    assert all(torch.equal(a, b) for a, b in zip(auto[0].parameters(), fp32[0].parameters()))
    assert all(p.dtype == torch.float32 for p in bf16[0].parameters())
    assert not all(torch.equal(a, b) for a, b in zip(bf16[0].parameters(), fp32[0].parameters()))
    model = fp32[0]
    gates = {"enc": torch.tensor([[1.0, 0, 1, 1], [1, 1, 1, 0]]), "cross": torch.tensor([[1.0, 1, 0, 1], [0, 1, 1, 1]])}
    plain = dev_loss(model, enc, gates=gates)
    assert dev_loss(model, enc, gates=gates, precision="auto") == plain
    assert dev_loss(model, enc, gates=gates, precision="bf16") == pytest.approx(plain, rel=TOL)
    out = translate(model, tok, src, gates=gates, precision="bf16")
    assert len(out) == 3 and all(isinstance(t, str) for t in out)
    with pytest.raises(ValueError, match="precision"):
        translate(model, tok, src, precision="fp16")


# ------------------------------------------------------------------------------------------ cache keys


def test_training_keys_change_only_where_training_is_bf16(monkeypatch):
    """bf16-trained models and cells never share a key with float32-trained ones; on the CPU the keys are those
    made before the setting existed."""
    from headprune_utils.studies import glue_workbench
    from headprune_utils.model.precision import training_key
    from headprune_utils.studies.random_pruning import RandomPruningConfig

    cfg = RandomPruningConfig()
    cpu = glue_workbench.training_fingerprint(cfg, torch.device("cpu"))
    assert training_key("cpu") == {}
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert training_key(torch.device("cuda")) == {"training_precision": "bf16"}
    cuda_bf16 = glue_workbench.training_fingerprint(cfg, torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    cuda_fp32 = glue_workbench.training_fingerprint(cfg, torch.device("cuda"))
    assert len({cpu, cuda_bf16, cuda_fp32}) == 3
    assert glue_workbench.training_fingerprint(cfg, torch.device("cpu")) == cpu


@pytest.mark.data
def test_the_committed_standard_models_keep_their_cache_key(data_root):
    """The key of the standard profile's seed-0 SST-2 model, computed before the precision setting existed
    (the folder name in outputs/_finetuned/standard/): unchanged on the CPU."""
    from headprune_utils.studies import config, glue_workbench
    from headprune_utils.studies.random_pruning import RandomPruningConfig

    overrides = config.load_profile("standard")["random_pruning"]
    cfg = config.validate(RandomPruningConfig, {**overrides, "data_dir": str(data_root)}, where="standard")
    key = glue_workbench.training_fingerprint(cfg, torch.device("cpu"), "SST-2")
    assert key == "0a6d5b8deb5e3d83"
