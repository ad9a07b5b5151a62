"""One engine per process: every decode row is timed in a fresh Python process that imports
and runs only that engine (ours, ``generate`` of Hugging Face, or CTranslate2).

Why: an engine's idle threads slow the next engine in the same process about twofold
(CTranslate2 0.55 s in a fresh process, 1.17 s after torch matrix products in that process),
so any two engines timed in one process compare a handicapped one with a fresh one.

The parent (:func:`run_row`) writes a spec (engine, search, the batches of every batch size
to try, as plain lists) to a JSON file and runs ``python -m scripts.bench.isolate SPEC OUT``
with ``OMP_NUM_THREADS`` set; the child times each batch size (warm-up, then the median of
``repeats``) and writes the times, the 1-best ids at its best batch size and its pid.
A CTranslate2 child never imports torch: its batches arrive as pieces.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- parent side
def batch_specs(batches: Sequence[Any], engine: str) -> list[dict]:
    """``DecodeBatch`` objects as JSON: pieces for CTranslate2, padded ids for torch engines."""
    if engine == "ct2":
        return [{"index": b.index, "pieces": b.pieces, "max_len": b.max_len} for b in batches]
    return [{"index": b.index, "src": b.src.tolist(), "max_len": b.max_len} for b in batches]


def run_row(spec: dict, sweep: dict[int, Sequence[Any]], threads: int,
            timeout: float | None = None) -> dict:
    """Time one engine row in a fresh process. ``spec``: what :func:`build_engine` reads
    (``engine`` is "ours", "hf" or "ct2"); ``sweep``: the batches of each batch size.
    Returns the child's result: ``best`` (its fastest batch size), ``sweep`` and ``pid``."""
    with tempfile.TemporaryDirectory(prefix="seq2seq-bench-row-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        full = {**spec, "threads": threads,
                "sweep": {str(k): batch_specs(v, spec["engine"]) for k, v in sweep.items()}}
        spec_path.write_text(json.dumps(full))
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT),
               "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "SEQ2SEQ_THREADS": str(threads)}
        res = subprocess.run([sys.executable, "-m", "scripts.bench.isolate", str(spec_path),
                              str(out_path)], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=timeout)
        if res.returncode != 0 or not out_path.exists():
            raise RuntimeError(f"benchmark row {spec['engine']} {spec.get('search', '')} failed "
                               f"(exit {res.returncode}):\n{res.stderr[-3000:]}")
        return json.loads(out_path.read_text())


# ---------------------------------------------------------------- child side
def build_engine(spec: dict):
    """The engine callable of ``spec`` over ``DecodeBatch`` lists (see scripts.bench.engines)."""
    kind, beam = spec["engine"], spec.get("beam_size", 1)
    if kind == "ct2":
        import ctranslate2
        translator = ctranslate2.Translator(spec["ct2_path"], device="cpu",
                                            compute_type=spec["compute_type"],
                                            intra_threads=spec["threads"], inter_threads=1)
        return ct2_engine(translator, spec["tgt_vocab"], spec["never"], beam,
                          spec.get("no_repeat_ngram", 0))
    import torch

    from scripts.bench.engines import hf_engine, hf_model, ours_engine
    from seq2seq.checkpoint import build_model, load_checkpoint
    from seq2seq.model.inference import compute
    torch.set_num_threads(spec["threads"])
    model = build_model(load_checkpoint(spec["checkpoint"]))
    model.inference.packed_output.enabled = spec.get("packed", True)  # the packed-projection lever, A/B
    compute.prepare(model, spec.get("compute_type", "float32"))
    if spec.get("compile"):  # its package made (or loaded) here, before any timing
        from seq2seq.model.inference import compiled, compiled_encoder
        if not compiled.enable(model) or model.inference.compiled_step.prepare(model, beam) is None:
            raise RuntimeError("the compiled decoder step is not available here (see above)")
        compiled_encoder.enable(model)
        if model.inference.compiled_encoder is not None:
            model.inference.compiled_encoder.prepare(model)
    if kind == "ours":
        return ours_engine(model, beam, use_cache=spec.get("use_cache", True),
                           force_length=spec.get("force_length"),
                           stopping=spec.get("stopping", "heuristic"))
    if kind == "hf":
        return hf_engine(hf_model(model), model.arch, beam, spec.get("early_stopping", False))
    raise ValueError(f"unknown engine {kind!r}")


