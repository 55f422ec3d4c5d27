"""The causal-LM adapters (GPT-2; GPT-NeoX / Pythia; Llama, Mistral, Qwen2, Qwen3 with grouped-query attention)
against the independent reference of ``reference.py``: gates, physical pruning (uneven groups, an emptied key/value
head, an empty layer), cached generation of pruned models, "uniform" over the visible keys, attention maps, head
means, gradients of the language-model loss in the gates, and Hard Concrete L0 gates."""
from __future__ import annotations

import copy
import functools

import pytest
import torch

from headprune_utils.model import architecture as A
from headprune_utils.model.attention import attention_maps
from headprune_utils.model.families.llama import GroupedQueryAttention
from headprune_utils.model.gates import capture_head_contexts, head_gates, head_means
from headprune_utils.model.pruning import count_attention_params, kv_mask_to_head_mask, prune_heads, prune_kv_groups

from . import reference as R
from .fixtures import FIXTURES

LLAMAS = ("llama_gqa", "llama_mqa", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gpt_oss", "gemma", "gemma2",
          "gemma3", "phi3", "olmo", "olmo2", "olmo3", "smollm3", "granite", "starcoder2", "cohere", "cohere2",
          "ministral", "seed_oss", "qwen2_moe", "helium", "ernie4_5", "arcee", "apertus", "exaone4", "hunyuan_v1_dense",
          "nanochat", "glm", "glm4", "stablelm", "stablelm_parallel", "llama4", "granite_hybrid", "granite_hybrid_rope", "bamba", "qwen3_next", "qwen3_5", "qwen3_5_moe", "nemotron_h")
GATED = ("qwen3_next", "qwen3_5", "qwen3_5_moe")  # gated attention: q_proj holds each head's query and gate rows
NEOX = ("gpt_neox", "gpt_neox_sequential")
OPTS = ("opt", "opt_post_norm")
MLA = ("deepseek_v3", "deepseek_v3_plain", "deepseek_v2")  # multi-head latent attention
ALIBI = ("bloom", "bloom_post_norm")  # fused rows head by head, as GPT-NeoX's; ALiBi
FALCONS = ("falcon_mq", "falcon_new", "falcon_rw")  # fused rows in three layouts; rotary or ALiBi through the mask
CAUSAL = ("gpt2",) + NEOX + OPTS + LLAMAS + MLA + ALIBI + FALCONS
PRUNED = tuple(n for n in CAUSAL if FIXTURES[n].prunable)  # OLMo 2/3 refuse pruning (tested below)
PRUNED_LLAMAS = tuple(n for n in LLAMAS if FIXTURES[n].prunable)
FAMILY_OF = {"llama4": "llama4", "granite_hybrid": "hybrid", "granite_hybrid_rope": "hybrid", "bamba": "hybrid",
             "qwen3_next": "qwen3_next", "qwen3_5": "qwen3_next", "qwen3_5_moe": "qwen3_next",
             "nemotron_h": "hybrid",
             "gpt2": "gpt2", "gpt_neox": "gpt_neox", "gpt_neox_sequential": "gpt_neox", "opt": "opt",
             "opt_post_norm": "opt", "phi3": "phi3", "olmo": "olmo", "olmo2": "olmo",
             "olmo3": "olmo", "deepseek_v3": "deepseek", "deepseek_v3_plain": "deepseek",
             "deepseek_v2": "deepseek", "bloom": "bloom", "bloom_post_norm": "bloom",
             **{n: "falcon" for n in FALCONS}}  # the rest: "llama"
CASES = [(n, impl) for n in CAUSAL for impl in FIXTURES[n].attn_implementations]
# pruning cases (kept query heads per layer; 4 query heads everywhere): uneven groups (3 heads on one kv head, 1
# on the other), a key/value head left with no reader (GQA: heads 0 and 1 read kv head 0), an empty first or last layer
KEEPS = {
    "uneven": {0: [0, 1, 2], 1: [1, 2, 3]},
    "kv-emptied": {0: [2, 3], 1: [0, 1]},
    "first-empty": {0: [], 1: [0, 3]},
    "last-empty": {0: [1, 2], 1: []},
}


@functools.lru_cache(maxsize=None)
def _model(name, impl):
    return FIXTURES[name].build(impl)


def _fresh(name, impl="eager"):
    return copy.deepcopy(_model(name, impl))


def _mask(keep: dict, shape) -> torch.Tensor:
    m = torch.ones(shape, dtype=torch.float64)
    for layer, heads in keep.items():
        m[layer] = 0
        m[layer, heads] = 1
    return m


def _gates(shape) -> torch.Tensor:
    g = torch.ones(shape, dtype=torch.float64)
    g[0, 1], g[1, 2], g[1, 3] = 0.3, 0.0, 0.0
    return g


def _diff(a, b) -> float:
    return float((a - b).detach().abs().max())


# ------------------------------------------------------------------ the grid and its key/value heads
@pytest.mark.parametrize("name", CAUSAL)
def test_adapter_declares_the_grid_and_key_value_groups(name):
    fx, model = FIXTURES[name], _model(name, "eager")
    g = fx.grids[None]
    family = A.family_of(model)
    assert family.name == FAMILY_OF.get(name, "llama")
    assert family.causal_kinds == (None,) and family.is_causal(None)
    assert A.head_shape(model) == (g.n_layers, g.n_heads)
    assert A.kv_shape(model) == (g.n_layers, g.n_kv_heads)
    assert A.kv_head_of(model) == [g.kv_head_of(h) for h in range(g.n_heads)]
    assert [s.head_dim for s in A.attention_sites(model)] == [g.head_dim] * g.n_layers
    assert A.kept_heads(model) == [list(range(g.n_heads))] * g.n_layers


def test_unsupported_architecture_lists_the_causal_families():
    from transformers import FalconH1Config

    cfg = FalconH1Config(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, mamba_d_ssm=16, mamba_n_heads=4, mamba_d_head=4, mamba_d_state=8, intermediate_size=37)
    with pytest.raises(A.UnsupportedArchitectureError) as err:
        A.head_shape(cfg)
    for word in ("gpt2", "gpt_neox", "opt", "llama", "mistral", "qwen2", "qwen3", "gemma", "modernbert", "bloom",
                 "deepseek_v3"):
        assert word in str(err.value)


def test_a_bidirectional_gemma_is_refused():
    """EmbeddingGemma-style configs (``use_bidirectional_attention``) attend both ways; the adapter's keys are causal,
    so it says so instead of gating or mapping with the wrong visible keys."""
    import transformers as tf

    cfg = FIXTURES["gemma3"].config()
    cfg.use_bidirectional_attention = True
    model = tf.Gemma3ForCausalLM(cfg)
    with pytest.raises(A.UnsupportedArchitectureError, match="use_bidirectional_attention"):
        A.attention_sites(model)


# ------------------------------------------------------------------ gates = reference
@pytest.mark.parametrize("name,impl", CASES)
def test_gates_equal_the_reference(name, impl):
    fx, model, batch = FIXTURES[name], _model(name, impl), FIXTURES[name].inputs()
    g = fx.grids[None]
    with torch.no_grad():
        plain = model(**batch).logits
        with head_gates(model, torch.ones(g.n_layers, g.n_heads, dtype=torch.float64)):
            assert torch.equal(model(**batch).logits, plain)  # gates of 1 = the unmodified model, exactly
        means = R.head_means(model, batch)[None]
        for how in ("zero", "mean", "uniform"):
            gates = _gates((g.n_layers, g.n_heads))
            ref = R.forward(model, batch, R.Ablation(how, gates, means if how == "mean" else None))
            with head_gates(model, gates, ablation=how, means=means if how == "mean" else None):
                ours = model(**batch).logits
            assert _diff(ours, ref.logits) <= fx.atol, how
            assert _diff(ours, plain) > 1e-3, how  # the ablation did something


