"""Which of the served source languages a text is in (LibreTranslate's ``/detect`` and
``source: "auto"``).

With one source language there is nothing to guess: it is that one, confidence 100. With
several, ``py3langid`` decides among exactly those: a maintained fork of langid.py whose
naive-Bayes model (97 languages, ~4 MB) ships inside the package, so it runs offline,
deterministically, with numpy alone, in well under a millisecond per sentence. Confidence
is its normalised probability in percent, as LibreTranslate reports it.
"""

from __future__ import annotations

from collections.abc import Sequence

from seq2seq.extras import install_hint


class LanguageDetector:
    def __init__(self, languages: Sequence[str]):
        self.languages = list(dict.fromkeys(languages))
        self._identifier = None
        if len(self.languages) > 1:
            try:
                from py3langid import langid
            except ImportError as e:
                raise ImportError(f"several source languages {self.languages} need a language "
                                  f"identifier: {install_hint('serve')}", name=e.name) from None
            identifier = langid.LanguageIdentifier.from_model_file(langid.MODEL_FILE,
                                                                    norm_probs=True)
            # a code the model does not know ("?" from an old checkpoint) is never guessed
            self.languages = [c for c in self.languages if c in identifier.labels] or self.languages[:1]
            if len(self.languages) > 1:
                identifier.set_languages(self.languages)
                self._identifier = identifier

    def rank(self, text: str) -> list[tuple[str, float]]:
        """``[(language, confidence in percent)]``, most likely first, over the served sources."""
        if self._identifier is None:
            return [(self.languages[0], 100.0)]
        return [(lang, round(100.0 * float(p), 2)) for lang, p in self._identifier.rank(text)]

    def detect(self, text: str) -> tuple[str, float]:
        return self.rank(text)[0]
