"""Faults against the README's promises: what happens when a crash, a full disk, a dead lock holder, a damaged
cache, a half-copied outputs tree or a changed data file meets the runner, the driver and the report.

Each test names, in its docstring, the README sentence it checks. A good tool either stops with a clear message
naming the file or parameter at fault, or recovers (recomputes, resumes) to the result a clean run gives: never a
silently wrong or mixed result, never a half-written file where a result should be.

Two kinds of test:
- the driver (``run_study``) on a tiny study of our own, written on the README's ``Study`` protocol (no model:
  milliseconds per run), for the store's promises (atomic cells, manifests, quarantine, fingerprints, locks);
- the runner (``python -m headprune_utils.run``) on the ``smoke`` profile of ``random_pruning`` (the shortest
  study), the report and the summary, each on a copy of one clean run made once per module.

Every process writes under a pytest tmp folder (``HEADPRUNE_OUTPUT_DIR``), nothing under the checkout; the
subprocesses run niced, with one torch thread, offline.
"""

from __future__ import annotations

import csv
import hashlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("HEADPRUNE_DATA_DIR") or REPO.parent / "shared" / "data")
HAS_DATA = (DATA / "glue" / "SST-2" / "train.tsv").is_file()
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
STUDY, PROFILE = "random_pruning", "smoke"
TOY_PROFILE = "faults"

# two cells of the smoke plan of random_pruning (task SST-2, seed 0, half the heads pruned, zeroed heads)
FTM0 = "ablation=zero__draw=0__fraction=0.5__regime=finetune_then_mask__seed=0__task=SST-2.json"
MTF0 = "ablation=zero__draw=0__fraction=0.5__regime=mask_then_finetune__seed=0__task=SST-2.json"

needs_data = pytest.mark.skipif(not HAS_DATA, reason=f"no GLUE data under {DATA}")
cli = [pytest.mark.smoke, pytest.mark.data, needs_data]


# --------------------------------------------------------------------------------------------- helpers


def _nice():
    try:
        current = os.nice(0)
        if current < 10:
            os.nice(10 - current)
    except OSError:
        pass


def base_env(out: Path, **extra) -> dict:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HEADPRUNE_OUTPUT_DIR=str(out), HEADPRUNE_DATA_DIR=str(DATA),
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
        HF_HUB_DISABLE_PROGRESS_BARS="1", TQDM_DISABLE="1", PYTHONUNBUFFERED="1",
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_py(args, out: Path, timeout=300, env=None, **extra) -> subprocess.CompletedProcess:
    """`python ARGS` (the venv's interpreter) in the repository, output folder OUT; stdout+stderr as .out"""
    proc = subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env or base_env(out, **extra), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=timeout, preexec_fn=_nice,
    )
    return proc


def runner(out: Path, *args, **kw) -> subprocess.CompletedProcess:
    return run_py(["-m", "headprune_utils.run", "--profile", PROFILE, "--only", STUDY, "--no-progress", *args],
                  out, **kw)


def manifest_tool(*args, out: Path) -> subprocess.CompletedProcess:
    return run_py(["-m", "headprune_utils.store.manifest", *[str(a) for a in args]], out, timeout=120)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_digest(root: Path) -> dict:
    return {str(p.relative_to(root)): sha256(p) for p in sorted(root.rglob("*")) if p.is_file()}


def rewrite(path: Path, data: bytes) -> None:
    """replace a file's content without touching other hard links to it (the module's clean copy)"""
    if path.exists() or path.is_symlink():
        path.unlink()
    path.write_bytes(data)


