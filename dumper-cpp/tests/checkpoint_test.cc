// The checkpoint (what --resume continues from) and the work queue, without a memcached.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "checkpoint.h"
#include "data_file.h"
#include "env.h"
#include "key_chunks.h"
#include "testutil.h"
#include "work_queue.h"

namespace cachewarm {
namespace {

Options TestOptions(const std::string& out) {
  Options o;
  o.out = out;
  o.node_id = "n1";
  return o;
}

// Publishes key list `chunk` with `keys` keys k<chunk>_<i>.
void WriteKeyList(Env* env, const std::string& keys_dir, uint64_t chunk, int keys) {
  std::string s;
  for (int i = 0; i < keys; i++) s += "k" + std::to_string(chunk) + "_" + std::to_string(i) + " -1\n";
  ASSERT_TRUE(WriteFileAtomically(env, keys_dir, ".tmp-x", KeyChunkName(chunk), s).ok());
}

// Publishes part `part` of `chunk` holding keys [first, end) (every one a hit).
void WritePart(Env* env, const Options& o, uint64_t chunk, uint32_t part, uint64_t first, uint64_t end) {
  DataFileWriter w(env, o.out, o.node_id, 1700000000000);
  ASSERT_TRUE(w.Open(chunk, part, first).ok());
  for (uint64_t i = first; i < end; i++) ASSERT_TRUE(w.AddRecord("key" + std::to_string(i), 0, -1, "value").ok());
  ASSERT_TRUE(w.Finish(end, 0, nullptr).ok());
}

TEST(Checkpoint, ScanFindsWhereEachChunkContinues) {
  TempDir t;
  Env* env = Env::Default();
  const Options o = TestOptions(t.path() + "/out");
  Checkpoint cp(o, env);
  ASSERT_TRUE(cp.CreateDirs().ok());
  WriteKeyList(env, cp.keys_dir(), 0, 10);  // done: parts [0,6) [6,10)
  WriteKeyList(env, cp.keys_dir(), 1, 8);   // half done: part [0,5)
  WriteKeyList(env, cp.keys_dir(), 2, 4);   // not started
  WritePart(env, o, 0, 0, 0, 6);
  WritePart(env, o, 0, 1, 6, 10);
  WritePart(env, o, 1, 0, 0, 5);

  Progress p;
  std::vector<ChunkTask> todo;
  ASSERT_TRUE(cp.Scan(&p, &todo).ok());
  EXPECT_EQ(p.keys_listed.load(), 22u);
  EXPECT_EQ(p.files.load(), 3u);
  EXPECT_EQ(p.items.load(), 15u);
  EXPECT_EQ(cp.next_chunk(), 3u);
  ASSERT_EQ(todo.size(), 2u);
  EXPECT_EQ(todo[0].chunk, 1u);
  EXPECT_EQ(todo[0].start_index, 5u);
  EXPECT_EQ(todo[0].next_part, 1u);
  EXPECT_EQ(todo[1].chunk, 2u);
  EXPECT_EQ(todo[1].start_index, 0u);
  EXPECT_EQ(todo[1].next_part, 0u);

  Manifest m;
  ASSERT_TRUE(cp.FillManifest(2, &m).ok());  // chunk 2 came from reconciliation
  EXPECT_EQ(m.files.size(), 3u);
  EXPECT_EQ(m.keys_listed, 22u);
  EXPECT_EQ(m.reconciled_keys, 4u);
}

TEST(Checkpoint, AFreshStartRemovesATemporaryMetaButRefusesAnythingElse) {
  TempDir t;
  Env* env = Env::Default();
  const Options o = TestOptions(t.path() + "/out");
  ServerStats source;
  {
    // Killed while writing its first META: neither a dump to resume nor one to refuse.
    Checkpoint cp(o, env);
    ASSERT_TRUE(cp.CreateDirs().ok());
    std::ofstream(cp.keys_dir() + "/.tmp-META") << "{";
    Status s = cp.Open(source);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_FALSE(env->FileExists(cp.keys_dir() + "/.tmp-META"));
  }
  {
    TempDir t2;
    const Options o2 = TestOptions(t2.path() + "/out");
    Checkpoint cp(o2, env);
    ASSERT_TRUE(cp.CreateDirs().ok());
    WriteKeyList(env, cp.keys_dir(), 0, 3);
    Status s = cp.Open(source);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.ToString().find("is not empty"), std::string::npos) << s.ToString();
  }
}

TEST(Checkpoint, ScanRefusesAGapBetweenParts) {
  TempDir t;
  Env* env = Env::Default();
  const Options o = TestOptions(t.path() + "/out");
  Checkpoint cp(o, env);
  ASSERT_TRUE(cp.CreateDirs().ok());
  WriteKeyList(env, cp.keys_dir(), 0, 10);
  WritePart(env, o, 0, 0, 0, 4);
  WritePart(env, o, 0, 1, 5, 10);
  Progress p;
  std::vector<ChunkTask> todo;
  Status s = cp.Scan(&p, &todo);
  EXPECT_EQ(s.code(), Status::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("not contiguous"), std::string::npos) << s.ToString();
}

TEST(Checkpoint, Markers) {
  TempDir t;
  const Options o = TestOptions(t.path() + "/out");
  Checkpoint cp(o, Env::Default());
  ASSERT_TRUE(cp.CreateDirs().ok());
  uint64_t chunks = 0;
  bool by_hash = true;
  EXPECT_FALSE(cp.ReadCrawled(&chunks, &by_hash));
  CrawlStats first;
  first.modes = {"all"};
  first.fallback = "hash -> all: lru_crawler metadump answered: BADCLASS \"x\"";
  first.busy_retries = 3;
  first.busy_wait_s = 0.7;
  first.duplicates = 5;
  first.peak_buffered = 1000;
  first.spilled = 10;
  ASSERT_TRUE(cp.WriteCrawled(7, 700, false, 1.5, first).ok());
  ASSERT_TRUE(cp.ReadCrawled(&chunks, &by_hash));
  EXPECT_EQ(chunks, 7u);
  EXPECT_FALSE(by_hash);
  EXPECT_FALSE(cp.Reconciled());
  CrawlStats rec;
  rec.modes = {"all"};
  rec.busy_retries = 1;
  rec.spilled = 5;
  rec.peak_buffered = 3000;
  ASSERT_TRUE(cp.WriteReconciled(9, "why not", 4, false, 12, rec).ok());
  EXPECT_TRUE(cp.Reconciled());
  std::string r;
  ASSERT_TRUE(Env::Default()->ReadFileToString(cp.keys_dir() + "/RECONCILED", &r).ok());
  EXPECT_EQ(r.rfind("{\"chunks\": 9, \"skipped\": \"why not\", \"passes\": 4, \"converged\": 0", 0), 0u) << r;
  EXPECT_FALSE(cp.Done());

  // DONE reads both back, whichever run wrote them.
  Manifest m;
  ASSERT_TRUE(cp.FillManifest(7, &m).ok());
  EXPECT_EQ(m.crawl_modes, std::vector<std::string>{"all"});
  EXPECT_EQ(m.crawl_fallback, "hash -> all: lru_crawler metadump answered: BADCLASS 'x'");
  EXPECT_EQ(m.busy_retries, 4u);
  EXPECT_NEAR(m.busy_wait_s, 0.7, 0.002);
  EXPECT_EQ(m.duplicates, 5u);
  EXPECT_EQ(m.crawl_peak_buffered, 3000u);
  EXPECT_EQ(m.crawl_spilled, 15u);
  EXPECT_EQ(m.reconcile_passes, 4);
  EXPECT_FALSE(m.reconcile_converged);
  EXPECT_EQ(m.reconcile_last_new_keys, 12u);
  DecideCompleteness(&m);
  EXPECT_FALSE(m.complete);
  EXPECT_NE(m.incomplete_reason.find("did not converge after 4 passes"), std::string::npos) << m.incomplete_reason;
}

// keys/PARTS explains each published file's misses across a crash; keys/UNDUMPED names keys once.
TEST(Checkpoint, PartStatsSurviveAResume) {
  TempDir t;
  Env* env = Env::Default();
  const Options o = TestOptions(t.path() + "/out");
  {
    Checkpoint cp(o, env);
    ASSERT_TRUE(cp.CreateDirs().ok());
    WriteKeyList(env, cp.keys_dir(), 0, 10);
    DataFileWriter w(env, o.out, o.node_id, 1700000000000);
    ASSERT_TRUE(w.Open(0, 0, 0).ok());
    for (int i = 0; i < 4; i++) ASSERT_TRUE(w.AddRecord("key" + std::to_string(i), 0, -1, "v").ok());
    PartStats ps;
    ps.expired = 2;
    ps.gone = 1;
    ps.skipped_min_ttl = 1;
    ps.undumped = 2;
    ps.binary = 1;
    PublishedFile f;
    ASSERT_TRUE(w.Finish(10, 6, &f, [&](const PublishedFile& pf) {
                   // Recorded before the rename; a crash right after leaves a line for a file that
                   // never appeared, which the scan ignores.
                   EXPECT_FALSE(env->FileExists(o.out + "/" + pf.name));
                   return cp.RecordPart(pf, ps, "k%FFa -1 why\nk%FFb 5 why\n");
                 }).ok());
    // The same key named again (a part redone after a crash): DONE's report names it once.
    ASSERT_TRUE(cp.RecordPart(f, ps, "k%FFa -1 why\n").ok());
  }
  Checkpoint cp(o, env);
  Progress p;
  std::vector<ChunkTask> todo;
  ASSERT_TRUE(cp.Scan(&p, &todo).ok());
  EXPECT_TRUE(todo.empty());
  EXPECT_EQ(p.skipped_min_ttl.load(), 1u);
  Manifest m;
  ASSERT_TRUE(cp.FillManifest(1, &m).ok());
  EXPECT_EQ(m.misses_expired, 2u);
  EXPECT_EQ(m.misses_gone, 1u);
  EXPECT_EQ(m.skipped_min_ttl, 1u);
  EXPECT_EQ(m.undumped, 2u);
  EXPECT_EQ(m.binary_records, 1u);
  EXPECT_EQ(m.undumped_report, "keys/UNDUMPED");
  std::string u;
  ASSERT_TRUE(env->ReadFileToString(cp.keys_dir() + "/UNDUMPED", &u).ok());
  EXPECT_EQ(u, "k%FFa -1 why\nk%FFb 5 why\n");
  DecideCompleteness(&m);
  EXPECT_FALSE(m.complete);
  EXPECT_NE(m.incomplete_reason.find("2 keys could not be dumped (named in keys/UNDUMPED)"), std::string::npos);
}

TEST(WorkQueue, DrainsThenCloses) {
  WorkQueue q;
  q.Push(ChunkTask{3, 0, 0});
  q.Push(ChunkTask{4, 0, 0});
  std::vector<uint64_t> got;
  std::thread worker([&] {
    ChunkTask t;
    while (q.Pop(&t)) {
      got.push_back(t.chunk);
      q.Done();
    }
  });
  EXPECT_TRUE(q.WaitDrained().ok());
  q.Close();
  worker.join();
  EXPECT_EQ(got, (std::vector<uint64_t>{3, 4}));
}

TEST(WorkQueue, FirstErrorWinsAndStopsEveryone) {
  WorkQueue q;
  q.Push(ChunkTask{1, 0, 0});  // never done
  q.Fail(Status::IOError("first"));
  q.Fail(Status::IOError("second"));
  EXPECT_TRUE(q.aborted());
  EXPECT_EQ(q.WaitDrained().message(), "first");
  ChunkTask t;
  EXPECT_FALSE(q.Pop(&t));
  EXPECT_EQ(q.error().message(), "first");
}

}  // namespace
}  // namespace cachewarm
