"""The reference forward pass is right: it equals Hugging Face's own model, and its ablations equal weight edits.

- no ablation: the reference's logits equal the HF model's (eager and sdpa), its attention probabilities equal
  what HF returns with ``output_attentions`` (eager), for every fixture family;
- ``"zero"`` (also with gates between 0 and 1): equals the HF model with that head's slice of the output
  projection's input scaled by the gate (a weight edit on a copy);
- ``"mean"``: equals the HF model with the head's output-projection columns scaled by g and
  ``(1 - g) * W_o[:, head] @ mean`` added to the output projection's bias;
- ``"uniform"``: equals the HF model with the head's query projection zeroed (a gated attention's query rows, its
  output-gate rows kept; OLMo 2/3: its dims of the layer-wide query norm's weight, as a zeroed row would change the
  other heads' norm) (all scores equal, so HF's own masking makes the head uniform over the keys the query may see:
  padding, causality, sliding windows; T5 also drops the head's relative-bias column, which every layer shares, so
  there the head is ablated in all layers; gpt-oss also sets the head's sink to -inf, which takes it out of the
  softmax);
- Llama-family grouped-query attention: a physically pruned copy (query rows and output columns removed,
  uneven groups, an emptied key/value head, a layer with no head) equals zero ablation, in the reference and as
  an HF model built by hand; and greedy decoding by the reference equals HF ``generate`` with its KV cache.

Nothing here imports headprune_utils.
"""
from __future__ import annotations

import copy

import pytest
import torch

from . import reference as R
from .fixtures import CAUSAL_LMS, ENCODER_DECODERS, FIXTURES, GQA, PRUNABLE

NAMES = tuple(FIXTURES)
ABLATED = [(0, 1), (1, 0), (1, 3)]  # (layer, head) pairs ablated in every grid
CASES = [(n, impl) for n in NAMES for impl in FIXTURES[n].attn_implementations]


def _build(name, impl="eager"):
    fx = FIXTURES[name]
    return fx, fx.build(impl), fx.inputs()


def _hf(model, batch, **kw):
    with torch.no_grad():
        return model(**batch, **kw)


def _hf_probs(out, fx) -> dict:
    if fx.encoder_decoder:
        return {"enc": out.encoder_attentions, "dec": out.decoder_attentions, "cross": out.cross_attentions}
    return {None: out.attentions}


def _ablations(fx, how, gate=0.0, means=None) -> dict | R.Ablation:
    out = {}
    for kind, g in fx.grids.items():
        gates = torch.ones(g.n_layers, g.n_heads, dtype=torch.float64)
        for layer, head in ABLATED:
            gates[layer, head] = gate
        out[kind] = R.Ablation(how, gates, None if means is None else means[kind])
    return out[None] if None in out else out


# ------------------------------------------------------------------ where each family's heads are (test side only)
# gated attention: q_proj's rows head by head, head h's query rows h*2d:h*2d+d, then its output-gate rows
GATED = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
HYBRIDS = ("granitemoehybrid", "bamba", "nemotron_h", *GATED)  # attention layers between recurrent ones


def _attention(model, family, kind, layer):
    if family in HYBRIDS:  # the grid's rows are the attention layers (Nemotron-H's attention: its layer's mixer)
        block = model.model.layers[_row_layer(model, layer)]
        a = block.mixer if family == "nemotron_h" else block.self_attn
        return a.q_proj, a.o_proj, "gated" if family in GATED else "linear"
    return _attention_of_layer(model, family, kind, layer)


def _row_layer(model, row: int) -> int:
    """The model layer of grid row ``row`` (a hybrid's rows are its attention layers; elsewhere the same)."""
    cfg = model.config
    if cfg.model_type not in HYBRIDS:
        return row
    types = cfg.layer_types if cfg.model_type in GATED else cfg.layers_block_type
    return [i for i, t in enumerate(types) if t == "full_attention"][row]


