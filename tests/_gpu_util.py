"""Helpers shared by the GPU tests (not a test module)."""
import math

import pytest
import torch

import flashcute
from flashcute import _lib
from flashcute.ops import _fwd_into
from flashcute.reference import attention_ref


def shapes_for(backend):
    """(head_dim, head_dim_v) pairs compiled for a backend ("auto": any family)."""
    kernels = flashcute.build_info()["kernels"]
    fams = ["sm80", "sm90"] if backend == "auto" else [backend]
    s = {(k["head_dim"], k["head_dim_v"]) for f in fams for k in kernels.get(f, [])}
    return sorted(s) or [(d, d) for d in _lib.COMPILED_HEAD_DIMS]


def require(backend, dtype, d, dv):
    s = flashcute.supported(torch.cuda.current_device(), backend, dtype, d, dv)
    if not s:
        pytest.skip(f"not supported here: {s.reason}")


def nan_buffers(q, v, varlen):
    hq, dv = q.shape[-2], v.shape[-1]
    if varlen:
        out = torch.full((q.shape[0], hq, dv), math.nan, dtype=q.dtype, device=q.device)
        lse = torch.full((hq, q.shape[0]), math.nan, dtype=torch.float32, device=q.device)
    else:
        out = torch.full((q.shape[0], q.shape[1], hq, dv), math.nan, dtype=q.dtype, device=q.device)
        lse = torch.full((q.shape[0], hq, q.shape[1]), math.nan, dtype=torch.float32, device=q.device)
    return out, lse


def check_close(out, lse, q, k, v, what="", **ref_kw):
    """FA3's rule: max|out - ref| <= 2 * max|out_lowprec - ref| + atol, with ref in float64 and
    out_lowprec the same reference in the input dtype. LSE likewise, and -inf exactly where the
    reference has -inf (fully masked rows)."""
    ref, lref = attention_ref(q, k, v, **ref_kw)
    lp, llp = attention_ref(q, k, v, upcast=False, **ref_kw)
    assert not torch.isnan(out).any(), f"{what}: NaN in out (an element was not written?)"
    assert not torch.isnan(lse).any(), f"{what}: NaN in lse"
    err = (out.double() - ref).abs().max().item() if out.numel() else 0.0
    err_lp = (lp.double() - ref).abs().max().item() if out.numel() else 0.0
    assert err <= 2 * err_lp + 1e-5, f"{what}: out error {err:.3e} > 2 * {err_lp:.3e} + 1e-5"
    fin = torch.isfinite(lref)
    assert torch.equal(torch.isfinite(lse), fin), f"{what}: -inf pattern of lse differs from the reference"
    assert torch.all(torch.isneginf(lse[~fin])), f"{what}: fully masked rows must have lse -inf"
    if fin.any():
        lerr = (lse.double() - lref)[fin].abs().max().item()
        lerr_lp = (llp.double() - lref)[fin].abs().max().item()
        assert lerr <= 2 * lerr_lp + 1e-4, f"{what}: lse error {lerr:.3e} > 2 * {lerr_lp:.3e} + 1e-4"
    if (~fin).any():
        # rows that see no key: output exactly 0
        if lse.dim() == 3:  # (b, h, s) vs out (b, s, h, d)
            rows = (~fin).permute(0, 2, 1)
        else:  # (h, t) vs out (t, h, d)
            rows = (~fin).permute(1, 0)
        assert torch.all(out[rows] == 0), f"{what}: fully masked rows must be 0"


def randn(*shape, dtype, device="cuda"):
    return torch.randn(*shape, dtype=dtype, device=device)


__all__ = ["shapes_for", "require", "nan_buffers", "check_close", "randn", "_fwd_into", "attention_ref"]
