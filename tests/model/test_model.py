"""Properties of the layers and the encoder-decoder (``seq2seq.model.layers``, ``seq2seq.model.transformer``,
``seq2seq.model.cache``, ``seq2seq.config``)."""

from __future__ import annotations

import itertools

import pytest
import torch
import yaml
from torch import nn

from seq2seq.config import ConfigError, ModelConfig, from_dict, to_dict
from seq2seq.model import Seq2Seq
from seq2seq.model.attention import causal_mask
from seq2seq.model.layers import EncoderLayer, MultiHeadAttention
from seq2seq.model.norms import make_norm

VOCAB, PAD = 50, 0


def small_cfg(**overrides) -> ModelConfig:
    kw = dict(
        src_vocab_size=VOCAB,
        tgt_vocab_size=VOCAB,
        d_model=32,
        n_heads=4,
        d_ff=64,
        encoder_layers=2,
        decoder_layers=2,
        dropout=0.0,
        max_positions=64,
        pad_id=PAD,
    )
    kw.update(overrides)
    return ModelConfig(**kw)


def small_model(**overrides) -> Seq2Seq:
    model = Seq2Seq(small_cfg(**overrides)).eval()
    perturb(model)
    return model


@torch.no_grad()
def perturb(module: nn.Module, scale: float = 0.1) -> None:
    """Move every parameter off its (zero bias / unit norm) init so nothing is trivially
    the identity, and break the pad row's zero embedding."""
    for p in module.parameters():
        p.add_(torch.randn_like(p) * scale)


def random_ids(B: int, T: int) -> torch.Tensor:
    return torch.randint(4, VOCAB, (B, T))  # no pad / bos / eos


def pad_batch(seqs: list[torch.Tensor]) -> torch.Tensor:
    return nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=PAD)


CONFIGS = list(
    itertools.product(["post", "pre"], ["layernorm", "rmsnorm"], ["sinusoidal", "learned", "rope"])
)
CONFIG_IDS = ["-".join(c) for c in CONFIGS]
configs = pytest.mark.parametrize("norm_position,norm,positional", CONFIGS, ids=CONFIG_IDS)


# ---------------------------------------------------------------- permutation equivariance
def _self_attend(module: nn.Module, x: torch.Tensor, mask):
    if isinstance(module, MultiHeadAttention):
        return module(x, module.project_kv(x), mask)[0]
    return module(x, mask)[0]


@pytest.mark.parametrize("kind", [MultiHeadAttention, EncoderLayer])
def test_unmasked_self_attention_is_permutation_equivariant(kind):
    cfg = small_cfg()
    module = kind(cfg).eval()
    perturb(module)
    x = torch.randn(2, 7, cfg.d_model)
    perm = torch.randperm(7)
    assert not torch.equal(perm, torch.arange(7))
    with torch.no_grad():
        out = _self_attend(module, x, None)
        out_perm = _self_attend(module, x[:, perm], None)
    torch.testing.assert_close(out_perm, out[:, perm], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", [MultiHeadAttention, EncoderLayer])
def test_causal_self_attention_is_not_permutation_equivariant(kind):
    cfg = small_cfg()
    module = kind(cfg).eval()
    perturb(module)
    x = torch.randn(2, 7, cfg.d_model)
    perm = torch.arange(7).flip(0)
    mask = causal_mask(7)
    with torch.no_grad():
        out = _self_attend(module, x, mask)
        out_perm = _self_attend(module, x[:, perm], mask)
    assert not torch.allclose(out_perm, out[:, perm], atol=1e-3)


# ---------------------------------------------------------------- parameter count
def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("h", [1, 2, 4, 8])
def test_mha_parameter_count_is_4_d_squared_whatever_h(h):
    d = 32
    mha = MultiHeadAttention(small_cfg(d_model=d, n_heads=h))
    # 4 d^2 weights; biases: q (d) + k (d) + v (d) + out (d).
    assert n_params(mha) == 4 * d * d + 4 * d


@pytest.mark.parametrize("d_model,h,d_k,d_v", [(32, 3, 6, 10), (16, 2, 4, 12), (24, 5, 8, 2)])
def test_mha_parameter_count_with_d_k_ne_d_v(d_model, h, d_k, d_v):
    cfg = small_cfg(d_model=d_model, n_heads=h, d_k=d_k, d_v=d_v, positional="learned")
    mha = MultiHeadAttention(cfg)
    weights = d_model * h * (2 * d_k + d_v) + h * d_v * d_model
    biases = h * d_k + h * (d_k + d_v) + d_model
    assert n_params(mha) == weights + biases
    # and it runs, with output back in d_model
    x = torch.randn(2, 3, d_model)
    out, w = mha(x, mha.project_kv(torch.randn(2, 5, d_model)), None, need_weights=True)
    assert out.shape == (2, 3, d_model) and w.shape == (2, h, 3, 5)


# ---------------------------------------------------------------- equivalence with PyTorch
def _copy_mha(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_kv.weight]))
    theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_kv.bias]))
    theirs.out_proj.weight.copy_(ours.w_o.weight)
    theirs.out_proj.bias.copy_(ours.w_o.bias)


