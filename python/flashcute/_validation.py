"""Argument validation, before any kernel (DESIGN principle 6).

Every rule raises TypeError (wrong kind of thing: not a tensor, wrong dtype) or ValueError (a
wrong value: shape, device, window, ...) with a message that names the argument, says what it
got and what is allowed.

The structural rules look only at shapes, strides, dtypes and devices, so they run on any device
type (CUDA, meta, FakeTensor) and while torch.compile traces. That the tensors live on a CUDA
device is a separate rule (check_cuda). Rules that need tensor *values* (cu_seqlens monotone,
seqused_k bounded) need a host synchronisation: check_varlen_values skips them while a CUDA graph
is being captured, under torch.compile, and for tensors without data (meta / fake).
"""
from __future__ import annotations

import math
import sys
from typing import Optional, Sequence

import torch

from . import _lib

_HALF_DTYPES = (torch.float16, torch.bfloat16)
_FP8_DTYPES = tuple(d for d in (getattr(torch, "float8_e4m3fn", None),) if d is not None)
_HALF_AND_FP8_DTYPES = _HALF_DTYPES + _FP8_DTYPES
_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
_FLOAT_MAX = sys.float_info.max
BACKENDS = ("auto", "sm80", "sm90")


def _is_tensor(name: str, t, optional: bool = False) -> None:
    if t is None and optional:
        return
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")


def _are_tensors(names: Sequence[str], tensors: Sequence) -> None:
    for n, t in zip(names, tensors):
        _is_tensor(n, t)


def check_input_dtypes(names: Sequence[str], tensors: Sequence[torch.Tensor], allow_fp8: bool,
                       fp8_mode: bool = False) -> None:
    q0 = tensors[0]
    dtype = q0.dtype
    allowed = _HALF_DTYPES if fp8_mode or not allow_fp8 else _HALF_AND_FP8_DTYPES
    ok = dtype in allowed
    for t in tensors[1:]:
        ok = ok and t.dtype == dtype
    if not ok:
        _explain_input_dtypes(names, tensors, allow_fp8, fp8_mode)
    if fp8_mode:
        return  # the FP8 kernel reads e4m3 and writes q's dtype: no bf16/fp16 kernel is needed
    if dtype in _DTYPE_NAMES and _lib.COMPILED_DTYPES and _DTYPE_NAMES[dtype] not in _lib.COMPILED_DTYPES:
        raise TypeError(f"{names[0]}: dtype {dtype} is not compiled into this build (compiled: "
                        f"{', '.join(_lib.COMPILED_DTYPES)}); rebuild with "
                        f"-C cmake.define.FLASHCUTE_DTYPES=\"bf16;fp16\"")


def _explain_input_dtypes(names, tensors, allow_fp8, fp8_mode) -> None:
    """Raise the error for q/k/v dtypes that are not one allowed dtype (check_input_dtypes)."""
    if fp8_mode:
        for n, t in zip(names, tensors):
            if t.dtype not in _HALF_DTYPES:
                raise TypeError(f"fp8: the FP8 mode takes bfloat16/float16 {', '.join(names)} and quantizes "
                                f"them itself, but {n} is {t.dtype}; float8_e4m3fn inputs with their own "
                                f"descales go through flashcute.flash_attn_interface")
    allowed = _HALF_DTYPES + (_FP8_DTYPES if allow_fp8 else ())
    for n, t in zip(names, tensors):
        if t.dtype not in allowed:
            hint = ("" if allow_fp8 or t.dtype not in _FP8_DTYPES else
                    " (float8_e4m3fn inputs go through flashcute.flash_attn_interface)")
            raise TypeError(f"{n}: dtype {t.dtype} is not supported; allowed: "
                            f"{', '.join(str(d) for d in allowed)}{hint}")
    for n, t in zip(names[1:], tensors[1:]):
        if t.dtype != tensors[0].dtype:
            raise TypeError(f"{n}: dtype {t.dtype} differs from {names[0]}'s dtype {tensors[0].dtype}; "
                            f"{', '.join(names)} must share one dtype")


