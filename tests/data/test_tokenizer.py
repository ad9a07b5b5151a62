"""Tokenizer properties on a Multi30k subset: round trip, fixed ids, stable fingerprints."""

import gzip
import io
import pickle
from pathlib import Path

import pytest
import torch

from seq2seq.config import TokenizerConfig
from seq2seq.data.tokenizer import Tokenizer, TokenizerPair, check_fingerprint

DATA = Path(__file__).resolve().parents[2] / "data" / "multi30k"
N = 2000


def read_lines(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")[:-1]


@pytest.fixture(scope="module")
def corpus() -> dict[str, list[str]]:
    return {
        lang: read_lines(DATA / f"train.{lang}.gz")[:N] + read_lines(DATA / f"val.{lang}.gz")[:200]
        for lang in ("de", "en")
    }


def _train_texts(corpus: dict[str, list[str]]) -> list[str]:
    return corpus["de"][:N] + corpus["en"][:N]


@pytest.fixture(scope="module")
def tok(corpus) -> Tokenizer:
    return Tokenizer.train(_train_texts(corpus), TokenizerConfig(vocab_size=1000))


def _normal(text: str) -> str:
    # SentencePiece collapses runs of spaces: "normal" text has single spaces
    return " ".join(text.split())


def test_special_ids_and_size(tok):
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    assert tok.vocab_size == 1000


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_round_trip(corpus, model_type):
    tok = Tokenizer.train(
        _train_texts(corpus), TokenizerConfig(vocab_size=1000, model_type=model_type)
    )
    for lang in ("de", "en"):
        texts = [_normal(t) for t in corpus[lang]]
        ids = tok.encode(texts)
        assert all(isinstance(i, int) for seq in ids for i in seq)
        known = [(t, seq) for t, seq in zip(texts, ids, strict=True) if tok.unk_id not in seq]
        assert len(known) > 0.95 * len(texts)  # held-out lines may hold unseen characters
        assert tok.decode([seq for _, seq in known]) == [t for t, _ in known]


def test_encode_adds_no_specials_and_decode_drops_them(tok, corpus):
    ids = tok.encode(corpus["en"][:50])
    specials = {tok.pad_id, tok.bos_id, tok.eos_id}
    assert not any(specials & set(seq) for seq in ids)
    noisy = [[tok.bos_id, *seq, tok.eos_id, tok.pad_id, tok.pad_id] for seq in ids]
    noisy[0].insert(2, tok.pad_id)  # anywhere, not only at the end
    assert tok.decode(noisy) == tok.decode(ids)


def test_pieces(tok):
    text = "Ein Mann fährt Fahrrad."
    pieces = tok.pieces(text)
    assert all(isinstance(p, str) for p in pieces)
    assert "".join(pieces).replace("\u2581", " ").strip() == text


def test_fingerprint_stable(corpus, tok):
    cfg = TokenizerConfig(vocab_size=1000)
    again = Tokenizer.train(iter(_train_texts(corpus)), cfg)  # an iterator works too
    assert again.to_bytes() == tok.to_bytes()
    assert again.fingerprint == tok.fingerprint
    assert len(tok.fingerprint) == 64
    assert Tokenizer.from_bytes(tok.to_bytes()).fingerprint == tok.fingerprint
    assert pickle.loads(pickle.dumps(tok)).fingerprint == tok.fingerprint
    other = Tokenizer.train(_train_texts(corpus), TokenizerConfig(vocab_size=900))
    assert other.fingerprint != tok.fingerprint


def test_pair_state_round_trip(corpus, tok):
    joint = TokenizerPair(tok, tok)
    buf = io.BytesIO()
    torch.save(joint.to_state(), buf)  # what a checkpoint does
    buf.seek(0)
    back = TokenizerPair.from_state(torch.load(buf, weights_only=True))
    assert back.joint and back.src is back.tgt
    assert back.src.fingerprint == tok.fingerprint

    en = Tokenizer.train(corpus["en"][:N], TokenizerConfig(vocab_size=800))
    split = TokenizerPair.from_state(TokenizerPair(tok, en).to_state())
    assert not split.joint
    assert (split.src.fingerprint, split.tgt.fingerprint) == (tok.fingerprint, en.fingerprint)


def test_fingerprint_mismatch_refused(corpus, tok):
    state = TokenizerPair(tok, tok).to_state()
    state["tgt"]["sha256"] = "0" * 64
    with pytest.raises(ValueError, match="tokenizer fingerprint mismatch"):
        TokenizerPair.from_state(state)

    other = Tokenizer.train(corpus["en"][:N], TokenizerConfig(vocab_size=800))
    state = TokenizerPair(tok, tok).to_state()
    state["src"]["model"] = other.to_bytes()  # right hash, wrong model
    with pytest.raises(ValueError, match="tokenizer fingerprint mismatch"):
        TokenizerPair.from_state(state)

    check_fingerprint(tok, tok.fingerprint)
    with pytest.raises(ValueError, match="tokenizer fingerprint mismatch"):
        check_fingerprint(tok, other.fingerprint)


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_sampled_segmentation_same_text_seeded(corpus, model_type):
    """Subword regularization changes the segmentation only: decoding gives the same text;
    the draw is a function of the seed; alpha 0 is the best segmentation."""
    tok = Tokenizer.train(_train_texts(corpus), TokenizerConfig(vocab_size=1000, model_type=model_type))
    texts = [_normal(t) for t in corpus["en"][:300]]
    best = tok.encode(texts)
    sampled = tok.encode(texts, alpha=0.1, seed=7)
    assert tok.decode(sampled) == tok.decode(best)
    assert sampled == tok.encode(texts, alpha=0.1, seed=7)
    assert sampled != tok.encode(texts, alpha=0.1, seed=8)
    changed = sum(s != b for s, b in zip(sampled, best, strict=True))
    assert changed > len(texts) // 4
    assert tok.encode(texts, alpha=0.0, seed=7) == best


@pytest.mark.parametrize("n", [1, 2, 16, 17, 100])
def test_a_batch_encodes_and_decodes_as_its_texts_one_by_one(tok, corpus, n):
    """Small batches go one call a text, larger ones through SentencePiece's batch call:
    either way the ids and texts are those of one text at a time."""
    texts = corpus["de"][:n]
    ids = tok.encode(texts)
    assert ids == [tok.encode([t])[0] for t in texts]
    assert tok.decode(ids) == [tok.decode([row])[0] for row in ids]
    assert len(ids) == n


def test_encode_once_is_encode_and_tokenizes_each_text_once(tok, corpus, monkeypatch):
    """Whatever is already known, in any order and with repeats, ``encode_once`` gives what
    ``encode`` gives, and sends SentencePiece only the distinct texts not yet known."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    pool = corpus["de"][:12] + corpus["en"][:4] + ["", " ", "a a a"]
    want = dict(zip(pool, tok.encode(pool)))
    asked: list[str] = []
    encode = tok.encode
    monkeypatch.setattr(tok, "encode", lambda texts: asked.extend(texts) or encode(texts))

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.sampled_from(pool), max_size=10), st.lists(st.sampled_from(pool), max_size=6))
    def check(texts, known_first):
        known = {t: want[t] for t in known_first}
        asked.clear()
        assert tok.encode_once(texts, known) == [want[t] for t in texts]
        assert sorted(asked) == sorted(set(texts) - set(known_first))
        assert all(known[t] == want[t] for t in texts)  # what it learned is kept
    check()
    assert tok.encode_once(pool[:3]) == [want[t] for t in pool[:3]]  # no memo: plain encode
