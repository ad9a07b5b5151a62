"""The fused one-token decoder step (``seq2seq.model.inference.step``) computes what the general
layers compute: same logits for every architecture option it takes, with beams sharing a
memory row, after reorders within and across sentences; and it is the path searches take."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from seq2seq.config import ModelConfig
from seq2seq.model import Seq2Seq
from seq2seq.model.inference import step

VOCAB, PAD = 40, 0


def model_for(**overrides) -> Seq2Seq:
    kw = dict(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=24, n_heads=3, d_ff=40,
              encoder_layers=2, decoder_layers=2, dropout=0.1, max_positions=32, pad_id=PAD)
    torch.manual_seed(0)
    model = Seq2Seq(ModelConfig(**(kw | overrides))).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


ARCHS = {
    "pre-layernorm": dict(norm_position="pre"),
    "post-layernorm": dict(norm_position="post"),
    "pre-rmsnorm-learned": dict(norm_position="pre", norm="rmsnorm", positional="learned"),
    "gelu-dk-dv": dict(activation="gelu", d_k=4, d_v=10),
    "untied": dict(share_embeddings=False, tie_output=False),
}


def general(model: Seq2Seq, monkeypatch):
    """The same model with the fused step switched off."""
    monkeypatch.setattr(step, "supported", lambda *a: False)


def run_steps(model: Seq2Seq, src, group: int, tokens: torch.Tensor, reorders: dict):
    """Feed ``tokens (R, T)`` one step at a time; ``reorders[t] = (indices, cross)`` after step t."""
    mask = model.source_mask(src)
    cache = model.init_cache(model.encode(src, mask), mask, capacity=2, group=group)
    out = []
    for t in range(tokens.shape[1]):
        logits, cache = model.decode(tokens[:, t : t + 1], None, None, cache)
        out.append(logits)
        if t in reorders:
            indices, cross = reorders[t]
            cache.reorder(indices, cross=cross)
            tokens, out = tokens[indices], [o[indices] for o in out]
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("arch", list(ARCHS), ids=list(ARCHS))
def test_fused_step_equals_the_layers(arch, monkeypatch):
    model = model_for(**ARCHS[arch])
    src = nn.utils.rnn.pad_sequence([torch.randint(4, VOCAB, (n,)) for n in (7, 3, 5)],
                                    batch_first=True, padding_value=PAD)
    torch.manual_seed(1)
    tokens = torch.randint(4, VOCAB, (6, 8))  # 2 beams per sentence
    # within sentences (beam), then sentence 1 leaves (its rows 2-3 dropped, memory moves)
    reorders = {2: (torch.tensor([1, 1, 3, 2, 4, 4]), False),
                5: (torch.tensor([0, 1, 4, 5]), True)}
    calls = []
    real = step.decoder_step
    monkeypatch.setattr(step, "decoder_step", lambda *a: calls.append(1) or real(*a))
    with torch.no_grad():
        fused = run_steps(model, src, 2, tokens, reorders)
        assert len(calls) == 8  # every one-token step took the fused path
        general(model, monkeypatch)
        layers = run_steps(model, src, 2, tokens, reorders)
    torch.testing.assert_close(fused, layers, atol=1e-5, rtol=1e-5)


def _new_parameter(model: Seq2Seq) -> None:
    layer = model.decoder.layers[1].self_attn.w_q
    layer.weight = nn.Parameter(torch.randn_like(layer.weight))


def _new_module(model: Seq2Seq) -> None:
    old = model.decoder.layers[0].ff.w2
    model.decoder.layers[0].ff.w2 = type(old)(old.in_features, old.out_features)


def _in_place(model: Seq2Seq) -> None:
    state = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()
             if k.startswith("decoder.") and v.is_floating_point()}
    model.load_state_dict(state, strict=False)


@pytest.mark.parametrize("change", [_new_parameter, _new_module, _in_place],
                         ids=["a new parameter", "a new linear layer", "load_state_dict"])
def test_fused_step_follows_weights_changed_after_first_use(change, monkeypatch):
    """The step's laid-out weights (``StepPlan``, which lists the decoder's parameters once)
    are laid out again however a weight changes between two caches."""
    model = model_for()
    src = torch.randint(4, VOCAB, (3, 6))
    tokens = torch.randint(4, VOCAB, (3, 5))
    with torch.no_grad():
        run_steps(model, src, 1, tokens, {})  # the plan laid out for the old weights
        change(model)
        fused = run_steps(model, src, 1, tokens, {})
        general(model, monkeypatch)
        layers = run_steps(model, src, 1, tokens, {})
    torch.testing.assert_close(fused, layers, atol=1e-5, rtol=1e-5)


def test_fused_step_is_not_taken_where_it_does_not_apply(monkeypatch):
    """Training mode (dropout), RoPE, attention weights and multi-token chunks use the layers."""
    calls = []
    real = step.decoder_step
    monkeypatch.setattr(step, "decoder_step", lambda *a: calls.append(1) or real(*a))
    src, tgt = torch.randint(4, VOCAB, (2, 5)), torch.randint(4, VOCAB, (2, 3))
    for model in (model_for().train(), model_for(positional="rope")):
        mask = model.source_mask(src)
        cache = model.init_cache(model.encode(src, mask), mask)
        model.decode(tgt[:, :1], None, None, cache)
        model.decode(tgt[:, 1:], None, None, cache)
    assert calls == []


def test_searches_agree_with_the_layers(monkeypatch):
    """Greedy and beam outputs and scores are the same with and without the fused step."""
    from seq2seq.config import DecodingConfig
    from seq2seq.decoding.search import search

    model = model_for(norm_position="pre")
    src = nn.utils.rnn.pad_sequence([torch.randint(4, VOCAB, (n,)) for n in (9, 2, 6, 4)],
                                    batch_first=True, padding_value=PAD)
    results = []
    for fused in (True, False):
        if not fused:
            general(model, monkeypatch)
        for cfg in (DecodingConfig(method="greedy", max_len_b=12),
                    DecodingConfig(method="beam", beam_size=3, nbest=3, max_len_b=12)):
            res = search(model, src, cfg)
            results.append([[(h.tokens, round(h.score, 4)) for h in hs] for hs in res.hypotheses])
    assert results[:2] == results[2:]


def test_cache_extend_then_write_equals_append():
    """``DecoderCache.extend`` (the interface a compiled step uses: views over P + L positions,
    the caller writes the last L) leaves the cache as ``append`` does, across growth past the
    capacity and a beam reorder; so does writing position P of the whole ``buffers`` (an
    exported step's inputs: contiguous, so their strides follow the capacity)."""
    model = model_for()
    src = torch.randint(4, VOCAB, (2, 5))
    mask = model.source_mask(src)
    memory = model.encode(src, mask)
    a, b, c = (model.init_cache(memory, mask, capacity=2, group=3) for _ in range(3))
    H, d = model.arch.n_heads, model.arch.d_model // model.arch.n_heads
    layers = len(model.decoder.layers)
    for t in range(5):
        new = [(torch.randn(6, H, 1, d), torch.randn(6, H, 1, d)) for _ in range(layers)]
        views = b.extend(1, H, d, d)
        c.extend(1, H, d, d)
        for layer, ((k, v), (K, V), (Kc, Vc)) in enumerate(zip(new, views, c.buffers)):
            a.append(layer, k, v)
            K[:, :, -1:], V[:, :, -1:] = k, v
            assert Kc.is_contiguous() and Vc.is_contiguous() and Kc.shape[2] >= c.length
            Kc[:, :, t : t + 1], Vc[:, :, t : t + 1] = k, v
        if t == 2:
            rows = torch.tensor([2, 0, 0, 5, 4, 3])
            for cache in (a, b, c):
                cache.reorder(rows, cross=False)
        assert a.length == b.length == c.length == t + 1
        for (ka, va), (kb, vb), (kc, vc) in zip(a.self_kv, b.self_kv, c.self_kv):
            assert torch.equal(ka, kb) and torch.equal(va, vb)
            assert torch.equal(ka, kc) and torch.equal(va, vc)


def test_step_operator_calls_stay_few():
    """Operator calls (``torch.profiler`` events, all levels) per decoder step and per search
    step, batch 1 greedy and beam 3, on a 2-layer decoder: counts, not times, so the same on
    any machine. The bounds are what the step reached (220.5 / 273 greedy, 248 / 454 beam)
    with a little room. Each small linear is one ``addmm`` (6 events), not one prepacked
    oneDNN call (1 event): fewer events there were slower (``packed.PACK_MIN_WEIGHTS``).
    """
    from scripts.bench.opcount import count_case

    model = model_for()
    greedy, beam = count_case(model, 1, 1), count_case(model, 1, 3)
    assert greedy["decoder_step"] <= 230 and greedy["search_step"] <= 285
    assert beam["decoder_step"] <= 260 and beam["search_step"] <= 470
