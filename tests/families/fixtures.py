"""Tiny random models of every family the head adapters cover, built offline from transformers' config classes.

Each :class:`Fixture` says, as plain data, where its heads live (:class:`Grid`: layers, query heads, key/value
heads, head dim, causal, cross-attention) and builds a seeded model in float64 with eager or sdpa attention.
Weights are redrawn after construction (std 0.3 for matrices, norms around 1, random biases and logit biases),
so attention is far from uniform and a bias or a norm read from the wrong place shows in the logits.

    fx = FIXTURES["llama_gqa"]
    model = fx.build("eager")              # float64, eval mode, seeded
    batch = fx.inputs()                    # right-padded second row; seq2seq: decoder_input_ids too
    fx.grids[None].n_kv_heads              # 2   (one-grid models: key None; seq2seq: "enc", "dec", "cross")

Nothing here imports headprune_utils.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import transformers as tf

SEQ2SEQ_KINDS = ("enc", "dec", "cross")
VOCAB = 61
SEED = 0


@dataclass(frozen=True)
class Grid:
    """One grid of heads: ``n_layers`` x ``n_heads`` query heads.

    ``n_kv_heads`` key/value heads per layer; query head ``h`` reads key/value head
    ``h // (n_heads // n_kv_heads)`` (grouped-query attention; ``n_kv_heads == n_heads`` elsewhere).
    ``causal``: a query sees keys at its own position and before only. ``cross``: queries come from the decoder,
    keys and values from the encoder's output. ``windows``: a key is visible only within this distance |query - key|
    (per layer, ``None`` = no window; see ``Fixture.grids`` of Mistral and ModernBERT); ``chunks``: a key is visible
    only from the queries of its own chunk of that many positions (per layer; Llama 4's chunked attention).
    ``model_layers``: in a hybrid (Granite 4.0-H), the model layer of each row (the grid holds its attention layers).
    """

    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    causal: bool = False
    cross: bool = False
    windows: tuple = ()  # per layer: None (full) or an int; empty = full everywhere
    chunks: tuple = ()  # per layer: None or a chunk size c (a key visible only from queries of its chunk: i//c == j//c)
    model_layers: tuple = ()  # a hybrid's rows: the model layer of each (its attention layers); empty = the identity

    @property
    def group_size(self) -> int:
        return self.n_heads // self.n_kv_heads

    def kv_head_of(self, head: int) -> int:
        return head // self.group_size

    def model_layer(self, row: int) -> int:
        return self.model_layers[row] if self.model_layers else row


@dataclass(frozen=True)
class Fixture:
    """A tiny random model of one family and what a test needs to know about it.

    ``positions``: how positions enter: ``"absolute"`` (learned table), ``"sinusoidal"`` (fixed table),
    ``"rotary"``, ``"relative_bias"`` (T5's per-head bias). ``qkv``: ``"separate"`` projections, or the fused
    module's attribute (``"c_attn"``: GPT-2's Conv1D, columns q | k | v; ``"Wqkv"``: ModernBERT's Linear, rows
    q | k | v); within q, k and v head ``h`` is the slice ``h * head_dim : (h + 1) * head_dim``; except
    ``"query_key_value"`` (GPT-NeoX's Linear), laid out head by head: head ``h``'s rows are
    ``h * 3 * head_dim : (h + 1) * 3 * head_dim``, its q | k | v blocks in that order.
    ``grids``: ``{None: Grid}`` for one-grid models (encoders, causal LMs), ``{"enc", "dec", "cross"}`` for
    encoder-decoders. ``atol``: the tolerance at which the reference must equal the HF model in float64
    (the families whose HF code rounds through float32 on purpose, e.g. RMSNorm, rotary angles or a float32
    softmax, get 1e-5, T5 5e-5 for its unscaled scores; the rest 1e-9).
    """

    name: str
    family: str  # config.model_type
    model_class: type
    make_config: Callable[[], object]
    grids: dict
    causal_lm: bool = False
    encoder_decoder: bool = False
    positions: str = "absolute"
    qkv: str = "separate"
    attn_implementations: tuple = ("eager", "sdpa")
    atol: float = 1e-9
    pad_token_id: int | None = None
    prunable: bool = True  # False: the family refuses physical pruning (OLMo 2/3: norms over all heads together)
    notes: str = ""

    def config(self, attn_implementation: str = "eager"):
        cfg = self.make_config()
        cfg._attn_implementation = attn_implementation
        return cfg

    def build(self, attn_implementation: str = "eager", dtype: torch.dtype = torch.float64, seed: int = SEED):
        """A seeded model in ``dtype``, eval mode, weights redrawn as described in the module docstring."""
        if attn_implementation not in self.attn_implementations:
            raise ValueError(f"attn_implementation={attn_implementation!r}: {self.name} has "
                             f"{self.attn_implementations}")
        torch.manual_seed(seed)
        model = self.model_class._from_config(self.config(attn_implementation),
                                              attn_implementation=attn_implementation)
        model = model.to(dtype).eval()
        _redraw(model, seed)
        return model

    def inputs(self, batch: int = 2, seq: int = 7, dec_seq: int = 5, seed: int = SEED, padded: bool = True) -> dict:
        """Token ids (never the pad id) and an attention mask whose second row is right-padded by 2.

        Encoder-decoders also get ``decoder_input_ids`` (starting with the decoder start token, unpadded).
        """
        g = torch.Generator().manual_seed(seed + 1)
        low = 3  # ids 0..2 are the special tokens of every fixture
        ids = torch.randint(low, VOCAB, (batch, seq), generator=g)
        mask = torch.ones(batch, seq, dtype=torch.long)
        if padded and batch > 1:
            mask[1, seq - 2:] = 0
            if self.pad_token_id is not None:
                ids[1, seq - 2:] = self.pad_token_id
        out = {"input_ids": ids, "attention_mask": mask}
        if self.encoder_decoder:
            start = self.make_config().decoder_start_token_id
            dec = torch.randint(low, VOCAB, (batch, dec_seq), generator=g)
            dec[:, 0] = start
            out["decoder_input_ids"] = dec
        return out


def _redraw(model: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.requires_grad:  # e.g. Marian's sinusoidal positions stay sinusoidal
                continue
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
            if p.dim() == 1 and "norm" in name.lower():
                p.copy_(1.0 + 0.1 * noise) if name.endswith("weight") else p.copy_(0.1 * noise)
            elif p.dim() == 1:
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.3 * noise)
        for name, b in model.named_buffers():  # a router's score correction (Nemotron-H), zero when built
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g, dtype=torch.float64).to(b.dtype))
        if hasattr(model, "final_logits_bias"):
            b = model.final_logits_bias
            b.copy_(0.1 * torch.randn(b.shape, generator=g, dtype=torch.float64).to(b.dtype))


# ---------------------------------------------------------------- configs
# Shared sizes: hidden 32, 4 query heads of dim 8 unless said otherwise, 2 layers (ModernBERT 3), vocab 61,
# dropout 0. Token ids 0, 1, 2 are pad / bos / eos (per family below).

def _bert():
    return tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=37, max_position_embeddings=64, hidden_dropout_prob=0.0,
                         attention_probs_dropout_prob=0.0, num_labels=3, pad_token_id=0)


def _roberta():
    return tf.RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=37, max_position_embeddings=64, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, num_labels=3, pad_token_id=1, bos_token_id=0,
                            eos_token_id=2)


def _distilbert():
    return tf.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=37,
                               max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
                               seq_classif_dropout=0.0, num_labels=3, pad_token_id=0)


def _seq2seq_common():
    return dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64,
                dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=0, bos_token_id=1,
                eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None)


def _bart():
    return tf.BartConfig(**_seq2seq_common(), scale_embedding=True, forced_bos_token_id=None)


def _marian():
    return tf.MarianConfig(**_seq2seq_common(), scale_embedding=True)


def _gpt2():
    return tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, n_inner=37,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0)


def _gpt_neox(parallel: bool, rotary: float, bias: bool):
    return tf.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=37, max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0,
                            use_parallel_residual=parallel, attention_bias=bias, tie_word_embeddings=False,
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                             "partial_rotary_factor": rotary},
                            bos_token_id=1, eos_token_id=2, pad_token_id=0)


def _opt(pre_norm: bool, embed_dim: int, bias: bool):
    return tf.OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=37,
                        max_position_embeddings=64, word_embed_proj_dim=embed_dim, do_layer_norm_before=pre_norm,
                        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, enable_bias=bias,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _llama(n_kv: int, head_dim: int):
    return tf.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=n_kv, head_dim=head_dim,
                          max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=False,
                          pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _phi3():
    return tf.Phi3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         original_max_position_embeddings=64, sliding_window=3,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
                         tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _eager_experts(cfg):
    """Experts computed one by one (HF's default grouped matmul has no float64 kernel on the CPU)."""
    cfg._experts_implementation = "eager"
    return cfg


def _mixtral():
    return _eager_experts(tf.MixtralConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, num_local_experts=4, num_experts_per_tok=2,
        tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2))


def _qwen3_moe():
    return _eager_experts(tf.Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=37, moe_intermediate_size=19, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64, num_experts=4,
        num_experts_per_tok=2, norm_topk_prob=False, mlp_only_layers=[1], tie_word_embeddings=False, pad_token_id=0,
        bos_token_id=1, eos_token_id=2))


def _gpt_oss():
    return _eager_experts(tf.GptOssConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=64, sliding_window=3,
        layer_types=["sliding_attention", "full_attention"], num_local_experts=4, num_experts_per_tok=2,
        swiglu_limit=1.0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2))


