"""CPU model of branch `qsumsq`'s row_sum_squares_mma (session 47, src/sm90/fp8_quantize_rotation.cuh):
a warp's units as hadamard_row_mma holds them (lane l: row l / NU, lane in row l % NU; register
8k + e: coordinate (k NU + l % NU) 8 + e; raw[k].x/.y/.z/.w = e 0-1 / 2-3 / 4-5 / 6-7), the two
m16n8k16 products per group in PTX's fragment layouts, the diagonal picked and shuffled as the
kernel does; every lane must end with its row's sum of squares. Exact arithmetic (integers).
Then the rounding, worst case (torch, CPU): each mma's 16 exact products truncated after alignment
to the largest (no guard bits) and the sum truncated to fp32, the 8 partial sums added in fp32,
on the GPU tests' inputs (randn * 3, every 1013th value * 50): the descale's relative error
against the fp64 sum's must stay below the tests' 1e-6.
    python3 scripts/sumsq_mma_model.py
"""
import random


def model(nu, seed=0):
    rnd = random.Random(seed)
    # values[lane][k][e]
    val = [[[rnd.randint(-50, 50) for _ in range(8)] for _ in range(4)] for _ in range(32)]
    word = {"x": (0, 1), "y": (2, 3), "z": (4, 5), "w": (6, 7)}
    reg = lambda lane, k, w: [val[lane][k][e] for e in word[w]]
    acc = [0] * 32
    for k in range(4):
        A = [[0] * 16 for _ in range(16)]
        B = {"lo": [[0] * 8 for _ in range(16)], "hi": [[0] * 8 for _ in range(16)]}
        for lane in range(32):
            g, q = lane >> 2, lane & 3
            for j in range(2):
                A[g][2 * q + j] = reg(lane, k, "x")[j]          # a0
                A[g + 8][2 * q + j] = reg(lane, k, "z")[j]      # a1
                A[g][2 * q + 8 + j] = reg(lane, k, "y")[j]      # a2
                A[g + 8][2 * q + 8 + j] = reg(lane, k, "w")[j]  # a3
                B["lo"][2 * q + j][g] = reg(lane, k, "x")[j]      # b_lo = {x, y}
                B["lo"][2 * q + 8 + j][g] = reg(lane, k, "y")[j]
                B["hi"][2 * q + j][g] = reg(lane, k, "z")[j]      # b_hi = {z, w}
                B["hi"][2 * q + 8 + j][g] = reg(lane, k, "w")[j]
        for half in ("lo", "hi"):
            C = [[sum(A[m][t] * B[half][t][n] for t in range(16)) for n in range(8)] for m in range(16)]
            for lane in range(32):
                g, q = lane >> 2, lane & 3
                c = [C[g][2 * q], C[g][2 * q + 1], C[g + 8][2 * q], C[g + 8][2 * q + 1]]
                odd = (lane >> 2) & 1
                acc[lane] += (c[1] if odd else c[0]) if half == "lo" else (c[3] if odd else c[2])
    ss = [acc[(lane & ~3) | (lane >> 3)] for lane in range(32)]
    if nu == 8:
        ss = [ss[lane] + ss[lane ^ 4] for lane in range(32)]
    want = [sum(v * v for l2 in range(32) if l2 // nu == lane // nu for grp in val[l2] for v in grp) for lane in range(32)]
    ok = ss == want
    print(f"NU {nu}: every lane holds its row's sum of squares: {ok}")
    return ok


def worst_rounding(d, dtype, rows=200000):
    import torch
    torch.manual_seed(0)
    x = torch.randn(rows, d) * 3
    x.view(-1)[::1013] *= 50
    sq = x.to(dtype).double().square()  # products of 16-bit values: exact
    parts = sq.view(rows, d // 16, 16)  # one mma's 16 terms (which 16 does not change the bound)
    ulp = torch.pow(2.0, torch.floor(torch.log2(parts.amax(-1, keepdim=True).clamp_min(1e-300))) - 23)
    s = (torch.floor(parts / ulp) * ulp).sum(-1)
    f = s.float()
    f = torch.where(f.double() > s, torch.nextafter(f, torch.zeros_like(f)), f)  # toward zero
    acc = torch.zeros(rows)
    for j in range(f.shape[1]):
        acc = acc + f[:, j]
    exact = sq.sum(-1).float()
    err = ((torch.sqrt(acc * d) / torch.sqrt(exact * d)).double() - 1).abs().max().item()
    print(f"d {d} {str(dtype)[6:]}: descale relative error, worst of {rows} rows: {err:.2e}")
    return err < 1e-6


if __name__ == "__main__":
    ok = all([model(4, 0), model(4, 1), model(8, 2), model(8, 3)])
    try:
        import torch
        ok &= all(worst_rounding(d, t) for d in (128, 256) for t in (torch.bfloat16, torch.float16))
    except ImportError:
        print("torch not installed: rounding model skipped")
    raise SystemExit(0 if ok else 1)
