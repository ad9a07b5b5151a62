"""Load test of ``seq2seq-serve`` on this machine (loopback only, bounded, stops by itself).

    python scripts/loadtest.py -m data/models/multi30k_de_en_tiny.ckpt --clients 8 --requests 50
    python scripts/loadtest.py -m CKPT --url http://127.0.0.1:8000 --beam 5   # a running server
    python scripts/loadtest.py -m CKPT --clients 1,8,64 --requests 20 --libre-share 0.5  # mixed APIs

Translates the sentences offline first (the reference answers and the offline batch
throughput), then starts ``seq2seq-serve`` on a free loopback port (unless --url) and runs
N clients x M requests concurrently (for each N of --clients, a fresh server each), a share
of them to the LibreTranslate API. Reports latency percentiles, throughput and the server's
memory before, at its peak and after. Exit status 1 if any request failed or got a wrong
answer. Logic: ``scripts/bench/load.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: scripts.bench

from seq2seq.cli.common import add_model_argument, run_command  # noqa: E402

PROG = "loadtest.py"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(ap, help="the checkpoint the server serves (its default model)")
    ap.add_argument("--sentences", default="data/multi30k/test_2016_flickr.de.gz",
                    help="source sentences, one a line (.gz too)")
    ap.add_argument("--clients", type=_levels, default=[8],
                    help="concurrent clients; several levels as 1,8,64 (default 8)")
    ap.add_argument("--requests", type=int, default=50, help="requests per client")
    ap.add_argument("--texts-per-request", type=int, default=1)
    ap.add_argument("--beam", type=int, help="decoding option sent with every request")
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds; then it stops")
    ap.add_argument("--window-ms", type=float, help="the started server's collection window")
    ap.add_argument("--compile", choices=["start", "background", "off"], default="start",
                    help="the started server's --compile (default start: measured with its "
                         "packages made, first made if not cached)")
    ap.add_argument("--url", help="load a running server on this machine instead")
    ap.add_argument("--libre-share", type=float, default=0.0,
                    help="part of the requests sent to /libretranslate/translate (0-1, default 0)")
    ap.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    return ap


def _levels(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of clients, or several as 1,8,64") from None


def run(args: argparse.Namespace) -> None:
    from scripts.bench.load import run_loadtest  # after argument errors

    options = {"beam": args.beam} if args.beam is not None else {}
    reports = []
    for clients in args.clients:
        report = run_loadtest(args.checkpoint, args.sentences, clients, args.requests,
                              args.texts_per_request, options, args.url, args.time_limit,
                              args.window_ms, args.libre_share, args.compile)
        print("\n".join(report.lines()), flush=True)
        reports.append(report)
    if args.json:
        figures = [r.summary() for r in reports]
        Path(args.json).write_text(json.dumps(figures[0] if len(figures) == 1 else figures,
                                              indent=2) + "\n")
    if any(r.errors or r.wrong or r.answered < r.requests for r in reports):
        sys.exit(1)


if __name__ == "__main__":
    run_command(PROG, run, build_parser().parse_args())
