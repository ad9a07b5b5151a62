"""Small builders shared by several test files (import: ``from helpers import ...``; tests/
is on the path, ``pythonpath`` in pyproject.toml)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from seq2seq.checkpoint import save_model
from seq2seq.config import DecodingConfig, ModelConfig
from seq2seq.model import Seq2Seq
from seq2seq.model.inference.compiled import cpp_compiler

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


def multi30k_lines(lang: str, n: int | None, split: str = "train") -> list[str]:
    """The first ``n`` lines of a shipped Multi30k file, without their newlines."""
    from seq2seq.shipped import multi30k_lines as read

    return read(f"{split}.{lang}.gz", n)


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


GERMAN = ["Ein Hund rennt durch den Schnee.", "Zwei Männer spielen Fußball auf einer Wiese.",
          "Eine Frau mit rotem Hut liest ein Buch."]  # for DE_EN, and ENGLISH for EN_DE
ENGLISH = ["A dog runs through the snow.", "Two men are playing soccer in a field."]


def seq2seq_translate(checkpoint: Path, texts: list[str], *flags: str) -> list[str]:
    """What ``seq2seq-translate -m CKPT FLAGS`` prints for ``texts`` (one per line): what a
    server's answers are compared with."""
    from seq2seq.cli.translate import main

    code, out, err = run_main(main, ["-m", str(checkpoint), *flags],
                              "".join(t + "\n" for t in texts).encode())
    assert code in (0, None), err
    return out.splitlines()


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
def package(entries: dict[str, str | bytes], mimetype: str | None = None) -> bytes:
    """A zip of ``entries`` (name -> body), the ``mimetype`` entry first and stored."""
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        if mimetype:
            z.writestr(zipfile.ZipInfo("mimetype"), mimetype, zipfile.ZIP_STORED)
        for name, body in entries.items():
            z.writestr(name, body)
    return out.getvalue()


ODF_NS = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
          'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
          'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
          'xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0" '
          'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
          'xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:xlink="http://www.w3.org/1999/xlink"')


def slides_package(*paragraphs: str) -> bytes:
    """The least .pptx the reader takes: one slide holding ``paragraphs`` (each the
    content of an ``a:p``)."""
    p, a = ("http://schemas.openxmlformats.org/presentationml/2006/main",
            "http://schemas.openxmlformats.org/drawingml/2006/main")
    r = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    kind = "application/vnd.openxmlformats-officedocument.presentationml."
    types = ('<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
             f'<Override PartName="/ppt/presentation.xml" ContentType="{kind}presentation.main+xml"/>'
             f'<Override PartName="/ppt/slides/slide1.xml" ContentType="{kind}slide+xml"/></Types>')
    body = "".join(f"<a:p>{x}</a:p>" for x in paragraphs)
    return package({"[Content_Types].xml": types, "ppt/presentation.xml": f'<p:presentation xmlns:p="{p}"/>',
                    "ppt/slides/slide1.xml": f'<p:sld xmlns:p="{p}" xmlns:a="{a}" xmlns:r="{r}">{body}</p:sld>'})


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


# ---------------------------------------------------------------- commands
def run_command(command: str, argv: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    """``seq2seq-COMMAND ARGV`` in-process (translate, evaluate, average, export, serve):
    (exit status, stdout, stderr)."""
    import importlib

    return run_main(importlib.import_module(f"seq2seq.cli.{command}").main, argv, stdin)


def assert_refused(result: tuple[int, str, str], command: str, *needles: str) -> str:
    """Exit 2, nothing on stdout, one stderr line ``seq2seq-X: error: ...`` holding every
    needle (argparse's own errors too)."""
    code, out, err = result
    lines = err.strip().splitlines()
    assert code == 2 and out == "", (code, out, err)
    assert len(lines) == 1 and lines[-1].startswith(f"seq2seq-{command}: error: "), err
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])
    return lines[-1]


def snapshot(folder: Path) -> dict[str, str]:
    """Name -> sha256 of every file under ``folder`` (inputs must not change)."""
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@contextmanager
def deadline(seconds: int):
    """Fail (rather than hang the suite) when the block blocks, e.g. opening a FIFO."""
    import signal

    def expire(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------- training runs
SMOKE = str(ROOT / "configs" / "smoke.yaml")


def write_train_corpus(d: Path) -> dict[str, Path]:
    """600 training and 40 validation pairs of Multi30k de-en as text, plus bad files."""
    files = {}
    for split, n in (("train", 600), ("val", 40)):
        for lang in ("de", "en"):
            files[f"{split}_{lang}"] = d / f"{split}.{lang}"
            files[f"{split}_{lang}"].write_text("\n".join(multi30k_lines(lang, n, split)) + "\n",
                                                encoding="utf-8")
    files["bad_utf8"] = d / "bad.de"
    files["bad_utf8"].write_bytes(files["train_de"].read_bytes()[:-30] + b"\xff\xfe kaputt\n")
    for side in ("de", "en"):
        files[f"empty_{side}"] = d / f"empty.{side}"
        files[f"empty_{side}"].write_text("\n\n", encoding="utf-8")
    files["cache"] = d / "cache"
    configs = {"empty": "\n# nothing but a comment\n\n", "recursive": "trainer: &a [*a]\n",
               # nine-fold nesting, 9**10 leaves once expanded: the "billion laughs"
               "laughs": "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
                   f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 11))}
    for name, text in configs.items():
        files[f"{name}_config"] = d / f"{name}.yaml"
        files[f"{name}_config"].write_text(text, encoding="utf-8")
    return files


