// Epilogue collective of the sm90 forward kernel: normalised O through shared memory (stmatrix)
// and out by TMA store, or by predicated 16-byte stores for varlen (a TMA box would spill past
// the sequence into the next one); LSE straight from registers.
//
// Each consumer warpgroup stores its own 64 rows, so under ping-pong neither waits for the other.
// Protocol per warpgroup and tile: the WG's leader waits until its previous TMA store has read
// O's smem (cp.async.bulk.wait_group.read 0); barrier kBarEpiWG; all write O (stmatrix); fence
// the generic->async proxy; barrier kBarEpiWG; the leader issues the TMA store and commits.
// When O aliases Q's buffer, the WG arrives on q_empty only after that store has read it (on
// o_free when O is staged in FP8's V landing buffer).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include "common/params.h"
#include "common/seqlen.cuh"
#include "common/utils.cuh"
#include "sm90/fwd_softmax.cuh"
#include "sm90/fwd_traits.cuh"
#include "sm90/trace.cuh"

namespace flashcute::sm90 {

using namespace cute;

template <class Traits>
struct Epilogue {
  using Element = typename Traits::ElementO;  // what is written: the output type
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kHeadDimV = Traits::kHeadDimV;
  static constexpr int kChunks = kHeadDimV / 8;  // 16-byte chunks per row
  using SharedStorage = typename Traits::SharedStorage;
  using TiledMmaPV = typename Traits::TiledMmaPV;

  int wg, tid;  // consumer warpgroup, consumer thread

  CUTE_DEVICE bool leader() const { return (tid & 127) == 0; }
  CUTE_DEVICE int bar_id() const {
    if constexpr (Traits::kNumMmaWG == 2) return wg == 0 ? kBarEpiWG0 : kBarEpiWG0 + 1;  // see sched_bar
    else return kBarEpiWG0 + wg;
  }

  CUTE_DEVICE Element* out_rows(FwdParams const& p, SeqInfo const& seq, int h) const {
    return static_cast<Element*>(p.out) + seq.q_offset(p.o_batch_stride, p.o_row_stride) +
           int64_t(h) * p.o_head_stride;
  }

  // Every key masked (or seqlen_k == 0): O = 0, LSE = -inf, written directly (no smem, so that
  // an aliased Q buffer the producer may already be refilling is left alone).
  CUTE_DEVICE void store_empty(FwdParams const& p, SeqInfo const& seq, int h, int m_block) const {
    Element* out = out_rows(p, seq, h);
    const int row0 = m_block * kBlockM + wg * 64;
    for (int i = tid & 127; i < 64 * kChunks; i += 128) {
      const int row = row0 + i / kChunks;
      if (row < seq.seqlen_q) {
        *reinterpret_cast<uint4*>(out + int64_t(row) * p.o_row_stride + (i % kChunks) * 8) =
            make_uint4(0, 0, 0, 0);
      }
    }
    if (p.lse != nullptr) {
      float* lse = p.lse + seq.lse_offset(p, h);
      for (int i = tid & 127; i < 64; i += 128)
        if (row0 + i < seq.seqlen_q) lse[row0 + i] = -INFINITY;
    }
  }

  // The output fragment: O in the output type, in the accumulator's register order.
  template <class TensorO>
  using FragmentO = decltype(make_tensor<Element>(TensorO{}.layout()));

  // scale_log2: the score scale the mainloop used; o_scale: FP8's v_descale (1 otherwise).
  // trace: the diagnostic trace's callback (trace.cuh), called with kTrEpi* events.
  template <class KP, class TensorO, class Softmax, class Trace = NoTrace>
  CUTE_DEVICE void store(KP const& kp, SharedStorage& ss, SeqInfo const& seq, int h, int m_block,
                         TensorO& tOrO, Softmax& softmax, float scale_log2, float o_scale,
                         Trace const& trace = Trace{}) const {
    FragmentO<TensorO> rO;
    finish_o(kp.p, seq, h, m_block, tOrO, softmax, scale_log2, o_scale, rO);
    store_o(kp, ss, seq, h, m_block, rO, trace);
  }

