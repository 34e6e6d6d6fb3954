"""The one place in Python that touches ctypes: it loads libflashcute.so and mirrors
include/flashcute/flashcute.h (constants, the argument struct, every entry point).

At import it checks that the library's ABI version and its sizeof(flashcute_fwd_args) equal
what this file declares, so a stale or foreign library fails loudly instead of misreading
arguments. Any problem loading the library is an ImportError that says how to fix it.

Developers may point FLASHCUTE_LIBRARY at a library in a build tree instead of the installed
one next to this file.
"""
from __future__ import annotations

import ctypes
import json
import os
import pathlib
import struct
from typing import Optional

__all__ = [
    "ABI_VERSION", "LIBRARY_PATH", "FwdArgs", "fwd", "fwd_args", "build_info", "supported", "version",
    "last_error", "Support", "Fp8QuantizeArgs", "fp8_quantize", "fp8_quantize_with_workspace",
    "fp8_quantize_supported",
]

# ---- constants (flashcute.h) ------------------------------------------------------------------
ABI_VERSION = 1

OK = 0
ERROR_INVALID_ARGUMENT = 1
ERROR_UNSUPPORTED = 2
ERROR_CUDA = 3
ERROR_INTERNAL = 4

DTYPE_FP16 = 0
DTYPE_BF16 = 1
DTYPE_E4M3 = 2

BACKEND_AUTO = 0
BACKEND_SM80 = 1
BACKEND_SM90 = 2
BACKENDS = {"auto": BACKEND_AUTO, "sm80": BACKEND_SM80, "sm90": BACKEND_SM90}
BACKEND_NAMES = {v: k for k, v in BACKENDS.items()}

ALIGN_BOTTOM_RIGHT = 0
ALIGN_TOP_LEFT = 1

FP8_QUANTIZE_MAX_TENSORS = 4

_REBUILD_HINT = (
    "reinstall flashcute (`pip install --force-reinstall flashcute`), or rebuild it from the "
    "source tree with `pip install .`; developers can set FLASHCUTE_LIBRARY to the path of a "
    "freshly built libflashcute.so"
)


# ---- the argument struct: field for field as in flashcute.h -----------------------------------
_i64 = ctypes.c_int64
_i32 = ctypes.c_int32


class FwdArgs(ctypes.Structure):
    """Mirror of flashcute_fwd_args. Fields only ever get appended in the header; append here."""

    _fields_ = [
        ("struct_size", ctypes.c_uint64),
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),  # float*
        ("q_batch_stride", _i64), ("q_row_stride", _i64), ("q_head_stride", _i64),
        ("k_batch_stride", _i64), ("k_row_stride", _i64), ("k_head_stride", _i64),
        ("v_batch_stride", _i64), ("v_row_stride", _i64), ("v_head_stride", _i64),
        ("out_batch_stride", _i64), ("out_row_stride", _i64), ("out_head_stride", _i64),
        ("lse_batch_stride", _i64), ("lse_head_stride", _i64),
        ("batch", _i32),
        ("seqlen_q", _i32),
        ("seqlen_k", _i32),
        ("heads_q", _i32),
        ("heads_k", _i32),
        ("head_dim", _i32),
        ("head_dim_v", _i32),
        ("dtype", _i32),
        ("out_dtype", _i32),
        ("softmax_scale", ctypes.c_float),
        ("causal", _i32),
        ("window_left", _i32),
        ("window_right", _i32),
        ("mask_align", _i32),
        ("softcap", ctypes.c_float),
        ("cu_seqlens_q", ctypes.c_void_p),  # const int32_t*
        ("cu_seqlens_k", ctypes.c_void_p),
        ("seqused_k", ctypes.c_void_p),
        ("total_q", _i64),
        ("total_k", _i64),
        ("q_descale", ctypes.c_void_p),  # const float*
        ("k_descale", ctypes.c_void_p),
        ("v_descale", ctypes.c_void_p),
        ("descale_batch_stride", _i64), ("descale_head_stride", _i64),
        ("backend", _i32),
        ("device", _i32),
        ("stream", ctypes.c_void_p),  # cudaStream_t
        ("v_colmajor", _i32),  # e4m3 dense: v is the permuted, padded V^T (flashcute.fp8.v_colmajor)
        ("tile_counter", ctypes.c_void_p),  # int32[2] on the device, zero: causal/local tiles handed out dynamically
        ("descale_block_keys", _i32),  # > 0: block-wise FP8 descales (q per row, k/v per key block)
        ("q_descale_batch_stride", _i64), ("q_descale_head_stride", _i64),
    ]


