#include "stream_sink.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

#include "binary_get.h"
#include "cachewarm_core.h"
#include "codec.h"
#include "coding.h"
#include "format.h"
#include "meta_parser.h"
#include "net.h"
#include "record_v2.h"

namespace cachewarm {

namespace {
constexpr size_t kArenaBytes = 256 << 10;
// The longest command line: "\r\n" + "ms " + a 250-character key + " " + 10 digits + " b T" + 20
// digits + " F" + 10 digits + " ME q O" + 20 digits + "\r\n", or a binary header + extras + key.
constexpr size_t kMaxLine = 400;
// Iovecs a connection may hold before the sink flushes (writev takes IOV_MAX = 1024 at a time).
constexpr size_t kMaxQueued = 900;
// Keys per read-back round trip (small enough that requests and answers fit the socket buffers).
constexpr size_t kCheckGroup = 64;
const char kCrlf[] = "\r\n";

char* Put(char* p, const char* s, size_t n) {
  std::memcpy(p, s, n);
  return p + n;
}

double MonotonicS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

StreamSink::StreamSink(Stream* stream)
    : s_(stream), add_(stream->add_mode()), arena_(new char[kArenaBytes]), hash_(XXH3_createState()) {
  std::vector<Endpoint> eps;
  for (size_t i = 0; i < s_->destinations(); i++) {
    d_.emplace_back(new Dest(s_->endpoint(i).address()));
    eps.push_back(s_->endpoint(i));
  }
  const Options& o = s_->options();
  if (add_)
    rechecker_.reset(new StreamRecheck(o.host, o.port, eps, o.stream.settle_s, o.stream.destination_timeout_s,
                                       [st = s_](const Status& e) { st->Fail(e); }));
}

StreamSink::~StreamSink() {
  rechecker_.reset();  // its thread first: what it runs may use this sink's stream
  XXH3_freeState(hash_);
}

uint64_t StreamSink::PlannedMemory(size_t destinations) {
  const uint64_t per_conn = (64 << 10) + 1024 * sizeof(struct iovec);
  return kArenaBytes + destinations * 2 * per_conn + kMaxTaggedRecords * (sizeof(Tagged) + kMaxKeyLen) +
         kBinaryRecvBytes + (1 << 20) + StreamRecheck::PlannedMemory();
}

std::vector<DestConn*> StreamSink::Conns() {
  std::vector<DestConn*> c;
  for (auto& d : d_) {
    c.push_back(&d->meta);
    c.push_back(&d->bin);
  }
  return c;
}

Status StreamSink::Connect() {
  for (size_t i = 0; i < d_.size(); i++)
    if (!d_[i]->meta.connected()) CW_RETURN_IF_ERROR(d_[i]->meta.Connect(s_->endpoint(i).connect_host(), s_->endpoint(i).port));
  return Status::OK();
}

void StreamSink::ResetPart() {
  records_ = bytes_ = 0;
  oversize_.clear();
  tags_.clear();
  recheck_ = RecheckPart();
  answered_.clear();
  for (auto& d : d_) {
    d->n = StreamCounts();
    d->sent = d->sent_bin = 0;
    d->crlf_owed = false;
  }
  st_ = kHeader;
  hdr_have_ = key_have_ = line_have_ = 0;
  tail_left_ = 0;
  value_left_ = 0;
  arena_used_ = 0;
  pending_items_ = pending_bytes_ = 0;
}

Status StreamSink::Open(uint64_t chunk, uint32_t part, uint64_t first_key_index) {
  if (open_) return Status::InvalidArgument("stream part already open");
  open_ = true;
  chunk_ = chunk;
  part_ = part;
  first_ = first_key_index;
  // The attempt that failed may have got further than the redo's part ends: tag to the chunk's end.
  tagged_ = chunk == retry_chunk_ || s_->IsResend(chunk, part);
  ResetPart();
  return Connect();
}

void StreamSink::Abandon() {
  if (rechecker_) rechecker_->Drain();  // the parts handed over are re-checked and recorded first
  open_ = false;
  ResetPart();
  for (auto& d : d_) {  // a connection may hold half a command (and iovecs into freed buffers)
    d->meta.Close();
    d->bin.Close();
  }
}

uint64_t StreamSink::file_bytes() const {
  // A resend part keeps each record's key until Finish: cut it at kMaxTaggedRecords; the re-check
  // keeps each stored record's key and stamp: cut it at StreamRecheck::kPartBytes.
  if (tagged_ && tags_.size() >= kMaxTaggedRecords) return UINT64_MAX / 2;
  if (recheck_.bytes() >= StreamRecheck::kPartBytes) return UINT64_MAX / 2;
  return bytes_;
}

Status StreamSink::Reserve() {
  if (arena_used_ + kMaxLine > kArenaBytes) return Flush();
  for (auto& d : d_)
    if (d->meta.queued_iovecs() > kMaxQueued || d->bin.queued_iovecs() > kMaxQueued) return Flush();
  return Status::OK();
}

Status StreamSink::Flush() {
  for (auto& d : d_) {
    if (d->crlf_owed) d->meta.Queue(kCrlf, 2);
    d->crlf_owed = false;
  }
  if (pending_items_) {
    s_->item_limiter()->Acquire(pending_items_);
    s_->byte_limiter()->Acquire(pending_bytes_);
    pending_items_ = pending_bytes_ = 0;
  }
  std::vector<DestConn*> c = Conns();
  Status s = DestConn::FlushAll(c.data(), c.size(), kIoTimeoutMs);
  arena_used_ = 0;
  return s;
}

// A record's header and key are here: route it, decide, queue its command line.
Status StreamSink::StartRecord() {
  records_++;
  bytes_ += kRecordHeaderSize + key_len_ + vlen_;
  const Slice key(key_, key_len_);
  dest_ = s_->Route(key);
  Dest& d = *d_[dest_];
  action_ = kSkip;
  // The T on the destination's own clock (memcached converts an absolute T with its idea of the
  // time): moved by its expiry shift (never later than the source's expiry), clamped to 2^31-1.
  const int64_t ttl_dest =
      exptime_ == kNeverExpires ? 0
                                : DestExpiry(exptime_, int64_t(std::floor(dropped_ + s_->clock_low(dest_))));
  if (exptime_ != kNeverExpires && (exptime_ <= now_ || ttl_dest < 0)) {
    d.n.expired++;
    return Status::OK();
  }
  if (!s_->limit(dest_).Fits(key_len_, vlen_, flags_)) {
    d.n.oversize++;
    oversize_.push_back(OversizeItem{dest_, key.ToString(), vlen_, flags_});
    return Status::OK();
  }
  const uint64_t ttl = uint64_t(ttl_dest);
  const bool plain = IsPlainKey(key);
  if (!plain) Base64Encode(key, &b64_);
  const bool meta_named = plain || b64_.size() <= kMaxKeyLen;
  const uint64_t ord = add_ ? recheck_.entries.size() : tags_.size();
  CW_RETURN_IF_ERROR(Reserve());
  char* line = arena_.get() + arena_used_;
  char* p = line;
  binary_key_ = !plain;
  if (add_) {
    // A non-quiet binary ADD for every key: its answer carries our write's CAS (the re-check's c_w),
    // and a failed one never unlinks the key's live value (`ms ... ME` does, on a failed allocation).
    if (!d.bin.connected()) CW_RETURN_IF_ERROR(d.bin.Connect(s_->endpoint(dest_).connect_host(), s_->endpoint(dest_).port));
    cw_bin_add_head(reinterpret_cast<unsigned char*>(p), key_len_, vlen_, flags_,
                    uint32_t(std::min<uint64_t>(ttl, 0xFFFFFFFFu)), uint32_t(ord));
    p = Put(p + CW_BIN_ADD_HEAD, key_, key_len_);
    d.bin.Queue(line, size_t(p - line));
    action_ = kSendBinary;
    RecheckEntry e;
    e.source_cas = stamp_cas_;
    e.source_exp = stamp_exp_;
    e.value_len = int64_t(vlen_);
    e.key_off = uint32_t(recheck_.keys.size());
    e.key_len = uint8_t(key_len_);
    e.dest = uint16_t(dest_);
    recheck_.keys.append(key_, key_len_);
    recheck_.entries.push_back(e);
    answered_.push_back(0);
  } else if (meta_named) {
    if (d.crlf_owed) p = Put(p, kCrlf, 2);  // the previous value's end rides with this line
    d.crlf_owed = false;
    const cw_ms m = {plain ? key_ : b64_.data(), plain ? key_len_ : b64_.size(), !plain, vlen_, ttl, flags_, 0,
                     tagged_, ord};
    p += cw_ms_line(p, &m);
    d.meta.Queue(line, size_t(p - line));
    action_ = kSend;
  } else {
    // No meta command can name it: the binary protocol's SETQ, on a connection of its own.
    if (!d.bin.connected()) CW_RETURN_IF_ERROR(d.bin.Connect(s_->endpoint(dest_).connect_host(), s_->endpoint(dest_).port));
    cw_bin_store_head(reinterpret_cast<unsigned char*>(p), CW_BIN_OP_SETQ, key_len_, vlen_, flags_,
                      uint32_t(std::min<uint64_t>(ttl, 0xFFFFFFFFu)), uint32_t(ord));
    p = Put(p + CW_BIN_ADD_HEAD, key_, key_len_);
    d.bin.Queue(line, size_t(p - line));
    action_ = kSendBinary;
  }
  arena_used_ += size_t(p - line);
  pending_items_++;
  pending_bytes_ += key_len_ + vlen_;
  if (tagged_) {
    tags_.push_back(Tagged{uint32_t(dest_), flags_, vlen_, 0, key.ToString(), !meta_named});
    XXH3_64bits_reset(hash_);
  }
  return Status::OK();
}

void StreamSink::Value(const char* p, size_t n) {
  if (action_ == kSkip || n == 0) return;
  Dest& d = *d_[dest_];
  (action_ == kSend ? d.meta : d.bin).Queue(p, n);
  if (tagged_) XXH3_64bits_update(hash_, p, n);
}

void StreamSink::EndRecord() {
  if (action_ == kSkip) return;
  Dest& d = *d_[dest_];
  if (action_ == kSend) {
    d.crlf_owed = true;
    d.sent++;
  } else {
    d.sent_bin++;
    if (binary_key_) d.n.binary++;  // keys with no text form (add mode sends every key as a binary ADD)
  }
  if (tagged_) tags_.back().hash = XXH3_64bits_digest(hash_);
}

// A v3 record's meta line (`ms <key> <len>[ b] T<expiry> F<flags> ME q O<offset>`, record_v2.h): the
// key, the value's length, flags and exptime. The records come from this process's own receive stream.
Status StreamSink::ParseLine() {
  size_t n = line_have_;
  if (n < 2 || line_[n - 2] != '\r' || line_[n - 1] != '\n') return Status::Corruption("a stream record's line without its end");
  n -= 2;
  std::vector<std::pair<size_t, size_t>>& tok = tok_;
  tok.clear();
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && line_[j] != ' ') j++;
    tok.emplace_back(i, j - i);
    i = j + 1;
  }
  auto num = [&](size_t t, size_t skip, uint64_t* out) {
    if (t >= tok.size() || tok[t].second <= skip) return false;
    uint64_t v = 0;
    for (size_t i = tok[t].first + skip; i < tok[t].first + tok[t].second; i++) {
      if (line_[i] < '0' || line_[i] > '9') return false;
      v = v * 10 + uint64_t(line_[i] - '0');
    }
    *out = v;
    return true;
  };
  if (tok.size() < 6 || tok[0].second != 2 || std::memcmp(line_, "ms", 2) != 0)
    return Status::Corruption("a stream record that is not a meta add");
  const bool b64 = tok[3].second == 1 && line_[tok[3].first] == 'b';
  const size_t t = b64 ? 4 : 3;
  uint64_t len = 0, expiry = 0, flags = 0;
  if (!num(2, 0, &len) || !num(t, 1, &expiry) || !num(t + 1, 1, &flags) || len > 0xFFFFFFFFu || flags > 0xFFFFFFFFu)
    return Status::Corruption("a malformed stream record line");
  const char* k = line_ + tok[1].first;
  if (b64) {
    const long m = Base64DecodeInPlace(k, tok[1].second, key_);
    if (m <= 0 || m > long(kMaxKeyLen)) return Status::Corruption("a stream record's base64 key is malformed");
    key_len_ = size_t(m);
  } else {
    if (tok[1].second == 0 || tok[1].second > kMaxKeyLen) return Status::Corruption("a stream record's key is malformed");
    std::memcpy(key_, k, tok[1].second);
    key_len_ = tok[1].second;
  }
  vlen_ = uint32_t(len);
  flags_ = uint32_t(flags);
  exptime_ = ExptimeOf(int64_t(expiry));
  return Status::OK();
}

