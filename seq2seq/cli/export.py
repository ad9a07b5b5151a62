"""``seq2seq-export``: convert a checkpoint for a peer runtime.

    seq2seq-export -m best.ckpt --to ctranslate2 --output ct2/ [--quantization int8]
    seq2seq-export -m best.ckpt --to argos --output de_en.argosmodel
    seq2seq-export -m best.ckpt --to hf --output hf/

ctranslate2: a CTranslate2 model folder (vocabulary = the SentencePiece pieces; the decoder
starts from <s>) with the SentencePiece models (source.model, target.model); CTranslate2
appends the source EOS itself, so ``sp.encode(text, out_type=str)`` goes in as is.
argos: an Argos Translate package (.argosmodel file) for argostranslate and LibreTranslate:
the CTranslate2 folder, the one SentencePiece model (a model with a joint tokenizer only) and
a blank spaCy pipeline (run with ARGOS_CHUNK_TYPE=SPACY offline).
hf: a Hugging Face folder (MarianMT for a Post-LN model, Pegasus for a Pre-LN one; force
one with hf-marian or hf-pegasus): save_pretrained files, a generation config with our
search settings, and the SentencePiece models (source.spm, target.spm) with vocab.json for
MarianTokenizer, so AutoModelForSeq2SeqLM/AutoTokenizer/pipeline("translation") load the
folder alone. Options a format cannot represent (e.g. RMSNorm) are refused by name.
"""

from __future__ import annotations

import argparse
import sys

from seq2seq.cli.common import Parser, add_model_argument, run_command
from seq2seq.export import FORMATS
from seq2seq.export.ctranslate2 import OFFERED_QUANTIZATIONS
from seq2seq.extras import install_hint

PROG = "seq2seq-export"


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_argument(ap)
    ap.add_argument("--to", required=True, choices=FORMATS, help="target format")
    ap.add_argument("-o", "--output", required=True,
                    help="output folder (created); for --to argos the .argosmodel file")
    ap.add_argument("--quantization", choices=OFFERED_QUANTIZATIONS,
                    help="ctranslate2 (and argos) weight type (default float32)")
    ap.add_argument("--force", action="store_true",
                    help="replace a previous export in the output folder (only its files: "
                         "a folder holding anything else, e.g. the checkpoint, is refused); "
                         "argos: replace an existing file only if it is an Argos package")
    return ap


def run(args: argparse.Namespace) -> None:
    if args.quantization and args.to not in ("ctranslate2", "argos"):
        raise ValueError("--quantization is only supported with --to ctranslate2 or argos")
    if not args.output.strip():  # Path("") is ".": the working directory, never meant
        what = ("file name; give the .argosmodel file" if args.to == "argos"
                else "folder name; give the folder")
        raise ValueError(f"--output: empty {what} to create")
    try:
        from seq2seq.export import export

        out = export(args.checkpoint, args.to, args.output, args.quantization,
                     overwrite=args.force)
    except ImportError as e:
        package, hint = {"ctranslate2": ("ctranslate2", install_hint("ctranslate2")),
                         "argos": ("ctranslate2 and spacy", install_hint("argos"))}.get(
            args.to, ("transformers", install_hint("hf")))
        raise ValueError(f"{package} is needed for --to {args.to} ({hint}): {e}") from None
    print(f"exported {args.checkpoint} -> {out} ({args.to}"
          f"{', ' + args.quantization if args.quantization else ''})", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    run_command(PROG, run, build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
