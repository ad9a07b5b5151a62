"""Greedy search of one sentence with its whole step compiled (``--compile``): the decoder
step, the output projection, ``log_softmax``, the output rules and the arg-max in one
AOTInductor package, one call a step, which returns the step's token and its log-prob.

An interactive user translates one sentence at a time, and there a search step is mostly
glue: the compiled decoder step (``model.inference.compiled``) takes ~0.1 ms, but the
projection, the rules, the arg-max and the bookkeeping around them, each an operator called
from Python, cost as much again (docs/speed.md, "One sentence at a time"). Here they are
kernels of the step's package: the rules are ``rules.constrain_graph`` (the values
``rules.constrain`` leaves, without a host sync), the projection multiplies by a
``(d_model, V)`` copy of the output weight (one row's product then streams along V). The
package is the one-sentence step package's graph (``compiled.BufferStep``, single-threaded
kernels: ``compiled.LONE_CONFIGS``) with these at its end, cached on disk beside it under the
same key (weights, torch, CPU), and checked at load against the eager step: the token must be
the eager log-probs' arg-max and its log-prob theirs within ``compiled.CHECK_TOLERANCE``.

(A whole search loop in one graph, ``torch.while_loop``, was slower: AOTInductor calls each
matmul of its body through ATen and hands every weight to the body again at each step.)

Used by ``search.greedy`` for a batch of one sentence, cached, on a float32 CPU model with
``--compile``, no shortlist, no step hook, no forced length and an n-gram ban of at most
``rules.NGRAM_MAX``; anything else, or any failure (said once), searches as before.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from torch import Tensor

from seq2seq.config import DecodingConfig
from seq2seq.decoding.compiled_beam import CompiledBeam, ScoringStep, step_dims
from seq2seq.decoding.rules import NGRAM_MAX, constrain, max_lengths
from seq2seq.decoding.state import start
from seq2seq.model.inference import compiled, compiled_encoder, compiled_source

COUNTS = {"sentences": 0}  # sentences this process decoded through the package (tests)


class GreedyStep(ScoringStep):
    """``BufferStep``'s inputs for one decoder row, the row's outputs so far ``out (T,)``
    (pad after the ``t`` written), their log-probs ``chosen (T,)`` and ``limits (4,)`` = t,
    max_len, min_len, n-gram size -> the chosen token ``(1,)``, the rules applied; the step
    also writes it and its log-prob at ``t`` and counts ``t + 1`` (in place)."""

    def forward(self, tokens, bufs, layouts, pos, out, chosen, limits):
        lprobs = self.log_probs(tokens, bufs, layouts, pos, limits, out[None])[0]  # (V,)
        tok = lprobs.argmax().view(1)
        # the search's bookkeeping in place: the token and its log-prob at t, then t + 1
        t = limits[:1]
        out.index_copy_(0, t, tok)
        chosen.index_copy_(0, t, lprobs.index_select(0, tok))
        limits.index_add_(0, torch.zeros(1, dtype=torch.long), torch.ones(1, dtype=torch.long))
        return tok


def _example(model, ngram: int, max_len: int):
    """:class:`GreedyStep`'s inputs at step 5 of one random sentence (``compiled``'s
    example) whose outputs so far repeat two tokens (``x y x y x``: a 2-gram ban bites)."""
    tokens, bufs, layouts, pos = compiled.step_example(model, 1, 1)
    out = torch.full((max(max_len, 5) + 1,), model.arch.pad_id)
    out[:5] = torch.tensor([7, 9, 7, 9, 7])
    return (tokens, bufs, layouts, pos, out, torch.zeros(out.shape[0]),
            torch.tensor([5, max_len, 0, ngram]))


def make(model, path: Path, made_for: dict) -> None:
    """Export :class:`GreedyStep` and compile it into ``path`` (one row; the cache's room,
    positions, the source and the output so far dynamic)."""
    from torch.export import Dim

    args, T = _example(model, 4, 19), Dim("T", min=1, max=8192)
    dims = {**step_dims(model, args, {0: T}), "chosen": {0: T}, "limits": None}
    compiled.compile_into(GreedyStep(model), args, dims, path, made_for, compiled.LONE_CONFIGS)


def self_check(model, loader) -> float:
    """How far the package's choice is from the eager step's under the rules, at a step
    with the 4-gram ban, with a 2-gram ban that bites and at the length limit (EOS only):
    the largest of its log-prob's difference from the eager one and the eager log-prob's
    shortfall from the eager best (0 when it picks the eager arg-max)."""
    worst, arch = 0.0, model.arch
    for ngram, max_len in ((4, 19), (2, 19), (4, 5)):
        tokens, bufs, layouts, pos, out, chosen, limits = _example(model, ngram, max_len)
        decoding = DecodingConfig(no_repeat_ngram_size=ngram)
        hidden = compiled.BufferStep(model)(tokens, bufs, layouts, pos)[:, 0]
        want = torch.log_softmax(model.project(hidden).float(), dim=-1)
        want = constrain(want, 5, torch.tensor([max_len]), decoding, arch, False, out[None, :5])[0]
        prefix = out.clone()
        tok = loader.boxed_run([*compiled.flat_inputs(tokens, bufs, layouts, pos), out, chosen,
                                limits])[0]
        got = want[int(tok[0])]
        if not (out[5] == tok[0] and int(limits[0]) == 6 and out[:5].equal(prefix[:5])):
            return float("inf")  # the bookkeeping in place is wrong
        worst = max(worst, (chosen[5] - got).abs().item(), (want.max() - got).item())
    return worst


class CompiledGreedy:
    """The package for a model with a compiled step, made or loaded on first use; :meth:`run`
    gives None where it does not apply (then the search goes step by step as before)."""

    def __init__(self, step: compiled.CompiledStep):
        self.step = step
        self.loader = None
        self.failed = False

    def path(self) -> Path:
        digest = hashlib.sha256(f"{self.step.key} greedy {compiled.lone_tag()}".encode()).hexdigest()
        return compiled.cache_dir() / f"greedy-{digest[:32]}.pt2"

    def made_for(self) -> dict:
        return {"key": self.step.key, "search": "greedy", "sentences": 1}

    def prepare(self, model) -> None:
        """Make or load the package now (a server does it at start, not inside a request)."""
        if self.loader is not None or self.failed:
            return
        try:
            self.loader = compiled.load_or_compile(
                self.path(), self.made_for(), "one sentence's greedy step for this model",
                lambda path: make(model, path, self.made_for()),
                lambda loader: self_check(model, loader))
        except Exception as e:  # noqa: BLE001 - any failure: the step-by-step search, one note
            self.failed = True
            compiled.failed("the compiled greedy step", e, "searching as before")

    def applies(self, model, src: Tensor, decoding: DecodingConfig) -> bool:
        return (not self.failed and src.shape[0] == 1 and src.device.type == "cpu"
                and model.inference.shortlist is None
                and decoding.no_repeat_ngram_size <= NGRAM_MAX)

    def run(self, model, src: Tensor, decoding: DecodingConfig, first: Tensor | None):
        """``src (1, S)`` -> ids ``(1, T)`` (EOS then pad), score ``(1,)`` and length ``(1,)``
        as ``search._single_path`` returns them, or None (search step by step)."""
        if not self.applies(model, src, decoding):
            return None
        if self.loader is None and self.step.build is None:  # a server builds it beside
            self.prepare(model)
        if self.loader is None:
            return None
        arch, attn = model.arch, model.decoder.layers[0].self_attn
        max_len = int(max_lengths(src, decoding, arch.pad_id, arch.max_positions)[0])
        state, last = start(model, src, True, max_len + 1, first=first)
        cache, run, eos = state.cache, self.loader.boxed_run, arch.eos_id
        layouts = cache.cross_layout()  # one row: never reordered
        if layouts is None:  # a source without a key (the general layers handle it)
            return None
        out, chosen = torch.full((max_len + 1,), arch.pad_id), torch.zeros(max_len + 1)
        limits = torch.tensor([0, max_len, decoding.min_len, decoding.no_repeat_ngram_size])
        for _ in range(max_len + 1):
            cache.advance(1, attn.h, attn.d_k, attn.d_v)  # grows the buffers, counts t + 1
            last = run([*compiled.flat_inputs(last, cache.buffers, layouts,
                                              self.step.pos[: cache.length]),
                        out, chosen, limits])[0]
            if last.item() == eos:
                break
        COUNTS["sentences"] += 1
        steps = cache.length  # with EOS
        return out[None], chosen[:steps].sum().view(1), torch.tensor([steps])


def enable(model) -> bool:
    """What ``--compile`` gives a float32 CPU model: the compiled decoder step
    (``compiled.enable``), the compiled encoder, one sentence's source side, this greedy
    step and one sentence's beam scoring (``compiled_beam``); False, with
    ``compiled.enable``'s note, without a C++ compiler."""
    if not compiled.enable(model):
        return False
    compiled_encoder.enable(model)
    compiled_source.enable(model)
    model.inference.compiled_greedy = CompiledGreedy(model.inference.compiled_step)
    model.inference.compiled_beam = CompiledBeam(model.inference.compiled_step)
    return True
