// The stream mode (`cachewarm-dump --to`): the dump's fetched items go straight to the destination
// node(s) — no data files. This is what the workers' sinks (stream_sink.h) share:
//   - the destinations: resolved once, the preflight (destination.h: version, item size, evictions
//     on/off), EVCache's ketama ring (placement.h, hashkit) when there are several;
//   - the checkpoint of what every destination acknowledged: keys/STREAMED, one line per part (a key
//     range of a chunk, like a data file) with its per-destination counts, synced; keys/STREAM, the
//     routing and each destination's identity (pid, start time) and eviction count at the start.
//     --resume continues after the last acknowledged part of each chunk and tags the writes of the
//     part it redoes, so an NS there is checked against our own earlier write (resent, not live);
//   - the oversize report (JSON lines: items never sent because their destination cannot hold them);
//   - a monitor thread that reads every destination's `stats` every --destination-check-interval:
//     evictions while we write, and a restart (its items are gone: the stream fails loudly);
//   - the summary: the dump's completeness numbers and the destinations' stored / already present /
//     resent / expired / oversize, judged like the Python populator (docs/populator.md): the run is
//     incomplete (exit 1) for oversize items, evictions or an incomplete dump unless accepted.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "checkpoint.h"
#include "destination.h"
#include "env.h"
#include "format.h"  // kExpiryMargin
#include "placement.h"
#include "manifest.h"
#include "options.h"
#include "part_writer.h"
#include "progress.h"
#include "rate_limiter.h"
#include "server_clock.h"
#include "status.h"
#include "stream_recheck.h"
#include "work_queue.h"

namespace cachewarm {

// What became of the records of a part (or of the run) at one destination.
struct StreamCounts {
  uint64_t stored = 0;   // written
  uint64_t present = 0;  // NS: a live write had stored the key first (add mode kept it)
  uint64_t resent = 0;   // NS on a resend whose value and flags are ours: our own earlier write
  uint64_t expired = 0;  // expiry (less the margin) passed before sending: not sent
  uint64_t oversize = 0; // too large for the destination: never sent, in the oversize report
  uint64_t binary = 0;   // written (or found) through the binary protocol
  uint64_t items() const { return stored + present + resent + expired + oversize; }
  uint64_t written() const { return stored + present + resent; }
  void Add(const StreamCounts& o);
};

struct OversizeItem {
  size_t dest = 0;
  std::string key;  // raw bytes
  uint64_t value_len = 0;
  uint32_t flags = 0;
};

class Stream {
 public:
  Stream(const Options& o, Env* env);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // After the checkpoint is open: the destinations (resolved, read, refused if they must be, their
  // clocks measured), the ring, keys/STREAM (written fresh, or compared on --resume).
  Status Open();
  // After the checkpoint's scan (which, with no data files, lists every chunk from its start): the
  // acknowledged parts of keys/STREAMED are recorded as published; `todo` keeps what is left.
  Status Resume(Checkpoint* cp, Progress* p, std::vector<ChunkTask>* todo);
  std::unique_ptr<PartWriter> NewSink();
  // The monitor thread (evictions, restarts); a restart fails `queue`.
  void StartMonitor(WorkQueue* queue);
  void StopMonitor();
  // After the workers: a last look at the destinations, the summary into the manifest (DONE).
  Status Finish(Manifest* m);
  // After DONE: prints the summary (and the reasons the run is incomplete on stderr).
  void Report();
  // A resumed run that finds DONE: the saved summary, judged again with this run's accept flags.
  Status ReportDone();
  // Whether the destinations hold every item (or every reason they do not was accepted).
  bool ok() const { return ok_; }

