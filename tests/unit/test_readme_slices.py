"""Failure cases of the long-run slice workflow, written from README.md alone ("The standard profile", "Scaling
out", "Studies"): ``--where``, ``--cells-only``, ``--fresh --where``, ``--plan --plan-slices``, ``--from-cells
--where``, the machine kind of a model slice, the cells' MANIFEST.sha256, stale results. Only fake studies (no
model, no data) under tmp_path; the runner is called in-process, except where another process (a lock holder, a
run killed midway) is the point."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from headprune_utils.run import cli, profiles, schedule
from headprune_utils.run.execution import run_study
from headprune_utils.store import manifest
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import fingerprint
from headprune_utils.studies.base import Cell, Cost, Study

from fake_studies import FakeConfig, FakeStudy, fake_profile

CLEAN = {"changed": [], "unlisted": [], "gone": [], "damaged": []}
UNIT = Path(__file__).resolve().parent


# --- a study split into model slices (task x seed), each a "full" cell that the pruned cells of its slice require ---

@dataclass(frozen=True)
class SliceConfig:
    tasks: list[str] = field(default_factory=lambda: ["SST-2", "CoLA"])
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    fractions: list[float] = field(default_factory=lambda: [0.25, 0.5, 0.75])
    scale: float = 1.0
    device: str = "cpu"
    progress: bool = False


class SliceStudy(Study):
    name = "sliced"
    notebook = "00_sliced.ipynb"
    Config = SliceConfig
    model_axes = ("task", "seed")

    def plan(self, cfg):
        cells = []
        for t in cfg.tasks:
            for s in cfg.seeds:
                full = Cell({"task": t, "seed": s, "fraction": 0.0}, group=(t, s), cost=Cost(1e9))
                cells.append(full)
                cells += [Cell({"task": t, "seed": s, "fraction": f}, requires=(full.key,), group=(t, s),
                               cost=Cost(1e9)) for f in cfg.fractions]
        return cells

    def fingerprint(self, cfg, device):
        return fingerprint({"scale": cfg.scale, "tasks": list(cfg.tasks), "seeds": list(cfg.seeds),
                            "fractions": list(cfg.fractions)})

    def context(self, cfg, device, paths):
        return {"cfg": cfg}

    def run(self, ctx, cells, inputs):
        for c in cells:
            yield c, {"value": ctx["cfg"].scale * (c["seed"] + 1) * (1.0 - c["fraction"]), "seconds": 0.0}


class NotebookStarted(Exception):
    pass


@pytest.fixture
def runner(tmp_path, monkeypatch):
    """Both fake studies registered, profile ``t`` in a temporary params dir, outputs under tmp_path/out; no
    notebook may start (a started one raises NotebookStarted)."""
    params = fake_profile(tmp_path, monkeypatch, {"fake": FakeStudy(), "sliced": SliceStudy()})

    def no_notebook(*a, **k):
        raise NotebookStarted("a notebook started")

    monkeypatch.setattr(schedule, "execute_study", no_notebook)

    class R:
        out = tmp_path / "out"

        @staticmethod
        def profile(text: str) -> None:
            (params / "t.yaml").write_text(text)

        @staticmethod
        def main(*args: str) -> int:
            return cli.main(["--profile", "t", "--no-progress", *args])

        @staticmethod
        def paths(study: str) -> StudyPaths:
            return StudyPaths(study, "t", root=tmp_path / "out")

        @staticmethod
        def backups(study: str) -> list[Path]:
            return sorted((tmp_path / "out" / study).glob("t.bak-*"))

    return R


def snapshot(cells_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in Path(cells_dir).glob("*.json")}


def value(path: Path) -> float:
    """The cell's result value, wherever the store keeps it in the file."""
    data = json.loads(path.read_text())

    def find(d):
        if isinstance(d, dict):
            if "value" in d and isinstance(d["value"], (int, float)):
                return d["value"]
            for v in d.values():
                r = find(v)
                if r is not None:
                    return r
        return None

    return find(data)


def key_of(cells_dir: Path, **axes) -> str:
    want = [f"{k}={v}" for k, v in axes.items()]
    hits = [p.name for p in Path(cells_dir).glob("*.json") if all(w in p.stem.split("__") for w in want)]
    assert len(hits) == 1, (axes, hits)
    return hits[0]


def compute_all(r) -> None:
    run_study(FakeStudy(), FakeConfig(), "t", r.paths("fake"))
    run_study(SliceStudy(), SliceConfig(), "t", r.paths("sliced"))


def no_traceback(captured) -> None:
    assert "Traceback" not in captured.err and "Traceback" not in captured.out, captured.err[-2000:]


# ------------------------------------------------------------------------------------------------- --where typos

def test_where_with_an_axis_the_study_lacks_computes_nothing_and_says_so(runner, capsys):
    """README: "`--where AXIS=VALUE ...` (with `--cells-only`) computes only the cells whose axes match". A typo in
    the axis (tsk=) matches no cell: nothing is computed, and the user is told (a silent success would leave a long
    session's slice uncomputed)."""
    rc = runner.main("--cells-only", "--only", "sliced", "--where", "tsk=SST-2")
    captured = capsys.readouterr()
    assert not list(runner.paths("sliced").cells.glob("*.json")), "nothing computed"
    assert rc != 0 and "tsk" in captured.err
    no_traceback(captured)


