"""What a newcomer installs: the distribution's name, its extras and their ranges, and every
"pip install" the docs, the code and the tests tell a user, checked against pyproject.toml."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import shlex
import sys
from functools import cache
from pathlib import Path

import pytest

from seq2seq import extras

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
Requirement = pytest.importorskip("packaging.requirements").Requirement

ROOT = Path(__file__).resolve().parents[1]
TEXT_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / ".ci" / "run",
              *sorted((ROOT / "scripts").rglob("*.py")), *sorted((ROOT / "scripts").rglob("*.sh")),
              *sorted(p for p in (ROOT / "tests").rglob("*.py") if p.name != "test_packaging.py")]
CODE = sorted((ROOT / "seq2seq").rglob("*.py"))
TEST_ONLY = {"pytest", "ruff", "hypothesis", "pytest-xdist", "httpx", "playwright",
             "libretranslatepy", "deep-translator"}


@cache
def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def requirements(group: str | None = None) -> list:
    deps = project()["dependencies"] if group is None else project()["optional-dependencies"][group]
    return [Requirement(d) for d in deps]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_distribution_is_not_pypis_seq2seq():
    """``seq2seq`` on PyPI is an unrelated project: ours is ``seq2seq-mt`` (import name seq2seq)."""
    assert project()["name"] == extras.DISTRIBUTION == "seq2seq-mt"
    assert (ROOT / "seq2seq" / "__init__.py").is_file()


@pytest.mark.parametrize("group", [None, "hf", "ctranslate2", "serve", "documents", "bench", "dev"])
def test_every_dependency_has_a_range_the_installed_version_is_in(group):
    for req in requirements(group):
        ops = {s.operator for s in req.specifier}
        assert ">=" in ops and "<" in ops, f"{req}: needs a lower and an upper bound"
        try:
            installed = md.version(req.name)
        except md.PackageNotFoundError:
            continue
        assert req.specifier.contains(installed, prereleases=True), \
            f"{req}: the installed {req.name} {installed} is outside the range"
        # up to the next major version after the tested one (1.0 for a 0.x), not beyond
        upper = next(s.version for s in req.specifier if s.operator == "<")
        assert int(upper.split(".")[0]) <= int(installed.split(".")[0]) + 1, \
            f"{req}: its upper bound is past the next major version after {installed}"


def test_runtime_extras_hold_no_test_tools():
    for group in project()["optional-dependencies"]:
        if group not in ("dev", "bench"):
            names = {norm(r.name) for r in requirements(group)}
            assert not names & TEST_ONLY, f"{group} holds test-only packages {names & TEST_ONLY}"
    dev = {norm(r.name) for r in requirements("dev")}
    assert TEST_ONLY <= dev, TEST_ONLY - dev


def third_party_imports(paths: list[Path]) -> set[str]:
    names = set()
    for p in paths:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("seq2seq", "scripts")}


def test_the_serve_extra_is_what_the_server_imports():
    """Every package the server's code imports (and the documents it translates) is in the
    serve extra, the core dependencies or what FastAPI itself requires (starlette,
    pydantic); python-multipart is imported by FastAPI itself, for form bodies."""
    paths = [*(ROOT / "seq2seq" / "serving").rglob("*.py"), *(ROOT / "seq2seq" / "documents").rglob("*.py")]
    dists = md.packages_distributions()
    needed = {norm(d) for mod in third_party_imports(paths) for d in dists.get(mod, [mod])}
    have = {norm(r.name) for r in requirements("serve") + requirements()}
    have |= {norm(Requirement(r).name) for r in md.requires("fastapi") or [] if "extra ==" not in r}
    assert needed <= have, needed - have
    serve = {norm(r.name) for r in requirements("serve")}
    assert serve - needed == {"python-multipart"}, serve - needed


# ---------------------------------------------------------------- install hints
PIP = re.compile(r"pip install ([^\n`]*)")


def install_targets(text: str) -> list[str]:
    """The packages each ``pip install`` in ``text`` names (options dropped; ``-e X`` is X)."""
    out = []
    for m in PIP.finditer(text):
        rest = re.split(r"\s(?:&&|\|\||;|#|\()|\)", m[1])[0]
        try:
            words = shlex.split(rest)
        except ValueError:  # an unbalanced quote: the hint is cut off in the line
            words = rest.replace("'", " ").replace('"', " ").split()
        out += [w for w in words if not w.startswith("-") and w != "PKG"]
    return out


def check_target(target: str, where: str) -> None:
    m = re.fullmatch(r"(?P<dist>[\w./-]+?)(?:\[(?P<extras>[\w,-]+)\])?(?:[=<>!~]=?[\w.]+)?",
                     target.strip("'\""))
    assert m, f"{where}: cannot read the install target {target!r}"
    dist, wanted = m["dist"], (m["extras"] or "").split(",")
    assert norm(dist) != "seq2seq", f"{where}: {target!r} installs PyPI's unrelated seq2seq"
    ours = dist in (".", str(ROOT)) or norm(dist) == extras.DISTRIBUTION
    if ours:
        missing = [e for e in wanted if e and e not in project()["optional-dependencies"]]
        assert not missing, f"{where}: {target!r} names no extra {missing} of pyproject.toml"
    else:
        assert not m["extras"] or dist.startswith("/"), f"{where}: {target!r} is not ours"


def test_install_lines_in_docs_scripts_and_tests_name_our_extras():
    seen = 0
    for path in TEXT_FILES:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for target in install_targets(line):
                check_target(target, f"{path.relative_to(ROOT)}:{n}")
                seen += 1
    assert seen >= 10, seen  # the scan finds the README's and the tests' lines


def test_code_words_every_install_hint_through_extras():
    """No module but seq2seq/extras.py spells a ``pip install``: they all call install_hint."""
    spelled = [f"{p.relative_to(ROOT)}:{n}" for p in CODE if p.name != "extras.py"
               for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
               if "pip install" in line]
    assert not spelled, spelled
    callers = {m for p in CODE for m in re.findall(r"install_hint\(['\"](\w+)['\"]\)", p.read_text())}
    assert callers == set(extras.EXTRAS), callers
    for extra in extras.EXTRAS:
        hint = extras.install_hint(extra)
        assert extra in project()["optional-dependencies"], extra
        targets = install_targets(hint)
        assert targets == [f"{extras.CHECKOUT}[{extra}]"], hint
        check_target(targets[0], f"install_hint({extra!r})")


def test_install_hint_without_a_checkout(monkeypatch, tmp_path):
    monkeypatch.setattr(extras, "CHECKOUT", tmp_path)  # an installed copy: no pyproject.toml
    hint = extras.install_hint("hf")
    assert install_targets(hint) == [".[hf]"] and extras.DISTRIBUTION in hint
    with pytest.raises(ValueError, match="no extra 'nope'"):
        extras.install_hint("nope")


SKIP_HINT = re.compile(r"importorskip\(\s*\"([\w.]+)\",\s*reason=\"[^\"]*?"
                       r"(?:pip install -e '\.\[(\w+)\]'|the (\w+) extra)")


def test_test_skips_name_the_extra_that_holds_the_package():
    """``importorskip("mod", reason="... '.[E]'")``: the package of ``mod`` is in extra E."""
    dists = md.packages_distributions()
    checked = 0
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for m in SKIP_HINT.finditer(path.read_text(encoding="utf-8")):
            module, extra = m[1], m[2] or m[3]
            group = {norm(r.name) for r in requirements(extra)}
            for dist in dists.get(module.split(".")[0], []):
                assert norm(dist) in group, f"{path.name}: {module} ({dist}) is not in .[{extra}]"
                checked += 1
    assert checked >= 5, checked


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip().splitlines()[-2]  # then -m slow
    assert ci in readme and ci.startswith('pip install -e ".[dev,bench,serve]"')
