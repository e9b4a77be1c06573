// CLI validation: every out-of-range flag is named in the error.
#include <gtest/gtest.h>

#include "crawl_stream.h"
#include "options.h"

namespace cachewarm {
namespace {

Status Parse(std::vector<std::string> args, Options* o) {
  args.insert(args.begin(), "cachewarm-dump");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(&a[0]);
  argv.push_back(nullptr);
  return ParseOptions(int(args.size()), argv.data(), o);
}

TEST(Options, DefaultsAndNodeId) {
  Options o;
  ASSERT_TRUE(Parse({"--out", "/x", "--host", "10.0.1.7", "--port", "11311"}, &o).ok());
  EXPECT_EQ(o.node_id, "10.0.1.7_11311");
  EXPECT_EQ(o.threads, 2);
  Options h;
  ASSERT_TRUE(Parse({"--out", "/x", "--host", "my-host:x"}, &h).ok());
  EXPECT_EQ(h.node_id, "my_host_x_11211");
}

TEST(Options, FormatWithTheStreamMode) {
  Options o;
  ASSERT_TRUE(Parse({"--out", "/x", "--to", "127.0.0.1:11211", "--format", "1"}, &o).ok());
  EXPECT_EQ(o.format, 1);
  Options d;
  ASSERT_TRUE(Parse({"--out", "/x", "--to", "127.0.0.1:11211"}, &d).ok());
  EXPECT_EQ(d.format, 0);  // the dump's own: version 1 in the stream mode (checkpoint.cc)
}

TEST(Options, SizesWithSuffixes) {
  Options o;
  ASSERT_TRUE(Parse({"--out=/x", "--buffer-size", "1M", "--key-file-size", "64k", "--data-file-size", "2G",
                     "--memory-limit", "1g", "--threads", "8", "--batch", "100", "--min-ttl", "60",
                     "--max-items-per-second", "5000", "--resume", "--node-id", "n.1"},
                    &o).ok());
  EXPECT_EQ(o.buffer_size, 1u << 20);
  EXPECT_EQ(o.key_file_size, 64u << 10);
  EXPECT_EQ(o.data_file_size, 2ULL << 30);
  EXPECT_EQ(o.memory_limit, 1ULL << 30);
  EXPECT_TRUE(o.resume);
  EXPECT_EQ(o.min_ttl, 60);
  EXPECT_EQ(o.max_items_per_second, 5000u);
  uint64_t v;
  EXPECT_FALSE(ParseSize("", &v));
  EXPECT_FALSE(ParseSize("1x", &v));
  EXPECT_FALSE(ParseSize("-1", &v));
  EXPECT_FALSE(ParseSize("99999999999999999999", &v));
  EXPECT_FALSE(ParseSize("99999999999T", &v));
}

TEST(Options, ErrorsNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string msg;
  } cases[] = {
      {{"--out", "/x", "--threads", "0"}, "--threads 0 is out of range 1..256"},
      {{"--out", "/x", "--threads", "300"}, "--threads 300 is out of range"},
      {{"--out", "/x", "--threads", "2x"}, "--threads: '2x' is not an integer"},
      {{"--out", "/x", "--port", "0"}, "--port 0 is out of range 1..65535"},
      {{"--out", "/x", "--buffer-size", "100"}, "--buffer-size 100 is out of range"},
      {{"--out", "/x", "--buffer-size", "lots"}, "--buffer-size: 'lots' is not a size"},
      {{"--out", "/x", "--key-file-size", "1"}, "--key-file-size 1 is out of range"},
      {{"--out", "/x", "--data-file-size", "2T"}, "--data-file-size 2T is out of range"},
      {{"--out", "/x", "--batch", "100001"}, "--batch 100001 is out of range"},
      {{"--out", "/x", "--min-ttl", "-5"}, "--min-ttl -5 is out of range"},
      {{"--out", "/x", "--max-items-per-second", "-1"}, "--max-items-per-second -1 is out of range"},
      {{"--out", "/x", "--node-id", "a/b"}, "--node-id 'a/b' must match"},
      {{"--out", "/x", "--progress-interval", "0"}, "--progress-interval 0 is out of range"},
      {{"--out", "/x", "--nope"}, "unknown option --nope"},
      {{"--out", "/x", "--port"}, "--port needs a value"},
      {{"--out", "/x", "extra"}, "unexpected argument 'extra'"},
      {{"--threads", "2"}, "--out DIR is required"},
      {{"--out", "/x", "--memory-limit", "32M", "--buffer-size", "8M"}, "--memory-limit 33554432 is too small"},
      {{"--out", "/x", "--format", "4"}, "--format 4 is out of range 1..3"},
      // The stream mode's sink takes version 1 records; it writes no data files.
      {{"--out", "/x", "--to", "127.0.0.1:11211", "--format", "2"}, "--format 2 is for data files"},
  };
  for (const Case& c : cases) {
    Options o;
    Status s = Parse(c.args, &o);
    ASSERT_FALSE(s.ok()) << c.msg;
    EXPECT_NE(s.message().find(c.msg), std::string::npos) << s.message();
  }
}

// The crawl reader's buffer: 64M by default, less when --memory-limit leaves less, refused below 1M.
TEST(Options, CrawlBufferAndBusyFlags) {
  Options d;
  ASSERT_TRUE(Parse({"--out", "/x"}, &d).ok());
  EXPECT_EQ(d.crawl_buffer, kDefaultCrawlBuffer);
  EXPECT_EQ(d.crawl_busy_timeout_s, 60);
  EXPECT_FALSE(d.spill_dir.empty());
  EXPECT_LE(PlannedMemory(d), d.memory_limit);
  Options small;
  ASSERT_TRUE(Parse({"--out", "/x", "--memory-limit", "48M"}, &small).ok());
  EXPECT_LT(small.crawl_buffer, kDefaultCrawlBuffer);
  EXPECT_GE(small.crawl_buffer, kMinCrawlBuffer);
  EXPECT_LE(PlannedMemory(small), small.memory_limit);
  Options o;
  ASSERT_TRUE(Parse({"--out", "/x", "--crawl-buffer", "8M", "--crawl-busy-timeout", "2.5", "--spill-dir", "/s",
                     "--debug-write-delay-us", "10", "--debug-sync-delay-us", "20000"},
                    &o)
                  .ok());
  EXPECT_EQ(o.crawl_buffer, 8u << 20);
  EXPECT_EQ(o.crawl_busy_timeout_s, 2.5);
  EXPECT_EQ(o.spill_dir, "/s");
  EXPECT_EQ(o.debug_write_delay_us, 10u);
  EXPECT_EQ(o.debug_sync_delay_us, 20000u);
  Options bad;
  Status s = Parse({"--out", "/x", "--crawl-buffer", "512k"}, &bad);
  EXPECT_NE(s.message().find("--crawl-buffer 512k is out of range"), std::string::npos) << s.ToString();
  s = Parse({"--out", "/x", "--crawl-buffer", "300M"}, &bad);
  EXPECT_NE(s.message().find("--memory-limit 268435456 is too small"), std::string::npos) << s.ToString();
  s = Parse({"--out", "/x", "--crawl-busy-timeout", "-1"}, &bad);
  EXPECT_NE(s.message().find("--crawl-busy-timeout -1 is out of range"), std::string::npos) << s.ToString();
}

TEST(Options, MemoryPlanCountsEveryBuffer) {
  Options o;
  o.threads = 4;
  o.buffer_size = 8 << 20;
  o.key_file_size = 1 << 20;
  o.batch = 1000;
  o.crawl_buffer = 32 << 20;
  const uint64_t need = PlannedMemory(o);
  EXPECT_GE(need, 4ULL * 2 * (8 << 20) + (32 << 20));
  EXPECT_LE(need, 4ULL * 2 * (8 << 20) + 4 * 2 * (1 << 20) + (2 + kKeyChunksInFlight) * (1 << 20) +
                      4 * 1000 * (kSendBytesPerKey + 16) + 4 * kBinaryRecvBytes + (32 << 20) + 2 * kCrawlStreamPiece +
                      kFixedOverhead + kRecencyMemory + 4ULL * kAsyncWriteBuffers * kAsyncWritePiece);
  Options help;
  ASSERT_TRUE(Parse({"--help"}, &help).ok());
  EXPECT_TRUE(help.help);
}

TEST(Options, VersionNeedsNoOut) {
  Options o;
  ASSERT_TRUE(Parse({"--version"}, &o).ok());
  EXPECT_TRUE(o.version);
}

}  // namespace
}  // namespace cachewarm
