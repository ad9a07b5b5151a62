"""The one-token decoder step under ``torch.compile`` (Inductor) against eager, on one thread.

    python scripts/compile_step.py                       # the shipped Tiny model, greedy rows
    python scripts/compile_step.py --beam 5              # 64 sentences x 5 beams, reordered
    python scripts/compile_step.py --big --steps 20      # d 512, 6+6 layers, 32k vocab, random
    python scripts/compile_step.py --cpp-wrapper         # Inductor's C++ wrapper (no Python)
    python scripts/compile_step.py --as-is               # the package's step, compiled unchanged

Times only the decoder step (not the encoder, output projection or search), CPU time
(``time.process_time``) of ``--steps`` steps over random tokens, eager and compiled rounds
interleaved (A/B/A/B), medians. The compiled step is ``seq2seq.model.step``'s maths with the
cache's K/V passed in as views over ``P + 1`` positions (``DecoderCache.extend``), so
one graph serves every step: the cache length, the rows and the capacity are dynamic
dimensions (a first graph for ``P + 1 == 1``: sizes 1 are specialized). The first round's
time includes compiling; run again with the same ``TORCHINDUCTOR_CACHE_DIR`` for the
start-up with Inductor's on-disk cache. docs/speed.md "A compiled decoder step" has figures.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from seq2seq.checkpoint import load_model  # noqa: E402
from seq2seq.config import ModelConfig  # noqa: E402
from seq2seq.model.compute import linear  # noqa: E402
from seq2seq.model.step import cross_attention, decoder_step, sublayer  # noqa: E402
from seq2seq.model.transformer import Seq2Seq  # noqa: E402


def self_attention(attn, h, K, V):
    """``step.self_attention`` with the new K/V written into the last position of views."""
    R, H, d_k, d_v = h.shape[0], attn.h, attn.d_k, attn.d_v
    q = linear(attn.w_q, h).view(R * H, 1, d_k)
    k, v = linear(attn.w_kv, h).split([H * d_k, H * d_v], dim=-1)
    K.select(2, -1).copy_(k.view(R, H, d_k))  # (R, H, P+1, d_k): position P
    V.select(2, -1).copy_(v.view(R, H, d_v))
    scores = torch.bmm(q * (1.0 / math.sqrt(d_k)), K.flatten(0, 1).transpose(1, 2))
    out = torch.bmm(torch.softmax(scores, dim=-1), V.flatten(0, 1))
    return linear(attn.w_o, out.view(R, H * d_v))


def layer_step(layer, x, K, V, layout):
    M, ff = layout[0].shape[0] // layer.cross_attn.h, layer.ff
    x = sublayer(layer.self_block, x, lambda h: self_attention(layer.self_attn, h, K, V))
    x = sublayer(layer.cross_block, x, lambda h: cross_attention(layer.cross_attn, h, layout, M))
    return sublayer(layer.ff_block, x, lambda h: linear(ff.w2, ff.act(linear(ff.w1, h))))


def pure_step(model, tokens, kv, layouts):
    """``tokens (R,)``, per layer K/V views ``(R, H, P+1, d)`` and the cross layout ->
    ``(R, 1, d_model)``; no Python state read but shapes, so one graph for every P."""
    emb, P = model.tgt_embed, kv[0][0].shape[2] - 1
    x = torch.add(emb.positions.select(0, P), F.embedding(tokens, emb.tokens.weight),
                  alpha=emb.scale)
    for layer, (K, V), layout in zip(model.decoder.layers, kv, layouts):
        x = layer_step(layer, x, K, V, layout)
    return model.decoder.final_norm(x)[:, None]


def compiled(model, cpp_wrapper: bool, as_is: bool):
    import torch._inductor.config as inductor

    inductor.cpp_wrapper = cpp_wrapper
    if as_is:  # the package's step unchanged: the cache object traced, its length an int
        return torch.compile(decoder_step, dynamic=True)
    fn = torch.compile(pure_step, dynamic=True)
    attn = model.decoder.layers[0].self_attn

    def step(model, tokens, cache):
        layouts = cache.cross_layout()  # eager: checks the memory mask once per cache
        return fn(model, tokens, cache.extend(1, attn.h, attn.d_k, attn.d_v), layouts)
    return step


def main(argv=None) -> None:
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
    args = ap.parse_args(argv)
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
    def run(step):
        cache = model.init_cache(model.encode(src, mask), mask, capacity=64, group=G)
        out, start = [], time.process_time()
        for t in range(T):
            out.append(step(model, tokens[t], cache))
            if G > 1:
                cache.reorder(rows[t], cross=False)
        return time.process_time() - start, torch.stack(out)

    from torch._dynamo.utils import counters

    fast = compiled(model, args.cpp_wrapper, args.as_is)
    wall = time.time()
    first, out = run(fast)
    print(f"first compiled round (compile or cache load): {first:.1f} s CPU, "
          f"{time.time() - wall:.1f} s wall", flush=True)
    _, ref = run(decoder_step)
    times = {"eager": [], "compiled": []}
    for _ in range(args.rounds):
        times["eager"].append(run(decoder_step)[0])
        times["compiled"].append(run(fast)[0])
    ms = {k: statistics.median(v) / T * 1000 for k, v in times.items()}
    print(f"rows {B * G}, {T} steps: eager {ms['eager']:.2f} ms/step, compiled "
          f"{ms['compiled']:.2f} ms/step ({ms['eager'] / ms['compiled']:.2f}x); "
          f"max |diff| {(out - ref).abs().max().item():.2e}; graphs "
          f"{counters['stats']['unique_graphs']}, graph breaks {sum(counters['graph_break'].values())}; "
          f"cache dir {os.environ.get('TORCHINDUCTOR_CACHE_DIR', 'Inductor default')}")


if __name__ == "__main__":
    main()
