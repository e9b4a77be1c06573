// Data format v1 (docs/data-format.md): every constant of the format, in one place. The writer, the
// verifying reader, the receive stream, the options and the resume scan take them from here.
#pragma once
#include <cstddef>
#include <cstdint>

namespace cachewarm {

// Section 2: a data file is header (kHeaderFixed + node id bytes), records, trailer.
constexpr char kDataMagic[] = "CWARMDF1";
constexpr char kTrailerMagic[] = "CWARMEND";
constexpr size_t kMagicSize = 8;
constexpr uint16_t kFormatVersion = 1;  // version 1: binary records (section 2.2)
// Version 2 (section 7): each record is the memcached command that stores the item. The dumper's
// default; --format 1 still writes version 1.
constexpr uint16_t kFormatVersion2 = 2;
// Version 3 (section 8): a version 2 record behind a 16-byte source stamp (the item's CAS on the
// source at the read, its expiry on the source's clock) each: what the populator's re-check compares
// the source against. The dumper's default; --format 1|2 still write the older ones.
constexpr uint16_t kFormatVersion3 = 3;
constexpr uint16_t kDefaultFormatVersion = kFormatVersion3;
constexpr size_t kSourceStampSize = 16;
// Versions whose records are memcached commands (section 7; 3 adds the stamp).
inline bool IsCommandFormat(uint16_t v) { return v == kFormatVersion2 || v == kFormatVersion3; }
inline bool IsKnownFormat(uint16_t v) { return v == kFormatVersion || IsCommandFormat(v); }
constexpr size_t kHeaderFixed = 48;
// Header offset 42, u16 `clock_flags`: bit 0 set = offset 44 holds `source_clock_ms` (i32, the source
// memcached's clock minus the dumper host's, ms, rounded up) and every exptime in the file is the
// source's expiry on the dumper host's clock rounded DOWN, by ceil(ms / 1000) - ms / 1000 seconds
// (section 2.1). Clear (files of an older dumper): an exptime may be up to 1 s late.
constexpr uint16_t kHeaderClockKnown = 1;
// Bit 1: source_clock_ms is the ceiling of the source's clock (server_clock.h: it can never be ahead
// of it), not only its measured upper bound. Bits 2..15: the measurement's spread (its upper minus its
// lower bound), ms rounded up, at most kHeaderClockSpreadMax; 0 in files of an older dumper (not known).
constexpr uint16_t kHeaderClockCeiling = 2;
constexpr int kHeaderClockSpreadShift = 2;
constexpr int64_t kHeaderClockSpreadMax = 16383;
constexpr size_t kTrailerSize = 40;
constexpr size_t kRecordHeaderSize = 20;
constexpr size_t kMaxKeyLen = 250;
constexpr int64_t kNeverExpires = -1;
// Version 2 (section 7.1): a record's T is its expiry less this margin (the dumper's exptime can be up
// to 1 s late; docs/populator.md "Expiry"), absolute: memcached reads a T above 30 days as a unix time,
// and parses it as a signed 32-bit number. The stream mode's sink sends the same (encode.py
// EXPIRY_MARGIN): the destination's expiry stays within [source's - 2 s, source's].
constexpr int64_t kExpiryMargin = 1;
constexpr int64_t kMaxRelativeTtl = 30 * 24 * 3600;
constexpr int64_t kMaxExpiry = 2147483647;
// memcached's key token limit; a binary key whose base64 is longer (187+ bytes) needs a binary record.
constexpr size_t kMaxWireKey = 250;
constexpr size_t kMaxBase64Key = kMaxWireKey / 4 * 3;

// The header of a data file written by node `node_len` bytes long.
constexpr size_t DataFileHeaderSize(size_t node_len) { return kHeaderFixed + node_len; }

// Section 1: names. A node id matches [A-Za-z0-9_.]{1,64} (never '-', the name's separator); a
// published data file is "<node>-<chunk:08>-<part:04>-<xxh3:016x>.cwd", a file being written starts
// with ".tmp-" (readers ignore names starting with '.').
constexpr size_t kMaxNodeIdLen = 64;
constexpr char kNodeIdPattern[] = "[A-Za-z0-9_.]{1,64}";
constexpr char kDataFileSuffix[] = ".cwd";
constexpr char kTmpPrefix[] = ".tmp-";
constexpr int kChunkDigits = 8;
constexpr int kPartDigits = 4;
constexpr int kHashDigits = 16;

// A byte allowed in a node id.
inline bool IsNodeIdChar(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

}  // namespace cachewarm
