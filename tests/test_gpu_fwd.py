"""GPU: forward correctness against flashcute.reference.attention_ref (float64), with FA3's
tolerance rule and NaN-poisoned output buffers (through the internal ops._fwd_into).

The matrix dtype x compiled (hdim, hdim_v) x seqlen pair (9) is complete; causal / window /
softcap / GQA ratio / batch are rotated over it pairwise (each value meets every seqlen pair and
every head dim), instead of the full Cartesian product. Per backend that is 2 x H x 9 cases (H =
compiled head-dim pairs: 90 for the default 5 head dims, plus 6 for (192, 128)), plus a full
mask x softcap sweep at two small shapes per head dim (16 x H), plus public-path cases.
"""
import itertools
import math

import pytest
import torch

import flashcute
from _gpu_util import _fwd_into, check_close, nan_buffers, randn, require, shapes_for

pytestmark = pytest.mark.gpu

SEQ_PAIRS = [(1, 1), (1, 239), (3, 799), (113, 203), (127, 127), (239, 1), (799, 3), (1024, 1024), (2048, 333)]
MASKS = [dict(causal=False, window_size=(-1, -1)), dict(causal=True, window_size=(-1, -1)),
         dict(causal=False, window_size=(64, 32)), dict(causal=True, window_size=(100, -1)),
         dict(causal=False, window_size=(0, 0)), dict(causal=False, window_size=(-1, 7))]
SOFTCAPS = [0.0, 15.0]
HEADS_Q = 16
RATIOS = [1, 2, 8, HEADS_Q]
BATCHES = [1, 9]
DTYPES = [torch.bfloat16, torch.float16]
ALL_SHAPES = sorted({s for b in ("sm80", "sm90") for s in shapes_for(b)})


