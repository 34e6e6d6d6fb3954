// Variant harness (benchmarks/bench_ablation.py): one kernel instantiation per .so, built by
// scripts/build_ablation.sh with compile-time switches (-DFLASHCUTE_SM90_PINGPONG=0, ...) so that
// variants of one kernel family (FAMILY=80 or 90) are timed side by side in one process.
// An extern "C" entry that fills FwdParams (dense layout) and calls run_fwd_sm<FAMILY>.
#include <cmath>
#if FAMILY == 80
#include "sm80/fwd_launch.cuh"
#define FC_RUN run_fwd_sm80
#else
#include "sm90/fwd_launch.cuh"
#define FC_RUN run_fwd_sm90
#endif

namespace flashcute {
#if FAMILY == 80 && defined(TILE_M)
// An sm80 tile configuration other than TileConfig<HD>'s: -DTILE_M=.. -DTILE_N=.. -DTILE_WARPS=..
// -DTILE_MINBLOCKS=.. (tile-size experiments without touching the library's table).
template <>
int run_fwd_sm80<1, HD, HDV>(const FwdParams& p) {
  return sm80::launch_fwd<cutlass::bfloat16_t, HD, TILE_M, TILE_N, TILE_WARPS, TILE_MINBLOCKS>(p);
}
#elif FAMILY == 90 && defined(ABL_FP8)
// The FP8 kernel (e4m3 in, bf16 out), with TileConfigFp8's tile or -DTILE_N=.. -DTILE_STAGES=..
// (-DTILE_PINGPONG=0|1 overrides the table's ping-pong choice)
#ifndef TILE_N
#define TILE_N sm90::TileConfigFp8<HD, HDV>::kN
#define TILE_STAGES sm90::TileConfigFp8<HD, HDV>::kStages
#endif
#ifndef TILE_STAGES_V
#define TILE_STAGES_V sm90::StagesV<sm90::TileConfigFp8<HD, HDV>>::value
#endif
#ifndef TILE_SECTIONS
#define TILE_SECTIONS sm90::TileConfigFp8<HD, HDV>::kSections
#endif
#ifndef TILE_PINGPONG  // ping-pong between the consumer warpgroups; default: the table's
#define TILE_PINGPONG sm90::PingPong<sm90::TileConfigFp8<HD, HDV>>::value
#endif
#ifndef TILE_ALIAS  // where O is staged (sm90::OStaging: 0 own buffer, 2 V's landing buffer)
#define TILE_ALIAS sm90::TileConfigFp8<HD, HDV>::kAlias
#endif
#ifndef TILE_PREGS  // producer registers (24 or 40); default: the table's
#define TILE_PREGS sm90::ProducerRegs<sm90::TileConfigFp8<HD, HDV>>::value
#endif
#ifndef TILE_QDESC  // Q descriptors re-derived per GEMM (0|1); default: the table's
#define TILE_QDESC sm90::RederiveQDesc<sm90::TileConfigFp8<HD, HDV>>::value
#endif
#ifndef TILE_WG  // consumer warpgroups (-DTILE_WG=3: 192-row tiles); default: the table's
#define TILE_WG sm90::NumMmaWG<sm90::TileConfigFp8<HD, HDV>>::value
#endif
#ifndef TILE_TWOP  // two P register buffers (fwd_traits.cuh, kTwoP); default: the table's
#define TILE_TWOP sm90::TwoP<sm90::TileConfigFp8<HD, HDV>>::value
#endif
#ifndef ABL_VT  // 1: the V^T-input kernel of the FP8 mode (FwdParams::v_colmajor; v in ops.v_colmajor's layout)
#define ABL_VT 0
#endif
struct AblFp8Cfg {
  static constexpr bool kTwoP = TILE_TWOP;
  static constexpr int kN = TILE_N, kStages = TILE_STAGES, kStagesV = TILE_STAGES_V, kProducerRegs = TILE_PREGS;
  static constexpr int kWG = TILE_WG;
  static constexpr int kTransposeWarps = sm90::TransposeWarps<sm90::TileConfigFp8<HD, HDV>>::value;
  static constexpr int kTransposeBatch = sm90::TransposeBatch<sm90::TileConfigFp8<HD, HDV>>::value;
  static constexpr bool kRederiveQDesc = TILE_QDESC;
  static constexpr int kAlias = TILE_ALIAS;
  static constexpr bool kSections = TILE_SECTIONS, kPingPong = TILE_PINGPONG;
};
template <>
int run_fwd_sm90<2, HD, HDV>(const FwdParams& p) {
  return sm90::run_fwd_typed<cutlass::float_e4m3_t, cutlass::bfloat16_t, AblFp8Cfg, HD, HDV, bool(ABL_VT)>(p);
}
#elif FAMILY == 90 && defined(TILE_N)
// An sm90 tile configuration other than TileConfig<HD, HDV>'s: -DTILE_N=.. -DTILE_STAGES=..
// -DTILE_ALIAS=0|1 (O staged in Q's buffer) -DTILE_STAGES_V=.. (V's ring depth; 0 = as K's)
// -DTILE_SECTIONS=0|1 (the last two default to the table's), -DTILE_WG=3 (consumer warpgroups).
#ifndef TILE_STAGES_V
#define TILE_STAGES_V sm90::StagesV<sm90::TileConfig<HD, HDV>>::value
#endif
#ifndef TILE_SECTIONS  // causal tile order in L2 sections (tile_scheduler.cuh); default: the table's
#define TILE_SECTIONS sm90::TileConfig<HD, HDV>::kSections
#endif
#ifndef TILE_WG  // consumer warpgroups (-DTILE_WG=3: 192-row tiles)
#define TILE_WG 2
#endif
template <>
int run_fwd_sm90<1, HD, HDV>(const FwdParams& p) {
  using Traits = sm90::FwdTraits<cutlass::bfloat16_t, HD, HDV, TILE_N, TILE_STAGES, bool(TILE_ALIAS),
                                 bool(FLASHCUTE_SM90_PINGPONG), bool(FLASHCUTE_SM90_INTRAWG_OVERLAP),
                                 cutlass::bfloat16_t, TILE_STAGES_V, TILE_WG>;
  return sm90::launch_fwd<Traits>(p, bool(TILE_SECTIONS) && bool(FLASHCUTE_SM90_L2_SECTIONS));
}
#else
template int FC_RUN<1, HD, HDV>(const FwdParams&);  // bf16 (what the benchmark times)
#endif
#ifdef ABL_FP8
constexpr int kDtype = 2;  // e4m3 in, bf16 out
#else
constexpr int kDtype = 1;  // bf16
#endif
}

