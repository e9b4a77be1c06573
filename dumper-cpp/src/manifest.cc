#include "manifest.h"

#include <algorithm>

#include "json.h"

namespace cachewarm {

std::string RenderManifest(const Manifest& m) {
  std::vector<PublishedFile> files = m.files;
  std::sort(files.begin(), files.end(), [](const PublishedFile& a, const PublishedFile& b) {
    return a.chunk != b.chunk ? a.chunk < b.chunk : a.part < b.part;
  });
  uint64_t records = 0, bytes = 0, misses = 0;
  std::string o = "{\n  \"format\": \"cachewarm-dump\",\n  \"version\": 1,\n";
  o += "  \"node\": " + JsonQuote(m.node) + ",\n";
  o += "  \"source\": {\"host\": " + JsonQuote(m.host) + ", \"port\": " + std::to_string(m.port) +
       ", \"curr_items_before\": " + std::to_string(m.curr_items_before) +
       ", \"curr_items_after\": " + std::to_string(m.curr_items_after) + "},\n";
  o += "  \"dump_start_ms\": " + std::to_string(m.dump_start_ms) + ",\n";
  o += "  \"files\": [";
  for (size_t i = 0; i < files.size(); i++) {
    const PublishedFile& f = files[i];
    records += f.records;
    bytes += f.bytes;
    misses += f.misses;
    o += i ? ",\n    " : "\n    ";
    o += "{\"name\": " + JsonQuote(f.name) + ", \"chunk\": " + std::to_string(f.chunk) +
         ", \"part\": " + std::to_string(f.part) + ", \"xxh3\": \"" + Hex16(f.xxh3) +
         "\", \"records\": " + std::to_string(f.records) + ", \"misses\": " + std::to_string(f.misses) +
         ", \"bytes\": " + std::to_string(f.bytes) + "}";
  }
  o += files.empty() ? "],\n" : "\n  ],\n";
  o += "  \"totals\": {\"files\": " + std::to_string(files.size()) + ", \"records\": " + std::to_string(records) +
       ", \"bytes\": " + std::to_string(bytes) + ", \"keys_listed\": " + std::to_string(m.keys_listed) +
       ", \"misses\": " + std::to_string(misses) + ", \"skipped_min_ttl\": " + std::to_string(m.skipped_min_ttl) +
       ", \"reconciled_keys\": " + std::to_string(m.reconciled_keys) +
       ", \"resumes\": " + std::to_string(m.resumes) + "},\n";
  o += "  \"timings\": {\"crawl_s\": " + JsonDouble(m.crawl_s) + ", \"reconcile_s\": " + JsonDouble(m.reconcile_s) +
       ", \"total_s\": " + JsonDouble(m.total_s) + "}\n}\n";
  return o;
}

Status WriteManifest(Env* env, const std::string& dir, const Manifest& m) {
  return WriteFileAtomically(env, dir, ".tmp-DONE", "DONE", RenderManifest(m));
}

}  // namespace cachewarm
