"""Every study notebook executed headlessly through papermill with the smoke profile."""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from headprune_utils.run import cli, notebooks, profiles
from headprune_utils.studies.config import ParameterError
from headprune_utils.store.paths import StudyPaths
from headprune_utils.studies import STUDIES

pytestmark = pytest.mark.smoke
# this machine's own absolute paths: the checkout, the interpreter, home, the temp folder
MACHINE_PATHS = re.compile("|".join(re.escape(p) for p in {
    str(Path(__file__).resolve().parents[2]), sys.prefix, str(Path.home()), tempfile.gettempdir()}) + "|site-packages")


def data_gaps() -> dict[str, str]:
    """Studies whose smoke parameters need data the current data root lacks (e.g. a root with GLUE but without
    multi30k/), with the check's message: they are skipped with that reason instead of failing the whole run."""
    gaps = {}
    for name in STUDIES:
        try:
            profiles.validate_profile("smoke", [name])
        except ParameterError as exc:
            if "HEADPRUNE_DATA_DIR" not in str(exc):
                raise  # a broken smoke profile is an error, not missing data
            gaps[name] = str(exc)
    return gaps


@pytest.fixture(scope="module")
def smoke_outputs(tmp_path_factory, data_root):
    out = tmp_path_factory.mktemp("outputs")
    mp = pytest.MonkeyPatch()
    mp.setenv("HEADPRUNE_OUTPUT_DIR", str(out))
    mp.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    try:
        gaps = data_gaps()
        runnable = [name for name in STUDIES if name not in gaps]
        code = cli.main(["--profile", "smoke", "--no-progress", "--only", *runnable]) if runnable else 0
    finally:
        mp.undo()
    return code, out, gaps


@pytest.mark.parametrize("name", list(STUDIES))
def test_notebook_runs_and_writes_its_outputs(smoke_outputs, name):
    code, out, gaps = smoke_outputs
    if name in gaps:
        pytest.skip(f"data missing for {name}: {gaps[name]}")
    assert code == 0
    paths = StudyPaths(name, "smoke", root=out)
    nb = nbformat.read(paths.notebook, as_version=4)
    assert nb.metadata["papermill"]["parameters"]["profile"] == "smoke"
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            assert o.get("output_type") != "error", o
            text = json.dumps(o)
            assert not MACHINE_PATHS.search(text), f"machine-specific path in an output: {text[:300]}"
            # every figure passes the layout checks (headprune_utils/figures/layout.py) at smoke scale too
            assert "FigureLayoutWarning" not in text, text[:600]
    assert nb.metadata["papermill"]["input_path"].startswith("notebooks/")
    # "What this study found" right after the title, from the verdict table the run wrote
    found = [c for c in nb.cells if "findings-summary" in c.get("metadata", {}).get("tags", [])]
    assert len(found) == 1 and nb.cells[1] is found[0] and found[0].source.startswith("## What this study found")
    # the batch ends with the report of the profile: a page per study
    assert (out / "report" / "smoke" / f"{name}.html").exists()
    metrics = json.loads(paths.metrics.read_text())
    assert metrics["study"] == name and metrics["n_cells"] > 0
    assert list(paths.figures.glob("*.png")), "figures"
    for fig in paths.figures.glob("*.png"):
        assert paths.table(fig.stem).exists(), f"the data of {fig.name} is saved beside it"
    meta = json.loads(paths.meta.read_text())
    assert meta["profile"] == "smoke" and meta["git_revision"]
    for f in [paths.meta, paths.metrics, *paths.tables.glob("*.csv")]:
        assert not MACHINE_PATHS.search(f.read_text()), f"machine-specific path in {f.name}"


