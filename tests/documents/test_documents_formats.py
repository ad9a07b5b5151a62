"""OpenDocument (.odt, .odp), PowerPoint (.pptx) and EPUB (.epub) documents
(seq2seq.documents): the identity translator gives every XML part back equal as a parsed
tree, ``upper`` keeps every run's formatting (spans, links, bold) on the same words, the
language metadata says the target, the whole document is one ``translate`` call, and a
package that is not what its name says (a zip bomb, a DTD, broken XML, another format
renamed) is refused in one line naming the file, by the library, the CLI and the server."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import pytest

etree = pytest.importorskip("lxml.etree", reason="needs the documents extra")
pptx = pytest.importorskip("pptx", reason="needs python-pptx (the dev extra)")

from helpers import ODF_NS, package, slides_package  # noqa: E402
from stand_ins import TRANSLATORS, identity, split, upper  # noqa: E402

from seq2seq.documents import DocumentError, translate_document  # noqa: E402
from seq2seq.documents.align import Aligned  # noqa: E402
from seq2seq.documents.package import MAX_UNPACKED  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DE_EN = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
NEW = (".odt", ".odp", ".pptx", ".epub")


# ---------------------------------------------------------------- documents, built here
ODT_BODY = (
    '<office:text><text:h text:outline-level="1">Ein Hund</text:h>'
    '<text:p text:style-name="P1">Ein <text:span text:style-name="T1">großer</text:span> Hund '
    'läuft<text:s text:c="2"/>im <text:a xlink:href="https://example.org/">Park</text:a> herum.'
    '<text:tab/>Eine Katze schläft.<text:line-break/>Der Mann liest'
    '<office:annotation><text:p>Ein Kommentar.</text:p></office:annotation> ein Buch.</text:p>'
    '<text:list><text:list-item><text:p>Zwei <text:span text:style-name="T1">rote '
    '<text:span text:style-name="T2">Äpfel</text:span></text:span> liegen da.</text:p>'
    '</text:list-item></text:list>'
    '<text:p>Das Kind<text:note text:note-class="footnote"><text:note-citation>1</text:note-citation>'
    '<text:note-body><text:p>Eine Fußnote.</text:p></text:note-body></text:note> spielt.</text:p>'
    '</office:text>')
ODP_BODY = (
    '<office:presentation><draw:page draw:name="Folie 1"><draw:frame><draw:text-box>'
    '<text:p>Ein <text:span text:style-name="T1">kleiner</text:span> Hund.</text:p>'
    '</draw:text-box></draw:frame></draw:page></office:presentation>')


def odf(kind: str = ".odt", body: str | None = None, language: str = "de") -> bytes:
    body = body or (ODT_BODY if kind == ".odt" else ODP_BODY)
    styles = (f'<office:automatic-styles><style:style style:name="T1"><style:text-properties '
              f'fo:font-weight="bold" fo:language="{language}" fo:country="DE"/></style:style>'
              '<style:style style:name="T2"><style:text-properties fo:language="fr" '
              'fo:country="FR"/></style:style></office:automatic-styles>')
    return package({
        "content.xml": f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {ODF_NS}>'
                       f"{styles}<office:body>{body}</office:body></office:document-content>",
        "styles.xml": f'<office:document-styles {ODF_NS}><office:master-styles><style:master-page '
                      'style:name="Standard"><style:header><text:p>Eine Kopfzeile.</text:p>'
                      '</style:header></style:master-page></office:master-styles></office:document-styles>',
        "meta.xml": f'<office:document-meta {ODF_NS}><office:meta><dc:language>{language}</dc:language>'
                    '</office:meta></office:document-meta>',
        "META-INF/manifest.xml": '<manifest:manifest xmlns:manifest="urn:oasis:names:tc:'
                                 'opendocument:xmlns:manifest:1.0"/>',
    }, "application/vnd.oasis.opendocument." + ("text" if kind == ".odt" else "presentation"))


XHTML = ('<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n'
         '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="de" lang="de"><head>'
         '<title>Kapitel eins</title></head><body><h1>Kapitel eins</h1>'
         '<p>Ein <b>großer</b> Hund läuft im <a href="#x">Park</a> herum.<br/>Eine Katze schläft.</p>'
         '<p lang="fr">Un <i>chat</i> noir.</p></body></html>')
CONTAINER = ('<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
             '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/'
             'oebps-package+xml"/></rootfiles></container>')


def epub(chapter: str = XHTML) -> bytes:
    opf = ('<package xmlns="http://www.idpf.org/2007/opf" version="3.0" xml:lang="de">'
           '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Ein Buch über '
           'Hunde</dc:title><dc:language>de</dc:language></metadata><manifest>'
           '<item id="c1" href="Text/kapitel%201.xhtml" media-type="application/xhtml+xml"/>'
           '<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/></manifest>'
           '<spine toc="ncx"><itemref idref="c1"/></spine></package>')
    ncx = ('<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1"><docTitle><text>'
           'Ein Buch über Hunde</text></docTitle><navMap><navPoint id="n1"><navLabel><text>'
           'Kapitel eins</text></navLabel><content src="Text/kapitel%201.xhtml"/></navPoint>'
           '</navMap></ncx>')
    return package({"META-INF/container.xml": CONTAINER, "OEBPS/content.opf": opf,
                    "OEBPS/toc.ncx": ncx, "OEBPS/Text/kapitel 1.xhtml": chapter,
                    "OEBPS/cover.png": b"\x89PNG not really"}, "application/epub+zip")


def presentation(language: str = "de-DE") -> bytes:
    from pptx.util import Inches

    prs = pptx.Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Ein Hund"
    para = slide.placeholders[1].text_frame.paragraphs[0]
    for text, bold, link in [("Ein ", None, None), ("großer", True, None), (" Hund läuft im ", None, None),
                             ("Park", None, "https://example.org/"), (" herum. Eine Katze schläft.", None, None)]:
        run = para.add_run()
        run.text, run.font.bold = text, bold
        if link:
            run.hyperlink.address = link
    para.add_line_break()
    para.add_run().text = "Der Mann liest."
    table = slide.shapes.add_table(1, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
    table.cell(0, 0).text, table.cell(0, 1).text = "Zwei Äpfel.", "Ein Baum."
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(5), Inches(5), Inches(2), Inches(1)).text_frame.text = "Im Garten."
    slide.notes_slide.notes_text_frame.text = "Eine Notiz für den Sprecher."
    out = io.BytesIO()
    prs.save(out)
    data = out.getvalue()
    # python-pptx writes no lang: label each run as an editor would
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        slides = {n: z.read(n) for n in z.namelist() if re.match(r"ppt/(slides|notesSlides)/\w+\.xml$", n)}
    labelled = {n: re.sub(rb"<a:rPr(?=[ />])", b'<a:rPr lang="%s"' % language.encode(), x)
                .replace(b'<a:rPr lang="de-DE" lang=', b"<a:rPr lang=") for n, x in slides.items()}
    return _replace(data, labelled)


def _replace(data: bytes, parts: dict[str, bytes | None]) -> bytes:
    """The zip with ``parts`` replaced (None: left out), in its order."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as z, zipfile.ZipFile(out, "w") as w:
        for info in z.infolist():
            if parts.get(info.filename, b"") is not None:
                w.writestr(info, parts.get(info.filename) or z.read(info))
    return out.getvalue()


