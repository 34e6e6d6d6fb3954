"""CPU: the eager host path (DESIGN principle 3, and the host-time work of the Python layer).

- The eager fast path (ops._dispatcher_adds_nothing): a plain eager call runs the op's
  implementation without torch's dispatcher; whenever the dispatcher could act on the call
  (autograd, a dispatch or function mode, a profiler, functorch, torch.compile, a tensor
  subclass or the meta device) the op is called as before, and both give the same outputs and
  the same errors.
- The packed FwdArgs (_lib.fwd_args) holds exactly what field-by-field assignment would, and
  ops._launch fills every field from the tensors.
- ops._kernel_ready's cheap common case gives what the general rule gives.

No kernel runs: the CUDA-device check is switched off and ops._launch / _lib.fwd are replaced by
spies, on CPU tensors.
"""
import ctypes
import math

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import flashcute
from flashcute import _lib, ops
from flashcute import _validation as V
from flashcute import flash_attn_interface as fai
from flashcute import fp8 as F
from _compile_util import captured_graph_code

HD = _lib.COMPILED_HEAD_DIMS[0] if _lib.COMPILED_HEAD_DIMS else 128
BF = torch.bfloat16


def rnd(*shape, dtype=BF, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def fake_launch(q, k, v, out, lse, cu_seqlens_q, *rest):
    """Stands in for the kernel: out and lse become functions of the inputs (never zeros)."""
    out.copy_(q[..., : out.shape[-1]].float() * 2 + v.float().sum() / 7)
    rows = q.float().sum(-1)  # (b, s, h) dense, (t, h) varlen
    lse.copy_(rows.transpose(-1, -2) if cu_seqlens_q is not None else rows.transpose(1, 2))


@pytest.fixture
def cpu_kernel(monkeypatch):
    """CPU tensors pass the CUDA check; ops._launch is fake_launch."""
    monkeypatch.setattr(V, "check_cuda", lambda *a: None)
    monkeypatch.setattr(ops, "_launch", fake_launch)


@pytest.fixture
def cpu_launch(cpu_kernel, monkeypatch):
    """cpu_kernel, and the list of calls that went through torch.ops.flashcute.fwd (the
    dispatcher). (Not with modes: they look up torch.ops.flashcute.fwd.default themselves.)"""
    calls = []
    real_op = torch.ops.flashcute.fwd

    def op(*args):
        calls.append(args)
        return real_op(*args)

    monkeypatch.setattr(torch.ops.flashcute, "fwd", op)
    return calls


def force_dispatcher(monkeypatch):
    monkeypatch.setattr(ops, "_dispatcher_adds_nothing", lambda tensors: False)


def same_tensor(a, b):
    return (a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride() and a.device == b.device
            and a.requires_grad == b.requires_grad and a.is_inference() == b.is_inference()
            and torch.equal(a, b))


# ---- which path a call takes -------------------------------------------------------------------
def test_plain_eager_call_skips_the_dispatcher(cpu_launch):
    q, k = rnd(2, 9, 4, HD), rnd(2, 7, 2, HD, seed=1)
    out = flashcute.flash_attn_func(q, k, k, causal=True)
    assert cpu_launch == [] and out.shape == (2, 9, 4, HD)
    assert ops._dispatcher_adds_nothing((q, k, k, None))


@pytest.mark.parametrize("grad_mode", ["enabled", "no_grad", "inference_mode"])
def test_fast_path_and_op_give_the_same_outputs(cpu_launch, monkeypatch, grad_mode):
    q, k, v = rnd(2, 9, 4, HD), rnd(2, 7, 2, HD, seed=1), rnd(2, 7, 2, HD, seed=2)
    cq, ck = torch.tensor([0, 5, 9], dtype=torch.int32), torch.tensor([0, 3, 7], dtype=torch.int32)
    qs, ks, vs = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    calls = [
        lambda: flashcute.flash_attn_func(q, k, v, causal=True, return_lse=True),
        lambda: flashcute.flash_attn_func(q.half(), k.half(), v.half(), window_size=(3, 1), return_lse=True),
        lambda: flashcute.flash_attn_varlen_func(q[0], k[0], v[0], cq, ck, 5, 4, causal=True, return_lse=True),
        lambda: (flashcute.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True),),
        lambda: fai.flash_attn_func(q, k, v, causal=True, return_attn_probs=True),
        lambda: fai.flash_attn_varlen_func(q[0], k[0], v[0], cq, ck, 5, 4, return_attn_probs=True),
    ]
    ctx = {"enabled": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}[grad_mode]
    with ctx():
        fast = [c() for c in calls]
    assert cpu_launch == []
    force_dispatcher(monkeypatch)
    with ctx():
        via_op = [c() for c in calls]
    assert len(cpu_launch) == len(calls)
    for a, b in zip(fast, via_op):
        assert all(same_tensor(x, y) for x, y in zip(a, b))


