"""Operator calls per decoder step and per search step: what the host pays for between the
kernels, counted (not timed), so the figures do not depend on the machine or its load.

``torch.profiler`` records every operator call (``aten::``, ``mkldnn::``, ...), at every
level (``aten::linear`` and the ``aten::t`` / ``aten::addmm`` it runs inside count as three). For a search at batch ``B``:

- per search step: the calls of a search forced to ``2T`` steps minus one forced to ``T``
  steps, over ``T`` (encoding, setup and the result's assembly cancel out);
- per decoder step: the calls inside the ``seq2seq.decode_step`` phase (embedding, layers,
  final norm: ``DecoderRows.hidden``), over its count.

``python -m scripts.bench.opcount [checkpoint]`` prints both for greedy and beam 5 at
batch 1 and 64 (a model's own sentences need no data: sources are random ids).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch
from torch.profiler import ProfilerActivity

from seq2seq import profiling
from seq2seq.config import DecodingConfig
from seq2seq.decoding.search import search

CASES = (("greedy", 1, 1), ("greedy", 64, 1), ("beam 5", 1, 5), ("beam 5", 64, 5))
STEPS = 8  # T: forced steps of the shorter run
SOURCE_LEN = 12


def is_operator(name: str) -> bool:
    """An operator's event (``aten::addmm``), not a phase label or the profiler's own."""
    return "::" in name and not name.startswith("ProfilerStep")


def _operator_calls(events) -> tuple[int, int]:
    """Operator calls in ``events`` (a profile's raw events): all, and those inside the
    ``seq2seq.decode_step`` phase."""
    total = inside = 0
    for e in events:
        if not is_operator(e.name):
            continue
        total += 1
        parent = e.cpu_parent
        while parent is not None and parent.name != "seq2seq.decode_step":
            parent = parent.cpu_parent
        inside += parent is not None
    return total, inside


def count_run(model, src: torch.Tensor, decoding: DecodingConfig, steps: int) -> dict:
    """One search of ``src (B, S)`` forced to ``steps`` steps under the profiler: its
    operator calls, those of its decoder steps and the number of decoder steps."""
    with profiling.labelled(), torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        search(model, src, decoding, force_length=steps)
    total, inside = _operator_calls(prof.events())
    decode_steps = sum(e.name == "seq2seq.decode_step" for e in prof.events())
    return {"total": total, "decoder": inside, "decode_steps": decode_steps}


def count_case(model, batch: int, beam: int, steps: int = STEPS) -> dict:
    """Per search step and per decoder step calls of greedy (``beam`` 1) or beam search."""
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(4, model.arch.src_vocab_size, (batch, SOURCE_LEN), generator=gen)
    src[:, -1] = model.arch.eos_id
    decoding = DecodingConfig(method="beam" if beam > 1 else "greedy", beam_size=beam,
                              max_len_a=0.0, max_len_b=4 * steps)
    search(model, src, decoding, force_length=steps)  # warm-up: one-time packing, layouts
    short, long = (count_run(model, src, decoding, n) for n in (steps, 2 * steps))
    return {"search_step": (long["total"] - short["total"]) / steps,
            "decoder_step": long["decoder"] / long["decode_steps"]}


def count_all(model, cases: Sequence[tuple[str, int, int]] = CASES) -> list[dict]:
    """:func:`count_case` for each ``(name, batch, beam)``."""
    return [{"search": name, "batch": batch, **count_case(model, batch, beam)}
            for name, batch, beam in cases]


def report(rows: Sequence[dict]) -> str:
    lines = [f"  {'search':8s} {'batch':>5s} {'operator calls / search step':>29s} "
             f"{'/ decoder step':>15s}"]
    lines += [f"  {r['search']:8s} {r['batch']:5d} {r['search_step']:29.1f} "
              f"{r['decoder_step']:15.1f}" for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> None:
    from seq2seq.checkpoint import build_model, load_checkpoint

    path = argv[0] if argv else "data/models/multi30k_de_en_tiny.ckpt"
    model = build_model(load_checkpoint(path)).eval()
    print(f"Operator calls (torch.profiler events, all levels), {path}")
    print(report(count_all(model)))


if __name__ == "__main__":
    main(sys.argv[1:])