MAKE = {".odt": odf, ".odp": lambda: odf(".odp"), ".pptx": presentation, ".epub": epub}


# ---------------------------------------------------------------- reading them back
XML = (".xml", ".rels", ".opf", ".ncx", ".xhtml")


def parts(data: bytes) -> dict[str, bytes]:
    """Every part; an XML part parsed (it must be well-formed) and canonicalized: equal
    when equal as parsed trees."""
    out = {}
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for name in z.namelist():
            body = z.read(name)
            out[name] = etree.tostring(etree.fromstring(body), method="c14n") \
                if name.endswith(XML) else body
    return out


def translated(kind: str, translate=identity, **labels) -> bytes:
    return translate_document(MAKE[kind](), "doc" + kind, translate, split=split, **labels)


@pytest.mark.parametrize("kind", NEW)
def test_identity_gives_every_part_back_equal(kind):
    source = MAKE[kind]()
    got = translated(kind)
    assert parts(got) == parts(source)
    with zipfile.ZipFile(io.BytesIO(got)) as z:
        infos = z.infolist()
    if kind != ".pptx":  # ODF and EPUB readers find the mimetype first, stored
        assert infos[0].filename == "mimetype" and infos[0].compress_type == zipfile.ZIP_STORED


def _upper_text(root, skip: str | None = None):
    """``root`` with every text node uppercased (not inside elements named ``skip``)."""
    for el in root.iter():
        inside = skip and any(a.tag == skip for a in el.iterancestors())
        if not inside and el.tag != skip and el.text:
            el.text = el.text.upper()
        if not inside and el.tail and el is not root:
            el.tail = el.tail.upper()
    return etree.tostring(root, method="c14n")


