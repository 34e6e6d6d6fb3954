"""GPU: the FP8 (e4m3) forward kernel and the FP8 mode.

Kernel rule (FA3's 2x rule with the FP8 emulation as the low-precision reference):
  max|kernel - ref64| <= 2 * max|emulated - ref64| + atol
with ref64 = attention_ref (float64) on the DEQUANTIZED inputs (q8 * q_descale, ...) and
emulated = reference.attention_fp8_emulated (the kernel's arithmetic: exact e4m3 products, fp32
softmax, P rounded to e4m3). Outputs are NaN-poisoned before the kernel writes them. Cases skip,
with the library's reason, where this build has no FP8 kernel for a head dim.

Mode rule: the FP8 mode on bf16/fp16 inputs against ref64 on the ORIGINAL inputs, with the
emulation of the same quantized inputs as the low-precision reference.
"""
import math

import pytest
import torch

import flashcute
from flashcute import flash_attn_interface as fai
from flashcute import fp8 as F
from flashcute.reference import attention_fp8_emulated, attention_ref
from _gpu_util import _fwd_into

pytestmark = pytest.mark.gpu
BF = torch.bfloat16
E4M3 = torch.float8_e4m3fn
HDIMS = [64, 128, 256, 192, 96]
SEQ_PAIRS = [(1, 1), (113, 203), (799, 3), (1024, 1024), (203, 113)]
MASKS = [dict(causal=False, window_size=(-1, -1)), dict(causal=True, window_size=(-1, -1)),
         dict(causal=False, window_size=(64, 32)), dict(causal=True, window_size=(100, -1))]
DEVICE = "cuda"  # a module attribute so that a CPU dry run of the test logic can swap it
#: The kernel's P scaling, 2^offset (the emulation's p_offset_log2). 0: P = exp(s - max) in [0, 1].
KERNEL_P_OFFSET = 8.0


def _randn(*shape, dtype):
    return torch.randn(*shape, dtype=dtype, device=DEVICE)


def require_fp8(d, dv=None):
    s = flashcute.supported(torch.cuda.current_device(), "sm90", "e4m3", d, d if dv is None else dv)
    if not s:
        pytest.skip(f"no FP8 kernel here for head dim {d}: {s.reason}")


def nan_out(q, v, varlen, dtype=BF):
    hq, dv = q.shape[-2], v.shape[-1]
    if varlen:
        return (torch.full((q.shape[0], hq, dv), math.nan, dtype=dtype, device=q.device),
                torch.full((hq, q.shape[0]), math.nan, dtype=torch.float32, device=q.device))
    return (torch.full((q.shape[0], q.shape[1], hq, dv), math.nan, dtype=dtype, device=q.device),
            torch.full((q.shape[0], hq, q.shape[1]), math.nan, dtype=torch.float32, device=q.device))


def quantized(b, sq, sk, hq, hk, d, dv=None, seed=0, varlen_cu=None):
    """Random bf16 q/k/v (with a few outliers) quantized per (batch, heads_k)."""
    torch.manual_seed(seed)
    dv = d if dv is None else dv
    lay = "thd" if varlen_cu else "bshd"
    if varlen_cu:
        cq, ck = varlen_cu
        shapes = [(int(cq[-1]), hq, d), (int(ck[-1]), hk, d), (int(ck[-1]), hk, dv)]
    else:
        shapes = [(b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, dv)]
    out = []
    for i, shp in enumerate(shapes):
        x = _randn(*shp, dtype=BF) * (1.0 + i)
        x.view(-1)[:: 997] *= 20  # outliers: descales far from 1
        cu = None if not varlen_cu else (varlen_cu[0] if i == 0 else varlen_cu[1])
        out.append(F.quantize(x, hk, layout=lay, cu_seqlens=cu))
    return out


