"""The package's layers (each package's ``__init__`` says what it may import): no module imports from a higher layer
or from another package of its own layer, and no import circle, counting imports inside functions too."""
from __future__ import annotations

import ast
from pathlib import Path

import headprune_utils

PKG = Path(headprune_utils.__file__).parent
# lowest first; packages of one rank are independent of each other
LAYERS = {"analysis": 0, "store": 0, "tasks": 1, "model": 2, "train": 3, "measure": 4, "figures": 4, "studies": 5,
          "run": 6}


def modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = p.with_suffix("").relative_to(PKG.parent).parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` imports (module level and inside functions)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            cands = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            cands = [a.name for a in node.names]
        else:
            continue
        found |= {c for c in cands if c in known and c != name}
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {n: imports(n, p, set(mods)) for n, p in mods.items()}


def layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_lives_in_a_layer_package():
    loose = [n for n in modules() if n.count(".") == 1 and layer(n) not in LAYERS]
    assert not loose, f"modules outside the layer packages: {loose}"
    assert set(LAYERS) == {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}


def test_no_import_from_a_higher_layer_or_a_sibling_package():
    bad = []
    for src, targets in graph().items():
        a = layer(src)
        for t in targets:
            b = layer(t)
            if a is None or b is None or a == b:
                continue
            if LAYERS[b] > LAYERS[a] or (LAYERS[b] == LAYERS[a]):
                bad.append(f"{src} ({a}, layer {LAYERS[a]}) imports {t} ({b}, layer {LAYERS[b]})")
    assert not bad, "\n".join(bad)


def test_no_import_circle():
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(n: str):
        state[n] = 1
        stack.append(n)
        for m in sorted(g[n]):
            if state.get(m) == 1:
                circles.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n)
    assert not circles, "\n".join(" -> ".join(c) for c in circles)


def test_the_layer_test_sees_an_upward_import(tmp_path):
    """The checks can fail: a module of a low layer importing a high one is found."""
    p = tmp_path / "stats.py"
    p.write_text("from headprune_utils.run import execution\n")
    known = set(modules())
    found = imports("headprune_utils.analysis.stats", p, known)
    assert "headprune_utils.run.execution" in found and LAYERS[layer("headprune_utils.run.execution")] > 0