Status StreamSink::AppendRaw(const struct iovec* iov, int iovcnt, uint64_t /*records*/) {
  if (!open_) return Status::InvalidArgument("stream part not open");
  now_ = int64_t(std::time(nullptr));
  for (int i = 0; i < iovcnt; i++) {
    const char* p = static_cast<const char*>(iov[i].iov_base);
    size_t len = iov[i].iov_len;
    while (len > 0) {
      if (st_ == kHeader) {  // the source stamp (data-format section 8.1)
        const size_t take = std::min(kSourceStampSize - hdr_have_, len);
        std::memcpy(hdr_ + hdr_have_, p, take);
        hdr_have_ += take, p += take, len -= take;
        if (hdr_have_ < kSourceStampSize) continue;
        hdr_have_ = 0;
        stamp_cas_ = DecodeFixed64(hdr_);
        stamp_exp_ = int64_t(DecodeFixed64(hdr_ + 8));
        line_have_ = 0;
        st_ = kLine;
      } else if (st_ == kLine) {  // a meta record's line up to its "\n", or a binary record's head
        if (line_have_ == 0 && uint8_t(*p) == kBinaryMagic) {
          st_ = kBinHead;
          continue;
        }
        const char* nl = static_cast<const char*>(std::memchr(p, '\n', len));
        const size_t take = nl ? size_t(nl - p) + 1 : len;
        if (line_have_ + take > sizeof line_) return Status::Corruption("an overlong stream record line");
        std::memcpy(line_ + line_have_, p, take);
        line_have_ += take, p += take, len -= take;
        if (!nl) continue;
        CW_RETURN_IF_ERROR(ParseLine());
        tail_left_ = 2;
        CW_RETURN_IF_ERROR(StartRecord());
        value_left_ = vlen_;
        st_ = kValue;
      } else if (st_ == kBinHead) {
        const size_t take = std::min(kBinaryHeadV2 - line_have_, len);
        std::memcpy(line_ + line_have_, p, take);
        line_have_ += take, p += take, len -= take;
        if (line_have_ < kBinaryHeadV2) continue;
        const auto be32 = [&](size_t at) {
          return (uint32_t(uint8_t(line_[at])) << 24) | (uint32_t(uint8_t(line_[at + 1])) << 16) |
                 (uint32_t(uint8_t(line_[at + 2])) << 8) | uint32_t(uint8_t(line_[at + 3]));
        };
        key_len_ = (size_t(uint8_t(line_[2])) << 8) | uint8_t(line_[3]);
        const uint32_t body = be32(8);
        if (key_len_ == 0 || key_len_ > kMaxKeyLen || body < 8 + key_len_)
          return Status::Corruption("a malformed binary stream record");
        vlen_ = uint32_t(body - 8 - key_len_);
        flags_ = be32(24);
        exptime_ = ExptimeOf(int64_t(be32(28)));
        key_have_ = 0;
        tail_left_ = 0;
        st_ = kKey;
      } else if (st_ == kKey) {
        const size_t take = std::min(key_len_ - key_have_, len);
        std::memcpy(key_ + key_have_, p, take);
        key_have_ += take, p += take, len -= take;
        if (key_have_ < key_len_) continue;
        CW_RETURN_IF_ERROR(StartRecord());
        value_left_ = vlen_;
        st_ = kValue;
      } else if (st_ == kValue) {
        const size_t take = size_t(std::min<uint64_t>(value_left_, len));
        Value(p, take);
        value_left_ -= take, p += take, len -= take;
        if (action_ != kSkip && (d_[dest_]->meta.queued_iovecs() > kMaxQueued || d_[dest_]->bin.queued_iovecs() > kMaxQueued))
          CW_RETURN_IF_ERROR(Flush());
      } else {  // kTail: the meta record's "\r\n" after its value
        const size_t take = std::min(tail_left_, len);
        tail_left_ -= take, p += take, len -= take;
      }
      if (st_ == kValue && value_left_ == 0) {
        EndRecord();
        st_ = tail_left_ ? kTail : kHeader;
      } else if (st_ == kTail && tail_left_ == 0) {
        st_ = kHeader;
      }
    }
  }
  // Every queued iovec may point into the caller's buffer: all of it goes out before returning.
  return Flush();
}

