"""Atomic, keyed, fingerprinted results."""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import (
    ResultStore, StaleResultsError, atomic_write_json, cell_key, fingerprint, run_metadata,
)


def test_cell_key_is_stable_and_safe():
    cell = {"task": "SST-2", "regime": "mask_then_finetune", "fraction": 0.5, "seed": 1}
    assert cell_key(cell) == "fraction=0.5__regime=mask_then_finetune__seed=1__task=SST-2"
    assert cell_key(dict(reversed(list(cell.items())))) == cell_key(cell)
    assert "/" not in cell_key({"model": "a/b c"})


def test_store_put_get_table_and_fingerprint(tmp_path):
    store = ResultStore(tmp_path / "cells", fingerprint({"lr": 1e-4}))
    store.check_compatible()  # empty: fine
    cells = [{"task": "A", "seed": s} for s in range(3)]
    for c in cells[:2]:
        store.put(c, {"score": 0.5 + c["seed"]})
    assert store.has(cells[0]) and not store.has(cells[2])
    assert store.get(cells[1])["result"]["score"] == 1.5
    table = store.table(cells[:2])
    assert list(table["score"]) == [0.5, 1.5] and list(table["task"]) == ["A", "A"]
    assert not list((tmp_path / "cells").glob("*.tmp")), "no temporary files left behind"
    other = ResultStore(tmp_path / "cells", fingerprint({"lr": 2e-4}))
    with pytest.raises(StaleResultsError, match="other parameters.*Nothing was overwritten"):
        other.check_compatible()


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    path = tmp_path / "x.json"
    atomic_write_json(path, {"a": 1})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"a": object()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_run_metadata_records_what_the_brief_asks(tmp_path):
    outside = str(tmp_path / "my_model")
    meta = run_metadata("s", "quick", {"lr": 1.0, "model": outside, "tasks": ["SST-2"]}, [0, 1], "cpu",
                        {"total": 1.0}, "abc")
    for key in ("params", "seeds", "device", "packages", "git_revision", "durations_seconds", "results_fingerprint"):
        assert key in meta
    assert meta["packages"]["torch"].startswith("2.13")
    assert meta["params"]["model"] == "my_model", "absolute paths are not recorded"
    assert str(tmp_path) not in json.dumps(meta)
    assert meta["git_revision"] == "unknown" or re.fullmatch(r"[0-9a-f]{40}(-dirty)?", meta["git_revision"])


def test_paths_layout(tmp_path):
    p = StudyPaths("random_pruning", "quick", root=tmp_path)
    assert p.dir == tmp_path / "random_pruning" / "quick"
    assert p.figure("a").parent == p.figures and p.table("a").suffix == ".csv"
    assert not p.dir.exists()
    p.ensure()
    assert p.cells.is_dir() and p.cache.is_dir()


def test_packed_floats_round_trip_and_refuse_bad_input():
    import json

    import numpy as np

    from headprune_utils.store.results import pack_floats, unpack_floats

    rng = np.random.default_rng(0)
    x = rng.random(2556)
    field = json.loads(json.dumps(pack_floats(x)))  # through JSON, as stored
    back = unpack_floats(field)
    assert back.dtype == np.float64 and back.shape == x.shape
    np.testing.assert_allclose(back, x, rtol=1e-7, atol=0)  # float32: 7 significant digits
    assert np.array_equal(back, x.astype(np.float32).astype(np.float64))
    # a fraction of the size of the same numbers as the old indented 7-decimal lists
    old = json.dumps({"a": np.round(x, 7).tolist()}, indent=2)
    assert len(json.dumps(field)) < len(old) / 2.5
    # cells written before packing (plain lists) read as before
    assert np.array_equal(unpack_floats([0.5, 0.25]), np.array([0.5, 0.25]))
    with pytest.raises(ValueError, match="non-finite"):
        pack_floats([0.1, float("nan")])
    field["n"] = 2555
    with pytest.raises(ValueError, match="2556 values, its record says 2555"):
        unpack_floats(field)


@pytest.mark.parametrize("edit, named", [
    (lambda rec: rec["cell"].update(seed="1"), "numbers written as text"),            # a seed that is text
    (lambda rec: rec["result"].update(score=float("nan")), "score = nan"),             # NaN written by hand
    (lambda rec: rec["result"].update(history=[{"loss": float("inf")}]), r"history\[0\]\.loss = inf"),
    (lambda rec: rec["cell"].update(seed=[1]), "not plain finite values"),
    (lambda rec: rec["cell"].update(seed=2), "not the one its file name says"),        # another cell's record
])
def test_an_edited_or_swapped_cell_is_named_and_never_read_as_a_result(tmp_path, edit, named):
    """Stored results were trusted as they were: a record whose axes are not the ones its file name says (a copy
    or swap), an axis that became text, or a non-finite number is named on read; a run quarantines and recomputes
    it, a read-only store (the render from cells) refuses naming the file."""
    from headprune_utils.store.results import CorruptCellError, ResultStore

    store = ResultStore(tmp_path / "cells", "fp")
    store.put({"task": "SST-2", "seed": 1}, {"score": 0.9, "history": [{"loss": 0.5}]})
    path = store.path({"task": "SST-2", "seed": 1})
    rec = json.loads(path.read_text())
    edit(rec)
    path.write_text(json.dumps(rec))
    with pytest.raises(CorruptCellError, match=named):
        ResultStore(tmp_path / "cells", "fp", quarantine=False).get({"task": "SST-2", "seed": 1})
    with pytest.warns(Warning, match=named):
        assert not store.has({"task": "SST-2", "seed": 1}), "quarantined: the run recomputes it"
    assert not path.exists() and len(list((tmp_path / "quarantine").iterdir())) == 1


def test_a_copy_of_a_cell_under_another_name_is_not_a_second_record(tmp_path):
    from headprune_utils.store.results import ResultStore

    store = ResultStore(tmp_path / "cells", "fp")
    store.put({"task": "SST-2", "seed": 1}, {"score": 0.9})
    (tmp_path / "cells" / "task=SST-2__seed=1 (copy).json").write_text(
        store.path({"task": "SST-2", "seed": 1}).read_text())
    with pytest.warns(Warning, match="not the one its file name says"):
        assert len(store.records()) == 1


def test_a_result_a_read_would_reject_is_refused_before_it_is_written(tmp_path):
    """A NaN (or a value the study's check rejects) used to be written, then taken for a corrupt cell on the next
    read, moved aside and left out of the tables: the run went on without the cell. Now the write refuses it."""
    from headprune_utils.store.results import BadResultError

    store = ResultStore(tmp_path / "cells", fingerprint({"lr": 1e-4}),
                        check=lambda cell, r: "score = 2 is outside its range [0, 1]" if r.get("score", 0) > 1 else None)
    with pytest.raises(BadResultError, match=r"cell seed=0__task=A: the computed result is not stored: head_loss = nan"):
        store.put({"task": "A", "seed": 0}, {"score": 0.5, "head_loss": float("nan")})
    with pytest.raises(BadResultError, match=r"cell seed=1__task=A: the computed result is not stored: score = 2"):
        store.put({"task": "A", "seed": 1}, {"score": 2.0})
    assert not list((tmp_path / "cells").glob("*.json")) if (tmp_path / "cells").exists() else True
    store.put({"task": "A", "seed": 2}, {"score": 0.5})  # a good one is stored as before
    assert store.get({"task": "A", "seed": 2})["result"]["score"] == 0.5
