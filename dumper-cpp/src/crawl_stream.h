// The crawl socket's reader: a thread that does nothing but recv() the `lru_crawler metadump`
// response into memory, so the crawl never waits on the dumper's disk.
//
// Why: memcached before 1.6.19 holds a hash-bucket (item) lock while it writes metadump output to
// the client; a client that stops reading stalls every request for keys under that lock, and with
// them the memcached worker threads that serve those requests (and every other connection on those
// threads). The dumper's key lists are fsynced on the output volume, which may be slow; so parsing
// and writing key lists happen on the consumer's thread, and this reader only fills memory.
//
// Memory: one ring buffer of `ring_bytes` (--crawl-buffer, counted in --memory-limit's plan) plus two
// fixed 256 KiB buffers. When the ring is full (the consumer is behind by ring_bytes), the reader
// appends what it receives to an unlinked spill file in `spill_dir` (--spill-dir; plain writes into
// the page cache, never fsynced, never the output's fsync path) until the consumer has caught up,
// then returns to the ring. Bytes come out in the order they arrived.
//
// The reader recognizes the response's end without parsing it: key lines never contain '\r'
// (memcached URL-encodes keys), every other line ends in "\r\n", and the only "\r\n" line that does
// not end the response is the "OK" first line of memcached >= 1.6.43.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "net.h"
#include "status.h"

namespace cachewarm {

// Size of the reader's staging buffer and of the consumer's spill-read buffer.
constexpr size_t kCrawlStreamPiece = 256 << 10;
// The reader wakes when this much of the crawl has arrived (SO_RCVLOWAT), or after kCrawlTailPollMs.
constexpr size_t kCrawlLowWater = 64 << 10;
constexpr int kCrawlTailPollMs = 5;

class CrawlStream {
 public:
  struct Stats {
    uint64_t bytes = 0;          // received
    uint64_t peak_buffered = 0;  // most bytes received and not yet consumed (ring + spill)
    uint64_t spilled = 0;        // bytes that went through the spill file
    double first_byte_wait_s = 0;  // from the request to the answer's first byte
  };

  // `first_byte_timeout_ms`: how long the answer's first byte may take. A crawl request made while
  // another client's crawl is stuck (its client not reading) gets no answer at all until that crawl
  // ends: memcached's thread waits on the crawler's lock (seen on 1.6.18, 1.6.38 and 1.6.45).
  CrawlStream(size_t ring_bytes, std::string spill_dir, int first_byte_timeout_ms = kIoTimeoutMs);
  ~CrawlStream();
  CrawlStream(const CrawlStream&) = delete;
  CrawlStream& operator=(const CrawlStream&) = delete;

  // Connects, sends `command` and starts the reader thread.
  Status Start(const std::string& host, int port, const std::string& command);
  // For tests: reads from an already connected socket (owned from now on).
  void StartOnFd(int fd);
  // The next bytes of the response, in order (blocks until there are some). *n == 0 with OK: the
  // response has ended. Errors of the connection (closed, timed out) come after the bytes before them.
  Status Read(const char** data, size_t* n);
  // The bytes of the last Read have been used.
  void Consumed();
  // Ends the reader (closing the socket makes memcached abandon the crawl). Idempotent.
  void Stop();
  Stats stats();

 private:
  void Loop();
  // Scans newly received bytes [pos, pos + n) of the stream for the response's end.
  void Scan(const char* p, size_t n, uint64_t pos);
  Status Spill(const char* p, size_t n);

  const size_t cap_;
  const std::string spill_dir_;
  const int first_byte_timeout_ms_;
  std::unique_ptr<char[]> ring_;
  std::unique_ptr<char[]> staging_, spill_read_;
  Conn conn_;
  int raw_fd_ = -1;  // StartOnFd
  std::thread thread_;
  std::atomic<bool> stop_{false};

  // Reader-only state.
  uint64_t received_ = 0;
  char first_[2] = {0, 0};
  uint64_t end_at_ = UINT64_MAX;  // stream offset one past the response's last byte, once known

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t head_ = 0, tail_ = 0;  // ring: consumed / received offsets (absolute)
  bool spilling_ = false;
  int spill_fd_ = -1;
  uint64_t spill_r_ = 0, spill_w_ = 0;
  bool finished_ = false;
  Status error_;
  size_t last_n_ = 0;
  bool last_from_spill_ = false;
  Stats stats_;
};

}  // namespace cachewarm
