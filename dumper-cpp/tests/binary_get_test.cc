// The binary-protocol path for keys no meta command can name, against a scripted server.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>
#include <thread>

#include "binary_get.h"
#include "cachewarm_core.h"
#include "testutil.h"

namespace cachewarm {
namespace {

std::string Response(uint8_t op, uint16_t status, uint32_t opaque, const std::string& extras, const std::string& key,
                     const std::string& value) {
  std::string h(CW_BIN_HEADER, '\0');
  h[0] = char(CW_BIN_RESPONSE);
  h[1] = char(op);
  h[2] = char(key.size() >> 8);
  h[3] = char(key.size());
  h[4] = char(extras.size());
  h[6] = char(status >> 8);
  h[7] = char(status);
  const uint32_t body = uint32_t(extras.size() + key.size() + value.size());
  for (int i = 0; i < 4; i++) h[8 + i] = char(body >> (24 - 8 * i));
  for (int i = 0; i < 4; i++) h[12 + i] = char(opaque >> (24 - 8 * i));
  return h + extras + key + value;
}

bool ReadN(int fd, std::string* out, size_t n) {
  out->resize(n);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, &(*out)[got], n - got);
    if (r <= 0) return false;
    got += size_t(r);
  }
  return true;
}

// A server that holds `items` (key -> (flags, value)) and refuses `refused` with status 0x0020.
void Serve(int fd, const std::map<std::string, std::pair<uint32_t, std::string>>& items, const std::string& refused) {
  std::string h, key;
  while (ReadN(fd, &h, CW_BIN_HEADER)) {
    const uint8_t op = uint8_t(h[1]);
    const size_t keylen = (uint8_t(h[2]) << 8) | uint8_t(h[3]);
    const uint32_t opaque = (uint32_t(uint8_t(h[12])) << 24) | (uint32_t(uint8_t(h[13])) << 16) |
                            (uint32_t(uint8_t(h[14])) << 8) | uint8_t(h[15]);
    if (!ReadN(fd, &key, keylen)) return;
    std::string out;
    if (op == CW_BIN_OP_NOOP) {
      out = Response(CW_BIN_OP_NOOP, 0, opaque, "", "", "");
    } else if (key == refused) {
      out = Response(CW_BIN_OP_GETKQ, 0x20, opaque, "", "", "Auth failure");
    } else {
      auto it = items.find(key);
      if (it == items.end()) continue;  // quiet miss
      const uint32_t f = it->second.first;
      const std::string flags = {char(f >> 24), char(f >> 16), char(f >> 8), char(f)};
      out = Response(CW_BIN_OP_GETKQ, 0, opaque, flags, key, it->second.second);
    }
    if (SocketWrite(fd, out.data(), out.size()) != ssize_t(out.size())) return;
  }
}

TEST(BinaryGetter, HitsMissesRefusalsAndStreamedValues) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::map<std::string, std::pair<uint32_t, std::string>> items;
  std::vector<std::string> keys;
  for (int n : {187, 188, 250, 1, 200}) {
    std::string k(size_t(n), '\0');
    for (int i = 0; i < n; i++) k[size_t(i)] = "\x00\x20\x0d\x0a\xff"[i % 5];
    k[size_t(n - 1)] = char(n);
    keys.push_back(k);
  }
  items[keys[0]] = {4294967295u, std::string(300000, 'v')};  // larger than the 64 KiB buffer: streamed
  items[keys[1]] = {0, ""};
  items[keys[2]] = {7, "\r\nEND\r\n"};
  // keys[3] is missing; keys[4] is refused.
  std::thread server([&] { Serve(sv[1], items, keys[4]); });
  BinaryGetter g("test", 0, 64 << 10);
  g.UseFd(sv[0]);
  std::map<size_t, std::pair<uint32_t, std::string>> got;
  std::map<size_t, std::string> failed;
  size_t cur = 0;
  std::string unavailable;
  ASSERT_TRUE(g.Get(
                   keys,
                   [&](size_t i, uint32_t flags, uint32_t vlen, uint64_t) {
                     cur = i;
                     got[i] = {flags, ""};
                     got[i].second.reserve(vlen);
                     return Status::OK();
                   },
                   [&](const Slice& p) {
                     got[cur].second.append(p.data(), p.size());
                     return Status::OK();
                   },
                   [&](size_t i, const std::string& why) {
                     failed[i] = why;
                     return Status::OK();
                   },
                   &unavailable)
                  .ok());
  EXPECT_TRUE(unavailable.empty());
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; i++) EXPECT_EQ(got[i], items[keys[i]]) << i;
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_NE(failed[4].find("status 0x0020 (Auth failure)"), std::string::npos) << failed[4];
  ::shutdown(sv[1], SHUT_RDWR);
  server.join();
  ::close(sv[1]);
}

// A server that does not speak the binary protocol (memcached -B ascii) or hangs up: nothing is
// fetched, the reason is given, and the dump goes on.
TEST(BinaryGetter, ServerWithoutTheBinaryProtocol) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ::close(sv[1]);
  BinaryGetter g("test", 0, 64 << 10);
  g.UseFd(sv[0]);
  std::string unavailable;
  int calls = 0;
  auto count = [&](auto&&...) {
    calls++;
    return Status::OK();
  };
  ASSERT_TRUE(g.Get({std::string(200, 'x')}, count, count, count, &unavailable).ok());
  EXPECT_NE(unavailable.find("does not answer the binary protocol"), std::string::npos) << unavailable;
  EXPECT_EQ(calls, 0);
  unavailable.clear();
  ASSERT_TRUE(g.Get({std::string(200, 'y')}, count, count, count, &unavailable).ok());  // remembered
  EXPECT_FALSE(unavailable.empty());
}

}  // namespace
}  // namespace cachewarm