def test_where_with_a_value_that_matches_nothing_computes_nothing_and_lists_the_values(runner, capsys):
    """README: `--where` computes only the cells whose axes match. `task=SST2` (for SST-2) matches none: nothing
    runs, and the message names the value."""
    rc = runner.main("--cells-only", "--only", "sliced", "--where", "task=SST2")
    captured = capsys.readouterr()
    assert not list(runner.paths("sliced").cells.glob("*.json"))
    assert rc != 0 and "SST2" in captured.err
    no_traceback(captured)


@pytest.mark.parametrize("bad", ["task", "=SST-2", "task="])
def test_a_malformed_where_is_refused_before_anything_is_written(runner, capsys, bad):
    """README: `--where AXIS=VALUE ...`. An item without an axis, a value or the '=' is not a selection: the run
    stops before any work (nothing created under the outputs root)."""
    rc = runner.main("--cells-only", "--only", "sliced", "--where", bad)
    captured = capsys.readouterr()
    assert rc == 2 and "--where" in captured.err
    assert not list(runner.paths("sliced").cells.glob("*.json"))
    no_traceback(captured)


def test_two_axes_select_one_model_slice_and_the_cells_it_requires(runner):
    """README: `--cells-only --where task=SST-2 seed=0` is "a slice: every cell of the studies that use the
    fine-tuned SST-2 model of seed 0" (axes combine: task AND seed), with the cells they require."""
    assert runner.main("--cells-only", "--only", "sliced", "--where", "task=SST-2", "seed=0") == 0
    names = sorted(snapshot(runner.paths("sliced").cells))
    assert len(names) == 4 and all("task=SST-2" in n and "seed=0" in n for n in names), names


def test_a_repeated_axis_selects_each_of_its_values(runner):
    """README: `--where regime=mask_then_finetune fraction=0.25 fraction=0.5 fraction=0.75`: an axis given several
    times selects each value; here fraction=0.25 fraction=0.5 on every slice, plus the full cells they require."""
    assert runner.main("--cells-only", "--only", "sliced", "--where", "fraction=0.25", "fraction=0.5") == 0
    names = snapshot(runner.paths("sliced").cells)
    fr = sorted({n.split("fraction=")[1].split("__")[0] for n in names})
    assert fr == ["0", "0.25", "0.5"], fr          # 0: the required full cells
    assert len(names) == 4 * 3


def test_the_same_value_twice_is_the_same_selection(runner):
    """README: repeating an axis lists several values; the same value twice selects what it selects once."""
    assert runner.main("--cells-only", "--only", "sliced", "--where", "task=CoLA", "task=CoLA", "seed=1") == 0
    assert len(snapshot(runner.paths("sliced").cells)) == 4


def test_where_given_twice_keeps_both_parts_of_the_selection(runner, capsys):
    """README: options taking one value given twice are errors; --where takes many. `--where task=SST-2 --where
    seed=0` must either be refused or mean task=SST-2 seed=0, never drop the first part."""
    rc = runner.main("--cells-only", "--only", "sliced", "--where", "task=SST-2", "--where", "seed=0")
    names = sorted(snapshot(runner.paths("sliced").cells))
    if rc == 0:
        assert len(names) == 4 and all("task=SST-2" in n and "seed=0" in n for n in names), names
    else:
        assert rc == 2 and not names


def test_a_float_axis_matches_its_number_however_it_is_written(runner, capsys):
    """README: `--where ... fraction=0.25 fraction=0.5 fraction=0.75` selects cells by their fraction: a number.
    A user writing fraction=0.50 (or 0.500) means the same cells as fraction=0.5."""
    assert runner.main("--cells-only", "--only", "sliced", "--where", "fraction=0.50") == 0, capsys.readouterr().err
    names = snapshot(runner.paths("sliced").cells)
    assert len(names) == 4 * 2 and sum("fraction=0.5_" in n for n in names) == 4


def test_a_zero_float_axis_written_with_a_decimal_point_matches(runner, capsys):
    """Same promise as above, for the value 0.0 the plan gives the unpruned cells: fraction=0.0 selects them."""
    assert runner.main("--cells-only", "--only", "sliced", "--where", "fraction=0.0") == 0, capsys.readouterr().err
    assert len(snapshot(runner.paths("sliced").cells)) == 4


def test_where_without_cells_only_or_from_cells_is_refused(runner, capsys):
    """README: `--where` is documented "(with `--cells-only`)" and for `--from-cells` interim renders; a full run
    renders notebooks that analyse every cell, so a bare `--where` stops before any work, nothing computed and no
    notebook started."""
    rc = runner.main("--only", "sliced", "--where", "task=SST-2")
    captured = capsys.readouterr()
    assert rc == 2 and "--where" in captured.err
    assert not list(runner.paths("sliced").cells.glob("*.json"))


# ------------------------------------------------------------------------------------------------ --fresh --where

