// The consumer warpgroups' tile loop with the ends of consecutive tiles overlapped (A/B switch
// FLASHCUTE_SM90_TILE_OVERLAP; FwdTraits::kTileOverlap says where it applies).
//
// Why: per tile, Consumer::mma runs its first S GEMM alone (the prologue: nothing else of this
// warpgroup is on the tensor cores until its softmax is done), and its last O += P V alone,
// followed by the epilogue. Run 34's ncu put 12 % of the causal d=128 4k stall samples in that
// per-tile code (6 % non-causal), run 84's trace 1.3-2.2 blocks of time per tile.
// Here a tile's first S GEMM goes out in the same ping-pong turn as the previous tile's last
// P V, and the previous tile's epilogue runs while that S is on the tensor cores:
//
//   turn:   O += P(prev, last) V   then   S(t, first) = Q(t) K^T      (one turn, like the
//           steady state's S(n) + P(n+1) V(n+1))
//   wait P V; epilogue of prev (O normalised, stored, LSE); wait S; softmax of S(t, first);
//   then t's steady state exactly as Consumer::mma's default schedule.
//
// Needs Q(t) in shared memory before prev's last turn, i.e. while prev still reads its own Q:
// two Q buffers and two tile-header slots (fwd_traits.cuh), header slot = the tile's place in
// this CTA's sequence mod 2, Q buffer = its slot. The producer publishes tile t into its slot
// once the consumers released the slot's tile before (mbarrier q_empty[slot], after that tile's
// last S GEMM), and loads t's Q there; it gets there when it has issued the previous tile's
// last loads, about two key blocks before the consumers reach the boundary.
//
// Ping-pong stays aligned: both warpgroups walk the same tiles, and each boundary takes one
// turn where Consumer::mma took two (its prologue and its last P V); a tile without keys, and
// the end, finish the pending tile with its last P V in a turn of its own.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include "common/mask.cuh"
#include "common/params.h"
#include "common/seqlen.cuh"
#include "sm90/fwd_epilogue.cuh"
#include "sm90/fwd_fp8.cuh"
#include "sm90/fwd_mainloop.cuh"
#include "sm90/fwd_softmax.cuh"
#include "sm90/fwd_traits.cuh"
#include "sm90/tile_scheduler.cuh"
#include "sm90/trace.cuh"

