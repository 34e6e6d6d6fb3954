"""CPU: every validation rule raises the right exception type with a message naming the
argument. Structural rules are exercised with fake CUDA tensors (FakeTensorMode), which have
shapes, strides, dtypes and a CUDA device but no data; the "must be CUDA" rule with CPU tensors."""
import contextlib
import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flashcute
from flashcute import _lib
from flashcute import flash_attn_interface as fai

HD = _lib.COMPILED_HEAD_DIMS[0] if _lib.COMPILED_HEAD_DIMS else 128
BF = torch.bfloat16


@pytest.fixture
def fake():
    with FakeTensorMode() as m:
        yield m


def t(*shape, dtype=BF, device="cuda"):
    return torch.empty(*shape, dtype=dtype, device=device)


def qkv(b=2, sq=5, sk=7, hq=4, hk=2, d=HD, dv=None, dtype=BF, device="cuda"):
    return (t(b, sq, hq, d, dtype=dtype, device=device), t(b, sk, hk, d, dtype=dtype, device=device),
            t(b, sk, hk, dv or d, dtype=dtype, device=device))


@contextlib.contextmanager
def raises(exc, *words):
    with pytest.raises(exc) as info:
        yield info
    msg = str(info.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def i32c(n, dtype=torch.int32):
    return torch.empty(n, dtype=dtype, device="cuda")


def test_valid_fake_call_passes(fake):
    out, lse = flashcute.flash_attn_func(*qkv(), causal=True, return_lse=True)
    assert out.shape == (2, 5, 4, HD) and lse.shape == (2, 4, 5)


def test_not_a_tensor(fake):
    q, k, v = qkv()
    with raises(TypeError, "k", "Tensor"):
        flashcute.flash_attn_func(q, 3, v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int8])
def test_dtype(fake, dtype):
    q, k, v = qkv(dtype=dtype)
    with raises(TypeError, "q", "dtype", str(dtype), "bfloat16"):
        flashcute.flash_attn_func(q, k, v)


def test_fp8_only_through_fa3_interface(fake):
    q, k, v = qkv(dtype=torch.float8_e4m3fn)
    with raises(TypeError, "q", "float8_e4m3fn", "flash_attn_interface"):
        flashcute.flash_attn_func(q, k, v)
    out = fai.flash_attn_func(q, k, v)  # accepted (the library decides at run time)
    assert out.dtype == torch.bfloat16


def test_mixed_dtypes(fake):
    q, k, v = qkv()
    with raises(TypeError, "v", "dtype"):
        flashcute.flash_attn_func(q, k, t(2, 7, 2, HD, dtype=torch.float16))


def test_cuda_required():
    q, k, v = qkv(device="cpu")
    with raises(ValueError, "q", "CUDA", "cpu"):
        flashcute.flash_attn_func(q, k, v)


def test_cuda_required_meta():
    q, k, v = qkv(device="meta")
    with raises(ValueError, "CUDA", "meta"):
        flashcute.flash_attn_func(q, k, v)


def test_same_device(fake):
    # FakeTensorMode initialises a real context for a fake CUDA device when CUDA is present, so on a
    # one-GPU machine "cuda:1" cannot even be faked; without CUDA (CI) or with 2+ GPUs it runs.
    if torch.cuda.is_available() and torch.cuda.device_count() < 2:
        pytest.skip("needs no CUDA or at least 2 GPUs (a fake cuda:1 needs a real one when CUDA is present)")
    q, k, v = qkv()
    v2 = torch.empty(v.shape, dtype=v.dtype, device="cuda:1")
    with raises(ValueError, "v", "device"):
        flashcute.flash_attn_func(q, k, v2)


def test_rank(fake):
    q, k, v = qkv()
    with raises(ValueError, "q", "4 dimensions", "(batch, seqlen, heads, head_dim)"):
        flashcute.flash_attn_func(t(5, 4, HD), k, v)


def test_head_dim_not_compiled(fake):
    q, k, v = qkv(d=72)
    with raises(ValueError, "q", "72", "FLASHCUTE_HDIMS"):
        flashcute.flash_attn_func(q, k, v)


