#include "crawler.h"

#include <cstdint>
#include <cstring>

namespace cachewarm {

static constexpr size_t kMaxCrawlLine = 8192;

namespace {
// The integer at p[*q..n): an optional '-' and up to 18 digits, up to the first other byte; false
// if there is no digit. *q moves past what was read.
bool LeadingInt(const char* p, size_t n, size_t* at, int64_t* v) {
  size_t q = *at;
  const bool neg = q < n && p[q] == '-';
  if (neg) q++;
  int64_t x = 0;
  const size_t first = q, lim = n - q > 18 ? q + 18 : n;
  for (; q < lim; q++) {
    const unsigned d = unsigned(static_cast<unsigned char>(p[q])) - '0';
    if (d > 9) break;
    x = x * 10 + d;
  }
  *at = q;
  if (q == first) return false;
  *v = neg ? -x : x;
  return true;
}

// Whether the field at p[f..n) starts with `name` (no spaces in it: a match lies within the field).
bool Named(const char* p, size_t n, size_t f, const char* name, size_t len) {
  return f + len <= n && std::memcmp(p + f, name, len) == 0;
}
}  // namespace

void ListingCas::Put(const Slice& url_key, uint64_t cas, int64_t cls) {
  std::lock_guard<std::mutex> l(mu_);
  m_.emplace(url_key.ToString(), std::make_pair(cas, cls));
}

uint64_t ListingCas::Get(const Slice& url_key) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = m_.find(url_key.ToString());
  return it == m_.end() ? 0 : it->second.first;
}

int64_t ListingCas::Class(const Slice& url_key) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = m_.find(url_key.ToString());
  return it == m_.end() ? -1 : it->second.second;
}

bool ParseMetadumpLine(const char* p, size_t n, Slice* url_key, int64_t* exptime, int64_t* la, bool* fetched,
                       uint64_t* cas, int64_t* cls) {
  if (n < 5 || std::memcmp(p, "key=", 4) != 0) return false;
  size_t e = 4;
  while (e < n && p[e] != ' ') e++;
  if (e == 4) return false;
  *url_key = Slice(p + 4, e - 4);
  // One pass over the fields after the key (this runs for every listed key on the crawl's parser
  // thread); a field starts after a space and only its first occurrence counts (fetch=: the first
  // says yes or no), so the pass ends once the five are seen (size= and flags= follow them).
  // exp= may be absent (then -1; the TTL from mg is what gets written anyway), but present it must
  // hold a number.
  bool seen_exp = false, seen_la = false, seen_cas = false, seen_cls = false, seen_fetch = false;
  int64_t exp_v = -1, la_v = -1, cas_v = 0, cls_v = -1;
  bool fetch_v = false;
  constexpr int64_t kNoNumber = INT64_MIN;  // LeadingInt reads at most 18 digits: never this
  for (size_t q = e; q < n;) {
    const size_t f = q + 1;  // p[q] is the space before the field
    size_t fe = f;           // the field's end: past its number when one is read, then to the space
    // Field `name` at f, if it is that field's first occurrence: its number into *v (`absent`
    // when it holds none) and fe past it.
    auto take = [&](bool* seen, const char* name, size_t len, int64_t* v, int64_t absent) {
      if (*seen || !Named(p, n, f, name, len)) return false;
      *seen = true;
      fe = f + len;
      if (!LeadingInt(p, n, &fe, v)) *v = absent;
      return true;
    };
    switch (f < n ? p[f] : '\0') {
      case 'e':
        if (take(&seen_exp, "exp=", 4, &exp_v, kNoNumber) && exp_v == kNoNumber) return false;
        break;
      case 'l':
        take(&seen_la, "la=", 3, &la_v, -1);
        break;
      case 'c':
        if (!take(&seen_cas, "cas=", 4, &cas_v, 0)) take(&seen_cls, "cls=", 4, &cls_v, -1);
        break;
      case 'f':
        if (!seen_fetch && Named(p, n, f, "fetch=", 6)) {
          seen_fetch = true;
          fetch_v = Named(p, n, f + 6, "yes", 3);
        }
        break;
      default:
        break;
    }
    if (seen_exp && seen_la && seen_cas && seen_cls && seen_fetch) break;
    while (fe < n && p[fe] != ' ') fe++;
    q = fe;
  }
  *exptime = exp_v;
  if (la != nullptr) *la = la_v;
  if (cas != nullptr) *cas = cas_v > 0 ? uint64_t(cas_v) : 0;
  if (fetched != nullptr) *fetched = fetch_v;
  if (cls != nullptr) *cls = cls_v;
  return true;
}

