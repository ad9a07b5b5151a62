"""The decode section: which rows (ours, ``MarianMTModel.generate``, CTranslate2), each timed in
its own process (``isolate``) on the inputs of ``engines``, then compared with ours (agreement,
ratios) and checked against the speed targets.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from scripts.bench import isolate
from scripts.bench.engines import (
    NO_REPEAT_NGRAM,
    DecodeBatch,
    agreement,
    hf_label,
    hf_model,
    make_batches,
    source_ids,
)
from scripts.bench.timing import optional, rss_note, target
from seq2seq.data.tokenizer import TokenizerPair
from seq2seq.export.common import vocabularies
from seq2seq.model import Seq2Seq

Log = Callable[[str], None]


@dataclass
class Row:
    """One timed row: ``spec`` is what its own process builds (scripts.bench.isolate)."""

    engine: str  # as printed: "ours", "HF generate", "CTranslate2 float32", ...
    search: str  # "greedy", "beam 5", "beam 5, exact stop", "beam 5, patience 1", ...
    spec: dict
    subset: str = "all"



def ours_specs(ckpt_path: str, beam_size: int) -> list[Row]:
    """Our greedy and our beam under each stopping rule (the default is "heuristic")."""
    base = {"engine": "ours", "checkpoint": ckpt_path}
    return [Row("ours", "greedy", base),
            Row("ours", f"beam {beam_size}", {**base, "beam_size": beam_size}),
            Row("ours", f"beam {beam_size}, exact stop",
                {**base, "beam_size": beam_size, "stopping": "exact"}),
            Row("ours", f"beam {beam_size}, patience 1",
                {**base, "beam_size": beam_size, "stopping": "patience"})]


def compiled_specs(ckpt_path: str, beam_size: int) -> list[Row]:
    """Our greedy and patience-1 beam with the compiled decoder step (``--compile``)."""
    base = {"engine": "ours", "checkpoint": ckpt_path, "compile": True}
    return [Row("ours --compile", "greedy", base),
            Row("ours --compile", f"beam {beam_size}, patience 1",
                {**base, "beam_size": beam_size, "stopping": "patience"})]


def refused(compute_type: str) -> str | None:
    """Why ``compute.prepare`` refuses ``compute_type`` on this machine (bfloat16 without
    native bf16, int8 without oneDNN's engine), or None."""
    import torch

    from seq2seq.model.inference import compute

    try:
        compute.check(compute.resolve(compute_type, 0), torch.device("cpu"))
    except ValueError as err:
        return str(err)
    return None


def compute_specs(ckpt_path: str, beam_size: int, compute_types: Sequence[str],
                  skipped: list[str]) -> list[Row]:
    """Our greedy and patience-1 beam (CTranslate2's stop) at each other compute type this
    CPU runs (the others noted in ``skipped``)."""
    rows = []
    for ct in compute_types:
        if ct != "float32" and (why := refused(ct)):
            skipped.append(f"ours {ct} rows skipped: {why}")
        elif ct != "float32":
            base = {"engine": "ours", "checkpoint": ckpt_path, "compute_type": ct}
            rows += [Row(f"ours {ct}", "greedy", base),
                     Row(f"ours {ct}", f"beam {beam_size}, patience 1",
                         {**base, "beam_size": beam_size, "stopping": "patience"})]
    return rows


def cache_specs(ckpt_path: str, force_length: int, subset: str) -> list[Row]:
    """Our greedy with and without the KV cache, at natural lengths and forced lengths."""
    rows = []
    for force in (None, force_length):
        name = "greedy" if force is None else f"greedy, {force} tok forced"
        for cache in (True, False):
            spec = {"engine": "ours", "checkpoint": ckpt_path, "use_cache": cache,
                    "force_length": force}
            rows.append(Row("ours" if cache else "ours, no cache", name, spec, subset))
    return rows


def hf_specs(model: Seq2Seq, ckpt_path: str, beam_size: int, skipped: list[str]) -> list[Row]:
    """``generate`` rows: greedy, HF's default beam stop and the exact one ("never")."""
    if optional("transformers") is None:
        skipped.append("Hugging Face transformers not installed: generate rows skipped")
        return []
    try:
        name = hf_label(hf_model(model))
    except ValueError as err:
        skipped.append(f"Hugging Face rows skipped: {err}")
        return []
    base = {"engine": "hf", "checkpoint": ckpt_path}
    return [Row(name, "greedy", base),
            Row(name, f"beam {beam_size}", {**base, "beam_size": beam_size}),
            Row(name, f"beam {beam_size}, exact stop",
                {**base, "beam_size": beam_size, "early_stopping": "never"})]


def ct2_specs(model: Seq2Seq, src_vocab: Sequence[str], tgt_vocab: Sequence[str], beam_size: int,
              workdir: str, skipped: list[str], compute_types: Sequence[str] = ()) -> list[Row]:
    """CTranslate2 float32 and int8 (quantized at load) rows on one exported model, and
    bfloat16 when asked."""
    if optional("ctranslate2") is None:
        skipped.append("ctranslate2 not installed: CTranslate2 rows skipped")
        return []
    from seq2seq.export.ctranslate2 import to_ctranslate2

    path = to_ctranslate2(model, Path(workdir) / "ct2", src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    never = [tgt_vocab[model.arch.pad_id], tgt_vocab[model.arch.bos_id]]  # ours never outputs them
    rows = []
    import ctranslate2  # which types this CPU runs: CTranslate2 refuses bfloat16 on most CPUs

    offered = ctranslate2.get_supported_compute_types("cpu")
    if "bfloat16" in compute_types and "bfloat16" not in offered:
        skipped.append(f"CTranslate2 bfloat16 rows skipped: not offered on this CPU "
                       f"(it offers {', '.join(sorted(offered))})")
    for compute_type in ("float32", "int8",
                         *(["bfloat16"] if "bfloat16" in compute_types and "bfloat16" in offered else [])):
        base = {"engine": "ct2", "ct2_path": str(path), "compute_type": compute_type,
                "tgt_vocab": list(tgt_vocab), "never": never, "no_repeat_ngram": NO_REPEAT_NGRAM}
        rows += [Row(f"CTranslate2 {compute_type}", "greedy", base),
                 Row(f"CTranslate2 {compute_type}", f"beam {beam_size}, patience 1",
                     {**base, "beam_size": beam_size})]
    return rows


def timed_row(row: Row, sweep: dict[int, Sequence[DecodeBatch]], threads: int, repeats: int,
              log: Log = print) -> dict:
    """Run ``row`` in its own process over every batch size of ``sweep``; its best size."""
    log(f"  timing {row.engine} {row.search} ({row.subset}, own process) ...")
    out = isolate.run_row({**row.spec, "repeats": repeats, "search": row.search}, sweep, threads)
    best, hyps = out["best"], out["best"]["hyps"]
    n_sent, n_tok = len(hyps), sum(len(h) for h in hyps)
    return {"engine": row.engine, "search": row.search, "set": row.subset, "sentences": n_sent,
            "seconds": best["seconds"], "times": best["times"], "max_tokens": best["max_tokens"],
            "sweep": [{k: p[k] for k in ("max_tokens", "seconds")} for p in out["sweep"]],
            "sent_per_s": n_sent / best["seconds"], "tok_per_s": n_tok / best["seconds"],
            "target_tokens": n_tok, "agree_pct": None, "ours_over_this": None,
            "rss_peak_mb": best["rss_peak_mb"], "rss_rise_mb": best["rss_rise_mb"],
            "pid": out["pid"], "torch_imported": out["torch_imported"],
            "hyps": hyps}  # dropped before JSON


def compare(rows: list[dict]) -> None:
    """Each row against our row of the same search and set (cached, for 'no cache' rows)."""
    ours = {(r["search"], r["set"]): r for r in rows if r["engine"] == "ours"}
    for row in rows:
        ref = ours.get((row["search"], row["set"]))
        if row["engine"] != "ours" and ref is not None:
            row["agree_pct"] = agreement(row["hyps"], ref["hyps"])
            row["ours_over_this"] = ref["sent_per_s"] / row["sent_per_s"]


def bench_decoding(ckpt_path: str | os.PathLike, ckpt: dict, texts: Sequence[str], *,
                   repeats: int = 3, threads: int = 1, max_tokens: Sequence[int] = (2000,),
                   beam_size: int = 5, force_length: int = 50, uncached_limit: int | None = 200,
                   compute_types: Sequence[str] = ("float32",), peers: Sequence[str] = ("hf", "ct2"),
                   compile: bool = False, log: Log = print) -> dict:
    """The decode section, every row in its own process: rows (with ratios and targets) and
    notes. ``max_tokens``: the batch sizes each engine tries; a row reports its fastest."""
    from seq2seq.checkpoint import build_model

    model, ckpt_path = build_model(ckpt), str(ckpt_path)
    src_vocab, tgt_vocab = vocabularies(model, ckpt)
    ids = source_ids(texts, TokenizerPair.from_state(ckpt["seq2seq"]["tokenizers"]), model.arch)
    sweep = {n: make_batches(ids, n, model.arch, src_vocab) for n in max_tokens}
    n_sub = len(ids) if uncached_limit is None else min(uncached_limit, len(ids))
    subset = "all" if n_sub == len(ids) else f"first {n_sub}"
    sub_sweep = {max_tokens[0]: make_batches(ids[:n_sub], max_tokens[0], model.arch)}
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="seq2seq-bench-") as workdir:
        specs = [*ours_specs(ckpt_path, beam_size),
                 *(compiled_specs(ckpt_path, beam_size) if compile else []),
                 *compute_specs(ckpt_path, beam_size, compute_types, skipped),
                 *(hf_specs(model, ckpt_path, beam_size, skipped) if "hf" in peers else []),
                 *(ct2_specs(model, src_vocab, tgt_vocab, beam_size, workdir, skipped, compute_types)
                   if "ct2" in peers else [])]
        rows = [timed_row(r, sweep, threads, repeats, log) for r in specs]
        cache = [r for r in cache_specs(ckpt_path, force_length, subset)
                 if not (subset == "all" and r.engine == "ours" and r.search == "greedy")]
        rows += [timed_row(r, sub_sweep, threads, repeats, log) for r in cache]
    compare(rows)
    greedy_agree = greedy_agreement(rows, log)
    # Greedy rows first, ours first within each search (sort is stable).
    rows.sort(key=lambda r: (r["search"].startswith("beam"), not r["engine"].startswith("ours")))
    return {"rows": rows, "targets": decode_targets(rows, beam_size, force_length),
            "notes": decode_notes(max_tokens, threads, n_sub, subset, specs), "skipped": skipped,
            "greedy_agreement_pct": greedy_agree, "sentences": len(ids),
            "subset_sentences": n_sub, "max_tokens": list(max_tokens), "beam_size": beam_size,
            "batches": {str(n): len(b) for n, b in sweep.items()}}


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


def decode_notes(max_tokens: Sequence[int], threads: int, n_sub: int, subset: str,
                 rows: Sequence[Row]) -> list[str]:
    sizes = ", ".join(str(n) for n in max_tokens)
    notes = [
        "each row in its own fresh process that imports and runs only that engine (an engine's "
        "idle threads slow the next one in a process ~2x); start-up and loading not timed",
        f"batches: token_batches over source lengths + EOS, at most N padded source tokens each, "
        f"longest first, N in ({sizes}): each row reports its fastest N (column N); every engine "
        "gets the same batches of a size and the same per-batch length limit: the library's "
        "max_lengths rule (default DecodingConfig), maxed over the batch",
        f"threads: {threads} for all (OMP_NUM_THREADS and torch.set_num_threads; CTranslate2 "
        f"intra_threads={threads}, inter_threads=1)",
        "beam: score / length ranks hypotheses (ours length_penalty='average', HF and CTranslate2 "
        "length_penalty=1). 'beam k' rows: HF's default rule, ours stopping='heuristic' and HF "
        "early_stopping=False (k finished, none beaten by the best live beam ending now); "
        "'patience 1' rows: k finished, ours stopping='patience' and CTranslate2's default. "
        "'exact stop' rows stop a "
        "sentence only when no live beam can beat its best finished one even at max length: "
        "ours stopping='exact' and HF early_stopping='never'; ours defaults to 'heuristic'",
        "ours ÷ this: sentences/s of our matching cached engine (same search, same set) over "
        "this row's; tok/s counts 1-best output tokens, EOS excluded",
        "agree %: sentences whose 1-best equals ours (same search; 'no cache' rows: ours cached)",
    ]
    if subset != "all":
        notes.append(f"set 'first {n_sub}': the cached-vs-uncached rows decode only the first "
                     f"{n_sub} sentences, to keep the uncached runs short (--uncached-limit)")
    if any(r.engine.startswith("CTranslate2 int8") for r in rows):
        notes.append("CTranslate2 int8: weights quantized at load (compute_type='int8'), so its "
                     "outputs may differ from ours")
    return notes + [rss_note()]
