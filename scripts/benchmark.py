"""Speed of decoding, training and attention against Hugging Face Marian and CTranslate2.

    python scripts/benchmark.py -m CKPT [--limit N] [--repeats 3] [--threads T]
                                [--sections decode,train,attention[,profile]] [--json out.json]
    python scripts/benchmark.py --opus-size [--limit 50 ...]

``--opus-size`` (instead of ``-m``): ours against CTranslate2 at OPUS-MT's size, on any CPU
with one command: a random-weight model of that shape, built once and cached
(``scripts/bench/opus.py``), decoded with docs/speed.md's settings (any option given wins),
then output tokens/s per engine and search in one table.

Prints one table per section (medians of --repeats timed runs after a warm-up, the thread
count, ratios with PASS/FAIL against the targets) and the 1-minute load average before and
after (a WARNING when above 0.5: the figures are then not results); peers that are not
installed are skipped with a message. See ``scripts/bench/`` for what each number measures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, fields
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(ROOT))  # run from a checkout

from scripts.bench import opus  # noqa: E402
from scripts.bench.report import tokens_table  # noqa: E402
from scripts.bench.run import EXTRA_SECTIONS, SECTIONS, Options, run  # noqa: E402
from scripts.bench.timing import cpu_label  # noqa: E402
from seq2seq.cli.common import add_model_argument  # noqa: E402
from seq2seq.shipped import find_model  # noqa: E402

DEFAULTS = Options()


def sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def compute_types(text: str) -> tuple[str, ...]:
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    wrong = [v for v in values if v not in ("float32", "int8", "bfloat16")]
    if not values or wrong:
        raise argparse.ArgumentTypeError(f"expected float32, int8 or bfloat16 separated by "
                                         f"commas, got {text!r}")
    return values


def peers(text: str) -> tuple[str, ...]:
    values = tuple(v.strip() for v in text.split(",") if v.strip() and v.strip() != "none")
    if any(v not in ("hf", "ct2") for v in values):
        raise argparse.ArgumentTypeError(f"expected hf, ct2 or none, got {text!r}")
    return values


def checkpoints(text: str) -> tuple[str, ...]:
    """Checkpoint files or shipped models' names, as ``-m`` takes them (``find_model``)."""
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    if not values:
        raise argparse.ArgumentTypeError(f"expected checkpoints separated by commas, got {text!r}")
    try:
        return tuple(str(find_model(v)) for v in values)
    except FileNotFoundError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def shape(text: str) -> opus.Shape:
    try:
        return opus.parse_shape(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"--opus-size: {err}") from None


