"""``seq2seq-evaluate`` end to end on tiny random checkpoints (a SentencePiece model trained
on 200 Multi30k lines, as in test_translate): scoring path, outputs, table, named test
sets, and the one-line refusals."""

from __future__ import annotations

import gzip
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import save_tiny_checkpoint

from seq2seq.cli import evaluate as cli
from seq2seq.config import DecodingConfig, TokenizerConfig
from seq2seq.data.tokenizer import Tokenizer, TokenizerPair
from seq2seq.metrics import all_scores
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "multi30k"
SOURCES = [
    "Ein Hund rennt über die Wiese.",
    "Zwei Männer stehen vor einem Haus und reden miteinander über das Wetter.",
    "",  # a blank line keeps its place in the hypothesis file
    "Eine Frau in einem roten Kleid fährt Fahrrad.",
    "Drei Personen sitzen auf einer Bank im Park, während ein Hund spielt.",
]
DECODE = ["--max-len-b", "5"]  # short outputs: fast
DECODING = DecodingConfig(max_len_b=5)  # what DECODE asks for
PREFIX = "seq2seq-evaluate: error: "


pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- tiny checkpoints
def _gz_lines(path: Path, n: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, n)]


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory) -> dict[str, Path]:
    """Two de->en checkpoints with the same file name in different folders, and an en->de one.
    Seed 1 is chosen because its random model writes several words a line (BLEU needs 4-grams)."""
    texts = _gz_lines(DATA / "train.de.gz", 200) + _gz_lines(DATA / "train.en.gz", 200)
    tok = Tokenizer.train(texts, TokenizerConfig(vocab_size=100, num_threads=1))
    tokenizers = TokenizerPair(tok, tok)
    root = tmp_path_factory.mktemp("ckpts")
    return {
        "a": save_tiny_checkpoint(root / "a" / "model.ckpt", tokenizers, seed=1),
        "b": save_tiny_checkpoint(root / "b" / "model.ckpt", tokenizers, seed=2),
        "en-de": save_tiny_checkpoint(root / "en-de.ckpt", tokenizers, seed=1, pair=("en", "de")),
    }


