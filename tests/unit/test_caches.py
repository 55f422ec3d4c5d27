"""The one cache rule: build once under a lock, atomically; a corrupt entry is quarantined and rebuilt."""
from __future__ import annotations

import json
import threading

import pytest

from headprune_utils.store.caches import KEY_FIELD, CorruptCacheWarning, cached, check_entry_key


def test_built_once_then_loaded(tmp_path):
    builds = []

    def build(tmp):
        builds.append(tmp)
        tmp.write_text(json.dumps({"v": 1}))

    load = lambda p: json.loads(p.read_text())  # noqa: E731
    assert cached(tmp_path / "e.json", build, load) == {"v": 1}
    assert cached(tmp_path / "e.json", build, load) == {"v": 1}
    assert len(builds) == 1 and builds[0].name.startswith(".e.json.tmp-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.json", "e.json.lock"]


def test_a_failed_build_leaves_nothing_under_the_name(tmp_path):
    def build(tmp):
        tmp.mkdir()
        (tmp / "half").write_text("x")
        raise RuntimeError("crash mid-build")

    with pytest.raises(RuntimeError, match="crash"):
        cached(tmp_path / "model", build, lambda p: p)
    assert not (tmp_path / "model").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model.lock"], "no temporary folder left"


def test_threads_build_once(tmp_path):
    builds = []

    def build(tmp):
        builds.append(1)
        tmp.write_text("ok")

    threads = [threading.Thread(target=cached, args=(tmp_path / "e", build, lambda p: p.read_text())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == [1]


def test_a_corrupt_entry_is_quarantined_named_and_rebuilt(tmp_path):
    entry = tmp_path / "e.json"
    entry.write_text('{"v": ')  # truncated

    def build(tmp):
        tmp.write_text('{"v": 2}')

    with pytest.warns(CorruptCacheWarning, match="e.json"):
        assert cached(entry, build, lambda p: json.loads(p.read_text())) == {"v": 2}
    q = list((tmp_path / "quarantine").iterdir())
    assert len(q) == 1 and q[0].read_text() == '{"v": '


def test_an_entry_swapped_into_another_name_is_quarantined_and_built_again(tmp_path):
    """Entries record the name they were built under: two entries exchanged (a bad copy or restore) are each refused
    by their load, quarantined with a warning naming them, and built again; an entry written before keys were
    recorded is read as it is."""
    builds = []

    def entry(name):
        where = tmp_path / name

        def build(tmp):
            builds.append(name)
            tmp.write_text(json.dumps({"v": name, KEY_FIELD: where.name}))

        def load(p):
            saved = json.loads(p.read_text())
            check_entry_key(p, saved.get(KEY_FIELD))
            return saved["v"]

        return where, build, load

    (a, build_a, load_a), (b, build_b, load_b) = entry("seed=0.json"), entry("seed=1.json")
    assert cached(a, build_a, load_a) == "seed=0.json" and cached(b, build_b, load_b) == "seed=1.json"
    x, y = a.read_bytes(), b.read_bytes()
    a.write_bytes(y)
    b.write_bytes(x)
    with pytest.warns(CorruptCacheWarning, match=r"seed=0\.json.*built as seed=1\.json"):
        assert cached(a, build_a, load_a) == "seed=0.json"
    with pytest.warns(CorruptCacheWarning, match=r"seed=1\.json.*built as seed=0\.json"):
        assert cached(b, build_b, load_b) == "seed=1.json"
    assert builds == ["seed=0.json", "seed=1.json", "seed=0.json", "seed=1.json"]
    assert len(list((tmp_path / "quarantine").iterdir())) == 2
    a.write_text(json.dumps({"v": "old"}))  # no key: written before keys were recorded
    assert cached(a, build_a, load_a) == "old"
