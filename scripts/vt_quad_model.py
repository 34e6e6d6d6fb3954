"""CPU model of branch `qvtquad`'s V^T cast (session 46): the block kernel's V^T rows staged
permuted (vt_stage_row) and cast by quads (VtQuad) must put every (key, d) byte where the
unit-per-thread cast (vt_place_unit) puts it, and a warp's loads must read contiguous stage
units. The index functions are transcribed from src/sm90/fp8_quantize_{item,blocks}.cuh;
run it after changing either.    python3 scripts/vt_quad_model.py
Also (branch `qcopy`, session 47): stage_item_d's stepped places, a thread's units kThreads / NU
rows apart at one stage-place step of kThreads units, V^T's permuted rows included.
"""


def vt_position(r):
    return (r & ~15) | ((r & 6) << 1) | ((r & 8) >> 2) | (r & 1)


def vt_stage_row(r):
    return (r & ~31) | ((r & 8) << 1) | ((r & 1) << 3) | ((r & 16) >> 2) | ((r & 6) >> 1)


def tile_offset(d, p, keys):
    return d * keys + (p ^ (((d >> 3) & (keys // 16 - 1)) << 4))


def check(D, rows, threads=256):
    nu, keys = D // 32, 32768 // D
    stride = (rows * nu + threads - 1) // threads * threads  # staged_stride
    unit_cast = {}
    for u in range(rows * nu):
        r, lane = divmod(u, nu)
        for k in range(4):
            d0 = (k * nu + lane) * 8
            for e in range(8):
                unit_cast[(r, d0 + e)] = tile_offset(d0, vt_position(r), keys) + e * keys
    stage = {}
    for u in range(stride):
        r, lane = divmod(u, nu)
        for k in range(4):
            stage[k * stride + vt_stage_row(r) * nu + lane] = (r, k, lane)
    assert len(stage) == 4 * stride, "vt_stage_row is not a permutation of the stage"
    quad_cast, contiguous = {}, True
    for quad in range(stride):
        k, lane, hq, blk = quad // (8 * nu) % 4, quad % nu, quad // nu % 8, quad // (32 * nu)
        pos, d0 = blk * 32 + 16 * (hq >> 2) + 4 * (hq & 3), (k * nu + lane) * 8
        for jj in range(4):
            r, k2, lane2 = stage[k * stride + (blk * 32 + 8 * jj + hq) * nu + lane]
            assert (k2, lane2) == (k, lane)
            for e in range(8):
                quad_cast[(r, d0 + e)] = tile_offset(d0, pos, keys) + e * keys + jj
    for w in range(0, stride, 32):
        for jj in range(4):
            units = sorted((q // (8 * nu) % 4) * stride + ((q // (32 * nu)) * 32 + 8 * jj + q // nu % 8) * nu + q % nu
                           for q in range(w, w + 32))
            contiguous &= units == list(range(units[0], units[0] + 32))
    wrong = sum(quad_cast.get(key) != at for key, at in unit_cast.items())
    # stage_item_d's stepped walk: thread t's place at step s is its step-0 place plus s kThreads
    stepped = all(vt_stage_row((u + s * threads) // nu) * nu + u % nu == vt_stage_row(u // nu) * nu + u % nu + s * threads
                  for u in range(threads) for s in range(stride // threads))
    print(f"D {D} rows {rows}: {len(unit_cast)} bytes, {wrong} placed elsewhere, warp loads contiguous: {contiguous}, "
          f"stepped places: {stepped}")
    return wrong == 0 and contiguous and stepped


if __name__ == "__main__":
    ok = all([check(128, 192), check(128, 128), check(256, 128), check(128, 96), check(256, 32)])
    raise SystemExit(0 if ok else 1)
