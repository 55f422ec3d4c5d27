"""Failure cases of the runner, its profiles, notebook parameters and the study protocol, written from the README
alone ("Setup and options", "Profiles (`params/`)", "Scaling out", "Add a study"): bad input gets a clear error
naming the option, parameter or file before any work; nothing is mixed, corrupted or silently overwritten;
non-finite numbers are errors, not results; a run writes only what it made; a value is what the user wrote or an
error. Every case is cheap: fake studies, --plan / --check, and immediate-failure paths only."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from fake_studies import FakeConfig, FakeStudy, fake_profile
from headprune_utils.run import cli
from headprune_utils.run.execution import run_study
from headprune_utils.studies.base import Cell, Cost

REPO = Path(__file__).resolve().parents[2]

# exceptions that are a crash, not a clear error
CRASH = (AttributeError, KeyError, IndexError, NameError, UnboundLocalError, RecursionError, AssertionError,
         ZeroDivisionError)


# ---------------------------------------------------------------------------------------------------- helpers

def call(argv: list[str], capsys) -> tuple[object, str]:
    """The runner in-process: (exit status or exception name, everything it said)."""
    text = ""
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        if e.code is None:
            rc = 0
        elif isinstance(e.code, int):
            rc = e.code
        else:
            rc, text = 1, str(e.code)
    except CRASH:
        raise
    except Exception as e:  # a project error raised out of main: still an error with a message
        rc, text = type(e).__name__, str(e)
    cap = capsys.readouterr()
    return rc, text + "\n" + cap.out + "\n" + cap.err


def refused(result, *words: str) -> None:
    rc, text = result
    assert rc not in (0, None), f"accepted (rc={rc!r}); said:\n{text[-2000:]}"
    for w in words:
        assert w.lower() in text.lower(), f"error does not name {w!r}:\n{text[-2000:]}"


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def stored_cells(out: Path) -> list[Path]:
    """Cell files the driver stored (anything in a cells/ folder but its manifest)."""
    return [p for p in files_under(out) if "cells" in p.parts and p.name != "MANIFEST.sha256"]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The runner pointed at the fake study under profile ``t`` (params/t.yaml = ``text``); returns the out dir."""
    def make(text: str | None = None) -> Path:
        fake_profile(tmp_path, monkeypatch, {"fake": FakeStudy()}, text)
        return tmp_path / "out"
    return make


@pytest.fixture
def real(tmp_path, monkeypatch, tiny_glue_root):
    """A profile ``t`` of the real studies in tmp_path/params (never the repo's params/), a tiny SST-2 data root,
    outputs under tmp_path/out."""
    def make(text: str) -> Path:
        params = tmp_path / "params"
        params.mkdir(exist_ok=True)
        (params / "t.yaml").write_text(text)
        monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: params)
        monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "out"))
        monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(tiny_glue_root))
        return tmp_path / "out"
    return make


def rp(extra: str) -> str:
    """A random_pruning section on the tiny data, with ``extra`` keys (YAML, two-space indented lines)."""
    return 'random_pruning:\n  tasks: ["SST-2"]\n' + extra


CHECK_RP = ["--profile", "t", "--check", "--only", "random_pruning"]


# ---------------------------------------------------------------------------------------------- runner options

@pytest.mark.parametrize("option,values", [
    ("--profile", ["t", "t"]),
    ("--executor", ["local", "process"]),
    ("--address", ["auto", "auto"]),
    ("--jobs", ["1", "2"]),
    ("--gpu-tflops", ["100", "200"]),
    ("--cpu-gflops", ["58", "60"]),
])
def test_single_value_option_given_twice_is_an_error(fake, capsys, option, values):
    """README: an option that takes one value given twice is an error."""
    out = fake()
    argv = ["--plan"] + [a for v in values for a in (option, v)]
    if option != "--profile":
        argv += ["--profile", "t"]
    if option == "--address":
        argv += ["--executor", "ray"]
    refused(call(argv, capsys), option)
    assert not files_under(out)


def test_unknown_profile_lists_the_profiles_there_are(fake, tmp_path, capsys):
    """README: a profile with no params/<profile>.yaml is an error whose message lists those there are."""
    out = fake()
    (tmp_path / "params" / "other.yaml").write_text("fake: {}\n")
    refused(call(["--profile", "nosuch", "--plan"], capsys), "nosuch", "other")
    assert not files_under(out)


