"""Export to Hugging Face Marian and CTranslate2: same logits, same greedy tokens, clear refusals."""

from __future__ import annotations

import json
import warnings

import pytest
import sentencepiece
import torch
import torch.nn.functional as F

from seq2seq import export as E
from seq2seq.config import DecodingConfig, ModelConfig, TokenizerConfig, to_dict
from seq2seq.decoding.search import greedy
from seq2seq.model import Seq2Seq
from seq2seq.model.layers import sinusoidal_table

V = 60
PAD, BOS, EOS = 0, 2, 3


def tiny(**overrides) -> Seq2Seq:
    """A random tiny model; 1-d parameters (norms, biases) perturbed so none is trivial."""
    kw = dict(src_vocab_size=V, tgt_vocab_size=V, d_model=32, n_heads=4, d_ff=64,
              encoder_layers=2, decoder_layers=2, dropout=0.0, max_positions=64)
    kw.update(overrides)
    model = Seq2Seq(ModelConfig(**kw))
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
        if not model.arch.tie_output:
            model.output.weight.mul_(2.0)
    return model.eval()


def padded_batch(cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded sources of lengths 9, 6, 4, 2 and BOS-first decoder inputs."""
    src = torch.randint(4, cfg.src_vocab_size, (4, 9))
    for row, n in enumerate((9, 6, 4, 2)):
        src[row, n:] = PAD
    tgt_in = torch.randint(4, cfg.tgt_vocab_size, (4, 7))
    tgt_in[:, 0] = BOS
    tgt_in[2, 5:] = PAD  # padded targets too: causality hides them
    return src, tgt_in


def ours_greedy(model: Seq2Seq, src: torch.Tensor, n: int) -> list[list[int]]:
    """Our greedy with one max length ``n`` for every sentence (tokens before EOS)."""
    result = greedy(model, src, DecodingConfig(max_len_a=0.0, max_len_b=n))
    return [h[0].tokens for h in result.hypotheses]


@pytest.fixture(scope="module")
def copy_model() -> Seq2Seq:
    """Trained 60 steps on a copy task: outputs vary and end with EOS at different steps."""
    torch.manual_seed(0)
    model = Seq2Seq(ModelConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=32, n_heads=4,
                                d_ff=64, encoder_layers=2, decoder_layers=2, dropout=0.0,
                                max_positions=64))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(60):
        src, tgt_in, tgt_out = copy_batch(32)
        loss = F.cross_entropy(model(src, tgt_in).transpose(1, 2), tgt_out, ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def copy_batch(B: int):
    lens = torch.randint(3, 9, (B,))
    S = int(lens.max())
    src = torch.randint(4, V, (B, S))
    src[torch.arange(S)[None] >= lens[:, None]] = PAD
    tgt_out = torch.cat((src, torch.zeros(B, 1, dtype=torch.long)), 1)
    tgt_out[torch.arange(B), lens] = EOS
    tgt_in = torch.cat((torch.full((B, 1), BOS), src), 1)
    return src, tgt_in, tgt_out


# ---------------------------------------------------------------- Hugging Face Marian
HF_CONFIGS = {
    "relu-shared": {},
    "gelu-separate-untied": dict(activation="gelu", share_embeddings=False, tgt_vocab_size=50,
                                 tie_output=False),
}


def test_channel_permutation_turns_interleaved_table_into_marian_halves():
    transformers = pytest.importorskip("transformers")
    emb = transformers.models.marian.modeling_marian.MarianSinusoidalPositionalEmbedding(64, 32)
    ours = sinusoidal_table(64, 32)
    torch.testing.assert_close(ours[:, E.channel_permutation(32)], emb.create_weight(),
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("overrides", HF_CONFIGS.values(), ids=HF_CONFIGS.keys())
def test_hf_marian_logits_equal_ours(overrides):
    pytest.importorskip("transformers")
    model = tiny(**overrides)
    marian = E.to_hf_marian(model)
    src, tgt_in = padded_batch(model.arch)
    with torch.no_grad():
        ours = model(src, tgt_in)
        theirs = marian(input_ids=src, attention_mask=src.ne(PAD), decoder_input_ids=tgt_in).logits
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)


def test_hf_marian_save_pretrained_round_trip(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = tiny(share_embeddings=False, tgt_vocab_size=50)
    E.to_hf_marian(model).save_pretrained(tmp_path)
    marian = transformers.MarianMTModel.from_pretrained(tmp_path).eval()
    src, tgt_in = padded_batch(model.arch)
    with torch.no_grad():
        theirs = marian(input_ids=src, attention_mask=src.ne(PAD), decoder_input_ids=tgt_in).logits
        torch.testing.assert_close(theirs, model(src, tgt_in), atol=1e-4, rtol=0)


def test_hf_marian_generate_equals_our_greedy(copy_model):
    pytest.importorskip("transformers")
    marian = E.to_hf_marian(copy_model)
    src = copy_batch(12)[0]
    n = 10
    with torch.no_grad():
        out = marian.generate(input_ids=src, attention_mask=src.ne(PAD), num_beams=1,
                              do_sample=False, max_new_tokens=n + 1)
    assert (out[:, 0] == BOS).all()  # starts from our BOS
    theirs = [row[1:][: row[1:].index(EOS)] if EOS in row[1:] else row[1:] for row in out.tolist()]
    ours = ours_greedy(copy_model, src, n)
    assert theirs == ours
    assert len({len(t) for t in ours}) > 1  # sentences really end at different steps


def test_hf_marian_generate_random_model_forced_eos():
    """A random model never emits EOS on its own: both stop at the length limit."""
    pytest.importorskip("transformers")
    model = tiny()
    src, _ = padded_batch(model.arch)
    n = 8
    with torch.no_grad():
        out = E.to_hf_marian(model).generate(input_ids=src, attention_mask=src.ne(PAD),
                                              num_beams=1, do_sample=False, max_new_tokens=n + 1)
    assert out[:, -1].tolist() == [EOS] * 4
    assert out[:, 1:-1].tolist() == ours_greedy(model, src, n)


HF_REFUSED = {
    "norm_position": dict(norm_position="pre"),
    "norm": dict(norm="rmsnorm"),
    "positional": dict(positional="rope"),
    "norm_eps": dict(norm_eps=1e-6),
    "d_k": dict(d_k=16, d_v=16),
}


@pytest.mark.parametrize("option", HF_REFUSED)
def test_hf_marian_refuses_unrepresentable_options(option):
    pytest.importorskip("transformers")
    with pytest.raises(ValueError, match=rf"hf-marian cannot represent model\.{option}="):
        E.to_hf_marian(tiny(**HF_REFUSED[option]))


def test_hf_marian_refuses_learned_positions():
    pytest.importorskip("transformers")
    with pytest.raises(ValueError, match=r"model\.positional='learned'"):
        E.to_hf_marian(tiny(positional="learned"))


# ---------------------------------------------------------------- CTranslate2
CT2_CONFIGS = {
    "post": {},
    "pre": dict(norm_position="pre"),
    "pre-rmsnorm": dict(norm_position="pre", norm="rmsnorm"),
    "rope": dict(positional="rope"),
    "learned": dict(positional="learned"),
    "gelu-eps": dict(activation="gelu", norm_eps=0.5),  # a large eps: CT2 must use ours
    "head_dim": dict(d_k=16, d_v=16),
    "separate-untied": dict(share_embeddings=False, tgt_vocab_size=50, tie_output=False),
}


def _translator(path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    return ctranslate2.Translator(str(path), device="cpu", inter_threads=1, intra_threads=1)


def _pieces(ids: torch.Tensor, vocab: list[str]) -> list[list[str]]:
    return [[vocab[i] for i in row if i != PAD] for row in ids.tolist()]


def ct2_greedy(translator, src, src_vocab, tgt_vocab, n):
    """CTranslate2 greedy under our rules: pad/BOS never outputs, EOS allowed at once."""
    results = translator.translate_batch(
        _pieces(src, src_vocab), beam_size=1, max_decoding_length=n, min_decoding_length=0,
        suppress_sequences=[[tgt_vocab[PAD]], [tgt_vocab[BOS]]],
    )
    index = {p: i for i, p in enumerate(tgt_vocab)}
    return [[index[p] for p in r.hypotheses[0]] for r in results]


@pytest.mark.parametrize("overrides", CT2_CONFIGS.values(), ids=CT2_CONFIGS.keys())
def test_ct2_token_log_probs_equal_ours(overrides, tmp_path):
    pytest.importorskip("ctranslate2")
    model = tiny(**overrides)
    out = E.to_ctranslate2(model, tmp_path / "ct2")
    src_vocab, tgt_vocab = E.vocabularies(model)
    src, tgt_in = padded_batch(model.arch)
    tgt = tgt_in[:, 1:].clamp(min=4)  # real tokens; CT2 prepends <s> and appends </s>
    results = _translator(out).score_batch(_pieces(src, src_vocab), _pieces(tgt, tgt_vocab))
    with torch.no_grad():
        log_probs = model(src, torch.cat((tgt_in[:, :1], tgt), 1)).log_softmax(-1)
    gold = torch.cat((tgt, torch.full((4, 1), EOS)), 1)
    ours = log_probs.gather(2, gold[..., None]).squeeze(-1)
    theirs = torch.tensor([r.log_probs for r in results])
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)


@pytest.mark.parametrize("overrides", [{}, dict(norm_position="pre")], ids=["post", "pre"])
def test_ct2_greedy_equals_ours_random_model(overrides, tmp_path):
    model = tiny(**overrides)
    translator = _translator(E.to_ctranslate2(model, tmp_path / "ct2"))
    src, _ = padded_batch(model.arch)
    n = 12
    assert ct2_greedy(translator, src, *E.vocabularies(model), n) == ours_greedy(model, src, n)


def test_ct2_greedy_equals_ours_trained_model(copy_model, tmp_path):
    translator = _translator(E.to_ctranslate2(copy_model, tmp_path / "ct2"))
    src = copy_batch(16)[0]
    ours = ours_greedy(copy_model, src, 10)
    assert ct2_greedy(translator, src, *E.vocabularies(copy_model), 10) == ours
    assert len({len(t) for t in ours}) > 1


@pytest.mark.parametrize("quantization", ["int8", "int16", "float16"])
def test_ct2_quantized_export_loads_and_runs(quantization, copy_model, tmp_path):
    before = {k: v.clone() for k, v in copy_model.state_dict().items()}
    out = E.to_ctranslate2(copy_model, tmp_path / "ct2", quantization)
    for k, v in copy_model.state_dict().items():  # quantizing must not touch our weights
        assert torch.equal(v, before[k]), k
    translator = _translator(out)
    src = copy_batch(4)[0]
    hyps = ct2_greedy(translator, src, *E.vocabularies(copy_model), 10)
    assert len(hyps) == 4 and all(0 <= i < V for h in hyps for i in h)
    fp32 = (E.to_ctranslate2(copy_model, tmp_path / "fp32") / "model.bin").stat().st_size
    assert (out / "model.bin").stat().st_size < fp32


def test_ct2_refuses_different_key_and_value_widths(tmp_path):
    pytest.importorskip("ctranslate2")
    with pytest.raises(ValueError, match=r"ctranslate2 cannot represent model\.d_k=8 != model\.d_v=16"):
        E.to_ctranslate2(tiny(d_k=8, d_v=16), tmp_path / "ct2")
    assert not (tmp_path / "ct2").exists()


def test_ct2_refuses_unknown_quantization_and_non_empty_output(tmp_path):
    pytest.importorskip("ctranslate2")
    with pytest.raises(ValueError, match="quantization='int4'"):
        E.to_ctranslate2(tiny(), tmp_path / "a", "int4")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        E.to_ctranslate2(tiny(), tmp_path / "b")
    E.to_ctranslate2(tiny(), tmp_path / "b", overwrite=True)
    assert not (tmp_path / "b" / "keep.txt").exists()


def test_vocabulary_padding_and_uniqueness():
    assert E._fit_vocabulary(["<pad>", "a"], 4, "src") == ["<pad>", "a", "<extra2>", "<extra3>"]
    with pytest.raises(ValueError, match="'a' twice"):
        E._fit_vocabulary(["a", "b", "a"], 3, "tgt")
    with pytest.raises(ValueError, match="model.src_vocab_size=2"):
        E._fit_vocabulary(["a", "b", "c"], 2, "src")
    vocab = E.default_vocabulary(6, tiny().arch)
    assert vocab[:4] == ["<pad>", "<unk>", "<s>", "</s>"] and len(set(vocab)) == 6


# ---------------------------------------------------------------- checkpoint + CLI
def _texts(n: int = 300) -> list[str]:
    g = torch.Generator().manual_seed(1)
    words = ["der", "die", "das", "haus", "hund", "katze", "ein", "mann", "frau", "läuft",
             "the", "house", "dog", "cat", "a", "man", "woman", "runs", "street", "red"]
    return [" ".join(words[i] for i in torch.randint(0, len(words), (6,), generator=g).tolist())
            for _ in range(n)]


@pytest.fixture(scope="module")
def tokenizers():
    tok = pytest.importorskip("seq2seq.data.tokenizer")
    t = tok.Tokenizer.train(_texts(), TokenizerConfig(vocab_size=V, num_threads=1))
    return tok.TokenizerPair(t, t)


def write_checkpoint(path, model: Seq2Seq, pair) -> None:
    torch.save({
        "seq2seq": {"format": 1, "model_config": to_dict(model.arch), "tokenizers": pair.to_state(),
                    "src_lang": "de", "tgt_lang": "en"},
        "state_dict": {"model." + k: v for k, v in model.state_dict().items()},
    }, path)


def test_cli_ctranslate2_from_checkpoint(tokenizers, copy_model, tmp_path, capsys):
    from seq2seq.cli.export import main

    ckpt = tmp_path / "m.ckpt"
    write_checkpoint(ckpt, copy_model, tokenizers)
    main(["-c", str(ckpt), "--to", "ctranslate2", "--output", str(tmp_path / "ct2")])
    assert "exported" in capsys.readouterr().err
    vocab = json.loads((tmp_path / "ct2" / "shared_vocabulary.json").read_text())
    sp = tokenizers.src
    proc = sentencepiece.SentencePieceProcessor(model_proto=sp.to_bytes())
    assert vocab == [proc.id_to_piece(i) for i in range(proc.get_piece_size())]
    config = json.loads((tmp_path / "ct2" / "config.json").read_text())
    assert (config["decoder_start_token"], config["eos_token"]) == ("<s>", "</s>")
    # Text -> pieces (what CTranslate2 users feed) -> same tokens as our greedy on the ids.
    texts = ["der hund läuft", "a red house", "die katze"]
    ids = sp.encode(texts)
    src = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.long)
    for row, seq in enumerate(ids):
        src[row, : len(seq)] = torch.tensor(seq)
    translator = _translator(tmp_path / "ct2")
    pieces = [sp.pieces(t) for t in texts]
    results = translator.translate_batch(pieces, beam_size=1, max_decoding_length=10,
                                         min_decoding_length=0,
                                         suppress_sequences=[["<pad>"], ["<s>"]])
    index = {p: i for i, p in enumerate(vocab)}
    assert [[index[p] for p in r.hypotheses[0]] for r in results] == ours_greedy(copy_model, src, 10)


def test_cli_hf_marian_from_checkpoint(tokenizers, copy_model, tmp_path):
    transformers = pytest.importorskip("transformers")
    from seq2seq.cli.export import main

    ckpt = tmp_path / "m.ckpt"
    write_checkpoint(ckpt, copy_model, tokenizers)
    out = tmp_path / "marian"
    main(["-c", str(ckpt), "--to", "hf-marian", "--output", str(out)])
    assert {"config.json", "source.spm", "target.spm", "vocab.json"} <= {p.name for p in out.iterdir()}
    marian = transformers.MarianMTModel.from_pretrained(out).eval()
    src, tgt_in = padded_batch(copy_model.arch)
    with torch.no_grad():
        theirs = marian(input_ids=src, attention_mask=src.ne(PAD), decoder_input_ids=tgt_in).logits
        torch.testing.assert_close(theirs, copy_model(src, tgt_in), atol=1e-4, rtol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        tok = transformers.MarianTokenizer.from_pretrained(out)
    text = "der hund läuft"
    assert tok(text).input_ids == tokenizers.src.encode([text])[0] + [EOS]


def test_cli_errors_are_one_line_exit_2(tokenizers, tmp_path, capsys):
    from seq2seq.cli.export import main

    def run(*argv) -> str:
        with pytest.raises(SystemExit) as exc:
            main(list(argv))
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("seq2seq-export: error: ")
        return err[-1]

    assert "no such file" in run("-c", str(tmp_path / "nope.ckpt"), "--to", "ctranslate2",
                                 "--output", str(tmp_path / "x"))
    ckpt = tmp_path / "pre.ckpt"
    write_checkpoint(ckpt, tiny(norm_position="pre"), tokenizers)
    line = run("-c", str(ckpt), "--to", "hf-marian", "--output", str(tmp_path / "y"))
    assert "hf-marian cannot represent model.norm_position='pre'" in line
    assert not (tmp_path / "y").exists()
    assert "--quantization" in run("-c", str(ckpt), "--to", "hf-marian", "--output",
                                   str(tmp_path / "z"), "--quantization", "int8")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").write_text("x")
    assert "not empty" in run("-c", str(ckpt), "--to", "ctranslate2", "--output",
                              str(tmp_path / "full"))


def test_export_entry_refuses_unknown_format_and_hf_quantization(tmp_path):
    with pytest.raises(ValueError, match="'onnx'"):
        E.export(tmp_path / "m.ckpt", "onnx", tmp_path / "o")
    with pytest.raises(ValueError, match="quantization"):
        E.export(tmp_path / "m.ckpt", "hf-marian", tmp_path / "o", "int8")
