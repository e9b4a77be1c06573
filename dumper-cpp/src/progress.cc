#include "progress.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>

#include "clock.h"

namespace cachewarm {

namespace {
const char* const kPhaseNames[] = {"start", "crawl", "dump", "reconcile", "done"};
}  // namespace

void ProgressReporter::Print(const char* event) {
  std::lock_guard<std::mutex> l(out_mu_);
  const uint64_t now = NowMs(), items = p_->items.load();
  const uint64_t rate = now > last_ms_ && last_ms_ ? (items - last_items_) * 1000 / (now - last_ms_) : 0;
  last_items_ = items;
  last_ms_ = now;
  std::printf("{\"event\": \"%s\", \"phase\": \"%s\", \"keys_listed\": %" PRIu64 ", \"items\": %" PRIu64
              ", \"bytes\": %" PRIu64 ", \"files\": %" PRIu64 ", \"misses\": %" PRIu64 ", \"skipped_min_ttl\": %" PRIu64
              ", \"items_per_s\": %" PRIu64 ", \"limit_items_per_s\": %" PRIu64 ", \"batch_cap\": %" PRIu64
              ", \"backing_off\": %s, \"backoffs\": %" PRIu64 ", \"probe_us\": %" PRIu64 ", \"probe_p99_us\": %" PRIu64
              ", \"probe_baseline_us\": %" PRIu64 ", \"backed_off_ms\": %" PRIu64 ", \"time_ms\": %" PRIu64 "}\n",
              event, kPhaseNames[p_->phase.load()], p_->keys_listed.load(), items, p_->bytes.load(),
              p_->files.load(), p_->misses.load(), p_->skipped_min_ttl.load(), rate, p_->pace_rate.load(),
              p_->pace_batch.load(), p_->backing_off.load() ? "true" : "false", p_->backoffs.load(),
              p_->probe_us.load(), p_->probe_p99_us.load(), p_->probe_baseline_us.load(), p_->backed_off_ms.load(), now);
  std::fflush(stdout);
}

void ProgressReporter::Start(double interval_s) {
  stop_ = false;
  thread_ = std::thread([this, interval_s] {
    auto next = std::chrono::steady_clock::now();
    while (!stop_) {
      next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(interval_s));
      while (!stop_ && std::chrono::steady_clock::now() < next) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (!stop_) Print("progress");
    }
  });
}

void ProgressReporter::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace cachewarm