def check_fp8_kernel(qs, ks, vs, what, out_dtype=BF, varlen=False, atol=1e-3, block=0, vt=None, **kw):
    """block > 0: block-wise descales (q per row, k and v per `block` keys) on the V^T kernel
    (vt: V^T of v8)."""
    (q8, qd), (k8, kd), (v8, vd) = qs, ks, vs
    out, lse = nan_out(q8, v8, varlen, out_dtype)
    _fwd_into(q8, k8, v8, out, lse, descales=(qd, kd, vd), vt=vt, **kw)
    assert not torch.isnan(out).any(), f"{what}: NaN in out (an element was not written?)"
    assert not torch.isnan(lse).any(), f"{what}: NaN in lse"
    lay = "thd" if varlen else "bshd"
    ref_kw = {k: v for k, v in kw.items() if k not in ("backend", "max_seqlen_q", "max_seqlen_k")}
    cu = dict(cu_seqlens=kw.get("cu_seqlens_q")), dict(cu_seqlens=kw.get("cu_seqlens_k"))
    rows = (1, block, block) if block else (0, 0, 0)
    deq = [F.dequantize(q8, qd, lay, **cu[0], dtype=torch.float64, block_rows=rows[0]),
           F.dequantize(k8, kd, lay, **cu[1], dtype=torch.float64, block_rows=rows[1]),
           F.dequantize(v8, vd, lay, **cu[1], dtype=torch.float64, block_rows=rows[2])]
    ref, lref = attention_ref(*deq, **ref_kw)
    emu, lemu = attention_fp8_emulated(q8, k8, v8, qd, kd, vd, out_dtype=out_dtype,
                                       p_offset_log2=KERNEL_P_OFFSET, descale_block_keys=block, **ref_kw)
    # The FP8 tensor cores accumulate Q K^T with less than fp32 precision, so the low-precision
    # reference is also run with its scores from the tensor cores (torch._scaled_mm, fast
    # accumulation), and the larger of the two emulations' errors is the yardstick. LSE has no P
    # rounding to hide behind (its error is the scores' error: with exact scores the bound would
    # be fp32's rounding, ~1e-6); out does where softmax is flat, but not where a row's scores are
    # in the hundreds and its weight sits on a few keys (outliers in q and k).
    tc, ltc = attention_fp8_emulated(q8, k8, v8, qd, kd, vd, out_dtype=out_dtype,
                                     p_offset_log2=KERNEL_P_OFFSET, tensor_core_scores=True,
                                     descale_block_keys=block, **ref_kw)
    err = (out.double() - ref).abs().max().item() if out.numel() else 0.0
    err_emu = max((emu.double() - ref).abs().max().item(), (tc.double() - ref).abs().max().item()) \
        if out.numel() else 0.0
    assert err <= 2 * err_emu + atol, f"{what}: out error {err:.3e} > 2 * {err_emu:.3e} + {atol}"
    fin = torch.isfinite(lref)
    assert torch.equal(torch.isfinite(lse), fin), f"{what}: -inf pattern of lse differs"
    if fin.any():
        lerr = (lse.double() - lref)[fin].abs().max().item()
        lerr_emu = max((lemu.double() - lref)[fin].abs().max().item(),
                       (ltc.double() - lref)[fin].abs().max().item())
        assert lerr <= 2 * lerr_emu + 1e-4, f"{what}: lse error {lerr:.3e} > 2 * {lerr_emu:.3e} + 1e-4"
    return out, lse


def matrix():
    cases = []
    for hi, d in enumerate(HDIMS):
        for si, (sq, sk) in enumerate(SEQ_PAIRS):
            n = hi + si
            cases.append(pytest.param(d, sq, sk, MASKS[n % len(MASKS)], [0.0, 15.0][(n // 2) % 2],
                                      [1, 4][n % 2], 2 if sq * sk > 300_000 else 3,
                                      id=f"d{d}-{sq}x{sk}-m{n % len(MASKS)}"))
    return cases


@pytest.mark.parametrize("d,sq,sk,mask,softcap,ratio,batch", matrix())
def test_fp8_kernel_matrix(d, sq, sk, mask, softcap, ratio, batch):
    require_fp8(d)
    hk = 2
    qs, ks, vs = quantized(batch, sq, sk, hk * ratio, hk, d, seed=d + sq)
    check_fp8_kernel(qs, ks, vs, f"d={d} {sq}x{sk} {mask} cap={softcap} ratio={ratio}", softcap=softcap,
                     backend="sm90", **mask)


@pytest.mark.parametrize("mi", range(len(MASKS)))
@pytest.mark.parametrize("sq,sk", [(113, 203), (300, 1030)])
def test_fp8_kernel_hdim_192_v128(mi, sq, sk):
    """The (192, 128) head dims (q and k at 192, v and out at 128; DeepSeek's shape) on the e4m3
    kernel, GQA 4, against the emulation, NaN-poisoned outputs."""
    require_fp8(192, 128)
    qs, ks, vs = quantized(2, sq, sk, 8, 2, 192, dv=128, seed=mi + sq)
    check_fp8_kernel(qs, ks, vs, f"(192, 128) {sq}x{sk} {MASKS[mi]}", backend="sm90", **MASKS[mi])


@pytest.mark.parametrize("d", HDIMS)
@pytest.mark.parametrize("mi", range(len(MASKS)))
@pytest.mark.parametrize("softcap", [0.0, 10.0])
def test_fp8_kernel_masks(d, mi, softcap):
    require_fp8(d)
    qs, ks, vs = quantized(2, 190, 77, 8, 2, d, seed=mi)
    check_fp8_kernel(qs, ks, vs, f"d={d} {MASKS[mi]} cap={softcap}", softcap=softcap, **MASKS[mi])


def test_fp8_kernel_explicit_descales_and_fp16_out():
    d = 128
    require_fp8(d)
    torch.manual_seed(1)
    q8, k8, v8 = (_randn(2, 150, 4, d, dtype=torch.float32).mul(30).clamp(-448, 448).to(E4M3) for _ in range(3))
    q8 = torch.cat([q8, q8], dim=2)  # 8 q heads over 4 kv heads
    ds = [torch.rand(2, 4, device=DEVICE) * 0.05 + 0.01 for _ in range(3)]
    for od in (BF, torch.float16):
        check_fp8_kernel((q8, ds[0]), (k8, ds[1]), (v8, ds[2]), f"explicit descales out {od}", out_dtype=od,
                         causal=True)


@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (False, (32, 8))])
def test_fp8_kernel_varlen(causal, window):
    d = 128
    require_fp8(d)
    lq, lk = [0, 1, 113, 799, 64], [5, 1, 203, 3, 300]
    cq = torch.tensor([0] + list(torch.tensor(lq).cumsum(0)), dtype=torch.int32, device=DEVICE)
    ck = torch.tensor([0] + list(torch.tensor(lk).cumsum(0)), dtype=torch.int32, device=DEVICE)
    qs, ks, vs = quantized(0, 0, 0, 8, 2, d, seed=7, varlen_cu=(cq, ck))
    check_fp8_kernel(qs, ks, vs, f"varlen {causal} {window}", varlen=True, cu_seqlens_q=cq, cu_seqlens_k=ck,
                     max_seqlen_q=max(lq), max_seqlen_k=max(lk), causal=causal, window_size=window)


