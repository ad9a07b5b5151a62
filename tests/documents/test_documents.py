"""Documents in, documents out (seq2seq.documents): structure kept (lines, subtitle
numbering and timing, a Word document's paragraphs, runs, tables and styles), each sentence
translated once, in one call; unreadable files refused in one line. The fake translators
make structure exact; one end-to-end run per format uses the shipped De->En model."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

docx = pytest.importorskip("docx", reason="needs the documents extra")
srt = pytest.importorskip("srt", reason="needs the documents extra")

from stand_ins import Fake, split  # noqa: E402

from seq2seq.documents import DocumentError, translate_document  # noqa: E402
from seq2seq.documents.align import Aligned  # noqa: E402
from seq2seq.documents.formats import wrap  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DE_EN = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"


class Upper(Fake):
    """Each sentence in ASCII capitals (same length), aligned character for character."""

    def one(self, s):
        return Aligned(s.translate(ASCII_UPPER), [(i, i + 1, i, i + 1) for i in range(len(s)) if not s[i].isspace()])


ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def up(text: str) -> str:
    return text.translate(ASCII_UPPER)


def run(data: bytes, name: str, fake=None) -> tuple[bytes, Fake]:
    fake = fake or Upper()
    return translate_document(data, name, fake, split=split), fake


# ---------------------------------------------------------------- text
def test_text_keeps_every_line_blank_lines_and_spaces_between_sentences():
    src = "Ein Hund läuft.  Eine Katze schläft.\n\n  Zwei Männer.\r\nEnde"
    out, fake = run(src.encode(), "a.txt")
    assert out.decode() == up(src)
    assert len(fake.calls) == 1  # one call for the whole file
    assert fake.calls[0] == ["Ein Hund läuft.", "Eine Katze schläft.", "Zwei Männer.", "Ende"]


def test_what_is_not_language_stays_and_unspaced_sentences_get_a_space():
    src = "1. Ein Hund läuft. 👍\n♪\n2024\n- Eine Katze schläft.\n我爱你。你好！"
    english = {"我爱你。": "I love you.", "你好！": "Hello!"}

    class Fake(Upper):
        def one(self, s):
            return Aligned(english[s]) if s in english else super().one(s)
    out = translate_document(src.encode(), "a.txt", Fake(), "de")
    assert out.decode() == "1. EIN HUND LäUFT. 👍\n♪\n2024\n- EINE KATZE SCHLäFT.\nI love you. Hello!"


def test_text_that_is_not_utf8_is_refused_in_one_line():
    with pytest.raises(DocumentError, match=r"^a\.txt: not UTF-8 text \(byte 3: 0xe4\)$"):
        run("Ein\xe4".encode("latin-1"), "a.txt")


# ---------------------------------------------------------------- subtitles
SUBS = """1
00:00:01,000 --> 00:00:02,500
Ein Hund läuft
durch den Schnee.

2
00:00:03,000 --> 00:00:04,000
Eine Katze.

