"""``seq2seq-evaluate`` compares systems as MT papers do: ``--baseline``'s paired tests give
the figures sacreBLEU's own CLI gives for the same hypothesis files, and ``--ensemble``
scores the -m models as one system. The shipped En->De teacher and student, greedy, on the
first 100 sentences of test_2016_flickr."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from seq2seq.cli import evaluate as cli
from seq2seq.cli.common import one_line
from seq2seq.data.sources import read_lines
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[2]
TEACHER, STUDENT = "multi30k_en_de_tiny", "multi30k_en_de_student"
TEACHER_PATH = ROOT / "data" / "models" / f"{TEACHER}.ckpt"
LIMIT = 100
TEST = ["--split", "test_2016_flickr", "--limit", str(LIMIT), "--quiet"]  # greedy: the default
METRICS = {"BLEU": "BLEU", "chrF": "chrF2"}  # ours -> sacreBLEU's name

pytestmark = pytest.mark.usefixtures("one_thread")


def evaluate(*argv) -> tuple[int, str, str]:
    """The CLI in-process: (exit status, stdout, stderr); usable in module fixtures."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main([str(a) for a in argv])
            code = 0
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def run_paired(root: Path, *extra) -> dict:
    """Student and teacher, the teacher (given by path, -m by name) the baseline; the
    records, stdout and the reference lines scored, written as a file for sacreBLEU."""
    code, out, err = evaluate("-m", STUDENT, "-m", TEACHER, "--baseline", TEACHER_PATH, *TEST,
                              "--hyp-dir", root, "--json", root / "r.json", *extra)
    assert code == 0, err
    records = json.loads((root / "r.json").read_text(encoding="utf-8"))
    ref = root / "ref.de"
    ref.write_text("".join(line + "\n" for line in read_lines(Path(records[0]["reference"]))[:LIMIT]),
                   encoding="utf-8")
    return {"records": records, "out": out, "ref": ref}


@pytest.fixture(scope="module")
def paired(tmp_path_factory) -> dict:
    return run_paired(tmp_path_factory.mktemp("paired"))


def sacrebleu(ref: Path, hyps: list[str], *options, seed: int | None = None) -> str:
    """sacreBLEU's own CLI on the hypothesis files, the baseline's first; its seed from
    $SACREBLEU_SEED (unset: its default, 12345)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SACREBLEU")}
    env["NO_COLOR"] = "1"
    if seed is not None:
        env["SACREBLEU_SEED"] = str(seed)
    proc = subprocess.run([sys.executable, "-m", "sacrebleu", str(ref), "-i", *hyps,
                           "-m", "bleu", "chrf", "--no-color", *options],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def bootstrap_text(ref, hyps, n, width, seed=None) -> tuple[list[str], list[str]]:
    """sacreBLEU's --paired-bs table, read from its text format (its --format json fails on
    the bootstrap means, numpy float32, in sacreBLEU 2.6): the "score (mean ± ci)" cells,
    row by row (baseline's BLEU, chrF, then the system's), and the system's p-values."""
    out = sacrebleu(ref, hyps, "--paired-bs", "--paired-bs-n", str(n), "--format", "text",
                    "--width", str(width), seed=seed)
    return (re.findall(r"\d+\.\d+ \(\d+\.\d+ ± \d+\.\d+\)", out), re.findall(r"\(p = (\d\.\d+)\)", out))


def cell(figures: dict, width: int) -> str:
    return f"{figures['score']:.{width}f} ({figures['mean']:.{width}f} ± {figures['ci']:.{width}f})"


def ordered(records) -> list[dict]:
    """The baseline's record first: sacreBLEU takes the first -i file as the baseline."""
    return sorted(records, key=lambda r: r["checkpoint"] != r["paired"]["baseline"])