ANNOTATION = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}annotation"


@pytest.mark.parametrize("kind", [".odt", ".odp"])
def test_odf_upper_keeps_every_span_link_and_space_on_its_words(kind):
    source, got = parts(MAKE[kind]()), parts(translated(kind, upper))
    body = etree.fromstring(source["content.xml"])
    for el in body.iter("{*}automatic-styles"):  # not text: style names stay as they are
        el.getparent().remove(el)
    got_body = etree.fromstring(got["content.xml"])
    for el in got_body.iter("{*}automatic-styles"):
        el.getparent().remove(el)
    assert etree.tostring(got_body, method="c14n") == _upper_text(body, ANNOTATION)
    assert got["styles.xml"] == _upper_text(etree.fromstring(source["styles.xml"]))
    assert kind == ".odp" or b"Ein Kommentar." in got["content.xml"]  # comments: never translated


def _runs(data: bytes) -> list:
    """Each paragraph of every slide and its notes: (text, [(bold, link, run text)])."""
    prs = pptx.Presentation(io.BytesIO(data))
    frames = []
    for slide in prs.slides:
        shapes = list(slide.shapes)
        while shapes:
            shape = shapes.pop(0)
            shapes += list(shape.shapes) if shape.shape_type == 6 else []  # a group
            if shape.has_text_frame:
                frames.append(shape.text_frame)
            if getattr(shape, "has_table", False):
                frames += [c.text_frame for row in shape.table.rows for c in row.cells]
        frames.append(slide.notes_slide.notes_text_frame)
    return [(p.text, [(r.font.bold, r.hyperlink.address, r.text) for r in p.runs])
            for f in frames for p in f.paragraphs]


def test_pptx_upper_keeps_every_run_its_bold_and_its_link():
    source, got = _runs(presentation()), _runs(translated(".pptx", upper))
    assert got == [(text.upper(), [(b, link, t.upper()) for b, link, t in runs])
                   for text, runs in source]
    assert len(source) >= 6  # title, body (a line break), table cells, the group's box, notes


def test_epub_upper_keeps_the_markup_and_stays_well_formed():
    got = parts(translated(".epub", upper))
    page = got["OEBPS/Text/kapitel 1.xhtml"].decode()
    source = parts(epub())["OEBPS/Text/kapitel 1.xhtml"].decode()
    assert re.findall(r"<[^>]+>", page) == re.findall(r"<[^>]+>", source)
    assert re.sub(r"<[^>]+>", "", page) == re.sub(r"<[^>]+>", "", source).upper()
    assert b"EIN BUCH \xc3\x9cBER HUNDE" in got["OEBPS/content.opf"]
    assert b"KAPITEL EINS" in got["OEBPS/toc.ncx"]


