"""Search settings (``DecodingConfig``): translate, evaluate, validation and the server; the
options that set them by their flag names (``decoding_from_args``: the CLIs and the server's
requests)."""

from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import dataclass
from typing import Literal

from seq2seq.fields import ConfigError, check_fields, positive

# how the model's linear layers multiply at inference (seq2seq.model.compute): CTranslate2's
# compute_type names; "auto" = the fastest this CPU runs natively for the model's size
ComputeType = Literal["float32", "int8", "bfloat16", "auto"]

MAX_BEAM = 1000  # beam size and n-best: a beam of K keeps K x vocabulary scores per sentence


# The options of seq2seq-translate, seq2seq-evaluate and the server's requests, by their flag
# names: flag dest -> DecodingConfig field (method and beam_size come from --beam/--sample)
FLAG_FIELDS = {
    "nbest": "nbest",
    "lenpen": "alpha",
    "length_penalty": "length_penalty",
    "max_len_a": "max_len_a",
    "max_len_b": "max_len_b",
    "min_len": "min_len",
    "no_repeat_ngram_size": "no_repeat_ngram_size",
    "stopping": "stopping",
    "patience": "patience",
    "temperature": "temperature",
    "topk": "top_k",
    "topp": "top_p",
    "seed": "seed",
    "max_tokens": "max_tokens",
}


@dataclass
class DecodingConfig:
    """Search settings shared by translate, evaluate and validation."""

    method: Literal["greedy", "beam", "sample"] = "greedy"
    beam_size: int = 5
    nbest: int = 1
    # chosen on Multi30k val (shipped De->En model, beam 5): average 41.82 BLEU, gnmt 0.6 41.37
    length_penalty: Literal["gnmt", "average", "none"] = "average"
    alpha: float = 0.6  # GNMT ((5 + |y|) / 6) ** alpha
    max_len_a: float = 1.2  # max target length = a * |src| + b
    max_len_b: int = 10
    min_len: int = 0
    # no n-gram of this many tokens twice in an output (fairseq/HF no_repeat_ngram_size; 0 =
    # off): stops the loops of out-of-domain input. 4 costs no BLEU on Multi30k val (shipped
    # models, greedy / beam 5: De->En 42.49 / 43.67 with or without it, En->De 40.47 -> 40.55,
    # 41.84 -> 41.85); 3 cost up to 0.11, 2 up to 0.6 (data/results/no_repeat_ngram)
    no_repeat_ngram_size: int = 4
    # beam, when a sentence is done: "exact" when no live hypothesis can beat its n-th best
    # finished one even at max length (the output of an unbounded search); "heuristic" when
    # beam_size have finished and none would beat the worst of them ending now (HF generate's
    # default, early_stopping=False); "patience" when patience x beam_size have finished
    # (fairseq, CTranslate2)
    stopping: Literal["exact", "heuristic", "patience"] = "heuristic"
    patience: float = 1.0
    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    seed: int | None = None
    # padded source tokens per translation batch; measured on 1,000 lines, beam 5: 523 MB peak
    # RSS at 2000 vs 874 MB at 6000, same speed
    max_tokens: int = 2000
    # cut each text into sentences (seq2seq.text.segment) and translate those, putting the
    # text's spaces and line breaks back; off (--no-split) for corpora of one sentence a line
    split_sentences: bool = True
    # a sentence longer than this (source subwords) is cut at clauses before translation:
    # training drops longer pairs (DataConfig.max_len 128, bos/eos included), so no model saw one
    max_sentence_tokens: int = 126
    # an output of fewer words than this share of its source's (sources of 8 words or more)
    # is flagged "skipped": words were probably dropped. Shipped models, greedy, Multi30k
    # test_2016_flickr: 0.6 flags 0 (De->En) and 8 (En->De) of the 1,000 test captions, and
    # 45 and 162 of their 333 3-caption lines translated unsplit, where 75 and 103 lost 40%
    # of their words (docs/translation.md, scripts/bench/paragraphs.py)
    skip_ratio: float = 0.6
    # a load-time setting: the model is prepared once (Translator.from_checkpoint); a
    # server's requests cannot change it. int8/bfloat16 agree with float32 on ~95% of the
    # shipped model's test outputs (docs/speed.md "Compute types")
    compute_type: ComputeType = "float32"
    # a load-time setting too: each batch's output projection restricted to the candidate
    # target pieces of the checkpoint's lexical table (seq2seq-shortlist) for its source
    # pieces; off by default: it changes some outputs (99% of greedy ones kept on Multi30k
    # test, ~96% of beam-5 ones) and no speed gain is measured yet (docs/speed.md)
    shortlist: bool = False
    # a load-time setting too (float32, one model): the one-token decoder step compiled
    # ahead of time with a C++ compiler (AOTInductor), once per model and beam width, cached
    # on disk; same outputs, ~1.4x faster steps on Tiny greedy (docs/speed.md)
    compile: bool = False

    def __post_init__(self) -> None:
        check_fields(self)
        positive(self, "beam_size", "nbest", "max_len_b", "temperature", "max_tokens", "patience",
                 "max_sentence_tokens")
        if self.nbest > self.beam_size and self.method == "beam":
            raise ConfigError(
                f"DecodingConfig.nbest={self.nbest} cannot exceed beam_size={self.beam_size}"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"DecodingConfig.top_p must be in (0, 1], got {self.top_p}")
        if self.top_p < 1e-6:  # rounds to 0 in float32: the nucleus would lose its first token
            raise ConfigError(f"DecodingConfig.top_p must be >= 1e-06, got {self.top_p}")
        for name in ("top_k", "min_len", "max_len_a", "no_repeat_ngram_size", "skip_ratio"):
            if getattr(self, name) < 0:
                raise ConfigError(f"DecodingConfig.{name} must be >= 0, got {getattr(self, name)}")
        # Beyond these the search runs out of memory or float range, never to a better output.
        for name, low, high in (("beam_size", 1, MAX_BEAM), ("nbest", 1, MAX_BEAM),
                                ("alpha", -10.0, 10.0), ("patience", 0.0, 100.0),
                                ("temperature", 1e-6, 1e6)):
            if not low <= getattr(self, name) <= high:
                opening = "(" if name == "patience" else "["  # patience 0 is refused above
                raise ConfigError(f"DecodingConfig.{name} must be in {opening}{low}, {high}], "
                                  f"got {getattr(self, name)}")


