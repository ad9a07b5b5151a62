"""Ensemble decoding (``seq2seq.decoding.ensemble``): an ensemble of one model is that model;
two members (of different architectures) decode as a plain reference that recomputes every
member's whole prefix and averages the log-softmax outputs; a batch decodes as its
sentences alone; mismatched members are refused; ``seq2seq-translate -m A -m B``."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import (
    run_main,
    save_multilingual_checkpoint,
    save_tiny_checkpoint,
    tiny_random_model,
    tiny_tokenizers,
)

from seq2seq.cli.translate import main as translate_main
from seq2seq.config import DecodingConfig
from seq2seq.decoding.ensemble import Ensemble
from seq2seq.decoding.search import best_attentions, search
from seq2seq.specials import BOS_ID, EOS_ID, PAD_ID
from seq2seq.translation.translator import Translator

VOCAB = 48  # small and untied: EOS is likely enough that lengths vary


def ending(model):
    """``model`` with a bias towards EOS, so that outputs end at various lengths (random
    weights otherwise end at once or never)."""
    with torch.no_grad():
        model.output.bias[EOS_ID] = 0.5
    return model


def narrow(seed: int = 0):
    return ending(tiny_random_model(VOCAB, seed, output_bias=True))


def wide(seed: int = 1):
    """Another architecture on the same vocabulary: wider, a deeper decoder, fewer positions."""
    return ending(tiny_random_model(VOCAB, seed, output_bias=True, d_model=48, d_ff=96,
                                    encoder_layers=1, decoder_layers=3, max_positions=24))


def mixed_src(B: int = 5, S: int = 9, seed: int = 1) -> torch.Tensor:
    """``(B, S)`` right-padded, each row ending with EOS, lengths 3..S."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (B, S), generator=g)
    for i in range(B):
        n = 3 + (i * 2) % (S - 2)
        src[i, n - 1], src[i, n:] = EOS_ID, PAD_ID
    return src


def dcfg(**kw) -> DecodingConfig:
    base = dict(max_len_a=1.0, max_len_b=20, length_penalty="average", stopping="exact",
                no_repeat_ngram_size=0, beam_size=3)
    return DecodingConfig(**{**base, **kw})


def hyps(result) -> list[list[tuple[list[int], float, float]]]:
    return [[(h.tokens, h.score, h.normalized) for h in hs] for hs in result.hypotheses]


def assert_same(got, want, atol: float = 1e-4) -> None:
    """Same tokens per hypothesis; scores equal within ``atol`` (0: exactly)."""
    assert [[h[0] for h in hs] for hs in got] == [[h[0] for h in hs] for hs in want]
    for g, w in zip(got, want):
        for (_, s1, n1), (_, s2, n2) in zip(g, w):
            assert math.isclose(s1, s2, abs_tol=atol) and math.isclose(n1, n2, abs_tol=atol)


# ---------------------------------------------------------------- the reference
def reference_log_probs(members, src_row: torch.Tensor, prefix: list[int]) -> torch.Tensor:
    """``(V,)``: the mean of each member's log-softmax after ``bos + prefix``, every member
    decoding the whole prefix again (teacher forcing, no cache, no ensemble code)."""
    tgt = torch.tensor([[BOS_ID, *prefix]])
    with torch.no_grad():
        lps = [torch.log_softmax(m(src_row[None], tgt)[0, -1].float(), -1) for m in members]
    return torch.stack(lps).mean(0)


def ruled(lp: torch.Tensor, t: int, max_len: int) -> torch.Tensor:
    """The output rules of these settings: never pad/bos; only EOS at step ``max_len``."""
    lp = lp.clone()
    lp[[PAD_ID, BOS_ID]] = -math.inf
    if t == max_len:
        eos = lp[EOS_ID].item()
        lp[:] = -math.inf
        lp[EOS_ID] = eos
    return lp


def max_len_of(members, src_row: torch.Tensor, d: DecodingConfig) -> int:
    positions = min(m.arch.max_positions for m in members)
    n = int((src_row != PAD_ID).sum())
    return max(1, min(math.floor(d.max_len_a * n + d.max_len_b), positions - 1))


def reference_greedy(members, src: torch.Tensor, d: DecodingConfig):
    out = []
    for row in src:
        max_len, toks, score = max_len_of(members, row, d), [], 0.0
        for t in range(max_len + 1):
            lp = ruled(reference_log_probs(members, row, toks), t, max_len)
            tok = int(lp.argmax())
            score += lp[tok].item()
            if tok == EOS_ID:
                break
            toks.append(tok)
        out.append([(toks, score, score / (len(toks) + 1))])
    return out