def _smollm3():
    return tf.SmolLM3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                            no_rope_layers=[1, 0], tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
                            eos_token_id=2)


def _granite():
    return tf.GraniteConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                            attention_bias=True, attention_multiplier=0.2, embedding_multiplier=3.0,
                            residual_multiplier=0.5, logits_scaling=2.0, tie_word_embeddings=False, pad_token_id=0,
                            bos_token_id=1, eos_token_id=2)


def _starcoder2():
    return tf.Starcoder2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                               sliding_window=3, use_bias=True, residual_dropout=0.0, embedding_dropout=0.0,
                               tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _cohere():
    return tf.CohereConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_qk_norm=True,
                           logit_scale=0.5, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _cohere2():
    return tf.Cohere2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, sliding_window=3,
                            layer_types=["sliding_attention", "full_attention"], logit_scale=0.5,
                            tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _ministral():
    return tf.MinistralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                              sliding_window=3, layer_types=["sliding_attention", "full_attention"],
                              tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _seed_oss():
    return tf.SeedOssConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                            attention_bias=True, attention_out_bias=True, tie_word_embeddings=False, pad_token_id=0,
                            bos_token_id=1, eos_token_id=2)


def _qwen2_moe():
    return _eager_experts(tf.Qwen2MoeConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=37, moe_intermediate_size=19,
        shared_expert_intermediate_size=23, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, num_experts=4, num_experts_per_tok=2, norm_topk_prob=False, mlp_only_layers=[1],
        qkv_bias=True, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2))