def test_head_dim_k_mismatch(fake):
    q, _, v = qkv()
    k = t(2, 7, 2, HD + 8)
    with raises(ValueError, "k", "head dim"):
        flashcute.flash_attn_func(q, k, v)


def test_head_dim_v(fake):
    q, k, v = qkv(dv=HD + 8)
    with raises(ValueError, "v", "head dim", str(HD + 8)):
        flashcute.flash_attn_func(q, k, v)


def test_heads_ratio(fake):
    q, k, v = qkv(hq=5, hk=2)
    with raises(ValueError, "k", "heads"):
        flashcute.flash_attn_func(q, k, v)


def test_heads_k_v(fake):
    q, k, _ = qkv()
    v = t(2, 7, 1, HD)
    with raises(ValueError, "v", "heads"):
        flashcute.flash_attn_func(q, k, v)


def test_batch_mismatch(fake):
    q, k, v = qkv()
    with raises(ValueError, "k", "batch"):
        flashcute.flash_attn_func(q, t(1, 7, 2, HD), v)


def test_seqlen_k_v_mismatch(fake):
    q, k, v = qkv()
    with raises(ValueError, "v", "seqlen"):
        flashcute.flash_attn_func(q, k, t(2, 3, 2, HD))


@pytest.mark.parametrize("ws", [(-2, 0), (0, -5)])
def test_window_values(fake, ws):
    with raises(ValueError, "window_size", ">= -1"):
        flashcute.flash_attn_func(*qkv(), window_size=ws)


@pytest.mark.parametrize("ws", [(1,), 3, (1, 2, 3)])
def test_window_shape(fake, ws):
    with raises(ValueError, "window_size"):
        flashcute.flash_attn_func(*qkv(), window_size=ws)


def test_window_type(fake):
    with raises(TypeError, "window_size"):
        flashcute.flash_attn_func(*qkv(), window_size=(1.5, 0))


@pytest.mark.parametrize("sc", [-1.0, math.inf, math.nan])
def test_softcap(fake, sc):
    with raises(ValueError, "softcap"):
        flashcute.flash_attn_func(*qkv(), softcap=sc)


def test_softmax_scale(fake):
    with raises(ValueError, "softmax_scale"):
        flashcute.flash_attn_func(*qkv(), softmax_scale=math.nan)
    with raises(TypeError, "softmax_scale"):
        flashcute.flash_attn_func(*qkv(), softmax_scale="0.1")


def test_causal_type(fake):
    with raises(TypeError, "causal"):
        flashcute.flash_attn_func(*qkv(), causal="yes")


def test_backend(fake):
    with raises(ValueError, "backend", "sm90"):
        flashcute.flash_attn_func(*qkv(), backend="sm70")


# ---- varlen ---------------------------------------------------------------------------------
def vl(tq=9, tk=11, hq=4, hk=2, batch=3):
    q, k, v = t(tq, hq, HD), t(tk, hk, HD), t(tk, hk, HD)
    cq = torch.empty(batch + 1, dtype=torch.int32, device="cuda")
    ck = torch.empty(batch + 1, dtype=torch.int32, device="cuda")
    return q, k, v, cq, ck


def test_varlen_valid_fake(fake):
    q, k, v, cq, ck = vl()
    out, lse = flashcute.flash_attn_varlen_func(q, k, v, cq, ck, 5, 6, return_lse=True)
    assert out.shape == (9, 4, HD) and lse.shape == (4, 9)


def test_varlen_rank(fake):
    q, k, v, cq, ck = vl()
    with raises(ValueError, "q", "3 dimensions", "(total, heads, head_dim)"):
        flashcute.flash_attn_varlen_func(t(1, 9, 4, HD), k, v, cq, ck, 5, 6)


def test_cu_seqlens_dtype(fake):
    q, k, v, cq, ck = vl()
    with raises(TypeError, "cu_seqlens_q", "int32"):
        flashcute.flash_attn_varlen_func(q, k, v, i32c(4, torch.int64), ck, 5, 6)
    with raises(TypeError, "cu_seqlens_k", "int32"):
        flashcute.flash_attn_varlen_func(q, k, v, cq, i32c(4, torch.int64), 5, 6)