def reference_beam(members, src: torch.Tensor, d: DecodingConfig):
    """Beam search as ``decoding.beam`` defines it, run to max length: each step the top 2K
    of all extensions; EOS among the top K finishes, the best K others live on."""
    K, out = d.beam_size, []
    for row in src:
        max_len, live, done = max_len_of(members, row, d), [([], 0.0)], []
        for t in range(max_len + 1):
            cands = []
            for toks, s in live:
                lp = ruled(reference_log_probs(members, row, toks), t, max_len)
                cands += [(s + v, toks, i) for i, v in enumerate(lp.tolist())]
            cands = sorted(cands, key=lambda c: -c[0])[: 2 * K]
            done += [(s / (t + 1), s, toks) for r, (s, toks, i) in enumerate(cands)
                     if i == EOS_ID and r < K and math.isfinite(s)]
            live = [(toks + [i], s) for s, toks, i in cands if i != EOS_ID][:K]
        best = sorted(done, key=lambda h: -h[0])[: d.nbest]
        out.append([(toks, s, z) for z, s, toks in best])
    return out


# ---------------------------------------------------------------- one member
@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_an_ensemble_of_one_is_that_model(method):
    model, src = narrow(), mixed_src()
    d = dcfg(method=method, nbest=1 if method == "greedy" else 2, seed=7)
    alone = search(model, src, d, generator=torch.Generator().manual_seed(7))
    ens = search(Ensemble([model]), src, d, generator=torch.Generator().manual_seed(7))
    assert_same(hyps(ens), hyps(alone), atol=0.0)
    assert torch.equal(ens.output, alone.output)


# ---------------------------------------------------------------- two members
@pytest.mark.parametrize("use_cache", [True, False])
def test_two_members_greedy_equals_the_reference(use_cache):
    members, src = [narrow(), wide()], mixed_src()
    d = dcfg()
    got = search(Ensemble(members), src, d, use_cache=use_cache)
    want = reference_greedy(members, src, d)
    assert_same(hyps(got), want)
    assert len({len(h[0][0]) for h in want}) > 2  # lengths vary: EOS is chosen, not forced


@pytest.mark.parametrize("use_cache", [True, False])
def test_two_members_beam_equals_the_reference(use_cache):
    members, src = [narrow(), wide()], mixed_src(B=3)
    d = dcfg(method="beam", nbest=2)
    got = search(Ensemble(members), src, d, use_cache=use_cache)
    want = reference_beam(members, src, d)
    assert_same(hyps(got), want)
    assert len({len(h[0][0]) for h in want}) > 1  # lengths vary: EOS is chosen, not forced


@pytest.mark.parametrize("stopping", ["heuristic", "patience"])
def test_two_members_cached_equals_uncached_under_every_stopping_rule(stopping):
    members, src = [narrow(), wide()], mixed_src()
    d = dcfg(method="beam", nbest=2, stopping=stopping, patience=1.5)
    cached = search(Ensemble(members), src, d)
    assert_same(hyps(cached), hyps(search(Ensemble(members), src, d, use_cache=False)))


def test_two_members_sampling_cached_equals_uncached():
    members, src = [narrow(), wide()], mixed_src()
    d = dcfg(method="sample", nbest=3, seed=5, top_k=10)
    runs = [search(Ensemble(members), src, d, use_cache=c) for c in (True, False)]
    assert_same(hyps(runs[0]), hyps(runs[1]))


