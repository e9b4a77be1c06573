// The DONE manifest (docs/data-format.md section 5).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data_file.h"
#include "format.h"
#include "env.h"

namespace cachewarm {

struct Manifest {
  uint16_t version = kFormatVersion;  // the data files' format version
  std::string node;
  std::string host;
  int port = 0;
  int64_t curr_items_before = 0;
  int64_t curr_items_after = 0;
  uint64_t dump_start_ms = 0;
  std::vector<PublishedFile> files;  // sorted by (chunk, part) when rendered
  uint64_t keys_listed = 0;
  uint64_t skipped_min_ttl = 0;
  uint64_t reconciled_keys = 0;
  uint64_t resumes = 0;
  double crawl_s = 0, reconcile_s = 0, total_s = 0;

  // Completeness: every key listed is a record, or a miss explained (expired / gone), or skipped by
  // --min-ttl, or undumped (named in undumped_report).
  bool complete = true;
  std::string incomplete_reason;  // "" when complete
  uint64_t misses_expired = 0;    // mg miss after the listing's exp
  uint64_t misses_gone = 0;       // mg miss before it: deleted, evicted or flushed since the crawl
  uint64_t undumped = 0;
  std::string undumped_report;    // "keys/UNDUMPED" when it names keys
  uint64_t binary_records = 0;    // records fetched with the binary protocol (their TTL: the listing's)
  uint64_t duplicates = 0;        // keys a crawl listed twice (kept once)
  int reconcile_passes = 0;
  bool reconcile_converged = true;
  uint64_t reconcile_last_new_keys = 0;

  // The crawls.
  std::vector<std::string> crawl_modes;
  std::string crawl_fallback;  // "" when there was none
  uint64_t busy_retries = 0;
  double busy_wait_s = 0;
  double answer_wait_s = 0;  // crawl requests' wait for their answer's first byte
  uint64_t crawl_buffer = 0, crawl_peak_buffered = 0, crawl_spilled = 0;

  // The order of the first crawl's key lists (recency.h) and how the source was protected
  // (source_guard.h): rendered as JSON objects, "" = not rendered.
  std::string order = "crawl";
  double first_chunk_s = 0;
  std::string tiers;
  std::string protection_json;
  // The source's clock against the dumper host's (ServerClock), ms: "clock" (docs/data-format.md
  // section 5). source_clock_known = false: not rendered.
  bool source_clock_known = false;
  int64_t source_clock_ms = 0, source_clock_lo_ms = 0, source_pid = 0, source_started = 0;
  // The measured upper bound (source_clock_ms is the ceiling when source_ceiling), and why the
  // ceiling is not known when it is not.
  int64_t source_clock_hi_ms = 0;
  bool source_ceiling = false;
  // The ceiling may be a second high (the ticks watched all straddled a whole monotonic second): the
  // copies up to a second shorter than the rule. Rendered only then.
  bool source_ceiling_unsettled = false;
  std::string source_ceiling_why;

  // The stream mode (stream.h): "cachewarm-stream", and its object's line(s) before "timings".
  std::string format = "cachewarm-dump";
  std::string extra;
};

// Sets complete / incomplete_reason from the counts.
void DecideCompleteness(Manifest* m);
std::string RenderManifest(const Manifest& m);
// Publishes OUT/DONE atomically (.tmp-DONE -> DONE).
Status WriteManifest(Env* env, const std::string& dir, const Manifest& m);

}  // namespace cachewarm