def check_same_device(named: Sequence[tuple]) -> None:
    """named: (name, tensor or None) pairs; all tensors must share the first one's device."""
    first_name, first = named[0]
    # CUDA tensors compare by device index (no torch.device objects built); others compare their
    # devices (CPU and meta tensors would both report index -1)
    cuda_index = first.get_device() if first.is_cuda else None
    for n, t in named[1:]:
        if t is None:
            continue
        same = (t.is_cuda and t.get_device() == cuda_index) if cuda_index is not None else t.device == first.device
        if not same:
            raise ValueError(f"{n}: is on device {t.device}, but {first_name} is on {first.device}; "
                             f"all tensors must be on one CUDA device")


def check_cuda(name: str, t: torch.Tensor) -> None:
    if not t.is_cuda:  # (cheaper than t.device.type, which builds a torch.device)
        raise ValueError(f"{name}: must be a CUDA tensor, got a tensor on device '{t.device}'; "
                         f"move the inputs to a GPU with .cuda()")


def check_head_dims(names: Sequence[str], d: int, dk: int, dv: int) -> None:
    qn, kn, vn = names
    if dk != d:
        raise ValueError(f"{kn}: head dim (last dimension) {dk} differs from {qn}'s head dim {d}; "
                         f"they must be equal")
    compiled = _lib.COMPILED_HEAD_DIMS
    if d not in compiled:
        raise ValueError(f"{qn}: head dim {d} is not compiled into this build (compiled head dims: "
                         f"{list(compiled)}); rebuild with -C cmake.define.FLASHCUTE_HDIMS=\"{d}\" "
                         f"(allowed in FLASHCUTE_HDIMS: 64;96;128;192;256)")
    if dv != d and (d, dv) not in _lib.COMPILED_SHAPES:
        pairs = [p for p in _lib.COMPILED_SHAPES if p[0] != p[1]]
        raise ValueError(f"{vn}: head dim {dv} differs from {qn}'s head dim {d}; allowed: equal head dims"
                         + (f", or the (head_dim, head_dim_v) pairs {pairs}" if pairs else
                            ", or (192, 128) in a build with FLASHCUTE_HDIMS containing 192 and "
                            "FLASHCUTE_CUDA_ARCHS containing 90a"))


def check_heads(names: Sequence[str], hq: int, hk: int, hv: int) -> None:
    qn, kn, vn = names
    if hv != hk:
        raise ValueError(f"{vn}: has {hv} heads but {kn} has {hk}; {kn} and {vn} must have the same heads")
    if hk <= 0 or hq % hk != 0:
        raise ValueError(f"{kn}: has {hk} heads, which does not divide {qn}'s {hq} heads; "
                         f"heads_q must be a multiple of heads_k (GQA/MQA)")


def check_window_softcap_scale(window_size, softcap, softmax_scale) -> tuple:
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(f"window_size: expected a pair (left, right), got {window_size!r}")
    wl, wr = window_size
    # each rule: a cheap test for the common case (exact ints / floats in range), then the full
    # check, which raises with the message, when that test fails
    if not (type(wl) is int and type(wr) is int and wl >= -1 and wr >= -1):
        _check_window_side("left", wl)
        _check_window_side("right", wr)
    if not (type(softcap) is float and 0.0 <= softcap <= _FLOAT_MAX):
        _check_softcap(softcap)
    if softmax_scale is not None and not (type(softmax_scale) is float
                                          and -_FLOAT_MAX <= softmax_scale <= _FLOAT_MAX):
        _check_softmax_scale(softmax_scale)
    return int(wl), int(wr)


def _check_softcap(softcap) -> None:
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"softcap: expected a float, got {type(softcap).__name__}")
    if not (softcap >= 0.0) or not math.isfinite(softcap):
        raise ValueError(f"softcap: got {softcap}; must be finite and >= 0 (0 = off)")


