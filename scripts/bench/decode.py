"""Decoding inputs and engines: ours (greedy, beam, cached or not, forced length),
``MarianMTModel.generate`` and CTranslate2, all on the same batches with the same limits.

- Sources are the checkpoint's tokenizer's ids, cut by ``rules.truncate_source``.
- Batches come from ``data.batch.token_batches`` (the packing rule training and
  ``Translator`` use): at most ``max_tokens`` padded source tokens (EOS included), longest
  batch first. Source tensors come from ``data.batch.collate_src``.
- Every engine gets the same output limit per batch: the library rule
  (``rules.max_lengths`` with the default ``DecodingConfig``) maxed over the batch, since
  ``generate`` takes one limit per batch.
- Beam search ranks by log-prob / length (ours ``length_penalty="average"``, HF and
  CTranslate2 ``length_penalty=1``: the same normalization).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from scripts.bench.report import target
from scripts.bench.timing import measure, optional, rss_note
from seq2seq.config import DataConfig, DecodingConfig, ModelConfig
from seq2seq.data.batch import collate_src, token_batches
from seq2seq.data.tokenizer import TokenizerPair
from seq2seq.decoding.rules import max_lengths, truncate_source
from seq2seq.decoding.search import search
from seq2seq.export.common import vocabularies
from seq2seq.model import Seq2Seq

TEST_SPLIT = "test_2016_flickr"
DEFAULT_DECODING = DecodingConfig()  # its max_len_a/b give every engine's length limit


@dataclass
class DecodeBatch:
    index: list[int]  # position of each row's sentence in the input list
    src: torch.Tensor  # (B, S) ids + [eos], right-padded: what our encoder and Marian see
    pieces: list[list[str]]  # the same tokens as strings, for CTranslate2 (empty if no vocab)
    max_len: int  # output tokens before EOS, the same limit for every engine


Engine = Callable[[Sequence[DecodeBatch]], list[list[int]]]  # 1-best ids, without EOS
Log = Callable[[str], None]


def read_test_sources(ckpt: dict, data_dir: str | os.PathLike, split: str = TEST_SPLIT,
                      limit: int | None = None) -> list[str]:
    """The source side of a Multi30k split in the checkpoint's language pair."""
    from seq2seq.data.sources import read_lines, resolve_corpus  # pulls in datasets + lightning

    meta = ckpt["seq2seq"]
    data = DataConfig(data_dir=str(data_dir), src_lang=meta["src_lang"], tgt_lang=meta["tgt_lang"])
    return read_lines(resolve_corpus(data, split)[0])[:limit]


def source_ids(texts: Sequence[str], tokenizers: TokenizerPair, arch: ModelConfig) -> list[list[int]]:
    """Subword ids per text (no EOS yet: ``collate_src`` adds it), truncated as ``Translator`` does."""
    return [truncate_source(ids, arch.max_positions) for ids in tokenizers.src.encode(list(texts))]


def batch_max_len(src: torch.Tensor, arch: ModelConfig) -> int:
    """One output limit for a batch: the library's per-sentence rule, maxed over the batch."""
    return int(max_lengths(src, DEFAULT_DECODING, arch.pad_id, arch.max_positions).max())


def make_batches(ids: Sequence[Sequence[int]], max_tokens: int, arch: ModelConfig,
                 src_vocab: Sequence[str] | None = None) -> list[DecodeBatch]:
    """``token_batches`` over source lengths + EOS, longest batch first (module docstring)."""
    batches = []
    for index in token_batches([len(seq) + 1 for seq in ids], max_tokens):
        rows = [ids[i] for i in index]
        src = collate_src(rows, arch.pad_id, arch.eos_id)  # x + [eos], as training sees it
        pieces = ([] if src_vocab is None else
                  [[src_vocab[t] for t in src[r, : len(seq) + 1].tolist()] for r, seq in enumerate(rows)])
        batches.append(DecodeBatch(index.tolist(), src, pieces, batch_max_len(src, arch)))
    return batches


def ours_engine(model: Seq2Seq, beam_size: int = 1, use_cache: bool = True,
                force_length: int | None = None, stopping: str = "heuristic",
                on_step: Callable | None = None) -> Engine:
    """Our ``search``; the batch's limit is passed as ``max_len_b`` with ``max_len_a=0``."""
    def run(batches: Sequence[DecodeBatch]) -> list[list[int]]:
        hyps = []
        for b in batches:
            decoding = DecodingConfig(method="beam" if beam_size > 1 else "greedy",
                                      beam_size=beam_size, length_penalty="average",
                                      max_len_a=0.0, max_len_b=b.max_len, stopping=stopping)
            result = search(model, b.src, decoding, use_cache=use_cache,
                            force_length=force_length, on_step=on_step)
            hyps += [h[0].tokens for h in result.hypotheses]
        return hyps

    return run


