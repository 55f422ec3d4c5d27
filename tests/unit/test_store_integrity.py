"""Stored results as a user or a fault leaves them: a score edited by hand, a finite but absurd score, a mask that
no longer matches its counts, a cell copied in from another profile, two cells swapped, a manifest truncated or
deleted, the study's lock file removed under a running study. Each case works on copies of committed cells (or
cells written by the store) and does to them what the user or the fault would."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from headprune_utils.store.paths import project_root
from headprune_utils.store.results import CorruptCellError, ResultStore, StaleResultsError, StudyBusyError

OUTPUTS = project_root() / "outputs"


def _check(study: str):
    from headprune_utils.studies import STUDIES

    return STUDIES[study].check_record


def committed(study: str, tmp_path: Path, n: int = 3, profile: str = "standard", where=lambda rec: True,
              into: str | None = None) -> tuple[Path, list[Path]]:
    """``n`` committed cells of ``study`` (satisfying ``where``) copied into ``tmp/out/<study>/<into>/cells``."""
    dest = tmp_path / "out" / study / (into or profile) / "cells"
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for p in sorted((OUTPUTS / study / profile / "cells").glob("*.json")):
        if len(out) == n:
            break
        if where(json.loads(p.read_text())):
            shutil.copy(p, dest / p.name)
            out.append(dest / p.name)
    assert len(out) == n, f"the committed {study}/{profile} cells hold {len(out)} such cells"
    return dest, out


def store_of(cells: Path, study: str, read_only: bool = True) -> ResultStore:
    fp = json.loads(next(cells.glob("*.json")).read_text())["fingerprint"]
    return ResultStore(cells, fp, quarantine=not read_only, check=_check(study))


def edit(path: Path, change) -> None:
    rec = json.loads(path.read_text())
    change(rec)
    path.write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")


def record(cells: Path) -> None:
    from headprune_utils.store.manifest import main

    assert main([str(cells)]) == 0


def axes(path: Path) -> dict:
    return json.loads(path.read_text())["cell"]


# -- scores in their metric's range, masks agreeing with their counts ------------------------------------------


@pytest.mark.parametrize("study, where, change, named", [
    # a finite but absurd score (it became infinities in the tables)
    ("random_pruning", lambda r: r["result"]["metric"] == "accuracy",
     lambda r: r["result"].update(score=1e308, accuracy=1e308), r"accuracy = 1e\+308 is outside its range \[0, 1\]"),
    # K3-11: accuracy 2.5 and a mask keeping all 72 heads while n_heads_pruned says 36
    ("random_pruning", lambda r: r["result"]["n_heads_pruned"] == 36 and r["result"]["metric"] == "accuracy",
     lambda r: r["result"].update(mask="/".join(["1" * 12] * 6), accuracy=2.5, score=2.5),
     r"accuracy = 2.5 is outside its range"),
    # the same mask edit alone: the mask and its counts disagree
    ("random_pruning", lambda r: r["result"]["n_heads_pruned"] == 36,
     lambda r: r["result"].update(mask="/".join(["1" * 12] * 6)), r"mask keeps 72 of 72 heads, but n_heads_pruned = 36"),
    # the score edited, its metric's value not
    ("zero_shot_pruning", lambda r: True, lambda r: r["result"].update(score=r["result"]["score"] + 0.05),
     r"score = .* but \w+ = .*the score is its metric's value"),
    # a Matthews correlation below -1 (CoLA)
    ("layer_strategies", lambda r: r["result"]["metric"] == "matthews",
     lambda r: r["result"].update(matthews=-1.5, score=-1.5), r"matthews = -1.5 is outside its range \[-1, 1\]"),
    # the layers a mask touches, edited
    ("layer_strategies", lambda r: r["result"]["n_layers_touched"] == 2,
     lambda r: r["result"].update(n_layers_touched=3), r"n_layers_touched = 3 \(it should be 2\)"),
    # BLEU is in [0, 100]
    ("nmt_heads", lambda r: "bleu" in r["result"], lambda r: r["result"].update(bleu=250.0),
     r"bleu = 250.0 is outside its range \[0, 100\]"),
    # a translation cell's masks and its count of pruned heads by type
    ("nmt_heads", lambda r: "pruned_by_type" in r["result"] and r["result"]["n_heads_pruned"] > 0,
     lambda r: r["result"]["pruned_by_type"].update(enc=5), r"pruned_by_type = .* the masks and their counts disagree"),
    # a loss cannot be negative
    ("redundancy_patterns", lambda r: "loss_last" in r["result"], lambda r: r["result"].update(loss_last=-0.5),
     r"loss_last = -0.5 is outside its range \[0, inf\]"),
    # one of the random masks keeps a different number of heads than the L0 mask it is compared with
    ("specialized_heads_l0", lambda r: r["result"].get("n_kept", 0) > 0,
     lambda r: r["result"]["random_masks"].__setitem__(0, "/".join(["1" * 12] * 6)), r"random_masks\[0\] keeps 72"),
    # a score of a random mask inside a list, out of range
    ("specialized_heads_l0", lambda r: r["result"].get("score_random"),
     lambda r: r["result"]["score_random"].__setitem__(1, 7.0), r"score_random\[1\] = 7.0 is outside its range"),
])
def test_a_result_out_of_its_metric_range_or_contradicting_its_mask_is_named(tmp_path, study, where, change, named):
    """Each study declares the range of its scores and how its masks and counts agree (Study.metric_ranges,
    check_record); every read checks them: the render from cells refuses the cell naming the file and the value,
    a run moves it to quarantine and recomputes it."""
    cells, (path, *_) = committed(study, tmp_path, n=1, where=where)
    edit(path, change)
    with pytest.raises(CorruptCellError, match=named) as info:
        store_of(cells, study).get(axes(path))
    assert path.name in str(info.value)
    run = store_of(cells, study, read_only=False)
    with pytest.warns(Warning, match=named):
        assert not run.has(axes(path)), "a run recomputes it"
    assert not path.exists() and len(run.quarantined) == 1


# -- the manifest of content hashes --------------------------------------------------------------------------


def written(tmp_path: Path, n: int = 3) -> tuple[ResultStore, list[dict]]:
    store = ResultStore(tmp_path / "cells", "fp")
    cells = [{"task": "SST-2", "seed": s} for s in range(n)]
    for c in cells:
        store.put(c, {"score": 0.5 + c["seed"] / 10, "accuracy": 0.5 + c["seed"] / 10, "metric": "accuracy"})
    return store, cells


def test_every_stored_cell_is_in_a_sha256sum_manifest(tmp_path):
    store, cells = written(tmp_path)
    manifest = tmp_path / "cells" / "MANIFEST.sha256"
    lines = manifest.read_text().splitlines()
    assert [line.split("  ")[1] for line in lines] == sorted(store.path(c).name for c in cells)
    if shutil.which("sha256sum"):
        assert subprocess.run(["sha256sum", "-c", "--quiet", manifest.name], cwd=manifest.parent).returncode == 0
    assert not list((tmp_path / "cells").glob(".*.tmp")), "written atomically: no temporary left"


def test_a_crash_between_a_cell_and_its_manifest_line_leaves_it_unlisted_never_changed(tmp_path, monkeypatch):
    """A run killed after writing a cell and before its manifest line: the cell is read (and named as not
    verified), never refused as changed; the next cell stored gets its line as usual."""
    store, cells = written(tmp_path, n=2)
    monkeypatch.setattr(ResultStore, "_set_entry", lambda self, name, sha: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        store.put({"task": "SST-2", "seed": 5}, {"score": 0.5})
    monkeypatch.undo()
    run = ResultStore(tmp_path / "cells", "fp")
    with pytest.warns(Warning, match=r"1 of 3 cell\(s\) cannot be verified .*seed=5__task=SST-2.json"):
        assert run.has({"task": "SST-2", "seed": 5})
    run.put({"task": "SST-2", "seed": 6}, {"score": 0.5})
    assert "seed=6" in (tmp_path / "cells" / "MANIFEST.sha256").read_text()


def test_a_cell_edited_by_hand_within_its_range_is_found_by_its_hash(tmp_path):
    """A score changed from 0.6 to 0.65 in the score and its metric (every other check passes) is what the manifest
    is for: the render from cells refuses it, naming the file and the manifest."""
    store, cells = written(tmp_path)
    path = store.path(cells[1])
    edit(path, lambda r: r["result"].update(score=0.65, accuracy=0.65))
    with pytest.raises(CorruptCellError, match=rf"{path.name} \(its content differs from its line in .*MANIFEST.sha256"):
        ResultStore(tmp_path / "cells", "fp", quarantine=False).get(cells[1])
    run = ResultStore(tmp_path / "cells", "fp")
    with pytest.warns(Warning, match="edited or replaced after it was stored"):
        assert not run.has(cells[1])
    assert path.name not in (tmp_path / "cells" / "MANIFEST.sha256").read_text(), "its line goes with it"
    assert run.has(cells[0]) and run.has(cells[2])


def test_two_cells_swapped_are_both_named(tmp_path):
    store, cells = written(tmp_path)
    a, b = store.path(cells[0]), store.path(cells[1])
    tmp = a.with_suffix(".swap")
    a.rename(tmp), b.rename(a), tmp.rename(b)
    found = ResultStore(tmp_path / "cells", "fp", quarantine=False).check_compatible()
    assert sorted(p.name for p, _ in found) == sorted([a.name, b.name])
    assert all("not the one its file name says" in why and "differs from its line" in why for _, why in found)


def test_a_cell_copied_from_another_profile_is_named_as_such(tmp_path):
    """K3-07: a quick cell copied into standard was reported as 'the code that computes the cells changed', with
    --fresh as advice (which would set aside every good cell). It is now named for what it is."""
    std, _ = written(tmp_path / "out" / "s" / "standard")
    quick = ResultStore(tmp_path / "out" / "s" / "quick" / "cells", "quickfp")
    quick.put({"task": "SST-2", "seed": 7}, {"score": 0.1})
    (tmp_path / "out" / "s" / "quick" / "run_meta.json").write_text(json.dumps({"results_fingerprint": "quickfp"}))
    shutil.copy(quick.path({"task": "SST-2", "seed": 7}), std.dir)
    with pytest.raises(StaleResultsError) as info:
        ResultStore(std.dir, "fp", quarantine=False).check_compatible()
    msg = str(info.value)
    assert "seed=7__task=SST-2.json" in msg and "profile 'quick'" in msg and "copied in" in msg
    assert "--fresh" not in msg and "other parameters" not in msg
    assert info.value.copied_in


def test_a_cell_copied_over_a_cell_of_another_profile_is_named_replaced(tmp_path):
    """K3-08: a cell of another profile copied over one of this folder's, of no known profile: named as replaced
    (its hash) and as not made here."""
    std, cells = written(tmp_path / "out" / "s" / "standard")
    other = ResultStore(tmp_path / "elsewhere" / "cells", "otherfp")
    other.put(cells[0], {"score": 0.1})
    shutil.copy(other.path(cells[0]), std.path(cells[0]))
    with pytest.raises(CorruptCellError, match="edited or replaced after it was stored, by a cell of fingerprint otherfp"):
        ResultStore(std.dir, "fp", quarantine=False).get(cells[0])
    (std.dir / "MANIFEST.sha256").unlink()  # and with its manifest gone too: beside cells of this folder's parameters
    with pytest.warns(Warning, match="cannot be verified"):
        with pytest.raises(StaleResultsError, match=r"not made by a run of this folder.*beside 2 cell\(s\)"):
            ResultStore(std.dir, "fp", quarantine=False).check_compatible()


def test_a_parameter_change_is_still_reported_as_one(tmp_path):
    written(tmp_path)
    with pytest.raises(StaleResultsError, match="made with other parameters") as info:
        ResultStore(tmp_path / "cells", "newfp", quarantine=False).check_compatible()
    assert not info.value.copied_in


def test_a_truncated_manifest_is_named_and_its_surviving_lines_still_verify(tmp_path):
    store, cells = written(tmp_path, n=4)
    manifest = tmp_path / "cells" / "MANIFEST.sha256"
    text = manifest.read_text()
    manifest.write_text(text[: len(text) // 2 + 10])  # cut inside a line
    edit(store.path(cells[0]), lambda r: r["result"].update(score=0.55, accuracy=0.55))
    ro = ResultStore(tmp_path / "cells", "fp", quarantine=False)
    with pytest.warns(Warning, match=r"2 of 4 cell\(s\) cannot be verified \(MANIFEST.sha256: the last line has no newline"):
        assert ro.has(cells[3]), "a cell whose line was cut is read, and named"
    with pytest.raises(CorruptCellError, match="differs from its line"):
        ro.get(cells[0])


def test_a_deleted_manifest_is_named_by_every_read_and_nothing_rewrites_it_silently(tmp_path):
    store, cells = written(tmp_path)
    (tmp_path / "cells" / "MANIFEST.sha256").unlink()
    with pytest.warns(Warning, match=r"3 of 3 cell\(s\) cannot be verified \(it has no MANIFEST.sha256\).*"
                                     r"python -m headprune_utils.store.manifest"):
        assert ResultStore(tmp_path / "cells", "fp", quarantine=False).table(cells).shape[0] == 3
    run = ResultStore(tmp_path / "cells", "fp")
    with pytest.warns(Warning, match="cannot be verified"):
        run.put({"task": "SST-2", "seed": 9}, {"score": 0.5})
    listed = (tmp_path / "cells" / "MANIFEST.sha256").read_text()
    assert "seed=9" in listed and "seed=0" not in listed, "a run lists what it wrote, never what it found"
    with pytest.warns(Warning, match=r"3 of 4 cell\(s\)"):
        ResultStore(tmp_path / "cells", "fp", quarantine=False).has(cells[0])


def test_a_cell_added_by_hand_is_named_and_recorded_only_by_the_command(tmp_path, capsys):
    from headprune_utils.store.manifest import main

    store, cells = written(tmp_path)
    added = {"task": "CoLA", "seed": 0}
    (tmp_path / "cells" / "seed=0__task=CoLA.json").write_text(
        json.dumps({"cell": added, "fingerprint": "fp", "result": {"score": 0.3}}))
    with pytest.warns(Warning, match=r"1 of 4 cell\(s\) cannot be verified .* e.g. seed=0__task=CoLA.json"):
        ResultStore(tmp_path / "cells", "fp", quarantine=False).has(added)
    assert main(["--check", str(tmp_path / "cells")]) == 1
    assert "unlisted 1 (seed=0__task=CoLA.json)" in capsys.readouterr().out
    assert main([str(tmp_path / "cells")]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ResultStore(tmp_path / "cells", "fp", quarantine=False).has(added)
    assert main(["--check", str(tmp_path / "cells")]) == 0


def test_recording_refuses_a_changed_cell_and_writes_nothing(tmp_path, capsys):
    from headprune_utils.store.manifest import main

    store, cells = written(tmp_path)
    manifest = tmp_path / "cells" / "MANIFEST.sha256"
    before = manifest.read_bytes()
    edit(store.path(cells[2]), lambda r: r["result"].update(score=0.9, accuracy=0.9))
    assert main([str(tmp_path / "cells")]) == 1
    assert f"{store.path(cells[2]).name}: its content differs" in capsys.readouterr().err
    assert manifest.read_bytes() == before


def test_a_line_listed_twice_is_damage_not_a_pass(tmp_path):
    store, cells = written(tmp_path)
    manifest = tmp_path / "cells" / "MANIFEST.sha256"
    first = manifest.read_text().splitlines()[0]
    manifest.write_text(manifest.read_text() + "0" * 64 + "  " + first.split("  ")[1] + "\n")
    with pytest.warns(Warning, match="listed twice"):
        with pytest.raises(CorruptCellError, match="differs from its line"):
            ResultStore(tmp_path / "cells", "fp", quarantine=False).get(cells[0])


# -- the study's lock ------------------------------------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from headprune_utils.store.results import ResultStore
    with ResultStore(Path(sys.argv[1]), "fp").lock(owner="the first runner"):
        print("held", flush=True)
        time.sleep(60)
""")

