// Data format v1 and v2 (docs/data-format.md): file names, the data-file writer, and a verifying
// reader (used by --resume, the golden-vector test and unit tests). The constants live in format.h,
// version 2's records in record_v2.h.
#pragma once
#include "xxhash_fast.h"

#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "env.h"
#include "format.h"
#include "record_v2.h"
#include "slice.h"
#include "status.h"

namespace cachewarm {

bool ValidNodeId(const std::string& node);
// "<node>-<chunk:08>-<part:04>-<xxh3:016x>.cwd"
std::string DataFileName(const std::string& node, uint64_t chunk, uint32_t part, uint64_t xxh3);
std::string TmpDataFileName(const std::string& node, uint64_t chunk, uint32_t part);
struct ParsedName {
  std::string node;
  uint64_t chunk = 0;
  uint32_t part = 0;
  uint64_t xxh3 = 0;
};
bool ParseDataFileName(const std::string& name, ParsedName* out);
std::string Hex16(uint64_t v);

// Encodes a record header (section 2.2) into dst[0..20).
void EncodeRecordHeader(char* dst, uint32_t value_len, uint32_t flags, int64_t exptime, uint8_t key_len);

// What a published data file holds; also a DONE manifest entry.
struct PublishedFile {
  std::string name;
  uint64_t chunk = 0;
  uint32_t part = 0;
  uint64_t xxh3 = 0;
  uint64_t records = 0;
  uint64_t misses = 0;
  uint64_t bytes = 0;
  uint64_t first_key_index = 0;
  uint64_t end_key_index = 0;
  uint16_t version = kFormatVersion;
};

// Writes one data file under its temporary name; Finish() writes the trailer and publishes it
// atomically under its final (checksummed) name. Bytes handed to AppendRaw go straight to writev:
// callers pass iovecs that point into their receive buffers (no copies).
class DataFileWriter {
 public:
  // `version`: the data format written (kFormatVersion = 1, kFormatVersion2 or kFormatVersion3).
  DataFileWriter(Env* env, std::string dir, std::string node, uint64_t dump_start_ms,
                 uint16_t version = kFormatVersion);
  ~DataFileWriter();
  DataFileWriter(const DataFileWriter&) = delete;
  DataFileWriter& operator=(const DataFileWriter&) = delete;

  Status Open(uint64_t chunk, uint32_t part, uint64_t first_key_index);
  // The source's clock minus this host's, ms rounded up (ServerClock::MillisAtLeast), and the rest
  // of the header's clock_flags (HeaderClockFlags: ceiling, spread), for the header of every file
  // opened after this (section 2.1: the records' expiries are the source's on this host's clock,
  // rounded down by the fraction it implies). Not set: the header says nothing.
  void set_source_clock(int64_t ms, uint16_t flags = 0) {
    clock_known_ = ms >= INT32_MIN && ms <= INT32_MAX;
    source_clock_ms_ = clock_known_ ? int32_t(ms) : 0;
    clock_flags_ = clock_known_ ? uint16_t(flags | kHeaderClockKnown) : 0;
  }
  bool is_open() const { return file_ != nullptr; }
  // Raw record bytes (headers, keys, values, possibly pieces of one record); `records` is the
  // number of records these bytes complete or begin (counted once per record).
  Status AppendRaw(const struct iovec* iov, int iovcnt, uint64_t records);
  // Convenience for tests and small files: one whole record, in the file's version (version 3: with
  // `stamp`, default: CAS not known, never expires).
  Status AddRecord(const Slice& key, uint32_t flags, int64_t exptime, const Slice& value,
                   const SourceStamp& stamp = SourceStamp());
  // Writes the trailer, syncs, and publishes under the final name. `before_publish` (optional) runs
  // after the file is durable under its temporary name and before the rename (out's fields are set).
  Status Finish(uint64_t end_key_index, uint64_t misses, PublishedFile* out,
                const std::function<Status(const PublishedFile&)>& before_publish = nullptr);
  // Closes and deletes the temporary file (on error paths).
  void Abandon();

  // Bytes written so far: the offset of the next record (version 2 records name their own offset).
  uint64_t file_bytes() const { return header_len_ + records_bytes_; }
  uint16_t version() const { return version_; }
  uint64_t records() const { return records_; }
  uint64_t chunk() const { return chunk_; }
  uint32_t part() const { return part_; }
  uint64_t first_key_index() const { return first_key_index_; }

 private:
  Env* env_;
  std::string dir_, node_;
  uint64_t dump_start_ms_;
  std::unique_ptr<WritableFile> file_;
  XXH3_state_t* hash_;
  std::string tmp_name_;
  uint64_t chunk_ = 0, first_key_index_ = 0, records_ = 0, records_bytes_ = 0, header_len_ = 0;
  uint32_t part_ = 0;
  uint16_t version_;
  bool clock_known_ = false;
  int32_t source_clock_ms_ = 0;
  uint16_t clock_flags_ = 0;
};

struct DataRecord {
  std::string key;
  uint32_t flags = 0;
  int64_t exptime = 0;
  std::string value;
  // Version 3: the record's source stamp (section 8.1); 0 / kNeverExpires otherwise.
  uint64_t source_cas = 0;
  int64_t source_exp = kNeverExpires;
};

// Reads and fully verifies a data file (version 1 or 2) as section 3 prescribes; `info->version` is set
// when info is given. `records` may be null (only the
// summary is wanted); `verify_checksum` false skips step 3 (resume trusts its own fsynced files'
// trailers but checks names, sizes and trailers).
Status ReadDataFile(Env* env, const std::string& dir, const std::string& name, bool verify_checksum,
                    PublishedFile* info, std::vector<DataRecord>* records);

}  // namespace cachewarm
