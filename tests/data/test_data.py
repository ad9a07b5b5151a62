"""Data pipeline properties: formats, errors, caching, token-budget batching, collation."""

import gzip
import json
import logging
import os
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # no hub in tests

import numpy as np
import pytest
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.fabric.utilities.data import _set_sampler_epoch

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data import cache, prepare, sources
from seq2seq.data.batch import Batch, collate
from seq2seq.data.datamodule import Seq2SeqDataModule
from seq2seq.data.prepare import load_split
from seq2seq.data.sampler import TokenBudgetSampler
from seq2seq.data.sources import (
    MULTI30K_LANGS,
    MULTI30K_PARTIAL,
    MULTI30K_SPLITS,
    read_lines,
    resolve_corpus,
)
from seq2seq.data.tokenizer import Tokenizer

DATA = Path(__file__).resolve().parents[2] / "data" / "multi30k"
N_TRAIN, N_VAL = 2000, 200
SMALL_TOK = TokenizerConfig(vocab_size=1000)


# -- fixtures ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """First Multi30k lines, de/en, as plain (train) and gzip (val) files."""
    root = tmp_path_factory.mktemp("small")
    for lang in ("de", "en"):
        train = read_lines(DATA / f"train.{lang}.gz")[:N_TRAIN]
        (root / f"train.{lang}").write_text("\n".join(train) + "\n", encoding="utf-8")
        val = read_lines(DATA / f"val.{lang}.gz")[:N_VAL]
        (root / f"val.{lang}.gz").write_bytes(gzip.compress(("\n".join(val) + "\n").encode()))
    return root


def small_cfg(small: Path, cache: Path, **overrides) -> DataConfig:
    kw = {
        "corpus": None,
        "train_src": str(small / "train.de"),
        "train_tgt": str(small / "train.en"),
        "valid_src": str(small / "val.de.gz"),
        "valid_tgt": str(small / "val.en.gz"),
        "tokenizer": SMALL_TOK,
        "max_tokens": 1024,
        "cache_dir": str(cache),
    }
    return DataConfig(**{**kw, **overrides})


def one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


# -- corpus resolution ---------------------------------------------------------------------
def test_multi30k_files_resolve():
    for split in MULTI30K_SPLITS:
        langs = [lang for lang in MULTI30K_LANGS if split in MULTI30K_PARTIAL.get(lang, MULTI30K_SPLITS)]
        for src in langs:
            tgt = next(lang for lang in langs if lang != src)
            cfg = DataConfig(data_dir=str(DATA), src_lang=src, tgt_lang=tgt)
            src_path, tgt_path = resolve_corpus(cfg, split)
            assert src_path.is_file() and tgt_path.is_file()
            assert src_path.name == f"{split}.{src}.gz"


def test_unknown_language_or_split():
    with pytest.raises(ValueError) as exc:
        resolve_corpus(DataConfig(src_lang="ja"), "train")
    assert "'ja'" in one_line(exc) and "'cs'" in str(exc.value)
    with pytest.raises(ValueError) as exc:  # Czech: train, val and test_2016_flickr only
        resolve_corpus(DataConfig(tgt_lang="cs"), "test_2017_flickr")
    assert "tgt_lang" in one_line(exc) and "test_2016_flickr" in str(exc.value)
    with pytest.raises(ValueError) as exc:
        resolve_corpus(DataConfig(), "test_2018")
    assert "'test_2018'" in one_line(exc) and "test_2017_mscoco" in str(exc.value)


# -- formats -------------------------------------------------------------------------------
PAIRS = [
    ("Ein Hund läuft.", "A dog runs."),
    ("  Zwei Männer  ", " Two men "),  # outer whitespace is stripped
    ("", "Nothing on the left."),  # dropped
    ('Er sagt "Hallo".', 'He says "hello".'),  # quotes are text (QUOTE_NONE)
    ("   ", "blank source"),  # dropped
    ("Ein Kind.", ""),  # dropped
    ("Eine Frau mit Hut.", "A woman with a hat."),
]
EXPECTED = [
    ("Ein Hund läuft.", "A dog runs."),
    ("Zwei Männer", "Two men"),
    ('Er sagt "Hallo".', 'He says "hello".'),
    ("Eine Frau mit Hut.", "A woman with a hat."),
]


