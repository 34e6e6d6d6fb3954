"""Triton kernels of flashcute.fp8.quantize for dense CUDA bf16/fp16 tensors (imported lazily;
importing this module fails without Triton, and fp8.py then uses its torch path).

Two passes over x (batch, seqlen, heads, d), any strides with a contiguous last dimension:
  amax_pass: per tile of rows of one (batch, head): running max |x| over the program's rows
             (with the rotation: max row sum(x^2), and the bound sqrt(d * that) on max |x @ M|,
             fp8._row_amax's rule: no dot), one atomic_max into amax[batch, head // group]
             (max is order-free: deterministic).
  cast_pass: the same y, times 448 / amax[batch, head // group], saturated to +-448, rounded
             to nearest even into float8_e4m3fn, stored contiguous; also writes the descales
             (no separate torch ops: the mode's host overhead is a few launches per tensor).
Recomputing y in pass 2 costs a second read of x but no write + read of a rotated copy: per
64 MB bf16 tensor about 64 + 64 + 32 MB of HBM traffic, and the d x d dot is ~2 d flops per
element (well under the memory time on Hopper). M (d x d, at most 128 KB in bf16) is re-read by
every program from L2; each program covers STEPS * BLOCK_S rows to amortise it.
"""
from __future__ import annotations

import triton
import triton.language as tl

BLOCK_S = 64   # rows per dot (a tensor-core friendly M dimension)
STEPS = 4      # row tiles per program: 256 rows, one atomic and one M load per program
NUM_WARPS = 4


@triton.jit
def _load_tile(x_ptr, base, rows, cols, S, D, sxs):
    """Tile (BLOCK_S, BLOCK_D) of x in its dtype at rows of one (batch, head); padding = 0."""
    ok = (rows[:, None] < S) & (cols[None, :] < D)
    return tl.load(x_ptr + base + rows[:, None].to(tl.int64) * sxs + cols[None, :], mask=ok, other=0.0), ok


@triton.jit
def _load_rotated(x_ptr, m, base, rows, cols, S, D, sxs, ROTATE: tl.constexpr):
    """fp32 tile (BLOCK_S, BLOCK_D) of x (or x @ m) at rows of one (batch, head); padding = 0."""
    x, ok = _load_tile(x_ptr, base, rows, cols, S, D, sxs)
    if ROTATE:
        y = tl.dot(x, m, out_dtype=tl.float32)
    else:
        y = x.to(tl.float32)
    return y, ok


@triton.jit
def _load_m(m_ptr, cols, D, ROTATE: tl.constexpr):
    """The (BLOCK_D, BLOCK_D) rotation tile; without ROTATE a fully masked load (never read):
    one return type for both cases (triton 3.6 rejects a tensor and an int from one function)."""
    mm = (cols[:, None] < D) & (cols[None, :] < D) & ROTATE
    return tl.load(m_ptr + cols[:, None] * D + cols[None, :], mask=mm, other=0.0)


