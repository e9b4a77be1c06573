// The wire rules of core/cachewarm_core.h against the shared vectors in tests/vectors/core/ (the
// populator's Python extension reads the same files: tests/datapath/test_core.py).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cachewarm_core.h"

namespace {

std::string FromHex(const std::string& h) {
  if (h == "-") return "";
  std::string o;
  for (size_t i = 0; i + 1 < h.size(); i += 2) o += char(std::stoi(h.substr(i, 2), nullptr, 16));
  return o;
}

std::string ToHex(const void* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string o;
  for (size_t i = 0; i < n; i++) {
    const unsigned char c = static_cast<const unsigned char*>(p)[i];
    o += d[c >> 4];
    o += d[c & 15];
  }
  return o.empty() ? "-" : o;
}

// The vector file's cases: each line's fields (comments and blank lines left out).
std::vector<std::vector<std::string>> Cases(const std::string& name) {
  std::ifstream in(std::string(CACHEWARM_VECTORS_DIR) + "/core/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::vector<std::vector<std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    std::vector<std::string> fields;
    for (std::string w; f >> w;) fields.push_back(w);
    out.push_back(fields);
  }
  EXPECT_FALSE(out.empty()) << name;
  return out;
}

const unsigned char* U(const std::string& s) { return reinterpret_cast<const unsigned char*>(s.data()); }
uint64_t N(const std::string& s) { return std::stoull(s); }
int64_t I(const std::string& s) { return std::stoll(s); }

}  // namespace

TEST(Core, BinaryRequests) {
  for (const auto& c : Cases("binary_request.txt")) {
    if (c[0] == "key") {
      unsigned char out[CW_BIN_HEADER];
      cw_bin_key_request(out, uint8_t(N(c[1])), N(c[2]), uint32_t(N(c[3])));
      EXPECT_EQ(ToHex(out, sizeof out), c[4]);
      continue;
    }
    if (c[0] == "cas") {
      unsigned char out[CW_BIN_HEADER];
      cw_bin_cas_request(out, uint8_t(N(c[1])), N(c[2]), uint32_t(N(c[3])), N(c[4]));
      EXPECT_EQ(ToHex(out, sizeof out), c[5]);
      continue;
    }
    unsigned char out[CW_BIN_ADD_HEAD];
    cw_bin_add_head(out, N(c[0]), uint32_t(N(c[1])), uint32_t(N(c[2])), uint32_t(N(c[3])), uint32_t(N(c[4])));
    EXPECT_EQ(ToHex(out, sizeof out), c[5]) << c[0];
  }
}

TEST(Core, StoreLines) {
  for (const auto& c : Cases("store_lines.txt")) {
    if (c[0] == "ms") {
      const std::string tok = FromHex(c[1]);
      const cw_ms m = {tok.data(), tok.size(), int(N(c[2])), N(c[3]), N(c[4]), uint32_t(N(c[5])), int(N(c[6])),
                       int(N(c[7])), N(c[8])};
      char out[CW_RECORD_MAX_LINE];
      const size_t n = cw_ms_line(out, &m);
      EXPECT_EQ(ToHex(out, n), c[9]) << c[1];
      EXPECT_EQ(cw_ms_line_len(&m), n) << c[1];
    } else if (c[0] == "add") {
      const std::string key = FromHex(c[1]);
      char out[CW_RECORD_MAX_LINE];
      const size_t n = cw_add_line(out, key.data(), key.size(), uint32_t(N(c[2])), N(c[3]), N(c[4]));
      EXPECT_EQ(ToHex(out, n), c[5]) << c[1];
      EXPECT_EQ(cw_add_line_len(key.size(), uint32_t(N(c[2])), N(c[3]), N(c[4])), n) << c[1];
    } else {
      unsigned char out[CW_BIN_ADD_HEAD];
      cw_bin_store_head(out, uint8_t(N(c[1])), N(c[2]), uint32_t(N(c[3])), uint32_t(N(c[4])), uint32_t(N(c[5])),
                        uint32_t(N(c[6])));
      EXPECT_EQ(ToHex(out, sizeof out), c[7]) << c[1] << " " << c[2];
    }
  }
}