class Fp8QuantizeArgs(ctypes.Structure):
    """Mirror of flashcute_fp8_quantize_args (one tensor of a flashcute_fp8_quantize call)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint64),
        ("x", ctypes.c_void_p),
        ("x8", ctypes.c_void_p),
        ("descale", ctypes.c_void_p),  # float*
        ("x_batch_stride", _i64), ("x_row_stride", _i64), ("x_head_stride", _i64),
        ("x8_batch_stride", _i64), ("x8_row_stride", _i64), ("x8_head_stride", _i64),
        ("descale_batch_stride", _i64), ("descale_head_stride", _i64),
        ("batch", _i32),
        ("seqlen", _i32),
        ("heads", _i32),
        ("heads_k", _i32),
        ("head_dim", _i32),
        ("dtype", _i32),
        ("rotate", _i32),
        ("rotation_signs", ctypes.c_uint32 * 8),
        ("x8_vt", _i32),  # x8 written as V^T (flashcute.fp8.quantize_qkv(..., v_colmajor=True))
        ("row_bounds", ctypes.c_void_p),  # const int32_t*: varlen slots as packed row ranges (fp8._row_bounds)
        ("block_rows", _i32),  # > 0: one scale per block of rows (fp8.quantize_qkv(block_keys=...))
    ]


# ---- packing FwdArgs in one call --------------------------------------------------------------
# Setting ~45 ctypes fields one by one costs a few microseconds per launch; struct.pack fills the
# same bytes in one C call. The format is derived from FwdArgs's own field offsets and sizes, so it
# cannot drift from the declaration above (and _load checks both against the library's size).
_STRUCT_CODES = {ctypes.c_uint64: "Q", ctypes.c_void_p: "Q", ctypes.c_int64: "q", ctypes.c_int32: "i",
                 ctypes.c_uint32: "I", ctypes.c_float: "f"}


def _struct_of(cls) -> struct.Struct:
    """A struct.Struct with exactly cls's layout (native byte order, explicit padding)."""
    assert ctypes.sizeof(ctypes.c_void_p) == 8, "pointers are packed as 64-bit integers"
    fmt, end = ["="], 0
    for name, ctype in cls._fields_:
        offset = getattr(cls, name).offset
        fmt.append("x" * (offset - end) + _STRUCT_CODES[ctype])
        end = offset + ctypes.sizeof(ctype)
    fmt.append("x" * (ctypes.sizeof(cls) - end))
    packer = struct.Struct("".join(fmt))
    if packer.size != ctypes.sizeof(cls):
        raise ImportError(f"flashcute: the struct layout derived from {cls.__name__} has {packer.size} bytes, "
                          f"ctypes says {ctypes.sizeof(cls)}")
    return packer


_FWD_STRUCT = _struct_of(FwdArgs)
_FWD_ARGS_SIZE = ctypes.sizeof(FwdArgs)


