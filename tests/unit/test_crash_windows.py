"""Crash windows of the runner, produced the way a fault produces them: a run killed (by a fault injected between
the steps of the swap of its outputs, and by a real SIGKILL), a notebook kernel killed as the out-of-memory killer
kills it, a full disk (a write to /dev/full, and the error as a kernel raises it), a file-size limit
(RLIMIT_FSIZE in a subprocess). Each must end with the folder of one run (completed or rolled back on the next
start, named by ``--check`` until then) and one line naming the cause."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest

from headprune_utils.run import cli, notebooks, schedule
from headprune_utils.run.execution import run_study
from headprune_utils.store.paths import StudyPaths

from fake_studies import FakeConfig, FakeStudy, fake_profile

pytestmark = pytest.mark.skipif(os.name != "posix", reason="signals, /dev/full, resource limits")

# every step of a swap, in order (a fault after the last one leaves nothing to complete)
STEPS = ["journal", "set aside figures", "swap in figures", "set aside tables", "swap in tables",
         "set aside metrics.json", "swap in metrics.json", "set aside run_meta.json", "swap in run_meta.json",
         "notebook", "remove the replaced outputs", "remove the staging folder", "remove the journal"]


class Fault(Exception):
    pass


def a_notebook(marker: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    nb.cells = [nbformat.v4.new_markdown_cell("# fake"), nbformat.v4.new_code_cell(f"print({marker!r})")]
    nb.cells[0].id, nb.cells[1].id = "title", "code"  # as a notebook's own cells: the same at every run
    return nb


@pytest.fixture
def runner(tmp_path, monkeypatch):
    """The runner on the fake study of profile ``t`` (params/t.yaml in a temporary folder, outputs in another):
    every cell stored, and a study folder holding an earlier run's outputs; no notebook may start."""
    params = fake_profile(tmp_path, monkeypatch, {"fake": FakeStudy()})
    monkeypatch.setattr(schedule, "execute_study", lambda *a, **k: pytest.fail("no notebook may start"))
    paths = StudyPaths("fake", "t", staged=True)
    run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", staged=False))
    write_run(paths.dir, "old")
    nbformat.write(a_notebook("old"), paths.notebook)
    return paths


def write_run(folder: Path, which: str) -> None:
    (folder / "figures").mkdir(parents=True, exist_ok=True)
    (folder / "tables").mkdir(exist_ok=True)
    (folder / "figures" / f"{which}.png").write_text(which)  # each run its own figure: no stale one may survive
    (folder / "tables" / "verdicts-like.csv").write_text(f"run\n{which}\n")
    (folder / "metrics.json").write_text(json.dumps({"run": which}))
    (folder / "run_meta.json").write_text(json.dumps({"run": which}))


def stage_new_run(paths: StudyPaths) -> Path:
    write_run(paths.staging, "new")
    running = paths.notebook.with_suffix(".running.ipynb")
    nbformat.write(a_notebook("new"), running)
    return running


def state(paths: StudyPaths) -> dict:
    """Which run each output of the study folder is from, and what else lies there."""
    d = paths.dir
    return {"figures": sorted(p.name for p in (d / "figures").iterdir()) if (d / "figures").is_dir() else None,
            "tables": (d / "tables" / "verdicts-like.csv").read_text().split()[-1] if (d / "tables").is_dir() else None,
            "metrics": json.loads((d / "metrics.json").read_text())["run"] if (d / "metrics.json").exists() else None,
            "meta": json.loads((d / "run_meta.json").read_text())["run"] if (d / "run_meta.json").exists() else None,
            "notebook": "new" if "'new'" in paths.notebook.read_text() else "old",
            "leftovers": sorted(p.name for p in d.iterdir() if p.name.startswith(".") and p.name != ".lock"
                                or p.name.endswith((".running.ipynb", ".failed.ipynb"))),
            "staging": paths.staging.exists()}


NEW = {"figures": ["new.png"], "tables": "new", "metrics": "new", "meta": "new", "notebook": "new",
       "leftovers": [], "staging": False}
OLD = {**NEW, "figures": ["old.png"], "tables": "old", "metrics": "old", "meta": "old", "notebook": "old"}


