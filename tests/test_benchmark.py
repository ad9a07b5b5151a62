"""Smoke test of the benchmark (``seq2seq/benchmark.py``, ``scripts/benchmark.py``) on a tiny
random checkpoint: every section runs, peers agree with our greedy, tables and JSON come out.
Peers that are not installed are skipped by the benchmark itself (rows left out)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from scripts.bench import core as B
from seq2seq.checkpoint import save_model
from seq2seq.config import ModelConfig, TokenizerConfig
from seq2seq.data.batch import collate
from seq2seq.data.sources import read_lines
from seq2seq.data.tokenizer import Tokenizer, TokenizerPair
from seq2seq.model import Seq2Seq

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "multi30k"
HAVE_HF = importlib.util.find_spec("transformers") is not None
HAVE_CT2 = importlib.util.find_spec("ctranslate2") is not None


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    """A random d_model-32 model (max_positions 32: short decodes) and a 100-piece joint
    tokenizer, saved as an inference checkpoint."""
    texts = read_lines(DATA / "train.de.gz")[:200] + read_lines(DATA / "train.en.gz")[:200]
    tok = Tokenizer.train(texts, TokenizerConfig(vocab_size=100, num_threads=1))
    torch.manual_seed(0)
    model = Seq2Seq(ModelConfig(src_vocab_size=100, tgt_vocab_size=100, d_model=32, n_heads=4,
                                d_ff=64, encoder_layers=2, decoder_layers=1, max_positions=32))
    path = tmp_path_factory.mktemp("bench") / "tiny.ckpt"
    save_model(path, model, TokenizerPair(tok, tok), "de", "en")
    return path


def test_measure_warms_up_then_takes_the_median():
    calls = []
    m = B.measure(lambda: calls.append(1) or len(calls), repeats=3, warmup=lambda: calls.append(0))
    assert calls == [0, 1, 1, 1] and m.result == 4 and len(m.times) == 3
    assert m.seconds == sorted(m.times)[1]
    assert m.rss_peak_mb is not None and m.rss_peak_mb > 0


def test_batches_are_sorted_and_share_one_length_limit(ckpt):
    ck = B.load_checkpoint(ckpt)
    model = B.build_model(ck)
    ids = [[5] * n for n in (3, 9, 1, 6, 4)]  # collate_src appends EOS (3)
    src_vocab = [f"p{i}" for i in range(100)]
    batches = B.make_batches(ids, 2, model.arch, src_vocab)
    assert [b.src.shape for b in batches] == [(2, 10), (2, 5), (1, 2)]
    assert [b.max_len for b in batches] == [22, 16, 12]  # floor(1.2 * longest + 10)
    assert B.make_batches([[5] * 30], 1, model.arch, src_vocab)[0].max_len == 31  # capped
    assert batches[0].pieces[1] == ["p5"] * 6 + ["p3"]  # unpadded, as CTranslate2 takes them


def test_decoding_section_runs_every_engine_and_peers_agree(ckpt):
    ck = B.load_checkpoint(ckpt)
    texts = B.read_test_sources(ck, DATA, limit=6)
    assert len(texts) == 6
    log = []
    res = B.bench_decoding(B.build_model(ck), ck, texts, repeats=1, batch_size=3, beam=2,
                           force_length=8, uncached_limit=3, log=log.append)
    rows = {(r["engine"], r["search"], r["set"]): r for r in res["rows"]}
    assert rows[("ours, no cache", "greedy", "first 3")]["agree_pct"] == 100.0
    forced = rows[("ours", "greedy, 8 tok forced", "first 3")]
    assert forced["target_tokens"] == 3 * 8
    assert rows[("ours, no cache", "greedy, 8 tok forced", "first 3")]["agree_pct"] == 100.0
    peers = ["HF Marian generate"] * HAVE_HF + ["CTranslate2 float32", "CTranslate2 int8"] * HAVE_CT2
    for name in peers:
        assert (name, "greedy", "all") in rows and (name, "beam 2", "all") in rows
    # A random model never emits EOS: every engine stops at the same length limit.
    for name in peers:
        if "int8" not in name:
            assert res["greedy_agreement_pct"][name] == 100.0
    names = {t["target"] for t in res["targets"]}
    assert any("cached ÷ uncached" in n for n in names)
    assert any("HF generate" in n for n in names) == HAVE_HF
    assert any("CTranslate2 fp32" in n for n in names) == HAVE_CT2
    if not (HAVE_HF and HAVE_CT2):
        assert res["skipped"]
    table = B.decode_table(res, "decode")
    assert "PASS" in table or "FAIL" in table
    for row in res["rows"]:
        row.pop("hyps")
    json.dumps(res)


def test_training_section_on_collated_batches(ckpt):
    ck = B.load_checkpoint(ckpt)
    g = torch.Generator().manual_seed(0)
    examples = [{"src_ids": torch.randint(4, 100, (n,), generator=g).tolist(),
                 "tgt_ids": torch.randint(4, 100, (n + 1,), generator=g).tolist(), "id": i}
                for i, n in enumerate((5, 7, 3, 6))]
    batches = [collate(examples[:2]), collate(examples[2:])]
    res = B.bench_training(ck, batches, repeats=1, log=lambda _: None)
    assert [(r["engine"], r["precision"]) for r in res["rows"]][:1] == [("ours", "fp32")]
    assert len(res["rows"]) == (4 if HAVE_HF else 2)
    assert all(r["target_tokens"] == sum(b.n_tgt_tokens for b in batches) for r in res["rows"])
    assert len(res["targets"]) == (2 if HAVE_HF else 0)
    assert "ours" in B.train_table(res, "train")
    json.dumps(res)


def test_attention_section_small_shapes():
    shapes = (B.AttentionShape("train", 4, 2, 5, 5, 8, "causal"),
              B.AttentionShape("decode", 8, 2, 1, 5, 8, "padding", backward=False))
    res = B.bench_attention(repeats=1, iters=2, shapes=shapes, log=lambda _: None)
    train, decode = res["rows"]
    assert train["ref_over_sdpa_fwdbwd"] > 0 and decode["sdpa_fwdbwd_us"] is None
    assert "ref ÷ sdpa" in B.attention_table(res, "attention")


def test_script_main_writes_json(ckpt, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("benchmark_script", ROOT / "scripts" / "benchmark.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "bench.json"
    script.main(["-c", str(ckpt), "--limit", "2", "--repeats", "1", "--threads", "1",
                 "--sections", "decode,profile", "--uncached-limit", "1", "--force-length", "4",
                 "--beam", "2", "--batch-size", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "Decoding: Multi30k test_2016_flickr de→en, 2 sentences, 1 thread(s)" in printed
    assert "Profile: ours beam 2" in printed
    data = json.loads(out.read_text())
    assert set(data["sections"]) == {"decode", "profile"}
    assert data["environment"]["threads"] == 1
    with pytest.raises(SystemExit):
        script.main(["-c", str(ckpt), "--repeats", "0"])
