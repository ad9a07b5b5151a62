"""Beam 5 (CTranslate2's stopping rule, patience 1) of ours and CTranslate2 fp32 on
test_2016 at several batch sizes, so each engine is compared at its own best size.
Every torch run comes before the first CTranslate2 run (its idle threads slow torch in
the same process); medians of 3 after a warm-up; agree %: CTranslate2's 1-best equal to
ours on the same batches (a batch's length limit is its longest sentence's, so outputs of
one engine may differ between sizes).

    python scripts/beam_batch_sizes.py -m data/models/multi30k_de_en_tiny.ckpt --sizes 1000,2000,4000,8000,16000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.bench.decode import (  # noqa: E402
    agreement,
    ct2_peers,
    make_batches,
    ours_engine,
    read_test_sources,
    source_ids,
)
from scripts.bench.timing import check_load, measure, set_threads  # noqa: E402
from seq2seq.checkpoint import build_model, load_checkpoint  # noqa: E402
from seq2seq.cli.common import add_model_argument  # noqa: E402
from seq2seq.data.tokenizer import TokenizerPair  # noqa: E402
from seq2seq.export.common import vocabularies  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(ap)
    ap.add_argument("--sizes", default="1000,2000,4000,8000,16000")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    set_threads(args.threads)
    ckpt = load_checkpoint(args.checkpoint)
    model = build_model(ckpt)
    texts = read_test_sources(ckpt, ROOT / "data" / "multi30k")
    tokenizers = TokenizerPair.from_state(ckpt["seq2seq"]["tokenizers"])
    ids = source_ids(texts, tokenizers, model.arch)
    src_vocab, tgt_vocab = vocabularies(model, ckpt)
    sizes = [int(s) for s in args.sizes.split(",")]
    check_load("before")
    batches = {n: make_batches(ids, n, model.arch, src_vocab) for n in sizes}
    ours = ours_engine(model, 5, stopping="patience")
    rows, ref = {}, {}
    for n in sizes:
        m = measure(lambda n=n: ours(batches[n]), 3, warmup=lambda n=n: ours(batches[n][:1]))
        ref[n] = m.result
        rows[("ours", n)] = (len(texts) / m.seconds, 100.0)
    with tempfile.TemporaryDirectory() as work:
        ct2 = ct2_peers(model, src_vocab, tgt_vocab, 5, args.threads, work, [])
        engine = ct2[("CTranslate2 float32", "beam 5, patience 1")]
        for n in sizes:
            m = measure(lambda n=n: engine(batches[n]), 3, warmup=lambda n=n: engine(batches[n][:1]))
            rows[("CTranslate2 fp32", n)] = (len(texts) / m.seconds, agreement(m.result, ref[n]))
    print(f"{'engine':18} {'max_tokens':>10} {'sent/s':>8} {'agree %':>8}")
    for (name, n), (rate, agree) in rows.items():
        print(f"{name:18} {n:>10} {rate:>8.1f} {agree:>8.1f}")
    best = {e: max(r for (name, _), (r, _) in rows.items() if name == e) for e in ("ours", "CTranslate2 fp32")}
    print(f"best of each: ours {best['ours']:.1f} / CTranslate2 {best['CTranslate2 fp32']:.1f} = "
          f"{best['ours'] / best['CTranslate2 fp32']:.2f}x")
    check_load("after")


if __name__ == "__main__":
    main()