// The NS answers of a resend: which name our own earlier write (the destination holds exactly our
// value and flags) and which a live one. tags[d] = ordinals that answered NS at destination d.
Status StreamSink::CheckTagged(const std::vector<std::vector<uint64_t>>& tags) {
  for (size_t i = 0; i < tags.size(); i++) {
    Dest& d = *d_[i];
    std::vector<const Tagged*> meta, bin;
    for (uint64_t ord : tags[i]) {
      if (ord >= tags_.size() || tags_[ord].dest != i)
        return Status::Protocol("destination " + d.meta.address() + " answered NS for a write it was not sent");
      (tags_[ord].binary ? bin : meta).push_back(&tags_[ord]);
    }
    uint64_t ours = 0;
    const Endpoint& ep = s_->endpoint(i);
    // Meta-expressible keys: pipelined `mg <key> v f` groups ended by `mn`.
    Conn c;
    if (!meta.empty()) CW_RETURN_IF_ERROR(c.Connect(ep.connect_host(), ep.port, kConnectTimeoutMs));
    for (size_t g = 0; g < meta.size(); g += kCheckGroup) {
      const size_t end = std::min(meta.size(), g + kCheckGroup);
      std::string req;
      for (size_t k = g; k < end; k++) {
        const std::string& key = meta[k]->key;
        req += "mg ";
        if (IsPlainKey(key)) {
          req += key;
        } else {
          Base64Encode(key, &b64_);
          req += b64_ + " b";
        }
        req += " v f q O" + std::to_string(k) + "\r\n";
      }
      req += "mn\r\n";
      CW_RETURN_IF_ERROR(c.SendAll(req, kIoTimeoutMs));
      std::string buf;
      char tmp[65536];
      for (bool done = false; !done;) {
        size_t n = 0;
        CW_RETURN_IF_ERROR(c.Recv(tmp, sizeof tmp, &n, kIoTimeoutMs));
        buf.append(tmp, n);
        size_t pos = 0;
        while (!done) {
          MetaResponse r;
          std::string err;
          const ParseResult pr = ParseMetaHeader(buf.data() + pos, buf.size() - pos, &r, &err);
          if (pr == ParseResult::kNeedMore) break;
          if (pr == ParseResult::kBad) return Status::Protocol("reading back from " + d.meta.address() + ": " + err);
          if (r.type == MetaResponse::kNoop) {
            pos += r.header_len;
            done = true;
          } else if (r.type == MetaResponse::kValue) {
            if (buf.size() - pos < r.header_len + r.value_len + 2) break;
            if (!r.has_opaque || r.opaque < g || r.opaque >= end)
              return Status::Protocol("reading back from " + d.meta.address() + ": an answer for no key asked");
            const Tagged& t = *meta[r.opaque];
            const char* v = buf.data() + pos + r.header_len;
            if (r.value_len == t.value_len && r.flags == t.flags && XXH3_64bits(v, r.value_len) == t.hash) ours++;
            pos += r.header_len + r.value_len + 2;
          } else if (r.type == MetaResponse::kMiss) {
            pos += r.header_len;
          } else {
            return Status::Server("reading back from " + d.meta.address() + ": " + r.message);
          }
        }
        buf.erase(0, pos);
      }
    }
    if (!bin.empty()) {
      std::vector<std::string> keys;
      for (const Tagged* t : bin) keys.push_back(t->key);
      BinaryGetter g(ep.connect_host(), ep.port, kBinaryRecvBytes);
      size_t cur = 0;
      uint64_t got = 0;
      uint32_t flags = 0;
      std::string unavailable;
      CW_RETURN_IF_ERROR(g.Get(
          keys,
          [&](size_t k, uint32_t f, uint32_t len, uint64_t) {
            cur = k;
            flags = f;
            got = 0;
            XXH3_64bits_reset(hash_);
            if (len == 0 && bin[k]->value_len == 0 && f == bin[k]->flags &&
                XXH3_64bits_digest(hash_) == bin[k]->hash)
              ours++;
            return Status::OK();
          },
          [&](const Slice& piece) {
            XXH3_64bits_update(hash_, piece.data(), piece.size());
            got += piece.size();
            const Tagged& t = *bin[cur];
            if (got == t.value_len && flags == t.flags && XXH3_64bits_digest(hash_) == t.hash) ours++;
            return Status::OK();
          },
          [&](size_t, const std::string& why) {
            return Status::Server("reading back from " + d.meta.address() + ": " + why);
          },
          &unavailable));
      if (!unavailable.empty()) return Status::Server("reading back from " + d.meta.address() + ": " + unavailable);
    }
    const uint64_t answered = meta.size() + bin.size();
    d.n.resent += ours;
    d.n.present += answered - ours;
  }
  return Status::OK();
}

