// The stream mode's pieces that must agree with the Python populator bit for bit (node keys, the
// item size rule: a shared vector table in tests/vectors/), its flag and address parsing, the
// destination preflight against a scripted server, and the reply parsing of DestConn.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "destination.h"
#include "net.h"
#include "stream_conn.h"
#include "testutil.h"

namespace cachewarm {
namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);)
    if (!line.empty() && line[0] != '#') out.push_back(line);
  return out;
}

TEST(Destination, NodeKeyFormat) {
  std::string k;
  ASSERT_TRUE(FormatNodeKey(kEvcacheNodeKey, "cache-1", "10.0.0.7", 6379, &k).ok());
  EXPECT_EQ(k, "cache-1/10.0.0.7:11211");  // EVCache: the port is always written 11211
  ASSERT_TRUE(FormatNodeKey("{host}:{port}", "10.0.0.7", "", 6379, &k).ok());
  EXPECT_EQ(k, "10.0.0.7:6379");
  ASSERT_TRUE(FormatNodeKey("{{{ip}}}", "h", "", 1, &k).ok());
  EXPECT_EQ(k, "{h}");  // {ip} of an unresolved host is the host, braces doubled stand for one
  EXPECT_FALSE(FormatNodeKey("{name}", "h", "i", 1, &k).ok());
  EXPECT_FALSE(FormatNodeKey("{host", "h", "i", 1, &k).ok());
  EXPECT_FALSE(FormatNodeKey("x}", "h", "i", 1, &k).ok());
}

TEST(ItemLimit, VectorsOfThePythonRule) {
  const std::vector<std::string> lines = Lines(std::string(CACHEWARM_VECTORS_DIR) + "/item_size.txt");
  ASSERT_GT(lines.size(), 100u);
  for (const std::string& line : lines) {
    std::istringstream in(line);
    uint64_t isz, klen, vlen;
    int cas, fits;
    uint32_t flags;
    in >> isz >> cas >> klen >> vlen >> flags >> fits;
    ItemLimit l{isz, cas != 0};
    EXPECT_EQ(l.Fits(klen, vlen, flags), fits != 0) << line;
  }
}

TEST(Endpoints, ParseLikeThePythonCli) {
  std::vector<Endpoint> e;
  ASSERT_TRUE(ParseEndpoints("10.0.0.1:11211, cache-1.example.com:1,[::1]:11311", &e).ok());
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[1].host, "cache-1.example.com");
  EXPECT_EQ(e[2].host, "::1");
  EXPECT_EQ(e[2].address(), "::1:11311");  // as nodes.py's Node.address
  for (const char* bad : {"host", "h:0", "h:65536", "h:x", ":1", "x;y:1", "a..b:1", "-x:1", "h:1,h:1", ""})
    EXPECT_FALSE(ParseEndpoints(bad, &e).ok()) << bad;
  Endpoint lit{"127.0.0.1", 1, ""};
  ASSERT_TRUE(ResolveEndpoint(&lit).ok());
  EXPECT_EQ(lit.ip, "127.0.0.1");
  Endpoint name{"localhost", 1, ""};
  ASSERT_TRUE(ResolveEndpoint(&name).ok());
  EXPECT_FALSE(name.ip.empty());
}

TEST(Destination, Versions) {
  EXPECT_TRUE(TooOld("1.5.22"));
  EXPECT_TRUE(TooOld("0.9.0"));
  EXPECT_FALSE(TooOld("1.6.0"));
  EXPECT_FALSE(TooOld("1.6.45-rc1"));
  EXPECT_FALSE(TooOld("unknown"));  // not a release number: not refused (as the Python side)
}

// A scripted memcached on 127.0.0.1: answers each command line with the next reply.
class Scripted {
 public:
  explicit Scripted(std::vector<std::string> replies) {
    lfd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(lfd_, 1), 0);
    socklen_t len = sizeof a;
    ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread_ = std::thread([this, replies] {
      const int fd = ::accept(lfd_, nullptr, nullptr);
      char buf[4096];
      for (const std::string& r : replies) {
        std::string got;
        while (got.find("\r\n") == std::string::npos) {
          const ssize_t n = ::read(fd, buf, sizeof buf);
          if (n <= 0) break;
          got.append(buf, size_t(n));
        }
        if (SocketWrite(fd, r.data(), r.size()) < 0) break;
      }
      ::close(fd);
    });
  }
  ~Scripted() {
    thread_.join();
    ::close(lfd_);
  }
  int port = 0;

 private:
  int lfd_ = -1;
  std::thread thread_;
};

