"""``seq2seq-train --help`` describes every shipped config in full and recommends only real
options; ``-c`` is the config file; only the subcommands the module implements are offered."""

from __future__ import annotations

import pytest
from helpers import ROOT


def test_train_c_is_the_config_file():
    from seq2seq.cli.train import build_cli

    cli = build_cli(["-c", str(ROOT / "configs" / "smoke.yaml")], run=False)
    assert cli.config["trainer"]["max_steps"] == 60


def _train(argv, capsys, monkeypatch) -> str:
    """``seq2seq-train ARGV`` that exits 0 (help, --print_config): its stdout."""
    from seq2seq.cli.train import main

    monkeypatch.setattr("sys.argv", ["seq2seq-train"])  # LightningCLI also reads sys.argv
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code in (0, None)
    return capsys.readouterr().out


def _squash(text: str) -> str:
    return " ".join(text.split())


def test_train_help_describes_every_shipped_config_in_full(capsys, monkeypatch):
    help_text = _squash(_train(["--help"], capsys, monkeypatch))
    assert "train an encoder-decoder Transformer for machine translation" in help_text
    configs = sorted((ROOT / "configs").glob("*.yaml"))
    assert configs
    for path in configs:
        assert path.name in help_text
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.startswith("#"):
                break
            assert _squash(line[1:]) in help_text, (path.name, line)  # every header line, uncut


def test_train_help_options_are_real_options(capsys, monkeypatch):
    """Every option the help recommends is accepted, with the example or default it shows
    (checked in the merged config that --print_config prints)."""
    import yaml

    from seq2seq.cli.train_help import FIELDS, OPTIONS

    given = {option: example for option, example, _ in OPTIONS}
    for prefix, cls, names, _, _ in FIELDS:
        for name in names:
            default = getattr(cls(), name)
            given[f"{prefix}.{name}"] = yaml.safe_dump(default).removesuffix("\n...\n").strip()
    argv = ["fit", "-c", str(ROOT / "configs" / "smoke.yaml")]
    for option, value in given.items():
        argv += [option, value]
    config = yaml.safe_load(_train([*argv, "--print_config"], capsys, monkeypatch))
    for option, value in given.items():
        node = config
        for key in option.removeprefix("--").split("."):
            node = node[key]
        assert node == yaml.safe_load(value) or str(node) == value, (option, node, value)


def test_train_help_field_listings_exist(capsys, monkeypatch):
    from seq2seq.cli.train_help import FIELDS

    for listing in {f[4] for f in FIELDS}:
        assert "--" in _train(["fit", listing], capsys, monkeypatch), listing


def test_train_offers_the_subcommands_the_module_implements():
    """``test``/``predict`` need steps the module does not have: not offered (they failed)."""
    import lightning as L
    from lightning.pytorch.cli import LightningCLI

    from seq2seq.cli.train import Seq2SeqCLI
    from seq2seq.training.module import Seq2SeqModule

    step = {"fit": "training_step", "validate": "validation_step", "test": "test_step",
            "predict": "predict_step"}
    implemented = {name for name in LightningCLI.subcommands()
                   if getattr(Seq2SeqModule, step[name]) is not getattr(L.LightningModule, step[name])}
    assert set(Seq2SeqCLI.subcommands()) == implemented == {"fit", "validate"}
