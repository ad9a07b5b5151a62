"""The output projection at inference: decoder states onto the target vocabulary, decided in
one place.

:func:`project` is the decision every caller takes (``Seq2Seq.project``: ``decode`` and
every search; ``Seq2Seq.forward``, without a prepacked copy; a shortlist's cut rows): the
compute type's kernel where the layer has one (``compute``), else the prepacked weight where
that computes the same function (``packed.PackedProjection.applies``), else ``F.linear``. :func:`log_probs` is
a search step's: over the whole vocabulary, or over a batch's shortlist candidates
(``shortlist.Restricted``) with ``-inf`` elsewhere.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seq2seq.model.inference.compute import Weights
from seq2seq.model.inference.packed import PackedProjection
from seq2seq.model.inference.shortlist import Restricted
from seq2seq.model.layers import Linear, linear
from seq2seq.profiling import phase


def project(layer: Linear | Weights, hidden: Tensor,
            packed: PackedProjection | None = None) -> Tensor:
    """Logits ``(..., V)`` of decoder states ``hidden (..., d_model)`` through ``layer``:
    its kernel, else ``packed`` where that is the same function, else ``F.linear``."""
    if layer.kernel is None and packed is not None and packed.applies(layer.weight, hidden):
        return packed(layer, hidden)
    return linear(layer, hidden)


def log_probs(model, hidden: Tensor, restricted: Restricted | None = None) -> Tensor:
    """Log-probs ``(r, V)`` of ``model``'s (a ``Seq2Seq``) decoder states ``hidden (r,
    d_model)``, normalized in place (no second r x V buffer); with ``restricted``, over its
    candidates only (``-inf`` elsewhere)."""
    layer, packed = ((model.output, model.inference.packed_output) if restricted is None
                     else (restricted.layer, restricted.packed))
    with phase("seq2seq.output_projection"):  # the matmul alone, as the profile's label says
        logits = project(layer, hidden, packed).float()
    torch.log_softmax(logits, dim=-1, out=logits)
    return logits if restricted is None else restricted.widen(logits)