@pytest.mark.parametrize("name", ["gpt2", "gpt_neox", "opt", "llama_gqa"])
def test_uniform_during_cached_generation_is_an_error(name):
    fx, model = FIXTURES[name], _model(name, "eager")
    g = fx.grids[None]
    with head_gates(model, _gates((g.n_layers, g.n_heads)), ablation="uniform"):
        with pytest.raises(ValueError, match="full-sequence forward"):
            R.hf_greedy(model, fx.inputs(padded=False), 3)
        # without a cache every step recomputes the prefix: the reference's greedy decoding
        prompt = fx.inputs(padded=False)["input_ids"]
        seq = prompt
        with torch.no_grad():
            for _ in range(3):
                seq = torch.cat([seq, model(input_ids=seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)], 1)
    want = R.greedy(model, {"input_ids": prompt}, 3, R.Ablation("uniform", _gates((g.n_layers, g.n_heads))))
    assert torch.equal(seq, want)


@pytest.mark.parametrize("name", ["gpt2", "gpt_neox", "opt", "mistral", "deepseek_v3"])
def test_head_means_and_contexts(name):
    fx, model, batch = FIXTURES[name], _model(name, "sdpa"), FIXTURES[name].inputs()
    g = fx.grids[None]
    ours = head_means(model, [batch])
    assert ours.shape == (g.n_layers, g.n_heads, g.head_dim)
    assert ours.dtype == torch.float32  # the package's means are float32 by definition
    assert _diff(ours.double(), R.head_means(model, batch)[None]) <= max(fx.atol, 1e-6)
    ref = R.forward(model, batch)
    with torch.no_grad(), capture_head_contexts(model) as store:
        model(**batch)
    for layer in range(g.n_layers):
        assert _diff(store[layer], ref.grids[None][layer].contexts) <= fx.atol


# ------------------------------------------------------------------ physical pruning
@pytest.mark.parametrize("case", list(KEEPS))
@pytest.mark.parametrize("name", PRUNED)
def test_pruned_equals_gated_and_the_reference(name, case):
    fx, batch, keep = FIXTURES[name], FIXTURES[name].inputs(), KEEPS[case]
    g = fx.grids[None]
    model = _model(name, "eager")
    mask = _mask(keep, (g.n_layers, g.n_heads))
    pruned = prune_heads(_fresh(name), mask)
    assert A.kept_heads(pruned) == [keep[layer] for layer in range(g.n_layers)]
    with torch.no_grad():
        ours = pruned(**batch).logits
        with head_gates(model, mask, ablation="zero"):
            gated = model(**batch).logits
    # both HF's own arithmetic: float64 throughout but for its float32 roundings; Llama 4 rotates in float32, where a
    # 1e-16 difference of the sliced projections' float64 products (another GEMM shape) can flip a rounding
    assert _diff(ours, gated) <= (fx.atol if name == "llama4" else 1e-9)
    want = R.pruned_llama_forward(model, batch, keep) if name in LLAMAS else R.forward(model, batch,
                                                                                       R.Ablation("zero", mask))
    assert _diff(ours, want.logits) <= fx.atol
    for site in A.attention_sites(pruned):  # the key/value heads left are those a kept query head reads
        kv_kept = sorted({g.kv_head_of(h) for h in keep[site.layer]})
        if not keep[site.layer]:
            assert site.query is None and isinstance(site.module, A.EmptyAttention)
            continue
        fused = name == "gpt2" or name in NEOX + ALIBI  # one projection holds q, k and v
        blocks = 3 if fused else 2 if name in GATED else 1  # a gated q_proj: each head's query and gate rows
        assert site.query.weight.shape[-1 if name == "gpt2" else 0] == blocks * len(keep[site.layer]) * g.head_dim
        if name in LLAMAS + FALCONS:  # a pruned Falcon layer has separate q, k and v (cut out of its fused rows)
            assert site.key.weight.shape[0] == site.value.weight.shape[0] == len(kv_kept) * g.head_dim
    assert count_attention_params(pruned) < count_attention_params(model)


@pytest.mark.parametrize("name", PRUNED_LLAMAS + ("falcon_new", "falcon_mq"))
def test_uneven_groups_need_the_gather(name):
    """The check above fails when a pruned layer assumes even groups (HF's repeat_kv): kept query heads paired with
    key/value heads by position // group instead of by the head each reads."""
    fx, batch, keep = FIXTURES[name], FIXTURES[name].inputs(), {0: [0, 2, 3], 1: [1, 2, 3]}
    g = fx.grids[None]
    pruned = prune_heads(_fresh(name), _mask(keep, (g.n_layers, g.n_heads)))
    want = (R.pruned_llama_forward(_model(name, "eager"), batch, keep) if name in LLAMAS else R.forward(
        _model(name, "eager"), batch, R.Ablation("zero", _mask(keep, (g.n_layers, g.n_heads))))).logits
    with torch.no_grad():
        assert _diff(pruned(**batch).logits, want) <= fx.atol
        for site in A.attention_sites(pruned):
            attn = site.module
            assert isinstance(attn, GroupedQueryAttention)
            n_kv = attn.num_key_value_heads
            # even groups over the kept heads, as repeat_kv would pair them
            attn.kv_index = torch.arange(attn.num_heads) * n_kv // attn.num_heads
        if g.n_kv_heads > 1:  # one key/value head (llama_mqa, gemma): every pairing is the same
            assert _diff(pruned(**batch).logits, want) > 1e-3


@pytest.mark.parametrize("name", ["llama_gqa", "gpt2", "gpt_neox", "bloom", "deepseek_v3", "falcon_new", "falcon_rw"])
def test_pruning_twice_is_pruning_the_union(name):
    fx, batch = FIXTURES[name], FIXTURES[name].inputs()
    g = fx.grids[None]
    shape = (g.n_layers, g.n_heads)
    twice = prune_heads(_fresh(name), _mask({0: [0, 1, 3], 1: [0, 2, 3]}, shape))
    twice = prune_heads(twice, _mask({0: [0, 3], 1: [3]}, shape))
    once = prune_heads(_fresh(name), _mask({0: [0, 3], 1: [3]}, shape))
    assert A.kept_heads(twice) == A.kept_heads(once) == [[0, 3], [3]]
    with torch.no_grad():
        assert _diff(twice(**batch).logits, once(**batch).logits) <= 1e-12
    twice = prune_heads(twice, _mask({0: [], 1: [3]}, shape))  # down to an empty layer
    assert A.kept_heads(twice) == [[], [3]]
    with pytest.raises(ValueError, match="already pruned"):
        prune_heads(twice, _mask({0: [1], 1: [3]}, shape))


@pytest.mark.parametrize("name", PRUNED_LLAMAS)
def test_pruning_whole_key_value_groups(name):
    fx, batch = FIXTURES[name], FIXTURES[name].inputs()
    g = fx.grids[None]
    kv_mask = torch.ones(g.n_layers, g.n_kv_heads)
    kv_mask[0, 0] = 0
    heads = kv_mask_to_head_mask(_model(name, "eager"), kv_mask)
    want = torch.tensor([[float(kv_mask[l, g.kv_head_of(h)]) for h in range(g.n_heads)] for l in range(g.n_layers)])
    assert torch.equal(heads, want)
    pruned = prune_kv_groups(_fresh(name), kv_mask)
    assert A.kept_heads(pruned)[0] == [h for h in range(g.n_heads) if g.kv_head_of(h) != 0]
    keep = {0: A.kept_heads(pruned)[0]}
    with torch.no_grad():
        assert _diff(pruned(**batch).logits, R.pruned_llama_forward(_model(name, "eager"), batch, keep).logits) \
            <= fx.atol
    with pytest.raises(ValueError, match="kv_mask"):
        kv_mask_to_head_mask(pruned, torch.ones(g.n_layers, g.n_heads + 1))


