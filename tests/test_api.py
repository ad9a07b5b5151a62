"""The public API: ``import seq2seq`` exports it and is cheap (no torch until used), and the
README's "Python API" block runs as written."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT


def test_top_level_exports_the_public_api():
    import seq2seq
    from seq2seq import checkpoint, config, translation

    assert seq2seq.Translator is translation.translator.Translator
    assert seq2seq.load_checkpoint is checkpoint.load_checkpoint
    for name in ("ModelConfig", "DecodingConfig", "DataConfig", "TokenizerConfig", "OptimConfig"):
        assert getattr(seq2seq, name) is getattr(config, name)
    assert set(seq2seq.__all__) == {"__version__", *seq2seq._EXPORTS}
    assert all(getattr(seq2seq, name) is not None for name in seq2seq.__all__)
    assert set(seq2seq.__all__) <= set(dir(seq2seq))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        seq2seq.nope  # noqa: B018


def test_import_seq2seq_is_cheap():
    code = "import sys, seq2seq; print(sorted(m for m in ('torch', 'lightning', 'datasets') if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stderr


def test_readme_python_api_runs_as_written(tmp_path, monkeypatch, capsys):
    """The README's "Python API" block, executed verbatim (from a folder that sees the
    repository's data/), prints every ``# =>`` line it promises, in order, and leaves
    nothing in the working directory (its plot goes to a temporary folder)."""
    import re
    import tempfile

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    expected = [line.removeprefix("# => ") for line in code.splitlines() if line.startswith("# => ")]
    assert expected
    work, temporary = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    temporary.mkdir()
    (work / "data").symlink_to(ROOT / "data")
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))  # the block's temporary files
    exec(compile(code, "README.md (Python API)", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out.splitlines()
    it = iter(printed)
    assert all(line in it for line in expected), (expected, printed)  # a subsequence
    assert [p.name for p in work.iterdir()] == ["data"]  # nothing left in the working folder
    assert [p.stat().st_size > 0 for p in temporary.rglob("*.png")] == [True]
