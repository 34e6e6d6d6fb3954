// The FP8 quantizer's per-unit arithmetic (fp8_quantize.cu): memory-order helpers, the e4m3
// conversion, unpacking 16-bit groups, and the Hadamard rotation of a row, by butterflies
// (hadamard_row) or partly on the tensor cores (hadamard_row_mma).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "sm90/fp8_quantize_types.cuh"

namespace flashcute::sm90::quant {

// ---- small device helpers ------------------------------------------------------------------
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned load_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Publishes this thread's earlier writes (the atomicMax on the amax) with the count.
__device__ __forceinline__ void add_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Two fp32 values -> two e4m3 bytes (lo at the lower address), round to nearest even, finite
// values beyond +-448 saturate to +-448 (= clamp, then round: what the torch path does).
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));  // 1st operand -> upper byte
  return r;
}

// A group of 8 elements (16 bytes) of x. The first read of a chunk (A) keeps it in L2 for the
// second; the second (B) is its last use, so its lines may go first.
template <bool kLastUse>
__device__ __forceinline__ uint4 load_group(const uint16_t* p) {
  const uint4* q = reinterpret_cast<const uint4*>(p);
  return kLastUse ? __ldcs(q) : __ldcg(q);
}

// 16-bit pairs -> fp32 (exact), after flipping the sign bits in `mask` (bits 15 and 31).
__device__ __forceinline__ void unpack2(Bf16, uint32_t w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void unpack2(Fp16, uint32_t w, float& lo, float& hi) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w));
  lo = f.x;
  hi = f.y;
}

// The rotation's signs s on a unit's packed pairs, by an XOR: masks (this thread's lane in the
// group-major mask table, mask_word: one 16-byte shared load per group, read per unit rather than
// held in 16 registers) has bit 15 / 31 set where a coordinate flips.
__device__ __forceinline__ void apply_signs(uint4 (&raw)[kGroups], const uint32_t* masks) {
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const uint4 m = *reinterpret_cast<const uint4*>(masks + mask_word(0, kGroupMaskWords * k));
    raw[k].x ^= m.x, raw[k].y ^= m.y, raw[k].z ^= m.z, raw[k].w ^= m.w;
  }
}

// One unit (4 groups of 8) -> fp32, with the rotation's signs applied first (in place: apply_signs).
template <class In, bool kRotate>
__device__ __forceinline__ void unpack_unit(uint4 (&raw)[kGroups], const uint32_t* masks, float (&v)[kUnitElems]) {
  if constexpr (kRotate) apply_signs(raw, masks);
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const uint4 g = raw[k];
    const uint32_t w[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
    for (int p = 0; p < 4; ++p) unpack2(In{}, w[p], v[k * kGroupElems + 2 * p], v[k * kGroupElems + 2 * p + 1]);
  }
}

// max |x| over a unit's raw 16-bit values (no signs, no rotation), as packed pairs: one HMNMX2
// per two values instead of two unpacks and two FMNMX (the v bound pass of the block kernel; run
// 150's source page: 89 instructions a unit). Packed max and |.| are exact and skip a NaN as
// fmaxf does; the caller's fmaxf of the fp32 result flushes a subnormal maximum to zero, as the
// unpacked path's -ftz fmaxf flushes every subnormal value, so both give the same bits.
__device__ __forceinline__ uint32_t abs_max2(Bf16, uint32_t acc, uint32_t w) {
  const __nv_bfloat162 r = __hmax2(*reinterpret_cast<const __nv_bfloat162*>(&acc),
                                   __habs2(*reinterpret_cast<const __nv_bfloat162*>(&w)));
  return *reinterpret_cast<const uint32_t*>(&r);
}
__device__ __forceinline__ uint32_t abs_max2(Fp16, uint32_t acc, uint32_t w) {
  const __half2 r = __hmax2(*reinterpret_cast<const __half2*>(&acc), __habs2(*reinterpret_cast<const __half2*>(&w)));
  return *reinterpret_cast<const uint32_t*>(&r);
}
template <class In>
__device__ __forceinline__ float raw_unit_amax(const uint4 (&raw)[kGroups]) {
  uint32_t acc[4] = {0u, 0u, 0u, 0u};  // +0 in both halves, both formats
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    acc[0] = abs_max2(In{}, acc[0], raw[k].x);
    acc[1] = abs_max2(In{}, acc[1], raw[k].y);
    acc[2] = abs_max2(In{}, acc[2], raw[k].z);
    acc[3] = abs_max2(In{}, acc[3], raw[k].w);
  }
  const uint32_t m = abs_max2(In{}, abs_max2(In{}, acc[0], acc[1]), abs_max2(In{}, acc[2], acc[3]));
  float lo, hi;
  unpack2(In{}, m, lo, hi);
  return fmaxf(lo, hi);
}

