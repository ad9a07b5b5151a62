"""What ``seq2seq-train`` refuses before the first step, and how it says so: one line on
stderr, exit status 2, no traceback.

* Parse errors (jsonargparse's nested, many-line messages) and config values refused by
  ``seq2seq.config`` (found in the exception chain jsonargparse wraps them in) are named
  by their dotted option, e.g. ``--model.optim.lr``.
* ``--ckpt_path`` is verified before Lightning reads it (it unpickles hyper-parameters
  first): missing, damaged, foreign or inference-only checkpoints are refused, the last
  pointing to ``--model.init_from``.
* Config files: a folder or FIFO, an empty file and YAML aliases (unbounded expansion)
  are refused naming the file; aliases in option values too.
* Before fit: the run's folders are locked for the whole run (a second run into them is
  refused; the OS releases the lock when the process ends, however it ends); a new run
  never writes over an earlier run's checkpoints (the folder must hold none unless resuming), ``--model.init_from``'s tokenizers become the data module's,
  and temporary files an interrupted save left in the checkpoint folder are removed.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import Callback

from seq2seq.checkpoint import config_of, load_checkpoint, tokenizers_of
from seq2seq.config import ConfigError
from seq2seq.directions import different_directions, directions_of
from seq2seq.files import kind_of, lock_folder, stale_temporaries, unlock
from seq2seq.model.inference.compute import native_bf16
from seq2seq.training.callbacks import load_training_checkpoint

PROG = "seq2seq-train"
# Errors that are the user's to fix: printed on one line (anything else keeps its traceback).
REFUSALS = (ValueError, OSError, FloatingPointError, argparse.ArgumentError,
            MisconfigurationException)  # e.g. --trainer.accelerator gpu on a machine without
# Where each config section lives on the command line.
_OPTIONS = {"ModelConfig": "model.arch", "OptimConfig": "model.optim", "DataConfig": "data.data",
            "TokenizerConfig": "data.data.tokenizer"}
_LIGHTNING_PATHS = ("last", "best", "hpc", "registry")  # --ckpt_path words Lightning resolves


class StartupLogs(logging.Filter, Callback):
    """Lightning's start-up lines ("Seed set", "GPU available", "Restoring states") wait
    until fit or validation starts, so that a run refused before then prints only its one
    error line; then they print as usual."""

    LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.seed")

    def __init__(self) -> None:
        super().__init__()
        self.held: list[logging.LogRecord] | None = []
        for name in self.LOGGERS:
            logging.getLogger(name).addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.held is None or record.levelno >= logging.WARNING:
            return True
        self.held.append(record)
        return False

    def release(self, *_: Any) -> None:
        held, self.held = self.held or [], None
        for record in held:
            logging.getLogger(record.name).handle(record)

    on_fit_start = on_validation_start = release

    def close(self) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeFilter(self)


def fail(e: BaseException, argv: list[str] | None = None) -> NoReturn:
    message = one_line(e)
    if '"<unicode string>"' in message:  # jsonargparse parsed the file's text: name the file
        message = message.replace('"<unicode string>"', _broken_config(argv) or "a --config file")
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def _config_files(argv: list[str] | None) -> list[str]:
    """The ``--config``/``-c`` files of ``argv`` (default ``sys.argv``), in order."""
    argv = list(sys.argv[1:] if argv is None else argv)
    files = [b for a, b in zip(argv, argv[1:]) if a in ("--config", "-c")]
    return files + [a.split("=", 1)[1] for a in argv if a.startswith("--config=")]


def check_config_files(argv: list[str] | None) -> None:
    """Each ``--config`` file is a regular file that configures something, without YAML
    aliases: a folder or a FIFO is named as what it is, an empty file as empty (not
    "Unexpected config:"), an alias with the file's name (see :func:`refuse_yaml_aliases`)."""
    for path in _config_files(argv):
        kind = kind_of(path)
        if kind not in (None, "missing"):  # a missing one: jsonargparse says so, naming it
            raise ValueError(f"--config {path}: is {kind}, not a YAML file")
        if kind is not None or os.path.getsize(path) > _CONFIG_BYTES:
            continue  # a larger file is no config of ours, and not empty: the parser says why
        text = Path(path).read_bytes().decode("utf-8", errors="replace")
        if not any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines()):
            raise ValueError(f"--config {path}: the file is empty (or holds only comments); "
                             "give a YAML mapping of options, e.g. one of configs/*.yaml")
        if alias := _first_alias(text):
            raise ValueError(f"--config {path}: {alias}")


