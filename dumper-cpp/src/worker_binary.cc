// A worker's keys that no meta command can name (worker.h): fetched with the binary protocol at
// their batch's end, their values stashed in a scratch file until the part ends, when their TTL is
// read again (reread.h) and they are written, or named in keys/UNDUMPED.
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

// The batch's keys no meta command can name (no base64 form, and a space, '\n' or NUL in the raw
// key), fetched with the binary protocol's GETKQ. It returns no TTL: a rewrite since the listing is
// caught by its CAS (not copied, named); the value waits in the scratch file for Reread, which reads
// the TTL again after the fetch (a touch or gat since the listing included).
Status Worker::FetchBinary(const Batch& b) {
  std::vector<std::string> raw(b.binary.size());
  for (size_t k = 0; k < b.binary.size(); k++) {
    const Key& key = lines_[b.binary[k]];
    if (!UrlDecode(Slice(keys_.data() + key.offset, key.length), &raw[k]))
      return Status::Corruption("bad URL-encoded key in key list");
  }
  bool skip = false;
  std::string unavailable;
  CW_RETURN_IF_ERROR(binary_.Get(
      raw,
      [&](size_t k, uint32_t flags, uint32_t value_len, uint64_t cas) -> Status {
        const uint64_t i = b.binary[k];
        // Only if the item is still the one listed (same CAS): rewritten in between, it may now
        // expire sooner (or be gone and back): not copied, named.
        const uint64_t listed =
            listing_cas_ ? listing_cas_->Get(Slice(keys_.data() + lines_[i].offset, lines_[i].length)) : 0;
        // 0 on either side: not known (memcached -C keeps no CAS): nothing to compare.
        skip = listed != 0 && cas != 0 && cas != listed;
        if (skip) {
          Undumped(i, "rewritten between the listing and the fetch (cas " + std::to_string(listed) + " -> " +
                          std::to_string(cas) + "): its expiry is not known");
          return Status::OK();
        }
        state_[i - b.start] = kGot;
        deferred_.push_back(Deferred{i, flags, value_len, cas, stash_bytes_});
        return Status::OK();
      },
      [&](const Slice& piece) -> Status { return skip ? Status::OK() : Stash(piece); },
      [&](size_t k, const std::string& why) -> Status {
        Undumped(b.binary[k], why);
        return Status::OK();
      },
      &unavailable));
  if (!unavailable.empty())
    for (uint64_t i : b.binary) Undumped(i, unavailable);
  return Status::OK();
}

