"""The runner's checks before any heavy work: stale results (naming what changed), outputs that cannot be
written, unreadable task data; --check reports them all."""
from __future__ import annotations

import json
import os

import pytest

from headprune_utils.run import cli, pipeline, profiles, schedule
from headprune_utils.run.execution import run_study
from headprune_utils.store.paths import StudyPaths

from fake_studies import FakeConfig, FakeStudy


@pytest.fixture
def fake_runner(tmp_path, monkeypatch):
    params = tmp_path / "params"
    params.mkdir()
    monkeypatch.setattr(profiles, "STUDIES", {"fake": FakeStudy()})
    monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: params)
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setattr(schedule, "execute_study", lambda *a, **k: pytest.fail("no notebook may start"))

    def profile(text: str) -> None:
        (params / "t.yaml").write_text(text)

    return profile


def test_stale_results_stop_the_run_before_any_notebook_naming_the_parameter(fake_runner, tmp_path, capsys):
    run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=tmp_path / "out"))
    fake_runner("fake: {scale: 2.0}\n")
    assert cli.main(["--profile", "t", "--check"]) == 2
    err = capsys.readouterr().err
    assert "fake:" in err and "scale: 1.0 -> 2.0" in err and "--fresh" in err
    assert cli.main(["--profile", "t"]) == 2, "a normal run stops before the notebook too"


def test_check_passes_on_a_clean_tree_and_says_what_it_checked(fake_runner, capsys):
    fake_runner("fake: {}\n")
    assert cli.main(["--profile", "t", "--check"]) == 0
    assert "outputs writable" in capsys.readouterr().out


def test_an_output_root_that_is_a_file_is_reported(fake_runner, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("x")
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(blocker / "out"))
    fake_runner("fake: {}\n")
    assert cli.main(["--profile", "t"]) == 2
    assert "cannot be written" in capsys.readouterr().err


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes through permission bits")
def test_read_only_outputs_are_reported_before_heavy_work(fake_runner, tmp_path, capsys):
    ro = tmp_path / "out"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        fake_runner("fake: {}\n")
        assert cli.main(["--profile", "t"]) == 2
        assert "cannot be written" in capsys.readouterr().err
    finally:
        ro.chmod(0o755)


def test_check_reads_the_task_data(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """A GLUE study's --check parses every local task split: a corrupt file is named before any training."""
    import shutil

    from headprune_utils.studies import STUDIES

    root = tmp_path / "data" / "glue" / "SST-2"
    root.mkdir(parents=True)
    (root / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"s {i}\t{i % 2}\n" for i in range(50)))
    (root / "dev.tsv").write_bytes(b"sentence\tlabel\n\xff\xfe broken\t1\n")
    params = tmp_path / "params"
    params.mkdir()
    (params / "t.yaml").write_text(
        f"random_pruning: {{model: {tiny_model_dir}, tasks: [SST-2], data_dir: {tmp_path / 'data'}, allow_hub: false}}\n")
    monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: params)
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setattr(profiles, "STUDIES", {"random_pruning": STUDIES["random_pruning"]})
    assert cli.main(["--profile", "t", "--check"]) == 2
    err = capsys.readouterr().err
    assert "SST-2/dev" in err and "not UTF-8" in err
    shutil.rmtree(tmp_path / "data")


