// The data-file writer, atomic publish and the verifying reader, on a real and a faulty disk.
#include <gtest/gtest.h>

#include <random>

#include "data_file.h"
#include "fault_env.h"
#include "manifest.h"
#include "testutil.h"

namespace cachewarm {
namespace {

std::vector<DataRecord> SampleRecords(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<DataRecord> v;
  for (int i = 0; i < n; i++) {
    DataRecord r;
    r.key.resize(1 + rng() % 250);
    for (char& c : r.key) c = char(rng());
    r.value.resize(rng() % 5000);
    for (char& c : r.value) c = char(rng());
    r.flags = uint32_t(rng());
    r.exptime = (i % 3 == 0) ? -1 : int64_t(1700000000 + rng() % 1000000);
    v.push_back(r);
  }
  return v;
}

Status WriteFile(Env* env, const std::string& dir, const std::vector<DataRecord>& recs, PublishedFile* pf) {
  DataFileWriter w(env, dir, "node_1", 1795000000000ULL);
  CW_RETURN_IF_ERROR(w.Open(3, 2, 100));
  for (const DataRecord& r : recs) CW_RETURN_IF_ERROR(w.AddRecord(r.key, r.flags, r.exptime, r.value));
  return w.Finish(100 + recs.size() + 5, 5, pf);
}

std::vector<std::string> Children(const std::string& dir) {
  std::vector<std::string> v;
  Env::Default()->GetChildren(dir, &v);
  std::sort(v.begin(), v.end());
  return v;
}

TEST(DataFile, NamesRoundTrip) {
  const std::string n = DataFileName("10.0.1.7_11211", 12, 3, 0x1a2b3c4d5e6f7081ULL);
  EXPECT_EQ(n, "10.0.1.7_11211-00000012-0003-1a2b3c4d5e6f7081.cwd");
  ParsedName p;
  ASSERT_TRUE(ParseDataFileName(n, &p));
  EXPECT_EQ(p.node, "10.0.1.7_11211");
  EXPECT_EQ(p.chunk, 12u);
  EXPECT_EQ(p.part, 3u);
  EXPECT_EQ(p.xxh3, 0x1a2b3c4d5e6f7081ULL);
  for (const char* bad : {"x-00000012-0003-1a2b3c4d5e6f7081.cw", "-00000012-0003-1a2b3c4d5e6f7081.cwd",
                          "a-b-00000012-0003-1a2b3c4d5e6f7081.cwd", "x-0000001-0003-1a2b3c4d5e6f7081.cwd",
                          "x-00000012-0003-1A2B3C4D5E6F7081.cwd", ".tmp-x-00000012-0003", "DONE"})
    EXPECT_FALSE(ParseDataFileName(bad, &p)) << bad;
  EXPECT_TRUE(ValidNodeId("a.b_C9"));
  EXPECT_FALSE(ValidNodeId("a-b"));
  EXPECT_FALSE(ValidNodeId(std::string(65, 'a')));
  EXPECT_FALSE(ValidNodeId(""));
}

TEST(DataFile, WriteThenReadVerifies) {
  TempDir t;
  auto recs = SampleRecords(200, 1);
  PublishedFile pf;
  ASSERT_TRUE(WriteFile(Env::Default(), t.path(), recs, &pf).ok());
  EXPECT_EQ(Children(t.path()), std::vector<std::string>{pf.name});
  PublishedFile info;
  std::vector<DataRecord> got;
  Status s = ReadDataFile(Env::Default(), t.path(), pf.name, true, &info, &got);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(info.records, 200u);
  EXPECT_EQ(info.misses, 5u);
  EXPECT_EQ(info.first_key_index, 100u);
  EXPECT_EQ(info.end_key_index, 305u);
  ASSERT_EQ(got.size(), recs.size());
  for (size_t i = 0; i < got.size(); i++) {
    EXPECT_EQ(got[i].key, recs[i].key);
    EXPECT_EQ(got[i].value, recs[i].value);
    EXPECT_EQ(got[i].flags, recs[i].flags);
    EXPECT_EQ(got[i].exptime, recs[i].exptime);
  }
}

TEST(DataFile, ShortWritesProduceIdenticalBytes) {
  TempDir a, b;
  auto recs = SampleRecords(50, 2);
  PublishedFile pa, pb;
  ASSERT_TRUE(WriteFile(Env::Default(), a.path(), recs, &pa).ok());
  Faults f;
  f.max_write = 7;  // every writev is cut short
  FaultEnv env(&f);
  Status s = WriteFile(&env, b.path(), recs, &pb);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(f.write_calls.load(), 1000);
  EXPECT_EQ(pa.name, pb.name);  // same checksum => same bytes
  std::string x, y;
  Env::Default()->ReadFileToString(a.path() + "/" + pa.name, &x);
  Env::Default()->ReadFileToString(b.path() + "/" + pb.name, &y);
  EXPECT_EQ(x, y);
}

TEST(DataFile, EioPublishesNothingAndLeavesNoTemp) {
  for (long long after : {0LL, 10LL, 48LL, 5000LL, 20000LL}) {
    TempDir t;
    Faults f;
    f.eio_after_bytes = after;
    f.max_write = 1000;
    FaultEnv env(&f);
    PublishedFile pf;
    Status s = WriteFile(&env, t.path(), SampleRecords(30, 3), &pf);
    EXPECT_FALSE(s.ok()) << after;
    EXPECT_NE(s.ToString().find("Input/output error"), std::string::npos) << s.ToString();
    EXPECT_TRUE(Children(t.path()).empty()) << "after " << after;
  }
}

TEST(DataFile, FailingSyncRenameOrDirSyncPublishNothingUnverifiable) {
  for (int which = 0; which < 3; which++) {
    TempDir t;
    Faults f;
    f.fail_sync = which == 0;
    f.fail_rename = which == 1;
    f.fail_sync_dir = which == 2;
    FaultEnv env(&f);
    PublishedFile pf;
    Status s = WriteFile(&env, t.path(), SampleRecords(5, 4), &pf);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.ToString().find("injected"), std::string::npos);
    // A failed dir fsync happens after the rename: the renamed file is complete and verifies.
    for (const std::string& n : Children(t.path())) {
      EXPECT_EQ(which, 2) << n;
      EXPECT_TRUE(ReadDataFile(Env::Default(), t.path(), n, true, nullptr, nullptr).ok());
    }
  }
}

TEST(DataFile, ReaderRejectsDamage) {
  TempDir t;
  PublishedFile pf;
  ASSERT_TRUE(WriteFile(Env::Default(), t.path(), SampleRecords(10, 5), &pf).ok());
  std::string bytes;
  Env::Default()->ReadFileToString(t.path() + "/" + pf.name, &bytes);
  auto check = [&](const std::string& data) {
    TempDir d;
    WriteFileAtomically(Env::Default(), d.path(), ".tmp", pf.name, data);
    return ReadDataFile(Env::Default(), d.path(), pf.name, true, nullptr, nullptr);
  };
  EXPECT_TRUE(check(bytes).ok());
  EXPECT_FALSE(check(bytes.substr(0, bytes.size() - 1)).ok());  // truncated
  EXPECT_FALSE(check(bytes.substr(0, 60)).ok());
  std::string flipped = bytes;
  flipped[100] ^= 1;
  Status s = check(flipped);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("checksum"), std::string::npos);
  std::string zero_tail = bytes;
  for (size_t i = bytes.size() - 40; i < bytes.size(); i++) zero_tail[i] = 0;
  EXPECT_FALSE(check(zero_tail).ok());
}

