"""Which directions a model translates, and the target-language tag that picks one.

A single-direction model (``src_lang -> tgt_lang``) has no tag and no ``"directions"``
entry in its checkpoint: it works as it always has. A multilingual model is trained on
several directions at once and told which language to produce by a tag, a SentencePiece
piece ``<2xx>`` reserved in its joint vocabulary, placed either

- ``"source"``: first token of the source, ``<2de> x ... </s>`` (Johnson et al. 2017,
  Google's multilingual NMT), or
- ``"decoder"``: the decoder's first input in place of BOS, ``<2de> y ...`` (mBART, NLLB).

The checkpoint records ``{"pairs": ["en-de", "de-en", ...], "tag_position": "source"}``
under ``"directions"`` (:meth:`Directions.to_state`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from seq2seq.fields import FieldError

TagPosition = Literal["source", "decoder"]
TAG_POSITIONS: tuple[str, ...] = ("source", "decoder")
# A language code, BCP-47-like: a 2-3 letter ISO 639 language, then optionally a script
# (4 letters, Titlecase) and a region (2 capitals or 3 digits), joined by "-" or "_": "de",
# "fil", "pt-BR", "zh-Hant", "zh_Hant_TW". The registered case is required: it is what
# tells a region from a second language ("de-en" is a direction, not a code).
_LANG = re.compile(r"[a-z]{2,3}(?:[-_][A-Z][a-z]{3})?(?:[-_](?:[A-Z]{2}|[0-9]{3}))?")


# ISO 639-1 -> English name: LibreTranslate's /languages and an Argos package's metadata
# (other codes are shown as they are)
LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "fi": "Finnish", "fr": "French", "hi": "Hindi",
    "hu": "Hungarian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "nl": "Dutch",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish",
    "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}


class DirectionError(ValueError):
    """An unknown, malformed or missing direction (the message names what the model has)."""


class NamedDirectionError(DirectionError, FieldError):
    """A direction error naming an option (``{target_lang}``: a flag or a request field)."""


def tag_piece(lang: str) -> str:
    """The SentencePiece piece that asks for output in ``lang``: ``<2de>``."""
    return f"<2{lang}>"


def check_language(code: object, where: str) -> str:
    """``code`` if it is a language code (``_LANG``), else a one-line ``DirectionError``
    starting with ``where``. The one check of every language code a model is given or
    loaded with: a checkpoint's, ``DataConfig``'s, a direction's, ``seq2seq-import``'s."""
    if isinstance(code, str) and _LANG.fullmatch(code):
        return code
    hint = ""
    if isinstance(code, str) and re.fullmatch(r"[a-z]{2,3}[-_][a-z]{2,3}", code):
        hint = f"; {code!r} looks like a language pair: give one language"
    raise DirectionError(f"{where}: {code!r} is not a language code (a 2-3 letter ISO 639 "
                         "code, optionally with a script and a region: 'de', 'fil', 'pt-BR', "
                         f"'zh-Hant'){hint}")


def _lang(code: str, where: str) -> str:
    return check_language(code.strip(), where)


def _split_pair(part: str, where: str) -> tuple[str, str]:
    """``"en-de"`` -> ``("en", "de")``; codes may hold "-" themselves (``"pt-BR-en"``):
    the one cut where both sides are language codes."""
    cuts = [i for i, c in enumerate(part) if c == "-"]
    if not cuts:
        raise DirectionError(f"{where}: {part!r} is not a direction "
                             "(write 'en-de', 'all:en,de,fr' or 'en<>de,fr')")
    valid = [(part[:i].strip(), part[i + 1:].strip()) for i in cuts
             if _LANG.fullmatch(part[:i].strip()) and _LANG.fullmatch(part[i + 1:].strip())]
    if len(valid) == 1:
        return valid[0]
    src, _, tgt = part.partition("-")
    return _lang(src, where), _lang(tgt, where)  # names the code that is wrong


def parse_pairs(spec: str | Sequence[str], where: str = "directions") -> tuple[tuple[str, str], ...]:
    """Directions from a spec: ``"en-de,de-en"`` (or a list of such), ``"all:en,de,fr"``
    (every ordered pair), ``"en<>de,fr"`` (to and from the first language). Order kept,
    duplicates refused."""
    items = [spec] if isinstance(spec, str) else list(spec)
    pairs: list[tuple[str, str]] = []
    for item in items:
        item = item.strip()
        if item.startswith("all:"):
            langs = [_lang(c, where) for c in item[4:].split(",")]
            pairs += [(a, b) for a in langs for b in langs if a != b]
        elif "<>" in item:
            hub, rest = item.split("<>", 1)
            hub = _lang(hub, where)
            for other in (_lang(c, where) for c in rest.split(",")):
                pairs += [(hub, other), (other, hub)]
        else:
            pairs += [_split_pair(part.strip(), where) for part in item.split(",")]
    for a, b in pairs:
        if a == b:
            raise DirectionError(f"{where}: {a}-{b} translates a language into itself")
    if len(set(pairs)) != len(pairs):
        dup = next(p for p in pairs if pairs.count(p) > 1)
        raise DirectionError(f"{where}: {dup[0]}-{dup[1]} is given twice")
    if not pairs:
        raise DirectionError(f"{where}: no direction given")
    return tuple(pairs)


@dataclass(frozen=True)
class Directions:
    """The directions of a multilingual model and where its tag goes."""

    pairs: tuple[tuple[str, str], ...]
    tag_position: TagPosition = "source"

    def __post_init__(self) -> None:
        if self.tag_position not in TAG_POSITIONS:
            raise DirectionError(f"tag_position: {self.tag_position!r} is not one of "
                                 f"{list(TAG_POSITIONS)}")

    @property
    def languages(self) -> tuple[str, ...]:
        """Every language, in order of first appearance."""
        return tuple(dict.fromkeys(lang for pair in self.pairs for lang in pair))

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(b for _, b in self.pairs))

    @property
    def tags(self) -> tuple[str, ...]:
        """The pieces a joint tokenizer must reserve: one per target language."""
        return tuple(tag_piece(lang) for lang in self.targets)

    def names(self) -> list[str]:
        return [f"{a}-{b}" for a, b in self.pairs]

    def resolve(self, src_lang: str | None, tgt_lang: str | None) -> tuple[str | None, str]:
        """The direction asked for: ``tgt_lang`` is needed unless the model has one target;
        ``src_lang``, when given, must form a trained pair with it."""
        have = ", ".join(self.names())
        if tgt_lang is None:
            if len(self.targets) > 1:
                raise NamedDirectionError("this model translates into several languages "
                                          "({have}); name the target language ({target_lang})",
                                          have=have)
            tgt_lang = self.targets[0]
        if tgt_lang not in self.targets:
            raise DirectionError(f"this model does not translate into {tgt_lang!r}; it has {have}")
        if src_lang is not None and (src_lang, tgt_lang) not in self.pairs:
            raise DirectionError(f"this model was not trained on {src_lang}-{tgt_lang}; it has {have}")
        return src_lang, tgt_lang

    def to_state(self) -> dict[str, Any]:
        return {"pairs": self.names(), "tag_position": self.tag_position}

    @classmethod
    def from_state(cls, state: Any, where: str = "directions") -> Directions:
        if not isinstance(state, dict) or not isinstance(state.get("pairs"), list):
            raise DirectionError(f"{where}: expected {{'pairs': [...], 'tag_position': ...}}, "
                                 f"got {state!r}")
        return cls(parse_pairs(state["pairs"], where), state.get("tag_position", "source"))


def directions_of(meta: dict[str, Any], where: str = "checkpoint") -> Directions | None:
    """A checkpoint's directions (``None``: a single-direction model, no tag)."""
    state = meta.get("directions")
    return None if state is None else Directions.from_state(state, f"{where}: directions")


def different_directions(saved: Directions | None, ours: Directions | None) -> str | None:
    """Why a model trained for ``saved`` cannot train on for ``ours`` (``None``: it can: the
    same directions in any order, the tag in the same place; or both single-direction)."""
    if saved == ours or (saved is not None and ours is not None and set(saved.pairs) == set(ours.pairs)
                         and saved.tag_position == ours.tag_position):
        return None

    def say(d: Directions | None) -> str:
        return "one direction (no tag)" if d is None else \
            f"{', '.join(d.names())} (tag on the {d.tag_position})"

    return f"translates {say(saved)}, but the data is {say(ours)} (DataConfig.directions)"
