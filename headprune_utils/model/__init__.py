"""Layer 2, models and heads: where the heads live, how they are gated, masked and pruned.

    families/          one adapter per model family (bert, distilbert, bart for Marian/BART) and their registry:
                       the only modules that name a family's attributes
    architecture       where the heads live, asked of the family adapter (grids, sites, kept heads)
    ablations          ablation semantics as objects (zero, uniform, mean): needs, removal-equivalence, apply
    attention          per-head attention maps (any attention backend, pruned models)
    gates              the head-gate context manager (any ablation object or its name), head means
    pruning            physical removal of heads from the weights
    masks              pure mask functions (random masks, budgets)
    strategies         layer-location and importance pruning strategies: (shape, budget, seed) -> mask
    head_weights       each head's own parameters and their relative change
    precision          float / bf16 / half evaluation settings
    models             loading encoders and causal LMs (embedded MiniLM, local folders, hub ids), a tiny
                       Llama-shaped model for offline work, device choice
    translation_model  the Transformer encoder-decoder (Marian classes, from scratch)

May import: tasks, store.
"""
