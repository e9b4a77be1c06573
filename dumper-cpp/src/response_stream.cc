#include "response_stream.h"

#include <cstring>

#include "codec.h"
#include "record_v2.h"

namespace cachewarm {

ResponseStream::ResponseStream(size_t buffer_size, int64_t min_ttl, uint16_t format)
    : cap_(buffer_size), min_ttl_(min_ttl), format_(format) {
  buf_[0].reset(new char[cap_]);
  buf_[1].reset(new char[cap_]);
  cur_ = buf_[0].get();
  if (IsCommandFormat(format_)) lines_.reset(new char[kMaxPending * kLineSlot]);
}

struct iovec ResponseStream::RecordHead(int i, size_t key_len) const {
  (void)key_len;
  if (IsCommandFormat(format_)) return {lines_.get() + size_t(i) * kLineSlot, line_len_[i]};
  return {const_cast<char*>(hdrs_[i]), kRecordHeaderSize};
}

void ResponseStream::Reset() {
  filled_ = pos_ = 0;
  stream_left_ = 0;
  stream_binary_ = false;
  crlf_left_ = 0;
  hits_ = skipped_ = 0;
  niov_ = nrec_ = 0;
}

Status ResponseStream::Flush(RecordSink* sink) {
  if (niov_ == 0) return Status::OK();
  Status s = sink->Write(iov_, niov_, uint64_t(nrec_));
  niov_ = nrec_ = 0;
  return s;
}

// Validates a VA header line, decodes a base64 key in place, decides --min-ttl, and encodes the
// record header into the next slot of hdrs_ (the caller adds the iovecs).
Status ResponseStream::StartRecord(const MetaResponse& r, char* line, Slice* key_io, bool* skip, size_t* key_len,
                                   RecordSink* sink) {
  if (!r.has_flags || !r.has_ttl) return Status::Protocol("VA response without the f and t flags requested");
  size_t klen = key_io->size();
  if (key_io->empty()) {  // the sink does not know the key: the response's `k` token
    if (!r.has_key) return Status::Protocol("VA response without the k flag requested");
    char* key = line + r.key_offset;
    klen = r.key_len;
    if (r.key_base64) {
      long d = Base64DecodeInPlace(key, klen, key);
      if (d < 0) return Status::Protocol("malformed base64 key in response");
      klen = size_t(d);
    }
    *key_io = Slice(key, klen);
  }
  if (klen == 0 || klen > kMaxKeyLen) return Status::Protocol("key length out of range in response");
  hits_++;
  *skip = min_ttl_ > 0 && r.ttl != -1 && r.ttl < min_ttl_;
  if (*skip) {
    skipped_++;
    return Status::OK();
  }
  // On the source's clock: the listing's expiry when it agrees with the `mg t` (set_listed), else
  // the floor + t (never later); then moved onto the records' clock.
  int64_t exptime = kNeverExpires;
  // Version 3's stamp: the same expiry on the source's own clock (what the record's was moved from).
  SourceStamp stamp;
  stamp.cas = r.has_cas ? r.cas : 0;
  if (r.ttl != -1) {
    int64_t end = floor_ + r.ttl;
    if (listed_ != kNeverExpires) {
      const int64_t at = listed_ - r.ttl;
      if (at >= floor_ && at <= most_) {
        end = listed_;
        floor_ = at;
        agreed_++;
      } else if (at > most_) {
        above_++;
      }
    }
    stamp.exp = end;
    exptime = ClampExptime(end - ahead_);
  }
  listed_ = kNeverExpires;
  *key_len = klen;
  if (IsCommandFormat(format_)) {
    CW_RETURN_IF_ERROR(CheckRecordV2(*key_io, exptime));
    if (niov_ == 0) {
      pending_base_ = sink->NextRecordOffset();
      pending_bytes_ = 0;
    }
    char* slot = lines_.get() + size_t(nrec_) * kLineSlot;
    size_t st = 0;
    if (format_ == kFormatVersion3) {
      if (stamp.exp != kNeverExpires && stamp.exp <= 0) return Status::Protocol("an expiry before 1970 on the source");
      EncodeSourceStamp(slot, stamp);
      st = kSourceStampSize;
    }
    // A key with no meta form (187..250 bytes, no base64 form) that the worker could still fetch with
    // a raw-key `mg` (codec.h IsTextKey): its record is the binary ADDQ all such keys get, the head
    // in the line's slot, then the key and the value (no \r\n).
    binary_rec_[nrec_] = NeedsBinaryRecord(*key_io);
    if (binary_rec_[nrec_]) {
      EncodeBinaryHeadV2(slot + st, klen, r.value_len, r.flags, exptime);
      line_len_[nrec_] = st + kBinaryHeadV2;
      return Status::OK();
    }
    line_len_[nrec_] =
        st + EncodeMetaLineV2(slot + st, *key_io, r.value_len, r.flags, exptime, pending_base_ + pending_bytes_);
    return Status::OK();
  }
  EncodeRecordHeader(hdrs_[nrec_], r.value_len, r.flags, exptime, uint8_t(klen));
  return Status::OK();
}

// A streamed value has been passed on: its \r\n is checked next (crlf_left_); a version 2 record
// ends with it, so the sink gets one too.
Status ResponseStream::EndStreamedValue(RecordSink* sink) {
  crlf_left_ = 2;
  if (stream_skip_ || !IsCommandFormat(format_) || stream_binary_) return Status::OK();
  struct iovec v = {const_cast<char*>("\r\n"), 2};
  return sink->Write(&v, 1, 0);
}

Status ResponseStream::Commit(size_t n, RecordSink* sink) {
  filled_ += n;
  for (;;) {
    if (stream_left_ > 0) {
      size_t take = filled_ - pos_;
      if (take > stream_left_) take = size_t(stream_left_);
      if (take == 0) break;
      if (!stream_skip_) {
        struct iovec v = {cur_ + pos_, take};
        CW_RETURN_IF_ERROR(sink->Write(&v, 1, 0));
      }
      pos_ += take;
      stream_left_ -= take;
      if (stream_left_ == 0) CW_RETURN_IF_ERROR(EndStreamedValue(sink));
      continue;
    }
    if (crlf_left_ > 0) {
      if (pos_ == filled_) break;
      const char want = crlf_left_ == 2 ? '\r' : '\n';
      if (cur_[pos_] != want) return Status::Protocol("value not followed by \\r\\n");
      pos_++;
      crlf_left_--;
      continue;
    }
    MetaResponse r;
    std::string err;
    ParseResult pr = ParseMetaHeader(cur_ + pos_, filled_ - pos_, &r, &err);
    if (pr == ParseResult::kNeedMore) break;
    if (pr == ParseResult::kBad) return Status::Protocol(err);
    switch (r.type) {
      case MetaResponse::kValue: {
        const uint64_t total = r.header_len + uint64_t(r.value_len) + 2;
        const bool complete = filled_ - pos_ >= total;
        if (!complete && total <= cap_) goto need_more;  // it will fit once the tail is moved
        // Streaming needs hdrs_[0] free; a full pending array needs a flush too.
        if (!complete || nrec_ == kMaxPending) CW_RETURN_IF_ERROR(Flush(sink));
        char* line = cur_ + pos_;
        bool skip = false;
        size_t klen = 0;
        Slice key;
        CW_RETURN_IF_ERROR(sink->OnValue(r, &key));
        CW_RETURN_IF_ERROR(StartRecord(r, line, &key, &skip, &klen, sink));
        char* value = line + r.header_len;
        if (complete) {
          if (value[r.value_len] != '\r' || value[r.value_len + 1] != '\n')
            return Status::Protocol("value not followed by \\r\\n");
          if (!skip && IsCommandFormat(format_) && binary_rec_[nrec_]) {
            iov_[niov_++] = RecordHead(nrec_, klen);
            iov_[niov_++] = {const_cast<char*>(key.data()), klen};
            iov_[niov_++] = {value, r.value_len};
            pending_bytes_ += line_len_[nrec_] + klen + r.value_len;
            nrec_++;
          } else if (!skip && IsCommandFormat(format_)) {
            // The command line holds the key; the value's iovec takes its trailing \r\n too.
            iov_[niov_++] = RecordHead(nrec_, klen);
            iov_[niov_++] = {value, size_t(r.value_len) + 2};
            pending_bytes_ += line_len_[nrec_] + r.value_len + 2;
            nrec_++;
          } else if (!skip) {
            iov_[niov_++] = {hdrs_[nrec_], kRecordHeaderSize};
            iov_[niov_++] = {const_cast<char*>(key.data()), klen};
            iov_[niov_++] = {value, r.value_len};
            nrec_++;
          }
          pos_ += size_t(total);
        } else {
          // Larger than a buffer: write header, key and the value bytes we have, stream the rest.
          stream_binary_ = !skip && IsCommandFormat(format_) && binary_rec_[0];
          if (stream_binary_) {
            struct iovec v[2] = {RecordHead(0, klen), {const_cast<char*>(key.data()), klen}};
            CW_RETURN_IF_ERROR(sink->Write(v, 2, 1));
          } else if (!skip && IsCommandFormat(format_)) {
            struct iovec v = RecordHead(0, klen);
            CW_RETURN_IF_ERROR(sink->Write(&v, 1, 1));
          } else if (!skip) {
            struct iovec v[2] = {{hdrs_[0], kRecordHeaderSize}, {const_cast<char*>(key.data()), klen}};
            CW_RETURN_IF_ERROR(sink->Write(v, 2, 1));
          }
          stream_skip_ = skip;
          stream_left_ = r.value_len;
          pos_ += r.header_len;
          if (stream_left_ == 0) CW_RETURN_IF_ERROR(EndStreamedValue(sink));
        }
        break;
      }
      case MetaResponse::kNoop: {
        pos_ += r.header_len;
        CW_RETURN_IF_ERROR(Flush(sink));
        const uint64_t h = hits_, sk = skipped_;
        hits_ = skipped_ = 0;
        CW_RETURN_IF_ERROR(sink->OnBatchEnd(h, sk));
        break;
      }
      case MetaResponse::kMiss:
        pos_ += r.header_len;
        break;
      case MetaResponse::kStat:
        // A look at the source's clock (`stats`) ahead of `mg`s on the same connection: memcached
        // answers in order, so every value after it was read no earlier than the time it shows.
        pos_ += r.header_len;
        if (r.has_time) floor_ = std::max(floor_, r.time);
        break;
      case MetaResponse::kEnd:
        pos_ += r.header_len;
        break;
      case MetaResponse::kServerError:
        return Status::Server("memcached answered: " + r.message);
      case MetaResponse::kClientError:
        return Status::Server("memcached answered: " + r.message);
      case MetaResponse::kError:
        return Status::Server("memcached answered ERROR (command not understood)");
      case MetaResponse::kHit:
        return Status::Protocol("HD response without a value to an mg asking for v");
      default:
        return Status::Protocol("unexpected response line: " + r.message);
    }
  }
need_more:
  CW_RETURN_IF_ERROR(Flush(sink));
  // Move the unfinished tail to the other buffer; it becomes the current one.
  const size_t tail = filled_ - pos_;
  char* other = buf_[cur_idx_ ^ 1].get();
  if (tail) std::memcpy(other, cur_ + pos_, tail);
  cur_idx_ ^= 1;
  cur_ = other;
  filled_ = tail;
  pos_ = 0;
  return Status::OK();
}

}  // namespace cachewarm