@pytest.mark.parametrize("name,impl", [(n, i) for n, i in CASES if n in PRUNED])
def test_pruned_model_generates_as_the_gated_model_decodes(name, impl):
    """``generate`` with the KV cache (layers of different head counts, uneven groups and an empty layer) = the
    reference's greedy decoding of the unpruned model with those heads gated to zero, token for token."""
    fx = FIXTURES[name]
    g = fx.grids[None]
    prompt = fx.inputs(padded=False)
    for keep in ({0: [0, 1, 2], 1: []}, {0: [], 1: [0, 3]}):
        mask = _mask(keep, (g.n_layers, g.n_heads))
        pruned = prune_heads(_fresh(name, impl), mask)
        ours = R.hf_greedy(pruned, prompt, 5)
        assert torch.equal(ours, R.greedy(_model(name, impl), prompt, 5, R.Ablation("zero", mask)))


# ------------------------------------------------------------------ attention maps
@pytest.mark.parametrize("name,impl", CASES)
def test_attention_maps_equal_the_reference(name, impl):
    fx, model, batch = FIXTURES[name], _model(name, impl), FIXTURES[name].inputs()
    ref = R.forward(model, batch)
    maps = attention_maps(model, batch)
    for layer, m in enumerate(maps):
        probs = ref.grids[None][layer].probs
        assert _diff(m, probs) <= fx.atol
        assert bool((m[~ref.grids[None][layer].visible[:, None].expand_as(m)] == 0).all())  # invisible keys: 0
    if name not in PRUNED:
        return
    pruned = prune_heads(_fresh(name, impl), _mask({0: [1, 2, 3], 1: []}, (2, 4)))
    pm = attention_maps(pruned, batch)
    assert _diff(pm[0][:, 1:], ref.grids[None][0].probs[:, 1:]) <= fx.atol  # layer 0 precedes any change
    assert bool(pm[0][:, 0].isnan().all()) and bool(pm[1].isnan().all())


# ------------------------------------------------------------------ gradients and L0 gates
@pytest.mark.parametrize("name", ["gpt2", "gpt_neox", "opt", "llama_gqa", "qwen2", "qwen3", "gemma2", "gemma3",
                                  "phi3", "mixtral", "gpt_oss", "olmo", "olmo3", "cohere", "smollm3", "deepseek_v3",
                                  "hunyuan_v1_dense", "stablelm", "bloom", "falcon_new", "falcon_rw", "llama4"])
@pytest.mark.parametrize("how", ["zero", "uniform"])
def test_gate_gradients_equal_the_reference(name, how):
    """d loss / d gates through the package's gates = autograd of the reference's LM loss (itself checked against
    finite differences in ``test_reference``), the loss HF's own (labels with padding -100)."""
    fx, model, batch = FIXTURES[name], _model(name, "eager"), FIXTURES[name].inputs()
    g = fx.grids[None]
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    gates = _gates((g.n_layers, g.n_heads)).requires_grad_(True)
    with head_gates(model, gates, ablation=how):
        loss = model(**batch, labels=labels).loss
    (ours,) = torch.autograd.grad(loss, gates)
    ref_gates = _gates((g.n_layers, g.n_heads)).requires_grad_(True)
    ref_loss = R.lm_loss(R.forward(model, batch, R.Ablation(how, ref_gates)).logits, batch["input_ids"],
                         batch["attention_mask"])
    (want,) = torch.autograd.grad(ref_loss, ref_gates)
    scale = float(want.abs().max())
    assert scale > 1e-4  # the gates matter to the loss
    assert abs(float(loss.detach()) - float(ref_loss.detach())) <= 1e-5  # HF's loss is computed in float32
    assert _diff(ours, want) <= 2e-5 * scale  # relative: HF rounds through float32 in places


def test_head_importance_and_l0_gates_run_on_a_causal_lm():
    from headprune_utils.measure.importance import head_importance
    from headprune_utils.train.hard_concrete import HardConcreteGates, l0_train

    fx = FIXTURES["llama_gqa"]
    model, batch = _fresh("llama_gqa"), fx.inputs()
    batch = {**batch, "labels": batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)}
    scores = head_importance(model, [batch], normalize_layers=False)
    assert scores.shape == (2, 4) and bool(torch.isfinite(scores).all()) and float(scores.min()) > 0
    before = [p.detach().clone() for p in model.parameters()]
    gates = HardConcreteGates(2, 4)
    torch.manual_seed(0)
    result = l0_train(model, gates, [batch], lam=0.5, steps=4, lr=0.1)
    assert len(result.history) == 4 and all(torch.isfinite(torch.tensor(r["loss"])) for r in result.history)
    assert not torch.equal(gates.log_alpha.detach(), HardConcreteGates(2, 4).log_alpha)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # the model stays frozen


@pytest.mark.parametrize("name", PRUNED)
def test_a_cached_forward_after_an_empty_first_layer_counts_the_positions(name):
    """A forward continuing a KV cache without ``position_ids`` takes the positions seen from the cache of layer 0:
    an empty layer 0 must still count them (else the new token gets position 0 and another output)."""
    fx = FIXTURES[name]
    g = fx.grids[None]
    pruned = prune_heads(_fresh(name), _mask({0: [], 1: [0, 3]}, (g.n_layers, g.n_heads)))
    ids = fx.inputs(padded=False)["input_ids"]
    with torch.no_grad():
        full = pruned(input_ids=ids).logits
        out = pruned(input_ids=ids[:, :-1], use_cache=True)
        # HF's Bamba never reads positions from the cache (unpruned, its cached step without position_ids is 0.8
        # off): it gets them; its mask still counts the cache's positions, which an empty layer 0 must keep
        extra = {"position_ids": torch.full((ids.shape[0], 1), ids.shape[1] - 1)} if name == "bamba" else {}
        step = pruned(input_ids=ids[:, -1:], past_key_values=out.past_key_values, use_cache=True, **extra).logits
    # a hybrid's Mamba layers step their recurrence in float32 where the full forward scans in chunks: the unpruned
    # model's cached step differs by 6e-7 too (a wrong position would move the logits by far more)
    assert _diff(step[:, -1], full[:, -1]) <= (fx.atol if fx.grids[None].model_layers else 1e-9)