def test_fresh_where_with_a_value_that_matches_nothing_moves_nothing(runner, capsys):
    """README: "with `--where`, `--fresh` moves only the cells the selection matches". A typo (task=STSB) matches
    none: no stored cell moves, no backup folder appears, every cell stays byte for byte."""
    compute_all(runner)
    before = snapshot(runner.paths("sliced").cells)
    rc = runner.main("--cells-only", "--fresh", "--only", "sliced", "--where", "task=STSB", "seed=1")
    captured = capsys.readouterr()
    assert rc != 0 and "STSB" in captured.err
    assert not runner.backups("sliced")
    assert snapshot(runner.paths("sliced").cells) == before
    assert manifest.verify(runner.paths("sliced").cells) == CLEAN


def test_fresh_where_with_an_axis_the_study_lacks_moves_nothing(runner, capsys):
    """README: `--fresh` with `--where` moves only matched cells; an axis the study does not have (model_seed on a
    GLUE-like study) matches none: nothing moves, and the user is told."""
    compute_all(runner)
    before = snapshot(runner.paths("sliced").cells)
    rc = runner.main("--cells-only", "--fresh", "--only", "sliced", "--where", "model_seed=1")
    captured = capsys.readouterr()
    assert rc != 0 and "model_seed" in captured.err
    assert not runner.backups("sliced") and snapshot(runner.paths("sliced").cells) == before


def test_fresh_where_moves_one_slice_and_recomputes_it_leaving_the_others_byte_for_byte(runner, capsys):
    """README: "`--cells-only --fresh --where task=STS-B seed=1` moves that slice's stored cells aside
    (`<profile>.bak-<time>/cells/` beside the study's folder, with the manifest lines they had) and computes the
    whole slice again here; ... never the other slices"."""
    compute_all(runner)
    cells = runner.paths("sliced").cells
    before = snapshot(cells)
    assert runner.main("--cells-only", "--fresh", "--only", "sliced", "--where", "task=CoLA", "seed=1") == 0
    (bak,) = runner.backups("sliced")
    moved = snapshot(bak / "cells")
    assert sorted(moved) == sorted(n for n in before if "task=CoLA" in n and "seed=1" in n)
    assert all(moved[n] == before[n] for n in moved)
    assert manifest.verify(bak / "cells") == CLEAN
    after = snapshot(cells)
    assert set(after) == set(before), "the whole slice computed again"
    assert all(after[n] == before[n] for n in before if n not in moved), "other slices untouched"
    assert manifest.verify(cells) == CLEAN
    # the plan agrees: every slice complete
    assert runner.main("--plan", "--plan-slices", "--only", "sliced") == 0
    assert "4 of 4 slices complete, 16 of 16 cells stored" in capsys.readouterr().out


def test_fresh_where_on_dependent_cells_keeps_the_cells_they_require(runner):
    """README: `--fresh` with `--where` moves "only the cells the selection matches, never the other slices or the
    cells they require": fraction=0.5 across slices moves those cells only; the full cells they require stay
    byte for byte, and the recomputed cells read them."""
    compute_all(runner)
    cells = runner.paths("sliced").cells
    before = snapshot(cells)
    assert runner.main("--cells-only", "--fresh", "--only", "sliced", "--where", "fraction=0.5") == 0
    (bak,) = runner.backups("sliced")
    moved = sorted(snapshot(bak / "cells"))
    assert len(moved) == 4 and all("fraction=0.5_" in n for n in moved), moved
    after = snapshot(cells)
    assert set(after) == set(before)
    assert all(after[n] == before[n] for n in before if n not in moved)
    assert manifest.verify(cells) == CLEAN


def test_fresh_where_on_a_cell_that_unselected_cells_require(runner, capsys):
    """README: --fresh --where moves "only the cells the selection matches, never the other slices or the cells
    they require". Selecting a1, which the unselected b requires: either the run refuses (nothing moved, b named)
    or it ends whole and consistent (b stored, a1 stored, manifest clean, b = a1 + a2); never a stored b resting
    on a cell computed again."""
    compute_all(runner)
    cells = runner.paths("fake").cells
    before = snapshot(cells)
    rc = runner.main("--cells-only", "--fresh", "--only", "fake", "--where", "name=a1")
    err = capsys.readouterr().err
    if rc != 0:
        assert rc == 2 and "name=b" in err, err
        assert not runner.backups("fake") and snapshot(cells) == before
        return
    after = snapshot(cells)
    assert set(after) == set(before) and manifest.verify(cells) == CLEAN
    b, a1, a2 = (cells / key_of(cells, name=n) for n in ("b", "a1", "a2"))
    assert value(b) == value(a1) + value(a2)


def test_a_required_cell_within_its_slice_is_refused_with_the_slice_to_select(runner, capsys):
    """README: `--fresh --where` moves "never ... the cells they require"; its recipe for one model's slice is
    `--cells-only --fresh --where task=... seed=...`. Selecting the full cells alone (fraction=0), which the
    slice's pruned cells require, leaves nothing consistent to recompute: refused, nothing moved, and the advice
    names a --where that works (the slice); pasting it succeeds."""
    compute_all(runner)
    cells = runner.paths("sliced").cells
    before = snapshot(cells)
    rc = runner.main("--cells-only", "--fresh", "--only", "sliced", "--where", "task=SST-2", "seed=0", "fraction=0")
    err = capsys.readouterr().err
    if rc == 0:     # moved and recomputed: then the slice must be whole and consistent
        assert set(snapshot(cells)) == set(before) and manifest.verify(cells) == CLEAN
        return
    assert rc == 2 and not runner.backups("sliced") and snapshot(cells) == before
    assert "--where task=SST-2 seed=0" in err, err
    assert runner.main("--cells-only", "--fresh", "--only", "sliced", "--where", "task=SST-2", "seed=0") == 0


