// The crawls that list the source's keys into key lists (OUT/keys/<chunk>.keys), each handed to the
// workers as soon as it is published: the first crawl, and filtered crawls that list only the keys no
// key list holds yet (reconciliation, and a resumed dump whose first crawl was interrupted).
#pragma once
#include <cstdint>

#include "checkpoint.h"
#include "crawler.h"
#include "env.h"
#include "options.h"
#include "progress.h"
#include "status.h"
#include "work_queue.h"

namespace cachewarm {

class KeyCrawl {
 public:
  // Everything passed must outlive the crawl.
  KeyCrawl(const Options& o, Env* env, Checkpoint* checkpoint, WorkQueue* queue, Progress* progress);

  // The first crawl, pipelined: each key chunk goes to the workers as soon as it is published.
  Status First();
  // Lists, as new chunks, only keys not already in any key list; *new_keys = how many.
  Status Filtered(uint64_t* new_keys);

  // `metadump hash` (lists every item) or `all` (the LRUs: skips busy items). A server without
  // `hash` turns it off for the crawls that follow.
  bool by_hash() const { return by_hash_; }
  void set_by_hash(bool b) { by_hash_ = b; }

 private:
  // Runs one `lru_crawler metadump` on its own connection, retrying while the crawler is busy.
  Status Metadump(const CrawlReader::KeyFn& fn);
  // Publishes a key list: recorded in the checkpoint, queued for the workers.
  void Published(uint64_t chunk, uint64_t keys);

  const Options& o_;
  Env* env_;
  Checkpoint* checkpoint_;
  WorkQueue* queue_;
  Progress* progress_;
  bool by_hash_;
};

}  // namespace cachewarm
