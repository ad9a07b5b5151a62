"""``seq2seq-import`` on hostile folders and outputs: every broken file is one line naming
it (exit 2, no traceback) before anything is built, nothing outside the output is touched,
the output is never an input or anything but a regular file, and language codes are codes.
Ends with a Hypothesis test mutating a valid folder file by file."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import stat
from pathlib import Path

import pytest
import torch
from helpers import run_main
from hypothesis import event, given, settings
from hypothesis import strategies as st
from opus_mt import build_opus_folder

pytest.importorskip("transformers")
pytest.importorskip("google.protobuf")
from seq2seq.checkpoint import CheckpointError, load_checkpoint, seal  # noqa: E402
from seq2seq.cli.import_hf import main  # noqa: E402
from seq2seq.files import save_atomic  # noqa: E402


@pytest.fixture(scope="module")
def opus(tmp_path_factory) -> Path:
    return build_opus_folder(tmp_path_factory.mktemp("hostile") / "opus-mt-de-en")


def copy(opus: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(opus, tmp_path / "opus-mt-de-en"))


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def refused(argv: list[str]) -> str:
    """The one stderr line of a refusal (exit 2); fails on a traceback (run_main re-raises)."""
    code, out, err = run_main(main, argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    assert lines[0].startswith("seq2seq-import: error: ")
    return lines[0]


# ---------------------------------------------------------------- outputs
def test_output_that_is_an_input_is_refused_even_with_force(opus, tmp_path):
    folder = copy(opus, tmp_path)
    before = digest(folder)
    for target in ("model.safetensors", "vocab.json", "target.spm"):
        line = refused([str(folder), "-o", str(folder / target), "--force"])
        assert target in line and "input" in line
    os.link(folder / "source.spm", tmp_path / "linked.ckpt")  # the same inode, elsewhere
    line = refused([str(folder), "-o", str(tmp_path / "linked.ckpt"), "--force"])
    assert "input" in line
    assert digest(folder) == before


def test_output_that_is_not_a_regular_file_is_never_replaced(opus, tmp_path):
    fifo = tmp_path / "pipe.ckpt"
    os.mkfifo(fifo)
    line = refused([str(opus), "-o", str(fifo), "--force"])
    assert "pipe.ckpt" in line and "FIFO" in line
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    (tmp_path / "dir.ckpt").mkdir()
    assert "directory" in refused([str(opus), "-o", str(tmp_path / "dir.ckpt"), "--force"])


def test_existing_regular_output_replaced_with_force_only(opus, tmp_path):
    out = tmp_path / "old.ckpt"
    out.write_text("earlier")
    assert "--force" in refused([str(opus), "-o", str(out)])
    code, _, err = run_main(main, [str(opus), "-o", str(out), "--force"])
    assert code == 0, err
    load_checkpoint(out)


# ---------------------------------------------------------------- broken folders
def _json(name: str, value):
    return lambda f: (f / name).write_text(json.dumps(value))


def _config(**fields):
    def edit(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **fields}))
    return edit


def _tensor(name: str, value: torch.Tensor):
    def edit(folder: Path) -> None:
        from safetensors.torch import load_file, save_file

        state = load_file(folder / "model.safetensors")
        state[name] = value(state[name])
        save_file(state, folder / "model.safetensors")
    return edit


def _truncate(name: str, keep: float):
    def edit(folder: Path) -> None:
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: int(len(data) * keep)])
    return edit


class Payload:
    """An object torch.load(weights_only=False) would rebuild by calling a function."""

    def __reduce__(self):
        return (print, ("this must never run",))


def _pickle_as(name: str):
    def edit(folder: Path) -> None:
        (folder / "model.safetensors").unlink()
        torch.save({"model.shared.weight": Payload()}, folder / name)
    return edit


def _plain_pickle(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(pickle.dumps({"a": [1, 2, 3]}))


def _sparse_vocab(folder: Path) -> None:
    vocab = json.loads((folder / "vocab.json").read_text())
    kept = {p: i for p, i in vocab.items() if i < 10 or i == len(vocab) - 1}
    (folder / "vocab.json").write_text(json.dumps(kept))


# case -> (edit of a valid folder, the file the line names, words it holds)
BROKEN = {
    "vocab.json a list": (_json("vocab.json", ["</s>", "<unk>"]), "vocab.json", "list"),
    "tokenizer_config a list": (_json("tokenizer_config.json", [1, 2]), "tokenizer_config.json",
                                "list"),
    "config a list": (_json("config.json", [1]), "config.json", "list"),
    "d_model disagrees": (_config(d_model=64), "model.safetensors", "d_model=64"),
    "vocab_size disagrees": (_config(vocab_size=300, decoder_vocab_size=300),
                             "model.safetensors", "vocab_size=300"),
    "layers disagree": (_config(encoder_layers=3), "model.safetensors", "encoder_layers=3"),
    "truncated safetensors": (_truncate("model.safetensors", 0.6), "model.safetensors",
                              "truncated"),
    "pickle as safetensors": (_plain_pickle, "model.safetensors", "not a safetensors"),
    "code pickled as pytorch_model.bin": (_pickle_as("pytorch_model.bin"), "pytorch_model.bin",
                                          "Python objects"),
    "huge max_position_embeddings": (_config(max_position_embeddings=1_000_000), "config.json",
                                     "max_position_embeddings"),
    "NaN weight": (_tensor("model.encoder.layers.1.fc2.weight",
                           lambda t: t.index_fill(0, torch.tensor([3]), float("nan"))),
                   "model.safetensors", "model.encoder.layers.1.fc2.weight"),
    "inf weight": (_tensor("final_logits_bias", lambda t: t.fill_(float("inf"))),
                   "model.safetensors", "final_logits_bias"),
    "integer weight": (_tensor("model.decoder.layers.0.fc1.bias", lambda t: t.long()),
                       "model.safetensors", "model.decoder.layers.0.fc1.bias"),
    "d_model a string": (_config(d_model="32"), "config.json", "d_model"),
    "dropout a list": (_config(dropout=[0.1]), "config.json", "dropout"),
    "scale_embedding a string": (_config(scale_embedding="yes"), "config.json", "scale_embedding"),
    "activation a number": (_config(activation_function=5), "config.json", "activation_function"),
    "empty target.spm": (lambda f: (f / "target.spm").write_bytes(b""), "target.spm",
                         "SentencePiece"),
    "vocab.json missing most ids": (_sparse_vocab, "vocab.json", "ids"),
    "separate_vocabs a string": (lambda f: _json("tokenizer_config.json", {
        "separate_vocabs": "no"})(f), "tokenizer_config.json", "separate_vocabs"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_broken_folder_is_one_line_naming_the_file(case, opus, tmp_path):
    edit, name, words = BROKEN[case]
    folder = copy(opus, tmp_path)
    edit(folder)
    before = digest(folder)
    out = tmp_path / "x.ckpt"
    line = refused([str(folder), "-o", str(out)])
    assert name in line and words in line, line
    assert not out.exists() and digest(folder) == before


def test_spm_of_another_model_is_refused(opus, tmp_path):
    """A SentencePiece model that loads but is not this vocabulary's: its pieces would be
    <unk>; one that makes every sample sentence <unk> is refused too."""
    from opus_mt import train_spm

    folder = copy(opus, tmp_path)
    (folder / "target.spm").write_bytes(train_spm(["xyz qwv " * 5, "zzq vvx"] * 50, 12, "unigram"))
    line = refused([str(folder), "-o", str(tmp_path / "x.ckpt")])
    assert "target.spm" in line and ("vocabulary" in line or "<unk>" in line), line


# ---------------------------------------------------------------- language codes
@pytest.mark.parametrize("code", ["<img src=x onerror=alert(1)>", "de-en", "deutsch", "", "e",
                                  "DE"])
def test_bad_language_codes_refused(code, opus, tmp_path):
    line = refused([str(opus), "-o", str(tmp_path / "x.ckpt"), "--src-lang", code])
    assert "--src-lang" in line and "language code" in line
    assert not (tmp_path / "x.ckpt").exists()


def test_language_code_from_tokenizer_config_checked(opus, tmp_path):
    folder = copy(opus, tmp_path)
    _json("tokenizer_config.json", {"source_lang": "de", "target_lang": "<b>en</b>"})(folder)
    line = refused([str(folder), "-o", str(tmp_path / "x.ckpt")])
    assert "tokenizer_config.json" in line and "target_lang" in line and "--tgt-lang" in line


@pytest.mark.parametrize("code", ["pt-BR", "zh-Hant", "fil", "sr_Latn_RS", "es-419"])
def test_good_language_codes_imported_and_served_as_given(code, opus, tmp_path):
    from seq2seq.directions import parse_pairs

    out = tmp_path / "x.ckpt"
    code_, _, err = run_main(main, [str(opus), "-o", str(out), "--src-lang", code])
    assert code_ == 0, err
    assert load_checkpoint(out)["seq2seq"]["src_lang"] == code
    assert parse_pairs(f"{code}-en") == ((code, "en"),)  # a direction of it parses back


def test_checkpoint_with_bad_language_code_refused_at_load(opus, tmp_path):
    out = tmp_path / "x.ckpt"
    assert run_main(main, [str(opus), "-o", str(out)])[0] == 0
    ckpt = torch.load(out, weights_only=True)
    ckpt["seq2seq"]["tgt_lang"] = "<script>"
    save_atomic(seal(ckpt), out)  # sealed: only the code check can refuse it
    with pytest.raises(CheckpointError, match="tgt_lang.*language code"):
        load_checkpoint(out)


def test_data_config_language_codes_checked():
    from seq2seq.config import ConfigError, DataConfig

    with pytest.raises(ConfigError, match="DataConfig.src_lang"):
        DataConfig(src_lang="de-en")
    assert DataConfig(src_lang="pt-BR", corpus=None, train_src="a", train_tgt="b",
                      valid_src="c", valid_tgt="d").src_lang == "pt-BR"


# ---------------------------------------------------------------- property
FILES = ("config.json", "model.safetensors", "source.spm", "target.spm", "vocab.json",
         "tokenizer_config.json", "generation_config.json")
WRONG_JSON = ([], [1, "a"], "text", 3, None, True, {"x": 1})


def _mutate(folder: Path, name: str, how: str, value, keep: float) -> None:
    path = folder / name
    if how == "drop":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * keep)])
    elif how == "json":
        path.write_text(json.dumps(value))
    elif how == "config field":  # a size or other field set to another value or JSON type
        config = json.loads((folder / "config.json").read_text())
        key = sorted(config)[int(keep * len(config)) % len(config)]
        config[key] = value
        (folder / "config.json").write_text(json.dumps(config))


@settings(max_examples=25)
@given(name=st.sampled_from(FILES),
       how=st.sampled_from(("drop", "empty", "truncate", "json", "config field")),
       value=st.one_of(st.sampled_from(WRONG_JSON), st.integers(-2, 1 << 40),
                       st.floats(allow_nan=False)),
       keep=st.floats(0.0, 0.999))
def test_mutated_folder_imports_or_is_refused_in_one_line(opus, tmp_path_factory, name, how,
                                                          value, keep):
    root = tmp_path_factory.mktemp("mutated")
    folder = Path(shutil.copytree(opus, root / "opus-mt-de-en"))
    _mutate(folder, name, how, value, keep)
    before = digest(folder)
    out = root / "out.ckpt"
    code, _, err = run_main(main, [str(folder), "-o", str(out)])  # a traceback fails here
    event(f"exit {code}: {(err.split(': ', 2) + [''])[2].rsplit('/', 1)[-1] if code else 'imported'}")
    if code == 0:
        assert load_checkpoint(out)["seq2seq"]["model_config"]
    else:
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("seq2seq-import: error: ")
        assert any(f in lines[0] for f in (*FILES, "pytorch_model.bin")), lines[0]
        assert not out.exists()
    assert digest(folder) == before
    assert sorted(p.name for p in root.iterdir()) == sorted(["opus-mt-de-en"] + ["out.ckpt"] * (code == 0))
