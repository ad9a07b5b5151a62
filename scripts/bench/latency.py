"""The latency section: one sentence at a time, text in and text out, as an interactive user
waits for it (a CLI call, a LibreTranslate client's request, a browser extension).

Each (engine, search) row runs in its own fresh process: ours eager (``Translator.translate``
of one sentence), ours with ``--compile`` (its package made before the timing, once per
machine), and CTranslate2 float32 on the same weights (exported here), called the way Argos
Translate calls it: SentencePiece pieces in, ``translate_batch`` of one, pieces out, with the
arguments that search as ours does (``export.ctranslate2.ct2_translate_kwargs``, worked out
in the parent so the CTranslate2 process never imports torch). A row warms up on 10
sentences, then times each of the next ``limit`` alone: p50, p95 and mean in ms, and the
share of its outputs equal to ours eager (a wrong export or step shows there).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEARCHES = {"greedy": {"method": "greedy"},  # beam: CTranslate2 stops by patience only
            "beam 5": {"method": "beam", "beam_size": 5, "stopping": "patience"}}
WARMUP = 10
Log = Callable[[str], None]


# ---------------------------------------------------------------- parent side
def _ct2_spec(ckpt_path: str, ckpt: dict, workdir: Path, texts: Sequence[str],
              decoding: dict) -> dict:
    """The CTranslate2 export as a user makes it (``seq2seq-export --to ctranslate2``: the
    SentencePiece models beside it, EOS appended by CTranslate2) and each text's arguments."""
    from seq2seq.config import DecodingConfig, ModelConfig, from_dict
    from seq2seq.data.tokenizer import TokenizerPair
    from seq2seq.export.ctranslate2 import SENTENCEPIECE_FILES, ct2_translate_kwargs, to_ctranslate2

    path = workdir / "ct2"
    if not path.exists():
        to_ctranslate2(ckpt_path, path)
    arch = from_dict(ModelConfig, ckpt["seq2seq"]["model_config"])
    d = DecodingConfig(**decoding)
    lengths = [len(ids) for ids in TokenizerPair.from_state(ckpt["seq2seq"]["tokenizers"])
               .src.encode(list(texts))]
    return {"ct2_path": str(path), **{f"{side}_model": str(path / name)
                                      for side, name in SENTENCEPIECE_FILES.items()},
            "kwargs": [ct2_translate_kwargs(n, d, arch.max_positions) for n in lengths]}


def _run_child(spec: dict, threads: int, workdir: Path) -> dict:
    spec_path, out_path = workdir / "spec.json", workdir / "out.json"
    spec_path.write_text(json.dumps({**spec, "threads": threads}))
    out_path.unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT),
           "SEQ2SEQ_THREADS": str(threads)}
    res = subprocess.run([sys.executable, "-m", "scripts.bench.latency", str(spec_path),
                          str(out_path)], cwd=ROOT, env=env, capture_output=True, text=True)
    if res.returncode != 0 or not out_path.exists():
        raise RuntimeError(f"latency row {spec['engine']} failed (exit {res.returncode}):\n"
                           f"{res.stderr[-3000:]}")
    return json.loads(out_path.read_text())


def bench_latency(ckpt_path: str, ckpt: dict, texts: Sequence[str], *, threads: int = 1,
                  engines: Sequence[str] = ("ours", "ours --compile", "ct2"),
                  log: Log = print) -> dict:
    """Rows of p50 / p95 / mean ms a sentence for each engine and search (module docstring)."""
    rows, skipped = [], []
    if "ct2" in engines and _missing("ctranslate2"):
        skipped.append("ctranslate2 not installed: its rows skipped")
        engines = [e for e in engines if e != "ct2"]
    with tempfile.TemporaryDirectory(prefix="seq2seq-bench-latency-") as tmp:
        workdir = Path(tmp)
        for search, decoding in SEARCHES.items():
            eager = None
            for engine in engines:
                spec = {"engine": engine, "checkpoint": str(ckpt_path), "texts": list(texts),
                        "decoding": decoding}
                if engine == "ct2":
                    spec.update(_ct2_spec(ckpt_path, ckpt, workdir, texts, decoding))
                if engine == "ours --compile":  # the package is made once, before timing
                    _run_child({**spec, "texts": list(texts[:WARMUP + 1])}, threads, workdir)
                out = _run_child(spec, threads, workdir)
                eager = out["outputs"] if engine == "ours" else eager
                row = {"engine": engine, "search": search, **_stats(out["times"][WARMUP:])}
                if eager is not None:
                    pairs = list(zip(out["outputs"], eager))[WARMUP:]
                    row["same_as_ours_pct"] = 100.0 * sum(a == b for a, b in pairs) / len(pairs)
                log(f"  {engine:15s} {search:7s} p50 {row['p50_ms']:7.2f} ms  "
                    f"p95 {row['p95_ms']:7.2f} ms  mean {row['mean_ms']:7.2f} ms")
                rows.append(row)
    notes = [f"each row in its own fresh process, {threads} thread(s); {len(texts) - WARMUP} "
             f"sentences timed one at a time after {WARMUP} untimed; text in, text out",
             "beam 5 with stopping='patience' (CTranslate2's only rule) for every engine"]
    return {"rows": rows, "notes": notes, "skipped": skipped, "sentences": len(texts) - WARMUP}


def _missing(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is None


def _stats(seconds: Sequence[float]) -> dict:
    ms = sorted(s * 1000 for s in seconds)
    return {"p50_ms": statistics.median(ms), "p95_ms": ms[min(len(ms) - 1, int(0.95 * len(ms)))],
            "mean_ms": statistics.fmean(ms)}


# ---------------------------------------------------------------- child side
def _ours(spec: dict) -> Callable[[int], str]:
    import torch

    from seq2seq.config import DecodingConfig
    from seq2seq.translation.translator import Translator
    torch.set_num_threads(spec["threads"])
    translator = Translator.from_checkpoint(spec["checkpoint"], DecodingConfig(**spec["decoding"]),
                                            compile=spec["engine"] == "ours --compile")
    return lambda i: translator.translate([spec["texts"][i]])[0]


def _ct2(spec: dict) -> Callable[[int], str]:
    import ctranslate2
    import sentencepiece as spm
    translator = ctranslate2.Translator(spec["ct2_path"], device="cpu", compute_type="float32",
                                        intra_threads=spec["threads"], inter_threads=1)
    src = spm.SentencePieceProcessor(model_file=spec["src_model"])
    tgt = spm.SentencePieceProcessor(model_file=spec["tgt_model"])

    def run(i: int) -> str:
        pieces = src.encode(spec["texts"][i], out_type=str)
        result = translator.translate_batch([pieces], **spec["kwargs"][i])
        return tgt.decode(result[0].hypotheses[0])
    return run


def child_main(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    run = _ct2(spec) if spec["engine"] == "ct2" else _ours(spec)
    times, outputs = [], []
    for i in range(len(spec["texts"])):
        start = time.perf_counter()
        outputs.append(run(i))
        times.append(time.perf_counter() - start)
    Path(out_path).write_text(json.dumps({"times": times, "outputs": outputs, "pid": os.getpid(),
                                          "torch_imported": "torch" in sys.modules}))


if __name__ == "__main__":
    child_main(*sys.argv[1:3])
