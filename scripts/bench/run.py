"""The whole run: the chosen sections in order, one printed table each, everything returned
as plain dicts (``--json``), with the load average before and after as a quiet-machine guard.

Rules shared by all measurements: a number is the median of ``repeats`` timed runs after one
untimed warm-up run; one thread count for everything (``torch.set_num_threads`` and
CTranslate2 ``intra_threads``, ``inter_threads=1``). See each section's module docstring.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from scripts.bench.attention import bench_attention
from scripts.bench.decode import bench_decoding
from scripts.bench.engines import TEST_SPLIT, read_test_sources, training_batches
from scripts.bench.gemm import PRECISIONS as GEMM_PRECISIONS
from scripts.bench.gemm import bench_gemm
from scripts.bench.latency import WARMUP, bench_latency
from scripts.bench.profile import profile_beam, profile_training
from scripts.bench.report import (
    attention_table,
    decode_table,
    gemm_table,
    latency_table,
    levers_table,
    profile_report,
    shared_table,
    split_table,
    students_table,
    targets_report,
    train_profile_report,
    train_table,
    vocab_table,
)
from scripts.bench.shared import bench_shared
from scripts.bench.split import bench_split
from scripts.bench.students import bench_students
from scripts.bench.timing import (
    QUIET_LOAD,
    RSS_RESETTABLE,
    OtherWork,
    check_load,
    cpu_label,
    cpu_model,
    optional,
    other_work_warning,
    set_threads,
)
from scripts.bench.train import PRECISIONS, bench_levers, bench_training
from scripts.bench.vocab import bench_vocab
from seq2seq.checkpoint import build_model, load_checkpoint
from seq2seq.config import ModelConfig, from_dict

SECTIONS = ("decode", "train", "attention")
# on request: beam profile; training-step profile; training levers; training step by vocabulary size; both cores as
# one process or DDP (trains the Tiny De->En recipe from its config: the checkpoint is unused);
# the training step against its GEMMs alone; distilled students against the checkpoint as teacher;
# one sentence at a time (ours eager and compiled, CTranslate2)
EXTRA_SECTIONS = ("profile", "train-profile", "levers", "vocab", "split", "shared", "gemm", "students",
                  "latency")
Log = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    """What the sections need besides the checkpoint (see :func:`run`)."""

    limit: int | None = None
    repeats: int = 3
    threads: int = 1
    decode_max_tokens: tuple[int, ...] = (1000, 2000, 4000)  # batch sizes each engine tries
    compute_types: tuple[str, ...] = ("float32",)  # ours and CTranslate2 at each (decode)
    peers: tuple[str, ...] = ("hf", "ct2")  # the other engines the decode section times
    compile: bool = False  # the decode section also times ours with the compiled step
    beam_size: int = 5
    force_length: int = 50
    uncached_limit: int | None = 200
    train_batches: int = 8
    max_tokens: int = 4096  # training batch budget
    attention_iters: int = 50
    bf16: bool = True  # also time the training step under bf16 autocast
    data_dir: str | os.PathLike = "data/multi30k"
    checkpoint: str = ""  # the file the decode rows' processes load
    cache_dir: str | os.PathLike = ".cache/seq2seq"
    students: tuple[str, ...] = ()  # checkpoints the students section times against the teacher
    student_beams: tuple[int, ...] = ()  # their beam sizes (1 = greedy); () = greedy and beam_size


def pair(ckpt: dict) -> str:
    return f"{ckpt['seq2seq']['src_lang']}→{ckpt['seq2seq']['tgt_lang']}"


def decode_section(ckpt: dict, opts: Options, log: Log) -> dict:
    texts = read_test_sources(ckpt, opts.data_dir, TEST_SPLIT, opts.limit)
    log(f"\n[decode] {len(texts)} sentences of Multi30k {TEST_SPLIT}.{ckpt['seq2seq']['src_lang']}")
    res = bench_decoding(opts.checkpoint, ckpt, texts, repeats=opts.repeats,
                         threads=opts.threads, max_tokens=opts.decode_max_tokens,
                         beam_size=opts.beam_size, force_length=opts.force_length,
                         uncached_limit=opts.uncached_limit,
                         compute_types=opts.compute_types, peers=opts.peers,
                         compile=opts.compile, log=log)
    log("\n" + decode_table(res, f"Decoding: Multi30k {TEST_SPLIT} {pair(ckpt)}, {len(texts)} "
                            f"sentences, {opts.threads} thread(s)"))
    for row in res["rows"]:
        row.pop("hyps", None)  # token ids: not for JSON
    return res


def train_section(ckpt: dict, opts: Options, log: Log) -> dict:
    log(f"\n[train] first {opts.train_batches} batches, max_tokens {opts.max_tokens}")
    batches = training_batches(ckpt, opts.data_dir, opts.cache_dir, opts.max_tokens,
                               opts.train_batches)
    res = bench_training(opts.checkpoint, ckpt, batches, repeats=opts.repeats,
                         max_tokens=opts.max_tokens, threads=opts.threads,
                         precisions=PRECISIONS if opts.bf16 else PRECISIONS[:1], log=log)
    log("\n" + train_table(res, f"Training step: Multi30k train {pair(ckpt)}, "
                           f"{opts.threads} thread(s)"))
    return res


def attention_section(ckpt: dict, opts: Options, log: Log) -> dict:
    log("\n[attention]")
    res = bench_attention(opts.repeats, opts.attention_iters, log=log)
    log("\n" + attention_table(res, f"Attention: SDPA vs matmul path, {opts.threads} thread(s)"))
    return res


def profile_section(ckpt: dict, opts: Options, log: Log) -> dict:
    texts = read_test_sources(ckpt, opts.data_dir, TEST_SPLIT, opts.limit)
    log(f"\n[profile] ours beam {opts.beam_size}, torch.profiler")
    res = profile_beam(build_model(ckpt), ckpt, texts, beam_size=opts.beam_size,
                       max_tokens=opts.decode_max_tokens[0])
    log("\n" + profile_report(res, f"Profile: ours beam {opts.beam_size}, "
                              f"{opts.threads} thread(s)"))
    return res


def train_profile_section(ckpt: dict, opts: Options, log: Log) -> dict:
    log(f"\n[train-profile] ours training step, first {opts.train_batches} batches, torch.profiler")
    batches = training_batches(ckpt, opts.data_dir, opts.cache_dir, opts.max_tokens,
                               opts.train_batches)
    res = profile_training(build_model(ckpt), batches)
    log("\n" + train_profile_report(res, f"Profile: ours training step, fp32, "
                                    f"{opts.threads} thread(s)"))
    return res


def gemm_section(ckpt: dict, opts: Options, log: Log) -> dict:
    log(f"\n[gemm] training step vs its GEMMs as torch.mm/bmm, first {opts.train_batches} batches")
    batches = training_batches(ckpt, opts.data_dir, opts.cache_dir, opts.max_tokens,
                               opts.train_batches)
    res = bench_gemm(ckpt, batches, repeats=opts.repeats,
                     precisions=GEMM_PRECISIONS if opts.bf16 else GEMM_PRECISIONS[:1], log=log)
    log("\n" + gemm_table(res, f"How GEMM-bound: training step vs its GEMMs alone, Multi30k train "
                          f"{pair(ckpt)}, {opts.threads} thread(s)"))
    return res


def levers_section(ckpt: dict, opts: Options, log: Log) -> dict:
    log(f"\n[levers] training step, first {opts.train_batches} batches, one lever at a time")
    batches = training_batches(ckpt, opts.data_dir, opts.cache_dir, opts.max_tokens,
                               opts.train_batches)
    res = bench_levers(ckpt, batches, repeats=opts.repeats, log=log)
    log("\n" + levers_table(res, f"Training-speed levers: Multi30k train {pair(ckpt)}, fp32, "
                            f"{opts.threads} thread(s)"))
    return res


def vocab_section(ckpt: dict, opts: Options, log: Log) -> dict:
    log(f"\n[vocab] training step by joint BPE size, first {opts.train_batches} batches each")
    res = bench_vocab(ckpt, data_dir=opts.data_dir, cache_dir=opts.cache_dir,
                      max_tokens=opts.max_tokens, n_batches=opts.train_batches,
                      repeats=opts.repeats, log=log)
    log("\n" + vocab_table(res, f"Training step by vocabulary size: Multi30k train {pair(ckpt)}, "
                            f"fp32, {opts.threads} thread(s)"))
    return res


def split_section(ckpt: dict, opts: Options, log: Log) -> dict:
    log("\n[split] seq2seq-train, Tiny De->En: 1 process x 2 threads vs DDP 2 x 1")
    res = bench_split(repeats=max(opts.repeats - 1, 1), log=log)
    log("\n" + split_table(res, "Both cores: one process or DDP (target tokens/s of training)"))
    return res


def shared_section(ckpt: dict, opts: Options, log: Log) -> dict:
    log("\n[shared] translation and training alone, beside one busy core and beside two")
    res = bench_shared(opts.checkpoint, str(opts.data_dir), sentences=300, batches=4,
                       repeats=opts.repeats, log=log)
    log("\n" + shared_table(res, "A shared machine: our speed beside busy cores"))
    return res


def students_section(ckpt: dict, opts: Options, log: Log) -> dict:
    texts = read_test_sources(ckpt, opts.data_dir, TEST_SPLIT, opts.limit)
    refs = read_test_sources(ckpt, opts.data_dir, TEST_SPLIT, opts.limit, side="tgt")
    log(f"\n[students] {len(texts)} sentences of Multi30k {TEST_SPLIT}, teacher {opts.checkpoint}")
    res = bench_students(opts.checkpoint, opts.students, texts, refs, pair(ckpt), repeats=opts.repeats,
                         threads=opts.threads, max_tokens=opts.decode_max_tokens,
                         beam_size=opts.beam_size, student_beams=opts.student_beams, log=log)
    log("\n" + students_table(res, f"Students and teacher: Multi30k {TEST_SPLIT} {pair(ckpt)}, "
                              f"{len(texts)} sentences, {opts.threads} thread(s)"))
    return res


def latency_section(ckpt: dict, opts: Options, log: Log) -> dict:
    texts = read_test_sources(ckpt, opts.data_dir, TEST_SPLIT, WARMUP + (opts.limit or 200))
    log(f"\n[latency] one sentence at a time, {len(texts) - WARMUP} of Multi30k {TEST_SPLIT}")
    res = bench_latency(opts.checkpoint, ckpt, texts, threads=opts.threads, log=log)
    log("\n" + latency_table(res, f"Latency: one sentence at a time, {pair(ckpt)}, "
                              f"{opts.threads} thread(s)"))
    return res


RUNNERS = {"decode": decode_section, "train": train_section, "attention": attention_section,
           "profile": profile_section, "train-profile": train_profile_section,
           "levers": levers_section, "vocab": vocab_section,
           "split": split_section, "shared": shared_section, "gemm": gemm_section,
           "students": students_section, "latency": latency_section}


def environment(threads: int) -> dict:
    versions = {"torch": torch.__version__}
    for name in ("transformers", "ctranslate2"):
        mod = optional(name)
        versions[name] = getattr(mod, "__version__", None) if mod else None
    return {"threads": threads, "cpu_count": os.cpu_count(), "cpu": cpu_model(), "versions": versions,
            "rss_per_engine": RSS_RESETTABLE}


def check_sections(sections: Sequence[str]) -> None:
    unknown = sorted(set(sections) - set(SECTIONS) - set(EXTRA_SECTIONS))
    if unknown:
        raise ValueError(f"unknown section(s) {unknown}; choices: {list(SECTIONS + EXTRA_SECTIONS)}")


def run(checkpoint: str | os.PathLike, *, sections: Sequence[str] = SECTIONS,
        log: Log = print, **options: Any) -> dict:
    """Run the chosen sections (``options``: the fields of :class:`Options`), print one table
    each, return everything (JSON-ready)."""
    check_sections(sections)
    opts = Options(**options, checkpoint=str(checkpoint))
    set_threads(opts.threads)
    ckpt = load_checkpoint(checkpoint)
    arch = from_dict(ModelConfig, ckpt["seq2seq"]["model_config"], "checkpoint model_config")
    env = environment(opts.threads)
    log(f"seq2seq benchmark: {checkpoint} ({pair(ckpt)}, d_model {arch.d_model}, "
        f"{arch.encoder_layers}+{arch.decoder_layers} layers), {opts.threads} thread(s) on "
        f"{env['cpu_count']} CPUs, {opts.repeats} timed repeats (median) after a warm-up")
    log(f"CPU: {cpu_label(env['cpu'])}")
    env["load_1min_before"] = check_load("before", log)
    others = OtherWork()
    others.start()
    out: dict[str, Any] = {"checkpoint": str(checkpoint), "environment": env, "sections": {}}
    for name in SECTIONS + EXTRA_SECTIONS:
        if name in sections:
            out["sections"][name] = RUNNERS[name](ckpt, opts, log)
    out["targets"] = [t for sec in out["sections"].values() for t in sec.get("targets", [])]
    if out["targets"]:
        log("\n" + targets_report(out["targets"]))
    log("")
    env["load_1min_after"] = check_load("after", log)
    env["other_cores"] = others.cores()
    log(f"other processes' CPU during the run: {env['other_cores'] or 0.0:.2f} cores")
    if warning := other_work_warning(env["other_cores"]):
        log(warning)
    env["quiet"] = env["load_1min_before"] <= QUIET_LOAD and not warning
    return out
