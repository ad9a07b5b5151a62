"""OpenDocument (.odt, .odp) and PowerPoint (.pptx) paragraphs of every shape Hypothesis
draws (spans and links, nested, around any stretch of words, spaces at their edges inside
or outside, a full stop just after them; tabs, line breaks, several spaces; bookmarks and
fields), through stand-in translators whose right answer is known: ``identity`` gives every
part back equal as parsed XML, ``upper`` changes the text and nothing else, and
``reverse_words`` and ``shuffled`` move each word with its formatting (per paragraph, the
multiset of (word, formatting) pairs is kept, so a span or link never comes back empty).
The shipped De->En model puts a bold word and a link's words on their translations. The
punctuation and spaces at an element's edge stay on their side of it in HTML too."""

from __future__ import annotations

import io
import re
import zipfile
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

etree = pytest.importorskip("lxml.etree", reason="needs the documents extra")

from helpers import DE_EN, ODF_NS, package, slides_package  # noqa: E402
from stand_ins import identity, reverse_words, shuffled, split, upper  # noqa: E402

from seq2seq.documents import translate_document  # noqa: E402

WORDS = st.sampled_from(["Ein", "Hund", "läuft", "über", "die", "Straße", "großer", "Katze", "x"])
T = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
BOXES = (T + "p", T + "span", T + "a")  # what holds a paragraph's translated text
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"


@st.composite
def stretches(draw) -> list[tuple[str, str]]:
    """A paragraph's text as (text, separator after it) stretches: sentences' words (a
    full stop ends a sentence), cut at word boundaries or just before a full stop, the
    separators a space, sometimes two, a tab or a line break; where a separator falls at a
    cut, it is at the end of one stretch or the start of the next."""
    words = draw(st.lists(WORDS, min_size=1, max_size=10))
    stops = draw(st.lists(st.booleans(), min_size=len(words), max_size=len(words)))
    text, cuts = "", []
    for k, (w, stop) in enumerate(zip(words, stops)):
        if k:
            sep = draw(st.sampled_from([" "] * 6 + ["  ", "\t", "\n"]))
            cuts.append(len(text) + (len(sep) if draw(st.booleans()) else 0))
            text += sep
        text += w
        if stop or k == len(words) - 1:
            if draw(st.integers(0, 3)) == 0:
                cuts.append(len(text))  # an element may end just before the full stop
            text += "."
    chosen = sorted(set(draw(st.lists(st.sampled_from(cuts), max_size=5)))) if cuts else []
    return [text[a:b] for a, b in zip([0, *chosen], [*chosen, len(text)]) if a < b]


# ---------------------------------------------------------------- OpenDocument
ODF_WRAPPERS = [("text:span", ' text:style-name="T1"'), ("text:span", ' text:style-name="T2"'),
                ("text:a", ' xlink:href="https://example.org/"')]
ODF_POINTS = ['<text:bookmark text:name="m"/>', "<text:page-number>1</text:page-number>"]


class _Spaces:
    """Text as LibreOffice writes it: a space after a space (or at the paragraph's start)
    is ``text:s``, a tab and a line break their elements."""

    def __init__(self):
        self.space = True

    def __call__(self, text: str) -> str:
        out = []
        for piece in re.split(r"( +|\t|\n)", text):
            if piece.startswith(" "):
                literal = 0 if self.space else 1
                rest = len(piece) - literal
                out.append(" " * literal + ("" if not rest else "<text:s/>" if rest == 1
                                            else f'<text:s text:c="{rest}"/>'))
                self.space = True
            elif piece in ("\t", "\n"):
                out.append("<text:tab/>" if piece == "\t" else "<text:line-break/>")
                self.space = False
            elif piece:
                out.append(piece)
                self.space = False
        return "".join(out)


@st.composite
def odf_paragraph(draw) -> str:
    """A ``text:p``'s content: each stretch plain, or in a span or link (one inside another
    sometimes), a bookmark or a field before it now and then (between words: a point inside
    a word goes where the word does)."""
    spell, out = _Spaces(), []
    for text in draw(stretches()):
        if not text.startswith(".") and draw(st.integers(0, 5)) == 0:
            point = draw(st.sampled_from(ODF_POINTS))
            out.append(point)
            spell.space = spell.space and "bookmark" in point
        # a full stop cut from its word stays out of elements here: the stand-ins move it with
        # its word, into the middle of the element's words (the HTML test below has it in)
        wrap = text.strip() and not text.startswith(".")
        tags = draw(st.lists(st.sampled_from(ODF_WRAPPERS), max_size=2)) if wrap else []
        out += [f"<{t}{attrs}>" for t, attrs in tags] + [spell(text)]
        out += [f"</{t}>" for t, _ in reversed(tags)]
    return "".join(out)


