"""``seq2seq-train``: LightningCLI over :class:`Seq2SeqModule` and :class:`Seq2SeqDataModule`.

    seq2seq-train fit --config configs/multi30k_de_en_tiny.yaml [--model.arch.norm_position pre]
    seq2seq-train fit --config ... --ckpt_path runs/X/checkpoints/last.ckpt     # exact resume
    seq2seq-train fit --config ... --trainer.devices 2 --trainer.strategy ddp   # multi-device
    seq2seq-train fit --config ... --trainer.default_root_dir runs/Y            # checkpoints: runs/Y/checkpoints

Checkpoints (last.ckpt, the best by validation BLEU, and the step snapshots of any other
``ModelCheckpoint`` without a ``dirpath`` of its own) all go to one folder per run,
``--checkpoint.dirpath``, which defaults to ``<trainer.default_root_dir>/checkpoints`` (the
working directory's ``checkpoints`` when no root dir is set either).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
import warnings

import torch
from lightning.pytorch.callbacks import (
    LearningRateMonitor,
    ModelCheckpoint,
    ProgressBar,
    ThroughputMonitor,
)
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger

import seq2seq.runtime as runtime
from seq2seq.cli.train_checks import (
    REFUSALS,
    StartupLogs,
    bf16_warning,
    check_ckpt_path,
    check_config_files,
    check_run_config,
    check_seed,
    fail,
    prepare_fit,
    refuse_yaml_aliases,
    release_run_folders,
    use_given_tokenizers,
)
from seq2seq.cli.train_help import HelpFormatter, annotate, description
from seq2seq.data.datamodule import Seq2SeqDataModule
from seq2seq.training.callbacks import (
    AtomicCheckpointIO,
    EpochProgressBar,
    TrainingCurves,
    batch_sentences,
    batch_target_tokens,
)
from seq2seq.training.module import Seq2SeqModule


class Seq2SeqCLI(LightningCLI):
    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        # test and predict need test_step/predict_step, which the module does not have
        return {k: v for k, v in LightningCLI.subcommands().items() if k in ("fit", "validate")}

    def add_arguments_to_parser(self, parser) -> None:
        # Always-on callbacks, configurable as --checkpoint.* and --curves.*
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val_bleu",
                "checkpoint.mode": "max",
                "checkpoint.save_last": True,
                "checkpoint.save_top_k": 3,
                "checkpoint.filename": "step{step:06d}-bleu{val_bleu:.2f}",
                "checkpoint.auto_insert_metric_name": False,
                # a resumed run that saves a step again replaces that (identical) snapshot
                # rather than adding step...-v1.ckpt, which averaging would count twice
                "checkpoint.enable_version_counter": False,
            }
        )
        parser.add_lightning_class_args(TrainingCurves, "curves")
        annotate(parser)

    def init_parser(self, **kwargs):
        parser = super().init_parser(**kwargs)
        parser.exit_on_error = False  # main() prints parse errors on one line
        return parser

    def _parse_ckpt_path(self) -> None:
        # Lightning loads --ckpt_path here to read hyper-parameters: verify it first
        if self.config.get("subcommand"):
            check_ckpt_path(self.config[self.config.subcommand].get("ckpt_path"))
        super()._parse_ckpt_path()

    def _set_seed(self) -> None:
        check_seed(self._get(self.config, "seed_everything"))
        super()._set_seed()

    def before_fit(self) -> None:
        ckpt_path = self.config[self.subcommand].get("ckpt_path")
        prepare_fit(self.model, self.datamodule, self.trainer, ckpt_path)

    def after_fit(self) -> None:
        release_run_folders()

    def before_validate(self) -> None:
        use_given_tokenizers(self.model, self.datamodule)

    def before_instantiate_classes(self) -> None:
        # Checkpoints follow the run's root dir, as Lightning users expect: with a fixed
        # dirpath in the configs, --trainer.default_root_dir alone wrote into another run.
        config = self.config[self.subcommand] if self.subcommand else self.config
        if config.get("checkpoint.dirpath") is None:
            root = config.get("trainer.default_root_dir") or os.getcwd()  # Lightning's default
            config["checkpoint.dirpath"] = os.path.join(root, "checkpoints")
        check_run_config(config)
        if warning := bf16_warning(config):
            print(warning, file=sys.stderr)

    def instantiate_trainer(self, **kwargs):
        config = self._get(self.config_init, "trainer", default={})
        trainer = super().instantiate_trainer(**{**quiet_defaults(config), **kwargs})
        one_checkpoint_folder(trainer)
        # atomic writes + weights_only reads for every checkpoint the Trainer touches
        trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        if trainer.logger is None:  # --trainer.logger false: the lr monitor would refuse to run
            trainer.callbacks = [c for c in trainer.callbacks if not isinstance(c, LearningRateMonitor)]
        return trainer


def one_checkpoint_folder(trainer) -> None:
    """Every ``ModelCheckpoint`` without a folder of its own (the shipped configs' step
    snapshots) writes beside ``last.ckpt``, in ``--checkpoint.dirpath``: Lightning would put it
    in the logger's ``lightning_logs/version_N/checkpoints``, a new folder on every resume."""
    ours = next((c.dirpath for c in trainer.checkpoint_callbacks if c.dirpath), None)
    for callback in trainer.checkpoint_callbacks:
        if callback.dirpath is None:
            callback.dirpath = ours


