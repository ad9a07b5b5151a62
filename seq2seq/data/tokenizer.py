"""SentencePiece subword tokenizers with fixed special ids and content fingerprints.

Special ids are the same for every model (``seq2seq.specials``: pad 0, unk 1, bos 2, eos 3). A model is
identified by the sha256 of its serialized proto; checkpoints store the proto and its
fingerprint (``TokenizerPair.to_state``) so decoding always uses the training vocabulary.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sentencepiece as spm

from seq2seq.config import TokenizerConfig
from seq2seq.specials import BOS_ID, EOS_ID, PAD_ID, UNK_ID

# Up to this many texts are encoded / decoded one call each: SentencePiece's batch calls
# start a thread pool every call (~0.1 ms idle, ~0.5 ms on a busy machine, for one sentence
# that takes 5 us), which pays only for larger batches.
FEW = 16


class Tokenizer:
    """One SentencePiece model. Picklable (``datasets.map(num_proc>1)`` ships it to workers)."""

    def __init__(self, model_proto: bytes) -> None:
        self._proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor(model_proto=self._proto)
        self._fingerprint = hashlib.sha256(self._proto).hexdigest()
        self._specials = frozenset(i for i in (self.pad_id, self.bos_id, self.eos_id) if i >= 0)

    # -- training / serialization ---------------------------------------------------------
    @classmethod
    def train(cls, texts: Iterable[str], cfg: TokenizerConfig,
              reserved: Sequence[str] = ()) -> Tokenizer:
        """Train on ``texts`` (a list or a one-shot iterator); deterministic for a given input.

        No temp files: sentences stream in, the model streams out to memory. Sampling
        (only when the input exceeds ``cfg.input_sentence_size``) uses ``cfg.seed``.
        ``reserved`` pieces (language tags ``<2de>``) get ids after the specials as control
        symbols: text never encodes to them and they decode to nothing.
        """
        extra = {"control_symbols": list(reserved)} if reserved else {}
        spm.set_random_generator_seed(cfg.seed)
        writer = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(texts),
                model_writer=writer,
                model_type=cfg.model_type,
                vocab_size=cfg.vocab_size,
                character_coverage=cfg.character_coverage,
                input_sentence_size=cfg.input_sentence_size,
                shuffle_input_sentence=True,
                normalization_rule_name=cfg.normalization,
                byte_fallback=cfg.byte_fallback,
                num_threads=cfg.num_threads,
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                minloglevel=2,  # errors only: the trainer is very chatty
                **extra,
            )
        except RuntimeError as e:  # e.g. a vocab_size too small or too large for the text
            reason = str(e).split("] ", 1)[-1].strip()
            raise ValueError(f"tokenizer training failed (vocab_size={cfg.vocab_size}): {reason}") from None
        return cls(writer.getvalue())

    def to_bytes(self) -> bytes:
        """The serialized model proto (what checkpoints store)."""
        return self._proto

    @classmethod
    def from_bytes(cls, model_proto: bytes) -> Tokenizer:
        return cls(model_proto)

    @property
    def fingerprint(self) -> str:
        """sha256 hex digest of the model proto."""
        return self._fingerprint

    def __getstate__(self) -> bytes:
        return self._proto

    def __setstate__(self, state: bytes) -> None:
        self.__init__(state)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tokenizer) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self._fingerprint)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, sha256={self.fingerprint[:12]})"

    # -- ids ------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    @property
    def pad_id(self) -> int:
        return self._sp.pad_id()

    @property
    def unk_id(self) -> int:
        return self._sp.unk_id()

    @property
    def bos_id(self) -> int:
        return self._sp.bos_id()

    @property
    def eos_id(self) -> int:
        return self._sp.eos_id()

    def piece_id(self, piece: str) -> int:
        """The id of a reserved piece (a language tag); ``KeyError`` when the model lacks it."""
        i = self._sp.piece_to_id(piece)
        if self._sp.id_to_piece(i) != piece:
            raise KeyError(piece)
        return i

    # -- text <-> ids ---------------------------------------------------------------------
    def encode(self, texts: Sequence[str], alpha: float = 0.0, seed: int = 0) -> list[list[int]]:
        """Batched encoding, no bos/eos: ``collate`` adds them.

        ``alpha > 0`` samples a segmentation instead of the best one (subword
        regularization: the BPE-dropout rate of a ``bpe`` model, the smoothing of a
        ``unigram`` one), drawn from ``seed``: one thread, so the same call gives the same ids.
        """
        if alpha <= 0.0:
            if len(texts) <= FEW:
                return [self._sp.encode(t, out_type=int) for t in texts]
            return self._sp.encode(list(texts), out_type=int)
        spm.set_random_generator_seed(seed)  # process-global: reseeded before every call
        return self._sp.encode(list(texts), out_type=int, enable_sampling=True, alpha=alpha,
                               nbest_size=-1, num_threads=1)

    def encode_once(self, texts: Sequence[str],
                    known: dict[str, list[int]] | None = None) -> list[list[int]]:
        """:meth:`encode`, each distinct text once while ``known`` (text -> ids, filled as it
        goes) is kept: a caller needing lengths first and ids later tokenizes once."""
        known = {} if known is None else known
        new = [t for t in dict.fromkeys(texts) if t not in known]
        if new:
            known.update(zip(new, self.encode(new)))
        return [known[t] for t in texts]

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Batched decoding; pad/bos/eos ids are dropped wherever they occur (no truncation)."""
        clean = [[int(i) for i in seq if int(i) not in self._specials] for seq in ids]
        if len(clean) <= FEW:
            return [self._sp.decode(seq) for seq in clean]
        return self._sp.decode(clean)

    def id_to_piece(self, ids: Sequence[int]) -> list[str]:
        """Piece strings of ids, one by one (plot labels for generated ids)."""
        return [self._sp.id_to_piece(int(i)) for i in ids]

    def pieces(self, text: str) -> list[str]:
        """Subword pieces of one sentence (for plots and inspection)."""
        return self._sp.encode(text, out_type=str)


