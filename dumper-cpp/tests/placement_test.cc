// hashkit as the stream mode links it (placement.h): the same published vectors the Python tests
// pin (tests/placement/test_hashkit.py), so a build that compiled hashkit differently (flags, char
// signedness, float evaluation) fails here too.
#include "placement.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../hashkit/hashkit.h"

namespace cachewarm {
namespace {

std::string Hex(const std::string& s) {
  static const char d[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) out += {d[c >> 4], d[c & 15]};
  return out;
}

uint32_t Furc(const std::string& k, uint32_t m) {
  return cw_furc_hash(reinterpret_cast<const unsigned char*>(k.data()), k.size(), m);
}

uint32_t Hash(cw_hash_id id, const std::string& k) {
  return cw_hash(id, reinterpret_cast<const unsigned char*>(k.data()), k.size());
}

std::string Signed(bool down) {
  std::string s;
  for (int i = -128; i < 128; i++) s += char(down ? 127 - (i + 128) : i);
  return s;
}

TEST(Hashkit, McrouterPublishedCh3Values) {
  EXPECT_EQ(Furc("sample", 100), 97u);
  EXPECT_EQ(Furc("", 100), 72u);
  EXPECT_EQ(Furc("sample", 1), 0u);
  EXPECT_EQ(Furc("", CW_FURC_MAX), 6173600u);
  EXPECT_EQ(Furc("sample", CW_FURC_MAX), 5167780u);
  EXPECT_EQ(Furc(Signed(false), 99999), 31015u);
  EXPECT_EQ(Furc(Signed(true), 99999), 67101u);
}

TEST(Hashkit, McrouterPublishedCrc32Values) {
  EXPECT_EQ(Hash(CW_HASH_CRC32_MCROUTER, "sample") % 100, 7u);
  EXPECT_EQ(Hash(CW_HASH_CRC32_MCROUTER, "sample") % ((1u << 30) - 1), 822834884u);
  EXPECT_EQ(Hash(CW_HASH_CRC32_MCROUTER, Signed(false)) % 99999, 11697u);
  EXPECT_EQ(Hash(CW_HASH_CRC32_MCROUTER, Signed(true)) % 99999, 97630u);
}

TEST(Hashkit, WeightedKetamaGives156PointsAt25Nodes) {
  EXPECT_EQ(cw_ketama_weighted_points(1, 25, 25, 160), 156u);
  EXPECT_EQ(cw_ketama_weighted_points(1, 24, 24, 160), 160u);
  EXPECT_EQ(cw_libmemcached_weighted_points(1, 25, 25, 160), 156u);
}

TEST(Placement, SpymemcachedPublicVectors) {
  std::string d = "dist ketama\nhash md5\npoints md5x4\ncollision last\n";
  for (int i = 0; i < 4; i++) d += "node " + Hex("127.0.0.1:" + std::to_string(10000 + i)) + " 160\n";
  Placement p;
  ASSERT_TRUE(p.Parse(d).ok());
  EXPECT_EQ(p.nodes(), 4u);
  EXPECT_EQ(p.Index("dustin"), 0u);
  EXPECT_EQ(p.Index("noelani"), 2u);
  EXPECT_EQ(p.Index("7QHNPFVC"), 1u);
  EXPECT_EQ(p.Index("N6H4245M"), 1u);
}

TEST(Placement, DestinationsAndTransforms) {
  // mcrouter Crc32 over two servers listed in reverse destination order, a hash stop and a salt
  Placement p;
  ASSERT_TRUE(p.Parse("dist modula\nhash crc32_mcrouter\nhash-stop\nsalt " + Hex("s") + "\nnode 61 1 1\nnode 62 1 0\n").ok());
  EXPECT_EQ(p.max_dest(), 1u);
  const uint32_t slot = Hash(CW_HASH_CRC32_MCROUTER, "keys") % 2;
  EXPECT_EQ(p.Index("key|#|anything"), slot == 0 ? 1u : 0u);
}

TEST(Placement, BadDescriptionsAreNamed) {
  Placement p;
  Status s = p.Parse("dist ketama\nhash nope\nnode 61 4\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("unknown hash nope"), std::string::npos) << s.ToString();
  s = p.Parse("dist modula\nhash md5\n");
  EXPECT_NE(s.ToString().find("no node"), std::string::npos) << s.ToString();
  s = p.Parse("dist ketama\nhash md5\npoints md5x4\nnode 61 6\n");
  EXPECT_NE(s.ToString().find("not a multiple of 4"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace cachewarm

namespace cachewarm {
namespace {

TEST(Hashkit, Spooky32PublishedValues) {
  unsigned char buf[512];
  for (int i = 0; i < 512; i++) buf[i] = (unsigned char)(i + 128);
  EXPECT_EQ(cw_spooky32(buf, 0, 0), 0x6bf50919u);
  EXPECT_EQ(cw_spooky32(buf, 31, 0), 0x027bca7cu);
  EXPECT_EQ(cw_spooky32(buf, 191, 0), 0xe13d9e19u);
  EXPECT_EQ(cw_spooky32(buf, 192, 0), 0x77e012bdu);
  EXPECT_EQ(cw_spooky32(buf, 511, 0), 0xcc1c8250u);
}

TEST(Hashkit, McrouterPublishedWeightedCh3Values) {
  const double w3[] = {1.0, 1.0, 0.7};
  size_t counts[3] = {0, 0, 0};
  for (int i = 0; i < 1000; i++) {
    const std::string k = std::to_string(i);
    counts[cw_wch3_hash(reinterpret_cast<const unsigned char*>(k.data()), k.size(), w3, 3)]++;
  }
  EXPECT_EQ(counts[0], 341u);
  EXPECT_EQ(counts[1], 371u);
  EXPECT_EQ(counts[2], 288u);
  const std::vector<double> zero(100, 0.0);
  EXPECT_EQ(cw_wch3_hash(reinterpret_cast<const unsigned char*>("sample"), 6, zero.data(), 100), 59u);
}

}  // namespace
}  // namespace cachewarm