def test_the_swap_takes_these_steps(runner, monkeypatch):
    done = []
    monkeypatch.setattr(notebooks, "_SWAP_STEP", done.append)
    notebooks.swap_in(runner, stage_new_run(runner))
    assert done == STEPS
    assert state(runner) == NEW


@pytest.mark.parametrize("step", STEPS[:-1])
def test_a_run_killed_at_any_step_of_the_swap_is_named_by_check_and_completed_by_the_next_start(
        runner, monkeypatch, capsys, step):
    def fault(at):
        if at == step:
            raise Fault(at)

    monkeypatch.setattr(notebooks, "_SWAP_STEP", fault)
    with pytest.raises(Fault):
        notebooks.swap_in(runner, stage_new_run(runner))
    monkeypatch.setattr(notebooks, "_SWAP_STEP", None)
    assert state(runner) not in (NEW, OLD) or step.startswith("remove"), "a half swap, as a kill leaves it"
    capsys.readouterr()
    assert cli.main(["--profile", "t", "--check"]) == 2, "--check may not call a half-swapped folder valid"
    err = capsys.readouterr().err
    assert "swap of a run's outputs into the folder was interrupted" in err and "out/fake/t" in err, err
    if step.startswith("set aside "):  # the earlier item is out of the folder, the new one not yet in
        item = step.removeprefix("set aside ")
        assert f"not yet replaced: {item}" in err, err
        assert f"still the earlier run's: {item}" not in err and f", {item}" not in err.split("still")[1], err
    # the next start (here one that has nothing to compute) completes the swap first
    assert cli.main(["--profile", "t", "--cells-only", "--no-progress"]) == 0
    assert "completed the interrupted swap" in capsys.readouterr().out
    assert state(runner) == NEW
    assert cli.main(["--profile", "t", "--check"]) == 0


def test_a_half_swap_whose_staged_outputs_are_gone_is_rolled_back(runner, monkeypatch, capsys):
    def fault(at):
        if at == "swap in tables":
            raise Fault(at)

    monkeypatch.setattr(notebooks, "_SWAP_STEP", fault)
    with pytest.raises(Fault):
        notebooks.swap_in(runner, stage_new_run(runner))
    monkeypatch.setattr(notebooks, "_SWAP_STEP", None)
    shutil.rmtree(runner.staging)  # e.g. a user cleaning up what looked like a leftover
    assert cli.main(["--profile", "t", "--cells-only", "--no-progress"]) == 0
    assert "rolled back" in capsys.readouterr().out
    assert state(runner) == OLD


def test_an_unjournalled_half_swap_is_named_by_check(runner, capsys):
    """What the swap before journalling left when killed: the earlier outputs set aside in .replaced-<pid>/."""
    (runner.dir / ".replaced-4242").mkdir()
    (runner.dir / "tables").rename(runner.dir / ".replaced-4242" / "tables")
    assert cli.main(["--profile", "t", "--check"]) == 2
    assert ".replaced-4242" in capsys.readouterr().err
    notebooks.swap_in(runner, stage_new_run(runner))  # the next render replaces every output and clears it
    assert state(runner) == NEW
    assert cli.main(["--profile", "t", "--check"]) == 0


CHILD_SWAP = """
import os, sys, time
from pathlib import Path
from headprune_utils.run import notebooks
from headprune_utils.store.paths import StudyPaths
def pause(at):
    if at == "swap in tables":
        Path(sys.argv[1]).write_text("in the swap")
        time.sleep(120)
notebooks._SWAP_STEP = pause
paths = StudyPaths("fake", "t", staged=True)
notebooks.swap_in(paths, paths.notebook.with_suffix(".running.ipynb"))
"""


def test_a_real_sigkill_during_the_swap_is_completed_by_the_next_start(runner, tmp_path, capsys):
    stage_new_run(runner)
    marker = tmp_path / "marker"
    child = subprocess.Popen([sys.executable, "-c", CHILD_SWAP, str(marker)], env=dict(os.environ))
    try:
        deadline = time.time() + 120
        while not marker.exists() and child.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert marker.exists(), "the child reached the swap"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    half = state(runner)
    assert half["tables"] == "new" and half["metrics"] == "old" and half["notebook"] == "old", "killed half way"
    assert cli.main(["--profile", "t", "--check"]) == 2
    assert "interrupted" in capsys.readouterr().err
    assert cli.main(["--profile", "t", "--cells-only", "--no-progress"]) == 0
    assert state(runner) == NEW