def _attention_of_layer(model, family, kind, layer):
    """(query projection, output projection, layout) of one attention layer; layout "linear", "conv1d" or "neox"
    (a Linear output projection; the query rows of head h at h*3d:h*3d+d of the fused projection)."""
    if family in ("bert", "roberta"):
        a = model.base_model.encoder.layer[layer].attention
        return a.self.query, a.output.dense, "linear"
    if family == "distilbert":
        a = model.distilbert.transformer.layer[layer].attention
        return a.q_lin, a.out_lin, "linear"
    if family in ("bart", "marian"):
        stack = model.model.encoder if kind == "enc" else model.model.decoder
        a = stack.layers[layer].encoder_attn if kind == "cross" else stack.layers[layer].self_attn
        return a.q_proj, a.out_proj, "linear"
    if family == "gpt2":
        a = model.transformer.h[layer].attn
        return a.c_attn, a.c_proj, "conv1d"
    if family == "opt":
        a = model.model.decoder.layers[layer].self_attn
        return a.q_proj, a.out_proj, "linear"
    if family == "gpt_neox":
        a = model.gpt_neox.layers[layer].attention
        return a.query_key_value, a.dense, "neox"  # rows head by head: head h's q | k | v at h*3d:(h+1)*3d
    if family == "phi3":  # the queries are the first rows of the fused qkv_proj
        a = model.model.layers[layer].self_attn
        return a.qkv_proj, a.o_proj, "linear"
    if family in ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gpt_oss", "gemma", "gemma2",
                  "gemma3_text", "olmo", "olmo2", "olmo3", "smollm3", "granite", "starcoder2", "cohere",
                  "cohere2", "ministral", "seed_oss", "qwen2_moe", "helium", "ernie4_5", "arcee", "apertus",
                  "exaone4", "hunyuan_v1_dense", "nanochat", "glm", "glm4", "stablelm", "llama4_text"):
        a = model.model.layers[layer].self_attn
        return a.q_proj, a.o_proj, "linear"
    if family == "bloom":  # fused rows head by head: head h's q | k | v at h*3d:(h+1)*3d (as GPT-NeoX)
        a = model.transformer.h[layer].self_attention
        return a.query_key_value, a.dense, "neox"
    if family == "falcon":  # fused rows by the layout (see _falcon_query_start)
        a = model.transformer.h[layer].self_attention
        return a.query_key_value, a.dense, "falcon"
    if family in ("deepseek_v3", "deepseek_v2"):  # the queries: q_proj, or q_b_proj (compressed); head h's rows h*qk:(h+1)*qk
        a = model.model.layers[layer].self_attn
        return (a.q_proj if a.q_proj is not None else a.q_b_proj), a.o_proj, "linear"
    if family == "t5":
        stack = model.encoder if kind == "enc" else model.decoder
        block = stack.block[layer]
        a = block.layer[1].EncDecAttention if kind == "cross" else block.layer[0].SelfAttention
        return a.q, a.o, "linear"
    if family == "modernbert":
        a = model.model.layers[layer].attn
        return a.Wqkv, a.Wo, "linear"  # the query is the first third of Wqkv's rows
    raise AssertionError(family)


def _edit_output(model, fx, kind, layer, head, gate, mean=None):
    """Scale the head's input dims of the output projection by ``gate``; with ``mean``, add
    ``(1 - gate) * W_o[:, head] @ mean`` to its bias."""
    _, o, layout = _attention(model, fx.family, kind, layer)
    d = fx.grids[kind].head_dim
    s = slice(head * d, (head + 1) * d)
    with torch.no_grad():
        linear = layout != "conv1d"
        cols = (o.weight[:, s] if linear else o.weight[s, :].T).clone()  # [out, head_dim]
        if linear:
            o.weight[:, s] *= gate
        else:
            o.weight[s, :] *= gate
        if mean is not None:
            shift = (1 - gate) * (cols @ mean.to(cols.dtype))
            if o.bias is None:
                o.bias = torch.nn.Parameter(shift.clone())
            else:
                o.bias += shift