@pytest.mark.parametrize("name", ["t.yaml", "../params/t"])
def test_profile_name_that_is_a_file_name_or_path_is_refused(fake, capsys, name):
    """README: a profile is a name with a params/<profile>.yaml; outputs go to outputs/<study>/<profile>/ only."""
    out = fake()
    refused(call(["--profile", name, "--check"], capsys), name)
    assert not files_under(out)


@pytest.mark.parametrize("jobs", ["0", "-1", "two", "1.5"])
def test_jobs_must_be_a_positive_integer(fake, capsys, jobs):
    """README: --jobs N runs N studies side by side: N must be a positive integer, else an error naming --jobs."""
    out = fake()
    refused(call(["--profile", "t", "--check", "--jobs", jobs], capsys), "--jobs")
    assert not files_under(out)


def test_unknown_executor_is_refused(fake, capsys):
    """README: the executors are local, process and ray; another name is an error naming it."""
    out = fake()
    refused(call(["--profile", "t", "--plan", "--executor", "slurm"], capsys), "slurm")
    assert not files_under(out)


def test_address_without_ray_executor_is_refused(fake, capsys):
    """README: --address joins a Ray cluster (--executor ray); with the default executor it is an error naming it."""
    out = fake()
    refused(call(["--profile", "t", "--cells-only", "--address", "auto"], capsys), "--address")
    assert not files_under(out)


def test_address_with_process_executor_is_refused(fake, capsys):
    """README: --address is for --executor ray; with --executor process it is an error naming it."""
    out = fake()
    refused(call(["--profile", "t", "--cells-only", "--executor", "process", "--address", "auto"], capsys),
            "--address")
    assert not files_under(out)


@pytest.mark.parametrize("address", ["ray//head:10001", "http://head:10001", "ray://:10001", "head:notaport"])
def test_malformed_ray_address_stops_before_any_work(fake, capsys, address):
    """README: a wrong --address stops the run before any work, naming it."""
    out = fake()
    refused(call(["--profile", "t", "--cells-only", "--executor", "ray", "--address", address], capsys), address)
    assert not stored_cells(out)


def test_only_with_an_unknown_study_is_refused(fake, capsys):
    """README: --only STUDY ...: a study that is not in the registry is an error naming it."""
    out = fake()
    refused(call(["--profile", "t", "--plan", "--only", "fake", "nosuch_study"], capsys), "nosuch_study")
    assert not files_under(out)


def test_only_with_a_repeated_study_plans_it_once_or_refuses(fake, capsys):
    """README: a value is what the user wrote or an error: --only fake fake never plans (or runs) a study twice."""
    out = fake()
    rc, text = call(["--profile", "t", "--plan", "--only", "fake", "fake"], capsys)
    if rc not in (0, None):
        assert "fake" in text
    else:
        assert text.count("== fake") == 1, text
    assert not files_under(out)


@pytest.mark.parametrize("option", ["--gpu-tflops", "--cpu-gflops"])
@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_throughput_must_be_positive_and_finite(fake, capsys, option, value):
    """README/standard: --gpu-tflops / --cpu-gflops of 0, a negative, nan or inf are errors naming the option."""
    out = fake()
    refused(call(["--profile", "t", "--plan", "--plan-summary", option, value], capsys), option)
    assert not files_under(out)


@pytest.mark.parametrize("extra", [[], ["--plan-summary"]])
def test_plan_writes_nothing(fake, capsys, extra):
    """README: --plan (and --plan --plan-summary) sizes the job and runs nothing: nothing under outputs/."""
    out = fake()
    rc, text = call(["--profile", "t", "--plan", *extra], capsys)
    assert rc in (0, None), text
    assert "fake" in text
    assert not files_under(out)


def test_plan_of_a_real_profile_writes_nothing(tmp_path, monkeypatch, capsys):
    """README: `--profile quick --plan --plan-summary` runs nothing: no file under the outputs folder."""
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "out"))
    rc, text = call(["--profile", "quick", "--plan", "--plan-summary", "--only", "random_pruning",
                     "layer_strategies"], capsys)
    assert rc in (0, None), text
    assert "random_pruning" in text
    assert not files_under(tmp_path / "out")


def test_plan_summary_without_plan_is_refused(fake, capsys):
    """README/help: --plan-summary is a --plan option; alone it must not start a run (an error naming --plan)."""
    out = fake()
    refused(call(["--profile", "t", "--plan-summary"], capsys), "--plan")
    assert not files_under(out)


