"""Hostile input, third pass: edited checkpoint sizes, Ctrl-C, closed or endless input,
FIFOs and devices where files are read, and outputs that must not replace a file of
another kind. Each refusal is one line on stderr, exit status 2, no traceback; nothing a
user had is lost. ``seq2seq-train``'s cases are in ``test_reliability_train.py``."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from helpers import run_main, save_tiny_checkpoint, tiny_tokenizers
from test_reliability import assert_refused, snapshot

from seq2seq import checkpoint
from seq2seq.checkpoint import load_checkpoint, seal
from seq2seq.cli import average, evaluate, export, serve, translate

ROOT = Path(__file__).resolve().parents[1]
MAINS = {"translate": translate.main, "evaluate": evaluate.main, "average": average.main,
         "export": export.main, "serve": serve.main}
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("third")
    tokenizers = tiny_tokenizers()
    save_tiny_checkpoint(d / "good.ckpt", tokenizers)
    save_tiny_checkpoint(d / "en_de.ckpt", tokenizers, seed=1, pair=("en", "de"))
    (d / "src.de").write_text("Ein Hund.\nZwei Männer.\n", encoding="utf-8")
    (d / "ref.en").write_text("A dog.\nTwo men.\n", encoding="utf-8")
    return d


def run(command: str, argv: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    return run_main(MAINS[command], argv, stdin)


@contextmanager
def deadline(seconds: int):
    """Fail (rather than hang the suite) when the block blocks, e.g. opening a FIFO."""
    def expire(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------- edited sizes
SIZES = {  # model_config edits that would allocate GBs if a model were built from them
    "d_model 2^20": {"d_model": 2**20},
    "100,000 encoder layers": {"encoder_layers": 100_000},
    "4,000 decoder layers": {"decoder_layers": 4_000},
    "2^40 positions": {"max_positions": 2**40},
    "learned 2^40 positions": {"positional": "learned", "max_positions": 2**40},
    "d_ff 2^30": {"d_ff": 2**30},
    "2^20 heads of 64": {"n_heads": 2**20, "d_k": 64, "d_v": 64},
}


@pytest.fixture(scope="module")
def edited(work, tmp_path_factory) -> dict[str, Path]:
    """Each edit twice: with the checksum left as it was, and re-sealed (as a determined
    editor would): the sizes must be refused from the weights either way."""
    d = tmp_path_factory.mktemp("edited")
    good = torch.load(work / "good.ckpt", weights_only=True)
    paths = {}
    for name, edit in SIZES.items():
        for sealed in (False, True):
            ckpt = copy.deepcopy(good)
            ckpt["seq2seq"]["model_config"].update(edit)
            stem = "".join(c if c.isalnum() else "_" for c in name)  # a name serve accepts
            paths[name, sealed] = d / f"{stem}{'-sealed' if sealed else ''}.ckpt"
            torch.save(seal(ckpt) if sealed else ckpt, paths[name, sealed])
    return paths


def _argv(command: str, ckpt: Path, work: Path, out: Path) -> list[str]:
    return {
        "translate": ["-m", str(ckpt), "Ein Hund."],
        "evaluate": ["-m", str(ckpt), "--src-file", str(work / "src.de"), "--ref-file",
                     str(work / "ref.en"), "--hyp-dir", str(out), "--quiet"],
        "average": ["-o", str(out / "avg.ckpt"), str(ckpt)],
        "export": ["-m", str(ckpt), "--to", "ctranslate2", "-o", str(out / "ct2")],
        "serve": ["-m", str(ckpt), "--port", "0"],
    }[command]


@pytest.mark.parametrize("sealed", [False, True], ids=["checksum kept", "re-sealed"])
@pytest.mark.parametrize("case", list(SIZES))
@pytest.mark.parametrize("command", list(MAINS))
def test_edited_sizes_are_refused_before_any_model_is_built(command, case, sealed, edited, work,
                                                            tmp_path, monkeypatch):
    if command == "serve":
        pytest.importorskip("fastapi")

    def no_model(*_, **__):
        raise AssertionError("a model was built from an unverified config")

    monkeypatch.setattr(checkpoint, "Seq2Seq", no_model)
    start = time.perf_counter()
    line = assert_refused(run(command, _argv(command, edited[case, sealed], work, tmp_path)), command)
    assert "model_config" in line  # the size named, checksum or not
    assert time.perf_counter() - start < 30  # was 7 s for 4,000 layers, GBs for the rest
    assert not list(tmp_path.iterdir())


def test_a_sealed_good_checkpoint_still_loads(work):
    assert load_checkpoint(work / "good.ckpt")["seq2seq"]["src_lang"] == "de"


# ---------------------------------------------------------------- FIFOs, devices, folders
@pytest.mark.parametrize("command", ["translate", "evaluate", "average", "export", "serve"])
def test_a_fifo_as_checkpoint_is_refused_not_waited_on(command, work, tmp_path):
    fifo = tmp_path / "x.ckpt"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    with deadline(60):
        assert_refused(run(command, _argv(command, fifo, work, out)), command, "named pipe (FIFO)")
    assert not out.exists()


@pytest.mark.parametrize("kind", ["directory", "FIFO", "device"])
def test_data_files_that_are_no_files_are_named_as_what_they_are(kind, work, tmp_path):
    path = {"directory": tmp_path, "FIFO": tmp_path / "src.fifo", "device": Path("/dev/zero")}[kind]
    if kind == "FIFO":
        os.mkfifo(path)
    argv = ["-m", str(work / "good.ckpt"), "--src-file", str(path), "--ref-file",
            str(work / "ref.en"), "--hyp-dir", str(tmp_path / "h"), "--quiet"]
    with deadline(60):
        line = assert_refused(run("evaluate", argv), "evaluate", str(path), kind.lower()
                              if kind != "FIFO" else "named pipe (FIFO)")
    assert "not found" not in line


# ---------------------------------------------------------------- input streams
def test_an_endless_line_is_refused_at_a_bounded_length(work):
    with deadline(60):  # read until MemoryError, once
        assert_refused(run("translate", ["-m", str(work / "good.ckpt"), "--input", "/dev/zero"]),
                       "translate", "--input /dev/zero", "line 1", "longer than")
    code, out, err = run("translate", ["-m", str(work / "good.ckpt")],
                         b"Ein Hund.\n" + b"x" * (translate.MAX_LINE_BYTES + 1))
    assert code == 2 and out.count("\n") == 1, err  # the line before it was translated
    assert err.strip().splitlines()[-1].startswith("seq2seq-translate: error: stdin: line 2 ")


def _default_sigint() -> None:
    # Ctrl-C reaches a command started from a terminal; a suite started in the background
    # (``cmd &`` without job control) would hand its children an ignored SIGINT.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cli(command: str, *argv: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", f"seq2seq.cli.{command}", *argv], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_default_sigint, **kwargs)


def test_closed_stdin_reads_as_no_input(work):
    proc = subprocess.run(f"{sys.executable} -m seq2seq.cli.translate -m {work / 'good.ckpt'} <&-",
                          shell=True, executable="/bin/bash", env=ENV, capture_output=True,
                          timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")


def _interrupt(proc: subprocess.Popen, ready) -> tuple[int, bytes, bytes]:
    """SIGINT ``proc`` once ``ready()`` is true; its exit status, stdout and stderr."""
    until = time.monotonic() + 120
    while not ready() and proc.poll() is None and time.monotonic() < until:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_ctrl_c_while_waiting_on_a_fifo_exits_130_quietly(work, tmp_path):
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    proc = _cli("translate", "-m", str(work / "good.ckpt"), "--input", str(fifo))
    writer = []

    def waiting() -> bool:  # a FIFO opens for writing (without blocking) once it has a reader
        try:
            writer.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: no reader yet
            return False
        time.sleep(3)  # past open: the model loads, then the read waits for a line
        return True

    code, out, err = _interrupt(proc, waiting)
    for fd in writer:
        os.close(fd)
    assert (code, out, err) == (130, b"", b"")


def test_ctrl_c_mid_run_exits_130_quietly_with_whole_lines_written(work, tmp_path):
    src = tmp_path / "many.de"
    src.write_text("Ein Hund läuft über die Wiese.\n" * 40 * translate.CHUNK_LINES, encoding="utf-8")
    proc = _cli("translate", "-m", str(work / "good.ckpt"), "--input", str(src))
    first = []  # the first line out: translating is under way
    code, rest, err = _interrupt(proc, lambda: bool(first.append(proc.stdout.readline())) or True)
    written = b"".join(first) + rest
    assert (code, err) == (130, b"")
    assert written.endswith(b"\n") and written.count(b"\n") < 40 * translate.CHUNK_LINES


def test_sigint_to_the_server_exits_130_quietly(work):
    pytest.importorskip("uvicorn")
    proc = _cli("serve", "-m", str(work / "good.ckpt"), "--port", "0", "--log-level", "warning")
    started = []

    def ready() -> bool:
        started.append(proc.stderr.readline())  # "seq2seq-serve: good at http://..."
        return b" at http" in started[-1]

    code, _, err = _interrupt(proc, ready)
    assert code == 130 and b"Traceback" not in err and b"KeyboardInterrupt" not in err, err


def test_ctrl_c_during_the_server_set_up_waits_for_the_set_up(monkeypatch):
    """A SIGINT while uvicorn reconfigures logging (where a KeyboardInterrupt can land between
    a log handler's acquire and release) is held until the set-up is done; then the server does
    not start, the earlier handler is back and gets the interrupt."""
    pytest.importorskip("uvicorn")
    from seq2seq.serving import server as served
    steps, before = [], signal.getsignal(signal.SIGINT)

    def set_up(app, log_level):
        signal.raise_signal(signal.SIGINT)
        steps.append("set up")

    class Server:
        def __init__(self, config):
            steps.append("server")

        def run(self, sockets):
            steps.append("ran")

    monkeypatch.setattr(served, "uvicorn_config", set_up)
    monkeypatch.setattr(served.uvicorn, "Server", Server)
    with pytest.raises(KeyboardInterrupt):
        served.serve(None, None)
    assert steps == ["set up", "server"] and signal.getsignal(signal.SIGINT) is before


def test_ctrl_c_after_the_set_up_before_uvicorns_handlers_stops_the_server(monkeypatch):
    """A SIGINT after the set-up but before uvicorn installs its own handlers (the window in
    ``Server.run`` before ``capture_signals``) asks the server to stop as uvicorn's handler
    would, and the interrupt reaches the earlier handler after it: before, it was recorded
    while the server served on, and Ctrl-C did nothing."""
    pytest.importorskip("uvicorn")
    from seq2seq.serving import server as served
    steps = []

    class Server:
        def __init__(self, config):
            self.should_exit = False

        def run(self, sockets):
            signal.raise_signal(signal.SIGINT)  # before any handler of uvicorn's
            deadline = time.monotonic() + 2.0
            while not self.should_exit and time.monotonic() < deadline:  # its main loop
                time.sleep(0.01)
            steps.append("stopped" if self.should_exit else "served on")

    monkeypatch.setattr(served, "uvicorn_config", lambda app, log_level: None)
    monkeypatch.setattr(served.uvicorn, "Server", Server)
    with pytest.raises(KeyboardInterrupt):
        served.serve(None, None)
    assert steps == ["stopped"]


def test_serve_device_without_it_is_one_line(work):
    pytest.importorskip("fastapi")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert_refused(run("serve", ["-m", str(work / "good.ckpt"), "--port", "0", "--device", "cuda"]),
                   "serve", "--device cuda")


# ---------------------------------------------------------------- outputs of another kind
def test_evaluate_json_naming_its_own_hypothesis_file_is_refused(work, tmp_path):
    hyp = tmp_path / "good.src.de.greedy.hyp"
    argv = ["-m", str(work / "good.ckpt"), "--src-file", str(work / "src.de"), "--ref-file",
            str(work / "ref.en"), "--hyp-dir", str(tmp_path), "--quiet", "--json", str(hyp)]
    for extra in ([], ["--force"]):
        assert_refused(run("evaluate", [*argv, *extra]), "evaluate", str(hyp), "also the")
        assert not hyp.exists()


def test_evaluate_force_replaces_only_its_own_earlier_outputs(work, tmp_path):
    other = tmp_path / "other_model.ckpt"
    other.write_bytes((work / "en_de.ckpt").read_bytes())
    argv = ["-m", str(work / "good.ckpt"), "--src-file", str(work / "src.de"), "--ref-file",
            str(work / "ref.en"), "--hyp-dir", str(tmp_path / "h"), "--quiet", "--force",
            "--max-len-a", "0", "--max-len-b", "3"]
    before = snapshot(tmp_path)
    assert_refused(run("evaluate", [*argv, "--json", str(other)]), "evaluate", "--json", "is not")
    binary = tmp_path / "h" / "good.src.de.greedy.hyp"
    binary.write_bytes(b"\x00\x01 not text")
    assert_refused(run("evaluate", [*argv, "--json", str(tmp_path / "r.json")]), "evaluate",
                   "--hyp-dir", "is not")
    assert snapshot(tmp_path) == before | {"h/good.src.de.greedy.hyp": snapshot(tmp_path)[
        "h/good.src.de.greedy.hyp"]} and not (tmp_path / "r.json").exists()
    binary.unlink()
    for _ in range(2):  # the second run replaces the first one's outputs
        code, _, err = run("evaluate", [*argv, "--json", str(tmp_path / "r.json")])
        assert code == 0, err
    assert json.loads((tmp_path / "r.json").read_text())[0]["sentences"] == 2
    assert snapshot(tmp_path)["other_model.ckpt"] == before["other_model.ckpt"]


def test_average_refuses_two_directions(work, tmp_path):
    out = tmp_path / "avg.ckpt"
    assert_refused(run("average", ["-o", str(out), str(work / "good.ckpt"), str(work / "en_de.ckpt")]),
                   "average", "en->de", "de->en")
    assert not out.exists()


def test_average_checks_the_float16_range_before_writing(work, tmp_path):
    big = tmp_path / "big.ckpt"
    ckpt = torch.load(work / "good.ckpt", weights_only=True)
    key = sorted(k for k in ckpt["state_dict"] if k.endswith("w_q.weight"))[0]
    ckpt["state_dict"][key][0, 0] = 1e6  # finite in float32, inf in float16
    torch.save(seal(ckpt), big)
    out = tmp_path / "half.ckpt"
    assert_refused(run("average", ["-o", str(out), "--dtype", "float16", str(big)]), "average",
                   key.removeprefix("model."), "float16", "1e+06")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["big.ckpt"]
    code, _, err = run("average", ["-o", str(out), "--dtype", "bfloat16", str(big)])
    assert code == 0, err


def test_average_force_replaces_a_checkpoint_only(work, tmp_path):
    notes = tmp_path / "notes.ckpt"
    notes.write_text("precious\n")
    argv = ["--force", str(work / "good.ckpt")]
    assert_refused(run("average", ["-o", str(notes), *argv]), "average", "is not a checkpoint")
    assert notes.read_text() == "precious\n"
    out = tmp_path / "avg.ckpt"
    for _ in range(2):
        code, _, err = run("average", ["-o", str(out), *argv])
        assert code == 0, err
    load_checkpoint(out)


def _photo(path: Path) -> Path:
    from PIL import Image

    Image.new("RGB", (4, 4), "red").save(path, format="PNG")
    return path


def test_plot_attention_replaces_only_its_own_plot_unless_forced(work, tmp_path):
    photo = _photo(tmp_path / "holiday_photo.png")
    before = photo.read_bytes()
    argv = ["-m", str(work / "good.ckpt"), "Ein Hund."]
    assert_refused(run("translate", [*argv, "--plot-attention", str(photo)]), "translate",
                   "holiday_photo.png", "not an attention plot", "--force")
    assert photo.read_bytes() == before
    plot = tmp_path / "attn.png"
    for _ in range(2):  # its own plot: replaced without --force
        code, out, err = run("translate", [*argv, "--plot-attention", str(plot)])
        assert code == 0 and out.count("\n") == 1, err
    code, _, err = run("translate", [*argv, "--plot-attention", str(photo), "--force"])
    assert code == 0, err
    from seq2seq.plotting import is_own_plot

    assert is_own_plot(photo) and is_own_plot(plot) and not is_own_plot(_photo(tmp_path / "p.png"))
    assert_refused(run("translate", [*argv, "--plot-attention", str(work / "good.ckpt"), "--force"]),
                   "translate", "is an input")
    code, out, err = run("translate", [*argv, "--force"])
    assert code == 0 and err == "seq2seq-translate: warning: --force has no effect without --plot-attention\n"