def test_progress_line_and_verdict_summary(tmp_path, monkeypatch, data_root):
    """Side by side, each running study gets a line with its stored/planned cells and an estimate; the batch
    ends with each study's verdict counts and where its outputs are."""
    import pandas as pd

    from headprune_utils.studies.config import load_profile, validate
    from headprune_utils.store.paths import StudyPaths
    from headprune_utils.store.results import cell_key
    from headprune_utils.studies import STUDIES

    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "outputs"))
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    monkeypatch.setattr(schedule, "_PLANNED", {})
    name = "random_pruning"
    overrides = load_profile("smoke")[name]
    cells = STUDIES[name].plan(validate(STUDIES[name].Config, overrides))
    cdir = StudyPaths(name, "smoke", staged=False).cells
    cdir.mkdir(parents=True)
    (cdir / f"{cell_key(dict(cells[0].axes))}.json").write_text("{}")
    first = schedule.progress_line(name, "smoke", overrides, 10.0)
    assert f"1/{len(cells)} cells stored" in first and "left" not in first, "no estimate before a new cell"
    for c in cells[1:3]:
        (cdir / f"{cell_key(dict(c.axes))}.json").write_text("{}")
    line = schedule.progress_line(name, "smoke", overrides, 60.0)
    assert f"3/{len(cells)} cells stored" in line and "1 min 00 s elapsed" in line and "left" in line
    # the estimate weighs cells by their planned cost: 60 s for cells 1-2's cost, times the cost still missing
    cost = [float(c.cost.flops) for c in cells]
    assert len(set(cost)) > 1, "the smoke plan's cells differ in cost"
    want = 60.0 * sum(cost[3:]) / sum(cost[1:3])
    assert f"about {int(want // 60)} min {int(want % 60):02d} s left" in line, (line, want)
    tables = StudyPaths(name, "smoke", staged=False).tables
    tables.mkdir(parents=True)
    pd.DataFrame({"analysis": ["primary", "primary", "sensitivity"],
                  "verdict": ["supported", "not testable", "supported"]}).to_csv(tables / "verdicts.csv", index=False)
    text = pipeline.verdict_summary({name: overrides, "compensation": {}}, "smoke")
    assert "random_pruning: 1 supported, 1 not testable" in text and "compensation: no verdict table" in text


def test_kernels_talk_over_ipc_in_the_temporary_folder():
    """No 'running over TCP without encryption' warning in the terminal: the runner's kernels use IPC sockets,
    whose files live in the temporary folder (never the checkout)."""
    import tempfile

    from headprune_utils.run.notebooks import ipc_kernel_manager

    km = ipc_kernel_manager()(kernel_name="python3")
    assert km.transport == "ipc" and km.ip.startswith(tempfile.gettempdir())
    assert ipc_kernel_manager()(kernel_name="python3").ip != km.ip


def test_from_cells_stops_before_any_work_when_a_cell_is_missing(fake_runner, tmp_path, capsys):
    """--from-cells renders stored cells only: a missing cell stops the run at once, naming the study and how many."""
    fake_runner("fake: {}\n")
    assert cli.main(["--profile", "t", "--from-cells"]) == 2
    err = capsys.readouterr().err
    assert "fake:" in err and "planned cells not stored" in err and "--cells-only" in err
    # every cell stored: the check passes (with --check, nothing else runs)
    run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=tmp_path / "out"))
    assert profiles.missing_cells({"fake": {}}, "t") == {}
    assert cli.main(["--profile", "t", "--from-cells", "--check"]) == 0
    # one cell file gone: it is named again
    cells = StudyPaths("fake", "t", root=tmp_path / "out").cells
    victim = sorted(cells.glob("*.json"))[0]
    victim.unlink()
    gaps = profiles.missing_cells({"fake": {}}, "t")
    assert gaps["fake"][0] == 1 and gaps["fake"][2] == victim.stem
    assert cli.main(["--profile", "t", "--from-cells", "--cells-only"]) == 2  # not a compute flag


def test_cells_only_ignores_a_selection_left_in_the_shell(fake_runner, tmp_path, monkeypatch):
    """HEADPRUNE_SELECT set by hand (or left over) does not turn --cells-only into an interim run: every cell is
    computed and the run record is a full one."""
    from headprune_utils.run.execution import SELECT_ENV

    fake_runner("fake: {}\n")
    monkeypatch.setenv(SELECT_ENV, '{"name": ["a0"]}')
    assert cli.main(["--profile", "t", "--cells-only", "--no-progress"]) == 0
    where = StudyPaths("fake", "t", root=tmp_path / "out")
    assert len(list(where.cells.glob("*.json"))) == 5
    assert "interim" not in json.loads(where.meta.read_text())