def test_throughput_without_plan_is_refused(fake, capsys):
    """Standard (a value is used as written or is an error): --gpu-tflops without --plan would be ignored."""
    out = fake()
    refused(call(["--profile", "t", "--cells-only", "--gpu-tflops", "50"], capsys), "--gpu-tflops")
    assert not stored_cells(out)


# --------------------------------------------------------------------------------------------------- profiles

def test_profile_unknown_key_says_did_you_mean(fake, capsys):
    """README: an unknown key in params/<profile>.yaml stops the run with a message (did you mean ...)."""
    out = fake("fake:\n  scal: 2.0\n")
    refused(call(["--profile", "t", "--check"], capsys), "scal", "scale")
    assert not files_under(out)


def test_profile_unknown_key_of_a_real_study(real, capsys):
    """README: an unknown key (train_szie) stops the run at once, naming it and suggesting train_size."""
    real(rp("  train_szie: 48\n"))
    refused(call(CHECK_RP, capsys), "train_szie", "train_size")


def test_profile_unknown_study_section_is_refused(fake, capsys):
    """README: an unknown key stops the run: a section for a study that does not exist is named."""
    out = fake("fake: {}\nfakee: {}\n")
    refused(call(["--profile", "t", "--check"], capsys), "fakee")
    assert not files_under(out)


def test_profile_string_for_float_is_refused(fake, capsys):
    """README: every parameter is typed and checked: a string for a float is an error naming it."""
    out = fake('fake:\n  scale: "2.0"\n')
    refused(call(["--profile", "t", "--check"], capsys), "scale")
    assert not files_under(out)


def test_profile_string_for_int_is_refused(real, capsys):
    """README: a wrong type (a string for an int) stops the run, naming the parameter."""
    real(rp('  epochs: "3"\n'))
    refused(call(CHECK_RP, capsys), "epochs")


def test_profile_float_for_int_is_refused(real, capsys):
    """README: a wrong type (1.5 for an int) stops the run, naming the parameter."""
    real(rp("  epochs: 1.5\n"))
    refused(call(CHECK_RP, capsys), "epochs")


def test_profile_bool_for_int_is_refused(real, capsys):
    """README: a wrong type (true for an int; bool is an int in Python) stops the run, naming the parameter."""
    real(rp("  epochs: true\n"))
    refused(call(CHECK_RP, capsys), "epochs")


def test_profile_quoted_yes_for_bool_is_refused(real, capsys):
    """README: a wrong type (the string "yes" for a bool) stops the run, naming the parameter."""
    real(rp('  freeze_word_embeddings: "yes"\n'))
    refused(call(CHECK_RP, capsys), "freeze_word_embeddings")


def test_profile_yaml_no_for_a_string_is_refused(fake, capsys):
    """README: a wrong type: YAML's bare `no` (a boolean) for a string (device) is an error naming it or its line."""
    out = fake("fake:\n  device: no\n")
    rc, text = call(["--profile", "t", "--check"], capsys)
    refused((rc, text))
    assert "device" in text or "line 2" in text, text
    assert not files_under(out)


def test_profile_yaml_bool_in_a_string_list_is_refused(fake, capsys):
    """README: a wrong type: `fail: [no]` reads as [False], not strings; an error naming fail or its line."""
    out = fake("fake:\n  fail: [no]\n")
    rc, text = call(["--profile", "t", "--check"], capsys)
    refused((rc, text))
    assert "fail" in text or "line 2" in text, text
    assert not files_under(out)


def test_profile_1e_minus_4_is_the_number_or_an_error(real, capsys):
    """Standard: `lr: 1e-4` (a string to YAML) is either 0.0001 as written or an error naming lr, never a string."""
    from headprune_utils.studies import get_study
    from headprune_utils.studies.config import validate

    text = rp("  lr: 1e-4\n")
    real(text)
    rc, said = call(CHECK_RP, capsys)
    if rc in (0, None):
        cfg = validate(get_study("random_pruning").Config, yaml.safe_load(text)["random_pruning"])
        assert isinstance(cfg.lr, float) and cfg.lr == pytest.approx(1e-4)
    else:
        assert "lr" in said