def test_the_refusal_to_move_a_required_cell_never_advises_an_empty_where(runner, capsys):
    """README: every refusal of the slice workflow names what to run instead (--plan-slices prints "the `--where`
    that computes each"). The advice after refusing --fresh --where name=a1 (b requires it) must not be a bare
    `--where` with nothing after it, which the runner itself refuses."""
    compute_all(runner)
    rc = runner.main("--cells-only", "--fresh", "--only", "fake", "--where", "name=a1")
    err = capsys.readouterr().err
    assert rc == 2
    assert "--where )" not in err and not err.rstrip().endswith("--where"), err


def test_selection_with_a_cell_and_what_it_requires_moves_exactly_the_selection(runner):
    """README: --fresh --where moves the cells the selection matches. name=a2 name=b: both move; a1 (required by b,
    not selected), a0, a3 stay byte for byte."""
    compute_all(runner)
    cells = runner.paths("fake").cells
    before = snapshot(cells)
    assert runner.main("--cells-only", "--fresh", "--only", "fake", "--where", "name=a2", "name=b") == 0
    (bak,) = runner.backups("fake")
    moved = sorted(snapshot(bak / "cells"))
    assert moved == sorted([key_of(cells, name="a2"), key_of(cells, name="b")])
    after = snapshot(cells)
    assert all(after[n] == before[n] for n in before if n not in moved)
    assert manifest.verify(cells) == CLEAN and manifest.verify(bak / "cells") == CLEAN


def test_repeated_fresh_where_runs_keep_every_backup(runner):
    """README: `--fresh` "moves earlier results aside, keeping them" (`<profile>.bak-<time>/`). Three runs in a
    row (within the same second or two) leave three backups, none overwriting or merging into another."""
    compute_all(runner)
    cells = runner.paths("fake").cells
    b_key = key_of(cells, name="b")
    moved_bytes = []
    for _ in range(3):
        moved_bytes.append(snapshot(cells)[b_key])
        assert runner.main("--cells-only", "--fresh", "--only", "fake", "--where", "name=b") == 0
    baks = runner.backups("fake")
    assert len(baks) == 3, baks
    got = sorted(snapshot(bak / "cells")[b_key] for bak in baks)
    assert got == sorted(moved_bytes)
    for bak in baks:
        assert sorted(snapshot(bak / "cells")) == [b_key]
        assert manifest.verify(bak / "cells") == CLEAN


def test_a_backup_folder_that_already_exists_is_never_overwritten(runner):
    """README: `--fresh` keeps what it moves, in `<profile>.bak-<time>/cells/`. If a folder of that name is already
    there (an earlier backup, a clock set back), its contents stay as they were and the new cells land elsewhere
    (or the run refuses): one backup is never overwritten or mixed with another."""
    compute_all(runner)
    cells = runner.paths("fake").cells
    study_dir = runner.paths("fake").dir
    b_key = key_of(cells, name="b")
    planted = {}
    now = datetime.now()
    for dt in range(-2, 30):        # every name the run could pick in the next half minute
        name = f"t.bak-{(now + timedelta(seconds=dt)).strftime('%Y%m%d-%H%M%S')}"
        d = study_dir.parent / name / "cells"
        d.mkdir(parents=True)
        (d / b_key).write_text('{"planted": true}')
        (d / "MANIFEST.sha256").write_text("planted\n")
        planted[name] = snapshot(d)
    original_b = (cells / b_key).read_bytes()
    rc = runner.main("--cells-only", "--fresh", "--only", "fake", "--where", "name=b")
    for name, files in planted.items():
        d = study_dir.parent / name / "cells"
        assert snapshot(d) == files and (d / "MANIFEST.sha256").read_text() == "planted\n", name
    if rc == 0:
        new = [b for b in runner.backups("fake") if b.name not in planted]
        assert len(new) == 1 and snapshot(new[0] / "cells") == {b_key: original_b}
    else:
        assert (cells / b_key).read_bytes() == original_b


def test_hand_edited_cells_stay_flagged_after_a_fresh_move(runner):
    """README: the MANIFEST "is written with every cell, so an edited ... cell is named", and the backup keeps "the
    manifest lines they had". A selected cell edited by hand before --fresh --where moves with its old line (so it
    is flagged there, never certified); an edited cell outside the selection is recomputed or still flagged, never
    certified in place."""
    compute_all(runner)
    cells = runner.paths("fake").cells
    before = snapshot(cells)
    b, a0 = cells / key_of(cells, name="b"), cells / key_of(cells, name="a0")
    for p in (b, a0):
        p.write_text(json.dumps(_bumped(json.loads(p.read_text()))))
    edited_a0 = a0.read_bytes()
    rc = runner.main("--cells-only", "--fresh", "--only", "fake", "--where", "name=b")
    for bak in runner.backups("fake"):
        v = manifest.verify(bak / "cells")
        assert b.name in v["changed"] + v["unlisted"], ("the edited cell is certified in the backup", v)
    live = manifest.verify(cells)
    if not a0.exists():     # taken out of the store (quarantine): kept, to be recomputed by a later run
        kept = [p.read_bytes() for p in runner.paths("fake").dir.rglob("*") if p.is_file() and "quarantine" in p.parts]
        assert edited_a0 in kept
    elif a0.read_bytes() == edited_a0:
        assert a0.name in live["changed"] + live["unlisted"], ("the edited a0 is certified in place", live)
    else:
        assert value(a0) == 1.0, "recomputed"
    if rc == 0:
        assert value(b) == value(cells / key_of(cells, name="a1")) + value(cells / key_of(cells, name="a2"))