def _copy_norm(ours: nn.Module, theirs: nn.LayerNorm) -> None:
    assert isinstance(ours, nn.LayerNorm)
    theirs.weight.copy_(ours.weight)
    theirs.bias.copy_(ours.bias)


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_matches_torch_transformer(norm_position):
    model = small_model(norm_position=norm_position, encoder_layers=2, decoder_layers=3)
    cfg = model.arch
    d, h, ff = cfg.d_model, cfg.n_heads, cfg.d_ff
    pre = norm_position == "pre"
    common = dict(
        d_model=d,
        nhead=h,
        dim_feedforward=ff,
        dropout=0.0,
        activation="relu",
        batch_first=True,
        norm_first=pre,
        layer_norm_eps=cfg.norm_eps,
    )
    t_enc = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**common),
        cfg.encoder_layers,
        norm=nn.LayerNorm(d, eps=cfg.norm_eps) if pre else None,
        enable_nested_tensor=False,
    ).eval()
    t_dec = nn.TransformerDecoder(
        nn.TransformerDecoderLayer(**common),
        cfg.decoder_layers,
        norm=nn.LayerNorm(d, eps=cfg.norm_eps) if pre else None,
    ).eval()
    with torch.no_grad():
        for ours, theirs in zip(model.encoder.layers, t_enc.layers, strict=True):
            _copy_mha(ours.self_attn, theirs.self_attn)
            theirs.linear1.load_state_dict(ours.ff.w1.state_dict())
            theirs.linear2.load_state_dict(ours.ff.w2.state_dict())
            _copy_norm(ours.attn_block.norm, theirs.norm1)
            _copy_norm(ours.ff_block.norm, theirs.norm2)
        for ours, theirs in zip(model.decoder.layers, t_dec.layers, strict=True):
            _copy_mha(ours.self_attn, theirs.self_attn)
            _copy_mha(ours.cross_attn, theirs.multihead_attn)
            theirs.linear1.load_state_dict(ours.ff.w1.state_dict())
            theirs.linear2.load_state_dict(ours.ff.w2.state_dict())
            _copy_norm(ours.self_block.norm, theirs.norm1)
            _copy_norm(ours.cross_block.norm, theirs.norm2)
            _copy_norm(ours.ff_block.norm, theirs.norm3)
        if pre:
            _copy_norm(model.encoder.final_norm, t_enc.norm)
            _copy_norm(model.decoder.final_norm, t_dec.norm)
        else:
            assert isinstance(model.encoder.final_norm, nn.Identity)
            assert isinstance(model.decoder.final_norm, nn.Identity)

    B, S, L = 3, 7, 5
    keep = torch.arange(S)[None, :] < torch.tensor([7, 4, 2])[:, None]  # (B, S), True = real
    x, y = torch.randn(B, S, d), torch.randn(B, L, d)

    # Torch side with grad enabled: keeps nn.Transformer* off its inference fast path,
    # which returns zeros (not the computed values) at padded positions.
    t_memory = t_enc(x, src_key_padding_mask=~keep)
    with torch.no_grad():
        memory = model.encoder(x, keep[:, None, None, :])
    torch.testing.assert_close(memory, t_memory.detach(), atol=1e-5, rtol=1e-5)

    t_out = t_dec(y, memory, tgt_mask=~causal_mask(L), memory_key_padding_mask=~keep)
    with torch.no_grad():
        out = model.decoder(
            y, causal_mask(L), model.decoder.cross_kv(memory), keep[:, None, None, :]
        )
    torch.testing.assert_close(out, t_out.detach(), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- causality and padding
@configs
def test_future_target_tokens_do_not_change_earlier_outputs(norm_position, norm, positional):
    model = small_model(norm_position=norm_position, norm=norm, positional=positional)
    src, tgt = random_ids(2, 6), random_ids(2, 7)
    changed = tgt.clone()
    changed[:, 4] = (tgt[:, 4] - 4 + 1) % (VOCAB - 4) + 4  # a different real token
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(a[:, 4:], b[:, 4:], atol=1e-3)  # the change is visible later


@configs
def test_padding_never_changes_real_outputs(norm_position, norm, positional):
    model = small_model(norm_position=norm_position, norm=norm, positional=positional)
    src_lens, tgt_lens = [7, 3, 5], [4, 6, 2]
    srcs = [random_ids(1, n)[0] for n in src_lens]
    tgts = [random_ids(1, n)[0] for n in tgt_lens]
    src, tgt = pad_batch(srcs), pad_batch(tgts)
    assert (src == PAD).any() and (tgt == PAD).any()
    with torch.no_grad():
        memory = model.encode(src)
        logits = model(src, tgt)
        for i, (s, t) in enumerate(zip(srcs, tgts)):
            alone_memory = model.encode(s[None])
            alone_logits = model(s[None], t[None])
            torch.testing.assert_close(memory[i, : len(s)], alone_memory[0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(logits[i, : len(t)], alone_logits[0], atol=1e-5, rtol=1e-5)
        # The source mask is what makes this true: attending to the pads changes the memory.
        unmasked = model.encode(src, torch.ones_like(model.source_mask(src)))
    assert not torch.allclose(unmasked[1, :3], memory[1, :3], atol=1e-3)


# ---------------------------------------------------------------- the decoder cache
def _cached_logits(model: Seq2Seq, src: torch.Tensor, tgt: torch.Tensor, chunks: list[int],
                   capacity: int = 64):
    src_mask = model.source_mask(src)
    memory = model.encode(src, src_mask)
    cache = model.init_cache(memory, src_mask, capacity)
    assert cache.length == 0 and cache.batch_size == src.shape[0]
    pieces, start = [], 0
    for n in chunks:
        logits, cache = model.decode(tgt[:, start : start + n], None, None, cache)
        start += n
        assert cache.length == start
        pieces.append(logits)
    assert start == tgt.shape[1]
    return torch.cat(pieces, dim=1), cache


CHUNKS = {"steps": [1] * 7, "chunks": [3, 1, 2, 1], "first1_then_chunks": [1, 4, 2]}


@configs
@pytest.mark.parametrize("chunking", list(CHUNKS), ids=list(CHUNKS))
@pytest.mark.parametrize("capacity", [1, 64], ids=["grows", "preallocated"])
def test_cached_decode_equals_uncached(norm_position, norm, positional, chunking, capacity):
    model = small_model(norm_position=norm_position, norm=norm, positional=positional)
    src = pad_batch([random_ids(1, 6)[0], random_ids(1, 3)[0]])
    tgt = random_ids(2, 7)
    with torch.no_grad():
        full = model(src, tgt)
        cached, _ = _cached_logits(model, src, tgt, CHUNKS[chunking], capacity)
    torch.testing.assert_close(cached, full, atol=1e-5, rtol=1e-5)


def test_cache_appends_in_place_and_grows_by_doubling():
    """Within its capacity a step writes into the buffers the earlier steps filled (no copy
    of the past); past it, the buffers double and keep every earlier position."""
    model = small_model()
    src, tgt = random_ids(2, 5), random_ids(2, 6)
    with torch.no_grad():
        src_mask = model.source_mask(src)
        cache = model.init_cache(model.encode(src, src_mask), src_mask, capacity=4)
        _, cache = model.decode(tgt[:, :1], None, None, cache)
        storage = [k.untyped_storage().data_ptr() for k, _ in cache.self_kv]
        before = [k.clone() for k, _ in cache.self_kv]
        for t in range(1, 4):
            _, cache = model.decode(tgt[:, t : t + 1], None, None, cache)
        assert [k.untyped_storage().data_ptr() for k, _ in cache.self_kv] == storage
        _, cache = model.decode(tgt[:, 4:6], None, None, cache)  # 6 > 4: grows to 8
        assert cache.length == 6 and cache.self_kv[0][0].shape[2] == 6
        assert [k.untyped_storage().data_ptr() for k, _ in cache.self_kv] != storage
        for (k, _), old in zip(cache.self_kv, before):
            assert torch.equal(k[:, :, :1], old)


def test_decode_with_memory_equals_forward():
    model = small_model()
    src, tgt = random_ids(2, 5), random_ids(2, 4)
    with torch.no_grad():
        mask = model.source_mask(src)
        logits, cache = model.decode(tgt, model.encode(src, mask), mask)
        assert cache is None
        torch.testing.assert_close(logits, model(src, tgt))


@pytest.mark.parametrize("cross", [True, False])
def test_cache_reorder_selects_hypotheses(cross):
    """Beam layout: rows 0-1 are sentence A, rows 2-3 sentence B. After 3 steps, reorder so
    each survivor continues another row of its own sentence; the next step must equal an
    uncached decode of the reordered prefixes."""
    model = small_model(positional="rope")
    src_a, src_b = random_ids(1, 5)[0], random_ids(1, 3)[0]
    src = pad_batch([src_a, src_a, src_b, src_b])
    prefix = random_ids(4, 3)
    nxt = random_ids(4, 1)
    indices = torch.tensor([1, 1, 3, 2])
    with torch.no_grad():
        src_mask = model.source_mask(src)
        cache = model.init_cache(model.encode(src, src_mask), src_mask)
        _, cache = model.decode(prefix, None, None, cache)
        before = [(k.clone(), v.clone()) for k, v in cache.self_kv]
        reordered = cache.reorder(indices, cross=cross)
        assert reordered is cache and reordered.length == 3 and reordered.batch_size == 4
        for (k0, v0), (k1, v1) in zip(before, reordered.self_kv):
            assert torch.equal(k1, k0[indices]) and torch.equal(v1, v0[indices])
        got, _ = model.decode(nxt, None, None, reordered)
        want = model(src[indices], torch.cat([prefix[indices], nxt], dim=1))[:, -1:]
        not_reordered = model(src[indices], torch.cat([prefix, nxt], dim=1))[:, -1:]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(not_reordered, want, atol=1e-3)


def test_grouped_cache_shares_memory_between_beams():
    """Beam layout with ``group=2``: rows 0-1 read memory row 0 (sentence A), rows 2-3 row 1.
    The memory K/V stay one row per sentence (never copied to the beams); reordering within
    the groups, then dropping sentence A, must equal an uncached decode of the same rows."""
    model = small_model(positional="rope")
    src = pad_batch([random_ids(1, 5)[0], random_ids(1, 3)[0]])
    rows = torch.tensor([0, 0, 1, 1])  # the sentence of each decoder row
    prefix, nxt, last = random_ids(4, 3), random_ids(4, 1), random_ids(2, 1)
    indices = torch.tensor([1, 1, 3, 2])
    with torch.no_grad():
        src_mask = model.source_mask(src)
        cache = model.init_cache(model.encode(src, src_mask), src_mask, group=2)
        _, cache = model.decode(prefix, None, None, cache)
        cache = cache.reorder(indices, cross=False)
        assert cache.batch_size == 4 and cache.cross_kv[0][0].shape[0] == 2
        got, cache = model.decode(nxt, None, None, cache)
        seen = torch.cat([prefix[indices], nxt], dim=1)
        want = model(src[rows], seen)[:, -1:]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        cache = cache.reorder(torch.tensor([2, 3]))  # sentence A is done: B's group stays
        assert cache.cross_kv[0][0].shape[0] == 1 and torch.equal(cache.memory_mask, src_mask[1:])
        got, _ = model.decode(last, None, None, cache)
        want = model(src[[1, 1]], torch.cat([seen[2:], last], dim=1))[:, -1:]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_cache_reorder_across_sentences_moves_memory():
    model = small_model()
    src = pad_batch([random_ids(1, 5)[0], random_ids(1, 2)[0], random_ids(1, 4)[0]])
    prefix, nxt = random_ids(3, 2), random_ids(3, 1)
    indices = torch.tensor([2, 0, 0])
    with torch.no_grad():
        src_mask = model.source_mask(src)
        cache = model.init_cache(model.encode(src, src_mask), src_mask)
        _, cache = model.decode(prefix, None, None, cache)
        reordered = cache.reorder(indices)
        assert torch.equal(reordered.memory_mask, src_mask[indices])
        got, _ = model.decode(nxt, None, None, reordered)
        want = model(src[indices], torch.cat([prefix[indices], nxt], dim=1))[:, -1:]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- norms
def test_rmsnorm_factory_gives_torch_rmsnorm():
    norm = make_norm("rmsnorm", 16, eps=1e-6)
    assert isinstance(norm, nn.RMSNorm) and norm.eps == 1e-6
    assert isinstance(make_norm("layernorm", 16), nn.LayerNorm)
    with pytest.raises(ValueError, match="batchnorm"):
        make_norm("batchnorm", 16)


@pytest.mark.parametrize("norm,cls", [("layernorm", nn.LayerNorm), ("rmsnorm", nn.RMSNorm)])
@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_only_pre_ln_stacks_end_with_a_norm(norm_position, norm, cls):
    model = Seq2Seq(small_cfg(norm_position=norm_position, norm=norm))
    residual_norms = [m.norm for m in model.modules() if hasattr(m, "pre")]
    assert len(residual_norms) == 2 * 2 + 3 * 2
    assert all(isinstance(n, cls) for n in residual_norms)
    for stack in (model.encoder, model.decoder):
        if norm_position == "pre":
            assert isinstance(stack.final_norm, cls)
        else:
            assert isinstance(stack.final_norm, nn.Identity)


# ---------------------------------------------------------------- config
@pytest.mark.parametrize(
    "overrides,field",
    [
        (dict(d_model=30, n_heads=4), "n_heads"),
        (dict(norm="batchnorm"), "norm"),
        (dict(norm_position="middle"), "norm_position"),
        (dict(positional="alibi"), "positional"),
        (dict(dropout=1.5), "dropout"),
        (dict(attention_dropout=-0.1), "attention_dropout"),
        (dict(d_model=0), "d_model"),
        (dict(d_model=33, n_heads=3, positional="sinusoidal"), "d_model"),
        (dict(d_k=5, d_v=8, positional="rope"), "d_k"),
        (dict(src_vocab_size=40), "share_embeddings"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_bad_config_raises_config_error_naming_the_field(overrides, field):
    with pytest.raises(ConfigError, match=rf"ModelConfig\.{field}\b"):
        small_cfg(**overrides)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_config_yaml_round_trip():
    cfg = small_cfg(
        norm="rmsnorm",
        norm_position="pre",
        positional="rope",
        d_k=8,
        d_v=12,
        n_heads=3,
        d_model=24,
        share_embeddings=False,
        tgt_vocab_size=60,
    )
    text = yaml.safe_dump(to_dict(cfg))
    back = from_dict(ModelConfig, yaml.safe_load(text))
    assert back == cfg
    assert back != small_cfg()  # equality is not vacuous


def test_config_unknown_key_is_refused_by_name():
    data = to_dict(small_cfg())
    data["n_layerz"] = 6
    with pytest.raises(ConfigError, match="n_layerz"):
        from_dict(ModelConfig, data)
