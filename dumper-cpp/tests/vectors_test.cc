// The checked-in golden vectors (tests/vectors/: data format v1; v2/, v3/: v2, v3) must be exactly
// what the writer produces today, and must verify.
#include <gtest/gtest.h>

#include <algorithm>

#include "../tools/golden_vectors.h"
#include "data_file.h"
#include "testutil.h"

namespace cachewarm {

namespace {

struct Set {
  uint16_t version;
  std::string dir;  // relative to CACHEWARM_VECTORS_DIR
  int data_files;
};
const Set kSets[] = {{kFormatVersion, "", 3}, {kFormatVersion2, "/v2", 3}, {kFormatVersion3, "/v3", 3}};

bool IsFile(Env* env, const std::string& path) {
  std::string unused;
  return env->ReadFileToString(path, &unused).ok();
}

}  // namespace

TEST(GoldenVectors, RegeneratedFilesMatchCheckedInBytes) {
  Env* env = Env::Default();
  for (const Set& set : kSets) {
    TempDir tmp;
    ASSERT_TRUE(WriteGoldenVectors(env, tmp.path(), set.version).ok());
    std::vector<std::string> names;
    ASSERT_TRUE(env->GetChildren(tmp.path(), &names).ok());
    ASSERT_GE(names.size(), 5u);  // 3 data files, DONE, vectors.json
    for (const std::string& n : names) {
      std::string fresh, golden;
      ASSERT_TRUE(env->ReadFileToString(tmp.path() + "/" + n, &fresh).ok());
      Status s = env->ReadFileToString(std::string(CACHEWARM_VECTORS_DIR) + set.dir + "/" + n, &golden);
      ASSERT_TRUE(s.ok()) << "missing golden file " << set.dir << "/" << n << ": " << s.ToString();
      EXPECT_EQ(fresh, golden) << set.dir << "/" << n << " differs from the checked-in golden file";
    }
    // Nothing checked in that the writer no longer writes (v2/ is v1's subdirectory; the
    // ketama, item-size and clock-watch tables beside v1's files are shared rule tables, not the writer's).
    std::vector<std::string> golden_names;
    ASSERT_TRUE(env->GetChildren(std::string(CACHEWARM_VECTORS_DIR) + set.dir, &golden_names).ok());
    for (const std::string& n : golden_names) {
      if (!IsFile(env, std::string(CACHEWARM_VECTORS_DIR) + set.dir + "/" + n)) continue;
      if (n == "ketama.txt" || n == "spymemcached_ketama.txt" || n == "item_size.txt" || n == "clock_watch.txt") continue;
      EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << "stale golden file " << set.dir << "/" << n;
    }
  }
}

TEST(GoldenVectors, EveryDataFileVerifies) {
  Env* env = Env::Default();
  for (const Set& set : kSets) {
    const std::string dir = std::string(CACHEWARM_VECTORS_DIR) + set.dir;
    std::vector<std::string> names;
    ASSERT_TRUE(env->GetChildren(dir, &names).ok());
    int data_files = 0;
    for (const std::string& n : names) {
      ParsedName pn;
      if (!ParseDataFileName(n, &pn)) continue;
      data_files++;
      PublishedFile info;
      std::vector<DataRecord> recs;
      Status s = ReadDataFile(env, dir, n, true, &info, &recs);
      EXPECT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(recs.size(), info.records);
      EXPECT_EQ(info.version, set.version);
    }
    EXPECT_EQ(data_files, set.data_files);
  }
}

}  // namespace cachewarm
