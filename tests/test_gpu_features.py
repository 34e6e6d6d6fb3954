"""GPU: varlen, packed-qkv views, the SDPA API, empty inputs, copy policy, determinism,
torch.compile, CUDA graphs, non-default streams, opcheck, and library errors."""

import pytest
import torch

import flashcute
from flashcute import flash_attn_interface as fai
from _gpu_util import _fwd_into, check_close, nan_buffers, randn, require, shapes_for

pytestmark = pytest.mark.gpu
BF = torch.bfloat16


def hd(backend):
    return shapes_for(backend)[0][0]


def cu(lengths):
    c = [0]
    for n in lengths:
        c.append(c[-1] + n)
    return torch.tensor(c, dtype=torch.int32, device="cuda")


@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (False, (32, 8)), (True, (50, -1))])
@pytest.mark.parametrize("with_used", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_varlen(backend, causal, window, with_used, seed):
    d = hd(backend)
    require(backend, BF, d, d)
    g = torch.Generator().manual_seed(seed)
    batch = 7
    lq = torch.randint(0, 300, (batch,), generator=g).tolist()
    lk = torch.randint(0, 300, (batch,), generator=g).tolist()
    lq[0], lk[0], lq[1], lk[1], lq[2], lk[2] = 0, 5, 1, 1, 4, 0  # empty q, single row, empty k
    cq, ck = cu(lq), cu(lk)
    q, k, v = randn(sum(lq), 8, d, dtype=BF), randn(sum(lk), 2, d, dtype=BF), randn(sum(lk), 2, d, dtype=BF)
    used = None
    if with_used:
        used = torch.tensor([torch.randint(0, n + 1, (1,), generator=g).item() for n in lk],
                            dtype=torch.int32, device="cuda")
    out, lse = nan_buffers(q, v, varlen=True)
    _fwd_into(q, k, v, out, lse, cu_seqlens_q=cq, cu_seqlens_k=ck, seqused_k=used, max_seqlen_q=max(lq),
              max_seqlen_k=max(lk), causal=causal, window_size=window, backend=backend)
    check_close(out, lse, q, k, v, causal=causal, window_size=window, cu_seqlens_q=cq, cu_seqlens_k=ck,
                seqused_k=used)
    o2, l2 = flashcute.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=causal,
                                              window_size=window, seqused_k=used, return_lse=True,
                                              backend=backend)
    assert torch.equal(o2, out) and torch.equal(l2, lse)


def test_varlen_bad_cu_seqlens_eager(backend):
    d = hd(backend)
    q = randn(10, 2, d, dtype=BF)
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        flashcute.flash_attn_varlen_func(q, q, q, cu([5, -2, 7]), cu([5, 3, 2]), 7, 5, backend=backend)


@pytest.mark.parametrize("hq,hk", [(8, 8), (8, 2)])
def test_packed_qkv_views(backend, hq, hk):
    d = hd(backend)
    require(backend, BF, d, d)
    qkv = randn(3, 157, hq + 2 * hk, d, dtype=BF)
    q, k, v = qkv.split([hq, hk, hk], dim=2)
    assert not q.is_contiguous()
    out, lse = nan_buffers(q, v, varlen=False)
    _fwd_into(q, k, v, out, lse, causal=True, backend=backend)
    check_close(out, lse, q, k, v, causal=True)
    if hq == hk:
        qkv5 = qkv.view(3, 157, 3, hq, d)
        o5 = fai.flash_attn_qkvpacked_func(qkv5, causal=True)
        check_close(o5, lse, *qkv5.unbind(2), causal=True)


def test_views_are_not_copied(backend, monkeypatch):
    """q/k/v sliced from a packed tensor reach the library with their own data pointers."""
    d = hd(backend)
    require(backend, BF, d, d)
    from flashcute import _lib, ops

    seen = []
    real = _lib.fwd

    def spy(a):
        seen.append((a.q, a.k, a.v, a.q_row_stride))
        return real(a)

    monkeypatch.setattr(ops._lib, "fwd", spy)
    qkv = randn(2, 64, 12, d, dtype=BF)
    q, k, v = qkv.split([4, 4, 4], dim=2)
    flashcute.flash_attn_func(q, k, v, backend=backend)
    assert seen == [(q.data_ptr(), k.data_ptr(), v.data_ptr(), 12 * d)]


