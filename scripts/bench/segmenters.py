"""Which sentence segmenter: accuracy on hard cases in en/de/fr/cs/zh and on test_2016_flickr
"paragraphs" (3 consecutive captions joined by a space: the true boundaries are known), and a
rough per-sentence time. Each library sees one line at a time (line breaks are hard boundaries
in `seq2seq.translation.segment` whatever the library).

    OMP_NUM_THREADS=1 python scripts/bench/segmenters.py
"""

from __future__ import annotations

import gzip
import time
from pathlib import Path

# (language, text, the sentences it holds)
HARD_CASES = [
    ("en", "Dr. Smith met Mr. Jones 3.5 km from the station. They talked.",
     ["Dr. Smith met Mr. Jones 3.5 km from the station.", "They talked."]),
    ("en", 'He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("en", "(This is a note.) The next one follows.",
     ["(This is a note.)", "The next one follows."]),
    ("en", "Wait... what happened? Really?! Yes.",
     ["Wait... what happened?", "Really?!", "Yes."]),
    ("en", "I waited... And then it rained.", ["I waited...", "And then it rained."]),
    ("en", "The train leaves at 10.30 a.m. on Monday. It costs $3.50.",
     ["The train leaves at 10.30 a.m. on Monday.", "It costs $3.50."]),
    ("en", "The U.S. army is big, e.g. in Texas. It grows.",
     ["The U.S. army is big, e.g. in Texas.", "It grows."]),
    ("en", "Ingredients: eggs, milk, flour", ["Ingredients: eggs, milk, flour"]),
    ("de", "Dr. Müller kam am 3. Oktober nach Berlin. Er blieb zwei Tage.",
     ["Dr. Müller kam am 3. Oktober nach Berlin.", "Er blieb zwei Tage."]),
    ("de", "Wir brauchen z. B. Äpfel, Birnen u. a. Obst. Danach gehen wir.",
     ["Wir brauchen z. B. Äpfel, Birnen u. a. Obst.", "Danach gehen wir."]),
    ("de", "Der Zug fährt um 10.30 Uhr ab. Er hat 3,5 Stunden Verspätung.",
     ["Der Zug fährt um 10.30 Uhr ab.", "Er hat 3,5 Stunden Verspätung."]),
    ("de", "Er sagte: „Ich komme morgen.“ Dann ging er.",
     ["Er sagte: „Ich komme morgen.“", "Dann ging er."]),
    ("de", "Am 1. Mai ist Feiertag. Am 24.12.2026 ist Heiligabend.",
     ["Am 1. Mai ist Feiertag.", "Am 24.12.2026 ist Heiligabend."]),
    ("de", "Das ist toll?! Ja, wirklich.", ["Das ist toll?!", "Ja, wirklich."]),
    ("de", "Die Firma (gegr. 1990) wächst. Sie hat 20 Mitarbeiter.",
     ["Die Firma (gegr. 1990) wächst.", "Sie hat 20 Mitarbeiter."]),
    ("de", "Das war im 19. Jh. sehr üblich. Heute nicht mehr.",
     ["Das war im 19. Jh. sehr üblich.", "Heute nicht mehr."]),
    ("de", "Er wartete … und wartete. Niemand kam.", ["Er wartete … und wartete.", "Niemand kam."]),
    ("fr", "M. Dupont est arrivé hier. Mme Martin aussi.",
     ["M. Dupont est arrivé hier.", "Mme Martin aussi."]),
    ("fr", "Le train part à 10 h 30. Il a 3,5 km à faire.",
     ["Le train part à 10 h 30.", "Il a 3,5 km à faire."]),
    ("fr", "Il a dit : « Je viens. » Puis il est parti.",
     ["Il a dit : « Je viens. »", "Puis il est parti."]),
    ("fr", "Quoi ?! Vraiment ? Oui.", ["Quoi ?!", "Vraiment ?", "Oui."]),
    ("fr", "Voir p. 5 et chap. 3 pour les détails. Merci.",
     ["Voir p. 5 et chap. 3 pour les détails.", "Merci."]),
    ("fr", "Il est né le 3 oct. 1990 à Paris. Il y vit encore.",
     ["Il est né le 3 oct. 1990 à Paris.", "Il y vit encore."]),
    ("cs", "Dr. Novák přišel 3. října. Zůstal dva dny.",
     ["Dr. Novák přišel 3. října.", "Zůstal dva dny."]),
    ("cs", "Mám rád ovoce, např. jablka a hrušky. Ty jsou zdravé.",
     ["Mám rád ovoce, např. jablka a hrušky.", "Ty jsou zdravé."]),
    ("cs", "Řekl: „Přijdu zítra.“ Pak odešel.", ["Řekl: „Přijdu zítra.“", "Pak odešel."]),
    ("cs", "Narodil se 1. 1. 1990 v Praze. Žije tam dodnes.",
     ["Narodil se 1. 1. 1990 v Praze.", "Žije tam dodnes."]),
    ("cs", "Je to tzv. malý problém. Opravdu?! Ano.",
     ["Je to tzv. malý problém.", "Opravdu?!", "Ano."]),
    ("zh", "我喜欢猫。你喜欢狗吗？是的！", ["我喜欢猫。", "你喜欢狗吗？", "是的！"]),
    ("ja", "今日は晴れです。明日は雨でしょう。", ["今日は晴れです。", "明日は雨でしょう。"]),
]