def test_profile_1e3_for_an_int_is_the_number_or_an_error(real, capsys):
    """Standard: `train_size: 1e3` (a string to YAML) is 1000 as written or an error naming train_size."""
    from headprune_utils.studies import get_study
    from headprune_utils.studies.config import validate

    text = rp("  train_size: 1e3\n")
    real(text)
    rc, said = call(CHECK_RP, capsys)
    if rc in (0, None):
        cfg = validate(get_study("random_pruning").Config, yaml.safe_load(text)["random_pruning"])
        assert cfg.train_size == 1000 and isinstance(cfg.train_size, int)
    else:
        assert "train_size" in said


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_profile_non_finite_float_is_refused(fake, capsys, value):
    """Standard: NaN and inf in a profile are errors naming the parameter, not values."""
    out = fake(f"fake:\n  scale: {value}\n")
    refused(call(["--profile", "t", "--check"], capsys), "scale")
    assert not files_under(out)


def test_profile_nan_learning_rate_is_refused(real, capsys):
    """Standard: `lr: .nan` is an error naming lr."""
    real(rp("  lr: .nan\n"))
    refused(call(CHECK_RP, capsys), "lr")


def test_profile_nan_in_a_list_is_refused(real, capsys):
    """Standard: a NaN inside a list (fractions) is an error naming the parameter."""
    real(rp("  fractions: [0.5, .nan]\n"))
    refused(call(CHECK_RP, capsys), "fractions")


def test_profile_unknown_task_is_refused(real, capsys):
    """README: an unknown task stops the run at once, naming it."""
    real('random_pruning:\n  tasks: ["SST-3"]\n')
    refused(call(CHECK_RP, capsys), "SST-3")


def test_profile_unknown_model_is_refused(real, capsys):
    """README: an unknown model stops the run at once with a message naming it."""
    real(rp("  model: no-such-model-xyz\n"))
    refused(call(CHECK_RP, capsys), "no-such-model-xyz")


@pytest.mark.parametrize("value", ["[1.5]", "[-0.1]"])
def test_profile_impossible_pruning_fraction_is_refused(real, capsys, value):
    """README: an impossible budget (more heads than the model has) stops the run, naming the parameter."""
    real(rp(f"  fractions: {value}\n"))
    refused(call(CHECK_RP, capsys), "fractions")


def test_profile_impossible_strategy_budget_is_refused(real, capsys):
    """README: an impossible budget (pruning 150 heads of 72: a budget above 1) stops the run, naming it."""
    real('layer_strategies:\n  tasks: ["SST-2"]\n  budgets: [2.08]\n')
    refused(call(["--profile", "t", "--check", "--only", "layer_strategies"], capsys), "budgets")


@pytest.mark.parametrize("key,value", [("train_size", "-5"), ("batch_size", "0")])
def test_profile_impossible_size_is_refused(real, capsys, key, value):
    """README: an impossible value (a negative training set, a batch of 0) stops the run, naming it."""
    real(rp(f"  {key}: {value}\n"))
    refused(call(CHECK_RP, capsys), key)


def test_profile_duplicate_seeds_are_refused(real, capsys):
    """Standard (nothing mixed): `seeds: [0, 0]` would plan every cell of seed 0 twice: an error naming seeds."""
    real(rp("  seeds: [0, 0]\n"))
    refused(call(CHECK_RP, capsys), "seeds")


def test_profile_duplicate_key_is_refused(fake, capsys):
    """Standard (a value is what the user wrote): a key written twice in a section is an error naming it."""
    out = fake("fake:\n  scale: 2.0\n  scale: 3.0\n")
    refused(call(["--profile", "t", "--check"], capsys), "scale")
    assert not files_under(out)


def test_profile_duplicate_section_is_refused(fake, capsys):
    """Standard (a value is what the user wrote): a study's section written twice is an error naming it."""
    out = fake("fake:\n  scale: 2.0\nfake:\n  scale: 3.0\n")
    refused(call(["--profile", "t", "--check"], capsys), "fake")
    assert not files_under(out)


def test_profile_empty_file_is_refused_naming_it(fake, capsys):
    """README: a profile is params/<profile>.yaml with a section per study: an empty file is an error naming it."""
    out = fake("")
    refused(call(["--profile", "t", "--check"], capsys), "t.yaml")
    assert not files_under(out)


def test_profile_top_level_list_is_refused_naming_it(fake, capsys):
    """README: a profile maps studies to sections: a top-level list is an error naming the file, not a crash."""
    out = fake("- fake\n- scale: 2.0\n")
    refused(call(["--profile", "t", "--check"], capsys), "t.yaml")
    assert not files_under(out)