// Walsh-Hadamard transform of a row spread over NU adjacent lanes, 32 coordinates per lane.
// Register i of lane l holds coordinate ((i / 8) * NU + l) * 8 + i % 8: register index bits
// 0-2 and 3-4 and the lane bits are all coordinate bits, and the transform is one butterfly
// (a, b) -> (a + b, a - b) per coordinate bit, in any order.
// The butterflies of register index bits log2(kFirst) .. 4 (the others are done elsewhere).
// (kEnd: the bits below it only; N: the values, a unit's or a Paley half-unit's.)
template <int kFirst, int kEnd = kUnitElems, int N>
__device__ __forceinline__ void register_butterflies(float (&v)[N]) {
#pragma unroll
  for (int h = kFirst; h < kEnd; h <<= 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (!(i & h)) {
        const float a = v[i], b = v[i + h];
        v[i] = a + b;
        v[i + h] = a - b;
      }
    }
  }
}

// The butterfly of lane bit m (a power of two below the row's lanes) through a shuffle: the lower
// lane of a pair keeps a + b, the upper one a - b; fma(v, -+1, partner) is the sum or difference,
// rounded once (exactly as the add / subtract would be). Uniform over the warp.
template <int N>
__device__ __forceinline__ void lane_butterfly(float (&v)[N], int m) {
  const float sign = (threadIdx.x & m) ? -1.f : 1.f;
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = fmaf(v[i], sign, __shfl_xor_sync(0xffffffffu, v[i], m));
}

template <int NU>
__device__ __forceinline__ void hadamard_row(float (&v)[kUnitElems]) {
  register_butterflies<1>(v);
#pragma unroll
  for (int m = 1; m < NU; m <<= 1) lane_butterfly(v, m);
}

// ---- the rotation on the tensor cores (both kernels, head dims 128 and 256) --------------------
// Sylvester's H is a Kronecker product over the coordinate bits (H[i][j] = (-1)^popcount(i & j)),
// so the transform may contract any 4 of them with one 16 x 16 matrix product and the rest with
// butterflies. The units stay where hadamard_row has them (one per thread, a row's NU units on
// adjacent lanes): register i of lane l holds coordinate ((i / 8) NU + l) 8 + e, e = i % 8. In a
// warp's mma.m16n8k16 (thread t = 4 g + q) the contracted k16 is (e0, q0, q1, e1) -- A's register
// pair is e0, q the lane in its group of 4 (lane bits 0-1 = coordinate bits 3-4), the second
// register pair e1 -- and n the same four bits (C's pair e0, its n-tile e1). A's 16 rows are the
// warp's 8 units (g) times e2: each thread's unit is its own row pair, no data moves between
// lanes. One product per group i / 8 (4, of 2 n-tiles: 8 per warp and 32 units). The 16-bit
// values and the +-1 entries are exact, accumulated in fp32; then the butterflies of e2 and i / 8
// (register index bits 2-4) and, at D = 256, lane bit 2 through one shuffle: in place of 5
// register and 2-3 shuffled stages (the shuffles were a quarter of the quantizer's instructions).
template <class In>
__device__ __forceinline__ uint32_t pm1_pair(bool neg_lo, bool neg_hi) {
  constexpr uint32_t kOne = std::is_same<In, Bf16>::value ? 0x3F80u : 0x3C00u;  // 1.0 in bf16 / fp16
  return (kOne | (neg_lo ? 0x8000u : 0u)) | (kOne | (neg_hi ? 0x8000u : 0u)) << 16;
}