_CONFIG_BYTES = 1 << 20


def _first_alias(stream: str) -> str | None:
    """What to say about the first YAML alias (``*name``) of ``stream``, if it has one."""
    import yaml

    if "*" not in stream:  # no alias without one: most values are not scanned at all
        return None
    try:
        for token in yaml.scan(stream, Loader=yaml.SafeLoader):
            if isinstance(token, yaml.AliasToken):
                return (f"YAML alias *{token.value} (line {token.start_mark.line + 1}): aliases "
                        "are not allowed in configs (their expansion is unbounded); write the "
                        "value out")
    except yaml.YAMLError:
        pass  # not YAML up to an alias: the parser reports the syntax error, as without aliases
    return None


def refuse_yaml_aliases() -> None:
    """Config YAML (files and values) may not use aliases (``*name``): expanding them is
    unbounded (``a: &a [*a]`` recurses without end, nested ones grow exponentially: the
    "billion laughs"). Anchors alone are harmless. Wraps jsonargparse's YAML loader, once."""
    import yaml
    from jsonargparse import get_loader, set_loader

    load = get_loader("yaml")
    if getattr(load, "refuses_aliases", False):
        return

    def loader(stream: str):
        if alias := _first_alias(stream):
            raise ValueError(alias)
        return load(stream)

    loader.refuses_aliases = True
    set_loader("yaml", loader, exceptions=(yaml.YAMLError,))


def _broken_config(argv: list[str] | None) -> str | None:
    """The first ``--config FILE`` of ``argv`` (default ``sys.argv``) that is no valid YAML."""
    import yaml

    for path in _config_files(argv):
        try:
            yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            continue
        except yaml.YAMLError:
            return path
    return None


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
    union's other members; keep the dotted key and the reason(s)."""
    keys = re.findall(r'Parser key "([^"]+)"', message)
    reasons = [line.strip().lstrip("- ") for line in message.splitlines()
               if line.strip() and not line.strip().startswith(_NOISE)]
    if not (keys and reasons):
        return " ".join(message.split())
    if len(reasons) > 1 and all(r.startswith("Expected a ") for r in reasons):  # a union's members
        kinds = [re.sub(r"<class '(\w+)'>|typing\.Literal(\[.*\])", lambda m: m.group(1) or
                        f"one of {m.group(2)}", r.removeprefix("Expected a ")) for r in reasons]
        given = re.search(r"Given value: (.*)", message)
        reasons = [f"expected {' or '.join(kinds)}" + (f", got {given.group(1).strip()}" if given else "")]
    return f"--{'.'.join(keys)}: {reasons[0]} ({PROG} fit --help lists the options)"


_NOISE = ("Parser key", "Does not validate against", "Subtypes:", "Errors:",
          "- Problem with given class_path", "- Expected a <class 'NoneType'>", "Given value")