Status StreamSink::Finish(uint64_t end_key_index, uint64_t misses, PublishedFile* out,
                          const std::function<Status(const PublishedFile&)>& before_publish) {
  return FinishPart(end_key_index, misses, before_publish, nullptr, out);
}

Status StreamSink::FinishThen(uint64_t end_key_index, uint64_t misses,
                              std::function<Status(const PublishedFile&)> before_publish,
                              std::function<void(const PublishedFile&)> after_publish) {
  return FinishPart(end_key_index, misses, std::move(before_publish), std::move(after_publish), nullptr);
}

void StreamSink::WhenDurable(std::function<void()> fn) {
  if (!rechecker_) {
    fn();
    return;
  }
  (void)rechecker_->Call(std::move(fn));  // not at all after a failure: the dump is then aborted
}

Status StreamSink::FinishPart(uint64_t end_key_index, uint64_t misses,
                              std::function<Status(const PublishedFile&)> before_publish,
                              std::function<void(const PublishedFile&)> after_publish, PublishedFile* out) {
  if (!open_) return Status::InvalidArgument("stream part not open");
  if (rechecker_) CW_RETURN_IF_ERROR(rechecker_->error());
  CW_RETURN_IF_ERROR(Flush());
  if (st_ != kHeader) return Status::Corruption("a part ended inside a record");
  if (end_key_index < first_ || end_key_index - first_ != records_ + misses)
    return Status::Corruption("stream part " + s_->PartName(chunk_, part_) + ": keys " + std::to_string(first_) + ".." +
                              std::to_string(end_key_index) + " are not " + std::to_string(records_) +
                              " records + " + std::to_string(misses) + " misses");
  // Every write of the part applied: a mark on each connection, answered.
  for (auto& d : d_) {
    if (d->meta.connected()) d->meta.QueueMark();
    if (d->bin.connected()) d->bin.QueueMark();
  }
  std::vector<DestConn*> c = Conns();
  CW_RETURN_IF_ERROR(DestConn::AwaitMarks(c.data(), c.size(), kIoTimeoutMs));
  std::vector<std::vector<uint64_t>> tags(d_.size());
  for (size_t i = 0; i < d_.size(); i++) {
    Dest& d = *d_[i];
    DestConn::Replies r;
    d.meta.TakeReplies(&r);
    d.bin.TakeReplies(&r);
    d.n.present += r.not_stored;
    for (const auto& [ord, cas] : r.stored) {
      if (ord >= recheck_.entries.size() || recheck_.entries[ord].dest != i || answered_[ord])
        return Status::Protocol("destination " + d.meta.address() + " answered an ADD it was not sent");
      recheck_.entries[ord].ours = cas;
      answered_[ord] = 1;
    }
    for (uint64_t ord : r.tags)
      if (add_ && ord < answered_.size()) answered_[ord] = 2;
    if (tagged_) tags[i] = std::move(r.tags);
    else d.n.present += r.tags.size();  // a refused store (its opaque is not a tag)
  }
  if (tagged_) CW_RETURN_IF_ERROR(CheckTagged(tags));
  std::vector<StreamCounts> counts;
  uint64_t items = 0;
  for (auto& d : d_) {
    const uint64_t sent = d->sent + d->sent_bin;
    if (d->n.present + d->n.resent > sent)
      return Status::Protocol("destination " + d->meta.address() + " answered NS more often than it was written to");
    d->n.stored = sent - d->n.present - d->n.resent;
    items += d->n.items();
    counts.push_back(d->n);
  }
  if (items != records_)
    return Status::Corruption("stream part " + s_->PartName(chunk_, part_) + ": " + std::to_string(items) +
                              " items accounted for, " + std::to_string(records_) + " records");
  PublishedFile f;
  f.name = s_->PartName(chunk_, part_);
  f.chunk = chunk_;
  f.part = part_;
  f.records = records_;
  f.misses = misses;
  f.bytes = bytes_;
  f.first_key_index = first_;
  f.end_key_index = end_key_index;
  if (out) *out = f;
  Stream* st = s_;
  auto record = [st, f, counts, oversize = std::move(oversize_), before = std::move(before_publish),
                 after = std::move(after_publish)](const RecheckPart* part, const RecheckCounts* n) -> Status {
    if (part) CW_RETURN_IF_ERROR(st->RecordStamps(*part));
    if (before) CW_RETURN_IF_ERROR(before(f));
    CW_RETURN_IF_ERROR(st->RecordPart(f, counts, oversize, n));
    if (after) after(f);
    return Status::OK();
  };
  if (rechecker_) {
    // Every ADD answered: the stored ones (c_w known) are re-checked; an EXISTS of a resend may be
    // our own earlier write (c_w not known: compared); any other EXISTS kept a live value, which our
    // write did not touch.
    for (size_t k = 0; k < recheck_.entries.size(); k++) {
      if (answered_[k] == 0)
        return Status::Protocol("destination " + d_[recheck_.entries[k].dest]->meta.address() + " left an ADD unanswered");
      recheck_.entries[k].recheck = answered_[k] == 1 || tagged_;
    }
    recheck_.acked_at = MonotonicS();
    CW_RETURN_IF_ERROR(rechecker_->Push(std::move(recheck_), [record](const RecheckPart& part, const RecheckCounts& n) {
      return record(&part, &n);
    }));
  } else {
    CW_RETURN_IF_ERROR(record(nullptr, nullptr));
  }
  open_ = false;
  recover_started_ = -1;
  ResetPart();
  return Status::OK();
}

