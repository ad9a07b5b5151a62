"""The one-token decoder step under ``torch.compile`` (Inductor) against eager, on one thread.

    python scripts/experiments/compile_step.py                       # the shipped Tiny model, greedy rows
    python scripts/experiments/compile_step.py --beam 5              # 64 sentences x 5 beams, reordered
    python scripts/experiments/compile_step.py --big --steps 20      # d 512, 6+6 layers, 32k vocab, random
    python scripts/experiments/compile_step.py --cpp-wrapper         # Inductor's C++ wrapper (no Python)
    python scripts/experiments/compile_step.py --as-is               # the package's step, compiled unchanged
    python scripts/experiments/compile_step.py --aoti                # what --compile runs; again: the cached package

Times only the decoder step (not the encoder, output projection or search), CPU time
(``time.process_time``) of ``--steps`` steps over random tokens, eager and compiled rounds
interleaved (A/B/A/B), medians. The compiled step is ``seq2seq.model.inference.step``'s
maths with the cache's K/V passed in as views over ``P + 1`` positions
(``DecoderCache.extend``), so one graph serves every step: the cache length, the rows and
the capacity are dynamic dimensions (a first graph for ``P + 1 == 1``: sizes 1 are
specialized). The first round's time includes compiling; run again with the same
``TORCHINDUCTOR_CACHE_DIR`` for the start-up with Inductor's on-disk cache.

``--aoti``: the step ``--compile`` runs (``seq2seq.model.inference.compiled.CompiledStep``:
exported with the model's weights, dynamic rows, memory rows, capacity, cache length and
source length, compiled by AOTInductor into the package's cache folder once, loaded and checked
against eager); run it again for a second process's start-up (the package reused).
docs/speed.md "A compiled decoder step" has figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch._inductor  # noqa: E402

from seq2seq.checkpoint import load_model  # noqa: E402
from seq2seq.config import ModelConfig  # noqa: E402
from seq2seq.model.inference.compiled import CompiledStep, cache_dir, pure_step  # noqa: E402
from seq2seq.model.inference.step import decoder_step, projections  # noqa: E402
from seq2seq.model.transformer import Seq2Seq  # noqa: E402


def cpu_time() -> float:
    """This process's CPU seconds and its finished children's (the C++ compiler's)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def aoti_step(model, group: int):
    """What ``--compile`` runs: the package's :class:`CompiledStep`, made (or found in the
    cache folder) and checked against eager, timed; its calls are the decoder step."""
    torch._inductor.config.compile_threads = 1  # g++ as reaped children: their CPU counted
    wall, cpu = time.time(), cpu_time()
    step = CompiledStep(model)
    if step.prepare(model, group) is None:
        raise SystemExit("compile_step.py: the compiled step failed (its note says why)")
    print(f"made or loaded (with its check against eager): {cpu_time() - cpu:.1f} s CPU (with "
          f"the compiler's), {time.time() - wall:.1f} s wall; cached in {cache_dir()}", flush=True)
    return step


def compiled(model, cpp_wrapper: bool, as_is: bool):
    import torch._inductor.config as inductor

    inductor.cpp_wrapper = cpp_wrapper
    if as_is:  # the package's step unchanged: the cache object traced, its length an int
        return torch.compile(decoder_step, dynamic=True)
    fn = torch.compile(pure_step, dynamic=True)
    attn = model.decoder.layers[0].self_attn
    plan = [projections(layer, packed=False) for layer in model.decoder.layers]

    def step(model, tokens, cache):
        layouts = cache.cross_layout()  # eager: checks the memory mask once per cache
        return fn(model, plan, tokens, cache.extend(1, attn.h, attn.d_k, attn.d_v), layouts)
    return step


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="data/models/multi30k_de_en_tiny.ckpt")
    ap.add_argument("--big", action="store_true", help="d 512, 6+6 layers, 32k vocab, random")
    ap.add_argument("--batch", type=int, default=64, help="sentences (memory rows)")
    ap.add_argument("--beam", type=int, default=1, help="rows per sentence, reordered each step")
    ap.add_argument("--src-len", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpp-wrapper", action="store_true")
    ap.add_argument("--as-is", action="store_true",
                    help="compile seq2seq.model.inference.step unchanged")
    ap.add_argument("--aoti", action="store_true", help="the package --compile runs (AOTInductor)")
    return ap.parse_args(argv)


def setup(args):
    """The model, and ``run(step) -> (CPU seconds, states (T, R, 1, d_model))`` over the
    same random tokens (and beam reorderings) each time."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.big:
        model = Seq2Seq(ModelConfig(src_vocab_size=32000, tgt_vocab_size=32000, d_model=512,
                                    n_heads=8, d_ff=2048, encoder_layers=6, decoder_layers=6))
    else:
        model = load_model(args.model)[1]
    model.eval()
    B, G, T = args.batch, args.beam, args.steps
    src = torch.randint(4, model.arch.src_vocab_size, (B, args.src_len))
    mask = model.source_mask(src)
    tokens = [t.clone() for t in torch.randint(4, model.arch.tgt_vocab_size, (T, B * G))]
    rows = [(torch.arange(B)[:, None] * G + torch.randint(0, G, (B, G))).flatten()
            for _ in range(T)]  # each beam row replaced by one of its sentence's rows

    @torch.no_grad()
    def run(step, steps=T):
        cache = model.init_cache(model.encode(src, mask), mask, capacity=64, group=G)
        out, start = [], time.process_time()
        for t in range(steps):
            out.append(step(model, tokens[t], cache))
            if G > 1:
                cache.reorder(rows[t], cross=False)
        return time.process_time() - start, torch.stack(out), cache
    return model, run


def compare(args, run, fast, label: str, out) -> str:
    """Eager and ``fast`` rounds interleaved; medians, speed ratio and max |diff| of ``out``."""
    _, ref, _ = run(decoder_step)
    times = {"eager": [], label: []}
    for _ in range(args.rounds):
        times["eager"].append(run(decoder_step)[0])
        times[label].append(run(fast)[0])
    ms = {k: statistics.median(v) / args.steps * 1000 for k, v in times.items()}
    return (f"rows {args.batch * args.beam}, {args.steps} steps: eager {ms['eager']:.2f} "
            f"ms/step, {label} {ms[label]:.2f} ms/step ({ms['eager'] / ms[label]:.2f}x); "
            f"max |diff| {(out - ref).abs().max().item():.2e}")


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    model, run = setup(args)
    if args.aoti:
        fast = aoti_step(model, args.beam)
        _, out, _ = run(fast)
        print(compare(args, run, fast, "AOTInductor", out))
        return
    from torch._dynamo.utils import counters

    fast = compiled(model, args.cpp_wrapper, args.as_is)
    wall = time.time()
    first, out, _ = run(fast)
    print(f"first compiled round (compile or cache load): {first:.1f} s CPU, "
          f"{time.time() - wall:.1f} s wall", flush=True)
    print(f"{compare(args, run, fast, 'compiled', out)}; graphs "
          f"{counters['stats']['unique_graphs']}, graph breaks "
          f"{sum(counters['graph_break'].values())}; "
          f"cache dir {os.environ.get('TORCHINDUCTOR_CACHE_DIR', 'Inductor default')}")


if __name__ == "__main__":
    main()
