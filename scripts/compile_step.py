"""The one-token decoder step under ``torch.compile`` (Inductor) against eager, on one thread.

    python scripts/compile_step.py                       # the shipped Tiny model, greedy rows
    python scripts/compile_step.py --beam 5              # 64 sentences x 5 beams, reordered
    python scripts/compile_step.py --big --steps 20      # d 512, 6+6 layers, 32k vocab, random
    python scripts/compile_step.py --cpp-wrapper         # Inductor's C++ wrapper (no Python)
    python scripts/compile_step.py --as-is               # the package's step, compiled unchanged
    python scripts/compile_step.py --aoti                # AOTInductor: export, .pt2, a 2nd process

Times only the decoder step (not the encoder, output projection or search), CPU time
(``time.process_time``) of ``--steps`` steps over random tokens, eager and compiled rounds
interleaved (A/B/A/B), medians. The compiled step is ``seq2seq.model.step``'s maths with the
cache's K/V passed in as views over ``P + 1`` positions (``DecoderCache.extend``), so
one graph serves every step: the cache length, the rows and the capacity are dynamic
dimensions (a first graph for ``P + 1 == 1``: sizes 1 are specialized). The first round's
time includes compiling; run again with the same ``TORCHINDUCTOR_CACHE_DIR`` for the
start-up with Inductor's on-disk cache.

``--aoti``: the step ``--compile`` runs (``seq2seq.model.compiled.package``: exported with
the model's weights, dynamic rows, memory rows, capacity, cache length and source length),
compiled by AOTInductor into ``--aoti-dir`` (once: a package already there is reused), then loaded and
timed in a fresh process, the start-up a second process would pay (the C++ loader; see
docs/speed.md for ``aoti_load_package``'s). docs/speed.md "A compiled decoder step" has
figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch._inductor  # noqa: E402

from seq2seq.checkpoint import load_model  # noqa: E402
from seq2seq.config import ModelConfig  # noqa: E402
from seq2seq.model.compiled import package, pure_step  # noqa: E402
from seq2seq.model.step import decoder_step, projections  # noqa: E402
from seq2seq.model.transformer import Seq2Seq  # noqa: E402


def cpu_time() -> float:
    """This process's CPU seconds and its finished children's (the C++ compiler's)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def aoti_package(model, path: Path, group: int) -> None:
    """``seq2seq.model.compiled.package`` (what ``--compile`` runs), timed."""
    torch._inductor.config.compile_threads = 1  # g++ as reaped children: their CPU counted
    wall, cpu = time.time(), cpu_time()
    with torch.no_grad():
        package(model, group, path)
    print(f"export + AOTInductor compile: {cpu_time() - cpu:.1f} s CPU (with the compiler's), "
          f"{time.time() - wall:.1f} s wall -> {path}", flush=True)


def aoti_loaded(path: Path):
    """The package's step through the C++ loader, timed (a second process's start-up), and
    ``aoti_load_package``'s time after it (its device check runs compilers: seconds)."""
    wall, cpu = time.time(), cpu_time()
    loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", False, 1, -1)
    print(f"load in a fresh process, C++ loader: {cpu_time() - cpu:.2f} s CPU, "
          f"{time.time() - wall:.2f} s wall", flush=True)
    wall, cpu = time.time(), cpu_time()
    torch._inductor.aoti_load_package(str(path))
    print(f"then aoti_load_package: {cpu_time() - cpu:.2f} s CPU, "
          f"{time.time() - wall:.2f} s wall", flush=True)
    pos = torch.empty(8192)  # its first P + 1 entries: the cache length as a size

    def step(model, tokens, cache):
        attn = model.decoder.layers[0].self_attn
        layouts = cache.cross_layout()
        cache.extend(1, attn.h, attn.d_k, attn.d_v)  # grows the buffers, counts P + 1 filled
        flat = [tokens, *(t for kv in cache.buffers for t in kv),
                *(t for layout in layouts for t in layout), pos[: cache.length]]
        return loader.boxed_run(flat)[0]  # the export's input order, flattened
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
    ap.add_argument("--as-is", action="store_true", help="compile seq2seq.model.step unchanged")
    ap.add_argument("--aoti", action="store_true", help="AOTInductor, timed in a fresh process")
    ap.add_argument("--aoti-dir", type=Path, default=Path("/tmp/seq2seq-aoti"))
    ap.add_argument("--aoti-run", type=Path, help=argparse.SUPPRESS)  # the fresh process
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


def aoti(args, argv) -> None:
    """Package the step unless ``--aoti-dir`` has it, then time it in a fresh process."""
    name = f"{'big' if args.big else Path(args.model).stem}-beam{args.beam}.pt2"
    path = args.aoti_dir / name
    if path.exists():
        print(f"{path} exists: not compiled again", flush=True)
    else:
        model, _ = setup(args)
        aoti_package(model, path, args.beam)
    subprocess.run([sys.executable, __file__, *argv, "--aoti-run", str(path)], check=True)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    if args.aoti:
        return aoti(args, [a for a in argv if a != "--aoti"])
    model, run = setup(args)
    if args.aoti_run:
        fast = aoti_loaded(args.aoti_run)
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
