#include "key_set_diff.h"

#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "codec.h"
#include "env.h"
#include "key_chunks.h"

namespace cachewarm {

namespace {
struct H128 {
  uint64_t hi, lo;
  bool operator<(const H128& o) const { return hi != o.hi ? hi < o.hi : lo < o.lo; }
  bool operator==(const H128& o) const { return hi == o.hi && lo == o.lo; }
};
struct H128Hash {
  size_t operator()(const H128& h) const { return size_t(h.lo); }
};
H128 HashKey(const Slice& k) {
  XXH128_hash_t h = XXH3_128bits(k.data(), k.size());
  return {h.high64, h.low64};
}
}  // namespace

KeySetDiff::KeySetDiff(std::string scratch_dir, uint64_t expected_keys) : dir_(std::move(scratch_dir)) {
  bits_ = 4;
  while (bits_ < 8 && (expected_keys >> (16 + bits_)) > 0) bits_++;
  nparts_ = 1 << bits_;
  RemoveScratch();  // left over by a killed run
}

void KeySetDiff::RemoveScratch() {
  std::vector<std::string> names;
  if (Env::Default()->GetChildren(dir_, &names).ok())
    for (const std::string& n : names) ::unlink((dir_ + "/" + n).c_str());
  ::rmdir(dir_.c_str());
}

KeySetDiff::~KeySetDiff() {
  CloseAll();
  RemoveScratch();
}

std::string KeySetDiff::PartPath(const char* prefix, int p) const {
  return dir_ + "/" + prefix + "-" + std::to_string(p);
}

Status KeySetDiff::OpenAll(const char* prefix) {
  if (::mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST)
    return Status::IOError(ErrnoMessage("mkdir " + dir_, errno));
  files_.assign(size_t(nparts_), nullptr);
  for (int p = 0; p < nparts_; p++) {
    files_[size_t(p)] = std::fopen(PartPath(prefix, p).c_str(), "wb");
    if (!files_[size_t(p)]) return Status::IOError(ErrnoMessage("create " + PartPath(prefix, p), errno));
  }
  return Status::OK();
}

Status KeySetDiff::CloseAll() {
  Status s;
  for (FILE*& f : files_) {
    if (f && std::fclose(f) != 0 && s.ok()) s = Status::IOError(ErrnoMessage("write " + dir_, errno));
    f = nullptr;
  }
  files_.clear();
  return s;
}

Status KeySetDiff::AddExisting(const Slice& raw_key) {
  if (phase_ != 1) return Status::InvalidArgument("AddExisting after AddCandidate");
  if (files_.empty()) CW_RETURN_IF_ERROR(OpenAll("ex"));
  H128 h = HashKey(raw_key);
  if (std::fwrite(&h, sizeof h, 1, files_[size_t(PartOf(h.hi))]) != 1)
    return Status::IOError(ErrnoMessage("write " + dir_, errno));
  return Status::OK();
}

Status KeySetDiff::AddCandidate(const Slice& raw_key, const Slice& url_key, int64_t exptime) {
  if (phase_ == 1) {
    CW_RETURN_IF_ERROR(CloseAll());
    // Partitions with no existing key still need an (empty) file.
    if (::mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST)
      return Status::IOError(ErrnoMessage("mkdir " + dir_, errno));
    for (int p = 0; p < nparts_; p++) {
      FILE* f = std::fopen(PartPath("ex", p).c_str(), "ab");
      if (!f) return Status::IOError(ErrnoMessage("create " + PartPath("ex", p), errno));
      std::fclose(f);
    }
    CW_RETURN_IF_ERROR(OpenAll("cand"));
    phase_ = 2;
  }
  H128 h = HashKey(raw_key);
  FILE* f = files_[size_t(PartOf(h.hi))];
  char tail[24];
  int n = std::snprintf(tail, sizeof tail, " %lld\n", static_cast<long long>(exptime));
  if (std::fwrite(url_key.data(), 1, url_key.size(), f) != url_key.size() ||
      std::fwrite(tail, 1, size_t(n), f) != size_t(n))
    return Status::IOError(ErrnoMessage("write " + dir_, errno));
  return Status::OK();
}

Status KeySetDiff::Emit(const std::function<Status(const Slice& url_key, int64_t exptime)>& fn) {
  if (phase_ == 1) return Status::OK();  // the crawl listed nothing
  CW_RETURN_IF_ERROR(CloseAll());
  phase_ = 3;
  Env* env = Env::Default();
  std::vector<H128> seen;
  std::string contents, raw;
  for (int p = 0; p < nparts_; p++) {
    // Read the existing hashes straight into the vector (one copy of the partition in memory).
    FILE* ex = std::fopen(PartPath("ex", p).c_str(), "rb");
    if (!ex) return Status::IOError(ErrnoMessage("open " + PartPath("ex", p), errno));
    std::fseek(ex, 0, SEEK_END);
    seen.resize(size_t(std::ftell(ex)) / sizeof(H128));
    std::fseek(ex, 0, SEEK_SET);
    const size_t got = seen.empty() ? 0 : std::fread(seen.data(), sizeof(H128), seen.size(), ex);
    std::fclose(ex);
    if (got != seen.size()) return Status::IOError("short read of " + PartPath("ex", p));
    std::sort(seen.begin(), seen.end());
    const size_t existing = seen.size();
    std::unordered_set<H128, H128Hash> emitted;  // candidates emitted from this partition (a crawl may list a key twice)
    CW_RETURN_IF_ERROR(env->ReadFileToString(PartPath("cand", p), &contents));
    CW_RETURN_IF_ERROR(ForEachKeyLine(contents, [&](const Slice& url_key, int64_t exp) -> Status {
      if (!UrlDecode(url_key, &raw)) return Status::Corruption("bad URL-encoded key in scratch file");
      H128 h = HashKey(raw);
      if (std::binary_search(seen.begin(), seen.begin() + long(existing), h)) return Status::OK();
      if (!emitted.insert(h).second) {
        duplicates_++;
        return Status::OK();
      }
      return fn(url_key, exp);
    }));
    ::unlink(PartPath("ex", p).c_str());
    ::unlink(PartPath("cand", p).c_str());
  }
  return Status::OK();
}

}  // namespace cachewarm