def test_kept_key_value_heads_follow_pruning():
    g = FIXTURES["llama_gqa"].grids[None]
    pruned = prune_heads(_fresh("llama_gqa"), _mask(KEEPS["kv-emptied"], (g.n_layers, g.n_heads)))
    assert A.kept_kv_heads(pruned) == [[1], [0]]
    assert [s.key.weight.shape[0] // g.head_dim for s in A.attention_sites(pruned)] == [1, 1]


@pytest.mark.parametrize("name", PRUNED)
def test_head_parameters_follow_the_heads_through_pruning(name):
    """Each head's own parameters (its query block, the key/value head it reads, its output columns), read by the
    adapter, are the same before and after pruning other heads (uneven groups: the kv head is found by index)."""
    g = FIXTURES[name].grids[None]
    model = _model(name, "eager")
    family = A.family_of(model)
    sites = A.attention_sites(model)
    d = g.head_dim
    for h in range(g.n_heads):  # the unpruned layout, written out
        got = family.head_parameters(sites[0], h)
        if name == "gpt2":
            w = sites[0].query.weight.detach()
            want_key = torch.cat([w[:, g.n_heads * d + h * d:g.n_heads * d + (h + 1) * d].t().reshape(-1),
                                  sites[0].query.bias.detach()[g.n_heads * d + h * d:g.n_heads * d + (h + 1) * d]])
        elif name in NEOX + ALIBI:  # rows head by head: head h's key block at h*3d + d : h*3d + 2d
            rows = slice(3 * h * d + d, 3 * h * d + 2 * d)
            want_key = sites[0].query.weight.detach()[rows].reshape(-1)
            if sites[0].query.bias is not None:
                want_key = torch.cat([want_key, sites[0].query.bias.detach()[rows]])
        elif name in MLA:  # kv_b_proj's rows head by head: [k_nope | v]; the key part is head h's first rows
            m = sites[0].module
            block = h * (m.qk_nope_head_dim + m.v_head_dim)
            want_key = m.kv_b_proj.weight.detach()[block:block + m.qk_nope_head_dim].reshape(-1)
        elif name in FALCONS:  # by the layout: group by group, multi-query (one key), head by head
            cfg, kv = _model(name, "eager").config, g.kv_head_of(h)
            group = g.n_heads // g.n_kv_heads
            start = {"falcon_new": (kv * (group + 2) + group) * d, "falcon_mq": g.n_heads * d,
                     "falcon_rw": (3 * h + 1) * d}[name]
            want_key = sites[0].query.weight.detach()[start:start + d].reshape(-1)
            if cfg.bias:
                want_key = torch.cat([want_key, sites[0].query.bias.detach()[start:start + d]])
        elif name == "phi3":  # qkv_proj's rows: the query heads, then the key heads (no bias)
            kv = g.kv_head_of(h)
            want_key = sites[0].query.weight.detach()[g.n_heads * d + kv * d:g.n_heads * d + (kv + 1) * d].reshape(-1)
        else:
            kv = g.kv_head_of(h)
            want_key = sites[0].key.weight.detach()[kv * d:(kv + 1) * d].reshape(-1)
            if sites[0].key.bias is not None:
                want_key = torch.cat([want_key, sites[0].key.bias.detach()[kv * d:(kv + 1) * d]])
        assert torch.equal(got["key"], want_key.double())
    keep = {0: [0, 2, 3], 1: [1]}
    pruned = prune_heads(_fresh(name), _mask(keep, (g.n_layers, g.n_heads)))
    for site in A.attention_sites(pruned):
        for pos, h in enumerate(keep[site.layer]):
            before, after = family.head_parameters(sites[site.layer], h), family.head_parameters(site, pos)
            assert set(before) == set(after)
            assert all(torch.equal(before[p], after[p]) for p in before)  # a gated head's "output_gate" too


@pytest.mark.parametrize("name", ["llama_gqa", "gpt2", "gpt_neox"])
def test_head_weights_read_each_heads_own_rows(name):
    """``head_weights.relative_change`` through the adapter: a change to one key/value head's rows moves exactly the
    query heads of its group (GQA), a change to one head's block of GPT-2's fused ``c_attn`` moves that head only."""
    from headprune_utils.model.head_weights import relative_change

    fx = FIXTURES[name]
    before = fx.build("eager")
    after = copy.deepcopy(before)
    g = fx.grids[None]
    d = g.head_dim
    with torch.no_grad():
        if name == "gpt2":  # c_attn's output columns: q | k | v blocks of n_heads * head_dim
            w = after.transformer.h[1].attn.c_attn.weight
            w[:, 2 * g.n_heads * d + 3 * d: 2 * g.n_heads * d + 4 * d] += 1.0  # the value block of head 3
            moved = {(1, 3)}
        elif name in NEOX:  # query_key_value's rows head by head: head 2's value block at 2*3d + 2d
            after.gpt_neox.layers[1].attention.query_key_value.weight[6 * d + 2 * d: 9 * d] += 1.0
            moved = {(1, 2)}
        else:
            after.model.layers[1].self_attn.v_proj.weight[d:2 * d] += 1.0  # key/value head 1
            moved = {(1, h) for h in range(g.n_heads) if g.kv_head_of(h) == 1}
    change = relative_change(before, after)
    got = {(int(l), int(h)) for l, h in torch.nonzero(change["value"] > 0)}
    assert got == moved
    assert float(change["query"].abs().max()) == 0.0 and float(change["output"].abs().max()) == 0.0


def test_flop_estimate_counts_grouped_key_value_heads_and_the_gated_mlp():
    """``costs.layer_forward_flops`` from the adapter's dims, against the count written out for a Llama layer."""
    from headprune_utils.measure import costs

    fx = FIXTURES["llama_mqa"]
    cfg = fx.build("eager").config
    dims = A.family_of(cfg).cost_dims(cfg)
    shape = costs.Shape(dims.n_layers, dims.n_heads, dims.d_model, dims.d_ffn, dims.n_kv_heads, dims.head_dim,
                        dims.ffn_matrices)
    d, f, h, hd, kv = cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.head_dim, cfg.num_key_value_heads
    tokens, seq = 10.0, 7.0
    by_hand = tokens * (2 * (d * h * hd + d * kv * hd * 2 + h * hd * d + 3 * d * f) + 2 * 2 * seq * h * hd)
    assert costs.layer_forward_flops(shape, tokens, seq) == pytest.approx(by_hand, rel=1e-12)
    # the BERT-shaped default (no kv heads, no head dim given) is the documented 2 (4 d^2 a + 2 d f) + 4 s d a
    bert = costs.Shape(2, 4, 32, 64)
    a = 0.5
    assert costs.layer_forward_flops(bert, tokens, seq, a) == tokens * (2 * (4 * 32 * 32 * a + 2 * 32 * 64)
                                                                       + 4 * seq * 32 * a)


@pytest.mark.parametrize("name", ["gpt_neox", "llama_gqa", "opt"])
def test_attention_maps_of_a_left_padded_batch(name):
    """Left padding: a padded query of a causal model sees no key at all; its row is 0 (not a softmax spread over
    padding and future keys), and the real queries' rows equal Hugging Face's own probabilities (eager, float32:
    HF's float64 eager attention gives NaN on such rows)."""
    fx = FIXTURES[name]
    model = fx.build("eager", dtype=torch.float32)
    batch = fx.inputs(padded=False)
    batch["attention_mask"][1, :2] = 0  # row 1 left-padded by 2
    maps = attention_maps(model, batch)
    with torch.no_grad():
        hf = model(**batch, output_attentions=True).attentions
    for layer, m in enumerate(maps):
        assert bool((m[1, :, :2] == 0).all())  # the padded queries
        assert _diff(m[0], hf[layer][0].double()) <= 1e-5
        assert _diff(m[1, :, 2:, 2:], hf[layer][1, :, 2:, 2:].double()) <= 1e-5  # real queries over real keys
        assert bool((m[1, :, 2:, :2] == 0).all())  # padded keys


def test_load_causal_lm_lets_hugging_face_choose_the_attention(tmp_path):
    """By default the loader lets Hugging Face pick the attention implementation: Gemma 2 (soft-capped scores,
    which sdpa cannot compute) loads with eager instead of failing."""
    from headprune_utils.model import models

    FIXTURES["gemma2"].build("eager", dtype=torch.float32).save_pretrained(tmp_path)
    model = models.load_causal_lm(str(tmp_path), device="cpu")
    assert model.config._attn_implementation == "eager"
    assert A.head_shape(model) == (2, 4)


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama_gqa", "gemma2"])
def test_attention_maps_inside_uniform_gates_are_the_gated_models(name):
    """Inside head_gates(ablation="uniform") a head gated by g attends g * A + (1 - g) * U (U uniform over the keys
    its query may see): its map says so, and the later layers' maps are those of the gated model (the reference's
    probabilities under the same ablation)."""
    fx, model, batch = FIXTURES[name], _model(name, "eager"), FIXTURES[name].inputs()
    g = fx.grids[None]
    gates = _gates((g.n_layers, g.n_heads))
    ref = R.forward(model, batch, R.Ablation("uniform", gates))
    with head_gates(model, gates, ablation="uniform"):
        maps = attention_maps(model, batch)
    for layer, m in enumerate(maps):
        t = ref.grids[None][layer]
        uniform = (t.visible.double() / t.visible.sum(-1, keepdim=True))[:, None]
        w = gates[layer].view(1, -1, 1, 1)
        assert _diff(m, w * t.probs + (1 - w) * uniform) <= fx.atol
    with head_gates(model, gates, ablation="zero"):  # zero replaces the OUTPUT: the gated head's map is its own
        zero_maps = attention_maps(model, batch)
    assert _diff(zero_maps[0], R.forward(model, batch).grids[None][0].probs) <= fx.atol


# ------------------------------------------------------------------ attention sinks (gpt-oss)
def test_sink_maps_are_attention_weights_and_the_distribution_measures_refuse_them():
    """gpt-oss: each row of a head's map gives the sink its share (the reference's probabilities, checked above, sum
    to less than 1); its maps under "uniform" gates mix in the uniform distribution over the visible keys; entropy,
    head_js and the redundancy metrics js and hellinger refuse such rows (they need distributions), the others take
    them; a model without sinks passes the same check."""
    from headprune_utils.measure.head_scores import confidence_from_maps, entropy_from_maps
    from headprune_utils.measure.redundancy import sentence_distances, stack_heads
    from headprune_utils.model.attention import head_js

    fx = FIXTURES["gpt_oss"]
    model, batch = _model("gpt_oss", "eager"), fx.inputs()
    maps = attention_maps(model, batch)
    real = batch["attention_mask"].bool()
    sums = maps[1].sum(-1)[real[:, None, :].expand(-1, 4, -1)]
    assert float(sums.max()) < 1 - 1e-6 and 0 < float(sums.min()) < 0.5  # the sinks take a share of every row
    gates = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    with head_gates(model, gates, ablation="uniform"):
        gated = attention_maps(model, batch)
    row = gated[0][0, 1].sum(-1)  # head 1 of layer 0, gated to 0: uniform over its visible keys (window of 3)
    assert _diff(row, torch.ones_like(row)) <= 1e-12
    assert _diff(gated[0][:, 0], maps[0][:, 0]) == 0.0
    with pytest.raises(ValueError, match="sum to .* not 1: a row must be a distribution.*attention sinks"):
        entropy_from_maps(maps, real)
    from headprune_utils.measure.head_scores import entropy

    with pytest.raises(ValueError, match="entropy: rows of real queries"):
        entropy(model, [batch])
    with pytest.raises(ValueError, match=r"head_js: rows of real queries of layer 0, heads \[0, 1, 2, 3\]"):
        head_js(maps, maps, batch["attention_mask"])
    stacked = stack_heads(maps)
    for metric in ("js", "hellinger"):
        with pytest.raises(ValueError, match=f"redundancy metric '{metric}'"):
            sentence_distances(stacked, batch["attention_mask"], metric)
    fixed = [m.clone() for m in maps]
    fixed[0] = fixed[0] / fixed[0].sum(-1, keepdim=True).clamp_min(1e-30)  # layer 0 made distributions: layer 1 named
    with pytest.raises(ValueError, match=r"flat heads \[4, 5, 6, 7\]"):
        sentence_distances(stack_heads(fixed), batch["attention_mask"], "js")
    assert sentence_distances(stacked, batch["attention_mask"], "cosine").shape == (2, 8, 8)
    assert confidence_from_maps(maps, real).shape == (2, 4)  # the largest weight on a key: defined without a sum
    plain = attention_maps(_model("llama_gqa", "eager"), FIXTURES["llama_gqa"].inputs())
    assert entropy_from_maps(plain, real).shape == (2, 4)


# ------------------------------------------------------------------ OLMo 2/3: gates yes, pruning no
@pytest.mark.parametrize("name", [n for n in CAUSAL if n not in PRUNED])
def test_layer_wide_query_norms_refuse_pruning_before_anything_changes(name):
    """OLMo 2/3 normalise all heads' queries together: prune_heads (and prune_kv_groups) refuse, naming the reason
    and the way out, and leave the model as it was; a mask that removes nothing is no pruning and passes."""
    from headprune_utils.model.architecture import UnsupportedArchitectureError

    model, batch = _fresh(name), FIXTURES[name].inputs()
    with torch.no_grad():
        before = model(**batch).logits
    with pytest.raises(UnsupportedArchitectureError, match=r"cannot be pruned head by head.*over all heads.*head_gates"):
        prune_heads(model, _mask({0: [1, 2, 3], 1: [0, 1, 2, 3]}, (2, 4)))
    with pytest.raises(UnsupportedArchitectureError, match="cannot be pruned head by head"):
        prune_kv_groups(model, torch.tensor([[1, 0], [1, 1]]))
    assert A.kept_heads(model) == [[0, 1, 2, 3]] * 2 and type(model.model.layers[0].self_attn).__name__.startswith("Olmo")
    prune_heads(model, torch.ones(2, 4))
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, before)


