"""Load test of ``seq2seq-serve`` on this machine (loopback only, bounded, stops by itself).

    python scripts/loadtest.py -m data/models/multi30k_de_en_tiny.ckpt --clients 8 --requests 50
    python scripts/loadtest.py -m CKPT --url http://127.0.0.1:8000 --beam 5   # a running server

Translates the sentences offline first (the reference answers and the offline batch
throughput), then starts ``seq2seq-serve`` on a free loopback port (unless --url) and runs
N clients x M requests concurrently. Exit status 1 if any request failed or got a wrong
answer. Logic: ``seq2seq.serving.loadtest``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from seq2seq.cli.common import add_model_argument, run_command

PROG = "loadtest.py"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(ap, help="the checkpoint the server serves (its default model)")
    ap.add_argument("--sentences", default="data/multi30k/test_2016_flickr.de.gz",
                    help="source sentences, one a line (.gz too)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients")
    ap.add_argument("--requests", type=int, default=50, help="requests per client")
    ap.add_argument("--texts-per-request", type=int, default=1)
    ap.add_argument("--beam", type=int, help="decoding option sent with every request")
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds; then it stops")
    ap.add_argument("--window-ms", type=float, help="the started server's collection window")
    ap.add_argument("--url", help="load a running server on this machine instead")
    ap.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    return ap


def run(args: argparse.Namespace) -> None:
    from seq2seq.serving.loadtest import run_loadtest  # after argument errors

    options = {"beam": args.beam} if args.beam is not None else {}
    report = run_loadtest(args.checkpoint, args.sentences, args.clients, args.requests,
                          args.texts_per_request, options, args.url, args.time_limit,
                          args.window_ms)
    print("\n".join(report.lines()))
    if args.json:
        Path(args.json).write_text(json.dumps(report.summary(), indent=2) + "\n")
    if report.errors or report.wrong or report.answered < report.requests:
        sys.exit(1)


if __name__ == "__main__":
    run_command(PROG, run, build_parser().parse_args())