def _zero_query(model, fx, kind, layer, head):
    q, _, layout = _attention(model, fx.family, kind, layer)
    d = fx.grids[kind].head_dim
    if layout == "falcon":
        start = _falcon_query_start(model.config, head)
        s = slice(start, start + d)
    elif layout == "gated":  # the head's query rows, not its output-gate rows (the gate still applies)
        s = slice(2 * head * d, (2 * head + 1) * d)
    else:
        s = slice(head * d, (head + 1) * d) if layout != "neox" else slice(3 * head * d, (3 * head + 1) * d)
    with torch.no_grad():
        if fx.family in ("olmo2", "olmo3"):  # one RMSNorm over all heads' queries: zero the head's norm weight (a
            _module(model, fx.family, kind, layer).q_norm.weight[s] = 0  # zeroed q row would move the others' RMS)
        elif layout in ("linear", "neox", "falcon", "gated"):
            q.weight[s, :] = 0
        else:
            q.weight[:, s] = 0  # GPT-2: the query is the first third of c_attn's columns
        if q.bias is not None and fx.family not in ("olmo2", "olmo3"):
            q.bias[s] = 0
        sinks = getattr(_module(model, fx.family, kind, layer), "sinks", None)
        if sinks is not None:  # gpt-oss: the sink would still take its share of the equal scores
            sinks[head] = float("-inf")