def test_a_pruned_starcoder2_layer_drops_out_its_output_while_training_as_the_original():
    """StarCoder2 applies dropout to the attention's output while training (residual_dropout): with the same seed, the
    pruned model in train mode equals the gated model (gates of 0 on the pruned heads, "zero") in train mode, and
    differs from the pruned model without dropout."""
    fx = FIXTURES["starcoder2"]
    cfg = fx.config("eager")
    cfg.residual_dropout = 0.3
    torch.manual_seed(0)
    model = fx.model_class._from_config(cfg, attn_implementation="eager").to(torch.float64)
    for keep in ({0: [0, 1, 2], 1: [3]}, {0: [], 1: [3]}):  # an empty layer drops out its output's bias too
        _check_dropout_as_gated(fx, model, _mask(keep, (2, 4)))


def _check_dropout_as_gated(fx, model, mask):
    batch = fx.inputs()
    pruned = prune_heads(copy.deepcopy(model), mask).train()
    model.train()
    torch.manual_seed(5)
    with head_gates(model, mask, ablation="zero"):
        gated = model(**batch).logits
    torch.manual_seed(5)
    ours = pruned(**batch).logits
    assert _diff(ours, gated) <= 1e-9
    torch.manual_seed(5)
    assert _diff(pruned.eval()(**batch).logits, ours) > 1e-3  # the dropout acted


# ------------------------------------------------------------------ output_attentions after pruning
@pytest.mark.parametrize("hooked_first", [False, True], ids=["pruned-first", "recorded-first"])
@pytest.mark.parametrize("name", PRUNED)
def test_output_attentions_of_a_pruned_model_keep_every_layer_in_place(name, hooked_first):
    """HF records output_attentions by hooks on its attention class: a replaced module (a pruned Llama-family layer,
    an empty layer) keeps them (carried over, or given before HF installs any), so the tuple has one entry per layer,
    the kept heads' maps (equal to attention_maps' rows of the kept heads), an empty layer ``[batch, 0, seq, seq]``."""
    fx = FIXTURES[name]
    model, batch = _fresh(name), fx.inputs()
    if hooked_first:  # HF installs its recording hooks at the first call that asks for attentions
        model(**batch, output_attentions=True)
    keep = {0: [0, 2, 3], 1: []}
    prune_heads(model, _mask(keep, (2, 4)))
    with torch.no_grad():
        got = model(**batch, output_attentions=True).attentions
        maps = attention_maps(model, batch)
    assert len(got) == 2
    assert tuple(got[1].shape) == (2, 0, 7, 7)
    assert _diff(got[0], maps[0][:, keep[0]]) <= fx.atol


