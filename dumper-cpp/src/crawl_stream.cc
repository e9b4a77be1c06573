#include "crawl_stream.h"

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "env.h"

namespace cachewarm {

CrawlStream::CrawlStream(size_t ring_bytes, std::string spill_dir, int first_byte_timeout_ms)
    : cap_(std::max<size_t>(ring_bytes, 4096)), spill_dir_(std::move(spill_dir)),
      first_byte_timeout_ms_(first_byte_timeout_ms), ring_(new char[cap_]),
      staging_(new char[kCrawlStreamPiece]), spill_read_(new char[kCrawlStreamPiece]) {}

CrawlStream::~CrawlStream() {
  Stop();
  if (spill_fd_ >= 0) ::close(spill_fd_);
  if (raw_fd_ >= 0) ::close(raw_fd_);
}

Status CrawlStream::Start(const std::string& host, int port, const std::string& command) {
  CW_RETURN_IF_ERROR(conn_.Connect(host, port, kConnectTimeoutMs));
  CW_RETURN_IF_ERROR(conn_.SendAll(command, kIoTimeoutMs));
  raw_fd_ = -1;
  thread_ = std::thread([this] { Loop(); });
  return Status::OK();
}

void CrawlStream::StartOnFd(int fd) {
  raw_fd_ = fd;
  thread_ = std::thread([this] { Loop(); });
}

void CrawlStream::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

CrawlStream::Stats CrawlStream::stats() {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void CrawlStream::Scan(const char* p, size_t n, uint64_t pos) {
  for (size_t i = 0; i < n && pos + i < 2; i++) first_[pos + i] = p[i];
  if (end_at_ != UINT64_MAX) return;
  const char* q = p;
  while ((q = static_cast<const char*>(std::memchr(q, '\r', size_t(p + n - q)))) != nullptr) {
    const uint64_t at = pos + uint64_t(q - p);
    // "OK\r\n" as the first line (memcached >= 1.6.43) does not end the response.
    const bool ok_line = at == 2 && first_[0] == 'O' && first_[1] == 'K';
    if (!ok_line) {
      end_at_ = at + 2;  // through the "\n" after it
      return;
    }
    q++;
  }
}

Status CrawlStream::Spill(const char* p, size_t n) {
  if (spill_fd_ < 0) {
    // Unlinked from the start: nothing to clean up, whatever happens to this process.
    spill_fd_ = ::open(spill_dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (spill_fd_ < 0) {
      std::string tmpl = spill_dir_ + "/.cachewarm-crawl-spill-XXXXXX";
      spill_fd_ = ::mkostemp(&tmpl[0], O_CLOEXEC);
      if (spill_fd_ < 0) return Status::IOError(ErrnoMessage("create a crawl spill file in --spill-dir " + spill_dir_, errno));
      ::unlink(tmpl.c_str());
    }
  }
  uint64_t off;
  {
    std::lock_guard<std::mutex> l(mu_);
    off = spill_w_;
  }
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::pwrite(spill_fd_, p + done, n - done, off_t(off + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Status::IOError(ErrnoMessage("write the crawl spill file in --spill-dir " + spill_dir_, errno));
    done += size_t(w);
  }
  return Status::OK();
}

void CrawlStream::Loop() {
  const int fd = raw_fd_ >= 0 ? raw_fd_ : conn_.fd();
  const std::string peer = raw_fd_ >= 0 ? std::string("the crawl socket") : conn_.peer();
  const auto started = std::chrono::steady_clock::now();
  auto last_rx = started;
  // memcached writes the crawl in ~4 KiB pieces: waking for each cost ~20,000 context switches of
  // this thread (and as many of the parser's) per million keys. The kernel wakes us once
  // kCrawlLowWater bytes are in (its receive buffer, not the crawler, holds the rest meanwhile:
  // the crawl never waits on us); a short poll timeout then takes whatever is left (the tail).
  const int lowat = int(kCrawlLowWater);
  const bool batched = ::setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat) == 0;
  const int poll_ms = batched ? kCrawlTailPollMs : 200;
  Status s;
  while (!stop_ && received_ < end_at_) {
    // Where the next bytes go: the ring's free contiguous space, or the spill file.
    char* dst;
    size_t room;
    bool spill;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (spilling_ && spill_r_ == spill_w_ && head_ == tail_) {
        spilling_ = false;  // the consumer caught up: back to memory
        spill_r_ = spill_w_ = 0;
        if (spill_fd_ >= 0 && ::ftruncate(spill_fd_, 0) != 0) {
        }
      }
      const uint64_t filled = tail_ - head_;
      if (!spilling_ && filled == cap_) spilling_ = true;
      spill = spilling_;
      if (spill) {
        dst = staging_.get();
        room = kCrawlStreamPiece;
      } else {
        const size_t at = size_t(tail_ % cap_);
        dst = ring_.get() + at;
        room = std::min<size_t>({size_t(cap_ - filled), cap_ - at, kCrawlStreamPiece});
      }
    }
    struct pollfd p = {fd, POLLIN, 0};
    int pr = ::poll(&p, 1, poll_ms);
    if (pr < 0 && errno != EINTR) {
      s = Status::IOError(ErrnoMessage("poll", errno));
      break;
    }
    ssize_t r = -1;
    if (pr == 0 && batched) {  // fewer than kCrawlLowWater bytes may be waiting: take them
      r = ::recv(fd, dst, room, MSG_DONTWAIT);
      if (r > 0) pr = 1;
      else if (r == 0) pr = 1;  // the peer closed: handled below
    }
    if (pr <= 0) {
      const auto idle = std::chrono::steady_clock::now() - last_rx;
      if (received_ == 0 && idle > std::chrono::milliseconds(first_byte_timeout_ms_)) {
        s = Status::IOError(peer + " answered nothing to lru_crawler metadump for " +
                            std::to_string(first_byte_timeout_ms_ / 1000) +
                            " s: its crawler is held by another client's crawl that is not being read (memcached "
                            "then leaves a new crawl request, and its thread, waiting), or is stuck (seen on "
                            "1.6.18 when a crawl's client hung up while another crawl request waited; only a "
                            "restart of memcached ends that); see --crawl-busy-timeout");
        break;
      }
      if (received_ > 0 && idle > std::chrono::milliseconds(kIoTimeoutMs)) {
        s = Status::IOError("timed out: " + peer + " sent nothing of the crawl for " +
                            std::to_string(kIoTimeoutMs / 1000) + " s");
        break;
      }
      continue;
    }
    if (r < 0) r = ::recv(fd, dst, room, MSG_DONTWAIT);
    if (r == 0) {
      s = Status::IOError("connection closed by " + peer + " during lru_crawler metadump (killed or restarted?)");
      break;
    }
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      s = Status::IOError(ErrnoMessage("connection to " + peer + " lost during lru_crawler metadump", errno));
      break;
    }
    last_rx = std::chrono::steady_clock::now();
    if (received_ == 0) {
      std::lock_guard<std::mutex> l(mu_);
      stats_.first_byte_wait_s = std::chrono::duration<double>(last_rx - started).count();
    }
    const size_t n = size_t(r);
    Scan(dst, n, received_);
    received_ += n;
    if (spill) {
      s = Spill(dst, n);
      if (!s.ok()) break;
    }
    std::lock_guard<std::mutex> l(mu_);
    if (spill) {
      spill_w_ += n;
      stats_.spilled += n;
    } else {
      tail_ += n;
    }
    stats_.bytes += n;
    stats_.peak_buffered = std::max<uint64_t>(stats_.peak_buffered, (tail_ - head_) + (spill_w_ - spill_r_));
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> l(mu_);
  if (!s.ok()) error_ = s;
  finished_ = true;
  cv_.notify_all();
}

Status CrawlStream::Read(const char** data, size_t* n) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return tail_ > head_ || spill_w_ > spill_r_ || finished_; });
  if (tail_ > head_) {  // the ring holds the oldest bytes
    const size_t at = size_t(head_ % cap_);
    last_n_ = std::min<size_t>(size_t(tail_ - head_), cap_ - at);
    last_from_spill_ = false;
    *data = ring_.get() + at;
    *n = last_n_;
    return Status::OK();
  }
  if (spill_w_ > spill_r_) {
    const uint64_t off = spill_r_;
    const size_t want = size_t(std::min<uint64_t>(spill_w_ - spill_r_, kCrawlStreamPiece));
    l.unlock();  // [off, off + want) is written and stays put until Consumed()
    size_t got = 0;
    while (got < want) {
      ssize_t r = ::pread(spill_fd_, spill_read_.get() + got, want - got, off_t(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return Status::IOError(ErrnoMessage("read the crawl spill file in --spill-dir " + spill_dir_, errno));
      got += size_t(r);
    }
    last_n_ = want;
    last_from_spill_ = true;
    *data = spill_read_.get();
    *n = want;
    return Status::OK();
  }
  last_n_ = 0;
  *n = 0;
  *data = nullptr;
  return error_;
}

void CrawlStream::Consumed() {
  std::lock_guard<std::mutex> l(mu_);
  if (last_from_spill_) {
    spill_r_ += last_n_;
  } else {
    head_ += last_n_;
  }
  last_n_ = 0;
}

}  // namespace cachewarm