def train_args(c: dict[str, Path], root: Path, steps: int = 2, *extra: str) -> list[str]:
    """A tiny run on ``c``: no validation, a snapshot every 2 steps, checkpoints in root."""
    return [
        "fit", "--config", SMOKE, "--data.data.corpus", "null",
        "--data.data.train_src", str(c["train_de"]), "--data.data.train_tgt", str(c["train_en"]),
        "--data.data.valid_src", str(c["val_de"]), "--data.data.valid_tgt", str(c["val_en"]),
        "--data.data.cache_dir", str(c["cache"]), "--data.data.tokenizer.vocab_size", "300",
        "--trainer.max_steps", str(steps), "--trainer.limit_val_batches", "0",
        "--trainer.num_sanity_val_steps", "0", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false", "--trainer.default_root_dir", str(root),
        "--checkpoint.monitor", "null", "--checkpoint.save_top_k", "-1",
        "--checkpoint.filename", "step{step:06d}", "--checkpoint.every_n_train_steps", "2",
        *extra,
    ]


def run_train(argv: list[str], capsys, monkeypatch) -> tuple[int, str]:
    """``seq2seq-train ARGV`` in-process: (exit status, stderr)."""
    import sys

    from seq2seq.cli.train import main

    monkeypatch.setattr(sys, "argv", ["seq2seq-train"])  # LightningCLI also looks at sys.argv
    code = 0
    try:
        main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


# ---------------------------------------------------------------- corpora on disk
def numbered_lines(lang: str, n: int, split: str = "train") -> list[str]:
    """``n`` lines from Multi30k, numbered when repeated so the corpus has no duplicates."""
    from seq2seq.data.sources import read_lines

    lines = read_lines(ROOT / "data" / "multi30k" / f"{split}.{lang}.gz")
    return [lines[i] if i < len(lines) else f"{lines[i % len(lines)]} {i}" for i in range(n)]


def write_corpus(root: Path, n: int, name: str = "c") -> tuple[Path, Path]:
    """``root/NAME.de`` and ``root/NAME.en``: ``n`` pairs of :func:`numbered_lines`."""
    root.mkdir(parents=True, exist_ok=True)
    paths = root / f"{name}.de", root / f"{name}.en"
    for path, lang in zip(paths, ("de", "en"), strict=True):
        path.write_text("".join(f"{s}\n" for s in numbered_lines(lang, n)), encoding="utf-8")
    return paths


def text_config(src, tgt, cache: Path, **kw):
    """A ``DataConfig`` for text files ``src``/``tgt`` (Multi30k's val as validation)."""
    from seq2seq.config import DataConfig, TokenizerConfig

    data = ROOT / "data" / "multi30k"
    kw = {"tokenizer": TokenizerConfig(vocab_size=500), "max_tokens": 512, **kw}
    return DataConfig(corpus=None, train_src=src, train_tgt=tgt, valid_src=str(data / "val.de.gz"),
                      valid_tgt=str(data / "val.en.gz"), cache_dir=str(cache), **kw)


# ---------------------------------------------------------------- adversarial documents
def cue(content: str) -> str:
    return f"1\n00:00:01,000 --> 00:00:02,000\n{content}\n"


# name -> (file name, the document with n repetitions of its adversarial part)
SHAPES = {
    "srt closing tags": ("a.srt", lambda n: cue("<i>" + "</i>" * n + "x")),
    "srt opening tags": ("a.srt", lambda n: cue("<i>" * n + "x")),
    "srt lines": ("a.srt", lambda n: cue("\n".join(["Wort"] * n))),
    "html nested": ("a.html", lambda n: "<p>" + "<b>" * n + "x" + "</b>" * n + "</p>"),
    "html br": ("a.html", lambda n: "<p>" + "a<br>" * n + "</p>"),
    "html crossing": ("a.html", lambda n: "<p>" + "<b>x<i>y</b>z</i>" * n + "</p>"),
    "html comments": ("a.html", lambda n: "<p>" + "a<!-- c -->" * n + "</p>"),
}


def megabyte(shape) -> int:
    """The repetitions that make the shape's document about 1 MB."""
    make = SHAPES[shape][1]
    return 2**20 // (len(make(101)) - len(make(100)))


# compiled packages need a C++ compiler (g++, clang++)
needs_cpp_compiler = pytest.mark.skipif(cpp_compiler() is None, reason="no C++ compiler")
