"""``Translator``, the attention plot and the ``seq2seq-translate`` CLI, on a checkpoint built
from a tiny random model and a tiny SentencePiece model trained on 200 Multi30k lines."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from helpers import save_tiny_checkpoint, tiny_random_model

from seq2seq.cli.translate import decoding_from_args
from seq2seq.cli.translate import main as cli_main
from seq2seq.config import DecodingConfig, TokenizerConfig
from seq2seq.data.tokenizer import Tokenizer, TokenizerPair, check_tokenizers
from seq2seq.files import save_atomic
from seq2seq.plotting import plot_attention
from seq2seq.translation import translator as translate_module
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "multi30k"
SENTENCES = [
    "Ein Hund rennt über die Wiese.",
    "Zwei Männer stehen vor einem Haus und reden miteinander über das Wetter.",
    "Kinder.",
    "Eine Frau in einem roten Kleid fährt Fahrrad.",
    "Ein Mann.",
    "Drei Personen sitzen auf einer Bank im Park, während ein Hund spielt.",
]


def _lines(path: Path, n: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, n)]


@pytest.fixture(scope="module")
def tokenizers() -> TokenizerPair:
    texts = _lines(DATA / "train.de.gz", 200) + _lines(DATA / "train.en.gz", 200)
    tok = Tokenizer.train(texts, TokenizerConfig(vocab_size=100, num_threads=1))
    return TokenizerPair(tok, tok)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tokenizers) -> Path:
    return save_tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny.ckpt", tokenizers)


def translator(checkpoint, **decoding) -> Translator:
    cfg = DecodingConfig(**{"max_len_a": 1.0, "max_len_b": 5, **decoding})
    return Translator.from_checkpoint(checkpoint, decoding=cfg)


# ---------------------------------------------------------------- Translator
@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_order_restored_across_batches(checkpoint, method):
    small = translator(checkpoint, method=method, beam_size=3, max_tokens=20)  # many batches
    batched = small.translate(SENTENCES)
    assert batched == [small.translate([s])[0] for s in SENTENCES]
    assert len(list(small._batches(list(range(6)), small._source_ids(SENTENCES)[0]))) > 2


def test_blank_lines_skip_the_model(checkpoint, monkeypatch):
    t = translator(checkpoint)

    def no_search(*args, **kwargs):
        raise AssertionError("the model was called for blank input")

    monkeypatch.setattr(translate_module, "search", no_search)
    assert t.translate(["", "   ", "\t \u3000"]) == ["", "", ""]
    assert t.translate([]) == []


def test_blank_lines_keep_their_place(checkpoint):
    t = translator(checkpoint)
    out = t.translate(["", SENTENCES[0], " ", SENTENCES[1], ""])
    assert out[0] == out[2] == out[4] == "" and out[1:4:2] == t.translate(SENTENCES[:2])


def translate_quietly(t: Translator, texts: list[str]) -> list:
    """``t.translate_full`` that fails on any warning (e.g. an unexpected truncation)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return t.translate_full(texts)


def assert_same_results(got: list, want: list) -> None:
    """Same texts and scores: the random model's texts alone barely depend on the source
    (it repeats a few pieces), its scores do."""
    assert [r.hyp for r in got] == [r.hyp for r in want]
    assert [r.score for r in got] == pytest.approx([r.score for r in want], abs=1e-5)


