#include "options.h"

#include <getopt.h>

#include <cctype>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <vector>

#include "data_file.h"
#include "crawl_stream.h"
#include "format.h"

namespace cachewarm {

std::string Usage() {
  return R"(usage: cachewarm-dump --out DIR [options]

Dumps every item of a memcached server into chunked, checksummed data files (docs/data-format.md).
Exit status 0 only when OUT/DONE has been published.

  --host HOST                 memcached host (default 127.0.0.1)
  --port PORT                 memcached port, 1..65535 (default 11211)
  --out DIR                   output directory (created if missing; required)
  --threads N                 worker threads / connections, 1..256 (default 2)
  --buffer-size BYTES         receive buffer per worker (2 each), 64k..1G (default 4M)
  --memory-limit BYTES        hard limit for all buffers, 16M..1T (default 256M)
  --key-file-size BYTES       size of a key-list chunk, 4k..1G (default 256k)
  --data-file-size BYTES      start a new data file part past this size, 4k..1T (default 256M)
  --batch N                   max keys per pipelined mg batch (a batch also stops near
                              1 MiB of values), 1..100000 (default 500)
  --resume                    continue the dump already in --out (after a crash or kill)
  --min-ttl SECONDS           skip items expiring in less than this, 0..2147483647 (default 0)
  --max-items-per-second N    rate limit for the whole dump, 0 = unlimited (default 0)
  --node-id ID                source node id in file names, )" + std::string(kNodeIdPattern) + R"( (default HOST_PORT)
  --progress-interval SECONDS seconds between JSON progress lines on stdout, 0.05..3600 (default 1)
  --crawl hash|all            first crawl walks the hash table (default; lists every item) or the
                              LRUs (skips busy items; reconciliation then always runs)
  --reconcile auto|always     reconciliation crawl only when needed (default) or always
  --crawl-busy-timeout SECONDS
                              while memcached answers a crawl request with BUSY or "ERROR locked
                              try again later" (another crawl is running), retry with exponential
                              backoff for up to this long, then fail; an unanswered request waits
                              as long (at least 60 s); 0..86400 (default 60)
  --crawl-buffer BYTES        memory between the crawl socket and the key lists (the socket is
                              always read at once; past this, bytes spill to --spill-dir),
                              1M..64G (default: 64M, or what --memory-limit leaves)
  --spill-dir DIR             where the crawl reader spills when its buffer is full: an unlinked,
                              never-fsynced file (default $TMPDIR, else /tmp)
  --format 1|2|3              data format version (docs/data-format.md): 3 (default for a new
                              dump) writes each record as the memcached command that stores it
                              behind the item's CAS and expiry on the source (the populator's
                              re-check needs them); 2 the commands alone; 1 the binary records of
                              version 1. --resume continues in the dump's own version
  --max-bytes-per-second BYTES
                              byte rate limit for the whole dump (values + keys read), k, M, G
                              suffixes, 0 = unlimited (default 0)
  --adaptive                  protect the source's live clients: fetch in short batches (at most
                              32 keys, 64 KiB), probe the source's latency (a miss `mg` every 2 ms
                              on 4 connections of its own) and, when its p99 rises above
                              --adaptive-target x its p99 with no dump, halve the batches and slow
                              the crawl, then cut the rate; speed up again when it falls (AIMD).
                              --max-items-per-second and --batch stay the ceilings
  --adaptive-target RATIO     1.05..100 (default 1.5)
  --crawl-sleep-us N          memcached's `lru_crawler sleep` while the dump runs (microseconds per
                              1000 items the crawler lists; restored afterwards), 0..1000000
                              (default: the server's own; with --adaptive the floor it backs off from)
  --order recency|crawl       recency (default): list every key first (a hash crawl), then fetch the
                              most recently used first (by the crawl's la=, in tiers on disk); crawl:
                              fetch in the crawl's order while it runs. An LRU crawl (--crawl all, or
                              a server without hash crawls) always fetches in crawl order
  --help                      this text
  --version                   the version (cachewarm's: one number for the agent and the dumper)

Testing only (a deliberately slow output):
  --debug-write-delay-us N    sleep N microseconds before every write to an output file
  --debug-sync-delay-us N     sleep N microseconds before every fsync (file or directory)

Sizes accept k, M, G suffixes (powers of 1024).
)" + StreamUsage();
}

