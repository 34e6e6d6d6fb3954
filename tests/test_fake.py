"""CPU: the op's register_fake gives the right shapes / dtypes, without device work."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flashcute
from flashcute import _lib, flash_attn_interface as fai

HD = _lib.COMPILED_HEAD_DIMS[0] if _lib.COMPILED_HEAD_DIMS else 128


def e(*s, dtype=torch.bfloat16, device="cuda"):
    return torch.empty(*s, dtype=dtype, device=device)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dense_shapes(dtype):
    with FakeTensorMode():
        q, k, v = e(3, 17, 8, HD, dtype=dtype), e(3, 5, 2, HD, dtype=dtype), e(3, 5, 2, HD, dtype=dtype)
        out, lse = flashcute.flash_attn_func(q, k, v, return_lse=True)
        assert out.shape == (3, 17, 8, HD) and out.dtype == dtype and out.device.type == "cuda"
        assert lse.shape == (3, 8, 17) and lse.dtype == torch.float32
        assert out.is_contiguous() and lse.is_contiguous()


def test_varlen_shapes():
    with FakeTensorMode():
        q, k = e(20, 4, HD), e(30, 1, HD)
        cu = torch.empty(4, dtype=torch.int32, device="cuda")
        out, lse = flashcute.flash_attn_varlen_func(q, k, k, cu, cu, 10, 12, return_lse=True)
        assert out.shape == (20, 4, HD) and lse.shape == (4, 20)


def test_sdpa_shape_and_view():
    with FakeTensorMode():
        q, k = e(2, 4, 9, HD), e(2, 4, 3, HD)
        out = flashcute.scaled_dot_product_attention(q, k, k)
        assert out.shape == (2, 4, 9, HD)
        # a (b, h, s, d) view of a (b, s, h, d) buffer, like torch's flash backend
        assert out.stride() == (9 * 4 * HD, HD, 4 * HD, 1)


def test_fp8_out_dtype_is_bf16():
    with FakeTensorMode():
        q = e(1, 4, 2, HD, dtype=torch.float8_e4m3fn)
        out, lse = fai.flash_attn_func(q, q, q, return_attn_probs=True)
        assert out.dtype == torch.bfloat16 and lse.shape == (1, 2, 4)


def test_op_is_registered_with_schema():
    op = torch.ops.flashcute.fwd.default
    s = str(op._schema)
    assert s.startswith("flashcute::fwd(") and "-> (Tensor, Tensor)" in s


def _meta_args():
    q, k, v = e(2, 7, 4, HD, device="meta"), e(2, 5, 2, HD, device="meta"), e(2, 5, 2, HD, device="meta")
    return (q, k, v, None, None, None, 0, 0, None, None, None, 0.1, True, -1, -1, 0.0, False, "auto", None)


def test_meta_dispatch():
    out, lse = torch.ops.flashcute.fwd(*_meta_args())
    assert out.device.type == "meta" and out.shape == (2, 7, 4, HD) and lse.shape == (2, 4, 7)


def test_opcheck_schema_and_fake_on_meta():
    torch.library.opcheck(torch.ops.flashcute.fwd.default, _meta_args(),
                          test_utils=("test_schema", "test_faketensor"))


def test_backward_raises_not_implemented():
    args = list(_meta_args())
    args[0] = args[0].requires_grad_()
    out, lse = torch.ops.flashcute.fwd(*args)
    assert out.requires_grad
    with pytest.raises(NotImplementedError, match="backward"):
        out.sum().backward()