def _write_formats(root: Path) -> dict[str, DataConfig]:
    src, tgt = zip(*PAIRS, strict=True)
    (root / "p.de").write_text("\n".join(src) + "\n", encoding="utf-8")
    (root / "p.en.gz").write_bytes(gzip.compress(("\n".join(tgt) + "\n").encode()))
    (root / "p.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    jsonl = "".join(
        json.dumps({"id": i, "translation": {"de": s, "en": t}}) + "\n"
        for i, (s, t) in enumerate(PAIRS)
    )
    (root / "p.jsonl").write_text(jsonl, encoding="utf-8")
    base = {"corpus": None, "cache_dir": str(root / "cache")}
    return {
        "text": DataConfig(
            **base,
            train_src=str(root / "p.de"),
            train_tgt=str(root / "p.en.gz"),
            valid_src="-",
            valid_tgt="-",
        ),
        "tsv": DataConfig(**base, format="tsv", train_src=str(root / "p.tsv"), valid_src="-"),
        "jsonl": DataConfig(
            **base,
            format="jsonl",
            train_src=str(root / "p.jsonl"),
            valid_src="-",
            src_field="translation.de",
            tgt_field="translation.en",
        ),
    }


def test_formats_give_identical_examples(tmp_path, caplog):
    for fmt, cfg in _write_formats(tmp_path).items():
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="seq2seq.data"):
            ds = load_split(cfg, "train")
        assert list(zip(ds["src"], ds["tgt"], strict=True)) == EXPECTED, fmt
        assert "dropped 3 of 7 pairs with an empty side" in caplog.text, fmt


def test_tokenized_formats_identical(tmp_path):
    cfgs = _write_formats(tmp_path)
    pair = prepare.train_tokenizers(load_split(cfgs["text"], "train"), TokenizerConfig(vocab_size=40))
    rows = [prepare.tokenized_split(cfg, "train", pair, train=True)[:] for cfg in cfgs.values()]
    assert rows[0] == rows[1] == rows[2]


def test_hub_path_same_examples(tmp_path, monkeypatch):
    """The hub branch, offline: a stand-in for ``load_dataset`` with WMT-style records."""
    records = [{"de": s, "en": t} for s, t in PAIRS]
    hub = sources.datasets.Dataset.from_dict({"translation": records, "n": list(range(len(PAIRS)))})
    calls = []

    def fake_load_dataset(name, config, split, cache_dir, streaming):
        calls.append((name, config, split, streaming))
        return hub

    monkeypatch.setattr(sources.datasets, "load_dataset", fake_load_dataset)
    cfg = DataConfig(
        corpus=None,
        format="hub",
        hub_name="org/wmt",
        hub_config="de-en",
        src_field="translation.de",
        tgt_field="translation.en",
        valid_split="validation",
        cache_dir=str(tmp_path),
    )
    ds = load_split(cfg, "train")
    assert list(zip(ds["src"], ds["tgt"], strict=True)) == EXPECTED
    assert calls[0] == ("org/wmt", "de-en", "train", False)
    assert "hub:org/wmt/de-en[train]" == sources.describe_split(cfg, "train")
    assert cache.split_fingerprint(cfg, "train") == cache.split_fingerprint(cfg, "train")


def test_num_proc_gives_same_tokens(tmp_path):
    cfgs = _write_formats(tmp_path)
    raw = load_split(cfgs["text"], "train")
    pair = prepare.train_tokenizers(raw, TokenizerConfig(vocab_size=40))
    one = prepare.tokenize_pairs(raw, pair)
    two = prepare.tokenize_pairs(raw, pair, num_proc=2)  # the tokenizer is pickled to workers
    assert one[:] == two[:]


