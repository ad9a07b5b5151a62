"""Typed configuration: the only place defaults live.

Each section is a dataclass validated in ``__post_init__``; errors name the field.
YAML round trip: ``to_dict``/``from_dict`` (unknown keys are refused by name).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from seq2seq.directions import DirectionError, Directions, parse_pairs
from seq2seq.fields import ConfigError, check_fields, positive, probability
from seq2seq.specials import BOS_ID, EOS_ID, PAD_ID

Norm = Literal["layernorm", "rmsnorm"]
NormPosition = Literal["post", "pre"]
Positional = Literal["sinusoidal", "learned", "rope"]
Activation = Literal["relu", "gelu", "silu"]  # silu = swish (OPUS-MT)


@dataclass
class ModelConfig:
    """Encoder-decoder Transformer. Defaults: Transformer-Tiny (4+4, d 128, ff 256, 4 heads)."""

    src_vocab_size: int = 8000
    tgt_vocab_size: int = 8000
    d_model: int = 128
    n_heads: int = 4
    d_k: int | None = None  # per-head query/key width; None = d_model // n_heads
    d_v: int | None = None  # per-head value width; None = d_model // n_heads
    d_ff: int = 256
    encoder_layers: int = 4
    decoder_layers: int = 4
    dropout: float = 0.3  # embeddings + residual branches (Vaswani et al. 2017)
    attention_dropout: float = 0.0  # on attention weights
    activation_dropout: float = 0.0  # inside the feed-forward, after the activation
    activation: Activation = "relu"
    norm: Norm = "layernorm"
    norm_position: NormPosition = "post"
    norm_eps: float = 1e-5
    positional: Positional = "sinusoidal"
    max_positions: int = 1024  # longest sequence (subword tokens) either side accepts
    share_embeddings: bool = True  # encoder and decoder share one table (needs a joint vocab)
    tie_output: bool = True  # decoder output projection = decoder input embedding
    output_bias: bool = False  # a bias on the output projection (Marian's final_logits_bias)
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID  # the decoder's start token, never an output (= pad_id in Marian)
    eos_id: int = EOS_ID

    def __post_init__(self) -> None:
        check_fields(self)
        positive(
            self, "src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_k", "d_v",
            "d_ff", "encoder_layers", "decoder_layers", "max_positions", "norm_eps",
        )
        probability(self, "dropout", "attention_dropout", "activation_dropout")
        for name in ("pad_id", "bos_id", "eos_id"):
            if not 0 <= getattr(self, name) < self.tgt_vocab_size:
                raise ConfigError(f"ModelConfig.{name} must be in [0, tgt_vocab_size="
                                  f"{self.tgt_vocab_size}), got {getattr(self, name)}")
        if self.max_positions < 2:
            raise ConfigError(f"ModelConfig.max_positions must be >= 2 (a token and EOS), "
                              f"got {self.max_positions}")
        if (self.d_k is None or self.d_v is None) and self.d_model % self.n_heads:
            raise ConfigError(
                f"ModelConfig.n_heads={self.n_heads} must divide d_model={self.d_model} "
                "unless d_k and d_v are both set"
            )
        if self.positional == "rope" and self.head_dim_k % 2:
            raise ConfigError(f"ModelConfig.d_k must be even for rope, got {self.head_dim_k}")
        if self.positional == "sinusoidal" and self.d_model % 2:
            raise ConfigError(f"ModelConfig.d_model must be even for sinusoidal, got {self.d_model}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                "ModelConfig.share_embeddings needs src_vocab_size == tgt_vocab_size "
                f"(got {self.src_vocab_size} and {self.tgt_vocab_size}); use a joint vocabulary"
            )

    @property
    def head_dim_k(self) -> int:
        return self.d_k if self.d_k is not None else self.d_model // self.n_heads

    @property
    def head_dim_v(self) -> int:
        return self.d_v if self.d_v is not None else self.d_model // self.n_heads


MAX_BEAM = 1000  # beam size and n-best: a beam of K keeps K x vocabulary scores per sentence


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

    def __post_init__(self) -> None:
        check_fields(self)
        positive(self, "beam_size", "nbest", "max_len_b", "temperature", "max_tokens", "patience")
        if self.nbest > self.beam_size and self.method == "beam":
            raise ConfigError(
                f"DecodingConfig.nbest={self.nbest} cannot exceed beam_size={self.beam_size}"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"DecodingConfig.top_p must be in (0, 1], got {self.top_p}")
        if self.top_p < 1e-6:  # rounds to 0 in float32: the nucleus would lose its first token
            raise ConfigError(f"DecodingConfig.top_p must be >= 1e-06, got {self.top_p}")
        for name in ("top_k", "min_len", "max_len_a", "no_repeat_ngram_size"):
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


@dataclass
class TokenizerConfig:
    """SentencePiece settings; trained on the training split only."""

    model_type: Literal["bpe", "unigram"] = "bpe"
    vocab_size: int = 8000
    character_coverage: float = 1.0
    joint: bool = True  # one model for source and target
    # at most this many sentences train the tokenizer: beyond it, a sample of pairs drawn
    # with ``seed`` (both sides of a pair when joint); memory and time stay bounded
    input_sentence_size: int = 2_000_000
    normalization: Literal["nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf", "identity"] = "nmt_nfkc"
    byte_fallback: bool = False  # unseen characters -> byte pieces instead of <unk>
    seed: int = 1  # the sample, when the corpus exceeds input_sentence_size
    # Fixed rather than os.cpu_count(): the thread count changes unigram models and is
    # written into every model, so it must not vary between machines.
    num_threads: int = 8

    def __post_init__(self) -> None:
        check_fields(self)
        positive(self, "vocab_size", "input_sentence_size", "num_threads")
        if not 0.0 < self.character_coverage <= 1.0:
            raise ConfigError(
                f"TokenizerConfig.character_coverage must be in (0, 1], got {self.character_coverage}"
            )


@dataclass
class DataConfig:
    """Where the parallel text comes from and how it is batched.

    ``corpus="multi30k"`` reads ``{data_dir}/{split}.{lang}.gz``; ``corpus=None`` reads the
    explicit files (``format`` text: files per side; tsv/jsonl: files per split; each a path,
    a glob or a list, plain or gzip) or, with ``format="hub"``,
    ``datasets.load_dataset(hub_name, hub_config, split=..., streaming=streaming)``.
    """

    corpus: str | None = "multi30k"  # named corpus; None = use the explicit files below
    data_dir: str | None = None  # None: the shipped Multi30k, from any folder (seq2seq.shipped)
    src_lang: str = "de"
    tgt_lang: str = "en"
    # several directions at once (one model, a target-language tag): "en-de,de-en", a list of
    # such, "all:en,de,fr" (every ordered pair) or "en<>de,fr" (to and from en); Multi30k only.
    # None: src_lang -> tgt_lang alone, no tag. Needs a joint tokenizer and shared embeddings.
    directions: str | list[str] | None = None
    # where the tag <2xx> goes: first source token, or the decoder's first input (for BOS)
    tag_position: Literal["source", "decoder"] = "source"
    # each epoch, direction d gets a share of the training pairs proportional to n_d ** (1 / T)
    # (n_d: its pairs): T=1 proportional, large T uniform; 5 as in Arivazhagan et al. (2019)
    direction_temperature: float = 5.0
    train_split: str = "train"
    valid_split: str = "val"
    format: Literal["text", "tsv", "jsonl", "hub"] = "text"
    train_src: str | list[str] | None = None  # text: source file(s); tsv/jsonl: the file(s)
    train_tgt: str | list[str] | None = None
    valid_src: str | list[str] | None = None
    valid_tgt: str | list[str] | None = None
    src_field: str = "src"  # jsonl/hub field names; "a.b" reaches into nested records
    tgt_field: str = "tgt"
    hub_name: str | None = None
    hub_config: str | None = None
    # hub: read the training split as a stream (never stored; batches from a shuffle buffer)
    streaming: bool = False
    shuffle_buffer: int = 200_000  # streaming: pairs bucketed by length together
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    max_tokens: int = 4096  # padded tokens of the larger side per batch (incl. bos/eos)
    max_len: int = 128  # drop pairs longer than this on either side (subwords incl. bos/eos)
    max_len_ratio: float = 3.0  # drop training pairs whose length ratio exceeds this
    # subword regularization: each training batch re-segmented by SentencePiece sampling at
    # this rate (BPE-dropout for bpe, smoothing for unigram), both sides; 0 = the best
    # segmentation only. Validation and inference never sample.
    subword_alpha: float = 0.0
    num_proc: int | None = None  # datasets.map workers (tokenization)
    num_workers: int = 0  # DataLoader workers
    seed: int = 1
    # None: $SEQ2SEQ_CACHE_DIR, else $XDG_CACHE_HOME/seq2seq, else ~/.cache/seq2seq
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.tokenizer, dict):
            self.tokenizer = from_dict(TokenizerConfig, self.tokenizer, "DataConfig.tokenizer")
        check_fields(self)
        positive(self, "max_tokens", "max_len", "max_len_ratio", "num_proc", "shuffle_buffer")
        if self.corpus not in (None, "multi30k"):
            raise ConfigError(
                f"DataConfig.corpus: {self.corpus!r} is not one of ['multi30k', None]"
            )
        if self.src_lang == self.tgt_lang:
            raise ConfigError(f"DataConfig.src_lang and tgt_lang are both {self.src_lang!r}")
        if self.max_len < 2:
            raise ConfigError(
                f"DataConfig.max_len must be >= 2 (bos/eos count), got {self.max_len}"
            )
        if self.max_len_ratio < 1.0:
            raise ConfigError(f"DataConfig.max_len_ratio must be >= 1, got {self.max_len_ratio}")
        if self.num_workers < 0:
            raise ConfigError(f"DataConfig.num_workers must be >= 0, got {self.num_workers}")
        if not 0.0 <= self.subword_alpha < 1.0:
            raise ConfigError(f"DataConfig.subword_alpha must be in [0, 1), got {self.subword_alpha}")
        self._check_sources()
        self._check_directions()

    @property
    def model_directions(self) -> Directions | None:
        """The directions of a multilingual run (None: one direction, src_lang -> tgt_lang)."""
        if self.directions is None:
            return None
        return Directions(parse_pairs(self.directions, "DataConfig.directions"), self.tag_position)

    def _check_directions(self) -> None:
        if not self.direction_temperature > 0:
            raise ConfigError("DataConfig.direction_temperature must be > 0, got "
                              f"{self.direction_temperature}")
        if self.directions is None:
            return
        try:
            self.model_directions  # noqa: B018 (parsed for its errors)
        except DirectionError as e:
            raise ConfigError(str(e)) from None
        if self.corpus is None:
            raise ConfigError("DataConfig.directions needs corpus='multi30k' (one file per "
                              "language); explicit files give one direction: set src_lang/tgt_lang")
        if not self.tokenizer.joint:
            raise ConfigError("DataConfig.directions needs a joint tokenizer "
                              "(DataConfig.tokenizer.joint=true): the tags live in one vocabulary")

    def _check_sources(self) -> None:
        """The fields the chosen source needs must be set."""
        if self.streaming and (self.corpus is not None or self.format != "hub"):
            raise ConfigError(
                "DataConfig.streaming needs corpus=None and format='hub'; local files are "
                "read as streams anyway and stored memory-mapped"
            )
        if self.corpus is not None:
            if self.format != "text":
                raise ConfigError(
                    f"DataConfig.format must be 'text' with corpus={self.corpus!r}, "
                    f"got {self.format!r}"
                )
            return
        needed = {
            "text": ["train_src", "train_tgt", "valid_src", "valid_tgt"],
            "tsv": ["train_src", "valid_src"],
            "jsonl": ["train_src", "valid_src"],
            "hub": ["hub_name"],
        }[self.format]
        missing = [name for name in needed if getattr(self, name) is None]
        if missing:
            raise ConfigError(
                f"DataConfig.{missing[0]} must be set for corpus=None, format={self.format!r}"
            )


@dataclass
class OptimConfig:
    """Adam + warmup schedule (the chapter's ``noam`` or fairseq's ``inverse_sqrt``)."""

    schedule: Literal["noam", "inverse_sqrt", "constant"] = "inverse_sqrt"
    lr: float = 5e-3  # peak lr (inverse_sqrt, constant); scale factor for noam
    warmup_steps: int = 2000
    decay_start: int | None = None  # inverse_sqrt decays as sqrt(decay_start / s); None = warmup_steps
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    # "fused": output projection + loss + their gradients in chunks of loss_chunk target
    # tokens, no N x V logits kept (training.loss); "plain": logits, then cross-entropy
    loss: Literal["fused", "plain"] = "fused"
    loss_chunk: int = 256  # measured: 128-1024 within 10% on 2 cores (d 128, V 8k)

    def __post_init__(self) -> None:
        check_fields(self)
        positive(self, "lr", "eps", "loss_chunk")
        probability(self, "label_smoothing")
        positive(self, "decay_start")
        if self.warmup_steps < 0 or self.weight_decay < 0:
            raise ConfigError("OptimConfig.warmup_steps and weight_decay must be >= 0, got "
                              f"{self.warmup_steps} and {self.weight_decay}")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"OptimConfig.betas must be two numbers in [0, 1), got {self.betas}")
        self.betas = tuple(self.betas)  # YAML gives lists


MAX_WINDOW_MS = 1000.0  # a request never waits longer than this for others to join it


@dataclass
class ServeConfig:
    """``seq2seq-serve``: where it listens, how it merges requests, what one request may ask."""

    host: str = "127.0.0.1"  # loopback unless told otherwise
    port: int = 8000  # 0 = any free port
    # requests arriving within window_ms of the first waiting one share model calls (of at
    # most call_work, below); a call pads its texts into batches of at most max_batch_tokens
    # source tokens (+ EOS each: the Translator's max_tokens)
    window_ms: float = 5.0
    max_batch_tokens: int = 2000
    max_texts: int = 64  # texts in one /translate request
    max_text_chars: int = 1000  # characters in one text (tokens are capped by the model)
    max_beam: int = 16
    max_nbest: int = 16
    threads: int | None = None  # torch threads for the model; None = torch's default
    # API keys: a file of "KEY [REQUESTS_PER_MINUTE]" lines; None = open server
    api_keys: str | None = None
    req_limit: int = 60  # requests per minute per key, unless its line says otherwise
    # What one request may cost. Work of a text: output positions the search may fill (the
    # max-length rule, capped by the model) x (source + output positions) x hypotheses kept
    # (beam, or samples). A model call does at most call_work (a bigger request is cut into
    # pieces that take turns with other requests'; a text may not cost more).
    max_body_bytes: int = 1_048_576  # counted while reading, chunked bodies too
    max_work: int = 16_000_000
    call_work: int = 500_000
    max_response_bytes: int = 16_000_000  # estimated before any work is done
    request_timeout_s: float = 60.0  # a request still unanswered then gets 503
    # Connections (uvicorn): beyond max_connections new ones are closed at once; headers
    # must arrive within header_timeout_s, each piece of a body within body_timeout_s.
    max_connections: int = 512
    header_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    keep_alive_s: int = 5  # an idle kept-alive connection is closed after this
    max_header_bytes: int = 16_384  # request line + headers (h11's incomplete-event limit)
    log_per_minute: int = 20  # each kind of server log message at most this often

    def __post_init__(self) -> None:
        positive(self, "max_batch_tokens", "max_texts", "max_text_chars", "max_beam",
                  "max_nbest", "threads", "req_limit", "max_body_bytes", "max_work",
                  "max_response_bytes", "call_work", "request_timeout_s", "max_connections",
                  "header_timeout_s", "body_timeout_s", "keep_alive_s", "max_header_bytes",
                  "log_per_minute")
        # NaN passes every comparison and inf never ends the wait: requests would hang
        if not 0 <= self.window_ms <= MAX_WINDOW_MS:
            raise ConfigError(f"ServeConfig.window_ms must be in [0, {MAX_WINDOW_MS}] "
                              f"(milliseconds), got {self.window_ms}")
        for name in ("max_beam", "max_nbest"):
            if getattr(self, name) > MAX_BEAM:
                raise ConfigError(f"ServeConfig.{name} must be <= {MAX_BEAM} (the decoder's "
                                  f"own bound), got {getattr(self, name)}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"ServeConfig.port must be in [0, 65535], got {self.port}")
        for name in ("request_timeout_s", "header_timeout_s", "body_timeout_s"):
            if not math.isfinite(getattr(self, name)):  # NaN passed "> 0"; inf never fires
                raise ConfigError(f"ServeConfig.{name} must be a finite number of seconds, "
                                  f"got {getattr(self, name)}")


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain dict (YAML/JSON/``weights_only``-safe)."""
    out = dataclasses.asdict(cfg)
    for key, value in out.items():
        if isinstance(value, tuple):
            out[key] = list(value)
    return out


def from_dict(cls: type, data: dict[str, Any], where: str | None = None) -> Any:
    """Build ``cls`` from a dict, refusing unknown keys by name."""
    where = where or cls.__name__
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    return cls(**data)
