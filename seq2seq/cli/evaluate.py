"""``seq2seq-evaluate``: translate a test set with one or more checkpoints and score it.

    seq2seq-evaluate -m run.ckpt --split test_2016_flickr --beam 5 --json results/run.json
    seq2seq-evaluate -m a.ckpt b.ckpt --src-file src.de --ref-file ref.en
    seq2seq-evaluate -m run.ckpt --src-lang de --tgt-lang en --split val --limit 100

Test set: the named Multi30k (``--test-set multi30k``, the default) split ``--split``, read
from ``{data-dir}/{split}.{lang}.gz`` in the checkpoint's own direction (without --data-dir:
the shipped copy, from any folder: ``$SEQ2SEQ_DATA/multi30k``, else the repository's
``data/multi30k``, else ``./data/multi30k``); or any parallel
text given as ``--src-file`` + ``--ref-file`` (plain or .gz, one sentence a line).
``--src-lang``/``--tgt-lang`` ask for a direction: a checkpoint trained for another pair
is refused. Source and reference files must have the same number of lines.

Scores (sacreBLEU, one reference): BLEU and chrF on cased, detokenized text, the numbers
to report, with their signatures; and lc-tok BLEU (lowercased, 13a-tokenized), labelled as
such, only for comparison with papers that score that way (the Multi30k tradition).

Output: one table row per checkpoint on stdout; the hypotheses of every checkpoint in a
file (one line per source line) under --hyp-dir; with --json FILE, everything as JSON (a
list, one record per checkpoint). A progress bar on stderr when it is a terminal.
Errors (bad files, unknown test set, wrong language pair): one line, exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seq2seq.checkpoint import load_checkpoint
from seq2seq.cli.common import (
    Parser,
    add_model_argument,
    check_device,
    check_output_file,
    check_replace,
    run_command,
)
from seq2seq.cli.translate import (
    _one_line,
    add_decoding_args,
    decoding_from_args,
    ignored_options,
)
from seq2seq.config import DecodingConfig

PROG = "seq2seq-evaluate"
TEST_SETS = ("multi30k",)
# Copies of data.MULTI30K_LANGS and the held-out part of data.MULTI30K_SPLITS (a test checks
# they agree): importing ``data`` pulls in datasets + lightning, seconds before an argument
# error could be reported.
MULTI30K_LANGS = ("en", "de", "fr", "cs")
EVAL_SPLITS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "val")
DEFAULT_SPLIT = "test_2016_flickr"
DEFAULT_HYP_DIR = "hyps"
LC_TOK_NOTE = "lowercased, 13a-tokenized BLEU: only for comparison with papers that score that way"


@dataclass
class TestSet:
    label: str  # for people: "multi30k/val de-en", "src.de", "... [first 100]"
    key: str  # for file names: "multi30k.val.de-en", "src.de", "....first100"
    src_path: Path
    ref_path: Path
    src: list[str]
    ref: list[str]


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog=PROG, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(ap, nargs="+", help="one or more checkpoints (several: one comparison table)")
    g = ap.add_argument_group("test set")
    g.add_argument("--test-set", metavar="NAME",
                   help=f"named test set, one of {list(TEST_SETS)} (default: multi30k)")
    g.add_argument("--split", help=f"its split, one of {list(EVAL_SPLITS)} (default: {DEFAULT_SPLIT})")
    g.add_argument("--data-dir", metavar="DIR",
                   help="where the named test set's {split}.{lang}.gz files are (default: the "
                        "shipped copy, found from any folder: $SEQ2SEQ_DATA/multi30k, else the "
                        "repository's data/multi30k, else ./data/multi30k)")
    g.add_argument("--src-lang", metavar="LANG",
                   help="source language asked for (default: the checkpoint's); "
                        f"a checkpoint for another pair is refused; Multi30k: {list(MULTI30K_LANGS)}")
    g.add_argument("--tgt-lang", metavar="LANG", help="target language asked for (same rules)")
    g.add_argument("--src-file", metavar="FILE", help="source text (with --ref-file) instead of a named test set")
    g.add_argument("--ref-file", metavar="FILE", help="reference text, line for line with --src-file")
    g.add_argument("--limit", type=_positive_int, metavar="N",
                   help="score only the first N sentences (quick checks: the label and the "
                        "file names say so; not comparable with whole-test-set scores)")
    o = ap.add_argument_group("output")
    o.add_argument("--json", metavar="FILE", help="write all results as JSON here")
    o.add_argument("--hyp-dir", metavar="DIR",
                   help="folder for the hypotheses, always written, one file per checkpoint and "
                        "test set, CKPT.TESTSET.hyp (default: the --json file's folder, else "
                        f"./{DEFAULT_HYP_DIR})")
    o.add_argument("--force", action="store_true",
                   help="replace hypothesis and --json files of an earlier evaluation; without "
                        "it, and for any other file of that name, they are refused before any "
                        "decoding")
    o.add_argument("--quiet", action="store_true", help="no progress bar or progress lines on stderr")
    add_decoding_args(ap)
    return ap


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


# ------------------------------------------------------------ checks before any decoding
def check_args(args: argparse.Namespace) -> None:
    """One-line ``ValueError`` naming the option for anything wrong with the test-set options."""
    if args.src_file or args.ref_file:
        if not (args.src_file and args.ref_file):
            raise ValueError("--src-file and --ref-file go together")
        if args.test_set or args.split:
            raise ValueError("give --src-file/--ref-file or --test-set/--split, not both")
    else:
        args.test_set = args.test_set or TEST_SETS[0]
        args.split = args.split or DEFAULT_SPLIT
        if args.test_set not in TEST_SETS:
            raise ValueError(f"--test-set: unknown test set {args.test_set!r}; choices: "
                             f"{list(TEST_SETS)} (or --src-file/--ref-file)")
        if args.split not in EVAL_SPLITS:
            raise ValueError(f"--split: unknown {args.test_set} split {args.split!r}; "
                             f"choices: {list(EVAL_SPLITS)}")
        for side in ("src", "tgt"):
            lang = getattr(args, f"{side}_lang")
            if lang is not None and lang not in MULTI30K_LANGS:
                raise ValueError(f"--{side}-lang: {args.test_set} has no language {lang!r}; "
                                 f"choices: {list(MULTI30K_LANGS)}")
    if args.src_lang and args.src_lang == args.tgt_lang:
        raise ValueError(f"--src-lang and --tgt-lang are both {args.src_lang!r}")


def language_pair(path: str, meta: dict[str, Any], args) -> tuple[str | None, str | None]:
    """The direction to evaluate ``path`` in: the one asked for, else the checkpoint's.
    Refuses a checkpoint trained for another pair than the one asked for."""
    own = (meta.get("src_lang"), meta.get("tgt_lang"))
    asked = (args.src_lang or own[0], args.tgt_lang or own[1])
    if None not in own and asked != own:
        if args.src_lang and args.tgt_lang:
            wanted = f"the test set asks for {asked[0]}->{asked[1]}"
        else:
            wanted = f"--{'src' if args.src_lang else 'tgt'}-lang {args.src_lang or args.tgt_lang} was asked for"
        raise ValueError(f"checkpoint {path} translates {own[0]}->{own[1]}, but {wanted}")
    return asked


def load_test_set(args, src_lang: str | None, tgt_lang: str | None) -> TestSet:
    """Source and reference lines (the first ``--limit``); refuses files that do not match
    line for line, and empty ones."""
    from seq2seq.data.sources import read_lines, resolve_corpus

    pair = f"{src_lang}-{tgt_lang}" if src_lang and tgt_lang else ""
    if args.src_file:
        src_path, ref_path = Path(args.src_file), Path(args.ref_file)
        label = f"{src_path.name} {pair}".strip()
        key = src_path.name
    else:
        if not pair:
            raise ValueError("the checkpoint does not record its language pair: "
                             "give --src-lang and --tgt-lang")
        from seq2seq.config import DataConfig

        cfg = DataConfig(corpus=args.test_set, data_dir=args.data_dir, src_lang=src_lang, tgt_lang=tgt_lang)
        src_path, ref_path = resolve_corpus(cfg, args.split)
        label = f"{args.test_set}/{args.split} {pair}"
        key = f"{args.test_set}.{args.split}.{pair}"
    src, ref = read_lines(src_path), read_lines(ref_path)
    if len(src) != len(ref):
        raise ValueError(f"{src_path} has {len(src)} lines but {ref_path} has {len(ref)}: "
                         "source and reference must match line for line")
    if not src:
        raise ValueError(f"{src_path} is empty: nothing to evaluate")
    if args.limit and args.limit < len(src):
        src, ref = src[: args.limit], ref[: args.limit]
        label, key = f"{label} [first {args.limit}]", f"{key}.first{args.limit}"
    return TestSet(label, key, src_path, ref_path, src, ref)


def file_names(paths: list[str]) -> list[str]:
    """Names that tell the checkpoints apart in file names: the stem, with as many parent
    folders as it takes (``runs/a/last.ckpt``, ``runs/b/last.ckpt`` -> ``a_last``, ``b_last``)."""
    # abspath, not resolve: a symlink (last.ckpt -> step...) keeps the name it was given as
    parts = [Path(os.path.abspath(p)).with_suffix("").parts[1:] for p in paths]  # [1:]: not "/"
    for k in range(1, max(len(x) for x in parts) + 1):
        names = ["_".join(x[-k:]) for x in parts]
        if len(set(names)) == len(names):
            return names
    return [f"{x[-1]}-{i + 1}" for i, x in enumerate(parts)]  # the same file more than once


# ------------------------------------------------------------ decoding and scoring
def evaluate_checkpoint(path: str, test: TestSet, decoding: DecodingConfig, hyp_file: Path,
                        args) -> dict[str, Any]:
    """Translate ``test`` with ``path``, write the hypotheses, score them."""
    from seq2seq.decoding.translator import Translator
    from seq2seq.metrics import all_scores

    translator = Translator.from_checkpoint(path, decoding=decoding, device=args.device)
    start = time.perf_counter()
    progress = not args.quiet and sys.stderr.isatty()
    # One line per source line, whatever the detokenizer produced; scored as written.
    hyps = [_one_line(h) for h in translator.translate(test.src, progress=progress)]
    seconds = time.perf_counter() - start
    hyp_file.write_text("".join(h + "\n" for h in hyps), encoding="utf-8", newline="\n")
    scores = all_scores(hyps, test.ref)
    record = {
        "checkpoint": str(path),
        "test_set": test.label,
        "source": str(test.src_path),
        "reference": str(test.ref_path),
        "sentences": len(test.src),
        "hypotheses": str(hyp_file),
        "decoding": dataclasses.asdict(decoding),
        "translate_seconds": round(seconds, 2),
    }
    for name, s in scores.items():
        record[name] = {"score": round(s.score, 2), "signature": s.signature}
    record["BLEU-lc-tok"]["note"] = LC_TOK_NOTE
    return record


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3):]


def print_table(results: list[dict[str, Any]], out=None) -> None:
    out = out or sys.stdout
    rows = [(_cut(r["checkpoint"], 48), _cut(r["test_set"], 48), str(r["sentences"]),
             f"{r['BLEU']['score']:.2f}", f"{r['chrF']['score']:.2f}",
             f"{r['BLEU-lc-tok']['score']:.2f}") for r in results]
    head = ("checkpoint", "test set", "sents", "BLEU", "chrF", "lc-tok BLEU*")
    widths = [max(len(c) for c in col) for col in zip(head, *rows)]
    for row in (head, *rows):
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip(), file=out)
    first = results[0]
    print(f"BLEU signature:         {first['BLEU']['signature']}  (cased, detokenized: report this)", file=out)
    print(f"chrF signature:         {first['chrF']['signature']}", file=out)
    print(f"lc-tok BLEU* signature: {first['BLEU-lc-tok']['signature']}", file=out)
    print(f"* {LC_TOK_NOTE}", file=out)
    for r in results:
        print(f"hypotheses: {r['hypotheses']}", file=out)


def check_outputs(args, plan: list[tuple[str, TestSet, Path]], hyp_dir: Path) -> None:
    """Before any decoding: the hypothesis folder and ``--json`` can be written, and no
    output would replace an input (a checkpoint, a source or a reference file)."""
    from seq2seq.shipped import find_model

    inputs = {find_model(p).resolve() for p in args.checkpoint}  # a shipped name: its file
    inputs |= {f.resolve() for _, t, _ in plan for f in (t.src_path, t.ref_path)}
    if args.json:
        check_output_file(args.json, "--json")
    if hyp_dir.exists() and not hyp_dir.is_dir():
        raise ValueError(f"--hyp-dir {hyp_dir}: is a file; give a folder")
    try:
        hyp_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--hyp-dir {hyp_dir}: cannot create the folder ({e.strerror})") from None
    if not os.access(hyp_dir, os.W_OK | os.X_OK):
        raise ValueError(f"--hyp-dir {hyp_dir}: the folder is not writable")
    outputs = [("--json", Path(args.json), "a results file of seq2seq-evaluate --json",
                is_results_json)] if args.json else []
    outputs += [("--hyp-dir", hyp, "a hypothesis file (UTF-8 text)", is_text_file)
                for _, _, hyp in plan]
    written: dict[Path, str] = {}
    for option, out, kind, is_kind in outputs:
        if out.resolve() in inputs:
            raise ValueError(f"{option}: writing {out} would replace an input file; "
                             "choose another output")
        if out.resolve() in written:  # e.g. --json naming the hypothesis file it writes
            raise ValueError(f"{option} {out}: is also the {written[out.resolve()]} output of "
                             "this evaluation; choose another name")
        written[out.resolve()] = option
        check_replace(out, option, args.force, kind, is_kind)


def is_results_json(path: Path) -> bool:
    """Whether ``path`` is what ``--json`` writes: a JSON list of result records."""
    try:
        with open(path, "rb") as f:
            if f.read(1) != b"[":  # not JSON of ours: not read any further (a checkpoint?)
                return False
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return False
    return isinstance(records, list) and bool(records) and all(
        isinstance(r, dict) and {"checkpoint", "BLEU", "hypotheses"} <= set(r) for r in records)


def is_text_file(path: Path, probe: int = 1 << 16) -> bool:
    """Whether ``path`` starts as UTF-8 text (no NUL byte), as a hypothesis file does."""
    import codecs

    try:
        with open(path, "rb") as f:
            head = f.read(probe)
        codecs.getincrementaldecoder("utf-8")().decode(head)  # a cut last character is fine
    except (OSError, UnicodeDecodeError):
        return False
    return b"\0" not in head


def search_name(decoding: DecodingConfig) -> str:
    """For file names: greedy and beam outputs of one model and test set must not collide."""
    return f"beam{decoding.beam_size}" if decoding.method == "beam" else decoding.method


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    check_args(args)
    decoding = decoding_from_args(args)
    check_device(args.device)
    # Everything that can be refused is refused before the first (long) decoding run.
    plan, test_sets = [], {}
    hyp_dir = Path(args.hyp_dir or (Path(args.json).parent if args.json else DEFAULT_HYP_DIR))
    for path, name in zip(args.checkpoint, file_names(args.checkpoint)):
        meta = load_checkpoint(path)["seq2seq"]
        pair = language_pair(path, meta, args)
        if pair not in test_sets:
            test_sets[pair] = load_test_set(args, *pair)
        test = test_sets[pair]
        plan.append((path, test, hyp_dir / f"{name}.{test.key}.{search_name(decoding)}.hyp"))
    check_outputs(args, plan, hyp_dir)
    for note in ignored_options(args, decoding):
        print(f"{PROG}: warning: {note}", file=sys.stderr)

    results = []
    for i, (path, test, hyp_file) in enumerate(plan, 1):
        if not args.quiet:
            print(f"[{i}/{len(plan)}] {path}: {test.label}, {len(test.src)} sentences",
                  file=sys.stderr, flush=True)
        r = evaluate_checkpoint(path, test, decoding, hyp_file, args)
        if not args.quiet:
            print(f"      BLEU {r['BLEU']['score']:.2f}, chrF {r['chrF']['score']:.2f} "
                  f"({r['translate_seconds']:.1f} s) -> {r['hypotheses']}", file=sys.stderr, flush=True)
        results.append(r)
    print_table(results)
    if args.json:
        text = json.dumps(results, indent=1, ensure_ascii=False) + "\n"
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text, encoding="utf-8")
    return results


def main(argv: list[str] | None = None) -> None:
    run_command(PROG, run, build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
