#include "recency.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <memory>

#include "env.h"
#include "key_chunks.h"
#include "net.h"

namespace cachewarm {

namespace {
// A URL-encoded key (at most 3 x 250 bytes) and its exptime.
constexpr size_t kMaxUrlKeyLine = 3 * 250 + 32;
}  // namespace

int RecencyTier(int64_t now, int64_t la, bool fetched) {
  const int64_t age = now - la;
  int a = 0;
  // 1 + floor(2 log2(age)): 1 s -> 1, 2 s -> 3, 3 s -> 4, 4 s -> 5, ... 2^31 s -> 63. In integers
  // (once per listed key, on the crawl's parser thread): with b = floor(log2(age)),
  // floor(2 log2(age)) = 2b + (age^2 >= 2^(2b+1)).
  if (la < 0) {
    a = kRecencyAges - 1;  // the line had no la: last
  } else if (age > 0) {
    const int b = 63 - __builtin_clzll(uint64_t(age));
    const bool upper = b < 31 ? uint64_t(age) * uint64_t(age) >= (uint64_t(1) << (2 * b + 1)) : false;
    a = std::min(kRecencyAges - 1, 1 + 2 * b + (upper ? 1 : 0));
  }
  return 2 * a + (fetched ? 0 : 1);
}

RecencyTiers::RecencyTiers(std::string dir, int64_t now) : dir_(std::move(dir)), now_(now) {
  counts_.assign(kRecencyTiers, 0);
}

RecencyTiers::~RecencyTiers() {
  for (FILE* f : files_)
    if (f) std::fclose(f);
  files_.clear();
  RemoveScratch();
}

std::string RecencyTiers::TierPath(int t) const { return dir_ + "/tier-" + std::to_string(t); }

void RecencyTiers::RemoveScratch() {
  std::vector<std::string> names;
  if (Env::Default()->GetChildren(dir_, &names).ok())
    for (const std::string& n : names) ::unlink((dir_ + "/" + n).c_str());
  ::rmdir(dir_.c_str());
}

Status RecencyTiers::Open() {
  RemoveScratch();  // a killed run's
  if (::mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST)
    return Status::IOError(ErrnoMessage("mkdir " + dir_, errno));
  files_.assign(kRecencyTiers, nullptr);
  buffers_.assign(kRecencyTiers, std::vector<char>());
  written_.assign(kRecencyTiers, 0);
  read_off_.assign(kRecencyTiers, 0);
  unread_.assign(kRecencyTiers, 0);
  pending_ = 0;
  read_buf_.reset(new char[kRecencyReadBuffer]);
  return Status::OK();
}

Status RecencyTiers::Add(const Slice& url_key, int64_t exptime, int64_t la, bool fetched) {
  const int t = RecencyTier(now_, la, fetched);
  FILE*& f = files_[size_t(t)];
  if (!f) {  // opened on first use: most dumps fill a few tiers
    const std::string path = TierPath(t);
    f = std::fopen(path.c_str(), "w+");
    if (!f) return Status::IOError(ErrnoMessage("open " + path, errno));
    buffers_[size_t(t)].resize(kRecencyTierBuffer);
    std::setvbuf(f, buffers_[size_t(t)].data(), _IOFBF, kRecencyTierBuffer);
  }
  // One unlocked write per key (only this thread uses the tier files).
  char line[kMaxUrlKeyLine];
  if (url_key.size() > sizeof line - 24) return Status::Corruption("listed key too long: " + url_key.ToString());
  std::memcpy(line, url_key.data(), url_key.size());
  char* e = line + url_key.size();
  *e++ = ' ';
  e = std::to_chars(e, line + sizeof line - 1, exptime).ptr;
  *e++ = '\n';
  const size_t n = size_t(e - line);
  if (::fwrite_unlocked(line, 1, n, f) != n) return Status::IOError(ErrnoMessage("write " + TierPath(t), errno));
  written_[size_t(t)] += n;
  counts_[size_t(t)]++;
  unread_[size_t(t)]++;
  pending_++;
  return Status::OK();
}

// The file is read with pread at read_off_ (the FILE keeps appending at its end): what was written
// is flushed first, so a tier can be read while the crawl still adds to it.
Status RecencyTiers::ReadTier(int t, uint64_t max_keys, const KeyFn& fn, uint64_t* taken) {
  *taken = 0;
  FILE* f = files_[size_t(t)];
  if (!f || unread_[size_t(t)] == 0 || max_keys == 0) return Status::OK();
  if (std::fflush(f) != 0) return Status::IOError(ErrnoMessage("flush " + TierPath(t), errno));
  char* buf = read_buf_.get();
  while (*taken < max_keys && read_off_[size_t(t)] < written_[size_t(t)]) {
    const size_t want = size_t(std::min<uint64_t>(kRecencyReadBuffer, written_[size_t(t)] - read_off_[size_t(t)]));
    const ssize_t n = ::pread(::fileno(f), buf, want, off_t(read_off_[size_t(t)]));
    if (n < 0) return Status::IOError(ErrnoMessage("read " + TierPath(t), errno));
    if (n == 0) return Status::Corruption("recency tier " + TierPath(t) + " is shorter than written");
    // Whole lines only, at most the keys still wanted; a line cut by the buffer is read again next.
    size_t end = 0;
    uint64_t lines = 0;
    while (end < size_t(n) && *taken + lines < max_keys) {  // line to line, not byte by byte
      const void* nl = std::memchr(buf + end, '\n', size_t(n) - end);
      if (!nl) break;
      end = size_t(static_cast<const char*>(nl) - buf) + 1;
      lines++;
    }
    if (lines == 0) return Status::Corruption("recency tier " + TierPath(t) + " has a line longer than the read buffer");
    CW_RETURN_IF_ERROR(ForEachKeyLine(Slice(buf, end), fn));
    read_off_[size_t(t)] += end;
    *taken += lines;
  }
  unread_[size_t(t)] -= *taken;
  pending_ -= *taken;
  return Status::OK();
}

Status RecencyTiers::TakeHottest(uint64_t max_keys, const KeyFn& fn, uint64_t* taken) {
  *taken = 0;
  for (int t = 0; t < kRecencyTiers && *taken < max_keys; t++) {
    uint64_t n = 0;
    CW_RETURN_IF_ERROR(ReadTier(t, max_keys - *taken, fn, &n));
    *taken += n;
  }
  return Status::OK();
}

Status RecencyTiers::Emit(const KeyFn& fn) {
  for (int t = 0; t < kRecencyTiers; t++) {
    FILE* f = files_[size_t(t)];
    if (!f) continue;
    uint64_t n = 0;
    CW_RETURN_IF_ERROR(ReadTier(t, UINT64_MAX, fn, &n));
    if (read_off_[size_t(t)] != written_[size_t(t)])
      return Status::Corruption("recency tier " + TierPath(t) + " ends without a newline");
    std::fclose(f);
    files_[size_t(t)] = nullptr;
    ::unlink(TierPath(t).c_str());
  }
  return Status::OK();
}

}  // namespace cachewarm
