"""What every ``seq2seq-*`` command does the same way: one-line errors, exit status 2, the
trained model given as ``-m/--model CKPT``; and the one map from the library's option names
(config fields) to flags: the decoding and load options generated from their dataclasses,
and every message that names a field rendered with its flag."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import typing
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_args

from seq2seq.config.decoding import (
    DecodingConfig,
    LoadConfig,
    decoding_from_options,
    options_of,
)
from seq2seq.fields import render


class Parser(argparse.ArgumentParser):
    """``argparse`` whose errors are one line, ``PROG: error: ...`` and exit status 2, like
    every other refusal (no usage block: it is one ``--help`` away)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def run_command(prog: str, run: Callable[[Any], None], args: Any) -> None:
    """Call ``run(args)``; bad input (``ValueError``, ``OSError``, hence ``CheckpointError``)
    becomes ``PROG: error: ...`` on one line and exit status 2; Ctrl-C exits with 130 and
    no traceback. Library warnings (e.g. truncated sources) print as one
    ``PROG: warning: ...`` line each."""
    import seq2seq.runtime as runtime

    shown = warnings.showwarning
    warnings.showwarning = lambda message, *_, **__: print(
        f"{prog}: warning: {' '.join(render(message, flag).split())}", file=sys.stderr)
    try:
        runtime.start()  # threads from the cores this process can get now (seq2seq.runtime)
        run(args)
    except BrokenPipeError:  # `| head`: the reader left; not an error (an OSError: first)
        sys.stdout = None  # nothing more to flush at exit
        sys.exit(0)
    except KeyboardInterrupt:  # Ctrl-C / SIGINT: the user's choice, not an error to explain
        sys.exit(130)  # 128 + SIGINT, as shells report it
    except (ValueError, OSError) as e:
        msg = " ".join(render(e, flag).split())  # one line, options named by flag
        print(f"{prog}: error: {msg}", file=sys.stderr)
        sys.exit(2)
    finally:
        warnings.showwarning = shown


_BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def one_line(text: str) -> str:
    """Whatever the detokenizer produced, it must not split an output line."""
    return text.translate(_BREAKS)


# ``-c`` is the config file in ``seq2seq-train`` (LightningCLI's, as in fairseq and JoeyNMT);
# the other commands named the checkpoint ``-c/--checkpoint`` until 0.1. One letter must not
# mean two things, so they take ``-m/--model`` (Marian's, Sockeye's and CTranslate2's name for
# the trained model); the old spellings keep working for one release, with a notice.
MODEL_ALIASES = ("-c", "--checkpoint")


class _OldModelOption(argparse.Action):
    """``-c``/``--checkpoint``: store (or append) like ``-m/--model``, after a one-line notice."""

    def __init__(self, option_strings, dest, append: bool = False, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.append = append
        self.noticed = False

    def __call__(self, parser, namespace, values, option_string=None):
        if not self.noticed:
            print(f"{parser.prog}: warning: {option_string} is deprecated and will be removed in "
                  f"the next release: use -m/--model for the checkpoint ({option_string} is the "
                  "config file in seq2seq-train)", file=sys.stderr)
            self.noticed = True
        if self.append:  # with nargs, the values of every flag in one list
            values = [*(getattr(namespace, self.dest) or []),
                      *(values if isinstance(values, list) else [values])]
        setattr(namespace, self.dest, values)


def add_model_argument(ap: argparse.ArgumentParser, nargs: str | None = None,
                       append: bool = False, metavar: str = "CKPT",
                       help: str = "the trained model: a checkpoint file (.ckpt)"):
    """Required ``-m/--model`` (dest ``checkpoint``), plus the deprecated ``-c/--checkpoint``.
    ``nargs="+"``: several checkpoints after one flag; ``append``: one per repeated flag
    (both: ``-m A B -m C`` is A, B, C). Returns their mutually exclusive group (another way
    to name the model may join it)."""
    from seq2seq.shipped import shipped_models

    if names := shipped_models():
        help += f", or a shipped model's name ({', '.join(names)}), from any folder"
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("-m", "--model", dest="checkpoint", nargs=nargs, metavar=metavar,
                       action=("extend" if nargs else "append") if append else "store", help=help)
    group.add_argument(*MODEL_ALIASES, dest="checkpoint", nargs=nargs, metavar=metavar,
                       action=_OldModelOption, append=append, help=argparse.SUPPRESS)
    return group


def check_device(name: str) -> None:
    """``--device NAME`` must be a torch device this machine has (else one line: what to use)."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ValueError(f"--device {name!r}: not a torch device (e.g. cpu, cuda, cuda:1, mps)") from None
    count = {"cpu": 1, "cuda": torch.cuda.device_count() if torch.cuda.is_available() else 0,
             "mps": int(torch.backends.mps.is_available())}.get(device.type, 0)
    if count == 0 or (device.index or 0) >= count:
        raise ValueError(f"--device {name}: this machine has no such device (use --device cpu)")


def check_output_file(path: str, option: str) -> None:
    """Before any long work: ``path`` can be written as a file (not a folder, folder writable)."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{option} {path}: is a directory; give a file name")
    folder = next((q for q in p.absolute().parents if q.exists()), None)
    if folder is not None and not folder.is_dir():
        raise ValueError(f"{option} {path}: {folder} is a file, not a folder")
    if folder is None or not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path}: cannot write there (folder not writable)")
    if p.exists() and not os.access(p, os.W_OK):
        raise ValueError(f"{option} {path}: the file is not writable")


