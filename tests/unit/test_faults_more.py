"""More faults a user (or a fault) produces that the runner and the result store must refuse clearly and early.

Found by writing cases from the README alone, as a user would type them: a repeated option (``--profile quick
--profile standard`` took the last one), a notebook run with ``-p profile myexp`` (no ``params/myexp.yaml``: it
computed into ``outputs/<study>/myexp/``, which git does not ignore), ``HEADPRUNE_OUTPUT_DIR`` naming a file (reported
as a permissions problem), a read-only report or study folder (found only after the whole computation), a Ray
address nobody serves (a raw traceback), a hand-edited cell file or manifest (the message did not say which field
or line), and where each parameter's value came from (not recorded in run_meta.json).

Each case: the exit status 2 (or the exception) before any heavy work, one message naming the option, variable,
file, field or line, and nothing written under the outputs root.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from headprune_utils.run import cli, execution, options, pipeline, preflight, profiles, schedule
from headprune_utils.run.execution import (SOURCE_CALLER, SOURCE_DEFAULT, SOURCE_EXPLICIT, SOURCE_NOTEBOOK,
                                           SOURCE_RUNNER, SOURCE_SECTION, ExecutorUnavailable, parameter_origins,
                                           run_study)
from headprune_utils.store import manifest as manifest_cli
from headprune_utils.store import paths as store_paths
from headprune_utils.store.paths import OutputsUnwritable, StudyPaths
from headprune_utils.store.results import CorruptCellError, ResultStore
from headprune_utils.studies import STUDIES
from headprune_utils.studies.config import ParameterError

from fake_studies import FakeConfig, FakeStudy

REPO = Path(__file__).resolve().parents[2]


def snapshot(root: Path) -> dict[str, bytes | str]:
    root = Path(root)
    if not root.exists():
        return {}
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else "<folder>")
            for p in sorted(root.rglob("*"))}


@pytest.fixture
def fake(tmp_path, monkeypatch, capsys):
    """``fake(argv, profile_text="fake: {}\\n") -> (status, stderr)``: the runner on the model-free fake study, a
    profile ``params/t.yaml``, outputs in ``tmp_path/out`` holding an earlier run; no notebook may start, no cell
    may be computed, and nothing under the outputs root may change (asserted)."""
    params = tmp_path / "params"
    params.mkdir()
    out = tmp_path / "out"
    monkeypatch.setattr(profiles, "STUDIES", {"fake": FakeStudy()})
    monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: params)
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(out))
    monkeypatch.delenv("HEADPRUNE_STAGED_OUTPUTS", raising=False)
    run_study(FakeStudy(), FakeConfig(), "t", StudyPaths("fake", "t", root=out))  # the earlier run
    monkeypatch.setattr(schedule, "execute_study", lambda *a, **k: pytest.fail("a notebook started"))
    monkeypatch.setattr(FakeStudy, "context", lambda *a, **k: pytest.fail("a cell started"))

    def call(argv, profile_text: str | None = "fake: {}\n", *, unchanged: bool = True):
        if profile_text is not None:
            (params / "t.yaml").write_text(profile_text)
        before = snapshot(out)
        capsys.readouterr()
        try:
            status = cli.main(argv)
        except SystemExit as exc:  # argparse
            status = exc.code
        err = capsys.readouterr().err
        if unchanged:
            after = snapshot(out)
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            assert not changed, f"the outputs changed: {changed}"
        return status, err

    call.out = out
    call.params = params
    return call


def no_traceback(err: str) -> None:
    assert "Traceback" not in err, err


# ===================================================================== 1. a single-valued option given twice

ONCE_CASES = [
    ("--profile", "t", "quick"),
    ("--executor", "local", "process"),
    ("--address", "auto", "ray://h:10001"),
    ("--jobs", "1", "2"),
    ("--gpu-tflops", "100", "50"),
    ("--cpu-gflops", "58", "10"),
]


@pytest.mark.parametrize("option, first, second", ONCE_CASES, ids=[c[0] for c in ONCE_CASES])
def test_a_single_valued_option_given_twice_is_an_error_naming_it(option, first, second, fake):
    status, err = fake(["--check", option, first, option, second])
    assert status == 2, err
    assert f"argument {option}: given twice" in err and first in err and second in err, err


def test_the_equals_spelling_and_an_abbreviation_count_as_the_same_option(fake):
    status, err = fake(["--profile=t", "--prof", "quick", "--check"])
    assert status == 2 and "--profile: given twice" in err, err


def test_given_once_it_works_and_repeatable_options_still_add_up(fake):
    status, err = fake(["--profile", "t", "--check"])
    assert status == 0, err
    args = cli.build_parser().parse_args(["--only", "a", "--only", "b", "--where", "x=1", "--where", "y=2"])
    assert args.only == ["a", "b"] and args.where == ["x=1", "y=2"]
    assert "_given_once" not in vars(args)


def test_every_single_valued_option_of_the_runner_refuses_a_repeat():
    """A new option that takes one value must not silently take the last of two (the parser's own check)."""
    single = [a for a in cli.build_parser()._actions
              if a.option_strings and a.nargs is None and not isinstance(a, argparse_flags())]
    assert {a.option_strings[0] for a in single} >= {c[0] for c in ONCE_CASES}
    loose = [a.option_strings[0] for a in single if not isinstance(a, options.Once)]
    assert not loose, f"options that take one value but accept a repeat: {loose}"


def argparse_flags():
    import argparse

    return (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction, argparse._VersionAction,
            argparse._StoreConstAction, argparse._CountAction)


def test_the_summary_command_refuses_a_repeated_profile(capsys):
    from headprune_utils.run import summary

    with pytest.raises(SystemExit) as exc:
        summary.main(["--profile", "quick", "--profile", "standard"])
    assert exc.value.code == 2
    assert "--profile: given twice" in capsys.readouterr().err


# ===================================================================== 2. a profile without its params file

def test_the_runner_names_an_unknown_profile_the_profiles_there_are_and_how_to_make_one(fake):
    status, err = fake(["--profile", "myexp", "--check"])
    assert status == 2, err
    assert "unknown profile 'myexp'" in err and "params/myexp.yaml" in err, err
    assert "(the profiles: t)" in err and "cp params/t.yaml params/myexp.yaml" in err, err
    no_traceback(err)


def test_plan_names_an_unknown_profile_the_same_way(fake):
    status, err = fake(["--profile", "myexp", "--plan"])
    assert status == 2 and "cp params/" in err, err


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    out = tmp_path / "outputs"
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(out))
    monkeypatch.delenv("HEADPRUNE_STAGED_OUTPUTS", raising=False)
    return out


