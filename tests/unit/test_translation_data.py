"""Parallel-corpus loading from a synthetic local root (no real data, no network)."""
from __future__ import annotations

import gzip

import pytest

from headprune_utils.tasks.data import DataUnavailableError
from headprune_utils.tasks.translation_data import CORPORA, load_parallel, local_available, subset_pairs


def write(path, lines, gz=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")


@pytest.fixture
def root(tmp_path):
    raw = tmp_path / "multi30k" / "task1" / "raw"
    for stem, n in (("train", 5), ("val", 2), ("test_2016_flickr", 3)):
        write(raw / f"{stem}.en.gz", [f"{stem} en {i}" for i in range(n)], gz=True)
        write(raw / f"{stem}.de.gz", [f"{stem} de {i}" for i in range(n)], gz=True)
    news = tmp_path / "wmt_newstest_en_ru"
    for year in range(2012, 2021):
        write(news / f"newstest{year}.en", [f"news{year} en {i}" for i in range(2)])
        write(news / f"newstest{year}.ru", [f"news{year} ру {i}" for i in range(2)])
    write(tmp_path / "tatoeba_en_ru" / "tatoeba-test-v2021-08-07.eng", ["Hi.", "Bye."])
    write(tmp_path / "tatoeba_en_ru" / "tatoeba-test-v2021-08-07.rus", ["Привет.", "Пока."])
    return tmp_path


def test_multi30k_splits_and_directions(root):
    train = load_parallel("multi30k", "train", root)
    assert len(train) == 5 and train.src[1] == "train en 1" and train.tgt[1] == "train de 1"
    assert (train.src_lang, train.tgt_lang) == ("en", "de") and train.source.startswith("local:multi30k/task1/raw/")
    assert load_parallel("multi30k", "dev", root).src == ["val en 0", "val en 1"]
    test = load_parallel("multi30k", "test", root, direction="de-en")
    assert test.src[0] == "test_2016_flickr de 0" and test.tgt[0] == "test_2016_flickr en 0"
    assert test.pairs[2] == ("test_2016_flickr de 2", "test_2016_flickr en 2")


def test_newstest_en_ru_train_dev_test(root, monkeypatch):
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(root))
    train = load_parallel("newstest-en-ru", "train")
    assert len(train) == 7 * 2 + 2  # newstest2012-2018 + Tatoeba
    assert train.src[0] == "news2012 en 0" and train.tgt[-1] == "Пока."
    assert load_parallel("newstest-en-ru", "dev").src == ["news2019 en 0", "news2019 en 1"]
    assert load_parallel("newstest-en-ru", "test").tgt == ["news2020 ру 0", "news2020 ру 1"]
    assert local_available("newstest-en-ru", "test") and not local_available("wmt14-en-de", "test")


def test_missing_data_says_what_was_tried_and_how_to_fix(root, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    (root / "wmt_newstest_en_ru" / "newstest2019.ru").unlink()
    with pytest.raises(DataUnavailableError, match=r"newstest2019\.ru.*no hub copy.*HEADPRUNE_DATA_DIR"):
        load_parallel("newstest-en-ru", "dev", root)
    empty = tmp_path_factory.mktemp("empty")
    with pytest.raises(DataUnavailableError, match=r"not found.*offline mode is on.*bentrevett/multi30k"):
        load_parallel("multi30k", "train", empty)
    with pytest.raises(DataUnavailableError, match=r"no local copy.*wmt/wmt14.*offline"):
        load_parallel("wmt14-en-ru", "test", empty)
    with pytest.raises(DataUnavailableError, match="does not exist"):
        load_parallel("multi30k", "train", empty / "typo")


def test_misaligned_files_and_bad_arguments(root):
    write(root / "multi30k" / "task1" / "raw" / "val.de.gz", ["only one"], gz=True)
    with pytest.raises(DataUnavailableError, match="not aligned"):
        load_parallel("multi30k", "dev", root)
    with pytest.raises(ValueError, match="unknown parallel corpus"):
        load_parallel("iwslt", "train", root)
    with pytest.raises(ValueError, match="split must be one of"):
        load_parallel("multi30k", "valid", root)
    with pytest.raises(ValueError, match="direction must be one of"):
        load_parallel("multi30k", "train", root, direction="en-fr")
    assert set(CORPORA) == {"multi30k", "newstest-en-ru", "wmt14-en-de", "wmt14-en-ru"}


def test_subset_is_deterministic_and_keeps_pairs_aligned(root):
    train = load_parallel("multi30k", "train", root)
    a, b = subset_pairs(train, 3, seed=0), subset_pairs(train, 3, seed=0)
    assert a.src == b.src and len(a) == 3
    assert [s.replace(" en ", " de ") for s in a.src] == a.tgt
    assert subset_pairs(train, None, seed=0).src == train.src and len(subset_pairs(train, 99, seed=1)) == 5
    assert subset_pairs(train, 3, seed=1).src != a.src or subset_pairs(train, 3, seed=2).src != a.src
    with pytest.raises(ValueError, match="positive"):
        subset_pairs(train, 0, seed=0)
