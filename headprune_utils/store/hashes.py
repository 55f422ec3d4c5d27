"""The manifest file of a cells folder: ``cells/MANIFEST.sha256``, one line per cell, ``<sha256 hex>  <file name>``,
sorted by name (the format of ``sha256sum``). Reading, writing and hashing only; what the manifest is for, and the
command that records it: :mod:`headprune_utils.store.manifest`."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

MANIFEST_NAME = "MANIFEST.sha256"
_LINE = re.compile(r"([0-9a-f]{64}) [ *]([^/\\\n]+\.json)")  # "  name" as written; " *name": sha256sum -b's line


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_path(cells_dir: Path) -> Path:
    return Path(cells_dir) / MANIFEST_NAME


def format_manifest(entries: dict[str, str]) -> str:
    return "".join(f"{entries[name]}  {name}\n" for name in sorted(entries))


def parse_manifest(text: str, where: str = MANIFEST_NAME) -> tuple[dict[str, str], list[str]]:
    """``({file name: sha256}, problems)``: the well-formed lines, and what is wrong with the others (a line that
    is not ``<64 hex>  <name>.json`` (or ``<64 hex> *<name>.json``, as ``sha256sum -b`` writes), a name listed
    twice, a last line without its newline: the file was cut)."""
    entries: dict[str, str] = {}
    problems: list[str] = []
    lines = text.split("\n")
    if lines[-1] != "":
        problems.append(f"{where}: the last line has no newline (line {len(lines)}, {lines[-1][:80]!r}: the file was "
                        "cut short)")
    for i, line in enumerate(lines[:-1], 1):
        m = _LINE.fullmatch(line)
        if not m:
            problems.append(f"{where}, line {i}: not '<sha256>  <cell file name>': {line[:80]!r}")
        elif m.group(2) in entries:
            problems.append(f"{where}, line {i}: {m.group(2)} is listed twice")
            entries[m.group(2)] = ""  # neither line can be trusted: the cell counts as changed
        else:
            entries[m.group(2)] = m.group(1)
    return entries, problems


def read_manifest(cells_dir: Path) -> tuple[dict[str, str] | None, list[str]]:
    """The manifest of ``cells_dir`` (its well-formed lines; None when it has none) and its problems."""
    path = manifest_path(cells_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, []
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [f"{path.name}: unreadable ({exc})"]
    return parse_manifest(text, path.name)
