"""GLUE task registry and data loading for headprune.

Data come from a local folder in the classic ``download_glue_data.py`` layout
(``<root>/glue/<TASK>/{train,dev}.tsv``; MNLI dev is ``dev_matched.tsv``) or,
failing that, from the Hugging Face hub dataset ``nyu-mll/glue``.  Labels are
always the hub's integer ids (STS-B: float similarity scores in [0, 5]), so
local and hub data are interchangeable.

The local root is taken from the ``data_dir`` argument, else from the
environment variable ``HEADPRUNE_DATA_DIR``.  For convenience the root may also
point directly at the ``glue`` folder itself (``<root>/<TASK>/...``).
"""

from __future__ import annotations

import hashlib
import operator
import os
import socket
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal
from urllib.parse import urlparse

import numpy as np

from headprune_utils.store import paths

__all__ = [
    "DataUnavailableError",
    "TaskSpec",
    "TASKS",
    "get_task",
    "TaskData",
    "resolve_data_dir",
    "local_split_path",
    "load_task",
    "task_availability",
    "subset",
    "subset_indices",
]

HUB_DATASET = "nyu-mll/glue"
ENV_DATA_DIR = "HEADPRUNE_DATA_DIR"
# Either variable switches the `datasets`/`huggingface_hub` stack offline; we
# honour both so an offline run never waits for network time-outs.
_OFFLINE_ENV_VARS = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
_TRUE_VALUES = {"1", "ON", "YES", "TRUE"}
SPLITS = ("train", "dev")


class DataUnavailableError(RuntimeError):
    """A task split could be found neither locally nor on the hub."""


class DataFormatError(ValueError):
    """A data file cannot be used as it is: not UTF-8 text, no rows, or too many malformed rows. The message
    names the file, the share of bad rows and the first bad line."""


class MalformedRowsWarning(UserWarning):
    """Some rows of a data file were malformed and skipped (fewer than MAX_MALFORMED_SHARE of them)."""


# A split with more malformed rows than this share stops the run (naming the file and the first bad line);
# fewer are skipped, counted (TaskData.n_skipped) and reported with a warning.
MAX_MALFORMED_SHARE = 0.01


@dataclass(frozen=True)
class TaskSpec:
    """Static description of one GLUE task.

    Attributes:
        name: canonical GLUE name, e.g. ``"SST-2"``.
        hub_config: config name of ``nyu-mll/glue`` on the hub, e.g. ``"sst2"``.
        hub_text_a: hub column with the first (or only) text.
        hub_text_b: hub column with the second text, ``None`` for single-sentence tasks.
        num_labels: number of classes; 1 means regression (STS-B).
        metrics: official GLUE metric names, main metric first.
        main_metric: the metric used for model selection (``metrics[0]``).
    """

    name: str
    hub_config: str
    hub_text_a: str
    hub_text_b: str | None
    num_labels: int
    metrics: tuple[str, ...]
    main_metric: str

    def __post_init__(self) -> None:
        if not self.metrics or self.main_metric != self.metrics[0]:
            raise ValueError(f"{self.name}: main_metric must be the first of metrics")

    @property
    def is_regression(self) -> bool:
        """True for regression tasks (STS-B: a single float score)."""
        return self.num_labels == 1

    @property
    def verdict_metric(self) -> str:
        """The metric the claims are decided on: the main metric, except F1, where a constant "positive" predictor
        already scores high (MRPC: about 0.81 against a full model's 0.86), leaving an effect no room; such tasks
        (MRPC, QQP) are decided by accuracy, whose chance level is the majority class's share, F1 reported beside
        it. Model selection keeps the main metric."""
        return "accuracy" if self.main_metric == "f1" and "accuracy" in self.metrics else self.main_metric


def _spec(name, config, a, b, num_labels, metrics) -> TaskSpec:
    return TaskSpec(name, config, a, b, num_labels, tuple(metrics), metrics[0])


