"""``seq2seq-average``: which checkpoints of a run it averages (each step once, the window it
covers said), and what it refuses in one line (exit 2, nothing written): outputs that are
inputs or no checkpoint, folders without snapshots, weights that do not average, two
directions, values float16 cannot hold."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from helpers import (
    assert_refused,
    run_command,
    run_main,
    snapshot,
)

from seq2seq.checkpoint import load_checkpoint, seal
from seq2seq.cli import average as average_cli


def _save_variant(src: Path, dst: Path, fn) -> Path:
    ckpt = torch.load(src, weights_only=True)
    fn(ckpt)
    torch.save(seal(ckpt), dst)  # a consistent checkpoint, just not compatible
    return dst


@pytest.fixture(scope="module")
def snapshots(work, tmp_path_factory) -> Path:
    """A checkpoint folder as training leaves it: two step snapshots, a re-written step
    (``-v1``), last.ckpt."""
    d = tmp_path_factory.mktemp("snaps")
    for name, src in (("step000004.ckpt", "good.ckpt"), ("step000008.ckpt", "good2.ckpt"),
                      ("step000008-v1.ckpt", "good2.ckpt"), ("last.ckpt", "good2.ckpt")):
        (d / name).write_bytes((work / src).read_bytes())
    return d


def test_average_last_n_counts_each_step_once_and_warns_when_short(snapshots, tmp_path):
    out = tmp_path / "avg.ckpt"
    code, _, err = run_command("average", ["-o", str(out), "--last", "10", str(snapshots)])
    assert code == 0, err
    assert "--last 10" in err and "holds only 2 step checkpoints" in err and "averaging 2\n" in err
    assert err.strip().endswith(f"averaged 2 checkpoints -> {out}")
    assert [Path(p).name for p in load_checkpoint(out)["seq2seq"]["averaged_from"]] == \
        ["step000004.ckpt", "step000008-v1.ckpt"]


@pytest.mark.parametrize("case", ["output is a directory", "output is an input", "output exists",
                                  "output under a file", "--last 0", "folder without --last",
                                  "--last with two folders", "empty folder", "incomplete weights",
                                  "wrong shape", "mixed dtypes", "other tokenizer",
                                  "one file twice"])
def test_average_refusals(case, work, snapshots, tmp_path, other_tokenizers):
    good, good2 = str(work / "good.ckpt"), str(work / "good2.ckpt")
    key = "model.decoder.layers.0.cross_attn.w_q.weight"
    variants = {
        "incomplete weights": lambda c: c["state_dict"].pop(key),
        "wrong shape": lambda c: c["state_dict"].__setitem__(key, torch.zeros(3, 3)),
        "mixed dtypes": lambda c: c["state_dict"].update({k: v.half() for k, v in c["state_dict"].items()}),
        "other tokenizer": lambda c: c["seq2seq"].__setitem__("tokenizers", other_tokenizers.to_state()),
    }
    (tmp_path / "empty").mkdir()
    (tmp_path / "exists.ckpt").write_bytes(b"precious")
    (tmp_path / "afile").write_text("x")
    argv, words = {
        "output is a directory": (["-o", str(tmp_path), good, good2], ["directory"]),
        "output is an input": (["-o", good2, good, good2], ["one of the inputs"]),
        "output exists": (["-o", str(tmp_path / "exists.ckpt"), good, good2], ["--force"]),
        "output under a file": (["-o", str(tmp_path / "afile" / "x.ckpt"), good, good2], []),
        "--last 0": (["-o", str(tmp_path / "a.ckpt"), "--last", "0", str(snapshots)], ["--last"]),
        "folder without --last": (["-o", str(tmp_path / "a.ckpt"), str(snapshots)], ["--last N"]),
        "--last with two folders": (["-o", str(tmp_path / "a.ckpt"), "--last", "2", str(snapshots),
                                     str(snapshots)], ["one folder"]),
        "empty folder": (["-o", str(tmp_path / "a.ckpt"), "--last", "2", str(tmp_path / "empty")],
                         ["no step checkpoints"]),
        "one file twice": (["-o", str(tmp_path / "a.ckpt"), good, good2,
                            str(Path(good).parent / "." / Path(good).name)], ["same file", "once"]),
    }.get(case, (None, None))
    if case in variants:
        _save_variant(Path(good2), tmp_path / "v.ckpt", variants[case])
        argv, words = ["-o", str(tmp_path / "a.ckpt"), good, str(tmp_path / "v.ckpt")], []
    before = snapshot(work) | snapshot(snapshots) | snapshot(tmp_path)
    assert_refused(run_command("average", argv), "average", *words)
    assert snapshot(work) | snapshot(snapshots) | snapshot(tmp_path) == before  # nothing written


def test_average_force_replaces_a_checkpoint_but_never_an_input(work, tmp_path):
    """--force replaces an earlier checkpoint (an earlier output), never a file that is no
    checkpoint, nor one of the inputs."""
    notes = tmp_path / "notes.ckpt"
    notes.write_text("precious\n")
    argv = ["--force", str(work / "good.ckpt")]
    assert_refused(run_command("average", ["-o", str(notes), *argv]), "average", "is not a checkpoint")
    assert notes.read_text() == "precious\n"
    out = tmp_path / "avg.ckpt"
    out.write_bytes((work / "good2.ckpt").read_bytes())  # an earlier output
    for _ in range(2):
        code, _, err = run_command("average", ["-o", str(out), *argv])
        assert code == 0, err
    load_checkpoint(out)
    before = snapshot(work)
    assert_refused(run_command("average", ["-o", str(work / "good.ckpt"), *argv, str(work / "good2.ckpt")]),
                   "average", "one of the inputs")
    assert snapshot(work) == before

def test_average_refuses_two_directions(work, tmp_path):
    out = tmp_path / "avg.ckpt"
    assert_refused(run_command("average", ["-o", str(out), str(work / "good.ckpt"), str(work / "en_de.ckpt")]),
                   "average", "en->de", "de->en")
    assert not out.exists()


def test_average_checks_the_float16_range_before_writing(work, tmp_path):
    big = tmp_path / "big.ckpt"
    ckpt = torch.load(work / "good.ckpt", weights_only=True)
    key = sorted(k for k in ckpt["state_dict"] if k.endswith("w_q.weight"))[0]
    ckpt["state_dict"][key][0, 0] = 1e6  # finite in float32, inf in float16
    torch.save(seal(ckpt), big)
    out = tmp_path / "half.ckpt"
    assert_refused(run_command("average", ["-o", str(out), "--dtype", "float16", str(big)]), "average",
                   key.removeprefix("model."), "float16", "1e+06")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["big.ckpt"]
    code, _, err = run_command("average", ["-o", str(out), "--dtype", "bfloat16", str(big)])
    assert code == 0, err


def test_average_of_a_missing_folder_says_so(tmp_path):
    (tmp_path / "runs" / "x" / "checkpoints").mkdir(parents=True)
    missing = tmp_path / "runs" / "x" / "lightning_logs" / "version_0" / "checkpoints"
    code, _, err = run_main(average_cli.main, ["-o", str(tmp_path / "a.ckpt"), "--last", "10", str(missing)])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{missing}: no such folder" in err
    assert f"this run's checkpoints are in {tmp_path / 'runs' / 'x' / 'checkpoints'}" in err


def test_average_warns_when_the_window_is_most_of_the_run(tmp_path, work):
    """The quickstart's case: --last 10 over a 1,000-update run's 3 snapshots."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for step in (500, 750, 1000):
        shutil.copy(work / "good.ckpt", folder / f"step{step:06d}-bleu3{step // 250}.00.ckpt")
    shutil.copy(work / "good.ckpt", folder / "last.ckpt")
    code, _, err = run_main(average_cli.main, ["-o", str(tmp_path / "avg.ckpt"), "--last", "10", str(folder)])
    assert code == 0 and (tmp_path / "avg.ckpt").is_file()
    lines = err.strip().splitlines()
    assert any("holds only 3" in line for line in lines)
    assert any("steps 500-1000" in line and "75% of this run's 1000 updates" in line for line in lines), err


def test_average_of_a_runs_tail_has_no_window_warning(tmp_path):
    for step in range(250, 10001, 250):
        (tmp_path / f"step{step:06d}.ckpt").touch()
    chosen = average_cli.select(tmp_path, last=10, best=None)
    assert average_cli.window_note(tmp_path, chosen) is None  # 10 x 250 of 10,000: 25%
    assert average_cli.window_note(tmp_path, average_cli.select(tmp_path, last=20, best=None))