def test_overlong_source_is_truncated_with_one_warning(checkpoint, tokenizers):
    # one sentence a line (a long sentence is cut at clauses first: tests/translation/test_paragraphs.py)
    t, tok = translator(checkpoint, split_sentences=False), tokenizers.src
    limit = t.model.arch.max_positions - 1  # room for the EOS collate_src appends
    long = "Ein Hund rennt über die Wiese und " * 300  # 10,200 characters, 6,600 tokens
    ids = tok.encode([long])[0]
    assert len(ids) > limit and tok.encode([long[:10_000]])[0][:limit + 1] == ids[:limit + 1]
    # The same line cut by hand to `limit` tokens, and to one token more.
    at_limit, one_over = tok.decode([ids[:limit], ids[:limit + 1]])
    assert tok.encode([at_limit, one_over]) == [ids[:limit], ids[:limit + 1]]
    expected = translate_quietly(t, [at_limit])  # exactly at the limit: no cut, no warning
    alone = translate_quietly(t, ["Kinder."])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = t.translate_full([long[:10_000], "Kinder.", long])
    assert [str(w.message) for w in caught] == [  # one warning per call, naming the count
        f"2 source line(s) longer than {limit} tokens were truncated to {limit}"]
    # Cut lines translate as if cut by hand (their head, not their tail); the other line
    # in the call is unaffected.
    assert_same_results(out, expected + alone + expected)
    # ... which tells a cut one token short apart (the comparison can fail).
    shorter = translate_quietly(t, tok.decode([ids[:limit - 1]]))[0]
    assert shorter.score != pytest.approx(expected[0].score, abs=1e-4)
    with pytest.warns(UserWarning, match=f"^1 source line\\(s\\) longer than {limit} tokens"):
        assert_same_results(t.translate_full([one_over]), expected)


def test_emoji_and_control_characters(checkpoint, tokenizers):
    # what the model sees of each line (split, text without words never reaches it:
    # tests/translation/test_paragraphs.py)
    t = translator(checkpoint, method="beam", beam_size=2, split_sentences=False)
    tok = tokenizers.src
    odd = ["Ein Hund 🐶 rennt 🙂", "a\x00b\x07c\x1bd", "\u200b", "🙂🙂🙂", "ünïcödé \u202e text", "\x0c"]
    results = t.translate_full(odd, need_attention=True)
    assert [r.src for r in results] == odd  # one result per line, in order
    assert t.translate(odd) == [r.hyp for r in results]
    # No line leaks into another: each translates as it does alone.
    assert_same_results(results, [translate_quietly(t, [line])[0] for line in odd])
    # The model sees exactly the tokenizer's pieces (then EOS); no byte fallback here, so
    # characters outside the vocabulary are <unk> (id 1), one per run of them.
    for line, r in zip(odd, results):
        ids = tok.encode([line])[0]
        assert r.src_pieces == (tok.id_to_piece(ids) + ["</s>"] if ids else []), repr(line)
    assert tok.unk_id == 1 and tok.id_to_piece([1]) == ["<unk>"]
    assert tok.encode(["🙂🙂🙂"])[0][-1] == 1 and results[3].src_pieces[-2:] == ["<unk>", "</s>"]
    assert results[0].src_pieces.count("<unk>") == 2  # 🐶 and 🙂
    assert "<unk>" in results[1].src_pieces  # NUL; the other control characters are normalized away
    # Text the normalizer removes entirely (zero-width space, form feed) translates to "".
    assert [r.hyp for r in results[2::3]] == ["", ""] and results[2].src_pieces == results[5].src_pieces == []


def test_each_sentence_is_tokenized_once_and_results_are_unchanged(checkpoint, monkeypatch):
    """The sentence plan's lengths and the model's ids come from one SentencePiece call per
    distinct sentence of a call (repeats included), and the results are those of encoding
    every time (the route before: lengths, then ids, each encoded anew)."""
    texts = [f"{SENTENCES[0]} {SENTENCES[1]}", SENTENCES[0], "", f"{SENTENCES[2]}\n\n{SENTENCES[0]}"]
    t = translator(checkpoint, method="beam", beam_size=2)
    sp = t.tokenizers.src._sp
    asked: list[str] = []
    real = sp.encode
    monkeypatch.setattr(sp, "encode", lambda x, **kw: asked.extend([x] if isinstance(x, str) else x)
                        or real(x, **kw))
    got = t.translate_full(texts)
    assert len(asked) == len(set(asked)) == 3  # the three distinct sentences, once each
    Tokenizer = type(t.tokenizers.src)
    monkeypatch.setattr(Tokenizer, "encode_once", lambda self, xs, known=None: self.encode(xs))
    assert_same_results(got, t.translate_full(texts))
    assert len(asked) > 6  # the plain route encodes again: the count above is the memo's


def test_mode_restored_and_validation_call(checkpoint, tokenizers):
    model = tiny_random_model(tokenizers.src.vocab_size)
    model.train()
    t = Translator(model, tokenizers, DecodingConfig(method="greedy"))  # what validation does
    first = t.translate(SENTENCES[:2])
    assert model.training  # put back
    assert t.translate(SENTENCES[:2]) == first  # dropout was off while decoding
    model.eval()
    t.translate(SENTENCES[:1])
    assert not model.training


