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

import weakref

from torch import Tensor, nn

_registrations = [0]  # parameters and submodules registered in this process, by any module


def _count(*_args) -> None:
    _registrations[0] += 1


nn.modules.module.register_module_parameter_registration_hook(_count)
nn.modules.module.register_module_module_registration_hook(_count)


class Members:
    """``module.modules()`` and ``module.parameters()`` of one module, cached."""

    def __init__(self, module: nn.Module):
        self._module = weakref.ref(module)  # weak: the shared table must not keep models alive
        self.seen = -1
        self._below: list[nn.Module] = []  # modules() less the module itself (a strong
        # reference to it from here would keep it alive through the shared table)
        self._parameters: list[Tensor] = []

    @classmethod
    def of(cls, module: nn.Module) -> Members:
        """The one ``Members`` of ``module`` in this process: a server builds a ``Translator``
        per request, and a list made per object was made per request (~2 ms a call)."""
        members = _shared.get(module)
        if members is None:
            members = _shared[module] = cls(module)
        return members

    @property
    def module(self) -> nn.Module:
        module = self._module()
        assert module is not None, "Members of a module that is gone"
        return module

    def _fresh(self) -> None:
        if self.seen != _registrations[0]:
            self._below = list(self.module.modules())[1:]
            self._parameters = list(self.module.parameters())
            self.seen = _registrations[0]

    def modules(self) -> list[nn.Module]:
        self._fresh()
        return [self.module, *self._below]

    def parameters(self) -> list[Tensor]:
        self._fresh()
        return self._parameters


_shared: weakref.WeakKeyDictionary[nn.Module, Members] = weakref.WeakKeyDictionary()
