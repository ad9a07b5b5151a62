"""``seq2seq-translate``: translate lines with a checkpoint, one output line per input line.

    seq2seq-translate -m run.ckpt < src.de > hyp.en
    seq2seq-translate -m run.ckpt --beam 5 --nbest 3 --output-format jsonl "Ein Hund rennt."
    seq2seq-translate -m run.ckpt --input src.de --plot-attention attn.png
    seq2seq-translate -m multi.ckpt --target-lang de "A dog runs."

A multilingual model is told the output language by ``--target-lang`` (and checks
``--source-lang`` when given); a direction it was not trained on is refused, naming the
ones it has.

Input: positional arguments (one text each), ``--input FILE``, or stdin, read in chunks
and flushed per chunk (streaming); one output line per input line, blank lines stay blank.
Each line is cut into sentences, which are translated (all of a chunk batched together) and
put back in their places (``--no-split``: each line as one sentence). An output that looks
like it dropped words gets a one-line warning on stderr. Decoding defaults
come from ``DecodingConfig``; flags only override them.

What a model knows is its training data. The shipped models (``-m multi30k_de_en_tiny``,
``-m multi30k_en_de_tiny``, from any folder) learned from Multi30k alone: ~29,000 short
image captions ("Two dogs play in the snow."). Other text (news, dialogue, long sentences)
comes out as fluent-looking nonsense. ``--output-format jsonl`` gives each output's
confidence (its geometric-mean token probability: median 0.75 on held-out captions, mostly
below 0.5 on other text). Outputs below the checkpoint's calibrated threshold
(``seq2seq-calibrate``; the shipped models have one) are flagged "unsure", and one warning
on stderr says how many; ``--warn-below P`` sets another threshold, ``--warn-below 0`` none.
Outputs missing a number of their input are flagged "numbers", and counted the same way.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path

import seq2seq.documents as documents
from seq2seq.cli.common import (
    Parser,
    add_decoding_args,
    add_direction_args,
    add_model_argument,
    check_device,
    check_output_file,
    decoding_from_args,
    ignored_options,
    load_from_args,
    note_compute_type,
    one_line,
    run_command,
)
from seq2seq.config import DecodingConfig
from seq2seq.documents.align import Recording

CHUNK_LINES = 500  # lines per translate call when reading a file or a pipe
PROG = "seq2seq-translate"
__all__ = ["build_parser", "decoding_from_args", "main", "run"]  # decoding_from_args: tests

def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog=PROG, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(ap, append=True, help="the trained model (repeated, -m A -m B: an "
                       "ensemble, each step the mean of the models' log-probabilities; "
                       "same tokenizer and direction): a checkpoint file (.ckpt)")
    ap.add_argument("text", nargs="*", help="sentences to translate (else --input or stdin)")
    add_direction_args(ap)
    ap.add_argument("--input", "-i", metavar="FILE", help="read lines from FILE; a document "
                    "(.html, .htm, .docx, .srt, .odt, .odp, .pptx, .epub) is translated into a file "
                    "of its kind")
    ap.add_argument("--output", "-o", metavar="FILE", help="where a document goes (default: "
                    "NAME.<target>.EXT beside the input; a .txt input with --output is a document)")
    ap.add_argument("--output-format", choices=["text", "jsonl"], default="text",
                    help="jsonl: one JSON object a line: src, hyp, score (normalized, what "
                         "ranks hypotheses), confidence (0-1), flags (warnings: skipped, "
                         "truncated, cut, numbers, unsure), nbest")
    ap.add_argument("--warn-below", type=float, metavar="P",
                    help="outputs whose confidence is below P, in [0, 1), are flagged unsure, "
                         "and one line on stderr says how many (default: the checkpoint's "
                         "calibrated threshold, from seq2seq-calibrate; 0: none)")
    ap.add_argument("--plot-attention", metavar="FILE.png",
                    help="heat-maps of the first non-blank input sentence's attention; an "
                         "existing file is replaced only when it is such a plot")
    ap.add_argument("--force", action="store_true",
                    help="let --plot-attention replace an existing file that is not an "
                         "attention plot, or a document's output replace an existing file "
                         "(never the checkpoint or the input)")
    add_decoding_args(ap)
    return ap


# ------------------------------------------------------------ input / output
# Longest input line read (bytes): far beyond any sentence a model takes (max_positions
# tokens), small enough that an endless line (/dev/zero, a binary file) is refused, not
# read until memory runs out.
MAX_LINE_BYTES = 1 << 20


class _Lines:
    """Lines of a byte stream without their terminator. Only ``\\n`` ends a line (a stray
    ``\\r`` or other Unicode line break inside a line stays part of it, so line counts match
    ``wc -l``). Invalid UTF-8 becomes U+FFFD, and ``invalid`` counts those lines. A line of
    more than ``MAX_LINE_BYTES`` ends the lines, and ``too_long`` says so (the lines before
    it are still translated)."""

    def __init__(self, stream, source: str = "stdin") -> None:
        self.stream, self.source, self.invalid, self.lone_cr = stream, source, 0, 0
        self.too_long: str | None = None

    def _raw_lines(self) -> Iterator[bytes]:
        number = 0
        while raw := self.stream.readline(MAX_LINE_BYTES + 1):  # binary: split on b"\n" only
            number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                self.too_long = (f"{self.source}: line {number} is longer than "
                                 f"{MAX_LINE_BYTES:,} bytes (no line break: not a text file?); "
                                 "the lines before it were translated, none after")
                return
            yield raw

    def __iter__(self) -> Iterator[str]:
        for raw in self._raw_lines():
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode("utf-8", errors="replace")
                self.invalid += 1
            line = line[:-1].removesuffix("\r") if line.endswith("\n") else line
            if "\r" in line:  # old Mac line ends? They do not end lines here: count them
                self.lone_cr += 1
            yield line


def _open_input(args) -> Iterable[str]:
    if args.text:
        if args.input:
            raise ValueError("give sentences as arguments or --input, not both")
        return list(args.text)
    if args.input:
        from seq2seq.files import kind_of, not_text

        try:  # a binary file given by mistake: refused before the model loads, not translated
            problem = not_text(args.input) if kind_of(args.input) is None else None
            if problem:
                raise ValueError(f"--input {args.input}: looks like {problem}")
            return _Lines(open(args.input, "rb"), f"--input {args.input}")  # noqa: SIM115
        except OSError as e:
            raise ValueError(f"--input {args.input}: {e.strerror}") from None
    if sys.stdin is None:  # closed (`<&-`): no lines, as from /dev/null
        return []
    return _Lines(sys.stdin.buffer)


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(lines)
    while chunk := list(islice(it, size)):
        yield chunk


def _format(result, fmt: str) -> str:
    if fmt == "text":
        return one_line(result.hyp)
    return json.dumps({
        "src": result.src,
        "hyp": result.hyp,
        "score": result.score,
        "confidence": result.confidence,
        "flags": result.flags,
        "nbest": [{"hyp": h, "score": s} for h, s in result.nbest],
    }, ensure_ascii=False)


def check_plot_file(path: str, inputs: list[str | None], force: bool = False) -> None:
    """``--plot-attention FILE`` replaces an earlier attention plot (marked as such inside
    the PNG), nothing else unless ``--force``: never the checkpoint or the input, nor a
    folder, FIFO or device."""
    from seq2seq.files import kind_of
    from seq2seq.plotting import is_own_plot

    check_output_file(path, "--plot-attention")
    kind = kind_of(path)
    if kind == "missing":
        return
    if kind is not None:
        raise ValueError(f"--plot-attention {path}: is {kind}; give a file name")
    if any(i and Path(i).exists() and os.path.samefile(path, i) for i in inputs):
        raise ValueError(f"--plot-attention {path}: is an input of this command; choose "
                         "another file name")
    if not force and not is_own_plot(path):
        raise ValueError(f"--plot-attention {path}: exists and is not an attention plot written "
                         "by seq2seq-translate; choose another file name (or --force to replace it)")


def _plot_first(translator, lines: list[str], path: str, direction: dict) -> None:
    from seq2seq.plotting import plot_attention

    first = next((t for t in lines if t.strip()), None)
    if first is None:
        print(f"{PROG}: warning: no non-blank sentence to plot", file=sys.stderr)
        return
    r = translator.translate_full([first], need_attention=True, **direction)[0]
    if r.attention is None:  # the tokenizer reduced the sentence to nothing
        print(f"{PROG}: warning: nothing to plot for {first!r}", file=sys.stderr)
        return
    plot_attention(r.src_pieces, r.tgt_pieces, r.attention, path)


def check_warn_below(value: float | None) -> None:
    if value is not None and not 0.0 <= value < 1.0:  # NaN fails too
        raise ValueError(f"--warn-below {value}: must be a confidence in [0, 1), e.g. 0.5 "
                         "(0: no threshold)")


FLAG_WORDS = {
    "skipped": "the output has far fewer words than the input: parts of it may be untranslated",
    "truncated": "a sentence longer than the model takes was cut: its end is untranslated",
    "cut": "a clause longer than the model takes was cut at words and translated in pieces: "
           "it may not read as one",
}
DOCUMENT_FLAG_WORDS = {
    "numbers": "a number of the source is not in its translation (dropped, changed or written "
               "out): check them",
    "unsure": "confidence below the model's threshold: the input is probably unlike its "
              "training data and these translations may be wrong",
}
COUNTED = ("numbers", "unsure")  # frequent on some inputs: counted, then said once each


def _warn_flags(result, line: int) -> None:
    for flag in result.flags:
        if flag not in COUNTED:
            print(f"{PROG}: warning: line {line}: {FLAG_WORDS.get(flag, flag)}", file=sys.stderr)


def _which(flagged: list[int], lines: int, what: str) -> str:
    """``3 of 40 output lines WHAT (lines 1, 2, 7)``: the opening of a counted warning."""
    shown = ", ".join(map(str, flagged[:10])) + (", ..." if len(flagged) > 10 else "")
    return (f"{PROG}: warning: {len(flagged)} of {lines} output lines {what} "
            f"(line{'s' * (len(flagged) > 1)} {shown})")


def _warn_unsure(unsure: list[int], lines: int, translator, explicit: bool) -> None:
    """One line for all the outputs flagged "unsure": how many, which, and what it means."""
    if not unsure:
        return
    cal = translator.calibration
    why = "--warn-below" if explicit or not cal else (
        f"under which {cal['quantile']:.0%} of its {cal['split']} translations fell")
    print(f"{_which(unsure, lines, 'are unsure')}: confidence below "
          f"{translator.unsure_below:.3g} ({why}); the input is "
          "probably unlike the model's training data and these translations may be wrong "
          "(--output-format jsonl flags them \"unsure\"; --warn-below 0: no warning)",
          file=sys.stderr)


def _warn_numbers(flagged: list[int], lines: int) -> None:
    """One line for all the outputs flagged "numbers"."""
    if flagged:
        print(f"{_which(flagged, lines, 'lack a number of their input')}: a number was "
              "dropped, changed or written out; check them (--output-format jsonl flags them "
              "\"numbers\")", file=sys.stderr)


def _translate_document(args, decoding: DecodingConfig) -> None:
    """``--input`` a document: translated into a file of its kind (seq2seq.documents)."""
    from seq2seq.translation.translator import Translator

    if args.text:
        raise ValueError("give sentences as arguments or --input, not both")
    for flag, used in (("--output-format jsonl", args.output_format != "text"),
                       ("--plot-attention", args.plot_attention), ("--warn-below", args.warn_below)):
        if used:
            raise ValueError(f"{flag}: not for a document (--input {args.input}); a document "
                             "comes back as a document")
    documents.plan_output(args.input, args.output, args.target_lang, True)  # before the model loads
    translator = Translator.from_checkpoints(args.checkpoint, decoding=decoding, device=args.device,
                                            **load_from_args(args))
    note_compute_type(PROG, args.compute_type, translator.compute_type)
    direction = {"target_lang": args.target_lang, "source_lang": args.source_lang}
    translator.tag_for(**direction)
    target = args.target_lang or translator.pair[1]
    out = documents.plan_output(args.input, args.output, target, args.force)
    recording = Recording(documents.sentence_translator(translator, **direction))
    documents.translate_file(args.input, out, recording, args.source_lang or translator.pair[0],
                             target)
    print(f"{PROG}: wrote {out}", file=sys.stderr)
    warn_document_flags(recording.summary(), len(recording.sentences))


def warn_document_flags(summary: dict[str, dict], sentences: int) -> None:
    """One stderr line per flag a document's translations carry: how many of its sentences,
    the first few (number and opening words), and what the flag means."""
    for flag, entry in summary.items():
        shown = ", ".join(f'{e["sentence"]} "{_opening(e["source"])}"' for e in entry["first"])
        more = ", ..." if entry["count"] > len(entry["first"]) else ""
        print(f"{PROG}: warning: {entry['count']} of {sentences} sentences flagged {flag} "
              f"(sentence{'s' * (entry['count'] > 1)} {shown}{more}): "
              f"{DOCUMENT_FLAG_WORDS.get(flag, FLAG_WORDS.get(flag, flag))}", file=sys.stderr)


def _opening(sentence: str, chars: int = 40) -> str:
    words = " ".join(sentence.split())
    return words if len(words) <= chars else words[:chars].rstrip() + "..."


def run(args) -> None:
    # after argument errors: importing torch is slow
    from seq2seq.translation.translator import Translator

    decoding = decoding_from_args(args)
    check_warn_below(args.warn_below)
    check_device(args.device)
    if args.plot_attention:
        check_plot_file(args.plot_attention, [*args.checkpoint, args.input], args.force)
    if documents.is_document(args.input, args.output):
        return _translate_document(args, decoding)
    if args.output:
        raise ValueError(f"--output {args.output}: only for a document --input "
                         f"({', '.join(documents.SUFFIXES)}); text goes to stdout")
    lines = _open_input(args)
    translator = Translator.from_checkpoints(args.checkpoint, decoding=decoding, device=args.device,
                                            **load_from_args(args))
    note_compute_type(PROG, args.compute_type, translator.compute_type)
    direction = {"target_lang": args.target_lang, "source_lang": args.source_lang}
    translator.tag_for(**direction)  # an unknown direction: refused before any input is read
    if args.warn_below is not None:  # else the checkpoint's threshold, if it has one
        translator.unsure_below = args.warn_below or None
    notes = ignored_options(args, decoding)
    notes += ["--force has no effect without --plot-attention"] if args.force and \
        not args.plot_attention else []
    for note in notes:
        print(f"{PROG}: warning: {note}", file=sys.stderr)
    out = sys.stdout
    if isinstance(out, io.TextIOWrapper):  # UTF-8 whatever the locale: emoji must not crash
        out.reconfigure(encoding="utf-8", errors="replace")
    # Interactive stdin: answer each line as it comes rather than waiting for a chunk.
    interactive = not args.text and not args.input and sys.stdin is not None and sys.stdin.isatty()
    size = 1 if interactive else CHUNK_LINES
    line, unsure, numbers = 0, [], []
    for i, chunk in enumerate(_chunks(lines, size)):
        if i == 0 and args.plot_attention:
            _plot_first(translator, chunk, args.plot_attention, direction)
        for result in translator.translate_full(chunk, **direction):
            out.write(_format(result, args.output_format) + "\n")
            line += 1
            _warn_flags(result, line)
            unsure += [line] if "unsure" in result.flags else []
            numbers += [line] if "numbers" in result.flags else []
        out.flush()
    _warn_unsure(unsure, line, translator, args.warn_below is not None)
    _warn_numbers(numbers, line)
    if getattr(lines, "too_long", None):
        raise ValueError(lines.too_long)
    if getattr(lines, "invalid", 0):
        print(f"{PROG}: warning: {lines.invalid} input line(s) were not valid UTF-8; their "
              "invalid bytes were replaced by U+FFFD", file=sys.stderr)
    if getattr(lines, "lone_cr", 0):
        print(f"{PROG}: warning: {lines.lone_cr} input line(s) hold a carriage return (CR) not "
              "followed by LF; only LF ends a line, so each was translated as one line (for "
              "CR-only line ends, convert first: tr '\\r' '\\n')", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    run_command(PROG, run, build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
