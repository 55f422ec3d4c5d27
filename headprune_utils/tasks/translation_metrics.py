"""BLEU and chrF of detokenised translations, with sacrebleu (Post 2018), so numbers compare across papers.

Hypotheses and references are plain text as a reader sees it (the tokenizer's decoded output and the corpus
lines untouched): sacrebleu applies its own standard tokenisation (``13a`` for BLEU, the WMT default; chrF
works on characters). Corpus-level scores in 0-100; the signatures record every setting
(e.g. ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``).
"""
from __future__ import annotations

from typing import Sequence

from sacrebleu.metrics import BLEU, CHRF

__all__ = ["corpus_bleu", "corpus_chrf", "translation_scores"]


def _check(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[list[str], list[str]]:
    for name, v in (("hypotheses", hypotheses), ("references", references)):
        if isinstance(v, (str, bytes)):
            raise TypeError(f"{name} must be a list of sentences, got one string (one sentence: [sentence])")
    hyps, refs = list(hypotheses), list(references)
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise ValueError("no sentences to score")
    bad = [type(x).__name__ for x in hyps + refs if not isinstance(x, str)]
    if bad:
        raise TypeError(f"hypotheses and references must be strings, got {bad[0]}")
    return hyps, refs


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "13a") -> tuple[float, str]:
    """Corpus BLEU (0-100) of ``hypotheses`` against one reference each, and sacrebleu's signature."""
    hyps, refs = _check(hypotheses, references)
    metric = BLEU(tokenize=tokenize)
    return float(metric.corpus_score(hyps, [refs]).score), str(metric.get_signature())


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
    """Corpus chrF (character 6-grams, beta 2; 0-100) and sacrebleu's signature."""
    hyps, refs = _check(hypotheses, references)
    metric = CHRF()
    return float(metric.corpus_score(hyps, [refs]).score), str(metric.get_signature())


def translation_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """``{"bleu", "chrf", "bleu_signature", "chrf_signature", "n"}`` of a test set."""
    bleu, bleu_sig = corpus_bleu(hypotheses, references)
    chrf, chrf_sig = corpus_chrf(hypotheses, references)
    return {"bleu": bleu, "chrf": chrf, "bleu_signature": bleu_sig, "chrf_signature": chrf_sig,
            "n": len(list(references))}