OLD_HOLDER = textwrap.dedent("""
    import fcntl, sys, time
    with open(sys.argv[1] + "/.lock", "a+") as fh:  # what older code locks: the file only
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fh.write("pid 1 (an older runner)"); fh.flush()
        print("held", flush=True)
        time.sleep(60)
""")


def _hold(script: str, arg: Path):
    proc = subprocess.Popen([sys.executable, "-c", script, str(arg)], stdout=subprocess.PIPE, text=True,
                            cwd=project_root())
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.skipif(sys.platform == "win32", reason="no flock")
@pytest.mark.parametrize("fault", ["removed", "replaced"])
def test_the_lock_holds_when_its_file_is_removed_under_a_holder(tmp_path, fault):
    """Deleting (or replacing) .lock while a run holds it let a second runner in. The study folder itself is
    locked: a second process is refused, naming the study."""
    cells = tmp_path / "study" / "prof" / "cells"
    cells.mkdir(parents=True)
    proc = _hold(HOLDER, cells)
    try:
        lock = cells.parent / ".lock"
        lock.unlink()
        if fault == "replaced":
            lock.write_text("")
        with pytest.raises(StudyBusyError, match="is being computed by"):
            with ResultStore(cells, "fp").lock(owner="the second"):
                pytest.fail("a second runner got in")
    finally:
        proc.kill()
        proc.wait()
    with ResultStore(cells, "fp").lock(owner="after"):  # released with its holder
        pass