def test_a_failing_notebook_names_the_cell(tmp_path, monkeypatch, capsys):
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell("profile = 'x'")
    p.metadata["tags"] = ["parameters"]
    nb.cells = [p, nbformat.v4.new_code_cell("1 + 1"), nbformat.v4.new_code_cell("raise ValueError('broken on purpose')")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (tmp_path / "nb").mkdir()
    nbformat.write(nb, tmp_path / "nb" / "broken.ipynb")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "smoke.yaml").write_text("broken: {}\n")
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class NoParams:
        pass

    class Broken:
        name, notebook, Config = "broken", "broken.ipynb", NoParams

        def n_cells(self, cfg):
            return 0

    for module in (profiles, notebooks):  # where the runner looks the study up: validating it, executing it
        monkeypatch.setattr(module, "STUDIES", {"broken": Broken()})
    monkeypatch.setattr(notebooks, "notebooks_dir", lambda: tmp_path / "nb")
    monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: tmp_path / "p")
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "out"))
    earlier = tmp_path / "out" / "broken" / "smoke" / "broken.ipynb"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("an earlier, successful run")
    assert cli.main(["--profile", "smoke", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "broken.ipynb" in err, err
    assert "cell 3" in err, err
    assert "broken.ipynb" in err and "cell 3" in err and "raise ValueError" in err and "broken on purpose" in err
    assert (tmp_path / "out" / "broken" / "smoke" / "broken.failed.ipynb").exists(), "the failed notebook is kept"
    assert earlier.read_text() == "an earlier, successful run", "a failed run never replaces earlier results"
    assert "broken.failed.ipynb" in err


@pytest.mark.parametrize("fails", [True, False], ids=["analysis fails", "succeeds"])
def test_outputs_are_swapped_in_only_when_the_whole_notebook_succeeds(tmp_path, monkeypatch, capsys, fails):
    """Cells done, then the analysis fails: the earlier tables, metrics and notebook stay byte-identical."""
    nb = nbformat.v4.new_notebook()
    p = nbformat.v4.new_code_cell("profile = 'x'")
    p.metadata["tags"] = ["parameters"]
    nb.cells = [p, nbformat.v4.new_code_cell(
        "import pandas as pd\nfrom headprune_utils.studies.study_outputs import StudyOutputs\n"
        "out = StudyOutputs('staged', profile)\nout.table('t', pd.DataFrame({'a': [2]}))\nout.metrics(n=2)"),
        nbformat.v4.new_code_cell("raise KeyError('task')" if fails else "1 + 1")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (tmp_path / "nb").mkdir()
    nbformat.write(nb, tmp_path / "nb" / "staged.ipynb")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "smoke.yaml").write_text("staged: {}\n")
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class NoParams:
        pass

    class Staged:
        name, notebook, Config = "staged", "staged.ipynb", NoParams

        def n_cells(self, cfg):
            return 0

    for module in (profiles, notebooks):  # where the runner looks the study up: validating it, executing it
        monkeypatch.setattr(module, "STUDIES", {"staged": Staged()})
    monkeypatch.setattr(notebooks, "notebooks_dir", lambda: tmp_path / "nb")
    monkeypatch.setattr("headprune_utils.studies.config.params_dir", lambda: tmp_path / "p")
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "out"))
    final = tmp_path / "out" / "staged" / "smoke"
    (final / "tables").mkdir(parents=True)
    (final / "tables" / "t.csv").write_text("a\n1\n")
    (final / "tables" / "old.csv").write_text("a\n0\n")
    (final / "metrics.json").write_text('{"n": 1}\n')
    (final / "staged.ipynb").write_text("an earlier, successful run")
    before = {f.relative_to(final): f.read_bytes() for f in final.rglob("*") if f.is_file()}
    code = cli.main(["--profile", "smoke", "--no-progress"])
    after = {f.relative_to(final): f.read_bytes() for f in final.rglob("*") if f.is_file() and "failed" not in f.name}
    assert os.environ.get("HEADPRUNE_STAGED_OUTPUTS") is None, "the runner's own environment is restored"
    if fails:
        assert code == 1
        assert after == before, "a failed run leaves every earlier output byte-identical"
        err = capsys.readouterr().err
        assert "smoke.staging" in err and "untouched" in err
        assert (final.parent / "smoke.staging" / "tables" / "t.csv").read_text().strip().endswith("2")
    else:
        assert code == 0
        assert (final / "tables" / "t.csv").read_text().strip().endswith("2")
        assert not (final / "tables" / "old.csv").exists(), "the tables folder is replaced whole"
        assert json.loads((final / "metrics.json").read_text())["n"] == 2
        assert not (final.parent / "smoke.staging").exists()


