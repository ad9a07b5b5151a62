"""The machine this runs on, read in one place: the CPU's model name and instruction-set
flags (``/proc/cpuinfo``, read once: compute types choose kernels by them, compiled packages
are keyed by them, the benchmark prints them) and where caches live (``cache_home``: the
data cache and compiled decoder steps, never the working directory)."""

from __future__ import annotations

import functools
import os
from pathlib import Path


@functools.cache
def _cpuinfo() -> tuple[str | None, frozenset[str]]:
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, frozenset()

    def first(*keys: str) -> str | None:
        return next((line.split(":", 1)[1].strip() for line in lines
                     if line.split(":", 1)[0].strip() in keys and ":" in line), None)
    # x86 names them "model name" and "flags"; ARM "CPU part"-style lines and "Features"
    return first("model name"), frozenset((first("flags", "Features") or "").split())


def cpu_model() -> str | None:
    """The CPU's model name (``lscpu``'s), None where /proc/cpuinfo does not say."""
    return _cpuinfo()[0]


def cpu_flags() -> frozenset[str]:
    """The CPU's instruction-set flags (``avx2``, ``avx512_bf16``, ``amx_int8``, ``asimd``...)."""
    return _cpuinfo()[1]


def cache_home() -> Path:
    """``$SEQ2SEQ_CACHE_DIR``, else ``$XDG_CACHE_HOME/seq2seq``, else ``~/.cache/seq2seq``."""
    if os.environ.get("SEQ2SEQ_CACHE_DIR"):
        return Path(os.environ["SEQ2SEQ_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg).expanduser() / "seq2seq"