def check_run_config(config) -> None:
    """Options that Lightning takes but turns into a ZeroDivisionError, a TypeError or,
    worse, a silently wrong run (negative clipping flips the gradients), and output folders
    that are files (found only at the first save, after training)."""
    def number(key):  # the value as a number, if it is one ("-5" from the command line too)
        value = config.get(key)
        if isinstance(value, str) and re.fullmatch(r"-?\d+(\.\d*)?", value.strip()):
            return float(value) if "." in value else int(value)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    problems = [
        ("trainer.accumulate_grad_batches", lambda v: v < 1, ">= 1"),
        ("trainer.check_val_every_n_epoch", lambda v: v < 1, ">= 1 or null"),
        ("trainer.gradient_clip_val", lambda v: not v >= 0, ">= 0 or null"),
        ("trainer.devices", lambda v: v == 0 or v < -1, "> 0 or -1 (all)"),
        # 0 batches (or 0.0 of an epoch) between validations: a ZeroDivisionError at the first
        ("trainer.val_check_interval", lambda v: not v > 0,
         "> 0 (batches, or a fraction of an epoch) or null"),
    ]
    for key, bad, want in problems:
        if number(key) is not None and bad(number(key)):
            raise ValueError(f"--{key} must be {want}, got {config.get(key)}")
    for key in ("checkpoint.dirpath", "trainer.default_root_dir"):
        folder = config.get(key)
        if folder and Path(folder).exists() and not Path(folder).is_dir():
            raise ValueError(f"--{key} {folder}: is a file; give a folder")


def bf16_warning(config, native: bool | None = None) -> str | None:
    """One line when ``--trainer.precision bf16*`` will run on a CPU without native bfloat16
    (AVX-512 BF16 or AMX, ``compute.native_bf16``): it trains, but emulated, many
    times slower than 32-true. ``native``: what the CPU has (default: ask it)."""
    precision = str(config.get("trainer.precision") or "")
    accelerator = str(config.get("trainer.accelerator") or "auto")
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    if not precision.startswith("bf16") or not on_cpu or (native_bf16() if native is None else native):
        return None
    return (f"{PROG}: warning: --trainer.precision {precision}: this CPU has no native bfloat16 "
            "(AVX-512 BF16 or AMX), so bf16 is emulated and trains many times slower than 32-true")


def check_seed(seed: Any) -> None:
    """``--seed_everything``: what numpy accepts (or true/false)."""
    if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed < 2**32:
        raise ValueError(f"--seed_everything must be in [0, 2**32) (or true: random), got {seed}")


def check_ckpt_path(path: Any) -> None:
    """``--ckpt_path FILE``: a verified checkpoint with training state (not an average)."""
    if path and str(path) not in _LIGHTNING_PATHS:
        load_training_checkpoint(path)


def prepare_fit(module, datamodule, trainer, ckpt_path: Any = None) -> None:
    """Before ``fit``: a new run does not write over an earlier run's checkpoints;
    ``init_from``'s or ``tokenizer_from``'s tokenizers for the data; no stale temporary files."""
    folders = [Path(c.dirpath) for c in trainer.checkpoint_callbacks if c.dirpath]
    if trainer.is_global_zero:  # the other ranks of a run share rank 0's folders
        # Held for the whole run, so that the check below cannot race another run starting
        # at the same time (both would find the folder empty, then overwrite each other).
        lock_run_folders([("--trainer.default_root_dir", Path(trainer.default_root_dir)),
                          *(("--checkpoint.dirpath", f) for f in folders)])
    for folder in folders:
        earlier = sorted(folder.glob("*.ckpt")) if folder.is_dir() else []
        if earlier and not ckpt_path:  # a resume rewrites its own (identical) snapshots
            newest = folder / "last.ckpt" if (folder / "last.ckpt").is_file() else \
                max(earlier, key=lambda p: p.stat().st_mtime)
            raise ValueError(
                f"{folder} holds checkpoints of an earlier run, which this run would overwrite: "
                f"resume it with --ckpt_path {newest}, or give another "
                "--trainer.default_root_dir or --checkpoint.dirpath")
    if ckpt_path and str(ckpt_path) not in _LIGHTNING_PATHS:
        check_resume(module, datamodule, ckpt_path)
    use_given_tokenizers(module, datamodule)
    if trainer.is_global_zero:
        for folder in folders:
            for stale in stale_temporaries(folder, "*.ckpt") if folder.is_dir() else []:
                stale.unlink(missing_ok=True)