extern "C" __attribute__((visibility("default"))) int fc_fwd(int dtype, const void* q, const void* k, const void* v, void* out, float* lse,
                           const long long* strides /* 14: q b,r,h  k b,r,h  v b,r,h  o b,r,h  lse b,h */,
                           int batch, int sq, int sk, int hq, int hk, float scale, int wl, int wr,
                           int top_left, float softcap, const int* cu_q, const int* cu_k,
                           const int* seqused_k, long long total_q, long long total_k, int num_sms,
                           void* stream) {
  flashcute::FwdParams p{};
  p.q = q; p.k = k; p.v = v; p.out = out; p.lse = lse;
  p.q_batch_stride = strides[0]; p.q_row_stride = strides[1]; p.q_head_stride = strides[2];
  p.k_batch_stride = strides[3]; p.k_row_stride = strides[4]; p.k_head_stride = strides[5];
  p.v_batch_stride = strides[6]; p.v_row_stride = strides[7]; p.v_head_stride = strides[8];
  p.o_batch_stride = strides[9]; p.o_row_stride = strides[10]; p.o_head_stride = strides[11];
  p.lse_batch_stride = strides[12]; p.lse_head_stride = strides[13];
  p.batch = batch; p.seqlen_q = sq; p.seqlen_k = sk; p.heads_q = hq; p.heads_k = hk;
  p.head_group = hq / hk; p.head_dim = HD; p.head_dim_v = HDV; p.dtype = dtype; p.out_dtype = dtype == 2 ? 1 : dtype;
  p.softmax_scale = scale; p.scale_log2 = scale * 1.4426950408889634f;
  p.softcap = softcap;
  if (softcap > 0) { p.softcap_inv = scale / softcap; p.softcap_log2 = softcap * 1.4426950408889634f; }
  p.window_left = wl; p.window_right = wr; p.is_causal = (wr == 0); p.align_top_left = top_left;
  p.cu_seqlens_q = cu_q; p.cu_seqlens_k = cu_k; p.seqused_k = seqused_k;
  p.total_q = total_q; p.total_k = total_k;
  p.num_sms = num_sms; p.stream = stream;
#if defined(ABL_FP8) && ABL_VT
  p.v_colmajor = true;  // v: (b, hk, dv, keys), strides (batch, row = one d, head) as ops._launch passes them
#endif
#ifdef ABL_TILE_COUNTER  // the dynamic tile hand-out: =1 zeroed per call (as the library's caller does), =2 zeroed once (the kernel leaves it zero)
  static int* counter = nullptr;
  if (!counter && cudaMalloc(&counter, 2 * sizeof(int)) != cudaSuccess) return 2;
  static bool zeroed = false;
  if ((ABL_TILE_COUNTER == 1 || !zeroed) &&
      cudaMemsetAsync(counter, 0, 2 * sizeof(int), static_cast<cudaStream_t>(stream)) != cudaSuccess) return 2;
  zeroed = true;
  p.tile_counter = counter;
#endif
  return dtype == flashcute::kDtype ? flashcute::FC_RUN<flashcute::kDtype, HD, HDV>(p)
                                    : 1 /* cudaErrorInvalidValue: the one compiled dtype only */;
}

#if FAMILY == 90 && FLASHCUTE_SM90_TRACE
// The event trace's buffer (src/sm90/trace.cuh; benchmarks/diag_trace.py): nullptr turns it off.
extern "C" __attribute__((visibility("default"))) int fc_trace_set(void* buf) {
  return cudaMemcpyToSymbol(flashcute::sm90::g_fc_trace, &buf, sizeof(buf));
}
#endif
