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

__all__ = ["attention_ref", "attention_fp8_emulated", "visible_mask"]


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


# ---- FP8 (e4m3) kernel emulation -------------------------------------------------------------
_LOG2E = math.log2(math.e)


def _round_e4m3(x: torch.Tensor) -> torch.Tensor:
    """x rounded to the nearest float8_e4m3fn value (ties to even), saturating at +-448, returned
    in x's dtype. The clamp saturates as the kernel's cvt.satfinite does, whatever torch's cast
    does out of range in this version."""
    return x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(x.dtype)


def _tensor_core_scores(a8, b8):
    """a8 (m, d) @ b8 (n, d)^T on the GPU's FP8 tensor cores (torch._scaled_mm, unit scales,
    fast accumulation = the accumulator precision an FP8 WGMMA chain has, which is below fp32:
    DeepSeek-V3 reports about 14 bits on Hopper), in fp32. Rows padded to multiples of 16."""
    m, n = a8.shape[0], b8.shape[0]

    def pad(x):
        extra = (-x.shape[0]) % 16
        x = x.contiguous().view(torch.uint8)
        return torch.nn.functional.pad(x, (0, 0, 0, extra)).view(torch.float8_e4m3fn)

    one = torch.ones((), dtype=torch.float32, device=a8.device)
    s = torch._scaled_mm(pad(a8), pad(b8).t(), scale_a=one, scale_b=one, out_dtype=torch.float32,
                         use_fast_accum=True)
    return s[:m, :n]


def _scaled_scores(q8, k8, kf, mult, softcap, mask, cdt, tensor_core_scores):
    """q8 (m, d) and k8 (n, d) (kf: k8 in cdt) -> the scores times mult, capped, masked."""
    # S = q8 k8^T: every product of two e4m3 values is exact in fp32; fp32 accumulation
    if tensor_core_scores:
        s = _tensor_core_scores(q8, k8).to(cdt)
    else:
        s = q8.to(cdt) @ kf.T
    s = s * mult
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    return s.masked_fill(~mask, -math.inf)


def _fp8_one_sequence(q8, k8, v8, qd, kd, vd, mask, scale, softcap, p_offset_log2, cdt, chunk,
                      tensor_core_scores=False, block=0):
    """q8 (sq, hq, d), k8 (sk, hk, d), v8 (sk, hk, dv) float8_e4m3fn; qd/kd/vd (hk,) float32
    (block > 0: qd (hq, sq) per row, kd/vd (hk, blocks) per block of `block` keys); mask (sq, sk)
    -> out (sq, hq, dv) and lse (hq, sq) in the compute dtype `cdt`."""
    sq, hq = q8.shape[0], q8.shape[1]
    hk, dv = k8.shape[1], v8.shape[-1]
    g = hq // hk
    out = torch.zeros(sq, hq, dv, dtype=cdt, device=q8.device)
    lse = torch.full((hq, sq), -math.inf, dtype=cdt, device=q8.device)
    if sq == 0 or k8.shape[0] == 0:
        return out, lse
    kf, vf = k8.to(cdt), v8.to(cdt)
    if block > 0:
        _fp8_blocks_one_sequence(q8, k8, kf, vf, qd, kd, vd, mask, scale, softcap, p_offset_log2, cdt, chunk,
                                 tensor_core_scores, block, out, lse)
        return out, lse
    for h in range(hq):
        j = h // g
        # the score multiplier the kernel folds once: softmax_scale * q_descale * k_descale
        mult = (torch.tensor(scale, dtype=torch.float32, device=q8.device) * qd[j] * kd[j]).to(cdt)
        for r0 in range(0, sq, chunk):
            r1 = min(sq, r0 + chunk)
            s = _scaled_scores(q8[r0:r1, h], k8[:, j], kf[:, j], mult, softcap, mask[r0:r1], cdt,
                               tensor_core_scores)
            m = s.amax(dim=-1, keepdim=True)
            seen = torch.isfinite(m)
            m = torch.where(seen, m, torch.zeros_like(m))
            # log2 domain, as the kernel: P = 2^((s - m) log2 e + offset), offset 0 by default
            p = torch.exp2((s - m) * _LOG2E + p_offset_log2)
            l = p.sum(dim=-1, keepdim=True)  # the row sum uses the unrounded P
            p8 = _round_e4m3(p)               # P is rounded to e4m3 before the P.V GEMM
            o = (p8 @ vf[:, j]) * vd[j].to(cdt)
            o = torch.where(seen, o / torch.where(seen, l, torch.ones_like(l)), torch.zeros_like(o))
            out[r0:r1, h] = o
            lrow = (m + torch.log(l) - p_offset_log2 * math.log(2.0)).squeeze(-1)
            lse[h, r0:r1] = torch.where(seen.squeeze(-1), lrow, torch.full_like(lrow, -math.inf))
    return out, lse


