"""The attention plot's layout, read back from the renderer: every title and label lies
inside the figure, touches no heat-map and no other text, for short and long sentences and
several layer and head counts; and the check itself catches a layout that clips or
overlaps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.text import Text

from seq2seq import plotting
from seq2seq.model import Attentions
from seq2seq.plotting import attention_figure

pytestmark = pytest.mark.filterwarnings("ignore:Glyph .* missing from")  # the emoji piece

SHORT_SRC = ["▁Zwei", "▁Männer", "▁spielen", "▁Fußball", ".", "</s>"]
SHORT_TGT = ["▁Two", "▁men", "▁playing", "▁soccer", ".", "</s>"]
WORDS = ("▁Ein", "▁Feuerwehr", "mann", "▁klettert", "▁auf", "▁die", "▁Leiter", "▁$5", "🐶",
         "▁Donaudampfschifffahrtsgesellschaft", ",", "▁während", "▁zwei", "▁Kinder", "▁zusehen")


def _pieces(n: int, offset: int = 0) -> list[str]:
    return [WORDS[(i + offset) % len(WORDS)] for i in range(n - 1)] + ["</s>"]


def _attention(src: int, tgt: int, enc: int, dec: int, heads: int) -> Attentions:
    g = torch.Generator().manual_seed(src * 100 + tgt)

    def weights(rows, cols):
        return torch.rand(1, heads, rows, cols, generator=g).softmax(-1)

    return Attentions([weights(src, src) for _ in range(enc)],
                      [weights(tgt, tgt) for _ in range(dec)],
                      [weights(tgt, src) for _ in range(dec)])


def layout_problems(fig) -> list[str]:
    """What is wrong with the drawn figure's layout: a text (title, label) outside the
    figure, over a heat-map, or over another text; empty when the layout is right."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text()]
    box = np.array([t.get_window_extent(renderer).extents for t in texts])  # x0, y0, x1, y1
    maps = np.array([ax.get_window_extent(renderer).extents for ax in fig.axes])
    width, height = fig.canvas.get_width_height()
    tol = 0.5  # pixels: touching is not overlapping
    problems = [f"{t.get_text()!r} outside the figure {b.round(1)}" for t, b in zip(texts, box)
                if b[0] < -tol or b[1] < -tol or b[2] > width + tol or b[3] > height + tol]

    def overlaps(a, b):  # every box of a against every box of b
        return ((a[:, None, 0] < b[None, :, 2] - tol) & (b[None, :, 0] < a[:, None, 2] - tol)
                & (a[:, None, 1] < b[None, :, 3] - tol) & (b[None, :, 1] < a[:, None, 3] - tol))

    for i, j in zip(*np.nonzero(overlaps(box, maps))):
        problems.append(f"{texts[i].get_text()!r} over heat-map {fig.axes[j].get_title()!r}")
    for i, j in zip(*np.nonzero(np.triu(overlaps(box, box), 1))):
        problems.append(f"{texts[i].get_text()!r} over {texts[j].get_text()!r}")
    return problems


CASES = {  # sentence lengths (pieces), layers (encoder, decoder), heads
    "short, 2+2 layers, 4 heads": (SHORT_SRC, SHORT_TGT, 2, 2, 4),
    "short, 1+1 layer, 1 head": (SHORT_SRC, SHORT_TGT, 1, 1, 1),
    "30 pieces, 3+2 layers, 3 heads": (_pieces(30), _pieces(32, 3), 3, 2, 3),
    "120 pieces, 1+1 layer, 2 heads": (_pieces(120), _pieces(110, 5), 1, 1, 2),
}


@pytest.mark.parametrize("case", CASES)
def test_titles_and_labels_clear_of_each_other_and_inside(case):
    src, tgt, enc, dec, heads = CASES[case]
    fig = attention_figure(src, tgt, _attention(len(src), len(tgt), enc, dec, heads))
    assert len(fig.axes) == (enc + 2 * dec) * heads
    assert layout_problems(fig) == []
    # ... with the labels there: each piece under every heat-map, row labels beside each
    # row's first heat-map; past the longest side, every k-th (all could not be legible).
    for ax in fig.axes:
        title, labels = ax.get_title(), [t.get_text() for t in ax.texts]
        cols = ["<s>", *tgt[:-1]] if "decoder self" in title else src
        rows = src if "encoder" in title else tgt
        step = 1 if len(src) < 60 else \
            next(k for k in range(2, 10) if labels[:len(cols[::k])] == cols[::k])
        assert labels == cols[::step] + (rows[::step] if title.endswith(" H0") else [])


def test_titles_wider_than_their_heat_maps(monkeypatch):
    """Small heat-maps (many layers and heads make titles like "decoder self L11 H15"
    wider than a short sentence's heat-map): the titles keep their neighbours' distance."""
    monkeypatch.setattr(plotting, "MIN_SIDE", 40.0)
    src, tgt = ["▁Ja", ".", "</s>"], ["▁Yes", "</s>"]
    fig = attention_figure(src, tgt, _attention(len(src), len(tgt), 1, 1, 4))
    assert fig.axes[0].bbox.width < fig.axes[0].title.get_window_extent().width
    assert layout_problems(fig) == []


@pytest.mark.parametrize(("name", "value"), [
    ("GAP", -30.0),  # rows pushed together: labels over the next row's titles and heat-maps
    ("MARGIN", -20.0),  # row labels and titles cut off at the edges
    ("LINE", 0.6),  # labels closer than their height: over each other
    ("LABEL_PAD", -15.0),  # labels pulled onto their own heat-map
])
def test_the_check_catches_a_broken_layout(monkeypatch, name, value):
    monkeypatch.setattr(plotting, name, value)
    src, tgt = _pieces(30), _pieces(30, 2)
    fig = attention_figure(src, tgt, _attention(len(src), len(tgt), 1, 1, 1))
    assert layout_problems(fig)


def test_the_written_plot_is_that_figure(tmp_path):
    """The PNG holds the figure's pixels (RGB, the figure is opaque) and is marked as ours."""
    from PIL import Image

    attn = _attention(len(SHORT_SRC), len(SHORT_TGT), 1, 1, 2)
    path = plotting.plot_attention(SHORT_SRC, SHORT_TGT, attn, tmp_path / "sub" / "a.png")
    fig = attention_figure(SHORT_SRC, SHORT_TGT, attn)
    fig.canvas.draw()
    drawn = np.asarray(fig.canvas.buffer_rgba())[..., :3]
    with Image.open(path) as image:
        assert image.info[plotting.MARK_KEY] == plotting.MARK_VALUE
        assert np.array_equal(np.asarray(image.convert("RGB")), drawn)
    assert plotting.is_own_plot(path) and list(tmp_path.joinpath("sub").iterdir()) == [path]


@pytest.mark.parametrize("history", [
    {"train": [], "val": []},
    {"train": [{"step": 10, "loss": 5.0, "lr": 1e-3}], "val": []},
    {"a": {"train": [], "val": []}, "b": {"train": [], "val": [{"step": 5, "val_loss": 4.0}]}},
], ids=["empty", "train-only", "two-runs-no-bleu"])
def test_training_curves_plot_quietly(history, tmp_path):
    """Curves of runs that ended before anything (or before validation BLEU) was recorded:
    drawn without matplotlib's "No artists with labels" warning."""
    import warnings

    from seq2seq.plotting import plot_training_curves

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = plot_training_curves(history, tmp_path / "curves.png")
    assert path.stat().st_size > 0
