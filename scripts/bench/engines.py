"""What the benchmark times, and on what: the engines and their inputs (the lowest layer of
``scripts/bench``: it imports nothing else from it).

Decoding: ours (greedy, beam, cached or not, forced length) and ``generate`` of Hugging Face
(CTranslate2's engine is in ``isolate``: its process never imports torch), all on the same
batches with the same limits.

- Sources are the checkpoint's tokenizer's ids, cut by ``rules.truncate_source``.
- Batches come from ``data.batch.token_batches`` (the packing rule training and
  ``Translator`` use): at most ``max_tokens`` padded source tokens (EOS included), longest
  batch first. Source tensors come from ``data.batch.collate_src``.
- Every engine gets the same output limit per batch: the library rule
  (``rules.max_lengths`` with the default ``DecodingConfig``) maxed over the batch, since
  ``generate`` takes one limit per batch.
- Beam search ranks by log-prob / length (ours ``length_penalty="average"``, HF and
  CTranslate2 ``length_penalty=1``: the same normalization).

Training: one optimizer step (loss + backward + Adam) of ours (``Seq2SeqModule.loss``) and of
``MarianMTModel`` with ``labels`` at the same dims, on the same real Multi30k batches.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from seq2seq.config import DataConfig, DecodingConfig, ModelConfig, OptimConfig
from seq2seq.data.batch import collate_src, token_batches
from seq2seq.data.tokenizer import TokenizerPair
from seq2seq.decoding.rules import max_lengths, truncate_source
from seq2seq.decoding.search import search
from seq2seq.model import Seq2Seq

TEST_SPLIT = "test_2016_flickr"
DEFAULT_DECODING = DecodingConfig()  # its max_len_a/b give every engine's length limit
# every engine runs the default repetition rule (HF and CTranslate2 have it built in), so
# their outputs stay comparable one for one
NO_REPEAT_NGRAM = DEFAULT_DECODING.no_repeat_ngram_size


@dataclass
class DecodeBatch:
    index: list[int]  # position of each row's sentence in the input list
    src: torch.Tensor  # (B, S) ids + [eos], right-padded: what our encoder and Marian see
    pieces: list[list[str]]  # the same tokens as strings, for CTranslate2 (empty if no vocab)
    max_len: int  # output tokens before EOS, the same limit for every engine


Engine = Callable[[Sequence[DecodeBatch]], list[list[int]]]  # 1-best ids, without EOS
Step = Callable[[Any], int]  # one optimizer step on a batch; returns its target tokens


def read_test_sources(ckpt: dict, data_dir: str | os.PathLike, split: str = TEST_SPLIT,
                      limit: int | None = None, side: str = "src") -> list[str]:
    """The source side (or ``side="tgt"``: the references) of a Multi30k split in the
    checkpoint's language pair."""
    from seq2seq.data.sources import read_lines, resolve_corpus  # pulls in datasets + lightning

    meta = ckpt["seq2seq"]
    data = DataConfig(data_dir=str(data_dir), src_lang=meta["src_lang"], tgt_lang=meta["tgt_lang"])
    return read_lines(resolve_corpus(data, split)[side == "tgt"])[:limit]


def source_ids(texts: Sequence[str], tokenizers: TokenizerPair, arch: ModelConfig) -> list[list[int]]:
    """Subword ids per text (no EOS yet: ``collate_src`` adds it), truncated as ``Translator`` does."""
    return [truncate_source(ids, arch.max_positions) for ids in tokenizers.src.encode(list(texts))]


def batch_max_len(src: torch.Tensor, arch: ModelConfig) -> int:
    """One output limit for a batch: the library's per-sentence rule, maxed over the batch."""
    return int(max_lengths(src, DEFAULT_DECODING, arch.pad_id, arch.max_positions).max())