bool StreamSink::Recover(Status* s, ChunkTask* again) {
  if (!open_ || s->code() == Status::kServer) return false;  // an error answer is never retried
  bool lost = false;
  for (auto& d : d_) lost = lost || d->meta.broken() || !d->meta.connected() || d->bin.broken();
  if (!lost) return false;
  // An error another destination answered must not be dropped with the reconnect (the redo could
  // then succeed): read every connection still up to the end — a mark on each whose bytes all went
  // out, the replies already there on the others — and fail with the first error.
  // Not on a connection whose last command is incomplete (bytes still queued, or the record being
  // parsed is going there): a mark would be read as part of it.
  std::vector<DestConn*> up;
  for (size_t i = 0; i < d_.size(); i++) {
    Dest& d = *d_[i];
    const bool mid_record = st_ != kHeader && dest_ == i;
    for (DestConn* c : {&d.meta, &d.bin}) {
      if (!c->connected() || c->broken()) continue;
      const bool busy = mid_record && action_ == (c == &d.meta ? kSend : kSendBinary);
      if (c->queued_iovecs() == 0 && !busy) {
        if (c == &d.meta && d.crlf_owed) c->Queue(kCrlf, 2);  // the last value's end
        if (c == &d.meta) d.crlf_owed = false;
        c->QueueMark();
        up.push_back(c);
      } else {
        (void)c->Poll();
      }
    }
  }
  if (!up.empty()) (void)DestConn::AwaitMarks(up.data(), up.size(), kIoTimeoutMs);
  for (DestConn* c : Conns()) {
    if (!c->error().empty()) {
      *s = Status::Server(c->error());
      return false;
    }
  }
  const double now = MonotonicS();
  if (recover_started_ < 0) recover_started_ = now;
  std::fprintf(stderr, "cachewarm-dump: %s; reconnecting, then part %s is sent again (tagged)\n",
               s->ToString().c_str(), s_->PartName(chunk_, part_).c_str());
  // Every connection starts over: a connection that is still up may hold half a command.
  double wait = 0.1;
  for (size_t i = 0; i < d_.size(); i++) {
    const bool had_bin = d_[i]->bin.connected() || d_[i]->bin.broken();
    d_[i]->meta.Close();
    d_[i]->bin.Close();
    for (;;) {
      Status c = s_->CheckIdentity(i);
      if (c.code() == Status::kServer) {
        *s = c;
        return false;
      }
      if (c.ok()) c = d_[i]->meta.Connect(s_->endpoint(i).connect_host(), s_->endpoint(i).port);
      if (c.ok() && had_bin) c = d_[i]->bin.Connect(s_->endpoint(i).connect_host(), s_->endpoint(i).port);
      if (c.ok()) break;
      if (c.code() == Status::kServer) {
        *s = c;
        return false;
      }
      if (MonotonicS() - recover_started_ + wait > s_->options().stream.destination_timeout_s) {
        *s = Status::IOError("destination " + s_->endpoint(i).address() + " unavailable for " +
                             std::to_string(int(MonotonicS() - recover_started_)) + " s: " + c.ToString());
        return false;
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      wait = std::min(wait * 2, 5.0);
    }
  }
  *again = ChunkTask{chunk_, first_, part_};
  open_ = false;
  retry_chunk_ = chunk_;
  ResetPart();
  return true;
}

}  // namespace cachewarm
