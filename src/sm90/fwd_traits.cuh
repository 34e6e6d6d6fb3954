// Compile-time configuration of the sm90 forward kernel: tile shapes, the two WGMMA tiled MMAs,
// shared-memory layouts and the shared-storage struct.
//
// Thread roles (384 threads, one CTA per SM):
//   warpgroup 0       producer: thread 0 issues every TMA load; the other warps only idle at
//                     24 regs. FP8: 2-3 warps transpose each V tile in smem (fwd_fp8.cuh).
//   warpgroups 1, 2   consumers: each owns 64 of the kBlockM = 128 query rows and runs
//                     S = Q K^T (WGMMA SS), the online softmax and O += P V (WGMMA RS).
// Register budget: 24 (producer) * 128 + 240 (consumers) * 256 = 64,512 <= 65,536, FP8 too
// (or 40 + 232 where a tile asks for it, kProducerRegs): the loads and the transpose run on
// separate warps, so neither role holds the other's state (when thread 0 also transposed, the
// producer needed 56 registers and the consumers got 224).
//
// FP8 (Element = e4m3, ElementO = bf16/fp16): FP8 WGMMA takes both operands K-major, so V (N x
// dv, dv contiguous as TMA lands it) is copied by the producer warps into V^T (dv x N, N
// contiguous) with its keys permuted within each 32-key group so that the S accumulator, packed
// to e4m3, is already the A operand of P V (fwd_fp8.cuh explains the permutation).
#pragma once

// The sm90 kernels are compiled with CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED (CMakeLists.txt):
// without it CuTe's WGMMA op selectors only offer N = 16/32/64/96/128/192/256, and kBlockN = 80
// (d=256) and 112 (d=192) silently fall back to 64x16x16 instructions (5-7x more HGMMAs, A
// re-read from smem per n16 slice). The static_asserts below catch a build without it.

#include <cute/tensor.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/pipeline.hpp>
#include <cutlass/gemm/collective/builders/sm90_common.inl>
#include <type_traits>
#include "sm90/tile_scheduler.cuh"

