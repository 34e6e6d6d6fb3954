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

// A/B switch: O written straight from registers (4-byte stores of each thread's column pairs,
// predicated per row), with no shared-memory staging, barriers or TMA store. Run 85's trace put
// the staged epilogue at ~2,300 cycles per warpgroup and tile (previous store / barrier 271,
// stmatrix + fence + barrier 457, TMA store issue 930): more than half a key block on the tile
// boundary. Only where O has its own buffer (an aliased one must be released after its store).
#ifndef FLASHCUTE_SM90_EPI_DIRECT
#define FLASHCUTE_SM90_EPI_DIRECT 0
#endif

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

  // scale_log2: the score scale the mainloop used; o_scale: FP8's v_descale (1 otherwise).
  // trace: the diagnostic trace's callback (trace.cuh), called with kTrEpi* events.
  template <class KP, class TensorO, class Softmax, class Trace = NoTrace>
  CUTE_DEVICE void store(KP const& kp, SharedStorage& ss, SeqInfo const& seq, int h, int m_block,
                         TensorO& tOrO, Softmax& softmax, float scale_log2, float o_scale,
                         Trace const& trace = Trace{}) const {
    FwdParams const& p = kp.p;
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

    Tensor rO = convert_fragment<Element>(tOrO);
    if constexpr (kDirect) {
      store_direct(p, seq, h, m_block, rO);
      clear(tOrO);  // as below: ends the fp32 O's live range
      return;
    }
    // The fp32 O is dead from here until the next tile's first P V, but that wgmma lists it as
    // an input (its zero-init is a runtime flag), so ptxas would keep all of it live through the
    // store next to rO: at d=256 with 128-key FP8 tiles that spilled. Zeros end its live range.
    clear(tOrO);
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

  static constexpr bool kDirect = bool(FLASHCUTE_SM90_EPI_DIRECT) && !Traits::kOAliasQ && !Traits::kOAliasV;

  // Fragment values i and i + 1 (adjacent columns) as one 32-bit word, i's bits low.
  template <class TensorR>
  CUTE_DEVICE static uint32_t pair_bits(TensorR const& rO, int i) {
    static_assert(sizeof(Element) == 2);
    return uint32_t(reinterpret_cast<uint16_t const&>(rO(i))) |
           (uint32_t(reinterpret_cast<uint16_t const&>(rO(i + 1))) << 16);
  }

  // O from registers: in the P V accumulator's layout a thread holds column pairs (2c, 2c + 1)
  // of its rows, stored as one 4-byte word each; a quad covers 16 contiguous bytes of a row.
  template <class TensorR>
  CUTE_DEVICE void store_direct(FwdParams const& p, SeqInfo const& seq, int h, int m_block, TensorR const& rO) const {
    TiledMmaPV mma_pv;
    auto thr_pv = mma_pv.get_thread_slice(tid);
    Tensor cO = thr_pv.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{}));
    static_assert(decltype(size(rO))::value == decltype(size(cO))::value && decltype(size(rO))::value % 2 == 0);
    Element* out = out_rows(p, seq, h);
    const int row0 = m_block * kBlockM;
    if constexpr (FLASHCUTE_SM90_EPI_DIRECT == 2) {
      store_direct_quad(out, p.o_row_stride, row0, seq.seqlen_q, rO, cO);
      return;
    }
    CUTE_UNROLL
    for (int i = 0; i < size(rO); i += 2) {
      const int row = row0 + int(get<0>(cO(i))), col = int(get<1>(cO(i)));
      if (row < seq.seqlen_q) *reinterpret_cast<uint32_t*>(out + int64_t(row) * p.o_row_stride + col) = pair_bits(rO, i);
    }
  }

  // =2: the quad's words exchanged first (a 4 x 4 transpose in two butterfly steps, 4 shuffles
  // per 4 words) so that each lane stores 16 contiguous bytes: lane q of a quad takes 8-column
  // group 4s + q of each 32-column span s. Fragment value i = pair + 2 (row half) + 4 (group).
  template <class TensorR, class TensorC>
  CUTE_DEVICE static void store_direct_quad(Element* out, int64_t row_stride, int row0, int seqlen_q,
                                            TensorR const& rO, TensorC const& cO) {
    constexpr int kGroupsN = kHeadDimV / 8;
    static_assert(decltype(size(rO))::value == 4 * kGroupsN && kGroupsN % 4 == 0, "one m64 x dv accumulator");
    const int q = threadIdx.x & 3;
    CUTE_UNROLL
    for (int rh = 0; rh < 2; ++rh) {
      const int row = row0 + int(get<0>(cO(2 * rh)));
      CUTE_UNROLL
      for (int s4 = 0; s4 < kGroupsN / 4; ++s4) {
        uint32_t w[4];
        CUTE_UNROLL
        for (int c = 0; c < 4; ++c) w[c] = pair_bits(rO, 2 * rh + 4 * (4 * s4 + c));
        // Step m (1, then 2): element (lane l, column c) with bit m of c != bit m of l swaps with
        // (l ^ m, c ^ m): each lane sends, per column pair {c, c ^ m}, the one whose bit differs.
        CUTE_UNROLL
        for (int m = 1; m <= 2; m *= 2) {
          const bool hi = (q & m) != 0;
          CUTE_UNROLL
          for (int c = 0; c < 4; ++c) {
            if (c & m) continue;  // pair (c, c + m), c with bit m clear
            const uint32_t send = hi ? w[c] : w[c + m];
            const uint32_t got = __shfl_xor_sync(0xffffffffu, send, m);
            if (hi) w[c] = got; else w[c + m] = got;
          }
        }
        if (row < seqlen_q) {
          *reinterpret_cast<uint4*>(out + int64_t(row) * row_stride + 8 * (4 * s4 + q)) =
              make_uint4(w[0], w[1], w[2], w[3]);
        }
      }
    }
  }

  // Before the CTA exits: its last TMA store must have finished reading shared memory.
  CUTE_DEVICE void finish() const {
    if (leader()) tma_store_wait<0>();
  }
};

}  // namespace flashcute::sm90
