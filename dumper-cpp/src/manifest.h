// The DONE manifest (docs/data-format.md section 5).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data_file.h"
#include "env.h"

namespace cachewarm {

struct Manifest {
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
};

std::string RenderManifest(const Manifest& m);
// Publishes OUT/DONE atomically (.tmp-DONE -> DONE).
Status WriteManifest(Env* env, const std::string& dir, const Manifest& m);

}  // namespace cachewarm
