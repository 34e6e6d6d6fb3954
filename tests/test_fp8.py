"""CPU: the FP8 helpers (flashcute.fp8.quantize / hadamard), the FP8 kernel emulation
(flashcute.reference.attention_fp8_emulated), the FP8 mode's argument validation, its fake
(shape-only) path, and that torch.compile(fullgraph=True) traces the FP8 mode into one graph."""
import ctypes
import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flashcute
from flashcute import _lib, fp8 as F
from flashcute import _validation as V
from flashcute.reference import attention_fp8_emulated, attention_ref, visible_mask
from _compile_util import captured_graph_code

E4M3 = torch.float8_e4m3fn
HD = _lib.COMPILED_HEAD_DIMS[0] if _lib.COMPILED_HEAD_DIMS else 128


def rnd(*shape, dtype=torch.bfloat16, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


# ---- quantize ------------------------------------------------------------------------------------
def test_quantize_scales_are_per_batch_head_amax():
    x = rnd(3, 37, 4, 64, scale=2.0)
    x[1, 5, 2, 7] = -300.0
    x8, ds = F.quantize(x)
    assert x8.dtype == E4M3 and x8.shape == x.shape and ds.dtype == torch.float32 and ds.shape == (3, 4)
    amax = x.float().abs().amax(dim=(1, 3))
    torch.testing.assert_close(ds, amax / 448.0, rtol=1e-6, atol=0)
    # the amax element of every slot lands exactly on +-448
    torch.testing.assert_close(x8.float().abs().amax(dim=(1, 3)), torch.full((3, 4), 448.0))
    assert x8[1, 5, 2, 7].float().item() == -448.0


def test_quantize_round_trip_error_bound():
    x = rnd(2, 200, 3, 128, dtype=torch.float32, seed=1) * torch.logspace(-4, 1, 128)  # many binades
    x8, ds = F.quantize(x)
    back = F.dequantize(x8, ds)
    slot = ds[:, None, :, None]
    # e4m3: 3 mantissa bits -> relative error <= 2^-4 for normals; subnormal step 2^-9 (times descale)
    bound = x.abs() * 2.0 ** -4 + slot * 2.0 ** -10 + 1e-7 * x.abs()
    assert torch.all((back - x).abs() <= bound)
    assert (back - x).abs().max() > 0  # it really quantized


def test_saturation_not_nan():
    y = torch.tensor([500.0, -1e6, 448.0, 464.0, 1e-9, float("inf")])
    assert F._cast_e4m3(y).float().tolist() == [448.0, -448.0, 448.0, 448.0, 0.0, 448.0]


def test_round_to_nearest_even():
    # 1.0625 lies halfway between 1.0 and 1.125 (e4m3 step 0.125 in [1, 2)): ties to even -> 1.0
    # 1.1875 lies halfway between 1.125 and 1.25: ties to even -> 1.25
    y = torch.tensor([1.0625, 1.1875, 1.07])
    assert F._cast_e4m3(y).float().tolist() == [1.0, 1.25, 1.125]


@pytest.mark.parametrize("heads,heads_k", [(8, 2), (6, 1), (4, 4)])
def test_quantize_gqa_scale_shape_and_group_amax(heads, heads_k):
    x = rnd(2, 19, heads, 64, seed=heads)
    x[0, 3, heads - 1, 0] = 50.0  # the last q head of the last group holds the outlier
    x8, ds = F.quantize(x, heads_k)
    assert ds.shape == (2, heads_k)
    g = heads // heads_k
    amax = x.float().abs().view(2, 19, heads_k, g, 64).amax(dim=(1, 3, 4))
    torch.testing.assert_close(ds, amax / 448.0, rtol=1e-6, atol=0)
    back = F.dequantize(x8, ds)
    assert torch.allclose(back, x.float(), rtol=2 ** -4, atol=float(ds.max()) * 2 ** -9)


def test_quantize_layouts_agree():
    x = rnd(2, 31, 4, 64, seed=3)
    x8, ds = F.quantize(x, 2)
    x8t, dst = F.quantize(x.transpose(1, 2), 2, layout="bhsd")
    assert x8t.shape == (2, 4, 31, 64)
    assert torch.equal(ds, dst) and torch.equal(x8.float(), x8t.transpose(1, 2).float())
    # varlen: one scale per sequence, equal to quantizing each sequence on its own
    lens = [5, 0, 17, 9]
    packed = torch.cat([rnd(n, 4, 64, seed=10 + i) for i, n in enumerate(lens)] + [rnd(3, 4, 64, seed=99)])
    cu = torch.tensor([0, 5, 5, 22, 31], dtype=torch.int32)
    p8, pd = F.quantize(packed, 2, layout="thd", cu_seqlens=cu)
    assert pd.shape == (4, 2) and p8.shape == packed.shape
    for b in range(4):
        a, e = cu[b].item(), cu[b + 1].item()
        if e == a:
            assert torch.equal(pd[b], torch.ones(2) * 1.0)  # empty sequence: neutral descale
            continue
        s8, sd = F.quantize(packed[a:e].unsqueeze(0), 2)
        assert torch.equal(sd[0], pd[b]) and torch.equal(s8[0].float(), p8[a:e].float())


def test_quantize_zero_and_rotation():
    z = torch.zeros(1, 8, 2, 64, dtype=torch.bfloat16)
    z8, zd = F.quantize(z, rotate=True)
    assert torch.all(z8.float() == 0) and torch.all(torch.isfinite(zd))
    x = rnd(2, 50, 2, 128, seed=4)
    x8, ds = F.quantize(x, rotate=True, seed=5)
    rot = F.hadamard(x.double(), seed=5)
    # the scale bounds the rotated values by sqrt(d) * the row norm (x R, R = diag(s) H / sqrt(d),
    # so max |x R| <= max ||x_row||_2): descale = max row norm / 448, never below max |x R| / 448
    norms = x.double().norm(dim=-1).amax(dim=1)
    torch.testing.assert_close(ds, (norms / 448.0).float(), rtol=1e-5, atol=0)
    assert torch.all(ds.double() * 448.0 >= rot.abs().amax(dim=(1, 3)) * (1 - 1e-6))
    back = F.dequantize(x8, ds, dtype=torch.float64)
    assert torch.allclose(back, rot, rtol=2 ** -4 + 1e-6, atol=float(ds.max()) * 2 ** -9)


def test_quantize_argument_errors():
    x = rnd(1, 4, 4, 64)
    with pytest.raises(ValueError, match="heads_k"):
        F.quantize(x, 3)
    with pytest.raises(ValueError, match="layout"):
        F.quantize(x, layout="sbhd")
    with pytest.raises(ValueError, match="cu_seqlens"):
        F.quantize(x[0], layout="thd")
    with pytest.raises(TypeError, match="dtype"):
        F.quantize(x.to(E4M3))
    with pytest.raises(ValueError, match="Hadamard"):
        F.quantize(rnd(1, 4, 4, 80), rotate=True)
    with pytest.raises(ValueError, match="impl"):
        F.quantize(x, impl="cutlass")
    with pytest.raises(ValueError, match="triton"):
        F.quantize(x, impl="triton")  # a CPU tensor has no Triton path
    with pytest.raises(ValueError, match="cuda.*not a CUDA device"):
        F.quantize(x, impl="cuda")  # nor a CUDA-kernel path


def test_quantize_op_opcheck():
    x = rnd(2, 9, 4, 64)
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    torch.library.opcheck(torch.ops.flashcute.fp8_quantize.default, (x, 2, True, 3, None, "auto"),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.flashcute.fp8_quantize.default, (x[0], 2, False, 0, cu, "torch"),
                          test_utils=("test_schema", "test_faketensor"))


def test_quantize_qkv_equals_three_quantizes_and_opcheck():
    q, k, v = rnd(2, 9, 8, 64, seed=1), rnd(2, 7, 2, 64, seed=2), rnd(2, 7, 2, 64, seed=3)
    q8, k8, v8, (qd, kd, vd) = F.quantize_qkv(q, k, v, rotate=True, seed=4)
    for (a8, ad), (b8, bd) in zip(((q8, qd), (k8, kd), (v8, vd)),
                                  (F.quantize(q, 2, rotate=True, seed=4), F.quantize(k, 2, rotate=True, seed=4),
                                   F.quantize(v, 2))):
        assert torch.equal(ad, bd) and torch.equal(a8.float(), b8.float())
    cu_q = torch.tensor([0, 4, 9], dtype=torch.int32)
    cu_k = torch.tensor([0, 3, 7], dtype=torch.int32)
    for args in ((q, k, v, 2, True, 4, None, None, "auto"),
                 (q[0], k[0], v[0], 2, False, 0, cu_q, cu_k, "torch")):
        torch.library.opcheck(torch.ops.flashcute.fp8_quantize_qkv.default, args,
                              test_utils=("test_schema", "test_faketensor"))


# ---- the CUDA path's selection and its C ABI (no GPU needed) -----------------------------------
def test_quantize_cuda_selection_falls_back(monkeypatch):
    """impl="auto" takes the CUDA kernel only for dense CUDA bf16/fp16 tensors that the library
    says it can quantize (built, Hopper, rotation only at head dims 64/128/256), else torch ops;
    impl="cuda" raises with the reason instead. Fake CUDA tensors; the library's answer stubbed."""
    asked = []

    def fake_supported(device, dtype, head_dim, rotate):
        asked.append((device, dtype, head_dim, rotate))
        return _lib.Support(True, "sm90", "")  # the library rotates every head dim it quantizes

    monkeypatch.setattr(_lib, "fp8_quantize_supported", fake_supported)
    monkeypatch.setattr(F, "_CUDA_SUPPORT", {})
    cpu = rnd(1, 4, 4, 64)
    with FakeTensorMode():
        x = cu_empty(2, 9, 4, 128)
        assert F._use_cuda(x, None, True, "auto") and F._use_cuda(x, None, False, "cuda")
        assert F._use_cuda(cu_empty(2, 9, 4, 96, dtype=torch.float16), None, False, "auto")
        assert F._use_cuda(cu_empty(2, 9, 4, 192), None, True, "auto")  # Paley's rotation in the kernel
        assert not F._use_cuda(x, None, True, "torch") and not F._use_cuda(x, None, True, "triton")
        # varlen: the kernel takes packed (total, heads, d) rows; "auto" takes it where
        # F._CUDA_VARLEN_AUTO (on since its GPU tests passed, run 92)
        cu = torch.empty(3, dtype=torch.int32, device="cuda")
        assert F._use_cuda(cu_empty(18, 4, 128), cu, True, "cuda")
        assert F._use_cuda(cu_empty(18, 4, 128), cu, True, "auto") == F._CUDA_VARLEN_AUTO
        no = [(cu_empty(2, 9, 4, 128), cu, False, "total, heads"),                # varlen wants packed rows
              (cu_empty(2, 9, 4, 128, dtype=torch.float32), None, False, "float32"),
              (cu_empty(2, 9, 4, 80), None, False, "head dim 80"),
              (cu_empty(2, 9, 0, 128), None, False, "heads > 0")]
        for t, cs, rot, why in no:
            assert not F._use_cuda(t, cs, rot, "auto"), why
            with pytest.raises(ValueError, match=why):
                F._use_cuda(t, cs, rot, "cuda")
        n = len(asked)
        F._use_cuda(x, None, True, "auto")
        assert len(asked) == n, "the library's answer is cached per (device, dtype, head dim, rotate)"
    assert not F._use_cuda(cpu, None, False, "auto")
    # the library says no (not built / not Hopper): auto falls back, cuda names the reason
    monkeypatch.setattr(_lib, "fp8_quantize_supported",
                        lambda *a: _lib.Support(False, None, "fp8 quantize: not compiled into this build"))
    monkeypatch.setattr(F, "_CUDA_SUPPORT", {})
    with FakeTensorMode():
        x = cu_empty(2, 9, 4, 128)
        assert not F._use_cuda(x, None, False, "auto")
        with pytest.raises(ValueError, match="not compiled"):
            F._use_cuda(x, None, False, "cuda")
    # on the CPU, auto is the torch path, bit for bit
    a8, ad = F.quantize(cpu, 2, rotate=True, seed=3)
    b8, bd = F._quantize_torch(cpu, 2, True, 3, None)
    assert torch.equal(a8.view(torch.uint8), b8.view(torch.uint8)) and torch.equal(ad, bd)


def test_quantize_sign_bits_are_the_rotation_signs():
    for d in (64, 96, 128, 192, 256):
        bits = F._sign_bits(d, 5)
        s = torch.tensor([-1.0 if bits[i // 32] >> (i % 32) & 1 else 1.0 for i in range(d)])
        torch.testing.assert_close(s.unsqueeze(1) * F._hadamard_pm1(d), F._signed_pm1_cpu(d, 5), rtol=0, atol=0)
        assert all(w == 0 for w in bits[d // 32:])


def _abi_args(**kw):
    """A valid flashcute_fp8_quantize_args for (1, 16, 2, 128) bf16 at fake (aligned) addresses:
    the library validates before it touches a device."""
    a = _lib.Fp8QuantizeArgs()
    a.x, a.x8, a.descale = 0x10000, 0x20000, 0x30000
    a.x_batch_stride, a.x_row_stride, a.x_head_stride = 16 * 2 * 128, 2 * 128, 128
    a.x8_batch_stride, a.x8_row_stride, a.x8_head_stride = 16 * 2 * 128, 2 * 128, 128
    a.descale_batch_stride, a.descale_head_stride = 2, 1
    a.batch, a.seqlen, a.heads, a.heads_k, a.head_dim, a.dtype = 1, 16, 2, 2, 128, _lib.DTYPE_BF16
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def test_quantize_c_abi_validation():
    ws = 0x40000
    need = _lib.fp8_quantize_workspace_size([_abi_args(), _abi_args(batch=3, heads_k=1)])
    assert need >= (2 + 3) * 8 + 4 and need % 16 == 0
    bad = [(dict(head_dim=80), ValueError, r"tensors\[0\]\.head_dim: 80"),
           (dict(heads_k=3), ValueError, "heads_k"),
           (dict(dtype=_lib.DTYPE_E4M3), ValueError, "dtype"),
           (dict(x=0x10002), ValueError, r"tensors\[0\]\.x: data pointer"),
           (dict(x8_row_stride=2 * 128 + 8), ValueError, r"x8: row stride"),
           (dict(x_head_stride=-128), ValueError, "negative"),
           (dict(descale=0), ValueError, "descale"),
           (dict(seqlen=-1), ValueError, "seqlen"),
           (dict(head_dim=96, rotate=1, block_rows=4), NotImplementedError,
            "block-wise scales with the rotation take head dims 64, 128 and 256")]
    for kw, exc, msg in bad:
        with pytest.raises(exc, match=msg):
            _lib.fp8_quantize([_abi_args(**kw)], ws, 4096, -1, 0)
    with pytest.raises(ValueError, match=r"tensors\[1\]\.dtype"):
        _lib.fp8_quantize([_abi_args(), _abi_args(dtype=_lib.DTYPE_FP16)], ws, 4096, -1, 0)
    with pytest.raises(ValueError, match="workspace_bytes"):
        _lib.fp8_quantize([_abi_args()], ws, 16, -1, 0)
    with pytest.raises(ValueError, match="workspace"):
        _lib.fp8_quantize([_abi_args()], 0, 4096, -1, 0)
    with pytest.raises(ValueError, match="1 to 4"):
        _lib.fp8_quantize([_abi_args()] * 5, ws, 4096, -1, 0)
    _lib.fp8_quantize([_abi_args(batch=0)], 0, 0, -1, 0)  # nothing to do: OK without a device
    # varlen (row_bounds): batch + 1 more ints of workspace and the lag's; dense only for V^T; the
    # bounds aligned
    varlen = dict(row_bounds=0x50000, batch=3, seqlen=40)
    assert _lib.fp8_quantize_workspace_size([_abi_args(**varlen)]) == \
        (3 * 2 * 8 + 4 + (3 + 1) * 4 + 4 + 15) // 16 * 16
    assert _lib.fp8_quantize_workspace_size([_abi_args(**dict(varlen, batch=2))]) == 64  # 32 + 4 + 12 + 4 -> 64
    with pytest.raises(NotImplementedError, match="dense"):
        _lib.fp8_quantize([_abi_args(x8_vt=1, heads_k=2, **varlen)], ws, 4096, -1, 0)
    with pytest.raises(ValueError, match="row_bounds"):
        _lib.fp8_quantize([_abi_args(**dict(varlen, row_bounds=0x50002))], ws, 4096, -1, 0)
    if not flashcute.build_info()["fp8_quantize"]:
        # valid arguments, but this build has no kernel: UNSUPPORTED, naming the CMake options
        with pytest.raises(NotImplementedError, match="FLASHCUTE_FP8"):
            _lib.fp8_quantize([_abi_args()], ws, 4096, -1, 0)
        assert not _lib.fp8_quantize_supported(-1, _lib.DTYPE_BF16, 128, False)


# ---- hadamard ------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", [1, 2, 16, 64, 96, 128, 192, 256, 12, 48])
def test_hadamard_matrix_is_orthogonal(d):
    r = F.hadamard_matrix(d, seed=3, dtype=torch.float64)
    torch.testing.assert_close(r @ r.T, torch.eye(d, dtype=torch.float64), rtol=0, atol=1e-12)
    # a Hadamard matrix: every entry +-1/sqrt(d), so each coordinate is spread over all others
    torch.testing.assert_close(r.abs(), torch.full((d, d), d ** -0.5, dtype=torch.float64))


@pytest.mark.parametrize("d", [64, 96, 128, 192, 256])
def test_hadamard_keeps_qk_and_spreads_outliers(d):
    q, k = rnd(3, d, dtype=torch.float64, seed=1), rnd(5, d, dtype=torch.float64, seed=2)
    q[0, 0] = 1000.0
    qr, kr = F.hadamard(q, seed=7), F.hadamard(k, seed=7)
    torch.testing.assert_close(qr @ kr.T, q @ k.T, rtol=1e-12, atol=1e-9)
    # the outlier row's max shrinks from 1000 to about 1000 / sqrt(d)
    assert qr[0].abs().max() < 1000.0 / math.sqrt(d) * 1.2
    # bf16 in, bf16 out, one rounding from the exact value
    qb = q.to(torch.bfloat16)
    out = F.hadamard(qb, seed=7)
    assert out.dtype == torch.bfloat16 and out.shape == qb.shape
    exact = F.hadamard(qb.double(), seed=7)
    assert torch.allclose(out.double(), exact, rtol=2 ** -8, atol=1e-30)


def test_hadamard_determinism():
    a = F.hadamard_matrix(128, seed=11)
    assert torch.equal(a, F.hadamard_matrix(128, seed=11))
    assert not torch.equal(a, F.hadamard_matrix(128, seed=12))
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    b1, b2 = F.hadamard_matrix(64, generator=g1), F.hadamard_matrix(64, generator=g2)
    assert torch.equal(b1, b2)
    assert not torch.equal(F.hadamard_matrix(64, generator=g1), b1)  # the generator advanced
    x = rnd(4, 64, dtype=torch.float32)
    assert torch.equal(F.hadamard(x, generator=torch.Generator().manual_seed(5)), x @ b1)
    # seed None: the plain (Sylvester) Hadamard matrix, first row all +
    assert torch.all(F.hadamard_matrix(16, seed=None)[0] > 0)


@pytest.mark.parametrize("d", [80, 100, 40, 0])
def test_hadamard_unsupported_dims(d):
    with pytest.raises(ValueError, match="Hadamard"):
        F.hadamard_matrix(d)
    if d:
        with pytest.raises(ValueError, match="Hadamard"):
            F.hadamard(torch.zeros(2, d))


# ---- the emulated FP8 kernel ---------------------------------------------------------------------
def naive_fp8(q8, k8, v8, qd, kd, vd, scale, mask, p_offset=0.0):
    """One row at a time, float64, the kernel's steps written out (P rounded to e4m3)."""
    sq, hq, d = q8.shape
    hk, dv = k8.shape[1], v8.shape[-1]
    out = torch.zeros(sq, hq, dv, dtype=torch.float64)
    for h in range(hq):
        j = h // (hq // hk)
        for i in range(sq):
            keys = mask[i].nonzero().flatten()
            if keys.numel() == 0:
                continue
            mult = torch.tensor(scale, dtype=torch.float32) * qd[j] * kd[j]  # folded once, in fp32
            s = (k8[keys, j].double() @ q8[i, h].double()) * mult.double()
            p = torch.exp2((s - s.max()) * math.log2(math.e) + p_offset)
            p8 = p.clamp(max=448).to(E4M3).double()
            out[i, h] = (p8 @ v8[keys, j].double()) * vd[j].double() / p.sum()
    return out


@pytest.mark.parametrize("sq,sk,causal,window", [(7, 9, False, (-1, -1)), (9, 4, True, (-1, -1)),
                                                 (6, 11, False, (2, 1))])
@pytest.mark.parametrize("p_offset", [0.0, 8.0])
def test_emulation_matches_naive_kernel_steps(sq, sk, causal, window, p_offset):
    q8, qd = F.quantize(rnd(1, sq, 4, 32, seed=1), 2)
    k8, kd = F.quantize(rnd(1, sk, 2, 32, seed=2))
    v8, vd = F.quantize(rnd(1, sk, 2, 16, seed=3))
    out, lse = attention_fp8_emulated(q8, k8, v8, qd, kd, vd, causal=causal, window_size=window, softmax_scale=0.3,
                                      out_dtype=None, compute_dtype=torch.float64, p_offset_log2=p_offset)
    mask = visible_mask(sq, sk, causal, window)
    want = naive_fp8(q8[0], k8[0], v8[0], qd[0], kd[0], vd[0], 0.3, mask, p_offset)
    torch.testing.assert_close(out[0], want, rtol=1e-12, atol=1e-12)
    # the LSE does not depend on the rounding: equal to the float64 reference on dequantized inputs
    _, lref = attention_ref(F.dequantize(q8, qd), F.dequantize(k8, kd), F.dequantize(v8, vd), causal=causal,
                            window_size=window, softmax_scale=0.3)
    fin = torch.isfinite(lref)
    assert torch.equal(torch.isfinite(lse), fin)
    torch.testing.assert_close(lse[fin].double(), lref[fin], rtol=1e-6, atol=1e-6)
    if not fin.all():
        assert torch.all(out.permute(0, 2, 1, 3)[~fin] == 0)  # rows that see no key are 0


def test_emulation_error_vs_float64_on_dequantized_inputs():
    """Against ref64 on the dequantized inputs the only errors are P's e4m3 rounding and fp32/bf16
    rounding: small, but clearly not zero (the 2x rule's denominator must not vanish)."""
    q8, qd = F.quantize(rnd(2, 300, 4, 64, seed=1, scale=2.0), 2)
    k8, kd = F.quantize(rnd(2, 250, 2, 64, seed=2))
    v8, vd = F.quantize(rnd(2, 250, 2, 64, seed=3))
    deq = [F.dequantize(x, d) for x, d in ((q8, qd), (k8, kd), (v8, vd))]
    for causal, cap in ((False, 0.0), (True, 0.0), (False, 5.0)):
        ref, lref = attention_ref(*deq, causal=causal, softcap=cap)
        emu, lemu = attention_fp8_emulated(q8, k8, v8, qd, kd, vd, causal=causal, softcap=cap)
        assert emu.dtype == torch.bfloat16 and lemu.dtype == torch.float32
        err = (emu.double() - ref).abs()
        assert 1e-4 < err.max() < 5e-2 and err.pow(2).mean().sqrt() < 1e-2
        torch.testing.assert_close(lemu.double(), lref, rtol=1e-5, atol=1e-5)
        # with the +8 exponent offset the P rounding error shrinks (fewer subnormal probabilities)
        emu8, _ = attention_fp8_emulated(q8, k8, v8, qd, kd, vd, causal=causal, softcap=cap,
                                         p_offset_log2=8, out_dtype=None)
        emu0, _ = attention_fp8_emulated(q8, k8, v8, qd, kd, vd, causal=causal, softcap=cap, out_dtype=None)
        assert (emu8.double() - ref).pow(2).mean() < (emu0.double() - ref).pow(2).mean()


def test_emulation_varlen_equals_dense_per_sequence():
    lens_q, lens_k = [3, 0, 40], [5, 7, 33]
    cq, ck = (torch.tensor([0] + lens, dtype=torch.int32).cumsum(0, dtype=torch.int32) for lens in (lens_q, lens_k))
    q8, qd = F.quantize(rnd(43, 4, 64, seed=1), 2, layout="thd", cu_seqlens=cq)
    k8, kd = F.quantize(rnd(45, 2, 64, seed=2), layout="thd", cu_seqlens=ck)
    v8, vd = F.quantize(rnd(45, 2, 64, seed=3), layout="thd", cu_seqlens=ck)
    out, lse = attention_fp8_emulated(q8, k8, v8, qd, kd, vd, causal=True, cu_seqlens_q=cq, cu_seqlens_k=ck)
    for b in range(3):
        a, e, ka, ke = cq[b], cq[b + 1], ck[b], ck[b + 1]
        o, l = attention_fp8_emulated(q8[a:e][None], k8[ka:ke][None], v8[ka:ke][None], qd[b:b + 1],
                                      kd[b:b + 1], vd[b:b + 1], causal=True)
        assert torch.equal(o[0], out[a:e]) and torch.equal(l[0], lse[:, a:e])


# ---- the FP8 mode: validation, fake tensors, tracing ---------------------------------------------
def cu_empty(*s, dtype=torch.bfloat16):
    return torch.empty(*s, dtype=dtype, device="cuda")


def test_fp8_argument_errors():
    with FakeTensorMode():
        q = cu_empty(1, 8, 4, HD)
        with pytest.raises(TypeError, match="fp8"):
            flashcute.flash_attn_func(q, q, q, fp8="e4m3")
        with pytest.raises(TypeError, match="FP8Config.rotate"):
            flashcute.FP8Config(rotate=1)
        with pytest.raises(TypeError, match="FP8Config.seed"):
            flashcute.FP8Config(seed=1.5)
        with pytest.raises(ValueError, match="FP8Config.seed"):
            flashcute.FP8Config(seed=-1)
        q8 = cu_empty(1, 8, 4, HD, dtype=E4M3)
        with pytest.raises(TypeError, match="flash_attn_interface"):
            flashcute.flash_attn_func(q8, q8, q8, fp8=True)
        with pytest.raises(TypeError, match="FP8 mode"):
            flashcute.flash_attn_func(q.float(), q.float(), q.float(), fp8=True)
        with pytest.raises(ValueError, match="sm80"):
            flashcute.flash_attn_func(q, q, q, fp8=True, backend="sm80")
        with pytest.raises(ValueError, match="descale"):
            V.check_fwd(q, q, q, fp8_mode=F.FP8Config(), descales=(torch.ones(1, 4), None, None))
        with pytest.raises(ValueError, match="rotate=False"):
            V.check_head_dims = V.check_head_dims  # (the compiled head dims all have rotations)
            bad = cu_empty(1, 8, 4, 80)
            orig = V.check_head_dims
            try:
                V.check_head_dims = lambda *a: None
                V.check_fwd(bad, bad, bad, fp8_mode=F.FP8Config())
            finally:
                V.check_head_dims = orig
    with pytest.raises(ValueError, match="CUDA"):
        x = torch.zeros(1, 8, 4, HD, dtype=torch.bfloat16)
        flashcute.flash_attn_func(x, x, x, fp8=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fp8", [True, F.FP8Config(rotate=False), F.FP8Config(seed=9)])
def test_fp8_mode_fake_shapes(dtype, fp8):
    with FakeTensorMode():
        q, k = cu_empty(2, 33, 8, HD, dtype=dtype), cu_empty(2, 17, 2, HD, dtype=dtype)
        out, lse = flashcute.flash_attn_func(q, k, k, fp8=fp8, causal=True, return_lse=True)
        assert out.shape == (2, 33, 8, HD) and out.dtype == dtype and lse.shape == (2, 8, 33)
        o = flashcute.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2),
                                                   enable_gqa=True, fp8=fp8)
        assert o.shape == (2, 8, 33, HD) and o.dtype == dtype
        qv, kv = cu_empty(20, 8, HD, dtype=dtype), cu_empty(30, 2, HD, dtype=dtype)
        cu = torch.empty(4, dtype=torch.int32, device="cuda")
        out, lse = flashcute.flash_attn_varlen_func(qv, kv, kv, cu, cu, 10, 12, fp8=fp8, return_lse=True)
        assert out.shape == (20, 8, HD) and out.dtype == dtype and lse.shape == (8, 20)
        x8, ds = F.quantize(q, 2, rotate=True)
        assert x8.dtype == E4M3 and x8.shape == q.shape and ds.shape == (2, 2) and ds.dtype == torch.float32


def test_fp8_mode_traces_into_one_graph(monkeypatch):
    """torch.compile(fullgraph=True) of the FP8 mode: no graph break (it would raise), and the graph
    holds the fused q/k/v quantize op once and the attention op once. Traced on CPU tensors with
    the CUDA-device check switched off and a backend that only records the graph."""
    import flashcute._api as api
    monkeypatch.setattr(api.V, "check_cuda", lambda *a: None)

    def f(q, k, v):
        return flashcute.flash_attn_func(q, k, v, causal=True, fp8=flashcute.FP8Config(seed=3))

    q, k = rnd(1, 16, 4, HD), rnd(1, 16, 2, HD, seed=1)
    code = captured_graph_code(f, q, k, k)
    assert code.count("flashcute.fp8_quantize_qkv") == 1 and code.count("flashcute.fwd") == 1


# ---- V^T for the FP8 kernel (flashcute.ops.v_colmajor) -------------------------------------------
def _vt_key_of_position(p: int) -> int:
    """The header's rule (flashcute_fwd_args.v_colmajor): position 16h + 4q + i of each 32 keys
    holds key 16h + 8(i / 2) + 2q + i % 2."""
    h, q, i = p // 16, (p % 16) // 4, p % 4
    return 16 * h + 8 * (i // 2) + 2 * q + i % 2


@pytest.mark.parametrize("s", [1, 31, 32, 70, 96])
@pytest.mark.parametrize("dtype", [torch.float32, E4M3])
def test_v_colmajor_layout(s, dtype):
    from flashcute.ops import v_colmajor
    b, hk, dv = 2, 3, 16
    v = rnd(b, s, hk, dv, dtype=torch.float32, seed=s).add_(3.0).to(dtype)  # no zero keys
    vt = v_colmajor(v)
    sp = (s + 31) // 32 * 32
    assert vt.shape == (b, hk, dv, sp) and vt.dtype == dtype and vt.is_contiguous()
    assert sorted(_vt_key_of_position(p) for p in range(32)) == list(range(32))  # a permutation
    vf, vtf = v.float(), vt.float()
    for pos in range(sp):
        key = pos // 32 * 32 + _vt_key_of_position(pos % 32)
        want = vf[:, key].permute(1, 2, 0) if key < s else torch.zeros(hk, dv, b)  # (hk, dv, b)
        assert torch.equal(vtf[:, :, :, pos].permute(1, 2, 0), want), (pos, key)


def test_v_colmajor_c_abi_validation():
    """The library refuses V^T inputs outside what it builds them for, before any device work."""
    def args(**kw):
        a = _lib.FwdArgs()
        base = dict(struct_size=ctypes.sizeof(_lib.FwdArgs), q=0x10000, k=0x20000, v=0x30000, out=0x40000,
                    q_batch_stride=8 * 128 * 64, q_row_stride=8 * 128, q_head_stride=128,
                    k_batch_stride=2 * 128 * 64, k_row_stride=2 * 128, k_head_stride=128,
                    v_batch_stride=2 * 128 * 64, v_row_stride=64, v_head_stride=128 * 64,
                    out_batch_stride=8 * 128 * 64, out_row_stride=8 * 128, out_head_stride=128,
                    batch=1, seqlen_q=64, seqlen_k=64, heads_q=8, heads_k=2, head_dim=128, head_dim_v=128,
                    dtype=_lib.DTYPE_E4M3, out_dtype=_lib.DTYPE_BF16, softmax_scale=0.1, window_left=-1,
                    window_right=-1, device=-1, v_colmajor=1)
        base.update(kw)
        for name, value in base.items():
            setattr(a, name, value)
        return a

    for kw in (dict(out_dtype=_lib.DTYPE_FP16), dict(head_dim=64, head_dim_v=64), dict(head_dim_v=64),
               dict(dtype=_lib.DTYPE_BF16, out_dtype=_lib.DTYPE_BF16), dict(backend=_lib.BACKEND_SM80)):
        with pytest.raises(NotImplementedError, match="v_colmajor"):
            _lib.fwd(args(**kw))
    with pytest.raises(ValueError, match=r"v \(V\^T\).*row"):
        _lib.fwd(args(v_row_stride=40))  # a d row is not 16-byte aligned
    # block-wise descales: only with V^T, and only with the kernel's key tile as the block
    with pytest.raises(NotImplementedError, match="descale_block_keys"):
        _lib.fwd(args(v_colmajor=0, descale_block_keys=128))
    with pytest.raises(ValueError, match="descale_block_keys: 64.*is 128"):
        _lib.fwd(args(descale_block_keys=64))
    with pytest.raises(ValueError, match="q_descale_batch_stride"):
        _lib.fwd(args(descale_block_keys=128, q_descale_batch_stride=-1))


def test_quantize_x8_vt_validation_and_fake_shapes():
    ws = 0x40000
    for kw in (dict(head_dim=64), dict(heads_k=1), dict(rotate=1)):
        with pytest.raises(NotImplementedError, match="x8_vt"):
            _lib.fp8_quantize([_abi_args(x8_vt=1, **kw)], ws, 4096, -1, 0)
    with pytest.raises(ValueError, match=r"x8: row stride"):  # V^T rows (d) must be 16-byte aligned
        _lib.fp8_quantize([_abi_args(x8_vt=1, x8_row_stride=40)], ws, 4096, -1, 0)
    with pytest.raises(ValueError, match="v_colmajor"):
        F.quantize_qkv(*(rnd(5, 2, 128) for _ in range(3)), cu_seqlens_q=torch.tensor([0, 5], dtype=torch.int32),
                       cu_seqlens_k=torch.tensor([0, 5], dtype=torch.int32), v_colmajor=True)
    with FakeTensorMode():
        q, k = cu_empty(2, 33, 8, 128), cu_empty(2, 70, 2, 128)
        q8, k8, v8, ds = F.quantize_qkv(q, k, k, v_colmajor=True)
        assert v8.shape == (2, 2, 128, 96) and v8.dtype == E4M3 and k8.shape == k.shape


def test_row_bounds_of_a_decreasing_cu_seqlens_are_nondecreasing():
    """An invalid cu_seqlens (decreasing somewhere) still gives the C ABI nondecreasing row_bounds
    within [0, total] (a running max): with decreasing bounds the CUDA kernel's schedule could
    hold more items than the host sized it for (review of session 25)."""
    for cu_list, total in [([0, 167, 110, 30], 249), ([5, 3, 9, 1, 12], 12), ([0, 50, 40], 30)]:
        bounds = F._row_bounds(torch.tensor(cu_list, dtype=torch.int32), total)
        assert int(bounds[0]) == 0 and int(bounds[-1]) == total, (cu_list, bounds)
        assert bool((bounds[1:] >= bounds[:-1]).all()) and int(bounds.max()) <= total, (cu_list, bounds)
    assert F._row_bounds(torch.tensor([0, 167, 110, 30], dtype=torch.int32), 249).tolist() == [0, 167, 167, 167, 249]


def test_row_bounds_are_the_torch_paths_sequences():
    """flashcute.fp8._row_bounds (the CUDA path's varlen slots) puts every packed row in the slot
    that the torch path's _rows_to_sequences gives it: rows before cu[0] in sequence 0, rows past
    cu[batch] in the spare slot `batch`, cu entries beyond the rows clamped."""
    cases = [([0, 5, 5, 12], 12), ([3, 7, 20], 25), ([0], 4), ([0, 30, 40], 35), ([2, 2, 2], 9)]
    for cu_list, total in cases:
        cu = torch.tensor(cu_list, dtype=torch.int32)
        bounds = F._row_bounds(cu, total)
        assert bounds.dtype == torch.int32 and bounds.shape == (len(cu_list) + 1,)
        assert int(bounds[0]) == 0 and int(bounds[-1]) == total and bool((bounds[1:] >= bounds[:-1]).all())
        rows = torch.arange(total)
        slot = ((rows[:, None] >= bounds[None, :-1].long()) & (rows[:, None] < bounds[None, 1:].long())).int().argmax(1)
        assert torch.equal(slot, F._rows_to_sequences(cu, total).to(slot.dtype)), (cu_list, total)


# ---- block-wise scales (the FP8 mode's V^T path) -------------------------------------------------
@pytest.mark.parametrize("rows", [1, 128, 192])
@pytest.mark.parametrize("rotate", [False, True])
def test_block_quantize_scales_and_round_trip(rows, rotate):
    """quantize_qkv(block_keys=...) on the torch path: q one scale per (batch, head, row), k and v
    one per (batch, head, block of rows); the descale is the block's amax / 448 (with the rotation
    the bound sqrt(d * max row sum x^2) times 1/sqrt(d)); x8 * descale round-trips within e4m3's
    precision; an outlier only coarsens its own block."""
    b, s, h, d = 2, 300, 3, 128
    x = rnd(b, s, h, d, dtype=torch.float32, seed=rows)
    x[1, 250, 2, 5] = 500.0
    x8, ds = F._quantize_torch_blocks(x, rows, rotate, 7)
    nb = -(-s // rows)
    assert x8.shape == x.shape and x8.dtype == E4M3 and ds.shape == (b, h, nb) and ds.dtype == torch.float32
    y = F.hadamard(x, seed=7) * math.sqrt(d) if rotate else x  # the unnormalised rotated values
    want = torch.zeros(b, h, nb)
    for j in range(nb):
        blk = x[:, j * rows:(j + 1) * rows].double()  # (b, rows, h, d)
        if rotate:
            want[:, :, j] = (blk.square().sum(-1).amax(1) * d).sqrt().float() / math.sqrt(d) / 448.0
        else:
            want[:, :, j] = blk.abs().amax(dim=(1, 3)).float() / 448.0
    torch.testing.assert_close(ds, want, rtol=2e-6, atol=0)
    back = F.dequantize(x8, ds, block_rows=rows) * (math.sqrt(d) if rotate else 1.0)
    per_row = ds.repeat_interleave(rows, 2)[:, :, :s].transpose(1, 2).unsqueeze(-1) * (math.sqrt(d) if rotate else 1)
    assert torch.all((back - y).abs() <= y.abs() * 2.0 ** -4 + per_row * 2.0 ** -9 + 1e-5 * y.abs())
    assert (back - y).abs().max() > 0
    # the outlier's block has the largest descale of its head; other blocks do not see it
    j = 250 // rows
    assert ds[1, 2, j] == ds[1, 2].max() and (ds[1, 2] < ds[1, 2, j]).sum() == nb - 1


def test_quantize_qkv_block_keys():
    q, k, v = rnd(2, 70, 4, 128, seed=1), rnd(2, 90, 2, 128, seed=2), rnd(2, 90, 2, 128, seed=3)
    q8, k8, v8, (qd, kd, vd) = F.quantize_qkv(q, k, v, rotate=True, seed=3, block_keys=64)
    assert qd.shape == (2, 4, 70) and kd.shape == vd.shape == (2, 2, 2)
    for (a8, ad), (x, r, rows) in zip(((q8, qd), (k8, kd), (v8, vd)), ((q, True, 1), (k, True, 64), (v, False, 64))):
        b8, bd = F._quantize_torch_blocks(x, rows, r, 3)
        assert torch.equal(ad, bd) and torch.equal(a8.float(), b8.float())
    _, _, vt, _ = F.quantize_qkv(q, k, v, block_keys=64, v_colmajor=True)
    from flashcute.ops import v_colmajor
    assert torch.equal(vt.float(), v_colmajor(v8).float())
    for bad in (dict(block_keys=-1), dict(block_keys=True), dict(block_keys=48, v_colmajor=True)):
        with pytest.raises(ValueError, match="block_keys"):
            F.quantize_qkv(q, k, v, **bad)
    with pytest.raises(ValueError, match="block_keys"):
        cu = torch.tensor([0, 70], dtype=torch.int32)
        F.quantize_qkv(q[0], k[0, :70], v[0, :70], cu_seqlens_q=cu, cu_seqlens_k=cu, block_keys=64)
    torch.library.opcheck(torch.ops.flashcute.fp8_quantize_qkv.default,
                          (q, k, v, 2, True, 3, None, None, "torch", True, 64),
                          test_utils=("test_schema", "test_faketensor"))
    with FakeTensorMode():
        fq, fk = cu_empty(2, 33, 8, 128), cu_empty(2, 300, 2, 128)
        _, _, fv8, (fqd, fkd, fvd) = F.quantize_qkv(fq, fk, fk, v_colmajor=True, block_keys=128)
        assert fqd.shape == (2, 8, 33) and fkd.shape == fvd.shape == (2, 2, 3) and fv8.shape == (2, 2, 128, 320)
        # the block kernel rotates Sylvester head dims only: at 96 / 192 impl="cuda" says so, before
        # any device work (auto takes the torch path)
        f96 = cu_empty(2, 64, 2, 96)
        with pytest.raises(ValueError, match="block-wise scales with the rotation take head dims 64, 128 and 256"):
            F._quantize_qkv_impl(f96, f96, f96, 2, True, 3, None, None, "cuda", False, 32)


def test_block_quantize_c_abi_validation():
    ws = 0x40000
    for kw, exc, msg in [(dict(block_rows=-1), ValueError, "block_rows"),
                         (dict(block_rows=4, heads_k=1), NotImplementedError, "heads == heads_k"),
                         (dict(block_rows=300), NotImplementedError, "exceed"),
                         (dict(block_rows=48, x8_vt=1), ValueError, "multiple of 32"),
                         (dict(block_rows=4, row_bounds=0x50000, batch=3, seqlen=40), NotImplementedError, "dense")]:
        with pytest.raises(exc, match=msg):
            _lib.fp8_quantize([_abi_args(**kw)], ws, 4096, -1, 0)
    with pytest.raises(ValueError, match="block-wise or per slot"):
        _lib.fp8_quantize([_abi_args(block_rows=1), _abi_args()], ws, 4096, -1, 0)


def test_emulation_block_descales_equal_per_head_when_constant():
    """With every block of a head given the same descale, the block-wise emulation (v's descale in
    P's exponent, divided out of the row sum) is the per-head one up to P's rounding: the factor
    cancels against the row max."""
    torch.manual_seed(0)
    q8, k8, v8 = (torch.randn(2, n, h, 64).mul(40).clamp(-448, 448).to(E4M3)
                  for n, h in ((50, 4), (130, 2), (130, 2)))
    qd, kd, vd = torch.rand(2, 2) * 0.05 + 0.01, torch.rand(2, 2) * 0.05 + 0.01, torch.rand(2, 2) * 0.05 + 0.01
    per_head = attention_fp8_emulated(q8, k8, v8, qd, kd, vd, causal=True, out_dtype=None, p_offset_log2=8.0)
    blocks = attention_fp8_emulated(q8, k8, v8, qd.repeat_interleave(2, 1)[:, :, None].expand(2, 4, 50),
                                    kd[:, :, None].expand(2, 2, 3), vd[:, :, None].expand(2, 2, 3), causal=True,
                                    out_dtype=None, p_offset_log2=8.0, descale_block_keys=64)
    torch.testing.assert_close(blocks[1], per_head[1], rtol=0, atol=1e-5)
    assert (blocks[0] - per_head[0]).abs().max().item() <= 1e-3 * per_head[0].abs().max().item()