def odf_document(kind: str, paragraphs: list[str]) -> bytes:
    body = "".join(f"<text:p>{p}</text:p>" for p in paragraphs)
    if kind == ".odp":
        body = (f'<office:presentation><draw:page draw:name="1"><draw:frame><draw:text-box>{body}'
                "</draw:text-box></draw:frame></draw:page></office:presentation>")
    else:
        body = f"<office:text>{body}</office:text>"
    content = f"<office:document-content {ODF_NS}><office:body>{body}</office:body></office:document-content>"
    mimetype = "application/vnd.oasis.opendocument." + ("text" if kind == ".odt" else "presentation")
    return _Shown(package({"content.xml": content}, mimetype), "content.xml")


class _Shown(bytes):
    """A package whose repr (in a failing example) is its main part's XML."""

    def __new__(cls, data: bytes, part: str):
        shown = super().__new__(cls, data)
        shown.part = part
        return shown

    def __repr__(self) -> str:
        return _part(self, self.part).decode()


def _part(data: bytes, name: str) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return z.read(name)


def _canonical(data: bytes, name: str, upper_text=None) -> bytes:
    """A part as parsed, canonical XML; ``upper_text(el)``: the elements whose text (and
    tails) are uppercased first, as ``upper`` should have them."""
    root = etree.fromstring(_part(data, name))
    for el in upper_text(root) if upper_text else ():
        el.text = el.text and el.text.upper()
        for child in el:
            child.tail = child.tail and child.tail.upper()
    return etree.tostring(root, method="c14n")


def _odf_text(root):
    return root.iter(*BOXES)


def _odf_words(data: bytes) -> list[Counter]:
    """Per paragraph, the (word, enclosing spans and links) of each word: text cut where
    spaces, tabs, breaks or a change of formatting are (bookmarks and fields hold none)."""
    def chars(el, boxes: tuple, out: list) -> list:
        out += [(c, boxes) for c in el.text or ""] if el.tag in BOXES else []
        for child in el:
            if child.tag in BOXES:
                chars(child, (*boxes, (child.tag, tuple(sorted(child.attrib.items())))), out)
            elif child.tag in (T + "s", T + "tab", T + "line-break"):
                out.append((" ", ()))
            out += [(c, boxes) for c in child.tail or ""]
        return out

    return [_pieces(chars(p, (), [])) for p in etree.fromstring(_part(data, "content.xml")).iter(T + "p")]


def _pieces(chars: list[tuple[str, object]]) -> Counter:
    """(word, formatting) of each word of ``chars`` (character, its formatting): letters
    and digits alike formatted (a full stop is no word: the stand-ins move it with the
    word it ends, a model's alignment moves it on its own)."""
    words, current = Counter(), ("", None)
    for c, boxes in [*chars, (" ", None)]:
        if not c.isalnum() or boxes != current[1]:
            if current[0]:
                words[current] += 1
            current = ("", None) if not c.isalnum() else (c, boxes)
        else:
            current = (current[0] + c, boxes)
    return words


def _bare(paragraphs: list[Counter]) -> list[Counter]:
    """The words alone, their formatting left out."""
    out = []
    for words in paragraphs:
        bare: Counter = Counter()
        for (word, _), n in words.items():
            bare[word] += n
        out.append(bare)
    return out


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([".odt", ".odp"]), st.lists(odf_paragraph(), min_size=1, max_size=3),
       st.randoms(use_true_random=False))
def test_odf_identity_upper_and_moved_words_keep_every_span_and_link(kind, paragraphs, rng):
    data = odf_document(kind, paragraphs)
    name = "a" + kind
    assert _canonical(translate_document(data, name, identity, split=split), "content.xml") \
        == _canonical(data, "content.xml")
    assert _canonical(translate_document(data, name, upper, split=split), "content.xml") \
        == _canonical(data, "content.xml", _odf_text)
    assert _odf_words(translate_document(data, name, reverse_words, split=split)) == _odf_words(data)
    # words in any order (an element whose words scatter covers the words between them, or
    # keeps its longest stretch where a sibling is in the way): every word and point is back
    got = translate_document(data, name, shuffled(rng), split=split)
    assert _bare(_odf_words(got)) == _bare(_odf_words(data))
    root = etree.fromstring(_part(got, "content.xml"))
    assert all("".join(el.itertext()).strip() for el in root.iter(T + "span", T + "a"))
    points = [[el.tag for el in etree.fromstring(_part(d, "content.xml")).iter()
               if el.tag in (T + "bookmark", T + "page-number")] for d in (data, got)]
    assert points[0] == points[1]


