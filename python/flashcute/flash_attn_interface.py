"""FlashAttention-3's Python interface (hopper/flash_attn_interface.py) on flashcute's kernels.

`from flashcute.flash_attn_interface import flash_attn_func, flash_attn_varlen_func` is a
drop-in for FA3's module of the same name: same function names, parameter names, order and
defaults, and the same return convention as FA3's current interface: `out`, or `(out,
softmax_lse)` when return_attn_probs=True (softmax_lse is (batch, heads, seqlen_q) float32, or
(heads, total_q) for varlen).

Features flashcute does not have yet raise NotImplementedError naming the feature whenever
their argument is not at its default (they are never silently ignored): qv, seqused_q,
attention_chunk, num_splits > 1, pack_gqa=True, deterministic (a backward option; there is no
backward yet), sm_margin, the KV-cache entry point (flash_attn_with_kvcache: new k/v, rotary,
page tables, ...), flash_attn_combine and get_scheduler_metadata. num_splits=0 (FA3's "pick for
me") runs unsplit, which is what FA3's heuristic may also pick.

FP8: float8_e4m3fn q/k/v with q_descale/k_descale/v_descale of shape (batch, heads_k) float32
run the sm90 FP8 kernel (output bf16, as FA3); on GPUs other than compute capability 9.0, or
in a build without FLASHCUTE_FP8, the library's UNSUPPORTED error (NotImplementedError).
"""
from __future__ import annotations

from . import _validation as V
from .ops import call_fwd

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func",
           "flash_attn_with_kvcache", "flash_attn_combine", "get_scheduler_metadata"]


def _not_built(feature: str, detail: str = "") -> NotImplementedError:
    return NotImplementedError(f"{feature}: not implemented in flashcute yet{detail}")


def _reject_unbuilt(qv=None, attention_chunk=0, num_splits=1, pack_gqa=None, deterministic=False,
                    sm_margin=0, seqused_q=None):
    if qv is not None:
        raise _not_built("qv", " (the extra q·v score term of FA3/MLA); pass qv=None")
    if seqused_q is not None:
        raise _not_built("seqused_q", " (per-sequence used query rows); pass seqused_q=None")
    if attention_chunk not in (0, None):
        raise _not_built("attention_chunk", f" (got {attention_chunk}); pass attention_chunk=0")
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise ValueError(f"num_splits: got {num_splits!r}; must be an int >= 0")
    if num_splits > 1:
        raise _not_built("num_splits", f" (split-KV, got num_splits={num_splits}); pass num_splits=1")
    if pack_gqa is not None and pack_gqa is not False:
        raise _not_built("pack_gqa", f" (forcing GQA packing, got pack_gqa={pack_gqa!r}); pass pack_gqa=None")
    if deterministic:
        raise _not_built("deterministic", " (it selects a deterministic backward, and there is no backward "
                         "yet; the forward is always deterministic); pass deterministic=False")
    if sm_margin not in (0, None):
        raise _not_built("sm_margin", f" (got {sm_margin}); pass sm_margin=0")


def _default_scale(q, softmax_scale):
    return q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale


