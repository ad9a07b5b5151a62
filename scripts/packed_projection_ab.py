"""Our search with and without the prepacked output projection (``seq2seq/model/packed.py``),
with CTranslate2 fp32 for the ratio: every row in its own fresh process (the benchmark's
``scripts/bench/isolate.run_row``), greedy and beam 5 (patience 1, CTranslate2's rule), each
engine at its faster of 1,000 / 3,000 padded source tokens per batch.

    python scripts/packed_projection_ab.py [-m multi30k_de_en_tiny] [--repeats 3] [--threads 2]

Timings mean something only on a quiet machine (the load average is printed).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rows(path: str, vocab: list[str], ct2: str, never: list[str], beam: int) -> dict[str, dict]:
    from scripts.bench.decode import NO_REPEAT_NGRAM

    stop = "patience" if beam > 1 else "heuristic"
    ours = {"engine": "ours", "checkpoint": path, "beam_size": beam, "stopping": stop}
    return {"ours, packed": ours, "ours, plain": {**ours, "packed": False},
            "CTranslate2 fp32": {"engine": "ct2", "ct2_path": ct2, "compute_type": "float32",
                                 "tgt_vocab": vocab, "never": never, "beam_size": beam,
                                 "no_repeat_ngram": NO_REPEAT_NGRAM}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="multi30k_de_en_tiny")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    from scripts.bench import isolate
    from scripts.bench.decode import agreement, make_batches, read_test_sources, source_ids
    from scripts.bench.timing import OtherWork, cpu_model
    from seq2seq.checkpoint import build_model, load_checkpoint
    from seq2seq.data.tokenizer import TokenizerPair
    from seq2seq.export.common import vocabularies
    from seq2seq.export.ctranslate2 import to_ctranslate2
    from seq2seq.shipped import find_model

    path = str(find_model(args.model))
    ckpt = load_checkpoint(path)
    model = build_model(ckpt)
    src_vocab, tgt_vocab = vocabularies(model, ckpt)
    ids = source_ids(read_test_sources(ckpt, ROOT / "data" / "multi30k"),
                     TokenizerPair.from_state(ckpt["seq2seq"]["tokenizers"]), model.arch)
    sweep = {n: make_batches(ids, n, model.arch, src_vocab) for n in (1000, 3000)}
    ct2 = str(to_ctranslate2(model, Path(tempfile.mkdtemp()) / "ct2", src_vocab=src_vocab,
                             tgt_vocab=tgt_vocab))
    never = [tgt_vocab[model.arch.pad_id], tgt_vocab[model.arch.bos_id]]
    print(f"CPU: {cpu_model()}; {args.threads} threads; {len(ids)} sentences; "
          f"load average before: {os.getloadavg()[0]:.2f}")
    other = OtherWork()
    other.start()
    for beam in (1, 5):
        best = {name: isolate.run_row({**spec, "repeats": args.repeats}, sweep, args.threads)["best"]
                for name, spec in rows(path, list(tgt_vocab), ct2, never, beam).items()}
        ct2_s = best["CTranslate2 fp32"]["seconds"]
        for name, row in best.items():
            print(f"{'greedy' if beam == 1 else 'beam 5'} {name:17s} {len(ids) / row['seconds']:7.1f} "
                  f"sent/s  ÷ CTranslate2 {ct2_s / row['seconds']:.2f}  same output as packed "
                  f"{agreement(row['hyps'], best['ours, packed']['hyps']):5.1f}%")
    print(f"other processes' CPU during the run: {other.cores() or 0:.2f} cores")


if __name__ == "__main__":
    main()