TEST(Core, BinaryReplies) {
  for (const auto& c : Cases("binary_reply.txt")) {
    const std::string b = FromHex(c[0]);
    cw_bin_reply r;
    const int res = cw_bin_reply_parse(U(b), b.size(), &r);
    ASSERT_EQ(res, std::stoi(c[1])) << c[0];
    if (res != 1) continue;
    EXPECT_EQ(r.opcode, N(c[2]));
    EXPECT_EQ(r.status, N(c[3]));
    EXPECT_EQ(r.body_len, N(c[4]));
    EXPECT_EQ(r.opaque, N(c[5]));
    EXPECT_EQ(r.cas, N(c[6]));
    EXPECT_EQ(cw_bin_add_outcome(r.status), std::stoi(c[7]));
  }
}

TEST(Core, BinaryStatusTexts) {
  for (const auto& c : Cases("binary_status.txt")) {
    std::string got = cw_bin_status_text(uint16_t(N(c[0])));
    for (char& ch : got)
      if (ch == ' ') ch = '_';
    EXPECT_EQ(got, c[1]) << c[0];
  }
}

TEST(Core, KeyTokens) {
  for (const auto& c : Cases("key_token.txt")) {
    const std::string k = FromHex(c[0]);
    char out[CW_MAX_KEY];
    int kind = -1;
    const size_t n = cw_key_token(out, U(k), k.size(), &kind);
    EXPECT_EQ(kind, std::stoi(c[1])) << c[0];
    EXPECT_EQ(ToHex(out, n), c[2]) << c[0];
  }
}

TEST(Core, MetaLines) {
  for (const auto& c : Cases("meta_lines.txt")) {
    const std::string k = FromHex(c[1]);
    char out[CW_MAX_META_LINE];
    if (c[0] == "look") {
      EXPECT_EQ(ToHex(out, cw_mg_look_line(out, U(k), k.size(), N(c[2]))), c[3]) << c[1];
    } else if (c[0] == "mg") {
      const bool tagged = c[3] != "-";
      const size_t n = cw_mg_line(out, U(k), k.size(), FromHex(c[2]).c_str(), tagged, tagged ? N(c[3]) : 0);
      EXPECT_EQ(ToHex(out, n), c[4]) << c[1];
    } else {
      EXPECT_EQ(ToHex(out, cw_md_cas_line(out, U(k), k.size(), N(c[2]), N(c[3]))), c[4]) << c[1];
    }
  }
}

TEST(Core, MetaReplies) {
  for (const auto& c : Cases("meta_reply.txt")) {
    const std::string line = FromHex(c[0]);
    cw_meta_reply r;
    const int res = cw_meta_reply_parse(line.data(), line.size(), &r);
    ASSERT_EQ(res, std::stoi(c[1])) << line;
    if (res != 0) continue;
    EXPECT_EQ(std::string(r.code), c[2] == "-" ? "" : c[2]) << line;
    auto check = [&](int has, auto value, const std::string& want) {
      EXPECT_EQ(bool(has), want != "-") << line;
      if (has && want != "-") {
        EXPECT_EQ(std::to_string(value), want) << line;
      }
    };
    check(r.has_cas, r.cas, c[3]);
    check(r.has_ttl, r.ttl, c[4]);
    check(r.has_size, r.size, c[5]);
    check(r.has_opaque, r.opaque, c[6]);
    check(r.has_flags, r.flags, c[7]);
    EXPECT_EQ(r.value_len, N(c[8])) << line;
  }
}

TEST(Core, SourceVerdicts) {
  for (const auto& c : Cases("source_verdict.txt")) {
    const cw_read r{N(c[0]), I(c[1]), I(c[2])};
    const cw_source_now s{int(N(c[3])), N(c[4]), I(c[5]), I(c[6]), I(c[7])};
    EXPECT_EQ(cw_source_verdict(&r, &s), std::stoi(c[8])) << c[0] << " " << c[1] << " -> " << c[4] << " " << c[5];
  }
}

TEST(Core, DeleteOutcomes) {
  for (const auto& c : Cases("md_outcome.txt")) {
    if (c[0] == "-") {
      EXPECT_EQ(cw_md_outcome(nullptr), std::stoi(c[1]));
      continue;
    }
    const std::string line = FromHex(c[0]);
    cw_meta_reply r;
    ASSERT_EQ(cw_meta_reply_parse(line.data(), line.size(), &r), 0);
    EXPECT_EQ(cw_md_outcome(&r), std::stoi(c[1])) << line;
  }
}

