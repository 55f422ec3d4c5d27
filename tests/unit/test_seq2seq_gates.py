"""Gates and physical pruning on the three attention types of an encoder-decoder (tiny random Marian).

The same invariants as the encoder's: all-ones gates change nothing (bit for bit), a zero gate equals the
physically removed head (teacher-forced logits and greedy decoding with a KV cache), gates on one type leave
the others alone, and the gates are differentiable.
"""
from __future__ import annotations

import math

import pytest
import torch

from headprune_utils.model.architecture import (
    SEQ2SEQ_KINDS, attention_sites, head_shape, is_encoder_decoder, kept_heads, present_mask,
)
from headprune_utils.model.gates import capture_head_contexts, head_gates, head_means
from headprune_utils.model.pruning import count_attention_params, prune_heads

PAD, BOS, EOS = 0, 1, 2
SHAPES = {"enc": (2, 4), "dec": (3, 4), "cross": (3, 4)}  # enc and dec depths differ on purpose


def tiny_marian(seed: int = 0, attn: str = "sdpa", dtype=torch.float32, family: str = "marian"):
    from transformers import BartConfig, BartForConditionalGeneration, MarianConfig, MarianMTModel

    torch.manual_seed(seed)
    common = dict(vocab_size=40, d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
                  decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64,
                  dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=PAD, bos_token_id=BOS,
                  eos_token_id=EOS, decoder_start_token_id=BOS, forced_eos_token_id=None)
    if family == "marian":
        model = MarianMTModel(MarianConfig(**common, attn_implementation=attn))
    else:
        model = BartForConditionalGeneration(BartConfig(**common, attn_implementation=attn))
    return model.to(dtype).eval()


def tiny_batch(seed: int = 1, batch: int = 3, src_len: int = 9, tgt_len: int = 7):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 40, (batch, src_len), generator=g)
    att = torch.ones(batch, src_len, dtype=torch.long)
    labels = torch.randint(3, 40, (batch, tgt_len), generator=g)
    for b in range(batch):  # ragged source and target lengths, as in real batches
        n = src_len - 2 * b
        src[b, n - 1], src[b, n:], att[b, n:] = EOS, PAD, 0
        m = tgt_len - b
        labels[b, m - 1], labels[b, m:] = EOS, -100
    dec_in = torch.full_like(labels, PAD)
    dec_in[:, 0] = BOS
    dec_in[:, 1:] = labels[:, :-1].clamp_min(PAD)
    return {"input_ids": src, "attention_mask": att, "decoder_input_ids": dec_in, "labels": labels}


def logits(model, batch):
    with torch.no_grad():
        return model(**{k: v for k, v in batch.items() if k != "labels"}).logits


def greedy(model, batch, n: int = 8):
    with torch.no_grad():
        out = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], do_sample=False,
                             num_beams=1, max_new_tokens=n, min_new_tokens=n, use_cache=True,
                             output_scores=True, return_dict_in_generate=True)
    return out.sequences, torch.stack(out.scores)


def random_mask(shape, seed: int, p_keep: float = 0.5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) < p_keep).float()


def n_hooks(model) -> int:
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


