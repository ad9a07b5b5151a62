"""The commands' shared options: ``-m/--model`` names the checkpoint (``-c``/``--checkpoint``
still do, after one deprecation line), is required and named when missing, and
``seq2seq-evaluate -m`` takes several models after one flag."""

from __future__ import annotations

import pytest


def _translate(argv):
    from seq2seq.cli.translate import main

    main([*argv, "Hallo"])


def _evaluate(argv):
    from seq2seq.cli.evaluate import main

    main([*argv, "--quiet"])


def _export(argv):
    from seq2seq.cli.export import main

    main([*argv, "--to", "ctranslate2", "-o", "unused_out"])


COMMANDS = {"seq2seq-translate": _translate, "seq2seq-evaluate": _evaluate,
            "seq2seq-export": _export}


def _stderr_lines(run, argv, capsys) -> list[str]:
    with pytest.raises(SystemExit) as exc:
        run(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("old", ["-c", "--checkpoint"])
def test_old_checkpoint_option_is_model_plus_one_notice(command, old, tmp_path, capsys,
                                                        monkeypatch):
    """``-c``/``--checkpoint`` still reach the checkpoint (the same error naming the same
    missing file as ``-m``), after exactly one deprecation line on stderr."""
    monkeypatch.chdir(tmp_path)
    missing = str(tmp_path / "missing.ckpt")
    run = COMMANDS[command]
    new = _stderr_lines(run, ["-m", missing], capsys)
    assert new == _stderr_lines(run, ["--model", missing], capsys)
    assert len(new) == 1 and new[0].startswith(f"{command}: error: ") and "missing.ckpt" in new[0]
    notice, *rest = _stderr_lines(run, [old, missing], capsys)
    assert rest == new
    assert notice.startswith(f"{command}: warning: {old} is deprecated") and "-m/--model" in notice
    assert not (tmp_path / "unused_out").exists()


def test_model_option_is_required_and_named(capsys):
    from seq2seq.cli.translate import main

    lines = _stderr_lines(main, ["Hallo"], capsys)
    assert lines[-1].endswith("-m/--model is required")


def test_evaluate_takes_several_models_after_one_flag():
    from seq2seq.cli.evaluate import build_parser

    for flag in ("-m", "-c"):
        assert build_parser().parse_args([flag, "a.ckpt", "b.ckpt"]).checkpoint == ["a.ckpt", "b.ckpt"]