// This lane's B fragments of H16 (.col: registers {k = 2q, 2q + 1} and {2q + 8, 2q + 9}, column
// n = 8 nt + g): b[nt][r].
template <class In>
__device__ __forceinline__ void hadamard16_fragments(uint32_t (&b)[2][2]) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int k0 = 2 * q + 8 * r, n = 8 * nt + g;
      b[nt][r] = pm1_pair<In>(__popc(k0 & n) & 1, __popc((k0 + 1) & n) & 1);
    }
  }
}

template <class In>
__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          const uint32_t (&b)[2]) {
  if constexpr (std::is_same<In, Bf16>::value) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %10, %10, %10};"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b[0]), "r"(b[1]), "f"(0.f));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %10, %10, %10};"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b[0]), "r"(b[1]), "f"(0.f));
  }
}

// A unit's signed 16-bit values (raw, apply_signs done) -> y = its row's transform (unnormalised),
// as hadamard_row<NU> computes it up to the order of the fp32 sums. Uniform over the warp.
template <int NU, class In>
__device__ __forceinline__ void hadamard_row_mma(const uint4 (&raw)[kGroups], const uint32_t (&hb)[2][2],
                                                 float (&v)[kUnitElems]) {
  static_assert(NU == 4 || NU == 8, "head dims 128 and 256");
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    // A = {e 0-1, e 4-5 (row g + 8: e2 = 1), e 2-3 (e1 = 1), e 6-7}
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      float c[4];
      mma_16816<In>(c, raw[k].x, raw[k].z, raw[k].y, raw[k].w, hb[nt]);
      const int i = k * kGroupElems + 2 * nt;  // C: (e2 = 0, e1 = nt, e0), then e2 = 1
      v[i] = c[0], v[i + 1] = c[1];
      v[i + 4] = c[2], v[i + 5] = c[3];
    }
  }
  register_butterflies<4>(v);
  if constexpr (NU == 8) lane_butterfly(v, 4);  // lane bit 2, as hadamard_row's shuffled stages
}

// sum(x^2) over the row of a unit's raw 16-bit values (head dims 128 and 256, hadamard_row_mma's
// layout; signs applied or not: squares), on the tensor cores: with A = the warp's rows as that
// transform has them (rows g: e2 = 0, rows g + 8: e2 = 1; k16 the coordinates (e0, q, e1)) and B
// = the same registers read as columns (B_lo[k][g] = row g's e2 = 0 half, B_hi its e2 = 1 half),
// C_lo[g][g] + C_hi[g + 8][g] summed over the unit's 4 groups is row g's sum of squares over its
// quad's 4 lanes. The diagonal sits in lane q = g / 2 of quad g, register g % 2 (C_lo) / 2 + g % 2
// (C_hi); a shuffle hands it to the quad, and at D = 256 one more adds the row's other quad.
// Products of 16-bit values are exact in fp32; each mma sums 16 of them in the tensor core's
// fp32, the 8 partial sums are added in fp32. In place of 32 unpacks, 32 FMAs and the partial
// sums' tree (row_sum_squares). Uniform over the warp.
template <int NU, class In>
__device__ __forceinline__ float row_sum_squares_mma(const uint4 (&raw)[kGroups]) {
  static_assert(NU == 4 || NU == 8, "head dims 128 and 256");
  const unsigned lane = threadIdx.x % 32;
  const bool odd_row = (lane >> 2) & 1u;  // g % 2
  float acc = 0.f;
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const uint32_t b_lo[2] = {raw[k].x, raw[k].y}, b_hi[2] = {raw[k].z, raw[k].w};
    float c[4];
    mma_16816<In>(c, raw[k].x, raw[k].z, raw[k].y, raw[k].w, b_lo);
    acc += odd_row ? c[1] : c[0];
    mma_16816<In>(c, raw[k].x, raw[k].z, raw[k].y, raw[k].w, b_hi);
    acc += odd_row ? c[3] : c[2];
  }
  float ss = __shfl_sync(0xffffffffu, acc, (lane & ~3u) | (lane >> 3));  // quad g's lane g / 2
  if constexpr (NU == 8) ss += __shfl_xor_sync(0xffffffffu, ss, 4);  // the row's other quad
  return ss;
}

