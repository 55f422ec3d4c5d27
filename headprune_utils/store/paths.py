"""The one module that knows where outputs go.

Layout, for a study ``S`` run with profile ``P``::

    outputs/S/P/S.ipynb          the executed notebook (papermill)
    outputs/S/P/figures/*.png    figures; each with its data in tables/
    outputs/S/P/tables/*.csv     tidy tables
    outputs/S/P/run_meta.json    parameters, seed, device, package versions, git revision, durations
    outputs/S/P/cells/*.json     one finished result cell each (resume state; not committed)
    outputs/S/P/quarantine/      cell files that could not be read (kept for inspection; recomputed)
    outputs/S/P.staging/         while the batch runner executes the notebook: its figures, tables, metrics and
                                 run metadata, swapped into outputs/S/P/ only when the whole notebook succeeded
    outputs/S/P/cache/           a study's own model caches (not committed)
    outputs/_finetuned/P/        fine-tuned unpruned models shared by every study of profile P (not committed)
    outputs/_nmt/P/              trained translation models (+ tokenizer, meta, evaluations) of profile P (not committed)
    outputs/report/              the static HTML report (``make report``): index.html, P/index.html, P/S.html
    outputs/SUMMARY.md           the cross-study findings table of the quick profile (SUMMARY-P.md for others)

The root is ``$HEADPRUNE_OUTPUT_DIR`` when set, else ``outputs/`` of the project checkout (the
folder holding ``pyproject.toml`` above this package), else ``./outputs``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # headprune_utils/ (this module is in headprune_utils/store/)
STAGED_ENV = "HEADPRUNE_STAGED_OUTPUTS"
INTERIM_FILE = "interim.json"  # beside an interim render's tables: the selection it covers (run.execution)
# what a notebook run writes besides its cells: swapped in as a whole (StudyPaths.staging -> dir)
RUN_OUTPUTS = ("figures", "tables", "metrics.json", "run_meta.json")


def project_root() -> Path:
    """The checkout holding this package (editable install), else the current directory."""
    candidate = PACKAGE_DIR.parent
    if (candidate / "pyproject.toml").exists() and (candidate / "notebooks").is_dir():
        return candidate
    return Path.cwd()


def outputs_root() -> Path:
    env = os.environ.get("HEADPRUNE_OUTPUT_DIR")
    return Path(env) if env else project_root() / "outputs"


def report_dir() -> Path:
    """The static HTML report's root (``outputs/report/``)."""
    return outputs_root() / "report"


def notebooks_dir() -> Path:
    return project_root() / "notebooks"


def params_dir() -> Path:
    return project_root() / "params"


PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a folder name of one level: a profile's, a study's
_PROFILE_NAME = PLAIN_NAME
_RESERVED = (".staging", ".bak-", ".replaced-", ".failed", ".running")  # the runner's own folder and file names


def profile_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a profile (its folder ``outputs/<study>/<name>/`` and file ``params/<name>.yaml``),
    or None: a plain name of letters, digits, ``_``, ``-`` and ``.``, starting with a letter or digit, and none of
    the runner's own suffixes. So no profile writes outside ``outputs/`` or into another profile's folder."""
    if not isinstance(name, str) or not _PROFILE_NAME.fullmatch(name):
        return (f"{name!r} is not a profile name: a profile is a plain name (letters, digits, '_', '-', '.', starting "
                "with a letter or digit; no '/' or '..'), its parameters in params/<name>.yaml")
    if any(r in name for r in _RESERVED):
        return f"{name!r} is not a profile name: it holds one of the runner's own suffixes ({', '.join(_RESERVED)})"
    return None


@dataclass(frozen=True)
class StudyPaths:
    """Every path of one study run. Creates nothing until :meth:`ensure` is called."""

    study: str
    profile: str
    root: Path | None = None
    # outputs (figures, tables, metrics, run metadata) to the staging folder: set for the notebooks the batch
    # runner executes (``HEADPRUNE_STAGED_OUTPUTS=1`` in their kernels), which swaps them in on success
    staged: bool = field(default_factory=lambda: os.environ.get(STAGED_ENV) == "1")

    def __post_init__(self):
        problem = profile_name_problem(self.profile)
        if problem:
            raise ValueError(problem)

    @property
    def dir(self) -> Path:
        return (self.root or outputs_root()) / self.study / self.profile

    @property
    def staging(self) -> Path:
        return self.dir.with_name(f"{self.profile}.staging")

    @property
    def out(self) -> Path:
        """Where this run's figures, tables, metrics and metadata go (``dir``, or ``staging`` when staged)."""
        return self.staging if self.staged else self.dir

    @property
    def notebook(self) -> Path:
        return self.dir / f"{self.study}.ipynb"

    @property
    def figures(self) -> Path:
        return self.out / "figures"

    @property
    def tables(self) -> Path:
        return self.out / "tables"

    @property
    def cells(self) -> Path:
        return self.dir / "cells"

    @property
    def cache(self) -> Path:
        return self.dir / "cache"

    @property
    def finetuned_cache(self) -> Path:
        """Fine-tuned unpruned checkpoints shared by every study of this profile (keyed by what training depends on)."""
        return (self.root or outputs_root()) / "_finetuned" / self.profile

    @property
    def nmt_cache(self) -> Path:
        """Trained translation models of this profile, one folder each keyed by its training parameters, shared
        by every study that needs them (``studies.nmt_heads.model_folder``)."""
        return (self.root or outputs_root()) / "_nmt" / self.profile

    def finetuned_model(self, task: str, seed: int, key: str) -> Path:
        return finetuned_model(self.finetuned_cache, task, seed, key)

    def masked_scores(self, task: str, seed: int, key: str) -> Path:
        return masked_scores(self.finetuned_cache, task, seed, key)

    def nmt_model(self, corpus: str, model_seed: int, key: str) -> Path:
        return nmt_model(self.nmt_cache, corpus, model_seed, key)

    @property
    def meta(self) -> Path:
        return self.out / "run_meta.json"

    @property
    def metrics(self) -> Path:
        """Headline numbers the notebook records last, for tests and the runner to read back."""
        return self.out / "metrics.json"

    def figure(self, name: str) -> Path:
        return self.figures / f"{name}.png"

    def table(self, name: str) -> Path:
        return self.tables / f"{name}.csv"

    def ensure(self) -> "StudyPaths":
        """Create the folders of the run (raises :class:`OutputsUnwritable` naming the folder, before anything is
        created, when one of them cannot be written)."""
        folders = (self.figures, self.tables, self.cells, self.cache)
        for d in folders:
            problem = folder_problem(d)
            if problem:
                raise OutputsUnwritable(f"the outputs of {self.study} (profile {self.profile}): {problem}")
        for d in folders:
            d.mkdir(parents=True, exist_ok=True)
        return self


