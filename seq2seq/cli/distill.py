"""``seq2seq-distill``: a teacher (or an ensemble) translates a corpus's source side; the
translations are a training corpus for a smaller, faster student (sequence-level knowledge
distillation, Kim & Rush 2016).

    seq2seq-distill -m multi30k_en_de_tiny --beam 5 -o runs/distill/en_de
    seq2seq-distill -m a.ckpt -m b.ckpt --beam 5 --source train.en -o runs/distill/ens
    seq2seq-train fit --config configs/multi30k_en_de_tiny.yaml \\
        --config configs/distill/student_6_1.yaml --config configs/distill/en_de_distilled.yaml

By default the source is the shipped Multi30k training split in the teacher's source
language. The work is written shard by shard: run the same command again after a stop and
it continues where it was (it refuses a folder started with other teachers, source or
settings). The result, ``OUT/train.<src>.gz`` and ``OUT/train.<tgt>.gz`` with
``OUT/provenance.json`` (teachers' sha256, search settings, the source's sha256), is an
ordinary pair of text files for ``data.data.train_src``/``train_tgt``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from seq2seq.cli.common import (
    Parser,
    add_decoding_args,
    add_direction_args,
    add_model_argument,
    decoding_from_args,
    load_from_args,
    run_command,
)

PROG = "seq2seq-distill"


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(ap, append=True, help="the teacher (repeated, -m A -m B: an ensemble): "
                       "a checkpoint file (.ckpt)")
    ap.add_argument("-o", "--output", required=True, metavar="DIR",
                    help="the distillation folder (new, or one this command started: continued)")
    ap.add_argument("--source", metavar="FILE",
                    help="sentences to translate, one a line, plain or gzip (default: the "
                         "shipped Multi30k train split in the teacher's source language)")
    ap.add_argument("--shard-lines", type=int, default=2000, metavar="N",
                    help="sentences per shard, the unit of work a stopped run keeps (default 2000)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_direction_args(ap, extra=" (a multilingual teacher's direction)")
    add_decoding_args(ap)
    return ap


def _default_source(translator, source_lang: str | None) -> str:
    from seq2seq.shipped import multi30k_dir

    lang = source_lang or translator.pair[0]
    if lang is None:
        raise ValueError("--source: this teacher does not say its source language; give "
                         "--source FILE or --source-lang")
    name = f"train.{lang}.gz"
    return str(multi30k_dir([name]) / name)


def run(args) -> None:
    from seq2seq.config.decoding import load_config
    from seq2seq.distill import DistillPlan, distill
    from seq2seq.shipped import find_model
    from seq2seq.translation.translator import Translator  # after argument errors (torch is slow)

    decoding, load = decoding_from_args(args), load_config(**load_from_args(args))
    teachers = tuple(str(find_model(p)) for p in args.checkpoint)
    translator = Translator.from_checkpoints(teachers, decoding=decoding, device=args.device,
                                             **dataclasses.asdict(load))
    translator.tag_for(args.target_lang, args.source_lang)  # an unknown direction: refused now
    source = args.source or _default_source(translator, args.source_lang)
    plan = DistillPlan(teachers, source, args.output, decoding, args.shard_lines,
                       args.target_lang, args.source_lang, load)
    summary = distill(plan, progress=not args.no_progress, translator=translator)
    corpus = summary["corpus"]
    print(json.dumps({"pairs": corpus["pairs"], "train_src": corpus["src"],
                      "train_tgt": corpus["tgt"]}), file=sys.stdout)


def main(argv: list[str] | None = None) -> None:
    run_command(PROG, run, build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