def test_fp8_kernel_deterministic_100_runs():
    d = 128
    require_fp8(d)
    (q8, qd), (k8, kd), (v8, vd) = quantized(2, 1024, 1024, 16, 4, d, seed=3)
    first = None
    for _ in range(100):
        out, lse = fai.flash_attn_func(q8, k8, v8, q_descale=qd, k_descale=kd,
                                                                  v_descale=vd, causal=True,
                                                                  return_attn_probs=True)
        if first is None:
            first = (out.clone(), lse.clone())
        else:
            assert torch.equal(out, first[0]) and torch.equal(lse, first[1])


# ---- V^T inputs (FwdParams::v_colmajor: the FP8 mode's path) -------------------------------------
@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("sq,sk", [(300, 1), (300, 203), (1000, 4099)])  # 4099 keys: d=128's 192-key tile
@pytest.mark.parametrize("mi", [0, 1, 2])
def test_fp8_kernel_v_colmajor_per_head_descales(d, sq, sk, mi):
    """The V^T kernel (block-wise descales) given one descale per (batch, heads_k): the 2x rule
    against the emulation, and within rounding of the in-kernel transpose's output (the two
    differ only in where v's descale is applied: in P's exponent, where the block-wise
    arithmetic cancels it, or on O). NaN-poisoned outputs; GQA; key counts that are not
    multiples of 32 (V^T's zero padding)."""
    from flashcute import ops
    require_fp8(d)
    qs, ks, vs = quantized(2, sq, sk, 8, 2, d, seed=sk + mi)
    base, lbase = check_fp8_kernel(qs, ks, vs, f"transposing d={d} {sq}x{sk} m{mi}", **MASKS[mi])
    out, lse = check_fp8_kernel(qs, ks, vs, f"V^T d={d} {sq}x{sk} m{mi}", vt=ops.v_colmajor(vs[0]), **MASKS[mi])
    assert (out.float() - base.float()).abs().max().item() <= 2e-2 * base.float().abs().max().item()
    fin = torch.isfinite(lbase)
    assert torch.equal(torch.isfinite(lse), fin)
    # the row max in log2 units with the descales in (online_scaled) rounds differently: a few
    # fp32 ulps of LSE values in the tens
    assert (lse - lbase)[fin].abs().max().item() <= 1e-4 * max(1.0, lbase[fin].abs().max().item())


def block_quantized(b, sq, sk, hq, hk, d, seed=0, rotate=False, impl="torch"):
    """Random bf16 q/k/v (with outliers, whose blocks get their own scales) quantized block-wise
    for the V^T kernel: (q8, qd (b, hq, sq)), (k8, kd), (v8, vd (b, hk, blocks)), V^T of v8, block."""
    from flashcute import ops
    torch.manual_seed(seed)
    x = []
    for i, shp in enumerate([(b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, d)]):
        t = _randn(*shp, dtype=BF) * (1.0 + i)
        t.view(-1)[:: 997] *= 20
        x.append(t)
    block = ops.vt_key_block(d, sk)
    q8, k8, vt8, (qd, kd, vd) = F.quantize_qkv(*x, rotate=rotate, impl=impl, v_colmajor=True, block_keys=block)
    _, _, v8, _ = F.quantize_qkv(*x, rotate=rotate, impl="torch", block_keys=block)
    return (q8, qd), (k8, kd), (v8, vd), vt8, block