def test_layout_names_the_three_attention_types():
    model = tiny_marian()
    assert is_encoder_decoder(model)
    assert head_shape(model) == SHAPES
    assert head_shape(model.config, "cross") == (3, 4)
    base = model.model
    for kind, stack, attr in (("enc", base.encoder, "self_attn"), ("dec", base.decoder, "self_attn"),
                              ("cross", base.decoder, "encoder_attn")):
        sites = attention_sites(model, kind)
        assert [s.layer for s in sites] == list(range(SHAPES[kind][0]))
        for site, layer in zip(sites, stack.layers):
            assert site.kind == kind and site.module is getattr(layer, attr)
            assert site.out_proj is getattr(layer, attr).out_proj and site.head_dim == 8
    assert len(attention_sites(model)) == 8
    assert kept_heads(model) == {k: [[0, 1, 2, 3]] * n for k, (n, _) in SHAPES.items()}
    assert {k: m.shape for k, m in present_mask(model).items()} == {k: torch.Size(s) for k, s in SHAPES.items()}
    with pytest.raises(ValueError, match="unknown attention type"):
        attention_sites(model, "encoder")


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_all_ones_gates_change_nothing_exactly(attn, ablation):
    model = tiny_marian(attn=attn)
    batch = tiny_batch()
    base = logits(model, batch)
    base_tokens, base_scores = greedy(model, batch)
    means = {k: torch.randn(*s, 8) for k, s in SHAPES.items()}
    ones = {k: torch.ones(s) for k, s in SHAPES.items()}
    with head_gates(model, ones, ablation=ablation, means=means):
        assert torch.equal(logits(model, batch), base)
        tokens, scores = greedy(model, batch)
    assert torch.equal(tokens, base_tokens) and torch.equal(scores, base_scores)
    with head_gates(model, {"enc": torch.ones(2, 4)}, ablation="uniform"):
        assert torch.equal(logits(model, batch), base)


@pytest.mark.parametrize("kind", SEQ2SEQ_KINDS)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_zero_gate_equals_removed_head_per_type(kind, seed, attn):
    model = tiny_marian(seed=seed, attn=attn)
    batch = tiny_batch(seed=seed)
    mask = random_mask(SHAPES[kind], seed)
    mask[0, 1] = 0.0
    with head_gates(model, {kind: mask}):
        gated = logits(model, batch)
        gated_tokens, gated_scores = greedy(model, batch)
    assert not torch.allclose(gated, logits(model, batch))  # the gate does something
    prune_heads(model, {kind: mask})
    assert torch.equal(present_mask(model, kind), mask)
    assert torch.allclose(logits(model, batch), gated, atol=1e-5)
    tokens, scores = greedy(model, batch)
    assert torch.equal(tokens, gated_tokens)
    assert torch.allclose(scores, gated_scores, atol=1e-4)


def test_all_types_together_whole_layers_removed_and_generation_with_cache():
    """Every type at once, with layers that lose ALL their heads (decoder layer 0 included, whose KV cache
    the decoder reads its position from); greedy decoding with the cache equals decoding without it."""
    model = tiny_marian(seed=3)
    batch = tiny_batch(seed=3)
    mask = {k: random_mask(s, seed=10 + i) for i, (k, s) in enumerate(SHAPES.items())}
    mask["enc"][1] = 0.0
    mask["dec"][0] = 0.0
    mask["cross"][2] = 0.0
    mask["cross"][0, 0] = 1.0
    with head_gates(model, mask):
        gated = logits(model, batch)
        gated_tokens, gated_scores = greedy(model, batch, n=10)
    prune_heads(model, mask)
    assert kept_heads(model, "dec")[0] == [] and kept_heads(model, "enc")[1] == []
    assert torch.allclose(logits(model, batch), gated, atol=1e-5)
    tokens, scores = greedy(model, batch, n=10)
    assert torch.equal(tokens, gated_tokens)
    assert torch.allclose(scores, gated_scores, atol=1e-4)
    with torch.no_grad():
        no_cache = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                  do_sample=False, max_new_tokens=10, min_new_tokens=10, use_cache=False)
    assert torch.equal(no_cache, tokens)
    # gates over original ids still work on the pruned model (absent heads are ignored)
    ones = {k: torch.ones(s) for k, s in SHAPES.items()}
    with head_gates(model, ones):
        assert torch.equal(logits(model, batch), logits(model, batch))


def test_everything_removed_still_runs_like_all_zero_gates():
    model = tiny_marian()
    batch = tiny_batch()
    zeros = {k: torch.zeros(s) for k, s in SHAPES.items()}
    with head_gates(model, zeros):
        gated = logits(model, batch)
        gated_tokens, _ = greedy(model, batch)
    prune_heads(model, zeros)
    assert count_attention_params(model) == 8 * 32  # only the output-projection biases remain
    assert torch.allclose(logits(model, batch), gated, atol=1e-5)
    assert torch.equal(greedy(model, batch)[0], gated_tokens)


