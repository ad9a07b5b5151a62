"""The students section: distilled students' decoding speed against their teacher's, with the
quality of the very outputs timed.

Every (model, search) row runs in its own fresh process (``isolate``), as the decode section's
rows do. Each model gets the same test sentences through its own tokenizer (a student trained
elsewhere may have another SentencePiece model), batched by the same rule
(``engines.make_batches``) and limited by the same output-length rule. A row's BLEU / lc-tok
BLEU / chrF score its timed 1-best outputs, detokenized by the model's target tokenizer: the
raw search, without ``Translator``'s sentence splitting, so they can differ a little from
``seq2seq-evaluate``'s. "× teacher" is the teacher's beam-K seconds over the row's: a greedy
student at 2.0 decodes twice as fast as the teacher's beam search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scripts.bench.decode import Row, timed_row
from scripts.bench.engines import make_batches, source_ids
from seq2seq.checkpoint import build_model, load_checkpoint
from seq2seq.data.tokenizer import TokenizerPair
from seq2seq.metrics import all_scores

Log = Callable[[str], None]


def model_rows(role: str, path: str, ckpt: dict, texts: Sequence[str], refs: Sequence[str],
               beams: Sequence[int], max_tokens: Sequence[int], threads: int, repeats: int,
               log: Log) -> list[dict]:
    """The timed rows of checkpoint ``ckpt`` (loaded from ``path``), one per beam size (1 =
    greedy), scored against ``refs``."""
    model = build_model(ckpt)
    arch, tokenizers = model.arch, TokenizerPair.from_state(ckpt["seq2seq"]["tokenizers"])
    ids = source_ids(texts, tokenizers, arch)
    sweep = {n: make_batches(ids, n, arch) for n in max_tokens}
    params = sum(p.numel() for p in model.parameters())
    rows = []
    for beam in beams:
        spec = {"engine": "ours", "checkpoint": path, **({"beam_size": beam} if beam > 1 else {})}
        search = "greedy" if beam == 1 else f"beam {beam}"
        row = timed_row(Row("ours", search, spec), sweep, threads, repeats, log)
        scores = all_scores(tokenizers.tgt.decode(row.pop("hyps")), list(refs))
        rows.append({**row, "role": role, "model": path,
                     "layers": f"{arch.encoder_layers}+{arch.decoder_layers}",
                     "d_model": arch.d_model, "params": params,
                     **{name: s.score for name, s in scores.items()}})
    return rows


def bench_students(teacher: str, students: Sequence[str], texts: Sequence[str],
                   refs: Sequence[str], pair: str, *, repeats: int = 3, threads: int = 1,
                   max_tokens: Sequence[int] = (2000,), beam_size: int = 5,
                   student_beams: Sequence[int] = (), log: Log = print) -> dict:
    """Rows for the teacher (greedy and beam ``beam_size``) and each student (greedy and beam
    ``beam_size``, or each of ``student_beams``: 1 is greedy); each row's
    ``teacher_beam_over_this`` is the teacher's beam seconds over its own."""
    if not students:
        raise ValueError("the students section needs --students CKPT[,CKPT...]")
    loaded = {path: load_checkpoint(path) for path in (teacher, *students)}
    for path in students:  # before any timing
        meta = loaded[path]["seq2seq"]
        if f"{meta['src_lang']}→{meta['tgt_lang']}" != pair:
            raise ValueError(f"{path} translates {meta['src_lang']}→{meta['tgt_lang']}, the teacher {pair}")
    beams = (1, beam_size)
    rows = model_rows("teacher", teacher, loaded[teacher], texts, refs, beams, max_tokens, threads,
                      repeats, log)
    for path in students:
        rows += model_rows("student", path, loaded[path], texts, refs, tuple(student_beams) or beams,
                           max_tokens, threads, repeats, log)
    teacher_beam = rows[1]["seconds"]
    for row in rows:
        row["teacher_beam_over_this"] = teacher_beam / row["seconds"]
    notes = [f"each row in its own fresh process, {threads} thread(s); its fastest batch size of "
             f"({', '.join(map(str, max_tokens))}) padded source tokens; start-up and loading not timed",
             "BLEU / lc-tok / chrF: sacreBLEU on the timed outputs (raw search, no sentence "
             "splitting; seq2seq-evaluate's figures can differ slightly)",
             f"× teacher: the teacher's beam-{beam_size} seconds over the row's"]
    return {"rows": rows, "notes": notes, "skipped": [], "beam_size": beam_size,
            "sentences": len(texts)}
