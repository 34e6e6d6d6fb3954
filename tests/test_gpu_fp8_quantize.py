"""GPU: the compiled FP8 quantization kernel (flashcute.fp8.quantize(..., impl="cuda"), the C ABI's
flashcute_fp8_quantize) against the torch path (fp8._quantize_torch), which defines the semantics.

Rules:
  - without rotation: e4m3 bytes and descales bitwise equal;
  - with rotation (the kernel's fp32 Walsh-Hadamard sums run in another order than torch's GEMM):
    descales within 1e-6 relative, e4m3 values equal except a fraction < 1e-3 that is at most
    one e4m3 step apart;
  - outputs poisoned first (x8 bytes 0x7f = e4m3 NaN, descale NaN), so an unwritten element fails;
  - every schedule of the kernel (FLASHCUTE_FP8_QUANTIZE_LAG: automatic, smallest lag, all amax
    items first, two launches) gives the same bytes.
Random inputs with outliers (never zeros), odd sizes, GQA, strided views, fp16 and bf16.
"""
import math

import pytest
import torch

from flashcute import _lib
from flashcute import fp8 as F

pytestmark = pytest.mark.gpu
BF, FP16 = torch.bfloat16, torch.float16
E4M3 = torch.float8_e4m3fn
POW2 = [64, 128, 256]
ALL_D = [64, 96, 128, 192, 256]
#: FLASHCUTE_FP8_QUANTIZE_LAG values: automatic, smallest safe lag (most waiting), every amax item
#: before every cast item (one launch), and two launches (no waiting).
SCHEDULES = [None, "0", "1000000000", "-1"]


def require_cuda_quantize(dtype=BF, d=128, rotate=False):
    s = _lib.fp8_quantize_supported(torch.cuda.current_device(), _lib.DTYPE_BF16 if dtype == BF else _lib.DTYPE_FP16,
                                    d, rotate)
    if not s:
        pytest.skip(f"no CUDA quantization here: {s.reason}")


@pytest.fixture
def schedule(monkeypatch):
    def set_(lag):
        if lag is None:
            monkeypatch.delenv("FLASHCUTE_FP8_QUANTIZE_LAG", raising=False)
        else:
            monkeypatch.setenv("FLASHCUTE_FP8_QUANTIZE_LAG", lag)
    return set_


def make_input(shape, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32) * 3
    x.view(-1)[:: 1013] *= 50  # outliers: most values land in e4m3's small binades and subnormals
    return x.to(dtype)


def poisoned(x, heads_k):
    x8 = torch.full(x.shape, 0x7F, dtype=torch.uint8, device=x.device).view(E4M3)
    ds = torch.full((x.shape[0], heads_k), math.nan, dtype=torch.float32, device=x.device)
    return x8, ds


def quantize_cuda(jobs, heads_k, seed=1):
    """The CUDA path into poisoned buffers: [(x, rotate)] -> [(x8, descale)]."""
    outs = [poisoned(x, heads_k) for x, _ in jobs]
    return F._quantize_cuda(jobs, heads_k, seed, outs=outs)


def ordinal(x8):
    """e4m3 code -> signed rank (+-0 -> 0): neighbouring e4m3 values differ by 1."""
    c = x8.view(torch.uint8).to(torch.int32)
    return torch.where(c >= 128, -(c - 128), c)


def check_against_torch(x, heads_k, rotate, x8, ds, what, seed=1):
    r8, rd = F._quantize_torch(x, heads_k, rotate, seed, None)
    assert x8.shape == r8.shape and ds.shape == rd.shape, what
    codes = x8.view(torch.uint8)
    assert not torch.any((codes & 0x7F) == 0x7F), f"{what}: NaN byte in x8 (an element not written?)"
    assert torch.isfinite(ds).all(), f"{what}: descale not written"
    if not rotate:
        assert torch.equal(ds.view(torch.int32), rd.view(torch.int32)), f"{what}: descales differ"
        bad = (codes != r8.view(torch.uint8)).sum().item()
        assert bad == 0, f"{what}: {bad} e4m3 bytes differ from the torch path"
        return
    torch.testing.assert_close(ds, rd, rtol=1e-6, atol=0, msg=lambda m: f"{what}: descale {m}")
    diff = (ordinal(x8) - ordinal(r8)).abs()
    frac = (diff > 0).float().mean().item()
    assert diff.max().item() <= 1, f"{what}: e4m3 values more than one step apart (max {diff.max().item()})"
    assert frac < 1e-3, f"{what}: {frac:.2e} of the e4m3 values differ (one step) from the torch path"


