#include "manifest.h"

#include <algorithm>

#include "json.h"

namespace cachewarm {

void DecideCompleteness(Manifest* m) {
  std::string why;
  if (!m->reconcile_converged)
    why = "reconciliation did not converge after " + std::to_string(m->reconcile_passes) + " passes (the last listed " +
          std::to_string(m->reconcile_last_new_keys) + " keys no earlier crawl had; " + std::to_string(m->keys_listed) +
          " keys listed, the server holds " + std::to_string(m->curr_items_after) +
          "): keys kept appearing (live writes) or the LRU crawl kept skipping busy items";
  if (m->undumped)
    why += std::string(why.empty() ? "" : "; ") + std::to_string(m->undumped) + " keys could not be dumped (named in " +
           (m->undumped_report.empty() ? std::string("keys/UNDUMPED") : m->undumped_report) + ")";
  m->complete = why.empty();
  m->incomplete_reason = why;
}

namespace {
std::string StringOrNull(const std::string& s) { return s.empty() ? "null" : JsonQuote(s); }
}  // namespace

std::string RenderManifest(const Manifest& m) {
  std::vector<PublishedFile> files = m.files;
  std::sort(files.begin(), files.end(), [](const PublishedFile& a, const PublishedFile& b) {
    return a.chunk != b.chunk ? a.chunk < b.chunk : a.part < b.part;
  });
  uint64_t records = 0, bytes = 0, misses = 0;
  std::string o = "{\n  \"format\": " + JsonQuote(m.format) + ",\n  \"version\": " + std::to_string(m.version) + ",\n";
  o += "  \"node\": " + JsonQuote(m.node) + ",\n";
  o += std::string("  \"complete\": ") + (m.complete ? "true" : "false") + ",\n";
  o += "  \"incomplete_reason\": " + StringOrNull(m.incomplete_reason) + ",\n";
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
  o += "  \"completeness\": {\"keys_listed\": " + std::to_string(m.keys_listed) +
       ", \"records\": " + std::to_string(records) + ", \"misses_expired\": " + std::to_string(m.misses_expired) +
       ", \"misses_gone\": " + std::to_string(m.misses_gone) + ", \"skipped_min_ttl\": " +
       std::to_string(m.skipped_min_ttl) + ", \"undumped\": " + std::to_string(m.undumped) +
       ", \"undumped_report\": " + StringOrNull(m.undumped_report) +
       ", \"binary_protocol_records\": " + std::to_string(m.binary_records) +
       // No record's TTL is the first listing's any more: a binary-protocol record's is read again
       // after its fetch (reread.h), a touch/gat in between included. Kept for readers that look.
       ", \"ttl_from_listing\": 0, \"ttl_reread\": " + std::to_string(m.binary_records) +
       ", \"duplicates_dropped\": " + std::to_string(m.duplicates) +
       ", \"reconcile_passes\": " + std::to_string(m.reconcile_passes) +
       ", \"reconcile_converged\": " + (m.reconcile_converged ? "true" : "false") +
       ", \"curr_items_before\": " + std::to_string(m.curr_items_before) +
       ", \"curr_items_after\": " + std::to_string(m.curr_items_after) + "},\n";
  std::string modes;
  for (const std::string& mode : m.crawl_modes) modes += (modes.empty() ? "" : ", ") + JsonQuote(mode);
  o += "  \"crawl\": {\"modes\": [" + modes + "], \"fallback\": " + StringOrNull(m.crawl_fallback) +
       ", \"busy_retries\": " + std::to_string(m.busy_retries) + ", \"busy_wait_s\": " + JsonDouble(m.busy_wait_s) +
       ", \"answer_wait_s\": " + JsonDouble(m.answer_wait_s) +
       ", \"reader_buffer_bytes\": " + std::to_string(m.crawl_buffer) +
       ", \"reader_peak_buffered_bytes\": " + std::to_string(m.crawl_peak_buffered) +
       ", \"reader_spilled_bytes\": " + std::to_string(m.crawl_spilled) + "},\n";
  // Rendered only when not the default (crawl order), like source_protection: the golden vectors stay.
  if (m.order != "crawl")
    o += "  \"order\": {\"first_crawl\": " + JsonQuote(m.order) + ", \"first_key_list_after_s\": " +
       JsonDouble(m.first_chunk_s) + ", \"tiers\": " + JsonQuote(m.tiers) + "},\n";
  if (!m.protection_json.empty()) o += "  \"source_protection\": " + m.protection_json + ",\n";
  if (m.source_clock_known)
    o += "  \"clock\": {\"source_clock_ms\": " + std::to_string(m.source_clock_ms) + ", \"source_clock_lo_ms\": " +
         std::to_string(m.source_clock_lo_ms) + ", \"source_clock_hi_ms\": " + std::to_string(m.source_clock_hi_ms) +
         ", \"ceiling\": " + (m.source_ceiling ? "true" : "false") +
         (m.source_ceiling_unsettled ? ", \"ceiling_unsettled_ms\": 1000" : "") +
         (m.source_ceiling ? std::string() : ", \"ceiling_unknown\": " + JsonQuote(m.source_ceiling_why)) +
         ", \"source_pid\": " + std::to_string(m.source_pid) + ", \"source_started\": " +
         std::to_string(m.source_started) + "},\n";
  o += m.extra;
  o += "  \"timings\": {\"crawl_s\": " + JsonDouble(m.crawl_s) + ", \"reconcile_s\": " + JsonDouble(m.reconcile_s) +
       ", \"total_s\": " + JsonDouble(m.total_s) + "}\n}\n";
  return o;
}

Status WriteManifest(Env* env, const std::string& dir, const Manifest& m) {
  return WriteFileAtomically(env, dir, ".tmp-DONE", "DONE", RenderManifest(m));
}

}  // namespace cachewarm
