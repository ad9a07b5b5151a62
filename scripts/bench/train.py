"""The train section: target tokens/s of one optimizer step (loss + backward + Adam) of ours
(``Seq2SeqModule.loss``) and of ``MarianMTModel`` with ``labels`` at the same dims, on the
same real Multi30k batches from ``TokenBudgetSampler``; fp32 and bf16 autocast."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch

from scripts.bench.report import target
from scripts.bench.timing import measure, optional, rss_note
from seq2seq.checkpoint import build_model
from seq2seq.config import DataConfig, OptimConfig
from seq2seq.data.tokenizer import TokenizerPair
from seq2seq.model import Seq2Seq

Log = Callable[[str], None]
Step = Callable[[Any], int]  # one optimizer step on a batch; returns its target tokens

# Plain cross-entropy: Marian's own loss has no label smoothing. A small constant lr keeps
# the weights (hence the arithmetic) sane over the timed steps; it does not change the cost.
OPTIM = OptimConfig(lr=1e-4, label_smoothing=0.0)
PRECISIONS = ("fp32", "bf16 autocast")


def training_batches(ckpt: dict, data_dir: str | os.PathLike, cache_dir: str | os.PathLike,
                     max_tokens: int = 4096, n: int = 8, seed: int = 1) -> list:
    """The first ``n`` batches of a shuffled training epoch, as training sees them."""
    from seq2seq.data.datamodule import Seq2SeqDataModule  # pulls in datasets + lightning

    meta = ckpt["seq2seq"]
    dm = Seq2SeqDataModule(DataConfig(data_dir=str(data_dir), src_lang=meta["src_lang"],
                                      tgt_lang=meta["tgt_lang"], max_tokens=max_tokens,
                                      cache_dir=str(cache_dir), seed=seed))
    dm.use_tokenizers(TokenizerPair.from_state(meta["tokenizers"]))
    dm.setup("fit")
    return first_batches(dm, n)


def first_batches(dm, n: int) -> list:
    """The first ``n`` batches of ``dm``'s training loader (set up)."""
    batches = []
    for batch in dm.train_dataloader():
        batches.append(batch)
        if len(batches) == n:
            break
    return batches


def adam(model: torch.nn.Module) -> torch.optim.Adam:
    return torch.optim.Adam(model.parameters(), lr=OPTIM.lr, betas=OPTIM.betas, eps=OPTIM.eps)


def ours_train_step(model: Seq2Seq, bf16: bool, optim: OptimConfig = OPTIM,
                    compile: bool = False) -> Step:
    """``Seq2SeqModule.loss`` + backward + Adam step on ``model``'s weights."""
    from seq2seq.training.module import Seq2SeqModule  # pulls in lightning

    module = Seq2SeqModule(arch=model.arch, optim=optim)
    module.model = model.train()  # the public slot configure_model fills when training
    if compile:
        model.compile(dynamic=True)  # as Seq2SeqModule(compile=True) does
    opt = adam(model)

    def step(batch) -> int:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, n_tokens = module.loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return n_tokens

    return step