@pytest.mark.parametrize("kind", NEW)
@pytest.mark.parametrize("name", ["reverse_words", "upper"])
def test_a_document_is_one_translate_call_and_every_word_comes_back(kind, name):
    calls = []

    def counted(sentences):
        calls.append(sentences)
        return TRANSLATORS[name](sentences)

    got = translated(kind, counted)
    assert len(calls) == 1 and calls[0]
    words = sorted(w for s in calls[0] for w in TRANSLATORS[name]([s])[0].text.split())
    text = " ".join(re.sub(rb"<[^>]+>", b" ", body).decode("utf-8", "replace")
                    for body in parts(got).values())
    assert all(w.strip(".") in text for w in words)


# ---------------------------------------------------------------- the target language
def test_odf_language_metadata_says_the_target():
    got = parts(translate_document(odf(), "a.odt", identity, "de", split, target_lang="en"))
    assert b"<dc:language>en</dc:language>" in got["meta.xml"]
    styles = etree.fromstring(got["content.xml"]).iter("{*}text-properties")
    fo = "{urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0}"
    assert [(s.get(fo + "language"), s.get(fo + "country")) for s in styles] == [("en", None), ("fr", "FR")]


def test_pptx_language_labels_say_the_target_where_they_said_the_source():
    data = translate_document(presentation(), "a.pptx", identity, "de", split, target_lang="en-GB")
    labels = re.findall(rb'lang="([^"]+)"', b"".join(
        v for k, v in parts(data).items() if k.startswith(("ppt/slides/", "ppt/notesSlides/"))))
    assert labels and set(labels) == {b"en-GB"}
    french = translate_document(presentation("fr-FR"), "a.pptx", identity, "de", split, target_lang="en")
    assert b'lang="en"' not in b"".join(parts(french).values())


def test_epub_language_metadata_and_labels_say_the_target():
    got = parts(translate_document(epub(), "a.epub", identity, "de", split, target_lang="en"))
    assert b"<dc:language>en</dc:language>" in got["OEBPS/content.opf"]
    assert b'xml:lang="en"' in got["OEBPS/content.opf"]
    page = etree.fromstring(got["OEBPS/Text/kapitel 1.xhtml"])
    labels = [(el.get("lang"), el.get("{http://www.w3.org/XML/1998/namespace}lang"))
              for el in page.iter() if el.get("lang")]
    assert labels == [("en", "en"), ("fr", None)]


def test_a_translation_with_an_html_entity_keeps_the_xhtml_well_formed():
    def entity(sentences):
        return [Aligned(s.replace("Hund", "caf&eacute; &nbsp;&amp;"), []) for s in sentences]

    page = parts(translated(".epub", entity))["OEBPS/Text/kapitel 1.xhtml"]
    assert "café".encode() in page and b"&amp;" in page


# ---------------------------------------------------------------- hostile shapes: linear time
def _odt_paragraph(n: int, piece: str) -> bytes:
    return odf(body=f"<office:text><text:p>{piece * n}</text:p></office:text>")


HOSTILE = {  # name -> (extension, the document with n repetitions of its part)
    "odt spans": (".odt", lambda n: _odt_paragraph(n, "<text:span>Wort.</text:span> ")),
    "odt spans across sentences": (".odt", lambda n: _odt_paragraph(n, "<text:span>a. b</text:span> ")),
    "odt spaces": (".odt", lambda n: _odt_paragraph(n, "a<text:s/>")),
    "pptx runs": (".pptx", lambda n: slides_package("<a:r><a:t>Wort. </a:t></a:r>" * n)),
    "pptx one sentence": (".pptx", lambda n: slides_package("<a:r><a:t>Wort </a:t></a:r>" * n)),
    "epub paragraphs": (".epub", lambda n: epub(XHTML.replace("<h1>", "<p>Ein Satz.</p>" * n + "<h1>"))),
}


