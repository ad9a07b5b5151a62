"""Sequence-level knowledge distillation (Kim & Rush, 2016): a teacher (or an ensemble)
translates the source side of a training corpus, and a student is trained on its outputs.

:func:`distill` writes an ordinary data source, line-aligned text files that any training
config reads (``data.data.train_src``/``train_tgt`` with ``corpus: null``), into one folder:

```
OUT/provenance.json         what made it: teachers (sha256), search settings, the source's sha256
OUT/shards/000000.{src,tgt}  the work so far, one shard at a time (a stopped run continues here)
OUT/train.{src}.gz          the source lines (each repeated ``nbest`` times)
OUT/train.{tgt}.gz          the teacher's translations, line-aligned with them
```

Mixing with the original data is the config's business: the distilled files alone, or a
list of the original and the distilled files (``configs/distill/``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from seq2seq.config import DecodingConfig, LoadConfig
from seq2seq.data.sources import read_lines
from seq2seq.fields import FieldError
from seq2seq.files import write_atomic
from seq2seq.translation.translator import Translator

PROVENANCE = "provenance.json"
FORMAT = 1  # the folder layout's version, in its provenance


@dataclass(frozen=True)
class DistillPlan:
    """What one distillation run does; its provenance is this plus the inputs' hashes."""

    teachers: tuple[str, ...]
    source: str  # a line-per-sentence file, plain or gzip (by a .gz name)
    out: str
    decoding: DecodingConfig
    shard_lines: int = 2000
    target_lang: str | None = None  # a multilingual teacher's direction
    source_lang: str | None = None
    load: LoadConfig = field(default_factory=LoadConfig)  # the teachers' (compute type: outputs)


def sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def provenance(plan: DistillPlan, lines: int) -> dict:
    """Everything that decides the distilled text: a resumed run must match it exactly."""
    return {"format": FORMAT,
            "teachers": [{"path": str(p), "sha256": sha256(p)} for p in plan.teachers],
            "source": {"path": str(plan.source), "sha256": sha256(plan.source), "lines": lines},
            # the load options with the search's, as when they were DecodingConfig fields:
            # folders started then resume
            "decoding": {**asdict(plan.decoding), **asdict(plan.load)},
            "shard_lines": plan.shard_lines,
            "target_lang": plan.target_lang, "source_lang": plan.source_lang}


def _write_atomic(path: Path, text: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def _check_or_start(out: Path, meta: dict) -> None:
    """A new folder gets the provenance; an existing one must have been started with the
    same inputs and settings (else resuming would mix two corpora): ``ValueError``."""
    file = out / PROVENANCE
    if file.exists():
        try:
            before = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"{file}: unreadable ({e}); choose another output folder") from None
        changed = sorted(k for k in meta if before.get(k) != meta[k])
        if changed:
            raise ValueError(f"{out}: was started with other {', '.join(changed)}: resuming would "
                             "mix two corpora; choose another output folder")
        return
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out}: exists and is not a distillation folder (no {PROVENANCE}); "
                         "choose an empty or new folder")
    (out / "shards").mkdir(parents=True, exist_ok=True)
    _write_atomic(file, json.dumps(meta, indent=1) + "\n")


def _shard_paths(out: Path, index: int) -> tuple[Path, Path]:
    base = out / "shards" / f"{index:06d}"
    return base.with_suffix(".src"), base.with_suffix(".tgt")