def hf_engine(marian, arch: ModelConfig, beam_size: int = 1,
              early_stopping: bool | str = False) -> Engine:
    """``MarianMTModel.generate``. Beam: ``early_stopping=False`` (HF's default) stops on
    its heuristic bound (best live score / current length); ``"never"`` uses best live
    score / max length, the same exact rule as ours (``search.finish_bound``)."""
    extra = dict(length_penalty=1.0, early_stopping=early_stopping) if beam_size > 1 else {}

    def run(batches: Sequence[DecodeBatch]) -> list[list[int]]:
        hyps = []
        for b in batches:
            with torch.inference_mode():
                out = marian.generate(input_ids=b.src, attention_mask=b.src.ne(arch.pad_id),
                                      num_beams=beam_size, do_sample=False,
                                      max_new_tokens=b.max_len + 1, **extra)
            for row in out[:, 1:].tolist():  # drop the BOS it starts from
                row = row[: row.index(arch.eos_id)] if arch.eos_id in row else row
                hyps.append([t for t in row if t != arch.pad_id])
        return hyps

    return run


def ct2_engine(translator, tgt_vocab: Sequence[str], arch: ModelConfig, beam_size: int = 1) -> Engine:
    """``ctranslate2.Translator.translate_batch`` on the batches' pieces."""
    index = {p: i for i, p in enumerate(tgt_vocab)}
    suppress = [[tgt_vocab[arch.pad_id]], [tgt_vocab[arch.bos_id]]]  # never outputs, as ours

    def run(batches: Sequence[DecodeBatch]) -> list[list[int]]:
        hyps = []
        for b in batches:
            results = translator.translate_batch(
                b.pieces, beam_size=beam_size, length_penalty=1.0, max_decoding_length=b.max_len,
                min_decoding_length=0, suppress_sequences=suppress, max_batch_size=0)
            hyps += [[index[p] for p in r.hypotheses[0]] for r in results]
        return hyps

    return run


def agreement(hyps: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> float:
    """% of sentences whose 1-best equals the reference's."""
    return 100.0 * sum(list(h) == list(r) for h, r in zip(hyps, reference)) / max(len(reference), 1)


# ---------------------------------------------------------------- the decode section
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
               repeats: int, cached_natural: dict | None = None, log: Log = print) -> list[dict]:
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


def hf_peers(model: Seq2Seq, beam_size: int, skipped: list[str]) -> dict[tuple[str, str], Engine]:
    """``{(name, search): engine}`` for HF ``generate`` (MarianMTModel for a Post-LN model,
    Pegasus for a Pre-LN one), if transformers is installed."""
    transformers = optional("transformers")
    if transformers is None:
        skipped.append("Hugging Face transformers not installed: HF generate rows skipped")
        return {}
    from seq2seq.export import to_hf

    transformers.logging.set_verbosity_error()
    marian, arch = to_hf(model), model.arch
    name = f"HF {type(marian).__name__.removesuffix('ForConditionalGeneration').removesuffix('MTModel')} generate"
    return {(name, "greedy"): hf_engine(marian, arch),
            (name, f"beam {beam_size}"): hf_engine(marian, arch, beam_size),
            (name, f"beam {beam_size}, exact stop"): hf_engine(marian, arch, beam_size, "never")}


def ct2_peers(model: Seq2Seq, src_vocab: Sequence[str], tgt_vocab: Sequence[str], beam_size: int,
              threads: int, workdir: str, skipped: list[str]) -> dict[tuple[str, str], Engine]:
    """CTranslate2 float32 and int8 (quantized at load) on one exported model, if installed."""
    ctranslate2 = optional("ctranslate2")
    if ctranslate2 is None:
        skipped.append("ctranslate2 not installed: CTranslate2 rows skipped")
        return {}
    from seq2seq.export.ctranslate2 import to_ctranslate2

    path = to_ctranslate2(model, Path(workdir) / "ct2", src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    engines = {}
    for compute_type in ("float32", "int8"):
        translator = ctranslate2.Translator(str(path), device="cpu", compute_type=compute_type,
                                            intra_threads=threads, inter_threads=1)
        name = f"CTranslate2 {compute_type}"
        engines[(name, "greedy")] = ct2_engine(translator, tgt_vocab, model.arch)
        engines[(name, f"beam {beam_size}, patience 1")] = ct2_engine(translator, tgt_vocab,
                                                                     model.arch, beam_size)
    return engines


def bench_decoding(model: Seq2Seq, ckpt: dict, texts: Sequence[str], *, repeats: int = 3,
                   threads: int = 1, max_tokens: int = 2000, beam_size: int = 5,
                   force_length: int = 50, uncached_limit: int | None = 200,
                   log: Log = print) -> dict:
    """The decode section: rows (with ratios and targets) and notes."""
    src_vocab, tgt_vocab = vocabularies(model, ckpt)
    ids = source_ids(texts, TokenizerPair.from_state(ckpt["seq2seq"]["tokenizers"]), model.arch)
    batches = make_batches(ids, max_tokens, model.arch, src_vocab)
    n_sub = len(ids) if uncached_limit is None else min(uncached_limit, len(ids))
    subset = "all" if n_sub == len(ids) else f"first {n_sub}"
    sub_batches = batches if subset == "all" else make_batches(ids[:n_sub], max_tokens, model.arch)
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="seq2seq-bench-") as workdir:
        peers = {**hf_peers(model, beam_size, skipped),
                 **ct2_peers(model, src_vocab, tgt_vocab, beam_size, threads, workdir, skipped)}
        # Every torch engine before any CTranslate2 one: once CTranslate2 has run in a process,
        # its idle threads slow torch ~1.65x (measured: our greedy 2.07 s before, 3.42 s after)
        ours = ours_rows(model, batches, repeats, beam_size, log)
        cached = ours["greedy"] if subset == "all" else None  # ours greedy on the same set
        extra = cache_rows(model, sub_batches, subset, force_length, repeats, cached, log)
        rows = [*ours.values(), *extra, *peer_rows(peers, ours, batches, repeats, log)]
        greedy_agree = greedy_agreement(rows, log)
    # Greedy rows first, ours first within each search (sort is stable).
    rows.sort(key=lambda r: (r["search"].startswith("beam"), not r["engine"].startswith("ours")))
    return {"rows": rows, "targets": decode_targets(rows, beam_size, force_length),
            "notes": decode_notes(max_tokens, threads, n_sub, subset, peers), "skipped": skipped,
            "greedy_agreement_pct": greedy_agree, "sentences": len(ids),
            "subset_sentences": n_sub, "max_tokens": max_tokens, "beam_size": beam_size,
            "batches": len(batches)}


