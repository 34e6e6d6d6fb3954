// Host side of the sm90 forward kernel: tile configuration per head dim, TMA descriptors and
// the persistent launch.
#pragma once

#include <cuda_runtime.h>
#include <algorithm>
#include <type_traits>
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>
#include "common/kernel_registry.h"
#include "common/params.h"
#include "sm90/fwd_kernel.cuh"
#include "sm90/fwd_traits.cuh"

namespace flashcute {

namespace sm90 {

// Tiles per (hdim, hdim_v): kBlockM = 64 rows per consumer warpgroup, 128 (two) except d=64's
// 192 (three, kWG below).
// Shared memory = Q (kBlockM d) + stages * N * (d + dv) + O (kBlockM dv), 2 bytes each, <= 227 KB:
//   (64, 64)  : 192 x N 128, 2 stages, 112 KB (128 x 128 for short causal: 96 KB)
//   (96, 96)  : N 128, 2 stages, 144 KB
//   (128,128) : N 128, 2 stages, 192 KB (S and O are 64 fp32 regs each per thread)
//   (192,128) : N 112, 2 stages, 220 KB
//   (192,192) : N 112, 2 stages, O aliases Q (216 KB; separate O would need 264 KB)
//   (256,256) : N 80,  2 stages, O aliases Q (224 KB; O alone is 128 fp32 regs per thread)
// kSections: causal/local tiles in sections of one round (tile_scheduler.cuh). Run 5 measured
// d=64 causal +3-10 % and d=128 -10..-24 %; the d=128 loss was the rounds drifting across
// sections of 128 tiles with 132 CTAs (load imbalance); with the grid cut to one section per
// round (launch_fwd) d=128 causal gains 4-16 % over no sections (run 19).
// kWG (default 2): consumer warpgroups. d=64 takes 3 (192-row tiles): with the softmax costing
// about as much as the GEMMs, two warpgroups' GEMMs cover the third's softmax (run 32: +4 / +13
// / +17 % non-causal 1k / 4k / 16k, causal +7 % at 4k-8k and +12 % at 16k with the section rule
// of launch_fwd). Short causal/local query sequences keep 128-row tiles: TileConfigShortCausal.
template <int D, int DV> struct TileConfig;
template <> struct TileConfig<64, 64>   { static constexpr int kN = 128, kStages = 2, kWG = 3; static constexpr bool kAlias = false, kSections = true; };
template <> struct TileConfig<96, 96>   { static constexpr int kN = 128, kStages = 2; static constexpr bool kAlias = false, kSections = true; };
template <> struct TileConfig<128, 128> { static constexpr int kN = 128, kStages = 2; static constexpr bool kAlias = false, kSections = true, kTwoP = true; };
template <> struct TileConfig<192, 128> { static constexpr int kN = 112, kStages = 2; static constexpr bool kAlias = false, kSections = true; };
template <> struct TileConfig<192, 192> { static constexpr int kN = 112, kStages = 2; static constexpr bool kAlias = true, kSections = true; };
template <> struct TileConfig<256, 256> { static constexpr int kN = 80,  kStages = 2; static constexpr bool kAlias = true, kSections = true; };

// Causal/local calls with seqlen_q < kMaxSeqlenQ take this tile instead (kMaxSeqlenQ = 0: never).
// d=64 causal at 1k: 192-row tiles waste a sixth of the last tile and ran 10 % slower than
// 128-row ones (290 vs 262 TFLOP/s); from 2k the 192-row tiles win (run 32).
template <int D, int DV> struct TileConfigShortCausal { static constexpr int kMaxSeqlenQ = 0; };
// Its tiles are short (4.5 key blocks on average at causal 1k), so Q a tile ahead
// (fwd_traits.cuh, kQAhead) pays there: +2.3 % causal 1k in the library's dispatch with the
// dynamic hand-out (run 95, H200 harness; +2.6 % run 94, +4.3 % static run 93), while at d=128
// and at d=64's longer tiles it measured -3..+1 % (runs 93-94).
template <> struct TileConfigShortCausal<64, 64> {
  static constexpr int kN = 128, kStages = 2, kWG = 2, kMaxSeqlenQ = 1536;
  static constexpr bool kAlias = false, kSections = true, kQAhead = true;
};

// FP8 (e4m3 in, 16-bit out). Shared memory = Q (128 d) + stages * N * (d + 2 dv) (K, V as it
// lands, V^T) + O (128 dv, 2 bytes), 1 byte each otherwise:
//   (64, 64)  : 192 x N 128, 2 stages, 84 KB (three consumer warpgroups, below)
//   (128,128) : N 128, 2 stages, 144 KB
//   (192,192) : N 96,  2 stages, 184 KB
//   (256,256) : N 128, 2 stages, O in V's landing buffer (kAlias = kOInVLanding): 224 KB.
//               +2-6 % over N 64 with 3 V stages (run 44); its consumers need all 240
//               registers and Q's descriptors re-derived per GEMM (kRederiveQDesc) not to spill.
// kProducerRegs = 40 (consumers 232): the transposing warps keep 2 V blocks in flight; pays for
// d=128's N=192 tile (+3-5 %, run 44) and d=192 (+1-3 %, run 45), while d=128's N=128 ran 5 %
// slower with its consumers at 232 (run 43) and d=64/96 measured no better (run 45).
// (192,128) keeps 24 (not measured).
// Wider key blocks (FA3 uses N 160-224) pay only for long key sequences: TileConfigFp8Long.
// kPingPong = false (d=128, d=256): the consumer warpgroups issue their GEMMs without taking turns.
// e4m3 GEMMs take half the time of bf16 ones, so a warpgroup's softmax (exp2 on MUFU) outlasts
// the other's GEMMs and the turn order only adds waits: without it +4-7 % at 4k-16k with the
// N=192 tile, +1-2 % at 1k-2k with N=128 (run 39); d=256 lost 1-2.5 % without it with 64-key
// tiles but gains 1-2.4 % at 4k-16k with the 128-key tile (-1.6 % causal 1k; run 49), so it
// runs without too; d=192 measured within ±2.5 % either way (run 40) and keeps it.
// d=64 takes three consumer warpgroups (192-row tiles, 160 registers each) without turns, as the
// 16-bit d=64 tile does with them: +9 / +25 / +32 % non-causal 1k / 4k / 16k and +19 / +29 %
// causal 4k / 16k over two warpgroups (-1.6 % causal 1k), where two left the e4m3 kernel 8-17 %
// behind the bf16 one (run 60); with turns it is 1-3 % slower, without intra-warpgroup overlap
// 30 % slower, with 96-key blocks 7-8 % slower.
template <int D, int DV> struct TileConfigFp8;
template <> struct TileConfigFp8<64, 64>   { static constexpr int kN = 128, kStages = 2, kWG = 3; static constexpr bool kAlias = false, kSections = true, kPingPong = false; };
template <> struct TileConfigFp8<96, 96>   { static constexpr int kN = 128, kStages = 2; static constexpr bool kAlias = false, kSections = true; };
template <> struct TileConfigFp8<128, 128> { static constexpr int kN = 128, kStages = 2; static constexpr bool kAlias = false, kSections = true, kPingPong = false; };
template <> struct TileConfigFp8<192, 128> { static constexpr int kN = 96,  kStages = 2; static constexpr bool kAlias = false, kSections = true; };
template <> struct TileConfigFp8<192, 192> { static constexpr int kN = 96,  kStages = 2, kProducerRegs = 40; static constexpr bool kAlias = false, kSections = true; };
// d=256's transpose (the largest V^T per stage) bounds the kernel: skipping it measured
// +31-38 % (run 55). Its transposing warps keep 2 V blocks in flight at 24 registers (+3-6.5 %
// over 1, run 57; at d=128's 128-key tile 2 measured 0..-4 %) and are 3 (+4..+12 % over 2,
// run 59; d=128: -3..+2 % with 3).
template <> struct TileConfigFp8<256, 256> {
  static constexpr int kN = 128, kStages = 2, kAlias = kOInVLanding, kTransposeWarps = 3, kTransposeBatch = 2;
  static constexpr bool kSections = true, kRederiveQDesc = true, kPingPong = false;
};

// FP8 head dims with a second, wider key block for long key sequences (seqlen_k >= kMinSeqlenK):
// fewer iterations per tile pay from 4k keys, and cost at 1k where tiles are short (run 22,
// e4m3 d=128 with N=192: +3 % non-causal 16k, +3.5 / +5-7 % causal 4k / 16k, -5..-10 % at 1k).
// 128 x 192 at d=128: 192 KB of shared memory, no spills. kMinSeqlenK = 0: one tile only.
template <int D, int DV> struct TileConfigFp8Long { static constexpr int kMinSeqlenK = 0; };
template <> struct TileConfigFp8Long<128, 128> {
  static constexpr int kN = 192, kStages = 2, kMinSeqlenK = 4096, kProducerRegs = 40;
  static constexpr bool kAlias = false, kSections = true, kPingPong = false;
  // A warpgroup's first key block, where its rows see at most 64 of its keys (4096 = 21 x 192 +
  // 64, 16384 = 85 x 192 + 64), runs as a 64-key block with P V over its 4 k-steps; other key
  // counts keep the full block (the mainloop decides per tile). H100, two readings each: the V^T
  // kernel +1.3..+3.0 % at 4k-16k, causal and not (run 147; with P V whole: noise), the
  // transposing kernel -0.1..+2.4 % (run 148).
  static constexpr bool kNarrowFirst = true;
};

// Block-wise descales (flashcute_fwd_args.descale_block_keys) are per key tile of the V^T
// kernels: the API checks it against common/params.h's fp8_vt_key_block (flashcute.ops.
// vt_key_block mirrors it for the quantizer's callers).
static_assert(TileConfigFp8<128, 128>::kN == fp8_vt_key_block(128, 0) &&
              TileConfigFp8Long<128, 128>::kN == fp8_vt_key_block(128, kFp8VtLongMinSeqlenK) &&
              TileConfigFp8Long<128, 128>::kMinSeqlenK == kFp8VtLongMinSeqlenK &&
              TileConfigFp8<256, 256>::kN == fp8_vt_key_block(256, 0) &&
              TileConfigFp8Long<256, 256>::kMinSeqlenK == 0,
              "common/params.h's fp8_vt_key_block must name the FP8 V^T kernels' key tiles");

// FP8 head dims with a V^T-input kernel (FwdParams::v_colmajor, bf16 out), for the FP8 mode: no
// V transpose in the kernel, which costs 6-9 % of d=256's time and 2-4 % of d=128's (run 68;
// the other head dims keep only the transposing kernel: fewer instantiations).
template <int D, int DV> struct VColMajorBuilt : std::bool_constant<D == DV && fp8_vt_head_dim(D)> {};

#ifndef FLASHCUTE_SM90_L2_SECTIONS
#define FLASHCUTE_SM90_L2_SECTIONS 1  // A/B switch: 0 = plain longest-first order for every head dim
#endif
#ifndef FLASHCUTE_SM90_DYNAMIC_TILES
#define FLASHCUTE_SM90_DYNAMIC_TILES 1  // A/B switch: 0 = static rounds even with a tile counter
#endif
#ifndef FLASHCUTE_SM90_SECTION_GRID
#define FLASHCUTE_SM90_SECTION_GRID 1  // A/B switch: 0 = all SMs even when rounds and sections drift
#endif

template <class Traits>
int launch_fwd(const FwdParams& p, bool sections) {
  using Element = typename Traits::Element;
  using ElementO = typename Traits::ElementO;
  constexpr int D = Traits::kHeadDim, DV = Traits::kHeadDimV;
  constexpr int kM = Traits::kBlockM, kN = Traits::kBlockN;
  const bool varlen = p.cu_seqlens_q != nullptr;
  if (p.batch <= 0 || p.heads_q <= 0 || p.seqlen_q <= 0) return int(cudaSuccess);
  // Varlen tensor maps need the packed extents (FwdParams::total_q/total_k); without them a
  // tail tile could read past the allocation, so refuse rather than guess.
  if (varlen && p.total_q <= 0) return int(cudaErrorInvalidValue);

  // Tensor-map extents. A zero extent is not encodable; with no keys no K/V block is loaded,
  // so one row of extent is never touched.
  const int rows_q = varlen ? int(p.total_q) : p.seqlen_q;
  const int rows_k = std::max(1, varlen ? int(p.total_k) : p.seqlen_k);
  // FP8 V^T (dense only): each (b, hk, d) row holds round_up(seqlen_k, 32) keys, the padding zero.
  const int keys_vt = (rows_k + 31) / 32 * 32;
  const int nb = varlen ? 1 : p.batch;
  // Varlen: batch mode of extent 1; its stride is never used but must be encodable.
  const int64_t q_bs = varlen ? p.q_row_stride : p.q_batch_stride;
  const int64_t k_bs = varlen ? p.k_row_stride : p.k_batch_stride;
  const int64_t v_bs = varlen ? p.v_row_stride : p.v_batch_stride;
  const int64_t o_bs = varlen ? p.o_row_stride : p.o_batch_stride;

  Shape4 shape_q = make_shape(rows_q, D, p.heads_q, nb);
  Shape4 shape_k = make_shape(rows_k, D, p.heads_k, nb);
  // V's map: V^T (dv, rows) for 16-bit inputs, V itself (rows, dv) for FP8 (transposed in smem),
  // V^T (dv, padded keys) for FP8 V^T (dense only: fwd.cpp refuses varlen; run_fwd_e4m3 picks it).
  Shape4 shape_vt = Traits::kTransposeV ? make_shape(rows_k, DV, p.heads_k, nb)
                                        : make_shape(DV, Traits::kVColMajor ? keys_vt : rows_k, p.heads_k, nb);
  Shape4 shape_o = make_shape(rows_q, DV, p.heads_q, nb);
  // No keys at all (seqlen_k == 0, or varlen total_k == 0): K/V may be null or carry degenerate
  // strides, and no block is ever loaded, so build their maps over q's memory instead.
  const bool no_keys = varlen ? p.total_k <= 0 : p.seqlen_k <= 0;
  const void* k_ptr = no_keys ? p.q : p.k;
  const void* v_ptr = no_keys ? p.q : p.v;
  const int64_t k_rs = no_keys ? p.q_row_stride : p.k_row_stride;
  const int64_t k_hs = no_keys ? p.q_head_stride : p.k_head_stride;
  const int64_t v_rs = no_keys ? p.q_row_stride : p.v_row_stride;
  const int64_t v_hs = no_keys ? p.q_head_stride : p.v_head_stride;
  const int64_t kb = no_keys ? q_bs : k_bs, vb = no_keys ? q_bs : v_bs;
  static_assert(DV <= D, "the no-keys V map reads dv columns of a q row");
  if (no_keys) {  // one row of q's first head and batch
    get<2>(shape_k) = get<2>(shape_vt) = 1;
    get<3>(shape_k) = get<3>(shape_vt) = 1;
  }

  auto ptr = [](const void* x) { return make_gmem_ptr(static_cast<Element const*>(x)); };
  Tensor mQ = make_tensor(ptr(p.q), shape_q, make_stride(p.q_row_stride, _1{}, p.q_head_stride, q_bs));
  Tensor mK = make_tensor(ptr(k_ptr), shape_k, make_stride(k_rs, _1{}, k_hs, kb));
  Tensor mO = make_tensor(make_gmem_ptr(static_cast<ElementO*>(p.out)), shape_o,
                          make_stride(p.o_row_stride, _1{}, p.o_head_stride, o_bs));

  auto tma_q = make_tma_copy(SM90_TMA_LOAD{}, mQ, typename Traits::SmemLayoutQPart{},
                             Shape<Int<Traits::kQPartRows>, Int<D>>{}, _1{});
  auto tma_k = make_tma_copy(SM90_TMA_LOAD{}, mK, take<0, 2>(typename Traits::SmemLayoutK{}),
                             Shape<Int<kN>, Int<D>>{}, _1{});
  auto tma_v = [&]() {
    if constexpr (Traits::kTransposeV) {
      Tensor mV = make_tensor(ptr(v_ptr), shape_vt, make_stride(v_rs, _1{}, v_hs, vb));
      return make_tma_copy(SM90_TMA_LOAD{}, mV, take<0, 2>(typename Traits::SmemLayoutV{}),
                           Shape<Int<kN>, Int<DV>>{}, _1{});
    } else if constexpr (Traits::kVColMajor) {  // v_row_stride: from one d to the next
      Tensor mVt = make_tensor(ptr(v_ptr), shape_vt, make_stride(v_rs, _1{}, v_hs, vb));
      return make_tma_copy(SM90_TMA_LOAD{}, mVt, take<0, 2>(typename Traits::SmemLayoutVt{}),
                           Shape<Int<DV>, Int<kN>>{}, _1{});
    } else {
      Tensor mVt = make_tensor(ptr(v_ptr), shape_vt, make_stride(_1{}, v_rs, v_hs, vb));
      return make_tma_copy(SM90_TMA_LOAD{}, mVt, take<0, 2>(typename Traits::SmemLayoutVt{}),
                           Shape<Int<DV>, Int<kN>>{}, _1{});
    }
  }();
  auto tma_o = make_tma_copy(SM90_TMA_STORE{}, mO, typename Traits::SmemLayoutOWG{},
                             Shape<_64, Int<DV>>{}, _1{});

  using KP = KernelParams<decltype(tma_q), decltype(tma_k), decltype(tma_v), decltype(tma_o)>;
  KP kp{p, tma_q, tma_k, tma_v, tma_o, shape_q, shape_k, shape_vt, shape_o,
        StaticTileScheduler{(p.seqlen_q + kM - 1) / kM, p.heads_q, p.batch, p.window_right >= 0,
                            /*heads_per_section=*/std::max(1, p.heads_q * p.batch)}};

  kp.sched.total_tiles = kp.sched.num_tiles();

  int num_sms = p.num_sms;
  if (num_sms <= 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev);
  }
  int grid = std::max(1, std::min(kp.sched.num_tiles(), num_sms));
  // Causal/local order: sections of about one round of tiles (tile_scheduler.cuh). Equal-cost
  // tiles keep every SM (their plain order already keeps one head's K/V in L2).
  // Dynamic hand-out (a counter from the caller, FLASHCUTE_SM90_DYNAMIC_TILES): every SM, the
  // same sections, no cut (tile_scheduler.cuh).
  const bool dynamic = FLASHCUTE_SM90_DYNAMIC_TILES && kp.sched.longest_first && p.tile_counter != nullptr;
  if (dynamic) kp.sched.counter = p.tile_counter;
  if (sections && kp.sched.longest_first) {
    const int nm = kp.sched.num_m_blocks;
    const int heads_per_section = std::max(1, grid / nm);
    kp.sched.heads_per_section = heads_per_section;
    // One round = one section exactly: then the snake pairs each CTA's heavy tile of one round
    // with its light tile of the next. With 132 CTAs and sections of 128 tiles (4 heads x 32
    // query blocks) the rounds drift across sections and the pairing breaks: simulated, the
    // busiest CTA gets 1.4-1.5x the mean work at d=128 causal 1k-16k (FA convention), against
    // 1.00x with the grid cut to 128 (4 SMs idle, 3 %).
    // The cut pays only while it idles few SMs: 86 query blocks (d=64's 192-row tiles at 16k)
    // would leave 46 of 132 idle. Then one section holds every head instead (plain
    // longest-first on all SMs): run 32, d=64 causal 16k 366 (cut) / 428 (sections, no cut)
    // / 495 TFLOP/s (no sections).
    const int cut = heads_per_section * nm;
    if (FLASHCUTE_SM90_SECTION_GRID && nm <= grid) {
      if (cut * 10 >= grid * 9) grid = dynamic ? grid : std::min(grid, cut);
      else kp.sched.heads_per_section = std::max(1, p.heads_q * p.batch);
    }
  }

