"""HTML translated a sentence at a time across inline tags (seq2seq.documents.html): what
reaches the model is each sentence as plain text, entities decoded; everything that is not
text comes back byte for byte, properly nested; never-translated elements stay as they are.
The translators here are fakes with a known alignment, so each property is exact."""

from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser

from hypothesis import given, settings
from hypothesis import strategies as st
from stand_ins import TOKEN, Fake, split

from seq2seq.documents.html import parse, translate_html
from seq2seq.documents.inline import units
from seq2seq.translation.alignment import Aligned, piece_spans, project_range, snap
from seq2seq.translation.segment import strip_span

TAG = re.compile(r"<[^>]*>")


def translate(page: str, reverse: bool = False) -> tuple[str, Fake]:
    fake = Fake(reverse)
    return translate_html(page, fake, split), fake


def balanced(page: str) -> bool:
    """Every end tag closes the element opened last (void elements aside)."""
    stack: list[str] = []
    ok = [True]

    class Check(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag not in ("br", "img", "wbr"):
                stack.append(tag)

        def handle_endtag(self, tag):
            ok[0] = ok[0] and bool(stack) and stack.pop() == tag

    Check().feed(page)
    return ok[0] and not stack


# ---------------------------------------------------------------- examples
def test_nested_inline_tags_follow_their_words_when_the_order_changes():
    page = '<p>Ein <b>großer <i>Hund</i></b> läuft.</p>'
    out, fake = translate(page, reverse=True)
    assert fake.calls == [["Ein großer Hund läuft."]]  # one sentence, no tags
    assert out == '<p>. läuft <b><i>Hund</i> großer</b> Ein</p>'


def test_identity_keeps_the_page_byte_for_byte():
    page = ('<div class="x"><p>Zwei <em>Männer</em> spielen <a href="/a?x=1&amp;y=2" '
            'title="Ein Hund">Fußball <b>im</b> Park</a>. Eine <span>Frau liest</span>.</p></div>')
    out, fake = translate(page)
    assert out == page
    assert fake.calls == [["Zwei Männer spielen Fußball im Park.", "Eine Frau liest."]]


def test_attributes_are_never_translated():
    page = '<p>Ein <a href="hund.html" title="Ein Hund">Hund</a> läuft.</p>'
    out, fake = translate(page, reverse=True)
    assert '<a href="hund.html" title="Ein Hund">Hund</a>' in out
    assert all("hund.html" not in s for s in fake.calls[0])


def test_entities_are_decoded_for_the_model_and_escaped_once():
    page = "<p>Hund &amp; Katze &lt;3 &eacute;t&eacute;&nbsp;x.</p>"
    out, fake = translate(page)
    assert fake.calls == [["Hund & Katze <3 été\xa0x."]]
    assert out == page  # characters come back written as the page wrote them (&amp; escaped once)


def test_a_lone_less_than_sign_is_text_of_its_sentence():
    out, fake = translate("<p>Ein Hund < eine Katze. <3</p>")
    assert fake.calls == [["Ein Hund < eine Katze.", "<3"]]
    assert out == "<p>Ein Hund &lt; eine Katze. &lt;3</p>"


def test_an_unclosed_comment_is_never_text():
    page = "<p>Ein Hund. <!-- Kommentar <b>nicht</b> übersetzen"
    out, fake = translate(page, reverse=True)
    assert fake.calls == [["Ein Hund."]]
    assert out.endswith("<!-- Kommentar <b>nicht</b> übersetzen")


def test_ninety_inline_tags_make_one_sentence():
    page = "<p>" + " ".join(f'<a href="#{i}">Wort{i}</a>' for i in range(90)) + ".</p>"
    out, fake = translate(page)
    assert len(fake.calls) == 1 and len(fake.calls[0]) == 1
    assert out == page


def test_script_style_code_pre_and_translate_no_are_untouched():
    keep = ['<script>if (a < b && c) { x("<p>Hund</p>"); }</script>', "<style>p > b { x: 1 }</style>",
            "<code>ls -l <b>Hund</b></code>", "<pre>Ein  Hund\n läuft.</pre>",
            '<span translate="no">Ein Hund</span>', '<b class="x notranslate">Hund</b>',
            "<svg><text>Hund</text></svg>"]
    page = "<p>Eine Katze " + " Katze ".join(keep) + " schläft.</p>"
    out, fake = translate(page, reverse=True)
    for raw in keep:
        assert raw in out
    assert all("Hund" not in s and "ls" not in s for s in fake.calls[0])


def test_a_block_that_opts_out_is_kept_whole():
    page = '<div translate="no"><p>Ein Hund.</p><div>Hund</div></div><p>Eine Katze.</p>'
    out, fake = translate(page, reverse=True)
    assert fake.calls == [["Eine Katze."]]
    assert out == '<div translate="no"><p>Ein Hund.</p><div>Hund</div></div><p>. Katze Eine</p>'


def test_an_element_around_whole_sentences_stays_around_their_translations():
    out, fake = translate("<div><span>Satz eins. Satz zwei.</span></div>", reverse=True)
    assert fake.calls == [["Satz eins.", "Satz zwei."]]
    assert out == "<div><span>. eins Satz . zwei Satz</span></div>"


def test_an_element_across_a_sentence_boundary_joins_the_sentences():
    out, fake = translate("<p>Satz <b>eins. Satz</b> zwei.</p>")
    assert fake.calls == [["Satz eins. Satz zwei."]]
    assert out == "<p>Satz <b>eins. Satz</b> zwei.</p>"


def test_a_malformed_page_keeps_every_tag_and_translates_its_text():
    page = "<p>Ein</b> <i>Hund <u>läuft</p><div>Katze </i> schläft.</b></div><p>"
    out, fake = translate(page, reverse=True)
    assert Counter(TAG.findall(out)) == Counter(TAG.findall(page))
    assert fake.calls == [["Ein Hund läuft", "Katze  schläft."]]  # one per block, tags gone
    assert Counter(TOKEN.findall(TAG.sub(" ", out))) == Counter(TOKEN.findall(" ".join(fake.calls[0])))


def test_deep_nesting_is_no_problem():
    page = "<p>Ein " + "<b>" * 5000 + "Hund" + "</b>" * 5000 + " läuft.</p>"
    assert translate(page)[0] == page
    out, _ = translate(page, reverse=True)
    assert out == "<p>. läuft " + "<b>" * 5000 + "Hund" + "</b>" * 5000 + " Ein</p>"


def test_points_keep_their_spacing():
    out, _ = translate("<p>Run <code>ls</code> now.<br>Next line.<br/> End<img src=x>.</p>")
    assert out == "<p>Run <code>ls</code> now.<br>Next line.<br/> End<img src=x>.</p>"


def test_what_is_not_language_never_reaches_the_model():
    """The real segmenter: numbers alone, symbols, list markers stay in the page verbatim."""
    fake = Fake(reverse=True)
    table = "<table><tr><td>1</td><td>2024</td><td>♪</td><td>😀 👍</td><td>12 %</td></tr></table>"
    assert translate_html(table, fake, lang="de") == table and fake.calls == []
    page = "<ol><li>1. Ein Hund läuft.</li><li>- Eine Katze 😀</li></ol>"
    out = translate_html(page, fake, lang="de")
    assert fake.calls == [["Ein Hund läuft.", "Eine Katze"]]
    assert out == "<ol><li>1. . läuft Hund Ein</li><li>- Katze Eine 😀</li></ol>"
    fake = Fake(reverse=True)  # an element from a marker into a sentence takes the marker along
    out = translate_html("<p><b>1. Ein</b> Hund läuft.</p>", fake, lang="de")
    assert fake.calls == [["1. Ein Hund läuft."]] and balanced(out)


def test_unspaced_sentences_get_a_space_between_spaced_translations():
    english = {"我爱你。": "I love you.", "你好！": "Hello!"}

    def translate_zh(sentences):
        return [Aligned(english[s]) for s in sentences]
    assert translate_html("<p>我爱你。你好！</p>", translate_zh, lang="zh") == "<p>I love you. Hello!</p>"


KEPT = st.sampled_from(["1. ", "- ", "😀", " 👍", "♪", "2024", "12 %", " https://example.com ", "我爱你。"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["Ein Hund läuft.", "ein hund läuft.", "<b>Katze</b>",
                                          "<i>1. Ein</i>", "<br>", "\n"]) | KEPT, max_size=8)
                .map(" ".join), min_size=1, max_size=3))
