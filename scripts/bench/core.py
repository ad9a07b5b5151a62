"""Speed benchmarks against peer implementations (``scripts/benchmark.py`` is the CLI).

Three sections, each printed as one table (and returned as plain dicts for ``--json``),
and a profile on request:

decode
    Multi30k test sentences with our greedy (KV-cached vs uncached, natural lengths and
    ``force_length`` outputs) and beam search, ``MarianMTModel.generate`` and CTranslate2
    (float32 and int8) on the same weights (``seq2seq.export``). Before any timing, the
    greedy outputs of every engine are compared with ours (agreement %).
train
    Target tokens/s of one optimizer step (loss + backward + Adam) of ours
    (``Seq2SeqModule.loss``) and of ``MarianMTModel`` with ``labels`` at the same dims, on
    the same real Multi30k batches from ``TokenBudgetSampler``; fp32 and bf16 autocast.
attention
    ``attention`` (SDPA) vs ``reference_attention``, forward and forward+backward.
profile (on request only)
    ``torch.profiler`` over our beam search on the two longest batches: time per phase of
    the search (labelled with ``record_function``), the top operators, and how many decoder
    rows were computed compared with stopping each sentence right after its 1-best's EOS.

Rules shared by all measurements
- A number is the median of ``repeats`` timed runs after one untimed warm-up run.
- One thread count for everything: ``torch.set_num_threads(T)`` and CTranslate2
  ``intra_threads=T, inter_threads=1``.
- Decoding batches are the same for every engine: sources sorted by length (longest
  first), cut into batches of ``batch_size`` sentences. Every engine gets the same length
  limit per batch: ``floor(1.2 * longest source + 10)`` output tokens before EOS (our
  default rule, applied to the batch's longest source, since ``generate`` takes one limit
  per batch). Beam search ranks by log-prob / length (ours ``length_penalty="average"``,
  HF and CTranslate2 ``length_penalty=1``: the same normalization).
- Peak RSS is measured in this process: the kernel's high-water mark is reset before each
  row's warm-up (``/proc/self/clear_refs``) and the table shows how far it rose above the
  resident size just before. Where that reset is unavailable, the process-wide peak
  (``getrusage``) is reported instead and said so.
"""

from __future__ import annotations

import math
import os
import re
import resource
import statistics
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seq2seq.checkpoint import build_model, load_checkpoint
from seq2seq.config import DataConfig, DecodingConfig, ModelConfig, OptimConfig, from_dict
from seq2seq.data.batch import collate_src
from seq2seq.data.tokenizer import TokenizerPair
from seq2seq.decoding.search import search
from seq2seq.model import Seq2Seq
from seq2seq.model.attention import attention, causal_mask, lengths_mask, reference_attention

SECTIONS = ("decode", "train", "attention")
EXTRA_SECTIONS = ("profile",)  # on request only: where our beam search spends its time
TEST_SPLIT = "test_2016_flickr"


# ====================================================================== timing + memory
@dataclass
class Measurement:
    seconds: float  # median of the timed runs
    times: list[float]
    result: Any  # what the last timed run returned
    rss_peak_mb: float | None  # peak resident size during warm-up + timed runs
    rss_rise_mb: float | None  # ... minus the resident size just before them


def _proc_status_kb(field: str) -> int | None:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) if m else None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process; False if impossible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _proc_status_kb("VmHWM") is not None


RSS_RESETTABLE = _reset_peak_rss()


def measure(fn: Callable[[], Any], repeats: int, warmup: Callable[[], Any] | None = None) -> Measurement:
    """Run ``warmup`` (default ``fn``) once untimed, then time ``fn`` ``repeats`` times.
    Peak RSS covers the warm-up too (first-call allocations belong to the engine)."""
    if RSS_RESETTABLE:
        _reset_peak_rss()
        before = _proc_status_kb("VmRSS")
    (warmup or fn)()
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    if RSS_RESETTABLE:
        peak = _proc_status_kb("VmHWM")
        peak_mb, rise_mb = peak / 1024, (peak - before) / 1024
    else:  # Linux reports ru_maxrss in kB: the peak since the process started
        peak_mb, rise_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, None
    return Measurement(statistics.median(times), times, result, peak_mb, rise_mb)


def rss_note() -> str:
    if RSS_RESETTABLE:
        return ("ΔRSS: how far this process's peak resident memory rose during a row's warm-up "
                "and timed runs above its resident memory just before (peak reset per row); "
                "models, libraries and heap that earlier rows left resident are not counted")
    return "RSS: process-wide peak since start (getrusage); not per engine"


def set_threads(n: int) -> None:
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # only settable before the first parallel region
        pass


def _optional(module: str):
    """Import a peer library, or None (its rows are then skipped with a message)."""
    try:
        return __import__(module)
    except ImportError:
        return None


# ====================================================================== decoding
@dataclass
class DecodeBatch:
    src: torch.Tensor  # (B, S) ids + [eos], right-padded: what our encoder and Marian see
    pieces: list[list[str]]  # the same tokens as strings, for CTranslate2
    max_len: int  # output tokens before EOS, the same limit for every engine


Engine = Callable[[Sequence[DecodeBatch]], list[list[int]]]  # 1-best ids, without EOS