def fwd_args(q, k, v, out, lse, q_strides, k_strides, v_strides, out_strides, lse_strides,
             batch, seqlen_q, seqlen_k, heads_q, heads_k, head_dim, head_dim_v, dtype, out_dtype,
             softmax_scale, causal, window_left, window_right, mask_align, softcap,
             cu_seqlens_q, cu_seqlens_k, seqused_k, total_q, total_k,
             q_descale, k_descale, v_descale, descale_strides, backend, device, stream,
             v_colmajor=0, tile_counter=0, descale_block_keys=0, q_descale_strides=(0, 0)) -> FwdArgs:
    """A FwdArgs with every field set (struct_size included), in the header's field order.
    Pointers are ints (0 = NULL); q/k/v/out_strides are (batch, row, head) triples, lse_strides
    and descale_strides / q_descale_strides (batch, head) pairs. Packed in one struct.pack; values that struct refuses
    but ctypes accepts (an int beyond the field's range, a float beyond float32's) are set field
    by field instead, so the result is always what assigning the fields would give."""
    values = (_FWD_ARGS_SIZE, q, k, v, out, lse, *q_strides, *k_strides, *v_strides, *out_strides,
              *lse_strides, batch, seqlen_q, seqlen_k, heads_q, heads_k, head_dim, head_dim_v, dtype,
              out_dtype, softmax_scale, causal, window_left, window_right, mask_align, softcap,
              cu_seqlens_q, cu_seqlens_k, seqused_k, total_q, total_k, q_descale, k_descale, v_descale,
              *descale_strides, backend, device, stream, v_colmajor, tile_counter, descale_block_keys,
              *q_descale_strides)
    try:
        return FwdArgs.from_buffer_copy(_FWD_STRUCT.pack(*values))
    except (struct.error, OverflowError):
        return _fwd_args_by_field(values)


def _fwd_args_by_field(values) -> FwdArgs:
    if len(values) != len(FwdArgs._fields_):
        raise TypeError(f"fwd_args: {len(values)} values for the {len(FwdArgs._fields_)} fields of FwdArgs")
    a = FwdArgs()
    for (name, _), value in zip(FwdArgs._fields_, values):
        setattr(a, name, value)
    return a


# ---- loading ----------------------------------------------------------------------------------
def _library_path() -> pathlib.Path:
    override = os.environ.get("FLASHCUTE_LIBRARY")
    if override:
        return pathlib.Path(override)
    return pathlib.Path(__file__).resolve().parent / "libflashcute.so"