Status Worker::Stash(const Slice& piece) {
  if (stash_fd_ < 0) {
    stash_fd_ = ::open(o_.spill_dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (stash_fd_ < 0) {
      std::string tmpl = o_.spill_dir + "/.cachewarm-reread-XXXXXX";
      stash_fd_ = ::mkostemp(&tmpl[0], O_CLOEXEC);
      if (stash_fd_ < 0)
        return Status::IOError(ErrnoMessage("create a scratch file in --spill-dir " + o_.spill_dir, errno));
      ::unlink(tmpl.c_str());
    }
  }
  for (size_t done = 0; done < piece.size();) {
    const ssize_t w = ::pwrite(stash_fd_, piece.data() + done, piece.size() - done, off_t(stash_bytes_ + done));
    if (w <= 0) return Status::IOError(ErrnoMessage("write the scratch file in --spill-dir " + o_.spill_dir, errno));
    done += size_t(w);
  }
  stash_bytes_ += piece.size();
  return Status::OK();
}

namespace {
// Re-reads (each lists the deferred keys' slab classes) a dump may make before it names the rest
// instead: a dump full of such keys would otherwise crawl the same classes part after part.
constexpr int kMaxRereads = 64;
// Listings of the same keys before one still there and never listed is named instead.
constexpr int kRelistTries = 3;
std::atomic<int> g_rereads{0};
}  // namespace

Status Worker::Reread() {
  if (deferred_.empty()) return Status::OK();
  // The dump's own crawl holds the crawler until it ends (never queue a crawl behind it).
  while (crawling_ && crawling_->load()) {
    if (queue_->aborted()) return Status::IOError("aborted");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::set<int64_t> classes;
  bool all = false;
  for (const Deferred& d : deferred_) {
    const Slice url(keys_.data() + lines_[d.index].offset, lines_[d.index].length);
    const int64_t cls = listing_cas_ ? listing_cas_->Class(url) : -1;
    if (cls < 0) all = true;  // listed by an earlier run (a resumed dump): its class is not known
    classes.insert(cls);
  }
  std::string which = "all";
  if (!all) {
    which.clear();
    for (int64_t c : classes) which += (which.empty() ? "" : ",") + std::to_string(c);
  }
  std::unordered_map<std::string, Relisted> found;
  std::string why;
  // Not listed: gone since the fetch, or skipped by the LRU crawl, which skips an item something
  // holds a moment (seen right after a binary-protocol TOUCH). The binary protocol tells them apart;
  // one still there is listed again, up to kRelistTries in all.
  std::vector<bool> still(deferred_.size(), false);
  for (int attempt = 0; why.empty(); attempt++) {
    std::unordered_set<std::string> want;
    for (const Deferred& d : deferred_) {
      const std::string url(keys_.data() + lines_[d.index].offset, lines_[d.index].length);
      if (!found.count(url)) want.insert(url);
    }
    if (attempt > 0) {
      std::vector<std::string> raw;
      std::vector<size_t> which_k;
      for (size_t k = 0; k < deferred_.size(); k++) {
        const Key& key = lines_[deferred_[k].index];
        const std::string url(keys_.data() + key.offset, key.length);
        if (!want.count(url)) continue;
        std::string r;
        if (!UrlDecode(Slice(url), &r)) return Status::Corruption("bad URL-encoded key in key list");
        raw.push_back(r);
        which_k.push_back(k);
      }
      std::fill(still.begin(), still.end(), false);
      if (raw.empty()) break;
      std::string unavailable;
      CW_RETURN_IF_ERROR(binary_.Get(
          raw,
          [&](size_t j, uint32_t, uint32_t, uint64_t) -> Status {
            still[which_k[j]] = true;
            return Status::OK();
          },
          [](const Slice&) { return Status::OK(); },
          [&](size_t j, const std::string&) -> Status {
            still[which_k[j]] = true;  // refused: not known to be gone
            return Status::OK();
          },
          &unavailable));
      if (!unavailable.empty())
        for (size_t k : which_k) still[k] = true;
      want.clear();
      for (size_t k = 0; k < deferred_.size(); k++)
        if (still[k]) want.insert(std::string(keys_.data() + lines_[deferred_[k].index].offset,
                                              lines_[deferred_[k].index].length));
      if (want.empty() || attempt >= kRelistTries) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100 * attempt));
    }
    if (g_rereads.fetch_add(1) >= kMaxRereads) {
      why = "its TTL was not read again (more than " + std::to_string(kMaxRereads) +
            " re-reads in this dump, each listing its slab class)";
      break;
    }
    std::unordered_map<std::string, Relisted> got;
    Status s = RelistKeys(o_, which, want, [q = queue_] { return q->aborted(); }, &got);
    if (!s.ok()) {
      if (queue_->aborted()) return s;
      why = "its TTL could not be read again (lru_crawler metadump " + which + "): " + s.message();
      break;
    }
    found.insert(got.begin(), got.end());
  }
  const int64_t now = int64_t(std::time(nullptr));
  for (size_t k = 0; k < deferred_.size(); k++) {
    const Deferred& d = deferred_[k];
    const std::string url(keys_.data() + lines_[d.index].offset, lines_[d.index].length);
    auto it = found.find(url);
    std::string named = it == found.end() ? why : std::string();
    if (named.empty() && it == found.end() && still[k])
      named = "not listed when its TTL was read again (the LRU crawl skips a busy item): its expiry is not known";
    if (named.empty() && it != found.end() && it->second.cas != 0 && d.cas != 0 && it->second.cas != d.cas)
      named = "rewritten after the fetch (cas " + std::to_string(d.cas) + " -> " + std::to_string(it->second.cas) +
              "): its expiry is not known";
    if (!named.empty() || it == found.end()) {
      if (!named.empty()) {
        NameUndumped(d.index, named);
      } else {
        part_stats_.gone++;  // deleted, evicted or expired since the fetch
      }
      file_misses_++;
      progress_->misses++;
      continue;
    }
    // Its expiry now, on the source's clock: onto this host's, never later.
    const int64_t exp =
        it->second.exptime > 0 ? ClampExptime(it->second.exptime - source_clock_.WholeAhead()) : kNeverExpires;
    if (o_.min_ttl > 0 && exp != kNeverExpires && exp - now < o_.min_ttl) {
      part_stats_.skipped_min_ttl++;
      progress_->skipped_min_ttl++;
      file_misses_++;
      progress_->misses++;
      continue;
    }
    // Version 3's stamp: the fetch's CAS (the listing's agrees) and the expiry as just listed, on the
    // source's own clock (the one the record's was moved from).
    SourceStamp stamp;
    stamp.cas = d.cas;
    if (it->second.exptime > 0) stamp.exp = it->second.exptime;
    CW_RETURN_IF_ERROR(WriteDeferred(d.index, d.flags, d.value_len, d.at, exp, stamp));
  }
  deferred_.clear();
  stash_bytes_ = 0;
  if (stash_fd_ >= 0 && ::ftruncate(stash_fd_, 0) != 0)
    return Status::IOError(ErrnoMessage("truncate the scratch file in --spill-dir " + o_.spill_dir, errno));
  return Status::OK();
}