  // For the sinks.
  const Options& options() const { return o_; }
  size_t destinations() const { return eps_.size(); }
  const Endpoint& endpoint(size_t i) const { return eps_[i]; }
  const ItemLimit& limit(size_t i) const { return infos_[i].limit; }
  // Destination i's clock against this host's, its lower bound (ServerClock::lo), measured at Open
  // (to a few ms) and again by the monitor every kClockRemeasureS (memcached's timer slips): a record whose exptime was rounded down by f goes there with the absolute T
  // exptime + floor(f + lo), never later than the source, at most ~1 s earlier. The monitor's looks
  // and every reconnect check that the clock has not moved since (NewOffset).
  double clock_low(size_t i) const { return lows_[i].load(std::memory_order_relaxed); }
  size_t Route(const Slice& key) const {
    return placement_ ? placement_->Index(key) : 0;
  }
  bool add_mode() const { return !o_.stream.set_mode; }
  // Whether the part may hold items an earlier run sent: a resumed chunk's parts from where it
  // resumes (an earlier run may have cut its parts elsewhere).
  bool IsResend(uint64_t chunk, uint32_t part);
  std::string PartName(uint64_t chunk, uint32_t part) const;
  RateLimiter* item_limiter() { return &items_; }
  RateLimiter* byte_limiter() { return &bytes_; }
  // A destination's identity now, against the one at the start: Server error if it restarted.
  Status CheckIdentity(size_t i);
  // A part every destination acknowledged: oversize lines, then its keys/STREAMED line (synced).
  // `recheck`: the part's re-check counts (add mode), null in set mode.
  Status RecordPart(const PublishedFile& f, const std::vector<StreamCounts>& counts,
                    const std::vector<OversizeItem>& oversize, const RecheckCounts* recheck = nullptr);
  // A re-checked part's keys and source stamps, for the target check that follows the warm
  // (keys/STAMPS: per record a u8 key length, the key, u64 source CAS, i64 source expiry, i64 value
  // length, little-endian: the populator's stamp blobs; never synced: a hint, not a checkpoint).
  Status RecordStamps(const RecheckPart& part);
  // A failure off the workers' threads (a part's re-check): the dump is aborted with it.
  void Fail(const Status& s);

 private:
  // One look at every destination; `retry`: keep trying an unreachable one for
  // --destination-timeout (the monitor does not: the sinks see a lost destination themselves).
  Status Probe(bool first, bool retry = true);
  Status WriteMeta();
  Status CheckMeta(const std::string& text);
  std::string Routing() const;
  std::string SummaryBody(const Manifest& m);
  void Judge(uint64_t oversize, uint64_t evictions, bool dump_complete, const std::string& evictions_by_node,
             const std::string& dump_reason, const std::string& report);
  std::string OversizeReportPath() const;
  Status DedupOversizeReport();

  const Options& o_;
  Env* env_;
  std::vector<Endpoint> eps_;
  std::vector<DestinationInfo> infos_;
  std::vector<ServerClock> clocks_;  // each destination's, measured at Open (keys/STREAM keeps them)
  std::unique_ptr<std::atomic<double>[]> lows_;  // clock_low(i): as last measured
  // A later measurement of destination i's clock offset: Server error when it moved by more than the
  // measurement's own rounding (a clock step, a paused VM): the items already written there would
  // expire that many seconds off, so the stream stops naming the node and both offsets.
  Status NewOffset(size_t i, int64_t offset);
  std::vector<std::pair<int64_t, uint64_t>> evictions_base_;  // (pid, evictions) at the first run's start
  // EVCache's ring or --placement-description's (another client's); none for one destination
  std::unique_ptr<Placement> placement_;
  RateLimiter items_, bytes_;

  std::mutex mu_;
  std::map<uint64_t, uint32_t> resend_;  // chunk -> the first part a resumed run redoes
  std::vector<StreamCounts> totals_;
  RecheckCounts recheck_totals_;
  WorkQueue* queue_ = nullptr;  // StartMonitor's: Fail aborts it
  std::unique_ptr<WritableFile> stamps_log_;
  uint64_t records_ = 0, bytes_total_ = 0;
  std::unique_ptr<WritableFile> streamed_log_, oversize_log_;
  uint64_t oversize_lines_ = 0;

  std::mutex probe_mu_;  // the monitor and the final look share the control connections
  std::vector<std::unique_ptr<Conn>> control_;
  std::vector<uint64_t> evictions_;  // since the start, per destination
  std::thread monitor_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = true;

  std::string summary_;  // the summary's body (DONE's "stream" object)
  std::vector<std::string> incomplete_, accepted_;
  bool ok_ = true;
};

}  // namespace cachewarm
