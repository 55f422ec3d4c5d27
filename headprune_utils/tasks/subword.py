"""A joint subword tokenizer for a language pair, trained on the training text with Hugging Face ``tokenizers``.

One vocabulary for source and target (Vaswani et al. and Voita et al. share it, which lets the encoder, decoder
and output embeddings be one matrix). SentencePiece-style pre-tokenisation (``Metaspace``: a word-initial
space becomes ``▁``), so decoding gives back normal, detokenised text (spaces and punctuation as in the
input), which is what sacrebleu scores. Model: BPE (Sennrich et al. 2016; ``model="bpe"``) or unigram
(Kudo 2018; ``model="unigram"``). Text is NFC-normalised only (no lowercasing, no NFKC folding), so the
round trip is exact for any NFC text whose characters were seen in training; an unseen character becomes
``<unk>`` and disappears from the decoded text.

Special tokens, ids fixed: ``<pad>`` 0, ``<s>`` 1 (decoder start), ``</s>`` 2 (appended to every sequence),
``<unk>`` 3. The result is a ``transformers`` fast tokenizer (``PreTrainedTokenizerFast``), saved with the
model (``save_pretrained``) and loaded with ``AutoTokenizer.from_pretrained(folder)``.
"""
from __future__ import annotations

from typing import Iterable, Literal

__all__ = ["SPECIAL_TOKENS", "train_tokenizer"]

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
_ORDER = ("<pad>", "<s>", "</s>", "<unk>")  # ids 0..3


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 8000,
    model: Literal["bpe", "unigram"] = "bpe",
    min_frequency: int = 2,
):
    """Train a joint subword tokenizer on ``texts`` (source and target training sentences together).

    vocab_size: the target vocabulary size, special tokens included (smaller when the text has fewer pieces).
    min_frequency: BPE only, a merge must occur at least this often.
    Returns a ``transformers.PreTrainedTokenizerFast`` that appends ``</s>`` to every encoded text, pads with
    ``<pad>`` and decodes without any "clean-up" of spaces (``clean_up_tokenization_spaces=False``).
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size <= len(_ORDER):
        raise ValueError(f"vocab_size must exceed the {len(_ORDER)} special tokens, got {vocab_size}")
    if isinstance(texts, (str, bytes)):
        raise TypeError("texts must be a list of sentences, got one string")
    texts = list(texts)
    if not texts:
        raise ValueError("train_tokenizer got no text")
    bad = [i for i, x in enumerate(texts) if not isinstance(x, str)]
    if bad:
        raise TypeError(f"texts must be strings; entries {bad[:5]} are not")
    if not any(x.strip() for x in texts):
        raise ValueError(f"train_tokenizer got {len(texts)} text(s), all blank: nothing to learn a vocabulary from")
    if model == "bpe":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=list(_ORDER), show_progress=False)
    elif model == "unigram":
        tok = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=list(_ORDER), unk_token="<unk>",
                                          show_progress=False)
    else:
        raise ValueError(f"model must be 'bpe' or 'unigram', got {model!r}")
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.train_from_iterator(texts, trainer=trainer)
    ids = [tok.token_to_id(t) for t in _ORDER]
    if ids != list(range(len(_ORDER))):
        raise RuntimeError(f"special tokens got ids {ids}, expected 0..3")  # the trainers put them first
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", ids[2])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False,
                                   model_max_length=1024, **SPECIAL_TOKENS)
