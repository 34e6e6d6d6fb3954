// The sm90 forward kernel: a persistent, warp-specialised CTA that wires the roles together.
//   warpgroup 0: producer. Drops to 24 registers; thread 0 walks (or, dynamic, claims) the tiles
//   and issues TMA loads. FP8: its last 2 warps (3 at dv = 256) transpose each V block behind
//   thread 0's loads until its end marker (not with a V^T input, kVColMajor: that lands where
//   the GEMM reads it).
//   warpgroups 1, 2: consumers. Raise to 240 registers; per tile run the mainloop (GEMMs +
//   softmax) and the epilogue for their 64 rows.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include "common/mask.cuh"
#include "common/params.h"
#include "common/seqlen.cuh"
#include "sm90/fwd_epilogue.cuh"
#include "sm90/fwd_mainloop.cuh"
#include "sm90/fwd_traits.cuh"
#include "sm90/tile_scheduler.cuh"
#include "sm90/trace.cuh"

namespace flashcute::sm90 {

using namespace cute;

using Shape4 = cute::Shape<int32_t, int32_t, int32_t, int32_t>;

// Kernel arguments (a __grid_constant__ so the TMA descriptors stay in parameter space).
template <class TmaQ, class TmaK, class TmaV, class TmaO>
struct KernelParams {
  FwdParams p;
  TmaQ tma_q;
  TmaK tma_k;
  TmaV tma_v;
  TmaO tma_o;
  Shape4 shape_q, shape_k, shape_vt, shape_o;  // the shapes the tensor maps were built over
  StaticTileScheduler sched;
};

template <class Traits, class KP>
__global__ void __launch_bounds__(Traits::kNumThreads, 1) fwd_kernel(CUTE_GRID_CONSTANT KP const kp) {
  using PipelineK = typename Traits::PipelineK;
  using PipelineV = typename Traits::PipelineV;
  using SharedStorage = typename Traits::SharedStorage;
  using ML = Mainloop<Traits>;
  extern __shared__ __align__(1024) char smem_raw[];
  SharedStorage& ss = *reinterpret_cast<SharedStorage*>(smem_raw);
  FwdParams const& p = kp.p;

  const int warp_idx = cutlass::canonical_warp_idx_sync();
  const int warpgroup = warp_idx / 4;

  if (warp_idx == 0 && cute::elect_one_sync()) {
    cute::prefetch_tma_descriptor(kp.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_v.get_tma_descriptor());
    cute::prefetch_tma_descriptor(kp.tma_o.get_tma_descriptor());
    for (int w = 0; w < Traits::kQParts * Traits::kQSlots; ++w) {
      cutlass::arch::ClusterTransactionBarrier::init(&ss.bar.q_full[w], 1);
      cutlass::arch::ClusterBarrier::init(&ss.bar.q_empty[w], Traits::kNumMmaThreads / Traits::kQParts);
    }
    if constexpr (Traits::kHeaderBarrier) cutlass::arch::ClusterBarrier::init(&ss.bar.hdr_empty, Traits::kNumMmaThreads);
    cutlass::arch::ClusterBarrier::init(&ss.bar.tile_full, 1);
    cutlass::arch::ClusterBarrier::init(&ss.bar.o_free, Traits::kNumMmaThreads);
    ss.bar.tile.counter = kp.sched.counter;
    for (int i = 0; i < Traits::kStagesV; ++i) ss.bar.v_end[i] = 0;
  }
  using PipelineVt = typename Traits::PipelineVt;
  typename PipelineK::Params pk_params;
  typename PipelineV::Params pv_params;
  pk_params.role = warpgroup == 0 ? PipelineK::ThreadCategory::Producer : PipelineK::ThreadCategory::Consumer;
  pk_params.is_leader = pv_params.is_leader = threadIdx.x == 0;  // the elected lane of warp 0
  pk_params.num_consumers = Traits::kNumMmaThreads;
  pk_params.transaction_bytes = Traits::kKStageBytes;
  pv_params.transaction_bytes = Traits::kVStageBytes;
  if constexpr (Traits::kTransposeV) {
    // V's TMA ring is read by the transposing producer warps; V^T goes to the consumers
    // through pipe_vt, every transposing thread arriving once it has written its part.
    pv_params.role = warpgroup == 0 ? PipelineV::ThreadCategory::ProducerConsumer
                                    : PipelineV::ThreadCategory::NonParticipant;
    pv_params.num_consumers = Traits::kTransposeThreads;
  } else {
    pv_params.role = warpgroup == 0 ? PipelineV::ThreadCategory::Producer : PipelineV::ThreadCategory::Consumer;
    pv_params.num_consumers = Traits::kNumMmaThreads;
  }
  typename PipelineVt::Params pvt_params;
  pvt_params.role = warpgroup == 0 ? PipelineVt::ThreadCategory::Producer : PipelineVt::ThreadCategory::Consumer;
  pvt_params.producer_arv_count = Traits::kTransposeThreads;
  pvt_params.consumer_arv_count = Traits::kNumMmaThreads;
  PipelineK pipe_k(ss.bar.pipe_k, pk_params, Shape<_1, _1, _1>{});
  PipelineV pipe_v(ss.bar.pipe_v, pv_params, Shape<_1, _1, _1>{});
  PipelineVt pipe_vt(ss.bar.pipe_vt, pvt_params, cute::true_type{});
  cutlass::arch::fence_barrier_init();
  FC_TRACE_INIT();
  __syncthreads();  // barrier inits visible to every role before anyone waits on them

  StaticTileScheduler const& sched = kp.sched;

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
    if (threadIdx.x == 0) {  // one thread claims the tiles and issues every TMA load
      typename ML::Producer producer;
      const bool dynamic = sched.counter != nullptr;
      // Every tile, static or claimed, goes to the consumers in the tile header (the end too).
      // A claim is made once the tile's loads are issued: the atomic's round trip then overlaps
      // the consumers' last blocks, which the producer waits for anyway before it reuses Q's
      // buffer, and the claim comes as late as it can (a claim a tile ahead takes heavy tiles
      // early: simulated, 84-94 % balance instead of 99.6-99.9 %). Claiming ~3 key blocks before
      // the tile's last load instead (A/B switch FLASHCUTE_SM90_EARLY_CLAIM; not in the
      // transposing FP8 load) measured no gain in run 94, when the coordinate work after the
      // claim (divisions, since made multiply-shift: runs 96-101) was the longer part of the gap;
      // to be measured again.
      TileHeader& h = ss.bar.tile;
      int early = -1;  // the next tile, claimed early (-1: not claimed yet)
      const auto claim_early = [&]() {
        if constexpr (bool(FLASHCUTE_SM90_EARLY_CLAIM)) {
          if (dynamic) early = claim_tile(h);
        }
      };
      h.next = sched.first();
      h.buffers_phase = 1;
      FC_TRACE_PRODUCER(kTrStart, -1);
      for (;;) {
        const int t = load_volatile(h.next);
        if (t < sched.total_tiles) {
          const TileCoord tc = sched.tile(t);
          const SeqInfo seq(p, tc.b);
          const WindowMask mask(p, seq);
          const TileRange r = tile_range<Traits::kBlockM, Traits::kBlockN>(mask, seq, tc.m_block);
          // Tiles without keys to load: the consumers store zeros or skip them.
          if constexpr (Traits::kSplitQ) {
            if (!(r.active && r.n_min < r.n_max)) producer.skip_q(ss);  // before the header: see skip_q
          }
          producer.publish(ss, t);
          FC_TRACE_PRODUCER(kTrPublish, t);
          if (r.active && r.n_min < r.n_max) producer.load(kp, ss, pipe_k, pipe_v, tc, seq, r, claim_early);
          FC_TRACE_PRODUCER(kTrLoads, t);
        } else {
          producer.publish(ss, t);  // the end
        }
        h.buffers_phase = load_volatile(h.buffers_phase) ^ 1;
        const int done = load_volatile(h.tile);
        if (done >= sched.total_tiles) break;
        h.next = early >= 0 ? early : dynamic ? claim_tile(h) : sched.next(done);
        early = -1;
        FC_TRACE_PRODUCER(kTrClaim, load_volatile(h.next));
      }
      FC_TRACE_PRODUCER(kTrEnd, -1);
      if (dynamic) finish_claims(sched.counter);
      if constexpr (Traits::kTransposeV) producer.end_v(ss);
    } else if constexpr (Traits::kTransposeV) {
      if (warp_idx < Traits::kFirstTransposeWarp) return;
      typename ML::Transposer transposer;
      transposer.transpose(ss, pipe_v, pipe_vt);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
    typename ML::Consumer consumer;
    consumer.wg = warpgroup - 1;
    consumer.tid = threadIdx.x - 128;
    Epilogue<Traits> epilogue{consumer.wg, consumer.tid};
    typename Traits::TiledMmaPV mma_pv;
    Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<Traits::kBlockM>, Int<Traits::kHeadDimV>>{});
    consumer.sched_start();
    consumer.trace(kTrStart);
    using Softmax = Sm90OnlineSoftmax<decltype(size<0>(acc_rowcol(tOrO.layout())))::value, Traits::kFp8 ? 8 : 0>;
#if FLASHCUTE_SM90_TRACE >= 2
    const auto epi_trace = [&](int ev) { consumer.trace(ev); };
#else
    const NoTrace epi_trace{};
#endif
    // kDeferEpilogue: the last tile whose O (converted, in rO_pending) is not yet stored (-1:
    // none). Its memory part runs once the next tile's first S GEMM is issued, or before a tile
    // without keys, or at the end; its register part (which writes the accumulator) right after
    // the tile.
    int pending = -1;
    typename Epilogue<Traits>::template FragmentO<decltype(tOrO)> rO_pending;
    const auto store_pending = [&]() {
      if constexpr (Traits::kDeferEpilogue) {
        if (pending >= 0) {
          const TileCoord tc = sched.tile(pending);
          epilogue.store_o(kp, ss, SeqInfo(p, tc.b), tc.h, tc.m_block, rO_pending, epi_trace);
          consumer.trace(kTrEpilogue, pending);
          pending = -1;
        }
      }
    };
    uint32_t header_phase = 0;  // tile_full's parity for the next tile header
    for (;;) {
      mbar_wait(&ss.bar.tile_full, header_phase);
      header_phase ^= 1;
      const int t = load_volatile(ss.bar.tile.tile);
      if constexpr (Traits::kHeaderBarrier) mbar_arrive(&ss.bar.hdr_empty);  // the producer may publish the next
      consumer.trace(kTrTileHeader, t);
      if (t >= sched.total_tiles) {
        store_pending();
        break;
      }
      const TileCoord tc = sched.tile(t);
      const SeqInfo seq(p, tc.b);
      const WindowMask mask(p, seq);
      const TileRange r = tile_range<Traits::kBlockM, Traits::kBlockN>(mask, seq, tc.m_block);
      if (!r.active || r.n_min >= r.n_max) {  // nothing loaded: hand Q's (and O's) buffer back
        store_pending();
        // (kQAhead: a tile without loads takes no Q buffer, so it has nothing to hand back)
        if constexpr (!Traits::kQAhead) cutlass::arch::ClusterBarrier::arrive(consumer.q_empty(ss));
        if constexpr (Traits::kOAliasV) cutlass::arch::ClusterBarrier::arrive(&ss.bar.o_free);
        if (r.active) epilogue.store_empty(p, seq, tc.h, tc.m_block);
        continue;
      }
      Softmax softmax;
      Descale ds;
      BlockDescale bd;
      if constexpr (Traits::kVColMajor) bd = BlockDescale(p, tc.b, tc.h, sched.kv_head(tc.h));
      else if constexpr (Traits::kFp8) ds = Descale(p, tc.b, sched.kv_head(tc.h));
      if constexpr (Traits::kTransposeV) {
        consumer.mma(p, ss, pipe_k, pipe_vt, mask, r, tc.m_block, ds.qk, bd, tOrO, softmax, store_pending);
      } else {
        consumer.mma(p, ss, pipe_k, pipe_v, mask, r, tc.m_block, ds.qk, bd, tOrO, softmax, store_pending);
      }
      // Block-wise descales keep the row max in log2 units with every scale applied (online_scaled).
      const float lse_scale = Traits::kVColMajor ? 1.f : score_scale_log2(p, ds.qk);
      if constexpr (Traits::kDeferEpilogue) {
        epilogue.finish_o(p, seq, tc.h, tc.m_block, tOrO, softmax, lse_scale, ds.v, rO_pending);
        pending = t;
      } else {
        epilogue.store(kp, ss, seq, tc.h, tc.m_block, tOrO, softmax, lse_scale, ds.v, epi_trace);
        consumer.trace(kTrEpilogue, t);
      }
    }
    consumer.trace(kTrEnd);
    consumer.sched_finish();
    epilogue.finish();
  }
}

}  // namespace flashcute::sm90