def test_a_notebook_run_of_a_profile_with_no_params_file_stops_before_any_work(outputs, monkeypatch):
    """``papermill notebooks/01_random_pruning.ipynb out.ipynb -p profile myexp``: the notebook's run_study call
    (its parameters are the notebook's defaults) must not compute into outputs/random_pruning/myexp/."""
    monkeypatch.setattr(execution, "_run_locked", lambda *a, **k: pytest.fail("the run started"))
    study = STUDIES["random_pruning"]
    with pytest.raises(ParameterError) as exc:
        run_study(study, study.Config(), "myexp", StudyPaths("random_pruning", "myexp"))
    msg = str(exc.value)
    assert "unknown profile 'myexp'" in msg and "params/myexp.yaml" in msg
    for name in ("quick", "smoke", "standard"):
        assert name in msg, msg
    assert "cp params/quick.yaml params/myexp.yaml" in msg and "-p profile quick" in msg, msg
    assert "custom-" in msg, msg
    assert not outputs.exists(), "a folder was made"


@pytest.mark.parametrize("profile", ["smoke", "custom-0123abcd"])
def test_a_notebook_run_of_a_profile_or_of_changed_parameters_goes_ahead(profile, outputs, monkeypatch):
    reached = []
    monkeypatch.setattr(execution, "_run_locked", lambda *a, **k: reached.append(a[2]) or "ran")
    study = STUDIES["random_pruning"]
    assert run_study(study, study.Config(), profile, StudyPaths("random_pruning", profile)) == "ran"
    assert reached == [profile]


