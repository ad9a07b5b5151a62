"""The one-token decoder step compiled ahead of time (AOTInductor), opt-in (``--compile``).

``inference.step``'s maths, restructured so that one graph serves every step: each layer's
whole K/V cache buffers ``(R, H, C, d)`` go in and the ``P + 1`` filled positions are sliced
inside (their count is the length of ``pos``), so the rows, memory rows, capacity, cache
length and source length are dynamic dimensions. It is ``torch.export``-ed with the model's
weights and compiled by ``torch._inductor.aoti_compile_and_package`` into two packages per
(weights, torch version, CPU instruction sets, group size), one for one sentence (its rows
fixed, :data:`LONE_CONFIGS`) and one for any number of them, cached on disk
(:func:`cache_dir`), and run through the C++ loader (``AOTIModelPackageLoader.boxed_run``:
``aoti_load_package`` probes the CPU with compilers, seconds). Greedy decoding has group 1,
beam search group ``k``: each gets its package on first use. Float32 on CPU only. A cached
package runs only if its manifest (model digest, torch, CPU, group, the file's sha256)
matches what is asked, else it is compiled again; a loaded package is checked against the
eager step on one and on three sentences before it decodes. Anything that fails (no C++
compiler, export, compiling, loading, the check) leaves eager decoding and one note on
stderr. docs/speed.md "A compiled decoder step" has figures.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.fields import FieldWarning
from seq2seq.files import new_file_mode, write_atomic
from seq2seq.machine import cache_home, cpu_flags
from seq2seq.model.cache import DecoderCache
from seq2seq.model.inference.step import decoder_step, layer_step, projections

COUNTS = {"compiled": 0, "loaded": 0, "steps": 0, "lone": 0}  # this process's, for tests and notes
ISA = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
       "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "neon",
       "asimd", "sve")
# A package's step against the eager one at load (states after the final norm, ~1): the
# compiled kernels sum in another order (~3e-6 apart); a wrong graph or input is off by ~1.
CHECK_TOLERANCE = 1e-4
# Decoder rows up to which the compiled step runs; more go to the eager step, faster there
# with 2 threads (ms a step, eager / compiled, 2-core AMD EPYC with AVX2, De->En Tiny, P 8):
# 1 row 0.61 / 0.15, 16 rows 1.14 / 0.56, 32 rows 1.52 / 1.14, 64 rows 2.44 / 2.88, 128 rows
# 4.90 / 5.21 (1 thread: compiled ahead at every size, 128 rows 7.05 / 6.74).
MAX_ROWS = 32
# How Inductor builds the package (part of its cache key). Its C++ GEMM template, chosen per
# matmul against ATen's by timing both at compile time, and no attention pattern rewritten to
# SDPA (whose flash kernel costs more than the step's own bmm at one query): the step at
# 1 / 5 / 64 / 200 decoder rows took 95 / 227 / 2,227 / 7,835 us against 227 / 452 / 2,604 /
# 8,335 us with Inductor's defaults (1 thread, 2-core AMD EPYC with AVX2, De->En Tiny).
# Read-only: Inductor adds its own entries to the dict it is given, which changed every
# later package key of the process (a server's child then made packages it never found).
INDUCTOR_CONFIGS = MappingProxyType({
    "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN", "pattern_matcher": False,
    # the timings of that choice are Inductor's business, not the user's stderr
    "autotune_num_choices_displayed": 0, "max_autotune_report_choices_stats": False})
# One sentence (one memory row: greedy's 1 decoder row, beam's k) has its own package, its
# rows fixed and its kernels single-threaded: with so little work a parallel region costs
# more than it shares out, and with fixed shapes Inductor fuses every GEMM with its epilogue
# (bias, ReLU, norm) in its own template. The step of one sentence, greedy, took 93-107 us
# against 223-358 us in the batch package, whatever torch's thread count (1 or 2; 2-core
# AMD EPYC with AVX2, De->En Tiny). The output projection stays outside, on torch's threads.
LONE_CONFIGS = MappingProxyType({**INDUCTOR_CONFIGS, "cpp.threads": 1})
# The one-sentence graphs' revision: a package cached from an earlier graph (it passes the
# check, being correct) is made again instead of running slower than the current one.
LONE_REVISION = 2


def lone_tag() -> str:
    """What the one-sentence packages' cache keys add to the step's: their configs and
    graph revision."""
    return f"lone {json.dumps(dict(LONE_CONFIGS), sort_keys=True)} revision {LONE_REVISION}"


def _write_last(K: Tensor, V: Tensor):
    """``step.self_attention``'s ``write`` for views ``(R, H, P+1, d)`` over the buffers:
    the new K/V go into their last position, inside the graph."""
    def write(k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:  # (R, H, 1, d) each
        K.select(2, -1).copy_(k[:, :, 0])
        V.select(2, -1).copy_(v[:, :, 0])
        return K, V
    return write


def pure_step(model, plan, tokens: Tensor, kv, layouts, lone: bool = False) -> Tensor:
    """``tokens (R,)``, per layer K/V views ``(R, H, P+1, d)`` and the cross layout ->
    ``(R, 1, d_model)``; no Python state read but shapes, so one graph for every P.
    ``plan``: each layer's ``step.Projections`` through ``layers.linear`` (a graph holds
    no prepacked oneDNN weight; Inductor lays the weights out itself); ``lone``: a
    one-sentence package's graph (``step.cross_attention``)."""
    emb, P = model.tgt_embed, kv[0][0].shape[2] - 1
    x = torch.add(emb.positions.select(0, P), F.embedding(tokens, emb.tokens.weight),
                  alpha=emb.scale)
    for layer, proj, (K, V), layout in zip(model.decoder.layers, plan, kv, layouts):
        x = layer_step(layer, proj, x, _write_last(K, V), layout, lone)
    return model.decoder.final_norm(x)[:, None]


