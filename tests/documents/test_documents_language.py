"""A translated document says its new language (seq2seq.documents): HTML's ``lang`` and
``xml:lang`` attributes in the source language become the target's, everything else byte
for byte; a Word document's language metadata becomes the target's. Without a target
language (``target_lang=None``) nothing is relabelled."""

from __future__ import annotations

import io
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

docx = pytest.importorskip("docx", reason="needs the documents extra")

from stand_ins import identity, split  # noqa: E402

from seq2seq.documents import translate_document  # noqa: E402

PAGE = ('<html lang="de"><body><p LANG=de-DE>Ein Hund.</p><p lang=\'fr\'>Bonjour.</p>'
        '<pre lang=de>x</pre><p translate="no" xml:lang="de">Nein.</p><p lang="">y</p></body></html>')

DE_EN = Path(__file__).resolve().parents[2] / "data" / "models" / "multi30k_de_en_tiny.ckpt"


def html(page: str, source: str | None, target: str | None) -> str:
    return translate_document(page.encode(), "a.html", identity, source, split, target).decode()


def test_html_labels_in_the_source_language_become_the_target():
    assert html(PAGE, "de", "en") == PAGE.replace('lang="de"', 'lang="en"', 1).replace(
        "LANG=de-DE", "LANG=en")  # French, never-translated elements and lang="" kept
    assert html(PAGE, "de", None) == PAGE


class Attributes(HTMLParser):
    def __init__(self, page: str):
        super().__init__()
        self.found: list[tuple[str, str | None]] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.found += attrs


NAMES = st.sampled_from(["lang", "LANG", "xml:lang", "title", "data-lang", "class"])
VALUES = st.sampled_from(["de", "DE-at", "de_CH", "fr", "", "en", " lang=de"])
QUOTES = st.sampled_from(['"', "'", ""])


@given(st.lists(st.tuples(NAMES, st.sampled_from(["=", " = "]), QUOTES, VALUES), max_size=4),
       st.sampled_from([None, "de"]))
def test_only_language_values_change_whatever_the_attribute_syntax(attrs, source):
    tag = "".join(f" {n}{eq}{q}{v}{q}" for n, eq, q, v in attrs
                  if q or (v and " " not in v))  # unquoted values have no spaces
    page = f"<p{tag}>Ein Hund.</p>"
    got, want = Attributes(html(page, source, "en")).found, Attributes(page).found
    assert len(got) == len(want)
    for (name, value), (_, before) in zip(got, want):
        primary = (before or "").strip().lower().replace("_", "-").split("-")[0]
        relabel = name in ("lang", "xml:lang") and primary and primary == (source or primary)
        assert value == ("en" if relabel else before)


def test_a_docx_says_the_target_language_in_its_metadata():
    d, src = docx.Document(), io.BytesIO()
    d.add_paragraph("Ein Hund läuft.")
    d.core_properties.language = "de-DE"
    d.save(src)
    for target, want in (("en", "en"), (None, "de-DE")):
        out = translate_document(src.getvalue(), "a.docx", identity, "de", split, target)
        assert docx.Document(io.BytesIO(out)).core_properties.language == want


def test_cli_labels_the_page_it_writes(tmp_path, one_thread):
    from helpers import run_main

    from seq2seq.cli.translate import main
    page = tmp_path / "seite.html"
    page.write_text('<html lang="de"><p>Ein Hund läuft.</p></html>', encoding="utf-8")
    code, _, _ = run_main(main, ["-m", str(DE_EN), "--input", str(page)])
    assert code in (0, None)
    assert (tmp_path / "seite.en.html").read_text().startswith('<html lang="en"><p>')