def test_a_library_run_into_its_own_folder_or_of_its_own_study_keeps_any_name(tmp_path, outputs):
    """Only a project study run into the outputs root is a profile's run: an explicit root, or a study of the
    user's own (the README's recipe, ``run_study(LogitDrift(), cfg, profile="mine")``), names its own folder."""
    assert len(run_study(FakeStudy(), FakeConfig(), "mine")) == 5
    assert (outputs / "fake" / "mine" / "cells").is_dir()


# ===================================================================== 3. HEADPRUNE_OUTPUT_DIR / _DATA_DIR not a folder

def test_an_outputs_root_that_is_a_file_is_named_as_the_variable_not_as_permissions(fake, tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(blocker))
    status, err = fake(["--profile", "t", "--check"])
    assert status == 2, err
    assert f"HEADPRUNE_OUTPUT_DIR={blocker} is a file, not a folder" in err, err
    assert "permission" not in err, err
    assert blocker.read_text() == "x"


def test_an_outputs_root_under_a_file_is_named_as_the_variable(fake, tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(blocker / "out"))
    status, err = fake(["--profile", "t"])
    assert status == 2, err
    assert f"HEADPRUNE_OUTPUT_DIR={blocker / 'out'}" in err and f"{blocker} is a file, not a folder" in err, err
    assert "permission" not in err, err


def test_an_outputs_root_that_is_a_broken_link_is_named(fake, tmp_path, monkeypatch):
    link = tmp_path / "gone"
    link.symlink_to(tmp_path / "nowhere")
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(link))
    status, err = fake(["--profile", "t", "--check"])
    assert status == 2 and "HEADPRUNE_OUTPUT_DIR" in err and "link to nothing" in err, err


def test_a_data_root_that_is_a_file_is_named_as_the_variable(fake, tmp_path, monkeypatch):
    blocker = tmp_path / "data.tsv"
    blocker.write_text("x")
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(blocker))
    status, err = fake(["--profile", "t", "--check"])
    assert status == 2 and f"HEADPRUNE_DATA_DIR={blocker} is a file, not a folder" in err, err


def test_a_notebook_run_under_a_file_names_it_and_creates_nothing(tmp_path, monkeypatch):
    """The notebook path (no runner, no preflight): run_study itself names the file before making a folder."""
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(blocker))
    with pytest.raises(OutputsUnwritable, match="HEADPRUNE_OUTPUT_DIR=.* is a file, not a folder"):
        run_study(FakeStudy(), FakeConfig(), "t")
    assert blocker.read_text() == "x"


# ===================================================================== 4. every folder the run writes, checked first

def deny(monkeypatch, *folders: Path) -> None:
    """The permission check says no for ``folders`` (as for a read-only folder: root writes through permission bits,
    so the tests simulate it; test_a_read_only_report_folder_is_found_by_the_operating_system checks the real one)."""
    denied = {Path(f).absolute() for f in folders}
    real = store_paths._can_write
    monkeypatch.setattr(store_paths, "_can_write", lambda p: Path(p).absolute() not in denied and real(p))