def _check_softmax_scale(softmax_scale) -> None:
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)):
        raise TypeError(f"softmax_scale: expected a float or None, got {type(softmax_scale).__name__}")
    if not math.isfinite(softmax_scale):
        raise ValueError(f"softmax_scale: got {softmax_scale}; must be finite")


def _check_window_side(side: str, w) -> None:
    if isinstance(w, bool) or not isinstance(w, int):
        raise TypeError(f"window_size: {side} value must be an int, got {type(w).__name__} {w!r}")
    if w < -1:
        raise ValueError(f"window_size: {side} value {w} must be >= -1 (-1 = unbounded)")


def check_backend(backend) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend: got {backend!r}; allowed: {', '.join(repr(b) for b in BACKENDS)}")


def _check_ranks(names: Sequence[str], tensors: Sequence[torch.Tensor], layout: str) -> None:
    want = layout.count(",") + 1
    q, k, v = tensors
    if q.dim() == want and k.dim() == want and v.dim() == want:
        return
    for n, t in zip(names, tensors):
        if t.dim() != want:
            raise ValueError(f"{n}: expected {want} dimensions {layout}, got {t.dim()} (shape {tuple(t.shape)})")


def _check_int_tensor(name: str, t: torch.Tensor, length: Optional[int], what: str) -> None:
    if t.dtype != torch.int32:
        raise TypeError(f"{name}: dtype {t.dtype}; must be torch.int32")
    if t.dim() != 1:
        raise ValueError(f"{name}: expected a 1-D tensor ({what}), got shape {tuple(t.shape)}")
    if length is not None and t.shape[0] != length:
        raise ValueError(f"{name}: has {t.shape[0]} entries; expected {length} ({what})")


def check_descales(names_and: Sequence[tuple], dtype, batch: int, heads_k: int, qname: str,
                   blocks: Optional[tuple] = None) -> None:
    """blocks: block-wise descales (the V^T kernels'), ((batch, heads_q, seqlen_q) for q,
    (batch, heads_k, key blocks) for k and v); None: one per (batch, heads_k)."""
    for i, (n, t) in enumerate(names_and):
        if t is None:
            continue
        _is_tensor(n, t)
        if dtype not in _FP8_DTYPES:
            raise ValueError(f"{n}: descale factors apply only to float8_e4m3fn inputs, but {qname} is {dtype}")
        if t.dtype != torch.float32:
            raise TypeError(f"{n}: dtype {t.dtype}; must be torch.float32")
        if blocks is not None:
            want = blocks[0] if i == 0 else blocks[1]
            if tuple(t.shape) != want:
                raise ValueError(f"{n}: shape {tuple(t.shape)}; block-wise descales expected {want}")
        elif tuple(t.shape) != (batch, heads_k):
            raise ValueError(f"{n}: shape {tuple(t.shape)}; expected (batch, heads_k) = ({batch}, {heads_k})")


_EXTRA_NAMES = ("cu_seqlens_q", "cu_seqlens_k", "seqused_k", "q_descale", "k_descale", "v_descale")
_DESCALE_NAMES = _EXTRA_NAMES[3:]


