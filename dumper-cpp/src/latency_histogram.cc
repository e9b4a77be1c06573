#include "latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace cachewarm {

namespace {
constexpr int64_t kExact = 1000;          // below: one bucket per microsecond
constexpr int64_t kMaxUs = 100000000;     // 100 s: anything slower is counted as this
constexpr int kDecades = 5;               // 1 ms .. 100 s, 900 buckets each
constexpr size_t kBuckets = size_t(kExact) + size_t(kDecades) * 900;

size_t IndexOf(int64_t us) {
  us = std::clamp<int64_t>(us, 0, kMaxUs - 1);
  if (us < kExact) return size_t(us);
  int64_t scale = 1;
  int e = 0;
  while (us / scale >= 1000) {
    scale *= 10;
    e++;
  }
  return size_t(kExact) + size_t(e - 1) * 900 + size_t(us / scale - 100);
}

int64_t ValueOf(size_t i) {
  if (i < size_t(kExact)) return int64_t(i);
  const size_t e = (i - size_t(kExact)) / 900 + 1;
  const int64_t m = int64_t((i - size_t(kExact)) % 900) + 100;
  int64_t scale = 1;
  for (size_t k = 0; k < e; k++) scale *= 10;
  return m * scale;
}
}  // namespace

LatencyHistogram::LatencyHistogram() : buckets_(kBuckets, 0) {}

void LatencyHistogram::Record(int64_t us) {
  buckets_[IndexOf(us)]++;
  count_++;
  max_ = std::max(max_, us);
}

int64_t LatencyHistogram::Percentile(double p) const {
  if (count_ == 0) return -1;
  // The smallest value with at least p% of the samples at or below it (nearest rank).
  uint64_t rank = uint64_t(std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * double(count_)));
  rank = std::max<uint64_t>(1, rank);
  uint64_t seen = 0;
  for (size_t i = 0; i < buckets_.size(); i++) {
    seen += buckets_[i];
    if (seen >= rank) return ValueOf(i);
  }
  return ValueOf(buckets_.size() - 1);
}

void LatencyHistogram::Add(const LatencyHistogram& o) {
  for (size_t i = 0; i < buckets_.size(); i++) buckets_[i] += o.buckets_[i];
  count_ += o.count_;
  max_ = std::max(max_, o.max_);
}

void LatencyHistogram::Clear() {
  std::fill(buckets_.begin(), buckets_.end(), 0);
  count_ = 0;
  max_ = -1;
}

}  // namespace cachewarm