TEST(Destination, PreflightReadsSizeCasAndEvictions) {
  Scripted s({"STAT pid 42\r\nSTAT uptime 100\r\nSTAT time 1000\r\nSTAT evictions 7\r\nEND\r\n",
              "STAT item_size_max 1048576\r\nSTAT cas_enabled no\r\nSTAT evictions off\r\nEND\r\n",
              "VERSION 1.6.38\r\n"});
  Conn c;
  ASSERT_TRUE(c.Connect("127.0.0.1", s.port, 2000).ok());
  DestinationInfo info;
  ASSERT_TRUE(ReadDestinationInfo(&c, &info).ok());
  EXPECT_EQ(info.version, "1.6.38");
  EXPECT_EQ(info.pid, 42);
  EXPECT_EQ(info.started, 900);
  EXPECT_EQ(info.evictions, 7u);
  EXPECT_EQ(info.limit.item_size_max, 1048576u);
  EXPECT_FALSE(info.limit.cas);
  EXPECT_FALSE(info.evictions_enabled);
  // The rule at the boundary, CAS off: 48 + key + 1 + value + 2 (+4 with flags) <= 1 MiB.
  EXPECT_TRUE(info.limit.Fits(10, 1048576 - 48 - 1 - 2 - 10, 0));
  EXPECT_FALSE(info.limit.Fits(10, 1048576 - 48 - 1 - 2 - 10, 1));
}

TEST(Destination, PreflightRefusesAnAnswerWithoutItemSize) {
  Scripted s({"STAT pid 42\r\nEND\r\n", "END\r\n", "VERSION 1.6.38\r\n"});
  Conn c;
  ASSERT_TRUE(c.Connect("127.0.0.1", s.port, 2000).ok());
  DestinationInfo info;
  EXPECT_EQ(ReadDestinationInfo(&c, &info).code(), Status::kProtocol);
}

TEST(DestConn, MetaRepliesCountedAndErrorsStopWriting) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  DestConn d("127.0.0.1:1", DestConn::kMeta);
  d.UseFd(sv[0]);
  const std::string replies = "NS\r\nNS O17\r\nMN\r\nNS\r\n";
  ASSERT_EQ(SocketWrite(sv[1], replies.data(), replies.size()), ssize_t(replies.size()));
  // A mark answered: AwaitMarks returns once MN is in.
  d.QueueMark();
  DestConn* conns[] = {&d};
  ASSERT_TRUE(DestConn::AwaitMarks(conns, 1, 2000).ok());
  DestConn::Replies r;
  d.TakeReplies(&r);
  EXPECT_EQ(r.not_stored, 2u);
  ASSERT_EQ(r.tags.size(), 1u);
  EXPECT_EQ(r.tags[0], 17u);
  char buf[16];
  EXPECT_EQ(::read(sv[1], buf, sizeof buf), 4);  // "mn\r\n" went out
  const std::string err = "SERVER_ERROR out of memory storing object\r\n";
  ASSERT_EQ(SocketWrite(sv[1], err.data(), err.size()), ssize_t(err.size()));
  static const char value[] = "ms k 1 T0 F0 ME q\r\nv\r\n";
  d.QueueMark();
  Status s = DestConn::AwaitMarks(conns, 1, 2000);
  EXPECT_EQ(s.code(), Status::kServer);
  EXPECT_NE(s.message().find("SERVER_ERROR out of memory"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("127.0.0.1:1"), std::string::npos);  // names the destination
  EXPECT_FALSE(d.broken());                                        // an answer, not a lost connection
  d.Queue(value, sizeof value - 1);
  EXPECT_EQ(DestConn::FlushAll(conns, 1, 2000).code(), Status::kServer);  // nothing more is sent
  ::close(sv[1]);
}