def _helium():
    return tf.HeliumConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                           tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _ernie4_5():
    return tf.Ernie4_5Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                             use_bias=True, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _arcee():
    return tf.ArceeConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, attention_bias=True,
                          tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _apertus():
    return tf.ApertusConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, hidden_act="xielu",
                            dtype=torch.float64, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
                            eos_token_id=2)


def _exaone4():
    return tf.Exaone4Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, sliding_window=3,
                            sliding_window_pattern=2, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                            tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _hunyuan():
    return tf.HunYuanDenseV1Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                   tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _nanochat():
    return tf.NanoChatConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                             final_logit_softcapping=2.0, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
                             eos_token_id=2)


def _glm(config_class):
    return config_class(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
                        attention_bias=True, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
                        eos_token_id=2)


def _stablelm(parallel: bool):
    return tf.StableLmConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                              "partial_rotary_factor": 0.25},
                             qk_layernorm=True, use_qkv_bias=True, use_parallel_residual=parallel,
                             tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _deepseek_v3(q_lora: bool):
    return tf.DeepseekV3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, moe_intermediate_size=19,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                               q_lora_rank=12 if q_lora else None, kv_lora_rank=10, qk_nope_head_dim=4,
                               qk_rope_head_dim=4, v_head_dim=8, first_k_dense_replace=2, rope_interleave=q_lora,
                               max_position_embeddings=64, rope_parameters={"rope_type": "default",
                                                                            "rope_theta": 10000.0},
                               tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _deepseek_v2():
    return tf.DeepseekV2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, moe_intermediate_size=19,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None,
                               kv_lora_rank=10, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=8,
                               first_k_dense_replace=2, max_position_embeddings=64,
                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                               tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _bloom(post_norm_residual: bool):
    return tf.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4,
                          apply_residual_connection_post_layernorm=post_norm_residual, hidden_dropout=0.0,
                          attention_dropout=0.0, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _falcon(**layout):
    return tf.FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0, pad_token_id=0,
                           bos_token_id=1, eos_token_id=2, **layout)


def _llama4():
    return tf.Llama4TextConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=16, intermediate_size_mlp=24,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                               num_local_experts=3, num_experts_per_tok=1, moe_layers=[1], no_rope_layers=[1, 0],
                               attention_chunk_size=4, attn_temperature_tuning=True, floor_scale=2, attn_scale=0.5,
                               use_qk_norm=True, max_position_embeddings=64,
                               rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                               tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _granite_hybrid(rope: bool):
    return tf.GraniteMoeHybridConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=24, shared_intermediate_size=24, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=0,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        position_embedding_type="rope" if rope else None, mamba_n_heads=4, mamba_d_state=8, mamba_n_groups=2,
        mamba_chunk_size=4, mamba_d_conv=3, embedding_multiplier=2.0, attention_multiplier=0.3, residual_multiplier=0.5,
        logits_scaling=2.0, max_position_embeddings=64, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
        eos_token_id=2)


def _bamba():
    return tf.BambaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=24, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, attn_layer_indices=[0, 2], mamba_n_heads=4, mamba_d_state=8, mamba_n_groups=1,
        mamba_chunk_size=4, mamba_d_conv=4, max_position_embeddings=64, tie_word_embeddings=False, pad_token_id=0,
        bos_token_id=1, eos_token_id=2)


def _qwen3_next():
    return _eager_experts(tf.Qwen3NextConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=24, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, linear_conv_kernel_dim=3, linear_key_head_dim=8, linear_value_head_dim=6,
        linear_num_key_heads=2, linear_num_value_heads=4, num_experts=3, num_experts_per_tok=2, moe_intermediate_size=12,
        shared_expert_intermediate_size=16, decoder_sparse_step=1, mlp_only_layers=[2],
        layer_types=["full_attention", "linear_attention", "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        max_position_embeddings=64, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2))


def _qwen3_5():
    return tf.Qwen3_5TextConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=24, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=8,
        linear_num_key_heads=2, linear_num_value_heads=2,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        max_position_embeddings=64, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _qwen3_5_moe():
    return _eager_experts(tf.Qwen3_5MoeTextConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1, head_dim=8,
        linear_conv_kernel_dim=3, linear_key_head_dim=8, linear_value_head_dim=8, linear_num_key_heads=1,
        linear_num_value_heads=2, num_experts=3, num_experts_per_tok=2, moe_intermediate_size=12,
        shared_expert_intermediate_size=16, layer_types=["full_attention", "linear_attention", "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        max_position_embeddings=64, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2))


def _nemotron_h():
    return _eager_experts(tf.NemotronHConfig(
        vocab_size=VOCAB, hidden_size=32,
        layers_block_type=["full_attention", "linear_attention", "moe", "full_attention", "mlp"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, mamba_num_heads=4, mamba_head_dim=8, n_groups=2,
        ssm_state_size=8, conv_kernel=3, chunk_size=4, intermediate_size=24, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=12, moe_shared_expert_intermediate_size=16, n_group=2, topk_group=1,
        routed_scaling_factor=1.5, norm_topk_prob=True, max_position_embeddings=64, tie_word_embeddings=False,
        pad_token_id=0, bos_token_id=1, eos_token_id=2))


def _olmo():
    return tf.OlmoConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, clip_qkv=0.5,
                         tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _olmo2():
    return tf.Olmo2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _olmo3():
    return tf.Olmo3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, sliding_window=3,
                          layer_types=["sliding_attention", "full_attention"],
                          rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                           "full_attention": {"rope_type": "default", "rope_theta": 500000.0}},
                          tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _mistral():
    return tf.MistralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                            sliding_window=3, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1,
                            eos_token_id=2)


def _qwen2():
    return tf.Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          use_sliding_window=True, sliding_window=3, max_window_layers=1, tie_word_embeddings=True,
                          pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _qwen3():
    return tf.Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                          use_sliding_window=True, sliding_window=3, max_window_layers=1, tie_word_embeddings=False,
                          pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _gemma():
    return tf.GemmaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=1, head_dim=8, max_position_embeddings=64,
                          pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _gemma2():
    return tf.Gemma2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=12,
                           max_position_embeddings=64, sliding_window=3,
                           layer_types=["sliding_attention", "full_attention"], attn_logit_softcapping=4.0,
                           final_logit_softcapping=30.0, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _gemma3():
    return tf.Gemma3TextConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=12,
                               max_position_embeddings=64, sliding_window=3,
                               layer_types=["sliding_attention", "full_attention"],
                               rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                "full_attention": {"rope_type": "default", "rope_theta": 1e6}},
                               final_logit_softcapping=30.0, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _t5():
    return tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_decoder_layers=2,
                       num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
                       dropout_rate=0.0, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)


def _modernbert():
    return tf.ModernBertConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=37, num_hidden_layers=3,
                               num_attention_heads=4, max_position_embeddings=64, local_attention=4,
                               global_attn_every_n_layers=2, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                               cls_token_id=1, sep_token_id=2, num_labels=3, attention_bias=True,
                               norm_bias=True, mlp_bias=True, classifier_bias=True)