def test_profile_section_that_is_not_a_mapping_is_refused(fake, capsys):
    """README: a study's section holds its parameters: a list there is an error naming the study."""
    out = fake("fake: [1, 2]\n")
    refused(call(["--profile", "t", "--check"], capsys), "fake")
    assert not files_under(out)


def test_profile_invalid_yaml_is_refused_naming_the_file(fake, capsys):
    """README: a broken profile stops the run with a message that says what is wrong (the file)."""
    out = fake("fake: {scale: [1,}\n")
    refused(call(["--profile", "t", "--check"], capsys), "t.yaml")
    assert not files_under(out)


# ------------------------------------------------------------------------------ papermill notebook parameters

def papermill(tmp_path, *params: str) -> tuple[int, str, list[dict]]:
    """01_random_pruning.ipynb by papermill with ``params`` (-p NAME VALUE ...), outputs in tmp_path/out."""
    env = {**os.environ, "HEADPRUNE_OUTPUT_DIR": str(tmp_path / "out"), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HEADPRUNE_DATA_DIR": str(tmp_path / "no_data")}
    nb_out = tmp_path / "executed.ipynb"
    argv = [sys.executable, "-m", "papermill", str(REPO / "notebooks" / "01_random_pruning.ipynb"), str(nb_out),
            "-k", "python3", "--cwd", str(REPO / "notebooks"), *params]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240, cwd=REPO)
    errors = []
    if nb_out.exists():
        nb = json.loads(nb_out.read_text())
        errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    return proc.returncode, proc.stdout + proc.stderr, errors


def notebook_refused(result, name: str) -> None:
    rc, text, errors = result
    assert rc != 0, text[-2000:]
    said = " ".join(f"{e.get('ename')}: {e.get('evalue')}" for e in errors)
    assert name in said, f"the notebook's error does not name {name!r}: {said or text[-2000:]}"


def test_papermill_unknown_parameter_is_refused(tmp_path):
    """README: notebook parameters are typed and checked: an unknown name (-p trian_size 48) is an error naming it."""
    notebook_refused(papermill(tmp_path, "-p", "trian_size", "48"), "trian_size")
    assert not files_under(tmp_path / "out")


def test_papermill_wrong_type_is_refused(tmp_path):
    """README: a wrong type (-p train_size abc) stops the notebook before any work, naming the parameter."""
    notebook_refused(papermill(tmp_path, "-p", "train_size", "abc"), "train_size")
    assert not files_under(tmp_path / "out")


def test_papermill_nan_parameter_is_refused(tmp_path):
    """Standard: -p lr nan (papermill makes it float('nan')) is an error naming lr, before any work."""
    notebook_refused(papermill(tmp_path, "-p", "lr", "nan"), "lr")
    assert not files_under(tmp_path / "out")


def test_papermill_float_for_int_is_refused(tmp_path):
    """README: a wrong type (-p epochs 1.5 for an int) stops the notebook before any work, naming the parameter."""
    notebook_refused(papermill(tmp_path, "-p", "epochs", "1.5"), "epochs")
    assert not files_under(tmp_path / "out")


def test_papermill_parameter_file_section_with_unknown_key_is_refused(tmp_path):
    """README: `-f FILE` applies the file's section for the notebook's study: an unknown key there is named."""
    params = tmp_path / "mine.yaml"
    params.write_text('random_pruning:\n  trian_size: 48\nnmt_heads: {}\n')
    notebook_refused(papermill(tmp_path, "-f", str(params), "-p", "profile", "smoke"), "trian_size")
    assert not files_under(tmp_path / "out")


# ------------------------------------------------------------------------------------------------ add a study

@pytest.fixture
def outdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "out"))
    return tmp_path / "out"


def plan_refused(study, outdir, *words, cfg=None) -> None:
    with pytest.raises(Exception) as ei:
        run_study(study, cfg or FakeConfig(), "t")
    assert not isinstance(ei.value, CRASH), repr(ei.value)
    msg = str(ei.value).lower()
    assert any(w.lower() in msg for w in words), f"error does not name any of {words}: {ei.value!r}"
    assert not stored_cells(outdir), "cells were stored before the plan was refused"


class DuplicateKeys(FakeStudy):
    def plan(self, cfg):
        return [Cell({"name": "a0"}), Cell({"name": "a1"}), Cell({"name": "a0"})]


