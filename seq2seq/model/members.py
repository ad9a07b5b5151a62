"""A module's submodules and parameters, listed once and listed again only when some module
registers a new parameter or submodule (torch's global registration hooks count those).

Why: walking a Tiny model's ~160 modules costs ~0.15 ms and its decoder's parameters ~0.3
ms (1 thread, 2-core AMD EPYC with AVX2), per call. A one-sentence translation takes ~12 ms, and made
both walks on every call: to switch dropout off (``Translator``) and to see whether a weight
changed (``step.StepPlan``). The lists stay valid as long as no parameter or submodule is
assigned anywhere (``module.weight = nn.Parameter(...)``, ``module.layer = nn.Linear(...)``:
both register); in-place updates (training, ``load_state_dict``) keep the same tensors.
"""

from __future__ import annotations

from torch import Tensor, nn

_registrations = [0]  # parameters and submodules registered in this process, by any module


def _count(*_args) -> None:
    _registrations[0] += 1


nn.modules.module.register_module_parameter_registration_hook(_count)
nn.modules.module.register_module_module_registration_hook(_count)


class Members:
    """``module.modules()`` and ``module.parameters()`` of one module, cached."""

    def __init__(self, module: nn.Module):
        self.module = module
        self.seen = -1
        self._modules: list[nn.Module] = []
        self._parameters: list[Tensor] = []

    def _fresh(self) -> None:
        if self.seen != _registrations[0]:
            self._modules = list(self.module.modules())
            self._parameters = list(self.module.parameters())
            self.seen = _registrations[0]

    def modules(self) -> list[nn.Module]:
        self._fresh()
        return self._modules

    def parameters(self) -> list[Tensor]:
        self._fresh()
        return self._parameters