def read_test_sources(ckpt: dict, data_dir: str | os.PathLike, split: str = TEST_SPLIT,
                      limit: int | None = None) -> list[str]:
    """The source side of a Multi30k split in the checkpoint's language pair."""
    from seq2seq.data.sources import read_lines, resolve_corpus  # pulls in datasets + lightning

    meta = ckpt["seq2seq"]
    cfg = DataConfig(data_dir=str(data_dir), src_lang=meta["src_lang"], tgt_lang=meta["tgt_lang"])
    return read_lines(resolve_corpus(cfg, split)[0])[:limit]


def source_ids(texts: Sequence[str], tokenizers: TokenizerPair, cfg: ModelConfig) -> list[list[int]]:
    """Subword ids per text (no EOS yet: ``collate_src`` adds it), cut like ``Translator``
    to ``max_positions - 1`` (room for the EOS)."""
    return [ids[: cfg.max_positions - 1] for ids in tokenizers.src.encode(list(texts))]


def make_batches(ids: Sequence[Sequence[int]], batch_size: int, cfg: ModelConfig,
                 src_vocab: Sequence[str], max_len_a: float = 1.2, max_len_b: int = 10
                 ) -> list[DecodeBatch]:
    """Longest first, ``batch_size`` sentences a batch (see the module docstring)."""
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    batches = []
    for start in range(0, len(order), batch_size):
        rows = [ids[i] for i in order[start : start + batch_size]]
        src = collate_src(rows, cfg.pad_id, cfg.eos_id)  # x + [eos], as training sees it
        pieces = [[src_vocab[i] for i in src[r, : len(seq) + 1].tolist()] for r, seq in enumerate(rows)]
        max_len = min(math.floor(max_len_a * src.shape[1] + max_len_b), cfg.max_positions - 1)
        batches.append(DecodeBatch(src, pieces, max_len))
    return batches


def ours_engine(model: Seq2Seq, beam: int = 1, use_cache: bool = True,
                force_length: int | None = None, stopping: str = "heuristic") -> Engine:
    def run(batches: Sequence[DecodeBatch]) -> list[list[int]]:
        hyps = []
        for b in batches:
            cfg = DecodingConfig(method="beam" if beam > 1 else "greedy", beam_size=max(beam, 1),
                                 length_penalty="average", max_len_a=0.0, max_len_b=b.max_len,
                                 stopping=stopping)
            result = search(model, b.src, cfg, use_cache=use_cache, force_length=force_length)
            hyps += [h[0].tokens for h in result.hypotheses]
        return hyps

    return run


def hf_engine(marian, cfg: ModelConfig, beam: int = 1, early_stopping: bool | str = False) -> Engine:
    """``MarianMTModel.generate``. Beam: ``early_stopping=False`` (HF's default) stops on
    its heuristic bound (best live score / current length); ``"never"`` uses best live
    score / max length, the same exact rule as ours (``search.finish_bound``)."""
    extra = dict(length_penalty=1.0, early_stopping=early_stopping) if beam > 1 else {}

    def run(batches: Sequence[DecodeBatch]) -> list[list[int]]:
        hyps = []
        for b in batches:
            with torch.inference_mode():
                out = marian.generate(input_ids=b.src, attention_mask=b.src.ne(cfg.pad_id),
                                      num_beams=beam, do_sample=False,
                                      max_new_tokens=b.max_len + 1, **extra)
            for row in out[:, 1:].tolist():  # drop the BOS it starts from
                row = row[: row.index(cfg.eos_id)] if cfg.eos_id in row else row
                hyps.append([t for t in row if t != cfg.pad_id])
        return hyps

    return run


def ct2_engine(translator, tgt_vocab: Sequence[str], cfg: ModelConfig, beam: int = 1) -> Engine:
    index = {p: i for i, p in enumerate(tgt_vocab)}
    suppress = [[tgt_vocab[cfg.pad_id]], [tgt_vocab[cfg.bos_id]]]  # never outputs, as ours

    def run(batches: Sequence[DecodeBatch]) -> list[list[int]]:
        hyps = []
        for b in batches:
            results = translator.translate_batch(
                b.pieces, beam_size=beam, length_penalty=1.0, max_decoding_length=b.max_len,
                min_decoding_length=0, suppress_sequences=suppress, max_batch_size=0)
            hyps += [[index[p] for p in r.hypotheses[0]] for r in results]
        return hyps

    return run


