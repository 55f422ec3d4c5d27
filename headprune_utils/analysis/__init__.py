"""Layer 0, analysis: statistics and the claims model, pure functions of numbers (no model, no data, no files).

    stats             t-intervals, bootstrap CIs, exact sign-flip / binomial / permutation tests, Holm, Gini
    claims            claims as data, decision rules, hypothesis tests, Holm families, the verdict table
    margins           the one margin policy: a smallest effect of interest per metric
    preconditions     the standard gates of the claims (objects that render their own text)
    paired_contrasts  paired differences between pruning strategies (descriptive tables)
    pruning_curves    score-vs-share-pruned curves and their summaries
    survival          survival levels of heads under increasing pruning

May import: nothing else of headprune_utils.
"""
