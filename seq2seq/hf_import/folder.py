"""A MarianMT folder checked before anything is built from it: :func:`check_folder`.

Every file the import reads is read here first, and every refusal is one line naming the
file and what is wrong with it: JSON files must hold the JSON types their fields have
(``config.json``'s fields are type-checked one by one; only the fields a ``MarianConfig``
takes are passed on, so a stray field cannot trip up ``transformers``), the weights'
names, shapes and dtypes must be what ``config.json`` describes (read from the safetensors
header, or from ``torch.load(weights_only=True)``: nothing is ever unpickled) and every
weight must be finite. Only then is a network allocated, of sizes the weights themselves
have; ``max_position_embeddings`` (a sinusoidal table, not in the weights) is bounded by
:data:`MAX_POSITIONS`.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seq2seq.files import kind_of

# What an OPUS-MT repository holds that the import reads (weights: one of the two).
NEEDED = ("config.json", "source.spm", "target.spm", "vocab.json")
OPTIONAL = ("target_vocab.json", "tokenizer_config.json", "generation_config.json")
WEIGHTS = ("model.safetensors", "pytorch_model.bin")
# Positions a sinusoidal table is built for (HF's and ours, each max_positions x d_model
# floats): 32x OPUS-MT's 512, far beyond any sentence; a larger value only costs memory.
MAX_POSITIONS = 16384
_FLOAT_DTYPES = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
_SIZE = ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
         "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings")
_ID = ("pad_token_id", "eos_token_id", "decoder_start_token_id", "bos_token_id",
       "forced_eos_token_id", "decoder_vocab_size")
_NUMBER = ("dropout", "attention_dropout", "activation_dropout", "encoder_layerdrop",
           "decoder_layerdrop", "init_std")
_FLAG = ("scale_embedding", "share_encoder_decoder_embeddings", "tie_word_embeddings",
         "use_cache", "is_encoder_decoder")
_TEXT = ("model_type", "activation_function")
_TOKENIZER_TYPES = {"source_lang": (str, type(None)), "target_lang": (str, type(None)),
                    "separate_vocabs": (bool, type(None)), "unk_token": (str, dict, type(None))}


@dataclass
class MarianFolder:
    """A checked folder: its config (the checked ``config.json`` fields), tokenizer config
    and weights file."""

    path: Path
    config: dict[str, Any]
    tokenizer_config: dict[str, Any]
    weights_path: Path

    @property
    def separate_vocabs(self) -> bool:
        return bool(self.tokenizer_config.get("separate_vocabs"))


def read_json(path: Path, kind: type = dict) -> Any:
    """``path`` parsed as JSON holding a ``kind``; a one-line ``ValueError`` otherwise."""
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:  # JSON or UTF-8 errors, absurd nesting
        raise ValueError(f"{path}: not valid JSON ({' '.join(str(e).split())[:120]})") from None
    if not isinstance(value, kind):
        raise ValueError(f"{path}: holds a JSON {_json_type(value)}, expected an object")
    return value


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "list", str: "string", bool: "boolean", int: "number",
             float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def check_config(config: dict[str, Any], where: str) -> dict[str, Any]:
    """The ``MarianConfig`` fields of ``config.json``, each of its JSON type; a one-line
    ``ValueError`` naming the field otherwise."""
    def refuse(name: str, want: str):
        raise ValueError(f"{where}: {name}={config[name]!r} must be {want}")

    for name in (*_SIZE, *_ID):
        value = config.get(name)
        if name in config and not (value is None and name in _ID[3:]):
            if not isinstance(value, int) or isinstance(value, bool):
                refuse(name, "a whole number")
            if value < (1 if name in _SIZE or name == "decoder_vocab_size" else 0):
                refuse(name, "positive" if name in _SIZE else "a token id (>= 0)")
    for name in _NUMBER:
        value = config.get(name)
        if name in config and (isinstance(value, bool) or not isinstance(value, (int, float))
                               or not math.isfinite(value)):
            refuse(name, "a finite number")
    for names, kind, want in ((_FLAG, bool, "true or false"), (_TEXT, str, "a string")):
        for name in names:
            if name in config and not isinstance(config[name], kind):
                refuse(name, want)
    if config.get("max_position_embeddings", 0) > MAX_POSITIONS:
        refuse("max_position_embeddings", f"at most {MAX_POSITIONS:,} (a sinusoidal table of "
               "that many positions is built; MarianMT models have 512)")
    return {k: config[k] for k in (*_SIZE, *_ID, *_NUMBER, *_FLAG, *_TEXT) if k in config}


def check_tokenizer_config(path: Path) -> dict[str, Any]:
    """``tokenizer_config.json`` (``{}`` when absent), its fields the import reads typed."""
    if not path.exists():
        return {}
    config = read_json(path)
    for name, kinds in _TOKENIZER_TYPES.items():
        if not isinstance(config.get(name), kinds):
            raise ValueError(f"{path}: {name}={config[name]!r} must be a "
                             f"{' or '.join(_json_type(k()) for k in kinds if k is not type(None))}")
    unk = config.get("unk_token")
    if isinstance(unk, dict) and not isinstance(unk.get("content", "<unk>"), str):
        raise ValueError(f"{path}: unk_token's content must be a string, got {unk['content']!r}")
    return config


def check_folder(folder: Path) -> MarianFolder:
    """Every file of a MarianMT folder checked (module docstring), weights loaded."""
    for name in (*NEEDED, *OPTIONAL):
        kind = kind_of(folder / name)
        if kind == "missing" and name in NEEDED:
            raise ValueError(f"{folder} is not a MarianMT folder: {name} is missing")
        if kind not in ("missing", None):
            raise ValueError(f"{folder / name}: is {kind}, not a regular file")
    weights = next((folder / w for w in WEIGHTS if kind_of(folder / w) is None), None)
    if weights is None:
        raise ValueError(f"{folder}: no weights ({' or '.join(WEIGHTS)}, a regular file)")
    config = check_config(read_json(folder / "config.json"), str(folder / "config.json"))
    tokenizer_config = check_tokenizer_config(folder / "tokenizer_config.json")
    # generation_config.json is never read (nothing of it is imported)
    return MarianFolder(folder, config, tokenizer_config, weights)


# ---------------------------------------------------------------- weights
def safetensors_header(path: Path) -> dict[str, tuple[str, list[int]]]:
    """Name -> (dtype, shape) from a safetensors file's header (8-byte little-endian length,
    then JSON), every tensor's bytes checked to lie inside the file; nothing else is read."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if size < 8 or n > size - 8:
            raise ValueError(f"{path}: not a safetensors file, or truncated (its header says "
                             f"{n:,} bytes of JSON, the file has {size:,} bytes)")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except ValueError:
        raise ValueError(f"{path}: not a safetensors file (no JSON header)") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: not a safetensors file (its header is not a JSON object)")
    header.pop("__metadata__", None)
    data, shapes = size - 8 - n, {}
    for name, entry in header.items():
        dtype, shape, span = (entry.get(k) if isinstance(entry, dict) else None
                              for k in ("dtype", "shape", "data_offsets"))
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
                and isinstance(span, list) and len(span) == 2
                and all(type(o) is int for o in span) and 0 <= span[0] <= span[1]):
            raise ValueError(f"{path}: not a safetensors file (tensor {name!r}'s entry is {entry!r})")
        if span[1] > data:
            raise ValueError(f"{path}: truncated: tensor {name} needs {span[1]:,} bytes of data, "
                             f"the file holds {data:,} (an interrupted download?)")
        if dtype not in _FLOAT_DTYPES:
            raise ValueError(f"{path}: tensor {name} is {dtype!r}, not floating point")
        if math.prod(shape) * _FLOAT_DTYPES[dtype] != span[1] - span[0]:
            raise ValueError(f"{path}: tensor {name}'s bytes do not match its shape {shape}")
        shapes[name] = (dtype, shape)
    return shapes


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    """The weights file's tensors (float32); a one-line ``ValueError`` naming the file or
    the tensor for anything but a flat dict of finite floating-point tensors."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if path.name.endswith(".safetensors"):
                from safetensors.torch import load_file

                safetensors_header(path)  # its errors say more than safetensors' own
                state = load_file(path)
            else:
                state = torch.load(path, map_location="cpu", weights_only=True)
    except ValueError as e:
        if str(e).startswith(str(path)):
            raise
        raise ValueError(f"{path}: cannot be read as weights ({_load_error(e)})") from None
    except Exception as e:  # unsafe pickle, not a zip, truncated, ...
        raise ValueError(f"{path}: cannot be read as weights ({_load_error(e)})") from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise ValueError(f"{path}: not a state dict (names to tensors)")
    for name, tensor in state.items():
        if not tensor.is_floating_point():
            raise ValueError(f"{path}: tensor {name} is {tensor.dtype}, not floating point")
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{path}: tensor {name} holds NaN or infinite values")
    return {k: v.float() for k, v in state.items()}


def _load_error(e: Exception) -> str:
    text = " ".join(str(e).split())
    if "Weights only load failed" in text or "Unpickl" in type(e).__name__:
        return ("it holds Python objects besides tensors, refused unread: loading them "
                "could run code")
    return f"{type(e).__name__}: {text[:160]}" if text else type(e).__name__


def layer_counts(names: list[str]) -> dict[str, int]:
    """``{"encoder": n, "decoder": m}``: one more than the highest layer index in ``names``."""
    counts = {"encoder": 0, "decoder": 0}
    for name in names:
        if m := re.match(r"model\.(encoder|decoder)\.layers\.(\d+)\.", name):
            counts[m.group(1)] = max(counts[m.group(1)], int(m.group(2)) + 1)
    return counts