def test_per_example_importance_trims_left_and_right_padding_of_a_causal_lm():
    """``head_importance(per_example=True)`` on a padded causal-LM batch (per-token labels, -100 on padding) equals
    the importance over the examples given one by one, unpadded, whether the batch is padded on the right or the
    left."""
    from headprune_utils.measure.importance import head_importance

    model = _fresh("llama_gqa")
    ids = FIXTURES["llama_gqa"].inputs()["input_ids"]
    alone = [{"input_ids": ids[:1], "attention_mask": torch.ones(1, 7, dtype=torch.long), "labels": ids[:1]},
             {"input_ids": ids[1:, :5], "attention_mask": torch.ones(1, 5, dtype=torch.long), "labels": ids[1:, :5]}]
    want = head_importance(model, alone, normalize_layers=False)
    right = torch.ones(2, 7, dtype=torch.long)
    right[1, 5:] = 0
    left = torch.ones(2, 7, dtype=torch.long)
    left[1, :2] = 0
    row1_left = torch.cat([torch.zeros(1, 2, dtype=torch.long), ids[1:, :5]], 1)
    for mask, rows in ((right, ids), (left, torch.cat([ids[:1], row1_left]))):
        batch = {"input_ids": rows, "attention_mask": mask, "labels": rows.masked_fill(mask == 0, -100)}
        got = head_importance(model, [batch], per_example=True, normalize_layers=False)
        assert _diff(got, want) <= 1e-9 * float(want.abs().max())


def test_a_gpt_oss_heads_sink_is_one_of_its_parameters():
    """head_weights: a gpt-oss head owns its sink (part "sink"); moving one sink moves that head's "sink" and "all"
    change alone; families without sinks have no such part."""
    from headprune_utils.model.head_weights import head_parameters, relative_change

    before = _fresh("gpt_oss")
    after = copy.deepcopy(before)
    with torch.no_grad():
        after.model.layers[0].self_attn.sinks[1] += 5.0
    change = relative_change(before, after)
    assert change["sink"][0, 1] > 0 and float(change["sink"].nan_to_num().abs().sum()) == float(change["sink"][0, 1])
    assert change["all"][0, 1] > 0 and float(change["all"][1].abs().sum()) == 0.0
    assert "sink" not in head_parameters(_fresh("llama_gqa"))


def test_olmo2_has_no_clamp_whatever_its_config_says():
    """HF's OLMo 2 attention ignores a clip_qkv key in its config; so do the maps (equal to HF's own attentions)."""
    fx = FIXTURES["olmo2"]
    cfg = fx.config("eager")
    cfg.clip_qkv = 0.5
    model = fx.model_class._from_config(cfg, attn_implementation="eager").to(torch.float64).eval()
    batch = fx.inputs()
    with torch.no_grad():
        hf = model(**batch, output_attentions=True).attentions
        ours = attention_maps(model, batch)
    for layer in range(2):
        assert _diff(ours[layer], hf[layer]) <= 1e-6


_MOE = ("mixtral", "qwen3_moe", "gpt_oss", "qwen2_moe", "llama4", "granite_hybrid", "granite_hybrid_rope", "bamba",
        "qwen3_next", "qwen3_5", "qwen3_5_moe", "nemotron_h")  # experts, or hybrids whose FLOP estimate is refused


@pytest.mark.parametrize("name", [n for n in LLAMAS if n not in _MOE])
def test_flop_estimate_of_a_dense_mlp_counts_its_own_weights(name):
    """The adapter's MLP cost (multiply-adds per token: ``ffn_matrices x d_model x d_ffn``) equals the weights of a
    layer's MLP as built (gated: 3 matrices; StarCoder2, Arcee, Apertus, nanochat: 2), counted from the modules."""
    model = FIXTURES[name].build("eager")
    cfg = model.config
    mlp = model.model.layers[0].mlp
    weights = sum(m.weight.numel() for m in mlp.modules() if isinstance(m, torch.nn.Linear))
    assert A.family_of(cfg).cost_dims(cfg).ffn_macs_per_token() == weights


# (Falcon-RW is left out: HF builds no mask for a registered attention function, which its ALiBi needs)
@pytest.mark.parametrize("name", PRUNED_LLAMAS + ("falcon_mq", "falcon_new"))
def test_a_pruned_layer_calls_the_attention_function_with_the_originals_settings(name):
    """What a layer hands the attention function besides q, k and v (the sliding window, the soft cap, the scaling,
    the sinks) is what flash attention and other kernels read instead of the mask: a pruned layer passes what the
    original passes, layer by layer (recorded through an attention function registered for the test)."""
    import importlib

    from transformers import AttentionInterface

    fx = FIXTURES[name]
    model = fx.build("eager")
    eager = importlib.import_module(type(A.attention_sites(model, None)[0].module).__module__)
    eager = getattr(eager, "eager_attention_forward", None) or importlib.import_module(
        "transformers.models.llama.modeling_llama").eager_attention_forward
    calls = []

    def record(module, q, k, v, mask, **kwargs):
        calls.append((module.layer_idx, kwargs.get("sliding_window"), kwargs.get("softcap"), kwargs.get("scaling"),
                      kwargs.get("s_aux") is not None))
        return eager(module, q, k, v, mask, **kwargs)

    AttentionInterface.register("headprune_test_record", record)
    model.config._attn_implementation = "headprune_test_record"
    model(**fx.inputs())
    original, calls[:] = list(calls), []
    prune_heads(model, torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]]))(**fx.inputs())
    assert calls == original and len(original) == 2


@pytest.mark.parametrize("name", MLA)
def test_latent_attention_prunes_each_heads_own_rows_and_keeps_the_shared_latent(name):
    """DeepSeek-V3: pruning keeps the kept heads' query rows, their [k_nope | v] rows of kv_b_proj and their o_proj
    columns; the latent projection and the shared rotated key part (and so the KV cache) stay whole. The FLOP
    estimate of latent attention is refused, not guessed."""
    fx = FIXTURES[name]
    model = _model(name, "eager")
    cfg = model.config
    pruned = prune_heads(_fresh(name), _mask({0: [1, 3], 1: [2]}, (2, 4)))
    qk, kv = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, cfg.qk_nope_head_dim + cfg.v_head_dim
    for layer, kept in ((0, [1, 3]), (1, [2])):
        a, b = model.model.layers[layer].self_attn, pruned.model.layers[layer].self_attn
        q_a, q_b = (a.q_proj, b.q_proj) if a.q_proj is not None else (a.q_b_proj, b.q_b_proj)
        assert torch.equal(q_b.weight, torch.cat([q_a.weight[h * qk:(h + 1) * qk] for h in kept]))
        assert torch.equal(b.kv_b_proj.weight, torch.cat([a.kv_b_proj.weight[h * kv:(h + 1) * kv] for h in kept]))
        assert torch.equal(b.o_proj.weight, torch.cat([a.o_proj.weight[:, h * cfg.v_head_dim:(h + 1) * cfg.v_head_dim]
                                                       for h in kept], 1))
        assert torch.equal(b.kv_a_proj_with_mqa.weight, a.kv_a_proj_with_mqa.weight)
    with torch.no_grad():
        cache = pruned(**fx.inputs(padded=False), use_cache=True).past_key_values
    assert cache.layers[0].keys.shape[-1] == cfg.kv_lora_rank  # the compressed latent, whatever the heads
    with pytest.raises(A.UnsupportedArchitectureError, match="latent attention"):
        A.family_of(cfg).cost_dims(cfg)