def _bumped(data):
    if isinstance(data, dict):
        return {k: (v + 1000 if k == "value" and isinstance(v, (int, float)) else _bumped(v)) for k, v in data.items()}
    return data


def test_a_missing_manifest_does_not_let_a_fresh_move_certify_cells(runner, capsys):
    """README: each cells/ folder has a MANIFEST.sha256 "so an edited, swapped or copied-in cell is named (a run
    recomputes it, a render refuses)"; cells without lines are recorded by `python -m
    headprune_utils.store.manifest`, "which refuses a cell whose content changed". With the manifest lost and a0
    edited, --fresh --where name=b must not end with the edited a0 certified, nor the moved b certified in a
    backup that never had its line."""
    compute_all(runner)
    cells = runner.paths("fake").cells
    (cells / "MANIFEST.sha256").unlink()
    a0 = cells / key_of(cells, name="a0")
    a0.write_text(json.dumps(_bumped(json.loads(a0.read_text()))))
    edited = a0.read_bytes()
    rc = runner.main("--cells-only", "--fresh", "--only", "fake", "--where", "name=b")
    captured = capsys.readouterr()
    no_traceback(captured)
    if a0.exists() and a0.read_bytes() == edited:
        v = manifest.verify(cells)
        assert a0.name in v["unlisted"] + v["changed"] or v["damaged"], v
    for bak in runner.backups("fake"):
        v = manifest.verify(bak / "cells")
        assert v != CLEAN, ("a backup certifies cells that had no manifest line", v)
    assert rc in (0, 2)


def test_a_half_written_manifest_is_reported_not_a_crash(runner, capsys):
    """README: "Cells are checked on every read: each cells/ folder has a MANIFEST.sha256 (`sha256sum -c` format)".
    A manifest cut off mid-line (a crash while writing it) before --fresh --where: the run either recovers or stops
    with a message, never a traceback, and never leaves a moved cell unverifiable and lost."""
    compute_all(runner)
    cells = runner.paths("fake").cells
    m = cells / "MANIFEST.sha256"
    text = m.read_bytes()
    m.write_bytes(text[: len(text) - 30])
    b_before = (cells / key_of(cells, name="b")).read_bytes()
    rc = runner.main("--cells-only", "--fresh", "--only", "fake", "--where", "name=b")
    captured = capsys.readouterr()
    no_traceback(captured)
    assert rc in (0, 2)
    kept = [snapshot(bak / "cells") for bak in runner.backups("fake")] + [snapshot(cells)]
    assert any(b_before in s.values() for s in kept), "the original b is kept somewhere"


