// Command-line options of cachewarm-dump (getopt_long), validated with errors that name the flag.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "status.h"
#include "stream_options.h"

namespace cachewarm {

struct Options {
  std::string host = "127.0.0.1";
  int port = 11211;
  std::string out;  // required
  int threads = 2;
  uint64_t buffer_size = 4ULL << 20;
  uint64_t memory_limit = 256ULL << 20;
  uint64_t key_file_size = 256ULL << 10;
  uint64_t data_file_size = 256ULL << 20;
  int batch = 500;
  bool resume = false;
  int64_t min_ttl = 0;
  uint64_t max_items_per_second = 0;  // 0 = unlimited
  std::string node_id;  // default: <host>_<port>, sanitized
  double progress_interval_s = 1.0;
  std::string crawl_mode = "hash";  // first crawl: `lru_crawler metadump hash` or `all`
  bool reconcile_always = false;    // run the reconciliation crawl even after a complete hash crawl
  double crawl_busy_timeout_s = 60;  // how long to keep retrying a crawl the server says is busy
  uint64_t crawl_buffer = 0;        // the crawl reader's memory; 0 = auto (ParseOptions sets it)
  std::string spill_dir;            // where the crawl reader spills when its buffer is full
  uint64_t debug_write_delay_us = 0;  // testing: sleep before every write to an output file
  uint64_t debug_sync_delay_us = 0;   // testing: sleep before every fsync (file or directory)
  // Data format version of the files (docs/data-format.md): 1 or 2; 0 = the dump's own (a new dump: 2,
  // a resumed one: the version keys/META records; the stream mode: 1, its sink's records).
  int format = 0;
  // Protecting the source (source_guard.h) and the dump's order (recency.h).
  uint64_t max_bytes_per_second = 0;  // 0 = unlimited
  bool adaptive = false;              // pace by the source's probe latency
  double adaptive_target = 1.5;       // back off above this x the probes' latency before the dump
  int64_t crawl_sleep_us = -1;        // `lru_crawler sleep` during the dump; -1 = the server's own
  std::string order = "recency";      // fetch the most recently used keys first (hash crawls), or "crawl"
  StreamOptions stream;               // --to and the rest of the stream mode
  bool help = false;
  bool version = false;  // --version: print it and exit 0
};

std::string Usage();
// Parses argv; InvalidArgument names the offending flag and its allowed range.
Status ParseOptions(int argc, char** argv, Options* o);
// Bytes the dumper allocates up front for `o` (buffers, key lists, send buffers, the crawl reader's
// buffer, fixed overhead).
uint64_t PlannedMemory(const Options& o);
// The crawl reader's default buffer: as much of this as --memory-limit leaves.
constexpr uint64_t kDefaultCrawlBuffer = 64ULL << 20;
constexpr uint64_t kMinCrawlBuffer = 1ULL << 20;
// Per-worker receive buffer of the binary-protocol connection (keys too long for a meta command).
constexpr uint64_t kBinaryRecvBytes = 64ULL << 10;
// Per-key bytes of a worker's batch: the longest `mg` line for a 250-byte key in the send buffer
// (~300) and the raw key kept for its record (250).
constexpr uint64_t kSendBytesPerKey = 600;
// Key chunks the crawl may have queued for publishing (each --key-file-size bytes).
constexpr int kKeyChunksInFlight = 4;
// The recency tiers' write buffers (recency.h), when --order recency.
constexpr uint64_t kRecencyMemory = 2ULL << 20;
// The file mode's write-behind buffers per worker (async_part_writer.h): 4 x 1 MiB.
constexpr size_t kAsyncWritePiece = 1 << 20;
constexpr int kAsyncWriteBuffers = 4;
// Fixed allowance for code, stacks, the crawl buffer and small tables.
constexpr uint64_t kFixedOverhead = 16ULL << 20;
// Parses "123", "64k", "4M", "1G" (binary units).
bool ParseSize(const std::string& s, uint64_t* out);

}  // namespace cachewarm