def _declare(lib: ctypes.CDLL) -> None:
    lib.flashcute_fwd_args_size.argtypes = []
    lib.flashcute_fwd_args_size.restype = ctypes.c_size_t
    lib.flashcute_fwd.argtypes = [ctypes.POINTER(FwdArgs)]
    lib.flashcute_fwd.restype = ctypes.c_int
    lib.flashcute_last_error.argtypes = []
    lib.flashcute_last_error.restype = ctypes.c_char_p
    lib.flashcute_version.argtypes = []
    lib.flashcute_version.restype = ctypes.c_char_p
    lib.flashcute_abi_version.argtypes = []
    lib.flashcute_abi_version.restype = ctypes.c_int
    lib.flashcute_build_info.argtypes = []
    lib.flashcute_build_info.restype = ctypes.c_char_p
    lib.flashcute_fwd_supported.argtypes = [
        ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
        ctypes.POINTER(ctypes.c_int)]
    lib.flashcute_fwd_supported.restype = ctypes.c_int
    lib.flashcute_fp8_quantize_args_size.argtypes = []
    lib.flashcute_fp8_quantize_args_size.restype = ctypes.c_size_t
    lib.flashcute_fp8_quantize_workspace_size.argtypes = [ctypes.POINTER(ctypes.POINTER(Fp8QuantizeArgs)),
                                                          ctypes.c_int]
    lib.flashcute_fp8_quantize_workspace_size.restype = ctypes.c_size_t
    lib.flashcute_fp8_quantize.argtypes = [ctypes.POINTER(ctypes.POINTER(Fp8QuantizeArgs)), ctypes.c_int,
                                           ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.flashcute_fp8_quantize.restype = ctypes.c_int
    lib.flashcute_fp8_quantize_supported.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.flashcute_fp8_quantize_supported.restype = ctypes.c_int
    lib.flashcute_fp8_descale_block_keys.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.flashcute_fp8_descale_block_keys.restype = ctypes.c_int


def _load():
    path = _library_path()
    if not path.is_file():
        where = "FLASHCUTE_LIBRARY points at" if os.environ.get("FLASHCUTE_LIBRARY") else "expected"
        raise ImportError(f"flashcute: the compiled core libflashcute.so was not found ({where} {path}); "
                          f"{_REBUILD_HINT}")
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise ImportError(f"flashcute: could not load {path}: {e}; {_REBUILD_HINT}") from e
    try:
        _declare(lib)
    except AttributeError as e:  # a symbol is missing: not our library, or a very old one
        raise ImportError(f"flashcute: {path} lacks an entry point of the flashcute C ABI ({e}); "
                          f"{_REBUILD_HINT}") from e
    abi = lib.flashcute_abi_version()
    if abi != ABI_VERSION:
        raise ImportError(f"flashcute: {path} has C ABI version {abi}, but this Python package "
                          f"expects version {ABI_VERSION}; {_REBUILD_HINT}")
    size = lib.flashcute_fwd_args_size()
    if size != ctypes.sizeof(FwdArgs):
        raise ImportError(f"flashcute: {path} reports sizeof(flashcute_fwd_args) = {size} bytes, but "
                          f"flashcute/_lib.py declares {ctypes.sizeof(FwdArgs)} bytes (the header and "
                          f"the Python mirror have drifted apart); {_REBUILD_HINT}")
    qsize = lib.flashcute_fp8_quantize_args_size()
    if qsize != ctypes.sizeof(Fp8QuantizeArgs):
        raise ImportError(f"flashcute: {path} reports sizeof(flashcute_fp8_quantize_args) = {qsize} bytes, but "
                          f"flashcute/_lib.py declares {ctypes.sizeof(Fp8QuantizeArgs)} bytes (the header and "
                          f"the Python mirror have drifted apart); {_REBUILD_HINT}")
    return lib, path


_lib, LIBRARY_PATH = _load()


# ---- thin wrappers ----------------------------------------------------------------------------
def last_error() -> str:
    msg = _lib.flashcute_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def version() -> str:
    return _lib.flashcute_version().decode()


def lib_fwd_args_size() -> int:
    return int(_lib.flashcute_fwd_args_size())


def lib_fp8_quantize_args_size() -> int:
    return int(_lib.flashcute_fp8_quantize_args_size())


def lib_abi_version() -> int:
    return int(_lib.flashcute_abi_version())


def fp8_descale_block_keys(head_dim: int, head_dim_v: int, seqlen_k: int) -> int:
    """The key block of block-wise FP8 descales (the sm90 FP8 V^T kernel's key tile) for these
    head dims and seqlen_k; 0 where the library has no block-wise descales for them."""
    return int(_lib.flashcute_fp8_descale_block_keys(int(head_dim), int(head_dim_v), int(seqlen_k)))


def _raise_for_status(status: int, what: str) -> None:
    if status == OK:
        return
    msg = last_error() or "(no message)"
    if status == ERROR_INVALID_ARGUMENT:
        raise ValueError(f"flashcute: {msg}")
    if status == ERROR_UNSUPPORTED:
        # NotImplementedError is a RuntimeError, so `except RuntimeError` also catches it.
        raise NotImplementedError(f"flashcute: {msg}")
    if status == ERROR_CUDA:
        raise RuntimeError(f"flashcute: CUDA error in {what}: {msg}")
    if status == ERROR_INTERNAL:
        raise RuntimeError(f"flashcute: internal error in {what} (please report it): {msg}")
    raise RuntimeError(f"flashcute: {what} returned unknown status {status}: {msg}")


def fwd(args: FwdArgs) -> None:
    """Launch flashcute_fwd; asynchronous on args.stream. Raises on a non-OK status."""
    args.struct_size = ctypes.sizeof(FwdArgs)
    status = _lib.flashcute_fwd(ctypes.byref(args))
    _raise_for_status(status, "flashcute_fwd")


def _quantize_array(tensors):
    n = len(tensors)
    if not 1 <= n <= FP8_QUANTIZE_MAX_TENSORS:
        raise ValueError(f"fp8_quantize: {n} tensors; one call takes 1 to {FP8_QUANTIZE_MAX_TENSORS}")
    for a in tensors:
        a.struct_size = ctypes.sizeof(Fp8QuantizeArgs)
    return (ctypes.POINTER(Fp8QuantizeArgs) * n)(*[ctypes.pointer(a) for a in tensors]), n


def fp8_quantize_workspace_size(tensors) -> int:
    """Bytes of workspace flashcute_fp8_quantize needs for these Fp8QuantizeArgs."""
    arr, n = _quantize_array(tensors)
    return int(_lib.flashcute_fp8_quantize_workspace_size(arr, n))


def fp8_quantize(tensors, workspace: int, workspace_bytes: int, device: int, stream: int) -> None:
    """Launch flashcute_fp8_quantize on a list of Fp8QuantizeArgs (one launch for all of them);
    asynchronous on `stream`. Raises on a non-OK status."""
    arr, n = _quantize_array(tensors)
    status = _lib.flashcute_fp8_quantize(arr, n, workspace, workspace_bytes, int(device), stream)
    _raise_for_status(status, "flashcute_fp8_quantize")


def fp8_quantize_with_workspace(tensors, make_workspace, device: int, stream: int):
    """fp8_quantize_workspace_size, then fp8_quantize with the workspace make_workspace(nbytes)
    returns as (pointer, owner); the argument array is built once for both. Returns the owner
    (keep it alive until the launch is enqueued)."""
    arr, n = _quantize_array(tensors)
    nbytes = int(_lib.flashcute_fp8_quantize_workspace_size(arr, n))
    pointer, owner = make_workspace(nbytes)
    status = _lib.flashcute_fp8_quantize(arr, n, pointer, nbytes, int(device), stream)
    _raise_for_status(status, "flashcute_fp8_quantize")
    return owner


def fp8_quantize_supported(device: int, dtype: int, head_dim: int, rotate: bool) -> Support:
    """Whether flashcute_fp8_quantize runs for (dtype, head_dim, rotate) on CUDA device `device`
    (-1 = current); .reason says why not (not built, not Hopper, no in-kernel rotation)."""
    status = _lib.flashcute_fp8_quantize_supported(int(device), int(dtype), int(head_dim), int(bool(rotate)))
    if status == OK:
        return Support(True, "sm90", "")
    return Support(False, None, last_error())


_BUILD_INFO: Optional[dict] = None


def build_info() -> dict:
    """The library's build description (archs, head dims, dtypes, kernels, CUDA, CUTLASS)."""
    global _BUILD_INFO
    if _BUILD_INFO is None:
        _BUILD_INFO = json.loads(_lib.flashcute_build_info().decode())
    return _BUILD_INFO


class Support:
    """Answer of supported(): truthy when the forward can run; .backend is what it resolves to
    ("sm80"/"sm90"), .reason the library's message when it cannot."""

    __slots__ = ("ok", "backend", "reason")

    def __init__(self, ok: bool, backend: Optional[str], reason: str):
        self.ok, self.backend, self.reason = ok, backend, reason

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return f"Support(ok={self.ok}, backend={self.backend!r}, reason={self.reason!r})"


def supported(device: int, backend: str, dtype: int, hdim: int, hdim_v: Optional[int] = None) -> Support:
    """Whether a forward with (backend, dtype, hdim, hdim_v) can run on CUDA device `device`
    (-1 = current). `backend` is "auto", "sm80" or "sm90"; `dtype` a DTYPE_* constant."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: got {backend!r}; allowed: {sorted(BACKENDS)}")
    resolved = ctypes.c_int(-1)
    status = _lib.flashcute_fwd_supported(int(device), BACKENDS[backend], int(dtype), int(hdim),
                                          int(hdim if hdim_v is None else hdim_v), ctypes.byref(resolved))
    if status == OK:
        return Support(True, BACKEND_NAMES.get(resolved.value), "")
    return Support(False, None, last_error())


# Values the Python validation needs, read once (also keeps torch.compile tracing free of ctypes).
_info = build_info()
COMPILED_HEAD_DIMS = tuple(int(d) for d in _info.get("head_dims", ()))
COMPILED_DTYPES = tuple(str(d) for d in _info.get("dtypes", ()))
# (head_dim, head_dim_v) pairs with a kernel in any family, e.g. (192, 128) on sm90.
COMPILED_SHAPES = tuple(sorted({(int(k["head_dim"]), int(k["head_dim_v"]))
                                for fam in _info.get("kernels", {}).values() for k in fam}))
del _info
