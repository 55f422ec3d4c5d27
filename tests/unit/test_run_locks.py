"""Two runs of one study, produced as a user produces them (a second terminal, a slice session beside another,
``--fresh`` while a run renders, a notebook computing in Jupyter): the second is refused in one line naming the
first, before it changes anything; and a run that has nothing to compute writes nothing."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headprune_utils.run import cli, profiles, schedule
from headprune_utils.run.execution import run_study
from headprune_utils.store.paths import StudyPaths

from fake_studies import FakeConfig, FakeStudy, fake_profile

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file locks")


class RunnerState:
    def __init__(self, paths: StudyPaths, rendered: list):
        self.dir, self.cells, self.rendered, self.paths = paths.dir, paths.cells, rendered, paths


@pytest.fixture
def runner(tmp_path, monkeypatch):
    """The runner on the fake study of profile ``t``, its cells stored (but ``a3``); no notebook really starts."""
    params = fake_profile(tmp_path, monkeypatch, {"fake": FakeStudy()})
    rendered = []
    monkeypatch.setattr(schedule, "execute_study", lambda name, *a, **k: rendered.append(name) or 0.0)
    monkeypatch.setattr("headprune_utils.run.pipeline.write_overviews", lambda profile, studies=(): True)
    paths = StudyPaths("fake", "t", staged=False)
    run_study(FakeStudy(), FakeConfig(), "t", paths)
    (paths.cells / "name=a3.json").unlink()
    return RunnerState(paths, rendered)


HOLDER = """
import os, sys, time
from headprune_utils.store.paths import StudyPaths
from headprune_utils.store.results import ResultStore
sys.argv = ["/x/headprune_utils/run/__main__.py"] + sys.argv[2:]
if os.environ["HOLD"] == "run":
    from headprune_utils.run.notebooks import run_lock
lock = (run_lock("fake", "t") if os.environ["HOLD"] == "run" else ResultStore(StudyPaths("fake", "t").cells, "").lock(owner="study fake, profile t"))
with lock:
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def holder():
    """``hold(kind, *argv)``: another process holding the study's run lock (a runner, its command ``argv``) or
    only its study lock (a notebook's kernel computing cells), until the test ends."""
    children = []

    def hold(kind: str, *argv: str) -> subprocess.Popen:
        child = subprocess.Popen([sys.executable, "-c", HOLDER, "x", *argv], env={**os.environ, "HOLD": kind},
                                 stdout=subprocess.PIPE, text=True)
        children.append(child)
        assert child.stdout.readline().strip() == "held"
        return child

    yield hold
    for child in children:
        child.kill()
        child.wait()


