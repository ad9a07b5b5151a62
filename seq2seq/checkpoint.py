"""Self-contained checkpoints: save atomically, load safely and verified.

One file format serves training (Lightning writes it) and inference:

    {
      "seq2seq": {"format": 5, "entries": ["calibration"], "model_config": {...},
                  "tokenizers": {...}, "src_lang": "de", "tgt_lang": "en",
                  "calibration": {...}, "checksum": "<sha256>"},
      "state_dict": {"model.<param>": Tensor, ...},   # LightningModule keys
      ... Lightning's training state (optimizer, schedulers, loops) when written by fit ...
    }

Everything is tensors, numbers, strings and bytes, so it loads with
``torch.load(path, weights_only=True)``: no arbitrary unpickling of user files.

Every load is verified (:func:`check`) before anything runs: the file is a regular file
(a FIFO or a device is never opened), the model config is a valid ``ModelConfig``, the
tokenizers parse and match their SHA-256 fingerprints, vocabulary sizes and special ids
agree with the config, the config's sizes are those of the file's own tensors and every
weight is finite (:func:`check_sizes`: nothing is built from an edited ``d_model`` or layer
count), ``checksum``, a SHA-256 over the config, the tokenizer fingerprints, the
languages, the calibration, shortlist and directions and the weights, still matches (an edited ``n_heads``
changes no shape, so only the checksum can tell), and only then is every weight compared
with the shape the config needs. The format number and the optional entries (a
``calibration`` from ``seq2seq-calibrate``, a ``shortlist`` from ``seq2seq-shortlist``, a
multilingual model's ``directions``): :mod:`seq2seq.checkpoint_format`; files of every
earlier format still load (tests/fixtures/checkpoints holds one of each).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

from seq2seq.checkpoint_format import (
    FORMAT,
    CheckpointError,
    calibration_of,
    check_format,
    entries_of,
    shortlist_of,
)
from seq2seq.config import ModelConfig, from_dict, to_dict
from seq2seq.data.tokenizer import Tokenizer, TokenizerPair
from seq2seq.directions import DirectionError, Directions, check_language, directions_of
from seq2seq.files import kind_of, save_atomic
from seq2seq.model import Seq2Seq
from seq2seq.shipped import find_model

PREFIX = "model."  # the LightningModule holds the Seq2Seq as ``self.model``
TIED = ("output.weight", "tgt_embed.tokens.weight")  # may be stored under one name only


def metadata(cfg: ModelConfig, tokenizers, src_lang: str | None, tgt_lang: str | None,
             directions: Directions | None = None) -> dict[str, Any]:
    """The ``"seq2seq"`` entry: everything inference needs besides the weights
    (:func:`seal` adds the checksum once the weights are in). A multilingual model has
    ``directions`` (``src_lang``/``tgt_lang`` then ``None``)."""
    meta = {
        "model_config": to_dict(cfg),
        "tokenizers": tokenizers.to_state(),
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
    }
    if directions is not None:
        meta["directions"] = directions.to_state()
    return meta


def save_model(path, model: Seq2Seq, tokenizers, src_lang: str | None, tgt_lang: str | None,
               directions: Directions | None = None) -> None:
    """An inference checkpoint of ``model`` (no training state), written atomically."""
    state = {PREFIX + k: v for k, v in model.state_dict().items()}
    ckpt = {"seq2seq": metadata(model.arch, tokenizers, src_lang, tgt_lang, directions),
            "state_dict": state}
    save_atomic(seal(ckpt), path)


# ---------------------------------------------------------------- checksum
def checksum(ckpt: dict[str, Any]) -> str:
    """SHA-256 over what decides the model's output: config, tokenizer fingerprints,
    languages and every model weight (name, dtype, shape, bytes)."""
    meta = ckpt["seq2seq"]
    head = {key: meta.get(key) for key in ("model_config", "src_lang", "tgt_lang")}
    for key in ("directions", "calibration"):  # absent in other files: their sums hold
        if meta.get(key) is not None:
            head[key] = meta[key]
    head["tokenizers"] = {side: meta["tokenizers"][side]["sha256"] for side in ("src", "tgt")}
    shortlist = meta.get("shortlist")
    tensors = {}  # the shortlist's table and frequent ids, hashed as weights are
    if isinstance(shortlist, dict):
        head["shortlist"] = {k: v for k, v in shortlist.items() if not isinstance(v, torch.Tensor)}
        tensors = {f"shortlist.{k}": v for k, v in shortlist.items() if isinstance(v, torch.Tensor)}
    h = hashlib.sha256(json.dumps(head, sort_keys=True).encode())
    state = {k: v for k, v in ckpt["state_dict"].items() if k.startswith(PREFIX)}
    for key, value in sorted({**state, **tensors}.items()):  # "model." < "shortlist."
        t = value.detach().cpu().contiguous().reshape(-1)
        h.update(f"{key}|{t.dtype}|{tuple(value.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy())
    return h.hexdigest()


def seal(ckpt: dict[str, Any]) -> dict[str, Any]:
    """Mark ``ckpt`` (in place) as the current format, with the list of its optional entries
    and its checksum; returns it."""
    meta = ckpt["seq2seq"]
    meta["format"], meta["entries"] = FORMAT, entries_of(meta)
    meta["checksum"] = checksum(ckpt)
    return ckpt


# ---------------------------------------------------------------- loading and checks
def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load with ``weights_only=True`` and verify (:func:`check`); any failure becomes a
    one-line ``CheckpointError`` naming the file and what to do. ``path`` may also name a
    shipped model (``multi30k_de_en_tiny``: :func:`seq2seq.shipped.find_model`)."""
    return _load_verified(path)[0]