TEST(DestConn, TextAddRepliesAreMatchedInOrder) {
  // Add mode writes text `add`s: one reply per item, in order; a NOT_STORED carries the tag its
  // add was queued with (a resend) or is counted (kNoTag); an error stops writing, and is popped too.
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  DestConn d("127.0.0.1:1", DestConn::kMeta);
  d.UseFd(sv[0]);
  d.ExpectAdd(DestConn::kNoTag);
  d.ExpectAdd(5);
  d.ExpectAdd(DestConn::kNoTag);
  d.ExpectAdd(9);
  const std::string replies = "STORED\r\nNOT_STORED\r\nNOT_STORED\r\nNOT_STORED\r\nMN\r\n";
  ASSERT_EQ(::write(sv[1], replies.data(), replies.size()), ssize_t(replies.size()));
  d.QueueMark();
  DestConn* conns[] = {&d};
  ASSERT_TRUE(DestConn::AwaitMarks(conns, 1, 2000).ok());
  DestConn::Replies r;
  d.TakeReplies(&r);
  EXPECT_EQ(r.not_stored, 1u);
  EXPECT_EQ(r.tags, (std::vector<uint64_t>{5, 9}));
  d.ExpectAdd(DestConn::kNoTag);
  const std::string err = "SERVER_ERROR out of memory storing object\r\n";
  ASSERT_EQ(::write(sv[1], err.data(), err.size()), ssize_t(err.size()));
  d.QueueMark();
  EXPECT_EQ(DestConn::AwaitMarks(conns, 1, 2000).code(), Status::kServer);
  EXPECT_NE(d.error().find("SERVER_ERROR out of memory"), std::string::npos);
  ::close(sv[1]);
}

TEST(DestConn, AClosedConnectionIsBroken) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  DestConn d("h:1", DestConn::kMeta);
  d.UseFd(sv[0]);
  ::close(sv[1]);
  d.QueueMark();
  DestConn* conns[] = {&d};
  Status s = DestConn::AwaitMarks(conns, 1, 2000);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(d.broken());
}

TEST(DestConn, BinaryRepliesExistsNoopAndErrors) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  DestConn d("h:1", DestConn::kBinary);
  d.UseFd(sv[0]);
  auto response = [](uint8_t op, uint16_t status, uint32_t opaque, const std::string& body) {
    std::string r(24, '\0');
    r[0] = char(0x81);
    r[1] = char(op);
    r[6] = char(status >> 8);
    r[7] = char(status);
    r[8] = char(body.size() >> 24), r[9] = char(body.size() >> 16), r[10] = char(body.size() >> 8),
    r[11] = char(body.size());
    r[12] = char(opaque >> 24), r[13] = char(opaque >> 16), r[14] = char(opaque >> 8), r[15] = char(opaque);
    return r + body;
  };
  const std::string in = response(binstore::kAddQ, binstore::kKeyExists, 5, "Data exists for key.") +
                         response(binstore::kNoop, 0, 0, "");
  // Fed in two pieces: a response split across reads.
  ASSERT_EQ(SocketWrite(sv[1], in.data(), 30), 30);
  d.QueueMark();
  DestConn* conns[] = {&d};
  std::thread later([&] {
    usleep(50000);
    EXPECT_EQ(SocketWrite(sv[1], in.data() + 30, in.size() - 30), ssize_t(in.size() - 30));
  });
  ASSERT_TRUE(DestConn::AwaitMarks(conns, 1, 2000).ok());
  later.join();
  DestConn::Replies r;
  d.TakeReplies(&r);
  ASSERT_EQ(r.tags.size(), 1u);
  EXPECT_EQ(r.tags[0], 5u);
  const std::string big = response(binstore::kAddQ, 0x0003, 9, "Too large.");
  ASSERT_EQ(SocketWrite(sv[1], big.data(), big.size()), ssize_t(big.size()));
  d.QueueMark();
  Status s = DestConn::AwaitMarks(conns, 1, 2000);
  EXPECT_EQ(s.code(), Status::kServer);
  EXPECT_NE(s.message().find("0x0003"), std::string::npos) << s.ToString();
  ::close(sv[1]);
}

}  // namespace
}  // namespace cachewarm