def paired_rows(out: str) -> list[list[str]]:
    """The paired table's rows after its header, split into cells (two spaces or more apart)."""
    lines = out[out.index("paired tests against"):].splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("system"))
    rows = []
    for line in lines[head + 1:]:
        if line.startswith("p:"):
            return rows
        rows.append(re.split(r"\s{2,}", line.strip()))
    raise AssertionError(out)


# ---------------------------------------------------------------- figures = sacreBLEU's
def test_bootstrap_figures_are_sacrebleus(paired):
    """Scores, bootstrap means, 95% intervals and p-values: the JSON's equal sacreBLEU's
    --paired-bs output to its 4 digits, and the printed table's cells are sacreBLEU's cells
    at 2 digits (p at 4), character for character."""
    records = ordered(paired["records"])
    assert [r["checkpoint"] for r in records] == [TEACHER, STUDENT]  # matched by file
    hyps = [r["hypotheses"] for r in records]
    cells, ps = bootstrap_text(paired["ref"], hyps, 1000, 4)
    ours = [cell(r["paired"][m], 4) for r in records for m in METRICS]
    assert ours == cells
    assert [f"{records[1]['paired'][m]['p_bootstrap']:.4f}" for m in METRICS] == ps
    assert all(records[0]["paired"][m]["p_bootstrap"] is None for m in METRICS)
    cells, ps = bootstrap_text(paired["ref"], hyps, 1000, 2)
    base, system = paired_rows(paired["out"])  # system, BLEU, p (bs), p (ar), chrF, p, p
    assert base[0] == TEACHER and system[0] == STUDENT
    assert [base[1], base[4], system[1], system[4]] == cells
    assert [system[2].rstrip("*"), system[5].rstrip("*")] == ps
    assert base[2:4] == base[5:7] == ["-", "-"]


def test_randomization_p_values_are_sacrebleus(paired):
    """The approximate randomization p-values and the scores equal sacreBLEU's --paired-ar
    JSON (10000 trials, its default seed) exactly, and the table prints them."""
    records = ordered(paired["records"])
    theirs = json.loads(sacrebleu(paired["ref"], [r["hypotheses"] for r in records],
                                  "--paired-ar", "--paired-ar-n", "10000", "--format", "json"))
    for record, their in zip(records, theirs):
        assert record["paired"]["ar_trials"] == 10000 and record["paired"]["seed"] == 12345
        for ours, name in METRICS.items():
            assert record["paired"][ours]["score"] == pytest.approx(their[name]["score"], abs=1e-9)
            assert record["paired"][ours]["p_randomization"] == their[name]["p_value"]
    _, system = paired_rows(paired["out"])
    assert [system[3].rstrip("*"), system[6].rstrip("*")] == [
        f"{theirs[1][name]['p_value']:.4f}" for name in METRICS.values()]


def test_the_options_reach_sacrebleu(tmp_path):
    """--paired-seed, --paired-bs-n and --paired-ar-n are the seed and sample counts sacreBLEU
    uses: other figures than the defaults', equal to sacreBLEU's with $SACREBLEU_SEED."""
    run = run_paired(tmp_path, "--paired-seed", "7", "--paired-bs-n", "300", "--paired-ar-n", "2000")
    records = ordered(run["records"])
    hyps = [r["hypotheses"] for r in records]
    cells, ps = bootstrap_text(run["ref"], hyps, 300, 4, seed=7)
    assert [cell(r["paired"][m], 4) for r in records for m in METRICS] == cells
    assert [f"{records[1]['paired'][m]['p_bootstrap']:.4f}" for m in METRICS] == ps
    theirs = json.loads(sacrebleu(run["ref"], hyps, "--paired-ar", "--paired-ar-n", "2000",
                                  "--format", "json", seed=7))
    assert [records[1]["paired"][m]["p_randomization"] for m in METRICS] == [
        theirs[1][name]["p_value"] for name in METRICS.values()]
    signature = records[1]["paired"]["signatures"]["BLEU"]
    assert "bs:300|seed:7" in signature["bootstrap"] and "ar:2000|seed:7" in signature["randomization"]
    default, _ = bootstrap_text(run["ref"], hyps, 1000, 4)
    assert default != cells  # the options changed the samples