# -- bad input -----------------------------------------------------------------------------
def test_missing_file(tmp_path):
    cfg = DataConfig(
        corpus=None,
        train_src=str(tmp_path / "nope.de"),
        train_tgt=str(tmp_path / "nope.en"),
        valid_src="-",
        valid_tgt="-",
    )
    with pytest.raises(FileNotFoundError) as exc:
        load_split(cfg, "train")
    assert "nope.de" in one_line(exc)


def test_mismatched_line_counts(tmp_path):
    (tmp_path / "a.de").write_text("eins\nzwei\ndrei\n")
    (tmp_path / "a.en").write_text("one\ntwo\n")
    for first, second, counts in (("a.de", "a.en", ("3", "2")), ("a.en", "a.de", ("2", "3"))):
        with pytest.raises(ValueError) as exc:
            list(sources.text_pairs(tmp_path / first, tmp_path / second))
        msg = one_line(exc)
        assert f"{first} has {counts[0]} lines, " in msg and f"{second} has {counts[1]}" in msg


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_invalid_utf8_names_line(tmp_path, suffix):
    raw = b"eins\nzwei\n" + b"dr\xffei\n" + b"vier\n"
    path = tmp_path / f"bad.de{suffix}"
    path.write_bytes(gzip.compress(raw) if suffix else raw)
    with pytest.raises(ValueError) as exc:
        read_lines(path)
    assert f"bad.de{suffix}:3:" in one_line(exc) and "UTF-8" in str(exc.value)


def test_bad_tsv_and_jsonl_lines(tmp_path):
    (tmp_path / "x.tsv").write_text("a\tb\nc\td\te\n")
    with pytest.raises(ValueError) as exc:
        list(sources.tsv_pairs(tmp_path / "x.tsv"))
    assert "x.tsv:2:" in one_line(exc)
    (tmp_path / "x.jsonl").write_text('{"src": "a", "tgt": "b"}\n{"src": "c"}\n')
    with pytest.raises(ValueError) as exc:
        list(sources.jsonl_pairs(tmp_path / "x.jsonl"))
    assert "x.jsonl:2:" in one_line(exc) and "'tgt'" in str(exc.value)


def test_empty_after_filtering(tmp_path, small):
    (tmp_path / "e.de").write_text("\n  \nein\n")
    (tmp_path / "e.en").write_text("a\nb\n\n")
    with pytest.raises(ValueError) as exc:
        list(sources.clean(sources.text_pairs(tmp_path / "e.de", tmp_path / "e.en"), "e.de + e.en"))
    assert "e.de" in one_line(exc) and "no sentence pairs left" in str(exc.value)
    cfg = small_cfg(small, tmp_path / "cache", max_len=2)  # nothing fits
    with pytest.raises(ValueError) as exc:
        Seq2SeqDataModule(cfg).prepare_data()
    assert "train.de" in one_line(exc) and "length" in str(exc.value)


# -- caching -------------------------------------------------------------------------------
def test_second_prepare_reuses_cache(tmp_path, small, monkeypatch):
    cfg = small_cfg(small, tmp_path / "cache")
    first = Seq2SeqDataModule(cfg)
    first.prepare_data()
    first.setup("fit")

    def boom(*args, **kwargs):
        raise AssertionError("cache miss: retrained or re-tokenized")

    monkeypatch.setattr(Tokenizer, "train", boom)
    monkeypatch.setattr(prepare, "tokenize_pairs", boom)
    second = Seq2SeqDataModule(small_cfg(small, tmp_path / "cache"))
    second.prepare_data()
    second.setup("fit")
    assert second.tokenizers.src.fingerprint == first.tokenizers.src.fingerprint
    assert second.train_dataset[:] == first.train_dataset[:]

    # a tokenizer setting is part of the key: that one retrains
    with pytest.raises(AssertionError, match="cache miss"):
        Seq2SeqDataModule(
            small_cfg(small, tmp_path / "cache", tokenizer=TokenizerConfig(vocab_size=900))
        ).prepare_data()


