"""Where the data and models shipped with seq2seq are, from any working directory.

The repository's ``data/`` folder holds the shipped Multi30k (``multi30k/``) and trained
models (``models/``). It is found, in this order, at

1. ``$SEQ2SEQ_DATA``: a folder with that layout (an installed package has no repository
   beside it; or a copy on a faster disk);
2. the ``data/`` beside the package (a checkout, or an editable install of one);
3. ``./data`` (the working directory: a copy next to a project).

Errors name every place looked in. Only standard-library imports: commands call this
before anything slow is imported.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "SEQ2SEQ_DATA"
CHECKOUT_DATA = Path(__file__).resolve().parent.parent / "data"
MODEL_SUFFIX = ".ckpt"


def data_roots() -> list[Path]:
    """The folders that may hold ``multi30k/`` and ``models/``, in the order they are tried,
    each once (in a checkout, ``./data`` is the checkout's ``data/``)."""
    env = os.environ.get(ENV)
    roots, seen = [], set()
    for root in ([Path(env).expanduser()] if env else []) + [CHECKOUT_DATA, Path.cwd() / "data"]:
        key = os.path.realpath(root)
        if key not in seen:
            seen.add(key)
            roots.append(root)
    return roots


def _looked_in(places: list[Path]) -> str:
    unset = "" if os.environ.get(ENV) else f" (${ENV} is not set)"
    return f"looked in {', '.join(str(p) for p in places)}{unset}"


def multi30k_dir(splits: list[str]) -> Path:
    """The shipped Multi30k folder: the first of :func:`data_roots` whose ``multi30k/`` holds
    every file of ``splits`` (names such as ``train.de.gz``)."""
    places = [root / "multi30k" for root in data_roots()]
    for place in places:
        if all((place / name).is_file() for name in splits):
            return place
    raise FileNotFoundError(
        f"the shipped Multi30k ({', '.join(splits)}) was not found: {_looked_in(places)}; set "
        f"{ENV} to the folder holding multi30k/ (the repository's data/), or give the folder "
        "(--data-dir, --data.data.data_dir)")


def multi30k_lines(name: str, n: int | None = None) -> list[str]:
    """The first ``n`` lines (None: all) of the shipped Multi30k file ``name`` (such as
    ``test_2016_flickr.de.gz``), without their newlines; the one reader for scripts and tests."""
    import gzip  # here: this module is imported by every command's start-up
    import itertools

    with gzip.open(multi30k_dir([name]) / name, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, n)]


def find_model(path: str | os.PathLike) -> Path:
    """``path`` itself when it exists; else, for a shipped model's name (``multi30k_de_en_tiny``,
    with or without ``.ckpt``) or its path in the repository (``data/models/NAME.ckpt``), that
    model in the first of :func:`data_roots` that has it. ``FileNotFoundError`` otherwise,
    saying where it looked."""
    p = Path(path)
    if p.exists():
        return p
    if p.is_absolute() or p.parent not in (Path("."), Path("models"), Path("data/models")):
        raise FileNotFoundError(f"checkpoint {p}: no such file")
    name = p.name if p.suffix == MODEL_SUFFIX else p.name + MODEL_SUFFIX
    places = [root / "models" / name for root in data_roots()]
    for place in places:
        if place.is_file():
            return place
    raise FileNotFoundError(f"checkpoint {p}: no such file; as a shipped model: {_looked_in(places)}")


def shipped_models() -> list[str]:
    """Names of the shipped models found (``-m NAME`` works for each, from anywhere)."""
    for root in data_roots():
        found = sorted(q.stem for q in (root / "models").glob(f"*{MODEL_SUFFIX}"))
        if found:
            return found
    return []
