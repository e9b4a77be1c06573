#include "key_chunks.h"

#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cachewarm {

std::string KeyChunkName(uint64_t chunk) {
  char b[32];
  std::snprintf(b, sizeof b, "%08" PRIu64 ".keys", chunk);
  return b;
}

bool ParseKeyChunkName(const std::string& name, uint64_t* chunk) {
  if (name.size() != 13 || name.compare(8, 5, ".keys") != 0) return false;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + uint64_t(name[i] - '0');
  }
  *chunk = v;
  return true;
}

KeyChunkWriter::KeyChunkWriter(Env* env, std::string keys_dir, uint64_t max_bytes, uint64_t next_chunk,
                               PublishedFn fn, int async_depth)
    : env_(env), dir_(std::move(keys_dir)), max_bytes_(max_bytes), next_chunk_(next_chunk), fn_(std::move(fn)),
      depth_(async_depth) {
  buf_.reserve(max_bytes_ + 1024);
  if (depth_ > 0) thread_ = std::thread([this] { Loop(); });
}

KeyChunkWriter::~KeyChunkWriter() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }
}

Status KeyChunkWriter::Add(const Slice& url_key, int64_t exptime) {
  const size_t line = url_key.size() + 24;
  if (!buf_.empty() && buf_.size() + line > max_bytes_) CW_RETURN_IF_ERROR(Cut());
  buf_.append(url_key.data(), url_key.size());
  char b[24];
  b[0] = ' ';
  char* e = std::to_chars(b + 1, b + sizeof b - 1, exptime).ptr;  // once per key: no snprintf
  *e++ = '\n';
  buf_.append(b, size_t(e - b));
  buf_keys_++;
  keys_++;
  return Status::OK();
}

Status KeyChunkWriter::Publish(const Pending& p) {
  CW_RETURN_IF_ERROR(WriteFileAtomically(env_, dir_, ".tmp-" + KeyChunkName(p.chunk), KeyChunkName(p.chunk), p.contents));
  if (fn_) fn_(p.chunk, p.keys);
  return Status::OK();
}

void KeyChunkWriter::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return !queue_.empty() || stop_; });
    if (queue_.empty()) return;
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    l.unlock();
    Status s = error_.ok() ? Publish(p) : Status::OK();  // after an error, publish nothing more
    l.lock();
    if (!s.ok() && error_.ok()) error_ = s;
    busy_ = false;
    cv_.notify_all();
  }
}

// Hands the full buffer over: published here (sync) or by the background thread (async).
Status KeyChunkWriter::Cut() {
  if (buf_.empty()) return Status::OK();
  Pending p{next_chunk_, buf_keys_, std::string()};
  next_chunk_++;
  buf_keys_ = 0;
  if (depth_ == 0) {
    p.contents.swap(buf_);
    Status s = Publish(p);
    buf_.swap(p.contents);
    buf_.clear();
    return s;
  }
  p.contents = std::move(buf_);
  buf_ = std::string();
  buf_.reserve(max_bytes_ + 1024);
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return queue_.size() < size_t(depth_) || !error_.ok(); });
  if (!error_.ok()) return error_;
  queue_.push_back(std::move(p));
  cv_.notify_all();
  return Status::OK();
}

size_t KeyChunkWriter::queued() {
  std::lock_guard<std::mutex> l(mu_);
  return queue_.size() + (busy_ ? 1 : 0);
}

Status KeyChunkWriter::Flush() {
  CW_RETURN_IF_ERROR(Cut());
  if (depth_ == 0) return Status::OK();
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return (queue_.empty() && !busy_) || !error_.ok(); });
  return error_;
}

namespace {
// [-]digits filling [p, end), at most 18 digits (no overflow): what the dumper writes. Every key
// line is read twice (recency tiers, the worker's key list), so this skips strtoll's generality.
bool ShortDecimal(const char* p, const char* end, long long* out) {
  const bool neg = p < end && *p == '-';
  if (neg) p++;
  if (p == end || end - p > 18) return false;
  long long v = 0;
  for (; p < end; p++) {
    const unsigned dgt = unsigned(static_cast<unsigned char>(*p)) - '0';
    if (dgt > 9) return false;
    v = v * 10 + dgt;
  }
  *out = neg ? -v : v;
  return true;
}
}  // namespace

Status ForEachKeyLine(const Slice& contents, const std::function<Status(const Slice&, int64_t)>& fn) {
  size_t pos = 0;
  const char* d = contents.data();
  while (pos < contents.size()) {
    const void* nl = std::memchr(d + pos, '\n', contents.size() - pos);
    if (!nl) return Status::Corruption("key list ends without a newline");
    const size_t e = size_t(static_cast<const char*>(nl) - d);
    const void* sp = std::memchr(d + pos, ' ', e - pos);
    if (!sp || sp == d + pos) return Status::Corruption("malformed key list line");
    const size_t s = size_t(static_cast<const char*>(sp) - d);
    long long exp = 0;
    if (!ShortDecimal(d + s + 1, d + e, &exp)) {  // anything unusual: the C library's reading
      char* end = nullptr;
      exp = std::strtoll(d + s + 1, &end, 10);
      if (end != d + e) return Status::Corruption("malformed exptime in key list");
    }
    CW_RETURN_IF_ERROR(fn(Slice(d + pos, s - pos), exp));
    pos = e + 1;
  }
  return Status::OK();
}

}  // namespace cachewarm
