"""Where a notebook's parameters come from: explicit values (papermill -p / -y, a top-level key) win over the study's
section of a profile file given with -f, which wins over the parameters cell; the notebook says which came from
where; a lost 'parameters' tag is refused before any work.

Each real study notebook is parameterised by papermill's own code (the injected cell where papermill puts it) and its
cells up to the parameters' validation run in an in-process IPython shell (the kernel's input history included):
seconds, not a study."""
from __future__ import annotations

import dataclasses
import io
from contextlib import redirect_stdout
from pathlib import Path

import nbformat
import pytest
import yaml
from IPython.core.interactiveshell import InteractiveShell
from papermill.parameterize import parameterize_notebook
from traitlets.config import Config

from headprune_utils.studies import STUDIES
from headprune_utils.studies.config import ParameterError, notebook_parameters, parameter_sources

REPO = Path(__file__).resolve().parents[2]
SMOKE = yaml.safe_load((REPO / "params" / "smoke.yaml").read_text())
# per study: a parameter its smoke section sets, and another valid value for it (an explicit -p)
EXPLICIT = {name: ("train_size", 48) for name in STUDIES}
EXPLICIT["nmt_heads"] = ("train_size", 200)


@pytest.fixture(scope="module")
def shell():
    c = Config()
    c.HistoryManager.hist_file = ":memory:"
    sh = InteractiveShell.instance(config=c)
    yield sh
    InteractiveShell.clear_instance()


def run_head(shell, name: str, parameters: dict | None, *, untag: bool = False, cells: list[str] = ()):
    """The study's notebook as papermill would execute it with ``parameters``, up to and including the cell that
    validates them; returns (the namespace, what it printed). ``untag``: the parameters cell lost its tag.
    ``cells``: more cells run before the notebook (e.g. an earlier run in the same kernel)."""
    nb = nbformat.read(REPO / "notebooks" / STUDIES[name].notebook, as_version=4)
    for c in nb.cells:  # as papermill's own reading does: every cell has tags
        c.metadata["tags"] = [t for t in c.metadata.get("tags", []) if not (untag and t == "parameters")]
    nb.metadata.setdefault("papermill", {})
    if parameters is not None:
        nb = parameterize_notebook(nb, parameters, kernel_name="python3", language="python")
    shell.reset(new_session=True)
    out = io.StringIO()
    with redirect_stdout(out):
        for source in [*cells, *(c.source for c in nb.cells if c.cell_type == "code")]:
            result = shell.run_cell(source, store_history=True)
            if result.error_in_exec is not None:
                raise result.error_in_exec
            if source.startswith("_namespace = dict(globals())") and source in (c.source for c in nb.cells):
                break
    return shell.user_ns, out.getvalue()


@pytest.fixture
def env(data_root, monkeypatch, tmp_path):
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "outputs"))


@pytest.mark.parametrize("name", list(STUDIES))
def test_an_explicit_parameter_wins_over_the_files_section(shell, env, name):
    """`papermill NB out.ipynb -f params/smoke.yaml -p profile smoke -p KEY VALUE` runs with VALUE, the rest of the
    smoke section applied, says so, and writes where custom parameters go."""
    key, value = EXPLICIT[name]
    section = SMOKE[name]
    assert section[key] != value
    ns, printed = run_head(shell, name, {**SMOKE, "profile": "smoke", key: value})
    cfg = ns["cfg"]
    assert getattr(cfg, key) == value, f"{key}: the file's section won over the explicit value"
    for k, v in section.items():
        if k != key:
            assert getattr(cfg, k) == (type(getattr(cfg, k))(v) if isinstance(v, (int, float)) else v), k
    assert f"{key}={value!r} (over the section's {section[key]!r})" in printed, printed
    assert "the file's section for this study" in printed and "ignored:" in printed
    assert ns["profile"].startswith("custom-"), "not the smoke profile's parameters: not its folder"
    assert f"outputs/{name}/smoke/ is left untouched" in printed
    assert printed.count(f"parameters of {name}:") == 1, "said once"


def test_an_explicit_value_equal_to_the_default_still_wins(shell, env):
    """-p train_size 300 (the parameters cell's own value) over the section's 32: explicit is what was written,
    not what differs from the default."""
    ns, printed = run_head(shell, "random_pruning", {**SMOKE, "profile": "smoke", "train_size": 300})
    assert ns["cfg"].train_size == 300 and "train_size=300 (over the section's 32)" in printed


def test_the_section_alone_is_the_profile(shell, env):
    ns, printed = run_head(shell, "random_pruning", {**SMOKE, "profile": "smoke"})
    assert ns["cfg"].train_size == 32 and ns["profile"] == "smoke", printed
    assert "explicit" not in printed.split("parameters of random_pruning:")[1].split("\n")[1]


def test_the_batch_runners_flat_parameters_are_the_profile(shell, env):
    """The runner injects the profile's section flat (every key explicit): the same configuration, the same folder."""
    ns, printed = run_head(shell, "random_pruning", {**SMOKE["random_pruning"], "profile": "smoke", "progress": False})
    assert ns["cfg"].train_size == 32 and ns["profile"] == "smoke", printed


