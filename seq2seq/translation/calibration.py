"""A model's "unsure" threshold: a low quantile of the confidences of its own translations
of held-out Multi30k sentences (``seq2seq-calibrate``), stored in its checkpoint.

``Translator`` flags an output whose confidence (``TranslationResult.confidence``) is below
the threshold ``"unsure"``. By construction about ``quantile`` of sentences like the held-out
ones are flagged (false alarms); text unlike the training data mostly is (measured by
``scripts/experiments/unsure_rates.py``). The entry, ``{threshold, quantile, split, search, n}``, is under
the checkpoint's checksum: an edited threshold is refused on load like an edited weight.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seq2seq.checkpoint import load_checkpoint, seal
from seq2seq.config import CalibrationConfig, DecodingConfig
from seq2seq.files import save_atomic
from seq2seq.translation.translator import Translator


def confidences(translator: Translator, lines: Sequence[str]) -> list[float]:
    """The confidence of each line's output, as its ``TranslationResult`` carries it (lines
    with nothing to translate, blank or reduced to no piece, left out)."""
    return [r.confidence for r in translator.translate_full(list(lines)) if r.tokens]


def threshold_of(values: Sequence[float], quantile: float) -> float:
    """The ``quantile`` of ``values`` (numpy's default, linear interpolation)."""
    if not len(values):
        raise ValueError("no confidences to calibrate on")
    return float(np.quantile(np.asarray(values, dtype=np.float64), quantile))


def split_lines(pair: tuple[str | None, str | None], cfg: CalibrationConfig,
                where: str = "checkpoint") -> list[str]:
    """The source lines of the shipped Multi30k ``cfg.split`` in the model's direction."""
    from seq2seq.config import DataConfig
    from seq2seq.data.sources import multi30k_files, read_lines  # datasets: slow to import

    src, tgt = pair
    if src is None or tgt is None:
        raise ValueError(f"{where}: does not record its language pair, so the split's source "
                         "language is unknown")
    try:
        (path,) = multi30k_files(DataConfig(src_lang=src, tgt_lang=tgt), cfg.split,
                                 [(src, "src_lang")])
    except ValueError as e:  # a language Multi30k lacks
        raise ValueError(f"{where} translates {src}-{tgt}: {e}") from None
    lines = read_lines(path)
    return lines[: cfg.limit] if cfg.limit else lines


def calibrate(ckpt: dict[str, Any], cfg: CalibrationConfig | None = None,
              where: str = "checkpoint") -> dict[str, Any]:
    """The ``calibration`` entry of a loaded checkpoint: the default decoding (greedy)
    translates ``cfg.split``; the threshold is ``cfg.quantile`` of the confidences. A
    multilingual model is refused: its directions' confidences differ, one threshold
    would not fit them all."""
    cfg = cfg or CalibrationConfig()
    meta = ckpt["seq2seq"]
    if meta.get("directions") is not None:
        raise ValueError(f"{where}: a multilingual model; calibration is for a model of one "
                         "direction (its directions' confidences differ)")
    decoding = DecodingConfig()
    translator = Translator.from_loaded(ckpt, where, decoding)
    values = confidences(translator, split_lines(translator.pair, cfg, where))
    return {"threshold": threshold_of(values, cfg.quantile), "quantile": cfg.quantile,
            "split": cfg.split, "search": decoding.method, "n": len(values)}


def calibrate_file(path: str | os.PathLike, cfg: CalibrationConfig | None = None,
                   out: str | os.PathLike | None = None) -> dict[str, Any]:
    """Calibrate the checkpoint at ``path`` and write it, with its ``calibration`` entry
    under the checksum, atomically to ``out`` (default: ``path`` itself, keeping its
    permission bits). Everything else in the file is written back as it was loaded (the
    weights bit for bit). Returns the entry."""
    ckpt = load_checkpoint(path)
    where = f"checkpoint {path}"
    entry = calibrate(ckpt, cfg, where)
    ckpt["seq2seq"]["calibration"] = entry
    target = Path(out if out is not None else path)
    mode = target.stat().st_mode & 0o7777 if target.exists() else None
    save_atomic(seal(ckpt), target, mode)
    return entry
