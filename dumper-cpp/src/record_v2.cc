#include "record_v2.h"

#include <algorithm>

#include "cachewarm_core.h"
#include "codec.h"

// The encoding and the reader are core/record_v2.c's (shared with the populator); this adapts them to
// the dumper's types and its version 1 exptime.
namespace cachewarm {

namespace {

const unsigned char* U(const char* p) { return reinterpret_cast<const unsigned char*>(p); }

bool ValidExpiry(int64_t t) { return cw_record_valid_expiry(t) != 0; }

Status Parse(const char* data, size_t pos, size_t end, bool stamped, RecordV2* out, size_t* next) {
  cw_record r;
  unsigned char keybuf[CW_MAX_KEY];
  char why[CW_RECORD_WHY];
  if (cw_record_parse(U(data), pos, end, stamped ? 1 : 0, &r, keybuf, why) < 0)
    return Status::Corruption("record at offset " + std::to_string(pos) + ": " + why);
  out->key.assign(reinterpret_cast<const char*>(r.key), r.key_len);
  out->flags = r.flags;
  out->exptime = ExptimeOf(r.expiry);
  out->value = Slice(data + r.value_at, size_t(r.value_len));
  out->binary = r.binary != 0;
  out->stamp.cas = r.source_cas;
  out->stamp.exp = r.source_exp;
  *next = r.next;
  return Status::OK();
}

}  // namespace

int64_t ExpiryToSend(int64_t exptime) { return exptime == kNeverExpires ? 0 : exptime - kExpiryMargin; }
int64_t ExptimeOf(int64_t expiry) { return expiry == 0 ? kNeverExpires : expiry + kExpiryMargin; }
int64_t ClampExptime(int64_t exptime) {
  return exptime == kNeverExpires ? exptime : std::min<int64_t>(exptime, kMaxExpiry + kExpiryMargin);
}

bool NeedsBinaryRecord(const Slice& raw_key) { return !IsPlainKey(raw_key) && raw_key.size() > kMaxBase64Key; }

Status CheckRecordV2(const Slice& raw_key, int64_t exptime) {
  if (raw_key.empty() || raw_key.size() > kMaxKeyLen) return Status::InvalidArgument("key length out of range");
  // Not 0 either: that would read back as "never expires".
  if (exptime != kNeverExpires && (ExpiryToSend(exptime) == 0 || !ValidExpiry(ExpiryToSend(exptime))))
    return Status::InvalidArgument("exptime " + std::to_string(exptime) + " has no absolute T in 2592001..2147483647");
  return Status::OK();
}

size_t EncodeMetaLineV2(char* dst, const Slice& raw_key, uint32_t value_len, uint32_t flags, int64_t exptime,
                        uint64_t offset) {
  return cw_record_meta_line(dst, U(raw_key.data()), raw_key.size(), value_len, flags,
                             uint32_t(ExpiryToSend(exptime)), offset);
}

void EncodeBinaryHeadV2(char* dst, size_t key_len, uint32_t value_len, uint32_t flags, int64_t exptime) {
  cw_record_binary_head(reinterpret_cast<unsigned char*>(dst), key_len, value_len, flags,
                        uint32_t(ExpiryToSend(exptime)));
}

void EncodeSourceStamp(char* dst, const SourceStamp& s) {
  cw_record_stamp(reinterpret_cast<unsigned char*>(dst), s.cas, s.exp);
}

Status ParseRecordV2(const char* data, size_t pos, size_t end, RecordV2* out, size_t* next) {
  return Parse(data, pos, end, false, out, next);
}

Status ParseRecordV3(const char* data, size_t pos, size_t end, RecordV2* out, size_t* next) {
  return Parse(data, pos, end, true, out, next);
}

}  // namespace cachewarm