@pytest.mark.parametrize("where, named", [
    (lambda out: out / "report", "report"),
    (lambda out: out / "report" / "t", "report/t"),
    (lambda out: out / "fake" / "t", "fake/t"),
    (lambda out: out / "fake" / "t" / "cells", "fake/t/cells"),
    (lambda out: out / "fake", "fake"),
    (lambda out: out, "out"),
    (lambda out: out / "_finetuned", "_finetuned"),
], ids=["report", "report-profile", "study-folder", "cells", "study-parent", "outputs-root", "model-cache-parent"])
def test_a_folder_the_run_writes_that_cannot_be_written_stops_it_before_any_work(where, named, fake, monkeypatch):
    for d in ("report/t", "_finetuned"):
        (fake.out / d).mkdir(parents=True, exist_ok=True)
    folder = where(fake.out)
    deny(monkeypatch, folder)
    for argv in (["--profile", "t"], ["--profile", "t", "--check"]):
        status, err = fake(argv)
        assert status == 2, err
        assert f"/{named} cannot be written (permissions)" in err, err


def test_cells_only_needs_no_report_and_a_render_no_model_cache(fake, monkeypatch):
    (fake.out / "report").mkdir()
    (fake.out / "_finetuned" / "t").mkdir(parents=True)
    deny(monkeypatch, fake.out / "report", fake.out / "_finetuned" / "t")
    problems = preflight.unwritable({"fake": {}}, "t", writes="cells")
    assert len(problems) == 1 and "_finetuned" in problems[0], problems
    problems = preflight.unwritable({"fake": {}}, "t", writes="render")
    assert len(problems) == 1 and "report" in problems[0], problems
    assert len(preflight.unwritable({"fake": {}}, "t", writes="all")) == 2


