"""``seq2seq-import``: a Hugging Face MarianMT model (OPUS-MT) as a seq2seq checkpoint.

    seq2seq-import Helsinki-NLP/opus-mt-de-en -o opus-de-en.ckpt     # downloads (internet)
    seq2seq-import ./opus-mt-de-en/ -o opus-de-en.ckpt               # a local folder

A local folder holds config.json, model.safetensors or pytorch_model.bin, source.spm,
target.spm and vocab.json (what the hub repository has). The checkpoint holds the network,
both tokenizers and the language pair, so seq2seq-translate, -evaluate, -serve, -export
and ``seq2seq-train fit --model.init_from`` use it as any other. Configurations our model
cannot represent are refused, naming the config.json field.
"""

from __future__ import annotations

import argparse
import sys

from seq2seq.extras import install_hint


def main(argv: list[str] | None = None) -> None:
    from seq2seq.cli.common import Parser

    ap = Parser(prog="seq2seq-import", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="MarianMT folder, or a hub name such as Helsinki-NLP/opus-mt-de-en")
    ap.add_argument("-o", "--output", required=True, help="checkpoint file to write (.ckpt)")
    ap.add_argument("--src-lang", help="source language code (default: from the model's "
                    "tokenizer_config.json or its opus-mt-SRC-TGT name)")
    ap.add_argument("--tgt-lang", help="target language code (default: as --src-lang)")
    ap.add_argument("--force", action="store_true", help="replace an existing output file")
    args = ap.parse_args(argv)
    try:
        from seq2seq.hf_import import import_marian

        ckpt = import_marian(args.source, args.output, args.src_lang, args.tgt_lang,
                             overwrite=args.force)
    except ImportError as e:
        print(f"seq2seq-import: error: transformers (and protobuf) are needed "
              f"({install_hint('hf')}): {e}", file=sys.stderr)
        sys.exit(2)
    except (ValueError, OSError, RuntimeError) as e:  # RuntimeError: check_equal's
        print(f"seq2seq-import: error: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(2)
    meta = ckpt["seq2seq"]
    arch = meta["model_config"]
    print(f"imported {args.source} -> {args.output} ({meta['src_lang']}->{meta['tgt_lang']}, "
          f"{arch['encoder_layers']}+{arch['decoder_layers']} layers, d_model {arch['d_model']}, "
          f"vocabulary {arch['tgt_vocab_size']})", file=sys.stderr)


if __name__ == "__main__":
    main()