def test_misaligned_and_strided_inputs_are_copied_correctly(backend):
    d = hd(backend)
    require(backend, BF, d, d)
    buf = randn(2 * 50 * 4 * d + 1, dtype=BF)
    q = buf[1:].view(2, 50, 4, d)  # 2-byte offset: not 16-byte aligned
    k = randn(2, 60, 4, 2 * d, dtype=BF)[..., ::2]  # last-dim stride 2
    v = randn(2, 60, 4, d, dtype=BF)
    out, lse = flashcute.flash_attn_func(q, k, v, return_lse=True, backend=backend)
    check_close(out, lse, q, k, v)


def test_empty_inputs(backend):
    d = hd(backend)
    q, k = randn(2, 0, 4, d, dtype=BF), randn(2, 9, 4, d, dtype=BF)
    out, lse = flashcute.flash_attn_func(q, k, k, return_lse=True, backend=backend)
    assert out.shape == (2, 0, 4, d) and lse.shape == (2, 4, 0)
    q, k = randn(2, 5, 4, d, dtype=BF), randn(2, 0, 4, d, dtype=BF)
    out, lse = flashcute.flash_attn_func(q, k, k, return_lse=True, backend=backend)
    assert torch.all(out == 0) and torch.all(torch.isneginf(lse))


@pytest.mark.parametrize("sq,sk", [(37, 37), (37, 90), (90, 37)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("gqa", [False, True])
def test_sdpa_matches_torch_math(backend, sq, sk, causal, gqa):
    d = hd(backend)
    require("auto", torch.float16, d, d)
    hk = 2 if gqa else 8
    q, k, v = randn(2, 8, sq, d, dtype=torch.float16), randn(2, hk, sk, d, dtype=torch.float16), \
        randn(2, hk, sk, d, dtype=torch.float16)
    out = flashcute.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                               is_causal=causal, enable_gqa=gqa)
        lp = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    assert out.shape == ref.shape
    err, err_lp = (out.double() - ref).abs().max().item(), (lp.double() - ref).abs().max().item()
    assert err <= 2 * err_lp + 1e-5
    # top-left: with sq > sk no row is fully masked, and the result is not the bottom-right one
    if causal and sq != sk:
        br = flashcute.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
        assert not torch.allclose(br.transpose(1, 2).double(), ref, atol=1e-2, equal_nan=True)


@pytest.mark.parametrize("sq,causal", [(513, True), (1000, False)])
def test_determinism(backend, sq, causal):
    # Both tile orders of the sm90 scheduler: causal (longest first, in L2 sections) and
    # non-causal at d=128 with 192 tiles, more than the persistent grid has CTAs.
    d = hd(backend) if causal else 128
    require(backend, BF, d, d)
    q, k, v = randn(3, sq, 8, d, dtype=BF), randn(3, 700, 2, d, dtype=BF), randn(3, 700, 2, d, dtype=BF)
    first, lse0 = flashcute.flash_attn_func(q, k, v, causal=causal, return_lse=True, backend=backend)
    for _ in range(100):
        out, lse = flashcute.flash_attn_func(q, k, v, causal=causal, return_lse=True, backend=backend)
        assert torch.equal(out, first) and torch.equal(lse, lse0)


def test_torch_compile_fullgraph(backend):
    d = hd(backend)
    require(backend, BF, d, d)
    torch._dynamo.reset()

    def f(q, k, v):
        return flashcute.flash_attn_func(q * 2, k, v, causal=True, return_lse=True, backend=backend)

    q, k, v = randn(2, 100, 4, d, dtype=BF), randn(2, 120, 4, d, dtype=BF), randn(2, 120, 4, d, dtype=BF)
    eager = f(q, k, v)
    compiled = torch.compile(f, fullgraph=True)(q, k, v)
    assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])


def test_torch_compile_varlen_and_sdpa(backend):
    d = hd(backend)
    require("auto", BF, d, d)
    torch._dynamo.reset()
    cq, ck = cu([3, 50, 0, 20]), cu([10, 40, 5, 0])
    q, k = randn(73, 4, d, dtype=BF), randn(55, 2, d, dtype=BF)

    def g(q, k):
        a = flashcute.flash_attn_varlen_func(q, k, k, cq, ck, 50, 40, causal=True)
        b = flashcute.scaled_dot_product_attention(q[None].transpose(1, 2), k[None].transpose(1, 2),
                                                   k[None].transpose(1, 2), is_causal=True, enable_gqa=True)
        return a, b

    e = g(q, k)
    c = torch.compile(g, fullgraph=True)(q, k)
    assert torch.equal(e[0], c[0]) and torch.equal(e[1], c[1])


