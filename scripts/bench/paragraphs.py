"""Paragraphs through the shipped one-sentence models: Multi30k test_2016_flickr cut into
"paragraphs" of 3 consecutive captions joined by a space, translated whole (split into
sentences, the default, and with splitting off) against the same captions one by one, and
how often the "skipped" flag fires on the test sentences themselves (false alarms).

    OMP_NUM_THREADS=1 python scripts/bench/paragraphs.py   # -> data/results/paragraphs/
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from seq2seq.config import DecodingConfig
from seq2seq.metrics import bleu
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "data" / "results" / "paragraphs" / "test_2016_flickr.json"


def _lines(lang: str) -> list[str]:
    path = ROOT / "data" / "multi30k" / f"test_2016_flickr.{lang}.gz"
    return gzip.open(path, "rt", encoding="utf-8").read().splitlines()


def join_groups(lines: Sequence[str], size: int = 3) -> list[str]:
    """Consecutive lines joined by a space, ``size`` at a time (a last shorter group dropped):
    "paragraphs" of a test set whose sentence-by-sentence translation is known."""
    return [" ".join(lines[i:i + size]) for i in range(0, len(lines) - size + 1, size)]


def measure(translator: Translator, sources: Sequence[str], references: Sequence[str],
            size: int = 3, lost: float = 0.6) -> dict:
    """Paragraphs of ``size`` test sentences translated whole (split, and with
    ``split_sentences`` off) against the same sentences translated one by one and joined:
    BLEU against the joined references, how many paragraphs kept fewer than ``lost`` of the
    one-by-one words, and how often the "skipped" flag fired on each."""
    paragraphs = join_groups(sources, size)
    refs = join_groups(references, size)
    one_by_one = join_groups(translator.translate(list(sources)[:len(paragraphs) * size]), size)
    base = translator.decoding
    out = {"paragraphs": len(paragraphs),
           "sentence_by_sentence": {"BLEU": round(bleu(one_by_one, refs).score, 2)}}
    for name, split in (("split", True), ("no_split", False)):
        translator.decoding = replace(base, split_sentences=split)
        try:
            results = translator.translate_full(paragraphs)
        finally:
            translator.decoding = base
        hyps = [r.hyp for r in results]
        out[name] = {
            "BLEU": round(bleu(hyps, refs).score, 2),
            "lost": sum(len(h.split()) < lost * len(o.split()) for h, o in zip(hyps, one_by_one)),
            "flagged": sum("skipped" in r.flags for r in results),
        }
    return out


def main() -> None:
    rows = []
    for src, tgt in (("de", "en"), ("en", "de")):
        ckpt = ROOT / "data" / "models" / f"multi30k_{src}_{tgt}_tiny.ckpt"
        for search, decoding in (("greedy", DecodingConfig(method="greedy")),
                                 ("beam5", DecodingConfig(method="beam", beam_size=5))):
            translator = Translator.from_checkpoint(ckpt, decoding)
            row = {"direction": f"{src}-{tgt}", "search": search,
                   **measure(translator, _lines(src), _lines(tgt))}
            sentences = translator.translate_full(_lines(src))
            row["test_sentences"] = {"count": len(sentences), "flagged": sum(
                "skipped" in r.flags for r in sentences)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"command": "OMP_NUM_THREADS=1 python scripts/bench/paragraphs.py",
                               "rows": rows}, indent=1) + "\n", encoding="utf-8")
    print(f"-> {OUT}")


if __name__ == "__main__":
    main()
