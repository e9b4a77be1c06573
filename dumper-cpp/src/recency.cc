#include "recency.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <memory>

#include "env.h"
#include "key_chunks.h"
#include "net.h"

namespace cachewarm {

int RecencyTier(int64_t now, int64_t la, bool fetched) {
  const int64_t age = now - la;
  int a = 0;
  // 1 + floor(2 log2(age)): 1 s -> 1, 2 s -> 3, 3 s -> 4, 4 s -> 5, ... 2^31 s -> 63.
  if (la < 0) a = kRecencyAges - 1;  // the line had no la: last
  else if (age > 0) a = std::min(kRecencyAges - 1, 1 + int(std::floor(2.0 * std::log2(double(age)))));
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
  char tail[32];
  const int n = std::snprintf(tail, sizeof tail, " %" PRId64 "\n", exptime);
  if (std::fwrite(url_key.data(), 1, url_key.size(), f) != url_key.size() || std::fwrite(tail, 1, size_t(n), f) != size_t(n))
    return Status::IOError(ErrnoMessage("write " + TierPath(t), errno));
  counts_[size_t(t)]++;
  return Status::OK();
}

Status RecencyTiers::Emit(const std::function<Status(const Slice& url_key, int64_t exptime)>& fn) {
  constexpr size_t kRead = 256 << 10;
  std::unique_ptr<char[]> buf(new char[kRead]);
  std::string carry;
  for (int t = 0; t < kRecencyTiers; t++) {
    FILE* f = files_[size_t(t)];
    if (!f) continue;
    if (std::fflush(f) != 0 || std::fseek(f, 0, SEEK_SET) != 0)
      return Status::IOError(ErrnoMessage("rewind " + TierPath(t), errno));
    carry.clear();
    for (;;) {
      const size_t n = std::fread(buf.get(), 1, kRead, f);
      if (n == 0) {
        if (std::ferror(f)) return Status::IOError(ErrnoMessage("read " + TierPath(t), errno));
        break;
      }
      // Whole lines go to ForEachKeyLine; a line cut by the buffer waits for the next read.
      size_t last_nl = n;
      while (last_nl > 0 && buf[last_nl - 1] != '\n') last_nl--;
      carry.append(buf.get(), last_nl);
      CW_RETURN_IF_ERROR(ForEachKeyLine(carry, fn));
      carry.assign(buf.get() + last_nl, n - last_nl);
    }
    if (!carry.empty()) return Status::Corruption("recency tier " + TierPath(t) + " ends without a newline");
    std::fclose(f);
    files_[size_t(t)] = nullptr;
    ::unlink(TierPath(t).c_str());
  }
  return Status::OK();
}

}  // namespace cachewarm