def test_fast_path_and_op_raise_the_same_error(cpu_launch, monkeypatch):
    def failing_launch(*args):
        raise ValueError("flashcute: a library error")

    monkeypatch.setattr(ops, "_launch", failing_launch)
    q = rnd(1, 4, 2, HD)
    with pytest.raises(ValueError, match="a library error"):
        flashcute.flash_attn_func(q, q, q)
    assert cpu_launch == []
    force_dispatcher(monkeypatch)
    with pytest.raises(ValueError, match="a library error"):
        flashcute.flash_attn_func(q, q, q)
    assert len(cpu_launch) == 1


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_requires_grad_keeps_the_op_and_its_backward(cpu_launch, which):
    tensors = {"q": rnd(1, 6, 2, HD), "k": rnd(1, 5, 2, HD, seed=1), "v": rnd(1, 5, 2, HD, seed=2)}
    tensors[which].requires_grad_()
    out = flashcute.flash_attn_func(tensors["q"], tensors["k"], tensors["v"], causal=True)
    assert len(cpu_launch) == 1 and out.requires_grad
    with pytest.raises(NotImplementedError, match="backward"):
        out.float().sum().backward()
    with torch.no_grad():  # no graph to build: the fast path
        out = flashcute.flash_attn_func(tensors["q"], tensors["k"], tensors["v"], causal=True)
    assert len(cpu_launch) == 1 and not out.requires_grad


def test_descale_requiring_grad_keeps_the_op(cpu_launch):
    q8 = rnd(1, 6, 2, HD).to(torch.float8_e4m3fn)
    ds = torch.ones(1, 2, requires_grad=True)
    out = fai.flash_attn_func(q8, q8, q8, q_descale=ds)
    assert len(cpu_launch) == 1 and out.requires_grad


