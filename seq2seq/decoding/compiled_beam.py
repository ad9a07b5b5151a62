"""Beam search of one sentence with its step's scoring compiled (``--compile``): the decoder
step for the sentence's k beams, the output projection, ``log_softmax``, the output rules,
each beam's top 2k and the sentence's top 2k extensions in one AOTInductor package, one call
a step, which returns the candidates ``beam._candidates`` would.

After the one-sentence step package, a beam step of one sentence still ran ~15 operators
from Python around it (projection, ``log_softmax``, the rules, ``beam.row_topk``'s passes,
adding the beam scores, the top 2k), each over ``k x V`` floats. Here they are kernels of
the step's package (the one-sentence graph, ``compiled.BufferStep``, with these at its
end; the rules ``rules.constrain_graph`` on the k rows). The finished pool, the next beams,
the stop and the cache's reorder stay in ``beam.py``. A package per beam width, cached
beside the step's under the same key, checked at load against the eager scoring: every
candidate's score must be the eager score of its (beam, token) and the 2k scores the eager
top 2k, within ``compiled.CHECK_TOLERANCE``.

Used by ``beam.beam_search`` for one sentence, cached, on a float32 CPU model with
``--compile``, no shortlist, no step hook, no forced length and an n-gram ban of at most
``rules.NGRAM_MAX``; anything else, or any failure (said once), scores as before.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from torch import Tensor

from seq2seq.config import DecodingConfig
from seq2seq.decoding.rules import NEG_INF, NGRAM_MAX, constrain, constrain_graph
from seq2seq.model.inference import compiled

COUNTS = {"steps": 0}  # beam steps this process scored through a package (tests)


class ScoringStep(compiled.BufferStep):
    """One sentence's step graph (``BufferStep``, ``lone``) with what scoring needs at its
    end: the output weight as a ``(d_model, V)`` copy (a row's product then streams along
    V), its bias, and the never-output mask (``rules.never_output``: 0 or ``-inf``)."""

    def __init__(self, model):
        super().__init__(model, lone=True)
        arch = model.arch
        never = torch.zeros(arch.tgt_vocab_size)
        never[[arch.pad_id, arch.bos_id]] = NEG_INF
        self.register_buffer("never", never, persistent=False)
        layer = model.output
        self.register_buffer("w_t", layer.weight.detach().t().contiguous(), persistent=False)
        self.register_buffer("b", torch.zeros(arch.tgt_vocab_size) if layer.bias is None
                             else layer.bias.detach().clone(), persistent=False)

    def log_probs(self, tokens, bufs, layouts, pos, limits, out) -> Tensor:
        """The rows' next-token log-probs ``(R, V)`` under the rules (``limits`` = t,
        max_len, min_len, n-gram size; ``out`` the rows' outputs so far)."""
        h = super().forward(tokens, bufs, layouts, pos)[:, 0]  # (R, d_model)
        lprobs = torch.log_softmax(torch.addmm(self.b, h, self.w_t), dim=-1)
        return constrain_graph(lprobs, limits[0], out, limits[1], limits[2], limits[3],
                               self.never, self.model.arch.eos_id)


def step_dims(model, args: tuple, out: dict) -> dict:
    """The dynamic dimensions of a scoring step's export: the cache's room, positions and
    the source, as the step package's, and ``out``'s (the outputs so far)."""
    from torch.export import Dim

    C, S = Dim("C", min=1, max=8192), Dim("S", min=1, max=8192)
    P1 = Dim("P1", min=1, max=model.tgt_embed.positions.shape[0])
    return {"tokens": None, "bufs": [({2: C}, {2: C})] * len(args[1]),
            "layouts": [({2: S}, {1: S}, {2: S})] * len(args[2]), "pos": {0: P1},
            "out": out}


class BeamStep(ScoringStep):
    """``BufferStep``'s inputs for the k rows of one sentence, their outputs so far
    ``out (k, T)``, their scores ``(k,)`` and ``limits (4,)`` = t, max_len, min_len, n-gram
    size -> the sentence's top ``2k`` extensions: scores ``(2k,)`` (best first), the beam
    each extends ``(2k,)`` and its token ``(2k,)``."""

    def forward(self, tokens, bufs, layouts, pos, out, scores, limits):
        lprobs = self.log_probs(tokens, bufs, layouts, pos, limits, out)  # (k, V)
        k, V = lprobs.shape
        C = min(2 * k, V)
        top, tok = lprobs.topk(C, dim=1)  # each beam's best C, as beam._row_tops
        total, idx = (top + scores[:, None]).view(-1).topk(min(2 * k, k * C))
        return total, torch.div(idx, C, rounding_mode="floor"), tok.view(-1).index_select(0, idx)


