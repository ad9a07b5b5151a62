"""The OPUS-MT-size model of the speed comparison (``benchmark.py --opus-size``): built here,
random weights, cached.

The shape is OPUS-MT's (Tiedemann and Thottingal 2020; the Helsinki-NLP MarianMT models):
d_model 512, 8 heads, d_ff 2,048, 6+6 layers, one joint vocabulary of 32,000 ids shared by
both embeddings and the output projection, Post-LN, sinusoidal positions, the swish
feed-forward, a bias on the output projection (Marian's ``final_logits_bias``), 512
positions. It is built directly as a seq2seq checkpoint (``Seq2Seq`` of that
``ModelConfig``, the package's own initialization), not as a MarianMT imported: OPUS-MT's
other conventions (scaled embeddings, the decoder starting from pad, EOS id 0) change no
cost. The tokenizer is real: one joint SentencePiece BPE model of exactly ``vocab`` ids,
trained on the shipped Multi30k training lines (German and English), so the sources the
benchmark decodes are segmented as a trained model's would be.

A random model never ends (EOS is the argmax at about 1 step in ``vocab``), or always at
once. As ``tests/opus_mt.py`` calibrates its MarianMT, EOS's output bias is set from the
margins by which the chosen tokens beat EOS (:func:`eos_margins`): here the bias at which
our greedy outputs of the first Multi30k training sources are on average as long as their
references (:func:`eos_bias`), so outputs end at varied, translation-like lengths. Engines
and compute types round differently and so end at different steps: compare their output
tokens per second, not sentences per second.

The checkpoint is cached under :func:`seq2seq.machine.cache_home` (``bench/``), named by a
hash of its :class:`Shape`, the recipe's version and the torch and SentencePiece versions,
and written atomically (``save_model``); a later run with the same settings loads it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch

from scripts.bench.engines import NO_REPEAT_NGRAM
from seq2seq.checkpoint import save_model
from seq2seq.config import DecodingConfig, ModelConfig, TokenizerConfig
from seq2seq.data.batch import collate_src, collate_tgt_in
from seq2seq.data.tokenizer import Tokenizer, TokenizerPair
from seq2seq.decoding.search import search
from seq2seq.machine import cache_home
from seq2seq.model import Seq2Seq

RECIPE = 1  # bump when the model built for a Shape changes: older cached files are not used
CALIBRATION_PAIRS = 32  # Multi30k pairs: greedy outputs of their sources as long as their targets
# The documented run (docs/speed.md "OPUS-MT size"): benchmark.py's option names and values,
# its defaults under --opus-size (any of them given on the command line wins)
RUN = {"sections": "decode", "limit": 50, "repeats": 1, "decode_max_tokens": (1000,),
       "uncached_limit": 1, "force_length": 20,
       "compute_types": ("float32", "int8", "bfloat16"), "peers": ("ct2",)}
Log = Callable[[str], None]


@dataclass(frozen=True)
class Shape:
    """What the model is built from (the cache key, with the versions)."""

    d_model: int = 512
    heads: int = 8
    d_ff: int = 2048
    layers: int = 6  # encoder and decoder each
    vocab: int = 32000  # joint SentencePiece BPE ids (specials included)
    seed: int = 0

    def arch(self) -> ModelConfig:
        return ModelConfig(src_vocab_size=self.vocab, tgt_vocab_size=self.vocab,
                           d_model=self.d_model, n_heads=self.heads, d_ff=self.d_ff,
                           encoder_layers=self.layers, decoder_layers=self.layers,
                           dropout=0.1, activation="silu", max_positions=512,
                           share_embeddings=True, tie_output=True, output_bias=True)

    def describe(self) -> str:
        return (f"d_model {self.d_model}, {self.heads} heads, d_ff {self.d_ff}, "
                f"{self.layers}+{self.layers} layers, vocabulary {self.vocab:,}")


OPUS_MT = Shape()


def parse_shape(text: str) -> Shape:
    """``"d_model=32,heads=4,layers=1"``: OPUS-MT's shape with these fields changed."""
    types = {f.name: type(getattr(OPUS_MT, f.name)) for f in fields(Shape)}
    changes = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if name.strip() not in types:
            raise ValueError(f"unknown field {name.strip()!r} (fields: {', '.join(types)})")
        changes[name.strip()] = types[name.strip()](value)
    shape = replace(OPUS_MT, **changes)
    shape.arch()  # a ConfigError names what does not fit
    return shape


