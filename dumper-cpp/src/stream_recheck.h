// The stream mode's re-check (docs/reliability.md "Live traffic during the warm"), the populator's
// per-file re-check applied to a stream part: once the settle delay has passed since the part's
// writes were acknowledged, every key our binary ADD stored is looked at on the source
// (`mg <key> c t s`, between two `stats` that bound the source's clock) and, where the source
// changed it since the dumper read it, our copy is deleted from its destination only while it is
// still ours (`md <key> C<c_w> q`); a destination that holds a client's value instead is compared
// with the source and deleted (guarded by its CAS) only when, after the settle delay, it still
// differs on the same CAS. The decisions are dumper-cpp/core's (cw_source_verdict,
// cw_md_outcome, cw_compare_verdict), shared with the populator; this file is only the network work.
//
// A sink hands each finished part over (its keys and stamps, in fixed memory: the sink cuts a part
// at kPartBytes and waits while kBudgetBytes are queued) with what to run once it is re-checked
// (the part's checkpoint record): a thread of its own runs them in order, so the fetching never
// waits on the settle delay, and a part is recorded (and so never redone by --resume) only once its
// re-check is done.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "destination.h"
#include "status.h"

namespace cachewarm {

// What the re-checks found (summed over parts; the summary's re-check counts).
struct RecheckCounts {
  uint64_t rechecked = 0;         // items looked at on the source
  uint64_t changed_at_source = 0; // the source no longer held them as read: our copy was stale
  uint64_t deleted_stale = 0;     // stale copies deleted (ours, or a client's op on ours)
  uint64_t client_overwrote = 0;  // the destination held a client's later write, equal to the source's: kept
  uint64_t unsettled = 0;         // a destination value still changing after the last look: left, reported
  uint64_t cas_only = 0;          // keys no meta command names: compared by CAS and size only
  void Add(const RecheckCounts& o);
};

// One stored record to re-check: its source stamp, our write's CAS and its key (in the part's arena).
struct RecheckEntry {
  uint64_t source_cas = 0;
  int64_t source_exp = -1;  // on the source's clock; -1 = never
  int64_t value_len = 0;
  uint64_t ours = 0;        // c_w; 0 = a resend's EXISTS (may be our earlier write, may be a client's)
  uint32_t key_off = 0;
  uint8_t key_len = 0;
  uint16_t dest = 0;
  bool recheck = true;  // false: kept a live value (our ADD found the key): nothing of ours to check
};

struct RecheckPart {
  std::string keys;  // the entries' keys, back to back
  std::vector<RecheckEntry> entries;
  double acked_at = 0;  // monotonic seconds: every write of the part acknowledged
  uint64_t bytes() const { return keys.size() + entries.size() * sizeof(RecheckEntry); }
};

class StreamRecheck {
 public:
  // A part's re-check keys and entries stay below this (the sink cuts the part there) ...
  static constexpr uint64_t kPartBytes = 4ULL << 20;
  // ... and a sink's queued parts below this: Push waits (memory plan: PlannedMemory).
  static constexpr uint64_t kBudgetBytes = 32ULL << 20;
  static uint64_t PlannedMemory() { return kBudgetBytes + kPartBytes; }

  // on_error: once, on the thread, with the first failure (the dump is then aborted).
  StreamRecheck(std::string source_host, int source_port, std::vector<Endpoint> dests, double settle_s,
                double unavailable_s, std::function<void(const Status&)> on_error);
  ~StreamRecheck();

  using Then = std::function<Status(const RecheckPart&, const RecheckCounts&)>;
  // Queues a part's re-check, then `then` with the part and its counts (in order with everything queued).
  Status Push(RecheckPart part, Then then);
  // Queues fn to run after everything queued so far (not at all after a failure).
  Status Call(std::function<void()> fn);
  // Waits until everything queued has run (or failed).
  void Drain();
  // The first failure (OK if none).
  Status error();

  // For tests: re-checks a part now, on the calling thread.
  Status RunNow(const RecheckPart& part, RecheckCounts* out) { return Recheck(part, out); }

 private:
  struct Job {
    RecheckPart part;
    bool has_part = false;
    Then then;
    std::function<void()> call;
  };
  void Loop();
  Status Recheck(const RecheckPart& part, RecheckCounts* out);
  Status RecheckOnce(const RecheckPart& part, RecheckCounts* out);

  const std::string source_host_;
  const int source_port_;
  const std::vector<Endpoint> dests_;
  const double settle_s_, unavailable_s_;
  std::function<void(const Status&)> on_error_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  uint64_t queued_bytes_ = 0;
  bool busy_ = false, stop_ = false;
  Status error_;
  std::thread thread_;
};

}  // namespace cachewarm