class DuplicateKeysAnotherOrder(FakeStudy):
    def plan(self, cfg):
        return [Cell({"name": "a0", "seed": 1}), Cell({"seed": 1, "name": "a0"})]


class DuplicateKeysSameNumber(FakeStudy):
    def plan(self, cfg):
        return [Cell({"name": "a", "fraction": 1}), Cell({"name": "a", "fraction": 1.0})]


class RequirementCycle(FakeStudy):
    def plan(self, cfg):
        a, b = Cell({"name": "a"}), Cell({"name": "b"})
        return [Cell(a.axes, requires=(b.key,)), Cell(b.axes, requires=(a.key,))]


class RequiresItself(FakeStudy):
    def plan(self, cfg):
        a = Cell({"name": "a0"})
        return [Cell(a.axes, requires=(a.key,))]


class RequiresMissing(FakeStudy):
    def plan(self, cfg):
        ghost = Cell({"name": "ghost"})
        return [Cell({"name": "a0"}), Cell({"name": "b"}, requires=(ghost.key,))]


class UnhashableGroup(FakeStudy):
    def plan(self, cfg):
        return [Cell({"name": "a0"}, group=["batch"]), Cell({"name": "a1"}, group=["batch"])]


class RequiresAString(FakeStudy):
    def plan(self, cfg):
        a = Cell({"name": "a0"})
        return [a, Cell({"name": "b"}, requires=a.key)]


class ListAxis(FakeStudy):
    def plan(self, cfg):
        return [Cell({"name": "a0", "fraction": [0.25, 0.5]})]


class NaNAxis(FakeStudy):
    def plan(self, cfg):
        return [Cell({"name": "a0", "fraction": float("nan")})]


def test_plan_with_an_unhashable_group_is_refused(outdir):
    """README: a cell's group names cells computed together (a hashable label): a list is an error naming group."""
    plan_refused(UnhashableGroup(), outdir, "group")


def test_plan_with_requires_as_a_bare_string_is_refused(outdir):
    """README: requires holds keys of cells: a bare string (not a tuple of keys) is an error naming it, not chars."""
    plan_refused(RequiresAString(), outdir, "requires", "name=a0")


def test_plan_with_a_list_valued_axis_is_refused(outdir):
    """README: a cell's axes are its key (scalars): a list-valued axis is an error naming it."""
    plan_refused(ListAxis(), outdir, "fraction")


def test_plan_with_a_nan_axis_is_refused(outdir):
    """Standard: non-finite numbers are errors: a NaN axis value (a key that equals nothing) is refused, named."""
    plan_refused(NaNAxis(), outdir, "fraction")


def test_study_name_that_is_a_path_is_refused(tmp_path, outdir):
    """README: results go to outputs/<name>/<profile>/: a study name that is a path is an error, nothing outside."""
    class Escaping(FakeStudy):
        name = "../escaped"

    with pytest.raises(Exception) as ei:
        run_study(Escaping(), FakeConfig(), "t")
    assert not isinstance(ei.value, CRASH), repr(ei.value)
    assert "escaped" in str(ei.value)
    assert not (tmp_path / "escaped").exists()
    assert not stored_cells(tmp_path)


def test_plan_with_duplicate_cell_keys_is_refused(outdir):
    """README: a cell's axes are its key: two cells with one key are an error naming it, before any work."""
    plan_refused(DuplicateKeys(), outdir, "a0")


def test_plan_with_duplicate_keys_in_another_axis_order_is_refused(outdir):
    """README: a cell's axes are its key: the same axes in another order are the same key, refused."""
    plan_refused(DuplicateKeysAnotherOrder(), outdir, "a0")


def test_plan_with_duplicate_keys_same_number_is_refused(outdir):
    """README: a cell's axes are its key, numbers compared as numbers (1 is 1.0): such cells clash, refused."""
    plan_refused(DuplicateKeysSameNumber(), outdir, "name=a")


def test_plan_with_a_requirement_cycle_is_refused(outdir):
    """README: a cell starts only after the cells it requires: a cycle is an error naming its cells."""
    plan_refused(RequirementCycle(), outdir, "cycle", "name=a", "name=b")


def test_plan_with_a_cell_requiring_itself_is_refused(outdir):
    """README: a cell starts only after the cells it requires: a cell requiring itself is an error."""
    plan_refused(RequiresItself(), outdir, "a0")


