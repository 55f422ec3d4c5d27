"""The family adapters (``model/families``): the only modules that name a family's attributes; the registry finds
each tiny model's adapter and names the supported families for anything else."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch import nn

import headprune_utils
from conftest import tiny_model
from headprune_utils.model import architecture, families
from headprune_utils.model.families import registry
from headprune_utils.model.families.base import Family

PKG = Path(headprune_utils.__file__).parent
ADAPTERS = PKG / "model" / "families"

# Attribute names that belong to one family's modules or config: read only inside the adapters.
FAMILY_ATTRS = {
    "q_lin", "k_lin", "v_lin", "out_lin", "q_proj", "k_proj", "v_proj", "o_proj", "self_attn", "encoder_attn",
    "c_attn", "c_proj", "Wqkv", "Wo", "num_attention_heads", "encoder_attention_heads", "decoder_attention_heads",
    "num_key_value_heads", "attention_head_size", "all_head_size", "num_hidden_layers", "intermediate_size",
    "feed_forward_chunk", "LayerNorm", "position_embedding_type", "dense", "encoder_ffn_dim",
    "SelfAttention", "EncDecAttention", "relative_attention_bias", "has_relative_attention_bias", "d_kv",
    "query_key_value", "q_norm", "k_norm", "use_parallel_residual", "rotary_ndims", "query_pre_attn_scalar",
    "use_bidirectional_attention", "qkv_proj", "gate_up_proj",
}
# Paths through a family's module tree (``parent.attr``).
FAMILY_PATHS = {("attention", "self"), ("attention", "output"), ("encoder", "layer"), ("encoder", "layers"),
                ("decoder", "layers"), ("transformer", "layer"), ("transformer", "h"), ("model", "layers"),
                ("encoder", "block"), ("decoder", "block")}


def family_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every family attribute the code names: ``x.q_lin``, ``getattr(x, "q_lin")``,
    ``encoder.layer``; ``site.out_proj`` (the AttentionSite field) is the generic name and allowed."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr in FAMILY_ATTRS:
                found.append((node.lineno, f".{node.attr}"))
            if node.attr == "out_proj" and not (isinstance(node.value, ast.Name) and node.value.id == "site"):
                found.append((node.lineno, ".out_proj (only site.out_proj outside the adapters)"))
            parent = node.value
            name = parent.attr if isinstance(parent, ast.Attribute) else getattr(parent, "id", None)
            if (name, node.attr) in FAMILY_PATHS:
                found.append((node.lineno, f"{name}.{node.attr}"))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr", "setattr"):
            for arg in node.args[1:2]:
                if isinstance(arg, ast.Constant) and arg.value in FAMILY_ATTRS | {"out_proj", "self", "layer"}:
                    found.append((node.lineno, f"{node.func.id}(..., {arg.value!r})"))
    return found


def test_no_module_outside_the_adapters_names_a_family_attribute():
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        if ADAPTERS in path.parents:
            continue
        for line, what in family_names(ast.parse(path.read_text(encoding="utf-8"))):
            offenders.append(f"{path.relative_to(PKG.parent)}:{line}: {what}")
    assert not offenders, "family attributes named outside model/families:\n" + "\n".join(offenders)


def test_the_scan_finds_what_it_looks_for():
    code = ("a = model.bert.encoder.layer[0].attention.self.query\n"
            "b = getattr(m, 'q_lin', None)\n"
            "c = module.out_proj\n"
            "d = cfg.num_attention_heads\n"
            "e = site.out_proj\n")
    found = [what for _, what in family_names(ast.parse(code))]
    assert "encoder.layer" in found and "attention.self" in found
    assert "getattr(..., 'q_lin')" in found and ".num_attention_heads" in found
    assert sum("out_proj" in w for w in found) == 1  # module.out_proj, not site.out_proj
    # the adapters do name them
    assert family_names(ast.parse((ADAPTERS / "bert.py").read_text(encoding="utf-8")))


@pytest.mark.parametrize("kind, family", [("bert", "bert"), ("roberta", "bert"), ("electra", "bert"),
                                          ("distilbert", "distilbert")])
def test_each_tiny_model_finds_its_adapter(kind, family):
    model = tiny_model(kind)
    assert architecture.family_of(model).name == family
    assert architecture.family_of(model.config).name == family
    assert architecture.head_shape(model) == (3, 4)


def test_a_bert_laid_out_model_of_another_model_type_is_taken_by_its_layout():
    model = tiny_model("bert")
    model.config.model_type = "my-bert"
    assert architecture.family_of(model).name == "bert"
    with pytest.raises(architecture.UnsupportedArchitectureError):
        architecture.family_of(model.config)  # a config alone says nothing of the layout


def test_unsupported_architecture_names_the_supported_families():
    from transformers import FalconH1Config, FalconH1ForCausalLM

    # Falcon-H1: a hybrid (Mamba-2 mixers beside the attention in every layer), which no adapter covers
    cfg = FalconH1Config(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, mamba_d_ssm=16, mamba_n_heads=4, mamba_d_head=4, mamba_d_state=8, intermediate_size=37)
    model = FalconH1ForCausalLM(cfg)
    for call in (lambda: architecture.attention_sites(model), lambda: architecture.head_shape(cfg)):
        with pytest.raises(architecture.UnsupportedArchitectureError) as err:
            call()
        msg = str(err.value)
        assert "(falcon_h1)" in msg
        for family in registry.FAMILIES:
            assert family.name in msg
        assert "bert" in msg and "distilbert" in msg and "marian" in msg


def test_a_registered_adapter_is_asked_first_and_can_be_removed():
    class Toy(Family):
        name = "toy"
        model_types = ("bert",)

        def head_shape(self, cfg, kind):
            return (1, 1)

    toy = families.register(Toy())
    try:
        assert architecture.head_shape(tiny_model("bert")) == (1, 1)
    finally:
        registry.FAMILIES.remove(toy)
    assert architecture.head_shape(tiny_model("bert")) == (3, 4)
    with pytest.raises(TypeError):
        families.register(nn.Linear(1, 1))


def test_adapters_declare_what_their_heads_are():
    for family in registry.FAMILIES:
        assert family.name and family.model_types
        assert family.projections in ("separate", "fused", "latent") and family.linear in ("Linear", "Conv1D")
        assert family.positions
    bart = architecture.family_of(type("C", (), {"model_type": "marian"})())
    assert bart.causal_kinds == ("dec",)
    model = tiny_model("bert")
    assert architecture.family_of(model).kv_heads(model.config, None) == 4
    assert torch.equal(architecture.present_mask(model), torch.ones(3, 4))


@pytest.mark.parametrize("config_class, family, kv", [("GPT2Config", "gpt2", 4), ("GPTNeoXConfig", "gpt_neox", 4),
                                                      ("OPTConfig", "opt", 4), ("Phi3Config", "phi3", 2),
                                                      ("LlamaConfig", "llama", 2), ("MistralConfig", "llama", 2),
                                                      ("Qwen2Config", "llama", 2), ("Qwen3Config", "llama", 2),
                                                      ("GemmaConfig", "llama", 2), ("Gemma3TextConfig", "llama", 2),
                                                      ("MixtralConfig", "llama", 2), ("Qwen3MoeConfig", "llama", 2)])
def test_causal_lm_configs_find_their_adapter(config_class, family, kv):
    import transformers

    sizes = {"gpt2": dict(n_layer=3, n_head=4, n_embd=16),
             "gpt_neox": dict(num_hidden_layers=3, num_attention_heads=4, hidden_size=16),
             "opt": dict(num_hidden_layers=3, num_attention_heads=4, hidden_size=16, word_embed_proj_dim=16)}.get(
        family, dict(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, hidden_size=16))
    cfg = getattr(transformers, config_class)(vocab_size=50, **sizes)
    adapter = architecture.family_of(cfg)
    assert adapter.name == family and adapter.causal_kinds == (None,)
    assert architecture.head_shape(cfg) == (3, 4) and architecture.kv_shape(cfg) == (3, kv)
    assert architecture.kv_head_of(cfg) == [h * kv // 4 for h in range(4)]
    assert adapter.projections == ("separate" if family in ("llama", "opt") else "fused")  # phi3: qkv_proj
    assert adapter.linear == ("Conv1D" if family == "gpt2" else "Linear")


def test_cost_dims_of_a_mixture_of_experts_count_the_routed_experts():
    from transformers import MixtralConfig, Qwen3MoeConfig

    mixtral = MixtralConfig(vocab_size=50, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            hidden_size=32, intermediate_size=40, num_local_experts=8, num_experts_per_tok=2)
    qwen = Qwen3MoeConfig(vocab_size=50, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          hidden_size=32, head_dim=8, intermediate_size=40, moe_intermediate_size=12, num_experts=8,
                          num_experts_per_tok=3)
    # per token: the experts it is routed to, each a gated MLP of its own width (Qwen3-MoE: moe_intermediate_size)
    assert architecture.family_of(mixtral).cost_dims(mixtral).ffn_macs_per_token() == 3 * 32 * (2 * 40)
    assert architecture.family_of(qwen).cost_dims(qwen).ffn_macs_per_token() == 3 * 32 * (3 * 12)
    from transformers import Qwen2MoeConfig

    qwen2 = Qwen2MoeConfig(vocab_size=50, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           hidden_size=32, intermediate_size=40, moe_intermediate_size=12,
                           shared_expert_intermediate_size=20, num_experts=8, num_experts_per_tok=2)
    assert architecture.family_of(qwen2).cost_dims(qwen2).ffn_macs_per_token() == 3 * 32 * (2 * 12 + 20)  # + shared
    from transformers import GptOssConfig

    oss = GptOssConfig(vocab_size=50, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       hidden_size=32, head_dim=8, intermediate_size=24, num_local_experts=8, num_experts_per_tok=4)
    assert architecture.family_of(oss).cost_dims(oss).ffn_macs_per_token() == 3 * 32 * (4 * 24)
    assert architecture.head_shape(oss) == (2, 4) and architecture.kv_shape(oss) == (2, 2)


def test_cost_dims_of_starcoder2_count_its_two_matrix_mlp():
    from transformers import Starcoder2Config

    cfg = Starcoder2Config(vocab_size=50, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           hidden_size=32, intermediate_size=40)
    assert architecture.family_of(cfg).cost_dims(cfg).ffn_macs_per_token() == 2 * 32 * 40  # c_fc, c_proj: no gate


def test_cost_dims_count_grouped_key_value_heads_cheaper():
    from transformers import LlamaConfig

    cfg = LlamaConfig(vocab_size=50, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                      hidden_size=64, head_dim=8, intermediate_size=100)
    dims = architecture.family_of(cfg).cost_dims(cfg)
    assert (dims.n_heads, dims.n_kv_heads, dims.head_dim, dims.ffn_matrices) == (8, 2, 8, 3)
    # q and o: 2 * 64 * 8 * 8; k and v: 2 * 64 * 2 * 8; scores and context over 10 keys: 2 * 10 * 8 * 8
    assert dims.attention_macs_per_token(seq_len=10) == 2 * 64 * 64 + 2 * 64 * 16 + 2 * 10 * 64
    assert dims.attention_macs_per_token(kept_heads=4, kept_kv_heads=1) == 2 * 64 * 32 + 2 * 64 * 8
    assert dims.ffn_macs_per_token() == 3 * 64 * 100
    bert = tiny_model("bert")
    b = architecture.family_of(bert).cost_dims(bert.config)
    assert b.n_kv_heads == b.n_heads and b.ffn_matrices == 2
    # BERT's per-token attention projections: 4 d^2, as measure/costs.py counts them
    assert b.attention_macs_per_token() == 4 * b.d_model ** 2


def test_load_causal_lm_refuses_an_unsupported_family_before_reading_weights(tmp_path, monkeypatch):
    """A checkpoint of a family no adapter covers is refused on its config: the weights (gigabytes, for a real one)
    are never read."""
    import transformers

    from headprune_utils.model import models

    transformers.FalconH1ForCausalLM(transformers.FalconH1Config(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, mamba_d_ssm=16, mamba_n_heads=4, mamba_d_head=4, mamba_d_state=8, intermediate_size=37)).save_pretrained(tmp_path)

    def read_weights(*args, **kwargs):
        raise AssertionError("the weights were read before the family was checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", read_weights)
    with pytest.raises(architecture.UnsupportedArchitectureError, match="falcon_h1"):
        models.load_causal_lm(str(tmp_path), device="cpu")


def test_load_causal_lm_names_the_supported_language_model_of_a_wrapper(tmp_path):
    """A vision-language wrapper the adapters do not cover (LLaVA) whose language model is of a supported family
    (Llama): the refusal, before any weight is read, says which family its language model is and what to give."""
    import transformers

    from headprune_utils.model import models

    transformers.LlavaConfig(
        text_config=dict(model_type="llama", vocab_size=50, hidden_size=16, intermediate_size=20,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1),
        vision_config=dict(model_type="clip_vision_model", hidden_size=16, intermediate_size=32,
                           num_hidden_layers=1, num_attention_heads=2, image_size=28,
                           patch_size=14)).save_pretrained(tmp_path)
    with pytest.raises(architecture.UnsupportedArchitectureError) as err:
        models.load_causal_lm(str(tmp_path), device="cpu")
    msg = str(err.value)
    assert "(llava)" in msg or "llava model" in msg
    assert "adapter llama" in msg and "text-only causal LM" in msg