class BufferStep(torch.nn.Module):
    """:func:`pure_step` over each layer's whole K/V buffers ``(R, H, C, d)``, the ``P + 1``
    positions sliced inside: views passed in would carry the capacity C in their strides
    only, which export specializes. ``lone``: the graph of one sentence's package."""

    def __init__(self, model, lone: bool = False):
        super().__init__()
        self.model, self.lone = model, lone
        with torch.no_grad():
            self.plan = [projections(layer, packed=False) for layer in model.decoder.layers]

    def forward(self, tokens, bufs, layouts, pos):
        P1 = pos.shape[0]
        return pure_step(self.model, self.plan, tokens,
                         [(k[:, :, :P1], v[:, :, :P1]) for k, v in bufs],
                         layouts, self.lone)


def cpp_compiler() -> str | None:
    """The C++ compiler Inductor would look for (``$CXX``, g++, c++, clang++), if installed;
    not Inductor's own lookup, whose import costs a second of every run."""
    names = [os.environ.get("CXX"), "g++", "c++", "clang++"]
    return next((path for path in map(shutil.which, filter(None, names)) if path), None)


def cache_dir() -> Path:
    """``compiled/`` in the cache home (``machine.cache_home``)."""
    return cache_home() / "compiled"


def cpu_isa() -> str:
    """The instruction sets of this CPU that compiled code may use (its flags line's)."""
    flags = cpu_flags()
    return " ".join([platform.machine(), *(f for f in ISA if f in flags)])


def weights_digest(model) -> str:
    """sha256 of the model's state (names, dtypes, shapes, bytes)."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        t = t.detach().cpu().contiguous().reshape(-1)
        h.update(f"{name} {t.dtype} {tuple(t.shape)}\n".encode())
        h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def note(msg: str) -> None:
    """One stderr line, named by the command (``seq2seq-translate``, or ``python -m``'s)."""
    argv0 = Path(sys.argv[0] if sys.argv and sys.argv[0] else "x")
    prog = argv0.name if argv0.name.startswith("seq2seq-") else (
        f"seq2seq-{argv0.stem}" if argv0.parent.name == "cli" else "seq2seq")
    print(f"{prog}: {msg}", file=sys.stderr, flush=True)


def step_example(model, group: int, sentences: int = 3):
    """``BufferStep``'s inputs after 5 steps of random sources of 11 tokens, laid out by a
    real cache. For export, 3 sentences: sizes other than 0 and 1 (specialized) and apart
    from each other (equal sizes may be unified); :func:`self_check` also takes 1."""
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(4, model.arch.src_vocab_size, (sentences, 11), generator=gen)
    mask = model.source_mask(src)
    cache = model.init_cache(model.encode(src, mask), mask, capacity=64, group=group)
    R = cache.batch_size
    for _ in range(5):
        decoder_step(model, torch.randint(4, model.arch.tgt_vocab_size, (R,), generator=gen), cache)
    attn = model.decoder.layers[0].self_attn
    layouts = cache.cross_layout()
    cache.advance(1, attn.h, attn.d_k, attn.d_v)
    return (torch.zeros(R, dtype=torch.long), cache.buffers, layouts, torch.empty(cache.length))


def flat_inputs(tokens: Tensor, bufs, layouts, pos: Tensor) -> list[Tensor]:
    """``BufferStep``'s inputs in the export's order, flattened (the loader's call)."""
    return [tokens.contiguous(), *(t for kv in bufs for t in kv),
            *(t for layout in layouts for t in layout), pos]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def manifest_path(path: Path) -> Path:
    """What a package was made for, beside it: key, group and the package's sha256."""
    return path.with_suffix(".json")


def package(model, group: int, path: Path, made_for: dict, lone: bool = False) -> None:
    """:class:`BufferStep` for ``group`` rows per memory row, compiled into ``path``; ``lone``:
    for one memory row only (static rows, :data:`LONE_CONFIGS`)."""
    from torch.export import Dim

    args = step_example(model, group, 1 if lone else 3)
    M, C, S = (Dim(n, min=1, max=8192) for n in ("M", "C", "S"))
    P1 = Dim("P1", min=1, max=model.tgt_embed.positions.shape[0])  # positional table rows
    H = model.decoder.layers[0].cross_attn.h
    R, HM = (Dim.STATIC,) * 2 if lone else (M if group == 1 else group * M, H * M)
    dims = {"tokens": {0: R}, "bufs": [({0: R, 2: C}, {0: R, 2: C})] * len(args[1]),
            "layouts": [({0: HM, 2: S}, {0: HM, 1: S}, {0: HM, 2: S})] * len(args[2]),
            "pos": {0: P1}}
    compile_into(BufferStep(model, lone), args, dims, path, made_for,
                 LONE_CONFIGS if lone else INDUCTOR_CONFIGS)


def compile_into(module: torch.nn.Module, args: tuple, dims: dict, path: Path,
                 made_for: dict, configs=INDUCTOR_CONFIGS) -> None:
    """Export ``module`` on ``args`` (``dims``: its dynamic dimensions) and compile it into
    ``path``, written atomically, then its manifest (``made_for`` and the file's sha256): a
    crash between the two leaves a package whose manifest does not match it, made again."""
    import torch._inductor

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".pt2")
    os.close(fd)
    _unfinished.add(tmp)
    try:
        with warnings.catch_warnings():  # torch's own deprecations, not the user's business
            warnings.simplefilter("ignore")
            ep = torch.export.export(module, args, dynamic_shapes=dims, strict=False)
            torch._inductor.aoti_compile_and_package(ep, package_path=tmp,
                                                     inductor_configs=dict(configs))
        os.chmod(tmp, new_file_mode())  # mkstemp's is owner-only
        made_for = {**made_for, "sha256": file_sha256(Path(tmp))}
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
        _unfinished.discard(tmp)
    write_atomic(manifest_path(path), lambda f: f.write(json.dumps(made_for).encode()))
    COUNTS["compiled"] += 1