def _example(model, k: int, ngram: int, max_len: int):
    """:class:`BeamStep`'s inputs at step 5 of one random sentence's ``k`` beams, whose
    outputs so far repeat two tokens (``x y x y x``: a 2-gram ban bites)."""
    tokens, bufs, layouts, pos = compiled.step_example(model, k, 1)
    out = torch.full((k, max(max_len, 5) + 1), model.arch.pad_id)
    out[:, :5] = torch.tensor([7, 9, 7, 9, 7])
    out[1:, 4] = torch.arange(10, 9 + k)  # the other beams end otherwise
    return (tokens, bufs, layouts, pos, out, -torch.arange(k, dtype=torch.float32),
            torch.tensor([5, max_len, 0, ngram]))


def make(model, k: int, path: Path, made_for: dict) -> None:
    """Export :class:`BeamStep` for ``k`` beams and compile it into ``path`` (the cache's
    room, positions, the source and the outputs so far dynamic)."""
    from torch.export import Dim

    args = _example(model, k, 4, 19)
    dims = {**step_dims(model, args, {1: Dim("T", min=1, max=8192)}), "scores": None,
            "limits": None}
    compiled.compile_into(BeamStep(model), args, dims, path, made_for, compiled.LONE_CONFIGS)


def self_check(model, loader, k: int) -> float:
    """How far the package's candidates are from the eager scoring, with the 4-gram ban,
    with a 2-gram ban that bites and at the length limit: the largest difference between a
    candidate's score and the eager score of its (beam, token), and between the 2k scores
    and the eager top 2k (finite ones; inf where finiteness differs)."""
    worst, arch = 0.0, model.arch
    for ngram, max_len in ((4, 19), (2, 19), (4, 5)):
        tokens, bufs, layouts, pos, out, scores, limits = _example(model, k, ngram, max_len)
        hidden = compiled.BufferStep(model)(tokens, bufs, layouts, pos)[:, 0]
        want = torch.log_softmax(model.project(hidden).float(), dim=-1)
        want = constrain(want, 5, torch.full((k,), max_len), DecodingConfig(
            no_repeat_ngram_size=ngram), arch, False, out[:, :5]) + scores[:, None]
        got, origin, tok = loader.boxed_run([*compiled.flat_inputs(tokens, bufs, layouts, pos),
                                             out, scores, limits])
        top = want.view(-1).topk(got.shape[0]).values
        for a, b in ((got, want[origin, tok]), (got, top)):
            if not torch.equal(a.isfinite(), b.isfinite()):
                return float("inf")
            finite = a.isfinite()
            worst = max(worst, (a[finite] - b[finite]).abs().max().item() if finite.any() else 0.0)
    return worst


class CompiledBeam:
    """A package per beam width for a model with a compiled step, made or loaded on first
    use; :meth:`candidates` gives None where it does not apply (then beam.py scores)."""

    def __init__(self, step: compiled.CompiledStep):
        self.step = step
        self.loaders: dict[int, object] = {}
        self.failed = False

    def path(self, k: int) -> Path:
        digest = hashlib.sha256(f"{self.step.key} beam {k} {compiled.lone_tag()}".encode())
        return compiled.cache_dir() / f"beam-{digest.hexdigest()[:32]}.pt2"

    def made_for(self, k: int) -> dict:
        return {"key": self.step.key, "search": "beam", "group": k, "sentences": 1}

    def prepare(self, model, k: int) -> None:
        """Make or load ``k``'s package now (a server does it at start, not in a request)."""
        if k in self.loaders or self.failed:
            return
        try:
            self.loaders[k] = compiled.load_or_compile(
                self.path(k), self.made_for(k), f"one sentence's beam-{k} scoring for this model",
                lambda path: make(model, k, path, self.made_for(k)),
                lambda loader: self_check(model, loader, k))
        except Exception as e:  # noqa: BLE001 - any failure: beam.py's scoring, one note
            self.failed = True
            compiled.failed("the compiled beam scoring", e, "scoring as before")

    def applies(self, model, src: Tensor, decoding: DecodingConfig) -> bool:
        return (not self.failed and src.shape[0] == 1 and src.device.type == "cpu"
                and model.inference.shortlist is None
                and decoding.no_repeat_ngram_size <= NGRAM_MAX)

    def scorer(self, model, k: int):
        """``k``'s loader, made or loaded now if a server is not building it; None: none."""
        if k not in self.loaders and self.step.build is None:
            self.prepare(model, k)
        return self.loaders.get(k)

    def candidates(self, model, loader, cache, last: Tensor, out: Tensor, scores: Tensor,
                   limits: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One step of the sentence's ``k`` rows in ``cache`` fed ``last (k,)``: its top 2k
        extensions' scores, beams and tokens ``(2k,)`` each (``limits[0]`` is the step)."""
        attn = model.decoder.layers[0].self_attn
        layouts = cache.cross_layout()
        cache.advance(1, attn.h, attn.d_k, attn.d_v)  # grows the buffers, counts P + 1
        COUNTS["steps"] += 1
        return loader.boxed_run([*compiled.flat_inputs(last, cache.buffers, layouts,
                                                       self.step.pos[: cache.length]),
                                 out, scores, limits])
