// Mainloop collective of the sm90 forward kernel: the producer's TMA loads and the consumers'
// WGMMA GEMMs with the online softmax, for one (query block, head, batch) tile.
//
// Pipelines. K and V each go through a cutlass::PipelineTmaAsync ring (kStages, kStagesV buffers; full
// barrier: TMA transaction bytes landed; empty barrier: all 256 consumer threads released it).
// The producer issues K one block ahead of V, K(n_max-1), K(n_max-2), V(n_max-1), ..., because
// with intra-warpgroup overlap a consumer needs K(n-1) for S before V(n) for O += P V.
// Key blocks run from the last to the first, so the blocks that need a mask (the end of the keys,
// the causal diagonal) come while the running max is still being built.
//
// Tiles and Q: the producer thread decides each tile (static order or claimed, tile_scheduler.cuh)
// and writes its index into the tile header, published on mbarrier tile_full before Q is loaded.
// Q: transaction barrier q_full; the consumers wait on its phase, which flips once per tile that
// has work. Before the next tile header (and Q) the producer waits on mbarrier q_empty, where
// every consumer thread arrives once per tile when it no longer reads Q (after its last S GEMM, or
// after its O store when O aliases Q's buffer; at once for a tile without work). An mbarrier
// rather than a named barrier: the producer is a single thread, and mbarrier arrivals count
// threads exactly. With Q in parts (kSplitQ, fwd_traits.cuh) each warpgroup has its own
// q_full[w] / q_empty[w], and the header its own barrier, hdr_empty, arrived once it is read.
// With Q a tile ahead (kQAhead) there are two whole-tile Q buffers, the j-th tile with loads using
// buffer j % 2 (its barriers complete once per use; a tile without loads touches neither), and
// the header has hdr_empty too: the producer loads a tile's Q as soon as it has published it.
// (tests/test_protocol_model.py models all three layouts.)
//
// Ping-pong (kPingPong): consumer warpgroups take turns issuing their GEMMs, ordered by named
// barriers kBarSchedWG0 + w: a WG waits for its turn, issues, then hands the turn on. So
// one WG's softmax runs while the other's GEMMs keep the tensor cores busy.
// Intra-WG overlap (kIntraWGOverlap): S(n-1) = Q K(n-1)^T is issued together with O += P(n) V(n)
// so the softmax of block n-1 overlaps the P V wgmma of block n.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include "common/mask.cuh"
#include "common/params.h"
#include "common/seqlen.cuh"
#include "common/utils.cuh"
#include "sm90/fwd_fp8.cuh"
#include "sm90/fwd_softmax.cuh"
#include "sm90/fwd_traits.cuh"
#include "sm90/tile_scheduler.cuh"
#include "sm90/trace.cuh"

