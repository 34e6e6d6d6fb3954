// Compile-time configuration of the sm80 forward kernel: tile sizes, the mma.sync TiledMMA,
// shared-memory layouts and the copy atoms that move tiles gmem -> smem -> registers.
#pragma once

#include <cute/tensor.hpp>
#include <cute/atom/mma_atom.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cutlass/numeric_types.h>

namespace flashcute::sm80 {

using namespace cute;

template <typename Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, int kMinBlocks_ = 1>
struct FwdTraits {
  // kMinBlocks: CTAs per SM promised to ptxas (__launch_bounds__), i.e. the register cap.
  static constexpr int kMinBlocks = kMinBlocks_;
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = kNWarps * 32;
  static_assert(kHeadDim % 32 == 0);
  // Each warp owns kBlockM / kNWarps query rows, so row statistics never cross warps.
  static_assert(kBlockM % (16 * kNWarps) == 0);

  using MmaAtom = std::conditional_t<std::is_same_v<Element, cutlass::half_t>,
                                     MMA_Atom<SM80_16x8x16_F32F16F16F32_TN>,
                                     MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>>;
  // Warps tile M only; the N extent 16 lets one ldmatrix.x4 feed two n8 atoms of B.
  using TiledMma = TiledMMA<MmaAtom, Layout<Shape<Int<kNWarps>, _1, _1>>,
                            Tile<Int<16 * kNWarps>, _16, _16>>;

  // Shared memory rows are kBlockKSmem elements wide chunks with an XOR swizzle so that both
  // the 128-bit cp.async writes and the ldmatrix reads are bank-conflict free.
  static constexpr int kBlockKSmem = kHeadDim % 64 == 0 ? 64 : 32;
  static constexpr int kSwizzle = kBlockKSmem == 32 ? 2 : 3;
  using SmemLayoutAtom = decltype(composition(
      Swizzle<kSwizzle, 3, 3>{},
      Layout<Shape<_8, Int<kBlockKSmem>>, Stride<Int<kBlockKSmem>, _1>>{}));
  using SmemLayoutQ = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // V seen as (head_dim, keys): the B operand of O += P V, read with ldmatrix.trans.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutKV{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
  using SmemLayoutVtNoSwizzle = decltype(get_nonswizzle_portion(SmemLayoutVt{}));
  using SmemLayoutO = SmemLayoutQ;  // O is staged in Q's buffer

  static constexpr int kSmemQ = int(cosize_v<SmemLayoutQ>) * int(sizeof(Element));
  static constexpr int kSmemKV = int(cosize_v<SmemLayoutKV>) * int(sizeof(Element));
  static constexpr int kSmemBytes = kSmemQ + 2 * kSmemKV;
  static_assert(kSmemBytes <= 99 * 1024, "must fit every sm8x GPU");

  using SmemCopyAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
  using SmemCopyAtomTransposed = Copy_Atom<SM75_U16x8_LDSM_T, Element>;
  using SmemCopyAtomO = Copy_Atom<AutoVectorizingCopyWithAssumedAlignment<32>, Element>;

  // gmem <-> smem: 128-bit accesses, kGmemThreadsPerRow threads cover one kBlockKSmem chunk.
  static constexpr int kGmemElems = 16 / int(sizeof(Element));
  static constexpr int kGmemThreadsPerRow = kBlockKSmem / kGmemElems;
  static_assert(kNThreads % kGmemThreadsPerRow == 0);
  using GmemLayoutAtom = Layout<Shape<Int<kNThreads / kGmemThreadsPerRow>, Int<kGmemThreadsPerRow>>,
                                Stride<Int<kGmemThreadsPerRow>, _1>>;
  using GmemTiledCopyQKV = decltype(make_tiled_copy(
      Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, Element>{}, GmemLayoutAtom{},
      Layout<Shape<_1, Int<kGmemElems>>>{}));
  // The same copy with a per-row predicate: src-size 0 reads nothing and zero-fills the 16 bytes.
  using GmemTiledCopyQKVZfill = decltype(make_tiled_copy(
      Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<cute::uint128_t>, Element>{}, GmemLayoutAtom{},
      Layout<Shape<_1, Int<kGmemElems>>>{}));
  using GmemTiledCopyO = decltype(make_tiled_copy(
      Copy_Atom<UniversalCopy<cute::uint128_t>, Element>{}, GmemLayoutAtom{},
      Layout<Shape<_1, Int<kGmemElems>>>{}));
};

}  // namespace flashcute::sm80
