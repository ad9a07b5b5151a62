"""What a ``Seq2Seq`` has at inference besides its network, declared in one place.

``Seq2Seq.inference`` holds them; whatever prepares a model for inference sets these fields
and nothing else on it (``compute.prepare``, ``compiled.enable``, ``compiled_encoder.enable``,
``compiled_source.enable``, ``Translator``'s shortlist), so every reader finds them where they are declared. None of it is a weight:
state dicts, exports and training never see it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from seq2seq.model.inference.compiled import CompiledStep
from seq2seq.model.inference.compiled_encoder import CompiledEncoder
from seq2seq.model.inference.compiled_source import CompiledSource
from seq2seq.model.inference.packed import PackedProjection
from seq2seq.model.inference.shortlist import Shortlist
from seq2seq.model.inference.step import StepPlan


@dataclass
class Inference:
    """A model's inference features (plain attributes: reading one per step costs nothing)."""

    compute_type: str = "float32"  # how the linear layers multiply (compute.prepare)
    step_plan: StepPlan = field(default_factory=StepPlan)  # the one-token step's linears
    packed_output: PackedProjection = field(default_factory=PackedProjection)  # not a weight
    compiled_step: CompiledStep | None = None  # --compile (compiled.enable)
    compiled_encoder: CompiledEncoder | None = None  # --compile, small batches
    compiled_source: CompiledSource | None = None  # --compile, one sentence's encoder + cross K/V
    # --compile, one sentence's greedy search (decoding.compiled_greedy.CompiledGreedy, a
    # layer above: typed loosely)
    compiled_greedy: object | None = None
    compiled_beam: object | None = None  # --compile, one sentence's beam scoring (likewise)
    shortlist: Shortlist | None = None  # decode over each batch's candidates (shortlist.py)