def test_a_read_only_report_folder_is_found_by_the_operating_system(tmp_path):
    """The real permission check, without root's override (``setpriv`` drops it where the tests run as root)."""
    out = tmp_path / "out"
    (out / "report").mkdir(parents=True)
    (out / "report").chmod(0o555)
    code = ("from headprune_utils.run.preflight import unwritable\n"
            "print('\\n'.join(unwritable({'random_pruning': {}}, 'smoke')))")
    cmd = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: permission bits do not apply")
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", *cmd]
    env = {**os.environ, "HEADPRUNE_OUTPUT_DIR": str(out), "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    finally:
        (out / "report").chmod(0o755)
    if done.returncode != 0 and "setpriv" in done.stderr:
        pytest.skip(f"setpriv refused: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    assert "report cannot be written (permissions) (needed for the report)" in done.stdout, done.stdout


# ===================================================================== 5. Ray: an address nobody serves

@pytest.fixture
def failing_ray(monkeypatch):
    """``ray.init`` raising what Ray raises for an address where no cluster answers (the socket probe passes: here a
    proxy answers every address); a fake ``ray`` module where Ray is not installed."""
    try:
        import ray
    except ImportError:
        import types

        ray = types.ModuleType("ray")
        monkeypatch.setitem(sys.modules, "ray", ray)
    calls = []

    def init(*args, **kwargs):
        calls.append(kwargs.get("address"))
        print("[gcs_client.cc:210] Failed to get cluster ID from GCS server", file=sys.stderr)
        raise ConnectionError(f"Failed to connect to Ray cluster at {kwargs.get('address')}")

    monkeypatch.setattr(ray, "init", init, raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False, raising=False)
    monkeypatch.setattr(execution.socket, "create_connection", lambda *a, **k: _Closable())
    return calls


class _Closable:
    def close(self):
        pass


@pytest.mark.parametrize("extra", [["--cells-only"], [], ["--check"]], ids=["cells-only", "run", "check"])
def test_a_ray_address_where_no_cluster_answers_is_one_line_naming_it(extra, fake, failing_ray):
    status, err = fake(["--profile", "t", "--executor", "ray", "--address", "1.2.3.4:1", *extra])
    assert status == 2, err
    no_traceback(err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "--address '1.2.3.4:1'" in lines[0] and "ConnectionError" in lines[0], err
    assert "gcs_client" not in err, "Ray's own retry lines are held back"
    assert failing_ray == ["1.2.3.4:1"]


def test_a_local_ray_instance_that_cannot_start_stops_the_run_in_one_line(fake, failing_ray):
    (fake.params / "t.yaml").write_text("fake: {scale: 1.0}\n")
    shutil.rmtree(fake.out / "fake")  # every cell to compute
    status, err = fake(["--profile", "t", "--executor", "ray", "--cells-only"], profile_text=None)
    assert status == 2, err
    no_traceback(err)
    assert "error: --executor ray: a local Ray instance could not be started (ConnectionError" in err, err
    assert not (fake.out / "fake").exists(), "nothing is written before Ray is up"


def test_a_notebook_run_with_a_bad_ray_address_names_it_and_writes_nothing(tmp_path, failing_ray):
    paths = StudyPaths("fake", "t", root=tmp_path / "out")
    with pytest.raises(ExecutorUnavailable, match=r"--address '1\.2\.3\.4:1' \(a notebook's ray_address\)"):
        run_study(FakeStudy(), FakeConfig(), "t", paths, executor="ray", address="1.2.3.4:1")
    assert not (tmp_path / "out").exists()


# ===================================================================== 6. a hand-edited cell file or manifest

@pytest.fixture
def stored(tmp_path):
    paths = StudyPaths("fake", "t", root=tmp_path / "out")
    run_study(FakeStudy(), FakeConfig(), "t", paths)
    return paths.cells


def read_only(cells: Path) -> ResultStore:
    return ResultStore(cells, FakeStudy().fingerprint(FakeConfig(), "cpu"), quarantine=False)


def rewrite(path: Path, change) -> None:
    rec = json.loads(path.read_text())
    rec = change(rec)
    path.write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")


FIELD_CASES = [
    ("fingerprint-a-number", lambda r: {**r, "fingerprint": 123}, "the field 'fingerprint' is a number (123)"),
    ("result-missing", lambda r: {k: v for k, v in r.items() if k != "result"}, "the field 'result' is missing"),
    ("cell-and-result-missing", lambda r: {"fingerprint": r["fingerprint"]}, "the fields 'cell', 'result' are missing"),
    ("result-a-list", lambda r: {**r, "result": [1]}, "the field 'result' is a list ([1])"),
    ("cell-a-text", lambda r: {**r, "cell": "name=a1"}, "the field 'cell' is a text (\"name=a1\")"),
    ("record-a-list", lambda r: [r], "the file holds a list"),
]


@pytest.mark.parametrize("change, named", [c[1:] for c in FIELD_CASES], ids=[c[0] for c in FIELD_CASES])
def test_a_cell_file_with_a_wrong_field_is_refused_naming_the_file_and_the_field(change, named, stored):
    rewrite(stored / "name=a1.json", change)
    with pytest.raises(CorruptCellError) as exc:
        read_only(stored).get({"name": "a1"})
    msg = str(exc.value)
    assert "fake/t/cells/name=a1.json" in msg and named in msg, msg


@pytest.mark.parametrize("change, named", [c[1:] for c in FIELD_CASES], ids=[c[0] for c in FIELD_CASES])
def test_recording_a_cell_with_a_wrong_field_names_the_field(change, named, stored, capsys):
    (stored / "MANIFEST.sha256").unlink()
    rewrite(stored / "name=a1.json", change)
    assert manifest_cli.main([str(stored)]) == 1
    err = capsys.readouterr().err
    assert "name=a1.json" in err and named in err, err


def test_an_edited_manifest_line_is_named_by_its_line_number(stored):
    manifest = stored / "MANIFEST.sha256"
    lines = manifest.read_text().splitlines(keepends=True)
    n = next(i for i, ln in enumerate(lines) if ln.rstrip().endswith("name=a2.json"))
    lines[n] = "0" * 64 + lines[n][64:]
    manifest.write_text("".join(lines))
    with pytest.raises(CorruptCellError) as exc:
        read_only(stored).get({"name": "a2"})
    msg = str(exc.value)
    assert "name=a2.json" in msg and f"fake/t/cells/MANIFEST.sha256, line {n + 1} " in msg, msg


def test_a_garbled_or_cut_manifest_line_is_named_by_its_line_number(stored):
    manifest = stored / "MANIFEST.sha256"
    text = manifest.read_text()
    lines = text.splitlines(keepends=True)
    lines[2] = lines[2].replace("  ", " ", 1)
    manifest.write_text("".join(lines)[:-20])
    with pytest.warns(Warning) as caught:
        read_only(stored).check_compatible()
    said = " ".join(str(w.message) for w in caught)
    assert "fake/t/cells" in said and "MANIFEST.sha256, line 3:" in said, said
    assert f"no newline (line {len(lines)}," in said, said


# ===================================================================== 7. where each parameter came from

def test_run_meta_records_a_library_calls_parameters_as_default_or_the_callers(tmp_path):
    paths = StudyPaths("fake", "t", root=tmp_path / "out")
    run_study(FakeStudy(), FakeConfig(scale=2.0), "t", paths)
    sources = json.loads(paths.meta.read_text())["param_sources"]
    assert sources["scale"] == SOURCE_CALLER and sources["n"] == SOURCE_DEFAULT
    assert set(sources) == set(json.loads(paths.meta.read_text())["params"]) - set(FakeStudy().run_params(FakeConfig()))


def test_run_meta_of_the_runners_cells_names_the_profile_file(tmp_path, monkeypatch):
    params = tmp_path / "params"
    params.mkdir()
    (params / "t.yaml").write_text("fake: {scale: 3.0}\n")
    monkeypatch.setattr(profiles, "STUDIES", {"fake": FakeStudy()})
    monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: params)
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "out"))
    assert cli.main(["--profile", "t", "--cells-only", "--no-progress"]) == 0
    sources = json.loads((tmp_path / "out" / "fake" / "t" / "run_meta.json").read_text())["param_sources"]
    assert sources["scale"] == "profile file params/t.yaml"
    assert sources["n"] == SOURCE_DEFAULT and sources["progress"] == SOURCE_RUNNER