def agreement(hyps: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> float:
    """% of sentences whose 1-best equals the reference's."""
    return 100.0 * sum(list(h) == list(r) for h, r in zip(hyps, reference)) / max(len(reference), 1)


def decode_row(name: str, search_name: str, engine: Engine, batches: Sequence[DecodeBatch],
               repeats: int, reference: dict | None = None, subset: str = "all") -> dict:
    """Time one engine on ``batches`` (warm-up: the first batch). ``reference``: our row
    with the same search on the same set, for the agreement % and the speed ratio."""
    m = measure(lambda: engine(batches), repeats, warmup=lambda: engine(batches[:1]))
    hyps = m.result
    n_sent, n_tok = len(hyps), sum(len(h) for h in hyps)
    row = {
        "engine": name, "search": search_name, "set": subset, "sentences": n_sent,
        "seconds": m.seconds, "times": m.times,
        "sent_per_s": n_sent / m.seconds, "tok_per_s": n_tok / m.seconds, "target_tokens": n_tok,
        "agree_pct": None, "ours_over_this": None,
        "rss_peak_mb": m.rss_peak_mb, "rss_rise_mb": m.rss_rise_mb,
        "hyps": hyps,  # dropped before JSON
    }
    if reference is not None:
        row["agree_pct"] = agreement(hyps, reference["hyps"])
        row["ours_over_this"] = reference["sent_per_s"] / row["sent_per_s"]
    return row


def cache_rows(model: Seq2Seq, batches: Sequence[DecodeBatch], subset: str, force_length: int,
               repeats: int, cached_natural: dict | None = None,
               log: Callable[[str], None] = print) -> list[dict]:
    """Our greedy with and without the KV cache, at natural lengths and at exactly
    ``force_length`` output tokens; each uncached row's ratio is cached ÷ uncached.
    ``cached_natural``: the cached natural-length row when already measured on ``batches``."""
    rows = []
    for force in (None, force_length):
        search_name = "greedy" if force is None else f"greedy, {force} tok forced"
        cached = cached_natural if force is None else None
        if cached is None:
            log(f"  timing ours {search_name}, cached ({subset}) ...")
            cached = decode_row("ours", search_name, ours_engine(model, force_length=force),
                                batches, repeats, subset=subset)
            rows.append(cached)
        log(f"  timing ours {search_name}, uncached ({subset}) ...")
        rows.append(decode_row("ours, no cache", search_name,
                               ours_engine(model, use_cache=False, force_length=force),
                               batches, repeats, cached, subset))
    return rows


def peer_engines(model: Seq2Seq, src_vocab, tgt_vocab, beam: int, threads: int,
                 workdir: str, skipped: list[str]) -> dict[tuple[str, str], Engine]:
    """``{(name, search): engine}`` for Marian and CTranslate2 (float32, int8), if installed."""
    from seq2seq.export import to_ctranslate2, to_hf_marian

    engines = {}
    if _optional("transformers") is None:
        skipped.append("Hugging Face transformers not installed: MarianMTModel rows skipped")
    else:
        import transformers

        transformers.logging.set_verbosity_error()
        marian = to_hf_marian(model)
        engines[("HF Marian generate", "greedy")] = hf_engine(marian, model.arch)
        engines[("HF Marian generate", f"beam {beam}")] = hf_engine(marian, model.arch, beam)
        engines[("HF Marian generate", f"beam {beam}, exact stop")] = hf_engine(
            marian, model.arch, beam, early_stopping="never")
    if _optional("ctranslate2") is None:
        skipped.append("ctranslate2 not installed: CTranslate2 rows skipped")
    else:
        import ctranslate2

        path = to_ctranslate2(model, Path(workdir) / "ct2", src_vocab=src_vocab, tgt_vocab=tgt_vocab)
        for ct in ("float32", "int8"):
            tr = ctranslate2.Translator(str(path), device="cpu", compute_type=ct,
                                        intra_threads=threads, inter_threads=1)
            engines[(f"CTranslate2 {ct}", "greedy")] = ct2_engine(tr, tgt_vocab, model.arch)
            engines[(f"CTranslate2 {ct}", f"beam {beam}")] = ct2_engine(tr, tgt_vocab, model.arch, beam)
    return engines


def check_greedy_agreement(peers: dict[tuple[str, str], Engine], ours: Engine,
                           batches: Sequence[DecodeBatch], log: Callable[[str], None] = print
                           ) -> dict[str, float]:
    """Before timing: % of sentences where each peer's greedy output equals ours."""
    reference = ours(batches)
    agree = {}
    for (name, search_name), engine in peers.items():
        if search_name != "greedy":
            continue
        agree[name] = agreement(engine(batches), reference)
        log(f"  greedy agreement with ours, {name}: {agree[name]:.1f}% of {len(reference)} sentences")
        if agree[name] < 90 and "int8" not in name:
            log(f"  WARNING: {name} differs from our greedy on {100 - agree[name]:.1f}% of "
                "sentences: its timings may not compare like with like; check the export")
    return agree


def bench_decoding(model: Seq2Seq, ckpt: dict, texts: Sequence[str], *, repeats: int = 3,
                   threads: int = 1, batch_size: int = 100, beam: int = 5,
                   force_length: int = 50, uncached_limit: int | None = 200,
                   log: Callable[[str], None] = print) -> dict:
    """The decode section: rows (with ratios and targets) and notes."""
    from seq2seq.export import vocabularies

    src_vocab, tgt_vocab = vocabularies(model, ckpt)
    tokenizers = TokenizerPair.from_state(ckpt["seq2seq"]["tokenizers"])
    ids = source_ids(texts, tokenizers, model.arch)
    batches = make_batches(ids, batch_size, model.arch, src_vocab)
    n_sub = len(ids) if uncached_limit is None else min(uncached_limit, len(ids))
    subset = "all" if n_sub == len(ids) else f"first {n_sub}"
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="seq2seq-bench-") as workdir:
        peers = peer_engines(model, src_vocab, tgt_vocab, beam, threads, workdir, skipped)
        greedy_agree = check_greedy_agreement(peers, ours_engine(model), batches, log)

        log("  timing ours greedy ...")
        ours_greedy = decode_row("ours", "greedy", ours_engine(model), batches, repeats)
        rows = [ours_greedy]
        if subset == "all":
            rows += cache_rows(model, batches, subset, force_length, repeats, ours_greedy, log)
        else:
            rows += cache_rows(model, make_batches(ids[:n_sub], batch_size, model.arch, src_vocab),
                               subset, force_length, repeats, log=log)
        log(f"  timing ours beam {beam} ...")
        ours_beam = decode_row("ours", f"beam {beam}", ours_engine(model, beam), batches, repeats)
        ours_exact = decode_row("ours", f"beam {beam}, exact stop",
                                ours_engine(model, beam, stopping="exact"), batches, repeats)
        reference = {"greedy": ours_greedy, f"beam {beam}": ours_beam, f"beam {beam}, exact stop": ours_exact}
        for (name, search_name), engine in peers.items():
            log(f"  timing {name} {search_name} ...")
            rows.append(decode_row(name, search_name, engine, batches, repeats, reference[search_name]))
        rows += [ours_beam, ours_exact]
    # Greedy rows first, ours first within each search (sort is stable).
    rows.sort(key=lambda r: (r["search"].startswith("beam"), not r["engine"].startswith("ours")))

    targets = []
    for row in rows:
        if row["engine"] == "HF Marian generate" and row["search"] == f"beam {beam}":
            targets.append(_target(f"beam-{beam} sentences/s: ours ÷ HF generate", row, 3.0))
        if row["engine"] == "CTranslate2 float32" and row["search"] == f"beam {beam}":
            targets.append(_target(f"beam-{beam} sentences/s: ours ÷ CTranslate2 fp32", row, 0.7))
        if row["engine"] == "ours, no cache" and row["search"] != "greedy":
            targets.append(_target(f"greedy at {force_length} tokens: cached ÷ uncached", row, 4.0))
    notes = [
        f"batches: sources sorted by length (longest first), {batch_size} sentences per batch; "
        "every engine gets the same batches and the same per-batch length limit, "
        "floor(1.2 x longest source + 10) tokens",
        f"threads: {threads} for all (torch.set_num_threads; CTranslate2 intra_threads={threads}, "
        "inter_threads=1)",
        "beam: score / length ranks hypotheses (ours length_penalty='average', HF and CTranslate2 "
        "length_penalty=1). 'beam k' rows stop heuristically: ours stopping='heuristic' and HF's "
        "default early_stopping=False both assume the best live beam ends now; CTranslate2 "
        "stops once beam-size hypotheses have finished (patience 1). 'exact stop' rows stop a "
        "sentence only when no live beam can beat its best finished one even at max length: "
        "ours stopping='exact' (the default) and HF early_stopping='never'",
        "ours ÷ this: sentences/s of our matching cached engine (same search, same set) over "
        "this row's; tok/s counts 1-best output tokens, EOS excluded",
        "agree %: sentences whose 1-best equals ours (same search; 'no cache' rows: ours cached)",
    ]
    if subset != "all":
        notes.append(f"set 'first {n_sub}': the cached-vs-uncached rows decode only the first "
                     f"{n_sub} sentences, to keep the uncached runs short (--uncached-limit)")
    if any(name.startswith("CTranslate2 int8") for name, _ in peers):
        notes.append("CTranslate2 int8: weights quantized at load (compute_type='int8'), so its "
                     "outputs may differ from ours")
    notes.append(rss_note())
    return {"rows": rows, "targets": targets, "notes": notes, "skipped": skipped,
            "greedy_agreement_pct": greedy_agree, "sentences": len(ids),
            "subset_sentences": n_sub, "batch_size": batch_size}


