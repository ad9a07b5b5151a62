"""The export tests' tokenizer: one joint SentencePiece model of 60 pieces."""

import pytest
import torch

from seq2seq.config import TokenizerConfig


def _texts(n: int = 300) -> list[str]:
    g = torch.Generator().manual_seed(1)
    words = ["der", "die", "das", "haus", "hund", "katze", "ein", "mann", "frau", "läuft",
             "the", "house", "dog", "cat", "a", "man", "woman", "runs", "street", "red"]
    return [" ".join(words[i] for i in torch.randint(0, len(words), (6,), generator=g).tolist())
            for _ in range(n)]


@pytest.fixture(scope="module")
def tokenizers():
    tok = pytest.importorskip("seq2seq.data.tokenizer")
    t = tok.Tokenizer.train(_texts(), TokenizerConfig(vocab_size=60, num_threads=1))
    return tok.TokenizerPair(t, t)