@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("sq,sk", [(300, 1), (300, 203), (1000, 4099), (64, 4096)])
@pytest.mark.parametrize("mi", [0, 1, 2, 3])
def test_fp8_kernel_block_descales(d, sq, sk, mi):
    """Block-wise descales (q per row, k and v per key block) on the V^T kernel: the 2x rule
    against the block-wise emulation, on the fp64 reference of the block-dequantized inputs."""
    require_fp8(d)
    qs, ks, vs, vt8, block = block_quantized(2, sq, sk, 8, 2, d, seed=sk + 3 * mi, rotate=mi % 2 == 1)
    assert ks[1].shape == (2, 2, -(-sk // block)) and qs[1].shape == (2, 8, sq)
    check_fp8_kernel(qs, ks, vs, f"blocks d={d} {sq}x{sk} m{mi}", block=block, vt=vt8, **MASKS[mi])


def test_fp8_kernel_block_descales_softcap_and_refusals():
    from flashcute import ops
    d = 128
    require_fp8(d)
    qs, ks, vs, vt8, block = block_quantized(1, 257, 300, 4, 2, d, seed=11)
    check_fp8_kernel(qs, ks, vs, "blocks softcap", block=block, vt=vt8, softcap=10.0, causal=True)
    # a block that is not the kernel's key tile is refused, not misread
    q8, k8, vt8b, (qd, kd, vd) = F.quantize_qkv(*(_randn(1, 300, h, d, dtype=BF) for h in (4, 2, 2)),
                                                 impl="torch", v_colmajor=True, block_keys=64)
    out, lse = nan_out(q8, vs[0], False)
    with pytest.raises(ValueError, match="block-wise descales expected"):
        _fwd_into(q8, k8, vs[0], out, lse, descales=(qd, kd, vd), vt=vt8b)
    assert ops.vt_key_block(d, 300) == 128 != 64


@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("s", [1, 300, 4099])
@pytest.mark.parametrize("rotate", [False, True])
@pytest.mark.parametrize("mma", ["0", "1"])
@pytest.mark.parametrize("dtype", [BF, torch.float16])
def test_block_quantize_cuda_equals_torch(d, s, rotate, mma, dtype, monkeypatch):
    """The CUDA quantizer's block-wise scales (one launch: q per row, k and v per key block, v as
    V^T) against the torch path: without the rotation bitwise (bytes and descales), with it
    descales within 1e-6 and bytes a rare e4m3 step apart (fp32 sums in another order). The
    rotation both ways: butterflies, and on the tensor cores (FLASHCUTE_FP8_QUANTIZE_MMA=1).
    Outputs poisoned first (e4m3 NaN 0x7f, NaN descales)."""
    from flashcute import ops
    require_fp8(d)
    if not flashcute.build_info()["fp8_quantize"]:
        pytest.skip("no CUDA quantizer in this build")
    if mma == "1" and not rotate:
        pytest.skip("the switch changes only the rotation")
    monkeypatch.setenv("FLASHCUTE_FP8_QUANTIZE_MMA", mma)
    torch.manual_seed(s + d)
    q, k, v = (_randn(2, s, h, d, dtype=dtype) * (1 + i) for i, h in enumerate((6, 3, 3)))
    q.view(-1)[::613] *= 30
    block = ops.vt_key_block(d, s)
    jobs = [(q, rotate, 1), (k, rotate, block), (v, False, block)]
    outs = [(torch.full(ops.vt_shape(x) if i == 2 else x.shape, 0x7F, dtype=torch.uint8, device=DEVICE).view(E4M3),
             torch.full((2, x.shape[2], -(-s // rows)), math.nan, device=DEVICE))
            for i, (x, _, rows) in enumerate(jobs)]
    got = F._quantize_cuda_blocks(jobs, 0, outs=outs, vt_last=True)
    for i, (x, r, rows) in enumerate(jobs):
        ref8, refd = F._quantize_torch_blocks(x, rows, r, 0)
        if i == 2:
            ref8 = ops.v_colmajor(ref8)
        g8, gd = got[i]
        if not r:
            assert torch.equal(gd, refd), i
            assert torch.equal(g8.view(torch.uint8), ref8.view(torch.uint8)), i
        else:
            assert torch.allclose(gd, refd, rtol=1e-6, atol=0), i
            diff = (g8.float() - ref8.float()).abs()
            assert (diff > 0).float().mean().item() < 1e-3, i
            assert (diff <= ref8.float().abs() * 0.125 + 2 ** -9).all(), i


@pytest.mark.parametrize("mma", ["0", "1", None])
def test_quantize_mma_switch_picks_the_kernel(mma, monkeypatch):
    """FLASHCUTE_FP8_QUANTIZE_MMA routes the FP8 mode's quantization to the kernels it names (the
    kMma template argument, read from the profiler's kernel names): "0" the butterflies, "1" and
    unset (the default) the tensor-core rotation. Without this, the both-ways tests above could
    be timing and testing one path twice."""
    from torch.profiler import ProfilerActivity, profile
    require_fp8(128)
    if not flashcute.build_info()["fp8_quantize"]:
        pytest.skip("no CUDA quantizer in this build")
    if mma is None:
        monkeypatch.delenv("FLASHCUTE_FP8_QUANTIZE_MMA", raising=False)
    else:
        monkeypatch.setenv("FLASHCUTE_FP8_QUANTIZE_MMA", mma)
    q, k, v = (_randn(1, 512, 2, 128, dtype=BF) for _ in range(3))
    flashcute.flash_attn_func(q, k, v, fp8=True)  # the CUDA quantizer's first call outside the trace
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        flashcute.flash_attn_func(q, k, v, fp8=True)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if "quantize_kernel" in e.name]
    assert names and all("block_quantize_kernel" in n for n in names), names  # the mode's block scales
    want = mma != "0"
    assert all(block_kernel_args(n)[1] == want for n in names), names


def block_kernel_args(name):
    """(In, kMma, kD) of a block_quantize_kernel<In, kMma, kD> name from the profiler, demangled
    ("...<flashcute::sm90::quant::Bf16, true, 128>(...") or not ("...kernelINS1_4Bf16ELb1ELi128EEEv...")."""
    if name.startswith("_Z"):
        args = name.split("block_quantize_kernelI", 1)[1]
        dtype, rest = args.split("E", 1)  # "NS1_4Bf16", "Lb1ELi128EEEv..."
        mma, rest = rest.split("E", 1)
        return dtype.split("_4")[-1], mma == "Lb1", int(rest.split("E", 1)[0].lstrip("Li") or 0)
    args = name.split("block_quantize_kernel<", 1)[1].split(">(", 1)[0].split(",")
    return args[0].split("::")[-1].strip(), args[1].strip() == "true", int(args[2]) if len(args) > 2 else 0


@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("one_d", ["0", None])
def test_quantize_one_head_dim_kernel(d, one_d, monkeypatch):
    """Where the FP8 mode's q, k, v share head dim 128 or 256 (bf16), the block quantizer runs its
    instantiation for that head dim unless FLASHCUTE_FP8_QUANTIZE_ONE_D=0 (the kD template argument,
    read from the profiler's kernel names), and both give the same bytes and descales."""
    from torch.profiler import ProfilerActivity, profile
    require_fp8(d)
    if not flashcute.build_info()["fp8_quantize"]:
        pytest.skip("no CUDA quantizer in this build")
    from flashcute import ops
    torch.manual_seed(d)
    q, k, v = (_randn(2, 1000, 3, d, dtype=BF) * 3 for _ in range(3))
    block = ops.vt_key_block(d, 1000)

    def run():
        return F.quantize_qkv(q, k, v, rotate=True, v_colmajor=True, block_keys=block)
    monkeypatch.setenv("FLASHCUTE_FP8_QUANTIZE_ONE_D", "0")
    ref = run()
    if one_d is None:
        monkeypatch.delenv("FLASHCUTE_FP8_QUANTIZE_ONE_D", raising=False)
    run()  # outside the trace: the first call sets the kernel's attributes
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        got = run()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if "block_quantize_kernel" in e.name]
    assert names, "no block quantizer kernel in the trace"
    assert all(block_kernel_args(n) == ("Bf16", True, 0 if one_d == "0" else d) for n in names), names
    for a, b in zip(got[:3], ref[:3]):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    for a, b in zip(got[3], ref[3]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("s", [1, 100, 4099])
def test_quantize_v_colmajor_cuda_equals_torch(d, s):
    """The CUDA quantizer writing V^T (x8_vt) = the torch path's v8 permuted by ops.v_colmajor,
    bitwise, padding zero included; its output buffers poisoned with e4m3 NaN (0x7f) first."""
    from flashcute import ops
    require_fp8(d)
    if not flashcute.build_info()["fp8_quantize"]:
        pytest.skip("no CUDA quantizer in this build")
    torch.manual_seed(s)
    v = _randn(2, s, 3, d, dtype=BF) * 4
    outs = [(torch.full(ops.vt_shape(v), 0x7F, dtype=torch.uint8, device=DEVICE).view(E4M3),
             torch.full((2, 3), math.nan, device=DEVICE))]
    v8t, vd = F._quantize_cuda([(v, False)], 3, 0, outs=outs, vt_last=True)[0]
    ref8, refd = F.quantize(v, 3, impl="torch")
    assert torch.equal(vd, refd)
    assert torch.equal(v8t.view(torch.uint8), ops.v_colmajor(ref8).view(torch.uint8))


def test_fp8_mode_paths_and_fallbacks(monkeypatch):
    """The FP8 mode's three dense paths: V^T with block-wise scales (the default), V^T with one
    scale per (batch, heads_k) (block_scales=False), the in-kernel transpose (v_colmajor=False):
    each passes the mode's accuracy rule; V^T is not taken for fp16 results or other head dims."""
    from flashcute import ops
    seen = []
    real = ops._launch
    monkeypatch.setattr(ops, "_launch", lambda *a, **kw: seen.append((a[-1], a[10] is not None and a[10].dim() == 3))
                        or real(*a, **kw))
    for d, dtype, expect in ((128, BF, True), (256, BF, True), (128, torch.float16, False), (64, BF, False)):
        require_fp8(d)
        torch.manual_seed(d)
        q, k, v = (_randn(2, 517, h, d, dtype=dtype) for h in (8, 2, 2))
        seen.clear()
        for cfg in (True, F.FP8Config(block_scales=False), F.FP8Config(v_colmajor=False)):
            mode_check(q, k, v, cfg, f"mode paths d={d} {dtype} {cfg}", causal=True)
        assert seen == [(expect, expect), (expect, False), (False, False)], (d, dtype, seen)
        sdpa = flashcute.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=True, enable_gqa=True, fp8=True)
        assert seen[-1] == (expect, expect) and sdpa.shape == (2, 8, 517, d)


def test_fp8_mode_block_scales_deterministic_100_runs():
    d = 128
    require_fp8(d)
    torch.manual_seed(4)
    q, k, v = (_randn(2, 1024, h, d, dtype=BF) for h in (16, 4, 4))
    first = flashcute.flash_attn_func(q, k, v, causal=True, fp8=True, return_lse=True)
    for _ in range(99):
        out, lse = flashcute.flash_attn_func(q, k, v, causal=True, fp8=True, return_lse=True)
        assert torch.equal(out, first[0]) and torch.equal(lse, first[1])


# ---- the FP8 mode -------------------------------------------------------------------------------
def mode_check(q, k, v, cfg, what, atol=1e-3, **kw):
    """The mode's output against float64 on the original inputs, 2x the emulated mode's error."""
    out, lse = flashcute.flash_attn_func(q, k, v, fp8=cfg, return_lse=True, **kw)
    assert out.dtype == q.dtype and out.shape == q.shape[:-1] + v.shape[-1:]
    ref, lref = attention_ref(q, k, v, **kw)
    c = F.resolve_config(cfg)
    block = F.mode_block_keys(q, k, v, c, F.v_colmajor_applies(q, k, v, c, "auto"))
    q8, k8, v8, (qd, kd, vd) = F.quantize_qkv(q, k, v, rotate=c.rotate, seed=c.seed, block_keys=block)
    emu, lemu = attention_fp8_emulated(q8, k8, v8, qd, kd, vd, out_dtype=q.dtype,
                                       p_offset_log2=KERNEL_P_OFFSET, descale_block_keys=block, **kw)
    err = (out.double() - ref).abs().max().item()
    err_emu = (emu.double() - ref).abs().max().item()
    assert err <= 2 * err_emu + atol, f"{what}: {err:.3e} > 2 * {err_emu:.3e} + {atol}"
    fin = torch.isfinite(lref)
    lerr = (lse.double() - lref)[fin].abs().max().item()
    lerr_emu = (lemu.double() - lref)[fin].abs().max().item()
    assert lerr <= 2 * lerr_emu + 1e-3, f"{what}: lse {lerr:.3e} > 2 * {lerr_emu:.3e}"
    return out


@pytest.mark.parametrize("d", [64, 128, 256, 192, 96])
@pytest.mark.parametrize("dtype", [BF, torch.float16])
@pytest.mark.parametrize("cfg", [True, F.FP8Config(rotate=False), F.FP8Config(seed=5)])
def test_fp8_mode_end_to_end(d, dtype, cfg):
    require_fp8(d)
    torch.manual_seed(d)
    q, k, v = _randn(2, 300, 8, d, dtype=dtype), _randn(2, 500, 2, d, dtype=dtype), _randn(2, 500, 2, d, dtype=dtype)
    mode_check(q, k, v, cfg, f"mode d={d} {dtype} {cfg}", causal=True)
    mode_check(q, k, v, cfg, f"mode d={d} {dtype} {cfg} softcap", softcap=20.0, window_size=(128, 0))


@pytest.mark.parametrize("cfg", [True, F.FP8Config(rotate=False)])
def test_fp8_mode_hdim_192_v128(cfg):
    """The FP8 mode at (192, 128): q and k rotated (Paley's H in the CUDA quantizer) at 192, v at
    128, one launch; out at 128."""
    require_fp8(192, 128)
    torch.manual_seed(192)
    q, k, v = _randn(2, 300, 8, 192, dtype=BF), _randn(2, 500, 2, 192, dtype=BF), _randn(2, 500, 2, 128, dtype=BF)
    mode_check(q, k, v, cfg, f"mode (192, 128) {cfg}", causal=True)
    mode_check(q, k, v, cfg, f"mode (192, 128) {cfg} window", window_size=(128, 0))


def test_fp8_mode_sdpa_and_varlen_paths():
    d = 128
    require_fp8(d)
    torch.manual_seed(0)
    q, k, v = _randn(2, 257, 8, d, dtype=BF), _randn(2, 257, 8, d, dtype=BF), _randn(2, 257, 8, d, dtype=BF)
    dense = flashcute.flash_attn_func(q, k, v, causal=True, fp8=True)
    sdpa = flashcute.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=True, fp8=True).transpose(1, 2)
    assert torch.equal(dense, sdpa)  # same quantized inputs, same kernel (equal lengths: same alignment)
    # varlen quantizes with torch ops, dense with the CUDA kernel: bitwise equal without rotation
    # (with it, fp32 sums in another order may flip a rare rounding), and with one scale per (batch,
    # head) on the in-kernel transpose (varlen has neither V^T nor block-wise scales)
    cfg = F.FP8Config(rotate=False, v_colmajor=False)
    dense = flashcute.flash_attn_func(q, k, v, causal=True, fp8=cfg)
    cu = torch.tensor([0, 257, 514], dtype=torch.int32, device=DEVICE)
    var = flashcute.flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu, cu, 257, 257,
                                           causal=True, fp8=cfg)
    assert torch.equal(var.view_as(dense), dense)  # per-sequence scales = per-batch scales


def test_fp8_mode_torch_compile_fullgraph():
    d = 128
    require_fp8(d)
    q, k, v = _randn(2, 333, 8, d, dtype=BF), _randn(2, 333, 2, d, dtype=BF), _randn(2, 333, 2, d, dtype=BF)

    def f(q, k, v):
        return flashcute.flash_attn_func(q, k, v, causal=True, fp8=flashcute.FP8Config(seed=2), return_lse=True)

    eager = f(q, k, v)
    compiled = torch.compile(f, fullgraph=True)(q, k, v)
    assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])