def _installed(*packages: str) -> bool:
    return any(importlib.util.find_spec(p) is not None for p in packages)


def quiet_defaults(trainer_config) -> dict:
    """Lightning's defaults without their noise: the CSV logger it falls back to without
    TensorBoard (announced by a notice on every run), and its rich progress bar with an
    epoch count that makes sense in a run bounded by ``max_steps`` (not "Epoch 0/-2")."""
    extra = {}
    if trainer_config.get("logger") in (None, True) and not _installed("tensorboard", "tensorboardX"):
        extra["logger"] = CSVLogger(trainer_config.get("default_root_dir") or os.getcwd())
    callbacks = trainer_config.get("callbacks") or []
    callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
    wants_bar = trainer_config.get("enable_progress_bar") is not False
    if wants_bar and _installed("rich") and not any(isinstance(c, ProgressBar) for c in callbacks):
        extra["callbacks"] = [*callbacks, EpochProgressBar()]
    return extra


class _DropAdvertisement(logging.Filter):
    """Lightning logs a cloud-logger advertisement at every start."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("💡 Tip")


def quiet_lightning() -> None:
    """Silence what we cannot fix at its cause, narrowly by message."""
    # lightning's own pytree helper on torch >= 2.10; nothing a user can act on
    warnings.filterwarnings("ignore", message=re.escape("`isinstance(treespec, LeafSpec)` is deprecated"))
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(_DropAdvertisement())


def build_cli(args: list[str] | None = None, run: bool = True,
              startup: StartupLogs | None = None) -> Seq2SeqCLI:
    """The CLI object; ``run=False`` (no subcommand) only builds the classes (tests);
    ``startup`` releases Lightning's start-up lines once fit starts."""
    refuse_yaml_aliases()
    help_kwargs = {"description": description(), "formatter_class": HelpFormatter}
    return Seq2SeqCLI(
        Seq2SeqModule,
        Seq2SeqDataModule,
        # the optimizer is --model.optim (configure_optimizers): no --optimizer/--lr_scheduler
        auto_configure_optimizers=False,
        parser_kwargs={**help_kwargs, "prog": "seq2seq-train", "fit": help_kwargs,
                       "validate": help_kwargs},
        trainer_defaults={
            # our token-budget sampler shards itself per rank; Lightning must not replace it
            "use_distributed_sampler": False,
            "callbacks": [
                LearningRateMonitor(logging_interval="step"),
                ThroughputMonitor(batch_sentences, batch_target_tokens, window_size=20),  # items_per_sec = tgt tok/s
                *([startup] if startup else []),
            ],
        },
        save_config_kwargs={"overwrite": True},
        args=args,
        run=run,
    )


def main(args: list[str] | None = None) -> None:
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # hub corpora still work when online
    # Our sampler does resume mid-epoch (Seq2SeqModule.on_train_start skips the consumed
    # batches), which Lightning cannot see from the DataLoader type.
    warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch")
    quiet_lightning()
    runtime.start()  # threads from the cores this process can get now, then follow the load
    startup = StartupLogs()
    try:
        check_config_files(args)
        build_cli(args, startup=startup)
    except REFUSALS as e:  # bad options, files or checkpoints: one line, exit status 2
        fail(e, args)
    finally:
        release_run_folders()  # the OS would at exit; in-process callers (tests) need it now
        startup.close()
        # Tear gloo down before interpreter exit: left to atexit, a rank can abort with
        # "terminate called without an active exception".
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
