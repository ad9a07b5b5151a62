"""Batches from the stored corpus: the same batches as before the scale work on Multi30k; the
fast packing, length order and Arrow collation equal their simple definitions; the sampler's
state is a few bytes a pair."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from helpers import ROOT

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data.batch import Ragged, collate, pack
from seq2seq.data.datamodule import Seq2SeqDataModule
from seq2seq.data.sampler import TokenBudgetSampler, length_order

DATA = ROOT / "data" / "multi30k"
SHIPPED = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"


def sha256_json(obj) -> str:
    return hashlib.sha256(json.dumps(obj).encode()).hexdigest()


MULTI30K_DE_EN_BEFORE = {
    "pairs": 28998,
    "content": "716c379d86832e3ff2ea4d7a17c8780f22efc1d6ab801b49eb9d0a1393cebe34",
    "epochs": {
        0: (119, "774b2b3b83ec115ae081ae4175bf611f48066e810d1a3228f1ae243c7324df33"),
        1: (119, "ba6dce65e864bb1c18b97b6f9d4ec65e31876e283a7b950053a41241cbce5670"),
    },
}


def test_multi30k_batches_unchanged(tmp_path):
    """Same tokenizer (the shipped model's, byte for byte), same token ids in the same rows,
    and the same batches in the same order for epochs 0 and 1 as before the rewrite."""
    cfg = DataConfig(corpus="multi30k", data_dir=str(DATA), src_lang="de", tgt_lang="en",
                     tokenizer=TokenizerConfig(vocab_size=8000, joint=True), max_tokens=4096,
                     cache_dir=str(tmp_path))
    dm = Seq2SeqDataModule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    shipped = torch.load(SHIPPED, weights_only=True)["seq2seq"]["tokenizers"]["src"]["sha256"]
    assert dm.tokenizers.src.fingerprint == shipped  # an oracle independent of the recording

    before = MULTI30K_DE_EN_BEFORE
    assert len(dm.train_dataset) == before["pairs"]
    content = hashlib.sha256()
    for rows in dm.train_dataset.iter(batch_size=10_000):
        content.update(json.dumps([rows["src_ids"], rows["tgt_ids"]]).encode())
    assert content.hexdigest() == before["content"]
    for epoch, (n_batches, digest) in before["epochs"].items():
        loader = dm.train_dataloader()
        loader.batch_sampler.set_epoch(epoch)
        ids = [batch.ids.tolist() for batch in loader]
        assert (len(ids), sha256_json(ids)) == (n_batches, digest), f"epoch {epoch}"


def pack_greedy(sizes: np.ndarray, max_tokens: int) -> list[int]:
    """The reference: one example at a time, a new batch when count x size would exceed."""
    bounds, start = [], 0
    for i, size in enumerate(sizes.tolist()):
        if i > start and (i - start + 1) * size > max_tokens:
            bounds.append(i)
            start = i
    return bounds


@pytest.mark.parametrize("n,high,max_tokens", [
    (0, 5, 10), (1, 5, 10), (50, 3, 10), (500, 60, 512), (500, 600, 512),  # sizes above the budget
    (2000, 200, 4096), (300, 1, 7), (300, 40, 1),
])
def test_pack_equals_the_greedy_rule(n, high, max_tokens):
    rng = np.random.default_rng(n + high)
    for _ in range(20):
        sizes = np.sort(rng.integers(0, high + 1, n))
        assert pack(sizes, max_tokens).tolist() == pack_greedy(sizes, max_tokens)


@pytest.mark.parametrize("size_high,n", [(300, 5000), (2**40, 5000)], ids=["packed-key", "lexsort"])
def test_length_order_equals_lexsort(size_high, n):
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 40, n, dtype=np.int64) * (size_high // 40)  # many ties, any magnitude
    tiebreak = sizes + rng.integers(0, 3, n)
    noise = rng.permutation(n)
    assert np.array_equal(length_order(sizes, tiebreak, noise), np.lexsort((noise, tiebreak, sizes)))
    assert np.array_equal(length_order(sizes, tiebreak), np.lexsort((tiebreak, sizes)))


@pytest.mark.parametrize("seed", range(5))
def test_collate_of_arrow_columns_equals_collate_of_rows(seed):
    """The loader's vectorized path (flat values + lengths, as Arrow holds them) builds the
    same tensors as collating row by row, empty sequences included."""
    rng = np.random.default_rng(seed)
    rows = [{side: rng.integers(4, 60_000, rng.integers(0, 15)).tolist() for side in ("src_ids", "tgt_ids")} | {"id": i}
            for i in range(int(rng.integers(1, 40)))]

    def ragged(side: str) -> Ragged:
        return Ragged(np.array([v for r in rows for v in r[side]], dtype=np.uint16),
                      np.array([len(r[side]) for r in rows], dtype=np.int32))

    columns = {"src_ids": ragged("src_ids"), "tgt_ids": ragged("tgt_ids"), "id": np.arange(len(rows))}
    a, b = collate(rows, 0, 2, 3), collate(columns, 0, 2, 3)
    for name in ("src", "tgt_in", "tgt_out", "ids"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_sampler_state_is_compact_numpy():
    """No Python lists sized by the corpus; a few bytes a pair (2 million pairs here)."""
    rng = np.random.default_rng(0)
    src = rng.integers(2, 128, 2_000_000)
    sampler = TokenBudgetSampler(src, np.clip(src + rng.integers(-5, 6, len(src)), 2, None), 4096)
    state = vars(sampler)
    assert not any(isinstance(v, list | tuple) and len(v) > 100 for v in state.values())
    per_pair = sum(v.nbytes for v in state.values() if isinstance(v, np.ndarray)) / len(src)
    assert per_pair <= 4
