// The crawl socket's reader: reads everything at once into its ring, spills when the consumer is
// behind, hands bytes out in order, and knows where the response ends without parsing it.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <string>
#include <thread>

#include "crawl_stream.h"
#include "crawler.h"
#include "testutil.h"

namespace cachewarm {
namespace {

std::string Dump(int keys) {
  std::string s = "OK\r\n";
  for (int i = 0; i < keys; i++)
    s += "key=k%20" + std::to_string(i) + " exp=-1 la=1795436829 cas=" + std::to_string(i) +
         " fetch=no cls=1 size=65 flags=5 \n";
  return s + "END\r\n";
}

void WriteAll(int fd, const std::string& s, std::mt19937* rng) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t n = std::min<size_t>(s.size() - pos, 1 + (*rng)() % 9000);
    ssize_t w = SocketWrite(fd, s.data() + pos, n);
    ASSERT_GT(w, 0);
    pos += size_t(w);
  }
}

// The consumer does nothing until the server has written everything: the reader must have taken it
// all (into its 4 KiB ring, then the spill file), or the writer would still be blocked.
TEST(CrawlStream, ReadsEverythingWhileTheConsumerIsStuck) {
  TempDir t;
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const std::string dump = Dump(20000);  // ~1.4 MB, far more than the socket buffers
  CrawlStream stream(4096, t.path());
  stream.StartOnFd(sv[0]);
  std::mt19937 rng(5);
  std::thread writer([&] { WriteAll(sv[1], dump, &rng); });
  writer.join();  // returns only because the reader kept reading
  std::string got;
  for (;;) {
    const char* d = nullptr;
    size_t n = 0;
    ASSERT_TRUE(stream.Read(&d, &n).ok());
    if (n == 0) break;  // the end was recognized: the server's end of the socket is still open
    got.append(d, n);
    stream.Consumed();
  }
  EXPECT_EQ(got, dump);
  const CrawlStream::Stats st = stream.stats();
  EXPECT_EQ(st.bytes, dump.size());
  // All of it but what the socket buffers (~200 KB) still held when the writer returned.
  EXPECT_GT(st.spilled, dump.size() / 2);
  EXPECT_GT(st.peak_buffered, dump.size() / 2);
  ::close(sv[1]);
}

// A consumer that keeps up sometimes and falls behind at other times: the stream alternates between
// ring and spill and the parser sees the bytes in order.
TEST(CrawlStream, RingAndSpillAlternateInOrder) {
  TempDir t;
  for (int trial = 0; trial < 5; trial++) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    const std::string dump = Dump(5000 + trial * 1000);
    CrawlStream stream(8192, t.path());
    stream.StartOnFd(sv[0]);
    std::mt19937 rng(trial);
    std::thread writer([&] { WriteAll(sv[1], dump, &rng); });
    uint64_t keys = 0;
    CrawlReader reader([&](const Slice& k, int64_t) {
      EXPECT_EQ(k.ToString(), "k%20" + std::to_string(keys));
      keys++;
      return Status::OK();
    });
    int reads = 0;
    while (!reader.done()) {
      const char* d = nullptr;
      size_t n = 0;
      ASSERT_TRUE(stream.Read(&d, &n).ok());
      ASSERT_GT(n, 0u);
      ASSERT_TRUE(reader.Feed(d, n).ok());
      stream.Consumed();
      if (++reads % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    writer.join();
    EXPECT_EQ(keys, uint64_t(5000 + trial * 1000));
    ::close(sv[1]);
  }
}

TEST(CrawlStream, ShortAnswersEndTheResponse) {
  TempDir t;
  for (const std::string& answer : {std::string("BUSY currently processing crawler request\r\n"),
                                    std::string("OK\r\nERROR locked try again later\r\n"), std::string("END\r\n"),
                                    std::string("OK\r\nEND\r\n")}) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ASSERT_EQ(SocketWrite(sv[1], answer.data(), answer.size()), ssize_t(answer.size()));
    CrawlStream stream(1 << 20, t.path());
    stream.StartOnFd(sv[0]);
    std::string got;
    for (;;) {
      const char* d = nullptr;
      size_t n = 0;
      ASSERT_TRUE(stream.Read(&d, &n).ok()) << answer;
      if (n == 0) break;
      got.append(d, n);
      stream.Consumed();
    }
    EXPECT_EQ(got, answer);
    ::close(sv[1]);
  }
}

TEST(CrawlStream, ConnectionClosedBeforeTheEndIsAnErrorAfterTheBytes) {
  TempDir t;
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const std::string part = "OK\r\nkey=a exp=-1\nkey=b exp=-1\n";
  ASSERT_EQ(SocketWrite(sv[1], part.data(), part.size()), ssize_t(part.size()));
  ::close(sv[1]);
  CrawlStream stream(1 << 20, t.path());
  stream.StartOnFd(sv[0]);
  std::string got;
  Status s;
  for (;;) {
    const char* d = nullptr;
    size_t n = 0;
    s = stream.Read(&d, &n);
    if (!s.ok() || n == 0) break;
    got.append(d, n);
    stream.Consumed();
  }
  EXPECT_EQ(got, part);
  EXPECT_EQ(s.code(), Status::kIOError);
  EXPECT_NE(s.message().find("connection closed"), std::string::npos) << s.ToString();
}

TEST(CrawlStream, SpillDirThatCannotHoldAFileIsNamed) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  CrawlStream stream(4096, "/nonexistent/spill");
  stream.StartOnFd(sv[0]);
  const std::string dump = Dump(2000);
  std::thread writer([&] {
    std::mt19937 rng(1);
    size_t pos = 0;
    while (pos < dump.size()) {
      ssize_t w = SocketWrite(sv[1], dump.data() + pos, std::min<size_t>(4096, dump.size() - pos));
      if (w <= 0) return;  // the reader gave up
      pos += size_t(w);
    }
  });
  Status s;
  // Consume nothing until the reader has had to spill (and failed).
  for (int i = 0; i < 500 && stream.stats().bytes < 4096; i++) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  for (;;) {
    const char* d = nullptr;
    size_t n = 0;
    s = stream.Read(&d, &n);
    if (!s.ok() || n == 0) break;
    stream.Consumed();
  }
  ::shutdown(sv[1], SHUT_RDWR);
  writer.join();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--spill-dir /nonexistent/spill"), std::string::npos) << s.ToString();
  ::close(sv[1]);
}

// The tests' socket writes must survive a reader that has gone away whatever SIGPIPE's disposition
// (default from a terminal): the write fails with EPIPE and the test binary lives on.
TEST(TestSockets, WriteToAClosedPeerIsEPIPENotADeath) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ::close(sv[0]);
  errno = 0;
  EXPECT_EQ(SocketWrite(sv[1], "x", 1), -1);
  EXPECT_EQ(errno, EPIPE);
  ::close(sv[1]);
}

}  // namespace
}  // namespace cachewarm
