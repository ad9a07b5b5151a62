"""Plots (PNG via matplotlib's Agg canvas): attention heat-maps.

Figures are built with ``matplotlib.figure.Figure`` + ``FigureCanvasAgg`` rather than
``pyplot``: no global backend switch, no window, nothing left open (safe in servers, tests
and training callbacks).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import Tensor

from seq2seq.model import Attentions

# Every attention plot carries this text chunk, so that a later run replaces its own plot
# and nothing else that happens to have the name (a holiday photo is a PNG too).
MARK_KEY, MARK_VALUE = "seq2seq-plot", "1"


def is_own_plot(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an attention plot :func:`plot_attention` wrote (its PNG text
    chunk says so)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path, formats=["PNG"]) as image:  # reads the header chunks only
            return image.info.get(MARK_KEY) == MARK_VALUE
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError):
        return False


# ---------------------------------------------------------------- attention
def _heads(w: Tensor) -> Tensor:
    """``(1, H, L, S)`` or ``(H, L, S)`` -> ``(H, L, S)`` float on CPU."""
    w = w.detach().float().cpu()
    return w[0] if w.dim() == 4 else w


def _panels(src: Sequence[str], tgt: Sequence[str], attn: Attentions):
    """``(title, weights (H, L, S), row labels, column labels)`` per layer, in plot order."""
    tgt_in = ["<s>", *tgt[:-1]]  # decoder self-attention keys are the decoder inputs
    kinds = (
        ("encoder self", attn.encoder_self, src, src),
        ("decoder self", attn.decoder_self, tgt, tgt_in),
        ("cross", attn.decoder_cross, tgt, src),
    )
    for name, layers, rows, cols in kinds:
        for i, w in enumerate(layers):
            w = _heads(w)
            if tuple(w.shape[1:]) != (len(rows), len(cols)):
                raise ValueError(
                    f"plot_attention: {name} layer {i} weights are {tuple(w.shape[1:])} but the "
                    f"labels give ({len(rows)}, {len(cols)})"
                )
            yield f"{name} L{i}", w, rows, cols


def plot_attention(src_pieces: Sequence[str], tgt_pieces: Sequence[str], attentions: Attentions,
                   path: str | os.PathLike, dpi: int = 100) -> Path:
    """Write a grid of heat-maps to ``path`` (PNG): one row per layer of encoder self-,
    decoder self- and cross-attention, one column per head, subword labels on both axes.

    ``src_pieces``: the source pieces the encoder saw (including a trailing ``</s>`` if the
    source has one). ``tgt_pieces``: the output pieces as produced, ending with ``</s>``;
    they label the decoder queries (row i produced piece i), and the decoder's self-attention
    keys are its inputs ``<s> + tgt_pieces[:-1]``. Weights as in ``search.SearchResult``.
    """
    panels = list(_panels(list(src_pieces), list(tgt_pieces), attentions))
    if not panels:
        raise ValueError("plot_attention: no attention weights to plot")
    n_rows, n_heads = len(panels), panels[0][1].shape[0]
    longest = max(len(src_pieces), len(tgt_pieces))
    cell = min(max(2.0, 0.22 * longest + 0.8), 8.0)  # inches per heat-map: fit the labels
    fig = Figure(figsize=(cell * n_heads, cell * n_rows), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    font = max(4, min(9, int(260 / max(longest, 1))))
    axes = fig.subplots(n_rows, n_heads, squeeze=False)
    for r, (title, w, rows, cols) in enumerate(panels):
        for h in range(n_heads):
            ax = axes[r][h]
            ax.imshow(w[h].numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_title(f"{title} H{h}", fontsize=font + 1)
            # parse_math=False: a piece like "$5" is text, not a mathtext formula. A row's
            # heads share their query labels: only the first column carries them.
            ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=font, parse_math=False)
            ax.set_yticks(range(len(rows)), rows if h == 0 else [], fontsize=font, parse_math=False)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # emoji etc. lack a glyph in the default font: fine
        warnings.filterwarnings("ignore", message="Glyph .* missing from")
        fig.savefig(path, format="png", metadata={MARK_KEY: MARK_VALUE})
    return path


# ---------------------------------------------------------------- training curves
def _legend(ax, fontsize: int) -> None:
    """A legend when something is labelled: a run that ends before its first validation (or
    its first recorded step) has nothing to list, and matplotlib would warn."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=fontsize)


def plot_training_curves(runs: dict, path: str | os.PathLike) -> Path:
    """Loss (train and validation), validation BLEU and learning rate against step.

    ``runs``: one history, or ``{name: history}`` to compare runs on the same axes. A
    history is ``{"train": [{"step", "loss", "lr"}], "val": [{"step", "val_loss", "val_bleu", ...}]}``
    as recorded by :class:`seq2seq.training.callbacks.TrainingCurves`.
    """
    if "train" in runs or "val" in runs:
        runs = {"": runs}
    fig = Figure(figsize=(13, 3.6))
    FigureCanvasAgg(fig)
    ax_loss, ax_bleu, ax_lr = fig.subplots(1, 3)
    for i, (name, history) in enumerate(runs.items()):
        color = f"C{i}"
        train, val = history.get("train", []), history.get("val", [])
        label = f"{name} " if name else ""
        if train:
            steps = [r["step"] for r in train]
            ax_loss.plot(steps, [r["loss"] for r in train], color=color, lw=1, alpha=0.6, label=f"{label}train")
            ax_lr.plot(steps, [r["lr"] for r in train], color=color, lw=1, label=name or None)
        val_loss = [r for r in val if "val_loss" in r]
        if val_loss:
            ax_loss.plot([r["step"] for r in val_loss], [r["val_loss"] for r in val_loss], "o-",
                         color=color, label=f"{label}validation")
        val_bleu = [r for r in val if "val_bleu" in r]
        if val_bleu:
            ax_bleu.plot([r["step"] for r in val_bleu], [r["val_bleu"] for r in val_bleu], "o-",
                         color=color, label=name or None)
        _plot_directions(ax_bleu, val, label, color if len(runs) > 1 else None)
    for ax, title in ((ax_loss, "loss (label-smoothed CE)"), (ax_bleu, "validation BLEU (greedy)"),
                      (ax_lr, "learning rate")):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    _legend(ax_loss, fontsize=7)
    _legend(ax_bleu, fontsize=8)  # several runs, or directions; one run's mean has no label
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    return path


def _plot_directions(ax, val: list[dict], label: str, color: str | None) -> None:
    """The BLEU of each direction of a multilingual run (``val_bleu/en-de``), thin dashed
    lines beside the mean: each direction its own color, or all the run's ``color``."""
    names = sorted({k.split("/", 1)[1] for r in val for k in r if k.startswith("val_bleu/")})
    for j, direction in enumerate(names):
        points = [r for r in val if f"val_bleu/{direction}" in r]
        ax.plot([r["step"] for r in points], [r[f"val_bleu/{direction}"] for r in points], "--",
                lw=0.8, color=color or f"C{j + 1}", label=f"{label}{direction}")