def one_line_error(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_second_runner_of_the_same_study_is_refused_naming_the_first(runner, holder, capsys):
    first = holder("run", "--profile", "t", "--only", "fake")
    assert cli.main(["--profile", "t", "--no-progress"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert f"pid {first.pid}" in line and "headprune --profile t --only fake" in line, line
    assert runner.rendered == [], "refused before any work"


def test_fresh_while_another_run_renders_the_study_does_not_move_its_folder(runner, holder, capsys):
    """Between the cells the kernel computes and the swap of its outputs the study lock is free: the run lock
    keeps --fresh from moving the folder out from under the rendering run."""
    holder("run", "--profile", "t")
    assert cli.main(["--profile", "t", "--fresh", "--no-progress"]) == 2
    assert "in use by another run" in one_line_error(capsys.readouterr().err)
    assert runner.dir.is_dir() and not list(runner.dir.parent.glob("t.bak-*")), "the folder stayed"


def test_fresh_while_a_notebook_computes_the_study_does_not_move_its_folder(runner, holder, capsys):
    """A notebook run in Jupyter holds only the study lock while it computes cells into the folder."""
    kernel = holder("study")
    assert cli.main(["--profile", "t", "--fresh", "--no-progress"]) == 1
    line = one_line_error(capsys.readouterr().err)
    assert f"pid {kernel.pid}" in line and "being computed" in line, line
    assert runner.dir.is_dir() and not list(runner.dir.parent.glob("t.bak-*"))


def test_two_slices_of_one_study_side_by_side_the_second_is_refused_naming_the_first(runner, holder, capsys):
    first = holder("run", "--profile", "t", "--only", "fake", "--cells-only", "--where", "name=a0")
    assert cli.main(["--profile", "t", "--only", "fake", "--cells-only", "--where", "name=a3", "--no-progress"]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert f"pid {first.pid}" in line and "--cells-only --where name=a0" in line, line
    assert not (runner.cells / "name=a3.json").exists()


def test_a_slice_while_a_kernel_computes_the_study_is_refused_in_one_line(runner, holder, capsys):
    """What K6-04 met: the second slice ran into the study lock inside the computation and ended in a traceback."""
    kernel = holder("study")
    assert cli.main(["--profile", "t", "--only", "fake", "--cells-only", "--where", "name=a3", "--no-progress"]) == 1
    assert f"pid {kernel.pid}" in one_line_error(capsys.readouterr().err)


def test_fresh_caches_while_another_study_of_the_profile_runs_is_refused(runner, holder, tmp_path, monkeypatch,
                                                                        capsys):
    """--fresh-caches moves the fine-tuned models every study of the profile reads, also one not in --only."""
    other = type("OtherFake", (FakeStudy,), {"name": "other"})()
    monkeypatch.setattr(profiles, "STUDIES", {"fake": FakeStudy(), "other": other})
    (tmp_path / "params" / "t.yaml").write_text("fake: {}\nother: {}\n")
    cache = StudyPaths("fake", "t").finetuned_cache
    cache.mkdir(parents=True)
    first = holder("run", "--profile", "t", "--only", "fake")
    assert cli.main(["--profile", "t", "--only", "other", "--fresh-caches", "--no-progress"]) == 2
    assert f"pid {first.pid}" in one_line_error(capsys.readouterr().err)
    assert cache.is_dir(), "the caches stayed where the running study reads them"


def test_the_runner_leaves_no_lock_file_behind(runner, capsys):
    assert cli.main(["--profile", "t", "--no-progress"]) == 0
    assert runner.rendered == ["fake"]
    assert not list(runner.dir.parent.glob(".*lock*")), "a run lock is removed by its holder"


def test_a_report_folder_that_cannot_be_written_is_one_line_and_exit_1(runner, monkeypatch, capsys):
    """K5-05: a read-only report folder ended a finished run in a traceback."""
    monkeypatch.undo()  # the real write_overviews, with the fake study still in place
    monkeypatch.setattr(profiles, "STUDIES", {"fake": FakeStudy()})
    monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: runner.dir.parents[2] / "params")
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(runner.dir.parents[1]))
    monkeypatch.setattr(schedule, "execute_study", lambda *a, **k: 0.0)
    monkeypatch.setattr("headprune_utils.run.pipeline.write_summary", lambda profile: runner.dir / "s.md")

    def read_only(profiles_):
        raise OSError(30, os.strerror(30), str(runner.dir.parents[1] / "report" / "t"))

    monkeypatch.setattr("headprune_utils.run.pipeline.build_report", read_only)
    assert cli.main(["--profile", "t", "--no-progress"]) == 1
    line = one_line_error(capsys.readouterr().err)
    assert "report was not written" in line and "Read-only file system" in line and "report/t" in line, line


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.mark.parametrize("where", [[], ["--where", "name=a0"], ["--where", "name=b"]])
def test_cells_only_with_nothing_to_compute_writes_nothing_and_says_so(runner, capsys, where):
    """K1-06b: a slice session over a complete slice rewrote run_meta.json, which then misdescribed the notebook
    and tables beside it. (``name=b`` requires a1 and a2: stored too.)"""
    if not where:
        run_study(FakeStudy(), FakeConfig(), "t", runner.paths)  # every cell stored
    before = snapshot(runner.dir.parent)
    time.sleep(0.01)
    assert cli.main(["--profile", "t", "--only", "fake", "--cells-only", "--no-progress", *where]) == 0
    out = capsys.readouterr().out
    assert "nothing computed, nothing written" in out and "no file was written" in out, out
    assert snapshot(runner.dir.parent) == before


def test_cells_only_with_cells_to_compute_still_computes_them(runner, capsys):
    assert cli.main(["--profile", "t", "--only", "fake", "--cells-only", "--no-progress"]) == 0
    assert (runner.cells / "name=a3.json").exists()
    assert "nothing to compute" not in capsys.readouterr().out