def matrix():
    cases = []
    for (di, dtype), (hi, (d, dv)), (si, (sq, sk)) in itertools.product(
            enumerate(DTYPES), enumerate(ALL_SHAPES), enumerate(SEQ_PAIRS)):
        n = si + 3 * hi + 5 * di
        batch = BATCHES[n % 2]
        if batch == 9 and sq * sk > 300_000:
            batch = 2  # keeps the float64 reference of the largest pairs quick
        cases.append(pytest.param(dtype, d, dv, sq, sk, MASKS[n % len(MASKS)], SOFTCAPS[(n // 2) % 2],
                                  RATIOS[(n + hi) % len(RATIOS)], batch,
                                  id=f"{str(dtype)[6:]}-d{d}x{dv}-{sq}x{sk}-m{n % len(MASKS)}"))
    return cases


def run_case(backend, dtype, d, dv, sq, sk, mask, softcap, ratio, batch, seed=0):
    require(backend, dtype, d, dv)
    torch.manual_seed(seed)
    hk = HEADS_Q // ratio
    q = randn(batch, sq, HEADS_Q, d, dtype=dtype)
    k = randn(batch, sk, hk, d, dtype=dtype)
    v = randn(batch, sk, hk, dv, dtype=dtype)
    out, lse = nan_buffers(q, v, varlen=False)
    _fwd_into(q, k, v, out, lse, causal=mask["causal"], window_size=mask["window_size"], softcap=softcap,
              backend=backend)
    check_close(out, lse, q, k, v, what=f"{backend} {dtype} d={d} dv={dv} {sq}x{sk} {mask} cap={softcap} "
                f"ratio={ratio} b={batch}", causal=mask["causal"], window_size=mask["window_size"],
                softcap=softcap)


@pytest.mark.parametrize("dtype,d,dv,sq,sk,mask,softcap,ratio,batch", matrix())
def test_fwd_matrix(backend, dtype, d, dv, sq, sk, mask, softcap, ratio, batch):
    run_case(backend, dtype, d, dv, sq, sk, mask, softcap, ratio, batch)


@pytest.mark.parametrize("d,dv", ALL_SHAPES)
@pytest.mark.parametrize("mi", range(len(MASKS)))
@pytest.mark.parametrize("softcap", SOFTCAPS)
@pytest.mark.parametrize("sq,sk", [(77, 190), (190, 77)])
def test_fwd_mask_sweep(backend, d, dv, mi, softcap, sq, sk):
    run_case(backend, torch.bfloat16, d, dv, sq, sk, MASKS[mi], softcap, 2, 3, seed=mi)


@pytest.mark.parametrize("d,dv", ALL_SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_public_path(backend, d, dv, causal):
    require(backend, torch.bfloat16, d, dv)
    q, k, v = randn(2, 300, 8, d, dtype=torch.bfloat16), randn(2, 200, 2, d, dtype=torch.bfloat16), \
        randn(2, 200, 2, dv, dtype=torch.bfloat16)
    out, lse = flashcute.flash_attn_func(q, k, v, causal=causal, return_lse=True, backend=backend)
    assert out.shape == (2, 300, 8, dv) and out.dtype == torch.bfloat16 and lse.shape == (2, 8, 300)
    check_close(out, lse, q, k, v, causal=causal)
    assert torch.equal(flashcute.flash_attn_func(q, k, v, causal=causal, backend=backend), out)


def test_softmax_scale_passed(backend):
    d = ALL_SHAPES[0][0]
    require(backend, torch.float16, d, d)
    q, k, v = (randn(1, 64, 4, d, dtype=torch.float16) for _ in range(3))
    out, lse = flashcute.flash_attn_func(q, k, v, softmax_scale=0.05, return_lse=True, backend=backend)
    check_close(out, lse, q, k, v, softmax_scale=0.05)


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("mi", [0, 1, 3])
def test_many_tiles(backend, d, mi):
    # 8 query blocks x 16 heads x 5 batches = 640 tiles of 128 rows: the persistent sm90 grid
    # (one CTA per SM) walks ~5 rounds, and under causal/window the rounds snake; every tile must
    # be computed exactly once (a skipped tile stays NaN, a doubled one races).
    run_case(backend, torch.bfloat16, d, d, 1000, 1000, MASKS[mi], 0.0, 4, 5, seed=d + mi)


@pytest.mark.parametrize("d", [64, 128])
def test_many_tiles_partial_section(backend, d):
    # Causal order in L2 sections (sm90 tile_scheduler.cuh): seqlen 1700 gives 14 query blocks,
    # so 9 heads per section and a grid cut to 126 CTAs; 80 (batch, head)s leave a last section of
    # 8 heads, shorter than a round. Every tile exactly once, as above.
    run_case(backend, torch.bfloat16, d, d, 1700, 1700, MASKS[1], 0.0, 4, 5, seed=d)


def ramp_qk(b, s, h, d, step_log2, dtype, device="cuda"):
    """q, k whose scores rise by step_log2 (log2 units, after the softmax scale) from one 128-key
    block to the next in the order the kernels visit them (the last block first): key 0 scores
    highest. Small random parts keep the rows distinct."""
    scale_log2 = math.log2(math.e) / math.sqrt(d)
    q = torch.randn(b, s, h, d, device=device) * 0.1
    k = torch.randn(b, s, h, d, device=device) * 0.1
    ramp = (s - 1 - torch.arange(s, device=device, dtype=torch.float32)) / 128.0
    q[..., 0] = 1.0
    k[..., 0] = ramp[None, :, None] * (step_log2 / scale_log2)
    return q.to(dtype), k.to(dtype)


@pytest.mark.parametrize("step_log2", [0.3, 2.0, 7.5, 12.0])
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_max_rising_block_by_block(backend, step_log2, dtype):
    """The sm90 kernel rescales O lazily: while a row max grows by less than 2^8 it keeps the
    stale max (P up to 2^8), beyond that it moves it. A max that rises with every key block
    exercises both paths (steps below and above the threshold); output and LSE must match the
    reference as for any input."""
    d = 128
    require(backend, dtype, d, d)
    torch.manual_seed(0)
    q, k = ramp_qk(2, 2048, 4, d, step_log2, dtype)
    v = randn(2, 2048, 4, d, dtype=dtype)
    for causal in (False, True):
        out, lse = nan_buffers(q, v, varlen=False)
        _fwd_into(q, k, v, out, lse, causal=causal, backend=backend)
        check_close(out, lse, q, k, v, what=f"{backend} {dtype} step {step_log2} causal {causal}", causal=causal)