  kp.sched.set_divisors(grid, p.head_group);
  auto kernel = fwd_kernel<Traits, KP>;
  constexpr int kSmem = Traits::kSmemBytes;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return int(err);
  kernel<<<grid, Traits::kNumThreads, kSmem, static_cast<cudaStream_t>(p.stream)>>>(kp);
  return int(cudaGetLastError());
}

#ifndef FLASHCUTE_SM90_PINGPONG
#define FLASHCUTE_SM90_PINGPONG 1  // ablation: -DFLASHCUTE_SM90_PINGPONG=0
#endif
#ifndef FLASHCUTE_SM90_INTRAWG_OVERLAP
#define FLASHCUTE_SM90_INTRAWG_OVERLAP 1  // ablation: -DFLASHCUTE_SM90_INTRAWG_OVERLAP=0
#endif

}  // namespace sm90

namespace sm90 {
// Optional tile-configuration members: Name<Cfg>::value is Cfg::member where the configuration
// sets it, else the default.
#define FLASHCUTE_SM90_CFG_MEMBER(Name, member, Type, fallback)                    \
  template <class Cfg, class = void> struct Name { static constexpr Type value = fallback; }; \
  template <class Cfg> struct Name<Cfg, std::void_t<decltype(Cfg::member)>> {      \
    static constexpr Type value = Cfg::member;                                     \
  };
FLASHCUTE_SM90_CFG_MEMBER(StagesV, kStagesV, int, 0)                  // V ring depth; 0: as K's
FLASHCUTE_SM90_CFG_MEMBER(PingPong, kPingPong, bool, true)            // consumer warpgroups take turns
FLASHCUTE_SM90_CFG_MEMBER(ProducerRegs, kProducerRegs, int, 24)       // fwd_traits.cuh
FLASHCUTE_SM90_CFG_MEMBER(RederiveQDesc, kRederiveQDesc, bool, false)  // fwd_traits.cuh
FLASHCUTE_SM90_CFG_MEMBER(NumMmaWG, kWG, int, 2)                      // consumer warpgroups
FLASHCUTE_SM90_CFG_MEMBER(TransposeWarps, kTransposeWarps, int, 2)      // FP8 (fwd_traits.cuh)
FLASHCUTE_SM90_CFG_MEMBER(TransposeBatch, kTransposeBatch, int, 0)      // FP8; 0: by registers
FLASHCUTE_SM90_CFG_MEMBER(TwoP, kTwoP, bool, false)                     // two P buffers (fwd_traits.cuh)
FLASHCUTE_SM90_CFG_MEMBER(QAhead, kQAhead, bool, false)                 // two Q buffers (fwd_traits.cuh)
FLASHCUTE_SM90_CFG_MEMBER(NarrowFirst, kNarrowFirst, bool, false)       // narrow first key block (fwd_mainloop.cuh)
#undef FLASHCUTE_SM90_CFG_MEMBER

template <class Element, class ElementO, class Cfg, int HDIM, int HDIM_V, bool kVColMajor = false>
int run_fwd_typed(const FwdParams& p) {
  // FP8 V^T: no transposing warps, so no V landing buffer to stage O in (O gets its own).
  constexpr int kAlias = kVColMajor && Cfg::kAlias == kOInVLanding ? int(kOSeparate) : int(Cfg::kAlias);
  // The FP8 V^T kernel has no transposing warps, so its producer takes 24 registers whatever its
  // tile gives the transposing one (40 at d=128's 192-key tile): +2.5 % at 16k keys, equal at 4k
  // (run 92, H100). Its P stays in one buffer: two (kTwoP) rescale O before rather than after each
  // P V is added, which with FP8's frequent rescales changes O's last bits (up to one bf16 ulp)
  // and so the bitwise equality with the transposing kernel, for -1.5..+5 % (run 92).
  using Traits = FwdTraits<Element, HDIM, HDIM_V, Cfg::kN, Cfg::kStages, kAlias,
                           bool(FLASHCUTE_SM90_PINGPONG) && PingPong<Cfg>::value,
                           bool(FLASHCUTE_SM90_INTRAWG_OVERLAP), ElementO,
                           StagesV<Cfg>::value, NumMmaWG<Cfg>::value, kVColMajor ? 24 : ProducerRegs<Cfg>::value,
                           RederiveQDesc<Cfg>::value, TransposeWarps<Cfg>::value,
                           TransposeBatch<Cfg>::value, kVColMajor, TwoP<Cfg>::value, QAhead<Cfg>::value,
                           NarrowFirst<Cfg>::value>;
  return launch_fwd<Traits>(p, Cfg::kSections && FLASHCUTE_SM90_L2_SECTIONS);
}
// e4m3 in; out in p.out_dtype (0 fp16, else bf16). V^T in (p.v_colmajor): built with bf16 out
// for the head dims the FP8 mode asks for it (VColMajorBuilt; fwd.cpp checks first).
template <class Cfg, int HDIM, int HDIM_V>
int run_fwd_e4m3(const FwdParams& p) {
  using E4M3 = cutlass::float_e4m3_t;
  if constexpr (VColMajorBuilt<HDIM, HDIM_V>::value) {
    if (p.v_colmajor) {
      if (p.out_dtype == 0) return int(cudaErrorInvalidValue);
      return run_fwd_typed<E4M3, cutlass::bfloat16_t, Cfg, HDIM, HDIM_V, true>(p);
    }
  }
  if (p.v_colmajor) return int(cudaErrorInvalidValue);
  if (p.out_dtype == 0) return run_fwd_typed<E4M3, cutlass::half_t, Cfg, HDIM, HDIM_V>(p);
  return run_fwd_typed<E4M3, cutlass::bfloat16_t, Cfg, HDIM, HDIM_V>(p);
}
}  // namespace sm90

