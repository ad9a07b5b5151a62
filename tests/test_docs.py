"""The documentation stays true (README.md and docs/*.md):

- every fenced block marked ``<!-- runnable -->`` runs (the blocks of a page in order, in one
  scratch folder that sees the repository's data/, configs/ and scripts/, with a time limit)
  and prints every ``# => `` line it promises, in order;
- every relative link resolves (file and heading anchor), and every repository path the text
  names (``data/...``, ``configs/...``, ``scripts/...``, ...) exists;
- every option the docs give a command exists in that command's parser, every other option
  they name exists in some command, and every option of every ``seq2seq-*`` command is
  named in its section of docs/cli.md (seq2seq-train's: somewhere in the docs);
- a table marked ``<!-- figures: FILE.json ... -->`` shows only figures found in those files;
- no user-facing text tells how the project was developed; the README stays short, with the
  two commands at the top.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import inspect
import io
import json
import os
import re
import runpy
import subprocess
import sys
import typing
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MAIN_JOB = "pip install torch==2.13.0 -e . && bash scripts/quickstart.sh"
TESTS = 'pip install -e ".[dev,bench,serve]" && python -m pytest'
SLOW_TESTS = "python -m pytest -m slow"  # CI's second line: the tests the default run leaves out

FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                   re.M | re.S)
RUNNABLE = re.compile(r"<!--\s*runnable(?:\s+timeout=(\d+))?\s*-->\s*$")
FIGURES = re.compile(r"<!--\s*figures:\s*(.+?)\s*-->")
OPTION = re.compile(r"(?<![\w.-])(--[a-z][\w.-]*[a-z0-9_])")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@cache
def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@dataclasses.dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    body: str
    marker: str  # the last non-blank line before the fence

    @property
    def where(self) -> str:
        return f"{rel(self.page)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = read(page)
    out = []
    for m in FENCE.finditer(text):
        before = [line for line in text[: m.start()].splitlines() if line.strip()]
        body = "\n".join(line.removeprefix(m["indent"]) for line in m["body"].splitlines())
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, m["info"].strip().split(" ")[0],
                         body, before[-1].strip() if before else ""))
    return out


def prose(page: Path) -> str:
    """The page without its fenced blocks (line count kept)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), read(page))


def code_spans(page: Path) -> list[str]:
    return re.findall(r"`([^`\n]+)`", prose(page))


# ---------------------------------------------------------------- the README itself
def test_readme_is_short_with_the_two_commands_on_top():
    readme = read(ROOT / "README.md")
    assert len(readme.encode()) <= 15 * 1024, f"README.md is {len(readme.encode())} bytes (> 15 KB)"
    first = [b.body.strip() for b in blocks(ROOT / "README.md")[:2]]
    assert first == [MAIN_JOB, TESTS], first
    assert read(ROOT / ".ci" / "run").rstrip().splitlines()[-2:] == [TESTS, SLOW_TESTS]
    assert f"`{SLOW_TESTS}`" in prose(ROOT / "README.md")
    main_job = blocks(ROOT / "README.md")[0]
    assert not RUNNABLE.search(main_job.marker), "the main job (minutes of training) must not run in CI"


HISTORY = re.compile(r"session [0-9]|issue [0-9]+|\(issue", re.I)


def test_user_facing_text_tells_no_development_history():
    """History belongs in CHANGELOG.md and git, not in the README, docs, help texts or comments."""
    files = [*PAGES, *(p for d in ("seq2seq", "scripts", "configs") for p in (ROOT / d).rglob("*")
                       if p.is_file() and p.suffix in (".py", ".sh", ".yaml", ".md", ".html", ".js",
                                                        ".css", ".txt", ""))]
    hits = [f"{rel(p)}:{n}: {line.strip()}" for p in files
            for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if HISTORY.search(line)]
    assert not hits, "development history in user-facing text:\n" + "\n".join(hits)


# ---------------------------------------------------------------- runnable blocks
def runnable(page: Path) -> list[tuple[Block, int]]:
    return [(b, int(m[1] or 120)) for b in blocks(page) if (m := RUNNABLE.search(b.marker))]


RUNNABLE_PAGES = [p for p in PAGES if runnable(p)]


