"""Figures of study 7 (translation): data in, figure out (``plotting.save_figure`` writes figure + data).

The layer x head pictures (masks, roles, survival, score maps) are the GLUE studies' own
(``plotting.mask_grid``, ``voita_plots``); these are the translation-specific curves.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

TYPE_LABELS = {"enc": "encoder self-attention", "dec": "decoder self-attention", "cross": "encoder-decoder attention",
               "all": "all three types jointly"}
TYPE_COLORS = dict(zip(TYPE_LABELS, sns.color_palette("colorblind", len(TYPE_LABELS))))
REGIME_TITLES = {"prune": "trained model, heads zeroed (no retraining)",
                 "prune_then_train": "pruned, then trained further (mask fixed)"}


def bleu_vs_fraction(summary: pd.DataFrame) -> plt.Figure:
    """One panel per regime: mean BLEU vs share of the type's heads pruned, a line per attention type, t-interval
    band over (model seed, mask seed) pairs; fraction 0 is the unpruned reference.

    summary: columns type, regime, fraction, mean, ci_low, ci_high (``nmt_heads.random_summary``).
    """
    regimes = [r for r in REGIME_TITLES if r in set(summary["regime"])]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(regimes), figsize=(5.6 * len(regimes), 4.2), squeeze=False)
    for ax, regime in zip(axes[0], regimes):
        s = summary[summary["regime"] == regime]
        for t in [t for t in TYPE_LABELS if t in set(s["type"])]:
            g = s[s["type"] == t].sort_values("fraction")
            ax.plot(100 * g["fraction"], g["mean"], marker="o", color=TYPE_COLORS[t], label=TYPE_LABELS[t])
            ax.fill_between(100 * g["fraction"], g["ci_low"], g["ci_high"], color=TYPE_COLORS[t], alpha=0.18, linewidth=0)
        ax.set_title(REGIME_TITLES[regime], fontsize="medium")
        ax.set_xlabel("heads of the type pruned (%)")
        ax.set_ylabel("test BLEU (greedy)")
        ax.set_ylim(bottom=0)
    axes[0][0].legend(loc="lower left", fontsize="small")
    fig.tight_layout()
    return fig


def l0_heads_kept(by_type: pd.DataFrame) -> plt.Figure:
    """One panel per L0 setting: share of each gated type's heads kept against lambda (log scale), a line per type
    (mean over model seeds), points per model.

    by_type: columns setting, model_seed, lam, type, frac_kept (``nmt_heads.l0_by_type``).
    """
    settings = [t for t in TYPE_LABELS if t in set(by_type["setting"])]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(settings), figsize=(5.0 * len(settings), 3.9), squeeze=False)
    for ax, setting in zip(axes[0], settings):
        s = by_type[by_type["setting"] == setting]
        for t in [t for t in TYPE_LABELS if t in set(s["type"])]:
            g = s[s["type"] == t]
            m = g.groupby("lam")["frac_kept"].mean()
            ax.scatter(g["lam"], g["frac_kept"], color=TYPE_COLORS[t], s=12, alpha=0.5)
            ax.plot(m.index, m.to_numpy(), marker="o", color=TYPE_COLORS[t], label=TYPE_LABELS[t])
        ax.set_xscale("log")
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(f"L0 gates on: {TYPE_LABELS.get(setting, setting)}", fontsize="medium")
        ax.set_xlabel("lambda (penalty per open gate, nats)")
        ax.set_ylabel("share of the type's heads kept")
        ax.legend(loc="lower left", fontsize="small")
    fig.tight_layout()
    return fig


def l0_bleu(curve: pd.DataFrame) -> plt.Figure:
    """One panel per L0 setting: test BLEU against heads kept (of the gated types): L0 masks and random masks with
    the same heads per type; the full model dotted.

    curve: columns setting, n_kept, n_heads_total, bleu_l0, bleu_random_mean, bleu_full (``nmt_heads.l0_curve``).
    """
    settings = [t for t in TYPE_LABELS if t in set(curve["setting"])]
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(settings), figsize=(5.0 * len(settings), 3.9), squeeze=False)
    for ax, setting in zip(axes[0], settings):
        c = curve[curve["setting"] == setting].sort_values("n_kept")
        for col, label, color, marker in (("bleu_l0", "L0 gates", "tab:blue", "o"),
                                          ("bleu_random_mean", "random, same heads per type", "tab:grey", "^")):
            ax.plot(c["n_kept"], c[col], color=color, marker=marker, label=label)
        ax.axhline(c["bleu_full"].mean(), color="black", linestyle=":", linewidth=1, label="full model")
        ax.set_title(f"L0 gates on: {TYPE_LABELS.get(setting, setting)}", fontsize="medium")
        ax.set_xlabel(f"heads kept (of {int(c['n_heads_total'].max())})")
        ax.set_ylabel("test BLEU (greedy)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    return fig