def _target(name: str, row: dict, need: float) -> dict:
    """Attach a ``ratio >= need`` target to the row holding the ratio, and return it."""
    ratio = row["ours_over_this"]
    row["target"], row["pass"] = need, ratio >= need
    return {"target": name, "ratio": ratio, "need": need, "pass": ratio >= need}


# ====================================================================== training
def training_batches(ckpt: dict, data_dir: str | os.PathLike, cache_dir: str | os.PathLike,
                     max_tokens: int = 4096, n: int = 8, seed: int = 1) -> list:
    """The first ``n`` batches of a shuffled training epoch, as training sees them."""
    from seq2seq.data.datamodule import Seq2SeqDataModule

    meta = ckpt["seq2seq"]
    dm = Seq2SeqDataModule(DataConfig(data_dir=str(data_dir), src_lang=meta["src_lang"],
                                      tgt_lang=meta["tgt_lang"], max_tokens=max_tokens,
                                      cache_dir=str(cache_dir), seed=seed))
    dm.use_tokenizers(TokenizerPair.from_state(meta["tokenizers"]))
    dm.setup("fit")
    batches = []
    for batch in dm.train_dataloader():
        batches.append(batch)
        if len(batches) == n:
            break
    return batches


# Plain cross-entropy: Marian's own loss has no label smoothing. A small constant lr keeps
# the weights (hence the arithmetic) sane over the timed steps; it does not change the cost.
OPTIM = OptimConfig(lr=1e-4, label_smoothing=0.0)