def _one(grid: Grid) -> dict:
    return {None: grid}


def _seq2seq_grids(n_layers=2, n_heads=4, head_dim=8) -> dict:
    return {
        "enc": Grid(n_layers, n_heads, n_heads, head_dim),
        "dec": Grid(n_layers, n_heads, n_heads, head_dim, causal=True),
        "cross": Grid(n_layers, n_heads, n_heads, head_dim, cross=True),
    }


_LOOSE = 1e-5  # HF rounds through float32 inside these families (RMSNorm, rotary, softmax, T5's norm)

_ALL = [
    Fixture("bert", "bert", tf.BertForSequenceClassification, _bert, _one(Grid(2, 4, 4, 8)), pad_token_id=0),
    Fixture("roberta", "roberta", tf.RobertaForSequenceClassification, _roberta, _one(Grid(2, 4, 4, 8)),
            pad_token_id=1, notes="positions count non-pad tokens from pad_token_id + 1"),
    Fixture("distilbert", "distilbert", tf.DistilBertForSequenceClassification, _distilbert,
            _one(Grid(2, 4, 4, 8)), pad_token_id=0),
    Fixture("bart", "bart", tf.BartForConditionalGeneration, _bart, _seq2seq_grids(), encoder_decoder=True,
            pad_token_id=0),
    Fixture("marian", "marian", tf.MarianMTModel, _marian, _seq2seq_grids(), encoder_decoder=True,
            pad_token_id=0, positions="sinusoidal"),
    Fixture("gpt2", "gpt2", tf.GPT2LMHeadModel, _gpt2, _one(Grid(2, 4, 4, 8, causal=True)), causal_lm=True,
            qkv="c_attn", notes="fused Conv1D: weight [hidden, 3 * hidden], columns q | k | v, head h at h*8:(h+1)*8"),
    Fixture("gpt_neox", "gpt_neox", tf.GPTNeoXForCausalLM, lambda: _gpt_neox(True, 0.5, True),
            _one(Grid(2, 4, 4, 8, causal=True)), causal_lm=True, atol=_LOOSE, positions="rotary",
            qkv="query_key_value",
            notes="Pythia-like: parallel residual, rotary on half of each head's dims; fused Linear laid out head by "
                  "head: head h's rows h*24:(h+1)*24 are its q | k | v blocks of 8"),
    Fixture("gpt_neox_sequential", "gpt_neox", tf.GPTNeoXForCausalLM, lambda: _gpt_neox(False, 1.0, False),
            _one(Grid(2, 4, 4, 8, causal=True)), causal_lm=True, atol=_LOOSE, positions="rotary",
            qkv="query_key_value", notes="sequential residual, rotary on every dim, no attention biases"),
    Fixture("opt", "opt", tf.OPTForCausalLM, lambda: _opt(True, 24, True), _one(Grid(2, 4, 4, 8, causal=True)),
            causal_lm=True, pad_token_id=0, atol=_LOOSE,
            notes="layer norms before each block; embeddings of width 24 projected in and out of the width-32 layers; "
                  "learned positions offset by 2, counted over the attention mask (atol: HF's eager softmax is in "
                  "float32)"),
    Fixture("opt_post_norm", "opt", tf.OPTForCausalLM, lambda: _opt(False, 32, False),
            _one(Grid(2, 4, 4, 8, causal=True)), causal_lm=True, pad_token_id=0, atol=_LOOSE,
            notes="OPT-350m's layout: layer norms after each block, no final norm; no biases"),
    Fixture("llama_gqa", "llama", tf.LlamaForCausalLM, lambda: _llama(2, 8),
            _one(Grid(2, 4, 2, 8, causal=True)), causal_lm=True, atol=_LOOSE,
            positions="rotary", notes="4 query heads on 2 key/value heads"),
    Fixture("llama_mqa", "llama", tf.LlamaForCausalLM, lambda: _llama(1, 12),
            _one(Grid(2, 4, 1, 12, causal=True)), causal_lm=True, atol=_LOOSE,
            positions="rotary", notes="4 query heads on 1 key/value head; head_dim 12 != hidden / heads"),
    Fixture("phi3", "phi3", tf.Phi3ForCausalLM, _phi3, _one(Grid(2, 4, 2, 8, causal=True, windows=(2, 2))),
            causal_lm=True, atol=_LOOSE, positions="rotary", qkv="qkv_proj",
            notes="4 query heads on 2 key/value heads in one qkv_proj (rows: queries, keys, values); rotary on half "
                  "of each head; a sliding window of 3 in every layer"),
    Fixture("mixtral", "mixtral", tf.MixtralForCausalLM, _mixtral, _one(Grid(2, 4, 2, 8, causal=True)),
            causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="4 query heads on 2 key/value heads over a mixture of 4 experts, 2 per token"),
    Fixture("qwen3_moe", "qwen3_moe", tf.Qwen3MoeForCausalLM, _qwen3_moe, _one(Grid(2, 4, 2, 8, causal=True)),
            causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="Qwen3's per-head query/key norms; layer 0 a mixture of 4 experts (2 per token, weights not "
                  "renormalised), layer 1 a dense MLP (mlp_only_layers)"),
    Fixture("gpt_oss", "gpt_oss", tf.GptOssForCausalLM, _gpt_oss,
            _one(Grid(2, 4, 2, 8, causal=True, windows=(2, None))), causal_lm=True, atol=_LOOSE, positions="rotary",
            attn_implementations=("eager",),
            notes="an attention sink per head (a learned logit in each softmax, dropped after it); biased projections; "
                  "layer 0 a sliding window of 3, layer 1 global; 4 biased experts, 2 per token, their SwiGLU "
                  "clamped at 1 (so the clamp bites on these weights); eager only (HF's sdpa has no sinks)"),
    Fixture("smollm3", "smollm3", tf.SmolLM3ForCausalLM, _smollm3, _one(Grid(2, 4, 2, 8, causal=True)),
            causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="layer 1 without rotary (NoPE: no_rope_layers [1, 0]); 4 query heads on 2 key/value heads"),
    Fixture("granite", "granite", tf.GraniteForCausalLM, _granite, _one(Grid(2, 4, 2, 8, causal=True)),
            causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="scores scaled by attention_multiplier 0.2 (not 8^-1/2); embeddings x3, residual branches x0.5, "
                  "logits /2; biased projections"),
    Fixture("starcoder2", "starcoder2", tf.Starcoder2ForCausalLM, _starcoder2,
            _one(Grid(2, 4, 2, 8, causal=True, windows=(2, 2))), causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="layer norms with biases, biased projections, a plain GELU MLP (c_fc, c_proj); a sliding window of 3 "
                  "in every layer"),
    Fixture("cohere", "cohere", tf.CohereForCausalLM, _cohere, _one(Grid(2, 4, 2, 8, causal=True)), causal_lm=True,
            atol=_LOOSE, positions="rotary",
            notes="Command R: parallel residual under one bias-free layer norm; each query and key head layer-normed "
                  "with its own weights (use_qk_norm); rotary on interleaved pairs; logits x0.5; tied embeddings"),
    Fixture("cohere2", "cohere2", tf.Cohere2ForCausalLM, _cohere2,
            _one(Grid(2, 4, 2, 8, causal=True, windows=(2, None))), causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="Command R7B: layer 0 a sliding window of 3 with rotary, layer 1 global without positions"),
    Fixture("ministral", "ministral", tf.MinistralForCausalLM, _ministral,
            _one(Grid(2, 4, 2, 8, causal=True, windows=(2, None))), causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="Ministral: layer 0 a sliding window of 3, layer 1 global"),
    Fixture("seed_oss", "seed_oss", tf.SeedOssForCausalLM, _seed_oss, _one(Grid(2, 4, 2, 8, causal=True)),
            causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="Seed-OSS: biased q/k/v and output projections (attention_out_bias)"),
    Fixture("qwen2_moe", "qwen2_moe", tf.Qwen2MoeForCausalLM, _qwen2_moe, _one(Grid(2, 4, 2, 8, causal=True)),
            causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="Qwen1.5-MoE / Qwen2-MoE: q/k/v biases; layer 0 a mixture of 4 experts (2 per token) plus a shared "
                  "expert gated by a sigmoid, layer 1 a dense MLP (mlp_only_layers)"),
    Fixture("helium", "helium", tf.HeliumForCausalLM, _helium, _one(Grid(2, 4, 2, 8, causal=True)), causal_lm=True,
            atol=_LOOSE, positions="rotary", notes="Helium: rotary on interleaved pairs of dimensions"),
    Fixture("ernie4_5", "ernie4_5", tf.Ernie4_5ForCausalLM, _ernie4_5, _one(Grid(2, 4, 2, 8, causal=True)),
            causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="ERNIE 4.5: rotary on interleaved pairs; biases on every projection and the MLP (use_bias)"),
    Fixture("arcee", "arcee", tf.ArceeForCausalLM, _arcee, _one(Grid(2, 4, 2, 8, causal=True)), causal_lm=True,
            atol=_LOOSE, positions="rotary", notes="Arcee (AFM): a plain relu^2 MLP (up, down: no gate); biased q/k/v/o"),
    Fixture("apertus", "apertus", tf.ApertusForCausalLM, _apertus, _one(Grid(2, 4, 2, 8, causal=True)),
            causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="Apertus: Qwen3's per-head query/key RMSNorms before rotary; a plain MLP with the learned xIELU "
                  "activation"),
    Fixture("exaone4", "exaone4", tf.Exaone4ForCausalLM, _exaone4,
            _one(Grid(2, 4, 2, 8, causal=True, windows=(2, None))), causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="EXAONE 4: per-head query/key RMSNorms; no norm before the blocks, RMSNorms after the attention and "
                  "the MLP; layer 0 a sliding window of 3 with rotary, layer 1 global without positions"),
    Fixture("hunyuan_v1_dense", "hunyuan_v1_dense", tf.HunYuanDenseV1ForCausalLM, _hunyuan,
            _one(Grid(2, 4, 2, 8, causal=True)), causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="Hunyuan dense: per-head query/key RMSNorms AFTER rotary (query_layernorm, key_layernorm)"),
    Fixture("nanochat", "nanochat", tf.NanoChatForCausalLM, _nanochat, _one(Grid(2, 4, 2, 8, causal=True)),
            causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="nanochat: RMSNorms without weights (one after the embedding), per-head query/key norms after "
                  "rotary, rotary by minus the angle, a relu^2 MLP (fc1, fc2), logits soft-capped at 2"),
    Fixture("glm", "glm", tf.GlmForCausalLM, lambda: _glm(tf.GlmConfig), _one(Grid(2, 4, 2, 8, causal=True)),
            causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="GLM-4 9B chat: rotary on interleaved pairs of the first half of each head; biased q/k/v; gate and "
                  "up in one projection"),
    Fixture("glm4", "glm4", tf.Glm4ForCausalLM, lambda: _glm(tf.Glm4Config), _one(Grid(2, 4, 2, 8, causal=True)),
            causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="GLM-4-0414: GLM's attention; sandwich norms (after the attention and the MLP as well)"),
    Fixture("stablelm", "stablelm", tf.StableLmForCausalLM, lambda: _stablelm(False),
            _one(Grid(2, 4, 2, 8, causal=True)), causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="StableLM 2: rotary on the first quarter of each head; a layer norm module per query and key head "
                  "(qk_layernorm); biased q/k/v; layer norms with biases"),
    Fixture("stablelm_parallel", "stablelm", tf.StableLmForCausalLM, lambda: _stablelm(True),
            _one(Grid(2, 4, 2, 8, causal=True)), causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="StableLM with the attention and the MLP in parallel (use_parallel_residual)"),
    Fixture("deepseek_v3", "deepseek_v3", tf.DeepseekV3ForCausalLM, lambda: _deepseek_v3(True),
            _one(Grid(2, 4, 4, 8, causal=True)), causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="DeepSeek-V3 multi-head latent attention: compressed queries (q_lora_rank 12), a latent of 10 and a "
                  "rotated key part of 4 shared by the heads, per head 4 + 4 query/key dims and 8 value dims; rotary "
                  "on interleaved pairs; dense MLPs (first_k_dense_replace = 2 layers)"),
    Fixture("deepseek_v3_plain", "deepseek_v3", tf.DeepseekV3ForCausalLM, lambda: _deepseek_v3(False),
            _one(Grid(2, 4, 4, 8, causal=True)), causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="DeepSeek-V3 without query compression (q_proj) and with rotate-half rotary"),
    Fixture("deepseek_v2", "deepseek_v2", tf.DeepseekV2ForCausalLM, _deepseek_v2,
            _one(Grid(2, 4, 4, 8, causal=True)), causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="DeepSeek-V2 (-Lite: no query compression): V3's latent attention with rotary as complex angles on "
                  "interleaved pairs (computed in float32 by HF); dense MLPs"),
    Fixture("bloom", "bloom", tf.BloomForCausalLM, lambda: _bloom(False), _one(Grid(2, 4, 4, 8, causal=True)),
            causal_lm=True, atol=_LOOSE, positions="alibi", attn_implementations=("eager",),
            notes="BLOOM: ALiBi (a slope per head times the key's position), a fused query_key_value laid out head by "
                  "head, the residual added inside the attention; tied embeddings; eager only (its own attention)"),
    Fixture("bloom_post_norm", "bloom", tf.BloomForCausalLM, lambda: _bloom(True),
            _one(Grid(2, 4, 4, 8, causal=True)), causal_lm=True, atol=_LOOSE, positions="alibi",
            attn_implementations=("eager",),
            notes="BLOOM with the residual taken after the layer norms (apply_residual_connection_post_layernorm)"),
    Fixture("falcon_mq", "falcon", tf.FalconForCausalLM,
            lambda: _falcon(multi_query=True, parallel_attn=True, new_decoder_architecture=False, bias=False),
            _one(Grid(2, 4, 1, 8, causal=True)), causal_lm=True, atol=_LOOSE, positions="rotary",
            qkv="falcon_multi_query",
            notes="Falcon-7B's layout: multi-query (query_key_value's rows: the 4 query heads, then one key and one "
                  "value for all), rotary, attention and MLP in parallel off one layer norm, no biases"),
    Fixture("falcon_new", "falcon", tf.FalconForCausalLM,
            lambda: _falcon(new_decoder_architecture=True, num_kv_heads=2, bias=False),
            _one(Grid(2, 4, 2, 8, causal=True)), causal_lm=True, atol=_LOOSE, positions="rotary",
            qkv="falcon_grouped",
            notes="Falcon-40B's new decoder architecture: 4 query heads on 2 key/value heads, query_key_value's rows "
                  "group by group (its 2 queries, its key, its value), rotary, two layer norms (ln_attn, ln_mlp)"),
    Fixture("falcon_rw", "falcon", tf.FalconForCausalLM,
            lambda: _falcon(alibi=True, multi_query=False, parallel_attn=False, new_decoder_architecture=False,
                            bias=True),
            _one(Grid(2, 4, 4, 8, causal=True)), causal_lm=True, atol=_LOOSE, positions="alibi",
            qkv="query_key_value",
            notes="Falcon-RW's layout: query_key_value head by head (each head's q | k | v), ALiBi added through the "
                  "attention mask (a row per head; HF rounds slope x position to bfloat16), attention then MLP, "
                  "biases"),
    Fixture("llama4", "llama4_text", tf.Llama4ForCausalLM, _llama4,
            _one(Grid(2, 4, 2, 8, causal=True, chunks=(4, None))), causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="Llama 4: layer 0 rotary on interleaved pairs, a weightless RMS norm over each query and key head, "
                  "chunked attention (chunks of 4 positions) and a dense gated MLP; layer 1 without positions, its "
                  "queries scaled by 1 + 0.5 log(1 + floor((position + 1) / 2)), every earlier key visible, and a "
                  "mixture of 3 experts (top 1, sigmoid-weighted) beside a shared expert"),
    Fixture("granite_hybrid", "granitemoehybrid", tf.GraniteMoeHybridForCausalLM, lambda: _granite_hybrid(False),
            _one(Grid(2, 4, 2, 8, causal=True, model_layers=(1, 3))), causal_lm=True, atol=_LOOSE, positions="none",
            notes="Granite 4.0-H: 4 layers, Mamba-2 (layers 0, 2: 4 SSM heads of 16 in 2 groups, state 8, conv 3) and "
                  "attention (layers 1, 3: the grid's 2 rows) without positions; scores scaled by 0.3; embedding, "
                  "residual and logit multipliers; the shared gated MLP"),
    Fixture("granite_hybrid_rope", "granitemoehybrid", tf.GraniteMoeHybridForCausalLM, lambda: _granite_hybrid(True),
            _one(Grid(2, 4, 2, 8, causal=True, model_layers=(1, 3))), causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="Granite 4.0-H with rotary in its attention layers (position_embedding_type='rope')"),
    Fixture("bamba", "bamba", tf.BambaForCausalLM, _bamba,
            _one(Grid(2, 4, 2, 8, causal=True, model_layers=(0, 2))), causal_lm=True, atol=5 * _LOOSE,
            positions="rotary",
            notes="Bamba: 3 layers, attention (layers 0, 2: the grid's 2 rows, rotary on half of each head) around a "
                  "Mamba-2 layer (4 SSM heads of 16 in 1 group, state 8, conv 4); gated MLPs (atol 5e-5: HF's Mamba "
                  "scan and norms round through float32, and Bamba has no multipliers keeping the activations small: "
                  "the reference and HF differ by up to 1.7e-5)"),
    Fixture("qwen3_next", "qwen3_next", tf.Qwen3NextForCausalLM, _qwen3_next,
            _one(Grid(2, 4, 2, 8, causal=True, model_layers=(0, 2))), causal_lm=True, atol=5 * _LOOSE,
            positions="rotary",
            notes="Qwen3-Next: 3 layers, gated attention (layers 0, 2: the grid's 2 rows; q_proj's rows head by head, "
                  "each head's 8 query rows then its 8 output-gate rows; the head's context times sigmoid(gate) "
                  "before o_proj; per-head query/key RMSNorms of weight 1 + w; rotary on the first half of each head) "
                  "around a gated DeltaNet layer (2 key heads of 8, 4 value heads of 6, conv 3, fused qkvz and ba "
                  "projections); layers 0, 1 a mixture of 3 experts (top 2) beside a sigmoid-gated shared expert, "
                  "layer 2 a dense MLP (atol 5e-5: HF's delta rule runs in float32)"),
    Fixture("qwen3_5", "qwen3_5_text", tf.Qwen3_5ForCausalLM, _qwen3_5,
            _one(Grid(2, 4, 2, 8, causal=True, model_layers=(1, 3))), causal_lm=True, atol=5 * _LOOSE,
            positions="rotary",
            notes="Qwen3.5 (text): Qwen3-Next's gated attention (layers 1, 3: the grid's 2 rows; rotary on a quarter "
                  "of each head) after gated DeltaNet layers (0, 2: 2 key and 2 value heads of 8, conv 4, separate "
                  "qkv, z, b and a projections); dense gated MLPs (atol as qwen3_next's)"),
    Fixture("qwen3_5_moe", "qwen3_5_moe_text", tf.Qwen3_5MoeForCausalLM, _qwen3_5_moe,
            _one(Grid(2, 4, 1, 8, causal=True, model_layers=(0, 2))), causal_lm=True, atol=10 * _LOOSE,
            positions="rotary",
            notes="Qwen3.5-MoE (text): gated attention (layers 0, 2: the grid's 2 rows, 4 query heads on 1 key/value "
                  "head, rotary on half of each head) around a gated DeltaNet layer (1 key head, 2 value heads), "
                  "every layer with a mixture of 3 experts (top 2) beside a sigmoid-gated shared expert (atol 1e-4: "
                  "HF rounds its norms, delta rule, router and softmax through float32; the reference and HF differ "
                  "by up to 6.3e-5 under a 'uniform' ablation, and by 3e-14 with those round trips made float64, "
                  "checked by hand)"),
    Fixture("nemotron_h", "nemotron_h", tf.NemotronHForCausalLM, _nemotron_h,
            _one(Grid(2, 4, 2, 8, causal=True, model_layers=(0, 3))), causal_lm=True, atol=5 * _LOOSE,
            positions="none",
            notes="Nemotron-H: 5 layers of one block each (pre-RMSNorm, the block, the residual): attention without "
                  "positions (layers 0, 3: the grid's 2 rows; module at layers[i].mixer), a Mamba-2 mixer (layer 1: 4 "
                  "SSM heads of 8 in 2 groups, state 8, conv 3), a mixture of 4 relu^2 experts (layer 2: sigmoid "
                  "router with a score correction, 2 groups of which 1 is chosen, top 2, renormalised and scaled by "
                  "1.5, beside a shared relu^2 expert), a relu^2 MLP (layer 4); HF returns the logits in float32 "
                  "(atol 5e-5: its norms and scan round through float32 as well)"),
    Fixture("olmo", "olmo", tf.OlmoForCausalLM, _olmo, _one(Grid(2, 4, 2, 8, causal=True)), causal_lm=True,
            atol=_LOOSE, positions="rotary",
            notes="OLMo 1: parameter-free layer norms; q, k and v clamped to [-0.5, 0.5] (clip_qkv, so the clamp bites "
                  "on these weights); 4 query heads on 2 key/value heads"),
    Fixture("olmo2", "olmo2", tf.Olmo2ForCausalLM, _olmo2, _one(Grid(2, 4, 2, 8, causal=True)), causal_lm=True,
            atol=_LOOSE, positions="rotary", prunable=False,
            notes="OLMo 2: q_norm / k_norm over the whole query / key projection (all heads together: not prunable "
                  "head by head); RMSNorms after the attention and the MLP"),
    Fixture("olmo3", "olmo3", tf.Olmo3ForCausalLM, _olmo3,
            _one(Grid(2, 4, 2, 8, causal=True, windows=(2, None))), causal_lm=True, atol=_LOOSE, positions="rotary",
            prunable=False,
            notes="OLMo 3: OLMo 2's layer-wide norms; layer 0 a sliding window of 3 (rotary base 1e4), layer 1 global "
                  "(base 5e5)"),
    Fixture("mistral", "mistral", tf.MistralForCausalLM, _mistral,
            _one(Grid(2, 4, 2, 8, causal=True, windows=(2, 2))), causal_lm=True, atol=_LOOSE,
            positions="rotary", notes="sliding window 3: a query sees itself and the 2 keys before it"),
    Fixture("qwen2", "qwen2", tf.Qwen2ForCausalLM, _qwen2, _one(Grid(2, 4, 2, 8, causal=True, windows=(None, 2))),
            causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="biases on q/k/v projections; tied embeddings; layer 0 full, layer 1 a sliding window of 3"),
    Fixture("qwen3", "qwen3", tf.Qwen3ForCausalLM, _qwen3, _one(Grid(2, 4, 2, 8, causal=True, windows=(None, 2))),
            causal_lm=True, atol=_LOOSE, positions="rotary",
            notes="an RMSNorm over each query and key head (q_norm, k_norm: one weight of head_dim shared by the "
                  "heads) before rotary; layer 1 a sliding window of 3"),
    Fixture("gemma", "gemma", tf.GemmaForCausalLM, _gemma, _one(Grid(2, 4, 1, 8, causal=True)), causal_lm=True,
            atol=5 * _LOOSE, positions="rotary",
            notes="4 query heads on 1 key/value head; embeddings scaled by sqrt(hidden); norms of weight 1 + w "
                  "(atol 5e-5: the scaled embeddings make the activations larger and HF rounds its norms, rotary "
                  "angles, softmax and embedding scale through float32; with those four in float64 the reference "
                  "and HF agree to 2e-6, checked by hand)"),
    Fixture("gemma2", "gemma2", tf.Gemma2ForCausalLM, _gemma2,
            _one(Grid(2, 4, 2, 8, causal=True, windows=(2, None))), causal_lm=True, atol=5 * _LOOSE,
            positions="rotary", attn_implementations=("eager",),
            notes="attention scores soft-capped at 4 (so the cap bites on these weights); scores scaled by 12^-1/2; "
                  "layer 0 a sliding window of 3, layer 1 global; sandwich norms; eager only (HF's sdpa has no "
                  "soft cap); atol as gemma's"),
    Fixture("gemma3", "gemma3_text", tf.Gemma3ForCausalLM, _gemma3,
            _one(Grid(2, 4, 2, 8, causal=True, windows=(2, None))), causal_lm=True, atol=5 * _LOOSE,
            positions="rotary",
            notes="per-head query/key norms; scores scaled by 12^-1/2; layer 0 a sliding window of 3 (rotary base "
                  "1e4), layer 1 global (base 1e6); sandwich norms; final logits soft-capped at 30 (atol as gemma's)"),
    Fixture("t5", "t5", tf.T5ForConditionalGeneration, _t5, _seq2seq_grids(), encoder_decoder=True,
            atol=5 * _LOOSE, pad_token_id=0, positions="relative_bias",
            notes="relative bias from the first layer of each stack, reused by the later layers; no 1/sqrt(d)"),
    Fixture("modernbert", "modernbert", tf.ModernBertForSequenceClassification, _modernbert,
            _one(Grid(3, 4, 4, 8, windows=(None, 2, None))), atol=_LOOSE, pad_token_id=0,
            positions="rotary", qkv="Wqkv",
            notes="layers 0 and 2 global, layer 1 local: |query - key| <= local_attention // 2 = 2"),
]

FIXTURES: dict[str, Fixture] = {f.name: f for f in _ALL}
CAUSAL_LMS = tuple(f.name for f in _ALL if f.causal_lm)
ENCODER_DECODERS = tuple(f.name for f in _ALL if f.encoder_decoder)
GQA = tuple(f.name for f in _ALL if any(g.n_kv_heads < g.n_heads for g in f.grids.values()))
PRUNABLE = tuple(f.name for f in _ALL if f.prunable)
