"""A document's flags summarised: ``flag_summary`` counts each flag once per sentence and
names the first few; ``seq2seq-translate --input DOC`` says them on stderr, one line per
flag kind; ``/translate_file`` adds them to its answer as ``"flags"``. The translator is a
stand-in that flags chosen sentences (tests/stand_ins.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from stand_ins import flagging

from seq2seq.documents.align import FIRST_FLAGGED, Aligned, Recording, flag_summary

ROOT = Path(__file__).resolve().parents[2]
DE_EN = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
RULES = {"numbers": "Zahl", "unsure": "Nebel"}
PAGE = ("<p>Ein Hund läuft. Die Zahl ist groß.</p><p>Im Nebel steht ein Haus. Eine Zahl im "
        "Nebel.</p><p>Ein Kind lacht.</p>")


@given(st.lists(st.lists(st.sampled_from(["unsure", "numbers", "cut"]), max_size=4), max_size=30))
def test_each_flag_counts_its_sentences_and_names_the_first_few_in_order(flags):
    sentences = [f"s{i}" for i in range(len(flags))]
    summary = flag_summary(sentences, [Aligned(s, flags=f) for s, f in zip(sentences, flags)])
    for flag in ("unsure", "numbers", "cut"):
        having = [i + 1 for i, f in enumerate(flags) if flag in f]
        if not having:
            assert flag not in summary
            continue
        assert summary[flag]["count"] == len(having)
        assert summary[flag]["first"] == [{"sentence": n, "source": f"s{n - 1}"}
                                          for n in having[:FIRST_FLAGGED]]


def test_a_recording_translator_summarises_what_passed_through_it():
    recording = Recording(flagging(RULES))
    recording(["Die Zahl.", "Ein Hund."])
    recording(["Nebel und Zahl."])
    assert recording.summary() == {
        "numbers": {"count": 2, "first": [{"sentence": 1, "source": "Die Zahl."},
                                          {"sentence": 3, "source": "Nebel und Zahl."}]},
        "unsure": {"count": 1, "first": [{"sentence": 3, "source": "Nebel und Zahl."}]}}


def test_the_cli_says_each_flag_kind_of_a_document_in_one_line(tmp_path, monkeypatch):
    from helpers import run_main

    import seq2seq.documents as documents
    from seq2seq.cli.translate import main

    monkeypatch.setattr(documents, "sentence_translator", lambda *_, **__: flagging(RULES))
    page = tmp_path / "seite.html"
    page.write_text(PAGE, encoding="utf-8")
    code, _, err = run_main(main, ["-m", str(DE_EN), "--input", str(page)])
    assert code == 0, err
    lines = [line for line in err.splitlines() if "flagged" in line]
    assert len(lines) == 2, err
    numbers, = [line for line in lines if "flagged numbers" in line]
    unsure, = [line for line in lines if "flagged unsure" in line]
    assert numbers.startswith("seq2seq-translate: warning: 2 of 5 sentences flagged numbers "
                              '(sentences 2 "Die Zahl ist groß.", 4 "Eine Zahl im Nebel.")')
    assert unsure.startswith('seq2seq-translate: warning: 2 of 5 sentences flagged unsure '
                             '(sentences 3 "Im Nebel steht ein Haus.", 4 "Eine Zahl im Nebel.")')
    assert (tmp_path / "seite.en.html").read_text(encoding="utf-8") == PAGE  # identity stand-in


def test_a_document_without_flags_gets_no_flag_line(tmp_path, monkeypatch):
    from helpers import run_main

    import seq2seq.documents as documents
    from seq2seq.cli.translate import main

    monkeypatch.setattr(documents, "sentence_translator", lambda *_, **__: flagging({}))
    page = tmp_path / "seite.html"
    page.write_text(PAGE, encoding="utf-8")
    code, _, err = run_main(main, ["-m", str(DE_EN), "--input", str(page)])
    assert code == 0 and "flagged" not in err, err


def test_translate_file_answers_the_flags_beside_the_url(monkeypatch):
    pytest.importorskip("fastapi", reason="needs the serve extra")
    from fastapi.testclient import TestClient

    from seq2seq.serving.app import create_app
    from seq2seq.serving.libre import files
    from seq2seq.serving.models import load_models

    async def stand_in(self, sentences, source, target):
        return flagging(RULES)(sentences)

    monkeypatch.setattr(files.FileRoutes, "_run", stand_in)
    with TestClient(create_app(load_models([str(DE_EN)]))) as client:
        got = client.post("/libretranslate/translate_file", data={"source": "de", "target": "en"},
                          files={"file": ("seite.html", PAGE.encode())})
        assert got.status_code == 200, got.text
        answer = got.json()
        assert answer["flags"]["numbers"]["count"] == 2
        assert answer["flags"]["unsure"]["first"] == [
            {"sentence": 3, "source": "Im Nebel steht ein Haus."},
            {"sentence": 4, "source": "Eine Zahl im Nebel."}]
        assert client.get(answer["translatedFileUrl"]).text.replace(' lang="en"', "") == PAGE


def test_a_models_flags_reach_the_aligned_translation():
    from seq2seq.documents.align import aligned
    from seq2seq.translation.result import TranslationResult

    result = TranslationResult("Er kam um 5.", "He came.", 0.0, 0.0, flags=["numbers", "unsure"])
    assert aligned(result).flags == ["numbers", "unsure"]