def cache_path(shape: Shape) -> Path:
    import sentencepiece

    key = json.dumps({**asdict(shape), "recipe": RECIPE, "torch": torch.__version__,
                      "sentencepiece": sentencepiece.__version__}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_home() / "bench" / f"opus-size-{shape.d_model}-{shape.layers}x{shape.layers}-{digest}.ckpt"


def checkpoint(shape: Shape = OPUS_MT, log: Log = print) -> Path:
    """The cached checkpoint of ``shape``, built and saved first when there is none."""
    path = cache_path(shape)
    if path.is_file():
        log(f"OPUS-MT-size model ({shape.describe()}): cached {path}")
        return path
    log(f"OPUS-MT-size model ({shape.describe()}): building {path} ...")
    model, tokenizers = build(shape)
    save_model(path, model, tokenizers, "de", "en")
    return path


def training_pairs() -> tuple[list[str], list[str]]:
    """The shipped Multi30k training lines, German and English."""
    from seq2seq.config import DataConfig
    from seq2seq.data.sources import read_lines, resolve_corpus

    src, tgt = resolve_corpus(DataConfig(), "train")
    return read_lines(src), read_lines(tgt)


def build(shape: Shape) -> tuple[Seq2Seq, TokenizerPair]:
    """A random ``Seq2Seq`` of ``shape`` and its joint tokenizer, EOS calibrated."""
    de, en = training_pairs()
    tok = Tokenizer.train(de + en, TokenizerConfig(vocab_size=shape.vocab, num_threads=1))
    torch.manual_seed(shape.seed)
    model = Seq2Seq(shape.arch()).eval()
    src = tok.encode(de[:CALIBRATION_PAIRS])
    length = sum(map(len, tok.encode(en[:CALIBRATION_PAIRS]))) / CALIBRATION_PAIRS
    margins = greedy_margins(model, src, round(3 * length))
    with torch.no_grad():
        model.output.bias[model.arch.eos_id] += eos_bias(margins, length)
    return model, TokenizerPair(tok, tok)


def greedy_margins(model: Seq2Seq, src_ids: list[list[int]], steps: int) -> torch.Tensor:
    """``(B, steps)``: by how much the token our greedy search chooses at each step beats
    EOS, EOS forbidden (``force_length``; the benchmark's repetition rule)."""
    arch = model.arch
    src = collate_src(src_ids, arch.pad_id, arch.eos_id)
    decoding = DecodingConfig(method="greedy", max_len_a=0.0, max_len_b=steps,
                              no_repeat_ngram_size=NO_REPEAT_NGRAM)
    with torch.inference_mode():
        out = [h[0].tokens for h in search(model, src, decoding, force_length=steps).hypotheses]
        logits = model(src, collate_tgt_in(out, arch.pad_id, arch.bos_id))[:, :steps]
    return eos_margins(logits, arch.eos_id, torch.tensor(out))


def eos_margins(logits: torch.Tensor, eos: int, chosen: torch.Tensor | None = None) -> torch.Tensor:
    """By how much the ``chosen`` token (default: the best other than EOS) beats EOS at each
    position of ``logits (..., V)``: EOS becomes the argmax where its bias exceeds this."""
    if chosen is None:
        top = logits.topk(2, dim=-1)
        chosen = torch.where(top.indices[..., 0] == eos, top.indices[..., 1], top.indices[..., 0])
    return (logits.gather(-1, chosen.unsqueeze(-1)).squeeze(-1) - logits[..., eos]).float()


def eos_bias(margins: torch.Tensor, length: float) -> float:
    """The bias on EOS with which greedy outputs of these ``margins (B, L)`` average
    ``length`` tokens: each ends at its first step whose margin is below the bias (every
    earlier step chooses as before), or runs all ``L``."""
    def mean_length(bias: float) -> float:
        wins = margins < bias
        return float(torch.where(wins.any(1), wins.int().argmax(1), margins.shape[1]).float().mean())

    candidates = margins.flatten().sort().values.tolist()
    lo, hi = 0, len(candidates) - 1  # mean_length falls as the bias rises
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if mean_length(candidates[mid]) > length else (lo, mid)
    return candidates[lo]