def test_the_smallest_members_positions_bound_the_output():
    ens = Ensemble([narrow(), wide()])
    assert ens.arch.max_positions == 24
    out = search(ens, mixed_src(), dcfg(max_len_b=1000))  # asks for more than 23 tokens
    assert all(len(h[0].tokens) <= 23 for h in out.hypotheses)


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_a_batch_decodes_as_each_sentence_alone(method):
    ens, src = Ensemble([narrow(), wide(), narrow(seed=2)]), mixed_src(B=6)
    d = dcfg(method=method, nbest=1 if method == "greedy" else 2)
    batch = hyps(search(ens, src, d))
    for i in range(src.shape[0]):
        row = src[i : i + 1, : int((src[i] != PAD_ID).sum())]  # without the batch's padding
        assert_same([batch[i]], hyps(search(ens, row, d)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_cuda_matches_cpu(method):
    src, d = mixed_src(), dcfg(method=method, nbest=1)
    cpu = search(Ensemble([narrow(), wide()]), src, d)
    gpu = search(Ensemble([narrow(), wide()]).cuda(), src.cuda(), d)
    assert_same(hyps(gpu), hyps(cpu), atol=1e-3)
    assert gpu.output.is_cuda


def test_attention_is_the_first_members():
    members, src = [narrow(), wide()], mixed_src(B=3)
    out = search(Ensemble(members), src, dcfg(), need_attention=True)
    want = best_attentions(members[0], src, [h[0].tokens for h in out.hypotheses])
    for got, ref in zip(out.attentions, want):
        assert len(got.decoder_cross) == members[0].arch.decoder_layers
        assert all(torch.equal(a, b) for a, b in zip(got.decoder_cross, ref.decoder_cross))


def test_members_of_another_vocabulary_are_refused():
    with pytest.raises(ValueError, match=r"^ensemble: b\.ckpt has src_vocab_size 40 but a\.ckpt"):
        Ensemble([narrow(), tiny_random_model(40)], ["a.ckpt", "b.ckpt"])
    with pytest.raises(ValueError, match="model 1 has eos_id 5 but model 0 has 3"):
        Ensemble([narrow(), tiny_random_model(VOCAB, eos_id=5)])
    with pytest.raises(ValueError, match="no models"):
        Ensemble([])
    with pytest.raises(ValueError, match="no checkpoints"):
        Translator.from_checkpoints([])


# ---------------------------------------------------------------- checkpoints and the CLI
@pytest.fixture(scope="module")
def tokenizers():
    return tiny_tokenizers(100)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory, tokenizers):
    folder = tmp_path_factory.mktemp("ensemble")
    return {name: save_tiny_checkpoint(folder / f"{name}.ckpt", tokenizers, seed, pair)
            for name, seed, pair in [("a", 0, ("de", "en")), ("b", 1, ("de", "en")),
                                     ("en_de", 2, ("en", "de"))]}


TEXTS = ["Ein Hund rennt über die Wiese.", "", "Zwei Männer stehen vor einem Haus."]


def test_from_checkpoints(ckpts):
    d = DecodingConfig(method="beam", beam_size=3, max_len_a=1.0, max_len_b=5)
    one = Translator.from_checkpoints([ckpts["a"]], decoding=d)
    assert not isinstance(one.model, Ensemble)  # one checkpoint: exactly from_checkpoint
    two = Translator.from_checkpoints([ckpts["a"], ckpts["b"]], decoding=d)
    alone = [Translator.from_checkpoint(ckpts[k]) for k in "ab"]
    assert isinstance(two.model, Ensemble) and len(two.model.members) == 2
    for member, t in zip(two.model.members, alone):
        assert all(torch.equal(x, y) for x, y in zip(member.state_dict().values(),
                                                    t.model.state_dict().values()))
    by_hand = Translator(Ensemble([t.model for t in alone]), alone[0].tokenizers, d)
    assert two.translate(TEXTS) == by_hand.translate(TEXTS)
    assert two.translate(TEXTS)[1] == "" and two.direction_names == ["de-en"]


def test_cli_two_models(ckpts):
    a, b = str(ckpts["a"]), str(ckpts["b"])
    flags = ["--beam", "3", "--max-len-b", "5", "--output-format", "jsonl", *TEXTS]
    code, out, err = run_main(translate_main, ["-m", a, "-m", b, *flags])
    assert code == 0, err
    want = Translator.from_checkpoints([a, b], decoding=DecodingConfig(
        method="beam", beam_size=3, max_len_b=5)).translate_full(TEXTS)
    got = [json.loads(line) for line in out.splitlines()]
    assert [g["hyp"] for g in got] == [w.hyp for w in want]
    assert all(math.isclose(g["score"], w.score, abs_tol=1e-5) for g, w in zip(got, want))
    # a model twice is that model: (x + x) / 2 == x exactly
    code, same, _ = run_main(translate_main, ["-m", a, "-m", a, *flags])
    assert code == 0 and same == run_main(translate_main, ["-m", a, *flags])[1]


def test_refusals_name_both_files(ckpts, tmp_path):
    code, out, err = run_main(translate_main, ["-m", str(ckpts["a"]), "-m", str(ckpts["en_de"]),
                                               "Hallo"])
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert str(ckpts["en_de"]) in err and str(ckpts["a"]) in err
    assert "translates en-de but" in err and "the same direction(s)" in err
    other = save_tiny_checkpoint(tmp_path / "other.ckpt", tiny_tokenizers(100, n=150))
    with pytest.raises(ValueError, match=r"other\.ckpt has another src tokenizer than .*a\.ckpt"):
        Translator.from_checkpoints([ckpts["a"], other])


def test_multilingual_members_share_their_directions(tmp_path):
    a = save_multilingual_checkpoint(tmp_path / "a.ckpt", "en<>de,fr", "decoder", seed=0)
    b = save_multilingual_checkpoint(tmp_path / "b.ckpt", "en<>de,fr", "decoder", seed=1)
    source = save_multilingual_checkpoint(tmp_path / "s.ckpt", "en<>de,fr", "source", seed=1)
    with pytest.raises(ValueError, match=r"tags on the source side\) but .*tags on the decoder"):
        Translator.from_checkpoints([a, source])
    d = DecodingConfig(max_len_b=5)
    texts = ["A dog runs.", "Two men talk."]
    twice = Translator.from_checkpoints([a, a], decoding=d).translate(texts, target_lang="fr")
    assert twice == Translator.from_checkpoint(a, decoding=d).translate(texts, target_lang="fr")
    assert len(Translator.from_checkpoints([a, b], decoding=d).translate(texts, target_lang="de")) == 2
