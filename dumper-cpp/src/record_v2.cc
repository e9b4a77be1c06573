#include "record_v2.h"

#include <algorithm>
#include <cstring>

#include "codec.h"

namespace cachewarm {

namespace {

size_t PutU64(char* d, uint64_t v) {
  char tmp[20];
  size_t n = 0;
  do {
    tmp[n++] = char('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++) d[i] = tmp[n - 1 - i];
  return n;
}

// Standard base64 with padding, straight into d (the key token of a meta line).
size_t PutBase64(char* d, const unsigned char* s, size_t n) {
  static const char k[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0, i = 0;
  for (; i + 2 < n; i += 3) {
    const uint32_t v = uint32_t(s[i]) << 16 | uint32_t(s[i + 1]) << 8 | s[i + 2];
    d[o++] = k[v >> 18];
    d[o++] = k[(v >> 12) & 63];
    d[o++] = k[(v >> 6) & 63];
    d[o++] = k[v & 63];
  }
  if (i < n) {
    const uint32_t v = uint32_t(s[i]) << 16 | (i + 1 < n ? uint32_t(s[i + 1]) << 8 : 0);
    d[o++] = k[v >> 18];
    d[o++] = k[(v >> 12) & 63];
    d[o++] = i + 1 < n ? k[(v >> 6) & 63] : '=';
    d[o++] = '=';
  }
  return o;
}

void PutBE16(char* d, uint16_t v) {
  d[0] = char(v >> 8);
  d[1] = char(v);
}
void PutBE32(char* d, uint32_t v) {
  for (int i = 0; i < 4; i++) d[i] = char(v >> (24 - 8 * i));
}
uint32_t GetBE32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v = (v << 8) | uint8_t(p[i]);
  return v;
}

Status Bad(size_t pos, const std::string& why) {
  return Status::Corruption("record at offset " + std::to_string(pos) + ": " + why);
}

// Reads a decimal number without leading zeros at p[*i..end), up to `max`; false if there is none.
bool Number(const char* p, size_t* i, size_t end, uint64_t max, uint64_t* v) {
  size_t j = *i;
  if (j >= end || p[j] < '0' || p[j] > '9') return false;
  if (p[j] == '0' && j + 1 < end && p[j + 1] >= '0' && p[j + 1] <= '9') return false;
  uint64_t x = 0;
  for (; j < end && p[j] >= '0' && p[j] <= '9'; j++) {
    if (j - *i >= 20) return false;
    x = x * 10 + uint64_t(p[j] - '0');
    if (x > max) return false;
  }
  *v = x;
  *i = j;
  return true;
}

bool Literal(const char* p, size_t* i, size_t end, const char* lit) {
  const size_t n = std::strlen(lit);
  if (end - *i < n || std::memcmp(p + *i, lit, n) != 0) return false;
  *i += n;
  return true;
}

bool ValidExpiry(int64_t t) { return t == 0 || (t > kMaxRelativeTtl && t <= kMaxExpiry); }

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
  char* d = dst;
  std::memcpy(d, "ms ", 3);
  d += 3;
  const bool plain = IsPlainKey(raw_key);
  if (plain) {
    std::memcpy(d, raw_key.data(), raw_key.size());
    d += raw_key.size();
  } else {
    d += PutBase64(d, reinterpret_cast<const unsigned char*>(raw_key.data()), raw_key.size());
  }
  *d++ = ' ';
  d += PutU64(d, value_len);
  if (!plain) {
    std::memcpy(d, " b", 2);
    d += 2;
  }
  std::memcpy(d, " T", 2);
  d += 2;
  d += PutU64(d, uint64_t(ExpiryToSend(exptime)));
  std::memcpy(d, " F", 2);
  d += 2;
  d += PutU64(d, flags);
  std::memcpy(d, " ME q O", 7);
  d += 7;
  d += PutU64(d, offset);
  std::memcpy(d, "\r\n", 2);
  return size_t(d + 2 - dst);
}

void EncodeBinaryHeadV2(char* dst, size_t key_len, uint32_t value_len, uint32_t flags, int64_t exptime) {
  std::memset(dst, 0, kBinaryHeadV2);
  dst[0] = char(kBinaryMagic);
  dst[1] = char(kBinaryOpAddQ);
  PutBE16(dst + 2, uint16_t(key_len));
  dst[4] = 8;
  PutBE32(dst + 8, uint32_t(8 + key_len + value_len));
  PutBE32(dst + 24, flags);
  PutBE32(dst + 28, uint32_t(ExpiryToSend(exptime)));
}

void EncodeSourceStamp(char* dst, const SourceStamp& s) {
  for (int i = 0; i < 8; i++) dst[i] = char(s.cas >> (8 * i));
  const uint64_t e = uint64_t(s.exp);
  for (int i = 0; i < 8; i++) dst[8 + i] = char(e >> (8 * i));
}

namespace {

// A version 2 record at pos whose meta line names `o_expect` as its offset.
Status ParseCommandAt(const char* data, size_t pos, size_t end, size_t o_expect, RecordV2* out, size_t* next);

}  // namespace

Status ParseRecordV2(const char* data, size_t pos, size_t end, RecordV2* out, size_t* next) {
  out->stamp = SourceStamp();
  return ParseCommandAt(data, pos, end, pos, out, next);
}

Status ParseRecordV3(const char* data, size_t pos, size_t end, RecordV2* out, size_t* next) {
  if (pos >= end || end - pos < kSourceStampSize) return Bad(pos, "source stamp runs past the records");
  uint64_t cas = 0, e = 0;
  for (int i = 7; i >= 0; i--) cas = (cas << 8) | uint8_t(data[pos + size_t(i)]);
  for (int i = 7; i >= 0; i--) e = (e << 8) | uint8_t(data[pos + 8 + size_t(i)]);
  const int64_t exp = int64_t(e);
  if (exp != kNeverExpires && exp <= 0) return Bad(pos, "source_exp " + std::to_string(exp));
  CW_RETURN_IF_ERROR(ParseCommandAt(data, pos + kSourceStampSize, end, pos, out, next));
  out->stamp.cas = cas;
  out->stamp.exp = exp;
  return Status::OK();
}

namespace {

Status ParseCommandAt(const char* data, size_t pos, size_t end, size_t o_expect, RecordV2* out, size_t* next) {
  if (pos >= end) return Bad(pos, "no record");
  const char* p = data;
  if (uint8_t(p[pos]) == kBinaryMagic) {
    if (end - pos < kBinaryHeadV2) return Bad(pos, "binary record header runs past the records");
    const size_t klen = (size_t(uint8_t(p[pos + 2])) << 8) | uint8_t(p[pos + 3]);
    const uint32_t body = GetBE32(p + pos + 8);
    const bool zeros = p[pos + 5] == 0 && p[pos + 6] == 0 && p[pos + 7] == 0 && GetBE32(p + pos + 12) == 0 &&
                       GetBE32(p + pos + 16) == 0 && GetBE32(p + pos + 20) == 0;
    if (uint8_t(p[pos + 1]) != kBinaryOpAddQ || p[pos + 4] != 8 || !zeros) return Bad(pos, "not an ADDQ request");
    if (klen <= kMaxBase64Key || klen > kMaxKeyLen || body < 8 + klen) return Bad(pos, "bad binary key length");
    if (end - pos - kBinaryHeadV2 < uint64_t(body) - 8) return Bad(pos, "binary record runs past the records");
    const int64_t expiry = int64_t(GetBE32(p + pos + 28));
    if (!ValidExpiry(expiry)) return Bad(pos, "expiration " + std::to_string(expiry));
    const Slice key(p + pos + kBinaryHeadV2, klen);
    if (IsPlainKey(key)) return Bad(pos, "a printable key in a binary record");
    out->key = key.ToString();
    out->flags = GetBE32(p + pos + 24);
    out->exptime = ExptimeOf(expiry);
    out->value = Slice(p + pos + kBinaryHeadV2 + klen, body - 8 - klen);
    out->binary = true;
    *next = pos + kBinaryHeadV2 + body - 8;
    return Status::OK();
  }
  size_t i = pos;
  if (!Literal(p, &i, end, "ms ")) return Bad(pos, "neither a meta set nor a binary record");
  const size_t k0 = i;
  while (i < end && i - k0 <= kMaxWireKey && uint8_t(p[i]) >= 0x21 && uint8_t(p[i]) <= 0x7e) i++;
  const size_t ktok = i - k0;
  if (ktok == 0 || ktok > kMaxWireKey) return Bad(pos, "bad key token");
  uint64_t vlen, expiry, flags, offset;
  if (!Literal(p, &i, end, " ") || !Number(p, &i, end, UINT32_MAX, &vlen)) return Bad(pos, "bad value length");
  const bool b64 = Literal(p, &i, end, " b");
  if (!Literal(p, &i, end, " T") || !Number(p, &i, end, UINT64_MAX, &expiry) || !ValidExpiry(int64_t(expiry)))
    return Bad(pos, "bad T");
  if (!Literal(p, &i, end, " F") || !Number(p, &i, end, UINT32_MAX, &flags)) return Bad(pos, "bad F");
  if (!Literal(p, &i, end, " ME q O") || !Number(p, &i, end, UINT64_MAX, &offset) || !Literal(p, &i, end, "\r\n"))
    return Bad(pos, "bad flags after F");
  if (offset != o_expect) return Bad(pos, "O" + std::to_string(offset) + " is not the record's offset");
  if (end - i < vlen + 2 || p[i + vlen] != '\r' || p[i + vlen + 1] != '\n')
    return Bad(pos, "value not followed by \\r\\n within the records");
  if (b64) {
    std::string key(ktok, '\0');
    const long d = Base64DecodeInPlace(p + k0, ktok, &key[0]);
    if (d < 1 || size_t(d) > kMaxBase64Key) return Bad(pos, "bad base64 key");
    key.resize(size_t(d));
    // Canonical: base64 only for keys that need it, in the one encoding the writer produces.
    std::string again;
    Base64Encode(key, &again);
    if (IsPlainKey(key) || Slice(again) != Slice(p + k0, ktok)) return Bad(pos, "non-canonical base64 key");
    out->key = std::move(key);
  } else {
    out->key.assign(p + k0, ktok);
  }
  out->flags = uint32_t(flags);
  out->exptime = ExptimeOf(int64_t(expiry));
  out->value = Slice(p + i, vlen);
  out->binary = false;
  *next = i + vlen + 2;
  return Status::OK();
}

}  // namespace

}  // namespace cachewarm