def flash_attn_func(
    q,
    k,
    v,
    softmax_scale=None,
    causal=False,
    qv=None,
    q_descale=None, k_descale=None, v_descale=None,
    window_size=(-1, -1),
    attention_chunk=0,
    softcap=0.0,
    num_splits=1,
    pack_gqa=None,
    deterministic=False,
    sm_margin=0,
    return_attn_probs=False,
):
    """FA3's flash_attn_func: q (batch, seqlen_q, heads, d), k/v (batch, seqlen_k, heads_k, d/dv);
    bottom-right causal; window_size (left, right) with -1 = unbounded. Returns out, or
    (out, softmax_lse) when return_attn_probs=True."""
    _reject_unbuilt(qv=qv, attention_chunk=attention_chunk, num_splits=num_splits, pack_gqa=pack_gqa,
                    deterministic=deterministic, sm_margin=sm_margin)
    descales = (q_descale, k_descale, v_descale)
    wl, wr = V.check_fwd(q, k, v, window_size=tuple(window_size) if isinstance(window_size, list) else window_size,
                         softcap=softcap, softmax_scale=softmax_scale, causal=bool(causal), allow_fp8=True,
                         descales=descales)
    V.check_cuda("q", q)
    out, lse = call_fwd(q, k, v, descales=descales, softmax_scale=_default_scale(q, softmax_scale),
                        causal=bool(causal), window_left=wl, window_right=wr, softcap=softcap,
                        top_left=False, backend="auto")
    return (out, lse) if return_attn_probs else out


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    seqused_q=None,
    seqused_k=None,
    softmax_scale=None,
    causal=False,
    qv=None,
    q_descale=None, k_descale=None, v_descale=None,
    window_size=(-1, -1),
    attention_chunk=0,
    softcap=0.0,
    num_splits=1,
    pack_gqa=None,
    deterministic=False,
    sm_margin=0,
    return_attn_probs=False,
):
    """FA3's flash_attn_varlen_func: q (total_q, heads, d), k/v (total_k, heads_k, d/dv),
    cu_seqlens_q/k int32 (batch + 1). Returns out (total_q, heads, dv), or (out, softmax_lse
    (heads, total_q)) when return_attn_probs=True."""
    _reject_unbuilt(qv=qv, attention_chunk=attention_chunk, num_splits=num_splits, pack_gqa=pack_gqa,
                    deterministic=deterministic, sm_margin=sm_margin, seqused_q=seqused_q)
    descales = (q_descale, k_descale, v_descale)
    wl, wr = V.check_fwd(q, k, v, varlen=True, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                         max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, seqused_k=seqused_k,
                         window_size=tuple(window_size) if isinstance(window_size, list) else window_size,
                         softcap=softcap, softmax_scale=softmax_scale, causal=bool(causal), allow_fp8=True,
                         descales=descales)
    V.check_cuda("q", q)
    if V.values_readable(cu_seqlens_q, cu_seqlens_k, seqused_k):
        V.check_varlen_values(cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                              q.shape[0], k.shape[0])
    out, lse = call_fwd(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k,
                        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, descales=descales,
                        softmax_scale=_default_scale(q, softmax_scale), causal=bool(causal),
                        window_left=wl, window_right=wr, softcap=softcap, top_left=False, backend="auto")
    return (out, lse) if return_attn_probs else out


def flash_attn_qkvpacked_func(
    qkv,
    softmax_scale=None,
    causal=False,
    q_descale=None, k_descale=None, v_descale=None,
    window_size=(-1, -1),
    attention_chunk=0,
    softcap=0.0,
    deterministic=False,
    num_heads_q=None,
    sm_margin=0,
    return_attn_probs=False,
):
    """FA3's flash_attn_qkvpacked_func: qkv (batch, seqlen, 3, heads, d), or (batch, seqlen,
    heads_q + 2 * heads_k, d) with num_heads_q. q, k and v are read in place (views)."""
    if not hasattr(qkv, "dim"):
        raise TypeError(f"qkv: expected a torch.Tensor, got {type(qkv).__name__}")
    if qkv.dim() == 5:
        if qkv.shape[2] != 3:
            raise ValueError(f"qkv: a 5-D qkv must be (batch, seqlen, 3, heads, head_dim), got shape {tuple(qkv.shape)}")
        q, k, v = qkv.unbind(dim=2)
    elif qkv.dim() == 4:
        if num_heads_q is None:
            raise ValueError("num_heads_q: required with a 4-D qkv (batch, seqlen, heads_q + 2 * heads_k, head_dim)")
        rest = qkv.shape[2] - num_heads_q
        if num_heads_q <= 0 or rest <= 0 or rest % 2:
            raise ValueError(f"num_heads_q: {num_heads_q} does not split qkv's {qkv.shape[2]} heads into "
                             f"heads_q + 2 * heads_k")
        q, k, v = qkv.split([num_heads_q, rest // 2, rest // 2], dim=2)
    else:
        raise ValueError(f"qkv: expected 4 or 5 dimensions, got {qkv.dim()} (shape {tuple(qkv.shape)})")
    return flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal, q_descale=q_descale,
                           k_descale=k_descale, v_descale=v_descale, window_size=window_size,
                           attention_chunk=attention_chunk, softcap=softcap, deterministic=deterministic,
                           sm_margin=sm_margin, return_attn_probs=return_attn_probs)


def flash_attn_with_kvcache(*args, **kwargs):
    """FA3's KV-cache entry point: not implemented in flashcute yet."""
    raise _not_built("flash_attn_with_kvcache",
                     " (KV cache: in-place k/v append, cache_seqlens, paged KV / page_table, rotary, "
                     "cache_batch_idx, cache_leftpad)")


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    """FA3's split-KV combine: not implemented in flashcute yet (there is no split-KV)."""
    raise _not_built("flash_attn_combine", " (split-KV combine; flashcute has no num_splits > 1)")


def get_scheduler_metadata(*args, **kwargs):
    """FA3's scheduler metadata precomputation: not implemented in flashcute yet."""
    raise _not_built("get_scheduler_metadata", " (precomputed scheduler metadata for the KV-cache path)")
