"""Properties of decoding (``seq2seq.decoding.search``) on tiny random models and a hand-built one."""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import replace

import pytest
import torch

from seq2seq.config import DecodingConfig, ModelConfig
from seq2seq.decoding.search import (
    beam_search,
    filter_logits,
    finish_bound,
    greedy,
    max_lengths,
    sample,
    search,
)
from seq2seq.model import Seq2Seq
from seq2seq.model.layers import Linear

VOCAB, PAD, BOS, EOS = 48, 0, 2, 3
NORMS = list(itertools.product(["post", "pre"], ["layernorm", "rmsnorm"]))


def tiny_model(seed: int = 0, **overrides) -> Seq2Seq:
    """d_model 32, perturbed off its init; the untied output layer makes EOS likely enough
    that lengths vary (a fresh model rarely ends)."""
    torch.manual_seed(seed)
    kw = dict(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=32, n_heads=4, d_ff=64,
              encoder_layers=2, decoder_layers=2, dropout=0.0, max_positions=64, tie_output=False)
    model = Seq2Seq(ModelConfig(**{**kw, **overrides})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


def mixed_src(B: int = 8, S: int = 10, seed: int = 1) -> torch.Tensor:
    """``(B, S)`` right-padded, lengths cycling 2..S."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (B, S), generator=g)
    for i in range(B):
        src[i, 2 + i % (S - 1):] = PAD
    return src


def dcfg(**kw) -> DecodingConfig:
    # the searches themselves; the n-gram rule has its own tests (test_no_repeat_ngram.py)
    base = dict(max_len_a=1.0, max_len_b=4, length_penalty="none", stopping="exact",
                no_repeat_ngram_size=0)
    return DecodingConfig(**{**base, **kw})


def tokens(result) -> list[list[list[int]]]:
    return [[h.tokens for h in hs] for hs in result.hypotheses]


def recorded(fn, *args, **kw):
    """Run a search, returning the result and its per-step raw log-probs."""
    steps = []
    result = fn(*args, on_step=lambda t, lp: steps.append(lp.clone()), **kw)
    return result, steps


# ---------------------------------------------------------------- cache
@pytest.mark.parametrize("position,norm", NORMS)
@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_cached_equals_uncached(method, position, norm):
    model = tiny_model(norm_position=position, norm=norm)
    src = mixed_src()
    cfg = dcfg(method=method, beam_size=3, nbest=2)
    cached, c_steps = recorded(search, model, src, cfg, use_cache=True)
    full, f_steps = recorded(search, model, src, cfg, use_cache=False)
    assert tokens(cached) == tokens(full)
    assert len(c_steps) == len(f_steps)
    for a, b in zip(c_steps, f_steps):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_rope_and_learned_positions_cached_equals_uncached():
    for positional in ("rope", "learned"):
        model = tiny_model(positional=positional)
        cfg = dcfg(method="beam", beam_size=3)
        assert tokens(beam_search(model, mixed_src(), cfg)) == tokens(
            beam_search(model, mixed_src(), cfg, use_cache=False))


# ---------------------------------------------------------------- beam vs greedy
def test_beam_one_equals_greedy():
    model, src = tiny_model(), mixed_src(B=12)
    g = greedy(model, src, dcfg())
    b = beam_search(model, src, dcfg(method="beam", beam_size=1, nbest=1))
    assert tokens(g) == tokens(b)
    assert [h[0].score for h in g.hypotheses] == pytest.approx([h[0].score for h in b.hypotheses])


@pytest.mark.parametrize("penalty", ["none", "gnmt", "average"])
def test_nbest_keeps_the_one_best(penalty):
    model, src = tiny_model(), mixed_src()
    one = beam_search(model, src, dcfg(method="beam", beam_size=5, nbest=1, length_penalty=penalty))
    five = beam_search(model, src, dcfg(method="beam", beam_size=5, nbest=5, length_penalty=penalty))
    assert [t[0] for t in tokens(one)] == [t[0] for t in tokens(five)]
    for hs in five.hypotheses:  # sorted best first, distinct
        assert [h.normalized for h in hs] == sorted((h.normalized for h in hs), reverse=True)
        assert len({tuple(h.tokens) for h in hs}) == len(hs)


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_batch_of_one_equals_batch_of_sixteen(method):
    model, src = tiny_model(), mixed_src(B=16)
    cfg = dcfg(method=method, beam_size=4)
    batched = tokens(search(model, src, cfg))
    for i in range(16):
        alone = src[i : i + 1, : int((src[i] != PAD).sum())]  # its own length, no padding
        assert tokens(search(model, alone, cfg))[0] == batched[i], i


def test_beam_scores_at_least_greedy():
    for seed in range(4):
        model, src = tiny_model(seed), mixed_src(seed=seed)
        g = greedy(model, src, dcfg())
        b = beam_search(model, src, dcfg(method="beam", beam_size=4))
        for hg, hb in zip(g.hypotheses, b.hypotheses):
            assert hb[0].score >= hg[0].score - 1e-5


class Bigram(Seq2Seq):
    """Next-token logits are ``table[previous token]`` (the source is ignored), while the
    real decoder still runs underneath so the cache is exercised. Lets a test craft the
    distributions beam search must cope with."""

    def __init__(self, table: torch.Tensor):
        V = table.shape[0]
        super().__init__(ModelConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=8, n_heads=2,
                                     d_ff=8, encoder_layers=1, decoder_layers=1, dropout=0.0))
        self.table = table
        # The "state" of a position is its input token, one-hot; the output layer looks its
        # row up (one-hot x table is exact), so decode = output(decode_hidden) still holds.
        self.output = Linear(V, V, bias=False)
        with torch.no_grad():
            self.output.weight.copy_(table.T)
        self.eval()

    def decode_hidden(self, tgt, memory, memory_mask, cache=None, weights=None):
        _, cache = super().decode_hidden(tgt, memory, memory_mask, cache, weights)
        return torch.nn.functional.one_hot(tgt, self.table.shape[0]).float(), cache

    @classmethod
    def random(cls, seed: int, V: int = 24) -> Bigram:
        """Peaky enough to have cycles, with EOS likely enough that lengths vary."""
        g = torch.Generator().manual_seed(seed)
        table = torch.randn(V, V, generator=g) * 1.5
        table[:, EOS] += 1.0
        return cls(table)


A, B = 10, 11


def short_sighted() -> Bigram:
    """First step A 0.6 / B 0.4; after A everything is flat; after B EOS has ~1."""
    table = torch.zeros(20, 20)  # flat: every token 1/20
    table[BOS] = -1e4
    table[BOS, A], table[BOS, B] = torch.tensor([0.6, 0.4]).log()
    table[B, EOS] = 20.0
    return Bigram(table)


def test_beam_finds_what_greedy_misses():
    model, src = short_sighted(), torch.tensor([[5, 6, 7]])
    for use_cache in (True, False):
        g = greedy(model, src, dcfg(), use_cache=use_cache).hypotheses[0][0]
        b = beam_search(model, src, dcfg(method="beam", beam_size=2), use_cache=use_cache).hypotheses[0][0]
        assert g.tokens[0] == A and len(g.tokens) == 7  # wanders to max length
        assert b.tokens == [B]
        assert b.score == pytest.approx(math.log(0.4), abs=1e-5)
        assert b.score > g.score


# ---------------------------------------------------------------- the finish bound
@pytest.mark.parametrize("penalty,alpha", [("none", 0.6), ("gnmt", 0.6), ("gnmt", 1.5), ("average", 0.6)])
def test_early_stop_is_exact(penalty, alpha):
    """Stopping a sentence at the bound returns exactly what running to max length does
    (the common ``s / lp(t+1)`` shortcut fails this: under average normalization it stops
    before a longer hypothesis that would win, e.g. on ``Bigram.random(7)``)."""
    saved = 0
    models = [(Bigram.random(seed), torch.randint(4, 24, (6, 10))) for seed in range(10)]
    models += [(tiny_model(seed), mixed_src(seed=seed)) for seed in range(2)]
    for model, src in models:
        src[:, 5:] = PAD  # mixed lengths
        src[::2, 2:] = PAD
        for nbest in (1, 2):
            cfg = dcfg(method="beam", beam_size=4, nbest=nbest, length_penalty=penalty,
                       alpha=alpha, max_len_b=10)
            early, early_steps = recorded(beam_search, model, src, cfg)
            full, full_steps = recorded(beam_search, model, src, cfg, stop_early=False)
            assert tokens(early) == tokens(full)
            saved += sum(len(s) for s in full_steps) - sum(len(s) for s in early_steps)
    if penalty in ("none", "gnmt"):
        assert saved > 0  # and the bound does stop sentences early


@pytest.mark.parametrize("stopping", ["heuristic", "patience"])
def test_inexact_stopping_never_beats_exact(stopping):
    """``heuristic`` (HF's rule) and ``patience`` (fairseq/CTranslate2's) follow the same
    beams as the exact search and may stop sooner than max length: the 1-best can only
    score lower or equal (the exact run's candidates are a superset), and they do stop
    sentences before max length."""
    saved = 0
    for seed in range(8):
        model, src = Bigram.random(seed), torch.randint(4, 24, (6, 10))
        src[::2, 3:] = PAD
        exact_cfg = dcfg(method="beam", beam_size=4, length_penalty="average", max_len_b=12)
        exact = beam_search(model, src, exact_cfg)
        full, full_steps = recorded(beam_search, model, src, exact_cfg, stop_early=False)
        fast, fast_steps = recorded(beam_search, model, src, dataclasses.replace(exact_cfg, stopping=stopping))
        for e, f in zip(exact.hypotheses, fast.hypotheses):
            assert f[0].normalized <= e[0].normalized + 1e-6
        saved += sum(map(len, full_steps)) - sum(map(len, fast_steps))
    assert saved > 0


def test_patience_stops_once_that_many_have_finished():
    """With patience p a sentence runs until ceil(p x K) hypotheses have finished: the pool
    returned with nbest = K holds K finished hypotheses for every sentence that could
    produce them, and a larger patience never stops sooner."""
    for seed in range(4):
        model, src = Bigram.random(seed), torch.randint(4, 24, (5, 8))
        base = dcfg(method="beam", beam_size=3, nbest=3, length_penalty="average",
                    max_len_b=15, stopping="patience")
        one, one_steps = recorded(beam_search, model, src, base)
        two, two_steps = recorded(beam_search, model, src, dataclasses.replace(base, patience=2.0))
        assert all(len(h) == 3 for h in one.hypotheses)
        assert len(two_steps) >= len(one_steps)


def test_finish_bound_is_an_upper_bound():
    cfg = dcfg(length_penalty="gnmt", alpha=0.6)
    best_live, max_len = torch.tensor([-4.0]), torch.tensor([20])
    bound = finish_bound(best_live, 3, max_len, cfg)
    for L in range(5, 22):  # any finishing length, any raw score <= best_live
        for s in (-4.0, -4.5, -9.0):
            assert s / ((5 + L) / 6) ** 0.6 <= bound.item() + 1e-7


# ---------------------------------------------------------------- lengths
@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_max_length_and_nothing_after_eos(method):
    model, src = tiny_model(), mixed_src(B=10)
    cfg = dcfg(method=method, max_len_a=0.5, max_len_b=3, beam_size=3, seed=0)
    result = search(model, src, cfg)
    limits = max_lengths(src, cfg, PAD, model.arch.max_positions).tolist()
    for hs, limit in zip(result.hypotheses, limits):
        for h in hs:
            assert len(h.tokens) <= limit
            assert EOS not in h.tokens and PAD not in h.tokens and BOS not in h.tokens
    for row in result.output.tolist():  # 1-best ids: tokens, one EOS, then only pad
        end = row.index(EOS)
        assert all(t == PAD for t in row[end + 1:])


def test_max_length_capped_by_max_positions():
    model = tiny_model(max_positions=12)
    src = torch.randint(4, VOCAB, (2, 11))
    for method in ("greedy", "beam"):
        result = search(model, src, dcfg(method=method, max_len_a=3.0, beam_size=2, min_len=50))
        assert all(len(hs[0].tokens) == 11 for hs in result.hypotheses)


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_min_length(method):
    model, src = tiny_model(), mixed_src()
    cfg = dcfg(method=method, min_len=5, max_len_b=8, beam_size=3, seed=0)
    assert min(len(h.tokens) for hs in search(model, src, cfg).hypotheses for h in hs) >= 5
    free = dcfg(method=method, beam_size=3, seed=0)
    assert min(len(h.tokens) for hs in search(model, src, free).hypotheses for h in hs) < 5


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_force_length(method):
    model, src = tiny_model(), mixed_src()
    for use_cache in (True, False):
        result = search(model, src, dcfg(method=method, beam_size=2), force_length=20, use_cache=use_cache)
        assert all(len(h.tokens) == 20 and EOS not in h.tokens for hs in result.hypotheses for h in hs)
    with pytest.raises(ValueError, match="force_length"):
        greedy(model, src, dcfg(), force_length=65)


def test_finished_sentences_leave_the_batch():
    model, src = tiny_model(), mixed_src(B=16)
    for method, k in (("greedy", 1), ("beam", 3)):
        _, steps = recorded(search, model, src, dcfg(method=method, beam_size=3))
        rows = [s.shape[0] for s in steps]
        assert rows[0] == 16 * k and rows[-1] < rows[0] and rows == sorted(rows, reverse=True)


# ---------------------------------------------------------------- sampling
def test_sampling_is_seeded_and_top_k_one_is_greedy():
    model, src = tiny_model(), mixed_src()
    cfg = dcfg(method="sample", seed=7, nbest=3, temperature=1.5)
    assert tokens(sample(model, src, cfg)) == tokens(sample(model, src, cfg))
    assert tokens(sample(model, src, cfg)) != tokens(sample(model, src, replace(cfg, seed=8)))
    g = greedy(model, src, dcfg())
    for kw in (dict(top_k=1), dict(top_p=1e-6), dict(temperature=1e-4)):
        s = sample(model, src, dcfg(method="sample", seed=0, **kw))
        assert tokens(s) == tokens(g), kw
        assert [h[0].score for h in s.hypotheses] == pytest.approx([h[0].score for h in g.hypotheses])


def test_filter_logits():
    logits = torch.tensor([[0.0, 3.0, 2.0, 1.0]]).log_softmax(-1)
    assert filter_logits(logits, top_k=2).isfinite().tolist() == [[False, True, True, False]]
    p = logits.exp()[0]  # top-p keeps the smallest prefix (by prob) whose mass reaches p
    kept = filter_logits(logits, top_p=float(p[1] + p[2]) - 1e-4).isfinite().tolist()
    assert kept == [[False, True, True, False]]
    assert filter_logits(logits, top_p=1e-9).isfinite().sum() == 1


# ---------------------------------------------------------------- attention
@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_attention_of_the_one_best(method):
    model, src = tiny_model(), mixed_src(B=4)
    result = search(model, src, dcfg(method=method, beam_size=3), need_attention=True)
    for i, (hs, attn) in enumerate(zip(result.hypotheses, result.attentions)):
        S, T = int((src[i] != PAD).sum()), len(hs[0].tokens) + 1
        assert len(attn.encoder_self) == len(attn.decoder_cross) == 2
        assert attn.encoder_self[0].shape == (1, 4, S, S)
        assert attn.decoder_self[1].shape == (1, 4, T, T)
        assert attn.decoder_cross[0].shape == (1, 4, T, S)
        torch.testing.assert_close(attn.decoder_cross[1].sum(-1), torch.ones(1, 4, T))
        assert torch.triu(attn.decoder_self[0][0], diagonal=1).abs().max() == 0  # causal


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_cuda_matches_cpu(method):
    model, src = tiny_model(), mixed_src()
    cfg = dcfg(method=method, beam_size=3, top_k=1, seed=0)
    cpu = search(model, src, cfg, need_attention=True)
    gpu = search(model.cuda(), src.cuda(), cfg, need_attention=True)
    assert tokens(cpu) == tokens(gpu)
    assert gpu.output.is_cuda and gpu.attentions[0].decoder_cross[0].is_cuda


# ---------------------------------------------------------------- row_topk
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from seq2seq.decoding import beam as beam_module  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(R=st.integers(1, 6), V=st.integers(1, 900), k=st.integers(1, 12), chunk=st.integers(1, 40),
       seed=st.integers(0, 2**31 - 1), n_inf=st.integers(0, 900), ties=st.booleans())
def test_row_topk_equals_torch_topk(R, V, k, chunk, seed, n_inf, ties):
    """Values exactly torch.topk's, sorted; indices distinct and pointing at those values;
    with -inf entries (masked tokens, forced steps) and ties (rounded values) too."""
    k = min(k, V)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(R, V, generator=g)
    if ties:
        x = (x * 2).round() / 2
    x.view(-1)[torch.randperm(R * V, generator=g)[: min(n_inf, R * V - R)]] = float("-inf")
    values, idx = beam_module.row_topk(x, k, chunk)
    want = x.topk(k, dim=1).values
    assert torch.equal(values, want)
    assert torch.equal(x.gather(1, idx), values)
    assert all(len(set(row)) == k for row in idx.tolist())


@pytest.mark.parametrize("block_rows", [1, 7, 10**6])
def test_beam_with_chunked_topk_and_row_blocks_equals_plain_topk(monkeypatch, block_rows):
    """A vocabulary large enough for the chunked top-k, log-probs formed in blocks of
    ``block_rows`` rows (one row, blocks that split a sentence's beams, all at once): the
    same beams, scores and n-best as torch.topk over all rows at once."""
    model = tiny_model(src_vocab_size=3000, tgt_vocab_size=3000)
    src = mixed_src()
    decoding = dcfg(method="beam", beam_size=4, nbest=4, max_len_a=1.0, max_len_b=2, min_len=2)
    monkeypatch.setattr(beam_module, "LOGITS_BLOCK", 3000 * block_rows)
    fast = beam_module.beam_search(model, src, decoding)
    monkeypatch.setattr(beam_module, "LOGITS_BLOCK", 10**12)
    monkeypatch.setattr(beam_module, "row_topk", lambda x, k, chunk=0: x.topk(k, dim=1))
    plain = beam_module.beam_search(model, src, decoding)
    assert torch.equal(fast[1], plain[1])
    assert [[h.tokens for h in hs] for hs in fast[0]] == [[h.tokens for h in hs] for hs in plain[0]]
    for hs, ps in zip(fast[0], plain[0]):  # a 1-row matmul rounds apart from a 1000-row one
        assert [h.score for h in hs] == pytest.approx([h.score for h in ps], abs=1e-4)
    assert len({len(h.tokens) for hs in fast[0] for h in hs}) > 3  # per-sentence limits differ
