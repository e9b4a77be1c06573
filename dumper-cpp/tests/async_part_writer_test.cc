// AsyncPartWriter: the source's clock given before a part is opened lands in that part's header,
// even while the writer thread is still busy with earlier parts (the worker sets it from its own
// thread; the inner file writer reads it on the writer thread when it opens the part). Without the
// forwarding every header said "clock not known" (an old dumper's files).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "async_part_writer.h"
#include "coding.h"
#include "data_file.h"
#include "fault_env.h"
#include "format.h"
#include "record_v2.h"
#include "testutil.h"

namespace cachewarm {
namespace {

struct Header {
  bool clock_known = false;
  int32_t clock_ms = 0;
};

Header ReadHeader(const std::string& path) {
  std::string data;
  Status s = Env::Default()->ReadFileToString(path, &data);
  EXPECT_TRUE(s.ok()) << s.ToString();
  Header h;
  if (data.size() < kHeaderFixed) {
    ADD_FAILURE() << path << ": shorter than a header";
    return h;
  }
  h.clock_known = (DecodeFixed16(&data[42]) & kHeaderClockKnown) != 0;
  h.clock_ms = int32_t(DecodeFixed32(&data[44]));
  return h;
}

// One small record in the file's version (v2 records name their own offset).
Status AppendRecord(PartWriter* w, uint16_t version, const std::string& key, const std::string& value) {
  if (version == kFormatVersion2) {
    char line[kMaxMetaLineV2];
    const size_t n = EncodeMetaLineV2(line, key, uint32_t(value.size()), 7, kNeverExpires, w->file_bytes());
    const std::string v = value + "\r\n";
    struct iovec iov[2] = {{line, n}, {const_cast<char*>(v.data()), v.size()}};
    return w->AppendRaw(iov, 2, 1);
  }
  char hdr[kRecordHeaderSize];
  EncodeRecordHeader(hdr, uint32_t(value.size()), 7, kNeverExpires, uint8_t(key.size()));
  struct iovec iov[3] = {{hdr, sizeof hdr},
                         {const_cast<char*>(key.data()), key.size()},
                         {const_cast<char*>(value.data()), value.size()}};
  return w->AppendRaw(iov, 3, 1);
}

class AsyncPartWriterClock : public ::testing::TestWithParam<uint16_t> {};

TEST_P(AsyncPartWriterClock, ClockSetBeforeOpenLandsInThatPartsHeader) {
  const uint16_t version = GetParam();
  TempDir t;
  Faults f;
  f.max_write = 7;  // a slow disk: the writer thread is still at earlier parts when the clock changes
  FaultEnv env(&f);
  Status error;
  std::unique_ptr<PartWriter> w =
      NewAsyncFilePartWriter(&env, t.path(), "node_1", 1795000000000ULL, version, [&](const Status& s) { error = s; });
  std::vector<PublishedFile> published;
  auto keep = [&](const PublishedFile& pf) { published.push_back(pf); };
  const std::string big(20000, 'v');  // many short writes queued ahead of the next part

  w->SetSourceClock(-412, 0);
  ASSERT_TRUE(w->Open(0, 0, 0).ok());
  ASSERT_TRUE(AppendRecord(w.get(), version, "k0", big).ok());
  ASSERT_TRUE(w->FinishThen(1, 0, nullptr, keep).ok());

  w->SetSourceClock(1500, 0);  // before part 1 opens, with part 0 still queued
  ASSERT_TRUE(w->Open(0, 1, 1).ok());
  ASSERT_TRUE(AppendRecord(w.get(), version, "k1", big).ok());
  w->SetSourceClock(-2000000, 0);  // while part 1 is open: for the parts opened after it
  ASSERT_TRUE(AppendRecord(w.get(), version, "k2", "x").ok());
  ASSERT_TRUE(w->FinishThen(3, 0, nullptr, keep).ok());

  ASSERT_TRUE(w->Open(0, 2, 3).ok());
  ASSERT_TRUE(AppendRecord(w.get(), version, "k3", "y").ok());
  ASSERT_TRUE(w->FinishThen(4, 0, nullptr, keep).ok());

  w->SetSourceClock(int64_t(INT32_MAX) + 1, 0);  // no 32-bit form: the header says "not known"
  ASSERT_TRUE(w->Open(0, 3, 4).ok());
  ASSERT_TRUE(w->FinishThen(4, 0, nullptr, keep).ok());
  w->Abandon();  // waits for everything queued
  ASSERT_TRUE(error.ok()) << error.ToString();
  EXPECT_GT(f.write_calls.load(), 1000);

  ASSERT_EQ(published.size(), 4u);
  const int32_t want[] = {-412, 1500, -2000000};
  for (size_t i = 0; i < 3; i++) {
    EXPECT_EQ(published[i].part, uint32_t(i));
    const Header h = ReadHeader(t.path() + "/" + published[i].name);
    EXPECT_TRUE(h.clock_known) << "part " << i;
    EXPECT_EQ(h.clock_ms, want[i]) << "part " << i;
    PublishedFile info;
    std::vector<DataRecord> recs;
    Status s = ReadDataFile(Env::Default(), t.path(), published[i].name, true, &info, &recs);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  const Header last = ReadHeader(t.path() + "/" + published[3].name);
  EXPECT_FALSE(last.clock_known);
  EXPECT_EQ(last.clock_ms, 0);
}

TEST_P(AsyncPartWriterClock, NoClockGivenSaysNotKnown) {
  TempDir t;
  std::unique_ptr<PartWriter> w =
      NewAsyncFilePartWriter(Env::Default(), t.path(), "node_1", 1795000000000ULL, GetParam(), nullptr);
  std::vector<PublishedFile> published;
  ASSERT_TRUE(w->Open(0, 0, 0).ok());
  ASSERT_TRUE(AppendRecord(w.get(), GetParam(), "k", "v").ok());
  ASSERT_TRUE(w->FinishThen(1, 0, nullptr, [&](const PublishedFile& pf) { published.push_back(pf); }).ok());
  w->Abandon();
  ASSERT_EQ(published.size(), 1u);
  EXPECT_FALSE(ReadHeader(t.path() + "/" + published[0].name).clock_known);
}

INSTANTIATE_TEST_SUITE_P(Versions, AsyncPartWriterClock, ::testing::Values(kFormatVersion, kFormatVersion2),
                         [](const ::testing::TestParamInfo<uint16_t>& i) { return "v" + std::to_string(i.param); });

}  // namespace
}  // namespace cachewarm