namespace flashcute::sm90 {

using namespace cute;

#ifndef FLASHCUTE_SM90_FP8_TRANSPOSE_WARPS
#define FLASHCUTE_SM90_FP8_TRANSPOSE_WARPS 0  // A/B switch (FwdTraits::kTransposeWarps); 0: the tile's
#endif
#ifndef FLASHCUTE_SM90_TWO_P
#define FLASHCUTE_SM90_TWO_P 0  // A/B builds: two P buffers whatever the tile says (FwdTraits::kTwoP)
#endif
#ifndef FLASHCUTE_SM90_NARROW_FIRST
#define FLASHCUTE_SM90_NARROW_FIRST 0  // A/B builds: the narrow first block whatever the tile says (FwdTraits::kNarrowFirst)
#endif
#ifndef FLASHCUTE_SM90_SPLIT_Q
#define FLASHCUTE_SM90_SPLIT_Q 0  // A/B switch: Q in one part per consumer warpgroup (FwdTraits::kSplitQ);
#endif                            // 1 where it fits without spills, 2 in every kernel
#ifndef FLASHCUTE_SM90_Q_AHEAD
#define FLASHCUTE_SM90_Q_AHEAD 0  // A/B builds: two Q buffers (Q a tile ahead) whatever the tile says (FwdTraits::kQAhead)
#endif
#ifndef FLASHCUTE_SM90_EARLY_CLAIM
#define FLASHCUTE_SM90_EARLY_CLAIM 0  // A/B switch: the next tile claimed before this one's last loads (fwd_kernel.cuh)
#endif
#ifndef FLASHCUTE_SM90_DEFER_EPILOGUE
#define FLASHCUTE_SM90_DEFER_EPILOGUE 0  // A/B switch: a tile's epilogue after the next tile's first S GEMM (FwdTraits::kDeferEpilogue)
#endif
#ifndef FLASHCUTE_SM90_FP8_TRANSPOSE_BATCH
#define FLASHCUTE_SM90_FP8_TRANSPOSE_BATCH 0  // A/B switch (FwdTraits::kTransposeBatch); 0: the tile's
#endif

// Where O is staged for its TMA store: its own buffer, Q's, or (FP8) V's landing buffer.
enum OStaging : int { kOSeparate = 0, kOInQ = 1, kOInVLanding = 2 };

template <class Element_, int kHeadDim_, int kHeadDimV_, int kBlockN_, int kStages_,
          int kOStaging_, bool kPingPong_ = true, bool kIntraWGOverlap_ = true,
          class ElementO_ = Element_, int kStagesV_ = 0, int kNumMmaWG_ = 2, int kProducerRegs_ = 24,
          bool kRederiveQDesc_ = false, int kTransposeWarps_ = 2, int kTransposeBatch_ = 0,
          bool kVColMajor_ = false, bool kTwoP_ = false, bool kQAhead_ = false, bool kNarrowFirst_ = false>
struct FwdTraits {
  using Element = Element_;    // q, k, v
  using ElementO = ElementO_;  // out (bf16/fp16; differs from Element only for FP8)
  static constexpr bool kFp8 = sizeof(Element) == 1;
  // FP8 with V already transposed in memory (FwdParams::v_colmajor: the FP8 mode's quantizer
  // writes V^T, keys permuted as fwd_fp8.cuh's P layout wants): the TMA lands V^T where the
  // GEMM reads it, as for 16-bit inputs, and no producer warp transposes.
  static constexpr bool kVColMajor = kVColMajor_;
  static_assert(!kVColMajor || kFp8, "a column-major V is an FP8 layout");
  static constexpr bool kTransposeV = kFp8 && !kVColMajor;  // V lands, then warps write V^T
  static_assert(sizeof(ElementO) == 2, "the output is 16-bit");
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  // P in two register buffers (fwd_mainloop.cuh, the steady state's step()), a tile's choice
  // where the registers allow it (TileConfig::kTwoP). The softmax of S(n) then never waits for
  // P(n+1) V, the GEMM issued in its own turn: with one buffer the next turn depends on that
  // GEMM's completion, which the other warpgroup's S GEMM, issued right after it, delays (run
  // 85's trace: P V done ~2,700 cycles after the turn's start, S done at ~1,250). Costs the
  // registers of a second P (32 at bf16 d=128). It pays only once V arrives in time (V^T loaded
  // as 2 boxes, not 32): run 87, bf16 d=128, alone -7..-14 %, with the V^T layout +3..+11 %.
  static constexpr bool kTwoP = kTwoP_ || bool(FLASHCUTE_SM90_TWO_P);
  // A warpgroup's first key block as a narrower block where its rows see only its first 64
  // keys (fwd_mainloop.cuh, Mainloop::kNarrowFirst), a tile's choice (TileConfig::kNarrowFirst).
  static constexpr bool kNarrowFirst = kNarrowFirst_ || bool(FLASHCUTE_SM90_NARROW_FIRST);
  // Consumer warpgroups, 64 query rows each (one wgmma M). 3 (kBlockM = 192, FA3's choice at
  // d=64) lets two warpgroups' GEMMs cover one's softmax where the softmax costs as much as
  // the GEMMs (16-bit d=64; e4m3 d=64 too, run 60).
  static constexpr int kNumMmaWG = kNumMmaWG_;
  static_assert(kNumMmaWG == 2 || kNumMmaWG == 3, "2 or 3 consumer warpgroups");
  static constexpr int kBlockM = 64 * kNumMmaWG;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;  // K ring depth; 2 hides TMA latency because K
                                            // runs one block ahead of V
  // V ring depth (0: as K's). V(n)'s buffer frees only when both warpgroups have waited for
  // P(n+2) V(n+2), late in their iteration, so V has less slack than K.
  static constexpr int kStagesV = kStagesV_ > 0 ? kStagesV_ : kStages_;
  // O is staged through smem for the TMA store. When Q + K + V + O would not fit in the 227 KB
  // a CTA may hold (hdim 192/256), O reuses Q's buffer; Q is then released only after the store.
  // FP8 d=256 with N=128: O (64 KB) outgrows Q (32 KB) and takes V's landing buffer instead;
  // the producer then issues a tile's first V only after the previous tile's O store read it.
  static constexpr int kOStaging = kOStaging_;
  static constexpr bool kOAliasQ = kOStaging == kOInQ;
  static constexpr bool kOAliasV = kOStaging == kOInVLanding;
  static_assert(!kOAliasV || kTransposeV, "only the transposing FP8 kernel has a V landing buffer");
  static constexpr bool kPingPong = kPingPong_;  // off for e4m3 d=128 (fwd_launch.cuh); ablation switch
  static constexpr bool kIntraWGOverlap = kIntraWGOverlap_;  // ablation switch
  // A consumer warpgroup stores tile t's O only once it has issued tile t + 1's first S GEMM
  // (fwd_kernel.cuh): the epilogue's memory part (smem, two barriers, the TMA store: most of its
  // ~1,200 cycles, runs 85 and 92) then runs while that GEMM is on the tensor cores instead of
  // before it, when they are idle; its register part (normalise, LSE, convert: it writes the
  // accumulator, which must not happen under an in-flight wgmma) stays right after tile t. Needs
  // O in its own buffer (an aliased Q or V buffer already holds the next tile's data by then)
  // and the overlapped schedule. 16-bit kernels only for now (issue 5's d=128 causal miss).
  static constexpr bool kDeferEpilogue =
      bool(FLASHCUTE_SM90_DEFER_EPILOGUE) && kOStaging_ == kOSeparate && kIntraWGOverlap_ && !kFp8;

