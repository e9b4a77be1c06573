// The crawls that list the source's keys into key lists (OUT/keys/<chunk>.keys), each handed to the
// workers as soon as it is published: the first crawl, and filtered crawls that list only the keys no
// key list holds yet (reconciliation, and a resumed dump whose first crawl was interrupted).
// Every crawl reads the socket on a thread of its own (crawl_stream.h): the crawl never waits on the
// disk. A crawl the server calls busy is retried with backoff (--crawl-busy-timeout), never replaced
// by another mode; the one fallback (`hash` -> `all` on a server without `metadump hash`) is said on
// stderr and recorded.
#pragma once
#include <cstdint>
#include <string>

#include "checkpoint.h"
#include "crawler.h"
#include "env.h"
#include "net.h"
#include "options.h"
#include "progress.h"
#include "status.h"
#include "work_queue.h"

namespace cachewarm {

class KeyCrawl {
 public:
  // Everything passed must outlive the crawl.
  KeyCrawl(const Options& o, Env* env, Checkpoint* checkpoint, WorkQueue* queue, Progress* progress);

  // The first crawl. `hash`: pipelined, each key chunk goes to the workers as soon as it is
  // published (a hash walk lists a key once). `all` (or the fallback to it): the LRU walk can list an
  // item twice when it moves between LRUs mid-crawl, so the keys go through the bounded-memory
  // key-set difference first, which drops repeats; the chunks follow the crawl.
  Status First();
  // Lists, as new chunks, only keys not already in any key list (and each once); *new_keys = how many.
  Status Filtered(uint64_t* new_keys);

  // `metadump hash` (lists every item) or `all` (the LRUs: skips busy items). A server without
  // `hash` turns it off for the crawls that follow.
  bool by_hash() const { return by_hash_; }
  void set_by_hash(bool b) { by_hash_ = b; }
  // About how many keys the server holds (sizes the key-set difference's partitions).
  void set_expected_keys(uint64_t n) { expected_keys_ = n; }
  // Where every crawl puts the listing's cas of the keys that may need the binary protocol.
  void set_listing_cas(ListingCas* c) { cas_ = c; }

  // What the crawls since the last ResetStats() did.
  const CrawlStats& stats() const { return stats_; }
  void ResetStats() { stats_ = CrawlStats(); }

 private:
  // Runs one `lru_crawler metadump` (retrying while the crawler is busy). A `hash` crawl on a server
  // without it sets *fell_back, switches to `all` and returns OK without crawling (no key was listed).
  Status Metadump(const CrawlReader::KeyFn& fn, bool* fell_back);
  Status Metadump(const CrawlReader::KeyLaFn& fn, bool* fell_back);
  // --order recency: the hash crawl into recency tiers, then the key lists hottest first
  // (recency.h). *fell_back as for Metadump (nothing listed).
  Status FirstByRecency(bool* fell_back);
  // *busy_line non-empty when `stats` says a crawl holds the crawler now (then no request is sent).
  Status CrawlerRunning(std::string* busy_line);
  // Publishes a key list: recorded in the checkpoint, queued for the workers.
  void Published(uint64_t chunk, uint64_t keys);

  const Options& o_;
  Env* env_;
  Checkpoint* checkpoint_;
  WorkQueue* queue_;
  Progress* progress_;
  bool by_hash_;
  uint64_t expected_keys_ = 0;
  ListingCas* cas_ = nullptr;
  CrawlStats stats_;
  Conn stats_conn_;  // for CrawlerRunning, kept across retries
};

}  // namespace cachewarm