def hf_train_step(marian, pad_id: int, bf16: bool) -> Step:
    """``MarianMTModel(..., labels=...)`` (its own cross-entropy) + backward + Adam step."""
    marian.train()
    opt = adam(marian)

    def step(batch) -> int:
        labels = batch.tgt_out.masked_fill(batch.tgt_out == pad_id, -100)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = marian(input_ids=batch.src, attention_mask=batch.src.ne(pad_id),
                          decoder_input_ids=batch.tgt_in, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return int((labels != -100).sum())

    return step


def train_row(name: str, precision: str, step: Step, batches: Sequence, repeats: int) -> dict:
    """Time ``step`` over all ``batches`` (warm-up: one step on the first batch)."""
    m = measure(lambda: sum(step(b) for b in batches), repeats, warmup=lambda: step(batches[0]))
    return {"engine": name, "precision": precision, "batches": len(batches),
            "target_tokens": m.result, "seconds": m.seconds, "times": m.times,
            "tok_per_s": m.result / m.seconds, "ms_per_step": 1000 * m.seconds / len(batches),
            "rss_peak_mb": m.rss_peak_mb, "rss_rise_mb": m.rss_rise_mb, "ours_over_this": None}


def bench_training(ckpt: dict, batches: Sequence, *, repeats: int = 3, max_tokens: int = 4096,
                   precisions: Sequence[str] = PRECISIONS, log: Log = print) -> dict:
    """Ours vs Marian, fp32 and bf16 autocast; every row starts from the checkpoint's weights."""
    rows, targets, skipped, n_params = [], [], [], {}
    have_hf = optional("transformers") is not None
    if not have_hf:
        skipped.append("Hugging Face transformers not installed: MarianMTModel rows skipped")
    for precision in precisions:
        bf16 = precision != "fp32"
        model = build_model(ckpt)
        n_params["ours"] = trainable(model)
        log(f"  timing ours training step, {precision} ...")
        ours = train_row("ours", precision, ours_train_step(model, bf16), batches, repeats)
        rows.append(ours)
        if have_hf:
            from seq2seq.export import to_hf

            marian = to_hf(build_model(ckpt))  # Marian (Post-LN) or Pegasus (Pre-LN)
            n_params["HF"] = trainable(marian)
            log(f"  timing {type(marian).__name__} training step, {precision} ...")
            hf = train_row(f"HF {type(marian).__name__}", precision,
                           hf_train_step(marian, model.arch.pad_id, bf16), batches, repeats)
            hf["ours_over_this"] = ours["tok_per_s"] / hf["tok_per_s"]
            targets.append(target(f"training tokens/s ({precision}): ours ÷ HF", hf, 1.5))
            rows.append(hf)
    notes = train_notes(len(batches), rows[0]["target_tokens"], max_tokens, n_params)
    return {"rows": rows, "targets": targets, "notes": notes, "skipped": skipped}


# Our training step with the levers switched one at a time (fp32). "torch dropout" puts
# nn.Dropout (bernoulli_ masks) back in place of seq2seq.model.dropout.Dropout.
PLAIN = replace(OPTIM, loss="plain")
LEVERS = {
    "plain loss, torch dropout (before)": dict(optim=PLAIN, torch_dropout=True),
    "fused loss, torch dropout": dict(torch_dropout=True),
    "plain loss, our dropout": dict(optim=PLAIN),
    "fused loss, our dropout (default)": {},
    "default + torch.compile": dict(compile=True),
}


def with_torch_dropout(model: Seq2Seq) -> Seq2Seq:
    """``model`` with every ``Dropout`` module replaced by ``nn.Dropout`` of the same p."""
    from seq2seq.model.dropout import Dropout

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Dropout):
                parent.add_module(name, torch.nn.Dropout(child.p))  # replaces the child
    return model


def bench_levers(ckpt: dict, batches: Sequence, *, repeats: int = 3, log: Log = print) -> dict:
    """Each training-speed lever alone and together, same batches, fresh weights each row.
    The warm-up time is reported: for torch.compile it is the compilation."""
    rows = []
    for name, kw in LEVERS.items():
        log(f"  timing {name} ...")
        kw = dict(kw)
        model = build_model(ckpt)
        step = ours_train_step(with_torch_dropout(model) if kw.pop("torch_dropout", False) else model,
                               False, **kw)
        start = time.perf_counter()
        step(batches[0])
        warmup = time.perf_counter() - start
        row = train_row(name, "fp32", step, batches, repeats)
        row["warmup_s"] = warmup
        rows.append(row)
    base = rows[0]["tok_per_s"]
    for row in rows:
        row["gain"] = row["tok_per_s"] / base
    return {"rows": rows, "targets": [], "skipped": [],
            "notes": ["gain: tokens/s over the first row; warm-up: the first step alone "
                      "(compilation for torch.compile rows), not in tok/s"]}


def train_notes(n_batches: int, n_tok: int, max_tokens: int, n_params: dict[str, int]) -> list[str]:
    return [
        f"batches: the first {n_batches} of a shuffled epoch from TokenBudgetSampler "
        f"(max_tokens {max_tokens}), {n_tok} target tokens; the same batches for every row",
        "step: forward + loss + backward + Adam; plain cross-entropy for both (Marian's loss has "
        "no label smoothing, so ours runs with label_smoothing=0); dropout as the checkpoint's config",
        "each row starts from the checkpoint's weights and a fresh Adam (lr 1e-4, the config's "
        "betas/eps); bf16: torch.autocast('cpu', bfloat16) around forward + loss",
        "trainable parameters: " + ", ".join(f"{k} {v:,}" for k, v in n_params.items()),
        rss_note(),
    ]


def trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
