"""What a checkpoint's ``"seq2seq"`` entry may hold: the format number, the list of optional
entries present, and the checks of those entries (:mod:`seq2seq.checkpoint` saves, loads and
verifies the whole file).

One format number, 5, with ``"entries"``: the names of the optional entries the file has
(``averaged_from``, ``calibration``, ``directions``, ``shortlist``). A reader refuses a name it
does not know (written by a newer seq2seq) and a list that disagrees with the entries found.
Older files still load: 1 (no checksum), 2 (checksum), 3 (2 with a calibration), 4 (2 with a
shortlist, with or without a calibration), where the number said which entries were present.
"""

from __future__ import annotations

from typing import Any

import torch

from seq2seq.config import ModelConfig

FORMAT = 5
READABLE_FORMATS = (1, 2, 3, 4, 5)
ENTRIES = ("averaged_from", "calibration", "directions", "shortlist")  # optional, known


class CheckpointError(ValueError):
    """A checkpoint is missing, unreadable, corrupt or not ours (one-line message)."""


def entries_of(meta: dict[str, Any]) -> list[str]:
    """The optional entries ``meta`` holds, as format 5 lists them."""
    return sorted(k for k in ENTRIES if meta.get(k) is not None)


def check_format(meta: dict[str, Any], where: str = "checkpoint") -> int:
    """The file's format number, refused unless this version reads it; for format 5, its
    ``entries`` list checked against the entries present."""
    fmt = meta.get("format")
    if fmt not in READABLE_FORMATS or isinstance(fmt, bool):
        raise CheckpointError(f"{where}: format {fmt!r} is not one this version reads "
                              f"{list(READABLE_FORMATS)} (written by a newer seq2seq?)")
    if fmt < 5:
        return fmt
    listed = meta.get("entries")
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        raise CheckpointError(f"{where}: 'entries' must be a list of names, got {listed!r:.100}")
    unknown = sorted(set(listed) - set(ENTRIES))
    if unknown:
        raise CheckpointError(f"{where}: entries {unknown} are not ones this version reads "
                              f"{list(ENTRIES)} (written by a newer seq2seq?)")
    if sorted(listed) != entries_of(meta):
        raise CheckpointError(f"{where}: 'entries' lists {sorted(listed)} but the file holds "
                              f"{entries_of(meta)}: the file was edited or damaged after it was written")
    return fmt


def calibration_of(meta: dict[str, Any], where: str = "checkpoint") -> dict[str, Any] | None:
    """The ``calibration`` entry (``seq2seq-calibrate``), checked: ``threshold`` (outputs of
    lower confidence are "unsure") in (0, 1] and plain values; ``None`` when uncalibrated."""
    entry = meta.get("calibration")
    if entry is None:
        return None
    t = entry.get("threshold") if isinstance(entry, dict) else None
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0.0 < t <= 1.0 or not all(
            isinstance(k, str) and isinstance(v, (str, int, float)) for k, v in entry.items()):
        raise CheckpointError(f"{where}: 'calibration' must map names to plain values with a "
                              f"'threshold' in (0, 1], got {entry!r:.200}; re-run seq2seq-calibrate")
    return entry


def shortlist_of(meta: dict[str, Any], arch: ModelConfig,
                 where: str = "checkpoint") -> dict[str, Any] | None:
    """The ``shortlist`` entry (``seq2seq-shortlist``), checked: ``table`` an integer tensor
    ``(src_vocab_size, K)`` and ``frequent`` one ``(N,)``, both of target ids, besides plain
    values; ``None`` when the checkpoint has none."""
    entry = meta.get("shortlist")
    if entry is None:
        return None
    table = entry.get("table") if isinstance(entry, dict) else None
    frequent = entry.get("frequent") if isinstance(entry, dict) else None
    ok = (isinstance(table, torch.Tensor) and isinstance(frequent, torch.Tensor)
          and not table.is_floating_point() and not frequent.is_floating_point()
          and table.dim() == 2 and table.shape[0] == arch.src_vocab_size and table.shape[1] > 0
          and frequent.dim() == 1 and all(
              isinstance(k, str) and isinstance(v, (str, int, float))
              for k, v in entry.items() if k not in ("table", "frequent")))
    if ok:
        ids = torch.cat((table.reshape(-1), frequent)).long()
        ok = ids.numel() == 0 or (int(ids.min()) >= 0 and int(ids.max()) < arch.tgt_vocab_size)
    if not ok:
        raise CheckpointError(f"{where}: 'shortlist' must hold 'table', integer target ids "
                              f"({arch.src_vocab_size}, K), 'frequent', integer target ids (N,), "
                              "and plain values; re-run seq2seq-shortlist")
    return entry

