// Diagnostic event trace of the sm90 forward kernel (off unless FLASHCUTE_SM90_TRACE=1; the
// library never defines it). Built into an ablation harness (scripts/build_ablation.sh with
// -DFLASHCUTE_SM90_TRACE=1), it records SM clock stamps at the points where a tile's time goes:
// the producer thread's header/loads/claim and each consumer warpgroup's Q wait, first S,
// every key-loop turn, last P V and epilogue. benchmarks/diag_trace.py runs it and
// benchmarks/trace_report.py turns it into per-tile figures (iteration period, tile overhead).
//
// Layout of the buffer (set by the harness's fc_trace_set): for each CTA and role (0: producer
// thread, 1 + w: consumer warpgroup w's first thread) kTraceCap + 1 pairs of 64-bit words; pair 0
// holds the event count, pair i the i-th event: (clock64, event << 32 | tile).
#pragma once

#include <cute/config.hpp>

#ifndef FLASHCUTE_SM90_TRACE
#define FLASHCUTE_SM90_TRACE 0
#endif

namespace flashcute::sm90 {

enum TraceEvent : int {
  kTrStart = 1,       // the role starts its work (after the barrier inits)
  kTrTileHeader = 2,  // consumer: the tile header arrived (tile index known)
  kTrQ = 3,           // consumer: Q landed
  kTrS0 = 4,          // consumer: the tile's first S issued (its ping-pong turn taken)
  kTrP0 = 5,          // consumer: the first block's P ready (prologue softmax done)
  kTrIter = 6,        // consumer: a key-loop turn taken (before its GEMMs issue)
  kTrLastPV = 7,      // consumer: the last P V issued
  kTrLastPVDone = 8,  // consumer: the last P V finished
  kTrEpilogue = 9,    // consumer: the epilogue done (O stored)
  kTrPublish = 10,    // producer: the tile header published (Q's buffer was free)
  kTrLoads = 11,      // producer: the tile's last load issued
  kTrClaim = 12,      // producer: the next tile known (claimed or static)
  kTrEnd = 13,        // the role finished
  // Inside a key-loop turn (consumer):
  kTrQKIssued = 14,   // S = Q K^T issued
  kTrVReady = 15,     // V's stage landed
  kTrPVIssued = 16,   // O += P V issued (the turn is handed on next)
  kTrSDone = 17,      // S finished
  kTrPVDone = 18,     // P V finished
  kTrPReady = 19,     // the turn's softmax done, P converted
  // Inside the epilogue (consumer):
  kTrEpiFinal = 20,   // O normalised and converted, LSE written
  kTrEpiBar1 = 21,    // O's smem free (previous store read it), the warpgroup at its barrier
  kTrEpiStored = 22,  // O in smem (stmatrix, fence, barrier)
};
// A trace callback that records nothing (the epilogue's default).
struct NoTrace {
  CUTE_DEVICE void operator()(int) const {}
};

#if FLASHCUTE_SM90_TRACE
constexpr int kTraceCap = 16383;
constexpr int kTraceRoles = 4;  // producer + up to 3 consumer warpgroups
__device__ unsigned long long* g_fc_trace = nullptr;

// The producer thread's event count (its state lives in shared memory, fwd_kernel.cuh); each
// consumer warpgroup's recording thread keeps its own in a register (Mainloop::Consumer::trace).
CUTE_DEVICE int& trace_producer_count() {
  __shared__ int n;
  return n;
}
// The buffer's address, copied into shared memory once: read from global memory at every event
// (an L1 miss once shared memory has taken the SM's storage), it added its latency to the very
// segments being measured.
CUTE_DEVICE unsigned long long*& trace_buffer() {
  __shared__ unsigned long long* b;
  return b;
}
CUTE_DEVICE void trace_init() {
  if (threadIdx.x == 0) {
    trace_producer_count() = 0;
    trace_buffer() = g_fc_trace;
  }
}
// A role's part of the buffer: pair 0 the count, pairs 1.. the events.
CUTE_DEVICE unsigned long long* trace_region(unsigned long long* buf, int role) {
  return buf + (size_t(blockIdx.x) * kTraceRoles + role) * (kTraceCap + 1) * 2;
}
// Event i of a role (one 16-byte store).
CUTE_DEVICE void trace_event_at(int role, int i, int ev, int tile) {
  unsigned long long* buf = trace_buffer();
  if (buf == nullptr || i >= kTraceCap) return;
  *reinterpret_cast<ulonglong2*>(trace_region(buf, role) + 2 * (i + 1)) =
      make_ulonglong2(clock64(), (static_cast<unsigned long long>(ev) << 32) | static_cast<unsigned>(tile));
}
CUTE_DEVICE void trace_count(int role, int n) {
  unsigned long long* buf = trace_buffer();
  if (buf != nullptr) trace_region(buf, role)[0] = static_cast<unsigned long long>(min(n, kTraceCap));
}
// A producer event (role 0).
CUTE_DEVICE void trace_producer(int ev, int tile) {
  volatile int& n = trace_producer_count();
  const int i = n;
  n = i + 1;
  trace_event_at(0, i, ev, tile);
  trace_count(0, i + 1);
}
#define FC_TRACE_INIT() ::flashcute::sm90::trace_init()
#define FC_TRACE_PRODUCER(ev, tile) ::flashcute::sm90::trace_producer((ev), (tile))
#else
#define FC_TRACE_INIT() ((void)0)
#define FC_TRACE_PRODUCER(ev, tile) ((void)0)
#endif

}  // namespace flashcute::sm90