def test_papermill_with_the_profile_file_as_users_run_it(tmp_path, data_root, monkeypatch):
    """`papermill notebooks/01_random_pruning.ipynb out.ipynb -f params/smoke.yaml -p profile smoke`: the file's
    section for the notebook's study is applied, the other sections ignored, the outputs land in the profile's
    folder; a changed parameter lands in a custom-<hash> folder instead."""
    import papermill as pm
    import yaml

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)  # as a user's shell has it: no quieting
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "outputs"))
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    params = {**yaml.safe_load((repo / "params" / "smoke.yaml").read_text()), "profile": "smoke"}
    out = tmp_path / "run.ipynb"
    pm.execute_notebook(str(repo / "notebooks" / "01_random_pruning.ipynb"), str(out), parameters=params,
                        kernel_name=notebooks.kernel_name(), cwd=str(repo), progress_bar=False, log_output=False,
                        kernel_manager_class=notebooks.ipc_kernel_manager())
    folder = tmp_path / "outputs" / "random_pruning" / "smoke"
    assert (folder / "tables" / "verdicts.csv").exists()
    from headprune_utils.studies.config import validate

    planned = STUDIES["random_pruning"].plan(validate(STUDIES["random_pruning"].Config, params["random_pruning"]))
    assert json.loads((folder / "metrics.json").read_text())["n_cells"] == len(planned), "the smoke section applied"
    printed = "".join(o.get("text", "") for c in nbformat.read(out, 4).cells for o in c.get("outputs", []))
    # the executed notebook shows no model-loading bars (frozen at 0% in a notebook) and says where values came from
    assert "Loading weights" not in printed and "it/s]" not in printed, printed[:2000]
    assert printed.count("parameters of random_pruning:") == 1 and "the file's section for this study" in printed
    pm.execute_notebook(str(repo / "notebooks" / "01_random_pruning.ipynb"), str(out),
                        parameters={**params, "tolerance": 0.05}, kernel_name=notebooks.kernel_name(), cwd=str(repo),
                        progress_bar=False, log_output=False, kernel_manager_class=notebooks.ipc_kernel_manager())
    custom = [p.name for p in (tmp_path / "outputs" / "random_pruning").iterdir() if p.name.startswith("custom-")]
    assert len(custom) == 1 and "is left untouched" in "".join(
        o.get("text", "") for c in nbformat.read(out, 4).cells for o in c.get("outputs", []))


def truncated(name: str, folder: Path) -> Path:
    """The study's notebook up to the cell that validates its parameters, then a cell printing them as JSON."""
    nb = nbformat.read(Path(__file__).resolve().parents[2] / "notebooks" / STUDIES[name].notebook, as_version=4)
    end = next(i for i, c in enumerate(nb.cells) if c.source.startswith("_namespace = dict(globals())"))
    nb.cells = nb.cells[:end + 1] + [nbformat.v4.new_code_cell(
        "import dataclasses, json\nprint('CFG=' + json.dumps({**dataclasses.asdict(cfg), 'profile': profile}))")]
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("name", list(STUDIES))
def test_papermill_command_explicit_y_and_p_win_over_the_file(name, tmp_path, data_root):
    """`papermill NB out.ipynb -f params/smoke.yaml -p profile smoke -y "train_size: N" -p dev_size M` from the
    command line: both explicit values win over the smoke section's, the rest of the section applies, the notebook
    says which came from where, and the outputs would go where custom parameters go."""
    import subprocess

    import yaml

    repo = Path(__file__).resolve().parents[2]
    section = yaml.safe_load((repo / "params" / "smoke.yaml").read_text())[name]
    train, dev = (200, 24) if name == "nmt_heads" else (40, 24)
    assert section["train_size"] != train and section["dev_size"] != dev
    env = {**os.environ, "HEADPRUNE_OUTPUT_DIR": str(tmp_path / "outputs"), "HEADPRUNE_DATA_DIR": str(data_root),
           "PYTHONPATH": str(repo)}
    out = tmp_path / "out.ipynb"
    cmd = [sys.executable, "-m", "papermill", str(truncated(name, tmp_path)), str(out),
           "-f", str(repo / "params" / "smoke.yaml"), "-p", "profile", "smoke", "-y", f"train_size: {train}",
           "-p", "dev_size", str(dev), "-k", notebooks.kernel_name(), "--cwd", str(repo)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = "".join(o.get("text", "") for c in nbformat.read(out, 4).cells for o in c.get("outputs", []))
    cfg = json.loads(printed.split("CFG=")[1].splitlines()[0])
    assert (cfg["train_size"], cfg["dev_size"]) == (train, dev), "explicit -y / -p lost to the file's section"
    for k, v in section.items():
        if k not in ("train_size", "dev_size"):
            assert cfg[k] == v, k
    assert f"train_size={train} (over the section's {section['train_size']})" in printed, printed
    assert f"dev_size={dev} (over the section's {section['dev_size']})" in printed, printed
    assert cfg["profile"].startswith("custom-") and f"outputs/{name}/smoke/ is left untouched" in printed
