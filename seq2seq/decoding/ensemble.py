"""Ensemble decoding: several models with one vocabulary decode side by side as one.

Each step's log-probs are the mean of the members' log-softmax outputs,
``(1/n) sum_m log p_m(y | x, y_<t)``, as Marian combines its ensembles (with weights 1).
fairseq averages the probabilities instead, ``log (1/n) sum_m p_m``; the two agree when the
members agree and differ in how much one confident member counts. A mean of log-probs is
not normalized over the vocabulary, and is not renormalized here: scores are the members'
mean total log-prob, so an ensemble of one model scores exactly as that model.

Every search runs unchanged on an :class:`Ensemble`: ``decoding.state.start`` gives it
:class:`EnsembleRows`, one ``DecoderRows`` per member, each with its own encoder memory and
``DecoderCache`` (or its own uncached prefix), all reordered together. Members may differ
in architecture (widths, layers, positions) but not in vocabulary or special ids. Attention
weights (``need_attention``) are the first member's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from seq2seq.model import Attentions, Seq2Seq

# What members must share: one vocabulary on each side and the same special ids.
SHARED_FIELDS = ("src_vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id")


def check_members(members: Sequence[Seq2Seq], names: Sequence[str]) -> None:
    """``ValueError`` naming both members when one differs from the first in
    :data:`SHARED_FIELDS`."""
    first = members[0].arch
    for name, model in zip(names[1:], members[1:]):
        for field in SHARED_FIELDS:
            want, got = getattr(first, field), getattr(model.arch, field)
            if got != want:
                raise ValueError(f"ensemble: {name} has {field} {got} but {names[0]} has {want}: "
                                 "members must share one vocabulary and its special ids")


class Ensemble(nn.Module):
    """Models decoding as one (see the module docstring). ``names`` (e.g. file names) are
    what errors call the members.

    ``arch`` is what the searches read of a model: the first member's config with the
    smallest member's ``max_positions`` (vocabulary sizes and special ids are shared), so
    no member is asked for a position it does not have. It describes no single network."""

    def __init__(self, members: Sequence[Seq2Seq], names: Sequence[str] | None = None):
        super().__init__()
        if not members:
            raise ValueError("ensemble: no models given")
        names = [f"model {i}" for i in range(len(members))] if names is None else list(names)
        check_members(members, names)
        self.members = nn.ModuleList(members)
        self.arch = dataclasses.replace(
            members[0].arch, max_positions=min(m.arch.max_positions for m in members))

    def attentions(self, src: Tensor, tgt_in: Tensor) -> Attentions:
        """The first member's attention weights (an ensemble has no one set of its own)."""
        return self.members[0].attentions(src, tgt_in)


class EnsembleRows:
    """The decoder rows of every member of an ensemble, behind ``DecoderRows``' interface
    (``step``, ``hidden``, ``log_probs``, ``select``). ``hidden`` is the members' last
    states side by side, ``(R, sum of d_model)``, so a search can cut it into blocks of
    rows as it does one model's."""

    def __init__(self, members: list):  # list[DecoderRows], one per ensemble member
        self.members = members
        self.widths = [rows.model.arch.d_model for rows in members]

    def step(self, tokens: Tensor) -> Tensor:
        """Feed ``tokens (R,)``: the ensemble's next-token log-probs ``(R, V)``."""
        return self.log_probs(self.hidden(tokens))

    def hidden(self, tokens: Tensor) -> Tensor:
        """Feed ``tokens (R,)`` to every member: their last states ``(R, sum d_model)``."""
        return torch.cat([rows.hidden(tokens) for rows in self.members], dim=1)

    def log_probs(self, hidden: Tensor) -> Tensor:
        """The mean of the members' log-softmax outputs ``(r, V)`` for states
        ``hidden (r, sum d_model)``, summed in place into the first member's buffer."""
        parts = hidden.split(self.widths, dim=1)
        out = self.members[0].log_probs(parts[0])
        for rows, part in zip(self.members[1:], parts[1:]):
            out += rows.log_probs(part)
        return out.div_(len(self.members))

    def select(self, rows: Tensor, cross: bool = True) -> None:
        """Keep/reorder rows ``(R',)`` of every member together."""
        for member in self.members:
            member.select(rows, cross)
