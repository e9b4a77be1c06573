// Data format v2 records (docs/data-format.md section 7): the writer's encoding, the reader's check 4,
// the receive stream emitting v2 records (every split point, large values streamed) and the data file
// writer/reader round trip.
#include <gtest/gtest.h>

#include <random>

#include "codec.h"
#include "data_file.h"
#include "record_v2.h"
#include "response_stream.h"
#include "testutil.h"

namespace cachewarm {
namespace {

constexpr int64_t kNow = 1800000000;

std::string Line(const std::string& key, uint32_t vlen, uint32_t flags, int64_t exptime, uint64_t offset) {
  char buf[kMaxMetaLineV2];
  return std::string(buf, EncodeMetaLineV2(buf, key, vlen, flags, exptime, offset));
}

std::string Record(const std::string& key, uint32_t flags, int64_t exptime, const std::string& value,
                   uint64_t offset) {
  if (NeedsBinaryRecord(key)) {
    char head[kBinaryHeadV2];
    EncodeBinaryHeadV2(head, key.size(), uint32_t(value.size()), flags, exptime);
    return std::string(head, sizeof head) + key + value;
  }
  return Line(key, uint32_t(value.size()), flags, exptime, offset) + value + "\r\n";
}

Status Parse(const std::string& data, size_t pos, RecordV2* r) {
  size_t next = 0;
  Status s = ParseRecordV2(data.data(), pos, data.size(), r, &next);
  if (s.ok() && next != data.size()) return Status::Corruption("trailing bytes");
  return s;
}

TEST(RecordV2, MetaLinesAreTheCommands) {
  EXPECT_EQ(Line("user:1", 5, 0, kNeverExpires, 58), "ms user:1 5 T0 F0 ME q O58\r\n");
  EXPECT_EQ(Line("k", 0, 4294967295u, kNow, 0), "ms k 0 T1799999999 F4294967295 ME q O0\r\n");
  EXPECT_EQ(Line(std::string("\x00\xff", 2), 1, 7, kNow + 10, 123), "ms AP8= 1 b T1800000009 F7 ME q O123\r\n");
  EXPECT_EQ(ExpiryToSend(kNeverExpires), 0);
  EXPECT_EQ(ExptimeOf(ExpiryToSend(kNow)), kNow);
  EXPECT_TRUE(NeedsBinaryRecord(std::string(187, '\x01')));
  EXPECT_FALSE(NeedsBinaryRecord(std::string(186, '\x01')));
  EXPECT_FALSE(NeedsBinaryRecord(std::string(250, 'k')));
  // v2 cannot say an expiry that memcached would read as relative, nor one that reads back as "never".
  EXPECT_FALSE(CheckRecordV2("k", 1).ok());
  EXPECT_FALSE(CheckRecordV2("k", 3600).ok());
  EXPECT_FALSE(CheckRecordV2("k", (int64_t(1) << 31) + 1).ok());  // T past int32
  EXPECT_TRUE(CheckRecordV2("k", int64_t(1) << 31).ok());
  EXPECT_TRUE(CheckRecordV2("k", kNeverExpires).ok());
}

TEST(RecordV2, EveryKindRoundTrips) {
  const std::vector<std::tuple<std::string, uint32_t, int64_t, std::string>> recs = {
      {"plain", 0, kNeverExpires, "hello"},
      {"empty", 9, kNow, ""},
      {std::string("\x00" "bin\xff key\r\n", 12), 4294967295u, kNow + 5, "VA 1\r\nMN\r\n"},
      {std::string(250, 'k'), 1, kNeverExpires, "x"},
      {std::string(186, '\x01'), 2, kNow, "longest base64 key"},
      {std::string(187, '\x01'), 3, kNow + 7, "shortest binary record"},
      {std::string(250, '\xfe'), 4, kNeverExpires, std::string(3000, 'v')},
  };
  for (const auto& [key, flags, exptime, value] : recs) {
    const std::string rec = Record(key, flags, exptime, value, 0);
    RecordV2 r;
    Status s = Parse(rec, 0, &r);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(r.key, key);
    EXPECT_EQ(r.flags, flags);
    EXPECT_EQ(r.exptime, exptime);
    EXPECT_EQ(r.value.ToString(), value);
    EXPECT_EQ(r.binary, key.size() >= 187 && !IsPlainKey(key));
  }
}

TEST(RecordV2, CheckFourRefusesAnythingElse) {
  std::string b64;
  Base64Encode("plain", &b64);
  char head[kBinaryHeadV2];
  EncodeBinaryHeadV2(head, 200, 1, 0, kNeverExpires);
  const std::string bin(head, sizeof head);
  for (const std::string& bad : {
           std::string("ms k 1 T0 F0 ME q O1\r\nv\r\n"),       // O is not the offset
           std::string("ms k 01 T0 F0 ME q O0\r\nv\r\n"),      // leading zero
           std::string("ms k 1 T0 F0 MS q O0\r\nv\r\n"),       // another mode
           std::string("ms k 1 T0 F0 I ME q O0\r\nv\r\n"),     // another flag
           std::string("mg k v\r\n"),                          // another command
           std::string("ms k 1 T3600 F0 ME q O0\r\nv\r\n"),    // a relative T
           std::string("ms k 1 T0 F4294967296 ME q O0\r\nv\r\n"),
           std::string("ms k 1 T0 F0 ME q O0\r\nvv\r\n"),      // value longer than said
           std::string("ms k 5 T0 F0 ME q O0\r\nv\r\n"),       // runs past the records
           "ms " + b64 + " 1 b T0 F0 ME q O0\r\nv\r\n",       // a plain key as base64
           std::string("ms AB== 1 b T0 F0 ME q O0\r\nv\r\n"),  // non-canonical base64
           std::string("xs k 1 T0 F0 ME q O0\r\nv\r\n"),
           bin + std::string(200, 'k') + "v",                  // a printable key in a binary record
           bin + std::string(200, '\x01'),                     // body runs past the records
           bin.substr(0, 20),
       }) {
    RecordV2 r;
    EXPECT_FALSE(Parse(bad, 0, &r).ok()) << bad;
  }
}

// A sink that appends like a data file whose records start at `base`.
class FileSink : public RecordSink {
 public:
  explicit FileSink(uint64_t base) : base_(base) {}
  Status Write(const struct iovec* iov, int n, uint64_t records) override {
    for (int i = 0; i < n; i++) bytes.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    this->records += records;
    return Status::OK();
  }
  Status OnBatchEnd(uint64_t, uint64_t) override { return Status::OK(); }
  uint64_t NextRecordOffset() override { return base_ + bytes.size(); }
  std::string bytes;
  uint64_t records = 0;