def check_replace(path: str | os.PathLike, option: str, force: bool, kind: str,
                  is_kind: Callable[[Path], bool]) -> None:
    """An output file that exists is replaced only with ``--force``, and only when it is an
    earlier output of the same ``kind`` (``is_kind(path)``): ``--force`` is for re-running a
    command, not for replacing whatever file has that name. Never a folder, FIFO or device."""
    from seq2seq.files import kind_of

    what = kind_of(path)
    if what == "missing":
        return
    if what is not None:
        raise ValueError(f"{option} {path}: is {what}; give a file name")
    if not force:
        raise ValueError(f"{option} {path}: exists (an earlier output?); --force replaces it, "
                         "or choose another name")
    if not is_kind(Path(path)):
        raise ValueError(f"{option} {path}: exists and is not {kind}; --force replaces only an "
                         "earlier output of this command: choose another name")


# One name per concept in seq2seq-translate and seq2seq-evaluate: the direction asked of a
# model. ``--src-lang``/``--tgt-lang`` (seq2seq-evaluate's and seq2seq-import's spelling)
# keep working as aliases.
def add_direction_args(ap: argparse.ArgumentParser | Any, extra: str = "") -> None:
    """``--target-lang LANG`` and ``--source-lang LANG`` (dests ``target_lang``,
    ``source_lang``): the direction of a multilingual model, checked against a
    single-direction model's own pair. ``extra``: what else they choose in this command."""
    ap.add_argument("--target-lang", "--tgt-lang", dest="target_lang", metavar="LANG",
                    help="the language to translate into: a multilingual model's direction "
                         "(needed when it has several target languages); a single-direction "
                         f"model accepts only its own{extra}")
    ap.add_argument("--source-lang", "--src-lang", dest="source_lang", metavar="LANG",
                    help="the language of the input, where the model needs it: checked "
                         f"against the model's directions{extra}")


def note_compute_type(prog: str, requested: str | None, chosen: str) -> None:
    """One stderr line saying what ``--compute-type auto`` became on this machine."""
    if requested == "auto":
        print(f"{prog}: info: {flag('compute_type')} auto: running {chosen} on this CPU",
              file=sys.stderr)


# ------------------------------------------------------------ options by field name
# The flag of each option (a DecodingConfig or LoadConfig field, or a library argument a
# message names) is "--" + its name with dashes, except these: fairseq's and Marian's
# spellings, kept where the fields got clearer names. The first names it in messages.
FLAGS = {
    "method": ("--sample",),  # only ever set to "sample": --beam K chooses greedy or beam
    "beam_size": ("--beam", "--beam-size"),
    "alpha": ("--lenpen",),
    "top_k": ("--topk",),
    "top_p": ("--topp",),
    "max_tokens": ("--max-tokens", "--batch-tokens"),
    "split_sentences": ("--no-split",),
    "restore_numbers": ("--no-restore-numbers",),
}


def flags(name: str) -> tuple[str, ...]:
    return FLAGS.get(name, ("--" + name.replace("_", "-"),))