  static constexpr int kNumMmaThreads = kNumMmaWG * 128;
  static constexpr int kNumThreads = kNumMmaThreads + 128;
  // Producer registers: 24, or (FP8) 40 where the consumers fit in 232 and the transposing
  // warps can then keep several V blocks in flight. The consumers get the rest:
  // (64,512 - 128 P) / 256, i.e. 240 / 232; three consumer warpgroups (65,536 - 24 * 128) / 384
  // = 162 -> 160.
  static constexpr int kProducerRegs = kProducerRegs_;
  static_assert(kProducerRegs == 24 || (kFp8 && kProducerRegs == 40 && kNumMmaWG == 2));
  // Q's smem descriptors re-derived per GEMM rather than held in registers (fwd_mainloop.cuh,
  // q_desc): e4m3 d=256 only, where the held ones spilled; elsewhere it cost bf16 1-2 % (run 44).
  static constexpr bool kRederiveQDesc = kRederiveQDesc_;
  static constexpr int kConsumerRegs = kNumMmaWG == 3 ? 160 : (64512 - 128 * kProducerRegs) / 256;
  // FP8: the last kTransposeWarps producer warps transpose V (thread 0, warp 0, issues the
  // loads); each warp takes every kTransposeWarps-th block of a stage, its block list unrolled
  // at compile time. A tile sets the count (TileConfigFp8, fwd_launch.cuh); 2 by default.
  static constexpr int kTransposeWarps =
      FLASHCUTE_SM90_FP8_TRANSPOSE_WARPS > 0 ? FLASHCUTE_SM90_FP8_TRANSPOSE_WARPS : kTransposeWarps_;
  static_assert(kTransposeWarps >= 1 && kTransposeWarps <= 3, "warp 0 issues the loads");
  static constexpr int kTransposeThreads = 32 * kTransposeWarps;
  static constexpr int kFirstTransposeWarp = 4 - kTransposeWarps;
  // V blocks a transposing warp loads before its first store: a tile's kTransposeBatch, else 2
  // with 40 registers (4 measured slower, run 43) and 1 with 24.
  static constexpr int kTransposeBatch =
      FLASHCUTE_SM90_FP8_TRANSPOSE_BATCH > 0 ? FLASHCUTE_SM90_FP8_TRANSPOSE_BATCH
      : kTransposeBatch_ > 0                 ? kTransposeBatch_
                                             : (kProducerRegs >= 40 ? 2 : 1);

  // WGMMA k-step: 16 elements (32 bytes) for 16-bit types, 32 for e4m3.
  static constexpr int kMmaK = kFp8 ? 32 : 16;
  static_assert(kBlockN % kMmaK == 0, "P V consumes kBlockN in whole k-steps");
  static_assert(kHeadDim % kMmaK == 0 && kHeadDimV % 16 == 0);