def _seconds(shape: str, n: int, best_of: int = 1) -> float:
    """The best time, the garbage collector paused (its full collections grow with the
    live heap, not with the work); the translator changes every text, so all is written."""
    import gc
    import time

    kind, make = HOSTILE[shape]
    data, best = make(n), float("inf")
    for _ in range(best_of):
        gc.collect()
        gc.disable()
        try:
            start = time.thread_time()
            translate_document(data, "a" + kind, lambda s: [Aligned(x.upper()) for x in s], split=split)
            best = min(best, time.thread_time() - start)
        finally:
            gc.enable()
    return best


@pytest.mark.parametrize("shape", list(HOSTILE))
def test_hostile_shapes_take_linear_time(shape):
    n = 100
    while _seconds(shape, n) < 0.03:
        n *= 2
    small, large = _seconds(shape, n, best_of=3), _seconds(shape, 10 * n)
    assert large / small < 25, f"{shape}: {n} took {small:.3f} s, {10 * n} took {large:.3f} s"
    assert _seconds(shape, _megabyte(shape)) < 10  # a quadratic's small constant shows here


def _megabyte(shape: str) -> int:
    """The repetitions that make the shape's parts unpack to about 1 MB."""
    def unpacked(n):
        with zipfile.ZipFile(io.BytesIO(HOSTILE[shape][1](n))) as z:
            return sum(i.file_size for i in z.infolist())
    return 2**20 // (unpacked(101) - unpacked(100))


def test_nesting_deeper_than_xml_readers_go_is_refused_in_one_line():
    deep = "<text:span>a " * 300 + "</text:span>" * 300
    with pytest.raises(DocumentError, match=r"^a\.odt: not an OpenDocument text .*Excessive depth"):
        translate_document(_odt_paragraph(1, deep), "a.odt", identity, split=split)


# ---------------------------------------------------------------- refused in one line
def _bomb(kind: str) -> bytes:
    with zipfile.ZipFile(io.BytesIO(MAKE[kind]())) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    mimetype = entries.pop("mimetype", None)
    entries["padding.bin"] = bytes(MAX_UNPACKED)  # deflates to about 64 kB
    return package(entries, mimetype)


MAIN_PART = {".odt": "content.xml", ".odp": "content.xml", ".pptx": "ppt/slides/slide1.xml",
             ".epub": "OEBPS/Text/kapitel 1.xhtml"}
LAUGHS = (b'<!DOCTYPE r [<!ENTITY a "lol"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
          b"<r>&b;</r>")


def _with(kind: str, body: bytes) -> bytes:
    return _replace(MAKE[kind](), {MAIN_PART[kind]: body})


BROKEN = {
    "zip bomb": (_bomb, r"unpacks to \d+ bytes; documents may unpack to at most"),
    "a DTD with entities": (lambda k: _with(k, LAUGHS), r"declares a DTD"),
    "not well-formed": (lambda k: _with(k, b"<p>Ein <b>Hund</p>"), r"is not well-formed XML"),
    "not a zip": (lambda k: b"Ein Hund.", r"not a \.\w+ file \(not a zip archive\)"),
    "a Word document renamed": (lambda k: _word(), r"not (a|an) "),
}


def _word() -> bytes:
    import docx

    d, out = docx.Document(), io.BytesIO()
    d.add_paragraph("Ein Hund.")
    d.save(out)
    return out.getvalue()


def refusal(kind: str, case: str) -> str:
    with pytest.raises(DocumentError) as got:
        translate_document(BROKEN[case][0](kind), "brief" + kind, identity, split=split)
    return str(got.value)