def ours_train_step(model: Seq2Seq, bf16: bool) -> Callable[[Any], int]:
    """``Seq2SeqModule.loss`` + backward + Adam step; returns the target tokens."""
    from seq2seq.training.module import Seq2SeqModule

    module = Seq2SeqModule(arch=model.arch, optim=OPTIM)
    module.model = model.train()
    opt = torch.optim.Adam(model.parameters(), lr=OPTIM.lr, betas=OPTIM.betas, eps=OPTIM.eps)

    def step(batch) -> int:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, n_tokens = module.loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return n_tokens

    return step


def hf_train_step(marian, pad_id: int, bf16: bool) -> Callable[[Any], int]:
    """``MarianMTModel(..., labels=...)`` (its own cross-entropy) + backward + Adam step."""
    marian.train()
    opt = torch.optim.Adam(marian.parameters(), lr=OPTIM.lr, betas=OPTIM.betas, eps=OPTIM.eps)

    def step(batch) -> int:
        labels = batch.tgt_out.masked_fill(batch.tgt_out == pad_id, -100)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = marian(input_ids=batch.src, attention_mask=batch.src.ne(pad_id),
                          decoder_input_ids=batch.tgt_in, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return int((labels != -100).sum())

    return step


def train_row(name: str, precision: str, step: Callable[[Any], int], batches: Sequence,
              repeats: int) -> dict:
    """Time ``step`` over all ``batches`` (warm-up: one step on the first batch)."""
    m = measure(lambda: sum(step(b) for b in batches), repeats, warmup=lambda: step(batches[0]))
    return {"engine": name, "precision": precision, "batches": len(batches),
            "target_tokens": m.result, "seconds": m.seconds, "times": m.times,
            "tok_per_s": m.result / m.seconds, "ms_per_step": 1000 * m.seconds / len(batches),
            "rss_peak_mb": m.rss_peak_mb, "rss_rise_mb": m.rss_rise_mb, "ours_over_this": None}


def bench_training(ckpt: dict, batches: Sequence, *, repeats: int = 3, max_tokens: int = 4096,
                   log: Callable[[str], None] = print) -> dict:
    """The train section: ours vs Marian, fp32 and bf16 autocast, fresh weights each row."""
    rows, targets, skipped = [], [], []
    have_hf = _optional("transformers") is not None
    if not have_hf:
        skipped.append("Hugging Face transformers not installed: MarianMTModel rows skipped")
    else:
        from seq2seq.export import to_hf_marian
    n_params = {}
    for precision in ("fp32", "bf16 autocast"):
        bf16 = precision != "fp32"
        model = build_model(ckpt)
        n_params["ours"] = _trainable(model)
        log(f"  timing ours training step, {precision} ...")
        ours = train_row("ours", precision, ours_train_step(model, bf16), batches, repeats)
        rows.append(ours)
        if have_hf:
            marian = to_hf_marian(build_model(ckpt))
            n_params["HF"] = _trainable(marian)
            log(f"  timing MarianMTModel training step, {precision} ...")
            hf = train_row("HF MarianMTModel", precision,
                           hf_train_step(marian, model.arch.pad_id, bf16), batches, repeats)
            hf["ours_over_this"] = ours["tok_per_s"] / hf["tok_per_s"]
            targets.append(_target(f"training tokens/s ({precision}): ours ÷ HF", hf, 1.5))
            rows.append(hf)
    n_tok = rows[0]["target_tokens"]
    notes = [
        f"batches: the first {len(batches)} of a shuffled epoch from TokenBudgetSampler "
        f"(max_tokens {max_tokens}), {n_tok} target tokens; the same batches for every row",
        "step: forward + loss + backward + Adam; plain cross-entropy for both (Marian's loss has "
        "no label smoothing, so ours runs with label_smoothing=0); dropout as the checkpoint's config",
        "each row starts from the checkpoint's weights and a fresh Adam (lr 1e-4, the config's "
        "betas/eps); bf16: torch.autocast('cpu', bfloat16) around forward + loss",
        "trainable parameters: " + ", ".join(f"{k} {v:,}" for k, v in n_params.items()),
        rss_note(),
    ]
    return {"rows": rows, "targets": targets, "notes": notes, "skipped": skipped}


def _trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ====================================================================== attention
@dataclass(frozen=True)
class AttentionShape:
    name: str
    B: int
    H: int
    L: int
    S: int
    d: int
    mask: str  # "padding" (B, 1, 1, S), "causal" (L, S) or "none"
    backward: bool = True


ATTENTION_SHAPES = (
    AttentionShape("train, encoder self (padding mask)", 128, 4, 20, 20, 32, "padding"),
    AttentionShape("train, decoder self (causal mask)", 128, 4, 20, 20, 32, "causal"),
    AttentionShape("decode step, cross (beam 5 x 128 sent., padding)", 640, 4, 1, 20, 32,
                   "padding", backward=False),
    AttentionShape("decode step, self (beam 5 x 128 sent., 20 cached)", 640, 4, 1, 20, 32,
                   "none", backward=False),
)


def attention_inputs(shape: AttentionShape, generator: torch.Generator):
    B, H, L, S, d = shape.B, shape.H, shape.L, shape.S, shape.d
    q, k, v = (torch.randn(B, H, n, d, generator=generator) for n in (L, S, S))
    if shape.mask == "padding":
        lengths = torch.randint(S // 2, S + 1, (B,), generator=generator)
        mask = lengths_mask(lengths, S)
    elif shape.mask == "causal":
        mask = causal_mask(L, S)
    else:
        mask = None
    return q, k, v, mask


def time_attention(fn: Callable, q, k, v, mask, backward: bool, repeats: int, iters: int) -> float:
    """Microseconds per call of ``fn(q, k, v, mask)``, forward only or forward+backward."""
    if backward:
        q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
        grad = torch.randn(q.shape[:-1] + v.shape[-1:])

        def calls():
            for _ in range(iters):
                fn(q, k, v, mask).backward(grad)
    else:
        def calls():
            with torch.no_grad():
                for _ in range(iters):
                    fn(q, k, v, mask)

    return 1e6 * measure(calls, repeats).seconds / iters


def attention_row(shape: AttentionShape, repeats: int, iters: int = 50) -> dict:
    """Both paths on one shape: forward and (for training shapes) forward+backward."""
    inputs = attention_inputs(shape, torch.Generator().manual_seed(0))
    paths = {"sdpa": attention, "reference": lambda *a: reference_attention(*a)[0]}
    row = {"shape": shape.name, "dims": f"B={shape.B} H={shape.H} L={shape.L} S={shape.S} d={shape.d}"}
    for kind, backward in (("fwd", False), ("fwdbwd", True)):
        for path, fn in paths.items():
            row[f"{path}_{kind}_us"] = (time_attention(fn, *inputs, backward, repeats, iters)
                                        if shape.backward or not backward else None)
        sdpa = row[f"sdpa_{kind}_us"]
        row[f"ref_over_sdpa_{kind}"] = None if sdpa is None else row[f"reference_{kind}_us"] / sdpa
    return row


def bench_attention(repeats: int = 3, iters: int = 50, shapes=ATTENTION_SHAPES,
                    log: Callable[[str], None] = print) -> dict:
    rows = []
    for shape in shapes:
        log(f"  timing attention: {shape.name} ...")
        rows.append(attention_row(shape, repeats, iters))
    notes = [f"µs per call, median of {repeats} runs of {iters} calls each; fp32; "
             "fwd+bwd: forward then backward of a random output gradient w.r.t. q, k, v",
             "reference = seq2seq.model.attention.reference_attention (explicit scores, softmax, "
             "returns weights); sdpa = seq2seq.model.attention.attention"]
    return {"rows": rows, "targets": [], "notes": notes, "skipped": []}


# ====================================================================== profiling
def _labels(model: Seq2Seq) -> list[tuple[Any, str, str]]:
    """``(object, attribute, label)``: what :func:`annotated_search` wraps, and its label
    (indented labels run inside the decoder step)."""
    from seq2seq.decoding import search as S
    from seq2seq.model.cache import DecoderCache

    out = [(S._DecoderState, "step", "decoder step: decode + log_softmax")]
    for layer in model.decoder.layers:
        out += [(layer.self_attn, "project_kv", "  decoder self-attn: K/V of the new token"),
                (layer.self_attn, "forward", "  decoder self-attn: Q, SDPA, W^O"),
                (layer.cross_attn, "forward", "  decoder cross-attn: Q, SDPA, W^O"),
                (layer.ff, "forward", "  decoder feed-forward")]
    out += [
        (model.output, "forward", "  output projection (d_model x vocab)"),
        (S._DecoderState, "select", "search: reorder beams (select)"),
        (DecoderCache, "reorder", "  cache reorder: index_select of K/V"),
        (S._Pool, "merge", "search: finished-pool merge"),
        (S, "_constrain", "search: constrain log-probs (clone + masks)"),
        (S, "finish_bound", "search: finish bound"),
        (model, "encode", "encoder"),
    ]
    return out


_MISSING = object()


@contextmanager
def annotated_search(model: Seq2Seq):
    """Label the phases of our search for ``torch.profiler`` (``record_function`` scopes)
    by wrapping search internals and decoder sub-modules for the duration of the block."""
    saved = []
    for obj, name, label in _labels(model):
        fn = getattr(obj, name)  # a function (class, module) or a bound method (instance)
        shadowing = not isinstance(obj, (type, types.ModuleType))  # instance attribute
        saved.append((obj, name, _MISSING if shadowing else fn))

        def scoped(*args, __fn=fn, __label=label, **kwargs):
            with torch.profiler.record_function(__label):
                return __fn(*args, **kwargs)

        setattr(obj, name, scoped)
    try:
        yield
    finally:
        for obj, name, original in reversed(saved):
            if original is _MISSING:
                delattr(obj, name)  # the class's method shows through again
            else:
                setattr(obj, name, original)


def profile_beam(model: Seq2Seq, ckpt: dict, texts: Sequence[str], *, beam: int = 5,
                 batch_size: int = 100, n_batches: int = 2, row_limit: int = 20) -> dict:
    """Where our beam search spends its time on the first ``n_batches`` (longest) batches:
    time per labelled phase, the top operators, and how many decoder rows were computed
    compared with stopping each sentence right after its 1-best's EOS."""
    from torch.profiler import ProfilerActivity, profile

    from seq2seq.export import vocabularies

    src_vocab, _ = vocabularies(model, ckpt)
    ids = source_ids(texts, TokenizerPair.from_state(ckpt["seq2seq"]["tokenizers"]), model.arch)
    batches = make_batches(ids, batch_size, model.arch, src_vocab)[:n_batches]
    engine = ours_engine(model, beam)
    engine(batches[:1])  # warm-up
    rows_per_step: list[int] = []
    hook = lambda t, lprobs: rows_per_step.append(lprobs.shape[0])  # noqa: E731
    start = time.perf_counter()
    with annotated_search(model), profile(activities=[ProfilerActivity.CPU]) as prof:
        hyps = []
        for b in batches:
            cfg = DecodingConfig(method="beam", beam_size=beam, length_penalty="average",
                                 max_len_a=0.0, max_len_b=b.max_len)
            hyps += [h[0].tokens for h in search(model, b.src, cfg, on_step=hook).hypotheses]
    wall = time.perf_counter() - start
    events = prof.key_averages()
    labels = list(dict.fromkeys(lbl for _, _, lbl in _labels(model)))  # nesting order
    totals = {e.key: e.cpu_time_total / 1e6 for e in events}
    phases = [(lbl, totals[lbl]) for lbl in labels if lbl in totals]
    ops = sorted(((e.key, e.self_cpu_time_total / 1e6, e.count) for e in events
                  if e.key not in labels and not e.key.startswith("ProfilerStep")),
                 key=lambda kv: -kv[1])[:row_limit]
    needed = beam * sum(len(h) + 1 for h in hyps)
    return {"batches": len(batches), "sentences": len(hyps), "wall_s": wall,
            "steps": len(rows_per_step), "decoder_rows": sum(rows_per_step),
            "decoder_rows_if_stopped_at_best": needed,
            "mean_best_len": sum(map(len, hyps)) / len(hyps),
            "max_len": [b.max_len for b in batches],
            "phases": phases, "ops": ops}


# ====================================================================== tables
def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "PASS" if value else "FAIL"
    text = format(value, spec)
    return text[1:] if re.fullmatch(r"-0\.?0*", text) else text  # no "-0"


def format_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]],
                 notes: Sequence[str] = ()) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    line = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    rule = "-" * len(line(header))
    out = [title, rule, line(header), rule, *(line(r) for r in rows), rule]
    out += [f"  * {n}" for n in notes]
    return "\n".join(out)