  // GEMM-I: S(128 x N) = Q(128 x d) K^T, both operands K-major in smem.
  // GEMM-II: O(128 x dv) += P(128 x N) V(N x dv); P from registers, V^T is MN-major in smem
  // (16-bit) or K-major (FP8, the transposed copy).
  static constexpr GMMA::Major kVtMajor = kFp8 ? GMMA::Major::K : GMMA::Major::MN;
  using AtomLayout = Layout<Shape<Int<kNumMmaWG>, _1, _1>>;
  using TiledMmaQK = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kHeadDim>>>(),
      AtomLayout{}));
  using TiledMmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDimV>, Int<kBlockN>>,
                           GMMA::Major::K, kVtMajor>(),
      AtomLayout{}));
  // One WGMMA instruction must span the whole tile width of each GEMM (see the note above).
  static_assert(decltype(size<1>(typename TiledMmaQK::AtomShape_MNK{}))::value == kBlockN,
                "GEMM-I would be split into narrower WGMMAs: define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED");
  static_assert(decltype(size<1>(typename TiledMmaPV::AtomShape_MNK{}))::value == kHeadDimV,
                "GEMM-II would be split into narrower WGMMAs: define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED");

  template <GMMA::Major kMajor, int kMN, int kK, class T = Element>
  using SmemAtom = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                            kMajor, T, Int<kMN>, Int<kK>>());

  // Q in parts, one per consumer warpgroup (kSplitQ, A/B switch FLASHCUTE_SM90_SPLIT_Q). A
  // warpgroup's S GEMMs read only its own 64 rows of Q, so each part has its own full and empty
  // barriers, and the producer refills a part for the next tile as soon as its warpgroup has
  // consumed its last S, rather than once the slowest warpgroup has. With one Q buffer that wait
  // sits on the tile boundary: run 87's trace (bf16 d=128, 4k) had a warpgroup wait 1,126 cycles
  // from the tile header to Q, and the producer 1,534 cycles per tile for q_empty. The parts are
  // stacked (64 x d blocks, rows first within each, as O's), so each is one TMA box.
  // With 1 the transposing e4m3 kernels whose producer runs at 24 registers keep one Q buffer:
  // their producer thread spills 8 bytes around a part's TMA issue (benchmarks/RESULTS.md,
  // session 23); 2 splits them too, for measurement.
  static constexpr bool kSplitQ = FLASHCUTE_SM90_SPLIT_Q >= 2 ||
                                  (FLASHCUTE_SM90_SPLIT_Q == 1 && !(kTransposeV && kProducerRegs_ == 24));
  static constexpr int kQParts = kSplitQ ? kNumMmaWG : 1;
  static constexpr int kQPartRows = kBlockM / kQParts;
  using SmemLayoutQPart = decltype(tile_to_shape(SmemAtom<GMMA::Major::K, kQPartRows, kHeadDim>{},
                                                 Shape<Int<kQPartRows>, Int<kHeadDim>>{}));
  using SmemLayoutQ = std::conditional_t<
      kSplitQ, decltype(blocked_product(SmemLayoutQPart{}, Layout<Shape<Int<kQParts>, _1>>{})), SmemLayoutQPart>;
  using SmemLayoutK = decltype(tile_to_shape(SmemAtom<GMMA::Major::K, kBlockN, kHeadDim>{},
                                             Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  // V^T (dv x N). 16-bit: the TMA reads V rows (contiguous in dv) straight into this MN-major
  // layout. FP8: K-major (N contiguous), written by the producer's transpose.
  // MN-major (16-bit): the swizzle atoms (64 dv x 8 keys) are tiled along the keys first, so
  // that a 64-wide dv slab is contiguous over all N keys and the TMA loads it as one box. Tiled
  // along dv first, a slab is contiguous for only 8 keys: one V block then took dv/64 x N/8
  // loads (32 UTMALDG at d=128, against 2 for K).
  using VtTileOrder = std::conditional_t<kVtMajor == GMMA::Major::MN, Step<_2, _1, _3>, Step<_1, _2, _3>>;
  using SmemLayoutVt = decltype(tile_to_shape(SmemAtom<kVtMajor, kHeadDimV, kBlockN>{},
                                              Shape<Int<kHeadDimV>, Int<kBlockN>, Int<kStagesV>>{},
                                              VtTileOrder{}));
  // FP8 only: where the TMA lands V (N x dv, dv contiguous), the transpose's source.
  using SmemLayoutV = decltype(tile_to_shape(SmemAtom<GMMA::Major::K, kBlockN, kHeadDimV>{},
                                             Shape<Int<kBlockN>, Int<kHeadDimV>, Int<kStagesV>>{}));
  // O: rows [64*wg, 64*wg + 64) are one contiguous (64 x dv) layout that each consumer
  // warpgroup stores on its own with TMA: its atoms (8 rows x 64 dv) ordered rows first, so a
  // 64-wide slab is one 64 x 64 store box (ordered dv first, the box was 8 rows deep: 16
  // UTMASTG per warpgroup and tile at dv = 128), and the warpgroups' blocks stacked.
  using SmemAtomO = SmemAtom<GMMA::Major::K, 64, kHeadDimV, ElementO>;
  using SmemLayoutOWG = decltype(tile_to_shape(SmemAtomO{}, Shape<_64, Int<kHeadDimV>>{}));
  using SmemLayoutO = decltype(blocked_product(SmemLayoutOWG{}, Layout<Shape<Int<kNumMmaWG>, _1>>{}));

  using PipelineK = cutlass::PipelineTmaAsync<kStages>;
  using PipelineV = cutlass::PipelineTmaAsync<kStagesV>;  // V (as V^T; transposing FP8: as it lands)
  using PipelineStateK = typename cutlass::PipelineState<kStages>;
  using PipelineStateV = typename cutlass::PipelineState<kStagesV>;
  using PipelineVt = cutlass::PipelineAsync<kStagesV>;  // FP8: transposed V, producer WG -> consumers

  static constexpr int kQBytes = kBlockM * kHeadDim * int(sizeof(Element));
  static constexpr int kQPartBytes = kQBytes / kQParts;
  static constexpr int kKStageBytes = kBlockN * kHeadDim * int(sizeof(Element));
  static constexpr int kVStageBytes = kBlockN * kHeadDimV * int(sizeof(Element));
  // Q a tile ahead (kQAhead: the tile's choice, TileConfig::kQAhead, or every tile with the A/B
  // switch FLASHCUTE_SM90_Q_AHEAD): two Q buffers, used by the loaded tiles in turn, so that the
  // producer loads the next tile's Q as soon as it knows the tile (right after this tile's last
  // load) instead of once this tile's last S has released the one buffer. The header then has its
  // own barrier (hdr_empty), as with Q in parts. 16-bit kernels with O in its own buffer, where a
  // second Q fits. Measured (runs 93-94): +2.6-4.3 % for d=64's short-causal tile at 1k (4.5 key
  // blocks per tile), nothing or -1..-4 % for longer tiles and at d=128.
  static constexpr int kOBytesSeparate = kOStaging == kOSeparate ? kBlockM * kHeadDimV * int(sizeof(ElementO)) : 0;
  static constexpr bool kQAhead = (kQAhead_ || bool(FLASHCUTE_SM90_Q_AHEAD)) && !kSplitQ && !kFp8 && kOStaging == kOSeparate &&
                                  2 * kQBytes + kStages * kKStageBytes + kStagesV * kVStageBytes + kOBytesSeparate +
                                          2048 <= 232448;
  static constexpr int kQSlots = kQAhead ? 2 : 1;
  static constexpr bool kHeaderBarrier = kSplitQ || kQAhead;  // the header guarded by hdr_empty
  // O aliasing Q with Q in parts: warpgroup w's O (rows 64w..64w+63, stacked as Q's) must lie in
  // Q's part w, which w alone releases.
  static_assert(!(kSplitQ && kOAliasQ) || kHeadDimV * sizeof(ElementO) == kHeadDim * sizeof(Element),
                "O's warpgroup blocks must coincide with Q's parts");

  struct BarrierStorage {
    typename PipelineK::SharedStorage pipe_k;
    typename PipelineV::SharedStorage pipe_v;
    typename PipelineVt::SharedStorage pipe_vt;  // FP8 only (unused otherwise)
    alignas(8) uint64_t q_full[kQParts * kQSlots];   // transaction barriers: Q (part w, or buffer s) landed
    alignas(8) uint64_t q_empty[kQParts * kQSlots];  // consumer arrivals (those of part w's warpgroup): Q's
                                                     // buffer (and O's, if aliased) is free, and unless
                                                     // kHeaderBarrier the tile header too (once per tile,
                                                     // loaded or not; kQAhead: once per loaded tile)
    alignas(8) uint64_t tile_full;  // 1 arrival: the tile header is written
    alignas(8) uint64_t o_free;   // kOAliasV: 256 consumer arrivals: the O store read V's landing buffer
    TileHeader tile;              // this tile's index, published on tile_full (tile_scheduler.cuh)
    int v_end[kStagesV];          // FP8 transposing warps: nonzero = the end, no V block here
    alignas(8) uint64_t hdr_empty;  // kHeaderBarrier: consumer arrivals: the tile header was read (once per header)
  };
  // FP8's TMA landing buffer for V (its 1024-byte alignment comes with the array); an empty
  // member otherwise.
  struct NoVLanding {
    CUTE_DEVICE Element* data() { return nullptr; }
  };
  struct VLanding {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutV>> buf;
    CUTE_DEVICE Element* data() { return buf.data(); }
  };
  using VLandingStorage = std::conditional_t<kTransposeV, VLanding, NoVLanding>;

  struct StorageSeparateO {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ> * kQSlots> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutVt>> v;
    alignas(1024) cute::array_aligned<ElementO, cosize_v<SmemLayoutO>> o;
    BarrierStorage bar;
    VLandingStorage v_landing;  // last: the empty 16-bit variant then costs a few bytes, not 1 KB
    CUTE_DEVICE ElementO* o_ptr() { return o.data(); }
  };
  // O staged in Q's buffer (kOAliasQ) or in FP8's V landing buffer (kOAliasV).
  struct StorageOAliased {
    static_assert(!kOAliasQ || cosize_v<SmemLayoutO> * sizeof(ElementO) <= cosize_v<SmemLayoutQ> * sizeof(Element));
    static_assert(!kOAliasV || cosize_v<SmemLayoutO> * sizeof(ElementO) <= cosize_v<SmemLayoutV> * sizeof(Element));
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ> * kQSlots> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutVt>> v;
    BarrierStorage bar;
    VLandingStorage v_landing;
    CUTE_DEVICE ElementO* o_ptr() {
      if constexpr (kOAliasV) return reinterpret_cast<ElementO*>(v_landing.data());
      else return reinterpret_cast<ElementO*>(q.data());
    }
  };
  using SharedStorage = std::conditional_t<kOStaging == kOSeparate, StorageSeparateO, StorageOAliased>;
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 232448, "over the 227 KB of shared memory a CTA may opt into");
};