def test_cuda_graph_capture_and_replay(backend):
    d = hd(backend)
    require(backend, BF, d, d)
    q, k, v = randn(2, 200, 4, d, dtype=BF), randn(2, 150, 4, d, dtype=BF), randn(2, 150, 4, d, dtype=BF)
    cq, ck = cu([100, 0, 100]), cu([50, 50, 50])
    qv, kv = randn(200, 4, d, dtype=BF), randn(150, 4, d, dtype=BF)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up outside capture
        flashcute.flash_attn_func(q, k, v, causal=True, backend=backend)
        flashcute.flash_attn_varlen_func(qv, kv, kv, cq, ck, 100, 50, backend=backend)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flashcute.flash_attn_func(q, k, v, causal=True, backend=backend)
        outv = flashcute.flash_attn_varlen_func(qv, kv, kv, cq, ck, 100, 50, backend=backend)
    for _ in range(2):
        q.copy_(torch.randn_like(q))
        qv.copy_(torch.randn_like(qv))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, flashcute.flash_attn_func(q, k, v, causal=True, backend=backend))
        assert torch.equal(outv, flashcute.flash_attn_varlen_func(qv, kv, kv, cq, ck, 100, 50, backend=backend))


def test_non_default_stream(backend):
    """The kernel must run on torch.cuda.current_stream(): on a side stream, q2 is written after a
    long sleep; a kernel on any other stream would read q2 before that write (zeros)."""
    d = hd(backend)
    require(backend, BF, d, d)
    q, k, v = randn(4, 1024, 8, d, dtype=BF), randn(4, 1024, 8, d, dtype=BF), randn(4, 1024, 8, d, dtype=BF)
    ref = flashcute.flash_attn_func(q, k, v, backend=backend)
    q2 = torch.zeros_like(q)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)
        q2.copy_(q)
        out = flashcute.flash_attn_func(q2, k, v, backend=backend)
    s.synchronize()
    assert torch.equal(out, ref)


def test_opcheck(backend):
    d = hd(backend)
    require(backend, BF, d, d)
    q, k, v = randn(2, 33, 4, d, dtype=BF), randn(2, 40, 2, d, dtype=BF), randn(2, 40, 2, d, dtype=BF)
    args = (q, k, v, None, None, None, 0, 0, None, None, None, d ** -0.5, True, -1, -1, 0.0, False, backend, None)
    torch.library.opcheck(torch.ops.flashcute.fwd.default, args)
    cq, ck = cu([10, 23]), cu([40, 0])
    qv, kv = randn(33, 4, d, dtype=BF), randn(40, 2, d, dtype=BF)
    args = (qv, kv, kv, cq, ck, None, 23, 40, None, None, None, 0.1, False, 5, 5, 2.0, False, backend, None)
    torch.library.opcheck(torch.ops.flashcute.fwd.default, args)


def test_backward_not_implemented(backend):
    d = hd(backend)
    require(backend, BF, d, d)
    q = randn(1, 16, 2, d, dtype=BF).requires_grad_()
    out = flashcute.flash_attn_func(q, q.detach(), q.detach(), backend=backend)
    with pytest.raises(NotImplementedError, match="backward"):
        out.float().sum().backward()


def test_unsupported_errors_name_the_option():
    info = flashcute.build_info()
    if 192 not in info["head_dims"]:
        q = randn(1, 8, 2, 192, dtype=BF)
        with pytest.raises(ValueError, match="FLASHCUTE_HDIMS"):
            flashcute.flash_attn_func(q, q, q)
    if torch.cuda.get_device_capability() != (9, 0):
        d = info["head_dims"][0]
        q = randn(1, 8, 2, d, dtype=BF)
        with pytest.raises(NotImplementedError, match="sm90"):
            flashcute.flash_attn_func(q, q, q, backend="sm90")


def test_fp8_reaches_library():
    d = flashcute.build_info()["head_dims"][0]
    q = randn(1, 8, 2, d, dtype=BF).to(torch.float8_e4m3fn)
    ds = torch.ones(1, 2, dtype=torch.float32, device="cuda")
    if flashcute.build_info().get("fp8"):
        out = fai.flash_attn_func(q, q, q, q_descale=ds, k_descale=ds, v_descale=ds)
        assert out.dtype == torch.bfloat16
    else:
        with pytest.raises(NotImplementedError):
            fai.flash_attn_func(q, q, q, q_descale=ds, k_descale=ds, v_descale=ds)


