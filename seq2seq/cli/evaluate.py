"""``seq2seq-evaluate``: translate a test set with one or more checkpoints and score it.

    seq2seq-evaluate -c run.ckpt --test-set multi30k --split test_2016_flickr --beam 5 --json out.json
    seq2seq-evaluate -c a.ckpt b.ckpt --src-file src.txt --ref-file ref.txt

Prints sacreBLEU BLEU and chrF on cased detokenized text (with signatures) and, labelled as
such, lowercased 13a-tokenized BLEU for comparison with papers that score that way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ..checkpoint import CheckpointError, load_checkpoint
from ..config import DecodingConfig
from ..data import MULTI30K_SPLITS, read_lines, resolve_corpus
from ..metrics import all_scores
from ..translate import Translator
from .translate import add_decoding_args, decoding_from_args


def load_test_set(args, src_lang: str, tgt_lang: str) -> tuple[list[str], list[str], str]:
    """Source and reference lines plus a label; refuses mismatched line counts."""
    if args.src_file or args.ref_file:
        if not (args.src_file and args.ref_file):
            raise ValueError("--src-file and --ref-file go together")
        src_path, ref_path = args.src_file, args.ref_file
        label = Path(src_path).name
    else:
        from ..config import DataConfig

        cfg = DataConfig(corpus=args.test_set, data_dir=args.data_dir, src_lang=src_lang, tgt_lang=tgt_lang)
        src_path, ref_path = resolve_corpus(cfg, args.split)
        label = f"{args.test_set}/{args.split} {src_lang}-{tgt_lang}"
    src, ref = read_lines(src_path), read_lines(ref_path)
    if len(src) != len(ref):
        raise ValueError(f"{src_path} has {len(src)} lines but {ref_path} has {len(ref)}")
    return src, ref, label


def evaluate_checkpoint(path: str, args, decoding: DecodingConfig) -> dict:
    meta = load_checkpoint(path)["seq2seq"]
    if args.src_lang and (args.src_lang, args.tgt_lang) != (meta["src_lang"], meta["tgt_lang"]):
        raise ValueError(
            f"checkpoint {path} translates {meta['src_lang']}->{meta['tgt_lang']}, "
            f"but {args.src_lang}->{args.tgt_lang} was asked"
        )
    src, ref, label = load_test_set(args, meta["src_lang"], meta["tgt_lang"])
    translator = Translator.from_checkpoint(path, decoding=decoding, device=args.device)
    start = time.perf_counter()
    hyps = translator.translate(src, progress=not args.quiet)
    seconds = time.perf_counter() - start
    if len(hyps) != len(ref):
        raise ValueError(f"{len(hyps)} hypotheses for {len(ref)} references")
    scores = all_scores(hyps, ref)
    if args.hyp_dir:
        out = Path(args.hyp_dir) / f"{Path(path).stem}.{label.split()[0].replace('/', '.')}.hyp"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    return {
        "checkpoint": str(path),
        "test_set": label,
        "sentences": len(src),
        "decoding": {"method": decoding.method, "beam_size": decoding.beam_size, "alpha": decoding.alpha},
        "translate_seconds": round(seconds, 2),
        **{name: {"score": round(s.score, 2), "signature": s.signature} for name, s in scores.items()},
    }


def print_table(results: list[dict]) -> None:
    print(f"{'checkpoint':50s} {'test set':32s} {'BLEU':>6s} {'chrF':>6s} {'lc-tok BLEU':>11s}")
    for r in results:
        print(
            f"{r['checkpoint'][-50:]:50s} {r['test_set'][:32]:32s} {r['BLEU']['score']:6.2f} "
            f"{r['chrF']['score']:6.2f} {r['BLEU-lc-tok']['score']:11.2f}"
        )
    if results:
        print(f"BLEU signature:        {results[0]['BLEU']['signature']}")
        print(f"chrF signature:        {results[0]['chrF']['signature']}")
        print(f"lc-tok BLEU signature: {results[0]['BLEU-lc-tok']['signature']} (lowercased, for paper comparison)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="seq2seq-evaluate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--checkpoint", nargs="+", required=True, help="one or more checkpoints")
    ap.add_argument("--test-set", default="multi30k", help="named test set (multi30k)")
    ap.add_argument("--split", default="test_2016_flickr", help=f"one of {list(MULTI30K_SPLITS)}")
    ap.add_argument("--data-dir", default="data/multi30k")
    ap.add_argument("--src-lang", help="refuse checkpoints trained for another pair")
    ap.add_argument("--tgt-lang")
    ap.add_argument("--src-file", help="plain-text source (with --ref-file) instead of a named set")
    ap.add_argument("--ref-file")
    ap.add_argument("--json", help="write all results as JSON here")
    ap.add_argument("--hyp-dir", default=None, help="write hypotheses here (one file per checkpoint)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    add_decoding_args(ap)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        decoding = decoding_from_args(args)
        results = [evaluate_checkpoint(p, args, decoding) for p in args.checkpoint]
    except (CheckpointError, ValueError, OSError) as e:
        print(f"seq2seq-evaluate: error: {e}", file=sys.stderr)
        sys.exit(2)
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