def test_identity_with_the_real_segmenter_gives_back_any_page(blocks):
    page = "".join(f"<p>{b}</p>" for b in blocks)
    assert translate_html(page, Fake(), lang="de") == page


# ---------------------------------------------------------------- properties
WORDS = st.sampled_from(["Hund", "Katze", "läuft", "&amp;", "&lt;", "3", "Wiese", ".", "über"])
OPEN = st.sampled_from(["<b>", "<i>", "<span>", '<a href="x?a=1&amp;b=2" title="Hund">',
                        '<em class="y">'])


def _tree(children):
    return st.tuples(OPEN, st.lists(children, min_size=1, max_size=3)).map(
        lambda t: t[0] + " ".join(t[1]) + "</" + re.match(r"<(\w+)", t[0]).group(1) + ">")


TREES = st.lists(st.recursive(st.lists(WORDS, min_size=1, max_size=4).map(" ".join), _tree,
                              max_leaves=12), min_size=1, max_size=4).map(
    lambda parts: "<p>" + " ".join(parts) + "</p>")


@settings(max_examples=150, deadline=None)
@given(TREES)
def test_identity_gives_back_any_page_of_nested_inline_tags(page):
    assert translate(page)[0] == page


@settings(max_examples=150, deadline=None)
@given(TREES)
def test_any_reordering_keeps_the_markup_balanced_and_every_word(page):
    out, fake = translate(page, reverse=True)
    assert balanced(out)
    assert Counter(TAG.findall(out)) == Counter(TAG.findall(page))  # markup byte for byte
    words = Counter(w for s in fake.calls[0] for w in TOKEN.findall(s))
    assert Counter(TOKEN.findall(TAG.sub("", out).replace("&amp;", "&").replace("&lt;", "<"))) == words


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>/&;=\"' abp!-#x.\n")), max_size=60))
def test_any_input_keeps_its_markup(source):
    items = parse(source)
    assert "".join(it.raw for it in items) == source
    for reverse in (False, True):
        out, _ = translate(source, reverse)
        at = 0
        for raw in (it.raw for it in items if it.kind != "text"):
            found = out.find(raw, at)
            assert found >= 0, (raw, out)
            at = found + len(raw) if not reverse else 0  # reversed: inside a sentence, any order


