// Wall-clock and elapsed-time helpers (progress lines, dump start time, timeouts, timings).
#pragma once
#include <chrono>
#include <cstdint>

namespace cachewarm {

// Milliseconds since the Unix epoch.
inline uint64_t NowMs() {
  return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
}

// Microseconds on the monotonic clock (the source guard's probes and windows).
inline int64_t MonotonicUs() {
  return int64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                     std::chrono::steady_clock::now().time_since_epoch())
                     .count());
}

// Seconds elapsed since `t`.
inline double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace cachewarm
