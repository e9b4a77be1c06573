// The checked-in golden vectors (tests/vectors/) must be exactly what the writer produces today.
#include <gtest/gtest.h>

#include "../tools/golden_vectors.h"
#include "data_file.h"
#include "testutil.h"

namespace cachewarm {

TEST(GoldenVectors, RegeneratedFilesMatchCheckedInBytes) {
  TempDir tmp;
  Env* env = Env::Default();
  ASSERT_TRUE(WriteGoldenVectors(env, tmp.path()).ok());
  std::vector<std::string> names;
  ASSERT_TRUE(env->GetChildren(tmp.path(), &names).ok());
  ASSERT_GE(names.size(), 5u);  // 3 data files, DONE, vectors.json
  for (const std::string& n : names) {
    std::string fresh, golden;
    ASSERT_TRUE(env->ReadFileToString(tmp.path() + "/" + n, &fresh).ok());
    Status s = env->ReadFileToString(std::string(CACHEWARM_VECTORS_DIR) + "/" + n, &golden);
    ASSERT_TRUE(s.ok()) << "missing golden file " << n << ": " << s.ToString();
    EXPECT_EQ(fresh, golden) << n << " differs from the checked-in golden file";
  }
}

TEST(GoldenVectors, EveryDataFileVerifies) {
  Env* env = Env::Default();
  std::vector<std::string> names;
  ASSERT_TRUE(env->GetChildren(CACHEWARM_VECTORS_DIR, &names).ok());
  int data_files = 0;
  for (const std::string& n : names) {
    ParsedName pn;
    if (!ParseDataFileName(n, &pn)) continue;
    data_files++;
    PublishedFile info;
    std::vector<DataRecord> recs;
    Status s = ReadDataFile(env, CACHEWARM_VECTORS_DIR, n, true, &info, &recs);
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(recs.size(), info.records);
  }
  EXPECT_EQ(data_files, 3);
}

}  // namespace cachewarm