class RecordingDispatchMode(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


class RecordingFunctionMode(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode", [RecordingDispatchMode, RecordingFunctionMode])
def test_modes_see_the_op(cpu_kernel, mode):
    q = rnd(1, 6, 2, HD)
    with torch.no_grad(), mode() as m:
        flashcute.flash_attn_func(q, q, q)
        flashcute.scaled_dot_product_attention(q, q, q)
    assert sum("flashcute.fwd" in s for s in m.seen) == 2, m.seen


def test_flop_counter_mode_sees_the_op(cpu_kernel):
    """FlopCounterMode (a dispatch mode) is called with the op: a flop formula registered for
    flashcute::fwd counts it."""
    from torch.utils.flop_counter import FlopCounterMode, register_flop_formula

    def flops(*args, **kwargs):
        return 1234

    q = rnd(1, 6, 2, HD)
    register_flop_formula(torch.ops.flashcute.fwd, get_raw=True)(flops)
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            flashcute.flash_attn_func(q, q, q)
        assert counter.get_total_flops() == 1234
    finally:
        from torch.utils import flop_counter
        flop_counter.flop_registry.pop(torch.ops.flashcute.fwd, None)


def test_profiler_sees_the_op(cpu_launch):
    q = rnd(1, 6, 2, HD)
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        flashcute.flash_attn_func(q, q, q)
    assert len(cpu_launch) == 1
    assert any(e.name == "flashcute::fwd" for e in prof.events())


def test_dispatcher_needed_for_subclasses_meta_and_transforms():
    q = rnd(1, 6, 2, HD)
    assert ops._dispatcher_adds_nothing((q, None, q))

    class Sub(torch.Tensor):
        pass

    assert not ops._dispatcher_adds_nothing((q, q.as_subclass(Sub)))
    assert not ops._dispatcher_adds_nothing((q, torch.empty(2, device="meta")))
    seen = []
    torch.func.vmap(lambda x: seen.append(ops._dispatcher_adds_nothing((x,))) or x)(rnd(3, 4))
    assert seen == [False]
    assert not ops._dispatcher_adds_nothing((q.detach().requires_grad_(),))
    with torch.no_grad():
        assert ops._dispatcher_adds_nothing((q.detach().requires_grad_(),))


def test_older_torch_without_the_state_queries_takes_the_op(cpu_launch, monkeypatch):
    monkeypatch.setattr(ops, "_CAN_BYPASS", False)
    q = rnd(1, 6, 2, HD)
    flashcute.flash_attn_func(q, q, q)
    assert len(cpu_launch) == 1


def test_torch_compile_traces_the_op(monkeypatch):
    """Under torch.compile the op (not its implementation) lands in the graph, also in no_grad
    where eager would take the fast path."""
    monkeypatch.setattr(V, "check_cuda", lambda *a: None)

    def f(q, k, v):
        a = flashcute.flash_attn_func(q, k, v, causal=True)
        b = flashcute.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return a, b

    q, k = rnd(1, 16, 4, HD), rnd(1, 16, 4, HD, seed=1)
    assert captured_graph_code(f, q, k, k, no_grad=True).count("flashcute.fwd") == 2


# ---- the FP8 quantizer's op --------------------------------------------------------------------
def test_quantize_fast_path_matches_the_op(monkeypatch):
    """quantize / quantize_qkv (CPU: the torch path computes for real) give bit-identical results
    with and without the dispatcher."""
    q, k = rnd(2, 9, 4, HD, seed=3), rnd(2, 7, 2, HD, seed=4)
    calls = []
    for name in ("fp8_quantize", "fp8_quantize_qkv"):
        real = getattr(torch.ops.flashcute, name)
        monkeypatch.setattr(torch.ops.flashcute, name,
                            lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))

    def run():
        return (F.quantize(q, 2, rotate=True, seed=5) + F.quantize(k, layout="bhsd")
                + F.quantize_qkv(q, k, k, rotate=True, seed=6)[:3] + F.quantize_qkv(q, k, k)[3])

    fast = run()
    assert calls == []
    force_dispatcher(monkeypatch)
    via_op = run()
    assert calls == ["fp8_quantize", "fp8_quantize", "fp8_quantize_qkv", "fp8_quantize_qkv"]
    for a, b in zip(fast, via_op):
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
        assert torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                           b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b)


def test_quantize_on_meta_takes_the_fake_kernel():
    x8, ds = F.quantize(torch.empty(2, 5, 4, HD, dtype=BF, device="meta"), 2)
    assert x8.device.type == "meta" and x8.shape == (2, 5, 4, HD) and ds.shape == (2, 2)


# ---- FwdArgs packing ---------------------------------------------------------------------------
_FWD_ARGS_PARAMS = dict(
    q=0x1000, k=0x2000, v=0x3000, out=0x4000, lse=0x5000,
    q_strides=(11, 12, 13), k_strides=(14, 15, 16), v_strides=(17, 18, 19), out_strides=(20, 21, 22),
    lse_strides=(23, 24), batch=25, seqlen_q=26, seqlen_k=27, heads_q=28, heads_k=29, head_dim=30,
    head_dim_v=31, dtype=1, out_dtype=2, softmax_scale=0.125, causal=1, window_left=-1, window_right=33,
    mask_align=1, softcap=2.5, cu_seqlens_q=0x6000, cu_seqlens_k=0x7000, seqused_k=0x8000, total_q=34,
    total_k=35, q_descale=0x9000, k_descale=0xA000, v_descale=0xB000, descale_strides=(36, 37), backend=2,
    device=3, stream=0xC000, v_colmajor=1, tile_counter=0xD000, descale_block_keys=192,
    q_descale_strides=(38, 39))