def test_plan_requiring_a_missing_cell_is_refused(outdir):
    """README: `requires` holds keys of cells of the same study: a missing one is an error naming it."""
    plan_refused(RequiresMissing(), outdir, "ghost")


@pytest.mark.parametrize("flops", [-1e9, float("nan"), float("inf")])
def test_cell_cost_must_be_finite_and_non_negative(outdir, flops):
    """README: a cell's cost is estimated FLOPs: negative, NaN or inf is an error naming the cost."""
    class BadCost(FakeStudy):
        def plan(self, cfg):
            return [Cell({"name": "a0"}, cost=Cost(flops))]

    plan_refused(BadCost(), outdir, "cost", "flop")


@pytest.mark.parametrize("scale", [float("nan"), "2"], ids=["nan", "string"])
def test_bad_config_value_is_refused_before_any_cell(outdir, scale):
    """README/standard: every parameter is typed and checked before any work: scale=NaN or "2" is an error naming it."""
    plan_refused(FakeStudy(), outdir, "scale", cfg=FakeConfig(scale=scale))


def test_config_of_another_study_is_refused(outdir):
    """README: a study's parameters are its Config: another dataclass is an error naming the Config, not a crash."""
    @dataclass(frozen=True)
    class Other:
        n: int = 2
        device: str = "cpu"
        progress: bool = False

    plan_refused(FakeStudy(), outdir, "config", cfg=Other())


class NaNResult(FakeStudy):
    def run(self, ctx, cells, inputs):
        for cell, result in super().run(ctx, cells, inputs):
            yield cell, ({**result, "value": float("nan")} if cell["name"] == "a1" else result)


class InfResult(FakeStudy):
    def run(self, ctx, cells, inputs):
        for cell, result in super().run(ctx, cells, inputs):
            yield cell, ({**result, "value": float("inf")} if cell["name"] == "a1" else result)


@pytest.mark.parametrize("study", [NaNResult(), InfResult()], ids=["nan", "inf"])
def test_non_finite_result_is_an_error_not_a_stored_result(outdir, study):
    """Standard: a non-finite result is an error naming its cell, never stored (nor fed to b, which requires it)."""
    with pytest.raises(Exception) as ei:
        run_study(study, FakeConfig(), "t")
    assert not isinstance(ei.value, CRASH), repr(ei.value)
    assert "a1" in str(ei.value)
    for p in stored_cells(outdir):
        body = p.read_bytes()
        assert b"NaN" not in body and b"Infinity" not in body, p


class ForeignCell(FakeStudy):
    def run(self, ctx, cells, inputs):
        yield from super().run(ctx, cells, inputs)
        yield Cell({"name": "stranger"}), {"value": 1.0}


def test_result_for_a_cell_not_in_the_plan_is_refused(outdir):
    """README: run computes the cells it is given; a result for a cell outside the plan is an error, not stored."""
    with pytest.raises(Exception) as ei:
        run_study(ForeignCell(), FakeConfig(), "t")
    assert not isinstance(ei.value, CRASH), repr(ei.value)
    assert "stranger" in str(ei.value)
    assert not [p for p in stored_cells(outdir) if "stranger" in p.read_text(errors="replace")]


class TwiceYielded(FakeStudy):
    def run(self, ctx, cells, inputs):
        results = list(super().run(ctx, cells, inputs))
        yield from results
        cell, result = results[0]
        yield cell, {**result, "value": -1.0}


def test_a_cell_yielded_twice_is_not_silently_overwritten(outdir):
    """Standard (nothing silently overwritten): a second, different result for one cell is an error naming it."""
    with pytest.raises(Exception) as ei:
        run_study(TwiceYielded(), FakeConfig(), "t")
    assert not isinstance(ei.value, CRASH), repr(ei.value)
    assert "a0" in str(ei.value) or "a1" in str(ei.value)


class DropsACell(FakeStudy):
    def run(self, ctx, cells, inputs):
        for cell, result in super().run(ctx, cells, inputs):
            if cell["name"] != "a3":
                yield cell, result


def test_a_cell_the_study_never_yields_is_reported(outdir):
    """README: a cell that fails is reported by key: a batch that silently skips a3 is not a complete run."""
    with pytest.raises(Exception) as ei:
        run_study(DropsACell(), FakeConfig(), "t")
    assert not isinstance(ei.value, CRASH), repr(ei.value)
    assert "a3" in str(ei.value)


