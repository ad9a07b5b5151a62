"""The property-test profiles of tests/conftest.py: "repeatable" (the test command and CI)
draws the same examples every run and replays the examples that "explore" found and saved;
"explore" draws fresh ones. Each check runs pytest on a small property test in a copy of
tests/conftest.py, so the repository's saved examples are never touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")

# Records each drawn value; fails on values >= 1000 (easy to find) or, when FAIL_ON is set,
# only on that one value (which random drawing alone practically never hits).
PROPERTY = '''
import os
from hypothesis import given, settings, strategies as st

@settings(max_examples=50)
@given(st.integers())
def test_property(x):
    with open(os.environ["DRAWN"], "a") as f:
        f.write(f"{x}\\n")
    fail_on = os.environ.get("FAIL_ON")
    assert (x != int(fail_on)) if fail_on else x < 1000
'''


def _pytest(folder: Path, *args: str, **env: str) -> tuple[int, list[str]]:
    drawn = folder / "drawn.txt"
    drawn.unlink(missing_ok=True)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          str(folder / "test_property.py"), *args],
                         cwd=folder, env={**os.environ, "DRAWN": str(drawn), **env},
                         capture_output=True, text=True, timeout=300)
    return run.returncode, drawn.read_text().split() if drawn.exists() else []


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_property.py").write_text(PROPERTY)
    return tmp_path


@pytest.mark.slow
def test_repeatable_runs_draw_the_same_examples_and_explore_draws_fresh_ones(folder):
    fail_nowhere = {"FAIL_ON": "-7777777777777"}
    code1, first = _pytest(folder, **fail_nowhere)
    code2, second = _pytest(folder, **fail_nowhere)
    assert code1 == code2 == 0 and first == second and len(first) >= 10
    code3, explored = _pytest(folder, "--hypothesis-profile", "explore", **fail_nowhere)
    assert code3 == 0 and explored != first


@pytest.mark.slow
def test_an_example_that_explore_found_is_replayed_by_repeatable_runs(folder):
    assert _pytest(folder, "-x", FAIL_ON="1000")[0] == 0  # not hit by drawing alone
    code, _ = _pytest(folder, "--hypothesis-profile", "explore")
    assert code == 1 and any((folder / "hypothesis-found").iterdir())  # found and saved
    code, drawn = _pytest(folder, FAIL_ON="1000")
    assert code == 1 and "1000" in drawn  # the saved (shrunk) example, replayed
