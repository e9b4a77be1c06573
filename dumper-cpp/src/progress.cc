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
  std::printf("{\"event\": \"%s\", \"phase\": \"%s\", \"keys_listed\": %" PRIu64 ", \"items\": %" PRIu64
              ", \"bytes\": %" PRIu64 ", \"files\": %" PRIu64 ", \"misses\": %" PRIu64 ", \"skipped_min_ttl\": %" PRIu64
              ", \"time_ms\": %" PRIu64 "}\n",
              event, kPhaseNames[p_->phase.load()], p_->keys_listed.load(), p_->items.load(), p_->bytes.load(),
              p_->files.load(), p_->misses.load(), p_->skipped_min_ttl.load(), NowMs());
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
