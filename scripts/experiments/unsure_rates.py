"""How often the shipped models flag an output "unsure" (confidence below the threshold
``seq2seq-calibrate`` stored in them): false alarms on Multi30k test_2016_flickr (captions
like the training data) and hits on sentences from outside captions (everyday speech, news,
instructions: tests/data/outside_captions.{de,en}), greedy and beam 5.

    nice python scripts/experiments/unsure_rates.py -o data/results/unsure_rates.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path

from seq2seq import DecodingConfig, Translator
from seq2seq.shipped import multi30k_dir

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = ROOT / "tests" / "data" / "outside_captions"
TEST = "test_2016_flickr"
MODELS = {"multi30k_de_en_tiny": ("de", "en"), "multi30k_en_de_tiny": ("en", "de")}
SEARCHES = {"greedy": DecodingConfig(), "beam 5": DecodingConfig(method="beam", beam_size=5)}


def lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def rates(translator: Translator, texts: list[str]) -> dict:
    results = translator.translate_full(texts)
    flagged = sum("unsure" in r.flags for r in results)
    return {"sentences": len(results), "unsure": flagged,
            "rate": round(flagged / len(results), 4),
            "median_confidence": round(statistics.median(r.confidence for r in results), 4)}


def measure() -> list[dict]:
    rows = []
    for name, (src, _) in MODELS.items():
        test = lines(multi30k_dir([f"{TEST}.{src}.gz"]) / f"{TEST}.{src}.gz")
        outside = lines(OUTSIDE.with_suffix(f".{src}"))
        for search, decoding in SEARCHES.items():
            translator = Translator.from_checkpoint(name, decoding)
            rows.append({"model": name, "search": search, "threshold": translator.unsure_below,
                         "calibration": translator.calibration,
                         f"false_alarms ({TEST})": rates(translator, test),
                         "hits (outside captions)": rates(translator, outside)})
            print(f"{name:22} {search:7} threshold {translator.unsure_below:.3f}  false alarms "
                  f"{rows[-1][f'false_alarms ({TEST})']['rate']:.1%}  hits "
                  f"{rows[-1]['hits (outside captions)']['rate']:.0%}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", help="write the rows as JSON here")
    args = ap.parse_args()
    rows = measure()
    if args.output:
        Path(args.output).write_text(json.dumps(
            {"command": "nice python scripts/experiments/unsure_rates.py -o data/results/unsure_rates.json",
             "rows": rows}, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