7
00:01:00,000 --> 00:01:02,000
Zwei Männer spielen. Ein Kind
schläft.
"""


def test_subtitles_keep_numbering_timing_and_line_count():
    out, fake = run(SUBS.encode(), "film.srt")
    got, want = list(srt.parse(out.decode())), list(srt.parse(SUBS))
    assert [(s.index, s.start, s.end) for s in got] == [(s.index, s.start, s.end) for s in want]
    assert [s.content.count("\n") for s in got] == [s.content.count("\n") for s in want]
    assert [s.content.split() for s in got] == [up(s.content).split() for s in want]
    # a sentence over a line break is one sentence
    assert fake.calls == [["Ein Hund läuft durch den Schnee.", "Eine Katze.", "Zwei Männer spielen.",
                           "Ein Kind schläft."]]


def test_tags_around_a_whole_subtitle_stay_around_it():
    out, fake = run(b"1\n00:00:01,000 --> 00:00:02,000\n<i>Ein Hund\nl\xc3\xa4uft.</i>\n", "a.srt")
    assert fake.calls == [["Ein Hund läuft."]]
    assert list(srt.parse(out.decode()))[0].content == "<i>EIN HUND\nLäUFT.</i>"


def test_a_file_that_does_not_parse_as_subtitles_is_refused():
    with pytest.raises(DocumentError, match=r"^x\.srt: not a SubRip \(\.srt\) file"):
        run(b"1\nnot a time line\nHund\n", "x.srt")


def test_wrap_keeps_the_words_and_the_line_count():
    text = "a man is riding a bike down the road"
    for lines in (1, 2, 3):
        out = wrap(text, lines)
        assert out.split() == text.split() and out.count("\n") == lines - 1


# ---------------------------------------------------------------- Word
def _docx() -> bytes:
    d = docx.Document()
    p = d.add_paragraph("Ein ")
    p.add_run("großer").bold = True
    p.add_run(" Hund läuft. Eine ")
    p.add_run("Katze").italic = True
    p.add_run(" schläft.")
    d.add_paragraph("Zweiter Absatz.", style="Heading 1")
    table = d.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "Zelle eins."
    table.cell(0, 1).merge(table.cell(1, 1)).text = "Verbunden."
    table.cell(1, 0).text = ""
    d.sections[0].header.paragraphs[0].text = "Kopfzeile."
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def _structure(data: bytes):
    d = docx.Document(io.BytesIO(data))
    runs = [[(r.bold, r.italic, r.text) for r in p.runs] for p in d.paragraphs]
    return runs, [p.style.name for p in d.paragraphs], [
        [c.text for c in row.cells] for row in d.tables[0].rows], d.sections[0].header.paragraphs[0].text


def test_docx_keeps_paragraphs_runs_styles_tables_and_headers():
    src = _docx()
    out, fake = run(src, "brief.docx")
    runs, styles, cells, header = _structure(out)
    want_runs, want_styles, want_cells, want_header = _structure(src)
    assert styles == want_styles
    assert runs == [[(b, i, up(t)) for b, i, t in p] for p in want_runs]  # formatting kept
    assert cells == [[up(c) for c in row] for row in want_cells]
    assert header == up(want_header)
    assert sorted(fake.calls[0]) == sorted(["Ein großer Hund läuft.", "Eine Katze schläft.",
                                            "Zweiter Absatz.", "Zelle eins.", "Verbunden.", "Kopfzeile."])
    assert len(fake.calls) == 1  # the merged cell is translated once


@pytest.mark.parametrize("data", [b"PK\x03\x04 not really", b"just text", b""])
def test_a_docx_that_is_not_a_word_zip_is_refused_in_one_line(data):
    with pytest.raises(DocumentError, match=r"^x\.docx: not a (\.docx file|Word \(\.docx\) document)"):
        run(data, "x.docx")


def test_an_unknown_extension_is_refused():
    with pytest.raises(DocumentError, match=r"unsupported document type '\.pdf'"):
        run(b"%PDF", "x.pdf")


# ---------------------------------------------------------------- the shipped model
@pytest.fixture(scope="module")
def real(one_thread):
    from seq2seq import Translator
    from seq2seq.documents import sentence_translator
    return sentence_translator(Translator.from_checkpoint(DE_EN))


def test_every_format_end_to_end_with_the_shipped_model(real):
    from seq2seq import Translator
    plain = Translator.from_checkpoint(DE_EN)
    txt = translate_document("Ein Hund läuft.\n\nEine Katze schläft.\n".encode(), "a.txt", real, split=split)
    assert txt.decode().split("\n") == [*plain.translate(["Ein Hund läuft."]), "",
                                        *plain.translate(["Eine Katze schläft."]), ""]
    subs = list(srt.parse(translate_document(SUBS.encode(), "a.srt", real, split=split).decode()))
    assert [s.end for s in subs] == [s.end for s in srt.parse(SUBS)]
    assert " ".join(subs[1].content.split()) == plain.translate(["Eine Katze."])[0]
    out = docx.Document(io.BytesIO(translate_document(_docx(), "a.docx", real, split=split)))
    first = plain.translate(["Ein großer Hund läuft.", "Eine Katze schläft."])
    assert out.paragraphs[0].text == " ".join(first)  # runs rebuilt, text whole
    html = translate_document("<p>Ein <b>großer</b> Hund läuft. Eine <i>Katze</i> schläft.</p>"
                              .encode(), "a.html", real, split=split).decode()
    assert re.sub(r"<[^>]+>", "", html) == " ".join(first)
    assert re.findall(r"<[^>]+>", html) == ["<p>", "<b>", "</b>", "<i>", "</i>", "</p>"]
    # the Word runs land on the words the HTML tags do (one projection rule for both)
    runs = out.paragraphs[0].runs
    assert "".join(r.text for r in runs if r.bold) == re.search("<b>(.*)</b>", html)[1]
    assert "".join(r.text for r in runs if r.italic) == re.search("<i>(.*)</i>", html)[1]


# ---------------------------------------------------------------- seq2seq-translate --input
def test_cli_writes_a_document_beside_its_input_and_never_overwrites(tmp_path, one_thread):
    from helpers import run_main

    from seq2seq.cli.translate import main
    page = tmp_path / "seite.html"
    page.write_text("<p>Ein <b>Hund</b> läuft.</p>", encoding="utf-8")
    code, out, err = run_main(main, ["-m", str(DE_EN), "--input", str(page)])
    written = tmp_path / "seite.en.html"
    assert code in (0, None) and out == "" and f"wrote {written}" in err
    first = written.read_bytes()
    assert first.startswith(b"<p>") and b"<b>" in first
    written.write_bytes(b"mine")  # the user's own file now: refused without --force
    code, _, err = run_main(main, ["-m", str(DE_EN), "--input", str(page)])
    assert code == 2 and err.strip() == (f"seq2seq-translate: error: --output {written}: exists; "
                                         "add --force to replace it")
    assert written.read_bytes() == b"mine"
    code, _, _ = run_main(main, ["-m", str(DE_EN), "--input", str(page), "--force"])
    assert code in (0, None) and written.read_bytes() == first
    code, _, err = run_main(main, ["-m", str(DE_EN), "--input", str(page), "-o", str(page), "--force"])
    assert code == 2 and "is the input" in err and page.read_bytes().startswith(b"<p>Ein")


def test_cli_refuses_a_broken_document_in_one_line(tmp_path):
    from helpers import run_main

    from seq2seq.cli.translate import main
    bad = tmp_path / "brief.docx"
    bad.write_text("not a zip")
    code, _, err = run_main(main, ["-m", str(DE_EN), "--input", str(bad)])
    assert code == 2 and err.strip() == ("seq2seq-translate: error: brief.docx: not a .docx file "
                                         "(not a zip archive)")
    assert not (tmp_path / "brief.en.docx").exists()
    code, _, err = run_main(main, ["-m", str(DE_EN), "--input", str(bad), "--output-format", "jsonl"])
    assert code == 2 and err.startswith("seq2seq-translate: error: --output-format jsonl: not for a document")
    code, _, err = run_main(main, ["-m", str(DE_EN), "-o", str(tmp_path / "x.txt"), "Hund"])
    assert code == 2 and err.startswith("seq2seq-translate: error: --output ")


def test_cli_text_input_stays_line_by_line(tmp_path, one_thread):
    from helpers import run_main

    from seq2seq.cli.translate import main
    src = tmp_path / "a.txt"
    src.write_text("Ein Hund.\n\nEine Katze.\n", encoding="utf-8")
    code, out, _ = run_main(main, ["-m", str(DE_EN), "--input", str(src)])
    assert code in (0, None) and len(out.splitlines()) == 3 and out.splitlines()[1] == ""
    code, _, _ = run_main(main, ["-m", str(DE_EN), "--input", str(src), "-o", str(tmp_path / "b.txt")])
    assert code in (0, None)
    assert (tmp_path / "b.txt").read_text().split("\n") == out.split("\n")