def test_runnable_blocks_are_marked_where_promised():
    """The README and at least four pages of docs have blocks CI runs (a marker that no test
    reads would make this file's main check vacuous)."""
    assert ROOT / "README.md" in RUNNABLE_PAGES and len(RUNNABLE_PAGES) >= 5, RUNNABLE_PAGES
    for page in PAGES:
        for b, _ in runnable(page):
            assert b.lang in ("bash", "python"), f"{b.where}: runnable blocks are bash or python"
            assert MAIN_JOB not in b.body, f"{b.where}: the main job does not run in CI"


def shim(path: Path, args: str = "") -> None:
    """An executable ``path`` that runs this interpreter with ``args`` and its own arguments."""
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" {args} "$@"\n')
    path.chmod(0o755)


def scratch_folder(tmp_path: Path) -> tuple[Path, dict]:
    """A working folder that sees the repository's data/, configs/ and scripts/, and a PATH
    on which every console script runs this checkout's code (installed or not yet)."""
    work, bin_dir = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    bin_dir.mkdir()
    for name in ("data", "configs", "scripts"):
        (work / name).symlink_to(ROOT / name)
    for name, target in console_scripts().items():
        module, func = target.split(":")
        shim(bin_dir / name, f'-c "import sys; sys.argv[0] = \'{name}\'; from {module} import '
                             f'{func}; {func}()"')
    # a script, not a symlink: a virtual environment's interpreter linked from another folder
    # finds no pyvenv.cfg beside it and runs the base Python, without the environment's packages
    shim(bin_dir / "python")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT), "HF_DATASETS_OFFLINE": "1", "COLUMNS": "120"}
    return work, env


def test_python_in_the_scratch_folder_is_this_environment(tmp_path):
    """``python`` in a runnable block is the interpreter running the tests, with its packages:
    a symlink to a virtual environment's interpreter, in another folder, finds no
    ``pyvenv.cfg`` and runs the base Python instead."""
    work, env = scratch_folder(tmp_path)
    got = subprocess.run(["python", "-c", "import sys; print(sys.prefix)"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    assert got.stdout.strip() == sys.prefix


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=rel)
def test_runnable_blocks_run_and_print_what_they_promise(page, tmp_path):
    work, env = scratch_folder(tmp_path)
    for i, (block, timeout) in enumerate(runnable(page)):
        if block.lang == "python":
            (work / f"block{i}.py").write_text(block.body, encoding="utf-8")
            argv = [sys.executable, f"block{i}.py"]
        else:
            argv = ["bash", "-e", "-o", "pipefail", "-c", block.body]
        try:
            res = subprocess.run(argv, cwd=work, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"{block.where}: still running after its {timeout} s limit:\n"
                        f"{(e.stdout or '')[-2000:]}")
        assert res.returncode == 0, f"{block.where}: exit status {res.returncode}:\n{res.stdout[-3000:]}"
        promised = [line.strip().removeprefix("# => ") for line in block.body.splitlines()
                    if line.strip().startswith("# => ")]
        printed = [line.rstrip() for line in res.stdout.splitlines()]
        it = iter(printed)
        missing = [line for line in promised if line not in it]
        assert not missing, (f"{block.where}: promised lines not printed (in order): {missing}\n"
                             "printed:\n" + "\n".join(printed[-60:]))


# ---------------------------------------------------------------- links and paths
def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m[1]) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", prose(page), re.M)}