namespace flashcute::sm90 {

using namespace cute;

// Events inside the key loop's turns: only with FLASHCUTE_SM90_TRACE=2 (they cost the turn a few
// dozen cycles each).
#if FLASHCUTE_SM90_TRACE >= 2
#define FC_TRACE_LOOP(x) x
#else
#define FC_TRACE_LOOP(x) ((void)0)
#endif

// Which key blocks a tile touches. active == false: the query block lies past this sequence's
// end (varlen), nothing to write. n_min == n_max: every key is masked, write O = 0, LSE = -inf.
struct TileRange {
  int row_begin, row_end, n_min, n_max;
  bool active;
};

template <int kBlockM, int kBlockN>
CUTE_DEVICE TileRange tile_range(WindowMask const& mask, SeqInfo const& seq, int m_block) {
  TileRange r;
  r.row_begin = m_block * kBlockM;
  r.active = r.row_begin < seq.seqlen_q;
  r.row_end = min(seq.seqlen_q, r.row_begin + kBlockM);
  r.n_min = r.n_max = 0;
  if (r.active) mask.template key_block_range<kBlockN>(r.row_begin, r.row_end, r.n_min, r.n_max);
  if (r.n_max < r.n_min) r.n_max = r.n_min;
  return r;
}

// Issue one warpgroup's share of a tiled WGMMA (all k-steps, or the first kSteps > 0: the narrow
// first key block's P V, whose P is zero past its visible keys) as one commit group; no wait.
// kARegs: A is a register fragment (RS), else a smem descriptor fragment (SS). A compile-time
// count: a wgmma under a runtime condition inside the arrive / commit group made ptxas serialise
// every wgmma of the kernel (C7520).
template <bool kARegs, int kSteps = 0, class TiledMma, class TA, class TB, class TC>
CUTE_DEVICE void wgmma_issue(TiledMma& mma, TA&& tA, TB const& tB, TC& tC, bool zero_init) {
  constexpr int kK = kSteps > 0 ? kSteps : decltype(size<2>(tA))::value;
  static_assert(kK <= decltype(size<2>(tA))::value);
  if constexpr (kARegs) warpgroup_fence_operand(tA);
  warpgroup_fence_operand(tC);
  warpgroup_arrive();
  mma.accumulate_ = zero_init ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int k = 0; k < kK; ++k) {
    cute::gemm(mma, tA(_, _, k), tB(_, _, k), tC);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(tC);
  if constexpr (kARegs) warpgroup_fence_operand(tA);
}

// Issue two tiled WGMMAs as one commit group with their k-steps alternated (A/B switch
// FLASHCUTE_SM90_INTERLEAVE_SPV): S(n) and O += P(n+1) V(n+1) accumulate into different
// registers, so alternating them keeps two independent accumulator chains in flight.
template <class Mma1, class TA1, class TB1, class TC1, class Mma2, class TA2, class TB2, class TC2>
CUTE_DEVICE void wgmma_issue_pair(Mma1& m1, TA1 const& a1, TB1 const& b1, TC1& c1, bool zero1,
                                  Mma2& m2, TA2& a2, TB2 const& b2, TC2& c2, bool zero2) {
  constexpr int K1 = decltype(size<2>(a1))::value, K2 = decltype(size<2>(a2))::value;
  warpgroup_fence_operand(a2);
  warpgroup_fence_operand(c1);
  warpgroup_fence_operand(c2);
  warpgroup_arrive();
  m1.accumulate_ = zero1 ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  m2.accumulate_ = zero2 ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int k = 0; k < (K1 > K2 ? K1 : K2); ++k) {
    if (k < K1) {
      cute::gemm(m1, a1(_, _, k), b1(_, _, k), c1);
      m1.accumulate_ = GMMA::ScaleOut::One;
    }
    if (k < K2) {
      cute::gemm(m2, a2(_, _, k), b2(_, _, k), c2);
      m2.accumulate_ = GMMA::ScaleOut::One;
    }
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(c1);
  warpgroup_fence_operand(c2);
  warpgroup_fence_operand(a2);
}

#ifndef FLASHCUTE_SM90_INTERLEAVE_SPV
#define FLASHCUTE_SM90_INTERLEAVE_SPV 0
#endif

// A/B switch: wait for V(n+1) before taking the ping-pong turn rather than between the turn's S
// and P V issues, so that a late V holds only this warpgroup, not the other one's turn too
// (run 85's trace: V ready ~300 cycles after the turn's S was issued).
#ifndef FLASHCUTE_SM90_V_BEFORE_TURN
#define FLASHCUTE_SM90_V_BEFORE_TURN 0
#endif

// Where the wait for P V goes (warpgroup_wait_after below). A/B switch: 0 = never pinned (plain
// warpgroup_wait<0>, which ptxas hoists), 1 = always, 2 = FP8 only (default: measured +8-9 % for
// e4m3 d=128 at 1k-4k, and -2..-4 % for bf16 at 1k; run 14 in benchmarks/RESULTS.md).
#ifndef FLASHCUTE_SM90_PIN_PV_WAIT
#define FLASHCUTE_SM90_PIN_PV_WAIT 2
#endif

// The first key block of a warpgroup's range as a narrower block (FwdTraits::kNarrowFirst; A/B
// switch FLASHCUTE_SM90_NARROW_FIRST): where the warpgroup's rows see only that block's first
// W < kBlockN keys (the end of the keys, e.g. 64 of a 192-key block at 4k; the causal diagonal's
// upper half for the first warpgroup of a 128 x 128 tile), S is an m64nW WGMMA on K's first W
// rows, the mask and the softmax run on those W columns, and P V issues only their W / kMmaK
// k-steps. The columns left out are masked for every row of the warpgroup, so P is the same:
// 16-bit O and LSE keep their bits (run 146); e4m3 P V sums its products differently when it
// skips the zero k-steps (last-bit differences). W = 64 only: a second width of 128 for 192-key
// blocks, with 64 accumulator registers of its own, serialised the e4m3 wgmmas (C7515, session 39).
#ifndef FLASHCUTE_SM90_NARROW_PV  // 0: the narrow block's P V takes every k-step (P's others zero)
#define FLASHCUTE_SM90_NARROW_PV 1
#endif

// wgmma.wait_group N that ptxas cannot move above the computation of `dep`.
// Why: ptxas schedules a wait_group as early as its basic block allows (it models no cost for the
// wait). In the steady-state loop that put the wait for O += P(n+1) V(n+1) at the top of the
// softmax of S(n), before its exponentials: the softmax then ran only after P V had finished,
// and intra-warpgroup overlap was lost (seen in the SASS: WARPGROUP.DEPBAR before every MUFU.EX2).
// A never-taken branch on dep ends the basic block once dep is known, so the wait stays after
// everything dep depends on. dep is a sum of exponentials: never negative (NaN compares false).
// The branch target must not be if-convertible into a predicated instruction (a few stores were);
// brkpt is not, and unlike trap it leaves ptxas's register allocation and wgmma pipelining alone.
template <int N>
CUTE_DEVICE void warpgroup_wait_after(float dep) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.lt.f32 p, %0, 0f00000000;\n\t@p bra.uni FC_WAIT_NEVER;\n"
      "FC_WAIT_BACK:\n\twgmma.wait_group.sync.aligned %1;\n\tbra.uni FC_WAIT_DONE;\n"
      "FC_WAIT_NEVER:\n\tbrkpt;\n\tbra.uni FC_WAIT_BACK;\nFC_WAIT_DONE:\n}\n" ::"f"(dep), "n"(N)
      : "memory");
}

// The log2-domain factor applied to raw scores (after softcap's tanh when softcap is on): the
// consumers' softmax and the epilogue's LSE must use the same one.
CUTE_DEVICE float score_scale_log2(FwdParams const& p, float qk_descale) {
  return p.softcap > 0.f ? p.softcap_log2 : p.scale_log2 * qk_descale;
}

template <class Traits>
struct Mainloop {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = Traits::kHeadDim, kHeadDimV = Traits::kHeadDimV;
  using PipelineK = typename Traits::PipelineK;
  using PipelineV = typename Traits::PipelineV;
  using PipelineStateK = typename Traits::PipelineStateK;
  using PipelineStateV = typename Traits::PipelineStateV;
  using SharedStorage = typename Traits::SharedStorage;

  using PipelineVt = typename Traits::PipelineVt;
  static_assert(q_parts_stacked<Traits>(), "Q's parts are not stacked as the TMA boxes land");
  static constexpr bool kPinPVWait =
      FLASHCUTE_SM90_PIN_PV_WAIT == 2 ? Traits::kFp8 : bool(FLASHCUTE_SM90_PIN_PV_WAIT);
  static constexpr bool kTwoP = Traits::kTwoP;
  // Block-wise FP8 descales (fwd_fp8.cuh's BlockDescale): the V^T kernels, which only the FP8
  // mode calls, take them; the others keep one descale per (batch, heads_k) in the score scale.
  static constexpr bool kBlockDescale = Traits::kVColMajor;
  static_assert(!kTwoP || (!FLASHCUTE_SM90_INTERLEAVE_SPV && !FLASHCUTE_SM90_V_BEFORE_TURN),
                "one steady-state schedule at a time");
  // Narrow first blocks (FwdTraits::kNarrowFirst), kNarrowW keys wide. Not with the interleaved
  // S / P V issue, whose P V always takes every k-step.
  static constexpr bool kNarrowFirst = Traits::kNarrowFirst && kBlockN > 64 && !FLASHCUTE_SM90_INTERLEAVE_SPV;
  static constexpr int kNarrowW = 64;
  // The narrow block's P V over its k-steps only: not with two P buffers, where a P V of either
  // length in the first turn made ptxas serialise every wgmma (C7520); P's other k-steps are
  // zeroed there instead.
  static constexpr bool kNarrowPv = kNarrowFirst && !kTwoP && FLASHCUTE_SM90_NARROW_PV;