def test_run_meta_of_a_notebook_says_explicit_section_or_notebook_default(tmp_path, monkeypatch, data_root):
    """A notebook parameterised as papermill does (``-f params/smoke.yaml -p train_size 48``): the explicit value,
    the section's values and the parameters cell's are told apart, explicit winning over the section."""
    pytest.importorskip("IPython")
    import yaml
    from test_notebook_parameters import run_head
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "outputs"))
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    monkeypatch.delenv("HEADPRUNE_STAGED_OUTPUTS", raising=False)
    # IPython's shell puts its own module in sys.modules["__main__"] (no __spec__): restored after, or the process
    # executor's spawned workers of later tests fail to start
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    smoke = yaml.safe_load((REPO / "params" / "smoke.yaml").read_text())
    c = Config()
    c.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell.instance(config=c)
    try:
        ns, _ = run_head(shell, "random_pruning", {**smoke, "profile": "smoke", "train_size": 48})
        sources = parameter_origins(STUDIES["random_pruning"], ns["cfg"], "smoke")
        section = smoke["random_pruning"]
        assert sources["train_size"] == SOURCE_EXPLICIT, sources
        shared = [k for k in section if k != "train_size"]
        assert shared and all(sources[k] == SOURCE_SECTION for k in shared), sources
        untouched = [k for k in sources if k not in section and k != "train_size"]
        assert untouched and all(sources[k] in (SOURCE_NOTEBOOK, SOURCE_DEFAULT) for k in untouched), sources
        # the batch runner's kernels: what it injected is the profile file's
        monkeypatch.setenv("HEADPRUNE_STAGED_OUTPUTS", "1")
        ns, _ = run_head(shell, "random_pruning", {**section, "profile": "smoke", "progress": False})
        sources = parameter_origins(STUDIES["random_pruning"], ns["cfg"], "smoke")
        assert all(sources[k] == "profile file params/smoke.yaml" for k in section if k != "progress"), sources
        assert sources["progress"] == SOURCE_RUNNER
    finally:
        InteractiveShell.clear_instance()