  // The register part: O normalised, LSE written, O converted into rO; tOrO is left cleared.
  template <class TensorO, class Softmax>
  CUTE_DEVICE void finish_o(FwdParams const& p, SeqInfo const& seq, int h, int m_block, TensorO& tOrO,
                            Softmax& softmax, float scale_log2, float o_scale, FragmentO<TensorO>& rO) const {
    TiledMmaPV mma_pv;
    auto thr_pv = mma_pv.get_thread_slice(tid);

    constexpr int kRows = decltype(size<0>(acc_rowcol(tOrO.layout())))::value;
    float lse[kRows];
    softmax.finalize(make_tensor(tOrO.data(), acc_rowcol(tOrO.layout())), scale_log2, lse, o_scale);

    // LSE: the 4 lanes of a row hold the same value; lane 0 of each quad writes it.
    if (p.lse != nullptr && (tid & 3) == 0) {
      Tensor tOcO = thr_pv.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{}));
      Tensor rc = make_tensor(tOcO.data(), acc_rowcol(tOcO.layout()));
      float* lse_ptr = p.lse + seq.lse_offset(p, h);
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const int row = m_block * kBlockM + int(get<0>(rc(r, 0)));
        if (row < seq.seqlen_q) lse_ptr[row] = lse[r];
      }
    }

    Tensor converted = convert_fragment<Element>(tOrO);
    CUTE_UNROLL
    for (int i = 0; i < size(rO); ++i) rO(i) = converted(i);
    // The fp32 O is dead from here until the next tile's first P V, but that wgmma lists it as
    // an input (its zero-init is a runtime flag), so ptxas would keep all of it live through the
    // store next to rO: at d=256 with 128-key FP8 tiles that spilled. Zeros end its live range.
    // (And here, before the next tile's first S GEMM is issued: written while a wgmma is in
    // flight, the accumulator would serialise the wgmmas, ptxas C7515.)
    clear(tOrO);
  }

  // The memory part: rO through shared memory (stmatrix) and out by TMA store (varlen: 16-byte
  // stores). Touches no accumulator, so it may run while a wgmma is in flight (kDeferEpilogue).
  template <class KP, class FragO, class Trace = NoTrace>
  CUTE_DEVICE void store_o(KP const& kp, SharedStorage& ss, SeqInfo const& seq, int h, int m_block,
                           FragO const& rO, Trace const& trace = Trace{}) const {
    FwdParams const& p = kp.p;
    TiledMmaPV mma_pv;
    Tensor sO = make_tensor(make_smem_ptr(ss.o_ptr()), typename Traits::SmemLayoutO{});
    Tensor sO_wg = make_tensor(make_smem_ptr(ss.o_ptr() + wg * 64 * kHeadDimV),
                               typename Traits::SmemLayoutOWG{});

    trace(kTrEpiFinal);
    if (leader()) tma_store_wait<0>();  // the previous tile's store has read O's smem
    named_bar_sync(bar_id(), 128);
    trace(kTrEpiBar1);
    auto smem_copy = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_pv);
    auto thr_copy = smem_copy.get_thread_slice(tid);
    copy(smem_copy, thr_copy.retile_S(rO), thr_copy.partition_D(sO));
    cutlass::arch::fence_view_async_shared();  // stmatrix writes -> visible to the TMA engine
    named_bar_sync(bar_id(), 128);
    trace(kTrEpiStored);

    if (!seq.varlen) {
      if (leader()) {
        Tensor mO = kp.tma_o.get_tma_tensor(kp.shape_o)(_, _, h, seq.b);
        Tensor gO = local_tile(mO, Shape<_64, Int<kHeadDimV>>{}, make_coord(m_block * Traits::kNumMmaWG + wg, _0{}));
        auto [tOg, tOs] = tma_partition(kp.tma_o, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sO_wg),
                                        group_modes<0, 2>(gO));
        copy(kp.tma_o, tOs, tOg);  // rows past seqlen_q are clipped by the tensor map
        tma_store_arrive();
      }
    } else {
      Element* out = out_rows(p, seq, h);
      const int row0 = m_block * kBlockM + wg * 64;
      for (int i = tid & 127; i < 64 * kChunks; i += 128) {
        const int r = i / kChunks, c = (i % kChunks) * 8;
        if (row0 + r < seq.seqlen_q) {
          *reinterpret_cast<uint4*>(out + int64_t(row0 + r) * p.o_row_stride + c) =
              *reinterpret_cast<uint4 const*>(&sO_wg(r, c));
        }
      }
    }
    if constexpr (Traits::kOAliasQ || Traits::kOAliasV) {
      if (leader()) tma_store_wait<0>();
      __syncwarp();
      cutlass::arch::ClusterBarrier::arrive(Traits::kOAliasQ ? &ss.bar.q_empty[Traits::kSplitQ ? wg : 0]
                                                             : &ss.bar.o_free);
    }
  }

  // Before the CTA exits: its last TMA store must have finished reading shared memory.
  CUTE_DEVICE void finish() const {
    if (leader()) tma_store_wait<0>();
  }
};

}  // namespace flashcute::sm90
