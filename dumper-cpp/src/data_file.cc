#include "data_file.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "coding.h"
#include "record_v2.h"

namespace cachewarm {

bool ValidNodeId(const std::string& node) {
  if (node.empty() || node.size() > kMaxNodeIdLen) return false;
  for (unsigned char c : node)
    if (!IsNodeIdChar(c)) return false;
  return true;
}

std::string Hex16(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016" PRIx64, v);
  return b;
}

std::string DataFileName(const std::string& node, uint64_t chunk, uint32_t part, uint64_t xxh3) {
  char b[64];
  std::snprintf(b, sizeof b, "-%0*" PRIu64 "-%0*" PRIu32 "-%0*" PRIx64 "%s", kChunkDigits, chunk, kPartDigits, part,
                kHashDigits, xxh3, kDataFileSuffix);
  return node + b;
}

std::string TmpDataFileName(const std::string& node, uint64_t chunk, uint32_t part) {
  char b[48];
  std::snprintf(b, sizeof b, "-%0*" PRIu64 "-%0*" PRIu32, kChunkDigits, chunk, kPartDigits, part);
  return kTmpPrefix + node + b;
}

static bool ParseDigits(const std::string& s, size_t pos, size_t n, uint64_t* v) {
  if (pos + n > s.size()) return false;
  *v = 0;
  for (size_t i = pos; i < pos + n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    *v = *v * 10 + uint64_t(s[i] - '0');
  }
  return true;
}

bool ParseDataFileName(const std::string& name, ParsedName* out) {
  // <node>-<8 digits>-<4 digits>-<16 hex>.cwd ; node has no '-'.
  constexpr size_t kChunk = kChunkDigits, kPart = kPartDigits, kHash = kHashDigits;
  constexpr size_t kSuffix = sizeof kDataFileSuffix - 1;
  const size_t tail = 1 + kChunk + 1 + kPart + 1 + kHash + kSuffix;
  if (name.size() <= tail || name.size() > kMaxNodeIdLen + tail) return false;
  const size_t n = name.size() - tail;
  std::string node = name.substr(0, n);
  if (!ValidNodeId(node)) return false;
  size_t p = n;
  uint64_t chunk, part;
  if (name[p] != '-' || !ParseDigits(name, p + 1, kChunk, &chunk)) return false;
  p += 1 + kChunk;
  if (name[p] != '-' || !ParseDigits(name, p + 1, kPart, &part)) return false;
  p += 1 + kPart;
  if (name[p] != '-') return false;
  uint64_t h = 0;
  for (size_t i = p + 1; i < p + 1 + kHash; i++) {
    char c = name[i];
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    h = (h << 4) | uint64_t(d);
  }
  if (name.compare(p + 1 + kHash, kSuffix, kDataFileSuffix) != 0) return false;
  out->node = node;
  out->chunk = chunk;
  out->part = uint32_t(part);
  out->xxh3 = h;
  return true;
}

void EncodeRecordHeader(char* dst, uint32_t value_len, uint32_t flags, int64_t exptime, uint8_t key_len) {
  EncodeFixed32(dst, value_len);
  EncodeFixed32(dst + 4, flags);
  EncodeFixed64(dst + 8, uint64_t(exptime));
  dst[16] = char(key_len);
  dst[17] = dst[18] = dst[19] = 0;
}

DataFileWriter::DataFileWriter(Env* env, std::string dir, std::string node, uint64_t dump_start_ms,
                               uint16_t version)
    : env_(env), dir_(std::move(dir)), node_(std::move(node)), dump_start_ms_(dump_start_ms),
      hash_(XXH3_createState()), version_(version) {}

DataFileWriter::~DataFileWriter() {
  Abandon();
  XXH3_freeState(hash_);
}

Status DataFileWriter::Open(uint64_t chunk, uint32_t part, uint64_t first_key_index) {
  if (file_) return Status::InvalidArgument("data file already open");
  chunk_ = chunk;
  part_ = part;
  first_key_index_ = first_key_index;
  records_ = records_bytes_ = 0;
  tmp_name_ = TmpDataFileName(node_, chunk, part);
  CW_RETURN_IF_ERROR(env_->NewWritableFile(dir_ + "/" + tmp_name_, &file_));
  XXH3_64bits_reset(hash_);
  std::string h(DataFileHeaderSize(node_.size()), '\0');
  std::memcpy(&h[0], kDataMagic, kMagicSize);
  if (!IsKnownFormat(version_)) return Status::InvalidArgument("unknown data format version");
  EncodeFixed16(&h[8], version_);
  EncodeFixed16(&h[10], uint16_t(h.size()));
  EncodeFixed32(&h[12], part);
  EncodeFixed64(&h[16], dump_start_ms_);
  EncodeFixed64(&h[24], chunk);
  EncodeFixed64(&h[32], first_key_index);
  EncodeFixed16(&h[40], uint16_t(node_.size()));
  if (clock_known_) {
    EncodeFixed16(&h[42], clock_flags_);
    EncodeFixed32(&h[44], uint32_t(source_clock_ms_));
  }
  std::memcpy(&h[kHeaderFixed], node_.data(), node_.size());
  header_len_ = h.size();
  XXH3_64bits_update(hash_, h.data(), h.size());
  Status s = file_->Append(h);
  if (!s.ok()) Abandon();
  return s;
}

Status DataFileWriter::AppendRaw(const struct iovec* iov, int iovcnt, uint64_t records) {
  if (!file_) return Status::InvalidArgument("data file not open");
  for (int i = 0; i < iovcnt; i++) {
    XXH3_64bits_update(hash_, iov[i].iov_base, iov[i].iov_len);
    records_bytes_ += iov[i].iov_len;
  }
  records_ += records;
  return file_->Appendv(iov, iovcnt);
}

Status DataFileWriter::AddRecord(const Slice& key, uint32_t flags, int64_t exptime, const Slice& value,
                                 const SourceStamp& stamp) {
  if (key.empty() || key.size() > kMaxKeyLen) return Status::InvalidArgument("key length out of range");
  if (IsCommandFormat(version_)) {
    CW_RETURN_IF_ERROR(CheckRecordV2(key, exptime));
    if (version_ == kFormatVersion3 && stamp.exp != kNeverExpires && stamp.exp <= 0)
      return Status::InvalidArgument("source_exp " + std::to_string(stamp.exp));
    // Version 3: the stamp first; a meta line's O names the stamp's offset (the record's).
    char st[kSourceStampSize];
    EncodeSourceStamp(st, stamp);
    const size_t sn = version_ == kFormatVersion3 ? kSourceStampSize : 0;
    if (NeedsBinaryRecord(key)) {
      char head[kBinaryHeadV2];
      EncodeBinaryHeadV2(head, key.size(), uint32_t(value.size()), flags, exptime);
      struct iovec iov[4] = {{st, sn},
                             {head, sizeof head},
                             {const_cast<char*>(key.data()), key.size()},
                             {const_cast<char*>(value.data()), value.size()}};
      return AppendRaw(iov, 4, 1);
    }
    char line[kMaxMetaLineV2];
    const size_t n = EncodeMetaLineV2(line, key, uint32_t(value.size()), flags, exptime, file_bytes());
    struct iovec iov[4] = {{st, sn},
                           {line, n},
                           {const_cast<char*>(value.data()), value.size()},
                           {const_cast<char*>("\r\n"), 2}};
    return AppendRaw(iov, 4, 1);
  }
  char hdr[kRecordHeaderSize];
  EncodeRecordHeader(hdr, uint32_t(value.size()), flags, exptime, uint8_t(key.size()));
  struct iovec iov[3] = {{hdr, sizeof hdr},
                         {const_cast<char*>(key.data()), key.size()},
                         {const_cast<char*>(value.data()), value.size()}};
  return AppendRaw(iov, 3, 1);
}

Status DataFileWriter::Finish(uint64_t end_key_index, uint64_t misses, PublishedFile* out,
                              const std::function<Status(const PublishedFile&)>& before_publish) {
  if (!file_) return Status::InvalidArgument("data file not open");
  char t[kTrailerSize];
  std::memcpy(t, kTrailerMagic, kMagicSize);
  EncodeFixed64(t + 8, records_);
  EncodeFixed64(t + 16, records_bytes_);
  EncodeFixed64(t + 24, end_key_index);
  EncodeFixed64(t + 32, misses);
  XXH3_64bits_update(hash_, t, sizeof t);
  Status s = file_->Append(Slice(t, sizeof t));
  if (s.ok()) s = file_->Sync();
  if (s.ok()) s = file_->Close();
  if (!s.ok()) {
    Abandon();
    return s;
  }
  file_.reset();
  const uint64_t h = XXH3_64bits_digest(hash_);
  PublishedFile f;
  f.name = DataFileName(node_, chunk_, part_, h);
  f.chunk = chunk_;
  f.part = part_;
  f.xxh3 = h;
  f.records = records_;
  f.misses = misses;
  f.bytes = header_len_ + records_bytes_ + kTrailerSize;
  f.first_key_index = first_key_index_;
  f.end_key_index = end_key_index;
  if (before_publish) s = before_publish(f);
  if (s.ok()) s = PublishFile(env_, dir_, tmp_name_, f.name);
  if (!s.ok()) {
    env_->RemoveFile(dir_ + "/" + tmp_name_);
    return s;
  }
  if (out) *out = f;
  return Status::OK();
}

void DataFileWriter::Abandon() {
  if (file_) {
    file_->Close();
    file_.reset();
    env_->RemoveFile(dir_ + "/" + tmp_name_);
  }
}

Status ReadDataFile(Env* env, const std::string& dir, const std::string& name, bool verify_checksum,
                    PublishedFile* info, std::vector<DataRecord>* records) {
  ParsedName pn;
  if (!ParseDataFileName(name, &pn)) return Status::Corruption(name + ": not a data file name");
  const std::string path = dir + "/" + name;
  uint64_t size = 0;
  CW_RETURN_IF_ERROR(env->GetFileSize(path, &size));
  if (size < kHeaderFixed + kTrailerSize) return Status::Corruption(name + ": too short");
  std::string head;
  CW_RETURN_IF_ERROR(env->ReadAt(path, 0, DataFileHeaderSize(pn.node.size()), &head));
  if (std::memcmp(head.data(), kDataMagic, kMagicSize) != 0) return Status::Corruption(name + ": bad magic");
  const uint16_t version = DecodeFixed16(&head[8]);
  if (!IsKnownFormat(version)) return Status::Corruption(name + ": bad version");
  const uint16_t hlen = DecodeFixed16(&head[10]);
  const uint16_t nlen = DecodeFixed16(&head[40]);
  if (hlen != DataFileHeaderSize(pn.node.size()) || nlen != pn.node.size() ||
      head.compare(kHeaderFixed, nlen, pn.node) != 0 || DecodeFixed64(&head[24]) != pn.chunk ||
      DecodeFixed32(&head[12]) != pn.part)
    return Status::Corruption(name + ": header disagrees with name");
  std::string tr;
  CW_RETURN_IF_ERROR(env->ReadAt(path, size - kTrailerSize, kTrailerSize, &tr));
  if (std::memcmp(tr.data(), kTrailerMagic, kMagicSize) != 0) return Status::Corruption(name + ": no trailer");
  const uint64_t rec_count = DecodeFixed64(&tr[8]);
  const uint64_t rec_bytes = DecodeFixed64(&tr[16]);
  if (hlen + rec_bytes + kTrailerSize != size) return Status::Corruption(name + ": size disagrees with trailer");
  PublishedFile f;
  f.name = name;
  f.chunk = pn.chunk;
  f.part = pn.part;
  f.xxh3 = pn.xxh3;
  f.records = rec_count;
  f.bytes = size;
  f.first_key_index = DecodeFixed64(&head[32]);
  f.end_key_index = DecodeFixed64(&tr[24]);
  f.misses = DecodeFixed64(&tr[32]);
  f.version = version;
  if (f.end_key_index < f.first_key_index || f.end_key_index - f.first_key_index != f.records + f.misses)
    return Status::Corruption(name + ": key range disagrees with record and miss counts");
  if (verify_checksum || records) {
    std::string all;
    CW_RETURN_IF_ERROR(env->ReadFileToString(path, &all));
    if (all.size() != size) return Status::Corruption(name + ": size changed while reading");
    if (XXH3_64bits(all.data(), all.size()) != pn.xxh3) return Status::Corruption(name + ": checksum mismatch");
    size_t p = hlen;
    const size_t end = hlen + rec_bytes;
    uint64_t n = 0;
    while (p < end && IsCommandFormat(version)) {
      RecordV2 r;
      size_t nxt = 0;
      Status rs = ParseCommandRecord(version, all.data(), p, end, &r, &nxt);
      if (!rs.ok()) return Status::Corruption(name + ": " + rs.message());
      if (records)
        records->push_back(DataRecord{r.key, r.flags, r.exptime, r.value.ToString(), r.stamp.cas, r.stamp.exp});
      p = nxt;
      n++;
    }
    while (p < end) {
      if (end - p < kRecordHeaderSize) return Status::Corruption(name + ": truncated record header");
      const uint32_t vlen = DecodeFixed32(&all[p]);
      const uint32_t flags = DecodeFixed32(&all[p + 4]);
      const int64_t exp = int64_t(DecodeFixed64(&all[p + 8]));
      const uint8_t klen = uint8_t(all[p + 16]);
      if (klen == 0 || (exp != kNeverExpires && exp <= 0)) return Status::Corruption(name + ": invalid record");
      p += kRecordHeaderSize;
      if (end - p < uint64_t(klen) + vlen) return Status::Corruption(name + ": truncated record");
      if (records) records->push_back(DataRecord{all.substr(p, klen), flags, exp, all.substr(p + klen, vlen)});
      p += klen + vlen;
      n++;
    }
    if (n != rec_count) return Status::Corruption(name + ": record count mismatch");
  }
  if (info) *info = f;
  return Status::OK();
}

}  // namespace cachewarm
