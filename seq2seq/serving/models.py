"""The checkpoints a server holds, by name (clients choose a name, never a path)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from seq2seq.checkpoint import load_checkpoint
from seq2seq.decoding.translator import Translator

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass
class ServedModel:
    name: str
    translator: Translator  # its DecodingConfig is not used: each request brings its own
    src_lang: str
    tgt_lang: str

    def describe(self) -> dict:
        arch = self.translator.model.arch
        return {
            "name": self.name, "src_lang": self.src_lang, "tgt_lang": self.tgt_lang,
            "encoder_layers": arch.encoder_layers, "decoder_layers": arch.decoder_layers,
            "heads": arch.n_heads, "d_model": arch.d_model,
            "max_source_tokens": arch.max_positions - 1,
        }


def parse_spec(spec: str) -> tuple[str, Path]:
    """``NAME=PATH`` or ``PATH`` (named after the file: ``runs/x/avg.ckpt`` -> ``avg``)."""
    name, sep, path = spec.partition("=")
    if not sep:
        name, path = Path(spec).stem, spec
    if not _NAME.match(name):
        raise ValueError(f"-m {spec}: model name {name!r} must be letters, digits, '.', '_' or '-' "
                         "(give one as -m NAME=PATH)")
    return name, Path(path)


def load_models(specs: list[str], device: str | torch.device = "cpu") -> dict[str, ServedModel]:
    """One ``ServedModel`` per ``-m`` spec, in order (the first is the default)."""
    models: dict[str, ServedModel] = {}
    for spec in specs:
        name, path = parse_spec(spec)
        if name in models:
            raise ValueError(f"-m {spec}: a model named {name!r} was given twice; name them "
                             "with -m NAME=PATH")
        meta = load_checkpoint(path)["seq2seq"]
        translator = Translator.from_checkpoint(path, device=device)
        models[name] = ServedModel(name, translator, meta.get("src_lang", "?"), meta.get("tgt_lang", "?"))
    return models