@pytest.mark.parametrize("d", [64, 96, 128, 192, 256])
@pytest.mark.parametrize("dtype", [BF, torch.float16])
@pytest.mark.parametrize("rotate", [False, True])
def test_quantize_triton_agrees_with_torch(request, d, dtype, rotate):
    # The scale arithmetic now matches torch's (agreement seen on the H200, run 16, where 16 of
    # these 20 cases passed); the rotation at d >= 192 still runs out of shared memory.
    if rotate and d >= 192:
        request.applymarker(pytest.mark.xfail(strict=False, reason="known defect: the Triton path's rotation "
                                              "exceeds shared memory at d >= 192 (impl='auto' never takes it)"))
    try:
        import flashcute._fp8_triton  # noqa: F401
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"triton not importable: {e}")
    torch.manual_seed(d)
    x = _randn(3, 1000, 8, d, dtype=dtype) * 3
    x.view(-1)[::1013] *= 50
    xs = x[:, :, :6]  # a strided view (6 of 8 heads)
    for t, hk in ((x, 2), (xs, 3), (x, 8)):
        a8, ad = F.quantize(t, hk, rotate=rotate, seed=1, impl="triton")
        b8, bd = F.quantize(t, hk, rotate=rotate, seed=1, impl="torch")
        torch.testing.assert_close(ad, bd, rtol=1e-6, atol=0)
        a, b = a8.float(), b8.float()
        if not rotate:
            assert torch.equal(a, b)
        else:
            # fp32 sums in another order may flip a rounding at an exact midpoint: rare, one step
            diff = a != b
            assert diff.float().mean() < 1e-4
            assert torch.all((a - b).abs()[diff] <= b.abs()[diff] * 2 ** -3 + 2 ** -9)