# ---------------------------------------------------------------- ensembles
def test_ensemble_of_one_model_is_that_model(paired, tmp_path):
    code, out, err = evaluate("-m", TEACHER, "--ensemble", *TEST, "--json", tmp_path / "r.json")
    assert code == 0, err
    [record] = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    [teacher] = [r for r in paired["records"] if r["checkpoint"] == TEACHER]
    for name in ("BLEU", "chrF", "BLEU-lc-tok"):
        assert record[name] == teacher[name]
    assert read_lines(Path(record["hypotheses"])) == read_lines(Path(teacher["hypotheses"]))


def test_ensemble_of_two_is_one_system(paired, tmp_path):
    """-m A -m B --ensemble: one row and one record, whose hypotheses are the ensemble's
    (Translator.from_checkpoints), neither member's."""
    code, out, err = evaluate("-m", TEACHER, "-m", STUDENT, "--ensemble", *TEST, "--json", tmp_path / "r.json")
    assert code == 0, err
    [record] = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert record["checkpoint"] == f"{TEACHER} + {STUDENT}" and record["ensemble"] == [TEACHER, STUDENT]
    assert Path(record["hypotheses"]).name.startswith(f"{TEACHER}+{STUDENT}.")
    rows = out[: out.index("BLEU signature")].splitlines()[1:]
    assert len(rows) == 1 and rows[0].startswith(f"{TEACHER} + {STUDENT}")
    src = read_lines(Path(record["source"]))[:LIMIT]
    ensemble = Translator.from_checkpoints([TEACHER_PATH, ROOT / "data/models" / f"{STUDENT}.ckpt"])
    hyps = read_lines(Path(record["hypotheses"]))
    assert hyps == [one_line(h) for h in ensemble.translate(src)]
    members = [read_lines(Path(r["hypotheses"])) for r in paired["records"]]
    assert all(hyps != m for m in members)


def test_models_after_one_flag_or_several():
    parse = cli.build_parser().parse_args
    assert parse(["-m", "a", "-m", "b"]).checkpoint == ["a", "b"]
    assert parse(["-m", "a", "b", "-m", "c"]).checkpoint == ["a", "b", "c"]


# ---------------------------------------------------------------- refusals: one line, exit 2
@pytest.mark.parametrize("argv, needles", [
    (["-m", TEACHER, "-m", STUDENT, "--baseline", "multi30k_de_en_tiny"],
     ["--baseline multi30k_de_en_tiny", "not one of the -m models", STUDENT]),
    (["-m", TEACHER, "-m", STUDENT, "--baseline", "nowhere.ckpt"], ["--baseline nowhere.ckpt"]),
    (["-m", TEACHER, "--baseline", TEACHER], [f"--baseline {TEACHER}", "no other system"]),
    (["-m", TEACHER, "-m", STUDENT, "--ensemble", "--baseline", TEACHER], ["--ensemble", "one system"]),
    (["-m", TEACHER, "-m", "multi30k_de_en_tiny", "--baseline", TEACHER], ["de-en", "multi30k_de_en_tiny"]),
    (["-m", TEACHER, "-m", STUDENT, "--paired-seed", "3"], ["--paired-seed", "--baseline"]),
    (["-m", TEACHER, "-m", STUDENT, "--baseline", TEACHER, "--paired-seed", "0"], ["--paired-seed 0"]),
    (["-m", TEACHER, "-m", STUDENT, "--baseline", TEACHER, "--paired-bs-n", "0"], ["--paired-bs-n"]),
])
def test_bad_comparisons_are_refused_before_decoding(argv, needles, tmp_path):
    code, out, err = evaluate(*argv, *TEST, "--hyp-dir", tmp_path / "hyps")
    assert code == 2 and out == "" and err.startswith("seq2seq-evaluate: error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not (tmp_path / "hyps").exists()  # nothing decoded, nothing written
