// Throughput of the exponential and of the P conversion on sm_90 per SM per cycle: f32 MUFU.EX2 vs
// its f16 / f16x2 / bf16x2 forms (ptxas splits the packed ones into two MUFU.EX2.F16 / .BF16: are
// those cheaper?), and the e4m3x2 / bf16x2 conversions from f32 (F2FP), alone and with MUFU.EX2.
// Build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o mufu_rate mufu_rate.cu
#include <cstdio>
#include <cstdint>
#include <cuda_fp16.h>

constexpr int kChains = 8, kIters = 4096;

template <int V>
__device__ __forceinline__ uint32_t step(uint32_t x) {
  uint32_t y;
  if constexpr (V == 0) {  // f32: one result per instruction
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=r"(y) : "r"(x));
    y ^= 0x80000000u;  // keep the argument negative (stays in range)
  } else if constexpr (V == 1) {  // f16 scalar
    uint16_t a = uint16_t(x), b;
    asm volatile("ex2.approx.f16 %0, %1;" : "=h"(b) : "h"(a));
    y = uint32_t(b ^ 0x8000u);
  } else if constexpr (V == 2) {  // f16x2: two results per instruction
    asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
    y ^= 0x80008000u;
  } else if constexpr (V == 3) {  // bf16x2
    asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
    y ^= 0x80008000u;
  } else if constexpr (V == 4) {  // e4m3x2 from two f32 (the softmax's P conversion)
    uint16_t h;
    asm volatile("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(__uint_as_float(x)), "f"(__uint_as_float(x ^ 0x10u)));
    y = 0x3f000000u | (uint32_t(h) << 4);  // back to a float in [0.5, 1) for the next step
  } else if constexpr (V == 5) {  // one exponential and one e4m3x2 conversion per step
    uint32_t e;
    asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=r"(e) : "r"(x | 0x80000000u));
    uint16_t h;
    asm volatile("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(__uint_as_float(e)), "f"(__uint_as_float(x)));
    y = 0x3f000000u | (uint32_t(h) << 4);
  } else {  // bf16x2 from two f32 (for comparison)
    uint32_t h;
    asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(h) : "f"(__uint_as_float(x)), "f"(__uint_as_float(x ^ 0x10u)));
    y = 0x3f000000u | (h & 0x007fffffu);
  }
  return y;
}

template <int V>
__global__ void bench(uint32_t* out, long long* cycles, uint32_t seed) {
  uint32_t x[kChains];
  for (int i = 0; i < kChains; ++i) x[i] = (V == 0 || V >= 4 ? 0xbf000000u : 0xb800b800u) + ((threadIdx.x + i + seed) & 7);
  __syncthreads();
  long long t0 = clock64();
  for (int it = 0; it < kIters; ++it)
#pragma unroll
    for (int i = 0; i < kChains; ++i) x[i] = step<V>(x[i]);
  __syncthreads();
  long long t1 = clock64();
  uint32_t acc = 0;
  for (int i = 0; i < kChains; ++i) acc ^= x[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <int V>
void run(const char* name, int results_per_op, int sms) {
  const int threads = 1024, blocks = sms;  // one CTA of 32 warps per SM
  uint32_t* out; long long* cyc;
  cudaMalloc(&out, sizeof(uint32_t) * threads * blocks);
  cudaMalloc(&cyc, sizeof(long long) * blocks);
  bench<V><<<blocks, threads>>>(out, cyc, 1);
  bench<V><<<blocks, threads>>>(out, cyc, 2);
  cudaDeviceSynchronize();
  long long h[1024];
  cudaMemcpy(h, cyc, sizeof(long long) * blocks, cudaMemcpyDeviceToHost);
  double mean = 0;
  for (int b = 0; b < blocks; ++b) mean += double(h[b]) / blocks;
  const double ops = double(threads) * kIters * kChains;  // instructions' lanes per SM
  printf("%-8s %6.2f instr-lanes/SM/cycle  %6.2f exponentials/SM/cycle  (%s)\n", name, ops / mean,
         ops * results_per_op / mean, cudaGetErrorString(cudaGetLastError()));
  cudaFree(out); cudaFree(cyc);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  run<0>("f32", 1, sms);
  run<1>("f16", 1, sms);
  run<2>("f16x2", 2, sms);
  run<3>("bf16x2", 2, sms);
  run<4>("cvt e4m3x2", 2, sms);      // "exponentials" column = f32 values converted
  run<5>("ex2+cvt", 1, sms);         // instruction lanes = steps (one MUFU + one cvt each)
  run<6>("cvt bf16x2", 2, sms);
  return 0;
}