// A deferred key's record: the binary-protocol ADDQ (v2; v3 behind its stamp) or a v1 record, then its
// value from the scratch file.
Status Worker::WriteDeferred(uint64_t i, uint32_t flags, uint32_t value_len, uint64_t at, int64_t exptime,
                             const SourceStamp& stamp) {
  std::string raw;
  if (!UrlDecode(Slice(keys_.data() + lines_[i].offset, lines_[i].length), &raw))
    return Status::Corruption("bad URL-encoded key in key list");
  char hdr[kRecordHeaderSize];
  char head_v2[kSourceStampSize + kBinaryHeadV2];
  struct iovec v[2] = {{hdr, sizeof hdr}, {const_cast<char*>(raw.data()), raw.size()}};
  if (IsCommandFormat(format_)) {
    CW_RETURN_IF_ERROR(CheckRecordV2(raw, exptime));
    size_t st = 0;
    if (format_ == kFormatVersion3) {
      EncodeSourceStamp(head_v2, stamp);
      st = kSourceStampSize;
    }
    EncodeBinaryHeadV2(head_v2 + st, raw.size(), value_len, flags, exptime);
    v[0] = {head_v2, st + kBinaryHeadV2};
  } else {
    EncodeRecordHeader(hdr, value_len, flags, exptime, uint8_t(raw.size()));
  }
  part_stats_.binary++;
  progress_->items++;
  progress_->bytes += v[0].iov_len + raw.size() + value_len;
  CW_RETURN_IF_ERROR(writer_->AppendRaw(v, 2, 1));
  char buf[64 << 10];
  for (uint64_t done = 0; done < value_len;) {
    const size_t want = size_t(std::min<uint64_t>(sizeof buf, value_len - done));
    const ssize_t r = ::pread(stash_fd_, buf, want, off_t(at + done));
    if (r <= 0) return Status::IOError(ErrnoMessage("read the scratch file in --spill-dir " + o_.spill_dir, errno));
    struct iovec piece = {buf, size_t(r)};
    CW_RETURN_IF_ERROR(writer_->AppendRaw(&piece, 1, 0));
    done += uint64_t(r);
  }
  return Status::OK();
}

}  // namespace cachewarm