@pytest.mark.parametrize("name", ["arcee", "glm", "stablelm", "llama_gqa"])
def test_a_sliding_window_key_the_model_never_reads_windows_neither_maps_nor_uniform(name):
    """Hugging Face keeps unknown config.json keys as attributes: a stray ``sliding_window`` on a model whose own
    masks never window (Llama, Arcee, GLM, StableLM, ...) changes nothing in HF, and now nothing in the attention
    maps (against HF's eager attentions) or the "uniform" ablation (against HF with the heads' queries zeroed,
    which makes their attention uniform over the visible keys); both windowed it before."""
    fx = FIXTURES[name]
    cfg = fx.config("eager")
    cfg.sliding_window = 3
    torch.manual_seed(0)
    model = fx.model_class._from_config(cfg, attn_implementation="eager").to(torch.float64).eval()
    batch = fx.inputs(seq=9)
    with torch.no_grad():
        hf = model(**batch, output_attentions=True).attentions
    real = batch["attention_mask"].bool()[:, None, :, None]
    for ours, theirs in zip(attention_maps(model, batch), hf):
        assert _diff(ours.masked_fill(~real, 0), theirs.masked_fill(~real, 0)) <= 1e-6
    gates = torch.ones(2, 4, dtype=torch.float64)
    gates[1, 2] = 0.0
    zeroed = copy.deepcopy(model)
    q = A.attention_sites(zeroed)[1].query
    with torch.no_grad():
        q.weight[2 * 8:3 * 8] = 0
        if q.bias is not None:
            q.bias[2 * 8:3 * 8] = 0
        want = zeroed(**batch).logits
        with head_gates(model, gates, ablation="uniform"):
            got = model(**batch).logits
    assert _diff(got, want) <= 1e-6


@pytest.mark.parametrize("name", ["stablelm", "cohere"])
def test_a_heads_own_query_key_norm_is_one_of_its_parameters(name):
    """StableLM's norm module per head and Cohere's norm weight row per head belong to their head: a change to head
    1's query norm (and to key/value head 0's key norm) is that head's change in head_weights (parts "query_norm",
    "key_norm"), and no other head's; Qwen3's shared norm belongs to no head."""
    from headprune_utils.model.head_weights import relative_change

    fx = FIXTURES[name]
    before = fx.build("eager")
    after = copy.deepcopy(before)
    a = after.model.layers[0].self_attn
    with torch.no_grad():
        if name == "stablelm":
            a.q_layernorm.norms[1].weight += 1.0
            a.k_layernorm.norms[0].weight += 1.0
        else:
            a.q_norm.weight[1] += 1.0
            a.k_norm.weight[0] += 1.0
    change = relative_change(before, after)
    assert {(int(l), int(h)) for l, h in torch.nonzero(change["query_norm"] > 0)} == {(0, 1)}
    assert {(int(l), int(h)) for l, h in torch.nonzero(change["key_norm"] > 0)} == {(0, 0), (0, 1)}  # kv head 0
    assert float(change["query"].abs().max()) == 0.0
    assert "query_norm" not in relative_change(FIXTURES["qwen3"].build("eager"), FIXTURES["qwen3"].build("eager"))


# ------------------------------------------------------------------ Falcon
@pytest.mark.parametrize("name", FALCONS)
def test_falcon_flop_dims_count_its_own_weights(name):
    """The FLOP estimate's dims of a Falcon layer (multi-query: one key/value head; grouped; head by head) count the
    weights it has: the fused projection and ``dense`` (the attention at no sequence length), and a two-matrix MLP."""
    model = FIXTURES[name].build("eager")
    cfg = model.config
    dims = A.family_of(cfg).cost_dims(cfg)
    layer = model.transformer.h[0]
    a = layer.self_attention
    assert dims.n_kv_heads == FIXTURES[name].grids[None].n_kv_heads
    assert dims.attention_macs_per_token() == a.query_key_value.weight.numel() + a.dense.weight.numel()
    assert dims.ffn_macs_per_token() == sum(m.weight.numel() for m in layer.mlp.modules()
                                            if isinstance(m, torch.nn.Linear))


def test_falcon_alibi_rows_follow_the_heads_original_ids():
    """Under ALiBi the mask has a row per head: a pruned layer reads its kept heads' rows by their ORIGINAL ids, also
    after pruning twice; reading them by position instead moves the logits."""
    fx = FIXTURES["falcon_rw"]
    batch = fx.inputs()
    pruned = prune_heads(_fresh("falcon_rw"), _mask({0: [1, 2, 3], 1: [0, 2, 3]}, (2, 4)))
    pruned = prune_heads(pruned, _mask({0: [2, 3], 1: [3]}, (2, 4)))
    sites = A.attention_sites(pruned)
    assert [s.module.mask_heads.tolist() for s in sites] == [[2, 3], [3]]
    want = R.forward(_model("falcon_rw", "eager"), batch, R.Ablation("zero", _mask({0: [2, 3], 1: [3]}, (2, 4))))
    with torch.no_grad():
        assert _diff(pruned(**batch).logits, want.logits) <= fx.atol
        for site in sites:
            site.module.mask_heads = torch.arange(len(site.module.mask_heads))
        assert _diff(pruned(**batch).logits, want.logits) > 1e-3


# ------------------------------------------------------------------ Llama 4
def test_llama4_flop_estimate_counts_the_experts_a_token_takes_and_refuses_mixed_widths():
    """All expert layers: a token takes its routed experts and the shared one (gated MLPs of ``intermediate_size``),
    counted from the weights; dense and expert layers of different widths (the fixture) are refused, not averaged."""
    import transformers as tf

    cfg = FIXTURES["llama4"].config()
    with pytest.raises(A.UnsupportedArchitectureError, match="differ in width"):
        A.family_of(cfg).cost_dims(cfg)
    cfg.moe_layers = [0, 1]
    model = tf.Llama4ForCausalLM(cfg)
    moe = model.model.layers[0].feed_forward
    one_expert = moe.experts.gate_up_proj[0].numel() + moe.experts.down_proj[0].numel()
    shared = sum(m.weight.numel() for m in moe.shared_expert.modules() if isinstance(m, torch.nn.Linear))
    dims = A.family_of(cfg).cost_dims(cfg)
    assert dims.ffn_macs_per_token() == cfg.num_experts_per_tok * one_expert + shared
    assert dims.attention_macs_per_token() == sum(
        getattr(model.model.layers[0].self_attn, p).weight.numel() for p in ("q_proj", "k_proj", "v_proj", "o_proj"))


def test_llama4_multimodal_wrapper_is_refused_with_the_text_model_named():
    import transformers as tf

    cfg = tf.Llama4Config(text_config=FIXTURES["llama4"].config().to_dict())
    with pytest.raises(A.UnsupportedArchitectureError, match="Llama4ForCausalLM"):
        A.head_shape(cfg)


# ------------------------------------------------------------------ a hybrid (Granite 4.0-H)
def test_a_hybrids_grid_is_its_attention_layers_and_its_mamba_layers_stay_whole():
    """Granite 4.0-H's grid has a row per ATTENTION layer (``model_layers`` maps rows to the model's layers); pruning
    every head of a row empties that attention layer and leaves every Mamba layer's weights as they were; the FLOP
    estimate (no term for a Mamba layer) is refused."""
    fx = FIXTURES["granite_hybrid"]
    model = _fresh("granite_hybrid")
    assert A.model_layers(model) == list(fx.grids[None].model_layers) == [1, 3]
    assert A.model_layers(FIXTURES["llama_gqa"].config()) == [0, 1]
    sites = A.attention_sites(model)
    assert [s.module for s in sites] == [model.model.layers[1].self_attn, model.model.layers[3].self_attn]
    mamba = {k: v.clone() for k, v in model.state_dict().items() if ".mamba." in k}
    prune_heads(model, _mask({0: [], 1: [0, 3]}, (2, 4)))
    assert isinstance(model.model.layers[1].self_attn, A.EmptyAttention)
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in mamba.items())
    with pytest.raises(A.UnsupportedArchitectureError, match="Mamba"):
        A.family_of(model).cost_dims(model.config)