def test_cache_key_follows_content(tmp_path, small):
    cfg = small_cfg(small, tmp_path / "cache")
    before = prepare.tokenizer_cache_dir(cfg)
    copy = tmp_path / "train.de"
    copy.write_bytes((small / "train.de").read_bytes())
    moved = small_cfg(small, tmp_path / "cache", train_src=str(copy))
    assert prepare.tokenizer_cache_dir(moved) == before  # same content, other path: same key
    with copy.open("a") as f:
        f.write("Noch ein Satz.\n")
    assert prepare.tokenizer_cache_dir(moved) != before


def test_separate_vocabularies(tmp_path, small):
    cfg = small_cfg(small, tmp_path, tokenizer=TokenizerConfig(vocab_size=600, joint=False))
    dm = Seq2SeqDataModule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    assert not dm.tokenizers.joint
    assert dm.src_vocab_size == dm.tgt_vocab_size == 600
    assert sorted(p.name for p in prepare.tokenizer_cache_dir(cfg).glob("*.model")) == [
        "src.model",
        "tgt.model",
    ]
    row = dm.val_dataset[0]
    assert dm.tokenizers.src.decode([row["src_ids"]])[0] == " ".join(row["src"].split())
    assert dm.tokenizers.tgt.decode([row["tgt_ids"]])[0] == " ".join(row["tgt"].split())


# -- the data module end to end --------------------------------------------------------------
@pytest.fixture(scope="module")
def dm(small, tmp_path_factory) -> Seq2SeqDataModule:
    module = Seq2SeqDataModule(small_cfg(small, tmp_path_factory.mktemp("cache")))
    module.prepare_data()
    module.setup("fit")
    return module


def test_datamodule(dm):
    assert dm.src_vocab_size == dm.tgt_vocab_size == 1000
    assert dm.tokenizers.joint and dm.tokenizers.src is dm.tokenizers.tgt
    assert 0.9 * N_TRAIN < len(dm.train_dataset) <= N_TRAIN
    assert len(dm.val_dataset) == len(dm.val_src_texts) == len(dm.val_ref_texts) == N_VAL
    assert dm.val_ref_texts[5] == dm.val_dataset[5]["tgt"]
    assert dm.tokenizers.tgt.decode([dm.val_dataset[0]["tgt_ids"]])[0] == " ".join(
        dm.val_ref_texts[0].split()
    )


def test_train_loader_covers_epoch(dm):
    loader = dm.train_dataloader()
    seen = []
    for batch in loader:
        assert isinstance(batch, Batch)
        assert batch.src.numel() <= 1024 and batch.tgt_in.numel() <= 1024
        seen += batch.ids.tolist()
    assert sorted(seen) == list(range(len(dm.train_dataset)))
    assert len(loader) == len(loader.batch_sampler)
    # Lightning's per-epoch hook reaches the sampler
    _set_sampler_epoch(loader, 3)
    assert loader.batch_sampler.epoch == 3
    val_ids = [i for b in dm.val_dataloader() for i in b.ids.tolist()]
    assert sorted(val_ids) == list(range(N_VAL))


# -- collate -------------------------------------------------------------------------------
def test_collate_adds_specials_and_pads():
    examples = [
        {"src_ids": [5, 6, 7], "tgt_ids": [8, 9], "id": 4},
        {"src_ids": [10], "tgt_ids": [11, 12, 13, 14], "id": 9},
    ]
    b = collate(examples, pad_id=0, bos_id=2, eos_id=3)
    assert b.src.tolist() == [[5, 6, 7, 3], [10, 3, 0, 0]]
    assert b.tgt_in.tolist() == [[2, 8, 9, 0, 0], [2, 11, 12, 13, 14]]
    assert b.tgt_out.tolist() == [[8, 9, 3, 0, 0], [11, 12, 13, 14, 3]]
    assert b.ids.tolist() == [4, 9]
    assert b.src.dtype == b.tgt_in.dtype == b.tgt_out.dtype == torch.long
    assert b.n_tgt_tokens == 8 and b.n_src_tokens == 6 and len(b) == 2
    moved = move_data_to_device(b, torch.device("cpu"))  # Lightning's transfer path
    assert isinstance(moved, Batch) and torch.equal(moved.tgt_out, b.tgt_out)
    assert moved.__dict__["n_tgt_tokens"] == 8  # carried over, no recount on device


