"""A claim has one id across the project, and its id says whose claim it is: ``ours.*`` for our own (exploratory)
claims, the first author's name for a paper's. One id tested in two studies (a paper's claim on BERT and on the
Transformer) is one claim: the same paper; two studies' claims of one text are one id."""
from __future__ import annotations

import collections

from headprune_utils.studies import NAMES, STUDIES


def all_claims():
    return [(name, c) for name in NAMES for c in STUDIES[name].claims]


def test_one_id_is_one_claim_and_one_claim_one_id():
    papers, ids_of_text = collections.defaultdict(set), collections.defaultdict(set)
    for _, c in all_claims():
        papers[c.id].add(c.paper.split(" (")[0])
        ids_of_text[c.text].add(c.id)
    assert papers and all(len(p) == 1 for p in papers.values()), {i: p for i, p in papers.items() if len(p) > 1}
    assert all(len(i) == 1 for i in ids_of_text.values()), {t: i for t, i in ids_of_text.items() if len(i) > 1}


def test_a_claim_id_names_whose_claim_it_is():
    for name, c in all_claims():
        owner = c.id.split(".", 1)[0]
        if c.paper.startswith("ours"):
            assert owner == "ours", (name, c.id, c.paper)
        else:
            assert owner != "ours" and c.paper.lower().startswith(owner), (name, c.id, c.paper)
