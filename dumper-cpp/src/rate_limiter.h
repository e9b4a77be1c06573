// A shared rate limit (--max-items-per-second) for all workers: a virtual clock advanced by each
// request; callers sleep until their slot. Zero rate = unlimited.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

namespace cachewarm {

class RateLimiter {
 public:
  explicit RateLimiter(uint64_t per_second) : rate_(per_second) {}
  void Acquire(uint64_t n) {
    if (rate_ == 0) return;
    using clock = std::chrono::steady_clock;
    clock::time_point slot;
    {
      std::lock_guard<std::mutex> l(mu_);
      const clock::time_point now = clock::now();
      if (next_ < now) next_ = now;
      slot = next_;
      next_ += std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(double(n) / double(rate_)));
    }
    std::this_thread::sleep_until(slot);
  }
  uint64_t rate() const { return rate_; }

 private:
  uint64_t rate_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point next_{};
};

}  // namespace cachewarm
