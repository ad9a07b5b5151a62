"""Search settings (``DecodingConfig``): translate, evaluate, validation and the server;
how a model is prepared when it loads (``LoadConfig``: ``Translator``'s arguments, not a
request's); and the options that set them by field name (``decoding_from_options``), which
the CLIs' flags (``cli/common.py``) and the server's request fields (``serving/api.py``)
are generated from or mapped to. A field with ``help`` in its metadata is such an option:
its type and ``Literal`` choices make the option's, the help text names other options as
``{field}`` and its default as ``{default}``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from seq2seq.fields import ConfigError, FieldError, check_fields, positive

# how the model's linear layers multiply at inference (seq2seq.model.inference.compute):
# CTranslate2's compute_type names; "auto" = the fastest this CPU runs natively for the model's size
ComputeType = Literal["float32", "int8", "bfloat16", "auto"]

MAX_BEAM = 1000  # beam size and n-best: a beam of K keeps K x vocabulary scores per sentence


def option(default: Any, help: str, **metadata: Any) -> Any:
    """A field that is an option of the CLIs and the server (``help``: its help template;
    ``metavar``; ``const``: the value the option sets, for a flag without a value)."""
    return field(default=default, metadata={"help": help, **metadata})


@dataclass
class DecodingConfig:
    """Search settings shared by translate, evaluate and validation."""

    method: Literal["greedy", "beam", "sample"] = option(
        "greedy", "sample instead of searching", const="sample")  # else beam_size chooses
    beam_size: int = option(5, "beam size; K > 1 = beam search, 1 = greedy "
                               "(default: {defaults.method})", metavar="K")
    nbest: int = option(1, "hypotheses per sentence (beam/sample; default {default})")
    # chosen on Multi30k val (shipped De->En model, beam 5): average 41.82 BLEU, gnmt 0.6 41.37
    length_penalty: Literal["gnmt", "average", "none"] = option("average",
                                                                "normalization (default {default})")
    # GNMT ((5 + |y|) / 6) ** alpha
    alpha: float = option(0.6, "GNMT length-penalty alpha (default {default})", metavar="ALPHA")
    # max target length = a * |src| + b
    max_len_a: float = option(1.2, "max length = a*|src| + b (default a={default})")
    max_len_b: int = option(10, "(default b={default})")
    min_len: int = option(0, "no EOS before this many tokens (default {default})")
    # no n-gram of this many tokens twice in an output (fairseq/HF no_repeat_ngram_size; 0 =
    # off): stops the loops of out-of-domain input. 4 costs no BLEU on Multi30k val (shipped
    # models, greedy / beam 5: De->En 42.49 / 43.67 with or without it, En->De 40.47 -> 40.55,
    # 41.84 -> 41.85); 3 cost up to 0.11, 2 up to 0.6 (data/results/no_repeat_ngram)
    no_repeat_ngram_size: int = option(4, "no N-gram twice in an output: stops loops on input "
                                       "unlike the training data (0 = off, default {default})",
                                       metavar="N")
    # beam, when a sentence is done: "exact" when no live hypothesis can beat its n-th best
    # finished one even at max length (the output of an unbounded search); "heuristic" when
    # beam_size have finished and none would beat the worst of them ending now (HF generate's
    # default, early_stopping=False); "patience" when patience x beam_size have finished
    # (fairseq, CTranslate2)
    stopping: Literal["exact", "heuristic", "patience"] = option(
        "heuristic", "beam: when a sentence is done (default {default}; see DecodingConfig)")
    patience: float = option(1.0, "with {stopping} patience: stop after patience x K finished "
                                   "(default {default})")
    temperature: float = option(1.0, "sampling temperature (default {default})")
    top_k: int = option(0, "sample from the k most likely (0 = off, default {default})")
    top_p: float = option(1.0, "nucleus sampling mass (1 = off, default {default})")
    seed: int | None = option(None, "sampling seed")
    # padded source tokens per translation batch; measured on 1,000 lines, beam 5: 523 MB peak
    # RSS at 2000 vs 874 MB at 6000, same speed
    max_tokens: int = option(2000, "padded source tokens per batch (default {default})")
    # cut each text into sentences (seq2seq.translation.segment) and translate those, putting the
    # text's spaces and line breaks back; off for corpora of one sentence a line
    split_sentences: bool = option(True, "translate each line as one sentence (for corpora of one "
                                    "sentence a line); default: lines are cut into sentences, "
                                    "translated, put back")
    # numbers the model changed inside a sentence put back as the source wrote them, where
    # as many changed as went missing (seq2seq.translation.numbers); off: the model's own output
    restore_numbers: bool = option(True, "put back numbers the model changed inside a sentence "
                                   "(default {default}; the flag turns it off)")
    # a sentence longer than this (source subwords) is cut at clauses before translation:
    # training drops longer pairs (DataConfig.max_len 128, bos/eos included), so no model saw one
    max_sentence_tokens: int = 126
    # an output of fewer words than this share of its source's (sources of 8 words or more)
    # is flagged "skipped": words were probably dropped. Shipped models, greedy, Multi30k
    # test_2016_flickr: 0.6 flags 0 (De->En) and 8 (En->De) of the 1,000 test captions, and
    # 45 and 162 of their 333 3-caption lines translated unsplit, where 75 and 103 lost 40%
    # of their words (docs/translation.md, scripts/bench/paragraphs.py)
    skip_ratio: float = 0.6

    def __post_init__(self) -> None:
        check_fields(self)
        positive(self, "beam_size", "nbest", "max_len_b", "temperature", "max_tokens", "patience",
                 "max_sentence_tokens")
        if self.nbest > self.beam_size and self.method == "beam":
            raise ConfigError(
                f"DecodingConfig.nbest={self.nbest} cannot exceed beam_size={self.beam_size}", "nbest"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"DecodingConfig.top_p must be in (0, 1], got {self.top_p}", "top_p")
        if self.top_p < 1e-6:  # rounds to 0 in float32: the nucleus would lose its first token
            raise ConfigError(f"DecodingConfig.top_p must be >= 1e-06, got {self.top_p}", "top_p")
        for name in ("top_k", "min_len", "max_len_a", "no_repeat_ngram_size", "skip_ratio"):
            if getattr(self, name) < 0:
                raise ConfigError(f"DecodingConfig.{name} must be >= 0, got {getattr(self, name)}",
                                  name)
        # Beyond these the search runs out of memory or float range, never to a better output.
        for name, low, high in (("beam_size", 1, MAX_BEAM), ("nbest", 1, MAX_BEAM),
                                ("alpha", -10.0, 10.0), ("patience", 0.0, 100.0),
                                ("temperature", 1e-6, 1e6)):
            if not low <= getattr(self, name) <= high:
                opening = "(" if name == "patience" else "["  # patience 0 is refused above
                raise ConfigError(f"DecodingConfig.{name} must be in {opening}{low}, {high}], "
                                  f"got {getattr(self, name)}", name)


@dataclass
class LoadConfig:
    """How a model is prepared when it loads (``Translator.from_checkpoint``'s arguments):
    set once per model, so a server's requests cannot change them."""

    # int8/bfloat16 agree with float32 on ~95% of the shipped model's test outputs
    # (docs/speed.md "Compute types")
    compute_type: ComputeType = option(
        "float32", "{choices}: the linear layers' arithmetic (CTranslate2's names; int8: "
        "weights per channel, activations per row; bfloat16: needs AVX-512 BF16 or AMX; auto: "
        "the fastest this CPU runs natively for the model's size; default {default})",
        metavar="TYPE")
    # each batch's output projection restricted to the candidate target pieces of the
    # checkpoint's lexical table (seq2seq-shortlist) for its source pieces; off by default:
    # it changes some outputs (99% of greedy ones kept on Multi30k test, ~96% of beam-5
    # ones) and no speed gain is measured yet (docs/speed.md)
    shortlist: bool = option(
        False, "compute each batch's output only over the target pieces its source pieces "
        "can produce (the checkpoint's table: seq2seq-shortlist); computes fewer output rows; "
        "changes some outputs (default {default})")
    # float32, one model: the one-token decoder step (up to 32 decoder rows) and the encoder
    # (up to 3 sentences) compiled ahead of time with a C++ compiler (AOTInductor), once per
    # model and beam width, cached on disk; same outputs, one sentence ~2x sooner
    # (docs/speed.md)
    compile: bool = option(
        False, "compile the one-token decoder step and the encoder for small batches with the "
        "C++ compiler (AOTInductor) once per model and beam width, cached on disk; same "
        "outputs, one sentence about twice as fast; float32 and one model only; without a "
        "compiler: decoded eagerly, with a note (default {default})")

    def __post_init__(self) -> None:
        check_fields(self)




def load_config(**given: Any) -> LoadConfig:
    """The ``LoadConfig`` of the options given (None: the default), checked."""
    return LoadConfig(**{k: v for k, v in given.items() if v is not None})


def options_of(cls: type) -> list[dataclasses.Field]:
    """The fields of ``cls`` that are options (``help`` in their metadata), in order."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def decoding_from_options(options: Mapping[str, Any]) -> DecodingConfig:
    """``DecodingConfig`` defaults overridden by the options given, by field name (``None``:
    not given), as a command line or a request gives them: ``beam_size`` also chooses the
    method (1 = greedy, K > 1 = beam), ``method`` is given only as ``"sample"``. Bad values
    raise ``FieldError`` naming the options (a ``ValueError``)."""
    d = DecodingConfig()
    over = {k: v for k, v in options.items() if v is not None}
    beam_size = over.pop("beam_size", None)
    if beam_size is not None and beam_size < 1:  # 0 or -1 once silently meant greedy
        raise FieldError("{beam_size} {k}: the beam size must be >= 1 (1 = greedy)", k=beam_size)
    if over.get("method") == "sample":
        if beam_size is not None and beam_size > 1:
            raise FieldError("{method} and {beam_size} {k} exclude each other", k=beam_size)
    elif beam_size is not None:
        over["method"] = "beam" if beam_size > 1 else "greedy"
        over["beam_size"] = beam_size if beam_size > 1 else d.beam_size
    if over.get("nbest", 1) > 1 and over.get("method", d.method) == "greedy":
        raise FieldError("{nbest} N > 1 needs {beam_size} K >= N or {method}")
    try:
        return dataclasses.replace(d, **over)
    except ConfigError as e:  # name the option too, not only the field's check
        if e.field is None:
            raise
        raise FieldError("{" + e.field + "}: {why}", why=str(e)) from None


def stored_decoding(data: Mapping[str, Any]) -> tuple[DecodingConfig, LoadConfig]:
    """A ``DecodingConfig`` as a results record or a distillation's provenance stores it
    (``to_dict``), and the ``LoadConfig`` it was decoded with: records written while
    ``compute_type``, ``shortlist`` and ``compile`` were ``DecodingConfig`` fields carry
    them there; they come back as the ``LoadConfig`` (defaults where absent)."""
    load = {f.name for f in dataclasses.fields(LoadConfig)}
    return (DecodingConfig(**{k: v for k, v in data.items() if k not in load}),
            LoadConfig(**{k: v for k, v in data.items() if k in load}))