TASKS: dict[str, TaskSpec] = {
    s.name: s
    for s in (
        _spec("CoLA", "cola", "sentence", None, 2, ("matthews",)),
        _spec("SST-2", "sst2", "sentence", None, 2, ("accuracy",)),
        _spec("MRPC", "mrpc", "sentence1", "sentence2", 2, ("f1", "accuracy")),
        _spec("STS-B", "stsb", "sentence1", "sentence2", 1, ("pearson", "spearman")),
        _spec("QQP", "qqp", "question1", "question2", 2, ("f1", "accuracy")),
        _spec("MNLI", "mnli", "premise", "hypothesis", 3, ("accuracy",)),
        _spec("QNLI", "qnli", "question", "sentence", 2, ("accuracy",)),
        _spec("RTE", "rte", "sentence1", "sentence2", 2, ("accuracy",)),
        _spec("WNLI", "wnli", "sentence1", "sentence2", 2, ("accuracy",)),
    )
}


@dataclass(frozen=True)
class _LocalFormat:
    """How a task's GLUE TSV is laid out.

    Columns are header names, or integer positions for header-less files (CoLA).
    ``label_names`` maps text labels to the hub's integer ids (None: labels are
    already numbers in the file).
    """

    text_a: str | int
    text_b: str | int | None
    label: str | int
    has_header: bool = True
    label_names: tuple[str, ...] | None = None
    dev_file: str = "dev.tsv"


_LOCAL_FORMATS: dict[str, _LocalFormat] = {
    "CoLA": _LocalFormat(3, None, 1, has_header=False),
    "SST-2": _LocalFormat("sentence", None, "label"),
    "MRPC": _LocalFormat("#1 String", "#2 String", "Quality"),
    "STS-B": _LocalFormat("sentence1", "sentence2", "score"),
    "QQP": _LocalFormat("question1", "question2", "is_duplicate"),
    "MNLI": _LocalFormat(
        "sentence1", "sentence2", "gold_label",
        label_names=("entailment", "neutral", "contradiction"),
        dev_file="dev_matched.tsv",
    ),
    "QNLI": _LocalFormat("question", "sentence", "label",
                         label_names=("entailment", "not_entailment")),
    "RTE": _LocalFormat("sentence1", "sentence2", "label",
                        label_names=("entailment", "not_entailment")),
    "WNLI": _LocalFormat("sentence1", "sentence2", "label"),
}


