// ceiling_writer HOST PORT CONNECTIONS BATCH FILE...: the populator benchmark's raw write ceiling
// (bench/populate.py). The FILEs are data format v2 files (docs/data-format.md section 7), whose
// records are already the `ms ... ME q O<offset>` commands: before timing, each is mapped (from the
// page cache: no new memory, which on this project's VMs costs ~2.5 s/GB on first touch and would
// slow the destination next to it) and its meta records are cut into batches of BATCH records; then CONNECTIONS threads, starting
// together, each send their share of the files' batches (file i goes to connection i % CONNECTIONS),
// pipelined, an `mn` after each batch, at most two batches in flight, replies read concurrently. No
// verification, no planning, no process pool: exactly the bytes the populator sends, at the speed one
// C process per connection sends them. Prints JSON: {"items": n, "not_stored": n, "errors": n,
// "seconds": s} (seconds: the slowest connection's, all having started together).
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../src/coding.h"
#include "../src/net.h"
#include "../src/record_v2.h"

using namespace cachewarm;

namespace {

struct Batch {
  size_t file, begin, end;  // a range of bytes of files[file]
  uint64_t items;
};

std::vector<Slice> files;  // mapped
std::atomic<int> ready{0};
std::atomic<bool> go{false};

void Die(const std::string& why) {
  std::fprintf(stderr, "ceiling_writer: %s\n", why.c_str());
  std::exit(1);
}

// The meta records of a v2 file, cut into batches of `batch` records (binary records are skipped).
void Cut(size_t f, uint64_t batch, std::vector<Batch>* out) {
  const Slice& d = files[f];
  if (d.size() < kHeaderFixed + kTrailerSize || DecodeFixed16(d.data() + 8) != kFormatVersion2)
    Die("not a data format v2 file");
  const size_t begin = DecodeFixed16(d.data() + 10), end = d.size() - kTrailerSize;
  Batch b{f, begin, begin, 0};
  for (size_t p = begin; p < end;) {
    RecordV2 r;
    size_t next = 0;
    Status s = ParseRecordV2(d.data(), p, end, &r, &next);
    if (!s.ok()) Die(s.ToString());
    if (r.binary) {  // a range break: close the batch here
      if (b.items) out->push_back(b);
      b = {f, next, next, 0};
    } else {
      b.end = next;
      if (++b.items == batch) {
        out->push_back(b);
        b = {f, next, next, 0};
      }
    }
    p = next;
  }
  if (b.items) out->push_back(b);
}

struct Result {
  uint64_t items = 0, not_stored = 0, errors = 0;
  double seconds = 0;
};

void Send(const char* host, int port, const std::vector<Batch>& batches, Result* res) {
  Conn c;
  Status s = c.Connect(host, port, kConnectTimeoutMs);
  if (!s.ok()) Die(s.ToString());
  ready++;
  while (!go.load()) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  size_t next = 0, off = 0;  // the batch being sent and how much of it (its mn after its bytes)
  uint64_t sent_batches = 0, acked = 0;
  std::string rbuf;
  char tmp[65536];
  while (acked < batches.size()) {
    const bool can_send = next < batches.size() && sent_batches - acked < 2;
    struct pollfd p = {c.fd(), short(POLLIN | (can_send ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 30000) <= 0) Die("timed out");
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t r = ::recv(c.fd(), tmp, sizeof tmp, MSG_DONTWAIT);
      if (r == 0) Die("connection closed");
      if (r > 0) {
        rbuf.append(tmp, size_t(r));
        size_t start = 0, e;
        while ((e = rbuf.find("\r\n", start)) != std::string::npos) {
          const std::string line = rbuf.substr(start, e - start);
          if (line == "MN") acked++;
          else if (line.rfind("NS", 0) == 0) res->not_stored++;
          else res->errors++;
          start = e + 2;
        }
        rbuf.erase(0, start);
      }
    }
    if ((p.revents & POLLOUT) && can_send) {
      const Batch& b = batches[next];
      const size_t len = b.end - b.begin;
      struct iovec iov[2];
      int n = 0;
      if (off < len) iov[n++] = {const_cast<char*>(files[b.file].data() + b.begin + off), len - off};
      const size_t mn_done = off > len ? off - len : 0;
      iov[n++] = {const_cast<char*>(&"mn\r\n"[mn_done]), 4 - mn_done};
      // sendmsg + MSG_NOSIGNAL, not writev: a destination that goes away is "send failed", not a
      // SIGPIPE death (whatever disposition the benchmark inherited).
      struct msghdr m = {};
      m.msg_iov = iov;
      m.msg_iovlen = size_t(n);
      const ssize_t w = ::sendmsg(c.fd(), &m, MSG_NOSIGNAL);
      if (w < 0 && errno != EAGAIN && errno != EINTR) Die("send failed");
      if (w > 0) off += size_t(w);
      if (off == len + 4) {
        res->items += b.items;
        sent_batches++;
        next++;
        off = 0;
      }
    }
  }
  res->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: ceiling_writer HOST PORT CONNECTIONS BATCH FILE...\n");
    return 2;
  }
  const int conns = std::atoi(argv[3]);
  const uint64_t batch = std::strtoull(argv[4], nullptr, 10);
  if (conns < 1 || batch < 1) Die("CONNECTIONS and BATCH must be >= 1");
  std::vector<std::vector<Batch>> share(static_cast<size_t>(conns));
  for (int i = 5; i < argc; i++) {
    const int fd = ::open(argv[i], O_RDONLY);
    struct stat st;
    if (fd < 0 || ::fstat(fd, &st) < 0 || st.st_size == 0) Die(std::string("cannot read ") + argv[i]);
    void* m = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (m == MAP_FAILED) Die(std::string("cannot map ") + argv[i]);
    ::close(fd);
    files.emplace_back(static_cast<const char*>(m), size_t(st.st_size));
  }
  for (size_t f = 0; f < files.size(); f++) Cut(f, batch, &share[f % size_t(conns)]);
  std::vector<Result> res(static_cast<size_t>(conns));
  std::vector<std::thread> threads;
  for (int i = 0; i < conns; i++)
    threads.emplace_back(Send, argv[1], std::atoi(argv[2]), std::cref(share[size_t(i)]), &res[size_t(i)]);
  while (ready.load() < conns) std::this_thread::yield();
  go = true;
  for (auto& t : threads) t.join();
  Result all;
  for (const Result& r : res) {
    all.items += r.items;
    all.not_stored += r.not_stored;
    all.errors += r.errors;
    all.seconds = std::max(all.seconds, r.seconds);
  }
  std::printf("{\"items\": %llu, \"not_stored\": %llu, \"errors\": %llu, \"seconds\": %.4f}\n",
              (unsigned long long)all.items, (unsigned long long)all.not_stored, (unsigned long long)all.errors,
              all.seconds);
  return all.errors ? 1 : 0;
}