TEST(DataFile, WriterRejectsBadKeys) {
  TempDir t;
  DataFileWriter w(Env::Default(), t.path(), "n", 1);
  ASSERT_TRUE(w.Open(0, 0, 0).ok());
  EXPECT_FALSE(w.AddRecord("", 0, -1, "v").ok());
  EXPECT_FALSE(w.AddRecord(std::string(251, 'k'), 0, -1, "v").ok());
  w.Abandon();
  EXPECT_TRUE(Children(t.path()).empty());
}

TEST(Manifest, ListsFilesSortedWithTotals) {
  Manifest m;
  m.node = "n";
  m.host = "h\"x";
  PublishedFile a, b;
  a.name = "n-00000001-0000-0000000000000001.cwd";
  a.chunk = 1;
  a.records = 3;
  a.bytes = 100;
  b.name = "n-00000000-0001-0000000000000002.cwd";
  b.part = 1;
  b.records = 4;
  b.misses = 2;
  b.bytes = 50;
  m.files = {a, b};
  const std::string j = RenderManifest(m);
  EXPECT_LT(j.find(b.name), j.find(a.name));
  EXPECT_NE(j.find("\"records\": 7, \"bytes\": 150"), std::string::npos) << j;
  EXPECT_NE(j.find("\"misses\": 2, \"skipped_min_ttl\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"host\": \"h\\\"x\""), std::string::npos) << j;
}

TEST(Manifest, TheClockSaysAnUnsettledCeilingOnlyWhenItIsOne) {
  Manifest m;
  m.source_clock_known = true;
  m.source_ceiling = true;
  EXPECT_EQ(RenderManifest(m).find("ceiling_unsettled_ms"), std::string::npos);
  m.source_ceiling_unsettled = true;
  EXPECT_NE(RenderManifest(m).find("\"ceiling\": true, \"ceiling_unsettled_ms\": 1000,"), std::string::npos)
      << RenderManifest(m);
}

}  // namespace
}  // namespace cachewarm
