"""Reference attention for tests: plain PyTorch, any device, float64 by default.

Mask semantics are exactly those of include/flashcute/flashcute.h and src/common/params.h: in a
sequence with sq queries and sk keys (sk capped by seqused_k), query i sees key j iff
    j < sk,
    j <= i + off + wr   (when wr >= 0),
    j >= i + off - wl   (when wl >= 0),
with off = sk - sq (bottom-right, FlashAttention) or 0 (top-left, torch SDPA), and causal meaning
wr = 0 (wl is kept: causal + left window is a sliding causal window). A query that sees no key
gets output 0 and LSE -inf.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

__all__ = ["attention_ref", "visible_mask"]


def visible_mask(seqlen_q: int, seqlen_k: int, causal: bool = False, window_size=(-1, -1),
                 causal_align: str = "bottom_right", device=None) -> torch.Tensor:
    """(seqlen_q, seqlen_k) bool: True where query i may attend to key j."""
    if causal_align not in ("bottom_right", "top_left"):
        raise ValueError(f"causal_align: got {causal_align!r}; allowed: 'bottom_right', 'top_left'")
    wl, wr = window_size
    if causal:
        wr = 0
    off = seqlen_k - seqlen_q if causal_align == "bottom_right" else 0
    i = torch.arange(seqlen_q, device=device).view(-1, 1)
    j = torch.arange(seqlen_k, device=device).view(1, -1)
    ok = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if wr >= 0:
        ok &= j <= i + off + wr
    if wl >= 0:
        ok &= j >= i + off - wl
    return ok


def _one_sequence(q, k, v, mask, scale, softcap, upcast):
    """q (sq, hq, d), k (sk, hk, d), v (sk, hk, dv), mask (sq, sk) -> out (sq, hq, dv), lse (hq, sq)."""
    hq, hk = q.shape[1], k.shape[1]
    g = hq // hk
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    if upcast:
        s = torch.einsum("qhd,khd->hqk", q, k) * scale
    else:
        # FA3's low-precision baseline: the GEMM result rounded to the input dtype, softmax in fp32.
        s = torch.einsum("qhd,khd->hqk", q, k).float() * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~mask.view(1, *mask.shape), -math.inf)
    lse = torch.logsumexp(s, dim=-1)  # -inf for a fully masked row
    finite = torch.isfinite(lse)
    p = torch.exp(s - torch.where(finite, lse, torch.zeros_like(lse)).unsqueeze(-1))
    p = torch.where(finite.unsqueeze(-1), p, torch.zeros_like(p))
    if not upcast:
        p = p.to(v.dtype)
    out = torch.einsum("hqk,khd->qhd", p, v)
    return out, lse.float() if not upcast else lse


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  window_size=(-1, -1), softcap: float = 0.0, softmax_scale: Optional[float] = None,
                  causal_align: str = "bottom_right", upcast: bool = True,
                  cu_seqlens_q: Optional[torch.Tensor] = None, cu_seqlens_k: Optional[torch.Tensor] = None,
                  seqused_k: Optional[torch.Tensor] = None, max_seqlen_q: Optional[int] = None,
                  max_seqlen_k: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Attention in FA layout, computed directly (softmax(scale * q k^T [capped, masked]) v).

    Dense: q (b, sq, hq, d), k (b, sk, hk, d), v (b, sk, hk, dv) -> out (b, sq, hq, dv),
    lse (b, hq, sq). Varlen (cu_seqlens_q/k given): q (tq, hq, d), k/v (tk, hk, .) ->
    out (tq, hq, dv), lse (hq, tq); rows outside every sequence get 0 / -inf.
    seqused_k (b,) caps each sequence's keys (dense or varlen).

    upcast=True: computed in float64, out and lse float64. upcast=False: computed in the input
    dtype (GEMMs in the input dtype, softmax in fp32), out in the input dtype and lse float32:
    the "same reference in low precision" of FA3's tolerance rule. max_seqlen_q/k are accepted
    for signature symmetry and ignored.
    """
    d = q.shape[-1]
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    if upcast:
        q, k, v = q.double(), k.double(), v.double()
    varlen = cu_seqlens_q is not None
    used = seqused_k.tolist() if seqused_k is not None else None

    def run(qb, kb, vb, b):
        sk = kb.shape[0] if used is None else int(used[b])
        kb, vb = kb[:sk], vb[:sk]
        mask = visible_mask(qb.shape[0], sk, causal, window_size, causal_align, device=qb.device)
        return _one_sequence(qb, kb, vb, mask, scale, softcap, upcast)

    lse_dtype = torch.float64 if upcast else torch.float32
    if varlen:
        if cu_seqlens_k is None:
            raise ValueError("cu_seqlens_k: required with cu_seqlens_q")
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        out = torch.zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=v.dtype, device=q.device)
        lse = torch.full((q.shape[1], q.shape[0]), -math.inf, dtype=lse_dtype, device=q.device)
        for b in range(len(cq) - 1):
            o, l = run(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]], b)
            out[cq[b]:cq[b + 1]] = o.to(out.dtype)
            lse[:, cq[b]:cq[b + 1]] = l.to(lse_dtype)
        return out, lse
    outs, lses = [], []
    for b in range(q.shape[0]):
        o, l = run(q[b], k[b], v[b], b)
        outs.append(o.to(v.dtype))
        lses.append(l.to(lse_dtype))
    if not outs:
        return (torch.zeros(0, q.shape[1], q.shape[2], v.shape[-1], dtype=v.dtype, device=q.device),
                torch.zeros(0, q.shape[2], q.shape[1], dtype=lse_dtype, device=q.device))
    return torch.stack(outs), torch.stack(lses)