bool ParseSize(const std::string& s, uint64_t* out) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0) return false;
  std::string suf(end);
  uint64_t mul = 1;
  if (suf == "k" || suf == "K") mul = 1ULL << 10;
  else if (suf == "m" || suf == "M") mul = 1ULL << 20;
  else if (suf == "g" || suf == "G") mul = 1ULL << 30;
  else if (suf == "t" || suf == "T") mul = 1ULL << 40;
  else if (!suf.empty()) return false;
  if (v > UINT64_MAX / mul) return false;
  *out = v * mul;
  return true;
}

namespace {

Status SizeFlag(const char* flag, const char* arg, uint64_t lo, uint64_t hi, uint64_t* out) {
  uint64_t v;
  if (!ParseSize(arg, &v))
    return Status::InvalidArgument(std::string("--") + flag + ": '" + arg + "' is not a size (e.g. 4096, 64k, 4M)");
  if (v < lo || v > hi)
    return Status::InvalidArgument(std::string("--") + flag + " " + arg + " is out of range " + std::to_string(lo) +
                                   ".." + std::to_string(hi) + " bytes");
  *out = v;
  return Status::OK();
}

Status IntFlag(const char* flag, const char* arg, int64_t lo, int64_t hi, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(arg, &end, 10);
  if (errno != 0 || end == arg || *end != '\0')
    return Status::InvalidArgument(std::string("--") + flag + ": '" + arg + "' is not an integer");
  if (v < lo || v > hi)
    return Status::InvalidArgument(std::string("--") + flag + " " + arg + " is out of range " + std::to_string(lo) +
                                   ".." + std::to_string(hi));
  *out = v;
  return Status::OK();
}

// The same for an int or unsigned field (the range keeps the value representable).
template <typename T>
Status IntFlag(const char* flag, const char* arg, int64_t lo, int64_t hi, T* out) {
  int64_t v;
  CW_RETURN_IF_ERROR(IntFlag(flag, arg, lo, hi, &v));
  *out = T(v);
  return Status::OK();
}

Status NonEmptyFlag(const char* flag, const char* arg, std::string* out) {
  if (!*arg) return Status::InvalidArgument(std::string("--") + flag + " must not be empty");
  *out = arg;
  return Status::OK();
}

}  // namespace

namespace {
// Everything but the crawl reader's buffer.
uint64_t PlannedMemoryBeforeCrawlBuffer(const Options& o) {
  // Per worker: 2 receive buffers, one key list (+ its exptimes and index), the send buffer, the
  // binary-protocol receive buffer, the file mode's write-behind buffers.
  const uint64_t per_worker = 2 * o.buffer_size + 2 * o.key_file_size + uint64_t(o.batch) * (kSendBytesPerKey + 16) +
                              kBinaryRecvBytes + StreamPlannedMemoryPerWorker(o) +
                              (o.stream.to.empty() ? uint64_t(kAsyncWriteBuffers) * kAsyncWritePiece : 0);
  // The crawl: key chunks in flight, and the reader's two fixed pieces.
  return uint64_t(o.threads) * per_worker + uint64_t(2 + kKeyChunksInFlight) * o.key_file_size +
         2 * kCrawlStreamPiece + kFixedOverhead + (o.order == "recency" ? kRecencyMemory : 0);
}
}  // namespace

uint64_t PlannedMemory(const Options& o) { return PlannedMemoryBeforeCrawlBuffer(o) + o.crawl_buffer; }

