"""``seq2seq-evaluate``'s test sets: which direction(s) to evaluate each model in (its own
pair, the one asked for, or every direction of a multilingual model) and the source and
reference lines of each."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class TestSet:
    label: str  # for people: "multi30k/val de-en", "src.de", "... [first 100]"
    key: str  # for file names: "multi30k.val.de-en", "src.de", "....first100"
    src_path: Path
    ref_path: Path
    src: list[str]
    ref: list[str]


def language_pair(path: str, meta: dict[str, Any], args) -> tuple[str | None, str | None]:
    """The direction to evaluate ``path`` in: the one asked for, else the checkpoint's.
    Refuses a checkpoint trained for another pair than the one asked for."""
    own = (meta.get("src_lang"), meta.get("tgt_lang"))
    asked = (args.source_lang or own[0], args.target_lang or own[1])
    if None not in own and asked != own:
        if args.source_lang and args.target_lang:
            wanted = f"the test set asks for {asked[0]}->{asked[1]}"
        else:
            given = ("source", args.source_lang) if args.source_lang else ("target", args.target_lang)
            wanted = f"--{given[0]}-lang {given[1]} was asked for"
        raise ValueError(f"checkpoint {path} translates {own[0]}->{own[1]}, but {wanted}")
    return asked


def model_pairs(path: str, meta: dict[str, Any], args) -> list[tuple[str | None, str | None]]:
    """The directions to evaluate ``path`` in: every one (``--all-directions``), else the
    one asked for (a multilingual model: one of its directions, with a source language,
    since it picks the test set's files)."""
    from seq2seq.directions import DirectionError, directions_of

    directions = directions_of(meta, f"checkpoint {path}")
    if directions is None:
        return [language_pair(path, meta, args)]
    if args.all_directions:
        return list(directions.pairs)
    src, tgt = directions.resolve(args.source_lang, args.target_lang)
    if src is None and not args.src_file:  # a named test set: its files need the source
        sources = [a for a, b in directions.pairs if b == tgt]
        if len(sources) > 1:
            raise DirectionError(f"checkpoint {path} translates into {tgt} from {', '.join(sources)}: "
                                 "name the source language (--source-lang) or use --all-directions")
        src = sources[0]
    return [(src, tgt)]


def test_sets_of(args, pairs) -> tuple[dict[tuple, TestSet], list[str]]:
    """The test set of each direction, and (``--all-directions``) the directions whose
    files the named test set lacks."""
    from seq2seq.data.sources import MULTI30K_LANGS as known

    found, missing = {}, []
    for pair in pairs:
        if args.all_directions and None not in pair and not _has_files(args, pair, known):
            missing.append(f"{pair[0]}-{pair[1]}")
        else:
            found[pair] = load_test_set(args, *pair)
    if not found:
        raise ValueError(f"{args.test_set}/{args.split} has test files for none of the "
                         f"directions {', '.join(missing)} (--data-dir?)")
    return found, missing


def _has_files(args, pair: tuple[str, str], known: tuple[str, ...]) -> bool:
    from seq2seq.shipped import multi30k_dir

    if not set(pair) <= set(known):
        return False
    names = [f"{args.split}.{lang}.gz" for lang in pair]
    if args.data_dir is not None:
        return all((Path(args.data_dir) / name).is_file() for name in names)
    try:  # the shipped data: a direction whose files no data root holds is skipped, not an error
        multi30k_dir(names)
    except FileNotFoundError:
        return False
    return True


def load_test_set(args, src_lang: str | None, tgt_lang: str | None) -> TestSet:
    """Source and reference lines (the first ``--limit``); refuses files that do not match
    line for line, and empty ones."""
    from seq2seq.data.sources import read_lines, resolve_corpus

    pair = f"{src_lang}-{tgt_lang}" if src_lang and tgt_lang else ""
    if args.src_file:
        src_path, ref_path = Path(args.src_file), Path(args.ref_file)
        label = f"{src_path.name} {pair}".strip()
        key = src_path.name
    else:
        if not pair:
            raise ValueError("the checkpoint does not record its language pair: "
                             "give --source-lang and --target-lang")
        from seq2seq.config import DataConfig

        cfg = DataConfig(corpus=args.test_set, data_dir=args.data_dir, src_lang=src_lang, tgt_lang=tgt_lang)
        src_path, ref_path = resolve_corpus(cfg, args.split)
        label = f"{args.test_set}/{args.split} {pair}"
        key = f"{args.test_set}.{args.split}.{pair}"
    if args.src_file:  # a binary file given by mistake: named before any decoding
        from seq2seq.files import kind_of, not_text

        for option, path in (("--src-file", src_path), ("--ref-file", ref_path)):
            problem = not_text(path) if kind_of(path) is None and path.suffix != ".gz" else None
            if problem:
                raise ValueError(f"{option} {path}: looks like {problem}")
    src, ref = read_lines(src_path), read_lines(ref_path)
    if len(src) != len(ref):
        raise ValueError(f"{src_path} has {len(src)} lines but {ref_path} has {len(ref)}: "
                         "source and reference must match line for line")
    if not src:
        raise ValueError(f"{src_path} is empty: nothing to evaluate")
    if args.limit and args.limit < len(src):
        src, ref = src[: args.limit], ref[: args.limit]
        label, key = f"{label} [first {args.limit}]", f"{key}.first{args.limit}"
    return TestSet(label, key, src_path, ref_path, src, ref)