// ---- Paley head dims (96 = 12 x 8, 192 = 12 x 16) -----------------------------------------------
// H = P12 (x) H_m (Paley's order-12 matrix, fp8.py's _paley12; Sylvester's H_m, m = D / 12), so
// coordinate c = m a + b has H[c'][c] = P12[a'][a] H_m[b'][b]. A rotated Paley row sits in a block
// of 4 (D 96) or 8 (D 192) lanes (RowLayout in fp8_quantize_item.cuh): block lane t holds
// a = 3k + p (its group k, p = t % 4; p = 3 is an idle lane holding zeros) and b = 8h + e (h =
// t / 4, e the register within the group). P12 then runs on the tensor cores, where the mma's
// lane-in-quad q is p: its k16 is (k, p) as kappa = 8 (k / 2) + 2p + k % 2 -- A's registers pair
// groups (0, 1) and (2, 3) -- its n16 (two n-tiles) the same for the output a, so each output
// lands in the lane and register its input came from, and A's 16 rows are the warp's 8 row
// blocks times the two e of a register pair. Then H_m: butterflies over e and, at D 192, over h
// through one shuffle. 8 mma per unit, as hadamard_row_mma.
// (Host and device: the launch picks the Paley instantiation with it.)
__host__ __device__ constexpr bool paley_head_dim(int d) { return d % 3 == 0; }
template <int D>
constexpr bool kPaleyDim = paley_head_dim(D);

// The order-12 index of a k16 / n16 position (-1 for lane-in-quad 3, the idle lane's).
__device__ __forceinline__ int paley_index(int x) {
  const int q = (x % 8) / 2;
  return q < 3 ? 3 * (2 * (x / 8) + x % 2) + q : -1;
}

// P12[i][j] as -1, 0 (i or j < 0) or +1: row 0 all +1, column 0 below it -1, the rest
// delta(i, j) + chi((j - i) mod 11), chi the quadratic character mod 11 (residues 1, 3, 4, 5, 9).
template <class In>
__device__ __forceinline__ uint32_t paley12_entry(int i, int j) {
  constexpr uint32_t kOne = std::is_same<In, Bf16>::value ? 0x3F80u : 0x3C00u;  // 1.0 in bf16 / fp16
  if (i < 0 || j < 0) return 0u;
  bool neg;
  if (i == 0) neg = false;
  else if (j == 0) neg = true;
  else {
    const int d = (j - i + 11) % 11;
    neg = d != 0 && !((0x23Au >> d) & 1u);
  }
  return kOne | (neg ? 0x8000u : 0u);
}

// This lane's B fragments of P12 (rows kappa: the input a', columns n: the output a; as
// hadamard16_fragments' registers): b[nt][r] = (P12[a'(kappa)][a(n)], kappa + 1), kappa = 8r + 2q,
// n = 8 nt + g.
template <class In>
__device__ __forceinline__ void paley12_fragments(uint32_t (&b)[2][2]) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const int a = paley_index(8 * nt + g);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int k0 = 8 * r + 2 * q;
      b[nt][r] = paley12_entry<In>(paley_index(k0), a) | paley12_entry<In>(paley_index(k0 + 1), a) << 16;
    }
  }
}