// Row kQPartRows * w + r of Traits::SmemLayoutQ is row r of Q's part w, which the TMA fills as
// one box at offset w * cosize(part): sampled at compile time (Mainloop's static_assert; every
// element of every head dim's layout was checked once on the host).
template <class Traits>
constexpr bool q_parts_stacked() {
  using Q = typename Traits::SmemLayoutQ;
  using Part = typename Traits::SmemLayoutQPart;
  for (int w = 0; w < Traits::kQParts; ++w)
    for (int r = 0; r < Traits::kQPartRows; r += 7)
      for (int c = 0; c < Traits::kHeadDim; c += 13)
        if (int(Q{}(w * Traits::kQPartRows + r, c)) != w * int(cosize_v<Part>) + int(Part{}(r, c))) return false;
  return true;
}

// Named barrier ids (0 is __syncthreads). bar.sync/bar.arrive count threads, in whole warps.
enum NamedBarrierId : int {
  kBarSchedWG0 = 1,  // kBarSchedWG0 + w: "consumer WG w may issue its GEMMs" (ping-pong; w < 3)
  kBarEpiWG0 = 4,    // kBarEpiWG0 + w: WG w's epilogue barrier (O smem written / free)
};

CUTE_DEVICE void named_bar_sync(int id, int num_threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(num_threads) : "memory");
}
CUTE_DEVICE void named_bar_arrive(int id, int num_threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(num_threads) : "memory");
}

}  // namespace flashcute::sm90
