"""Per-call time of causal bf16 calls with the dynamic hand-out's counter (fresh zeros per call, or
the per-stream buffer that ops._tile_counter keeps) and with the static order (no counter): what
the zeroing costs, and where the hand-out pays. python benchmarks/diag_tile_counter_cost.py"""
import torch
from triton.testing import do_bench

import flashcute
from flashcute import ops

torch.manual_seed(0)
x = torch.randn(4096, 4096, device="cuda")
do_bench(lambda: x @ x, rep=1000)  # one second of work first: the clocks settle (the board is power-bound)
for (b, h, s, d) in [(1, 16, 512, 128), (4, 16, 1024, 128), (16, 16, 1024, 128), (1, 16, 16384, 128),
                     (1, 16, 512, 128)]:
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    f = lambda: flashcute.flash_attn_func(q, k, v, causal=True)
    res = {}
    cached = ops._tile_counter
    fresh = lambda t, stream: t.new_zeros(2, dtype=torch.int32)  # noqa: E731
    for name, use, counter in (("static", False, cached), ("fresh", True, fresh), ("cached", True, cached)):
        ops._more_tiles_than_sms = lambda q, b, s, use=use: use  # the counter even for few tiles, or never
        ops._tile_counter = counter
        res[name] = min(do_bench(f, warmup=50, rep=300) for _ in range(3)) * 1e3
    ops._tile_counter = cached
    print(f"b={b} h={h} s={s} d={d} tiles={b*h*((s+127)//128)}: fresh zeros {res['fresh']:.1f} us, "
          f"cached {res['cached']:.1f} us, static {res['static']:.1f} us", flush=True)
