"""CPU: flashcute.flash_attn_interface mirrors FA3's hopper/flash_attn_interface.py (read at
Dao-AILab/flash-attention commit 01afd16d): names, order and defaults of the parameters, the
return convention (out, or (out, softmax_lse) with return_attn_probs=True), and unbuilt features
raising NotImplementedError instead of being ignored."""
import inspect

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from flashcute import _lib
from flashcute import flash_attn_interface as fai

E = inspect.Parameter.empty
HD = _lib.COMPILED_HEAD_DIMS[0] if _lib.COMPILED_HEAD_DIMS else 128

FA3_FLASH_ATTN_FUNC = [
    ("q", E), ("k", E), ("v", E), ("softmax_scale", None), ("causal", False), ("qv", None),
    ("q_descale", None), ("k_descale", None), ("v_descale", None), ("window_size", (-1, -1)),
    ("attention_chunk", 0), ("softcap", 0.0), ("num_splits", 1), ("pack_gqa", None),
    ("deterministic", False), ("sm_margin", 0), ("return_attn_probs", False),
]
FA3_FLASH_ATTN_VARLEN_FUNC = [
    ("q", E), ("k", E), ("v", E), ("cu_seqlens_q", E), ("cu_seqlens_k", E), ("max_seqlen_q", E),
    ("max_seqlen_k", E), ("seqused_q", None), ("seqused_k", None), ("softmax_scale", None),
    ("causal", False), ("qv", None), ("q_descale", None), ("k_descale", None), ("v_descale", None),
    ("window_size", (-1, -1)), ("attention_chunk", 0), ("softcap", 0.0), ("num_splits", 1),
    ("pack_gqa", None), ("deterministic", False), ("sm_margin", 0), ("return_attn_probs", False),
]
FA3_QKVPACKED = [
    ("qkv", E), ("softmax_scale", None), ("causal", False), ("q_descale", None), ("k_descale", None),
    ("v_descale", None), ("window_size", (-1, -1)), ("attention_chunk", 0), ("softcap", 0.0),
    ("deterministic", False), ("num_heads_q", None), ("sm_margin", 0), ("return_attn_probs", False),
]


def sig(f):
    return [(p.name, p.default) for p in inspect.signature(f).parameters.values()]


@pytest.mark.parametrize("fn,expected", [(fai.flash_attn_func, FA3_FLASH_ATTN_FUNC),
                                         (fai.flash_attn_varlen_func, FA3_FLASH_ATTN_VARLEN_FUNC),
                                         (fai.flash_attn_qkvpacked_func, FA3_QKVPACKED)])
def test_signature_matches_fa3(fn, expected):
    assert sig(fn) == expected


def e(*s, dtype=torch.bfloat16):
    return torch.empty(*s, dtype=dtype, device="cuda")


def test_return_convention():
    with FakeTensorMode():
        q = e(2, 5, 4, HD)
        out = fai.flash_attn_func(q, q, q)
        assert isinstance(out, torch.Tensor) and out.shape == (2, 5, 4, HD)
        out, lse = fai.flash_attn_func(q, q, q, return_attn_probs=True)
        assert out.shape == (2, 5, 4, HD) and lse.shape == (2, 4, 5)
        qv = e(10, 4, HD)
        cu = torch.empty(3, dtype=torch.int32, device="cuda")
        out = fai.flash_attn_varlen_func(qv, qv, qv, cu, cu, 5, 5)
        assert isinstance(out, torch.Tensor) and out.shape == (10, 4, HD)
        out, lse = fai.flash_attn_varlen_func(qv, qv, qv, cu, cu, 5, 5, return_attn_probs=True)
        assert lse.shape == (4, 10)


def test_qkvpacked_shapes():
    with FakeTensorMode():
        out = fai.flash_attn_qkvpacked_func(e(2, 5, 3, 4, HD))
        assert out.shape == (2, 5, 4, HD)
        out = fai.flash_attn_qkvpacked_func(e(2, 5, 8, HD), num_heads_q=4)  # 4 q + 2 k + 2 v heads
        assert out.shape == (2, 5, 4, HD)
    with pytest.raises(ValueError, match="num_heads_q"):
        with FakeTensorMode():
            fai.flash_attn_qkvpacked_func(e(2, 5, 8, HD))


@pytest.mark.parametrize("kw,feature", [
    (dict(qv="x"), "qv"), (dict(attention_chunk=128), "attention_chunk"), (dict(num_splits=4), "num_splits"),
    (dict(pack_gqa=True), "pack_gqa"), (dict(deterministic=True), "deterministic"),
    (dict(sm_margin=8), "sm_margin"),
])
def test_unbuilt_features_raise(kw, feature):
    with FakeTensorMode():
        q = e(2, 5, 4, HD)
        with pytest.raises(NotImplementedError, match=feature):
            fai.flash_attn_func(q, q, q, **kw)
        qv = e(10, 4, HD)
        cu = torch.empty(3, dtype=torch.int32, device="cuda")
        with pytest.raises(NotImplementedError, match=feature):
            fai.flash_attn_varlen_func(qv, qv, qv, cu, cu, 5, 5, **kw)


def test_seqused_q_raises():
    with FakeTensorMode():
        qv = e(10, 4, HD)
        cu = torch.empty(3, dtype=torch.int32, device="cuda")
        with pytest.raises(NotImplementedError, match="seqused_q"):
            fai.flash_attn_varlen_func(qv, qv, qv, cu, cu, 5, 5, seqused_q=cu)


def test_defaults_and_harmless_values_accepted():
    with FakeTensorMode():
        q = e(2, 5, 4, HD)
        fai.flash_attn_func(q, q, q, num_splits=0, pack_gqa=False, window_size=[3, 0])


def test_num_splits_negative():
    with FakeTensorMode():
        q = e(2, 5, 4, HD)
        with pytest.raises(ValueError, match="num_splits"):
            fai.flash_attn_func(q, q, q, num_splits=-1)


@pytest.mark.parametrize("fn", [fai.flash_attn_with_kvcache, fai.get_scheduler_metadata])
def test_kvcache_entry_points_raise(fn):
    with pytest.raises(NotImplementedError, match=fn.__name__):
        fn(None, None, None)


def test_combine_raises():
    with pytest.raises(NotImplementedError, match="flash_attn_combine"):
        fai.flash_attn_combine(None, None)
