"""The layout keeps its promises (ARCHITECTURE.md): in the package and in scripts/, imports
only go down the layer table and there are no import cycles; scripts import only the
package's public API; no function is longer than ~60 lines and no module than ~400; nothing
is attached to an object through its ``__dict__`` or by ``setattr`` on a model; the layers
used from Python name options by field, never by CLI flag; no test file imports another."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE, SCRIPTS = ROOT / "seq2seq", ROOT / "scripts"

# Lower layers never import higher ones; a module may import its own layer (no cycles).
LAYERS = {
    "seq2seq.specials": 0, "seq2seq.config": 1, "seq2seq.profiling": 1, "seq2seq.shipped": 1,
    "seq2seq.runtime": 1, "seq2seq.files": 1, "seq2seq.directions": 1, "seq2seq.fields": 1,
    "seq2seq.extras": 1, "seq2seq.machine": 1,
    "seq2seq.data": 2, "seq2seq.model.*": 2, "seq2seq.checkpoint_format": 2,
    # inside model/: the network's parts (2), their accelerators over them (2.3), Seq2Seq
    # declaring and calling both (2.6), the package's __init__ (2.9)
    "seq2seq.model.inference": 2.3, "seq2seq.model.transformer": 2.6, "seq2seq.model": 2.9,
    "seq2seq.checkpoint": 3, "seq2seq.metrics": 3, "seq2seq.significance": 3, "seq2seq.plotting": 3,
    "seq2seq.averaging": 4,
    "seq2seq.decoding": 4,  # ids in, ids out
    "seq2seq.translation": 5,  # texts in, texts out: segment, plan, decoding's search, join
    "seq2seq.training": 6, "seq2seq.export": 6, "seq2seq.hf_import": 6,
    "seq2seq.distill": 6,  # a teacher translates a corpus (translation) into training data
    "seq2seq.documents": 6,  # documents and HTML through a translator's alignment
    "seq2seq.serving": 7,
    "seq2seq.cli": 8,  # seq2seq-serve starts the server
    "seq2seq": 9,  # the package itself: the public API re-exported (lazily) at the top level
    # scripts/: above the whole package; the benchmark engines -> timing -> rows -> report
    "scripts.bench": 10, "scripts.bench.engines": 10,
    "scripts.bench.timing": 11, "scripts.bench.isolate": 11, "scripts.bench.opus": 11,
    "scripts.bench.decode": 12, "scripts.bench.train": 12, "scripts.bench.attention": 12,
    "scripts.bench.profile": 12, "scripts.bench.vocab": 12, "scripts.bench.split": 12,
    "scripts.bench.shared": 12, "scripts.bench.data": 12, "scripts.bench.load": 12,
    "scripts.bench.paragraphs": 12, "scripts.bench.segmenters": 12, "scripts.bench.gemm": 12,
    "scripts.bench.students": 12, "scripts.bench.latency": 12, "scripts.bench.opcount": 12,
    "scripts.bench.report": 13,
    "scripts.bench.run": 14,
    "scripts.*": 15,  # the scripts a user runs (scripts/*.py)
    "scripts.experiments.*": 15,  # the studies behind docs' figures
}
# a package's own __init__, not its modules (those must each have a row)
EXACT = {"seq2seq", "scripts.bench", "seq2seq.model"}
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400


def _covers(name: str, module: str) -> bool:
    if name.endswith(".*"):  # the direct children of a folder
        rest = module.removeprefix(name[:-1])
        return rest != module and "." not in rest
    return module == name or (name not in EXACT and module.startswith(name + "."))


def _layer(module: str) -> int:
    hits = [name for name in LAYERS if _covers(name, module)]
    if not hits:
        raise AssertionError(f"{module} is in no layer of LAYERS: add it (and to ARCHITECTURE.md)")
    return LAYERS[max(hits, key=len)]


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _ours(module: str) -> bool:
    return module.split(".")[0] in ("seq2seq", "scripts")


def _imports(source: str, known: set[str]) -> set[tuple[str, str | None]]:
    """Every (module, name) of ours the source imports, at any depth (lazy imports
    included); ``from a import b`` is the module ``a.b`` when that is a module."""
    out: set[tuple[str, str | None]] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module or ""):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add((sub, None) if sub in known else (node.module, alias.name))
        elif isinstance(node, ast.Import):
            out.update((a.name, None) for a in node.names if _ours(a.name))
    return out


def _files(root: Path) -> dict[str, Path]:
    return {_module_name(p, root): p for d in ("seq2seq", "scripts")
            for p in sorted((root / d).rglob("*.py"))}


def _graph(root: Path) -> dict[str, set[tuple[str, str | None]]]:
    files = _files(root)
    return {mod: _imports(path.read_text(), set(files)) for mod, path in files.items()}


def _edges(graph) -> dict[str, set[str]]:
    return {mod: {dep for dep, _ in deps} for mod, deps in graph.items()}


def _upward(edges: dict[str, set[str]]) -> list[str]:
    return [f"{mod} (layer {_layer(mod)}) imports {dep} (layer {_layer(dep)})"
            for mod, deps in edges.items() for dep in deps if _layer(dep) > _layer(mod)]


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(mod: str, path: list[str]) -> list[str] | None:
        state[mod] = 1
        for dep in sorted(edges.get(mod, ())):
            if dep in edges and state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep in edges and dep not in state and (found := visit(dep, path + [dep])):
                return found
        state[mod] = 2
        return None

    for mod in sorted(edges):
        if mod not in state and (found := visit(mod, [mod])):
            return found
    return None


def _documented(architecture: str) -> tuple[set[str], set[str]]:
    """The package's modules and folders named in ARCHITECTURE.md's module table (the first
    table after "## Modules")."""
    section = architecture.split("## Modules", 1)[1].lstrip().splitlines()
    table = "\n".join(itertools.takewhile(lambda line: line.startswith("|"), section))
    names = re.findall(r"^\| `([\w/]+(?:\.py|/))` \|", table, re.M)
    modules = {"seq2seq." + n.removesuffix(".py").replace("/", ".") for n in names if n.endswith(".py")}
    folders = {"seq2seq." + n.rstrip("/").replace("/", ".") for n in names if n.endswith("/")}
    return modules, folders


def _not_public(graph, modules: set[str], folders: set[str], packages: set[str]) -> list[str]:
    """Imports by scripts of what is not the package's public API: the top level, the
    documented modules and folders, the subpackages' ``__init__``; never a ``_`` name."""
    bad = []
    for mod, deps in graph.items():
        if not mod.startswith("scripts"):
            continue
        for dep, name in deps:
            if not dep.startswith("seq2seq"):
                continue
            public = (dep == "seq2seq" or dep in modules or dep in packages
                      or any(_covers(f, dep) for f in folders))
            private = any(p.startswith("_") for p in [*dep.split("."), name or ""])
            if not public or private:
                bad.append(f"{mod} imports {dep}{'.' + name if name else ''}")
    return bad