// DTYPE: flashcute_dtype (0 fp16, 1 bf16, 2 e4m3). For e4m3 the output type is p.out_dtype.
template <int DTYPE, int HDIM, int HDIM_V>
int run_fwd_sm90(const FwdParams& p) {
  static_assert(DTYPE >= 0 && DTYPE <= 2, "sm90 forward supports fp16, bf16 and e4m3");
  if constexpr (DTYPE == 2) {
    using Long = sm90::TileConfigFp8Long<HDIM, HDIM_V>;
    if constexpr (Long::kMinSeqlenK > 0) {
      if (p.seqlen_k >= Long::kMinSeqlenK) return sm90::run_fwd_e4m3<Long, HDIM, HDIM_V>(p);
    }
    return sm90::run_fwd_e4m3<sm90::TileConfigFp8<HDIM, HDIM_V>, HDIM, HDIM_V>(p);
  } else {
    using Element = std::conditional_t<DTYPE == 0, cutlass::half_t, cutlass::bfloat16_t>;
    using Short = sm90::TileConfigShortCausal<HDIM, HDIM_V>;
    if constexpr (Short::kMaxSeqlenQ > 0) {
      if (p.window_right >= 0 && p.seqlen_q < Short::kMaxSeqlenQ)  // causal or local (longest first)
        return sm90::run_fwd_typed<Element, Element, Short, HDIM, HDIM_V>(p);
    }
    return sm90::run_fwd_typed<Element, Element, sm90::TileConfig<HDIM, HDIM_V>, HDIM, HDIM_V>(p);
  }
}

}  // namespace flashcute
