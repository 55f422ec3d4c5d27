"""Layer 1, tasks: the data and how it is scored.

    data                 GLUE tasks from a local root or the hub; deterministic subsets
    translation_data     parallel corpora (Multi30k en-de, newstest+Tatoeba en-ru, WMT'14)
    batching             tokenising, length-grouped dynamically padded batches
    text                 lines of a text file as padded next-token batches (causal language models)
    subword              a joint BPE/unigram tokenizer trained on the training text
    probes               the probe sentences of the redundancy and specialized-head measurements
    metrics              the official GLUE metrics, chance levels, the metric a verdict uses
    translation_metrics  sacrebleu BLEU and chrF of detokenised output

May import: store.
"""