def test_translate_full_nbest_and_scores(checkpoint):
    t = translator(checkpoint, method="beam", beam_size=4, nbest=3)
    results = t.translate_full(SENTENCES[:3] + [""])
    for r in results[:3]:
        assert len(r.nbest) == 3 and r.nbest[0] == (r.hyp, r.score)
        assert [s for _, s in r.nbest] == sorted((s for _, s in r.nbest), reverse=True)
        assert r.log_prob <= 0.0
    assert results[3].hyp == "" and results[3].nbest == [("", 0.0)]


def test_sampling_reproducible_whatever_the_batching(checkpoint):
    a = translator(checkpoint, method="sample", seed=3).translate(SENTENCES)
    assert a == translator(checkpoint, method="sample", seed=3).translate(SENTENCES)


def test_tokenizer_mismatch_is_refused(checkpoint, tokenizers):
    other = Tokenizer.train(_lines(DATA / "train.en.gz", 100), TokenizerConfig(vocab_size=90, num_threads=1))
    with pytest.raises(ValueError, match="src tokenizer mismatch"):
        check_tokenizers(tokenizers, TokenizerPair(other, other))
    check_tokenizers(tokenizers, tokenizers)
    ckpt = torch.load(checkpoint, weights_only=True)
    ckpt["seq2seq"]["tokenizers"]["src"]["sha256"] = "0" * 64  # bytes no longer match
    bad = checkpoint.with_name("bad_tok.ckpt")
    save_atomic(ckpt, bad)
    with pytest.raises(ValueError, match="fingerprint"):
        Translator.from_checkpoint(bad)


def test_the_model_is_built_once_and_is_the_checkpoints(checkpoint, monkeypatch):
    """Loading builds one ``Seq2Seq`` (the verification's, filled with the weights), equal to
    ``build_model`` of the loaded file: same weights, same translations."""
    from seq2seq.checkpoint import build_model, load_checkpoint
    from seq2seq.model import transformer

    reference = build_model(load_checkpoint(checkpoint))
    built, init = [], transformer.Seq2Seq.__init__
    monkeypatch.setattr(transformer.Seq2Seq, "__init__",
                        lambda self, arch: (built.append(arch), init(self, arch))[1])
    t = translator(checkpoint)
    assert len(built) == 1 and not t.model.training
    assert t.model.state_dict().keys() == reference.state_dict().keys()
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in t.model.state_dict().items())
    assert t.translate(SENTENCES) == Translator(reference, t.tokenizers, t.decoding).translate(SENTENCES)


# ---------------------------------------------------------------- attention plot
@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_attention_plot(checkpoint, tmp_path, method):
    import matplotlib.image

    t = translator(checkpoint, method=method, beam_size=3)
    r = t.translate_full(["Ein Hund."], need_attention=True)[0]  # short: plotting is slow
    assert r.src_pieces[-1] == "</s>" and r.tgt_pieces[-1] == "</s>"
    path = plot_attention(r.src_pieces, r.tgt_pieces, r.attention, tmp_path / "attn.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 300 and image.shape[1] > 300 and image.std() > 0.05
    with pytest.raises(ValueError, match="labels"):
        plot_attention(r.src_pieces[:-1], r.tgt_pieces, r.attention, tmp_path / "bad.png")


# ---------------------------------------------------------------- CLI
def run_cli(monkeypatch, capsys, argv, stdin=""):
    fake = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", fake)
    cli_main(argv)
    return capsys.readouterr()


def test_cli_one_line_out_per_line_in(checkpoint, monkeypatch, capsys):
    stdin = "Ein Hund rennt.\n\nZwei Männer 🐶\n   \nEin Mann\r\nKinder."  # no final newline
    out = run_cli(monkeypatch, capsys, ["-m", str(checkpoint), "--max-len-b", "5"], stdin).out
    lines = out.split("\n")
    assert lines[-1] == "" and len(lines) - 1 == 6
    assert lines[1] == "" and lines[3] == ""


def test_cli_arguments_and_jsonl(checkpoint, monkeypatch, capsys, tmp_path):
    argv = ["-m", str(checkpoint), "--beam", "3", "--nbest", "2", "--output-format", "jsonl",
            "--max-len-b", "5", "--plot-attention", str(tmp_path / "a.png")]
    out = run_cli(monkeypatch, capsys, [*argv, "Ein Hund.", "", SENTENCES[2]]).out
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["src"] for r in records] == ["Ein Hund.", "", SENTENCES[2]]
    assert all(set(r) == {"src", "hyp", "score", "confidence", "flags", "nbest"} for r in records)
    assert len(records[0]["nbest"]) == 2 and records[0]["nbest"][0]["hyp"] == records[0]["hyp"]
    assert (tmp_path / "a.png").stat().st_size > 10_000
    src = tmp_path / "in.txt"
    src.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    out = run_cli(monkeypatch, capsys, ["-m", str(checkpoint), "--input", str(src), "--max-len-b", "5"]).out
    assert len(out.splitlines()) == len(SENTENCES)