def load_model(path: str | os.PathLike) -> tuple[dict[str, Any], Seq2Seq]:
    """:func:`load_checkpoint` and :func:`build_model` with one model built, not two: the
    model the verification builds to compare weight shapes with receives the weights (a
    second build costs ~1 s and the model's size again for a 60M-parameter model)."""
    ckpt, reference = _load_verified(path)
    return ckpt, build_model(ckpt, into=reference)


def _load_verified(path: str | os.PathLike) -> tuple[dict[str, Any], Seq2Seq]:
    try:  # a shipped model's name works from any folder
        path = find_model(path)
    except FileNotFoundError as e:
        raise CheckpointError(str(e)) from None
    kind = kind_of(path)  # never open a FIFO or a device: torch.load would wait or read forever
    if kind == "missing":
        raise CheckpointError(f"checkpoint {path}: no such file")
    if kind is not None:
        raise CheckpointError(f"checkpoint {path}: is {kind}; give a checkpoint file (.ckpt)")
    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": the error says it
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as e:  # permissions, I/O
        raise CheckpointError(f"checkpoint {path}: cannot be read ({e.strerror or e})") from None
    except Exception as e:  # truncated zip, not a torch file, unsafe pickle, ...
        raise CheckpointError(f"checkpoint {path}: cannot be read: {_read_error(e, path)}") \
            from None
    return ckpt, check(ckpt, f"checkpoint {path}")