def truncate_half(path: Path) -> bytes:
    data = path.read_bytes()
    rewrite(path, data[: len(data) // 2])
    return data


def stable(result: dict) -> dict:
    """a cell's result without its timings (which differ between two computations of the same cell)"""
    drop = {"seconds", "train_seconds"}
    out = {}
    for k, v in result.items():
        if k in drop:
            continue
        if k == "history":
            v = [{kk: vv for kk, vv in h.items() if kk not in drop} for h in v]
        out[k] = v
    return out


def write_manifest_line(cells: Path, name: str) -> None:
    """record NAME in MANIFEST.sha256 as a genuine copy from elsewhere would carry it"""
    manifest = cells / "MANIFEST.sha256"
    lines = [ln for ln in manifest.read_text().splitlines() if not ln.endswith("  " + name)]
    lines.append(f"{sha256(cells / name)}  {name}")
    rewrite(manifest, ("\n".join(sorted(lines, key=lambda ln: ln.split("  ", 1)[1])) + "\n").encode())


def quarantined(study_dir: Path, name: str) -> list[Path]:
    return [p for p in study_dir.parent.rglob("*") if "quarantine" in str(p.relative_to(study_dir.parent))
            and p.name.startswith(name.removesuffix(".json"))]


def no_traceback(text: str) -> bool:
    return "Traceback (most recent call last)" not in text


# --------------------------------------------------------------------------------------------- the toy study

TOY_SRC = textwrap.dedent('''
    """a study on the README's protocol that needs no model: cell x yields y = x * x * version"""
    import os
    import signal
    import time
    from dataclasses import dataclass, field
    from pathlib import Path

    from headprune_utils.store.results import fingerprint
    from headprune_utils.studies.base import Cell, Study


    @dataclass(frozen=True)
    class ToyConfig:
        xs: list[int] = field(default_factory=lambda: [1, 2, 3, 4])
        version: int = 1
        pad: int = 0          # a list of this many numbers in each result (a large cell)
        log: str = ""         # a file: one line per cell computed
        hold: str = ""        # a folder: before the first cell, write 'started' (this pid) and wait for 'release'
        die_at: int = -1      # computing this x kills the process (SIGKILL), as a crash or an OOM kill would
        fail_at: int = -1     # computing this x raises
        device: str = "cpu"
        progress: bool = False


    class Toy(Study):
        name, notebook, Config = "toy", "", ToyConfig

        def plan(self, cfg):
            return [Cell({"x": x}) for x in cfg.xs]

        def fingerprint(self, cfg, device):
            return fingerprint({"toy": 1, "version": cfg.version, "pad": cfg.pad})

        def context(self, cfg, device, paths):
            return cfg

        def run(self, ctx, cells, inputs):
            cfg = ctx
            if cfg.hold:
                hold = Path(cfg.hold)
                (hold / "started").write_text(str(os.getpid()))
                deadline = time.time() + 120
                while not (hold / "release").exists() and time.time() < deadline:
                    time.sleep(0.05)
            for cell in cells:
                x = cell["x"]
                if x == cfg.die_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                if x == cfg.fail_at:
                    raise RuntimeError(f"injected failure at x={x}")
                if cfg.log:
                    with open(cfg.log, "a") as f:
                        f.write(f"{x}\\n")
                yield cell, {"y": x * x * cfg.version, "pad": [x] * cfg.pad}
''')

TOY_MAIN = textwrap.dedent('''
    import json
    import sys

    from hp_toy_study import Toy, ToyConfig
    from headprune_utils.run.execution import run_study


    def main():
        kw = json.loads(sys.argv[1])
        opts = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
        try:
            table = run_study(Toy(), ToyConfig(**kw), profile="faults", **opts)
        except BaseException as e:  # noqa: BLE001
            print("ERROR:", type(e).__name__, e, flush=True)
            sys.exit(3)
        print("ROWS", json.dumps(sorted(zip(table["x"].tolist(), table["y"].tolist()))), flush=True)


    if __name__ == "__main__":  # the process executor's workers import this module again
        main()
''')


@pytest.fixture(scope="module")
def toy_mod(tmp_path_factory):
    d = tmp_path_factory.mktemp("toymod")
    (d / "hp_toy_study.py").write_text(TOY_SRC)
    (d / "toy_main.py").write_text(TOY_MAIN)
    sys.path.insert(0, str(d))
    mod = importlib.import_module("hp_toy_study")
    yield d, mod
    sys.path.remove(str(d))
    sys.modules.pop("hp_toy_study", None)


class Toy:
    """one toy output folder: run the study in-process or in a subprocess, look at its cells"""

    def __init__(self, mod_dir: Path, mod, out: Path, monkeypatch, capfd, caplog):
        self.mod_dir, self.mod, self.out = mod_dir, mod, out
        self.capfd, self.caplog = capfd, caplog
        monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(out))
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        self.study_dir = out / "toy" / TOY_PROFILE
        self.cells = self.study_dir / "cells"
        self.log = out.parent / f"{out.name}-computed.log"

    def run(self, **kw):
        """run_study in this process: (rows, error, everything it printed, logged or warned)"""
        from headprune_utils.run.execution import run_study

        self.caplog.clear()
        self.capfd.readouterr()
        if "log" not in kw:
            kw["log"] = str(self.log)
        table, error = None, None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                table = run_study(self.mod.Toy(), self.mod.ToyConfig(**kw), profile=TOY_PROFILE)
            except Exception as e:  # noqa: BLE001
                error = e
        cap = self.capfd.readouterr()
        text = cap.out + cap.err + self.caplog.text + "\n".join(str(w.message) for w in caught)
        if error is not None:
            text += f"\n{type(error).__name__}: {error}"
        rows = None if table is None else sorted(zip(table["x"].tolist(), table["y"].tolist()))
        return rows, error, text

    def computed(self) -> list[int]:
        """the cells computed since the last call (and forget them)"""
        if not self.log.exists():
            return []
        xs = sorted(int(v) for v in self.log.read_text().split())
        self.log.unlink()
        return xs

    def subprocess(self, kw: dict, opts: dict | None = None, wait=True, timeout=120, extra_env=None):
        env = base_env(self.out, PYTHONPATH=os.pathsep.join([str(self.mod_dir), str(REPO)]), **(extra_env or {}))
        args = [sys.executable, str(self.mod_dir / "toy_main.py"), json.dumps(kw), json.dumps(opts or {})]
        if not wait:
            return subprocess.Popen(args, cwd=self.mod_dir, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, preexec_fn=_nice)
        return subprocess.run(args, cwd=self.mod_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout, preexec_fn=_nice)

    def cell(self, x) -> Path:
        return self.cells / f"x={x}.json"


def expected(xs=(1, 2, 3, 4), version=1):
    return [(x, x * x * version) for x in xs]


@pytest.fixture
def toy(toy_mod, tmp_path, monkeypatch, capfd, caplog):
    mod_dir, mod = toy_mod
    t = Toy(mod_dir, mod, tmp_path / "out", monkeypatch, capfd, caplog)
    rows, error, text = t.run()
    assert error is None and rows == expected(), text
    t.computed()
    return t


# --------------------------------------------------------------------------------------------- toy: cells


@pytest.mark.parametrize("damage", ["truncated", "empty", "binary"])
def test_unreadable_cell_is_quarantined_and_recomputed(toy, damage):
    """README: "A cell file that cannot be read is moved to `quarantine/` and recomputed." (a cell cut off by a
    crash, left empty by a full disk, or overwritten with garbage)"""
    path = toy.cell(3)
    data = path.read_bytes()
    rewrite(path, {"truncated": data[: len(data) // 2], "empty": b"", "binary": os.urandom(len(data))}[damage])
    rows, error, text = toy.run()
    assert error is None, text
    assert rows == expected()
    assert toy.computed() == [3]
    assert quarantined(toy.study_dir, "x=3"), f"x=3.json not moved to a quarantine/ folder: {text}"
    assert json.loads(path.read_text())["result"]["y"] == 9


def test_edited_cell_is_named_and_recomputed(toy):
    """README: "each `cells/` folder has a `MANIFEST.sha256` ... so an edited, swapped or copied-in cell is named
    (a run recomputes it ...)" (a bit flipped on disk: the value changes, the JSON stays valid)"""
    path = toy.cell(2)
    cell = json.loads(path.read_text())
    cell["result"]["y"] = 5
    rewrite(path, json.dumps(cell, indent=2).encode())
    rows, error, text = toy.run()
    assert error is None, text
    assert rows == expected()
    assert toy.computed() == [2]
    assert "x=2" in text, f"the edited cell is not named: {text!r}"


def test_swapped_cells_are_recomputed(toy):
    """README: "an edited, swapped or copied-in cell is named (a run recomputes it ...)" (two cell files
    exchanged, as a faulty copy or restore would leave them)"""
    a, b = toy.cell(1).read_bytes(), toy.cell(2).read_bytes()
    rewrite(toy.cell(1), b)
    rewrite(toy.cell(2), a)
    rows, error, text = toy.run()
    assert error is None, text
    assert rows == expected()
    assert toy.computed() == [1, 2]


def test_swapped_cell_without_manifest_line_is_not_read_as_another_cell(toy):
    """README: "Results made with other parameters are never mixed in" / "A cell the manifest does not list
    (stored by older code, added by hand, or its line damaged) is read by a run with a warning": a file whose
    content is another cell's (its key says x=1, its name x=2; the manifest line lost with a damaged manifest)
    must not stand for x=2"""
    rewrite(toy.cell(2), toy.cell(1).read_bytes())
    manifest = toy.cells / "MANIFEST.sha256"
    rewrite(manifest, "".join(ln + "\n" for ln in manifest.read_text().splitlines()
                              if not ln.endswith("x=2.json")).encode())
    rows, error, text = toy.run()
    assert error is None or "x=2" in str(error)
    if error is None:
        assert rows == expected(), f"x=2 read from a file holding x=1's cell: {rows}"


def test_missing_manifest_reads_cells_with_a_warning(toy):
    """README: "A cell the manifest does not list (stored by older code, added by hand, or its line damaged) is
    read by a run with a warning" (an outputs tree copied without its MANIFEST.sha256)"""
    (toy.cells / "MANIFEST.sha256").unlink()
    rows, error, text = toy.run()
    assert error is None, text
    assert rows == expected()
    assert toy.computed() == []
    assert "manifest" in text.lower() or "x=1" in text, f"no warning about the unlisted cells: {text!r}"


@pytest.mark.parametrize("damage", ["cut mid-line", "binary"])
def test_damaged_manifest_does_not_break_the_run(toy, damage):
    """README: "A cell the manifest does not list (..., or its line damaged) is read by a run with a warning"
    (MANIFEST.sha256 cut off by a crash while it was appended to, or overwritten with garbage)"""
    manifest = toy.cells / "MANIFEST.sha256"
    data = manifest.read_bytes()
    rewrite(manifest, data[: len(data) - 20] if damage == "cut mid-line" else os.urandom(200))
    rows, error, text = toy.run(xs=[1, 2, 3, 4, 5])
    assert error is None, text
    assert rows == expected((1, 2, 3, 4, 5))
    assert toy.computed() == [5]


@pytest.mark.parametrize("name", ["x=2.json.tmp", ".x=2.json.tmp", "tmpk3j9x1.json", ".tmp-x=2.json"])
def test_leftover_temporary_file_is_not_a_cell(toy, name):
    """README: each finished cell is "a file under `cells/`, written atomically": the temporary file of a write
    killed before its rename (here a half-written copy of x=2's cell) is never read as a result"""
    data = toy.cell(2).read_bytes()
    (toy.cells / name).write_bytes(data[: len(data) // 2])
    rows, error, text = toy.run()
    assert error is None, text
    assert rows == expected()
    assert toy.computed() == []


def test_cell_missing_from_a_partial_copy_is_recomputed_and_manifest_checks(toy):
    """README: "a rerun skips finished cells" and "each `cells/` folder has a `MANIFEST.sha256` (`sha256sum -c`
    format) written with every cell": a cell lost by a partial copy (its manifest line still there) is
    computed again and the manifest then verifies"""
    toy.cell(3).unlink()
    rows, error, text = toy.run()
    assert error is None, text
    assert rows == expected()
    assert toy.computed() == [3]
    check = manifest_tool("--check", toy.cells, out=toy.out)
    assert check.returncode == 0, check.stdout


def test_dangling_symlink_cell_is_recomputed(toy):
    """README: "A cell file that cannot be read is moved to `quarantine/` and recomputed." (a tree copied with
    symlinks whose targets were not copied)"""
    toy.cell(4).unlink()
    toy.cell(4).symlink_to(toy.out / "elsewhere" / "x=4.json")
    rows, error, text = toy.run()
    assert error is None, text
    assert rows == expected()
    assert toy.computed() == [4]


def test_unlisted_cell_of_wrong_shape_is_recomputed(toy):
    """README: "A cell file that cannot be read is moved to `quarantine/` and recomputed." (valid JSON that is no
    cell: `{}` left by a crashed writer, its manifest line lost)"""
    rewrite(toy.cell(3), b"{}")
    manifest = toy.cells / "MANIFEST.sha256"
    rewrite(manifest, "".join(ln + "\n" for ln in manifest.read_text().splitlines()
                              if not ln.endswith("x=3.json")).encode())
    rows, error, text = toy.run()
    assert error is None, text
    assert rows == expected()
    assert toy.computed() == [3]


def test_cell_of_older_parameters_copied_in_is_not_mixed(toy, tmp_path):
    """README: "Results made with other parameters are never mixed in or overwritten" (a partial copy of an
    older run's outputs: one cell made with version 2, with its manifest line, lands among version 1's)"""
    other = Toy(toy.mod_dir, toy.mod, tmp_path / "other", pytest.MonkeyPatch(), toy.capfd, toy.caplog)
    old_env = os.environ["HEADPRUNE_OUTPUT_DIR"]
    os.environ["HEADPRUNE_OUTPUT_DIR"] = str(other.out)
    try:
        rows, error, _ = other.run(version=2)
    finally:
        os.environ["HEADPRUNE_OUTPUT_DIR"] = old_env
    assert error is None and rows == expected(version=2)
    rewrite(toy.cell(2), other.cell(2).read_bytes())
    write_manifest_line(toy.cells, "x=2.json")
    rows, error, text = toy.run()
    if error is None:
        assert rows == expected(), f"a cell of other parameters mixed in: {rows}"
    else:
        assert "x=2" in text or "version" in text, text


def test_changed_parameters_stop_naming_them_and_keep_the_cells(toy):
    """README: "Results made with other parameters are never mixed in or overwritten: the run stops and names
    the parameters that changed" (a cache of cells from an older version of the study's parameters)"""
    before = tree_digest(toy.cells)
    rows, error, text = toy.run(version=2)
    assert error is not None, f"cells of version 1 reused or replaced under version 2: {rows}"
    assert "version" in str(error), f"the changed parameter is not named: {error}"
    assert tree_digest(toy.cells) == before


def test_older_cell_without_fingerprint_is_not_read_as_current(toy):
    """README: each cell is "carrying the fingerprint of the parameters and data that made it" and results of
    other parameters are "never mixed in": a cell stored by older code, with no fingerprint and another value,
    unlisted in the manifest, is recomputed or refused, not read as a result of these parameters"""
    cell = json.loads(toy.cell(3).read_text())
    cell.pop("fingerprint")
    cell["result"]["y"] = 99
    rewrite(toy.cell(3), json.dumps(cell).encode())
    manifest = toy.cells / "MANIFEST.sha256"
    rewrite(manifest, "".join(ln + "\n" for ln in manifest.read_text().splitlines()
                              if not ln.endswith("x=3.json")).encode())
    rows, error, text = toy.run()
    if error is None:
        assert rows == expected(), f"a cell without a fingerprint was read as current: {rows}"
    else:
        assert "x=3" in text, text


def test_truncated_run_meta_does_not_break_the_rerun(toy):
    """README: `run_meta.json` is "the record of the run that made these outputs" (cut off by a crash): a rerun
    recovers (every cell reused, the record rewritten) or names the file"""
    truncate_half(toy.study_dir / "run_meta.json")
    rows, error, text = toy.run()
    if error is None:
        assert rows == expected()
        assert toy.computed() == []
        json.loads((toy.study_dir / "run_meta.json").read_text())
    else:
        assert "run_meta.json" in str(error), text


# --------------------------------------------------------------------------------------------- toy: crashes


def test_killed_mid_run_leaves_whole_cells_and_resumes(toy, tmp_path):
    """README: "each finished cell ... is a file under `cells/`, written atomically ...; a rerun skips finished
    cells" and "the driver ... writes them, atomically, as they arrive" (the process SIGKILLed mid-run)"""
    shutil.rmtree(toy.study_dir)
    proc = toy.subprocess({"xs": [1, 2, 3, 4, 5, 6], "die_at": 4, "log": str(toy.log)})
    assert proc.returncode == -signal.SIGKILL, proc.stdout
    before = toy.computed()
    assert before == [1, 2, 3]
    for p in toy.cells.glob("*.json"):
        json.loads(p.read_text())
    check = manifest_tool("--check", toy.cells, out=toy.out)
    assert check.returncode == 0, check.stdout
    rows, error, text = toy.run(xs=[1, 2, 3, 4, 5, 6])
    assert error is None, text
    assert rows == expected((1, 2, 3, 4, 5, 6))
    assert toy.computed() == [4, 5, 6]


def test_failing_cell_keeps_the_finished_ones(toy):
    """README: "Studies resume: each finished cell ... is a file under `cells/` ...; a rerun skips finished
    cells" (a cell that raises midway, e.g. out of memory)"""
    rows, error, text = toy.run(xs=[1, 2, 3, 4, 5, 6, 7], fail_at=6)
    assert error is not None and "injected failure" in text and "x=6" in text, text
    first = toy.computed()
    assert 5 in first and 6 not in first
    stored = {int(p.stem[2:]) for p in toy.cells.glob("x=*.json")}
    assert stored == {1, 2, 3, 4, *first}
    rows, error, text = toy.run(xs=[1, 2, 3, 4, 5, 6, 7])
    assert error is None, text
    assert rows == expected((1, 2, 3, 4, 5, 6, 7))
    assert toy.computed() == sorted({6, 7} - stored)


def test_second_run_of_a_study_is_refused_naming_the_holder(toy):
    """README: "A second runner of the same study and profile stops at once, naming the one that holds it." and
    "a study's folder takes one run at a time (the second is refused at once, "in use by another run")" """
    hold = toy.out.parent / "hold"
    hold.mkdir()
    toy.cell(4).unlink()
    holder = toy.subprocess({"hold": str(hold)}, wait=False)
    try:
        deadline = time.time() + 90
        while not (hold / "started").exists() and time.time() < deadline and holder.poll() is None:
            time.sleep(0.05)
        assert (hold / "started").exists(), holder.communicate()[0] if holder.poll() is not None else "no start"
        t0 = time.time()
        rows, error, text = toy.run()
        waited = time.time() - t0
    finally:
        (hold / "release").write_text("")
        out, _ = holder.communicate(timeout=120)
    assert error is not None, f"a second run went ahead while another held the study: {rows}"
    assert waited < 20
    assert str(holder.pid) in str(error), f"the holder (pid {holder.pid}) is not named: {error}"
    assert holder.returncode == 0, out
    rows, error, text = toy.run()
    assert rows == expected() and toy.computed() == []


def test_lock_of_a_killed_run_does_not_block(toy):
    """README: "A second runner of the same study and profile stops at once, naming the one that holds it." A
    runner that was killed holds nothing: its lock left behind must not block the next run"""
    hold = toy.out.parent / "hold"
    hold.mkdir()
    toy.cell(4).unlink()
    holder = toy.subprocess({"hold": str(hold)}, wait=False)
    deadline = time.time() + 90
    while not (hold / "started").exists() and time.time() < deadline and holder.poll() is None:
        time.sleep(0.05)
    assert (hold / "started").exists()
    holder.kill()
    holder.communicate(timeout=60)
    rows, error, text = toy.run()
    assert error is None, text
    assert rows == expected()
    assert toy.computed() == [4]


def test_dead_worker_fails_only_its_cell_named(toy):
    """README: "`--executor process` does the same on one machine without Ray (a worker that dies fails only its
    own group of cells, named)" and "a cell that still fails is reported by key ... and the rest are stored
    (rerun to retry)" """
    shutil.rmtree(toy.study_dir)
    proc = toy.subprocess({"xs": [1, 2, 3, 4], "die_at": 3}, {"executor": "process"}, timeout=240)
    assert proc.returncode == 3, proc.stdout
    assert "x=3" in proc.stdout or "'x': 3" in proc.stdout, proc.stdout
    stored = sorted(p.name for p in toy.cells.glob("x=*.json"))
    assert stored == ["x=1.json", "x=2.json", "x=4.json"], stored
    rows, error, text = toy.run()
    assert error is None, text
    assert rows == expected() and toy.computed() == [3]


# --------------------------------------------------------------------------------------------- toy: the disk


def _in_private_mount(toy, shell: str, save: Path, timeout=180) -> subprocess.CompletedProcess:
    """run SHELL in a private mount namespace (the tmpfs dies with it); its outputs copied to SAVE after"""
    if not IS_ROOT or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a small or read-only file system")
    env = base_env(toy.out, PYTHONPATH=os.pathsep.join([str(toy.mod_dir), str(REPO)]), SAVE=str(save),
                   OUT=str(toy.out), PY=sys.executable, MAIN=str(toy.mod_dir / "toy_main.py"))
    save.mkdir(parents=True, exist_ok=True)
    script = shell + '; rc=$?; cp -a "$OUT"/. "$SAVE"/ 2>/dev/null; exit $rc'
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt 2>/dev/null || "
                            "mount -t tmpfs tmpfs \"$HOME\" 2>/dev/null"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          preexec_fn=_nice, cwd=toy.mod_dir)


def test_full_disk_leaves_no_half_written_cell(toy, tmp_path):
    """README: each finished cell is "written atomically" (the disk fills while cells of 20 kB are written):
    every cell file left parses and verifies, and a rerun with space completes the study"""
    shutil.rmtree(toy.out)
    toy.out.mkdir()
    save = tmp_path / "saved"
    kw = json.dumps({"xs": [1, 2, 3, 4, 5, 6], "pad": 2500})
    proc = _in_private_mount(toy, f'mount -t tmpfs -o size=72k tmpfs "$OUT" && "$PY" "$MAIN" \'{kw}\'', save)
    assert proc.returncode == 3, proc.stdout
    assert "No space left" in proc.stdout or "space" in proc.stdout.lower(), proc.stdout
    cells = save / "toy" / TOY_PROFILE / "cells"
    stored = list(cells.glob("x=*.json"))
    assert len(stored) < 6
    for p in stored:
        assert json.loads(p.read_text())["result"]["pad"] == [json.loads(p.read_text())["cell"]["x"]] * 2500
    if (cells / "MANIFEST.sha256").exists():
        check = manifest_tool("--check", cells, out=save)
        assert check.returncode == 0, check.stdout
    os.environ["HEADPRUNE_OUTPUT_DIR"] = str(save)
    rows, error, text = toy.run(xs=[1, 2, 3, 4, 5, 6], pad=2500)
    assert error is None, text
    assert rows == expected((1, 2, 3, 4, 5, 6))
    assert toy.computed() == sorted(set(range(1, 7)) - {int(p.stem[2:]) for p in stored})


def test_read_only_outputs_stop_with_the_folder_named(toy, tmp_path):
    """README: the driver writes each cell "atomically, as they arrive" (the outputs folder remounted read-only,
    e.g. a full or failing disk): the run stops naming the folder it cannot write, and no cell is lost"""
    toy.cell(4).unlink()
    save = tmp_path / "saved"
    before = tree_digest(toy.cells)
    kw = json.dumps({})
    src = tmp_path / "ro_src"
    shell = (f'cp -a "$OUT" "{src}" && mount -t tmpfs tmpfs "$OUT" && cp -a "{src}"/. "$OUT"/ && '
             f'mount -o remount,ro "$OUT" && "$PY" "$MAIN" \'{kw}\'')
    proc = _in_private_mount(toy, shell, save)
    assert proc.returncode == 3, proc.stdout
    assert str(toy.out) in proc.stdout and "cannot be written" in proc.stdout, \
        f"the folder is not named: {proc.stdout}"
    assert "read-only file system" in proc.stdout, f"the cause is not said: {proc.stdout}"
    assert tree_digest(save / "toy" / TOY_PROFILE / "cells") == before


# --------------------------------------------------------------------------------------------- manifest tool


def test_manifest_check_names_a_truncated_cell(toy):
    """README: "each `cells/` folder has a `MANIFEST.sha256` (`sha256sum -c` format) ... so an edited, swapped or
    copied-in cell is named" (`python -m headprune_utils.store.manifest --check` after a crash cut a cell)"""
    truncate_half(toy.cell(2))
    check = manifest_tool("--check", toy.cells, out=toy.out)
    assert check.returncode == 1, check.stdout
    assert "x=2.json" in check.stdout


def test_manifest_tool_refuses_a_changed_cell(toy):
    """README: cells are "recorded, after checking, with `python -m headprune_utils.store.manifest ...`, which
    refuses a cell whose content changed" (a cell damaged on disk, its line still in the manifest)"""
    truncate_half(toy.cell(2))
    before = (toy.cells / "MANIFEST.sha256").read_bytes()
    proc = manifest_tool(toy.cells, out=toy.out)
    assert proc.returncode != 0, proc.stdout
    assert "x=2.json" in proc.stdout
    assert (toy.cells / "MANIFEST.sha256").read_bytes() == before


def test_manifest_tool_does_not_record_an_unreadable_cell(toy):
    """README: a cell the manifest does not list "is refused by a render from cells (`--from-cells`) until it is
    recorded, after checking, with `python -m headprune_utils.store.manifest`": a cell cut off by a crash (its
    line lost) must not be certified by recording it"""
    manifest = toy.cells / "MANIFEST.sha256"
    rewrite(manifest, "".join(ln + "\n" for ln in manifest.read_text().splitlines()
                              if not ln.endswith("x=2.json")).encode())
    truncate_half(toy.cell(2))
    proc = manifest_tool(toy.cells, out=toy.out)
    assert "x=2.json" not in manifest.read_text(), f"a half-written cell was recorded: {proc.stdout}"
    assert proc.returncode != 0 and "x=2.json" in proc.stdout, proc.stdout


def test_manifest_cut_mid_line_is_named_then_recorded_anew(toy):
    """README: a cell whose manifest "line [is] damaged" is "recorded, after checking, with `python -m
    headprune_utils.store.manifest`" (the manifest cut off mid-line by a crash): the tool repairs it, or names it
    and, once it is moved away, records the folder anew; afterwards it verifies"""
    manifest = toy.cells / "MANIFEST.sha256"
    data = manifest.read_bytes()
    rewrite(manifest, data[: len(data) - 20])
    proc = manifest_tool(toy.cells, out=toy.out)
    if proc.returncode != 0:
        assert "MANIFEST.sha256" in proc.stdout and "cut short" in proc.stdout, proc.stdout
        assert manifest.read_bytes() == data[: len(data) - 20]
        manifest.rename(toy.out / "MANIFEST.sha256.damaged")
        proc = manifest_tool(toy.cells, out=toy.out)
    assert proc.returncode == 0, proc.stdout
    check = manifest_tool("--check", toy.cells, out=toy.out)
    assert check.returncode == 0, check.stdout
    assert sorted(ln.split("  ", 1)[1] for ln in manifest.read_text().splitlines()) == [
        f"x={x}.json" for x in (1, 2, 3, 4)]


# --------------------------------------------------------------------------------------------- the runner (smoke)


@pytest.fixture(scope="module")
def smoke_clean(tmp_path_factory):
    """one clean smoke run of random_pruning (cells, notebook, summary, report), copied by each test"""
    if not HAS_DATA:
        pytest.skip(f"no GLUE data under {DATA}")
    out = tmp_path_factory.mktemp("smoke") / "out"
    proc = runner(out, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert (out / STUDY / PROFILE / "tables" / "verdicts.csv").is_file(), proc.stdout[-4000:]
    return out


@pytest.fixture
def smoke(smoke_clean, tmp_path):
    """a copy of the clean run; the model caches (87 MB each) hard-linked, never written through"""
    out = tmp_path / "out"

    def copy(src, dst):
        if src.endswith(".pt"):
            os.link(src, dst)
        else:
            shutil.copy2(src, dst)

    shutil.copytree(smoke_clean, out, copy_function=copy)
    return out


def study_dir(out: Path) -> Path:
    return out / STUDY / PROFILE


def real_copy(path: Path) -> None:
    """un-hard-link a cache file before a test damages it or the tool might rewrite it"""
    data = path.read_bytes()
    rewrite(path, data)


def cache_files(out: Path, seed: int) -> list[Path]:
    return sorted((out / "_finetuned" / PROFILE).glob(f"finetuned__task=SST-2__seed={seed}__*.pt"))


@pytest.mark.smoke
@pytest.mark.data
def test_runner_quarantines_and_recomputes_a_truncated_cell(smoke, smoke_clean):
    """README: "A cell file that cannot be read is moved to `quarantine/` and recomputed." (the runner,
    `--cells-only`, after a crash cut a cell of the smoke run)"""
    cells = study_dir(smoke) / "cells"
    truncate_half(cells / MTF0)
    proc = runner(smoke, "--cells-only")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert quarantined(study_dir(smoke), MTF0), proc.stdout[-3000:]
    new = json.loads((cells / MTF0).read_text())
    clean = json.loads((study_dir(smoke_clean) / "cells" / MTF0).read_text())
    assert new["cell"] == clean["cell"] and stable(new["result"]) == stable(clean["result"])
    assert manifest_tool("--check", cells, out=smoke).returncode == 0


@pytest.mark.smoke
@pytest.mark.data
def test_render_refuses_an_edited_cell_and_keeps_the_outputs(smoke):
    """README: an edited cell "is named (a run recomputes it, a render refuses)" and "a failed analysis leaves
    the earlier outputs untouched" (a score changed on disk; `--from-cells`)"""
    sd = study_dir(smoke)
    cell = json.loads((sd / "cells" / FTM0).read_text())
    cell["result"]["score"] = cell["result"]["accuracy"] = 0.97
    rewrite(sd / "cells" / FTM0, json.dumps(cell, indent=2).encode())
    before = {p: sha256(sd / p) for p in ("tables/verdicts.csv", "metrics.json", "run_meta.json", f"{STUDY}.ipynb")}
    proc = runner(smoke, "--from-cells")
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert FTM0.removesuffix(".json") in proc.stdout or "fraction=0.5" in proc.stdout, proc.stdout[-3000:]
    assert {p: sha256(sd / p) for p in before} == before


@pytest.mark.smoke
@pytest.mark.data
def test_render_refuses_cells_copied_without_manifest_until_recorded(smoke):
    """README: a cell the manifest does not list "is refused by a render from cells (`--from-cells`) until it is
    recorded, after checking, with `python -m headprune_utils.store.manifest outputs/<study>/<profile>/cells`"
    (an outputs tree copied without its manifests)"""
    cells = study_dir(smoke) / "cells"
    (cells / "MANIFEST.sha256").unlink()
    proc = runner(smoke, "--from-cells")
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "headprune_utils.store.manifest" in proc.stdout or "MANIFEST" in proc.stdout, proc.stdout[-3000:]
    rec = manifest_tool(cells, out=smoke)
    assert rec.returncode == 0, rec.stdout
    assert manifest_tool("--check", cells, out=smoke).returncode == 0
    assert len((cells / "MANIFEST.sha256").read_text().splitlines()) == len(list(cells.glob("*.json")))


@pytest.mark.smoke
@pytest.mark.data
def test_render_names_the_study_and_how_many_cells_a_partial_copy_lacks(smoke):
    """README: `make render` "stops at once, naming the studies and how many cells are missing, if any is" (three
    cells lost by a partial copy)"""
    cells = study_dir(smoke) / "cells"
    lost = sorted(cells.glob("*seed=1*.json"))[:3]
    for p in lost:
        p.unlink()
    t0 = time.time()
    proc = runner(smoke, "--from-cells")
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert STUDY in proc.stdout and "3" in proc.stdout, proc.stdout[-3000:]
    assert time.time() - t0 < 60
    assert no_traceback(proc.stdout), proc.stdout[-3000:]


@pytest.mark.smoke
@pytest.mark.data
def test_staging_left_by_a_killed_render_is_not_swapped_in(smoke, smoke_clean):
    """README: "The runner executes each notebook with its figures, tables and metrics going to
    `<profile>.staging/`, swapped in only when the whole notebook succeeded" (a render killed mid-way left its
    staging folder: stale files, a half-written metrics.json)"""
    staging = smoke / STUDY / f"{PROFILE}.staging"
    (staging / "figures").mkdir(parents=True)
    (staging / "tables").mkdir()
    (staging / "figures" / "stale_from_killed_run.png").write_bytes(b"\x89PNG")
    (staging / "tables" / "stale_from_killed_run.csv").write_text("a,b\n1,")
    (staging / "metrics.json").write_text('{"headline": ')
    proc = runner(smoke, "--from-cells")
    assert proc.returncode == 0, proc.stdout[-3000:]
    sd = study_dir(smoke)
    assert not list(sd.rglob("stale_from_killed_run*")), "a stale file of the killed render was swapped in"
    json.loads((sd / "metrics.json").read_text())
    assert (sd / "tables" / "verdicts.csv").read_bytes() == \
        (study_dir(smoke_clean) / "tables" / "verdicts.csv").read_bytes()


@pytest.mark.smoke
@pytest.mark.data
def test_second_runner_stops_at_once_naming_the_first(smoke):
    """README: "A second runner of the same study and profile stops at once, naming the one that holds it."
    (two `python -m headprune_utils.run` started at once on the same outputs)"""
    sd = study_dir(smoke)
    for p in (sd / "cells").glob("*seed=1*.json"):
        p.unlink()
    for p in cache_files(smoke, 1):
        p.unlink()
    env = base_env(smoke)
    first = subprocess.Popen([sys.executable, "-m", "headprune_utils.run", "--profile", PROFILE, "--only", STUDY,
                              "--no-progress", "--cells-only"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, preexec_fn=_nice)
    try:
        line = first.stdout.readline()
        assert "cells of" in line, line
        second = runner(smoke, "--cells-only", timeout=120)
    finally:
        rest = first.communicate(timeout=600)[0]
    assert first.returncode == 0, line + rest
    assert second.returncode != 0, f"the second runner did not stop: {second.stdout[-2000:]}"
    assert str(first.pid) in second.stdout, f"the first runner (pid {first.pid}) is not named: {second.stdout[-2000:]}"
    assert no_traceback(second.stdout), second.stdout[-3000:]
    assert len(list((sd / "cells").glob("*seed=1*.json"))) == 8


@pytest.mark.smoke
@pytest.mark.data
def test_truncated_model_cache_is_retrained_or_named(smoke, smoke_clean):
    """README: "The caches that cells share (fine-tuned models in `outputs/_finetuned/<profile>/` ...) are files
    keyed by what they depend on" (a model cache cut off by a crash or a full disk, then a cell that needs it)"""
    (pt,) = cache_files(smoke, 0)
    truncate_half(pt)
    (study_dir(smoke) / "cells" / FTM0).unlink()
    proc = runner(smoke, "--cells-only")
    clean = json.loads((study_dir(smoke_clean) / "cells" / FTM0).read_text())
    if proc.returncode == 0:
        new = json.loads((study_dir(smoke) / "cells" / FTM0).read_text())
        assert stable(new["result"]) == stable(clean["result"]), "recomputed from a damaged model"
    else:
        assert pt.name in proc.stdout, f"the damaged cache is not named: {proc.stdout[-3000:]}"
        assert not (study_dir(smoke) / "cells" / FTM0).exists()


@pytest.mark.smoke
@pytest.mark.data
def test_swapped_model_caches_are_not_mixed(smoke, smoke_clean):
    """README: "a study whose cells of one (task, seed) come from two trainings stops with an error naming them
    (`execution.check_one_model`) instead of mixing them" (the seed-0 and seed-1 model caches exchanged by a bad
    copy or restore; a seed-0 cell computed again)"""
    (p0,), (p1,) = cache_files(smoke, 0), cache_files(smoke, 1)
    a, b = p0.read_bytes(), p1.read_bytes()
    rewrite(p0, b)
    rewrite(p1, a)
    (study_dir(smoke) / "cells" / FTM0).unlink()
    proc = runner(smoke, "--cells-only")
    clean_sha = json.loads((study_dir(smoke_clean) / "cells" / FTM0).read_text())["result"]["full_model_sha"]
    new_path = study_dir(smoke) / "cells" / FTM0
    if proc.returncode == 0:
        new_sha = json.loads(new_path.read_text())["result"]["full_model_sha"]
        assert new_sha == clean_sha, f"a seed-0 cell stored from seed 1's model ({new_sha} != {clean_sha})"
    else:
        assert "seed 0" in proc.stdout or "seed=0" in proc.stdout, proc.stdout[-3000:]
        assert clean_sha in proc.stdout, f"the two trainings are not named: {proc.stdout[-3000:]}"


@pytest.mark.smoke
@pytest.mark.data
def test_swapped_model_caches_do_not_stand_for_another_seed(smoke, smoke_clean):
    """README: the caches "are files keyed by what they depend on" and "every GLUE cell that used a fine-tuned
    full model records the hash of its weights (`full_model_sha`)": with the seed-0 and seed-1 caches exchanged
    (a bad copy or restore) and seed 0's slice recomputed (what the previous test's error advises: "Recompute those
    cells (move them away, or --fresh)"), seed 0's cells come from seed 0's model (retrained), or the run names
    the cache; never seed 1's model standing for seed 0"""
    (p0,), (p1,) = cache_files(smoke, 0), cache_files(smoke, 1)
    a, b = p0.read_bytes(), p1.read_bytes()
    rewrite(p0, b)
    rewrite(p1, a)
    cells = study_dir(smoke) / "cells"
    for p in cells.glob("*seed=0*.json"):
        p.unlink()
    proc = runner(smoke, "--cells-only")
    clean = study_dir(smoke_clean) / "cells"
    lost = sorted(clean.glob("*regime=finetune_then_mask__seed=0*.json"))
    assert len(lost) == 4
    if proc.returncode == 0:
        for p in lost:
            new = json.loads((cells / p.name).read_text())["result"]["full_model_sha"]
            want = json.loads(p.read_text())["result"]["full_model_sha"]
            assert new == want, f"{p.name}: computed from weights {new}, seed 0's model is {want}"
    else:
        assert p0.name in proc.stdout, proc.stdout[-3000:]


@pytest.mark.smoke
@pytest.mark.data
def test_truncated_masked_finetuning_cache_is_recomputed_or_named(smoke, smoke_clean):
    """README: "Caches the studies share (fine-tuned models, masked fine-tunings) are filled under file locks"
    (the masked fine-tunings' score files of seed 0 cut off by a crash; their cells computed again)"""
    masked = sorted((smoke / "_finetuned" / PROFILE / "masked").glob("scores__task=SST-2__seed=0__*.json"))
    assert masked
    for p in masked:
        truncate_half(p)
    cells = study_dir(smoke) / "cells"
    lost = sorted(cells.glob("*regime=mask_then_finetune__seed=0*.json"))
    for p in lost:
        p.unlink()
    proc = runner(smoke, "--cells-only")
    if proc.returncode == 0:
        for p in lost:
            new = json.loads(p.read_text())
            clean = json.loads((study_dir(smoke_clean) / "cells" / p.name).read_text())
            assert stable(new["result"]) == stable(clean["result"]), p.name
        for p in masked:
            json.loads(p.read_text())
    else:
        assert any(p.name in proc.stdout for p in masked), proc.stdout[-3000:]


@pytest.mark.smoke
@pytest.mark.data
def test_cells_copied_from_another_machine_kind_stop_a_slice(smoke):
    """README: "a run that would add cells to a model's slice whose stored cells name another kind stops before
    any work, naming both kinds" (a partial copy of seed 0's cells from a machine of another kind)"""
    cells = study_dir(smoke) / "cells"
    here = json.loads((cells / FTM0).read_text())["result"]["machine"]
    other = "cpu: Faraway CPU 9000 [sse4_2]"
    for p in sorted(cells.glob("*seed=0*.json")):
        cell = json.loads(p.read_text())
        cell["result"]["machine"] = other
        rewrite(p, json.dumps(cell, indent=2).encode())
        write_manifest_line(cells, p.name)
    (cells / FTM0).unlink()
    proc = runner(smoke, "--cells-only")
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "Faraway CPU 9000" in proc.stdout and here.split("[")[0].strip().removeprefix("cpu: ") in proc.stdout, \
        proc.stdout[-3000:]
    assert not (cells / FTM0).exists()


def _data_copy(tmp_path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(DATA / "glue" / "SST-2", root / "glue" / "SST-2")
    for p in (root / "glue" / "SST-2").iterdir():
        p.chmod(0o644)
    return root


@pytest.mark.smoke
@pytest.mark.data
def test_data_changed_between_runs_is_not_mixed(smoke, tmp_path):
    """README: each cell carries "the fingerprint of the parameters and data that made it ... Results made with
    other parameters are never mixed in or overwritten: the run stops and names the parameters that changed"
    (SST-2's dev file damaged between two runs: every label flipped; one cell to compute)"""
    root = _data_copy(tmp_path)
    dev = root / "glue" / "SST-2" / "dev.tsv"
    rows = list(csv.reader(dev.read_text().splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE))
    flipped = [rows[0]] + [r[:-1] + [str(1 - int(r[-1]))] for r in rows[1:]]
    dev.write_text("".join("\t".join(r) + "\n" for r in flipped))
    cells = study_dir(smoke) / "cells"
    (cells / MTF0).unlink()
    before = tree_digest(cells)
    proc = runner(smoke, "--cells-only", HEADPRUNE_DATA_DIR=root)
    assert proc.returncode != 0, f"cells of the old and new data mixed: {proc.stdout[-2000:]}"
    assert "SST-2" in proc.stdout and ("data" in proc.stdout.lower() or "dev" in proc.stdout), proc.stdout[-3000:]
    assert tree_digest(cells) == before


@pytest.mark.smoke
@pytest.mark.data
def test_data_file_gone_between_runs_is_named(smoke, tmp_path):
    """README: "a missing data folder ... stops the run at once with a message that says what is wrong" (SST-2's
    dev file deleted between two runs, one cell left to compute)"""
    root = _data_copy(tmp_path)
    (root / "glue" / "SST-2" / "dev.tsv").unlink()
    (study_dir(smoke) / "cells" / MTF0).unlink()
    proc = runner(smoke, "--cells-only", HEADPRUNE_DATA_DIR=root)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "dev.tsv" in proc.stdout or "SST-2 dev" in proc.stdout, proc.stdout[-3000:]
    assert no_traceback(proc.stdout), proc.stdout[-3000:]
    assert not (study_dir(smoke) / "cells" / MTF0).exists()


@pytest.mark.smoke
@pytest.mark.data
def test_data_dir_variable_pointing_nowhere_is_named(tmp_path):
    """README: "elsewhere set `HEADPRUNE_DATA_DIR=<root holding glue/...>`" and "a missing data folder ... stops
    the run at once with a message that says what is wrong" (the variable left pointing at an unmounted disk)"""
    nowhere = tmp_path / "unmounted" / "data"
    t0 = time.time()
    proc = runner(tmp_path / "out", "--check", HEADPRUNE_DATA_DIR=nowhere)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert str(nowhere) in proc.stdout, proc.stdout[-3000:]
    assert no_traceback(proc.stdout), proc.stdout[-3000:]
    assert time.time() - t0 < 60


@pytest.mark.smoke
@pytest.mark.data
def test_output_dir_variable_pointing_at_a_file_is_named(tmp_path):
    """README: "set `HEADPRUNE_OUTPUT_DIR` to shared storage mounted on every node" (the variable points at a
    file, e.g. a mount point whose storage is gone): the runner stops naming it, no traceback"""
    bogus = tmp_path / "not-a-folder"
    bogus.write_text("")
    proc = runner(bogus, "--cells-only")
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert str(bogus) in proc.stdout, proc.stdout[-3000:]
    assert no_traceback(proc.stdout), proc.stdout[-3000:]
    assert bogus.read_text() == ""


@pytest.mark.smoke
@pytest.mark.data
def test_garbage_training_checkpoint_is_ignored_or_named(tmp_path_factory, tmp_path):
    """README: the translation model's training "writes a checkpoint beside the model cache after every dev
    evaluation (`outputs/_nmt/<profile>/<model>.training-checkpoint.pt`) and a run stopped mid-training resumes
    from it to the weights an uninterrupted run gives" (the checkpoint itself cut off by the crash)"""
    if not HAS_DATA:
        pytest.skip("no data")
    where = ["--profile", PROFILE, "--only", "nmt_heads", "--no-progress", "--cells-only", "--where", "kind=model",
             "model_seed=0"]
    clean = tmp_path_factory.mktemp("nmt") / "out"
    proc = run_py(["-m", "headprune_utils.run", *where], clean)
    assert proc.returncode == 0, proc.stdout[-3000:]
    (model_dir,) = [p for p in (clean / "_nmt" / PROFILE).iterdir() if p.is_dir()]
    out = tmp_path / "out"
    ckpt = out / "_nmt" / PROFILE / f"{model_dir.name}.training-checkpoint.pt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"PK\x03\x04" + os.urandom(3000))
    proc = run_py(["-m", "headprune_utils.run", *where], out)
    if proc.returncode == 0:
        new = out / "_nmt" / PROFILE / model_dir.name / "model.safetensors"
        assert new.read_bytes() == (model_dir / "model.safetensors").read_bytes(), "weights differ from a clean run"
    else:
        assert ckpt.name in proc.stdout, f"the damaged checkpoint is not named: {proc.stdout[-3000:]}"


# --------------------------------------------------------------------------------------------- report, summary


def report(out: Path) -> subprocess.CompletedProcess:
    return run_py(["-m", "headprune_utils.run.report", "--profile", PROFILE], out, timeout=300)


@pytest.mark.smoke
@pytest.mark.data
@pytest.mark.parametrize("fault", ["verdicts cut off", "metrics.json cut off", "run_meta.json lost",
                                   "notebook lost"])
def test_report_stops_naming_a_damaged_output_and_writes_nothing(smoke, fault):
    """README: "a verdict table cut off, ..., a study without its notebook, verdict table or `run_meta.json`, or a
    `metrics.json` that is not JSON stops them with the file named (exit 2, nothing written), never a page that
    looks fine" (outputs damaged by a crash or a partial copy; `python -m headprune_utils.run.report`)"""
    sd = study_dir(smoke)
    target = {"verdicts cut off": sd / "tables" / "verdicts.csv", "metrics.json cut off": sd / "metrics.json",
              "run_meta.json lost": sd / "run_meta.json", "notebook lost": sd / f"{STUDY}.ipynb"}[fault]
    if fault.endswith("cut off"):
        data = target.read_bytes()
        cut = data.rfind(b"\n", 0, len(data) - 2) + 30 if target.suffix == ".csv" else len(data) // 2
        rewrite(target, data[:cut])
    else:
        target.unlink()
    before = tree_digest(smoke / "report")
    proc = report(smoke)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert target.name in proc.stdout, proc.stdout[-3000:]
    assert tree_digest(smoke / "report") == before


@pytest.mark.smoke
@pytest.mark.data
def test_summary_stops_naming_an_empty_verdict_table(smoke):
    """README: "The report and the summary show only what a render wrote: a verdict table cut off, empty, ...
    stops them with the file named (exit 2, nothing written)" (verdicts.csv left empty by a full disk)"""
    target = study_dir(smoke) / "tables" / "verdicts.csv"
    rewrite(target, b"")
    summary = smoke / f"SUMMARY-{PROFILE}.md"
    before = summary.read_bytes()
    proc = run_py(["-m", "headprune_utils.run.summary", "--profile", PROFILE], smoke, timeout=300)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "verdicts.csv" in proc.stdout, proc.stdout[-3000:]
    assert summary.read_bytes() == before
