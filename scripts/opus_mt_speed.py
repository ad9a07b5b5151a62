"""Speed at OPUS-MT's size: ``seq2seq-translate``'s search vs HF ``generate`` vs CTranslate2
on the same weights, each engine timed in its own fresh process.

    python scripts/opus_mt_speed.py --workdir /tmp/opus-speed --sentences 1000 --threads 1

``prepare`` (run first, once): a MarianMT folder of ``Helsinki-NLP/opus-mt-de-en``'s shape
(6+6 layers, d_model 512, 8 heads, FFN 2048, swish, a 58,101-piece joint vocabulary: ~74M
parameters) with random weights and SentencePiece models trained on Multi30k, imported
with ``seq2seq-import`` and exported to CTranslate2. Then, per engine and search, a fresh
process (the benchmark's ``scripts/bench/isolate.py``) loads only its engine, decodes the
first ``--sentences`` lines of test_2016_flickr (the benchmark's batches and length limits:
``scripts/bench/decode.py``) and reports sentences/s; the table gives each engine's
ratio to ours and its agreement with our outputs. HF ``generate`` runs on the imported
weights exported back to MarianMT (``seq2seq.export.to_hf``), i.e. the same weights. A random model never emits EOS, so
every engine decodes each batch to its length limit: a like-for-like speed test.
Timings mean something only on a quiet machine (the load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OPUS_VOCAB = 58101  # Helsinki-NLP/opus-mt-de-en's vocab_size


def prepare(workdir: Path) -> None:
    """The MarianMT folder, our imported checkpoint and its CTranslate2 export."""
    import io

    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel

    from scripts.bench.decode import TEST_SPLIT  # noqa: F401  (the benchmark's test split)
    from seq2seq.export import export
    from seq2seq.hf_import import import_marian

    folder = workdir / "opus-mt-de-en"
    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["</s>", "<unk>"]
    for side, lang in (("source", "de"), ("target", "en")):
        writer = io.BytesIO()
        spm.SentencePieceTrainer.train(input=str(ROOT / "data" / "multi30k" / f"train.{lang}.gz"),
                                       model_writer=writer, vocab_size=8000, minloglevel=2)
        (folder / f"{side}.spm").write_bytes(writer.getvalue())
        sp = spm.SentencePieceProcessor(model_proto=writer.getvalue())
        vocab += [p for p in (sp.id_to_piece(i) for i in range(3, sp.get_piece_size()))
                  if p not in vocab]
    vocab += [f"<fill{i}>" for i in range(OPUS_VOCAB - 1 - len(vocab))] + ["<pad>"]
    (folder / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(vocab)}))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"source_lang": "de", "target_lang": "en", "separate_vocabs": False}))
    pad = len(vocab) - 1
    config = MarianConfig(vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=512,
                          encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                          decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                          activation_function="swish", max_position_embeddings=512,
                          scale_embedding=True, pad_token_id=pad, decoder_start_token_id=pad,
                          eos_token_id=0, forced_eos_token_id=0, bos_token_id=0)
    torch.manual_seed(0)
    MarianMTModel(config).save_pretrained(folder)
    import_marian(folder, workdir / "opus.ckpt", overwrite=True)
    export(workdir / "opus.ckpt", "ctranslate2", workdir / "ct2", overwrite=True)


def row_specs(workdir: Path, model, tgt_vocab, beam: int) -> dict[str, dict]:
    """What each engine's own process builds (``scripts.bench.isolate.build_engine``): our
    search, HF ``generate`` on the same weights (``seq2seq.export.to_hf``: MarianMT) and
    CTranslate2 fp32 on the export, with the benchmark's output rules."""
    from scripts.bench.decode import NO_REPEAT_NGRAM

    ckpt = str(workdir / "opus.ckpt")
    never = [tgt_vocab[model.arch.pad_id], tgt_vocab[model.arch.bos_id]]  # ours never outputs them
    return {"ours": {"engine": "ours", "checkpoint": ckpt, "beam_size": beam},
            "hf": {"engine": "hf", "checkpoint": ckpt, "beam_size": beam},
            "ct2": {"engine": "ct2", "ct2_path": str(workdir / "ct2"), "compute_type": "float32",
                    "tgt_vocab": list(tgt_vocab), "never": never, "beam_size": beam,
                    "no_repeat_ngram": NO_REPEAT_NGRAM}}


def compare(args) -> None:
    """Every engine x search in its own fresh process (``scripts.bench.isolate.run_row``: a
    CTranslate2 process never imports torch), then the table."""
    from scripts.bench import isolate
    from scripts.bench.decode import TEST_SPLIT, agreement, make_batches, source_ids
    from scripts.bench.timing import OtherWork, cpu_model
    from seq2seq.checkpoint import build_model, load_checkpoint
    from seq2seq.data.tokenizer import TokenizerPair
    from seq2seq.export.common import vocabularies

    ckpt = load_checkpoint(args.workdir / "opus.ckpt")
    model = build_model(ckpt)
    with __import__("gzip").open(ROOT / "data" / "multi30k" / f"{TEST_SPLIT}.de.gz", "rt") as f:
        texts = [line.strip() for line in f][: args.sentences]
    src_vocab, tgt_vocab = vocabularies(model, ckpt)
    ids = source_ids(texts, TokenizerPair.from_state(ckpt["seq2seq"]["tokenizers"]), model.arch)
    sweep = {2000: make_batches(ids, 2000, model.arch, src_vocab)}
    print(f"CPU: {cpu_model()}; {args.threads} threads per engine; {len(ids)} sentences")
    print(f"load average before: {os.getloadavg()[0]:.2f} (timings need a quiet machine)")
    other = OtherWork()
    other.start()
    for beam in (1, args.beam):
        rows = {name: isolate.run_row({**spec, "repeats": args.repeats}, sweep, args.threads)["best"]
                for name, spec in row_specs(args.workdir, model, tgt_vocab, beam).items()}
        ours = rows["ours"]
        for engine, row in rows.items():
            print(f"{'greedy' if beam == 1 else f'beam {beam}':8} {engine:5} "
                  f"{len(ids) / row['seconds']:9.2f} sent/s  "
                  f"ours/this {row['seconds'] / ours['seconds']:5.2f}  "
                  f"same output as ours {agreement(row['hyps'], ours['hyps']):5.1f}%  "
                  f"peak RSS {row['rss_peak_mb'] or 0:.0f} MB")
    print(f"other processes' CPU during the run: {other.cores() or 0:.2f} cores")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", nargs="?", default="compare", choices=["prepare", "compare"])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/opus-mt-speed"))
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if args.command == "prepare" or (args.command == "compare" and not (args.workdir / "ct2").exists()):
        prepare(args.workdir)
    if args.command == "compare":
        compare(args)


if __name__ == "__main__":
    main()