def decoding_from_args(args: argparse.Namespace) -> DecodingConfig:
    """``DecodingConfig`` defaults overridden by the options given, by their flag names (an
    ``argparse.Namespace`` or any object with those attributes; ``beam_size`` is ``--beam``).
    Bad values raise ValueError naming the flag (ConfigError is a ValueError)."""
    d = DecodingConfig()
    over = {f: getattr(args, a) for a, f in FLAG_FIELDS.items() if getattr(args, a, None) is not None}
    beam_size = getattr(args, "beam_size", None)
    if beam_size is not None and beam_size < 1:  # 0 or -1 once silently meant greedy
        raise ValueError(f"--beam {beam_size}: the beam size must be >= 1 (1 = greedy)")
    if getattr(args, "sample", False):
        if beam_size is not None and beam_size > 1:
            raise ValueError(f"--sample and --beam {beam_size} exclude each other")
        over["method"] = "sample"
    elif beam_size is not None:
        over["method"] = "beam" if beam_size > 1 else "greedy"
        over["beam_size"] = beam_size if beam_size > 1 else d.beam_size
    if getattr(args, "no_split", False):
        over["split_sentences"] = False
    if getattr(args, "compute_type", None) is not None:  # a load-time option, not a request's
        over["compute_type"] = args.compute_type
    if getattr(args, "shortlist", False):  # load-time too
        over["shortlist"] = True
    if getattr(args, "compile", False):  # load-time too
        over["compile"] = True
    method = over.get("method", d.method)
    if over.get("nbest", 1) > 1 and method == "greedy":
        raise ValueError("--nbest N > 1 needs --beam K >= N or --sample")
    try:
        return dataclasses.replace(d, **over)
    except ConfigError as e:  # name the flag the user typed too, not only the field behind it
        field = re.match(r"DecodingConfig\.(\w+)", str(e))
        flags = {name: "--" + dest.replace("_", "-") for dest, name in FLAG_FIELDS.items()}
        flag = {**flags, "beam_size": "--beam"}.get(field.group(1)) if field else None
        raise ValueError(f"{flag}: {e}" if flag else str(e)) from None
