"""CPU: flashcute.reference.attention_ref against a naive per-row softmax(q k^T) v written
independently (Python loops over rows, explicit visibility rule)."""
import math

import pytest
import torch

from flashcute.reference import attention_ref


def naive(q, k, v, causal=False, window=(-1, -1), softcap=0.0, scale=None, top_left=False, used=None):
    """q (b, sq, hq, d) etc., float64, one row at a time."""
    b, sq, hq, d = q.shape
    sk_full, hk, dv = k.shape[1], k.shape[2], v.shape[-1]
    scale = d ** -0.5 if scale is None else scale
    wl, wr = window
    if causal:
        wr = 0
    out = torch.zeros(b, sq, hq, dv, dtype=torch.float64)
    lse = torch.full((b, hq, sq), -math.inf, dtype=torch.float64)
    for bi in range(b):
        sk = sk_full if used is None else used[bi]
        off = 0 if top_left else sk - sq
        for h in range(hq):
            hkv = h // (hq // hk)
            for i in range(sq):
                keys = [j for j in range(sk)
                        if (wr < 0 or j <= i + off + wr) and (wl < 0 or j >= i + off - wl)]
                if not keys:
                    continue
                s = torch.stack([(q[bi, i, h] * k[bi, j, hkv]).sum() * scale for j in keys])
                if softcap > 0:
                    s = softcap * torch.tanh(s / softcap)
                m = s.max()
                e = torch.exp(s - m)
                lse[bi, h, i] = m + torch.log(e.sum())
                p = e / e.sum()
                out[bi, i, h] = sum(p[n] * v[bi, j, hkv] for n, j in enumerate(keys))
    return out, lse


def rand(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def close(a, b):
    fin = torch.isfinite(b)
    assert torch.equal(torch.isfinite(a), fin)
    assert torch.allclose(a[fin], b[fin], atol=1e-10, rtol=1e-10)


CASES = [
    dict(),
    dict(causal=True),
    dict(window=(3, 0)),
    dict(window=(2, 5)),
    dict(window=(-1, 1)),
    dict(window=(4, -1)),
    dict(causal=True, window=(2, -1)),
    dict(softcap=5.0),
    dict(causal=True, softcap=2.0, scale=0.3),
    dict(causal=True, top_left=True),
    dict(window=(1, 1), top_left=True),
]


@pytest.mark.parametrize("sq,sk", [(1, 1), (3, 7), (7, 3), (5, 5), (1, 6), (6, 1)])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("hq,hk", [(2, 2), (4, 2), (3, 1)])
def test_dense_matches_naive(sq, sk, case, hq, hk):
    c = CASES[case]
    torch.manual_seed(case * 100 + sq * 10 + sk)
    q, k, v = rand(2, sq, hq, 8), rand(2, sk, hk, 8), rand(2, sk, hk, 16)
    out, lse = attention_ref(q, k, v, causal=c.get("causal", False), window_size=c.get("window", (-1, -1)),
                             softcap=c.get("softcap", 0.0), softmax_scale=c.get("scale"),
                             causal_align="top_left" if c.get("top_left") else "bottom_right")
    o2, l2 = naive(q, k, v, c.get("causal", False), c.get("window", (-1, -1)), c.get("softcap", 0.0),
                   c.get("scale"), c.get("top_left", False))
    assert out.dtype == torch.float64 and out.shape == (2, sq, hq, 16) and lse.shape == (2, hq, sq)
    close(out, o2)
    close(lse, l2)


def test_fully_masked_rows_are_zero_and_minus_inf():
    # causal, sq > sk bottom-right: the first sq - sk rows see no key
    q, k, v = rand(1, 5, 2, 8), rand(1, 2, 2, 8), rand(1, 2, 2, 8)
    out, lse = attention_ref(q, k, v, causal=True)
    assert torch.all(out[0, :3] == 0) and torch.all(torch.isneginf(lse[0, :, :3]))
    assert torch.isfinite(lse[0, :, 3:]).all() and not torch.isnan(out).any()
    # no keys at all
    out, lse = attention_ref(q, rand(1, 0, 2, 8), rand(1, 0, 2, 8))
    assert torch.all(out == 0) and torch.all(torch.isneginf(lse))


def test_softmax_rows_sum_to_one_via_constant_v():
    q, k = rand(2, 9, 4, 8), rand(2, 11, 2, 8)
    v = torch.ones(2, 11, 2, 8, dtype=torch.float64)
    out, _ = attention_ref(q, k, v, window_size=(3, 2))
    assert torch.allclose(out, torch.ones_like(out))


def test_matches_torch_sdpa_top_left():
    q, k, v = rand(2, 7, 4, 8), rand(2, 9, 4, 8), rand(2, 9, 4, 8)
    out, _ = attention_ref(q, k, v, causal=True, causal_align="top_left")
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
    assert torch.allclose(out, ref, atol=1e-12)


@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (False, (2, 1)), (True, (1, -1))])
@pytest.mark.parametrize("with_used", [False, True])
def test_varlen_matches_dense_per_sequence(causal, window, with_used):
    torch.manual_seed(7)
    lq, lk = [3, 0, 1, 5], [4, 2, 0, 6]
    used = [2, 1, 0, 6]
    cq = torch.tensor([0] + list(torch.tensor(lq).cumsum(0)), dtype=torch.int32)
    ck = torch.tensor([0] + list(torch.tensor(lk).cumsum(0)), dtype=torch.int32)
    q, k, v = rand(sum(lq), 4, 8), rand(sum(lk), 2, 8), rand(sum(lk), 2, 8)
    seqused = torch.tensor(used, dtype=torch.int32) if with_used else None
    out, lse = attention_ref(q, k, v, causal=causal, window_size=window, cu_seqlens_q=cq, cu_seqlens_k=ck,
                             seqused_k=seqused)
    assert out.shape == (sum(lq), 4, 8) and lse.shape == (4, sum(lq))
    for b in range(4):
        qs, ks = slice(int(cq[b]), int(cq[b + 1])), slice(int(ck[b]), int(ck[b + 1]))
        o2, l2 = naive(q[qs][None], k[ks][None], v[ks][None], causal, window,
                       used=[used[b]] if with_used else None)
        close(out[qs], o2[0])
        close(lse[:, qs], l2[0])


def test_dense_seqused_k():
    q, k, v = rand(2, 4, 2, 8), rand(2, 6, 2, 8), rand(2, 6, 2, 8)
    used = torch.tensor([3, 6], dtype=torch.int32)
    out, lse = attention_ref(q, k, v, causal=True, seqused_k=used)
    o2, l2 = naive(q, k, v, True, used=[3, 6])
    close(out, o2)
    close(lse, l2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_reference(dtype):
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 6, 2, 16, dtype=dtype) for _ in range(3))
    out, lse = attention_ref(q, k, v, causal=True, upcast=False)
    assert out.dtype == dtype and lse.dtype == torch.float32
    ref, lref = attention_ref(q, k, v, causal=True)
    assert (out.double() - ref).abs().max() < 0.05
    assert (lse.double() - lref).abs().max() < 0.05


def test_bad_alignment_name():
    with pytest.raises(ValueError, match="causal_align"):
        attention_ref(rand(1, 2, 1, 8), rand(1, 2, 1, 8), rand(1, 2, 1, 8), causal_align="middle")