def test_a_half_written_cell_the_selection_requires_is_quarantined_and_recomputed(runner):
    """README: "A cell file that cannot be read is moved to `quarantine/` and recomputed", and `--where` computes
    the selected cells "and the cells they require". b requires a1; a1 cut off mid-write: `--cells-only --fresh
    --where name=b` recomputes a1 and b, keeps the broken bytes (quarantine or backup), and ends consistent."""
    compute_all(runner)
    cells = runner.paths("fake").cells
    a1 = cells / key_of(cells, name="a1")
    raw = a1.read_bytes()
    a1.write_bytes(raw[: len(raw) // 2])
    assert runner.main("--cells-only", "--fresh", "--only", "fake", "--where", "name=b") == 0
    assert value(cells / key_of(cells, name="b")) == value(a1) + value(cells / key_of(cells, name="a2"))
    assert value(a1) == 4.0
    assert manifest.verify(cells) == CLEAN
    keep = [p.read_bytes() for p in runner.paths("fake").dir.rglob("*") if p.is_file() and "quarantine" in p.parts]
    keep += [p.read_bytes() for bak in runner.backups("fake") for p in (bak / "cells").glob("*.json")]
    assert raw[: len(raw) // 2] in keep


def test_a_failed_recomputation_after_the_move_loses_nothing(runner, capsys):
    """README: --fresh moves results aside "keeping them"; a cell that fails "is reported by key ... the rest are
    stored (rerun to retry)". b moved aside, then its recomputation fails: b is named, the backup keeps the old b
    verifiable, the live manifest names no file that is gone, and a rerun stores b."""
    compute_all(runner)
    cells = runner.paths("fake").cells
    b_key = key_of(cells, name="b")
    old_b = (cells / b_key).read_bytes()
    runner.profile("fake: {fail: [b]}\nsliced: {}\n")
    rc = runner.main("--cells-only", "--fresh", "--only", "fake", "--where", "name=b")
    captured = capsys.readouterr()
    assert rc != 0 and "b" in captured.err
    (bak,) = runner.backups("fake")
    assert snapshot(bak / "cells") == {b_key: old_b} and manifest.verify(bak / "cells") == CLEAN
    assert manifest.verify(cells) == CLEAN
    runner.profile("fake: {}\nsliced: {}\n")
    assert runner.main("--cells-only", "--only", "fake", "--where", "name=b") == 0
    assert (cells / b_key).exists() and manifest.verify(cells) == CLEAN


def test_fresh_where_without_cells_only_is_refused_and_moves_nothing(runner, capsys):
    """README: the slice recipe is `--cells-only --fresh --where ...`; `--where` goes with `--cells-only` (or
    `--from-cells`). `--fresh --where` alone stops before moving anything."""
    compute_all(runner)
    before = snapshot(runner.paths("fake").cells)
    rc = runner.main("--fresh", "--only", "fake", "--where", "name=b")
    assert rc == 2 and "--where" in capsys.readouterr().err
    assert not runner.backups("fake") and snapshot(runner.paths("fake").cells) == before


@pytest.mark.parametrize("where", [[], ["--where", "name=b"]])
def test_fresh_with_from_cells_is_refused_and_moves_nothing(runner, capsys, where):
    """README: `--from-cells` renders "from the stored cells ..., computing nothing"; `--fresh` moves stored cells
    aside. Together they would render from nothing: refused before anything moves."""
    compute_all(runner)
    before = snapshot(runner.paths("fake").cells)
    rc = runner.main("--from-cells", "--fresh", "--only", "fake", *where)
    assert rc == 2 and "--from-cells" in capsys.readouterr().err
    assert not runner.backups("fake") and snapshot(runner.paths("fake").cells) == before


def test_fresh_where_still_stops_on_stale_results_of_another_slice(runner, capsys):
    """README: "Results made with other parameters are never mixed in or overwritten: the run stops and names the
    parameters that changed". With the sliced study's scale changed, moving one slice cannot make the others
    current: refused, scale named, nothing moved."""
    compute_all(runner)
    before = snapshot(runner.paths("sliced").cells)
    runner.profile("fake: {}\nsliced: {scale: 2.0}\n")
    rc = runner.main("--cells-only", "--fresh", "--only", "sliced", "--where", "task=SST-2", "seed=0")
    err = capsys.readouterr().err
    assert rc == 2 and "scale" in err
    assert not runner.backups("sliced") and snapshot(runner.paths("sliced").cells) == before


def test_cells_only_where_on_stale_results_stops_naming_the_parameter(runner, capsys):
    """README: stale results stop the run naming what changed, also when only a slice is asked for (a new slice
    must not be mixed into cells of other parameters)."""
    run_study(SliceStudy(), SliceConfig(), "t", runner.paths("sliced"), select=lambda a: a["task"] == "SST-2")
    before = snapshot(runner.paths("sliced").cells)
    runner.profile("fake: {}\nsliced: {scale: 3.0}\n")
    rc = runner.main("--cells-only", "--only", "sliced", "--where", "task=CoLA")
    err = capsys.readouterr().err
    assert rc == 2 and "scale: 1.0 -> 3.0" in err
    assert snapshot(runner.paths("sliced").cells) == before


# ------------------------------------------------------------------------------------------- machine kind per slice

OTHER = "cpu: Another CPU [avx512f]"


def _begin_sst2_seed0(runner):
    run_study(SliceStudy(), SliceConfig(), "t", runner.paths("sliced"),
              select=lambda a: a["task"] == "SST-2" and a["seed"] == 0 and a["fraction"] in (0.0, 0.25))


def test_a_slice_begun_on_another_machine_kind_is_refused_before_any_work(runner, capsys, monkeypatch):
    """README: "a run that would add cells to a model's slice whose stored cells name another kind stops before any
    work, naming both kinds". A begun slice (some cells stored) resumed on another kind: stopped, naming both,
    nothing added (however the stop is reported); another slice (not begun) runs there."""
    from headprune_utils.run import execution
    from headprune_utils.store.results import machine_kind

    here = machine_kind("cpu")
    _begin_sst2_seed0(runner)
    before = snapshot(runner.paths("sliced").cells)
    monkeypatch.setattr(execution, "machine_kind", lambda device: OTHER)
    try:
        rc = runner.main("--cells-only", "--only", "sliced", "--where", "task=SST-2", "seed=0")
        text = capsys.readouterr().err
    except Exception as exc:  # noqa: BLE001 -- the substance: stopped, both kinds named
        rc, text = 1, str(exc)
    assert rc != 0 and OTHER in text and here in text and "--fresh --where task=SST-2 seed=0" in text
    assert snapshot(runner.paths("sliced").cells) == before
    assert runner.main("--cells-only", "--only", "sliced", "--where", "task=CoLA", "seed=0") == 0
    assert len(snapshot(runner.paths("sliced").cells)) == len(before) + 4


def test_the_machine_kind_refusal_is_a_clean_error_exit(runner, capsys, monkeypatch):
    """README: the run "stops before any work, naming both kinds", like the runner's other early stops (stale
    results, a busy study), which print one error and exit 2, never a Python traceback."""
    from headprune_utils.run import execution

    _begin_sst2_seed0(runner)
    monkeypatch.setattr(execution, "machine_kind", lambda device: OTHER)
    rc = runner.main("--cells-only", "--only", "sliced", "--where", "task=SST-2", "seed=0")
    assert rc == 2 and OTHER in capsys.readouterr().err


def test_fresh_where_recomputes_a_whole_slice_on_the_new_kind(runner, capsys, monkeypatch):
    """README: "When no machine of that kind is left, `--cells-only --fresh --where task=STS-B seed=1` moves that
    slice's stored cells aside ... and computes the whole slice again here"; --plan-slices then names this kind."""
    from headprune_utils.run import execution

    _begin_sst2_seed0(runner)
    monkeypatch.setattr(execution, "machine_kind", lambda device: OTHER)
    monkeypatch.setattr(cli, "machine_kind", lambda device: OTHER)
    assert runner.main("--cells-only", "--fresh", "--only", "sliced", "--where", "task=SST-2", "seed=0") == 0
    cells = runner.paths("sliced").cells
    assert len(snapshot(cells)) == 4 and len(snapshot(runner.backups("sliced")[0] / "cells")) == 2
    for p in cells.glob("*.json"):
        assert OTHER in p.read_text(), p.name
    capsys.readouterr()
    assert runner.main("--plan", "--plan-slices", "--only", "sliced") == 0
    out = capsys.readouterr().out
    assert "1 of 4 slices complete" in out and "--where task=SST-2 seed=0" not in out, out


def test_fresh_where_on_part_of_a_slice_of_another_kind_is_refused_before_moving(runner, capsys, monkeypatch):
    """README: a run that would add cells to a model's slice whose stored cells name another kind "stops before any
    work, naming both kinds" ("a slice is finished on machines of the kind that began it"). `--fresh --where
    fraction=0.5` on another kind would move part of every slice and recompute it here, mixing two kinds in each:
    refused, and nothing moved (a refusal after the move would leave the slices incomplete)."""
    from headprune_utils.run import execution

    compute_all(runner)
    before = snapshot(runner.paths("sliced").cells)
    monkeypatch.setattr(execution, "machine_kind", lambda device: OTHER)
    try:
        rc = runner.main("--cells-only", "--fresh", "--only", "sliced", "--where", "fraction=0.5")
        err = capsys.readouterr().err
    except Exception as exc:  # noqa: BLE001 -- judged below: what was moved before the stop
        rc, err = 1, str(exc)
    assert rc != 0 and OTHER in err
    assert not runner.backups("sliced"), "moved before refusing"
    assert snapshot(runner.paths("sliced").cells) == before


def test_plan_slices_where_lines_compute_exactly_their_slices(runner, capsys):
    """README: `--plan --plan-slices` lists "the slices not yet complete ... with their stored and planned cells and
    the `--where` that computes each". Each printed line, pasted after `--cells-only`, completes its slice; then
    none is listed."""
    run_study(SliceStudy(), SliceConfig(), "t", runner.paths("sliced"),
              select=lambda a: a["task"] == "CoLA" and a["seed"] == 1 and a["fraction"] == 0.5)
    assert runner.main("--plan", "--plan-slices", "--only", "sliced") == 0
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if "--where" in x]
    assert len(lines) == 4, out
    for line in lines:
        args = line.split("--only", 1)[1].split()
        where = args[args.index("--where") + 1:]
        where = [w for w in where if "=" in w]
        assert runner.main("--cells-only", "--only", "sliced", "--where", *where) == 0, line
        mine = [n for n in snapshot(runner.paths("sliced").cells) if all(w in n.split("__") or
                w in n.removesuffix(".json").split("__") for w in where)]
        assert len(mine) == 4, (line, mine)
    capsys.readouterr()
    assert runner.main("--plan", "--plan-slices", "--only", "sliced") == 0
    assert "4 of 4 slices complete, 16 of 16 cells stored" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- interim renders

def test_interim_render_refuses_a_hand_edited_cell_of_its_selection(runner, capsys):
    """README: an edited cell "is named (a run recomputes it, a render refuses)", and `--from-cells --where` renders
    "from the stored cells of that selection alone ... computing nothing and refusing if one is missing". An edited
    cell in the selection: refused, naming it, before any notebook starts."""
    compute_all(runner)
    cells = runner.paths("sliced").cells
    victim = cells / key_of(cells, task="SST-2", seed=0, fraction=0.5)
    victim.write_text(json.dumps(_bumped(json.loads(victim.read_text()))))
    try:
        rc = runner.main("--from-cells", "--only", "sliced", "--where", "task=SST-2")
    except NotebookStarted:
        pytest.fail("the render started a notebook on an edited cell")
    err = capsys.readouterr().err
    assert rc == 2 and victim.stem in err.replace(".json", ""), err


def test_interim_render_ignores_cells_outside_its_selection(runner, capsys):
    """README: --from-cells --where renders "from the stored cells of that selection alone (and what they
    require)": a missing cell of another slice does not stop an interim render (the --check pass succeeds)."""
    run_study(SliceStudy(), SliceConfig(), "t", runner.paths("sliced"), select=lambda a: a["task"] == "SST-2")
    assert runner.main("--from-cells", "--only", "sliced", "--where", "task=SST-2", "--check") == 0
    assert runner.main("--from-cells", "--only", "sliced", "--where", "task=CoLA", "--check") == 2
    assert "task=CoLA" in capsys.readouterr().err


def test_interim_render_with_a_typo_is_refused(runner, capsys):
    """README: the interim render refuses "if one is missing"; a selection that matches nothing (task=sst-2) is no
    render at all: refused, naming the value, no notebook."""
    compute_all(runner)
    rc = runner.main("--from-cells", "--only", "sliced", "--where", "task=sst-2")
    assert rc == 2 and "sst-2" in capsys.readouterr().err


# --------------------------------------------------------------------------------------- other processes, crashes

DRIVER = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {unit!r})
    from headprune_utils.run import cli, profiles, schedule
    from fake_studies import FakeStudy
    profiles.STUDIES = {{"fake": FakeStudy()}}
    import headprune_utils.studies.config as config
    from pathlib import Path
    config.params_dir = lambda: Path({params!r})
    def no_notebook(*a, **k):
        raise SystemExit("a notebook started")
    schedule.execute_study = no_notebook
    sys.exit(cli.main(sys.argv[1:]))
""")


def start_driver(tmp_path: Path, profile_text: str, *args: str) -> subprocess.Popen:
    params = tmp_path / "params_sub"
    params.mkdir(exist_ok=True)
    (params / "t.yaml").write_text(profile_text)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(unit=str(UNIT), params=str(params)))
    env = {**os.environ, "HEADPRUNE_OUTPUT_DIR": str(tmp_path / "out"), "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, str(script), "--profile", "t", "--no-progress", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def wait_for(pred, proc, timeout=120.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return True
        if proc.poll() is not None:
            return pred()
        time.sleep(0.1)
    return False


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)


def test_fresh_where_while_another_process_computes_the_study_is_refused(runner, tmp_path, capsys):
    """README: "a study's folder takes one run at a time (the second is refused at once, "in use by another
    run")"; "A second runner of the same study and profile stops at once, naming the one that holds it".
    `--fresh --where` while another process computes the study: refused at once, nothing moved under it."""
    cells = runner.paths("fake").cells
    run_study(FakeStudy(), FakeConfig(), "t", runner.paths("fake"), select=lambda a: a["name"] == "a0")
    proc = start_driver(tmp_path, "fake: {delay: 3.0}\n", "--cells-only", "--only", "fake")
    try:
        assert wait_for(lambda: len(list(cells.glob("*.json"))) >= 2, proc), proc.communicate()
        assert proc.poll() is None, "the other run is still computing"
        before = snapshot(cells)
        t0 = time.monotonic()
        rc = runner.main("--cells-only", "--fresh", "--only", "fake", "--where", "name=a0")
        err = capsys.readouterr().err
        assert time.monotonic() - t0 < 20, "refused at once"
        assert rc != 0 and "in use by another run" in err, err
        assert not runner.backups("fake")
        now = snapshot(cells)
        assert all(now[n] == before[n] for n in before), "nothing moved or rewritten"
    finally:
        stop(proc)


def test_a_fresh_run_killed_after_the_move_loses_nothing_and_resumes(runner, tmp_path):
    """README: --fresh "moves earlier results aside, keeping them"; cells are "written atomically"; studies resume.
    A `--cells-only --fresh --where` killed after moving its cells aside, mid-recomputation: the backup keeps
    them, verifiable; the live store has no half-written cell and a consistent manifest; a rerun (without
    --fresh) completes the study; a second --fresh makes a second backup, leaving the first intact."""
    compute_all(runner)
    cells = runner.paths("fake").cells
    before = snapshot(cells)
    proc = start_driver(tmp_path, "fake: {delay: 4.0}\n", "--cells-only", "--fresh", "--only", "fake",
                        "--where", "name=a1", "name=a2", "name=b")
    try:
        assert wait_for(lambda: any(True for _ in runner.paths("fake").dir.parent.glob("t.bak-*/cells/*.json"))
                        and len(list(cells.glob("*.json"))) < len(before), proc), proc.communicate()
        time.sleep(1.0)
        assert proc.poll() is None, "killed mid-recomputation"
    finally:
        stop(proc)
    (bak,) = runner.backups("fake")
    moved = snapshot(bak / "cells")
    assert len(moved) == 3 and all(moved[n] == before[n] for n in moved)
    assert manifest.verify(bak / "cells") == CLEAN
    v = manifest.verify(cells)
    assert v["changed"] == [] and v["damaged"] == [] and v["unlisted"] == [], v
    for p in cells.glob("*.json"):
        json.loads(p.read_text())            # no half-written cell
    assert runner.main("--cells-only", "--only", "fake") == 0
    assert set(snapshot(cells)) == set(before) and manifest.verify(cells) == CLEAN
    assert runner.main("--cells-only", "--fresh", "--only", "fake", "--where", "name=b") == 0
    baks = runner.backups("fake")
    assert len(baks) == 2 and snapshot(bak / "cells") == moved
