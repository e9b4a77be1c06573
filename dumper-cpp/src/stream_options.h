// The stream mode's command-line options (`cachewarm-dump --to HOST:PORT[,…]`): with --to the dumper
// writes no data files; each fetched item goes straight to its destination node (stream.h). Parsed
// by options.cc through ParseStreamOption; ranges are checked there, what needs the whole command
// line in CheckStreamOptions.
#pragma once
#include <getopt.h>

#include <cstdint>
#include <string>

#include "status.h"

namespace cachewarm {

struct Options;

struct StreamOptions {
  std::string to;                     // destinations; empty: the file mode
  bool set_mode = false;              // --mode set (`MS`, SETQ): overwrite live values
  std::string node_key_format = "{host}/{ip}:11211";  // destination.h kEvcacheNodeKey
  int ketama_reps = 160;              // EVCache's bucket.size
  std::string hash_delimiter;         // EVCache's hash.on.partial.key; empty: the whole key
  std::string placement;              // a hashkit description (placement.h); empty: EVCache's ketama
  bool accept_oversize = false;       // exit 0 although items too large for a destination were skipped
  bool accept_evictions = false;      // ... although the destinations evicted items meanwhile
  bool accept_incomplete_dump = false;  // ... although the dump is incomplete
  bool accept_no_evictions = false;   // write to destinations running with evictions off (-M)
  std::string oversize_report;        // default: OUT/oversize.jsonl
  uint64_t write_items_per_second = 0;  // 0 = unlimited
  uint64_t write_bytes_per_second = 0;  // 0 = unlimited
  double destination_timeout_s = 120;   // how long a destination may stay unreachable
  double destination_check_interval_s = 5;  // between looks at evictions and identities
  double settle_s = 2;                  // add mode: a part's re-check waits this long (stream_recheck.h)
};

// The stream mode's default --crawl-buffer: its key lists go to a local directory, and every page of
// the crawl reader's ring is touched once per dump (64 MiB of first touches cost ~0.2 s of a 3 s
// warm on a VM, measured); past it the reader spills (crawl_stream.h).
constexpr uint64_t kStreamCrawlBuffer = 8ULL << 20;

// Option ids ParseOptions hands to ParseStreamOption (getopt_long's `val`s).
constexpr int kStreamOptionFirst = 2000;
constexpr int kStreamOptionEnd = 2100;
// getopt_long entries, ended by an all-zero entry.
extern const struct option kStreamLongOptions[];
Status ParseStreamOption(int id, const char* arg, StreamOptions* s);
// After every flag is parsed: what needs several of them.
Status CheckStreamOptions(const Options& o);
std::string StreamUsage();
// Bytes a worker's stream sink allocates up front (0 in the file mode), for the memory plan.
uint64_t StreamPlannedMemoryPerWorker(const Options& o);

}  // namespace cachewarm