def test_a_span_whose_words_went_nowhere_is_taken_out_and_an_empty_one_stays():
    from seq2seq.documents.align import Aligned

    def without_park(sentences):  # "Park" aligned to nothing, as a model may leave a word
        return [Aligned(s.replace("Park", "Feld"), [(*m.span(), *m.span()) for m in re.finditer(r"\S+", s)
                                                    if m.group() != "Park"]) for s in sentences]

    data = odf_document(".odt", ['Im <text:a xlink:href="x">Park</text:a> ist es <text:span/>schön.'])
    got = _part(translate_document(data, "a.odt", without_park, split=split), "content.xml")
    assert b"<text:p>Im Feld ist es <text:span/>sch\xc3\xb6n.</text:p>" in got


# ---------------------------------------------------------------- PowerPoint
RUN_PROPS = ['<a:rPr lang="de-DE"/>', '<a:rPr lang="de-DE" b="1"/>', '<a:rPr lang="de-DE" i="1"/>',
             '<a:rPr lang="de-DE"><a:hlinkClick r:id="rId2"/></a:rPr>',
             '<a:rPr lang="de-DE" b="1"><a:hlinkClick r:id="rId3"/></a:rPr>']
FIELD = '<a:fld id="{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}" type="slidenum"><a:rPr lang="de-DE"/><a:t>1</a:t></a:fld>'


@st.composite
def slide_paragraph(draw) -> str:
    """An ``a:p``'s content: each stretch one run or two (cut after its first word), with
    some formatting; a line break or a field between stretches now and then (tabs and line
    breaks inside a stretch are spaces here: PowerPoint's runs hold no tab). A full stop cut
    from its word stays in the word's run (see ``odf_paragraph``)."""
    out: list = ['<a:pPr algn="ctr"/>'] if draw(st.booleans()) else []
    for text in draw(stretches()):
        text = re.sub(r"[\t\n]", " ", text)
        if text.startswith(".") and out and isinstance(out[-1], list):
            out[-1][1] += text
            continue
        extra = draw(st.sampled_from(["", "", "", "br", "field"]))
        if extra:
            out.append('<a:br><a:rPr lang="de-DE"/></a:br>' if extra == "br" else FIELD)
        cut = text.find(" ", len(text) - len(text.lstrip()))
        pieces = [text[:cut + 1], text[cut + 1:]] if 0 < cut < len(text) - 1 and draw(st.booleans()) else [text]
        out += [[draw(st.sampled_from(RUN_PROPS)), t] for t in pieces]
    return "".join(f"<a:r>{x[0]}<a:t>{x[1]}</a:t></a:r>" if isinstance(x, list) else x
                   for x in out) + '<a:endParaRPr lang="de-DE"/>'


SLIDE = "ppt/slides/slide1.xml"


def _slide_text(root):
    """The elements holding a slide's translated text: the runs' ``a:t``."""
    return [r.find(A + "t") for r in root.iter(A + "r")]


def _slide_words(data: bytes) -> list[Counter]:
    """Per paragraph, the (word, run properties) of each word; a break or field between."""
    out = []
    for p in etree.fromstring(_part(data, SLIDE)).iter(A + "p"):
        chars = []
        for child in p:
            props = child.find(A + "rPr")
            key = etree.tostring(props, method="c14n") if props is not None else b""
            chars += [(c, key) for c in child.findtext(A + "t")] if child.tag == A + "r" else [(" ", b"")]
        out.append(_pieces(chars))
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(slide_paragraph(), min_size=1, max_size=3), st.randoms(use_true_random=False))
def test_pptx_identity_upper_and_moved_words_keep_every_run_bold_and_link(paragraphs, rng):
    data = _Shown(slides_package(*paragraphs), SLIDE)
    assert _canonical(translate_document(data, "a.pptx", identity, split=split), SLIDE) \
        == _canonical(data, SLIDE)
    assert _canonical(translate_document(data, "a.pptx", upper, split=split), SLIDE) \
        == _canonical(data, SLIDE, _slide_text)
    assert _slide_words(translate_document(data, "a.pptx", reverse_words, split=split)) == _slide_words(data)
    # words in any order: every word is back, in runs that are never left empty
    got = translate_document(data, "a.pptx", shuffled(rng), split=split)
    assert _bare(_slide_words(got)) == _bare(_slide_words(data))
    assert all(r.findtext(A + "t") for r in etree.fromstring(_part(got, SLIDE)).iter(A + "r"))