def _pysbd(lang, text):
    import pysbd
    code = lang if lang in pysbd.languages.LANGUAGE_CODES else "en"
    return pysbd.Segmenter(language=code, clean=False).segment(text)


def _sentencex(lang, text):
    import sentencex
    return list(sentencex.segment(lang, text))


def _moses(lang, text):
    from sentence_splitter import SentenceSplitter
    try:
        return SentenceSplitter(language=lang).split(text)
    except Exception:  # no prefix list for the language
        return SentenceSplitter(language="en").split(text)


def _syntok(lang, text):
    from syntok import segmenter
    return ["".join(t.spacing + t.value for t in sentence).strip()
            for paragraph in segmenter.analyze(text) for sentence in paragraph]


def _ours(lang, text):
    """Where the text is cut: at each sentence's end (what passes through untouched, a
    list marker, stays with the sentence it comes before)."""
    from seq2seq.translation.segment import sentence_spans
    ends = [0, *(b for _, b in sentence_spans(text, lang)[:-1]), len(text)]
    return [text[a:b] for a, b in zip(ends, ends[1:])]


LIBRARIES = {"pysbd": _pysbd, "sentencex": _sentencex, "sentence-splitter": _moses,
             "syntok": _syntok, "seq2seq.translation.segment (sentencex + 3 corrections)": _ours}


def _same(found, gold) -> bool:
    return [s.strip() for s in found if s.strip()] == gold


def _paragraphs(lang: str, n: int = 333) -> list[tuple[str, list[str]]]:
    path = Path(__file__).resolve().parents[2] / f"data/multi30k/test_2016_flickr.{lang}.gz"
    lines = gzip.open(path, "rt", encoding="utf-8").read().splitlines()
    groups = [lines[i:i + 3] for i in range(0, 3 * n, 3)]
    return [(" ".join(g), g) for g in groups]


def main() -> None:
    for name, split in LIBRARIES.items():
        split("en", "Warm up. Once.")
        hard = [case for case in HARD_CASES if _same(split(case[0], case[1]), case[2])]
        missed = [case[1][:30] for case in HARD_CASES if case not in hard]
        flickr, seconds, sentences = {}, 0.0, 0
        for lang in ("en", "de", "fr", "cs"):
            paragraphs = _paragraphs(lang)
            start = time.perf_counter()
            found = [split(lang, text) for text, _ in paragraphs]
            seconds += time.perf_counter() - start
            sentences += 3 * len(paragraphs)
            flickr[lang] = sum(_same(f, g) for f, (_, g) in zip(found, paragraphs))
        print(f"{name}: hard cases {len(hard)}/{len(HARD_CASES)}; flickr paragraphs "
              + " ".join(f"{k} {v}/333" for k, v in flickr.items())
              + f"; {1e6 * seconds / sentences:.0f} us/sentence")
        print("   missed:", missed)


if __name__ == "__main__":
    main()
