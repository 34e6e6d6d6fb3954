"""CPU: the ctypes mirror in flashcute/_lib.py matches the library and the header."""
import ctypes
import pathlib
import re

import flashcute
from flashcute import _lib

HEADER = pathlib.Path(__file__).resolve().parents[1] / "include" / "flashcute" / "flashcute.h"


def test_struct_size_equals_library():
    assert ctypes.sizeof(_lib.FwdArgs) == _lib.lib_fwd_args_size()


def test_abi_version():
    assert _lib.lib_abi_version() == _lib.ABI_VERSION


def _header_struct_fields(struct="flashcute_fwd_args"):
    text = HEADER.read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    body = re.search(rf"typedef struct {struct} \{{(.*?)\}} {struct};", text, re.S).group(1)
    names = []
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl:
            continue
        m = re.match(r"(?:const\s+)?[\w]+\s*\**\s*(.*)", decl, re.S)
        for n in m.group(1).split(","):
            names.append(re.sub(r"\[\d+\]$", "", n.strip().lstrip("*").strip()))
    return names


def test_struct_fields_match_header_order():
    assert [f[0] for f in _lib.FwdArgs._fields_] == _header_struct_fields()


def test_fp8_quantize_struct_matches_library_and_header():
    assert ctypes.sizeof(_lib.Fp8QuantizeArgs) == _lib.lib_fp8_quantize_args_size()
    assert [f[0] for f in _lib.Fp8QuantizeArgs._fields_] == _header_struct_fields("flashcute_fp8_quantize_args")
    assert re.search(rf"#define FLASHCUTE_FP8_QUANTIZE_MAX_TENSORS {_lib.FP8_QUANTIZE_MAX_TENSORS}\b",
                     HEADER.read_text())


def test_enum_values_match_header():
    text = HEADER.read_text()
    for name, value in [("FLASHCUTE_OK", _lib.OK), ("FLASHCUTE_ERROR_INVALID_ARGUMENT", _lib.ERROR_INVALID_ARGUMENT),
                        ("FLASHCUTE_ERROR_UNSUPPORTED", _lib.ERROR_UNSUPPORTED), ("FLASHCUTE_ERROR_CUDA", _lib.ERROR_CUDA),
                        ("FLASHCUTE_ERROR_INTERNAL", _lib.ERROR_INTERNAL), ("FLASHCUTE_DTYPE_FP16", _lib.DTYPE_FP16),
                        ("FLASHCUTE_DTYPE_BF16", _lib.DTYPE_BF16), ("FLASHCUTE_DTYPE_E4M3", _lib.DTYPE_E4M3),
                        ("FLASHCUTE_BACKEND_AUTO", _lib.BACKEND_AUTO), ("FLASHCUTE_BACKEND_SM80", _lib.BACKEND_SM80),
                        ("FLASHCUTE_BACKEND_SM90", _lib.BACKEND_SM90),
                        ("FLASHCUTE_ALIGN_BOTTOM_RIGHT", _lib.ALIGN_BOTTOM_RIGHT),
                        ("FLASHCUTE_ALIGN_TOP_LEFT", _lib.ALIGN_TOP_LEFT)]:
        assert re.search(rf"\b{name}\s*=\s*{value}\b", text), name
    assert re.search(rf"#define FLASHCUTE_ABI_VERSION {_lib.ABI_VERSION}\b", text)


def test_build_info_and_version():
    info = flashcute.build_info()
    for key in ("version", "abi_version", "cuda_archs", "head_dims", "dtypes", "kernels", "fp8", "fp8_quantize"):
        assert key in info
    assert info["version"] == flashcute.__version__
    assert info["abi_version"] == _lib.ABI_VERSION
    assert not info["fp8_quantize"] or info["fp8"], "the quantizer is built with the FP8 kernels"


def test_struct_size_mismatch_is_import_error(monkeypatch):
    import pytest

    class Bigger(ctypes.Structure):
        _fields_ = _lib.FwdArgs._fields_ + [("extra", ctypes.c_int64)]

    monkeypatch.setattr(_lib, "FwdArgs", Bigger)
    with pytest.raises(ImportError, match="pip install"):
        _lib._load()


def test_missing_library_is_import_error(monkeypatch, tmp_path):
    import pytest

    monkeypatch.setenv("FLASHCUTE_LIBRARY", str(tmp_path / "nope.so"))
    with pytest.raises(ImportError, match="pip install"):
        _lib._load()


def test_foreign_library_is_import_error(monkeypatch):
    import pytest

    libc = "libc.so.6"
    path = next((p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6")
                 if pathlib.Path(p).is_file()), None)
    if path is None:
        pytest.skip(f"no libc file found ({libc})")
    monkeypatch.setenv("FLASHCUTE_LIBRARY", path)
    with pytest.raises(ImportError, match="entry point"):
        _lib._load()