# -- the sampler ---------------------------------------------------------------------------
def _lengths(n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(2, 60, n)
    return src, np.clip(src + rng.integers(-8, 9, n), 2, None)


def _padded(src, tgt, batch) -> int:
    return len(batch) * max(max(src[batch]), max(tgt[batch]))


def test_sampler_epoch_once_within_budget():
    src, tgt = _lengths()
    sampler = TokenBudgetSampler(src, tgt, max_tokens=512, shuffle=True, seed=3)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(src)))
    assert all(_padded(src, tgt, b) <= 512 for b in batches)
    assert np.mean([_padded(src, tgt, b) for b in batches]) > 0.8 * 512  # packed, not just valid


def test_oversized_example_alone_and_reported(caplog):
    src, tgt = _lengths(500)
    src[7], tgt[11] = 700, 300
    with caplog.at_level(logging.WARNING, logger="seq2seq.data"):
        sampler = TokenBudgetSampler(src, tgt, max_tokens=256, seed=1)
    assert sampler.oversized.tolist() == [7, 11]
    assert "2 example(s) exceed max_tokens=256" in caplog.text
    batches = list(sampler)
    assert [7] in batches and [11] in batches
    assert all(_padded(src, tgt, b) <= 256 for b in batches if len(b) > 1)
    assert sorted(i for b in batches for i in b) == list(range(500))


def test_sampler_orders_deterministic_per_epoch():
    src, tgt = _lengths()
    a = TokenBudgetSampler(src, tgt, max_tokens=512, seed=5)
    b = TokenBudgetSampler(src, tgt, max_tokens=512, seed=5)
    epoch0 = list(a)
    a.set_epoch(1)
    epoch1 = list(a)
    assert epoch0 != epoch1
    assert sorted(map(tuple, epoch0)) != sorted(map(tuple, epoch1))  # ties regroup too
    b.set_epoch(1)
    assert list(b) == epoch1
    b.set_epoch(0)
    assert list(b) == epoch0
    assert list(TokenBudgetSampler(src, tgt, max_tokens=512, seed=6)) != epoch0
    fixed = TokenBudgetSampler(src, tgt, max_tokens=512, shuffle=False)
    first = list(fixed)
    fixed.set_epoch(4)
    assert list(fixed) == first


@pytest.mark.parametrize("n", [3000, 2999, 60])
def test_two_ranks_disjoint_cover_equal(n):
    src, tgt = _lengths(n)
    full = TokenBudgetSampler(src, tgt, max_tokens=512, seed=2)
    ranks = [
        TokenBudgetSampler(src, tgt, max_tokens=512, seed=2, num_replicas=2, rank=r) for r in (0, 1)
    ]
    for epoch in (0, 1):
        for s in (full, *ranks):
            s.set_epoch(epoch)
        shards = [list(s) for s in ranks]
        assert len(shards[0]) == len(shards[1]) == len(ranks[0])
        flat = [i for shard in shards for b in shard for i in b]
        assert set(flat) == set(range(n))
        n_global = len(full)
        if n_global % 2 == 0:
            assert len(flat) == n  # disjoint
        else:  # one batch is repeated from the start of the global list
            first = full.global_batches(epoch)[0].tolist()
            assert shards[1][-1] == first
            assert sorted(flat) == sorted(list(range(n)) + first)


def test_start_batch_skips_once_and_resume():
    src, tgt = _lengths()
    sampler = TokenBudgetSampler(src, tgt, max_tokens=512, seed=1)
    sampler.set_epoch(2)
    full = list(sampler)
    it = iter(sampler)
    head = [next(it) for _ in range(5)]
    state = sampler.state_dict()
    assert state["epoch"] == 2 and state["start_batch"] == 5

    resumed = TokenBudgetSampler(src, tgt, max_tokens=512, seed=1)
    resumed.load_state_dict(state)
    assert head + list(resumed) == full
    assert list(resumed) == full  # skipped once only
    resumed.start_batch = 3
    assert list(resumed) == full[3:]