def test_cu_seqlens_length(fake):
    q, k, v, cq, ck = vl()
    with raises(ValueError, "cu_seqlens_k", "entries"):
        flashcute.flash_attn_varlen_func(q, k, v, cq, i32c(3), 5, 6)
    with raises(ValueError, "cu_seqlens_q"):
        flashcute.flash_attn_varlen_func(q, k, v, i32c(0), i32c(0), 5, 6)
    with raises(ValueError, "cu_seqlens_q", "1-D"):
        flashcute.flash_attn_varlen_func(q, k, v, i32c((2, 2)), ck, 5, 6)


def test_cu_seqlens_none(fake):
    q, k, v, cq, ck = vl()
    with raises(ValueError, "cu_seqlens_k"):
        flashcute.flash_attn_varlen_func(q, k, v, cq, None, 5, 6)


def test_max_seqlen(fake):
    q, k, v, cq, ck = vl()
    with raises(ValueError, "max_seqlen_q"):
        flashcute.flash_attn_varlen_func(q, k, v, cq, ck, -1, 6)
    with raises(ValueError, "max_seqlen_k", "total_k"):
        flashcute.flash_attn_varlen_func(q, k, v, cq, ck, 5, 12)
    with raises(TypeError, "max_seqlen_q"):
        flashcute.flash_attn_varlen_func(q, k, v, cq, ck, 5.0, 6)


def test_varlen_total_k_v(fake):
    q, k, v, cq, ck = vl()
    with raises(ValueError, "v", "total_k"):
        flashcute.flash_attn_varlen_func(q, k, t(5, 2, HD), cq, ck, 5, 6)


def test_seqused_k(fake):
    q, k, v, cq, ck = vl()
    bad = torch.empty(2, dtype=torch.int32, device="cuda")
    with raises(ValueError, "seqused_k", "entries"):
        flashcute.flash_attn_varlen_func(q, k, v, cq, ck, 5, 6, seqused_k=bad)
    with raises(TypeError, "seqused_k", "int32"):
        flashcute.flash_attn_varlen_func(q, k, v, cq, ck, 5, 6, seqused_k=i32c(2, torch.int64))


# The value checks need data: run them on CPU tensors through the checker directly.
from flashcute import _validation as V  # noqa: E402


def i32(x):
    return torch.tensor(x, dtype=torch.int32)


def test_cu_seqlens_monotone():
    with raises(ValueError, "cu_seqlens_q", "non-decreasing"):
        V.check_varlen_values(i32([0, 4, 2]), i32([0, 1, 2]), None, 4, 2, 4, 2)


def test_cu_seqlens_start_and_end():
    with raises(ValueError, "cu_seqlens_k", "start with 0"):
        V.check_varlen_values(i32([0, 1, 2]), i32([1, 1, 2]), None, 4, 4, 4, 4)
    with raises(ValueError, "cu_seqlens_k", "exceeds"):
        V.check_varlen_values(i32([0, 1, 2]), i32([0, 1, 9]), None, 4, 9, 4, 4)


def test_max_seqlen_too_small():
    with raises(ValueError, "max_seqlen_q"):
        V.check_varlen_values(i32([0, 3, 4]), i32([0, 1, 2]), None, 2, 2, 4, 2)


def test_seqused_k_bound():
    with raises(ValueError, "seqused_k", "entry 1"):
        V.check_varlen_values(i32([0, 1, 2]), i32([0, 1, 2]), i32([1, 2]), 1, 1, 2, 2)


def test_value_checks_skipped_without_data(fake):
    assert not V.values_readable(torch.empty(3, dtype=torch.int32, device="cuda"))
    assert not V.values_readable(torch.empty(3, dtype=torch.int32, device="meta"))


def test_value_checks_skipped_when_compiling(monkeypatch):
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not V.values_readable(i32([0, 1]))


def test_value_check_runs_in_eager_public_path():
    # CPU tensors: the structural rules pass, the value check runs... but the CUDA rule comes first.
    q, k, v = t(4, 2, HD, device="cpu"), t(2, 2, HD, device="cpu"), t(2, 2, HD, device="cpu")
    with raises(ValueError, "CUDA"):
        flashcute.flash_attn_varlen_func(q, k, v, i32([0, 4, 2]), i32([0, 1, 2]), 4, 1)


