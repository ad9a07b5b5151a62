"""Checkpoint averaging: the weights of several checkpoints of one run (or one checkpoint
converted to another storage dtype) into one self-contained, checksummed checkpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from seq2seq.checkpoint import PREFIX, CheckpointError, load_checkpoint, seal
from seq2seq.files import save_atomic

STORAGE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def average(paths: list[str | os.PathLike], output: str | os.PathLike,
            dtype: str | None = None) -> dict[str, Any]:
    """Average the weights of ``paths`` (same config and tokenizers) into ``output``.

    The result keeps the metadata of the last checkpoint and drops training state, so
    it is an inference checkpoint (train from it with ``--model.init_from``).
    ``dtype`` (a key of ``STORAGE_DTYPES``) stores the floating-point weights in that
    precision, e.g. ``float16`` halves the file; :func:`build_model` computes in fp32 again.
    Everything is checked before anything is written: the inputs (:func:`check`), that they
    agree on config, tokenizers, language pair, weight names, shapes and dtypes, that every
    averaged weight fits ``dtype``'s range, and that ``output`` is none of them.
    """
    if dtype is not None and dtype not in STORAGE_DTYPES:
        raise CheckpointError(f"average: dtype must be one of {list(STORAGE_DTYPES)}, got {dtype!r}")
    if not paths:
        raise CheckpointError("average: no checkpoints given")
    _check_output(paths, Path(output))
    ckpts = [load_checkpoint(p) for p in paths]
    _check_compatible(paths, ckpts)
    states = [c["state_dict"] for c in ckpts]
    avg, done = {}, {}  # done: storage -> its average, so tied weights stay one tensor in the file
    for key, value in states[-1].items():
        if not key.startswith(PREFIX):
            continue  # not a model weight (nothing else belongs in an inference checkpoint)
        if not value.is_floating_point():
            avg[key] = value
            continue
        shared = (value.untyped_storage().data_ptr(), value.storage_offset(), value.shape)
        if shared not in done:
            store = STORAGE_DTYPES[dtype] if dtype else value.dtype
            done[shared] = _in_range(sum(s[key].double() for s in states).div(len(states)),
                                     store, key.removeprefix(PREFIX))
        avg[key] = done[shared]
    first = ckpts[-1]["seq2seq"]
    # converting one averaged checkpoint (e.g. to float16) keeps the list it came from
    sources = first.get("averaged_from") if len(paths) == 1 else None
    meta = {k: v for k, v in first.items() if k != "checksum"}
    out = seal({"seq2seq": {**meta, "averaged_from": sources or [str(p) for p in paths]},
                "state_dict": avg})
    save_atomic(out, output)
    return out


def _in_range(value: torch.Tensor, dtype: torch.dtype, key: str) -> torch.Tensor:
    """``value`` stored as ``dtype``, refused when that overflows (float16 ends at 65504):
    a file of inf weights would only be refused by every later command."""
    stored = value.to(dtype)
    if not bool(torch.isfinite(stored).all()):
        top = value.abs().max().item()
        raise CheckpointError(
            f"average: weight {key} holds values up to {top:.4g}, beyond the range of "
            f"{str(dtype).removeprefix('torch.')} (largest {torch.finfo(dtype).max:.4g}); store it "
            "as float32 or bfloat16 (--dtype); nothing was written")
    return stored


# What says which language(s) a model translates from and to: averaging models of two
# directions gives neither ("directions": a multilingual model's list of pairs).
DIRECTION_KEYS = ("src_lang", "tgt_lang", "directions")


def _pair(meta: dict[str, Any]) -> str:
    pair = f"{meta.get('src_lang')}->{meta.get('tgt_lang')}"
    return pair + (f" {meta['directions']}" if meta.get("directions") is not None else "")


def _check_output(paths: list, output: Path) -> None:
    """The output must be a writable file path and none of the inputs."""
    if output.is_dir():
        raise CheckpointError(f"average: output {output} is a directory; give a file name")
    for p in paths:
        if output.exists() and Path(p).exists() and os.path.samefile(output, p):
            raise CheckpointError(f"average: output {output} is one of the inputs; "
                                  "choose another output file")
    folder = output.parent if str(output.parent) else Path(".")
    if folder.exists() and not os.access(folder, os.W_OK):
        raise CheckpointError(f"average: cannot write {output}: folder {folder} is not writable")


def _check_compatible(paths: list, ckpts: list[dict[str, Any]]) -> None:
    """Same config, tokenizers, language pair, weight names, shapes and dtypes as the
    last checkpoint."""
    last, ref = paths[-1], ckpts[-1]
    meta = ref["seq2seq"]
    want = {k: (v.shape, v.dtype) for k, v in ref["state_dict"].items() if k.startswith(PREFIX)}
    for p, c in zip(paths, ckpts):
        m = c["seq2seq"]
        if m["model_config"] != meta["model_config"] or m["tokenizers"] != meta["tokenizers"]:
            raise CheckpointError(f"average: {p} has another model config or tokenizer than {last}")
        if any(m.get(k) != meta.get(k) for k in DIRECTION_KEYS):
            raise CheckpointError(f"average: {p} translates {_pair(m)} but {last} translates "
                                  f"{_pair(meta)}: the average of two directions translates "
                                  "neither; average checkpoints of one direction")
        got = {k: (v.shape, v.dtype) for k, v in c["state_dict"].items() if k.startswith(PREFIX)}
        if set(got) != set(want):
            odd = sorted(set(got) ^ set(want))[:3]
            raise CheckpointError(f"average: {p} and {last} hold different weights ({odd}); "
                                  "nothing was written")
        for key, (shape, dt) in got.items():
            if (shape, dt) != want[key]:
                raise CheckpointError(
                    f"average: weight {key} is {dt} {tuple(shape)} in {p} but {want[key][1]} "
                    f"{tuple(want[key][0])} in {last}; convert them to one dtype first "
                    "(seq2seq-average --dtype float32 -o X FILE)")
