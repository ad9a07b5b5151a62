"""Sentence segmentation (seq2seq.translation.segment): the text comes back exactly from its pieces,
line breaks are always boundaries, the hard cases of each language cut where they should,
and what is not language (seq2seq.translation.passthrough) stays out of the sentences."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from seq2seq.translation.passthrough import links
from seq2seq.translation.segment import (
    LONG,
    clause_spans,
    cut_words,
    fit_clauses,
    sentence_spans,
    split_text,
)

# (language, text, its sentences): abbreviations, ordinals and dates, decimals and times,
# quotes and brackets after the full stop, ellipses, ?!, a list line without a full stop, CJK
HARD = [
    ("en", "Dr. Smith met Mr. Jones 3.5 km away. They talked.",
     ["Dr. Smith met Mr. Jones 3.5 km away.", "They talked."]),
    ("en", 'He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("en", "Wait... what happened? Really?! Yes.", ["Wait... what happened?", "Really?!", "Yes."]),
    ("en", "The train leaves at 10.30 a.m. on Monday. It costs $3.50.",
     ["The train leaves at 10.30 a.m. on Monday.", "It costs $3.50."]),
    ("de", "Dr. Müller kam am 3. Oktober nach Berlin. Er blieb zwei Tage.",
     ["Dr. Müller kam am 3. Oktober nach Berlin.", "Er blieb zwei Tage."]),
    ("de", "Wir brauchen z. B. Äpfel, Birnen u. a. Obst. Danach gehen wir.",
     ["Wir brauchen z. B. Äpfel, Birnen u. a. Obst.", "Danach gehen wir."]),
    ("de", "Der Zug fährt um 10.30 Uhr ab. Er hat 3,5 Stunden Verspätung.",
     ["Der Zug fährt um 10.30 Uhr ab.", "Er hat 3,5 Stunden Verspätung."]),
    ("de", "Er sagte: „Ich komme morgen.“ Dann ging er.",
     ["Er sagte: „Ich komme morgen.“", "Dann ging er."]),
    ("de", "Die Firma (gegr. 1990) wächst. Sie hat 20 Mitarbeiter.",
     ["Die Firma (gegr. 1990) wächst.", "Sie hat 20 Mitarbeiter."]),
    ("de", "Sie fahren durch die Landschaft. 2 Mädchen sitzen. Das kostet ca. 19 Euro, geb. 1950.",
     ["Sie fahren durch die Landschaft.", "2 Mädchen sitzen.", "Das kostet ca. 19 Euro, geb. 1950."]),
    ("fr", "M. Dupont est arrivé hier. Mme Martin aussi.",
     ["M. Dupont est arrivé hier.", "Mme Martin aussi."]),
    ("fr", "Il a dit : « Je viens. » Puis il est parti.",
     ["Il a dit : « Je viens. »", "Puis il est parti."]),
    ("fr", "Quoi ?! Vraiment ? Oui.", ["Quoi ?!", "Vraiment ?", "Oui."]),
    ("cs", "Dr. Novák přišel 3. října. Zůstal dva dny.",
     ["Dr. Novák přišel 3. října.", "Zůstal dva dny."]),
    ("cs", "Mám rád ovoce, např. jablka a hrušky. Ty jsou zdravé.",
     ["Mám rád ovoce, např. jablka a hrušky.", "Ty jsou zdravé."]),
    ("en", "Shopping\n- eggs\n- milk", ["Shopping", "eggs", "milk"]),
    ("zh", "我喜欢猫。你喜欢狗吗？是的！", ["我喜欢猫。", "你喜欢狗吗？", "是的！"]),
]


@pytest.mark.parametrize("lang, text, sentences", HARD, ids=[f"{c[0]}:{c[1][:20]}" for c in HARD])
def test_hard_cases_cut_where_the_sentences_end(lang, text, sentences):
    assert [text[a:b] for a, b in sentence_spans(text, lang)] == sentences


_TEXT = st.text(st.sampled_from(list("ab A.?!… \n\r\t,;-“\"()3。😀")) | st.characters(), max_size=80)


# what passthrough keeps, mixed into any text: markers, numbers, symbols, links
_KEPT = st.sampled_from(["1. ", "2) ", "a) ", "- ", "• ", "😀", " 👍", "♪", "2024", "12 %",
                         " https://example.com/a_(b)?c=1 ", " info@example.de ", " " + "x" * 70,
                         "我爱你。"])
_MIXED = st.lists(_TEXT | _KEPT, max_size=6).map("".join)


@settings(max_examples=300, deadline=None)
@given(_MIXED, st.sampled_from(["en", "de", "fr", "cs", "zh", None, "xx"]))
@example("a \ud800 b. C", "en")  # a lone surrogate: sentencex cannot encode it (found by Hypothesis)
@example("ein hund. " * 30, "de")
def test_sentences_and_gaps_give_back_the_text_exactly(text, lang):
    segments = split_text(text, lang)
    assert segments.join(segments.sentences) == text
    spans = sentence_spans(text, lang)
    assert all(a < b for a, b in spans)
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))
    for sentence in segments.sentences:  # no whitespace around a sentence, no line inside one
        assert sentence == sentence.strip() and len(sentence.splitlines()) == 1
        assert any(c.isalpha() for c in sentence)  # language: no sentence without a letter
        assert not links(sentence, 0, len(sentence))  # URLs, e-mail addresses: never inside
        assert sentence[0] not in "-•😀♪👍" and sentence[-1] not in "😀♪👍"
    kept = "".join(segments.gaps)  # what is left out of the sentences is kept, verbatim
    for url in ("https://example.com/a_(b)?c=1", "info@example.de", "x" * 70):
        assert kept.count(url) == text.count(url)


def test_line_breaks_and_blank_lines_stay_in_the_gaps():
    text = "Ein Mann fährt Fahrrad.\nEine Frau liest.\n\n  Zwei Hunde spielen im Schnee. Ja!\n"
    segments = split_text(text, "de")
    assert segments.sentences == ["Ein Mann fährt Fahrrad.", "Eine Frau liest.",
                                  "Zwei Hunde spielen im Schnee.", "Ja!"]
    assert segments.gaps == ["", "\n", "\n\n  ", " ", "\n"]
    assert segments.join(["A.", "B.", "C.", "D!"]) == "A.\nB.\n\n  C. D!\n"


# (text, its sentences, the gaps around them): what is not language stays in the gaps
KEPT = [
    ("1. Eine Gruppe von Menschen wartet auf den Bus.",
     ["Eine Gruppe von Menschen wartet auf den Bus."], ["1. ", ""]),
    ("1. Eine Gruppe.\n2) Ein Mädchen isst.\n- Ein Hund.\n* Eine Katze.\n• Ein Boot.\n– Ja.",
     ["Eine Gruppe.", "Ein Mädchen isst.", "Ein Hund.", "Eine Katze.", "Ein Boot.", "Ja."],
     ["1. ", "\n2) ", "\n- ", "\n* ", "\n• ", "\n– ", ""]),
    ("a) Ein Hund.\n(iv) Eine Katze.\n1.2. Ein Boot.", ["Ein Hund.", "Eine Katze.", "Ein Boot."],
     ["a) ", "\n(iv) ", "\n1.2. ", ""]),
    ("😀 Ein Hund läuft. 👍", ["Ein Hund läuft."], ["😀 ", " 👍"]),
    ("Der Preis: 12 € 🎉", ["Der Preis: 12"], ["", " € 🎉"]),
    ("Siehe https://example.com/a?b=1. Danke.", ["Siehe", "Danke."],
     ["", " https://example.com/a?b=1. ", ""]),
    ("Schreib an info@example.de bitte.", ["Schreib an", "bitte."], ["", " info@example.de ", ""]),
    ("Der Hash ist " + "a1" * 40 + " hier.", ["Der Hash ist", "hier."], ["", " " + "a1" * 40 + " ", ""]),
]
NOTHING = ["2024", "3.50", "12 %", "5 km", "20 °C.", "+49 30 1234567", "♪", "😀 👍", "...",
           "1.", "- ", "https://example.com", "x" * 20000]


@pytest.mark.parametrize("text, sentences, gaps", KEPT, ids=[k[0][:24] for k in KEPT])
def test_markers_symbols_and_links_stay_in_the_gaps(text, sentences, gaps):
    segments = split_text(text, "de")
    assert (segments.sentences, segments.gaps) == (sentences, gaps)


@pytest.mark.parametrize("text", NOTHING, ids=[t[:16] for t in NOTHING])
def test_a_text_that_is_not_language_has_no_sentence(text):
    assert sentence_spans(text, "de") == []


def test_lowercase_sentences_are_cut_and_abbreviations_kept():
    text = "ein hund läuft über die wiese. " * 40
    assert len(sentence_spans(text, "de")) == 40
    assert len(sentence_spans(text, "en")) == 40  # sentencex cuts, nothing joins them again
    for lang, text, n in (("de", "Er kam ca. gestern. Das kostet ca. 19 Euro, geb. 1950.", 2),
                          ("en", "We met e.g. yesterday. It was fine.", 2),
                          ("de", "Das ist gut. ja, so ist es.", 1)):  # "gut." may be "geb."
        assert len(sentence_spans(text, lang)) == n, text
    text = "das ist gut. " * 40  # ... but not in a long sentence
    assert all(b - a <= LONG + len("das ist gut.") for a, b in sentence_spans(text, "de"))


def test_translations_of_unspaced_sentences_get_a_space():
    segments = split_text("我爱你。你好！真的？", "zh")
    assert segments.gaps == ["", "", "", ""]
    assert segments.join(["I love you.", "Hello!", "Really?"]) == "I love you. Hello! Really?"
    assert segments.join(["我爱你。", "Hello!", "真的？"]) == "我爱你。Hello!真的？"
    spaced = split_text("Hallo.Wie geht es? Gut.", "de")  # a missing space stays missing
    assert spaced.join([s.upper() for s in spaced.sentences]) == "Hallo.Wie geht es? Gut.".upper()


def test_long_sentences_are_cut_at_clauses_within_the_limit():
    sentence = "Ein Mann, der läuft; eine Frau - sie liest, schläft."
    assert [sentence[a:b] for a, b in clause_spans(sentence)] == [
        "Ein Mann,", "der läuft;", "eine Frau", "sie liest,", "schläft."]  # the dash is kept
    words = lambda s: len(s.split())  # noqa: E731
    pieces = fit_clauses(sentence, words, 4)
    assert [sentence[a:b] for a, b in pieces] == [
        "Ein Mann, der läuft;", "eine Frau", "sie liest, schläft."]
    assert all(words(sentence[a:b]) <= 4 for a, b in pieces)
    assert " - ".join(sentence[a:b] for a, b in pieces[1:]) == sentence[pieces[1][0]:]
    assert fit_clauses(sentence, words, 100) == [(0, len(sentence))]


@settings(max_examples=200, deadline=None)
@given(st.text(st.sampled_from(list("ab c  \nü😀")), max_size=200), st.integers(1, 12))
@example("x" * 20000, 126)
def test_a_clause_over_the_limit_is_cut_into_pieces_within_it(piece, limit):
    length = len  # any measure that grows with the text: characters here, tokens in use
    spans = cut_words(piece, length, limit)
    assert all(0 < b - a <= limit for a, b in spans)
    assert all(b1 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))
    inside = "".join(piece[a:b] for a, b in spans)  # every letter, in order; the rest kept
    assert [c for c in inside if c.isalpha()] == [c for c in piece if c.isalpha()]
    if all(len(word) <= limit for word in piece.split()):  # then never inside a word
        for a, b in spans:
            assert not (a and piece[a - 1].isalpha() and piece[a].isalpha())
            assert not (b < len(piece) and piece[b - 1].isalpha() and piece[b].isalpha())
