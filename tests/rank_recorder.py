"""A callback for the multi-node test (``tests/training/test_multinode.py``), loaded by ``seq2seq-train``
subprocesses from a config file: what each rank trained on and its weights."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import lightning as L
import torch


def weights_digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


class RankRecorder(L.Callback):
    """Writes ``<out>/rank<global_rank>.json``: world size, node rank, the first step, the
    weights at the start and the end, and the ``Batch.ids`` of every training batch."""

    def __init__(self, out: str) -> None:
        self.out, self.ids, self.start = Path(out), [], {}

    def on_train_start(self, trainer, pl_module) -> None:
        self.start = {"step": trainer.global_step, "weights": weights_digest(pl_module.model.state_dict())}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.ids.append(batch.ids.tolist())

    def on_train_end(self, trainer, pl_module) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        record = {
            "world_size": trainer.world_size, "node_rank": trainer.node_rank, "start": self.start,
            "end": {"step": trainer.global_step, "weights": weights_digest(pl_module.model.state_dict())},
            "ids": self.ids,
        }
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))
