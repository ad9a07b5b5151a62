"""The vocabulary shortlist: the lexical table (``seq2seq-shortlist``) and decoding over
each batch's candidates (``--shortlist``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from helpers import (
    multi30k_lines,
    run_main,
    save_tiny_checkpoint,
    tiny_random_model,
    tiny_tokenizers,
)

from seq2seq.checkpoint import CheckpointError, load_checkpoint
from seq2seq.cli.shortlist import main as shortlist_main
from seq2seq.cli.translate import main as translate_main
from seq2seq.config import DecodingConfig, ShortlistConfig
from seq2seq.decoding.ensemble import Ensemble
from seq2seq.decoding.search import search
from seq2seq.decoding.shortlist import build_table, shortlist_entry
from seq2seq.files import save_atomic
from seq2seq.model.inference import compute
from seq2seq.model.inference.shortlist import Shortlist
from seq2seq.translation.translator import Translator

V = 60
SEARCHES = [DecodingConfig(method="greedy"),
            DecodingConfig(method="beam", beam_size=4, nbest=3),
            DecodingConfig(method="sample", nbest=2, seed=1)]


def random_src(B: int = 5, S: int = 9, vocab: int = V, seed: int = 0) -> torch.Tensor:
    """``(B, S)`` right-padded sources of real ids (4..vocab-1), each ending in EOS."""
    g = torch.Generator().manual_seed(seed)
    src = torch.zeros(B, S, dtype=torch.long)
    for b in range(B):
        n = int(torch.randint(2, S, (1,), generator=g))
        src[b, : n - 1] = torch.randint(4, vocab, (n - 1,), generator=g)
        src[b, n - 1] = 3
    return src


def random_shortlist(vocab: int = V, k: int = 2, n: int = 3, seed: int = 0) -> Shortlist:
    g = torch.Generator().manual_seed(seed)
    table = torch.randint(0, vocab, (vocab, k), generator=g)
    return Shortlist(table, torch.randint(0, vocab, (n,), generator=g), {0, 2, 3})


def whole_vocabulary(vocab: int = V) -> Shortlist:
    """A shortlist whose candidates are every id, through the restricted path all the same."""
    return Shortlist(torch.zeros(vocab, 1, dtype=torch.long), torch.arange(vocab), {0, 2, 3})


def decode(model, src, decoding, shortlist=None):
    models = getattr(model, "members", [model])
    for m in models:
        m.inference.shortlist = shortlist
    try:
        return search(model, src, decoding, generator=torch.Generator().manual_seed(5))
    finally:
        for m in models:
            m.inference.shortlist = None


def native(compute_type: str) -> bool:
    return {"float32": True, "int8": compute.native_int8(), "bfloat16": compute.native_bf16()}[
        compute_type]


@pytest.mark.parametrize("compute_type", ["float32", "int8", "bfloat16"])
@pytest.mark.parametrize("decoding", SEARCHES, ids=lambda d: d.method)
def test_whole_vocabulary_shortlist_changes_nothing(decoding, compute_type):
    """Candidates = the vocabulary: the same outputs and scores as no shortlist, bit for bit
    (the cut weight goes through the compute type's kernel as the whole one does)."""
    if not native(compute_type):
        pytest.skip(f"{compute_type} not native on this CPU")
    model = compute.prepare(tiny_random_model(V), compute_type)
    src = random_src()
    full, short = decode(model, src, decoding), decode(model, src, decoding, whole_vocabulary())
    assert torch.equal(full.output, short.output)
    assert [[(h.tokens, h.score) for h in hs] for hs in full.hypotheses] == \
        [[(h.tokens, h.score) for h in hs] for hs in short.hypotheses]


def test_whole_vocabulary_shortlist_changes_nothing_for_an_ensemble():
    model = Ensemble([tiny_random_model(V, seed=1), tiny_random_model(V, seed=2)])
    src, decoding = random_src(), DecodingConfig(method="beam", beam_size=3)
    full, short = decode(model, src, decoding), decode(model, src, decoding, whole_vocabulary())
    assert torch.equal(full.output, short.output)


@pytest.mark.parametrize("seed", range(5))
def test_candidates_hold_specials_and_every_row_of_every_source_id(seed):
    shortlist = random_shortlist(seed=seed)
    src = random_src(seed=seed)
    ids = shortlist.candidates(src)
    assert torch.equal(ids, torch.unique(ids))  # sorted, unique
    have = set(ids.tolist())
    assert {0, 2, 3} <= have
    for s in src.reshape(-1).tolist():
        assert set(shortlist.table[s].tolist()) <= have
    assert set(shortlist.frequent.tolist()) <= have


@pytest.mark.parametrize("decoding", SEARCHES, ids=lambda d: d.method)
def test_no_token_outside_the_candidates_is_produced(decoding):
    vocab = 200
    model, src = tiny_random_model(vocab), random_src(B=4, vocab=vocab)
    shortlist = random_shortlist(vocab, k=2, n=3, seed=3)
    allowed = set(shortlist.candidates(src).tolist())
    full = {t for hyps in decode(model, src, decoding).hypotheses for h in hyps for t in h.tokens}
    assert full - allowed  # without the shortlist, the model produces other tokens
    steps = []
    model.inference.shortlist = shortlist
    try:
        out = search(model, src, decoding, generator=torch.Generator().manual_seed(5),
                     on_step=lambda t, lp: steps.append(lp.clone()))
    finally:
        model.inference.shortlist = None
    for hyps in out.hypotheses:
        for h in hyps:
            assert set(h.tokens) <= allowed
    outside = torch.tensor(sorted(set(range(vocab)) - allowed))
    for lp in steps:  # log-softmax over the candidates: they sum to 1, the rest is -inf
        assert torch.isneginf(lp[:, outside]).all()
        torch.testing.assert_close(lp.exp().sum(-1), torch.ones(lp.shape[0]))


# ---------------------------------------------------------------- the table
def reference_table(src, tgt, vs, vt, cfg, filler, specials):
    """Brute force: sentence counts in Python dicts, rows sorted by (-score, id)."""
    joint, cs, ct, tokens = {}, [0] * vs, [0] * vt, [0] * vt
    for a, b in zip(src, tgt):
        for s in set(a):
            cs[s] += 1
        for t in set(b):
            ct[t] += 1
        for t in b:
            tokens[t] += 1
        for s in set(a):
            for t in set(b):
                joint[s, t] = joint.get((s, t), 0) + 1
    table = []
    for s in range(vs):
        scored = [((2 * c / (cs[s] + ct[t])) if cfg.score == "dice" else c / cs[s], t)
                  for (s2, t), c in joint.items() if s2 == s]
        row = [t for _, t in sorted(scored, key=lambda x: (-x[0], x[1]))][: cfg.per_source]
        table.append(row + [filler] * (cfg.per_source - len(row)))
    top = sorted((t for t in range(vt) if tokens[t]), key=lambda t: (-tokens[t], t))[: cfg.frequent]
    return table, sorted(set(top) | set(specials))


@pytest.mark.parametrize("score", ["dice", "conditional"])
@pytest.mark.parametrize("seed", range(4))
def test_table_equals_a_brute_force_reference(score, seed):
    rng = random.Random(seed)
    vs, vt = 14, 11  # small vocabularies: many ties in counts and scores
    src = [[rng.randrange(vs) for _ in range(rng.randint(1, 6))] for _ in range(25)]
    tgt = [[rng.randrange(vt) for _ in range(rng.randint(1, 6))] for _ in range(25)]
    cfg = ShortlistConfig(per_source=rng.randint(1, 5), frequent=rng.randint(1, 6), score=score)
    table, frequent = build_table(src, tgt, vs, vt, cfg, filler=0, specials={0, 3})
    want_table, want_frequent = reference_table(src, tgt, vs, vt, cfg, 0, {0, 3})
    assert table.tolist() == want_table
    assert frequent.tolist() == want_frequent


# ---------------------------------------------------------------- checkpoint and CLI
@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    return save_tiny_checkpoint(tmp_path_factory.mktemp("sl") / "raw.ckpt", tiny_tokenizers())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("corpus")
    for lang in ("de", "en"):
        (folder / f"c.{lang}").write_text("\n".join(multi30k_lines(lang, 60)) + "\n")
    return folder / "c.de", folder / "c.en"


def test_round_trip_keeps_the_table_and_the_input(ckpt, corpus, tmp_path, one_thread):
    before = ckpt.read_bytes()
    out = tmp_path / "sl.ckpt"
    args = ["-m", str(ckpt), "-o", str(out), "--source", str(corpus[0]), "--target",
            str(corpus[1]), "--per-source", "3", "--frequent", "7"]
    code, _, err = run_main(shortlist_main, args)
    assert code == 0, err
    assert ckpt.read_bytes() == before
    loaded, raw = load_checkpoint(out), load_checkpoint(ckpt)
    entry = loaded["seq2seq"]["shortlist"]
    want = shortlist_entry(raw, ShortlistConfig(per_source=3, frequent=7), corpus)
    assert torch.equal(entry["table"], want["table"])
    assert torch.equal(entry["frequent"], want["frequent"])
    assert entry["table"].shape == (raw["seq2seq"]["model_config"]["src_vocab_size"], 3)
    assert all(torch.equal(loaded["state_dict"][k], v) for k, v in raw["state_dict"].items())
    lines = multi30k_lines("de", 5, "val")
    with_table = Translator.from_checkpoint(out, shortlist=True)
    assert with_table.shortlist and not Translator.from_checkpoint(out).shortlist
    assert len(with_table.translate(lines)) == 5
    # the table is under the checksum: an edited one is refused like an edited weight
    entry["table"][0, 0] = (int(entry["table"][0, 0]) + 1) % 100
    save_atomic(loaded, tmp_path / "edited.ckpt")
    with pytest.raises(CheckpointError, match="checksum"):
        load_checkpoint(tmp_path / "edited.ckpt")


def test_in_place_adds_the_table(ckpt, corpus, tmp_path, one_thread):
    copy = tmp_path / "copy.ckpt"
    copy.write_bytes(ckpt.read_bytes())
    code, _, err = run_main(shortlist_main, ["-m", str(copy), "--in-place", "--source",
                                             str(corpus[0]), "--target", str(corpus[1])])
    assert code == 0, err
    entry = load_checkpoint(copy)["seq2seq"]["shortlist"]
    assert entry["per_source"] == ShortlistConfig().per_source


@pytest.mark.parametrize("case", ["not a checkpoint", "missing", "K 0", "N -1", "output = input",
                                  "one corpus side", "missing corpus", "no output"])
def test_bad_input_is_one_line_exit_2(case, ckpt, corpus, tmp_path, one_thread):
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n")
    out = tmp_path / "out.ckpt"
    base = ["-m", str(ckpt), "-o", str(out), "--source", str(corpus[0]), "--target", str(corpus[1])]
    argv = {"not a checkpoint": ["-m", str(text), "-o", str(out)],
            "missing": ["-m", str(tmp_path / "nope.ckpt"), "-o", str(out)],
            "K 0": [*base, "--per-source", "0"],
            "N -1": [*base, "--frequent", "-1"],
            "output = input": ["-m", str(ckpt), "-o", str(ckpt)],
            "one corpus side": ["-m", str(ckpt), "-o", str(out), "--source", str(corpus[0])],
            "missing corpus": [*base[:4], str(tmp_path / "none.de"), *base[5:]],
            "no output": ["-m", str(ckpt)]}[case]
    before = ckpt.read_bytes()
    code, _, err = run_main(shortlist_main, argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("seq2seq-shortlist: error: ")
    assert "Traceback" not in err
    assert ckpt.read_bytes() == before and not out.exists()


def test_shortlist_without_a_table_is_refused_clearly(ckpt, tmp_path, one_thread):
    with pytest.raises(ValueError, match="no shortlist table.*seq2seq-shortlist"):
        Translator.from_checkpoint(ckpt, shortlist=True)
    with pytest.raises(ValueError, match="no shortlist table"):
        Translator.from_checkpoints([ckpt, ckpt], shortlist=True)
    code, _, err = run_main(translate_main, ["-m", str(ckpt), "--shortlist"], b"Hallo Welt\n")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no shortlist table" in err


def test_the_flag_is_a_load_option_not_a_search_setting():
    from seq2seq.cli.common import decoding_from_args, load_from_args
    from seq2seq.cli.translate import build_parser

    on, off = (build_parser().parse_args(["-m", "x", *flag]) for flag in (["--shortlist"], []))
    assert load_from_args(on)["shortlist"] is True and load_from_args(off)["shortlist"] is None
    assert decoding_from_args(on) == decoding_from_args(off)


def test_multilingual_model_needs_a_corpus_and_keeps_its_tags(corpus, tmp_path, one_thread):
    """Its default corpus is unknown (refused, naming --source); with one, the target
    vocabulary's language tags are always candidates."""
    from helpers import save_multilingual_checkpoint

    from seq2seq.data.tokenizer import TokenizerPair

    path = save_multilingual_checkpoint(tmp_path / "multi.ckpt", "all:en,de,fr", "decoder")
    code, _, err = run_main(shortlist_main, ["-m", str(path), "-o", str(tmp_path / "a.ckpt")])
    assert code == 2 and "--source" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_main(shortlist_main, ["-m", str(path), "-o", str(tmp_path / "b.ckpt"),
                                             "--source", str(corpus[0]), "--target", str(corpus[1])])
    assert code == 0, err
    meta = load_checkpoint(tmp_path / "b.ckpt")["seq2seq"]
    tgt = TokenizerPair.from_state(meta["tokenizers"]).tgt
    tags = {tgt.piece_id(f"<2{lang}>") for lang in ("en", "de", "fr")}
    assert tags <= set(meta["shortlist"]["frequent"].tolist())


def test_server_models_load_with_the_shortlist(ckpt, corpus, tmp_path, one_thread):
    """``seq2seq-serve --shortlist``: each served model decodes over its table, /models says so;
    a model without one is refused at start-up."""
    from seq2seq.serving.models import load_models

    out = tmp_path / "sl.ckpt"
    code, _, err = run_main(shortlist_main, ["-m", str(ckpt), "-o", str(out), "--source",
                                             str(corpus[0]), "--target", str(corpus[1])])
    assert code == 0, err
    models = load_models([f"a={out}"], shortlist=True)
    assert models["a"].describe()["shortlist"] is True
    assert load_models([f"a={out}"])["a"].describe()["shortlist"] is False
    with pytest.raises(ValueError, match="no shortlist table"):
        load_models([f"raw={ckpt}"], shortlist=True)


@pytest.mark.parametrize("k", [1, 10**9], ids=["vocab+1", "1e9"])
def test_per_source_over_the_target_vocabulary_is_capped_with_one_warning(k, ckpt, corpus,
                                                                          tmp_path, one_thread):
    """A row holds at most every target piece, so more columns would hold only filler (10**9
    of them: terabytes): capped at the target vocabulary, which one line on stderr says."""
    raw = load_checkpoint(ckpt)
    vocab = raw["seq2seq"]["model_config"]["tgt_vocab_size"]
    k = vocab + k if k == 1 else k
    out = tmp_path / "sl.ckpt"
    code, _, err = run_main(shortlist_main, ["-m", str(ckpt), "-o", str(out), "--source",
                                             str(corpus[0]), "--target", str(corpus[1]),
                                             "--per-source", str(k)])
    assert code in (0, None), err
    warned = [line for line in err.splitlines() if "warning" in line]
    assert warned == [f"seq2seq-shortlist: warning: --per-source {k} is more than the model's "
                      f"{vocab} target pieces: capped at {vocab}"]
    entry = load_checkpoint(out)["seq2seq"]["shortlist"]
    want = shortlist_entry(raw, ShortlistConfig(per_source=vocab), corpus)
    assert entry["per_source"] == vocab and torch.equal(entry["table"], want["table"])
