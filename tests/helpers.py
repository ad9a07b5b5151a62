"""Small builders shared by several test files (import: ``from helpers import ...``)."""

from __future__ import annotations

from pathlib import Path

import torch

from seq2seq.checkpoint import save_model
from seq2seq.config import ModelConfig
from seq2seq.model import Seq2Seq


def tiny_random_model(vocab: int, seed: int = 0, **overrides) -> Seq2Seq:
    """2+2 layers, d_model 32, untied output, weights perturbed off their init so that
    outputs vary (a fresh model rarely emits EOS); eval mode. ``overrides``: other
    ``ModelConfig`` fields."""
    torch.manual_seed(seed)
    kw = dict(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, n_heads=4, d_ff=64,
              encoder_layers=2, decoder_layers=2, max_positions=64, tie_output=False)
    model = Seq2Seq(ModelConfig(**{**kw, **overrides})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


def save_tiny_checkpoint(path: Path, tokenizers, seed: int = 0, pair: tuple[str, str] = ("de", "en")) -> Path:
    """A self-contained checkpoint of :func:`tiny_random_model` with ``tokenizers``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_model(path, tiny_random_model(tokenizers.src.vocab_size, seed), tokenizers, *pair)
    return path


def multi30k_lines(lang: str, n: int, split: str = "train") -> list[str]:
    """The first ``n`` lines of a shipped Multi30k file, without their newlines."""
    import gzip
    import itertools

    path = Path(__file__).resolve().parents[1] / "data" / "multi30k" / f"{split}.{lang}.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, n)]


def tiny_tokenizers(vocab: int = 100, langs: tuple[str, ...] = ("de", "en"), n: int = 200,
                    reserved: tuple[str, ...] = ()):
    """One joint SentencePiece model (as a ``TokenizerPair``) of ``vocab`` pieces, trained on
    the first ``n`` Multi30k training lines of each of ``langs`` (``reserved``: tag pieces)."""
    from seq2seq.config import TokenizerConfig
    from seq2seq.data.tokenizer import Tokenizer, TokenizerPair

    texts = [line for lang in langs for line in multi30k_lines(lang, n)]
    tok = Tokenizer.train(texts, TokenizerConfig(vocab_size=vocab, num_threads=1), reserved)
    return TokenizerPair(tok, tok)


def save_multilingual_checkpoint(path: Path, spec: str = "all:en,de,fr",
                                 tag_position: str = "source", seed: int = 0) -> Path:
    """A checkpoint of :func:`tiny_random_model` that translates the directions of ``spec``,
    with a joint tokenizer reserving their target-language tags."""
    from seq2seq.directions import Directions, parse_pairs

    directions = Directions(parse_pairs(spec), tag_position)
    tokenizers = tiny_tokenizers(120, directions.languages, reserved=directions.tags)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_model(path, tiny_random_model(tokenizers.src.vocab_size, seed), tokenizers, None, None,
               directions)
    return path


def run_main(main, argv: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    """A command's ``main(argv)`` in-process with ``stdin`` bytes: (exit status, stdout, stderr)."""
    import io
    import sys

    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout, sys.stderr = out, err
    code = 0
    try:
        main(argv)
    except SystemExit as e:
        code = e.code
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    return code, out.getvalue(), err.getvalue()