 private:
  uint64_t base_;
};

std::string Respond(const std::string& key, uint32_t flags, int64_t ttl, const std::string& value) {
  std::string k = key, b;
  if (!IsPlainKey(key)) {
    Base64Encode(key, &k);
    b = " b";
  }
  return "VA " + std::to_string(value.size()) + " f" + std::to_string(flags) + " t" + std::to_string(ttl) + " k" + k +
         b + "\r\n" + value + "\r\n";
}

TEST(RecordV2, TheReceiveStreamWritesV2RecordsAtEverySplit) {
  std::mt19937 rng(3);
  struct R {
    std::string key;
    uint32_t flags;
    int64_t ttl;
    std::string value;
  };
  std::vector<R> recs = {{"plain", 0, -1, "hello"},
                         {std::string("\x00" "bin\xff", 5), 7, 100, "VA 5\r\nMN\r\n"},
                         {"big", 1, 50, std::string(20000, 'x')},  // larger than the buffer: streamed
                         {"empty", 2, 0, ""},
                         {std::string(186, '\x02'), 3, -1, "b64"}};
  std::string wire, want;
  const uint64_t base = 58;
  for (const R& r : recs) {
    wire += Respond(r.key, r.flags, r.ttl, r.value);
    want += Record(r.key, r.flags, r.ttl == -1 ? kNeverExpires : kNow + r.ttl, r.value, base + want.size());
  }
  wire += "MN\r\n";
  for (size_t cut = 1; cut <= wire.size(); cut += 7) {
    ResponseStream rs(8192, 0, kFormatVersion2);
    rs.set_now(kNow);
    FileSink sink(base);
    size_t pos = 0, calls = 0;
    while (pos < wire.size()) {
      size_t n = std::min({calls++ == 0 ? cut : size_t(1 + rng() % 9000), wire.size() - pos, rs.WritableBytes()});
      std::memcpy(rs.WritePtr(), wire.data() + pos, n);
      pos += n;
      Status s = rs.Commit(n, &sink);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    ASSERT_EQ(sink.bytes, want) << "split at " << cut;
    EXPECT_EQ(sink.records, recs.size());
    EXPECT_TRUE(rs.AtBoundary());
  }
}

// The worker names each value's key by its opaque (no `k`): a key of 187..250 bytes with no base64
// form that a raw-key `mg` fetched (codec.h IsTextKey) gets the binary ADDQ record such keys always
// got — head, key, value, no \r\n — at every split, streamed (larger than the buffer) or not; the
// meta records around it keep their own offsets.
class NamingSink : public FileSink {
 public:
  NamingSink(uint64_t base, std::vector<std::string> keys) : FileSink(base), keys_(std::move(keys)) {}
  Status OnValue(const MetaResponse& r, Slice* key) override {
    if (!r.has_opaque || r.opaque >= keys_.size()) return Status::Protocol("bad opaque");
    *key = Slice(keys_[r.opaque]);
    return Status::OK();
  }

 private:
  std::vector<std::string> keys_;
};

TEST(RecordV2, RawKeyFetchesOfLongKeysAreBinaryRecordsAtEverySplit) {
  std::mt19937 rng(5);
  std::string text(200, '\xff');
  text[0] = '\r';
  text[100] = ':';
  text[199] = '\t';
  ASSERT_TRUE(IsTextKey(text) && NeedsBinaryRecord(text));
  struct R {
    std::string key;
    uint32_t flags;
    int64_t ttl;
    std::string value;
  };
  const std::vector<R> recs = {{"plain", 0, -1, "hello"},
                               {text, 7, 100, "VA 5\r\nMN\r\n"},
                               {std::string(250, '\x80'), 1, 50, std::string(20000, 'x')},  // streamed
                               {"after", 2, 0, ""},
                               {std::string(187, '\x01'), 3, -1, ""},
                               {std::string(186, '\x02'), 4, -1, "b64"}};
  std::vector<std::string> keys;
  std::string wire, want;
  const uint64_t base = 58;
  for (size_t i = 0; i < recs.size(); i++) {
    const R& r = recs[i];
    keys.push_back(r.key);
    wire += "VA " + std::to_string(r.value.size()) + " f" + std::to_string(r.flags) + " t" + std::to_string(r.ttl) +
            " O" + std::to_string(i) + "\r\n" + r.value + "\r\n";
    want += Record(r.key, r.flags, r.ttl == -1 ? kNeverExpires : kNow + r.ttl, r.value, base + want.size());
  }
  wire += "MN\r\n";
  for (size_t cut = 1; cut <= wire.size(); cut += 5) {
    ResponseStream rs(8192, 0, kFormatVersion2);
    rs.set_now(kNow);
    NamingSink sink(base, keys);
    size_t pos = 0, calls = 0;
    while (pos < wire.size()) {
      size_t n = std::min({calls++ == 0 ? cut : size_t(1 + rng() % 9000), wire.size() - pos, rs.WritableBytes()});
      std::memcpy(rs.WritePtr(), wire.data() + pos, n);
      pos += n;
      Status s = rs.Commit(n, &sink);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    ASSERT_EQ(sink.bytes, want) << "split at " << cut;
    EXPECT_EQ(sink.records, recs.size());
    EXPECT_TRUE(rs.AtBoundary());
    // Every record reads back with its key (check 4 of the reader; the records start at `base`).
    const std::string file = std::string(base, '\0') + sink.bytes;
    size_t at = base;
    for (const R& r : recs) {
      RecordV2 got;
      size_t next = 0;
      Status s = ParseRecordV2(file.data(), at, file.size(), &got, &next);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(got.key, r.key);
      EXPECT_EQ(got.binary, NeedsBinaryRecord(r.key));
      at = next;
    }
  }
}

TEST(RecordV2, DataFilesRoundTrip) {
  TempDir t;
  DataFileWriter w(Env::Default(), t.path(), "n1", 1, kFormatVersion2);
  ASSERT_TRUE(w.Open(3, 1, 10).ok());
  const std::vector<DataRecord> recs = {{"a", 1, kNeverExpires, "x"},
                                        {std::string(200, '\x03'), 2, kNow, "binary record"},
                                        {std::string("\r\n", 2), 3, kNow + 1, ""}};
  for (const DataRecord& r : recs) ASSERT_TRUE(w.AddRecord(r.key, r.flags, r.exptime, r.value).ok());
  EXPECT_FALSE(w.AddRecord("k", 0, 5, "v").ok());  // no v2 form
  PublishedFile pf;
  ASSERT_TRUE(w.Finish(13, 0, &pf).ok());
  PublishedFile info;
  std::vector<DataRecord> got;
  Status s = ReadDataFile(Env::Default(), t.path(), pf.name, true, &info, &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(info.version, kFormatVersion2);
  ASSERT_EQ(got.size(), recs.size());
  for (size_t i = 0; i < recs.size(); i++) {
    EXPECT_EQ(got[i].key, recs[i].key);
    EXPECT_EQ(got[i].flags, recs[i].flags);
    EXPECT_EQ(got[i].exptime, recs[i].exptime);
    EXPECT_EQ(got[i].value, recs[i].value);
  }
}


// Version 3 (docs/data-format.md section 8): every record behind its source stamp — the `c` the
// worker asked for, and the expiry on the source's clock (the records' plus the whole seconds the
// worker took off) — a meta line's O naming the stamp's offset, at every split, streamed or not.
TEST(RecordV3, StampsFromTheResponsesAtEverySplit) {
  std::mt19937 rng(9);
  struct R {
    std::string key;
    uint32_t flags;
    int64_t ttl;
    uint64_t cas;
    std::string value;
  };
  const std::vector<R> recs = {{"plain", 0, -1, 7, "hello"},
                               {std::string("\x00" "bin\xff", 5), 7, 100, 18446744073709551615ULL, "VA 5\r\nMN\r\n"},
                               {"big", 1, 50, 9, std::string(20000, 'x')},  // streamed
                               {std::string(200, '\x80'), 2, 10, 11, "binary record"},
                               {"no-cas", 3, -1, 0, ""}};
  std::vector<std::string> keys;
  std::string wire;
  for (size_t i = 0; i < recs.size(); i++) {
    const R& r = recs[i];
    keys.push_back(r.key);
    wire += "VA " + std::to_string(r.value.size()) + " f" + std::to_string(r.flags) + " t" + std::to_string(r.ttl) +
            (r.cas ? " c" + std::to_string(r.cas) : std::string()) + " O" + std::to_string(i) + "\r\n" + r.value +
            "\r\n";
  }
  wire += "MN\r\n";
  const uint64_t base = 58;
  const int64_t ahead = 3;  // the source's clock is ~3 s ahead of this host's
  for (size_t cut = 1; cut <= wire.size(); cut += 11) {
    ResponseStream rs(8192, 0, kFormatVersion3);
    rs.set_window(kNow + ahead, kNow + ahead, ahead);  // the source's time, moved back by `ahead`
    NamingSink sink(base, keys);
    size_t pos = 0, calls = 0;
    while (pos < wire.size()) {
      size_t n = std::min({calls++ == 0 ? cut : size_t(1 + rng() % 9000), wire.size() - pos, rs.WritableBytes()});
      std::memcpy(rs.WritePtr(), wire.data() + pos, n);
      pos += n;
      Status s = rs.Commit(n, &sink);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    EXPECT_EQ(sink.records, recs.size());
    const std::string file = std::string(base, '\0') + sink.bytes;
    size_t at = base;
    for (const R& r : recs) {
      RecordV2 got;
      size_t next = 0;
      Status s = ParseRecordV3(file.data(), at, file.size(), &got, &next);
      ASSERT_TRUE(s.ok()) << s.ToString() << " split at " << cut;
      EXPECT_EQ(got.key, r.key);
      EXPECT_EQ(got.value.ToString(), r.value);
      EXPECT_EQ(got.stamp.cas, r.cas);
      EXPECT_EQ(got.exptime, r.ttl == -1 ? kNeverExpires : kNow + r.ttl);
      EXPECT_EQ(got.stamp.exp, r.ttl == -1 ? kNeverExpires : kNow + r.ttl + ahead);
      // Not a version 2 record: the stamp comes first.
      EXPECT_FALSE(ParseRecordV2(file.data(), at, file.size(), &got, &next).ok());
      ASSERT_TRUE(ParseRecordV3(file.data(), at, file.size(), &got, &next).ok());
      at = next;
    }
    EXPECT_EQ(at, file.size());
  }
}

// The stamp's expiry is the record's on the source's own clock: one expiry (the listing's own exp when
// the `mg t` agrees with it, else the window's floor plus `mg t`), stamped as it is and moved back by
// the whole seconds the source is ahead for the record. Both follow the same clock rule.
TEST(RecordV3, StampsAreOnTheSourcesClock) {
  ResponseStream rs(8192, 0, kFormatVersion3);
  // The source's clock 5 s ahead (its time between kNow + 5 and kNow + 6 when the values ran).
  rs.set_window(kNow + 5, kNow + 6, 5);
  const std::string wire = "VA 1 f0 t100 c7 kl\r\nx\r\nVA 1 f0 t90 c8 km\r\ny\r\nMN\r\n";
  // The first value's listing agrees with its `mg t` (the server's time kNow + 6): its own exp is
  // stamped, and the window's floor rises to kNow + 6.
  class Listing : public FileSink {
   public:
    Listing() : FileSink(58) {}
    ResponseStream* rs = nullptr;
    int n = 0;
    Status OnValue(const MetaResponse&, Slice*) override {
      if (n++ == 0) rs->set_listed(kNow + 106);
      return Status::OK();
    }
  } listing;
  listing.rs = &rs;
  std::memcpy(rs.WritePtr(), wire.data(), wire.size());
  ASSERT_TRUE(rs.Commit(wire.size(), &listing).ok());
  const std::string file = std::string(58, '\0') + listing.bytes;
  RecordV2 a, b;
  size_t next = 0, end = 0;
  ASSERT_TRUE(ParseRecordV3(file.data(), 58, file.size(), &a, &next).ok());
  ASSERT_TRUE(ParseRecordV3(file.data(), next, file.size(), &b, &end).ok());
  EXPECT_EQ(a.stamp.exp, kNow + 106);  // the listing's, on the source's clock
  EXPECT_EQ(a.exptime, kNow + 101);
  EXPECT_EQ(b.stamp.exp, kNow + 96);  // the raised floor plus mg t
  EXPECT_EQ(b.exptime, kNow + 91);
  EXPECT_EQ(rs.floor(), kNow + 6);
}

TEST(RecordV3, DataFilesRoundTripAndBadStampsAreCorrupt) {
  TempDir t;
  DataFileWriter w(Env::Default(), t.path(), "n1", 1, kFormatVersion3);
  ASSERT_TRUE(w.Open(3, 1, 10).ok());
  const std::vector<DataRecord> recs = {{"a", 1, kNeverExpires, "x", 5, kNeverExpires},
                                        {std::string(200, '\x03'), 2, kNow, "binary record", 6, kNow + 2},
                                        {std::string("\r\n", 2), 3, kNow + 1, "", 0, kNow + 1}};
  for (const DataRecord& r : recs)
    ASSERT_TRUE(w.AddRecord(r.key, r.flags, r.exptime, r.value, SourceStamp{r.source_cas, r.source_exp}).ok());
  EXPECT_FALSE(w.AddRecord("k", 0, kNow, "v", SourceStamp{1, 0}).ok());  // source_exp 0 is invalid
  PublishedFile pf;
  ASSERT_TRUE(w.Finish(13, 0, &pf).ok());
  PublishedFile info;
  std::vector<DataRecord> got;
  Status s = ReadDataFile(Env::Default(), t.path(), pf.name, true, &info, &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(info.version, kFormatVersion3);
  ASSERT_EQ(got.size(), recs.size());
  for (size_t i = 0; i < recs.size(); i++) {
    EXPECT_EQ(got[i].key, recs[i].key);
    EXPECT_EQ(got[i].value, recs[i].value);
    EXPECT_EQ(got[i].exptime, recs[i].exptime);
    EXPECT_EQ(got[i].source_cas, recs[i].source_cas);
    EXPECT_EQ(got[i].source_exp, recs[i].source_exp);
  }
  // A stamp whose source_exp is 0, or a meta line whose O names the line instead of the stamp.
  std::string rec(16, '\0');
  rec += "ms k 1 T0 F0 ME q O0\r\nv\r\n";
  RecordV2 r;
  size_t next = 0;
  EXPECT_NE(ParseRecordV3(rec.data(), 0, rec.size(), &r, &next).message().find("source_exp 0"), std::string::npos);
  rec[8] = char(0xff);
  for (int i = 9; i < 16; i++) rec[i] = char(0xff);  // -1: never
  ASSERT_TRUE(ParseRecordV3(rec.data(), 0, rec.size(), &r, &next).ok());
  std::string wrong_o(16, '\xff');
  wrong_o += "ms k 1 T0 F0 ME q O16\r\nv\r\n";
  EXPECT_FALSE(ParseRecordV3(wrong_o.data(), 0, wrong_o.size(), &r, &next).ok());
}

}  // namespace
}  // namespace cachewarm