Status CrawlReader::Line(const char* p, size_t n) {
  const bool first = !saw_line_;
  saw_line_ = true;
  if (n >= 4 && std::memcmp(p, "key=", 4) == 0) {
    Slice key;
    int64_t exp, la;
    bool fetched;
    uint64_t cas = 0;
    int64_t cls = -1;
    if (!ParseMetadumpLine(p, n, &key, &exp, &la, &fetched, cas_ ? &cas : nullptr, cas_ ? &cls : nullptr))
      return Status::Protocol("malformed metadump line");
    keys_++;
    // Only a URL-encoded key over 186 characters can be a binary key of 187..250 bytes.
    if (cas_ && key.size() > 186 && std::memchr(key.data(), '%', key.size())) cas_->Put(key, cas, cls);
    return fn_(key, exp, la, fetched);
  }
  if (n > 0 && p[n - 1] == '\r') n--;
  std::string line(p, n);
  // memcached >= 1.6.43 acknowledges the request before the dump.
  if (line == "OK" && first) return Status::OK();
  if (line == "END") {
    done_ = true;
    return Status::OK();
  }
  const bool busy = line.rfind("BUSY", 0) == 0 || line.rfind("ERROR locked", 0) == 0;
  if (busy && keys_ == 0) {
    busy_ = true;
    busy_line_ = line.substr(0, 200);
    done_ = true;
    return Status::OK();
  }
  if (busy)
    return Status::Server("lru_crawler metadump answered '" + line.substr(0, 200) + "' after " +
                          std::to_string(keys_) + " keys");
  // BADCLASS: a memcached without `metadump hash` reads "hash" as a class id (the caller then
  // falls back to `metadump all`, and says so).
  if (line.rfind("BADCLASS", 0) == 0 && keys_ == 0) unsupported_mode_ = true;
  if (line.rfind("ERROR", 0) == 0 || line.rfind("CLIENT_ERROR", 0) == 0 || line.rfind("SERVER_ERROR", 0) == 0 ||
      line.rfind("BADCLASS", 0) == 0 || line.rfind("NOTSTARTED", 0) == 0)
    return Status::Server("lru_crawler metadump answered: " + line.substr(0, 200));
  return Status::Protocol("unexpected line from lru_crawler metadump: " + line.substr(0, 200));
}

Status CrawlReader::Feed(const char* data, size_t n) {
  if (done_ && n) return Status::Protocol("bytes after END of lru_crawler metadump");
  size_t pos = 0;
  if (!partial_.empty()) {
    const void* nl = std::memchr(data, '\n', n);
    if (!nl) {
      partial_.append(data, n);
      if (partial_.size() > kMaxCrawlLine) return Status::Protocol("metadump line too long");
      return Status::OK();
    }
    size_t e = size_t(static_cast<const char*>(nl) - data);
    partial_.append(data, e);
    std::string line;
    line.swap(partial_);
    CW_RETURN_IF_ERROR(Line(line.data(), line.size()));
    pos = e + 1;
  }
  while (pos < n) {
    if (done_) return Status::Protocol("bytes after END of lru_crawler metadump");
    const void* nl = std::memchr(data + pos, '\n', n - pos);
    if (!nl) {
      partial_.assign(data + pos, n - pos);
      if (partial_.size() > kMaxCrawlLine) return Status::Protocol("metadump line too long");
      break;
    }
    size_t e = size_t(static_cast<const char*>(nl) - data);
    CW_RETURN_IF_ERROR(Line(data + pos, e - pos));
    pos = e + 1;
  }
  return Status::OK();
}

}  // namespace cachewarm
