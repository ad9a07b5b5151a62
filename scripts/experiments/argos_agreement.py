"""How many of argostranslate's translations with an exported Argos package equal
``seq2seq-translate``'s, on the first N lines of Multi30k's 2016 test set: Argos greedy in
float32 (``ARGOS_BEAM_SIZE=1 ARGOS_COMPUTE_TYPE=float32``) against ``seq2seq-translate
--no-repeat-ngram-size 0``, and Argos as installed (beam 4, length penalty 0.2, compute type
``auto``) against ``seq2seq-translate``'s defaults. argostranslate runs offline in a
subprocess with a scratch HOME and ``ARGOS_CHUNK_TYPE=SPACY``.

    python scripts/experiments/argos_agreement.py -m data/models/multi30k_de_en_tiny.ckpt --lang de --to en -n 100
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from seq2seq.export import export
from seq2seq.shipped import multi30k_lines

ARGOS = r"""
import json, socket, sys
def refuse(*args, **kwargs):
    raise OSError("network disabled")
socket.socket.connect = socket.getaddrinfo = socket.create_connection = refuse
from argostranslate import package, translate
package.install_from_path(sys.argv[1])
t = translate.get_translation_from_codes(sys.argv[2], sys.argv[3])
print(json.dumps([t.translate(x) for x in json.load(sys.stdin)]))
"""


def argos(package: Path, texts: list[str], pair: tuple[str, str], home: Path, **settings) -> list[str]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "ARGOS_CHUNK_TYPE": "SPACY",
           "XDG_DATA_HOME": str(home / "data"), "XDG_CACHE_HOME": str(home / "cache"),
           "XDG_CONFIG_HOME": str(home / "config"), **settings}
    done = subprocess.run([sys.executable, "-c", ARGOS, str(package), *pair], env=env,
                          input=json.dumps(texts), capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def ours(model: str, texts: list[str], *options: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "seq2seq.cli.translate", "-m", model, *options],
                          input="\n".join(texts) + "\n", capture_output=True, text=True, check=True)
    return done.stdout.split("\n")[:len(texts)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="a checkpoint with a joint tokenizer")
    ap.add_argument("--lang", default="de", help="source language (the Multi30k test file)")
    ap.add_argument("--to", default="en", help="target language")
    ap.add_argument("-n", type=int, default=100, help="sentences of test_2016_flickr")
    args = ap.parse_args()
    name = f"test_2016_flickr.{args.lang}.gz"
    texts = multi30k_lines(name, args.n)
    pair = (args.lang, args.to)
    with tempfile.TemporaryDirectory() as tmp:
        package = export(args.model, "argos", Path(tmp) / "model.argosmodel")
        rows = (
            ("greedy float32 vs --no-repeat-ngram-size 0",
             dict(ARGOS_BEAM_SIZE="1", ARGOS_COMPUTE_TYPE="float32"), ["--no-repeat-ngram-size", "0"]),
            ("Argos defaults (beam 4, auto) vs our defaults", {}, []),
        )
        for i, (label, settings, options) in enumerate(rows):
            theirs = argos(package, texts, pair, Path(tmp) / f"home{i}", **settings)
            mine = ours(args.model, texts, *options)
            print(f"{label}: {sum(a == b for a, b in zip(theirs, mine))}/{len(texts)} equal")


if __name__ == "__main__":
    main()