def test_cli_flags_map_onto_decoding_config():
    from seq2seq.cli.translate import build_parser

    parse = build_parser().parse_args
    assert decoding_from_args(parse(["-m", "x"])) == DecodingConfig()
    cfg = decoding_from_args(parse(["-m", "x", "--beam", "4", "--lenpen", "1.0", "--max-len-a", "2"]))
    assert (cfg.method, cfg.beam_size, cfg.alpha, cfg.max_len_a) == ("beam", 4, 1.0, 2.0)
    cfg = decoding_from_args(parse(["-m", "x", "--sample", "--topk", "5", "--topp", "0.9", "--seed", "1"]))
    assert (cfg.method, cfg.top_k, cfg.top_p, cfg.seed) == ("sample", 5, 0.9, 1)
    assert decoding_from_args(parse(["-m", "x", "--beam", "1"])) == DecodingConfig(method="greedy")
    assert decoding_from_args(parse(["-m", "x", "--beam-size", "3"])).beam_size == 3  # alias
    assert parse(["-m", "x", "--beam", "3"]).beam_size == 3


@pytest.mark.parametrize("command", ["translate", "evaluate"])
@pytest.mark.parametrize("beam", ["0", "-1"])
@pytest.mark.parametrize("flag", ["--beam", "--beam-size"])
def test_cli_beam_below_one_is_an_error(checkpoint, capsys, command, beam, flag):
    """Not greedy in disguise: one line naming the flag and the value, exit status 2,
    before any decoding (shared by seq2seq-translate and seq2seq-evaluate)."""
    from seq2seq.cli import evaluate

    main = {"translate": cli_main, "evaluate": evaluate.main}[command]
    with pytest.raises(SystemExit) as exit_:
        main(["-m", str(checkpoint), flag, beam, *(["Hallo"] if command == "translate" else [])])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err == f"seq2seq-{command}: error: --beam {beam}: the beam size must be >= 1 (1 = greedy)\n"


@pytest.mark.parametrize("problem", ["missing", "garbage", "bad-flag"])
def test_cli_errors_exit_2_with_one_line(tmp_path, checkpoint, problem):
    ckpt = {"missing": tmp_path / "nope.ckpt", "garbage": tmp_path / "garbage.ckpt",
            "bad-flag": checkpoint}[problem]
    (tmp_path / "garbage.ckpt").write_bytes(b"not a checkpoint\n" * 10)
    extra = ["--beam", "2", "--nbest", "3"] if problem == "bad-flag" else []
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "translate.py"), "-m", str(ckpt), *extra, "Hallo"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("seq2seq-translate: error: ")


def test_one_sentence_imports_nothing_it_does_not_use(checkpoint):
    """A one-sentence translation loads torch, the model and its tokenizers; not the
    training, data, plotting, scoring or serving stacks (each costs start-up time)."""
    heavy = ["lightning", "pytorch_lightning", "datasets", "matplotlib", "sacrebleu", "fastapi",
             "uvicorn", "pandas", "pyarrow", "transformers", "docx"]
    code = ("import sys\nfrom seq2seq.cli.translate import main\n"
            f"main(['-m', {str(checkpoint)!r}, '--max-len-b', '3', 'Ein Hund rennt.'])\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                                            "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"
