"""Properties of scaled dot-product attention and its masks (``seq2seq.model.attention``)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seq2seq.model import attention as attention_module
from seq2seq.model.attention import (
    MATMUL_MAX_SCORES,
    attention,
    causal_mask,
    lengths_mask,
    matmul_attention,
    padding_mask,
    reference_attention,
    sdpa_attention,
)


def both_paths(q, k, v, mask=None):
    """Outputs of the fast path and of the reference path, plus the reference weights."""
    fast = attention(q, k, v, mask)
    ref, weights = reference_attention(q, k, v, mask)
    return fast, ref, weights


# ---------------------------------------------------------------- the chapter's worked example
# Tokens "il", "gatto", "salta"; d_k = d_v = 2; one batch element, one head.
EX_Q = torch.tensor([[0.0, 1.0], [0.0, 1.0], [2.0, 0.0]])[None, None]
EX_K = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])[None, None]
EX_V = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])[None, None]


def test_worked_example_causal_weights_and_output():
    fast, ref, weights = both_paths(EX_Q, EX_K, EX_V, causal_mask(3))
    expected_w = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.1867, 0.7679, 0.0454]])
    expected_out = torch.tensor([[1.0, 0.0], [0.5, 1.0], [0.2321, 1.5812]])
    torch.testing.assert_close(weights[0, 0], expected_w, atol=5e-5, rtol=0)
    torch.testing.assert_close(ref[0, 0], expected_out, atol=5e-5, rtol=0)
    torch.testing.assert_close(fast[0, 0], expected_out, atol=5e-5, rtol=0)


def test_worked_example_without_the_scale():
    # Scaling q by sqrt(d_k) cancels the 1/sqrt(d_k): the weights are softmax(q k^T) unscaled.
    _, weights = reference_attention(EX_Q * math.sqrt(2), EX_K, EX_V, causal_mask(3))
    unscaled = torch.tensor([0.1173, 0.8668, 0.0159])
    torch.testing.assert_close(weights[0, 0, 2], unscaled, atol=5e-5, rtol=0)
    # ... and the same independently, straight from the raw scores [2, 4, 0].
    torch.testing.assert_close(
        torch.softmax(torch.tensor([2.0, 4.0, 0.0]), -1), unscaled, atol=5e-5, rtol=0
    )
    # The scale matters: with it the row is the flatter [0.1867, 0.7679, 0.0454].
    _, scaled = reference_attention(EX_Q, EX_K, EX_V, causal_mask(3))
    assert not torch.allclose(scaled[0, 0, 2], unscaled, atol=1e-2)


def test_mask_before_softmax_not_after():
    """Scores [1, 2, 60] and [1, 2, 200] with the last key forbidden (the chapter's failure)."""
    # d_k = 1, q = 1: the (scale 1) scores are exactly the keys; one head per row.
    q = torch.ones(1, 2, 1, 1)
    k = torch.tensor([[1.0, 2.0, 60.0], [1.0, 2.0, 200.0]])[None, :, :, None]  # (1, 2, 3, 1)
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]).expand(1, 2, 3, 2)
    mask = torch.tensor([True, True, False])[None, None, None, :]

    # The failure we must not reproduce: softmax first, mask after, renormalize.
    scores = torch.tensor([[1.0, 2.0, 60.0], [1.0, 2.0, 200.0]])
    after = torch.softmax(scores, -1) * mask[0, 0]
    assert after[0].sum().item() == pytest.approx(8.85e-26, rel=1e-2)
    assert torch.isnan(after[1] / after[1].sum()).all()

    fast, ref, weights = both_paths(q, k, v, mask)
    w = weights[0, :, 0]  # (2 rows, 3 keys)
    assert torch.isfinite(w).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(2))
    expected = torch.tensor([0.2689, 0.7311, 0.0])
    for row in w:
        torch.testing.assert_close(row, expected, atol=5e-5, rtol=0)
        assert row[2].item() == 0.0
    expected_out = expected[0] * v[0, 0, 0] + expected[1] * v[0, 0, 1]
    for out in (fast, ref):
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out[0, :, 0], expected_out.expand(2, 2), atol=5e-5, rtol=0)


# ---------------------------------------------------------------- fast path == reference path
SHAPES = [  # (B, H, L, S, d_k, d_v)
    (2, 3, 4, 7, 5, 3),
    (1, 2, 6, 3, 4, 8),
    (3, 1, 1, 9, 2, 6),
    (2, 4, 5, 5, 8, 8),
]
MASKS = ["none", "padding", "causal", "padding+causal", "random_with_empty_rows"]


