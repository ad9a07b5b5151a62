"""The train section: target tokens/s of one optimizer step (``engines``: loss + backward +
Adam) of ours and of ``MarianMTModel`` with ``labels`` at the same dims, on the same real
Multi30k batches from ``TokenBudgetSampler``; fp32 and bf16 autocast, each row in its own
process. The levers section: our step with each speed lever switched alone."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from scripts.bench import isolate
from scripts.bench.engines import OPTIM, hf_model, ours_train_step
from scripts.bench.timing import optional, rss_note, target, train_row
from seq2seq.checkpoint import build_model
from seq2seq.model import Seq2Seq

Log = Callable[[str], None]
PRECISIONS = ("fp32", "bf16 autocast")


def bench_training(ckpt_path: str, ckpt: dict, batches: Sequence, *, repeats: int = 3,
                   max_tokens: int = 4096, precisions: Sequence[str] = PRECISIONS,
                   threads: int = 1, log: Log = print) -> dict:
    """Ours vs Hugging Face, fp32 and bf16 autocast, each row in its own process from the
    checkpoint's weights on the same ``batches``."""
    rows, targets, skipped, n_params = [], [], [], {}
    have_hf = optional("transformers") is not None
    if not have_hf:
        skipped.append("Hugging Face transformers not installed: HF rows skipped")
    else:
        try:
            hf_model(build_model(ckpt))
        except ValueError as err:
            have_hf = False
            skipped.append(f"Hugging Face rows skipped: {err}")
    recipe = {"checkpoint": str(ckpt_path), "repeats": repeats}
    for precision in precisions:
        log(f"  timing ours training step, {precision} (own process) ...")
        ours = isolate.run_train_row({**recipe, "engine": "ours", "precision": precision},
                                     batches, threads)
        n_params["ours"] = ours.pop("trainable")
        rows.append(ours)
        if have_hf:
            log(f"  timing HF training step, {precision} (own process) ...")
            hf = isolate.run_train_row({**recipe, "engine": "hf", "precision": precision},
                                       batches, threads)
            n_params["HF"] = hf.pop("trainable")
            hf["ours_over_this"] = ours["tok_per_s"] / hf["tok_per_s"]
            targets.append(target(f"training tokens/s ({precision}): ours ÷ HF", hf, 2.5))
            rows.append(hf)
    notes = train_notes(len(batches), rows[0]["target_tokens"], max_tokens, n_params)
    notes.insert(0, "each row in its own fresh process (one engine per process)")
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