_EXPECTED_FIELDS = dict(
    struct_size=ctypes.sizeof(_lib.FwdArgs), q=0x1000, k=0x2000, v=0x3000, out=0x4000, lse=0x5000,
    q_batch_stride=11, q_row_stride=12, q_head_stride=13, k_batch_stride=14, k_row_stride=15, k_head_stride=16,
    v_batch_stride=17, v_row_stride=18, v_head_stride=19, out_batch_stride=20, out_row_stride=21,
    out_head_stride=22, lse_batch_stride=23, lse_head_stride=24, batch=25, seqlen_q=26, seqlen_k=27,
    heads_q=28, heads_k=29, head_dim=30, head_dim_v=31, dtype=1, out_dtype=2, softmax_scale=0.125, causal=1,
    window_left=-1, window_right=33, mask_align=1, softcap=2.5, cu_seqlens_q=0x6000, cu_seqlens_k=0x7000,
    seqused_k=0x8000, total_q=34, total_k=35, q_descale=0x9000, k_descale=0xA000, v_descale=0xB000,
    descale_batch_stride=36, descale_head_stride=37, backend=2, device=3, stream=0xC000, v_colmajor=1,
    tile_counter=0xD000, descale_block_keys=192, q_descale_batch_stride=38, q_descale_head_stride=39)


def fields(a):
    return {name: getattr(a, name) for name, _ in _lib.FwdArgs._fields_}


def test_fwd_args_sets_every_field_by_name():
    assert set(_EXPECTED_FIELDS) == {name for name, _ in _lib.FwdArgs._fields_}
    assert fields(_lib.fwd_args(**_FWD_ARGS_PARAMS)) == _EXPECTED_FIELDS
    assert _lib._FWD_STRUCT.size == ctypes.sizeof(_lib.FwdArgs) == _lib.lib_fwd_args_size()


@pytest.mark.parametrize("field,value", [("window_left", 2 ** 40 + 5), ("window_right", -2 ** 33),
                                         ("softmax_scale", 1e300), ("softcap", -1e39), ("seqlen_q", 2 ** 31)])
def test_fwd_args_out_of_range_values_match_ctypes(field, value):
    """Values struct refuses are stored as ctypes stores them (wrapped ints, float32 inf)."""
    params = dict(_FWD_ARGS_PARAMS, **{field: value})
    by_hand = _lib.FwdArgs()
    for name, v in _EXPECTED_FIELDS.items():
        setattr(by_hand, name, value if name == field else v)
    got = fields(_lib.fwd_args(**params))
    assert got == fields(by_hand) and (math.isinf(got[field]) if "soft" in field else got[field] != value)


def test_fwd_args_wrong_arity_is_an_error():
    with pytest.raises(TypeError):
        _lib.fwd_args(**dict(_FWD_ARGS_PARAMS, q_strides=(1, 2, 3, 4)))


@pytest.fixture
def captured_args(monkeypatch):
    monkeypatch.setattr(V, "check_cuda", lambda *a: None)
    monkeypatch.setattr(ops, "_stream_handle", lambda t: 0xABC0)
    seen = []
    monkeypatch.setattr(_lib, "fwd", lambda a: seen.append(fields(a)))
    return seen