CASES = [  # (batch, seqlen, heads, heads_k)
    (2, 300, 8, 2),    # GQA 4
    (3, 113, 8, 8),    # MHA, odd seqlen
    (1, 799, 6, 1),    # MQA
    (2, 1, 4, 2),      # one row
    (1, 2048, 4, 4),   # many items per slot
]


@pytest.mark.parametrize("d", ALL_D)
@pytest.mark.parametrize("dtype", [BF, FP16])
@pytest.mark.parametrize("rotate", [False, True])
@pytest.mark.parametrize("mma", ["0", "1"])
def test_cuda_quantize_matches_torch(d, dtype, rotate, mma, monkeypatch):
    """The per-(batch, kv head) CUDA quantizer against the torch path; the rotation both ways:
    butterflies, and at d 128 / 256 on the tensor cores (FLASHCUTE_FP8_QUANTIZE_MMA=1); at d 96 /
    192 Paley's factor on the tensor cores either way."""
    if mma == "1" and not (rotate and d in (128, 256)):
        pytest.skip("the switch changes only the rotation at d 128 / 256")
    monkeypatch.setenv("FLASHCUTE_FP8_QUANTIZE_MMA", mma)
    require_cuda_quantize(dtype, d, rotate)
    for i, (b, s, h, hk) in enumerate(CASES):
        x = make_input((b, s, h, d), dtype, seed=d + i)
        (x8, ds), = quantize_cuda([(x, rotate)], hk)
        check_against_torch(x, hk, rotate, x8, ds, f"d={d} {dtype} rotate={rotate} shape={(b, s, h, d)} hk={hk}")


@pytest.mark.parametrize("d", POW2 + [96])
@pytest.mark.parametrize("rotate", [False, True])
def test_cuda_quantize_strided_views(d, rotate):
    require_cuda_quantize(BF, d, rotate)
    base = make_input((3, 203, 8, d), BF, seed=5)
    longer = make_input((2, 220, 8, d), BF, seed=7)
    packed = make_input((2, 150, 3, 10, d), BF, seed=6)  # (b, s, {q,k,v}, h, d)
    views = [
        (base[:, :, :6], 3),                  # 6 of 8 heads (head stride d, row stride 8 d)
        (base[:, 7:150:3], 4),                # every third row
        (longer[:, :203], 8),                 # a batch stride that is not s * h * d
        (packed[:, :, 1], 5),                 # k of a packed qkv tensor
        (base.transpose(1, 2).contiguous().transpose(1, 2), 2),  # SDPA (b, h, s, d) storage
    ]
    for i, (x, hk) in enumerate(views):
        assert not x.is_contiguous()
        (x8, ds), = quantize_cuda([(x, rotate)], hk)
        check_against_torch(x, hk, rotate, x8, ds, f"view {i} d={d} rotate={rotate} strides={x.stride()}")


@pytest.mark.parametrize("lag", SCHEDULES)
@pytest.mark.parametrize("dtype", [BF, FP16])
def test_cuda_quantize_schedules_agree(lag, dtype, schedule):
    """q, k (rotated) and v of different head dims in one launch, under every schedule; also a
    big case (thousands of items, many slots in flight) and a repeat for determinism."""
    require_cuda_quantize(dtype, 128, True)
    q = make_input((2, 1000, 16, 128), dtype, seed=11)
    k = make_input((2, 1000, 4, 128), dtype, seed=12)
    v = make_input((2, 1000, 4, 64), dtype, seed=13)
    big = make_input((2, 4096, 16, 128), dtype, seed=14)
    schedule(None)
    want = quantize_cuda([(q, True), (k, True), (v, False)], 4) + quantize_cuda([(big, True)], 16)
    schedule(lag)
    for rep in range(2):
        got = quantize_cuda([(q, True), (k, True), (v, False)], 4) + quantize_cuda([(big, True)], 16)
        for (a8, ad), (b8, bd), name in zip(got, want, ("q", "k", "v", "big")):
            assert torch.equal(a8.view(torch.uint8), b8.view(torch.uint8)), f"lag={lag} rep={rep} {name}: x8 differs"
            assert torch.equal(ad.view(torch.int32), bd.view(torch.int32)), f"lag={lag} rep={rep} {name}: descale"
    for (x8, ds), x, hk, rot, name in zip(got, (q, k, v, big), (4, 4, 4, 16), (True, True, False, True),
                                          ("q", "k", "v", "big")):
        check_against_torch(x, hk, rot, x8, ds, f"lag={lag} {dtype} {name}")