_RUN_LOCKS: list[int | None] = []  # descriptors held until the run ends (or the process does)


def lock_run_folders(folders: list[tuple[str, Path]]) -> None:
    """Lock each of the run's folders ``(option, folder)`` against another training run."""
    seen = set()
    for option, folder in folders:
        if folder.resolve() not in seen:
            seen.add(folder.resolve())
            _RUN_LOCKS.append(lock_folder(folder, option))


def release_run_folders() -> None:
    """Release :func:`lock_run_folders`' locks (the OS does it when the process ends)."""
    while _RUN_LOCKS:
        unlock(_RUN_LOCKS.pop())


def fingerprints(tokenizers) -> tuple[str, str]:
    return tokenizers.src.fingerprint, tokenizers.tgt.fingerprint


def use_given_tokenizers(module, datamodule) -> None:
    """With ``--model.init_from`` (as that model expects) or ``--data.data.tokenizer_from``,
    the data is tokenized with that checkpoint's tokenizers, not trained ones; given both,
    they must hold the same tokenizers."""
    cfg, given = datamodule.config, []
    for option, path in (("--model.init_from", getattr(module, "init_from", None)),
                         ("--data.data.tokenizer_from", cfg.tokenizer_from)):
        if not path:
            continue
        where = f"{option} {path}"
        meta = load_checkpoint(path)["seq2seq"]
        if (problem := different_directions(directions_of(meta, where), cfg.model_directions)):
            raise ValueError(f"{where} {problem}")
        pair = (meta.get("src_lang"), meta.get("tgt_lang"))
        if cfg.model_directions is None and None not in pair and pair != (cfg.src_lang, cfg.tgt_lang):
            raise ValueError(f"{where} translates {pair[0]}->{pair[1]}, but the data is "
                             f"{cfg.src_lang}->{cfg.tgt_lang}")
        given.append((where, tokenizers_of(meta, config_of(meta, where), where)))
    if len(given) == 2 and fingerprints(given[0][1]) != fingerprints(given[1][1]):
        raise ValueError(f"{given[0][0]} and {given[1][0]} hold other tokenizers: give one of them")
    if given:
        datamodule.use_tokenizers(given[0][1])


# ModelConfig fields the data's tokenizers set when training starts (Seq2SeqModule.configure_model)
_FROM_TOKENIZER = ("src_vocab_size", "tgt_vocab_size", "share_embeddings", "pad_id", "bos_id", "eos_id")


def check_resume(module, datamodule, ckpt_path) -> None:
    """Before the data is prepared (minutes on a large corpus): the checkpoint to resume has
    this run's architecture and language pair (the tokenizers are compared once known)."""
    meta = load_checkpoint(ckpt_path)["seq2seq"]
    saved = config_of(meta, f"--ckpt_path {ckpt_path}")
    if getattr(module, "init_from", None):
        return  # the architecture comes from init_from's checkpoint
    diff = {k: getattr(saved, k) for k in vars(saved)
            if k not in _FROM_TOKENIZER and getattr(saved, k) != getattr(module.arch, k)}
    if diff:
        raise ValueError(f"--ckpt_path {ckpt_path}: its model differs from the configured one in "
                         f"{diff} (the checkpoint's values); resume with the run's own config")
    ours = datamodule.config.model_directions
    if (problem := different_directions(directions_of(meta, f"--ckpt_path {ckpt_path}"), ours)) is not None:
        raise ValueError(f"--ckpt_path {ckpt_path} {problem}")
    pair = (meta.get("src_lang"), meta.get("tgt_lang"))
    data = (datamodule.config.src_lang, datamodule.config.tgt_lang)
    if None not in pair and pair != data:
        raise ValueError(f"--ckpt_path {ckpt_path} translates {pair[0]}->{pair[1]}, but the data "
                         f"is {data[0]}->{data[1]}")