def test_fp8_outlier_rmse():
    """FlashAttention-3's outlier test: q, k, v ~ N(0, 1) + N(0, 100) * Bernoulli(0.001) (bf16),
    seqlen 4k, hdim 128; RMSE of the output against float64 on the unquantized inputs. The bar
    is FA3's published 9.1e-3 (block scaling + incoherent processing); asserted for the FP8 mode's
    best options (rotation on). Plain per-head FP8 (no rotation) is printed for information.
    Also asserted: the kernel is within 2 % of the exact emulation of the same e4m3 inputs (the
    error of e4m3 itself; 9.205e-3 on this data, so the bar fails by e4m3's rounding: RESULTS
    run 53)."""
    require_fp8(128)
    g = torch.Generator(device=DEVICE).manual_seed(0)
    shape = (2, 4096, 8, 128)

    def outliers():
        x = torch.randn(shape, generator=g, device=DEVICE)
        spike = torch.randn(shape, generator=g, device=DEVICE) * 10.0
        return (x + spike * (torch.rand(shape, generator=g, device=DEVICE) < 0.001)).to(BF)

    q, k, v = outliers(), outliers(), outliers()
    ref, _ = attention_ref(q, k, v)

    def rmse(o):
        return (o.double() - ref).pow(2).mean().sqrt().item()

    best = rmse(flashcute.flash_attn_func(q, k, v, fp8=True))
    plain = rmse(flashcute.flash_attn_func(q, k, v, fp8=F.FP8Config(rotate=False)))
    bf16 = rmse(flashcute.flash_attn_func(q, k, v))
    heads = rmse(flashcute.flash_attn_func(q, k, v, fp8=F.FP8Config(block_scales=False)))
    # The same quantized inputs through the exact emulation: the error e4m3 itself sets here.
    cfg = F.resolve_config(True)
    block = F.mode_block_keys(q, k, v, cfg, F.v_colmajor_applies(q, k, v, cfg, "auto"))
    q8, k8, v8, (qd, kd, vd) = F.quantize_qkv(q, k, v, block_keys=block)
    floor = rmse(attention_fp8_emulated(q8, k8, v8, qd, kd, vd, p_offset_log2=KERNEL_P_OFFSET,
                                        descale_block_keys=block)[0])
    print(f"\nFP8 outlier test RMSE: rotation+{'block' if block else 'per-head'} scales {best:.3e} (exact "
          f"emulation of the same e4m3 inputs {floor:.3e}), rotation+per-head {heads:.3e}, per-head "
          f"{plain:.3e}, bf16 kernel {bf16:.3e}")
    # The kernel adds no error of its own beyond e4m3's rounding (2 % covers rounding order).
    assert best <= 1.02 * floor, f"FP8 kernel RMSE {best:.3e} above its emulation's {floor:.3e}"
    assert best <= 9.1e-3, f"FP8 mode RMSE {best:.3e} above FA3's 9.1e-3 (per-head without rotation: {plain:.3e})"


