"""Plots (PNG via matplotlib's Agg canvas): attention heat-maps.

Figures are built with ``matplotlib.figure.Figure`` + ``FigureCanvasAgg`` rather than
``pyplot``: no global backend switch, no window, nothing left open (safe in servers, tests
and training callbacks).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.transforms import ScaledTranslation
from torch import Tensor

from seq2seq.files import write_atomic
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
    with _missing_glyphs_ok():
        fig = attention_figure(src_pieces, tgt_pieces, attentions, dpi)
        fig.canvas.draw()
    return _save_png(_rgb(fig.canvas), Path(path))


def attention_figure(src_pieces: Sequence[str], tgt_pieces: Sequence[str],
                     attentions: Attentions, dpi: int = 100) -> Figure:
    """The figure :func:`plot_attention` writes (on an Agg canvas, not drawn yet)."""
    panels = list(_panels(list(src_pieces), list(tgt_pieces), attentions))
    if not panels:
        raise ValueError("plot_attention: no attention weights to plot")
    fig = Figure(dpi=dpi)
    canvas = FigureCanvasAgg(fig)
    with _missing_glyphs_ok():
        grid = _Grid(panels, canvas.get_renderer(), dpi)
    fig.set_size_inches(grid.width / 72, grid.height / 72)
    for r, (title, w, rows, cols) in enumerate(panels):
        for h in range(grid.heads):
            _heat_map(fig, grid, r, h, f"{title} H{h}", w[h], rows if h == 0 else None, cols)
    return fig


@contextmanager
def _missing_glyphs_ok() -> Iterator[None]:
    """Emoji etc. lack a glyph in the default font: a box is drawn, no warning needed."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from")
        yield


# Sizes in points (1/72 inch). The grid is laid out here, from the labels' measured extents,
# not by matplotlib's constrained layout: that draws the figure a second time and measures
# every label of every panel again (3/4 of the plotting time of a short sentence).
LABEL_PAD, TITLE_PAD, GAP, MARGIN = 2.0, 4.0, 10.0, 6.0
MIN_SIDE, MAX_SIDE = 100.0, 576.0  # a heat-map's side: 1.4 to 8 inches
LINE = 1.5  # label pitch in line heights: legible, never touching


class _Grid:
    """Where every heat-map and label goes, in points from the figure's top left: one
    heat-map size for all panels, one label font, every column's labels measured."""

    def __init__(self, panels, renderer, dpi: float):
        self.rows, self.heads = len(panels), panels[0][1].shape[0]
        longest = max(max(len(p[2]), len(p[3])) for p in panels)
        self.font = max(4, min(9, int(260 / max(longest, 1))))
        px = 72.0 / dpi  # the renderer measures in pixels

        def size(texts, points):
            prop = FontProperties(size=points)
            lp = renderer.get_text_width_height_descent("lp", prop, ismath=False)[1]
            dims = [renderer.get_text_width_height_descent(t, prop, ismath=False)[:2]
                    for t in set(texts) or {""}]
            return max(w for w, _ in dims) * px, max(lp, *(h for _, h in dims)) * px

        self.col_w, self.line = size([c for p in panels for c in p[3]], self.font)
        self.row_w = size([r for p in panels for r in p[2]], self.font)[0]
        title_w, self.title_h = size([f"{p[0]} H{self.heads - 1}" for p in panels], self.font + 1)
        self.side = min(max(MIN_SIDE, LINE * self.line * longest), MAX_SIDE)
        # Past MAX_SIDE, every step-th label: all of them would overlap and none be legible.
        self.step = max(1, math.ceil(LINE * self.line * longest / self.side))
        over = max(0.0, (title_w - self.side) / 2)  # a title wider than its heat-map
        self.left = MARGIN + max(self.row_w + LABEL_PAD, over)
        self.pitch_x = self.side + 2 * over + GAP
        self.pitch_y = TITLE_PAD + self.title_h + self.side + LABEL_PAD + self.col_w + GAP
        self.width = self.left + (self.heads - 1) * self.pitch_x + self.side + over + MARGIN
        self.height = MARGIN + self.rows * self.pitch_y - GAP + MARGIN

    def rect(self, r: int, h: int) -> tuple[float, float, float, float]:
        """Heat-map ``(r, h)`` as ``add_axes`` takes it: left, bottom, width, height in
        figure fractions."""
        x = self.left + h * self.pitch_x
        top = MARGIN + r * self.pitch_y + TITLE_PAD + self.title_h
        return (x / self.width, 1 - (top + self.side) / self.height,
                self.side / self.width, self.side / self.height)


def _heat_map(fig, grid: _Grid, r: int, h: int, title: str, w: Tensor,
              rows: Sequence[str] | None, cols: Sequence[str]) -> None:
    """One panel: weights ``w (L, S)``, its title, column labels below and (first head
    only: a row's heads share them) row labels on the left, as plain text artists (a
    matplotlib tick is five artists and costs ten times a text)."""
    ax = fig.add_axes(grid.rect(r, h))
    ax.imshow(w.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto",
              interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=grid.font + 1, pad=TITLE_PAD)
    # parse_math=False: a piece like "$5" is text, not a mathtext formula.
    style = {"fontsize": grid.font, "parse_math": False}
    below = ax.get_xaxis_transform() + ScaledTranslation(0, -LABEL_PAD / 72, fig.dpi_scale_trans)
    for i in range(0, len(cols), grid.step):
        ax.text(i, 0, cols[i], transform=below, rotation=90, ha="center", va="top",
                rotation_mode="default", **style)
    if rows is not None:
        left = ax.get_yaxis_transform() + ScaledTranslation(-LABEL_PAD / 72, 0, fig.dpi_scale_trans)
        for i in range(0, len(rows), grid.step):
            ax.text(0, i, rows[i], transform=left, ha="right", va="center", **style)


def _rgb(canvas):
    """The drawn canvas as an RGB ``PIL`` image (the figure is opaque: no alpha to store)."""
    from PIL import Image

    return Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba(),
                            "raw", "RGBA", 0, 1).convert("RGB")


def _save_png(image, path: Path) -> Path:
    """``image`` as a PNG marked as ours, written atomically (a reader never sees half a
    file). Compression level 1: flat heat-map cells compress nearly as well as at the
    default 6, in a fraction of the time."""
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text(MARK_KEY, MARK_VALUE)
    write_atomic(path, lambda f: image.save(f, format="PNG", pnginfo=info, compress_level=1))
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