def test_cuda_quantize_empty_and_zero_slots():
    require_cuda_quantize(BF, 128, True)
    for rotate in (False, True):
        x = torch.empty(3, 0, 4, 128, dtype=BF, device="cuda")  # no rows: descale = norm, nothing else
        (x8, ds), = quantize_cuda([(x, rotate)], 2)
        r8, rd = F._quantize_torch(x, 2, rotate, 1, None)
        assert x8.shape == r8.shape and torch.equal(ds.view(torch.int32), rd.view(torch.int32))
        x = torch.empty(0, 5, 4, 128, dtype=BF, device="cuda")  # no batch
        (x8, ds), = quantize_cuda([(x, rotate)], 2)
        assert x8.shape == (0, 5, 4, 128) and ds.shape == (0, 2)
        x = make_input((2, 77, 4, 128), BF, seed=3)
        x[1, :, 2:] = 0  # an all-zero slot: scale 1, descale norm, zeros out
        (x8, ds), = quantize_cuda([(x, rotate)], 2)
        check_against_torch(x, 2, rotate, x8, ds, f"zero slot rotate={rotate}")
        assert torch.all(x8[1, :, 2:].float() == 0)


def test_cuda_quantize_public_api_and_qkv():
    """quantize(impl="cuda"/"auto") and quantize_qkv: the CUDA path, equal to three single calls."""
    require_cuda_quantize(BF, 128, True)
    q, k, v = make_input((2, 333, 8, 128), BF, 21), make_input((2, 333, 2, 128), BF, 22), \
        make_input((2, 333, 2, 128), BF, 23)
    q8, k8, v8, (qd, kd, vd) = F.quantize_qkv(q, k, v, rotate=True, seed=4, impl="cuda")
    for x, x8, xd, rot in ((q, q8, qd, True), (k, k8, kd, True), (v, v8, vd, False)):
        a8, ad = F.quantize(x, 2, rotate=rot, seed=4, impl="cuda")
        b8, bd = F.quantize(x, 2, rotate=rot, seed=4)  # auto
        assert torch.equal(a8.view(torch.uint8), x8.view(torch.uint8)) and torch.equal(ad, xd)
        assert torch.equal(b8.view(torch.uint8), x8.view(torch.uint8)) and torch.equal(bd, xd)
        check_against_torch(x, 2, rot, x8, xd, "quantize_qkv", seed=4)
    # layout "bhsd": a transposed view in, the same values out
    t8, td = F.quantize(q.transpose(1, 2).contiguous(), 2, rotate=True, seed=4, layout="bhsd", impl="cuda")
    assert torch.equal(t8.transpose(1, 2).view(torch.uint8), q8.view(torch.uint8)) and torch.equal(td, qd)


@pytest.mark.parametrize("d", [96, 192])
def test_rotation_96_192_in_the_kernel(d, monkeypatch):
    """Paley's rotation (head dims 96 and 192) runs in the CUDA kernel: auto picks it, it agrees
    with the torch path (one e4m3 step, rarely), q, k and v go in one launch (the (192, 128)
    shape too), whatever FLASHCUTE_FP8_QUANTIZE_MMA says; block-wise scales with the rotation
    stay on the torch path there (impl="cuda" says why)."""
    require_cuda_quantize(BF, d, True)
    x = make_input((2, 100, 4, d), BF, seed=d)
    assert F._use_cuda(x, None, True, "auto")
    for mma in ("0", "1"):
        monkeypatch.setenv("FLASHCUTE_FP8_QUANTIZE_MMA", mma)
        a8, ad = F.quantize(x, 2, rotate=True, seed=1, impl="cuda")
        check_against_torch(x, 2, True, a8, ad, f"d={d} MMA={mma} through F.quantize")
    v = make_input((2, 100, 4, 128 if d == 192 else d), BF, seed=d + 1)
    q8, k8, v8, (qd, kd, vd) = F.quantize_qkv(x, x, v, rotate=True, seed=1, impl="cuda")
    check_against_torch(x, 4, True, q8, qd, f"d={d} q of quantize_qkv")
    check_against_torch(v, 4, False, v8, vd, f"d={d} v of quantize_qkv")
    with pytest.raises(ValueError, match="block-wise scales with the rotation"):
        F.quantize_qkv(x, x, x, rotate=True, seed=1, impl="cuda", block_keys=32)
    b = F.quantize_qkv(x, x, x, rotate=True, seed=1, block_keys=32)  # auto: torch's blocks
    t = F.quantize_qkv(x, x, x, rotate=True, seed=1, block_keys=32, impl="torch")
    assert all(torch.equal(u.view(torch.uint8) if u.dtype == E4M3 else u, w.view(torch.uint8) if w.dtype == E4M3 else w)
               for u, w in zip(b[:3] + b[3], t[:3] + t[3]))