def test_unknown_executor_in_run_study_is_refused(outdir):
    """README: run_study(..., executor=) takes local, process or ray; another is an error naming it."""
    with pytest.raises(Exception) as ei:
        run_study(FakeStudy(), FakeConfig(), "t", executor="slurm")
    assert not isinstance(ei.value, CRASH), repr(ei.value)
    assert "slurm" in str(ei.value)
    assert not stored_cells(outdir)


def test_address_with_local_executor_in_run_study_is_refused(outdir):
    """README: an address is a Ray cluster's: with the local executor it is an error naming it, before any work."""
    with pytest.raises(Exception) as ei:
        run_study(FakeStudy(), FakeConfig(), "t", executor="local", address="ray://head:10001")
    assert not isinstance(ei.value, CRASH), repr(ei.value)
    assert "address" in str(ei.value).lower()
    assert not stored_cells(outdir)


def test_malformed_address_in_run_study_stops_before_any_work(outdir):
    """README: a wrong address stops the run before any work, naming it."""
    with pytest.raises(Exception) as ei:
        run_study(FakeStudy(), FakeConfig(), "t", executor="ray", address="ray//head:10001")
    assert not isinstance(ei.value, CRASH), repr(ei.value)
    assert "ray//head:10001" in str(ei.value)
    assert not stored_cells(outdir)


@pytest.mark.parametrize("profile", ["../escape", "a/b", ""])
def test_run_study_profile_that_is_a_path_is_refused(outdir, profile):
    """README: results go to outputs/<name>/<profile>/: a profile that is a path (or empty) is an error naming it."""
    with pytest.raises(Exception) as ei:
        run_study(FakeStudy(), FakeConfig(), profile)
    assert not isinstance(ei.value, CRASH), repr(ei.value)
    assert "profile" in str(ei.value).lower()
    assert not stored_cells(outdir.parent)


def test_study_not_importable_on_a_process_pool_is_refused_naming_it(outdir):
    """README: on a process pool the study must be importable ("module:Class"): a local class is named at once."""
    class LocalStudy(FakeStudy):
        name = "local_study"

    with pytest.raises(Exception) as ei:
        run_study(LocalStudy(), FakeConfig(), "t", executor="process")
    assert not isinstance(ei.value, CRASH), repr(ei.value)
    assert "LocalStudy" in str(ei.value)
    assert not stored_cells(outdir)


class NeedsArguments(FakeStudy):
    def __init__(self, scale):
        self.scale = scale


@pytest.mark.parametrize("ref,word", [
    ("no_such_study", "no_such_study"),
    ("fake_studies:NoSuchClass", "NoSuchClass"),
    ("no_such_module_xyz:Study", "no_such_module_xyz"),
    ("fake_studies:FakeConfig", "FakeConfig"),
    ("test_readme_runner:NeedsArguments", "NeedsArguments"),
])
def test_get_study_with_a_bad_reference_names_it(ref, word):
    """README: a worker finds a study by name or "module:Class" (a Study with a no-argument constructor)."""
    from headprune_utils.studies import get_study

    with pytest.raises(Exception) as ei:
        get_study(ref)
    assert word in str(ei.value)


def test_claim_rule_must_be_a_rule_object():
    """README: a claim's rule is one of claims.Superiority, Equivalence, ...: a string is an error naming rule."""
    from headprune_utils.analysis import claims

    with pytest.raises((TypeError, ValueError)) as ei:
        claims.Claim("x.rule", "nobody", "a claim", "superiority", figure="none")
    assert "rule" in str(ei.value).lower()


def test_claim_gates_must_be_gate_objects():
    """README: gates are objects from preconditions.py or preconditions.Check: a string is an error naming gates."""
    from headprune_utils.analysis import claims

    with pytest.raises((TypeError, ValueError)) as ei:
        claims.Claim("x.gates", "nobody", "a claim", claims.Superiority(), gates=("converged",), figure="none")
    assert "gate" in str(ei.value).lower()


def test_claim_with_nan_alpha_is_refused():
    """Standard: non-finite numbers are errors: a rule with alpha = NaN is refused, naming alpha."""
    from headprune_utils.analysis import claims, margins

    with pytest.raises((TypeError, ValueError)) as ei:
        claims.NonInferiority(margins.TASK_SCORE, alpha=float("nan"))
    assert "alpha" in str(ei.value).lower()