def decode_table(result: dict, title: str) -> str:
    rss = "ΔRSS MB" if RSS_RESETTABLE else "RSS MB"
    header = ["engine", "search", "set", "sent.", "median s", "sent/s", "tok/s", "ours ÷ this",
              "target", "result", "agree %", rss]
    rows = [[r["engine"], r["search"], r["set"], str(r["sentences"]), _fmt(r["seconds"], ".3f"),
             _fmt(r["sent_per_s"], ".1f"), _fmt(r["tok_per_s"], ".0f"),
             _fmt(r["ours_over_this"], ".2f"),
             "-" if "target" not in r else f">= {r['target']:g}", _fmt(r.get("pass")),
             _fmt(r["agree_pct"], ".1f"),
             _fmt(r["rss_rise_mb"] if RSS_RESETTABLE else r["rss_peak_mb"], ".0f")]
            for r in result["rows"]]
    return format_table(title, header, rows, result["notes"] + result["skipped"])


def train_table(result: dict, title: str) -> str:
    rss = "ΔRSS MB" if RSS_RESETTABLE else "RSS MB"
    header = ["engine", "precision", "tok/s", "ms/step", "ours ÷ this", "target", "result", rss]
    rows = [[r["engine"], r["precision"], _fmt(r["tok_per_s"], ".0f"), _fmt(r["ms_per_step"], ".1f"),
             _fmt(r["ours_over_this"], ".2f"),
             "-" if "target" not in r else f">= {r['target']:g}", _fmt(r.get("pass")),
             _fmt(r["rss_rise_mb"] if RSS_RESETTABLE else r["rss_peak_mb"], ".0f")]
            for r in result["rows"]]
    return format_table(title, header, rows, result["notes"] + result["skipped"])