def make_mask(kind: str, B: int, H: int, L: int, S: int) -> torch.Tensor | None:
    if kind == "none":
        return None
    lengths = torch.randint(1, S + 1, (B,))
    lengths[0] = S
    if kind == "padding":
        return lengths_mask(lengths, S)  # (B, 1, 1, S)
    if kind == "causal":
        return causal_mask(L, S)  # (L, S)
    if kind == "padding+causal":
        return lengths_mask(lengths, S) & causal_mask(L, S)  # (B, 1, L, S)
    if kind == "random_with_empty_rows":
        mask = torch.rand(B, H, L, S) < 0.6
        mask[0, 0, 0] = False  # a query with no allowed key at all
        mask[-1, -1, -1] = False
        mask[0, -1, -1] = True
        return mask
    raise AssertionError(kind)


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}L{}S{}dk{}dv{}".format(*s))
def test_fast_path_equals_reference(shape, mask_kind):
    B, H, L, S, d_k, d_v = shape
    q = torch.randn(B, H, L, d_k, requires_grad=True)
    k = torch.randn(B, H, S, d_k, requires_grad=True)
    v = torch.randn(B, H, S, d_v, requires_grad=True)
    mask = make_mask(mask_kind, B, H, L, S)

    fast = attention(q, k, v, mask)
    ref, _ = reference_attention(q, k, v, mask)
    assert fast.shape == (B, H, L, d_v)
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=1e-5)

    if mask is not None:
        empty = ~mask.expand(B, H, L, S).any(-1)  # rows with no allowed key
        assert (fast[empty] == 0).all() and (ref[empty] == 0).all()
        if mask_kind == "random_with_empty_rows":
            assert empty.any()

    g = torch.randn_like(fast)
    grads_fast = torch.autograd.grad(fast, (q, k, v), g)
    grads_ref = torch.autograd.grad(ref, (q, k, v), g)
    for name, gf, gr in zip("qkv", grads_fast, grads_ref):
        assert torch.isfinite(gf).all() and torch.isfinite(gr).all(), name
        torch.testing.assert_close(gf, gr, atol=1e-5, rtol=1e-5, msg=f"grad wrt {name}")


@pytest.mark.parametrize("path", [sdpa_attention, matmul_attention], ids=["sdpa", "matmul"])
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "padding+causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}L{}S{}dk{}dv{}".format(*s))
def test_each_routed_path_equals_reference(path, shape, mask_kind):
    """Both kernels the router picks from compute the reference maths, gradients included."""
    B, H, L, S, d_k, d_v = shape
    q, k, v = (torch.randn(B, H, n, d, requires_grad=True)
               for n, d in ((L, d_k), (S, d_k), (S, d_v)))
    mask = make_mask(mask_kind, B, H, L, S)
    if mask is not None and mask.dim() == 2:
        mask = mask[None, None]
    if mask is not None and not mask.any(-1).all():
        pytest.skip("rows without keys are attention()'s job, not the kernels'")
    out, (ref, _) = path(q, k, v, mask), reference_attention(q, k, v, mask)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("L,S", [(1, 20), (20, 20), (64, 64), (65, 64), (128, 128)])
def test_router_picks_matmul_for_small_score_matrices(L, S, monkeypatch):
    calls = []
    for name in ("sdpa_attention", "matmul_attention"):
        real = getattr(attention_module, name)
        monkeypatch.setattr(attention_module, name,
                            lambda *a, _n=name, _f=real: calls.append(_n) or _f(*a))
    q, k, v = torch.randn(2, 2, L, 8), torch.randn(2, 2, S, 8), torch.randn(2, 2, S, 8)
    attention(q, k, v, causal_mask(L, S))
    assert calls == ["matmul_attention" if L * S <= MATMUL_MAX_SCORES else "sdpa_attention"]


# ---------------------------------------------------------------- weights and convex hull
@pytest.mark.parametrize("mask_kind", MASKS)
def test_weights_are_a_distribution_over_allowed_keys(mask_kind):
    B, H, L, S = 2, 3, 4, 6
    q, k, v = torch.randn(B, H, L, 5), torch.randn(B, H, S, 5), torch.randn(B, H, S, 3)
    mask = make_mask(mask_kind, B, H, L, S)
    _, weights = reference_attention(q, k, v, mask)
    full = torch.ones(B, H, L, S, dtype=torch.bool) if mask is None else mask.expand(B, H, L, S)
    has_key = full.any(-1)
    assert (weights >= 0).all()
    assert (weights[~full] == 0).all()  # exactly zero where forbidden
    torch.testing.assert_close(weights.sum(-1)[has_key], torch.ones(int(has_key.sum())))
    assert (weights.sum(-1)[~has_key] == 0).all()


