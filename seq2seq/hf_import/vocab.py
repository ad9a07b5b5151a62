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

# The share of a model's ids vocab.json may leave without a piece, and of a SentencePiece
# model's pieces it may lack: beyond it, the files do not belong together.
MISSING_SHARE = 0.01
# Ordinary text in the scripts OPUS-MT covers: a working SentencePiece model segments at
# least one of them without <unk> taking over half the pieces.
SAMPLES = (
    "The children are playing in the park near the river, and 12 dogs watch them.",
    "Die Kinder spielen im Park am Fluss, und zwölf Hunde schauen zu.",
    "Дети играют в парке у реки, и двенадцать собак смотрят на них.",
    "Τα παιδιά παίζουν στο πάρκο κοντά στο ποτάμι.",
    "يلعب الأطفال في الحديقة بالقرب من النهر.",
    "הילדים משחקים בפארק ליד הנהר.",
    "बच्चे नदी के पास पार्क में खेल रहे हैं।",
    "孩子们在河边的公园里玩耍。",
    "子供たちは川の近くの公園で遊んでいます。",
    "아이들이 강 근처 공원에서 놀고 있습니다.",
    "เด็กๆ กำลังเล่นอยู่ในสวนใกล้แม่น้ำ",
    "12 + 30 = 42; 7 × 6 = 42.",
)


def _model_pb2():
    from sentencepiece import sentencepiece_model_pb2  # needs protobuf

    return sentencepiece_model_pb2


def read_vocab(path: Path, size: int) -> list[str | None]:
    """``vocab.json`` as a list (index = model id; None for an id no piece has); refused
    when it gives a piece to fewer than ``1 - MISSING_SHARE`` of the model's ids."""
    from seq2seq.hf_import.folder import read_json

    mapping = read_json(path)
    vocab: list[str | None] = [None] * size
    for piece, i in mapping.items():
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < size:
            raise ValueError(f"{path}: piece {piece!r} has id {i!r}, outside the model's "
                             f"vocabulary of {size}")
        if vocab[i] is not None:
            raise ValueError(f"{path}: id {i} is given to both {vocab[i]!r} and {piece!r}")
        vocab[i] = piece
    missing = vocab.count(None)
    if missing > MISSING_SHARE * size:
        raise ValueError(f"{path}: gives a piece to {size - missing} of the model's {size} ids "
                         f"(at least {1 - MISSING_SHARE:.0%} needed; the others would be "
                         "translated as placeholders): not this model's vocabulary?")
    return vocab


def check_spm(path: Path, vocab: list[str | None], proto) -> None:
    """Refuse a SentencePiece model that does not load, that turns every :data:`SAMPLES`
    sentence into mostly ``<unk>``, or whose pieces ``vocab`` lacks (over ``MISSING_SHARE``
    of them: they would all become ``<unk>``)."""
    import sentencepiece as spm

    P = proto.SentencePiece
    pieces = [p.piece for p in proto.pieces if p.type in (P.NORMAL, P.USER_DEFINED, P.BYTE)]
    if not pieces or not any(p.type == P.UNKNOWN for p in proto.pieces):
        raise ValueError(f"{path}: not a SentencePiece model (no pieces: an empty or "
                         "truncated file?)")
    try:
        sp = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
        encoded = sp.encode(list(SAMPLES))
    except Exception as e:  # RuntimeError from the C++ loader
        raise ValueError(f"{path}: not a usable SentencePiece model "
                         f"({' '.join(str(e).split())[:120]})") from None
    if all(ids.count(sp.unk_id()) * 2 > len(ids) for ids in encoded):
        raise ValueError(f"{path}: turns ordinary text into mostly <unk> in every script "
                         "tried: a damaged or placeholder SentencePiece model")
    known = set(vocab)
    lacking = [p for p in pieces if p not in known]
    if len(lacking) > MISSING_SHARE * len(pieces):
        raise ValueError(f"{path}: {len(lacking)} of its {len(pieces)} pieces (e.g. "
                         f"{lacking[0]!r}) are not in the vocabulary, so would become <unk>: "
                         "not this model's SentencePiece model, or not its vocab.json?")


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
    check_spm(spm_path, vocab, proto)
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
            if not 0 <= i < len(vocab) or vocab[i] is None:
                raise ValueError(f"{folder}: the {role} id {i} has no piece in the {side}")
    src = rewrite(folder / "source.spm", src_vocab, specials)
    tgt = rewrite(folder / "target.spm", tgt_vocab, specials)
    return TokenizerPair(src, src if tgt == src else tgt)