def test_one_packing_rule_for_training_and_inference():
    """``token_batches`` (inference) and ``TokenBudgetSampler`` (training) cut the same sorted
    sizes at the same places: count x largest size within the budget, nothing lost."""
    from seq2seq.data.batch import pack, token_batches

    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 40, size=500)
    batches = token_batches(sizes.tolist(), 300)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    for b in batches:
        assert len(b) == 1 or len(b) * sizes[b].max() <= 300
    # longest first, and each batch is as full as the rule allows (adding the next fails)
    maxima = [int(sizes[b].max()) for b in batches]
    assert maxima == sorted(maxima, reverse=True)
    for smaller, larger in zip(batches[1:], batches[:-1]):
        assert (len(smaller) + 1) * sizes[larger].min() > 300
    sampler = TokenBudgetSampler(sizes, sizes, 300, shuffle=False)
    ordered = np.sort(sizes, kind="stable")
    assert [len(b) for b in sampler.batches()] == [len(b) for b in np.split(ordered, pack(ordered, 300))]
    assert sorted(len(b) for b in batches) == sorted(len(b) for b in sampler.batches())


# -- subword regularization ------------------------------------------------------------------
def _epoch(loader) -> dict[int, tuple[list[int], list[int]]]:
    """Row id -> (source ids, target ids) without specials, over one pass of ``loader``."""
    out = {}
    for b in loader:
        for i, s, t in zip(b.ids.tolist(), b.src.tolist(), b.tgt_out.tolist(), strict=True):
            out[i] = ([x for x in s if x > 3], [x for x in t if x > 3])
    return out


def test_subword_sampling_resegments_training_batches_only(small, tmp_path):
    """subword_alpha > 0: every training pair decodes to its text, most are segmented
    differently from the best segmentation, a rebuilt loader draws the same ids (resume),
    and validation keeps the best segmentation."""
    plain = Seq2SeqDataModule(small_cfg(small, tmp_path))
    sampled = Seq2SeqDataModule(small_cfg(small, tmp_path, subword_alpha=0.1))
    for m in (plain, sampled):
        m.prepare_data()
        m.setup("fit")
    assert "src" in sampled.train_dataset.column_names and "src" not in plain.train_dataset.column_names
    best, drawn = _epoch(plain.train_dataloader()), _epoch(sampled.train_dataloader())
    assert drawn.keys() == best.keys() == set(range(len(plain.train_dataset)))
    tok = plain.tokenizers.tgt
    for side in (0, 1):
        keys = sorted(best)
        assert tok.decode([drawn[k][side] for k in keys]) == tok.decode([best[k][side] for k in keys])
        assert sum(drawn[k][side] != best[k][side] for k in keys) > len(keys) // 2
    assert _epoch(sampled.train_dataloader()) == drawn
    assert _epoch(sampled.val_dataloader()) == _epoch(plain.val_dataloader())


def test_subword_sampling_keeps_max_len(small, tmp_path):
    """A sampled side that would exceed max_len falls back to its best segmentation."""
    max_len = 24
    dm = Seq2SeqDataModule(small_cfg(small, tmp_path, subword_alpha=0.5, max_len=max_len))
    dm.prepare_data()
    dm.setup("fit")
    lengths = [len(s) + 1 for pair in _epoch(dm.train_dataloader()).values() for s in pair]
    assert max(lengths) <= max_len
    unchecked = dm.tokenizers.src.encode(dm.train_dataset["src"], alpha=0.5, seed=0)
    assert max(map(len, unchecked)) + 1 > max_len  # what the fallback kept out


def test_subword_alpha_range(small, tmp_path):
    with pytest.raises(ValueError, match="subword_alpha must be in"):
        small_cfg(small, tmp_path, subword_alpha=1.0)