def test_gates_on_one_type_leave_the_others_alone():
    model = tiny_marian(seed=2)
    batch = tiny_batch(seed=2)
    with torch.no_grad(), capture_head_contexts(model) as store:
        model(**batch)
        base = dict(store)
    for kind, (n_layers, _) in SHAPES.items():
        for layer in range(n_layers):
            mask = torch.ones(SHAPES[kind])
            mask[layer, 2] = 0.0
            with torch.no_grad(), capture_head_contexts(model) as store, head_gates(model, {kind: mask}):
                out = model(**batch)
                got = dict(store)
            # capture_head_contexts (entered first) sees each site's input before the gate: every site up to the
            # gated one, in the order the forward runs them, is untouched, and so is the decoder's first
            # self-attention (it reads no encoder output); every other site after it changes
            order = [("enc", l) for l in range(2)] + [(k, l) for l in range(3) for k in ("dec", "cross")]
            at = order.index((kind, layer))
            untouched = set(order[: at + 1]) | {("dec", 0)}
            for key in order:
                if key in untouched:
                    assert torch.equal(got[key], base[key]), (kind, layer, key)
                else:
                    assert not torch.allclose(got[key], base[key]), (kind, layer, key)
            if kind != "enc":  # decoder gates never reach the encoder
                assert torch.equal(out.encoder_last_hidden_state, model(**batch).encoder_last_hidden_state)


def test_gated_head_output_is_zero_and_only_that_head():
    """Read what the out_proj receives AFTER the gate (a pre-hook registered after the gate's): the gated
    head's slice is exactly 0, the other heads of that site are exactly the ungated contexts."""
    model = tiny_marian(seed=4)
    batch = tiny_batch(seed=4)
    for kind in SEQ2SEQ_KINDS:
        site = attention_sites(model, kind)[1]
        seen = {}

        def probe(module, args):
            seen["x"] = args[0].detach().clone().view(*args[0].shape[:2], 4, 8)

        mask = torch.ones(SHAPES[kind])
        mask[1, 3] = 0.0
        with torch.no_grad():
            handle = site.out_proj.register_forward_pre_hook(probe)
            model(**batch)
            handle.remove()
            before = seen["x"]
            with head_gates(model, {kind: mask}):
                handle = site.out_proj.register_forward_pre_hook(probe)  # runs after the gate's pre-hook
                model(**batch)
                handle.remove()
        after = seen["x"]
        assert bool((after[:, :, 3] == 0).all())
        assert torch.equal(after[:, :, :3], before[:, :, :3])


def reference_encoder(model, batch, gates=None, ablation="zero", means=None):
    """A hand-written Marian encoder (post-LN, sinusoidal positions), with per-head probabilities computed
    explicitly; an ablated head's context is scaled, or replaced by uniform attention over the real tokens or
    by its mean. Independent of headprune_utils.model.gates."""
    enc = model.model.encoder
    ids, mask = batch["input_ids"], batch["attention_mask"]
    b, s = ids.shape
    x = enc.embed_tokens(ids) * enc.embed_scale + enc.embed_positions(ids.shape)
    dtype = x.dtype
    additive = (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
    for l, layer in enumerate(enc.layers):
        a = layer.self_attn
        q, k, v = (f(x).view(b, s, 4, 8).transpose(1, 2) for f in (a.q_proj, a.k_proj, a.v_proj))
        ctx = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8) + additive, dim=-1) @ v  # [b, H, s, d]
        if gates is not None:
            g = gates[l].to(dtype).view(1, 4, 1, 1)
            if ablation == "zero":
                ctx = ctx * g
            elif ablation == "uniform":
                pu = mask[:, None, None, :].to(dtype).expand(b, 4, s, s)
                ctx = g * ctx + (1 - g) * ((pu / pu.sum(-1, keepdim=True)) @ v)
            else:
                ctx = g * ctx + (1 - g) * means[l].to(dtype).view(1, 4, 1, 8)
        h = layer.self_attn_layer_norm(x + a.out_proj(ctx.transpose(1, 2).reshape(b, s, 32)))
        x = layer.final_layer_norm(h + layer.fc2(layer.activation_fn(layer.fc1(h))))
    return x


