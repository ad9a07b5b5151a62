"""Self-contained checkpoints: save atomically, load safely, average.

One file format serves training (Lightning writes it) and inference:

    {
      "seq2seq": {"format": 1, "model_config": {...}, "tokenizers": {...},
                  "src_lang": "de", "tgt_lang": "en"},
      "state_dict": {"model.<param>": Tensor, ...},   # LightningModule keys
      ... Lightning's training state (optimizer, schedulers, loops) when written by fit ...
    }

Everything is tensors, numbers, strings and bytes, so it loads with
``torch.load(path, weights_only=True)``: no arbitrary unpickling of user files.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from seq2seq.config import ModelConfig, from_dict, to_dict
from seq2seq.model import Seq2Seq

FORMAT = 1
PREFIX = "model."  # the LightningModule holds the Seq2Seq as ``self.model``


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable, corrupt or not ours (one-line message)."""


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def save_atomic(obj: Any, path: str | os.PathLike) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over ``path``:
    a crash leaves either the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it owner-only; give it open()'s mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def metadata(cfg: ModelConfig, tokenizers, src_lang: str, tgt_lang: str) -> dict[str, Any]:
    """The ``"seq2seq"`` entry: everything inference needs besides the weights."""
    return {
        "format": FORMAT,
        "model_config": to_dict(cfg),
        "tokenizers": tokenizers.to_state(),
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
    }


def save_model(path, model: Seq2Seq, tokenizers, src_lang: str, tgt_lang: str) -> None:
    """An inference checkpoint of ``model`` (no training state), written atomically."""
    state = {PREFIX + k: v for k, v in model.state_dict().items()}
    save_atomic({"seq2seq": metadata(model.arch, tokenizers, src_lang, tgt_lang), "state_dict": state}, path)


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load with ``weights_only=True``; any failure becomes a one-line ``CheckpointError``."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path}: no such file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, not a torch file, unsafe pickle, ...
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {path}: cannot be read ({reason[:200]})") from None
    if not isinstance(ckpt, dict) or "seq2seq" not in ckpt or "state_dict" not in ckpt:
        raise CheckpointError(f"checkpoint {path}: not a seq2seq checkpoint (no 'seq2seq' metadata)")
    return ckpt


def model_state(ckpt: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The ``Seq2Seq`` state dict (LightningModule prefix stripped)."""
    return {k[len(PREFIX):]: v for k, v in ckpt["state_dict"].items() if k.startswith(PREFIX)}


def build_model(ckpt: dict[str, Any]) -> Seq2Seq:
    """A ``Seq2Seq`` in eval mode with the checkpoint's config and weights (fp32)."""
    cfg = from_dict(ModelConfig, ckpt["seq2seq"]["model_config"], "checkpoint model_config")
    model = Seq2Seq(cfg)
    state = {k: v.float() if v.is_floating_point() else v for k, v in model_state(ckpt).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied weights appear under one name only; anything else missing is a real error.
    missing = [k for k in missing if k not in ("output.weight", "tgt_embed.tokens.weight")]
    if missing or unexpected:
        raise CheckpointError(f"checkpoint weights do not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model.eval()


STORAGE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def average(paths: list[str | os.PathLike], output: str | os.PathLike,
            dtype: str | None = None) -> dict[str, Any]:
    """Average the weights of ``paths`` (same config and tokenizers) into ``output``.

    The result keeps the metadata of the last checkpoint and drops training state, so
    it is an inference checkpoint (resuming from it starts a fresh optimizer).
    ``dtype`` (a key of ``STORAGE_DTYPES``) stores the floating-point weights in that
    precision, e.g. ``float16`` halves the file; :func:`build_model` computes in fp32 again.
    """
    if dtype is not None and dtype not in STORAGE_DTYPES:
        raise CheckpointError(f"average: dtype must be one of {list(STORAGE_DTYPES)}, got {dtype!r}")
    if not paths:
        raise CheckpointError("average: no checkpoints given")
    ckpts = [load_checkpoint(p) for p in paths]
    first = ckpts[-1]["seq2seq"]
    for p, c in zip(paths, ckpts):
        meta = c["seq2seq"]
        if meta["model_config"] != first["model_config"] or meta["tokenizers"] != first["tokenizers"]:
            raise CheckpointError(f"average: {p} has another model config or tokenizer than {paths[-1]}")
    states = [c["state_dict"] for c in ckpts]
    avg, done = {}, {}  # done: storage -> its average, so tied weights stay one tensor in the file
    for key, value in states[-1].items():
        if not value.is_floating_point():
            avg[key] = value
            continue
        shared = (value.untyped_storage().data_ptr(), value.storage_offset(), value.shape)
        if shared not in done:
            store = STORAGE_DTYPES[dtype] if dtype else value.dtype
            done[shared] = sum(s[key].double() for s in states).div(len(states)).to(store)
        avg[key] = done[shared]
    # converting one averaged checkpoint (e.g. to float16) keeps the list it came from
    sources = first.get("averaged_from") if len(paths) == 1 else None
    out = {"seq2seq": {**first, "averaged_from": sources or [str(p) for p in paths]}, "state_dict": avg}
    save_atomic(out, output)
    return out