def attention_table(result: dict, title: str) -> str:
    header = ["shape", "dims", "sdpa fwd µs", "ref fwd µs", "ref ÷ sdpa", "sdpa f+b µs",
              "ref f+b µs", "ref ÷ sdpa"]
    rows = [[r["shape"], r["dims"], _fmt(r["sdpa_fwd_us"], ".1f"), _fmt(r["reference_fwd_us"], ".1f"),
             _fmt(r["ref_over_sdpa_fwd"], ".2f"), _fmt(r["sdpa_fwdbwd_us"], ".1f"),
             _fmt(r["reference_fwdbwd_us"], ".1f"), _fmt(r["ref_over_sdpa_fwdbwd"], ".2f")]
            for r in result["rows"]]
    return format_table(title, header, rows, result["notes"])


def profile_report(res: dict, title: str) -> str:
    waste = res["decoder_rows"] / max(res["decoder_rows_if_stopped_at_best"], 1)
    lines = [
        title,
        f"  {res['sentences']} sentences in {res['batches']} batches (the longest), "
        f"{res['wall_s']:.2f} s under the profiler; {res['steps']} decoder steps "
        f"(length limits {res['max_len']}), mean 1-best length {res['mean_best_len']:.1f}",
        f"  decoder rows computed {res['decoder_rows']:,}; if each sentence stopped right after "
        f"its 1-best's EOS: {res['decoder_rows_if_stopped_at_best']:,} ({waste:.1f}x fewer)",
    ]
    total = res["wall_s"]
    lines += ["", f"  {'phase (CPU time incl. what runs inside it)':<52s} {'s':>7s} {'% wall':>7s}"]
    lines += [f"  {k:<52s} {v:7.3f} {100 * v / total:6.1f}%" for k, v in res["phases"]]
    lines += ["", f"  {'operator (self CPU time)':<52s} {'s':>7s} {'% wall':>7s} {'calls':>8s}"]
    lines += [f"  {k[:52]:<52s} {v:7.3f} {100 * v / total:6.1f}% {n:8d}" for k, v, n in res["ops"]]
    return "\n".join(lines)