def _falcon_query_start(cfg, head: int) -> int:
    """The first row of query head ``head`` in Falcon's fused ``query_key_value``: group by group (each key/value
    head's queries, its key, its value) in the new architecture; all queries first (multi-query); else head by head."""
    d = cfg.hidden_size // cfg.num_attention_heads
    if cfg.new_decoder_architecture:
        group = cfg.num_attention_heads // cfg.num_kv_heads
        return ((head // group) * (group + 2) + head % group) * d
    return head * d if cfg.multi_query else 3 * head * d


def _module(model, family, kind, layer):
    """The causal LMs' attention module of ``layer`` (None for the others: only gpt-oss has sinks)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    return None if layers is None else getattr(layers[_row_layer(model, layer)], "self_attn", None)


def _edited(model, fx, how, gate=0.0, means=None):
    m = copy.deepcopy(model)
    for kind in fx.grids:
        for layer, head in ABLATED:
            if how == "uniform":
                _zero_query(m, fx, kind, layer, head)
            else:
                _edit_output(m, fx, kind, layer, head, gate, None if means is None else means[kind][layer, head])
    return m


def _close(a, b, atol, what):
    err = (a - b).abs().max().item()
    assert err <= atol, f"{what}: max |difference| {err:.3g} > {atol:g}"


# ------------------------------------------------------------------ the reference equals the HF model
@pytest.mark.parametrize("name,impl", CASES)
def test_unablated_reference_equals_hf(name, impl):
    fx, model, batch = _build(name, impl)
    out = _hf(model, batch, output_attentions=(impl == "eager"))
    trace = R.forward(model, batch)
    _close(trace.logits, out.logits, fx.atol, f"{name} {impl} logits")
    assert set(trace.grids) == set(fx.grids)
    for kind, grid in fx.grids.items():
        layers = trace.grids[kind]
        assert len(layers) == grid.n_layers
        for t in layers:
            assert t.contexts.shape[2:] == (grid.n_heads, grid.head_dim)
            assert t.probs.shape[1] == grid.n_heads
    if impl == "eager":
        for kind, hf_layers in _hf_probs(out, fx).items():
            for layer, (hf, t) in enumerate(zip(hf_layers, trace.grids[kind])):
                _close(t.probs, hf, fx.atol, f"{name} probs {kind} layer {layer}")


@pytest.mark.parametrize("name", NAMES)
def test_visible_keys_follow_the_grid(name):
    """The fixture's plain data (causal, window) says which keys a query sees, as the reference uses them."""
    fx, model, batch = _build(name)
    trace = R.forward(model, batch)
    real = batch["attention_mask"].bool()
    for kind, grid in fx.grids.items():
        for layer, t in enumerate(trace.grids[kind]):
            n_q, n_k = t.visible.shape[1:]
            i, j = torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]
            want = torch.ones(n_q, n_k, dtype=torch.bool)
            if grid.causal:
                want &= j <= i
            if grid.windows and grid.windows[layer] is not None:
                want &= (i - j).abs() <= grid.windows[layer]
            if grid.chunks and grid.chunks[layer] is not None:
                want &= i // grid.chunks[layer] == j // grid.chunks[layer]
            keys_real = real if kind in (None, "enc", "cross") else torch.ones(real.shape[0], n_k, dtype=torch.bool)
            assert torch.equal(t.visible, want[None] & keys_real[:, None, :]), (kind, layer)
            assert bool((t.probs[~t.visible[:, None].expand_as(t.probs)] == 0).all())


# ------------------------------------------------------------------ ablations equal weight edits
@pytest.mark.parametrize("gate", [0.0, 0.3])
@pytest.mark.parametrize("name", NAMES)
def test_zero_ablation_equals_output_columns_scaled(name, gate):
    fx, model, batch = _build(name)
    ablated = R.forward(model, batch, _ablations(fx, "zero", gate)).logits
    _close(ablated, _hf(_edited(model, fx, "zero", gate), batch).logits, fx.atol, f"{name} zero g={gate}")
    assert (ablated - R.forward(model, batch).logits).abs().max() > 100 * fx.atol  # the ablation does something


@pytest.mark.parametrize("gate", [0.0, 0.3])
@pytest.mark.parametrize("name", NAMES)
def test_mean_ablation_equals_output_bias_shift(name, gate):
    fx, model, batch = _build(name)
    g = torch.Generator().manual_seed(5)
    means = {k: torch.randn(v.n_layers, v.n_heads, v.head_dim, generator=g, dtype=torch.float64)
             for k, v in fx.grids.items()}
    ablated = R.forward(model, batch, _ablations(fx, "mean", gate, means)).logits
    _close(ablated, _hf(_edited(model, fx, "mean", gate, means), batch).logits, fx.atol, f"{name} mean g={gate}")
    zero = R.forward(model, batch, _ablations(fx, "zero", gate)).logits
    assert (ablated - zero).abs().max() > 100 * fx.atol


# a zeroed query attends uniformly only where nothing but q . k places the scores: not under T5's relative bias or
# BLOOM's ALiBi (their "uniform" is checked through the package against the reference's definition)
ZERO_QUERY_IS_UNIFORM = tuple(n for n in NAMES if FIXTURES[n].positions not in ("relative_bias", "alibi"))


@pytest.mark.parametrize("name", ZERO_QUERY_IS_UNIFORM)
def test_uniform_ablation_equals_zeroed_query(name):
    fx, model, batch = _build(name)
    ablated = R.forward(model, batch, _ablations(fx, "uniform")).logits
    _close(ablated, _hf(_edited(model, fx, "uniform"), batch).logits, fx.atol, f"{name} uniform")
    assert (ablated - R.forward(model, batch, _ablations(fx, "zero")).logits).abs().max() > 100 * fx.atol


def test_t5_uniform_ablation_equals_zeroed_query_and_bias():
    """T5's relative bias is one table (the first layer's) for every layer: drop head 2's column and its query
    in every layer of the encoder and decoder self-attention, and in the cross attention (no bias there)."""
    fx, model, batch = _build("t5")
    head = 2
    edited = copy.deepcopy(model)
    with torch.no_grad():
        for stack in (edited.encoder, edited.decoder):
            stack.block[0].layer[0].SelfAttention.relative_attention_bias.weight[:, head] = 0
    ablations = {}
    for kind, grid in fx.grids.items():
        for layer in range(grid.n_layers):
            _zero_query(edited, fx, kind, layer, head)
        gates = torch.ones(grid.n_layers, grid.n_heads, dtype=torch.float64)
        gates[:, head] = 0
        ablations[kind] = R.Ablation("uniform", gates)
    _close(R.forward(model, batch, ablations).logits, _hf(edited, batch).logits, fx.atol, "t5 uniform")


@pytest.mark.parametrize("name", ["bert", "llama_gqa", "bart"])
def test_gates_of_one_change_nothing(name):
    fx, model, batch = _build(name)
    plain = R.forward(model, batch).logits
    means = {k: torch.randn(v.n_layers, v.n_heads, v.head_dim, dtype=torch.float64) for k, v in fx.grids.items()}
    for how in R.HOWS:
        ab = _ablations(fx, how, gate=1.0, means=means)
        assert torch.equal(R.forward(model, batch, ab).logits, plain), how


@pytest.mark.parametrize("name", ["llama_gqa", "t5"])
def test_gates_are_differentiable(name):
    """d loss / d gate from the reference equals a central finite difference (importance scores)."""
    fx, model, batch = _build(name)
    kind = next(iter(fx.grids))
    g = fx.grids[kind]
    gates = torch.full((g.n_layers, g.n_heads), 0.7, dtype=torch.float64, requires_grad=True)

    def loss(gv):
        ab = R.Ablation("zero", gv)
        return R.forward(model, batch, ab if kind is None else {kind: ab}).logits.pow(2).mean()

    loss(gates).backward()
    eps = 1e-6
    for layer, head in [(0, 1), (1, 2)]:
        bump = torch.zeros_like(gates)
        bump[layer, head] = eps
        with torch.no_grad():
            fd = (loss(gates + bump) - loss(gates - bump)) / (2 * eps)
        assert abs(gates.grad[layer, head].item() - fd.item()) < 1e-6 * max(1.0, abs(fd.item()))
    assert gates.grad.abs().min() > 0


@pytest.mark.parametrize("name", CAUSAL_LMS)
def test_lm_loss_equals_hf_loss(name):
    fx, model, batch = _build(name)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    hf = _hf(model, batch, labels=labels).loss  # HF computes the loss in float32
    ours = R.lm_loss(R.forward(model, batch).logits, batch["input_ids"], batch["attention_mask"])
    _close(ours, hf.double(), 1e-5, f"{name} loss")


def test_head_means_average_real_positions():
    fx, model, batch = _build("bert")
    means = R.head_means(model, batch)[None]
    t = R.forward(model, batch).grids[None][1]
    real = batch["attention_mask"].bool()
    want = t.contexts[real].mean(0)  # [heads, head_dim] over the real tokens
    _close(means[1], want, 1e-12, "head_means")


def test_ablation_arguments_are_checked():
    with pytest.raises(ValueError, match="how"):
        R.Ablation("half", torch.ones(2, 4))
    with pytest.raises(ValueError, match="means"):
        R.Ablation("mean", torch.ones(2, 4))
    assert R.Ablation.heads("zero", (2, 4), [(1, 2), (0, 0)]).gates.sum() == 6
    fx, model, batch = _build("bert")
    with pytest.raises(ValueError, match="heads per layer"):
        R.forward(model, batch, R.Ablation("zero", torch.ones(2, 3)))
    fx, model, batch = _build("bart")
    with pytest.raises(ValueError, match="dict by grid"):
        R.forward(model, batch, R.Ablation("zero", torch.ones(2, 4)))
    with pytest.raises(ValueError, match="unknown grid"):
        R.forward(model, batch, {"encoder": R.Ablation("zero", torch.ones(2, 4))})
    q = torch.zeros(1, 1, 2, 4)
    with pytest.raises(ValueError, match="sees no key"):
        R.attend(q, q, q, torch.zeros(1, 2, 2, dtype=torch.bool), scale=1.0)


# ------------------------------------------------------------------ grouped-query attention, physically pruned
KEEP = {0: [0, 1, 2], 1: [1]}  # 4 heads on 2 kv heads: layer 0 groups of 2 and 1; layer 1 only head 1, kv head 1 gone


def _zero_ablation_of(fx, keep):
    g = fx.grids[None]
    gates = torch.ones(g.n_layers, g.n_heads, dtype=torch.float64)
    for layer, heads in keep.items():
        gates[layer] = 0
        gates[layer, heads] = 1
    return R.Ablation("zero", gates)


# the Llama-layout grouped-query fixtures (Falcon's pruned layers are checked against the zero ablation instead)
@pytest.mark.parametrize("name", [n for n in GQA if n in PRUNABLE and FIXTURES[n].family != "falcon"])
@pytest.mark.parametrize("keep", [KEEP, {0: [3], 1: []}], ids=["uneven", "empty-layer"])
def test_pruned_reference_equals_zero_ablation(name, keep):
    fx, model, batch = _build(name)
    g = fx.grids[None]
    for layer, heads in keep.items():  # the pruned layer holds only the key/value heads its query heads read
        w = R.prune_llama_heads(R.llama_heads(model)[layer], heads)
        assert w.k.shape[0] == len({g.kv_head_of(h) for h in heads}) * g.head_dim
        assert w.q.shape[0] == w.o.shape[1] == len(heads) * g.head_dim
    pruned = R.pruned_llama_forward(model, batch, keep)
    gated = R.forward(model, batch, _zero_ablation_of(fx, keep))
    _close(pruned.logits, gated.logits, 1e-9, f"{name} pruned reference")
    edited = copy.deepcopy(model)
    for layer, heads in keep.items():
        for head in set(range(fx.grids[None].n_heads)) - set(heads):
            _edit_output(edited, fx, None, layer, head, 0.0)
    _close(pruned.logits, _hf(edited, batch).logits, fx.atol, f"{name} pruned vs HF columns zeroed")
    for layer, heads in keep.items():
        t = pruned.grids[None][layer]
        if not heads:
            assert t is None
            continue
        full = gated.grids[None][layer]
        if layer == 0:  # before any pruned layer, the kept heads compute exactly what they did
            _close(t.contexts, full.contexts[:, :, heads], 1e-9, f"{name} kept heads' contexts")
            _close(t.probs, full.probs[:, heads], 1e-9, f"{name} kept heads' probabilities")


class _NoHeads(torch.nn.Module):
    """A Llama attention layer with every head pruned: it adds the output projection's bias (gpt-oss has one),
    else nothing, to the residual stream."""

    def __init__(self, bias=None):
        super().__init__()
        self.bias = bias

    def forward(self, hidden_states, *args, **kwargs):
        out = torch.zeros_like(hidden_states)
        return (out if self.bias is None else out + self.bias.detach()), None


def hand_pruned_llama(model, keep: dict[int, list[int]]):
    """An HF Llama-family model pruned by hand: the kept query heads' rows of q_proj (a gated attention's: their
    output-gate rows too) and columns of o_proj, and for each kept query head the rows of the key/value head it reads
    (HF's ``repeat_kv`` assumes even groups, so uneven groups are written out as one key/value head per query head);
    a layer with no head left adds its output projection's bias only (and keeps nothing in the KV cache)."""
    pruned = copy.deepcopy(model)
    cfg = model.config
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    group = cfg.num_attention_heads // cfg.num_key_value_heads
    rows = lambda ids: torch.cat([torch.arange(i * d, (i + 1) * d) for i in ids])
    for layer, heads in keep.items():
        block = pruned.model.layers[_row_layer(model, layer)]
        attr = "mixer" if cfg.model_type == "nemotron_h" else "self_attn"  # Nemotron-H: one mixer per layer
        if not heads:
            setattr(block, attr, _NoHeads(getattr(block, attr).o_proj.bias))
            continue
        a = getattr(block, attr)
        q_rows, kv_rows, o_cols = rows(heads), rows([h // group for h in heads]), rows(heads)
        if cfg.model_type in GATED:  # each kept head's query rows and its output-gate rows: 2d rows per head
            q_rows = torch.cat([torch.arange(2 * i * d, 2 * (i + 1) * d) for i in heads])
        with torch.no_grad():
            for proj, r in ((a.q_proj, q_rows), (a.k_proj, kv_rows), (a.v_proj, kv_rows)):
                proj.weight = torch.nn.Parameter(proj.weight[r].clone())
                if proj.bias is not None:
                    proj.bias = torch.nn.Parameter(proj.bias[r].clone())
                proj.out_features = len(r)
            a.o_proj.weight = torch.nn.Parameter(a.o_proj.weight[:, o_cols].clone())
            a.o_proj.in_features = len(o_cols)
            if getattr(a, "sinks", None) is not None:  # gpt-oss: a sink per query head
                a.sinks = torch.nn.Parameter(a.sinks[torch.tensor(heads)].clone())
            if getattr(getattr(a, "q_norm", None), "weight", None) is not None and a.q_norm.weight.dim() == 2:
                # Cohere: a row per head (nanochat's norms have no weight)
                a.q_norm.weight = torch.nn.Parameter(a.q_norm.weight[torch.tensor(heads)].clone())
                a.k_norm.weight = torch.nn.Parameter(a.k_norm.weight[torch.tensor([h // group for h in heads])].clone())
            if getattr(a, "qk_layernorm", False):  # StableLM: a norm module per head (and a view by its head counts)
                a.q_layernorm.norms = torch.nn.ModuleList([a.q_layernorm.norms[h] for h in heads])
                a.k_layernorm.norms = torch.nn.ModuleList([a.k_layernorm.norms[h // group] for h in heads])
            if hasattr(a, "num_heads"):
                a.num_heads = a.num_key_value_heads = len(heads)
        a.num_key_value_groups = 1
    return pruned


@pytest.mark.parametrize("name", [n for n in GQA if FIXTURES[n].qkv == "separate" and n in PRUNABLE])  # q/k/v Linears
@pytest.mark.parametrize("keep", [{0: [0, 1, 2], 1: []}, {0: [], 1: [0, 3]}], ids=["last-empty", "first-empty"])
def test_hand_pruned_hf_model_equals_zero_ablation_and_generates(name, keep):
    fx, model, batch = _build(name)
    pruned = hand_pruned_llama(model, keep)
    ablation = _zero_ablation_of(fx, keep)
    _close(_hf(pruned, batch).logits, R.forward(model, batch, ablation).logits, fx.atol, f"{name} hand-pruned")
    prompt = fx.inputs(padded=False)
    assert torch.equal(R.hf_greedy(pruned, prompt, 5), R.greedy(model, prompt, 5, ablation))


# ------------------------------------------------------------------ greedy decoding: reference vs HF generate
GEN_CASES = [(n, impl) for n in CAUSAL_LMS + ENCODER_DECODERS for impl in FIXTURES[n].attn_implementations]


@pytest.mark.parametrize("name,impl", GEN_CASES)
def test_greedy_reference_equals_hf_generate(name, impl):
    fx, model, _ = _build(name, impl)
    prompt = fx.inputs(padded=fx.encoder_decoder)  # causal LMs: unpadded prompts of equal length
    ours = R.greedy(model, prompt, 5)
    assert torch.equal(ours, R.hf_greedy(model, prompt, 5))
    assert len(set(ours[:, -5:].flatten().tolist())) > 1  # not a degenerate repeat of one token


@pytest.mark.parametrize("name,how", [(n, h) for n in CAUSAL_LMS + ("bart",) for h in ("zero", "uniform")
                                      if h == "zero" or n in ZERO_QUERY_IS_UNIFORM])
def test_greedy_with_ablation_equals_generate_of_edited_model(name, how):
    """With a KV cache, HF's generate of the weight-edited model (output columns zeroed, or the query zeroed:
    uniform over the visible prefix at every step) equals the reference's greedy decoding with the ablation."""
    fx, model, _ = _build(name)
    prompt = fx.inputs(padded=fx.encoder_decoder)
    ablation = _ablations(fx, how)
    ours = R.greedy(model, prompt, 5, ablation)
    assert torch.equal(ours, R.hf_greedy(_edited(model, fx, how), prompt, 5))
