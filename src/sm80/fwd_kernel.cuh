// The sm80 forward kernel (FlashAttention-2 schedule). One CTA computes one (query tile, head,
// batch); its warps split the tile's rows, so softmax statistics stay inside a warp's lanes.
//
// Pipeline. K and V have one shared-memory buffer each and their loads alternate, so every
// cp.async overlaps a GEMM:  wait K(n) | load V(n) while S = Q K(n)^T and softmax run |
// wait V(n) | load K(n-1) while O += P V(n) runs.  A __syncthreads before each load guarantees
// that every warp has finished reading the buffer it overwrites. Key blocks are walked from the
// last to the first, so the one block that may end past seqlen_k (zero-filled) comes first and
// the blocks on the causal diagonal are handled while the running max is still being built.
#pragma once

#include <type_traits>
#include <cute/tensor.hpp>
#include "common/mask.cuh"
#include "common/params.h"
#include "common/seqlen.cuh"
#include "common/softmax.cuh"
#include "common/utils.cuh"
#include "sm80/fwd_epilogue.cuh"
#include "sm80/fwd_mainloop.cuh"
#include "sm80/fwd_traits.cuh"

namespace flashcute::sm80 {

using namespace cute;

template <class Traits>
__global__ void __launch_bounds__(Traits::kNThreads, Traits::kMinBlocks) fwd_kernel(const __grid_constant__ FwdParams p) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  using TileQ = Shape<Int<kBlockM>, Int<kHeadDim>>;
  using TileKV = Shape<Int<kBlockN>, Int<kHeadDim>>;
  using TileS = Shape<Int<kBlockM>, Int<kBlockN>>;

  // Query tiles are issued last-first: under causal/window masks the last tiles see the most
  // keys, and starting the longest CTAs first shortens the tail of the grid.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
  const SeqInfo seq(p, b);
  const int row_begin = m_block * kBlockM;
  if (row_begin >= seq.seqlen_q) return;  // varlen: this sequence is shorter than the grid
  const int row_end = min(seq.seqlen_q, row_begin + kBlockM);
  const int hk = h / p.head_group;        // GQA/MQA: K/V heads are shared, never copied
  const WindowMask mask(p, seq);
  int n_min, n_max;
  mask.key_block_range<kBlockN>(row_begin, row_end, n_min, n_max);

