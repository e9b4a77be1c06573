// The meta-protocol header parser and the receive stream, with adversarial values and split reads.
#include <gtest/gtest.h>

#include <random>

#include "codec.h"
#include "coding.h"
#include "meta_parser.h"
#include "response_stream.h"

namespace cachewarm {
namespace {

ParseResult P(const std::string& s, MetaResponse* r, std::string* err) { return ParseMetaHeader(s.data(), s.size(), r, err); }

TEST(MetaParser, ValueLineWithFlags) {
  MetaResponse r;
  std::string err;
  const std::string line = "VA 12 f4294967295 t-1 kuser:1 O99 c7\r\nhello world!\r\n";
  ASSERT_EQ(P(line, &r, &err), ParseResult::kOk) << err;
  EXPECT_EQ(r.type, MetaResponse::kValue);
  EXPECT_EQ(r.value_len, 12u);
  EXPECT_EQ(r.flags, 4294967295u);
  EXPECT_EQ(r.ttl, -1);
  EXPECT_EQ(line.substr(r.key_offset, r.key_len), "user:1");
  EXPECT_EQ(r.header_len, line.find("\r\n") + 2);
  EXPECT_FALSE(r.key_base64);
  ASSERT_EQ(P("VA 0 f0 t30 kAGJpbg== b\r\n\r\n", &r, &err), ParseResult::kOk);
  EXPECT_TRUE(r.key_base64);
  EXPECT_EQ(r.ttl, 30);
}

TEST(MetaParser, OtherResponses) {
  MetaResponse r;
  std::string err;
  ASSERT_EQ(P("MN\r\n", &r, &err), ParseResult::kOk);
  EXPECT_EQ(r.type, MetaResponse::kNoop);
  ASSERT_EQ(P("EN\r\n", &r, &err), ParseResult::kOk);
  EXPECT_EQ(r.type, MetaResponse::kMiss);
  ASSERT_EQ(P("HD f1\r\n", &r, &err), ParseResult::kOk);
  EXPECT_EQ(r.type, MetaResponse::kHit);
  ASSERT_EQ(P("SERVER_ERROR out of memory\r\n", &r, &err), ParseResult::kOk);
  EXPECT_EQ(r.type, MetaResponse::kServerError);
  EXPECT_EQ(r.message, "SERVER_ERROR out of memory");
  ASSERT_EQ(P("CLIENT_ERROR bad data chunk\r\n", &r, &err), ParseResult::kOk);
  EXPECT_EQ(r.type, MetaResponse::kClientError);
  ASSERT_EQ(P("ERROR\r\n", &r, &err), ParseResult::kOk);
  EXPECT_EQ(r.type, MetaResponse::kError);
  ASSERT_EQ(P("VALUE x 0 1\r\n", &r, &err), ParseResult::kOk);
  EXPECT_EQ(r.type, MetaResponse::kOther);
  ASSERT_EQ(P("MNX\r\n", &r, &err), ParseResult::kOk);
  EXPECT_EQ(r.type, MetaResponse::kOther);
}

// A worker's look at the source's clock: a `stats` reply's lines; only its time is read.
TEST(MetaParser, StatsReplyLines) {
  MetaResponse r;
  std::string err;
  ASSERT_EQ(P("STAT time 1795961393\r\n", &r, &err), ParseResult::kOk) << err;
  EXPECT_EQ(r.type, MetaResponse::kStat);
  EXPECT_TRUE(r.has_time);
  EXPECT_EQ(r.time, 1795961393);
  ASSERT_EQ(P("STAT uptime 12\r\n", &r, &err), ParseResult::kOk);
  EXPECT_EQ(r.type, MetaResponse::kStat);
  EXPECT_FALSE(r.has_time);
  ASSERT_EQ(P("STAT time_in_listen_disabled_us 0\r\n", &r, &err), ParseResult::kOk);
  EXPECT_FALSE(r.has_time);
  ASSERT_EQ(P("END\r\n", &r, &err), ParseResult::kOk);
  EXPECT_EQ(r.type, MetaResponse::kEnd);
  for (const char* bad : {"STAT time x\r\n", "STAT time -5\r\n", "STAT time 0\r\n", "STAT time 99999999999999999999\r\n"})
    EXPECT_EQ(P(bad, &r, &err), ParseResult::kBad) << bad;
}

TEST(MetaParser, IncompleteAndBadLines) {
  MetaResponse r;
  std::string err;
  for (const char* part : {"", "V", "VA 1", "VA 12 f1 t-1 kabc", "VA 12 f1 t-1 kabc\r", "MN\r"})
    EXPECT_EQ(P(part, &r, &err), ParseResult::kNeedMore) << part;
  for (const char* bad : {"VA x f1\r\n", "VA 4294967296 f1\r\n", "VA 1 f4294967296 t1 ka\r\n", "VA 1 fx\r\n",
                          "VA 1 t-2 ka\r\n", "VA 1 tz ka\r\n", "VA 1 f1 t1 k\r\n", "MN\n", "\n", "VA\r\n",
                          "VA -1 f1\r\n", "VA 99999999999999999999999 f1\r\n"})
    EXPECT_EQ(P(bad, &r, &err), ParseResult::kBad) << bad;
  EXPECT_EQ(P(std::string(kMaxHeaderLine, 'A'), &r, &err), ParseResult::kBad);
  EXPECT_NE(err.find("longer than"), std::string::npos);
}

// The numbers of a VA line at their limits: 20 digits, wrap-around, signs and stray bytes.
TEST(MetaParser, FlagNumbersAtTheirLimits) {
  MetaResponse r;
  std::string err;
  ASSERT_EQ(P("VA 1 c18446744073709551615 t-0 f0 O00012\r\n", &r, &err), ParseResult::kOk) << err;
  EXPECT_EQ(r.cas, UINT64_MAX);
  EXPECT_EQ(r.ttl, 0);
  EXPECT_EQ(r.opaque, 12u);
  ASSERT_EQ(P("VA 1 t9223372036854775807 Ox1 c1\r\n", &r, &err), ParseResult::kOk) << err;
  EXPECT_EQ(r.ttl, INT64_MAX);
  EXPECT_FALSE(r.has_opaque);
  EXPECT_EQ(r.cas, 1u);
  ASSERT_EQ(P("VA 1 O18446744073709551616 f7\r\n", &r, &err), ParseResult::kOk) << err;
  EXPECT_FALSE(r.has_opaque);
  EXPECT_EQ(r.flags, 7u);
  for (const char* bad : {"VA 1 c18446744073709551616\r\n", "VA 1 c99999999999999999999\r\n",
                          "VA 1 c184467440737095516150\r\n", "VA 1 t9223372036854775808\r\n", "VA 1 t-\r\n",
                          "VA 1 t--1\r\n", "VA 1 f12x\r\n", "VA 1 f\r\n", "VA 1 c\r\n", "VA 1 c1-\r\n"})
    EXPECT_EQ(P(bad, &r, &err), ParseResult::kBad) << bad;
}

// --- ResponseStream ---------------------------------------------------------------------------

struct Rec {
  std::string key;
  uint32_t flags;
  int64_t ttl;
  std::string value;
};

class CaptureSink : public RecordSink {
 public:
  Status Write(const struct iovec* iov, int n, uint64_t records) override {
    for (int i = 0; i < n; i++) bytes.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    this->records += records;
    writes++;
    return Status::OK();
  }
  Status OnBatchEnd(uint64_t hits, uint64_t skipped) override {
    batches.push_back({hits, skipped});
    return Status::OK();
  }
  std::string bytes;
  uint64_t records = 0;
  int writes = 0;
  std::vector<std::pair<uint64_t, uint64_t>> batches;
};

std::string Respond(const Rec& r) {
  std::string key = r.key, b;
  if (!IsPlainKey(key)) {
    Base64Encode(r.key, &key);
    b = " b";
  }
  return "VA " + std::to_string(r.value.size()) + " f" + std::to_string(r.flags) + " t" + std::to_string(r.ttl) +
         " k" + key + b + "\r\n" + r.value + "\r\n";
}

std::string Expected(const std::vector<Rec>& recs, int64_t now, int64_t min_ttl) {
  std::string o;
  for (const Rec& r : recs) {
    if (min_ttl > 0 && r.ttl != -1 && r.ttl < min_ttl) continue;
    char h[kRecordHeaderSize];
    EncodeRecordHeader(h, uint32_t(r.value.size()), r.flags, r.ttl == -1 ? -1 : now + r.ttl, uint8_t(r.key.size()));
    o.append(h, sizeof h);
    o += r.key;
    o += r.value;
  }
  return o;
}

// Feeds `wire` into the stream in pieces chosen by `next_piece`.
template <typename F>
Status Feed(ResponseStream* rs, const std::string& wire, CaptureSink* sink, F next_piece) {
  size_t pos = 0;
  while (pos < wire.size()) {
    size_t n = std::min({next_piece(), wire.size() - pos, rs->WritableBytes()});
    if (n == 0) n = 1;
    if (rs->WritableBytes() == 0) return Status::Protocol("stream buffer full");
    std::memcpy(rs->WritePtr(), wire.data() + pos, n);
    pos += n;
    CW_RETURN_IF_ERROR(rs->Commit(n, sink));
  }
  return Status::OK();
}

std::vector<Rec> Adversarial() {
  return {
      {"plain", 0, -1, "hello"},
      {"empty", 7, 100, ""},
      {"proto", 1, -1, "VA 5 f0 t-1 kx\r\nEN\r\nMN\r\nVALUE x 0 1\r\nEND\r\nSERVER_ERROR no\r\n"},
      {"crlf-only", 2, 5, "\r\n\r\n"},
      {std::string("\x00" "bin\xff key", 9), 4294967295u, 3600, std::string("\x00\xff", 2)},
      {std::string(250, 'k'), 9, -1, "long key"},
      {std::string(186, '\x01'), 10, 1, "longest binary key"},
  };
}

TEST(ResponseStream, EverySplitPointGivesTheSameRecords) {
  const auto recs = Adversarial();
  std::string wire;
  for (const Rec& r : recs) wire += Respond(r);
  wire += "MN\r\n";
  const std::string want = Expected(recs, 1000, 0);
  for (size_t cut = 0; cut <= wire.size(); cut++) {
    ResponseStream rs(8192, 0);
    rs.set_now(1000);
    CaptureSink sink;
    size_t calls = 0;
    Status s = Feed(&rs, wire, &sink, [&] { return calls++ == 0 ? (cut ? cut : 1) : wire.size(); });
    ASSERT_TRUE(s.ok()) << cut << ": " << s.ToString();
    ASSERT_EQ(sink.bytes, want) << "split at " << cut;
    ASSERT_EQ(sink.batches.size(), 1u);
    EXPECT_EQ(sink.batches[0].first, recs.size());
    EXPECT_TRUE(rs.AtBoundary());
  }
}

TEST(ResponseStream, RandomPiecesLargeValuesStreamedAndMinTtl) {
  std::mt19937 rng(7);
  std::vector<Rec> recs;
  std::string wire;
  int in_batch = 0;
  std::vector<std::pair<uint64_t, uint64_t>> want_batches;
  uint64_t hits = 0, skipped = 0;
  for (int i = 0; i < 600; i++) {
    Rec r;
    r.key = "key" + std::to_string(i);
    if (i % 17 == 0) r.key += std::string(1, char(0x80 + i % 100));  // needs base64
    const int kind = int(rng() % 10);
    r.value.resize(kind == 0 ? 20000 + rng() % 30000 : kind == 1 ? 8000 + rng() % 300 : rng() % 300);
    for (char& c : r.value) c = "VAEN\r\n MNx"[rng() % 10];
    r.flags = uint32_t(rng());
    r.ttl = (i % 3 == 0) ? -1 : int64_t(rng() % 200);
    recs.push_back(r);
    wire += Respond(r);
    hits++;
    if (r.ttl != -1 && r.ttl < 50) skipped++;
    if (++in_batch == 37 || i == 599) {
      wire += "MN\r\n";
      want_batches.push_back({hits, skipped});
      hits = skipped = in_batch = 0;
    }
  }
  for (int trial = 0; trial < 20; trial++) {
    ResponseStream rs(8192, 50);
    rs.set_now(5000);
    CaptureSink sink;
    Status s = Feed(&rs, wire, &sink, [&] { return size_t(1 + rng() % (trial < 10 ? 64 : 20000)); });
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(sink.bytes, Expected(recs, 5000, 50));
    ASSERT_EQ(sink.batches, want_batches);
    EXPECT_TRUE(rs.AtBoundary());
  }
}

TEST(ResponseStream, ManyRecordsPerReadAreBatchedIntoFewWrites) {
  std::string wire;
  std::vector<Rec> recs;
  for (int i = 0; i < 1000; i++) {
    recs.push_back({"k" + std::to_string(i), 0, -1, std::string(100, 'v')});
    wire += Respond(recs.back());
  }
  wire += "MN\r\n";
  ResponseStream rs(1 << 20, 0);
  CaptureSink sink;
  ASSERT_TRUE(Feed(&rs, wire, &sink, [&] { return wire.size(); }).ok());
  EXPECT_EQ(sink.records, 1000u);
  EXPECT_LE(sink.writes, 4 + 1000 / 256);  // iovecs of up to 256 records per writev
  EXPECT_EQ(sink.bytes, Expected(recs, 0, 0));
}

Status FeedAll(const std::string& wire, size_t buffer = 8192) {
  ResponseStream rs(buffer, 0);
  CaptureSink sink;
  return Feed(&rs, wire, &sink, [&] { return size_t(3); });
}

TEST(ResponseStream, ErrorsAreLoud) {
  const std::string ok = Respond({"a", 0, -1, "x"});
  Status s = FeedAll(ok + "SERVER_ERROR out of memory storing object\r\n");
  EXPECT_EQ(s.code(), Status::kServer);
  EXPECT_NE(s.message().find("SERVER_ERROR out of memory"), std::string::npos);
  EXPECT_EQ(FeedAll("CLIENT_ERROR bad command line format\r\n").code(), Status::kServer);
  EXPECT_EQ(FeedAll("ERROR\r\n").code(), Status::kServer);
  EXPECT_EQ(FeedAll("HD\r\n").code(), Status::kProtocol);
  EXPECT_EQ(FeedAll("VALUE a 0 1\r\nx\r\nEND\r\n").code(), Status::kProtocol);
  EXPECT_EQ(FeedAll("VA 1 f0 t-1 ka\r\nxx\r\n").code(), Status::kProtocol);  // value longer than declared
  EXPECT_EQ(FeedAll("VA 1 f0 ka\r\nx\r\n").code(), Status::kProtocol);       // no TTL
  EXPECT_EQ(FeedAll("VA 1 f0 t-1 k!!!! b\r\nx\r\n").code(), Status::kProtocol);  // bad base64
  EXPECT_EQ(FeedAll("VA 100000 f0 t-1 ka\r\n" + std::string(100000, 'x') + "\r\r").code(), Status::kProtocol);
  EXPECT_EQ(FeedAll(std::string(5000, 'x')).code(), Status::kProtocol);
  // An "EN" (miss without q) is fine and counts nothing.
  EXPECT_TRUE(FeedAll("EN\r\nMN\r\n").ok());
}

// The bytes a meta command's key token carries raw (measured on 1.6.18, 1.6.38, 1.6.45:
// tests/dumper/test_text_keys.py): all but space, '\n' and NUL.
TEST(Codec, TextKeys) {
  for (int b = 0; b < 256; b++) {
    const std::string k = "a" + std::string(1, char(b)) + "z";
    EXPECT_EQ(IsTextKey(k), b != ' ' && b != '\n' && b != 0) << b;
  }
  EXPECT_TRUE(IsTextKey(std::string(250, '\xff')));
  EXPECT_TRUE(IsTextKey("\r\t:/"));
  EXPECT_FALSE(IsTextKey(std::string("\r\n", 2)));
}

TEST(Codec, Base64AndUrl) {
  std::string e;
  for (const std::string& in : {std::string(""), std::string("a"), std::string("ab"), std::string("abc"),
                                std::string("\x00\xff\x10 ", 4), std::string(186, '\xee')}) {
    Base64Encode(in, &e);
    std::string d = e;
    long n = Base64DecodeInPlace(d.data(), d.size(), d.data());
    ASSERT_EQ(n, long(in.size()));
    EXPECT_EQ(d.substr(0, size_t(n)), in);
  }
  EXPECT_EQ(Base64DecodeInPlace("abc", 3, nullptr), -1);
  char bad[] = "ab=c";
  EXPECT_EQ(Base64DecodeInPlace(bad, 4, bad), -1);
  std::string out;
  ASSERT_TRUE(UrlDecode("a%20b%2Fc%00%FF", &out));
  EXPECT_EQ(out, std::string("a b/c\x00\xff", 7));
  EXPECT_FALSE(UrlDecode("%2", &out));
  EXPECT_FALSE(UrlDecode("%zz", &out));
  EXPECT_FALSE(UrlDecode("abc%", &out));
  EXPECT_EQ(UrlEncode(std::string("a b\x00", 4)), "a%20b%00");
  EXPECT_TRUE(IsPlainKey("abc:~!"));
  EXPECT_FALSE(IsPlainKey("a b"));
  EXPECT_FALSE(IsPlainKey("\x7f"));
}


// An `mg t` counts from the source's time when the mg ran, at least the window's floor (a time the
// server already showed) and at most its top (its clock's ceiling at the receipt). The listing's exp
// (set_listed, per value) that puts that time inside the window is the exact one; outside it (the TTL
// changed since the listing: a touch) the floor's, never later.
class ListingSink : public CaptureSink {
 public:
  Status OnValue(const MetaResponse&, Slice*) override {
    rs->set_listed(listed);
    return Status::OK();
  }
  ResponseStream* rs = nullptr;
  int64_t listed = kNeverExpires;
};

TEST(ResponseStream, TheListingsExpWhenTheFetchAgreesElseTheEarliest) {
  const std::vector<Rec> recs = {{"k", 3, 50, "v"}};
  const std::string wire = Respond(recs[0]) + "MN\r\n";
  struct Case {
    int64_t listed, want_now;
  } cases[] = {
      {1051, 1001},          // agrees at the window's late end: exact
      {1050, 1000},          // agrees at its early end
      {1060, 1000},          // touched since the listing: the fetch's, never later
      {1049, 1000},          // shortened since: the fetch's
      {kNeverExpires, 1000}, // listed with no expiry, now one: the fetch's
  };
  for (const Case& c : cases) {
    ResponseStream rs(8192, 0);
    rs.set_window(1000, 1001, 0);
    ListingSink sink;
    sink.rs = &rs;
    sink.listed = c.listed;
    ASSERT_TRUE(Feed(&rs, wire, &sink, [&] { return wire.size(); }).ok());
    EXPECT_EQ(sink.bytes, Expected(recs, c.want_now, 0)) << "listed " << c.listed;
  }
}

// A value whose listing agrees gives the server's time exactly: the floor rises to it, and a later
// value whose TTL changed since its listing (a touch) counts from there, not from the older floor.
// The floor never falls; values are on the source's clock and moved by `ahead` onto the records'.
TEST(ResponseStream, AnAgreeingListingRaisesTheFloorForTheTouchedKeysAfterIt) {
  const std::vector<Rec> recs = {{"a", 1, 50, "v"}, {"b", 2, 30, "w"}, {"c", 3, 40, "x"}};
  std::string wire;
  for (const Rec& r : recs) wire += Respond(r);
  wire += "MN\r\n";
  class Listings : public CaptureSink {
   public:
    Status OnValue(const MetaResponse&, Slice*) override {
      rs->set_listed(listed[n++]);
      return Status::OK();
    }
    ResponseStream* rs = nullptr;
    std::vector<int64_t> listed;
    size_t n = 0;
  };
  ResponseStream rs(8192, 0);
  rs.set_window(1000, 1002, 2);  // the server showed 1000; its ceiling now is 1002; records 2 s back
  Listings sink;
  sink.rs = &rs;
  // a: unchanged, read at 1001 (exact: 1051); b: touched (its listing says 5000); c: listed with no
  // expiry, touched to 40 s since.
  sink.listed = {1051, 5000, kNeverExpires};
  ASSERT_TRUE(Feed(&rs, wire, &sink, [&] { return wire.size(); }).ok());
  EXPECT_EQ(rs.floor(), 1001);
  std::vector<Rec> want = recs;
  want[0].ttl = 1051 - 2;
  want[1].ttl = 1001 + 30 - 2;
  want[2].ttl = 1001 + 40 - 2;
  EXPECT_EQ(sink.bytes, Expected(want, 0, 0));
  uint64_t agreed = 0, above = 0;
  rs.TakeWindowCounts(&agreed, &above);
  EXPECT_EQ(agreed, 1u);
  EXPECT_EQ(above, 1u);  // b's listing puts the time at 4970: past the ceiling
  rs.set_window(990, 1003, 2);  // an older look at the clock never lowers the floor
  EXPECT_EQ(rs.floor(), 1001);
}

// No listing agrees (the keys never expire, or were touched): only the `stats` the worker sends ahead
// of a batch keeps the floor fresh. Its reply writes nothing, and the values after it count their
// `mg t` from the time it shows; a reply showing an older time never lowers the floor.
TEST(ResponseStream, AStatsReplyRaisesTheFloorForTheValuesAfterIt) {
  const std::vector<Rec> recs = {{"a", 1, 30, "v"}, {"b", 2, -1, "w"}};
  const std::string stats = "STAT pid 7\r\nSTAT uptime 99\r\nSTAT time 1008\r\nSTAT version 1.6.45\r\nEND\r\n";
  const std::string wire = stats + Respond(recs[0]) + Respond(recs[1]) + "MN\r\n" +
                           "STAT time 1004\r\nEND\r\n" + Respond(recs[0]) + "MN\r\n";
  for (size_t piece : {size_t(1), size_t(7), wire.size()}) {
    ResponseStream rs(8192, 0);
    rs.set_window(1000, 1010, 2);  // the server showed 1000 when measured; records 2 s back
    CaptureSink sink;
    ASSERT_TRUE(Feed(&rs, wire, &sink, [&] { return piece; }).ok());
    EXPECT_EQ(rs.floor(), 1008);
    EXPECT_TRUE(rs.AtBoundary());
    std::vector<Rec> want = {recs[0], recs[1], recs[0]};
    want[0].ttl = want[2].ttl = 1008 + 30 - 2;
    EXPECT_EQ(sink.bytes, Expected(want, 0, 0)) << "pieces of " << piece;
    ASSERT_EQ(sink.batches.size(), 2u);
    EXPECT_EQ(sink.batches[0].first, 2u);  // the reply is no value of the batch
  }
}

}  // namespace
}  // namespace cachewarm