  // A narrow first block's GEMM-I (kNarrowFirst): m64nW on K's first W rows of each stage.
  using TiledMmaQKNarrow = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kNarrowW>, Int<kHeadDim>>>(),
      typename Traits::AtomLayout{}));
  // Whether block n is narrow for this warpgroup: its last row (rows see key prefixes that grow
  // with the row) sees no more than kNarrowW keys of it (never for a warpgroup wholly past the
  // sequence's end).
  CUTE_DEVICE static bool first_block_narrow(WindowMask const& mask, TileRange const& r, int wg_row_begin, int n) {
    if constexpr (!kNarrowFirst) {
      return false;
    } else {
      const int last_row = min(wg_row_begin + 64, r.row_end) - 1;
      return last_row >= wg_row_begin && mask.key_end(last_row + mask.diag_offset) - n * kBlockN <= kNarrowW;
    }
  }

  // ---------------------------------------------------------------- producer ------------------
  // Thread 0 alone runs load(): every TMA load. FP8: the transposing warps run transpose(),
  // copying each V block that lands into V^T (fwd_fp8.cuh) and handing it to the consumers
  // through pipe_vt.
  // Two roles on separate warps keep each one's registers to its own state (24 per thread).
  struct Producer {
    PipelineStateK state_k = cutlass::make_producer_start_state<PipelineK>();
    PipelineStateV state_v = cutlass::make_producer_start_state<PipelineV>();
    int q_loads = 0;  // kQAhead: the tiles loaded so far; tile j's Q goes to buffer j % 2
    // Before each tile: the readers are done with Q's buffer and the previous tile header. The
    // phase parity is the header's buffers_phase: every tile, loaded or not, flips q_empty (one
    // buffer) or hdr_empty (kHeaderBarrier) and o_free once; the first wait is on parity 1 of a
    // fresh barrier, which returns at once (as for a CUTLASS producer's start state).
    // kSplitQ: the header has its own barrier (hdr_empty, arrived as soon as it is read), and
    // Q's part w is waited for (q_empty[w]) just before it is refilled. kQAhead: hdr_empty too,
    // and Q's buffer j % 2 is waited for on its own parity (load_q), once per loaded tile.
    CUTE_DEVICE static uint32_t buffers_phase(SharedStorage& ss) { return load_volatile(ss.bar.tile.buffers_phase); }
    CUTE_DEVICE static void wait_buffers(SharedStorage& ss) {
      mbar_wait(Traits::kHeaderBarrier ? &ss.bar.hdr_empty : &ss.bar.q_empty[0], buffers_phase(ss));
    }
    // The tile header for t, once the readers are done with the previous one (and, unless
    // kHeaderBarrier, with Q). Published before Q is loaded: the consumers work out the tile
    // while Q is in flight.
    CUTE_DEVICE static void publish(SharedStorage& ss, int t) {
      wait_buffers(ss);
      ss.bar.tile.tile = t;
      mbar_arrive(&ss.bar.tile_full);
    }
    // kSplitQ, a tile without loads: the previous tile's phase of every q_empty[w] is still
    // waited for, so that the producer never falls two phases behind a barrier (a parity wait
    // cannot tell them apart), and before this tile's header is published: the consumers arrive
    // for a tile without loads as soon as they read its header, so waited for after it, both
    // phases could already be complete and the wait would never return (a hang found by the
    // protocol model, tests/test_protocol_model.py, before any device run).
    CUTE_DEVICE static void skip_q(SharedStorage& ss) {
      if constexpr (Traits::kSplitQ) {
        for (int w = 0; w < Traits::kQParts; ++w) mbar_wait(&ss.bar.q_empty[w], buffers_phase(ss));
      }
    }

    // FP8 transposing warps: after the last tile, an end marker in the next V stage (a full
    // phase with no bytes: the flag, then a plain arrive) tells them to stop.
    CUTE_DEVICE void end_v(SharedStorage& ss) const {
      const int s = state_v.index();
      mbar_wait(reinterpret_cast<uint64_t*>(&ss.bar.pipe_v.empty_barrier_[s]), state_v.phase());
      ss.bar.v_end[s] = 1;
      mbar_arrive(reinterpret_cast<uint64_t*>(&ss.bar.pipe_v.full_barrier_[s]));
    }

    // Loads one tile with keys to load (its header is published). claim_early() (kernels that
    // land V as V^T: 16-bit and FP8 V^T) is called once, about three key blocks before the
    // tile's last load (fwd_kernel.cuh; it does nothing unless FLASHCUTE_SM90_EARLY_CLAIM).
    template <class KP, class ClaimEarly>
    CUTE_DEVICE void load(KP const& kp, SharedStorage& ss, PipelineK& pipe_k, PipelineV& pipe_v,
                          TileCoord const& tc, SeqInfo const& seq, TileRange const& r,
                          ClaimEarly const& claim_early) {
      Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Traits::SmemLayoutK{});
      // Where the TMA puts V: V^T's buffer directly (16-bit, FP8 V^T), the landing buffer (FP8 V).
      auto sV = [&]() {
        if constexpr (Traits::kTransposeV) {
          return make_tensor(make_smem_ptr(ss.v_landing.data()), typename Traits::SmemLayoutV{});
        } else {
          return make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutVt{});
        }
      }();
      // Dense: coordinates (row, dim, head, batch). Varlen: the tensor maps span the packed
      // rows, batch index 0, and the sequence's first row is a coordinate offset. Rows past
      // the sequence are then another sequence's (or TMA zero fill): they are masked (keys) or
      // never stored (queries).
      const int bi = seq.varlen ? 0 : seq.b;
      const int hk = kp.sched.kv_head(tc.h);
      Tensor mQ = domain_offset(make_coord(int(seq.q_row0), _0{}),
                                kp.tma_q.get_tma_tensor(kp.shape_q)(_, _, tc.h, bi));
      Tensor mK = domain_offset(make_coord(int(seq.k_row0), _0{}),
                                kp.tma_k.get_tma_tensor(kp.shape_k)(_, _, hk, bi));
      // Q's parts (one, the whole tile, unless kSplitQ): (rows, d) boxes, part w of the tile
      // being query block m_block * kQParts + w of this height.
      constexpr int kQParts = Traits::kQParts, kQRows = Traits::kQPartRows;
      Tensor gQ = local_tile(mQ, Shape<Int<kQRows>, Int<kHeadDim>>{}, make_coord(_, _0{}));
      Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));
      // V blocks: (dv, N) tiles of V^T (16-bit, FP8 V^T) or (N, dv) tiles of V (FP8 V).
      auto gV = [&]() {
        if constexpr (Traits::kTransposeV) {
          Tensor mV = domain_offset(make_coord(int(seq.k_row0), _0{}),
                                    kp.tma_v.get_tma_tensor(kp.shape_vt)(_, _, hk, bi));
          return local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDimV>>{}, make_coord(_, _0{}));
        } else {
          Tensor mVt = domain_offset(make_coord(_0{}, int(seq.k_row0)),
                                     kp.tma_v.get_tma_tensor(kp.shape_vt)(_, _, hk, bi));
          return local_tile(mVt, Shape<Int<kHeadDimV>, Int<kBlockN>>{}, make_coord(_0{}, _));
        }
      }();
      auto load_q = [&](int w) {
        // kQAhead (one part): buffer b = q_loads % 2, refilled once the consumers released its
        // previous use, tile q_loads - 2 (the first wait of a fresh barrier, parity 1, returns).
        const int b = Traits::kQAhead ? (q_loads & 1) : w;
        Tensor sQ = make_tensor(make_smem_ptr(ss.q.data() + b * cosize_v<typename Traits::SmemLayoutQPart>),
                                typename Traits::SmemLayoutQPart{});
        auto [tQg, tQs] = tma_partition(kp.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                        group_modes<0, 2>(gQ));
        if constexpr (Traits::kSplitQ) mbar_wait(&ss.bar.q_empty[w], buffers_phase(ss));
        if constexpr (Traits::kQAhead) mbar_wait(&ss.bar.q_empty[b], ((q_loads >> 1) & 1) ^ 1);
        cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.bar.q_full[b], Traits::kQPartBytes);
        copy(kp.tma_q.with(ss.bar.q_full[b]), tQg(_, tc.m_block * kQParts + w), tQs);
      };
      auto tK = tma_partition(kp.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK),
                              group_modes<0, 2>(gK));  // (global (TMA, n), smem (TMA, stage))
      auto tV = tma_partition(kp.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV),
                              group_modes<0, 2>(gV));
      auto tKg = get<0>(tK);
      auto tKs = get<1>(tK);
      auto tVg = get<0>(tV);
      auto tVs = get<1>(tV);

      auto load_k = [&](int n) {
        pipe_k.producer_acquire(state_k);
        copy(kp.tma_k.with(*pipe_k.producer_get_barrier(state_k)), tKg(_, n), tKs(_, state_k.index()));
        ++state_k;
      };
      // 16-bit: V lands as V^T. FP8: V lands, then the transposing warps write V^T (Transposer).
      auto issue_v = [&](int n) {
        pipe_v.producer_acquire(state_v);
        copy(kp.tma_v.with(*pipe_v.producer_get_barrier(state_v)), tVg(_, n), tVs(_, state_v.index()));
        ++state_v;
      };

      // Q's parts, waiting for their warpgroups one by one (kSplitQ). The first K block goes
      // first then: its stage is free once both warpgroups consumed the previous tile's
      // next-to-last block, earlier than any Q part.
      auto load_q_parts = [&]() {
        CUTE_UNROLL
        for (int w = 0; w < kQParts; ++w) load_q(w);
      };
      if constexpr (!Traits::kSplitQ) load_q_parts();
      if constexpr (Traits::kTransposeV) {
        // K and V block by block: the transposing warps get each V as early as the rings allow.
        load_k(r.n_max - 1);
        if constexpr (Traits::kSplitQ) load_q_parts();
        // O staged in V's landing buffer: the previous tile's O store must have read it.
        if (Traits::kOAliasV) mbar_wait(&ss.bar.o_free, load_volatile(ss.bar.tile.buffers_phase));
        issue_v(r.n_max - 1);
#pragma unroll 1  // unrolled, the two tensor maps' addresses and coordinates outgrow 24 registers
        for (int n = r.n_max - 2; n >= r.n_min; --n) {
          load_k(n);
          issue_v(n);
        }
      } else {
        load_k(r.n_max - 1);
        if constexpr (Traits::kSplitQ) load_q_parts();
        // The loads left after the claim (K(n_min + 1), V(n_min + 2), ...) wait for stages the
        // consumers free over about two blocks: the atomic's round trip hides behind them.
        const int n_claim = r.n_max - r.n_min > 3 ? r.n_min + 2 : r.n_max;
        if (n_claim == r.n_max) claim_early();
        for (int n = r.n_max - 1; n > r.n_min; --n) {
          if (n == n_claim) claim_early();
          load_k(n - 1);
          issue_v(n);
        }
        issue_v(r.n_min);
      }
      if constexpr (Traits::kQAhead) ++q_loads;
    }
  };

  // FP8: the transposing producer warps copy each V block into V^T as it lands (fwd_fp8.cuh).
  struct Transposer {
    // Both rings have kStagesV stages and advance together, so one block index k serves both:
    // the consumer side of pipe_v (V as it lands) and, with the phase flipped, the producer side
    // of pipe_vt (a producer starts one phase ahead). In this 24-register role, with two V blocks
    // in flight per transposing warp, every loop-carried register counts (a PipelineState and a
    // counter spilled, run 56; a count and its bound spilled the bound, run 58; reading each
    // tile's block count from its header spilled the shared-memory base), so the loop carries k
    // alone and knows nothing of tiles: it ends at the stage where the producer put its end
    // marker (Producer::end_v) instead of a V block.
    CUTE_DEVICE void transpose(SharedStorage& ss, PipelineV& pipe_v, PipelineVt& pipe_vt) {
      constexpr uint32_t kS = Traits::kStagesV;
      static_assert((kS & (kS - 1)) == 0, "a power-of-two ring (k wraps at 2^32)");
      for (uint32_t k = 0;; ++k) {
        const int stage = int(k % kS);
        const uint32_t phase = (k / kS) & 1;
        const PipelineStateV state_vl(stage, phase, k), state_vt(stage, phase ^ 1, k);
        // pipe_v.consumer_wait, as a wait that orders the end marker's read after it.
        mbar_wait(reinterpret_cast<uint64_t*>(&ss.bar.pipe_v.full_barrier_[stage]), phase);
        if (load_volatile(ss.bar.v_end[stage])) break;
        pipe_vt.producer_acquire(state_vt);
        transpose_v_stage<Traits>(ss.v_landing.data(), ss.v.data(), stage,
                                  int(threadIdx.x) - 32 * Traits::kFirstTransposeWarp);
        cutlass::arch::fence_view_async_shared();  // V^T's generic-proxy stores -> WGMMA reads
        pipe_vt.producer_commit(state_vt);
        pipe_v.consumer_release(state_vl);
      }
    }
  };

  // ---------------------------------------------------------------- consumers ------------------
  using TiledMmaQK = typename Traits::TiledMmaQK;
  using TiledMmaPV = typename Traits::TiledMmaPV;

  struct Consumer {
    PipelineStateK state_k;
    PipelineStateV state_v;
    uint32_t q_phase = 0;  // q_full flips once per loaded tile
    int q_loads = 0;       // kQAhead: the tiles loaded so far; tile j's Q is in buffer j % 2
    int wg;   // which 64 rows of the tile (0 .. kNumMmaWG - 1)
    int tid;  // index among the consumer threads

    // The Q part this warpgroup reads (all of Q unless kSplitQ); kQAhead: the current tile's
    // buffer, whose q_full completes once per use (phase = use count % 2).
    CUTE_DEVICE int q_part() const { return Traits::kSplitQ ? wg : Traits::kQAhead ? (q_loads & 1) : 0; }
    CUTE_DEVICE uint64_t* q_empty(SharedStorage& ss) const { return &ss.bar.q_empty[q_part()]; }
    CUTE_DEVICE uint32_t q_full_phase() const { return Traits::kQAhead ? uint32_t(q_loads >> 1) & 1u : q_phase; }
    CUTE_DEVICE int q_offset() const { return Traits::kQAhead ? (q_loads & 1) * int(cosize_v<typename Traits::SmemLayoutQ>) : 0; }

    // Diagnostic trace (trace.cuh; compiled out unless FLASHCUTE_SM90_TRACE): the warpgroup's
    // first thread records the event; the count stays in a register.
#if FLASHCUTE_SM90_TRACE
    int trace_n = 0;
    CUTE_DEVICE void trace(int ev, int tile = -1) {
      if ((tid & 127) == 0) {
        trace_event_at(1 + wg, trace_n, ev, tile);
        if (ev == kTrEnd) trace_count(1 + wg, trace_n + 1);
      }
      ++trace_n;
    }
#else
    CUTE_DEVICE void trace(int, int = -1) const {}
#endif

    // The turn passes round the consumer warpgroups: 0, 1, (2,) 0, ...
    static constexpr int kWGs = Traits::kNumMmaWG;
    // (Two warpgroups: the ids as selects, the form the d=256 kernel fits its registers with;
    // computed ids cost it a 4-byte spill.)
    CUTE_DEVICE int sched_bar(int w) const {
      if constexpr (kWGs == 2) return w == 0 ? kBarSchedWG0 : kBarSchedWG0 + 1;
      else return kBarSchedWG0 + w;
    }
    CUTE_DEVICE void sched_wait() const {
      if constexpr (Traits::kPingPong) named_bar_sync(sched_bar(wg), 256);
    }
    CUTE_DEVICE void sched_signal() const {
      if constexpr (Traits::kPingPong) {
        if constexpr (kWGs == 2) named_bar_arrive(wg == 0 ? kBarSchedWG0 + 1 : kBarSchedWG0, 256);
        else named_bar_arrive(kBarSchedWG0 + (wg + 1 == kWGs ? 0 : wg + 1), 256);
      }
    }
    // WG 0 goes first: the last WG grants it the first turn once; WG 0 takes back the last grant.
    CUTE_DEVICE void sched_start() const {
      if constexpr (Traits::kPingPong) if (wg == kWGs - 1) named_bar_arrive(kBarSchedWG0, 256);
    }
    CUTE_DEVICE void sched_finish() const {
      if constexpr (Traits::kPingPong) if (wg == 0) named_bar_sync(kBarSchedWG0, 256);
    }

    // Runs the whole key loop of one tile with work (n_min < n_max). On return tOrO holds the
    // unnormalised O of this thread's rows and softmax the row statistics.
    // pipe_v: the V^T ring (PipelineV for 16-bit inputs, PipelineVt for FP8). qk_descale: FP8's
    // q_descale * k_descale (1 otherwise), folded into the score scale. after_first_s: called
    // once the tile's first S GEMM is issued, before tOrO is touched (Traits::kDeferEpilogue:
    // the previous tile's epilogue, which still reads O from tOrO).
    template <class PipelineVIn, class TensorO, class Softmax, class AfterFirstS>
    CUTE_DEVICE void mma(FwdParams const& p, SharedStorage& ss, PipelineK& pipe_k, PipelineVIn& pipe_v,
                         WindowMask const& mask, TileRange const& r, int m_block, float qk_descale,
                         BlockDescale& bd, TensorO& tOrO, Softmax& softmax, AfterFirstS&& after_first_s) {
      TiledMmaQK mma_qk;
      TiledMmaPV mma_pv;
      auto thr_qk = mma_qk.get_thread_slice(tid);
      // The smem operands' descriptors are the same for every thread of a warpgroup. Sliced by
      // the warpgroup (wg comes from the shuffled, warp-uniform warp index), ptxas keeps them in
      // uniform registers; sliced by tid it held Q's in vector registers and moved them over
      // (2 R2UR) before every S WGMMA.
      auto wg_qk = mma_qk.get_thread_slice(wg * 128);
      auto wg_pv = mma_pv.get_thread_slice(wg * 128);
      Tensor sQ = make_tensor(make_smem_ptr(ss.q.data() + q_offset()), typename Traits::SmemLayoutQ{});
      Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Traits::SmemLayoutK{});
      Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutVt{});
      Tensor tSrQ = wg_qk.partition_fragment_A(sQ);   // smem descriptors
      // Q's descriptors for the GEMM that reads K stage k_index. Where registers are short they
      // are re-derived per GEMM: otherwise ptxas keeps all of them (two registers per k-step)
      // in registers through the key loop, and at e4m3 d=256 with 128-key tiles one spilled.
      // min(k_index, 0) is 0, but ptxas cannot prove it, so the descriptors follow the K
      // stage's (uniform) arithmetic instead of being hoisted.
      auto q_desc = [&](int k_index) {
        if constexpr (Traits::kRederiveQDesc) {
          Tensor sQi = make_tensor(make_smem_ptr(ss.q.data() + q_offset() + min(k_index, 0)), typename Traits::SmemLayoutQ{});
          return wg_qk.partition_fragment_A(sQi);
        } else {
          return tSrQ;
        }
      };
      Tensor tSrK = wg_qk.partition_fragment_B(sK);   // (MMA, N, K, stages)
      Tensor tOrV = wg_pv.partition_fragment_B(sVt);  // (MMA, Dv, N, stages)
      Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
      // P as the A operand of P V: the accumulator's own layout regrouped (16-bit), or the FP8
      // k32 operand layout filled by pack_p_fp8.
      Tensor tOrP = [&]() {
        if constexpr (Traits::kFp8) {
          return make_tensor<Element>(partition_shape_A(mma_pv, Shape<Int<kBlockM>, Int<kBlockN>>{}));
        } else {
          return make_tensor<Element>(acc_as_operand_a(tSrS.layout()));
        }
      }();
      Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
      Tensor cRowCol = make_tensor(tScS.data(), acc_rowcol(tScS.layout()));  // (row, col) of each score
      Tensor sRowCol = make_tensor(tSrS.data(), acc_rowcol(tSrS.layout()));
      Tensor oRowCol = make_tensor(tOrO.data(), acc_rowcol(tOrO.layout()));

      const bool softcap = p.softcap > 0.f;
      const float scale_log2 = score_scale_log2(p, qk_descale);
      const float softcap_inv = p.softcap_inv * qk_descale;
      const int wg_row_begin = r.row_begin + wg * 64;
      constexpr int kRows = decltype(size<0>(sRowCol))::value;
      float corr[kRows];
      // Block-wise descales (the V^T kernels): each row's score scale times its q descale (with
      // softcap: the cap's 1 / softcap instead; its exponent scale is then softcap_log2). Rows past
      // the sequence's end read the last row's (their output is never stored).
      float c_row[kRows];
      if constexpr (kBlockDescale) {
        CUTE_UNROLL
        for (int i = 0; i < kRows; ++i)
          c_row[i] = (softcap ? softcap_inv : scale_log2) * bd.q_row(min(r.row_begin + int(get<0>(cRowCol(i, 0))), r.row_end - 1));
      }

      // Softcap, then the mask only on the blocks that need it, then the online softmax, on S's
      // fragment tS and its (row, col) views sRC, cRC (all of tSrS, or a narrow first block's).
      auto scores_to_p_on = [&](int n, auto& tS, auto&& sRC, auto const& cRC) {
        float sc[kRows];
        float k_n = 1.f, v_n = 1.f;
        if constexpr (kBlockDescale) {
          k_n = bd.k_next, v_n = bd.v_next;
          bd.fetch(max(n - 1, 0));  // the next block's (n descends), while this one's softmax runs
          CUTE_UNROLL
          for (int i = 0; i < kRows; ++i) sc[i] = c_row[i] * k_n;
          if (softcap) {
            CUTE_UNROLL
            for (int i = 0; i < kRows; ++i) {
              CUTE_UNROLL
              for (int c = 0; c < size<1>(sRC); ++c) sRC(i, c) = tanhf(sRC(i, c) * sc[i]);
              sc[i] = p.softcap_log2;
            }
          }
        } else if (softcap) {
          apply_softcap(tS, softcap_inv);
        }
        if (mask.template block_needs_mask<kBlockN>(n, wg_row_begin, wg_row_begin + 64)) {
          // The bit-mask form (R2P + FSEL), except at 16-bit d=128, where it spilled: the two P
          // buffers leave no registers for it.
          mask.template apply<!kTwoP>(sRC, cRC, r.row_begin, n * kBlockN);
        }
        if constexpr (kBlockDescale) {
          softmax.online_scaled(sRC, sc, __log2f(v_n), __frcp_rn(v_n), corr);
        } else {
          softmax.online(sRC, scale_log2, corr);
        }
      };
      auto scores_to_p = [&](int n) { scores_to_p_on(n, tSrS, sRowCol, cRowCol); };
      // P of S's fragment tS into dst (the first size(tS) elements of a P buffer: P's register
      // order follows S's, k-step by k-step).
      auto convert_into = [&](auto const& tS, auto&& dst) {
        if constexpr (Traits::kFp8) {
#ifndef FLASHCUTE_SM90_SOL_NOCONV  // speed-of-light ablation only: wrong results
          pack_p_fp8(tS, dst);
#endif
        } else {
          Tensor rP = convert_fragment<Element>(tS);
          CUTE_UNROLL
          for (int i = 0; i < size(rP); ++i) dst(i) = rP(i);
        }
      };
      auto convert_p_into = [&](auto& dst) { convert_into(tSrS, dst); };
      auto convert_p = [&]() { convert_p_into(tOrP); };
      // O += P V over the whole block, or over the narrow first block's k-steps (narrow).
      bool narrow = false;  // the tile's first block is narrow for this warpgroup (kNarrowFirst)
      auto issue_pv_of = [&](auto& pc, int stage, bool first) {
        if constexpr (kNarrowPv) {
          if (first && narrow) {
            wgmma_issue<true, kNarrowW / Traits::kMmaK>(mma_pv, pc, tOrV(_, _, _, stage), tOrO, true);
            return;
          }
        }
        wgmma_issue<true>(mma_pv, pc, tOrV(_, _, _, stage), tOrO, first);
      };
      auto release_q = [&]() {
        if constexpr (!Traits::kOAliasQ) cutlass::arch::ClusterBarrier::arrive(q_empty(ss));
      };

      cutlass::arch::ClusterTransactionBarrier::wait(&ss.bar.q_full[q_part()], q_full_phase());
      q_phase ^= 1;
      trace(kTrQ);

      // The key blocks at the top of the tile's range that no row of this warpgroup can see
      // (causal: a tile's first warpgroup ends up to kBlockM - 64 rows above the diagonal that
      // sets the tile's range) are skipped: their K and V stages are waited for and handed back
      // without GEMMs, and their ping-pong turns passed on, so both warpgroups take as many
      // turns as before. (d=64's 192-row tiles: causal 4k +5 %, run 89.) n_top is this
      // warpgroup's first block + 1, at least one block, so that rows without any visible key
      // still get O = 0 from a fully masked block.
      // (A warpgroup wholly past the sequence's end gets an empty row range: n_top = n_min + 1.)
      int lo, hi;
      mask.template key_block_range<kBlockN>(wg_row_begin, min(wg_row_begin + 64, r.row_end), lo, hi);
      const int n_top = max(r.n_min + 1, min(hi, r.n_max));
      if constexpr (kBlockDescale) bd.fetch(n_top - 1);  // the first block scores_to_p takes
      for (int n = r.n_max - 1; n >= n_top; --n) {
        pipe_k.consumer_wait(state_k);
        pipe_k.consumer_release(state_k);
        ++state_k;
        pipe_v.consumer_wait(state_v);
        pipe_v.consumer_release(state_v);
        ++state_v;
        sched_wait();
        sched_signal();
      }

      if constexpr (Traits::kIntraWGOverlap) {
        // Prologue: S(n_top-1) alone, kBlockN key columns wide or, where the warpgroup's rows see
        // no more than the block's first kNarrowW keys (kNarrowFirst), that wide: an m64nW GEMM
        // into registers of its own (tSw), the softmax on those columns, P's other k-steps zero or
        // not issued. Only the GEMM's issue and the softmax are in the width's branches, the
        // narrow one with its own accumulator: with the wait and the release inside them too, or
        // a narrow S in tSrS's registers, ptxas serialised every wgmma of the two-P kernel (C7520).
        TiledMmaQKNarrow mma_w;
        Tensor tSw = partition_fragment_C(mma_w, Shape<Int<kBlockM>, Int<kNarrowW>>{});
        narrow = first_block_narrow(mask, r, wg_row_begin, n_top - 1);
        pipe_k.consumer_wait(state_k);
        sched_wait();
        if (kNarrowFirst && narrow) {
          Tensor sKw = local_tile(sK, Shape<Int<kNarrowW>, Int<kHeadDim>, Int<Traits::kStages>>{}, make_coord(_0{}, _0{}, _0{}));
          Tensor tSrKw = mma_w.get_thread_slice(wg * 128).partition_fragment_B(sKw);
          wgmma_issue<false>(mma_w, q_desc(state_k.index()), tSrKw(_, _, _, state_k.index()), tSw, true);
        } else {
          wgmma_issue<false>(mma_qk, q_desc(state_k.index()), tSrK(_, _, _, state_k.index()), tSrS, true);
        }
        sched_signal();
        trace(kTrS0);
        after_first_s();  // runs while S(n_top-1) is on the tensor cores
        warpgroup_wait<0>();
        pipe_k.consumer_release(state_k);
        ++state_k;
        if (kNarrowFirst && narrow) {
          warpgroup_fence_operand(tSw);
          Tensor tScSw = mma_w.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kNarrowW>>{}));
          scores_to_p_on(n_top - 1, tSw, make_tensor(tSw.data(), acc_rowcol(tSw.layout())),
                         make_tensor(tScSw.data(), acc_rowcol(tScSw.layout())));
          convert_into(tSw, make_tensor(tOrP.data(), make_layout(size(tSw))));
          if constexpr (!kNarrowPv) {
            CUTE_UNROLL
            for (int i = size(tSw); i < size(tOrP); ++i) tOrP(i) = Element(0);
          }
        } else {
          warpgroup_fence_operand(tSrS);
          scores_to_p(n_top - 1);
          convert_p();
        }
        trace(kTrP0);
        bool first_pv = true;
        if constexpr (kTwoP) {
          // P in two register buffers, alternated per key block. step(n, pc, pn): pc holds
          // P(n+1); the softmax of S(n) writes P(n) into pn, whose last reader, P(n+2) V, is the
          // GEMM issued one turn before, so nothing here waits for P(n+1) V: O's rescale and
          // V(n+2)'s release wait in the next turn, after S(n-1) is issued.
          Tensor tOrP2 = make_tensor<Element>(tOrP.layout());  // the same register order as tOrP
          PipelineStateV v_busy = state_v;  // V's stage under the P V in flight (once !first_pv)
          // The P V issued one turn ago is done: release its V, rescale O for the last softmax.
          auto retire_pv = [&]() {
            warpgroup_fence_operand(tOrO);
            if (!first_pv) {
              pipe_v.consumer_release(v_busy);
              softmax.rescale(oRowCol, corr);
            }
          };
          auto issue_pv = [&](auto& pc) {
            pipe_v.consumer_wait(state_v);
            issue_pv_of(pc, state_v.index(), first_pv);
            first_pv = false;
            v_busy = state_v;
            ++state_v;
          };
          auto step = [&](int n, auto& pc, auto& pn) {
            pipe_k.consumer_wait(state_k);
            sched_wait();
            trace(kTrIter, n);
            wgmma_issue<false>(mma_qk, q_desc(state_k.index()), tSrK(_, _, _, state_k.index()), tSrS, true);
            warpgroup_wait<1>();  // the older P V done; S(n) runs on
            retire_pv();
            issue_pv(pc);
            sched_signal();
            warpgroup_wait<1>();  // S(n) done; P(n+1) V still running
            warpgroup_fence_operand(tSrS);
            pipe_k.consumer_release(state_k);
            ++state_k;
            scores_to_p(n);
            convert_p_into(pn);
          };
          // The last P V: the previous one is waited for before the turn (no S to issue first).
          auto finish = [&](auto& pc) {
            release_q();
            warpgroup_wait<0>();
            retire_pv();
            sched_wait();
            issue_pv(pc);
            sched_signal();
            trace(kTrLastPV);
            warpgroup_wait<0>();
            warpgroup_fence_operand(tOrO);
            pipe_v.consumer_release(v_busy);
            trace(kTrLastPVDone);
          };
          // Unrolled by two so that each buffer stays in fixed registers.
          for (int n = n_top - 2;; n -= 2) {
            if (n < r.n_min) { finish(tOrP); break; }
            step(n, tOrP, tOrP2);
            if (n - 1 < r.n_min) { finish(tOrP2); break; }
            step(n - 1, tOrP2, tOrP);
          }
        } else {
          // Steady state: S(n) and O += P(n+1) V(n+1) in flight together.
          for (int n = n_top - 2; n >= r.n_min; --n) {
            pipe_k.consumer_wait(state_k);
            if constexpr (FLASHCUTE_SM90_V_BEFORE_TURN) pipe_v.consumer_wait(state_v);
            sched_wait();
            trace(kTrIter, n);
            if constexpr (FLASHCUTE_SM90_INTERLEAVE_SPV) {
              if constexpr (!FLASHCUTE_SM90_V_BEFORE_TURN) pipe_v.consumer_wait(state_v);
              wgmma_issue_pair(mma_qk, q_desc(state_k.index()), tSrK(_, _, _, state_k.index()), tSrS, true,
                               mma_pv, tOrP, tOrV(_, _, _, state_v.index()), tOrO, first_pv);
              first_pv = false;
              sched_signal();
              warpgroup_wait<0>();  // S(n) and P V both done
            } else {
              wgmma_issue<false>(mma_qk, q_desc(state_k.index()), tSrK(_, _, _, state_k.index()), tSrS, true);
              FC_TRACE_LOOP(trace(kTrQKIssued));
              if constexpr (!FLASHCUTE_SM90_V_BEFORE_TURN) pipe_v.consumer_wait(state_v);
              FC_TRACE_LOOP(trace(kTrVReady));
              issue_pv_of(tOrP, state_v.index(), first_pv);
              first_pv = false;
              FC_TRACE_LOOP(trace(kTrPVIssued));
              sched_signal();
              warpgroup_wait<1>();  // S(n) done; P V still running
            }
            warpgroup_fence_operand(tSrS);
            FC_TRACE_LOOP(trace(kTrSDone));
            pipe_k.consumer_release(state_k);
            ++state_k;
            scores_to_p(n);
            // P V done: O may be rescaled and P overwritten. Kept after the softmax's exponentials
            // (their row sums), which run while P V is still on the tensor cores.
            if constexpr (kPinPVWait) {
              warpgroup_wait_after<0>(softmax.sum_dependency());
            } else {
              warpgroup_wait<0>();
            }
            warpgroup_fence_operand(tOrO);
            warpgroup_fence_operand(tOrP);
            FC_TRACE_LOOP(trace(kTrPVDone));
            pipe_v.consumer_release(state_v);
            ++state_v;
            softmax.rescale(oRowCol, corr);
            convert_p();
            FC_TRACE_LOOP(trace(kTrPReady));
          }
          release_q();
          // Epilogue: the last O += P V alone.
          pipe_v.consumer_wait(state_v);
          sched_wait();
          issue_pv_of(tOrP, state_v.index(), first_pv);
          sched_signal();
          trace(kTrLastPV);
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrO);
          pipe_v.consumer_release(state_v);
          ++state_v;
          trace(kTrLastPVDone);
        }
      } else {
        // Plain schedule: S, softmax, P V, one block at a time (the ablation baseline).
        after_first_s();  // (nothing is deferred in this schedule: Traits::kDeferEpilogue)
        bool first_pv = true;
        for (int n = n_top - 1; n >= r.n_min; --n) {
          pipe_k.consumer_wait(state_k);
          sched_wait();
          wgmma_issue<false>(mma_qk, q_desc(state_k.index()), tSrK(_, _, _, state_k.index()), tSrS, true);
          warpgroup_wait<0>();
          warpgroup_fence_operand(tSrS);
          pipe_k.consumer_release(state_k);
          ++state_k;
          scores_to_p(n);
          if (!first_pv) softmax.rescale(oRowCol, corr);
          convert_p();
          pipe_v.consumer_wait(state_v);
          wgmma_issue<true>(mma_pv, tOrP, tOrV(_, _, _, state_v.index()), tOrO, first_pv);
          sched_signal();
          first_pv = false;
          warpgroup_wait<0>();
          warpgroup_fence_operand(tOrO);
          pipe_v.consumer_release(state_v);
          ++state_v;
        }
        release_q();
      }
      if constexpr (Traits::kQAhead) ++q_loads;  // after release_q, which hands back this tile's buffer
    }
  };
};

}  // namespace flashcute::sm90