Status ParseOptions(int argc, char** argv, Options* o) {
  enum {
    kHost = 1000, kPort, kOut, kThreads, kBuffer, kMemory, kKeyFile, kDataFile, kBatch, kResume, kMinTtl,
    kRate, kNode, kProgress, kCrawl, kReconcile, kBusyTimeout, kCrawlBuffer, kSpillDir, kWriteDelay, kSyncDelay,
    kHelp, kVersion, kFormat, kByteRate, kAdaptive, kAdaptiveTarget, kCrawlSleep, kOrder
  };
  static const struct option longopts[] = {
      {"host", required_argument, nullptr, kHost},
      {"port", required_argument, nullptr, kPort},
      {"out", required_argument, nullptr, kOut},
      {"threads", required_argument, nullptr, kThreads},
      {"buffer-size", required_argument, nullptr, kBuffer},
      {"memory-limit", required_argument, nullptr, kMemory},
      {"key-file-size", required_argument, nullptr, kKeyFile},
      {"data-file-size", required_argument, nullptr, kDataFile},
      {"batch", required_argument, nullptr, kBatch},
      {"resume", no_argument, nullptr, kResume},
      {"min-ttl", required_argument, nullptr, kMinTtl},
      {"max-items-per-second", required_argument, nullptr, kRate},
      {"node-id", required_argument, nullptr, kNode},
      {"progress-interval", required_argument, nullptr, kProgress},
      {"crawl", required_argument, nullptr, kCrawl},
      {"reconcile", required_argument, nullptr, kReconcile},
      {"crawl-busy-timeout", required_argument, nullptr, kBusyTimeout},
      {"crawl-buffer", required_argument, nullptr, kCrawlBuffer},
      {"spill-dir", required_argument, nullptr, kSpillDir},
      {"debug-write-delay-us", required_argument, nullptr, kWriteDelay},
      {"debug-sync-delay-us", required_argument, nullptr, kSyncDelay},
      {"help", no_argument, nullptr, kHelp},
      {"version", no_argument, nullptr, kVersion},
      {"format", required_argument, nullptr, kFormat},
      {"max-bytes-per-second", required_argument, nullptr, kByteRate},
      {"adaptive", no_argument, nullptr, kAdaptive},
      {"adaptive-target", required_argument, nullptr, kAdaptiveTarget},
      {"crawl-sleep-us", required_argument, nullptr, kCrawlSleep},
      {"order", required_argument, nullptr, kOrder},
      {nullptr, 0, nullptr, 0},
  };
  std::vector<struct option> all(longopts, longopts + sizeof longopts / sizeof longopts[0] - 1);
  for (const struct option* s = kStreamLongOptions; s->name; s++) all.push_back(*s);
  all.push_back({nullptr, 0, nullptr, 0});
  optind = 0;  // reinitialize getopt (tests parse several command lines)
  opterr = 0;
  for (;;) {
    int idx = 0;
    int c = getopt_long(argc, argv, ":", all.data(), &idx);
    if (c == -1) break;
    const char* a = optarg;
    if (c >= kStreamOptionFirst && c < kStreamOptionEnd) {
      CW_RETURN_IF_ERROR(ParseStreamOption(c, a, &o->stream));
      continue;
    }
    switch (c) {
      case kHost: CW_RETURN_IF_ERROR(NonEmptyFlag("host", a, &o->host)); break;
      case kPort: CW_RETURN_IF_ERROR(IntFlag("port", a, 1, 65535, &o->port)); break;
      case kOut: CW_RETURN_IF_ERROR(NonEmptyFlag("out", a, &o->out)); break;
      case kThreads: CW_RETURN_IF_ERROR(IntFlag("threads", a, 1, 256, &o->threads)); break;
      case kBuffer: CW_RETURN_IF_ERROR(SizeFlag("buffer-size", a, 64ULL << 10, 1ULL << 30, &o->buffer_size)); break;
      case kMemory: CW_RETURN_IF_ERROR(SizeFlag("memory-limit", a, 16ULL << 20, 1ULL << 40, &o->memory_limit)); break;
      case kKeyFile: CW_RETURN_IF_ERROR(SizeFlag("key-file-size", a, 4ULL << 10, 1ULL << 30, &o->key_file_size)); break;
      case kDataFile: CW_RETURN_IF_ERROR(SizeFlag("data-file-size", a, 4ULL << 10, 1ULL << 40, &o->data_file_size)); break;
      case kBatch: CW_RETURN_IF_ERROR(IntFlag("batch", a, 1, 100000, &o->batch)); break;
      case kResume: o->resume = true; break;
      case kMinTtl: CW_RETURN_IF_ERROR(IntFlag("min-ttl", a, 0, 2147483647, &o->min_ttl)); break;
      case kRate: CW_RETURN_IF_ERROR(IntFlag("max-items-per-second", a, 0, 1000000000, &o->max_items_per_second)); break;
      case kNode:
        if (!ValidNodeId(a))
          return Status::InvalidArgument(std::string("--node-id '") + a + "' must match " + kNodeIdPattern);
        o->node_id = a;
        break;
      case kProgress: {
        char* end = nullptr;
        double d = std::strtod(a, &end);
        if (end == a || *end || !(d >= 0.05 && d <= 3600))
          return Status::InvalidArgument(std::string("--progress-interval ") + a + " is out of range 0.05..3600");
        o->progress_interval_s = d;
        break;
      }
      case kCrawl:
        if (std::string(a) != "hash" && std::string(a) != "all")
          return Status::InvalidArgument(std::string("--crawl must be hash or all, not '") + a + "'");
        o->crawl_mode = a;
        break;
      case kReconcile:
        if (std::string(a) != "auto" && std::string(a) != "always")
          return Status::InvalidArgument(std::string("--reconcile must be auto or always, not '") + a + "'");
        o->reconcile_always = std::string(a) == "always";
        break;
      case kBusyTimeout: {
        char* end = nullptr;
        double d = std::strtod(a, &end);
        if (end == a || *end || !(d >= 0 && d <= 86400))
          return Status::InvalidArgument(std::string("--crawl-busy-timeout ") + a + " is out of range 0..86400");
        o->crawl_busy_timeout_s = d;
        break;
      }
      case kCrawlBuffer: CW_RETURN_IF_ERROR(SizeFlag("crawl-buffer", a, kMinCrawlBuffer, 64ULL << 30, &o->crawl_buffer)); break;
      case kSpillDir: CW_RETURN_IF_ERROR(NonEmptyFlag("spill-dir", a, &o->spill_dir)); break;
      case kWriteDelay: CW_RETURN_IF_ERROR(IntFlag("debug-write-delay-us", a, 0, 10000000, &o->debug_write_delay_us)); break;
      case kSyncDelay: CW_RETURN_IF_ERROR(IntFlag("debug-sync-delay-us", a, 0, 10000000, &o->debug_sync_delay_us)); break;
      case kFormat: CW_RETURN_IF_ERROR(IntFlag("format", a, 1, 3, &o->format)); break;
      case kHelp: o->help = true; return Status::OK();
      case kVersion: o->version = true; return Status::OK();
      case kByteRate: CW_RETURN_IF_ERROR(SizeFlag("max-bytes-per-second", a, 0, 1ULL << 40, &o->max_bytes_per_second)); break;
      case kAdaptive: o->adaptive = true; break;
      case kAdaptiveTarget: {
        char* end = nullptr;
        double d = std::strtod(a, &end);
        if (end == a || *end || !(d >= 1.05 && d <= 100))
          return Status::InvalidArgument(std::string("--adaptive-target ") + a + " is out of range 1.05..100");
        o->adaptive_target = d;
        break;
      }
      case kCrawlSleep: CW_RETURN_IF_ERROR(IntFlag("crawl-sleep-us", a, 0, 1000000, &o->crawl_sleep_us)); break;
      case kOrder:
        if (std::string(a) != "recency" && std::string(a) != "crawl")
          return Status::InvalidArgument(std::string("--order must be recency or crawl, not '") + a + "'");
        o->order = a;
        break;
      case ':': return Status::InvalidArgument(std::string(argv[optind - 1]) + " needs a value");
      default: return Status::InvalidArgument(std::string("unknown option ") + argv[optind - 1]);
    }
  }
  if (optind < argc) return Status::InvalidArgument(std::string("unexpected argument '") + argv[optind] + "'");
  if (o->out.empty()) return Status::InvalidArgument("--out DIR is required");
  CW_RETURN_IF_ERROR(CheckStreamOptions(*o));
  if (o->node_id.empty()) {
    std::string n = o->host + "_" + std::to_string(o->port);
    for (char& ch : n)
      if (!IsNodeIdChar(static_cast<unsigned char>(ch))) ch = '_';
    if (n.size() > kMaxNodeIdLen) n.resize(kMaxNodeIdLen);
    o->node_id = n;
  }
  if (o->order != "recency" || o->crawl_mode != "hash") o->order = "crawl";
  if (o->spill_dir.empty()) {
    const char* t = std::getenv("TMPDIR");
    o->spill_dir = t && *t ? t : "/tmp";
  }
  const uint64_t rest = PlannedMemoryBeforeCrawlBuffer(*o);
  const bool auto_buffer = o->crawl_buffer == 0;
  if (auto_buffer && rest + kMinCrawlBuffer <= o->memory_limit)
    o->crawl_buffer = std::min<uint64_t>(o->stream.to.empty() ? kDefaultCrawlBuffer : kStreamCrawlBuffer,
                                         o->memory_limit - rest);
  const uint64_t need = rest + std::max<uint64_t>(o->crawl_buffer, kMinCrawlBuffer);
  if (need > o->memory_limit)
    return Status::InvalidArgument(
        "--memory-limit " + std::to_string(o->memory_limit) + " is too small: --threads " +
        std::to_string(o->threads) + " x (2 x --buffer-size " + std::to_string(o->buffer_size) +
        " + 2 x --key-file-size " + std::to_string(o->key_file_size) + " + --batch " + std::to_string(o->batch) +
        " x " + std::to_string(kSendBytesPerKey + 16) + " + " + std::to_string(kBinaryRecvBytes) +
        (o->stream.to.empty() ? "" : " + stream sink " + std::to_string(StreamPlannedMemoryPerWorker(*o))) +
        ") + --crawl-buffer " + std::to_string(std::max<uint64_t>(o->crawl_buffer, kMinCrawlBuffer)) +
        " + fixed overhead needs " + std::to_string(need) + " bytes");
  return Status::OK();
}

}  // namespace cachewarm