GRAPH = _graph(ROOT)
PACKAGES = {_module_name(p, ROOT) for p in PACKAGE.rglob("__init__.py")}


def test_imports_only_go_down_the_layers():
    upward = _upward(_edges(GRAPH))
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    cycle = _cycle(_edges(GRAPH))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_scripts_use_only_the_public_api():
    modules, folders = _documented((ROOT / "ARCHITECTURE.md").read_text())
    missing = sorted([m for m in modules if m not in GRAPH]
                     + [f for f in folders if not (ROOT / f.replace(".", "/")).is_dir()])
    assert not missing, f"ARCHITECTURE.md documents modules that do not exist: {missing}"
    assert any(m.startswith("scripts.") for m in GRAPH) and len(modules) > 40
    bad = _not_public(GRAPH, modules, folders, PACKAGES)
    assert not bad, "\n".join(bad)


def test_no_function_over_the_limit():
    long = []
    for path in [*PACKAGE.rglob("*.py"), *SCRIPTS.rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, "\n".join(long)


def _long_modules(paths, root: Path = ROOT) -> list[str]:
    return [f"{path.relative_to(root)} ({n} lines)" for path in paths
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]


def test_no_module_over_the_limit():
    long = _long_modules([*PACKAGE.rglob("*.py"), *SCRIPTS.rglob("*.py")])
    assert not long, "split these modules by concept:\n" + "\n".join(long)


# A model's inference features are declared (Seq2Seq.inference, layers.Linear.kernel), never
# attached from outside: an attachment is invisible to readers and to the import graph.
MODEL_NAME = re.compile(r"(?:^|\.)(?:\w*model|module)$")  # model, self.model, a_model, module
KEYED = {"get", "setdefault", "pop", "update"}


def _dict_of(node: ast.AST) -> str | None:
    """``x`` when ``node`` is ``x.__dict__`` or ``vars(x)``."""
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return ast.unparse(node.value)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars"
            and len(node.args) == 1):
        return ast.unparse(node.args[0])
    return None