# The entries of the shared caches (the folder: ``StudyPaths.finetuned_cache`` / ``nmt_cache``). ``key``: the
# fingerprint of what the entry depends on, so an entry is never stale, only absent (see caches.py).

def finetuned_model(cache_dir: Path, task: str, seed: int, key: str) -> Path:
    """A fine-tuned unpruned classifier (``key``: the fingerprint of what training depends on)."""
    return Path(cache_dir) / f"finetuned__task={task}__seed={seed}__{key}.pt"


def masked_scores(cache_dir: Path, task: str, seed: int, key: str) -> Path:
    """Dev scores of a (task, seed, mask) fine-tuned with the mask fixed, shared by studies 1, 2 and 5."""
    return Path(cache_dir) / "masked" / f"scores__task={task}__seed={seed}__{key}.json"


def nmt_model(cache_dir: Path, corpus: str, model_seed: int, key: str) -> Path:
    """A trained translation model's folder (model, tokenizer, meta, ``evals/``)."""
    return Path(cache_dir) / f"{corpus}__seed={model_seed}__{key}"


def relative_to_project(path: Path) -> str:
    """A path as written into committed files: relative to the project root when possible."""
    try:
        return str(Path(path).resolve().relative_to(project_root().resolve()))
    except ValueError:
        return Path(path).name


OUTPUT_ENV = "HEADPRUNE_OUTPUT_DIR"


def shown_path(path: Path) -> str:
    """A path as a message shows it without a machine's own folders (a message may land in an executed notebook,
    which is committed): relative to the project root; under an outputs root set by ``HEADPRUNE_OUTPUT_DIR``
    elsewhere, as ``$HEADPRUNE_OUTPUT_DIR/<study>/<profile>/...``; else its last four parts (``.../<study>/<profile>/
    cells/<file>``)."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(project_root().resolve()))
    except ValueError:
        pass
    env = os.environ.get(OUTPUT_ENV)
    if env:
        try:
            rest = path.resolve().relative_to(Path(env).resolve())
            return f"${OUTPUT_ENV}" + (f"/{rest.as_posix()}" if rest.parts else "")
        except ValueError:
            pass
    parts = path.parts[-4:]
    return ".../" + "/".join(parts) if len(path.parts) > 4 else str(path)


def _in_project(path: Path) -> str:
    """``path`` relative to the project root when it is inside it, else as it is (for the terminal)."""
    try:
        return str(Path(path).absolute().relative_to(project_root().absolute()))
    except ValueError:
        return str(path)


class OutputsUnwritable(RuntimeError):
    """A folder a run writes cannot be written (a file in its way, or permissions); raised before anything is
    written there, naming the folder (and ``HEADPRUNE_OUTPUT_DIR`` when it is the culprit)."""


def _can_write(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def _why_not_writable(folder: Path) -> str:
    """Why a folder that :func:`_can_write` refuses cannot be written: a read-only file system (a disk remounted
    read-only after errors, a read-only mount), else its permissions."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "it is on a read-only file system"
    except (OSError, AttributeError):  # no statvfs (Windows)
        pass
    return "permissions"


def folder_problem(path: Path) -> str | None:
    """Why the folder ``path`` cannot be written, or None. Where it does not exist yet, its nearest existing parent
    is asked (the run creates the rest): a part of it that is a file, not a folder (or a link to nothing), or a
    folder without write permission. The message names that part; an outputs root set by ``HEADPRUNE_OUTPUT_DIR``
    that is (or lies under) the culprit is named as the variable."""
    p = Path(path).absolute()
    while not (p.exists() or p.is_symlink()) and p != p.parent:
        p = p.parent
    root = outputs_root().absolute()
    env = os.environ.get(OUTPUT_ENV)
    var = f"{OUTPUT_ENV}={env}: " if env and (p == root or p in root.parents) else ""
    if p.is_symlink() and not p.exists():
        return f"{var}{_in_project(p)} is a link to nothing (a broken symbolic link): nothing can be written under it"
    if not p.is_dir():
        fix = f"; set {OUTPUT_ENV} to a folder (created if it does not exist)" if var else ""
        return f"{var}{_in_project(p)} is a file, not a folder: the outputs cannot be written under it{fix}"
    if not _can_write(p):
        return f"{var}the folder {_in_project(p)} cannot be written ({_why_not_writable(p)})"
    return None


def shown_path(path: Path) -> str:
    """``path`` as messages print it: relative to the working directory (the absolute path where there is none,
    e.g. another drive)."""
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive
        return str(path)
