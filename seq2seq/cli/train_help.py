"""The text on top of ``seq2seq-train --help``: what it trains, the shipped configs (their
own header comments), the options most runs touch (defaults read from ``seq2seq.config``) and
examples. Lightning's own help follows it for every option."""

from __future__ import annotations

import argparse
import shutil
import textwrap
import typing
from pathlib import Path

from jsonargparse import DefaultHelpFormatter

from seq2seq.config import DataConfig, ModelConfig, OptimConfig, TokenizerConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"  # in a source checkout

INTRO = """\
seq2seq-train: train an encoder-decoder Transformer for machine translation.

A run trains SentencePiece tokenizers on the training text (cached), then the model
(Lightning), validating with loss and greedy BLEU. Its checkpoints are self-contained: they
are what seq2seq-translate, -evaluate, -average, -export and -serve read as -m/--model CKPT.
Settings: YAML configs (-c/--config FILE; several merge left to right), then dotted options
that override them; --print_config shows the merged result and exits.

examples:
  seq2seq-train fit -c configs/multi30k_de_en_tiny.yaml
  seq2seq-train fit -c configs/multi30k_en_de_tiny.yaml -c configs/post_ln.yaml \\
      --trainer.default_root_dir runs/en_de_post
  seq2seq-train fit -c configs/smoke.yaml --model.arch.norm rmsnorm --print_config
  seq2seq-train fit -c ... --ckpt_path runs/X/checkpoints/last.ckpt     # resume exactly
  seq2seq-train validate -c ... --ckpt_path runs/X/checkpoints/last.ckpt
"""

# (option, example value, what it does): the Trainer options most runs set
OPTIONS = [
    ("--trainer.default_root_dir", "runs/NAME",
     "the run's folder: lightning_logs/version_N/ (metrics.csv, config.yaml, curves.json and "
     "curves.png) and checkpoints/ (last.ckpt, the 3 best by validation BLEU and the configs' "
     "step snapshots; --checkpoint.dirpath puts them elsewhere); default: the working directory"),
    ("--trainer.max_steps", "8000", "stop after this many optimizer updates (-1: no limit)"),
    ("--trainer.max_time", "00:02:00:00",
     "stop after this wall time (DD:HH:MM:SS), validating and checkpointing first"),
    ("--trainer.val_check_interval", "500",
     "validate every N training batches (with --trainer.check_val_every_n_epoch null), or "
     "every N epochs with --trainer.check_val_every_n_epoch N"),
    ("--trainer.devices", "2",
     "processes (CPU) or GPUs; with --trainer.strategy ddp each draws its own batch of "
     "--data.data.max_tokens (gloo on CPU)"),
    ("--trainer.precision", "bf16-mixed",
     "32-true (the configs' choice), bf16-mixed, 16-mixed (GPU): measure first, a CPU "
     "without bf16 units runs bf16 slower"),
    ("--trainer.accumulate_grad_batches", "2", "batches per optimizer update"),
    ("--ckpt_path", "runs/NAME/checkpoints/last.ckpt",
     "resume exactly where a run stopped: weights, optimizer, schedule, RNG, position in the "
     "epoch (mid-epoch too)"),
]

# (option prefix, config class, fields shown, what they are, the option listing all fields):
# defaults come from the class
FIELDS = [
    ("--model.arch", ModelConfig,
     ("d_model", "n_heads", "d_ff", "encoder_layers", "decoder_layers", "dropout", "norm",
      "norm_position", "positional", "share_embeddings"),
     "the network (vocabulary sizes come from the tokenizers)", "--model.arch.help"),
    ("--model.optim", OptimConfig, ("lr", "warmup_steps", "schedule", "label_smoothing"),
     "Adam and its learning-rate schedule", "--model.optim.help"),
    ("--data.data", DataConfig,
     ("corpus", "data_dir", "src_lang", "tgt_lang", "format", "train_src", "train_tgt",
      "valid_src", "valid_tgt", "max_tokens", "max_len", "cache_dir"),
     "the corpus (Multi30k by name, or text/TSV/JSONL files, or a hub dataset), the batch "
     "budget in padded tokens, the cache of tokenizers and tokenized splits", "--data.data.help"),
    ("--data.data.tokenizer", TokenizerConfig, ("model_type", "vocab_size", "joint"),
     "SentencePiece, trained on the training text", "--data.data.help"),
]


class HelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's formatter (types, defaults), keeping our description's line breaks."""


def _wrap(text: str, indent: str) -> str:
    width = min(shutil.get_terminal_size((100, 24)).columns, 100) - 2
    # break_on_hyphens off: "Pre-LN", "De->En" and file names stay whole
    return textwrap.fill(" ".join(text.split()), width, initial_indent=indent,
                         subsequent_indent=indent, break_on_hyphens=False)


def config_summaries(folder: Path = CONFIGS) -> dict[str, tuple[str, list[str]]]:
    """``{file name: (its header comment's text, its indented example lines)}``."""
    out = {}
    for path in sorted(folder.glob("*.yaml")):
        text, examples = [], []
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.startswith("#"):
                break
            if line.startswith("#  "):  # an example command: keep its relative indentation
                examples.append(line[1:].rstrip()[3:])
            else:
                text.append(line[1:].strip())
        out[path.name] = (" ".join(text), examples)
    return out


def _field(cls, name: str) -> str:
    """``name=default``, with the choices of a ``Literal`` field."""
    default = getattr(cls(), name)
    hint = typing.get_type_hints(cls)[name]
    choices = typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else ()
    value = "null" if default is None else str(default).lower() if isinstance(default, bool) else default
    return f"{name}={value}" + (f" ({'|'.join(choices)})" if choices else "")


def description() -> str:
    parts = [INTRO, "shipped configs (configs/ in the source tree):"]
    for name, (text, examples) in config_summaries().items():
        parts += [f"  {name}", _wrap(text, " " * 6), *(" " * 8 + e for e in examples)]
    parts += ["", "most used options (seq2seq-train fit --help lists all of them):"]
    for option, example, text in OPTIONS:
        parts += [f"  {option} {example}", _wrap(text, " " * 6)]
    for prefix, cls, names, text, listing in FIELDS:
        parts += [f"  {prefix}.FIELD VALUE",
                  _wrap(f"{text}; {listing} lists every field. Defaults:", " " * 6),
                  _wrap("  ".join(_field(cls, n) for n in names), " " * 8)]
    return "\n".join(parts) + "\n"


# Group titles: Lightning's come from docstrings' first lines, some cut mid-sentence.
GROUP_TITLES = {
    "trainer": "Lightning's Trainer: devices, precision, limits, validation, logging",
    "model": "the model: --model.arch.* the network, --model.optim.* the optimizer",
    "data": "the data: --data.data.* (--data.data.help lists every field)",
    "checkpoint": "checkpoints, always on (folder: <trainer.default_root_dir>/checkpoints)",
    "curves": "training curves, always on: curves.json and curves.png in the log folder",
}


# Options whose help Lightning leaves empty (their classes' docstrings do not say).
OPTION_HELP = {
    "data.data": "corpus, languages, tokenizer, batch budget (DataConfig)",
}


def annotate(parser) -> None:
    """Our titles on the parser's argument groups, our help where Lightning has none."""
    for key, title in GROUP_TITLES.items():
        if key in parser.groups:
            parser.groups[key].title = title
    for action in parser._actions:
        if action.dest in OPTION_HELP:
            action.help = OPTION_HELP[action.dest]