@pytest.mark.parametrize("mask_kind", MASKS)
def test_output_within_per_coordinate_bounds_of_allowed_values(mask_kind):
    # Few value coordinates, many keys: bounds are tight enough to catch a leak.
    B, H, L, S, d_v = 2, 2, 5, 9, 3
    q, k = torch.randn(B, H, L, 4) * 3, torch.randn(B, H, S, 4)
    v = torch.randn(B, H, S, d_v)
    mask = make_mask(mask_kind, B, H, L, S)
    full = torch.ones(B, H, L, S, dtype=torch.bool) if mask is None else mask.expand(B, H, L, S)
    vv = v[:, :, None].expand(B, H, L, S, d_v)
    allowed = full[..., None]
    lo = vv.masked_fill(~allowed, math.inf).amin(-2)
    hi = vv.masked_fill(~allowed, -math.inf).amax(-2)
    has_key = full.any(-1)
    for out in both_paths(q, k, v, mask)[:2]:
        assert (out[has_key] >= lo[has_key] - 1e-6).all()
        assert (out[has_key] <= hi[has_key] + 1e-6).all()


@pytest.mark.parametrize("mask_kind", MASKS)
def test_fast_output_is_a_convex_combination_of_values(mask_kind):
    """Recover the weights from the fast path's output alone: with d_v >= S and generic
    values, ``V^T w = out`` has one solution, which must be a distribution over allowed keys."""
    B, H, L, S, d_v = 2, 2, 4, 5, 8
    dt = torch.float64
    q, k = torch.randn(B, H, L, 6, dtype=dt), torch.randn(B, H, S, 6, dtype=dt)
    v = torch.randn(B, H, S, d_v, dtype=dt)
    mask = make_mask(mask_kind, B, H, L, S)
    out = attention(q, k, v, mask)  # (B, H, L, d_v)
    # Solve v^T (d_v x S) w = out^T per (b, h) for all L rows at once.
    w = torch.linalg.lstsq(v.transpose(-2, -1), out.transpose(-2, -1)).solution.transpose(-2, -1)
    torch.testing.assert_close(w @ v, out, atol=1e-9, rtol=0)  # exactly representable
    full = torch.ones(B, H, L, S, dtype=torch.bool) if mask is None else mask.expand(B, H, L, S)
    has_key = full.any(-1)
    assert (w >= -1e-9).all()
    assert (w[~full].abs() < 1e-9).all()
    torch.testing.assert_close(w.sum(-1)[has_key], torch.ones(int(has_key.sum()), dtype=dt))
    # And it is the reference path's weights.
    _, weights = reference_attention(q, k, v, mask)
    torch.testing.assert_close(w, weights, atol=1e-9, rtol=0)


# ---------------------------------------------------------------- causal alignment
@pytest.mark.parametrize("S", [1, 4, 9])
def test_single_query_sees_every_key(S):
    assert causal_mask(1, S).tolist() == [[True] * S]


@pytest.mark.parametrize("L,S", [(1, 5), (3, 7), (4, 4), (5, 6)])
def test_bottom_right_row_i_sees_S_minus_L_plus_i_plus_1_keys(L, S):
    mask = causal_mask(L, S)
    assert mask.shape == (L, S)
    for i in range(L):
        n = S - L + i + 1
        assert mask[i].tolist() == [True] * n + [False] * (S - n), f"row {i}"


@pytest.mark.parametrize("L,S", [(2, 5), (3, 7), (1, 4)])
def test_top_left_differs_from_bottom_right_when_L_ne_S(L, S):
    top = causal_mask(L, S, align="top_left")
    assert top.tolist() == [[j <= i for j in range(S)] for i in range(L)]
    assert not torch.equal(top, causal_mask(L, S))


@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("align", ["bottom_right", "top_left"])
def test_square_causal_mask_is_tril(n, align):
    assert torch.equal(causal_mask(n, n, align=align), torch.ones(n, n).tril().bool())
    assert torch.equal(causal_mask(n), causal_mask(n, n))


def test_causal_mask_refuses_unknown_alignment():
    with pytest.raises(ValueError, match="align"):
        causal_mask(2, 3, align="diagonal")


