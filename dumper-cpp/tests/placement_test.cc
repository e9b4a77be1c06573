// hashkit as the stream mode links it (placement.h): the same published vectors the Python tests
// pin (tests/placement/test_hashkit.py; EVCache's ring: the vector files both suites read), so a
// build that compiled hashkit differently (flags, char signedness, float evaluation) fails here too.
#include "placement.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../hashkit/hashkit.h"
#include "codec.h"

namespace cachewarm {
namespace {

std::string FromHex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += char(std::strtol(h.substr(i, 2).c_str(), nullptr, 16));
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

// EVCache's ring as the stream builds it, over a shared vector file (tests/placement/ reads the same):
// `ring <reps> <delimiter hex or -> <node key>...` then `<key hex> <node index>` lines.
void CheckRingVectors(const std::string& name, size_t min_rings, size_t min_keys) {
  std::ifstream f(std::string(CACHEWARM_VECTORS_DIR) + "/" + name);
  ASSERT_TRUE(f) << name;
  Placement ring;
  size_t rings = 0, keys = 0;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string first;
    in >> first;
    if (first == "ring") {
      int reps;
      std::string delim;
      in >> reps >> delim;
      std::vector<std::string> nodes;
      for (std::string n; in >> n;) nodes.push_back(n);
      ASSERT_TRUE(ring.ParseEvcache(nodes, reps, delim == "-" ? "" : FromHex(delim)).ok()) << line;
      rings++;
      continue;
    }
    size_t want;
    in >> want;
    EXPECT_EQ(ring.Index(FromHex(first)), want) << name << ": " << line;
    keys++;
  }
  EXPECT_GE(rings, min_rings) << name;
  EXPECT_GE(keys, min_keys) << name;
}

TEST(EvcacheRing, SpymemcachedPublicVectors) { CheckRingVectors("spymemcached_ketama.txt", 2, 10); }

TEST(EvcacheRing, NodeKeysDelimitersAndReps) { CheckRingVectors("ketama.txt", 3, 300); }

TEST(EvcacheRing, RefusesNodeKeysThatCollide) {
  Placement ring;
  const Status s = ring.ParseEvcache({"h/h:11211", "h/h:11211"}, 160, "");
  EXPECT_NE(s.ToString().find("node keys collide"), std::string::npos) << s.ToString();
  EXPECT_FALSE(ring.ParseEvcache({"a"}, 10, "").ok());  // not a multiple of 4
}

TEST(Placement, DestinationsAndTransforms) {
  // mcrouter Crc32 over two servers listed in reverse destination order, a hash stop and a salt
  Placement p;
  ASSERT_TRUE(p.Parse("dist modula\nhash crc32_mcrouter\nhash-stop\nsalt " + HexEncode("s") + "\nnode 61 1 1\nnode 62 1 0\n").ok());
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