def _norm(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


_ALIASES = {_norm(n): n for n in TASKS}


def get_task(name: str) -> TaskSpec:
    """Look up a task by name, ignoring case, hyphens and underscores.

    ``"sst2"``, ``"SST-2"`` and ``"sst-2"`` all give the SST-2 spec.

    Raises:
        ValueError: unknown name (the message lists the valid names).
    """
    key = _norm(str(name))
    if key not in _ALIASES:
        raise ValueError(f"unknown GLUE task {name!r}; valid names: {', '.join(TASKS)}")
    return TASKS[_ALIASES[key]]


@dataclass
class TaskData:
    """Examples of one task split.

    Attributes:
        task: canonical task name.
        split: ``"train"`` or ``"dev"``.
        text_a: first texts.
        text_b: second texts, ``None`` for single-sentence tasks.
        labels: int64 class ids (hub ids), or float32 scores for STS-B.
        source: provenance without absolute paths, e.g. ``"local:glue/SST-2/dev.tsv"``
            or ``"hub:nyu-mll/glue/sst2/validation"``.
        n_skipped: malformed rows skipped while parsing.
    """

    task: str
    split: str
    text_a: list[str]
    text_b: list[str] | None
    labels: np.ndarray
    source: str
    n_skipped: int = 0

    def __post_init__(self) -> None:
        n = len(self.text_a)
        if (self.text_b is not None and len(self.text_b) != n) or len(self.labels) != n:
            raise ValueError(
                f"{self.task}/{self.split}: text_a, text_b and labels differ in length"
            )

    def __len__(self) -> int:
        return len(self.text_a)


def default_data_dir() -> Path | None:
    """``../shared/data`` beside the checkout (the project's layout: the data root the Makefile uses), when this
    package runs from a checkout and that folder holds ``glue/``; else None. So papermill, JupyterLab or a script
    started outside ``make`` read the same local data instead of waiting on the hub."""
    checkout = paths.PACKAGE_DIR.parent
    if not ((checkout / "pyproject.toml").is_file() and (checkout / "notebooks").is_dir()):
        return None
    candidate = checkout.parent / "shared" / "data"
    return candidate if (candidate / "glue").is_dir() else None


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """Return the local data root: ``data_dir``, else ``$HEADPRUNE_DATA_DIR``, else :func:`default_data_dir`
    (``../shared/data`` beside the checkout), else None. ``HEADPRUNE_DATA_DIR=none`` means no local data (the hub
    only).

    Raises:
        DataUnavailableError: a root was given (argument or environment) but is not
            an existing folder; a typo must not silently fall through to the hub.
    """
    if data_dir is not None:
        origin, raw = "data_dir argument", os.fspath(data_dir)
    elif os.environ.get(ENV_DATA_DIR):  # an empty variable counts as unset
        if os.environ[ENV_DATA_DIR].strip().lower() == "none":
            return None
        origin, raw = f"environment variable {ENV_DATA_DIR}", os.environ[ENV_DATA_DIR]
    else:
        return default_data_dir()
    root = Path(raw).expanduser()
    if not root.is_dir():
        raise DataUnavailableError(
            f"data folder {str(root)!r} (from the {origin}) does not exist or is not a "
            f"folder; set {ENV_DATA_DIR} / pass data_dir to a folder containing "
            f"glue/<TASK>/{{train,dev}}.tsv"
        )
    return root


def _local_path(root: Path, spec: TaskSpec, split: str) -> Path:
    """Path of the task split's TSV under root (may not exist)."""
    fname = _LOCAL_FORMATS[spec.name].dev_file if split == "dev" else "train.tsv"
    standard = root / "glue" / spec.name / fname
    direct = root / spec.name / fname  # root given as the glue folder itself
    if not standard.is_file() and direct.is_file():
        return direct
    return standard


def local_split_path(task: str, split: str, data_dir: str | os.PathLike | None = None) -> Path | None:
    """Where the local TSV of ``task``'s ``split`` is looked for (it may not exist): under
    :func:`resolve_data_dir`'s root; None when there is no local root."""
    root = resolve_data_dir(data_dir)
    return None if root is None else _local_path(root, get_task(task), split)


def _parse_label(raw: str, spec: TaskSpec, fmt: _LocalFormat) -> float | int:
    """Text label -> hub label; raises ValueError on anything unexpected."""
    raw = raw.strip()
    if spec.is_regression:
        value = float(raw)
        if not 0.0 <= value <= 5.0:  # STS-B similarity scores; NaN fails this too
            raise ValueError(f"score {raw!r} is outside [0, 5]")
        return value
    if fmt.label_names is not None:
        return fmt.label_names.index(raw)
    value = int(raw)
    if not 0 <= value < spec.num_labels:
        raise ValueError(f"label {value} out of range")
    return value


def _read_tsv(path: Path, spec: TaskSpec, split: str, source: str,
              max_malformed_share: float = MAX_MALFORMED_SHARE) -> TaskData:
    """Parse a GLUE TSV with quoting disabled.

    GLUE texts contain stray quote characters (e.g. MRPC ``" The ...``), which
    a quoting-aware CSV reader would swallow; so lines are split on tabs only.
    Rows with the wrong number of columns or an unparsable label are skipped
    and counted in ``n_skipped``.
    """
    fmt = _LOCAL_FORMATS[spec.name]
    # utf-8-sig drops the BOM of the MRPC header; newline="\n" keeps a stray
    # "\r" inside a field from splitting a row (it is stripped at line ends).
    try:
        with open(path, encoding="utf-8-sig", newline="\n") as f:
            raw = [line.rstrip("\r\n") for line in f]
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{spec.name}/{split}: {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); "
                              "GLUE files are UTF-8 TSV") from None
    numbered = [(i + 1, line) for i, line in enumerate(raw) if line]  # blank lines are not rows

    if not numbered:
        raise DataFormatError(f"{spec.name}/{split}: {source} ({path}) is empty")
    if fmt.has_header:
        header = numbered[0][1].split("\t")
        missing = [c for c in (fmt.text_a, fmt.text_b, fmt.label)
                   if c is not None and c not in header]
        if missing:
            raise DataFormatError(
                f"{spec.name}/{split}: {source} lacks column(s) {missing}; header (line {numbered[0][0]}) is {header}"
            )
        n_cols = len(header)
        ia, il = header.index(fmt.text_a), header.index(fmt.label)
        ib = header.index(fmt.text_b) if fmt.text_b is not None else None
        rows = numbered[1:]
    else:
        n_cols, ia, ib, il = 4, fmt.text_a, fmt.text_b, fmt.label  # CoLA
        rows = numbered

    text_a: list[str] = []
    text_b: list[str] = []
    labels: list[float | int] = []
    bad: list[tuple[int, str, str]] = []  # (line number, why, the line)
    for number, line in rows:
        cols = line.split("\t")
        if len(cols) != n_cols:
            bad.append((number, f"{len(cols)} columns, expected {n_cols}", line))
            continue
        try:
            label = _parse_label(cols[il], spec, fmt)
        except ValueError:
            bad.append((number, f"label {cols[il]!r} is not a valid {spec.name} label"
                        + (" (a score in [0, 5])" if spec.is_regression else ""), line))
            continue
        text_a.append(cols[ia])
        if ib is not None:
            text_b.append(cols[ib])
        labels.append(label)

    n_skipped = len(bad)
    if not rows:
        raise DataFormatError(f"{spec.name}/{split}: {source} has no rows")
    if bad:
        first = bad[0]
        where = f"first bad line {first[0]} ({first[1]}): {first[2][:120]!r}"
        share = n_skipped / len(rows)
        if share > max_malformed_share:
            raise DataFormatError(
                f"{spec.name}/{split}: {source}: {n_skipped} of {len(rows)} rows ({100 * share:.1f}%) are malformed, "
                f"more than the {100 * max_malformed_share:g}% tolerated; {where}")

        warnings.warn(f"{spec.name}/{split}: {source}: {n_skipped} of {len(rows)} rows malformed and skipped; {where}",
                      MalformedRowsWarning, stacklevel=3)

    return TaskData(
        task=spec.name,
        split=split,
        text_a=text_a,
        text_b=text_b if ib is not None else None,
        labels=np.asarray(labels, dtype=np.float32 if spec.is_regression else np.int64),
        source=source,
        n_skipped=n_skipped,
    )


