// A shared pace for all workers: --max-items-per-second and --max-bytes-per-second, and what the
// adaptive source guard (source_guard.h) sets while the dump runs. Two virtual clocks, one per limit:
// the items clock advanced by each batch's items before it is sent (Acquire), the bytes clock by its
// bytes once they have arrived (Charge); a batch waits for the later of the two. (One clock advanced
// by both made the limits add up: 100k items/s and 52 MB/s of 1 KB records gave 33k items/s, not the
// 47k the tighter of the two allows, and the guard could not grow out of it: session 9's traces.)
// Zero rate = unlimited. The guard also caps the keys of one batch: a batch is a burst that
// occupies a memcached worker thread, and bursts raise the live clients' p99 more than the average
// rate does (FACTS.md) — in keys, and in bytes (a batch of 10 KB values is long at any
// key count). The guard can also pause new batches (a quiet window that re-measures the source).
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace cachewarm {

class RateLimiter {
 public:
  explicit RateLimiter(uint64_t per_second, uint64_t bytes_per_second = 0)
      : rate_(per_second), bytes_rate_(bytes_per_second) {}
  void Acquire(uint64_t n) {
    WaitWhilePaused();
    std::this_thread::sleep_until(Reserve(n));
  }
  // Paused by the guard for at most a quiet window (it always unpauses before it stops): sleep until
  // it unpauses (woken by set_paused(false), not by polling).
  void WaitWhilePaused() {
    if (!paused_.load()) return;
    std::unique_lock<std::mutex> l(pause_mu_);
    unpaused_.wait(l, [this] { return !paused_.load(); });
  }
  // The moment a batch of n items may be sent (what Acquire sleeps until), its items booked.
  std::chrono::steady_clock::time_point Reserve(uint64_t n) {
    using clock = std::chrono::steady_clock;
    std::lock_guard<std::mutex> l(mu_);
    const clock::time_point now = clock::now();
    const uint64_t rate = rate_.load();
    if (rate == 0 && bytes_rate_.load() == 0) return now;
    if (next_items_ < now) next_items_ = now;
    const clock::time_point slot = std::max(next_items_, next_bytes_);
    if (rate) next_items_ += std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(double(n) / double(rate)));
    return slot;
  }
  // The bytes a batch brought (counted against --max-bytes-per-second: known only afterwards).
  void Charge(uint64_t bytes) {
    const uint64_t rate = bytes_rate_.load();
    if (rate == 0) return;
    using clock = std::chrono::steady_clock;
    std::lock_guard<std::mutex> l(mu_);
    const clock::time_point now = clock::now();
    if (next_bytes_ < now) next_bytes_ = now;
    next_bytes_ += std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(double(bytes) / double(rate)));
  }
  uint64_t rate() const { return rate_.load(); }
  uint64_t bytes_rate() const { return bytes_rate_.load(); }
  // The adaptive guard's controls: items/s and bytes/s (0 = unlimited), the most keys and the most
  // bytes of values per batch (0 = no cap), and a pause of new batches.
  void set_rate(uint64_t per_second) { rate_.store(per_second); }
  void set_bytes_rate(uint64_t per_second) { bytes_rate_.store(per_second); }
  void set_batch_cap(int keys) { batch_cap_.store(keys); }
  int batch_cap() const { return batch_cap_.load(); }
  void set_batch_bytes_cap(uint64_t bytes) { batch_bytes_cap_.store(bytes); }
  uint64_t batch_bytes_cap() const { return batch_bytes_cap_.load(); }
  void set_paused(bool p) {
    {
      std::lock_guard<std::mutex> l(pause_mu_);  // a waiter between its check and its wait sees it
      paused_.store(p);
    }
    if (!p) unpaused_.notify_all();
  }
  bool paused() const { return paused_.load(); }

 private:
  std::atomic<uint64_t> rate_;
  std::atomic<uint64_t> bytes_rate_;
  std::atomic<int> batch_cap_{0};
  std::atomic<uint64_t> batch_bytes_cap_{0};
  std::atomic<bool> paused_{false};
  std::mutex pause_mu_;
  std::condition_variable unpaused_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point next_items_{}, next_bytes_{};
};

}  // namespace cachewarm