def test_cuda_quantize_cuda_graph():
    require_cuda_quantize(BF, 128, True)
    x = make_input((2, 500, 8, 128), BF, seed=31)
    F.quantize(x, 2, rotate=True, impl="cuda")  # warm-up outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        x8, ds = F.quantize(x, 2, rotate=True, impl="cuda")
    x.copy_(make_input((2, 500, 8, 128), BF, seed=32))
    g.replay()
    torch.cuda.synchronize()
    check_against_torch(x, 2, True, x8, ds, "graph replay", seed=0)


def test_cuda_quantize_large_head_group():
    """An item is whole rows of all of its slot's heads, at least one: with 40 q heads per k/v
    head at d=256 a row is 320 units of 32 elements (20 KB of x), so every item is one row, short
    of the 512 units an item aims at and not a multiple of the CTA's 256 threads. The bytes are
    the torch path's."""
    require_cuda_quantize(BF, 256, False)
    x = make_input((2, 70, 40, 256), BF, seed=61)
    (x8, ds), = quantize_cuda([(x, False)], 1)
    check_against_torch(x, 1, False, x8, ds, "group 40 at d=256")


# ---- varlen (packed rows, cu_seqlens: flashcute_fp8_quantize_args.row_bounds) ---------------------
VARLEN_CASES = [  # (sequence lengths, rows before cu[0], rows after cu[batch], heads, heads_k)
    ([300, 1, 77, 2048], 0, 0, 8, 2),     # skewed lengths, GQA 4, a one-row sequence
    ([0, 129, 0, 64], 0, 0, 4, 4),        # empty sequences
    ([100, 250], 5, 0, 6, 1),             # cu[0] > 0: rows before it belong to sequence 0 (torch path)
    ([40, 500, 7], 0, 33, 4, 2),          # rows past cu[batch]: the torch path's spare scale
    ([], 0, 10, 2, 2),                    # no sequences, only spare rows
    ([4096], 0, 0, 16, 16),               # one long sequence: many items in one slot
]


def varlen_input(lens, pre, post, h, d, dtype, seed):
    cu = torch.tensor([pre] + [pre + sum(lens[:i + 1]) for i in range(len(lens))], dtype=torch.int32,
                      device="cuda")
    total = pre + sum(lens) + post
    return make_input((total, h, d), dtype, seed), cu


@pytest.mark.parametrize("d", ALL_D)
@pytest.mark.parametrize("rotate", [False, True])
@pytest.mark.parametrize("lag", [None, "0", "-1"])
def test_cuda_quantize_varlen_matches_torch(d, rotate, lag, schedule):
    """The CUDA path on packed varlen rows (one scale per (sequence, kv head)) against the torch
    path, the semantics: every row written (poisoned first), spare-scale rows included; under the
    automatic lag (from the slots' real item counts, plan_kernel), the smallest one (most
    waiting) and two launches."""
    if lag is not None and d not in (64, 128):
        pytest.skip("the schedules at two head dims suffice")
    require_cuda_quantize(BF, d, rotate)
    schedule(lag)
    for i, (lens, pre, post, h, hk) in enumerate(VARLEN_CASES):
        x, cu = varlen_input(lens, pre, post, h, d, BF, seed=100 + i + d)
        batch = cu.shape[0] - 1
        outs = [(torch.full(x.shape, 0x7F, dtype=torch.uint8, device="cuda").view(E4M3),
                 torch.full((batch + 1, hk), math.nan, dtype=torch.float32, device="cuda"))]
        (x8, ds), = F._quantize_cuda([(x, rotate, cu)], hk, 1, outs=outs)
        what = f"varlen d={d} rotate={rotate} lens={lens} pre={pre} post={post} h={h}/{hk}"
        assert ds.shape == (batch, hk), what
        r8, rd = F._quantize_torch(x, hk, rotate, 1, cu)
        codes = x8.view(torch.uint8)
        assert not torch.any((codes & 0x7F) == 0x7F), f"{what}: NaN byte in x8 (a row not written?)"
        assert torch.isfinite(outs[0][1]).all(), f"{what}: a descale (spare slot included) not written"
        if not rotate:
            assert torch.equal(ds.view(torch.int32), rd.view(torch.int32)), f"{what}: descales differ"
            assert torch.equal(codes, r8.view(torch.uint8)), f"{what}: e4m3 bytes differ from the torch path"
        else:
            torch.testing.assert_close(ds, rd, rtol=1e-6, atol=0, msg=lambda m: f"{what}: descale {m}")
            diff = (ordinal(x8) - ordinal(r8)).abs()
            assert diff.max().item() <= 1 and (diff > 0).float().mean().item() < 1e-3, what