def test_launch_fills_every_field_dense(captured_args):
    b, sq, sk, hq, hk, d = 2, 9, 7, 6, 2, HD
    qkv = rnd(b, sq, hq + 2 * hk, d)  # views of a packed tensor: used in place
    q, k, v = qkv.split([hq, hk, hk], dim=2)
    k, v = k[:, :sk], v[:, :sk]
    out, lse = torch.empty(b, sq, hq, d, dtype=BF), torch.empty(b, hq, sq)
    ops._launch(q, k, v, out, lse, None, None, None, 0, 0, None, None, None, 0.3, True, 5, -1, 1.5, True, "sm80")
    row = (hq + 2 * hk) * d
    expected = dict(
        struct_size=ctypes.sizeof(_lib.FwdArgs), q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(),
        out=out.data_ptr(), lse=lse.data_ptr(),
        q_batch_stride=sq * row, q_row_stride=row, q_head_stride=d, k_batch_stride=sq * row, k_row_stride=row,
        k_head_stride=d, v_batch_stride=sq * row, v_row_stride=row, v_head_stride=d,
        out_batch_stride=sq * hq * d, out_row_stride=hq * d, out_head_stride=d,
        lse_batch_stride=hq * sq, lse_head_stride=sq, batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_k=hk,
        head_dim=d, head_dim_v=d, dtype=_lib.DTYPE_BF16, out_dtype=_lib.DTYPE_BF16,
        softmax_scale=pytest.approx(0.3), causal=1, window_left=5, window_right=-1,
        mask_align=_lib.ALIGN_TOP_LEFT, softcap=1.5, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None,
        total_q=0, total_k=0, q_descale=None, k_descale=None, v_descale=None, descale_batch_stride=0,
        descale_head_stride=0, backend=_lib.BACKEND_SM80, device=-1, stream=0xABC0, v_colmajor=0,
        tile_counter=None, descale_block_keys=0, q_descale_batch_stride=0, q_descale_head_stride=0)
    assert captured_args == [expected]


def test_launch_fills_every_field_varlen_fp8(captured_args):
    tq, tk, hq, hk, d = 11, 8, 4, 2, HD
    q, k, v = (rnd(n, h, d, seed=i).to(torch.float8_e4m3fn) for i, (n, h) in enumerate([(tq, hq), (tk, hk), (tk, hk)]))
    cq, ck = torch.tensor([0, 4, 11], dtype=torch.int32), torch.tensor([0, 8, 8], dtype=torch.int32)
    used = torch.tensor([3, 0], dtype=torch.int32)
    qd, vd = torch.ones(2, hk), torch.ones(4, hk)[::2]  # vd not contiguous: copied
    out, lse = torch.empty(tq, hq, d, dtype=torch.float16), torch.empty(hq, tq)
    ops._launch(q, k, v, out, lse, cq, ck, used, 7, 8, qd, None, vd, 0.5, False, -1, -1, 0.0, False, "auto")
    got = captured_args[0]
    assert got.pop("v_descale") not in (None, vd.data_ptr())  # a contiguous copy of vd
    assert got == dict(
        struct_size=ctypes.sizeof(_lib.FwdArgs), q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(),
        out=out.data_ptr(), lse=lse.data_ptr(),
        q_batch_stride=0, q_row_stride=hq * d, q_head_stride=d, k_batch_stride=0, k_row_stride=hk * d,
        k_head_stride=d, v_batch_stride=0, v_row_stride=hk * d, v_head_stride=d,
        out_batch_stride=0, out_row_stride=hq * d, out_head_stride=d, lse_batch_stride=0, lse_head_stride=tq,
        batch=2, seqlen_q=7, seqlen_k=8, heads_q=hq, heads_k=hk, head_dim=d, head_dim_v=d,
        dtype=_lib.DTYPE_E4M3, out_dtype=_lib.DTYPE_FP16, softmax_scale=0.5, causal=0, window_left=-1,
        window_right=-1, mask_align=_lib.ALIGN_BOTTOM_RIGHT, softcap=0.0, cu_seqlens_q=cq.data_ptr(),
        cu_seqlens_k=ck.data_ptr(), seqused_k=used.data_ptr(), total_q=tq, total_k=tk,
        q_descale=qd.data_ptr(), k_descale=None, descale_batch_stride=hk, descale_head_stride=1,
        backend=_lib.BACKEND_AUTO, device=-1, stream=0xABC0, v_colmajor=0, tile_counter=None,
        descale_block_keys=0, q_descale_batch_stride=0, q_descale_head_stride=0)