# a build in a background thread ends with the process, past its own clean-up: its
# half-written package is removed at exit instead
_unfinished: set[str] = set()
atexit.register(lambda: [Path(tmp).unlink(missing_ok=True) for tmp in list(_unfinished)])


def stale(path: Path, made_for: dict) -> str | None:
    """Why the package at ``path`` may not run for ``made_for`` (None: it may): its
    manifest names another model, torch, CPU, beam width or sentence count (one sentence's
    package has fixed shapes), or its bytes are not those
    compiled (truncated, changed, copied over). Loading such a file can crash natively."""
    try:
        manifest = json.loads(manifest_path(path).read_text())
    except (OSError, ValueError):
        return "has no readable manifest"
    if not isinstance(manifest, dict) or {k: v for k, v in manifest.items()
                                          if k != "sha256"} != made_for:
        return "was made for another model, torch version, CPU or beam width"
    if manifest.get("sha256") != file_sha256(path):
        return "is not the file that was compiled (truncated or changed)"
    return None


def self_check(model, loader, group: int, sentences: tuple[int, ...] = (1, 3)) -> float:
    """The largest difference between the package's step and the eager one on one and on
    three sentences (a real cache's inputs, so strides as decoding gives them)."""
    worst = 0.0
    for n in sentences:
        tokens, bufs, layouts, pos = step_example(model, group, n)
        want = BufferStep(model)(tokens, bufs, layouts, pos)
        got = loader.boxed_run(flat_inputs(tokens, bufs, layouts, pos))[0]
        if got.shape != want.shape:
            return float("inf")
        worst = max(worst, (got - want).abs().max().item())
    return worst


def load_or_compile(path: Path, made_for: dict, what: str, make, check):
    """The package at ``path`` loaded (made first by ``make(path)`` if missing or
    :func:`stale`), once ``check(loader)``, its largest difference from the eager
    computation, is within ``CHECK_TOLERANCE``; raises otherwise."""
    why = stale(path, made_for) if path.exists() else None
    if why or not path.exists():
        if why:
            warnings.warn(FieldWarning("{compile}: the cached package {path} {why}; compiling it "
                                       "again", path=path, why=why), stacklevel=3)
        note(f"compiling {what} once (a C++ build: ~30 s on 2 idle cores, minutes on a busy "
             f"machine), cached in {path.parent}")
        start = time.perf_counter()
        with torch.no_grad():
            make(path)
        note(f"compiled in {time.perf_counter() - start:.0f} s")
    loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", False, 1, -1)
    with torch.no_grad():
        worst = check(loader)
    if not worst <= CHECK_TOLERANCE:
        raise RuntimeError(f"it differs from the eager one by {worst:.2g} "
                           f"(more than {CHECK_TOLERANCE:g})")
    COUNTS["loaded"] += 1
    return loader


