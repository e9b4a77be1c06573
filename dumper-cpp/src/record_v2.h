// Data format v2 records (docs/data-format.md section 7.1): each record is the command that stores
// the item — a quiet meta add `ms <key> <len>[ b] T<expiry> F<flags> ME q O<offset>\r\n<value>\r\n`, or
// for a key no meta command can name, a binary-protocol ADDQ request. The encoding and check 4's
// reader (section 7.2) are core/record_v2.c's, shared with the populator's C walk and pinned by
// tests/vectors/core/record_v2.txt and the golden files in tests/vectors/v2/ and v3/; this is the
// dumper's view of them (its version 1 exptime, its types).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "format.h"
#include "slice.h"
#include "status.h"

namespace cachewarm {

// The longest meta line before the value: "ms " + a 250-char key + " " + 10 digits + " b" + " T" + 10
// + " F" + 10 + " ME q O" + 20 + "\r\n", rounded up.
constexpr size_t kMaxMetaLineV2 = 352;
// The binary record's request header + extras (flags, expiration).
constexpr size_t kBinaryHeadV2 = 32;
constexpr uint8_t kBinaryMagic = 0x80;

// The T of an item whose version 1 exptime is `exptime` (-1 = never): 0, or exptime - kExpiryMargin.
int64_t ExpiryToSend(int64_t exptime);
// An exptime whose T would pass memcached's largest, 2^31-1 (a source clock lagging this host's
// turns a T2147483647 item's remaining TTL into an exptime a few seconds beyond it): the largest
// exptime that has a T. Clamping only shortens, and one such item must not fail the dump.
int64_t ClampExptime(int64_t exptime);
// The version 1 exptime of an item sent with T `expiry` (the reverse).
int64_t ExptimeOf(int64_t expiry);
// A key with no meta form (a binary key whose base64 is longer than kMaxWireKey): a binary record.
bool NeedsBinaryRecord(const Slice& raw_key);

// Writes a meta record's line (everything before the value) at dst (kMaxMetaLineV2 bytes) for a
// key that has a meta form; returns its length. The record starts at file offset `offset`.
size_t EncodeMetaLineV2(char* dst, const Slice& raw_key, uint32_t value_len, uint32_t flags, int64_t exptime,
                        uint64_t offset);
// Writes a binary record's 32-byte head (request header + extras) for a key of key_len bytes.
void EncodeBinaryHeadV2(char* dst, size_t key_len, uint32_t value_len, uint32_t flags, int64_t exptime);
// Checks that the record the caller wants to write has a v2 form (key length, expiry range).
Status CheckRecordV2(const Slice& raw_key, int64_t exptime);

// Version 3 (section 8.1): what the source said about an item when the dumper read it, in front of
// the record. cas 0 = not known (CAS off); exp: memcached's absolute expiry on the source's clock, the
// lower bound the record's expiry was computed from (kNeverExpires: none).
struct SourceStamp {
  uint64_t cas = 0;
  int64_t exp = kNeverExpires;
};
void EncodeSourceStamp(char* dst, const SourceStamp& s);

// One record of a v2/v3 file as read: the key decoded, exptime as in version 1, the value a view
// (version 3: its stamp too).
struct RecordV2 {
  std::string key;
  uint32_t flags = 0;
  int64_t exptime = 0;
  Slice value;
  bool binary = false;
  SourceStamp stamp;
};
// Parses and checks the record at data[pos..end) (section 7.2); *next = its end. Corruption names
// the problem and the offset.
Status ParseRecordV2(const char* data, size_t pos, size_t end, RecordV2* out, size_t* next);
// The same for a version 3 record (section 8.2): the stamp, then a version 2 record whose meta line's
// O<offset> is the stamp's offset.
Status ParseRecordV3(const char* data, size_t pos, size_t end, RecordV2* out, size_t* next);
// Either, by the file's version.
inline Status ParseCommandRecord(uint16_t version, const char* data, size_t pos, size_t end, RecordV2* out,
                                 size_t* next) {
  return version == kFormatVersion3 ? ParseRecordV3(data, pos, end, out, next)
                                    : ParseRecordV2(data, pos, end, out, next);
}

}  // namespace cachewarm