  // ---- shared memory: Q (later O), K, V ----
  extern __shared__ __align__(128) char smem_raw[];
  Element* smem = reinterpret_cast<Element*>(smem_raw);
  Tensor sQ = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutQ{});
  Tensor sK = make_tensor(sQ.data() + size(sQ), typename Traits::SmemLayoutKV{});
  Tensor sV = make_tensor(sK.data() + size(sK), typename Traits::SmemLayoutKV{});
  Tensor sVt = make_tensor(sV.data(), typename Traits::SmemLayoutVt{});
  Tensor sVtNoSwizzle = make_tensor(sV.data(), typename Traits::SmemLayoutVtNoSwizzle{});

  // ---- global memory views of this (batch, head) ----
  auto gmem_view = [](const void* base, int64_t offset, int rows, int64_t row_stride) {
    return make_tensor(make_gmem_ptr(static_cast<const Element*>(base) + offset),
                       make_shape(rows, Int<kHeadDim>{}), make_stride(row_stride, _1{}));
  };
  Tensor mQ = gmem_view(p.q, seq.q_offset(p.q_batch_stride, p.q_row_stride) + int64_t(h) * p.q_head_stride,
                        seq.seqlen_q, p.q_row_stride);
  Tensor mK = gmem_view(p.k, seq.k_offset(p.k_batch_stride, p.k_row_stride) + int64_t(hk) * p.k_head_stride,
                        seq.seqlen_k, p.k_row_stride);
  Tensor mV = gmem_view(p.v, seq.k_offset(p.v_batch_stride, p.v_row_stride) + int64_t(hk) * p.v_head_stride,
                        seq.seqlen_k, p.v_row_stride);
  Tensor gQ = local_tile(mQ, TileQ{}, make_coord(m_block, 0));  // (BM, D)
  Tensor gK = local_tile(mK, TileKV{}, make_coord(0, 0));       // (BN, D): key block 0
  Tensor gV = local_tile(mV, TileKV{}, make_coord(0, 0));       // (BN, D): key block 0

  // ---- gmem -> smem copies (cp.async, 128-bit) ----
  // The K/V loads and the ldmatrix views take the thread index t as an argument: inside the key
  // loop it is thread_index_in_loop(), so that the compiler computes every per-thread offset
  // where it is used rather than hoisting dozens of them out of the loop (see that function).
  typename Traits::GmemTiledCopyQKV gmem_tiled_copy;
  typename Traits::GmemTiledCopyQKVZfill gmem_tiled_copy_zfill;
  auto load_q = [&]() {
    auto thr = gmem_tiled_copy.get_thread_slice(tid);
    Tensor dst = thr.partition_D(sQ);
    load_tile(gmem_tiled_copy, thr.partition_S(gQ), dst, thr.partition_S(make_identity_tensor(TileQ{})),
              seq.seqlen_q - row_begin, row_begin + kBlockM <= seq.seqlen_q);
  };
  // The last key block, loaded first (before the loop), is the only one that can end past
  // seqlen_k; later K loads are full blocks.
  auto load_k = [&](int n, int t) {
    auto thr = gmem_tiled_copy.get_thread_slice(t);
    Tensor dst = thr.partition_D(sK);
    load_tile(gmem_tiled_copy, thr.partition_S(key_block<kBlockN>(gK, n, p.k_row_stride)), dst,
              thr.partition_S(make_identity_tensor(TileKV{})), seq.seqlen_k - n * kBlockN,
              (n + 1) * kBlockN <= seq.seqlen_k);
  };
  auto load_k_full = [&](int n, int t) {
    auto thr = gmem_tiled_copy.get_thread_slice(t);
    Tensor dst = thr.partition_D(sK);
    copy(gmem_tiled_copy, thr.partition_S(key_block<kBlockN>(gK, n, p.k_row_stride)), dst);
  };
  auto load_v = [&](int n, int t) {
    auto thr = gmem_tiled_copy.get_thread_slice(t);
    Tensor dst = thr.partition_D(sV);
    load_tile_zfill(gmem_tiled_copy_zfill, thr.partition_S(key_block<kBlockN>(gV, n, p.v_row_stride)), dst,
                    thr.partition_S(make_identity_tensor(TileKV{})), seq.seqlen_k - n * kBlockN);
  };

  // ---- MMA partitions and smem -> register copies (ldmatrix) ----
  typename Traits::TiledMma tiled_mma;
  auto thr_mma = tiled_mma.get_thread_slice(tid);
  Tensor tSrQ = thr_mma.partition_fragment_A(sQ);
  Tensor tSrK = thr_mma.partition_fragment_B(sK);
  Tensor tOrVt = thr_mma.partition_fragment_B(sVtNoSwizzle);
  Tensor acc_o = partition_fragment_C(tiled_mma, TileQ{});  // fp32 (MMA, MMA_M, MMA_D)

  auto smem_tiled_copy_q = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_tiled_copy_k = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_tiled_copy_v = make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, tiled_mma);
  // Register-side views (the same for every thread).
  Tensor tSrQ_view = smem_tiled_copy_q.get_thread_slice(tid).retile_D(tSrQ);
  Tensor tSrK_view = smem_tiled_copy_k.get_thread_slice(tid).retile_D(tSrK);
  Tensor tOrVt_view = smem_tiled_copy_v.get_thread_slice(tid).retile_D(tOrVt);

  constexpr int kRows = decltype(size<0>(rowcol_view(acc_o)))::value;
  OnlineSoftmax<kRows> softmax;
  // With softcap the scores become tanh(s * softcap_inv) and softcap * log2(e) is the scale.
  const bool use_softcap = p.softcap > 0.f;
  const float scale_log2 = use_softcap ? p.softcap_log2 : p.scale_log2;
  clear(acc_o);

  if (n_min < n_max) {
    load_q();
    load_k(n_max - 1, tid);
    cp_async_fence();

    // Softcap is a compile-time branch of the key loop, which is instantiated with and without
    // it. As a runtime branch inside the loop, ptxas if-converted it into 64 predicated tanh and
    // 64 predicated multiplies that every iteration issued, softcap or not (benchmarks/RESULTS.md).
    // Whether the in-loop K load takes its own thread index (thread_index_in_loop(tid, n - 1)) or
    // the iteration's t. Register-allocation tuning only, found by compiling both: its own index
    // removes the last spills at d=64 (sm_80: 40 bytes) and d=96 (sm_80: 124 bytes), sharing t
    // those at d=128 (sm_90a: 80 bytes). Either is correct (both equal tid).
    constexpr bool kOwnIndexForKLoad = kHeadDim != 128;
    auto key_loop = [&](auto softcap) {
      for (int n = n_max - 1; n >= n_min; --n) {
        // The thread index for this iteration's V load, S GEMM and mask (see thread_index_in_loop).
        const int t = thread_index_in_loop<Traits::kNThreads>(tid, n);
        Tensor acc_s = partition_fragment_C(tiled_mma, TileS{});
        clear(acc_s);
        cp_async_wait<0>();  // K(n) (and Q) have landed ...
        __syncthreads();     // ... for every thread, and everyone is done reading V(n+1)
        load_v(n, t);
        cp_async_fence();

        // S = Q K(n)^T
        gemm_ss(tiled_mma, acc_s, tSrQ, tSrK, smem_tiled_copy_q.get_thread_slice(t).partition_S(sQ),
                smem_tiled_copy_k.get_thread_slice(t).partition_S(sK), tSrQ_view, tSrK_view,
                smem_tiled_copy_q, smem_tiled_copy_k);

        Tensor s = rowcol_view(acc_s);
        if constexpr (decltype(softcap)::value) apply_softcap(s, p.softcap_inv);
        // Only blocks crossing a window edge or the end of the keys take the masked path. (One
        // loop body with a uniform branch: two specialised bodies raised register spills.)
        if (mask.block_needs_mask<kBlockN>(n, row_begin, row_end)) {
          // (row, col) inside the S tile of each score this thread holds: the mask's coordinates.
          Tensor tScS = rowcol_view(tiled_mma.get_thread_slice(t).partition_C(make_identity_tensor(TileS{})));
          mask.template apply<false>(s, tScS, row_begin, n * kBlockN);  // (the bit-mask form spills here)
        }

        // FA2's order: K(n-1) is requested before the softmax, so its load overlaps the softmax
        // and the P V GEMM, not the P V GEMM alone (measured +4-5 % at d=128).
        cp_async_wait<0>();  // V(n) has landed ...
        __syncthreads();     // ... for every thread, and everyone is done reading K(n)
        if (n > n_min) {
          // Only the last block can be partial, and it was loaded first.
          load_k_full(n - 1, kOwnIndexForKLoad ? thread_index_in_loop<Traits::kNThreads>(tid, n - 1) : t);
          cp_async_fence();
        }
        // online softmax: S -> P, O rescaled once
        softmax.update(s, rowcol_view(acc_o), scale_log2);
        // P to 16 bits right away: the fp32 scores die here.
        Tensor rP = convert_fragment<Element>(acc_s);
        Tensor tOrP = make_tensor(rP.data(), acc_as_a_layout(rP.layout()));

        // O += P V(n), P straight from registers
        const int t_pv = thread_index_in_loop<Traits::kNThreads>(tid, n_max - 1 - n);  // its own index
        gemm_rs(tiled_mma, acc_o, tOrP, tOrVt, smem_tiled_copy_v.get_thread_slice(t_pv).partition_S(sVt),
                tOrVt_view, smem_tiled_copy_v);
      }
    };
    if (use_softcap) {
      key_loop(std::true_type{});
    } else {
      key_loop(std::false_type{});
    }
  }

  float lse[kRows];
  softmax.finalize(rowcol_view(acc_o), scale_log2, lse);
  // The head index for the epilogue. At d=96 it is read again from %ctaid.y (an asm the compiler
  // cannot merge with the first read) instead of reusing h: otherwise h and the high word of
  // int64_t(h) stay in two registers through the whole key loop for the epilogue's O/LSE
  // offsets, and on sm_90a the softcap loop then spilled the V base pointer (8 bytes, reloaded
  // every iteration). Read again, ptxas puts it in a uniform register after the loop: no spills.
  // Register-allocation tuning only (it equals h); other head dims keep h (they do not spill).
  int h_epilogue = h;
  if constexpr (kHeadDim == 96) asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(h_epilogue));
  store_o_and_lse<Traits>(p, seq, m_block, h_epilogue, tiled_mma, acc_o, lse, smem, tid);
}

}  // namespace flashcute::sm80
