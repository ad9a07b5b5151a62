"""``Members``: a module's submodules and parameters listed once per module, relisted when
any module registers a new one, shared by every user of the module, never keeping it alive."""

from __future__ import annotations

import gc
import weakref

from torch import nn

from seq2seq.model.members import Members


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Sequential(nn.Linear(4, 2)))


def test_lists_equal_torch_walks():
    net = _net()
    members = Members.of(net)
    assert members.modules() == list(net.modules())
    assert [id(p) for p in members.parameters()] == [id(p) for p in net.parameters()]


def test_one_listing_per_module_shared_by_its_users():
    net, other = _net(), _net()
    assert Members.of(net) is Members.of(net)
    assert Members.of(net) is not Members.of(other)


def test_relisted_after_a_registration():
    net = _net()
    members = Members.of(net)
    before = len(members.parameters())
    net[2].append(nn.Linear(2, 2))  # registers a module (and, inside it, two parameters)
    assert len(members.parameters()) == before + 2
    assert members.modules() == list(net.modules())
    net[0].weight = nn.Parameter(net[0].weight.detach().clone())  # a parameter replaced
    assert any(p is net[0].weight for p in members.parameters())


def test_does_not_keep_the_module_alive():
    net = _net()
    Members.of(net).modules()
    Members.of(net).parameters()
    gone = weakref.ref(net)
    del net
    gc.collect()
    assert gone() is None