def links(page: Path) -> list[str]:
    text = prose(page)
    found = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    found += re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", text, re.M)
    found += re.findall(r"""(?:src|href)=["']([^"']+)["']""", text)
    return [t for t in found if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # http:, mailto:, ...


def test_relative_links_resolve():
    broken = []
    for page in PAGES:
        for target in links(page):
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{rel(page)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{rel(page)}: {target} (no heading with that anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken)


TOP_FILES = {"README.md", "ARCHITECTURE.md", "CHANGELOG.md", "pyproject.toml"}
PATH_TOKEN = re.compile(r"(?<![\w./~$-])((?:data|configs|scripts|seq2seq|tests|docs|\.ci)/[\w./{},*$-]*"
                        r"|(?:README|ARCHITECTURE|CHANGELOG)\.md|pyproject\.toml)")


def braces(path: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m[1].split(",") for p in braces(path[: m.start()] + alt + path[m.end():])]


def named_paths(page: Path) -> list[str]:
    texts = code_spans(page) + [b.body for b in blocks(page)]
    return [t.rstrip(".,:;") for text in texts for t in PATH_TOKEN.findall(text)]


def test_named_repository_paths_exist():
    """Placeholders (an all-capitals part: X, RUN, NAME) and paths with a shell variable are
    left out; braces and globs must match something."""
    missing = []
    for page in PAGES:
        for path in named_paths(page):
            if "..." in path or "$" in path or any(part.isupper() for part in re.split(r"[/._{},*-]", path)):
                continue
            for variant in braces(path):
                if not glob.glob(str(ROOT / variant)):
                    missing.append(f"{rel(page)}: {variant}")
    assert not missing, "named paths that do not exist:\n" + "\n".join(sorted(set(missing)))


# ---------------------------------------------------------------- options
@cache
def console_scripts() -> dict[str, str]:
    """``{name: "module:function"}`` from pyproject.toml's [project.scripts] (tomllib is 3.11+)."""
    section = read(ROOT / "pyproject.toml").split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^([\w-]+)\s*=\s*"([\w.]+:\w+)"', section, re.M))


class _Parser(Exception):
    def __init__(self, parser):
        self.parser = parser


def _options_of(parser: argparse.ArgumentParser) -> list[tuple[str, ...]]:
    """Each visible option as its option strings (aliases together), subcommands included."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _options_of(sub)
        elif action.option_strings and action.help != argparse.SUPPRESS \
                and not isinstance(action, argparse._HelpAction):
            out.append(tuple(action.option_strings))
    return out


def captured_options(run) -> list[tuple[str, ...]] | None:
    """The options of the argparse parser that ``run()`` builds, caught at its parse call."""
    def catch(self, *args, **kwargs):
        raise _Parser(self)

    original = argparse.ArgumentParser.parse_known_args
    argparse.ArgumentParser.parse_known_args = catch
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            run()
    except _Parser as got:
        return _options_of(got.parser)
    except BaseException:  # noqa: BLE001 - a script that parses no options
        return None
    finally:
        argparse.ArgumentParser.parse_known_args = original
    return None


def _dataclass_of(hint):
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return next((a for a in args if dataclasses.is_dataclass(a)), None)


def leaf_options(prefix: str, obj) -> set[str]:
    """``--prefix.name`` for each parameter of ``obj`` (a class's __init__ or a dataclass),
    descending into dataclass-typed ones: the options LightningCLI makes of them."""
    hints = typing.get_type_hints(obj.__init__ if not dataclasses.is_dataclass(obj) else obj)
    names = ([f.name for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else
             [p for p in inspect.signature(obj.__init__).parameters if p != "self"])
    out = set()
    for name in names:
        inner = _dataclass_of(hints.get(name))
        out |= leaf_options(f"{prefix}.{name}", inner) if inner else {f"{prefix}.{name}"}
    return out


@cache
def train_options() -> tuple[set[str], set[str]]:
    """(every option ``seq2seq-train`` accepts, the ones this project defines): Lightning's
    from ``seq2seq-train fit --help``; the model's, the data's and the curves' from the
    classes the CLI is built on (their dataclass fields are options too, listed only by
    ``--model.arch.help`` and the like). Lightning's Trainer and ModelCheckpoint options
    are Lightning's to document: the docs name those they use, and those must exist."""
    from seq2seq.cli.train import main
    from seq2seq.data.datamodule import Seq2SeqDataModule
    from seq2seq.training.callbacks import TrainingCurves
    from seq2seq.training.module import Seq2SeqModule

    out, argv = io.StringIO(), sys.argv
    sys.argv = ["seq2seq-train"]  # LightningCLI warns about a command line beside args
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main(["fit", "--help"])
    finally:
        sys.argv = argv
    # an option at a line's start, or after its short form (``-c CONFIG, --config CONFIG``)
    listed = set(re.findall(r"^\s+(?:-\w(?: \S+)?, )?(--[a-z][\w.-]*)", out.getvalue(), re.M))
    assert "--trainer.max_steps" in listed, out.getvalue()[-2000:]
    ours = (leaf_options("--model", Seq2SeqModule) | leaf_options("--data", Seq2SeqDataModule)
            | leaf_options("--curves", TrainingCurves))
    # the top-level options of LightningCLI itself that every run uses
    ours |= {o for o in listed if o in ("--config", "--print_config", "--ckpt_path", "--seed_everything")}
    return listed | ours | {"--help"}, ours


def _call_with_help(main, name: str) -> None:
    """``main(["--help"])``, or ``main()`` with that command line when it takes no argv."""
    argv = sys.argv
    sys.argv = [name, "--help"]
    try:
        main(["--help"]) if inspect.signature(main).parameters else main()
    finally:
        sys.argv = argv


@cache
def command_options() -> dict[str, list[tuple[str, ...]]]:
    """``{command: its options}`` for every console script but seq2seq-train."""
    out = {}
    for name, target in console_scripts().items():
        if name == "seq2seq-train":
            continue
        module, func = target.split(":")
        main = getattr(__import__(module, fromlist=[func]), func)
        options = captured_options(lambda main=main, name=name: _call_with_help(main, name))
        assert options, f"{name}: no argparse parser found in {target}"
        out[name] = options
    return out


@cache
def script_options(path: str) -> set[str] | None:
    """The options of ``python scripts/X.py`` (None: it has no argparse parser)."""
    argv = sys.argv
    sys.argv = [path, "--help"]
    try:
        options = captured_options(lambda: runpy.run_path(str(ROOT / path), run_name="__main__"))
    finally:
        sys.argv = argv
    return None if options is None else {s for o in options for s in o} | {"--help"}


def accepted(command: str) -> set[str] | None:
    if command == "seq2seq-train":
        return train_options()[0]
    if command.startswith("scripts/"):
        return script_options(command)
    return {s for o in command_options()[command] for s in o} | {"--help"}


def command_in(tokens: list[str]) -> tuple[str, int] | None:
    """The first of our commands in a shell segment, and where its arguments start."""
    for i, tok in enumerate(tokens):
        if tok in console_scripts():
            return tok, i + 1
        if tok == "-m" and i + 1 < len(tokens) and tokens[i + 1].startswith("seq2seq.cli."):
            name = "seq2seq-" + tokens[i + 1].rsplit(".", 1)[1]
            return (name, i + 2) if name in console_scripts() else None
        if re.fullmatch(r"scripts/(?:experiments/)?\w+\.py", tok) and i and tokens[i - 1].endswith("python"):
            return tok, i + 1
    return None


def mentions(page: Path) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """(``(command, option, where)`` for options given to one of our commands, ``(option,
    where)`` for options named elsewhere in the text); other programs' options are skipped."""
    given, named = [], []
    commands = []  # (text, where, is a shell block)
    for b in blocks(page):
        if b.lang in ("bash", "sh", "shell", "console", ""):
            joined = b.body.replace("\\\n", " ")
            for line in joined.splitlines():
                code = re.split(r"(?:^|\s)#", line, maxsplit=1)[0]
                commands.append((code, b.where, True))
                named += [(o, b.where) for o in OPTION.findall(line[len(code):]) if "." in o]
    for span in code_spans(page):
        commands.append((span, rel(page), False))
    for text, where, shell in commands:
        for segment in re.split(r"\|\||&&|[|;&]|\$\(", text):
            tokens = segment.split()
            found = command_in(tokens)
            if found:
                command, start = found
                for tok in tokens[start:]:
                    if OPTION.fullmatch(tok.split("=")[0]) and not re.search(r"[A-Z]", tok.split("=")[0]):
                        given.append((command, tok.split("=")[0], where))
            elif not shell or any(t.startswith("$") for t in tokens[:1]):
                named += [(o, where) for o in OPTION.findall(segment)]
    text = prose(page)
    no_spans = re.sub(r"`[^`\n]+`", " ", text)
    named += [(o, rel(page)) for o in OPTION.findall(no_spans)]
    named = [(o, w) for o, w in named if not re.search(r"[A-Z]", o)]
    return given, named


def test_options_the_docs_name_exist():
    scripts = [rel(p) for p in sorted([*(ROOT / "scripts").glob("*.py"), *(ROOT / "scripts/experiments").glob("*.py")])]
    every = set(train_options()[0]).union(*(accepted(c) for c in [*command_options(), *scripts]
                                            if accepted(c)))
    wrong = []
    for page in PAGES:
        given, named = mentions(page)
        for command, option, where in given:
            ok = accepted(command)
            if ok is not None and option not in ok:
                wrong.append(f"{where}: {command} has no option {option}")
        for option, where in named:
            if option not in every:
                wrong.append(f"{where}: no command has an option {option}")
    assert not wrong, "options the docs name that do not exist:\n" + "\n".join(sorted(set(wrong)))


def cli_sections() -> dict[str, str]:
    """docs/cli.md's ``## COMMAND`` sections, by command."""
    return dict(re.findall(r"^## (\S+)\n(.*?)(?=^## |\Z)", read(ROOT / "docs" / "cli.md"),
                           re.M | re.S))


def test_every_option_of_every_command_is_documented():
    """Each option (any one of its spellings) of each ``seq2seq-*`` command is named in
    that command's section of docs/cli.md, the reference that promises every option of every
    command (a mention on another page is not enough: that page is not where one looks it
    up); for seq2seq-train, whose section points to training.md's list, the options this
    project defines (its model, data and curves settings, and LightningCLI's --config,
    --print_config, --ckpt_path, --seed_everything) appear in README.md or docs/."""
    sections = {command: set(OPTION.findall(text)) | set(re.findall(r"(?<![\w-])-[a-zA-Z]\b", text))
                for command, text in cli_sections().items()}
    missing = [f"{command}: {' / '.join(spellings)}"
               for command, options in command_options().items() for spellings in options
               if not any(s in sections.get(command, ()) for s in spellings)]
    mentioned = set(OPTION.findall("\n".join(read(p) for p in PAGES)))
    missing += [f"seq2seq-train: {o}" for o in sorted(train_options()[1]) if o not in mentioned]
    assert not missing, ("options missing from their command's section of docs/cli.md (or, "
                         "for seq2seq-train, from README.md and docs/):\n" + "\n".join(missing))


# ---------------------------------------------------------------- figure tables
def numbers_in(obj) -> list[float]:
    if isinstance(obj, dict):
        return [n for v in obj.values() for n in numbers_in(v)]
    if isinstance(obj, list):
        return [n for v in obj for n in numbers_in(v)]
    return [obj] if isinstance(obj, (int, float)) and not isinstance(obj, bool) else []


def figure_tables(page: Path) -> list[tuple[int, list[str], list[list[str]]]]:
    """``(line, JSON files, body rows' cells)`` of each table right after a figures marker."""
    lines, out = prose(page).splitlines(), []
    for i, line in enumerate(lines):
        m = FIGURES.search(line)
        if not m:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        rows = []
        while j < len(lines) and lines[j].lstrip().startswith("|"):
            rows.append([c.strip() for c in lines[j].strip().strip("|").split("|")])
            j += 1
        out.append((i + 1, m[1].split(), rows[2:]))  # header and rule left out
    return out


def test_marked_figure_tables_match_their_json():
    """Every decimal figure of a marked table (outside its first column) is a value of one of
    the named JSON files, shown rounded to the digits the table gives."""
    tables = [(page, *t) for page in PAGES for t in figure_tables(page)]
    assert any(page.name == "README.md" for page, *_ in tables), "the README's results table is marked"
    stale = []
    for page, line, files, rows in tables:
        paths = sorted({p for f in files for b in braces(f) for p in glob.glob(str(ROOT / b))})
        assert paths, f"{rel(page)}:{line}: no file matches {files}"
        values = [v for p in paths for v in numbers_in(json.loads(Path(p).read_text()))]
        assert rows, f"{rel(page)}:{line}: a figures marker with no table after it"
        checked = 0
        for row in rows:
            for cell in row[1:]:
                for fig in re.findall(r"(?<![\w.])-?\d[\d,]*\.\d+(?![\w.])", cell):
                    digits = len(fig.split(".")[1])
                    shown = fig.replace(",", "")
                    checked += 1
                    if not any(f"{v:.{digits}f}" == shown for v in values):
                        stale.append(f"{rel(page)}:{line}: {fig} (row {row[0]!r}) is in none of {files}")
        assert checked, f"{rel(page)}:{line}: a marked table without figures"
    assert not stale, "figures that do not match their JSON:\n" + "\n".join(stale)