namespace flashcute::sm90 {

using namespace cute;

// c: this warpgroup's Consumer (its pipeline states, ping-pong turn and trace); tOrO: its O
// accumulator. pipe_v: the V^T ring (PipelineV for 16-bit inputs, PipelineVt for FP8).
template <class Traits, class KP, class PipelineVIn, class Consumer, class TensorO>
CUTE_DEVICE void consume_tiles_overlapped(KP const& kp, typename Traits::SharedStorage& ss,
                                          typename Traits::PipelineK& pipe_k, PipelineVIn& pipe_v,
                                          Consumer& c, Epilogue<Traits> const& epilogue, TensorO& tOrO) {
  static_assert(Traits::kTileOverlap && Traits::kIntraWGOverlap);
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  constexpr bool kPinPVWait = Mainloop<Traits>::kPinPVWait;
  FwdParams const& p = kp.p;
  StaticTileScheduler const& sched = kp.sched;

  typename Traits::TiledMmaQK mma_qk;
  typename Traits::TiledMmaPV mma_pv;
  const int wg = c.wg;
  auto thr_qk = mma_qk.get_thread_slice(c.tid);
  // Descriptors sliced by warpgroup, as in Consumer::mma (which says why).
  auto wg_qk = mma_qk.get_thread_slice(wg * 128);
  auto wg_pv = mma_pv.get_thread_slice(wg * 128);
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename Traits::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename Traits::SmemLayoutVt{});
  Tensor tSrK = wg_qk.partition_fragment_B(sK);   // (MMA, N, K, stages)
  Tensor tOrV = wg_pv.partition_fragment_B(sVt);  // (MMA, Dv, N, stages)
  Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<kBlockM>, Int<kBlockN>>{});
  Tensor tOrP = [&]() {
    if constexpr (Traits::kFp8) {
      return make_tensor<Element>(partition_shape_A(mma_pv, Shape<Int<kBlockM>, Int<kBlockN>>{}));
    } else {
      return make_tensor<Element>(acc_as_operand_a(tSrS.layout()));
    }
  }();
  Tensor tScS = thr_qk.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
  Tensor cRowCol = make_tensor(tScS.data(), acc_rowcol(tScS.layout()));
  Tensor sRowCol = make_tensor(tSrS.data(), acc_rowcol(tSrS.layout()));
  Tensor oRowCol = make_tensor(tOrO.data(), acc_rowcol(tOrO.layout()));
  constexpr int kRows = decltype(size<0>(sRowCol))::value;
  using Softmax = Sm90OnlineSoftmax<decltype(size<0>(acc_rowcol(tOrO.layout())))::value, Traits::kFp8 ? 8 : 0>;
  Softmax softmax;
  float corr[kRows];

  uint32_t seq_i = 0;     // this CTA's tiles so far (header slot = seq_i & 1)
  uint32_t q_phases = 0;  // bit s: the parity of q_full[s]'s next phase
  int prev = -1;          // the tile whose last P V and epilogue are pending; -1: none
  bool first_pv = true;   // the next P V is its tile's first (zero-initialises O)

  auto convert_p = [&]() {
    if constexpr (Traits::kFp8) {
      pack_p_fp8(tSrS, tOrP);
    } else {
      Tensor rP = convert_fragment<Element>(tSrS);
      CUTE_UNROLL
      for (int i = 0; i < size(rP); ++i) tOrP(i) = rP(i);
    }
  };
  auto issue_pv = [&]() {
    wgmma_issue<true>(mma_pv, tOrP, tOrV(_, _, _, c.state_v.index()), tOrO, first_pv);
    first_pv = false;
  };
  auto retire_pv = [&]() {  // after the wait for the last P V issued
    warpgroup_fence_operand(tOrO);
    pipe_v.consumer_release(c.state_v);
    ++c.state_v;
  };
  // prev's epilogue, then a fresh softmax for the next tile.
  auto store_prev = [&]() {
    const TileCoord pc = sched.tile(prev);
    const SeqInfo pseq(p, pc.b);
    Descale pds;
    if constexpr (Traits::kFp8) pds = Descale(p, pc.b, pc.h / p.head_group);
    epilogue.store(kp, ss, pseq, pc.h, pc.m_block, tOrO, softmax, score_scale_log2(p, pds.qk), pds.v);
    c.trace(kTrEpilogue, prev);
    softmax = Softmax{};
    prev = -1;
  };
  // No next tile to pair prev's last P V with (a tile without keys, or the end): a turn alone.
  auto finish_prev = [&]() {
    pipe_v.consumer_wait(c.state_v);
    c.sched_wait();
    issue_pv();
    c.sched_signal();
    c.trace(kTrLastPV);
    warpgroup_wait<0>();
    retire_pv();
    store_prev();
  };

  for (;;) {
    const int slot = int(seq_i & 1);
    mbar_wait(&ss.bar.tile_full[slot], (seq_i >> 1) & 1);
    ++seq_i;
    const int t = load_volatile(Traits::header_tile(ss, slot));
    c.trace(kTrTileHeader, t);
    if (t >= sched.total_tiles) break;
    const TileCoord tc = sched.tile(t);
    const SeqInfo seq(p, tc.b);
    const WindowMask mask(p, seq);
    const TileRange r = tile_range<kBlockM, kBlockN>(mask, seq, tc.m_block);
    if (!r.active || r.n_min >= r.n_max) {  // nothing loaded: hand the slot back
      if (prev >= 0) finish_prev();
      cutlass::arch::ClusterBarrier::arrive(&ss.bar.q_empty[slot]);
      if (r.active) epilogue.store_empty(p, seq, tc.h, tc.m_block);
      continue;
    }

    float qk_descale = 1.f;
    if constexpr (Traits::kFp8) qk_descale = Descale(p, tc.b, tc.h / p.head_group).qk;
    const bool softcap = p.softcap > 0.f;
    const float scale_log2 = score_scale_log2(p, qk_descale);
    const float softcap_inv = p.softcap_inv * qk_descale;
    const int wg_row_begin = r.row_begin + wg * 64;
    Tensor sQ = make_tensor(make_smem_ptr(Traits::q_buffer(ss, slot)), typename Traits::SmemLayoutQ{});
    Tensor tSrQ = wg_qk.partition_fragment_A(sQ);  // this slot's descriptors
    auto scores_to_p = [&](int n) {  // as Consumer::mma's
      if (softcap) apply_softcap(tSrS, softcap_inv);
      if (mask.template block_needs_mask<kBlockN>(n, wg_row_begin, wg_row_begin + 64)) {
        mask.apply(sRowCol, cRowCol, r.row_begin, n * kBlockN);
      }
      softmax.online(sRowCol, scale_log2, corr);
    };

    cutlass::arch::ClusterTransactionBarrier::wait(&ss.bar.q_full[slot], (q_phases >> slot) & 1);
    q_phases ^= 1u << slot;
    c.trace(kTrQ);

    // The boundary turn: prev's last P V, then t's first S; prev's epilogue runs under that S.
    // (Two issue sites rather than a conditional P V: ptxas serialises every WGMMA of the
    // kernel (C7514) when a GEMM's issue and the reads of its accumulator sit under separate
    // tests of the same condition.)
    pipe_k.consumer_wait(c.state_k);
    if (prev >= 0) {
      pipe_v.consumer_wait(c.state_v);
      c.sched_wait();
      issue_pv();
      wgmma_issue<false>(mma_qk, tSrQ, tSrK(_, _, _, c.state_k.index()), tSrS, true);
      c.sched_signal();
      c.trace(kTrS0);
      warpgroup_wait<1>();  // prev's P V done; S(t, first) runs on
      retire_pv();
      store_prev();
    } else {
      c.sched_wait();
      wgmma_issue<false>(mma_qk, tSrQ, tSrK(_, _, _, c.state_k.index()), tSrS, true);
      c.sched_signal();
      c.trace(kTrS0);
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
    pipe_k.consumer_release(c.state_k);
    ++c.state_k;
    scores_to_p(r.n_max - 1);
    convert_p();
    c.trace(kTrP0);
    first_pv = true;

    // Steady state: S(n) and O += P(n+1) V(n+1) in flight together (Consumer::mma's default).
    for (int n = r.n_max - 2; n >= r.n_min; --n) {
      pipe_k.consumer_wait(c.state_k);
      c.sched_wait();
      c.trace(kTrIter, n);
      wgmma_issue<false>(mma_qk, tSrQ, tSrK(_, _, _, c.state_k.index()), tSrS, true);
      pipe_v.consumer_wait(c.state_v);
      issue_pv();
      c.sched_signal();
      warpgroup_wait<1>();  // S(n) done; P V still running
      warpgroup_fence_operand(tSrS);
      pipe_k.consumer_release(c.state_k);
      ++c.state_k;
      scores_to_p(n);
      if constexpr (kPinPVWait) {
        warpgroup_wait_after<0>(softmax.sum_dependency());
      } else {
        warpgroup_wait<0>();
      }
      warpgroup_fence_operand(tOrP);
      retire_pv();
      softmax.rescale(oRowCol, corr);
      convert_p();
    }
    // t's last S is done: its Q buffer and header slot go back to the producer.
    cutlass::arch::ClusterBarrier::arrive(&ss.bar.q_empty[slot]);
    prev = t;
  }
  // (Two call sites of finish_prev: merging the end into the branch above made d=64's
  // consumers spill 4-8 bytes.)
  if (prev >= 0) finish_prev();
}

}  // namespace flashcute::sm90
