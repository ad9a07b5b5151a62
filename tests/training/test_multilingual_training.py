"""Training on several directions at once: the config, the joint tokenizer on a balanced
sample, tags placed by ``collate``, the temperature sampler (shares, exact resume, ranks),
per-direction validation and checkpoints that record their directions."""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import multi30k_lines

from seq2seq.checkpoint import CheckpointError, load_checkpoint
from seq2seq.config import ConfigError, DataConfig, TokenizerConfig
from seq2seq.data import multi
from seq2seq.data.batch import collate
from seq2seq.data.datamodule import Seq2SeqDataModule
from seq2seq.data.sampler import DirectionSampler, direction_counts, direction_shares
from seq2seq.data.tokenizer import Tokenizer
from seq2seq.directions import Directions, different_directions, parse_pairs, tag_piece

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
LANGS = ("en", "de", "fr")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The first 300 training and 30 validation lines of Multi30k en/de/fr, as a data_dir."""
    out = tmp_path_factory.mktemp("multi30k")
    for split, n in (("train", 300), ("val", 30)):
        for lang in LANGS:
            with gzip.open(out / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(s + "\n" for s in multi30k_lines(lang, n, split)))
    return out


def config(corpus: Path, spec: str = "en<>de,fr", **kw) -> DataConfig:
    kw = {"cache_dir": str(corpus / "cache"), **kw}
    return DataConfig(data_dir=str(corpus), directions=spec, max_len_ratio=9.0,
                      tokenizer=TokenizerConfig(vocab_size=250, num_threads=1), max_tokens=600, **kw)


# ---------------------------------------------------------------- config
@pytest.mark.parametrize("kw, needles", [
    ({"directions": "en-en"}, ["DataConfig.directions", "into itself"]),
    ({"directions": "en-German"}, ["DataConfig.directions", "'German'"]),
    ({"directions": "en-de", "corpus": None, "train_src": "a", "train_tgt": "b", "valid_src": "c",
      "valid_tgt": "d"}, ["DataConfig.directions", "multi30k"]),
    ({"directions": "en-de", "tokenizer": {"joint": False}}, ["DataConfig.directions", "joint"]),
    ({"direction_temperature": 0.0}, ["DataConfig.direction_temperature"]),
    ({"tag_position": "target"}, ["DataConfig.tag_position"]),
])
def test_config_refusals_name_the_field(kw, needles):
    with pytest.raises(ConfigError) as exc:
        DataConfig(**kw)
    assert "\n" not in str(exc.value) and all(n in str(exc.value) for n in needles), exc.value


def test_single_direction_config_has_no_directions():
    assert DataConfig().model_directions is None
    d = DataConfig(directions="all:en,de,fr", tag_position="decoder").model_directions
    assert d == Directions(parse_pairs("all:en,de,fr"), "decoder") and len(d.pairs) == 6


# ---------------------------------------------------------------- collate
def test_collate_places_the_tag_once_per_row():
    ex = {"src_ids": [[10, 11], [12]], "tgt_ids": [[20], [21, 22, 23]], "id": np.array([0, 1]),
          "tag": np.array([5, 6])}
    plain = collate(ex, pad_id=0, bos_id=2, eos_id=3)
    src = collate(ex, pad_id=0, bos_id=2, eos_id=3, tag_position="source")
    dec = collate(ex, pad_id=0, bos_id=2, eos_id=3, tag_position="decoder")
    assert src.src.tolist() == [[5, 10, 11, 3], [6, 12, 3, 0]]
    assert torch.equal(src.tgt_in, plain.tgt_in) and torch.equal(src.tgt_out, plain.tgt_out)
    assert dec.tgt_in.tolist() == [[5, 20, 0, 0], [6, 21, 22, 23]]  # the tag replaces BOS
    assert torch.equal(dec.src, plain.src) and torch.equal(dec.tgt_out, plain.tgt_out)
    listed = collate([{k: v[i] for k, v in ex.items()} for i in range(2)], 0, 2, 3, "source")
    assert torch.equal(listed.src, src.src)


# ---------------------------------------------------------------- sampler
def sampler(sizes, temperature, seed=3, max_tokens=64, **kw) -> DirectionSampler:
    rng = np.random.default_rng(0)
    directions = np.concatenate([np.full(n, d) for d, n in enumerate(sizes)])
    src, tgt = rng.integers(2, 20, len(directions)), rng.integers(2, 20, len(directions))
    return DirectionSampler(src, tgt, directions, max_tokens, temperature, seed=seed, **kw)


@pytest.mark.parametrize("temperature", [1.0, 2.0, 5.0, 100.0])
def test_observed_shares_follow_the_temperature(temperature):
    sizes = [400, 100, 25]
    s = sampler(sizes, temperature)
    n = np.asarray(sizes, dtype=float)
    expected = n ** (1 / temperature) / (n ** (1 / temperature)).sum()
    assert np.allclose(direction_shares(sizes, temperature), expected)
    for epoch in (0, 1):
        rows = np.concatenate(s.batches(epoch))
        observed = np.bincount(np.repeat(np.arange(3), sizes)[rows], minlength=3)
        assert observed.sum() == sum(sizes) and np.all(np.abs(observed - expected * sum(sizes)) < 1)
        assert np.array_equal(observed, direction_counts(sizes, temperature))
        for d, members in enumerate(np.split(np.arange(sum(sizes)), np.cumsum(sizes)[:-1])):
            drawn = Counter(rows[np.isin(rows, members)].tolist())
            # without replacement up to all of a direction's pairs; repeats only beyond that
            assert max(drawn.values()) - min(drawn.values()) <= 1 if observed[d] >= sizes[d] else \
                max(drawn.values()) == 1
    if temperature == 1.0:  # proportional: every pair exactly once
        assert sorted(np.concatenate(s.batches(0)).tolist()) == list(range(sum(sizes)))


def test_equal_sizes_at_t1_are_uniform_and_epochs_differ():
    s = sampler([120, 120, 120], 1.0)
    assert np.array_equal(direction_counts([120] * 3, 1.0), [120] * 3)
    first, second = s.batches(0), s.batches(1)
    assert sorted(np.concatenate(first).tolist()) == list(range(360))
    assert [b.tolist() for b in first] != [b.tolist() for b in second]
    assert [b.tolist() for b in first] == [b.tolist() for b in sampler([120] * 3, 1.0).batches(0)]
    mixed = [len(set(np.repeat(np.arange(3), 120)[b].tolist())) for b in first]
    assert max(mixed) > 1  # batches mix directions


def test_budget_and_packing_rule_hold():
    s = sampler([300, 50], 3.0, max_tokens=80)
    for b in s.batches(0):
        assert len(b) * int(s.sizes[b].max()) <= 80 or len(b) == 1


def test_resumed_sampler_yields_exactly_the_remaining_batches():
    s = sampler([200, 60, 30], 2.0)
    s.set_epoch(4)
    it = iter(s)
    seen = [next(it) for _ in range(5)]
    state = s.state_dict()
    rest = list(it)
    resumed = sampler([200, 60, 30], 2.0, seed=99)  # the state carries the seed
    resumed.load_state_dict(state)
    assert list(resumed) == rest and seen + rest == [b.tolist() for b in s.batches(4)]
    assert len(resumed) == len(s.batches(4))


def test_ranks_split_an_epoch_disjointly():
    whole = sampler([150, 40], 2.0).global_batches(2)
    shards = [sampler([150, 40], 2.0, num_replicas=2, rank=r).batches(2) for r in (0, 1)]
    assert len(shards[0]) == len(shards[1])
    flat = [b.tolist() for shard in shards for b in shard]
    assert all(b.tolist() in flat for b in whole)


# ---------------------------------------------------------------- data pipeline
def test_balanced_sample_has_as_many_sentences_of_each_language(corpus):
    cfg = config(corpus, "all:en,de,fr")
    lines = multi.load_lines(cfg, "train", LANGS)
    tok_cfg = TokenizerConfig(input_sentence_size=90, seed=4)
    sample = list(multi.balanced_sample(lines, LANGS, tok_cfg))
    assert sample == list(multi.balanced_sample(lines, LANGS, tok_cfg))  # seeded
    per_lang = Counter(next(lang for lang in LANGS if text in set(lines[lang])) for text in sample)
    assert per_lang == {"en": 30, "de": 30, "fr": 30}
    other = list(multi.balanced_sample(lines, LANGS, TokenizerConfig(input_sentence_size=90, seed=5)))
    assert other != sample


def test_each_language_is_tokenized_once_and_rows_carry_their_direction(corpus, monkeypatch):
    encoded: list[int] = []
    real = Tokenizer.encode

    def counting(self, texts, *args, **kw):
        encoded.append(len(texts))
        return real(self, texts, *args, **kw)

    monkeypatch.setattr(Tokenizer, "encode", counting)
    cfg = config(corpus, "en<>de,fr", cache_dir=str(corpus / "cache-once"))
    dm = Seq2SeqDataModule(cfg)
    dm.prepare_data()
    dm.setup("fit")
    assert sum(encoded) == (300 + 30) * 3  # 3 languages, not 4 directions x 2 sides
    tok, d = dm.tokenizers.src, cfg.model_directions
    assert dm.tokenizers.joint and all(tok.piece_id(tag_piece(t)) >= 4 for t in ("en", "de", "fr"))
    assert not any(tag_piece("de") in tok.pieces(text) for text in ("<2de> ein Hund",))
    assert sorted(dm.val_sets) == sorted(d.names())
    batch = next(iter(dm.train_dataloader()))
    rows = dm.rows["train"]
    for i, row in enumerate(batch.ids.tolist()):
        a, b = d.pairs[rows.direction[row]]
        line = dm.train_dataset[int(rows.lines[row])]
        n = len(line[f"{a}_ids"])
        assert batch.src[i, 0] == tok.piece_id(tag_piece(b))  # source tag: the target language
        assert batch.src[i, 1:n + 1].tolist() == line[f"{a}_ids"] and batch.src[i, n + 1] == tok.eos_id
        assert batch.tgt_out[i, :len(line[f"{b}_ids"])].tolist() == line[f"{b}_ids"]
    assert len(set(rows.direction[batch.ids.numpy()].tolist())) > 1


def test_cache_keys_follow_the_directions(corpus):
    one = multi.multi_tokenizers(config(corpus, "en<>de"), Directions(parse_pairs("en<>de")))
    two = multi.multi_tokenizers(config(corpus, "en<>de,fr"), Directions(parse_pairs("en<>de,fr")))
    assert one.src.fingerprint != two.src.fingerprint
    with pytest.raises(KeyError):
        one.src.piece_id(tag_piece("fr"))
    with pytest.raises(ValueError, match="<2fr>"):
        multi.tag_ids(one, Directions(parse_pairs("en-fr")))


def test_subword_sampling_keeps_working(corpus):
    dm = Seq2SeqDataModule(config(corpus, "en-de,de-en", subword_alpha=0.2, tag_position="decoder"))
    dm.prepare_data()
    dm.setup("fit")
    loader = dm.train_dataloader()
    first, again = next(iter(loader)), next(iter(loader))
    assert torch.equal(first.src, again.src)  # a pure function of the seed and the batch
    tags = {dm.tokenizers.tgt.piece_id(tag_piece(t)) for t in ("en", "de")}
    assert set(first.tgt_in[:, 0].tolist()) <= tags


# ---------------------------------------------------------------- directions of checkpoints
def test_different_directions():
    d = Directions(parse_pairs("en<>de"))
    assert different_directions(None, None) is None
    assert different_directions(d, Directions(parse_pairs("de-en,en-de"))) is None  # any order
    assert "one direction" in different_directions(None, d)
    assert "en-de" in different_directions(d, Directions(parse_pairs("en<>de,fr")))
    assert "decoder" in different_directions(d, Directions(d.pairs, "decoder"))


# ---------------------------------------------------------------- end to end
@pytest.mark.parametrize("tag_position", ["source", "decoder"])
def test_train_checkpoint_translate_every_direction(corpus, tmp_path, tag_position):
    from seq2seq.checkpoint import config_of
    from seq2seq.cli.train import build_cli
    from seq2seq.cli.train_checks import check_resume
    from seq2seq.training.module import _same_run
    from seq2seq.translation.translator import Translator

    spec, root = "en<>de,fr", tmp_path / "run"
    cli = build_cli([
        "fit", "--data.data.data_dir", str(corpus), "--data.data.directions", spec,
        "--data.data.tag_position", tag_position, "--data.data.cache_dir", str(corpus / "cache"),
        "--data.data.tokenizer.vocab_size", "250", "--data.data.tokenizer.num_threads", "1",
        "--data.data.max_tokens", "600", "--model.arch.d_model", "32", "--model.arch.n_heads", "2",
        "--model.arch.d_ff", "64", "--model.arch.encoder_layers", "1", "--model.arch.decoder_layers", "1",
        "--model.val_bleu_max_sentences", "4", "--trainer.max_steps", "4",
        "--trainer.val_check_interval", "2", "--trainer.limit_val_batches", "2",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.default_root_dir", str(root), "--trainer.logger", "false",
    ])
    names = Directions(parse_pairs(spec)).names()
    metrics = cli.trainer.callback_metrics
    assert all(f"val_bleu/{n}" in metrics for n in names) and "val_bleu" in metrics
    mean = sum(float(metrics[f"val_bleu/{n}"]) for n in names) / len(names)
    assert float(metrics["val_bleu"]) == pytest.approx(mean)
    curves = json.loads((root / "curves.json").read_text())
    assert all(f"val_bleu/{n}" in curves["val"][-1] for n in names) and (root / "curves.png").is_file()

    ckpt_path = root / "checkpoints" / "last.ckpt"
    meta = load_checkpoint(ckpt_path)["seq2seq"]
    assert meta["src_lang"] is None and meta["tgt_lang"] is None
    assert meta["directions"] == {"pairs": names, "tag_position": tag_position}
    translator = Translator.from_checkpoint(ckpt_path)
    for a, b in parse_pairs(spec):
        out = translator.translate(["Ein Hund.", "A dog."], target_lang=b, source_lang=a)
        assert len(out) == 2 and all(isinstance(t, str) for t in out)
    # resuming or starting from it with other directions is refused
    tokenizers = cli.datamodule.tokenizers
    _same_run(meta, tokenizers, None, "ckpt", Directions(parse_pairs("de-en,en-de,en-fr,fr-en"), tag_position))
    for other in (None, Directions(parse_pairs("en<>de"), tag_position)):
        with pytest.raises(CheckpointError, match="DataConfig.directions"):
            _same_run(meta, tokenizers, None, "ckpt", other)
    # and refused before any data is prepared: --ckpt_path with other directions
    module = SimpleNamespace(arch=config_of(meta), init_from=None)
    for spec_other in ("en<>de", None):
        data = SimpleNamespace(config=DataConfig(data_dir=str(corpus), directions=spec_other))
        with pytest.raises(ValueError, match="--ckpt_path .*DataConfig.directions"):
            check_resume(module, data, ckpt_path)
    same = SimpleNamespace(config=DataConfig(data_dir=str(corpus), directions=spec, tag_position=tag_position))
    check_resume(module, same, ckpt_path)


def test_multilingual_run_needs_shared_embeddings(corpus, tmp_path, capsys):
    from seq2seq.cli.train import main

    with pytest.raises(SystemExit) as exc:
        main(["fit", "--data.data.data_dir", str(corpus), "--data.data.directions", "en<>de",
              "--data.data.cache_dir", str(corpus / "cache"), "--data.data.tokenizer.vocab_size", "250",
              "--data.data.tokenizer.num_threads", "1", "--model.arch.share_embeddings", "false",
              "--trainer.max_steps", "1", "--trainer.default_root_dir", str(tmp_path),
              "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("seq2seq-train")]
    assert exc.value.code == 2 and len(errors) == 1 and "--model.arch.share_embeddings" in errors[0], errors


@pytest.mark.parametrize("name, spec", [
    ("multi30k_en_de_both_tiny", "en<>de"),
    ("multi30k_en_de_fr_tiny", "all:en,de,fr"),
    ("multi30k_en_de_fr_cs_tiny", "en<>de,fr,cs"),
])
def test_shipped_multilingual_configs(name, spec):
    """Each study config is the En->De Tiny recipe with directions (the model unchanged)."""
    from seq2seq.cli.train import build_cli

    cli = build_cli(["-c", str(ROOT / "configs" / f"{name}.yaml")], run=False)
    base = build_cli(["-c", str(ROOT / "configs" / "multi30k_en_de_tiny.yaml")], run=False)
    assert cli.datamodule.config.model_directions == Directions(parse_pairs(spec), "source")
    assert cli.model.arch == base.model.arch and cli.model.optim == base.model.optim
    assert cli.datamodule.config.tokenizer == base.datamodule.config.tokenizer


def test_curves_draw_each_direction():
    from matplotlib.figure import Figure

    from seq2seq.plotting import _plot_directions

    val = [{"step": s, "val_bleu": 1.0 + s, "val_bleu/en-de": 2.0 + s, "val_bleu/de-en": s}
           for s in (10, 20)]
    ax = Figure().subplots()
    _plot_directions(ax, val, "", None)
    lines = {line.get_label(): line.get_ydata().tolist() for line in ax.get_lines()}
    assert lines == {"de-en": [10, 20], "en-de": [12, 22]}