def pending_shards(out: Path, n_lines: int, shard_lines: int) -> list[int]:
    """Shards not yet written (a shard's ``.tgt`` appears only once it is complete)."""
    shards = range((n_lines + shard_lines - 1) // shard_lines)
    return [i for i in shards if not _shard_paths(out, i)[1].exists()]


def _translate_shard(translator: Translator, plan: DistillPlan, src: list[str]) -> tuple[list[str], list[str]]:
    """``(sources, targets)``: each source once per hypothesis of its n-best list."""
    results = translator.translate_full(src, target_lang=plan.target_lang,
                                        source_lang=plan.source_lang)
    pairs = [(r.src, hyp) for r in results for hyp, _ in (r.nbest or [(r.hyp, 0.0)])]
    return [s for s, _ in pairs], [t for _, t in pairs]


def _one_line(text: str) -> str:
    return " ".join(text.split())  # a translation never spans lines in a line-aligned file


def run_shards(translator: Translator, plan: DistillPlan, lines: Sequence[str],
               todo: Sequence[int], progress: bool = False) -> Iterator[int]:
    """Translate each pending shard and write it atomically (``.src`` then ``.tgt``: the
    ``.tgt`` marks it done); yields each finished shard's index."""
    out = Path(plan.out)
    bar = _bar(len(lines), progress, done=len(lines) - sum(
        len(lines[i * plan.shard_lines:(i + 1) * plan.shard_lines]) for i in todo))
    for i in todo:
        chunk = list(lines[i * plan.shard_lines:(i + 1) * plan.shard_lines])
        src, tgt = _translate_shard(translator, plan, chunk)
        src_path, tgt_path = _shard_paths(out, i)
        _write_atomic(src_path, "".join(_one_line(s) + "\n" for s in src))
        _write_atomic(tgt_path, "".join(_one_line(t) + "\n" for t in tgt))
        if bar is not None:
            bar.update(len(chunk))
        yield i
    if bar is not None:
        bar.close()


def _bar(total: int, enabled: bool, done: int):
    if not enabled:
        return None
    from tqdm import tqdm  # a dependency of datasets

    return tqdm(total=total, initial=done, desc="distill", unit="sent", dynamic_ncols=True)


def corpus_files(out: str | os.PathLike, src_lang: str, tgt_lang: str) -> tuple[Path, Path]:
    """The finished corpus: ``OUT/train.{src_lang}.gz``, ``OUT/train.{tgt_lang}.gz``."""
    return Path(out) / f"train.{src_lang}.gz", Path(out) / f"train.{tgt_lang}.gz"


def assemble(out: Path, n_shards: int, files: tuple[Path, Path]) -> int:
    """Join the shards into the two gzip files (each written to a temporary name, then
    renamed); the number of pairs."""
    pairs = 0
    for side, final in zip(("src", "tgt"), files):
        def write(f, side=side) -> None:
            nonlocal pairs
            with gzip.open(f, "wt", encoding="utf-8") as z:
                for i in range(n_shards):
                    text = _shard_paths(out, i)[0 if side == "src" else 1].read_text(encoding="utf-8")
                    z.write(text)
                    pairs += text.count("\n") if side == "src" else 0
        write_atomic(final, write)
    return pairs


def distill(plan: DistillPlan, progress: bool = False, translator: Translator | None = None) -> dict:
    """Run (or continue) a distillation; returns the provenance plus the corpus' files and
    pair count, also written to ``OUT/provenance.json``'s sibling ``corpus.json``."""
    if plan.shard_lines < 1:
        raise FieldError("{shard_lines} {n}: must be >= 1", n=plan.shard_lines)
    lines = read_lines(plan.source)
    if not lines:
        raise ValueError(f"{plan.source}: has no lines to translate")
    out = Path(plan.out)
    meta = provenance(plan, len(lines))
    _check_or_start(out, meta)
    translator = translator or Translator.from_checkpoints(list(plan.teachers), plan.decoding,
                                                           **asdict(plan.load))
    todo = pending_shards(out, len(lines), plan.shard_lines)
    for _ in run_shards(translator, plan, lines, todo, progress):
        pass
    src_lang, tgt_lang = _languages(translator, plan)
    files = corpus_files(out, src_lang, tgt_lang)
    n_shards = (len(lines) + plan.shard_lines - 1) // plan.shard_lines
    pairs = assemble(out, n_shards, files)
    summary = {**meta, "corpus": {"src": str(files[0]), "tgt": str(files[1]), "pairs": pairs}}
    _write_atomic(out / "corpus.json", json.dumps(summary, indent=1) + "\n")
    return summary


def _languages(translator: Translator, plan: DistillPlan) -> tuple[str, str]:
    src, tgt = translator.pair
    if translator.directions is not None:
        src, tgt = translator.directions.resolve(plan.source_lang, plan.target_lang)
    return src or "src", tgt or "tgt"