@triton.jit
def _amax_kernel(x_ptr, amax_ptr, S, H, G, HK, D, sxb, sxs, sxh,
                 BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, STEPS: tl.constexpr, ROTATE: tl.constexpr):
    pid_s = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    cols = tl.arange(0, BLOCK_D)
    base = b.to(tl.int64) * sxb + h.to(tl.int64) * sxh
    acc = tl.zeros((BLOCK_S,), dtype=tl.float32)
    for i in range(STEPS):
        rows = (pid_s * STEPS + i) * BLOCK_S + tl.arange(0, BLOCK_S)
        x, _ = _load_tile(x_ptr, base, rows, cols, S, D, sxs)  # padding 0: neutral for both
        x = x.to(tl.float32)
        if ROTATE:  # fp64 sum, rounded to fp32 (fp8._row_amax)
            x64 = x.to(tl.float64)
            acc = tl.maximum(acc, tl.sum(x64 * x64, axis=1).to(tl.float32))
        else:
            acc = tl.maximum(acc, tl.max(tl.abs(x), axis=1))
    slot_max = tl.max(acc, axis=0)
    if ROTATE:
        slot_max = tl.math.sqrt_rn(slot_max * D)
    tl.atomic_max(amax_ptr + b * HK + h // G, slot_max)


@triton.jit
def _cast_kernel(x_ptr, m_ptr, amax_ptr, descale_ptr, out_ptr, norm_over_max, S, H, G, HK, D, sxb, sxs, sxh,
                 sob, sos, soh, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, STEPS: tl.constexpr,
                 ROTATE: tl.constexpr):
    pid_s = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    cols = tl.arange(0, BLOCK_D)
    m = _load_m(m_ptr, cols, D, ROTATE)
    base = b.to(tl.int64) * sxb + h.to(tl.int64) * sxh
    obase = b.to(tl.int64) * sob + h.to(tl.int64) * soh
    # scale and descale from the slot's amax, with the torch path's exact fp32 arithmetic: torch
    # evaluates 448 / t as t.reciprocal() * 448 (Tensor.__rtruediv__), which differs from a
    # correctly rounded 448 / t in the last bit for about a quarter of all t; an all-zero slot
    # gets scale 1.
    amax = tl.load(amax_ptr + b * HK + h // G)
    safe = tl.where(amax > 0, amax, 448.0)
    scale = tl.math.div_rn(1.0, safe) * 448.0
    if (pid_s == 0) & (h % G == 0):
        tl.store(descale_ptr + b * HK + h // G, safe * norm_over_max)
    for i in range(STEPS):
        rows = (pid_s * STEPS + i) * BLOCK_S + tl.arange(0, BLOCK_S)
        y, ok = _load_rotated(x_ptr, m, base, rows, cols, S, D, sxs, ROTATE)
        y = tl.minimum(tl.maximum(y * scale, -448.0), 448.0)
        tl.store(out_ptr + obase + rows[:, None].to(tl.int64) * sos + cols[None, :],
                 y.to(tl.float8e4nv, fp_downcast_rounding="rtne"), mask=ok)


def _geometry(x, heads_k):
    b, s, h, d = x.shape
    block_d = max(16, triton.next_power_of_2(d))
    grid = (triton.cdiv(s, BLOCK_S * STEPS), b * h)
    return (s, h, h // heads_k, heads_k, d), block_d, grid


def _last_dim_contiguous(x):
    return x if x.stride(-1) == 1 else x.contiguous()


def amax_pass(x, amax, heads_k, rotate):
    """amax (batch, heads_k) float32, zero-filled, receives max |x| per slot, or with rotate the
    bound sqrt(d * max row sum(x^2)) on the rotated values (fp8._row_amax's rule)."""
    x = _last_dim_contiguous(x)
    dims, block_d, grid = _geometry(x, heads_k)
    _amax_kernel[grid](x, amax, *dims, x.stride(0), x.stride(1), x.stride(2),
                       BLOCK_S=BLOCK_S, BLOCK_D=block_d, STEPS=STEPS, ROTATE=rotate,
                       num_warps=NUM_WARPS)


def cast_pass(x, m, amax, norm, descale, out, heads_k):
    """out (float8_e4m3fn, x's shape) = sat(x @ m * 448 / amax[b, h // group]) rounded to nearest
    even; descale (batch, heads_k) float32 = amax * norm / 448 (fp8._descale_and_scale's rule)."""
    x = _last_dim_contiguous(x)
    dims, block_d, grid = _geometry(x, heads_k)
    _cast_kernel[grid](x, x if m is None else m, amax, descale, out, norm / 448.0, *dims,
                       x.stride(0), x.stride(1), x.stride(2),
                       out.stride(0), out.stride(1), out.stride(2),
                       BLOCK_S=BLOCK_S, BLOCK_D=block_d, STEPS=STEPS, ROTATE=m is not None,
                       num_warps=NUM_WARPS)