@pytest.mark.parametrize("ablation", ["zero", "uniform", "mean"])
def test_encoder_gates_match_reference_forward(ablation):
    model = tiny_marian(dtype=torch.float64)
    batch = tiny_batch()
    g = torch.Generator().manual_seed(5)
    gates = torch.rand(2, 4, generator=g).double()
    gates[1, 0] = 0.0
    means = {"enc": torch.randn(2, 4, 8, dtype=torch.float64)}
    encoder = model.get_encoder()
    with torch.no_grad():
        plain = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        assert torch.allclose(reference_encoder(model, batch), plain, atol=1e-10)
        with head_gates(model, {"enc": gates}, ablation=ablation, means=means):
            got = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        ref = reference_encoder(model, batch, gates, ablation, means["enc"])
    assert torch.allclose(got, ref, atol=1e-10), (got - ref).abs().max()


def test_uniform_encoder_gates_under_generate_and_unsupported_types():
    model = tiny_marian()
    batch = tiny_batch()
    mask = torch.ones(2, 4)
    mask[0, 2] = 0.0
    with head_gates(model, {"enc": mask}, ablation="uniform"):
        uni = greedy(model, batch)[1]
    with head_gates(model, {"enc": mask}, ablation="zero"):
        zero = greedy(model, batch)[1]
    assert not torch.allclose(uni, zero)
    for kind in ("dec", "cross"):
        with pytest.raises(ValueError, match='ablation="uniform" is implemented for'):
            with head_gates(model, {kind: torch.ones(SHAPES[kind])}, ablation="uniform"):
                pass
    # mixing ablations: nested blocks
    with head_gates(model, {"enc": mask}, ablation="uniform"), head_gates(model, {"dec": torch.zeros(3, 4)}):
        greedy(model, batch)
    assert n_hooks(model) == 0


def test_bad_gates_are_refused_clearly():
    model = tiny_marian()
    with pytest.raises(ValueError, match="dict by attention type"):
        with head_gates(model, torch.ones(2, 4)):
            pass
    with pytest.raises(ValueError, match=r"unknown attention type\(s\) \['decoder'\]"):
        with head_gates(model, {"decoder": torch.ones(3, 4)}):
            pass
    with pytest.raises(ValueError, match=r'gates\["cross"\] must have shape \[n_layers, n_heads\] = \[3, 4\]'):
        with head_gates(model, {"cross": torch.ones(2, 4)}):
            pass
    with pytest.raises(ValueError, match="means lack"):
        with head_gates(model, {"dec": torch.ones(3, 4)}, ablation="mean", means={"enc": torch.zeros(2, 4, 8)}):
            pass
    with pytest.raises(ValueError, match="dict by attention type"):
        prune_heads(model, torch.ones(2, 4))
    with pytest.raises(ValueError, match="only 0"):
        prune_heads(model, {"dec": torch.full((3, 4), 0.5)})
    assert n_hooks(model) == 0


def test_pruning_twice_and_keeping_a_removed_head_is_an_error():
    once, twice = tiny_marian(), tiny_marian()
    batch = tiny_batch()
    first = {"dec": torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]], dtype=torch.float32)}
    second = {"dec": first["dec"].clone(), "cross": torch.ones(3, 4)}
    second["dec"][0, 3] = 0
    second["cross"][1, :2] = 0
    prune_heads(once, second)
    prune_heads(twice, first)
    prune_heads(twice, second)
    assert kept_heads(twice, "dec") == [[0, 2], [0, 1, 2, 3], [1, 2, 3]]
    assert kept_heads(twice, "cross")[1] == [2, 3] and kept_heads(twice, "enc") == [[0, 1, 2, 3]] * 2
    assert torch.allclose(logits(once, batch), logits(twice, batch), atol=1e-6)
    with pytest.raises(ValueError, match=r"dec layer 0: heads \[1, 3\] were already pruned"):
        prune_heads(twice, {"dec": torch.ones(3, 4), "cross": torch.zeros(3, 4)})
    assert kept_heads(twice, "cross")[1] == [2, 3]  # nothing changed by the refused call