_HASHES: dict[tuple, str] = {}


def file_fingerprint(path: str | os.PathLike) -> str:
    """SHA-256 (first 16 hex digits) of a file's bytes, computed once per (path, size, modification time)."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _HASHES[key] = h.hexdigest()[:16]
    return _HASHES[key]


def split_fingerprint(task: str, split: str, data_dir: str | os.PathLike | None = None) -> str:
    """What a task split's content is, for result fingerprints: the local file's content hash, or ``"hub"``
    (the hub's copy of GLUE is versioned by the datasets library)."""
    spec = get_task(task)
    root = resolve_data_dir(data_dir)
    if root is not None:
        path = _local_path(root, spec, split)
        if path.is_file():
            return file_fingerprint(path)
    return "hub"


def _hub_split(spec: TaskSpec, split: str) -> str:
    if split == "train":
        return "train"
    return "validation_matched" if spec.name == "MNLI" else "validation"


def offline_var() -> str | None:
    """Name of the first offline-mode variable that is switched on, else None."""
    for var in _OFFLINE_ENV_VARS:
        if os.environ.get(var, "").strip().upper() in _TRUE_VALUES:
            return var
    return None


_HUB_REACHABLE: dict[str, bool] = {}  # host -> answered (checked once per process)
HUB_PROBE_SECONDS = 3.0


def hub_blocked() -> str | None:
    """Why the Hugging Face hub cannot be used now, in words, or None when it may be tried.

    An offline variable (``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE``, ...) switched on; else no TCP connection to
    the hub's host (``HF_ENDPOINT``, default huggingface.co) on port 443 within :data:`HUB_PROBE_SECONDS`
    (name lookup included; checked once per process). So a machine without a network fails at once with the
    clear message instead of after the hub clients' 30-45 s of retries."""
    var = offline_var()
    if var is not None:
        return f"offline mode is on ({var} is set)"

    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    if host not in _HUB_REACHABLE:
        ok: list[bool] = []

        def probe() -> None:
            try:
                socket.create_connection((host, 443), timeout=HUB_PROBE_SECONDS).close()
                ok.append(True)
            except OSError:
                pass

        t = threading.Thread(target=probe, daemon=True)  # a name lookup can outlast the connect timeout
        t.start()
        t.join(HUB_PROBE_SECONDS + 0.5)
        _HUB_REACHABLE[host] = bool(ok)
    if _HUB_REACHABLE[host]:
        return None
    return f"the hub ({host}) cannot be reached from this machine (no connection within {HUB_PROBE_SECONDS:g} s)"


def _load_hub(spec: TaskSpec, split: str) -> TaskData:
    """Load from the hub; lets every exception propagate (the caller wraps it)."""
    from datasets import load_dataset  # imported lazily: slow, and only needed here

    hub_split = _hub_split(spec, split)
    ds = load_dataset(HUB_DATASET, spec.hub_config, split=hub_split)
    dtype = np.float32 if spec.is_regression else np.int64
    return TaskData(
        task=spec.name,
        split=split,
        text_a=list(ds[spec.hub_text_a]),
        text_b=list(ds[spec.hub_text_b]) if spec.hub_text_b is not None else None,
        labels=np.asarray(ds["label"], dtype=dtype),
        source=f"hub:{HUB_DATASET}/{spec.hub_config}/{hub_split}",
    )


def load_task(
    task: str,
    split: Literal["train", "dev"],
    data_dir: str | os.PathLike | None = None,
    *,
    allow_hub: bool = True,
    max_malformed_share: float = MAX_MALFORMED_SHARE,
) -> TaskData:
    """Load one split of a GLUE task: local TSV first, then the hub.

    Args:
        task: task name (any spelling accepted by :func:`get_task`).
        split: ``"train"`` or ``"dev"`` (MNLI dev = matched dev set).
        data_dir: local data root; default ``$HEADPRUNE_DATA_DIR``.
        allow_hub: whether to fall back to ``datasets.load_dataset("nyu-mll/glue")``.
        max_malformed_share: a local file with more malformed rows than this share is refused
            (DataFormatError naming the file and the first bad line); fewer are skipped with a warning.
            The hub is never tried while ``HF_DATASETS_OFFLINE``/``HF_HUB_OFFLINE`` is on.

    Raises:
        ValueError: unknown task or split.
        DataUnavailableError: neither source has the data; the message says what
            was tried and how to fix it.
    """
    spec = get_task(task)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")

    root = resolve_data_dir(data_dir)
    if root is not None:
        path = _local_path(root, spec, split)
        if path.is_file():
            rel = path.relative_to(root).as_posix()  # keep absolute paths out of `source`
            return _read_tsv(path, spec, split, f"local:{rel}", max_malformed_share)
        local_note = f"local file {str(path)!r} not found"
    else:
        local_note = f"no local data folder given (data_dir=None and {ENV_DATA_DIR} unset)"

    hub_split = _hub_split(spec, split)
    hub_name = f"{HUB_DATASET} (config {spec.hub_config!r}, split {hub_split!r})"
    blocked = hub_blocked() if allow_hub else None
    if not allow_hub:
        hub_note = f"hub dataset {hub_name} not tried (allow_hub=False)"
    elif blocked is not None:
        hub_note = f"hub dataset {hub_name} not tried: {blocked}"
    else:
        try:
            return _load_hub(spec, split)
        except Exception as exc:  # any hub failure is reported the same way
            hub_note = f"hub dataset {hub_name} failed: {type(exc).__name__}: {exc}"

    fname = _LOCAL_FORMATS[spec.name].dev_file if split == "dev" else "train.tsv"
    raise DataUnavailableError(
        f"GLUE task {spec.name!r} split {split!r} is unavailable: {local_note}; {hub_note}. "
        f"To fix: set {ENV_DATA_DIR} or pass data_dir= to a folder containing "
        f"glue/{spec.name}/{fname}, or go online (unset HF_DATASETS_OFFLINE/HF_HUB_OFFLINE, "
        f"allow_hub=True) to download it from the hub."
    )


def task_availability(
    tasks: Iterable[str] | None = None,
    data_dir: str | os.PathLike | None = None,
    *,
    allow_hub: bool = False,
) -> dict[str, dict[str, bool]]:
    """Which task splits can be loaded, as ``{task: {"train": bool, "dev": bool}}``.

    By default only local files are checked (fast, no network).  With
    ``allow_hub=True`` a split missing locally is actually loaded from the hub
    (which downloads it), so use that only when online.

    Raises:
        DataUnavailableError: ``data_dir``/``$HEADPRUNE_DATA_DIR`` names a missing folder.
    """
    specs = [get_task(t) for t in (TASKS if tasks is None else tasks)]
    root = resolve_data_dir(data_dir)
    result: dict[str, dict[str, bool]] = {}
    for spec in specs:
        result[spec.name] = {}
        for split in SPLITS:
            ok = root is not None and _local_path(root, spec, split).is_file()
            if not ok and allow_hub:
                try:
                    load_task(spec.name, split, root, allow_hub=True)
                    ok = True
                except DataUnavailableError:
                    pass
            result[spec.name][split] = ok
    return result


def subset_indices(n: int, size: int | None, seed: int) -> np.ndarray:
    """Rows of a deterministic random subset of ``size`` of ``n`` rows, in increasing order.

    The first ``size`` entries of ``np.random.default_rng(seed).permutation(n)``, sorted; all rows when
    ``size`` is None or >= ``n``.

    Raises:
        ValueError: ``size <= 0``.
    """
    if size is not None:
        size = operator.index(size)
        if size <= 0:
            raise ValueError(f"subset size must be positive or None, got {size}")
    if size is None or size >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).permutation(n)[:size])


