"""A binary or non-UTF-8 file given as text input (``seq2seq-translate --input``,
``seq2seq-evaluate --src-file/--ref-file``) is one line naming the file and what it looks
like, before the model loads; text with a few stray bytes is still translated, and
documents (a .docx is a zip) still go their own way."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_main

from seq2seq.cli.evaluate import main as evaluate_main
from seq2seq.cli.translate import main as translate_main

SHIPPED = Path(__file__).resolve().parents[2] / "data" / "models" / "multi30k_de_en_tiny.ckpt"
LINES = ["Ein Hund läuft über die Wiese.", "Zwei Männer spielen Fußball."] * 20

# name -> (file contents, words the refusal holds)
NOT_TEXT = {
    "checkpoint": (lambda: SHIPPED.read_bytes()[: 1 << 16], "zip archive"),
    "utf-16": (lambda: "\n".join(LINES).encode("utf-16"), "UTF-16"),
    "latin-1": (lambda: "\n".join(LINES).encode("latin-1"), "not UTF-8"),
    "nul bytes": (lambda: b"Ein Hund\x00\x00\x00 rennt.\n" * 10, "NUL"),
}


@pytest.mark.parametrize("case", NOT_TEXT)
def test_translate_input_that_is_not_text_is_refused(case, tmp_path):
    data, words = NOT_TEXT[case]
    path = tmp_path / "input.de"
    path.write_bytes(data())
    code, out, err = run_main(translate_main, ["-m", str(SHIPPED), "--input", str(path)])
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith("seq2seq-translate: error: --input ") and str(path) in lines[0]
    assert words in lines[0]


def test_a_few_stray_bytes_are_still_translated(tmp_path):
    """A few (4) invalid sequences: U+FFFD and the existing warning, every line out."""
    text = "\n".join(LINES).encode()
    bad = text.replace("ä".encode(), b"\xe4", 4)
    path = tmp_path / "input.de"
    path.write_bytes(bad)
    code, out, err = run_main(translate_main, ["-m", str(SHIPPED), "--input", str(path)])
    assert code == 0, err
    assert len(out.splitlines()) == len(LINES) and "not valid UTF-8" in err


def not_text_bytes(data: bytes, tmp_path: Path) -> str | None:
    from seq2seq.files import not_text

    path = tmp_path / "sniffed"
    path.write_bytes(data)
    return not_text(path)


def test_sniff_rule(tmp_path):
    """Text in any script is text, also when the sample ends inside a character; more than
    STRAY_BYTES invalid sequences is not."""
    from seq2seq.files import STRAY_BYTES

    assert STRAY_BYTES >= 4  # what test_a_few_stray_bytes_are_still_translated relies on
    assert not_text_bytes("Ω 漢字 😀\n".encode() * 10000, tmp_path) is None  # cut mid-character
    assert not_text_bytes(b"", tmp_path) is None
    assert not_text_bytes(b"a\xffb\n" * STRAY_BYTES, tmp_path) is None
    assert "not UTF-8" in not_text_bytes(b"a\xffb\n" * (STRAY_BYTES + 1), tmp_path)


def test_docx_input_is_still_a_document(tmp_path):
    docx = pytest.importorskip("docx")
    path = tmp_path / "brief.docx"
    document = docx.Document()
    document.add_paragraph("Ein Hund läuft.")
    document.save(path)
    code, _, err = run_main(translate_main, ["-m", str(SHIPPED), "--input", str(path)])
    assert code == 0, err
    assert (tmp_path / "brief.en.docx").is_file()


@pytest.mark.parametrize("case", ["utf-16", "nul bytes"])
def test_evaluate_files_that_are_not_text_are_refused(case, tmp_path):
    data, words = NOT_TEXT[case]
    src, ref = tmp_path / "src.de", tmp_path / "ref.en"
    src.write_bytes(data())
    ref.write_text("\n".join(["A dog."] * len(data().splitlines())) + "\n")
    code, _, err = run_main(evaluate_main, ["-m", str(SHIPPED), "--src-file", str(src),
                                            "--ref-file", str(ref), "--quiet"])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "--src-file" in lines[0] and str(src) in lines[0] and words in lines[0]
