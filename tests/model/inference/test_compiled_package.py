"""What a compiled package is made with, without a C++ build: Inductor's configs reach it as
a copy, so the package key of every later model in the process stays what a fresh process
computes (a server's compiling child computes it fresh)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch._inductor

import seq2seq.model.inference.compiled as compiled


def test_inductor_cannot_change_the_package_key(monkeypatch, tmp_path):
    given = []

    def package(ep, package_path, inductor_configs):
        inductor_configs["aot_inductor.package"] = True  # as Inductor does to what it gets
        given.append(inductor_configs)
        Path(package_path).write_bytes(b"package")

    monkeypatch.setattr(torch.export, "export", lambda *args, **kwargs: "exported")
    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", package)
    before = dict(compiled.INDUCTOR_CONFIGS)
    compiled.compile_into(torch.nn.Identity(), (), {}, tmp_path / "p.pt2", {"key": "k"})
    assert given and given[0]["max_autotune"] is True  # the settings did reach Inductor
    assert dict(compiled.INDUCTOR_CONFIGS) == before
    with pytest.raises(TypeError):
        compiled.INDUCTOR_CONFIGS["aot_inductor.package"] = True  # read-only
