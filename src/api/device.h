// What the API needs to know about a CUDA device, queried once per device and cached.
#pragma once

#include "flashcute/flashcute.h"

namespace flashcute::api {

struct DeviceInfo {
  int ordinal;
  int major, minor;  // compute capability
  int num_sms;
  int smem_optin;    // bytes of shared memory a block may opt into
};

// device < 0 means the current device. Returns OK or CUDA / INVALID_ARGUMENT with a message.
flashcute_status query_device(int device, DeviceInfo* info);

// RAII: make `device` current for the scope (a no-op when it already is).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  bool ok() const { return ok_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  bool ok_ = true;
};

}  // namespace flashcute::api