def flag(name: str) -> str:
    """The flag that sets field ``name``: how the CLIs say what the library calls a field."""
    return flags(name)[0]


class _Flags(dict):
    def __missing__(self, name: str) -> str:
        return flag(name)


def option_help(f: dataclasses.Field, hint: Any, defaults: Any) -> str:
    """``f``'s help template with options named by flag, ``{default}`` its default (a bool:
    on/off), ``{defaults.X}`` another field's, ``{choices}`` its ``Literal`` choices."""
    value = getattr(defaults, f.name)
    shown = ("on" if value else "off") if isinstance(value, bool) else value
    return f.metadata["help"].format_map(_Flags(
        default=shown, defaults=defaults, choices=", ".join(map(str, get_args(hint)))))


def add_options(ap: argparse.ArgumentParser | Any, cls: type, skip: tuple[str, ...] = ()) -> None:
    """One flag per option of the config dataclass ``cls`` (``options_of``; not those named
    in ``skip``): dest the field's name, default None (= the dataclass's, so defaults live in
    one place), type and choices from its annotation; a bool, or a field with a ``const``,
    is a flag alone."""
    hints, defaults = typing.get_type_hints(cls), cls()
    for f in (f for f in options_of(cls) if f.name not in skip):
        hint = hints[f.name]
        kw: dict[str, Any] = {"dest": f.name, "default": None,
                              "help": option_help(f, hint, defaults)}
        if "const" in f.metadata or hint is bool:
            kw.update(action="store_const", const=f.metadata.get("const", not f.default))
        elif typing.get_origin(hint) is Literal:
            kw.update(choices=get_args(hint), metavar=f.metadata.get("metavar"))
        else:  # int or float, maybe | None; shown as its flag (--topk TOPK), not its field
            kw["type"] = next(t for t in (int, float) if t is hint or t in get_args(hint))
            kw["metavar"] = f.metadata.get("metavar", flag(f.name)[2:].replace("-", "_").upper())
        ap.add_argument(*flags(f.name), **kw)


def add_decoding_args(ap: argparse.ArgumentParser) -> None:
    """The decoding and load options (``DecodingConfig``'s and ``LoadConfig``'s, generated)
    and ``--device``: seq2seq-translate's, seq2seq-evaluate's and seq2seq-distill's."""
    g = ap.add_argument_group("decoding (defaults from DecodingConfig)")
    add_options(g, DecodingConfig)
    add_options(g, LoadConfig)
    g.add_argument("--device", default="cpu", help="torch device (default cpu)")


def decoding_from_args(args: Any) -> DecodingConfig:
    """The ``DecodingConfig`` of the options given (``FieldError`` naming them otherwise)."""
    return decoding_from_options({f.name: getattr(args, f.name, None)
                                  for f in options_of(DecodingConfig)})


def load_from_args(args: Any) -> dict[str, Any]:
    """The load options given, as ``Translator.from_checkpoint(s)`` takes them."""
    return {f.name: getattr(args, f.name, None) for f in options_of(LoadConfig)}


def ignored_options(args: Any, decoding: DecodingConfig) -> list[str]:
    """Options given that ``decoding`` does not use, each with what would use it (the CLIs
    warn: an option dropped without a word is a silently wrong result)."""
    given = {a for a in ("alpha", "patience", "stopping", "temperature", "top_k", "top_p", "seed")
             if getattr(args, a, None) is not None}
    notes = []
    if "alpha" in given and decoding.length_penalty != "gnmt":
        notes.append(f"{flag('alpha')} has no effect with {flag('length_penalty')} "
                     f"{decoding.length_penalty}; add {flag('length_penalty')} gnmt")
    if "patience" in given and (decoding.method != "beam" or decoding.stopping != "patience"):
        notes.append(f"{flag('patience')} has no effect without {flag('beam_size')} K > 1 and "
                     f"{flag('stopping')} patience")
    if "stopping" in given and decoding.method != "beam":
        notes.append(f"{flag('stopping')} has no effect without {flag('beam_size')} K > 1")
    for name in ("temperature", "top_k", "top_p", "seed"):
        if name in given and decoding.method != "sample":
            notes.append(f"{flag(name)} has no effect without {flag('method')}")
    return notes
