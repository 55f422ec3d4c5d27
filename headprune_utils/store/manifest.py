"""The manifest of a cells folder: the SHA-256 of every cell file as it was written, so that a cell edited,
replaced or swapped after it was stored is found on read (what makes committed results citable).

``cells/MANIFEST.sha256`` holds one line per cell, ``<sha256 hex>  <file name>``, sorted by name: the format of
``sha256sum``, so ``cd outputs/<study>/<profile>/cells && sha256sum -c MANIFEST.sha256`` checks it without this
package. :class:`~headprune_utils.store.results.ResultStore` writes it (atomically) whenever it stores a cell and
checks every cell it reads against it:

- a cell whose bytes differ from its line is not the result that was stored: a run moves it to ``quarantine/``
  and recomputes it, a read-only store (the render from cells, ``--check``) refuses it naming the file;
- a cell without a line (written before manifests existed or by older code, copied in, added by hand; or the
  folder has no manifest, or a damaged one) cannot be verified: every store reading the folder warns once, naming
  how many and one of them, and reads it. Nothing adds such a cell to the manifest by itself (a render or a run
  that did would certify whatever is there); after checking them, a person records them with this module::

      python -m headprune_utils.store.manifest outputs/<study>/<profile>/cells ...        # record unlisted cells
      python -m headprune_utils.store.manifest --check outputs/<study>/<profile>/cells    # verify only

  Recording never replaces the line of a cell whose content changed (it names the file and stops): a changed
  cell is recomputed, or its line removed by hand when the change is wanted.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from headprune_utils.store.hashes import MANIFEST_NAME, digest, format_manifest, manifest_path, read_manifest
from headprune_utils.store.results import atomic_write_text, record_problem, shape_problem


def _cell_files(cells_dir: Path) -> list[Path]:
    return sorted(p for p in Path(cells_dir).glob("*.json") if not p.name.startswith(".") and p.is_file())


def verify(cells_dir: Path) -> dict[str, list[str]]:
    """``{"changed": [...], "unlisted": [...], "gone": [...], "damaged": [why]}``: cell files whose bytes differ
    from their line, cell files without a line, lines without a file, and why the manifest cannot be read."""
    out: dict[str, list[str]] = {"changed": [], "unlisted": [], "gone": [], "damaged": []}
    entries, out["damaged"] = read_manifest(cells_dir)
    files = _cell_files(cells_dir)
    if entries is None and files:
        out["damaged"].append(f"there is no {MANIFEST_NAME}")
    entries = entries or {}
    for p in files:
        if p.name not in entries:
            out["unlisted"].append(p.name)
        elif digest(p.read_bytes()) != entries[p.name]:
            out["changed"].append(p.name)
    names = {p.name for p in files}
    out["gone"] = sorted(n for n in entries if n not in names)
    return out


def record(cells_dir: Path) -> tuple[int, list[str]]:
    """Add the unlisted cells of ``cells_dir`` to its manifest (creating it), dropping the lines of files that are
    gone. Returns ``(cells added, problems)``; with problems (a cell whose content differs from its line, a file
    that is not a valid record) nothing is written."""
    cells_dir = Path(cells_dir)
    entries, damaged = read_manifest(cells_dir)
    if damaged:
        return 0, [f"{why}; move it away to record the folder anew (after checking every cell in it)" for why in damaged]
    entries = entries or {}
    problems, added = [], 0
    files = _cell_files(cells_dir)
    for p in files:
        data = p.read_bytes()
        h = digest(data)
        if p.name in entries:
            if entries[p.name] != h:
                problems.append(f"{p.name}: its content differs from its line in {MANIFEST_NAME} (edited or replaced "
                                "after it was stored); recompute it, or remove its line if the change is wanted")
            continue
        try:
            rec = json.loads(data.decode("utf-8"))
            why = shape_problem(rec) or record_problem(rec, p)
        except (ValueError, UnicodeDecodeError, TypeError, KeyError) as exc:
            why = str(exc)
        if why:
            problems.append(f"{p.name}: {why}")
            continue
        entries[p.name] = h
        added += 1
    if problems:
        return 0, problems
    names = {p.name for p in files}
    entries = {n: h for n, h in entries.items() if n in names}
    if entries or manifest_path(cells_dir).exists():
        atomic_write_text(manifest_path(cells_dir), format_manifest(entries))
    return added, []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headprune_utils.store.manifest",
                                     description="Record (or with --check verify) the SHA-256 manifest of cells folders.")
    parser.add_argument("folders", nargs="+", type=Path, help="cells folders (outputs/<study>/<profile>/cells)")
    parser.add_argument("--check", action="store_true", help="verify only; exit 1 when a folder does not match")
    args = parser.parse_args(argv)
    bad = [f for f in args.folders if not f.is_dir()]
    if bad:
        print(f"error: not a folder: {', '.join(map(str, bad))}", file=sys.stderr)
        return 2
    rc = 0
    for folder in args.folders:
        if args.check:
            found = verify(folder)
            n = len(_cell_files(folder))
            if any(found.values()):
                rc = 1
                parts = [f"{k} {len(v)} ({', '.join(v[:3])}{', ...' if len(v) > 3 else ''})"
                         for k, v in found.items() if v]  # up to three named: both cells of a swap
                print(f"{folder}: {n} cells; " + "; ".join(parts))
            else:
                print(f"{folder}: {n} cells, all as recorded")
        else:
            added, problems = record(folder)
            if problems:
                rc = 1
                print(f"error: {folder}: nothing recorded, {len(problems)} problem(s):\n  " + "\n  ".join(problems[:20])
                      + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""), file=sys.stderr)
            else:
                print(f"{folder}: {added} cell(s) added to {MANIFEST_NAME}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
