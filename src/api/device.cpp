#include "device.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>

#include "errors.h"

namespace flashcute::api {

namespace {
constexpr int kMaxDevices = 64;
DeviceInfo g_cache[kMaxDevices];
std::atomic<bool> g_cached[kMaxDevices];
std::mutex g_mutex;
}  // namespace

flashcute_status query_device(int device, DeviceInfo* info) {
  if (device < 0) {
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) {
      return fail(FLASHCUTE_ERROR_CUDA, "cudaGetDevice failed: %s (is an NVIDIA GPU and driver present?)",
                  cudaGetErrorString(e));
    }
  }
  if (device >= kMaxDevices) {
    return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "device: %d is out of range", device);
  }
  if (g_cached[device].load(std::memory_order_acquire)) {
    *info = g_cache[device];
    return FLASHCUTE_OK;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceInfo d{};
  d.ordinal = device;
  cudaError_t e = cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&d.num_sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e != cudaSuccess) {
    return fail(e == cudaErrorInvalidDevice ? FLASHCUTE_ERROR_INVALID_ARGUMENT : FLASHCUTE_ERROR_CUDA,
                "device %d: cudaDeviceGetAttribute failed: %s", device, cudaGetErrorString(e));
  }
  g_cache[device] = d;
  g_cached[device].store(true, std::memory_order_release);
  *info = d;
  return FLASHCUTE_OK;
}

DeviceGuard::DeviceGuard(int device) {
  if (device < 0) return;
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    ok_ = false;
    return;
  }
  if (previous_ != device) {
    ok_ = cudaSetDevice(device) == cudaSuccess;
    switched_ = ok_;
  }
}

DeviceGuard::~DeviceGuard() {
  if (switched_) cudaSetDevice(previous_);
}

}  // namespace flashcute::api