def make_batches(ids: Sequence[Sequence[int]], max_tokens: int, arch: ModelConfig,
                 src_vocab: Sequence[str] | None = None) -> list[DecodeBatch]:
    """``token_batches`` over source lengths + EOS, longest batch first (module docstring)."""
    batches = []
    for index in token_batches([len(seq) + 1 for seq in ids], max_tokens):
        rows = [ids[i] for i in index]
        src = collate_src(rows, arch.pad_id, arch.eos_id)  # x + [eos], as training sees it
        pieces = ([] if src_vocab is None else
                  [[src_vocab[t] for t in src[r, : len(seq) + 1].tolist()] for r, seq in enumerate(rows)])
        batches.append(DecodeBatch(index.tolist(), src, pieces, batch_max_len(src, arch)))
    return batches


def ours_engine(model: Seq2Seq, beam_size: int = 1, use_cache: bool = True,
                force_length: int | None = None, stopping: str = "heuristic",
                on_step: Callable | None = None) -> Engine:
    """Our ``search``; the batch's limit is passed as ``max_len_b`` with ``max_len_a=0``."""
    def run(batches: Sequence[DecodeBatch]) -> list[list[int]]:
        hyps = []
        for b in batches:
            decoding = DecodingConfig(method="beam" if beam_size > 1 else "greedy",
                                      beam_size=beam_size, length_penalty="average",
                                      max_len_a=0.0, max_len_b=b.max_len, stopping=stopping,
                                      no_repeat_ngram_size=NO_REPEAT_NGRAM)
            result = search(model, b.src, decoding, use_cache=use_cache,
                            force_length=force_length, on_step=on_step)
            hyps += [h[0].tokens for h in result.hypotheses]
        return hyps

    return run


def hf_engine(marian, arch: ModelConfig, beam_size: int = 1,
              early_stopping: bool | str = False) -> Engine:
    """``MarianMTModel.generate``. Beam: ``early_stopping=False`` (HF's default) stops on
    its heuristic bound (best live score / current length); ``"never"`` uses best live
    score / max length, the same exact rule as ours (``search.finish_bound``)."""
    extra = dict(length_penalty=1.0, early_stopping=early_stopping) if beam_size > 1 else {}

    def run(batches: Sequence[DecodeBatch]) -> list[list[int]]:
        hyps = []
        for b in batches:
            with torch.inference_mode():
                out = marian.generate(input_ids=b.src, attention_mask=b.src.ne(arch.pad_id),
                                      num_beams=beam_size, do_sample=False,
                                      max_new_tokens=b.max_len + 1,
                                      no_repeat_ngram_size=NO_REPEAT_NGRAM, **extra)
            for row in out[:, 1:].tolist():  # drop the BOS it starts from
                row = row[: row.index(arch.eos_id)] if arch.eos_id in row else row
                hyps.append([t for t in row if t != arch.pad_id])
        return hyps

    return run


def agreement(hyps: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> float:
    """% of sentences whose 1-best equals the reference's."""
    return 100.0 * sum(list(h) == list(r) for h, r in zip(hyps, reference)) / max(len(reference), 1)


def hf_model(model: Seq2Seq):
    """The Hugging Face model holding ``model``'s weights (Marian for Post-LN, Pegasus for
    Pre-LN), or ValueError if none can."""
    import transformers

    from seq2seq.export import to_hf

    transformers.logging.set_verbosity_error()
    return to_hf(model)


def hf_label(hf) -> str:
    """ "HF Marian generate" or "HF Pegasus generate"."""
    kind = type(hf).__name__.removesuffix("ForConditionalGeneration").removesuffix("MTModel")
    return f"HF {kind} generate"


# ---------------------------------------------------------------- training steps
# Plain cross-entropy: Marian's own loss has no label smoothing. A small constant lr keeps
# the weights (hence the arithmetic) sane over the timed steps; it does not change the cost.
OPTIM = OptimConfig(lr=1e-4, label_smoothing=0.0)


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


def trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
