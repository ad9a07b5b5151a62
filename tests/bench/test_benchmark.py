"""The benchmark (``scripts/bench``, ``scripts/benchmark.py``) on a tiny random checkpoint:
the numbers it prints are the numbers it computed (ratios, medians, PASS/FAIL), its batches
follow the library's packing and length rules, the profile reports the package's phase
labels, and it uses only the public API of ``seq2seq``. Peers that are not installed are
skipped by the benchmark itself (rows left out)."""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import re
from pathlib import Path

import pytest
import torch

from scripts.bench import attention as A
from scripts.bench import decode as D
from scripts.bench import engines as E
from scripts.bench import profile as P
from scripts.bench import report as R
from scripts.bench import timing as T
from scripts.bench import train as TR
from scripts.bench import vocab as VO
from seq2seq import profiling
from seq2seq.checkpoint import build_model, load_checkpoint, save_model
from seq2seq.config import DecodingConfig, ModelConfig, TokenizerConfig
from seq2seq.data.batch import collate
from seq2seq.data.sources import read_lines
from seq2seq.data.tokenizer import Tokenizer, TokenizerPair
from seq2seq.decoding.rules import max_lengths
from seq2seq.model import Seq2Seq

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "multi30k"
BENCH = ROOT / "scripts" / "bench"
HAVE_HF = importlib.util.find_spec("transformers") is not None
HAVE_CT2 = importlib.util.find_spec("ctranslate2") is not None


@pytest.fixture(scope="module")
def ckpt_path(tmp_path_factory) -> Path:
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


@pytest.fixture(scope="module")
def ckpt(ckpt_path) -> dict:
    return load_checkpoint(ckpt_path)


def table_row(table: str, *keys: str) -> list[str]:
    """The cells of the one table row whose first cells are ``keys`` (columns are 2+ spaces apart)."""
    rows = [re.split(r"\s{2,}", line.strip()) for line in table.splitlines()]
    found = [cells for cells in rows if cells[: len(keys)] == list(keys)]
    assert len(found) == 1, (keys, found)
    return found[0]


# ---------------------------------------------------------------- timing
def test_measure_warms_up_then_takes_the_median_of_the_timer():
    ticks = iter([0.0, 5.0, 10.0, 11.0, 20.0, 23.0])  # runs of 5, 1 and 3 s
    calls = []
    m = T.measure(lambda: calls.append(1) or len(calls), repeats=3,
                  warmup=lambda: calls.append(0), timer=lambda: next(ticks))
    assert calls == [0, 1, 1, 1] and m.result == 4
    assert m.times == [5.0, 1.0, 3.0] and m.seconds == 3.0
    assert m.rss_peak_mb is not None and m.rss_peak_mb > 0
    assert (m.rss_rise_mb is not None) == T.RSS_RESETTABLE


def test_load_guard_warns_above_half_a_core(monkeypatch):
    assert T.load_warning("before", 0.5) is None
    warning = T.load_warning("after", 0.73)
    assert warning.startswith("WARNING") and "0.73" in warning and "after" in warning
    monkeypatch.setattr(T, "load_average", lambda: 2.0)
    log = []
    assert T.check_load("before", log.append) == 2.0
    assert log[0] == "load average (1 min) before the run: 2.00" and log[1].startswith("WARNING")
    log.clear()  # after the run the load counts our own threads: printed, no verdict
    assert T.check_load("after", log.append) == 2.0
    assert log == ["load average (1 min) after the run: 2.00 (includes this run's own threads)"]


def test_other_work_subtracts_our_own_cpu():
    """The machine's busy CPU minus this process's is other work, per second of wall time:
    readers injected, so the test does not depend on what else runs on the machine."""
    clock, busy, own = iter([0.0, 2.0]), iter([100.0, 103.0]), iter([10.0, 11.0])
    others = T.OtherWork(busy=lambda: next(busy), own=lambda: next(own), clock=lambda: next(clock))
    others.start()
    assert others.cores() == pytest.approx((3.0 - 1.0) / 2.0)
    readers = iter([None, 5.0])
    none = T.OtherWork(busy=lambda: next(readers), own=lambda: 0.0)
    none.start()
    assert none.cores() is None
    assert T.other_work_warning(0.51).startswith("WARNING") and T.other_work_warning(0.1) is None