def ct2_engine(translator, tgt_vocab: Sequence[str], never: Sequence[str], beam_size: int = 1,
               no_repeat_ngram: int = 0):
    """``ctranslate2.Translator.translate_batch`` on the batches' pieces; ``never``: the pieces
    it must not output (pad, BOS), as ours never does; ``no_repeat_ngram``: our output rule."""
    index = {p: i for i, p in enumerate(tgt_vocab)}
    suppress = [[p] for p in never]

    def run(batches: Sequence[Any]) -> list[list[int]]:
        hyps = []
        for b in batches:
            results = translator.translate_batch(
                b.pieces, beam_size=beam_size, length_penalty=1.0, max_decoding_length=b.max_len,
                min_decoding_length=0, suppress_sequences=suppress, max_batch_size=0,
                no_repeat_ngram_size=no_repeat_ngram)
            hyps += [[index[p] for p in r.hypotheses[0]] for r in results]
        return hyps

    return run


def child_batches(specs: list[dict], engine: str) -> list:
    """The batches of one size: pieces for CTranslate2 (no torch in its process), else
    ``DecodeBatch`` objects."""
    if engine == "ct2":
        return [SimpleNamespace(**s) for s in specs]
    import torch

    from scripts.bench.engines import DecodeBatch
    return [DecodeBatch(s["index"], torch.tensor(s["src"]), [], s["max_len"]) for s in specs]


def run_train_row(spec: dict, batches: Sequence[Any], threads: int,
                  timeout: float | None = None) -> dict:
    """Time one training-step row (``spec``: engine "ours" or "hf", precision, checkpoint,
    repeats) on ``batches`` in a fresh process; returns the row (``timing.train_row``)."""
    import dataclasses

    import torch
    with tempfile.TemporaryDirectory(prefix="seq2seq-bench-batches-") as tmp:
        path = Path(tmp) / "batches.pt"
        torch.save([{f.name: getattr(b, f.name) for f in dataclasses.fields(b)} for b in batches],
                   path)
        return run_row({**spec, "kind": "train", "batches": str(path)}, {}, threads, timeout)


def child_train(spec: dict) -> dict:
    import torch

    from scripts.bench import engines
    from scripts.bench.timing import train_row
    from seq2seq.checkpoint import build_model, load_checkpoint
    torch.set_num_threads(spec["threads"])
    from seq2seq.data.batch import Batch
    ckpt = load_checkpoint(spec["checkpoint"])
    batches = [Batch(**fields) for fields in torch.load(spec["batches"], weights_only=True)]
    bf16, model = spec["precision"] != "fp32", build_model(ckpt)
    if spec["engine"] == "ours":
        step, name = engines.ours_train_step(model, bf16), "ours"
    else:
        hf = engines.hf_model(model)
        step, name = engines.hf_train_step(hf, model.arch.pad_id, bf16), "HF " + type(hf).__name__
    row = train_row(name, spec["precision"], step, batches, spec["repeats"],
                    engine=spec["engine"])
    return {**row, "trainable": engines.trainable(model), "pid": os.getpid()}


def child_main(spec_path: str, out_path: str) -> None:
    from scripts.bench.timing import claim_process, measure

    spec = json.loads(Path(spec_path).read_text())
    if spec.get("kind") == "train":
        Path(out_path).write_text(json.dumps(child_train(spec)))
        return
    engine = build_engine(spec)
    claim_process(spec["engine"])
    sweep, best = [], None
    for size, specs in spec["sweep"].items():
        batches = child_batches(specs, spec["engine"])
        m = measure(lambda b=batches: engine(b), spec["repeats"], engine=spec["engine"],
                    warmup=lambda b=batches: engine(b[:1]))
        order = [i for b in batches for i in b.index]
        hyps = [None] * len(order)
        for i, h in zip(order, m.result):
            hyps[i] = h  # input order, whatever the batching
        point = {"max_tokens": int(size), "seconds": m.seconds, "times": m.times,
                 "rss_peak_mb": m.rss_peak_mb, "rss_rise_mb": m.rss_rise_mb}
        sweep.append(point)
        if best is None or m.seconds < best["seconds"]:
            best = {**point, "hyps": hyps}
    Path(out_path).write_text(json.dumps({"pid": os.getpid(), "best": best, "sweep": sweep,
                                          "torch_imported": "torch" in sys.modules}))


if __name__ == "__main__":
    child_main(*sys.argv[1:3])