def opus_help() -> str:
    run = " ".join(f"--{k.replace('_', '-')} {','.join(map(str, v)) if isinstance(v, tuple) else v}"
                   for k, v in opus.RUN.items())
    return (f"instead of -m: a random model of OPUS-MT's size ({opus.OPUS_MT.describe()}, joint "
            f"BPE), built once and cached under the cache home, timed as docs/speed.md does: "
            f"{run} (give any of them to change it); FIELD=VALUE,... changes the shape "
            f"({', '.join(f.name for f in fields(opus.Shape))})")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    models = add_model_argument(ap, help="a seq2seq checkpoint (.ckpt)")
    models.add_argument("--opus-size", nargs="?", const=opus.OPUS_MT, type=shape,
                        metavar="FIELD=VALUE,...", help=opus_help())
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated subset of {','.join(SECTIONS)} (default: all), plus "
                         f"{','.join(EXTRA_SECTIONS)} (profile: torch.profiler of our beam search; train-profile: of a training step; levers: "
                         "training-step levers one at a time; vocab: training step at 4k/6k/8k/10k joint BPE; "
                         "split: seq2seq-train as 1 process x 2 threads vs DDP 2 x 1; shared: translation and "
                         "training beside 0, 1 and 2 busy cores under two thread policies; gemm: the training "
                         "step's achieved FLOP/s as a fraction of its GEMMs' as plain torch.mm/bmm, "
                         "fp32 and bf16 autocast; students: --students against the checkpoint as "
                         "teacher, greedy and beam, with the timed outputs' BLEU)")
    ap.add_argument("--limit", type=int, default=None,
                    help="decode only the first N test sentences (default: all 1,000)")
    ap.add_argument("--repeats", type=int, default=DEFAULTS.repeats,
                    help="timed runs per number (median; default 3)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for torch and CTranslate2 (default: torch.get_num_threads())")
    ap.add_argument("--decode-max-tokens", type=sizes, default=DEFAULTS.decode_max_tokens,
                    help="padded source tokens per decoding batch, comma-separated: each engine "
                         "tries every size and reports its fastest (default "
                         f"{','.join(map(str, DEFAULTS.decode_max_tokens))})")
    ap.add_argument("--compute-types", type=compute_types, default=DEFAULTS.compute_types,
                    help="decode section: our and CTranslate2's rows at each of these compute "
                         "types, comma-separated from float32,int8,bfloat16 (default float32; "
                         "CTranslate2 int8 is always timed)")
    ap.add_argument("--compile", action="store_true",
                    help="decode section: also time ours with the compiled decoder step (greedy "
                         "and beam with patience 1), its packages made before timing, once per "
                         "machine")
    ap.add_argument("--peers", type=peers, default=DEFAULTS.peers,
                    help="decode section: the other engines to time, comma-separated from "
                         "hf,ct2 (default both; 'none' for ours only)")
    ap.add_argument("--beam", dest="beam_size", type=int, default=DEFAULTS.beam_size,
                    help=f"beam size (default {DEFAULTS.beam_size})")
    ap.add_argument("--force-length", type=int, default=DEFAULTS.force_length,
                    help=f"output length of the forced-length greedy rows (default {DEFAULTS.force_length})")
    ap.add_argument("--uncached-limit", type=int, default=DEFAULTS.uncached_limit,
                    help="sentences for the cached-vs-uncached rows (default 200; 0 = all)")
    ap.add_argument("--train-batches", type=int, default=DEFAULTS.train_batches,
                    help="training batches per timed run (default 8)")
    ap.add_argument("--max-tokens", type=int, default=DEFAULTS.max_tokens,
                    help=f"training batch budget (default {DEFAULTS.max_tokens})")
    ap.add_argument("--attention-iters", type=int, default=DEFAULTS.attention_iters,
                    help="attention calls per timed run (default 50)")
    ap.add_argument("--data-dir", default=str(ROOT / "data" / "multi30k"))
    ap.add_argument("--cache-dir", default=str(ROOT / ".cache" / "seq2seq"),
                    help="tokenized-data cache (training batches)")
    ap.add_argument("--no-bf16", dest="bf16", action="store_false",
                    help="train and gemm sections: time fp32 only (bf16 autocast is slow on CPUs without "
                         "native bf16)")
    ap.add_argument("--students", type=checkpoints, default=(), metavar="CKPT[,CKPT...]",
                    help="students section: the distilled checkpoints to time against -m (the teacher)")
    ap.add_argument("--student-beams", type=sizes, default=(), metavar="K[,K...]",
                    help="students section: the students' beam sizes, 1 = greedy (default: 1 and --beam)")
    ap.add_argument("--json", metavar="FILE", help="also write every number to FILE")
    return ap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = parser()
    args = ap.parse_args(argv)
    if args.opus_size is not None:  # its settings as defaults: the options given still win
        ap.set_defaults(**opus.RUN)
        args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1 (use >= 3 for reported numbers)")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import torch

    options = {k: v for k, v in vars(args).items()
               if k not in ("checkpoint", "opus_size", "sections", "json")}
    options["threads"] = args.threads or torch.get_num_threads()
    options["uncached_limit"] = args.uncached_limit or None
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    size = args.opus_size
    result = run(args.checkpoint if size is None else opus.checkpoint(size),
                 sections=sections, **options)
    if size is not None:
        result["opus_size"] = asdict(size)
        if "decode" in result["sections"]:
            print("\n" + tokens_table(result["sections"]["decode"], (
                f"Output tokens/s, OPUS-MT size ({size.describe()}), {options['threads']} "
                f"thread(s) on {cpu_label(result['environment']['cpu'])}")))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        print(f"\nwrote {args.json}")
    return result


if __name__ == "__main__":
    main()
