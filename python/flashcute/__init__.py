"""flashcute: exact attention for NVIDIA Hopper (sm90) with an Ampere-class (sm80) fallback.

Public API:
  flash_attn_func(q, k, v, ...)                   FlashAttention layout (batch, seqlen, heads, dim)
  flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...)
  scaled_dot_product_attention(query, key, value, ...)   torch SDPA's signature and layout
  build_info()                                    what the compiled core contains
  flashcute.flash_attn_interface                  FlashAttention-3's function names and signatures
  flashcute.reference.attention_ref               the float64 reference used by the tests
  flashcute.fp8                                   quantize / hadamard helpers; fp8=True or
                                                  fp8=FP8Config(...) selects the FP8 mode

The compiled core (libflashcute.so, next to this file) is reached only through flashcute._lib;
the torch ops are registered as torch.ops.flashcute.fwd by flashcute.ops.
"""
import pathlib as _pathlib

from . import _lib
from . import ops
from . import fp8
from .fp8 import FP8Config
from ._api import flash_attn_func, flash_attn_varlen_func, scaled_dot_product_attention

__version__ = _lib.version()

#: Prefix for CMake's find_package(flashcute CONFIG) against a pip-installed flashcute.
cmake_prefix_path = str(_pathlib.Path(__file__).resolve().parent)


def build_info() -> dict:
    """The compiled core's build description: version, ABI version, CUDA archs, head dims,
    dtypes, FP8, CUTLASS / CUDA versions, and the (dtype, head_dim, head_dim_v) kernels per
    backend. Also carries 'library_path'."""
    info = dict(_lib.build_info())
    info["library_path"] = str(_lib.LIBRARY_PATH)
    return info


def supported(device=-1, backend="auto", dtype="bf16", head_dim=128, head_dim_v=None):
    """Whether a forward can run on `device` with this backend / dtype / head dims: a truthy
    object with .backend (what "auto" resolves to) and .reason (why not)."""
    codes = {"fp16": _lib.DTYPE_FP16, "bf16": _lib.DTYPE_BF16, "e4m3": _lib.DTYPE_E4M3}
    try:
        import torch

        codes.update({torch.float16: _lib.DTYPE_FP16, torch.bfloat16: _lib.DTYPE_BF16})
        if hasattr(torch, "float8_e4m3fn"):
            codes[torch.float8_e4m3fn] = _lib.DTYPE_E4M3
        if isinstance(device, torch.device):
            device = -1 if device.index is None else device.index
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    if dtype not in codes:
        raise ValueError(f"dtype: got {dtype!r}; allowed: 'fp16', 'bf16', 'e4m3' or the torch dtypes")
    return _lib.supported(device, backend, codes[dtype], head_dim, head_dim_v)


__all__ = ["flash_attn_func", "flash_attn_varlen_func", "scaled_dot_product_attention", "build_info",
           "supported", "fp8", "FP8Config", "__version__", "cmake_prefix_path"]
