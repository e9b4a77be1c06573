// ceiling_reader HOST PORT THREADS BATCH [hash|all] [OUTDIR]: the benchmark's raw ceiling (bench/dump.py).
// Crawls keys with `lru_crawler metadump hash` (as the dumper does) and, pipelined with the crawl,
// fetches every value with pipelined `mg <key> v f t k q u` batches over THREADS connections,
// discarding them. No files, no checksums. With OUTDIR, each connection also writes every byte it
// receives, as received, to OUTDIR/ceiling-<n> (one write per recv, fdatasync at the end): the
// least a dump must do to persist what it fetched.
// Prints JSON: {"keys": n, "hits": n, "value_bytes": n, "seconds": s}.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../src/codec.h"
#include "../src/crawler.h"
#include "../src/env.h"
#include "../src/meta_parser.h"
#include "../src/net.h"

using namespace cachewarm;

namespace {

std::mutex mu;
std::condition_variable cv;
std::deque<std::vector<std::string>> queue;
bool crawl_done = false;
std::atomic<uint64_t> hits{0}, value_bytes{0};

void Die(const Status& s) {
  std::fprintf(stderr, "ceiling_reader: %s\n", s.ToString().c_str());
  std::exit(1);
}

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) Die(Status::IOError(ErrnoMessage("write", errno)));
    p += w;
    n -= size_t(w);
  }
}

void Fetch(const char* host, int port, std::string out) {
  Conn c;
  Status s = c.Connect(host, port, 5000);
  if (!s.ok()) Die(s);
  int fd = -1;
  if (!out.empty() && (fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
    Die(Status::IOError(ErrnoMessage("open " + out, errno)));
  std::vector<char> buf(4 << 20);
  std::string send, raw, b64;
  for (;;) {
    std::vector<std::string> batch;
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [] { return !queue.empty() || crawl_done; });
      if (queue.empty()) break;
      batch.swap(queue.front());
      queue.pop_front();
    }
    send.clear();
    for (const std::string& k : batch) {
      UrlDecode(k, &raw);
      if (IsPlainKey(raw)) {
        send += "mg " + raw + " v f t k q u\r\n";
      } else {
        Base64Encode(raw, &b64);
        send += "mg " + b64 + " b v f t k q u\r\n";
      }
    }
    send += "mn\r\n";
    if (!(s = c.SendAll(send, 60000)).ok()) Die(s);
    // Skip responses by their declared lengths until MN.
    size_t filled = 0, pos = 0;
    uint64_t skip = 0;
    bool done = false;
    while (!done) {
      if (pos == filled) pos = filled = 0;
      if (filled == buf.size()) {
        std::memmove(buf.data(), buf.data() + pos, filled - pos);
        filled -= pos;
        pos = 0;
      }
      size_t n = 0;
      if (!(s = c.Recv(buf.data() + filled, buf.size() - filled, &n, 60000)).ok()) Die(s);
      if (fd >= 0) WriteAll(fd, buf.data() + filled, n);
      filled += n;
      for (;;) {
        if (skip) {
          size_t t = std::min<uint64_t>(skip, filled - pos);
          pos += t;
          skip -= t;
          if (skip) break;
        }
        MetaResponse r;
        std::string err;
        ParseResult pr = ParseMetaHeader(buf.data() + pos, filled - pos, &r, &err);
        if (pr == ParseResult::kNeedMore) break;
        if (pr == ParseResult::kBad) Die(Status::Protocol(err));
        pos += r.header_len;
        if (r.type == MetaResponse::kNoop) {
          done = true;
          break;
        }
        if (r.type != MetaResponse::kValue) Die(Status::Server(r.message));
        hits++;
        value_bytes += r.value_len;
        skip = uint64_t(r.value_len) + 2;
      }
    }
  }
  if (fd >= 0 && (::fdatasync(fd) != 0 || ::close(fd) != 0)) Die(Status::IOError(ErrnoMessage("fsync " + out, errno)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || argc > 7) {
    std::fprintf(stderr, "usage: ceiling_reader HOST PORT THREADS BATCH [hash|all] [OUTDIR]\n");
    return 2;
  }
  const std::string out_dir = argc == 7 ? argv[6] : "";
  const char* host = argv[1];
  const int port = std::atoi(argv[2]), threads = std::atoi(argv[3]);
  const size_t batch = size_t(std::atoi(argv[4]));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; i++)
    ts.emplace_back(Fetch, host, port, out_dir.empty() ? std::string() : out_dir + "/ceiling-" + std::to_string(i));
  Conn c;
  Status s = c.Connect(host, port, 5000);
  if (!s.ok()) Die(s);
  if (!(s = c.SendAll(std::string("lru_crawler metadump ") + (argc >= 6 ? argv[5] : "hash") + "\r\n", 60000)).ok()) Die(s);
  uint64_t keys = 0;
  std::vector<std::string> cur;
  CrawlReader reader([&](const Slice& k, int64_t) {
    cur.push_back(k.ToString());
    keys++;
    if (cur.size() == batch) {
      std::lock_guard<std::mutex> l(mu);
      queue.push_back(std::move(cur));
      cur.clear();
      cv.notify_one();
    }
    return Status::OK();
  });
  std::vector<char> buf(1 << 18);
  while (!reader.done()) {
    size_t n = 0;
    if (!(s = c.Recv(buf.data(), buf.size(), &n, 60000)).ok()) Die(s);
    if (!(s = reader.Feed(buf.data(), n)).ok()) Die(s);
  }
  if (reader.busy()) Die(Status::Server("crawler busy"));
  {
    std::lock_guard<std::mutex> l(mu);
    if (!cur.empty()) queue.push_back(std::move(cur));
    crawl_done = true;
    cv.notify_all();
  }
  for (std::thread& t : ts) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"keys\": %llu, \"hits\": %llu, \"value_bytes\": %llu, \"seconds\": %.4f}\n",
              (unsigned long long)keys, (unsigned long long)hits.load(), (unsigned long long)value_bytes.load(), secs);
  return 0;
}