def test_other_work_counts_a_busy_child_at_least_as_much_as_it_ran():
    """A known child's CPU time is other work (with only this process counted as ours); more
    work elsewhere on the machine only raises the figure, so a busy machine cannot fail this."""
    import resource
    import subprocess
    import sys

    def cpu(who) -> float:
        use = resource.getrusage(who)
        return use.ru_utime + use.ru_stime

    others = T.OtherWork(own=lambda: cpu(resource.RUSAGE_SELF))
    others.start()
    before = cpu(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import time\nt=time.process_time()\n"
                    "while time.process_time()-t<0.5: pass"], check=True)
    child_cpu = cpu(resource.RUSAGE_CHILDREN) - before
    cores, elapsed = others.cores(), others.clock() - others.t0
    assert child_cpu >= 0.5 and cores * elapsed >= 0.8 * child_cpu


def test_a_process_times_one_engine_only():
    """Timing a second engine in a process that timed another raises (idle threads of the
    first would slow the second); the same engine again is fine."""
    import subprocess
    import sys

    code = ("from scripts.bench import timing as T\n"
            "T.measure(lambda: 1, 1, engine='ours')\nT.measure(lambda: 2, 1, engine='ours')\n"
            "try:\n    T.measure(lambda: 3, 1, engine='ct2')\nexcept RuntimeError as e:\n"
            "    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("refused: engine 'ct2' timed in a process that already timed 'ours'")


# ---------------------------------------------------------------- report
def test_pass_fail_is_ratio_against_need_and_the_table_prints_the_ratio():
    rows = [{"engine": f"peer {i}", "search": "beam 5", "set": "all", "sentences": 10,
             "seconds": 1.0, "sent_per_s": 10.0, "tok_per_s": 100.0, "ours_over_this": ratio,
             "agree_pct": 100.0, "rss_peak_mb": 1.0, "rss_rise_mb": 1.0}
            for i, ratio in enumerate((0.5, 2.999, 3.0, 7.25))]
    targets = [T.target(f"t{i}", row, 3.0) for i, row in enumerate(rows)]
    assert [t["pass"] for t in targets] == [r["ours_over_this"] >= 3.0 for r in rows]
    assert [r["pass"] for r in rows] == [False, False, True, True]
    table = R.decode_table({"rows": rows, "notes": [], "skipped": []}, "decode")
    col = R.DECODE_HEADER.index
    for row in rows:
        cells = table_row(table, row["engine"], "beam 5", "all")
        assert cells[col("ours ÷ this")] == f"{row['ours_over_this']:.2f}"
        assert cells[col("target")] == ">= 3"
        assert cells[col("result")] == ("PASS" if row["pass"] else "FAIL")
    report = R.targets_report(targets)
    assert "FAIL  t0: 0.50 (need >= 3)" in report and "PASS  t3: 7.25 (need >= 3)" in report
    assert R.fmt(None) == "-" and R.fmt(-0.001, ".2f") == "0.00" and R.fmt(True) == "PASS"


# ---------------------------------------------------------------- decode inputs
def test_batches_follow_the_token_budget_and_the_library_length_rule(ckpt):
    arch = build_model(ckpt).arch
    lengths = [3, 9, 1, 6, 4, 30, 12, 2, 7, 5]
    ids = [[5] * n for n in lengths]
    src_vocab = [f"p{i}" for i in range(100)]
    batches = E.make_batches(ids, 24, arch, src_vocab)
    seen = sorted(i for b in batches for i in b.index)
    assert seen == list(range(len(ids)))  # every sentence exactly once
    assert max(lengths) + 1 > 24 and [b.index for b in batches][0] == [5]  # oversized: alone, first
    for b in batches:
        assert b.src.numel() <= 24 or len(b.index) == 1
        assert b.src.tolist() == [ids[i] + [arch.eos_id] + [arch.pad_id] * (b.src.shape[1] - len(ids[i]) - 1)
                                  for i in b.index]
        per_sentence = max_lengths(b.src, DecodingConfig(), arch.pad_id, arch.max_positions)
        assert b.max_len == int(per_sentence.max())
        assert b.max_len == min(math.floor(1.2 * b.src.shape[1] + 10), arch.max_positions - 1)
        assert b.pieces == [[f"p{t}" for t in ids[i]] + [f"p{arch.eos_id}"] for i in b.index]
    widths = [b.src.shape[1] for b in batches]
    assert widths == sorted(widths, reverse=True)  # longest batch first
    assert E.make_batches(ids, 24, arch)[0].pieces == []  # no vocabulary: no pieces


def test_source_ids_are_truncated_to_fit_the_eos(ckpt):
    arch = build_model(ckpt).arch
    tokenizers = TokenizerPair.from_state(ckpt["seq2seq"]["tokenizers"])
    long_text = " ".join(["Ein Hund rennt durch den Schnee."] * 20)
    ids = E.source_ids([long_text, "Ein Hund."], tokenizers, arch)
    assert len(ids[0]) == arch.max_positions - 1
    assert ids[1] == tokenizers.src.encode(["Ein Hund."])[0]


# ---------------------------------------------------------------- decode section
def test_decoding_section_ratios_targets_and_agreement(ckpt_path, ckpt):
    texts = E.read_test_sources(ckpt, DATA, limit=6)
    assert len(texts) == 6
    res = D.bench_decoding(ckpt_path, ckpt, texts, repeats=1, max_tokens=(40, 80), beam_size=2,
                           force_length=8, uncached_limit=3, log=lambda _: None)
    # every row timed in a fresh process of its own; CTranslate2's never imports torch
    pids = [r["pid"] for r in res["rows"]]
    assert len(set(pids)) == len(pids) and os.getpid() not in pids
    for r in res["rows"]:
        assert r["torch_imported"] == (not r["engine"].startswith("CTranslate2"))
        assert r["max_tokens"] in ((40, 80) if r["set"] == "all" else (40,))
    rows = {(r["engine"], r["search"], r["set"]): r for r in res["rows"]}
    ours = {(s, st): r for (e, s, st), r in rows.items() if e == "ours"}
    for (engine, search, subset), row in rows.items():
        assert row["sent_per_s"] == pytest.approx(row["sentences"] / row["seconds"])
        if engine != "ours":  # the ratio of the two rows' sentences/s
            ref = ours[(search, subset)]
            assert row["ours_over_this"] == pytest.approx(ref["sent_per_s"] / row["sent_per_s"])
    assert rows[("ours, no cache", "greedy", "first 3")]["agree_pct"] == 100.0
    assert rows[("ours", "greedy, 8 tok forced", "first 3")]["target_tokens"] == 3 * 8
    assert rows[("ours, no cache", "greedy, 8 tok forced", "first 3")]["agree_pct"] == 100.0
    hf_names = {r["engine"] for r in res["rows"] if r["engine"].startswith("HF ")}
    assert hf_names <= {"HF Marian generate", "HF Pegasus generate"} and len(hf_names) == HAVE_HF
    peers = sorted(hf_names) + ["CTranslate2 float32", "CTranslate2 int8"] * HAVE_CT2
    for name in peers:
        beam = "beam 2" if name.startswith("HF") else "beam 2, patience 1"  # the rule each uses
        assert (name, "greedy", "all") in rows and (name, beam, "all") in rows
        if "int8" not in name:  # a random model never emits EOS: all stop at the same limit
            assert res["greedy_agreement_pct"][name] == 100.0
    assert len(res["targets"]) == 1 + HAVE_HF + HAVE_CT2
    table = R.decode_table(res, "decode")
    for t in res["targets"]:
        row = next(r for r in res["rows"] if "target" in r and r["ours_over_this"] == t["ratio"])
        assert t["pass"] == row["pass"] == (row["ours_over_this"] >= t["need"])
        cells = table_row(table, row["engine"], row["search"], row["set"])
        assert cells[R.DECODE_HEADER.index("ours ÷ this")] == f"{t['ratio']:.2f}"
        assert cells[R.DECODE_HEADER.index("result")] == ("PASS" if t["pass"] else "FAIL")
    assert (not res["skipped"]) == (HAVE_HF and HAVE_CT2)
    assert res["max_tokens"] == [40, 80] and res["beam_size"] == 2
    for row in res["rows"]:
        row.pop("hyps")
    json.dumps(res)


@pytest.mark.slow
def test_compiled_rows_decode_as_ours(ckpt_path, ckpt, tmp_path, monkeypatch):
    """``--compile``'s rows: the compiled step in its own process gives ours's outputs (its
    package made there before the timing) and is compared with ours as any peer is."""
    monkeypatch.setenv("SEQ2SEQ_CACHE_DIR", str(tmp_path))  # the child's packages
    texts = E.read_test_sources(ckpt, DATA, limit=5)
    res = D.bench_decoding(ckpt_path, ckpt, texts, repeats=1, max_tokens=(60,), beam_size=2,
                           force_length=4, uncached_limit=1, peers=(), compile=True,
                           log=lambda _: None)
    rows = {(r["engine"], r["search"]): r for r in res["rows"] if r["set"] == "all"}
    for search in ("greedy", "beam 2, patience 1"):
        row = rows[("ours --compile", search)]
        assert row["agree_pct"] == 100.0 and row["ours_over_this"] > 0
    assert list(tmp_path.glob("compiled/step-*.pt2"))  # made in the children, cached


def test_engines_share_each_batch_length_limit(ckpt):
    model = build_model(ckpt)
    ids = E.source_ids(E.read_test_sources(ckpt, DATA, limit=4), TokenizerPair.from_state(
        ckpt["seq2seq"]["tokenizers"]), model.arch)
    batches = E.make_batches(ids, 60, model.arch)
    hyps = E.ours_engine(model)(batches)
    # A random model never emits EOS: every 1-best runs to its batch's limit.
    assert [len(h) for h in hyps] == [b.max_len for b in batches for _ in b.index]
    assert E.agreement(hyps, hyps) == 100.0 and E.agreement([[1]], [[2]]) == 0.0


# ---------------------------------------------------------------- train, attention
def test_training_section_on_collated_batches(ckpt_path, ckpt):
    g = torch.Generator().manual_seed(0)
    examples = [{"src_ids": torch.randint(4, 100, (n,), generator=g).tolist(),
                 "tgt_ids": torch.randint(4, 100, (n + 1,), generator=g).tolist(), "id": i}
                for i, n in enumerate((5, 7, 3, 6))]
    batches = [collate(examples[:2]), collate(examples[2:])]
    res = TR.bench_training(ckpt_path, ckpt, batches, repeats=1, log=lambda _: None)
    pids = [r["pid"] for r in res["rows"]]
    assert len(set(pids)) == len(pids) and os.getpid() not in pids  # one process a row
    assert [(r["engine"], r["precision"]) for r in res["rows"]][:1] == [("ours", "fp32")]
    assert len(res["rows"]) == (4 if HAVE_HF else 2)
    assert all(r["target_tokens"] == sum(b.n_tgt_tokens for b in batches) for r in res["rows"])
    ours = {r["precision"]: r for r in res["rows"] if r["engine"] == "ours"}
    for row in res["rows"]:
        assert row["tok_per_s"] == pytest.approx(row["target_tokens"] / row["seconds"])
        if row["engine"] != "ours":
            ratio = ours[row["precision"]]["tok_per_s"] / row["tok_per_s"]
            assert row["ours_over_this"] == pytest.approx(ratio) and row["pass"] == (ratio >= 2.5)
    assert len(res["targets"]) == (2 if HAVE_HF else 0)
    table = R.train_table(res, "train")
    for row in res["rows"]:
        assert table_row(table, row["engine"], row["precision"])[2] == f"{row['tok_per_s']:.0f}"
    json.dumps(res)


@pytest.mark.slow
def test_vocab_section_rows_follow_from_their_own_tokenizers(ckpt, tmp_path):
    """Each size trains its own tokenizer (a larger one cuts sentences into fewer pieces);
    pairs/s and the epoch time are derived from the timed tok/s as the notes say."""
    res = VO.bench_vocab(ckpt, sizes=(150, 400), data_dir=DATA, cache_dir=tmp_path, max_tokens=256,
                         n_batches=2, repeats=1, log=lambda _: None)
    small, large = res["rows"]
    assert (small["vocab_size"], large["vocab_size"]) == (150, 400)
    assert small["split_tgt_pieces_per_pair"] > large["split_tgt_pieces_per_pair"]
    for row in res["rows"]:
        assert row["target_tokens"] <= 2 * 256
        assert row["pairs_per_s"] == pytest.approx(row["tok_per_s"] / row["split_tgt_pieces_per_pair"])
        assert row["epoch_s"] == pytest.approx(row["split_pairs"] / row["pairs_per_s"])
        assert row["pairs_gain"] == pytest.approx(row["pairs_per_s"] / small["pairs_per_s"])
    table = R.vocab_table(res, "vocab")
    assert table_row(table, "joint BPE 400")[4] == f"{large['pairs_per_s']:.0f}"
    json.dumps(res)


def test_attention_section_small_shapes():
    shapes = (A.AttentionShape("train", 4, 2, 5, 5, 8, "causal"),
              A.AttentionShape("decode", 8, 2, 1, 5, 8, "padding", backward=False))
    res = A.bench_attention(repeats=1, iters=2, shapes=shapes, log=lambda _: None)
    train, decode = res["rows"]
    for kind in ("fwd", "fwdbwd"):
        assert train[f"matmul_over_sdpa_{kind}"] == train[f"matmul_{kind}_us"] / train[f"sdpa_{kind}_us"]
    assert decode["sdpa_fwdbwd_us"] is None and decode["matmul_over_sdpa_fwdbwd"] is None
    cells = table_row(R.attention_table(res, "attention"), "train")
    assert cells[4] == f"{train['matmul_over_sdpa_fwd']:.2f}"
    assert cells[7] == f"{train['matmul_over_sdpa_fwdbwd']:.2f}"


# ---------------------------------------------------------------- profile
def test_profile_reports_each_phase_label_that_ran(ckpt):
    texts = E.read_test_sources(ckpt, DATA, limit=4)
    res = P.profile_beam(build_model(ckpt), ckpt, texts, beam_size=2, max_tokens=40, n_batches=1)
    labels = [p["label"] for p in res["phases"]]
    ran = {"seq2seq.encode", "seq2seq.decode_step", "seq2seq.decoder.self_attn",
           "seq2seq.decoder.cross_attn", "seq2seq.decoder.ffn", "seq2seq.output_projection",
           "seq2seq.search.constrain", "seq2seq.search.select", "seq2seq.cache.reorder",
           "seq2seq.search.pool", "seq2seq.search.finish_bound"}  # all run in a cached beam search
    assert ran <= set(labels) <= profiling.LABELS
    assert labels == [label for label, _ in profiling.PHASES if label in labels]  # nesting order
    assert all(p["seconds"] > 0 for p in res["phases"])
    assert not {o["op"] for o in res["ops"]} & profiling.LABELS
    assert res["decoder_rows"] >= res["steps"] * 2  # beam 2: two rows per sentence and step
    assert 0 < res["kernel_s"] <= res["wall_s"] * 2  # matmul/attention kernels' self time
    report = R.profile_report(res, "profile")
    assert "inside matmul / attention kernels" in report
    for p in res["phases"]:
        assert f"{p['phase']:<60s} {p['seconds']:7.3f}" in report


def test_training_profile_splits_a_step_into_its_phases(ckpt):
    g = torch.Generator().manual_seed(0)
    examples = [{"src_ids": torch.randint(4, 100, (n,), generator=g).tolist(),
                 "tgt_ids": torch.randint(4, 100, (n + 1,), generator=g).tolist(), "id": i}
                for i, n in enumerate((5, 7, 3, 6))]
    batches = [collate(examples[:2]), collate(examples[2:])]
    res = P.profile_training(build_model(ckpt), batches)
    assert res["target_tokens"] == sum(b.n_tgt_tokens for b in batches)
    assert [p["phase"] for p in res["phases"]] == [name for _, name in P.TRAIN_PHASES]
    assert all(p["seconds"] > 0 for p in res["phases"])
    assert sum(p["seconds"] for p in res["phases"]) <= res["wall_s"] * 2  # CPU time, 2 threads
    assert not {o["op"] for o in res["ops"]} & {label for label, _ in P.TRAIN_PHASES}
    report = R.train_profile_report(res, "train profile")
    for p in res["phases"]:
        assert f"{p['phase']:<60s} {p['seconds']:7.3f}" in report


# ---------------------------------------------------------------- public API only
def test_bench_uses_only_the_public_api_of_seq2seq():
    for path in BENCH.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("seq2seq"):
                assert not any(a.name.startswith("_") for a in node.names), (path.name, node.module)
                assert not any(part.startswith("_") for part in node.module.split(".")), path.name
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                assert node.attr.startswith("__"), (path.name, node.attr)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("setattr", "delattr"):
                raise AssertionError(f"{path.name}: {node.func.id} (no monkeypatching)")


# ---------------------------------------------------------------- the script
def benchmark_script():
    """``scripts/benchmark.py`` as a module."""
    spec = importlib.util.spec_from_file_location("benchmark_script", ROOT / "scripts" / "benchmark.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.mark.slow
def test_script_main_writes_json(ckpt_path, tmp_path, capsys, monkeypatch):
    script = benchmark_script()
    monkeypatch.setattr(T, "load_average", lambda: 0.25)
    monkeypatch.setattr(T.OtherWork, "cores", lambda self: 0.0)  # whatever else runs now
    out = tmp_path / "bench.json"
    script.main(["-m", str(ckpt_path), "--limit", "2", "--repeats", "1", "--threads", "1",
                 "--sections", "decode,profile", "--uncached-limit", "1", "--force-length", "4",
                 "--beam", "2", "--decode-max-tokens", "20,30", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "Decoding: Multi30k test_2016_flickr de→en, 2 sentences, 1 thread(s)" in printed
    assert "Profile: ours beam 2" in printed
    assert "load average (1 min) before the run: 0.25" in printed
    assert "load average (1 min) after the run: 0.25" in printed and "WARNING" not in printed
    data = json.loads(out.read_text())
    assert set(data["sections"]) == {"decode", "profile"}
    env = data["environment"]
    assert env["threads"] == 1 and env["load_1min_before"] == env["load_1min_after"] == 0.25
    assert env["quiet"] is True
    assert data["sections"]["decode"]["max_tokens"] == [20, 30]
    assert env["cpu"]["model"] is None or isinstance(env["cpu"]["model"], str)
    assert data["sections"]["profile"]["beam_size"] == 2
    with pytest.raises(SystemExit):
        script.main(["-m", str(ckpt_path), "--repeats", "0"])


@pytest.mark.slow
def test_opus_size_is_one_command_with_a_cached_model(tmp_path, capsys, monkeypatch):
    """``benchmark.py --opus-size`` at a tiny shape (the OPUS-MT-size run's code path): it
    builds its model under the cache home, decodes with docs/speed.md's settings except the
    options given, times every row of ours and CTranslate2's at each compute type this CPU
    runs, prints their output tokens/s; a second run loads the cached model, unbuilt."""
    from scripts.bench import opus

    monkeypatch.setenv("SEQ2SEQ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(T, "load_average", lambda: 0.25)
    script, tiny = benchmark_script(), "d_model=32,heads=4,d_ff=64,layers=1,vocab=300"
    result = script.main(["--opus-size", tiny, "--limit", "3", "--beam", "2", "--threads", "1"])
    printed = capsys.readouterr().out
    path = opus.cache_path(opus.parse_shape(tiny))
    assert result["checkpoint"] == str(path) and path.parent == tmp_path / "cache" / "bench"
    arch = load_checkpoint(path)["seq2seq"]["model_config"]
    assert (arch["d_model"], arch["encoder_layers"], arch["decoder_layers"]) == (32, 1, 1)
    assert arch["tgt_vocab_size"] == 300 and result["opus_size"]["vocab"] == 300
    decode = result["sections"]["decode"]  # the documented settings but --limit and --beam
    assert set(result["sections"]) == {"decode"} and decode["max_tokens"] == [1000]
    assert (decode["sentences"], decode["subset_sentences"], decode["beam_size"]) == (3, 1, 2)
    assert ("ours", "greedy, 20 tok forced", "first 1") in {
        (r["engine"], r["search"], r["set"]) for r in decode["rows"]}
    engines = ["ours"] + [f"ours {ct}" for ct in ("int8", "bfloat16") if not D.refused(ct)]
    if HAVE_CT2:
        import ctranslate2

        offered = ctranslate2.get_supported_compute_types("cpu")
        engines += [f"CTranslate2 {ct}" for ct in ("float32", "int8", "bfloat16")
                    if ct != "bfloat16" or ct in offered]
    tok_s = {(r["search"], r["engine"]): r["tok_per_s"] for r in decode["rows"] if r["set"] == "all"}
    lines = printed[printed.index("Output tokens/s, OPUS-MT size (d_model 32,"):]
    assert f"thread(s) on {T.cpu_label(T.cpu_model())}" in lines.splitlines()[0]
    for search in ("greedy", "beam 2, patience 1"):
        cells = table_row(lines, search)
        assert len(cells) == 1 + len(engines) and table_row(lines, "search, tokens/s")[1:] == engines
        assert cells[1:] == [f"{tok_s[(search, e)]:.0f}" for e in engines]
    assert printed.count("building") == 1
    logs: list[str] = []
    before = path.stat().st_mtime_ns
    assert opus.checkpoint(opus.parse_shape(tiny), log=logs.append) == path
    assert "cached" in logs[0] and path.stat().st_mtime_ns == before


@pytest.mark.slow
def test_shared_section_policies_and_table():
    """The two thread policies differ only in the environment the measured process gets, and
    one run per (task, policy, busy cores) fills the table with ratios to alone."""
    from scripts.bench import shared as SH

    ours, spinning = SH.policy_env("seq2seq", 2), SH.policy_env("fixed, spinning", 2)
    assert not {"OMP_NUM_THREADS", "SEQ2SEQ_THREADS", "GOMP_SPINCOUNT"} & set(ours)
    assert spinning["SEQ2SEQ_THREADS"] == "2" and spinning["GOMP_SPINCOUNT"] == "300000"
    shipped = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"  # real batches fit it
    res = SH.bench_shared(str(shipped), str(DATA), sentences=4, batches=1, repeats=1,
                          busy=(0, 1), log=lambda _: None)
    assert [(r["task"], r["policy"], r["busy"]) for r in res["rows"]] == [
        (t, p, k) for t in ("translate", "train") for p in SH.POLICIES for k in (0, 1)]
    for row in res["rows"]:
        assert row["fair_share"] == 1 / (row["busy"] + 1) and row["rate"] > 0
        assert row["vs_alone"] == (1.0 if row["busy"] == 0 else pytest.approx(row["vs_alone"]))
        if row["policy"] != "seq2seq":
            assert row["threads_start"] == row["threads_end"] == 2
    assert "fixed, spinning" in R.shared_table(res, "shared")


def test_latency_rows_give_the_same_lines_in_their_own_processes():
    """The latency section: ours and CTranslate2 (the export a user makes) translate the
    same sentences to the same lines, each engine in a fresh process that imports only it."""
    pytest.importorskip("ctranslate2")
    from helpers import multi30k_lines

    from scripts.bench import latency as L

    shipped = Path(__file__).resolve().parents[2] / "data" / "models" / "multi30k_de_en_tiny.ckpt"
    texts = multi30k_lines("de", L.WARMUP + 3, "test_2016_flickr")
    res = L.bench_latency(str(shipped), load_checkpoint(shipped), texts, engines=("ours", "ct2"),
                          log=lambda _: None)
    assert [(r["engine"], r["search"]) for r in res["rows"]] == [
        ("ours", "greedy"), ("ct2", "greedy"), ("ours", "beam 5"), ("ct2", "beam 5")]
    assert all(r["same_as_ours_pct"] == 100.0 for r in res["rows"])
    assert all(0 < r["p50_ms"] <= r["p95_ms"] for r in res["rows"]) and res["sentences"] == 3
    assert "ct2" in R.latency_table(res, "t") and "p95 ms" in R.latency_table(res, "t")
