"""Options by field name: the decoding and load flags are generated from ``DecodingConfig``'s
and ``LoadConfig``'s fields (dest, choices, type, default), a bad value names the flag on
the command line and the request field on the server, and records written while the load
options were ``DecodingConfig`` fields still load."""

from __future__ import annotations

import dataclasses
import json
import pickle
import typing
from pathlib import Path
from typing import Literal, get_args

import pytest
from helpers import run_main

from seq2seq.cli import distill, evaluate, translate
from seq2seq.cli.common import decoding_from_args, flags, load_from_args
from seq2seq.config import DecodingConfig, LoadConfig, ServeConfig
from seq2seq.config.decoding import load_config, options_of, stored_decoding
from seq2seq.fields import FieldError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", [translate, evaluate, distill])
@pytest.mark.parametrize("cls", [DecodingConfig, LoadConfig])
def test_the_flags_are_the_fields(command, cls):
    actions = {a.dest: a for a in command.build_parser()._actions}
    hints, defaults = typing.get_type_hints(cls), cls()
    for f in options_of(cls):
        action, hint = actions[f.name], hints[f.name]
        assert tuple(action.option_strings) == flags(f.name) and action.default is None
        if typing.get_origin(hint) is Literal and "const" not in f.metadata:
            assert tuple(action.choices) == get_args(hint)
        elif action.nargs != 0:  # a flag with a value: the annotation's type
            assert action.type in (hint, *get_args(hint))
        value = getattr(defaults, f.name)  # shown: --beam's default is greedy search
        value = defaults.method if f.name == "beam_size" else value
        if action.nargs != 0 and value is not None:
            assert any(f"{w}{value}" in action.help for w in ("default ", "default: ", "=")), f.name
    args = command.build_parser().parse_args(["-m", "x", "-o", "y"] if command is distill
                                             else ["-m", "x"])
    assert decoding_from_args(args) == DecodingConfig()
    assert load_config(**load_from_args(args)) == LoadConfig()


def test_each_flag_sets_its_field():
    d = DecodingConfig()
    other = {"length_penalty": "gnmt", "stopping": "exact", "seed": 7, "compute_type": "int8",
             "top_p": 0.5}
    for f in options_of(DecodingConfig) + options_of(LoadConfig):
        if "const" in f.metadata or isinstance(f.default, bool):
            argv = [flags(f.name)[0]]
        else:
            value = other.get(f.name, f.default * 2 if f.default else 1)
            argv = [flags(f.name)[0], str(value)]
        args = translate.build_parser().parse_args(["-m", "x", *argv, *(
            ["--beam", "4"] if f.name in ("nbest", "stopping", "patience") else [])])
        got = {**dataclasses.asdict(decoding_from_args(args)),
               **{k: v for k, v in load_from_args(args).items() if v is not None}}
        default = getattr(d if hasattr(d, f.name) else LoadConfig(), f.name)
        assert got[f.name] != default, argv


CASES = [  # flags, the request, what the command says, what the server says
    (["--topp", "1.5"], {"topp": 1.5}, "--topp: DecodingConfig.top_p must be in (0, 1]",
     "topp: DecodingConfig.top_p must be in (0, 1]"),
    (["--beam", "0"], {"beam": 0}, "--beam 0: the beam size must be >= 1", "beam 0: the beam"),
    (["--nbest", "2"], {"nbest": 2}, "--nbest N > 1 needs --beam K >= N or --sample",
     "nbest N > 1 needs beam K >= N or sample"),
    (["--sample", "--beam", "3"], {"sample": True, "beam": 3},
     "--sample and --beam 3 exclude each other", "sample and beam 3 exclude each other"),
]


@pytest.mark.parametrize(("argv", "request_", "cli", "api"), CASES)
def test_a_bad_value_names_the_flag_on_the_command_line_and_the_field_on_the_server(
        argv, request_, cli, api):
    pytest.importorskip("fastapi")
    from seq2seq.serving.api import DecodingOptions, api_message, decoding_for

    code, out, err = run_main(translate.main, ["-m", "x", *argv, "Hallo"])
    assert code == 2 and err == f"seq2seq-translate: error: {err.split('error: ', 1)[1]}"
    assert cli in err and err.count("\n") == 1
    with pytest.raises(FieldError) as e:
        decoding_for(DecodingOptions(**request_), ServeConfig())
    assert api_message(e.value).startswith(api) and "--" not in api_message(e.value)
    assert "--" not in str(e.value)  # from Python: the field names


def test_the_server_takes_each_decoding_option_by_its_json_name():
    pytest.importorskip("fastapi")
    from seq2seq.serving.api import SERVER_OPTIONS, DecodingOptions, json_name

    asked = {json_name(f.name) for f in options_of(DecodingConfig) if f.name not in SERVER_OPTIONS}
    assert set(DecodingOptions.model_fields) == asked | {"model", "target_lang", "source_lang"}


def test_a_field_message_renders_names_not_values():
    e = FieldError("{compile}: only for {compute_type} float32, not {got}", got="{x} {compile}")
    assert str(e) == "compile: only for compute_type float32, not {x} {compile}"
    assert e.render(lambda n: "--" + n) == "--compile: only for --compute_type float32, not {x} {compile}"
    again = pickle.loads(pickle.dumps(e))
    assert str(again) == str(e) and again.field == "compile" and isinstance(again, ValueError)


def test_records_with_the_load_options_in_decoding_still_load():
    records = json.loads((ROOT / "data/models/multi30k_en_de_student.json").read_text())
    old = records[0]["decoding"]
    assert {"compute_type", "shortlist", "compile"} <= set(old)
    with pytest.raises(TypeError):
        DecodingConfig(**old)
    decoding, load = stored_decoding({**old, "compute_type": "int8"})
    assert load == LoadConfig(compute_type="int8", shortlist=old["shortlist"], compile=old["compile"])
    # the record's fields as written; fields newer than the record at their defaults
    expected = {**dataclasses.asdict(DecodingConfig()),
                **{k: v for k, v in old.items() if k not in {"compute_type", "shortlist", "compile"}}}
    assert dataclasses.asdict(decoding) == expected
    assert stored_decoding(dataclasses.asdict(decoding)) == (decoding, LoadConfig())


def test_a_distillation_records_its_load_options_as_before(tmp_path):
    from seq2seq.distill import DistillPlan, provenance

    teacher, source = tmp_path / "t.ckpt", tmp_path / "src.txt"
    teacher.write_bytes(b"x")
    source.write_text("a\n")
    plan = DistillPlan((str(teacher),), str(source), str(tmp_path / "out"), DecodingConfig(),
                       load=LoadConfig(compute_type="int8"))
    decoding = provenance(plan, 1)["decoding"]  # the keys folders were started with
    assert decoding == {**dataclasses.asdict(DecodingConfig()), "compute_type": "int8",
                        "shortlist": False, "compile": False}