def ours_rows(model: Seq2Seq, batches: Sequence[DecodeBatch], repeats: int, beam_size: int,
              log: Log = print) -> dict[str, dict]:
    """Our greedy and our beam under each stopping rule, by search name."""
    engines = {"greedy": ours_engine(model),
               f"beam {beam_size}": ours_engine(model, beam_size),
               f"beam {beam_size}, exact stop": ours_engine(model, beam_size, stopping="exact"),
               f"beam {beam_size}, patience 1": ours_engine(model, beam_size, stopping="patience")}
    rows = {}
    for name, engine in engines.items():
        log(f"  timing ours {name} ...")
        rows[name] = decode_row("ours", name, engine, batches, repeats)
    return rows


def peer_rows(peers: dict[tuple[str, str], Engine], ours: dict[str, dict],
              batches: Sequence[DecodeBatch], repeats: int, log: Log = print) -> list[dict]:
    """Every peer, with its ratio and agreement against our row of the same search."""
    rows = []
    for (name, search_name), engine in peers.items():
        log(f"  timing {name} {search_name} ...")
        rows.append(decode_row(name, search_name, engine, batches, repeats, ours[search_name]))
    return rows


def greedy_agreement(rows: Sequence[dict], log: Log = print) -> dict[str, float]:
    """% of sentences where each peer's greedy output equals ours (a wrong export shows here)."""
    agree = {r["engine"]: r["agree_pct"] for r in rows
             if r["search"] == "greedy" and r["set"] == "all" and not r["engine"].startswith("ours")}
    for name, pct in agree.items():
        log(f"  greedy agreement with ours, {name}: {pct:.1f}%")
        if pct < 90 and "int8" not in name:
            log(f"  WARNING: {name} differs from our greedy on {100 - pct:.1f}% of sentences: "
                "its timings may not compare like with like; check the export")
    return agree


def decode_targets(rows: Sequence[dict], beam_size: int, force_length: int) -> list[dict]:
    """The speed targets, each attached to the row whose ratio it checks."""
    hf_beam = (f"beam-{beam_size} sentences/s: ours ÷ HF generate", 3.0)
    want = {("HF Marian generate", f"beam {beam_size}"): hf_beam,
            ("HF Pegasus generate", f"beam {beam_size}"): hf_beam,
            ("CTranslate2 float32", f"beam {beam_size}, patience 1"):
            (f"beam-{beam_size} sentences/s: ours ÷ CTranslate2 fp32", 1.0),
            ("ours, no cache", f"greedy, {force_length} tok forced"):
            (f"greedy at {force_length} tokens: cached ÷ uncached", 4.0)}
    targets = []
    for row in rows:
        if (row["engine"], row["search"]) in want:
            name, need = want[(row["engine"], row["search"])]
            targets.append(target(name, row, need))
    return targets


def decode_notes(max_tokens: int, threads: int, n_sub: int, subset: str,
                 peers: dict[tuple[str, str], Engine]) -> list[str]:
    notes = [
        f"batches: token_batches over source lengths + EOS, at most {max_tokens} padded source "
        "tokens each, longest first; every engine gets the same batches and the same per-batch "
        "length limit: the library's max_lengths rule (default DecodingConfig), maxed over the batch",
        f"threads: {threads} for all (torch.set_num_threads; CTranslate2 intra_threads={threads}, "
        "inter_threads=1)",
        "beam: score / length ranks hypotheses (ours length_penalty='average', HF and CTranslate2 "
        "length_penalty=1). 'beam k' rows: HF's default rule, ours stopping='heuristic' and HF "
        "early_stopping=False (k finished, none beaten by the best live beam ending now); "
        "'patience 1' rows: k finished, ours stopping='patience' and CTranslate2's default. "
        "'exact stop' rows stop a "
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
    return notes + [rss_note()]