def test_an_interim_render_checks_only_its_selection_and_names_what_it_lacks(fake_runner, tmp_path, capsys):
    """--from-cells --where: the selected cells (and what they require) must be stored, the others need not be;
    a gap in the selection is named with the --where that computes it."""
    fake_runner("fake: {}\n")
    run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=tmp_path / "out"),
              select=lambda axes: axes["name"] in ("a0", "a1"))
    assert profiles.missing_cells({"fake": {}}, "t", {"name": {"a0"}}) == {}
    assert cli.main(["--profile", "t", "--from-cells", "--where", "name=a0", "--check"]) == 0
    gaps = profiles.missing_cells({"fake": {}}, "t", {"name": {"b"}})
    assert gaps["fake"][:2] == (2, 3), "b and what it requires: a1 (stored), a2 and b (not)"
    assert cli.main(["--profile", "t", "--from-cells", "--where", "name=b"]) == 2
    err = capsys.readouterr().err
    assert "fake: 2 of 3 selected cells not stored (e.g. name=a2)" in err and "--where name=b" in err
    assert cli.main(["--profile", "t", "--from-cells", "--where", "name=zz"]) == 2
    assert "no planned cell of fake (t) matches" in capsys.readouterr().err


def test_plan_reports_stored_cells_and_a_projection_from_their_measured_seconds(fake_runner, tmp_path, capsys):
    fake_runner("fake: {}\n")
    assert cli.main(["--profile", "t", "--plan", "--plan-summary"]) == 0
    before = capsys.readouterr().out
    assert "stored" not in before  # nothing measured yet: the estimate only
    run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=tmp_path / "out"))
    assert cli.main(["--profile", "t", "--plan", "--plan-summary"]) == 0
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if line.startswith("study"))
    assert head.split()[-4:] == ["stored", "took", "(h)", "projected"]
    row = next(line for line in out.splitlines() if line.startswith("fake")).split()
    n_cells, stored, took, projected = int(row[1]), int(row[-3]), float(row[-2]), float(row[-1])
    assert stored == n_cells and took >= 0 and projected >= 0
    assert "measured seconds per estimated FLOP" in out


def test_plan_slices_counts_stored_cells_per_slice(fake_runner, tmp_path, capsys):
    """--plan --plan-slices: a study without task, seed or model-seed axes is one slice; its stored cells are
    counted, and a complete study lists no slice to compute."""
    fake_runner("fake: {}\n")
    assert cli.main(["--profile", "t", "--plan", "--plan-slices"]) == 0
    out = capsys.readouterr().out
    assert "== fake (t): 0 of 1 slices complete, 0 of 5 cells stored" in out and "0/5     --only fake\n" in out
    run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=tmp_path / "out"))
    assert profiles.slice_counts({"fake": {}}, "t") == [("fake", "", 5, 5)]
    assert cli.main(["--profile", "t", "--plan", "--plan-slices"]) == 0
    out = capsys.readouterr().out
    assert "1 of 1 slices complete, 5 of 5 cells stored" in out and "--only" not in out