def test_a_typo_is_an_error_naming_it(shell, env):
    with pytest.raises(ParameterError, match=r"unknown parameter\(s\) 'trian_size' \(did you mean 'train_size'\?\)"):
        run_head(shell, "random_pruning", {**SMOKE, "profile": "smoke", "trian_size": 48})


def test_a_lost_parameters_tag_is_refused_before_any_work(shell, env):
    """papermill then injects at the very top and the parameters cell sets every value back to its default (the
    quick defaults into quick/): refused, naming the tag."""
    with pytest.raises(ParameterError, match="lost its 'parameters' tag"):
        run_head(shell, "random_pruning", {**SMOKE, "profile": "smoke", "train_size": 48}, untag=True)
    with pytest.raises(ParameterError, match="lost its 'parameters' tag"):
        run_head(shell, "random_pruning", {"profile": "smoke"}, untag=True)


def test_no_injection_runs_the_parameters_cell(shell, env):
    """A notebook opened in JupyterLab and run: the parameters cell's values, no file, no refusal."""
    ns, printed = run_head(shell, "random_pruning", None)
    assert ns["cfg"].train_size == 300 and ns["profile"] == "quick", printed


def test_run_all_twice_in_one_kernel_keeps_an_edited_parameters_cell(shell, env):
    """Run All, edit the parameters cell, Run All again in the same kernel: the edited value, not the default
    (the names already existed before the first cell the second time)."""
    nb = nbformat.read(REPO / "notebooks" / STUDIES["random_pruning"].notebook, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    i = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells[i].source = nb.cells[i].source.replace('train_size: "Optional[int]" = 300', 'train_size: "Optional[int]" = 40')
    assert "= 40" in nb.cells[i].source
    shell.reset(new_session=True)
    with redirect_stdout(io.StringIO()):
        for source in code[:3] + [c.source for c in nb.cells if c.cell_type == "code"][:3]:
            assert shell.run_cell(source, store_history=True).error_in_exec is None
    assert shell.user_ns["cfg"].train_size == 40


def test_without_input_history_what_differs_from_the_default_is_explicit():
    """Outside IPython (no _i<N> history): a top-level value other than the default wins over the section."""
    before = {"x"}
    ns = {"x": 1, "train_size": 48, "seeds": [0, 1, 2], "random_pruning": {"train_size": 32, "seeds": [0, 1]},
          "layer_strategies": {"train_size": 16}, "profile": "smoke"}
    params, sources, section = parameter_sources(ns, before, study="random_pruning")
    assert params == {"train_size": 48, "seeds": [0, 1]}
    assert sources == {"train_size": "explicit", "seeds": "section"} and section["train_size"] == 32
    assert notebook_parameters(ns, before, study="random_pruning") == params


def test_every_notebook_validates_through_notebook_config():
    """The notebooks take their parameters through the one function that applies the precedence and says it."""
    for name, study in STUDIES.items():
        nb = nbformat.read(REPO / "notebooks" / study.notebook, as_version=4)
        sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert "notebook_config(study.STUDY, _namespace, _globals_before_parameters)" in sources, name
        assert "notebook_parameters(" not in sources, name
        fields = {f.name for f in dataclasses.fields(study.Config)}
        assert EXPLICIT[name][0] in fields and EXPLICIT[name][0] in SMOKE[name]


def test_the_runner_refuses_a_notebook_without_its_parameters_tag_before_starting_a_kernel(tmp_path, monkeypatch,
                                                                                          data_root):
    """The kernel refuses such a notebook only once it runs (after papermill's "Passed unknown parameter" lines, a
    staging folder and a .failed notebook left behind): the runner's checks name it first, and a --cells-only slice
    (no notebook runs) is not stopped by it."""
    from headprune_utils.run import notebooks as nbs
    from headprune_utils.run.preflight import preflight

    src = REPO / "notebooks" / STUDIES["random_pruning"].notebook
    nb = nbformat.read(src, as_version=4)
    for c in nb.cells:
        c.metadata["tags"] = [t for t in c.metadata.get("tags", []) if t != "parameters"]
    folder = tmp_path / "notebooks"
    folder.mkdir()
    nbformat.write(nb, folder / src.name)
    assert nbs.notebook_problem("random_pruning", src.name) is None  # the real one
    monkeypatch.setattr(nbs, "notebooks_dir", lambda: folder)
    monkeypatch.setenv("HEADPRUNE_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("HEADPRUNE_DATA_DIR", str(data_root))  # the profile's checks read the task data's place
    problem = nbs.notebook_problem("random_pruning", src.name)
    assert problem and "no cell tagged 'parameters'" in problem and src.name in problem
    plan = {"random_pruning": dict(SMOKE["random_pruning"])}
    assert any("no cell tagged 'parameters'" in p for p in preflight(plan, "smoke", stale=False))
    assert not any("parameters" in p for p in preflight(plan, "smoke", stale=False, writes="cells"))
    (folder / src.name).write_text("{ not json")
    assert "cannot be read" in nbs.notebook_problem("random_pruning", src.name)