def test_sdpa_is_causal_is_top_left_so_we_never_pass_it():
    """SDPA's ``is_causal=True`` aligns top-left: with L < S (cached decoding) query 0 would
    see only key 0 instead of the S - L + 1 keys it is entitled to."""
    B, H, L, S, d = 2, 2, 3, 6, 4
    q, k, v = torch.randn(B, H, L, d), torch.randn(B, H, S, d), torch.randn(B, H, S, d)
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ours = attention(q, k, v, causal_mask(L, S))
    assert not torch.allclose(sdpa, ours, atol=1e-3)
    torch.testing.assert_close(sdpa, attention(q, k, v, causal_mask(L, S, align="top_left")))
    # When L == S they agree.
    k2, v2 = k[:, :, :L], v[:, :, :L]
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, k2, v2, is_causal=True),
        attention(q, k2, v2, causal_mask(L)),
    )


# ---------------------------------------------------------------- key masks
def test_padding_and_lengths_masks_agree():
    ids = torch.tensor([[5, 6, 7, 0, 0], [4, 0, 0, 0, 0], [9, 9, 9, 9, 9]])
    mask = padding_mask(ids, pad_id=0)
    assert mask.shape == (3, 1, 1, 5)
    assert torch.equal(mask, lengths_mask(torch.tensor([3, 1, 5]), 5))


# ---------------------------------------------------------------- bad input
B_, H_, L_, S_, DK, DV = 2, 3, 4, 5, 6, 7


def _qkv():
    return torch.randn(B_, H_, L_, DK), torch.randn(B_, H_, S_, DK), torch.randn(B_, H_, S_, DV)


def _raises_with_shapes(q, k, v, mask, expected: str, given: tuple):
    for fn in (attention, reference_attention):
        with pytest.raises(ValueError) as info:
            fn(q, k, v, mask)
        msg = str(info.value)
        assert "expected" in msg and expected in msg, msg
        assert str(given) in msg, msg


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_wrong_rank_is_refused(which):
    q, k, v = _qkv()
    tensors = {"q": q, "k": k, "v": v}
    tensors[which] = tensors[which][0]  # rank 3
    _raises_with_shapes(*tensors.values(), None, f"{which} of rank 4", tuple(tensors[which].shape))


def test_mismatched_d_k_is_refused():
    q, k, v = _qkv()
    k = torch.randn(B_, H_, S_, DK + 1)
    _raises_with_shapes(q, k, v, None, f"({B_}, {H_}, S, {DK})", tuple(k.shape))


def test_mismatched_S_between_k_and_v_is_refused():
    q, k, v = _qkv()
    v = torch.randn(B_, H_, S_ + 1, DV)
    _raises_with_shapes(q, k, v, None, f"({B_}, {H_}, {S_}, d_v)", tuple(v.shape))


@pytest.mark.parametrize(
    "mask_shape",
    [
        (B_, S_),  # a (B, S) key mask passed as rank 2: read as (L, S) with L != B
        (B_, 1, S_),  # rank 3
        (B_ + 1, 1, 1, S_),  # wrong batch
        (1, H_ + 1, 1, S_),  # wrong heads
        (1, 1, L_, S_ + 1),  # wrong S
        (S_, L_),  # transposed
    ],
    ids=str,
)
def test_mask_that_does_not_fit_is_refused(mask_shape):
    q, k, v = _qkv()
    mask = torch.ones(mask_shape, dtype=torch.bool)
    _raises_with_shapes(q, k, v, mask, f"({B_}, {H_}, {L_}, {S_})", mask_shape)


def test_non_boolean_mask_is_refused():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="boolean"):
        attention(q, k, v, torch.ones(L_, S_))


@pytest.mark.parametrize(
    "mask_shape", [(L_, S_), (1, 1, 1, S_), (B_, 1, 1, S_), (B_, H_, L_, S_), (1, H_, L_, 1)]
)
def test_masks_that_fit_are_accepted(mask_shape):
    """A mask of any broadcastable shape means the same as its expansion to (B, H, L, S):
    softmax over the allowed keys (by hand here), a zero row where none is allowed."""
    q, k, v = _qkv()
    mask = torch.rand(mask_shape) < 0.6
    mask.view(-1)[0] = False  # at least one forbidden and one allowed entry
    mask.view(-1)[-1] = True
    full = mask.expand(B_, H_, L_, S_)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(DK)).masked_fill(~full, -math.inf)
    by_hand = torch.softmax(scores, -1).nan_to_num(0.0) @ v  # NaN rows: no allowed key
    for out in both_paths(q, k, v, mask)[:2]:
        assert out.shape == (B_, H_, L_, DV)
        torch.testing.assert_close(out, by_hand, atol=1e-5, rtol=1e-5)
    # All-True is no mask at all.
    torch.testing.assert_close(attention(q, k, v, torch.ones(mask_shape, dtype=torch.bool)),
                               attention(q, k, v), atol=1e-6, rtol=1e-6)
