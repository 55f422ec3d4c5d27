"""headprune_utils: gates, pruning, scores, data and results for the attention-head pruning studies.

One sub-package per layer; a layer imports only the layers below it (``tests/unit/test_layers.py``):

    analysis/  (0) statistics and the claims model: numbers in, tests and verdicts out
    store/     (0) output paths, result cells, caches
    tasks/     (1) GLUE and translation data, batching, subwords, probes, metrics
    model/     (2) where the heads live; gates, pruning, masks, strategies, model loading
    train/     (3) fine-tuning, lean loss, translation training, masked LM, Hard Concrete gates
    measure/   (4) importance, head scores, mask sweeps, redundancy, clustering, specialized heads, costs
    figures/   (4) one module per kind of picture, each saved with its data
    studies/   (5) the study protocol, parameters, ablation semantics, shared engines and the seven studies
    run/       (6) the driver and executors, the command line (python -m headprune_utils.run), summary, report

Each sub-package's ``__init__`` lists its modules.
"""
__version__ = "0.1.0"
