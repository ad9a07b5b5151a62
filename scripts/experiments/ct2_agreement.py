"""How many outputs of a CTranslate2 export equal ``seq2seq-translate``'s, with the arguments
docs/export.md gives (``ct2_translate``) and with a bare call (``no_repeat_ngram_size`` only),
greedy and beam 5.

    python scripts/experiments/ct2_agreement.py -m data/models/multi30k_de_en_tiny.ckpt --lang de -n 100
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import ctranslate2
import sentencepiece

from seq2seq.checkpoint import config_of, load_checkpoint
from seq2seq.config import DecodingConfig
from seq2seq.export import export
from seq2seq.export.ctranslate2 import ct2_translate
from seq2seq.shipped import multi30k_lines
from seq2seq.translation.translator import Translator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="a checkpoint")
    ap.add_argument("--lang", default="de", help="source language of the Multi30k test file")
    ap.add_argument("-n", type=int, default=100, help="sentences of test_2016_flickr")
    ap.add_argument("--never", nargs="*", default=["<pad>", "<s>"], help="pad and BOS pieces")
    ap.add_argument("--ngram", type=int, default=4, help="no_repeat_ngram_size on both sides")
    args = ap.parse_args()
    ngram = {"no_repeat_ngram_size": args.ngram}
    name = f"test_2016_flickr.{args.lang}.gz"
    texts = multi30k_lines(name, args.n)
    positions = config_of(load_checkpoint(args.model)["seq2seq"]).max_positions
    with tempfile.TemporaryDirectory() as tmp:
        out = export(args.model, "ctranslate2", Path(tmp) / "ct2")
        translator = ctranslate2.Translator(str(out), device="cpu", inter_threads=1, intra_threads=1)
        sp = sentencepiece.SentencePieceProcessor(model_file=str(out / "source.model"))
        pieces = [sp.encode(t, out_type=str) for t in texts]
        for name, ours_cfg, ct2_cfg in (
            ("greedy", DecodingConfig(**ngram), DecodingConfig(**ngram)),
            ("beam 5, stopping patience",
             *[DecodingConfig(method="beam", stopping="patience", **ngram)] * 2),
            ("beam 5, stopping heuristic (our default)", DecodingConfig(method="beam", **ngram),
             DecodingConfig(method="beam", stopping="patience", **ngram)),
        ):
            results = Translator.from_checkpoint(args.model, ours_cfg).translate_full(texts, need_attention=True)
            ours = [r.tgt_pieces[:-1] if r.tgt_pieces else [] for r in results]
            theirs = ct2_translate(translator, pieces, ct2_cfg, positions, never=args.never)
            bare = [r.hypotheses[0] for r in translator.translate_batch(
                pieces, beam_size=ct2_cfg.beam_size if ct2_cfg.method == "beam" else 1,
                no_repeat_ngram_size=args.ngram)]
            print(f"{name}: ct2_translate {sum(a == b for a, b in zip(ours, theirs))}/{len(texts)} equal, "
                  f"bare call {sum(a == b for a, b in zip(ours, bare))}/{len(texts)}")


if __name__ == "__main__":
    main()
