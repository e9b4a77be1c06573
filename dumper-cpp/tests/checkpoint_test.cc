// The checkpoint (what --resume continues from) and the work queue, without a memcached.
#include <gtest/gtest.h>

#include <thread>

#include "checkpoint.h"
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
  cp.FillManifest(2, &m);  // chunk 2 came from reconciliation
  EXPECT_EQ(m.files.size(), 3u);
  EXPECT_EQ(m.keys_listed, 22u);
  EXPECT_EQ(m.reconciled_keys, 4u);
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
  ASSERT_TRUE(cp.WriteCrawled(7, 700, false, 1.5).ok());
  ASSERT_TRUE(cp.ReadCrawled(&chunks, &by_hash));
  EXPECT_EQ(chunks, 7u);
  EXPECT_FALSE(by_hash);
  EXPECT_FALSE(cp.Reconciled());
  ASSERT_TRUE(cp.WriteReconciled(9, "why not").ok());
  EXPECT_TRUE(cp.Reconciled());
  std::string r;
  ASSERT_TRUE(Env::Default()->ReadFileToString(cp.keys_dir() + "/RECONCILED", &r).ok());
  EXPECT_EQ(r, "{\"chunks\": 9, \"skipped\": \"why not\"}\n");
  EXPECT_FALSE(cp.Done());
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