def check_fingerprint(tok: Tokenizer, expected_sha: str) -> None:
    """Raise ``ValueError`` unless ``tok`` is exactly the model with sha256 ``expected_sha``."""
    if tok.fingerprint != expected_sha:
        raise ValueError(
            f"tokenizer fingerprint mismatch: expected {expected_sha}, got {tok.fingerprint}"
        )


@dataclass(frozen=True)
class TokenizerPair:
    """Source and target tokenizers; the same object when the vocabulary is joint."""

    src: Tokenizer
    tgt: Tokenizer

    @property
    def joint(self) -> bool:
        return self.src.fingerprint == self.tgt.fingerprint

    def to_state(self) -> dict[str, dict[str, Any]]:
        """``{"src": {"model": bytes, "sha256": str}, "tgt": {...}}`` (``weights_only``-safe)."""
        return {
            side: {"model": tok.to_bytes(), "sha256": tok.fingerprint}
            for side, tok in (("src", self.src), ("tgt", self.tgt))
        }

    @classmethod
    def from_state(cls, state: dict[str, dict[str, Any]]) -> TokenizerPair:
        """Rebuild from ``to_state()``; refuses a model whose bytes do not match its sha256."""
        src = Tokenizer.from_bytes(state["src"]["model"])
        check_fingerprint(src, state["src"]["sha256"])
        tgt = Tokenizer.from_bytes(state["tgt"]["model"])
        check_fingerprint(tgt, state["tgt"]["sha256"])
        return cls(src, src if tgt == src else tgt)  # joint: share one object, as in training


def check_tokenizers(expected: TokenizerPair, given: TokenizerPair) -> None:
    """Refuse tokenizers other than the model's (e.g. passed on a command line): a model
    decodes garbage with another vocabulary, however similar it looks."""
    for side in ("src", "tgt"):
        want, got = getattr(expected, side).fingerprint, getattr(given, side).fingerprint
        if want != got:
            raise ValueError(
                f"{side} tokenizer mismatch: the model was trained with sha256 {want[:16]}..., "
                f"got {got[:16]}...; use the tokenizer stored in the checkpoint"
            )