# ====================================================================== the whole run
def environment(threads: int) -> dict:
    versions = {"torch": torch.__version__}
    for name in ("transformers", "ctranslate2"):
        mod = _optional(name)
        versions[name] = getattr(mod, "__version__", None) if mod else None
    return {"threads": threads, "cpu_count": os.cpu_count(), "load_average": os.getloadavg(),
            "versions": versions, "rss_per_engine": RSS_RESETTABLE}


def run(checkpoint: str | os.PathLike, *, sections: Sequence[str] = SECTIONS,
        limit: int | None = None, repeats: int = 3, threads: int = 1, batch_size: int = 100,
        beam: int = 5, force_length: int = 50, uncached_limit: int | None = 200,
        train_batches: int = 8, max_tokens: int = 4096, attention_iters: int = 50,
        data_dir: str | os.PathLike = "data/multi30k", cache_dir: str | os.PathLike = ".cache/seq2seq",
        log: Callable[[str], None] = print) -> dict:
    """Run the chosen sections, print one table each, return everything (JSON-ready)."""
    unknown = sorted(set(sections) - set(SECTIONS) - set(EXTRA_SECTIONS))
    if unknown:
        raise ValueError(f"unknown section(s) {unknown}; choices: {list(SECTIONS + EXTRA_SECTIONS)}")
    set_threads(threads)
    ckpt = load_checkpoint(checkpoint)
    meta = ckpt["seq2seq"]
    pair = f"{meta['src_lang']}→{meta['tgt_lang']}"
    cfg = from_dict(ModelConfig, meta["model_config"], "checkpoint model_config")
    env = environment(threads)
    log(f"seq2seq benchmark: {checkpoint} ({pair}, d_model {cfg.d_model}, "
        f"{cfg.encoder_layers}+{cfg.decoder_layers} layers), {threads} thread(s), "
        f"load average {env['load_average'][0]:.2f} on {env['cpu_count']} CPUs, "
        f"{repeats} timed repeats (median) after a warm-up")
    out: dict[str, Any] = {"checkpoint": str(checkpoint), "environment": env, "sections": {}}
    if "decode" in sections:
        texts = read_test_sources(ckpt, data_dir, TEST_SPLIT, limit)
        log(f"\n[decode] {len(texts)} sentences of Multi30k {TEST_SPLIT}.{meta['src_lang']}")
        res = bench_decoding(build_model(ckpt), ckpt, texts, repeats=repeats, threads=threads,
                             batch_size=batch_size, beam=beam, force_length=force_length,
                             uncached_limit=uncached_limit, log=log)
        log("\n" + decode_table(res, f"Decoding: Multi30k {TEST_SPLIT} {pair}, {len(texts)} "
                                f"sentences, {threads} thread(s)"))
        for row in res["rows"]:
            row.pop("hyps", None)
        out["sections"]["decode"] = res
    if "train" in sections:
        log(f"\n[train] first {train_batches} batches, max_tokens {max_tokens}")
        batches = training_batches(ckpt, data_dir, cache_dir, max_tokens, train_batches)
        res = bench_training(ckpt, batches, repeats=repeats, max_tokens=max_tokens, log=log)
        log("\n" + train_table(res, f"Training step: Multi30k train {pair}, {threads} thread(s)"))
        out["sections"]["train"] = res
    if "attention" in sections:
        log("\n[attention]")
        res = bench_attention(repeats, attention_iters, log=log)
        log("\n" + attention_table(res, f"Attention: SDPA vs reference path, {threads} thread(s)"))
        out["sections"]["attention"] = res
    if "profile" in sections:
        texts = read_test_sources(ckpt, data_dir, TEST_SPLIT, limit)
        log(f"\n[profile] ours beam {beam}, torch.profiler")
        res = profile_beam(build_model(ckpt), ckpt, texts, beam=beam, batch_size=batch_size)
        log("\n" + profile_report(res, f"Profile: ours beam {beam}, {threads} thread(s)"))
        out["sections"]["profile"] = res
    out["targets"] = [t for sec in out["sections"].values() for t in sec.get("targets", [])]
    if out["targets"]:
        log("\nTargets:")
        for t in out["targets"]:
            log(f"  {_fmt(t['pass'])}  {t['target']}: {t['ratio']:.2f} (need >= {t['need']:g})")
    return out