@pytest.mark.parametrize("sk,block", [(300, 128), (4100, 192)])
def test_launch_passes_block_descales_with_vt(captured_args, sk, block):
    """The FP8 mode's block-wise descales (3-D) on V^T: the key block is the kernel's tile
    (ops.vt_key_block), q's strides per (batch, head) row, k's and v's per block."""
    b, sq, hq, hk, d = 2, 5, 4, 2, 128
    q, k = rnd(b, sq, hq, d).to(torch.float8_e4m3fn), rnd(b, sk, hk, d, seed=1).to(torch.float8_e4m3fn)
    vt = ops.v_colmajor(rnd(b, sk, hk, d, seed=2).to(torch.float8_e4m3fn))
    nb = -(-sk // block)
    qd, kd, vd = torch.ones(b, hq, sq), torch.ones(b, hk, nb), torch.ones(b, hk, nb)
    out, lse = torch.empty(b, sq, hq, d, dtype=BF), torch.empty(b, hq, sq)
    ops._launch(q, k, vt, out, lse, None, None, None, 0, 0, qd, kd, vd, 0.5, False, -1, -1, 0.0, False, "sm90", True)
    got = captured_args[0]
    assert (got["descale_block_keys"], got["q_descale_batch_stride"], got["q_descale_head_stride"]) == (block, hq * sq, sq)
    assert (got["descale_batch_stride"], got["descale_head_stride"], got["v_colmajor"]) == (hk * nb, nb, 1)
    assert (got["q_descale"], got["k_descale"], got["v_descale"]) == (qd.data_ptr(), kd.data_ptr(), vd.data_ptr())


def test_vt_key_block_mirrors_the_library():
    for d in (64, 96, 128, 192, 256):
        for sk in (0, 1, 4095, 4096, 100000):
            assert ops.vt_key_block(d, sk) == _lib.fp8_descale_block_keys(d, d, sk), (d, sk)
    assert _lib.fp8_descale_block_keys(192, 128, 4096) == 0


@pytest.mark.parametrize("be,causal,window_right,sms,passed", [
    ("auto", True, -1, 132, True), ("sm90", False, 0, 132, True), ("auto", False, -1, 132, False),
    ("sm80", True, -1, 132, False), ("auto", True, -1, 0, False), ("auto", True, -1, 138, False)])
def test_launch_passes_a_tile_counter_for_sm90_causal_and_local(captured_args, monkeypatch, be, causal,
                                                                 window_right, sms, passed):
    """Causal/local calls on a compute capability 9.x GPU (sms > 0; unless sm80 is forced) with
    more query tiles than SMs get zeroed scratch (ops._tile_counter) for the kernel's dynamic tile
    hand-out; others get NULL. Here 3 x 2 heads x 23 tiles of 128 rows = 138 tiles."""
    monkeypatch.setattr(ops, "_sm90_sms", lambda t: sms)
    made = []
    monkeypatch.setattr(ops, "_tile_counter", lambda q, st: made.append(torch.zeros(2, dtype=torch.int32)) or made[-1])
    q, out, lse = rnd(3, 2900, 2, HD), torch.empty(3, 2900, 2, HD, dtype=BF), torch.empty(3, 2, 2900)
    ops._launch(q, q, q, out, lse, None, None, None, 0, 0, None, None, None, 0.3, causal, -1, window_right,
                0.0, False, be)
    assert captured_args[0]["tile_counter"] == (made[0].data_ptr() if passed else None)
    assert len(made) == int(passed)


# ---- _kernel_ready -----------------------------------------------------------------------------
def kernel_ready_reference(t):
    """The rule, written plainly: normalize size-1 strides, copy unless the last dim is
    contiguous, the pointer 16-byte aligned and every other stride a multiple of 16 bytes."""
    def normalized(x):
        sizes, strides = list(x.shape), list(x.stride())
        for i in range(x.dim() - 2, -1, -1):
            if sizes[i] == 1:
                strides[i] = strides[i + 1] * max(sizes[i + 1], 1)
        return strides

    vec = 16 // t.element_size()
    if t.stride(-1) != 1 and t.shape[-1] != 1:
        t = t.clone(memory_format=torch.contiguous_format)
    strides = normalized(t)
    strides[-1] = 1
    if t.data_ptr() % 16 != 0 or any(s % vec for s in strides[:-1]):
        t = t.clone(memory_format=torch.contiguous_format)
        strides = normalized(t)
    return t, strides


def strided_cases():
    base = rnd(2 * 9 * 6 * HD + 8)
    yield "contiguous", rnd(2, 9, 6, HD)
    yield "packed view", rnd(2, 9, 10, HD).split([6, 2, 2], dim=2)[1]
    yield "size-1 dims", rnd(1, 1, 6, HD)[:, :, 2:3]
    yield "misaligned", base[1:1 + 2 * 9 * 6 * HD].view(2, 9, 6, HD)
    yield "odd row stride", rnd(2, 9, 6, HD + 4)[..., :HD]
    yield "last dim strided", rnd(2, 9, 6, 2 * HD)[..., ::2]
    yield "transposed", rnd(2, 6, 9, HD).transpose(1, 2)
    yield "varlen", rnd(17, 3, HD)
    yield "fp8", rnd(2, 9, 6, HD).to(torch.float8_e4m3fn)


@pytest.mark.parametrize("case", [c for c, _ in strided_cases()])
def test_kernel_ready_matches_the_rule(case):
    t = dict(strided_cases())[case]
    got, got_strides = ops._kernel_ready(t, t.shape)
    want, want_strides = kernel_ready_reference(t)
    assert list(got_strides) == want_strides
    assert (got.data_ptr() == t.data_ptr()) == (want.data_ptr() == t.data_ptr())
    assert got.stride() == want.stride() and torch.equal(got.float(), t.float())


# ---- varlen value checks -----------------------------------------------------------------------
def i32(*v):
    return torch.tensor(v, dtype=torch.int32)


VARLEN_VALUE_CASES = [
    ("valid", (i32(0, 3, 3, 8), i32(0, 2, 6, 9), i32(2, 4, 0), 5, 4, 8, 9)),
    ("seqused too long", (i32(0, 3, 3, 8), i32(0, 2, 6, 9), i32(2, 5, 0), 5, 4, 8, 9)),
    ("cu_k decreasing", (i32(0, 3, 3, 8), i32(0, 6, 2, 9), None, 5, 6, 8, 9)),
    ("cu_q start", (i32(1, 3, 3, 8), i32(0, 2, 6, 9), None, 5, 4, 8, 9)),
    ("max_seqlen_k small", (i32(0, 3, 3, 8), i32(0, 2, 6, 9), i32(2, 4, 0), 5, 3, 8, 9)),
]


def outcome(fn):
    try:
        return ("ok", fn())
    except ValueError as e:
        return ("ValueError", str(e))


@pytest.mark.parametrize("case", [c for c, _ in VARLEN_VALUE_CASES])
def test_varlen_values_read_in_one_transfer_match(monkeypatch, case):
    """CUDA tensors are read with one torch.cat (one sync); pretending CPU tensors are CUDA takes
    that branch, which must give what reading them one by one gives."""
    args = dict(VARLEN_VALUE_CASES)[case]
    one_by_one = outcome(lambda: V.check_varlen_values(*args))
    cats = []
    real_cat = torch.cat
    monkeypatch.setattr(torch, "cat", lambda ts, *a, **k: cats.append(len(ts)) or real_cat(ts, *a, **k))
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    assert outcome(lambda: V.check_varlen_values(*args)) == one_by_one
    assert cats == [2 if args[2] is None else 3]
    assert (one_by_one[0] == "ok") == (case == "valid")


def test_values_readable():
    from torch._subclasses.fake_tensor import FakeTensorMode

    cu = i32(0, 3)
    assert V.values_readable(cu, None, cu)
    assert not V.values_readable(cu, torch.empty(2, dtype=torch.int32, device="meta"))
    with FakeTensorMode():
        fake = torch.empty(2, dtype=torch.int32)
    assert not V.values_readable(fake, cu)
