#!/usr/bin/env python3
"""CPU emulation of hadamard_row_mma's data movement (src/sm90/fp8_quantize_rotation.cuh), per the PTX
fragment layouts of mma.m16n8k16 (.row.col, f32 accumulate), against x_signed @ H (Sylvester)."""
import numpy as np

def sylvester(d):
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h

def popc(x):
    return bin(x).count("1")

def b_fragments(lane):
    g, q = lane // 4, lane % 4
    b = {}
    for nt in range(2):
        for r in range(2):
            k0, n = 2 * q + 8 * r, 8 * nt + g
            b[nt, r] = (-1.0 if popc(k0 & n) & 1 else 1.0, -1.0 if popc((k0 + 1) & n) & 1 else 1.0)
    return b

def mma(afrag, bfrag):
    """afrag[lane] = 4 pairs (a0a1, a2a3, a4a5, a6a7); bfrag[lane] = 2 pairs; -> c[lane] = 4 floats."""
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    for t in range(32):
        g, q = t // 4, t % 4
        (p0, p1, p2, p3) = afrag[t]
        A[g, 2 * q:2 * q + 2] = p0; A[g + 8, 2 * q:2 * q + 2] = p1
        A[g, 2 * q + 8:2 * q + 10] = p2; A[g + 8, 2 * q + 8:2 * q + 10] = p3
        b0, b1 = bfrag[t]
        B[2 * q:2 * q + 2, g] = b0; B[2 * q + 8:2 * q + 10, g] = b1
    C = A @ B
    return [(C[t // 4, 2 * (t % 4)], C[t // 4, 2 * (t % 4) + 1], C[t // 4 + 8, 2 * (t % 4)], C[t // 4 + 8, 2 * (t % 4) + 1])
            for t in range(32)]

def check(D, rows, seed):
    rng = np.random.default_rng(seed)
    NU = D // 32
    x = rng.standard_normal((rows, D))
    s = rng.choice([-1.0, 1.0], D)
    want = (x * s) @ sylvester(D)
    got = np.full((rows, D), np.nan)
    units = rows * NU
    for tile in range(units // 32):
        # each lane's unit: u = 32 tile + lane; row u / NU, lane-in-row u % NU; register i -> coordinate
        coord = lambda l, i: ((i // 8) * NU + l) * 8 + i % 8
        raw = []
        for t in range(32):
            u = 32 * tile + t
            r, l = u // NU, u % NU
            raw.append([x[r, coord(l, i)] * s[coord(l, i)] for i in range(32)])  # signs applied (XOR)
        v = [[None] * 32 for _ in range(32)]
        for k in range(4):
            words = lambda t, p: (raw[t][8 * k + 2 * p], raw[t][8 * k + 2 * p + 1])
            afrag = [(words(t, 0), words(t, 2), words(t, 1), words(t, 3)) for t in range(32)]
            for nt in range(2):
                bfrag = [(b_fragments(t)[nt, 0], b_fragments(t)[nt, 1]) for t in range(32)]
                c = mma(afrag, bfrag)
                for t in range(32):
                    i = 8 * k + 2 * nt
                    v[t][i], v[t][i + 1], v[t][i + 4], v[t][i + 5] = c[t]
        for t in range(32):  # register_butterflies<4>
            h = 4
            while h < 32:
                for i in range(32):
                    if not i & h:
                        a, b = v[t][i], v[t][i + h]
                        v[t][i], v[t][i + h] = a + b, a - b
                h <<= 1
        if NU == 8:  # shuffle over lane bit 2
            v = [[v[t][i] * (-1.0 if t & 4 else 1.0) + v[t ^ 4][i] for i in range(32)] for t in range(32)]
        for t in range(32):
            u = 32 * tile + t
            r, l = u // NU, u % NU
            for i in range(32):
                got[r, coord(l, i)] = v[t][i]
    err = np.abs(got - want).max()
    print(f"D={D} rows={rows}: max |got - want| = {err:.3e}")
    assert err < 1e-9, err

for D in (128, 256):
    for seed in range(2):
        check(D, 16, seed)
print("ok")
