"""``seq2seq-train`` refuses bad input before the first step in one line on stderr (exit status
2): options, configs, data files, and ``--ckpt_path``/``--model.init_from``/
``--data.data.tokenizer_from`` checkpoints, which are verified; what it accepts from them
(an average's weights, a shipped model's tokenizers) is used as given."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from helpers import run_train, train_args

from seq2seq.averaging import average
from seq2seq.checkpoint import load_checkpoint, model_state
from seq2seq.cli.train import main as train_main


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory) -> dict[str, Path]:
    """A 2-step training checkpoint, its average (inference-only) and a foreign Lightning one."""
    root = tmp_path_factory.mktemp("trained")
    mp = pytest.MonkeyPatch()
    mp.setattr(sys, "argv", ["seq2seq-train"])
    train_main(train_args(corpus, root))
    mp.undo()
    last = root / "checkpoints" / "last.ckpt"
    average([last], root / "avg.ckpt")
    foreign = load_checkpoint(last)
    del foreign["seq2seq"]  # another project's Lightning checkpoint
    torch.save(foreign, root / "foreign.ckpt")
    (root / "truncated.ckpt").write_bytes(last.read_bytes()[:5000])
    return {"last": last, "avg": root / "avg.ckpt", "foreign": root / "foreign.ckpt",
            "truncated": root / "truncated.ckpt", "root": root}


REFUSED = [  # (id, extra options (or a function of the fixtures), words the error must hold)
    ("lr 0", ["--model.optim.lr", "0"], ["--model.optim.lr", "> 0"]),
    ("lr < 0", ["--model.optim.lr=-1"], ["--model.optim.lr"]),
    ("lr nan", ["--model.optim.lr", "nan"], ["--model.optim.lr"]),
    ("warmup < 0", ["--model.optim.warmup_steps=-5"], ["--model.optim.warmup_steps"]),
    ("betas > 1", ["--model.optim.betas", "[0.9, 1.5]"], ["--model.optim.betas"]),
    ("label smoothing 1", ["--model.optim.label_smoothing", "1"], ["label_smoothing"]),
    ("dropout > 1", ["--model.arch.dropout", "1.5"], ["--model.arch.dropout"]),
    ("n_heads does not divide d_model", ["--model.arch.n_heads", "3"], ["--model.arch.n_heads", "divide"]),
    ("max_positions 1", ["--model.arch.max_positions", "1"], ["max_positions"]),
    ("max_tokens 0", ["--data.data.max_tokens", "0"], ["--data.data.max_tokens"]),
    ("vocab too small", ["--data.data.tokenizer.vocab_size", "5"], ["vocab_size=5"]),
    ("unknown option", ["--model.arch.d_modle", "64"], ["d_modle"]),
    ("not a number", ["--trainer.max_steps", "abc"], ["--trainer.max_steps"]),
    ("no gpu", ["--trainer.accelerator", "gpu"] if not torch.cuda.is_available() else None, ["gpu"]),
    ("curves every 0 steps", ["--curves.every_n_steps", "0"], ["--curves.every_n_steps"]),
    ("val BLEU on -1 sentences", ["--model.val_bleu_max_sentences=-1"], ["--model.val_bleu_max_sentences"]),
    ("validate every 0 epochs", ["--trainer.check_val_every_n_epoch", "0", "--trainer.val_check_interval",
                                 "null"], ["--trainer.check_val_every_n_epoch"]),
    ("negative clipping", ["--trainer.gradient_clip_val=-1"], ["--trainer.gradient_clip_val"]),
    ("accumulate 0 batches", ["--trainer.accumulate_grad_batches", "0"], ["--trainer.accumulate_grad_batches"]),
    ("devices -5", ["--trainer.devices=-5"], ["--trainer.devices"]),
    ("seed out of range", ["--seed_everything", "99999999999999999999"], ["--seed_everything"]),
    ("unknown strategy", ["--trainer.strategy", "foo"], ["strategy"]),
    ("checkpoint folder is a file", lambda c, t: ["--checkpoint.dirpath", str(c["train_de"])],
     ["--checkpoint.dirpath", "is a file"]),
    ("root folder is a file", lambda c, t: ["--trainer.default_root_dir", str(c["train_de"])],
     ["--trainer.default_root_dir", "is a file"]),
    ("an earlier run's checkpoints", lambda c, t: ["--checkpoint.dirpath", str(t["last"].parent)],
     ["holds checkpoints of an earlier run", "--ckpt_path", "last.ckpt"]),
    ("missing data file", lambda c, t: ["--data.data.train_src", str(c["train_de"]) + ".missing"], ["not found"]),
    ("data file is a directory", lambda c, t: ["--data.data.train_src", str(c["cache"].parent)],
     ["is a directory"]),
    ("data file is a device", lambda c, t: ["--data.data.train_src", "/dev/zero"],
     ["/dev/zero", "is a character device"]),
    ("validate every 0 batches", ["--trainer.val_check_interval", "0"], ["--trainer.val_check_interval"]),
    ("validate every 0.0 epochs", ["--trainer.val_check_interval", "0.0"], ["--trainer.val_check_interval"]),
    ("empty config", lambda c, t: ["--config", str(c["empty_config"])], ["empty.yaml", "empty"]),
    ("recursive YAML alias", lambda c, t: ["--config", str(c["recursive_config"])],
     ["recursive.yaml", "alias *a"]),
    ("billion laughs", lambda c, t: ["--config", str(c["laughs_config"])], ["laughs.yaml", "alias *a0"]),
    ("alias in a value", ["--trainer.callbacks", "&a [*a]"], ["--trainer.callbacks", "alias *a"]),
    ("undecodable data", lambda c, t: ["--data.data.train_src", str(c["bad_utf8"])], ["invalid UTF-8"]),
    ("all-empty data", lambda c, t: ["--data.data.train_src", str(c["empty_de"]), "--data.data.train_tgt",
                                     str(c["empty_en"])], ["no sentence pairs"]),
    ("ckpt_path missing", lambda c, t: ["--ckpt_path", str(t["root"] / "nope.ckpt")], ["no such file"]),
    ("ckpt_path a directory", lambda c, t: ["--ckpt_path", str(t["root"])], ["is a directory"]),
    ("ckpt_path truncated", lambda c, t: ["--ckpt_path", str(t["truncated"])], ["truncated"]),
    ("ckpt_path averaged", lambda c, t: ["--ckpt_path", str(t["avg"])],
     ["inference-only", "avg.ckpt: an", "--model.init_from "]),
    ("ckpt_path foreign lightning", lambda c, t: ["--ckpt_path", str(t["foreign"])], ["another model"]),
    ("ckpt_path other architecture", lambda c, t: ["--ckpt_path", str(t["last"]), "--model.arch.d_ff", "48"],
     ["d_ff"]),
    ("ckpt_path other tokenizer", lambda c, t: ["--ckpt_path", str(t["last"]),
                                                "--data.data.tokenizer.normalization", "identity"],
     ["other tokenizers", "--model.init_from"]),
    ("ckpt_path other language pair", lambda c, t: ["--ckpt_path", str(t["last"]), "--data.data.src_lang",
                                                    "fr"], ["de->en"]),
    ("init_from damaged", lambda c, t: ["--model.init_from", str(t["truncated"])], ["truncated"]),
    ("init_from other language pair", lambda c, t: ["--model.init_from", str(t["avg"]),
                                                    "--data.data.tgt_lang", "fr"], ["de->en"]),
    ("tokenizer_from missing", lambda c, t: ["--data.data.tokenizer_from", str(t["root"] / "nope.ckpt")],
     ["nope.ckpt", "no such file"]),
    ("tokenizer_from other language pair", lambda c, t: ["--data.data.tokenizer_from", "multi30k_en_de_tiny"],
     ["--data.data.tokenizer_from multi30k_en_de_tiny", "en->de", "de->en"]),
    ("tokenizer_from and init_from differ", lambda c, t: ["--model.init_from", str(t["avg"]),
                                                          "--data.data.tokenizer_from", "multi30k_de_en_tiny"],
     ["--model.init_from", "--data.data.tokenizer_from multi30k_de_en_tiny", "other tokenizers"]),
]


@pytest.mark.parametrize("extra, words", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_train_refusals_are_one_line(extra, words, corpus, trained, tmp_path, capsys, monkeypatch):
    if extra is None:
        pytest.skip("this machine has the device")
    extra = extra(corpus, trained) if callable(extra) else extra
    before = {p: p.read_bytes() for p in trained["root"].glob("*.ckpt")}
    code, err = run_train(train_args(corpus, tmp_path / "run", 2, *extra), capsys, monkeypatch)
    # one error line, last (data preparation may have drawn its progress bars before it)
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("seq2seq-train: error: "), err
    assert "Traceback" not in err and sum("error" in line for line in lines) == 1, err
    for word in words:
        assert word in lines[-1], (word, lines[-1])
    assert not list(tmp_path.rglob("*.ckpt"))  # nothing trained, nothing saved
    assert {p: p.read_bytes() for p in trained["root"].glob("*.ckpt")} == before


def test_init_from_an_average_starts_from_its_weights_and_tokenizers(corpus, trained, tmp_path,
                                                                      capsys, monkeypatch):
    """Fresh optimizer, the checkpoint's tokenizers (not the configured vocab size), its
    architecture with this run's dropout; at lr 1e-30 one step leaves the weights as given."""
    extra = ["--model.init_from", str(trained["avg"]), "--model.optim.lr", "1e-30",
             "--data.data.tokenizer.vocab_size", "250", "--model.arch.dropout", "0.25",
             "--trainer.logger", "false"]  # no logger: the lr monitor steps aside
    code, err = run_train(train_args(corpus, tmp_path, 2, *extra), capsys, monkeypatch)
    assert code == 0, err
    out, start = load_checkpoint(tmp_path / "checkpoints" / "last.ckpt"), load_checkpoint(trained["avg"])
    assert out["global_step"] == 2 and out["optimizer_states"][0]["state"][0]["step"] == 2
    assert out["seq2seq"]["tokenizers"] == start["seq2seq"]["tokenizers"]
    arch, given = out["seq2seq"]["model_config"], start["seq2seq"]["model_config"]
    assert arch == {**given, "dropout": 0.25}
    for name, w in model_state(start).items():
        torch.testing.assert_close(model_state(out)[name], w, rtol=0, atol=1e-6)


def test_tokenizer_from_a_shipped_model_gives_its_vocabulary_to_a_new_model(corpus, tmp_path,
                                                                          capsys, monkeypatch):
    """The run trains no tokenizer: its checkpoint holds the shipped model's tokenizers and
    vocabulary size, with this run's own (smoke) architecture and fresh weights."""
    cache = tmp_path / "cache"
    extra = ["--data.data.tokenizer_from", "multi30k_de_en_tiny", "--trainer.logger", "false",
             "--data.data.cache_dir", str(cache)]
    code, err = run_train(train_args(corpus, tmp_path / "run", 2, *extra), capsys, monkeypatch)
    assert code == 0, err
    out, given = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt"), load_checkpoint("multi30k_de_en_tiny")
    assert out["seq2seq"]["tokenizers"] == given["seq2seq"]["tokenizers"]
    arch, theirs = out["seq2seq"]["model_config"], given["seq2seq"]["model_config"]
    assert arch["src_vocab_size"] == theirs["src_vocab_size"] == 8000  # not the configured 300
    assert arch["d_model"] != theirs["d_model"]  # the smoke shape, not the shipped one
    assert list(cache.rglob("*.arrow")) and not list(cache.rglob("*.model"))  # data tokenized, no tokenizer trained