TEST(Core, CompareVerdicts) {
  for (const auto& c : Cases("compare.txt")) {
    const std::string sv = FromHex(c[3]), dv = FromHex(c[8]);
    const cw_item s{int(N(c[0])), 0, uint32_t(N(c[1])), I(c[2]), U(sv), sv.size()};
    const cw_item d{int(N(c[4])), N(c[5]), uint32_t(N(c[6])), I(c[7]), U(dv), dv.size()};
    EXPECT_EQ(cw_compare_verdict(&s, &d, N(c[9]), int(N(c[10])), int(N(c[11])), I(c[12])), std::stoi(c[13]))
        << c[0] << " " << c[3] << " / " << c[8];
  }
}

TEST(Core, Records) {
  for (const auto& c : Cases("record_v2.txt")) {
    if (c[0] == "parse") {
      const std::string data = FromHex(c[3]);
      cw_record r;
      unsigned char keybuf[CW_MAX_KEY];
      char why[CW_RECORD_WHY];
      const int got = cw_record_parse(U(data), 0, data.size(), c[2] == "1", &r, keybuf, why);
      if (c[4] == "bad") {
        std::string want;
        for (size_t i = 5; i < c.size(); i++) want += (i > 5 ? " " : "") + c[i];
        ASSERT_EQ(got, -1) << c[1];
        EXPECT_EQ(std::string(why), want) << c[1];
        continue;
      }
      ASSERT_EQ(got, 0) << c[1] << ": " << why;
      EXPECT_EQ(ToHex(r.key, r.key_len), c[5]) << c[1];
      EXPECT_EQ(r.flags, N(c[6])) << c[1];
      EXPECT_EQ(r.expiry, I(c[7])) << c[1];
      EXPECT_EQ(r.value_at, N(c[8])) << c[1];
      EXPECT_EQ(r.value_len, N(c[9])) << c[1];
      EXPECT_EQ(r.next, N(c[10])) << c[1];
      EXPECT_EQ(r.binary, int(N(c[11]))) << c[1];
      EXPECT_EQ(r.source_cas, N(c[12])) << c[1];
      EXPECT_EQ(r.source_exp, I(c[13])) << c[1];
    } else if (c[0] == "line") {
      const std::string key = FromHex(c[1]);
      char out[CW_RECORD_MAX_LINE];
      const size_t n = cw_record_meta_line(out, U(key), key.size(), uint32_t(N(c[2])), uint32_t(N(c[3])),
                                           uint32_t(N(c[4])), N(c[5]));
      EXPECT_EQ(ToHex(out, n), c[6]) << c[1];
    } else if (c[0] == "binhead") {
      unsigned char out[CW_BIN_ADD_HEAD];
      cw_record_binary_head(out, N(c[1]), uint32_t(N(c[2])), uint32_t(N(c[3])), uint32_t(N(c[4])));
      EXPECT_EQ(ToHex(out, sizeof out), c[5]);
    } else {
      unsigned char out[CW_RECORD_STAMP];
      cw_record_stamp(out, N(c[1]), I(c[2]));
      EXPECT_EQ(ToHex(out, sizeof out), c[3]);
    }
  }
}

TEST(Core, ReadStampsRoundTrip) {
  for (const cw_read r : {cw_read{0, CW_NEVER, -1}, cw_read{UINT64_MAX, INT64_MAX, 0}, cw_read{42, 1795000000, 1}}) {
    unsigned char b[CW_READ_STAMP];
    cw_read_pack(b, &r);
    cw_read back;
    cw_read_unpack(b, &back);
    EXPECT_EQ(back.source_cas, r.source_cas);
    EXPECT_EQ(back.source_exp, r.source_exp);
    EXPECT_EQ(back.value_len, r.value_len);
  }
}

namespace {

// Decimal digits at every length and both sides of each power of ten, against the C library.
TEST(CoreDecimal, EveryLengthAgainstSnprintf) {
  std::vector<uint64_t> vs = {0, UINT64_MAX, UINT64_MAX - 1, 1234567890123456789ULL};
  for (uint64_t p = 1; p <= UINT64_MAX / 10; p *= 10)
    for (uint64_t v : {p - 1, p, p + 1, 10 * p - 1, 5 * p, 3 * p + 7}) vs.push_back(v);
  for (uint64_t v : vs) {
    char want[32], got[32] = {};
    const int n = std::snprintf(want, sizeof want, "%llu", static_cast<unsigned long long>(v));
    ASSERT_EQ(cw_u64_len(v), size_t(n)) << v;
    ASSERT_EQ(cw_put_u64(got, v), size_t(n)) << v;
    ASSERT_EQ(std::string(got, size_t(n)), want) << v;
  }
}

}  // namespace
