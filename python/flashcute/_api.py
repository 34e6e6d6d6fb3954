"""The public forward functions (re-exported by flashcute/__init__.py)."""
from __future__ import annotations

import torch

from . import _validation as V
from . import fp8 as _fp8
from .ops import call_fwd

_FP8_DOC = """
    fp8: None (default: attention in the input dtype), True, or a flashcute.fp8.FP8Config: the
    FP8 mode for bf16/fp16 inputs. q, k and v are quantized to float8_e4m3fn with one scale per
    (batch, kv head) (flashcute.fp8.quantize; q's scale covers the q heads of its GQA group),
    q and k are first rotated by the same random Hadamard matrix (FP8Config.rotate, on by
    default: q k^T is unchanged, outliers are spread), the FP8 kernel runs with the matching
    descales, and the output comes back in the input dtype (LSE float32). Hopper only
    (backend "auto" or "sm90"). The options are one object rather than more keyword arguments
    so that they cannot be given without the mode (nothing is silently ignored), can be built
    once and shared by every layer, and can grow without widening each signature; True is the
    shorthand for FP8Config(). Inputs that are already float8_e4m3fn, with their own descales,
    go through flashcute.flash_attn_interface (FA3's convention).
"""


def _fp8_inputs(q, k, v, cfg, cu_seqlens_q=None, cu_seqlens_k=None, v_colmajor=False):
    """(q8, k8, v8, (q_descale, k_descale, v_descale)) for the FP8 mode; FA layout views in.
    v_colmajor: v8 as V^T (fp8.v_colmajor_applies decided it), with block-wise scales where
    FP8Config.block_scales asks for them (fp8.mode_block_keys)."""
    return _fp8.quantize_qkv(q, k, v, rotate=cfg.rotate, seed=cfg.seed, cu_seqlens_q=cu_seqlens_q,
                             cu_seqlens_k=cu_seqlens_k, v_colmajor=v_colmajor,
                             block_keys=_fp8.mode_block_keys(q, k, v, cfg, v_colmajor))


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    return_lse=False, backend="auto", fp8=None):
    """Attention in FlashAttention's layout.

    q: (batch, seqlen_q, heads_q, head_dim); k: (batch, seqlen_k, heads_k, head_dim);
    v: (batch, seqlen_k, heads_k, head_dim_v); heads_q a multiple of heads_k (GQA/MQA: q head h
    uses k/v head h // (heads_q // heads_k)). Any strides with a contiguous last dimension (views
    of a packed qkv tensor are used in place).

    causal: bottom-right aligned when seqlen_q != seqlen_k (query i sees keys <= i + seqlen_k -
    seqlen_q). window_size (left, right): query i sees keys in [i + off - left, i + off + right],
    off = seqlen_k - seqlen_q, -1 = unbounded. softcap > 0: scores -> softcap * tanh(scores /
    softcap). A query row that sees no key gets output 0 and LSE -inf.

    Returns out (batch, seqlen_q, heads_q, head_dim_v), and with return_lse=True also the
    float32 log-sum-exp (batch, heads_q, seqlen_q). backend: "auto", "sm80" or "sm90".

    fp8: the FP8 mode (see below). Example: flashcute.flash_attn_func(q, k, v, causal=True, fp8=True)
    """
    cfg = _fp8.resolve_config(fp8)
    wl, wr = V.check_fwd(q, k, v, window_size=window_size, softcap=softcap, softmax_scale=softmax_scale,
                         causal=causal, backend=backend, fp8_mode=cfg)
    V.check_cuda("q", q)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    descales, out_dtype, vt = (None, None, None), None, False
    if cfg is not None:
        out_dtype = q.dtype
        vt = _fp8.v_colmajor_applies(q, k, v, cfg, backend)
        q, k, v, descales = _fp8_inputs(q, k, v, cfg, v_colmajor=vt)
    out, lse = call_fwd(q, k, v, softmax_scale=scale, causal=causal, window_left=wl, window_right=wr,
                        softcap=softcap, top_left=False, backend=backend, descales=descales, out_dtype=out_dtype,
                        v_is_vt=vt)
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           seqused_k=None, return_lse=False, backend="auto", fp8=None):
    """Attention over packed variable-length sequences.

    q: (total_q, heads_q, head_dim), k: (total_k, heads_k, head_dim), v: (total_k, heads_k,
    head_dim_v); sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1 of q and
    cu_seqlens_k[b] .. cu_seqlens_k[b+1]-1 of k/v. cu_seqlens_*: int32, batch + 1 entries,
    starting at 0, non-decreasing (checked in eager mode; not while a CUDA graph is captured or
    under torch.compile, where the check would need a host sync). max_seqlen_q/k: the longest
    sequence lengths. seqused_k (optional, int32, batch): keys actually used per sequence.
    Masks as in flash_attn_func, per sequence (bottom-right causal uses the used key length).

    Returns out (total_q, heads_q, head_dim_v), and with return_lse=True also lse
    (heads_q, total_q) float32.

    fp8: the FP8 mode (see below); each sequence gets its own scales (per (sequence, kv head)).
    """
    cfg = _fp8.resolve_config(fp8)
    wl, wr = V.check_fwd(q, k, v, varlen=True, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                         max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
                         window_size=window_size, softcap=softcap, softmax_scale=softmax_scale,
                         causal=causal, backend=backend, fp8_mode=cfg)
    V.check_cuda("q", q)
    if V.values_readable(cu_seqlens_q, cu_seqlens_k, seqused_k):
        V.check_varlen_values(cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                              q.shape[0], k.shape[0])
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    descales, out_dtype = (None, None, None), None
    if cfg is not None:
        out_dtype = q.dtype
        q, k, v, descales = _fp8_inputs(q, k, v, cfg, cu_seqlens_q, cu_seqlens_k)
    out, lse = call_fwd(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                        seqused_k=seqused_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k,
                        softmax_scale=scale, causal=causal, window_left=wl, window_right=wr,
                        softcap=softcap, top_left=False, backend=backend, descales=descales,
                        out_dtype=out_dtype)
    return (out, lse) if return_lse else out


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                 scale=None, enable_gqa=False, fp8=None):
    """torch.nn.functional.scaled_dot_product_attention's signature and layout:
    query (batch, heads_q, seqlen_q, head_dim), key (batch, heads_k, seqlen_k, head_dim),
    value (batch, heads_k, seqlen_k, head_dim_v) -> (batch, heads_q, seqlen_q, head_dim_v).

    is_causal uses torch's TOP-LEFT alignment (query i sees keys <= i). Supported: is_causal,
    scale, enable_gqa (heads_q a multiple of heads_k). Not supported: attn_mask (use is_causal
    or flashcute.flash_attn_func's window_size) and dropout_p > 0. The inputs are read through
    their strides (no transposing copies); the result is a (batch, heads, seqlen, dim) view of a
    (batch, seqlen, heads, dim) buffer, as torch's flash backend returns.

    fp8 (not in torch's signature, keyword only in practice): the FP8 mode, as in
    flashcute.flash_attn_func (None = off, True, or a flashcute.fp8.FP8Config).
    """
    if attn_mask is not None:
        raise NotImplementedError(
            "attn_mask: flashcute does not support an explicit attention mask; supported masking is "
            "is_causal=True (top-left), or causal / sliding windows through flashcute.flash_attn_func")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
        raise TypeError(f"dropout_p: expected a float, got {type(dropout_p).__name__}")
    if dropout_p != 0.0:
        raise NotImplementedError(f"dropout_p: got {dropout_p}; flashcute supports only dropout_p=0.0 "
                                  f"(no attention dropout)")
    names = ("query", "key", "value")
    layout = "(batch, heads, seqlen, head_dim)"
    for n, t in zip(names, (query, key, value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{n}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{n}: expected 4 dimensions {layout}, got {t.dim()} (shape {tuple(t.shape)})")
    if not isinstance(enable_gqa, bool):
        raise TypeError(f"enable_gqa: expected a bool, got {type(enable_gqa).__name__}")
    if not enable_gqa:
        hq, hk, hv = query.shape[1], key.shape[1], value.shape[1]
        if hq != hk:
            raise ValueError(f"key: has {hk} heads but query has {hq}; different head "
                             f"counts need enable_gqa=True (as in torch)")
        if hq != hv:
            raise ValueError(f"value: has {hv} heads but query has {hq}; different head "
                             f"counts need enable_gqa=True (as in torch)")
    # (b, h, s, d) -> (b, s, h, d) views: strides only, no data movement.
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    cfg = _fp8.resolve_config(fp8)
    wl, wr = V.check_fwd(q, k, v, names=names, window_size=(-1, -1), softcap=0.0, softmax_scale=scale,
                         causal=bool(is_causal), backend="auto", layout="(batch, seqlen, heads, head_dim)",
                         fp8_mode=cfg)
    V.check_cuda("query", query)
    s = q.shape[-1] ** -0.5 if scale is None else scale
    descales, out_dtype, vt = (None, None, None), None, False
    if cfg is not None:
        out_dtype = q.dtype
        vt = _fp8.v_colmajor_applies(q, k, v, cfg, "auto")
        q, k, v, descales = _fp8_inputs(q, k, v, cfg, v_colmajor=vt)
    out, _ = call_fwd(q, k, v, softmax_scale=s, causal=bool(is_causal), window_left=wl, window_right=wr,
                      softcap=0.0, top_left=True, backend="auto", descales=descales, out_dtype=out_dtype,
                      v_is_vt=vt)
    return out.transpose(1, 2)


if flash_attn_func.__doc__:  # None under python -OO
    flash_attn_func.__doc__ += _FP8_DOC
    flash_attn_varlen_func.__doc__ += _FP8_DOC
