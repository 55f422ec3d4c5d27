"""headprune_utils: gates, pruning, scores, data and results for the attention-head pruning studies.

Modules (each named after what it holds):
    architecture  where the heads live (BERT-family encoders; Marian/BART enc, dec and cross attention);
                  original head ids after pruning
    gates         the head-gate context manager (zero / uniform / mean ablation), head means
    pruning       physical removal of heads from the weights
    masks         pure mask functions (random masks, budgets)
    strategies    layer-location and importance pruning strategies: (shape, budget, seed) -> mask
    mask_sweep    many masks of one model evaluated together, reusing the work they share
    importance    Michel et al.'s gradient head importance
    attention     per-head attention maps (any attention backend, pruned models) and Jensen-Shannon distances
    head_weights  each head's own parameters and their relative change
    stats         t-intervals, bootstrap CIs, sign-flip and permutation tests, Gini
    models        loading encoders (embedded MiniLM, local folders, hub ids), device choice
    data          GLUE tasks from a local root or the hub; deterministic subsets
    metrics       the official GLUE metrics
    batching      tokenising, length-grouped dynamically padded batches
    training      fine-tuning with a fixed mask, evaluation
    translation_data     parallel corpora (Multi30k en-de, newstest+Tatoeba en-ru, WMT'14) from a local root or the hub
    subword              a joint BPE/unigram tokenizer trained on the training text
    translation_model    the Transformer encoder-decoder (Marian classes, from scratch); save/load with its tokenizer
    translation          NMT training (label smoothing, warm-up, best-dev-loss weights), decoding, BLEU/chrF
    translation_metrics  sacrebleu BLEU and chrF of detokenised output
    results       atomic, resumable, fingerprinted result cells and run metadata
    paths         every output path
    config        strict parameters and profiles (params/<profile>.yaml)
    figures/      seaborn figures, a module per kind of picture (curves, masks, contrasts, head maps,
                  distributions, matrices), each saved with its data
    run           the papermill batch runner (python -m headprune_utils.run)
    studies/      per study notebook, one layout: <study>.py (the protocol: config, plan, run, claims; re-exports
                  the analysis) and <study>_analysis.py (pure functions of its cells: tables, verdicts, figure data)
"""
__version__ = "0.1.0"
