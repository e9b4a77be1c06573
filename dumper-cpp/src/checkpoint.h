// The dump's checkpoint (docs/data-format.md section 6): what is durably published, from which
// --resume continues, and what the DONE manifest lists.
//   keys/META          the dump's identity: node, source address and server lifetime, start time
//   keys/<chunk>.keys  the key lists (key_chunks.h)
//   keys/CRAWLED       the first crawl has finished (its chunk count and crawl mode)
//   keys/RECONCILED    the reconciliation has finished (or was not needed)
//   <data files>       the published parts of each chunk: where each chunk continues
// The crawls and the workers record each key list and data file here as they publish it.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data_file.h"
#include "env.h"
#include "manifest.h"
#include "net.h"
#include "options.h"
#include "progress.h"
#include "status.h"
#include "work_queue.h"

namespace cachewarm {

// keys/.tmp-diff: the reconciliation's scratch directory (key_set_diff.h), kept by --resume.
constexpr char kDiffScratchDir[] = ".tmp-diff";
// keys/PARTS: one line per data file, "<name> <expired> <gone> <skipped_min_ttl> <undumped> <binary>".
constexpr char kPartsName[] = "PARTS";
// keys/UNDUMPED: the keys that could not be dumped, "<URL-encoded key> <exptime> <reason>" per line.
constexpr char kUndumpedName[] = "UNDUMPED";

// What a crawl phase did (the first crawl -> keys/CRAWLED, reconciliation -> keys/RECONCILED -> DONE).
struct CrawlStats {
  std::vector<std::string> modes;  // the crawl modes that ran, in order ("hash", "all")
  std::string fallback;            // why `hash` fell back to `all` ("" if it did not)
  uint64_t busy_retries = 0;       // crawl requests answered BUSY / "ERROR locked try again later"
  double busy_wait_s = 0;          // time spent waiting before retrying them
  double answer_wait_s = 0;        // time crawl requests waited for their answer's first byte
  uint64_t duplicates = 0;         // keys a crawl listed more than once (each is in one key list)
  uint64_t peak_buffered = 0;      // most crawl bytes read and not yet parsed (crawl_stream.h)
  uint64_t spilled = 0;            // crawl bytes that went through the spill file
  std::string order;               // "recency" (recency.h) or "crawl" ("": a filtered crawl, crawl order)
  double first_chunk_s = 0;        // recency: from the crawl's start to its first key list
  std::string tiers;               // recency: "<tier>:<keys>,..." of the tiers that hold keys
};
// keys/.tmp-tiers: the recency tiers' scratch directory (recency.h).
constexpr char kRecencyScratchDir[] = ".tmp-tiers";
// keys/CRAWL_SLEEP: the source's `lru_crawler sleep` before the dump changed it (source_guard.h);
// a resumed dump restores that value, not the one a killed run left.
constexpr char kCrawlSleepName[] = "CRAWL_SLEEP";

// How the keys of one data file that are not records are explained (keys/PARTS; DONE's completeness).
struct PartStats {
  uint64_t expired = 0;          // mg miss, the listing's exp had passed
  uint64_t gone = 0;             // mg miss before its exp: deleted, evicted or flushed since the crawl
  uint64_t skipped_min_ttl = 0;  // fetched, dropped by --min-ttl
  uint64_t undumped = 0;         // could not be fetched at all (named in keys/UNDUMPED)
  uint64_t binary = 0;           // records fetched with the binary protocol (keys too long for mg)
  void Add(const PartStats& o) {
    expired += o.expired;
    gone += o.gone;
    skipped_min_ttl += o.skipped_min_ttl;
    undumped += o.undumped;
    binary += o.binary;
  }
};

// What keys/META keeps across runs.
struct DumpMeta {
  uint64_t dump_start_ms = 0;
  uint64_t resumes = 0;            // runs before this one
  int64_t curr_items_before = 0;   // the source's curr_items at the first run's start
  uint16_t format = kFormatVersion;  // the data format of every file of the dump (Open: a new dump's is --format or 2)
};

class Checkpoint {
 public:
  // `o` must outlive the checkpoint.
  Checkpoint(const Options& o, Env* env);
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  const std::string& keys_dir() const { return keys_dir_; }
  // Creates --out (and its missing parents, like mkdir -p) and --out/keys.
  Status CreateDirs();
  // Fresh start: --out must hold no dump. --resume: keys/META must name this node and `source`'s
  // lifetime; temporary files are removed. Then keys/META is (re)written.
  Status Open(const ServerStats& source);
  const DumpMeta& meta() const { return meta_; }

  bool Done();  // OUT/DONE is published
  // keys/CRAWLED: false if the first crawl has not finished.
  bool ReadCrawled(uint64_t* chunks, bool* by_hash);
  Status WriteCrawled(uint64_t chunks, uint64_t keys, bool by_hash, double crawl_s, const CrawlStats& st);
  bool Reconciled();
  // `skipped`: why no reconciliation crawl ran ("" if one ran). `converged`: the last pass listed no
  // new key, or the keys listed reached the server's curr_items.
  Status WriteReconciled(uint64_t chunks, const std::string& skipped, int passes, bool converged,
                         uint64_t last_new_keys, const CrawlStats& st);

  // Reads the published key lists and data files, counts them into `p` and lists, by chunk, the
  // chunks still to dump in `todo`.
  Status Scan(Progress* p, std::vector<ChunkTask>* todo);

  // A data file is about to be published (any thread): its PartStats go to keys/PARTS and its
  // undumped keys ("<URL-encoded key> <exptime> <reason>\n" lines) to keys/UNDUMPED, both synced,
  // so that every published file's explanation survives a crash.
  Status RecordPart(const PublishedFile& f, const PartStats& ps, const std::string& undumped_lines);
  // A key list / data file was published (any thread).
  void AddKeyChunk(uint64_t chunk, uint64_t keys);
  void AddFile(const PublishedFile& f, const PartStats& ps);
  // chunk -> keys, every key list published so far.
  std::map<uint64_t, uint64_t> KeyChunks();
  // The chunk number a new key list takes (the scan and the crawls set it, on the main thread).
  uint64_t next_chunk() const { return next_chunk_; }
  void set_next_chunk(uint64_t c) { next_chunk_ = c; }

  // The manifest's fields kept here: dump start, resumes, curr_items before, the files, the key
  // counts (chunks from `crawl_chunks` on came from reconciliation), how the misses are explained,
  // what the crawls did (keys/CRAWLED, keys/RECONCILED). Deduplicates keys/UNDUMPED. Call once, after
  // every worker has finished.
  Status FillManifest(uint64_t crawl_chunks, Manifest* m);
  // keys/PARTS: name -> PartStats of every part recorded (resume).
  Status ReadParts(std::map<std::string, PartStats>* parts);

 private:
  Status WriteMeta(const ServerStats& source);
  Status RemoveTemporaryFiles();
  Status Append(std::unique_ptr<WritableFile>* f, const char* name, const std::string& text);

  const Options& o_;
  Env* env_;
  const std::string keys_dir_;
  DumpMeta meta_;
  uint64_t next_chunk_ = 0;

  std::mutex mu_;
  std::map<uint64_t, uint64_t> chunk_keys_;  // chunk -> keys
  std::vector<PublishedFile> files_;
  std::vector<PartStats> file_stats_;  // same order as files_
  std::mutex log_mu_;                  // keys/PARTS and keys/UNDUMPED appends
  std::unique_ptr<WritableFile> parts_log_, undumped_log_;
};

}  // namespace cachewarm