# ---------------------------------------------------------------- units: one sweep, the fixpoint
def _units_by_definition(text, spans, ranges):
    """Sentences joined, one join at a time until none is left to make, where an element
    starts or ends inside a sentence and reaches out of it (quadratic: the definition)."""
    out = [list(strip_span(text, s, e)) for s, e in sorted(spans)]
    out = [u for u in out if u[0] < u[1]]
    while True:
        for a, b in sorted(ranges):
            inside = [k for k, (s, e) in enumerate(out) if s < b and e > a]
            if not inside or (a <= out[inside[0]][0] and b >= out[inside[-1]][1]):
                continue
            joined = [min(a, out[inside[0]][0]), max(b, out[inside[-1]][1])]
            if len(inside) > 1 or joined != out[inside[0]]:
                out[inside[0]:inside[-1] + 1] = [joined]
                break
        else:
            return out


@st.composite
def _nested(draw, lo: int, hi: int, depth: int = 3) -> list[tuple[int, int]]:
    """Ranges in ``[lo, hi)`` that nest or are disjoint, as elements' texts do."""
    out, at = [], lo
    while at < hi and depth and draw(st.booleans()):
        a = draw(st.integers(at, hi - 1))
        b = draw(st.integers(a + 1, hi))
        out += [(a, b), *draw(_nested(a, b, depth - 1))]
        at = b
    return out


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from("ab. "), min_size=1, max_size=30), st.data())
def test_units_are_the_sentences_joined_until_every_element_nests(text, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8, unique=True)))
    spans = list(zip(cuts[::2], cuts[1::2]))
    ranges = [r for r in (strip_span(text, a, b) for a, b in data.draw(_nested(0, len(text)))) if r[0] < r[1]]
    assert units(text, spans, ranges) == _units_by_definition(text, spans, ranges)


# ---------------------------------------------------------------- alignment pieces
def test_piece_spans_find_each_piece_and_skip_specials():
    assert piece_spans("Ein Hund.", ["<2en>", "▁Ein", "▁Hu", "nd", ".", "</s>"]) == [
        None, (0, 3), (4, 6), (6, 8), (8, 9), None]


def test_a_range_covers_whole_target_words_only():
    al = Aligned("the big dog.", [(0, 3, 0, 3), (4, 6, 4, 7), (6, 7, 8, 11), (8, 11, 8, 11), (11, 12, 11, 12)])
    assert project_range(al, 4, 7) == (4, 7)  # "bi" aligned: the word "big", not "bi"
    assert snap("dog.", 0, 2) == (0, 3)  # never the full stop