def _rows(data: TaskData, idx: np.ndarray) -> TaskData:
    return TaskData(task=data.task, split=data.split, text_a=[data.text_a[i] for i in idx],
                    text_b=None if data.text_b is None else [data.text_b[i] for i in idx],
                    labels=np.asarray(data.labels)[idx].copy(), source=data.source, n_skipped=data.n_skipped)


def hold_out(data: TaskData, size: int, seed: int) -> tuple[TaskData, TaskData]:
    """``(rest, held_out)``: ``size`` rows chosen as :func:`subset` chooses them (``seed``) held out, e.g. a
    validation split carved from the training data; both keep the file order and share no row.

    Raises:
        ValueError: ``size`` not in ``[1, len(data) - 1]`` (something must be left on each side).
    """
    size = operator.index(size)
    if not 1 <= size < len(data):
        raise ValueError(f"cannot hold out {size} of {len(data)} {data.task} {data.split} rows: leave at least one "
                         "on each side")
    held = subset_indices(len(data), size, seed)
    rest = np.setdiff1d(np.arange(len(data)), held)
    return _rows(data, rest), _rows(data, held)


def subset(data: TaskData, size: int | None, seed: int) -> TaskData:
    """Deterministic random subset of ``size`` rows, in the original row order.

    Rows are the first ``size`` entries of ``np.random.default_rng(seed).permutation(n)``,
    sorted back into file order, so a given (size, seed) always yields the same rows.
    ``size`` None or >= ``len(data)`` returns a copy of all rows.

    Raises:
        ValueError: ``size <= 0``.
    """
    idx = subset_indices(len(data), size, seed)
    return TaskData(
        task=data.task,
        split=data.split,
        text_a=[data.text_a[i] for i in idx],
        text_b=None if data.text_b is None else [data.text_b[i] for i in idx],
        labels=np.asarray(data.labels)[idx].copy(),
        source=data.source,
        n_skipped=data.n_skipped,
    )
