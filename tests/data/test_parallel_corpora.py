"""The real parallel corpora under HEADPRUNE_DATA_DIR (../shared/data): the counts of their PROVENANCE.md files.

The hub is disabled throughout, so these tests never touch the network.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from headprune_utils.tasks.translation_data import load_parallel

pytestmark = pytest.mark.data


def _data_root() -> Path:
    env = os.environ.get("HEADPRUNE_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "data"


ROOT = _data_root()
FOLDERS = {"multi30k": ["multi30k"], "newstest-en-ru": ["wmt_newstest_en_ru", "tatoeba_en_ru"]}
COUNTS = {("multi30k", "train"): 29000, ("multi30k", "dev"): 1014, ("multi30k", "test"): 1000,
          ("newstest-en-ru", "train"): 20823 + 19425, ("newstest-en-ru", "dev"): 1997,
          ("newstest-en-ru", "test"): 2002}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.mark.parametrize("corpus,split", sorted(COUNTS))
def test_counts_match_provenance(corpus, split):
    missing = [f for f in FOLDERS[corpus] if not (ROOT / f).is_dir()]
    if missing:
        pytest.skip(f"real data not found: {missing} missing under {ROOT} (set HEADPRUNE_DATA_DIR or place "
                    "shared/data beside the repo)")
    data = load_parallel(corpus, split, ROOT)
    assert len(data) == COUNTS[(corpus, split)]
    assert all(s.strip() and t.strip() for s, t in data.pairs)  # no empty lines
    assert data.source.startswith("local:")


def test_first_lines_and_no_overlap_between_news_splits():
    if not (ROOT / "wmt_newstest_en_ru").is_dir() or not (ROOT / "multi30k").is_dir():
        pytest.skip(f"real data not found under {ROOT}")
    m30k = load_parallel("multi30k", "train", ROOT)
    assert m30k.src[0] == "Two young, White males are outside near many bushes."
    assert m30k.tgt[0] == "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    train = set(load_parallel("newstest-en-ru", "train", ROOT).src)
    test = load_parallel("newstest-en-ru", "test", ROOT).src
    assert len(set(test) & train) < 0.01 * len(test)