# ---- SDPA ------------------------------------------------------------------------------------
def sd(b=2, hq=4, hk=4, sq=5, sk=7, d=HD):
    return t(b, hq, sq, d), t(b, hk, sk, d), t(b, hk, sk, d)


def test_sdpa_valid_fake(fake):
    out = flashcute.scaled_dot_product_attention(*sd(), is_causal=True)
    assert out.shape == (2, 4, 5, HD)


def test_sdpa_attn_mask(fake):
    q, k, v = sd()
    with raises(NotImplementedError, "attn_mask", "is_causal"):
        flashcute.scaled_dot_product_attention(q, k, v, attn_mask=t(5, 7))


def test_sdpa_dropout(fake):
    with raises(NotImplementedError, "dropout_p", "0.0"):
        flashcute.scaled_dot_product_attention(*sd(), dropout_p=0.1)


def test_sdpa_heads_without_gqa(fake):
    q, k, v = sd(hq=4, hk=2)
    with raises(ValueError, "key", "enable_gqa"):
        flashcute.scaled_dot_product_attention(q, k, v)
    out = flashcute.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert out.shape == (2, 4, 5, HD)


def test_sdpa_rank(fake):
    q, k, v = sd()
    with raises(ValueError, "query", "4 dimensions"):
        flashcute.scaled_dot_product_attention(t(4, 5, HD), k, v)


def test_sdpa_names_in_messages(fake):
    q, k, v = sd()
    with raises(TypeError, "query", "dtype"):
        flashcute.scaled_dot_product_attention(t(2, 4, 5, HD, dtype=torch.float32), k, v)
    with raises(ValueError, "scale"):
        flashcute.scaled_dot_product_attention(q, k, v, scale=math.inf)


def test_descale_only_with_fp8(fake):
    q, k, v = qkv()
    ds = torch.empty(2, 2, dtype=torch.float32, device="cuda")
    with raises(ValueError, "q_descale", "float8"):
        fai.flash_attn_func(q, k, v, q_descale=ds)


def test_descale_shape(fake):
    q, k, v = qkv(dtype=torch.float8_e4m3fn)
    with raises(ValueError, "k_descale", "(batch, heads_k)"):
        fai.flash_attn_func(q, k, v, k_descale=torch.empty(3, dtype=torch.float32, device="cuda"))
    with raises(TypeError, "v_descale", "float32"):
        fai.flash_attn_func(q, k, v, v_descale=torch.empty(2, 2, dtype=torch.float16, device="cuda"))


# ---- library errors map to Python exceptions ---------------------------------------------------
def test_library_status_mapping():
    a = _lib.FwdArgs()
    a.dtype = 7
    with raises(ValueError, "dtype"):
        _lib.fwd(a)


def test_library_refuses_a_misaligned_tile_counter():
    """flashcute_fwd_args.tile_counter (int32 scratch) is checked before any device work."""
    a = _lib.fwd_args(0x10000, 0x20000, 0x30000, 0x40000, 0, (8 * 64 * HD, 8 * HD, HD), (8 * 64 * HD, 8 * HD, HD),
                      (8 * 64 * HD, 8 * HD, HD), (8 * 64 * HD, 8 * HD, HD), (0, 0), 1, 64, 64, 8, 8, HD, HD,
                      _lib.DTYPE_BF16, _lib.DTYPE_BF16, 0.1, 1, -1, 0, _lib.ALIGN_BOTTOM_RIGHT, 0.0, 0, 0, 0, 0, 0,
                      0, 0, 0, (0, 0), _lib.BACKEND_AUTO, -1, 0, tile_counter=0x50002)
    with raises(ValueError, "tile_counter", "aligned"):
        _lib.fwd(a)


def test_supported_without_gpu_reports_reason():
    s = flashcute.supported(-1, "auto", "bf16", HD)
    if not torch.cuda.is_available():
        assert not s and s.reason
    with raises(ValueError, "backend"):
        flashcute.supported(-1, "sm70", "bf16", HD)
