"""Layer 3, training: fine-tuning with a fixed mask, translation training, masked-LM, Hard Concrete gates.

    training       fine-tuning with a fixed mask, evaluation
    lean_loss      the exact, cheaper loss of a masked BERT-family model
    translation    NMT training (label smoothing, warm-up, best-dev-loss weights), decoding, BLEU/chrF
    fused_vocab_loss  the label-smoothed loss with the output projection a block of tokens at a time
    mlm            continued masked-LM training (the dropout study)
    hard_concrete  Louizos et al.'s L0 gates per head
    phases         what a long computation is doing now (epoch, step), for progress displays
    language_model a few steps of causal-LM training (the offline stand-in model)

May import: model, tasks, store, analysis.
"""
