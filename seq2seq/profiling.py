"""Opt-in phase labels for ``torch.profiler``: a public, tested option of the code it measures.

    with profiling.labelled(), torch.profiler.profile() as prof:
        search(model, src, decoding)
    # prof.key_averages() now has one row per label in ``PHASES``

Outside ``labelled()`` a label costs one global read (no ``record_function`` at all), so the
hooks stay in the hot path at no measurable cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch

# Every label, in nesting order (an indented one runs inside the one above it).
PHASES: tuple[tuple[str, str], ...] = (
    ("seq2seq.encode", "encoder"),
    ("seq2seq.decode_step", "decoder step: decode + log_softmax"),
    ("seq2seq.decoder.self_attn", "  decoder self-attention (K/V append, Q, attention, W^O)"),
    ("seq2seq.decoder.cross_attn", "  decoder cross-attention (Q, attention, W^O)"),
    ("seq2seq.decoder.ffn", "  decoder feed-forward"),
    ("seq2seq.output_projection", "  output projection (d_model x vocab)"),
    ("seq2seq.search.constrain", "search: output rules on the log-probs"),
    ("seq2seq.search.select", "search: keep / reorder decoder rows"),
    ("seq2seq.cache.reorder", "  cache reorder (K/V rows)"),
    ("seq2seq.search.pool", "search: finished-hypothesis pool"),
    ("seq2seq.search.finish_bound", "search: finish bound"),
)
LABELS = frozenset(label for label, _ in PHASES)

_on = False
_NULL = nullcontext()


@contextmanager
def labelled() -> Iterator[None]:
    """Within this block, :func:`phase` labels become ``record_function`` scopes."""
    global _on
    before, _on = _on, True
    try:
        yield
    finally:
        _on = before


def phase(label: str) -> AbstractContextManager:
    """A ``record_function(label)`` scope inside :func:`labelled`, else a no-op."""
    if not _on:
        return _NULL
    if label not in LABELS:
        raise ValueError(f"profiling.phase: unknown label {label!r}; add it to PHASES")
    return torch.profiler.record_function(label)
