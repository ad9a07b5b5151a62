"""``seq2seq-evaluate``: translate a test set with one or more checkpoints and score it.

    seq2seq-evaluate -m run.ckpt --split test_2016_flickr --beam 5 --json results/run.json
    seq2seq-evaluate -m a.ckpt b.ckpt --src-file src.de --ref-file ref.en
    seq2seq-evaluate -m base.ckpt -m new.ckpt --baseline base.ckpt --split test_2016_flickr
    seq2seq-evaluate -m a.ckpt -m b.ckpt --ensemble --split val
    seq2seq-evaluate -m run.ckpt --source-lang de --target-lang en --split val --limit 100
    seq2seq-evaluate -m multi.ckpt --all-directions --split val --limit 100

Test set: the named Multi30k (``--test-set multi30k``, the default) split ``--split``, read
from ``{data-dir}/{split}.{lang}.gz`` in the checkpoint's own direction (without --data-dir:
the shipped copy, from any folder: ``$SEQ2SEQ_DATA/multi30k``, else the repository's
``data/multi30k``, else ``./data/multi30k``); or any parallel
text given as ``--src-file`` + ``--ref-file`` (plain or .gz, one sentence a line).
``--source-lang``/``--target-lang`` (or ``--src-lang``/``--tgt-lang``) ask for a direction:
a checkpoint trained for another pair is refused; for a multilingual model they choose the
direction it translates in. ``--all-directions`` evaluates every direction of each model
on the named test set where its files exist (one row each; the directions without test
files are named). Source and reference files must have the same number of lines.

Scores (sacreBLEU, one reference): BLEU and chrF on cased, detokenized text, the numbers
to report, with their signatures; and lc-tok BLEU (lowercased, 13a-tokenized), labelled as
such, only for comparison with papers that score that way (the Multi30k tradition).

Systems: each -m model (-m A B, or -m A -m B), or with --ensemble all of them as one.
--baseline (one of them) compares every other system with it on the same sentences by
sacreBLEU's paired bootstrap resampling and approximate randomization tests: BLEU and chrF,
each with its 95% confidence interval and the p-value of its difference from the baseline.

Output: one table row per system on stdout, and with --baseline the paired tests' table;
the hypotheses of every system in a file (one line per source line) under --hyp-dir; with
--json FILE, everything as JSON (a list, one record per system and test set). A progress
bar on stderr when it is a terminal. Errors (bad files, unknown test set, wrong language
pair, a --baseline that is not one of the -m models): one line, exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from seq2seq.checkpoint import load_checkpoint
from seq2seq.cli.common import (
    Parser,
    add_decoding_args,
    add_direction_args,
    add_model_argument,
    check_device,
    check_output_file,
    check_replace,
    decoding_from_args,
    ignored_options,
    load_from_args,
    note_compute_type,
    one_line,
    run_command,
)
from seq2seq.cli.evaluate_compare import (
    add_compare_args,
    baseline_of,
    check_comparable,
    compare,
    systems_of,
)
from seq2seq.cli.evaluate_report import LC_TOK_NOTE, print_comparison, print_table
from seq2seq.cli.evaluate_sets import TestSet, model_pairs, test_sets_of
from seq2seq.config import DecodingConfig, LoadConfig
from seq2seq.config.decoding import load_config

PROG = "seq2seq-evaluate"
TEST_SETS = ("multi30k",)
# Copies of data.MULTI30K_LANGS and the held-out part of data.MULTI30K_SPLITS (a test checks
# they agree): importing ``data`` pulls in datasets + lightning, seconds before an argument
# error could be reported.
MULTI30K_LANGS = ("en", "de", "fr", "cs")
EVAL_SPLITS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "val")
DEFAULT_SPLIT = "test_2016_flickr"
DEFAULT_HYP_DIR = "hyps"


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog=PROG, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(ap, nargs="+", append=True,
                       help="one or more checkpoints (-m A B, or -m A -m B; several: one "
                            "comparison table, or with --ensemble one system)")
    g = ap.add_argument_group("test set")
    g.add_argument("--test-set", metavar="NAME",
                   help=f"named test set, one of {list(TEST_SETS)} (default: multi30k)")
    g.add_argument("--split", help=f"its split, one of {list(EVAL_SPLITS)} (default: {DEFAULT_SPLIT})")
    g.add_argument("--data-dir", metavar="DIR",
                   help="where the named test set's {split}.{lang}.gz files are (default: the "
                        "shipped copy, found from any folder: $SEQ2SEQ_DATA/multi30k, else the "
                        "repository's data/multi30k, else ./data/multi30k)")
    add_direction_args(g, extra=f"; also picks the test set's files (Multi30k: {list(MULTI30K_LANGS)})")
    g.add_argument("--all-directions", action="store_true",
                   help="evaluate every direction of each model on the named test set where "
                        "its files exist (one row each; names those without test files)")
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
    add_compare_args(ap, _positive_int)
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
        for side in ("source", "target"):
            lang = getattr(args, f"{side}_lang")
            if lang is not None and lang not in MULTI30K_LANGS:
                raise ValueError(f"--{side}-lang: {args.test_set} has no language {lang!r}; "
                                 f"choices: {list(MULTI30K_LANGS)}")
    if args.source_lang and args.source_lang == args.target_lang:
        raise ValueError(f"--source-lang and --target-lang are both {args.source_lang!r}")
    if args.all_directions and (args.src_file or args.source_lang or args.target_lang):
        raise ValueError("--all-directions evaluates every direction on a named test set: give "
                         "no --src-file, --source-lang or --target-lang with it")


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
def evaluate_checkpoint(translator, path: str, test: TestSet, hyp_file: Path, args,
                        pair: tuple[str | None, str | None] = (None, None)
                        ) -> tuple[dict[str, Any], list[str]]:
    """Translate ``test`` with ``translator`` (of ``path``: a checkpoint, or an ensemble's
    "a + b") in direction ``pair``, write the hypotheses, score them: (record, hypotheses)."""
    from seq2seq.metrics import all_scores

    decoding = translator.decoding
    start = time.perf_counter()
    progress = not args.quiet and sys.stderr.isatty()
    # One line per source line, whatever the detokenizer produced; scored as written.
    hyps = [one_line(h) for h in translator.translate(test.src, progress=progress,
                                                       source_lang=pair[0], target_lang=pair[1])]
    seconds = time.perf_counter() - start
    hyp_file.write_text("".join(h + "\n" for h in hyps), encoding="utf-8", newline="\n")
    scores = all_scores(hyps, test.ref)
    record = {
        "checkpoint": str(path),
        "test_set": test.label,
        "direction": "-".join(pair) if None not in pair else None,
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
    return record, hyps


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


def search_name(decoding: DecodingConfig, load: LoadConfig | None = None) -> str:
    """For file names: greedy and beam outputs of one model and test set must not collide
    (nor those of other compute types, or with a shortlist)."""
    load = load or LoadConfig()
    name = f"beam{decoding.beam_size}" if decoding.method == "beam" else decoding.method
    name = name if load.compute_type == "float32" else f"{name}.{load.compute_type}"
    return f"{name}.shortlist" if load.shortlist else name


def make_plan(args, systems: list[tuple[str, ...]], decoding: DecodingConfig, hyp_dir: Path):
    """``(plan, untested)``: (system, test set, hypothesis file, direction) of each evaluation,
    and the directions of each system that the named test set has no files for."""
    plan, pairs, untested = [], {}, {}
    for system, paths in enumerate(systems):  # an ensemble's members: each checked
        pairs[system] = [model_pairs(p, load_checkpoint(p)["seq2seq"], args) for p in paths][0]
    search = search_name(decoding, load_config(**load_from_args(args)))
    test_sets, missing = test_sets_of(args, dict.fromkeys(p for ps in pairs.values() for p in ps))
    names = file_names(args.checkpoint)
    if args.ensemble:  # one file name of its members' names: a.ckpt + b.ckpt -> a+b
        names = ["+".join(names)]
    for system, name in enumerate(names):
        untested[system] = [f"{a}-{b}" for a, b in pairs[system] if f"{a}-{b}" in missing]
        for pair in (p for p in pairs[system] if p in test_sets):
            test = test_sets[pair]
            plan.append((system, test, hyp_dir / f"{name}.{test.key}.{search}.hyp", pair))
    return plan, untested


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    check_args(args)
    decoding = decoding_from_args(args)
    check_device(args.device)
    # Everything that can be refused is refused before the first (long) decoding run.
    systems = systems_of(args)
    baseline = baseline_of(args, systems)
    labels = [" + ".join(map(str, paths)) for paths in systems]  # an ensemble: its members
    hyp_dir = Path(args.hyp_dir or (Path(args.json).parent if args.json else DEFAULT_HYP_DIR))
    plan, untested = make_plan(args, systems, decoding, hyp_dir)
    if baseline is not None:
        check_comparable(plan, baseline, labels, args)
    check_outputs(args, [p[:3] for p in plan], hyp_dir)
    for note in ignored_options(args, decoding):
        print(f"{PROG}: warning: {note}", file=sys.stderr)

    from seq2seq.translation.translator import Translator

    runs, translators = [], {}
    for i, (system, test, hyp_file, pair) in enumerate(plan, 1):
        if not args.quiet:
            print(f"[{i}/{len(plan)}] {labels[system]}: {test.label}, {len(test.src)} sentences",
                  file=sys.stderr, flush=True)
        if system not in translators:  # once per system, whatever the number of directions
            translators[system] = Translator.from_checkpoints(systems[system], decoding, args.device,
                                                              **load_from_args(args))
            note_compute_type(PROG, args.compute_type, translators[system].compute_type)
        r, hyps = evaluate_checkpoint(translators[system], labels[system], test, hyp_file, args, pair)
        if len(systems[system]) > 1:
            r["ensemble"] = list(map(str, systems[system]))
        r["compute_type"] = translators[system].compute_type
        r["shortlist"] = translators[system].shortlist
        if args.all_directions:
            r["directions_without_test_files"] = untested[system]
        if not args.quiet:
            print(f"      BLEU {r['BLEU']['score']:.2f}, chrF {r['chrF']['score']:.2f} "
                  f"({r['translate_seconds']:.1f} s) -> {r['hypotheses']}", file=sys.stderr, flush=True)
        runs.append((system, test, hyps, r))
    results = [r for *_, r in runs]
    if baseline is not None:
        compare(runs, baseline, args)
    print_table(results)
    for system, names in untested.items():
        if names:
            print(f"no test files in {args.test_set}/{args.split} for {labels[system]}: {', '.join(names)}")
    print_comparison(results)
    if args.json:
        text = json.dumps(results, indent=1, ensure_ascii=False) + "\n"
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text, encoding="utf-8")
    return results


def main(argv: list[str] | None = None) -> None:
    run_command(PROG, run, build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