def test_llama4_chunks_start_at_each_rows_first_real_token():
    """Left padding moves the chunk boundaries of Llama 4's chunked layers (the model's mask counts its chunks from
    the first real token): the maps equal HF's eager attention weights on every real query row, and "uniform"
    equals HF with the head's query zeroed (equal scores over exactly the keys the model lets it see)."""
    fx = FIXTURES["llama4"]
    model = _fresh("llama4")
    ids = fx.inputs(padded=False, seq=9)["input_ids"]
    am = torch.ones_like(ids)
    am[0, :3] = 0  # row 0 left-padded by 3: its chunks are 3-6, 7-8; row 1's 0-3, 4-7, 8
    batch = {"input_ids": ids, "attention_mask": am}
    real = am.bool()
    with torch.no_grad():
        hf = model(**batch, output_attentions=True).attentions
        maps = attention_maps(model, batch)
        assert _diff(maps[0].transpose(1, 2)[real], hf[0].transpose(1, 2)[real]) <= fx.atol
        assert bool(hf[0][0, 0, 8, 7] > 0) and bool(maps[0][0, 0, 8, 7] > 0)  # key 7 shares query 8's chunk
        edited = copy.deepcopy(model)
        edited.model.layers[0].self_attn.q_proj.weight[8:16] = 0  # head 1 of layer 0
        gates = torch.ones(2, 4)
        gates[0, 1] = 0
        with head_gates(model, gates, ablation="uniform"):
            uniform = model(**batch).logits
        assert _diff(uniform[real], edited(**batch).logits[real]) <= fx.atol


def test_a_hybrid_without_attention_layers_has_no_heads_and_says_so():
    cfg = FIXTURES["bamba"].config()
    cfg.attn_layer_indices = []
    with pytest.raises(A.UnsupportedArchitectureError, match="no attention heads"):
        A.head_shape(cfg)


# ------------------------------------------------------------------ gated attention (Qwen3-Next, Qwen3.5)


@pytest.mark.parametrize("name", GATED)
def test_gated_uniform_is_the_head_attending_evenly_under_its_own_output_gate(name):
    """A head whose QUERY rows of ``q_proj`` are zeroed (its gate rows kept) scores every key 0 after its RMS norm
    and rotary: HF's model then computes exactly "uniform" for it, the mean of the visible values times the head's own
    output gate. head_gates' "uniform" equals that edited model on every real position; with the replacement left
    ungated it would not (the gate is far from 1 on these weights)."""
    fx = FIXTURES[name]
    model = _fresh(name)
    batch = fx.inputs()
    real = batch["attention_mask"].bool()
    layer = fx.grids[None].model_layer(1)
    d = fx.grids[None].head_dim
    edited = copy.deepcopy(model)
    with torch.no_grad():
        edited.model.layers[layer].self_attn.q_proj.weight[2 * 2 * d:2 * 2 * d + d] = 0  # head 2's query rows
        gates = torch.ones(2, 4)
        gates[1, 2] = 0
        with head_gates(model, gates, ablation="uniform"):
            uniform = model(**batch).logits
        want = edited(**batch).logits
        assert _diff(uniform[real], want[real]) <= fx.atol
        assert _diff(model(**batch).logits[real], want[real]) > 1e-3  # the edit matters


@pytest.mark.parametrize("name", GATED)
def test_gated_head_parameters_are_its_query_and_gate_rows(name):
    """Head h's "query" part is its rows ``h*2d : h*2d+d`` of ``q_proj``, its "output_gate" part the next ``d`` rows
    (the layout HF's module splits); both follow the head through pruning (checked above for every family)."""
    fx = FIXTURES[name]
    model = _model(name, "eager")
    family = A.family_of(model)
    site = A.attention_sites(model)[0]
    d = fx.grids[None].head_dim
    w = model.model.layers[fx.grids[None].model_layer(0)].self_attn.q_proj.weight.detach()
    for h in range(fx.grids[None].n_heads):
        got = family.head_parameters(site, h)
        assert torch.equal(got["query"], w[2 * h * d:2 * h * d + d].reshape(-1).double())
        assert torch.equal(got["output_gate"], w[2 * h * d + d:2 * (h + 1) * d].reshape(-1).double())
    assert A.present_mask(model).tolist() == [[True] * 4] * 2


@pytest.mark.parametrize("name", GATED)
def test_gated_hybrids_grid_is_its_attention_layers_and_its_deltanet_layers_stay_whole(name):
    fx = FIXTURES[name]
    model = _fresh(name)
    rows = list(fx.grids[None].model_layers)
    assert A.model_layers(model) == rows
    assert [s.module for s in A.attention_sites(model)] == [model.model.layers[i].self_attn for i in rows]
    linear = {k: v.clone() for k, v in model.state_dict().items() if ".linear_attn." in k}
    assert linear
    prune_heads(model, _mask({0: [1], 1: []}, (2, 4)))
    assert isinstance(model.model.layers[rows[1]].self_attn, A.EmptyAttention)
    assert model.model.layers[rows[0]].self_attn.q_proj.weight.shape[0] == 2 * fx.grids[None].head_dim
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in linear.items())
    with pytest.raises(A.UnsupportedArchitectureError, match="DeltaNet"):
        A.family_of(model).cost_dims(model.config)


def test_qwen3_5_multimodal_wrapper_is_refused_and_its_checkpoint_loads_as_the_text_model(tmp_path):
    """Qwen3.5's checkpoints are multimodal: the wrapper is refused naming AutoModelForCausalLM, and
    ``load_causal_lm`` of such a checkpoint gives the text model (its language-model weights), whose logits on text
    equal the wrapper's."""
    import transformers as tf

    from headprune_utils.model import models

    vision = dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=24, out_hidden_size=32, patch_size=4,
                  temporal_patch_size=2, spatial_merge_size=2)
    cfg = tf.Qwen3_5Config(text_config=FIXTURES["qwen3_5"].config().to_dict(), vision_config=vision)
    with pytest.raises(A.UnsupportedArchitectureError, match="AutoModelForCausalLM"):
        A.head_shape(cfg)
    torch.manual_seed(0)
    wrapper = tf.Qwen3_5ForConditionalGeneration(cfg).eval()
    with pytest.raises(A.UnsupportedArchitectureError, match="AutoModelForCausalLM"):
        A.attention_sites(wrapper)
    wrapper.save_pretrained(tmp_path)
    text = models.load_causal_lm(str(tmp_path), device="cpu")
    assert text.config.model_type == "qwen3_5_text" and A.head_shape(text) == (2, 4)
    ids = FIXTURES["qwen3_5"].inputs(padded=False)["input_ids"]
    with torch.no_grad():
        assert torch.equal(text(input_ids=ids).logits, wrapper(input_ids=ids).logits)


def test_nemotron_h_grid_is_its_attention_mixers_and_its_other_blocks_stay_whole():
    """Nemotron-H's layers are one block each (attention, Mamba-2, MLP or mixture of experts, all at
    ``layers[i].mixer``): the grid's rows are the attention blocks; pruning leaves every other block's weights as they
    were; the attention has no positions (the maps need no rotary angles); the FLOP estimate is refused."""
    fx = FIXTURES["nemotron_h"]
    model = _fresh("nemotron_h")
    rows = list(fx.grids[None].model_layers)
    assert A.model_layers(model) == rows == [0, 3]
    assert [s.module for s in A.attention_sites(model)] == [model.model.layers[i].mixer for i in rows]
    others = {k: v.clone() for k, v in model.state_dict().items()
              if k.startswith("model.layers.") and int(k.split(".")[2]) not in rows}
    assert others
    prune_heads(model, _mask({0: [], 1: [2]}, (2, 4)))
    assert isinstance(model.model.layers[0].mixer, A.EmptyAttention)
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in others.items())
    assert A.family_of(model).position_embedding(model.config) == "none (NoPE)"
    with pytest.raises(A.UnsupportedArchitectureError, match="Mamba"):
        A.family_of(model).cost_dims(model.config)
