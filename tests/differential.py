"""The differential harness: every path to a translation against one reference.

The reference is the shipped De->En model decoding eagerly in float32, cached, one sentence
at a time (``Translator.translate([text])``, itself tested equal to the uncached decoder in
test_search.py and test_model.py). A path (a batch size, a thread count, the compiled step,
an ensemble of one, the CLI, the server, documents, distillation) translates batches drawn
by Hypothesis from the shipped test_2016_flickr sentences (one sentence, a few, hundreds,
mixed lengths, duplicates, empty lines) and :func:`check_same` compares its lines with the
reference's:

- float32 paths must give the same lines. A line may differ only at a **near-tie**: under
  the reference model (teacher-forced, uncached), the two outputs' first differing tokens
  have log-probs within :data:`NEAR_TIE` of each other, or the two whole outputs' scores (as
  the search ranks them) are. Sums taken in another order (another batch shape picks other
  GEMM kernels; the compiled step; two threads) move log-probs by ~1e-5, so only such ties
  can flip; a wrong path changes most lines. Each near-tie is counted and printed.
- int8 / bfloat16 change the numbers themselves: :func:`agreement` gives the share of equal
  lines and the BLEU difference, which their tests bound by the figures measured on this
  model (docs/translation.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch
from helpers import multi30k_lines
from hypothesis import strategies as st
from torch import Tensor

from seq2seq.config import DecodingConfig
from seq2seq.data.batch import collate_src, collate_tgt_in
from seq2seq.decoding.rules import length_penalty
from seq2seq.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "data" / "models" / "multi30k_de_en_tiny.ckpt"
POOL = multi30k_lines("de", 200, "test_2016_flickr")
SEARCHES = {"greedy": DecodingConfig(method="greedy"),
            "beam2": DecodingConfig(method="beam", beam_size=2),
            "beam5": DecodingConfig(method="beam", beam_size=5)}
NEAR_TIE = 1e-3  # nats: ~100x what reordered float32 sums move a log-prob by
SIZES = (1, 2, 3, 7, 64, 300)


def batches(sizes=SIZES, pool=tuple(POOL)) -> st.SearchStrategy[list[str]]:
    """A batch of one of ``sizes``: pool sentences (so mixed lengths), duplicates likely in
    the large ones, and now and then an empty line."""
    line = st.one_of(st.sampled_from(pool), st.just("")) if len(pool) > 1 else st.sampled_from(pool)
    return st.sampled_from(sizes).flatmap(lambda n: st.lists(line, min_size=n, max_size=n))


@functools.cache
def reference_translator(search: str) -> Translator:
    return Translator.from_checkpoint(MODEL, SEARCHES[search])


@functools.cache
def _reference_line(search: str, text: str) -> str:
    return reference_translator(search).translate([text])[0]


def reference(texts: list[str], search: str) -> list[str]:
    """The reference's lines: each text translated alone (memoized per text)."""
    return [_reference_line(search, t) for t in texts]


@torch.no_grad()
def _forced(translator: Translator, src: str, hyps: list[str]) -> tuple[list[list[int]], Tensor]:
    """Each hypothesis' ids (re-tokenized, EOS last) and the reference model's log-probs of
    every vocabulary entry at each of its positions ``(N, L, V)``."""
    tok, model = translator.tokenizers, translator.model
    ids = [row + [tok.tgt.eos_id] for row in tok.tgt.encode(hyps)]
    src_ids = collate_src(tok.src.encode([src]) * len(hyps), tok.src.pad_id, tok.src.eos_id)
    tgt_in = collate_tgt_in([row[:-1] for row in ids], tok.tgt.pad_id, tok.tgt.bos_id)
    return ids, torch.log_softmax(model(src_ids, tgt_in).float(), dim=-1)


def tie_gap(search: str, src: str, want: str, got: str) -> float:
    """How far from a tie two outputs of ``src`` are under the reference model: the smaller
    of the log-prob gap of their first differing tokens and the gap of their scores."""
    translator = reference_translator(search)
    (a, b), logp = _forced(translator, src, [want, got])
    j = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)) - 1)
    first = abs(logp[0, j, a[j]] - logp[0, j, b[j]]).item()
    totals = [logp[n, torch.arange(len(r)), torch.tensor(r)].sum() for n, r in enumerate((a, b))]
    decoding = translator.decoding
    scores = [t / length_penalty(float(len(r)), decoding) for t, r in zip(totals, (a, b))]
    return min(first, abs(scores[0] - scores[1]).item())


@dataclass
class Differences:
    lines: int
    near_ties: list[tuple[str, str, str, float]]  # (source, reference, path, gap)


def check_same(path: str, texts: list[str], outputs: list[str], search: str,
               reference_lines: list[str] | None = None) -> Differences:
    """Assert ``outputs`` are the reference's lines for ``texts`` but for near-ties (see the
    module's docstring); print each near-tie under the path's name."""
    want = reference(texts, search) if reference_lines is None else reference_lines
    assert len(outputs) == len(texts), f"{path}: {len(outputs)} lines out for {len(texts)} in"
    ties, wrong = [], []
    for src, w, g in zip(texts, want, outputs):
        if w != g:
            gap = tie_gap(search, src, w, g) if w and g else float("inf")
            (ties if gap < NEAR_TIE else wrong).append((src, w, g, gap))
    for src, w, g, gap in ties:
        print(f"{path} [{search}]: near-tie (gap {gap:.1e}) {src!r}: {w!r} vs {g!r}")
    assert not wrong, (f"{path} [{search}]: {len(wrong)} of {len(texts)} lines differ from "
                       f"the reference beyond a near-tie, first {wrong[0]}")
    return Differences(len(texts), ties)


def agreement(outputs: list[str], reference_lines: list[str], targets: list[str]) -> tuple[float, float]:
    """(share of lines equal to the reference, BLEU of ``outputs`` minus the reference's
    BLEU, both against ``targets``)."""
    from seq2seq.metrics import bleu

    same = sum(a == b for a, b in zip(outputs, reference_lines)) / len(outputs)
    return same, bleu(outputs, targets).score - bleu(reference_lines, targets).score
