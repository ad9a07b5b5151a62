"""Paragraphs through the shipped one-sentence models: Multi30k test_2016_flickr cut into
"paragraphs" of 3 consecutive captions joined by a space, translated whole (split into
sentences, the default, and with splitting off) against the same captions one by one, and
how often the "skipped" flag fires on the test sentences themselves (false alarms).

    OMP_NUM_THREADS=1 python scripts/bench/paragraphs.py   # -> data/results/paragraphs/
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from seq2seq.config import DecodingConfig
from seq2seq.decoding.paragraphs import measure
from seq2seq.decoding.translator import Translator

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "data" / "results" / "paragraphs" / "test_2016_flickr.json"


def _lines(lang: str) -> list[str]:
    path = ROOT / "data" / "multi30k" / f"test_2016_flickr.{lang}.gz"
    return gzip.open(path, "rt", encoding="utf-8").read().splitlines()


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