# ---- the sm90 kernel's dynamic tile hand-out (flashcute_fwd_args.tile_counter) ------------------
@pytest.mark.parametrize("dtype,d", [(BF, 64), (BF, 128), (BF, 256), (torch.float8_e4m3fn, 128),
                                     (torch.float8_e4m3fn, 256)])
@pytest.mark.parametrize("sq,sk,mask", [(1000, 1300, dict(causal=True)), (1000, 300, dict(causal=True)),
                                        (700, 700, dict(window_size=(64, 32))),
                                        (800, 1200, dict(causal=True, window_size=(100, -1)))])
def test_dynamic_tile_handout_matches_static(monkeypatch, dtype, d, sq, sk, mask):
    """Causal/local calls on sm90 claim their tiles from a counter (in whatever order the CTAs
    finish); each tile is computed as in the static order, so out and LSE are bitwise the static
    schedule's. The shapes have more tiles than the grid has CTAs, tiles without keys (1000
    queries on 300 keys, bottom-right) and local windows. The kernel leaves the counter zero:
    the same scratch, reused, gives the same result again. NaN-poisoned outputs."""
    from flashcute import ops
    require("sm90", dtype, d, d)
    torch.manual_seed(d + sq)
    q = randn(3, sq, 8, d, dtype=BF).to(dtype)
    k, v = (randn(3, sk, 2, d, dtype=BF).to(dtype) for _ in range(2))
    scratch = torch.zeros(2, dtype=torch.int32, device="cuda")
    calls = []
    monkeypatch.setattr(ops, "_tile_counter", lambda t, stream: calls.append(1) or scratch)
    runs = []
    sms = ops._sm90_sms(q)
    assert 3 * 8 * ((sq + 127) // 128) > sms  # shapes with tiles to balance
    for dynamic in (True, True, False):  # dynamic, dynamic on the reused scratch, static
        monkeypatch.setattr(ops, "_sm90_sms", lambda t, n=sms if dynamic else 0: n)
        out, lse = nan_buffers(q.to(BF), v, False)
        _fwd_into(q, k, v, out, lse, backend="sm90", **mask)
        torch.cuda.synchronize()
        assert torch.equal(scratch, torch.zeros_like(scratch)), "the kernel must leave the counter zero"
        runs.append((out, lse))
    assert len(calls) == 2  # the static run passed no counter
    assert not runs[0][0].isnan().any() and not runs[0][1].isnan().any()
    for out, lse in runs[1:]:
        assert torch.equal(out, runs[0][0]) and torch.equal(lse, runs[0][1])
    if dtype == BF:
        check_close(runs[0][0], runs[0][1], q, k, v, "dynamic", **mask)


def test_tile_counter_scratch_is_cached_per_stream_and_fresh_in_graph_capture():
    """Eager causal calls on one stream share one counter buffer (the kernel leaves it zero, and
    launches on a stream never overlap); another stream gets its own; a CUDA-graph capture gets
    fresh zeros, zeroed in the graph, so replays (here on a side stream) stay correct."""
    from flashcute import ops
    require("sm90", BF, 128, 128)
    q, k, v = (randn(4, 1024, 16, 128, dtype=BF) for _ in range(3))  # 512 tiles: a counter is passed
    seen = []
    real = ops._tile_counter
    ops_tile_counter = lambda t, stream: seen.append(real(t, stream)) or seen[-1]  # noqa: E731
    try:
        ops._tile_counter = ops_tile_counter
        first = flashcute.flash_attn_func(q, k, v, causal=True, backend="sm90")
        again = flashcute.flash_attn_func(q, k, v, causal=True, backend="sm90")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            side = flashcute.flash_attn_func(q, k, v, causal=True, backend="sm90")
        torch.cuda.current_stream().wait_stream(s)
        assert seen[0] is seen[1] and seen[2] is not seen[0]
        assert torch.equal(first, again) and torch.equal(first, side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            with torch.cuda.graph(graph):
                out = flashcute.flash_attn_func(q, k, v, causal=True, backend="sm90")
        assert seen[3] is not seen[0] and seen[3] is not seen[2]
        for _ in range(3):
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, first)
        for c in seen:
            assert torch.equal(c, torch.zeros_like(c))
    finally:
        ops._tile_counter = real

