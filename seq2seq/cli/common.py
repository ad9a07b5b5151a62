"""What every ``seq2seq-*`` command does the same way: one-line errors, exit status 2, and
the trained model given as ``-m/--model CKPT``."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any


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
        f"{prog}: warning: {' '.join(str(message).split())}", file=sys.stderr)
    try:
        runtime.start()  # threads from the cores this process can get now (seq2seq.runtime)
        run(args)
    except BrokenPipeError:  # `| head`: the reader left; not an error (an OSError: first)
        sys.stdout = None  # nothing more to flush at exit
        sys.exit(0)
    except KeyboardInterrupt:  # Ctrl-C / SIGINT: the user's choice, not an error to explain
        sys.exit(130)  # 128 + SIGINT, as shells report it
    except (ValueError, OSError) as e:
        msg = " ".join(str(e).split())  # one line, whatever the exception text
        print(f"{prog}: error: {msg}", file=sys.stderr)
        sys.exit(2)
    finally:
        warnings.showwarning = shown


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


def add_compute_type_argument(ap: argparse.ArgumentParser | Any) -> None:
    """``--compute-type`` (dest ``compute_type``; None = ``DecodingConfig``'s default): how
    the model's linear layers multiply, set once when the model loads."""
    from typing import get_args

    from seq2seq.config.decoding import ComputeType, DecodingConfig

    ap.add_argument("--compute-type", choices=get_args(ComputeType), metavar="TYPE",
                    help=f"{', '.join(get_args(ComputeType))}: the linear layers' arithmetic "
                         "(CTranslate2's names; int8: weights per channel, activations per row; "
                         "bfloat16: needs AVX-512 BF16 or AMX; auto: the fastest this CPU runs "
                         f"natively for the model's size; default {DecodingConfig().compute_type})")


def add_shortlist_argument(ap: argparse.ArgumentParser | Any) -> None:
    """``--shortlist`` (dest ``shortlist``): decode over each batch's candidates of the
    checkpoint's lexical table (``seq2seq-shortlist``), set once when the model loads."""
    ap.add_argument("--shortlist", action="store_true", default=None,
                    help="compute each batch's output only over the target pieces its source "
                         "pieces can produce (the checkpoint's table: seq2seq-shortlist); "
                         "computes fewer output rows; changes some outputs (default off)")


def add_compile_argument(ap: argparse.ArgumentParser | Any) -> None:
    """``--compile`` (dest ``compile``): the decoder step compiled ahead of time, set once
    when the model loads (``model/compiled.py``)."""
    ap.add_argument("--compile", action="store_true", default=None,
                    help="compile the one-token decoder step with the C++ compiler "
                         "(AOTInductor) once per model and beam width, cached on disk; same "
                         "outputs, faster steps; float32 and one model only; without a "
                         "compiler: decoded eagerly, with a note (default off)")


def note_compute_type(prog: str, requested: str | None, chosen: str) -> None:
    """One stderr line saying what ``--compute-type auto`` became on this machine."""
    if requested == "auto":
        print(f"{prog}: info: --compute-type auto: running {chosen} on this CPU", file=sys.stderr)