// Word w of a group (w a constant after unrolling; indexing through a pointer put raw on the stack).
__device__ __forceinline__ uint32_t word_of(const uint4& g, int w) {
  return w == 0 ? g.x : w == 1 ? g.y : w == 2 ? g.z : g.w;
}

// Groups 2 nt and 2 nt + 1 of a Paley unit's transform y (unnormalised; v: group 2 nt + j at
// 8 j + e), from its signed 16-bit values (apply_signs done) and P12's n-tile nt (pb_nt:
// paley12_fragments' b[nt]), up to the order of the fp32 sums. Uniform over the warp. A unit is
// done in two such halves: whole, its 16 packed pairs as the mma's operands next to 32 results
// spilled the item loop's addresses at 64 registers and 48 bytes still at 80 (ptxas, bf16).
template <int D, class In>
__device__ __forceinline__ void hadamard_pair_paley(const uint4 (&raw)[kGroups], const uint32_t (&pb_nt)[2],
                                                    float (&v)[2 * kGroupElems]) {
  static_assert(D == 96 || D == 192, "head dims 96 and 192");
#pragma unroll
  for (int w = 0; w < 4; ++w) {  // the register pair of e = 2w (rows g) and e = 2w + 1 (rows g + 8)
    const uint32_t r0 = word_of(raw[0], w), r1 = word_of(raw[1], w), r2 = word_of(raw[2], w), r3 = word_of(raw[3], w);
    float c[4];  // C: (group 2 nt, e 2w), (2 nt + 1, 2w), then e 2w + 1
    mma_16816<In>(c, __byte_perm(r0, r1, 0x5410), __byte_perm(r0, r1, 0x7632),  // groups 0, 1
                  __byte_perm(r2, r3, 0x5410), __byte_perm(r2, r3, 0x7632), pb_nt);  // groups 2, 3
    v[2 * w] = c[0], v[kGroupElems + 2 * w] = c[1];
    v[2 * w + 1] = c[2], v[kGroupElems + 2 * w + 1] = c[3];
  }
  register_butterflies<1, kGroupElems>(v);  // H_m's bits e
  if constexpr (D == 192) lane_butterfly(v, 4);  // and h, lane bit 2
}

// Whether the rotated casts of head dim D use hadamard_row_mma (kMma: the launch's choice,
// FLASHCUTE_FP8_QUANTIZE_MMA) rather than hadamard_row.
template <int D, bool kRotate, bool kMma>
constexpr bool kMmaRotation = kMma && kRotate && (D == 128 || D == 256);

// The B fragments for hadamard_row_mma where kMmaRotation (otherwise unused, no instructions).
template <int D, bool kRotate, bool kMma, class In>
__device__ __forceinline__ void mma_fragments(uint32_t (&hb)[2][2]) {
  if constexpr (kMmaRotation<D, kRotate, kMma>) hadamard16_fragments<In>(hb);
  else hb[0][0] = hb[0][1] = hb[1][0] = hb[1][1] = 0;
}

// A unit's values y from its raw 16-bit groups: with the rotation (signs, transform) when kRotate,
// on the tensor cores where kMmaRotation (uniform over the warp either way).
template <int D, bool kRotate, bool kMma, class In>
__device__ __forceinline__ void unit_values(uint4 (&raw)[kGroups], const uint32_t* masks, const uint32_t (&hb)[2][2],
                                            float (&v)[kUnitElems]) {
  static_assert(!(kRotate && kPaleyDim<D>), "Paley rows rotate in halves (cast_item)");
  if constexpr (kMmaRotation<D, kRotate, kMma>) {
    apply_signs(raw, masks);
    hadamard_row_mma<D / kUnitElems, In>(raw, hb, v);
  } else {
    unpack_unit<In, kRotate>(raw, masks, v);
    if constexpr (kRotate) hadamard_row<D / kUnitElems>(v);
  }
}

}  // namespace flashcute::sm90::quant