@pytest.mark.parametrize("mi", range(len(MASKS)))
def test_fp8_kernel_long_keys_wide_tile(mi):
    # From 4096 keys the e4m3 d=128 kernel takes 192-key blocks (TileConfigFp8Long); 4100 keys
    # end in a partial block, and 1000 queries put the causal diagonal inside a block.
    d = 128
    require_fp8(d)
    qs, ks, vs = quantized(1, 1000, 4100, 4, 2, d, seed=40 + mi)
    check_fp8_kernel(qs, ks, vs, f"d={d} 1000x4100 {MASKS[mi]}", softcap=10.0 if mi == 2 else 0.0,
                     backend="sm90", **MASKS[mi])


@pytest.mark.parametrize("step_log2", [0.3, 0.7, 1.5, 6.0])
def test_fp8_kernel_row_max_rising_block_by_block(step_log2):
    """e4m3 P: the lazy rescaling keeps a stale row max only while it grows by at most 2^0.75, so
    that P (offset 2^8) stays below e4m3's 448. Scores rising by step_log2 per key block, in
    the kernel's order, take both paths (steps below and above the threshold)."""
    from test_gpu_fwd import ramp_qk
    d = 128
    require_fp8(d)
    torch.manual_seed(0)
    q, k = ramp_qk(2, 2048, 4, d, step_log2, BF, device=DEVICE)
    v = _randn(2, 2048, 4, d, dtype=BF)
    qs, ks, vs = (F.quantize(x, 4) for x in (q, k, v))
    for causal in (False, True):
        check_fp8_kernel(qs, ks, vs, f"e4m3 step {step_log2} causal {causal}", causal=causal, backend="sm90")
    # block-wise descales: the row max in log2 units with v's per-block bias (online_scaled)
    from flashcute import ops
    block = ops.vt_key_block(d, 2048)
    q8, k8, vt8, (qd, kd, vd) = F.quantize_qkv(q, k, v, rotate=False, v_colmajor=True, block_keys=block)
    _, _, v8, _ = F.quantize_qkv(q, k, v, rotate=False, impl="torch", block_keys=block)
    for causal in (False, True):
        check_fp8_kernel((q8, qd), (k8, kd), (v8, vd), f"blocks step {step_log2} causal {causal}", causal=causal,
                         block=block, vt=vt8)
