"""The package layout keeps its promises (ARCHITECTURE.md): imports only go down the layer
table, there are no import cycles, and no function is longer than ~60 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "seq2seq"

# Lower layers never import higher ones; a module may import its own layer (no cycles).
LAYERS = {
    "seq2seq.specials": 0, "seq2seq.config": 1, "seq2seq.profiling": 1, "seq2seq.shipped": 1,
    "seq2seq.runtime": 1, "seq2seq.files": 1, "seq2seq.directions": 1, "seq2seq.fields": 1,
    "seq2seq.data": 2, "seq2seq.model": 2,
    "seq2seq.checkpoint": 3, "seq2seq.metrics": 3, "seq2seq.plotting": 3, "seq2seq.averaging": 4,
    "seq2seq.decoding": 4, "seq2seq.training": 5, "seq2seq.export": 5, "seq2seq.hf_import": 5,
    "seq2seq.documents": 5,  # documents and HTML through a translator's alignment
    "seq2seq.cli": 6,
    "seq2seq.serving": 6,  # seq2seq-serve's app: requests take seq2seq-translate's options
    "seq2seq": 7,  # the package itself: the public API re-exported (lazily) at the top level
}
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> int:
    # "seq2seq" is the package's own __init__ only: a module missing from the table must fail
    hits = [name for name in LAYERS
            if module == name or (name != "seq2seq" and module.startswith(name + "."))]
    if not hits:
        raise AssertionError(f"{module} is in no layer of LAYERS: add it (and to ARCHITECTURE.md)")
    return LAYERS[max(hits, key=len)]


def _imports(path: Path) -> set[str]:
    """Every ``seq2seq...`` module a file imports, at any depth (lazy imports included)."""
    tree, out = ast.parse(path.read_text()), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("seq2seq"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("seq2seq"))
    return out


GRAPH = {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return [f"{mod} (layer {_layer(mod)}) imports {dep} (layer {_layer(dep)})"
            for mod, deps in graph.items() for dep in deps if _layer(dep) > _layer(mod)]


def test_imports_only_go_down_the_layers():
    upward = _upward(GRAPH)
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for dep in sorted(GRAPH.get(mod, ())):
            if dep not in GRAPH:
                continue
            if state.get(dep) == 1:
                pytest.fail("import cycle: " + " -> ".join(path[path.index(dep):] + [dep]))
            if dep not in state:
                visit(dep, path + [dep])
        state[mod] = 2

    for mod in GRAPH:
        if mod not in state:
            visit(mod, [mod])


def test_no_function_over_the_limit():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, "\n".join(long)


def test_the_checks_can_fail():
    """An upward import is reported, a downward one is not, and nested imports are found."""
    assert _upward({"seq2seq.model.cache": {"seq2seq.decoding.search"}})
    assert not _upward({"seq2seq.decoding.search": {"seq2seq.model.cache"}})
    src = "def f():\n    from seq2seq.cli.train import main\n"
    found = {n.module for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ImportFrom)}
    assert found == {"seq2seq.cli.train"}
