"""Where the parallel text comes from, how it is tokenized and batched."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from seq2seq.directions import DirectionError, Directions, check_language, parse_pairs
from seq2seq.fields import ConfigError, check_fields, from_dict, positive


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
    # a checkpoint (or a shipped model's name) whose tokenizers this run uses instead of
    # training its own (``tokenizer`` is then unused): a student keeps its teacher's
    # vocabulary, so the two can form an ensemble and the pieces do not depend on the
    # SentencePiece version at hand
    tokenizer_from: str | None = None
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
        for side in ("src_lang", "tgt_lang"):
            try:
                check_language(getattr(self, side), f"DataConfig.{side}")
            except DirectionError as e:
                raise ConfigError(str(e)) from None
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
