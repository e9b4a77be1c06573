// Probe latencies, counted in buckets of three significant digits (exact below 1 ms, 0.1% above,
// up to 100 s): a dump's whole run of probes (500/s for hours) in a fixed 26 KB, and the percentiles
// of a window or of the whole dump read from it. Values are microseconds.
#pragma once
#include <cstdint>
#include <vector>

namespace cachewarm {

class LatencyHistogram {
 public:
  LatencyHistogram();
  void Record(int64_t us);
  // The value at percentile p (0..100): the lower bound of the bucket holding it; -1 when empty.
  int64_t Percentile(double p) const;
  uint64_t count() const { return count_; }
  int64_t max() const { return max_; }
  void Add(const LatencyHistogram& o);
  void Clear();

 private:
  std::vector<uint32_t> buckets_;
  uint64_t count_ = 0;
  int64_t max_ = -1;
};

}  // namespace cachewarm