def failed(what: str, e: Exception, instead: str) -> None:
    """One warning: ``what`` failed, ``instead`` from now on."""
    why = " ".join(str(e).split())[:200]
    warnings.warn(FieldWarning("{compile}: " + what + " failed ({kind}: {why}); " + instead,
                               kind=type(e).__name__, why=why), stacklevel=4)


class CompiledStep:
    """``decoder_step``'s signature over two packages per group size, made or loaded on
    first use: one for one sentence (:data:`LONE_CONFIGS`), one for any number of them;
    ``None`` from a call: decode eagerly (it failed once, said so once)."""

    def __init__(self, model):
        self.key = " ".join([weights_digest(model), torch.__version__, cpu_isa(),
                             json.dumps(dict(INDUCTOR_CONFIGS), sort_keys=True)])
        self.loaders: dict[int, object] = {}  # group -> any number of sentences' package
        self.lone: dict[int, object] = {}  # group -> one sentence's (set before loaders')
        self.failed = False
        # set (background.py): a call without its package asks for it and decodes eagerly,
        # instead of compiling inside the call
        self.build: Callable[[int], None] | None = None
        self.pos = torch.empty(model.tgt_embed.positions.shape[0])  # its first P+1: a size

    def path(self, group: int, lone: bool = False) -> Path:
        extra = f" {lone_tag()}" if lone else ""
        digest = hashlib.sha256(f"{self.key} group {group}{extra}".encode()).hexdigest()[:32]
        return cache_dir() / f"step-{digest}.pt2"

    def made_for(self, group: int, lone: bool = False) -> dict:
        return {"key": self.key, "group": group, **({"sentences": 1} if lone else {})}

    def parts(self, group: int) -> list[tuple[Path, dict]]:
        """``group``'s packages, one sentence's first: each one's path and manifest entries."""
        return [(self.path(group, lone), self.made_for(group, lone)) for lone in (True, False)]

    def prepare(self, model, group: int):
        """``group``'s packages made or loaded now if not yet (a server does it at start, not
        inside a request); returns the any-number one's loader, None: decode eagerly."""
        if group not in self.loaders and not self.failed:
            self.lone[group] = self._load(model, group, lone=True)
            self.loaders[group] = None if self.failed else self._load(model, group, lone=False)
        return self.loaders.get(group)

    def _load(self, model, group: int, lone: bool):
        what = ("greedy search" if group == 1 else f"beam width {group}") + (
            ", one sentence" if lone else "")
        path, made_for = self.path(group, lone), self.made_for(group, lone)
        try:
            return load_or_compile(path, made_for, f"the decoder step for this model and {what}",
                                   lambda path: package(model, group, path, made_for, lone),
                                   lambda loader: self_check(model, loader, group,
                                                            (1,) if lone else (1, 3)))
        except Exception as e:  # noqa: BLE001 - any failure: eager decoding, one note
            self.failed = True
            failed("the compiled decoder step", e, "decoding eagerly")
            return None

    def __call__(self, model, tokens: Tensor, cache: DecoderCache) -> Tensor | None:
        """``tokens (R,)`` -> ``(R, 1, d_model)`` as ``step.decoder_step``, or None (then the
        eager step runs: it failed, or more than ``MAX_ROWS`` rows)."""
        if self.failed or tokens.device.type != "cpu" or tokens.shape[0] > MAX_ROWS:
            return None
        group = cache.group
        if group not in self.loaders:
            if self.build is not None:
                self.build(group)
                return None
            self.prepare(model, group)
        lone = cache.batch_size == group  # one memory row: one sentence
        loader = (self.lone if lone else self.loaders).get(group)
        if loader is None:
            return None
        attn = model.decoder.layers[0].self_attn
        layouts = cache.cross_layout()
        cache.advance(1, attn.h, attn.d_k, attn.d_v)  # grows the buffers, counts P + 1 filled
        COUNTS["steps"] += 1
        COUNTS["lone"] += lone
        return loader.boxed_run(flat_inputs(tokens, cache.buffers, layouts,
                                            self.pos[: cache.length]))[0]


def enable(model) -> bool:
    """Give a float32 CPU ``model`` a compiled step (``model.inference.compiled_step``), used
    by ``Seq2Seq.decode_hidden``; False with one note when there is no C++ compiler. (The
    encoder: ``compiled_encoder.enable``, after this.)"""
    if cpp_compiler() is None:
        warnings.warn(FieldWarning("{compile}: no C++ compiler found (g++/clang++); decoding "
                                   "eagerly"), stacklevel=2)
        return False
    model.inference.compiled_step = CompiledStep(model)
    return True
