"""One adapter per model family: where its heads live and what they are (``base.Family``).

    base        the Family protocol, AttentionSite, EmptyAttention, the shared slicing helper
    registry    the adapters, ``family_of(model_or_config)``, ``register(family)``
    bert        BERT-type encoders (BERT, RoBERTa, ELECTRA, XLM-R, CamemBERT, MiniLM)
    distilbert  DistilBERT
    bart        Marian and BART encoder-decoders (three grids)
    gpt2        GPT-2 causal LMs (fused Conv1D c_attn)
    gpt_neox    Pythia / GPT-NeoX causal LMs (fused query_key_value laid out head by head, partial rotary)
    llama       Llama, Mistral, Ministral, Mixtral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, Gemma 1-3, gpt-oss, SmolLM3,
                Granite, StarCoder2, Cohere 1-2, Seed-OSS, Helium, ERNIE 4.5, Arcee, Apertus, EXAONE 4, Hunyuan,
                nanochat, GLM, GLM-4, StableLM causal LMs (grouped-query attention, rotary or none, sliding windows,
                per-head query/key norms,
                soft-capped scores, attention sinks)
    llama4      Llama 4 text models (chunked attention, NoPE layers with query temperature, weightless q/k norms)
    hybrid      Bamba, Granite 4.0-H (Mamba-2 layers and Llama-family attention layers: the grid's rows are the
                attention layers)
    qwen3_next  Qwen3-Next, Qwen3.5 (gated DeltaNet layers and GATED attention layers: each head's context times the
                sigmoid of its own gate rows of q_proj; the grid's rows are the attention layers)
    olmo        OLMo 1-3 (q/k/v clamps; OLMo 2/3's query/key norms span all heads: gates yes, pruning refused)
    phi3        Phi-3 / Phi-4-mini causal LMs (the Llama family's attention with one fused qkv_proj)
    bloom       BLOOM causal LMs (ALiBi, fused query_key_value head by head, the residual added inside the attention)
    falcon      Falcon causal LMs (fused query_key_value in three layouts: grouped, multi-query, head by head;
                rotary or ALiBi through the mask)
    deepseek    DeepSeek-V2 / -V3 causal LMs (multi-head latent attention: a shared compressed latent and rotated key)
    opt         OPT causal LMs (separate projections, learned positions, pre- or post-layer-norm)
    modernbert  ModernBERT encoders (fused Wqkv, rotary, local and global layers)
    t5          T5 encoder-decoders (three grids, per-head relative position bias)

Only these modules name a family's attributes (a test scans the package for it).
"""
__all__ = ["FAMILIES", "SEQ2SEQ_KINDS", "AttentionSite", "EmptyAttention", "Family", "UnsupportedArchitectureError",
           "family_of", "find_family", "register", "supported"]

from headprune_utils.model.families.base import (
    SEQ2SEQ_KINDS, AttentionSite, EmptyAttention, Family, UnsupportedArchitectureError,
)
from headprune_utils.model.families.registry import FAMILIES, family_of, find_family, register, supported
