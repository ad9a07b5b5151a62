"""HTML in, HTML out: the text between tags is translated, the markup is kept byte for byte.

The document is split with the standard library's ``html.parser`` (a real, forgiving HTML
tokenizer, no regular expressions): every start tag, end tag, comment, declaration and
the content of ``<script>``/``<style>`` is copied verbatim from the input; each run of
text between two of them is unescaped (``&amp;`` -> ``&``), translated without its
surrounding whitespace, and escaped again. A run that is only whitespace stays as it is.
Attribute values are markup, not text: they are not translated.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from html.parser import HTMLParser


class _Splitter(HTMLParser):
    """Offsets where each parser event starts, and which events are text to translate."""

    def __init__(self, source: str):
        super().__init__(convert_charrefs=True)  # a text run arrives whole, entities decoded
        self._line_starts = [0]
        for i, c in enumerate(source):
            if c == "\n":
                self._line_starts.append(i + 1)
        self.events: list[tuple[int, str | None]] = []  # (start offset, unescaped text | None)

    def _mark(self, text: str | None = None) -> None:
        line, col = self.getpos()
        self.events.append((self._line_starts[line - 1] + col, text))

    def handle_data(self, data: str) -> None:
        raw = self.cdata_elem is not None  # inside <script> or <style>: code, not prose
        self._mark(None if raw else data)

    def handle_starttag(self, tag, attrs) -> None:
        self._mark()

    def handle_startendtag(self, tag, attrs) -> None:
        self._mark()

    def handle_endtag(self, tag) -> None:
        self._mark()

    def handle_comment(self, data) -> None:
        self._mark()

    def handle_decl(self, decl) -> None:
        self._mark()

    def handle_pi(self, data) -> None:
        self._mark()

    def unknown_decl(self, data) -> None:
        self._mark()


def split_html(source: str) -> list[tuple[str, str | None]]:
    """``[(raw slice, text or None)]`` covering ``source`` in order: ``text`` is the
    unescaped content of a text run, ``None`` for markup (kept as the raw slice)."""
    parser = _Splitter(source)
    parser.feed(source)
    parser.close()
    events = parser.events
    if not events or events[0][0] != 0:  # nothing parsed, or a prefix the parser skipped
        events.insert(0, (0, None))
    bounds = [start for start, _ in events] + [len(source)]
    return [(source[bounds[i]:bounds[i + 1]], text) for i, (_, text) in enumerate(events)]


def text_runs(source: str) -> list[str]:
    """The stripped, non-blank text runs of ``source`` that :func:`translate_html` translates."""
    return [text.strip() for _, text in split_html(source) if text is not None and text.strip()]


def translate_html(source: str, translate: Callable[[list[str]], list[str]]) -> str:
    """``source`` with each text run replaced by its translation; ``translate`` gets every
    run at once (one batch) and returns one string per run, in order."""
    parts = split_html(source)
    runs = text_runs(source)
    translated = iter(translate(runs) if runs else [])
    out = []
    for raw, text in parts:
        if text is None or not text.strip():
            out.append(raw)
            continue
        lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()):]
        out.append(lead + html.escape(next(translated), quote=False) + trail)
    return "".join(out)