# ---------------------------------------------------------------- an element's edges, HTML too
@st.composite
def edged_html(draw) -> bytes:
    """A paragraph whose inline elements hold spaces or no-break spaces at their edges, or
    stop just before a full stop."""
    out = []
    for text in draw(stretches()):
        text = re.sub(r"[\t\n]", " ", text)
        if text.strip() and draw(st.booleans()):
            tag = draw(st.sampled_from(["b", "i", 'a href="x.html"', "span"]))
            lead, trail = (draw(st.sampled_from(["", "", "&nbsp;"])) for _ in range(2))
            text = f"<{tag}>{lead}{text}{trail}</{tag.split()[0]}>"
        out.append(text)
    return f"<p>{''.join(out)}</p>".encode()


@settings(max_examples=60, deadline=None)
@given(edged_html())
def test_html_spaces_and_stops_at_an_elements_edge_stay_on_their_side(page):
    assert translate_document(page, "a.html", identity, split=split) == page
    got = translate_document(page, "a.html", upper, split=split).decode()
    tags = re.compile(r"<[^>]+>")
    assert tags.findall(got) == tags.findall(page.decode())
    assert tags.split(got) == [t.upper().replace("&NBSP;", "&nbsp;") for t in tags.split(page.decode())]


# ---------------------------------------------------------------- the shipped model
SENTENCES = ["Ein Mann mit einem {roten} Hut.", "Ein Hund läuft im [Park].",
             "Ein Hund ist [über die Straße] gelaufen."]


def _marked(build_bold, build_link, build_plain) -> list[list[str]]:
    """Each sentence as its pieces: ``{bold}``, ``[link]`` and plain text built as given."""
    out = []
    for s in SENTENCES:
        pieces = re.split(r"(\{[^}]*\}|\[[^\]]*\])", s)
        out.append([build_bold(x[1:-1]) if x.startswith("{") else build_link(x[1:-1])
                    if x.startswith("[") else build_plain(x) for x in pieces if x])
    return out


def _shipped_odf(kind: str) -> bytes:
    paragraphs = _marked(lambda t: f'<text:span text:style-name="T1">{t}</text:span>',
                         lambda t: f'<text:a xlink:href="https://example.org/">{t}</text:a>', str)
    return odf_document(kind, ["".join(p) for p in paragraphs])


def _shipped_pptx() -> bytes:
    def run(props):
        return lambda t: f"<a:r>{props}<a:t>{t}</a:t></a:r>"
    paragraphs = _marked(run(RUN_PROPS[1]), run(RUN_PROPS[3]), run(RUN_PROPS[0]))
    return slides_package(*("".join(p) for p in paragraphs))


def _formatted(data: bytes, kind: str) -> list[tuple[str, str, str]]:
    """Per paragraph: its text, its bold words and its link's words."""
    if kind == ".pptx":
        paragraphs = etree.fromstring(_part(data, SLIDE)).iter(A + "p")
        return [("".join(p.itertext()), "".join(r.findtext(A + "t") for r in p.iter(A + "r")
                                                 if r.find(A + "rPr").get("b")),
                 "".join(r.findtext(A + "t") for r in p.iter(A + "r") if r.find(f"{A}rPr/{A}hlinkClick") is not None))
                for p in paragraphs]
    paragraphs = etree.fromstring(_part(data, "content.xml")).iter(T + "p")
    return [("".join(p.itertext()), "".join("".join(s.itertext()) for s in p.iter(T + "span")),
             "".join("".join(a.itertext()) for a in p.iter(T + "a"))) for p in paragraphs]


@pytest.fixture(scope="module")
def shipped(one_thread):
    from seq2seq import Translator
    from seq2seq.documents import sentence_translator

    model = Translator.from_checkpoint(DE_EN)
    plain = model.translate([re.sub(r"[{}\[\]]", "", s) for s in SENTENCES])
    return sentence_translator(model), plain


@pytest.mark.parametrize("kind", [".odt", ".odp", ".pptx"])
def test_the_shipped_model_puts_a_bold_word_and_a_links_words_on_their_translations(shipped, kind):
    translate, plain = shipped
    data = _shipped_pptx() if kind == ".pptx" else _shipped_odf(kind)
    got = _formatted(translate_document(data, "a" + kind, translate, split=split), kind)
    assert [text for text, _, _ in got] == plain  # the words as the model wrote them
    (_, bold, _), (_, _, park), (_, _, street) = got
    assert bold == "red" and park.endswith("park") and street.endswith("street"), got
