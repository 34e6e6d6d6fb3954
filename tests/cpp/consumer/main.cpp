// Runs one flashcute forward through the C ABI and checks it against a float64 CPU reference.
// Exit codes: 0 pass, 1 fail, 77 skipped (no CUDA device), as CTest and the pytest wrapper read.
#include <flashcute/flashcute.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#define CHECK_CUDA(x)                                                         \
  do {                                                                        \
    cudaError_t e_ = (x);                                                     \
    if (e_ != cudaSuccess) {                                                  \
      std::printf("CUDA error %s at %s\n", cudaGetErrorString(e_), #x);       \
      return 1;                                                               \
    }                                                                         \
  } while (0)

}  // namespace

int main() {
  std::printf("flashcute %s (ABI %d): %s\n", flashcute_version(), flashcute_abi_version(), flashcute_build_info());
  if (flashcute_fwd_args_size() != sizeof(flashcute_fwd_args)) {
    std::printf("FAIL: struct size %zu != library's %zu\n", sizeof(flashcute_fwd_args), flashcute_fwd_args_size());
    return 1;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  // Any compiled head dim will do.
  int hdim = 0;
  for (int d : {128, 64, 96, 192, 256}) {
    if (flashcute_fwd_supported(-1, FLASHCUTE_BACKEND_AUTO, FLASHCUTE_DTYPE_BF16, d, d, nullptr) == FLASHCUTE_OK) {
      hdim = d;
      break;
    }
  }
  if (!hdim) {
    std::printf("FAIL: no bf16 kernel runs on this device: %s\n", flashcute_last_error());
    return 1;
  }
  const int B = 2, SQ = 77, SK = 203, HQ = 4, HK = 2, D = hdim;
  const size_t nq = size_t(B) * SQ * HQ * D, nk = size_t(B) * SK * HK * D;
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> q(nq), k(nk), v(nk), o(nq, 0x7fc0 /* NaN */);
  for (auto& x : q) x = to_bf16(normal(rng));
  for (auto& x : k) x = to_bf16(normal(rng));
  for (auto& x : v) x = to_bf16(normal(rng));

  void *dq, *dk, *dv, *dout;
  float* dlse;
  CHECK_CUDA(cudaMalloc(&dq, nq * 2));
  CHECK_CUDA(cudaMalloc(&dk, nk * 2));
  CHECK_CUDA(cudaMalloc(&dv, nk * 2));
  CHECK_CUDA(cudaMalloc(&dout, nq * 2));
  CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&dlse), size_t(B) * HQ * SQ * 4));
  CHECK_CUDA(cudaMemcpy(dq, q.data(), nq * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dk, k.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dv, v.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dout, o.data(), nq * 2, cudaMemcpyHostToDevice));  // NaN-poisoned

  flashcute_fwd_args a;
  std::memset(&a, 0, sizeof(a));
  a.struct_size = sizeof(a);
  a.q = dq; a.k = dk; a.v = dv; a.out = dout; a.lse = dlse;
  a.q_batch_stride = int64_t(SQ) * HQ * D; a.q_row_stride = HQ * D; a.q_head_stride = D;
  a.k_batch_stride = int64_t(SK) * HK * D; a.k_row_stride = HK * D; a.k_head_stride = D;
  a.v_batch_stride = a.k_batch_stride; a.v_row_stride = a.k_row_stride; a.v_head_stride = D;
  a.out_batch_stride = a.q_batch_stride; a.out_row_stride = a.q_row_stride; a.out_head_stride = D;
  a.lse_batch_stride = int64_t(HQ) * SQ; a.lse_head_stride = SQ;
  a.batch = B; a.seqlen_q = SQ; a.seqlen_k = SK; a.heads_q = HQ; a.heads_k = HK;
  a.head_dim = D; a.head_dim_v = D; a.dtype = FLASHCUTE_DTYPE_BF16; a.out_dtype = FLASHCUTE_DTYPE_BF16;
  a.softmax_scale = 1.0f / std::sqrt(float(D));
  a.causal = 1; a.window_left = -1; a.window_right = -1;
  a.backend = FLASHCUTE_BACKEND_AUTO; a.device = -1;
  if (flashcute_fwd(&a) != FLASHCUTE_OK) {
    std::printf("FAIL: flashcute_fwd: %s\n", flashcute_last_error());
    return 1;
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaMemcpy(o.data(), dout, nq * 2, cudaMemcpyDeviceToHost));

  // float64 reference, causal bottom-right aligned.
  double max_err = 0;
  std::vector<double> s(SK);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < HQ; ++h)
      for (int i = 0; i < SQ; ++i) {
        const int hk = h / (HQ / HK);
        const int last = i + SK - SQ;  // keys j <= last are visible
        double m = -INFINITY, l = 0;
        for (int j = 0; j <= last && j < SK; ++j) {
          double acc = 0;
          for (int d = 0; d < D; ++d)
            acc += double(from_bf16(q[((size_t(b) * SQ + i) * HQ + h) * D + d])) *
                   from_bf16(k[((size_t(b) * SK + j) * HK + hk) * D + d]);
          s[j] = acc * a.softmax_scale;
          m = std::fmax(m, s[j]);
        }
        for (int j = 0; j <= last && j < SK; ++j) l += std::exp(s[j] - m);
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j <= last && j < SK; ++j)
            acc += std::exp(s[j] - m) / l * from_bf16(v[((size_t(b) * SK + j) * HK + hk) * D + d]);
          const double got = from_bf16(o[((size_t(b) * SQ + i) * HQ + h) * D + d]);
          const double err = std::isnan(got) ? INFINITY : std::fabs(got - acc);
          max_err = std::fmax(max_err, err);
        }
      }
  const bool pass = max_err < 2e-2;
  std::printf("%s: hdim %d causal GQA forward, max |out - ref| = %.3g\n", pass ? "PASS" : "FAIL", D, max_err);
  return pass ? 0 : 1;
}
