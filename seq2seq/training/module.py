"""The LightningModule: loss, optimizer + warmup, validation BLEU, checkpoint contents.

Everything around it (Trainer, precision, clipping, accumulation, DDP, checkpoint
callbacks, early stopping) is Lightning's own; see ``seq2seq/cli/train.py``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import lightning as L
import torch

import seq2seq.runtime as runtime
from seq2seq.checkpoint import (
    CheckpointError,
    build_model,
    config_of,
    load_checkpoint,
    metadata,
    seal,
)
from seq2seq.config import ConfigError, DecodingConfig, ModelConfig, OptimConfig, from_dict, to_dict
from seq2seq.directions import Directions, different_directions, directions_of
from seq2seq.metrics import bleu, chrf
from seq2seq.model import Seq2Seq
from seq2seq.training.flops import batch_flops
from seq2seq.training.loss import (
    fused_projection_loss,
    fused_rdrop_loss,
    label_smoothed_loss,
    rdrop_loss,
)


def lr_lambda(optim: OptimConfig, d_model: int):
    """Multiplier of ``optim.lr`` at optimizer step ``s`` (0-based; we use s + 1).

    noam (the chapter): ``d_model^-0.5 * min(s^-0.5, s * warmup^-1.5)``, scaled by ``lr``.
    inverse_sqrt (fairseq): linear warmup to ``lr``, then ``lr * sqrt(decay_start / s)``.
    constant: linear warmup to ``lr``, then flat.
    """
    w = optim.warmup_steps
    decay_start = optim.decay_start if optim.decay_start is not None else max(w, 1)

    def noam(step: int) -> float:
        s = step + 1
        return d_model**-0.5 * min(s**-0.5, s * max(w, 1) ** -1.5)

    def warmup(step: int) -> float:
        s = step + 1
        return min(1.0, s / w) if w > 0 else 1.0

    def inverse_sqrt(step: int) -> float:
        s = step + 1
        return warmup(step) * min(1.0, math.sqrt(decay_start / s))

    return {"noam": noam, "inverse_sqrt": inverse_sqrt, "constant": warmup}[optim.schedule]


# Fields of ``ModelConfig`` a run may change when it starts from trained weights.
_TRAINING_ONLY = ("dropout", "attention_dropout", "activation_dropout")


def _same_run(meta: dict, tokenizers, langs: tuple[str, str] | None, where: str,
              directions: Directions | None = None) -> None:
    """Refuse weights trained with other tokenizers, another language pair or other
    directions than this run's data: training on would relabel them (same-sized
    vocabularies fit silently)."""
    saved = [meta["tokenizers"][side]["sha256"] for side in ("src", "tgt")]
    ours = [tokenizers.src.fingerprint, tokenizers.tgt.fingerprint]
    if saved != ours:
        raise CheckpointError(
            f"{where} was trained with other tokenizers (sha256 {saved[0][:12]}...) than this "
            f"run's data (sha256 {ours[0][:12]}...); keep the run's data and tokenizer "
            "settings, or start from those weights with --model.init_from (their tokenizers)")
    pair = (meta.get("src_lang"), meta.get("tgt_lang"))
    if langs is not None and None not in pair and pair != tuple(langs):
        raise CheckpointError(f"{where} translates {pair[0]}->{pair[1]}, but the data is "
                              f"{langs[0]}->{langs[1]}")
    if (problem := different_directions(directions_of(meta, where), directions)) is not None:
        raise CheckpointError(f"{where} {problem}")


class Seq2SeqModule(L.LightningModule):
    """Trains a :class:`Seq2Seq`.

    Args:
        arch: model architecture (vocabulary sizes and special ids are taken from the
            data module's tokenizer when training starts).
        optim: optimizer, schedule and label smoothing.
        val_bleu: decode the validation set greedily each epoch and log BLEU + chrF.
        val_bleu_max_sentences: decode only the first N validation sentences (None = all) of
            each direction: a multilingual run (``DataConfig.directions``) logs
            ``val_bleu/<src>-<tgt>`` for each and ``val_bleu`` as their mean.
        compile: ``torch.compile`` the teacher-forced forward (not decoding); the first
            steps pay for compilation, measure with ``scripts/benchmark.py`` before using.
        init_from: start from this checkpoint's weights (e.g. an average: inference-only
            checkpoints cannot be resumed), with its architecture (dropouts from ``arch``)
            and its tokenizers, and a fresh optimizer and schedule. The data module must
            tokenize with those tokenizers (``seq2seq-train`` sees to it:
            ``datamodule.use_tokenizers``).
    """

    def __init__(
        self,
        arch: ModelConfig | None = None,
        optim: OptimConfig | None = None,
        val_bleu: bool = True,
        val_bleu_max_sentences: int | None = None,
        compile: bool = False,
        init_from: str | None = None,
    ):
        super().__init__()
        if val_bleu_max_sentences is not None and val_bleu_max_sentences < 1:
            raise ValueError("--model.val_bleu_max_sentences must be >= 1 (or null: all), "
                             f"got {val_bleu_max_sentences}")
        self.init_from = init_from
        self.arch = arch or ModelConfig()
        self.optim = optim or OptimConfig()
        self.val_bleu = val_bleu
        self.val_bleu_max_sentences = val_bleu_max_sentences
        self.compile_forward = compile
        self.model: Seq2Seq | None = None
        self.tokenizers = None  # TokenizerPair, from the data module or a checkpoint
        self.langs: tuple[str, str] | None = None  # None: several directions
        self.directions: Directions | None = None
        self._rng_to_restore: torch.Tensor | None = None
        # FLOPs of the last batch through ``loss``, read by Lightning's ThroughputMonitor
        self.flops_per_batch: int | None = None

    # ------------------------------------------------------------ model
    def configure_model(self) -> None:
        """Build the network once the tokenizer (hence the vocabulary) is known."""
        if self.model is not None:
            return
        dm = self.trainer.datamodule
        self.tokenizers = dm.tokenizers
        self.directions = dm.config.model_directions
        self.langs = None if self.directions else (dm.config.src_lang, dm.config.tgt_lang)
        if self.directions is not None and not (self.arch.share_embeddings and dm.tokenizers.joint):
            raise ConfigError("ModelConfig.share_embeddings must be true (and the tokenizer joint) "
                              "for several directions (DataConfig.directions)")
        if self.init_from:
            self._start_from(self.init_from)
            return
        src, tgt = self.tokenizers.src, self.tokenizers.tgt
        self.arch = replace(
            self.arch,
            src_vocab_size=src.vocab_size,
            tgt_vocab_size=tgt.vocab_size,
            share_embeddings=self.arch.share_embeddings and src is tgt,
            pad_id=tgt.pad_id,
            bos_id=tgt.bos_id,
            eos_id=tgt.eos_id,
        )
        self.model = Seq2Seq(self.arch)
        if self.compile_forward:
            self.model.compile(dynamic=True)  # in place: parameter names stay the same

    def _start_from(self, path: str) -> None:
        """``init_from``: the checkpoint's network and weights, this run's dropouts."""
        ckpt = load_checkpoint(path)
        meta = ckpt["seq2seq"]
        where = f"--model.init_from {path}"
        _same_run(meta, self.tokenizers, self.langs, where, self.directions)
        saved = config_of(meta, where)
        self.arch = replace(saved, **{k: getattr(self.arch, k) for k in _TRAINING_ONLY})
        self.model = build_model(ckpt, self.arch).train()
        if self.compile_forward:
            self.model.compile(dynamic=True)

    # ------------------------------------------------------------ loss
    def loss(self, batch) -> tuple[torch.Tensor, int]:
        """Label-smoothed cross-entropy per target token (padding ignored)."""
        keep = batch.tgt_out != self.arch.pad_id  # (B, L): no logits for padding
        targets, o = batch.tgt_out[keep], self.optim  # (N,)
        src, tgt_in = batch.src, batch.tgt_in
        rdrop = o.rdrop_alpha > 0 and self.training
        if rdrop:  # R-Drop: the batch twice in one forward, so the copies draw different dropout
            src, tgt_in, keep = (torch.cat([t, t]) for t in (src, tgt_in, keep))  # (2B, .)
        if o.loss == "fused" and self.model.output.bias is None:  # fused: no output bias
            hidden = self.model(src, tgt_in, keep, project=False)  # (N or 2N, d_model)
            w, eps = self.model.output.weight, o.label_smoothing
            loss = (fused_rdrop_loss(hidden, w, targets, eps, o.rdrop_alpha, o.loss_chunk) if rdrop
                    else fused_projection_loss(hidden, w, targets, eps, o.loss_chunk))
        else:
            logits = self.model(src, tgt_in, keep)  # (N, V), or (2N, V): the first copy's rows first
            loss = (rdrop_loss(logits, targets, o.label_smoothing, o.rdrop_alpha) if rdrop
                    else label_smoothed_loss(logits, targets, o.label_smoothing))
        n_tokens = targets.shape[0]
        B, S = src.shape
        self.flops_per_batch = batch_flops(self.arch, B, S, tgt_in.shape[1], n_tokens * B // len(batch.src),
                                           training=self.training)
        return loss / max(n_tokens, 1), n_tokens

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        runtime.tick()  # threads follow the machine's load (seq2seq.runtime)
        loss, n_tokens = self.loss(batch)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"non-finite training loss ({loss.item()}) at step {self.global_step}, "
                f"batch {batch_idx}: stopping (lower optim.lr, raise warmup_steps, or clip gradients)"
            )
        self.log("train_loss", loss, prog_bar=True, batch_size=n_tokens)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        loss, n_tokens = self.loss(batch)
        self.log("val_loss", loss, prog_bar=True, sync_dist=True, batch_size=n_tokens)
        self.log("val_ppl", torch.exp(loss), sync_dist=True, batch_size=n_tokens)

    def on_validation_epoch_end(self) -> None:
        if not self.val_bleu or self.trainer.sanity_checking:
            return
        from seq2seq.translation.translator import Translator  # translation lives above training

        dm, n = self.trainer.datamodule, self.val_bleu_max_sentences
        translator = Translator(self.model, self.tokenizers, DecodingConfig(method="greedy"), self.device,
                                directions=self.directions)
        if self.directions is None:
            srcs, refs = dm.val_src_texts[:n], dm.val_ref_texts[:n]
            hyps = translator.translate(srcs)
            self.log("val_bleu", bleu(hyps, refs).score, prog_bar=True, sync_dist=True)
            self.log("val_chrf", chrf(hyps, refs).score, sync_dist=True)
            return
        scores = {"bleu": [], "chrf": []}
        for (src, tgt), name in zip(self.directions.pairs, self.directions.names(), strict=True):
            srcs, refs = (texts[:n] for texts in dm.val_sets[name])
            hyps = translator.translate(srcs, target_lang=tgt, source_lang=src)
            for metric, score in (("bleu", bleu(hyps, refs).score), ("chrf", chrf(hyps, refs).score)):
                self.log(f"val_{metric}/{name}", score, sync_dist=True)
                scores[metric].append(score)
        # the mean over directions: what checkpoint selection monitors
        self.log("val_bleu", sum(scores["bleu"]) / len(scores["bleu"]), prog_bar=True, sync_dist=True)
        self.log("val_chrf", sum(scores["chrf"]) / len(scores["chrf"]), sync_dist=True)

    # ------------------------------------------------------------ optimizer
    def configure_optimizers(self):
        o = self.optim
        opt = torch.optim.Adam(
            self.parameters(), lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay
        )
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(o, self.arch.d_model))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Make every checkpoint self-contained (config + tokenizers) and exactly resumable (RNG)."""
        checkpoint["seq2seq"] = metadata(self.arch, self.tokenizers, *(self.langs or (None, None)),
                                         directions=self.directions)
        checkpoint["rng"] = {"torch": torch.get_rng_state()}
        seal(checkpoint)  # last: the checksum covers the weights Lightning put in

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        meta = checkpoint.get("seq2seq")
        if meta is None:
            raise CheckpointError("checkpoint has no 'seq2seq' metadata: not written by seq2seq")
        saved = from_dict(ModelConfig, meta["model_config"], "checkpoint model_config")
        if self.model is not None and saved != self.arch:
            diff = {k: v for k, v in to_dict(saved).items() if getattr(self.arch, k) != v}
            raise CheckpointError(
                f"checkpoint model_config differs from the configured model in {diff} "
                "(the checkpoint's values); resume with the run's own config"
            )
        if self.tokenizers is not None:
            _same_run(meta, self.tokenizers, self.langs, "the checkpoint to resume", self.directions)
        if "rng" in checkpoint:
            self._rng_to_restore = checkpoint["rng"]["torch"]

    def on_train_start(self) -> None:
        """On resume: restore the RNG and skip the batches this epoch already consumed."""
        if self._rng_to_restore is not None:
            torch.set_rng_state(self._rng_to_restore)
            self._rng_to_restore = None
        # ``ready`` counts the batches this epoch handed to training_step before the save
        # (``completed`` lags by one when the save happened in on_train_batch_end).
        done = self.trainer.fit_loop.epoch_loop.batch_progress.current.ready
        sampler = getattr(self.trainer.train_dataloader, "batch_sampler", None)
        if hasattr(sampler, "start_batch") and 0 < done < len(sampler):
            sampler.start_batch = done