def _attachments(source: str) -> list[tuple[int, str]]:
    """(line, code) of each attachment: an attribute read or written by key in an object's
    ``__dict__`` (or ``vars``), one's own included (``x.__dict__[k] = v``, ``.get(k)``), and
    ``setattr``/``delattr`` on a model. A whole ``__dict__`` (a copy, a loop) is fine."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        keyed = (isinstance(node, ast.Subscript) and _dict_of(node.value) is not None) or (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in KEYED and _dict_of(node.func.value) is not None)
        on_model = (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("setattr", "delattr") and node.args
                    and MODEL_NAME.search(ast.unparse(node.args[0])) is not None)
        if keyed or on_model:
            found.add((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_nothing_is_attached_to_an_object_from_outside_its_class():
    found = [f"{path.relative_to(ROOT)}:{line}: {code}"
             for path in [*PACKAGE.rglob("*.py"), *SCRIPTS.rglob("*.py")]
             for line, code in _attachments(path.read_text())]
    assert not found, "declare the attribute in its class instead:\n" + "\n".join(found)


def test_the_size_and_attachment_checks_can_fail(tmp_path):
    source = ("def f(model, m, self, other):\n"
              "    m.__dict__['kernel'] = 1\n"  # another object's, written
              "    k = m.layer.__dict__.get('kernel')\n"  # another object's, read
              "    fast = self.__dict__.get('compiled_step')\n"  # one's own, by key
              "    self.__dict__['x'] = 2\n"
              "    vars(other)['y'] = 3\n"
              "    setattr(model, 'shortlist', 4)\n"
              "    delattr(self.model, 'shortlist')\n"
              "    return dict(self.__dict__), setattr(server, 'should_exit', True)\n")
    assert [line for line, _ in _attachments(source)] == [2, 3, 4, 5, 6, 7, 8]
    assert _attachments("def f(self, a):\n    return dict(self.__dict__), [k for k in vars(a)]\n") == []
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "small.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert _long_modules(sorted(tmp_path.glob("*.py")), tmp_path) == [
        f"big.py ({MAX_MODULE_LINES + 1} lines)"]


PLANTED = {  # a tree with one of each fault, found through the same parsing as the real one
    "seq2seq/__init__.py": "",
    "seq2seq/model/__init__.py": "",
    "seq2seq/model/cache.py": "def f():\n    from seq2seq.decoding import search\n",  # upward
    "seq2seq/decoding/__init__.py": "",
    "seq2seq/decoding/search.py": "import seq2seq.model.cache as cache\n",
    "seq2seq/serving/api.py": "from seq2seq.cli.translate import decoding_from_args\n",  # upward
    "seq2seq/cli/translate.py": "from seq2seq.serving import api\n",
    "scripts/bench/__init__.py": "",
    "scripts/bench/isolate.py": "def child():\n    from scripts.bench.decode import hf_model\n",
    "scripts/bench/decode.py": "from scripts.bench import isolate\n",  # cycle via isolate
    "scripts/bench/engines.py": "from seq2seq.serving.loadtest import run\n",  # undocumented
    "scripts/tool.py": "from seq2seq.model import _private\n",  # a private name
}


def test_the_checks_can_fail(tmp_path):
    """A planted upward import, cycle, undocumented module and private name are each
    reported, from source text (lazy, aliased and ``from package import module`` forms)."""
    for rel, text in PLANTED.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = _graph(tmp_path)
    edges = _edges(graph)
    assert edges["scripts.bench.decode"] == {"scripts.bench.isolate"}  # not the package
    assert edges["seq2seq.decoding.search"] == {"seq2seq.model.cache"}
    assert sorted(_upward(edges)) == [
        f"{low} (layer {_layer(low)}) imports {high} (layer {_layer(high)})" for low, high in
        (("scripts.bench.isolate", "scripts.bench.decode"),
         ("seq2seq.model.cache", "seq2seq.decoding.search"),
         ("seq2seq.serving.api", "seq2seq.cli.translate"))]
    assert _cycle(edges) in (["scripts.bench.decode", "scripts.bench.isolate", "scripts.bench.decode"],
                             ["seq2seq.cli.translate", "seq2seq.serving.api", "seq2seq.cli.translate"])
    del edges["scripts.bench.decode"], edges["seq2seq.serving.api"]
    assert _cycle(edges) == ["seq2seq.decoding.search", "seq2seq.model.cache",
                             "seq2seq.decoding.search"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    documented = ({"seq2seq.model.cache"}, set())
    assert _not_public(graph, *documented, {"seq2seq.model"}) == [
        "scripts.bench.engines imports seq2seq.serving.loadtest.run",
        "scripts.tool imports seq2seq.model._private"]
    assert _documented("## Modules\n\n| `model/cache.py` | x |\n| `cli/` | y |\n\nScripts:\n\n"
                       "| `run.py` | z |\n") == ({"seq2seq.model.cache"}, {"seq2seq.cli"})
    with pytest.raises(AssertionError, match="in no layer"):
        _layer("scripts.bench.new_module")
    assert _layer("scripts.new_tool") == LAYERS["scripts.*"]
    assert _layer("seq2seq.cli.x") == LAYERS["seq2seq.cli"]


# Used from Python, these speak the library's names: a message naming an option names its
# field ("{compute_type}" in a FieldError or FieldWarning), which the CLIs render as a flag
# (cli/common.py) and the server as a request field (serving/api.py). Docstrings may name
# the flag that sets a thing: they are read in the code, never shown to a caller.
FIELD_NAMED = ("model", "decoding", "data", "documents", "translation", "config", "fields.py",
               "directions.py", "distill.py")
FLAG_TEXT = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _flag_text(source: str) -> list[tuple[int, str]]:
    """(line, flag) of each CLI flag in a string of ``source`` that is not a docstring
    (f-strings' literal parts included)."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                       ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, flag) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings for flag in FLAG_TEXT.findall(node.value)]


def test_layers_used_from_python_name_fields_not_flags():
    paths = [p for name in FIELD_NAMED for p in
             ([PACKAGE / name] if name.endswith(".py") else sorted((PACKAGE / name).rglob("*.py")))]
    assert len(paths) > 40
    found = [f"{p.relative_to(ROOT)}:{line}: {flag}" for p in paths
             for line, flag in _flag_text(p.read_text())]
    assert not found, "name the field ({name} in a FieldError), not the flag:\n" + "\n".join(found)


def test_the_flag_check_can_fail():
    source = ('"""Module: --compile is named here, for the reader."""\n'
              'def f(n):\n    """Same: --beam."""\n'
              '    raise ValueError(f"--min-len {n}: bad; see a--x and a-b --c9")\n'
              'X = "-1 and --- and --"  # --comment\n')
    assert _flag_text(source) == [(4, "--min-len"), (4, "--c9")]


def _test_file_imports(source: str, test_files: set[str]) -> list[str]:
    """The test files (by module name) that ``source`` imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [n for n in names if n.rsplit(".", 1)[-1] in test_files]
    return found


def test_no_test_file_imports_another():
    """What test files share is in tests/helpers.py, tests/stand_ins.py or a conftest.py:
    a test file imported by another ties their tests together (and its own module code
    runs twice)."""
    tests = sorted((ROOT / "tests").rglob("*.py"))
    test_files = {p.stem for p in tests if p.stem.startswith("test_")}
    found = [f"{p.relative_to(ROOT)} imports {name}" for p in tests
             for name in _test_file_imports(p.read_text(), test_files)]
    assert not found, "\n".join(found)


def test_the_test_import_check_can_fail():
    source = "from test_docs import ROOT\nimport helpers\nfrom tests.serving import test_serve\n"
    assert _test_file_imports(source, {"test_docs", "test_serve"}) == [
        "test_docs", "tests.serving.test_serve"]
