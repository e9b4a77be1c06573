#include "worker.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <charconv>
#include <cinttypes>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "async_part_writer.h"
#include "clock.h"
#include "codec.h"
#include "format.h"
#include "key_chunks.h"
#include "record_v2.h"
#include "reread.h"
#include "stream.h"

namespace cachewarm {

namespace {

// One batch in flight per connection: measured on 2 cores (1M x 1 KB, memcached -t 2), a second
// batch in flight made the dump ~1.7x slower (it starves memcached's crawler of CPU), one batch
// ran at the ceiling reader's speed.
// Measured again inside `cachewarm warm` (files, 1M x 1 KB, alternating, 2026-11-23): two batches
// in flight landed within the noise of one (medians of 4-5: 3.67 s vs 4.97 s with one in one run;
// 4.57 s vs 4.16 s in the next, with a 20 ms populator poll as well): no gain to show, one stays.
constexpr size_t kBatchesInFlight = 1;
// A batch asks for at most --batch keys and about this many bytes of values. Measured on 2 cores,
// alternating runs, medians of 5, twice: 1 MiB beat 256 KiB in all four comparisons (1M x 1 KB:
// 617k vs 551-580k items/s, 200k x 10 KB: 100-116k vs 93-98k); 512 KiB was between. (An earlier
// measurement that favoured 256 KiB ran while other builds loaded the machine.)
constexpr uint64_t kTargetBatchBytes = 1ULL << 20;
// How often a batch starts with a look at the source's clock (`stats`, answered before its `mg`s):
// a touched key's `mg t` counts from the time it shows, so a copy ends at most about this long (plus
// the whole second's rounding) before its source, whatever the other keys' TTLs.
constexpr double kClockLookS = 1.0;

}  // namespace

Worker::~Worker() {
  if (stash_fd_ >= 0) ::close(stash_fd_);
}

Worker::Worker(const Options& o, Env* env, Checkpoint* checkpoint, WorkQueue* queue, RateLimiter* limiter,
               Progress* progress, Stream* stream)
    : o_(o), env_(env), checkpoint_(checkpoint), queue_(queue), limiter_(limiter), progress_(progress),
      // The stream mode's sink reads version 3 records (their stamps are its re-check's).
      format_(stream ? kFormatVersion3 : checkpoint->meta().format),
      stream_(o.buffer_size, o.min_ttl, format_),
      // Files: written, synced and published on a thread of their own (async_part_writer.h).
      writer_(stream ? stream->NewSink()
                     : NewAsyncFilePartWriter(env, o.out, o.node_id, checkpoint->meta().dump_start_ms, format_,
                                              [queue](const Status& s) { queue->Fail(s); })),
      binary_(o.host, o.port, kBinaryRecvBytes) {
  keys_.reserve(o.key_file_size + 8192);
  send_.reserve(size_t(o.batch) * kSendBytesPerKey);
  // Effective batch: small enough that a low --max-items-per-second is not bursty.
  batch_ = o.batch;
  const uint64_t rate = o.max_items_per_second;
  if (rate) batch_ = int(std::max<uint64_t>(1, std::min<uint64_t>(uint64_t(batch_), rate / 10 / uint64_t(o.threads))));
  adaptive_batch_ = batch_;
  state_.assign(size_t(batch_), uint8_t(kMissed));
}

void Worker::Run() {
  Status s;
  ChunkTask t;
  while (s.ok() && queue_->Pop(&t)) {
    // Connected only while there is work: no idle connection waits on the source between chunks.
    if (conn_.fd() < 0) s = conn_.Connect(o_.host, o_.port, kConnectTimeoutMs);
    if (s.ok()) s = DoChunk(t);
    // The stream mode: a destination connection broke and the sink reconnected it; the open part is
    // done again from its start (the source connection too: it may hold a batch's answers).
    ChunkTask again;
    while (!s.ok() && !queue_->aborted() && writer_->Recover(&s, &again)) {
      s = conn_.Connect(o_.host, o_.port, kConnectTimeoutMs);
      if (s.ok()) s = DoChunk(again);
    }
    // Done once the chunk's files are published (the writer's thread may still be at it).
    if (s.ok()) writer_->WhenDurable([q = queue_] { q->Done(); });
    if (s.ok() && queue_->Empty()) {
      conn_.Close();
      binary_.CloseIdle();
    }
  }
  writer_->Abandon();
  if (!s.ok()) queue_->Fail(s);
}

Status Worker::Write(const struct iovec* iov, int iovcnt, uint64_t records) {
  uint64_t n = 0;
  for (int i = 0; i < iovcnt; i++) n += iov[i].iov_len;
  progress_->bytes += n;
  progress_->items += records;
  batch_bytes_ += n;
  return writer_->AppendRaw(iov, iovcnt, records);
}

// Responses come in request order and a batch ends with its MN: every VA before the MN belongs to
// the front batch.
Status Worker::OnValue(const MetaResponse& r, Slice* key) {
  if (inflight_.empty()) return Status::Protocol("a value without a batch in flight");
  const Batch& b = inflight_.front();
  if (!r.has_opaque || r.opaque < b.start || r.opaque >= b.end)
    return Status::Protocol("a value whose opaque (O) is not a key index of the batch in flight");
  const size_t k = size_t(r.opaque - b.start);
  uint8_t& st = state_[k];
  if (st != kMissed) return Status::Protocol("two values for one key of a batch");
  st = kGot;
  const uint32_t begin = k ? b.raw_end[k - 1] : 0;
  *key = Slice(b.raw.data() + begin, b.raw_end[k] - begin);
  const int64_t listed = lines_[r.opaque].exptime;
  stream_.set_listed(listed > 0 ? listed : kNeverExpires);
  return Status::OK();
}

Status Worker::OnBatchEnd(uint64_t hits, uint64_t skipped) {
  if (inflight_.empty()) return Status::Protocol("MN without a batch in flight");
  const Batch& b = inflight_.front();
  if (hits > b.mg_keys) return Status::Protocol("more values than keys requested in a batch");
  // Size the next batch so its response is about kTargetBatchBytes (large values: fewer keys), or
  // the source guard's cap on a batch's bytes (source_guard.h: a long batch is a burst on the source).
  if (hits > skipped) {
    const uint64_t per_item = std::max<uint64_t>(1, batch_bytes_ / (hits - skipped));
    const uint64_t cap = limiter_->batch_bytes_cap();
    const uint64_t target = cap ? std::min(cap, kTargetBatchBytes) : kTargetBatchBytes;
    adaptive_batch_ = int(std::clamp<uint64_t>(target / per_item, cap ? 1 : 8, uint64_t(batch_)));
  }
  limiter_->Charge(batch_bytes_);  // --max-bytes-per-second
  batch_bytes_ = 0;
  part_stats_.skipped_min_ttl += skipped;
  progress_->skipped_min_ttl += skipped;
  if (!b.binary.empty()) CW_RETURN_IF_ERROR(FetchBinary(b));
  // Every key of the batch that is not a record is explained: skipped (--min-ttl), undumped, or a
  // miss, expired or gone by the listing's exp.
  const int64_t now = int64_t(std::time(nullptr));
  uint64_t got = 0;
  for (uint64_t i = b.start; i < b.end; i++) {
    uint8_t& st = state_[i - b.start];
    if (st == kGot) got++;
    if (st == kMissed) {
      const int64_t exp = lines_[i].exptime;
      // memcached's clock moves once a second: an item within a second of its exp may be gone.
      if (exp > 0 && exp <= now + 1) {
        part_stats_.expired++;
      } else {
        part_stats_.gone++;
      }
    }
    st = kMissed;
  }
  // `got` counts values received, kept or skipped by --min-ttl (binary-protocol skips are counted
  // as misses where they happen).
  const uint64_t m = (b.end - b.start) - got + skipped;
  const uint64_t end = b.end;
  inflight_.pop_front();
  // Listings that put the source's time past its measured bound and none that agreed: its clock
  // went ahead since it was measured (a whole-second jump; without the ceiling nothing bounds that):
  // measure it again now. (With the ceiling, only TTLs shortened since the listing do that.)
  uint64_t agreed = 0, above = 0;
  stream_.TakeWindowCounts(&agreed, &above);
  if (clocks_ && !source_clock_.has_ceiling() && agreed == 0 && above >= 3) clocks_->Poke();
  // The next batch's values count from its own send (the rest of this receive may hold them).
  if (!inflight_.empty()) SetWindow(inflight_.front().built_at);
  file_misses_ += m;
  progress_->misses += m;
  // Cut a new part at this batch boundary once the file is big enough.
  if (writer_->file_bytes() >= o_.data_file_size && end < nkeys_) {
    CW_RETURN_IF_ERROR(FinishPart(end));
    CW_RETURN_IF_ERROR(OpenPart(end));
  }
  return Status::OK();
}

void Worker::Undumped(uint64_t i, const std::string& why) {
  state_[i - inflight_.front().start] = kUndumped;
  NameUndumped(i, why);
}

void Worker::NameUndumped(uint64_t i, const std::string& why) {
  part_stats_.undumped++;
  char exp[24];
  std::snprintf(exp, sizeof exp, " %" PRId64 " ", lines_[i].exptime);
  undumped_lines_.append(keys_.data() + lines_[i].offset, lines_[i].length);
  undumped_lines_ += exp + why + "\n";
  std::fprintf(stderr, "cachewarm-dump: cannot dump key %.*s: %s\n", int(std::min<uint32_t>(lines_[i].length, 120)),
               keys_.data() + lines_[i].offset, why.c_str());
}

Status Worker::FinishPart(uint64_t end) {
  CW_RETURN_IF_ERROR(Reread());
  // Undumped keys count as misses in the trailer (they are in the key range and not records).
  const uint64_t misses = file_misses_;
  // Copies: the writer may publish the part on its own thread after this returns.
  Checkpoint* cp = checkpoint_;
  Progress* pr = progress_;
  const PartStats ps = part_stats_;
  CW_RETURN_IF_ERROR(writer_->FinishThen(
      end, misses,
      [cp, ps, undumped = undumped_lines_](const PublishedFile& pf) { return cp->RecordPart(pf, ps, undumped); },
      [cp, ps, pr](const PublishedFile& f) {
        cp->AddFile(f, ps);
        pr->files++;
      }));
  file_misses_ = 0;
  part_stats_ = PartStats();
  undumped_lines_.clear();
  part_++;
  return Status::OK();
}

Status Worker::LoadKeys(uint64_t chunk) {
  CW_RETURN_IF_ERROR(env_->ReadFileToString(checkpoint_->keys_dir() + "/" + KeyChunkName(chunk), &keys_));
  lines_.clear();
  return ForEachKeyLine(keys_, [&](const Slice& k, int64_t exp) {
    lines_.push_back({uint32_t(k.data() - keys_.data()), uint32_t(k.size()), exp});
    return Status::OK();
  });
}

Status Worker::AppendGet(uint64_t i, Batch* b) {
  const Slice url(keys_.data() + lines_[i].offset, lines_[i].length);
  if (!UrlDecode(url, &raw_)) return Status::Corruption("bad URL-encoded key in key list: " + url.ToString());
  if (raw_.empty() || raw_.size() > kMaxKeyLen) return Status::Corruption("key length out of range: " + url.ToString());
  b->raw += raw_;
  b->raw_end.push_back(uint32_t(b->raw.size()));
  // Version 3 asks for the item's CAS too (`c`: the record's stamp).
  char opaque[40] = " v f t q u O";  // once per key: no snprintf
  size_t at = 12;
  if (format_ == kFormatVersion3) {
    std::memcpy(opaque, " v f t c q u O", 14);
    at = 14;
  }
  char* e = std::to_chars(opaque + at, opaque + sizeof opaque - 3, i).ptr;
  std::memcpy(e, "\r\n", 3);
  if (IsPlainKey(raw_)) {
    send_ += "mg ";
    send_ += raw_;
    send_ += opaque;
  } else {
    Base64Encode(raw_, &b64_);
    if (b64_.size() <= kMaxKeyLen) {
      send_ += "mg ";
      send_ += b64_;
      send_ += " b";
      send_ += opaque;
    } else if (IsTextKey(raw_)) {
      // No base64 form (187..250 bytes), but a meta command carries it raw (codec.h): value, flags
      // and TTL from one moment, in the batch like any key. A touch between the listing and the
      // fetch cannot lengthen its copy. Its record is still the binary ADDQ (v2) it always was.
      send_ += "mg ";
      send_ += raw_;
      send_ += opaque;
    } else {
      // Only the binary protocol names it, at the batch's end; its TTL is read again at the
      // part's end (Reread).
      b->binary.push_back(i);
      return Status::OK();
    }
  }
  b->mg_keys++;
  return Status::OK();
}

Status Worker::DoChunk(const ChunkTask& t) {
  CW_RETURN_IF_ERROR(LoadKeys(t.chunk));
  chunk_ = t.chunk;
  part_ = t.next_part;
  nkeys_ = lines_.size();
  file_misses_ = 0;
  part_stats_ = PartStats();
  undumped_lines_.clear();
  inflight_.clear();
  deferred_.clear();  // a redone part (stream mode) fetches them again
  stash_bytes_ = 0;
  std::fill(state_.begin(), state_.end(), uint8_t(kMissed));  // a redone part (stream mode) starts clean
  send_.clear();
  stream_.Reset();
  if (t.start_index > nkeys_) return Status::Corruption("published parts go past the end of key list " + KeyChunkName(t.chunk));
  CW_RETURN_IF_ERROR(OpenPart(t.start_index));
  uint64_t next = t.start_index;
  size_t send_off = 0;
  auto last_rx = std::chrono::steady_clock::now();
  for (;;) {
    if (queue_->aborted()) return Status::IOError("aborted");
    if (send_off == send_.size() && next < nkeys_ && inflight_.size() < kBatchesInFlight) {
      const int cap = limiter_->batch_cap();  // the source guard's (source_guard.h), 0 = none
      const uint64_t n = std::min<uint64_t>(uint64_t(cap > 0 ? std::min(cap, adaptive_batch_) : adaptive_batch_), nkeys_ - next);
      limiter_->Acquire(n);
      send_.clear();
      send_off = 0;
      Batch b{next, next + n, 0, {}, {}, {}, WallNow()};
      b.raw.reserve(size_t(n) * 64);
      b.raw_end.reserve(size_t(n));
      if (b.built_at - clock_look_at_ >= kClockLookS || b.built_at < clock_look_at_) {
        send_ += "stats\r\n";
        clock_look_at_ = b.built_at;
      }
      for (uint64_t i = next; i < next + n; i++) CW_RETURN_IF_ERROR(AppendGet(i, &b));
      send_ += "mn\r\n";
      next += n;
      if (state_.size() < n) state_.assign(size_t(n), uint8_t(kMissed));
      inflight_.push_back(std::move(b));
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
        // An `mg t` counts from the source's time when it ran (SetWindow).
        SetWindow(inflight_.empty() ? WallNow() : inflight_.front().built_at);
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
