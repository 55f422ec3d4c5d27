"""The display names and colours the figures share: regimes, attention types, roles, scores, distances, measures.

One place for what a legend or a panel title says, so the same thing is named alike in every study's figures.
"""
from __future__ import annotations

import textwrap

import seaborn as sns

# the GLUE studies' two regimes (studies 1, 2, 5)
REGIME_LABELS = {
    "mask_then_finetune": "mask, then fine-tune (Budhraja et al.)",
    "finetune_then_mask": "fine-tune, then mask (Michel et al.)",
}

# the translation study's regimes and attention types (study 7)
NMT_REGIME_LABELS = {"prune": "trained model, heads zeroed (no retraining)",
                     "prune_then_train": "pruned, then trained further (mask fixed)"}
TYPE_LABELS = {"enc": "encoder self-attention", "dec": "decoder self-attention", "cross": "encoder-decoder attention",
               "all": "all three types jointly"}
TYPE_COLORS = dict(zip(TYPE_LABELS, sns.color_palette("colorblind", len(TYPE_LABELS))))
# study 7's L0 settings (which attention types carry gates) as a short panel title
L0_SETTING_TITLES = {"enc": "L0 on the encoder only", "dec": "L0 on the decoder only",
                     "cross": "L0 on cross-attention only", "all": "L0 on all three types"}

# specialized-head roles (studies 6, 7): colour and the letter drawn on a head
ROLE_COLORS = {"other": "#e6e6e6", "positional": "#0173b2", "syntactic": "#de8f05", "rare-word": "#029e73",
               "several": "#cc78bc"}
ROLE_LETTERS = {"other": "", "positional": "P", "syntactic": "S", "rare-word": "R", "several": "+"}

# head scores (studies 6, 7)
SCORE_LABELS = {"gradient_importance": "gradient importance", "relevance": "first-order relevance",
                "ablation": "ablation importance", "confidence": "confidence",
                "confidence_no_special_keys": "confidence (special-token keys excluded)", "entropy": "entropy (nats)",
                "l0_survival": "L0 survival level"}

# distances between heads' attention maps (study 4; redundancy.METRICS)
METRIC_LABELS = {"js": "Jensen-Shannon / ln 2", "hellinger": "Hellinger", "cosine": "1 - cosine",
                 "pearson": "(1 - Pearson r) / 2", "dcor": "1 - distance correlation", "procrustes": "Procrustes disparity"}

# per-head change measures of the compensation study (study 3)
MEASURE_LABELS = {"weight_change": "weight change (log ratio)", "importance": "importance (normalised difference)",
                  "attention_change": "attention change (log JS ratio)"}


def break_title(text: str, width: int, sep: str = " — ") -> str:
    """``text`` in lines of at most ``width`` characters, broken at ``sep`` where it can (the separator dropped at a
    break), else between words (a title too wide for its panel)."""
    lines: list[str] = []
    for part in text.split(sep):
        if lines and len(lines[-1]) + len(sep) + len(part) <= width:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return "\n".join(textwrap.fill(line, max(8, width), break_long_words=False, break_on_hyphens=False)
                     for line in lines)