# ------------------------------------------------------------------------------------------ a notebook's kernel

@pytest.fixture
def notebook_study(runner, tmp_path, monkeypatch):
    """``write(code)``: the fake study's notebook (a parameters cell, then ``code``), run by execute_study."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    monkeypatch.setattr(notebooks, "notebooks_dir", lambda: folder)
    monkeypatch.setattr(notebooks, "STUDIES", {"fake": FakeStudy()})

    def write(*code: str) -> None:
        nb = a_notebook("new")
        nb.cells.insert(1, nbformat.v4.new_code_cell('profile = "quick"\nprogress = True',
                                                     metadata={"tags": ["parameters"]}))
        nb.cells += [nbformat.v4.new_code_cell(textwrap.dedent(c)) for c in code]
        nbformat.write(nb, folder / FakeStudy.notebook)

    return write


WRITE_RUN = """
import json
from headprune_utils.store.paths import StudyPaths
p = StudyPaths("fake", profile)
p.figures.mkdir(parents=True, exist_ok=True); p.tables.mkdir(parents=True, exist_ok=True)
(p.figures / "new.png").write_text("new"); (p.tables / "verdicts-like.csv").write_text("run\\nnew\\n")
p.metrics.write_text(json.dumps({"run": "new"})); p.meta.write_text(json.dumps({"run": "new"}))
"""


def test_a_run_that_reproduces_every_output_changes_nothing_and_keeps_the_record_of_the_run_that_made_them(
        runner):
    """A render of unchanged results leaves git clean: its run_meta.json (this run's clock, revision, machine) is not
    swapped in over identical outputs; the first difference in any output swaps everything in, its record too."""
    assert notebooks.swap_in(runner, stage_new_run(runner))
    assert state(runner) == NEW
    notebook = runner.notebook.read_bytes()
    running = stage_new_run(runner)
    (runner.staging / "run_meta.json").write_text(json.dumps({"run": "newer"}))  # its own record, same outputs
    assert not notebooks.swap_in(runner, running)
    assert state(runner) == NEW and runner.notebook.read_bytes() == notebook  # meta still "new"; nothing left
    for change in ("tables", "figures", "metrics", "notebook"):
        running = stage_new_run(runner)
        (runner.staging / "run_meta.json").write_text(json.dumps({"run": change}))
        if change == "tables":
            (runner.staging / "tables" / "verdicts-like.csv").write_text("run\nnew\nand a row\n")
        elif change == "figures":
            (runner.staging / "figures" / "another.png").write_text("new")
        elif change == "metrics":
            (runner.staging / "metrics.json").write_text(json.dumps({"run": "new", "x": 1}))
        else:
            nbformat.write(a_notebook("new, printed otherwise"), running)
        assert notebooks.swap_in(runner, running), change
        assert json.loads((runner.dir / "run_meta.json").read_text())["run"] == change
        assert not runner.staging.exists() and not running.exists()


def test_a_kernel_killed_by_the_oom_killer_keeps_the_failed_notebook_and_names_the_cause(runner, notebook_study):
    notebook_study(WRITE_RUN, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    with pytest.raises(notebooks.StudyFailed) as exc:
        notebooks.execute_study("fake", "t", {}, progress=False)
    first = str(exc.value).splitlines()[0]
    assert "kernel died (killed by SIGKILL" in first and "out-of-memory" in first and "cell 5" in first, first
    failed = runner.notebook.with_suffix(".failed.ipynb")
    assert failed.exists() and "os.kill" in failed.read_text()
    assert not runner.notebook.with_suffix(".running.ipynb").exists()
    assert state(runner)["tables"] == "old" and state(runner)["notebook"] == "old", "the earlier run untouched"


def test_a_full_disk_in_the_kernel_is_named_in_one_line_and_leaves_no_staging(runner, notebook_study):
    notebook_study(WRITE_RUN, "with open('/dev/full', 'w') as f:\n    f.write('x' * 100000)\n    f.flush()")
    with pytest.raises(notebooks.StudyFailed) as exc:
        notebooks.execute_study("fake", "t", {}, progress=False)
    first = str(exc.value).splitlines()[0]
    assert "the disk is full (ENOSPC" in first, first
    assert not runner.staging.exists(), "the partial outputs only took room"
    assert state(runner)["tables"] == "old"


def test_a_full_disk_writing_the_executed_notebook_is_named_and_leaves_nothing(runner, notebook_study):
    notebook_study(WRITE_RUN)
    runner.notebook.with_suffix(".running.ipynb").symlink_to("/dev/full")  # every write there: ENOSPC
    with pytest.raises(notebooks.StudyFailed) as exc:
        notebooks.execute_study("fake", "t", {}, progress=False)
    assert "the disk is full (ENOSPC" in str(exc.value).splitlines()[0]
    assert not runner.staging.exists() and not runner.notebook.with_suffix(".running.ipynb").is_symlink()
    assert state(runner) == OLD


def test_a_full_disk_during_the_swap_is_named_and_the_next_start_completes_it(runner, notebook_study, monkeypatch,
                                                                               capsys):
    notebook_study(WRITE_RUN)

    def full(at):
        if at == "swap in tables":
            raise OSError(28, os.strerror(28), str(runner.dir / "tables"))

    monkeypatch.setattr(notebooks, "_SWAP_STEP", full)
    with pytest.raises(notebooks.StudyFailed) as exc:
        notebooks.execute_study("fake", "t", {}, progress=False)
    assert "the disk is full (ENOSPC" in str(exc.value).splitlines()[0]
    assert notebooks.JOURNAL in str(exc.value)
    monkeypatch.setattr(notebooks, "_SWAP_STEP", None)
    assert cli.main(["--profile", "t", "--cells-only", "--no-progress"]) == 0
    assert state(runner) == NEW


CHILD_FSIZE = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
from headprune_utils.run import notebooks
sys.path.insert(0, sys.argv[2])
from fake_studies import FakeStudy
notebooks.notebooks_dir = lambda: Path(sys.argv[1])
notebooks.STUDIES = {"fake": FakeStudy()}
try:
    notebooks.execute_study("fake", "t", {}, progress=False)
except notebooks.StudyFailed as exc:
    print("FAILED:", exc)
"""


def test_a_file_size_limit_is_named_in_one_line_and_leaves_no_staging(runner, notebook_study, tmp_path):
    notebook_study(WRITE_RUN, "(p.tables / 'big.csv').write_text('x' * (4 << 20))")
    out = subprocess.run([sys.executable, "-c", CHILD_FSIZE, str(tmp_path / "notebooks"), str(Path(__file__).parent)],
                         env=dict(os.environ), capture_output=True, text=True, timeout=300)
    line = next((x for x in out.stdout.splitlines() if x.startswith("FAILED:")), out.stdout + out.stderr)
    assert "file-size limit (EFBIG" in line, line
    assert not runner.staging.exists()
    assert state(runner)["tables"] == "old"


def test_rendering_unchanged_results_twice_writes_the_same_bytes(runner, notebook_study):
    """Papermill's injected cell and the findings cell get ids from their tags, and no clock reading stays in the
    executed notebook: re-rendering leaves git clean."""
    # printed text reaches the notebook in pieces cut by timing: here surely two
    notebook_study(WRITE_RUN, "import time\nprint(sum(range(10)), flush=True)\ntime.sleep(0.5)\nprint('b')")
    notebooks.execute_study("fake", "t", {}, progress=False)
    first = runner.notebook.read_bytes()
    assert nbformat.read(runner.notebook, as_version=4).cells[-1].outputs == [
        {"output_type": "stream", "name": "stdout", "text": "45\nb\n"}], "one piece, as Jupyter shows it"
    meta = runner.dir.joinpath("run_meta.json").read_bytes()
    notebooks.execute_study("fake", "t", {}, progress=False)
    assert runner.notebook.read_bytes() == first
    assert runner.dir.joinpath("run_meta.json").read_bytes() == meta
    nb = nbformat.read(runner.notebook, as_version=4)
    assert "injected-parameters" in [c.id for c in nb.cells]
    assert "start_time" not in json.dumps(nb.metadata) and '"execution"' not in first.decode()