def _fp8_blocks_one_sequence(q8, k8, kf, vf, qd, kd, vd, mask, scale, softcap, p_offset_log2, cdt, chunk,
                             tensor_core_scores, block, out, lse):
    """_fp8_one_sequence with block-wise descales, the V^T kernel's arithmetic (sm90
    online_scaled): scores scale by softmax_scale * q's row descale * k's block descale; v's block
    descale enters P as a factor (a log2 bias on the exponent: P = 2^(t - max t + offset), t =
    s log2 e + log2 v_descale), P is rounded to e4m3 with that factor in, and the row sum divides
    it out again."""
    sq, hq = q8.shape[0], q8.shape[1]
    sk, g = kf.shape[0], hq // kf.shape[1]
    for h in range(hq):
        j = h // g
        kd_keys = kd[j].repeat_interleave(block)[:sk].to(cdt)  # (sk,)
        vd_keys = vd[j].repeat_interleave(block)[:sk].to(cdt)
        for r0 in range(0, sq, chunk):
            r1 = min(sq, r0 + chunk)
            mult = (scale * qd[h, r0:r1].to(cdt)).unsqueeze(-1) * kd_keys
            s = _scaled_scores(q8[r0:r1, h], k8[:, j], kf[:, j], mult, softcap, mask[r0:r1], cdt,
                               tensor_core_scores)
            t = s * _LOG2E + torch.log2(vd_keys)
            m = t.amax(dim=-1, keepdim=True)
            seen = torch.isfinite(m)
            m = torch.where(seen, m, torch.zeros_like(m))
            p = torch.exp2(t - m + p_offset_log2)
            l = (p / vd_keys).sum(dim=-1, keepdim=True)  # the unrounded P, v's factor divided out
            o = _round_e4m3(p) @ vf[:, j]
            o = torch.where(seen, o / torch.where(seen, l, torch.ones_like(l)), torch.zeros_like(o))
            out[r0:r1, h] = o
            lrow = ((m - p_offset_log2) * math.log(2.0) + torch.log(l)).squeeze(-1)
            lse[h, r0:r1] = torch.where(seen.squeeze(-1), lrow, torch.full_like(lrow, -math.inf))


