"""Small builders shared by several test files (import: ``from helpers import ...``; tests/
is on the path, ``pythonpath`` in pyproject.toml)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from seq2seq.checkpoint import save_model
from seq2seq.config import DecodingConfig, ModelConfig
from seq2seq.model import Seq2Seq

ROOT = Path(__file__).resolve().parents[1]  # the repository
DE_EN = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"  # the shipped models
EN_DE = ROOT / "data" / "models" / "multi30k_en_de_tiny.ckpt"


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

    path = ROOT / "data" / "multi30k" / f"{split}.{lang}.gz"
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


def docx_with(part: str, xml: bytes | None) -> bytes:
    """A small Word document with ``part`` replaced (or left out: None)."""
    import io
    import zipfile

    import docx

    d = docx.Document()
    d.add_paragraph("Ein Hund läuft.")
    good, out = io.BytesIO(), io.BytesIO()
    d.save(good)
    with zipfile.ZipFile(good) as z, zipfile.ZipFile(out, "w") as w:
        for item in z.infolist():
            if item.filename != part:
                w.writestr(item, z.read(item))
        if xml is not None:
            w.writestr(part, xml)
    return out.getvalue()


# ---------------------------------------------------------------- exports
def needs(package: str):
    """The package, or skip: fixtures call it before any export runs, so a missing
    package skips the test instead of failing it with ModuleNotFoundError."""
    return pytest.importorskip(package)


def tiny_export_model(vocab: int = 60, **overrides) -> Seq2Seq:
    """A random tiny model as the export tests build it: 1-d parameters (norms, biases)
    perturbed so none is trivial."""
    kw = dict(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, n_heads=4, d_ff=64,
              encoder_layers=2, decoder_layers=2, dropout=0.0, max_positions=64)
    kw.update(overrides)
    model = Seq2Seq(ModelConfig(**kw))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
        if not model.arch.tie_output:
            model.output.weight.mul_(2.0)
    return model.eval()


def padded_batch(arch: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded sources of lengths 9, 6, 4, 2 and BOS-first decoder inputs."""
    from seq2seq.specials import BOS_ID, PAD_ID

    src = torch.randint(4, arch.src_vocab_size, (4, 9))
    for row, n in enumerate((9, 6, 4, 2)):
        src[row, n:] = PAD_ID
    tgt_in = torch.randint(4, arch.tgt_vocab_size, (4, 7))
    tgt_in[:, 0] = BOS_ID
    tgt_in[2, 5:] = PAD_ID  # padded targets too: causality hides them
    return src, tgt_in


def ours_greedy(model: Seq2Seq, src: torch.Tensor, n: int) -> list[list[int]]:
    """Our greedy with one max length ``n`` for every sentence (tokens before EOS), without
    the n-gram rule (the peers' default; tests/decoding/test_no_repeat_ngram.py compares it)."""
    from seq2seq.decoding.search import greedy

    result = greedy(model, src, DecodingConfig(max_len_a=0.0, max_len_b=n, no_repeat_ngram_size=0))
    return [h[0].tokens for h in result.hypotheses]


def write_checkpoint(path, model: Seq2Seq, pair) -> None:
    """A format-1 checkpoint (as seq2seq 0.1 wrote it: no checksum) of ``model``."""
    from seq2seq.config import to_dict

    torch.save({
        "seq2seq": {"format": 1, "model_config": to_dict(model.arch), "tokenizers": pair.to_state(),
                    "src_lang": "de", "tgt_lang": "en"},
        "state_dict": {"model." + k: v for k, v in model.state_dict().items()},
    }, path)


def run_cli_error(capsys, *argv, usage: bool = False) -> str:
    """Run ``seq2seq-export``; it must exit 2 with one error line (after argparse's usage
    lines when ``usage``; after one-line warnings, e.g. on format-1 checkpoints): return it."""
    from seq2seq.cli.export import main

    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    warnings = all(line.startswith("seq2seq-export: warning: ") for line in err[:-1])
    assert err[-1].startswith("seq2seq-export: error: ") and (usage or warnings), err
    return err[-1]
