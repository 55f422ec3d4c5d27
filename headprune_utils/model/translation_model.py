"""The translation model: a Transformer encoder-decoder built from Hugging Face's Marian classes, from scratch.

``MarianMTModel`` is the original Transformer of Vaswani et al. (2017) as Marian/OPUS-MT train it: post-LayerNorm
residual blocks, sinusoidal positions, embeddings scaled by ``sqrt(d_model)``, one vocabulary whose embedding
matrix is shared by the encoder, the decoder and the output projection (``shared_embeddings=True``), and three
attention types per the heads' grids: encoder self-attention, causal decoder self-attention and
encoder-decoder attention (``architecture.SEQ2SEQ_KINDS``), all reached by ``gates.head_gates``.

Sizes: :class:`NMTModelConfig` defaults to a CPU-sized model (3 + 3 layers, 4 heads, d_model 256);
``transformer_base()`` is the papers' Transformer-base (6 + 6 layers, 8 heads, d_model 512, FFN 2048,
dropout 0.1), for a GPU. Weights start from ``N(0, init_std)`` (default ``d_model ** -0.5``, Xavier-like for
the square projections) with the given seed.

:func:`save_translation_model` / :func:`load_translation_model`: model, tokenizer and a JSON of what built and
trained them, in one folder (the cache a study reuses).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from headprune_utils.model.architecture import head_shape, kept_heads

__all__ = ["NMTModelConfig", "transformer_base", "build_translation_model", "save_translation_model",
           "load_translation_model"]

META_FILE = "headprune_nmt.json"


@dataclass(frozen=True)
class NMTModelConfig:
    encoder_layers: int = 3
    decoder_layers: int = 3
    heads: int = 4  # per attention type and layer; d_model must be divisible by it
    d_model: int = 256
    ffn_dim: int = 1024
    dropout: float = 0.1  # residual and embedding dropout
    attention_dropout: float = 0.0
    activation: str = "relu"  # "relu" as Vaswani et al.; "gelu", "swish" also work
    max_positions: int = 256  # longest source or target in tokens
    shared_embeddings: bool = True  # one matrix for encoder, decoder and output embeddings (joint vocabulary)
    init_std: float | None = None  # None: d_model ** -0.5
    attn_implementation: str = "sdpa"  # or "eager"

    def as_dict(self) -> dict:
        return asdict(self)

    def check(self) -> None:
        """A ValueError naming the first bad field: sizes that are not positive integers, ``d_model`` not divisible
        by ``heads``, dropout outside [0, 1), a non-positive ``init_std``."""
        for name in ("encoder_layers", "decoder_layers", "heads", "d_model", "ffn_dim", "max_positions"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"NMTModelConfig.{name} must be a positive integer, got {v!r}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by heads={self.heads}")
        for name in ("dropout", "attention_dropout"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise ValueError(f"NMTModelConfig.{name} must be in [0, 1), got {v!r}")
        v = self.init_std
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0):
            raise ValueError(f"NMTModelConfig.init_std must be None or a positive finite number, got {v!r}")


def transformer_base(**overrides) -> NMTModelConfig:
    """Transformer-base of Vaswani et al., as Voita et al. and Budhraja et al. prune it (6 x 8 heads per type)."""
    return NMTModelConfig(**{**dict(encoder_layers=6, decoder_layers=6, heads=8, d_model=512, ffn_dim=2048,
                                    dropout=0.1, max_positions=512), **overrides})


def build_translation_model(config: NMTModelConfig, tokenizer, seed: int = 0):
    """A fresh ``MarianMTModel`` for ``tokenizer``'s vocabulary (``subword.train_tokenizer``), in eval mode.

    Decoding settings go into its generation config: decoder start ``<s>``, stop at ``</s>``, pad ``<pad>``.
    """
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    config.check()
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if getattr(tokenizer, name) is None:
            raise ValueError(f"the tokenizer has no {name[:-3]}; train it with subword.train_tokenizer")
    vocab = len(tokenizer)
    cfg = MarianConfig(
        vocab_size=vocab, decoder_vocab_size=vocab, d_model=config.d_model,
        encoder_layers=config.encoder_layers, decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.heads, decoder_attention_heads=config.heads,
        encoder_ffn_dim=config.ffn_dim, decoder_ffn_dim=config.ffn_dim,
        dropout=config.dropout, attention_dropout=config.attention_dropout, activation_dropout=0.0,
        activation_function=config.activation, max_position_embeddings=config.max_positions,
        scale_embedding=True, share_encoder_decoder_embeddings=config.shared_embeddings,
        tie_word_embeddings=config.shared_embeddings,
        init_std=config.init_std if config.init_std is not None else config.d_model ** -0.5,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id,
        forced_eos_token_id=None, attn_implementation=config.attn_implementation,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(cfg)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=tokenizer.bos_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        num_beams=1, do_sample=False, max_length=config.max_positions,
    )
    return model.eval()


def save_translation_model(model, tokenizer, folder: str | Path, meta: dict | None = None) -> Path:
    """Write model, tokenizer and ``meta`` (JSON-able: model config, training settings, scores) to ``folder``.

    A physically pruned model cannot be saved this way (its config no longer describes its weights).
    """
    shapes = head_shape(model)
    if any(len(ids) != shapes[kind][1] for kind, layers in kept_heads(model).items() for ids in layers):
        raise ValueError("the model has physically pruned heads: save the unpruned model and its mask instead")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / META_FILE).write_text(json.dumps(meta or {}, indent=1, sort_keys=True, default=str))
    return folder


def load_translation_model(folder: str | Path, device: str | torch.device = "cpu"):
    """``(model, tokenizer, meta)`` saved by :func:`save_translation_model`; the model in eval mode on ``device``."""
    from transformers import AutoTokenizer, MarianMTModel

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"no saved translation model in {str(folder)!r}")
    model = MarianMTModel.from_pretrained(folder).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    meta_path = folder / META_FILE
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    return model, tokenizer, meta
