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

// What keys/META keeps across runs.
struct DumpMeta {
  uint64_t dump_start_ms = 0;
  uint64_t resumes = 0;            // runs before this one
  int64_t curr_items_before = 0;   // the source's curr_items at the first run's start
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
  Status WriteCrawled(uint64_t chunks, uint64_t keys, bool by_hash, double crawl_s);
  bool Reconciled();
  // `skipped`: why no reconciliation crawl ran ("" if one ran).
  Status WriteReconciled(uint64_t chunks, const std::string& skipped);

  // Reads the published key lists and data files, counts them into `p` and lists, by chunk, the
  // chunks still to dump in `todo`.
  Status Scan(Progress* p, std::vector<ChunkTask>* todo);

  // A key list / data file was published (any thread).
  void AddKeyChunk(uint64_t chunk, uint64_t keys);
  void AddFile(const PublishedFile& f);
  // chunk -> keys, every key list published so far.
  std::map<uint64_t, uint64_t> KeyChunks();
  // The chunk number a new key list takes (the scan and the crawls set it, on the main thread).
  uint64_t next_chunk() const { return next_chunk_; }
  void set_next_chunk(uint64_t c) { next_chunk_ = c; }

  // The manifest's fields kept here: dump start, resumes, curr_items before, the files and the key
  // counts (chunks from `crawl_chunks` on came from reconciliation).
  void FillManifest(uint64_t crawl_chunks, Manifest* m);

 private:
  Status WriteMeta(const ServerStats& source);
  Status RemoveTemporaryFiles();

  const Options& o_;
  Env* env_;
  const std::string keys_dir_;
  DumpMeta meta_;
  uint64_t next_chunk_ = 0;

  std::mutex mu_;
  std::map<uint64_t, uint64_t> chunk_keys_;  // chunk -> keys
  std::vector<PublishedFile> files_;
};

}  // namespace cachewarm