# ---------------------------------------------------------------- helpers
def evaluate(capsys, *argv) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit status, stdout, stderr)."""
    try:
        cli.main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read(path: Path) -> list[str]:
    text = Path(path).read_text(encoding="utf-8")
    assert text.endswith("\n") or not text
    return text.split("\n")[:-1]


def table_rows(out: str) -> list[str]:
    """The header and the rows of the printed table (the signatures follow it)."""
    lines = out.splitlines()
    return lines[: next(i for i, line in enumerate(lines) if line.startswith("BLEU signature"))]


def assert_one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2 and out == ""
    assert err.startswith(PREFIX) and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)


# ---------------------------------------------------------------- end to end
def test_own_hypotheses_as_references_score_100(ckpts, tmp_path, capsys):
    """References = the model's own output: every score is 100, which proves the path from
    source file through decoding to scoring; the JSON and hypothesis file are complete."""
    hyps = Translator.from_checkpoint(ckpts["a"], decoding=DECODING).translate(SOURCES)
    assert max(len(h.split()) for h in hyps) >= 4, "the random model must write 4-grams"
    src, ref = write(tmp_path / "src.de", SOURCES), write(tmp_path / "ref.en", hyps)
    out_json = tmp_path / "results" / "run.json"
    code, out, err = evaluate(capsys, "-m", ckpts["a"], "--src-file", src, "--ref-file", ref,
                              "--json", out_json, "--quiet", *DECODE)
    assert code == 0 and err == ""
    [record] = json.loads(out_json.read_text(encoding="utf-8"))
    for name in ("BLEU", "chrF", "BLEU-lc-tok"):
        assert record[name]["score"] == pytest.approx(100.0)
        assert "nrefs:1" in record[name]["signature"]
    assert "case:mixed" in record["BLEU"]["signature"] and "case:mixed" in record["chrF"]["signature"]
    assert "case:lc" in record["BLEU-lc-tok"]["signature"] and "lowercased" in record["BLEU-lc-tok"]["note"]
    assert record["sentences"] == len(SOURCES) and record["decoding"]["max_len_b"] == 5
    hyp_file = Path(record["hypotheses"])
    assert hyp_file.parent == out_json.parent  # default: next to the JSON
    assert read(hyp_file) == hyps  # one line per source line, blank one included
    # stdout: the table row and the labelled signatures
    _, row = table_rows(out)
    assert row.split()[-4:] == [str(len(SOURCES)), "100.00", "100.00", "100.00"]
    assert record["BLEU-lc-tok"]["signature"] in out and "lowercased" in out


def test_two_checkpoints_one_table(ckpts, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default hypothesis folder is ./hyps
    src, ref = write(tmp_path / "src.de", SOURCES), write(tmp_path / "ref.en", SOURCES)
    code, out, err = evaluate(capsys, "-m", ckpts["a"], ckpts["b"], "--src-file", src,
                              "--ref-file", ref, *DECODE)
    assert code == 0
    header, *rows = table_rows(out)
    assert header.split()[:3] == ["checkpoint", "test", "set"] and len(rows) == 2
    assert rows[0].split()[0].endswith("/a/model.ckpt") and rows[1].split()[0].endswith("/b/model.ckpt")
    assert all(row.split()[1:4] == ["src.de", "de-en", str(len(SOURCES))] for row in rows)
    files = sorted((tmp_path / "hyps").iterdir())
    assert [f.name for f in files] == ["a_model.src.de.greedy.hyp", "b_model.src.de.greedy.hyp"]
    assert all(len(read(f)) == len(SOURCES) for f in files)
    assert read(files[0]) != read(files[1])  # two models, two outputs
    assert "[1/2]" in err and "[2/2]" in err  # progress lines (no --quiet)


def test_named_split_in_each_checkpoints_direction(ckpts, tmp_path, capsys):
    """Multi30k val resolves to {data-dir}/val.{lang}.gz in each checkpoint's direction;
    --limit keeps the first N lines and says so."""
    out_json = tmp_path / "r.json"
    code, out, err = evaluate(capsys, "-m", ckpts["a"], ckpts["en-de"], "--split", "val", "--limit", 3,
                              "--data-dir", DATA, "--json", out_json, "--quiet", *DECODE)
    assert code == 0, err
    de_en, en_de = json.loads(out_json.read_text(encoding="utf-8"))
    assert de_en["test_set"] == "multi30k/val de-en [first 3]"
    assert en_de["test_set"] == "multi30k/val en-de [first 3]"
    assert (Path(de_en["source"]), Path(de_en["reference"])) == (DATA / "val.de.gz", DATA / "val.en.gz")
    assert (Path(en_de["source"]), Path(en_de["reference"])) == (DATA / "val.en.gz", DATA / "val.de.gz")
    assert Path(de_en["hypotheses"]).name == "model.multi30k.val.de-en.first3.greedy.hyp"
    src, ref = _gz_lines(DATA / "val.de.gz", 3), _gz_lines(DATA / "val.en.gz", 3)
    hyps = Translator.from_checkpoint(ckpts["a"], decoding=DECODING).translate(src)
    assert read(Path(de_en["hypotheses"])) == hyps
    assert de_en["BLEU"]["score"] == round(all_scores(hyps, ref)["BLEU"].score, 2)
    assert de_en["sentences"] == en_de["sentences"] == 3


def test_asked_direction_accepted(ckpts, tmp_path, capsys):
    code, out, err = evaluate(capsys, "-m", ckpts["a"], "--src-lang", "de", "--tgt-lang", "en",
                              "--split", "test_2017_mscoco", "--limit", 2, "--data-dir", DATA,
                              "--hyp-dir", tmp_path, "--quiet", *DECODE)
    assert code == 0, err
    assert "multi30k/test_2017_mscoco de-en [first 2]" in out
    assert len(read(tmp_path / "model.multi30k.test_2017_mscoco.de-en.first2.greedy.hyp")) == 2


def test_progress_bar_on_a_terminal(ckpts, tmp_path, capsys, monkeypatch):
    pytest.importorskip("tqdm")
    src = write(tmp_path / "src.de", SOURCES[:2])
    argv = ["-m", ckpts["a"], "--src-file", src, "--ref-file", src, "--hyp-dir", tmp_path, *DECODE]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert "translate:" in evaluate(capsys, *argv)[2]  # tqdm's bar
    assert evaluate(capsys, *argv, "--quiet", "--force")[2] == ""


# ---------------------------------------------------------------- refusals: one line, exit 2
def test_unknown_test_set_via_script(ckpts):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "evaluate.py"), "-m", str(ckpts["a"]), "--test-set", "wmt14"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "--test-set", "'wmt14'", "multi30k")


@pytest.mark.parametrize("argv, needles", [
    (["--split", "test_2018"], ["--split", "'test_2018'", "test_2016_flickr", "val"]),
    (["--split", "train"], ["--split", "'train'"]),  # not a test set
    (["--src-lang", "ja"], ["--source-lang", "'ja'", "fr"]),  # the old spelling: an alias
    (["--src-lang", "de", "--tgt-lang", "de"], ["both 'de'"]),
    (["--src-file", "x.de"], ["--src-file and --ref-file"]),
    (["--src-file", "x.de", "--ref-file", "x.en", "--split", "val"], ["not both"]),
])
def test_bad_test_set_options(ckpts, capsys, argv, needles):
    assert_one_line_error(*evaluate(capsys, "-m", ckpts["a"], *argv), *needles)


def test_wrong_language_pair(ckpts, tmp_path, capsys):
    """Refused before anything is decoded, naming both pairs."""
    hyp_dir = tmp_path / "hyps"
    result = evaluate(capsys, "-m", ckpts["a"], "--src-lang", "en", "--tgt-lang", "de", "--hyp-dir", hyp_dir)
    assert_one_line_error(*result, str(ckpts["a"]), "de->en", "en->de")
    result = evaluate(capsys, "-m", ckpts["a"], ckpts["en-de"], "--src-lang", "de", "--tgt-lang", "en",
                      "--data-dir", DATA, "--hyp-dir", hyp_dir)
    assert_one_line_error(*result, str(ckpts["en-de"]), "en->de", "de->en")
    assert_one_line_error(*evaluate(capsys, "-m", ckpts["a"], "--tgt-lang", "fr"), "de->en", "--target-lang fr")
    assert not hyp_dir.exists()


def test_line_count_mismatch(ckpts, tmp_path, capsys):
    src, ref = write(tmp_path / "src.de", SOURCES[:3]), write(tmp_path / "ref.en", SOURCES[:2])
    result = evaluate(capsys, "-m", ckpts["a"], "--src-file", src, "--ref-file", ref, "--hyp-dir", tmp_path / "h")
    assert_one_line_error(*result, "has 3 lines", "has 2")
    assert not (tmp_path / "h").exists()


def test_missing_checkpoint_and_data(ckpts, tmp_path, capsys):
    assert_one_line_error(*evaluate(capsys, "-m", tmp_path / "nope.ckpt"), "nope.ckpt")
    result = evaluate(capsys, "-m", ckpts["a"], "--data-dir", tmp_path)
    assert_one_line_error(*result, "test_2016_flickr.de.gz")


# ---------------------------------------------------------------- pieces
def test_file_names_tell_checkpoints_apart():
    assert cli.file_names(["x/a.ckpt", "y/b.ckpt"]) == ["a", "b"]
    assert cli.file_names(["runs/p/last.ckpt", "runs/q/last.ckpt"]) == ["p_last", "q_last"]
    assert cli.file_names(["a.ckpt", "./a.ckpt"]) == ["a-1", "a-2"]


def test_constants_agree_with_data():
    from seq2seq.data.sources import MULTI30K_LANGS, MULTI30K_SPLITS

    assert cli.MULTI30K_LANGS == MULTI30K_LANGS
    assert set(cli.EVAL_SPLITS) == set(MULTI30K_SPLITS) - {"train"}
    assert cli.DEFAULT_SPLIT in cli.EVAL_SPLITS
