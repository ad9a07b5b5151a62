"""Marian's vocabulary as our tokenizers: SentencePiece models whose ids are Marian's ids.

A MarianMT folder holds one SentencePiece model per side (``source.spm``, ``target.spm``)
and ``vocab.json`` (piece -> model id; ``target_vocab.json`` for the target side when the
vocabularies are separate). ``MarianTokenizer`` segments with the side's model, then maps
each piece through the JSON (unknown pieces -> ``<unk>``). Our checkpoints hold one
self-contained SentencePiece model per side whose ids *are* the model's, so each side's
model is rewritten with its pieces in vocabulary order: a piece the side's model knows
keeps its score and type; ``<unk>`` becomes the UNKNOWN piece; ``</s>``, ``<pad>`` and the
decoder's start token become CONTROL pieces. Every other entry (the other side's pieces in
a joint vocabulary, language tokens such as ``>>fra<<``) becomes a piece SentencePiece
never produces, so segmentation is exactly that of the original model: UNUSED in a
unigram model (OPUS-MT's kind; decoded as its text, as MarianTokenizer does), CONTROL in a
BPE model (where UNUSED pieces would still take part in merges; decoded as nothing).
One difference remains: text the side's model cannot cover (characters it never saw) is
``<unk>`` here, while MarianTokenizer looks the uncovered run up in the joint vocabulary
and finds it when the other side's model has it as a piece (say a digit only the target
side saw).
"""

from __future__ import annotations

from pathlib import Path

from seq2seq.data.tokenizer import Tokenizer


def _model_pb2():
    from sentencepiece import sentencepiece_model_pb2  # needs protobuf

    return sentencepiece_model_pb2


def read_vocab(path: Path, size: int) -> list[str | None]:
    """``vocab.json`` as a list (index = model id; None for an id no piece has)."""
    import json

    try:
        mapping = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot be read as a JSON vocabulary ({e})") from None
    vocab: list[str | None] = [None] * size
    for piece, i in mapping.items():
        if not isinstance(i, int) or not 0 <= i < size:
            raise ValueError(f"{path}: piece {piece!r} has id {i!r}, outside the model's "
                             f"vocabulary of {size}")
        if vocab[i] is not None:
            raise ValueError(f"{path}: id {i} is given to both {vocab[i]!r} and {piece!r}")
        vocab[i] = piece
    return vocab


def rewrite(spm_path: Path, vocab: list[str | None], specials: dict[str, int]) -> Tokenizer:
    """The SentencePiece model at ``spm_path`` with ids = ``vocab`` order (module docstring).
    ``specials``: ``{"unk": id, "eos": id, "pad": id, "bos": id}`` in model ids (``bos``:
    the decoder's start token, which may be the pad)."""
    pb2 = _model_pb2()
    P = pb2.ModelProto.SentencePiece
    proto = pb2.ModelProto()
    try:
        proto.ParseFromString(spm_path.read_bytes())
    except Exception as e:  # OSError, DecodeError
        raise ValueError(f"{spm_path}: not a SentencePiece model ({e})") from None
    known = {p.piece: (p.score, p.type) for p in proto.pieces if p.type in (P.NORMAL, P.USER_DEFINED, P.BYTE)}
    roles = {i: role for role, i in specials.items()}
    foreign = P.CONTROL if proto.trainer_spec.model_type == pb2.TrainerSpec.BPE else P.UNUSED
    del proto.pieces[:]
    for i, piece in enumerate(vocab):
        if piece is None:
            piece = f"<unused{i}>"
            while piece in vocab:
                piece = f"<{piece}>"
        entry = proto.pieces.add(piece=piece, score=0.0)
        if i == specials["unk"]:
            entry.type = P.UNKNOWN
        elif i in roles:
            entry.type = P.CONTROL
        elif piece in known:
            entry.score, entry.type = known[piece]
        else:
            entry.type = foreign
    spec = proto.trainer_spec
    spec.vocab_size = len(vocab)
    for role in ("unk", "bos", "eos", "pad"):
        setattr(spec, f"{role}_id", specials[role])
        setattr(spec, f"{role}_piece", proto.pieces[specials[role]].piece)
    return Tokenizer(proto.SerializeToString())


def marian_tokenizers(folder: Path, sizes: tuple[int, int], specials: dict[str, int],
                      separate: bool):
    """Our ``TokenizerPair`` of a MarianMT folder (``sizes``: source and target vocabulary)."""
    from seq2seq.data.tokenizer import TokenizerPair

    src_vocab = read_vocab(folder / "vocab.json", sizes[0])
    tgt_vocab = read_vocab(folder / "target_vocab.json", sizes[1]) if separate else src_vocab
    for side, vocab in (("vocab.json", src_vocab), ("target vocabulary", tgt_vocab)):
        for role, i in specials.items():
            if vocab[i] is None:
                raise ValueError(f"{folder}: the {role} id {i} has no piece in the {side}")
    src = rewrite(folder / "source.spm", src_vocab, specials)
    tgt = rewrite(folder / "target.spm", tgt_vocab, specials)
    return TokenizerPair(src, src if tgt == src else tgt)
