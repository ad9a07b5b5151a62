"""What ``seq2seq-train`` refuses before the first step, and how it says so: one line on
stderr, exit status 2, no traceback.

* Parse errors (jsonargparse's nested, many-line messages) and config values refused by
  ``seq2seq.config`` (found in the exception chain jsonargparse wraps them in) are named
  by their dotted option, e.g. ``--model.optim.lr``.
* ``--ckpt_path`` is verified before Lightning reads it (it unpickles hyper-parameters
  first): missing, damaged, foreign or inference-only checkpoints are refused, the last
  pointing to ``--model.init_from``.
* Before fit: ``--model.init_from``'s tokenizers become the data module's, and temporary
  files an interrupted save left in the checkpoint folder are removed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

from lightning.fabric.utilities.exceptions import MisconfigurationException

from seq2seq.checkpoint import config_of, load_checkpoint, tokenizers_of
from seq2seq.config import ConfigError
from seq2seq.training.callbacks import load_training_checkpoint

PROG = "seq2seq-train"
# Errors that are the user's to fix: printed on one line (anything else keeps its traceback).
REFUSALS = (ValueError, OSError, FloatingPointError, argparse.ArgumentError,
            MisconfigurationException)  # e.g. --trainer.accelerator gpu on a machine without
# Where each config section lives on the command line.
_OPTIONS = {"ModelConfig": "model.arch", "OptimConfig": "model.optim", "DataConfig": "data.data",
            "TokenizerConfig": "data.data.tokenizer"}
_LIGHTNING_PATHS = ("last", "best", "hpc", "registry")  # --ckpt_path words Lightning resolves


def fail(e: BaseException) -> NoReturn:
    print(f"{PROG}: error: {one_line(e)}", file=sys.stderr)
    sys.exit(2)


def one_line(e: BaseException) -> str:
    """The message of ``e`` on one line, naming the option where it can."""
    cause: BaseException | None = e
    while cause is not None and not isinstance(cause, ConfigError):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        field = re.match(r"(\w+Config)\.(\w+)", str(cause))
        prefix = f"--{_OPTIONS[field.group(1)]}.{field.group(2)}: " if field and \
            field.group(1) in _OPTIONS else ""
        return prefix + " ".join(str(cause).split())
    if isinstance(e, argparse.ArgumentError):
        return _parse_error(str(e))
    return " ".join(str(e).split())


def _parse_error(message: str) -> str:
    """jsonargparse nests ``Parser key "a":`` blocks around the reason, with a list of the
    union's other members; keep the dotted key and the reason."""
    keys = re.findall(r'Parser key "([^"]+)"', message)
    reasons = [line.strip().lstrip("- ") for line in message.splitlines()
               if line.strip() and not line.strip().startswith(_NOISE)]
    if keys and reasons:
        return f"--{'.'.join(keys)}: {reasons[0]} ({PROG} fit --help lists the options)"
    return " ".join(message.split())


_NOISE = ("Parser key", "Does not validate against", "Subtypes:", "Errors:",
          "- Problem with given class_path", "- Expected a <class 'NoneType'>", "Given value")


def check_ckpt_path(path: Any) -> None:
    """``--ckpt_path FILE``: a verified checkpoint with training state (not an average)."""
    if path and str(path) not in _LIGHTNING_PATHS:
        load_training_checkpoint(path)


def prepare_fit(module, datamodule, trainer) -> None:
    """Before ``fit``: ``init_from``'s tokenizers for the data, no stale temporary files."""
    if getattr(module, "init_from", None):
        where = f"--model.init_from {module.init_from}"
        meta = load_checkpoint(module.init_from)["seq2seq"]
        datamodule.use_tokenizers(tokenizers_of(meta, config_of(meta, where), where))
    if trainer.is_global_zero:
        for callback in trainer.checkpoint_callbacks:
            folder = Path(getattr(callback, "dirpath", None) or "")
            if callback.dirpath and folder.is_dir():
                for stale in folder.glob(".*.ckpt.*.tmp"):  # checkpoint.save_atomic's names
                    stale.unlink(missing_ok=True)
