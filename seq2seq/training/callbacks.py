"""Lightning plug-ins of our own: atomic, ``weights_only`` checkpoint I/O, training curves, the
rich progress bar's epoch count and a bar over a whole run's updates."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from lightning.pytorch.plugins.io import TorchCheckpointIO

from seq2seq.checkpoint import (
    CheckpointError,
    is_training_checkpoint,
    load_checkpoint,
    save_atomic,
)


def batch_sentences(batch) -> int:
    return len(batch)


def batch_target_tokens(batch) -> int:
    """For ``ThroughputMonitor``: its ``items_per_sec`` is then target tokens per second."""
    return int(batch.n_tgt_tokens)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes through a temporary file + rename (never a half-written ``last.ckpt``) and
    reads with ``torch.load(weights_only=True)`` (no arbitrary unpickling)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        save_atomic(checkpoint, path)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict[str, Any]:
        return load_training_checkpoint(path)


def load_training_checkpoint(path) -> dict[str, Any]:
    """A verified checkpoint with Lightning's training state (what ``--ckpt_path`` resumes);
    an inference-only one (averaged, converted, ``save_model``) is refused, pointing to the
    option that starts from its weights instead."""
    ckpt = load_checkpoint(path)
    if not is_training_checkpoint(ckpt):
        raise CheckpointError(
            f"--ckpt_path {path}: an inference-only checkpoint (no optimizer or loop state: "
            "averaged, converted or saved for translation) cannot be resumed; to train on from "
            f"its weights (fresh optimizer, its tokenizers) use --model.init_from {path}")
    return ckpt


class TrainingCurves(L.Callback):
    """Records loss, learning rate and validation metrics; at the end of fit writes
    ``curves.json`` and ``curves.png`` next to the logs.

    Args:
        every_n_steps: record the training loss and lr every N optimizer steps.
    """

    def __init__(self, every_n_steps: int = 50):
        if not every_n_steps >= 1:
            raise ValueError(f"--curves.every_n_steps must be >= 1, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.history: dict[str, list] = {"train": [], "val": []}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % self.every_n_steps or not isinstance(outputs, dict):
            return
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        self.history["train"].append({"step": step, "loss": float(outputs["loss"]), "lr": lr})

    def on_validation_end(self, trainer, pl_module) -> None:
        # after the module's on_validation_epoch_end has logged BLEU
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val_")}
        self.history["val"].append({"step": trainer.global_step, **metrics})

    def state_dict(self) -> dict[str, Any]:
        return {"history": json.dumps(self.history)}  # a string: weights_only-safe

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.history = json.loads(state_dict["history"])

    def on_fit_end(self, trainer, pl_module) -> None:
        self._write(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if trainer.world_size == 1:  # Ctrl-C or a crash: keep the curves so far
            self._write(trainer)

    def _write(self, trainer) -> None:
        out = Path(trainer.log_dir or trainer.default_root_dir)  # a collective: every rank asks
        if not trainer.is_global_zero:
            return
        out.mkdir(parents=True, exist_ok=True)
        (out / "curves.json").write_text(json.dumps(self.history, indent=1))
        from seq2seq.plotting import plot_training_curves

        plot_training_curves(self.history, out / "curves.png")


def last_epoch(trainer) -> int | None:
    """The last epoch index the run can reach: ``max_epochs - 1``, or from ``max_steps`` and
    the batches per epoch when steps bound the run (Lightning then sets ``max_epochs=-1``);
    None when unbounded or the epoch length is unknown."""
    bounds = []
    if trainer.max_epochs is not None and trainer.max_epochs >= 0:
        bounds.append(trainer.max_epochs - 1)
    batches = trainer.num_training_batches
    if trainer.max_steps > 0 and 0 < batches < float("inf"):
        steps_per_epoch = max(int(batches) // trainer.accumulate_grad_batches, 1)
        bounds.append(math.ceil(trainer.max_steps / steps_per_epoch) - 1)
    return min(bounds) if bounds else None


class EpochProgressBar(RichProgressBar):
    """Lightning's rich bar, titled "Epoch 3/66" from :func:`last_epoch`: its own title is
    ``max_epochs - 1``, which reads "Epoch 0/-2" in a run bounded by ``max_steps``."""

    def _get_train_description(self, current_epoch: int) -> str:
        last = last_epoch(self.trainer)
        title = f"Epoch {current_epoch}" + (f"/{last}" if last is not None else "")
        return f"{title:{len(self.validation_description)}}"  # padded as Lightning's


class UpdatesProgressBar(TQDMProgressBar):
    """One bar over the run's optimizer updates (``trainer.max_steps``) with the time left,
    instead of one bar per epoch: a run bounded by updates (the README's main job) then says
    how long it will take on this machine. Validation keeps Lightning's own bar; its time
    counts in the average rate, so the estimate includes it."""

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        bar = self.train_progress_bar
        bar.total = trainer.max_steps if trainer.max_steps > 0 else None
        bar.initial = bar.n = trainer.global_step  # a resumed run: the rate counts new updates
        bar.set_description("Updates")

    def on_train_epoch_start(self, trainer, *_) -> None:
        self.train_progress_bar.set_description(f"Updates (epoch {trainer.current_epoch})")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        bar, n = self.train_progress_bar, trainer.global_step
        if not bar.disable and self._should_update(n, bar.total or 0):
            bar.n = n
            bar.set_postfix(self.get_metrics(trainer, pl_module))  # also refreshes

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if not self.train_progress_bar.disable:
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))
