"""Layer 4, measurements of heads: importance, scores, redundancy, roles, costs.

    importance   Michel et al.'s gradient head importance
    head_scores  confidence, relevance, ablation importance, entropy per head
    mask_sweep   many masks of one model evaluated together, reusing the work they share
    redundancy   distances between heads' attention maps (token- and sentence-based)
    clustering   clusters of heads in a distance matrix
    specialized  Voita et al.'s positional, syntactic and rare-word heads; a CoNLL-U reader
    costs        FLOPs of forward and backward passes (for plans and executors)
    language_model  causal-LM loss and perplexity on text, gated or not

May import: train, model, tasks, store, analysis.
"""