@pytest.mark.parametrize("kind", SEQ2SEQ_KINDS)
def test_gradients_reach_gates_and_match_finite_differences(kind):
    model = tiny_marian(dtype=torch.float64)
    batch = tiny_batch()
    gates = {k: torch.full(s, 0.7, dtype=torch.float64, requires_grad=True) for k, s in SHAPES.items()}
    with head_gates(model, gates) as handle:
        assert handle[kind] is gates[kind]
        loss = model(**batch).loss
    loss.backward()
    for k in SEQ2SEQ_KINDS:
        assert gates[k].grad is not None and bool((gates[k].grad != 0).all()), k
    eps = 1e-6
    for l, h in [(0, 0), (1, 3)]:
        vals = []
        for sign in (1, -1):
            g = {k: v.detach().clone() for k, v in gates.items()}
            g[kind][l, h] += sign * eps
            with torch.no_grad(), head_gates(model, g):
                vals.append(model(**batch).loss.item())
        fd = (vals[0] - vals[1]) / (2 * eps)
        assert gates[kind].grad[l, h].item() == pytest.approx(fd, rel=1e-5, abs=1e-8)


def test_head_means_by_type_and_mean_ablation_of_a_pruned_model():
    model = tiny_marian(dtype=torch.float64)
    batch = tiny_batch()
    means = head_means(model, [batch])
    assert {k: tuple(m.shape) for k, m in means.items()} == {k: (*s, 8) for k, s in SHAPES.items()}
    # direct: cross-attention contexts of layer 2, averaged over the real target positions
    with torch.no_grad(), capture_head_contexts(model) as store:
        model(**batch)
    w = (batch["labels"] != -100).double()
    direct = torch.einsum("bshd,bs->hd", store[("cross", 2)], w) / w.sum()
    assert torch.allclose(means["cross"][2].double(), direct, atol=1e-6)
    w = batch["attention_mask"].double()
    direct = torch.einsum("bshd,bs->hd", store[("enc", 1)], w) / w.sum()
    assert torch.allclose(means["enc"][1].double(), direct, atol=1e-6)
    # a gate of 0 with mean ablation replaces the head by its mean: same on the pruned model for kept heads
    mask = {"dec": torch.ones(3, 4)}
    mask["dec"][2, 1] = 0
    with head_gates(model, mask, ablation="mean", means=means):
        before = logits(model, batch)
    prune_heads(model, {"cross": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 1], [1, 1, 1, 1]])})
    means_pruned = head_means(model, [batch])
    assert bool((means_pruned["cross"][1, 2] == 0).all())
    with head_gates(model, mask, ablation="mean", means=means):
        after = logits(model, batch)
    assert not torch.allclose(before, after)  # the cross head is gone, the mean ablation on dec still runs


def test_bart_has_the_same_layout_and_equivalence():
    model = tiny_marian(family="bart")
    batch = tiny_batch()
    assert head_shape(model) == SHAPES
    mask = {k: random_mask(s, seed=20 + i) for i, (k, s) in enumerate(SHAPES.items())}
    with head_gates(model, mask):
        gated = logits(model, batch)
        gated_tokens = greedy(model, batch)[0]
    prune_heads(model, mask)
    assert torch.allclose(logits(model, batch), gated, atol=1e-5)
    assert torch.equal(greedy(model, batch)[0], gated_tokens)


def test_one_grid_models_refuse_dicts_and_kinds():
    from conftest import tiny_model

    bert = tiny_model()
    with pytest.raises(ValueError, match="one grid of heads"):
        with head_gates(bert, {"enc": torch.ones(3, 4)}):
            pass
    with pytest.raises(ValueError, match="one grid of heads"):
        prune_heads(bert, {"enc": torch.ones(3, 4)})
    with pytest.raises(ValueError, match="kind='enc' is for encoder-decoder"):
        head_shape(bert, "enc")
    assert head_shape(bert) == (3, 4) and not is_encoder_decoder(bert)