@pytest.mark.skipif(sys.platform == "win32", reason="no flock")
def test_a_runner_of_older_code_holding_the_lock_file_still_keeps_a_new_one_out(tmp_path):
    cells = tmp_path / "study" / "prof" / "cells"
    cells.mkdir(parents=True)
    proc = _hold(OLD_HOLDER, cells.parent)
    try:
        with pytest.raises(StudyBusyError, match="an older runner"):
            with ResultStore(cells, "fp").lock():
                pytest.fail("got in beside an older runner")
    finally:
        proc.kill()
        proc.wait()


def test_the_lock_is_released_for_the_next_run_in_the_same_process(tmp_path):
    store = ResultStore(tmp_path / "study" / "prof" / "cells", "fp")
    for _ in range(2):
        t0 = time.monotonic()
        with store.lock(owner="me"):
            assert (tmp_path / "study" / "prof" / ".lock").read_text().startswith("pid ")
        assert time.monotonic() - t0 < 5
    assert (tmp_path / "study" / "prof" / ".lock").read_text() == ""


def test_moving_cells_out_keeps_both_folders_verifiable_and_never_replaces_a_file(tmp_path):
    """``ResultStore.move_out`` (``--fresh --where``): the moved cells leave the folder and its manifest, and the
    backup folder lists them with the lines they had (an edited cell stays 'changed' there: moving certifies
    nothing); a file of the same name already in the backup stops it before anything moves; a folder without a
    manifest does not get one."""
    from headprune_utils.store import manifest

    src = tmp_path / "cells"
    store = ResultStore(src, "fp")
    for i in range(4):
        store.put({"name": f"a{i}"}, {"value": float(i)})
    edited = src / "name=a2.json"
    edited.write_text(edited.read_text().replace('"value": 2.0', '"value": 7.0'))
    dest = tmp_path / "bak" / "cells"
    assert store.move_out([{"name": "a1"}, {"name": "a2"}, {"name": "a9"}, {"name": "a1"}], dest) == [
        "name=a1.json", "name=a2.json"]
    assert sorted(p.name for p in src.glob("*.json")) == ["name=a0.json", "name=a3.json"]
    assert manifest.verify(src) == {"changed": [], "unlisted": [], "gone": [], "damaged": []}
    assert manifest.verify(dest) == {"changed": ["name=a2.json"], "unlisted": [], "gone": [], "damaged": []}
    assert store.has({"name": "a0"}) and not store.has({"name": "a1"})
    assert store.move_out([{"name": "a9"}], dest) == [], "nothing stored: nothing moved"
    # a clash: nothing moves
    store.put({"name": "a1"}, {"value": 1.0})
    with pytest.raises(FileExistsError, match=r"already holds name=a1\.json: nothing was moved"):
        store.move_out([{"name": "a0"}, {"name": "a1"}], dest)
    assert sorted(p.name for p in src.glob("*.json")) == ["name=a0.json", "name=a1.json", "name=a3.json"]
    # no manifest: none is made, on either side
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(src / "name=a0.json", bare / "name=a0.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert ResultStore(bare, "fp").move_out([{"name": "a0"}], tmp_path / "bare-bak") == ["name=a0.json"]
    assert not (bare / "MANIFEST.sha256").exists() and not (tmp_path / "bare-bak" / "MANIFEST.sha256").exists()
    assert (tmp_path / "bare-bak" / "name=a0.json").exists()