def test_plan_slices_names_the_machine_kind_a_begun_slice_is_to_be_resumed_on(fake_runner, tmp_path, capsys,
                                                                              monkeypatch):
    """A slice begun shows the kind its stored cells record, and this machine's when it is another (a study split
    into model slices adds that the slice is resumed on the kind that began it, as the run itself refuses
    otherwise: execution.refuse_other_machine; this one is a single slice, whose runs the check leaves alone)."""
    from headprune_utils.store.results import machine_kind

    fake_runner("fake: {}\n")
    run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=tmp_path / "out"),
              select=lambda a: a["name"] == "a0")
    here = machine_kind("cpu")
    assert profiles.begun_on({"fake": {}}, "t") == {("fake", ""): [here]}
    assert cli.main(["--profile", "t", "--plan", "--plan-slices"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "--only fake" in x)
    assert line.endswith(f"begun on {here}"), line
    monkeypatch.setattr(cli, "machine_kind", lambda device: "cpu: Another CPU [avx512f]")
    assert cli.main(["--profile", "t", "--plan", "--plan-slices"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "--only fake" in x)
    assert line.endswith(f"begun on {here}; this machine is cpu: Another CPU [avx512f]"), line
    # a study split by model (its cells lack the seed axis here: one slice still), whose runs refuse another kind
    monkeypatch.setattr(FakeStudy, "model_axes", ("seed",))
    assert cli.main(["--profile", "t", "--plan", "--plan-slices"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "--only fake" in x)
    assert line.endswith(f"begun on {here}; this machine is cpu: Another CPU [avx512f]: resume on the kind that "
                         "began it, or compute it again here (--cells-only --fresh with this --where)"), line


def test_plan_slices_offers_holding_this_machine_to_avx2_where_that_makes_it_the_kind_that_began(
        fake_runner, tmp_path, capsys, monkeypatch):
    """A slice of a model begun on an AVX2 machine, listed on an AVX-512 machine of the same model of CPU: the line
    adds the variables that make this machine compute as the AVX2 kind (store.results.isa_restriction); on
    another model of CPU it does not."""
    from headprune_utils.run import execution

    fake_runner("fake: {}\n")
    monkeypatch.setattr(execution, "machine_kind", lambda device: "cpu: X [sse4_2 avx avx2 fma]")
    run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=tmp_path / "out"),
              select=lambda a: a["name"] == "a0")
    monkeypatch.setattr(FakeStudy, "model_axes", ("seed",))
    monkeypatch.setattr(cli, "machine_kind", lambda device: "cpu: X [sse4_2 avx avx2 fma avx512f avx512_bf16]")
    assert cli.main(["--profile", "t", "--plan", "--plan-slices"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "--only fake" in x)
    assert line.endswith("(--cells-only --fresh with this --where); or resume it here held to AVX2 "
                         "(ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 before the "
                         "command)"), line
    monkeypatch.setattr(cli, "machine_kind", lambda device: "cpu: Y [sse4_2 avx avx2 fma avx512f]")
    assert cli.main(["--profile", "t", "--plan", "--plan-slices"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "--only fake" in x)
    assert line.endswith("(--cells-only --fresh with this --where)"), line


def test_fresh_with_where_moves_the_selected_cells_aside_and_computes_them_again(fake_runner, tmp_path, capsys):
    """--cells-only --fresh --where: only the stored cells the selection matches move aside (to
    ``<profile>.bak-<time>/cells/`` with the manifest lines they had, so they stay verifiable there) and are
    computed again; the other cells, and the cells the selected ones require, stay where they were, byte for byte.
    Before, --fresh moved the whole study away whatever --where said."""
    from headprune_utils.store import manifest

    fake_runner("fake: {}\n")
    study_dir = StudyPaths("fake", "t", root=tmp_path / "out")
    run_study(FakeStudy(), FakeConfig(), "t", study_dir)
    before = {p.name: p.read_bytes() for p in study_dir.cells.glob("*.json")}
    b_key = next(n for n in before if "b" in n.split("name=")[-1])
    assert cli.main(["--profile", "t", "--cells-only", "--fresh", "--where", "name=b", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "fake: moved the 1 stored cell(s) that --where name=b selects to " in out
    assert "(the study's other cells stay)" in out
    backups = list(study_dir.dir.parent.glob("t.bak-*"))
    assert len(backups) == 1 and sorted(p.name for p in (backups[0] / "cells").glob("*.json")) == [b_key]
    assert (backups[0] / "cells" / b_key).read_bytes() == before[b_key], "moved as it was"
    assert manifest.verify(backups[0] / "cells") == {"changed": [], "unlisted": [], "gone": [], "damaged": []}
    after = {p.name: p.read_bytes() for p in study_dir.cells.glob("*.json")}
    assert set(after) == set(before), "the selected cell was computed again"
    assert all(after[n] == before[n] for n in before if n != b_key), "the others were not touched"
    assert manifest.verify(study_dir.cells) == {"changed": [], "unlisted": [], "gone": [], "damaged": []}
    # a selection with nothing stored moves nothing and makes no backup folder
    for p in study_dir.cells.glob("*name=a3*.json"):
        p.unlink()
    assert manifest.record(study_dir.cells)[1] == []
    assert cli.main(["--profile", "t", "--cells-only", "--fresh", "--where", "name=a3", "--no-progress"]) == 0
    assert "fake: no stored cell matches --where name=a3; nothing moved" in capsys.readouterr().out
    assert len(list(study_dir.dir.parent.glob("t.bak-*"))) == 1


def test_fresh_with_where_still_refuses_stored_cells_of_other_parameters(fake_runner, tmp_path, capsys):
    """Moving one slice aside cannot make a study of changed parameters consistent (the other slices stay): the
    stale-results check still stops the run, and its advice names --fresh without --where."""
    run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=tmp_path / "out"))
    fake_runner("fake: {scale: 2.0}\n")
    assert cli.main(["--profile", "t", "--cells-only", "--fresh", "--where", "name=b", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "scale: 1.0 -> 2.0" in err and "(--fresh without --where moves the earlier results aside" in err
    assert not list((tmp_path / "out" / "fake").glob("t.bak-*")), "nothing moved"


def test_plan_slices_judges_this_machine_by_the_device_the_study_names(fake_runner, tmp_path, capsys, monkeypatch):
    """The run's own check compares kinds on the device the study's parameters name, so --plan-slices does too: a
    study pinned to ``cpu`` on a machine with a GPU is judged by the CPU (before, by the ``auto`` device)."""
    from headprune_utils.store.results import machine_kind

    fake_runner("fake: {device: cpu}\n")
    run_study(FakeStudy(), FakeConfig(device="cpu"), "t", StudyPaths("fake", "t", root=tmp_path / "out"),
              select=lambda a: a["name"] == "a0")
    monkeypatch.setattr(FakeStudy, "model_axes", ("seed",))
    seen = []
    monkeypatch.setattr(cli, "machine_kind", lambda device: seen.append(str(device)) or machine_kind(device))
    monkeypatch.setattr(cli.models, "resolve_device", lambda name: __import__("torch").device(
        "cuda" if name == "auto" else name))
    assert cli.main(["--profile", "t", "--plan", "--plan-slices"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "--only fake" in x)
    assert seen == ["cpu"], seen
    assert line.endswith(f"begun on {machine_kind('cpu')}"), line


class SeededStudy(FakeStudy):
    """The fake study whose a-cells carry a seed and whose b-cell (requiring a1 and a2) does not, like the
    pre-trained encoder's cell of study 6 or a translation model's cell beside its seeded prune cells."""

    def plan(self, cfg):
        from headprune_utils.studies.base import Cell

        cells = FakeStudy.plan(self, cfg)
        seeded = [Cell({**dict(c.axes), "seed": 0}, group=c.group, cost=c.cost) for c in cells[:-1]]
        b = Cell({"name": "b"}, requires=(seeded[1].key, seeded[2].key), cost=cells[-1].cost)
        return seeded + [b]


def test_fresh_with_where_never_moves_a_cell_without_the_axis_nor_one_a_stored_cell_still_needs(
        fake_runner, tmp_path, monkeypatch, capsys):
    """A selector lets a cell without one of its axes through (to compute what a slice needs), but --fresh moves
    only cells that have every selected axis: ``--where seed=0`` never picks the seedless b. And it refuses,
    moving nothing, when a stored cell outside the selection requires one it would move (b requires a1 and a2);
    a selection no stored cell requires moves just that."""
    from headprune_utils.store import manifest

    monkeypatch.setattr(profiles, "STUDIES", {"fake": SeededStudy()})
    fake_runner("fake: {}\n")
    paths = StudyPaths("fake", "t", root=tmp_path / "out")
    run_study(SeededStudy(), FakeConfig(), "t", paths)
    before = {p.name: p.read_bytes() for p in paths.cells.glob("*.json")}
    assert len(before) == 5
    assert cli.main(["--profile", "t", "--cells-only", "--fresh", "--where", "seed=0", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--fresh --where seed=0 would move name=a1__seed=0, which the stored cell name=b requires" in err, err
    assert "nothing was moved" in err
    assert {p.name: p.read_bytes() for p in paths.cells.glob("*.json")} == before
    assert not list(paths.dir.parent.glob("t.bak-*"))
    assert cli.main(["--profile", "t", "--cells-only", "--fresh", "--where", "seed=0", "name=a0", "name=a3",
                     "--no-progress"]) == 0
    backup = next(paths.dir.parent.glob("t.bak-*")) / "cells"
    assert sorted(p.name for p in backup.glob("*.json")) == ["name=a0__seed=0.json", "name=a3__seed=0.json"]
    assert {p.name: p.read_bytes() for p in paths.cells.glob("*.json") if "a0" not in p.name and "a3" not in p.name} \
        == {n: b for n, b in before.items() if "a0" not in n and "a3" not in n}, "the others untouched"
    assert manifest.verify(backup)["changed"] == [] and manifest.verify(paths.cells)["gone"] == []


def test_fresh_with_where_refuses_a_damaged_manifest_and_never_reuses_a_backup_folder(fake_runner, tmp_path,
                                                                                      capsys):
    """A manifest listing a cell twice (or cut short) cannot be carried over faithfully: refused, nothing moved.
    Two runs in the same second get two backup folders (``-2``), never one merged into the other."""
    fake_runner("fake: {}\n")
    paths = StudyPaths("fake", "t", root=tmp_path / "out")
    run_study(FakeStudy(), FakeConfig(), "t", paths)
    mf = paths.cells / "MANIFEST.sha256"
    good = mf.read_text()
    mf.write_text(good + good.splitlines(keepends=True)[0])
    assert cli.main(["--profile", "t", "--cells-only", "--fresh", "--where", "name=a0", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "is damaged" in err and "nothing was moved" in err and (paths.cells / "name=a0.json").exists()
    mf.write_text(good)
    first = pipeline.backup_path(paths.dir)
    first.mkdir()
    second = pipeline.backup_path(paths.dir)
    assert second != first and second.name == first.name + "-2"


def test_the_machine_kind_messages_name_the_whole_command_and_the_slice_as_plan_slices_writes_it():
    """The refusal names the runner's command with the profile and the study, so that following it moves just that
    study's slice of that profile; a seed read back as a float is written as an integer, and the pre-trained
    encoder's cells (no seed) as task=pretrained."""
    from headprune_utils.run.execution import _again_command

    assert _again_command("random_pruning", "standard-next", ["task", "seed"], ("STS-B", 1.0)) == (
        "python -m headprune_utils.run --profile standard-next --only random_pruning --cells-only --fresh --where "
        "task=STS-B seed=1")
    assert _again_command("s", None, ["task", "seed"], ("pretrained", float("nan"))).endswith(
        "--only s --cells-only --fresh --where task=pretrained")


def test_where_compares_numeric_axes_as_numbers_to_15_digits_and_text_axes_as_written():
    """``fraction=0.50`` selects 0.5 and ``seed=1.0`` seed 1, but numbers are not rounded to 6 digits (``%g``
    would make 1000001 and 1000000 one seed, and ``--fresh --where`` would move both), and a text axis is compared
    as written (a task named "1e3" is not 1000)."""
    from headprune_utils.run.profiles import parse_where, selector

    import numpy as np

    sel = selector(parse_where(["fraction=0.50", "seed=1000001", "task=1e3"]))
    assert sel({"fraction": 0.5, "seed": 1000001, "task": "1e3"})
    assert sel({"fraction": 0.5, "seed": np.int64(1000001), "task": "1e3"}), "a numpy integer is a number"
    assert not sel({"fraction": 0.5, "seed": 1000000, "task": "1e3"}), "1000001 is not 1000000"
    assert not sel({"fraction": 0.5, "seed": 1000001, "task": "1000"}), "text compared as written"
    assert not sel({"fraction": 0.1234567, "seed": 1000001, "task": "1e3"})
    assert selector(parse_where(["seed=1.0"]))({"seed": 1}) and not selector(parse_where(["seed=1.5"]))({"seed": 1})
    assert not selector(parse_where(["seed=nan"]))({"seed": float("nan")}), "nan equals nothing"
