#include "golden_vectors.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../src/data_file.h"
#include "../src/json.h"
#include "../src/manifest.h"

namespace cachewarm {
namespace {

constexpr char kNode[] = "vec_node.1";
constexpr uint64_t kDumpStartMs = 1795000000000ULL;

struct VecFile {
  uint64_t chunk;
  uint32_t part;
  uint64_t first_key_index;
  uint64_t misses;
  std::vector<DataRecord> records;
  // The header's source clock (data-format section 2.1): none (an older dumper's), a measured upper
  // bound with its spread, or the ceiling of the source's clock.
  bool clock = false;
  int64_t clock_ms = 0;
  uint16_t clock_flags = 0;
};

std::string HexOf(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string o;
  for (unsigned char c : s) {
    o += d[c >> 4];
    o += d[c & 15];
  }
  return o;
}

std::vector<VecFile> Files(uint16_t version) {
  std::vector<VecFile> v;
  // chunk 0, part 0: six keys listed, one of them missed.
  v.push_back({0, 0, 0, 1,
               {
                   {"user:1001", 0, kNeverExpires, "hello, world"},
                   {std::string("\x00" "bin key\xff", 9), 4294967295u, 1795003600, std::string("\x00\x01\xfe\xff", 4)},
                   {"empty-value", 7, 1795000000, ""},
                   {"tricky", 1, kNeverExpires, "VALUE x 0 1\r\nEN\r\nEND\r\nMN\r\n"},
                   {std::string(250, 'k'), 42, 1795000000, "250-byte key"},
               }});
  // chunk 0, part 1: the rest of chunk 0 (a data file spilled into a second part).
  v.push_back({0, 1, 6, 0, {{"part1-key", 2, kNeverExpires, "second part"}}});
  // chunk 1, part 0: every listed key was gone (3 misses): an empty file with 0 records.
  v.push_back({1, 0, 0, 3, {}});
  // Part 0's expiries moved by a measured bound (1.5 s ahead, 4 ms spread), part 1's by the source
  // clock's ceiling (0.412 s behind, measured to 3 ms); chunk 1 says nothing (an older dumper).
  v[0].clock = true;
  v[0].clock_ms = 1500;
  v[0].clock_flags = uint16_t(4 << kHeaderClockSpreadShift);
  v[1].clock = true;
  v[1].clock_ms = -412;
  v[1].clock_flags = uint16_t(kHeaderClockCeiling | (3 << kHeaderClockSpreadShift));
  if (IsCommandFormat(version)) {
    // Versions 2 and 3: a key no meta command can name (a binary record), between two meta records.
    std::string long_key(200, '\0');
    for (size_t i = 0; i < long_key.size(); i++) long_key[i] = char(i * 7 + 1);
    v[1].records.insert(v[1].records.begin(), {long_key, 9, 1795007200, "binary-protocol value"});
    v[1].records.push_back({"after-binary", 0, kNeverExpires, "x"});
  }
  if (version == kFormatVersion3) {
    // Each record's source stamp: a CAS (one not known: 0) and the expiry on the source's clock, the
    // record's moved back by the whole seconds its file's clock puts the source ahead (3 s in a file
    // that says nothing).
    uint64_t cas = 1000;
    for (VecFile& f : v) {
      const int64_t ahead = f.clock ? int64_t(std::ceil(double(f.clock_ms) / 1000.0)) : 3;
      for (DataRecord& r : f.records) {
        r.source_cas = r.key == "tricky" ? 0 : cas++;
        r.source_exp = r.exptime == kNeverExpires ? kNeverExpires : r.exptime + ahead;
      }
    }
  }
  return v;
}

}  // namespace

Status WriteGoldenVectors(Env* env, const std::string& dir, uint16_t version) {
  CW_RETURN_IF_ERROR(env->CreateDirIfMissing(dir));
  Manifest m;
  m.version = version;
  m.node = kNode;
  m.host = "127.0.0.1";
  m.port = 11211;
  m.curr_items_before = 6;
  m.curr_items_after = 6;
  m.dump_start_ms = kDumpStartMs;
  m.crawl_s = 0.5;
  m.reconcile_s = 0.25;
  m.total_s = 1.0;
  // The 4 misses below, explained; the crawl and its reader as a default dump reports them.
  m.misses_gone = 4;
  m.crawl_modes = {"hash"};
  m.crawl_buffer = 64ULL << 20;
  m.crawl_peak_buffered = 4096;
  std::string js = "{\n  \"comment\": \"golden vectors of data format v" + std::to_string(version) +
                   " (docs/data-format.md); written by dumper-cpp/tools/golden_vectors.cc\",\n";
  if (version != kFormatVersion) js += "  \"version\": " + std::to_string(version) + ",\n";
  js += "  \"node\": " + JsonQuote(kNode) + ",\n  \"dump_start_ms\": " + std::to_string(kDumpStartMs) + ",\n";
  js += "  \"files\": [";
  bool first_file = true;
  for (const VecFile& vf : Files(version)) {
    DataFileWriter w(env, dir, kNode, kDumpStartMs, version);
    if (vf.clock) w.set_source_clock(vf.clock_ms, vf.clock_flags);
    CW_RETURN_IF_ERROR(w.Open(vf.chunk, vf.part, vf.first_key_index));
    for (const DataRecord& r : vf.records)
      CW_RETURN_IF_ERROR(w.AddRecord(r.key, r.flags, r.exptime, r.value, SourceStamp{r.source_cas, r.source_exp}));
    PublishedFile pf;
    CW_RETURN_IF_ERROR(w.Finish(vf.first_key_index + vf.records.size() + vf.misses, vf.misses, &pf));
    m.files.push_back(pf);
    m.keys_listed += pf.end_key_index - pf.first_key_index;
    js += first_file ? "\n    " : ",\n    ";
    first_file = false;
    js += "{\"name\": " + JsonQuote(pf.name) + ", \"chunk\": " + std::to_string(pf.chunk) +
          ", \"part\": " + std::to_string(pf.part) + ", \"size\": " + std::to_string(pf.bytes) +
          ", \"xxh3\": \"" + Hex16(pf.xxh3) + "\", \"header_len\": " + std::to_string(kHeaderFixed + m.node.size()) +
          ", \"first_key_index\": " + std::to_string(pf.first_key_index) +
          ", \"end_key_index\": " + std::to_string(pf.end_key_index) + ", \"misses\": " + std::to_string(pf.misses) +
          ", \"record_count\": " + std::to_string(pf.records) +
          ", \"clock_flags\": " + std::to_string(vf.clock ? (vf.clock_flags | kHeaderClockKnown) : 0) +
          ", \"source_clock_ms\": " + std::to_string(vf.clock_ms) + ",\n     \"records\": [";
    for (size_t i = 0; i < vf.records.size(); i++) {
      const DataRecord& r = vf.records[i];
      js += i ? ",\n       " : "\n       ";
      js += "{\"key_hex\": \"" + HexOf(r.key) + "\", \"flags\": " + std::to_string(r.flags) +
            ", \"exptime\": " + std::to_string(r.exptime) + ", \"value_hex\": \"" + HexOf(r.value) + "\"";
      if (version == kFormatVersion3)
        js += ", \"source_cas\": " + std::to_string(r.source_cas) + ", \"source_exp\": " + std::to_string(r.source_exp);
      js += "}";
    }
    js += vf.records.empty() ? "]}" : "\n     ]}";
  }
  js += "\n  ],\n  \"done\": \"DONE\"\n}\n";
  CW_RETURN_IF_ERROR(WriteManifest(env, dir, m));
  return WriteFileAtomically(env, dir, ".tmp-vectors.json", "vectors.json", js);
}

}  // namespace cachewarm