def is_checkpoint_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` looks like a file ``torch.save`` wrote (a zip archive holding a
    ``data.pkl``), without loading it: what ``--force`` may replace."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("/data.pkl") for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def _read_error(e: Exception, path: Path) -> str:
    """What a ``torch.load`` failure means for a user, whole (never cut mid-sentence)."""
    text = str(e)
    if isinstance(e, pickle.UnpicklingError) or "Weights only load failed" in text:
        return ("not a PyTorch checkpoint, or one holding Python objects besides tensors, "
                "numbers and strings, which are refused unread (loading them could run code)")
    if "zip archive" in text or "central directory" in text or isinstance(e, EOFError):
        return "the file is truncated or damaged (an interrupted copy?); use an intact copy"
    if not zipfile.is_zipfile(path):
        # torch falls back to its legacy pickle reader, whose errors on arbitrary bytes are
        # whatever the bytes trip over first (IndexError, UnicodeDecodeError, ...)
        return "not a PyTorch checkpoint (torch.save writes a zip archive; this is none)"
    lines = text.strip().splitlines()
    return f"{lines[0] if lines else type(e).__name__} ({type(e).__name__})"


def check(ckpt: Any, where: str = "checkpoint") -> Seq2Seq:
    """Refuse (``CheckpointError`` starting with ``where``) anything but an intact seq2seq
    checkpoint: metadata, tokenizers, weights and (format 2 on) the checksum. Returns the model
    built to compare shapes with (the file's config, random weights)."""
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("seq2seq"), dict):
        kind = "a Lightning checkpoint of another model" if isinstance(ckpt, dict) and \
            "pytorch-lightning_version" in ckpt else "not a seq2seq checkpoint"
        raise CheckpointError(f"{where}: {kind} (no 'seq2seq' metadata)")
    meta = ckpt["seq2seq"]
    fmt = check_format(meta, where)
    arch = config_of(meta, where)
    tokenizers_of(meta, arch, where)
    try:
        for side in ("src_lang", "tgt_lang"):
            if meta.get(side) is not None:
                check_language(meta[side], f"{where}: '{side}'")
        directions_of(meta, where)
    except DirectionError as e:
        raise CheckpointError(str(e)) from None
    calibration_of(meta, where)
    shortlist_of(meta, arch, where)
    state = ckpt.get("state_dict")
    if not isinstance(state, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise CheckpointError(f"{where}: 'state_dict' must map names to tensors")
    # Before any model is built from the file's config: its sizes must be the ones its own
    # weights have (an edited d_model or layer count would allocate GBs), and its checksum
    # must hold (an edit that changes no shape).
    check_sizes(state, arch, where)
    for key, value in state.items():  # before the checksum: a diverged run is sealed as is
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(f"{where}: weight {key.removeprefix(PREFIX)} holds NaN or "
                                  "infinite values (a diverged run or a damaged file); use an "
                                  "earlier checkpoint")
    if (fmt >= 2 or "checksum" in meta) and meta.get("checksum") != checksum(ckpt):
        raise CheckpointError(
            f"{where}: its contents do not match its checksum: the file was edited or "
            "damaged after it was written; use the original file (or re-save the edited "
            "model with seq2seq.checkpoint.save_model)")
    reference = check_weights(state, arch, where)
    if fmt == 1 and "checksum" not in meta:
        # Nothing in a format-1 file can tell an edit that changes no shape (n_heads, ...)
        # from the original: say so rather than vouch for it.
        warnings.warn(f"{where}: format 1 (written before checksums): an edit that changes no "
                      "weight shape (e.g. n_heads) cannot be detected; if you trust the file, "
                      "seal it with `seq2seq-average -o NEW.ckpt FILE` (one input: a copy, "
                      "checksummed)", stacklevel=2)
    return reference


def config_of(meta: dict[str, Any], where: str = "checkpoint") -> ModelConfig:
    """The checkpoint's ``ModelConfig`` (types and values checked)."""
    cfg = meta.get("model_config")
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{where}: 'model_config' is missing or not a mapping")
    try:
        return from_dict(ModelConfig, cfg, "model_config")
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: {e}") from None


def tokenizers_of(meta: dict[str, Any], arch: ModelConfig, where: str = "checkpoint") -> TokenizerPair:
    """The checkpoint's tokenizers, each parsed, its fingerprint recomputed, and its size
    and special ids checked against ``arch``."""
    state = meta.get("tokenizers")
    if state is None:
        raise CheckpointError(f"{where}: has no tokenizers, so it cannot read or write text "
                              "(checkpoints from seq2seq-train and save_model have them)")
    if not isinstance(state, dict) or not {"src", "tgt"} <= set(state):
        raise CheckpointError(f"{where}: 'tokenizers' must hold 'src' and 'tgt'")
    pair = {side: _tokenizer(state[side], side, where) for side in ("src", "tgt")}
    for side, tok in pair.items():
        size = getattr(arch, f"{side}_vocab_size")
        if tok.vocab_size != size:
            raise CheckpointError(f"{where}: the {side} tokenizer has {tok.vocab_size} pieces but "
                                  f"model_config.{side}_vocab_size is {size}")
        for name in ("pad_id", "bos_id", "eos_id"):
            if getattr(tok, name) != getattr(arch, name):
                raise CheckpointError(f"{where}: model_config.{name} is {getattr(arch, name)} but "
                                      f"the {side} tokenizer's is {getattr(tok, name)}")
    src, tgt = pair["src"], pair["tgt"]
    return TokenizerPair(src, src if tgt == src else tgt)


def _tokenizer(state: Any, side: str, where: str) -> Tokenizer:
    if not isinstance(state, dict) or not isinstance(state.get("model"), bytes) \
            or not isinstance(state.get("sha256"), str):
        raise CheckpointError(f"{where}: the {side} tokenizer entry needs 'model' (bytes) and "
                              "'sha256' (str)")
    try:
        tok = Tokenizer.from_bytes(state["model"])
    except Exception:  # SentencePiece raises RuntimeError on a bad proto
        raise CheckpointError(f"{where}: the {side} tokenizer's bytes are damaged "
                              "(SentencePiece cannot read them)") from None
    if tok.fingerprint != state["sha256"]:
        raise CheckpointError(
            f"{where}: the {side} tokenizer fingerprint mismatch: its bytes hash to sha256 "
            f"{tok.fingerprint[:16]}..., the checkpoint says {state['sha256'][:16]}... "
            "(damaged or edited)")
    return tok


# A position table that is computed, not stored (sinusoidal, rope), is bounded by this many
# values or by the weights' own count, whichever is larger (64 MiB in fp32).
COMPUTED_TABLE_LIMIT = 1 << 24


def check_sizes(state: dict[str, torch.Tensor], arch: ModelConfig, where: str = "checkpoint") -> None:
    """The sizes in ``arch`` are those of the weights in ``state``, read from the tensors
    alone (nothing built): ``d_model`` is the embedding width, every other width is some
    weight's dimension, the layer counts are the layers present, and a computed position
    table is no larger than the model. Refuses before an edited config allocates memory."""
    got = {k.removeprefix(PREFIX): v for k, v in state.items()}
    embed = got.get("src_embed.tokens.weight")
    if embed is None or embed.dim() != 2:
        raise CheckpointError(f"{where}: weights do not fit model_config: missing or malformed "
                              "src_embed.tokens.weight")
    if arch.d_model != embed.shape[1]:
        raise CheckpointError(f"{where}: model_config.d_model is {arch.d_model} but the weights' "
                              f"shapes say {embed.shape[1]} (src_embed.tokens.weight is "
                              f"{tuple(embed.shape)})")
    dims = {d for t in got.values() for d in t.shape}
    widths = {"d_ff": arch.d_ff, "n_heads x d_k": arch.n_heads * arch.head_dim_k,
              "n_heads x d_v": arch.n_heads * arch.head_dim_v}
    if arch.positional == "learned":
        widths["max_positions"] = arch.max_positions  # the learned table is a weight
    for name, size in widths.items():
        if size not in dims:
            raise CheckpointError(f"{where}: model_config {name} = {size} is no dimension of "
                                  "any weight's shape: the config does not describe these weights")
    for side in ("encoder", "decoder"):
        layers = {k.split(".")[2] for k in got if k.startswith(f"{side}.layers.")}
        if getattr(arch, f"{side}_layers") != len(layers):
            raise CheckpointError(f"{where}: model_config.{side}_layers is "
                                  f"{getattr(arch, side + '_layers')} but the weights hold "
                                  f"{len(layers)} {side} layers")
    table = arch.max_positions * max(arch.d_model, arch.head_dim_k)
    if table > max(COMPUTED_TABLE_LIMIT, sum(t.numel() for t in got.values())):
        raise CheckpointError(f"{where}: model_config.max_positions = {arch.max_positions} needs a "
                              f"position table of {table:,} values, more than the whole model "
                              "holds: an edited or damaged config")


def check_weights(state: Any, arch: ModelConfig, where: str = "checkpoint") -> Seq2Seq:
    """Every model weight present, with the shape and kind ``arch`` needs (``state``: names to tensors; :func:`check_sizes` first, so that building ``arch``
    costs no more memory than the weights themselves). Returns the model built for the
    comparison (random weights: :func:`build_model` can fill it)."""
    # Built on CPU, with the global RNG put back: the meta device would need no memory, but
    # its normal_ loads torch._dynamo (~800 modules, +76 MB resident in every command).
    with torch.random.fork_rng(devices=[]):
        reference = Seq2Seq(arch)
    expected = reference.state_dict()
    got = {k.removeprefix(PREFIX): v for k, v in state.items()}
    missing = [k for k in expected if k not in got and not (k in TIED and set(TIED) & set(got))]
    unexpected = [k for k in got if k not in expected]
    if missing or unexpected:
        raise CheckpointError(f"{where}: weights do not fit model_config: missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]}")
    for key, value in got.items():
        want = expected[key]
        if value.shape != want.shape:
            raise CheckpointError(f"{where}: weight {key} has shape {tuple(value.shape)}, "
                                  f"model_config needs {tuple(want.shape)}")
        if value.is_floating_point() != want.is_floating_point():
            raise CheckpointError(f"{where}: weight {key} has dtype {value.dtype}, "
                                  f"expected {want.dtype}")
    return reference


def is_training_checkpoint(ckpt: dict[str, Any]) -> bool:
    """Whether ``ckpt`` holds Lightning's training state (so ``--ckpt_path`` can resume it)."""
    return all(k in ckpt for k in ("pytorch-lightning_version", "loops", "optimizer_states"))


def model_state(ckpt: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The ``Seq2Seq`` state dict (LightningModule prefix stripped)."""
    return {k[len(PREFIX):]: v for k, v in ckpt["state_dict"].items() if k.startswith(PREFIX)}


def build_model(ckpt: dict[str, Any], arch: ModelConfig | None = None,
                into: Seq2Seq | None = None) -> Seq2Seq:
    """A ``Seq2Seq`` in eval mode with the checkpoint's config (or ``arch``, which must fit
    its weights, e.g. with another dropout) and weights (fp32). ``into``: a model of that
    config no one else uses (what :func:`check` returns), filled instead of building one."""
    cfg = arch or from_dict(ModelConfig, ckpt["seq2seq"]["model_config"], "checkpoint model_config")
    model = into if into is not None and into.arch == cfg else Seq2Seq(cfg)
    state = {k: v.float() if v.is_floating_point() else v for k, v in model_state(ckpt).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied weights appear under one name only; anything else missing is a real error.
    missing = [k for k in missing if k not in TIED]
    if missing or unexpected:
        raise CheckpointError(f"checkpoint weights do not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model.eval()
