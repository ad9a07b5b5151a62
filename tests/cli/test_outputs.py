"""What the commands write never replaces a file a user had: ``seq2seq-evaluate``'s hypothesis
and --json files, ``seq2seq-translate --plot-attention``'s plot and ``seq2seq-export``'s folder
are checked before any decoding; --force replaces only the command's own earlier output,
never an input or a file of another kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import assert_refused, run_command, snapshot


@pytest.mark.parametrize("target", ["json-dir", "json-is-src", "json-is-ckpt", "hyp-dir-is-file"])
def test_evaluate_outputs_checked_before_decoding(target, work, tmp_path, monkeypatch):
    from seq2seq.translation import translator

    def no_decoding(*a, **k):
        raise AssertionError("decoding started")

    monkeypatch.setattr(translator.Translator, "translate", no_decoding)
    (tmp_path / "file").write_text("x")
    out = {"json-dir": ["--json", str(tmp_path)],
           "json-is-src": ["--json", str(work / "src.de")],
           "json-is-ckpt": ["--json", str(work / "good.ckpt")],
           "hyp-dir-is-file": ["--hyp-dir", str(tmp_path / "file")]}[target]
    before = snapshot(work)
    argv = ["-m", str(work / "good.ckpt"), "--src-file", str(work / "src.de"),
            "--ref-file", str(work / "ref.en"), "--quiet", *out]
    assert_refused(run_command("evaluate", argv), "evaluate", out[0])
    assert snapshot(work) == before


def test_evaluate_json_naming_its_own_hypothesis_file_is_refused(work, tmp_path):
    hyp = tmp_path / "good.src.de.greedy.hyp"
    argv = ["-m", str(work / "good.ckpt"), "--src-file", str(work / "src.de"), "--ref-file",
            str(work / "ref.en"), "--hyp-dir", str(tmp_path), "--quiet", "--json", str(hyp)]
    for extra in ([], ["--force"]):
        assert_refused(run_command("evaluate", [*argv, *extra]), "evaluate", str(hyp), "also the")
        assert not hyp.exists()


def test_evaluate_replaces_only_its_own_earlier_outputs_only_with_force(work, tmp_path):
    """An output that exists is refused before decoding (a user's file of that name must not
    vanish); --force replaces the command's own earlier outputs, never a checkpoint or a
    binary file. Greedy and beam outputs of one model and test set get different names, so
    neither replaces the other."""
    other = tmp_path / "other_model.ckpt"
    other.write_bytes((work / "en_de.ckpt").read_bytes())
    hyp, report = tmp_path / "h" / "good.src.de.greedy.hyp", tmp_path / "r.json"
    hyp.parent.mkdir()
    hyp.write_text("precious\n")
    argv = ["-m", str(work / "good.ckpt"), "--src-file", str(work / "src.de"), "--ref-file",
            str(work / "ref.en"), "--hyp-dir", str(hyp.parent), "--quiet", "--max-len-a", "0",
            "--max-len-b", "3"]
    before = snapshot(tmp_path)
    assert_refused(run_command("evaluate", argv), "evaluate", "exists", "--force")
    assert_refused(run_command("evaluate", [*argv, "--force", "--json", str(other)]), "evaluate",
                   "--json", "is not")
    hyp.write_bytes(b"\x00\x01 not text")
    assert_refused(run_command("evaluate", [*argv, "--force", "--json", str(report)]), "evaluate",
                   "--hyp-dir", "is not")
    hyp.write_text("precious\n")
    assert snapshot(tmp_path) == before and not report.exists()
    for _ in range(2):  # the second run replaces the first one's outputs
        code, _, err = run_command("evaluate", [*argv, "--force", "--json", str(report)])
        assert code == 0, err
    assert hyp.read_text() != "precious\n" and json.loads(report.read_text())[0]["sentences"] == 2
    code, _, err = run_command("evaluate", [*argv, "--beam", "2"])
    assert code == 0, err
    assert sorted(p.name for p in hyp.parent.glob("*.hyp")) == ["good.src.de.beam2.hyp", hyp.name]
    assert snapshot(tmp_path)["other_model.ckpt"] == before["other_model.ckpt"]

def _photo(path: Path) -> Path:
    from PIL import Image

    Image.new("RGB", (4, 4), "red").save(path, format="PNG")
    return path


def test_plot_attention_replaces_only_its_own_plot_unless_forced(work, tmp_path):
    """An earlier attention plot is replaced; another picture only with --force; an input
    (the checkpoint, the --input file) never, --force or not."""
    from seq2seq.plotting import is_own_plot

    photo = _photo(tmp_path / "holiday_photo.png")
    src = tmp_path / "src.txt"
    src.write_text("Ein Hund.\n")
    argv = ["-m", str(work / "good.ckpt"), "--input", str(src)]
    before = snapshot(tmp_path)
    assert_refused(run_command("translate", [*argv, "--plot-attention", str(photo)]), "translate",
                   "holiday_photo.png", "not an attention plot", "--force")
    for path in (work / "good.ckpt", src):
        for force in ([], ["--force"]):
            assert_refused(run_command("translate", [*argv, "--plot-attention", str(path), *force]),
                           "translate", "is an input")
    assert snapshot(tmp_path) == before
    plot = tmp_path / "attn.png"
    for _ in range(2):  # its own plot: replaced without --force
        code, out, err = run_command("translate", [*argv, "--plot-attention", str(plot)])
        assert code == 0 and out.count("\n") == 1, err
    code, _, err = run_command("translate", [*argv, "--plot-attention", str(photo), "--force"])
    assert code == 0, err
    assert is_own_plot(photo) and is_own_plot(plot) and not is_own_plot(_photo(tmp_path / "p.png"))
    code, out, err = run_command("translate", [*argv, "--force"])
    assert code == 0 and err == "seq2seq-translate: warning: --force has no effect without --plot-attention\n"

def test_export_force_replaces_only_its_own_folder(work, tmp_path):
    pytest.importorskip("ctranslate2")
    ckpt = str(work / "good.ckpt")
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("model.bin", "config.json"):  # named like export files, but the user's
        (mine / name).write_text("precious")
    before = snapshot(mine)
    assert_refused(run_command("export", ["-m", ckpt, "--to", "ctranslate2", "-o", str(mine), "--force"]),
                   "export", "not a ctranslate2 export written by seq2seq-export")
    assert snapshot(mine) == before
    out = tmp_path / "ct2"
    for _ in range(2):  # the second time over its own previous export: replaced
        code, _, err = run_command("export", ["-m", ckpt, "--to", "ctranslate2", "-o", str(out), "--force"])
        assert code == 0, err
    assert_refused(run_command("export", ["-m", ckpt, "--to", "hf-marian", "-o", str(out), "--force"]),
                   "export")
    assert (out / "model.bin").stat().st_size > 1000