def check_fwd(q, k, v, *, names=("q", "k", "v"), varlen=False, cu_seqlens_q=None, cu_seqlens_k=None,
              max_seqlen_q=None, max_seqlen_k=None, seqused_k=None, window_size=(-1, -1), softcap=0.0,
              softmax_scale=None, causal=False, allow_fp8=False, descales=(None, None, None),
              backend="auto", layout=None, fp8_mode=None, descale_block_keys=0) -> tuple:
    """All structural rules. q/k/v are in FA layout: (batch, seqlen, heads, dim) dense or
    (total, heads, dim) varlen. fp8_mode: an FP8Config when the FP8 mode is on (bf16/fp16 inputs
    quantized by flashcute). descale_block_keys > 0: the descales are block-wise (dense, the FP8
    V^T kernels': fp8.quantize_qkv(block_keys=...)). Returns (window_left, window_right).

    This runs on every eager call, so the rules are written to be cheap when they pass: shapes
    are read once, and messages are only built on failure."""
    qn, kn, vn = names
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
        _are_tensors(names, (q, k, v))  # raises
    if not isinstance(causal, bool):
        raise TypeError(f"causal: expected a bool, got {type(causal).__name__}")
    check_backend(backend)
    if fp8_mode is not None:
        check_fp8_mode(fp8_mode, backend, descales)
    check_input_dtypes(names, (q, k, v), allow_fp8, fp8_mode=fp8_mode is not None)
    if layout is None:
        layout = ("(total, heads, head_dim)" if varlen else "(batch, seqlen, heads, head_dim)")
    _check_ranks(names, (q, k, v), layout)
    q_descale, k_descale, v_descale = descales
    extra = (cu_seqlens_q, cu_seqlens_k, seqused_k, q_descale, k_descale, v_descale)
    named = [(qn, q), (kn, k), (vn, v)]
    for n, t in zip(_EXTRA_NAMES, extra):
        if t is not None:
            _is_tensor(n, t)
            named.append((n, t))
    check_same_device(named)
    wl, wr = check_window_softcap_scale(window_size, softcap, softmax_scale)

    qsh, ksh, vsh = q.shape, k.shape, v.shape
    hq, d = qsh[-2], qsh[-1]
    hk, dk = ksh[-2], ksh[-1]
    hv, dv = vsh[-2], vsh[-1]
    check_heads(names, hq, hk, hv)
    check_head_dims(names, d, dk, dv)
    if fp8_mode is not None and fp8_mode.rotate:
        from .fp8 import rotation_supported
        if not rotation_supported(d):
            raise ValueError(f"fp8: FP8Config(rotate=True) needs a head dim that is a power of two or 12 * 2^k, "
                             f"but {qn} has head dim {d}; pass FP8Config(rotate=False)")

    if varlen:
        batch = _check_varlen_layout(names, ksh, vsh, qsh[0], cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                     max_seqlen_k, seqused_k)
    else:
        if seqused_k is not None or cu_seqlens_q is not None or cu_seqlens_k is not None:
            raise ValueError("cu_seqlens_q/cu_seqlens_k/seqused_k: only for the varlen layout")
        batch = qsh[0]
        if ksh[0] != batch or vsh[0] != batch:
            n, t = (kn, ksh) if ksh[0] != batch else (vn, vsh)
            raise ValueError(f"{n}: batch size {t[0]} differs from {qn}'s batch size {batch}")
        if vsh[1] != ksh[1]:
            raise ValueError(f"{vn}: has seqlen {vsh[1]} but {kn} has seqlen {ksh[1]}; they must be equal")

    if q_descale is not None or k_descale is not None or v_descale is not None:
        blocks = None
        if descale_block_keys > 0 and not varlen:
            blocks = ((batch, hq, qsh[1]), (batch, hk, -(-ksh[1] // descale_block_keys)))
        check_descales(zip(_DESCALE_NAMES, descales), q.dtype, batch, hk, qn, blocks)
    return wl, wr


def _check_varlen_layout(names, ksh, vsh, total_q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         seqused_k) -> int:
    """check_fwd's varlen rules (shapes and dtypes of cu_seqlens / seqused_k, max_seqlen bounds);
    returns the batch size."""
    _, kn, vn = names
    if cu_seqlens_q is None or cu_seqlens_k is None:
        missing = "cu_seqlens_q" if cu_seqlens_q is None else "cu_seqlens_k"
        raise ValueError(f"{missing}: is None; the varlen layout needs both cu_seqlens_q and cu_seqlens_k")
    _check_int_tensor("cu_seqlens_q", cu_seqlens_q, None, "batch + 1 offsets")
    if cu_seqlens_q.shape[0] < 1:
        raise ValueError("cu_seqlens_q: is empty; it needs batch + 1 >= 1 entries (starting with 0)")
    batch = cu_seqlens_q.shape[0] - 1
    _check_int_tensor("cu_seqlens_k", cu_seqlens_k, batch + 1, f"batch + 1, as cu_seqlens_q has {batch + 1}")
    if ksh[0] != vsh[0]:
        raise ValueError(f"{vn}: has {vsh[0]} rows (total_k) but {kn} has {ksh[0]}; they must be equal")
    _check_max_seqlen("max_seqlen_q", max_seqlen_q, total_q, "total_q")
    _check_max_seqlen("max_seqlen_k", max_seqlen_k, ksh[0], "total_k")
    if seqused_k is not None:
        _check_int_tensor("seqused_k", seqused_k, batch, "one count per sequence")
    return batch


def _check_max_seqlen(name: str, m, total: int, total_name: str) -> None:
    if isinstance(m, bool) or not isinstance(m, int):
        raise TypeError(f"{name}: expected an int, got {type(m).__name__}")
    if m < 0:
        raise ValueError(f"{name}: got {m}; must be >= 0")
    if m > total:
        raise ValueError(f"{name}: got {m}, more than the {total} rows of the packed tensor ({total_name})")


def check_fp8_mode(cfg, backend, descales) -> None:
    """The FP8 mode's own rules: Hopper kernels only, and flashcute makes the descales."""
    if backend == "sm80":
        raise ValueError("backend: 'sm80' has no FP8 kernels; the FP8 mode (fp8=...) needs backend 'auto' or "
                         "'sm90' on a Hopper GPU (compute capability 9.0)")
    if any(t is not None for t in descales):
        raise ValueError("q_descale/k_descale/v_descale: the FP8 mode computes its own descales; pass "
                         "float8_e4m3fn inputs with descales through flashcute.flash_attn_interface instead")


def values_readable(*tensors) -> bool:
    """Whether reading tensor values on the host is allowed and possible right now."""
    if torch.compiler.is_compiling():
        return False
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return False
    for t in tensors:
        if t is not None and (t.is_meta or (type(t) is not torch.Tensor and _is_fake(t))):
            return False
    return True


def _is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


def _host_lists(*tensors) -> list:
    """The 1-D tensors' values as lists; CUDA tensors are read with one device-to-host copy (so
    one host synchronisation) for all of them."""
    if len(tensors) > 1 and tensors[0].is_cuda:
        flat = torch.cat(tensors).tolist()
        out, start = [], 0
        for t in tensors:
            out.append(flat[start:start + t.shape[0]])
            start += t.shape[0]
        return out
    return [t.tolist() for t in tensors]


def check_varlen_values(cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                        total_q, total_k) -> None:
    """The rules that read cu_seqlens / seqused_k (one host sync). Call only if values_readable()."""
    host = _host_lists(cu_seqlens_q, cu_seqlens_k, *(() if seqused_k is None else (seqused_k,)))
    for name, vals, m, total, tn, mn in (
            ("cu_seqlens_q", host[0], max_seqlen_q, total_q, "total_q", "max_seqlen_q"),
            ("cu_seqlens_k", host[1], max_seqlen_k, total_k, "total_k", "max_seqlen_k")):
        if vals[0] != 0:
            raise ValueError(f"{name}: must start with 0, got {vals[0]}")
        lens = [b - a for a, b in zip(vals[:-1], vals[1:])]
        if any(n < 0 for n in lens):
            i = next(i for i, n in enumerate(lens) if n < 0)
            raise ValueError(f"{name}: must be non-decreasing, but entry {i + 1} ({vals[i + 1]}) < entry {i} ({vals[i]})")
        if vals[-1] > total:
            raise ValueError(f"{name}: last entry {vals[-1]} exceeds the {total} rows of the packed tensor ({tn})")
        if lens and max(lens) > m:
            raise ValueError(f"{mn}: got {m}, but the longest sequence in {name} has {max(lens)} rows; "
                             f"{mn} must be >= every sequence length")
        if name == "cu_seqlens_k":
            k_lens = lens
    if seqused_k is not None:
        for b, (u, n) in enumerate(zip(host[2], k_lens)):
            if u < 0 or u > n:
                raise ValueError(f"seqused_k: entry {b} is {u}; must be in [0, {n}] (the length of "
                                 f"sequence {b} in cu_seqlens_k)")
