#include "worker.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ctime>

#include "clock.h"
#include "codec.h"
#include "format.h"
#include "key_chunks.h"

namespace cachewarm {

namespace {

// One batch in flight per connection: measured on 2 cores (1M x 1 KB, memcached -t 2), a second
// batch in flight made the dump ~1.7x slower (it starves memcached's crawler of CPU), one batch
// ran at the ceiling reader's speed.
constexpr size_t kBatchesInFlight = 1;
// A batch asks for at most --batch keys and about this many bytes of values. Measured on 2 cores,
// alternating runs, medians of 5, twice: 1 MiB beat 256 KiB in all four comparisons (1M x 1 KB:
// 617k vs 551-580k items/s, 200k x 10 KB: 100-116k vs 93-98k); 512 KiB was between. (An earlier
// measurement that favoured 256 KiB ran while other builds loaded the machine.)
constexpr uint64_t kTargetBatchBytes = 1ULL << 20;

}  // namespace

Worker::Worker(const Options& o, Env* env, Checkpoint* checkpoint, WorkQueue* queue, RateLimiter* limiter,
               Progress* progress)
    : o_(o), env_(env), checkpoint_(checkpoint), queue_(queue), limiter_(limiter), progress_(progress),
      stream_(o.buffer_size, o.min_ttl), writer_(env, o.out, o.node_id, checkpoint->meta().dump_start_ms) {
  keys_.reserve(o.key_file_size + 8192);
  send_.reserve(size_t(o.batch) * kSendBytesPerKey);
  // Effective batch: small enough that a low --max-items-per-second is not bursty.
  batch_ = o.batch;
  const uint64_t rate = o.max_items_per_second;
  if (rate) batch_ = int(std::max<uint64_t>(1, std::min<uint64_t>(uint64_t(batch_), rate / 10 / uint64_t(o.threads))));
  adaptive_batch_ = batch_;
}

void Worker::Run() {
  Status s = conn_.Connect(o_.host, o_.port, kConnectTimeoutMs);
  ChunkTask t;
  while (s.ok() && queue_->Pop(&t)) {
    s = DoChunk(t);
    if (s.ok()) queue_->Done();
  }
  writer_.Abandon();
  if (!s.ok()) queue_->Fail(s);
}

Status Worker::Write(const struct iovec* iov, int iovcnt, uint64_t records) {
  uint64_t n = 0;
  for (int i = 0; i < iovcnt; i++) n += iov[i].iov_len;
  progress_->bytes += n;
  progress_->items += records;
  batch_bytes_ += n;
  return writer_.AppendRaw(iov, iovcnt, records);
}

Status Worker::OnBatchEnd(uint64_t hits, uint64_t skipped) {
  if (inflight_.empty()) return Status::Protocol("MN without a batch in flight");
  const Batch b = inflight_.front();
  inflight_.pop_front();
  if (hits > b.size) return Status::Protocol("more values than keys requested in a batch");
  const uint64_t m = (b.size - hits) + skipped;
  // Size the next batch so its response is about kTargetBatchBytes (large values: fewer keys).
  if (hits > skipped) {
    const uint64_t per_item = std::max<uint64_t>(1, batch_bytes_ / (hits - skipped));
    adaptive_batch_ = int(std::clamp<uint64_t>(kTargetBatchBytes / per_item, 8, uint64_t(batch_)));
  }
  batch_bytes_ = 0;
  file_misses_ += m;
  progress_->misses += m;
  progress_->skipped_min_ttl += skipped;
  // Cut a new part at this batch boundary once the file is big enough.
  if (writer_.file_bytes() >= o_.data_file_size && b.end < nkeys_) {
    CW_RETURN_IF_ERROR(FinishPart(b.end));
    CW_RETURN_IF_ERROR(writer_.Open(chunk_, part_, b.end));
  }
  return Status::OK();
}

Status Worker::FinishPart(uint64_t end) {
  PublishedFile f;
  CW_RETURN_IF_ERROR(writer_.Finish(end, file_misses_, &f));
  checkpoint_->AddFile(f);
  progress_->files++;
  file_misses_ = 0;
  part_++;
  return Status::OK();
}

Status Worker::LoadKeys(uint64_t chunk) {
  CW_RETURN_IF_ERROR(env_->ReadFileToString(checkpoint_->keys_dir() + "/" + KeyChunkName(chunk), &keys_));
  lines_.clear();
  return ForEachKeyLine(keys_, [&](const Slice& k, int64_t) {
    lines_.push_back({uint32_t(k.data() - keys_.data()), uint32_t(k.size())});
    return Status::OK();
  });
}

// Appends "mg <key> [b] v f t k q u\r\n" for key index i.
Status Worker::AppendGet(uint64_t i) {
  const Slice url(keys_.data() + lines_[i].first, lines_[i].second);
  if (!UrlDecode(url, &raw_)) return Status::Corruption("bad URL-encoded key in key list: " + url.ToString());
  if (raw_.empty() || raw_.size() > kMaxKeyLen) return Status::Corruption("key length out of range: " + url.ToString());
  send_ += "mg ";
  if (IsPlainKey(raw_)) {
    send_ += raw_;
    send_ += " v f t k q u\r\n";
  } else {
    Base64Encode(raw_, &b64_);
    if (b64_.size() > kMaxKeyLen)
      return Status::InvalidArgument("binary key too long to request in base64 (" + std::to_string(raw_.size()) +
                                     " bytes): " + url.ToString());
    send_ += b64_;
    send_ += " b v f t k q u\r\n";
  }
  return Status::OK();
}

Status Worker::DoChunk(const ChunkTask& t) {
  CW_RETURN_IF_ERROR(LoadKeys(t.chunk));
  chunk_ = t.chunk;
  part_ = t.next_part;
  nkeys_ = lines_.size();
  file_misses_ = 0;
  inflight_.clear();
  send_.clear();
  stream_.Reset();
  if (t.start_index > nkeys_) return Status::Corruption("published parts go past the end of key list " + KeyChunkName(t.chunk));
  CW_RETURN_IF_ERROR(writer_.Open(chunk_, part_, t.start_index));
  uint64_t next = t.start_index;
  size_t send_off = 0;
  auto last_rx = std::chrono::steady_clock::now();
  for (;;) {
    if (queue_->aborted()) return Status::IOError("aborted");
    if (send_off == send_.size() && next < nkeys_ && inflight_.size() < kBatchesInFlight) {
      const uint64_t n = std::min<uint64_t>(uint64_t(adaptive_batch_), nkeys_ - next);
      limiter_->Acquire(n);
      send_.clear();
      send_off = 0;
      for (uint64_t i = next; i < next + n; i++) CW_RETURN_IF_ERROR(AppendGet(i));
      send_ += "mn\r\n";
      next += n;
      inflight_.push_back({next, n});
    }
    if (send_off == send_.size() && next >= nkeys_ && inflight_.empty()) break;
    struct pollfd p = {conn_.fd(), short(POLLIN | (send_off < send_.size() ? POLLOUT : 0)), 0};
    int pr = ::poll(&p, 1, 1000);
    if (pr < 0 && errno != EINTR) return Status::IOError(ErrnoMessage("poll", errno));
    if (pr <= 0) {
      if (Since(last_rx) * 1000 > kIoTimeoutMs)
        return Status::IOError("timed out: " + conn_.peer() + " sent nothing for " +
                               std::to_string(kIoTimeoutMs / 1000) + " s");
      continue;
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t r = ::recv(conn_.fd(), stream_.WritePtr(), stream_.WritableBytes(), 0);
      if (r == 0) return Status::IOError("connection closed by " + conn_.peer() + " mid-dump (killed or restarted?)");
      if (r < 0 && errno != EAGAIN && errno != EINTR)
        return Status::IOError(ErrnoMessage("connection to " + conn_.peer() + " lost mid-dump (killed or restarted?)", errno));
      if (r > 0) {
        last_rx = std::chrono::steady_clock::now();
        stream_.set_now(int64_t(std::time(nullptr)));
        CW_RETURN_IF_ERROR(stream_.Commit(size_t(r), this));
      }
    }
    if ((p.revents & POLLOUT) && send_off < send_.size()) {
      ssize_t w = ::send(conn_.fd(), send_.data() + send_off, send_.size() - send_off, MSG_NOSIGNAL);
      if (w < 0 && errno != EAGAIN && errno != EINTR)
        return Status::IOError(ErrnoMessage("connection to " + conn_.peer() + " lost mid-dump (killed or restarted?)", errno));
      if (w > 0) send_off += size_t(w);
    }
  }
  if (!stream_.AtBoundary()) return Status::Protocol("unexpected bytes after the last MN from " + conn_.peer());
  return FinishPart(nkeys_);
}

}  // namespace cachewarm
