"""The profile section (on request): ``torch.profiler`` over our beam search on the longest
batches, with the package's opt-in phase labels (``seq2seq.profiling``): time per phase
(one ``key_averages`` row per ``profiling.PHASES`` label that ran), the top operators, and
how many decoder rows were computed compared with stopping each sentence right after its
1-best's EOS."""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from torch.profiler import ProfilerActivity

from scripts.bench.engines import OPTIM, adam, make_batches, ours_engine, source_ids
from seq2seq import profiling
from seq2seq.data.tokenizer import TokenizerPair
from seq2seq.model import Seq2Seq


def phase_times(events) -> list[dict]:
    """CPU time (incl. what runs inside) of each ``PHASES`` label found, in nesting order."""
    totals = {e.key: e.cpu_time_total / 1e6 for e in events}
    return [{"label": label, "phase": description, "seconds": totals[label]}
            for label, description in profiling.PHASES if label in totals]


def top_operators(events, row_limit: int) -> list[dict]:
    """The ``row_limit`` operators with the most self CPU time (phase labels excluded)."""
    ops = [{"op": e.key, "seconds": e.self_cpu_time_total / 1e6, "calls": e.count}
           for e in events if e.key not in profiling.LABELS and not e.key.startswith("ProfilerStep")]
    return sorted(ops, key=lambda o: -o["seconds"])[:row_limit]


# the GEMM and attention kernels: what a step cannot do without (the rest is host glue)
KERNEL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product",
              "mkldnn::", "aten::mkldnn_")


def kernel_seconds(events) -> float:
    """Self CPU time of the matmul / attention kernels (:data:`KERNEL_OPS`) in ``events``."""
    return sum(e.self_cpu_time_total for e in events if e.key.startswith(KERNEL_OPS)) / 1e6


def profile_beam(model: Seq2Seq, ckpt: dict, texts: Sequence[str], *, beam_size: int = 5,
                 max_tokens: int = 2000, n_batches: int = 2, row_limit: int = 20) -> dict:
    """Profile our beam search (``stopping="exact"``, the library default) on the first
    ``n_batches`` batches (the longest) after one untimed warm-up batch."""
    ids = source_ids(texts, TokenizerPair.from_state(ckpt["seq2seq"]["tokenizers"]), model.arch)
    batches = make_batches(ids, max_tokens, model.arch)[:n_batches]
    rows_per_step: list[int] = []
    engine = ours_engine(model, beam_size, stopping="exact",
                         on_step=lambda t, lprobs: rows_per_step.append(lprobs.shape[0]))
    engine(batches[:1])  # warm-up
    rows_per_step.clear()
    start = time.perf_counter()
    with profiling.labelled(), torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        hyps = engine(batches)
    wall = time.perf_counter() - start
    events = prof.key_averages()
    return {"batches": len(batches), "sentences": len(hyps), "wall_s": wall,
            "steps": len(rows_per_step), "decoder_rows": sum(rows_per_step),
            "decoder_rows_if_stopped_at_best": beam_size * sum(len(h) + 1 for h in hyps),
            "mean_best_len": sum(map(len, hyps)) / len(hyps), "max_len": [b.max_len for b in batches],
            "max_tokens": max_tokens, "beam_size": beam_size,
            "phases": phase_times(events), "ops": top_operators(events, row_limit),
            "kernel_s": kernel_seconds(events)}


TRAIN_PHASES = (("train.forward_loss", "forward + loss"), ("train.backward", "backward"),
                ("train.optimizer", "Adam step"))


def profile_training(model: Seq2Seq, batches: Sequence, row_limit: int = 20) -> dict:
    """``torch.profiler`` over one fp32 training step (forward + loss, backward, Adam) per
    batch, after an untimed warm-up step: time per phase and the top operators."""
    from torch.profiler import record_function

    from seq2seq.training.module import Seq2SeqModule  # pulls in lightning

    module = Seq2SeqModule(arch=model.arch, optim=OPTIM)
    module.model = model.train()
    opt = adam(model)

    def step(batch) -> int:
        with record_function("train.forward_loss"):
            loss, n_tokens = module.loss(batch)
        with record_function("train.backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with record_function("train.optimizer"):
            opt.step()
        return n_tokens

    step(batches[0])  # warm-up
    start = time.perf_counter()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        tokens = sum(step(b) for b in batches)
    wall = time.perf_counter() - start
    events = prof.key_averages()
    totals = {e.key: e.cpu_time_total / 1e6 for e in events}
    labels = {label for label, _ in TRAIN_PHASES}
    ops = [{"op": e.key, "seconds": e.self_cpu_time_total / 1e6, "calls": e.count}
           for e in events if e.key not in labels and not e.key.startswith("ProfilerStep")]
    return {"batches": len(batches), "target_tokens": tokens, "wall_s": wall,
            "phases": [{"phase": name, "seconds": totals.get(label, 0.0)}
                       for label, name in TRAIN_PHASES],
            "ops": sorted(ops, key=lambda o: -o["seconds"])[:row_limit]}
