"""FP8 (e4m3) helpers: per-(batch, head) quantization and a random Hadamard rotation.

The FP8 kernel (like FlashAttention-3's) reads float8_e4m3fn q, k, v and one float32 descale
factor per (batch, heads_k) and tensor. These helpers make such inputs from bf16/fp16 tensors,
and `flashcute.flash_attn_func(..., fp8=True)` uses them (see FP8Config).

    x8, descale = quantize(x, heads_k=None, rotate=False, seed=0)
    y = hadamard(x, seed=0)                   # x @ R, R orthogonal (d, d)
    R = hadamard_matrix(d, seed=0)            # the matrix itself

Scales: quantize() gives one per (batch, head_k), FA3's descale convention, which every FP8
kernel takes (the kernel applies it to the whole S = q k^T tile and to O); for GQA the q heads
of one group share k's descale slot, so q's scale is the amax over the q heads of the group.
quantize_qkv(..., block_keys=N) gives block-wise scales instead: q's per (batch, head, row), k's
and v's per (batch, head_k, block of N keys). The FP8 V^T kernels (the FP8 mode's, head dims
128 and 256) take those with N their key tile (flashcute.ops.vt_key_block): k's block scale is
folded into the block's scores, v's into P's exponent (its row sum divides it out again). With
them no scale spans more than one block, so the CUDA quantizer reads each block once instead of
every (batch, head) twice; that is why the FP8 mode uses them (FP8Config.block_scales).

Why a rotation: an orthogonal R applied to both q and k leaves q k^T unchanged (q R R^T k^T =
q k^T) but mixes every coordinate of a row into every other, so a few outlier coordinates no
longer dominate the amax and the rounding error of the products (the "incoherent processing"
of QuIP / FlashAttention-3). R = diag(signs) H / sqrt(d), H a Hadamard matrix (entries +-1),
signs +-1 drawn from a seeded torch.Generator on the CPU, so R is the same on every device and
run for a given seed. H exists for d = 2^k (Sylvester) and d = 12 * 2^k (Paley's order-12
matrix (x) Sylvester), which covers head dims 64, 96, 128, 192 and 256.

Speed: on a Hopper GPU, bf16/fp16 inputs (dense or varlen) take the compiled core's fused kernel
(flashcute_fp8_quantize, impl="cuda"): one launch for q, k and v, every (batch, head_k) slot
read twice in quick succession (amax, then scale + cast), the second read from L2, the rotation
a fast Walsh-Hadamard transform in registers (head dims 128 and 256 partly on the tensor cores;
96 and 192 with Paley's order-12 factor on the tensor cores; with block-wise scales, block_keys >
0, head dims 96 and 192 rotate on the torch path). Otherwise (CPU, fp32 input, another GPU, a
build without the FP8 kernels) the same arithmetic runs as torch ops. The torch path defines the semantics: the rotation in
fp32 (the +-1 matrix is exact in bf16/fp16; 1/sqrt(d) is folded into the descale), then
x * (fp32(1 / amax) * 448), saturate to +-448, round to nearest even. With the rotation, amax
is not max |x R| but the bound sqrt(d * max_row sum(x_row^2)) (_slot_amax), which needs no
rotation to compute, so the first pass reads x without transforming it; the unused range (at
most a factor sqrt(d)) costs no accuracy, as e4m3 is floating point (benchmarks/RESULTS.md).
The CUDA path gives the same bytes without the rotation; with it, its fp32 sums run in another
order than torch's (a rare value one e4m3 step apart, descales equal to ~1e-7). An
experimental Triton path (impl="triton") also exists.
Inputs must be finite (an inf/NaN makes its (batch, head) slot non-finite). The torch path
copies the rotation matrix to a device once per (d, seed, device, dtype) and caches it: make
its first call outside CUDA-graph capture (any warm-up does), as a host-to-device copy cannot
be captured. The CUDA path needs no device copy (the signs travel as kernel arguments).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional, Tuple

import torch

from . import _lib
from . import ops as _ops
from .ops import _DTYPE_CODES, _kernel_ready

__all__ = ["E4M3_MAX", "FP8Config", "quantize", "hadamard", "hadamard_matrix", "dequantize"]

#: quantize's impl choices: "auto" (the CUDA kernel where it runs, else torch ops), or one forced.
IMPLS = ("auto", "torch", "triton", "cuda")

#: The largest finite float8_e4m3fn value; per-head amax is mapped onto it.
E4M3_MAX = 448.0


# ---- configuration of the FP8 mode --------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class FP8Config:
    """Options of the FP8 mode of flashcute.flash_attn_func / flash_attn_varlen_func /
    scaled_dot_product_attention (pass `fp8=FP8Config(...)`, or `fp8=True` for the defaults).

    rotate: apply the random Hadamard rotation R (seeded by `seed`) to q and k before
      quantizing them (q k^T is unchanged; outliers are spread). On by default: it costs one
      small matmul fused into the quantization and measurably lowers the error on inputs with
      outliers (README, "FP8 mode").
    seed: which rotation (the random signs of R). The same seed gives the same R everywhere,
      so results are reproducible; any seed is equally good.

    v_colmajor: on Hopper, for dense inputs with head dim 128 or 256 and a bf16 result, the CUDA
      quantizer writes v transposed (flashcute.ops.v_colmajor's layout) and the kernel skips its
      own in-kernel V transpose (+2-9 % at 16k, benchmarks/RESULTS.md runs 70-72); elsewhere it
      has no effect. The V^T kernel takes block-wise descales (block_scales below; with
      block_scales=False, one per head as zero strides), so its result equals the transposing
      kernel's up to rounding; off to compare the two paths.

    block_scales: where the V^T path applies (above), block-wise scales: q's per query row, k's
      and v's per key block of the kernel (128 or 192 keys), which the V^T kernel takes as
      block-wise descales. The quantizer then reads each block once and needs no pass over the
      whole (batch, head) first: at d=128 4k 0.119-0.122 ms against 0.140-0.142 on an H100
      (benchmarks/RESULTS.md runs 107-108). Elsewhere, and with block_scales=False, one scale
      per (batch, heads_k) (FA3's descale convention).
    """

    rotate: bool = True
    seed: int = 0
    v_colmajor: bool = True
    block_scales: bool = True

    def __post_init__(self):
        if not isinstance(self.rotate, bool):
            raise TypeError(f"fp8: FP8Config.rotate must be a bool, got {type(self.rotate).__name__}")
        if not isinstance(self.v_colmajor, bool):
            raise TypeError(f"fp8: FP8Config.v_colmajor must be a bool, got {type(self.v_colmajor).__name__}")
        if not isinstance(self.block_scales, bool):
            raise TypeError(f"fp8: FP8Config.block_scales must be a bool, got {type(self.block_scales).__name__}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"fp8: FP8Config.seed must be an int, got {type(self.seed).__name__}")
        if not 0 <= self.seed < 2 ** 63:
            raise ValueError(f"fp8: FP8Config.seed must be in [0, 2**63), got {self.seed}")


_DEFAULT_CONFIG = FP8Config()

# (device, backend, head dim) -> whether the FP8 mode's V^T path applies there: the forward
# resolves to the sm90 kernel (which has the V^T variants) and the CUDA quantizer runs (it
# writes V^T as it casts; a separate permuting copy would cost more than the kernel saves, run
# 67). Filled by eager calls: under torch.compile an unseen key reads as "no" (no ctypes call in
# traced code), which takes the in-kernel transpose with one scale per (batch, head): the same
# result up to rounding (bitwise the same once an eager call has filled the key).
_VT_PATH: dict = {}


def v_colmajor_applies(q, k, v, cfg, backend) -> bool:
    """Whether the FP8 mode hands this dense call's v to the kernel as V^T (FP8Config.v_colmajor)."""
    if cfg is None or not cfg.v_colmajor or q.dim() != 4 or q.dtype != torch.bfloat16 or k.shape[1] == 0:
        return False
    d = q.shape[-1]
    if d not in _ops.VT_HEAD_DIMS or v.shape[-1] != d or k.shape[-2] != v.shape[-2] or not q.is_cuda:
        return False
    key = (q.get_device(), backend, d)
    hit = _VT_PATH.get(key)
    if hit is None:
        if torch.compiler.is_compiling():
            return False
        hit = _lib.supported(key[0], backend, _lib.DTYPE_E4M3, d, d).backend == "sm90" \
            and not _cuda_reason(v, None, False)
        _VT_PATH[key] = hit
    return hit


def mode_block_keys(q, k, v, cfg, vt: bool) -> int:
    """The key block of the FP8 mode's block-wise scales for this call (0: per (batch, heads_k)):
    with FP8Config.block_scales on the V^T path (v_colmajor_applies), the V^T kernel's key tile."""
    if not vt or not cfg.block_scales:
        return 0
    return _ops.vt_key_block(q.shape[-1], k.shape[1]) if q.shape[-1] == v.shape[-1] else 0


def resolve_config(fp8) -> Optional[FP8Config]:
    """fp8 argument of the public functions -> FP8Config or None (mode off)."""
    if fp8 is None or fp8 is False:
        return None
    if fp8 is True:
        return _DEFAULT_CONFIG  # a constant: nothing to construct while torch.compile traces
    if isinstance(fp8, FP8Config):
        return fp8
    raise TypeError(f"fp8: expected None, a bool or a flashcute.fp8.FP8Config, got {type(fp8).__name__}")


# ---- Hadamard matrices ---------------------------------------------------------------------------
def _sylvester(n: int) -> torch.Tensor:
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def _paley12() -> torch.Tensor:
    """Paley's construction I for q = 11 (a prime = 3 mod 4): order 12. Q[i][j] = chi(j - i)
    (chi the quadratic character mod 11) is skew-symmetric, and H = I + [[0, 1^T], [-1, Q]]
    satisfies H H^T = 12 I."""
    q = 11
    residues = {(i * i) % q for i in range(1, q)}
    chi = [0] + [1 if a in residues else -1 for a in range(1, q)]
    s = torch.zeros(q + 1, q + 1)
    s[0, 1:] = 1
    s[1:, 0] = -1
    for i in range(q):
        for j in range(q):
            s[1 + i, 1 + j] = chi[(j - i) % q]
    return torch.eye(q + 1) + s


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def rotation_supported(d: int) -> bool:
    """Whether hadamard_matrix(d) exists: d a power of two, or 12 times one."""
    return _is_pow2(d) or (d % 12 == 0 and _is_pow2(d // 12))


def _check_dim(d: int, name: str = "head_dim") -> None:
    if not rotation_supported(d):
        raise ValueError(f"{name}: {d} has no Hadamard rotation here; supported sizes are powers of two "
                         f"and 12 * 2^k (64, 96, 128, 192, 256, ...); use rotate=False for this head dim")


@functools.lru_cache(maxsize=None)
def _hadamard_pm1(d: int) -> torch.Tensor:
    """The (d, d) Hadamard matrix with entries +-1 (float32, CPU), H H^T = d I."""
    _check_dim(d)
    if _is_pow2(d):
        return _sylvester(d)
    return torch.kron(_paley12(), _sylvester(d // 12))


def _signs(d: int, seed: Optional[int], generator: Optional[torch.Generator]) -> torch.Tensor:
    """+-1 (d,) float32 on the CPU: from `generator` if given (advancing it), else from a fresh
    CPU generator seeded with `seed` (so the same on every device), or all +1 for seed None."""
    if generator is not None:
        if generator.device.type != "cpu":
            bits = torch.randint(0, 2, (d,), generator=generator, device=generator.device).cpu()
        else:
            bits = torch.randint(0, 2, (d,), generator=generator)
    elif seed is None:
        return torch.ones(d)
    else:
        bits = torch.randint(0, 2, (d,), generator=torch.Generator().manual_seed(int(seed)))
    return bits.float() * 2 - 1


@functools.lru_cache(maxsize=64)
def _signed_pm1_cpu(d: int, seed: Optional[int]) -> torch.Tensor:
    return _signs(d, seed, None).unsqueeze(1) * _hadamard_pm1(d)


_DEVICE_CACHE: dict = {}


def _signed_pm1(d: int, seed: Optional[int], device, dtype) -> torch.Tensor:
    """diag(signs) H (+-1 entries, exact in every float dtype), cached per device and dtype:
    building it costs a host-to-device copy, which the hot path must not repeat."""
    key = (d, seed, str(device), dtype)
    m = _DEVICE_CACHE.get(key)
    if m is None:
        m = _signed_pm1_cpu(d, seed).to(device=device, dtype=dtype)
        _DEVICE_CACHE[key] = m
    return m


def hadamard_matrix(d: int, seed: Optional[int] = 0, generator: Optional[torch.Generator] = None,
                    device=None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The orthogonal (d, d) rotation R = diag(signs) H / sqrt(d) used by hadamard() and the FP8
    mode (R R^T = I up to dtype rounding).

    Deterministic: the signs come from `generator` when given (which advances it: use that for
    a fresh rotation per call), else from torch.Generator().manual_seed(seed) on the CPU, so a
    seed names the same R on every device, process and run. seed=None: no signs (plain H).
    d: a power of two or 12 * 2^k, else ValueError.
    """
    _check_dim(d, "d")
    m = _signs(d, seed, generator).unsqueeze(1) * _hadamard_pm1(d) if generator is not None \
        else _signed_pm1_cpu(d, seed)
    return (m.double() / math.sqrt(d)).to(device=device, dtype=dtype)


def hadamard(x: torch.Tensor, seed: Optional[int] = 0, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """x @ R along the last dimension (the head dim), R = hadamard_matrix(x.shape[-1], seed,
    generator); returns x's dtype and shape. Apply the same seed to q and k: (q R)(k R)^T = q k^T.

    One GEMM: x (as (rows, d)) times the +-1 matrix, which is exact in bf16/fp16, with the
    1/sqrt(d) applied as the GEMM's alpha in fp32 before the single rounding to x's dtype.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point() or x.dtype in _FP8_TYPES:
        raise TypeError(f"x: dtype {x.dtype}; hadamard needs float32, float16 or bfloat16")
    d = x.shape[-1]
    _check_dim(d, "x")
    if generator is not None:
        m = (_signs(d, None, generator).unsqueeze(1) * _hadamard_pm1(d)).to(device=x.device, dtype=x.dtype)
    else:
        m = _signed_pm1(d, seed, x.device, x.dtype)
    x2 = x.reshape(-1, d)
    y = torch.addmm(x2.new_zeros(()), x2, m, beta=0, alpha=1.0 / math.sqrt(d))
    return y.view(x.shape)


_FP8_TYPES = tuple(t for t in (getattr(torch, "float8_e4m3fn", None),) if t is not None)


# ---- quantization: the torch path ---------------------------------------------------------------
def _rows_to_sequences(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """(total,) int64: the sequence of each packed row; rows past cu_seqlens[-1] get `batch`
    (a spill slot). On the device, no host sync (torch.compile / CUDA graphs safe)."""
    rows = torch.arange(total, device=cu_seqlens.device, dtype=cu_seqlens.dtype)
    return torch.searchsorted(cu_seqlens[1:].contiguous(), rows, right=True)


def _rotated_fp32(x: torch.Tensor, rotate: bool, seed: int) -> torch.Tensor:
    """x, or x @ (diag(signs) H) (unnormalised), in float32."""
    if not rotate:
        return x.float()
    d = x.shape[-1]
    return (x.reshape(-1, d).float() @ _signed_pm1(d, seed, x.device, torch.float32)).view(x.shape)


def _descale_and_scale(amax: torch.Tensor, norm: float):
    """Per-slot amax (float32) -> (descale = amax * norm / 448, scale = 448 / amax); norm is the
    rotation's 1/sqrt(d), kept out of the GEMM so that the +-1 matrix stays exact. An all-zero
    slot gets scale 1 and descale norm (its e4m3 values are 0 either way)."""
    safe = torch.where(amax > 0, amax, torch.full_like(amax, E4M3_MAX))
    return safe * (norm / E4M3_MAX), E4M3_MAX / safe


def _cast_e4m3(y: torch.Tensor) -> torch.Tensor:
    # round to nearest even; saturate explicitly, since whether torch's cast saturates or gives
    # NaN beyond 448 has varied between versions and devices
    return y.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def _row_amax(x, y, rotate):
    """Per (row, head) of x (..., d): max |y| without the rotation; with it, sum(x^2) over the
    row, which _slot_amax turns into the bound sqrt(d * max) on max |y|: each y_i is a +-1
    combination of the row's d values, so |y_i| <= sqrt(d) * ||x_row||_2. The sum runs in fp64
    and is then rounded to fp32 (nearly exact; the Triton path does the same). The CUDA kernel
    sums in fp32, pairwise (fewer instructions per element), within a few ulps of this."""
    if rotate:
        return x.double().square().sum(-1).float()
    return y.abs().amax(-1)


def _slot_amax(m, d, rotate):
    """The per-slot max of _row_amax -> amax (fp32): sqrt(d * max sum(x^2)) with the rotation."""
    return torch.sqrt(m * float(d)) if rotate else m


def _quantize_torch(x, heads_k, rotate, seed, cu_seqlens):
    d, h = x.shape[-1], x.shape[-2]
    g = h // heads_k
    norm = 1.0 / math.sqrt(d) if rotate else 1.0
    y = _rotated_fp32(x, rotate, seed)
    row = _row_amax(x, y, rotate)  # (..., h)
    if cu_seqlens is None:
        b = x.shape[0]
        rb = row.reshape(b, x.shape[1], heads_k, g)
        # no rows (seqlen 0): every slot is all-zero (the max over an empty dim is an error)
        amax = _slot_amax(rb.amax(dim=(1, 3)), d, rotate) if rb.numel() else rb.new_zeros(b, heads_k)
        descale, scale = _descale_and_scale(amax, norm)
        x8 = _cast_e4m3(y * scale.repeat_interleave(g, 1)[:, None, :, None])
        return x8.contiguous(), descale
    batch = cu_seqlens.shape[0] - 1
    total = x.shape[0]
    seq = _rows_to_sequences(cu_seqlens, total)
    row_amax = row.reshape(total, heads_k, g).amax(dim=2)
    amax = torch.zeros(batch + 1, heads_k, dtype=torch.float32, device=x.device)
    amax.scatter_reduce_(0, seq.unsqueeze(1).expand(total, heads_k), row_amax, "amax", include_self=True)
    amax = _slot_amax(amax, d, rotate)
    descale, scale = _descale_and_scale(amax, norm)
    row_scale = scale[seq].repeat_interleave(g, 1)  # (total, h)
    x8 = _cast_e4m3(y * row_scale.unsqueeze(-1))
    return x8.contiguous(), descale[:batch].contiguous()


def _quantize_torch_blocks(x, rows, rotate, seed):
    """Block-wise scales: dense x (b, s, h, d), one scale per block of `rows` rows of each
    (batch, head) (rows = 1: per row) -> (x8 (b, s, h, d), descale (b, h, ceil(s / rows))). The
    slot path's arithmetic with the amax taken over the block."""
    b, s, h, d = x.shape
    nb = -(-s // rows)
    norm = 1.0 / math.sqrt(d) if rotate else 1.0
    y = _rotated_fp32(x, rotate, seed)
    row = _row_amax(x, y, rotate)  # (b, s, h), >= 0
    padded = torch.nn.functional.pad(row, (0, 0, 0, nb * rows - s))  # zero rows complete the last block
    amax = _slot_amax(padded.view(b, nb, rows, h).amax(2), d, rotate)  # (b, nb, h)
    descale, scale = _descale_and_scale(amax, norm)
    row_scale = scale.repeat_interleave(rows, 1)[:, :s]  # (b, s, h)
    x8 = _cast_e4m3(y * row_scale.unsqueeze(-1))
    return x8.contiguous(), descale.transpose(1, 2).contiguous()


# ---- quantization: the Triton path (CUDA) --------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _triton_kernels():
    """The two Triton kernels, or None if Triton is not importable (compiled lazily, once)."""
    try:
        from . import _fp8_triton
    except Exception:  # noqa: BLE001  no triton (CPU wheels), or a broken install: torch path
        return None
    return _fp8_triton


def _use_triton(x, cu_seqlens, impl) -> bool:
    if impl == "torch":
        return False
    ok = (x.device.type == "cuda" and cu_seqlens is None and x.dtype in (torch.bfloat16, torch.float16)
          and x.shape[-1] <= 256 and x.numel() > 0 and x.shape[0] * x.shape[2] <= 65535)
    if impl == "triton":
        if not ok or _triton_kernels() is None:
            raise ValueError("impl: 'triton' needs a non-empty dense CUDA bf16/fp16 tensor with head dim "
                             "<= 256, batch * heads <= 65535, and an importable triton")
        return True
    # "auto" never takes the Triton path: the compiled CUDA quantizer is faster where it exists,
    # and the torch path is the fallback. The Triton path's values now agree with the torch
    # path's (its scale was 448 / amax rounded once, torch's is reciprocal-then-multiply: fixed,
    # seen on the H200 in run 16), but its rotation runs out of shared memory at head dim 192/256;
    # it is kept for impl="triton" only.
    return False


def _quantize_triton(x, heads_k, rotate, seed, amax):
    """Triton path; amax: a zero-filled (batch, heads_k) float32 buffer (a slice of a shared one)."""
    kern = _triton_kernels()
    d = x.shape[-1]
    m = _signed_pm1(d, seed, x.device, x.dtype) if rotate else None
    kern.amax_pass(x, amax, heads_k, rotate)
    x8 = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    descale = torch.empty_like(amax)
    kern.cast_pass(x, m, amax, 1.0 / math.sqrt(d) if rotate else 1.0, descale, x8, heads_k)
    return x8, descale


# ---- quantization: the CUDA path (the compiled core's flashcute_fp8_quantize) ---------------------
_CUDA_HEAD_DIMS = (64, 96, 128, 192, 256)
_CUDA_SUPPORT: dict = {}  # (device index, dtype, head_dim, rotate) -> _lib.Support, asked once


#: Whether impl="auto" takes varlen (cu_seqlens) inputs to the CUDA kernel: since run 92, where
#: tests/test_gpu_fp8_quantize.py's varlen cases passed (H100) and it quantized packed q, k, v
#: (4 x 4k rows, 16 heads, d=128) in 0.176 ms against the torch path's 3.34 ms.
_CUDA_VARLEN_AUTO = True


def _cuda_reason(x, cu_seqlens, rotate, impl="cuda") -> str:
    """Why the CUDA path cannot quantize x ("" if it can). Host-side facts only: no device work,
    and the library's answer for (device, dtype, head dim, rotation) is cached."""
    if cu_seqlens is not None and impl == "auto" and not _CUDA_VARLEN_AUTO:
        return "varlen (cu_seqlens) inputs take the torch path"
    if not x.is_cuda:
        return f"x is on {x.device}, not a CUDA device"
    if x.dtype not in (torch.bfloat16, torch.float16):
        return f"x is {x.dtype}; the kernel reads bfloat16 or float16"
    if cu_seqlens is not None:
        if x.dim() != 3 or x.shape[1] == 0:
            return f"x has shape {tuple(x.shape)}; with cu_seqlens the kernel takes (total, heads > 0, head_dim)"
    elif x.dim() != 4 or x.shape[2] == 0:
        return f"x has shape {tuple(x.shape)}; the kernel takes (batch, seqlen, heads > 0, head_dim)"
    d = x.shape[-1]
    if d not in _CUDA_HEAD_DIMS:
        return f"head dim {d}; the kernel covers {_CUDA_HEAD_DIMS}"
    key = (x.get_device(), x.dtype, d, bool(rotate))
    sup = _CUDA_SUPPORT.get(key)
    if sup is None:
        sup = _lib.fp8_quantize_supported(key[0], _DTYPE_CODES[x.dtype], d, rotate)
        _CUDA_SUPPORT[key] = sup
    return "" if sup else sup.reason


def _use_cuda(x, cu_seqlens, rotate, impl) -> bool:
    if impl not in ("auto", "cuda"):
        return False
    why = _cuda_reason(x, cu_seqlens, rotate, impl)
    if impl == "cuda" and why:
        raise ValueError(f"impl: 'cuda' cannot quantize this input: {why}")
    return not why


@functools.lru_cache(maxsize=64)
def _sign_bits(d: int, seed: int) -> Tuple[int, ...]:
    """The rotation's signs (_signs(d, seed)) as the C ABI's 8 words: bit i set where s_i = -1."""
    neg = (_signs(d, seed, None) < 0).tolist()
    words = [0] * 8
    for i, n in enumerate(neg):
        if n:
            words[i // 32] |= 1 << (i % 32)
    return tuple(words)


def _row_bounds(cu_seqlens: torch.Tensor, total: int) -> torch.Tensor:
    """The C ABI's row_bounds for a varlen x of `total` packed rows: [0, cu[1], ..., cu[batch],
    total] clamped to [0, total], i.e. batch + 1 slots: slot b < batch holds the rows that
    _rows_to_sequences gives sequence b (rows before cu[0] included), slot batch the rows past
    cu[batch] (the torch path's spare scale). On the device, no host sync. A cu_seqlens that
    decreases somewhere (invalid) is made nondecreasing by a running max, as the C ABI requires:
    its rows' scales are then meaningless, but the kernel neither reads out of place nor waits."""
    inner = torch.cummax(cu_seqlens[1:].clamp(0, total), 0).values
    return torch.cat([inner.new_zeros(1), inner, inner.new_full((1,), total)])


def _quantize_cuda(jobs, heads_k, seed, outs=None, vt_last=False):
    """[(x, rotate) or (x, rotate, cu_seqlens), ...] (CUDA bf16/fp16 views, one dtype, one device:
    dense (b, s, h, d), or packed (total, h, d) with cu_seqlens) -> [(x8, descale), ...] through one
    flashcute_fp8_quantize launch. outs: preallocated contiguous (x8, descale) pairs to fill
    instead (tests poison them first); a varlen job's descale has batch + 1 rows there (the last,
    the spare scale of rows past cu[batch], is dropped from the result). vt_last: the last job's
    x8 is written as V^T (flashcute.ops.vt_shape; dense, heads == heads_k, head dim 128 / 256)."""
    jobs = [j if len(j) == 3 else (j[0], j[1], None) for j in jobs]
    dev = jobs[0][0].device
    if outs is None:
        outs = [(torch.empty(_ops.vt_shape(x) if vt_last and i == len(jobs) - 1 else x.shape, dtype=torch.float8_e4m3fn,
                             device=dev),
                 torch.empty((x.shape[0] if cu is None else cu.shape[0], heads_k), dtype=torch.float32, device=dev))
                for i, (x, _, cu) in enumerate(jobs)]
    args, keep, results = [], [], []
    bounds = {}  # (id(cu_seqlens), rows) -> row_bounds, made once: k and v share cu_seqlens_k
    for i, ((x, rotate, cu), (x8, descale)) in enumerate(zip(jobs, outs)):
        if cu is not None:  # varlen: batch + 1 slots of packed rows
            results.append((x8, descale[:-1]))
            key = (id(cu), x.shape[0])
            if key not in bounds:
                bounds[key] = _row_bounds(cu, x.shape[0])
            args.append(_varlen_args(x, bounds[key], x8, descale, rotate, seed, heads_k, keep))
            continue
        results.append((x8, descale))
        b, s, h, d = x.shape
        vt = vt_last and i == len(jobs) - 1
        if tuple(x8.shape) != (_ops.vt_shape(x) if vt else tuple(x.shape)) or not x8.is_contiguous() \
                or descale.shape != (b, heads_k) or not descale.is_contiguous():
            raise ValueError("outs: contiguous x8 of x's shape (V^T's for vt_last) and descale (batch, heads_k) expected")
        if b == 0:
            continue  # nothing to read or write
        args.append(_dense_args(x, x8, descale, vt, rotate, seed, heads_k, keep))
    if args:
        def workspace(nbytes):
            w = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            return w.data_ptr(), w

        keep.append(_lib.fp8_quantize_with_workspace(args, workspace, dev.index if dev.index is not None else -1,
                                                     _ops._stream_handle(jobs[0][0])))
    del keep  # copies stay alive until the launch is enqueued; the caching allocator is stream-ordered
    return results


def _dense_args(x, x8, descale, vt, rotate, seed, heads_k, keep):
    """A dense job's flashcute_fp8_quantize_args: x (b, s, h, d), x8 its shape or V^T's (vt);
    any copy of x (alignment) kept alive in `keep`."""
    b, s, h, d = x.shape
    a = _lib.Fp8QuantizeArgs()
    if s > 0:
        x, xs = _kernel_ready(x, x.shape)  # in place unless the last dim / alignment needs a copy
        keep.append(x)
        a.x, a.x8 = x.data_ptr(), x8.data_ptr()
        a.x_batch_stride, a.x_row_stride, a.x_head_stride = xs[0], xs[1], xs[2]
        if vt:  # (b, h, d, keys): the row stride steps d
            a.x8_batch_stride, a.x8_head_stride, a.x8_row_stride = x8.stride(0), x8.stride(1), x8.stride(2)
        else:
            a.x8_batch_stride, a.x8_row_stride, a.x8_head_stride = s * h * d, h * d, d
    a.x8_vt = int(vt)
    a.descale = descale.data_ptr()
    a.batch, a.seqlen = b, s
    _set_common_args(a, x, rotate, seed, heads_k)
    return a


def _set_common_args(a, x, rotate, seed, heads_k):
    """The fields of flashcute_fp8_quantize_args that a dense and a varlen job fill alike."""
    h, d = x.shape[-2], x.shape[-1]
    a.descale_batch_stride, a.descale_head_stride = heads_k, 1
    a.heads, a.heads_k, a.head_dim = h, heads_k, d
    a.dtype = _DTYPE_CODES[x.dtype]
    a.rotate = int(bool(rotate))
    if rotate:
        a.rotation_signs[:] = _sign_bits(d, seed)


def _varlen_args(x, bounds, x8, descale, rotate, seed, heads_k, keep):
    """A varlen job's flashcute_fp8_quantize_args: x packed (total, h, d), the batch + 1 slots of
    `bounds` (_row_bounds; device memory, kept alive in `keep` with any copy of x)."""
    total, h, d = x.shape
    if bounds.dtype != torch.int32 or bounds.device != x.device:
        raise ValueError(f"cu_seqlens: int32 on {x.device} expected, got {bounds.dtype} on {bounds.device}")
    batch = bounds.shape[0] - 2
    if tuple(x8.shape) != tuple(x.shape) or not x8.is_contiguous() or descale.shape != (batch + 1, heads_k) \
            or not descale.is_contiguous():
        raise ValueError("outs: contiguous x8 of x's shape and descale (batch + 1, heads_k) expected for varlen")
    a = _lib.Fp8QuantizeArgs()
    keep.append(bounds)
    a.row_bounds = bounds.data_ptr()
    if total > 0:
        x, xs = _kernel_ready(x, x.shape)  # in place unless the last dim / alignment needs a copy
        keep.append(x)
        a.x, a.x8 = x.data_ptr(), x8.data_ptr()
        a.x_row_stride, a.x_head_stride = xs[0], xs[1]
        a.x8_row_stride, a.x8_head_stride = h * d, d
    a.descale = descale.data_ptr()
    a.batch, a.seqlen = batch + 1, total
    _set_common_args(a, x, rotate, seed, heads_k)
    return a


def _quantize_cuda_blocks(jobs, seed, outs=None, vt_last=False):
    """Block-wise scales on the CUDA path, one flashcute_fp8_quantize launch: [(x, rotate, rows),
    ...] (dense CUDA bf16/fp16 (b, s, h, d), one dtype) -> [(x8, descale (b, h, ceil(s / rows))),
    ...]; rows = 1: per row. outs / vt_last as _quantize_cuda."""
    dev = jobs[0][0].device
    if outs is None:
        outs = [(torch.empty(_ops.vt_shape(x) if vt_last and i == len(jobs) - 1 else x.shape,
                             dtype=torch.float8_e4m3fn, device=dev),
                 torch.empty((x.shape[0], x.shape[2], -(-x.shape[1] // rows)), dtype=torch.float32, device=dev))
                for i, (x, _, rows) in enumerate(jobs)]
    args, keep = [], []
    for i, ((x, rotate, rows), (x8, descale)) in enumerate(zip(jobs, outs)):
        b, s, h, d = x.shape
        vt = vt_last and i == len(jobs) - 1
        if tuple(x8.shape) != (_ops.vt_shape(x) if vt else tuple(x.shape)) or not x8.is_contiguous() \
                or descale.shape != (b, h, -(-s // rows)) or not descale.is_contiguous():
            raise ValueError("outs: contiguous x8 of x's shape (V^T's for vt_last) and descale (batch, heads, blocks)")
        if b == 0:
            continue
        a = _dense_args(x, x8, descale, vt, rotate, seed, h, keep)
        a.descale_batch_stride, a.descale_head_stride = descale.stride(0), descale.stride(1)
        a.block_rows = rows
        args.append(a)
    if args:  # block-wise scales need no workspace (its size is 0)
        keep.append(_lib.fp8_quantize_with_workspace(args, lambda nbytes: (0, None),
                                                     dev.index if dev.index is not None else -1,
                                                     _ops._stream_handle(jobs[0][0])))
    del keep
    return outs


def _quantize_impl(x, heads_k, rotate, seed, cu_seqlens, impl="auto"):
    if _use_cuda(x, cu_seqlens, rotate, impl):
        return _quantize_cuda([(x, rotate, cu_seqlens)], heads_k, seed)[0]
    if _use_triton(x, cu_seqlens, impl):
        amax = torch.zeros(x.shape[0], heads_k, dtype=torch.float32, device=x.device)
        return _quantize_triton(x, heads_k, rotate, seed, amax)
    return _quantize_torch(x, heads_k, rotate, seed, cu_seqlens)


def _quantize_qkv_impl(q, k, v, heads_k, rotate, seed, cu_seqlens_q, cu_seqlens_k, impl="auto", v_vt=False,
                       block_keys=0):
    """The FP8 mode's three quantizations: on the CUDA path in one launch (those of the three it
    can take; the others on the torch path), on the Triton path with one zero-filled amax buffer
    for all three (one memset, then two launches per tensor). v_vt: v8 as V^T (dense v with
    heads_k heads; written so by the CUDA path, else permuted after). block_keys > 0 (dense):
    block-wise scales, q's per row, k's and v's per block of block_keys keys."""
    if block_keys > 0:
        jobs = ((q, rotate, 1), (k, rotate, block_keys), (v, False, block_keys))
        if rotate and not _is_pow2(q.shape[-1]):  # the block kernel rotates Sylvester head dims only
            if impl == "cuda":
                raise ValueError(f"impl: 'cuda' cannot quantize this input: block-wise scales with the rotation "
                                 f"take head dims 64, 128 and 256, not {q.shape[-1]}")
            impl = "torch"
        if all(_use_cuda(t, None, r, impl) for t, r, _ in jobs) and q.dtype == k.dtype == v.dtype:
            (q8, qd), (k8, kd), (v8, vd) = _quantize_cuda_blocks(jobs, seed, vt_last=v_vt)
            return q8, k8, v8, qd, kd, vd
        (q8, qd), (k8, kd), (v8, vd) = [_quantize_torch_blocks(t, rows, r, seed) for t, r, rows in jobs]
        return q8, k8, _ops.v_colmajor(v8) if v_vt else v8, qd, kd, vd
    if v_vt:
        if all(_use_cuda(t, None, r, impl) for t, r in ((q, rotate), (k, rotate), (v, False))) \
                and q.dtype == k.dtype == v.dtype:
            (q8, qd), (k8, kd), (v8, vd) = _quantize_cuda([(q, rotate), (k, rotate), (v, False)], heads_k, seed,
                                                          vt_last=True)
            return q8, k8, v8, qd, kd, vd
        q8, k8, v8, qd, kd, vd = _quantize_qkv_impl(q, k, v, heads_k, rotate, seed, None, None, impl)
        return q8, k8, _ops.v_colmajor(v8), qd, kd, vd
    jobs = ((q, rotate, cu_seqlens_q), (k, rotate, cu_seqlens_k), (v, False, cu_seqlens_k))
    if impl == "triton" and all(_use_triton(t, cu, impl) for t, _, cu in jobs):
        amax = torch.zeros(3, q.shape[0], heads_k, dtype=torch.float32, device=q.device)
        q8, qd = _quantize_triton(q, heads_k, rotate, seed, amax[0])
        k8, kd = _quantize_triton(k, heads_k, rotate, seed, amax[1])
        v8, vd = _quantize_triton(v, heads_k, False, seed, amax[2])
        return q8, k8, v8, qd, kd, vd
    on_cuda = [i for i, (t, r, cu) in enumerate(jobs) if _use_cuda(t, cu, r, impl)]
    if len({jobs[i][0].dtype for i in on_cuda}) > 1:  # one launch quantizes one dtype
        on_cuda = on_cuda[:1]
    res = [None] * 3
    if on_cuda:
        for i, r in zip(on_cuda, _quantize_cuda([jobs[i] for i in on_cuda], heads_k, seed)):
            res[i] = r
    for i, (t, r, cu) in enumerate(jobs):
        if res[i] is None:
            res[i] = _quantize_impl(t, heads_k, r, seed, cu, impl)
    (q8, qd), (k8, kd), (v8, vd) = res
    return q8, k8, v8, qd, kd, vd


# The custom op: opaque to torch.compile (fullgraph works; register_fake gives shapes), and the
# one place where the CUDA / Triton / torch choice is made, in eager code.
@torch.library.custom_op("flashcute::fp8_quantize", mutates_args=())
def _fp8_quantize_op(x: torch.Tensor, heads_k: int, rotate: bool, seed: int,
                     cu_seqlens: Optional[torch.Tensor], impl: str) -> Tuple[torch.Tensor, torch.Tensor]:
    return _quantize_impl(x, heads_k, rotate, seed, cu_seqlens, impl)


@_fp8_quantize_op.register_fake
def _fp8_quantize_fake(x, heads_k, rotate, seed, cu_seqlens, impl):
    batch = x.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    x8 = x.new_empty(x.shape, dtype=torch.float8_e4m3fn)
    return x8, x.new_empty((batch, heads_k), dtype=torch.float32)


@torch.library.custom_op("flashcute::fp8_quantize_qkv", mutates_args=())
def _fp8_quantize_qkv_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads_k: int, rotate: bool, seed: int,
                         cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                         impl: str, v_vt: bool = False, block_keys: int = 0
                         ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The FP8 mode's quantization of q, k (rotated when `rotate`) and v in one op call: one
    Python dispatch instead of three keeps the host overhead below the GPU time. v_vt: v8 as V^T.
    block_keys > 0: block-wise scales (_quantize_qkv_impl)."""
    return _quantize_qkv_impl(q, k, v, heads_k, rotate, seed, cu_seqlens_q, cu_seqlens_k, impl, v_vt, block_keys)


@_fp8_quantize_qkv_op.register_fake
def _fp8_quantize_qkv_fake(q, k, v, heads_k, rotate, seed, cu_seqlens_q, cu_seqlens_k, impl, v_vt=False,
                           block_keys=0):
    out = []
    for t, cu in ((q, cu_seqlens_q), (k, cu_seqlens_k), (v, cu_seqlens_k)):
        out.append(_fp8_quantize_fake(t, heads_k, rotate, seed, cu, impl))
    v8 = v.new_empty(_ops.vt_shape(v), dtype=torch.float8_e4m3fn) if v_vt else out[2][0]
    ds = [out[0][1], out[1][1], out[2][1]]
    if block_keys > 0:
        ds = [t.new_empty((t.shape[0], t.shape[2], -(-t.shape[1] // rows)), dtype=torch.float32)
              for t, rows in ((q, 1), (k, block_keys), (v, block_keys))]
    return out[0][0], out[1][0], v8, ds[0], ds[1], ds[2]


def quantize_qkv(q, k, v, *, rotate=True, seed=0, cu_seqlens_q=None, cu_seqlens_k=None, impl="auto",
                 v_colmajor=False, block_keys=0):
    """The FP8 mode's inputs: (q8, k8, v8, (q_descale, k_descale, v_descale)) from FA-layout q
    (b, s, hq, d) / k, v (b, s, hk, .) -- or packed (total, h, d) with cu_seqlens -- with
    heads_k = k's heads (q's scale per GQA group), q and k rotated by the same seeded R.
    v_colmajor (dense only): v8 comes as V^T for the FP8 kernel, (b, hk, dv, round_up(s, 32)) in
    flashcute.ops.v_colmajor's layout (written so by the CUDA quantizer).
    block_keys > 0 (dense only): block-wise scales, the FP8 V^T kernel's: q_descale (b, hq, sq)
    per row, k_descale and v_descale (b, hk, ceil(sk / block_keys)) per block of keys; each block
    is read once (no slot-wide amax pass). block_keys must be the kernel's key block
    (flashcute._lib.fp8_descale_block_keys) for the kernel to take them."""
    if (v_colmajor or block_keys) and (cu_seqlens_k is not None or v.dim() != 4):
        raise ValueError("v_colmajor / block_keys: V^T output and block-wise scales are for dense "
                         "(batch, seqlen, heads, head_dim) inputs")
    if isinstance(block_keys, bool) or not isinstance(block_keys, int) or block_keys < 0:
        raise ValueError(f"block_keys: expected an int >= 0, got {block_keys!r}")
    if block_keys and v_colmajor and block_keys % 32:
        raise ValueError(f"block_keys: {block_keys}; with v_colmajor a multiple of 32")
    args = (q, k, v, k.shape[-2], rotate, int(seed), cu_seqlens_q, cu_seqlens_k, impl, bool(v_colmajor),
            int(block_keys))
    if _ops._dispatcher_adds_nothing((q, k, v, cu_seqlens_q, cu_seqlens_k)):  # plain eager: skip the dispatcher
        x8 = _quantize_qkv_impl(*args)
    else:
        x8 = torch.ops.flashcute.fp8_quantize_qkv(*args)
    return x8[0], x8[1], x8[2], (x8[3], x8[4], x8[5])


_LAYOUTS = ("bshd", "bhsd", "thd")


def _check_quantize_args(x, heads_k, layout, cu_seqlens, rotate, seed, impl):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise TypeError(f"x: dtype {x.dtype}; quantize takes bfloat16, float16 or float32")
    if layout not in _LAYOUTS:
        raise ValueError(f"layout: got {layout!r}; allowed: 'bshd' (FA), 'bhsd' (SDPA), 'thd' (varlen)")
    want = 3 if layout == "thd" else 4
    if x.dim() != want:
        raise ValueError(f"x: layout {layout!r} needs {want} dimensions, got shape {tuple(x.shape)}")
    if (layout == "thd") != (cu_seqlens is not None):
        raise ValueError("cu_seqlens: required with layout 'thd' (packed varlen) and only there")
    if cu_seqlens is not None:
        if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dtype != torch.int32 or cu_seqlens.dim() != 1 \
                or cu_seqlens.shape[0] < 1:
            raise ValueError("cu_seqlens: expected a 1-D int32 tensor of batch + 1 offsets")
        if cu_seqlens.device != x.device:
            raise ValueError(f"cu_seqlens: is on {cu_seqlens.device}, x on {x.device}")
    h = x.shape[1] if layout == "bhsd" else x.shape[-2]
    if heads_k is not None:
        if isinstance(heads_k, bool) or not isinstance(heads_k, int):
            raise TypeError(f"heads_k: expected an int or None, got {type(heads_k).__name__}")
        if heads_k <= 0 or h % heads_k:
            raise ValueError(f"heads_k: {heads_k} does not divide x's {h} heads")
    if not isinstance(rotate, bool):
        raise TypeError(f"rotate: expected a bool, got {type(rotate).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an int >= 0, got {seed!r}")
    if rotate:
        _check_dim(x.shape[-1], "x")
    if impl not in IMPLS:
        raise ValueError(f"impl: got {impl!r}; allowed: {', '.join(repr(i) for i in IMPLS)}")
    return h


def quantize(x: torch.Tensor, heads_k: Optional[int] = None, *, rotate: bool = False, seed: int = 0,
             layout: str = "bshd", cu_seqlens: Optional[torch.Tensor] = None,
             impl: str = "auto") -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantize x to float8_e4m3fn with one scale per (batch, heads_k): returns (x8, descale),
    x8 the shape of x (contiguous), descale float32 (batch, heads_k), such that
    x8 * descale[b, h // (heads // heads_k)] ~= x (or ~= x @ R when rotate=True).

    x: bf16/fp16/fp32, layout "bshd" (batch, seqlen, heads, d: flash_attn_func), "bhsd" (batch,
    heads, seqlen, d: SDPA) or "thd" (total, heads, d with cu_seqlens int32 (batch + 1): varlen;
    rows past cu_seqlens[-1], which the kernel never reads, share one spare scale).
    heads_k: the number of kv heads (GQA): the q heads of a group share one scale (their joint
    amax), because the kernel has one descale slot per (batch, heads_k). Default: x's heads.
    rotate / seed: apply hadamard(x, seed) first, fused (the rotated tensor is never written).
    scale = 448 / amax over the slot; values saturate at +-448 and round to nearest even. With
    the rotation amax is the bound sqrt(d) * max row norm of x on the rotated values (module doc).
    impl: "auto" (the compiled CUDA kernel for bf16/fp16 CUDA tensors, dense or varlen, where
    the library has it -- Hopper, a build with the FP8 kernels; every head dim rotates there --
    else torch ops), or force "cuda" / "torch" / "triton" (ValueError where the forced path
    cannot take the input; tests compare them). The Triton path is experimental (_use_triton).
    """
    h = _check_quantize_args(x, heads_k, layout, cu_seqlens, rotate, seed, impl)
    hk = h if heads_k is None else heads_k
    xv = x.transpose(1, 2) if layout == "bhsd" else x  # (b, s, h, d) view: strides only
    args = (xv, hk, rotate, int(seed), cu_seqlens, impl)
    if _ops._dispatcher_adds_nothing((xv, cu_seqlens)):  # plain eager: skip the dispatcher
        x8, descale = _quantize_impl(*args)
    else:
        x8, descale = torch.ops.flashcute.fp8_quantize(*args)
    if layout == "bhsd":
        x8 = x8.transpose(1, 2)
    return x8, descale


def dequantize(x8: torch.Tensor, descale: torch.Tensor, layout: str = "bshd",
               cu_seqlens: Optional[torch.Tensor] = None, dtype: torch.dtype = torch.float32,
               block_rows: int = 0) -> torch.Tensor:
    """x8 * descale broadcast over its (batch, heads_k) slots (GQA: heads grouped as quantize
    groups them), in `dtype`. block_rows > 0: block-wise descales (batch, heads, blocks), one per
    block_rows rows (quantize_qkv(block_keys=...); dense layouts). For tests and error studies;
    the kernel never needs it."""
    if layout not in _LAYOUTS:
        raise ValueError(f"layout: got {layout!r}; allowed: {_LAYOUTS}")
    xv = x8.transpose(1, 2) if layout == "bhsd" else x8
    if block_rows > 0:
        if layout == "thd":
            raise ValueError("block_rows: block-wise descales are for dense layouts")
        per_row = descale.repeat_interleave(block_rows, 2)[:, :, :xv.shape[1]].transpose(1, 2)  # (b, s, h)
        y = xv.to(dtype) * per_row.to(dtype).unsqueeze(-1)
        return y.transpose(1, 2) if layout == "bhsd" else y
    h, hk = xv.shape[-2], descale.shape[1]
    per_head = descale.repeat_interleave(h // hk, 1)  # (batch, h)
    if layout == "thd":
        seq = _rows_to_sequences(cu_seqlens, xv.shape[0])
        per_head = torch.cat([per_head, torch.ones_like(per_head[:1])])[seq]  # (total, h)
        y = xv.to(dtype) * per_head.to(dtype).unsqueeze(-1)
    else:
        y = xv.to(dtype) * per_head.to(dtype)[:, None, :, None]
    return y.transpose(1, 2) if layout == "bhsd" else y
