"""The checkpoints a server holds, by name (clients choose a name, never a path)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from seq2seq.serving import compiling
from seq2seq.translation.translator import Translator

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass
class ServedModel:
    name: str
    translator: Translator  # its DecodingConfig is not used: each request brings its own
    src_lang: str | None  # a single-direction model's pair ("?" where unrecorded);
    tgt_lang: str | None  # None for a multilingual model (see pairs)
    compiling: compiling.BackgroundCompile | None = None  # ServeConfig.compile "background"

    @property
    def multilingual(self) -> bool:
        return self.translator.directions is not None

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """Every (source, target) this model translates."""
        if self.translator.directions is not None:
            return list(self.translator.directions.pairs)
        return [(str(self.src_lang), str(self.tgt_lang))]

    def describe(self) -> dict:
        arch = self.translator.model.arch
        return {
            "name": self.name, "src_lang": self.src_lang, "tgt_lang": self.tgt_lang,
            "directions": [f"{a}-{b}" for a, b in self.pairs], "multilingual": self.multilingual,
            "encoder_layers": arch.encoder_layers, "decoder_layers": arch.decoder_layers,
            "heads": arch.n_heads, "d_model": arch.d_model,
            "compute_type": self.translator.compute_type,
            "shortlist": self.translator.shortlist,  # decoding over the vocabulary shortlist
            "max_source_tokens": arch.max_positions - 1 - self.source_tag_tokens,
            # outputs of lower confidence are flagged "unsure" (None: not calibrated)
            "unsure_below": self.translator.unsure_below,
            "compile": self.compile_state,
        }

    @property
    def compile_state(self) -> str:
        """``off``, ``building`` (decoding eagerly meanwhile), ``ready`` or ``failed``
        (decoding eagerly)."""
        if self.compiling is not None:
            return self.compiling.state
        step = self.translator.model.inference.compiled_step
        return "off" if step is None else "failed" if step.failed else "ready"

    @property
    def source_tag_tokens(self) -> int:
        """Positions the target-language tag takes on the source (1 for a source-tag model)."""
        d = self.translator.directions
        return int(d is not None and d.tag_position == "source")


def parse_spec(spec: str) -> tuple[str, Path]:
    """``NAME=PATH`` or ``PATH`` (named after the file: ``runs/x/avg.ckpt`` -> ``avg``)."""
    name, sep, path = spec.partition("=")
    if not sep:
        name, path = Path(spec).stem, spec
    if not _NAME.match(name):
        raise ValueError(f"-m {spec}: model name {name!r} must be letters, digits, '.', '_' or '-' "
                         "(give one as -m NAME=PATH)")
    return name, Path(path)


def load_models(specs: list[str], device: str | torch.device = "cpu",
                compute_type: str | None = None, shortlist: bool | None = None,
                compile: bool | None = None,
                background_compile: bool = False) -> dict[str, ServedModel]:
    """One ``ServedModel`` per ``-m`` spec, in order (the first is the default), each
    prepared as ``Translator.from_checkpoint`` does with the load options (None:
    ``LoadConfig``'s default): its linear layers in ``compute_type``, its checkpoint's
    vocabulary shortlist with ``shortlist``, its decoder step compiled with ``compile`` (now,
    before this returns) or ``background_compile`` (float32 CPU models: while serving)."""
    models: dict[str, ServedModel] = {}
    for spec in specs:
        name, path = parse_spec(spec)
        if name in models:
            raise ValueError(f"-m {spec}: a model named {name!r} was given twice; name them "
                             "with -m NAME=PATH")
        translator = Translator.from_checkpoint(path, device=device, compute_type=compute_type,
                                                shortlist=shortlist, compile=compile)
        features = translator.model.inference
        if compile and features.compiled_step is not None:  # packages made now, not in a request
            for group in (1, translator.decoding.beam_size):  # greedy, and the default beam
                features.compiled_step.prepare(translator.model, group)
            for part in (features.compiled_encoder, features.compiled_source):
                if part is not None:
                    part.prepare(translator.model)
            if features.compiled_greedy is not None:  # one sentence's whole greedy step
                features.compiled_greedy.prepare(translator.model)
            if features.compiled_beam is not None and translator.decoding.beam_size > 1:
                features.compiled_beam.prepare(translator.model, translator.decoding.beam_size)
        building = None
        if background_compile and not compile and translator.compute_type == "float32" \
                and torch.device(device).type == "cpu":
            building = compiling.enable(translator.model, path,
                                        (1, translator.decoding.beam_size))
        src, tgt = translator.pair
        if translator.directions is None:  # an old checkpoint without its pair: "?"
            src, tgt = src or "?", tgt or "?"
        models[name] = ServedModel(name, translator, src, tgt, building)
    return models