def test_decreasing_row_bounds_neither_hang_nor_write():
    """C ABI row_bounds that decrease somewhere (invalid; Python's _row_bounds never makes them)
    would give the schedule more items than the host sized it for, and a cast item would wait for
    amax items never handed out. plan_kernel catches it: the tensor's items do nothing, so its
    outputs stay as they were (poisoned here), the call returns, and the device stays usable. A
    valid tensor in the same launch is still quantized."""
    require_cuda_quantize(BF, 128, False)
    x = make_input((249, 2, 128), BF, seed=71)
    bad = torch.tensor([0, 167, 110, 30, 249], dtype=torch.int32, device="cuda")  # batch 3 + spare
    good_x, good_cu = varlen_input([100, 149], 0, 0, 2, 128, BF, seed=72)
    outs = []
    for xx, nb in ((x, 4), (good_x, 3)):
        outs.append((torch.full(xx.shape, 0x7F, dtype=torch.uint8, device="cuda").view(E4M3),
                     torch.full((nb, 1), math.nan, dtype=torch.float32, device="cuda")))
    keep = []
    args = [F._varlen_args(x, bad, *outs[0], False, 1, 1, keep),
            F._varlen_args(good_x, F._row_bounds(good_cu, good_x.shape[0]), *outs[1], False, 1, 1, keep)]

    def workspace(nbytes):
        w = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        keep.append(w)
        return w.data_ptr(), w

    _lib.fp8_quantize_with_workspace(args, workspace, torch.cuda.current_device(),
                                     torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert bool((outs[0][0].view(torch.uint8) == 0x7F).all()) and bool(outs[0][1].isnan().all()), \
        "a tensor with decreasing row_bounds was (partly) written"
    r8, rd = F._quantize_torch(good_x, 1, False, 1, good_cu)
    assert torch.equal(outs[1][0].view(torch.uint8), r8.view(torch.uint8))
    assert torch.equal(outs[1][1][:-1].view(torch.int32), rd.view(torch.int32))
    torch.zeros(1, device="cuda").add_(1).item()  # the context is still usable


def test_cuda_quantize_qkv_varlen_one_launch():
    """quantize_qkv(..., impl="cuda") with cu_seqlens_q != cu_seqlens_k (q, k rotated, v not):
    the three tensors in one launch equal three torch-path quantizations."""
    require_cuda_quantize(BF, 128, True)
    q, cu_q = varlen_input([100, 3, 700], 0, 0, 8, 128, BF, seed=7)
    k, cu_k = varlen_input([900, 64, 1], 0, 0, 2, 128, BF, seed=8)
    v = make_input(k.shape, BF, seed=9)
    q8, k8, v8, (qd, kd, vd) = F.quantize_qkv(q, k, v, rotate=True, seed=3, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                              impl="cuda")
    for x, x8, xd, cu, rot, name in ((q, q8, qd, cu_q, True, "q"), (k, k8, kd, cu_k, True, "k"),
                                     (v, v8, vd, cu_k, False, "v")):
        r8, rd = F._quantize_torch(x, 2, rot, 3, cu)
        assert xd.shape == rd.shape, name
        if rot:
            torch.testing.assert_close(xd, rd, rtol=1e-6, atol=0)
            assert (ordinal(x8) - ordinal(r8)).abs().max().item() <= 1, name
        else:
            assert torch.equal(x8.view(torch.uint8), r8.view(torch.uint8)) and torch.equal(xd, rd), name