def attention_fp8_emulated(q8: torch.Tensor, k8: torch.Tensor, v8: torch.Tensor,
                           q_descale: Optional[torch.Tensor] = None, k_descale: Optional[torch.Tensor] = None,
                           v_descale: Optional[torch.Tensor] = None, causal: bool = False,
                           window_size=(-1, -1), softcap: float = 0.0, softmax_scale: Optional[float] = None,
                           causal_align: str = "bottom_right", cu_seqlens_q: Optional[torch.Tensor] = None,
                           cu_seqlens_k: Optional[torch.Tensor] = None, seqused_k: Optional[torch.Tensor] = None,
                           out_dtype: Optional[torch.dtype] = torch.bfloat16, p_offset_log2: float = 0.0,
                           compute_dtype: torch.dtype = torch.float32, chunk: int = 1024,
                           tensor_core_scores: bool = False, descale_block_keys: int = 0,
                           ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The FP8 (e4m3) forward kernel's arithmetic, step for step, in plain torch (CPU or GPU):

      S = q8 k8^T                  exact e4m3 products, fp32 accumulation
      s = S * (softmax_scale * q_descale * k_descale)   [softcap, masks as in attention_ref]
      P = exp2((s - rowmax) log2 e + p_offset_log2)     fp32
      l = sum(P)                   the UNROUNDED fp32 P
      O = (sum round_e4m3(P) v8) * v_descale / l        round-to-nearest-even, saturating
      out = O cast to out_dtype (bf16 by default, as the kernel); lse = rowmax + log(l) (natural)

    It is the "same computation in low precision" of the tests' 2x rule for FP8:
    |kernel - ref64| <= 2 |emulated - ref64| + atol, with ref64 = attention_ref on the
    dequantized inputs (q8 * q_descale, ...). Rounding P against the final row max (not the
    kernel's running max) changes which values round which way, not the size of the error.

    q8/k8/v8: float8_e4m3fn (or any dtype holding e4m3 values), FA layout as attention_ref (dense
    or varlen). *_descale: float32 (batch, heads_k), None = 1. p_offset_log2: the kernel may shift
    P by 2^offset (the row sum too, so it cancels) to keep small probabilities out of e4m3's
    subnormal range; 0 is P in [0, 1]. compute_dtype float64 gives the same algorithm with exact
    scores (for studying the P rounding alone). tensor_core_scores=True (CUDA, e4m3 inputs):
    S from torch._scaled_mm with fast accumulation, i.e. with the FP8 tensor cores' own
    accumulation precision, as the kernel's S. Returns out (out_dtype, or compute_dtype if None)
    and lse (float32). descale_block_keys > 0 (dense): block-wise descales, the FP8 V^T kernel's
    (flashcute.fp8.quantize_qkv(block_keys=...)): q_descale (batch, heads_q, seqlen_q), k_descale
    and v_descale (batch, heads_k, blocks of descale_block_keys keys); v's enters P before its
    e4m3 rounding (_fp8_blocks_one_sequence).
    """
    d = q8.shape[-1]
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    varlen = cu_seqlens_q is not None
    batch = (cu_seqlens_q.shape[0] - 1) if varlen else q8.shape[0]
    hk = k8.shape[-2]

    def descale_or_one(t, shape):
        if t is None:
            return torch.ones(shape, dtype=torch.float32, device=q8.device)
        return t.to(torch.float32)

    if descale_block_keys > 0:
        if varlen:
            raise ValueError("descale_block_keys: block-wise descales are dense-only")
        nb = -(-k8.shape[1] // descale_block_keys)
        qd = descale_or_one(q_descale, (batch, q8.shape[2], q8.shape[1]))
        kd, vd = descale_or_one(k_descale, (batch, hk, nb)), descale_or_one(v_descale, (batch, hk, nb))
    else:
        qd, kd, vd = (descale_or_one(t, (batch, hk)) for t in (q_descale, k_descale, v_descale))

    used = seqused_k.tolist() if seqused_k is not None else None
    od = compute_dtype if out_dtype is None else out_dtype

    def run(qb, kb, vb, b):
        sk = kb.shape[0] if used is None else int(used[b])
        kb, vb = kb[:sk], vb[:sk]
        mask = visible_mask(qb.shape[0], sk, causal, window_size, causal_align, device=qb.device)
        return _fp8_one_sequence(qb, kb, vb, qd[b], kd[b], vd[b], mask, scale, softcap,
                                 float(p_offset_log2), compute_dtype, chunk, tensor_core_scores,
                                 descale_block_keys)

    if varlen:
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        out = torch.zeros(q8.shape[0], q8.shape[1], v8.shape[-1], dtype=od, device=q8.device)
        lse = torch.full((q8.shape[1], q8.shape[0]), -math.inf, dtype=torch.float32, device=q8.device)
        for b in range(batch):
            o, l = run(q8[cq[b]:cq[b + 1]], k8[ck[b]:ck[b + 1]], v8[ck[b]:ck[b + 1]], b)
            out[cq[b]:cq[b + 1]] = o.to(od)
            lse[:, cq[b]:cq[b + 1]] = l.float()
        return out, lse
    out = torch.zeros(q8.shape[0], q8.shape[1], q8.shape[2], v8.shape[-1], dtype=od, device=q8.device)
    lse = torch.full((q8.shape[0], q8.shape[2], q8.shape[1]), -math.inf, dtype=torch.float32, device=q8.device)
    for b in range(batch):
        o, l = run(q8[b], k8[b], v8[b], b)
        out[b] = o.to(od)
        lse[b] = l.float()
    return out, lse