@pytest.mark.parametrize("kind", NEW)
@pytest.mark.parametrize("case", list(BROKEN))
def test_a_package_that_is_not_what_its_name_says_is_refused_in_one_line(kind, case):
    line = refusal(kind, case)
    assert line.startswith(f"brief{kind}: ") and "\n" not in line and " object at 0x" not in line
    assert re.search(BROKEN[case][1], line), line


@pytest.mark.parametrize(("name", "data"), [("a.odt", lambda: odf(".odp")), ("a.epub", odf),
                                            ("a.odp", epub), ("a.pptx", odf)])
def test_one_format_renamed_as_another_is_refused_naming_what_it_is(name, data):
    with pytest.raises(DocumentError, match=rf"^{re.escape(name)}: not an? .*\((its mimetype is|it is|no |its main)"):
        translate_document(data(), name, identity, split=split)


def test_a_doctype_without_entities_is_refused_in_office_formats_only():
    doctype = b'<!DOCTYPE office:document-content>'
    with pytest.raises(DocumentError, match=r"content\.xml declares a DTD"):
        translate_document(_with(".odt", doctype + b"<r/>"), "a.odt", identity, split=split)
    translated(".epub")  # XHTML's <!DOCTYPE html> is read


@pytest.mark.parametrize("kind", NEW)
def test_cli_refuses_a_broken_package_in_one_line(tmp_path, kind):
    from helpers import run_main

    from seq2seq.cli.translate import main
    bad = tmp_path / f"brief{kind}"
    bad.write_bytes(BROKEN["a DTD with entities"][0](kind))
    code, _, err = run_main(main, ["-m", str(DE_EN), "--input", str(bad)])
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"seq2seq-translate: error: brief{kind}: not ") and "declares a DTD" in err
    assert not (tmp_path / f"brief.en{kind}").exists()


# ---------------------------------------------------------------- the server, the shipped model
@pytest.fixture(scope="module")
def client(one_thread):
    pytest.importorskip("fastapi", reason="needs the serve extra")
    from fastapi.testclient import TestClient

    from seq2seq.serving.app import create_app
    from seq2seq.serving.models import load_models
    with TestClient(create_app(load_models([str(DE_EN)]))) as c:
        yield c


def upload(client, name: str, data: bytes):
    return client.post("/libretranslate/translate_file", data={"source": "de", "target": "en"},
                       files={"file": (name, data)})


def test_the_server_lists_and_refuses_the_new_formats(client):
    offered = client.get("/libretranslate/frontend/settings").json()["supportedFilesFormat"]
    assert set(NEW) <= set(offered)
    for kind in NEW:
        got = upload(client, "brief" + kind, BROKEN["not well-formed"][0](kind))
        assert got.status_code == 400, got.text
        error = got.json()["error"]
        assert error.startswith(f"Invalid request: brief{kind}: not ") and "\n" not in error


SOURCES = {".odt": ["Eine Katze schläft.", "Eine Kopfzeile.", "Eine Fußnote."], ".odp": ["Ein kleiner Hund."],
           ".pptx": ["Eine Notiz für den Sprecher.", "Zwei Äpfel."], ".epub": ["Eine Katze schläft."]}


@pytest.mark.parametrize("kind", NEW)
def test_every_new_format_end_to_end_with_the_shipped_model(client, kind):
    got = upload(client, "doc" + kind, MAKE[kind]())
    assert got.status_code == 200, got.text
    down = client.get(got.json()["translatedFileUrl"])
    assert down.status_code == 200
    def text(data):  # every part parses; the text without its tags
        return re.sub(r"<[^>]+>", "", b" ".join(parts(data).values()).decode("utf-8", "replace"))

    source, text = text(MAKE[kind]()), text(down.content)
    for sentence in SOURCES[kind]:
        assert sentence in source and sentence not in text, sentence
    if kind == ".pptx":
        pptx.Presentation(io.BytesIO(down.content))  # python-pptx reads it
